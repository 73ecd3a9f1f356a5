//! One rank's part of a link-scan order ([`run_order`]): send `reps` x `bytes` to
//! `rank + shift` while receiving the same from `rank - shift`, timed at the receiver. The
//! coordinator's side (which order runs next) is `diagnosis::driver`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::ring::collective::allreduce::{Progress, RingError};
use crate::ring::collective::transport::{Fabric, LinkRequest, RecvLink, SendLink, TransportError};
use crate::ring::model::{AbortFlag, LinkSample, Phase, Rank, RankInfo, WaitReport};
use crate::ring::schedstat;

/// Scan links use their own tags, apart from the ring's channels (0..64).
pub const SCAN_TAG: u32 = 1 << 16;

/// The tag of scan order `index`'s links: one per index, so each order's connections are
/// told apart at the accepting end.
pub fn scan_tag(index: u32) -> u32 {
    SCAN_TAG + (index & 0xffff)
}

/// What a rank needs to open and run scan links.
pub struct RankCtx<'a> {
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
pub struct ScanLinks {
    by_index: BTreeMap<u32, LinkPair>,
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
    if !links.by_index.contains_key(&index) {
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
        let mut open = fabric.open(&req).map_err(RingError::Transport)?;
        match (open.sends.pop(), open.recvs.pop()) {
            (Some(s), Some(r)) => {
                links.by_index.insert(index, (s, r));
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
    let Some((send, recv)) = links.by_index.get_mut(&index) else {
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
    // The CPU this rank's threads waited for during the order: the process's threads that
    // live through it (this one, the transport's), plus the sender's own below.
    let cpu_before = ctx.measure_cpu.then(schedstat::threads);
    let t0 = Instant::now();
    let (sent, got, sender_cpu) = std::thread::scope(|sc| {
        let stop = &stop;
        let sender = sc.spawn(move || {
            let t0 = schedstat::this_thread();
            let r = (move || -> Result<(), RingError> {
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
            })();
            (r, t0.and_then(|t0| schedstat::this_thread()?.since(t0)))
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
                        cpu_wait: None,
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
        let (sent, sender_cpu) = sender.join().unwrap_or_else(|_| {
            (
                Err(RingError::Aborted("the scan sender thread panicked".into())),
                None,
            )
        });
        if sent.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        (sent, got, sender_cpu)
    });
    progress.waiting(None, false);
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
    // A real cause (a stuck wait, a closed link) beats the echo of the other side's stop.
    match (sent, got) {
        (Ok(()), Ok(v)) => Ok(v),
        (Err(e @ RingError::Stuck(..)), _) | (_, Err(e @ RingError::Stuck(..))) => Err(e),
        (_, Err(e)) if !matches!(e, RingError::Aborted(_)) => Err(e),
        (Err(e), _) => Err(e),
        (_, Err(e)) => Err(e),
    }
}
