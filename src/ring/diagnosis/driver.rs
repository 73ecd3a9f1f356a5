//! The link scan at run time (the plan is [`crate::ring::diagnosis::plan`], the judgment
//! [`crate::ring::diagnosis::localize`]): the coordinator's [`Driver`] (which order runs next, the time
//! budget, the one re-check pass) and one rank's part of an order, [`run_order`]: send
//! `reps` x `bytes` to `rank + shift` while receiving the same from `rank - shift`, timed at
//! the receiver. Orders are separated by the coordinator's barrier (every rank's samples
//! arrive before the next order starts), so links of different orders never share a port.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::ring::diagnosis::localize::{self, FabricSlow, Policy};
use crate::ring::diagnosis::confirm::{self, LINK_NEW_CONNECTIONS};
use crate::ring::diagnosis::{plan, rates};
use crate::ring::model::{LinkSample, Rank, RankInfo, Verdict, VerdictKind};

/// At most this many orders after the plan: one with new partners, then re-runs and new
/// connections for the suspects (what the confirmation pass costs: this many orders' time).
pub const MAX_CONFIRM: usize = 6;


/// The scan's options, the same on every rank.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ScanOptions {
    /// Time budget for the orders after the first (`--scan-time`).
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
    /// The verdicts of the last judgment (after the confirmation); they join `data.verdicts`.
    #[serde(skip)]
    pub verdicts: Vec<Verdict>,
    /// Verdicts of the first judgment that the re-measurement did not keep.
    pub cleared_by_recheck: Vec<String>,
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

/// Where the scan is: the plan, one order with new partners, the confirmation, the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Plan,
    Partners,
    Confirm,
    Over,
}

/// The coordinator's side of the scan.
pub struct Driver {
    n: usize,
    opts: ScanOptions,
    policy: Policy,
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
    pub orders: Vec<OrderRun>,
    pub samples: Vec<LinkSample>,
    pub line_rates: BTreeMap<Rank, f64>,
}

