//! The coordinator of the TCP rendezvous: rank 0 (hosted by rank 0) gathers every rank's hello, hands
//! out the full table, then keeps one control connection per rank open for the whole run
//! (readiness, heartbeats, stuck reports, results, the final verdict). Anything on the port
//! that is not a fabprobe rank of this job is rejected and recorded as an [`Event`], never
//! trusted. Every wait has a deadline.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::ring::control::{Frame, Happening, Plane, PlaneStats, QueueError, frame};
use crate::ring::diagnosis::driver::{ScanReport, Step};
use crate::ring::diagnosis::evidence;
use crate::ring::diagnosis::watchdog::local_work_allowance_ms;
use crate::ring::gate::{self, BUSY, Incoming};
use crate::ring::interrupt::Interrupt;
use crate::ring::lag::{self, LagClock, Stall};
use crate::ring::model::{
    CounterMove, LinkFault, LinkSample, Rank, RankInfo, Verdict, VerdictKind, WaitReport, bounded_reason, printable,
    shown,
};
use crate::ring::orders::{self, RingOrder};
use crate::ring::rendezvous::{BootstrapError, FAILURE_GRACE, HEARTBEAT, list, silence};
use crate::ring::tcpinfo;
pub use crate::ring::tcpinfo::AckState;
use crate::ring::wire::{self, Hello, Msg, RankResults, RowResult, WireError};

/// Rejected connections listed one by one in the report; the rest are counted.
pub const MAX_REJECTED_EVENTS: usize = 32;
/// How much of a rejection's reason is kept (it may quote what the peer sent).
const MAX_REASON_CHARS: usize = 240;
/// How often the silence and TCP_INFO checks run, and the judge while some rank could be
/// judged (a silence or a standstill past its deadline, a wait, a failure); besides right
/// after a failure report. Each costs O(ranks concerned), not O(world).
pub const JUDGE_EVERY: Duration = Duration::from_millis(100);
/// How often the judge runs while no rank is near a deadline (its cost is O(world): 16,384
/// ranks every 100 ms were most of the loop's time). A judge that reads state of its own
/// (a rail stopped by another) hears it within this.
pub const JUDGE_IDLE: Duration = Duration::from_secs(1);
/// Pings go out in slices at least this far apart (see `Serve::ping_slice`).
const PING_SLICE: Duration = Duration::from_millis(10);
/// A rank silent this long has its control socket's TCP_INFO read (is its host answering?).
const PROBE_AFTER: Duration = Duration::from_millis(1000);

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
    /// With `--rails`: this coordinator's ranks reach it through rank 0's relay (one
    /// loopback source for all, see [`crate::ring::railmux`]); TCP_INFO is read from the
    /// node's own connection through this (by ring rank). None: ranks connect directly.
    pub relay: Option<AckFn>,
    /// This process's SIGTERM/SIGINT ([`crate::ring::interrupt::process`]); None in tests
    /// that do not interrupt.
    pub interrupt: Option<Arc<Interrupt>>,
}

impl CoordinatorConfig {
    /// Ring rank `r` as people are told it (see [`CoordinatorConfig::nodes`]).
    pub fn node_of(&self, r: Rank) -> Rank {
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

/// See [`CoordinatorConfig::relay`].
pub type AckFn = Arc<dyn Fn(Rank) -> Option<AckState> + Send + Sync>;

/// See [`CoordinatorConfig::rings`].
pub type RingsFn = Arc<dyn Fn(u32) -> Vec<RingOrder> + Send + Sync>;
/// Makes the scan's driver for a world of n ranks.
pub type ScanFn = Arc<dyn Fn(usize) -> Box<dyn ScanDriver> + Send + Sync>;

/// See [`CoordinatorConfig::on_row`].
pub type RowSink = Arc<dyn Fn(&[RankInfo], Vec<RowResult>) + Send + Sync>;

/// Sizes whose rows are still waiting for some rank; more are not kept (a rank sends one
/// row per size, and runs have tens of sizes).
const MAX_PENDING_ROWS: usize = 256;

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
    fn report(&self, ranks: &[RankInfo]) -> ScanReport;
}

/// Called with the coordinator's view and the run clock (ms since the table went out):
/// during the run every [`JUDGE_EVERY`] and right after a failure report (stuck, failed,
/// closed), with `final_call` false (a non-empty answer ends the run at once, as a hang
/// verdict should), and once at the end with `final_call` true (link-scan verdicts) before
/// the last message goes out. Not per message: its cost may grow with the world size.
pub type Judge = Arc<dyn Fn(&CoordinatorReport, u64, bool) -> Vec<Verdict> + Send + Sync>;

/// Where the coordinator's time went (the bench prints it): phases as offsets from its
/// start, and the event loop's work by kind.
#[derive(Clone, Debug, Default)]
pub struct LoopStats {
    /// Every rank had joined; every table was encoded; every table was handed to its
    /// socket; the go went out.
    pub joined: Option<Duration>,
    pub tables_built: Option<Duration>,
    pub tables_out: Option<Duration>,
    pub go: Option<Duration>,
    pub hellos: u64,
    pub hello_time: Duration,
    pub table_bytes: u64,
    pub plane: PlaneStats,
    /// Handling the messages read (heartbeats, rows...).
    pub msg_time: Duration,
    pub ticks: u64,
    pub tick_time: Duration,
    pub tick_max: Duration,
    pub judge_calls: u64,
    pub judge_time: Duration,
    pub judge_max: Duration,
    /// How far the judge's clock (the plane's [`Plane::caught_up`]) was behind the wall
    /// clock at most: the loop's own lag, never counted as a rank's silence.
    pub judge_lag_max: Duration,
    pub pings: u64,
    pub ping_time: Duration,
    /// The longest stretch between two polls (how late a heartbeat can be read).
    pub busy_max: Duration,
    /// The most the loop came round later than the poll timeout it asked for ([`lag`]).
    pub lag_max: Duration,
    /// From the end of the run (a verdict, or every result) to the last message written.
    pub finish_time: Duration,
}

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
    /// The longest stall of the coordinator's own loop, past [`lag::threshold`] of the
    /// silence deadline (its process stopped or starved), if there was one.
    pub own_stall: Option<Stall>,
}

impl CoordinatorReport {
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
    fn close_events(&mut self) {
        if self.rejected_unlisted > 0 {
            self.events.push(Event::MoreRejected {
                count: self.rejected_unlisted,
            });
        }
    }
}

fn token_eq(a: &str, b: &str) -> bool {
    // Length-independent comparison time is not needed (the token is a job id, not a
    // secret), but comparing every byte costs nothing.
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Check a hello against the job. Pure.
pub fn validate(h: &Hello, cfg: &CoordinatorConfig, seen: &BTreeMap<Rank, RankInfo>) -> Result<(), String> {
    let (cfg_world, cfg_token) = (cfg.world, cfg.token.as_str());
    if h.protocol != wire::PROTOCOL {
        return Err(format!(
            "protocol {} (this coordinator speaks {})",
            h.protocol,
            wire::PROTOCOL
        ));
    }
    if !token_eq(&h.token, cfg_token) {
        return Err("wrong token (a rank of another job, or a different --token)".into());
    }
    // On a rail's ring of some of the nodes, the claim is named by the job's node rank.
    let who = cfg.claimed(h.rank);
    if h.world != cfg_world {
        return Err(if cfg.nodes.is_empty() {
            format!(
                "{who} says world size {}, the coordinator expects {cfg_world}",
                h.world
            )
        } else {
            format!(
                "{who} says this rail's ring has {} nodes, the coordinator has {cfg_world} (nodes {})",
                h.world,
                list(&cfg.nodes)
            )
        });
    }
    if h.rank >= cfg_world || h.info.rank != h.rank {
        return Err(if cfg.nodes.is_empty() {
            format!("{who} is out of range for world size {cfg_world}")
        } else {
            format!(
                "ring rank {} is out of range for this rail's ring of {cfg_world} nodes ({})",
                h.rank,
                list(&cfg.nodes)
            )
        });
    }
    if h.params != cfg.params {
        return Err(format!(
            "{who} runs with options [{}], rank 0 with [{}]",
            h.params, cfg.params
        ));
    }
    for (what, v) in [
        ("host", h.info.host.as_str()),
        ("address", h.info.address.as_str()),
        ("transport", h.info.transport.as_str()),
        ("device", h.info.device.as_deref().unwrap_or("")),
    ] {
        if v.len() > 255 || printable(v, 255) != v {
            return Err(format!("{who}'s {what} is not plain text of at most 255 bytes"));
        }
    }
    check_rails(&h.info.rails).map_err(|why| format!("{who}'s rails: {why}"))?;
    for caps in [&h.capabilities, &h.info.capabilities] {
        if let Err(why) = check_capabilities(caps) {
            return Err(format!("{who}'s capabilities: {why}"));
        }
    }
    if let Some(prev) = seen.get(&h.rank) {
        return Err(format!(
            "{who} already joined from {} ({})",
            prev.host, prev.address
        ));
    }
    Ok(())
}

/// A hello's rail list (the table repeats it for every rank): at most
/// [`rails::MAX_RAILS`](crate::ring::rails::MAX_RAILS) rails, each text field plain text of
/// at most 255 bytes. Pure.
pub fn check_rails(rails: &[crate::ring::model::RailPort]) -> Result<(), String> {
    let max = crate::ring::rails::MAX_RAILS as usize;
    if rails.len() > max {
        return Err(format!("{} entries, at most {max} allowed", rails.len()));
    }
    for p in rails {
        let fields = [
            Some(p.device.as_str()),
            p.netdev.as_deref(),
            p.state.as_deref(),
            p.label.as_deref(),
            p.address.as_deref(),
        ];
        if fields
            .into_iter()
            .flatten()
            .any(|v| v.len() > 255 || printable(v, 255) != v)
        {
            return Err(format!(
                "rail {}: a field is not plain text of at most 255 bytes",
                p.rail
            ));
        }
    }
    Ok(())
}

/// Most transports a hello may list, and the longest name: the table repeats them for
/// every rank, so a peer must not grow it.
pub const MAX_CAPABILITIES: usize = 8;
pub const MAX_CAPABILITY_CHARS: usize = 16;

/// A hello's transport list: at most [`MAX_CAPABILITIES`] names of at most
/// [`MAX_CAPABILITY_CHARS`] lowercase letters, digits, `-` or `_`. Pure.
pub fn check_capabilities(caps: &[String]) -> Result<(), String> {
    if caps.len() > MAX_CAPABILITIES {
        return Err(format!(
            "{} entries, at most {MAX_CAPABILITIES} allowed",
            caps.len()
        ));
    }
    for c in caps {
        let plain = !c.is_empty()
            && c.len() <= MAX_CAPABILITY_CHARS
            && c.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if !plain {
            return Err(format!(
                "{:?} is not a transport name (at most {MAX_CAPABILITY_CHARS} of a-z, 0-9, -, _)",
                printable(c, 40)
            ));
        }
    }
    Ok(())
}

/// Open files the coordinator needs for `world` ranks: each control connection, and room
/// for the listener, its event loops, strangers and the process itself.
pub fn files_needed(world: u32) -> u64 {
    world as u64 + 64
}

/// The coordinator's own limit, as an error naming it and what to set, when `world` ranks
/// do not fit in `nofile` open files (already raised to the hard limit). Pure.
pub fn check_fd_limit(world: u32, nofile: u64) -> Result<(), String> {
    let need = files_needed(world);
    if nofile >= need {
        return Ok(());
    }
    Err(format!(
        "coordinator: {world} ranks need {need} open files (1 per rank and 64 more), but its open-file limit \
         (RLIMIT_NOFILE, raised to the hard limit) is {nofile}: raise the hard limit to at least {need} on rank 0's \
         host (`ulimit -Hn {need}` as root before starting, LimitNOFILE={need} in a systemd unit, or `nofile` in \
         /etc/security/limits.conf; Slurm: the limit slurmd passes on)"
    ))
}

/// Turn a connection away: tell it why (best effort, never blocks) and record it. Busy
/// refusals were told by the door already.
pub(crate) fn refuse(rep: &mut CoordinatorReport, s: &TcpStream, peer: &str, reason: &str) {
    if !reason.starts_with(BUSY) {
        gate::reject_now(s, &printable(reason, MAX_REASON_CHARS));
    }
    rep.reject(peer, reason);
}

/// Keepalive on a control connection: an idle connection to a host that vanished is noticed
/// by the kernel too (the pings normally keep data in flight; TCP_INFO reads that).
fn keepalive(s: &TcpStream) {
    let ka = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(2))
        .with_interval(Duration::from_secs(1))
        .with_retries(5);
    let _ = socket2::SockRef::from(s).set_tcp_keepalive(&ka);
}

