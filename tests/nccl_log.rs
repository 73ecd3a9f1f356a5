//! `fabprobe nccl-log` against the corpus in tests/data/nccl-logs (real formats from public
//! threads, see SOURCES.md: each file's verdict is checked against the thread's diagnosis),
//! generated jobs of hundreds of interleaved ranks, and inputs that must not crash it.

use std::process::{Command, Stdio};

use fabprobe::nccl_log::generate::{Scenario, job};
use fabprobe::nccl_log::{Analyzer, Report};

fn analyse(path: &str) -> Report {
    let mut a = Analyzer::new();
    a.read(path, std::fs::File::open(path).unwrap()).unwrap();
    a.finish()
}

fn causes(r: &Report) -> Vec<(String, String)> {
    r.verdicts
        .iter()
        .map(|v| (v.cause.clone(), v.severity.as_str().to_string()))
        .collect()
}

const CORPUS: &[&str] = &[
    "llamafactory-7396-watchdog",
    "nccl-1029-pdsh-cuda-init",
    "nccl-1232-socket-closed",
    "nccl-1537-gdr-disabled",
    "nccl-1814-roce-status12",
    "nccl-1920-k8s-reset",
    "nccl-2013-modify-qp-timeout",
    "nccl-2057-v229-no-ib",
    "nccl-300-mpirun-loopback",
    "nccl-928-ib-status4",
    "nccl-new-2287-status-names",
];

#[test]
fn whole_reports_match_the_corpus() {
    for name in CORPUS {
        let r = analyse(&format!("tests/data/nccl-logs/{name}.log"));
        insta::assert_json_snapshot!(format!("nccl_log__{name}"), r);
    }
}

