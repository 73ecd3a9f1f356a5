//! The in-process transport: both ends of a link are threads of one process sharing the
//! receiver's slots. Faults are injected per link and are deterministic (counted writes,
//! fixed delays, explicit kills), so the algorithms, the watchdog and localization can be
//! tested without sockets or timing luck.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{
    Completion, Fabric, LinkRequest, OpenLinks, RecvLink, SendLink, TransportError, slot_buffer,
    words_as_bytes, words_as_bytes_mut,
};

/// One paced in-process world at a time: each is 4-5 ranks of paced threads whose figures
/// and deadlines are the assertions; two at once on a 2-core machine would measure each
/// other. Other heavy ring tests (the 400-rank table) take it too.
#[cfg(test)]
pub(crate) static ONE_WORLD: Mutex<()> = Mutex::new(());

/// What goes wrong on one link.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Faults {
    /// Sleep this long before every write (a slow link, independent of size).
    pub delay_per_write: Duration,
    /// Pace writes to this many bytes per second (a shaped link).
    pub rate_bytes_per_s: Option<f64>,
    /// From the n-th write (0-based) on, writes vanish: the sender sees success, nothing
    /// arrives and no credit returns (a link cut without an error, as `iptables -j DROP`).
    pub blackhole_after_writes: Option<u64>,
    /// After this many writes the link dies: both ends see it closed.
    pub die_after_writes: Option<u64>,
    /// After this many writes the sender blocks forever (until its deadline): a hung peer.
    pub stall_after_writes: Option<u64>,
}

struct State {
    slots: Vec<Vec<u32>>,
    completions: VecDeque<Completion>,
    credits: VecDeque<u32>,
    dead: Option<String>,
    writes: u64,
    sender_gone: bool,
    receiver_gone: bool,
}

struct Shared {
    state: Mutex<State>,
    cv: Condvar,
    slot_bytes: usize,
    faults: Faults,
}

/// Why the sending side of a link can no longer write, if it can't.
fn send_closed(g: &State, peer: &str) -> Option<TransportError> {
    let why = match (&g.dead, g.receiver_gone) {
        (Some(why), _) => why.clone(),
        (None, true) => "receiver gone".into(),
        (None, false) => return None,
    };
    Some(TransportError::Closed {
        peer: peer.to_string(),
        dir: "to",
        why,
    })
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking test thread must not wedge the other end: take the data anyway.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A handle to kill a link from outside (a cable pulled mid-run).
#[derive(Clone)]
pub(crate) struct LinkHandle(Arc<Shared>);

impl LinkHandle {
    pub fn kill(&self, why: &str) {
        self.0.lock().dead.get_or_insert_with(|| why.to_string());
        self.0.cv.notify_all();
    }
}

pub(crate) struct InprocSend {
    sh: Arc<Shared>,
    peer: String,
    sent: u64,
    started: Option<Instant>,
    timeout: Duration,
}

pub(crate) struct InprocRecv {
    sh: Arc<Shared>,
    peer: String,
    received: u64,
}

/// A connected pair: `from` writes into `to`'s `slots` slots of `slot_bytes`.
pub(crate) fn link(
    from: &str,
    to: &str,
    slots: usize,
    slot_bytes: usize,
    faults: Faults,
    timeout: Duration,
) -> (InprocSend, InprocRecv, LinkHandle) {
    let sh = Arc::new(Shared {
        state: Mutex::new(State {
            slots: (0..slots).map(|_| slot_buffer(slot_bytes)).collect(),
            completions: VecDeque::new(),
            credits: (0..slots as u32).collect(),
            dead: None,
            writes: 0,
            sender_gone: false,
            receiver_gone: false,
        }),
        cv: Condvar::new(),
        slot_bytes,
        faults,
    });
    (
        InprocSend {
            sh: sh.clone(),
            peer: to.to_string(),
            sent: 0,
            started: None,
            timeout,
        },
        InprocRecv {
            sh: sh.clone(),
            peer: from.to_string(),
            received: 0,
        },
        LinkHandle(sh),
    )
}

impl Drop for InprocSend {
    fn drop(&mut self) {
        self.sh.lock().sender_gone = true;
        self.sh.cv.notify_all();
    }
}

impl Drop for InprocRecv {
    fn drop(&mut self) {
        self.sh.lock().receiver_gone = true;
        self.sh.cv.notify_all();
    }
}

fn wait_until<'a>(
    sh: &'a Shared,
    mut g: MutexGuard<'a, State>,
    deadline: Instant,
) -> Result<MutexGuard<'a, State>, MutexGuard<'a, State>> {
    let now = Instant::now();
    if now >= deadline {
        return Err(g);
    }
    g = sh
        .cv
        .wait_timeout(g, deadline - now)
        .unwrap_or_else(|p| p.into_inner())
        .0;
    Ok(g)
}

