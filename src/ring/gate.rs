//! The coordinator's door: accepts connections on its port and reads each one's hello with a
//! total deadline, all on one thread (`mio` over nonblocking sockets), so that a flood of
//! idle, slow or garbage connections costs neither threads nor a real rank its place. When too
//! many connections wait, the oldest waiting ones are turned away (per source address first,
//! then overall): a real rank says hello within milliseconds of connecting, so it is never the
//! oldest, and if it is turned away anyway the reason starts with [`BUSY`], which tells it to
//! connect again (see `rendezvous::join`).

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

use crate::ring::wire::{self, Hello, MAGIC, Msg, WireError};

/// Reasons that start with this are transient: the rank connects again until its deadline.
pub const BUSY: &str = "busy: ";

/// How the door bounds what strangers can hold.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// From accept to a complete hello, in total (not per read).
    pub hello_deadline: Duration,
    /// Connections waiting to say hello, from all sources.
    pub max_pending: usize,
    /// Connections waiting to say hello from one source address.
    pub max_per_source: usize,
    /// Largest hello frame body (a hello is a few hundred bytes).
    pub max_hello_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            hello_deadline: Duration::from_secs(5),
            max_pending: 1024,
            max_per_source: 128,
            max_hello_bytes: 64 << 10,
        }
    }
}

/// A connection that finished its hello (or failed to), for the coordinator to judge. The
/// stream is nonblocking: set it back before blocking use.
pub(crate) type Incoming = (TcpStream, SocketAddr, Result<Hello, WireError>);

struct Pending {
    s: TcpStream,
    peer: SocketAddr,
    since: Instant,
    buf: Vec<u8>,
}

/// Raise this process's soft open-file limit to its hard limit: the coordinator holds one
/// descriptor per rank and the pending hellos. Returns the limit now in force (1024 when it
/// cannot be read).
pub fn raise_fd_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1024;
    };
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return hard;
    }
    soft
}

/// Where a partly read hello stands. Pure.
fn progress(buf: &[u8], max_body: usize) -> Option<Result<Msg, WireError>> {
    let n = buf.len().min(4);
    if buf[..n] != MAGIC[..n] {
        let mut m = [0u8; 4];
        m[..n].copy_from_slice(&buf[..n]);
        return Some(Err(WireError::BadMagic(m)));
    }
    if buf.len() < 8 {
        return None;
    }
    let len = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]) as usize;
    if len > max_body {
        return Some(Err(WireError::TooLarge(len)));
    }
    if buf.len() < 8 + len {
        return None;
    }
    Some(wire::decode(&buf[8..8 + len]))
}

/// A hello's body as a relay handed it over: bounded as the door bounds it, decoded. Pure.
pub(crate) fn hello_of(body: &[u8]) -> Result<Hello, WireError> {
    if body.len() > Limits::default().max_hello_bytes {
        return Err(WireError::TooLarge(body.len()));
    }
    as_hello(wire::decode(body))
}

fn as_hello(m: Result<Msg, WireError>) -> Result<Hello, WireError> {
    match m? {
        Msg::Hello(h) => Ok(*h),
        other => Err(WireError::Malformed(format!(
            "expected hello, got {}",
            other.kind()
        ))),
    }
}

/// Best effort, never blocks: a refused stranger may not be reading.
pub(crate) fn reject_now(s: &TcpStream, reason: &str) {
    let _ = s.set_nonblocking(true);
    let mut w = s;
    let mut frame = Vec::new();
    if wire::write_msg(
        &mut frame,
        &Msg::Reject {
            reason: reason.into(),
        },
    )
    .is_ok()
    {
        let _ = w.write(&frame);
    }
}

