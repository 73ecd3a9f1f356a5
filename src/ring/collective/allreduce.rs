//! Ring AllReduce as NCCL runs it: reduce-scatter then all-gather, over `channels`
//! independent rings (one connection pair each), each chunked into blocks of `n` segments
//! that flow around the ring one slot at a time (pipelined by the receiver's slots and the
//! socket buffers). float32 sum, out of place or in place (nccl-tests times both). Inputs are small integers, so every order of
//! summation gives the exact same float and every rank can verify every element.

use std::ops::Range;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::ring::collective::transport::{RecvLink, SendLink, TransportError, bytes_f32, f32_bytes};
use crate::ring::model::AbortFlag;
use crate::ring::model::{ChunkWaits, Phase, Position, Rank, WaitReport};

/// How long one poll slice lasts before the abort flag is looked at again.
const SLICE: Duration = Duration::from_millis(50);

#[derive(Debug, Error)]
pub(crate) enum RingError {
    /// A data wait passed its deadline; the report says where.
    #[error("{1}")]
    Stuck(Box<WaitReport>, TransportError),
    #[error("{0}")]
    Aborted(String),
    #[error("{0}")]
    Transport(TransportError),
    #[error("protocol error from {peer}: {what}")]
    Protocol { peer: String, what: String },
    /// A channel thread panicked (a bug of this rank's): its own error, never a peer's.
    #[error("channel {channel} of this rank panicked: {what}")]
    Panicked { channel: u32, what: String },
}

/// A panic's message, for the rank's error report.
fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

/// A one-time meeting of a size's channel threads and its timer. Unlike `std::sync::Barrier`
/// it gives up once `stop` is set: a channel that failed or panicked may never arrive, and
/// its siblings must not wait for it forever.
struct Meet {
    n: usize,
    arrived: Mutex<usize>,
    cv: std::sync::Condvar,
}

impl Meet {
    fn new(n: usize) -> Meet {
        Meet {
            n,
            arrived: Mutex::new(0),
            cv: std::sync::Condvar::new(),
        }
    }

    fn wait(&self, stop: &AtomicBool) {
        let mut g = self.arrived.lock().unwrap_or_else(|p| p.into_inner());
        *g += 1;
        self.cv.notify_all();
        while *g < self.n && !stop.load(Ordering::Relaxed) {
            g = self
                .cv
                .wait_timeout(g, SLICE)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// Sets `stop` if its thread unwinds, so nobody waits at a `Meet` for a panicked channel.
struct StopOnPanic<'a>(&'a AtomicBool);

impl Drop for StopOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}

impl RingError {
    /// The completion error behind this one (RDMA), if any.
    pub fn link_fault(&self) -> Option<&crate::ring::model::LinkFault> {
        match self {
            RingError::Stuck(_, e) | RingError::Transport(e) => e.link_fault(),
            _ => None,
        }
    }

    /// A data link that its peer's end closed: this rank failed because another stopped
    /// first (its interrupt, death or own failure is the cause), never a cause on its own.
    pub fn peer_closed(&self) -> bool {
        matches!(self, RingError::Transport(TransportError::Closed { .. }))
    }
}

/// One channel's ring links: to the successor and from the predecessor, and their long
/// waits over the sweep.
pub(crate) struct ChannelLinks {
    pub send: Box<dyn SendLink>,
    pub recv: Box<dyn RecvLink>,
    pub trace: ChunkTrace,
}

/// Waits and delays shorter than this are not kept: far below a stall (3 s), and a bound on
/// what an unlisted one can explain of a receiver's wait.
const TRACE_FLOOR_S: f64 = 0.25;
/// At most this many waits (and delays) are kept per channel, the longest.
const TRACE_KEEP: usize = 256;

/// One channel's chunks counted over the whole sweep (sizes, halves, iterations), and its
/// long waits to receive and delays to send by chunk ([`ChunkWaits`]): the coordinator
/// tells a link's own stall from the wait its sender passed on.
#[derive(Debug, Default)]
pub(crate) struct ChunkTrace {
    received: u64,
    sent: u64,
    last_received: Option<Instant>,
    waits: ChunkWaits,
}

impl ChunkTrace {
    /// Chunk `self.received` arrived after a wait of `wait` (seconds), at `at`.
    fn on_received(&mut self, wait: f64, at: Instant) {
        let k = self.received;
        self.received += 1;
        self.last_received = Some(at);
        let w = &mut self.waits;
        keep(&mut w.recv_wait, &mut w.floor_s, (k, wait));
    }

    /// Chunk `self.sent` was handed to the transport at `at`: its delay counts from the
    /// chunk before's arrival (the first chunk waits on nothing received).
    fn on_sent(&mut self, at: Instant) {
        let k = self.sent;
        self.sent += 1;
        if let Some(prev) = self.last_received {
            let d = at.saturating_duration_since(prev).as_secs_f64();
            let w = &mut self.waits;
            keep(&mut w.send_delay, &mut w.floor_s, (k, d));
        }
    }