/// Since when (run clock) the peer's host has not acknowledged what we sent, if that is
/// what TCP_INFO shows: data outstanding, retransmitted, and no ACK for over a second. A
/// stopped process's kernel still acknowledges (within a delayed-ACK time), so this is a
/// host that is down or cut off. Pure.
pub fn unacked_since(a: AckState, now_ms: u64) -> Option<u64> {
    (a.unacked > 0 && (a.retransmits > 0 || a.backoff > 0) && a.last_ack_recv_ms >= 1000)
        .then(|| now_ms.saturating_sub(a.last_ack_recv_ms as u64))
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
pub fn coordinate_with(listener: TcpListener, cfg: CoordinatorConfig, limits: Limits) -> CoordinatorReport {
    let start = Instant::now();
    let mut rep = CoordinatorReport::default();
    let own_error = |rep: &mut CoordinatorReport, e: String| {
        rep.abort = Some(e.clone());
        rep.coordinator_error = Some(e);
    };
    let nofile = gate::raise_fd_limit();
    if let Err(e) = check_fd_limit(cfg.world, nofile) {
        own_error(&mut rep, e);
        return rep;
    }
    let plane = match limits.events {
        Some(k) => Plane::with_events(cfg.world, k),
        None => Plane::new(cfg.world),
    };
    let mut plane = match plane {
        Ok(p) => p,
        Err(e) => {
            own_error(&mut rep, format!("coordinator: cannot start its event loop: {e}"));
            return rep;
        }
    };
    // Leave room for one descriptor per rank; strangers get what is left, at most the cap.
    let door = gate::Limits {
        max_pending: limits
            .door
            .max_pending
            .min((nofile.saturating_sub(files_needed(cfg.world)) as usize).max(16)),
        ..limits.door
    };
    // Relayed ranks all come from rank 0's own loopback: one source, not a flood.
    let door = match cfg.relay {
        Some(_) => gate::Limits {
            max_per_source: door.max_pending,
            ..door
        },
        None => door,
    };
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
        // Named as the job's nodes: no table entry of theirs says it.
        let missing: Vec<Rank> = (0..cfg.world).filter(|r| !seen.contains_key(r)).collect();
        let interrupted = interrupted_join(&cfg, seen.len(), &missing);
        rep.interrupted = interrupted.clone();
        let reason = interrupted.unwrap_or_else(|| BootstrapError::Missing {
            missing: missing.iter().map(|&r| cfg.node_of(r)).collect(),
            silent: missing
                .iter()
                .filter(|r| cfg.silent.contains(r))
                .map(|&r| cfg.node_of(r))
                .collect(),
            world: cfg.world,
            coordinator: cfg.advertised.clone(),
            secs: cfg.join_timeout.as_secs(),
        }
        .to_string());
        run.tell_all(
            &mut rep,
            &Msg::Abort {
                reason: reason.clone(),
            },
        );
        rep.abort = Some(reason);
        if let Some(judge) = cfg.judge.as_ref().filter(|_| rep.interrupted.is_none()) {
            rep.verdicts = judge(&rep, 0, true);
        }
        stop.store(true, Ordering::Relaxed);
        drain_rejections(&cfg, &rx, &mut rep, &run.plane);
        run.drain_out(Instant::now() + Duration::from_secs(2));
        rep.stats.plane = run.plane.stats;
        rep.close_events();
        return rep;
    }
    if let Err(e) = run.send_tables(&mut rep) {
        // Never dropped in silence: every rank is told, and no rank is blamed.
        let reason = format!(
            "coordinator: the rank table for {} ranks cannot be sent: {e}",
            cfg.world
        );
        run.tell_all(
            &mut rep,
            &Msg::Abort {
                reason: reason.clone(),
            },
        );
        own_error(&mut rep, reason);
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

/// `--rails`, rank 0: the job's one door, where every node's hello declares its rail slots
/// (`info.rails`, checked like every hello). What it gathered, and the connections it holds
/// (each node's one control connection for the whole run, see [`crate::ring::railmux`]).
pub struct NodeDoor {
    pub plane: Plane,
    /// Hellos the door reads after the gathering (latecomers, to turn away).
    pub rx: Receiver<Incoming>,
    /// Ends the door's thread.
    pub stop: Arc<AtomicBool>,
    /// Every node seated, rank 0's own (`me`) included.
    pub seen: BTreeMap<Rank, RankInfo>,
    pub rep: CoordinatorReport,
}

/// Gather the nodes' hellos on `listener` (the same door, deadlines and claims as a ring's
/// coordinator: [`gather`]) until every node of `cfg.world` declared or the join window
/// ended. `me` is rank 0's own node, seated without a connection. An error is rank 0's own
/// (its open-file limit, its event loop).
pub fn node_door(
    listener: TcpListener,
    cfg: &CoordinatorConfig,
    me: RankInfo,
    limits: Limits,
) -> Result<NodeDoor, String> {
    let start = Instant::now();
    let nofile = gate::raise_fd_limit();
    check_fd_limit(cfg.world, nofile)?;
    let mut plane =
        Plane::new(cfg.world).map_err(|e| format!("coordinator: cannot start its event loop: {e}"))?;
    let stop = Arc::new(AtomicBool::new(false));
    let gathering = Arc::new(AtomicBool::new(true));
    let (tx, rx) = mpsc::channel::<Incoming>();
    {
        let (stop, gathering, wake, door) = (stop.clone(), gathering.clone(), plane.waker(), limits.door);
        thread::spawn(move || gate::run(listener, tx, Some(wake), stop, gathering, door));
    }
    let mut rep = CoordinatorReport::default();
    let seeded = BTreeMap::from([(me.rank, me)]);
    let seen = gather(cfg, &mut rep, (&mut plane, seeded), &rx, start, limits.sndbuf);
    gathering.store(false, Ordering::Relaxed);
    rep.stats.joined = Some(start.elapsed());
    Ok(NodeDoor {
        plane,
        rx,
        stop,
        seen,
        rep,
    })
}

/// Rank 0 was interrupted while `joined` ranks had joined: the reason every joined rank is
/// told (the missing ones are named, not judged). None: not interrupted.
fn interrupted_join(cfg: &CoordinatorConfig, joined: usize, missing: &[Rank]) -> Option<String> {
    let signal = cfg.interrupt.as_ref()?.caught()?;
    Some(format!(
        "interrupted by {signal} on rank 0 while {joined} of {} ranks had joined (missing rank{} {}); no rank is judged",
        cfg.world,
        if missing.len() == 1 { "" } else { "s" },
        list(&missing.iter().map(|&r| cfg.node_of(r)).collect::<Vec<_>>())
    ))
}

/// When gathering ends, for a coordinator started at `start`: the join window, or, once
/// every rank but the silent ones ([`CoordinatorConfig::silent`]) joined, `silent_wait`
/// after `start` if that is sooner. Counted from the start, not from the last join: a silent
/// node already had the roster's whole join window, and one that declares after it is told it
/// has no seat, so waiting on after the others joined would only delay the verdict. Pure.
pub fn gather_deadline(cfg: &CoordinatorConfig, seen: &BTreeMap<Rank, RankInfo>, start: Instant) -> Instant {
    let full = start + cfg.join_timeout;
    if cfg.silent.is_empty() {
        return full;
    }
    let declared = cfg.world as usize - cfg.silent.iter().filter(|&&r| r < cfg.world).count();
    let joined = seen.keys().filter(|r| !cfg.silent.contains(r)).count();
    if joined >= declared {
        full.min(start + cfg.silent_wait)
    } else {
        full
    }
}

/// Gather hellos until every rank joined or the deadline ([`gather_deadline`]): each joined
/// connection is held by the event loop, and one that closes before the table goes out
/// frees its slot.
fn gather(
    cfg: &CoordinatorConfig,
    rep: &mut CoordinatorReport,
    (plane, mut seen): (&mut Plane, BTreeMap<Rank, RankInfo>),
    rx: &Receiver<Incoming>,
    start: Instant,
    sndbuf: Option<usize>,
) -> BTreeMap<Rank, RankInfo> {
    // Ranks whose holder is being checked because a second claim came: since when.
    let mut checking: BTreeMap<Rank, Instant> = BTreeMap::new();
    while (seen.len() as u32) < cfg.world {
        let now = Instant::now();
        let deadline = gather_deadline(cfg, &seen, start);
        if now >= deadline || cfg.interrupt.as_ref().is_some_and(|i| i.caught().is_some()) {
            break;
        }
        for h in plane.wait((deadline - now).min(Duration::from_millis(50))) {
            // Nothing is expected before the table; a connection that ended frees its slot.
            if let Happening::Closed(r, _) = h {
                seen.remove(&r);
            }
        }
        plane.take_woken();
        let t = Instant::now();
        while let Ok((s, peer, hello)) = rx.try_recv() {
            if let Some(b) = sndbuf {
                let _ = socket2::SockRef::from(&s).set_send_buffer_size(b);
            }
            gather_one(cfg, rep, (&mut seen, &mut checking), (plane, start), (s, peer, hello));
            rep.stats.hellos += 1;
        }
        rep.stats.hello_time += t.elapsed();
        if seen.len() as u32 == cfg.world {
            // Before the table goes out: a rank whose connection already closed (restarted,
            // or a claim that went away) frees its slot and is waited for again.
            // (A rank seated without a connection is the coordinator's own process.)
            let dead: Vec<Rank> = seen
                .keys()
                .copied()
                .filter(|&r| plane.has(r) && plane.is_dead(r))
                .collect();
            for r in dead {
                seen.remove(&r);
                plane.remove(r);
            }
        }
    }
    seen
}

/// How long a second claim of a taken rank is told "busy" while the holder's connection is
/// checked. A connection whose far end is gone (a reset that never reached rank 0, a node
/// that rebooted) answers the check with a reset within a round trip.
pub const HOLDER_CHECK: Duration = Duration::from_secs(3);

/// One finished hello while ranks gather: join, replace a dead earlier connection of the
/// same rank, or refuse (a second live claim names both source addresses). A claim of a
/// rank whose holder looks alive first checks the holder (a ping, which a live rank ignores
/// before its table and a vanished one answers with a reset) and is told "busy" meanwhile,
/// so a rank whose own end was reset connects again instead of being refused.
fn gather_one(
    cfg: &CoordinatorConfig,
    rep: &mut CoordinatorReport,
    (seen, checking): (&mut BTreeMap<Rank, RankInfo>, &mut BTreeMap<Rank, Instant>),
    (plane, start): (&mut Plane, Instant),
    (s, peer, hello): Incoming,
) {
    let peer_s = peer.to_string();
    let h = match hello {
        Ok(h) => h,
        Err(e) => return refuse(rep, &s, &peer_s, &door_reason(e)),
    };
    // Judged as if the slot were free: a claim of a taken slot with the right token is
    // either a restarted rank (its old connection is dead) or a second process.
    if let Err(reason) = validate(&h, cfg, &BTreeMap::new()) {
        return refuse(rep, &s, &peer_s, &reason);
    }
    if seen.contains_key(&h.rank) && !rep.control_peers.contains_key(&h.rank) {
        let reason = format!("{} is rank 0's own process", cfg.claimed(h.rank));
        return refuse(rep, &s, &peer_s, &reason);
    }
    match rep.control_peers.get(&h.rank).cloned() {
        Some(old_peer) if plane.has(h.rank) && !plane.is_dead(h.rank) => {
            let now = Instant::now();
            let first = !checking.contains_key(&h.rank);
            let since = *checking.entry(h.rank).or_insert(now);
            if now.duration_since(since) < HOLDER_CHECK {
                if first && let Ok(f) = frame(&Msg::Ping) {
                    let _ = plane.send(h.rank, f, now);
                }
                let reason = format!(
                    "{BUSY}{} is held by an earlier connection from {old_peer}; checking that it is alive",
                    cfg.claimed(h.rank)
                );
                gate::reject_now(&s, &reason);
                // Listed once: the claimant asks again every 100 ms while the check lasts.
                if first {
                    rep.reject(&peer_s, &reason);
                }
                return;
            }
            let host = seen.get(&h.rank).map(|i| i.host.clone()).unwrap_or_default();
            let who = cfg.claimed(h.rank);
            let reason = format!(
                "{who} is already taken by {old_peer} ({}); a second claim from {peer_s} is refused (two \
                 processes started as {who}, or a foreign process with this job's token)",
                printable(&host, 64),
            );
            return refuse(rep, &s, &peer_s, &reason);
        }
        Some(old_peer) => {
            checking.remove(&h.rank);
            rep.events.push(Event::Replaced {
                rank: h.rank,
                peer: peer_s.clone(),
                old_peer,
            })
        }
        None => rep.events.push(Event::Joined {
            rank: h.rank,
            peer: peer_s.clone(),
            host: h.info.host.clone(),
        }),
    }
    keepalive(&s);
    if let Err(e) = plane.add(h.rank, s) {
        // The event loop's own limit (epoll's watches): the coordinator's, not the rank's.
        rep.reject(
            &peer_s,
            &format!(
                "coordinator: cannot hold {}'s connection: {e}",
                cfg.claimed(h.rank)
            ),
        );
        seen.remove(&h.rank);
        return;
    }
    rep.control_peers.insert(h.rank, peer_s);
    // The coordinator's numbering, never the hello's word.
    let mut info = h.info;
    info.node = cfg.nodes.get(h.rank as usize).copied();
    seen.insert(h.rank, info);
    tell_window(cfg, seen, (plane, start), h.rank);
}

/// Tell seated rank `r` when the join window closes: it waits on this clock, not on its
/// own start (it may have started long before rank 0).
fn tell_window(
    cfg: &CoordinatorConfig,
    seen: &BTreeMap<Rank, RankInfo>,
    (plane, start): (&mut Plane, Instant),
    r: Rank,
) {
    let now = Instant::now();
    let left = gather_deadline(cfg, seen, start).saturating_duration_since(now);
    if let Ok(f) = frame(&Msg::Window {
        closes_in_ms: left.as_millis() as u64,
    }) {
        let _ = plane.send(r, f, now);
    }
}

/// Why the door turned a connection away, in plain words (its own refusals are not a
/// malformed message).
pub(crate) fn door_reason(e: WireError) -> String {
    match e {
        WireError::Malformed(m) if m.starts_with(BUSY) || m.starts_with("no complete hello") => m,
        WireError::Closed => "closed before saying hello".into(),
        e => e.to_string(),
    }
}

/// Late arrivals (after the table went out) are turned away, and recorded; a claim of a
/// rank in the run names the connection that holds it.
fn drain_rejections(
    cfg: &CoordinatorConfig,
    rx: &Receiver<Incoming>,
    rep: &mut CoordinatorReport,
    plane: &Plane,
) {
    while let Ok((s, peer, hello)) = rx.try_recv() {
        let reason = match hello {
            Ok(h) => match rep.control_peers.get(&h.rank) {
                Some(holder) if plane.has(h.rank) => {
                    let who = cfg.claimed(h.rank);
                    format!("{who} arrived after the run started; the run's {who} is connected from {holder}")
                }
                _ => format!(
                    "{} arrived after the run started (or was aborted)",
                    cfg.claimed(h.rank)
                ),
            },
            Err(e) => door_reason(e),
        };
        refuse(rep, &s, &peer.to_string(), &reason);
    }
}

/// The run phase's state: readiness barrier, heartbeats, failure reports, results, all on
/// the event loop; split into the steps of one pass (judge, ping, read, end).
struct Serve<'a> {
    cfg: &'a CoordinatorConfig,
    plane: Plane,
    ranks: Vec<RankInfo>,
    limits: Limits,
    /// The run clock: when the table went out.
    run_start: Instant,
    /// The coordinator's start (for [`LoopStats`]).
    started: Instant,
    /// Each rank's silence clock (from its last message, or its whole table out).
    quiet: Quiet,
    /// When the judge is worth calling (see [`JudgeGate`]).
    gate: JudgeGate,
    /// The judge is not called again before this (a slow call leaves the loop time to read),
    /// unless a failure report came; and at least at `next_backstop`.
    judge_ok_at: Instant,
    next_backstop: Instant,
    /// Pings go out in slices over each interval: ranks `ping_from..` are next this cycle.
    ping_from: Rank,
    ping_cycle: Instant,
    ping_cycles: u64,
    ready: BTreeSet<Rank>,
    /// A failure report makes the next pass judge at once, not at the next tick.
    urgent: bool,
    done_results: BTreeMap<Rank, RankResults>,
    /// Size -> the ranks that finished it so far (see `on_row`).
    pending_rows: BTreeMap<u64, BTreeMap<Rank, RowResult>>,
    /// The sizes every rank finished, in order (an interrupted run's report).
    complete_rows: Vec<BTreeMap<Rank, RowResult>>,
    failing_since: Option<Instant>,
    first_failure: Option<String>,
    scan: Option<Box<dyn ScanDriver>>,
    /// Every rank's table has gone out (see `CoordinatorReport::tables_out_ms`).
    tables_out: bool,
    /// The loop's own lag ([`lag`]).
    lag: LagClock,
    /// After a stall of the loop while nothing had failed: until when the ranks have their
    /// fresh deadline (a failure seen before then is the stall's; see `after_stall`).
    stall: Option<(Stall, Instant)>,
    /// Ranks that said they were interrupted: their closing is no failure.
    interrupted: BTreeSet<Rank>,
    /// When this process's own interrupt was first seen (its own rank says where it was
    /// within [`OWN_INTERRUPT_WAIT`]).
    own_interrupt: Option<Instant>,
}

/// How long rank 0's coordinator, interrupted itself, waits for a rank's word on where the
/// run was before it ends the run without it.
const OWN_INTERRUPT_WAIT: Duration = Duration::from_millis(300);

impl<'a> Serve<'a> {
    fn new(
        cfg: &'a CoordinatorConfig,
        plane: Plane,
        rep: &CoordinatorReport,
        limits: Limits,
        started: Instant,
    ) -> Serve<'a> {
        let now = Instant::now();
        Serve {
            cfg,
            plane,
            ranks: rep.ranks.clone(),
            limits,
            run_start: now,
            started,
            quiet: Quiet::new(cfg.world, PROBE_AFTER),
            gate: JudgeGate::new(cfg.world, cfg.timeout),
            judge_ok_at: now,
            next_backstop: now,
            ping_from: 0,
            ping_cycle: now,
            ping_cycles: 0,
            ready: BTreeSet::new(),
            urgent: false,
            done_results: BTreeMap::new(),
            pending_rows: BTreeMap::new(),
            complete_rows: Vec::new(),
            failing_since: None,
            first_failure: None,
            scan: cfg.scan.as_ref().map(|make| make(cfg.world as usize)),
            tables_out: false,
            lag: match limits.cpu_reader {
                Some(read) => LagClock::with_reader(lag::threshold(silence(cfg.timeout)), read),
                None => LagClock::new(lag::threshold(silence(cfg.timeout))),
            },
            stall: None,
            interrupted: BTreeSet::new(),
            own_interrupt: None,
        }
    }

    fn host(&self, r: Rank) -> String {
        rep_host(&self.ranks, r)
    }

    /// Ring rank `r` as messages name it (the node's rank on a rail's ring).
    fn shown(&self, r: Rank) -> Rank {
        self.cfg.node_of(r)
    }

    fn run_ms(&self) -> u64 {
        self.run_start.elapsed().as_millis() as u64
    }

    /// Every rank its part of the table (itself and its peers in every ring, in bounded
    /// frames); the run clock starts now. An error is the coordinator's own.
    fn send_tables(&mut self, rep: &mut CoordinatorReport) -> Result<(), String> {
        let world = self.cfg.world;
        let rings = match &self.cfg.rings {
            Some(f) => f(world),
            None => orders::sweep_rings(world),
        };
        let peers = orders::peers(world, &rings);
        let shared = orders::shared_transport(&self.ranks).map(str::to_string);
        let mut frames = Vec::with_capacity(world as usize);
        for (r, p) in peers.iter().enumerate() {
            let part = orders::part(r as Rank, p, &self.ranks);
            frames.push(orders::table_frames(part, shared.as_deref())?);
        }
        rep.stats.tables_built = Some(self.started.elapsed());
        rep.stats.table_bytes = frames.iter().flatten().map(|f| f.len() as u64).sum();
        self.run_start = Instant::now();
        let now = Instant::now();
        self.ping_cycle = now;
        for (r, f) in frames.into_iter().enumerate() {
            if let Err(e) = self.plane.send_table(r as Rank, f, now) {
                self.queue_error(rep, r as Rank, e);
            }
        }
        Ok(())
    }

    /// Ping the slice of ranks due by `now`: every rank once per `ping_every`, spread over
    /// it (16,384 writes at once held the loop, and every reply came back at once).
    fn ping_slice(&mut self, rep: &mut CoordinatorReport, ping: &Frame, now: Instant) {
        let n = self.cfg.world;
        let every = self.limits.ping_every.max(Duration::from_millis(1));
        let el = now.saturating_duration_since(self.ping_cycle);
        let due = if el >= every {
            n
        } else {
            ((n as u128 * el.as_nanos() / every.as_nanos()) as u32 + 1).min(n)
        };
        // A loop that fell behind catches up a tenth of the world per pass, not all at once
        // (16,384 loopback writes held one pass for seconds on a loaded machine).
        let upto = due.min(self.ping_from.saturating_add((n / 10).max(64)));
        if upto > self.ping_from {
            let t = Instant::now();
            // A silent rank is pinged every cycle (data in flight shows in TCP_INFO whether
            // its host still answers); a talking one only needs to hear from the coordinator
            // well within its own silence deadline: every k-th cycle, a quarter of it.
            let talking = self
                .limits
                .talking_ping_every
                .unwrap_or_else(|| silence(self.cfg.timeout) / 4);
            let k = (talking.as_nanos() / every.as_nanos()).max(1) as u64;
            let (cycle, quiet) = (self.ping_cycles, &self.quiet.quiet);
            let want = |r: Rank| (cycle + r as u64) % k == 0 || quiet.contains(&r);
            rep.stats.pings += self.plane.ping_idle(ping, self.ping_from..upto, now, want);
            rep.stats.ping_time += t.elapsed();
            self.ping_from = upto;
        }
        if self.ping_from >= n && el >= every {
            // A loop that fell behind starts a fresh cycle rather than pinging in bursts.
            self.ping_cycle = if el >= 2 * every {
                now
            } else {
                self.ping_cycle + every
            };
            self.ping_from = 0;
            self.ping_cycles += 1;
        }
    }

    /// When the next slice of pings is due: the next rank's turn, but slices at least
    /// [`PING_SLICE`] apart (the loop does not wake per rank).
    fn next_ping(&self, now: Instant) -> Instant {
        let n = self.cfg.world.max(1);
        let every = self.limits.ping_every;
        let due = if self.ping_from < n {
            self.ping_cycle + every.mul_f64(self.ping_from as f64 / n as f64)
        } else {
            self.ping_cycle + every
        };
        due.max(now + every.min(PING_SLICE))
    }

    /// Send `msg` to every rank held (one encoding shared by all queues).
    fn tell_all(&mut self, rep: &mut CoordinatorReport, msg: &Msg) {
        match frame(msg) {
            Ok(f) => self.send_all(rep, f),
            Err(e) => {
                rep.coordinator_error.get_or_insert(format!("coordinator: {e}"));
            }
        }
    }

    fn send_all(&mut self, rep: &mut CoordinatorReport, f: Frame) {
        let now = Instant::now();
        for r in 0..self.cfg.world {
            if let Err(e) = self.plane.send(r, f.clone(), now) {
                self.queue_error(rep, r, e);
            }
        }
    }

    fn queue_error(&mut self, rep: &mut CoordinatorReport, r: Rank, e: QueueError) {
        if let QueueError::Full { queued, limit } = e {
            self.not_reading(
                rep,
                r,
                format!(
                    "{queued} bytes of control messages are queued for it, at the limit of {limit} bytes"
                ),
            );
        }
    }

    /// Rank `r` does not read its control connection: it is named with that reason, and its
    /// connection is closed so that nothing more waits on it.
    fn not_reading(&mut self, rep: &mut CoordinatorReport, r: Rank, why: String) {
        self.plane.remove(r);
        if rep.lost.contains(&r) {
            return;
        }
        rep.lost.push(r);
        let (host, n) = (self.host(r), self.shown(r));
        self.first_failure.get_or_insert_with(|| {
            format!("rank {n} ({host}) stopped reading its control connection: {why} (its process is stopped or its control thread hangs)")
        });
        self.failing_since.get_or_insert(Instant::now());
        self.urgent = true;
    }

    /// The run: until every rank's results arrived, a verdict, or a failure's grace ran out.
    fn serve(&mut self, rep: &mut CoordinatorReport, rx_late: &Receiver<Incoming>) {
        let world = self.cfg.world;
        let mut next_tick = Instant::now();
        // With a judge, the built-in rule waits longer: the judge names the cause first, and
        // the longest it needs is a frozen rank's silence (and its grace), not another timeout.
        let grace = if self.cfg.judge.is_some() {
            silence(self.cfg.timeout) + Duration::from_millis(1500)
        } else {
            FAILURE_GRACE
        };
        let ping = frame(&Msg::Ping).ok();
        loop {
            let now = Instant::now();
            let idle_before = self.plane.stats.idle;
            // The checks run at a bounded rate (and at once after a failure report), never
            // per message; each costs O(ranks near a deadline), the judge is gated (see tick).
            if now >= next_tick || self.urgent {
                let urgent = std::mem::take(&mut self.urgent);
                let ended = self.tick(rep, now, urgent);
                let d = now.elapsed();
                rep.stats.ticks += 1;
                rep.stats.tick_time += d;
                rep.stats.tick_max = rep.stats.tick_max.max(d);
                if ended {
                    break;
                }
                next_tick = Instant::now() + JUDGE_EVERY;
            }
            // Pings go out on time whatever else is queued (a rank with queued data gets it).
            if let Some(p) = &ping {
                self.ping_slice(rep, p, Instant::now());
            }
            if let Some(t) = self.failing_since {
                // Without a judge, every rank's report ends it at once; with one, the judge
                // names the cause (it may need its own grace), the built-in grace is the backstop.
                if now.duration_since(t) >= grace
                    || (self.cfg.judge.is_none()
                        && rep.stuck.len() + rep.failed.len() + rep.lost.len() >= world as usize)
                {
                    break;
                }
            }
            if self.done_results.len() as u32 == world {
                break;
            }
            let t_wait = Instant::now();
            let wait = next_tick
                .min(self.next_ping(t_wait))
                .saturating_duration_since(t_wait)
                .min(JUDGE_EVERY);
            self.lag.asked(wait);
            let happened = self.plane.wait(wait);
            if let Some(stall) = self.limits.loop_stall {
                thread::sleep(stall(&happened));
            }
            // Before what was read is handled: a close read right after the loop's own stall
            // is judged as the stall's (the process may have stopped inside the poll).
            if let Some(s) = self.lag.turn(Instant::now()) {
                self.after_stall(rep, s);
            }
            let t = Instant::now();
            for h in happened {
                match h {
                    Happening::Msg(r, m, at) => self.on_msg(rep, r, m, at),
                    Happening::Closed(r, err) => self.on_closed(rep, r, err),
                }
            }
            rep.stats.msg_time += t.elapsed();
            if self.interrupt_ends(rep, Instant::now()) {
                break;
            }
            if self.plane.take_woken() {
                drain_rejections(self.cfg, rx_late, rep, &self.plane);
            }
            let busy = now.elapsed().saturating_sub(self.plane.stats.idle - idle_before);
            rep.stats.busy_max = rep.stats.busy_max.max(busy);
        }
        rep.stats.lag_max = self.lag.max;
        let t = Instant::now();
        self.finish(rep);
        rep.stats.finish_time = t.elapsed();
    }

    /// The loop came back late by [`lag::threshold`] or more: the ranks may have given up on
    /// it meanwhile. If nothing had failed before, every rank gets a fresh silence deadline
    /// from now, and the judge waits for it; a failure seen before it ends is this stall's
    /// (see `stall_verdict`). A run already failing is judged as it was.
    fn after_stall(&mut self, rep: &mut CoordinatorReport, s: Stall) {
        if rep.own_stall.as_ref().is_none_or(|o| o.lag < s.lag) {
            rep.own_stall = Some(s.clone());
        }
        if self.failing_since.is_some() || !rep.verdicts.is_empty() {
            return;
        }
        let now = s.resumed;
        self.quiet.restart(now);
        self.stall = Some((s, now + silence(self.cfg.timeout)));
    }

    /// Within a stall's fresh deadline: a failure seen since is the stall's verdict (rank 0's
    /// own, naming no other rank); nothing failed, the judge waits until the deadline. None:
    /// no stall pending (judge as usual); Some(None): hold the judge.
    fn stall_verdict(&mut self, now: Instant) -> Option<Option<Verdict>> {
        let (s, until) = self.stall.as_ref()?;
        if self.failing_since.is_some() {
            return Some(Some(lag::verdict(s, self.ranks.first(), silence(self.cfg.timeout))));
        }
        if now >= *until {
            self.stall = None;
            return None;
        }
        Some(None)
    }

    /// The bounded-rate pass: stuck queues, silence and TCP_INFO of the quiet ranks, the
    /// judge when it is due. True: the run ends.
    fn tick(&mut self, rep: &mut CoordinatorReport, now: Instant, urgent: bool) -> bool {
        let now_ms = self.run_start.elapsed().as_millis() as u64;
        // Silence is judged as of the last instant before which every byte that reached the
        // loop was read: whatever the loop did since (a slow pass, no CPU on a loaded host)
        // never reads as a rank's silence, and a frozen rank is named as soon as the loop
        // has caught up, however busy it stays (no pass is skipped for being behind).
        let heard = self.plane.caught_up().min(now);
        let heard_ms = heard.saturating_duration_since(self.run_start).as_millis() as u64;
        let stall = self
            .limits
            .write_stall
            .unwrap_or_else(|| silence(self.cfg.timeout));
        for (r, queued, d) in self.plane.stuck(now, stall) {
            let why = format!(
                "{queued} bytes of control messages waited {:.1} s and it took none",
                d.as_secs_f64()
            );
            self.not_reading(rep, r, why);
        }
        // A rank's silence counts from when its whole table went out, not before.
        for (r, at) in self.plane.take_tables_done() {
            self.quiet.table_out(r, at);
        }
        self.quiet.advance(now);
        let quiet: Vec<(Rank, Instant)> = self.quiet.quiet_ranks().collect();
        for (r, since) in quiet {
            self.quiet_rank(rep, r, heard.saturating_duration_since(since), now, now_ms);
        }
        if !self.tables_out {
            let all_out = self
                .quiet
                .no_clock
                .iter()
                .all(|r| rep.lost.contains(r) || !self.plane.has(*r));
            if all_out {
                self.tables_out = true;
                rep.tables_out_ms = now_ms;
                rep.stats.tables_out = Some(self.started.elapsed());
                self.gate.arm(now_ms);
            }
        }
        match self.stall_verdict(now) {
            Some(Some(v)) => {
                self.first_failure = Some(v.message.clone());
                rep.verdicts = vec![v];
                return true;
            }
            Some(None) => return false,
            None => {}
        }
        // The judge reads silence on the run clock: only once every table is out.
        let Some(judge) = self.cfg.judge.clone().filter(|_| self.tables_out) else {
            return false;
        };
        let failing = !rep.stuck.is_empty()
            || !rep.failed.is_empty()
            || !rep.lost.is_empty()
            || !rep.closed.is_empty()
            || !rep.unacked_since_ms.is_empty()
            || !rep.link_faults.is_empty();
        let due = urgent || failing || now >= self.next_backstop || self.gate.due(heard_ms);
        if !due || !(urgent || now >= self.judge_ok_at) {
            return false;
        }
        let t = Instant::now();
        let v = judge(rep, heard_ms, false);
        let d = t.elapsed();
        rep.stats.judge_lag_max = rep.stats.judge_lag_max.max(now.saturating_duration_since(heard));
        rep.stats.judge_calls += 1;
        rep.stats.judge_time += d;
        rep.stats.judge_max = rep.stats.judge_max.max(d);
        // A slow call leaves the loop twice its time to read before the next (a slow pass must
        // not leave heartbeats unread); the backstop costs at most a tenth of the loop.
        self.judge_ok_at = Instant::now() + 2 * d;
        self.next_backstop = Instant::now() + JUDGE_IDLE.max(10 * d);
        if !v.is_empty() {
            self.first_failure = Some(verdict_reason(&v));
            rep.verdicts = v;
            return true;
        }
        false
    }

    /// Rank `r` has been silent `quiet` (at least [`PROBE_AFTER`], as of the plane's
    /// [`Plane::caught_up`]): past the timeout it is lost; is its host still acknowledging
    /// our pings?
    fn quiet_rank(
        &mut self,
        rep: &mut CoordinatorReport,
        r: Rank,
        quiet: Duration,
        now: Instant,
        now_ms: u64,
    ) {
        // A rank that says nothing for the whole timeout is gone or frozen.
        if quiet > self.cfg.timeout && !rep.lost.contains(&r) && !self.done_results.contains_key(&r) {
            rep.lost.push(r);
            let (host, n) = (self.host(r), self.shown(r));
            let secs = self.cfg.timeout.as_secs();
            self.first_failure.get_or_insert_with(|| {
                format!("rank {n} ({host}) sent nothing for {secs} s (process stopped, or its host is gone)")
            });
            self.failing_since.get_or_insert(now);
        }
        let ack = match &self.cfg.relay {
            Some(of) => of(r),
            None => self.plane.socket(r).and_then(tcpinfo::ack_state),
        };
        match ack.and_then(|a| unacked_since(a, now_ms)) {
            Some(since) => {
                rep.unacked_since_ms.entry(r).or_insert(since);
            }
            None => {
                rep.unacked_since_ms.remove(&r);
            }
        }
    }

    /// What the scan driver decided: the next order to every rank, or its end.
    fn scan_step(&mut self, rep: &mut CoordinatorReport, step: Step) {
        match step {
            Step::Wait => {}
            Step::Run(o) => {
                // Each rank with its two peers of this order: O(n) bytes per order.
                let now = Instant::now();
                for r in 0..self.cfg.world {
                    let peers = orders::scan_peers(r, self.cfg.world, o.shift)
                        .iter()
                        .filter_map(|&p| self.ranks.get(p as usize).cloned())
                        .collect();
                    let m = Msg::ScanRun {
                        index: o.index,
                        shift: o.shift,
                        bytes: o.bytes,
                        reps: o.reps,
                        peers,
                    };
                    match frame(&m) {
                        Ok(f) => {
                            if let Err(e) = self.plane.send(r, f, now) {
                                self.queue_error(rep, r, e);
                            }
                        }
                        Err(e) => {
                            rep.coordinator_error.get_or_insert(format!("coordinator: {e}"));
                        }
                    }
                }
            }
            Step::Done => {
                if let Some(d) = &self.scan {
                    rep.scan = Some(d.report(&self.ranks));
                }
                self.tell_all(rep, &Msg::ScanEnd);
            }
        }
    }

    /// One message from rank `r`'s connection.
    fn on_msg(&mut self, rep: &mut CoordinatorReport, r: Rank, mut m: Msg, at: Instant) {
        let at_ms = at.saturating_duration_since(self.run_start).as_millis() as u64;
        // A rank speaks for itself only: the connection says which rank it is.
        if let Msg::Heartbeat(w) | Msg::Stuck { wait: w, .. } = &mut m {
            w.rank = r;
        }
        let claimed = match &m {
            Msg::Ready { rank }
            | Msg::Failed { rank, .. }
            | Msg::ScanSamples { rank, .. }
            | Msg::Results(RankResults { rank, .. })
            | Msg::Row { rank, .. } => Some(*rank),
            _ => None,
        };
        if let Some(c) = claimed.filter(|&c| c != r) {
            let peer = rep.control_peers.get(&r).cloned().unwrap_or_default();
            let why = format!(
                "rank {}'s control connection sent a {} message for rank {c}; ignored",
                self.shown(r),
                m.kind()
            );
            rep.reject(&peer, &why);
            return;
        }
        if let Msg::Heartbeat(w) | Msg::Stuck { wait: w, .. } = &m {
            rep.reports.insert(r, (at_ms, w.clone()));
            self.gate.report(r, at_ms, w, matches!(m, Msg::Heartbeat(_)));
        }
        if let Msg::Heartbeat(w) = &m {
            let keep_ms = self.cfg.timeout.as_millis() as u64 + 10_000;
            let h = rep.progress.entry(r).or_default();
            h.push((at_ms, w.progress));
            let cut = h.iter().take_while(|(t, _)| t + keep_ms < at_ms).count();
            h.drain(..cut);
        }
        self.quiet.heard(r, at);
        if !rep.unacked_since_ms.is_empty() {
            rep.unacked_since_ms.remove(&r);
        }
        rep.last_heard_ms.insert(r, at_ms);
        match m {
            Msg::Ready { .. } => self.on_ready(rep, r),
            Msg::ScanSamples {
                rank: _,
                index,
                samples,
                line_rate_gbs,
            } => {
                if let Some(d) = self.scan.as_mut() {
                    let s = d.on_samples(r, index, samples, line_rate_gbs, &self.ranks, Instant::now());
                    self.scan_step(rep, s);
                }
            }
            Msg::Heartbeat(w) => {
                if let Some(prev) = rep.last_heartbeat.insert(r, w) {
                    rep.previous_heartbeat.insert(r, prev);
                }
            }
            Msg::Stuck {
                wait: w,
                port_counters,
            } => {
                note_counters(rep, r, port_counters);
                self.first_failure
                    .get_or_insert_with(|| stuck_line(&w, &self.ranks));
                rep.last_heartbeat.insert(r, w.clone());
                rep.stuck.push(w);
                self.failing_since.get_or_insert(Instant::now());
                self.urgent = true;
            }
            Msg::Failed {
                error,
                link_fault,
                port_counters,
                ..
            } => self.on_failed(rep, r, error, link_fault, port_counters),
            Msg::Row { row, .. } => self.on_row(r, row),
            Msg::Interrupted { signal, at, .. } => self.on_interrupted(rep, r, &signal, &at),
            Msg::Results(mut res) => {
                note_counters(rep, r, std::mem::take(&mut res.port_counters));
                rep.finished_ms.insert(r, at_ms);
                self.gate.finished(r);
                self.done_results.insert(r, res);
            }
            _ => {}
        }
    }

    fn on_ready(&mut self, rep: &mut CoordinatorReport, r: Rank) {
        // Counted once per rank: a repeated ready must not start the run.
        if !(self.ready.insert(r) && self.ready.len() as u32 == self.cfg.world) {
            return;
        }
        self.tell_all(rep, &Msg::Go);
        rep.stats.go = Some(self.started.elapsed());
        if let Some(d) = self.scan.as_mut() {
            let s = d.start(Instant::now());
            self.scan_step(rep, s);
        }
    }

    fn on_failed(
        &mut self,
        rep: &mut CoordinatorReport,
        r: Rank,
        error: String,
        link_fault: Option<LinkFault>,
        port_counters: Vec<CounterMove>,
    ) {
        let world = self.cfg.world;
        note_counters(rep, r, port_counters);
        // Only an end of the link can report it; the connection's rank saw it, whatever the
        // message says; its words are bounded before they are kept.
        if let Some(mut f) = link_fault
            && (f.from_rank == r || f.to_rank == r)
            && f.from_rank < world
            && f.to_rank < world
            && rep.link_faults.len() < 4 * world as usize
        {
            f.seen_by = r;
            for t in [
                &mut f.device,
                &mut f.operation,
                &mut f.status_name,
                &mut f.meaning,
            ] {
                *t = printable(t, 200);
            }
            rep.link_faults.push(f);
        }
        // Relayed to every rank and printed: escaped and bounded.
        let error = printable(&error, 1000);
        let (host, n) = (self.host(r), self.shown(r));
        self.first_failure
            .get_or_insert_with(|| format!("rank {n} ({host}) failed: {error}"));
        rep.failed.push((r, error));
        self.failing_since.get_or_insert(Instant::now());
        self.urgent = true;
    }

    fn on_row(&mut self, r: Rank, row: RowResult) {
        let size = row.size_bytes;
        if self.pending_rows.len() < MAX_PENDING_ROWS || self.pending_rows.contains_key(&size) {
            let at = self.pending_rows.entry(size).or_default();
            at.insert(r, row);
            if at.len() as u32 == self.cfg.world {
                let all = self.pending_rows.remove(&size).unwrap_or_default();
                if let Some(sink) = &self.cfg.on_row {
                    sink(&self.ranks, all.values().cloned().collect());
                }
                // Kept (bounded) for an interrupted run's report: what finished before.
                if self.complete_rows.len() < MAX_PENDING_ROWS {
                    self.complete_rows.push(all);
                }
            }
        }
    }

    /// An interrupted run's results: the sizes every rank finished (their rows came as each
    /// size ended), where a rank's own results never came.
    fn results_so_far(&mut self) {
        let mut partial: BTreeMap<Rank, RankResults> = BTreeMap::new();
        for row in std::mem::take(&mut self.complete_rows) {
            for (r, x) in row {
                if !self.done_results.contains_key(&r) {
                    partial
                        .entry(r)
                        .or_insert_with(|| RankResults {
                            rank: r,
                            rows: vec![],
                            links: vec![],
                            link_size_bytes: 0,
                            port_counters: vec![],
                        })
                        .rows
                        .push(x);
                }
            }
        }
        self.done_results.extend(partial);
    }

    /// Rank `r`'s process was told to stop: the run ends now with what is known; its
    /// closing that follows blames nobody.
    fn on_interrupted(&mut self, rep: &mut CoordinatorReport, r: Rank, signal: &str, at: &str) {
        self.interrupted.insert(r);
        if rep.interrupted.is_none() {
            let (host, n) = (self.host(r), self.shown(r));
            let why = format!(
                "interrupted by {} on rank {n} ({host}) at {}; the report holds what finished before",
                printable(signal, 16),
                printable(at, 200)
            );
            rep.interrupted = Some(why.clone());
            self.first_failure.get_or_insert(why);
        }
    }

    /// The run ends for an interrupt: a rank said so, or this process was told and its own
    /// rank did not say where within [`OWN_INTERRUPT_WAIT`].
    fn interrupt_ends(&mut self, rep: &mut CoordinatorReport, now: Instant) -> bool {
        if rep.interrupted.is_some() {
            return true;
        }
        let Some(signal) = self.cfg.interrupt.as_ref().and_then(|i| i.caught()) else {
            return false;
        };
        let since = *self.own_interrupt.get_or_insert(now);
        if now.duration_since(since) < OWN_INTERRUPT_WAIT {
            return false;
        }
        let why = format!(
            "interrupted by {signal} on rank 0 after {} ms of the run; the report holds what finished before",
            self.run_ms()
        );
        rep.interrupted = Some(why.clone());
        self.first_failure.get_or_insert(why);
        true
    }

    fn on_closed(&mut self, rep: &mut CoordinatorReport, r: Rank, err: WireError) {
        if self.interrupted.contains(&r) {
            self.quiet.forget(r);
            return;
        }
        let reset = !matches!(err, WireError::Closed);
        rep.closed.insert(r, (self.run_ms(), reset));
        let why = err.to_string();
        if !self.done_results.contains_key(&r) && !rep.lost.contains(&r) {
            rep.lost.push(r);
            let (host, n) = (self.host(r), self.shown(r));
            self.first_failure.get_or_insert_with(|| {
                format!("rank {n} ({host}) closed its control connection ({why}): the process died")
            });
            self.failing_since.get_or_insert(Instant::now());
            self.urgent = true;
        }
        self.quiet.forget(r);
    }

    /// The end: the final judgement, then done or abort to every rank, written out.
    fn finish(&mut self, rep: &mut CoordinatorReport) {
        if rep.interrupted.is_some() {
            self.results_so_far();
        }
        rep.results = std::mem::take(&mut self.done_results).into_values().collect();
        rep.run_ms = self.run_ms();
        if let Some(judge) = &self.cfg.judge
            && rep.verdicts.is_empty()
        {
            rep.verdicts = judge(rep, rep.run_ms, true);
            // A failed run's cause, named at the end, replaces the first report's line.
            if self.first_failure.is_some() && !rep.verdicts.is_empty() {
                self.first_failure = Some(verdict_reason(&rep.verdicts));
            }
        }
        // The scan's verdicts join the watchdog's: every rank learns that the run failed.
        let scan_verdicts: Vec<Verdict> = rep.scan.iter().flat_map(|s| s.verdicts.clone()).collect();
        for v in scan_verdicts {
            if !rep.verdicts.contains(&v) {
                rep.verdicts.push(v);
            }
        }
        match self.first_failure.take() {
            Some(reason) => {
                self.tell_all(
                    rep,
                    &Msg::Abort {
                        reason: reason.clone(),
                    },
                );
                rep.abort = Some(reason);
                // Interrupted: the scheduler's SIGKILL follows; the report comes first.
                if rep.interrupted.is_none() {
                    self.collect_counters(rep);
                }
            }
            None => {
                let failed = !rep.verdicts.is_empty()
                    || rep
                        .results
                        .iter()
                        .any(|r| r.rows.iter().any(|row| row.wrong_total() > 0));
                let done = Msg::Done {
                    failed,
                    verdicts: rep.verdicts.iter().take(SENT_VERDICTS).cloned().collect(),
                    more_verdicts: rep.verdicts.len().saturating_sub(SENT_VERDICTS) as u64,
                };
                if let Err(e) = frame(&done) {
                    let reason = format!("coordinator: the end of the run cannot be sent: {e}");
                    self.tell_all(
                        rep,
                        &Msg::Abort {
                            reason: reason.clone(),
                        },
                    );
                    rep.coordinator_error = Some(reason);
                } else {
                    self.tell_all(rep, &done);
                }
            }
        }
        self.drain_out(Instant::now() + Duration::from_secs(2));
        self.close_gently(Instant::now() + Duration::from_secs(1));
    }

    /// Half-close every connection (a FIN after the last message) and read what the ranks
    /// still send until each closes or `until`. Dropping a socket with unread heartbeats in
    /// its buffer sends a reset, and a reset can discard the last message before the rank
    /// read it: the rank would report COORDINATOR LOST after a run that ended well.
    fn close_gently(&mut self, until: Instant) {
        let mut open: BTreeSet<Rank> = (0..self.cfg.world).filter(|r| self.plane.has(*r)).collect();
        for r in &open {
            if let Some(s) = self.plane.socket(*r) {
                let _ = s.shutdown(std::net::Shutdown::Write);
            }
        }
        while !open.is_empty() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            for h in self.plane.wait(left.min(Duration::from_millis(50))) {
                if let Happening::Closed(r, _) = h {
                    open.remove(&r);
                }
            }
            open.retain(|r| self.plane.has(*r) && !self.plane.is_dead(*r));
        }
    }

    /// Write what is queued until every queue is empty or `until` (a rank that stopped
    /// reading does not hold the others' last message).
    fn drain_out(&mut self, until: Instant) {
        while self.plane.queued() > 0 {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            // Input is not needed any more; the loop only writes.
            let _ = self.plane.wait(left.min(Duration::from_millis(20)));
        }
    }

    /// After an abort: the ranks the verdicts name answer with their NIC's counters (each
    /// within milliseconds); wait for those still alive, at most `COUNTERS_GRACE`.
    fn collect_counters(&mut self, rep: &mut CoordinatorReport) {
        // Only the two ends of a broken link: a stalled or lost rank will not answer.
        let mut want: BTreeSet<Rank> = rep
            .verdicts
            .iter()
            .filter(|v| matches!(v.kind, VerdictKind::HangLink | VerdictKind::LinkError))
            .flat_map(|v| [v.from_rank, v.to_rank])
            .flatten()
            .filter(|r| !rep.lost.contains(r) && !rep.closed.contains_key(r))
            .collect();
        let until = Instant::now() + COUNTERS_GRACE;
        while !want.is_empty() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            for h in self.plane.wait(left.min(Duration::from_millis(50))) {
                match h {
                    // A rank that reached its own deadline as the abort went out reports
                    // stuck (or failed) first, with the same counters: that is its answer too.
                    Happening::Msg(
                        r,
                        Msg::Counters { port_counters }
                        | Msg::Stuck { port_counters, .. }
                        | Msg::Failed { port_counters, .. },
                        _,
                    ) => {
                        note_counters(rep, r, port_counters);
                        want.remove(&r);
                    }
                    Happening::Closed(r, _) => {
                        want.remove(&r);
                    }
                    Happening::Msg(..) => {}
                }
            }
        }
    }
}

