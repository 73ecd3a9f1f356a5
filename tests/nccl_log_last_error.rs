//! Issue 44's public threads (tests/data/nccl-logs/SOURCES.md, section "Last error:, version
//! requirements, issue 44"): PyTorch's, vLLM's, DeepSpeed's and Megatron's exceptions with
//! NCCL's `Last error:` text behind them, and NCCL's WARNs of a driver older than the
//! runtime. Each file's WHOLE report against the thread's diagnosis: every verdict with its
//! cause, severity, host, rank, other ranks, device, knock-ons and NCCL return code.

use fabprobe::nccl_log::{Analyzer, Report, RootCause};

fn analyse(name: &str) -> Report {
    let path = format!("tests/data/nccl-logs/{name}.log");
    let mut a = Analyzer::new();
    a.read(&path, std::fs::File::open(&path).unwrap()).unwrap();
    a.finish()
}

/// What a verdict claims: cause, severity, host, rank, other ranks, device, knock-ons,
/// NCCL's return code.
type Claim = (
    String,
    &'static str,
    Option<String>,
    Option<u32>,
    Vec<u32>,
    Option<String>,
    u64,
    Option<String>,
);

fn claim(v: &RootCause) -> Claim {
    (
        v.cause.clone(),
        v.severity.as_str(),
        v.host.clone(),
        v.rank,
        v.ranks.clone(),
        v.device.clone(),
        v.knock_ons,
        v.nccl_result.clone(),
    )
}

fn whole(name: &str) -> Vec<Claim> {
    analyse(name).verdicts.iter().map(claim).collect()
}

/// One fail verdict with no host, device or other ranks.
fn fail(cause: &str, rank: Option<u32>, knock_ons: u64, result: Option<&str>) -> Claim {
    (
        cause.into(),
        "fail",
        None,
        rank,
        vec![],
        None,
        knock_ons,
        result.map(str::to_string),
    )
}

/// PyTorch's exception says `ncclSystemError`; its `Last error:` says NCCL could not create
/// its shared-memory segment: the segment is the verdict, the return code a knock-on (before:
/// `system_error`). vllm-project/vllm#14537 (markdown links in the line), hiyouga/LlamaFactory#7233
/// and NVIDIA/DeepLearningExamples#1386 (`[rankN]:` prefixes).
#[test]
fn a_shared_memory_last_error_outranks_the_system_error_code() {
    assert_eq!(
        whole("vllm-14537-last-error-shm"),
        vec![fail("shm_alloc_failed", None, 1, Some("ncclSystemError (2)"))]
    );
    assert_eq!(
        whole("llamafactory-7233-last-error-shm"),
        vec![fail("shm_alloc_failed", Some(1), 1, Some("ncclSystemError (2)"))]
    );
    assert_eq!(
        whole("deeplearningexamples-1386-last-error-shm"),
        vec![fail("shm_alloc_failed", Some(2), 1, Some("ncclSystemError (2)"))]
    );
    // foundation-model-stack/fms-fsdp#94: the text alone, behind `[rank3]:`.
    assert_eq!(
        whole("fms-fsdp-94-rank-prefixed-shm"),
        vec![fail("shm_alloc_failed", Some(3), 0, None)]
    );
}

/// NVIDIA/nccl#1231: `ncclUnhandledCudaError` with `Last error: Cuda failure 802 'system not
/// yet initialized'` (the maintainer: the plugin line is harmless; 802 is the Fabric
/// Manager): cuda_system_not_ready, not the generic cuda_error (before); the absent plugin
/// is nothing.
#[test]
fn a_cuda_802_last_error_outranks_the_cuda_error_code() {
    let r = analyse("nccl-1231-last-error-802");
    assert_eq!(
        r.verdicts.iter().map(claim).collect::<Vec<_>>(),
        vec![fail(
            "cuda_system_not_ready",
            None,
            1,
            Some("ncclUnhandledCudaError (1)")
        )]
    );
    assert_eq!(r.summary.plugins, vec!["none (internal)".to_string()]);
}

/// NVIDIA/nccl#1928: `ncclRemoteError` whose `Last error:` is aws-ofi-nccl's own completion
/// error (UNDELIVERABLE): the plugin's error on rank 3 (before: remote_process_exited).
#[test]
fn a_plugin_last_error_outranks_the_remote_error_code() {
    let mut c = fail("net_plugin_error", Some(3), 1, Some("ncclRemoteError (6)"));
    c.5 = Some("NET/OFI".into());
    assert_eq!(whole("nccl-1928-last-error-ofi"), vec![c]);
}

