//! The link scan at run time (the plan is [`super::scan`], the judgment
//! [`super::localize`]): the coordinator's [`Driver`] (which order runs next, the time
//! budget, the one re-check pass) and one rank's part of an order, [`run_order`]: send
//! `reps` x `bytes` to `rank + shift` while receiving the same from `rank - shift`, timed at
//! the receiver. Orders are separated by the coordinator's barrier (every rank's samples
//! arrive before the next order starts), so links of different orders never share a port.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::allreduce::{Progress, RingError};
use super::bootstrap::AbortFlag;
use super::localize::{self, FabricSlow, Policy};
use super::scan;
use super::transport::{Fabric, LinkRequest, RecvLink, SendLink, TransportError};
use super::types::{LinkSample, Phase, Rank, RankInfo, Verdict, WaitReport};
use super::wire::Msg;

/// Scan links use their own tags, apart from the ring's channels (0..64).
pub const SCAN_TAG: u32 = 1 << 16;
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
    /// The verdicts of the last judgment (after the re-check); they join `data.verdicts`.
    #[serde(skip)]
    pub verdicts: Vec<Verdict>,
    /// Verdicts of the first judgment that the re-check did not confirm.
    pub cleared_by_recheck: Vec<String>,
}

/// What the coordinator does after a rank's samples.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// Other ranks have not reported this order yet.
    Wait,
    /// Broadcast this `ScanRun`.
    Run(Msg),
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
        match scan::plan(self.n, 1).first() {
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
        Step::Run(Msg::ScanRun {
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
            name: scan::order(self.n, shift, index)
                .map(|o| o.name())
                .unwrap_or_default(),
            recheck,
            seconds: took.as_secs_f64(),
        });
        self.current = None;
        if !self.planned {
            // The first order's time sizes the plan to the budget.
            self.planned = true;
            let k = scan::orders_within(self.n, Duration::from_secs_f64(self.opts.budget_s), took);
            for o in scan::plan(self.n, k).into_iter().skip(1) {
                self.queue.push((o.index, o.shift, false));
            }
            self.next_index = k as u32;
        }
        if self.queue.is_empty() && !self.rechecked {
            self.rechecked = true;
            let a = self.analyze(ranks);
            if !a.verdicts.is_empty() {
                self.first_verdicts = a.verdicts.clone();
                for s in localize::recheck_shifts(&a.verdicts, self.n)
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

// ---------------------------------------------------------------- rank side

/// What a rank needs to open and run scan links.
pub struct RankCtx<'a> {
    pub me: Rank,
    pub world: u32,
    pub token: &'a str,
    pub table: &'a [RankInfo],
    pub slots: usize,
    pub slot_bytes: usize,
    pub timeout: Duration,
}

/// The scan links opened so far, by shift (kept for re-checks; closed at the end of the run).
#[derive(Default)]
pub struct ScanLinks {
    by_shift: BTreeMap<u32, LinkPair>,
}

/// Both scan links of one order on this rank: to `rank + shift`, from `rank - shift`.
type LinkPair = (Box<dyn SendLink>, Box<dyn RecvLink>);

/// One poll slice: the abort flag is looked at between slices.
const SLICE: Duration = Duration::from_millis(50);

/// Run one order on this rank; returns the samples of the link into it. A data wait past
/// `ctx.timeout` calls `on_stuck` with the report at once (for the coordinator).
#[allow(clippy::too_many_arguments)]
pub fn run_order(
    ctx: &RankCtx,
    fabric: &dyn Fabric,
    links: &mut ScanLinks,
    index: u32,
    shift: u32,
    bytes: u64,
    reps: u32,
    progress: &Progress,
    abort: &AbortFlag,
    on_stuck: &(dyn Fn(&WaitReport) + Sync),
) -> Result<Vec<LinkSample>, RingError> {
    let n = ctx.world;
    let k = shift % n.max(1);
    if n < 2 || k == 0 {
        return Ok(Vec::new());
    }
    let next = (ctx.me + k) % n;
    let prev = (ctx.me + n - k) % n;
    progress.at(Phase::Scan, index);
    progress.touch();
    #[allow(clippy::map_entry)] // opening the links can fail: insert only on success
    if !links.by_shift.contains_key(&k) {
        let tag = SCAN_TAG + k;
        let req = LinkRequest {
            me: ctx.me,
            token: ctx.token,
            table: ctx.table,
            sends: &[(next, tag)],
            recvs: &[(prev, tag)],
            slots: ctx.slots,
            slot_bytes: ctx.slot_bytes,
            deadline: Instant::now() + ctx.timeout,
            timeout: ctx.timeout,
        };
        let mut open = fabric.open(&req).map_err(RingError::Transport)?;
        match (open.sends.pop(), open.recvs.pop()) {
            (Some(s), Some(r)) => {
                links.by_shift.insert(k, (s, r));
            }
            _ => {
                return Err(RingError::Transport(TransportError::Setup {
                    peer: format!("rank {next} / rank {prev}"),
                    what: "opening scan links".into(),
                    error: "the fabric returned no link".into(),
                }));
            }
        }
    }
    let Some((send, recv)) = links.by_shift.get_mut(&k) else {
        return Ok(Vec::new());
    };
    // At least 8 chunks per sample: a sample times its chunks' arrivals, and a chunk that
    // was already buffered when the sample began would count as transferred in no time.
    let chunk = (bytes / 8)
        .clamp(4096, (ctx.slot_bytes as u64).max(4096))
        .min(bytes)
        .max(1);
    let chunks = bytes.div_ceil(chunk).max(1);
    let stop = AtomicBool::new(false);
    let check = |stop: &AtomicBool| -> Result<(), RingError> {
        if let Some(r) = abort.reason() {
            return Err(RingError::Aborted(r));
        }
        if stop.load(Ordering::Relaxed) {
            return Err(RingError::Aborted(
                "the other direction of this scan order failed".into(),
            ));
        }
        Ok(())
    };
    let stuck = |peer: Rank, receive: bool, e: TransportError| {
        let mut w = progress.report(ctx.me, 0);
        w.phase = Phase::Scan;
        w.step = index;
        w.waiting_on = Some(peer);
        w.waiting_to_receive = receive;
        // Reported at once: the other direction may hold this thread up to its own deadline.
        on_stuck(&w);
        RingError::Stuck(Box::new(w), e)
    };
    let (sent, got) = std::thread::scope(|sc| {
        let stop = &stop;
        let sender = sc.spawn(move || -> Result<(), RingError> {
            let buf = vec![0u8; chunk as usize];
            let mut seq = 0u32;
            for _ in 0..reps {
                for c in 0..chunks {
                    let len = chunk.min(bytes - c * chunk) as usize;
                    let deadline = Instant::now() + ctx.timeout;
                    let slot = loop {
                        check(stop)?;
                        match send.acquire((Instant::now() + SLICE).min(deadline)) {
                            Ok(s) => break s,
                            Err(e) if e.is_timeout() && Instant::now() < deadline => continue,
                            Err(e) if e.is_timeout() => return Err(stuck(next, false, e)),
                            Err(e) => return Err(RingError::Transport(e)),
                        }
                    };
                    match send.write_imm(slot, &buf[..len], seq) {
                        Ok(()) => {}
                        Err(e) if e.is_timeout() => return Err(stuck(next, false, e)),
                        Err(e) => return Err(RingError::Transport(e)),
                    }
                    seq = seq.wrapping_add(1);
                    progress.moved(0, len as u64);
                }
            }
            Ok(())
        });
        let mut receive = || -> Result<Vec<LinkSample>, RingError> {
            progress.waiting(Some(prev), true);
            let mut out = Vec::new();
            let mut first: Option<(Instant, u64)> = None;
            let mut mark = None;
            let mut seq = 0u32;
            for rep in 0..reps {
                for _ in 0..chunks {
                    let deadline = Instant::now() + ctx.timeout;
                    let c = loop {
                        check(stop)?;
                        match recv.poll((Instant::now() + SLICE).min(deadline)) {
                            Ok(c) => break c,
                            Err(e) if e.is_timeout() && Instant::now() < deadline => continue,
                            Err(e) if e.is_timeout() => return Err(stuck(prev, true, e)),
                            Err(e) => return Err(RingError::Transport(e)),
                        }
                    };
                    let at = Instant::now();
                    if c.imm != seq {
                        return Err(RingError::Protocol {
                            peer: recv.peer().to_string(),
                            what: format!("scan chunk {} arrived where chunk {seq} was due", c.imm),
                        });
                    }
                    seq = seq.wrapping_add(1);
                    recv.consume(&c, &mut |_| {}).map_err(RingError::Transport)?;
                    progress.moved(c.len as u64, 0);
                    first.get_or_insert((at, c.len as u64));
                    mark.get_or_insert(at);
                }
                // The first sample starts at its first chunk's arrival (the orders start a
                // control message apart on different ranks), so that chunk is not counted.
                let end = Instant::now();
                let (start, counted) = match (rep, first) {
                    (0, Some((t, len))) => (t, bytes.saturating_sub(len)),
                    _ => (mark.unwrap_or(end), bytes),
                };
                let seconds = end.duration_since(start).as_secs_f64();
                if counted > 0 && seconds > 0.0 {
                    out.push(LinkSample {
                        order: index,
                        from_rank: prev,
                        to_rank: ctx.me,
                        bytes: counted,
                        seconds,
                    });
                }
                mark = Some(end);
            }
            Ok(out)
        };
        let got = receive();
        if got.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        let sent = sender
            .join()
            .unwrap_or_else(|_| Err(RingError::Aborted("the scan sender thread panicked".into())));
        if sent.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        (sent, got)
    });
    progress.waiting(None, false);
    // A real cause (a stuck wait, a closed link) beats the echo of the other side's stop.
    match (sent, got) {
        (Ok(()), Ok(v)) => Ok(v),
        (Err(e @ RingError::Stuck(..)), _) | (_, Err(e @ RingError::Stuck(..))) => Err(e),
        (_, Err(e)) if !matches!(e, RingError::Aborted(_)) => Err(e),
        (Err(e), _) => Err(e),
        (_, Err(e)) => Err(e),
    }
}
