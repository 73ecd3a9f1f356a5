//! The coordinator of the TCP rendezvous: rank 0 (hosted by rank 0) gathers every rank's hello, hands
//! out the full table, then keeps one control connection per rank open for the whole run
//! (readiness, heartbeats, stuck reports, results, the final verdict). Anything on the port
//! that is not a fabprobe rank of this job is rejected and recorded as an [`Event`], never
//! trusted. Every wait has a deadline.

use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::ring::control::{Happening, Plane};
use crate::ring::diagnosis::driver::{ScanReport, Step};
use crate::ring::gate::{self, Incoming};
use crate::ring::interrupt::Interrupt;
use crate::ring::lag::{self, Stall};
use crate::ring::model::{CounterMove, LinkFault, LinkSample, Rank, RankInfo, Verdict, WaitReport};
use crate::ring::orders::RingOrder;
pub use crate::ring::relay::RailLink;
use crate::ring::rendezvous::{BootstrapError, HEARTBEAT};
pub use crate::ring::tcpinfo::AckState;
use crate::ring::wire::{RankResults, RowResult};
use crate::text::printable;

mod finish;
mod join;
mod judge;
mod messages;
mod reject;
mod serve;
#[cfg(test)]
pub(crate) mod tests;

pub use crate::ring::model::check_rails;
pub use crate::ring::wire::SENT_VERDICTS;
use join::gather;
pub use join::{
    HOLDER_CHECK, MAX_CAPABILITIES, MAX_CAPABILITY_CHARS, NodeDoor, check_capabilities, check_fd_limit,
    files_needed, gather_deadline, node_door, validate,
};
pub use judge::stuck_line;
use reject::drain_rejections;
pub(crate) use reject::{door_reason, refuse_tcp};
use serve::Serve;
pub use serve::{LoopStats, unacked_since};

/// Rejected connections listed one by one in the report; the rest are counted.
pub(crate) const MAX_REJECTED_EVENTS: usize = 32;
/// How much of a rejection's reason is kept (it may quote what the peer sent).
const MAX_REASON_CHARS: usize = 240;
/// How often the silence and TCP_INFO checks run, and the judge while some rank could be
/// judged (a silence or a standstill past its deadline, a wait, a failure); besides right
/// after a failure report. Each costs O(ranks concerned), not O(world).
pub(crate) const JUDGE_EVERY: Duration = Duration::from_millis(100);
/// How often the judge runs while no rank is near a deadline (its cost is O(world): 16,384
/// ranks every 100 ms were most of the loop's time). A judge that reads state of its own
/// (a rail stopped by another) hears it within this.
pub(crate) const JUDGE_IDLE: Duration = Duration::from_secs(1);

/// Something the coordinator saw that the user should know about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    Rejected {
        peer: String,
        reason: String,
    },
    Joined {
        rank: Rank,
        peer: String,
        host: String,
    },
    /// A rank's earlier control connection had closed before the run started; its new
    /// connection took the slot.
    Replaced {
        rank: Rank,
        peer: String,
        old_peer: String,
    },
    /// Rejections beyond the first [`MAX_REJECTED_EVENTS`], counted, not listed.
    MoreRejected {
        count: u64,
    },
}

impl Event {
    /// One line for stderr; every part a peer chose is made printable.
    pub fn line(&self) -> String {
        let p = |s: &str| printable(s, MAX_REASON_CHARS);
        match self {
            Event::Rejected { peer, reason } => {
                format!("coordinator: rejected connection from {}: {}", p(peer), p(reason))
            }
            Event::Joined { rank, peer, host } => {
                format!("coordinator: rank {rank} ({}) joined from {}", p(host), p(peer))
            }
            Event::Replaced { rank, peer, old_peer } => format!(
                "coordinator: rank {rank} joined again from {}; its earlier connection from {} had closed",
                p(peer),
                p(old_peer)
            ),
            Event::MoreRejected { count } => {
                format!("coordinator: {count} more rejected connections (not listed)")
            }
        }
    }
}

