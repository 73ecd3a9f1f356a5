//! Localization and hang verdicts with real `fabprobe ring` processes in the network lab
//! (tests/lab/mod.rs): a slow egress (tbf), a slow pair (htb + u32 filter), a data link cut
//! mid-run (iptables DROP on the data interface only), a rank killed (SIGKILL), a rank frozen
//! (SIGSTOP), the coordinator killed; a downtrained port, a path slow for some flows only,
//! two slow nodes at once. Each must give its verdict within --timeout plus the
//! grace, and every process must exit. Needs root; without it every test fails under
//! `FABPROBE_LAB=required` (CI) and otherwise prints SKIPPED.

mod lab;

use std::process::Output;
use std::time::{Duration, Instant};

use lab::{Lab, LabOpts, SCAN_ARGS, json, runs, text};
use nix::sys::signal::Signal;

/// --timeout of the hang cases, and the bound on the whole run after the fault: the data
/// timeout, the silence deadline (at least 3 s), the watchdog's grace, process start-up.
const TIMEOUT: u64 = 3;
const GRACE: Duration = Duration::from_secs(4);

fn verdicts(o: &Output) -> Vec<(String, Option<u64>, Option<u64>)> {
    json(&o.stdout)["data"]["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["kind"].as_str().unwrap().to_string(),
                v["from_rank"].as_u64(),
                v["to_rank"].as_u64(),
            )
        })
        .collect()
}

fn kinds(v: &[(&str, Option<u64>, Option<u64>)]) -> Vec<(String, Option<u64>, Option<u64>)> {
    v.iter().map(|(k, a, b)| (k.to_string(), *a, *b)).collect()
}

/// The scan alone over 4 nodes whose data egress is shaped to 1 Gbit/s, with `fault` applied.
fn scan_case(name: &str, fault: impl Fn(&Lab)) -> Option<Output> {
    scan_case_with(name, &SCAN_ARGS, fault)
}

/// [`scan_case`] with other arguments.
fn scan_case_with(name: &str, args: &[&str], fault: impl Fn(&Lab)) -> Option<Output> {
    let lab = Lab::new(
        name,
        LabOpts {
            nodes: 4,
            rate: Some("1gbit".into()),
        },
    )?;
    fault(&lab);
    Some(lab.ring_report(name, args, Duration::from_secs(40)))
}

#[test]
fn slow_egress_of_one_node_is_named() {
    let Some(o) = scan_case("slow_egress", |lab| lab.shape_egress(2, "300mbit")) else {
        return;
    };
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert_eq!(
        verdicts(&o),
        kinds(&[("slow_egress", Some(2), None)]),
        "{}",
        text(&o.stdout)
    );
    let j = json(&o.stdout);
    let v = &j["data"]["verdicts"][0];
    assert_eq!(v["from_host"], "node-c");
    let ratio = v["evidence"]["ratio"].as_f64().unwrap();
    // 300 of 1000 Mbit/s, and tbf's bucket lets a little more through.
    assert!((0.2..0.5).contains(&ratio), "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .starts_with("SLOW EGRESS rank 2 (node-c, eth1): its 3 outgoing links"),
        "{v}"
    );
    // The control of lab_ring_contention.rs: a shaped port that carried only the probe's
    // traffic is the node's own, drained; its counters were read, not assumed.
    assert_eq!((v["action"].as_str(), v["evidence"].get("contention")), (Some("drain"), None), "{v}");
    let t = &v["evidence"]["port_traffic"][0];
    assert_eq!(t["counter"], "/sys/class/net/eth1/statistics/tx_bytes", "{v}");
    let (other, probe) = (t["other_mb"].as_f64().unwrap(), t["probe_mb"].as_f64().unwrap());
    assert!(probe > 0.0 && other < 0.1 * probe, "{t}");
    // The per-link table: every directed link measured, the slow ones marked.
    let links = j["data"]["scan"]["links"].as_array().unwrap();
    assert_eq!(links.len(), 12);
    for l in links {
        assert_eq!(l["slow"], l["from_rank"] == 2, "{l}");
    }
    assert!(j["data"]["results"].as_array().unwrap().is_empty());
}

/// A rank whose host is busy: pinned with a CPU hog to one core as SCHED_IDLE (a niced
/// rank still gets a CPU on each wakeup; SCHED_IDLE does not), its
/// links are slow because it waits for a CPU, not for the network. No verdict names it or
/// anyone (exit 0); the scan says its slow figures were not judged, naming rank 2 and its
/// wait. Before schedstat was read this was SLOW EGRESS/INGRESS of rank 2: a node drained
/// for its load.
#[test]
fn a_cpu_starved_rank_is_not_judged() {
    for run in 0..runs(1) {
        let mut args = SCAN_ARGS.to_vec();
        // 1 MiB per sample: the starved rank moves a few MB/s.
        args[2] = "1M";
        let Some(o) = starved_run("cpu_starved", &args) else {
            return;
        };
        kept_on_failure("cpu_starved", &o, || {
            let j = json(&o.stdout);
            if starved_rank_2_stalled(&j) {
                // On a loaded machine the hog and the load leave rank 2 no CPU at all
                // before its scan orders: the run stops on it, and the report says it is
                // starved, to investigate (26 of 28 kept reports at load 7-16).
                eprintln!("run {run}: rank 2 stalled, starved of CPU, before the scan");
            } else {
                assert!(verdicts(&o).is_empty(), "run {run}: {}", text(&o.stdout));
                assert_eq!(o.status.code(), Some(0), "run {run}: {}", text(&o.stderr));
                let nj = j["data"]["scan"]["not_judged"].as_array().unwrap();
                not_judged_for_rank_2(run, nj, &j["data"]["scan"]);
            }
        });
    }
}

