//! Judging: when the judge is worth calling, a stall of the loop as its own verdict, and the
//! lines and counters the verdicts and reports carry.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};
use std::time::{Duration, Instant};

use super::*;
use crate::ring::diagnosis::evidence;
use crate::ring::diagnosis::watchdog::local_work_allowance_ms;
use crate::ring::lag::{self, Stall};
use crate::ring::model::{CounterMove, Rank, RankInfo, Verdict, WaitReport, bounded_reason, shown};
use crate::ring::rendezvous::silence;

impl Serve<'_> {
    /// Call the judge if it is due (a failure, the backstop, or the gate says it could name
    /// something) and allowed (a slow call leaves the loop time to read). True: its
    /// verdicts end the run.
    pub(super) fn judge_if_due(
        &mut self,
        rep: &mut CoordinatorReport,
        now: Instant,
        heard: Instant,
        urgent: bool,
    ) -> bool {
        // The judge reads silence on the run clock: only once every table is out.
        let Some(judge) = self.cfg.judge.clone().filter(|_| self.tables_out) else {
            return false;
        };
        let heard_ms = heard.saturating_duration_since(self.run_start).as_millis() as u64;
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

    /// The loop came back late by [`lag::threshold`] or more: the ranks may have given up on
    /// it meanwhile. If nothing had failed before, every rank gets a fresh silence deadline
    /// from now, and the judge waits for it; a failure seen before it ends is this stall's
    /// (see `stall_verdict`). A run already failing is judged as it was.
    pub(super) fn after_stall(&mut self, rep: &mut CoordinatorReport, s: Stall) {
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
    pub(super) fn stall_verdict(&mut self, now: Instant) -> Option<Option<Verdict>> {
        let (s, until) = self.stall.as_ref()?;
        if self.failing_since.is_some() {
            return Some(Some(lag::verdict(
                s,
                self.ranks.first(),
                silence(self.cfg.timeout),
            )));
        }
        if now >= *until {
            self.stall = None;
            return None;
        }
        Some(None)
    }
}

/// When the judge could name something, from what the coordinator sees as messages arrive
/// (O(log n) per heartbeat, O(1) per tick while nothing is due): a rank whose last report
/// is older than the silence deadline, one whose progress counter stood still for its
/// phase's allowance (at least the timeout), or one waiting on a peer. The watchdog's rules
/// need one of these (or a failure the caller sees); the caller also judges every
/// [`JUDGE_IDLE`] whatever the gate says.
pub(super) struct JudgeGate {
    pub(super) silence_ms: u64,
    pub(super) timeout_ms: u64,
    /// Each rank's last heartbeat or stuck report (run clock).
    pub(super) report_ms: Vec<Option<u64>>,
    /// Each rank's progress counter, since when it has had that value, and whether its
    /// phase is local work (the longer allowance).
    pub(super) progress: Vec<Option<(u64, u64, bool)>>,
    pub(super) waiting: BTreeSet<Rank>,
    pub(super) finished: Vec<bool>,
    pub(super) silent_heap: BinaryHeap<Reverse<(u64, Rank)>>,
    pub(super) still_heap: BinaryHeap<Reverse<(u64, Rank)>>,
    /// Every table is out (the run clock's silence starts then): the heaps are filled.
    pub(super) since_ms: Option<u64>,
}

impl JudgeGate {
    pub(super) fn new(world: u32, timeout: Duration) -> JudgeGate {
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

    pub(super) fn still_allowance(&self, local: bool) -> u64 {
        if local {
            local_work_allowance_ms(self.timeout_ms)
        } else {
            self.timeout_ms
        }
    }

    /// Every table is out at `now_ms`: silence counts from here for ranks never heard.
    pub(super) fn arm(&mut self, now_ms: u64) {
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
    pub(super) fn report(&mut self, r: Rank, at_ms: u64, w: &WaitReport, heartbeat: bool) {
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
    pub(super) fn finished(&mut self, r: Rank) {
        if let Some(f) = self.finished.get_mut(r as usize) {
            *f = true;
        }
        self.waiting.remove(&r);
    }

    /// Could the judge name something at `now_ms`?
    pub(super) fn due(&mut self, now_ms: u64) -> bool {
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
pub(super) fn top_due(
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

/// The verdicts' messages as one reason for every rank, bounded ([`bounded_reason`]).
pub(super) fn verdict_reason(v: &[Verdict]) -> String {
    bounded_reason(&v.iter().map(|v| v.message.as_str()).collect::<Vec<_>>())
}

/// A rank's latest moved counters (each report covers the whole run so far), under the
/// connection's own rank and the table's host, at most `evidence::MAX_MOVES`.
pub(super) fn note_counters(rep: &mut CoordinatorReport, r: Rank, mut moved: Vec<CounterMove>) {
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

pub(super) fn rep_host(ranks: &[RankInfo], r: Rank) -> String {
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
