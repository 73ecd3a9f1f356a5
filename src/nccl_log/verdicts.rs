//! From sightings to root-cause verdicts.
//!
//! Collapsing rules (the maintainers' diagnoses in the threads tests/data/nccl-logs/SOURCES.md names):
//! * per process only the first failure counts; later ones are its knock-ons;
//! * a `status=5` flush (IBV_WC_WR_FLUSH_ERR) is what a QP in error reports for the work
//!   still queued: never a cause while any other completion or verbs error is in the log;
//! * a closed or reset connection (`remote_process_exited`) is a knock-on of any hard
//!   failure elsewhere (a rank that died closes its sockets), and a collective timeout is a
//!   knock-on of either;
//! * the ranks that time out on the same PyTorch sequence number are one event; the ranks of
//!   the communicator missing from that list are the suspects (they never reached it);
//! * the same cause on the same host, device and peer is one verdict listing its ranks.

use std::collections::{BTreeMap, BTreeSet};

use super::{Analyzer, HostSummary, Peer, Report, Sighting, Summary, Verdict};
use super::VerdictSeverity as Severity;

/// Root causes: a rank failed here first, for a reason of its own.
const HARD: &[&str] = &[
    "ib_retry_exceeded",
    "ib_rnr_retry_exceeded",
    "ib_local_protection",
    "ib_remote_access",
    "ib_remote_op",
    "ib_completion_error",
    "ib_modify_qp_failed",
    "gid_index_unusable",
    "ib_reg_mr_failed",
    "ib_device_open_failed",
    "cuda_error",
    "cuda_system_not_ready",
    "version_mismatch",
    "collective_mismatch",
    "system_error",
    "socket_no_interface",
    "socket_connect_failed",
    "cuda_oom",
    "shm_alloc_failed",
    "duplicate_gpu",
    "bootstrap_rank_mismatch",
    "ib_port_error",
    "ib_device_fatal",
    "ib_async_error",
    "net_plugin_reg_mr_failed",
    "net_plugin_provider_error",
    "net_plugin_error",
    "topology_file_error",
    "graph_file_error",
];

/// Warnings: the job can run, slower or at risk.
const WARNS: &[&str] = &[
    "gdr_disabled",
    "ib_no_device",
    "ib_verbs_unavailable",
    "ib_gid_change",
    "topology_file_unreadable",
];