/// Runs `check` on a run's output; when it fails, rank 0's report (stdout, stderr) is kept
/// under the target's tmp dir (`lab-failures/NAME-PID-N.{out,err}`, the path printed) before the
/// panic goes on: a failure under load is rare, and its figures are what a table test replays.
fn kept_on_failure(name: &str, o: &Output, check: impl FnOnce()) {
    let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(check)) else {
        return;
    };
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("lab-failures");
    let _ = std::fs::create_dir_all(&dir);
    let n = std::fs::read_dir(&dir).map(|d| d.count()).unwrap_or(0);
    let base = dir.join(format!("{name}-{}-{n}", std::process::id()));
    for (ext, bytes) in [("out", &o.stdout), ("err", &o.stderr)] {
        let p = base.with_extension(ext);
        match std::fs::write(&p, bytes) {
            Ok(()) => eprintln!("kept {}", p.display()),
            Err(e) => eprintln!("could not keep {}: {e}", p.display()),
        }
    }
    std::panic::resume_unwind(panic);
}

/// The run stopped on rank 2 for want of a CPU: every verdict is a RANK STALLED of rank 2
/// saying it is starved (its heartbeats carried its CPU wait) or, where the hog left it no
/// CPU even to send one, that it sent nothing and may have been given no CPU; to
/// investigate (never a drain, never another rank or a link).
fn starved_rank_2_stalled(j: &serde_json::Value) -> bool {
    let Some(vs) = j["data"]["verdicts"].as_array().filter(|v| !v.is_empty()) else {
        return false;
    };
    vs.iter().all(|v| {
        v["kind"] == "rank_stalled"
            && v["from_rank"] == 2
            && v["action"] == "investigate"
            && v["message"]
                .as_str()
                .is_some_and(|m| m.contains("starved of CPU") || m.contains("given no CPU"))
    })
}

/// Every not-judged would-be verdict is set aside as CPU-bound and says so; one at least
/// names rank 2 and its wait. Another rank's slow figure, or a stall, may be set aside
/// beside it on a loaded machine (the starved rank's hog shares a core with whatever else
/// runs there, and a stall is set aside whatever link it is on): unknown, never a verdict,
/// and each names the ranks that waited for a CPU.
fn not_judged_for_rank_2(run: usize, nj: &[serde_json::Value], all: &serde_json::Value) {
    assert!(!nj.is_empty(), "run {run}: {all}");
    for v in nj {
        assert_eq!(v["evidence"]["not_judged"], "cpu_bound", "run {run}: {v}");
        let m = v["message"].as_str().unwrap();
        assert!(m.starts_with("NOT JUDGED (CPU-bound host): "), "run {run}: {v}");
        assert!(m.contains("waited for a CPU"), "run {run}: {v}");
    }
    assert!(
        nj.iter().any(|v| (v["from_rank"] == 2 || v["to_rank"] == 2)
            && (v["evidence"]["cpu_wait_rank_2"].as_f64().is_some()
                || v["message"].as_str().unwrap().contains("rank 2 (node-c)"))),
        "run {run}: no not-judged figure names rank 2: {all}"
    );
}

/// `fabprobe ring` with `args` over 4 nodes, rank 2 starved of CPU: pinned with a CPU hog
/// to one core as SCHED_IDLE (a niced rank still gets a CPU on each wakeup; SCHED_IDLE
/// does not), so its links are slow because it waits for a CPU, not for the network.
/// Rank 0's output.
fn starved_run(name: &str, args: &[&str]) -> Option<Output> {
    let lab = Lab::new(
        name,
        LabOpts {
            nodes: 4,
            rate: Some("1gbit".into()),
        },
    )?;
    lab.spawn_program(2, "taskset", &["-c", "0", "sh", "-c", "while :; do :; done"]);
    let ids: Vec<usize> = (0..4)
        .map(|r| {
            let a = lab.ring_args(r, 4, name, args);
            let a: Vec<&str> = a.iter().map(String::as_str).collect();
            if r == 2 {
                let w: Vec<&str> = ["-c", "0", lab::BIN].into_iter().chain(a).collect();
                lab.spawn_program(r, "taskset", &w)
            } else {
                lab.spawn(r, &a)
            }
        })
        .collect();
    // Starved once it said hello: SCHED_IDLE beside the busy loop from its start, it took
    // 45-100 s (0.3% of a core) to reach rank 0 at all, past the join window. Every thread
    // of it now, and the ones it starts inherit the policy.
    lab.wait_read_from(0, 29517, &lab.nodes[2].mgmt_ip.clone(), Duration::from_secs(30));
    let pid = lab.pid(ids[2]).to_string();
    let st = std::process::Command::new("chrt")
        .args(["-i", "-a", "-p", "0", &pid])
        .status()
        .expect("chrt");
    assert!(st.success(), "chrt -i -a -p 0 {pid}: {st}");
    // The starved rank crawls: its scan orders (and their re-check) take seconds each.
    let mut outs: Vec<Output> = ids
        .iter()
        .map(|&id| lab.wait(id, Duration::from_secs(120)).0)
        .collect();
    Some(outs.swap_remove(0))
}

