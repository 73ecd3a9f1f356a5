//! The coordinator of the TCP rendezvous: rank 0 (hosted by rank 0) gathers every rank's hello, hands
//! out the full table, then keeps one control connection per rank open for the whole run
//! (readiness, heartbeats, stuck reports, results, the final verdict). Anything on the port
//! that is not a fabprobe rank of this job is rejected and recorded as an [`Event`], never
//! trusted. Every wait has a deadline.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::ring::diagnosis::driver::{ScanReport, Step};
use crate::ring::diagnosis::evidence;
use crate::ring::model::{CounterMove, LinkFault, LinkSample, Rank, RankInfo, Verdict, VerdictKind, WaitReport};
use crate::ring::rendezvous::{BootstrapError, FAILURE_GRACE, HEARTBEAT, silence};
use crate::ring::wire::{self, Hello, Msg, RankResults, WireError};

/// Connections allowed to be reading their hello at once.
const MAX_PENDING_HELLOS: usize = 512;
/// How long a freshly accepted connection may take to send its hello.
const HELLO_DEADLINE: Duration = Duration::from_secs(5);

/// Something the coordinator saw that the user should know about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    Rejected { peer: String, reason: String },
    Joined { rank: Rank, peer: String, host: String },
}

impl Event {
    pub fn line(&self) -> String {
        match self {
            Event::Rejected { peer, reason } => {
                format!("coordinator: rejected connection from {peer}: {reason}")
            }
            Event::Joined { rank, peer, host } => {
                format!("coordinator: rank {rank} ({host}) joined from {peer}")
            }
        }
    }
}

// ---------------------------------------------------------------- coordinator

pub struct CoordinatorConfig {
    pub world: u32,
    pub token: String,
    pub timeout: Duration,
    /// For messages: the address ranks were told to use.
    pub advertised: String,
    /// Rank 0's run options; every hello must carry the same.
    pub params: String,
    /// Turns what the coordinator saw into verdicts: the watchdog and localization plug in
    /// here. See [`Judge`].
    pub judge: Option<Judge>,
    /// Run the link scan after every rank's links are up (before the sweep): makes the
    /// scan's driver for the world size.
    pub scan: Option<Arc<dyn Fn(usize) -> Box<dyn ScanDriver> + Send + Sync>>,
}

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
/// during the run on every message and at least every 100 ms with `final_call` false (a
/// non-empty answer ends the run at once, as a hang verdict should), and once at the end
/// with `final_call` true (link-scan verdicts) before the last message goes out.
pub type Judge = Arc<dyn Fn(&CoordinatorReport, u64, bool) -> Vec<Verdict> + Send + Sync>;

/// What the coordinator hands back when the run is over (or failed).
#[derive(Debug, Default)]
pub struct CoordinatorReport {
    pub ranks: Vec<RankInfo>,
    pub results: Vec<RankResults>,
    pub events: Vec<Event>,
    /// Why the run ended early, if it did.
    pub abort: Option<String>,
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
}

type Incoming = (TcpStream, SocketAddr, Result<Hello, WireError>);