impl SendLink for InprocSend {
    fn peer(&self) -> &str {
        &self.peer
    }
    fn slot_bytes(&self) -> usize {
        self.sh.slot_bytes
    }
    fn acquire(&mut self, deadline: Instant) -> Result<u32, TransportError> {
        let mut g = self.sh.lock();
        loop {
            if let Some(e) = send_closed(&g, &self.peer) {
                return Err(e);
            }
            if let Some(c) = g.credits.pop_front() {
                return Ok(c);
            }
            g = wait_until(&self.sh, g, deadline).map_err(|_| TransportError::Timeout {
                peer: self.peer.clone(),
                dir: "to",
            })?;
        }
    }
    fn write_imm(&mut self, slot: u32, data: &[u8], imm: u32) -> Result<(), TransportError> {
        let f = &self.sh.faults;
        if data.len() > self.sh.slot_bytes {
            return Err(TransportError::Protocol {
                peer: self.peer.clone(),
                dir: "to",
                what: format!(
                    "write of {} bytes into a {}-byte slot",
                    data.len(),
                    self.sh.slot_bytes
                ),
            });
        }
        if !f.delay_per_write.is_zero() {
            std::thread::sleep(f.delay_per_write);
        }
        if let Some(rate) = f.rate_bytes_per_s {
            let now = Instant::now();
            let mut start = *self.started.get_or_insert(now);
            // A shaper's bucket is small: an idle link does not save up credit (5 ms of it
            // at most), or the next burst would run unpaced.
            let sent_for = Duration::from_secs_f64(self.sent as f64 / rate);
            if start + sent_for + Duration::from_millis(5) < now {
                start = now.checked_sub(sent_for).unwrap_or(now);
                self.started = Some(start);
            }
            let due = start + Duration::from_secs_f64((self.sent + data.len() as u64) as f64 / rate);
            if let Some(d) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(d);
            }
        }
        let mut g = self.sh.lock();
        let n = g.writes;
        if f.stall_after_writes.is_some_and(|k| n >= k) {
            // Blocked sending, as a full socket buffer towards a frozen peer would be.
            let deadline = Instant::now() + self.timeout;
            while g.dead.is_none() {
                g = wait_until(&self.sh, g, deadline).map_err(|_| TransportError::Timeout {
                    peer: self.peer.clone(),
                    dir: "to",
                })?;
            }
        }
        if f.die_after_writes.is_some_and(|k| n >= k) {
            g.dead.get_or_insert_with(|| "link died (injected)".into());
            self.sh.cv.notify_all();
        }
        if let Some(e) = send_closed(&g, &self.peer) {
            return Err(e);
        }
        g.writes += 1;
        self.sent += data.len() as u64;
        if f.blackhole_after_writes.is_some_and(|k| n >= k) {
            return Ok(());
        }
        let Some(buf) = g.slots.get_mut(slot as usize) else {
            return Err(TransportError::Protocol {
                peer: self.peer.clone(),
                dir: "to",
                what: format!("no slot {slot}"),
            });
        };
        words_as_bytes_mut(buf)[..data.len()].copy_from_slice(data);
        g.completions.push_back(Completion {
            slot,
            len: data.len(),
            imm,
        });
        self.sh.cv.notify_all();
        Ok(())
    }
    fn bytes_sent(&self) -> u64 {
        self.sent
    }
}

