//! `fabprobe ring --rails all` in the network lab (tests/lab/mod.rs) with two data rails per
//! node, each on a bridge of its own (eth1 198.19.0.x, eth2 198.19.1.x): a healthy run has no
//! verdict and reports each rail's busbw; one node's one rail shaped down is a slow egress
//! naming that node and that rail; one node's rail link down mid-run is a verdict on that rail
//! naming that node, within --timeout plus the grace. Needs root; without it every test fails
//! under `FABPROBE_LAB=required` (CI) and otherwise prints SKIPPED.

mod lab;

use std::process::Output;
use std::time::{Duration, Instant};

use lab::{Lab, LabOpts, text};

const TIMEOUT: u64 = 3;
const GRACE: Duration = Duration::from_secs(5);

fn json(out: &[u8]) -> serde_json::Value {
    serde_json::from_slice(out).unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", text(out)))
}

/// A lab of `nodes` nodes with two rails, every data link shaped to `rate`.
fn lab2(name: &str, nodes: usize, rate: &str) -> Option<Lab> {
    let lab = Lab::new(
        name,
        LabOpts {
            nodes,
            rate: Some(rate.into()),
        },
    )?;
    lab.add_rail();
    for n in 0..nodes {
        lab.shape_dev(n, "eth2", rate);
    }
    Some(lab)
}

/// `ring --rails all` over both data interfaces on every node; rank 0's output and the rest.
fn run(lab: &Lab, nodes: usize, token: &str, extra: &[&str], limit: Duration) -> Vec<Output> {
    let ids = start(lab, nodes, token, extra);
    ids.iter().map(|&id| lab.wait(id, limit).0).collect()
}

/// Start `ring --rails all` on every node (rank r on node r).
fn start(lab: &Lab, nodes: usize, token: &str, extra: &[&str]) -> Vec<usize> {
    let mut args = vec!["--rails", "all", "--ifname", "=eth1,eth2", "--format", "json"];
    args.extend_from_slice(extra);
    let ids: Vec<usize> = (0..nodes)
        .map(|r| {
            let mut a = lab.ring_args(r, nodes, token, &args);
            // ring_args names one data interface; the rails need both.
            if let Some(i) = a.iter().position(|x| x == "=eth1") {
                a.remove(i);
                a.remove(i - 1);
            }
            lab.spawn(r, &a.iter().map(|s| s.as_str()).collect::<Vec<_>>())
        })
        .collect();
    ids
}

#[test]
fn healthy_rails_give_no_verdict_and_each_rails_busbw() {
    let Some(lab) = lab2("rails_healthy", 3, "200mbit") else {
        return;
    };
    let outs = run(
        &lab,
        3,
        "healthy",
        &["--no-scan", "-b", "4M", "-e", "4M", "-n", "4", "--timeout", "10"],
        Duration::from_secs(40),
    );
    for (r, o) in outs.iter().enumerate() {
        assert_eq!(o.status.code(), Some(0), "rank {r}: {}", text(&o.stderr));
    }
    let d = json(&outs[0].stdout)["data"].clone();
    assert!(d["verdicts"].as_array().unwrap().is_empty(), "{d}");
    let rails = d["rails"].as_array().unwrap();
    assert_eq!(rails.len(), 2);
    let shaped_gbs = 200e6 / 8.0 / 1e9;
    let mut sum = 0.0;
    for r in rails {
        let bus = r["results"][0]["busbw_gbs"].as_f64().unwrap();
        sum += bus;
        // The figure for the closing note (per-rail busbw against the shaped rate).
        eprintln!(
            "rail {}: busbw {bus:.4} GB/s = {:.0}% of the shaped {shaped_gbs:.4} GB/s",
            r["rail"],
            bus / shaped_gbs * 100.0
        );
        assert!(bus > 0.0 && bus <= shaped_gbs * 1.2, "{r}");
    }
    assert!((d["results"][0]["busbw_gbs"].as_f64().unwrap() - sum).abs() < 1e-9);
    // Each node names both its rails, on their own interfaces.
    for n in d["ranks"].as_array().unwrap() {
        let labels: Vec<&str> = n["rails"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["label"].as_str().unwrap())
            .collect();
        assert_eq!(labels, ["eth1", "eth2"], "{n}");
    }
}

#[test]
fn one_nodes_slow_rail_is_named_with_its_rail() {
    let Some(lab) = lab2("rails_slow", 4, "1gbit") else {
        return;
    };
    lab.shape_dev(2, "eth2", "300mbit");
    let outs = run(
        &lab,
        4,
        "slow",
        &[
            "--scan",
            "--scan-bytes",
            "4M",
            "--scan-time",
            "2",
            "--timeout",
            "10",
        ],
        Duration::from_secs(50),
    );
    let o = &outs[0];
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let d = json(&o.stdout)["data"].clone();
    let v = d["verdicts"].as_array().unwrap();
    assert_eq!(v.len(), 1, "{d}");
    let v = &v[0];
    assert_eq!(
        (v["kind"].as_str(), v["from_rank"].as_u64()),
        (Some("slow_egress"), Some(2)),
        "{v}"
    );
    assert_eq!(v["rail"]["index"], 1, "{v}");
    assert_eq!(v["rail"]["from"]["device"], "eth2", "{v}");
    let m = v["message"].as_str().unwrap();
    eprintln!("{m}");
    assert!(m.starts_with("rail 1: SLOW EGRESS rank 2 (node-c, eth2)"), "{m}");
    // Rail 0 measured every link and found none slow.
    let scan0 = &d["rails"][0]["scan"]["links"];
    assert!(
        scan0.as_array().unwrap().iter().all(|l| l["slow"] == false),
        "{scan0}"
    );
}

