//! The cause registry: every cause `nccl-log` can give, one entry each, in the style of
//! the probes' `finding::Rule` tables. An entry says what the cause is (its class and
//! severity, how it ranks), where a log says it (the texts that match it in an NCCL WARN
//! or INFO, a pre-2.4 header-less line, PyTorch's or a framework's `Last error:` text, a
//! bare line), what it means, the next steps, which later errors it explains, and its man
//! page line. The WARN rules ([`super::events::warn_rule`]), the verdicts' meanings and
//! ranks, the knock-on rules, the man page, `--help` and docs/probes.md all read it, so a
//! new cause is one entry (tests/nccl_log_registry.rs checks every id used has one).

use crate::finding::Severity;

/// What kind of fault a cause is: who fixes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// A NIC, link, GPU or switch failed.
    Hardware,
    /// A setting, interface or file chose wrongly.
    Configuration,
    /// The program or its launcher.
    Application,
    /// What the job runs on: container, driver, libraries, limits.
    Environment,
}

impl Class {
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Hardware => "hardware",
            Class::Configuration => "configuration",
            Class::Application => "application",
            Class::Environment => "environment",
        }
    }
}

/// How a cause's verdict ranks against the others of the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rank {
    /// A root cause: a process failed here first, for a reason of its own.
    Root,
    /// A return code or a WARN no rule knows: it says the class of the failure, not its
    /// cause, so any root cause in the log outranks it (it is then a knock-on).
    Generic,
    /// What follows another failure (a flush, a closed connection, a proxy failure, a
    /// timeout): a verdict only when nothing else is in the log.
    KnockOn,
    /// The job runs, slower or at risk.
    Warning,
    /// Read from the whole log, not one line.
    Derived,
}

/// How a message that matched a cause's texts is read: the fields taken out of it and,
/// for a family (one text, several causes), which of them it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    /// The cause alone.
    Fixed,
    /// A work completion: the cause by its status (`ibv_wc_status`), peer, GIDs, HCA.
    Completion,
    /// An IB async event: the cause by the event's text; routine events are no failure.
    Async,
    /// `ibv_modify_qp`: a link-local GID or EINVAL is the GID index, else the QP.
    ModifyQp,
    /// `Duplicate GPU detected`: the rank and ncclInvalidUsage.
    DuplicateGpu,
    /// A closed or reset connection: the peer.
    Closed,
    /// A socket connect: the peer and errno.
    Connect,
    /// NCCL's proxy: its return code.
    Proxy,
    /// A net plugin's own WARN (`NET/<name>` other than NCCL's internal ones).
    Plugin,
    /// An INFO line (not a WARN: NCCL goes on), read by [`super::events::classify`].
    Info,
    /// A line without NCCL's header (PyTorch), read by [`super::events::classify_plain`].
    Plain,
    /// What no rule matched.
    Unmatched,
    /// From the whole log.
    Derived,
}

/// Where a log says a cause.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Any one of these keyword sets, every keyword of the set in the message; tested in
    /// registry order (the first entry whose texts match reads the message).
    Texts(&'static [&'static [&'static str]]),
    /// What of the whole log gives it.
    Derived(&'static str),
}

/// Which later failures of the job an earlier sighting of this cause explains.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Explains {
    pub causes: &'static [&'static str],
    pub scope: Scope,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every later one in the job (a port or device event under the fabric).
    Job,
    /// Those on its host or whose peer is its host (a GID table change).
    HostOrPeer,
    /// Those whose peer is its host (a process that failed first: its peers see errors).
    PeerIsHost,
    /// Those whose address names its interface, or all of them across hosts.
    Iface,
}

const NONE: Explains = Explains {
    causes: &[],
    scope: Scope::Job,
};

pub struct Cause {
    pub id: &'static str,
    pub class: Class,
    /// Fail, warn, or unknown (nothing could be judged).
    pub severity: Severity,
    pub rank: Rank,
    pub read: Read,
    pub seen: Seen,
    /// The return code's words (PyTorch's exception, `ncclGetErrorString`) that name this
    /// cause only by its class, with the `ncclResult_t`: read on bare lines, generic.
    pub codes: &'static [(&'static str, u8)],
    pub explains: Explains,
    /// One line for the man page.
    pub about: &'static str,
    /// What it means, for a person.
    pub meaning: &'static str,
    /// What to run next: `{host}`, `{peer}`, `{hosts}`, `{all}`, `{suspects}` and the
    /// file placeholders are filled from the log (verdicts::fill_next).
    pub next: &'static str,
}