/// What a cause means and what to run next, for a person.
pub fn explain(cause: &str) -> (&'static str, &'static str) {
    match cause {
        "ib_retry_exceeded" => (
            "status 12 (IBV_WC_RETRY_EXC_ERR): the remote NIC never acknowledged within timeout x retries. At start: the two NICs cannot reach each other (GID index, RoCE v1/v2, routing, cross-rail pair); later in a run: a lossy path (PFC/ECN, cable) or a dead peer",
            "on {hosts}: `fabprobe links` (port state, symbol and link-down counters) and `fabprobe gids` (the same GID index and RoCE version on both); then `fabprobe ring` across {hosts}",
        ),
        "ib_rnr_retry_exceeded" => (
            "status 13 (IBV_WC_RNR_RETRY_EXC_ERR): the receiver had no receive posted for the retries; the peer process stalled or died",
            "the log of the rank on {peer} for its first error; on {peer}: `fabprobe links`",
        ),
        "ib_local_protection" => (
            "status 4 (IBV_WC_LOC_PROT_ERR): the NIC could not access the local buffer; with GPU buffers this is GPUDirect RDMA broken by PCIe ACS or IOMMU redirection (confirmed when NCCL_NET_GDR_LEVEL=LOC makes it work, slowly)",
            "on {host}: `fabprobe gdr` (ACS, IOMMU, peermem/DMA-BUF per GPU-NIC pair) and `fabprobe topo`",
        ),
        "ib_remote_access" => (
            "status 10 (IBV_WC_REM_ACCESS_ERR): the peer rejected the RDMA access (key or registration on the peer); often the peer's GDR or memory registration failed",
            "the log of the rank on {peer}; on {peer}: `fabprobe gdr`",
        ),
        "ib_remote_op" => (
            "status 11 (IBV_WC_REM_OP_ERR): the peer could not complete the operation (its QP or memory in error)",
            "the log of the rank on {peer}; on {peer}: `fabprobe links`",
        ),
        "ib_completion_error" => (
            "a work completion with an error status other than the usual ones; the vendor syndrome narrows it down",
            "on {hosts}: `fabprobe links`; look the vendor syndrome up in the NIC vendor's documentation",
        ),
        "ib_wr_flush" => (
            "status 5 (IBV_WC_WR_FLUSH_ERR): flushed work on a QP already in error; the first error is elsewhere (earlier, on the peer, or cut from this log)",
            "collect the logs of every rank (the peer's first error is the cause)",
        ),
        "ib_modify_qp_failed" => (
            "ibv_modify_qp failed while connecting (INIT->RTR/RTS): the address vector is unusable (wrong or link-local GID index, cross-rail pair on a rail-only fabric, no route)",
            "on {hosts}: `fabprobe gids` and `fabprobe nccl-env` (GID index, NCCL_IB_HCA); on a rail-optimised fabric try NCCL_CROSS_NIC=0",
        ),
        "gid_index_unusable" => (
            "the GID index in use cannot address the peer (EINVAL from ibv_modify_qp, or a link-local local GID): NCCL_IB_GID_INDEX forced to a wrong entry, or the automatic choice found no routable GID",
            "on {host}: `fabprobe gids` (which index NCCL picks); unset NCCL_IB_GID_INDEX or set it to the RoCE v2 IPv4 entry",
        ),
        "ib_reg_mr_failed" => (
            "memory registration failed: usually the locked-memory limit (ulimit -l) is too small in the container or service, or GPU memory registration (peermem/DMA-BUF) is unavailable",
            "on {host}: `ulimit -l` in the job (should be unlimited) and `fabprobe gdr`",
        ),
        "ib_device_open_failed" => (
            "the RDMA device could not be opened: the container lacks /dev/infiniband, or the device is gone",
            "on {host}: `fabprobe links`; check the container's device mounts (/dev/infiniband)",
        ),
        "ib_no_device" => (
            "NCCL found no RDMA device (or no libibverbs): inter-node traffic goes over TCP sockets",
            "on {host}: `fabprobe links` (are RDMA devices visible here?) and `fabprobe nccl-env`",
        ),
        "net_socket_fallback" => (
            "ranks on different hosts connect over NET/Socket: TCP instead of RDMA, typically several times slower",
            "on {all}: `fabprobe nccl-env` (NCCL_IB_DISABLE, NCCL_IB_HCA, devices visible)",
        ),
        "net_plugin_reg_mr_failed" => (
            "the network plugin could not register memory with its device: with GPU buffers, GPUDirect (peermem/DMA-BUF) or the provider's CUDA support is missing or mismatched; with host buffers, the locked-memory limit",
            "on {host}: `fabprobe gdr` and `ulimit -l` in the job (unlimited); compare the plugin's and the provider's versions with NCCL's (the plugin line above)",
        ),
        "net_plugin_provider_error" => (
            "the network plugin found no usable provider or protocol for its devices (libfabric provider missing, wrong FI_PROVIDER, or a device the provider does not support)",
            "on {host}: `fabprobe links` (are the devices there?) and `fi_info -p efa` (or the provider named); check FI_PROVIDER and the plugin's version",
        ),
        "net_plugin_error" => (
            "the network plugin reported an error of its own (device, endpoint, address vector or a failed request): the line names the call",
            "on {host}: `fabprobe links`; search the plugin's issue tracker for the line's text, with the plugin version above",
        ),
        "topology_file_error" => (
            "NCCL could not parse the topology XML it was told to load (NCCL_TOPO_FILE, or a file set in /etc/nccl.conf): a syntax error, a wrong version or a truncated file; NCCL init fails",
            "{xmllint}; regenerate it for this NCCL version (NCCL_TOPO_DUMP_FILE) or unset NCCL_TOPO_FILE",
        ),
        "graph_file_error" => (
            "NCCL could not import the graph XML it was told to load (NCCL_GRAPH_FILE, often set by a VM image's /etc/nccl.conf): the graph names GPUs or NICs this job does not have (written for another GPU count or machine); NCCL init fails. A graph file is for experiments, not production",
            "unset NCCL_GRAPH_FILE where it was set ({origin})",
        ),
        "topology_file_unreadable" => (
            "NCCL was told to load a topology XML (NCCL_TOPO_FILE) it could not open: it detects the topology itself instead, which on a VM can miss the real PCIe layout",
            "on {host}: {ls} inside the container; fix or unset NCCL_TOPO_FILE",
        ),
        "net_plugin_fallback" => (
            "a network plugin or transport failed while NCCL set up its networks, and NCCL recovered by moving on to the next one (src/plugin/net.cc): not a failure, but the network it then chose may not be the one intended",
            "check that the network NCCL chose ('Using network' in the log) is the intended one; on {host}: `fabprobe nccl-env`",
        ),
        "socket_iface_loopback" => (
            "NCCL bootstrapped or connected over the loopback interface; other hosts cannot reach that address",
            "on {host}: `fabprobe nccl-env` (the interface NCCL picks); set NCCL_SOCKET_IFNAME to the interface the hosts share (`ip -br addr`)",
        ),
        "socket_iface_virtual" => (
            "NCCL bootstrapped or connected over a container, VM or CNI interface (a bridge, veth or tap end): its address is reachable from this host and its containers only",
            "on {host}: `fabprobe nccl-env` (the interface NCCL picks); set NCCL_SOCKET_IFNAME to the interface the hosts share, or exclude the virtual ones (NCCL_SOCKET_IFNAME=^docker,veth,virbr,cali,lxc,vnet)",
        ),
        "socket_iface_overlay" => (
            "NCCL bootstrapped or connected over a Kubernetes overlay or pod gateway interface: other nodes reach it through encapsulation, slower than the host's own network",
            "",
        ),
        "socket_no_interface" => (
            "no interface matched NCCL_SOCKET_IFNAME (or none was usable): NCCL cannot bootstrap",
            "on {host}: `fabprobe nccl-env` and `ip -br addr`",
        ),
        "socket_connect_failed" => (
            "a TCP connection to a peer failed (refused, unreachable, timed out): firewall, wrong interface or address, or the peer not listening",
            "on {hosts}: `fabprobe nccl-env` (the socket interface); check the route and firewall between them",
        ),
        "remote_process_exited" => (
            "a peer closed or reset the connection: the remote process exited (crashed, was killed, or failed first); its own log holds the cause",
            "the log of the process on {peer} for its first error; on {peer}: `dmesg` (OOM killer, Xid)",
        ),
        "collective_timeout" => (
            "PyTorch's watchdog timed out on this collective: the ranks listed waited; the suspects (ranks of the communicator not timing out on it) never reached it or are stuck before it",
            "the suspects' logs and stacks (py-spy dump); `fabprobe ring` across {suspects}",
        ),
        "gdr_disabled" => (
            "GPUDirect RDMA is off for this HCA: traffic bounces through host memory, often about 10x lower bandwidth",
            "on {host}: `fabprobe gdr` (peermem/DMA-BUF, ACS) and `fabprobe nccl-env` (NCCL_NET_GDR_LEVEL against the path type)",
        ),
        "version_mismatch" => (
            "ranks run different NCCL versions or configurations (messages of the wrong size between them)",
            "check the NCCL library each rank loads (the NCCL version lines per host); align the containers",
        ),
        "collective_mismatch" => (
            "ranks called different collectives or sizes at the same point: an application bug or a configuration difference",
            "compare the ranks' NCCL_* environment and the code path; NCCL_DEBUG_SUBSYS=COLL",
        ),
        "cuda_system_not_ready" => (
            "CUDA error 802 (cudaErrorSystemNotReady, 'system not yet initialized'): CUDA would not start on this host. On an NVSwitch system (HGX/DGX) the Fabric Manager has not set up the NVLink fabric: it is stopped, failed, or not the driver's version",
            "on {host}: `systemctl status nvidia-fabricmanager` (start it; its version must equal the driver's, /var/log/fabricmanager.log says why it stopped); `fabprobe topo` shows the NVSwitches, the Fabric Manager and each GPU's fabric state",
        ),
        "cuda_error" => (
            "a CUDA call failed inside NCCL (out of memory, initialization error, a lost GPU)",
            "on {host}: `nvidia-smi`, and `dmesg` for Xid errors",
        ),
        "system_error" => (
            "a system or library call failed (socket, memory, verbs): the line says which",
            "the line's call and errno; on {host}: `fabprobe links` and `fabprobe nccl-env`",
        ),
        "no_nccl_output" => (
            "the input has no NCCL line, so nothing can be judged (unknown, not a pass): NCCL_DEBUG was unset, or this is not the job's output",
            "rerun the job with NCCL_DEBUG=INFO (NCCL_DEBUG=WARN prints failures only) and pass its stdout and stderr (2>&1)",
        ),
        "socket_connect_failed_refused" => (
            "a TCP connection to a peer was refused (errno 111): nothing listened on that address and port; the peer process had exited or not started, or the address is wrong (another interface, a stale MASTER_ADDR)",
            "the log of the process on {peer} for its first error; on {hosts}: `fabprobe nccl-env` (the socket interface and its address)",
        ),
        "socket_connect_failed_timeout" => (
            "a TCP connection to a peer timed out (errno 110): packets to that address are dropped (firewall, security group, or an interface that only one host can reach)",
            "on {hosts}: `fabprobe nccl-env` (NCCL_SOCKET_IFNAME); check the firewall between them for the address printed",
        ),
        "socket_connect_failed_noroute" => (
            "no route to the peer's address (errno 113/101): NCCL picked an interface or address the other host cannot reach",
            "on {hosts}: `fabprobe nccl-env`; set NCCL_SOCKET_IFNAME to the interface both hosts share",
        ),
        "unclassified_failure" => (
            "NCCL warned or returned an error that no rule here explains: the line is NCCL's own words, and the return code says the class (system error: a call into the OS or a library failed; internal error: NCCL's own check; invalid usage: the application or launcher; remote error: a peer)",
            "read the line and the WARN lines before it; search NCCL's issues for its text; rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET for the context",
        ),
        "cuda_oom" => (
            "CUDA ran out of GPU memory inside NCCL (its buffers, channels or proxy): the application holds nearly all of the GPU, or another process shares it",
            "on {host}: `nvidia-smi` (memory per process); lower the batch or leave headroom; NCCL_BUFFSIZE or fewer channels (NCCL_MAX_NCHANNELS) shrink NCCL's share",
        ),
        "shm_alloc_failed" => (
            "NCCL could not create or extend its shared-memory segment in /dev/shm: in containers /dev/shm is often 64 MB, too small for NCCL's SHM transport",
            "on {host}: `df -h /dev/shm` inside the container; docker run --shm-size=16g (or --ipc=host); Kubernetes: an emptyDir with medium Memory on /dev/shm",
        ),
        "duplicate_gpu" => (
            "two ranks of one communicator use the same GPU (same host and bus id): the launcher started more ranks than GPUs, or every rank selects device 0",
            "set the device per local rank (torch.cuda.set_device(local_rank)); check CUDA_VISIBLE_DEVICES and the ranks per node",
        ),
        "bootstrap_rank_mismatch" => (
            "the bootstrap root got ranks that disagree on the communicator's size (or two processes claimed one rank): processes of two jobs or two launches share one NCCL unique id or MASTER_PORT",
            "check the world size every launcher passes (--nnodes, --nproc_per_node, WORLD_SIZE) and that no stale process of an earlier run is still alive on any node",
        ),
        "ib_port_error" => (
            "the IB/RoCE port reported an asynchronous port error: the link went down under the job",
            "on {host}: `fabprobe links` (port state, link-down counters); then the switch port and the cable",
        ),
        "ib_device_fatal" => (
            "the RDMA device reported a local catastrophic error: the NIC firmware or hardware failed and every QP on it is dead",
            "on {host}: `dmesg` (mlx5 health, firmware syndrome) and `fabprobe links`; reset or replace the NIC before the node rejoins",
        ),
        "ib_async_error" => (
            "the RDMA device reported an asynchronous error event (a QP, CQ or SRQ went into error)",
            "on {host}: `dmesg` and `fabprobe links`",
        ),
        "ib_gid_change" => (
            "the port's GID table changed while the job ran (an address added or removed on the netdev, often by a container runtime): a GID index chosen at start may now point elsewhere",
            "on {host}: `fabprobe gids`; keep addresses on RDMA netdevs stable during jobs",
        ),
        "ib_verbs_unavailable" => (
            "libibverbs could not be loaded, so NCCL has no IB/RoCE transport and falls back to TCP sockets",
            "install rdma-core/libibverbs in the container (`ldconfig -p | grep libibverbs`); on {host}: `fabprobe nccl-env`",
        ),
        "proxy_connection_failed" => (
            "NCCL's proxy thread failed an operation for a peer (connect or setup); usually the consequence of a socket or transport failure the lines before it name",
            "the WARN lines just before it on the same rank; on {hosts}: `fabprobe nccl-env`",
        ),
        _ => ("", ""),
    }
}

