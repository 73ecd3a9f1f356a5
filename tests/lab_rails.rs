//! `fabprobe ring --rails all` in the network lab (tests/lab/mod.rs) with two data rails per
//! node, each on a bridge of its own (eth1 198.19.0.x, eth2 198.19.1.x): a healthy run has no
//! verdict and reports each rail's busbw; one node's one rail shaped down is a slow egress
//! naming that node and that rail; one node's rail link down mid-run is a verdict on that rail
//! naming that node, within --timeout plus the grace. Needs root; without it every test fails
//! under `FABPROBE_LAB=required` (CI) and otherwise prints SKIPPED.

mod lab;

use std::process::Output;
use std::time::{Duration, Instant};

use lab::{Lab, LabOpts, SCAN_ARGS, text};
use nix::sys::signal::Signal;

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
/// One 1 MiB size, two iterations, no scan, `--timeout secs`: enough to see every rail run.
fn short_sweep(secs: &str) -> Vec<&str> {
    vec!["--no-scan", "-b", "1M", "-e", "1M", "-n", "2", "--timeout", secs]
}

fn run(lab: &Lab, nodes: usize, token: &str, extra: &[&str], limit: Duration) -> Vec<Output> {
    let ids = start(lab, nodes, token, extra);
    ids.iter().map(|&id| lab.wait(id, limit).0).collect()
}

/// Start `ring --rails all` on every node (rank r on node r).
fn start(lab: &Lab, nodes: usize, token: &str, extra: &[&str]) -> Vec<usize> {
    start_ranks(lab, 0..nodes, nodes, token, extra)
}

/// Start `ring --rails all` for ranks `ranks` of a job of `world` (rank r on node r).
fn start_ranks(
    lab: &Lab,
    ranks: std::ops::Range<usize>,
    world: usize,
    token: &str,
    extra: &[&str],
) -> Vec<usize> {
    let mut args = vec!["--rails", "all", "--ifname", "=eth1,eth2", "--format", "json"];
    args.extend_from_slice(extra);
    let ids: Vec<usize> = ranks
        .map(|r| {
            let mut a = lab.ring_args(r, world, token, &args);
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
        // The quick scan with the text report: all but `--format json`.
        &SCAN_ARGS[..7],
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
    // The job's verdict over both rails reached every node's exit status (issue 31).
    for (r, o) in outs.iter().enumerate().skip(1) {
        let e = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "rank {r}: {e}");
        assert!(e.contains("rank 0's verdict: rail 1: SLOW EGRESS rank 2 (node-c, eth2)"), "rank {r}: {e}");
    }
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
/// on every node, and rail 1 on the two nodes that have it, its coordinator hosted by rank 0.
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
        &short_sweep(&TIMEOUT.to_string()),
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
        m.contains("rail 1 ran without it on rank 1 (node-b), rank 2 (node-c)"),
        "{m}"
    );
    // Rail 0 ran right on all three nodes; rail 1 on node-b and node-c.
    assert!(d["rails"][0]["error"].is_null(), "{d}");
    assert_eq!(d["rails"][0]["results"][0]["wrong"], 0, "{d}");
    assert_eq!(d["rails"][1]["rail"], 1, "{d}");
    assert_eq!(d["rails"][1]["nodes"], serde_json::json!([1, 2]), "{d}");
    assert!(d["rails"][1]["error"].is_null(), "{d}");
    assert_eq!(d["rails"][1]["results"][0]["wrong"], 0, "{d}");
    // The job's verdict (rank 0's missing rail) reached every node's exit status (issue 30).
    for (r, o) in outs.iter().enumerate().skip(1) {
        let e = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "rank {r}: {e}");
        assert!(e.contains("RAIL MISSING rank 0 (node-a)"), "rank {r}: {e}");
    }
}

/// `--rails all` where node-b's rail 1 link is down before the run: rail 1's ring forms
/// from node-a and node-c (the nodes that drive it) and measures them, rail 0 runs on all
/// three nodes, and the only verdict is node-b's rail_missing with its port's state.
#[test]
fn a_nodes_missing_rail_runs_on_the_other_nodes() {
    let Some(lab) = lab2("rails_b_missing", 3, "1gbit") else {
        return;
    };
    lab.link_down(1, "eth2");
    let t0 = Instant::now();
    let outs = run(
        &lab,
        3,
        "bmissing",
        &short_sweep(&TIMEOUT.to_string()),
        Duration::from_secs(40),
    );
    eprintln!("took {:?}", t0.elapsed());
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
            x["rail"]["index"].as_u64(),
            x["evidence"]["state"].as_str(),
        ),
        (Some("rail_missing"), Some(1), Some(1), Some("down")),
        "{x}"
    );
    assert!(
        m.starts_with("RAIL MISSING rank 1 (node-b): its rail 1 port eth2 is down"),
        "{m}"
    );
    assert!(
        m.contains("rail 1 ran without it on rank 0 (node-a), rank 2 (node-c)"),
        "{m}"
    );
    assert_eq!(x["evidence"]["ran_on_ranks"], serde_json::json!([0, 2]), "{x}");
    assert!(d["error"].is_null(), "{d}");
    // Rail 0 on all three nodes, rail 1 on node-a and node-c, each with its figure.
    let rails = d["rails"].as_array().unwrap();
    assert_eq!(rails.len(), 2, "{d}");
    for (r, nodes) in [(0, serde_json::json!([0, 1, 2])), (1, serde_json::json!([0, 2]))] {
        let x = &rails[r];
        assert_eq!(x["nodes"], nodes, "{x}");
        assert!(x["error"].is_null(), "{x}");
        let row = &x["results"][0];
        assert_eq!(row["wrong"], 0, "{x}");
        let bus = row["busbw_gbs"].as_f64().unwrap();
        assert!(bus > 0.0, "{x}");
        eprintln!("rail {r} on {nodes}: busbw {bus:.4} GB/s");
    }
    // Rail 1's hops are node-a -> node-c -> node-a, by the nodes' own ranks.
    let hops: Vec<(u64, u64)> = d["links"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["rail"] == 1)
        .map(|l| (l["from_rank"].as_u64().unwrap(), l["to_rank"].as_u64().unwrap()))
        .collect();
    assert_eq!(hops, [(0, 2), (2, 0)], "{d}");
    // Node-b and node-c ran what they drive; the job's verdict (node-b's missing rail)
    // reached both their exit statuses (issue 30).
    for (r, o) in outs.iter().enumerate().skip(1) {
        let e = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "rank {r}: {e}");
        assert!(e.contains("RAIL MISSING rank 1 (node-b)"), "rank {r}: {e}");
    }
}