/// Issue 45, `--no-scan`: the sweep alone (4 MiB, 10 iterations: 40 s with rank 2
/// starved as above). Its links' waits are its host's: no verdict names a link or a rank
/// for them (exit 0), and whatever the sweep measured as a stall is listed as not judged
/// (`data.not_judged`), naming rank 2's wait for a CPU from its heartbeats. The not-judged
/// path itself is proven by `stall`'s unit tests: no run here has made a stall yet.
#[test]
fn a_cpu_starved_rank_in_the_sweep_is_not_judged() {
    for run in 0..runs(1) {
        let args = [
            "--no-scan",
            "-b",
            "4M",
            "-e",
            "4M",
            "-n",
            "10",
            "-w",
            "1",
            "--timeout",
            "60",
            "--format",
            "json",
        ];
        let Some(o) = starved_run("cpu_starved_sweep", &args) else {
            return;
        };
        let j = json(&o.stdout);
        assert!(verdicts(&o).is_empty(), "run {run}: {}\n{}", text(&o.stdout), text(&o.stderr));
        assert_eq!(o.status.code(), Some(0), "run {run}: {}", text(&o.stderr));
        // A stall the starvation made (none in the runs so far: the ring's subtraction of
        // each sender's own waits already gives the starved rank's wait back to it) is set
        // aside, never judged.
        if let Some(nj) = j["data"]["not_judged"].as_array() {
            not_judged_for_rank_2(run, nj, &j["data"]);
        }
        assert!(j["data"]["scan"].is_null(), "run {run}");
    }
}

/// The line rate the scan judges links against, live: no RDMA port carries a lab node's
/// data interface, so each rank's rate is its veth's `/sys/class/net/eth1/speed` (Mb/s) as
/// the kernel reports it in that node's namespace, in 10^9 bytes/s.
#[test]
fn scan_line_rate_is_each_ranks_sysfs_speed() {
    let lab_speeds = std::sync::Mutex::new(Vec::new());
    let Some(o) = scan_case("line_rate", |lab| {
        for n in 0..4 {
            let o = lab.exec(n, "cat", &["/sys/class/net/eth1/speed"]);
            assert!(o.status.success(), "node {n}: {}", text(&o.stderr));
            let mbps: f64 = text(&o.stdout).trim().parse().unwrap();
            lab_speeds.lock().unwrap().push(mbps);
        }
    }) else {
        return;
    };
    let j = json(&o.stdout);
    let want: serde_json::Map<String, serde_json::Value> = lab_speeds
        .into_inner()
        .unwrap()
        .into_iter()
        .enumerate()
        .map(|(r, mbps)| (r.to_string(), serde_json::json!(mbps / 8000.0)))
        .collect();
    assert_eq!(want.len(), 4);
    assert_eq!(
        j["data"]["scan"]["line_rate_gbs"],
        serde_json::Value::Object(want),
        "{}",
        text(&o.stderr)
    );
    // A 1 Gbit/s shaper on every 10 Gbit/s veth: the whole fabric below its line rate is a
    // note, not a verdict on any link.
    assert!(
        !j["data"]["scan"]["fabric_slow"].is_null(),
        "{}",
        j["data"]["scan"]
    );
    assert!(verdicts(&o).is_empty(), "{}", text(&o.stdout));
    // The healthy control of the scan's coverage: every link measured, said so, nothing
    // confirmed (+0.0 s, never -0.0).
    let scan = &j["data"]["scan"];
    assert_eq!((scan["links_total"].as_u64(), &scan["unmeasured"]), (Some(12), &serde_json::json!([])), "{scan}");
    assert_eq!(scan["confirm_s"].to_string(), "0.0", "{scan}");
}

/// Issue 45: a slow link in the first order (node-a -> node-b at 60 of 1000 Mbit/s, 1.6 s
/// for its 12 MB) stretched that order, the plan was sized from it (4 s / 1.6 s: the
/// minimum, shifts 1 and 3) and a real slow link of shift 2 (node-b -> node-d, 300 Mbit/s)
/// was never measured: the report named only the first. Sized from the order's typical
/// time, all 12 links are measured and the second is named too, a verdict or, where
/// `--scan-time` cut its confirmation, an unconfirmed suspect said as such; never a pass.
#[test]
fn a_slow_link_in_the_first_order_does_not_hide_another() {
    let mut args = SCAN_ARGS;
    args[4] = "4";
    let Some(o) = scan_case_with("first_order_slow", &args, |lab| {
        lab.shape_pair(0, 1, "60mbit", "1gbit");
        lab.shape_pair(1, 3, "300mbit", "1gbit");
    }) else {
        return;
    };
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let j = json(&o.stdout);
    let scan = &j["data"]["scan"];
    assert_eq!((scan["links_total"].as_u64(), &scan["unmeasured"]), (Some(12), &serde_json::json!([])), "{scan}");
    let named: Vec<(Option<u64>, Option<u64>)> = j["data"]["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .chain(scan["unconfirmed"].as_array().unwrap())
        .map(|v| (v["from_rank"].as_u64(), v["to_rank"].as_u64()))
        .collect();
    assert!(named.contains(&(Some(0), Some(1))) && named.contains(&(Some(1), Some(3))), "{named:?}\n{}", text(&o.stdout));
    // No innocent named.
    assert!(named.iter().all(|l| [(Some(0), Some(1)), (Some(1), Some(3))].contains(l)), "{named:?}");
}

#[test]
fn slow_pair_is_named_alone() {
    let Some(o) = scan_case("slow_pair_scan", |lab| lab.shape_pair(1, 3, "300mbit", "1gbit")) else {
        return;
    };
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert_eq!(
        verdicts(&o),
        kinds(&[("slow_link", Some(1), Some(3))]),
        "{}",
        text(&o.stdout)
    );
    let v = &json(&o.stdout)["data"]["verdicts"][0];
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .starts_with("SLOW LINK rank 1 (node-b, eth1) -> rank 3 (node-d, eth1): "),
        "{v}"
    );
    assert_eq!(
        (v["from_host"].as_str(), v["to_host"].as_str()),
        (Some("node-b"), Some("node-d"))
    );
}