// ---------------------------------------------------------------- coordinator

pub struct CoordinatorConfig {
    pub world: u32,
    pub token: String,
    pub timeout: Duration,
    /// How long ranks may take to join (`--join-timeout`): launchers start ranks seconds
    /// apart on big jobs, so the join window is not the data plane's `timeout`.
    pub join_timeout: Duration,
    /// For messages: the address ranks were told to use.
    pub advertised: String,
    /// Rank 0's run options; every hello must carry the same.
    pub params: String,
    /// Turns what the coordinator saw into verdicts: the watchdog and localization plug in
    /// here. See [`Judge`].
    pub judge: Option<Judge>,
    /// Run the link scan after every rank's links are up (before the sweep): makes the
    /// scan's driver for the world size.
    pub scan: Option<ScanFn>,
    /// Called once per size when every rank has finished it (the table, and every rank's
    /// row in rank order), so the rows can be shown as they complete.
    pub on_row: Option<RowSink>,
    /// The sweep's rings for the world size (which peers each rank is sent); None: the
    /// natural ring ([`orders::sweep_rings`]). Rails give one ring per rail.
    pub rings: Option<RingsFn>,
    /// With `--rails`, a rail's ring of some of the nodes: ring rank i is the job's node
    /// rank `nodes[i]`, the rank every message names (the table carries it to the ranks as
    /// [`RankInfo::node`]). Empty: each rank is named as itself.
    pub nodes: Vec<Rank>,
    /// With `--rails`: the ring ranks whose nodes never declared their rails to rank 0
    /// within the join window (the roster's `silent`). Every other rank has the whole join
    /// window; once they all joined, these are awaited only until `silent_wait` after the
    /// coordinator's start (see [`gather_deadline`]), and the abort says they never declared.
    pub silent: BTreeSet<Rank>,
    pub silent_wait: Duration,
    /// With `--rails` on rank 0: the other nodes' ranks of this rail reach this coordinator
    /// through the hub, which holds each node's one connection ([`crate::ring::relay`]);
    /// TCP_INFO is read from the node's own connection. None: ranks connect directly.
    pub relay: Option<RailLink>,
    /// This process's SIGTERM/SIGINT ([`crate::ring::interrupt::process`]); None in tests
    /// that do not interrupt.
    pub interrupt: Option<Arc<Interrupt>>,
}

impl CoordinatorConfig {
    /// Ring rank `r` as people are told it (see [`CoordinatorConfig::nodes`]).
    pub(crate) fn node_of(&self, r: Rank) -> Rank {
        self.nodes.get(r as usize).copied().unwrap_or(r)
    }

    /// The rank a claim of ring rank `r` is named by: the job's node rank on a rail's ring
    /// of some of the nodes; a ring rank no node has is said to be one.
    fn claimed(&self, r: Rank) -> String {
        match self.nodes.get(r as usize) {
            Some(n) => format!("rank {n}"),
            None if self.nodes.is_empty() => format!("rank {r}"),
            None => format!("ring rank {r}"),
        }
    }
}

/// See [`CoordinatorConfig::rings`].
pub(crate) type RingsFn = Arc<dyn Fn(u32) -> Vec<RingOrder> + Send + Sync>;
/// Makes the scan's driver for a world of n ranks.
pub(crate) type ScanFn = Arc<dyn Fn(usize) -> Box<dyn ScanDriver> + Send + Sync>;

/// See [`CoordinatorConfig::on_row`].
pub(crate) type RowSink = Arc<dyn Fn(&[RankInfo], Vec<RowResult>) + Send + Sync>;