/// Accept connections until `stop`; each one reads its hello on its own thread, so a
/// silent or slow peer cannot hold up the others.
fn accept_loop(
    listener: TcpListener,
    tx: Sender<Incoming>,
    stop: Arc<AtomicBool>,
    gathering: Arc<AtomicBool>,
) {
    if listener.set_nonblocking(true).is_err() {
        return;
    }
    let pending = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((s, peer)) => {
                // Listening on [::] shows IPv4 peers as ::ffff:a.b.c.d; print them as IPv4.
                let peer = SocketAddr::new(peer.ip().to_canonical(), peer.port());
                let tx = tx.clone();
                // A flood of idle connections must not exhaust threads: beyond the cap,
                // refuse at once (a real rank retries until its deadline).
                if pending.load(Ordering::Relaxed) >= MAX_PENDING_HELLOS {
                    let _ = tx.send((
                        s,
                        peer,
                        Err(WireError::Malformed(
                            "too many connections waiting to say hello".into(),
                        )),
                    ));
                    continue;
                }
                pending.fetch_add(1, Ordering::Relaxed);
                let pending = pending.clone();
                thread::spawn(move || {
                    let _ = s.set_nonblocking(false);
                    let _ = s.set_nodelay(true);
                    let _ = s.set_read_timeout(Some(HELLO_DEADLINE));
                    let mut r = &s;
                    let hello = match wire::read_msg(&mut r) {
                        Ok(Msg::Hello(h)) => Ok(h),
                        Ok(other) => Err(WireError::Malformed(format!(
                            "expected hello, got {}",
                            other.kind()
                        ))),
                        Err(e) => Err(e),
                    };
                    pending.fetch_sub(1, Ordering::Relaxed);
                    let _ = tx.send((s, peer, hello));
                });
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                // Quick while ranks arrive; during the run only latecomers are turned away.
                let ms = if gathering.load(Ordering::Relaxed) { 2 } else { 50 };
                thread::sleep(Duration::from_millis(ms))
            }
            Err(_) => thread::sleep(Duration::from_millis(20)),
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
    if h.world != cfg_world {
        return Err(format!(
            "rank {} says world size {}, the coordinator expects {}",
            h.rank, h.world, cfg_world
        ));
    }
    if h.rank >= cfg_world || h.info.rank != h.rank {
        return Err(format!(
            "rank {} is out of range for world size {}",
            h.rank, cfg_world
        ));
    }
    if h.params != cfg.params {
        return Err(format!(
            "rank {} runs with options [{}], rank 0 with [{}]",
            h.rank, h.params, cfg.params
        ));
    }
    if let Some(prev) = seen.get(&h.rank) {
        return Err(format!(
            "rank {} already joined from {} ({})",
            h.rank, prev.host, prev.address
        ));
    }
    Ok(())
}

