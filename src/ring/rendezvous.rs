//! The rank's side of the TCP rendezvous: bind the coordinator's port, join the job (hello,
//! rank table), keep the control connection (coordinator messages, cancellation through
//! [`AbortFlag`]). Every wait has a deadline.

use std::io;
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::ring::diagnosis::watchdog;
use crate::ring::gate;
use crate::ring::model::{AbortFlag, REASON_NAMES, Rank, RankInfo, Verdict, bounded_list};
use crate::ring::wire::{self, Hello, Msg, WireError};
use crate::text::printable;

/// How often ranks and the coordinator tell each other they are alive.
pub(crate) const HEARTBEAT: Duration = Duration::from_millis(500);
/// After the first failure report, how long the coordinator keeps listening for the
/// other ranks' reports before it ends the run (they explain the failure together).
pub(crate) const FAILURE_GRACE: Duration = Duration::from_millis(1000);

/// How long a control connection may stay silent (heartbeats and pings come every
/// [`HEARTBEAT`]) before its peer is judged stopped or gone: the data timeout, within
/// 3..10 s, so that a stopped process is named before (or soon after) its peers' data waits
/// expire, and a busy host's late heartbeat is not.
pub fn silence(timeout: Duration) -> Duration {
    timeout.clamp(Duration::from_secs(3), Duration::from_secs(10))
}

/// Ranks in a job (every rail's together) up to which each heartbeats every [`HEARTBEAT`].
pub(crate) const HEARTBEAT_RANKS: u64 = 16_384;

/// How often each rank of a job of `ranks` ranks in all heartbeats: every [`HEARTBEAT`] up
/// to [`HEARTBEAT_RANKS`], then less often in proportion (rank 0 reads every heartbeat of
/// every rail: 131,072 ranks at 2 a second were more than its loops could read on 2 cores),
/// never less often than 4 times in the silence deadline, so a frozen rank is named as soon.
/// Both sides compute it: the rank to send, rank 0 to know when a rank is quiet. Pure.
pub fn heartbeat_every(ranks: u64, timeout: Duration) -> Duration {
    let scaled = HEARTBEAT.mul_f64((ranks as f64 / HEARTBEAT_RANKS as f64).max(1.0));
    scaled.min(silence(timeout) / 4).max(HEARTBEAT)
}

#[derive(Debug, Error)]
pub enum BootstrapError {
    #[error("{}", missing_text(missing, silent, *world, coordinator, *secs))]
    Missing {
        missing: Vec<Rank>,
        /// With `--rails`: those of `missing` whose nodes never declared their rails to rank
        /// 0 (missing on every rail, not on this one alone).
        silent: Vec<Rank>,
        world: u32,
        coordinator: String,
        secs: u64,
    },
    #[error(
        "could not reach the coordinator at {coordinator} within {secs} s ({last}): is rank 0 running, and is TCP port \
         {port} open (firewall)?", port = port_of(coordinator)
    )]
    Unreachable {
        coordinator: String,
        secs: u64,
        last: String,
    },
    #[error("the coordinator at {coordinator} rejected this rank: {reason}")]
    Rejected { coordinator: String, reason: String },
    /// The coordinator's word: it ended the run (its reason names the ranks concerned).
    #[error("{0}")]
    Aborted(String),
    #[error(
        "connected to the coordinator at {coordinator} but the rank table did not arrive within {secs} s \
         (--join-timeout): other ranks are missing"
    )]
    NoTable { coordinator: String, secs: u64 },
    #[error("the coordinator at {coordinator} closed the control connection ({why}); rank 0 probably died")]
    CoordinatorLost { coordinator: String, why: String },
    #[error("cannot listen for ranks on {addr}: {source}")]
    Bind { addr: String, source: io::Error },
    #[error("control connection to {peer}: {source}")]
    Wire { peer: String, source: WireError },
}

impl BootstrapError {
    /// The same error naming the coordinator as `coordinator` (the address the operator
    /// gave), where the rank reached it through another (a node's relay, rank 0's own
    /// listener).
    pub fn naming(self, coordinator: &str) -> BootstrapError {
        let c = coordinator.to_string();
        match self {
            BootstrapError::Unreachable { secs, last, .. } => BootstrapError::Unreachable {
                coordinator: c,
                secs,
                last,
            },
            BootstrapError::Rejected { reason, .. } => BootstrapError::Rejected {
                coordinator: c,
                reason,
            },
            BootstrapError::NoTable { secs, .. } => BootstrapError::NoTable { coordinator: c, secs },
            BootstrapError::CoordinatorLost { why, .. } => {
                BootstrapError::CoordinatorLost { coordinator: c, why }
            }
            BootstrapError::Wire { source, .. } => BootstrapError::Wire { peer: c, source },
            e => e,
        }
    }
}

