//! One rank's part of a link-scan order ([`run_order`]): send `reps` x `bytes` to
//! `rank + shift` while receiving the same from `rank - shift`, timed at the receiver. The
//! coordinator's side (which order runs next) is `diagnosis::driver`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use crate::ring::collective::allreduce::{Progress, RingError};
use crate::ring::collective::transport::{Fabric, LinkRequest, RecvLink, SendLink, TransportError};
use crate::ring::diagnosis::stall;
use crate::ring::model::{AbortFlag, LinkSample, Phase, Rank, RankInfo, WaitReport};
use crate::ring::schedstat;

/// Scan links use their own tags, apart from the ring's channels (0..64).
pub(crate) const SCAN_TAG: u32 = 1 << 16;

/// The tag of scan order `index`'s links: one per index, so each order's connections are
/// told apart at the accepting end.
pub(crate) fn scan_tag(index: u32) -> u32 {
    SCAN_TAG + (index & 0xffff)
}

/// What a rank needs to open and run scan links.
pub(crate) struct RankCtx<'a> {
    pub me: Rank,
    pub world: u32,
    pub token: &'a str,
    pub table: &'a [RankInfo],
    pub shared_transport: Option<&'a str>,
    pub slots: usize,
    pub slot_bytes: usize,
    pub timeout: Duration,
    /// Measure this rank's CPU wait (`schedstat` of the process): only where the process
    /// is this one rank; with several ranks in one process (`--local`) it would be theirs.
    pub measure_cpu: bool,
}

/// The scan links opened so far, by order index: a re-run of an order reuses its
/// connections, a new index opens new ones (new source ports, so a hashed path changes:
/// what confirms a suspect). Closed at the end of the run.
#[derive(Default)]
pub(crate) struct ScanLinks {
    by_index: BTreeMap<u32, LinkPair>,
}

/// Both scan links of one order on this rank: to `rank + shift`, from `rank - shift`.
type LinkPair = (Box<dyn SendLink>, Box<dyn RecvLink>);

/// One poll slice: the abort flag is looked at between slices.
const SLICE: Duration = Duration::from_millis(50);

/// Run one order on this rank; returns the samples of the link into it. A data wait past
/// `ctx.timeout` calls `on_stuck` with the report at once (for the coordinator).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_order(
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
    // Opening the links is link setup, with its own deadline and failure report: the
    // watchdog must not read a cut link's slow open as a stalled rank.
    progress.at(Phase::Connect, index);
    progress.touch();
    open_links(ctx, fabric, links, index, next, prev)?;
    progress.at(Phase::Scan, index);
    progress.touch();
    let Some((send, recv)) = links.by_index.get_mut(&index) else {
        return Ok(Vec::new());
    };
    // At least 8 chunks per sample: a sample times its chunks' arrivals, and a chunk that
    // was already buffered when the sample began would count as transferred in no time.
    let chunk = (bytes / 8)
        .clamp(4096, (ctx.slot_bytes as u64).max(4096))
        .min(bytes)
        .max(1);
    let order = Order {
        ctx,
        index,
        bytes,
        reps,
        chunk,
        chunks: bytes.div_ceil(chunk).max(1),
        progress,
        abort,
        on_stuck,
        stop: AtomicBool::new(false),
        first_stuck: AtomicU8::new(NOT_STUCK),
    };
    // The CPU this rank's threads waited for during the order: the process's threads that
    // live through it (this one, the transport's), plus the sender's own below.
    let cpu_before = ctx.measure_cpu.then(schedstat::threads);
    let t0 = Instant::now();
    let (sent, got, sender_cpu) = order.both_ways(send.as_mut(), recv.as_mut(), next, prev);
    // Per thread, the most any one waited: summed over a rank's threads, many short waits
    // would read as one starved thread. The sender has exited: its own is separate.
    let cpu_wait = cpu_before.and_then(|b| {
        let mut parts = schedstat::threads_since(&b, &schedstat::threads());
        parts.extend(sender_cpu);
        schedstat::wait_share(t0.elapsed(), &parts)
    });
    let got = got.map(|mut v| {
        for s in &mut v {
            s.cpu_wait = cpu_wait;
        }
        v
    });
    let out = first_cause(
        sent,
        got,
        order.first_stuck.load(Ordering::Relaxed) == STUCK_SENDING,
    );
    // A stuck order's heartbeats go on naming the wait its stuck report named, as a stuck
    // channel's do: a rank that reported a wait and then read as waiting on nobody would be
    // judged stalled, its stuck report overwritten.
    match &out {
        Err(RingError::Stuck(w, _)) => progress.waiting(w.waiting_on, w.waiting_to_receive),
        _ => progress.waiting(None, false),
    }
    out
}