fn peer_ip(addr: &str) -> &str {
    let a = addr.split('<').next().unwrap_or(addr);
    a.split('%').next().unwrap_or(a)
}

struct Ctx<'a> {
    a: &'a Analyzer,
    host_ranks: BTreeMap<String, BTreeSet<u32>>,
    rank_host: BTreeMap<u32, String>,
}

impl Ctx<'_> {
    fn rank_of(&self, s: &Sighting) -> Option<u32> {
        self.a.procs.get(&s.proc_).and_then(|p| p.rank).or(s.rank_hint)
    }
    fn host_of(&self, s: &Sighting) -> Option<String> {
        if s.proc_.host != 0 {
            let h = self.a.host_name(s.proc_.host);
            return (!h.is_empty()).then(|| h.to_string());
        }
        self.rank_of(s).and_then(|r| self.rank_host.get(&r).cloned())
    }
    fn peer_of(&self, s: &Sighting) -> Option<Peer> {
        let addr = s.peer_addr.clone()?;
        let host = self.a.host_ips.get(peer_ip(&addr)).cloned().or_else(|| {
            // "Connection closed by remote peer node2<42830>": a host name.
            let h = peer_ip(&addr);
            self.host_ranks.contains_key(h).then(|| h.to_string())
        });
        let rank = host
            .as_ref()
            .and_then(|h| self.host_ranks.get(h))
            .filter(|r| r.len() == 1)
            .and_then(|r| r.iter().next().copied());
        Some(Peer {
            addr: Some(addr),
            host,
            rank,
        })
    }
    fn device_of(&self, s: &Sighting) -> Option<String> {
        s.hca.clone().or_else(|| s.dev.map(|d| format!("cuda:{d}")))
    }
}

