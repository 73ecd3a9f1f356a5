//! Nothing turns a check off without a word (issue 42): counters reset by a reboot are not
//! evaluated (never a wrap), every name a person gives is checked (exit 2 naming it, with the
//! nearest known one), and a host where no device shows up is NOT EVALUATED (exit 3) in
//! every command, with the count of what it saw in its metrics.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_fabprobe");
const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn fixture(name: &str) -> String {
    format!("{ROOT}/fixtures/{name}")
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn json(args: &[&str]) -> (i32, Value) {
    let mut a = args.to_vec();
    a.extend(["--format", "json"]);
    let o = run(&a);
    let v = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", String::from_utf8_lossy(&o.stderr)));
    (o.status.code().unwrap_or(-1), v)
}

fn ids(v: &Value) -> Vec<String> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap().to_string())
        .collect()
}

// ---------------------------------------------------------------------------------------
// Counter resets
// ---------------------------------------------------------------------------------------

/// The same host 30 s after `ib-degraded`, rebooted in between: every counter restarted.
/// `links --baseline` gives what a single read gives, plus one "not evaluated: the
/// counters were reset", and no delta, rate or wrap anywhere.
#[test]
fn a_reboot_between_samples_is_not_a_wrap() {
    let (later, base) = (fixture("ib-degraded-rebooted"), fixture("ib-degraded"));
    let (code, v) = json(&["--root", &later, "links", "--baseline", &base]);
    let (code1, single) = json(&["--root", &later, "links"]);
    assert_eq!(code, code1);
    let mut want = ids(&single);
    want.push("links.counters_reset".into());
    let mut got = ids(&v);
    want.sort();
    got.sort();
    assert_eq!(got, want);
    let reason = v["data"]["sample"]["counters_reset"].as_str().unwrap();
    assert!(reason.contains("rebooted"), "{reason}");
    let text = v["data"].to_string();
    for bad in ["\"wrapped\"", "\"rate_per_s\":1", "\"rate_per_s\":2", "\"kind\":\"value\""] {
        assert!(!text.contains(bad), "{bad} in a sample across a reboot");
    }
    // The pair without a reboot still judges its deltas (the wrap of the mlx5 q-counter too).
    let (_, v) = json(&["--root", &fixture("ib-degraded-later"), "links", "--baseline", &base]);
    assert!(ids(&v).iter().any(|i| i == "links.errors_increasing"));
    assert!(v["data"]["sample"]["counters_reset"].is_null());
    assert!(v["data"].to_string().contains("\"wrapped\":true"));
}

/// `check --baseline` across the reboot, under every shipped policy: no counter fails, and
/// a policy that judges counter rates says they were not evaluated.
#[test]
fn check_across_a_reboot_judges_no_rate() {
    let (later, base) = (fixture("ib-degraded-rebooted"), fixture("ib-degraded"));
    for policy in ["default", "dgx-h100", "hdr-a100", "roce-dcqcn"] {
        let (_, v) = json(&["--root", &later, "check", "--policy", policy, "--baseline", &base]);
        let got = ids(&v);
        assert!(
            !got.iter().any(|i| i.contains("counters") || i.contains("increasing")),
            "{policy}: {got:?}"
        );
        let ne: Vec<&str> = v["data"]["not_evaluated"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["key"].as_str().unwrap())
            .collect();
        assert!(ne.contains(&"links.counters_reset"), "{policy}: {ne:?}");
    }
}

/// `qos --baseline` against a snapshot whose uptime is shorter than the interval (a
/// snapshot without a boot id): no delta is judged, the counters are read as one sample.
#[test]
fn qos_across_a_reboot_takes_no_delta() {
    let t = tempfile::tempdir().unwrap();
    let later = t.path().join("later");
    let src = fixture("roce-pause-storm-later");
    assert!(Command::new("cp").args(["-a", &src]).arg(&later).status().unwrap().success());
    let meta = later.join("fabprobe/host.json");
    let mut m: Value = serde_json::from_str(&std::fs::read_to_string(&meta).unwrap()).unwrap();
    m["uptime_s"] = 4.5.into();
    std::fs::write(&meta, m.to_string()).unwrap();
    let later = later.to_str().unwrap();
    let base = fixture("roce-pause-storm");
    let (_, v) = json(&["--root", later, "qos", "--baseline", &base]);
    let (_, single) = json(&["--root", later, "qos"]);
    let got = ids(&v);
    assert!(got.iter().any(|i| i == "qos.counters_reset"), "{got:?}");
    let mut rest: Vec<String> = got.into_iter().filter(|i| i != "qos.counters_reset").collect();
    let mut want = ids(&single);
    rest.sort();
    want.sort();
    assert_eq!(rest, want);
    assert!(!v["data"].to_string().contains("\"delta\":1"));
    // The untouched pair still judges its deltas.
    let (_, v) = json(&["--root", &src, "qos", "--baseline", &base]);
    assert!(!ids(&v).iter().any(|i| i == "qos.counters_reset"));
}

