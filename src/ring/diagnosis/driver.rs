//! The link scan at run time (the plan is [`crate::ring::diagnosis::plan`], the judgment
//! [`crate::ring::diagnosis::localize`]): the coordinator's [`Driver`] (which order runs next, the time
//! budget, the one re-check pass) and one rank's part of an order, [`run_order`]: send
//! `reps` x `bytes` to `rank + shift` while receiving the same from `rank - shift`, timed at
//! the receiver. Orders are separated by the coordinator's barrier (every rank's samples
//! arrive before the next order starts), so links of different orders never share a port.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::ring::diagnosis::confirm::{self, LINK_NEW_CONNECTIONS};
use crate::ring::diagnosis::localize::{self, FabricSlow, Thresholds};
use crate::ring::diagnosis::{plan, rates, stall, traffic};
use crate::ring::model::{LinkSample, PortTraffic, Rank, RankInfo, Verdict, VerdictKind};

/// At most this many orders after the plan: one with new partners, then re-runs and new
/// connections for the suspects (what the confirmation pass costs: this many orders' time).
/// Two slow links need 2 re-runs and 4 new connections, beside the order with new partners.
pub const MAX_CONFIRM: usize = 8;

/// Orders after the plan that run whatever `--scan-time` says, when there are suspects:
/// new partners, then a re-run and two new connections, enough to confirm one suspect.
pub(crate) const MIN_CONFIRM: usize = 4;

/// The scan's options, the same on every rank.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ScanOptions {
    /// Time budget of the whole scan, confirmation included (`--scan-time`); the first
    /// two orders and [`MIN_CONFIRM`] orders of confirmation run whatever it says.
    pub budget_s: f64,
    /// Bytes per sample (`--scan-bytes`).
    pub bytes: u64,
    /// Samples per link per order.
    pub reps: u32,
}

/// One order as it ran.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OrderRun {
    pub index: u32,
    pub shift: u32,
    /// `natural`, `reversed`, `shift+k`.
    pub name: String,
    /// Run after the plan, to confirm suspects (new partners, a re-run, new connections).
    pub recheck: bool,
    pub seconds: f64,
}

/// One directed link's figure over the scan (`data.scan.links[]`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ScanLink {
    pub from_rank: Rank,
    pub to_rank: Rank,
    pub from_host: String,
    pub to_host: String,
    /// Median of the link's samples on its first connection (10^9 bytes/s).
    pub gbs: f64,
    pub samples: usize,
    /// The rate the link is judged against: its ends' expected port rates.
    pub line_rate_gbs: Option<f64>,
    /// Named by a verdict.
    pub slow: bool,
}

/// A directed link the scan did not measure, and why (`data.scan.unmeasured[]`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Unmeasured {
    pub from_rank: Rank,
    pub to_rank: Rank,
    pub from_host: String,
    pub to_host: String,
    /// `budget`: `--scan-time` ended the plan before its order; `no_samples`: its order
    /// ran but its receiver reported no sample of it.
    pub reason: &'static str,
}

/// What the scan found (`data.scan`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ScanReport {
    pub bytes: u64,
    pub reps: u32,
    pub budget_s: f64,
    pub seconds: f64,
    pub orders: Vec<OrderRun>,
    /// Active port rate of each rank's data interface, where known (`{rank: gbs}`).
    pub line_rate_gbs: BTreeMap<Rank, f64>,
    pub median_gbs: Option<f64>,
    pub links: Vec<ScanLink>,
    pub fabric_slow: Option<FabricSlow>,
    /// Would-be verdicts the ends' wait for a CPU could explain (`evidence.not_judged`):
    /// unknown, not part of `data.verdicts`.
    pub not_judged: Vec<Verdict>,
    /// Suspects that new connections did not confirm (`evidence.unconfirmed`): figures,
    /// not verdicts, not part of `data.verdicts`.
    pub unconfirmed: Vec<Verdict>,
    /// Seconds the orders after the plan took (new partners, re-runs, new connections).
    pub confirm_s: f64,
    /// What one plan order takes when none of its links is slow (the median over the plan
    /// orders of each one's time less its slowest link's excess): what sized the plan.
    pub typical_order_s: Option<f64>,
    /// Directed links of the world (n(n-1)); `links[]` holds the measured ones.
    pub links_total: usize,
    /// The directed links no order measured, and why.
    pub unmeasured: Vec<Unmeasured>,
    /// Confirmation orders the budget left out (suspects they would have measured stay
    /// unconfirmed).
    pub confirm_cut_orders: usize,
    /// The verdicts of the last judgment (after the confirmation); they join `data.verdicts`.
    #[serde(skip)]
    pub verdicts: Vec<Verdict>,
    /// Verdicts of the first judgment that the re-measurement did not keep.
    pub cleared_by_recheck: Vec<String>,
    /// The ranks whose wait for a CPU set aside what the scan measured
    /// ([`localize::Analysis::cpu_bound`]): the sweep's stalls beside them are set aside too.
    #[serde(skip)]
    pub cpu_bound: BTreeMap<Rank, f64>,
    /// The stalled links its stall verdict (in `verdicts` or `not_judged`) was built from:
    /// the run's end weighs them against a port flap and the sweep's stalls, typed.
    #[serde(skip)]
    pub stalls: Vec<stall::Stall>,
}