/// Every rank's silence clock, deadline-ordered: the ranks silent past `after` are found
/// without a pass over the world (a heap of `(due, rank)`, checked against the rank's real
/// clock when it comes up, so a message costs no heap work).
struct Quiet {
    after: Duration,
    /// The start of each rank's current silence: its last message, or its whole table out.
    heard: Vec<Option<Instant>>,
    heap: BinaryHeap<Reverse<(Instant, Rank)>>,
    /// Ranks silent at least `after` (until they speak).
    quiet: BTreeSet<Rank>,
    /// Ranks whose clock has not started (their table is not out, nothing heard).
    no_clock: BTreeSet<Rank>,
}

impl Quiet {
    fn new(world: u32, after: Duration) -> Quiet {
        Quiet {
            after,
            heard: vec![None; world as usize],
            heap: BinaryHeap::new(),
            quiet: BTreeSet::new(),
            no_clock: (0..world).collect(),
        }
    }

    /// Rank `r` was heard from at `at`.
    fn heard(&mut self, r: Rank, at: Instant) {
        let Some(slot) = self.heard.get_mut(r as usize) else {
            return;
        };
        let started = slot.is_none();
        *slot = Some(at);
        if started {
            self.no_clock.remove(&r);
        }
        // A rank in the heap is checked against its clock when it comes up; one that was
        // quiet (or new) has no entry.
        if self.quiet.remove(&r) || started {
            self.heap.push(Reverse((at + self.after, r)));
        }
    }

