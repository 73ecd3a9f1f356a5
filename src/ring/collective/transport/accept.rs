//! Accepting a rank's incoming links: one implementation for the TCP data plane and the RDMA
//! endpoint exchange. One thread reads every connection's hello at once (nonblocking, `mio`),
//! each connection with one deadline for its whole hello, at most `MAX_PENDING` of them, and a
//! pause after `accept` fails (out of file descriptors) instead of a spin. What differs per
//! transport (the hello, its own checks, what taking a link means) is an [`Admit`].

use std::collections::BTreeMap;
use std::io::{self, Read};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use serde::de::DeserializeOwned;

use super::TransportError;
use super::tcp::{Decoded, decode_frame};

/// How long one connection has from accept to its whole hello: a deadline, not a limit per
/// read, so a client dripping a byte at a time is cut off when it passes.
pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(5);
/// Connections reading their hello at once; one more drops the oldest (a real rank sends
/// its hello as soon as it connects, so it is never the oldest for long).
pub const MAX_PENDING: usize = 128;
/// Connections taken off the listener in one pass before the pending ones are read again.
const ACCEPT_BATCH: usize = 32;
/// Pause before the listener is tried again after accept failed (out of file descriptors):
/// retrying at once would spin, since the connection stays queued.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// Once every link is in, how long a link that came from an address other than its rank's
/// data address waits for the rank's own connection to replace it.
pub const UNVERIFIED_GRACE: Duration = Duration::from_secs(2);
/// Foreign source addresses kept by name (more are counted), and reasons kept per address.
const MAX_SOURCES: usize = 64;
const MAX_REASONS: usize = 3;
const MAX_SOURCES_LISTED: usize = 8;
const LISTENER: Token = Token(usize::MAX);

/// What `accept` waits for: the links `expect` (`(from_rank, channel)`) to rank `me`.
pub struct AcceptSpec<'a> {
    pub token: &'a str,
    pub me: u32,
    pub expect: &'a [(u32, u32)],
    pub slots: usize,
    pub slot_bytes: usize,
    pub deadline: Instant,
    /// Every later blocking operation on the links is bounded by this.
    pub timeout: Duration,
    /// Names a rank for errors.
    pub peer_name: &'a (dyn Fn(u32) -> String + Sync),
    /// Where a rank listens for data (the rank table): a link that comes from that IP is
    /// the rank's own; None: unknown, every source is taken as the rank's.
    pub rank_ip: &'a (dyn Fn(u32) -> Option<IpAddr> + Sync),
}

/// The fields every transport's hello carries.
pub(crate) trait Hello: DeserializeOwned {
    fn token(&self) -> &str;
    fn sender(&self) -> u32;
    fn receiver(&self) -> u32;
    fn channel(&self) -> u32;
}

/// Why a transport turned a connection down.
pub enum Refused {
    /// Not this link (another version, a failed reply): refused and counted by address.
    Stray(String),
    /// A fault of the pair (mismatched ports, a local resource): ends the accept with
    /// `error` when the connection came from the rank's own address, else counted as stray.
    Fatal { reason: String, error: TransportError },
}

/// What one transport adds to the shared accept machinery.
pub(crate) trait Admit {
    type Hello: Hello;
    type Link;
    /// `data link`, `RDMA link`: how log lines and errors call a connection.
    fn label(&self) -> &'static str;
    /// Checks of the transport's own, after the token, the expected link and duplicates.
    fn check(&self, h: &Self::Hello) -> Result<(), Refused>;
    /// Answer a refused connection (a tiny frame into a fresh socket's buffer).
    fn refuse(&self, s: &mut TcpStream, reason: &str);
    /// Take the link: answer and build it. `s` is blocking, with a short write timeout.
    fn take(&self, s: TcpStream, h: &Self::Hello) -> Result<Self::Link, Refused>;
}

/// One accepted link and who it came from.
pub(crate) struct Accepted<H, L> {
    pub handshake: H,
    pub link: L,
}

/// The links accepted and the refusals (lines for the log), or the failure and the refusals.
pub(crate) type AcceptResult<H, L> = Result<(Vec<Accepted<H, L>>, Vec<String>), (TransportError, Vec<String>)>;