/// One scan order for every rank: send `reps` x `bytes` to rank + `shift`, receive from
/// rank - `shift`; samples are numbered `index`. Each index is its own connections: a rank
/// opens new ones for an index it has not run (new source ports) and reuses them for one it
/// has (a re-run).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanOrder {
    pub index: u32,
    pub shift: u32,
    pub bytes: u64,
    pub reps: u32,
}

/// What the coordinator does after a rank's samples.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// Other ranks have not reported this order yet.
    Wait,
    /// Every rank runs this order (the coordinator sends it as a `ScanRun`).
    Run(ScanOrder),
    /// The scan is over: broadcast `ScanEnd`, then [`Driver::report`].
    Done,
}

/// Where the scan is: the plan, one order with new partners, the suspects' re-runs, their
/// new connections, the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Plan,
    Partners,
    Rerun,
    Confirm,
    Over,
}

/// The coordinator's side of the scan.
pub(crate) struct Driver {
    n: usize,
    opts: ScanOptions,
    policy: Thresholds,
    queue: Vec<(u32, u32, bool)>,
    current: Option<(u32, u32, bool, Instant)>,
    pending: BTreeSet<Rank>,
    planned: bool,
    stage: Stage,
    next_index: u32,
    /// The index of each shift's first order (its connections).
    first_index: BTreeMap<u32, u32>,
    started: Option<Instant>,
    finished: Option<Instant>,
    first_verdicts: Vec<Verdict>,
    /// Each plan order's time less its slowest link's excess ([`typical_order_time`]).
    typical: Vec<Duration>,
    confirm_cut: usize,
    pub orders: Vec<OrderRun>,
    pub samples: Vec<LinkSample>,
    pub line_rates: BTreeMap<Rank, f64>,
    /// Every rank's data port over the orders it ran: its bytes beside the probe's.
    pub traffic: traffic::Totals,
}

impl Driver {
    pub fn new(n: usize, opts: ScanOptions, policy: Thresholds) -> Driver {
        Driver {
            n,
            opts,
            policy,
            queue: Vec::new(),
            current: None,
            pending: BTreeSet::new(),
            planned: false,
            stage: Stage::Plan,
            next_index: 0,
            first_index: BTreeMap::new(),
            started: None,
            finished: None,
            first_verdicts: Vec::new(),
            typical: Vec::new(),
            confirm_cut: 0,
            orders: Vec::new(),
            samples: Vec::new(),
            line_rates: BTreeMap::new(),
            traffic: traffic::Totals::default(),
        }
    }

    /// The first order (the natural ring), or Done when there are no links (n < 2).
    pub fn start(&mut self, now: Instant) -> Step {
        self.started = Some(now);
        match plan::plan(self.n, 1).first() {
            Some(o) => {
                self.queue.push((o.index, o.shift, false));
                self.first_index.insert(o.shift, o.index);
                self.next_index = 1;
                self.launch(now)
            }
            None => {
                self.finished = Some(now);
                Step::Done
            }
        }
    }

    fn launch(&mut self, now: Instant) -> Step {
        if self.queue.is_empty() {
            self.finished = Some(now);
            return Step::Done;
        }
        let (index, shift, recheck) = self.queue.remove(0);
        if !recheck {
            self.first_index.insert(shift, index);
        }
        self.current = Some((index, shift, recheck, now));
        self.pending = (0..self.n as Rank).collect();
        Step::Run(ScanOrder {
            index,
            shift,
            bytes: self.opts.bytes,
            reps: self.opts.reps,
        })
    }

    /// Samples of the current order from `rank`. Samples for another order are ignored.
    pub(crate) fn on_samples(
        &mut self,
        rank: Rank,
        index: u32,
        samples: Vec<LinkSample>,
        line_rate: Option<f64>,
        ranks: &[RankInfo],
        now: Instant,
    ) -> Step {
        let Some((cur, shift, recheck, t0)) = self.current else {
            return Step::Wait;
        };
        if cur != index || !self.pending.remove(&rank) {
            return Step::Wait;
        }
        if let Some(r) = line_rate.filter(|r| r.is_finite() && *r > 0.0) {
            self.line_rates.insert(rank, r);
        }
        // Only the links into this rank, for this order: a confused peer cannot invent others.
        let n = self.n as Rank;
        self.samples.extend(samples.into_iter().filter(|s| {
            s.to_rank == rank && s.from_rank < n && (s.from_rank + shift) % n == rank && s.order == index
        }));
        if !self.pending.is_empty() {
            return Step::Wait;
        }
        let took = now.duration_since(t0);
        self.orders.push(OrderRun {
            index,
            shift,
            name: plan::order(self.n, shift, index)
                .map(|o| o.name())
                .unwrap_or_default(),
            recheck,
            seconds: took.as_secs_f64(),
        });
        self.current = None;
        if !recheck {
            // One slow link or one rank's hiccup in an order must not shrink the plan
            // (issue 45: 12-18 of 30 links measured): its typical time, not its wall time.
            self.typical.push(typical_order_time(took, &self.samples, index));
        }
        if !self.planned {
            // Every shift is planned; the budget ends the plan order by order.
            self.planned = true;
            for o in plan::plan(self.n, usize::MAX).into_iter().skip(1) {
                self.queue.push((o.index, o.shift, false));
            }
            self.next_index = self.n.saturating_sub(1).max(1) as u32;
        }
        self.trim_to_budget(now);
        while self.queue.is_empty() && self.stage != Stage::Over {
            self.next_stage(ranks);
            self.trim_to_budget(now);
        }
        self.launch(now)
    }