// ---------------------------------------------------------------------------------------
// Names a person gives
// ---------------------------------------------------------------------------------------

fn refused(args: &[&str], names: &[&str]) {
    let o = run(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    for n in names {
        assert!(err.contains(n), "{args:?}: `{n}` not in: {err}");
    }
    assert!(o.stdout.is_empty(), "{args:?}");
}

#[test]
fn unknown_names_are_refused_with_the_nearest() {
    let bad = fixture("h100-sxm-8gpu-bad");
    let roce = fixture("roce-qos-mismatch");
    refused(&["--root", &bad, "check", "--require", "nosuch.thing"], &["nosuch.thing"]);
    refused(
        &["--root", &bad, "check", "--require", "counters.max_per_hor"],
        &["counters.max_per_hor", "did you mean `counters.max_per_hour`"],
    );
    refused(&["--root", &bad, "check", "--require", "host.memlok_unlimited"], &["host.memlock_unlimited"]);
    refused(&["--root", &roce, "qos", "--ifname", "ens1f0pn0"], &["ens1f0pn0", "did you mean `ens1f0np0`"]);
    refused(&["--root", &roce, "qos", "--ifname", "ens1f0np0", "--ifname", "nope0"], &["nope0"]);
    refused(&["--root", &bad, "gids", "--device", "mlx5_99"], &["mlx5_99", "did you mean"]);
    refused(&["--root", &fixture("cpu-only"), "gids", "--device", "mlx5_0"], &["mlx5_0", "lists nothing"]);
    refused(&["--root", &fixture("cpu-only"), "qos", "--ifname", "ib0"], &["ib0"]);
    // A policy file's require is checked the same way, naming the file's key.
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("p.toml");
    std::fs::write(&p, "[policy]\nrequire = [\"gpu.cont\"]\n").unwrap();
    refused(&["--root", &bad, "check", "--policy", p.to_str().unwrap()], &["policy.require", "gpu.count"]);
}

/// Every key fabprobe lists as requirable is accepted, by the CLI too; a part of a table
/// key (one counter of counters.max_per_hour) names something real.
#[test]
fn every_known_require_key_is_accepted() {
    let keys = fabprobe::check::policy::require_keys();
    assert!(keys.len() > 40, "{keys:?}");
    for k in &keys {
        assert_eq!(fabprobe::check::policy::check_require(k), Ok(()), "{k}");
    }
    for k in ["counters.max_per_hour.symbol_error", "host", "links.port_state_unknown", "gdr.acs"] {
        assert!(keys.contains(&k.to_string()) || k.starts_with("counters."), "{k}");
        let o = run(&["--root", &fixture("ib-degraded"), "check", "--require", k]);
        assert_ne!(o.status.code(), Some(2), "{k}: {}", String::from_utf8_lossy(&o.stderr));
    }
}

// ---------------------------------------------------------------------------------------
// Nothing to judge
// ---------------------------------------------------------------------------------------

/// Every command that judges devices, in every format, on a host with no GPU and no RDMA
/// device (the fixture, and this machine when it has none): NOT EVALUATED, exit 3, and
/// the metrics count 0 devices.
#[test]
fn nothing_to_judge_is_not_evaluated_in_every_command() {
    let cpu = fixture("cpu-only");
    let mut roots: Vec<Option<&str>> = vec![Some(&cpu)];
    let live_bare = !Path::new("/sys/class/infiniband").exists() && !Path::new("/dev/nvidiactl").exists();
    if live_bare {
        roots.push(None);
    }
    for root in roots {
        for (cmd, formats) in [
            ("topo", &["table", "json"][..]),
            ("gids", &["table", "json", "prom"]),
            ("links", &["table", "json", "prom"]),
            ("gdr", &["table", "json"]),
            ("qos", &["table", "json", "prom"]),
            ("check", &["table", "json", "prom"]),
        ] {
            for f in formats {
                let mut args = Vec::new();
                if let Some(r) = root {
                    args.extend(["--root", r]);
                }
                args.extend(["--format", f, cmd]);
                let o = run(&args);
                let out = String::from_utf8_lossy(&o.stdout);
                let err = String::from_utf8_lossy(&o.stderr);
                assert_eq!(o.status.code(), Some(3), "{args:?}: {out}{err}");
                match *f {
                    "table" if cmd == "topo" => assert!(err.contains("topo: NOT EVALUATED"), "{err}"),
                    "table" => assert!(out.lines().next().unwrap().contains("NOT EVALUATED"), "{out}"),
                    "json" if cmd == "check" => {
                        let v: Value = serde_json::from_str(&out).unwrap();
                        assert_eq!(v["data"]["verdict"], "unknown");
                    }
                    "json" => {
                        let v: Value = serde_json::from_str(&out).unwrap();
                        let id = format!("{}.nothing_to_judge", cmd);
                        assert!(ids(&v).contains(&id), "{args:?}: {:?}", ids(&v));
                    }
                    _ => {
                        let prom_cmd = cmd.replace('-', "_");
                        assert!(out.contains(&format!("fabprobe_{prom_cmd}_verdict")), "{out}");
                        assert!(
                            out.lines().any(|l| l.starts_with(&format!("fabprobe_{prom_cmd}_verdict")) && l.ends_with(" 3")),
                            "{out}"
                        );
                        let counted = out
                            .lines()
                            .filter(|l| l.starts_with(&format!("fabprobe_{prom_cmd}_devices{{")))
                            .collect::<Vec<_>>();
                        assert!(!counted.is_empty() && counted.iter().all(|l| l.ends_with(" 0")), "{out}");
                    }
                }
            }
        }
    }
}

/// Where devices are, the metrics count them and the verdict is a verdict.
#[test]
fn metrics_count_the_devices_seen() {
    let o = run(&["--root", &fixture("ib-degraded"), "--format", "prom", "links"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("fabprobe_links_devices{kind=\"rdma\"} 4\n"), "{out}");
    let o = run(&["--root", &fixture("h100-sxm-8gpu-bad"), "--format", "prom", "check"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("kind=\"gpu\"} 8\n"), "{out}");
    assert_eq!(o.status.code(), Some(1));
}

// ---------------------------------------------------------------------------------------
// Known daemons
// ---------------------------------------------------------------------------------------

/// Every daemon of the list (taken from the packages that ship them, cited beside it),
/// holding a GPU or an RDMA device file, is a daemon, known by its exe, its argv[0] or its
/// 15-byte comm, and never a holder that fails `device_holders_max`; the job beside them is.
#[test]
fn every_known_daemon_is_told_from_jobs() {
    use fabprobe::host::facts::{GPU_DAEMONS, scan_processes};
    use std::os::unix::fs::symlink;
    for by in ["exe", "cmdline", "comm"] {
        let t = tempfile::tempdir().unwrap();
        let p = t.path();
        let mut procs: Vec<&str> = GPU_DAEMONS.iter().map(|d| d.0).collect();
        procs.push("python3");
        for (i, name) in procs.iter().enumerate() {
            let dir = p.join((1000 + i).to_string());
            std::fs::create_dir_all(dir.join("fd")).unwrap();
            let comm = &name[..name.len().min(15)];
            std::fs::write(dir.join("comm"), format!("{comm}\n")).unwrap();
            match by {
                "exe" => symlink(format!("/usr/bin/{name}"), dir.join("exe")).unwrap(),
                "cmdline" => std::fs::write(dir.join("cmdline"), format!("/usr/bin/{name}\0--flag\0")).unwrap(),
                _ => {}
            }
            let dev = if i % 2 == 0 { "/dev/nvidia0" } else { "/dev/infiniband/uverbs1" };
            symlink(dev, dir.join("fd").join("3")).unwrap();
        }
        let s = scan_processes(p);
        assert_eq!(s.daemons.len(), GPU_DAEMONS.len(), "by {by}: {:?}", s.holders);
        for (d, name) in s.daemons.iter().zip(&procs) {
            assert_eq!(d.identified_by, by);
            // The two MPS daemons share the comm `nvidia-cuda-mps`: by comm, one of them.
            let cut = |n: &str| n[..n.len().min(15)].to_string();
            match by {
                "comm" => assert_eq!(cut(&d.daemon), cut(name)),
                _ => assert_eq!(&d.daemon, name),
            }
        }
        assert_eq!(s.holders.len(), 1, "by {by}");
        assert_eq!(s.holders[0].comm.as_deref(), Some("python3"));
    }
}