/// A verdict derived from the whole log rather than from one line: no file, line, rank or
/// GID of its own; `explain(cause)` gives its meaning and next step.
fn derived(cause: &str, severity: Severity, line: String) -> Verdict {
    let (meaning, next) = explain(cause);
    Verdict {
        cause: cause.into(),
        severity,
        host: None,
        rank: None,
        ranks: Vec::new(),
        device: None,
        peer: None,
        local_gid: None,
        remote_gid: None,
        status: None,
        vendor_err: None,
        file: String::new(),
        line_no: 0,
        line,
        meaning: meaning.into(),
        next: next.into(),
        seq: None,
        op: None,
        suspects: Vec::new(),
        knock_ons: 0,
        explains: Vec::new(),
        nccl_result: None,
        errno: None,
    }
}

fn verdict(ctx: &Ctx, s: &Sighting, severity: Severity) -> Verdict {
    // The socket family's meaning depends on the errno it printed.
    let (meaning, next) = match (s.cause, s.errno) {
        ("socket_connect_failed", Some(111)) => explain("socket_connect_failed_refused"),
        ("socket_connect_failed", Some(110)) => explain("socket_connect_failed_timeout"),
        ("socket_connect_failed", Some(101 | 113)) => explain("socket_connect_failed_noroute"),
        _ => explain(s.cause),
    };
    Verdict {
        cause: s.cause.to_string(),
        severity,
        host: ctx.host_of(s),
        rank: ctx.rank_of(s),
        ranks: Vec::new(),
        device: ctx.device_of(s),
        peer: ctx.peer_of(s),
        local_gid: s.local_gid.clone(),
        remote_gid: s.remote_gid.clone(),
        status: s.status,
        vendor_err: s.vendor_err,
        file: s.file.clone(),
        line_no: s.line_no,
        line: s.line.clone(),
        meaning: meaning.to_string(),
        next: next.to_string(),
        seq: s.seq,
        op: s.op.clone(),
        suspects: Vec::new(),
        knock_ons: 0,
        explains: Vec::new(),
        nccl_result: s
            .result
            .or_else(|| {
                // A warning's process may have failed later for another reason.
                (severity == Severity::Fail)
                    .then(|| ctx.a.procs.get(&s.proc_).and_then(|p| p.trail))
                    .flatten()
            })
            .map(|c| match super::events::result_name(c) {
                Some(n) => format!("{n} ({c})"),
                None => format!("code {c}"),
            }),
        errno: s.errno,
    }
}

/// Group sightings into verdicts keyed by cause, host, device and peer host.
fn grouped(ctx: &Ctx, list: &[&Sighting], severity: Severity) -> Vec<Verdict> {
    let mut out: Vec<Verdict> = Vec::new();
    // (cause, host, device, peer host) -> index in `out`: thousands of processes can fail.
    type Group = (String, Option<String>, Option<String>, Option<String>);
    let mut index: std::collections::HashMap<Group, usize> = std::collections::HashMap::new();
    for s in list {
        let v = verdict(ctx, s, severity);
        let peer_host = v.peer.as_ref().and_then(|p| p.host.clone());
        let key = (v.cause.clone(), v.host.clone(), v.device.clone(), peer_host);
        if let Some(&i) = index.get(&key) {
            let o = &mut out[i];
            // Repeats go at the sort below (a linear check per rank is quadratic).
            if let Some(r) = v.rank.filter(|r| o.rank != Some(*r)) {
                o.ranks.push(r);
            }
            continue;
        }
        index.insert(key, out.len());
        out.push(v);
    }
    for v in &mut out {
        v.ranks.sort_unstable();
        v.ranks.dedup();
    }
    out
}

