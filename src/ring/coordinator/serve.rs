//! The loop and its queues: the run phase on the event loop (pings spread over the
//! interval, bounded queues, the bounded-rate pass) and every rank's silence clock.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::sync::mpsc::Receiver;
use std::thread;
use std::time::{Duration, Instant};

use super::judge::{JudgeGate, rep_host};
use super::*;
use crate::ring::control::{Frame, Happening, Plane, PlaneStats, QueueError, frame};
use crate::ring::gate::Incoming;
use crate::ring::lag::{self, LagClock, Stall};
use crate::ring::model::{Rank, RankInfo};
use crate::ring::rendezvous::{FAILURE_GRACE, silence};
use crate::ring::tcpinfo;
pub use crate::ring::tcpinfo::AckState;
use crate::ring::wire::{Msg, RankResults, RowResult};

/// When a rank counts as quiet (its TCP_INFO read, pinged every cycle): [`PROBE_AFTER`], or
/// two of its heartbeats where a large job heartbeats less often
/// ([`crate::ring::rendezvous::heartbeat_every`]).
pub(super) fn probe_after(cfg: &CoordinatorConfig) -> Duration {
    let rails = cfg.relay.as_ref().map_or(1, |l| l.rails.max(1)) as u64;
    let every = crate::ring::rendezvous::heartbeat_every(cfg.world as u64 * rails, cfg.timeout);
    PROBE_AFTER.max(2 * every)
}

/// Pings go out in slices at least this far apart (see `Serve::ping_slice`).
pub(super) const PING_SLICE: Duration = Duration::from_millis(10);
/// A rank silent this long has its control socket's TCP_INFO read (is its host answering?).
pub(super) const PROBE_AFTER: Duration = Duration::from_millis(1000);

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
/// Since when (run clock) the peer's host has not acknowledged what we sent, if that is
/// what TCP_INFO shows: data outstanding, retransmitted, and no ACK for over a second. A
/// stopped process's kernel still acknowledges (within a delayed-ACK time), so this is a
/// host that is down or cut off. Pure.
pub fn unacked_since(a: AckState, now_ms: u64) -> Option<u64> {
    (a.unacked > 0 && (a.retransmits > 0 || a.backoff > 0) && a.last_ack_recv_ms >= 1000)
        .then(|| now_ms.saturating_sub(a.last_ack_recv_ms as u64))
}

/// The run phase's state: readiness barrier, heartbeats, failure reports, results, all on
/// the event loop; split into the steps of one pass (judge, ping, read, end).
pub(super) struct Serve<'a> {
    pub(super) cfg: &'a CoordinatorConfig,
    pub(super) plane: Plane,
    pub(super) ranks: Vec<RankInfo>,
    pub(super) limits: Limits,
    /// The run clock: when the table went out.
    pub(super) run_start: Instant,
    /// The coordinator's start (for [`LoopStats`]).
    pub(super) started: Instant,
    /// Each rank's silence clock (from its last message, or its whole table out).
    pub(super) quiet: Quiet,
    /// When the judge is worth calling (see [`JudgeGate`]).
    pub(super) gate: JudgeGate,
    /// The judge is not called again before this (a slow call leaves the loop time to read),
    /// unless a failure report came; and at least at `next_backstop`.
    pub(super) judge_ok_at: Instant,
    pub(super) next_backstop: Instant,
    /// Pings go out in slices over each interval: ranks `ping_from..` are next this cycle.
    pub(super) ping_from: Rank,
    pub(super) ping_cycle: Instant,
    pub(super) ping_cycles: u64,
    pub(super) ready: BTreeSet<Rank>,
    /// A failure report makes the next pass judge at once, not at the next tick.
    pub(super) urgent: bool,
    pub(super) done_results: BTreeMap<Rank, RankResults>,
    /// Size -> the ranks that finished it so far (see `on_row`).
    pub(super) pending_rows: BTreeMap<u64, BTreeMap<Rank, RowResult>>,
    /// The sizes every rank finished, in order (an interrupted run's report).
    pub(super) complete_rows: Vec<BTreeMap<Rank, RowResult>>,
    pub(super) failing_since: Option<Instant>,
    pub(super) first_failure: Option<String>,
    /// The first failure that only followed another rank's end (a data link its peer
    /// closed): the run's reason only when no other came by the end, whatever the order
    /// the two arrived in on a loaded host.
    pub(super) knock_on: Option<String>,
    pub(super) scan: Option<Box<dyn ScanDriver>>,
    /// Every rank's table has gone out (see `CoordinatorReport::tables_out_ms`).
    pub(super) tables_out: bool,
    /// The loop's own lag ([`lag`]).
    pub(super) lag: LagClock,
    /// After a stall of the loop while nothing had failed: until when the ranks have their
    /// fresh deadline (a failure seen before then is the stall's; see `after_stall`).
    pub(super) stall: Option<(Stall, Instant)>,
    /// Ranks that said they were interrupted: their closing is no failure.
    pub(super) interrupted: BTreeSet<Rank>,
    /// When this process's own interrupt was first seen (its own rank says where it was
    /// within [`OWN_INTERRUPT_WAIT`]).
    pub(super) own_interrupt: Option<Instant>,
}