/// One node's rail 1 link goes down mid-run while rail 0's ring has far more to do (about
/// 40 s of it at 1 Gbit/s): rail 1 is named within --timeout and the grace, rail 0's ring is
/// stopped with it (not left to run to its own end), and nothing names rail 0.
#[test]
fn one_nodes_rail_link_down_mid_run_is_named_on_that_rail() {
    let Some(lab) = lab2("rails_down", 3, "1gbit") else {
        return;
    };
    let t = TIMEOUT.to_string();
    let ids = start(
        &lab,
        3,
        "down",
        &["--no-scan", "-b", "8M", "-e", "8M", "-n", "250", "--timeout", &t],
    );
    lab.wait_data_flowing(0..3, Duration::from_secs(20));
    lab.link_down(1, "eth2");
    let t0 = Instant::now();
    let outs: Vec<Output> = ids
        .iter()
        .map(|&id| {
            lab.wait(id, Duration::from_secs(TIMEOUT) + GRACE + Duration::from_secs(60))
                .0
        })
        .collect();
    let took = t0.elapsed();
    assert!(
        took < Duration::from_secs(TIMEOUT) + GRACE,
        "ended {took:?} after the link went down:\n{}",
        text(&outs[0].stdout)
    );
    let o = &outs[0];
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let d = json(&o.stdout)["data"].clone();
    let v = d["verdicts"].as_array().unwrap();
    assert!(!v.is_empty(), "{d}");
    for x in v {
        let m = x["message"].as_str().unwrap();
        eprintln!("{m}");
        // On rail 1, and about node-b (rank 1) at one end.
        assert_eq!(x["rail"]["index"], 1, "{x}");
        assert!(x["from_rank"] == 1 || x["to_rank"] == 1, "{x}");
        assert!(m.starts_with("rail 1: "), "{x}");
        // A hang names its rail in its own sentence.
        if m.starts_with("rail 1: HANG") {
            assert!(m.starts_with("rail 1: HANG on rail 1: "), "{m}");
        }
    }
    // Rail 0 did not fail: it was stopped because rail 1 failed first.
    let e0 = d["rails"][0]["error"].as_str().unwrap_or_default();
    assert!(e0.starts_with("rail 0 stopped: rail 1 failed first"), "{d}");
}

/// `--rails all` where rank 0 is the node without rail 1 (its eth2 gone): rails are judged
/// against the majority of nodes, so rank 0, and only rank 0, is rail_missing; rail 0 runs
/// on every node and says which nodes rail 1 did not run on.
#[test]
fn rank_0_without_a_rail_is_the_only_node_named() {
    let Some(lab) = lab2("rails_r0_missing", 3, "1gbit") else {
        return;
    };
    let del = lab.exec(0, "ip", &["link", "del", "eth2"]);
    assert!(del.status.success(), "{}", text(&del.stderr));
    let outs = run(
        &lab,
        3,
        "r0missing",
        &[
            "--no-scan",
            "-b",
            "1M",
            "-e",
            "1M",
            "-n",
            "2",
            "--timeout",
            &TIMEOUT.to_string(),
            // The other nodes wait for rail 1's coordinator until the join window ends
            // (rank 0 cannot host it): keep that window as short as the data deadline.
            "--join-timeout",
            &TIMEOUT.to_string(),
        ],
        Duration::from_secs(40),
    );
    let o = &outs[0];
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let d = json(&o.stdout)["data"].clone();
    let v = d["verdicts"].as_array().unwrap();
    assert_eq!(v.len(), 1, "{d}");
    let x = &v[0];
    let m = x["message"].as_str().unwrap();
    eprintln!("{m}");
    assert_eq!(
        (
            x["kind"].as_str(),
            x["from_rank"].as_u64(),
            x["rail"]["index"].as_u64()
        ),
        (Some("rail_missing"), Some(0), Some(1)),
        "{x}"
    );
    assert!(
        m.starts_with("RAIL MISSING rank 0 (node-a): it has no rail 1"),
        "{m}"
    );
    assert!(
        m.contains("did not run on rank 1 (node-b), rank 2 (node-c) either"),
        "{m}"
    );
    // Rail 0 ran right on all three nodes; rail 1 is listed as not run.
    assert!(d["rails"][0]["error"].is_null(), "{d}");
    assert_eq!(d["rails"][0]["results"][0]["wrong"], 0, "{d}");
    assert_eq!(d["rails"][1]["rail"], 1, "{d}");
    assert!(d["rails"][1]["results"].as_array().unwrap().is_empty(), "{d}");
    // The other nodes could not join rail 1's ring: each says so about rail 1, and fails.
    for (r, o) in outs.iter().enumerate().skip(1) {
        assert_eq!(o.status.code(), Some(1), "rank {r}: {}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains("rail 1: "),
            "rank {r}: {}",
            text(&o.stderr)
        );
    }
}