    /// What a plan order takes: the median of the plan orders' typical times.
    fn order_estimate(&self) -> Option<Duration> {
        let mut t = self.typical.clone();
        t.sort();
        t.get(t.len() / 2).copied()
    }

    /// Drop the queued orders the budget has no room for: the next order starts only when
    /// the time so far plus what it is expected to take fits in `--scan-time`, past the
    /// minimum (two plan orders; [`MIN_CONFIRM`] orders of confirmation).
    fn trim_to_budget(&mut self, now: Instant) {
        let Some(&(_, shift, _)) = self.queue.first() else {
            return;
        };
        let elapsed = self.started.map(|s| now.duration_since(s)).unwrap_or_default();
        let typical = self.order_estimate().unwrap_or_default();
        // A confirmation order re-measures a suspect's shift: as long as that shift took.
        let expected = match self.stage {
            Stage::Plan => typical,
            _ => self
                .orders
                .iter()
                .find(|o| o.shift == shift)
                .map(|o| Duration::from_secs_f64(o.seconds))
                .unwrap_or(typical),
        };
        let over = elapsed + expected > Duration::from_secs_f64(self.opts.budget_s);
        let plan_ran = self.orders.iter().filter(|o| !o.recheck).count();
        let confirm_ran = self.orders.len() - plan_ran;
        match self.stage {
            Stage::Plan => {
                if over && plan_ran >= plan_floor(self.n) {
                    self.queue.clear();
                }
            }
            Stage::Over => {}
            _ => {
                if confirm_ran >= MAX_CONFIRM || (over && confirm_ran >= MIN_CONFIRM) {
                    self.confirm_cut += self.queue.len();
                    self.queue.clear();
                    self.stage = Stage::Over;
                }
            }
        }
    }

    /// The plan (or a stage after it) is over: queue what the next stage measures.
    fn next_stage(&mut self, ranks: &[RankInfo]) {
        let a = self.analyze(ranks);
        // A link not judged for a starved host is measured again too: the host may be idle.
        // So are senders and receivers the orders run could not tell apart.
        let suspects: Vec<Verdict> = a
            .verdicts
            .iter()
            .chain(&a.not_judged)
            .chain(&a.tied)
            .cloned()
            .collect();
        if self.stage == Stage::Plan {
            self.first_verdicts = a.verdicts.clone();
        }
        if suspects.is_empty() {
            self.stage = Stage::Over;
            return;
        }
        match self.stage {
            Stage::Plan => {
                self.stage = Stage::Partners;
                // Other partners first (the minimum plan cannot tell two slow senders from
                // two slow receivers): the next shift the plan did not run, if any.
                if let Some(s) = (1..self.n as u32).find(|s| !self.first_index.contains_key(s)) {
                    self.first_index.insert(s, self.next_index);
                    self.push(s, None);
                }
            }
            Stage::Partners => {
                // A link's own order again (a transient washes out of its first connection);
                // the suspects still standing after it get the new connections.
                self.stage = Stage::Rerun;
                for s in rerun_orders(&suspects, self.n, &self.first_index) {
                    self.push(s.0, s.1);
                }
            }
            Stage::Rerun => {
                self.stage = Stage::Confirm;
                for shift in new_connection_orders(&suspects, self.n) {
                    self.push(shift, None);
                }
            }
            Stage::Confirm | Stage::Over => self.stage = Stage::Over,
        }
    }

    /// Queue `shift` after the plan: a re-run of order `rerun`, else new connections.
    fn push(&mut self, shift: u32, rerun: Option<u32>) {
        let index = rerun.unwrap_or_else(|| {
            self.next_index += 1;
            self.next_index - 1
        });
        self.queue.push((index, shift, true));
    }

    fn analyze(&self, ranks: &[RankInfo]) -> localize::Analysis {
        let expected = rates::expected_rates(ranks, &self.line_rates);
        localize::analyze(ranks, &self.samples, &self.policy, |r| expected.get(&r).copied())
    }

    /// What `rank`'s data port carried in the current order, once per rank and order
    /// (before its samples of it: those end its part of the order).
    pub(crate) fn on_traffic(&mut self, rank: Rank, index: u32, t: &PortTraffic) {
        if self.current.is_some_and(|c| c.0 == index) && self.pending.contains(&rank) {
            self.traffic.add(rank, t);
        }
    }