/// Run the coordinator on `listener` until the run ends; returns what happened. Never panics
/// on what peers send.
pub fn coordinate(listener: TcpListener, cfg: CoordinatorConfig) -> CoordinatorReport {
    let start = Instant::now();
    let mut rep = CoordinatorReport::default();
    let stop = Arc::new(AtomicBool::new(false));
    let gathering = Arc::new(AtomicBool::new(true));
    let (tx, rx) = mpsc::channel::<Incoming>();
    {
        let stop = stop.clone();
        let gathering = gathering.clone();
        thread::spawn(move || accept_loop(listener, tx, stop, gathering));
    }
    let deadline = start + cfg.timeout;
    let mut seen: BTreeMap<Rank, RankInfo> = BTreeMap::new();
    let mut conns: BTreeMap<Rank, TcpStream> = BTreeMap::new();
    while (seen.len() as u32) < cfg.world {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        match rx.recv_timeout(deadline - now) {
            Ok((s, peer, hello)) => {
                let peer_s = peer.to_string();
                let verdict = hello
                    .map_err(|e| e.to_string())
                    .and_then(|h| validate(&h, &cfg, &seen).map(|_| h));
                match verdict {
                    Ok(h) => {
                        rep.events.push(Event::Joined {
                            rank: h.rank,
                            peer: peer_s,
                            host: h.info.host.clone(),
                        });
                        seen.insert(h.rank, h.info);
                        conns.insert(h.rank, s);
                    }
                    Err(reason) => {
                        let mut w = &s;
                        let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
                        let _ = wire::write_msg(
                            &mut w,
                            &Msg::Reject {
                                reason: reason.clone(),
                            },
                        );
                        rep.events.push(Event::Rejected { peer: peer_s, reason });
                    }
                }
            }
            Err(RecvTimeoutError::Timeout) => break,
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    rep.ranks = seen.values().cloned().collect();
    if (seen.len() as u32) < cfg.world {
        let missing: Vec<Rank> = (0..cfg.world).filter(|r| !seen.contains_key(r)).collect();
        let e = BootstrapError::Missing {
            missing,
            world: cfg.world,
            coordinator: cfg.advertised.clone(),
            secs: cfg.timeout.as_secs(),
        };
        let reason = e.to_string();
        broadcast(
            &conns,
            &Msg::Abort {
                reason: reason.clone(),
            },
        );
        rep.abort = Some(reason);
        if let Some(judge) = &cfg.judge {
            rep.verdicts = judge(&rep, 0, true);
        }
        stop.store(true, Ordering::Relaxed);
        drain_rejections(&rx, &mut rep);
        return rep;
    }
    let table = Msg::Table {
        ranks: rep.ranks.clone(),
    };
    broadcast(&conns, &table);
    gathering.store(false, Ordering::Relaxed);
    rep.bootstrap_us = start.elapsed().as_micros() as u64;
    serve(&cfg, conns, &mut rep, &rx);
    stop.store(true, Ordering::Relaxed);
    drain_rejections(&rx, &mut rep);
    rep
}

/// Late arrivals (after the table went out) are turned away, and recorded.
fn drain_rejections(rx: &Receiver<Incoming>, rep: &mut CoordinatorReport) {
    while let Ok((s, peer, hello)) = rx.try_recv() {
        let reason = match hello {
            Ok(h) => format!("rank {} arrived after the run started (or was aborted)", h.rank),
            Err(e) => e.to_string(),
        };
        let mut w = &s;
        let _ = wire::write_msg(
            &mut w,
            &Msg::Reject {
                reason: reason.clone(),
            },
        );
        rep.events.push(Event::Rejected {
            peer: peer.to_string(),
            reason,
        });
    }
}

fn broadcast(conns: &BTreeMap<Rank, TcpStream>, msg: &Msg) {
    for s in conns.values() {
        let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
        let mut w = s;
        let _ = wire::write_msg(&mut w, msg);
    }
}

enum Control {
    Msg(Rank, Msg),
    Closed(Rank, WireError),
}

/// The run phase: readiness barrier, heartbeats, failure reports, results.
fn serve(
    cfg: &CoordinatorConfig,
    conns: BTreeMap<Rank, TcpStream>,
    rep: &mut CoordinatorReport,
    rx_late: &Receiver<Incoming>,
) {
    let (tx, rx) = mpsc::channel::<Control>();
    for (&rank, s) in &conns {
        let Ok(mut r) = s.try_clone() else { continue };
        let tx = tx.clone();
        let _ = r.set_read_timeout(None);
        thread::spawn(move || {
            loop {
                match wire::read_msg(&mut r) {
                    Ok(m) => {
                        if tx.send(Control::Msg(rank, m)).is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Control::Closed(rank, e));
                        return;
                    }
                }
            }
        });
    }
    let world = cfg.world;
    let ranks = rep.ranks.clone();
    let host = |r: Rank| rep_host(&ranks, r);
    let run_start = Instant::now();
    let mut last_seen: BTreeMap<Rank, Instant> = conns.keys().map(|&r| (r, Instant::now())).collect();
    let mut ready = 0u32;
    let mut done_results: BTreeMap<Rank, RankResults> = BTreeMap::new();
    let mut failing_since: Option<Instant> = None;
    let mut first_failure: Option<String> = None;
    let mut next_ping = Instant::now();
    // With a judge, the built-in rule waits longer: the judge names the cause first, and
    // the longest it needs is a frozen rank's silence (and its grace), not another timeout.
    let grace = if cfg.judge.is_some() {
        silence(cfg.timeout) + Duration::from_millis(1500)
    } else {
        FAILURE_GRACE
    };
    let keep_ms = cfg.timeout.as_millis() as u64 + 10_000;
    let mut scan = cfg.scan.as_ref().map(|make| make(world as usize));
    let step = |step: Step, rep: &mut CoordinatorReport, scan: &dyn ScanDriver| match step {
        Step::Wait => {}
        Step::Run(m) => broadcast(&conns, &m),
        Step::Done => {
            rep.scan = Some(scan.report(&ranks));
            broadcast(&conns, &Msg::ScanEnd);
        }
    };
    loop {
        let now = Instant::now();
        if let Some(judge) = &cfg.judge {
            let v = judge(rep, run_start.elapsed().as_millis() as u64, false);
            if !v.is_empty() {
                first_failure = Some(v.iter().map(|v| v.message.clone()).collect::<Vec<_>>().join("; "));
                rep.verdicts = v;
                break;
            }
        }
        if now >= next_ping {
            broadcast(&conns, &Msg::Ping);
            next_ping = now + HEARTBEAT;
        }
        // A rank that says nothing for the whole timeout is gone or frozen.
        for (&r, &t) in &last_seen {
            if now.duration_since(t) > cfg.timeout && !rep.lost.contains(&r) && !done_results.contains_key(&r)
            {
                rep.lost.push(r);
                first_failure.get_or_insert_with(|| {
                    format!(
                        "rank {r} ({}) sent nothing for {} s (process stopped, or its host is gone)",
                        host(r),
                        cfg.timeout.as_secs()
                    )
                });
                failing_since.get_or_insert(now);
            }
        }
        if let Some(t) = failing_since {
            // Without a judge, every rank's report ends it at once; with one, the judge
            // names the cause (it may need its own grace), the built-in grace is the backstop.
            if now.duration_since(t) >= grace
                || (cfg.judge.is_none()
                    && rep.stuck.len() + rep.failed.len() + rep.lost.len() >= world as usize)
            {
                break;
            }
        }
        if done_results.len() as u32 == world {
            break;
        }
        let wait = next_ping
            .saturating_duration_since(now)
            .min(Duration::from_millis(100));
        match rx.recv_timeout(wait) {
            Ok(Control::Msg(r, m)) => {
                let at_ms = run_start.elapsed().as_millis() as u64;
                if let Msg::Heartbeat(w) | Msg::Stuck { wait: w, .. } = &m {
                    rep.reports.insert(r, (at_ms, w.clone()));
                }
                if let Msg::Heartbeat(w) = &m {
                    let h = rep.progress.entry(r).or_default();
                    h.push((at_ms, w.progress));
                    let cut = h.iter().take_while(|(t, _)| t + keep_ms < at_ms).count();
                    h.drain(..cut);
                }
                last_seen.insert(r, Instant::now());
                rep.last_heard_ms
                    .insert(r, run_start.elapsed().as_millis() as u64);
                match m {
                    Msg::Ready { .. } => {
                        ready += 1;
                        if ready == world {
                            broadcast(&conns, &Msg::Go);
                            if let Some(d) = scan.as_mut() {
                                let s = d.start(Instant::now());
                                step(s, rep, &**d);
                            }
                        }
                    }
                    Msg::ScanSamples {
                        rank,
                        index,
                        samples,
                        line_rate_gbs,
                    } if rank == r => {
                        if let Some(d) = scan.as_mut() {
                            let s = d.on_samples(r, index, samples, line_rate_gbs, &ranks, Instant::now());
                            step(s, rep, &**d);
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
                        first_failure.get_or_insert_with(|| stuck_line(&w, &ranks));
                        rep.last_heartbeat.insert(r, w.clone());
                        rep.stuck.push(w);
                        failing_since.get_or_insert(Instant::now());
                    }
                    Msg::Failed {
                        error,
                        link_fault,
                        port_counters,
                        ..
                    } => {
                        note_counters(rep, r, port_counters);
                        // Only an end of the link can report it; the connection's rank saw it,
                        // whatever the message says; its words are bounded before they are kept.
                        if let Some(mut f) = link_fault
                            && (f.from_rank == r || f.to_rank == r)
                            && f.from_rank < world
                            && f.to_rank < world
                            && rep.link_faults.len() < 4 * world as usize
                        {
                            f.seen_by = r;
                            for t in [&mut f.device, &mut f.operation, &mut f.status_name, &mut f.meaning] {
                                bound_text(t);
                            }
                            rep.link_faults.push(f);
                        }
                        first_failure
                            .get_or_insert_with(|| format!("rank {r} ({}) failed: {error}", host(r)));
                        rep.failed.push((r, error));
                        failing_since.get_or_insert(Instant::now());
                    }
                    Msg::Results(mut res) if res.rank == r => {
                        note_counters(rep, r, std::mem::take(&mut res.port_counters));
                        rep.finished_ms.insert(r, at_ms);
                        done_results.insert(r, res);
                    }
                    _ => {}
                }
            }
            Ok(Control::Closed(r, err)) => {
                let reset = !matches!(err, WireError::Closed);
                rep.closed
                    .insert(r, (run_start.elapsed().as_millis() as u64, reset));
                let why = err.to_string();
                if !done_results.contains_key(&r) && !rep.lost.contains(&r) {
                    rep.lost.push(r);
                    first_failure.get_or_insert_with(|| {
                        format!(
                            "rank {r} ({}) closed its control connection ({why}): the process died",
                            host(r)
                        )
                    });
                    failing_since.get_or_insert(Instant::now());
                }
                last_seen.remove(&r);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        drain_rejections(rx_late, rep);
    }
    rep.results = done_results.into_values().collect();
    rep.run_ms = run_start.elapsed().as_millis() as u64;
    if let Some(judge) = &cfg.judge {
        if rep.verdicts.is_empty() {
            rep.verdicts = judge(rep, rep.run_ms, true);
            // A failed run's cause, named at the end, replaces the first report's line.
            if first_failure.is_some() && !rep.verdicts.is_empty() {
                first_failure = Some(
                    rep.verdicts
                        .iter()
                        .map(|v| v.message.clone())
                        .collect::<Vec<_>>()
                        .join("; "),
                );
            }
        }
    }
    // The scan's verdicts join the watchdog's: every rank learns that the run failed.
    let scan_verdicts: Vec<Verdict> = rep.scan.iter().flat_map(|s| s.verdicts.clone()).collect();
    for v in scan_verdicts {
        if !rep.verdicts.contains(&v) {
            rep.verdicts.push(v);
        }
    }
    match first_failure {
        Some(reason) => {
            broadcast(
                &conns,
                &Msg::Abort {
                    reason: reason.clone(),
                },
            );
            rep.abort = Some(reason);
            collect_counters(&rx, rep);
        }
        None => {
            let failed = !rep.verdicts.is_empty()
                || rep
                    .results
                    .iter()
                    .any(|r| r.rows.iter().any(|row| row.wrong_total() > 0));
            broadcast(
                &conns,
                &Msg::Done {
                    failed,
                    verdicts: rep.verdicts.clone(),
                },
            );
        }
    }
}

/// After an abort: the ranks the verdicts name answer with their NIC's counters (each
/// within milliseconds); wait for those still alive, at most `COUNTERS_GRACE`.
fn collect_counters(rx: &Receiver<Control>, rep: &mut CoordinatorReport) {
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
        match rx.recv_timeout(left) {
            Ok(Control::Msg(r, Msg::Counters { port_counters })) => {
                note_counters(rep, r, port_counters);
                want.remove(&r);
            }
            Ok(Control::Closed(r, _)) => {
                want.remove(&r);
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
}

/// How long the coordinator waits for the counters of the ranks a verdict names.
const COUNTERS_GRACE: Duration = Duration::from_millis(1500);

/// A rank's latest moved counters (each report covers the whole run so far), under the
/// connection's own rank and the table's host, at most `evidence::MAX_MOVES`.
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

/// A peer's words kept for a verdict: at most 200 characters, printable.
fn bound_text(t: &mut String) {
    let clean: String = t
        .chars()
        .filter(|c| !c.is_control())
        .take(200)
        .collect();
    *t = clean;
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
    match w.waiting_on {
        Some(p) if w.waiting_to_receive => format!(
            "rank {} ({me}) waited {} ms for data from rank {p} ({}) in {} step {} channel {} ({} bytes received)",
            w.rank,
            w.since_progress_ms,
            rep_host(ranks, p),
            w.phase.name(),
            w.step,
            w.channel,
            w.bytes_received
        ),
        Some(p) => format!(
            "rank {} ({me}) was blocked {} ms sending to rank {p} ({}) in {} step {} channel {}",
            w.rank,
            w.since_progress_ms,
            rep_host(ranks, p),
            w.phase.name(),
            w.step,
            w.channel
        ),
        None => format!(
            "rank {} ({me}) made no progress for {} ms in {}",
            w.rank,
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
            advertised,
            params: "p".into(),
            judge,
            scan: None,
        }
    }

    fn hello(rank: u32, world: u32, token: &str) -> Hello {
        Hello {
            protocol: wire::PROTOCOL,
            rank,
            world,
            token: token.into(),
            info: RankInfo {
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

    #[test]
    fn validation_table() {
        let mut seen = BTreeMap::new();
        seen.insert(1, hello(1, 4, "t").info);
        let mut bad_proto = hello(0, 4, "t");
        bad_proto.protocol = 99;
        let mut other_params = hello(0, 4, "t");
        other_params.params = "q".into();
        let cfg = test_cfg(4, Duration::from_secs(1), String::new(), None);
        let cases = [
            (hello(0, 4, "t"), None),
            (other_params, Some("runs with options [q], rank 0 with [p]")),
            (hello(0, 4, "x"), Some("wrong token")),
            (hello(0, 3, "t"), Some("world size 3")),
            (hello(9, 9, "t"), Some("world size 9")),
            (hello(1, 4, "t"), Some("already joined from h1")),
            (bad_proto, Some("protocol 99")),
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
    fn missing_rank_message_names_ranks_and_what_to_check() {
        let e = BootstrapError::Missing {
            missing: vec![2, 5],
            world: 8,
            coordinator: "10.0.0.1:29517".into(),
            secs: 30,
        };
        assert_eq!(
            e.to_string(),
            "2 of 8 ranks never reached the coordinator at 10.0.0.1:29517 within 30 s: missing ranks 2, 5; check that \
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

    #[test]
    fn judge_verdicts_reach_every_rank_and_fail_the_run() {
        fn judge(rep: &CoordinatorReport, _now_ms: u64, final_call: bool) -> Vec<Verdict> {
            if !final_call {
                return vec![];
            }
            vec![Verdict {
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
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let cfg = test_cfg(2, Duration::from_secs(5), addr.clone(), Some(Arc::new(judge)));
        let coord = thread::spawn(move || coordinate(l, cfg));
        let ranks: Vec<_> = (0..2)
            .map(|r| {
                let addr = addr.clone();
                thread::spawn(move || {
                    let s = join(&addr, hello(r, 2, "t"), Duration::from_secs(5)).unwrap();
                    s.send(&Msg::Ready { rank: r }).unwrap();
                    s.wait_go(Duration::from_secs(5)).unwrap();
                    s.send(&Msg::Results(RankResults {
                        rank: r,
                        rows: vec![],
                        links: vec![],
                        link_size_bytes: 0,
                        port_counters: vec![],
                    }))
                    .unwrap();
                    s.wait_done(Duration::from_secs(5)).unwrap()
                })
            })
            .collect();
        for h in ranks {
            let (failed, verdicts) = h.join().unwrap();
            assert!(failed);
            assert_eq!(verdicts.len(), 1);
            assert_eq!(verdicts[0].message, "judged 2 results");
        }
        let rep = coord.join().unwrap();
        assert_eq!(rep.verdicts.len(), 1);
        assert!(rep.abort.is_none());
    }

    #[test]
    fn a_live_verdict_ends_the_run_at_once_with_its_message() {
        fn judge(rep: &CoordinatorReport, now_ms: u64, _final: bool) -> Vec<Verdict> {
            let Some(w) = rep.stuck.first() else { return vec![] };
            let (at, _) = rep.reports[&w.rank];
            assert!(now_ms >= at);
            vec![Verdict {
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
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let cfg = test_cfg(2, Duration::from_secs(20), addr.clone(), Some(Arc::new(judge)));
        let coord = thread::spawn(move || coordinate(l, cfg));
        let t0 = Instant::now();
        let ranks: Vec<_> = (0..2)
            .map(|r| {
                let addr = addr.clone();
                thread::spawn(move || {
                    let s = join(&addr, hello(r, 2, "t"), Duration::from_secs(5)).unwrap();
                    s.send(&Msg::Ready { rank: r }).unwrap();
                    s.wait_go(Duration::from_secs(5)).unwrap();
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
                })
            })
            .collect();
        for h in ranks {
            assert_eq!(h.join().unwrap(), "HANG rank 1 waits for rank Some(0)");
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
}