/// [`BootstrapError::Missing`]'s text: a rail's ring whose only missing ranks are nodes
/// that never declared their rails says so (the node is missing, not the rail).
fn missing_text(missing: &[Rank], silent: &[Rank], world: u32, coordinator: &str, secs: u64) -> String {
    let (n, port) = (missing.len(), port_of(coordinator));
    let plural = |v: &[Rank]| if v.len() == 1 { "" } else { "s" };
    let (it, its) = if silent.len() == 1 {
        ("it", "its")
    } else {
        ("they", "their")
    };
    if !silent.is_empty() && silent.len() == n {
        return format!(
            "{n} of {world} ranks never reached the coordinator at {coordinator}: missing rank{} {}, which never \
             declared {its} rails to rank 0 within {secs} s (--join-timeout): the node is missing on every rail, not \
             on this rail alone; check that {it} started (same --world and token) and that rank 0's coordinator port \
             (and the ports after it, one per rail) is reachable from {its} host{} (firewall)",
            plural(silent),
            list(silent),
            plural(silent),
        );
    }
    let mut m = format!(
        "{n} of {world} ranks never reached the coordinator at {coordinator} within {secs} s (--join-timeout): \
         missing rank{} {}; check that they were started (same --world and token), that {coordinator} is reachable \
         from their hosts (firewall on TCP port {port}), and that the coordinator address is on an interface they \
         can route to",
        plural(missing),
        list(missing)
    );
    if !silent.is_empty() {
        m += &format!(
            "; rank{} {} never declared {its} rails to rank 0 either (missing on every rail)",
            plural(silent),
            list(silent)
        );
    }
    m
}

/// `0, 2, 3, 5`; past [`REASON_NAMES`] ranks, `... and 4,812 more` (it goes to every rank).
pub(crate) fn list(ranks: &[Rank]) -> String {
    bounded_list(ranks, REASON_NAMES)
}

fn port_of(addr: &str) -> String {
    addr.rsplit_once(':')
        .map(|(_, p)| p.to_string())
        .unwrap_or_default()
}

/// Bind the coordinator's port on every address of this host. Only the port of `addr` is
/// used: the name ranks are given often resolves differently on rank 0 itself (Debian maps
/// the hostname to 127.0.1.1 in /etc/hosts, NAT), and the job token guards the port.
pub(crate) fn bind(addr: &str) -> Result<TcpListener, BootstrapError> {
    let err = |source| BootstrapError::Bind {
        addr: addr.to_string(),
        source,
    };
    let port = port_of(addr)
        .parse::<u16>()
        .map_err(|_| err(io::Error::new(io::ErrorKind::InvalidInput, "no port")))?;
    // `[::]` also takes IPv4 unless the host has IPv6 off.
    let once = || {
        listen((std::net::Ipv6Addr::UNSPECIFIED, port).into())
            .or_else(|_| listen((std::net::Ipv4Addr::UNSPECIFIED, port).into()))
    };
    // A rank that started first may hold the port for a moment: its connect attempt can
    // reach itself while nothing listens (it drops such a connection at once).
    let deadline = Instant::now() + BIND_RETRY;
    loop {
        match once() {
            Err(e) if e.kind() == io::ErrorKind::AddrInUse && Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(100));
            }
            r => return r.map_err(err),
        }
    }
}

/// How long the coordinator keeps trying a port that is in use before it gives up.
const BIND_RETRY: Duration = Duration::from_secs(2);

/// Connections the kernel queues before the coordinator accepts them (capped by
/// `net.core.somaxconn`): thousands of ranks connect within the same second, and a full
/// queue drops their handshakes into a one-second retransmit.
pub(crate) const LISTEN_BACKLOG: i32 = 4096;

/// A listener like `TcpListener::bind` (address reuse) with [`LISTEN_BACKLOG`].
pub fn listen(addr: std::net::SocketAddr) -> io::Result<TcpListener> {
    let s = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
    s.set_reuse_address(true)?;
    s.bind(&addr.into())?;
    s.listen(LISTEN_BACKLOG)?;
    Ok(s.into())
}

/// A rank's open control connection after the table arrived.
pub struct Session {
    /// This rank's part of the table: itself and its peers in the sweep's rings, in rank
    /// order (scan orders bring their own peers).
    pub table: Vec<RankInfo>,
    /// The transport every rank of the world offers, when they all offer the same one.
    pub shared_transport: Option<String>,
    pub coordinator: String,
    writer: Mutex<TcpStream>,
    inbox: Mutex<Receiver<Msg>>,
    pub abort: Arc<AbortFlag>,
}