#[test]
fn verdicts_match_the_threads_diagnoses() {
    let f = |n: &str| analyse(&format!("tests/data/nccl-logs/{n}.log"));
    let s = |a: &str, b: &str| (a.to_string(), b.to_string());

    // #1814 / #1664: status 12 right after start = connectivity; the status 5 lines that
    // follow (same rank, and the peer's) are flushes, not causes.
    let r = f("nccl-1814-roce-status12");
    assert_eq!(causes(&r), vec![s("ib_retry_exceeded", "fail")]);
    let v = &r.verdicts[0];
    assert_eq!(
        (v.host.as_deref(), v.rank, v.status, v.vendor_err),
        (Some("hostname-a"), Some(4), Some(12), Some(129))
    );
    let p = v.peer.as_ref().unwrap();
    assert_eq!((p.host.as_deref(), p.rank), (Some("hostname-b"), Some(12)));
    assert_eq!(v.remote_gid.as_deref(), Some("::ffff:29.87.4.221"));
    assert_eq!(v.knock_ons, 2);
    assert_eq!(r.summary.transports.get("NET/IBext_v8/GDRDMA"), Some(&2));

    // #928: status 4 (local protection) on sends from both hosts: GDR/ACS class of fault.
    let r = f("nccl-928-ib-status4");
    assert_eq!(
        causes(&r),
        vec![s("ib_local_protection", "fail"), s("ib_local_protection", "fail")]
    );
    assert_eq!(
        r.summary.nccl_versions.keys().collect::<Vec<_>>(),
        vec!["2.14.3+cuda11.7"]
    );

    // nccl #2013: ibv_modify_qp timed out at INIT->RTR on a rail-optimised fabric
    // (fixed by NCCL_CROSS_NIC=0); the peer's closed socket is a knock-on.
    let r = f("nccl-2013-modify-qp-timeout");
    assert_eq!(causes(&r), vec![s("ib_modify_qp_failed", "fail")]);
    assert_eq!(r.verdicts[0].device.as_deref(), Some("mlx5_5"));
    assert_eq!(r.verdicts[0].knock_ons, 1);

    // #300: every rank bootstrapped over lo on one host (single node: a warning), no IB.
    let r = f("nccl-300-mpirun-loopback");
    assert_eq!(
        causes(&r),
        vec![s("socket_iface_loopback", "warn"), s("ib_no_device", "warn")]
    );
    assert_eq!(r.summary.hosts.len(), 1);
    assert_eq!(r.summary.hosts[0].ranks, vec![0, 1, 2, 3]);
    assert_eq!(r.summary.ring_channels, 2);

    // LlamaFactory #7396: ranks 0,2-7 time out on SeqNum 1580; rank 1 is the suspect.
    let r = f("llamafactory-7396-watchdog");
    assert_eq!(causes(&r), vec![s("collective_timeout", "fail")]);
    assert_eq!(r.verdicts[0].seq, Some(1580));
    assert_eq!(r.verdicts[0].suspects, vec![1]);

    // #1232: a peer closed its socket; sockets across two hosts.
    let r = f("nccl-1232-socket-closed");
    assert_eq!(
        causes(&r),
        vec![
            s("remote_process_exited", "fail"),
            s("net_socket_fallback", "warn"),
            s("ib_no_device", "warn"),
            s("ib_no_device", "warn")
        ]
    );
    assert_eq!(
        r.verdicts[0].peer.as_ref().unwrap().host.as_deref(),
        Some("node2")
    );

    // #1029: CUDA initialization errors behind pdsh prefixes.
    let r = f("nccl-1029-pdsh-cuda-init");
    assert!(causes(&r).iter().all(|c| c.0 == "cuda_error"), "{:?}", causes(&r));
    assert_eq!(r.verdicts[0].host.as_deref(), Some("rdma-test-gpu-worker-1"));

    // #1537: GDR disabled for both HCAs (no peer memory client registered).
    let r = f("nccl-1537-gdr-disabled");
    assert_eq!(
        causes(&r),
        vec![s("gdr_disabled", "warn"), s("gdr_disabled", "warn")]
    );
    assert_eq!(r.summary.transports.get("NET/IB"), Some(&2));

    // #2057 (NCCL 2.29 format): no IB device, Socket network.
    let r = f("nccl-2057-v229-no-ib");
    assert_eq!(causes(&r), vec![s("ib_no_device", "warn")]);
    assert_eq!(
        r.summary.nccl_versions.keys().collect::<Vec<_>>(),
        vec!["2.29.2+cuda12.8"]
    );
    assert_eq!(r.summary.unrecognised_lines, 1, "the application's own line");

    // #1920: headers without pid:tid behind two timestamps; connection reset by the peer.
    let r = f("nccl-1920-k8s-reset");
    assert_eq!(causes(&r), vec![s("remote_process_exited", "fail")]);
    assert_eq!(
        r.verdicts[0].peer.as_ref().unwrap().addr.as_deref(),
        Some("10.44.137.149<52905>")
    );

    // >= 2.28.7 format: status=<name>(12), vendor_err=.
    let r = f("nccl-new-2287-status-names");
    assert_eq!(causes(&r), vec![s("ib_retry_exceeded", "fail")]);
    assert_eq!(r.verdicts[0].device.as_deref(), Some("mlx5_0"));
    assert_eq!(r.verdicts[0].peer.as_ref().unwrap().rank, Some(1));
}

fn generated(hosts: usize, gpus: usize, sc: Scenario) -> Report {
    let mut buf = Vec::new();
    job(&mut buf, hosts, gpus, sc, 2000, 7).unwrap();
    let mut a = Analyzer::new();
    a.read("job.log", &buf[..]).unwrap();
    a.finish()
}

