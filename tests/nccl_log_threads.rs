//! Issue 32's public threads (tests/data/nccl-logs/SOURCES.md, section "Plugins, topology
//! files, virtual interfaces, async events, pre-2.4"): each file's WHOLE report against the
//! thread's diagnosis, every verdict with its host, rank, device, peer and what it explains;
//! and every `next:` step of every corpus log pastes.

use std::collections::BTreeSet;

use fabprobe::nccl_log::{Analyzer, Report, RootCause};

fn analyse(name: &str) -> Report {
    let path = format!("tests/data/nccl-logs/{name}.log");
    let mut a = Analyzer::new();
    a.read(&path, std::fs::File::open(&path).unwrap()).unwrap();
    a.finish()
}

/// What a verdict claims: cause, severity, host, rank, other ranks, device, peer host,
/// knock-ons and the failures it explains.
#[derive(Debug, PartialEq)]
struct Claim {
    cause: &'static str,
    severity: &'static str,
    host: Option<&'static str>,
    rank: Option<u32>,
    ranks: Vec<u32>,
    device: Option<&'static str>,
    peer: Option<&'static str>,
    knock_ons: u64,
    explains: Vec<&'static str>,
}

fn claim(v: &RootCause) -> Claim {
    let leak = |s: &str| -> &'static str { Box::leak(s.to_string().into_boxed_str()) };
    Claim {
        cause: leak(&v.cause),
        severity: v.severity.as_str(),
        host: v.host.as_deref().map(leak),
        rank: v.rank,
        ranks: v.ranks.clone(),
        device: v.device.as_deref().map(leak),
        peer: v.peer.as_ref().and_then(|p| p.host.as_deref()).map(leak),
        knock_ons: v.knock_ons,
        explains: v.explains.iter().map(|e| leak(e)).collect(),
    }
}

/// A claim with no rank, peer, knock-on or explained failure.
fn plain(cause: &'static str, severity: &'static str, host: Option<&'static str>, device: Option<&'static str>) -> Claim {
    Claim {
        cause,
        severity,
        host,
        rank: None,
        ranks: vec![],
        device,
        peer: None,
        knock_ons: 0,
        explains: vec![],
    }
}

fn whole(name: &str) -> Vec<Claim> {
    analyse(name).verdicts.iter().map(claim).collect()
}

/// aws-ofi-nccl's memory registration WARN, posted alone (aws/aws-ofi-nccl#584, open;
/// awslabs/awsome-distributed-ai#203: libfabric before EFA installer 1.29.1 with NCCL
/// 2.19+): the plugin's cause, no host to name.
#[test]
fn ofi_registration_failures_posted_alone() {
    for name in ["aws-ofi-nccl-584-reg-mr-einval", "awsome-distributed-ai-203-rail-mr"] {
        assert_eq!(
            whole(name),
            vec![plain("net_plugin_reg_mr_failed", "fail", None, Some("NET/OFI"))],
            "{name}"
        );
    }
}

/// NVIDIA/nccl#563 and aws/aws-ofi-nccl#70: the same WARN behind two pdsh prefixes, with
/// its error trail: the host from NCCL's header, the trail's return code.
#[test]
fn ofi_registration_failures_behind_pdsh() {
    for (name, host) in [
        ("nccl-563-ofi-reg-mr-enomem", "ip-10-0-87-143"),
        ("aws-ofi-nccl-70-reg-mr-pdsh", "ip-10-0-78-113"),
    ] {
        let r = analyse(name);
        assert_eq!(
            r.verdicts.iter().map(claim).collect::<Vec<_>>(),
            vec![plain("net_plugin_reg_mr_failed", "fail", Some(host), Some("NET/OFI"))],
            "{name}"
        );
        assert_eq!(r.verdicts[0].nccl_result.as_deref(), Some("ncclSystemError (2)"));
    }
}

/// aws/aws-ofi-nccl#889 and #715: the plugin failed to initialise and NCCL fell back to
/// sockets: a fallback warning, not a failure (and #889's host has no IB device either).
#[test]
fn a_plugin_that_failed_to_initialise_is_a_fallback() {
    let mut fallback = plain("net_plugin_fallback", "warn", Some("ip-10-36-29-253"), Some("NET/OFI"));
    fallback.rank = Some(7);
    let mut no_ib = plain("ib_no_device", "warn", Some("ip-10-36-29-253"), Some("cuda:0"));
    no_ib.rank = Some(7);
    assert_eq!(whole("aws-ofi-nccl-889-endpoint-fallback"), vec![fallback, no_ib]);
    assert_eq!(
        whole("aws-ofi-nccl-715-cq-fallback"),
        vec![plain("net_plugin_fallback", "warn", Some("algo-1"), Some("NET/OFI"))]
    );
}

