//! The TCP transport: one connection per directed link and channel. The sender writes a
//! 16-byte header (magic, slot, length, immediate) and the chunk with one vectored write;
//! the receiver's own thread reads the chunk straight into the named slot (no extra copy)
//! and queues the completion; credits (4-byte slot ids) flow back on the same connection.
//! Large socket buffers and TCP_NODELAY; a short JSON handshake checks the job token and
//! hands the sender the receiver's slot count and size (as an RDMA rkey exchange would).

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{
    Completion, Fabric, LinkRequest, OpenLinks, RecvLink, SendLink, TransportError, peer_name, slot_buffer,
    words_as_bytes, words_as_bytes_mut,
};

const DATA_MAGIC: u32 = 0x4650_4431; // "FPD1"
const HS_MAGIC: &[u8; 4] = b"FPH1";
const MAX_HANDSHAKE: usize = 4096;
/// Socket buffer size asked for (the kernel caps it at net.core.{w,r}mem_max and doubles it).
pub const SOCKET_BUFFER: usize = 4 << 20;

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
    let fd = s.as_raw_fd();
    let v = SOCKET_BUFFER as libc::c_int;
    for opt in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
        // SAFETY: a valid fd and a c_int option value of the right size.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
    let _ = s.set_nodelay(true);
}

pub(crate) fn write_frame(s: &mut TcpStream, body: &impl Serialize) -> io::Result<()> {
    let b = serde_json::to_vec(body).map_err(io::Error::other)?;
    let mut f = HS_MAGIC.to_vec();
    f.extend_from_slice(&(b.len() as u32).to_be_bytes());
    f.extend_from_slice(&b);
    s.write_all(&f)
}

