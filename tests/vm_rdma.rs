//! Tests on a real kernel RDMA stack: Soft-RoCE (`rdma_rxe`) in QEMU VMs (see tests/vmlab).
//! Skipped loudly without root or QEMU; `FABPROBE_LAB=required` makes that a failure.

mod common;
mod vmlab;

use std::time::{Duration, Instant};

use vmlab::{VmLab, VmOpts};

/// The lab itself: two VMs reach each other over IP and over RC verbs (perftest's and
/// rdma-core's own tools, so a fabprobe bug cannot hide a broken lab).
#[test]
fn vm_lab_two_vms_talk_rdma() {
    let Some(lab) = VmLab::new("vm_lab_two_vms_talk_rdma", VmOpts::new(2)) else {
        return;
    };
    let dev = lab.must(0, "ibv_devices");
    assert!(dev.contains("rxe0"), "{dev}");
    let server = lab.spawn(1, "exec ibv_rc_pingpong -d rxe0 -g 1 -n 50 -s 4096");
    std::thread::sleep(Duration::from_millis(500));
    let mut client = None;
    for _ in 0..20 {
        let o = lab.exec(
            0,
            &format!("ibv_rc_pingpong -d rxe0 -g 1 -n 50 -s 4096 {}", lab.vms[1].ip),
            Duration::from_secs(60),
        );
        if o.ok() {
            client = Some(o);
            break;
        }
        // The server may not be listening yet on a loaded machine.
        std::thread::sleep(Duration::from_millis(500));
    }
    let client = client.expect("ibv_rc_pingpong client never succeeded");
    assert!(client.stdout.contains("iters in"), "{client:?}");
    let s = lab.wait(&server, Duration::from_secs(60));
    assert!(s.ok(), "{s:?}");
}

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

fn counter<'a>(links: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    links["data"]["devices"][0]["ports"][0]["counters"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no counter {name} in {links}"))
}