/// How long rank 0's coordinator, interrupted itself, waits for a rank's word on where the
/// run was before it ends the run without it.
pub(super) const OWN_INTERRUPT_WAIT: Duration = Duration::from_millis(300);

impl<'a> Serve<'a> {
    pub(super) fn new(
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
            quiet: Quiet::new(cfg.world, probe_after(cfg)),
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
            knock_on: None,
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

    pub(super) fn host(&self, r: Rank) -> String {
        rep_host(&self.ranks, r)
    }

    /// Ring rank `r` as messages name it (the node's rank on a rail's ring).
    pub(super) fn shown(&self, r: Rank) -> Rank {
        self.cfg.node_of(r)
    }

    pub(super) fn run_ms(&self) -> u64 {
        self.run_start.elapsed().as_millis() as u64
    }

    /// Ping the slice of ranks due by `now`: every rank once per `ping_every`, spread over
    /// it (16,384 writes at once held the loop, and every reply came back at once).
    pub(super) fn ping_slice(&mut self, rep: &mut CoordinatorReport, ping: &Frame, now: Instant) {
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
            let want = |r: Rank| (cycle + r as u64).is_multiple_of(k) || quiet.contains(&r);
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
    pub(super) fn next_ping(&self, now: Instant) -> Instant {
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
    pub(super) fn tell_all(&mut self, rep: &mut CoordinatorReport, msg: &Msg) {
        match frame(msg) {
            Ok(f) => self.send_all(rep, f),
            Err(e) => {
                rep.coordinator_error.get_or_insert(format!("coordinator: {e}"));
            }
        }
    }

    pub(super) fn send_all(&mut self, rep: &mut CoordinatorReport, f: Frame) {
        let now = Instant::now();
        for r in 0..self.cfg.world {
            if let Err(e) = self.plane.send(r, f.clone(), now) {
                self.queue_error(rep, r, e);
            }
        }
    }

    pub(super) fn queue_error(&mut self, rep: &mut CoordinatorReport, r: Rank, e: QueueError) {
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
    pub(super) fn not_reading(&mut self, rep: &mut CoordinatorReport, r: Rank, why: String) {
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
    pub(super) fn serve(&mut self, rep: &mut CoordinatorReport, rx_late: &Receiver<Incoming>) {
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
                if self.timed_tick(rep, now) {
                    break;
                }
                next_tick = Instant::now() + JUDGE_EVERY;
            }
            // Pings go out on time whatever else is queued (a rank with queued data gets it).
            if let Some(p) = &ping {
                self.ping_slice(rep, p, Instant::now());
            }
            if self.failure_ends(rep, now, grace) || self.done_results.len() as u32 == self.cfg.world {
                break;
            }
            if self.read_once(rep, next_tick) {
                break;
            }
            if self.plane.take_woken() {
                drain_rejections(self.cfg, rx_late, rep, &mut self.plane);
            }
            let busy = now.elapsed().saturating_sub(self.plane.stats.idle - idle_before);
            rep.stats.busy_max = rep.stats.busy_max.max(busy);
        }
        rep.stats.lag_max = self.lag.max;
        let t = Instant::now();
        self.finish(rep);
        rep.stats.finish_time = t.elapsed();
    }

    /// [`Serve::tick`], timed for [`LoopStats`]. True: the run ends.
    fn timed_tick(&mut self, rep: &mut CoordinatorReport, now: Instant) -> bool {
        let urgent = std::mem::take(&mut self.urgent);
        let ended = self.tick(rep, now, urgent);
        let d = now.elapsed();
        rep.stats.ticks += 1;
        rep.stats.tick_time += d;
        rep.stats.tick_max = rep.stats.tick_max.max(d);
        ended
    }

    /// A failure ends the run: without a judge, once every rank reported (or its grace ran
    /// out); with one, the judge names the cause (it may need its own grace), and the
    /// built-in grace is the backstop.
    fn failure_ends(&self, rep: &CoordinatorReport, now: Instant, grace: Duration) -> bool {
        let Some(t) = self.failing_since else {
            return false;
        };
        now.duration_since(t) >= grace
            || (self.cfg.judge.is_none()
                && rep.stuck.len() + rep.failed.len() + rep.lost.len() >= self.cfg.world as usize)
    }

    /// One poll of the event loop (until the next tick or ping at most) and what it read,
    /// handled. True: the run ends for an interrupt.
    fn read_once(&mut self, rep: &mut CoordinatorReport, next_tick: Instant) -> bool {
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
        self.interrupt_ends(rep, Instant::now())
    }

    /// The bounded-rate pass: stuck queues, silence and TCP_INFO of the quiet ranks, the
    /// judge when it is due. True: the run ends.
    pub(super) fn tick(&mut self, rep: &mut CoordinatorReport, now: Instant, urgent: bool) -> bool {
        let now_ms = self.run_start.elapsed().as_millis() as u64;
        // Silence is judged as of the last instant before which every byte that reached the
        // loop was read: whatever the loop did since (a slow pass, no CPU on a loaded host)
        // never reads as a rank's silence, and a frozen rank is named as soon as the loop
        // has caught up, however busy it stays (no pass is skipped for being behind).
        let heard = self.plane.caught_up().min(now);
        self.check_ranks(rep, now, now_ms, heard);
        match self.stall_verdict(now) {
            Some(Some(v)) => {
                self.first_failure = Some(v.message.clone());
                rep.verdicts = vec![v];
                return true;
            }
            Some(None) => return false,
            None => {}
        }
        self.judge_if_due(rep, now, heard, urgent)
    }

    /// The ranks' side of a tick: queues nobody reads, silence clocks (from each rank's
    /// whole table out) and the quiet ranks as of `heard`; once every table is out, the run
    /// clock of the judge starts.
    fn check_ranks(&mut self, rep: &mut CoordinatorReport, now: Instant, now_ms: u64, heard: Instant) {
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
    }

    /// Rank `r` has been silent `quiet` (at least [`PROBE_AFTER`], as of the plane's
    /// [`Plane::caught_up`]): past the timeout it is lost; is its host still acknowledging
    /// our pings?
    pub(super) fn quiet_rank(
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
        // A relayed rank's own connection is its node's, held by the hub.
        let ack = match (self.plane.socket(r), &self.cfg.relay) {
            (Some(s), _) => tcpinfo::ack_state(s),
            (None, Some(link)) => link.ack_state(r),
            (None, None) => None,
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
}

/// Every rank's silence clock, deadline-ordered: the ranks silent past `after` are found
/// without a pass over the world (a heap of `(due, rank)`, checked against the rank's real
/// clock when it comes up, so a message costs no heap work).
pub(super) struct Quiet {
    pub(super) after: Duration,
    /// The start of each rank's current silence: its last message, or its whole table out.
    pub(super) heard: Vec<Option<Instant>>,
    pub(super) heap: BinaryHeap<Reverse<(Instant, Rank)>>,
    /// Ranks silent at least `after` (until they speak).
    pub(super) quiet: BTreeSet<Rank>,
    /// Ranks whose clock has not started (their table is not out, nothing heard).
    pub(super) no_clock: BTreeSet<Rank>,
}

impl Quiet {
    pub(super) fn new(world: u32, after: Duration) -> Quiet {
        Quiet {
            after,
            heard: vec![None; world as usize],
            heap: BinaryHeap::new(),
            quiet: BTreeSet::new(),
            no_clock: (0..world).collect(),
        }
    }

    /// Rank `r` was heard from at `at`.
    pub(super) fn heard(&mut self, r: Rank, at: Instant) {
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
    pub(super) fn table_out(&mut self, r: Rank, at: Instant) {
        if self.heard.get(r as usize).is_some_and(Option::is_none) {
            self.heard(r, at);
        }
    }

    /// Every rank with a clock is heard from at `at`: a fresh deadline after the loop's own
    /// stall (once per stall, O(world)).
    pub(super) fn restart(&mut self, at: Instant) {
        for r in 0..self.heard.len() {
            if self.heard[r].is_some() {
                self.heard(r as Rank, at);
            }
        }
    }

    /// Rank `r`'s connection ended: no clock any more.
    pub(super) fn forget(&mut self, r: Rank) {
        if let Some(slot) = self.heard.get_mut(r as usize) {
            *slot = None;
        }
        self.quiet.remove(&r);
    }

    /// Move the ranks whose silence reached `after` by `now` into the quiet set.
    pub(super) fn advance(&mut self, now: Instant) {
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
    pub(super) fn quiet_ranks(&self) -> impl Iterator<Item = (Rank, Instant)> + '_ {
        self.quiet
            .iter()
            .filter_map(|&r| Some((r, self.heard.get(r as usize).copied().flatten()?)))
    }
}