/// Open order `index`'s two links (to `next`, from `prev`) unless a run of it did already:
/// a re-run reuses its connections.
fn open_links(
    ctx: &RankCtx,
    fabric: &dyn Fabric,
    links: &mut ScanLinks,
    index: u32,
    next: Rank,
    prev: Rank,
) -> Result<(), RingError> {
    if links.by_index.contains_key(&index) {
        return Ok(());
    }
    let tag = scan_tag(index);
    let req = LinkRequest {
        me: ctx.me,
        token: ctx.token,
        table: ctx.table,
        shared_transport: ctx.shared_transport,
        sends: &[(next, tag)],
        recvs: &[(prev, tag)],
        slots: ctx.slots,
        slot_bytes: ctx.slot_bytes,
        deadline: Instant::now() + ctx.timeout,
        timeout: ctx.timeout,
    };
    // Opening the links can fail: inserted only on success.
    let mut open = fabric.open(&req).map_err(RingError::Transport)?;
    match (open.sends.pop(), open.recvs.pop()) {
        (Some(s), Some(r)) => {
            links.by_index.insert(index, (s, r));
            Ok(())
        }
        _ => Err(RingError::Transport(TransportError::Setup {
            peer: format!("rank {next} / rank {prev}"),
            what: "opening scan links".into(),
            error: "the fabric returned no link".into(),
        })),
    }
}

/// Both ends' errors, as one: a real cause (a stuck wait, a closed link) beats the echo of
/// the other side's stop; of two stuck waits, the one reported first (`sender_first`), which
/// the heartbeats then go on naming.
fn first_cause(
    sent: Result<(), RingError>,
    got: Result<Vec<LinkSample>, RingError>,
    sender_first: bool,
) -> Result<Vec<LinkSample>, RingError> {
    match (sent, got) {
        (Ok(()), Ok(v)) => Ok(v),
        (Err(e @ RingError::Stuck(..)), Err(RingError::Stuck(..))) if sender_first => Err(e),
        (_, Err(e @ RingError::Stuck(..))) | (Err(e @ RingError::Stuck(..)), _) => Err(e),
        (_, Err(e)) if !matches!(e, RingError::Aborted(_)) => Err(e),
        (Err(e), _) => Err(e),
        (_, Err(e)) => Err(e),
    }
}

/// One order's run on this rank: `reps` samples of `bytes` each, in `chunks` of `chunk`;
/// `stop` tells each direction that the other one failed.
struct Order<'a> {
    ctx: &'a RankCtx<'a>,
    index: u32,
    bytes: u64,
    reps: u32,
    chunk: u64,
    chunks: u64,
    progress: &'a Progress,
    abort: &'a AbortFlag,
    on_stuck: &'a (dyn Fn(&WaitReport) + Sync),
    stop: AtomicBool,
    /// Which direction passed its deadline first ([`STUCK_SENDING`], [`STUCK_RECEIVING`]):
    /// only it reports, so the coordinator reads one wait from this rank, the one its
    /// heartbeats go on naming.
    first_stuck: AtomicU8,
}

const NOT_STUCK: u8 = 0;
const STUCK_SENDING: u8 = 1;
const STUCK_RECEIVING: u8 = 2;