/// Compares every byte whatever the first difference, as the coordinator's check does.
pub(crate) fn token_eq(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Connections that were not this job's links, by source address, for the log and for
/// the error when a link is missing (so a port scanner is named, not the real peer).
#[derive(Default)]
struct Foreign {
    by_ip: BTreeMap<IpAddr, (u64, Vec<String>)>,
    total: u64,
    /// Connections from addresses beyond `MAX_SOURCES`.
    unlisted: u64,
}

impl Foreign {
    fn note(&mut self, ip: IpAddr, why: String) {
        self.total += 1;
        let ip = ip.to_canonical();
        if !self.by_ip.contains_key(&ip) && self.by_ip.len() >= MAX_SOURCES {
            self.unlisted += 1;
            return;
        }
        let (n, reasons) = self.by_ip.entry(ip).or_default();
        *n += 1;
        if reasons.len() < MAX_REASONS && !reasons.contains(&why) {
            reasons.push(why);
        }
    }

    /// One line per source address, most connections first, at most `MAX_SOURCES_LISTED`.
    fn lines(&self, label: &str) -> Vec<String> {
        let mut v: Vec<_> = self.by_ip.iter().collect();
        v.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.0.cmp(b.0)));
        let mut out: Vec<String> = v
            .iter()
            .take(MAX_SOURCES_LISTED)
            .map(|(ip, (n, reasons))| {
                let conns = if *n == 1 {
                    "1 connection".to_string()
                } else {
                    format!("{n} connections")
                };
                format!("{label} from {ip}: {conns} refused: {}", reasons.join("; "))
            })
            .collect();
        let rest = self.total
            - v.iter()
                .take(MAX_SOURCES_LISTED)
                .map(|(_, (n, _))| n)
                .sum::<u64>();
        if rest > 0 {
            out.push(format!(
                "{label}: {rest} more connections refused from other addresses"
            ));
        }
        out
    }

    /// For an error: `600 foreign connection(s) refused (198.18.0.9: 600)`.
    fn summary(&self) -> Option<String> {
        if self.total == 0 {
            return None;
        }
        let mut v: Vec<_> = self.by_ip.iter().map(|(ip, (n, _))| (*n, *ip)).collect();
        v.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let listed: Vec<String> = v
            .iter()
            .take(MAX_SOURCES_LISTED)
            .map(|(n, ip)| format!("{ip}: {n}"))
            .collect();
        let more = if v.len() > MAX_SOURCES_LISTED || self.unlisted > 0 {
            ", ..."
        } else {
            ""
        };
        Some(format!(
            "{} foreign connection(s) refused ({}{more})",
            self.total,
            listed.join(", ")
        ))
    }
}

/// A connection still reading its hello.
struct Pending {
    stream: TcpStream,
    addr: SocketAddr,
    buf: Vec<u8>,
    until: Instant,
}

/// What reading a pending connection came to.
enum Said<H> {
    Wait,
    Gone(String),
    Done(H),
}

/// A link taken for an expected `(rank, channel)`, and whether it came from the rank's own
/// data address.
struct Held<H, L> {
    acc: Accepted<H, L>,
    addr: SocketAddr,
    verified: bool,
}

struct AcceptState<'a, A: Admit> {
    spec: &'a AcceptSpec<'a>,
    admit: &'a A,
    held: Vec<Option<Held<A::Hello, A::Link>>>,
    foreign: Foreign,
    accept_errors: u64,
    accept_error: Option<String>,
    /// When the last empty slot was filled.
    filled_at: Option<Instant>,
    /// A fault of the pair that ends the accept.
    fatal: Option<TransportError>,
}