pub(super) fn build(a: Analyzer) -> Report {
    let mut host_ranks: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    let mut rank_host = BTreeMap::new();
    // In key order (hosts by first appearance): a rank that several jobs' hosts claim maps
    // to the first one, the same on every run.
    let mut procs: Vec<_> = a.procs.iter().collect();
    procs.sort_unstable_by(|x, y| x.0.cmp(y.0));
    for (k, p) in procs {
        let name = a.host_name(k.host).to_string();
        let set = host_ranks.entry(name.clone()).or_default();
        if let Some(r) = p.rank {
            set.insert(r);
            // A process with no host name (a header cut away) names no rank's host.
            if !name.is_empty() {
                rank_host.entry(r).or_insert(name);
            }
        }
    }
    let ctx = Ctx {
        a: &a,
        host_ranks,
        rank_host,
    };
    let hosts: Vec<&String> = ctx.host_ranks.keys().filter(|h| !h.is_empty()).collect();
    let multi_host = hosts.len() > 1;

    // What NCCL recovered from (plugin and transport init before it chose a network) is
    // set apart: its trails are no failure, a plugin's own WARN a fallback warning.
    let (fallbacks, trails) = recovered(&a);

    // First failure per process; later ones are knock-ons of it.
    let mut first: BTreeMap<(super::ProcKey, Option<u32>), Sighting> = BTreeMap::new();
    let mut knock = 0u64;
    let mut warns: Vec<&Sighting> = fallbacks.iter().collect();
    let mut timeouts: Vec<&Sighting> = Vec::new();
    for s in &a.sightings {
        if s.cause == super::TRAIL || recovered_warn(&a, s) {
            continue;
        }
        match s.cause {
            c if WARNS.contains(&c) => warns.push(s),
            "collective_timeout" => timeouts.push(s),
            _ => {
                let key = (
                    s.proc_.clone(),
                    if s.proc_.host == 0 { s.rank_hint } else { None },
                );
                match first.entry(key) {
                    // PyTorch prints the class (`ncclInternalError`) before NCCL's own
                    // "Last error:" text: the named cause replaces the unclassified one.
                    std::collections::btree_map::Entry::Occupied(mut o)
                        if o.get().cause == "unclassified_failure" && HARD.contains(&s.cause) =>
                    {
                        let mut named = s.clone();
                        named.result = named.result.or(o.get().result);
                        o.insert(named);
                        knock += 1;
                    }
                    std::collections::btree_map::Entry::Occupied(_) => knock += 1,
                    std::collections::btree_map::Entry::Vacant(v) => {
                        v.insert(s.clone());
                    }
                }
            }
        }
    }
    let firsts: Vec<&Sighting> = {
        let mut v: Vec<&Sighting> = first.values().collect();
        v.sort_by(|x, y| (x.file.as_str(), x.line_no).cmp(&(y.file.as_str(), y.line_no)));
        v
    };
    let hard: Vec<&Sighting> = firsts
        .iter()
        .copied()
        .filter(|s| HARD.contains(&s.cause))
        .collect();
    // Root cause over symptom: completion errors an earlier event explains are its
    // knock-ons, listed under it.
    let roots = explained(&ctx, &hard, &warns);
    let promoted: Vec<&Sighting> = roots.iter().filter_map(|r| r.promoted).collect();
    warns.retain(|w| !promoted.iter().any(|p| std::ptr::eq(*p, *w)));
    let hard: Vec<&Sighting> = promoted
        .iter()
        .copied()
        .chain(hard.iter().copied().filter(|s| !roots.iter().any(|r| r.explains(s))))
        .collect();
    let flush: Vec<&Sighting> = firsts
        .iter()
        .copied()
        .filter(|s| s.cause == "ib_wr_flush")
        .collect();
    let exited: Vec<&Sighting> = firsts
        .iter()
        .copied()
        .filter(|s| s.cause == "remote_process_exited")
        .collect();

    let unclassified: Vec<&Sighting> = firsts
        .iter()
        .copied()
        .filter(|s| s.cause == "unclassified_failure")
        .collect();
    let proxy: Vec<&Sighting> = firsts
        .iter()
        .copied()
        .filter(|s| s.cause == "proxy_connection_failed")
        .collect();

    // Tiers: a named cause explains an unknown WARN, which explains a proxy failure, a
    // flush, a closed connection and a timeout, in that order.
    let mut verdicts = grouped(&ctx, &hard, Severity::Fail);
    let mut knock_ons = knock;
    for r in &roots {
        let Some(v) = verdicts.iter_mut().find(|v| r.is_root_of(&ctx, v)) else {
            continue;
        };
        for e in &r.knock {
            let w = verdict(&ctx, e, Severity::Fail);
            v.explains.push(format!("{}{}", w.cause, describe(&w)));
        }
        knock_ons += r.knock.len() as u64;
    }
    for tier in [&unclassified, &proxy, &flush] {
        if verdicts.is_empty() {
            verdicts.extend(grouped(&ctx, tier, Severity::Fail));
        } else {
            knock_ons += tier.len() as u64;
        }
    }
    if verdicts.is_empty() {
        verdicts.extend(grouped(&ctx, &exited, Severity::Fail));
    } else {
        knock_ons += exited.len() as u64;
    }

    // Collective timeouts: one event per (sequence number, op).
    let mut by_seq: BTreeMap<(Option<u64>, Option<String>), Vec<&Sighting>> = BTreeMap::new();
    for t in &timeouts {
        by_seq.entry((t.seq, t.op.clone())).or_default().push(t);
    }
    if verdicts.is_empty() {
        for ((_, _), list) in by_seq {
            let mut v = verdict(&ctx, list[0], Severity::Fail);
            let ranks: BTreeSet<u32> = list.iter().filter_map(|s| ctx.rank_of(s)).collect();
            v.rank = ranks.iter().next().copied();
            v.ranks = ranks.iter().skip(1).copied().collect();
            // The communicator's size when the log has it; else the gaps below the highest
            // rank that timed out (ranks above it cannot be told from absent ones).
            let world = a.world.or_else(|| ranks.iter().next_back().map(|m| m + 1));
            // A rank known to have reached a later sequence number passed this one.
            let passed = |r: &u32| match (a.progress.get(r), v.seq) {
                (Some(p), Some(q)) => *p >= q,
                _ => false,
            };
            if let Some(w) = world {
                if (ranks.len() as u32) < w {
                    v.suspects = (0..w).filter(|r| !ranks.contains(r) && !passed(r)).collect();
                }
            }
            if a.world.is_none() && !v.suspects.is_empty() {
                v.meaning.push_str(" (the log has no communicator size: suspects are the gaps below the highest rank listed)");
            }
            verdicts.push(v);
        }
    } else {
        knock_ons += timeouts.len() as u64;
    }
    // An error trail with no failure line at all (NCCL_DEBUG=WARN cut, or a WARN lost).
    if verdicts.is_empty() {
        if let Some(t) = trails.first() {
            let mut t = (*t).clone();
            t.cause = "unclassified_failure";
            verdicts.push(verdict(&ctx, &t, Severity::Fail));
        }
    }
    if let Some(v) = verdicts.first_mut() {
        v.knock_ons = knock_ons;
    }

    // Derived from the summary.
    if a.versions.len() > 1 {
        let desc: Vec<String> = a
            .versions
            .iter()
            .map(|(v, h)| format!("{v} on {}", h.iter().cloned().collect::<Vec<_>>().join(",")))
            .collect();
        verdicts.push(derived(
            "version_mismatch",
            Severity::Fail,
            format!("NCCL versions differ: {}", desc.join("; ")),
        ));
    }
    verdicts.extend(virtual_ifaces(&a, multi_host));
    iface_explains(&mut verdicts);
    let socket_conns = a.transports.keys().any(|k| k == "NET/Socket");
    if multi_host && (socket_conns || a.networks.contains("Socket")) {
        verdicts.push(derived(
            "net_socket_fallback",
            Severity::Warn,
            format!(
                "{} connection(s) via NET/Socket; networks: {}",
                a.transports.get("NET/Socket").copied().unwrap_or(0),
                a.networks.iter().cloned().collect::<Vec<_>>().join(", ")
            ),
        ));
    }
    // Warnings, one per host and cause (and HCA for GDR), with the ranks of each group
    // gathered in one pass (a pass per group is quadratic on a log of many hosts).
    type WarnGroup<'a> = (&'a str, Option<String>, Option<String>);
    let mut same: BTreeMap<WarnGroup, BTreeSet<u32>> = BTreeMap::new();
    for o in warns.iter() {
        let ranks = same.entry((o.cause, ctx.host_of(o), o.hca.clone())).or_default();
        ranks.extend(ctx.rank_of(o));
    }
    let mut seen = BTreeSet::new();
    for s in warns {
        let key = (s.cause, ctx.host_of(s), s.hca.clone());
        if !seen.insert(key.clone()) {
            continue;
        }
        let mut v = verdict(&ctx, s, Severity::Warn);
        let same = same.get(&key).cloned().unwrap_or_default();
        v.rank = same.iter().next().copied().or(v.rank);
        v.ranks = same.iter().skip(1).copied().collect();
        verdicts.push(v);
    }

    // Nothing NCCL printed: unknown, not "no failure" (issue 21).
    if verdicts.is_empty() && a.nccl_lines == 0 && a.versions.is_empty() {
        verdicts.push(derived(
            "no_nccl_output",
            Severity::Unknown,
            format!("no NCCL line in {} line(s) of input", a.lines),
        ));
    }
    for v in &mut verdicts {
        annotate(&a, v);
        fill_next(&ctx, v);
    }
    rank_verdicts(&mut verdicts);
    let summary = summarise(&a, &ctx);
    Report { summary, verdicts }
}