/// The live probes on a real device: `gids` and `links` read rxe0 as the kernel shows it,
/// `links --interval` sees the packet counters move while RC traffic runs, and a snapshot
/// taken in the VM replays on the host to the same reports.
#[test]
fn live_probes_on_rxe() {
    let Some(lab) = VmLab::new("live_probes_on_rxe", VmOpts::new(2)) else {
        return;
    };
    let bin = vmlab::quote(vmlab::BIN);
    let gids = json(&lab.must(0, &format!("{bin} gids --format json")));
    let port = &gids["data"]["ports"][0];
    assert_eq!(port["device"], "rxe0", "{gids}");
    assert_eq!(port["state"], "ACTIVE");
    assert_eq!(port["entries"][1]["ipv4"], lab.vms[0].ip.as_str());
    assert_eq!(port["entries"][1]["gid_type"], "RoCE v2");
    assert_eq!(port["entries"][1]["netdev"], "eth0");
    assert_eq!(port["nccl"]["index"], 1);
    assert_eq!(gids["host"]["hostname"], "node-a");

    let links = json(&lab.must(0, &format!("{bin} links --format json")));
    let p = &links["data"]["devices"][0]["ports"][0];
    assert_eq!(p["state"]["name"], "ACTIVE", "{p}");
    assert_eq!(p["netdev"], "eth0");
    assert_eq!(links["data"]["verbs"]["devices"][0]["name"], "rxe0", "{links}");

    // RC traffic runs in loops on both VMs for the whole 4 s sampling window: the window
    // starts only once one exchange has completed, and the loops stop only after it ends (a
    // single exchange in a loaded TCG guest can fall before or after the window).
    let server = lab.spawn(
        1,
        "while [ ! -e /run/job/stop ]; do ibv_rc_pingpong -d rxe0 -g 1 -n 2000 -s 4096 >/dev/null 2>&1 || sleep 0.2; done",
    );
    let client = lab.spawn(
        0,
        &format!(
            "while [ ! -e /run/job/stop ]; do ibv_rc_pingpong -d rxe0 -g 1 -n 2000 -s 4096 {} >/dev/null 2>&1 && touch /run/job/one-ok || sleep 0.5; done",
            lab.vms[1].ip
        ),
    );
    let t0 = std::time::Instant::now();
    while !lab.job_file(0, "one-ok").exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "no ibv_rc_pingpong exchange completed in 120 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let moved = json(&lab.must(0, &format!("{bin} links --interval 4 --format json")));
    lab.must(0, "touch /run/job/stop");
    lab.must(1, "touch /run/job/stop");
    let c = lab.wait(&client, Duration::from_secs(120));
    assert!(c.ok(), "{c:?}");
    // The server's loop may sit in a pingpong that waits for a client that has stopped.
    lab.kill(&server);
    let sent = counter(&moved, "sent_pkts");
    let delta = sent["delta"]["value"].as_u64().unwrap_or(0);
    assert!(delta > 0, "sent_pkts did not move during traffic: {sent}");
    assert!(sent["rate_per_s"].as_f64().unwrap_or(0.0) > 0.0, "{sent}");
    assert_eq!(counter(&moved, "retry_exceeded_err")["delta"]["value"], 0);

    // A snapshot taken in the VM replays to the live reports.
    lab.must(
        0,
        &format!("{bin} snapshot -o /tmp/snap.tar.gz && cp /tmp/snap.tar.gz /run/job/snap.tar.gz"),
    );
    let live = json(&lab.must(0, &format!("{bin} gids --format json")));
    let snap = lab.job_file(0, "snap.tar.gz");
    let o = std::process::Command::new(vmlab::BIN)
        .args(["--root", snap.to_str().unwrap(), "--format", "json", "gids"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", vmlab::text(&o.stderr));
    let replay = json(&vmlab::text(&o.stdout));
    assert_eq!(replay["data"], live["data"]);
    assert_eq!(replay["host"]["hostname"], "node-a");
}

/// The library's unit-test binary (it holds the transport conformance suite): the newest
/// `target/<profile>/deps/fabprobe-<hash>` that lists the on-device conformance tests.
fn lib_test_binary() -> std::path::PathBuf {
    let deps = std::path::Path::new(vmlab::BIN).parent().unwrap().join("deps");
    let mut found: Vec<(std::time::SystemTime, std::path::PathBuf)> = Vec::new();
    for e in std::fs::read_dir(&deps).unwrap().flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        let is_exe = name.starts_with("fabprobe-") && !name.contains('.');
        if !is_exe {
            continue;
        }
        let Ok(o) = std::process::Command::new(&p).arg("--list").output() else {
            continue;
        };
        if vmlab::text(&o.stdout).contains("conformance_on_a_device") {
            found.push((e.metadata().and_then(|m| m.modified()).unwrap(), p));
        }
    }
    found.sort();
    found
        .pop()
        .map(|f| f.1)
        .expect("no library test binary with the RDMA conformance suite (run `cargo test --lib` first; the suite builds it)")
}

/// The on-device tests of the library (the transport conformance suite and the endpoint
/// exchange against idle connections), run against the RDMA transport on rxe0 in a VM. They
/// are `#[ignore]`d on the host, so each counts once: here, where it really ran.
const ON_DEVICE_TESTS: usize = 9;

#[test]
fn rdma_conformance_on_rxe() {
    let Some(lab) = VmLab::new("rdma_conformance_on_rxe", VmOpts::new(1)) else {
        return;
    };
    let bin = lib_test_binary();
    let o = lab.exec(
        0,
        &format!(
            "FABPROBE_RDMA_TEST_DEVICE=rxe0:1:1 {} conformance_on_a_device --ignored --test-threads 1 --nocapture",
            vmlab::quote(bin.to_str().unwrap())
        ),
        Duration::from_secs(600),
    );
    assert!(
        o.ok(),
        "conformance failed in the VM:\n{}\n{}",
        o.stdout,
        o.stderr
    );
    let want = format!("test result: ok. {ON_DEVICE_TESTS} passed");
    assert!(o.stdout.contains(&want), "{}", o.stdout);
}

/// On the host (no device) the on-device tests are ignored, not passed: the library's own
/// run must not count what only the VM lab runs. No VM needed.
#[test]
fn on_device_tests_are_not_counted_as_passed_on_the_host() {
    let bin = lib_test_binary();
    let o = std::process::Command::new(&bin)
        .arg("conformance_on_a_device")
        .env_remove("FABPROBE_RDMA_TEST_DEVICE")
        .output()
        .unwrap();
    let out = vmlab::text(&o.stdout);
    let want = format!("test result: ok. 0 passed; 0 failed; {ON_DEVICE_TESTS} ignored");
    assert!(o.status.success() && out.contains(&want), "{out}");
}

/// Run the ring on every VM; returns rank 0's output and every rank's exit status.
fn run_ring(lab: &VmLab, extra: &[&str], limit: Duration) -> (vmlab::VmOutput, Vec<i32>) {
    let world = lab.vms.len();
    let jobs: Vec<vmlab::Job> = (0..world)
        .map(|r| {
            let a = vmlab::ring_args(lab, r, world, extra);
            lab.spawn_fabprobe(r, &a.iter().map(|s| s.as_str()).collect::<Vec<_>>())
        })
        .collect();
    let outs: Vec<vmlab::VmOutput> = jobs.iter().map(|j| lab.wait(j, limit)).collect();
    let codes = outs.iter().map(|o| o.rc).collect();
    (outs.into_iter().next().unwrap(), codes)
}

const SMALL: &[&str] = &[
    "-b",
    "64K",
    "-e",
    "1M",
    "-f",
    "4",
    "-n",
    "4",
    "-w",
    "1",
    "--no-scan",
];

/// The ring over RDMA between two VMs: every result right, out of place and in place, and
/// the header names rxe0 and the GID index; `auto` picks rdma where every rank has a port.
#[test]
fn ring_rdma_two_vms() {
    let Some(lab) = VmLab::new("ring_rdma_two_vms", VmOpts::new(2)) else {
        return;
    };
    let mut extra = vec!["--transport", "rdma", "--format", "json"];
    extra.extend_from_slice(SMALL);
    let (o, codes) = run_ring(&lab, &extra, Duration::from_secs(240));
    assert_eq!(codes, vec![0, 0], "{}\n{}", o.stdout, o.stderr);
    let v = json(&o.stdout);
    assert_eq!(v["data"]["transport"], "rdma", "{v}");
    let rows = v["data"]["results"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "{v}");
    for r in rows {
        assert_eq!(r["wrong"], 0, "{r}");
        assert_eq!(r["in_place"]["wrong"], 0, "{r}");
    }
    for i in v["data"]["ranks"].as_array().unwrap() {
        assert_eq!(i["device"], "rxe0:1 gid 1 (eth0)", "{i}");
        assert_eq!(i["transport"], "rdma");
    }
    // The table header names the device; auto picks rdma.
    let mut extra = vec!["--transport", "auto"];
    extra.extend_from_slice(SMALL);
    let (o, codes) = run_ring(&lab, &extra, Duration::from_secs(240));
    assert_eq!(codes, vec![0, 0], "{}\n{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("all_reduce over rdma"), "{}", o.stdout);
    assert!(o.stdout.contains("device rxe0:1 gid 1 (eth0)"), "{}", o.stdout);
}

/// Start the ring on every VM with `env`; returns the jobs in rank order.
fn spawn_ring(lab: &VmLab, env: &[&str], extra: &[&str]) -> Vec<vmlab::Job> {
    let world = lab.vms.len();
    (0..world)
        .map(|r| {
            let a = vmlab::ring_args(lab, r, world, extra);
            lab.spawn_fabprobe_env(r, env, &a.iter().map(|s| s.as_str()).collect::<Vec<_>>())
        })
        .collect()
}

fn verdicts(v: &serde_json::Value) -> Vec<(String, Option<u64>, Option<u64>)> {
    v["data"]["verdicts"]
        .as_array()
        .map(|vs| {
            vs.iter()
                .map(|x| {
                    (
                        x["kind"].as_str().unwrap_or("").to_string(),
                        x["from_rank"].as_u64(),
                        x["to_rank"].as_u64(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A broken RDMA path between one pair of a 3-VM ring: every RoCE packet node-a sends to
/// node-b is dropped (TCP, the control plane, still flows), so only the link 0 -> 1 breaks.
/// * With a short QP timeout (NCCL_IB_TIMEOUT=14, about 67 ms a try, NCCL_IB_RETRY_CNT=1)
///   the QP gives up first: a `link_error` naming 0 -> 1 with status 12 (retry exceeded),
///   long before --timeout.
/// * With NCCL's defaults (20: 4.3 s a try, 7 retries, about 34 s) and the drop made mid-run,
///   the QP is still retrying when the data wait passes --timeout: a `hang_link` naming
///   0 -> 1 within --timeout and the grace, with the retry counters that moved.
#[test]
fn rdma_link_faults_name_the_link() {
    let Some(lab) = VmLab::new("rdma_link_faults_name_the_link", VmOpts::new(3)) else {
        return;
    };
    let bin = vmlab::quote(vmlab::BIN);
    // Warm the page cache of the 9p root: the first run in a VM reads the binary over 9p.
    for vm in 0..3 {
        lab.must(vm, &format!("{bin} --version"));
    }

    // 1. The QP gives up first: link_error with status 12.
    lab.drop_roce(0, 1);
    let t0 = std::time::Instant::now();
    let jobs = spawn_ring(
        &lab,
        &["NCCL_IB_TIMEOUT=14", "NCCL_IB_RETRY_CNT=1"],
        &[
            "--transport",
            "rdma",
            "--format",
            "json",
            "-b",
            "64K",
            "-e",
            "64K",
            "-n",
            "2",
            "-w",
            "0",
            "--no-scan",
            "--timeout",
            "30",
        ],
    );
    let outs: Vec<vmlab::VmOutput> = jobs
        .iter()
        .map(|j| lab.wait(j, Duration::from_secs(120)))
        .collect();
    let took = t0.elapsed();
    let codes: Vec<i32> = outs.iter().map(|o| o.rc).collect();
    assert_eq!(codes, vec![1, 1, 1], "{:?}", outs);
    let v = json(&outs[0].stdout);
    let vs = verdicts(&v);
    assert_eq!(vs, vec![("link_error".to_string(), Some(0), Some(1))], "{v}");
    let verdict = &v["data"]["verdicts"][0];
    assert_eq!(verdict["evidence"]["status"], 12, "{verdict}");
    let msg = verdict["message"].as_str().unwrap();
    assert!(
        msg.starts_with("LINK ERROR rank 0 (node-a) -> rank 1 (node-b): "),
        "{msg}"
    );
    assert!(
        msg.contains("status 12 (transport retry counter exceeded)"),
        "{msg}"
    );
    assert!(msg.contains("vendor syndrome 0x"), "{msg}");
    // rxe counted the retries and the failure on node-a's port.
    let pc = &verdict["evidence"]["port_counters"];
    assert!(
        pc.as_object().is_some_and(|o| o
            .keys()
            .any(|k| k.starts_with("rank 0 rxe0 port 1 retry_exceeded_err"))),
        "{verdict}"
    );
    // The completion, not the 30 s data deadline, ended the run: a deadline gives a
    // `hang_link` without a status (asserted above). No wall-clock bound here: on a busy
    // 2-core host, three TCG guests take anywhere from 10 to 30 s to set up the links.
    eprintln!("link_error run: {took:?}");

    // 2. NCCL's QP timeout (minutes of retries); the drop mid-run; the data deadline rules.
    lab.undrop(1);
    // Over rxe's first retry (4.3 s after the last unacknowledged packet, NCCL's 20), and
    // room for three TCG guests on a busy host to join within it.
    let timeout = 10;
    let jobs = spawn_ring(
        &lab,
        &[],
        &[
            "--transport",
            "rdma",
            "--format",
            "json",
            "-b",
            "64K",
            "-e",
            "64K",
            "-n",
            "100000",
            "-w",
            "0",
            "--no-scan",
            "--timeout",
            &timeout.to_string(),
            "-v",
        ],
    );
    // Wait until the ring moves data (the coordinator's heartbeat shows on no file, so look
    // at the NIC: node-b receives RoCE packets).
    let rcvd = || -> u64 {
        lab.must(1, "cat /sys/class/infiniband/rxe0/ports/1/hw_counters/rcvd_pkts")
            .trim()
            .parse()
            .unwrap_or(0)
    };
    let start = rcvd();
    let t_wait = std::time::Instant::now();
    while rcvd() < start + 2000 {
        assert!(
            t_wait.elapsed() < Duration::from_secs(90),
            "the ring never moved data"
        );
        if lab.done(&jobs[0]) {
            let outs: Vec<_> = jobs
                .iter()
                .map(|j| lab.wait(j, Duration::from_secs(30)))
                .collect();
            panic!("the run ended before the drop: {outs:#?}");
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    lab.drop_roce(0, 1);
    let t_drop = std::time::Instant::now();
    let mut took = None;
    let outs: Vec<vmlab::VmOutput> = jobs
        .iter()
        .map(|j| {
            let o = lab.wait(j, Duration::from_secs(120));
            eprintln!(
                "rank {} ended {:?} after the drop (rc {}):\n{}",
                j.vm,
                t_drop.elapsed(),
                o.rc,
                o.stderr
            );
            took.get_or_insert(t_drop.elapsed());
            o
        })
        .collect();
    let took = took.unwrap();
    lab.undrop(1);
    let v = json(&outs[0].stdout);
    assert_eq!(outs[0].rc, 1, "{v}");
    assert_eq!(
        verdicts(&v),
        vec![("hang_link".to_string(), Some(0), Some(1))],
        "{v}"
    );
    let verdict = &v["data"]["verdicts"][0];
    // Within --timeout + the grace (a few seconds here, where rank 0 still has to write its
    // report), far before NCCL's 20 x 7 retries (about 34 s) would have failed the QP.
    assert!(took < Duration::from_secs(timeout + 8), "{took:?}: {v}");
    eprintln!(
        "hang_link after the drop: {took:?}; evidence {}",
        verdict["evidence"]
    );
    // The NICs retried what the path swallowed (rxe counts each retry): node-a its data
    // writes, node-b its credit writes (their acknowledgements go a -> b too); which end
    // has a write in flight when the path breaks is a matter of timing, so either counts.
    let pc = &verdict["evidence"]["port_counters"];
    let retried = |r: u32| {
        pc.as_object().is_some_and(|o| {
            o.keys()
                .any(|k| k.starts_with(&format!("rank {r} rxe0 port 1 completer_retry_err")))
        })
    };
    assert!(
        retried(0) || retried(1),
        "{verdict}\nall counters: {}",
        v["data"]["port_counters"]
    );
    // Only the link's two ends are evidence on it.
    assert!(
        pc.as_object().is_some_and(|o| o
            .keys()
            .all(|k| k.starts_with("rank 0 ") || k.starts_with("rank 1 "))),
        "{verdict}"
    );
    eprintln!("all moved counters: {}", v["data"]["port_counters"]);
    for vm in 0..3 {
        let c = lab.console(vm);
        assert!(!c.contains("soft lockup"), "{c}");
    }
}

/// Four VMs: the ring over RDMA is right in both halves; then, in a long run, rank 2's
/// process is killed while data moves, and rank 0 names it `rank_lost` (and no link) within
/// --timeout and the grace.
#[test]
#[ignore = "opt-in (--ignored): four TCG VMs on a 2-core machine; in one of three full-suite runs a guest's virtio-net TX queue stalled (NETDEV WATCHDOG), an emulator fault, not fabprobe's"]
fn ring_rdma_four_vms_and_a_killed_rank() {
    let Some(lab) = VmLab::new("ring_rdma_four_vms_and_a_killed_rank", VmOpts::new(4)) else {
        return;
    };
    let mut extra = vec!["--transport", "rdma", "--format", "json"];
    extra.extend_from_slice(SMALL);
    let (o, codes) = run_ring(&lab, &extra, Duration::from_secs(300));
    assert_eq!(codes, vec![0, 0, 0, 0], "{}\n{}", o.stdout, o.stderr);
    let v = json(&o.stdout);
    assert_eq!(v["data"]["transport"], "rdma", "{v}");
    assert_eq!(v["data"]["world"], 4, "{v}");
    for r in v["data"]["results"].as_array().unwrap() {
        assert_eq!(r["wrong"], 0, "{r}");
        assert_eq!(r["in_place"]["wrong"], 0, "{r}");
    }

    let timeout = 8;
    let jobs = spawn_ring(
        &lab,
        &[],
        &[
            "--transport",
            "rdma",
            "--format",
            "json",
            "-b",
            "64K",
            "-e",
            "64K",
            "-n",
            "100000",
            "-w",
            "0",
            "--no-scan",
            "--timeout",
            &timeout.to_string(),
        ],
    );
    // Kill once rank 2's NIC has moved data (it sends and receives in every step).
    let sent = || -> u64 {
        lab.must(2, "cat /sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts")
            .trim()
            .parse()
            .unwrap_or(0)
    };
    let start = sent();
    let t_wait = std::time::Instant::now();
    while sent() < start + 2000 {
        assert!(
            t_wait.elapsed() < Duration::from_secs(90),
            "the ring never moved data"
        );
        assert!(
            !lab.done(&jobs[0]),
            "the run ended early: {:?}",
            lab.wait(&jobs[0], Duration::from_secs(5))
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    lab.must(2, "pkill -KILL -x fabprobe");
    let t_kill = std::time::Instant::now();
    let o0 = lab.wait(&jobs[0], Duration::from_secs(120));
    let took = t_kill.elapsed();
    let others: Vec<i32> = [1, 3]
        .iter()
        .map(|&r| lab.wait(&jobs[r], Duration::from_secs(60)).rc)
        .collect();
    let v = json(&o0.stdout);
    assert_eq!(o0.rc, 1, "{v}");
    assert_eq!(
        verdicts(&v),
        vec![("rank_lost".to_string(), Some(2), None)],
        "{v}"
    );
    assert_eq!(others, vec![1, 1], "{v}");
    assert!(took < Duration::from_secs(timeout + 8), "{took:?}: {v}");
    eprintln!("rank_lost over rdma after the kill: {took:?}");
}

/// `--rails all` over RDMA on real verbs: two VMs with two NICs each (eth0/rxe0 on one
/// bridge, eth1/rxe1 on another: rail 0 and rail 1). A healthy run has no verdict, both rails
/// right and each rail's busbw; then every RoCE packet node-a sends on rail 1 is dropped: the
/// verdicts are rail 1's (the link 0 -> 1, on rxe1) and nothing is said of rail 0.
#[test]
fn ring_rdma_rails_two_vms() {
    let mut opts = VmOpts::new(2);
    opts.nics = 2;
    let Some(lab) = VmLab::new("ring_rdma_rails_two_vms", opts) else {
        return;
    };
    // Warm the page cache of the 9p root: a loaded TCG guest's first read of the binary
    // over 9p kept a rank from joining within 30 s.
    let bin = vmlab::quote(vmlab::BIN);
    for vm in 0..2 {
        lab.must(vm, &format!("{bin} --version"));
    }
    let mut extra = vec![
        "--transport",
        "rdma",
        "--rails",
        "all",
        "--format",
        "json",
        "--timeout",
        "60",
    ];
    extra.extend_from_slice(&["-b", "1M", "-e", "1M", "-n", "2", "-w", "1", "--no-scan"]);
    let (o, codes) = run_ring(&lab, &extra, Duration::from_secs(240));
    assert_eq!(codes, vec![0, 0], "{}\n{}", o.stdout, o.stderr);
    let v = json(&o.stdout);
    let d = &v["data"];
    assert_eq!(d["transport"], "rdma", "{v}");
    assert!(d["verdicts"].as_array().unwrap().is_empty(), "{v}");
    let rails = d["rails"].as_array().unwrap();
    assert_eq!(rails.len(), 2, "{v}");
    for r in rails {
        assert!(r["error"].is_null(), "{r}");
        for row in r["results"].as_array().unwrap() {
            assert_eq!(row["wrong"], 0, "{row}");
            assert_eq!(row["in_place"]["wrong"], 0, "{row}");
        }
        let last = r["results"].as_array().unwrap().last().unwrap().clone();
        // The figure for the closing note: per-rail busbw on rxe between two TCG guests.
        eprintln!(
            "rdma rail {}: busbw {:.4} GB/s at {} bytes",
            r["rail"], last["busbw_gbs"], last["size_bytes"]
        );
    }
    for n in d["ranks"].as_array().unwrap() {
        let labels: Vec<&str> = n["rails"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["label"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(labels, ["rxe0:1 gid 1 (eth0)", "rxe1:1 gid 1 (eth1)"], "{n}");
    }

    // Rail 1 broken one way between node-a and node-b; rail 0 untouched. NCCL's QP timeout
    // (4.3 s a try) outlasts --timeout, so rail 1's ring hangs and the watchdog names it. (A
    // short QP timeout, NCCL_IB_TIMEOUT=14 with one retry, fails rail 0's healthy QPs too in
    // two loaded TCG guests: rail 1's go-back-N resends starve rail 0 past 67 ms a try.)
    lab.drop_roce_on(0, 1, 1);
    let jobs = spawn_ring(
        &lab,
        &[],
        &[
            "--transport",
            "rdma",
            "--rails",
            "all",
            "--format",
            "json",
            "-b",
            "64K",
            "-e",
            "64K",
            "-n",
            "2",
            "-w",
            "0",
            "--no-scan",
            "--timeout",
            "10",
        ],
    );
    let outs: Vec<vmlab::VmOutput> = jobs
        .iter()
        .map(|j| lab.wait(j, Duration::from_secs(150)))
        .collect();
    lab.undrop_on(1, 1);
    let v = json(&outs[0].stdout);
    assert_eq!(outs[0].rc, 1, "{v}\n{}", outs[0].stderr);
    // Every verdict is rail 1's and joins node-a and node-b; the dropped direction is named.
    let vs = v["data"]["verdicts"].as_array().unwrap();
    assert!(!vs.is_empty(), "{v}");
    for x in vs {
        let m = x["message"].as_str().unwrap();
        eprintln!("{m}");
        assert_eq!(x["rail"]["index"], 1, "{x}");
        assert!(
            ["hang_link", "link_error"].contains(&x["kind"].as_str().unwrap_or("")),
            "{x}"
        );
        assert!(m.starts_with("rail 1: "), "{m}");
        let ends = [
            x["rail"]["from"]["device"].as_str(),
            x["rail"]["to"]["device"].as_str(),
        ];
        assert!(ends.iter().flatten().all(|d| *d == "rxe1"), "{x}");
    }
    assert!(
        vs.iter().any(|x| x["from_rank"] == 0 && x["to_rank"] == 1),
        "the dropped direction is not named: {v}"
    );
    // Rail 0 either ran to its end, right, or was stopped because rail 1 failed first;
    // nothing names it.
    let r0 = &v["data"]["rails"][0];
    match r0["error"].as_str() {
        None => {
            for row in r0["results"].as_array().unwrap() {
                assert_eq!(row["wrong"], 0, "{row}");
            }
        }
        Some(e) => assert!(e.contains("rail 1 failed first"), "{r0}"),
    }
}

/// The rate node-a's rail-1 NIC is shaped to in `ring_rdma_rail_slow_egress_four_vms`.
/// Unshaped, the scan's links ran at 9.9-17.5 Mbit/s (median 12.7 and 15.4 on the two rails)
/// between three TCG guests at load 12, all rails at once (`bench_rails_three_vms`): the
/// shaped links must sit far below the healthy links' spread, and below what the ends' CPU
/// wait explains (the scan estimates a link as `gbs / (1 - wait)`, and the guests waited up
/// to 62% with two vCPUs): about a tenth.
const RAIL_SLOW_RATE: &str = "1mbit";

/// Bytes per scan sample in `ring_rdma_rail_slow_egress_four_vms`: 0.35 s at the unshaped
/// median, about 4 s through the shaper.
const SCAN_BYTES: &str = "512K";

/// `--rails all` over RDMA with three VMs of two NICs each (eth0/rxe0 rail 0, eth1/rxe1
/// rail 1) and two vCPUs each: node-b's eth1 down before the run (rxe1's port goes DOWN) is
/// the only verdict, node-b's `rail_missing` for rail 1 with the port's state; rail 1 runs on
/// node-a and node-c, rail 0 on all three, right.
#[test]
fn ring_rdma_rails_three_vms_rail_missing() {
    let Some(lab) = rails_lab("ring_rdma_rails_three_vms_rail_missing", 3) else {
        return;
    };
    rail_missing_over_rdma(&lab);
}

/// node-a's rail-1 egress shaped (tbf, read back: its counters must show it throttled the
/// scan) on four VMs of two NICs and two vCPUs: the scan names node-a's rail-1 egress
/// (`slow_egress` of rank 0 on rxe1), and no verdict names rail 0. Four, because the ACKs of
/// what node-a receives wait in its shaped queue and slow its incoming links too: with three
/// nodes those are 4 of the rail's 6 links and hold the median.
///
/// Opt-in (`--ignored`): on this loaded 2-core machine (load 12-13) the TCG guests' healthy
/// RoCE links ran anywhere from 3.1 to 19 Mbit/s in one scan (4 VMs; 2.3-27.6 with 3), the
/// scan's noise (the MAD of the healthy links) came to 1.5-7 times the median, and a node's
/// threshold, 1 - 4 x noise / sqrt(partners) of the median, fell below zero: the scan names
/// nothing there, whatever the shaper (0 of 1 run with 4 VMs; with 3 VMs 1 of 2, the one
/// where fewer than 4 healthy links left the noise unmeasured). It needs an idle machine.
#[test]
#[ignore = "needs an idle machine: under load the TCG guests' own link noise hides any shaper"]
fn ring_rdma_rail_slow_egress_four_vms() {
    let Some(lab) = rails_lab("ring_rdma_rail_slow_egress_four_vms", 4) else {
        return;
    };
    slow_rail_over_rdma(&lab);
}

/// `vms` VMs with two NICs (rails) and two vCPUs each, the fabprobe binary read once in each.
fn rails_lab(test: &str, vms: usize) -> Option<VmLab> {
    let mut opts = VmOpts::new(vms);
    opts.nics = 2;
    opts.smp = 2;
    let lab = VmLab::new(test, opts)?;
    let bin = vmlab::quote(vmlab::BIN);
    for vm in 0..vms {
        lab.must(vm, &format!("{bin} --version"));
    }
    Some(lab)
}

/// node-b's rail 1 down before the run: its rail_missing, and both rails run.
fn rail_missing_over_rdma(lab: &VmLab) {
    lab.nic_down(1, 1);
    let t0 = Instant::now();
    let (o, codes) = run_ring(
        lab,
        &[
            "--transport",
            "rdma",
            "--rails",
            "all",
            "--format",
            "json",
            "--no-scan",
            "-b",
            "1M",
            "-e",
            "1M",
            "-n",
            "2",
            "-w",
            "1",
            "--timeout",
            "60",
        ],
        Duration::from_secs(300),
    );
    eprintln!("rail missing run: {:?}", t0.elapsed());
    lab.nic_up(1, 1);
    let v = json(&o.stdout);
    let x = the_one_verdict(&v, codes[0], &o.stderr, ("rail_missing", 1, 1));
    let state = x["evidence"]["state"].as_str().unwrap_or("");
    assert!(state.starts_with("DOWN"), "{x}");
    let m = x["message"].as_str().unwrap();
    assert!(
        m.starts_with("RAIL MISSING rank 1 (node-b): its rail 1 port rxe1"),
        "{m}"
    );
    assert!(
        m.contains("rail 1 ran without it on rank 0 (node-a), rank 2 (node-c)"),
        "{m}"
    );
    assert_eq!(x["evidence"]["ran_on_ranks"], serde_json::json!([0, 2]), "{x}");
    assert!(v["data"]["error"].is_null(), "{v}");
    let rails = v["data"]["rails"].as_array().unwrap();
    assert_eq!(rails.len(), 2, "{v}");
    for (r, nodes) in [(0, serde_json::json!([0, 1, 2])), (1, serde_json::json!([0, 2]))] {
        let x = &rails[r];
        assert_eq!(x["nodes"], nodes, "{x}");
        assert!(x["error"].is_null(), "{x}");
        let rows = x["results"].as_array().unwrap();
        assert!(!rows.is_empty(), "{x}");
        for row in rows {
            assert_eq!(row["wrong"], 0, "{row}");
            assert_eq!(row["in_place"]["wrong"], 0, "{row}");
        }
        eprintln!("rail {r} on {nodes}: busbw {} GB/s", rows[0]["busbw_gbs"]);
    }
}

/// node-a's rail 1 shaped: its egress on rail 1, and nothing on rail 0.
fn slow_rail_over_rdma(lab: &VmLab) {
    lab.shape_egress_on(0, 1, RAIL_SLOW_RATE);
    let before = lab.qdisc(0, 1);
    let t0 = Instant::now();
    let (o, codes) = run_ring(
        lab,
        &[
            "--transport",
            "rdma",
            "--rails",
            "all",
            "--format",
            "json",
            "--scan",
            "--scan-bytes",
            SCAN_BYTES,
            "--scan-reps",
            "2",
            "--scan-time",
            "5",
            "--timeout",
            "60",
        ],
        Duration::from_secs(400),
    );
    let after = lab.qdisc(0, 1);
    let (bytes, pkts, dropped, over) = before.delta(&after);
    eprintln!(
        "scan {:?}; tc node-a eth1 {} rate {:?}: sent {bytes} B {pkts} pkt, dropped {dropped}, overlimits {over}",
        t0.elapsed(),
        after.kind,
        after.rate
    );
    lab.must(0, "tc qdisc del dev eth1 root");
    let v = json(&o.stdout);
    for r in v["data"]["rails"].as_array().unwrap() {
        eprintln!("rail {} scan: {}", r["rail"], r["scan"]);
    }
    assert!(
        after.kind == "tbf" && bytes > 0 && over > 0,
        "node-a's eth1 shaper did not shape the scan: {}",
        after.text
    );
    let x = the_one_verdict(&v, codes[0], &o.stderr, ("slow_egress", 0, 1));
    assert_eq!(x["rail"]["from"]["device"], "rxe1", "{x}");
    let m = x["message"].as_str().unwrap();
    assert!(m.starts_with("rail 1: SLOW EGRESS rank 0 (node-a"), "{m}");
}

/// Rank 0's report has exactly one verdict, of `kind` from rank `from` on rail `rail`, and
/// rank 0 exited 1 for it; that verdict.
fn the_one_verdict<'a>(
    v: &'a serde_json::Value,
    code: i32,
    stderr: &str,
    (kind, from, rail): (&str, u64, u64),
) -> &'a serde_json::Value {
    let vs = v["data"]["verdicts"].as_array().unwrap();
    for x in vs {
        eprintln!("{}", x["message"].as_str().unwrap_or(""));
    }
    assert_eq!(code, 1, "{v}\n{stderr}");
    assert_eq!(vs.len(), 1, "{v}");
    let x = &vs[0];
    assert_eq!(
        (
            x["kind"].as_str(),
            x["from_rank"].as_u64(),
            x["rail"]["index"].as_u64()
        ),
        (Some(kind), Some(from), Some(rail)),
        "{x}"
    );
    x
}

/// The VM lab reads its shapers back from `tc -s qdisc show`: the root qdisc's kind, rate
/// and counters, with another qdisc listed first (an ingress one) and none at all.
#[test]
fn tc_counters_are_read_from_the_root_qdisc() {
    let out = "qdisc ingress ffff: parent ffff:fff1 ----------------\n Sent 99 bytes 1 pkt (dropped 7, overlimits 0 requeues 0)\n backlog 0b 0p requeues 0\nqdisc tbf 8001: root refcnt 2 rate 4Mbit burst 64Kb lat 50ms \n Sent 1234567 bytes 890 pkt (dropped 3, overlimits 45 requeues 0) \n backlog 0b 0p requeues 0\n";
    let q = vmlab::Qdisc::parse(out).unwrap();
    assert_eq!(
        (
            q.kind.as_str(),
            q.rate.as_deref(),
            q.sent_bytes,
            q.sent_pkts,
            q.dropped,
            q.overlimits
        ),
        ("tbf", Some("4Mbit"), 1234567, 890, 3, 45)
    );
    let before = vmlab::Qdisc::parse(
        &out.replace("1234567", "1000")
            .replace("overlimits 45", "overlimits 5"),
    )
    .unwrap();
    assert_eq!(before.delta(&q), (1233567, 0, 0, 40));
    assert!(vmlab::Qdisc::parse("qdisc noqueue 0: dev lo root refcnt 2\n").is_none());
    let pfifo = "qdisc pfifo_fast 0: root refcnt 2 bands 3 priomap 1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1\n Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0)\n";
    let p = vmlab::Qdisc::parse(pfifo).unwrap();
    assert_eq!((p.kind.as_str(), p.rate, p.overlimits), ("pfifo_fast", None, 0));
}
