//! The ring's one entry below the CLI (issue 46): [`run`] takes what the CLI decided from
//! its flags ([`Launch`]) and returns this process's outcome, for every shape of run: one
//! rank of a job across hosts, one rail or `--rails` ([`railnode`]), or `--local` ranks as
//! threads of this process ([`local`]). Given who this rank is (the CLI reads the flags
//! and the launcher's environment), it picks the data interface by NCCL_SOCKET_IFNAME
//! rules and the data plane ([`fabric`]: tcp, or the RDMA port NCCL would use), hosts rank
//! 0's door, and hands the run to [`crate::ring::run`] / [`crate::ring::rails`]. It prints nothing and
//! never exits: progress lines, the live status and rows as they complete go through the
//! CLI's [`Watch`]; the report comes back in the outcome, and [`findings`] turns its
//! verdicts into findings. The top room of the ring: it names every room below it.

mod fabric;
mod findings;
mod local;
mod railnode;

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::host::Host;
use crate::nccl::settings::NcclSettings;
use crate::ring::launcher::Identity;
use crate::ring::model::{LiveStatus, Rank};
use crate::ring::rails::RailSel;
use crate::ring::run::{self, Failure, Options, RankOutcome};

/// `--transport`: the data plane a rank asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// TCP sockets on the data interface.
    Tcp,
    /// ibverbs RC QPs on the port NCCL would use.
    Rdma,
    /// rdma where every rank has a usable RDMA port, else tcp.
    Auto,
}

impl Transport {
    fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Rdma => "rdma",
            Transport::Auto => "auto",
        }
    }
}

/// Where the data plane runs: the flags that choose interface, port and transport.
#[derive(Debug, Clone)]
pub(crate) struct Net {
    pub transport: Transport,
    /// `--ifname` (NCCL_SOCKET_IFNAME syntax); None: the job's NCCL_SOCKET_IFNAME, else
    /// NCCL's default order (under `--local`: loopback).
    pub ifname: Option<String>,
    /// `--device` (`mlx5_0`, `mlx5_0:1`, or one per rail).
    pub device: Option<String>,
    /// `--gid-index`.
    pub gid_index: Option<u32>,
    /// `--lldp-wait`: how long to listen for the switch's LLDP before joining.
    pub lldp_wait_s: f64,
}

/// The job's environment as NCCL sees it: the live host with `--env-from`/`--env-file`
/// applied, and NCCL's settings read from it (the CLI builds both, once).
pub(crate) struct JobEnv {
    pub host: Host,
    pub nccl: NcclSettings,
}

/// Which ranks this process runs.
pub(crate) enum Ranks {
    /// One rank of a job across hosts: who it is (from the flags, else the launcher's
    /// environment: [`crate::ring::launcher::resolve`]) and the job's environment.
    Job { id: Identity, env: Box<JobEnv> },
    /// `--local N`: N ranks as threads of this process over loopback; `token` is `--token`.
    Local { count: u32, token: Option<String> },
}

/// One run as the CLI asked for it.
pub(crate) struct Launch {
    pub opts: Options,
    pub net: Net,
    /// `--rails` (`RailSel::One` without it).
    pub rails: RailSel,
    pub ranks: Ranks,
}

/// The CLI's side of a run: where progress lines, the live status and streamed rows go.
/// Called from the ranks' threads.
pub(crate) trait Watch: Sync {
    /// A line for stderr: level 0 always, 1 with -v, 2 with -vv.
    fn log(&self, level: u8, line: &str);
    /// The run starts: the live status a progress line follows (None: no progress line).
    fn live(&self, opts: &Options) -> Option<Arc<LiveStatus>>;
    /// Rank 0's sink for the table's rows as each size completes (None: the report carries
    /// them at the end); `note` says why `--transport auto` runs tcp on rank 0.
    fn rows(&self, id: &Identity, opts: &Options, note: Option<String>) -> Option<run::ShowRow>;
    /// The ranks are done: the progress line stops.
    fn ended(&self);
}