impl<A: Admit> AcceptState<'_, A> {
    fn complete(&self) -> bool {
        self.held.iter().all(Option::is_some)
    }
    fn verified(&self) -> bool {
        self.held.iter().flatten().all(|h| h.verified)
    }

    /// Does a connection from `ip` come from `rank`'s own data address?
    fn source_ok(&self, rank: u32, ip: IpAddr) -> bool {
        match (self.spec.rank_ip)(rank) {
            Some(want) if !want.is_unspecified() => want.to_canonical() == ip.to_canonical(),
            _ => true,
        }
    }

    /// Read what a pending connection has sent, until the socket has no more (readiness is
    /// edge-triggered) or the hello is whole. Never reads past the hello.
    fn read(p: &mut Pending) -> Said<A::Hello> {
        loop {
            let want = match decode_frame::<A::Hello>(&p.buf) {
                Decoded::More(n) => n,
                Decoded::Bad(why) => return Said::Gone(why),
                Decoded::Done(h) => return Said::Done(h),
            };
            let mut tmp = [0u8; 1024];
            let n = want.min(tmp.len());
            match p.stream.read(&mut tmp[..n]) {
                Ok(0) => return Said::Gone("closed before its handshake".into()),
                Ok(k) => p.buf.extend_from_slice(&tmp[..k]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Said::Wait,
                Err(e) => return Said::Gone(format!("failed before its handshake: {e}")),
            }
        }
    }

    /// Why a whole hello is refused, by the shared rules; None: the transport decides.
    fn refusal(&self, h: &A::Hello, slot: Option<usize>, verified: bool) -> Option<String> {
        if !token_eq(h.token(), self.spec.token) {
            return Some("wrong token".to_string());
        }
        if h.receiver() != self.spec.me || slot.is_none() {
            return Some(format!(
                "unexpected link rank {} -> rank {} channel {}",
                h.sender(),
                h.receiver(),
                h.channel()
            ));
        }
        match slot.and_then(|k| self.held[k].as_ref()) {
            Some(old) if old.verified || !verified => Some(format!(
                "duplicate link from rank {} channel {} (taken by {})",
                h.sender(),
                h.channel(),
                old.addr
            )),
            _ => None,
        }
    }

    /// A whole hello arrived: take the link, refuse it, or let it replace a link that came
    /// from a foreign address.
    fn admit(&mut self, mut s: TcpStream, addr: SocketAddr, h: A::Hello) {
        let spec = self.spec;
        let slot = spec.expect.iter().position(|&k| k == (h.sender(), h.channel()));
        let verified = self.source_ok(h.sender(), addr.ip());
        let refused = match self.refusal(&h, slot, verified) {
            Some(r) => Some(Refused::Stray(r)),
            None => self.admit.check(&h).err(),
        };
        let taken = match (refused, slot) {
            (None, Some(k)) => {
                let _ = s.set_nonblocking(false);
                let left = spec
                    .deadline
                    .saturating_duration_since(Instant::now())
                    .clamp(Duration::from_millis(10), Duration::from_secs(1));
                let _ = s.set_write_timeout(Some(left));
                self.admit.take(s, &h).map(|l| (k, l))
            }
            (Some(r), _) => {
                let why = match &r {
                    Refused::Stray(w) | Refused::Fatal { reason: w, .. } => w.clone(),
                };
                self.admit.refuse(&mut s, &why);
                Err(r)
            }
            (None, None) => Err(Refused::Stray("unexpected link".into())),
        };
        let (k, link) = match taken {
            Ok(x) => x,
            Err(r) => return self.refused(r, addr, &h, verified),
        };
        let new = Held {
            acc: Accepted { handshake: h, link },
            addr,
            verified,
        };
        if let Some(old) = self.held[k].replace(new) {
            // Only an unverified link is ever replaced (see `refusal`).
            let (f, c) = spec.expect[k];
            self.foreign.note(
                old.addr.ip(),
                format!(
                    "claimed rank {f} channel {c}, replaced by the connection from rank {f}'s data address"
                ),
            );
        } else if self.complete() {
            self.filled_at = Some(Instant::now());
        }
    }

    fn refused(&mut self, r: Refused, addr: SocketAddr, h: &A::Hello, verified: bool) {
        let why = match r {
            Refused::Fatal { reason, error } => {
                if verified && self.fatal.is_none() {
                    self.fatal = Some(error);
                }
                reason
            }
            Refused::Stray(w) => w,
        };
        let why = if verified || why == "wrong token" {
            why
        } else {
            format!("{why}; not from rank {}'s data address", h.sender())
        };
        self.foreign.note(addr.ip(), why);
    }

    fn missing_error(&self) -> TransportError {
        let spec = self.spec;
        let missing: Vec<String> = spec
            .expect
            .iter()
            .zip(&self.held)
            .filter(|(_, h)| h.is_none())
            .map(|((f, c), _)| format!("{} channel {c}", (spec.peer_name)(*f)))
            .collect();
        let mut error = format!(
            "not connected within {} s (firewall on the data interface?)",
            spec.timeout.as_secs()
        );
        if let Some(s) = self.foreign.summary() {
            error.push_str(&format!("; meanwhile {s}"));
        }
        if let Some(e) = &self.accept_error {
            error.push_str(&format!(
                "; accepting failed {} time(s): {e} (hint: out of file descriptors? raise `ulimit -n`)",
                self.accept_errors
            ));
        }
        TransportError::Setup {
            peer: missing.join(", "),
            what: format!("waiting for the {}", self.admit.label()),
            error,
        }
    }

    fn lines(&self) -> Vec<String> {
        let label = self.admit.label();
        let mut out = self.foreign.lines(label);
        if let Some(e) = &self.accept_error {
            out.push(format!(
                "{label} listener: accepting failed {} time(s): {e} (hint: out of file descriptors? raise `ulimit -n`)",
                self.accept_errors
            ));
        }
        for h in self.held.iter().flatten().filter(|h| !h.verified) {
            out.push(format!(
                "{label} from {}: taken for rank {} channel {} although it is not that rank's data address",
                h.addr,
                h.acc.handshake.sender(),
                h.acc.handshake.channel()
            ));
        }
        out
    }
}

