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
    let n = std::fs::read_dir("tests/data/nccl-logs").unwrap().count();
    assert!(t.contains(&format!("from {n} input(s)")), "{t}");
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

fn one(lines: &str) -> Report {
    let mut a = Analyzer::new();
    a.read("paste", lines.as_bytes()).unwrap();
    a.finish()
}

/// Every failure format the analyser reads, with NCCL's header, and the cause it names.
const FORMATS: &[(&str, &str, &str)] = &[
    (
        "transport/net_ib.cc:1697",
        "NET/IB : Got completion from peer 10.0.0.2<41237> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:10.0.0.1 remoteGids::ffff:10.0.0.2 hca mlx5_3",
        "ib_retry_exceeded",
    ),
    (
        "transport/net_ib.cc:1101",
        "NET/IB : Got completion with error 4, opcode 1, len 0, vendor err 81",
        "ib_local_protection",
    ),
    (
        "misc/ibvwrap.cc:212",
        "Call to ibv_open_device failed",
        "ib_device_open_failed",
    ),
    (
        "misc/ibvwrap.cc:280",
        "Call to ibv_modify_qp failed with 110 Connection timed out, on dev mlx5_3:1, curr state INIT, next state RTR, local GID index 3, local GID ::ffff:10.0.0.1, remote GID ::ffff:10.0.1.1",
        "ib_modify_qp_failed",
    ),
    (
        "misc/ibvwrap.cc:190",
        "Call to ibv_reg_mr failed",
        "ib_reg_mr_failed",
    ),
    (
        "include/socket.h:390",
        "Call to connect timeout : Connection refused",
        "socket_connect_failed",
    ),
    (
        "misc/socket.cc:533",
        "socketPollConnect: Connect to 10.0.0.2<40861> returned 111(Connection refused) errno 115(Operation now in progress)",
        "socket_connect_failed",
    ),
    (
        "misc/socket.cc:578",
        "socketPollConnect: connect to 10.82.101.249<54709> returned Connection refused, exceeded error retry count after 35 attempts",
        "socket_connect_failed",
    ),
    (
        "misc/socket.cc:480",
        "socketPollConnect: exceeded timeouts (20)",
        "socket_connect_failed",
    ),
    (
        "misc/socket.cc:46",
        "socketProgressOpt: Call to recv from 10.44.0.7<52905> failed : Connection reset by peer",
        "remote_process_exited",
    ),
    (
        "misc/socket.cc:60",
        "socketProgress: Connection closed by remote peer node2<42830>",
        "remote_process_exited",
    ),
    ("init.cc:263", "Cuda failure 'initialization error'", "cuda_error"),
    ("enqueue.cu:1120", "Cuda failure 2 'out of memory'", "cuda_oom"),
    (
        "misc/shmutils.cc:82",
        "Error: failed to extend /dev/shm/nccl-ABCDEF to 9637892 bytes, error: No space left on device (28)",
        "shm_alloc_failed",
    ),
    (
        "include/shm.h:48",
        "Error while creating shared memory segment nccl-shm-recv-1a2b-0-1-2 (size 9637888)",
        "shm_alloc_failed",
    ),
    (
        "transport/net_ib.cc:100",
        "NET/IB : mlx5_3:1 Got async event : port error",
        "ib_port_error",
    ),
    (
        "transport/net_ib.cc:85",
        "NET/IB : Got async event : local catastrophic error",
        "ib_device_fatal",
    ),
    (
        "init.cc:738",
        "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 1000",
        "duplicate_gpu",
    ),
    (
        "bootstrap.cc:229",
        "Bootstrap Root : mismatch in rank count from procs 8 : 16",
        "bootstrap_rank_mismatch",
    ),
    (
        "bootstrap.cc:90",
        "Bootstrap : no socket interface found",
        "socket_no_interface",
    ),
    (
        "proxy.cc:1500",
        "[Proxy Service 3] Failed to execute operation Connect from rank 3, retcode 3",
        "proxy_connection_failed",
    ),
    (
        "group.cc:77",
        "Something this version of fabprobe has never seen",
        "unclassified_failure",
    ),
];