/// Issue 20: `--rails all` on 3 nodes where node-c never starts (it never declares its rails)
/// and node-b declares, then is frozen (a starved host) until 6.5 s after the rails'
/// coordinators started, within `--join-timeout` 10: rank 0's rails wait the whole join window
/// for node-b (they did give up after 5 s for every node), seat it once it wakes, and the one
/// node named missing is node-c, as a node that never declared its rails.
#[test]
fn a_slow_declared_node_is_waited_for_and_only_the_silent_node_named() {
    let Some(lab) = lab2("rails_silent", 3, "1gbit") else {
        return;
    };
    let mut extra = short_sweep("3");
    extra.extend(["--join-timeout", "10"]);
    // Ranks 0 and 1 of 3: rank 2 (node-c) never starts.
    let ids = start_ranks(&lab, 0..2, 3, "silent", &extra);
    // Node-b's declaration is in: freeze it before its seats come (at the join window's end).
    lab.wait_read_from(0, 29517, &lab.nodes[1].mgmt_ip, Duration::from_secs(20));
    lab.signal(ids[1], Signal::SIGSTOP);
    // Rank 0's rails' coordinators start (behind its relay, on loopback).
    lab.wait_loopback_listeners(0, 2, Duration::from_secs(30));
    let held = lab.runs_for(ids[0], Duration::from_millis(6500));
    lab.signal(ids[1], Signal::SIGCONT);
    let (o, _) = lab.wait(ids[0], Duration::from_secs(30));
    let (ob, _) = lab.wait(ids[1], Duration::from_secs(30));
    assert!(
        held,
        "rank 0 gave up on node-b within 6.5 s:\n{}",
        text(&o.stderr)
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let d = json(&o.stdout)["data"].clone();
    let e = d["error"].as_str().unwrap_or_default();
    eprintln!("{e}");
    for k in 0..2 {
        let x = d["rails"][k]["error"].as_str().unwrap_or_default();
        assert!(
            x.contains(": missing rank 2, which never declared its rails to rank 0 within 10 s"),
            "rail {k}: {d}"
        );
        assert!(!x.contains("rank 1"), "rail {k}: {x}");
    }
    // Node-b was seated on both rails; no verdict names it.
    for n in d["rails"].as_array().unwrap() {
        assert_eq!(n["nodes"], serde_json::json!([0, 1, 2]), "{n}");
    }
    for v in d["verdicts"].as_array().unwrap() {
        assert!(v["from_rank"] != 1 && v["to_rank"] != 1, "{v}");
    }
    let eb = text(&ob.stderr);
    assert!(eb.contains("missing rank 2, which never declared"), "{eb}");
}

/// Issue 31: while two rails run on three nodes, each other node holds exactly one control
/// connection to rank 0 (its hello declared both rails; both rails' messages travel on it),
/// and rank 0 listens on no coordinator port + k for them.
#[test]
fn each_node_holds_one_control_connection_for_all_its_rails() {
    let Some(lab) = lab2("rails_one_conn", 3, "200mbit") else {
        return;
    };
    let t = TIMEOUT.to_string();
    let ids = start(&lab, 3, "oneconn", &["--no-scan", "-b", "4M", "-e", "4M", "-n", "40", "--timeout", &t]);
    lab.wait_data_flowing(0..3, Duration::from_secs(20));
    let rank0 = &lab.nodes[0].mgmt_ip;
    for node in 1..3 {
        let o = lab.exec(node, "ss", &["-Htn", "state", "established", "dst", rank0.as_str()]);
        let conns: Vec<String> = text(&o.stdout).lines().map(str::to_string).collect();
        assert_eq!(conns.len(), 1, "node {node}: {conns:?}");
        assert!(conns[0].contains(&format!("{rank0}:29517")), "node {node}: {conns:?}");
    }
    // Nothing on the coordinator port + k any more.
    let o = lab.exec(0, "ss", &["-Hltn", "sport = :29518"]);
    assert_eq!(text(&o.stdout).trim(), "", "rank 0 listens on 29518");
    let outs: Vec<Output> = ids.iter().map(|&id| lab.wait(id, Duration::from_secs(60)).0).collect();
    for (r, o) in outs.iter().enumerate() {
        assert_eq!(o.status.code(), Some(0), "rank {r}: {}", text(&o.stderr));
    }
}