/// Loopback and virtual interfaces (container, VM and CNI bridges, veths, overlays) NCCL
/// bootstrapped or connected over: one verdict per host and interface.
fn virtual_ifaces(a: &Analyzer, multi_host: bool) -> Vec<Verdict> {
    use super::ifaces::{Kind, classify};
    let mut out: Vec<Verdict> = Vec::new();
    for (host, ifs) in a.bootstrap.iter().chain(a.socket_ifs.iter()) {
        for i in ifs {
            let name = i.split(':').next().unwrap_or(i);
            let (cause, kind, what) = if name == "lo" || name.starts_with("lo:") {
                ("socket_iface_loopback", Kind::HostLocal, "loopback")
            } else {
                match classify(name) {
                    Some((k, w)) => ("socket_iface_virtual", k, w),
                    None => continue,
                }
            };
            if out.iter().any(|v| v.host.as_deref() == Some(host) && v.device.as_deref() == Some(name)) {
                continue;
            }
            // One host: a single-node job works over them; across hosts a host-local
            // address cannot be reached and an overlay costs encapsulation.
            let severity = if multi_host && kind == Kind::HostLocal {
                Severity::Fail
            } else {
                Severity::Warn
            };
            let line = if cause == "socket_iface_loopback" {
                format!("{host} uses {i}")
            } else {
                format!("{host} uses {i} ({what}, by its naming rule)")
            };
            let mut v = derived(cause, severity, line);
            if cause == "socket_iface_virtual" && kind == Kind::Overlay {
                v.meaning = explain("socket_iface_overlay").0.to_string();
            }
            v.host = Some(host.clone());
            v.device = Some(name.to_string());
            out.push(v);
        }
    }
    out
}

/// A host-local interface NCCL gave out explains the socket connect failures: across hosts
/// (a fail) every one, since peers dial the address it advertised; on one host those whose
/// address names it as its scope (`fe80::1%ip6tnl0<46681>`). The interface is the verdict
/// (a fail), the connect failures are listed under it.
fn iface_explains(verdicts: &mut Vec<Verdict>) {
    let scope = |v: &Verdict| {
        let addr = v.peer.as_ref()?.addr.as_deref()?;
        let s = addr.split_once('%')?.1;
        Some(s.split('<').next().unwrap_or(s).to_string())
    };
    let mut i = 0;
    while i < verdicts.len() {
        if verdicts[i].cause != "socket_connect_failed" {
            i += 1;
            continue;
        }
        let sc = scope(&verdicts[i]);
        let root = verdicts.iter().position(|v| {
            matches!(v.cause.as_str(), "socket_iface_loopback" | "socket_iface_virtual")
                && (v.severity == Severity::Fail || (sc.is_some() && v.device == sc))
        });
        let Some(r) = root else {
            i += 1;
            continue;
        };
        let c = verdicts.remove(i);
        let r = if r > i { r - 1 } else { r };
        let v = &mut verdicts[r];
        v.severity = Severity::Fail;
        v.explains.push(format!("{}{}", c.cause, describe(&c)));
        v.knock_ons += 1 + c.knock_ons;
    }
}

/// What the whole log adds to a verdict: the plugin and its version for a plugin's own
/// error, the topology file NCCL was told to load (and who set it) for a topology error.
fn annotate(a: &Analyzer, v: &mut Verdict) {
    if v.cause.starts_with("net_plugin") {
        if v.device.is_none() || v.device.as_deref().is_some_and(|d| d.starts_with("cuda:")) {
            v.device = plugin_of(&v.line).map(str::to_string).or(v.device.take());
        }
        let named: Vec<&str> = a
            .plugins
            .iter()
            .map(String::as_str)
            .filter(|p| !p.starts_with("none"))
            .collect();
        if !named.is_empty() {
            v.meaning.push_str(&format!(" (plugin: {})", named.join(", ")));
        }
    }
    if (v.cause.starts_with("topology_file") || v.cause == "graph_file_error") && !a.topo_files.is_empty() {
        let said: Vec<&str> = a.topo_files.iter().map(String::as_str).collect();
        v.meaning.push_str(&format!("; the log says: {}", said.join("; ")));
    }
}

/// At most this many hosts are named in one next step; more are counted.
const MAX_NAMED_HOSTS: usize = 4;

/// `a`, `a and b`, `a, b, c and 2 more`.
fn host_list(hosts: &[&str]) -> String {
    let named: Vec<&str> = hosts.iter().copied().take(MAX_NAMED_HOSTS).collect();
    let more = hosts.len() - named.len();
    match (named.as_slice(), more) {
        ([], _) => String::new(),
        ([one], 0) => one.to_string(),
        (n, 0) => format!("{} and {}", n[..n.len() - 1].join(", "), n[n.len() - 1]),
        (n, m) => format!("{} and {m} more", n.join(", ")),
    }
}

/// The file a `NCCL_TOPO_FILE set ... to PATH` or `NCCL_GRAPH_FILE set ... to PATH` line
/// names, for the variable asked.
fn said_file<'a>(a: &'a Analyzer, var: &str) -> Option<&'a str> {
    a.topo_files
        .iter()
        .filter(|l| l.starts_with(var) || (var == "NCCL_TOPO_FILE" && l.starts_with("Loading topology file")))
        .find_map(|l| l.split_whitespace().last())
        .map(|p| p.trim_end_matches('.'))
        .filter(|p| p.contains('/'))
}

