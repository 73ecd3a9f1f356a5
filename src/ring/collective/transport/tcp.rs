//! The TCP transport: one connection per directed link and channel. The sender writes a
//! 16-byte header (magic, slot, length, immediate) and the chunk with one vectored write;
//! the receiver's own thread reads the chunk straight into the named slot (no extra copy)
//! and queues the completion; credits (4-byte slot ids) flow back on the same connection.
//! Large socket buffers and TCP_NODELAY; a short JSON handshake checks the job token and
//! hands the sender the receiver's slot count and size (as an RDMA rkey exchange would).

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::accept;
pub use super::accept::{
    ACCEPT_BACKOFF, AcceptSpec, HANDSHAKE_DEADLINE, MAX_PENDING, Refused, UNVERIFIED_GRACE,
};
use super::{
    Completion, Fabric, LinkRequest, OpenLinks, RecvLink, SendLink, TransportError, peer_name, slot_buffer,
    words_as_bytes, words_as_bytes_mut,
};

const DATA_MAGIC: u32 = 0x4650_4431; // "FPD1"
const HS_MAGIC: &[u8; 4] = b"FPH1";
const MAX_HANDSHAKE: usize = 4096;
/// Bounds on the slots a receiver may offer (its handshake reply sizes the sender's credits).
pub(crate) const MAX_SLOTS: u32 = 1024;
pub(crate) const MAX_SLOT_BYTES: u64 = 1 << 30;
/// Socket buffer size asked for (the kernel caps it at net.core.{w,r}mem_max and doubles it).
pub(crate) const SOCKET_BUFFER: usize = 4 << 20;

/// The connecting side's introduction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Handshake {
    pub token: String,
    pub from_rank: u32,
    pub to_rank: u32,
    pub channel: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Reply {
    ok: bool,
    reason: String,
    slots: u32,
    slot_bytes: u64,
}

fn set_buffers(s: &TcpStream) {
    let r = socket2::SockRef::from(s);
    let _ = r.set_send_buffer_size(SOCKET_BUFFER);
    let _ = r.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = s.set_nodelay(true);
}

pub(crate) fn write_frame(s: &mut TcpStream, body: &impl Serialize) -> io::Result<()> {
    let b = serde_json::to_vec(body).map_err(io::Error::other)?;
    let mut f = HS_MAGIC.to_vec();
    f.extend_from_slice(&(b.len() as u32).to_be_bytes());
    f.extend_from_slice(&b);
    s.write_all(&f)
}

/// A handshake frame decoded from the bytes received so far. Pure, so it is property-tested
/// on arbitrary input; it never allocates beyond `MAX_HANDSHAKE`.
#[derive(Debug, PartialEq)]
pub enum Decoded<T> {
    /// Incomplete: this many more bytes are wanted (never more than the frame holds).
    More(usize),
    Done(T),
    /// Not a handshake; the reason carries no byte of the sender's beyond the magic in hex.
    Bad(String),
}

/// Decode one `FPH1 | u32 length | JSON` frame from the start of `buf`; bytes past the
/// frame are refused (a rank sends nothing before the reply).
pub fn decode_frame<T: DeserializeOwned>(buf: &[u8]) -> Decoded<T> {
    let m = buf.len().min(4);
    if buf[..m] != HS_MAGIC[..m] {
        return Decoded::Bad(format!("not a fabprobe data link (bad magic {:02x?})", &buf[..m]));
    }
    if buf.len() < 8 {
        return Decoded::More(8 - buf.len());
    }
    let len = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]) as usize;
    if len > MAX_HANDSHAKE {
        return Decoded::Bad(format!("handshake of {len} bytes exceeds {MAX_HANDSHAKE}"));
    }
    if buf.len() < 8 + len {
        return Decoded::More(8 + len - buf.len());
    }
    if buf.len() > 8 + len {
        return Decoded::Bad("bytes after the handshake".into());
    }
    match serde_json::from_slice(&buf[8..]) {
        Ok(v) => Decoded::Done(v),
        // serde's messages may quote the sender's text: say only what kind of error, where.
        Err(e) => Decoded::Bad(format!(
            "malformed handshake ({:?} error at byte {})",
            e.classify(),
            e.column()
        )),
    }
}