#[test]
fn hundreds_of_interleaved_ranks_collapse_to_one_cause() {
    // 64 hosts x 8 = 512 ranks; host 37's mlx5_3 gets status 12 towards host 12; every other
    // rank flushes and every rank times out: one verdict.
    let r = generated(
        64,
        8,
        Scenario::RetryExceeded {
            host: 37,
            peer_host: 12,
            hca: 3,
        },
    );
    let fails: Vec<_> = r
        .verdicts
        .iter()
        .filter(|v| v.severity.as_str() == "fail")
        .collect();
    assert_eq!(fails.len(), 1, "{:#?}", causes(&r));
    let v = fails[0];
    assert_eq!(v.cause, "ib_retry_exceeded");
    assert_eq!(v.host.as_deref(), Some("gpu-037"));
    assert_eq!(v.rank, Some(37 * 8 + 3));
    assert_eq!(v.device.as_deref(), Some("mlx5_3"));
    assert_eq!(v.peer.as_ref().unwrap().host.as_deref(), Some("gpu-012"));
    assert_eq!(v.knock_ons, 511 + 512, "511 flushes and 512 timeouts");
    assert_eq!(r.summary.world_size, Some(512));
    assert_eq!(r.summary.ranks_seen, 512);
    assert_eq!(r.summary.hosts.len(), 64);
    assert_eq!(r.summary.unrecognised_lines, 0);
}

#[test]
fn a_hang_names_the_ranks_that_never_arrived() {
    let r = generated(32, 8, Scenario::Hang { stuck: 100, n: 3 });
    assert_eq!(r.verdicts.len(), 1, "{:#?}", causes(&r));
    let v = &r.verdicts[0];
    assert_eq!(v.cause, "collective_timeout");
    assert_eq!(v.suspects, vec![100, 101, 102]);
    assert_eq!(v.ranks.len() + 1, 256 - 3);
    let healthy = generated(4, 8, Scenario::Healthy);
    assert!(healthy.verdicts.is_empty(), "{:#?}", causes(&healthy));
}

#[test]
fn garbage_long_lines_and_binary_never_crash() {
    let mut junk: Vec<u8> = Vec::new();
    junk.extend_from_slice(b"\xff\xfe\x00binary\x00 NCCL WARN \n");
    junk.extend_from_slice(&vec![b'x'; 200_000]);
    junk.extend_from_slice(b" NCCL INFO \n:::: [x] NCCL WARN\n[ NCCL INFO ]\nNCCL version \n");
    junk.extend_from_slice(b"h:1:2 [0] NCCL WARN NET/IB : Got completion from peer with status=\n");
    junk.extend_from_slice(b"h:1:2 [0] NCCL INFO Channel 00/0 : x[0] -> [1] via\n");
    junk.extend_from_slice(b"no newline at the end NCCL WARN Cuda failure 'x'");
    let mut a = Analyzer::new();
    a.read("junk", &junk[..]).unwrap();
    let r = a.finish();
    assert_eq!(r.summary.truncated_lines, 1);
    assert_eq!(r.summary.lines, 8);
}

#[test]
fn cli_reads_stdin_and_directories_and_exits_1_on_a_fail() {
    let bin = env!("CARGO_BIN_EXE_fabprobe");
    let mut child = Command::new(bin)
        .args(["--format", "json", "nccl-log", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let text = std::fs::read("tests/data/nccl-logs/nccl-1814-roce-status12.log").unwrap();
    {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(&text).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema"], "fabprobe.nccl-log");
    assert_eq!(v["data"]["verdicts"][0]["cause"], "ib_retry_exceeded");
    assert_eq!(v["findings"][0]["id"], "nccl_log.ib_retry_exceeded");

    let out = Command::new(bin)
        .args(["nccl-log", "tests/data/nccl-logs"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let t = String::from_utf8_lossy(&out.stdout);
    // Every file of the directory is read (rank logs have any name): the corpus and SOURCES.md.
    assert!(t.contains(&format!("from {} input(s)", CORPUS.len() + 1)), "{t}");
    // Seven NCCL versions across these unrelated logs: a mismatch verdict.
    assert!(t.contains("FAIL version_mismatch"), "{t}");

    let out = Command::new(bin)
        .args(["nccl-log", "tests/data/nccl-logs/nccl-1537-gdr-disabled.log"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "warnings only");

    let out = Command::new(bin)
        .args(["nccl-log", "/nonexistent/x.log"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("/nonexistent/x.log") && e.contains("hint:"), "{e}");
}