    /// Rank `r`'s whole table went out at `at`: its clock starts, unless it spoke already.
    fn table_out(&mut self, r: Rank, at: Instant) {
        if self.heard.get(r as usize).is_some_and(Option::is_none) {
            self.heard(r, at);
        }
    }

    /// Every rank with a clock is heard from at `at`: a fresh deadline after the loop's own
    /// stall (once per stall, O(world)).
    fn restart(&mut self, at: Instant) {
        for r in 0..self.heard.len() {
            if self.heard[r].is_some() {
                self.heard(r as Rank, at);
            }
        }
    }

    /// Rank `r`'s connection ended: no clock any more.
    fn forget(&mut self, r: Rank) {
        if let Some(slot) = self.heard.get_mut(r as usize) {
            *slot = None;
        }
        self.quiet.remove(&r);
    }

    /// Move the ranks whose silence reached `after` by `now` into the quiet set.
    fn advance(&mut self, now: Instant) {
        while let Some(&Reverse((due, r))) = self.heap.peek() {
            if due > now {
                break;
            }
            self.heap.pop();
            let Some(since) = self.heard.get(r as usize).copied().flatten() else {
                continue;
            };
            if since + self.after > now {
                self.heap.push(Reverse((since + self.after, r)));
            } else {
                self.quiet.insert(r);
            }
        }
    }

    /// The quiet ranks and since when each is silent.
    fn quiet_ranks(&self) -> impl Iterator<Item = (Rank, Instant)> + '_ {
        self.quiet
            .iter()
            .filter_map(|&r| Some((r, self.heard.get(r as usize).copied().flatten()?)))
    }
}

/// When the judge could name something, from what the coordinator sees as messages arrive
/// (O(log n) per heartbeat, O(1) per tick while nothing is due): a rank whose last report
/// is older than the silence deadline, one whose progress counter stood still for its
/// phase's allowance (at least the timeout), or one waiting on a peer. The watchdog's rules
/// need one of these (or a failure the caller sees); the caller also judges every
/// [`JUDGE_IDLE`] whatever the gate says.
struct JudgeGate {
    silence_ms: u64,
    timeout_ms: u64,
    /// Each rank's last heartbeat or stuck report (run clock).
    report_ms: Vec<Option<u64>>,
    /// Each rank's progress counter, since when it has had that value, and whether its
    /// phase is local work (the longer allowance).
    progress: Vec<Option<(u64, u64, bool)>>,
    waiting: BTreeSet<Rank>,
    finished: Vec<bool>,
    silent_heap: BinaryHeap<Reverse<(u64, Rank)>>,
    still_heap: BinaryHeap<Reverse<(u64, Rank)>>,
    /// Every table is out (the run clock's silence starts then): the heaps are filled.
    since_ms: Option<u64>,
}

impl JudgeGate {
    fn new(world: u32, timeout: Duration) -> JudgeGate {
        let n = world as usize;
        JudgeGate {
            silence_ms: silence(timeout).as_millis() as u64,
            timeout_ms: timeout.as_millis() as u64,
            report_ms: vec![None; n],
            progress: vec![None; n],
            waiting: BTreeSet::new(),
            finished: vec![false; n],
            silent_heap: BinaryHeap::new(),
            still_heap: BinaryHeap::new(),
            since_ms: None,
        }
    }

    fn still_allowance(&self, local: bool) -> u64 {
        if local {
            local_work_allowance_ms(self.timeout_ms)
        } else {
            self.timeout_ms
        }
    }

    /// Every table is out at `now_ms`: silence counts from here for ranks never heard.
    fn arm(&mut self, now_ms: u64) {
        self.since_ms = Some(now_ms);
        for r in 0..self.report_ms.len() {
            let last = self.report_ms[r].unwrap_or(now_ms);
            self.silent_heap
                .push(Reverse((last + self.silence_ms, r as Rank)));
            if let Some((_, since, local)) = self.progress[r] {
                self.still_heap
                    .push(Reverse((since + self.still_allowance(local), r as Rank)));
            }
        }
    }

    /// Rank `r`'s heartbeat (or stuck report) `w` arrived at `at_ms`.
    fn report(&mut self, r: Rank, at_ms: u64, w: &WaitReport, heartbeat: bool) {
        let i = r as usize;
        if i >= self.report_ms.len() {
            return;
        }
        self.report_ms[i] = Some(at_ms);
        if w.waiting_on.is_some_and(|p| p != r) {
            self.waiting.insert(r);
        } else {
            self.waiting.remove(&r);
        }
        if !heartbeat {
            return;
        }
        let local = w.phase.is_local_work();
        let (since, push) = match self.progress[i] {
            // Into a shorter allowance: the entry in the heap may be due too late.
            Some((p, since, was_local)) if p == w.progress => (since, was_local && !local),
            Some(_) => (at_ms, false),
            None => (at_ms, true),
        };
        self.progress[i] = Some((w.progress, since, local));
        if push && self.since_ms.is_some() {
            self.still_heap
                .push(Reverse((since + self.still_allowance(local), r)));
        }
    }

    /// Rank `r` delivered its results: it waits for the end, never judged silent or still.
    fn finished(&mut self, r: Rank) {
        if let Some(f) = self.finished.get_mut(r as usize) {
            *f = true;
        }
        self.waiting.remove(&r);
    }

    /// Could the judge name something at `now_ms`?
    fn due(&mut self, now_ms: u64) -> bool {
        let Some(since_ms) = self.since_ms else {
            return false;
        };
        if !self.waiting.is_empty() {
            return true;
        }
        let (silence, reports) = (self.silence_ms, &self.report_ms);
        let silent = |r: usize| Some(reports[r].unwrap_or(since_ms) + silence);
        if top_due(&mut self.silent_heap, &self.finished, now_ms, silent) {
            return true;
        }
        let (progress, timeout_ms) = (&self.progress, self.timeout_ms);
        let still = |r: usize| {
            progress[r].map(|(_, since, local)| {
                since
                    + if local {
                        local_work_allowance_ms(timeout_ms)
                    } else {
                        timeout_ms
                    }
            })
        };
        top_due(&mut self.still_heap, &self.finished, now_ms, still)
    }
}

/// Whether some rank's real deadline (`real`) has passed by `now_ms`; entries that come up
/// early are moved to their real deadline, those of finished ranks (or with none) dropped.
fn top_due(
    heap: &mut BinaryHeap<Reverse<(u64, Rank)>>,
    finished: &[bool],
    now_ms: u64,
    real: impl Fn(usize) -> Option<u64>,
) -> bool {
    while let Some(&Reverse((due, r))) = heap.peek() {
        if due > now_ms {
            return false;
        }
        let i = r as usize;
        if finished.get(i).copied().unwrap_or(true) {
            heap.pop();
            continue;
        }
        match real(i) {
            Some(d) if d <= now_ms => return true,
            Some(d) => {
                heap.pop();
                heap.push(Reverse((d, r)));
            }
            None => {
                heap.pop();
            }
        }
    }
    false
}

/// How long the coordinator waits for the counters of the ranks a verdict names.
const COUNTERS_GRACE: Duration = Duration::from_millis(1500);

/// A rank's latest moved counters (each report covers the whole run so far), under the
/// connection's own rank and the table's host, at most `evidence::MAX_MOVES`.
/// The verdicts' messages as one reason for every rank, bounded ([`bounded_reason`]).
fn verdict_reason(v: &[Verdict]) -> String {
    bounded_reason(&v.iter().map(|v| v.message.as_str()).collect::<Vec<_>>())
}

/// How many verdicts the end-of-run message carries to the ranks (each rank prints only
/// their messages; rank 0's report has them all); the rest are counted.
pub const SENT_VERDICTS: usize = 16;

fn note_counters(rep: &mut CoordinatorReport, r: Rank, mut moved: Vec<CounterMove>) {
    if moved.is_empty() {
        return;
    }
    moved.truncate(evidence::MAX_MOVES);
    let host = rep_host(&rep.ranks, r);
    for m in &mut moved {
        m.rank = r;
        m.host = host.clone();
    }
    rep.port_counters.insert(r, moved);
}

fn rep_host(ranks: &[RankInfo], r: Rank) -> String {
    ranks
        .iter()
        .find(|i| i.rank == r)
        .map(|i| i.host.clone())
        .unwrap_or_else(|| "?".into())
}