/// aws/aws-ofi-nccl#927: the plugin's own completion error first; NCCL's "Attempt to use
/// communicator" and PyTorch's exception are its knock-ons.
#[test]
fn a_plugin_error_outranks_what_follows_it() {
    let r = analyse("aws-ofi-nccl-927-unexpected-status");
    let mut c = plain("net_plugin_error", "fail", None, Some("NET/OFI"));
    c.knock_ons = 1;
    assert_eq!(r.verdicts.iter().map(claim).collect::<Vec<_>>(), vec![c]);
    assert!(r.verdicts[0].line.contains("Unexpected status (0) for message 246"));
    assert_eq!(r.verdicts[0].nccl_result.as_deref(), Some("ncclInternalError (3)"));
}

/// NVIDIA/nccl#379 (NCCL bug with injected topologies, fixed in 2.8) and aws/aws-ofi-nccl#785
/// (a static p5 topology file; upgrade the plugin): `graph/xml.h` missing an attribute is
/// the topology file, not an unclassified failure.
#[test]
fn a_topology_file_missing_an_attribute() {
    assert_eq!(
        whole("nccl-379-topo-cpu-arch"),
        vec![plain("topology_file_error", "fail", None, None)]
    );
    assert_eq!(
        whole("aws-ofi-nccl-785-static-topo"),
        vec![plain("topology_file_error", "fail", Some("2a8874e7d1e6"), Some("cuda:1"))]
    );
}

/// Azure/azhpc-images#327 (maintainer in NVIDIA/nccl#1008 and #1240: NCCL_GRAPH_FILE from
/// the image's nccl.conf, for another GPU count; unset it): the graph file, named; the
/// header's host was cut away (`::16674:17023`), so no host.
#[test]
fn a_graph_file_for_other_gpus() {
    let r = analyse("azhpc-images-327-graph-file");
    let mut c = plain("graph_file_error", "fail", None, Some("cuda:0"));
    c.rank = Some(0);
    assert_eq!(r.verdicts.iter().map(claim).collect::<Vec<_>>(), vec![c]);
    assert!(r.verdicts[0].next.contains("/opt/microsoft/ncv4/graph.xml"), "{}", r.verdicts[0].next);
}

/// Lightning-AI/lit-llama#380 (maintainer in NVIDIA/nccl#905: a flapping link): eight port
/// errors on node 48, then a completion error on node 51 towards node48: the port is the
/// verdict, the completion error its knock-on.
#[test]
fn port_errors_explain_the_completion_error() {
    let mut c = plain("ib_port_error", "fail", Some("...-48"), Some("cuda:0"));
    c.knock_ons = 1;
    c.explains = vec!["ib_retry_exceeded on ...-51 cuda:4 status 12"];
    assert_eq!(whole("lit-llama-380-port-error"), vec![c]);
}

/// NVIDIA/nccl#230: a local catastrophic error on three ranks of one container (mpirun's
/// [1,N] labels give the ranks); the failed async-event reads are its knock-ons.
#[test]
fn a_catastrophic_nic_error() {
    let mut c = plain(
        "ib_device_fatal",
        "fail",
        Some("container-e275-1553839402050-12124-01-000057"),
        Some("cuda:0"),
    );
    c.rank = Some(12);
    c.ranks = vec![13, 14];
    c.knock_ons = 3;
    assert_eq!(whole("nccl-230-catastrophic"), vec![c]);
}

/// NVIDIA/nccl#1905 and #1919: async fatal events on a QP name the HCA; #1905's status 4
/// completion and the communicator's fatal-error notice on the same process are knock-ons.
#[test]
fn async_fatal_events_on_a_qp() {
    let mut c = plain("ib_async_error", "fail", Some("h100-28"), Some("mlx5_ib0"));
    c.knock_ons = 2;
    assert_eq!(whole("nccl-1905-async-fatal-qp"), vec![c]);
    assert_eq!(
        whole("nccl-1919-async-fatal-invalid-request"),
        vec![plain("ib_async_error", "fail", Some("node-0"), Some("mlx5_1"))]
    );
}

/// horovod/horovod#584 (NCCL 2.3's `NET : Using interface lo`, two hosts): loopback among
/// the socket interfaces of a two-host job is the cause; the refused connects are its
/// knock-ons, listed under it.
#[test]
fn loopback_across_hosts_explains_refused_connects() {
    let mut c = plain("socket_iface_loopback", "fail", Some("paigcr-b-gpu-1012"), Some("lo"));
    c.knock_ons = 2;
    c.explains = vec![
        "socket_connect_failed on paigcr-b-gpu-1012 cuda:1",
        "socket_connect_failed on paigcr-b-gpu-1012 rank 2 cuda:0",
    ];
    assert_eq!(whole("horovod-584-v23-lo-refused"), vec![c]);
}

