//! Issue 45: a black hole that TCP turns into slowness. node-c's data port on the switch
//! has an MTU of 1500 where the hosts run 9000 and drops bigger frames without a word (no
//! ICMP: an L2 hop); with `net.ipv4.tcp_mtu_probing=1` on every node each connection to or
//! from node-c stalls for seconds (its big segments are lost until the retransmission
//! timeouts make TCP fall back to small ones), then runs at its rate. The scan names rank
//! 2 as the one rank its stalled connections share, with what the waits cost, to
//! investigate, and a do-not-fragment full-size ping as the next step; nothing is drained
//! and no other rank is named. So does the AllReduce sweep alone (`--no-scan`), where the
//! ring passes every stall on to the ranks after it and only the links' own are named. The
//! control, MTU probing on and every port at 9000, stays healthy both ways. Every node's
//! data interface puts one frame per packet on its veth (a veth passes GSO super-packets
//! over a bridge port whatever its MTU; a NIC's wire frames do not), on 200 Mbit/s links,
//! in every case. Each case runs `RUNS` times, `FABPROBE_LAB_RUNS` when set (a lucky run
//! proves nothing). Needs root; fails under `FABPROBE_LAB=required` (CI) without it,
//! otherwise prints SKIPPED.

mod lab;

use std::process::Output;
use std::time::Duration;

use lab::{Lab, LabOpts, SCAN_ARGS, json, runs, text};

const RUNS: usize = 5;

/// The sweep alone: 4 MiB in 512 KiB chunks, 1 + 5 iterations per half (a few seconds at
/// 200 Mbit/s); the data timeout well past the black hole's stall (about 6 s).
const SWEEP_ARGS: &[&str] = &[
    "--no-scan",
    "-b",
    "4M",
    "-e",
    "4M",
    "-n",
    "5",
    "--timeout",
    "15",
    "--format",
    "json",
];

/// `fabprobe ring` over 4 nodes with MTU probing on; `hole`: that node's switch port at 1500.
fn ring(name: &str, hole: Option<usize>, args: &[&str]) -> Option<Output> {
    let lab = Lab::new(
        name,
        LabOpts {
            nodes: 4,
            // One frame per packet costs CPU: at 1 Gbit/s a loaded 2-core machine cannot keep
            // up with 1 KB segments, and the slowness would be the machine's.
            rate: Some("200mbit".into()),
        },
    )?;
    for n in 0..4 {
        lab.sysctl(n, "net.ipv4.tcp_mtu_probing", "1");
        lab.one_frame_per_packet(n);
    }
    if let Some(n) = hole {
        lab.switch_port_mtu(n, 1500);
    }
    Some(lab.ring_report(name, args, Duration::from_secs(90)))
}

/// Rank 0's report names rank 2's stalls, and only them, to investigate, with the
/// full-size ping as the next step.
fn names_the_stalled_rank(run: usize, o: &Output) -> String {
    let j = json(&o.stdout);
    let d = &j["data"];
    let verdicts = d["verdicts"].as_array().unwrap();
    assert_eq!(
        o.status.code(),
        Some(1),
        "run {run}\n{}\n{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    assert_eq!(verdicts.len(), 1, "run {run}: {verdicts:?}");
    let v = &verdicts[0];
    assert_eq!(
        (
            v["kind"].as_str(),
            v["action"].as_str(),
            v["from_rank"].as_u64(),
            v["to_rank"].as_u64()
        ),
        (Some("connection_stall"), Some("investigate"), Some(2), None),
        "run {run}: {v}"
    );
    let m = v["message"].as_str().unwrap();
    assert!(
        m.starts_with("CONNECTION STALLS at rank 2 (node-c, eth1): "),
        "run {run}: {m}"
    );
    // Every stalled link goes through rank 2 and waited a second or more.
    for s in v["evidence"]["stalls"].as_array().unwrap() {
        assert!(
            s["from_rank"] == 2 || s["to_rank"] == 2,
            "run {run}: an innocent link: {s}"
        );
        assert!(s["silence_s"].as_f64().unwrap() >= 1.0, "run {run}: {s}");
    }
    let lost = v["evidence"]["lost_s"].as_f64().unwrap();
    assert!(lost >= 1.0, "run {run}: {v}");
    let next = v["next"].as_str().unwrap();
    assert!(
        next.starts_with("on node-c: ")
            && next.contains("`ping -M do -s $(( $(cat /sys/class/net/eth1/mtu) - 28 )) -c 3 198.19.0.")
            && next.contains("`ping -M do -s 1472 -c 3 198.19.0."),
        "run {run}: {next}"
    );
    assert_eq!(d["drain"], serde_json::json!([]), "run {run}: {d}");
    format!("{m}\n  lost {lost} s; next: {next}")
}

/// Rank 0's report has no verdict and exit 0.
fn stays_healthy(run: usize, o: &Output) -> serde_json::Value {
    let j = json(&o.stdout);
    assert_eq!(
        (o.status.code(), &j["data"]["verdicts"]),
        (Some(0), &serde_json::json!([])),
        "run {run}\n{}\n{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    j
}

#[test]
fn a_black_hole_under_mtu_probing_names_the_stalled_rank_to_investigate() {
    for run in 0..runs(RUNS) {
        let Some(o) = ring("mtu_hole", Some(2), &SCAN_ARGS) else {
            return;
        };
        let said = names_the_stalled_rank(run, &o);
        eprintln!("run {run}: exit {:?}: {said}", o.status.code());
    }
}

#[test]
fn mtu_probing_on_a_healthy_fabric_stays_healthy() {
    for run in 0..runs(RUNS) {
        let Some(o) = ring("mtu_ok", None, &SCAN_ARGS) else {
            return;
        };
        let j = stays_healthy(run, &o);
        let orders = j["data"]["scan"]["orders"].as_array().unwrap().len();
        eprintln!("run {run}: exit {:?}: healthy, {orders} orders", o.status.code());
    }
}

#[test]
fn the_sweep_alone_names_the_black_holes_stalls_too() {
    for run in 0..runs(RUNS) {
        let Some(o) = ring("mtu_hole_sweep", Some(2), SWEEP_ARGS) else {
            return;
        };
        let said = names_the_stalled_rank(run, &o);
        assert!(
            json(&o.stdout)["data"]["scan"].is_null(),
            "run {run}: the scan ran"
        );
        eprintln!("run {run}: exit {:?}: {said}", o.status.code());
    }
}

#[test]
fn the_sweep_alone_on_a_healthy_fabric_stays_healthy() {
    for run in 0..runs(RUNS) {
        let Some(o) = ring("mtu_ok_sweep", None, SWEEP_ARGS) else {
            return;
        };
        let j = stays_healthy(run, &o);
        let rows = j["data"]["results"].as_array().unwrap().len();
        eprintln!("run {run}: exit {:?}: healthy, {rows} rows", o.status.code());
    }
}