/// A 3-node AllReduce that runs long (`-n 1000`) so that faults land mid-run.
fn long_run(lab: &Lab, token: &str) -> Vec<usize> {
    let t = TIMEOUT.to_string();
    lab.spawn_ring(
        0..3,
        3,
        token,
        &lab::long_sweep(&t, false),
    )
}

fn lab3(name: &str) -> Option<Lab> {
    Lab::new(
        name,
        LabOpts {
            nodes: 3,
            rate: Some("1gbit".into()),
        },
    )
}

#[test]
fn cut_data_link_is_a_hang_on_that_link() {
    let Some(lab) = lab3("cut_hang") else { return };
    let ids = long_run(&lab, "cut");
    lab.wait_data_flowing(0..3, Duration::from_secs(20));
    // node-c drops what node-b sends on the data network; management stays up.
    lab.cut_data_link(2, 1);
    let t0 = Instant::now();
    let outs: Vec<(Output, Duration)> = ids
        .iter()
        .map(|&id| lab.wait(id, Duration::from_secs(TIMEOUT) + GRACE + Duration::from_secs(3)))
        .collect();
    let took = t0.elapsed();
    assert!(
        took < Duration::from_secs(TIMEOUT) + GRACE,
        "ended {took:?} after the cut"
    );
    for (r, (o, _)) in outs.iter().enumerate() {
        assert_eq!(o.status.code(), Some(1), "rank {r}: {}", text(&o.stderr));
    }
    let o = &outs[0].0;
    assert_eq!(
        verdicts(o),
        kinds(&[("hang_link", Some(1), Some(2))]),
        "{}",
        text(&o.stdout)
    );
    let d = json(&o.stdout)["data"].clone();
    let m = d["verdicts"][0]["message"].as_str().unwrap().to_string();
    assert!(
        m.starts_with("HANG rank 2 (node-c) waits for data from rank 1 (node-b) since step"),
        "{m}"
    );
    assert!(m.ends_with("suspect the link node-b -> node-c"), "{m}");
    // Partial results: the run ended early, and says why.
    assert!(!d["error"].is_null());
    for (r, (o, _)) in outs.iter().enumerate().skip(1) {
        assert!(
            text(&o.stderr).contains("suspect the link node-b -> node-c"),
            "rank {r}: {}",
            text(&o.stderr)
        );
    }
}