/// Every cause, WARN rules in the order they are tested.
pub static CAUSES: &[Cause] = &[
    Cause {
        id: "ib_retry_exceeded",
        class: Class::Hardware,
        severity: Severity::Fail,
        rank: Rank::Root,
        read: Read::Completion,
        seen: Seen::Texts(&[&["Got completion"]]),
        codes: &[],
        explains: NONE,
        about: "status 12 (IBV_WC_RETRY_EXC_ERR): the peer NIC never acknowledged",
        meaning: "status 12 (IBV_WC_RETRY_EXC_ERR): the remote NIC never acknowledged within timeout x retries. At start: the two NICs cannot reach each other (GID index, RoCE v1/v2, routing, cross-rail pair); later in a run: a lossy path (PFC/ECN, cable) or a dead peer",
        next: "on {hosts}: `fabprobe links` (port state, symbol and link-down counters) and `fabprobe gids` (the same GID index and RoCE version on both); then `fabprobe ring` across {hosts}",
    },
    Cause {
        id: "ib_rnr_retry_exceeded",
        class: Class::Hardware,
        severity: Severity::Fail,
        rank: Rank::Root,
        read: Read::Completion,
        seen: Seen::Texts(&[&["Got completion"]]),
        codes: &[],
        explains: NONE,
        about: "status 13: the receiver had no receive posted (the peer stalled or died)",
        meaning: "status 13 (IBV_WC_RNR_RETRY_EXC_ERR): the receiver had no receive posted for the retries; the peer process stalled or died",
        next: "the log of the rank on {peer} for its first error; on {peer}: `fabprobe links`",
    },
    Cause {
        id: "ib_local_protection",
        class: Class::Configuration,
        severity: Severity::Fail,
        rank: Rank::Root,
        read: Read::Completion,
        seen: Seen::Texts(&[&["Got completion"]]),
        codes: &[],
        explains: NONE,
        about: "status 4: the NIC could not reach the local buffer (GPUDirect broken by ACS or IOMMU)",
        meaning: "status 4 (IBV_WC_LOC_PROT_ERR): the NIC could not access the local buffer; with GPU buffers this is GPUDirect RDMA broken by PCIe ACS or IOMMU redirection (confirmed when NCCL_NET_GDR_LEVEL=LOC makes it work, slowly)",
        next: "on {host}: `fabprobe gdr` (ACS, IOMMU, peermem/DMA-BUF per GPU-NIC pair) and `fabprobe topo`",
    },
    Cause {
        id: "ib_remote_access",
        class: Class::Hardware,
        severity: Severity::Fail,
        rank: Rank::Root,
        read: Read::Completion,
        seen: Seen::Texts(&[&["Got completion"]]),
        codes: &[],
        explains: NONE,
        about: "status 10: the peer rejected the RDMA access",
        meaning: "status 10 (IBV_WC_REM_ACCESS_ERR): the peer rejected the RDMA access (key or registration on the peer); often the peer's GDR or memory registration failed",
        next: "the log of the rank on {peer}; on {peer}: `fabprobe gdr`",
    },
    Cause {
        id: "ib_remote_op",
        class: Class::Hardware,
        severity: Severity::Fail,
        rank: Rank::Root,
        read: Read::Completion,
        seen: Seen::Texts(&[&["Got completion"]]),
        codes: &[],
        explains: NONE,
        about: "status 11: the peer could not complete the operation",
        meaning: "status 11 (IBV_WC_REM_OP_ERR): the peer could not complete the operation (its QP or memory in error)",
        next: "the log of the rank on {peer}; on {peer}: `fabprobe links`",
    },
    Cause {
        id: "ib_completion_error",
        class: Class::Hardware,
        severity: Severity::Fail,
        rank: Rank::Root,
        read: Read::Completion,
        seen: Seen::Texts(&[&["Got completion"]]),
        codes: &[],
        explains: NONE,
        about: "a completion with another error status",
        meaning: "a work completion with an error status other than the usual ones; the vendor syndrome narrows it down",
        next: "on {hosts}: `fabprobe links`; look the vendor syndrome up in the NIC vendor's documentation",
    },
    Cause {
        id: "ib_wr_flush",
        class: Class::Hardware,
        severity: Severity::Fail,
        rank: Rank::KnockOn,
        read: Read::Completion,
        seen: Seen::Texts(&[&["Got completion"]]),
        codes: &[],
        explains: NONE,
        about: "status 5: work flushed on a QP already in error (a cause only when nothing else is)",
        meaning: "status 5 (IBV_WC_WR_FLUSH_ERR): flushed work on a QP already in error; the first error is elsewhere (earlier, on the peer, or cut from this log)",
        next: "collect the logs of every rank (the peer's first error is the cause)",
    },
    Cause {
        id: "net_plugin_reg_mr_failed",
        class: Class::Environment,
        severity: Severity::Fail,
        rank: Rank::Root,
        read: Read::Plugin,
        seen: Seen::Texts(&[
            &["NET/", "register memory"],
            &["NET/", "mr_reg"],
            &["NET/", "memory registration"],
            &["CollNet", "register memory"],
        ]),
        codes: &[],
        explains: NONE,
        about: "a net plugin's own WARN (NET/OFI ...): memory registration failed",
        meaning: "the network plugin could not register memory with its device: with GPU buffers, GPUDirect (peermem/DMA-BUF) or the provider's CUDA support is missing or mismatched; with host buffers, the locked-memory limit",
        next: "on {host}: `fabprobe gdr` and `ulimit -l` in the job (unlimited); compare the plugin's and the provider's versions with NCCL's (the plugin line above)",
    },
    Cause {
        id: "net_plugin_provider_error",
        class: Class::Environment,
        severity: Severity::Fail,
        rank: Rank::Root,
        read: Read::Plugin,
        seen: Seen::Texts(&[
            &["NET/", "provider"],
            &["NET/", "fi_getinfo"],
            &["NET/", "protocol"],
        ]),
        codes: &[],
        explains: NONE,
        about: "a net plugin's own WARN: no usable provider or protocol",
        meaning: "the network plugin found no usable provider or protocol for its devices (libfabric provider missing, wrong FI_PROVIDER, or a device the provider does not support)",
        next: "on {host}: `fabprobe links` (are the devices there?) and `fi_info -p efa` (or the provider named); check FI_PROVIDER and the plugin's version",
    },
    Cause {
        id: "net_plugin_error",
        class: Class::Environment,
        severity: Severity::Fail,
        rank: Rank::Root,
        read: Read::Plugin,
        seen: Seen::Texts(&[&["NET/"], &["CollNet"]]),
        codes: &[],
        explains: NONE,
        about: "a net plugin's own WARN, any other (names the plugin and its version)",
        meaning: "the network plugin reported an error of its own (device, endpoint, address vector or a failed request): the line names the call",
        next: "on {host}: `fabprobe links`; search the plugin's issue tracker for the line's text, with the plugin version above",
    },
    Cause {
        id: "graph_file_error",
        class: Class::Configuration,
        severity: Severity::Fail,
        rank: Rank::Root,
        read: Read::Fixed,
        seen: Seen::Texts(&[&["XML Import Channel"]]),
        codes: &[],
        explains: NONE,
        about: "NCCL_GRAPH_FILE names GPUs or NICs the job does not have",
        meaning: "NCCL could not import the graph XML it was told to load (NCCL_GRAPH_FILE, often set by a VM image's /etc/nccl.conf): the graph names GPUs or NICs this job does not have (written for another GPU count or machine); NCCL init fails. A graph file is for experiments, not production",
        next: "unset NCCL_GRAPH_FILE where it was set ({origin})",
    },
    Cause {
        id: "topology_file_error",
        class: Class::Configuration,
        severity: Severity::Fail,
        rank: Rank::Root,
        read: Read::Fixed,
        seen: Seen::Texts(&[
            &["Attribute ", " of node ", "not found"],
            &["XML Parse"],
            &["XML Mismatch"],
            &["XML Topology"],
            &["XML parser"],
            &["XML Import"],
        ]),
        codes: &[],
        explains: NONE,
        about: "NCCL_TOPO_FILE does not parse (names the file and who set it)",
        meaning: "NCCL could not parse the topology XML it was told to load (NCCL_TOPO_FILE, or a file set in /etc/nccl.conf): a syntax error, a wrong version or a truncated file; NCCL init fails",
        next: "{xmllint}; regenerate it for this NCCL version (NCCL_TOPO_DUMP_FILE) or unset NCCL_TOPO_FILE",
    },
    Cause {
        id: "ib_port_error",
        class: Class::Hardware,
        severity: Severity::Fail,
        rank: Rank::Root,
        read: Read::Async,
        seen: Seen::Texts(&[&["async event"], &["async fatal event"]]),
        codes: &[],
        explains: Explains {
            causes: &[
                "ib_retry_exceeded",
                "ib_rnr_retry_exceeded",
                "ib_remote_access",
                "ib_remote_op",
                "ib_completion_error",
            ],
            scope: Scope::Job,
        },
        about: "an IB async port error: the link went down under the job",
        meaning: "the IB/RoCE port reported an asynchronous port error: the link went down under the job",
        next: "on {host}: `fabprobe links` (port state, link-down counters); then the switch port and the cable",
    },
    Cause {
        id: "ib_device_fatal",
        class: Class::Hardware,
        severity: Severity::Fail,
        rank: Rank::Root,
        read: Read::Async,
        seen: Seen::Texts(&[&["async event"], &["async fatal event"]]),
        codes: &[],
        explains: Explains {
            causes: &[
                "ib_retry_exceeded",
                "ib_rnr_retry_exceeded",
                "ib_remote_access",
                "ib_remote_op",
                "ib_completion_error",
            ],
            scope: Scope::Job,
        },
        about: "a local catastrophic error: the NIC failed",
        meaning: "the RDMA device reported a local catastrophic error: the NIC firmware or hardware failed and every QP on it is dead",
        next: "on {host}: `dmesg` (mlx5 health, firmware syndrome) and `fabprobe links`; reset or replace the NIC before the node rejoins",
    },
    Cause {
        id: "ib_gid_change",
        class: Class::Environment,
        severity: Severity::Warn,
        rank: Rank::Warning,
        read: Read::Async,
        seen: Seen::Texts(&[&["async event"], &["async fatal event"]]),
        codes: &[],
        explains: Explains {
            causes: &[
                "ib_retry_exceeded",
                "ib_rnr_retry_exceeded",
                "ib_remote_access",
                "ib_remote_op",
                "ib_completion_error",
                "ib_modify_qp_failed",
            ],
            scope: Scope::HostOrPeer,
        },
        about: "the GID table changed under the job (warn; the cause of the QP and completion errors after it on that host)",
        meaning: "the port's GID table changed while the job ran (an address added or removed on the netdev, often by a container runtime): a GID index chosen at start may now point elsewhere",
        next: "on {host}: `fabprobe gids`; keep addresses on RDMA netdevs stable during jobs",
    },
    Cause {
        id: "ib_async_error",
        class: Class::Hardware,
        severity: Severity::Fail,
        rank: Rank::Root,
        read: Read::Async,
        seen: Seen::Texts(&[&["async event"], &["async fatal event"]]),
        codes: &[],
        explains: Explains {
            causes: &[
                "ib_retry_exceeded",
                "ib_rnr_retry_exceeded",
                "ib_remote_access",
                "ib_remote_op",
                "ib_completion_error",
            ],
            scope: Scope::Job,
        },
        about: "another IB async error event (a QP, CQ or SRQ in error)",
        meaning: "the RDMA device reported an asynchronous error event (a QP, CQ or SRQ went into error)",
        next: "on {host}: `dmesg` and `fabprobe links`",
    },
    Cause {
        id: "ib_modify_qp_failed",
        class: Class::Configuration,
        severity: Severity::Fail,
        rank: Rank::Root,
        read: Read::ModifyQp,
        seen: Seen::Texts(&[&["ibv_modify_qp"]]),
        codes: &[],
        explains: NONE,
        about: "ibv_modify_qp failed while connecting (address vector unusable)",
        meaning: "ibv_modify_qp failed while connecting (INIT->RTR/RTS): the address vector is unusable (wrong or link-local GID index, cross-rail pair on a rail-only fabric, no route)",
        next: "on {hosts}: `fabprobe gids` and `fabprobe nccl-env` (GID index, NCCL_IB_HCA); on a rail-optimised fabric try NCCL_CROSS_NIC=0",
    },
    Cause {
        id: "gid_index_unusable",
        class: Class::Configuration,
        severity: Severity::Fail,
        rank: Rank::Root,
        read: Read::ModifyQp,
        seen: Seen::Texts(&[&["ibv_modify_qp"]]),
        codes: &[],
        explains: NONE,
        about: "the GID index cannot address the peer (EINVAL, or a link-local GID)",
        meaning: "the GID index in use cannot address the peer (EINVAL from ibv_modify_qp, or a link-local local GID): NCCL_IB_GID_INDEX forced to a wrong entry, or the automatic choice found no routable GID",
        next: "on {host}: `fabprobe gids` (which index NCCL picks); unset NCCL_IB_GID_INDEX or set it to the RoCE v2 IPv4 entry",
    },
    Cause {
        id: "ib_reg_mr_failed",
        class: Class::Configuration,
        severity: Severity::Fail,
        rank: Rank::Root,
        read: Read::Fixed,
        seen: Seen::Texts(&[&["ibv_reg_mr"], &["ibv_reg_dmabuf_mr"]]),
        codes: &[],
        explains: NONE,
        about: "memory registration failed (ulimit -l, peermem/DMA-BUF)",
        meaning: "memory registration failed: usually the locked-memory limit (ulimit -l) is too small in the container or service, or GPU memory registration (peermem/DMA-BUF) is unavailable",
        next: "on {host}: `ulimit -l` in the job (should be unlimited) and `fabprobe gdr`",
    },
    Cause {
        id: "ib_device_open_failed",
        class: Class::Environment,
        severity: Severity::Fail,
        rank: Rank::Root,
        read: Read::Fixed,
        seen: Seen::Texts(&[&["ibv_open_device"], &["Unable to open device"]]),
        codes: &[],
        explains: NONE,
        about: "the RDMA device could not be opened (container without /dev/infiniband)",
        meaning: "the RDMA device could not be opened: the container lacks /dev/infiniband, or the device is gone",
        next: "on {host}: `fabprobe links`; check the container's device mounts (/dev/infiniband)",
    },
    Cause {
        id: "ib_verbs_unavailable",
        class: Class::Environment,
        severity: Severity::Warn,
        rank: Rank::Warning,
        read: Read::Fixed,
        seen: Seen::Texts(&[&["Failed to open libibverbs"]]),
        codes: &[],
        explains: NONE,
        about: "libibverbs missing (warn: sockets instead)",
        meaning: "libibverbs could not be loaded, so NCCL has no IB/RoCE transport and falls back to TCP sockets",
        next: "install rdma-core/libibverbs in the container (`ldconfig -p | grep libibverbs`); on {host}: `fabprobe nccl-env`",
    },
    Cause {
        id: "system_error",
        class: Class::Environment,
        severity: Severity::Fail,
        rank: Rank::Generic,
        read: Read::Fixed,
        seen: Seen::Texts(&[&["Call to ibv_"], &["ibv_", "failed"]]),
        codes: &[("unhandled system error", 2), ("ncclSystemError", 2)],
        explains: Explains {
            causes: &[
                "ib_retry_exceeded",
                "ib_rnr_retry_exceeded",
                "ib_remote_access",
                "ib_remote_op",
                "ib_completion_error",
            ],
            scope: Scope::PeerIsHost,
        },
        about: "a system or library call failed; as a bare return code (ncclSystemError) generic: any named cause outranks it",
        meaning: "a system or library call failed (socket, memory, verbs): the line says which",
        next: "the line's call and errno; on {host}: `fabprobe links` and `fabprobe nccl-env`",
    },
    Cause {
        id: "cuda_oom",
        class: Class::Application,
        severity: Severity::Fail,
        rank: Rank::Root,
        read: Read::Fixed,
        seen: Seen::Texts(&[
            &["Cuda failure", "out of memory"],
            &["CUDA failure", "out of memory"],
            &["cuda failure", "out of memory"],
            &["cudaMalloc", "out of memory"],
            &["cuMem", "out of memory"],
        ]),
        codes: &[],
        explains: Explains {
            causes: &[
                "ib_retry_exceeded",
                "ib_rnr_retry_exceeded",
                "ib_remote_access",
                "ib_remote_op",
                "ib_completion_error",
            ],
            scope: Scope::PeerIsHost,
        },
        about: "CUDA out of memory inside NCCL",
        meaning: "CUDA ran out of GPU memory inside NCCL (its buffers, channels or proxy): the application holds nearly all of the GPU, or another process shares it",
        next: "on {host}: `nvidia-smi` (memory per process); lower the batch or leave headroom; NCCL_BUFFSIZE or fewer channels (NCCL_MAX_NCHANNELS) shrink NCCL's share",
    },
    Cause {
        id: "cuda_system_not_ready",
        class: Class::Environment,
        severity: Severity::Fail,
        rank: Rank::Root,
        read: Read::Fixed,
        seen: Seen::Texts(&[&["system not yet initialized"]]),
        codes: &[],
        explains: NONE,
        about: "CUDA 802: the host's Fabric Manager has not set up NVLink",
        meaning: "CUDA error 802 (cudaErrorSystemNotReady, 'system not yet initialized'): CUDA would not start on this host. On an NVSwitch system (HGX/DGX) the Fabric Manager has not set up the NVLink fabric: it is stopped, failed, or not the driver's version",
        next: "on {host}: `systemctl status nvidia-fabricmanager` (start it; its version must equal the driver's, /var/log/fabricmanager.log says why it stopped); `fabprobe topo` shows the NVSwitches, the Fabric Manager and each GPU's fabric state",
    },
    Cause {
        id: "version_requirement",
        class: Class::Environment,
        severity: Severity::Fail,
        rank: Rank::Root,
        read: Read::Fixed,
        seen: Seen::Texts(&[
            &["driver version is insufficient"],
            &["not supported prior to CUDA"],
            &["requires CUDA driver"],
            &["wasn't built with CUDA runtime"],
            &["NCCL library is too old"],
            &["compiled with too old version of NCCL"],
        ]),
        codes: &[],
        explains: NONE,
        about: "a CUDA driver, CUDA runtime or NCCL older than a feature needs (cuMem, graphs, RMA, the application)",
        meaning: "NCCL or the CUDA stack under it is older than a feature needs: the CUDA driver older than the runtime (cudaErrorInsufficientDriver), cuMem before CUDA 11.3, CUMEM host memory before 12.2, graph capture without runtime 11.3 and driver R465, one-sided RMA before driver 12.5, or an NCCL older than the application was built with; init or the feature fails",
        next: "on {host}: `nvidia-smi` (the driver's CUDA version) against the CUDA runtime and NCCL the job loads (the NCCL version line); upgrade the driver, or use a container built for this driver",
    },
    Cause {
        id: "cuda_error",
        class: Class::Application,
        severity: Severity::Fail,
        rank: Rank::Generic,
        read: Read::Fixed,
        seen: Seen::Texts(&[&["Cuda failure"], &["CUDA failure"], &["cuda failure"]]),
        codes: &[("unhandled cuda error", 1), ("ncclUnhandledCudaError", 1)],
        explains: Explains {
            causes: &[
                "ib_retry_exceeded",
                "ib_rnr_retry_exceeded",
                "ib_remote_access",
                "ib_remote_op",
                "ib_completion_error",
            ],
            scope: Scope::PeerIsHost,
        },
        about: "a CUDA call failed inside NCCL; as a bare return code generic",
        meaning: "a CUDA call failed inside NCCL (out of memory, initialization error, a lost GPU)",
        next: "on {host}: `nvidia-smi`, and `dmesg` for Xid errors",
    },
    Cause {
        id: "shm_alloc_failed",
        class: Class::Environment,
        severity: Severity::Fail,
        rank: Rank::Root,
        read: Read::Fixed,
        seen: Seen::Texts(&[
            &["shared memory"],
            &["/dev/shm"],
            &["shm_open"],
            &["posix_fallocate"],
        ]),
        codes: &[],
        explains: Explains {
            causes: &[
                "ib_retry_exceeded",
                "ib_rnr_retry_exceeded",
                "ib_remote_access",
                "ib_remote_op",
                "ib_completion_error",
            ],
            scope: Scope::PeerIsHost,
        },
        about: "/dev/shm too small or unavailable",
        meaning: "NCCL could not create or extend its shared-memory segment in /dev/shm: in containers /dev/shm is often 64 MB, too small for NCCL's SHM transport",
        next: "on {host}: `df -h /dev/shm` inside the container; docker run --shm-size=16g (or --ipc=host); Kubernetes: an emptyDir with medium Memory on /dev/shm",
    },
    Cause {
        id: "duplicate_gpu",
        class: Class::Application,
        severity: Severity::Fail,
        rank: Rank::Root,
        read: Read::DuplicateGpu,
        seen: Seen::Texts(&[&["Duplicate GPU detected"]]),
        codes: &[],
        explains: Explains {
            causes: &[
                "ib_retry_exceeded",
                "ib_rnr_retry_exceeded",
                "ib_remote_access",
                "ib_remote_op",
                "ib_completion_error",
            ],
            scope: Scope::PeerIsHost,
        },
        about: "two ranks on one GPU",
        meaning: "two ranks of one communicator use the same GPU (same host and bus id): the launcher started more ranks than GPUs, or every rank selects device 0",
        next: "set the device per local rank (torch.cuda.set_device(local_rank)); check CUDA_VISIBLE_DEVICES and the ranks per node",
    },
    Cause {
        id: "bootstrap_rank_mismatch",
        class: Class::Application,
        severity: Severity::Fail,
        rank: Rank::Root,
        read: Read::Fixed,
        seen: Seen::Texts(&[&["mismatch in rank count"], &["has already checked in"]]),
        codes: &[],
        explains: NONE,
        about: "ranks of two launches share one NCCL id or port",
        meaning: "the bootstrap root got ranks that disagree on the communicator's size (or two processes claimed one rank): processes of two jobs or two launches share one NCCL unique id or MASTER_PORT",
        next: "check the world size every launcher passes (--nnodes, --nproc_per_node, WORLD_SIZE) and that no stale process of an earlier run is still alive on any node",
    },
    Cause {
        id: "socket_no_interface",
        class: Class::Configuration,
        severity: Severity::Fail,
        rank: Rank::Root,
        read: Read::Fixed,
        seen: Seen::Texts(&[
            &["no socket interface found"],
            &["no usable interface"],
            &["No usable listening interface"],
            &["no interface found"],
            &["nor AF_INET6"],
            &["Socket creation failed", "Address family not supported"],
        ]),
        codes: &[],
        explains: NONE,
        about: "no interface matched NCCL_SOCKET_IFNAME",
        meaning: "no interface matched NCCL_SOCKET_IFNAME (or none was usable): NCCL cannot bootstrap",
        next: "on {host}: `fabprobe nccl-env` and `ip -br addr`",
    },
    Cause {
        id: "remote_process_exited",
        class: Class::Application,
        severity: Severity::Fail,
        rank: Rank::KnockOn,
        read: Read::Closed,
        seen: Seen::Texts(&[
            &["Connection closed by remote peer"],
            &["Connection reset by peer"],
            &["Broken pipe"],
            &["remote process exited"],
        ]),
        codes: &[("ncclRemoteError", 6), ("remote process exit", 6)],
        explains: NONE,
        about: "a peer closed the connection (a knock-on of any hard failure)",
        meaning: "a peer closed or reset the connection: the remote process exited (crashed, was killed, or failed first); its own log holds the cause",
        next: "the log of the process on {peer} for its first error; on {peer}: `dmesg` (OOM killer, Xid)",
    },
    Cause {
        id: "socket_connect_failed",
        class: Class::Configuration,
        severity: Severity::Fail,
        rank: Rank::Root,
        read: Read::Connect,
        seen: Seen::Texts(&[
            &["PollConnect"],
            &["Call to connect"],
            &["exceeded retries"],
            &["connect() failed"],
            &["Connect to", "failed"],
            &["Connect to", "returned"],
            &["connect to", "failed"],
            &["connect to", "returned"],
        ]),
        codes: &[],
        explains: NONE,
        about: "a TCP connection to a peer failed (carries the errno: 111, 110, 113)",
        meaning: "a TCP connection to a peer failed (refused, unreachable, timed out): firewall, wrong interface or address, or the peer not listening",
        next: "on {hosts}: `fabprobe nccl-env` (the socket interface); check the route and firewall between them",
    },
    Cause {
        id: "proxy_connection_failed",
        class: Class::Application,
        severity: Severity::Fail,
        rank: Rank::KnockOn,
        read: Read::Proxy,
        seen: Seen::Texts(&[
            &["Proxy Service"],
            &["[Service thread]"],
            &["Proxy Call"],
            &["ncclProxyConnect"],
        ]),
        codes: &[],
        explains: NONE,
        about: "NCCL's proxy failed an operation for a peer (after the failure the lines before it name)",
        meaning: "NCCL's proxy thread failed an operation for a peer (connect or setup); usually the consequence of a socket or transport failure the lines before it name",
        next: "the WARN lines just before it on the same rank; on {hosts}: `fabprobe nccl-env`",
    },
    Cause {
        id: "version_mismatch",
        class: Class::Environment,
        severity: Severity::Fail,
        rank: Rank::Root,
        read: Read::Fixed,
        seen: Seen::Texts(&[
            &["Message truncated"],
            &["Mismatched NCCL version"],
            &["version mismatch"],
        ]),
        codes: &[],
        explains: NONE,
        about: "ranks run different NCCL versions (also from the version lines)",
        meaning: "ranks run different NCCL versions or configurations (messages of the wrong size between them)",
        next: "check the NCCL library each rank loads (the NCCL version lines per host); align the containers",
    },
    Cause {
        id: "collective_mismatch",
        class: Class::Application,
        severity: Severity::Fail,
        rank: Rank::Root,
        read: Read::Fixed,
        seen: Seen::Texts(&[&["collective mismatch"], &["Mismatched collective"]]),
        codes: &[],
        explains: NONE,
        about: "ranks called different collectives",
        meaning: "ranks called different collectives or sizes at the same point: an application bug or a configuration difference",
        next: "compare the ranks' NCCL_* environment and the code path; NCCL_DEBUG_SUBSYS=COLL",
    },
    Cause {
        id: "topology_file_unreadable",
        class: Class::Configuration,
        severity: Severity::Warn,
        rank: Rank::Warning,
        read: Read::Fixed,
        seen: Seen::Texts(&[&["Could not open XML topology file"]]),
        codes: &[],
        explains: NONE,
        about: "NCCL_TOPO_FILE could not be opened (warn)",
        meaning: "NCCL was told to load a topology XML (NCCL_TOPO_FILE) it could not open: it detects the topology itself instead, which on a VM can miss the real PCIe layout",
        next: "on {host}: {ls} inside the container; fix or unset NCCL_TOPO_FILE",
    },
    Cause {
        id: "ib_no_device",
        class: Class::Environment,
        severity: Severity::Warn,
        rank: Rank::Warning,
        read: Read::Info,
        seen: Seen::Texts(&[&["NET/IB : No device found"], &["NET/IB: No device found"]]),
        codes: &[],
        explains: NONE,
        about: "NCCL found no RDMA device (warn)",
        meaning: "NCCL found no RDMA device (or no libibverbs): inter-node traffic goes over TCP sockets",
        next: "on {host}: `fabprobe links` (are RDMA devices visible here?) and `fabprobe nccl-env`",
    },
    Cause {
        id: "gdr_disabled",
        class: Class::Configuration,
        severity: Severity::Warn,
        rank: Rank::Warning,
        read: Read::Info,
        seen: Seen::Texts(&[&["GPU Direct RDMA Disabled"]]),
        codes: &[],
        explains: NONE,
        about: "GPUDirect RDMA off for an HCA (warn)",
        meaning: "GPUDirect RDMA is off for this HCA: traffic bounces through host memory, often about 10x lower bandwidth",
        next: "on {host}: `fabprobe gdr` (peermem/DMA-BUF, ACS) and `fabprobe nccl-env` (NCCL_NET_GDR_LEVEL against the path type)",
    },
    Cause {
        id: "net_plugin_load_failed",
        class: Class::Environment,
        severity: Severity::Warn,
        rank: Rank::Warning,
        read: Read::Info,
        seen: Seen::Texts(&[
            &["NET/Plugin", "undefined symbol"],
            &["NET/Plugin", "version `"],
            &["NET/Plugin", "wrong ELF class"],
            &["NET/Plugin", "cannot open shared object file"],
        ]),
        codes: &[],
        explains: NONE,
        about: "a net plugin is installed but failed to load (an undefined symbol, a missing symbol version or dependency): NCCL went on with its internal IB or Socket transport (warn; a plugin simply absent is nothing)",
        meaning: "a network plugin (libnccl-net*.so) is installed but the loader could not load it: the dlerror names an undefined symbol, a missing symbol version or a library it needs (built for another NCCL, glibc, libfabric or CUDA). NCCL went on with its internal IB or Socket transport: the job runs, on the wrong transport",
        next: "on {host}: `ldd` on the plugin library the line names (a `not found` is the missing dependency); install the plugin built for this NCCL and libfabric, or unset NCCL_NET_PLUGIN to use the internal transport on purpose",
    },
    Cause {
        id: "collective_timeout",
        class: Class::Application,
        severity: Severity::Fail,
        rank: Rank::KnockOn,
        read: Read::Plain,
        seen: Seen::Texts(&[&["Watchdog caught collective operation timeout"]]),
        codes: &[],
        explains: NONE,
        about: "PyTorch's watchdog timed out; the suspects are the ranks missing from the sequence number",
        meaning: "PyTorch's watchdog timed out on this collective: the ranks listed waited; the suspects (ranks of the communicator not timing out on it) never reached it or are stuck before it",
        next: "the suspects' logs and stacks (py-spy dump); `fabprobe ring` across {suspects}",
    },
    Cause {
        id: "unclassified_failure",
        class: Class::Application,
        severity: Severity::Fail,
        rank: Rank::Generic,
        read: Read::Unmatched,
        seen: Seen::Texts(&[&["NCCL WARN"]]),
        codes: &[
            ("internal error", 3),
            ("ncclInternalError", 3),
            ("invalid usage", 5),
            ("ncclInvalidUsage", 5),
            ("invalid argument", 4),
            ("ncclInvalidArgument", 4),
        ],
        explains: NONE,
        about: "a WARN or an error trail no rule explains (ranked after every classified cause)",
        meaning: "NCCL warned or returned an error that no rule here explains: the line is NCCL's own words, and the return code says the class (system error: a call into the OS or a library failed; internal error: NCCL's own check; invalid usage: the application or launcher; remote error: a peer)",
        next: "read the line and the WARN lines before it; search NCCL's issues for its text; rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET for the context",
    },
    Cause {
        id: "net_plugin_fallback",
        class: Class::Configuration,
        severity: Severity::Warn,
        rank: Rank::Warning,
        read: Read::Derived,
        seen: Seen::Derived(
            "a net plugin or transport WARN or error trail before the process printed `Using network`",
        ),
        codes: &[],
        explains: NONE,
        about: "a plugin or transport failed before NCCL chose its network and NCCL moved on (warn)",
        meaning: "a network plugin or transport failed while NCCL set up its networks, and NCCL recovered by moving on to the next one (src/plugin/net.cc): not a failure, but the network it then chose may not be the one intended",
        next: "check that the network NCCL chose ('Using network' in the log) is the intended one; on {host}: `fabprobe nccl-env`",
    },
    Cause {
        id: "net_socket_fallback",
        class: Class::Configuration,
        severity: Severity::Warn,
        rank: Rank::Warning,
        read: Read::Derived,
        seen: Seen::Derived(
            "`via NET/Socket` connection lines or `Using network Socket` on a job of several hosts",
        ),
        codes: &[],
        explains: NONE,
        about: "ranks on different hosts connect over NET/Socket (warn)",
        meaning: "ranks on different hosts connect over NET/Socket: TCP instead of RDMA, typically several times slower",
        next: "on {all}: `fabprobe nccl-env` (NCCL_IB_DISABLE, NCCL_IB_HCA, devices visible)",
    },
    Cause {
        id: "gdr_one_direction",
        class: Class::Configuration,
        severity: Severity::Warn,
        rank: Rank::Warning,
        read: Read::Derived,
        seen: Seen::Derived(
            "the `[send]` and `[receive]` connection lines of one rank pair, with and without GDRDMA",
        ),
        codes: &[],
        explains: NONE,
        about: "a connection whose send side uses GPUDirect RDMA and receive side not, or the reverse (warn)",
        meaning: "the two ends of one connection disagree on GPUDirect RDMA: one rank sends or receives straight from GPU memory (GDRDMA), its peer stages through host memory. One side's GPU-NIC path or peer memory support differs (a different PCIe layout, nvidia-peermem loaded on one host, NCCL_NET_GDR_LEVEL set on one)",
        next: "on {all}: `fabprobe gdr` (peer memory and the GPU-NIC path per pair) and `fabprobe nccl-env` (NCCL_NET_GDR_LEVEL, NCCL_NET_GDR_READ)",
    },
    Cause {
        id: "socket_iface_loopback",
        class: Class::Configuration,
        severity: Severity::Fail,
        rank: Rank::Root,
        read: Read::Derived,
        seen: Seen::Derived("`Bootstrap : Using` or `NET/Socket : Using` naming lo"),
        codes: &[],
        explains: Explains {
            causes: &["socket_connect_failed"],
            scope: Scope::Iface,
        },
        about: "NCCL used the loopback interface (fail across hosts, warn on one)",
        meaning: "NCCL bootstrapped or connected over the loopback interface; other hosts cannot reach that address",
        next: "on {host}: `fabprobe nccl-env` (the interface NCCL picks); set NCCL_SOCKET_IFNAME to the interface the hosts share (`ip -br addr`)",
    },
    Cause {
        id: "socket_iface_virtual",
        class: Class::Configuration,
        severity: Severity::Fail,
        rank: Rank::Root,
        read: Read::Derived,
        seen: Seen::Derived(
            "`Bootstrap : Using` or `NET/Socket : Using` naming a virtual interface (by its naming rule)",
        ),
        codes: &[],
        explains: Explains {
            causes: &["socket_connect_failed"],
            scope: Scope::Iface,
        },
        about: "a container, VM or CNI bridge, veth, tap or kernel fallback tunnel (fail across hosts; an overlay such as flannel.N or cni0: warn)",
        meaning: "NCCL bootstrapped or connected over a container, VM or CNI interface (a bridge, veth or tap end): its address is reachable from this host and its containers only",
        next: "on {host}: `fabprobe nccl-env` (the interface NCCL picks); set NCCL_SOCKET_IFNAME to the interface the hosts share, or exclude the virtual ones (NCCL_SOCKET_IFNAME=^docker,veth,virbr,cali,lxc,vnet)",
    },
    Cause {
        id: "no_nccl_output",
        class: Class::Environment,
        severity: Severity::Unknown,
        rank: Rank::Derived,
        read: Read::Derived,
        seen: Seen::Derived("an input with no NCCL line at all"),
        codes: &[],
        explains: NONE,
        about: "no NCCL line: nothing to judge (unknown)",
        meaning: "the input has no NCCL line, so nothing can be judged (unknown, not a pass): NCCL_DEBUG was unset, or this is not the job's output",
        next: "rerun the job with NCCL_DEBUG=INFO (NCCL_DEBUG=WARN prints failures only) and pass its stdout and stderr (2>&1)",
    },
    // PyTorch's flight recorder (flight/judge.rs): read from the ranks' dumps, judged per
    // process group; the verdict's own meaning and next step name the ranks and the call.
    Cause {
        id: "fr_collective_mismatch",
        class: Class::Application,
        severity: Severity::Fail,
        rank: Rank::Derived,
        read: Read::Derived,
        seen: Seen::Derived("flight-recorder dumps: the ranks' calls at one sequence number of a process group differ"),
        codes: &[],
        explains: NONE,
        about: "flight recorder: at one sequence number the ranks called different collectives (op, sizes or dtype); the ranks outside the largest agreeing set",
        meaning: "the ranks of a process group issued different collectives at the same sequence number (another op, other sizes or another dtype): the application took a rank-dependent path; the job hangs or fails there, not in the fabric. The ranks outside the largest agreeing set are blamed (every side on a tie); a rank that left no dump after it is a knock-on",
        next: "fix the application where the blamed ranks issue their call (a rank-dependent branch, an uneven last batch, a dtype cast); rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL to have PyTorch check each collective",
    },
    Cause {
        id: "fr_p2p_mismatch",
        class: Class::Application,
        severity: Severity::Fail,
        rank: Rank::Derived,
        read: Read::Derived,
        seen: Seen::Derived("flight-recorder dumps: a pending send or recv whose peer has no matching op pending"),
        codes: &[],
        explains: NONE,
        about: "flight recorder: a pending send/recv whose peer is not pending the matching op (and is not busy elsewhere)",
        meaning: "a rank's pending P2P op (send or recv) has no matching op at the other end: the peer it names is idle, done, or facing the same way; the pipeline's send/recv order differs between ranks. Ranks whose op waits on a peer busy elsewhere are knock-ons",
        next: "fix the application's send/recv pairing on the blamed ranks (each send needs the peer's recv at the same point)",
    },
    Cause {
        id: "fr_rank_not_entered",
        class: Class::Application,
        severity: Severity::Fail,
        rank: Rank::Derived,
        read: Read::Derived,
        seen: Seen::Derived("flight-recorder dumps: members behind the sequence number the others wait in"),
        codes: &[],
        explains: NONE,
        about: "flight recorder: members that never entered the collective the others wait in, with where they were last seen",
        meaning: "the blamed ranks never entered the sequence number of the process group that the other members entered and wait in (none of it completed); the dump says where each was last seen: the application on that rank stalled or took another path, not the fabric. The waiting ranks are knock-ons",
        next: "on the blamed ranks: their stacks (py-spy dump --pid PID) and their logs around the last call the dump shows",
    },
    Cause {
        id: "fr_rank_no_dump",
        class: Class::Environment,
        severity: Severity::Fail,
        rank: Rank::Derived,
        read: Read::Derived,
        seen: Seen::Derived("flight-recorder dumps: a member of the group has none among the inputs while the others wait"),
        codes: &[],
        explains: NONE,
        about: "flight recorder: members with no dump while the others wait (died or killed); what the NCCL log says of them is joined",
        meaning: "a member of the process group left no dump while the others wait in a collective: a dump is written by a live process, so it died or was killed (the OOM killer, the scheduler, a crash), or its dump was not collected",
        next: "on the blamed rank's host: why the process ended (dmesg for the OOM killer, the scheduler's log, the rank's stderr); collect its dump if one exists",
    },
    Cause {
        id: "fr_all_entered_none_completed",
        class: Class::Hardware,
        severity: Severity::Fail,
        rank: Rank::Derived,
        read: Read::Derived,
        seen: Seen::Derived("flight-recorder dumps: every member entered the same collective and none completed it"),
        codes: &[],
        explains: NONE,
        about: "flight recorder: every member entered, none completed, on a backend that tracks completion (NCCL): the fabric or NCCL",
        meaning: "every member of the process group entered the same collective with the same call and none completed it, on ranks whose recorder tracks completion (NCCL; Gloo does not): the application did its part; the fabric or NCCL under it did not deliver",
        next: "`fabprobe ring` across exactly the hosts of those ranks (the verdict's step is pasteable when the NCCL logs name the hosts), then `fabprobe links` on the hosts it names",
    },
    Cause {
        id: "fr_buffer_wrapped",
        class: Class::Configuration,
        severity: Severity::Unknown,
        rank: Rank::Derived,
        read: Read::Derived,
        seen: Seen::Derived("flight-recorder dumps: a rank's oldest kept record is newer than the group's wait"),
        codes: &[],
        explains: NONE,
        about: "flight recorder: a rank's buffer wrapped before the wait: whether it entered is not in the records (unknown)",
        meaning: "a rank's ring buffer wrapped (its oldest kept record is not its first) and no longer reaches the process group's wait: whether it entered is not in the records, so it is said, not judged",
        next: "rerun with a larger TORCH_FR_BUFFER_SIZE (entries per rank) so the dumps reach back to the wait; the NCCL log's watchdog lines say which ranks timed out",
    },
];