/// Oneflow-Inc/oneflow#3586: sockets over eno1 and a Docker veth (moby's `veth` + 7 hex);
/// the log shows one host, so a warning; no IB device.
#[test]
fn a_docker_veth_among_the_socket_interfaces() {
    assert_eq!(
        whole("oneflow-3586-veth-bootstrap"),
        vec![
            plain("socket_iface_virtual", "warn", Some("worker"), Some("veth25f2e72")),
            plain("ib_no_device", "warn", Some("worker"), Some("cuda:0")),
        ]
    );
}

/// NVIDIA/nccl#529 (maintainer: the connect to fe80::...%ip6tnl0 timed out): the kernel's
/// fallback IPv6 tunnel is a virtual interface, and the timed-out connect whose address
/// names it is its knock-on, which makes it a fail; the veth stays a warning.
#[test]
fn the_kernel_fallback_tunnel_explains_the_timeout() {
    let host = Some("NvYt-dcf441d17e21-1bdf2bc9-79ce82ee-3fe03e8-c2959af0");
    let mut tunnel = plain("socket_iface_virtual", "fail", host, Some("ip6tnl0"));
    tunnel.knock_ons = 1;
    tunnel.explains = vec!["socket_connect_failed"];
    assert_eq!(
        whole("nccl-529-ip6tnl-bootstrap"),
        vec![tunnel, plain("socket_iface_virtual", "warn", host, Some("veth0"))]
    );
}

/// Every corpus log.
fn corpus() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("tests/data/nccl-logs")
        .unwrap()
        .filter_map(|e| {
            let n = e.ok()?.file_name().into_string().ok()?;
            n.strip_suffix(".log").map(str::to_string)
        })
        .collect();
    v.sort();
    v
}

/// The backticked spans of `s`.
fn backticked(s: &str) -> Vec<&str> {
    s.split('`').skip(1).step_by(2).collect()
}

/// Words that stand for something the reader must fill in.
const PLACEHOLDERS: &[&str] = &["HOST", "PEER", "FILE", "DEVICE", "HCA", "IFACE", "PID", "RANK"];

/// Why a next step would not paste, or `None`.
fn unpastable(v: &RootCause) -> Option<String> {
    let next = &v.next;
    if next.contains(['{', '}']) {
        return Some("an unfilled {placeholder}".into());
    }
    if let Some(w) = next
        .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
        .find(|w| PLACEHOLDERS.contains(w))
    {
        return Some(format!("placeholder {w}"));
    }
    // Every `fabprobe <sub>` is a backticked command that clap parses as written.
    let commands = backticked(next);
    let inside: usize = commands.iter().map(|c| c.matches("fabprobe ").count()).sum();
    if next.matches("fabprobe ").count() != inside {
        return Some("a fabprobe command outside backticks".into());
    }
    for c in commands.iter().filter(|c| c.starts_with("fabprobe ")) {
        if let Err(e) = fabprobe::cli::command().try_get_matches_from(c.split_whitespace()) {
            return Some(format!("`{c}` does not parse: {:?}", e.kind()));
        }
    }
    // What the log names is named.
    let host = v.host.as_deref().is_some_and(|h| !h.is_empty());
    let peer = v.peer.as_ref().is_some_and(|p| p.host.is_some());
    for (known, phrase) in [
        (host, "that host"),
        (host && peer, "both hosts"),
        (peer, "the peer's host"),
    ] {
        if known && next.contains(phrase) {
            return Some(format!("says '{phrase}' where the log names it"));
        }
    }
    None
}

#[test]
fn every_next_step_of_the_corpus_pastes() {
    let mut bad = Vec::new();
    let mut seen = BTreeSet::new();
    for name in corpus() {
        for v in analyse(&name).verdicts {
            seen.insert(v.cause.clone());
            if let Some(why) = unpastable(&v) {
                bad.push(format!("{name}: {}: {why}: {}", v.cause, v.next));
            }
        }
    }
    assert!(seen.len() >= 25, "only {} causes seen: is the corpus read?", seen.len());
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The paste check can fail: a placeholder, a bare command, a flag clap refuses, a host
/// the log names said as "that host".
#[test]
fn the_paste_check_rejects_what_does_not_paste() {
    let mut v = analyse("lit-llama-380-port-error").verdicts.remove(0);
    assert_eq!(unpastable(&v), None, "{}", v.next);
    for bad in [
        "on HOST: `fabprobe links`",
        "fabprobe links on both hosts",
        "on ...-48: `fabprobe links --no-such-flag`",
        "on that host: `fabprobe links`",
        "on {host}: `fabprobe links`",
    ] {
        v.next = bad.into();
        assert!(unpastable(&v).is_some(), "{bad}");
    }
}