    /// The last judgment: its analysis, the confirmation's verdicts and suspects, and the
    /// verdicts in all (downtrained ports first), each slow one said with what its ports
    /// carried ([`traffic::annotate`]).
    fn judged(&self, ranks: &[RankInfo]) -> (localize::Analysis, confirm::Confirmed, Vec<Verdict>) {
        let mut a = self.analyze(ranks);
        let mut c = confirm::confirm(ranks, &a, &self.samples, &self.policy);
        let mut verdicts = rates::downtrained(ranks, &self.line_rates);
        verdicts.append(&mut c.verdicts);
        // A rank starved of CPU holds up every order it is in, so the run's silences say
        // nothing of the fabric: they are said beside the slow links it explains, not judged.
        let stalls = stall::verdicts(&self.samples, &self.orders, ranks);
        if a.cpu_bound.is_empty() {
            verdicts.extend(stalls);
        } else {
            a.not_judged.extend(
                stalls
                    .into_iter()
                    .map(|v| localize::set_aside(v, &a.cpu_bound, ranks)),
            );
        }
        for v in [&mut verdicts, &mut c.unconfirmed, &mut a.not_judged] {
            traffic::annotate(v, &self.traffic, ranks);
        }
        (a, c, verdicts)
    }

    /// The scan's figures and verdicts.
    pub fn report(&self, ranks: &[RankInfo]) -> ScanReport {
        let (a, c, verdicts) = self.judged(ranks);
        let host = |r: Rank| {
            ranks
                .iter()
                .find(|i| i.rank == r)
                .map(|i| i.host.clone())
                .unwrap_or_default()
        };
        let kept: Vec<_> = verdicts
            .iter()
            .chain(&c.unconfirmed)
            .map(|v| (v.from_rank, v.to_rank))
            .collect();
        ScanReport {
            bytes: self.opts.bytes,
            reps: self.opts.reps,
            budget_s: self.opts.budget_s,
            seconds: match (self.started, self.finished) {
                (Some(a), Some(b)) => b.duration_since(a).as_secs_f64(),
                _ => 0.0,
            },
            orders: self.orders.clone(),
            line_rate_gbs: self.line_rates.clone(),
            median_gbs: a.median_gbs,
            links: a
                .links
                .iter()
                .map(|l| ScanLink {
                    from_rank: l.from_rank,
                    to_rank: l.to_rank,
                    from_host: host(l.from_rank),
                    to_host: host(l.to_rank),
                    gbs: l.gbs,
                    samples: l.samples,
                    line_rate_gbs: l.line_rate_gbs,
                    slow: l.slow,
                })
                .collect(),
            fabric_slow: a.fabric_slow,
            cpu_bound: a.cpu_bound,
            stalls: stall::stalls(&self.samples),
            not_judged: a.not_judged,
            unconfirmed: c.unconfirmed,
            // A fold from +0.0: an empty f64 sum is -0.0, printed as `-0.0` when nothing was confirmed.
            confirm_s: self
                .orders
                .iter()
                .filter(|o| o.recheck)
                .fold(0.0, |t, o| t + o.seconds),
            typical_order_s: self.order_estimate().map(|d| d.as_secs_f64()),
            links_total: self.n * self.n.saturating_sub(1),
            unmeasured: unmeasured_links(
                self.n,
                &self.samples,
                &self.orders.iter().map(|o| o.shift).collect(),
            )
            .into_iter()
            .map(|(from, to, reason)| Unmeasured {
                from_rank: from,
                to_rank: to,
                from_host: host(from),
                to_host: host(to),
                reason,
            })
            .collect(),
            confirm_cut_orders: self.confirm_cut,
            cleared_by_recheck: self
                .first_verdicts
                .iter()
                .filter(|v| !kept.contains(&(v.from_rank, v.to_rank)))
                .map(|v| v.message.clone())
                .collect(),
            verdicts,
        }
    }
}

/// What an order takes when none of its links is slow: its wall time `took` less the
/// slowest link's time beyond the median link's (a link's time: its samples of order
/// `index`, summed). Never below the median link's time nor above `took`. Pure.
fn typical_order_time(took: Duration, samples: &[LinkSample], index: u32) -> Duration {
    let mut per_link: BTreeMap<(Rank, Rank), f64> = BTreeMap::new();
    for s in samples
        .iter()
        .filter(|s| s.order == index && s.seconds.is_finite() && s.seconds >= 0.0)
    {
        *per_link.entry((s.from_rank, s.to_rank)).or_insert(0.0) += s.seconds;
    }
    let mut t: Vec<f64> = per_link.into_values().collect();
    // A stalled connection's silence is not the order's pace either (the samples start at
    // its first chunk): without it, a black hole on one rank shrinks the plan.
    let silent = samples
        .iter()
        .filter(|s| s.order == index)
        .filter_map(|s| s.silence_s.filter(|x| x.is_finite() && *x > 0.0))
        .fold(0.0, f64::max);
    let took = took.saturating_sub(Duration::try_from_secs_f64(silent).unwrap_or_default());
    if t.is_empty() {
        return took;
    }
    t.sort_by(f64::total_cmp);
    let (median, max) = (t[t.len() / 2], t[t.len() - 1]);
    let excess = Duration::try_from_secs_f64(max - median).unwrap_or_default();
    took.saturating_sub(excess)
        .max(Duration::try_from_secs_f64(median).unwrap_or_default())
        .min(took)
}