/// What kept the run from starting (before any rank ran).
#[derive(Debug, thiserror::Error)]
pub(crate) enum LaunchError {
    /// The flags, or this host's interfaces and ports, leave nothing to run on.
    #[error("{0}")]
    Usage(String),
    /// The data plane the flags ask for cannot run here.
    #[error("{0}")]
    Cannot(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// This process's outcome: rank 0's report, another rank's word, or why its rank failed.
pub(crate) type RankResult = Result<RankOutcome, run::RunError>;

/// Run this process's part of the ring the CLI asked for.
pub(crate) fn run(launch: Launch, watch: &dyn Watch) -> Result<RankResult, LaunchError> {
    let Launch {
        opts,
        net,
        rails,
        ranks,
    } = launch;
    let r = match ranks {
        Ranks::Local { count, token } => {
            let cx = Ctx {
                net: &net,
                watch,
                job: None,
            };
            match rails {
                RailSel::One => local::run_local(&cx, count, &opts, token.as_deref()),
                sel => local::run_local_rails(&cx, count, &sel, &opts, token.as_deref()),
            }
        }
        Ranks::Job { id, env } => {
            let cx = Ctx {
                net: &net,
                watch,
                job: Some(&*env),
            };
            run_job(&cx, id, &rails, &opts)
        }
    };
    // A region the NIC would not deregister was leaked, not freed (`verbs::Mr`): it stays
    // pinned until the process exits, a driver fault the run should not keep quiet.
    #[cfg(feature = "rdma")]
    for line in crate::verbs::leaked_regions() {
        watch.log(0, &format!("rdma: {line}"));
    }
    r
}

/// One rank of a job across hosts: its one rail, or its rails, on one path ([`railnode`]).
fn run_job(cx: &Ctx, id: Identity, rails: &RailSel, opts: &Options) -> Result<RankResult, LaunchError> {
    let nccl = cx.nccl();
    let spec = cx.net.ifname.clone().or_else(|| {
        nccl.and_then(|n| n.value("NCCL_SOCKET_IFNAME"))
            .map(str::to_string)
    });
    railnode::run_rails(cx, rails, spec.as_deref(), opts, id)
}

/// What every step of a launch reads: the flags for the data plane, the CLI's watch, and
/// the job's environment (None under `--local`).
struct Ctx<'a> {
    net: &'a Net,
    watch: &'a dyn Watch,
    job: Option<&'a JobEnv>,
}

impl Ctx<'_> {
    fn log(&self, level: u8, msg: impl AsRef<str>) {
        self.watch.log(level, msg.as_ref());
    }

    fn nccl(&self) -> Option<&NcclSettings> {
        self.job.map(|j| &j.nccl)
    }
}

fn hostname() -> String {
    hostname::get()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "?".into())
}

/// Node `rank`'s declaration on rank 0's door failed: refused is this node's to mend (exit
/// 2), anything else a fault of the job.
fn declare_failed(rank: Rank, e: crate::ring::rendezvous::BootstrapError) -> run::RunError {
    run::RunError {
        kind: match e {
            crate::ring::rendezvous::BootstrapError::Rejected { .. } => Failure::CannotRun,
            _ => Failure::Fault,
        },
        message: run::own_bootstrap_error(rank, &e),
    }
}

/// This process caught SIGTERM/SIGINT (the CLI catches them).
pub(crate) fn interrupted() -> bool {
    crate::ring::interrupt::process().caught().is_some()
}

/// The job's verdict for every node's exit status: failed, and why (bounded). Pure.
fn job_verdict(r: &Result<RankOutcome, run::RunError>) -> (bool, Option<String>) {
    match r {
        Ok(RankOutcome {
            report: Some(rep), ..
        }) => {
            // Every verdict, a missing rail's too, is the job's: each node exits with it, so a
            // launcher that reads any node's status sees the job failed.
            let failed = rep.error.is_some() || rep.wrong_total() > 0 || !rep.verdicts.is_empty();
            let why = if !rep.verdicts.is_empty() {
                Some(run::failed_why(&rep.verdicts, 0))
            } else {
                rep.error.clone().map(|e| format!("rank 0: {e}"))
            };
            (failed, why.filter(|_| failed))
        }
        Ok(o) => (o.failed, o.why.clone()),
        Err(e) => (true, Some(format!("rank 0: {}", e.message))),
    }
}

/// The ring ranks of a rail's ring (`nodes`, node ranks in ring order) whose nodes are in
/// `silent` (never declared their rails). Pure.
fn silent_ring_ranks(nodes: &[Rank], silent: &[Rank]) -> BTreeSet<Rank> {
    (0..nodes.len() as Rank)
        .filter(|&i| silent.contains(&nodes[i as usize]))
        .collect()
}