/// How long connection attempt `k` (from 0) waits for the handshake: 250 ms, doubling to 2 s.
/// A SYN that rank 0's kernel dropped (its accept queue full: thousands of nodes connect in
/// the same instant) is only sent again after the kernel's 1 s, then 3 s; a new attempt
/// after 250 ms takes the next free place instead (at 16,384 nodes at once this cut the
/// nodes' joining from 2.3 s to 0.9 s in the bench). On a datacenter network an answer takes
/// microseconds, so a short first attempt loses nothing. Pure.
pub fn connect_attempt(k: u32) -> Duration {
    Duration::from_millis(250u64 << k.min(3))
}

pub(crate) fn connect_until(addr: &str, deadline: Instant) -> Result<TcpStream, String> {
    let mut last = String::from("not tried");
    let mut k = 0;
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Err(last);
        }
        match addr.to_socket_addrs() {
            Ok(addrs) => {
                for a in addrs {
                    let left = deadline
                        .saturating_duration_since(Instant::now())
                        .max(Duration::from_millis(10));
                    let attempt = connect_attempt(k);
                    match crate::ring::collective::transport::tcp::connect_not_self(&a, left.min(attempt)) {
                        Ok(s) => return Ok(s),
                        Err(e) => {
                            // Only an unanswered handshake waits longer next time.
                            if e.kind() == io::ErrorKind::TimedOut {
                                k += 1;
                            }
                            last = e.to_string();
                        }
                    }
                }
            }
            Err(e) => last = format!("cannot resolve: {e}"),
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// Join the job: connect to the coordinator (retrying until the deadline: rank 0 may start
/// later, or its door may be busy turning a flood away), send hello, wait for the table. The
/// join window is `timeout` too; see [`join_within`].
pub fn join(coordinator: &str, hello: Hello, timeout: Duration) -> Result<Session, BootstrapError> {
    join_within(coordinator, hello, timeout, timeout)
}

/// Reconnects after a connection to the coordinator was reset (or closed) before this rank's
/// table arrived: a restarted rank 0, a middlebox dropping a connection under a burst.
pub(crate) const MAX_JOIN_RETRIES: u32 = 5;

/// Was the control connection lost before the table arrived (reset or closed, not refused
/// with a reason)? Then connecting again may work. Pure.
pub(crate) fn lost_before_table(e: &BootstrapError) -> bool {
    match e {
        BootstrapError::CoordinatorLost { .. } => true,
        BootstrapError::Wire {
            source: WireError::Io(e),
            ..
        } => matches!(
            e.kind(),
            io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted | io::ErrorKind::BrokenPipe
        ),
        _ => false,
    }
}

/// [`join`] with its own join window (`--join-timeout`), apart from the data plane's
/// `timeout` (which the control connection's silence deadline follows once joined). A
/// connection lost before the table arrived is tried again, at most [`MAX_JOIN_RETRIES`]
/// times, within the window.
pub(crate) fn join_within(
    coordinator: &str,
    hello: Hello,
    join_timeout: Duration,
    timeout: Duration,
) -> Result<Session, BootstrapError> {
    join_through(coordinator, coordinator, hello, (join_timeout, timeout))
}

/// [`join_within`] through `addr` (a node's relay, rank 0's own listener), the coordinator
/// named as `coordinator` (the address the operator gave) in every message.
pub(crate) fn join_through(
    addr: &str,
    coordinator: &str,
    hello: Hello,
    (join_timeout, timeout): (Duration, Duration),
) -> Result<Session, BootstrapError> {
    let start = Instant::now();
    let mut retries = 0;
    loop {
        match join_once((addr, coordinator), hello.clone(), (join_timeout, timeout), start) {
            // A transient refusal (the coordinator's door was full): connect again.
            Err(BootstrapError::Rejected { reason, .. })
                if reason.starts_with(gate::BUSY) && start.elapsed() < join_timeout =>
            {
                thread::sleep(Duration::from_millis(100));
            }
            Err(e)
                if lost_before_table(&e) && retries < MAX_JOIN_RETRIES && start.elapsed() < join_timeout =>
            {
                retries += 1;
                thread::sleep(Duration::from_millis(100 * retries as u64));
            }
            Err(e) if lost_before_table(&e) && retries > 0 => {
                let why = match e {
                    BootstrapError::CoordinatorLost { why, .. } => why,
                    BootstrapError::Wire { source, .. } => source.to_string(),
                    other => other.to_string(),
                };
                return Err(BootstrapError::CoordinatorLost {
                    coordinator: coordinator.to_string(),
                    why: format!("{why}; connected again {retries} times before its table arrived"),
                });
            }
            other => return other,
        }
    }
}

/// The join's first steps, for a ring's rank and a `--rails` node alike: connect to
/// `coordinator` (again while it is not up, until `start + join_timeout`), no Nagle, writes
/// bounded by `write_timeout`, and say `hello`.
pub(crate) fn connect_hello(
    coordinator: &str,
    hello: &Hello,
    (join_timeout, write_timeout): (Duration, Duration),
    start: Instant,
) -> Result<TcpStream, BootstrapError> {
    let wire_err = |source| BootstrapError::Wire {
        peer: coordinator.to_string(),
        source,
    };
    let s = connect_until(coordinator, start + join_timeout).map_err(|last| BootstrapError::Unreachable {
        coordinator: coordinator.to_string(),
        secs: join_timeout.as_secs(),
        last,
    })?;
    let _ = s.set_nodelay(true);
    s.set_write_timeout(Some(write_timeout))
        .map_err(|e| wire_err(e.into()))?;
    wire::write_msg(&mut &s, &Msg::Hello(Box::new(hello.clone()))).map_err(wire_err)?;
    Ok(s)
}

fn join_once(
    (addr, coordinator): (&str, &str),
    hello: Hello,
    (join_timeout, timeout): (Duration, Duration),
    start: Instant,
) -> Result<Session, BootstrapError> {
    // The coordinator's own deadline counts from rank 0's start; a little grace lets its
    // missing-rank message arrive before this rank gives up on its own.
    let mut deadline = start + join_timeout + JOIN_GRACE;
    let wire_err = |source| BootstrapError::Wire {
        peer: coordinator.to_string(),
        source,
    };
    let s = connect_hello(addr, &hello, (join_timeout, timeout), start).map_err(|e| e.naming(coordinator))?;
    let (my_rank, my_info, world) = (hello.rank, hello.info.clone(), hello.world);
    let mut table: Vec<RankInfo> = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(BootstrapError::NoTable {
                coordinator: coordinator.to_string(),
                secs: join_timeout.as_secs(),
            });
        }
        s.set_read_timeout(Some(left)).map_err(|e| wire_err(e.into()))?;
        let mut r = &s;
        match wire::read_msg(&mut r) {
            Ok(Msg::Table {
                ranks: part,
                more,
                shared_transport,
            }) => {
                add_table_part(&mut table, part, world).map_err(|e| {
                    wire_err(WireError::Malformed(format!(
                        "the rank table from the coordinator: {e}"
                    )))
                })?;
                if more {
                    continue;
                }
                let me = table
                    .iter()
                    .find(|i| i.rank == my_rank)
                    .cloned()
                    .unwrap_or_else(|| my_info.clone());
                return session(s, coordinator, (table, shared_transport), me, timeout);
            }
            Ok(Msg::Reject { reason }) => {
                return Err(BootstrapError::Rejected {
                    coordinator: coordinator.to_string(),
                    reason: printable(&reason, 400),
                });
            }
            Ok(Msg::Window { closes_in_ms }) => deadline = deadline.max(window_end(closes_in_ms)),
            Ok(Msg::Abort { reason }) => return Err(BootstrapError::Aborted(reason)),
            Ok(_) => continue,
            Err(WireError::Closed) => {
                return Err(BootstrapError::CoordinatorLost {
                    coordinator: coordinator.to_string(),
                    why: "closed during bootstrap".into(),
                });
            }
            Err(WireError::TimedOut) => continue,
            Err(e) => return Err(wire_err(e)),
        }
    }
}