/// A cause's meaning that depends on a field of its line: (cause, variant, meaning, next).
pub static VARIANTS: &[(&str, &str, &str, &str)] = &[
    (
        "socket_connect_failed",
        "refused",
        "a TCP connection to a peer was refused (errno 111): nothing listened on that address and port; the peer process had exited or not started, or the address is wrong (another interface, a stale MASTER_ADDR)",
        "the log of the process on {peer} for its first error; on {hosts}: `fabprobe nccl-env` (the socket interface and its address)",
    ),
    (
        "socket_connect_failed",
        "timeout",
        "a TCP connection to a peer timed out (errno 110): packets to that address are dropped (firewall, security group, or an interface that only one host can reach)",
        "on {hosts}: `fabprobe nccl-env` (NCCL_SOCKET_IFNAME); check the firewall between them for the address printed",
    ),
    (
        "socket_connect_failed",
        "noroute",
        "no route to the peer's address (errno 113/101): NCCL picked an interface or address the other host cannot reach",
        "on {hosts}: `fabprobe nccl-env`; set NCCL_SOCKET_IFNAME to the interface both hosts share",
    ),
    (
        "socket_iface_virtual",
        "overlay",
        "NCCL bootstrapped or connected over a Kubernetes overlay or pod gateway interface: other nodes reach it through encapsulation, slower than the host's own network",
        "on {host}: `fabprobe nccl-env` (the interface NCCL picks); set NCCL_SOCKET_IFNAME to the host's own interface if the overlay is not meant to carry NCCL's traffic",
    ),
];