/// What the sender and the receiver of an order ended with, and the sender thread's CPU wait.
type BothWays = (
    Result<(), RingError>,
    Result<Vec<LinkSample>, RingError>,
    Option<schedstat::CpuTimes>,
);

impl Order<'_> {
    /// Send to `next` on a thread of its own while this thread receives from `prev`; a
    /// failure of either stops the other.
    fn both_ways(
        &self,
        send: &mut dyn SendLink,
        recv: &mut dyn RecvLink,
        next: Rank,
        prev: Rank,
    ) -> BothWays {
        std::thread::scope(|sc| {
            let sender = sc.spawn(move || {
                let t0 = schedstat::this_thread();
                let r = self.send_all(send, next);
                (r, t0.and_then(|t0| schedstat::this_thread()?.since(t0)))
            });
            let got = self.receive_all(recv, prev);
            if got.is_err() {
                self.stop.store(true, Ordering::Relaxed);
            }
            let (sent, sender_cpu) = sender.join().unwrap_or_else(|_| {
                (
                    Err(RingError::Aborted("the scan sender thread panicked".into())),
                    None,
                )
            });
            if sent.is_err() {
                self.stop.store(true, Ordering::Relaxed);
            }
            (sent, got, sender_cpu)
        })
    }

    /// The run was aborted, or the other direction failed.
    fn check(&self) -> Result<(), RingError> {
        if let Some(r) = self.abort.reason() {
            return Err(RingError::Aborted(r));
        }
        if self.stop.load(Ordering::Relaxed) {
            return Err(RingError::Aborted(
                "the other direction of this scan order failed".into(),
            ));
        }
        Ok(())
    }

    /// A data wait on `peer` passed the deadline: reported at once (the other direction may
    /// hold this thread up to its own deadline), and the error that ends this direction.
    fn stuck(&self, peer: Rank, receive: bool, e: TransportError) -> RingError {
        let mut w = self.progress.report(self.ctx.me, 0);
        w.phase = Phase::Scan;
        w.step = self.index;
        w.waiting_on = Some(peer);
        w.waiting_to_receive = receive;
        let dir = if receive { STUCK_RECEIVING } else { STUCK_SENDING };
        let first = self
            .first_stuck
            .compare_exchange(NOT_STUCK, dir, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok();
        if first {
            (self.on_stuck)(&w);
        }
        RingError::Stuck(Box::new(w), e)
    }

    /// Every chunk of every sample to `next`.
    fn send_all(&self, send: &mut dyn SendLink, next: Rank) -> Result<(), RingError> {
        let (chunk, bytes) = (self.chunk, self.bytes);
        let buf = vec![0u8; chunk as usize];
        let mut seq = 0u32;
        for _ in 0..self.reps {
            for c in 0..self.chunks {
                let len = chunk.min(bytes - c * chunk) as usize;
                let deadline = Instant::now() + self.ctx.timeout;
                let slot = loop {
                    self.check()?;
                    match send.acquire((Instant::now() + SLICE).min(deadline)) {
                        Ok(s) => break s,
                        Err(e) if e.is_timeout() && Instant::now() < deadline => continue,
                        Err(e) if e.is_timeout() => return Err(self.stuck(next, false, e)),
                        Err(e) => return Err(RingError::Transport(e)),
                    }
                };
                match send.write_imm(slot, &buf[..len], seq) {
                    Ok(()) => {}
                    Err(e) if e.is_timeout() => return Err(self.stuck(next, false, e)),
                    Err(e) => return Err(RingError::Transport(e)),
                }
                seq = seq.wrapping_add(1);
                self.progress.moved(0, len as u64);
            }
        }
        Ok(())
    }

    /// Every chunk of every sample from `prev`, timed: one sample per rep.
    fn receive_all(&self, recv: &mut dyn RecvLink, prev: Rank) -> Result<Vec<LinkSample>, RingError> {
        self.progress.waiting(Some(prev), true);
        let mut out = Vec::new();
        let mut first: Option<(Instant, u64)> = None;
        let mut mark = None;
        let mut seq = 0u32;
        // The waits for each chunk, the first from now: a stall before the first chunk
        // (a new connection in an MTU black hole) is in no sample's time.
        let (mut gaps, mut last) = (Vec::new(), Instant::now());
        for rep in 0..self.reps {
            for _ in 0..self.chunks {
                let at = self.receive_chunk(recv, prev, seq)?;
                gaps.push(at.0.saturating_duration_since(last).as_secs_f64());
                last = at.0;
                seq = seq.wrapping_add(1);
                first.get_or_insert(at);
                mark.get_or_insert(at.0);
            }
            // The first sample starts at its first chunk's arrival (the orders start a
            // control message apart on different ranks), so that chunk is not counted.
            let end = Instant::now();
            let (start, counted) = match (rep, first) {
                (0, Some((t, len))) => (t, self.bytes.saturating_sub(len)),
                _ => (mark.unwrap_or(end), self.bytes),
            };
            let seconds = end.duration_since(start).as_secs_f64();
            if counted > 0 && seconds > 0.0 {
                out.push(LinkSample {
                    order: self.index,
                    from_rank: prev,
                    to_rank: self.ctx.me,
                    bytes: counted,
                    seconds,
                    cpu_wait: None,
                    silence_s: None,
                });
            }
            mark = Some(end);
        }
        if let Some(first) = out.first_mut() {
            first.silence_s = stall::silence(&gaps);
        }
        Ok(out)
    }

    /// Chunk `seq` from `prev`, consumed: when it arrived, and its length.
    fn receive_chunk(
        &self,
        recv: &mut dyn RecvLink,
        prev: Rank,
        seq: u32,
    ) -> Result<(Instant, u64), RingError> {
        let deadline = Instant::now() + self.ctx.timeout;
        let c = loop {
            self.check()?;
            match recv.poll((Instant::now() + SLICE).min(deadline)) {
                Ok(c) => break c,
                Err(e) if e.is_timeout() && Instant::now() < deadline => continue,
                Err(e) if e.is_timeout() => return Err(self.stuck(prev, true, e)),
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
        recv.consume(&c, &mut |_| {}).map_err(RingError::Transport)?;
        self.progress.moved(c.len as u64, 0);
        Ok((at, c.len as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::collective::transport::inproc::{Faults, InprocNet};
    use std::sync::Mutex;

    const INDEX: u32 = 3;

    /// One rank's order: its result, what it reported stuck, and its heartbeat after it.
    type RankRun = (Result<Vec<LinkSample>, RingError>, Vec<WaitReport>, WaitReport);

    /// Order `INDEX` (shift 1) on a two-rank in-process network, each rank in its own thread:
    /// each rank's result, what it reported stuck, and its heartbeat after the order.
    /// Each rank's links stay open until both ranks are done (a rank that closed its
    /// links would end its peer's wait with a closed link, not its deadline), and a sender
    /// has a slot for every chunk of the order (2 x 16), so no send waits on its receiver:
    /// however late the load schedules either rank's threads, the only wait that can pass a
    /// deadline is a receive the fault starves.
    fn two_ranks(net: &InprocNet) -> Vec<RankRun> {
        let both_done = std::sync::Barrier::new(2);
        let both_done = &both_done;
        std::thread::scope(|sc| {
            let runs: Vec<_> = (0..2u32)
                .map(|me| {
                    let fabric = net.fabric(me);
                    sc.spawn(move || {
                        let ctx = RankCtx {
                            me,
                            world: 2,
                            token: "t",
                            table: &[],
                            shared_transport: None,
                            slots: 32,
                            slot_bytes: 4096,
                            // Long enough that a loaded machine never makes a healthy wait late.
                            timeout: Duration::from_secs(2),
                            measure_cpu: false,
                        };
                        let (progress, abort) = (Progress::default(), AbortFlag::default());
                        let stuck = Mutex::new(Vec::new());
                        let on_stuck = |w: &WaitReport| stuck.lock().unwrap().push(w.clone());
                        let mut links = ScanLinks::default();
                        let got = run_order(
                            &ctx,
                            &fabric,
                            &mut links,
                            INDEX,
                            1,
                            64 << 10,
                            2,
                            &progress,
                            &abort,
                            &on_stuck,
                        );
                        let beat = progress.report(me, 0);
                        both_done.wait();
                        drop(links);
                        (got, stuck.into_inner().unwrap(), beat)
                    })
                })
                .collect();
            runs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn a_healthy_order_samples_the_link_into_each_rank_and_waits_on_nobody() {
        for (me, (got, stuck, beat)) in two_ranks(&InprocNet::new()).into_iter().enumerate() {
            let samples = got.unwrap_or_else(|e| panic!("rank {me}: {e}"));
            assert_eq!(samples.len(), 2, "rank {me}: one sample per rep");
            assert!(stuck.is_empty(), "rank {me}: {stuck:?}");
            assert_eq!((beat.phase, beat.waiting_on), (Phase::Scan, None), "rank {me}");
        }
    }

    /// The link 0 -> 1 cut without an error (`iptables -j DROP`): rank 1 reports its wait on
    /// rank 0 at its deadline, and its heartbeats after the order go on naming that wait (a
    /// heartbeat of "waiting on nobody" would overwrite the stuck report, and the watchdog
    /// would judge rank 1 stalled instead of the link).
    #[test]
    fn a_stuck_orders_heartbeats_keep_naming_its_wait() {
        let net = InprocNet::new();
        net.set_faults(
            0,
            1,
            scan_tag(INDEX),
            Faults {
                blackhole_after_writes: Some(0),
                ..Faults::default()
            },
        );
        let runs = two_ranks(&net);
        let (got, stuck, beat) = &runs[1];
        assert!(
            matches!(got, Err(RingError::Stuck(..))),
            "{:?}",
            got.as_ref().err()
        );
        assert_eq!(stuck.len(), 1, "{stuck:?}");
        let w = &stuck[0];
        assert_eq!((w.waiting_on, w.waiting_to_receive), (Some(0), true));
        assert_eq!((beat.waiting_on, beat.waiting_to_receive), (Some(0), true));
        assert_eq!(beat.phase, Phase::Scan);
        // Rank 0 sent into the black hole without waiting and received all of rank 1's.
        assert!(
            runs[0].0.is_ok() && runs[0].1.is_empty(),
            "{:?}",
            runs[0].0.as_ref().err()
        );
    }

    /// Both directions of a rank stuck: the one that passed its deadline first is the
    /// order's cause, the wait its stuck report named and its heartbeats go on naming.
    #[test]
    fn of_two_stuck_waits_the_first_reported_is_the_cause() {
        let stuck = |receive: bool| {
            let mut w = Progress::default().report(1, 0);
            (w.waiting_on, w.waiting_to_receive) = (Some(0), receive);
            let e = TransportError::Timeout {
                peer: "rank 0".into(),
                dir: if receive { "from" } else { "to" },
            };
            RingError::Stuck(Box::new(w), e)
        };
        for sender_first in [true, false] {
            match first_cause(Err(stuck(false)), Err(stuck(true)), sender_first) {
                Err(RingError::Stuck(w, _)) => assert_eq!(w.waiting_to_receive, !sender_first),
                other => panic!("{:?}", other.err()),
            }
        }
        // One stuck, the other stopped for it: the stuck one, whichever it is.
        let aborted = || RingError::Aborted("the other direction of this scan order failed".into());
        for sender_first in [true, false] {
            assert!(
                matches!(first_cause(Err(aborted()), Err(stuck(true)), sender_first), Err(RingError::Stuck(w, _)) if w.waiting_to_receive)
            );
            assert!(
                matches!(first_cause(Err(stuck(false)), Err(aborted()), sender_first), Err(RingError::Stuck(w, _)) if !w.waiting_to_receive)
            );
        }
    }
}