    /// What the coordinator is sent.
    pub fn waits(&self) -> ChunkWaits {
        ChunkWaits {
            floor_s: self.waits.floor_s.max(TRACE_FLOOR_S),
            ..self.waits.clone()
        }
    }
}

/// Keep `x` in `list` when it reaches the floor; past [`TRACE_KEEP`] the shortest goes and
/// the floor rises to it (what is not listed stays below the floor).
fn keep(list: &mut Vec<(u64, f64)>, floor: &mut f64, x: (u64, f64)) {
    if x.1.is_nan() || x.1 < TRACE_FLOOR_S.max(*floor) {
        return;
    }
    list.push(x);
    if list.len() > TRACE_KEEP
        && let Some(i) = (0..list.len()).min_by(|&a, &b| list[a].1.total_cmp(&list[b].1))
    {
        *floor = floor.max(list.remove(i).1);
    }
}

/// What one channel is doing, for heartbeats and stuck reports. Lock-free to update.
#[derive(Debug)]
pub(crate) struct Progress {
    epoch: Instant,
    phase: AtomicU32,
    step: AtomicU32,
    waiting_on: AtomicU32,
    waiting_to_receive: AtomicBool,
    /// The peer a sending thread of this channel is inside a blocking send to (a credit, a
    /// write), when that thread is not the one whose wait `waiting_on` names (a scan order
    /// sends and receives at once): shown once no receive wait is.
    sending_to: AtomicU32,
    bytes_received: AtomicU64,
    bytes_sent: AtomicU64,
    last_progress_ms: AtomicU64,
    progress: AtomicU64,
    round: AtomicU64,
}

const NO_PEER: u32 = u32::MAX;

impl Default for Progress {
    fn default() -> Self {
        Progress {
            epoch: Instant::now(),
            phase: AtomicU32::new(Phase::ordinal(Phase::Connect)),
            step: AtomicU32::new(0),
            waiting_on: AtomicU32::new(NO_PEER),
            waiting_to_receive: AtomicBool::new(false),
            sending_to: AtomicU32::new(NO_PEER),
            bytes_received: AtomicU64::new(0),
            bytes_sent: AtomicU64::new(0),
            last_progress_ms: AtomicU64::new(0),
            progress: AtomicU64::new(0),
            round: AtomicU64::new(0),
        }
    }
}

impl Progress {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }
    pub(crate) fn at(&self, phase: Phase, step: u32) {
        let code = Phase::ordinal(phase);
        let old_phase = self.phase.swap(code, Ordering::Relaxed);
        let old_step = self.step.swap(step, Ordering::Relaxed);
        // The byte counters are per step, as WaitReport promises.
        if old_phase != code || old_step != step {
            self.bytes_received.store(0, Ordering::Relaxed);
            self.bytes_sent.store(0, Ordering::Relaxed);
        }
        // Entering or leaving local work or link setup is progress: the time spent in it
        // (judged by its own allowance) must not count against the data phase that follows,
        // nor the reverse.
        let own_clock = |p: Phase| p.is_local_work() || p == Phase::Connect;
        if old_phase != code && (own_clock(phase) || own_clock(Phase::from_ordinal(old_phase))) {
            self.progress.fetch_add(1, Ordering::Relaxed);
        }
    }
    pub(crate) fn waiting(&self, peer: Option<Rank>, receive: bool) {
        self.waiting_on.store(peer.unwrap_or(NO_PEER), Ordering::Relaxed);
        self.waiting_to_receive.store(receive, Ordering::Relaxed);
    }
    /// A thread of this channel enters (`Some(peer)`) or leaves (`None`) a blocking send to
    /// `peer` while another thread may hold the receive wait.
    pub(crate) fn sending(&self, peer: Option<Rank>) {
        self.sending_to.store(peer.unwrap_or(NO_PEER), Ordering::Relaxed);
    }
    /// The wait a report names: the receive (or the sweep's own send) wait, else a blocking
    /// send of another thread; `NO_PEER` when none.
    fn wait(&self) -> (u32, bool) {
        let receive = self.waiting_to_receive.load(Ordering::Relaxed);
        match (
            self.waiting_on.load(Ordering::Relaxed),
            self.sending_to.load(Ordering::Relaxed),
        ) {
            (NO_PEER, NO_PEER) => (NO_PEER, receive),
            (NO_PEER, s) => (s, false),
            (w, _) => (w, receive),
        }
    }
    pub(crate) fn moved(&self, received: u64, sent: u64) {
        self.bytes_received.fetch_add(received, Ordering::Relaxed);
        self.bytes_sent.fetch_add(sent, Ordering::Relaxed);
        self.last_progress_ms.store(self.now_ms(), Ordering::Relaxed);
        self.progress.fetch_add(1, Ordering::Relaxed);
    }
    /// The rank is alive and idle by design (waiting for the coordinator's next order):
    /// the counter moves, so the watchdog does not take the pause for a stuck process.
    pub fn tick(&self) {
        self.progress.fetch_add(1, Ordering::Relaxed);
        self.touch();
    }
    /// Counted as progress (the start of a size, a step boundary).
    pub fn touch(&self) {
        self.last_progress_ms.store(self.now_ms(), Ordering::Relaxed);
    }
    /// Where this channel stands now.
    pub fn position(&self) -> Position {
        Position {
            round: self.round.load(Ordering::Relaxed),
            phase: Phase::from_ordinal(self.phase.load(Ordering::Relaxed)),
            step: self.step.load(Ordering::Relaxed),
        }
    }
    pub fn report(&self, rank: Rank, channel: u32) -> WaitReport {
        let (w, receive) = self.wait();
        WaitReport {
            round: self.round.load(Ordering::Relaxed),
            step: self.step.load(Ordering::Relaxed),
            channel,
            waiting_on: (w != NO_PEER).then_some(w),
            waiting_to_receive: receive,
            bytes_received: self.bytes_received.load(Ordering::Relaxed),
            bytes_sent: self.bytes_sent.load(Ordering::Relaxed),
            since_progress_ms: self
                .now_ms()
                .saturating_sub(self.last_progress_ms.load(Ordering::Relaxed)),
            progress: self.progress.load(Ordering::Relaxed),
            ..WaitReport::new(rank, Phase::from_ordinal(self.phase.load(Ordering::Relaxed)))
        }
    }
}

/// The report of the channel that has waited longest (the one worth a heartbeat), with
/// `progress` the total over all channels: one counter that moves while any channel does
/// (the watchdog compares successive heartbeats' counters).
pub(crate) fn worst_report(rank: Rank, progress: &[Progress]) -> WaitReport {
    let total = progress
        .iter()
        .map(|p| p.progress.load(Ordering::Relaxed))
        .fold(0u64, u64::wrapping_add);
    let mut r = progress
        .iter()
        .enumerate()
        .map(|(c, p)| p.report(rank, c as u32))
        .max_by_key(|r| r.since_progress_ms)
        .unwrap_or_else(|| Progress::default().report(rank, 0));
    r.progress = total;
    r.positions = positions(progress);
    r
}

/// Every channel's position, for a report of one of them; empty for one channel (the
/// report's own fields say it all).
pub(crate) fn positions(progress: &[Progress]) -> Vec<Position> {
    if progress.len() < 2 {
        return Vec::new();
    }
    progress.iter().map(Progress::position).collect()
}