/// NVIDIA/nccl#2076: `ncclRemoteError`, `Last error: socketProgressOpt: Call to recv from
/// ... failed : Connection reset by peer`; the thread: IB faults on some nodes. The return
/// code and the text it quotes are one verdict.
#[test]
fn a_reset_connection_and_its_return_code_are_one_verdict() {
    assert_eq!(
        whole("nccl-2076-last-error-reset"),
        vec![fail(
            "remote_process_exited",
            None,
            0,
            Some("ncclRemoteError (6)")
        )]
    );
}

/// `ncclInvalidUsage` with `Last error: Duplicate GPU detected : rank R and rank S ...`:
/// volcengine/verl#161 (Ray's device assignment), Peterande/D-FINE#289 (a default device set
/// in train.py), facebookresearch/ViewDiff#24 (4 processes, 1 GPU), csguoh/MambaIR#39, and
/// volcengine/verl#1096 where the lines come in reverse order: duplicate_gpu on the rank that
/// found it, the return code a knock-on.
#[test]
fn duplicate_gpu_last_errors_in_either_order() {
    for (name, rank) in [
        ("verl-161-last-error-duplicate-gpu", 1),
        ("d-fine-289-last-error-duplicate-gpu", 0),
        ("viewdiff-24-last-error-duplicate-gpu", 0),
        ("mambair-39-last-error-duplicate-gpu", 2),
        ("verl-1096-last-error-reversed", 9),
    ] {
        assert_eq!(
            whole(name),
            vec![fail("duplicate_gpu", Some(rank), 1, Some("ncclInvalidUsage (5)"))],
            "{name}"
        );
    }
}

/// A CUDA driver older than the runtime, in NCCL's WARN (rapidsai/cuml#5961: driver 470 with
/// CUDA 11.8) and in nccl-tests' own line after a pre-2.4 WARN (NVIDIA/nccl-tests#12: driver
/// 384.81): version_requirement (before: cuda_error, and nothing for nccl-tests).
#[test]
fn a_driver_older_than_the_runtime_is_a_version_requirement() {
    let mut c = fail("version_requirement", None, 0, None);
    c.2 = Some("VM-192-150-centos".into());
    c.5 = Some("cuda:32523".into());
    assert_eq!(whole("cuml-5961-driver-insufficient"), vec![c]);
    assert_eq!(
        whole("nccl-tests-12-driver-insufficient"),
        vec![
            fail("version_requirement", None, 0, None),
            (
                "ib_verbs_unavailable".into(),
                "warn",
                None,
                None,
                vec![],
                None,
                0,
                None
            ),
        ]
    );
}

/// vllm-project/vllm#4062: `Last error: Failed to find reverse path ...` (graph/paths.cc),
/// which no rule knows: the internal error stays unclassified, with its return code.
#[test]
fn a_last_error_no_rule_knows_stays_unclassified() {
    assert_eq!(
        whole("vllm-4062-last-error-reverse-path"),
        vec![fail(
            "unclassified_failure",
            None,
            0,
            Some("ncclInternalError (3)")
        )]
    );
}

fn read_lines(lines: &[&str]) -> Report {
    let mut a = Analyzer::new();
    for (i, l) in lines.iter().enumerate() {
        a.feed("t.log", i as u64 + 1, l);
    }
    a.finish()
}

/// The sender's and the receiver's line of one connection (src/transport/net.cc:324
/// `Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s%s`, :377 the same
/// `[receive]`, `/GDRDMA` when that side uses GPUDirect RDMA), with NCCL's header or pasted
/// without it: GDR on one side only is a warning naming the pair; on both sides, nothing.
#[test]
fn gdr_on_one_side_of_a_connection_is_seen_with_or_without_headers() {
    let r = read_lines(&[
        "node1:11:12 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA",
        "node2:21:22 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [receive] via NET/IB/0",
        "Channel 01/0 : 2[0] -> 3[0] [send] via NET/IB/1/GDRDMA",
        "[rank3]: Channel 01/0 : 2[0] -> 3[0] [receive] via NET/IB/1",
    ]);
    let v: Vec<&RootCause> = r
        .verdicts
        .iter()
        .filter(|v| v.cause == "gdr_one_direction")
        .collect();
    assert_eq!(v.len(), 1, "{:#?}", r.verdicts);
    assert_eq!(v[0].severity.as_str(), "warn");
    assert_eq!(
        v[0].line,
        "rank 0 -> rank 1: via NET/IB/0/GDRDMA on one side, via NET/IB/0 on the other (and 1 more rank pair(s))"
    );
    assert_eq!(r.summary.transports.get("NET/IB/GDRDMA"), Some(&2));
    let both = read_lines(&[
        "node1:11:12 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA",
        "node2:21:22 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [receive] via NET/IB/0/GDRDMA",
    ]);
    assert!(
        both.verdicts.iter().all(|v| v.cause != "gdr_one_direction"),
        "{:#?}",
        both.verdicts
    );
}