/// The whole table arrived on `s`: the session, with its reader of the coordinator's
/// messages (`me`: this rank as the table says it).
fn session(
    s: TcpStream,
    coordinator: &str,
    (table, shared_transport): (Vec<RankInfo>, Option<String>),
    me: RankInfo,
    timeout: Duration,
) -> Result<Session, BootstrapError> {
    let abort = Arc::new(AbortFlag::default());
    let (tx, rx) = mpsc::channel();
    let reader = s.try_clone().map_err(|e| BootstrapError::Wire {
        peer: coordinator.to_string(),
        source: e.into(),
    })?;
    spawn_reader(reader, coordinator.to_string(), me, timeout, tx, abort.clone());
    Ok(Session {
        table,
        shared_transport,
        coordinator: coordinator.to_string(),
        writer: Mutex::new(s),
        inbox: Mutex::new(rx),
        abort,
    })
}

/// How long after the end of rank 0's join window a seated rank still waits for its table
/// (or rank 0's missing-rank message, which names the cause) before giving up on its own.
pub(crate) const JOIN_GRACE: Duration = Duration::from_secs(3);

/// The longest join window a coordinator's word can set (its value came off the network).
const MAX_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// When a seated rank stops waiting for its table, told that rank 0's window closes in
/// `closes_in_ms`: one clock, rank 0's, whenever this rank started.
pub(crate) fn window_end(closes_in_ms: u64) -> Instant {
    let now = Instant::now();
    let left = Duration::from_millis(closes_in_ms).min(MAX_WINDOW) + JOIN_GRACE;
    now.checked_add(left).unwrap_or(now)
}

