//! Issue 45: a hiccup reported as what it was. node-c's data port flaps (its switch side,
//! the bridge's end of its veth, goes down and comes back up) while the ring scans: each
//! rank reads its data netdev's carrier counters (`/sys/class/net/eth1/carrier_changes`,
//! `carrier_up_count`, `carrier_down_count`) at the start and the end of the run, and rank
//! 0's report says PORT FLAPPED for rank 2 (node-c, eth1), to investigate, beside whatever
//! else the run measured; no other rank's port is said to have flapped. A run with no flap
//! says none. Needs root; fails under `FABPROBE_LAB=required` (CI) without it, otherwise
//! prints SKIPPED.

mod lab;

use std::process::Output;
use std::time::Duration;

use lab::{Lab, LabOpts, text};

const RUNS: usize = 3;

/// The scan, then 8 iterations of 64 MiB (about 6 s at 1 Gbit/s): the run outlasts the
/// flap, whenever it lands, and its end reads the counters after it.
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

fn json(out: &[u8]) -> serde_json::Value {
    serde_json::from_slice(out).unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", text(out)))
}

/// The ring over 4 nodes; with `flap`, node-c's port goes down for 300 ms once data flows.
fn ring(name: &str, flap: bool) -> Option<Output> {
    let lab = Lab::new(
        name,
        LabOpts {
            nodes: 4,
            rate: Some("1gbit".into()),
        },
    )?;
    let ids = lab.spawn_ring(0..4, 4, name, &ARGS);
    if flap {
        lab.wait_data_flowing(0..4, Duration::from_secs(20));
        lab.switch_port_flap(2, Duration::from_millis(300));
    }
    let outs: Vec<Output> = ids
        .iter()
        .map(|&id| lab.wait(id, Duration::from_secs(90)).0)
        .collect();
    outs.into_iter().next()
}

fn flaps(j: &serde_json::Value) -> Vec<serde_json::Value> {
    j["data"]["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["kind"] == "port_flapped")
        .cloned()
        .collect()
}

#[test]
fn a_port_that_flapped_during_the_scan_is_named_as_a_hiccup() {
    for run in 0..RUNS {
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
        let others: Vec<_> = j["data"]["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| format!("{} {}", v["kind"], v["action"]))
            .collect();
        eprintln!("run {run}: {m}\n  all verdicts: {others:?}");
    }
}

#[test]
fn a_run_without_a_flap_says_none() {
    for run in 0..RUNS {
        let Some(o) = ring("noflap", false) else {
            return;
        };
        let j = json(&o.stdout);
        assert!(flaps(&j).is_empty(), "run {run}: {}", text(&o.stdout));
        assert_eq!(o.status.code(), Some(0), "run {run}: {}", text(&o.stdout));
    }
}