/// The next step with what the log knows put in, so it pastes: `{host}` the verdict's host,
/// `{peer}` its peer's, `{hosts}` both, `{all}` the log's hosts, `{suspects}` the suspects'
/// hosts, and the topology or graph file; what the log does not name stays a phrase
/// ("that host"), never a placeholder.
fn fill_next(ctx: &Ctx, v: &mut Verdict) {
    let host = v.host.as_deref().filter(|h| !h.is_empty());
    let peer = v.peer.as_ref().and_then(|p| p.host.as_deref());
    let hosts = match (host, peer) {
        (Some(a), Some(b)) if a == b => a.to_string(),
        (Some(a), Some(b)) => format!("{a} and {b}"),
        (Some(a), None) => format!("{a} and the peer's host"),
        (None, Some(b)) => format!("{b} and the other host"),
        (None, None) => "both hosts".into(),
    };
    let all: Vec<&str> = ctx.host_ranks.keys().map(String::as_str).filter(|h| !h.is_empty()).collect();
    let all = if all.is_empty() { "each host".to_string() } else { host_list(&all) };
    let mut sus: Vec<&str> = v
        .suspects
        .iter()
        .filter_map(|r| ctx.rank_host.get(r).map(String::as_str))
        .collect();
    sus.dedup();
    let suspects = if sus.is_empty() { "the suspects' hosts".to_string() } else { host_list(&sus) };
    let topo = said_file(ctx.a, "NCCL_TOPO_FILE");
    let xmllint = match topo {
        Some(f) => format!("`xmllint --noout {f}`"),
        None => "check the topology XML NCCL loaded with xmllint --noout".into(),
    };
    let ls = match topo {
        Some(f) => format!("`ls -l {f}`"),
        None => "check that the NCCL_TOPO_FILE path exists".into(),
    };
    let origin = match said_file(ctx.a, "NCCL_GRAPH_FILE") {
        Some(f) => format!("{f}: the environment, /etc/nccl.conf or ~/.nccl.conf, all of which NCCL reports as set by environment"),
        None => "the environment, /etc/nccl.conf or ~/.nccl.conf".into(),
    };
    v.next = v
        .next
        .replace("{hosts}", &hosts)
        .replace("{host}", host.unwrap_or("that host"))
        .replace("{peer}", peer.unwrap_or("the peer's host"))
        .replace("{all}", &all)
        .replace("{suspects}", &suspects)
        .replace("{xmllint}", &xmllint)
        .replace("{ls}", &ls)
        .replace("{origin}", &origin);
}

/// Fail before warn; among fails, a cause no rule explains after every classified one
/// (it never outranks a named cause), carrying its knock-on count to the new first.
fn rank_verdicts(verdicts: &mut [Verdict]) {
    let key = |v: &Verdict| (std::cmp::Reverse(v.severity), v.cause == "unclassified_failure");
    let before = verdicts.first().map(|v| (v.cause.clone(), v.line_no, v.file.clone()));
    verdicts.sort_by_key(key);
    let moved = verdicts
        .first()
        .map(|v| (v.cause.clone(), v.line_no, v.file.clone()))
        != before;
    if moved {
        let n: u64 = verdicts.iter().map(|v| v.knock_ons).sum();
        for v in verdicts.iter_mut() {
            v.knock_ons = 0;
        }
        if let Some(v) = verdicts.first_mut() {
            v.knock_ons = n;
        }
    }
}

/// ` on HOST rank R DEVICE` for a knock-on listed under its root cause.
fn describe(v: &Verdict) -> String {
    let mut w = Vec::new();
    if let Some(h) = &v.host {
        w.push(h.clone());
    }
    if let Some(r) = v.rank {
        w.push(format!("rank {r}"));
    }
    if let Some(d) = &v.device {
        w.push(d.clone());
    }
    if let Some(s) = v.status {
        w.push(format!("status {s}"));
    }
    if w.is_empty() { String::new() } else { format!(" on {}", w.join(" ")) }
}

/// A sighting before its process chose a network (`Using network X`), from plugin or
/// transport init: NCCL went on to the next plugin (src/plugin/net.cc `ncclNetInit`: a
/// plugin whose init or devices call fails is disabled and the next one tried).
fn before_network(a: &Analyzer, s: &Sighting) -> bool {
    a.procs
        .get(&s.proc_)
        .and_then(|p| p.net_at)
        .is_some_and(|at| s.line_no < at)
}

/// A WARN from a network plugin's or transport's init that NCCL recovered from.
fn recovered_warn(a: &Analyzer, s: &Sighting) -> bool {
    (s.cause.starts_with("net_plugin") || s.cause == "unclassified_failure")
        && plugin_of(&s.line).is_some()
        && before_network(a, s)
}

/// The plugin a WARN names by its prefix: `NET/OFI`, `NET/UCX`, `NET/IB`, `CollNet/...`.
pub(super) fn plugin_of(line: &str) -> Option<&str> {
    let i = line.find("NET/").or_else(|| line.find("CollNet"))?;
    let w = line[i..].split([' ', ':']).next()?;
    Some(w.trim_end_matches(','))
}

/// The recovered plugin WARNs as `net_plugin_fallback` warnings, and the error trails
/// NCCL did not recover from, first first.
fn recovered(a: &Analyzer) -> (Vec<Sighting>, Vec<&Sighting>) {
    let mut fallbacks = Vec::new();
    let mut trails = Vec::new();
    for s in &a.sightings {
        if recovered_warn(a, s) {
            let mut f = s.clone();
            f.cause = "net_plugin_fallback";
            fallbacks.push(f);
        } else if s.cause == super::TRAIL && !before_network(a, s) {
            trails.push(s);
        }
    }
    (fallbacks, trails)
}

/// An event that explains later completion errors: an async port/device event or a GID
/// table change on a host, or a peer that failed for a reason of its own first.
struct Root<'a> {
    root: &'a Sighting,
    /// A warning made the verdict because it explains failures (a GID table change).
    promoted: Option<&'a Sighting>,
    knock: Vec<&'a Sighting>,
}