/// Read one frame by `deadline` (a deadline for the whole frame, not per read).
pub(crate) fn read_frame_by<T: DeserializeOwned>(s: &mut TcpStream, deadline: Instant) -> Result<T, String> {
    let mut buf = Vec::new();
    loop {
        let want = match decode_frame(&buf) {
            Decoded::Done(v) => return Ok(v),
            Decoded::Bad(e) => return Err(e),
            Decoded::More(n) => n,
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err("no whole handshake before the deadline".into());
        }
        let _ = s.set_read_timeout(Some(left));
        let mut tmp = [0u8; 1024];
        let n = want.min(tmp.len());
        match s.read(&mut tmp[..n]) {
            Ok(0) => return Err("the connection closed during the handshake".into()),
            Ok(k) => buf.extend_from_slice(&tmp[..k]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
}

fn io_err(peer: &str, dir: &'static str, e: io::Error) -> TransportError {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => TransportError::Timeout {
            peer: peer.into(),
            dir,
        },
        _ => TransportError::Closed {
            peer: peer.into(),
            dir,
            why: e.to_string(),
        },
    }
}

// ---------------------------------------------------------------- sender

pub(crate) struct TcpSend {
    stream: TcpStream,
    peer: String,
    slots: u32,
    slot_bytes: usize,
    credits: VecDeque<u32>,
    partial: Vec<u8>,
    sent: u64,
}

/// Connect a link to the receiver at `addr`, retrying refused connections until `deadline`.
/// `timeout` bounds every later blocking write.
pub(crate) fn connect(
    addr: &str,
    peer: &str,
    hs: &Handshake,
    deadline: Instant,
    timeout: Duration,
) -> Result<TcpSend, TransportError> {
    let setup = |what: &str, error: String| TransportError::Setup {
        peer: peer.into(),
        what: what.into(),
        error,
    };
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| setup(&format!("resolving the data address {addr}"), e.to_string()))?
        .collect();
    let mut last = String::from("no address");
    let mut stream = None;
    'retry: while Instant::now() < deadline {
        for a in &addrs {
            let left = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1));
            match connect_not_self(a, left) {
                Ok(s) => {
                    stream = Some(s);
                    break 'retry;
                }
                Err(e) => last = e.to_string(),
            }
        }
        thread::sleep(Duration::from_millis(50));
    }
    let mut s = stream.ok_or_else(|| setup(&format!("connecting the data link to {addr}"), last))?;
    set_buffers(&s);
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    let _ = s.set_read_timeout(Some(left));
    let _ = s.set_write_timeout(Some(left));
    write_frame(&mut s, hs).map_err(|e| setup("sending the link handshake", e.to_string()))?;
    let reply: Reply = read_frame_by(&mut s, deadline).map_err(|e| setup("reading the link handshake", e))?;
    if !reply.ok {
        return Err(setup(
            "the receiver refused the link",
            crate::text::printable(&reply.reason, 200),
        ));
    }
    // The receiver's figures size this side's credits: a lie must not allocate gigabytes
    // (u32::MAX slots) or give no credit at all (0 slots: a false hang).
    if !(1..=MAX_SLOTS).contains(&reply.slots) || !(4..=MAX_SLOT_BYTES).contains(&reply.slot_bytes) {
        return Err(setup(
            "reading the link handshake",
            format!(
                "the receiver offers {} slots of {} bytes (want 1..={MAX_SLOTS} slots of 4..={MAX_SLOT_BYTES} bytes)",
                reply.slots, reply.slot_bytes
            ),
        ));
    }
    let _ = s.set_write_timeout(Some(timeout));
    Ok(TcpSend {
        stream: s,
        peer: peer.into(),
        slots: reply.slots,
        slot_bytes: reply.slot_bytes as usize,
        credits: (0..reply.slots).collect(),
        partial: Vec::new(),
        sent: 0,
    })
}

impl SendLink for TcpSend {
    fn peer(&self) -> &str {
        &self.peer
    }
    fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }
    fn acquire(&mut self, deadline: Instant) -> Result<u32, TransportError> {
        loop {
            if let Some(c) = self.credits.pop_front() {
                return Ok(c);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(TransportError::Timeout {
                    peer: self.peer.clone(),
                    dir: "to",
                });
            }
            let _ = self.stream.set_read_timeout(Some(left));
            let mut buf = [0u8; 256];
            let n = match self.stream.read(&mut buf) {
                Ok(0) => {
                    return Err(TransportError::Closed {
                        peer: self.peer.clone(),
                        dir: "to",
                        why: "the receiver closed the connection".into(),
                    });
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_err(&self.peer, "to", e)),
            };
            self.partial.extend_from_slice(&buf[..n]);
            let whole = self.partial.len() / 4 * 4;
            for c in self.partial[..whole].chunks_exact(4) {
                let slot = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
                if slot >= self.slots {
                    return Err(TransportError::Protocol {
                        peer: self.peer.clone(),
                        dir: "to",
                        what: format!("credit for slot {slot} of {}", self.slots),
                    });
                }
                self.credits.push_back(slot);
            }
            self.partial.drain(..whole);
        }
    }
    fn write_imm(&mut self, slot: u32, data: &[u8], imm: u32) -> Result<(), TransportError> {
        if data.len() > self.slot_bytes {
            return Err(TransportError::Protocol {
                peer: self.peer.clone(),
                dir: "to",
                what: format!(
                    "write of {} bytes into a {}-byte slot",
                    data.len(),
                    self.slot_bytes
                ),
            });
        }
        let mut head = [0u8; 16];
        head[0..4].copy_from_slice(&DATA_MAGIC.to_be_bytes());
        head[4..8].copy_from_slice(&slot.to_be_bytes());
        head[8..12].copy_from_slice(&(data.len() as u32).to_be_bytes());
        head[12..16].copy_from_slice(&imm.to_be_bytes());
        let (mut h, mut d) = (&head[..], data);
        while !h.is_empty() || !d.is_empty() {
            let n = match self.stream.write_vectored(&[IoSlice::new(h), IoSlice::new(d)]) {
                Ok(0) => {
                    return Err(TransportError::Closed {
                        peer: self.peer.clone(),
                        dir: "to",
                        why: "write returned 0".into(),
                    });
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_err(&self.peer, "to", e)),
            };
            let from_h = n.min(h.len());
            h = &h[from_h..];
            d = &d[n - from_h..];
        }
        self.sent += data.len() as u64;
        Ok(())
    }
    fn bytes_sent(&self) -> u64 {
        self.sent
    }
}

