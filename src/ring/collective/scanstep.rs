//! One rank's part of a link-scan order ([`run_order`]): send `reps` x `bytes` to
//! `rank + shift` while receiving the same from `rank - shift`, timed at the receiver. The
//! coordinator's side (which order runs next) is `diagnosis::driver`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use crate::ring::collective::allreduce::{Progress, RingError};
use crate::ring::collective::transport::{
    Fabric, LinkRequest, RecvLink, SendLink, TransportError, peer_name,
};
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
    open_order(ctx, fabric, links, (progress, on_stuck), index, (next, prev))?;
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

/// Link setup of order `index` (phase connect): its links opened, or why not; an open that
/// waited out its deadline on a peer is a wait on it ([`open_timed_out`]).
fn open_order(
    ctx: &RankCtx,
    fabric: &dyn Fabric,
    links: &mut ScanLinks,
    (progress, on_stuck): (&Progress, &(dyn Fn(&WaitReport) + Sync)),
    index: u32,
    (next, prev): (Rank, Rank),
) -> Result<(), RingError> {
    progress.at(Phase::Connect, index);
    progress.touch();
    let deadline = Instant::now() + ctx.timeout;
    match open_links(ctx, fabric, links, index, (next, prev), deadline) {
        Err(e) if Instant::now() >= deadline => {
            Err(open_timed_out(ctx, progress, on_stuck, index, (next, prev), e))
        }
        r => r,
    }
}