/// The re-runs of the suspect links' own orders, as (shift, Some(index)), once per shift.
fn rerun_orders(suspects: &[Verdict], n: usize, first: &BTreeMap<u32, u32>) -> Vec<(u32, Option<u32>)> {
    let mut out: Vec<(u32, Option<u32>)> = Vec::new();
    for s in suspects.iter().filter_map(|v| link_shift(v, n)) {
        if let Some(&i) = first.get(&s)
            && !out.contains(&(s, Some(i)))
        {
            out.push((s, Some(i)));
        }
    }
    out
}

/// The shift that carries a slow-link suspect, if it is one.
fn link_shift(v: &Verdict, n: usize) -> Option<u32> {
    let n32 = n as u32;
    match (v.kind, v.from_rank, v.to_rank) {
        (VerdictKind::SlowLink, Some(a), Some(b)) if a < n32 && b < n32 && a != b => {
            Some((b + n32 - a) % n32)
        }
        _ => None,
    }
}

/// The shifts of new connections that confirm `suspects`, in the suspects' order and each
/// suspect's whole (a link's shift [`LINK_NEW_CONNECTIONS`] times, a node's natural and
/// reversed shifts once), so that a budget cut leaves whole suspects unconfirmed rather
/// than every suspect half measured. Suspects that share a shift share its orders.
fn new_connection_orders(suspects: &[Verdict], n: usize) -> Vec<u32> {
    let n32 = n as u32;
    let mut want: Vec<(u32, usize)> = Vec::new();
    let add = |s: u32, k: usize, want: &mut Vec<(u32, usize)>| {
        if n32 == 0 || s.is_multiple_of(n32) {
            return;
        }
        match want.iter_mut().find(|(x, _)| *x == s) {
            Some(e) => e.1 = e.1.max(k),
            None => want.push((s, k)),
        }
    };
    for v in suspects {
        if let Some(s) = link_shift(v, n) {
            add(s, LINK_NEW_CONNECTIONS, &mut want);
        } else if matches!(v.kind, VerdictKind::SlowEgress | VerdictKind::SlowIngress) {
            add(1, 1, &mut want);
            add(n32.saturating_sub(1), 1, &mut want);
        }
    }
    want.into_iter()
        .flat_map(|(s, k)| std::iter::repeat_n(s, k))
        .collect()
}

/// Plan orders that run whatever the budget: two separate a node from a link (n >= 3).
fn plan_floor(n: usize) -> usize {
    match n {
        0 | 1 => 0,
        2 => 1,
        _ => 2,
    }
}

