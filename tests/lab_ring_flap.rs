//! Issue 45: a hiccup reported as what it was. node-c's data port flaps (its switch side,
//! the bridge's end of its veth, goes down and comes back up) while the ring scans: each
//! rank reads its data netdev's carrier counters (`/sys/class/net/eth1/carrier_changes`,
//! `carrier_up_count`, `carrier_down_count`) at the start and the end of the run, and rank
//! 0's report says PORT FLAPPED for rank 2 (node-c, eth1), to investigate, beside whatever
//! else the run measured; no other rank's port is said to have flapped, and a connection the
//! flap stalled is listed under it, never a CONNECTION STALL of its own (no MTU advice). A
//! run with no flap says none. Each case runs `RUNS` times, `FABPROBE_LAB_RUNS` when set.
//! Needs root; fails under `FABPROBE_LAB=required` (CI) without it, otherwise prints
//! SKIPPED.

mod lab;

use std::process::Output;
use std::time::Duration;

use lab::{Lab, LabOpts, json, runs, text};

const RUNS: usize = 3;

/// The scan alone (`--scan`: the sizes are not run), 16 MiB per sample for 6 s: the run
/// outlasts the flap, whenever it lands, and its end reads the counters after it.
const ARGS: [&str; 15] = [
    "--scan",
    "--scan-bytes",
    "16M",
    "--scan-time",
    "6",
    "-b",
    "64M",
    "-e",
    "64M",
    "-n",
    "8",
    "--timeout",
    "10",
    "--format",
    "json",
];

/// The ring over 4 nodes; with `flap`, node-c's port goes down for 300 ms once data flows.
fn ring(name: &str, flap: bool) -> Option<Output> {
    let lab = Lab::new(
        name,
        LabOpts {
            nodes: 4,
            rate: Some("1gbit".into()),
        },
    )?;
    Some(lab.ring_report_with(name, &ARGS, Duration::from_secs(90), |lab| {
        if flap {
            lab.wait_data_flowing(0..4, Duration::from_secs(20));
            lab.switch_port_flap(2, Duration::from_millis(300));
        }
    }))
}

fn of_kind(j: &serde_json::Value, kind: &str) -> Vec<serde_json::Value> {
    j["data"]["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["kind"] == kind)
        .cloned()
        .collect()
}

fn flaps(j: &serde_json::Value) -> Vec<serde_json::Value> {
    of_kind(j, "port_flapped")
}

#[test]
fn a_port_that_flapped_during_the_scan_is_named_as_a_hiccup() {
    for run in 0..runs(RUNS) {
        let Some(o) = ring("flap", true) else {
            return;
        };
        let j = json(&o.stdout);
        let f = flaps(&j);
        assert_eq!(f.len(), 1, "run {run}: {}\n{}", text(&o.stdout), text(&o.stderr));
        let v = &f[0];
        assert_eq!(
            (v["from_rank"].as_u64(), v["action"].as_str()),
            (Some(2), Some("investigate")),
            "run {run}: {v}"
        );
        let m = v["message"].as_str().unwrap();
        assert!(
            m.starts_with("PORT FLAPPED rank 2 (node-c, eth1): "),
            "run {run}: {m}"
        );
        assert!(
            v["evidence"]["carrier_changes"].as_u64().unwrap() >= 2,
            "run {run}: {v}"
        );
        assert_eq!(o.status.code(), Some(1), "run {run}: {}", text(&o.stderr));
        // What the flap stalled is the flap's: no stall verdict of its own, no MTU ping.
        let stalls = of_kind(&j, "connection_stall");
        assert!(stalls.is_empty(), "run {run}: {stalls:?}");
        assert!(!v["next"].as_str().unwrap().contains("ping"), "run {run}: {v}");
        for s in v["evidence"]["stalls"].as_array().into_iter().flatten() {
            assert!(s["from_rank"] == 2 || s["to_rank"] == 2, "run {run}: {s}");
        }
        let others: Vec<_> = j["data"]["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| format!("{} {}", v["kind"], v["action"]))
            .collect();
        eprintln!(
            "run {run}: exit {:?}: {m}\n  all verdicts: {others:?}",
            o.status.code()
        );
    }
}

#[test]
fn a_run_without_a_flap_says_none() {
    for run in 0..runs(RUNS) {
        let Some(o) = ring("noflap", false) else {
            return;
        };
        let j = json(&o.stdout);
        assert!(flaps(&j).is_empty(), "run {run}: {}", text(&o.stdout));
        assert_eq!(o.status.code(), Some(0), "run {run}: {}", text(&o.stdout));
        eprintln!("run {run}: exit {:?}: no flap, no verdict", o.status.code());
    }
}
