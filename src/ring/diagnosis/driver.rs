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
use crate::ring::diagnosis::plan;
use crate::ring::model::{LinkSample, Rank, RankInfo, Verdict};

/// At most this many orders are re-measured by the re-check pass.
const MAX_RECHECK: usize = 3;

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
    /// A re-check of an earlier order.
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
    /// Median of the link's samples (10^9 bytes/s).
    pub gbs: f64,
    pub samples: usize,
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
    /// Port rate of each rank's data interface, where known (`{rank: gbs}`).
    pub line_rate_gbs: BTreeMap<Rank, f64>,
    pub median_gbs: Option<f64>,
    pub links: Vec<ScanLink>,
    pub fabric_slow: Option<FabricSlow>,
    /// Would-be verdicts the ends' wait for a CPU could explain (`evidence.not_judged`):
    /// unknown, not part of `data.verdicts`.
    pub not_judged: Vec<Verdict>,
    /// The verdicts of the last judgment (after the re-check); they join `data.verdicts`.
    #[serde(skip)]
    pub verdicts: Vec<Verdict>,
    /// Verdicts of the first judgment that the re-check did not confirm.
    pub cleared_by_recheck: Vec<String>,
}

/// One scan order for every rank: send `reps` x `bytes` to rank + `shift`, receive from
/// rank - `shift`; samples are numbered `index`.
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

/// The coordinator's side of the scan.
pub struct Driver {
    n: usize,
    opts: ScanOptions,
    policy: Policy,
    queue: Vec<(u32, u32, bool)>,
    current: Option<(u32, u32, bool, Instant)>,
    pending: BTreeSet<Rank>,
    planned: bool,
    rechecked: bool,
    next_index: u32,
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
            rechecked: false,
            next_index: 0,
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
            }
            self.next_index = k as u32;
        }
        if self.queue.is_empty() && !self.rechecked {
            self.rechecked = true;
            let a = self.analyze(ranks);
            // A link not judged for a starved host is measured again too: the host may
            // be idle by then.
            let suspects: Vec<Verdict> = a.verdicts.iter().chain(&a.not_judged).cloned().collect();
            if !suspects.is_empty() {
                self.first_verdicts = a.verdicts.clone();
                for s in localize::recheck_shifts(&suspects, self.n)
                    .into_iter()
                    .take(MAX_RECHECK)
                {
                    self.queue.push((self.next_index, s, true));
                    self.next_index += 1;
                }
            }
        }
        self.launch(now)
    }

    fn analyze(&self, ranks: &[RankInfo]) -> localize::Analysis {
        localize::analyze(ranks, &self.samples, &self.policy, |r| {
            self.line_rates.get(&r).copied()
        })
    }

    /// The scan's figures and verdicts.
    pub fn report(&self, ranks: &[RankInfo]) -> ScanReport {
        let a = self.analyze(ranks);
        let host = |r: Rank| {
            ranks
                .iter()
                .find(|i| i.rank == r)
                .map(|i| i.host.clone())
                .unwrap_or_default()
        };
        let kept: Vec<_> = a
            .verdicts
            .iter()
            .map(|v| (v.kind, v.from_rank, v.to_rank))
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
            cleared_by_recheck: self
                .first_verdicts
                .iter()
                .filter(|v| !kept.contains(&(v.kind, v.from_rank, v.to_rank)))
                .map(|v| v.message.clone())
                .collect(),
            verdicts: a.verdicts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::model::VerdictKind;

    const BASE: f64 = 100e6;

    /// Drive a 5-rank scan with synthetic samples: `slow(from, to, first_time_this_shift, rep)`
    /// says which samples ran at a fifth of the base rate. Deterministic: no clock, no load.
    fn drive(slow: impl Fn(Rank, Rank, bool, u32) -> bool) -> ScanReport {
        let n: Rank = 5;
        let ranks: Vec<RankInfo> = (0..n)
            .map(|r| RankInfo {
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
            budget_s: 10.0,
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
                        let rate = if slow(from, to, first, rep) {
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

    /// A link slow in most of its first samples and fast when re-measured: the first
    /// judgment names it, the re-check clears it, and the report says so.
    #[test]
    fn a_transient_is_cleared_by_the_recheck() {
        let r = drive(|from, to, first, rep| (from, to) == (3, 0) && first && rep < 2);
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
        let r = drive(|from, to, _, _| (from, to) == (3, 0));
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
}