/// Where this rank sits in the ring.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ring {
    pub rank: Rank,
    pub world: u32,
    pub timeout: Duration,
}

impl Ring {
    pub(crate) fn pred(&self) -> Rank {
        (self.rank + self.world - 1) % self.world
    }
    pub(crate) fn succ(&self) -> Rank {
        (self.rank + 1) % self.world
    }
}

/// Elements of channel `c` of `channels` over `count` elements (contiguous split).
pub(crate) fn channel_range(count: usize, channels: usize, c: usize) -> Range<usize> {
    let per = count.div_ceil(channels.max(1));
    let lo = (c * per).min(count);
    lo..((c + 1) * per).min(count)
}

/// Segment `j` of a block of `len` elements split among `n` ranks.
fn segment(len: usize, n: usize, j: usize) -> Range<usize> {
    let per = len.div_ceil(n);
    let lo = (j * per).min(len);
    lo..((j + 1) * per).min(len)
}

/// The value rank `r` contributes at element `i`: a small integer, so sums are exact.
pub(crate) fn input_value(r: Rank, i: usize) -> f32 {
    (((i as u64).wrapping_mul(31).wrapping_add(r as u64 * 17) % 251) as i32 - 125) as f32
}

pub(crate) fn fill_input(r: Rank, offset: usize, buf: &mut [f32]) {
    for (k, v) in buf.iter_mut().enumerate() {
        *v = input_value(r, offset + k);
    }
}

/// The period of [`input_value`] in the element index (and in the rank): a prime.
const PATTERN: usize = 251;

/// The exact sum over `world` ranks of [`input_value`] at every element, from the known
/// input pattern: it depends on the element only through `i % 251`, and 251 consecutive
/// ranks contribute every residue once (17 is invertible mod 251), summing to zero. So the
/// table costs 251 x (world % 251) additions, once per size, and the check is O(count),
/// never O(count x world).
pub(crate) struct ExpectedSums([f32; PATTERN]);

impl ExpectedSums {
    pub fn new(world: u32) -> ExpectedSums {
        let mut t = [0f32; PATTERN];
        for (k, v) in t.iter_mut().enumerate() {
            let s: i64 = (0..world % PATTERN as u32)
                .map(|r| input_value(r, k) as i64)
                .sum();
            *v = s as f32;
        }
        ExpectedSums(t)
    }

    /// The exact sum at element `i`.
    #[cfg(test)]
    pub fn at(&self, i: usize) -> f32 {
        self.0[i % PATTERN]
    }
}

/// Count elements of `out` that differ from the exact sum over `world` ranks. O(count).
pub(crate) fn count_wrong(world: u32, out: &[f32]) -> u64 {
    let want = ExpectedSums::new(world);
    // Walk the pattern in step with the elements: no division per element.
    out.chunks(PATTERN)
        .map(|part| part.iter().zip(&want.0).filter(|&(v, w)| v != w).count() as u64)
        .sum()
}

struct Chan<'a> {
    ring: Ring,
    links: &'a mut ChannelLinks,
    progress: &'a Progress,
    abort: &'a AbortFlag,
    /// A sibling channel failed: stop too.
    stop: &'a AtomicBool,
    /// Messages sent and received on this channel's links in this operation (the
    /// immediate carries the send sequence, so a lost or extra chunk is caught at once).
    sent_seq: u32,
    recv_seq: u32,
}

impl Chan<'_> {
    fn check_abort(&self) -> Result<(), RingError> {
        if let Some(r) = self.abort.reason() {
            return Err(RingError::Aborted(r));
        }
        if self.stop.load(Ordering::Relaxed) {
            return Err(RingError::Aborted("another channel of this rank failed".into()));
        }
        Ok(())
    }

    fn stuck(&self, e: TransportError) -> RingError {
        RingError::Stuck(Box::new(self.progress.report(self.ring.rank, 0)), e)
    }

    fn send(&mut self, data: &[f32], phase: Phase, step: u32) -> Result<(), RingError> {
        self.progress.at(phase, step);
        self.progress.waiting(Some(self.ring.succ()), false);
        let deadline = Instant::now() + self.ring.timeout;
        let slot = loop {
            self.check_abort()?;
            let slice = (Instant::now() + SLICE).min(deadline);
            match self.links.send.acquire(slice) {
                Ok(s) => break s,
                Err(e) if e.is_timeout() && Instant::now() < deadline => {
                    // The other link may already know why the ring stopped (RDMA).
                    self.links.recv.health().map_err(RingError::Transport)?;
                    continue;
                }
                Err(e) if e.is_timeout() => return Err(self.stuck(e)),
                Err(e) => return Err(RingError::Transport(e)),
            }
        };
        let bytes = f32_bytes(data);
        match self.links.send.write_imm(slot, bytes, self.sent_seq) {
            Ok(()) => {}
            Err(e) if e.is_timeout() => return Err(self.stuck(e)),
            Err(e) => return Err(RingError::Transport(e)),
        }
        self.links.trace.on_sent(Instant::now());
        self.sent_seq = self.sent_seq.wrapping_add(1);
        self.progress.moved(0, bytes.len() as u64);
        Ok(())
    }

    /// Receive the next chunk (expected to hold `want` elements) and hand it to `f`.
    fn recv(
        &mut self,
        want: usize,
        phase: Phase,
        step: u32,
        f: &mut dyn FnMut(&[f32]),
    ) -> Result<(), RingError> {
        self.progress.at(phase, step);
        self.progress.waiting(Some(self.ring.pred()), true);
        let began = Instant::now();
        let deadline = began + self.ring.timeout;
        let c = loop {
            self.check_abort()?;
            let slice = (Instant::now() + SLICE).min(deadline);
            match self.links.recv.poll(slice) {
                Ok(c) => break c,
                Err(e) if e.is_timeout() && Instant::now() < deadline => {
                    // A write this rank already handed over may have failed since (RDMA: the
                    // completion waits in the send queue's CQ while the ring waits here), or
                    // still not be acknowledged after the timeout: then this rank is a
                    // sender blocked on its successor, and says so.
                    match self.links.send.health() {
                        Ok(()) => continue,
                        Err(e) if e.is_timeout() => {
                            self.progress.waiting(Some(self.ring.succ()), false);
                            return Err(self.stuck(e));
                        }
                        Err(e) => return Err(RingError::Transport(e)),
                    }
                }
                Err(e) if e.is_timeout() => return Err(self.stuck(e)),
                Err(e) => return Err(RingError::Transport(e)),
            }
        };
        let at = Instant::now();
        self.links
            .trace
            .on_received(at.duration_since(began).as_secs_f64(), at);
        let peer = self.links.recv.peer().to_string();
        if c.imm != self.recv_seq || c.len != want * 4 {
            return Err(RingError::Protocol {
                peer,
                what: format!(
                    "chunk {} of {} bytes arrived where chunk {} of {} bytes was due (a lost or reordered chunk)",
                    c.imm,
                    c.len,
                    self.recv_seq,
                    want * 4
                ),
            });
        }
        self.recv_seq = self.recv_seq.wrapping_add(1);
        let mut bad = false;
        self.links
            .recv
            .consume(&c, &mut |b| match bytes_f32(b) {
                Some(v) => f(v),
                None => bad = true,
            })
            .map_err(RingError::Transport)?;
        if bad {
            return Err(RingError::Protocol {
                peer,
                what: "misaligned slot".into(),
            });
        }
        self.progress.moved(c.len as u64, 0);
        Ok(())
    }
}

