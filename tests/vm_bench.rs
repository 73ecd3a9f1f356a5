//! The RDMA ring's bandwidth in the VM lab against perftest's `ib_write_bw` on the same VMs,
//! every VM's egress shaped with `tc tbf` to 100 Mbit/s (where TCG is not the limit). A
//! benchmark, not a test: it asserts nothing about speed, it prints the figures.
//!
//! Run it (as root, QEMU installed; about 3 minutes):
//!   cargo test --release --locked --test vm_bench -- --ignored --nocapture --test-threads 1
//! Each line: what ran, its bandwidth in Gb/s per direction of one link, and the share of
//! the shaper's rate. RoCE v2 at MTU 1024 carries at most ~94.6% of a tbf rate as payload.

mod common;
mod vmlab;

use std::time::{Duration, Instant};

use vmlab::{VmLab, VmOpts};

const RATE_MBIT: f64 = 100.0;

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

fn report(what: &str, gbps: f64) {
    let line = format!(
        "BENCH {what:<58} {gbps:>7.4} Gb/s  {:>5.1}% of the {RATE_MBIT} Mbit/s shaper",
        gbps * 1000.0 / RATE_MBIT * 100.0
    );
    // Past cargo's capture, and into the results file when asked for one.
    eprintln!("{line}");
    if let Ok(p) = std::env::var("FABPROBE_BENCH_OUT") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(p) {
            let _ = writeln!(f, "{line}");
        }
    }
}