/// The same line as people paste it: stripped, anonymised, coloured, re-prefixed.
fn variants(src: &str, msg: &str) -> Vec<(String, String)> {
    let body = format!("{src} NCCL WARN {msg}");
    let full = format!("gpu-07:41203:41310 [3] {body}");
    vec![
        ("header".into(), full.clone()),
        ("no header".into(), body.clone()),
        ("bare".into(), format!("NCCL WARN {msg}")),
        ("anonymised pid".into(), format!("host-01:XXXXXX [3] {body}")),
        ("placeholders".into(), format!("<hostname>:<pid> [3] {body}")),
        ("markdown".into(), format!("_{body}_")),
        ("quoted".into(), format!("> {full}")),
        ("colour".into(), format!("\x1b[1;31m{full}\x1b[0m")),
        ("crlf".into(), format!("{full}\r")),
        ("torchrun".into(), format!("[rank3]:{full}")),
        ("mpirun".into(), format!("[1,3]<stderr>:{full}")),
        ("srun".into(), format!("3: {full}")),
        ("ray".into(), format!("(RayWorkerWrapper pid=142935) {full}")),
        (
            "k8s".into(),
            format!("2025-11-24T03:20:21.001125857Z [2025-11-24 11:20:21] {full}"),
        ),
    ]
}

#[test]
fn every_format_gives_its_cause_however_it_was_pasted() {
    for (src, msg, cause) in FORMATS {
        for (how, line) in variants(src, msg) {
            let r = one(&line);
            let fails: Vec<&str> = r.verdicts.iter().map(|v| v.cause.as_str()).collect();
            assert_eq!(fails, vec![*cause], "{how}: {line:?}");
            let v = &r.verdicts[0];
            if how == "header" || how == "colour" || how == "crlf" {
                assert_eq!(v.host.as_deref(), Some("gpu-07"), "{how}: {line:?}");
            }
            // Duplicate GPU names its own rank in the text.
            if matches!(how.as_str(), "no header" | "bare" | "markdown" | "placeholders")
                && v.cause != "duplicate_gpu"
            {
                assert_eq!((v.host.as_deref(), v.rank), (None, None), "{how}: {line:?}");
            }
            if matches!(how.as_str(), "torchrun" | "mpirun" | "srun") && v.cause != "duplicate_gpu" {
                assert_eq!(v.rank, Some(3), "{how}: {line:?}");
            }
        }
    }
}

#[test]
fn an_unknown_warn_is_a_failure_with_its_return_code() {
    let r = one("h1:10:11 [0] group.cc:77 NCCL WARN \x07Brand new failure text\n\
         h1:10:11 [0] NCCL INFO group.cc:80 -> 5\n\
         h1:10:11 [0] NCCL INFO init.cc:1900 -> 5\n");
    assert_eq!(r.verdicts.len(), 1);
    let v = &r.verdicts[0];
    assert_eq!(
        (v.cause.as_str(), v.severity.as_str()),
        ("unclassified_failure", "fail")
    );
    assert_eq!(v.nccl_result.as_deref(), Some("ncclInvalidUsage (5)"));
    assert_eq!(v.host.as_deref(), Some("h1"));
    assert!(v.line.contains("Brand new failure text"));
    // Escaped when printed (as every printed line is: text::printable), verbatim in JSON.
    let t = fabprobe::render::nccl_log::table(&r);
    assert!(t.contains("\\x07Brand new failure text"), "{t}");

    // A trail alone (the WARN line was lost) is a failure too; no WARN, no trail: none.
    let r = one("h1:10:11 [0] NCCL INFO transport/net.cc:1298 -> 2\n");
    assert_eq!(r.verdicts[0].cause, "unclassified_failure");
    assert_eq!(r.verdicts[0].nccl_result.as_deref(), Some("ncclSystemError (2)"));
    let r = one("h1:10:11 [0] NCCL INFO Init COMPLETE\n");
    assert!(r.verdicts.is_empty());
}