impl Driver {
    pub fn new(n: usize, opts: ScanOptions, policy: Policy) -> Driver {
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
            orders: Vec::new(),
            samples: Vec::new(),
            line_rates: BTreeMap::new(),
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
    pub fn on_samples(
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
        if !self.planned {
            // The first order's time sizes the plan to the budget.
            self.planned = true;
            let k = plan::orders_within(self.n, Duration::from_secs_f64(self.opts.budget_s), took);
            for o in plan::plan(self.n, k).into_iter().skip(1) {
                self.queue.push((o.index, o.shift, false));
                self.first_index.insert(o.shift, o.index);
            }
            self.next_index = k as u32;
        }
        if self.queue.is_empty() {
            self.next_stage(ranks);
        }
        self.launch(now)
    }

    /// The plan (or a stage after it) is over: queue what the next stage measures.
    fn next_stage(&mut self, ranks: &[RankInfo]) {
        let a = self.analyze(ranks);
        // A link not judged for a starved host is measured again too: the host may be idle.
        // So are senders and receivers the orders run could not tell apart.
        let suspects: Vec<Verdict> = a.verdicts.iter().chain(&a.not_judged).chain(&a.tied).cloned().collect();
        if self.stage == Stage::Plan {
            self.first_verdicts = a.verdicts.clone();
        }
        if suspects.is_empty() {
            self.stage = Stage::Over;
            return;
        }
        let spent = self.orders.iter().filter(|o| o.recheck).count();
        match self.stage {
            Stage::Plan => {
                self.stage = Stage::Partners;
                // Other partners first (the minimum plan cannot tell two slow senders from
                // two slow receivers): the next shift the plan did not run, if any.
                if let Some(s) = (1..self.n as u32).find(|s| !self.first_index.contains_key(s)) {
                    self.first_index.insert(s, self.next_index);
                    self.push(s, None);
                    return;
                }
                self.next_stage(ranks)
            }
            Stage::Partners => {
                self.stage = Stage::Confirm;
                for (shift, rerun) in confirm_orders(&suspects, self.n, &self.first_index)
                    .into_iter()
                    .take(MAX_CONFIRM.saturating_sub(spent))
                {
                    self.push(shift, rerun);
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

    /// The scan's figures and verdicts.
    pub fn report(&self, ranks: &[RankInfo]) -> ScanReport {
        let a = self.analyze(ranks);
        let c = confirm::confirm(ranks, &a, &self.samples, &self.policy);
        let mut verdicts = rates::downtrained(ranks, &self.line_rates);
        verdicts.extend(c.verdicts);
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
            not_judged: a.not_judged,
            unconfirmed: c.unconfirmed,
            confirm_s: self.orders.iter().filter(|o| o.recheck).map(|o| o.seconds).sum(),
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

/// The orders that confirm `suspects`, most telling first, as (shift, re-run of this
/// order's index or None for new connections): a link's own order re-run (a transient
/// washes out of its first connection), then new connections: of a node's natural and
/// reversed shifts once, of a link's shift [`LINK_NEW_CONNECTIONS`] times. Suspects that
/// share a shift share its orders.
fn confirm_orders(suspects: &[Verdict], n: usize, first: &BTreeMap<u32, u32>) -> Vec<(u32, Option<u32>)> {
    let n32 = n as u32;
    let mut reruns: Vec<(u32, Option<u32>)> = Vec::new();
    let mut new: BTreeMap<u32, usize> = BTreeMap::new();
    let mut want = |s: u32, k: usize| {
        if s % n32.max(1) != 0 {
            let e = new.entry(s).or_default();
            *e = (*e).max(k);
        }
    };
    for v in suspects {
        match (v.kind, v.from_rank, v.to_rank) {
            (VerdictKind::SlowLink, Some(a), Some(b)) if a < n32 && b < n32 => {
                let s = (b + n32 - a) % n32;
                if let Some(&i) = first.get(&s) {
                    if !reruns.contains(&(s, Some(i))) {
                        reruns.push((s, Some(i)));
                    }
                }
                want(s, LINK_NEW_CONNECTIONS);
            }
            (VerdictKind::SlowEgress | VerdictKind::SlowIngress, _, _) => {
                want(1, 1);
                want(n32.saturating_sub(1), 1);
            }
            _ => {}
        }
    }
    let mut out = reruns;
    for round in 0..LINK_NEW_CONNECTIONS {
        out.extend(new.iter().filter(|&(_, &k)| k > round).map(|(&s, _)| (s, None)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::model::VerdictKind;

    const BASE: f64 = 100e6;

    /// Drive a 5-rank scan with synthetic samples: `slow(from, to, index, first_time_this_shift, rep)`
    /// says which samples ran at a fifth of the base rate. Deterministic: no clock, no load.
    fn drive(slow: impl Fn(Rank, Rank, u32, bool, u32) -> bool) -> ScanReport {
        drive_n(5, 10.0, slow)
    }

    fn drive_n(n: Rank, budget_s: f64, slow: impl Fn(Rank, Rank, u32, bool, u32) -> bool) -> ScanReport {
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
        let mut d = Driver::new(n as usize, opts, Policy::default());
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
            now += Duration::from_millis(100);
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
                            seconds: bytes as f64 / rate * jitter,
                            cpu_wait: None,
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
        r.verdicts.iter().map(|v| (v.kind, v.from_rank, v.to_rank)).collect()
    }

    /// A link slow in most of its first samples and fast when re-measured: the first
    /// judgment names it, the re-check clears it, and the report says so.
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
        assert_eq!(kinds(&r), [(VerdictKind::SlowPath, Some(3), Some(0))], "{:#?}", r.verdicts);
        let v = &r.verdicts[0];
        assert_eq!(v.action(), crate::ring::model::Action::Ticket);
        assert!(v.message.contains("slow on some paths and not others"), "{}", v.message);
        assert!(!v.next.as_deref().unwrap().contains("cable"), "{:?}", v.next);
        crate::ring::diagnosis::pastes::assert_next_pastes(v);
        let extra: Vec<(u32, u32)> = r.orders.iter().filter(|o| o.recheck).map(|o| (o.index, o.shift)).collect();
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
        assert!(u.message.starts_with("UNCONFIRMED (not a verdict): SLOW EGRESS rank 1"), "{}", u.message);
        // Confirmed the same way when the new connections are slow too.
        let r = drive(|from, _, _, _, _| from == 1);
        assert_eq!(kinds(&r), [(VerdictKind::SlowEgress, Some(1), None)]);
        assert!(r.verdicts[0].message.contains("confirmed on 2 new connection(s)"), "{}", r.verdicts[0].message);
    }

    /// Two slow senders in the minimum plan of 4 ranks (shifts 1 and 3) look like two slow
    /// receivers too; the order with new partners (shift 2) tells them apart.
    #[test]
    fn two_slow_egresses_in_the_minimum_plan() {
        let r = drive_n(4, 0.0, |from, _, _, _, _| from == 0 || from == 2);
        assert_eq!(
            kinds(&r),
            [(VerdictKind::SlowEgress, Some(0), None), (VerdictKind::SlowEgress, Some(2), None)],
            "{:#?}",
            r.verdicts
        );
        assert_eq!(r.orders[2].shift, 2, "{:?}", r.orders);
        assert!(r.orders.iter().filter(|o| o.recheck).count() <= MAX_CONFIRM);
    }
}