/// The coordinator's side of the link scan (`diagnosis::driver::Driver`): which order runs
/// next after each rank's samples, and the scan's report at the end.
pub trait ScanDriver: Send {
    fn start(&mut self, now: Instant) -> Step;
    fn on_samples(
        &mut self,
        rank: Rank,
        index: u32,
        samples: Vec<LinkSample>,
        line_rate_gbs: Option<f64>,
        ranks: &[RankInfo],
        now: Instant,
    ) -> Step;
    /// What `rank`'s data port carried in order `index` (before its samples of it); a
    /// driver that does not judge contention ignores it.
    fn on_traffic(&mut self, _rank: Rank, _index: u32, _traffic: crate::ring::model::PortTraffic) {}
    fn report(&self, ranks: &[RankInfo]) -> ScanReport;
}

/// Called with the coordinator's view and the run clock (ms since the table went out):
/// during the run every [`JUDGE_EVERY`] and right after a failure report (stuck, failed,
/// closed), with `final_call` false (a non-empty answer ends the run at once, as a hang
/// verdict should), and once at the end with `final_call` true (link-scan verdicts) before
/// the last message goes out. Not per message: its cost may grow with the world size.
pub(crate) type Judge = Arc<dyn Fn(&CoordinatorReport, u64, bool) -> Vec<Verdict> + Send + Sync>;

/// What the coordinator hands back when the run is over (or failed).
#[derive(Debug, Default)]
pub struct CoordinatorReport {
    pub ranks: Vec<RankInfo>,
    pub results: Vec<RankResults>,
    pub events: Vec<Event>,
    /// Why the run ended early, if it did.
    pub abort: Option<String>,
    /// The run was interrupted (SIGTERM, SIGINT): where, in words (also in `abort` unless a
    /// failure came first).
    pub interrupted: Option<String>,
    /// The ranks that said they were interrupted: their data links closing after it blames
    /// no link.
    pub interrupted_ranks: BTreeSet<Rank>,
    /// The coordinator's own failure (its open-file or thread limit, a frame over its
    /// limit): the run could not be judged, and no rank is to blame.
    pub coordinator_error: Option<String>,
    /// Reports of ranks whose data waits passed the deadline.
    pub stuck: Vec<WaitReport>,
    /// Ranks whose own run failed, with their error.
    pub failed: Vec<(Rank, String)>,
    /// Ranks whose control connection closed or went silent before the end.
    pub lost: Vec<Rank>,
    /// The last heartbeat of every rank (what each was doing when the run ended).
    pub last_heartbeat: BTreeMap<Rank, WaitReport>,
    /// The heartbeat before the last one, to tell "alive but not progressing" (the
    /// `progress` counter did not move) from "working".
    pub previous_heartbeat: BTreeMap<Rank, WaitReport>,
    /// Milliseconds since the table went out when the coordinator last heard from each rank.
    pub last_heard_ms: BTreeMap<Rank, u64>,
    /// The latest status message (heartbeat or stuck report) of each rank and its arrival
    /// time on the run clock.
    pub reports: BTreeMap<Rank, (u64, WaitReport)>,
    /// Heartbeat progress counters `(arrival_ms, progress)`, oldest first, trimmed to the
    /// last `timeout` + 10 s.
    pub progress: BTreeMap<Rank, Vec<(u64, u64)>>,
    /// Control connections that closed: when, and whether it was a reset (RST, EPIPE,
    /// ETIMEDOUT) rather than an orderly close.
    pub closed: BTreeMap<Rank, (u64, bool)>,
    /// How long the run phase lasted (table to end), in milliseconds.
    pub run_ms: u64,
    /// When (run clock) every rank's whole table had gone out: a rank never heard from is
    /// silent since then, not since the first table was queued.
    pub tables_out_ms: u64,
    pub verdicts: Vec<Verdict>,
    pub bootstrap_us: u64,
    /// The link scan's figures and verdicts, when it ran to the end.
    pub scan: Option<ScanReport>,
    /// Ranks whose results arrived, with the arrival time on the run clock.
    pub finished_ms: BTreeMap<Rank, u64>,
    /// The evidence counters of each rank's data NIC that moved during the run, from its
    /// results or its stuck report (the latest).
    pub port_counters: BTreeMap<Rank, Vec<CounterMove>>,
    /// Completion errors on data links (RDMA), as the ranks reported them, in arrival order.
    pub link_faults: Vec<LinkFault>,
    /// Where each rank's control connection comes from (`198.18.0.11:40312`).
    pub control_peers: BTreeMap<Rank, String>,
    /// Ranks whose host has not acknowledged data sent on their control connection since
    /// this time on the run clock (TCP_INFO: unacknowledged data, retransmissions): the host
    /// is down or cut off, not merely a stopped process.
    pub unacked_since_ms: BTreeMap<Rank, u64>,
    /// Rejections listed in `events`, and those beyond [`MAX_REJECTED_EVENTS`] (counted).
    pub rejected_listed: usize,
    pub rejected_unlisted: u64,
    pub stats: LoopStats,
    /// Each rank's longest stretch of sweep heartbeats spent waiting for a CPU (issue 45):
    /// what a starved host can explain of the sweep's stalls without a scan.
    pub sweep_cpu: BTreeMap<Rank, crate::ring::diagnosis::stall::Starved>,
    /// Would-be verdicts of the sweep that a starved host could explain, in a run with no
    /// scan to list them (`data.not_judged`): unknown, not verdicts.
    pub not_judged: Vec<Verdict>,
    /// The longest stall of the coordinator's own loop, past [`lag::threshold`] of the
    /// silence deadline (its process stopped or starved), if there was one.
    pub own_stall: Option<Stall>,
}