/// The entry of a cause id: by an index, since building the report asks it of each of up
/// to 50 000 sightings a few times, and a walk of the registry comparing ids was a tenth of
/// the time of a 300 MB failure-dense log.
pub fn get(id: &str) -> Option<&'static Cause> {
    type Index = std::collections::HashMap<
        &'static str,
        &'static Cause,
        std::hash::BuildHasherDefault<super::FxHasher>,
    >;
    static INDEX: std::sync::LazyLock<Index> = std::sync::LazyLock::new(|| {
        let mut ix = Index::default();
        // The first entry of an id, as a walk in order finds it.
        for c in CAUSES.iter().rev() {
            ix.insert(c.id, c);
        }
        ix
    });
    INDEX.get(id).copied()
}

/// The entry of an id the code gives (a missing one is a bug the registry tests catch;
/// here it reads as the unclassified entry rather than panicking on a log).
pub(crate) fn of(id: &str) -> &'static Cause {
    get(id)
        .or_else(|| get("unclassified_failure"))
        .unwrap_or(&CAUSES[0])
}

/// The meaning and next step of a cause, or of its variant when the registry has one.
pub(crate) fn explain(id: &str, variant: Option<&str>) -> (&'static str, &'static str) {
    let v = VARIANTS
        .iter()
        .find(|(c, w, _, _)| *c == id && Some(*w) == variant);
    match (v, get(id)) {
        (Some((_, _, m, n)), _) => (m, n),
        (None, Some(c)) => (c.meaning, c.next),
        (None, None) => ("", ""),
    }
}

