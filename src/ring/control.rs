//! The coordinator's control connections on one event loop (`mio`, no thread per rank): each
//! rank's socket is read as frames arrive and written as it drains, from a bounded queue of
//! its own, so a rank that stops reading delays nobody else and is named when its queue
//! stays stuck past the deadline (see [`Plane::stuck`]). With `--rails`, rank 0's rail
//! coordinators also hold *relayed* connections: a node's rail rank, reached through the hub
//! in the same process ([`crate::ring::relay`]), with no socket of its own.

use std::collections::{BTreeSet, VecDeque};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};

use crate::ring::model::Rank;
use crate::ring::relay::{Epoch, In, Out, RailLink, tag_frame};
use crate::ring::wire::{self, MAGIC, MAX_FRAME, Msg, WireError};

/// One encoded frame; a broadcast shares one copy among every rank's queue.
pub(crate) type Frame = Arc<[u8]>;

/// Bytes one rank's queue may hold: far above what a rank is ever sent at once (its part
/// of the table, a scan order, the end), so reaching it means the rank does not read.
pub(crate) const MAX_QUEUE_BYTES: usize = 8 << 20;
/// Bytes read from one connection per wake-up before the others get their turn.
const READ_BUDGET: usize = 1 << 20;
/// The token of the door's wake-ups (a connection finished its hello).
pub(crate) const WAKER: Token = Token(usize::MAX - 1);

/// Encode a message once as a shareable frame; a message over the frame limit is an error
/// naming the limit (never dropped in silence).
pub(crate) fn frame(msg: &Msg) -> Result<Frame, String> {
    let mut b = Vec::new();
    wire::write_msg(&mut b, msg).map_err(|e| match e {
        WireError::TooLarge(n) => format!(
            "its {} message is {n} bytes, over the control frame limit of {MAX_FRAME} bytes",
            msg.kind()
        ),
        e => format!("its {} message cannot be encoded: {e}", msg.kind()),
    })?;
    Ok(b.into())
}

/// Why a frame was not queued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueError {
    /// The rank's queue would pass [`MAX_QUEUE_BYTES`]: it has stopped reading.
    Full { queued: usize, limit: usize },
    /// Its connection is gone (closed, or the rank was named and dropped).
    Gone,
}

/// A connection's far end: its own socket, or a node's rail rank relayed by the hub.
enum Link {
    Tcp(Arc<TcpStream>),
    Relayed { node: Rank, epoch: Epoch },
}

/// A mark on a queued frame: when its last byte is written, (rail, ring rank, generation) is
/// reported (the hub says when a relayed rank's table went out).
pub(crate) type Mark = (u32, Rank, Epoch);

/// One rank's control connection: partial input, and the frames not yet written.
pub(crate) struct Conn {
    s: Link,
    rbuf: Vec<u8>,
    out: VecDeque<Frame>,
    /// Bytes of the head frame already written.
    head_off: usize,
    out_bytes: usize,
    /// Since when queued bytes have waited with no byte taken by the socket.
    stuck_since: Option<Instant>,
    /// Queued frames still to write before the rank has its whole table.
    table_frames_left: usize,
    /// When the last byte of this rank's table went to its socket.
    pub table_done: Option<Instant>,
    /// Input left unread when the read budget ran out: read again without waiting.
    more_to_read: bool,
    /// Bytes ever queued and ever written, and the marked frames' ends among them.
    pushed: u64,
    written: u64,
    marks: VecDeque<(u64, Mark)>,
    marks_done: Vec<(Mark, Instant)>,
}

impl Conn {
    fn new(s: TcpStream) -> io::Result<Conn> {
        s.set_nonblocking(true)?;
        Ok(Conn::on(Link::Tcp(Arc::new(s))))
    }

    fn on(s: Link) -> Conn {
        Conn {
            s,
            rbuf: Vec::new(),
            out: VecDeque::new(),
            head_off: 0,
            out_bytes: 0,
            stuck_since: None,
            table_frames_left: 0,
            table_done: None,
            more_to_read: false,
            pushed: 0,
            written: 0,
            marks: VecDeque::new(),
            marks_done: Vec::new(),
        }
    }

    fn tcp(&self) -> Option<&TcpStream> {
        match &self.s {
            Link::Tcp(s) => Some(s),
            Link::Relayed { .. } => None,
        }
    }