impl Drop for TcpSend {
    fn drop(&mut self) {
        // Closing with unread credits in the receive queue makes the kernel send RST,
        // which discards chunks still in our send buffer. Send FIN after the data, then
        // let the closer drain credits until the receiver closes: every link of the
        // process at once, so closing costs CLOSE_LINGER in all, not per link.
        let _ = self.stream.shutdown(Shutdown::Write);
        if let Ok(s) = self.stream.try_clone() {
            closer::hand_over(s);
        }
    }
}

/// How long a closed sending link may wait for its receiver to close in turn.
pub(crate) const CLOSE_LINGER: Duration = Duration::from_millis(500);

/// Wait until every closed sending link of this process is done draining, or `by`.
/// Call before the process exits (an exit resets links a slow receiver still reads).
pub(crate) fn wait_closed(by: Instant) {
    while closer::busy() && Instant::now() < by {
        thread::sleep(Duration::from_millis(5));
    }
}

/// One thread per process drains the credits of closed sending links until each receiver
/// closes or its linger passes.
mod closer {
    use super::*;
    use std::sync::OnceLock;

    struct Closing {
        stream: TcpStream,
        until: Instant,
    }

    static LIST: Mutex<Vec<Closing>> = Mutex::new(Vec::new());
    static STARTED: OnceLock<bool> = OnceLock::new();

    fn list() -> MutexGuard<'static, Vec<Closing>> {
        LIST.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn busy() -> bool {
        !list().is_empty()
    }

    pub(crate) fn hand_over(stream: TcpStream) {
        if stream.set_nonblocking(true).is_err() {
            return;
        }
        list().push(Closing {
            stream,
            until: Instant::now() + CLOSE_LINGER,
        });
        let started = STARTED.get_or_init(|| {
            thread::Builder::new()
                .name("fabprobe-close".into())
                .spawn(run)
                .is_ok()
        });
        if !started {
            // No thread: the link just closes now.
            list().clear();
        }
    }

    fn run() {
        let mut sink = [0u8; 4096];
        loop {
            {
                let now = Instant::now();
                list().retain_mut(|c| {
                    if now >= c.until {
                        return false;
                    }
                    loop {
                        match c.stream.read(&mut sink) {
                            Ok(0) => return false,
                            Ok(_) => continue,
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                            Err(_) => return false,
                        }
                    }
                });
            }
            thread::sleep(Duration::from_millis(10));
        }
    }
}

// ---------------------------------------------------------------- receiver

struct RxQueue {
    completions: VecDeque<Completion>,
    error: Option<TransportError>,
    busy: Vec<bool>,
}

struct RxShared {
    slots: Vec<Mutex<Vec<u32>>>,
    q: Mutex<RxQueue>,
    cv: Condvar,
}