/// One line for a stuck report, naming both ends.
pub fn stuck_line(w: &WaitReport, ranks: &[RankInfo]) -> String {
    let me = rep_host(ranks, w.rank);
    let (n, peer) = (shown(ranks, w.rank), w.waiting_on.map(|p| shown(ranks, p)));
    match w.waiting_on {
        Some(p) if w.waiting_to_receive => format!(
            "rank {n} ({me}) waited {} ms for data from rank {} ({}) in {} step {} channel {} ({} bytes received)",
            w.since_progress_ms,
            peer.unwrap_or(p),
            rep_host(ranks, p),
            w.phase.name(),
            w.step,
            w.channel,
            w.bytes_received
        ),
        Some(p) => format!(
            "rank {n} ({me}) was blocked {} ms sending to rank {} ({}) in {} step {} channel {}",
            w.since_progress_ms,
            peer.unwrap_or(p),
            rep_host(ranks, p),
            w.phase.name(),
            w.step,
            w.channel
        ),
        None => format!(
            "rank {n} ({me}) made no progress for {} ms in {}",
            w.since_progress_ms,
            w.phase.name()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::model::RankInfo;
    use crate::ring::rendezvous::join;

    /// A coordinator for token "t" and options "p", no scan.
    fn test_cfg(
        world: u32,
        timeout: Duration,
        advertised: String,
        judge: Option<Judge>,
    ) -> CoordinatorConfig {
        CoordinatorConfig {
            world,
            token: "t".into(),
            timeout,
            join_timeout: timeout,
            advertised,
            params: "p".into(),
            judge,
            scan: None,
            on_row: None,
            rings: None,
            nodes: Vec::new(),
            silent: BTreeSet::new(),
            silent_wait: Duration::ZERO,
            relay: None,
            interrupt: None,
        }
    }

    /// The next message after the coordinator's word on its join window (a raw rank's read).
    fn read_past_window(s: &mut TcpStream) -> Result<Msg, WireError> {
        loop {
            match wire::read_msg(s) {
                Ok(Msg::Window { .. }) => continue,
                other => return other,
            }
        }
    }

    /// A rank's results with nothing in them (the coordinator's logic does not read them).
    fn no_results(rank: u32) -> Msg {
        Msg::Results(RankResults {
            rank,
            rows: vec![],
            links: vec![],
            link_size_bytes: 0,
            port_counters: vec![],
        })
    }

    fn hello(rank: u32, world: u32, token: &str) -> Hello {
        Hello {
            protocol: wire::PROTOCOL,
            rank,
            world,
            token: token.into(),
            info: RankInfo {
                neighbor: None,
                port_max: None,
                rails: Vec::new(),
                node: None,
                capabilities: Vec::new(),
                rank,
                host: format!("h{rank}"),
                address: format!("127.0.0.1:{}", 1000 + rank),
                device: Some("lo".into()),
                transport: "tcp".into(),
                pid: None,
            },
            capabilities: vec!["tcp".into()],
            params: "p".into(),
        }
    }

    /// `cfg`'s world of ranks over real control connections on loopback (`advertised` is set
    /// here): each joins, says ready and has its go, then runs `body` on its own thread; the
    /// coordinator runs on another. Returns what each body returned, in rank order.
    fn run_ranks<T: Send + 'static>(
        cfg: CoordinatorConfig,
        limits: Limits,
        body: impl Fn(u32, crate::ring::rendezvous::Session) -> T + Send + Sync + 'static,
    ) -> (Vec<T>, thread::JoinHandle<CoordinatorReport>) {
        run_ranks_within(cfg, limits, Duration::from_secs(5), body)
    }

    /// [`run_ranks`] with the ranks' own `timeout` (their silence deadline for the
    /// coordinator is `silence(timeout)`).
    fn run_ranks_within<T: Send + 'static>(
        mut cfg: CoordinatorConfig,
        limits: Limits,
        timeout: Duration,
        body: impl Fn(u32, crate::ring::rendezvous::Session) -> T + Send + Sync + 'static,
    ) -> (Vec<T>, thread::JoinHandle<CoordinatorReport>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        cfg.advertised = addr.clone();
        let world = cfg.world;
        let coord = thread::spawn(move || coordinate_with(l, cfg, limits));
        let body = Arc::new(body);
        let ranks: Vec<_> = (0..world)
            .map(|r| {
                let (addr, body) = (addr.clone(), body.clone());
                thread::spawn(move || {
                    let s = join(&addr, hello(r, world, "t"), timeout).unwrap();
                    s.send(&Msg::Ready { rank: r }).unwrap();
                    s.wait_go(Duration::from_secs(5)).unwrap();
                    body(r, s)
                })
            })
            .collect();
        (ranks.into_iter().map(|h| h.join().unwrap()).collect(), coord)
    }

    #[test]
    fn validation_table() {
        let mut seen = BTreeMap::new();
        seen.insert(1, hello(1, 4, "t").info);
        let mut bad_proto = hello(0, 4, "t");
        bad_proto.protocol = 99;
        let mut other_params = hello(0, 4, "t");
        other_params.params = "q".into();
        let mut odd_host = hello(2, 4, "t");
        odd_host.info.host = "\x1b]0;owned\x07".into();
        let mut many_caps = hello(0, 4, "t");
        many_caps.capabilities = (0..9).map(|i| format!("t{i}")).collect();
        let mut odd_cap = hello(0, 4, "t");
        odd_cap.info.capabilities = vec!["rdma\n".into()];
        let mut long_cap = hello(0, 4, "t");
        long_cap.capabilities = vec!["x".repeat(17)];
        let cfg = test_cfg(4, Duration::from_secs(1), String::new(), None);
        let cases = [
            (hello(0, 4, "t"), None),
            (other_params, Some("runs with options [q], rank 0 with [p]")),
            (hello(0, 4, "x"), Some("wrong token")),
            (hello(0, 3, "t"), Some("world size 3")),
            (hello(9, 9, "t"), Some("world size 9")),
            (hello(1, 4, "t"), Some("already joined from h1")),
            (bad_proto, Some("protocol 99")),
            (odd_host, Some("rank 2's host is not plain text")),
            (
                many_caps,
                Some("rank 0's capabilities: 9 entries, at most 8 allowed"),
            ),
            (odd_cap, Some("rank 0's capabilities: \"rdma")),
            (long_cap, Some("is not a transport name (at most 16")),
        ];
        for (h, want) in cases {
            let got = validate(&h, &cfg, &seen).err();
            match (got, want) {
                (None, None) => {}
                (Some(g), Some(w)) => assert!(g.contains(w), "{g}"),
                (g, w) => panic!("rank {}: got {g:?}, want {w:?}", h.rank),
            }
        }
    }

    #[test]
    fn a_world_over_the_fd_limit_is_the_coordinators_error_naming_what_to_set() {
        assert_eq!(check_fd_limit(4, 1024), Ok(()));
        assert_eq!(check_fd_limit(16_384, files_needed(16_384)), Ok(()));
        let e = check_fd_limit(16_384, 4096).unwrap_err();
        assert!(
            e.starts_with("coordinator: 16384 ranks need 16448 open files"),
            "{e}"
        );
        assert!(
            e.contains("is 4096") && e.contains("`ulimit -Hn 16448`") && e.contains("LimitNOFILE=16448"),
            "{e}"
        );
    }

    #[test]
    fn a_table_over_the_frame_limit_is_an_error_naming_the_limit_never_dropped() {
        let ranks: Vec<RankInfo> = (0..4096)
            .map(|r| hello(r, 4096, "t").info)
            .map(|mut i| {
                i.host = "h".repeat(255);
                i
            })
            .collect();
        let e = crate::ring::control::frame(&Msg::Table {
            ranks,
            more: false,
            shared_transport: None,
        })
        .unwrap_err();
        assert!(e.starts_with("its table message is "), "{e}");
        assert!(
            e.ends_with(&format!(
                "bytes, over the control frame limit of {} bytes",
                wire::MAX_FRAME
            )),
            "{e}"
        );
    }

    #[test]
    fn missing_rank_message_names_ranks_and_what_to_check() {
        let e = BootstrapError::Missing {
            missing: vec![2, 5],
            silent: vec![],
            world: 8,
            coordinator: "10.0.0.1:29517".into(),
            secs: 30,
        };
        assert_eq!(
            e.to_string(),
            "2 of 8 ranks never reached the coordinator at 10.0.0.1:29517 within 30 s (--join-timeout): missing ranks \
             2, 5; check that \
             they were started (same --world and token), that 10.0.0.1:29517 is reachable from their hosts (firewall on \
             TCP port 29517), and that the coordinator address is on an interface they can route to"
        );
    }

    #[test]
    fn gathers_rejects_and_times_out() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let cfg = test_cfg(3, Duration::from_millis(1500), addr.clone(), None);
        let coord = thread::spawn(move || coordinate(l, cfg));
        // Garbage, then a wrong token, then one good rank; rank 2 never comes.
        let mut g = TcpStream::connect(&addr).unwrap();
        use std::io::Write;
        g.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        let wrong = join(&addr, hello(1, 3, "nope"), Duration::from_secs(2))
            .err()
            .unwrap();
        assert!(
            wrong.to_string().contains("rejected this rank: wrong token"),
            "{wrong}"
        );
        let a = thread::spawn({
            let addr = addr.clone();
            move || {
                join(&addr, hello(0, 3, "t"), Duration::from_secs(1))
                    .err()
                    .unwrap()
                    .to_string()
            }
        });
        let t0 = Instant::now();
        let rep = coord.join().unwrap();
        assert!(t0.elapsed() < Duration::from_secs(3));
        let err = a.join().unwrap();
        assert!(err.contains("missing ranks 1, 2"), "{err}");
        assert_eq!(rep.abort.as_deref(), Some(err.as_str()));
        let rejected: Vec<_> = rep
            .events
            .iter()
            .filter(|e| matches!(e, Event::Rejected { .. }))
            .collect();
        assert_eq!(rejected.len(), 2, "{:?}", rep.events);
    }

    /// Issue 18: the join window is `join_timeout`, not the data plane's `timeout`: a rank
    /// started after `timeout` (launch skew) still joins and the run goes, with the watchdog
    /// as judge and no verdict; a rank that never joins is named as missing with the join
    /// window, never as a stall.
    #[test]
    fn join_window_is_its_own_deadline() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let mut cfg = test_cfg(
            2,
            Duration::from_secs(1),
            addr.clone(),
            Some(crate::ring::run::watchdog_judge(Duration::from_secs(1))),
        );
        cfg.join_timeout = Duration::from_secs(4);
        let coord = thread::spawn(move || coordinate(l, cfg));
        let ranks: Vec<_> = (0..2)
            .map(|r| {
                let addr = addr.clone();
                thread::spawn(move || {
                    // Rank 1 starts 1.5 s late: past `timeout`, within the join window.
                    thread::sleep(Duration::from_millis(1500 * r as u64));
                    let s = crate::ring::rendezvous::join_within(
                        &addr,
                        hello(r, 2, "t"),
                        Duration::from_secs(4),
                        Duration::from_secs(1),
                    )
                    .unwrap();
                    s.send(&Msg::Ready { rank: r }).unwrap();
                    s.wait_go(Duration::from_secs(5)).unwrap();
                    s.send(&no_results(r)).unwrap();
                    s.wait_done(Duration::from_secs(5)).unwrap()
                })
            })
            .collect();
        for h in ranks {
            assert_eq!(h.join().unwrap(), (false, vec![], 0));
        }
        let rep = coord.join().unwrap();
        assert!(rep.abort.is_none() && rep.verdicts.is_empty(), "{:?}", rep.abort);

        // Rank 1 never comes: named missing after the join window (not `timeout`), no verdict.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let mut cfg = test_cfg(
            2,
            Duration::from_secs(1),
            addr.clone(),
            Some(crate::ring::run::watchdog_judge(Duration::from_secs(1))),
        );
        cfg.join_timeout = Duration::from_secs(2);
        let t0 = Instant::now();
        let coord = thread::spawn(move || coordinate(l, cfg));
        let e = crate::ring::rendezvous::join_within(
            &addr,
            hello(0, 2, "t"),
            Duration::from_secs(2),
            Duration::from_secs(1),
        )
        .err()
        .unwrap()
        .to_string();
        let rep = coord.join().unwrap();
        let took = t0.elapsed();
        assert!(
            (Duration::from_millis(1900)..Duration::from_secs(4)).contains(&took),
            "{took:?}"
        );
        assert!(
            e.contains("never reached the coordinator")
                && e.contains("within 2 s (--join-timeout): missing rank 1"),
            "{e}"
        );
        assert_eq!(rep.abort.as_deref(), Some(e.as_str()));
        assert!(rep.verdicts.is_empty(), "{:?}", rep.verdicts);
    }

    /// Issue 20: the short wait for a node that never declared its rails starts only once
    /// every declared rank joined; until then the join window holds for everyone.
    /// A rank that connected long before rank 0's coordinator read its hello waits on rank
    /// 0's join window, not on its own start: it is seated and runs although its own
    /// `--join-timeout` (+ grace) ran out before the last rank came.
    #[test]
    fn a_rank_started_well_before_rank_0_joins() {
        use crate::ring::rendezvous::{JOIN_GRACE, join_within};
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let t0 = Instant::now();
        // Rank 0 of the job started first, with a 1 s window of its own: connected at once
        // (the kernel queues it until the coordinator reads it).
        let early = {
            let addr = addr.clone();
            thread::spawn(move || {
                let s = join_within(&addr, hello(0, 2, "t"), Duration::from_secs(1), Duration::from_secs(5))
                    .map_err(|e| e.to_string())?;
                s.send(&Msg::Ready { rank: 0 }).map_err(|e| e.to_string())?;
                s.wait_go(Duration::from_secs(10)).map_err(|e| e.to_string())?;
                s.send(&no_results(0)).map_err(|e| e.to_string())?;
                s.wait_done(Duration::from_secs(10)).map_err(|e| e.to_string())
            })
        };
        let mut cfg = test_cfg(2, Duration::from_secs(5), addr.clone(), None);
        cfg.join_timeout = Duration::from_secs(20);
        let coord = thread::spawn(move || coordinate(l, cfg));
        // The other rank comes only once the early rank's own clock has run out.
        thread::sleep((t0 + Duration::from_secs(1) + JOIN_GRACE + Duration::from_millis(500)).saturating_duration_since(Instant::now()));
        let s = join_within(&addr, hello(1, 2, "t"), Duration::from_secs(20), Duration::from_secs(5)).unwrap();
        s.send(&Msg::Ready { rank: 1 }).unwrap();
        s.wait_go(Duration::from_secs(10)).unwrap();
        s.send(&no_results(1)).unwrap();
        assert_eq!(s.wait_done(Duration::from_secs(10)).unwrap(), (false, vec![], 0));
        assert_eq!(early.join().unwrap(), Ok((false, vec![], 0)));
        let rep = coord.join().unwrap();
        assert!(rep.abort.is_none(), "{:?}", rep.abort);
    }

    /// A rank that says it was interrupted (SIGTERM) ends the run at once with where it was,
    /// and its closing blames nobody: no verdict, no lost rank; the other ranks are told.
    #[test]
    fn an_interrupted_rank_ends_the_run_at_once_and_blames_nobody() {
        let cfg = test_cfg(
            3,
            Duration::from_secs(20),
            String::new(),
            Some(crate::ring::run::watchdog_judge(Duration::from_secs(20))),
        );
        let t0 = Instant::now();
        let rows_sent = Arc::new(std::sync::Barrier::new(3));
        let (ranks, coord) = run_ranks(cfg, Limits::default(), move |r, s| {
            // One size finished on every rank before the signal: the report keeps it.
            let row = RowResult {
                size_bytes: 1024,
                time_us: 10.0,
                wrong: Some(0),
                in_place: None,
            };
            s.send(&Msg::Row { rank: r, row }).unwrap();
            rows_sent.wait();
            if r == 2 {
                s.send(&Msg::Interrupted {
                    rank: 2,
                    signal: "SIGTERM".into(),
                    at: "size 1024 bytes (1 of the sweep), step 1 of round 3".into(),
                })
                .unwrap();
                drop(s);
                return String::new();
            }
            s.wait_done(Duration::from_secs(10)).err().unwrap().to_string()
        });
        let want = "interrupted by SIGTERM on rank 2 (h2) at size 1024 bytes (1 of the sweep), step 1 of round 3; \
                    the report holds what finished before";
        assert_eq!(ranks, [want, want, ""]);
        // Not the 20 s timeout nor a failure's grace.
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        let rep = coord.join().unwrap();
        assert_eq!(rep.abort.as_deref(), Some(want));
        assert_eq!(rep.interrupted.as_deref(), Some(want));
        assert!(rep.verdicts.is_empty() && rep.lost.is_empty() && rep.closed.is_empty(), "{rep:?}");
        let sizes: Vec<(Rank, Vec<u64>)> = rep
            .results
            .iter()
            .map(|x| (x.rank, x.rows.iter().map(|r| r.size_bytes).collect()))
            .collect();
        assert_eq!(sizes, [(0, vec![1024]), (1, vec![1024]), (2, vec![1024])]);
    }

    /// Rank 0's own interrupt while ranks gather ends the join at once: the joined ranks are
    /// told, no rank is named missing by a verdict.
    #[test]
    fn an_interrupt_during_the_join_ends_it_without_a_verdict() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let interrupt = Arc::new(Interrupt::default());
        let mut cfg = test_cfg(
            3,
            Duration::from_secs(5),
            addr.clone(),
            Some(crate::ring::run::watchdog_judge(Duration::from_secs(5))),
        );
        cfg.join_timeout = Duration::from_secs(30);
        cfg.interrupt = Some(interrupt.clone());
        let coord = thread::spawn(move || coordinate(l, cfg));
        // Rank 1 by hand: once it is told its window it is seated; then the signal comes.
        use std::io::Write;
        let mut c = TcpStream::connect(&addr).unwrap();
        c.write_all(&frame(&Msg::Hello(hello(1, 3, "t")))).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        assert!(matches!(wire::read_msg(&mut c), Ok(Msg::Window { closes_in_ms }) if closes_in_ms > 20_000));
        let t0 = Instant::now();
        interrupt.note(15);
        let e = match read_past_window(&mut c) {
            Ok(Msg::Abort { reason }) => reason,
            other => panic!("{other:?}"),
        };
        let rep = coord.join().unwrap();
        assert!(
            e.starts_with("interrupted by SIGTERM on rank 0 while 1 of 3 ranks had joined (missing ranks 0, 2)"),
            "{e}"
        );
        assert_eq!(rep.abort.as_deref(), Some(e.as_str()));
        assert!(rep.verdicts.is_empty(), "{:?}", rep.verdicts);
        // Not the 30 s join window.
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    }

    fn many_verdicts(n: usize) -> Vec<Verdict> {
        (0..n)
            .map(|r| Verdict {
                rail: None,
                kind: crate::ring::model::VerdictKind::RankLost,
                from_rank: Some(r as u32),
                to_rank: None,
                from_host: None,
                to_host: None,
                evidence: BTreeMap::new(),
                message: format!("rank {r} (node-with-a-long-name-{r:05}) sent nothing for 10 s (process stopped, or its host is gone)"),
                next: None,
            })
            .collect()
    }

    /// A verdict on thousands of ranks still reaches every rank as a reason (bounded, "and
    /// 11,996 more"), not a frame over the limit that is never sent (COORDINATOR LOST).
    #[test]
    fn thousands_of_verdicts_reach_every_rank_bounded() {
        fn judge(rep: &CoordinatorReport, _now_ms: u64, _final: bool) -> Vec<Verdict> {
            if rep.stuck.is_empty() { vec![] } else { many_verdicts(12_000) }
        }
        let cfg = test_cfg(2, Duration::from_secs(20), String::new(), Some(Arc::new(judge)));
        let (ranks, coord) = run_ranks(cfg, Limits::default(), move |r, s| {
            if r == 1 {
                let w = crate::ring::collective::allreduce::Progress::default().report(1, 0);
                s.send(&Msg::Stuck { wait: w, port_counters: vec![] }).unwrap();
            }
            s.wait_done(Duration::from_secs(10)).err().unwrap().to_string()
        });
        for why in ranks {
            assert!(why.starts_with("rank 0 (node-with-a-long-name-00000) sent nothing"), "{why}");
            assert!(why.ends_with("; and 11,996 more"), "{why}");
            assert!(why.len() < crate::ring::model::REASON_CHARS + 40, "{}", why.len());
        }
        let rep = coord.join().unwrap();
        assert_eq!(rep.verdicts.len(), 12_000);
    }

    /// The end-of-run message carries the first verdicts and counts the rest: it fits a
    /// frame whatever their number, and each rank says how many more rank 0 holds.
    #[test]
    fn the_end_of_a_run_with_thousands_of_verdicts_is_sent_bounded() {
        fn judge(_: &CoordinatorReport, _now_ms: u64, final_call: bool) -> Vec<Verdict> {
            if final_call { many_verdicts(12_000) } else { vec![] }
        }
        let cfg = test_cfg(2, Duration::from_secs(20), String::new(), Some(Arc::new(judge)));
        let (ranks, coord) = run_ranks(cfg, Limits::default(), move |r, s| {
            s.send(&no_results(r)).unwrap();
            s.wait_done(Duration::from_secs(10)).map_err(|e| e.to_string())
        });
        for got in ranks {
            let (failed, v, more) = got.unwrap();
            assert!(failed);
            assert_eq!((v.len(), more), (SENT_VERDICTS, 12_000 - SENT_VERDICTS as u64));
            let why = crate::ring::run::failed_why(&v, more);
            assert!(why.ends_with("; and 11,984 more (rank 0's report lists them)"), "{why}");
        }
        let rep = coord.join().unwrap();
        assert_eq!(rep.verdicts.len(), 12_000);
        assert!(rep.coordinator_error.is_none(), "{:?}", rep.coordinator_error);
    }

    #[test]
    fn gather_deadline_table() {
        let t0 = Instant::now();
        let mut cfg = test_cfg(3, Duration::from_secs(1), String::new(), None);
        (cfg.join_timeout, cfg.silent_wait) = (Duration::from_secs(30), Duration::from_secs(5));
        let joined = |rs: &[Rank]| -> BTreeMap<Rank, RankInfo> {
            rs.iter().map(|&r| (r, hello(r, 3, "t").info)).collect()
        };
        let (full, short) = (t0 + Duration::from_secs(30), t0 + Duration::from_secs(5));
        // No silent node: the join window, however many joined.
        assert_eq!(gather_deadline(&cfg, &joined(&[0, 1]), t0), full);
        cfg.silent = BTreeSet::from([2]);
        // A declared rank still missing: the join window.
        assert_eq!(gather_deadline(&cfg, &joined(&[]), t0), full);
        assert_eq!(gather_deadline(&cfg, &joined(&[0]), t0), full);
        // Every declared rank joined: the short wait, from the coordinator's start.
        assert_eq!(gather_deadline(&cfg, &joined(&[0, 1]), t0), short);
        // Never past the join window.
        cfg.join_timeout = Duration::from_secs(2);
        assert_eq!(
            gather_deadline(&cfg, &joined(&[0, 1]), t0),
            t0 + Duration::from_secs(2)
        );
    }

    /// A coordinator of rail 1's ring of nodes 0, 2, 5, node 5 silent (short wait 500 ms),
    /// started now with a join window of `join_s`: its address, start and thread.
    fn silent_rail(join_s: u64) -> (String, Instant, thread::JoinHandle<CoordinatorReport>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let mut cfg = test_cfg(3, Duration::from_secs(1), addr.clone(), None);
        cfg.join_timeout = Duration::from_secs(join_s);
        cfg.silent_wait = Duration::from_millis(500);
        cfg.nodes = vec![0, 2, 5];
        cfg.silent = BTreeSet::from([2]);
        (addr, Instant::now(), thread::spawn(move || coordinate(l, cfg)))
    }

    /// Issue 20: on rail 1's ring of nodes 0, 2, 5 where node 5 never declared its rails, node
    /// 2 (declared) joins after the short wait for node 5 and is seated, not named missing;
    /// the run ends right after it joined (well before the join window), and the abort names
    /// only node 5, as a node that never declared its rails.
    #[test]
    fn a_declared_rank_joining_after_the_short_wait_is_seated_and_only_the_silent_node_named() {
        let (addr, t0, coord) = silent_rail(8);
        let ranks: Vec<_> = (0..2)
            .map(|r| {
                let addr = addr.clone();
                thread::spawn(move || {
                    // Ring rank 1 (node 2) is slow: past the short wait, within the window.
                    thread::sleep(Duration::from_millis(1500 * r as u64));
                    crate::ring::rendezvous::join_within(
                        &addr,
                        hello(r, 3, "t"),
                        Duration::from_secs(8),
                        Duration::from_secs(1),
                    )
                    .err()
                    .unwrap()
                    .to_string()
                })
            })
            .collect();
        let rep = coord.join().unwrap();
        let took = t0.elapsed();
        let joined: Vec<Rank> = rep.ranks.iter().map(|i| i.rank).collect();
        assert_eq!(joined, [0, 1], "{:?}", rep.abort);
        let abort = rep.abort.clone().unwrap();
        assert!(
            abort.starts_with(&format!(
                "1 of 3 ranks never reached the coordinator at {addr}: missing rank 5, which never declared its \
                 rails to rank 0 within 8 s (--join-timeout): the node is missing on every rail"
            )),
            "{abort}"
        );
        assert!(!abort.contains("rank 2"), "{abort}");
        for h in ranks {
            assert_eq!(h.join().unwrap(), abort);
        }
        // Ended once ring rank 1 joined: never at the short wait, never at the 8 s window.
        assert!(
            (Duration::from_millis(1400)..Duration::from_secs(7)).contains(&took),
            "{took:?}"
        );
        // A declared rank that never comes is missing at the join window, with the silent one.
        let (addr, t0, coord) = silent_rail(2);
        let e = join(&addr, hello(0, 3, "t"), Duration::from_secs(2))
            .err()
            .unwrap()
            .to_string();
        let _ = coord.join().unwrap();
        assert!(t0.elapsed() >= Duration::from_millis(1900), "{:?}", t0.elapsed());
        assert!(
            e.contains("within 2 s (--join-timeout): missing ranks 2, 5;")
                && e.ends_with("; rank 5 never declared its rails to rank 0 either (missing on every rail)"),
            "{e}"
        );
    }

    /// Issue 20: on rail 1's ring of nodes 0, 2, 3, 5, a claim of ring rank 3 is refused and
    /// told "busy" as rank 5 (the node the operator launched), never as rank 3; a ring rank no
    /// node has is said to be one.
    #[test]
    fn claim_refusals_on_a_partial_rail_name_the_node_rank() {
        use std::io::Write;
        let mut cfg = test_cfg(4, Duration::from_secs(1), String::new(), None);
        cfg.nodes = vec![0, 2, 3, 5];
        let mut seen = BTreeMap::new();
        seen.insert(3, hello(3, 4, "t").info);
        let mut other_params = hello(3, 4, "t");
        other_params.params = "q".into();
        let mut odd_host = hello(3, 4, "t");
        odd_host.info.host = "\x1b]0;owned\x07".into();
        let cases = [
            (hello(3, 4, "t"), "rank 5 already joined from h3"),
            (other_params, "rank 5 runs with options [q], rank 0 with [p]"),
            (odd_host, "rank 5's host is not plain text"),
            (
                hello(3, 3, "t"),
                "rank 5 says this rail's ring has 3 nodes, the coordinator has 4 (nodes 0, 2, 3, 5)",
            ),
            (
                hello(7, 4, "t"),
                "ring rank 7 is out of range for this rail's ring of 4 nodes (0, 2, 3, 5)",
            ),
        ];
        for (h, want) in cases {
            let got = validate(&h, &cfg, &seen).unwrap_err();
            assert!(got.starts_with(want), "{got}");
            assert!(!got.contains("rank 3"), "{got}");
        }
        // Over the wire: a second claim of ring rank 3 while its holder lives.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let mut cfg = test_cfg(4, Duration::from_secs(2), addr.clone(), None);
        cfg.nodes = vec![0, 2, 3, 5];
        let coord = thread::spawn(move || coordinate(l, cfg));
        let mut a = TcpStream::connect(&addr).unwrap();
        a.write_all(&frame(&Msg::Hello(hello(3, 4, "t")))).unwrap();
        thread::sleep(Duration::from_millis(300));
        let mut b = TcpStream::connect(&addr).unwrap();
        b.write_all(&frame(&Msg::Hello(hello(3, 4, "t")))).unwrap();
        b.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let reason = match wire::read_msg(&mut b) {
            Ok(Msg::Reject { reason }) => reason,
            other => panic!("{other:?}"),
        };
        let pa = a.local_addr().unwrap().to_string();
        assert_eq!(
            reason,
            format!("{BUSY}rank 5 is held by an earlier connection from {pa}; checking that it is alive")
        );
        // The others never come: named as their nodes.
        let rep = coord.join().unwrap();
        let abort = rep.abort.unwrap();
        assert!(abort.contains("missing ranks 0, 2, 3;"), "{abort}");
        drop((a, b));
    }

    /// Issue 18, end to end over real connections: a world whose whole table is over 1 MiB
    /// (400 ranks, 255-byte host names, 8 rails each with long fields), where rank 0 is every
    /// rank's neighbour (its part is the whole table), runs: rank 0's part arrives in several
    /// frames, each under the frame limit, and every rank gets its go and its end.
    #[test]
    fn a_table_over_1_mib_arrives_in_bounded_frames_and_the_run_goes() {
        // 400 real connections: not beside the paced in-process worlds of verdict_tests.
        let _one = crate::ring::verdict_tests::ONE_WORLD
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        use crate::ring::model::RailPort;
        use std::io::Read;
        const N: u32 = 400;
        let big_hello = |r: u32| {
            let mut h = hello(r, N, "t");
            h.info.host = format!("{r:05}-{}", "h".repeat(249));
            h.info.rails = (0..8)
                .map(|k| RailPort {
                    rail: k,
                    device: format!("mlx5_{k}"),
                    port: Some(1),
                    netdev: Some(format!("enp{k}s0f0np0")),
                    state: Some("ACTIVE".into()),
                    usable: true,
                    label: Some(format!("mlx5_{k}:1 gid 3 (enp{k}s0f0np0) {}", "x".repeat(120))),
                    address: Some(format!("[fd00:1234:5678:9abc:def0:1234:{k:x}:{r:x}]:29600")),
                })
                .collect();
            h
        };
        let whole: usize = (0..N)
            .map(|r| serde_json::to_vec(&big_hello(r).info).unwrap().len())
            .sum();
        assert!(whole > 1 << 20, "{whole}");
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let mut cfg = test_cfg(N, Duration::from_secs(20), addr.clone(), None);
        // Rank 0 next to everyone: ring k sends 0 -> k (the others' own entries are skipped).
        cfg.rings = Some(Arc::new(|w: u32| {
            (1..w)
                .map(|k| RingOrder {
                    next: (0..w).map(|i| if i == 0 { k } else { i }).collect(),
                })
                .collect()
        }));
        let t0 = Instant::now();
        let coord = thread::spawn(move || coordinate(l, cfg));
        let others: Vec<_> = (1..N)
            .map(|r| {
                let (addr, h) = (addr.clone(), big_hello(r));
                thread::Builder::new()
                    .stack_size(256 << 10)
                    .spawn(move || {
                        let s = join(&addr, h, Duration::from_secs(20)).map_err(|e| e.to_string())?;
                        s.send(&Msg::Ready { rank: r }).map_err(|e| e.to_string())?;
                        s.wait_go(Duration::from_secs(20)).map_err(|e| e.to_string())?;
                        s.send(&no_results(r)).map_err(|e| e.to_string())?;
                        let got = s.wait_done(Duration::from_secs(20)).map_err(|e| e.to_string())?;
                        Ok::<_, String>((s.table.len(), got))
                    })
                    .unwrap()
            })
            .collect();
        // Rank 0 reads its frames by hand: their sizes are what this test is about.
        let s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut w = &s;
        wire::write_msg(&mut w, &Msg::Hello(big_hello(0))).unwrap();
        let mut r = &s;
        let mut frames = Vec::new();
        let mut table = Vec::new();
        let read_frame = |r: &mut &TcpStream| {
            let mut head = [0u8; 8];
            r.read_exact(&mut head).unwrap();
            assert_eq!(&head[..4], wire::MAGIC);
            let len = u32::from_be_bytes([head[4], head[5], head[6], head[7]]) as usize;
            assert!(len <= wire::MAX_FRAME, "a frame of {len} bytes");
            let mut body = vec![0u8; len];
            r.read_exact(&mut body).unwrap();
            (len, wire::decode(&body).unwrap())
        };
        loop {
            match read_frame(&mut r) {
                (len, Msg::Table { ranks, more, .. }) => {
                    frames.push(len);
                    table.extend(ranks);
                    if !more {
                        break;
                    }
                }
                (_, Msg::Ping | Msg::Window { .. }) => {}
                (_, other) => panic!("{other:?}"),
            }
        }
        assert!(frames.len() >= 3, "{frames:?}");
        assert!(frames.iter().sum::<usize>() > 1 << 20, "{frames:?}");
        assert_eq!(table.len(), N as usize);
        assert_eq!(table[7], big_hello(7).info);
        wire::write_msg(&mut w, &Msg::Ready { rank: 0 }).unwrap();
        while !matches!(read_frame(&mut r).1, Msg::Go) {}
        wire::write_msg(&mut w, &no_results(0)).unwrap();
        while !matches!(read_frame(&mut r).1, Msg::Done { .. }) {}
        for (i, h) in others.into_iter().enumerate() {
            // Each other rank's part: itself and rank 0.
            assert_eq!(h.join().unwrap(), Ok((2, (false, vec![], 0))), "rank {}", i + 1);
        }
        let rep = coord.join().unwrap();
        assert!(
            rep.abort.is_none() && rep.coordinator_error.is_none(),
            "{:?}",
            rep.abort
        );
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    }

    #[test]
    fn judge_verdicts_reach_every_rank_and_fail_the_run() {
        fn judge(rep: &CoordinatorReport, _now_ms: u64, final_call: bool) -> Vec<Verdict> {
            if !final_call {
                return vec![];
            }
            vec![Verdict {
                rail: None,
                kind: crate::ring::model::VerdictKind::SlowLink,
                from_rank: Some(0),
                to_rank: Some(1),
                from_host: None,
                to_host: None,
                evidence: BTreeMap::new(),
                message: format!("judged {} results", rep.results.len()),
                next: None,
            }]
        }
        let cfg = test_cfg(2, Duration::from_secs(5), String::new(), Some(Arc::new(judge)));
        let (ranks, coord) = run_ranks(cfg, Limits::default(), move |r, s| {
            s.send(&no_results(r)).unwrap();
            s.wait_done(Duration::from_secs(5)).unwrap()
        });
        for (failed, verdicts, _) in ranks {
            assert!(failed);
            assert_eq!(verdicts.len(), 1);
            assert_eq!(verdicts[0].message, "judged 2 results");
        }
        let rep = coord.join().unwrap();
        assert_eq!(rep.verdicts.len(), 1);
        assert!(rep.abort.is_none());
    }

    /// A size's row goes to the sink once, when the last rank has it, with every rank's row
    /// in rank order; a row claimed for another rank is refused; a size one rank never
    /// finished is never shown.
    #[test]
    fn rows_reach_the_sink_when_every_rank_finished_the_size() {
        use std::sync::Mutex;
        let row = |size: u64, r: u32| RowResult {
            size_bytes: size,
            time_us: 10.0 + r as f64,
            wrong: Some(0),
            in_place: None,
        };
        type Seen = Vec<(usize, Vec<RowResult>)>;
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let mut cfg = test_cfg(3, Duration::from_secs(5), String::new(), None);
        let sink = seen.clone();
        cfg.on_row = Some(Arc::new(move |ranks: &[RankInfo], rows: Vec<RowResult>| {
            sink.lock().unwrap().push((ranks.len(), rows));
        }));
        let (_, coord) = run_ranks(cfg, Limits::default(), move |r, s| {
            // Rank 2 sends in reverse order and speaks for rank 0 once (refused).
            let mut sizes = vec![8u64, 1024];
            if r == 2 {
                sizes.reverse();
                s.send(&Msg::Row {
                    rank: 0,
                    row: row(4096, 0),
                })
                .unwrap();
            }
            for size in sizes {
                s.send(&Msg::Row {
                    rank: r,
                    row: row(size, r),
                })
                .unwrap();
            }
            // Only rank 1 reaches this size.
            if r == 1 {
                s.send(&Msg::Row {
                    rank: r,
                    row: row(4096, r),
                })
                .unwrap();
            }
            s.send(&no_results(r)).unwrap();
            s.wait_done(Duration::from_secs(5)).unwrap()
        });
        coord.join().unwrap();
        let mut seen = seen.lock().unwrap().clone();
        seen.sort_by_key(|(_, rows)| rows[0].size_bytes);
        assert_eq!(
            seen,
            vec![
                (3, vec![row(8, 0), row(8, 1), row(8, 2)]),
                (3, vec![row(1024, 0), row(1024, 1), row(1024, 2)]),
            ]
        );
    }

    #[test]
    fn a_live_verdict_ends_the_run_at_once_with_its_message() {
        fn judge(rep: &CoordinatorReport, now_ms: u64, _final: bool) -> Vec<Verdict> {
            let Some(w) = rep.stuck.first() else { return vec![] };
            let (at, _) = rep.reports[&w.rank];
            assert!(now_ms >= at);
            vec![Verdict {
                rail: None,
                kind: crate::ring::model::VerdictKind::HangLink,
                from_rank: w.waiting_on,
                to_rank: Some(w.rank),
                from_host: None,
                to_host: None,
                evidence: BTreeMap::new(),
                message: format!("HANG rank {} waits for rank {:?}", w.rank, w.waiting_on),
                next: None,
            }]
        }
        let cfg = test_cfg(2, Duration::from_secs(20), String::new(), Some(Arc::new(judge)));
        let t0 = Instant::now();
        let (ranks, coord) = run_ranks(cfg, Limits::default(), move |r, s| {
            if r == 1 {
                let mut w = crate::ring::collective::allreduce::Progress::default().report(1, 0);
                w.waiting_on = Some(0);
                w.waiting_to_receive = true;
                // The rank's own word for its rank and host is not trusted.
                let moved = CounterMove {
                    rank: 7,
                    host: "elsewhere".into(),
                    device: "mlx5_2".into(),
                    port: 1,
                    netdev: Some("ib2".into()),
                    counter: "symbol_error".into(),
                    delta: 4699,
                };
                s.send(&Msg::Stuck {
                    wait: w,
                    port_counters: vec![moved; evidence::MAX_MOVES + 5],
                })
                .unwrap();
            }
            s.wait_done(Duration::from_secs(10)).err().unwrap().to_string()
        });
        for h in ranks {
            assert_eq!(h, "HANG rank 1 waits for rank Some(0)");
        }
        // Not the 20 s timeout, nor the built-in grace: the verdict ended it.
        assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
        let rep = coord.join().unwrap();
        assert_eq!(rep.verdicts.len(), 1);
        assert_eq!(rep.abort.as_deref(), Some("HANG rank 1 waits for rank Some(0)"));
        // The stuck report's counters, under the connection's rank and the table's host.
        let c = &rep.port_counters[&1];
        assert_eq!(c.len(), evidence::MAX_MOVES);
        assert_eq!(
            (c[0].rank, c[0].host.as_str(), c[0].counter.as_str(), c[0].delta),
            (1, "h1", "symbol_error", 4699)
        );
        assert!(!rep.port_counters.contains_key(&0));
    }

    /// After the abort, a named rank whose own deadline passed at the same moment sends a
    /// stuck (or failed) report, not a counters answer: its counters count all the same, and
    /// the coordinator does not wait out its grace for an answer that already came.
    #[test]
    fn a_stuck_report_after_the_abort_is_the_ranks_counters_answer() {
        fn judge(rep: &CoordinatorReport, _now_ms: u64, _final: bool) -> Vec<Verdict> {
            let Some(w) = rep.stuck.first() else { return vec![] };
            vec![Verdict {
                kind: crate::ring::model::VerdictKind::HangLink,
                from_rank: w.waiting_on,
                to_rank: Some(w.rank),
                from_host: None,
                to_host: None,
                evidence: BTreeMap::new(),
                message: "HANG".into(),
                next: None,
                rail: None,
            }]
        }
        let mv = |counter: &str| CounterMove {
            rank: 9,
            host: "x".into(),
            device: "rxe0".into(),
            port: 1,
            netdev: Some("eth0".into()),
            counter: counter.into(),
            delta: 3,
        };
        let cfg = test_cfg(2, Duration::from_secs(20), String::new(), Some(Arc::new(judge)));
        let (ranks, coord) = run_ranks(cfg, Limits::default(), move |r, s| {
            let mut w = crate::ring::collective::allreduce::Progress::default().report(r, 0);
            if r == 1 {
                w.waiting_on = Some(0);
                w.waiting_to_receive = true;
                s.send(&Msg::Stuck {
                    wait: w,
                    port_counters: vec![mv("rcvd_seq_err")],
                })
                .unwrap();
                return s.wait_done(Duration::from_secs(10)).is_err();
            }
            // Rank 0 learns of the abort, then its own wait passes its deadline.
            let aborted = s.wait_done(Duration::from_secs(10)).is_err();
            w.waiting_on = Some(1);
            s.send(&Msg::Stuck {
                wait: w,
                port_counters: vec![mv("completer_retry_err")],
            })
            .unwrap();
            aborted
        });
        for h in ranks {
            assert!(h);
        }
        let rep = coord.join().unwrap();
        assert_eq!(rep.verdicts.len(), 1);
        assert_eq!(rep.port_counters[&1][0].counter, "rcvd_seq_err");
        let c0 = rep
            .port_counters
            .get(&0)
            .unwrap_or_else(|| panic!("{:?}", rep.port_counters));
        assert_eq!((c0[0].rank, c0[0].counter.as_str()), (0, "completer_retry_err"));
    }

    /// A whole rank over a real control connection: ready, go, results, done.
    fn full_rank(addr: &str, r: u32, world: u32) -> thread::JoinHandle<Result<bool, String>> {
        let addr = addr.to_string();
        thread::spawn(move || {
            let s = join(&addr, hello(r, world, "t"), Duration::from_secs(10)).map_err(|e| e.to_string())?;
            s.send(&Msg::Ready { rank: r }).map_err(|e| e.to_string())?;
            s.wait_go(Duration::from_secs(10)).map_err(|e| e.to_string())?;
            s.send(&Msg::Results(RankResults {
                rank: r,
                rows: vec![],
                links: vec![],
                link_size_bytes: 0,
                port_counters: vec![],
            }))
            .map_err(|e| e.to_string())?;
            s.wait_done(Duration::from_secs(10))
                .map(|(f, _, _)| f)
                .map_err(|e| e.to_string())
        })
    }

    fn frame(m: &Msg) -> Vec<u8> {
        let mut b = Vec::new();
        wire::write_msg(&mut b, m).unwrap();
        b
    }

    /// The by-hand finding of issue 8: 600 connections dripping a byte every 3 s, then the
    /// ranks. Every rank gets in and the run completes.
    #[test]
    fn a_slow_drip_flood_never_refuses_a_real_rank() {
        gate::raise_fd_limit();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let cfg = test_cfg(2, Duration::from_secs(10), addr.clone(), None);
        let coord = thread::spawn(move || coordinate(l, cfg));
        let stop = Arc::new(AtomicBool::new(false));
        let (connected, all_in) = mpsc::channel();
        let drip = {
            let (addr, stop) = (addr.clone(), stop.clone());
            thread::spawn(move || {
                use std::io::Write;
                let mut v: Vec<TcpStream> = Vec::new();
                let mut errs = Vec::new();
                for _ in 0..600 {
                    match TcpStream::connect(&addr) {
                        Ok(c) => v.push(c),
                        Err(e) => errs.push(e.to_string()),
                    }
                }
                let n = (v.len(), errs.first().cloned());
                let _ = connected.send(());
                // A valid frame's start, one byte per round: never garbage, never complete.
                let slow = b"FPR1\0\0\x01\0{\"type\":\"hello\",";
                let mut k = 0;
                while !stop.load(Ordering::Relaxed) {
                    for c in &mut v {
                        let _ = c.write(&slow[k % slow.len()..][..1]);
                    }
                    k += 1;
                    for _ in 0..30 {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        thread::sleep(Duration::from_millis(100));
                    }
                }
                n
            })
        };
        all_in.recv_timeout(Duration::from_secs(20)).unwrap();
        thread::sleep(Duration::from_millis(500));
        let ranks: Vec<_> = (0..2).map(|r| full_rank(&addr, r, 2)).collect();
        for (r, h) in ranks.into_iter().enumerate() {
            assert_eq!(h.join().unwrap(), Ok(false), "rank {r}");
        }
        stop.store(true, Ordering::Relaxed);
        assert_eq!(drip.join().unwrap(), (600, None));
        let rep = coord.join().unwrap();
        assert!(rep.abort.is_none(), "{:?}", rep.abort);
        assert!(rep.events.iter().any(|e| matches!(e, Event::MoreRejected { .. })));
    }

    /// A second live claim of a taken rank is refused naming both source addresses; a claim
    /// after the holder's connection closed takes the slot.
    #[test]
    fn a_duplicate_claim_names_both_addresses_or_replaces_a_dead_holder() {
        use std::io::Write;
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let cfg = test_cfg(2, Duration::from_secs(5), addr.clone(), None);
        let coord = thread::spawn(move || coordinate(l, cfg));
        let mut a = TcpStream::connect(&addr).unwrap();
        a.write_all(&frame(&Msg::Hello(hello(1, 2, "t")))).unwrap();
        thread::sleep(Duration::from_millis(300));
        // The second claim is told "busy" while the holder is checked (it is alive: it
        // answers nothing but its kernel acknowledges), then refused for good.
        let claim = || {
            let mut b = TcpStream::connect(&addr).unwrap();
            b.write_all(&frame(&Msg::Hello(hello(1, 2, "t")))).unwrap();
            b.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            match wire::read_msg(&mut b) {
                Ok(Msg::Reject { reason }) => (b, reason),
                other => panic!("{other:?}"),
            }
        };
        let (mut b, mut reason) = claim();
        let pa = a.local_addr().unwrap().to_string();
        assert_eq!(
            reason,
            format!("{BUSY}rank 1 is held by an earlier connection from {pa}; checking that it is alive")
        );
        let t0 = Instant::now();
        while reason.starts_with(BUSY) && t0.elapsed() < HOLDER_CHECK * 2 {
            thread::sleep(Duration::from_millis(100));
            (b, reason) = claim();
        }
        let pb = b.local_addr().unwrap().to_string();
        assert!(
            reason.starts_with(&format!(
                "rank 1 is already taken by {pa} (h1); a second claim from {pb} is refused"
            )),
            "{reason}"
        );
        drop(a);
        thread::sleep(Duration::from_millis(200));
        let mut c = TcpStream::connect(&addr).unwrap();
        c.write_all(&frame(&Msg::Hello(hello(1, 2, "t")))).unwrap();
        thread::sleep(Duration::from_millis(300));
        let r0 = join(&addr, hello(0, 2, "t"), Duration::from_secs(5)).unwrap();
        assert_eq!(r0.table.len(), 2);
        c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        assert!(matches!(read_past_window(&mut c), Ok(Msg::Table { .. })));
        drop((c, r0));
        let rep = coord.join().unwrap();
        let pc_known = rep
            .events
            .iter()
            .any(|e| matches!(e, Event::Replaced { rank: 1, old_peer, .. } if *old_peer == pa));
        assert!(pc_known, "{:?}", rep.events);
        assert!(
            rep.events.iter().any(
                |e| matches!(e, Event::Rejected { peer, reason } if *peer == pb && reason.contains(&pa))
            ),
            "{:?}",
            rep.events
        );
    }

    /// Rejections are listed up to a cap, then counted; what a stranger sent is escaped.
    #[test]
    fn rejections_are_capped_and_never_carry_raw_peer_bytes() {
        use std::io::Write;
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let cfg = test_cfg(2, Duration::from_millis(2500), addr.clone(), None);
        let coord = thread::spawn(move || coordinate(l, cfg));
        let mut evil = hello(1, 2, "t");
        evil.params = "\x1b[2J\x1b]0;owned\x07\u{9b}31m".repeat(1000);
        let f = frame(&Msg::Hello(evil));
        let n = MAX_REJECTED_EVENTS + 8;
        for _ in 0..n {
            let mut c = TcpStream::connect(&addr).unwrap();
            c.write_all(&f).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            let _ = wire::read_msg(&mut c);
        }
        let rep = coord.join().unwrap();
        let rejected: Vec<_> = rep
            .events
            .iter()
            .filter(|e| matches!(e, Event::Rejected { .. }))
            .collect();
        assert_eq!(rejected.len(), MAX_REJECTED_EVENTS);
        assert_eq!(rep.events.last(), Some(&Event::MoreRejected { count: 8 }));
        for e in &rep.events {
            let line = e.line();
            assert!(!line.chars().any(|c| c.is_control()), "{line:?}");
            assert!(line.len() < 10 * MAX_REASON_CHARS, "{}", line.len());
        }
        let first = rejected[0].line();
        assert!(
            first.contains("runs with options [\\x1b[2J\\x1b]0;owned\\x07\\u{009b}31m"),
            "{first}"
        );
    }

    /// A rank is counted ready once; its reports are its own whatever they say; a message
    /// for another rank is ignored and recorded.
    #[test]
    fn ready_counts_once_and_reports_belong_to_their_connection() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let cfg = test_cfg(2, Duration::from_secs(5), addr.clone(), None);
        let coord = thread::spawn(move || coordinate(l, cfg));
        let r1 = thread::spawn({
            let addr = addr.clone();
            move || join(&addr, hello(1, 2, "t"), Duration::from_secs(5)).unwrap()
        });
        let s0 = join(&addr, hello(0, 2, "t"), Duration::from_secs(5)).unwrap();
        let s1 = r1.join().unwrap();
        s1.send(&Msg::Ready { rank: 1 }).unwrap();
        s1.send(&Msg::Ready { rank: 1 }).unwrap();
        s1.send(&Msg::Ready { rank: 0 }).unwrap();
        let mut w = crate::ring::collective::allreduce::Progress::default().report(0, 0);
        w.progress = 77;
        s1.send(&Msg::Heartbeat(w)).unwrap();
        // Rank 0 said nothing: no go for anyone.
        assert!(s0.wait_go(Duration::from_millis(800)).is_err());
        s0.send(&Msg::Ready { rank: 0 }).unwrap();
        s1.wait_go(Duration::from_secs(3)).unwrap();
        for (r, s) in [(0, &s0), (1, &s1)] {
            s.send(&no_results(r)).unwrap();
        }
        s1.wait_done(Duration::from_secs(3)).unwrap();
        let rep = coord.join().unwrap();
        let hb = &rep.last_heartbeat[&1];
        assert_eq!((hb.rank, hb.progress), (1, 77));
        assert!(!rep.last_heartbeat.contains_key(&0));
        assert!(
            rep.events
                .iter()
                .any(|e| matches!(e, Event::Rejected { reason, .. }
                if reason == "rank 1's control connection sent a ready message for rank 0; ignored")),
            "{:?}",
            rep.events
        );
    }

    /// A busy refusal is not final: the rank connects again and gets in.
    #[test]
    fn join_retries_a_busy_refusal() {
        use std::io::Write;
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let fake = thread::spawn(move || {
            let (mut a, _) = l.accept().unwrap();
            let _ = wire::read_msg(&mut a);
            a.write_all(&frame(&Msg::Reject {
                reason: format!("{BUSY}128 connections from 127.0.0.1 were waiting"),
            }))
            .unwrap();
            drop(a);
            let (mut b, _) = l.accept().unwrap();
            let Ok(Msg::Hello(h)) = wire::read_msg(&mut b) else {
                panic!("no hello")
            };
            b.write_all(&frame(&Msg::Table {
                ranks: vec![h.info],
                more: false,
                shared_transport: None,
            }))
            .unwrap();
            thread::sleep(Duration::from_millis(300));
        });
        let s = join(&addr, hello(0, 1, "t"), Duration::from_secs(5)).unwrap();
        assert_eq!(s.table.len(), 1);
        fake.join().unwrap();
    }

    /// Raw frames of one control connection with their arrival times, until an abort or
    /// done (or 10 s).
    fn raw_rank(
        addr: &str,
        r: u32,
        world: u32,
        read: bool,
    ) -> thread::JoinHandle<(Vec<Instant>, Option<Msg>)> {
        use std::io::Write;
        let addr = addr.to_string();
        thread::spawn(move || {
            let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            if !read {
                sock.set_recv_buffer_size(1024).unwrap();
            }
            sock.connect(&addr.parse::<std::net::SocketAddr>().unwrap().into())
                .unwrap();
            let mut s: TcpStream = sock.into();
            s.write_all(&frame(&Msg::Hello(hello(r, world, "t")))).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            assert!(matches!(read_past_window(&mut s), Ok(Msg::Table { .. })));
            s.write_all(&frame(&Msg::Ready { rank: r })).unwrap();
            let mut times = Vec::new();
            if !read {
                // Stops reading: holds its connection open, says nothing more.
                thread::sleep(Duration::from_secs(4));
                return (times, None);
            }
            loop {
                match wire::read_msg(&mut s) {
                    Ok(m @ (Msg::Abort { .. } | Msg::Done { .. })) => return (times, Some(m)),
                    Ok(_) => times.push(Instant::now()),
                    Err(_) => return (times, None),
                }
            }
        })
    }

    /// Issue 18: a rank that stops reading its control connection fills its own queue only:
    /// the others get their pings on time, and only that rank is named, with that reason.
    #[test]
    fn a_rank_that_stops_reading_is_named_alone_and_delays_nobody() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let cfg = test_cfg(3, Duration::from_secs(20), addr.clone(), None);
        let limits = Limits {
            write_stall: Some(Duration::from_millis(1500)),
            ping_every: Duration::from_millis(2),
            talking_ping_every: Some(Duration::from_millis(2)),
            sndbuf: Some(4096),
            ..Limits::default()
        };
        let coord = thread::spawn(move || coordinate_with(l, cfg, limits));
        let ranks: Vec<_> = (0..3).map(|r| raw_rank(&addr, r, 3, r != 1)).collect();
        let t0 = Instant::now();
        let mut out: Vec<_> = ranks.into_iter().map(|h| h.join().unwrap()).collect();
        let rep = coord.join().unwrap();
        assert_eq!(rep.lost, vec![1], "{:?}", rep.abort);
        let reason = rep.abort.clone().unwrap_or_default();
        assert!(
            reason.starts_with("rank 1 (h1) stopped reading its control connection: ")
                && reason.contains("waited")
                && reason.contains("it took none"),
            "{reason}"
        );
        assert!(rep.closed.is_empty(), "{:?}", rep.closed);
        for r in [0, 2] {
            let (times, end) = std::mem::take(&mut out[r]);
            assert_eq!(
                end,
                Some(Msg::Abort {
                    reason: reason.clone()
                }),
                "rank {r}"
            );
            // Pings every 2 ms while rank 1's queue was stuck: no gap near the stall deadline
            // (1.5 s, which a loop blocked on rank 1's writes would show). Half of it leaves
            // room for a loaded machine's scheduling gaps (300 ms failed once at load 11).
            let gap = times.windows(2).map(|w| w[1] - w[0]).max().unwrap_or_default();
            assert!(
                times.len() > 100 && gap < Duration::from_millis(750),
                "rank {r}: {} frames, gap {gap:?}",
                times.len()
            );
        }
        assert!(t0.elapsed() < Duration::from_secs(8), "{:?}", t0.elapsed());
    }

    /// Issue 18: every rank's silence clock without a pass over the world; a rank is quiet
    /// once `after` passed since its last message (or its table), until it speaks.
    #[test]
    fn quiet_clocks_table() {
        let t0 = Instant::now();
        let ms = |m: u64| t0 + Duration::from_millis(m);
        let mut q = Quiet::new(3, Duration::from_millis(1000));
        q.table_out(0, ms(0));
        q.heard(1, ms(500));
        // A table that goes out after the rank spoke starts nothing.
        q.table_out(1, ms(600));
        let quiet = |q: &Quiet| q.quiet_ranks().map(|(r, _)| r).collect::<Vec<_>>();
        q.advance(ms(900));
        assert_eq!(quiet(&q), Vec::<Rank>::new());
        q.advance(ms(1100));
        assert_eq!(quiet(&q), vec![0]);
        q.heard(0, ms(1200));
        assert_eq!(quiet(&q), Vec::<Rank>::new());
        q.advance(ms(1600));
        assert_eq!(quiet(&q), vec![1]);
        q.advance(ms(2300));
        assert_eq!(
            q.quiet_ranks().collect::<Vec<_>>(),
            vec![(0, ms(1200)), (1, ms(500))]
        );
        assert_eq!(q.no_clock.iter().copied().collect::<Vec<_>>(), vec![2]);
        q.forget(1);
        q.advance(ms(5000));
        assert_eq!(quiet(&q), vec![0]);
        // Out-of-range ranks are ignored, never a panic.
        q.heard(9, ms(1));
        q.table_out(9, ms(1));
        q.forget(9);
    }

    fn beat(
        r: Rank,
        progress: u64,
        phase: crate::ring::model::Phase,
        waiting_on: Option<Rank>,
    ) -> WaitReport {
        let mut w = crate::ring::collective::allreduce::Progress::default().report(r, 0);
        w.progress = progress;
        w.phase = phase;
        w.waiting_on = waiting_on;
        w
    }

    /// Issue 18: the judge is due only when the watchdog could name something: a silence
    /// past its deadline, a standstill past its phase's allowance, a wait; finished ranks
    /// never (the watchdog's own rules decide; the gate only says when to ask).
    #[test]
    fn judge_gate_table() {
        use crate::ring::model::Phase::{Check, ReduceScatter};
        // --timeout 20 s: silence 10 s, standstill at least 20 s (local work 200 s).
        let mut g = JudgeGate::new(3, Duration::from_secs(20));
        g.report(0, 0, &beat(0, 1, ReduceScatter, None), true);
        g.report(1, 0, &beat(1, 1, ReduceScatter, None), true);
        assert!(!g.due(50_000), "nothing before every table is out");
        g.arm(100);
        assert!(!g.due(9_000));
        // Rank 2 never spoke: silent since the tables went out.
        assert!(g.due(10_100));
        g.report(2, 9_500, &beat(2, 1, ReduceScatter, None), true);
        g.report(0, 9_500, &beat(0, 2, ReduceScatter, None), true);
        // Rank 1's last report is 10 s old.
        assert!(g.due(10_000));
        g.report(1, 10_001, &beat(1, 2, ReduceScatter, None), true);
        assert!(!g.due(10_001));
        // Heartbeats keep coming, rank 0's counter stands still from 9.5 s.
        for t in [18_000, 26_000] {
            g.report(0, t, &beat(0, 2, ReduceScatter, None), true);
            g.report(1, t, &beat(1, t, ReduceScatter, None), true);
            g.report(2, t, &beat(2, t, ReduceScatter, None), true);
        }
        assert!(!g.due(29_000));
        assert!(g.due(29_500));
        // In local work (the result check) the allowance is the longer one.
        g.report(0, 29_600, &beat(0, 2, Check, None), true);
        g.report(0, 29_700, &beat(0, 3, Check, None), true);
        g.report(1, 29_700, &beat(1, 1, ReduceScatter, None), true);
        g.report(2, 29_700, &beat(2, 1, ReduceScatter, None), true);
        for t in [36_000, 46_000, 56_000, 66_000] {
            g.report(0, t, &beat(0, 3, Check, None), true);
            g.report(1, t, &beat(1, t, ReduceScatter, None), true);
            g.report(2, t, &beat(2, t, ReduceScatter, None), true);
        }
        assert!(!g.due(70_000));
        // Back to a data phase with the same counter: the data allowance counts from 29.7 s.
        g.report(0, 70_000, &beat(0, 3, ReduceScatter, None), true);
        assert!(g.due(70_000));
        g.report(0, 70_100, &beat(0, 4, ReduceScatter, None), true);
        assert!(!g.due(70_100));
        // A wait on a peer: at once, until the next report says otherwise.
        g.report(1, 70_200, &beat(1, 70_200, ReduceScatter, Some(2)), false);
        assert!(g.due(70_200));
        g.report(1, 70_300, &beat(1, 70_300, ReduceScatter, None), true);
        assert!(!g.due(70_300));
        // A finished rank is never due, however long it is silent.
        g.finished(0);
        g.report(1, 79_000, &beat(1, 79_000, ReduceScatter, None), true);
        g.report(2, 79_000, &beat(2, 79_000, ReduceScatter, None), true);
        assert!(!g.due(85_000));
        // Out-of-range ranks are ignored.
        g.report(7, 1, &beat(7, 1, ReduceScatter, None), true);
        g.finished(7);
    }

    /// Issue 18: a healthy run does not call the judge every tick (its pass is O(world):
    /// 16,384 ranks every 100 ms were most of the coordinator's time), but still at least
    /// every [`JUDGE_IDLE`] (a judge with state of its own, a rail stopped by another).
    #[test]
    fn a_healthy_run_calls_the_judge_about_once_a_second_not_every_tick() {
        use std::sync::atomic::AtomicU64;
        static CALLS: AtomicU64 = AtomicU64::new(0);
        fn judge(_: &CoordinatorReport, _now_ms: u64, final_call: bool) -> Vec<Verdict> {
            if !final_call {
                CALLS.fetch_add(1, Ordering::Relaxed);
            }
            vec![]
        }
        let cfg = test_cfg(2, Duration::from_secs(5), String::new(), Some(Arc::new(judge)));
        let (ranks, coord) = run_ranks(cfg, Limits::default(), move |r, s| {
            for k in 0..25 {
                let w = beat(r, k, crate::ring::model::Phase::ReduceScatter, None);
                s.send(&Msg::Heartbeat(w)).unwrap();
                thread::sleep(Duration::from_millis(100));
            }
            s.send(&no_results(r)).unwrap();
            s.wait_done(Duration::from_secs(5)).unwrap()
        });
        for h in ranks {
            assert_eq!(h, (false, vec![], 0));
        }
        let rep = coord.join().unwrap();
        let calls = CALLS.load(Ordering::Relaxed);
        // About one a second (a loaded machine stretches the 2.5 s run); every tick would be
        // ten a second.
        assert!(
            calls >= 1 && calls <= rep.run_ms / 1000 + 2,
            "{calls} judge calls in {} ms",
            rep.run_ms
        );
        assert_eq!(rep.stats.judge_calls, calls);
    }

    /// Issue 18: pings go out in slices spread over the interval, not to every rank at once
    /// (16,384 writes in one burst held the loop, and the replies came back in one burst).
    #[test]
    fn pings_are_spread_over_the_interval() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        // Nobody heartbeats: the run ends at the 1.5 s silence, its grace, and the abort.
        let cfg = test_cfg(4, Duration::from_millis(1500), addr.clone(), None);
        let limits = Limits {
            ping_every: Duration::from_millis(400),
            ..Limits::default()
        };
        let coord = thread::spawn(move || coordinate_with(l, cfg, limits));
        let ranks: Vec<_> = (0..4).map(|r| raw_rank(&addr, r, 4, true)).collect();
        let mut out: Vec<_> = ranks.into_iter().map(|h| h.join().unwrap()).collect();
        coord.join().unwrap();
        // The go comes to every rank at once: pings only, from the second frame on.
        let (a, b) = (std::mem::take(&mut out[0].0), std::mem::take(&mut out[2].0));
        assert!(a.len() >= 3 && b.len() >= 3, "{} and {} frames", a.len(), b.len());
        let mut apart: Vec<Duration> = b[1..]
            .iter()
            .map(|&t| {
                a[1..]
                    .iter()
                    .map(|&u| if t > u { t - u } else { u - t })
                    .min()
                    .unwrap_or_default()
            })
            .collect();
        apart.sort();
        // Rank 2 is half an interval after rank 0 (200 ms); all at once would be ~0.
        let median = apart[apart.len() / 2];
        assert!(median >= Duration::from_millis(100), "{apart:?}");
    }

    fn has_beat(h: &[Happening], progress: u64) -> bool {
        h.iter()
            .any(|h| matches!(h, Happening::Msg(_, Msg::Heartbeat(w), _) if w.progress == progress))
    }

    /// Issue 18: a message is stamped when its bytes were read, not when the loop got to
    /// it: the loop stalls 1.5 s after reading heartbeat 777, and heartbeat 778 (sent 300 ms
    /// later, read after the stall) is stamped at least 1 s after it. Stamped when handled,
    /// both would be stamped after the stall.
    #[test]
    fn a_heartbeat_is_stamped_when_read_not_when_handled() {
        fn stall(h: &[Happening]) -> Duration {
            if has_beat(h, 777) && !has_beat(h, 778) {
                Duration::from_millis(1500)
            } else {
                Duration::ZERO
            }
        }
        let cfg = test_cfg(2, Duration::from_secs(5), String::new(), None);
        let limits = Limits {
            loop_stall: Some(stall),
            ..Limits::default()
        };
        let (ranks, coord) = run_ranks(cfg, limits, |r, s| {
            if r == 0 {
                for p in [777, 778] {
                    let w = beat(r, p, crate::ring::model::Phase::ReduceScatter, None);
                    s.send(&Msg::Heartbeat(w)).unwrap();
                    thread::sleep(Duration::from_millis(300));
                }
            }
            s.send(&no_results(r)).unwrap();
            s.wait_done(Duration::from_secs(10)).unwrap()
        });
        assert!(ranks.iter().all(|d| *d == (false, vec![], 0)), "{ranks:?}");
        let rep = coord.join().unwrap();
        let at = |p: u64| rep.progress[&0].iter().find(|x| x.1 == p).map(|x| x.0);
        let (a, b) = (at(777).unwrap(), at(778).unwrap());
        assert!(b >= a + 1000, "heartbeat 777 stamped at {a} ms, 778 at {b} ms");
    }

    /// Issue 18: a loop that stalls past every deadline (4 s against a 3 s silence and
    /// timeout) while heartbeats wait unread blames nobody: its own lag is never a rank's
    /// silence. Issue 30: the stall is measured as the loop's own lag, and the judge waits
    /// for the ranks' fresh silence deadline after it (each is heard again within it).
    #[test]
    fn a_loop_that_falls_behind_blames_nobody() {
        use std::sync::atomic::AtomicU64;
        static STALLS: AtomicU64 = AtomicU64::new(0);
        fn stall(h: &[Happening]) -> Duration {
            if has_beat(h, 5) && STALLS.fetch_add(1, Ordering::Relaxed) == 0 {
                Duration::from_secs(4)
            } else {
                Duration::ZERO
            }
        }
        let timeout = Duration::from_secs(3);
        let cfg = test_cfg(
            3,
            timeout,
            String::new(),
            Some(crate::ring::run::watchdog_judge(timeout)),
        );
        let limits = Limits {
            loop_stall: Some(stall),
            ..Limits::default()
        };
        let (ranks, coord) = run_ranks(cfg, limits, |r, s| {
            for k in 0..70 {
                let w = beat(r, k, crate::ring::model::Phase::ReduceScatter, None);
                s.send(&Msg::Heartbeat(w)).unwrap();
                thread::sleep(Duration::from_millis(100));
            }
            s.send(&no_results(r)).unwrap();
            s.wait_done(Duration::from_secs(10)).map_err(|e| e.to_string())
        });
        let rep = coord.join().unwrap();
        assert!(STALLS.load(Ordering::Relaxed) >= 1, "the loop never stalled");
        for d in ranks {
            assert_eq!(d, Ok((false, vec![], 0)), "{:?}", rep.abort);
        }
        assert!(rep.verdicts.is_empty() && rep.lost.is_empty(), "{:?}", rep.abort);
        let own = rep.own_stall.as_ref().map(|s| s.lag);
        assert!(own >= Some(Duration::from_millis(3900)), "{own:?}");
    }

    /// Issue 30: the coordinator's loop stops 4 s (its CPU figures say it was not runnable,
    /// as under SIGSTOP) against the ranks' 3 s silence deadline: every rank gives up on it
    /// (COORDINATOR LOST) and closes. Once the loop runs again, its verdict is its own stall,
    /// rank 0's, naming no other rank: the closes it reads are the stall's consequence.
    #[test]
    fn a_stalled_coordinator_names_its_own_stall_not_the_ranks_that_gave_up() {
        use std::sync::atomic::AtomicU64;
        static STALLS: AtomicU64 = AtomicU64::new(0);
        fn stall(h: &[Happening]) -> Duration {
            if has_beat(h, 5) && STALLS.fetch_add(1, Ordering::Relaxed) == 0 {
                Duration::from_secs(4)
            } else {
                Duration::ZERO
            }
        }
        // Never on a CPU, never waiting for one: stopped.
        fn stopped() -> Option<crate::ring::schedstat::CpuTimes> {
            Some(crate::ring::schedstat::CpuTimes::default())
        }
        let timeout = Duration::from_secs(3);
        let cfg = test_cfg(
            3,
            timeout,
            String::new(),
            Some(crate::ring::run::watchdog_judge(timeout)),
        );
        let limits = Limits {
            loop_stall: Some(stall),
            cpu_reader: Some(stopped),
            ..Limits::default()
        };
        let (ranks, coord) = run_ranks_within(cfg, limits, timeout, |r, s| {
            let t0 = Instant::now();
            for k in 0.. {
                let w = beat(r, k, crate::ring::model::Phase::ReduceScatter, None);
                let _ = s.send(&Msg::Heartbeat(w));
                match s.wait_done(Duration::from_millis(100)) {
                    Err(BootstrapError::Aborted(why)) => return why,
                    Ok(d) => panic!("rank {r}: the run ended without an abort: {d:?}"),
                    Err(_) if t0.elapsed() > Duration::from_secs(15) => panic!("rank {r}: no abort in 15 s"),
                    Err(_) => {}
                }
            }
            unreachable!()
        });
        let rep = coord.join().unwrap();
        assert!(STALLS.load(Ordering::Relaxed) >= 1, "the loop never stalled");
        for (r, why) in ranks.iter().enumerate() {
            assert!(why.contains("COORDINATOR LOST"), "rank {r}: {why}");
        }
        let kinds: Vec<VerdictKind> = rep.verdicts.iter().map(|v| v.kind).collect();
        assert_eq!(kinds, [VerdictKind::CoordinatorStalled], "{:?}", rep.abort);
        let m = &rep.verdicts[0].message;
        assert!(
            m.starts_with("COORDINATOR STALLED rank 0 (h0): its process did not run for 4."),
            "{m}"
        );
        assert_eq!(rep.abort.as_deref(), Some(m.as_str()));
        for other in ["rank 1", "rank 2", "RANK LOST", "RANK STALLED"] {
            assert!(!m.contains(other), "{other}: {m}");
        }
        let own = rep.own_stall.as_ref().expect("the stall is in the report");
        assert!(own.lag >= Duration::from_millis(3900), "{own:?}");
        assert!(rep.stats.lag_max >= own.lag, "{:?}", rep.stats);
    }

    /// A short stall of the loop (below the threshold, half the silence deadline) is no
    /// stall: nothing is held and nothing recorded.
    #[test]
    fn a_short_lag_is_no_stall() {
        fn stall(h: &[Happening]) -> Duration {
            if has_beat(h, 3) {
                Duration::from_millis(600)
            } else {
                Duration::ZERO
            }
        }
        let timeout = Duration::from_secs(3);
        let cfg = test_cfg(2, timeout, String::new(), Some(crate::ring::run::watchdog_judge(timeout)));
        let limits = Limits {
            loop_stall: Some(stall),
            ..Limits::default()
        };
        let (ranks, coord) = run_ranks(cfg, limits, |r, s| {
            for k in 0..6 {
                s.send(&Msg::Heartbeat(beat(r, k, crate::ring::model::Phase::ReduceScatter, None)))
                    .unwrap();
                thread::sleep(Duration::from_millis(50));
            }
            s.send(&no_results(r)).unwrap();
            s.wait_done(Duration::from_secs(10)).map_err(|e| e.to_string())
        });
        let rep = coord.join().unwrap();
        for d in ranks {
            assert_eq!(d, Ok((false, vec![], 0)), "{:?}", rep.abort);
        }
        assert!(rep.own_stall.is_none() && rep.verdicts.is_empty(), "{rep:?}");
        assert!(rep.stats.lag_max >= Duration::from_millis(500), "{:?}", rep.stats);
    }

    /// Issue 18: a frozen rank is named within its bound while the loop stays busy: each pass
    /// stalls 15 ms, and hears its ready connections over several polls (an event list of 2
    /// for 6 ranks heartbeating every 5 ms). The old guard held the judge whenever a poll
    /// left input unread: on nearly every pass here, as at 16,384 ranks under load.
    #[test]
    fn a_frozen_rank_is_named_in_bound_while_the_loop_is_busy() {
        fn stall(h: &[Happening]) -> Duration {
            if h.is_empty() {
                Duration::ZERO
            } else {
                Duration::from_millis(15)
            }
        }
        let timeout = Duration::from_secs(3);
        let cfg = test_cfg(
            6,
            timeout,
            String::new(),
            Some(crate::ring::run::watchdog_judge(timeout)),
        );
        let limits = Limits {
            events: Some(2),
            loop_stall: Some(stall),
            ..Limits::default()
        };
        let (ranks, coord) = run_ranks(cfg, limits, |r, s| {
            let t0 = Instant::now();
            let mut last = t0;
            for k in 0.. {
                // Rank 2 freezes after 1 s (its connection stays open and read).
                if r != 2 || t0.elapsed() < Duration::from_secs(1) {
                    let w = beat(r, k, crate::ring::model::Phase::ReduceScatter, None);
                    if let Err(e) = s.send(&Msg::Heartbeat(w)) {
                        // The coordinator closed after its abort; heartbeats it never read
                        // make that close a reset, which can take the abort frame with it.
                        return (last, Instant::now(), format!("connection closed after the abort: {e}"));
                    }
                    last = Instant::now();
                }
                match s.wait_done(Duration::from_millis(5)) {
                    Err(BootstrapError::Aborted(why)) => return (last, Instant::now(), why),
                    Ok(d) => panic!("rank {r}: the run ended without an abort: {d:?}"),
                    Err(_) if t0.elapsed() > Duration::from_secs(15) => panic!("rank {r}: no abort in 15 s"),
                    Err(_) => {}
                }
            }
            unreachable!()
        });
        let rep = coord.join().unwrap();
        let (frozen_last, _, _) = &ranks[2];
        let (_, told, why) = &ranks[0];
        let took = told.duration_since(*frozen_last);
        // Silence 3 s, and up to 1 s for the loop (as the bench's bound).
        assert!(
            took <= silence(timeout) + Duration::from_secs(1),
            "named {took:?} after its last heartbeat: {why}"
        );
        assert!(!rep.verdicts.is_empty(), "{why}");
        for v in &rep.verdicts {
            use crate::ring::model::VerdictKind::{RankLost, RankStalled};
            assert!(
                matches!(v.kind, RankStalled | RankLost) && (v.from_rank == Some(2) || v.to_rank == Some(2)),
                "{v:?}"
            );
        }
        assert!(rep.lost.iter().all(|&r| r == 2), "{:?}", rep.lost);
    }

    #[test]
    fn unacked_since_table() {
        let a = |unacked, retransmits, backoff, last_ack_recv_ms| AckState {
            unacked,
            retransmits,
            backoff,
            last_ack_recv_ms,
        };
        let cases = [
            (a(0, 0, 0, 60_000), None), // nothing in flight: an idle healthy connection
            (a(2, 0, 0, 5_000), None),  // in flight, never retransmitted yet
            (a(2, 3, 3, 500), None),    // acknowledged recently
            (a(2, 3, 3, 4_000), Some(6_000)),
            (a(1, 0, 2, 1_000), Some(9_000)),
        ];
        for (st, want) in cases {
            assert_eq!(unacked_since(st, 10_000), want, "{st:?}");
        }
    }
}