impl Cause {
    /// The message has one of this cause's keyword sets, by the keyword test `has`.
    pub fn matches(&self, has: &impl Fn(&str) -> bool) -> bool {
        match self.seen {
            Seen::Texts(sets) => sets.iter().any(|set| set.iter().all(|k| has(k))),
            Seen::Derived(_) => false,
        }
    }

    /// A message whose texts match is read by the WARN rules (not INFO, PyTorch or the
    /// fallback).
    pub(crate) fn warn_rule(&self) -> bool {
        !matches!(
            self.read,
            Read::Info | Read::Plain | Read::Unmatched | Read::Derived
        )
    }
}

/// The cause a return code's words name, generically, and the code (`unhandled system
/// error`, `ncclSystemError`): the first entry, in registry order, with one of them in `s`.
pub(crate) fn code_in(s: &str, has: impl Fn(&str, &str) -> bool) -> Option<(&'static Cause, u8)> {
    CAUSES
        .iter()
        .find_map(|c| c.codes.iter().find(|(w, _)| has(s, w)).map(|(_, n)| (c, *n)))
}

/// Every keyword of every WARN rule: the fast path's random messages are made of them.
#[cfg(test)]
pub(crate) fn keywords() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for c in CAUSES.iter().filter(|c| c.warn_rule()) {
        if let Seen::Texts(sets) = c.seen {
            for k in sets.iter().flat_map(|s| s.iter()) {
                if !out.contains(k) {
                    out.push(k);
                }
            }
        }
    }
    out
}