#[allow(clippy::too_many_arguments)]
/// One channel's part of an AllReduce over this channel's range: out of place with
/// `input` Some (distinct buffers), in place with None (`output` holds the input and is
/// reduced where it lies). `chunk` is the segment size in elements (at most a slot).
pub(crate) fn allreduce_channel(
    ring: Ring,
    links: &mut ChannelLinks,
    progress: &Progress,
    abort: &AbortFlag,
    stop: &AtomicBool,
    input: Option<&[f32]>,
    output: &mut [f32],
    chunk: usize,
) -> Result<(), RingError> {
    let n = ring.world as usize;
    let r = ring.rank as usize;
    let mut ch = Chan {
        ring,
        links,
        progress,
        abort,
        stop,
        sent_seq: 0,
        recv_seq: 0,
    };
    let block = chunk.max(1) * n;
    let mut off = 0;
    progress.touch();
    let total = output.len();
    while off < total {
        let len = block.min(total - off);
        let b = Block { n, r, off, len };
        ch.reduce_scatter(&b, input, output)?;
        ch.all_gather(&b, output)?;
        off += len;
        // A round is one block: steps restart at every block of every iteration. Until the
        // next block's first send this rank is at the end of the block it finished (a
        // non-data phase at the new round orders before that round's steps), never "ahead".
        progress.round.fetch_add(1, Ordering::Relaxed);
        progress.at(Phase::Between, 0);
    }
    progress.waiting(None, false);
    Ok(())
}

/// One block of a channel's range: `len` elements from `off`, in `n` segments, on rank `r`.
struct Block {
    n: usize,
    r: usize,
    off: usize,
    len: usize,
}

impl Block {
    /// The elements of the segment this rank sends at step `s` of reduce-scatter
    /// (`plus` 0) or of all-gather (`plus` 1: the segment it reduced, passed on).
    fn at_step(&self, s: usize, plus: usize) -> Range<usize> {
        let j = (self.r + self.n * 2 + plus - s) % self.n;
        let s = segment(self.len, self.n, j % self.n);
        self.off + s.start..self.off + s.end
    }
}

impl Chan<'_> {
    /// Reduce-scatter: step 0 sends our own segment; steps 1..n-1 add the received
    /// partial sum to ours; the result of the last step is fully reduced.
    fn reduce_scatter(
        &mut self,
        b: &Block,
        input: Option<&[f32]>,
        output: &mut [f32],
    ) -> Result<(), RingError> {
        let g0 = b.at_step(0, 0);
        self.send(
            match input {
                Some(i) => &i[g0],
                None => &output[g0],
            },
            Phase::ReduceScatter,
            0,
        )?;
        for s in 1..b.n {
            let g = b.at_step(s, 0);
            {
                let out = &mut output[g.clone()];
                let inp = input.map(|i| &i[g.clone()]);
                self.recv(g.len(), Phase::ReduceScatter, s as u32, &mut |v| match inp {
                    Some(inp) => {
                        for ((o, a), b) in out.iter_mut().zip(inp).zip(v) {
                            *o = a + b;
                        }
                    }
                    None => {
                        for (o, b) in out.iter_mut().zip(v) {
                            *o += b;
                        }
                    }
                })?;
            }
            if s < b.n - 1 {
                self.send(&output[g], Phase::ReduceScatter, s as u32)?;
            }
        }
        Ok(())
    }

    /// All-gather: pass the reduced segments around.
    fn all_gather(&mut self, b: &Block, output: &mut [f32]) -> Result<(), RingError> {
        self.send(&output[b.at_step(0, 1)], Phase::AllGather, 0)?;
        for s in 1..b.n {
            let g = b.at_step(s, 1);
            {
                let out = &mut output[g.clone()];
                self.recv(g.len(), Phase::AllGather, s as u32, &mut |v| {
                    out.copy_from_slice(v)
                })?;
            }
            if s < b.n - 1 {
                self.send(&output[g], Phase::AllGather, s as u32)?;
            }
        }
        Ok(())
    }
}

/// Segment size in elements for a message of `bytes` over `channels` rings of `world`
/// ranks, limited by the slot size: every rank computes the same value.
pub(crate) fn chunk_elems(bytes: u64, world: u32, channels: u32, slot_bytes: usize) -> usize {
    let count = (bytes / 4) as usize;
    let per_channel = count.div_ceil(channels.max(1) as usize);
    per_channel
        .div_ceil(world.max(1) as usize)
        .clamp(1, (slot_bytes / 4).max(1))
}

/// One size's outcome on this rank.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SizeResult {
    pub bytes: u64,
    /// Mean time of one timed iteration.
    pub seconds: f64,
    pub wrong: Option<u64>,
    /// Bytes received from the predecessor (all channels) during the timed iterations,
    /// and the time they took: the hop's sustained rate.
    pub hop_bytes: u64,
    pub hop_seconds: f64,
}