/// The directed links no sample measured, with why: `budget` when no order of its shift
/// ran (`--scan-time` ended the plan), `no_samples` when one did. Pure.
fn unmeasured_links(
    n: usize,
    samples: &[LinkSample],
    shifts_run: &BTreeSet<u32>,
) -> Vec<(Rank, Rank, &'static str)> {
    let measured: BTreeSet<(Rank, Rank)> = samples
        .iter()
        .filter(|s| s.seconds.is_finite() && s.seconds > 0.0)
        .map(|s| (s.from_rank, s.to_rank))
        .collect();
    let n32 = n as Rank;
    let mut out = Vec::new();
    for from in 0..n32 {
        for to in (0..n32).filter(|&t| t != from && !measured.contains(&(from, t))) {
            let why = if shifts_run.contains(&((to + n32 - from) % n32)) {
                "no_samples"
            } else {
                "budget"
            };
            out.push((from, to, why));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::model::VerdictKind;

    /// One link's sample of the first order: `seconds` for one byte.
    fn sample_of_order_0(from: Rank, to: Rank, seconds: f64) -> LinkSample {
        LinkSample {
            order: 0,
            from_rank: from,
            to_rank: to,
            bytes: 1,
            seconds,
            cpu_wait: None,
            silence_s: None,
        }
    }

    const BASE: f64 = 100e6;

    /// Drive a 5-rank scan with synthetic samples: `slow(from, to, index, first_time_this_shift, rep)`
    /// says which samples ran at a fifth of the base rate. Deterministic: no clock, no load.
    fn drive(slow: impl Fn(Rank, Rank, u32, bool, u32) -> bool) -> ScanReport {
        drive_n(5, 10.0, slow)
    }

    fn drive_n(n: Rank, budget_s: f64, slow: impl Fn(Rank, Rank, u32, bool, u32) -> bool) -> ScanReport {
        drive_timed(n, budget_s, slow, |_, _, _, _| 0.0)
    }

    /// [`drive_n`] with `stall(index, from, to, rep)` seconds added to a sample (a rank's
    /// hiccup); an order's wall time is 100 ms plus its longest stall.
    fn drive_timed(
        n: Rank,
        budget_s: f64,
        slow: impl Fn(Rank, Rank, u32, bool, u32) -> bool,
        stall: impl Fn(u32, Rank, Rank, u32) -> f64,
    ) -> ScanReport {
        let ranks: Vec<RankInfo> = (0..n)
            .map(|r| RankInfo {
                neighbor: None,
                port_max: None,
                rails: Vec::new(),
                node: None,
                rank: r,
                host: format!("node-{r}"),
                address: format!("198.19.0.{}:4000", 10 + r),
                device: Some("eth1".into()),
                transport: "tcp".into(),
                pid: None,
                capabilities: vec!["tcp".into()],
            })
            .collect();
        let opts = ScanOptions {
            budget_s,
            bytes: 1 << 20,
            reps: 3,
        };
        let mut d = Driver::new(n as usize, opts, Thresholds::default());
        let mut now = Instant::now();
        let mut step = d.start(now);
        let mut seen = BTreeSet::new();
        let mut orders = 0;
        while let Step::Run(ScanOrder {
            index,
            shift,
            bytes,
            reps,
        }) = step
        {
            orders += 1;
            assert!(orders < 50, "the scan does not end");
            let first = seen.insert(shift);
            let longest = (0..n)
                .flat_map(|to| (0..reps).map(move |rep| (to, rep)))
                .map(|(to, rep)| stall(index, (to + n - shift % n) % n, to, rep))
                .fold(0.0, f64::max);
            now += Duration::from_millis(100) + Duration::from_secs_f64(longest);
            step = Step::Wait;
            for to in 0..n {
                let from = (to + n - shift % n) % n;
                let samples = (0..reps)
                    .map(|rep| {
                        let rate = if slow(from, to, index, first, rep) {
                            0.2 * BASE
                        } else {
                            BASE
                        };
                        // 0-4% of spread, as real links have.
                        let jitter = 1.0 + 0.01 * ((from * 7 + to * 3 + rep) % 5) as f64;
                        LinkSample {
                            order: index,
                            from_rank: from,
                            to_rank: to,
                            bytes,
                            seconds: bytes as f64 / rate * jitter + stall(index, from, to, rep),
                            cpu_wait: None,
                            silence_s: None,
                        }
                    })
                    .collect();
                step = d.on_samples(to, index, samples, None, &ranks, now);
            }
        }
        assert_eq!(step, Step::Done);
        d.report(&ranks)
    }

    fn kinds(r: &ScanReport) -> Vec<(VerdictKind, Option<Rank>, Option<Rank>)> {
        r.verdicts
            .iter()
            .map(|v| (v.kind, v.from_rank, v.to_rank))
            .collect()
    }

    /// A link slow in most of its first samples and fast when re-measured: the first
    /// judgment names it, the re-check clears it, and the report says so.
    #[test]
    fn one_slow_link_or_hiccup_does_not_size_the_plan() {
        let s = sample_of_order_0;
        let ms = |m: u64| Duration::from_millis(m);
        // (links' seconds, order wall time, expected typical time)
        let cases: [(Vec<LinkSample>, u64, u64); 5] = [
            // Healthy: every link 0.1 s, the order 0.12 s with its barrier.
            ((0..6).map(|r| s(r, (r + 1) % 6, 0.1)).collect(), 120, 120),
            // A rank frozen 2.5 s in the first order: its link took 2.6 s.
            (
                (0..6)
                    .map(|r| s(r, (r + 1) % 6, if r == 3 { 2.6 } else { 0.1 }))
                    .collect(),
                2620,
                120,
            ),
            // Two samples per link are summed per link.
            (
                (0..4)
                    .flat_map(|r| [s(r, (r + 1) % 4, 0.05), s(r, (r + 1) % 4, 0.05)])
                    .collect(),
                110,
                110,
            ),
            // Samples of another order do not count; no samples: the wall time.
            (
                vec![LinkSample {
                    order: 1,
                    ..s(0, 1, 9.0)
                }],
                300,
                300,
            ),
            // Never below the median link.
            ((0..3).map(|r| s(r, (r + 1) % 3, 1.0)).collect(), 500, 500),
        ];
        for (samples, took, want) in cases {
            let got = typical_order_time(ms(took), &samples, 0);
            assert!(got.abs_diff(ms(want)) < ms(1), "{got:?} for {samples:?}");
        }
    }

    #[test]
    fn a_transient_is_cleared_by_the_recheck() {
        let r = drive(|from, to, _, first, rep| (from, to) == (3, 0) && first && rep < 2);
        assert!(r.verdicts.is_empty(), "{:#?}", r.verdicts);
        assert_eq!(r.cleared_by_recheck.len(), 1, "{:?}", r.cleared_by_recheck);
        assert!(
            r.cleared_by_recheck[0].contains("rank 3") && r.cleared_by_recheck[0].contains("rank 0"),
            "{:?}",
            r.cleared_by_recheck
        );
        // Shift 2 carries 3 -> 0; it ran again as a re-check, and the link was judged on all six samples.
        assert!(
            r.orders.iter().any(|o| o.recheck && o.shift == 2),
            "{:?}",
            r.orders
        );
        let l = r
            .links
            .iter()
            .find(|l| (l.from_rank, l.to_rank) == (3, 0))
            .unwrap();
        assert_eq!(l.samples, 6);
        assert!(!l.slow);
    }

    /// The same link slow in every sample, first pass and re-check: the verdict stands.
    #[test]
    fn a_persistent_slow_link_survives_the_recheck() {
        let r = drive(|from, to, _, _, _| (from, to) == (3, 0));
        let kinds: Vec<_> = r
            .verdicts
            .iter()
            .map(|v| (v.kind, v.from_rank, v.to_rank))
            .collect();
        assert_eq!(
            kinds,
            [(VerdictKind::SlowLink, Some(3), Some(0))],
            "{:#?}",
            r.verdicts
        );
        assert!(r.cleared_by_recheck.is_empty(), "{:?}", r.cleared_by_recheck);
        assert!(
            r.orders.iter().any(|o| o.recheck && o.shift == 2),
            "{:?}",
            r.orders
        );
    }

    /// The pair slow on its first connection (order 2, shift 2, re-run too) and fast on
    /// each new one: a slow path, not a link; it cost the re-run and two new connections.
    #[test]
    fn slowness_that_moves_with_the_connection_is_a_slow_path() {
        let r = drive(|from, to, index, _, _| (from, to) == (3, 0) && index == 2);
        assert_eq!(
            kinds(&r),
            [(VerdictKind::SlowPath, Some(3), Some(0))],
            "{:#?}",
            r.verdicts
        );
        let v = &r.verdicts[0];
        assert_eq!(v.action(), crate::ring::model::Action::Ticket);
        assert!(
            v.message.contains("slow on some paths and not others"),
            "{}",
            v.message
        );
        assert!(!v.next.as_deref().unwrap().contains("cable"), "{:?}", v.next);
        crate::ring::diagnosis::pastes::assert_next_pastes(v);
        let extra: Vec<(u32, u32)> = r
            .orders
            .iter()
            .filter(|o| o.recheck)
            .map(|o| (o.index, o.shift))
            .collect();
        assert_eq!(extra, [(2, 2), (4, 2), (5, 2)]);
        assert!((r.confirm_s - 0.3).abs() < 1e-9, "{}", r.confirm_s);
    }

    /// A slow egress that only the first connections saw: unconfirmed, listed with the new
    /// connections' figures, not a verdict.
    #[test]
    fn a_node_suspect_new_connections_clear_is_unconfirmed() {
        let r = drive(|from, _, index, _, _| from == 1 && index < 4);
        assert!(r.verdicts.is_empty(), "{:#?}", r.verdicts);
        assert_eq!(r.unconfirmed.len(), 1, "{:#?}", r.unconfirmed);
        let u = &r.unconfirmed[0];
        assert_eq!((u.kind, u.from_rank), (VerdictKind::SlowEgress, Some(1)));
        assert_eq!(u.action(), crate::ring::model::Action::Investigate);
        assert!(
            u.message
                .starts_with("UNCONFIRMED (not a verdict): SLOW EGRESS rank 1"),
            "{}",
            u.message
        );
        // Confirmed the same way when the new connections are slow too.
        let r = drive(|from, _, _, _, _| from == 1);
        assert_eq!(kinds(&r), [(VerdictKind::SlowEgress, Some(1), None)]);
        assert!(
            r.verdicts[0].message.contains("confirmed on 2 new connection(s)"),
            "{}",
            r.verdicts[0].message
        );
    }

    /// Two slow senders in the minimum plan of 4 ranks (shifts 1 and 3) look like two slow
    /// receivers too; the order with new partners (shift 2) tells them apart.
    #[test]
    fn two_slow_egresses_in_the_minimum_plan() {
        let r = drive_n(4, 0.0, |from, _, _, _, _| from == 0 || from == 2);
        assert_eq!(
            kinds(&r),
            [
                (VerdictKind::SlowEgress, Some(0), None),
                (VerdictKind::SlowEgress, Some(2), None)
            ],
            "{:#?}",
            r.verdicts
        );
        assert_eq!(r.orders[2].shift, 2, "{:?}", r.orders);
        assert!(r.orders.iter().filter(|o| o.recheck).count() <= MAX_CONFIRM);
    }

    /// Issue 45: a rank frozen 2.5 s in the first order (its incoming link's first sample)
    /// and a real slow link (1 -> 4, shift 3) elsewhere, 6 ranks, 10 s. Sized from the
    /// first order's wall time the plan was 3 orders (shift 3 never ran: a false healthy);
    /// sized from its typical time every link is measured and the slow one named.
    #[test]
    fn a_hiccup_in_the_first_order_does_not_cut_the_plan() {
        let hiccup = |index: u32, from: Rank, to: Rank, rep: u32| {
            if (index, from, to, rep) == (0, 2, 3, 0) {
                2.5
            } else {
                0.0
            }
        };
        let r = drive_timed(6, 10.0, |from, to, _, _, _| (from, to) == (1, 4), hiccup);
        assert_eq!(
            r.orders.iter().filter(|o| !o.recheck).count(),
            5,
            "{:?}",
            r.orders
        );
        assert!(r.unmeasured.is_empty(), "{:?}", r.unmeasured);
        assert_eq!(r.links_total, 30);
        assert_eq!(
            kinds(&r),
            [(VerdictKind::SlowLink, Some(1), Some(4))],
            "{:#?}",
            r.verdicts
        );
        // The typical order is 100 ms, not the first order's 2.6 s.
        assert!(
            (r.typical_order_s.unwrap() - 0.1).abs() < 0.01,
            "{:?}",
            r.typical_order_s
        );
        // Healthy but for the hiccup: every link measured, no verdict.
        let r = drive_timed(6, 10.0, |_, _, _, _, _| false, hiccup);
        assert!(
            r.verdicts.is_empty() && r.unmeasured.is_empty(),
            "{:#?} {:?}",
            r.verdicts,
            r.unmeasured
        );
    }

    /// A budget that holds 2 orders of 6 ranks: the minimum plan runs, and the 18 links of
    /// the 3 shifts it cut are listed as unmeasured for the budget, none measured.
    #[test]
    fn links_the_budget_cut_are_listed() {
        let r = drive_n(6, 0.25, |_, _, _, _, _| false);
        let shifts: Vec<u32> = r.orders.iter().map(|o| o.shift).collect();
        assert_eq!(shifts, [1, 5], "{:?}", r.orders);
        assert_eq!(r.unmeasured.len(), 18);
        assert_eq!(r.links.len() + r.unmeasured.len(), r.links_total);
        for u in &r.unmeasured {
            assert_eq!(u.reason, "budget", "{u:?}");
            assert!(![1, 5].contains(&((u.to_rank + 6 - u.from_rank) % 6)), "{u:?}");
            assert_eq!(u.from_host, format!("node-{}", u.from_rank));
        }
        // Nothing confirmed: +0.0, never -0.0.
        assert!(
            r.confirm_s == 0.0 && r.confirm_s.is_sign_positive(),
            "{}",
            r.confirm_s
        );
        assert_eq!(serde_json::to_value(&r).unwrap()["confirm_s"].to_string(), "0.0");
    }

    /// Two slow links from one sender (0 -> 2 and 0 -> 3, 6 ranks): both re-runs reproduce
    /// them, and each gets its new connections: two slow links, none left unconfirmed.
    #[test]
    fn two_slow_links_from_one_sender_are_both_confirmed() {
        let r = drive_n(6, 10.0, |from, to, _, _, _| from == 0 && (to == 2 || to == 3));
        assert_eq!(
            kinds(&r),
            [
                (VerdictKind::SlowLink, Some(0), Some(2)),
                (VerdictKind::SlowLink, Some(0), Some(3))
            ],
            "{:#?}\n{:#?}",
            r.verdicts,
            r.unconfirmed
        );
        assert!(r.unconfirmed.is_empty(), "{:#?}", r.unconfirmed);
        assert_eq!(r.confirm_cut_orders, 0);
    }

    /// A transient on one link and a real slow link: the re-run clears the transient, so
    /// the new connections go to the one that reproduced.
    #[test]
    fn new_connections_go_where_the_rerun_reproduced() {
        let r = drive_n(6, 10.0, |from, to, _, first, rep| {
            (from, to) == (0, 3) || ((from, to) == (1, 3) && first && rep < 2)
        });
        assert_eq!(
            kinds(&r),
            [(VerdictKind::SlowLink, Some(0), Some(3))],
            "{:#?}",
            r.verdicts
        );
        let new: Vec<u32> = r
            .orders
            .iter()
            .filter(|o| o.recheck && o.index >= 5)
            .map(|o| o.shift)
            .collect();
        assert_eq!(new, [3, 3], "{:?}", r.orders);
    }

    /// `--scan-time` bounds the confirmation too: past the budget only [`MIN_CONFIRM`]
    /// orders run, the rest are counted as cut.
    #[test]
    fn the_budget_bounds_the_confirmation() {
        // 5 ranks, the plan fits (4 x 100 ms) and nothing more.
        let r = drive_n(5, 0.45, |from, to, _, _, _| from == 0 && (to == 2 || to == 3));
        let confirm = r.orders.iter().filter(|o| o.recheck).count();
        assert_eq!(confirm, MIN_CONFIRM, "{:?}", r.orders);
        assert!(r.confirm_cut_orders > 0);
        assert_eq!(r.seconds, 0.1 * (4 + MIN_CONFIRM) as f64);
    }

    #[test]
    fn unmeasured_links_table() {
        let s = sample_of_order_0;
        let run = |v: &[u32]| v.iter().copied().collect::<BTreeSet<u32>>();
        // (n, samples, shifts run, expected)
        type Case = (
            usize,
            Vec<LinkSample>,
            BTreeSet<u32>,
            Vec<(Rank, Rank, &'static str)>,
        );
        let cases: Vec<Case> = vec![
            (
                3,
                (0..3)
                    .flat_map(|f| [s(f, (f + 1) % 3, 0.1), s(f, (f + 2) % 3, 0.1)])
                    .collect(),
                run(&[1, 2]),
                vec![],
            ),
            (
                3,
                (0..3).map(|f| s(f, (f + 1) % 3, 0.1)).collect(),
                run(&[1]),
                vec![(0, 2, "budget"), (1, 0, "budget"), (2, 1, "budget")],
            ),
            // A sample of no time or NaN measured nothing: its order ran, so `no_samples`.
            (
                2,
                vec![s(0, 1, 0.1), s(1, 0, f64::NAN), s(1, 0, 0.0)],
                run(&[1]),
                vec![(1, 0, "no_samples")],
            ),
            (1, vec![], run(&[]), vec![]),
        ];
        for (n, samples, shifts, want) in cases {
            assert_eq!(unmeasured_links(n, &samples, &shifts), want, "n={n}");
        }
    }
}