/// Open order `index`'s two links (to `next`, from `prev`) unless a run of it did already:
/// a re-run reuses its connections.
fn open_links(
    ctx: &RankCtx,
    fabric: &dyn Fabric,
    links: &mut ScanLinks,
    index: u32,
    (next, prev): (Rank, Rank),
    deadline: Instant,
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
        deadline,
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

/// Opening order `index`'s links failed with `e` at their deadline. Where the open waited on
/// one peer (its connection never came, or its end never answered the connect: a peer
/// starved, stopped or cut off), that is a wait on the peer like a data wait past the
/// deadline: reported at once as stuck in link setup, naming it (accepting: waiting to
/// receive from `prev`; connecting: blocked sending to `next`), and the heartbeats go on
/// naming it. Any other failure is the rank's own report, as it was.
fn open_timed_out(
    ctx: &RankCtx,
    progress: &Progress,
    on_stuck: &(dyn Fn(&WaitReport) + Sync),
    index: u32,
    (next, prev): (Rank, Rank),
    e: RingError,
) -> RingError {
    let RingError::Transport(te) = e else {
        return e;
    };
    let Some((peer, receive)) = setup_wait(ctx.table, &te, (next, prev)) else {
        return RingError::Transport(te);
    };
    progress.waiting(Some(peer), receive);
    let mut w = progress.report(ctx.me, 0);
    w.phase = Phase::Connect;
    w.step = index;
    w.since_progress_ms = w.since_progress_ms.max(ctx.timeout.as_millis() as u64);
    on_stuck(&w);
    RingError::Stuck(Box::new(w), te)
}

/// The peer a failed open of links to `next` and from `prev` waited on, and whether it
/// waited to receive (accepting from `prev`) rather than to send (connecting to `next`):
/// from the error's peer, as the transports name it ([`peer_name`], `... channel N` for a
/// connection that never came). None: a failure that names neither (a refused link, a
/// listener error), or not a setup failure.
pub(crate) fn setup_wait(
    table: &[RankInfo],
    e: &TransportError,
    (next, prev): (Rank, Rank),
) -> Option<(Rank, bool)> {
    let TransportError::Setup { peer, what, .. } = e else {
        return None;
    };
    let names = |r: Rank| {
        let n = peer_name(table, r);
        *peer == n || peer.starts_with(&format!("{n} channel"))
    };
    let accepting = what.starts_with("waiting for");
    // A refusal ("the receiver refused the link") is the peer's answer, not a wait on it.
    let connecting = what.starts_with("connecting") || what.ends_with("link handshake");
    if names(prev) && accepting {
        Some((prev, true))
    } else if names(next) && connecting {
        Some((next, false))
    } else {
        None
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

    /// Every chunk of every sample to `next`. While it runs, a blocking send (a credit, a
    /// write the receiver does not take) is this rank's wait on `next`: without it, a rank
    /// whose receive is done and whose send is held by a receiver that does not read reads
    /// as waiting on nobody (a stalled rank) or on its predecessor (an innocent link).
    fn send_all(&self, send: &mut dyn SendLink, next: Rank) -> Result<(), RingError> {
        self.progress.sending(Some(next));
        let r = self.send_chunks(send, next);
        self.progress.sending(None);
        r
    }

    fn send_chunks(&self, send: &mut dyn SendLink, next: Rank) -> Result<(), RingError> {
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
        // Everything from `prev` arrived: no longer a wait on it (the sender may still be
        // blocked on `next`, and then that is the wait the heartbeats name).
        self.progress.waiting(None, false);
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

    /// Rank `me`'s context in a `world`-rank in-process run with `slots` credits per link.
    fn ctx(me: Rank, world: u32, slots: usize, timeout: Duration) -> RankCtx<'static> {
        RankCtx {
            me,
            world,
            token: "t",
            table: &[],
            shared_transport: None,
            slots,
            slot_bytes: 4096,
            timeout,
            measure_cpu: false,
        }
    }

    /// Issue 45, the shape of the innocent RANK STALLED: three ranks, order shift 1
    /// (0 -> 1 -> 2 -> 0). Rank 1 is alive and sends its part to rank 2, but never reads
    /// what rank 0 sends it (a receiver that gets no CPU: its receive buffer fills). Rank 0
    /// receives all of rank 2's data, then its sender is held by rank 1 (2 credits, never
    /// returned). While it is held, rank 0's report names rank 1 as the peer it is blocked
    /// sending to: before, it named nobody (the receive it had finished still read as a wait
    /// on rank 2, an innocent link, or once cleared as no wait at all: a stalled rank 0).
    #[test]
    fn a_send_held_by_a_receiver_that_does_not_read_is_a_wait_on_that_receiver() {
        const BYTES: u64 = 64 << 10;
        const REPS: u32 = 2;
        let net = InprocNet::new();
        let timeout = Duration::from_secs(4);
        let tag = scan_tag(INDEX);
        let (progress0, rank0_done) = (Progress::default(), AtomicBool::new(false));
        let all_done = std::sync::Barrier::new(3);
        let (progress0, rank0_done, all_done) = (&progress0, &rank0_done, &all_done);
        let seen = std::thread::scope(|sc| {
            let rank = |me: Rank, progress: &'static Progress| {
                let fabric = net.fabric(me);
                sc.spawn(move || {
                    let abort = AbortFlag::default();
                    let mut links = ScanLinks::default();
                    let c = ctx(me, 3, 2, timeout);
                    let got = run_order(
                        &c,
                        &fabric,
                        &mut links,
                        INDEX,
                        1,
                        BYTES,
                        REPS,
                        progress,
                        &abort,
                        &|_| {},
                    );
                    all_done.wait();
                    got.map(|v| v.len())
                })
            };
            // Rank 0 runs with the progress the test watches.
            let fabric0 = net.fabric(0);
            let r0 = sc.spawn(move || {
                let abort = AbortFlag::default();
                let mut links = ScanLinks::default();
                let c = ctx(0, 3, 2, timeout);
                let got = run_order(
                    &c,
                    &fabric0,
                    &mut links,
                    INDEX,
                    1,
                    BYTES,
                    REPS,
                    progress0,
                    &abort,
                    &|_| {},
                );
                rank0_done.store(true, Ordering::Relaxed);
                all_done.wait();
                got.map(|v| v.len())
            });
            let r2 = rank(2, Box::leak(Box::default()));
            // Rank 1 by hand: its links open, every chunk of its part sent to rank 2 (imm =
            // sequence), nothing read from rank 0.
            let fabric1 = net.fabric(1);
            let r1 = sc.spawn(move || {
                let req = LinkRequest {
                    me: 1,
                    token: "t",
                    table: &[],
                    shared_transport: None,
                    sends: &[(2, tag)],
                    recvs: &[(0, tag)],
                    slots: 2,
                    slot_bytes: 4096,
                    deadline: Instant::now() + timeout,
                    timeout,
                };
                let mut open = fabric1.open(&req).expect("rank 1 opens its links");
                let send = &mut open.sends[0];
                for seq in 0..(BYTES / 4096) as u32 * REPS {
                    let slot = send.acquire(Instant::now() + timeout).expect("rank 2 reads");
                    send.write_imm(slot, &[0u8; 4096], seq).expect("rank 1 writes");
                }
                all_done.wait();
                drop(open);
            });
            // Watch rank 0 until its receive is whole, while its send is still held.
            let whole = BYTES * REPS as u64;
            let t0 = Instant::now();
            let seen = loop {
                let w = progress0.report(0, 0);
                if w.bytes_received >= whole || rank0_done.load(Ordering::Relaxed) || t0.elapsed() > timeout {
                    break (w, rank0_done.load(Ordering::Relaxed));
                }
                std::thread::sleep(Duration::from_millis(5));
            };
            std::thread::sleep(Duration::from_millis(100));
            let later = progress0.report(0, 0);
            r1.join().unwrap();
            assert_eq!(
                r2.join().unwrap().map_err(|e| e.to_string()),
                Ok(REPS as usize),
                "rank 2 got rank 1's part"
            );
            let r0 = r0.join().unwrap();
            assert!(
                matches!(r0, Err(RingError::Stuck(ref w, _)) if w.waiting_on == Some(1) && !w.waiting_to_receive),
                "{r0:?}"
            );
            (seen, later)
        });
        let ((w, done_early), later) = seen;
        assert!(!done_early, "rank 0's order ended before its receive was whole");
        assert_eq!(w.bytes_received, BYTES * REPS as u64, "{w:?}");
        for w in [&w, &later] {
            assert_eq!(
                (w.phase, w.waiting_on, w.waiting_to_receive),
                (Phase::Scan, Some(1), false),
                "{w:?}"
            );
        }
    }

    /// An open that waits out its deadline on one peer is a wait on that peer, reported at
    /// once (phase connect): rank 2 never opens its link to rank 0.
    #[test]
    fn an_open_that_times_out_on_a_peer_is_a_wait_on_it() {
        let net = InprocNet::new();
        let fabric = net.fabric(0);
        let (progress, abort) = (Progress::default(), AbortFlag::default());
        let stuck = std::sync::Mutex::new(Vec::new());
        let on_stuck = |w: &WaitReport| stuck.lock().unwrap().push(w.clone());
        let mut links = ScanLinks::default();
        let c = ctx(0, 3, 2, Duration::from_millis(300));
        let got = run_order(
            &c,
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
        let Err(RingError::Stuck(w, _)) = got else {
            panic!("{:?}", got.map(|v| v.len()));
        };
        let want = (Phase::Connect, INDEX, Some(2), true);
        assert_eq!((w.phase, w.step, w.waiting_on, w.waiting_to_receive), want);
        assert!(w.since_progress_ms >= 300, "{w:?}");
        assert_eq!(stuck.into_inner().unwrap(), vec![(*w).clone()]);
        let beat = progress.report(0, 0);
        assert_eq!((beat.waiting_on, beat.waiting_to_receive), (Some(2), true));
    }

    /// Which peer a failed open waited on, from the error as the TCP transport words it:
    /// the connection from `prev` never came (accepting), the connect to `next` or its
    /// handshake ran out (sending); a refusal, a listener error or a rank outside the order
    /// is no wait on anyone.
    #[test]
    fn a_setup_failure_names_the_peer_it_waited_on() {
        let setup = |peer: &str, what: &str| TransportError::Setup {
            peer: peer.into(),
            what: what.into(),
            error: "e".into(),
        };
        let table = [RankInfo {
            neighbor: None,
            port_max: None,
            rails: Vec::new(),
            node: None,
            capabilities: Vec::new(),
            rank: 3,
            host: "node-d".into(),
            address: "198.19.0.13:40001".into(),
            device: None,
            transport: "tcp".into(),
            pid: None,
        }];
        let d = "rank 3 (node-d, 198.19.0.13:40001)";
        // (the error, the order's (next, prev), the wait it names)
        type Case = (TransportError, (Rank, Rank), Option<(Rank, bool)>);
        let cases: [Case; 9] = [
            (
                setup(&format!("{d} channel 65536"), "waiting for the data link"),
                (1, 3),
                Some((3, true)),
            ),
            (
                setup(&format!("{d} channel 65536"), "waiting for the data link"),
                (3, 1),
                None,
            ),
            (
                setup(d, "connecting the data link to 198.19.0.13:40001"),
                (3, 1),
                Some((3, false)),
            ),
            (setup(d, "sending the link handshake"), (3, 1), Some((3, false))),
            (setup(d, "reading the link handshake"), (3, 3), Some((3, false))),
            (setup(d, "the receiver refused the link"), (3, 1), None),
            (setup("data link listener", "listening"), (3, 3), None),
            (
                setup("rank 1", "waiting for the data link (tag 65536)"),
                (13, 1),
                Some((1, true)),
            ),
            (
                setup("rank 13", "waiting for the data link (tag 65536)"),
                (2, 1),
                None,
            ),
        ];
        for (e, order, want) in cases {
            assert_eq!(setup_wait(&table, &e, order), want, "{e} {order:?}");
        }
        let timeout = TransportError::Timeout {
            peer: d.into(),
            dir: "to",
        };
        assert_eq!(setup_wait(&table, &timeout, (3, 3)), None);
    }
}