    /// Read what the socket has (up to the budget); complete frames go to `msgs` with the
    /// time their last bytes were read (a heartbeat is stamped when it arrives, not when the
    /// loop gets to it). An error ends the connection: closed, reset, garbage, or a frame
    /// over the limit.
    fn read<M: Unit>(&mut self, chunk: &mut [u8], msgs: &mut Vec<(M, Instant)>) -> Result<(), WireError> {
        let mut budget = READ_BUDGET;
        self.more_to_read = false;
        let mut got = Vec::new();
        let Link::Tcp(s) = &self.s else {
            return Ok(());
        };
        loop {
            if budget == 0 {
                self.more_to_read = true;
                break;
            }
            match (&**s).read(chunk) {
                Ok(0) => {
                    M::cut(&mut self.rbuf, &mut got)?;
                    msgs.extend(got.drain(..).map(|m| (m, Instant::now())));
                    return Err(WireError::Closed);
                }
                Ok(k) => {
                    budget = budget.saturating_sub(k);
                    self.rbuf.extend_from_slice(&chunk[..k]);
                    M::cut(&mut self.rbuf, &mut got)?;
                    if !got.is_empty() {
                        let at = Instant::now();
                        msgs.extend(got.drain(..).map(|m| (m, at)));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    fn push(&mut self, f: Frame, now: Instant) -> Result<(), QueueError> {
        if self.out_bytes + f.len() > MAX_QUEUE_BYTES {
            return Err(QueueError::Full {
                queued: self.out_bytes,
                limit: MAX_QUEUE_BYTES,
            });
        }
        if self.out.is_empty() {
            self.stuck_since = Some(now);
        }
        self.out_bytes += f.len();
        self.pushed += f.len() as u64;
        self.out.push_back(f);
        Ok(())
    }

    /// Write what the socket takes now; true when the last frame of the table went out just
    /// now. An error means the connection is gone.
    fn flush(&mut self, now: Instant) -> io::Result<bool> {
        let mut table_now = false;
        let Link::Tcp(s) = &self.s else {
            return Ok(false);
        };
        let s = s.clone();
        while !self.out.is_empty() {
            // Up to WRITE_SLICES frames in one call: the hub queues a node's frames of every
            // rail (tables, pings) and a write per frame cost more than the bytes.
            let mut slices = [io::IoSlice::new(&[]); WRITE_SLICES];
            let mut n = 0;
            for (j, f) in self.out.iter().take(WRITE_SLICES).enumerate() {
                slices[j] = io::IoSlice::new(if j == 0 { &f[self.head_off..] } else { f });
                n = j + 1;
            }
            let empty = slices[..n].iter().all(|b| b.is_empty());
            match (&*s).write_vectored(&slices[..n]) {
                Ok(0) if empty => table_now |= self.advance(0, now),
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(k) => table_now |= self.advance(k, now),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        if self.out.is_empty() {
            self.stuck_since = None;
        }
        Ok(table_now)
    }

    /// `k` more bytes were written: the frames they finish leave the queue, marks and the
    /// table's end are noted. True when the last frame of the table went out just now.
    fn advance(&mut self, mut k: usize, now: Instant) -> bool {
        let mut table_now = false;
        self.out_bytes -= k;
        self.written += k as u64;
        self.stuck_since = Some(now);
        while self.marks.front().is_some_and(|m| m.0 <= self.written) {
            if let Some((_, m)) = self.marks.pop_front() {
                self.marks_done.push((m, now));
            }
        }
        while let Some(head) = self.out.front() {
            let left = head.len() - self.head_off;
            if k < left {
                self.head_off += k;
                break;
            }
            k -= left;
            self.out.pop_front();
            self.head_off = 0;
            if self.table_frames_left > 0 {
                self.table_frames_left -= 1;
                if self.table_frames_left == 0 {
                    self.table_done = Some(now);
                    table_now = true;
                }
            }
        }
        table_now
    }
}

/// Frames one write hands the kernel at most.
const WRITE_SLICES: usize = 64;

/// Cut complete frames off the front of `buf`, decoded. Pure.
pub fn take_frames(buf: &mut Vec<u8>, msgs: &mut Vec<Msg>) -> Result<(), WireError> {
    cut_frames(buf, |f| {
        msgs.push(wire::decode(&f[8..])?);
        Ok(())
    })
}

/// Hand each complete frame at the front of `buf` (header and body) to `each`, then drop
/// them from `buf`; garbage is an error after at most 4 bytes, a length over the limit
/// before its body is waited for.
pub(crate) fn cut_frames(
    buf: &mut Vec<u8>,
    mut each: impl FnMut(&[u8]) -> Result<(), WireError>,
) -> Result<(), WireError> {
    let mut at = 0;
    loop {
        let rest = &buf[at..];
        let n = rest.len().min(4);
        if rest[..n] != MAGIC[..n] {
            let mut m = [0u8; 4];
            m[..n].copy_from_slice(&rest[..n]);
            return Err(WireError::BadMagic(m));
        }
        if rest.len() < 8 {
            break;
        }
        let len = u32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]) as usize;
        if len > MAX_FRAME {
            return Err(WireError::TooLarge(len));
        }
        if rest.len() < 8 + len {
            break;
        }
        each(&rest[..8 + len])?;
        at += 8 + len;
    }
    buf.drain(..at);
    Ok(())
}

/// What [`Plane`] cuts off a connection's input: decoded messages (a coordinator), or what a
/// relay forwards unparsed (the hub's, [`Plane::wait_as`]).
pub(crate) trait Unit: Sized {
    fn cut(buf: &mut Vec<u8>, out: &mut Vec<Self>) -> Result<(), WireError>;
    /// One message's body as a relay handed it over (no frame header).
    fn from_body(body: &[u8]) -> Result<Self, WireError>;
}

impl Unit for Msg {
    fn cut(buf: &mut Vec<u8>, out: &mut Vec<Msg>) -> Result<(), WireError> {
        take_frames(buf, out)
    }
    fn from_body(body: &[u8]) -> Result<Msg, WireError> {
        wire::decode(body)
    }
}

/// A relayed rank's hello, read by the hub (see [`Plane::take_hellos`]).
#[derive(Debug)]
pub(crate) struct RelayedHello {
    /// The ring rank of the node it came from (the only rank it may claim).
    pub r: Rank,
    pub epoch: Epoch,
    /// The node's control connection.
    pub peer: String,
    pub hello: Result<wire::Hello, WireError>,
}

/// What the event loop saw: messages (`M` = [`Msg`]) or, for a relay, whole frames.
// One per message read and handled at once: boxing every message would cost more than the size.
#[allow(clippy::large_enum_variant)]
pub enum Happening<M = Msg> {
    /// A message, and when its bytes were read.
    Msg(Rank, M, Instant),
    /// The connection ended (closed, reset, garbage, a frame over the limit).
    Closed(Rank, WireError),
}

/// Every rank's control connection on one `mio` poll; the token is the rank.
pub struct Plane {
    poll: Poll,
    events: Events,
    conns: Vec<Option<Conn>>,
    waker: Arc<Waker>,
    woken: bool,
    /// Connections to read again without waiting: their read budget ran out, or they were
    /// found ready after a wait's reads (see [`Plane::wait`]).
    again: Vec<usize>,
    /// Connections found ready to write after a wait's reads.
    again_write: Vec<usize>,
    /// Connections with queued bytes: the only ones [`Plane::stuck`] looks at (O(backlog)
    /// per tick, not O(world)).
    backlog: BTreeSet<usize>,
    /// Ranks whose whole table went out since the last [`Plane::take_tables_done`].
    tables_done: Vec<(Rank, Instant)>,
    /// Where the loop's time went (see [`PlaneStats`]).
    pub stats: PlaneStats,
    /// Every byte that reached a connection before this was read (see [`Plane::caught_up`]).
    caught_up: Instant,
    /// With `--rails` on rank 0: the rail whose relayed connections this plane holds.
    relay: Option<RailLink>,
    /// Relayed frames and closes not yet handed to the hub.
    relay_out: Vec<Out>,
    /// The last frame tagged for the hub and its tagged copy (a broadcast is tagged once).
    tag_cache: Option<(Frame, Frame)>,
    hellos: Vec<RelayedHello>,
    relay_stuck: Vec<(Rank, usize, Duration)>,
    /// Relayed connections that ended here (a frame the tag took over the limit).
    relay_lost: Vec<(Rank, WireError)>,
    /// Marked frames written: (connection, mark, when) (see [`Plane::take_marks`]).
    marks_done: Vec<(Rank, Mark, Instant)>,
}

/// The event loop's own time: blocked in `poll` (idle), and reading/writing sockets.
#[derive(Clone, Copy, Debug, Default)]
pub struct PlaneStats {
    pub polls: u64,
    pub idle: Duration,
    pub io: Duration,
    pub msgs: u64,
}

/// A plane that ends closes its relayed connections as dropping a socket closes it: the hub
/// tells each node's rail rank, after what was handed over (an abort, the end).
impl Drop for Plane {
    fn drop(&mut self) {
        let held: Vec<(Rank, Epoch)> = (self.conns.iter().flatten())
            .filter_map(|c| match c.s {
                Link::Relayed { node, epoch } => Some((node, epoch)),
                Link::Tcp(_) => None,
            })
            .collect();
        for (node, epoch) in held {
            self.tell_close(node, epoch, false);
        }
        self.publish();
    }
}

impl Plane {
    pub fn new(world: u32) -> io::Result<Plane> {
        // Room for every connection and the waker: one wait reports every ready connection
        // (12 bytes each). A shorter list (8,192 at 16,384 ranks) left input unread on most
        // waits under load, and the judge, held while input was unread, named a frozen rank
        // at 22 s of an 11 s bound.
        Plane::with_events(world, world as usize + 2)
    }

    /// [`Plane::new`] with an event list of `events` (tests make it short to show a loop
    /// that needs several polls to hear every ready connection).
    pub(crate) fn with_events(world: u32, events: usize) -> io::Result<Plane> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        Ok(Plane {
            poll,
            events: Events::with_capacity(events.max(1)),
            conns: (0..world).map(|_| None).collect(),
            waker,
            woken: false,
            again: Vec::new(),
            again_write: Vec::new(),
            backlog: BTreeSet::new(),
            tables_done: Vec::new(),
            stats: PlaneStats::default(),
            caught_up: Instant::now(),
            relay: None,
            relay_out: Vec::new(),
            tag_cache: None,
            hellos: Vec::new(),
            relay_stuck: Vec::new(),
            relay_lost: Vec::new(),
            marks_done: Vec::new(),
        })
    }

    /// After a push or a flush of connection `i`: track its backlog, and a table that just
    /// went out. An error closes nothing here (the next read sees it).
    fn after_io(&mut self, i: usize, flushed: io::Result<bool>, now: Instant) -> io::Result<()> {
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
            self.backlog.remove(&i);
            return Ok(());
        };
        self.marks_done
            .extend(c.marks_done.drain(..).map(|(m, at)| (i as Rank, m, at)));
        if c.out.is_empty() {
            self.backlog.remove(&i);
        } else {
            self.backlog.insert(i);
        }
        match flushed {
            Ok(true) => {
                self.tables_done.push((i as Rank, now));
                Ok(())
            }
            Ok(false) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Ranks whose whole table went out since the last call, and when.
    pub(crate) fn take_tables_done(&mut self) -> Vec<(Rank, Instant)> {
        std::mem::take(&mut self.tables_done)
    }

    /// For the door: wakes [`Plane::wait`] when a connection finished its hello.
    pub(crate) fn waker(&self) -> Arc<Waker> {
        self.waker.clone()
    }

    /// Whether the door woke the loop since the last call.
    pub(crate) fn take_woken(&mut self) -> bool {
        std::mem::take(&mut self.woken)
    }

    /// Hold `s` as rank `r`'s connection (replacing, and closing, an earlier one).
    pub fn add(&mut self, r: Rank, s: TcpStream) -> io::Result<()> {
        self.remove(r);
        let c = Conn::new(s)?;
        if let Some(s) = c.tcp() {
            self.poll.registry().register(
                &mut SourceFd(&s.as_raw_fd()),
                Token(r as usize),
                Interest::READABLE | Interest::WRITABLE,
            )?;
        }
        if let Some(slot) = self.conns.get_mut(r as usize) {
            *slot = Some(c);
        }
        Ok(())
    }

    /// Drop rank `r`'s connection (closes it; a relayed one as a reset).
    pub fn remove(&mut self, r: Rank) {
        self.end(r, Some(true));
    }

    /// End rank `r`'s connection here; a relayed one is closed by the hub when `tell` says
    /// how (reset or not), after what was handed to it (None: the hub closed it).
    fn end(&mut self, r: Rank, tell: Option<bool>) {
        if let Some(c) = self.conns.get_mut(r as usize).and_then(Option::take) {
            match c.s {
                Link::Tcp(s) => {
                    let _ = self.poll.registry().deregister(&mut SourceFd(&s.as_raw_fd()));
                }
                Link::Relayed { node, epoch } => {
                    if let Some(reset) = tell {
                        self.tell_close(node, epoch, reset);
                        self.publish();
                    }
                }
            }
        }
        self.backlog.remove(&(r as usize));
    }

    /// After the last message: a FIN on rank `r`'s socket (its input is still read until it
    /// closes); a relayed connection is closed by the hub after what was handed to it, and
    /// is gone here at once.
    pub(crate) fn half_close(&mut self, r: Rank) {
        match self.conn(r).map(|c| &c.s) {
            Some(Link::Tcp(s)) => {
                let _ = s.shutdown(std::net::Shutdown::Write);
            }
            Some(Link::Relayed { .. }) => self.end(r, Some(false)),
            None => {}
        }
    }

    pub fn has(&self, r: Rank) -> bool {
        self.conn(r).is_some()
    }

    fn conn(&self, r: Rank) -> Option<&Conn> {
        self.conns.get(r as usize).and_then(Option::as_ref)
    }

    /// The socket of rank `r` (TCP_INFO, peek); None for a relayed connection.
    pub fn socket(&self, r: Rank) -> Option<&TcpStream> {
        self.conn(r).and_then(Conn::tcp)
    }

    /// Rank `r`'s socket, shared (the hub lends each node's to the rails' coordinators).
    pub(crate) fn shared_socket(&self, r: Rank) -> Option<Arc<TcpStream>> {
        match &self.conn(r)?.s {
            Link::Tcp(s) => Some(s.clone()),
            Link::Relayed { .. } => None,
        }
    }

    /// Has rank `r`'s connection closed or failed (EOF or an error)? Never blocks. A relayed
    /// connection's end comes from the hub ([`Happening::Closed`]).
    pub(crate) fn is_dead(&self, r: Rank) -> bool {
        let Some(c) = self.conn(r) else { return true };
        let Link::Tcp(s) = &c.s else { return false };
        let mut b = [0u8; 1];
        match s.peek(&mut b) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => !matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted),
        }
    }

    /// Queue `f` for rank `r` and write what its socket takes now.
    pub fn send(&mut self, r: Rank, f: Frame, now: Instant) -> Result<(), QueueError> {
        let Some(c) = self.conns.get_mut(r as usize).and_then(Option::as_mut) else {
            return Err(QueueError::Gone);
        };
        c.push(f, now)?;
        self.flush_conn(r as usize, now);
        self.publish();
        Ok(())
    }

    /// Queue `f` for rank `r` without writing yet ([`Plane::flush_backlog`] writes), with an
    /// optional mark reported once its last byte is written ([`Plane::take_marks`]).
    pub fn queue(&mut self, r: Rank, f: Frame, mark: Option<Mark>, now: Instant) -> Result<(), QueueError> {
        let Some(c) = self.conns.get_mut(r as usize).and_then(Option::as_mut) else {
            return Err(QueueError::Gone);
        };
        c.push(f, now)?;
        if let Some(m) = mark {
            c.marks.push_back((c.pushed, m));
        }
        self.backlog.insert(r as usize);
        Ok(())
    }

    /// Write what every connection with queued bytes takes now (after [`Plane::queue`]).
    pub(crate) fn flush_backlog(&mut self, now: Instant) {
        let due: Vec<usize> = self.backlog.iter().copied().collect();
        for i in due {
            self.flush_conn(i, now);
        }
    }

    /// Marked frames written since the last call: (connection, mark, when).
    pub(crate) fn take_marks(&mut self) -> Vec<(Rank, Mark, Instant)> {
        std::mem::take(&mut self.marks_done)
    }

    /// Write what connection `i` takes now (a relayed one: hand it to the hub). A write error
    /// shows up as the connection's end on the next read.
    fn flush_conn(&mut self, i: usize, now: Instant) {
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        if let Link::Relayed { .. } = c.s {
            self.hand_over(i);
            self.backlog.remove(&i);
            return;
        }
        let flushed = c.flush(now);
        let _ = self.after_io(i, flushed, now);
    }

    /// Serve relayed connections of `link`'s rail ([`crate::ring::relay`]): what the hub
    /// hands over is read by [`Plane::wait`], and it wakes this plane.
    pub(crate) fn relay_through(&mut self, link: RailLink) {
        link.inbox.set_waker(self.waker.clone());
        self.relay = Some(link);
    }

    /// Hold ring rank `r`'s relayed connection, generation `epoch` (replacing an earlier one).
    pub(crate) fn add_relayed(&mut self, r: Rank, epoch: Epoch) -> io::Result<()> {
        let node = self.relay.as_ref().and_then(|l| l.node(r));
        let node = node.ok_or_else(|| io::Error::other(format!("ring rank {r} has no relayed node")))?;
        self.remove(r);
        if let Some(slot) = self.conns.get_mut(r as usize) {
            *slot = Some(Conn::on(Link::Relayed { node, epoch }));
        }
        Ok(())
    }

    /// Relayed hellos read since the last call, in order (the join seats or refuses them).
    pub(crate) fn take_hellos(&mut self) -> Vec<RelayedHello> {
        std::mem::take(&mut self.hellos)
    }

    /// Tell ring rank `r`'s relayed connection `epoch` why it is turned away, and close it
    /// (best effort).
    pub(crate) fn refuse_relayed(&mut self, r: Rank, epoch: Epoch, reason: &str) {
        let Some(l) = &self.relay else { return };
        let (rail, Some(node)) = (l.rail, l.node(r)) else {
            return;
        };
        let reject = Msg::Reject {
            reason: reason.into(),
        };
        if let Some(f) = frame(&reject).ok().and_then(|f| tag_frame(rail, &f)) {
            self.relay_out.push(Out::Frame {
                node,
                frame: f,
                table: None,
            });
        }
        self.tell_close(node, epoch, false);
        self.publish();
    }

    /// The hub is to close node `node`'s relayed connection `epoch` after what was handed to
    /// it (`reset`: as a dropped connection with unread data).
    fn tell_close(&mut self, node: Rank, epoch: Epoch, reset: bool) {
        if let Some(rail) = self.relay.as_ref().map(|l| l.rail) {
            self.relay_out.push(Out::Close {
                node,
                rail,
                epoch,
                reset,
            });
        }
    }

    /// Relayed connection `i`'s queued frames, tagged with the rail, go to the hub; the last
    /// frame of its table is marked (the hub says when it went out: [`In::TableOut`]). A frame
    /// the tag takes over the limit ends the connection.
    fn hand_over(&mut self, i: usize) {
        let (Some(link), Some(Some(c))) = (self.relay.as_ref(), self.conns.get_mut(i)) else {
            return;
        };
        let Link::Relayed { node, epoch } = c.s else {
            return;
        };
        let mut lost = None;
        while let Some(f) = c.out.pop_front() {
            c.out_bytes -= f.len();
            let last_of_table = c.table_frames_left == 1;
            c.table_frames_left = c.table_frames_left.saturating_sub(1);
            let tagged = match &self.tag_cache {
                Some((src, t)) if Arc::ptr_eq(src, &f) => Some(t.clone()),
                _ => tag_frame(link.rail, &f),
            };
            let Some(t) = tagged else {
                lost = Some(WireError::TooLarge(f.len()));
                break;
            };
            self.tag_cache = Some((f, t.clone()));
            let table = last_of_table.then_some((link.rail, i as Rank, epoch));
            self.relay_out.push(Out::Frame {
                node,
                frame: t,
                table,
            });
        }
        c.stuck_since = None;
        if let Some(e) = lost {
            self.relay_lost.push((i as Rank, e));
            self.end(i as Rank, Some(true));
        }
    }

    /// Hand what waits for the hub over (one lock per call, not per frame).
    fn publish(&mut self) {
        if let Some(l) = &self.relay {
            l.hub.out.push_all(&mut self.relay_out);
        }
    }

    /// Whether ring rank `r` holds generation `epoch` of its relayed connection.
    fn holds(&self, r: Rank, epoch: Epoch) -> bool {
        matches!(self.conn(r).map(|c| &c.s), Some(Link::Relayed { epoch: g, .. }) if *g == epoch)
    }

    /// What the hub handed over, in order: messages and ends to `out`, hellos kept for
    /// [`Plane::take_hellos`], tables out, nodes that do not read. The loop has caught up no
    /// further than the hub.
    fn take_inbox<M: Unit>(&mut self, out: &mut Vec<Happening<M>>) {
        out.extend(self.relay_lost.drain(..).map(|(r, e)| Happening::Closed(r, e)));
        let Some(link) = self.relay.clone() else { return };
        let hub_caught_up = link.hub.caught_up();
        for item in link.inbox.take() {
            match item {
                In::Hello { r, epoch, peer, body } => {
                    let hello = crate::ring::gate::hello_of(&body);
                    self.hellos.push(RelayedHello {
                        r,
                        epoch,
                        peer,
                        hello,
                    });
                }
                In::Msg { r, epoch, body, at } if self.holds(r, epoch) => match M::from_body(&body) {
                    Ok(m) => {
                        self.stats.msgs += 1;
                        out.push(Happening::Msg(r, m, at));
                    }
                    Err(e) => {
                        out.push(Happening::Closed(r, e));
                        self.end(r, Some(true));
                    }
                },
                In::Closed { r, epoch, err } if self.holds(r, epoch) => {
                    out.push(Happening::Closed(r, err));
                    self.end(r, None);
                }
                In::TableOut { r, epoch, at } if self.holds(r, epoch) => {
                    if let Some(Some(c)) = self.conns.get_mut(r as usize) {
                        c.table_done = Some(at);
                    }
                    self.tables_done.push((r, at));
                }
                In::Stuck {
                    r,
                    epoch,
                    queued,
                    waited,
                } if self.holds(r, epoch) => self.relay_stuck.push((r, queued, waited)),
                // Of an earlier connection, or of a rank not seated.
                _ => {}
            }
        }
        self.caught_up = self.caught_up.min(hub_caught_up);
    }

    /// Queue rank `r`'s table (one or more frames); its silence clock starts once the last
    /// byte went out ([`Plane::table_done`]).
    pub(crate) fn send_table(&mut self, r: Rank, frames: Vec<Frame>, now: Instant) -> Result<(), QueueError> {
        let Some(c) = self.conns.get_mut(r as usize).and_then(Option::as_mut) else {
            return Err(QueueError::Gone);
        };
        let total: usize = frames.iter().map(|f| f.len()).sum();
        if c.out_bytes + total > MAX_QUEUE_BYTES {
            return Err(QueueError::Full {
                queued: c.out_bytes,
                limit: MAX_QUEUE_BYTES,
            });
        }
        // Frames already queued count too: the table is whole once they and it are out.
        c.table_frames_left = c.out.len() + frames.len();
        for f in frames {
            c.push(f, now)?;
        }
        self.flush_conn(r as usize, now);
        self.publish();
        Ok(())
    }

    /// A small message (a ping) for each rank in `ranks` that `want`s one and whose queue is
    /// empty: a ping behind queued data would tell nothing more, and must not grow the queue
    /// of a rank that stopped reading. Returns how many went out.
    pub(crate) fn ping_idle(
        &mut self,
        f: &Frame,
        ranks: std::ops::Range<Rank>,
        now: Instant,
        want: impl Fn(Rank) -> bool,
    ) -> u64 {
        let mut sent = 0;
        for i in ranks.start as usize..(ranks.end as usize).min(self.conns.len()) {
            if !want(i as Rank) {
                continue;
            }
            let Some(c) = self.conns[i].as_mut() else { continue };
            if c.out.is_empty() && c.push(f.clone(), now).is_ok() {
                self.flush_conn(i, now);
                sent += 1;
            }
        }
        self.publish();
        sent
    }

    /// Bytes queued on every connection together.
    pub fn queued(&self) -> usize {
        self.backlog
            .iter()
            .filter_map(|&i| self.conns.get(i).and_then(Option::as_ref))
            .map(|c| c.out_bytes)
            .sum()
    }

    /// When rank `r`'s whole table was handed to its socket.
    pub fn table_done(&self, r: Rank) -> Option<Instant> {
        self.conn(r).and_then(|c| c.table_done)
    }

    /// Ranks whose queued bytes have waited at least `deadline` with no byte taken: with the
    /// bytes still queued and how long.
    /// A relayed rank is stuck when the hub says its node is (the hub's own deadline).
    pub fn stuck(&mut self, now: Instant, deadline: Duration) -> Vec<(Rank, usize, Duration)> {
        let mut v: Vec<_> = self
            .backlog
            .iter()
            .filter_map(|&r| {
                let c = self.conns.get(r)?.as_ref()?;
                let since = c.stuck_since?;
                let d = now.saturating_duration_since(since);
                (d >= deadline && c.out_bytes > 0).then_some((r as Rank, c.out_bytes, d))
            })
            .collect();
        v.append(&mut self.relay_stuck);
        v
    }

    /// Every byte that reached a connection before this instant has been read and handed
    /// out by [`Plane::wait`] (with the time it was read): the start of the last poll that
    /// reported every ready connection. A rank silent as of this instant is silent; a
    /// silence after it may be the loop's own lag (it was busy, or got no CPU). A connection
    /// whose read budget ran out is read again at once, and it was heard from.
    pub(crate) fn caught_up(&self) -> Instant {
        self.caught_up
    }

    /// One poll: each connection ready to read or write goes to `readable`/`writable`.
    /// Returns how many events came back (None: the poll failed).
    fn poll_once(
        &mut self,
        timeout: Duration,
        readable: &mut Vec<usize>,
        writable: &mut Vec<usize>,
    ) -> Option<usize> {
        let t0 = Instant::now();
        if let Err(e) = self.poll.poll(&mut self.events, Some(timeout))
            && e.kind() != io::ErrorKind::Interrupted
        {
            // Never spin on a failing poll.
            std::thread::sleep(timeout.min(Duration::from_millis(10)));
            return None;
        }
        self.stats.polls += 1;
        self.stats.idle += t0.elapsed();
        let mut n = 0;
        for ev in self.events.iter() {
            n += 1;
            if ev.token() == WAKER {
                self.woken = true;
                continue;
            }
            if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                readable.push(ev.token().0);
            }
            if ev.is_writable() || ev.is_error() {
                writable.push(ev.token().0);
            }
        }
        Some(n)
    }

    /// Poll until the event list comes back with room (every ready connection reported).
    /// The kernel hands out ready connections oldest first, so a full list is followed by
    /// zero waits; at most enough of them to go round every connection once. Returns the
    /// start of the last poll when it had room.
    fn poll_all(
        &mut self,
        timeout: Duration,
        readable: &mut Vec<usize>,
        writable: &mut Vec<usize>,
    ) -> Option<Instant> {
        let cap = self.events.capacity().max(1);
        let mut timeout = timeout;
        for _ in 0..self.conns.len() / cap + 2 {
            let t0 = Instant::now();
            if self.poll_once(timeout, readable, writable)? < cap {
                return Some(t0);
            }
            timeout = Duration::ZERO;
        }
        None
    }

    /// Wait up to `timeout` for input and room to write; returns the messages read and the
    /// connections that ended, in arrival order per connection.
    pub fn wait(&mut self, timeout: Duration) -> Vec<Happening> {
        self.wait_as(timeout)
    }

    /// [`Plane::wait`] handing out each frame as `M` cuts it (a relay forwards frames by
    /// their header, unparsed; see `railmux`).
    pub(crate) fn wait_as<M: Unit>(&mut self, timeout: Duration) -> Vec<Happening<M>> {
        self.publish();
        let mut readable = std::mem::take(&mut self.again);
        let mut writable = std::mem::take(&mut self.again_write);
        let relayed = !self.relay_lost.is_empty() || self.relay.as_ref().is_some_and(|l| !l.inbox.is_empty());
        let timeout = if readable.is_empty() && writable.is_empty() && !relayed {
            timeout
        } else {
            Duration::ZERO
        };
        let heard_all = self.poll_all(timeout, &mut readable, &mut writable);
        let t1 = Instant::now();
        let mut out = self.flush_ready(writable, t1);
        self.read_ready(readable, &mut out);
        // Every connection was reported, and each was read to its end: nothing that came
        // before that poll is unread. When a last look finds nothing ready either, nothing
        // that came before the look is (the usual case: then no message read here is
        // stamped after this plane's clock); what it finds is read first on the next wait.
        if let Some(t0) = heard_all {
            let t2 = Instant::now();
            let (mut r, mut w) = (Vec::new(), Vec::new());
            self.caught_up = match self.poll_once(Duration::ZERO, &mut r, &mut w) {
                Some(0) if self.again.is_empty() => t2,
                _ => t0,
            };
            self.again.append(&mut r);
            self.again_write.append(&mut w);
        }
        self.take_inbox(&mut out);
        self.stats.io += t1.elapsed();
        out
    }

    /// Write what each connection in `writable` takes now; the connections that ended.
    fn flush_ready<M>(&mut self, mut writable: Vec<usize>, now: Instant) -> Vec<Happening<M>> {
        writable.sort_unstable();
        writable.dedup();
        let mut out = Vec::new();
        for i in writable {
            let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
                continue;
            };
            let flushed = c.flush(now);
            if let Err(e) = self.after_io(i, flushed, now) {
                out.push(Happening::Closed(i as Rank, e.into()));
                self.remove(i as Rank);
            }
        }
        out
    }

    /// Read each connection in `readable` (up to its budget): its messages, stamped when
    /// read, and its end go to `out`.
    fn read_ready<M: Unit>(&mut self, mut readable: Vec<usize>, out: &mut Vec<Happening<M>>) {
        readable.sort_unstable();
        readable.dedup();
        let mut chunk = vec![0u8; 64 << 10];
        let mut msgs = Vec::new();
        for i in readable {
            let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
                continue;
            };
            let res = c.read(&mut chunk, &mut msgs);
            if c.more_to_read {
                self.again.push(i);
            }
            self.stats.msgs += msgs.len() as u64;
            out.extend(msgs.drain(..).map(|(m, at)| Happening::Msg(i as Rank, m, at)));
            if let Err(e) = res {
                out.push(Happening::Closed(i as Rank, e));
                self.remove(i as Rank);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        (s, c)
    }

    #[test]
    fn take_frames_table() {
        let f = frame(&Msg::Ping).unwrap();
        let mut two = [&f[..], &f[..], &f[..3]].concat();
        let mut msgs = Vec::new();
        take_frames(&mut two, &mut msgs).unwrap();
        assert_eq!((msgs.len(), two.len()), (2, 3));
        let mut bad = b"GET /".to_vec();
        assert!(matches!(
            take_frames(&mut bad, &mut msgs),
            Err(WireError::BadMagic(_))
        ));
        let mut big = [MAGIC.as_slice(), &u32::MAX.to_be_bytes()].concat();
        assert!(matches!(
            take_frames(&mut big, &mut msgs),
            Err(WireError::TooLarge(_))
        ));
    }

    /// A rank that stops reading fills its own queue only: the others get every frame at
    /// once, and only the silent reader's queue is reported stuck past the deadline.
    #[test]
    fn a_rank_that_stops_reading_is_stuck_alone() {
        let mut plane = Plane::new(3).unwrap();
        let mut clients = Vec::new();
        for r in 0..3 {
            let (s, c) = pair();
            plane.add(r, s).unwrap();
            clients.push(c);
        }
        let big: Frame = vec![0u8; 256 << 10].into();
        let t0 = Instant::now();
        let mut refused = None;
        // Rank 1 never reads; 0 and 2 read everything as it comes.
        for _ in 0..64 {
            for r in [0, 2, 1] {
                match plane.send(r, big.clone(), Instant::now()) {
                    Ok(()) => {}
                    Err(e) => {
                        assert_eq!(r, 1);
                        refused.get_or_insert(e);
                    }
                }
            }
            for r in [0usize, 2] {
                clients[r].set_nonblocking(true).unwrap();
                let mut b = vec![0u8; 1 << 20];
                while clients[r].read(&mut b).is_ok_and(|k| k > 0) {}
            }
            plane.wait(Duration::from_millis(1));
        }
        // The readers take what is left; the silent one's queue stays.
        for _ in 0..20 {
            for r in [0usize, 2] {
                let mut b = vec![0u8; 1 << 20];
                while clients[r].read(&mut b).is_ok_and(|k| k > 0) {}
            }
            plane.wait(Duration::from_millis(5));
        }
        assert!(
            matches!(
                refused,
                Some(QueueError::Full {
                    limit: MAX_QUEUE_BYTES,
                    ..
                })
            ),
            "{refused:?}"
        );
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        std::thread::sleep(Duration::from_millis(300));
        let stuck = plane.stuck(Instant::now(), Duration::from_millis(200));
        assert_eq!(stuck.iter().map(|s| s.0).collect::<Vec<_>>(), vec![1]);
        assert!(stuck[0].1 > 0);
    }

    /// Issue 31: a rail coordinator's plane serving relayed connections. A hello goes to the
    /// join; only the current connection's messages count (an earlier one's, and its end, are
    /// dropped); its end, its table's end and a node that does not read are as the hub says;
    /// what it sends reaches the hub tagged with the rail, the table's last frame marked; a
    /// connection it drops, or that is left when it ends, is closed after what it sent.
    #[test]
    fn relayed_connections_follow_the_hub() {
        use crate::ring::relay::{Hub, RailLink};
        let hub = Arc::new(Hub::default());
        let link = RailLink {
            rail: 3,
            rails: 4,
            ring: Arc::new(vec![0, 5, 9]),
            inbox: Arc::default(),
            hub: hub.clone(),
        };
        let mut plane = Plane::new(3).unwrap();
        plane.relay_through(link.clone());
        let body = |m: &Msg| frame(m).unwrap()[8..].to_vec();
        let at = Instant::now();
        let ready = || body(&Msg::Ready { rank: 1 });
        let peer = "198.18.0.5:40312".to_string();
        link.inbox.push_all(&mut vec![
            In::Hello {
                r: 1,
                epoch: 1,
                peer,
                body: body(&Msg::Ping),
            },
            In::Msg {
                r: 1,
                epoch: 1,
                body: ready(),
                at,
            },
        ]);
        assert!(
            plane.wait(Duration::from_millis(200)).is_empty(),
            "nothing before its seat"
        );
        let hellos = plane.take_hellos();
        assert_eq!(hellos.len(), 1);
        let h = &hellos[0];
        assert_eq!((h.r, h.epoch, h.peer.as_str()), (1, 1, "198.18.0.5:40312"));
        assert!(
            h.hello
                .as_ref()
                .is_err_and(|e| e.to_string().contains("expected hello"))
        );
        plane.add_relayed(1, 2).unwrap();
        link.inbox.push_all(&mut vec![
            In::Msg {
                r: 1,
                epoch: 1,
                body: ready(),
                at,
            },
            In::Msg {
                r: 1,
                epoch: 2,
                body: ready(),
                at,
            },
            In::Closed {
                r: 1,
                epoch: 1,
                err: WireError::Closed,
            },
        ]);
        let got = plane.wait(Duration::from_millis(200));
        assert!(matches!(
            got.as_slice(),
            [Happening::Msg(1, Msg::Ready { rank: 1 }, _)]
        ));
        assert!(plane.has(1));
        // The table, tagged with rail 3 for node 5, its last frame marked; out when the hub says.
        let table = vec![frame(&Msg::Go).unwrap(), frame(&Msg::Ping).unwrap()];
        plane.send_table(1, table.clone(), at).unwrap();
        let out = hub.out.take();
        assert_eq!(out.len(), 2, "{out:?}");
        for (o, (f, mark)) in out.iter().zip(table.iter().zip([None, Some((3, 1, 2))])) {
            let Out::Frame {
                node: 5,
                frame,
                table,
            } = o
            else {
                panic!("{o:?}")
            };
            assert_eq!((&frame[..], *table), (&tag_frame(3, f).unwrap()[..], mark));
        }
        assert_eq!(plane.table_done(1), None);
        let waited = Duration::from_secs(4);
        link.inbox.push_all(&mut vec![
            In::TableOut { r: 1, epoch: 2, at },
            In::Stuck {
                r: 1,
                epoch: 2,
                queued: 10,
                waited,
            },
        ]);
        assert!(plane.wait(Duration::from_millis(200)).is_empty());
        assert_eq!(
            (plane.take_tables_done(), plane.table_done(1)),
            (vec![(1, at)], Some(at))
        );
        assert_eq!(
            plane.stuck(Instant::now(), Duration::from_secs(3)),
            vec![(1, 10, waited)]
        );
        // Its end as the hub says (a reset): nothing is told back.
        let reset = WireError::Io(io::ErrorKind::ConnectionReset.into());
        link.inbox.push(In::Closed {
            r: 1,
            epoch: 2,
            err: reset,
        });
        let got = plane.wait(Duration::from_millis(200));
        assert!(matches!(got.as_slice(), [Happening::Closed(1, WireError::Io(_))]));
        assert!(!plane.has(1) && hub.out.take().is_empty());
        // Dropped here: closed as a reset; left when the plane ends: closed after its frames.
        plane.add_relayed(2, 7).unwrap();
        plane.remove(2);
        plane.add_relayed(1, 3).unwrap();
        plane.send(1, frame(&Msg::Ping).unwrap(), at).unwrap();
        drop(plane);
        let ends: Vec<String> = hub.out.take().iter().map(|o| format!("{o:?}")).collect();
        assert_eq!(ends.len(), 3, "{ends:?}");
        assert!(
            ends[0].contains("Close { node: 9, rail: 3, epoch: 7, reset: true }"),
            "{ends:?}"
        );
        assert!(ends[1].starts_with("Frame { node: 5"), "{ends:?}");
        assert!(
            ends[2].contains("Close { node: 5, rail: 3, epoch: 3, reset: false }"),
            "{ends:?}"
        );
    }
}