impl RxShared {
    fn q(&self) -> MutexGuard<'_, RxQueue> {
        self.q.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub(crate) struct TcpRecv {
    sh: Arc<RxShared>,
    credit: TcpStream,
    peer: String,
    received: u64,
}

/// The receive thread: header, then the bytes straight into the slot.
fn rx_loop(mut s: TcpStream, sh: Arc<RxShared>, peer: String, slot_bytes: usize) {
    let fail = |e: TransportError| {
        let mut q = sh.q();
        q.error.get_or_insert(e);
        sh.cv.notify_all();
    };
    loop {
        let mut head = [0u8; 16];
        if let Err(e) = s.read_exact(&mut head) {
            let why = if e.kind() == io::ErrorKind::UnexpectedEof {
                "the sender closed the connection".to_string()
            } else {
                e.to_string()
            };
            return fail(TransportError::Closed {
                peer: peer.clone(),
                dir: "from",
                why,
            });
        }
        let word = |i: usize| u32::from_be_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
        let (magic, slot, len, imm) = (word(0), word(4), word(8) as usize, word(12));
        let proto = |what: String| TransportError::Protocol {
            peer: peer.clone(),
            dir: "from",
            what,
        };
        if magic != DATA_MAGIC {
            return fail(proto(format!("bad chunk magic {magic:#x}")));
        }
        if len > slot_bytes {
            return fail(proto(format!(
                "chunk of {len} bytes for a {slot_bytes}-byte slot"
            )));
        }
        {
            let mut q = sh.q();
            match q.busy.get_mut(slot as usize) {
                None => {
                    return fail(proto(format!("write into slot {slot} of {}", sh.slots.len())));
                }
                Some(b) if *b => {
                    return fail(proto(format!(
                        "write into slot {slot} before its credit came back (overrun)"
                    )));
                }
                Some(b) => *b = true,
            }
        }
        let Some(m) = sh.slots.get(slot as usize) else {
            return;
        };
        {
            let mut buf = m.lock().unwrap_or_else(|p| p.into_inner());
            if let Err(e) = s.read_exact(&mut words_as_bytes_mut(&mut buf)[..len]) {
                drop(buf);
                return fail(TransportError::Closed {
                    peer: peer.clone(),
                    dir: "from",
                    why: format!("mid-chunk: {e}"),
                });
            }
        }
        let mut q = sh.q();
        q.completions.push_back(Completion { slot, len, imm });
        sh.cv.notify_all();
    }
}

fn make_recv(s: TcpStream, peer: String, slots: usize, slot_bytes: usize) -> io::Result<TcpRecv> {
    let sh = Arc::new(RxShared {
        slots: (0..slots).map(|_| Mutex::new(slot_buffer(slot_bytes))).collect(),
        q: Mutex::new(RxQueue {
            completions: VecDeque::new(),
            error: None,
            busy: vec![false; slots],
        }),
        cv: Condvar::new(),
    });
    let reader = s.try_clone()?;
    let _ = reader.set_read_timeout(None);
    {
        let sh = sh.clone();
        let peer = peer.clone();
        thread::Builder::new()
            .name("fabprobe-rx".into())
            .spawn(move || rx_loop(reader, sh, peer, slot_bytes))?;
    }
    Ok(TcpRecv {
        sh,
        credit: s,
        peer,
        received: 0,
    })
}

impl RecvLink for TcpRecv {
    fn peer(&self) -> &str {
        &self.peer
    }
    fn poll(&mut self, deadline: Instant) -> Result<Completion, TransportError> {
        let mut q = self.sh.q();
        loop {
            if let Some(c) = q.completions.pop_front() {
                self.received += c.len as u64;
                return Ok(c);
            }
            if let Some(e) = &q.error {
                return Err(e.clone());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(TransportError::Timeout {
                    peer: self.peer.clone(),
                    dir: "from",
                });
            }
            q = self
                .sh
                .cv
                .wait_timeout(q, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
    fn consume(&mut self, c: &Completion, f: &mut dyn FnMut(&[u8])) -> Result<(), TransportError> {
        let Some(m) = self.sh.slots.get(c.slot as usize) else {
            return Err(TransportError::Protocol {
                peer: self.peer.clone(),
                dir: "from",
                what: format!("no slot {}", c.slot),
            });
        };
        {
            let buf = m.lock().unwrap_or_else(|p| p.into_inner());
            f(&words_as_bytes(&buf)[..c.len]);
        }
        if let Some(b) = self.sh.q().busy.get_mut(c.slot as usize) {
            *b = false;
        }
        // A sender that finished and closed needs no credit; a broken connection shows up
        // in the next poll from the receive thread, so a failed credit is not an error here.
        let _ = self.credit.write_all(&c.slot.to_be_bytes());
        Ok(())
    }
    fn bytes_received(&self) -> u64 {
        self.received
    }
}

impl Drop for TcpRecv {
    fn drop(&mut self) {
        // Wakes the receive thread out of its read.
        let _ = self.credit.shutdown(Shutdown::Both);
    }
}

/// The links accepted and the refusals (lines for the log), or the failure and the refusals.
pub(crate) type AcceptResult = accept::AcceptResult<Handshake, TcpRecv>;

/// One accepted link and who it came from.
pub(crate) type Accepted = accept::Accepted<Handshake, TcpRecv>;

impl accept::Hello for Handshake {
    fn token(&self) -> &str {
        &self.token
    }
    fn sender(&self) -> u32 {
        self.from_rank
    }
    fn receiver(&self) -> u32 {
        self.to_rank
    }
    fn channel(&self) -> u32 {
        self.channel
    }
}

/// What taking a TCP data link means: answer with the slots, start its reader.
struct TcpAdmit<'a> {
    spec: &'a AcceptSpec<'a>,
}

impl accept::Admit for TcpAdmit<'_> {
    type Hello = Handshake;
    type Link = TcpRecv;
    fn label(&self) -> &'static str {
        "data link"
    }
    fn check(&self, _: &Handshake) -> Result<(), Refused> {
        Ok(())
    }
    fn refuse(&self, s: &mut TcpStream, reason: &str) {
        let _ = write_frame(
            s,
            &Reply {
                ok: false,
                reason: reason.into(),
                slots: 0,
                slot_bytes: 0,
            },
        );
    }
    fn take(&self, mut s: TcpStream, hs: &Handshake) -> Result<TcpRecv, Refused> {
        let spec = self.spec;
        set_buffers(&s);
        let ok = Reply {
            ok: true,
            reason: String::new(),
            slots: spec.slots as u32,
            slot_bytes: spec.slot_bytes as u64,
        };
        write_frame(&mut s, &ok)
            .map_err(|e| Refused::Stray(format!("failed while taking its reply: {e}")))?;
        let _ = s.set_write_timeout(Some(spec.timeout));
        make_recv(s, (spec.peer_name)(hs.from_rank), spec.slots, spec.slot_bytes)
            .map_err(|e| Refused::Stray(format!("could not start its reader: {e}")))
    }
}

/// Accept exactly the links in `spec.expect` on `listener` by `spec.deadline`, with the
/// machinery the RDMA endpoint exchange shares ([`accept::accept`]).
pub(crate) fn accept(listener: &TcpListener, spec: &AcceptSpec) -> AcceptResult {
    accept::accept(listener, spec, &TcpAdmit { spec })
}

/// The TCP fabric: one listening socket on the data interface.
pub(crate) struct TcpFabric {
    listener: TcpListener,
    address: String,
}

impl TcpFabric {
    /// Listen on `ip` (port chosen by the kernel).
    pub fn bind(ip: std::net::IpAddr) -> io::Result<TcpFabric> {
        let listener = TcpListener::bind(SocketAddr::new(ip, 0))?;
        let address = listener.local_addr()?.to_string();
        Ok(TcpFabric { listener, address })
    }