#[test]
fn input_without_nccl_lines_says_so() {
    let r = one("Epoch 1 loss 0.3\nEpoch 2 loss 0.2\n");
    assert_eq!(r.verdicts.len(), 1);
    assert_eq!(
        (r.verdicts[0].cause.as_str(), r.verdicts[0].severity.as_str()),
        ("no_nccl_output", "unknown")
    );
    // Unknown is no finding (nothing was judged), as check keeps not-evaluated keys out.
    assert!(fabprobe::finding::ToFindings::findings(&r).is_empty());
    assert!(r.verdicts[0].next.contains("NCCL_DEBUG=INFO"));
    // Unknown is its own exit status (3), not a pass: a file without NCCL lines, an empty
    // file, an empty directory, empty stdin.
    let dir = std::env::temp_dir().join(format!("fabprobe-nccl-log-empty-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("none")).unwrap();
    std::fs::write(dir.join("empty.log"), "").unwrap();
    let (empty, none) = (dir.join("empty.log"), dir.join("none"));
    // A directory with no file is a mistake in the command (exit 2, as sweep), not a log.
    let o = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .args(["nccl-log", none.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    for args in [
        vec!["nccl-log", "Cargo.toml"],
        vec!["nccl-log", empty.to_str().unwrap()],
        vec!["nccl-log", "-"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(3), "{args:?}");
        let t = String::from_utf8_lossy(&out.stdout);
        assert!(
            t.starts_with("fabprobe nccl-log: UNKNOWN  no NCCL line in ")
                && t.lines().next().unwrap().contains("NCCL_DEBUG=INFO")
                && t.contains("no_nccl_output"),
            "{args:?}: {t}"
        );
    }
    // In JSON too: the verdict's severity is unknown, the envelope has no finding (nothing
    // was judged, as check keeps not-evaluated keys out), and the exit status is 3.
    let out = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .args(["nccl-log", "--format", "json", empty.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["data"]["verdicts"][0]["cause"], "no_nccl_output");
    assert_eq!(j["data"]["verdicts"][0]["severity"], "unknown");
    assert_eq!(j["findings"], serde_json::json!([]));
    // Unknown plus a fail is a fail.
    let out = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .args(["nccl-log", empty.to_str().unwrap(), "tests/data/nccl-logs/nccl-1814-roce-status12.log"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The headline first, then the verdicts, then the summary and the hosts table; piped, a
/// host's many interfaces make no 600-character column.
#[test]
fn headline_first_then_verdicts_then_a_bounded_hosts_table() {
    let out = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .args(["nccl-log", "tests/data/nccl-logs/nccl-1814-roce-status12.log"])
        .env_remove("COLUMNS")
        .output()
        .unwrap();
    let t = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        t.lines().next().unwrap(),
        "fabprobe nccl-log: FAIL  1 fail, 0 warn; worst: ib_retry_exceeded on hostname-a rank 4"
    );
    let at = |k: &str| t.find(k).unwrap_or_else(|| panic!("{k} in {t}"));
    assert!(at("Verdicts:") < at("Read 30 line(s)") && at("Read 30 line(s)") < at("Hosts:"), "{t}");

    // 40 socket interfaces on one host: 4 shown, then "and 36 more".
    let mut log = String::from("h1:1:1 [0] NCCL INFO NET/Socket : Using");
    for i in 0..40 {
        log.push_str(&format!(" [{i}]veth{i:04x}abcd:10.1.{i}.1<0>"));
    }
    log.push_str("\nh1:1:1 [0] NCCL INFO Using network Socket\n");
    let r = one(&log);
    assert_eq!(r.summary.hosts[0].socket_interfaces.len(), 40, "JSON keeps them all");
    let table = fabprobe::render::nccl_log::table(&r);
    let hosts = &table[table.find("\nHosts:\n").unwrap()..];
    assert!(hosts.lines().all(|l| l.len() < 120), "{hosts}");
    assert!(hosts.contains("and 36 more"), "{hosts}");
}

#[test]
fn pytorch_global_rank_is_the_launcher_label_and_passed_ranks_are_not_suspects() {
    let t = |r: u32, seq: u32| {
        format!(
            "[rank{r}]:[E1130 10:00:00.0 ProcessGroupNCCL.cpp:632] [PG ID 1 PG GUID 1 Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600031 milliseconds before timing out.\n"
        )
    };
    // Ranks 0,1,3 time out on 40; rank 2 already timed out on 41 (it passed 40); rank 4
    // says it enqueued 40. Rank 5 is the only one never seen past 40.
    let mut log = String::new();
    for r in [0, 1, 3] {
        log.push_str(&t(r, 40));
    }
    log.push_str(&t(2, 41));
    log.push_str("[rank4]:[E1130 ProcessGroupNCCL.cpp:1600] [PG ID 1 PG GUID 1 Rank 0] Timeout at NCCL work: 39, last enqueued NCCL work: 40, last completed NCCL work: 39.\n");
    log.push_str(&t(6, 40));
    let r = one(&log);
    let v = r.verdicts.iter().find(|v| v.seq == Some(40)).unwrap();
    assert_eq!(v.rank, Some(0));
    assert_eq!(v.ranks, vec![1, 3, 6]);
    assert_eq!(v.suspects, vec![5]);
}

proptest::proptest! {
    #[test]
    fn any_line_with_nccl_warn_has_a_verdict(pre in "\\PC{0,40}", post in "\\PC{0,80}") {
        let line = format!("{pre}NCCL WARN {post}");
        let mut a = Analyzer::new();
        a.feed("p", 1, &line);
        let r = a.finish();
        proptest::prop_assert!(!r.verdicts.is_empty(), "{:?}", line);
    }
}

/// Real excerpts pasted as their posters pasted them (SOURCES.md, second table): the first
/// verdict's cause, severity, host and rank against the thread's diagnosis.
#[test]
fn pasted_excerpts_give_the_threads_causes() {
    /// (file, cause, severity, host, rank)
    type Case = (
        &'static str,
        &'static str,
        &'static str,
        Option<&'static str>,
        Option<u32>,
    );
    const CASES: &[Case] = &[
        (
            "nccl-342-shm-docker-headerless",
            "shm_alloc_failed",
            "fail",
            None,
            None,
        ),
        (
            "nccl-290-shm-horovod",
            "shm_alloc_failed",
            "fail",
            Some("gpu2-ru7"),
            None,
        ),
        (
            "nccl-tests-166-shmutils",
            "shm_alloc_failed",
            "fail",
            Some("ubuntu"),
            None,
        ),
        (
            "pytorch-ci-infra-490-shm-k8s",
            "shm_alloc_failed",
            "fail",
            Some("mt-l-x86iavx512-45-172-t4-4-csmpw-runner-g4sfw-workflow"),
            None,
        ),
        ("nccl-525-kubeflow-shm", "shm_alloc_failed", "fail", None, None),
        (
            "horovod-3929-duplicate-gpu",
            "duplicate_gpu",
            "fail",
            Some("smc-gpu-03"),
            Some(2),
        ),
        (
            "megatron-661-duplicate-gpu-pytorch",
            "duplicate_gpu",
            "fail",
            None,
            Some(3),
        ),
        (
            "verl-161-duplicate-gpu-ray",
            "duplicate_gpu",
            "fail",
            None,
            Some(1),
        ),
        (
            "nccl-tests-166-socket-abort",
            "socket_connect_failed",
            "fail",
            Some("ubuntu"),
            None,
        ),
        (
            "nccl-914-proxy-closed",
            "proxy_connection_failed",
            "fail",
            Some("host"),
            None,
        ),
        (
            "nccl-1099-trail-only",
            "unclassified_failure",
            "fail",
            Some("nd20-01"),
            None,
        ),
        // Sockets over ens5 and a Docker container veth (`veth` + 7 hex digits), one host.
        (
            "pytorch-68893-libibverbs-ansi-debris",
            "socket_iface_virtual",
            "warn",
            Some("ip-172-31-0-137"),
            None,
        ),
        // NCCL 2.0's `WARN` without `NCCL` (src/include/debug.h of 2.0-2.2): the refused
        // connect is the cause, the application's `NCCL failure` line its knock-on.
        (
            "nccl-111-v20-plain-warn",
            "socket_connect_failed",
            "fail",
            None,
            None,
        ),
        (
            "nccl-tests-188-unknown-warn",
            "unclassified_failure",
            "fail",
            Some("user"),
            None,
        ),
        (
            "tensorrt-llm-1670-cuda-oom",
            "cuda_oom",
            "fail",
            Some("VM-0-16-ubuntu"),
            None,
        ),
        (
            "nccl-1235-oom-multinode",
            "cuda_oom",
            "fail",
            Some("ng30903"),
            None,
        ),
        (
            "nccl-1710-async-event-markdown",
            "ib_async_error",
            "fail",
            Some("node201"),
            None,
        ),
        (
            "basicsr-737-pg-watchdog",
            "collective_timeout",
            "fail",
            None,
            Some(0),
        ),
        (
            "vllm-6042-ray-pg-timeout",
            "collective_timeout",
            "fail",
            None,
            Some(1),
        ),
        (
            "llamafactory-8261-pg-id",
            "collective_timeout",
            "fail",
            None,
            Some(2),
        ),
        (
            "nccl-1837-ifname-not-found",
            "socket_no_interface",
            "fail",
            None,
            None,
        ),
        (
            "nccl-1618-custom-prefix-pollconnect",
            "socket_connect_failed",
            "fail",
            None,
            None,
        ),
        // Pre-2.4 `include/socket.h:344 WARN` pasted without its header and without
        // `NCCL`: the maintainers found no IP interface on the machine.
        (
            "nccl-210-v24-socket-creation",
            "socket_no_interface",
            "fail",
            None,
            None,
        ),
        (
            "nccl-278-v25-socket-two-hosts",
            "net_socket_fallback",
            "warn",
            None,
            None,
        ),
    ];
    for (name, cause, sev, host, rank) in CASES {
        let r = analyse(&format!("tests/data/nccl-logs/{name}.log"));
        let v = &r.verdicts[0];
        assert_eq!(
            (v.cause.as_str(), v.severity.as_str(), v.host.as_deref(), v.rank),
            (*cause, *sev, *host, *rank),
            "{name}: {:?}",
            causes(&r)
        );
    }
    // The trail's code and the socket errno come through.
    let r = analyse("tests/data/nccl-logs/nccl-1099-trail-only.log");
    assert_eq!(r.verdicts[0].nccl_result.as_deref(), Some("ncclSystemError (2)"));
    let r = analyse("tests/data/nccl-logs/nccl-tests-166-socket-abort.log");
    assert_eq!(r.verdicts[0].errno, Some(103));
    // PG ranks are not global ranks: rank 0 passed 2847 (enqueued 2855), not a suspect.
    let r = analyse("tests/data/nccl-logs/llamafactory-8261-pg-id.log");
    assert!(!r.verdicts[0].suspects.contains(&0));
}

fn verdicts(r: &Report) -> Vec<(&str, &str, Option<&str>)> {
    r.verdicts
        .iter()
        .map(|v| (v.cause.as_str(), v.severity.as_str(), v.host.as_deref()))
        .collect()
}

/// What NCCL recovers from is no failure: a plugin whose init fails before NCCL chose a
/// network (src/plugin/net.cc tries the next), a disabled transport's init trail.
#[test]
fn errors_nccl_recovers_from_are_not_failures() {
    let r = one("h1:1:1 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.7.4-aws\n\
        h1:1:1 [0] nccl_net_ofi_create_plugin:235 NCCL WARN NET/OFI Unable to find a protocol that worked.  Failing initialization.\n\
        h1:1:1 [0] NCCL INFO transport/net.cc:300 -> 3\n\
        h1:1:1 [0] NCCL INFO Failed to initialize NET plugin AWS Libfabric\n\
        h1:1:1 [0] NCCL INFO Using network IB\n\
        h1:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE\n");
    assert_eq!(verdicts(&r), vec![("net_plugin_fallback", "warn", Some("h1"))]);
    assert!(r.verdicts[0].meaning.contains("aws-ofi-nccl 1.7.4-aws"), "{:?}", r.verdicts[0]);
    let r = one("h1:1:1 [0] NCCL INFO transport/net_ib.cc:400 -> 3\n\
        h1:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n\
        h1:1:1 [0] NCCL INFO Using network Socket\n");
    assert!(r.verdicts.is_empty(), "{:?}", verdicts(&r));
    // The same trail after the network was chosen is a failure.
    let r = one("h1:1:1 [0] NCCL INFO Using network IB\n\
        h1:1:1 [0] NCCL INFO transport/net_ib.cc:400 -> 3\n");
    assert_eq!(verdicts(&r), vec![("unclassified_failure", "fail", Some("h1"))]);
    // A plugin's WARN after it was chosen is its own cause, naming plugin and version.
    let r = one("h1:1:1 [0] NCCL INFO NET/OFI Using aws-ofi-nccl 1.3.0aws\n\
        h1:1:1 [0] NCCL INFO Using network AWS Libfabric\n\
        h1:1:1 [0] register_mr_buffers:544 NCCL WARN NET/OFI Unable to register memory (type = 2) for device 0. RC: -22, Error: Invalid argument\n");
    assert_eq!(verdicts(&r), vec![("net_plugin_reg_mr_failed", "fail", Some("h1"))]);
    assert_eq!(r.verdicts[0].device.as_deref(), Some("NET/OFI"));
    assert!(r.verdicts[0].meaning.contains("aws-ofi-nccl 1.3.0aws"));
}

/// An unknown error trail never outranks a classified cause of the same log.
#[test]
fn unclassified_ranks_below_a_classified_cause() {
    let r = one("a:1:1 [0] NCCL INFO Bootstrap : Using docker0:172.17.0.1<0>\n\
        a:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 - Init START\n\
        b:2:2 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>\n\
        b:2:2 [0] NCCL INFO comm 0x1 rank 1 nranks 2 cudaDev 0 busId 1000 - Init START\n\
        b:2:2 [0] group.cc:77 NCCL WARN Something never seen before\n");
    assert_eq!(
        verdicts(&r),
        vec![
            ("socket_iface_virtual", "fail", Some("a")),
            ("unclassified_failure", "fail", Some("b"))
        ]
    );
    assert!(r.verdicts[0].line.contains("Docker default bridge"), "{:?}", r.verdicts[0]);
}

/// Root cause over symptom: the earlier event is the verdict, the completion errors it
/// explains are listed under it.
#[test]
fn an_earlier_event_explains_later_completion_errors() {
    let boot = "a:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE ; OOB eth0:10.0.0.1<0>\n\
        a:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 - Init START\n\
        b:2:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE ; OOB eth0:10.0.0.2<0>\n\
        b:2:2 [0] NCCL INFO comm 0x1 rank 1 nranks 2 cudaDev 0 busId 1000 - Init START\n";
    let status12 = "a:1:1 [0] transport/net_ib.cc:1697 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<41237> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:10.0.0.1 remoteGids::ffff:10.0.0.2 hca mlx5_0\n";
    // The peer's GID table changed first.
    let r = one(&format!(
        "{boot}b:2:2 [0] transport/net_ib.cc:100 NCCL WARN NET/IB : mlx5_0:1 Got async event : GID table change\n{status12}"
    ));
    assert_eq!(verdicts(&r), vec![("ib_gid_change", "fail", Some("b"))]);
    assert_eq!(r.verdicts[0].explains, vec!["ib_retry_exceeded on a rank 0 mlx5_0 status 12"]);
    // The peer died of its own CUDA error first.
    let r = one(&format!(
        "{boot}b:2:2 [0] enqueue.cc:100 NCCL WARN Cuda failure 'an illegal memory access was encountered'\n{status12}"
    ));
    assert_eq!(verdicts(&r), vec![("cuda_error", "fail", Some("b"))]);
    assert_eq!(r.verdicts[0].explains.len(), 1);
    // Without an earlier event the completion error stands.
    let r = one(&format!("{boot}{status12}"));
    assert_eq!(verdicts(&r), vec![("ib_retry_exceeded", "fail", Some("a"))]);
}

/// Topology-file errors name the file NCCL was told to load and who set it.
#[test]
fn topology_file_errors_name_the_file() {
    let r = one("h1:1:1 [0] NCCL INFO NCCL_TOPO_FILE set by environment to /opt/topo.xml\n\
        h1:1:1 [0] NCCL INFO Loading topology file /opt/topo.xml\n\
        h1:1:1 [0] graph/xml.cc:79 NCCL WARN XML Parse error : expecting '<', got 'x'\n");
    assert_eq!(verdicts(&r), vec![("topology_file_error", "fail", Some("h1"))]);
    assert!(
        r.verdicts[0].meaning.contains("NCCL_TOPO_FILE set by environment to /opt/topo.xml"),
        "{}",
        r.verdicts[0].meaning
    );
    let r = one("h1:1:1 [0] NCCL INFO Could not open XML topology file /opt/topo.xml : No such file or directory\n");
    assert_eq!(verdicts(&r), vec![("topology_file_unreadable", "warn", Some("h1"))]);
}