pub(crate) fn read_frame<T: for<'de> Deserialize<'de>>(s: &mut TcpStream) -> Result<T, String> {
    let mut head = [0u8; 8];
    s.read_exact(&mut head).map_err(|e| e.to_string())?;
    if &head[..4] != HS_MAGIC {
        return Err(format!(
            "not a fabprobe data link (bad magic {:02x?})",
            &head[..4]
        ));
    }
    let len = u32::from_be_bytes([head[4], head[5], head[6], head[7]]) as usize;
    if len > MAX_HANDSHAKE {
        return Err(format!("handshake of {len} bytes exceeds {MAX_HANDSHAKE}"));
    }
    let mut b = vec![0u8; len];
    s.read_exact(&mut b).map_err(|e| e.to_string())?;
    serde_json::from_slice(&b).map_err(|e| format!("malformed handshake: {e}"))
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

pub struct TcpSend {
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
pub fn connect(
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
            match TcpStream::connect_timeout(a, left) {
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
    let reply: Reply = read_frame(&mut s).map_err(|e| setup("reading the link handshake", e))?;
    if !reply.ok {
        return Err(setup("the receiver refused the link", reply.reason));
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
        // drain credits until the receiver closes (bounded, so a stuck peer can't hold us).
        let _ = self.stream.shutdown(Shutdown::Write);
        let until = Instant::now() + Duration::from_millis(500);
        let _ = self.stream.set_nonblocking(false);
        let _ = self.stream.set_read_timeout(Some(Duration::from_millis(100)));
        let mut sink = [0u8; 4096];
        while Instant::now() < until {
            match self.stream.read(&mut sink) {
                Ok(0) => break,
                Ok(_) => continue,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    continue;
                }
                Err(_) => break,
            }
        }
        let _ = self.stream.shutdown(Shutdown::Both);
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

pub struct TcpRecv {
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
pub type AcceptResult = Result<(Vec<Accepted>, Vec<String>), (TransportError, Vec<String>)>;

/// One accepted link and who it came from.
pub struct Accepted {
    pub handshake: Handshake,
    pub link: TcpRecv,
}

/// Accept exactly the links in `expect` (`(from_rank, channel)`) on `listener` until
/// `deadline`; everything else (wrong token, unexpected rank, garbage) is refused and
/// returned as a rejection line. `peer_name` names a rank for errors.
#[allow(clippy::too_many_arguments)]
pub fn accept(
    listener: &TcpListener,
    token: &str,
    to_rank: u32,
    expect: &[(u32, u32)],
    slots: usize,
    slot_bytes: usize,
    deadline: Instant,
    timeout: Duration,
    peer_name: &dyn Fn(u32) -> String,
) -> AcceptResult {
    let mut got: Vec<Accepted> = Vec::new();
    let mut rejected = Vec::new();
    if let Err(e) = listener.set_nonblocking(true) {
        return Err((
            TransportError::Setup {
                peer: "data listener".into(),
                what: "listening".into(),
                error: e.to_string(),
            },
            rejected,
        ));
    }
    while got.len() < expect.len() {
        if Instant::now() >= deadline {
            let missing: Vec<String> = expect
                .iter()
                .filter(|(f, c)| {
                    !got.iter()
                        .any(|a| a.handshake.from_rank == *f && a.handshake.channel == *c)
                })
                .map(|(f, c)| format!("{} channel {c}", peer_name(*f)))
                .collect();
            return Err((
                TransportError::Setup {
                    peer: missing.join(", "),
                    what: "waiting for the data link".into(),
                    error: format!(
                        "not connected within {} s (firewall on the data interface?)",
                        timeout.as_secs()
                    ),
                },
                rejected,
            ));
        }
        let (mut s, addr) = match listener.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(2));
                continue;
            }
            Err(_) => continue,
        };
        let _ = s.set_nonblocking(false);
        set_buffers(&s);
        let left = deadline
            .saturating_duration_since(Instant::now())
            .clamp(Duration::from_millis(10), Duration::from_secs(5));
        let _ = s.set_read_timeout(Some(left));
        let _ = s.set_write_timeout(Some(left));
        let hs: Handshake = match read_frame(&mut s) {
            Ok(h) => h,
            Err(e) => {
                rejected.push(format!("data link from {addr}: {e}"));
                continue;
            }
        };
        let refuse = |s: &mut TcpStream, reason: String| {
            let _ = write_frame(
                s,
                &Reply {
                    ok: false,
                    reason,
                    slots: 0,
                    slot_bytes: 0,
                },
            );
        };
        let reason = if hs.token != token {
            Some("wrong token".to_string())
        } else if hs.to_rank != to_rank || !expect.contains(&(hs.from_rank, hs.channel)) {
            Some(format!(
                "unexpected link rank {} -> rank {} channel {}",
                hs.from_rank, hs.to_rank, hs.channel
            ))
        } else if got
            .iter()
            .any(|a| a.handshake.from_rank == hs.from_rank && a.handshake.channel == hs.channel)
        {
            Some(format!(
                "duplicate link from rank {} channel {}",
                hs.from_rank, hs.channel
            ))
        } else {
            None
        };
        if let Some(r) = reason {
            rejected.push(format!("data link from {addr}: {r}"));
            refuse(&mut s, r);
            continue;
        }
        if let Err(e) = write_frame(
            &mut s,
            &Reply {
                ok: true,
                reason: String::new(),
                slots: slots as u32,
                slot_bytes: slot_bytes as u64,
            },
        ) {
            rejected.push(format!("data link from {addr}: {e}"));
            continue;
        }
        let _ = s.set_write_timeout(Some(timeout));
        let name = peer_name(hs.from_rank);
        match make_recv(s, name, slots, slot_bytes) {
            Ok(link) => got.push(Accepted { handshake: hs, link }),
            Err(e) => rejected.push(format!("data link from {addr}: {e}")),
        }
    }
    let _ = listener.set_nonblocking(false);
    Ok((got, rejected))
}

/// The TCP fabric: one listening socket on the data interface.
pub struct TcpFabric {
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
    pub fn from_listener(listener: TcpListener) -> io::Result<TcpFabric> {
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
        let (sends, accepted) = thread::scope(|sc| {
            let acc = sc.spawn(|| {
                accept(
                    &self.listener,
                    req.token,
                    req.me,
                    req.recvs,
                    req.slots,
                    req.slot_bytes,
                    req.deadline,
                    req.timeout,
                    &name,
                )
            });
            let sends: Result<Vec<Box<dyn SendLink>>, TransportError> = req
                .sends
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
                .collect();
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
                    peer: name(peer),
                    what: "accepting".into(),
                    error: format!("link {tag} missing after accept"),
                })?;
            recvs.push(Box::new(a.link));
        }
        Ok(OpenLinks {
            sends,
            recvs,
            rejected,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::collective::transport::conformance::{Pair, conformance_suite};

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
        let (mut got, rej) = accept(
            &l,
            "t",
            1,
            &[(0, 0)],
            slots,
            slot_bytes,
            deadline,
            Duration::from_secs(5),
            &|r| format!("rank {r}"),
        )
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
        let (got, rej) = accept(
            &l,
            "t",
            1,
            &[(0, 0)],
            2,
            64,
            deadline,
            Duration::from_secs(5),
            &|r| format!("rank {r}"),
        )
        .map_err(|(e, _)| e)
        .unwrap();
        let (e, _s) = t.join().unwrap();
        assert_eq!(got.len(), 1);
        assert!(e.to_string().contains("wrong token"), "{e}");
        assert_eq!(rej.len(), 2, "{rej:?}");
        assert!(rej[0].contains("bad magic"), "{rej:?}");
        assert!(rej[1].contains("wrong token"), "{rej:?}");
    }

    #[test]
    fn missing_link_names_the_peer() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let deadline = Instant::now() + Duration::from_millis(200);
        let e = accept(
            &l,
            "t",
            1,
            &[(0, 3)],
            2,
            64,
            deadline,
            Duration::from_secs(1),
            &|r| format!("rank {r} (node-a)"),
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
}