/// A rank's input and output buffers, allocated and filled once for the largest size
/// (before the run starts, so no peer waits on it); each size uses a prefix (the input
/// pattern is indexed by element, so a prefix is that size's input).
#[derive(Default)]
pub(crate) struct Buffers {
    input: Vec<f32>,
    output: Vec<f32>,
}

impl Buffers {
    pub fn new(rank: Rank, bytes: u64) -> Buffers {
        let mut b = Buffers::default();
        b.reserve(rank, (bytes / 4) as usize);
        b
    }

    /// Make room for `count` elements (a no-op when they fit).
    fn reserve(&mut self, rank: Rank, count: usize) {
        if self.input.len() < count {
            let from = self.input.len();
            self.input.resize(count, 0.0);
            fill_input(rank, from, &mut self.input[from..]);
            self.output.resize(count, 0.0);
        }
    }
}

pub(crate) struct SizeSpec {
    pub bytes: u64,
    pub warmup: u32,
    pub iters: u32,
    pub check: bool,
    /// The output buffer is the input buffer (nccl-tests' in-place half).
    pub in_place: bool,
    /// Where the iteration count goes for a person watching (channel 0 writes it).
    pub live: Option<std::sync::Arc<crate::ring::model::LiveStatus>>,
}

/// Run warm-up and timed iterations for one size across all channels (one thread each).
/// In place, the timed iterations keep reducing their own results, so the check is one
/// more iteration after the timer stops, on freshly filled input (as nccl-tests checks).
pub(crate) fn run_size(
    ring: Ring,
    links: &mut [ChannelLinks],
    progress: &[Progress],
    abort: &AbortFlag,
    spec: &SizeSpec,
    slot_bytes: usize,
    bufs: &mut Buffers,
) -> Result<SizeResult, RingError> {
    let count = (spec.bytes / 4) as usize;
    let channels = links.len();
    // Copying (or, for a size larger than the buffers, allocating and filling) waits on no
    // peer: say so, so the wait is not read as a data stall.
    for p in progress {
        p.at(Phase::Prepare, 0);
        p.touch();
    }
    bufs.reserve(ring.rank, count);
    let input: &[f32] = &bufs.input[..count];
    let output: &mut [f32] = &mut bufs.output[..count];
    if spec.in_place {
        output.copy_from_slice(input);
    }
    // One thread per channel for the whole size; they meet the timer at a barrier after
    // the warm-up and at another after the timed iterations, so the timed span covers
    // only timed iterations.
    let size = SizeRun {
        ring,
        abort,
        spec,
        chunk: chunk_elems(spec.bytes, ring.world, channels as u32, slot_bytes),
        barrier: Meet::new(channels + 1),
        end: Meet::new(channels + 1),
        stop: AtomicBool::new(false),
        err: Mutex::new(None),
    };
    let (elapsed, hop_bytes) = size.all_channels(links, progress, input, output);
    if let Some(e) = size.err.into_inner().unwrap_or_else(|x| x.into_inner()) {
        return Err(e);
    }
    let wrong = spec.check.then(|| {
        // Local work, not a data wait: heartbeats say so while it runs.
        for p in progress {
            p.at(Phase::Check, 0);
        }
        count_wrong(ring.world, &bufs.output[..count])
    });
    for p in progress {
        p.at(Phase::Between, 0);
    }
    Ok(SizeResult {
        bytes: spec.bytes,
        seconds: if spec.iters > 0 {
            elapsed / spec.iters as f64
        } else {
            0.0
        },
        wrong,
        hop_bytes,
        hop_seconds: elapsed,
    })
}

/// One size on every channel of this rank: the barriers the channels meet the timer at,
/// and the truest error any of them ended with.
struct SizeRun<'a> {
    ring: Ring,
    abort: &'a AbortFlag,
    spec: &'a SizeSpec,
    chunk: usize,
    barrier: Meet,
    end: Meet,
    stop: AtomicBool,
    err: Mutex<Option<RingError>>,
}

