//! `fabprobe ring` from the outside, without root: --local runs, usage errors, deadlines.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

fn fabprobe(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .args(args)
        .env_clear()
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn local_ring_json_contract() {
    let o = fabprobe(&[
        "ring", "--local", "3", "-b", "4K", "-e", "16K", "-n", "2", "--format", "json",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["schema"], "fabprobe.ring");
    let d = &j["data"];
    assert_eq!(d["world"], 3);
    assert_eq!(d["launcher"]["source"], "local");
    let results = d["results"].as_array().unwrap();
    assert_eq!(
        results
            .iter()
            .map(|r| r["size_bytes"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [4096, 8192, 16384]
    );
    for r in results {
        for k in ["count", "time_us", "algbw_gbs", "busbw_gbs"] {
            assert!(r[k].is_number(), "{k} in {r}");
        }
        assert_eq!(r["wrong"], 0);
        let (alg, bus) = (r["algbw_gbs"].as_f64().unwrap(), r["busbw_gbs"].as_f64().unwrap());
        assert!(
            (bus - alg * 4.0 / 3.0).abs() < 1e-9,
            "busbw = algbw x 2(n-1)/n: {r}"
        );
        // The in-place half: its own time, verified exactly too.
        let ip = &r["in_place"];
        assert_eq!(ip["wrong"], 0, "{r}");
        let (t, alg, bus) = (
            ip["time_us"].as_f64().unwrap(),
            ip["algbw_gbs"].as_f64().unwrap(),
            ip["busbw_gbs"].as_f64().unwrap(),
        );
        assert!(t > 0.0, "{r}");
        assert!(
            (alg - r["size_bytes"].as_f64().unwrap() / t / 1e3).abs() < 1e-9,
            "{r}"
        );
        assert!((bus - alg * 4.0 / 3.0).abs() < 1e-9, "in-place busbw: {r}");
    }
    let links = d["links"].as_array().unwrap();
    assert_eq!(links.len(), 3);
    for l in links {
        for k in ["from_rank", "to_rank", "from_host", "to_host", "gbs"] {
            assert!(!l[k].is_null(), "{k} in {l}");
        }
    }
    let ranks = d["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 3);
    assert!(
        ranks
            .iter()
            .all(|r| r["transport"] == "tcp" && r["address"].as_str().unwrap().starts_with("127.0.0.1:"))
    );
    assert!(d["error"].is_null());
    assert_eq!(j["findings"].as_array().unwrap().len(), 0);
}

#[test]
fn no_check_shows_na() {
    let o = fabprobe(&[
        "ring", "--local", "2", "-b", "1K", "-e", "1K", "-n", "1", "-c", "0",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let t = text(&o.stdout);
    let row = t.lines().find(|l| l.trim_start().starts_with("1024")).unwrap();
    // Both halves' #wrong: 13 columns, the 9th (out of place) and the last (in place).
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!((cols.len(), cols[8], cols[12]), (13, "N/A", "N/A"), "{row}");
    assert!(t.contains("in-place"), "{t}");
}

/// `--local N --rails R`: R rings at once, rows summed over rails, each rail's own rows in
/// `data.rails[]`, each rank's rails in `data.ranks[].rails[]`, hops tagged with their rail.
#[test]
fn local_rails_json_contract() {
    let o = fabprobe(&[
        "ring", "--local", "3", "--rails", "2", "-b", "4K", "-e", "16K", "-n", "2", "--format", "json",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let d = &j["data"];
    assert_eq!(d["world"], 3);
    let rails = d["rails"].as_array().unwrap();
    assert_eq!(
        rails
            .iter()
            .map(|r| r["rail"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [0, 1]
    );
    let results = d["results"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    for (i, row) in results.iter().enumerate() {
        let per: Vec<&serde_json::Value> = rails.iter().map(|r| &r["results"][i]).collect();
        let sum = |k: &str| per.iter().map(|r| r[k].as_f64().unwrap()).sum::<f64>();
        let max = |k: &str| per.iter().map(|r| r[k].as_f64().unwrap()).fold(0.0, f64::max);
        assert!(
            (row["busbw_gbs"].as_f64().unwrap() - sum("busbw_gbs")).abs() < 1e-9,
            "{row}"
        );
        assert!(
            (row["algbw_gbs"].as_f64().unwrap() - sum("algbw_gbs")).abs() < 1e-9,
            "{row}"
        );
        assert_eq!(row["time_us"].as_f64().unwrap(), max("time_us"), "{row}");
        assert_eq!(row["wrong"], 0);
        assert_eq!(row["in_place"]["wrong"], 0);
        for r in &per {
            assert_eq!(r["size_bytes"], row["size_bytes"]);
        }
    }
    for r in d["ranks"].as_array().unwrap() {
        let rr = r["rails"].as_array().unwrap();
        assert_eq!(rr.len(), 2, "{r}");
        for (k, s) in rr.iter().enumerate() {
            assert_eq!(s["rail"], k as u64);
            assert_eq!(s["label"], "lo");
            assert!(s["address"].as_str().unwrap().starts_with("127.0.0.1:"), "{s}");
        }
        // Each rail listens on its own data port.
        assert_ne!(rr[0]["address"], rr[1]["address"]);
    }
    let links = d["links"].as_array().unwrap();
    assert_eq!(links.len(), 6);
    assert_eq!(links.iter().filter(|l| l["rail"] == 1).count(), 3);
    assert!(d["verdicts"].as_array().unwrap().is_empty());
    assert!(d["error"].is_null());
    // The single-rail JSON carries no rail fields at all.
    let o = fabprobe(&[
        "ring", "--local", "2", "-b", "4K", "-e", "4K", "-n", "1", "--format", "json",
    ]);
    let one = text(&o.stdout);
    assert!(!one.contains("\"rails\"") && !one.contains("\"rail\""), "{one}");
}

#[test]
fn usage_errors_exit_2() {
    for (args, want) in [
        (
            vec!["ring", "--local", "2", "--transport", "rdma"],
            "--transport rdma needs one rank per host",
        ),
        (vec!["ring"], "no rank and world size"),
        (
            vec!["ring", "--local", "2", "--format", "prom"],
            "does not support --format prom",
        ),
        (
            vec!["ring", "--rank", "0", "--world", "2"],
            "no coordinator address",
        ),
        (
            vec!["ring", "--local", "2", "-b", "8M", "-e", "1M"],
            "larger than -e",
        ),
        (
            vec!["ring", "--local", "2", "--ifname", "=nosuchif0"],
            "no data interface matches =nosuchif0",
        ),
        (
            vec!["ring", "--local", "2", "--scan", "--no-scan"],
            "cannot be used with",
        ),
        (
            vec!["ring", "--local", "2", "--rails", "0"],
            "--rails \"0\": expected `all`",
        ),
        (
            vec!["ring", "--local", "2", "--rails", "1,1"],
            "rail 1 is listed twice",
        ),
        (
            vec!["ring", "--local", "2", "--rails", "all"],
            "--local runs a number of rails",
        ),
    ] {
        let o = fabprobe(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
        assert!(text(&o.stderr).contains(want), "{args:?}: {}", text(&o.stderr));
    }
}

#[test]
fn missing_rank_ends_at_the_deadline() {
    let t0 = Instant::now();
    let o = fabprobe(&[
        "ring",
        "--rank",
        "0",
        "--world",
        "2",
        "--coordinator",
        "127.0.0.1:0",
        "--ifname",
        "lo",
        "--timeout",
        "1",
        "--join-timeout",
        "1",
    ]);
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("1 of 2 ranks never reached the coordinator"),
        "{}",
        text(&o.stderr)
    );
    assert!(text(&o.stderr).contains("missing rank 1;"), "{}", text(&o.stderr));
}

#[test]
fn local_scan_json_contract() {
    // Loopback ranks share one CPU, so a verdict is possible (exit 1); the contract is the
    // shape: every directed link measured, the orders named, no AllReduce rows.
    let o = fabprobe(&[
        "ring",
        "--local",
        "3",
        "--scan",
        "--scan-bytes",
        "1M",
        "--format",
        "json",
    ]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let d = &j["data"];
    assert_eq!(d["results"].as_array().unwrap().len(), 0);
    let s = &d["scan"];
    let orders: Vec<&str> = s["orders"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["recheck"] == false)
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    assert_eq!(orders, ["natural", "reversed"]);
    let links = s["links"].as_array().unwrap();
    assert_eq!(links.len(), 6);
    for l in links {
        assert!(
            l["gbs"].as_f64().unwrap() > 0.0 && l["samples"].as_u64().unwrap() >= 3,
            "{l}"
        );
    }
    assert_eq!(
        o.status.code() == Some(1),
        !d["verdicts"].as_array().unwrap().is_empty()
    );
    // Without --scan, --local runs no scan.
    let o = fabprobe(&[
        "ring", "--local", "2", "-b", "4K", "-e", "4K", "-n", "1", "--format", "json",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(j["data"]["scan"].is_null());
}

/// `--coordinator HOST` without a port: every rank takes `$FABPROBE_PORT`.
#[test]
fn fabprobe_port_is_the_coordinator_port_when_none_is_given() {
    let port = common::server_port().to_string();
    let spawn = |rank: &str| {
        Command::new(env!("CARGO_BIN_EXE_fabprobe"))
            .args([
                "ring",
                "--rank",
                rank,
                "--world",
                "2",
                "--coordinator",
                "127.0.0.1",
                "--ifname",
                "lo",
                "--token",
                "port",
                "-b",
                "4K",
                "-e",
                "4K",
                "-n",
                "1",
                "--no-scan",
                "--timeout",
                "20",
                "--format",
                "json",
            ])
            .env_clear()
            .env("FABPROBE_PORT", &port)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (r0, r1) = (spawn("0"), spawn("1"));
    let (o0, o1) = (r0.wait_with_output().unwrap(), r1.wait_with_output().unwrap());
    assert!(o0.status.success(), "{}", text(&o0.stderr));
    assert!(o1.status.success(), "{}", text(&o1.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o0.stdout).unwrap();
    assert_eq!(j["data"]["launcher"]["coordinator"], format!("127.0.0.1:{port}"));
    assert_eq!(j["data"]["results"][0]["wrong"], 0);
    // Alone, rank 0 names the address it waited on.
    let o = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .args([
            "ring",
            "--rank",
            "0",
            "--world",
            "2",
            "--coordinator",
            "127.0.0.1",
            "--ifname",
            "lo",
            "--timeout",
            "1",
            "--join-timeout",
            "1",
        ])
        .env_clear()
        .env("FABPROBE_PORT", &port)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains(&format!("never reached the coordinator at 127.0.0.1:{port}")),
        "{}",
        text(&o.stderr)
    );
}

/// Whether this kernel shows any RDMA device (then the next test has nothing to test).
fn host_has_rdma() -> bool {
    std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some())
}

/// On a host without RDMA (this one: the kernel has no ib_uverbs, so ibv_get_device_list
/// fails with ENOSYS) `--transport rdma` cannot run: exit 2 with the reason, before joining.
/// `--transport auto` runs over tcp and the header says so, and why.
#[test]
fn rdma_without_rdma_exits_2_and_auto_falls_back_to_tcp() {
    if host_has_rdma() {
        common::lab_unavailable(
            "rdma_without_rdma_exits_2_and_auto_falls_back_to_tcp",
            "this host has RDMA devices: the no-RDMA contract is not testable here (the VM lab tests rdma)",
        );
        return;
    }
    let t0 = Instant::now();
    let o = fabprobe(&[
        "ring",
        "--rank",
        "0",
        "--world",
        "2",
        "--coordinator",
        "127.0.0.1:0",
        "--ifname",
        "=lo",
        "--transport",
        "rdma",
        "--timeout",
        "5",
    ]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "it waited for a peer: {:?}",
        t0.elapsed()
    );
    assert!(err.contains("--transport rdma cannot run here: "), "{err}");
    // The reason libibverbs gave: no kernel support, or no device.
    assert!(
        err.contains("ibv_get_device_list failed: Function not implemented")
            || err.contains("libibverbs lists no RDMA devices")
            || err.contains("without the `rdma` feature"),
        "{err}"
    );
    assert!(
        err.contains("hint: ") || err.contains("without the `rdma` feature"),
        "{err}"
    );

    let port = common::server_port();
    let coord = format!("127.0.0.1:{port}");
    let args = |r: &'static str| {
        vec![
            "ring".to_string(),
            "--rank".into(),
            r.into(),
            "--world".into(),
            "2".into(),
            "--coordinator".into(),
            coord.clone(),
            "--ifname".into(),
            "=lo".into(),
            "--transport".into(),
            "auto".into(),
            "-b".into(),
            "4K".into(),
            "-e".into(),
            "4K".into(),
            "-n".into(),
            "1".into(),
            "--no-scan".into(),
            "--timeout".into(),
            "10".into(),
        ]
    };
    let rank1 = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .args(args("1"))
        .env_clear()
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .args(args("0"))
        .env_clear()
        .output()
        .unwrap();
    let r1 = rank1.wait_with_output().unwrap();
    let out = text(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}\n{}",
        text(&o.stderr),
        text(&r1.stderr)
    );
    assert!(r1.status.success(), "{}", text(&r1.stderr));
    assert!(out.contains("all_reduce over tcp"), "{out}");
    let note = out
        .lines()
        .find(|l| l.starts_with("# transport: "))
        .unwrap_or_else(|| panic!("no transport line in the header:\n{out}"));
    assert!(
        note.starts_with("# transport: auto chose tcp: rank 0 ("),
        "{note}"
    );
    assert!(note.contains("has no usable RDMA port: "), "{note}");
    assert!(out.contains(" device lo [127.0.0.1:"), "{out}");
}

#[test]
fn non_finite_scan_time_is_a_flag_error_not_a_panic() {
    for v in ["inf", "NaN", "-1", "1e300"] {
        let flag = format!("--scan-time={v}");
        let o = fabprobe(&["ring", "--local", "2", "-b", "4K", "-e", "4K", "--scan", &flag]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{v}: {err}");
        assert!(
            err.contains("--scan-time") && !err.contains("panicked"),
            "{v}: {err}"
        );
    }
}

#[test]
fn the_table_carries_each_ranks_capabilities() {
    let o = fabprobe(&[
        "ring",
        "--local",
        "2",
        "-b",
        "4K",
        "-e",
        "4K",
        "--no-scan",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let ranks = j["data"]["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 2);
    for r in ranks {
        assert_eq!(r["capabilities"], serde_json::json!(["tcp"]), "{r}");
    }
}

/// Rows print as each size completes (as nccl-tests does) when a person watches a terminal:
/// the first size's row is on the terminal while the last, 1,024 times larger, is still
/// running; the whole table at the end is the header, every row once in order, then the
/// summary. The terminal is a real pseudo-terminal (util-linux `script`): to a pipe the
/// report comes whole at the end, by design, so a piped child only ever passed this test
/// when it had not exited yet.
#[test]
fn rows_print_as_each_size_completes() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let bin = env!("CARGO_BIN_EXE_fabprobe");
    // Enough iterations that the last size runs for seconds after the first row.
    let cmd = format!("{bin} ring --local 2 -b 64K -e 64M -n 30 -w 1 --no-scan 2>/dev/null");
    let mut child = Command::new("script")
        .args(["-q", "-e", "-c", &cmd, "/dev/null"])
        .env_clear()
        .env("TERM", "dumb")
        .env("COLUMNS", "200")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("util-linux script");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let row = |l: &str, size: &str| {
        let l = l.rsplit('\r').find(|p| !p.trim().is_empty()).unwrap_or("");
        l.split_whitespace().next() == Some(size) && l.contains("float")
    };
    let mut lines = Vec::new();
    loop {
        let mut l = String::new();
        assert!(
            out.read_line(&mut l).unwrap() > 0,
            "the terminal closed before a row: {lines:?}"
        );
        let first_row = row(&l, "65536");
        lines.push(l);
        if first_row {
            break;
        }
    }
    let running = child.try_wait().unwrap().is_none();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(child.wait().unwrap().success());
    assert!(running, "the first row came only when the run was over");
    let all: String = lines.concat() + &rest;
    let sizes: Vec<u64> = all
        .lines()
        .filter(|l| (16..=26).any(|p| row(l, &(1u64 << p).to_string())))
        .filter_map(|l| l.rsplit('\r').find(|p| !p.trim().is_empty())?.split_whitespace().next()?.parse().ok())
        .collect();
    assert_eq!(sizes, (16..=26).map(|p| 1u64 << p).collect::<Vec<_>>(), "{all}");
    assert_eq!(all.matches("# Using devices").count(), 1, "{all}");
    assert!(all.contains("# Out of bounds values : 0 OK"), "{all}");
}

/// The data interface follows NCCL_SOCKET_IFNAME as the settings model has it: from an
/// `NCCL_CONF_FILE` line, and from `--env-file`, not only from fabprobe's own environment.
#[test]
fn socket_ifname_comes_from_the_settings_model() {
    let tmp = tempfile::tempdir().unwrap();
    let conf = tmp.path().join("nccl.conf");
    std::fs::write(&conf, "NCCL_SOCKET_IFNAME==fpnosuch0\n").unwrap();
    let args = [
        "ring",
        "--rank",
        "1",
        "--world",
        "2",
        "--coordinator",
        "127.0.0.1:9",
        "--timeout",
        "2",
    ];
    let o = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .args(args)
        .env_clear()
        .env("NCCL_CONF_FILE", &conf)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("no data interface matches =fpnosuch0"),
        "{}",
        text(&o.stderr)
    );
    let env = tmp.path().join("job.env");
    std::fs::write(&env, "NCCL_SOCKET_IFNAME==fpnosuch1\n").unwrap();
    let mut with_file = vec!["--env-file", env.to_str().unwrap()];
    with_file.extend(args);
    let o = fabprobe(&with_file);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("no data interface matches =fpnosuch1"),
        "{}",
        text(&o.stderr)
    );
}

/// `--root` is hidden from ring's help and refused by name wherever it is given; the help
/// says which formats ring prints, and other formats are refused naming the ones it has.
#[test]
fn ring_help_offers_only_what_ring_does() {
    let o = fabprobe(&["ring", "--help"]);
    assert!(o.status.success());
    let help = text(&o.stdout);
    // No option line offers it (the OUTPUT section says it is refused).
    assert!(
        !help.lines().any(|l| l.trim_start().starts_with("--root")),
        "{help}"
    );
    assert!(help.contains("and so is --root"), "{help}");
    assert!(help.contains("--format table (the default): the verdict first"), "{help}");
    for args in [
        &["ring", "--root", "/nonexistent", "--local", "2"][..],
        &["--root", "/nonexistent", "ring", "--local", "2"][..],
    ] {
        let o = fabprobe(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let e = text(&o.stderr);
        assert!(e.contains("--root cannot be used with it"), "{args:?}: {e}");
    }
    let o = fabprobe(&["ring", "--local", "2", "--format", "prom"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("does not support --format prom; use one of: table, json"),
        "{}",
        text(&o.stderr)
    );
}

/// A healthy local run leads with the one line that says so, with the figures it rests on:
/// stdout here is a pipe, so the rows do not stream and the verdict comes first.
#[test]
fn healthy_local_run_says_so() {
    let o = fabprobe(&["ring", "--local", "2", "-b", "4K", "-e", "4K", "-n", "1", "--no-scan"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let last = out.lines().next().unwrap();
    assert!(
        last.starts_with("no slow link, no hang: 2 ranks over tcp, 1 size(s), avg busbw "),
        "{out}"
    );
    // The nccl-tests table follows it.
    assert!(out.contains("# Avg bus bandwidth"), "{out}");
    assert!(last.contains(", slowest link rank "), "{out}");
}