/// The man page's and `--help`'s list: each id, its severity and class, and what it is, a
/// row each, in registry order.
pub(crate) fn help_list() -> String {
    let mut out = String::new();
    for c in CAUSES {
        // Two spaces before the description: the man page keeps it as a table row.
        out.push_str(&format!(
            "    {:<26}  {} ({}): {}\n",
            c.id,
            c.severity.as_str(),
            c.class.as_str(),
            c.about
        ));
    }
    out
}

/// docs/probes.md's table of causes (between its markers; a test keeps it current).
pub fn doc_table() -> String {
    let mut out =
        String::from("| cause | severity | class | what the log shows | explains |\n|---|---|---|---|---|\n");
    for c in CAUSES {
        let shows = match c.seen {
            Seen::Texts(sets) => sets
                .iter()
                .map(|s| {
                    s.iter()
                        .map(|k| format!("`{}`", k.trim().replace('|', "\\|")))
                        .collect::<Vec<_>>()
                        .join(" + ")
                })
                .collect::<Vec<_>>()
                .join(", "),
            Seen::Derived(d) => d.to_string(),
        };
        out.push_str(&format!(
            "| `{}` | {} | {} | {}: {} | {} |\n",
            c.id,
            c.severity.as_str(),
            c.class.as_str(),
            c.about,
            shows,
            c.explains.causes.join(", ")
        ));
    }
    out
}