impl RecvLink for InprocRecv {
    fn peer(&self) -> &str {
        &self.peer
    }
    fn poll(&mut self, deadline: Instant) -> Result<Completion, TransportError> {
        let mut g = self.sh.lock();
        loop {
            if let Some(c) = g.completions.pop_front() {
                self.received += c.len as u64;
                return Ok(c);
            }
            if let Some(why) = &g.dead {
                return Err(TransportError::Closed {
                    peer: self.peer.clone(),
                    dir: "from",
                    why: why.clone(),
                });
            }
            if g.sender_gone {
                return Err(TransportError::Closed {
                    peer: self.peer.clone(),
                    dir: "from",
                    why: "sender gone".into(),
                });
            }
            g = wait_until(&self.sh, g, deadline).map_err(|_| TransportError::Timeout {
                peer: self.peer.clone(),
                dir: "from",
            })?;
        }
    }
    fn consume(&mut self, c: &Completion, f: &mut dyn FnMut(&[u8])) -> Result<(), TransportError> {
        let mut g = self.sh.lock();
        let Some(buf) = g.slots.get(c.slot as usize) else {
            return Err(TransportError::Protocol {
                peer: self.peer.clone(),
                dir: "from",
                what: format!("no slot {}", c.slot),
            });
        };
        f(&words_as_bytes(buf)[..c.len]);
        g.credits.push_back(c.slot);
        self.sh.cv.notify_all();
        Ok(())
    }
    fn bytes_received(&self) -> u64 {
        self.received
    }
}

/// A whole in-process network: every rank's [`InprocFabric`] shares it. Faults are set per
/// directed link `(from, to, tag)` before the links are opened; handles kill them later.
#[derive(Clone, Default)]
pub(crate) struct InprocNet {
    inner: Arc<(Mutex<NetState>, Condvar)>,
}

#[derive(Default)]
struct NetState {
    /// Receive ends waiting for their rank to open them.
    pending: std::collections::HashMap<(u32, u32, u32), InprocRecv>,
    faults: std::collections::HashMap<(u32, u32, u32), Faults>,
    handles: std::collections::HashMap<(u32, u32, u32), LinkHandle>,
}

impl InprocNet {
    pub fn new() -> InprocNet {
        InprocNet::default()
    }
    fn state(&self) -> MutexGuard<'_, NetState> {
        self.inner.0.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// Faults for the link `from -> to` with `tag` (set before it is opened).
    pub fn set_faults(&self, from: u32, to: u32, tag: u32, f: Faults) {
        self.state().faults.insert((from, to, tag), f);
    }
    /// The kill switch of an opened link.
    pub fn handle(&self, from: u32, to: u32, tag: u32) -> Option<LinkHandle> {
        self.state().handles.get(&(from, to, tag)).cloned()
    }
    pub fn fabric(&self, rank: u32) -> InprocFabric {
        InprocFabric {
            net: self.clone(),
            rank,
        }
    }
}

/// One rank's end of an [`InprocNet`].
pub(crate) struct InprocFabric {
    net: InprocNet,
    rank: u32,
}