/// The connections still saying hello, registered with one poller by id (oldest first).
struct Waiting {
    poll: Poll,
    pending: BTreeMap<usize, Pending>,
    next: usize,
}

impl Waiting {
    fn add(&mut self, p: Pending) -> io::Result<()> {
        let id = self.next;
        self.next += 1;
        self.poll.registry().register(
            &mut SourceFd(&p.stream.as_raw_fd()),
            Token(id),
            Interest::READABLE,
        )?;
        self.pending.insert(id, p);
        Ok(())
    }

    /// Out of the poller before the socket is closed or handed on (a dup made later would
    /// keep the registration alive).
    fn remove(&mut self, id: usize) -> Option<Pending> {
        let p = self.pending.remove(&id)?;
        let _ = self
            .poll
            .registry()
            .deregister(&mut SourceFd(&p.stream.as_raw_fd()));
        Some(p)
    }

    fn oldest(&mut self) -> Option<Pending> {
        let id = *self.pending.keys().next()?;
        self.remove(id)
    }
}

fn setup_error(label: &str, e: io::Error) -> (TransportError, Vec<String>) {
    let hint = if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
        " (hint: out of file descriptors? raise `ulimit -n`)"
    } else {
        ""
    };
    let e = TransportError::Setup {
        peer: format!("{label} listener"),
        what: "listening".into(),
        error: format!("{e}{hint}"),
    };
    (e, Vec::new())
}

/// Accept exactly the links in `spec.expect` on `listener` by `spec.deadline`. Every
/// connection is read concurrently on this one thread, each with its own hello deadline;
/// everything else (wrong token, unexpected rank, garbage, a second claim of a taken link)
/// is refused and summed up by source address in the returned lines.
pub(crate) fn accept<A: Admit>(
    listener: &TcpListener,
    spec: &AcceptSpec,
    admit: &A,
) -> AcceptResult<A::Hello, A::Link> {
    let label = admit.label();
    let mut st = AcceptState {
        spec,
        admit,
        held: spec.expect.iter().map(|_| None).collect(),
        foreign: Foreign::default(),
        accept_errors: 0,
        accept_error: None,
        filled_at: None,
        fatal: None,
    };
    listener
        .set_nonblocking(true)
        .map_err(|e| setup_error(label, e))?;
    let mut w = Waiting {
        poll: Poll::new().map_err(|e| setup_error(label, e))?,
        pending: BTreeMap::new(),
        next: 0,
    };
    w.poll
        .registry()
        .register(&mut SourceFd(&listener.as_raw_fd()), LISTENER, Interest::READABLE)
        .map_err(|e| setup_error(label, e))?;
    let result = run(listener, &mut st, &mut w);
    let _ = w.poll.registry().deregister(&mut SourceFd(&listener.as_raw_fd()));
    let _ = listener.set_nonblocking(false);
    let lines = st.lines();
    match result {
        Ok(()) => Ok((st.held.into_iter().flatten().map(|h| h.acc).collect(), lines)),
        Err(e) => Err((e, lines)),
    }
}

/// The accept loop: until every link is in (and from its rank's address, or the grace
/// passed), a fault of the pair, or the deadline.
fn run<A: Admit>(
    listener: &TcpListener,
    st: &mut AcceptState<A>,
    w: &mut Waiting,
) -> Result<(), TransportError> {
    let mut events = Events::with_capacity(256);
    // Connections may be queued before the listener was registered.
    let mut listen_ready = true;
    let mut backoff_until: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if let Some(end) = ended(st, w, now) {
            return end;
        }
        let backing_off = backoff_until.is_some_and(|t| now < t);
        let timeout = if listen_ready && !backing_off {
            Duration::ZERO
        } else {
            next_wake(st, w, now, backoff_until.filter(|_| backing_off))
                .saturating_duration_since(now)
                .max(Duration::from_millis(1))
        };
        match w.poll.poll(&mut events, Some(timeout)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(setup_error(st.admit.label(), e).0),
        }
        let mut ready = Vec::new();
        for ev in events.iter() {
            match ev.token() {
                LISTENER => listen_ready = true,
                Token(id) => ready.push(id),
            }
        }
        for id in ready {
            read_one(st, w, id);
        }
        if listen_ready && backoff_until.is_none_or(|t| Instant::now() >= t) {
            backoff_until = None;
            listen_ready = accept_batch(listener, st, w, &mut backoff_until);
        }
    }
}