/// Read what a waiting connection has sent (never blocks, never past the hello frame); its
/// outcome once the hello is complete, malformed, or the connection ended.
fn pump(p: &mut Pending, lim: &Limits) -> Option<Result<Hello, WireError>> {
    let mut chunk = [0u8; 4096];
    loop {
        let want = if p.buf.len() < 8 {
            8 - p.buf.len()
        } else {
            let len = u32::from_be_bytes([p.buf[4], p.buf[5], p.buf[6], p.buf[7]]) as usize;
            (8 + len).saturating_sub(p.buf.len())
        };
        let want = want.min(chunk.len());
        if want == 0 {
            return None;
        }
        match p.s.read(&mut chunk[..want]) {
            Ok(0) => return Some(Err(WireError::Closed)),
            Ok(k) => {
                p.buf.extend_from_slice(&chunk[..k]);
                if let Some(r) = progress(&p.buf, lim.max_hello_bytes) {
                    return Some(as_hello(r));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Some(Err(e.into())),
        }
    }
}

const LISTENER: Token = Token(usize::MAX);
/// Connections taken off the listener before the waiting ones are read again.
const ACCEPT_BATCH: usize = 256;

/// Accept and read hellos until `stop`; finished ones go to `tx`, and `wake` (the
/// coordinator's event loop) is told.
pub(crate) fn run(
    listener: TcpListener,
    tx: Sender<Incoming>,
    wake: Option<Arc<mio::Waker>>,
    stop: Arc<AtomicBool>,
    gathering: Arc<AtomicBool>,
    lim: Limits,
) {
    let Ok(mut poll) = Poll::new() else { return };
    if listener.set_nonblocking(true).is_err()
        || poll
            .registry()
            .register(&mut SourceFd(&listener.as_raw_fd()), LISTENER, Interest::READABLE)
            .is_err()
    {
        return;
    }
    let mut events = Events::with_capacity(256);
    let mut door = Door {
        pending: BTreeMap::new(),
        per_source: HashMap::new(),
        next_id: 0,
        lim,
        tx,
        wake,
    };
    // Edge-triggered: the listener is tried again until it would block (or after a pause
    // when out of descriptors), not only when a new event comes.
    let mut accept_again: Option<Instant> = None;
    while !stop.load(Ordering::Relaxed) {
        // During the run only latecomers come: a slower tick is enough to turn them away.
        let tick = Duration::from_millis(if gathering.load(Ordering::Relaxed) {
            20
        } else {
            100
        });
        let now = Instant::now();
        let wait = match accept_again {
            Some(t) => t.saturating_duration_since(now).min(tick),
            None => tick,
        };
        if let Err(e) = poll.poll(&mut events, Some(wait))
            && e.kind() != io::ErrorKind::Interrupted
        {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        let mut ready: Vec<usize> = Vec::new();
        for ev in events.iter() {
            if ev.token() == LISTENER {
                accept_again.get_or_insert(Instant::now());
            } else {
                ready.push(ev.token().0);
            }
        }
        for id in ready {
            door.read(id, &poll);
        }
        door.expire(&poll);
        if accept_again.is_some_and(|t| t <= Instant::now()) {
            accept_again = door.accept(&listener, &poll);
        }
    }
}

/// The door's state: connections waiting to say hello, oldest first (ids only grow).
struct Door {
    pending: BTreeMap<usize, Pending>,
    per_source: HashMap<IpAddr, usize>,
    next_id: usize,
    lim: Limits,
    tx: Sender<Incoming>,
    wake: Option<Arc<mio::Waker>>,
}

impl Door {
    fn hand_over(&mut self, p: Pending, poll: &Poll, r: Result<Hello, WireError>) {
        let _ = poll.registry().deregister(&mut SourceFd(&p.s.as_raw_fd()));
        if let Some(c) = self.per_source.get_mut(&p.peer.ip()) {
            *c = c.saturating_sub(1);
        }
        let _ = self.tx.send((p.s, p.peer, r));
        if let Some(w) = &self.wake {
            let _ = w.wake();
        }
    }

    /// Read what connection `id` sent; hand it over once its hello is complete or failed.
    fn read(&mut self, id: usize, poll: &Poll) {
        let Some(p) = self.pending.get_mut(&id) else {
            return;
        };
        if let Some(v) = pump(p, &self.lim)
            && let Some(p) = self.pending.remove(&id)
        {
            self.hand_over(p, poll, v);
        }
    }

    /// Connections past the hello deadline are handed over as failed.
    fn expire(&mut self, poll: &Poll) {
        let now = Instant::now();
        let late: Vec<usize> = self
            .pending
            .iter()
            .filter(|(_, p)| now.duration_since(p.since) >= self.lim.hello_deadline)
            .map(|(&id, _)| id)
            .collect();
        for id in late {
            if let Some(p) = self.pending.remove(&id) {
                let why = format!(
                    "no complete hello within {} s ({} bytes received)",
                    self.lim.hello_deadline.as_secs_f64(),
                    p.buf.len()
                );
                self.hand_over(p, poll, Err(WireError::Malformed(why)));
            }
        }
    }

    /// Make room by turning away the oldest waiting connection that matches `which`; one
    /// whose hello turns out complete when read now is handed over instead (it was not idle,
    /// only not read yet) and the next oldest is tried.
    fn evict_oldest(&mut self, poll: &Poll, which: impl Fn(&Pending) -> bool, why: &str) {
        while let Some(id) = self.pending.iter().find(|(_, p)| which(p)).map(|(&id, _)| id) {
            let Some(mut p) = self.pending.remove(&id) else {
                return;
            };
            match pump(&mut p, &self.lim) {
                Some(r) => self.hand_over(p, poll, r),
                None => {
                    reject_now(&p.s, why);
                    self.hand_over(p, poll, Err(WireError::Malformed(why.to_string())));
                    return;
                }
            }
        }
    }

    /// Accept what waits (a batch); when to try the listener again: at once when the batch
    /// ran out, after a pause when out of descriptors, None when it would block.
    fn accept(&mut self, listener: &TcpListener, poll: &Poll) -> Option<Instant> {
        for _ in 0..ACCEPT_BATCH {
            match listener.accept() {
                Ok((s, peer)) => self.admit(s, peer, poll),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e)
                    if e.raw_os_error() == Some(libc::EMFILE) || e.raw_os_error() == Some(libc::ENFILE) =>
                {
                    // Out of descriptors: free the oldest waiting one, so that the next
                    // arrival (maybe a real rank) can be accepted; never spin.
                    if !self.pending.is_empty() {
                        let why = format!("{BUSY}the coordinator ran out of file descriptors");
                        self.evict_oldest(poll, |_| true, &why);
                    }
                    return Some(Instant::now() + Duration::from_millis(20));
                }
                Err(_) => return Some(Instant::now() + Duration::from_millis(20)),
            }
        }
        Some(Instant::now())
    }

    fn admit(&mut self, s: TcpStream, peer: SocketAddr, poll: &Poll) {
        // Listening on [::] shows IPv4 peers as ::ffff:a.b.c.d; print them as IPv4.
        let peer = SocketAddr::new(peer.ip().to_canonical(), peer.port());
        if s.set_nonblocking(true).is_err() {
            return;
        }
        let _ = s.set_nodelay(true);
        let ip = peer.ip();
        // One source over its share: its oldest waiting connection goes.
        if self.per_source.get(&ip).copied().unwrap_or(0) >= self.lim.max_per_source {
            let why = format!(
                "{BUSY}{} connections from {ip} were waiting to say hello; the oldest was closed",
                self.lim.max_per_source
            );
            self.evict_oldest(poll, |p| p.peer.ip() == ip, &why);
        }
        if self.pending.len() >= self.lim.max_pending {
            let why = format!(
                "{BUSY}{} connections were waiting to say hello; the oldest was closed",
                self.lim.max_pending
            );
            self.evict_oldest(poll, |_| true, &why);
        }
        let id = self.next_id;
        self.next_id += 1;
        if poll
            .registry()
            .register(&mut SourceFd(&s.as_raw_fd()), Token(id), Interest::READABLE)
            .is_err()
        {
            return;
        }
        *self.per_source.entry(ip).or_default() += 1;
        let mut p = Pending {
            s,
            peer,
            since: Instant::now(),
            buf: Vec::new(),
        };
        // The hello often came with the connection: read it now (edge-triggered).
        match pump(&mut p, &self.lim) {
            Some(r) => self.hand_over(p, poll, r),
            None => {
                self.pending.insert(id, p);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut f = MAGIC.to_vec();
        f.extend_from_slice(&(body.len() as u32).to_be_bytes());
        f.extend_from_slice(body);
        f
    }

    #[test]
    fn progress_table() {
        let ping = frame(br#"{"type":"ping"}"#);
        assert!(progress(b"FP", 100).is_none());
        assert!(matches!(
            progress(b"GE", 100),
            Some(Err(WireError::BadMagic([b'G', b'E', 0, 0])))
        ));
        assert!(progress(&ping[..9], 100).is_none());
        assert!(matches!(progress(&ping, 100), Some(Ok(Msg::Ping))));
        assert!(matches!(progress(&ping, 3), Some(Err(WireError::TooLarge(15)))));
        assert!(matches!(as_hello(Ok(Msg::Ping)), Err(WireError::Malformed(_))));
    }

    /// A door with a short deadline and small caps on a loopback port.
    fn door(lim: Limits) -> (SocketAddr, mpsc::Receiver<Incoming>, Arc<AtomicBool>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let (s2, g) = (stop.clone(), Arc::new(AtomicBool::new(true)));
        std::thread::spawn(move || run(l, tx, None, s2, g, lim));
        (addr, rx, stop)
    }

    /// A byte every 200 ms never trips a per-read timeout; the total deadline ends it.
    #[test]
    fn the_hello_deadline_is_total_not_per_read() {
        let (addr, rx, stop) = door(Limits {
            hello_deadline: Duration::from_millis(700),
            ..Limits::default()
        });
        let t0 = Instant::now();
        let drip = std::thread::spawn(move || {
            let mut c = TcpStream::connect(addr).unwrap();
            for b in b"FPR1\0\0\0\x10{\"type\":" {
                if c.write_all(&[*b]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        let (_, _, r) = rx.recv_timeout(Duration::from_secs(3)).unwrap();
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(650) && took < Duration::from_millis(1500),
            "{took:?}"
        );
        let e = r.err().unwrap().to_string();
        assert!(e.contains("no complete hello within 0.7 s"), "{e}");
        stop.store(true, Ordering::Relaxed);
        drip.join().unwrap();
    }

    /// One source over its share loses its oldest waiting connection, told it is busy; the
    /// newest (a real rank's) is read.
    #[test]
    fn a_flood_from_one_source_evicts_its_oldest_not_the_newcomer() {
        let (addr, rx, stop) = door(Limits {
            max_per_source: 8,
            max_pending: 12,
            ..Limits::default()
        });
        let idle: Vec<TcpStream> = (0..20).map(|_| TcpStream::connect(addr).unwrap()).collect();
        std::thread::sleep(Duration::from_millis(200));
        let mut rank = TcpStream::connect(addr).unwrap();
        rank.write_all(&frame(br#"{"type":"ping"}"#)).unwrap();
        let mut busy = 0;
        let got = loop {
            let (_, _, r) = rx.recv_timeout(Duration::from_secs(3)).unwrap();
            match r {
                Err(WireError::Malformed(m)) if m.starts_with(BUSY) => busy += 1,
                other => break other,
            }
        };
        // The newcomer's message was read (a ping, not a hello: judged, not dropped).
        assert!(
            matches!(got, Err(WireError::Malformed(ref m)) if m == "expected hello, got ping"),
            "{got:?}"
        );
        assert_eq!(busy, 13, "20 idle + 1 with 8 per source");
        // The evicted ones were told why, and closed.
        let mut first = &idle[0];
        first.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        match wire::read_msg(&mut first) {
            Ok(Msg::Reject { reason }) => assert!(reason.starts_with(BUSY), "{reason}"),
            other => panic!("{other:?}"),
        }
        stop.store(true, Ordering::Relaxed);
    }
}