/// Add one frame of this rank's table to what arrived: at most `world` entries in all, each
/// a rank of the world and none twice (the coordinator's words are bounded too). Pure.
pub(crate) fn add_table_part(table: &mut Vec<RankInfo>, part: Vec<RankInfo>, world: u32) -> Result<(), String> {
    if table.len() + part.len() > world as usize {
        return Err(format!("more than {world} entries for a world of {world}"));
    }
    for i in part {
        // In rank order: each entry after the last one, so none is listed twice.
        if i.rank >= world || table.last().is_some_and(|t| t.rank >= i.rank) {
            return Err(format!("rank {} is out of range or out of order", i.rank));
        }
        // A rail's ring runs in node order: ring rank i is node i or later, each node once.
        if let Some(n) = i.node {
            let before = table.iter().rev().find_map(|t| t.node);
            if n < i.rank || before.is_some_and(|b| b >= n) {
                return Err(format!(
                    "rank {} says it is node {n}: below its ring rank or not after the node before it",
                    i.rank
                ));
            }
        }
        table.push(i);
    }
    Ok(())
}

/// How far past its timeout a read of the control connection must come back before this
/// rank counts itself as not having run (a loaded host's scheduling delay stays below it).
const OWN_LATE: Duration = Duration::from_secs(1);

/// How often the [`RunClock`] wakes.
const TICK: Duration = Duration::from_millis(100);

/// Whether this process ran: a thread (one per process) that wakes every [`TICK`] and keeps
/// the longest gap between two wakeups that ended lately. A read of the control connection
/// that returns data is never late against its timeout however long the process was
/// stopped (issue 45: a rank stopped for about the silence deadline, as long as the
/// coordinator takes to give up on it, came back 0.5-1.5 s past a 3 s timeout and said
/// COORDINATOR LOST); the clock's gap is the stop itself.
struct RunClock {
    /// The last wakeup, and the latest gap of [`OWN_LATE`] or more (when it ended, how long).
    state: Mutex<(Instant, Option<(Instant, Duration)>)>,
}

static RUN_CLOCK: std::sync::OnceLock<RunClock> = std::sync::OnceLock::new();

impl RunClock {
    /// The process's clock, its thread started on first use (it lives as the process does).
    fn get() -> &'static RunClock {
        let mut started = false;
        let c = RUN_CLOCK.get_or_init(|| {
            started = true;
            RunClock {
                state: Mutex::new((Instant::now(), None)),
            }
        });
        if started {
            thread::spawn(move || {
                loop {
                    thread::sleep(TICK);
                    c.tick(Instant::now());
                }
            });
        }
        c
    }

    fn tick(&self, now: Instant) {
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let gap = now.saturating_duration_since(g.0).saturating_sub(TICK);
        if gap >= OWN_LATE {
            g.1 = Some((now, gap));
        }
        g.0 = now;
    }

    /// How long this process did not run, where that was at least `least` and ended within
    /// `within` of now or still goes on (the clock has not run since the stop: this thread
    /// ran first after it).
    fn stalled(&self, least: Duration, within: Duration) -> Option<Duration> {
        let g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let still = g.0.elapsed().saturating_sub(TICK);
        let ended = g.1.filter(|(at, _)| at.elapsed() <= within).map(|(_, gap)| gap);
        [Some(still), ended]
            .into_iter()
            .flatten()
            .filter(|g| *g >= least)
            .max()
    }
}

/// Reads what the coordinator sends during the run; raises the abort flag when it says so,
/// and with the coordinator_lost verdict when its connection closes or goes silent (it
/// pings every [`HEARTBEAT`]) for [`silence`], or this rank's own stall when this process
/// did not run just before.
fn spawn_reader(
    mut s: TcpStream,
    coordinator: String,
    me: RankInfo,
    timeout: Duration,
    tx: Sender<Msg>,
    abort: Arc<AbortFlag>,
) {
    let quiet = silence(timeout);
    let _ = s.set_read_timeout(Some(quiet));
    let clock = RunClock::get();
    thread::spawn(move || {
        let lost = Lost {
            coordinator,
            me,
            quiet,
            start: Instant::now(),
            clock,
        };
        let reason = read_until_the_end(&mut s, &lost, &tx);
        if let Some(reason) = reason {
            abort.raise(reason.clone());
            let _ = tx.send(Msg::Abort { reason });
        }
    });
}