impl CoordinatorReport {
    /// Ranks whose process is gone before the end: their control connection closed before
    /// their results came, or they said they were interrupted.
    pub(crate) fn gone_ranks(&self) -> BTreeSet<Rank> {
        let closed = self.closed.keys().filter(|r| !self.finished_ms.contains_key(r));
        closed.chain(&self.interrupted_ranks).copied().collect()
    }

    /// Record a refused connection or message: printable, capped.
    pub fn reject(&mut self, peer: &str, reason: &str) {
        if self.rejected_listed < MAX_REJECTED_EVENTS {
            self.rejected_listed += 1;
            self.events.push(Event::Rejected {
                peer: printable(peer, MAX_REASON_CHARS),
                reason: printable(reason, MAX_REASON_CHARS),
            });
        } else {
            self.rejected_unlisted += 1;
        }
    }

    /// The count of unlisted rejections as the last event (once, at the end).
    pub(crate) fn close_events(&mut self) {
        if self.rejected_unlisted > 0 {
            self.events.push(Event::MoreRejected {
                count: self.rejected_unlisted,
            });
        }
    }
}
/// The coordinator's own limits (tests shorten them).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub door: gate::Limits,
    /// How long a rank's queued control messages may wait with no byte taken before the
    /// rank is named as not reading; None: its silence deadline (`silence(timeout)`).
    pub write_stall: Option<Duration>,
    /// How often every rank is pinged.
    pub ping_every: Duration,
    /// How often a rank that is talking (heard within the last second) is pinged: it only
    /// needs to hear from the coordinator well within its own silence deadline. None: a
    /// quarter of that deadline (`silence(timeout)`), in whole `ping_every` cycles.
    pub talking_ping_every: Option<Duration>,
    /// The kernel's send buffer of each control connection (None: the kernel's own); tests
    /// make it small to show a rank that stops reading without megabytes of pings.
    pub sndbuf: Option<usize>,
    /// The event list of one poll (None: every connection's, see [`Plane::new`]); tests make
    /// it short, as a loop that hears its ready connections over several polls.
    pub events: Option<usize>,
    /// Tests only (None in every run): after each read, the loop stalls for what this says
    /// before it handles what it read, as a coordinator on a loaded machine that gets no
    /// CPU for a while.
    pub loop_stall: Option<fn(&[Happening]) -> Duration>,
    /// Tests only (None: the loop thread's schedstat): the CPU times the lag clock reads.
    pub cpu_reader: Option<lag::CpuReader>,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            door: gate::Limits::default(),
            write_stall: None,
            ping_every: HEARTBEAT,
            talking_ping_every: None,
            sndbuf: None,
            events: None,
            loop_stall: None,
            cpu_reader: None,
        }
    }
}