impl SizeRun<'_> {
    /// Every channel on a thread of its own, with the timer between the two barriers: the
    /// timed span in seconds, and the bytes received from the predecessor meanwhile.
    fn all_channels(
        &self,
        links: &mut [ChannelLinks],
        progress: &[Progress],
        input: &[f32],
        output: &mut [f32],
    ) -> (f64, u64) {
        let (count, channels) = (input.len(), links.len());
        let mut elapsed = 0.0;
        let hop_bytes = std::thread::scope(|sc| {
            let mut out_rest: &mut [f32] = output;
            let mut taken = 0;
            let mut handles = Vec::new();
            for (c, (l, p)) in links.iter_mut().zip(progress).enumerate() {
                let rg = channel_range(count, channels, c);
                let (mine, rest) = std::mem::take(&mut out_rest).split_at_mut(rg.end - taken);
                out_rest = rest;
                taken = rg.end;
                let fresh = &input[rg];
                handles.push(sc.spawn(move || self.channel(c, l, p, fresh, mine)));
            }
            self.barrier.wait(&self.stop);
            let t_timed = Instant::now();
            self.end.wait(&self.stop);
            elapsed = t_timed.elapsed().as_secs_f64();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|p| {
                        // Unwound outside the guarded part: still this rank's error.
                        let mut g = self.err.lock().unwrap_or_else(|x| x.into_inner());
                        g.get_or_insert(RingError::Panicked {
                            channel: u32::MAX,
                            what: panic_text(&*p),
                        });
                        0
                    })
                })
                .sum()
        });
        (elapsed, hop_bytes)
    }

    /// Channel `c` on its part `mine` of the output (`fresh`: that part's input): the bytes
    /// it received between the barriers. It passes each barrier exactly once, also on failure.
    fn channel(&self, c: usize, l: &mut ChannelLinks, p: &Progress, fresh: &[f32], mine: &mut [f32]) -> u64 {
        let _guard = StopOnPanic(&self.stop);
        let mut at_barrier = None;
        let mut hop = None;
        // A panic in a channel is this rank's error report, not a hang of its siblings.
        let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.iterations(c, (&mut *l, p), (fresh, &mut *mine), (&mut at_barrier, &mut hop))
        }))
        .unwrap_or_else(|payload| {
            Err(RingError::Panicked {
                channel: c as u32,
                what: panic_text(&*payload),
            })
        });
        // Stop the sibling channels now, before this thread waits at a barrier for
        // them: a sibling blocked on its own wait would otherwise run to its timeout,
        // and a peer's stuck report could reach the coordinator before this rank's
        // real cause (and blame a link for a local error).
        if res.is_err() {
            self.stop.store(true, Ordering::Relaxed);
        }
        // Every channel passes each barrier exactly once, also on failure.
        if at_barrier.is_none() {
            self.barrier.wait(&self.stop);
            at_barrier = Some(l.recv.bytes_received());
        }
        if hop.is_none() {
            self.end.wait(&self.stop);
            hop = Some(l.recv.bytes_received() - at_barrier.unwrap_or(0));
        }
        if let Err(e) = res {
            l.send.abandon();
            self.stop.store(true, Ordering::Relaxed);
            self.keep_error(c, e);
        }
        hop.unwrap_or(0)
    }

    /// Channel `c`'s iterations: warm-up, the timed ones between the barriers (noted in
    /// `at_barrier` and `hop` as it passes them), and in place the check's one more.
    fn iterations(
        &self,
        c: usize,
        (l, p): (&mut ChannelLinks, &Progress),
        (fresh, mine): (&[f32], &mut [f32]),
        (at_barrier, hop): (&mut Option<u64>, &mut Option<u64>),
    ) -> Result<(), RingError> {
        let (spec, stop) = (self.spec, &self.stop);
        let inp = (!spec.in_place).then_some(fresh);
        for it in 0..spec.warmup + spec.iters {
            if let (0, Some(live)) = (c, &spec.live) {
                live.iteration.store(it, Ordering::Relaxed);
            }
            if it == spec.warmup {
                self.barrier.wait(stop);
                *at_barrier = Some(l.recv.bytes_received());
            }
            allreduce_channel(self.ring, l, p, self.abort, stop, inp, mine, self.chunk)?;
        }
        if at_barrier.is_none() {
            self.barrier.wait(stop);
            *at_barrier = Some(l.recv.bytes_received());
        }
        self.end.wait(stop);
        *hop = Some(l.recv.bytes_received() - at_barrier.unwrap_or(0));
        if spec.check && spec.in_place {
            mine.copy_from_slice(fresh);
            allreduce_channel(self.ring, l, p, self.abort, stop, None, mine, self.chunk)?;
        }
        Ok(())
    }

    /// Keep channel `c`'s error `e` if it is the truest cause so far.
    fn keep_error(&self, c: usize, e: RingError) {
        let mut g = self.err.lock().unwrap_or_else(|x| x.into_inner());
        let keep = match &*g {
            None => true,
            // A panic is this rank's own bug: the truest cause there is.
            Some(_) if matches!(e, RingError::Panicked { .. }) => true,
            // A real cause beats the echo of an abort or of a sibling's stop.
            Some(RingError::Aborted(_)) => !matches!(e, RingError::Aborted(_)),
            // A completion error names its cause; a sibling's timeout does not.
            Some(old) => {
                let cause = |x: &RingError| x.link_fault().is_some_and(|f| !f.is_flush());
                cause(&e) && !cause(old)
            }
        };
        if keep {
            *g = Some(match e {
                RingError::Stuck(mut w, t) => {
                    w.channel = c as u32;
                    RingError::Stuck(w, t)
                }
                other => other,
            });
        }
    }
}