    /// Serve TCP links on a listener another fabric shares (`--transport auto` keeps one
    /// listening address and decides the transport after the rendezvous).
    pub(crate) fn from_listener(listener: TcpListener) -> io::Result<TcpFabric> {
        let address = listener.local_addr()?.to_string();
        Ok(TcpFabric { listener, address })
    }
}

impl Fabric for TcpFabric {
    fn transport(&self) -> &'static str {
        "tcp"
    }
    fn address(&self) -> String {
        self.address.clone()
    }
    fn open(&self, req: &LinkRequest) -> Result<OpenLinks, TransportError> {
        let name = |r: u32| peer_name(req.table, r);
        let rank_ip = |r: u32| {
            req.table
                .iter()
                .find(|i| i.rank == r)
                .and_then(|i| i.address.parse::<SocketAddr>().ok())
                .map(|a| a.ip())
        };
        let spec = AcceptSpec {
            token: req.token,
            me: req.me,
            expect: req.recvs,
            slots: req.slots,
            slot_bytes: req.slot_bytes,
            deadline: req.deadline,
            timeout: req.timeout,
            peer_name: &name,
            rank_ip: &rank_ip,
        };
        let (sends, accepted) = thread::scope(|sc| {
            let acc = sc.spawn(|| accept(&self.listener, &spec));
            let sends = send_links(req);
            (sends, acc.join())
        });
        let (got, rejected) = match accepted {
            Ok(Ok(x)) => x,
            Ok(Err((e, _))) => return Err(e),
            Err(_) => {
                return Err(TransportError::Setup {
                    peer: "-".into(),
                    what: "accepting".into(),
                    error: "panicked".into(),
                });
            }
        };
        let sends = sends?;
        let recvs = recv_links(req, got)?;
        Ok(OpenLinks {
            sends,
            recvs,
            rejected,
        })
    }
}

/// Connect this rank's sending links of `req` (each to its peer's data address).
fn send_links(req: &LinkRequest) -> Result<Vec<Box<dyn SendLink>>, TransportError> {
    let name = |r: u32| peer_name(req.table, r);
    req.sends
        .iter()
        .map(|&(peer, tag)| {
            let addr = req
                .table
                .iter()
                .find(|i| i.rank == peer)
                .map(|i| i.address.clone())
                .ok_or_else(|| TransportError::Setup {
                    peer: name(peer),
                    what: "finding the data address".into(),
                    error: "not in the table".into(),
                })?;
            let hs = Handshake {
                token: req.token.to_string(),
                from_rank: req.me,
                to_rank: peer,
                channel: tag,
            };
            connect(&addr, &name(peer), &hs, req.deadline, req.timeout)
                .map(|s| Box::new(s) as Box<dyn SendLink>)
        })
        .collect()
}

/// The receiving links of `req`, in its order, from the connections accepted (`got`).
fn recv_links(req: &LinkRequest, got: Vec<Accepted>) -> Result<Vec<Box<dyn RecvLink>>, TransportError> {
    let mut got: Vec<Option<Accepted>> = got.into_iter().map(Some).collect();
    let mut recvs: Vec<Box<dyn RecvLink>> = Vec::new();
    for &(peer, tag) in req.recvs {
        let a = got
            .iter_mut()
            .find(|a| {
                a.as_ref()
                    .is_some_and(|a| a.handshake.from_rank == peer && a.handshake.channel == tag)
            })
            .and_then(Option::take)
            .ok_or_else(|| TransportError::Setup {
                peer: peer_name(req.table, peer),
                what: "accepting".into(),
                error: format!("link {tag} missing after accept"),
            })?;
        recvs.push(Box::new(a.link));
    }
    Ok(recvs)
}

/// Connect to `a` within `limit`, refusing a connection that reached itself: while nothing
/// listens on a local port in the ephemeral range, the kernel may pick that very port as the
/// source and complete a TCP simultaneous open with itself, which then holds the port the
/// peer is about to bind (its "Address already in use"). Callers retry until their deadline.
pub(crate) fn connect_not_self(a: &SocketAddr, limit: Duration) -> io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(a, limit)?;
    if reached_itself(&s) {
        return Err(io::Error::new(
            io::ErrorKind::ConnectionRefused,
            format!("nothing listens on {a} yet (the connection reached itself)"),
        ));
    }
    Ok(s)
}