/// `fabprobe ring` on every VM; the busbw of the largest row (out-of-place and in-place
/// averaged) in Gb/s: what each link carried per direction.
fn ring_busbw(lab: &VmLab, transport: &str, size: &str) -> f64 {
    let world = lab.vms.len();
    let t0 = Instant::now();
    let jobs: Vec<vmlab::Job> = (0..world)
        .map(|r| {
            let extra = [
                "--transport",
                transport,
                "-b",
                size,
                "-e",
                size,
                "-n",
                "3",
                "-w",
                "1",
                "--no-scan",
                "--timeout",
                "60",
                "--format",
                "json",
            ];
            let a = vmlab::ring_args(lab, r, world, &extra);
            lab.spawn_fabprobe(r, &a.iter().map(|s| s.as_str()).collect::<Vec<_>>())
        })
        .collect();
    let outs: Vec<vmlab::VmOutput> = jobs
        .iter()
        .map(|j| lab.wait(j, Duration::from_secs(600)))
        .collect();
    assert!(outs.iter().all(|o| o.ok()), "{outs:?}");
    let v = json(&outs[0].stdout);
    let row = v["data"]["results"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(row["wrong"], 0, "{row}");
    let b = (row["busbw_gbs"].as_f64().unwrap() + row["in_place"]["busbw_gbs"].as_f64().unwrap()) / 2.0;
    eprintln!(
        "  ({world} VMs, {transport}, {size}: {:?} wall; row {row})",
        t0.elapsed()
    );
    b * 8.0
}

/// `ib_write_bw -b` (both directions at once) between VM 0 and VM 1: Gb/s per direction.
fn ib_write_bw_bidir(lab: &VmLab) -> f64 {
    let args = "-d rxe0 -x 1 -s 1048576 -n 60 -F -b --report_gbits";
    let server = lab.spawn(1, &format!("exec ib_write_bw {args}"));
    std::thread::sleep(Duration::from_secs(1));
    let mut client = None;
    for _ in 0..20 {
        let o = lab.exec(
            0,
            &format!("ib_write_bw {args} {}", lab.vms[1].ip),
            Duration::from_secs(300),
        );
        if o.ok() {
            client = Some(o);
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let client = client.expect("ib_write_bw never connected");
    let s = lab.wait(&server, Duration::from_secs(120));
    assert!(s.ok(), "{s:?}");
    // The result row: #bytes #iterations BW peak BW average MsgRate; -b sums both directions.
    let row = client
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("1048576"))
        .unwrap_or_else(|| panic!("no result row:\n{}", client.stdout));
    let avg: f64 = row.split_whitespace().nth(3).unwrap().parse().unwrap();
    avg / 2.0
}

#[test]
#[ignore = "a benchmark (minutes): run with --ignored"]
fn bench_two_vms() {
    let mut o = VmOpts::new(2);
    o.rate = Some(format!("{RATE_MBIT}mbit"));
    let Some(lab) = VmLab::new("bench_two_vms", o) else {
        return;
    };
    report(
        "ib_write_bw -b -s 1M, per direction (2 VMs)",
        ib_write_bw_bidir(&lab),
    );
    report(
        "fabprobe ring --transport rdma 16M busbw (2 VMs)",
        ring_busbw(&lab, "rdma", "16M"),
    );
    report(
        "fabprobe ring --transport tcp 16M busbw (2 VMs)",
        ring_busbw(&lab, "tcp", "16M"),
    );
}

#[test]
#[ignore = "a benchmark (minutes): run with --ignored"]
fn bench_four_vms() {
    let mut o = VmOpts::new(4);
    o.rate = Some(format!("{RATE_MBIT}mbit"));
    let Some(lab) = VmLab::new("bench_four_vms", o) else {
        return;
    };
    report(
        "fabprobe ring --transport rdma 16M busbw (4 VMs)",
        ring_busbw(&lab, "rdma", "16M"),
    );
    report(
        "fabprobe ring --transport tcp 16M busbw (4 VMs)",
        ring_busbw(&lab, "tcp", "16M"),
    );
}

/// `fabprobe ring --rails all --transport rdma` on every VM (two NICs each: rail k on
/// `eth<k>`/`rxe<k>`) with `extra`; rank 0's JSON, after checking every rank exited 0.
fn rails_run(lab: &VmLab, extra: &[&str]) -> serde_json::Value {
    let (v, codes) = rails_run_codes(lab, extra);
    assert!(codes.iter().all(|c| *c == 0), "exit codes {codes:?}: {v}");
    v
}

/// [`rails_run`] without judging the exit codes: rank 0's JSON and every rank's code.
fn rails_run_codes(lab: &VmLab, extra: &[&str]) -> (serde_json::Value, Vec<i32>) {
    let world = lab.vms.len();
    let t0 = Instant::now();
    let jobs: Vec<vmlab::Job> = (0..world)
        .map(|r| {
            let mut rails = vec![
                "--transport",
                "rdma",
                "--rails",
                "all",
                "--timeout",
                "60",
                "--format",
                "json",
            ];
            rails.extend_from_slice(extra);
            let a = vmlab::ring_args(lab, r, world, &rails);
            lab.spawn_fabprobe(r, &a.iter().map(|s| s.as_str()).collect::<Vec<_>>())
        })
        .collect();
    let outs: Vec<vmlab::VmOutput> = jobs
        .iter()
        .map(|j| lab.wait(j, Duration::from_secs(600)))
        .collect();
    eprintln!("  ({world} VMs, rails all, {extra:?}: {:?} wall)", t0.elapsed());
    let codes = outs.iter().map(|o| o.rc).collect();
    for (r, o) in outs.iter().enumerate() {
        if !o.ok() {
            eprintln!("  rank {r} exited {}: {}", o.rc, o.stderr.trim());
        }
    }
    if outs[0].stdout.trim().is_empty() {
        panic!("rank 0 printed nothing: {outs:?}");
    }
    (json(&outs[0].stdout), codes)
}

/// Each rail's busbw at the largest size (out of place and in place averaged), in Gb/s.
fn rail_busbw(v: &serde_json::Value) -> Vec<f64> {
    v["data"]["rails"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert!(r["error"].is_null(), "{r}");
            let row = r["results"].as_array().unwrap().last().unwrap();
            assert_eq!(row["wrong"], 0, "{row}");
            assert_eq!(row["in_place"]["wrong"], 0, "{row}");
            eprintln!("  rail {}: row {row}", r["rail"]);
            (row["busbw_gbs"].as_f64().unwrap() + row["in_place"]["busbw_gbs"].as_f64().unwrap()) / 2.0 * 8.0
        })
        .collect()
}

/// Each rail's scan: every link in Mbit/s, the median, and the ranks' CPU wait where a
/// figure was not judged for it.
fn rail_scan_links(v: &serde_json::Value) {
    for r in v["data"]["rails"].as_array().unwrap() {
        let sc = &r["scan"];
        let links: Vec<String> = sc["links"]
            .as_array()
            .map(|ls| {
                ls.iter()
                    .map(|l| {
                        format!(
                            "{}->{} {:.1}",
                            l["from_rank"],
                            l["to_rank"],
                            l["gbs"].as_f64().unwrap_or(f64::NAN) * 8000.0
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        eprintln!(
            "  rail {} scan links (Mbit/s): {}; median {:.1}; not judged: {}",
            r["rail"],
            links.join(", "),
            sc["median_gbs"].as_f64().unwrap_or(f64::NAN) * 8000.0,
            sc["not_judged"]
                .as_array()
                .map(|n| n
                    .iter()
                    .map(|x| x["evidence"].to_string())
                    .collect::<Vec<_>>()
                    .join("; "))
                .unwrap_or_default()
        );
    }
}

/// The shaper of every NIC in `bench_rails_three_vms`, Mbit/s (`FABPROBE_BENCH_RAIL_MBIT`).
fn rail_rate_mbit() -> f64 {
    std::env::var("FABPROBE_BENCH_RAIL_MBIT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0)
}

/// `--rails all` over RDMA, three VMs with two NICs and two vCPUs each (as
/// `ring_rdma_rails_three_vms`): each rail's busbw unshaped and the scan's links (what the
/// TCG guests carry: the ceiling a shaper must stay well below), then with every NIC of
/// every VM shaped to the same rate (`FABPROBE_BENCH_RAIL_MBIT`, default 2), all rails
/// running at once. Every `tc` is read back before and after: the figures count only if each
/// tbf sent bytes and throttled (overlimits moved).
#[test]
#[ignore = "a benchmark (minutes): run with --ignored"]
fn bench_rails_three_vms() {
    let mut o = VmOpts::new(3);
    o.nics = 2;
    o.smp = 2;
    let Some(lab) = VmLab::new("bench_rails_three_vms", o) else {
        return;
    };
    let bin = vmlab::quote(vmlab::BIN);
    for vm in 0..3 {
        lab.must(vm, &format!("{bin} --version"));
    }
    let sizes = ["-b", "1M", "-e", "1M", "-n", "3", "-w", "1"];
    let mut extra = vec!["--no-scan"];
    extra.extend_from_slice(&sizes);
    let v = rails_run(&lab, &extra);
    for (k, b) in rail_busbw(&v).iter().enumerate() {
        bench_line(
            &format!("rdma rail {k} busbw 1M, unshaped (3 VMs, 2 rails)"),
            *b,
            None,
        );
    }
    let (v, codes) = rails_run_codes(
        &lab,
        &[
            "--scan",
            "--scan-bytes",
            "512K",
            "--scan-reps",
            "2",
            "--scan-time",
            "5",
        ],
    );
    eprintln!(
        "  unshaped scan: exit codes {codes:?}, verdicts {}",
        v["data"]["verdicts"]
    );
    assert!(
        v["data"]["verdicts"].as_array().is_some_and(|a| a.is_empty()),
        "{v}"
    );
    rail_scan_links(&v);

    let mbit = rail_rate_mbit();
    let rate = format!("{mbit}mbit");
    for vm in 0..3 {
        for nic in 0..2 {
            lab.shape_egress_on(vm, nic, &rate);
        }
    }
    let before: Vec<Vec<vmlab::Qdisc>> = (0..3)
        .map(|vm| (0..2).map(|nic| lab.qdisc(vm, nic)).collect())
        .collect();
    let v = rails_run(&lab, &extra);
    let busbw = rail_busbw(&v);
    for (vm, nics) in before.iter().enumerate() {
        for (nic, was) in nics.iter().enumerate() {
            let after = lab.qdisc(vm, nic);
            let (bytes, pkts, dropped, over) = was.delta(&after);
            eprintln!(
                "  tc {} eth{nic}: {} rate {:?}: sent {bytes} B {pkts} pkt, dropped {dropped}, overlimits {over}",
                lab.vms[vm].name, after.kind, after.rate
            );
            assert_eq!(after.kind, "tbf", "{}", after.text);
            assert!(
                bytes > 0 && over > 0,
                "the shaper on {} eth{nic} did not shape: {}",
                lab.vms[vm].name,
                after.text
            );
        }
    }
    for (k, b) in busbw.iter().enumerate() {
        bench_line(
            &format!("rdma rail {k} busbw 1M, every NIC at {mbit} Mbit/s (3 VMs, 2 rails)"),
            *b,
            Some(mbit),
        );
    }
}

/// A figure in Gb/s, and its share of a shaper's rate where there is one.
fn bench_line(what: &str, gbps: f64, rate_mbit: Option<f64>) {
    let share = match rate_mbit {
        Some(r) => format!("  {:>5.1}% of the {r} Mbit/s shaper", gbps * 1000.0 / r * 100.0),
        None => String::new(),
    };
    let line = format!("BENCH {what:<64} {gbps:>8.5} Gb/s{share}");
    eprintln!("{line}");
    if let Ok(p) = std::env::var("FABPROBE_BENCH_OUT") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(p) {
            let _ = writeln!(f, "{line}");
        }
    }
}
