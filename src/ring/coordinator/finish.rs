//! The end of the run: the final judgement, done or abort to every rank, written out, and
//! the counters of the ranks a verdict names.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::judge::{note_counters, verdict_reason};
use super::*;
use crate::ring::control::{Happening, frame};
use crate::ring::diagnosis::stall::{self, Stall};
use crate::ring::diagnosis::{flap, localize};
use crate::ring::model::{ChunkWaits, LinkSample, Rank, Verdict, VerdictKind};
use crate::ring::wire::Msg;

/// How long the coordinator waits for the counters of the ranks a verdict names.
pub(super) const COUNTERS_GRACE: Duration = Duration::from_millis(1500);

impl Serve<'_> {
    /// The end: the final judgement, then done or abort to every rank, written out.
    pub(super) fn finish(&mut self, rep: &mut CoordinatorReport) {
        // A link closed under a rank is the reason only when nothing else came to explain it.
        if self.first_failure.is_none() {
            self.first_failure = self.knock_on.take();
        }
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
        self.weigh_at_end(rep);
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

    /// The verdicts weighed at the end (issue 45), each beside the typed stalls it was built
    /// from: the sweep's stalls joined to the scan's ([`stall::merge_sweep`]), then a port
    /// that flapped said beside whatever else was measured, taking what its flap explains
    /// ([`flap::absorb`]). The scan's own list keeps only what stayed (the report adds
    /// back any scan verdict it lacks).
    fn weigh_at_end(&self, rep: &mut CoordinatorReport) {
        let scan_stalls = rep.scan.as_ref().map(|s| s.stalls.clone()).unwrap_or_default();
        let mut weighed: Vec<(Verdict, Vec<Stall>)> = std::mem::take(&mut rep.verdicts)
            .into_iter()
            .map(|v| {
                let links = match v.kind {
                    VerdictKind::ConnectionStall => scan_stalls.clone(),
                    _ => Vec::new(),
                };
                (v, links)
            })
            .collect();
        if let Some(sweep) = self.sweep_stall(rep) {
            stall::merge_sweep(&mut weighed, sweep, &rep.ranks);
        }
        let mut flaps = flap::verdicts(&rep.port_counters, &rep.ranks);
        rep.verdicts = flap::absorb(&mut flaps, weighed, &rep.ranks);
        rep.verdicts.extend(flaps);
        if let Some(s) = rep.scan.as_mut() {
            s.verdicts.retain(|v| rep.verdicts.contains(v));
        }
    }

    /// The sweep's stall verdict, with the stalls it was built from, to be judged; where a
    /// starved host could explain its silences (the scan's CPU-bound ranks, or a rank's
    /// heartbeats that waited for a CPU for as long: [`stall::cpu_explains`]), it is set
    /// aside as not judged instead (beside the scan's, or the run's own list without one).
    fn sweep_stall(&self, rep: &mut CoordinatorReport) -> Option<(Verdict, Vec<Stall>)> {
        let hops: Vec<LinkSample> = rep.results.iter().flat_map(|r| r.links.clone()).collect();
        let waits: BTreeMap<Rank, Vec<ChunkWaits>> = rep
            .results
            .iter()
            .map(|r| (r.rank, r.chunk_waits.clone()))
            .collect();
        let hops = stall::sweep_hops(self.cfg.world, &hops, &waits);
        let stalls = stall::stalls(&hops);
        let scan_bound = rep.scan.as_ref().map(|s| s.cpu_bound.clone()).unwrap_or_default();
        let (judged, explained, starved) = match scan_bound.is_empty() {
            true => stall::cpu_split(&stalls, &rep.sweep_cpu),
            false => (Vec::new(), stalls, scan_bound),
        };
        if let Some(v) = stall::of_stalls(&explained, &hops, &[], &rep.ranks).pop() {
            let v = localize::set_aside(v, &starved, &rep.ranks);
            match rep.scan.as_mut() {
                Some(s) => s.not_judged.push(v),
                None => rep.not_judged.push(v),
            }
        }
        let v = stall::of_stalls(&judged, &hops, &[], &rep.ranks).pop()?;
        Some((v, judged))
    }

    /// Half-close every connection (a FIN after the last message) and read what the ranks
    /// still send until each closes or `until`. Dropping a socket with unread heartbeats in
    /// its buffer sends a reset, and a reset can discard the last message before the rank
    /// read it: the rank would report COORDINATOR LOST after a run that ended well.
    pub(super) fn close_gently(&mut self, until: Instant) {
        let mut open: BTreeSet<Rank> = (0..self.cfg.world).filter(|r| self.plane.has(*r)).collect();
        for r in &open {
            self.plane.half_close(*r);
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
    pub(super) fn drain_out(&mut self, until: Instant) {
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
    pub(super) fn collect_counters(&mut self, rep: &mut CoordinatorReport) {
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