impl Root<'_> {
    fn explains(&self, s: &Sighting) -> bool {
        self.knock.iter().any(|k| std::ptr::eq(*k, s))
    }
    fn is_root_of(&self, ctx: &Ctx, v: &Verdict) -> bool {
        v.cause == self.root.cause
            && v.host == ctx.host_of(self.root)
            && v.device == ctx.device_of(self.root)
    }
}

/// What a completion error reports: the peer or the fabric under it failed.
const COMPLETION: &[&str] = &[
    "ib_retry_exceeded",
    "ib_rnr_retry_exceeded",
    "ib_remote_access",
    "ib_remote_op",
    "ib_completion_error",
];

/// Causes of a process's own that end it (its peers then see completion errors).
const OWN: &[&str] = &[
    "cuda_error",
    "cuda_oom",
    "system_error",
    "shm_alloc_failed",
    "duplicate_gpu",
];

/// Earlier in the same input (or in another input, whose order is unknown: the event
/// still explains the errors of the job).
fn earlier(a: &Sighting, b: &Sighting) -> bool {
    a.file != b.file || a.line_no < b.line_no
}

fn explained<'a>(ctx: &Ctx, hard: &[&'a Sighting], warns: &[&'a Sighting]) -> Vec<Root<'a>> {
    let mut roots: Vec<Root> = Vec::new();
    let completions: Vec<&Sighting> = hard
        .iter()
        .copied()
        .filter(|s| COMPLETION.contains(&s.cause))
        .collect();
    let taken = |roots: &Vec<Root>, c: &Sighting| roots.iter().any(|r| r.explains(c));
    // A port or device event: every later completion error of the job follows from it.
    for r in hard
        .iter()
        .copied()
        .filter(|s| matches!(s.cause, "ib_port_error" | "ib_device_fatal" | "ib_async_error"))
    {
        let knock: Vec<&Sighting> = completions
            .iter()
            .copied()
            .filter(|c| earlier(r, c) && !taken(&roots, c))
            .collect();
        if !knock.is_empty() {
            roots.push(Root { root: r, promoted: None, knock });
        }
    }
    // A GID table change on a host: its later completion or QP errors, and its peers'.
    for g in warns.iter().copied().filter(|s| s.cause == "ib_gid_change") {
        let host = ctx.host_of(g);
        let knock: Vec<&Sighting> = hard
            .iter()
            .copied()
            .filter(|c| COMPLETION.contains(&c.cause) || c.cause == "ib_modify_qp_failed")
            .filter(|c| {
                let peer = ctx.peer_of(c).and_then(|p| p.host);
                host.is_some() && (ctx.host_of(c) == host || peer == host)
            })
            .filter(|c| earlier(g, c) && !taken(&roots, c))
            .collect();
        if !knock.is_empty() {
            roots.push(Root { root: g, promoted: Some(g), knock });
        }
    }
    // A peer that failed first for a reason of its own: the completion errors towards it.
    for o in hard.iter().copied().filter(|s| OWN.contains(&s.cause)) {
        let Some(host) = ctx.host_of(o) else { continue };
        let knock: Vec<&Sighting> = completions
            .iter()
            .copied()
            .filter(|c| ctx.peer_of(c).and_then(|p| p.host).as_deref() == Some(host.as_str()))
            .filter(|c| earlier(o, c) && !taken(&roots, c))
            .collect();
        if !knock.is_empty() {
            roots.push(Root { root: o, promoted: None, knock });
        }
    }
    roots
}

fn summarise(a: &Analyzer, ctx: &Ctx) -> Summary {
    let mut hosts: Vec<HostSummary> = Vec::new();
    let names: BTreeSet<&String> = ctx
        .host_ranks
        .keys()
        .chain(a.bootstrap.keys())
        .chain(a.hcas.keys())
        .filter(|h| !h.is_empty())
        .collect();
    // Processes per host, counted once (a per-host scan of every process is quadratic).
    let mut procs_on: BTreeMap<&str, usize> = BTreeMap::new();
    for k in a.procs.keys() {
        *procs_on.entry(a.host_name(k.host)).or_default() += 1;
    }
    for h in names {
        let ranks: Vec<u32> = ctx
            .host_ranks
            .get(h)
            .map(|r| r.iter().copied().collect())
            .unwrap_or_default();
        let local_ranks = procs_on.get(h.as_str()).copied().unwrap_or(0);
        hosts.push(HostSummary {
            host: h.clone(),
            ranks,
            local_ranks,
            bootstrap: a
                .bootstrap
                .get(h)
                .map(|s| s.iter().cloned().collect())
                .unwrap_or_default(),
            socket_interfaces: a
                .socket_ifs
                .get(h)
                .map(|s| s.iter().cloned().collect())
                .unwrap_or_default(),
            hcas: a
                .hcas
                .get(h)
                .map(|s| s.iter().cloned().collect())
                .unwrap_or_default(),
            gdr: a
                .gdr
                .range((h.clone(), String::new())..)
                .take_while(|((hh, _), _)| hh == h)
                .map(|((_, hca), on)| (hca.clone(), *on))
                .collect(),
        });
    }
    Summary {
        inputs: a.inputs.clone(),
        bytes: a.bytes,
        lines: a.lines,
        nccl_lines: a.nccl_lines,
        unrecognised_lines: a.unrecognised,
        unrecognised_samples: a.unrecognised_samples.clone(),
        truncated_lines: a.truncated_lines,
        nccl_versions: a
            .versions
            .iter()
            .map(|(v, h)| (v.clone(), h.iter().cloned().collect()))
            .collect(),
        hosts,
        world_size: a.world,
        ranks_seen: a
            .procs
            .values()
            .filter_map(|p| p.rank)
            .collect::<BTreeSet<_>>()
            .len(),
        ring_channels: a.rings.len(),
        ring_sample: a.ring_sample.clone(),
        tree_channels: a.trees.len(),
        channels: a.channels.clone(),
        networks: a.networks.iter().cloned().collect(),
        plugins: a.plugins.iter().cloned().collect(),
        transports: a.transports.clone(),
        connections: a
            .connections
            .keys()
            .map(|(s, d, v)| super::Connection {
                from_rank: *s,
                to_rank: *d,
                via: v.clone(),
            })
            .collect(),
        // Connection lines whose connection is not in the list.
        connections_dropped: a.connection_lines - a.connections.values().sum::<u64>(),
    }
}