/// Whether the accept loop is over at `now`: a fault of the pair, every link in (and from
/// its rank's address, or the grace passed), or the deadline. Handshakes past their own
/// deadline are dropped, noted as foreign.
fn ended<A: Admit>(
    st: &mut AcceptState<A>,
    w: &mut Waiting,
    now: Instant,
) -> Option<Result<(), TransportError>> {
    if let Some(e) = st.fatal.take() {
        return Some(Err(e));
    }
    if st.complete() && (st.verified() || st.filled_at.is_some_and(|t| now >= t + UNVERIFIED_GRACE)) {
        return Some(Ok(()));
    }
    if now >= st.spec.deadline {
        // Links from foreign addresses, once every link is in, are taken at the deadline.
        if st.complete() {
            return Some(Ok(()));
        }
        while let Some(p) = w.oldest() {
            st.foreign
                .note(p.addr.ip(), "no whole handshake before the deadline".into());
        }
        return Some(Err(st.missing_error()));
    }
    while w.pending.values().next().is_some_and(|p| now >= p.until) {
        if let Some(p) = w.oldest() {
            st.foreign.note(
                p.addr.ip(),
                format!("no whole handshake within {} s", HANDSHAKE_DEADLINE.as_secs()),
            );
        }
    }
    None
}

/// When the loop must look again: the deadline, the oldest handshake's, the end of the
/// `backoff`, the end of the grace for links from other addresses; 100 ms away at most.
fn next_wake<A: Admit>(st: &AcceptState<A>, w: &Waiting, now: Instant, backoff: Option<Instant>) -> Instant {
    let mut wake = st.spec.deadline.min(now + Duration::from_millis(100));
    if let Some(p) = w.pending.values().next() {
        wake = wake.min(p.until);
    }
    if let Some(t) = backoff {
        wake = wake.min(t);
    }
    if let Some(t) = st.filled_at {
        wake = wake.min(t + UNVERIFIED_GRACE);
    }
    wake
}

/// Read what connection `id` sent: wait for more, drop it (noted as foreign), or admit it.
fn read_one<A: Admit>(st: &mut AcceptState<A>, w: &mut Waiting, id: usize) {
    let Some(p) = w.pending.get_mut(&id) else {
        return;
    };
    match AcceptState::<A>::read(p) {
        Said::Wait => {}
        Said::Gone(why) => {
            if let Some(p) = w.remove(id) {
                st.foreign.note(p.addr.ip(), why);
            }
        }
        Said::Done(h) => {
            if let Some(p) = w.remove(id) {
                st.admit(p.stream, p.addr, h);
            }
        }
    }
}

/// Take up to `ACCEPT_BATCH` connections off the listener; whether it may have more.
fn accept_batch<A: Admit>(
    listener: &TcpListener,
    st: &mut AcceptState<A>,
    w: &mut Waiting,
    backoff_until: &mut Option<Instant>,
) -> bool {
    for _ in 0..ACCEPT_BATCH {
        match listener.accept() {
            Ok((s, addr)) => {
                let _ = s.set_nonblocking(true);
                if w.pending.len() >= MAX_PENDING
                    && let Some(old) = w.oldest()
                {
                    st.foreign.note(
                        old.addr.ip(),
                        format!("dropped: more than {MAX_PENDING} connections waiting to say hello"),
                    );
                }
                let p = Pending {
                    stream: s,
                    addr,
                    buf: Vec::new(),
                    until: (Instant::now() + HANDSHAKE_DEADLINE).min(st.spec.deadline),
                };
                if let Err(e) = w.add(p) {
                    st.foreign.note(addr.ip(), format!("could not be watched: {e}"));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                ) => {}
            Err(e) => {
                st.accept_errors += 1;
                st.accept_error.get_or_insert_with(|| e.to_string());
                // Out of file descriptors: free one from the connection that has waited
                // longest for its hello, and pause before the next try.
                if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
                    && let Some(old) = w.oldest()
                {
                    st.foreign
                        .note(old.addr.ip(), "dropped to free a file descriptor".into());
                }
                *backoff_until = Some(Instant::now() + ACCEPT_BACKOFF);
                return true;
            }
        }
    }
    true
}