/// nccl-tests' bus bandwidth for AllReduce: algbw × 2(n−1)/n.
pub(crate) fn busbw(algbw: f64, world: u32) -> f64 {
    if world == 0 {
        0.0
    } else {
        algbw * 2.0 * (world as f64 - 1.0) / world as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::collective::transport::inproc::{self, Faults, LinkHandle};

    /// A full inproc ring of `world` ranks and `channels` channels; faults per (from, channel).
    fn ring_links(
        world: u32,
        channels: u32,
        slot_bytes: usize,
        faults: &dyn Fn(u32, u32) -> Faults,
        timeout: Duration,
    ) -> (Vec<Vec<ChannelLinks>>, Vec<LinkHandle>) {
        let mut sends: Vec<Vec<Option<Box<dyn SendLink>>>> = (0..world)
            .map(|_| (0..channels).map(|_| None).collect())
            .collect();
        let mut recvs: Vec<Vec<Option<Box<dyn RecvLink>>>> = (0..world)
            .map(|_| (0..channels).map(|_| None).collect())
            .collect();
        let mut handles = Vec::new();
        for from in 0..world {
            let to = (from + 1) % world;
            for c in 0..channels {
                let (s, r, h) = inproc::link(
                    &format!("rank {from}"),
                    &format!("rank {to}"),
                    4,
                    slot_bytes,
                    faults(from, c),
                    timeout,
                );
                sends[from as usize][c as usize] = Some(Box::new(s));
                recvs[to as usize][c as usize] = Some(Box::new(r));
                handles.push(h);
            }
        }
        let links = sends
            .into_iter()
            .zip(recvs)
            .map(|(s, r)| {
                s.into_iter()
                    .zip(r)
                    .map(|(s, r)| ChannelLinks {
                        send: s.unwrap(),
                        recv: r.unwrap(),
                        trace: ChunkTrace::default(),
                    })
                    .collect()
            })
            .collect();
        (links, handles)
    }

    #[allow(clippy::too_many_arguments)]
    fn run_all(
        world: u32,
        channels: u32,
        bytes: u64,
        slot_bytes: usize,
        faults: &dyn Fn(u32, u32) -> Faults,
        timeout: Duration,
        propagate: bool,
        in_place: bool,
    ) -> Vec<Result<SizeResult, RingError>> {
        let (links, _h) = ring_links(world, channels, slot_bytes, faults, timeout);
        let abort = AbortFlag::default();
        std::thread::scope(|sc| {
            let hs: Vec<_> = links
                .into_iter()
                .enumerate()
                .map(|(r, mut l)| {
                    let abort = &abort;
                    sc.spawn(move || {
                        let progress: Vec<Progress> = (0..channels).map(|_| Progress::default()).collect();
                        let ring = Ring {
                            rank: r as u32,
                            world,
                            timeout,
                        };
                        let spec = SizeSpec {
                            bytes,
                            warmup: 1,
                            iters: 2,
                            check: true,
                            in_place,
                            live: None,
                        };
                        let res = run_size(
                            ring,
                            &mut l,
                            &progress,
                            abort,
                            &spec,
                            slot_bytes,
                            &mut Buffers::default(),
                        );
                        if let Err(e) = &res {
                            // As the coordinator would: one failure ends every rank's run.
                            if propagate {
                                abort.raise(format!("rank {r}: {e}"));
                            }
                        }
                        // The links outlive every rank's run, as in `run` (a rank that gave up
                        // first must not turn its peer's timeout into a closed link).
                        (res, l)
                    })
                })
                .collect();
            let done: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
            done.into_iter().map(|(res, _links)| res).collect()
        })
    }

    #[test]
    fn exact_results_for_odd_sizes_worlds_and_channels() {
        for (world, channels, bytes, slot) in [
            (2, 1, 4, 64),
            (3, 2, 4 * 1001, 64),
            (4, 1, 4 * 4096, 1024),
            (5, 3, 4 * 77, 16),
            (8, 2, 1 << 16, 4096),
            (3, 4, 8, 64),
        ] {
            for in_place in [false, true] {
                for r in run_all(
                    world,
                    channels,
                    bytes,
                    slot,
                    &|_, _| Faults::default(),
                    Duration::from_secs(5),
                    true,
                    in_place,
                ) {
                    let r = r.unwrap();
                    assert_eq!(
                        r.wrong,
                        Some(0),
                        "world {world} channels {channels} bytes {bytes} in place {in_place}"
                    );
                }
            }
        }
    }

    #[test]
    fn dropped_chunk_is_a_stuck_report_naming_the_peer_and_step() {
        // Rank 1's link on channel 0 black-holes from its first write: rank 2 waits for it in reduce-scatter step 1.
        let faults = |from, c| {
            if from == 1 && c == 0 {
                Faults {
                    blackhole_after_writes: Some(0),
                    ..Faults::default()
                }
            } else {
                Faults::default()
            }
        };
        let res = run_all(
            4,
            1,
            4 * 4096,
            1024,
            &faults,
            Duration::from_millis(300),
            false,
            false,
        );
        let stuck: Vec<&WaitReport> = res
            .iter()
            .filter_map(|r| match r {
                Err(RingError::Stuck(w, _)) => Some(&**w),
                _ => None,
            })
            .collect();
        let w = stuck
            .iter()
            .find(|w| w.rank == 2)
            .unwrap_or_else(|| panic!("rank 2 reports stuck: {res:?}"));
        assert_eq!(
            (w.waiting_on, w.waiting_to_receive, w.phase, w.step),
            (Some(1), true, Phase::ReduceScatter, 1)
        );
        assert!(w.since_progress_ms >= 250, "{w:?}");
    }

    #[test]
    fn dead_link_is_a_transport_error_not_a_hang() {
        let faults = |from, _| {
            if from == 0 {
                Faults {
                    die_after_writes: Some(3),
                    ..Faults::default()
                }
            } else {
                Faults::default()
            }
        };
        let t0 = Instant::now();
        let res = run_all(
            3,
            1,
            4 * 4096,
            1024,
            &faults,
            Duration::from_secs(10),
            true,
            false,
        );
        assert!(t0.elapsed() < Duration::from_secs(5));
        assert!(
            res.iter()
                .any(|r| matches!(r, Err(RingError::Transport(TransportError::Closed { .. }))))
        );
    }

    #[test]
    fn a_failed_channel_stops_its_siblings_at_once() {
        // Rank 1's channel 0 fails on its own side (its link to rank 2 dies) while its channel
        // 1 waits for rank 0, whose chunks on channel 1 vanish. Rank 1 must end with its own
        // cause well before the timeout, before any peer's wait could pass its deadline.
        let faults = |from, c| match (from, c) {
            (1, 0) => Faults {
                die_after_writes: Some(1),
                ..Faults::default()
            },
            (0, 1) => Faults {
                blackhole_after_writes: Some(0),
                ..Faults::default()
            },
            _ => Faults::default(),
        };
        let timeout = Duration::from_secs(3);
        let (links, _h) = ring_links(3, 2, 1024, &faults, timeout);
        let abort = AbortFlag::default();
        let mut out: Vec<(Result<SizeResult, RingError>, Duration)> = std::thread::scope(|sc| {
            let hs: Vec<_> = links
                .into_iter()
                .enumerate()
                .map(|(r, mut l)| {
                    let abort = &abort;
                    sc.spawn(move || {
                        let progress: Vec<Progress> = (0..2).map(|_| Progress::default()).collect();
                        let ring = Ring {
                            rank: r as u32,
                            world: 3,
                            timeout,
                        };
                        let spec = SizeSpec {
                            bytes: 4 * 4096,
                            warmup: 1,
                            iters: 2,
                            check: true,
                            in_place: false,
                            live: None,
                        };
                        let t0 = Instant::now();
                        let res = run_size(
                            ring,
                            &mut l,
                            &progress,
                            abort,
                            &spec,
                            1024,
                            &mut Buffers::default(),
                        );
                        let took = t0.elapsed();
                        if r == 1 {
                            // As the coordinator would once rank 1 reports its cause.
                            abort.raise("rank 1 failed".into());
                        }
                        (res, took, l)
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| {
                    let (res, took, _l) = h.join().unwrap();
                    (res, took)
                })
                .collect()
        });
        let (res, took) = out.remove(1);
        assert!(took < Duration::from_secs(1), "rank 1 took {took:?} to stop");
        assert!(
            matches!(res, Err(RingError::Transport(TransportError::Closed { .. }))),
            "{res:?}"
        );
        // No peer got as far as a stuck report: the abort reached them first.
        for (r, (res, _)) in out.iter().enumerate() {
            assert!(!matches!(res, Err(RingError::Stuck(..))), "rank {r}: {res:?}");
        }
    }

    /// A send link that panics on its `n`-th write (a bug injected into one channel).
    struct PanicsOnWrite(Box<dyn SendLink>, u32);

    impl SendLink for PanicsOnWrite {
        fn peer(&self) -> &str {
            self.0.peer()
        }
        fn slot_bytes(&self) -> usize {
            self.0.slot_bytes()
        }
        fn acquire(&mut self, deadline: Instant) -> Result<u32, TransportError> {
            self.0.acquire(deadline)
        }
        fn write_imm(&mut self, slot: u32, data: &[u8], imm: u32) -> Result<(), TransportError> {
            self.1 = self.1.saturating_sub(1);
            assert!(self.1 > 0, "injected bug in the channel");
            self.0.write_imm(slot, data, imm)
        }
        fn bytes_sent(&self) -> u64 {
            self.0.bytes_sent()
        }
    }

    #[test]
    fn a_panicking_channel_is_the_ranks_error_not_a_hang() {
        for nth in [1, 3] {
            let timeout = Duration::from_secs(3);
            let (mut links, _h) = ring_links(3, 2, 1024, &|_, _| Faults::default(), timeout);
            let l = &mut links[1][1];
            let inner = std::mem::replace(&mut l.send, Box::new(NoLink));
            l.send = Box::new(PanicsOnWrite(inner, nth));
            let (tx, rx) = std::sync::mpsc::channel();
            for (r, mut l) in links.into_iter().enumerate() {
                let tx = tx.clone();
                // Detached: a rank that hangs must fail this test, not hang it.
                std::thread::spawn(move || {
                    let abort = AbortFlag::default();
                    let progress: Vec<Progress> = (0..2).map(|_| Progress::default()).collect();
                    let ring = Ring {
                        rank: r as u32,
                        world: 3,
                        timeout,
                    };
                    let spec = SizeSpec {
                        bytes: 4 * 4096,
                        warmup: 1,
                        iters: 2,
                        check: true,
                        in_place: false,
                        live: None,
                    };
                    let res = run_size(
                        ring,
                        &mut l,
                        &progress,
                        &abort,
                        &spec,
                        1024,
                        &mut Buffers::default(),
                    );
                    let _ = tx.send((r, res.map(|_| ()).map_err(|e| e.to_string())));
                });
            }
            let t0 = Instant::now();
            let mut rank1 = None;
            for _ in 0..3 {
                let (r, res) = rx
                    .recv_timeout(Duration::from_secs(20))
                    .unwrap_or_else(|_| panic!("a rank hung (panic on write {nth})"));
                if r == 1 {
                    rank1 = Some(res);
                }
            }
            let e = rank1
                .unwrap()
                .expect_err("rank 1 passed with a panicking channel");
            assert!(
                e.contains("channel 1 of this rank panicked: injected bug in the channel"),
                "{e}"
            );
            assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
        }
    }

    /// A placeholder while a link is swapped.
    struct NoLink;

    impl SendLink for NoLink {
        fn peer(&self) -> &str {
            "-"
        }
        fn slot_bytes(&self) -> usize {
            0
        }
        fn acquire(&mut self, _: Instant) -> Result<u32, TransportError> {
            unreachable!()
        }
        fn write_imm(&mut self, _: u32, _: &[u8], _: u32) -> Result<(), TransportError> {
            unreachable!()
        }
        fn bytes_sent(&self) -> u64 {
            0
        }
    }

    #[test]
    fn leaving_link_setup_or_local_work_moves_the_counter() {
        // The watchdog reads an unmoved counter: a data phase after a slow link setup must
        // not inherit the setup's time (a false RANK STALLED in lab_ring's cut data link).
        let p = Progress::default();
        let count = |p: &Progress| p.report(0, 0).progress;
        p.at(Phase::Scan, 0);
        let c = count(&p);
        p.at(Phase::Connect, 1);
        assert_eq!(count(&p), c + 1);
        p.at(Phase::Scan, 1);
        assert_eq!(count(&p), c + 2);
        p.at(Phase::Scan, 2);
        assert_eq!(count(&p), c + 2, "a step is not progress by itself");
        p.at(Phase::Check, 0);
        p.at(Phase::ReduceScatter, 0);
        assert_eq!(count(&p), c + 4);
        let pos = p.position();
        assert_eq!((pos.phase, pos.step, pos.round), (Phase::ReduceScatter, 0, 0));
    }

    #[test]
    fn channel_ranges_cover_everything_once() {
        for (count, ch) in [(0, 2), (1, 4), (10, 3), (1000, 7)] {
            let all: Vec<usize> = (0..ch).flat_map(|c| channel_range(count, ch, c)).collect();
            assert_eq!(all, (0..count).collect::<Vec<_>>());
        }
    }

    #[test]
    fn wrong_elements_are_counted() {
        let world = 5;
        let mut out: Vec<f32> = (0..1000)
            .map(|i| (0..world).map(|r| input_value(r, i)).sum())
            .collect();
        assert_eq!(count_wrong(world, &out), 0);
        out[7] += 1.0;
        out[999] = f32::NAN;
        out[0] -= 2.0;
        assert_eq!(count_wrong(world, &out), 3);
        // Inputs are small integers: exact in any summation order, never all zero.
        assert!((0..1000).all(|i| input_value(3, i).fract() == 0.0 && input_value(3, i).abs() <= 125.0));
        assert!((0..1000).any(|i| input_value(0, i) != input_value(1, i)));
    }

    #[test]
    fn expected_sums_equal_the_sum_over_every_rank() {
        // Around and across whole cycles of 251 ranks, and at the largest world.
        for world in [1, 2, 5, 250, 251, 252, 502, 600, 16_384] {
            let want = ExpectedSums::new(world);
            for i in (0..700).chain([1 << 20, (1 << 28) + 3]) {
                let sum: i64 = (0..world).map(|r| input_value(r, i) as i64).sum();
                assert_eq!(want.at(i), sum as f32, "world {world} element {i}");
            }
        }
    }

    #[test]
    fn busbw_matches_nccl_tests() {
        // nccl-tests sample: 8 ranks, algbw 2.95 -> busbw 5.16
        assert!((busbw(2.95, 8) - 5.1625).abs() < 1e-9);
        assert_eq!(busbw(1.0, 2), 1.0);
    }
}