impl Fabric for InprocFabric {
    fn transport(&self) -> &'static str {
        "inproc"
    }
    fn address(&self) -> String {
        format!("inproc:{}", self.rank)
    }
    fn open(&self, req: &LinkRequest) -> Result<OpenLinks, TransportError> {
        let mut sends: Vec<Box<dyn SendLink>> = Vec::new();
        {
            let mut st = self.net.state();
            for &(peer, tag) in req.sends {
                let key = (req.me, peer, tag);
                let f = st.faults.get(&key).cloned().unwrap_or_default();
                let (s, r, h) = link(
                    &format!("rank {}", req.me),
                    &format!("rank {peer}"),
                    req.slots,
                    req.slot_bytes,
                    f,
                    req.timeout,
                );
                st.pending.insert(key, r);
                st.handles.insert(key, h);
                sends.push(Box::new(s));
            }
        }
        self.net.inner.1.notify_all();
        let mut recvs: Vec<Box<dyn RecvLink>> = Vec::new();
        for &(peer, tag) in req.recvs {
            let key: (u32, u32, u32) = (peer, req.me, tag);
            let mut st = self.net.state();
            loop {
                if let Some(r) = st.pending.remove(&key) {
                    recvs.push(Box::new(r));
                    break;
                }
                let now = Instant::now();
                if now >= req.deadline {
                    return Err(TransportError::Setup {
                        peer: format!("rank {peer}"),
                        what: format!("waiting for the data link (tag {tag})"),
                        error: "never opened".into(),
                    });
                }
                st = self
                    .net
                    .inner
                    .1
                    .wait_timeout(st, req.deadline - now)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        }
        Ok(OpenLinks {
            sends,
            recvs,
            rejected: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::collective::transport::conformance::{Pair, conformance_suite};

    fn pair(slots: usize, slot_bytes: usize) -> Pair {
        let (s, r, _) = link(
            "a",
            "b",
            slots,
            slot_bytes,
            Faults::default(),
            Duration::from_secs(5),
        );
        (Box::new(s), Box::new(r))
    }

    conformance_suite!(pair);

    #[test]
    fn blackholed_writes_never_arrive_and_their_credits_never_return() {
        let f = Faults {
            blackhole_after_writes: Some(1),
            ..Faults::default()
        };
        let (mut s, mut r, _) = link("a", "b", 2, 8, f, Duration::from_secs(5));
        let soon = || Instant::now() + Duration::from_millis(100);
        for i in 0..2 {
            let slot = s.acquire(soon()).unwrap();
            s.write_imm(slot, &[1; 8], i).unwrap();
        }
        let c = r.poll(soon()).unwrap();
        assert_eq!(c.imm, 0);
        assert!(r.poll(soon()).unwrap_err().is_timeout());
        r.consume(&c, &mut |_| {}).unwrap();
        s.acquire(soon()).unwrap();
        assert!(s.acquire(soon()).unwrap_err().is_timeout());
    }

    #[test]
    fn killed_link_is_closed_on_both_ends() {
        let (mut s, mut r, h) = link("a", "b", 2, 8, Faults::default(), Duration::from_secs(5));
        h.kill("cable pulled");
        let soon = Instant::now() + Duration::from_millis(100);
        assert!(matches!(s.acquire(soon), Err(TransportError::Closed { why, .. }) if why == "cable pulled"));
        assert!(matches!(r.poll(soon), Err(TransportError::Closed { .. })));
    }

    #[test]
    fn stalled_sender_times_out_blocked_in_write() {
        let f = Faults {
            stall_after_writes: Some(0),
            ..Faults::default()
        };
        let (mut s, _r, _) = link("a", "b", 2, 8, f, Duration::from_millis(100));
        let slot = s.acquire(Instant::now() + Duration::from_secs(1)).unwrap();
        assert!(s.write_imm(slot, &[0; 8], 0).unwrap_err().is_timeout());
    }

    #[test]
    fn fabric_pairs_links_across_ranks_with_their_faults() {
        let net = InprocNet::new();
        net.set_faults(
            0,
            1,
            7,
            Faults {
                blackhole_after_writes: Some(0),
                ..Faults::default()
            },
        );
        let table = vec![];
        let deadline = Instant::now() + Duration::from_secs(2);
        let req = |me: u32, sends: &'static [(u32, u32)], recvs: &'static [(u32, u32)]| LinkRequest {
            me,
            token: "t",
            table: &table,
            shared_transport: None,
            sends,
            recvs,
            slots: 2,
            slot_bytes: 16,
            deadline,
            timeout: Duration::from_secs(1),
        };
        let (f0, f1) = (net.fabric(0), net.fabric(1));
        let (a, b) = std::thread::scope(|sc| {
            let b = sc.spawn(|| f1.open(&req(1, &[], &[(0, 7), (0, 0)])).ok().unwrap());
            let a = sc.spawn(|| f0.open(&req(0, &[(1, 0), (1, 7)], &[])).ok().unwrap());
            (a.join().unwrap(), b.join().unwrap())
        });
        let (mut s, mut r) = (a.sends, b.recvs);
        for (i, l) in s.iter_mut().enumerate() {
            let slot = l.acquire(deadline).unwrap();
            l.write_imm(slot, &[1], i as u32).unwrap();
        }
        // Tag 0 delivers; tag 7 is black-holed.
        assert_eq!(r[1].poll(deadline).unwrap().imm, 0);
        assert!(
            r[0].poll(Instant::now() + Duration::from_millis(50))
                .unwrap_err()
                .is_timeout()
        );
        net.handle(0, 1, 0).unwrap().kill("cut");
        assert!(matches!(r[1].poll(deadline), Err(TransportError::Closed { .. })));
    }
}