fn reached_itself(s: &TcpStream) -> bool {
    matches!((s.local_addr(), s.peer_addr()), (Ok(l), Ok(p)) if l == p)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket bound to a port and connected to that same port is a TCP simultaneous open
    /// with itself: what `connect_not_self` refuses. A real listener's connection is kept.
    #[test]
    fn a_connection_that_reached_itself_is_refused() {
        let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        sock.set_reuse_address(true).unwrap();
        sock.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
            .unwrap();
        let me = sock.local_addr().unwrap();
        sock.connect_timeout(&me, Duration::from_secs(2)).unwrap();
        let own: TcpStream = sock.into();
        assert!(reached_itself(&own));
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let other = connect_not_self(&l.local_addr().unwrap(), Duration::from_secs(2)).unwrap();
        assert!(!reached_itself(&other));
    }
    use crate::ring::collective::transport::accept::token_eq;
    use crate::ring::collective::transport::conformance::{Pair, conformance_suite};
    use std::net::IpAddr;

    /// What rank 1 expects in these tests: token `t`, every source taken as the rank's own.
    fn spec<'a>(
        expect: &'a [(u32, u32)],
        slots: usize,
        slot_bytes: usize,
        deadline: Instant,
    ) -> AcceptSpec<'a> {
        AcceptSpec {
            token: "t",
            me: 1,
            expect,
            slots,
            slot_bytes,
            deadline,
            timeout: Duration::from_secs(5),
            peer_name: &|r| format!("rank {r}"),
            rank_ip: &|_| None,
        }
    }

    fn pair(slots: usize, slot_bytes: usize) -> Pair {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let deadline = Instant::now() + Duration::from_secs(5);
        let hs = Handshake {
            token: "t".into(),
            from_rank: 0,
            to_rank: 1,
            channel: 0,
        };
        let t =
            thread::spawn(move || connect(&addr, "rank 1", &hs, deadline, Duration::from_secs(5)).unwrap());
        let (mut got, rej) = accept(&l, &spec(&[(0, 0)], slots, slot_bytes, deadline))
            .map_err(|(e, _)| e)
            .unwrap();
        assert!(rej.is_empty());
        let s = t.join().unwrap();
        (Box::new(s), Box::new(got.remove(0).link))
    }

    conformance_suite!(pair);

    #[test]
    fn handshake_refuses_wrong_token_and_garbage() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let deadline = Instant::now() + Duration::from_secs(5);
        let a2 = addr.clone();
        let t = thread::spawn(move || {
            let mut g = TcpStream::connect(&a2).unwrap();
            g.write_all(b"\x16\x03\x01garbage-tls-hello").unwrap();
            let bad = Handshake {
                token: "x".into(),
                from_rank: 0,
                to_rank: 1,
                channel: 0,
            };
            let e = connect(&a2, "rank 1", &bad, deadline, Duration::from_secs(5))
                .err()
                .unwrap();
            let good = Handshake {
                token: "t".into(),
                from_rank: 0,
                to_rank: 1,
                channel: 0,
            };
            let s = connect(&a2, "rank 1", &good, deadline, Duration::from_secs(5)).unwrap();
            (e, s)
        });
        let (got, rej) = accept(&l, &spec(&[(0, 0)], 2, 64, deadline))
            .map_err(|(e, _)| e)
            .unwrap();
        let (e, _s) = t.join().unwrap();
        assert_eq!(got.len(), 1);
        assert!(e.to_string().contains("wrong token"), "{e}");
        // Both refusals came from one address: one line names it, counts and says why.
        assert_eq!(rej.len(), 1, "{rej:?}");
        assert!(
            rej[0].starts_with("data link from 127.0.0.1: 2 connections refused"),
            "{rej:?}"
        );
        assert!(
            rej[0].contains("bad magic") && rej[0].contains("wrong token"),
            "{rej:?}"
        );
    }

    #[test]
    fn missing_link_names_the_peer() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let deadline = Instant::now() + Duration::from_millis(200);
        let e = accept(
            &l,
            &AcceptSpec {
                peer_name: &|r| format!("rank {r} (node-a)"),
                ..spec(&[(0, 3)], 2, 64, deadline)
            },
        )
        .err()
        .unwrap()
        .0;
        assert!(e.to_string().contains("rank 0 (node-a) channel 3"), "{e}");
    }

    #[test]
    fn fabric_opens_links_in_request_order_by_tag() {
        use crate::ring::collective::transport::{Fabric, LinkRequest};
        use crate::ring::model::RankInfo;
        let fabs: Vec<TcpFabric> = (0..2)
            .map(|_| TcpFabric::bind([127, 0, 0, 1].into()).unwrap())
            .collect();
        let table: Vec<RankInfo> = fabs
            .iter()
            .enumerate()
            .map(|(r, f)| RankInfo {
                neighbor: None,
                port_max: None,
                rails: Vec::new(),
                node: None,
                capabilities: Vec::new(),
                rank: r as u32,
                host: "h".into(),
                address: f.address(),
                device: None,
                transport: f.transport().into(),
                pid: None,
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(5);
        let req = |me: u32, sends: &'static [(u32, u32)], recvs: &'static [(u32, u32)]| LinkRequest {
            me,
            token: "t",
            table: &table,
            shared_transport: None,
            sends,
            recvs,
            slots: 2,
            slot_bytes: 64,
            deadline,
            timeout: Duration::from_secs(5),
        };
        let (a, b) = thread::scope(|sc| {
            let a = sc.spawn(|| {
                fabs[0]
                    .open(&req(0, &[(1, 0), (1, 100)], &[]))
                    .map_err(|e| e.to_string())
                    .unwrap()
            });
            let b = sc.spawn(|| {
                fabs[1]
                    .open(&req(1, &[], &[(0, 100), (0, 0)]))
                    .map_err(|e| e.to_string())
                    .unwrap()
            });
            (a.join().unwrap(), b.join().unwrap())
        });
        let (mut sends, mut recvs) = (a.sends, b.recvs);
        for (i, s) in sends.iter_mut().enumerate() {
            let slot = s.acquire(deadline).unwrap();
            s.write_imm(slot, &[i as u8], i as u32).unwrap();
        }
        // recvs[0] is tag 100 = sends[1]; recvs[1] is tag 0 = sends[0].
        assert_eq!(recvs[0].poll(deadline).unwrap().imm, 1);
        assert_eq!(recvs[1].poll(deadline).unwrap().imm, 0);
    }

    /// A client that sends a valid start and then one byte every `every` until `until`.
    fn dripper(addr: SocketAddr, every: Duration, until: Instant) -> thread::JoinHandle<()> {
        thread::spawn(move || {
            let Ok(mut c) = TcpStream::connect(addr) else {
                return;
            };
            let _ = c.write_all(b"FPH1");
            let mut frame = 60u32.to_be_bytes().to_vec();
            frame.extend_from_slice(&[b' '; 60]);
            for b in frame {
                if Instant::now() >= until || c.write_all(&[b]).is_err() {
                    return;
                }
                thread::sleep(every);
            }
        })
    }

    #[test]
    fn slow_drip_and_idle_connections_cannot_hold_the_real_peer_out() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t0 = Instant::now();
        let deadline = t0 + Duration::from_secs(4);
        let drip = dripper(addr, Duration::from_millis(300), deadline);
        thread::sleep(Duration::from_millis(50));
        let idle: Vec<TcpStream> = (0..50).map(|_| TcpStream::connect(addr).unwrap()).collect();
        let real = thread::spawn(move || {
            thread::sleep(Duration::from_millis(100));
            let hs = Handshake {
                token: "t".into(),
                from_rank: 0,
                to_rank: 1,
                channel: 0,
            };
            connect(&addr.to_string(), "rank 1", &hs, deadline, Duration::from_secs(5))
        });
        let (got, _rej) = accept(&l, &spec(&[(0, 0)], 2, 64, deadline))
            .map_err(|(e, rej)| format!("{e} {rej:?}"))
            .unwrap();
        assert_eq!(got.len(), 1);
        assert!(t0.elapsed() < Duration::from_millis(1500), "{:?}", t0.elapsed());
        assert!(real.join().unwrap().is_ok());
        drop(idle);
        drip.join().unwrap();
    }

    #[test]
    fn a_drip_ends_at_the_deadline_and_is_named_by_its_address() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t0 = Instant::now();
        let deadline = t0 + Duration::from_millis(1200);
        let drip = dripper(addr, Duration::from_millis(200), t0 + Duration::from_secs(8));
        let (e, rej) = accept(&l, &spec(&[(0, 0)], 2, 64, deadline)).err().unwrap();
        let took = t0.elapsed();
        assert!(
            took < Duration::from_millis(1700),
            "held {took:?} past a 1.2 s deadline"
        );
        let e = e.to_string();
        assert!(
            e.contains("rank 0 channel 0") && e.contains("1 foreign connection(s) refused (127.0.0.1: 1)"),
            "{e}"
        );
        assert_eq!(rej.len(), 1, "{rej:?}");
        assert!(
            rej[0].contains("127.0.0.1: 1 connection refused: no whole handshake"),
            "{rej:?}"
        );
        drip.join().unwrap();
    }

    /// A connection to `dst` from the local address `src` (loopback has all of 127/8).
    fn connect_from(src: IpAddr, dst: SocketAddr) -> TcpStream {
        use socket2::{Domain, Socket, Type};
        let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        s.bind(&SocketAddr::new(src, 0).into()).unwrap();
        s.connect(&dst.into()).unwrap();
        s.into()
    }

    fn raw_handshake(s: &mut TcpStream, token: &str, from: u32, channel: u32) -> Result<Reply, String> {
        let hs = Handshake {
            token: token.into(),
            from_rank: from,
            to_rank: 1,
            channel,
        };
        write_frame(s, &hs).unwrap();
        read_frame_by(s, Instant::now() + Duration::from_secs(3))
    }

    #[test]
    fn a_fake_claim_from_a_foreign_address_never_locks_out_the_real_peer() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let rank_ip = |r: u32| (r == 0).then_some(IpAddr::from([127, 0, 0, 1]));
        for fake_first in [true, false] {
            let deadline = Instant::now() + Duration::from_secs(4);
            // Each step waits for its reply, so the order is fixed: the fake claims channel
            // 0 before or after the real rank, and the real rank's channel 1 comes last.
            let t = thread::spawn(move || {
                let fake = || {
                    let mut f = connect_from([127, 0, 0, 2].into(), addr);
                    (raw_handshake(&mut f, "t", 0, 0), f)
                };
                let real = |channel| {
                    let hs = Handshake {
                        token: "t".into(),
                        from_rank: 0,
                        to_rank: 1,
                        channel,
                    };
                    connect(&addr.to_string(), "rank 1", &hs, deadline, Duration::from_secs(5))
                        .map_err(|e| e.to_string())
                        .unwrap()
                };
                let early = fake_first.then(fake);
                let mut r0 = real(0);
                let late = (!fake_first).then(fake);
                let r1 = real(1);
                let slot = r0.acquire(deadline).unwrap();
                r0.write_imm(slot, &[7; 4], 42).unwrap();
                (early.or(late).unwrap(), r0, r1)
            });
            let (mut got, rej) = accept(
                &l,
                &AcceptSpec {
                    rank_ip: &rank_ip,
                    ..spec(&[(0, 0), (0, 1)], 2, 64, deadline)
                },
            )
            .map_err(|(e, rej)| format!("{e} {rej:?}"))
            .unwrap();
            let ((fake_reply, _f), _r0, _r1) = t.join().unwrap();
            // The link kept for channel 0 is the real sender's: its chunk arrives on it.
            assert_eq!(got.len(), 2);
            let c0 = got.iter_mut().find(|a| a.handshake.channel == 0).unwrap();
            assert_eq!(c0.link.poll(deadline).unwrap().imm, 42);
            // The fake is named by its address, never the real peer.
            assert_eq!(rej.len(), 1, "{rej:?}");
            assert!(
                rej[0].starts_with("data link from 127.0.0.2: 1 connection refused"),
                "{rej:?}"
            );
            let r = fake_reply.unwrap();
            if fake_first {
                // Taken for a while, then replaced by the rank's own connection.
                assert!(r.ok, "{r:?}");
                assert!(
                    rej[0].contains("replaced by the connection from rank 0's data address"),
                    "{rej:?}"
                );
            } else {
                assert!(!r.ok && r.reason.contains("duplicate"), "{r:?}");
                assert!(rej[0].contains("not from rank 0's data address"), "{rej:?}");
            }
        }
    }

    #[test]
    fn reply_slots_are_bounded_and_named() {
        for (slots, slot_bytes) in [(u32::MAX, 64u64), (0, 64), (4, 0), (4, u64::MAX)] {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap().to_string();
            let t = thread::spawn(move || {
                let (mut s, _) = l.accept().unwrap();
                let _: Handshake = read_frame_by(&mut s, Instant::now() + Duration::from_secs(3)).unwrap();
                write_frame(
                    &mut s,
                    &Reply {
                        ok: true,
                        reason: String::new(),
                        slots,
                        slot_bytes,
                    },
                )
                .unwrap();
                s
            });
            let hs = Handshake {
                token: "t".into(),
                from_rank: 0,
                to_rank: 1,
                channel: 0,
            };
            let deadline = Instant::now() + Duration::from_secs(3);
            let e = connect(&addr, "rank 1 (node-b)", &hs, deadline, Duration::from_secs(3))
                .err()
                .unwrap_or_else(|| panic!("{slots} slots of {slot_bytes} taken"))
                .to_string();
            assert!(
                e.contains("rank 1 (node-b)") && e.contains(&format!("offers {slots} slots")),
                "{e}"
            );
            t.join().unwrap();
        }
    }

    #[test]
    fn closing_many_links_lingers_once_not_per_link() {
        // Receivers that never close: each sender lingers for its credits.
        let pairs: Vec<Pair> = (0..6).map(|_| pair(2, 64)).collect();
        let (mut sends, recvs): (Vec<_>, Vec<_>) = pairs.into_iter().unzip();
        let deadline = Instant::now() + Duration::from_secs(2);
        for s in &mut sends {
            let slot = s.acquire(deadline).unwrap();
            s.write_imm(slot, &[9; 64], 5).unwrap();
        }
        let t0 = Instant::now();
        drop(sends);
        let dropped = t0.elapsed();
        wait_closed(t0 + Duration::from_secs(5));
        let took = t0.elapsed();
        assert!(dropped < Duration::from_millis(100), "drop blocked {dropped:?}");
        assert!(
            took < CLOSE_LINGER + Duration::from_millis(400),
            "closing took {took:?}"
        );
        // What was sent before the close still lands.
        for mut r in recvs {
            assert_eq!(r.poll(deadline).unwrap().imm, 5);
        }
    }

    #[test]
    fn token_eq_is_exact() {
        assert!(token_eq("abc", "abc"));
        assert!(!token_eq("abc", "abd") && !token_eq("abc", "ab") && !token_eq("", "a"));
    }

    #[test]
    fn out_of_file_descriptors_backs_off_and_says_so() {
        // The descriptor limit is per process: the work runs in a child copy of this binary.
        if std::env::var_os("FABPROBE_EMFILE_CHILD").is_none() {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "ring::collective::transport::tcp::tests::out_of_file_descriptors_backs_off_and_says_so",
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("FABPROBE_EMFILE_CHILD", "1")
                .output()
                .unwrap();
            let text =
                String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success() && text.contains("1 passed"), "{text}");
            return;
        }
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        use nix::sys::resource::{Resource, UsageWho, getrlimit, getrusage, setrlimit};
        let open_now = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        setrlimit(Resource::RLIMIT_NOFILE, open_now + 8, hard).unwrap();
        // Connect until no descriptor is left: the server ends wait in the listen queue and
        // every accept fails with EMFILE.
        let mut clients = Vec::new();
        while let Ok(c) = TcpStream::connect(addr) {
            clients.push(c);
        }
        assert!(!clients.is_empty());
        // One descriptor for the accept's poller; the queued connections still cannot be
        // taken (the closed one included: accepting it needs a descriptor too).
        clients.pop();
        let cpu = || {
            let u = getrusage(UsageWho::RUSAGE_THREAD).unwrap();
            let t = |v: nix::sys::time::TimeVal| v.tv_sec() as f64 + v.tv_usec() as f64 / 1e6;
            t(u.user_time()) + t(u.system_time())
        };
        let c0 = cpu();
        let t0 = Instant::now();
        let (e, rej) = accept(&l, &spec(&[(0, 0)], 2, 64, t0 + Duration::from_millis(1500)))
            .err()
            .unwrap();
        let used = cpu() - c0;
        assert!(used < 0.1, "spun: {used:.3} s of CPU in {:?}", t0.elapsed());
        let e = e.to_string();
        assert!(
            e.contains("Too many open files") && e.contains("ulimit -n"),
            "{e}"
        );
        assert!(rej.iter().any(|r| r.contains("Too many open files")), "{rej:?}");
    }
}