/// What the reader needs to judge the end of its connection.
struct Lost {
    coordinator: String,
    me: RankInfo,
    quiet: Duration,
    start: Instant,
    clock: &'static RunClock,
}

/// Forward the coordinator's messages to `tx` until it ends the run (Done, Abort: handed on)
/// or the connection ends: then the abort's reason (the coordinator's, or [`Lost::verdict`]);
/// None when the run ended in order or this rank's own end stopped listening.
fn read_until_the_end(s: &mut TcpStream, lost: &Lost, tx: &Sender<Msg>) -> Option<String> {
    let mut last_heard = Instant::now();
    // The last read that came back past its timeout by OWN_LATE or more (this process did
    // not run meanwhile): when, and by how much.
    let mut own_late: Option<(Instant, Duration)> = None;
    loop {
        let asked = Instant::now();
        let got = wire::read_msg(s);
        let late = asked.elapsed().saturating_sub(lost.quiet);
        if late >= OWN_LATE {
            own_late = Some((Instant::now(), late));
        }
        match got {
            Ok(Msg::Ping) => {}
            Ok(Msg::Abort { reason }) => return Some(reason),
            Ok(m @ Msg::Done { .. }) => {
                let _ = tx.send(m);
                return None;
            }
            Ok(m) => {
                if tx.send(m).is_err() {
                    return None;
                }
            }
            Err(e) => return Some(lost.verdict(e, last_heard, own_late)),
        }
        last_heard = Instant::now();
    }
}

impl Lost {
    /// The line for a connection that ended with `e`: COORDINATOR LOST, or this rank's own
    /// stall when a read came back late or the run clock says this process did not run
    /// (for half the silence deadline or more: the coordinator gives up on a rank only
    /// after its silence deadline) within one silence deadline before.
    fn verdict(&self, e: WireError, last_heard: Instant, own_late: Option<(Instant, Duration)>) -> String {
        let ms = |t: Instant| t.duration_since(self.start).as_millis() as u64;
        let now = ms(Instant::now());
        let control = match e {
            WireError::TimedOut => watchdog::Control::Open,
            WireError::Closed => watchdog::Control::Closed {
                at_ms: now,
                reset: false,
            },
            _ => watchdog::Control::Closed {
                at_ms: now,
                reset: true,
            },
        };
        let late = own_late
            .filter(|(at, _)| at.elapsed() <= self.quiet)
            .map(|(_, late)| late);
        let stopped = self.clock.stalled(OWN_LATE.max(self.quiet / 2), self.quiet);
        let stalled = late.max(stopped).map(|d| d.as_millis() as u64);
        let v = watchdog::coordinator_lost_or_own_stall(
            &self.me,
            &self.coordinator,
            control,
            ms(last_heard),
            now,
            self.quiet.as_millis() as u64 - 1,
            stalled,
        );
        match v {
            Some(v) => verdict_line(&v),
            None => BootstrapError::CoordinatorLost {
                coordinator: self.coordinator.clone(),
                why: e.to_string(),
            }
            .to_string(),
        }
    }
}

/// A verdict as one line for a rank's stderr: the message, then what to run next.
pub(crate) fn verdict_line(v: &Verdict) -> String {
    match &v.next {
        Some(n) => format!("{}\n  next: {n}", v.message),
        None => v.message.clone(),
    }
}

impl Session {
    /// The next message from the coordinator within `timeout` (None: nothing came); an
    /// abort, or the reader's end (coordinator lost), is an error.
    pub fn recv(&self, timeout: Duration) -> Result<Option<Msg>, BootstrapError> {
        match self
            .inbox
            .lock()
            .map_err(|_| BootstrapError::Aborted("control inbox poisoned".into()))?
            .recv_timeout(timeout)
        {
            Ok(Msg::Abort { reason }) => Err(BootstrapError::Aborted(reason)),
            Ok(m) => Ok(Some(m)),
            Err(RecvTimeoutError::Timeout) => match self.abort.reason() {
                Some(r) => Err(BootstrapError::Aborted(r)),
                None => Ok(None),
            },
            Err(RecvTimeoutError::Disconnected) => {
                Err(BootstrapError::Aborted(self.abort.reason().unwrap_or_else(
                    || format!("the coordinator at {} is gone", self.coordinator),
                )))
            }
        }
    }