#[test]
fn killed_rank_is_lost() {
    let Some(lab) = lab3("rank_lost") else { return };
    let ids = long_run(&lab, "lost");
    lab.wait_data_flowing(0..3, Duration::from_secs(20));
    lab.signal(ids[2], Signal::SIGKILL);
    let t0 = Instant::now();
    let (o0, _) = lab.wait(
        ids[0],
        Duration::from_secs(TIMEOUT) + GRACE + Duration::from_secs(3),
    );
    let (o1, _) = lab.wait(ids[1], Duration::from_secs(TIMEOUT) + GRACE);
    assert!(
        t0.elapsed() < Duration::from_secs(TIMEOUT) + GRACE,
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(o0.status.code(), Some(1));
    assert_eq!(o1.status.code(), Some(1));
    assert_eq!(
        verdicts(&o0),
        kinds(&[("rank_lost", Some(2), None)]),
        "{}",
        text(&o0.stdout)
    );
    assert!(
        text(&o1.stderr).contains("RANK LOST rank 2 (node-c)"),
        "{}",
        text(&o1.stderr)
    );
}

#[test]
fn stopped_rank_is_stalled() {
    let Some(lab) = lab3("rank_stalled") else { return };
    let ids = long_run(&lab, "stop");
    lab.wait_data_flowing(0..3, Duration::from_secs(20));
    lab.signal(ids[1], Signal::SIGSTOP);
    let t0 = Instant::now();
    let (o0, _) = lab.wait(
        ids[0],
        Duration::from_secs(TIMEOUT) + GRACE + Duration::from_secs(3),
    );
    let (o2, _) = lab.wait(ids[2], Duration::from_secs(TIMEOUT) + GRACE);
    assert!(
        t0.elapsed() < Duration::from_secs(TIMEOUT) + GRACE,
        "{:?}",
        t0.elapsed()
    );
    // The frozen process is killed by the lab when it drops; it cannot exit on its own.
    lab.signal(ids[1], Signal::SIGKILL);
    assert_eq!(o0.status.code(), Some(1));
    assert_eq!(o2.status.code(), Some(1));
    assert_eq!(
        verdicts(&o0),
        kinds(&[("rank_stalled", Some(1), None)]),
        "{}",
        text(&o0.stdout)
    );
    let m = json(&o0.stdout)["data"]["verdicts"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        m.starts_with("RANK STALLED rank 1 (node-b): its control connection is open"),
        "{m}"
    );
}

/// A node that loses power (its links gone; the process itself keeps running, cut off) is
/// unreachable, not stalled: its kernel no longer acknowledges the control connection.
#[test]
fn unplugged_node_is_unreachable_not_stalled() {
    let Some(lab) = lab3("rank_unreachable") else {
        return;
    };
    let ids = long_run(&lab, "plug");
    lab.wait_data_flowing(0..3, Duration::from_secs(20));
    lab.pull_plug(1);
    let t0 = Instant::now();
    let (o0, _) = lab.wait(
        ids[0],
        Duration::from_secs(TIMEOUT) + GRACE + Duration::from_secs(3),
    );
    let (o2, _) = lab.wait(ids[2], Duration::from_secs(TIMEOUT) + GRACE);
    assert!(
        t0.elapsed() < Duration::from_secs(TIMEOUT) + GRACE,
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(o0.status.code(), Some(1));
    assert_eq!(o2.status.code(), Some(1));
    assert_eq!(
        verdicts(&o0),
        kinds(&[("rank_unreachable", Some(1), None)]),
        "{}",
        text(&o0.stdout)
    );
    let v = json(&o0.stdout)["data"]["verdicts"][0].clone();
    let m = v["message"].as_str().unwrap().to_string();
    assert!(
        m.starts_with(
            "RANK UNREACHABLE rank 1 (node-b): its host has not acknowledged the control connection"
        ),
        "{m}"
    );
    let next = v["next"].as_str().unwrap().to_string();
    assert!(next.contains("BMC") && !next.contains("kill -CONT"), "{next}");
    // The cut-off rank ends on its own: its coordinator went silent.
    let (o1, _) = lab.wait(ids[1], Duration::from_secs(20));
    assert_eq!(o1.status.code(), Some(1), "{}", text(&o1.stderr));
}

#[test]
fn killed_coordinator_is_lost_on_every_other_rank() {
    let Some(lab) = lab3("coord_lost") else { return };
    let ids = long_run(&lab, "coord");
    lab.wait_data_flowing(0..3, Duration::from_secs(20));
    lab.signal(ids[0], Signal::SIGKILL);
    let t0 = Instant::now();
    for (r, &id) in ids.iter().enumerate().skip(1) {
        let (o, _) = lab.wait(id, Duration::from_secs(TIMEOUT) + GRACE);
        assert_eq!(o.status.code(), Some(1), "rank {r}: {}", text(&o.stderr));
        let e = text(&o.stderr);
        assert!(
            e.contains(&format!(
                "COORDINATOR LOST rank {r} (node-{}): the control connection to the coordinator \
                 198.18.0.10:29517",
                (b'a' + r as u8) as char
            )),
            "rank {r}: {e}"
        );
    }
    assert!(t0.elapsed() < GRACE, "{:?}", t0.elapsed());
}

/// `fabprobe ring <args>` on `node`, whose process reads `mbps` as its data port's speed: a
/// veth's speed is fixed at 10000 Mb/s in the kernel, so the lab bind-mounts a file over
/// `/sys/class/net/eth1/speed` in the rank's own mount namespace (`ip netns exec` gives each
/// process a private one: nothing else sees it). The traffic is shaped to match apart.
fn spawn_ring_at_speed(lab: &Lab, node: usize, world: usize, token: &str, args: &[&str], speed: &std::path::Path) -> usize {
    let a = lab.ring_args(node, world, token, args);
    let script = format!(
        "mount --bind {} /sys/class/net/eth1/speed && exec \"$0\" \"$@\"",
        speed.display()
    );
    let mut w: Vec<&str> = vec!["-c", &script, lab::BIN];
    w.extend(a.iter().map(String::as_str));
    lab.spawn_program(node, "sh", &w)
}

/// The review's case: 6 ranks whose data ports read 400 Mb/s and carry 400 Mbit/s, rank 2's
/// reading 100 Mb/s and carrying 100 Mbit/s both ways. Every link of rank 2 runs "fine for
/// its own rate"; judged against its peers' rate it is `port_downtrained` (drain), and no
/// other rank is named. Before, there was no verdict and exit 0.
#[test]
fn a_downtrained_port_is_named() {
    let Some(lab) = Lab::new(
        "downtrained",
        LabOpts {
            nodes: 6,
            rate: Some("400mbit".into()),
        },
    ) else {
        return;
    };
    lab.shape_egress(2, "100mbit");
    // Its ingress: what the bridge sends into its data veth.
    let outer = format!("{}2d", lab.prefix);
    let o = std::process::Command::new("tc")
        .args(["qdisc", "replace", "dev", &outer, "root", "tbf", "rate", "100mbit", "burst", "128kb", "latency", "100ms"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let dir = tempfile::tempdir().unwrap();
    let (fast, slow) = (dir.path().join("400"), dir.path().join("100"));
    std::fs::write(&fast, "400\n").unwrap();
    std::fs::write(&slow, "100\n").unwrap();
    let mut args = SCAN_ARGS;
    args[2] = "1M";
    let ids: Vec<usize> = (0..6)
        .map(|r| spawn_ring_at_speed(&lab, r, 6, "downtrained", &args, if r == 2 { &slow } else { &fast }))
        .collect();
    let outs: Vec<Output> = ids
        .iter()
        .map(|&id| lab.wait(id, Duration::from_secs(90)).0)
        .collect();
    let o = &outs[0];
    let j = json(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    // The ranks read what the lab set: 400 and 100 Mb/s, in 10^9 bytes/s.
    let rates = &j["data"]["scan"]["line_rate_gbs"];
    for r in 0..6 {
        let want = if r == 2 { 0.0125 } else { 0.05 };
        assert_eq!(rates[r.to_string()].as_f64(), Some(want), "{rates}");
    }
    let v = verdicts(o);
    assert!(v.contains(&("port_downtrained".into(), Some(2), None)), "{}", text(&o.stdout));
    for (kind, from, to) in &v {
        assert!(from.unwrap_or(2) == 2 && to.unwrap_or(2) == 2, "{kind} names another rank: {}", text(&o.stdout));
    }
    let d = j["data"]["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["kind"] == "port_downtrained")
        .unwrap();
    assert_eq!(d["action"], "drain", "{d}");
    assert_eq!(d["from_host"], "node-c", "{d}");
    // Where to act, apart: node-c to drain (one entry, every verdict naming it), no ticket.
    let drain = j["data"]["drain"].as_array().unwrap();
    assert_eq!(drain.len(), 1, "{drain:?}");
    assert_eq!((&drain[0]["host"], &drain[0]["ranks"]), (&serde_json::json!("node-c"), &serde_json::json!([2])), "{drain:?}");
    assert!(drain[0]["kinds"].as_array().unwrap().contains(&serde_json::json!("port_downtrained")), "{drain:?}");
    assert_eq!(j["data"]["ticket"], serde_json::json!([]));
    assert_eq!(d["evidence"]["netdev"], "eth1", "{d}");
    assert!(
        d["message"]
            .as_str()
            .unwrap()
            .starts_with("PORT DOWNTRAINED rank 2 (node-c, eth1): its port's active rate is 100 Mb/s, 5 of its 5 peers"),
        "{d}"
    );
}

/// A path slow for some flows only: node-b's first data connection to node-d lands on a
/// slow path and later ones do not (iptables marks the first new connection between them,
/// `statistic --mode nth`, and `CLASSIFY` sends that connection's packets through an htb
/// 150 Mbit/s class; the rest leaves at 1 Gbit/s), as a hashed ECMP path or a congested
/// uplink does. The scan finds the link slow, the re-run of its order keeps it slow (the same
/// connections), new connections run fast: `slow_path` (ticket, switch-side next steps),
/// never a slow link and never "the cable".
#[test]
fn a_path_slow_for_some_flows_is_a_slow_path() {
    let Some(o) = scan_case("slow_path", |lab| {
        let peer = lab.nodes[3].data_ip.clone();
        let x = |a: &[&str]| {
            let o = lab.exec(1, a[0], &a[1..]);
            assert!(o.status.success(), "{a:?}: {}", text(&o.stderr));
        };
        x(&["tc", "qdisc", "replace", "dev", "eth1", "root", "handle", "1:", "htb", "default", "20"]);
        x(&["tc", "class", "add", "dev", "eth1", "parent", "1:", "classid", "1:10", "htb", "rate", "150mbit", "ceil", "150mbit"]);
        x(&["tc", "class", "add", "dev", "eth1", "parent", "1:", "classid", "1:20", "htb", "rate", "1gbit", "ceil", "1gbit"]);
        // The first new TCP connection between the two, whichever end opens it.
        let first = ["-m", "conntrack", "--ctstate", "NEW", "-m", "statistic", "--mode", "nth", "--every", "100000", "--packet", "0", "-j", "CONNMARK", "--set-mark", "1"];
        let mut out = vec!["iptables", "-t", "mangle", "-A", "OUTPUT", "-p", "tcp", "-d", &peer];
        out.extend(first);
        x(&out);
        let mut pre = vec!["iptables", "-t", "mangle", "-A", "PREROUTING", "-p", "tcp", "-s", &peer];
        pre.extend(first);
        x(&pre);
        x(&["iptables", "-t", "mangle", "-A", "POSTROUTING", "-o", "eth1", "-m", "connmark", "--mark", "1", "-j", "CLASSIFY", "--set-class", "1:10"]);
    }) else {
        return;
    };
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert_eq!(verdicts(&o), kinds(&[("slow_path", Some(1), Some(3))]), "{}", text(&o.stdout));
    let j = json(&o.stdout);
    let v = &j["data"]["verdicts"][0];
    assert_eq!(v["action"], "ticket", "{v}");
    // A ticket for the path between node-b and node-d; nothing to drain.
    assert_eq!(j["data"]["drain"], serde_json::json!([]));
    let t = &j["data"]["ticket"];
    assert_eq!(t.as_array().map(Vec::len), Some(1), "{t}");
    assert_eq!((&t[0]["kind"], &t[0]["from_host"], &t[0]["to_host"]), (&serde_json::json!("slow_path"), &serde_json::json!("node-b"), &serde_json::json!("node-d")), "{t}");
    let (message, next) = (v["message"].as_str().unwrap(), v["next"].as_str().unwrap());
    assert!(
        message.starts_with("SLOW PATH rank 1 (node-b, eth1) -> rank 3 (node-d, eth1): flows from node-b to node-d are slow on some paths and not others"),
        "{v}"
    );
    assert!(!message.contains("check the cable") && !next.contains("cable"), "{v}");
    assert!(next.starts_with("on the switches between node-b and node-d"), "{v}");
    // What it cost: the re-run and the new connections, in seconds, in the report.
    let scan = &j["data"]["scan"];
    assert!(scan["confirm_s"].as_f64().unwrap() > 0.0, "{scan}");
    assert!(scan["orders"].as_array().unwrap().iter().filter(|o| o["recheck"] == true).count() >= 2, "{scan}");
}

/// `node`'s data egress at `rate` for its data, with its small packets (TCP's ACKs of
/// what it receives) at the full 1 Gbit/s: a tbf queues those ACKs behind 100 ms of data,
/// and two such nodes of four then slow half the other links too (the ACK path of what
/// they receive), more than the median of 8 links survives.
fn slow_data_egress(lab: &Lab, node: usize, rate: &str) {
    let x = |a: &[&str]| {
        let o = lab.exec(node, a[0], &a[1..]);
        assert!(o.status.success(), "{a:?}: {}", text(&o.stderr));
    };
    x(&["tc", "qdisc", "replace", "dev", "eth1", "root", "handle", "1:", "htb", "default", "20"]);
    x(&["tc", "class", "add", "dev", "eth1", "parent", "1:", "classid", "1:10", "htb", "rate", "1gbit", "ceil", "1gbit"]);
    x(&["tc", "class", "add", "dev", "eth1", "parent", "1:", "classid", "1:20", "htb", "rate", rate, "ceil", rate]);
    // IPv4 total length below 128 bytes.
    x(&["iptables", "-t", "mangle", "-A", "POSTROUTING", "-o", "eth1", "-m", "length", "--length", "0:127", "-j", "CLASSIFY", "--set-class", "1:10"]);
}

/// Two slow nodes at once in the minimum plan of 4 nodes (2 orders, `--scan-time 0`):
/// node-a's and node-c's data egress at 300 of 1000 Mbit/s. Their links reach only node-b and
/// node-d, which then look like two slow receivers as much; the order with new partners tells
/// them apart, and the verdicts are two slow egresses, nothing else (before: four slow links).
#[test]
fn two_slow_nodes_are_two_slow_egresses() {
    let Some(lab) = Lab::new(
        "two_slow",
        LabOpts {
            nodes: 4,
            rate: Some("1gbit".into()),
        },
    ) else {
        return;
    };
    for node in [0, 2] {
        slow_data_egress(&lab, node, "300mbit");
    }
    let mut args = SCAN_ARGS;
    args[4] = "0";
    let ids = lab.spawn_ring(0..4, 4, "two_slow", &args);
    let outs: Vec<Output> = ids
        .iter()
        .map(|&id| lab.wait(id, Duration::from_secs(60)).0)
        .collect();
    let o = &outs[0];
    assert_eq!(o.status.code(), Some(1), "{}\n{}", text(&o.stderr), text(&o.stdout));
    assert_eq!(
        verdicts(o),
        kinds(&[("slow_egress", Some(0), None), ("slow_egress", Some(2), None)]),
        "{}",
        text(&o.stdout)
    );
    let j = json(&o.stdout);
    // The plan was the minimum (shifts 1 and 3); shift 2 came after it, as a re-check.
    let orders = j["data"]["scan"]["orders"].as_array().unwrap();
    assert_eq!((orders[0]["shift"].as_u64(), orders[1]["shift"].as_u64()), (Some(1), Some(3)), "{orders:?}");
    assert_eq!((orders[2]["shift"].as_u64(), &orders[2]["recheck"]), (Some(2), &serde_json::json!(true)), "{orders:?}");
    for v in j["data"]["verdicts"].as_array().unwrap() {
        assert_eq!(v["action"], "drain", "{v}");
    }
    let hosts: Vec<&str> = j["data"]["drain"].as_array().unwrap().iter().map(|d| d["host"].as_str().unwrap()).collect();
    assert_eq!(hosts, ["node-a", "node-c"]);
    assert_eq!(j["data"]["ticket"], serde_json::json!([]));
}

/// The slow pair of `slow_pair_is_named_alone`, with the switch at the other end known: the
/// data bridge's ports to node-b and node-d send real LLDP frames (leaf-07 Ethernet1/2 and
/// Ethernet1/4), each rank hears its own with `--lldp-wait` (a real capture), and the
/// slow link's verdict and its ticket name both switch ports (the human line is
/// `render::ring`'s `switch_ports_under_a_verdict`). node-c's
/// port sends nothing: its neighbour stays unknown, nothing invented.
#[test]
fn a_slow_links_verdict_names_the_switch_ports_lldp_gave() {
    let Some(lab) = Lab::new(
        "slow_pair_lldp",
        LabOpts {
            nodes: 4,
            rate: Some("1gbit".into()),
        },
    ) else {
        return;
    };
    lab.shape_pair(1, 3, "300mbit", "1gbit");
    let frame = |port: &str| {
        fabprobe::sysfs::lldp::encode::frame([0x50, 0x6b, 0x4b, 0x11, 0x22, 0x33], "leaf-07", port, &[3], &[])
    };
    let senders: Vec<_> = [(0, "Ethernet1/1"), (1, "Ethernet1/2"), (3, "Ethernet1/4")]
        .into_iter()
        .map(|(node, port)| lab.send_lldp(node, frame(port)))
        .collect();
    let mut args = SCAN_ARGS.to_vec();
    args.extend(["--lldp-wait", "3"]);
    let ids = lab.spawn_ring(0..4, 4, "slow_pair_lldp", &args);
    let outs: Vec<Output> = ids
        .iter()
        .map(|&id| lab.wait(id, Duration::from_secs(60)).0)
        .collect();
    for s in senders {
        assert!(s.stop() > 0, "a switch port sent no LLDP frame");
    }
    let o = &outs[0];
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert_eq!(verdicts(o), kinds(&[("slow_link", Some(1), Some(3))]), "{}", text(&o.stdout));
    let j = json(&o.stdout);
    let n = &j["data"]["verdicts"][0]["evidence"]["neighbor"];
    for (end, host, port) in [("from", "node-b", "Ethernet1/2"), ("to", "node-d", "Ethernet1/4")] {
        assert_eq!(n[end]["system_name"], "leaf-07", "{n}");
        assert_eq!(n[end]["port_id"], port, "{n}");
        assert_eq!(n[end]["chassis_id"], "50:6b:4b:11:22:33", "{n}");
        assert_eq!(n[end]["source"], "lldp", "{n}");
        assert_eq!(n[end]["text"], format!("{host} eth1 <-> leaf-07 {port}"), "{n}");
    }
    assert_eq!(
        j["data"]["ticket"][0]["switch_ports"],
        serde_json::json!(["node-b eth1 <-> leaf-07 Ethernet1/2", "node-d eth1 <-> leaf-07 Ethernet1/4"])
    );
    let ranks = j["data"]["ranks"].as_array().unwrap();
    assert_eq!(ranks[0]["neighbor"]["port_id"], "Ethernet1/1");
    assert!(ranks[2].get("neighbor").is_none(), "{}", ranks[2]);
}

/// Every port of the rail trained down alike: 4 ranks whose data ports read 100 Mb/s and
/// carry 100 Mbit/s, while `ethtool` says both ends advertise 1000baseT/Full (a veth reports
/// no link modes, so the lab puts an `ethtool` that prints a real one's layout first on the
/// ranks' PATH, as it bind-mounts the speed). No peer majority shows the fault; what both
/// ends advertise does: each rank is `port_downtrained`, judged against 1 Gb/s, and
/// nothing else is named.
#[test]
fn a_rail_trained_down_alike_is_named_by_what_both_ends_advertise() {
    let Some(lab) = Lab::new(
        "alike",
        LabOpts {
            nodes: 4,
            rate: Some("100mbit".into()),
        },
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let speed = dir.path().join("100");
    std::fs::write(&speed, "100\n").unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let ethtool = bin.join("ethtool");
    std::fs::write(
        &ethtool,
        "#!/bin/sh\ncat <<EOF\nSettings for $1:\n\tSupported ports: [ TP ]\n\tSupported link modes:   100baseT/Full\n\t                        1000baseT/Full\n\tSupports auto-negotiation: Yes\n\tAdvertised link modes:  100baseT/Full\n\t                        1000baseT/Full\n\tAdvertised auto-negotiation: Yes\n\tLink partner advertised link modes:  100baseT/Full\n\t                                     1000baseT/Full\n\tLink partner advertised auto-negotiation: Yes\n\tSpeed: 100Mb/s\n\tDuplex: Full\n\tLink detected: yes\nEOF\n",
    )
    .unwrap();
    std::fs::set_permissions(&ethtool, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut args = SCAN_ARGS;
    args[2] = "1M";
    let ids: Vec<usize> = (0..4)
        .map(|r| {
            let a = lab.ring_args(r, 4, "alike", &args);
            let script = format!(
                "mount --bind {} /sys/class/net/eth1/speed && PATH={}:$PATH exec \"$0\" \"$@\"",
                speed.display(),
                bin.display()
            );
            let mut w: Vec<&str> = vec!["-c", &script, lab::BIN];
            w.extend(a.iter().map(String::as_str));
            lab.spawn_program(r, "sh", &w)
        })
        .collect();
    let outs: Vec<Output> = ids
        .iter()
        .map(|&id| lab.wait(id, Duration::from_secs(90)).0)
        .collect();
    let o = &outs[0];
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let want: Vec<_> = (0..4).map(|r| ("port_downtrained", Some(r), None)).collect();
    assert_eq!(verdicts(o), kinds(&want), "{}", text(&o.stdout));
    let j = json(&o.stdout);
    for v in j["data"]["verdicts"].as_array().unwrap() {
        assert_eq!(v["evidence"]["advertised_mode"], "1000baseT/Full", "{v}");
        assert_eq!(v["evidence"]["expected_rate_gbs"], 0.125, "{v}");
        assert!(
            v["message"].as_str().unwrap().contains(
                "its port's active rate is 100 Mb/s, though its port and the switch port both advertise 1 Gb/s"
            ),
            "{v}"
        );
    }
    assert_eq!(j["data"]["ranks"][1]["port_max"]["rate_mbps"], 1000);
    assert_eq!(j["data"]["drain"].as_array().unwrap().len(), 4);
}
