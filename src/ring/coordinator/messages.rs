//! What the ranks say: each control message of the run handled, in the connection's name.

use std::collections::BTreeMap;
use std::time::Instant;

use super::judge::note_counters;
use super::serve::OWN_INTERRUPT_WAIT;
use super::*;
use crate::ring::control::frame;
use crate::ring::diagnosis::driver::Step;
use crate::ring::model::{CounterMove, LinkFault, Phase, Rank};
use crate::ring::orders::{self};
use crate::ring::wire::{Msg, RankResults, RowResult, WireError};
use crate::text::printable;

/// Sizes whose rows are still waiting for some rank; more are not kept (a rank sends one
/// row per size, and runs have tens of sizes).
const MAX_PENDING_ROWS: usize = 256;

/// A rank's own failure report (`Msg::Failed`), as the coordinator takes it.
pub(super) struct Failure {
    pub error: String,
    pub link_fault: Option<LinkFault>,
    pub port_counters: Vec<CounterMove>,
    /// A data link its peer closed: a knock-on of another rank's end (see `Serve::knock_on`).
    pub peer_closed: bool,
}

impl Serve<'_> {
    /// What the scan driver decided: the next order to every rank, or its end.
    pub(super) fn scan_step(&mut self, rep: &mut CoordinatorReport, step: Step) {
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
    pub(super) fn on_msg(&mut self, rep: &mut CoordinatorReport, r: Rank, mut m: Msg, at: Instant) {
        let at_ms = at.saturating_duration_since(self.run_start).as_millis() as u64;
        // A rank speaks for itself only: the connection says which rank it is.
        if let Msg::Heartbeat(w) | Msg::Stuck { wait: w, .. } = &mut m {
            w.rank = r;
        }
        if self.foreign_claim(rep, r, &m) {
            return;
        }
        self.heard_from(rep, r, &m, at, at_ms);
        match m {
            Msg::Ready { .. } => self.on_ready(rep, r),
            Msg::ScanSamples {
                rank: _,
                index,
                samples,
                line_rate_gbs,
                traffic,
            } => {
                if let Some(d) = self.scan.as_mut() {
                    if let Some(t) = traffic {
                        d.on_traffic(r, index, t);
                    }
                    let s = d.on_samples(r, index, samples, line_rate_gbs, &self.ranks, Instant::now());
                    self.scan_step(rep, s);
                }
            }
            Msg::Heartbeat(w) => {
                // The sweep's phases: the scan and link setup have their own figures.
                let sweep = matches!(
                    w.phase,
                    Phase::Prepare | Phase::Between | Phase::Check | Phase::ReduceScatter | Phase::AllGather
                );
                if let Some(c) = w.cpu.filter(|_| sweep) {
                    rep.sweep_cpu.entry(r).or_default().add(c);
                }
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
                peer_closed,
                ..
            } => self.on_failed(
                rep,
                r,
                Failure {
                    error,
                    link_fault,
                    port_counters,
                    peer_closed,
                },
            ),
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

    /// A message on rank `r`'s connection that names another rank: recorded as refused, and
    /// ignored.
    fn foreign_claim(&self, rep: &mut CoordinatorReport, r: Rank, m: &Msg) -> bool {
        let claimed = match m {
            Msg::Ready { rank }
            | Msg::Failed { rank, .. }
            | Msg::ScanSamples { rank, .. }
            | Msg::Results(RankResults { rank, .. })
            | Msg::Row { rank, .. } => Some(*rank),
            _ => None,
        };
        let Some(c) = claimed.filter(|&c| c != r) else {
            return false;
        };
        let peer = rep.control_peers.get(&r).cloned().unwrap_or_default();
        let why = format!(
            "rank {}'s control connection sent a {} message for rank {c}; ignored",
            self.shown(r),
            m.kind()
        );
        rep.reject(&peer, &why);
        true
    }

    /// Rank `r` was heard at `at` (`at_ms` on the run clock): its latest report and the
    /// judge's gate, its progress history, its silence clock.
    fn heard_from(&mut self, rep: &mut CoordinatorReport, r: Rank, m: &Msg, at: Instant, at_ms: u64) {
        if let Msg::Heartbeat(w) | Msg::Stuck { wait: w, .. } = m {
            rep.reports.insert(r, (at_ms, w.clone()));
            self.gate.report(r, at_ms, w, matches!(m, Msg::Heartbeat(_)));
        }
        if let Msg::Heartbeat(w) = m {
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
    }

    pub(super) fn on_ready(&mut self, rep: &mut CoordinatorReport, r: Rank) {
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

    pub(super) fn on_failed(
        &mut self,
        rep: &mut CoordinatorReport,
        r: Rank,
        Failure {
            error,
            link_fault,
            port_counters,
            peer_closed,
        }: Failure,
    ) {
        let world = self.cfg.world;
        note_counters(rep, r, port_counters);
        // A completion error on a link to a rank already gone is that rank's death, as a
        // closed link is.
        let gone = rep.gone_ranks();
        let peer_closed = peer_closed
            || link_fault.as_ref().is_some_and(|f| {
                let seen = LinkFault {
                    seen_by: r,
                    ..f.clone()
                };
                crate::ring::diagnosis::linkerror::after_a_gone_peer(&seen, &gone)
            });
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
        let first = match peer_closed {
            true => &mut self.knock_on,
            false => &mut self.first_failure,
        };
        first.get_or_insert_with(|| format!("rank {n} ({host}) failed: {error}"));
        rep.failed.push((r, error));
        self.failing_since.get_or_insert(Instant::now());
        self.urgent = true;
    }

    pub(super) fn on_row(&mut self, r: Rank, row: RowResult) {
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
    pub(super) fn results_so_far(&mut self) {
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
                            chunk_waits: vec![],
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
    pub(super) fn on_interrupted(&mut self, rep: &mut CoordinatorReport, r: Rank, signal: &str, at: &str) {
        self.interrupted.insert(r);
        rep.interrupted_ranks.insert(r);
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
    pub(super) fn interrupt_ends(&mut self, rep: &mut CoordinatorReport, now: Instant) -> bool {
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

    pub(super) fn on_closed(&mut self, rep: &mut CoordinatorReport, r: Rank, err: WireError) {
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
}