/// Run the coordinator on `listener` until the run ends; returns what happened. Never panics
/// on what peers send.
pub fn coordinate(listener: TcpListener, cfg: CoordinatorConfig) -> CoordinatorReport {
    coordinate_with(listener, cfg, Limits::default())
}

/// [`coordinate`] with the door's and the queues' limits given (tests shorten them).
pub(crate) fn coordinate_with(listener: TcpListener, cfg: CoordinatorConfig, limits: Limits) -> CoordinatorReport {
    let start = Instant::now();
    let mut rep = CoordinatorReport::default();
    let (mut plane, door) = match open_loop(&cfg, &limits) {
        Ok(x) => x,
        Err(e) => {
            own_error(&mut rep, e);
            return rep;
        }
    };
    if let Some(link) = &cfg.relay {
        plane.relay_through(link.clone());
    }
    let stop = Arc::new(AtomicBool::new(false));
    let gathering = Arc::new(AtomicBool::new(true));
    let (tx, rx) = mpsc::channel::<Incoming>();
    {
        let (stop, gathering, wake) = (stop.clone(), gathering.clone(), plane.waker());
        thread::spawn(move || gate::run(listener, tx, Some(wake), stop, gathering, door));
    }
    let seen = gather(
        &cfg,
        &mut rep,
        (&mut plane, BTreeMap::new()),
        &rx,
        start,
        limits.sndbuf,
    );
    rep.ranks = seen.values().cloned().collect();
    rep.stats.joined = Some(start.elapsed());
    let mut run = Serve::new(&cfg, plane, &rep, limits, start);
    if (seen.len() as u32) < cfg.world {
        run.join_failed(&mut rep, &seen);
        stop.store(true, Ordering::Relaxed);
        drain_rejections(&cfg, &rx, &mut rep, &mut run.plane);
        run.drain_out(Instant::now() + Duration::from_secs(2));
        rep.stats.plane = run.plane.stats;
        rep.close_events();
        return rep;
    }
    if let Err(e) = run.send_tables(&mut rep) {
        run.tables_failed(&mut rep, e);
        stop.store(true, Ordering::Relaxed);
        run.drain_out(Instant::now() + Duration::from_secs(2));
        rep.close_events();
        return rep;
    }
    gathering.store(false, Ordering::Relaxed);
    rep.bootstrap_us = start.elapsed().as_micros() as u64;
    run.serve(&mut rep, &rx);
    stop.store(true, Ordering::Relaxed);
    rep.stats.plane = run.plane.stats;
    rep.close_events();
    rep
}

/// The coordinator's own failure (its open-file limit, its event loop, a frame over its
/// limit): the run ends, and no rank is to blame.
fn own_error(rep: &mut CoordinatorReport, e: String) {
    rep.abort = Some(e.clone());
    rep.coordinator_error = Some(e);
}

/// The event loop for `cfg.world` ranks, and the door's limits beside it. An error is the
/// coordinator's own (its open-file limit, its event loop).
fn open_loop(cfg: &CoordinatorConfig, limits: &Limits) -> Result<(Plane, gate::Limits), String> {
    let nofile = gate::raise_fd_limit();
    check_fd_limit(cfg.world, nofile)?;
    let plane = match limits.events {
        Some(k) => Plane::with_events(cfg.world, k),
        None => Plane::new(cfg.world),
    }
    .map_err(|e| format!("coordinator: cannot start its event loop: {e}"))?;
    // Leave room for one descriptor per rank; strangers get what is left, at most the cap.
    let door = gate::Limits {
        max_pending: limits
            .door
            .max_pending
            .min((nofile.saturating_sub(files_needed(cfg.world)) as usize).max(16)),
        ..limits.door
    };
    Ok((plane, door))
}