    /// Close the control connection now (both directions), as a dying process would.
    pub fn close(&self) {
        if let Ok(s) = self.writer.lock() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    pub fn send(&self, msg: &Msg) -> Result<(), BootstrapError> {
        let mut s = self
            .writer
            .lock()
            .map_err(|_| BootstrapError::Aborted("control writer poisoned".into()))?;
        wire::write_msg(&mut *s, msg).map_err(|source| BootstrapError::Wire {
            peer: self.coordinator.clone(),
            source,
        })
    }

    /// Wait for `Go` (everyone's links are up) or an abort.
    pub(crate) fn wait_go(&self, timeout: Duration) -> Result<(), BootstrapError> {
        match self
            .inbox
            .lock()
            .map_err(|_| BootstrapError::Aborted("control inbox poisoned".into()))?
            .recv_timeout(timeout)
        {
            Ok(Msg::Go) => Ok(()),
            Ok(Msg::Abort { reason }) => Err(BootstrapError::Aborted(reason)),
            Ok(other) => Err(BootstrapError::Aborted(format!(
                "unexpected {} from the coordinator",
                other.kind()
            ))),
            Err(_) => Err(BootstrapError::Aborted(format!(
                "not every rank connected its data links within {} s",
                timeout.as_secs()
            ))),
        }
    }

    /// Wait for the end of the run: `Ok(failed)` or the abort reason. The coordinator
    /// answers within its own deadlines, so `timeout` only guards against a lost one.
    /// `Ok((failed, verdicts, more))`: `more` verdicts were counted, not sent.
    pub(crate) fn wait_done(&self, timeout: Duration) -> Result<(bool, Vec<Verdict>, u64), BootstrapError> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self
                .inbox
                .lock()
                .map_err(|_| BootstrapError::Aborted("control inbox poisoned".into()))?
                .recv_timeout(left)
            {
                Ok(Msg::Done {
                    failed,
                    verdicts,
                    more_verdicts,
                }) => return Ok((failed, verdicts, more_verdicts)),
                Ok(Msg::Abort { reason }) => return Err(BootstrapError::Aborted(reason)),
                Ok(_) => continue,
                Err(_) => {
                    return Err(self
                        .abort
                        .reason()
                        .map(BootstrapError::Aborted)
                        .unwrap_or_else(|| BootstrapError::CoordinatorLost {
                            coordinator: self.coordinator.clone(),
                            why: "no end-of-run message".into(),
                        }));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clock that has not run for 3 s (this thread ran first after a stop), or that ran
    /// again after a 2 s gap: the process did not run that long; a gap below `least` or
    /// ended before `within` is no stall.
    #[test]
    fn the_run_clock_says_how_long_the_process_did_not_run() {
        let now = Instant::now();
        let still = RunClock {
            state: Mutex::new((now - Duration::from_secs(3), None)),
        };
        let s = still.stalled(OWN_LATE, Duration::from_secs(3)).unwrap();
        assert!(
            s >= Duration::from_millis(2800) && s < Duration::from_secs(4),
            "{s:?}"
        );
        let c = RunClock {
            state: Mutex::new((now, None)),
        };
        c.tick(now + TICK + Duration::from_millis(300));
        assert_eq!(c.stalled(OWN_LATE, Duration::from_secs(3)), None);
        let later = now + Duration::from_secs(2) + TICK;
        c.tick(later);
        // From the last wakeup (now + 400 ms) to `later`, less the tick itself.
        let gap = Duration::from_millis(1600);
        assert_eq!(c.state.lock().unwrap().1, Some((later, gap)));
        assert_eq!(c.stalled(Duration::from_secs(5), Duration::from_secs(3)), None);
        // Ended `later` (in the future of now here): within any window.
        assert_eq!(c.stalled(OWN_LATE, Duration::from_secs(3)), Some(gap));
    }

    #[test]
    fn a_connection_attempt_waits_250_ms_then_doubles_to_2_s() {
        let ms: Vec<u128> = (0..6).map(|k| connect_attempt(k).as_millis()).collect();
        assert_eq!(ms, [250, 500, 1000, 2000, 2000, 2000]);
        assert_eq!(connect_attempt(u32::MAX), Duration::from_secs(2));
    }

    fn info(rank: Rank) -> RankInfo {
        RankInfo {
            neighbor: None,
            port_max: None,
            rails: Vec::new(),
            node: None,
            rank,
            host: format!("h{rank}"),
            address: "127.0.0.1:1".into(),
            device: None,
            transport: "tcp".into(),
            pid: None,
            capabilities: Vec::new(),
        }
    }

    #[test]
    fn table_parts_are_bounded_and_in_rank_order() {
        let mut t = Vec::new();
        add_table_part(&mut t, vec![info(0), info(1)], 4).unwrap();
        add_table_part(&mut t, vec![info(3)], 4).unwrap();
        assert_eq!(t.iter().map(|i| i.rank).collect::<Vec<_>>(), vec![0, 1, 3]);
        let e = add_table_part(&mut t, vec![info(2)], 4).unwrap_err();
        assert_eq!(e, "rank 2 is out of range or out of order");
        let e = add_table_part(&mut t, vec![info(9)], 4).unwrap_err();
        assert!(e.contains("rank 9"), "{e}");
        let e = add_table_part(&mut Vec::new(), (0..5).map(info).collect(), 4).unwrap_err();
        assert_eq!(e, "more than 4 entries for a world of 4");
    }

    #[test]
    fn a_rail_rings_node_ranks_must_rise_with_its_ranks() {
        let at = |r: Rank, n: Rank| RankInfo {
            neighbor: None,
            port_max: None,
            node: Some(n),
            ..info(r)
        };
        let mut t = Vec::new();
        add_table_part(&mut t, vec![at(0, 0), at(1, 2)], 3).unwrap();
        add_table_part(&mut t, vec![at(2, 5)], 3).unwrap();
        assert_eq!(t.iter().map(RankInfo::shown).collect::<Vec<_>>(), [0, 2, 5]);
        for (part, bad) in [
            (vec![at(0, 0), at(1, 0)], 1),
            (vec![at(0, 3), at(1, 3)], 1),
            (vec![at(0, 0), at(2, 1)], 2),
        ] {
            let e = add_table_part(&mut Vec::new(), part, 3).unwrap_err();
            assert!(e.starts_with(&format!("rank {bad} says it is node ")), "{e}");
        }
    }

    fn hello(rank: Rank) -> Hello {
        Hello {
            protocol: wire::PROTOCOL,
            rank,
            world: 2,
            token: "t".into(),
            info: info(rank),
            capabilities: vec!["tcp".into()],
            params: "p".into(),
        }
    }

    /// A stand-in coordinator: the first `resets` connections are reset (RST) once their
    /// hello arrived, the next one gets its table. Returns how many connections came.
    fn resetting_coordinator(resets: usize) -> (String, thread::JoinHandle<usize>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let h = thread::spawn(move || {
            l.set_nonblocking(true).unwrap();
            let until = Instant::now() + Duration::from_secs(10);
            let mut n = 0;
            while Instant::now() < until {
                let Ok((s, _)) = l.accept() else {
                    thread::sleep(Duration::from_millis(5));
                    continue;
                };
                s.set_nonblocking(false).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                n += 1;
                let mut r = &s;
                let Ok(Msg::Hello(h)) = wire::read_msg(&mut r) else {
                    return n;
                };
                if n <= resets {
                    // SO_LINGER 0: the close is a reset, as a dying rank 0 or a middlebox sends.
                    socket2::SockRef::from(&s)
                        .set_linger(Some(Duration::ZERO))
                        .unwrap();
                    drop(s);
                    continue;
                }
                let mut w = &s;
                let table = Msg::Table {
                    ranks: vec![info(0), h.info],
                    more: false,
                    shared_transport: Some("tcp".into()),
                };
                wire::write_msg(&mut w, &table).unwrap();
                thread::sleep(Duration::from_millis(200));
                return n;
            }
            n
        });
        (addr, h)
    }

    /// Issue 18: a rank whose connection is reset before its table arrived connects again
    /// (within its join window) and gets its table.
    #[test]
    fn a_reset_before_the_table_is_retried() {
        let (addr, coord) = resetting_coordinator(1);
        let s = join_within(&addr, hello(1), Duration::from_secs(5), Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.table.iter().map(|i| i.rank).collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(coord.join().unwrap(), 2);
    }

    /// The retries are bounded: a coordinator that resets every connection is named as lost,
    /// with the count, well within the join window.
    #[test]
    fn resets_are_retried_a_bounded_number_of_times() {
        let (addr, coord) = resetting_coordinator(usize::MAX);
        let t0 = Instant::now();
        let e = join_within(&addr, hello(1), Duration::from_secs(30), Duration::from_secs(5))
            .err()
            .expect("every connection was reset");
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
        assert!(lost_before_table(&e), "{e}");
        let m = e.to_string();
        assert!(
            m.contains(&format!(
                "connected again {MAX_JOIN_RETRIES} times before its table arrived"
            )),
            "{m}"
        );
        drop(coord);
    }
}
