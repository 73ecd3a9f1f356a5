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
            let a: Vec<String> = [
                "ring",
                "--rank",
                &r.to_string(),
                "--world",
                &world.to_string(),
                "--coordinator",
                &format!("{}:29517", lab.vms[0].ip),
                "--ifname",
                "=eth0",
                "--token",
                "bench",
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
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
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
