//! `--rails` across nodes: one control connection per node. Every node says hello once on
//! the job's coordinator port, declaring its rail slots (the same hardened door as a ring's
//! coordinator: [`coordinator::node_door`]); rank 0 plans every rail's ring from the
//! declarations ([`railplan::plan`]) and answers each node with its seats. The connection
//! then stays open for the whole run and carries every rail's control messages, each tagged
//! with its rail ([`Msg::Rail`]): on rank 0 the [`Hub`] hands each rail's messages to that
//! rail's coordinator in the same process, with no socket between them (a node's rail rank
//! is a relayed connection of the coordinator's event loop: [`crate::ring::relay`]); on the
//! node a relay ([`NodeRelay`]) hands them to that rail's rank over loopback. At the end
//! rank 0 sends the job's verdict over every rail to every node ([`Msg::JobDone`]). Every
//! wait has a deadline.

use std::collections::BTreeMap;
use std::io::{self, Read};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::ring::control::{self, Happening, Plane, QueueError, frame, take_frames};
use crate::ring::coordinator::{self, CoordinatorConfig, Event, Limits, NodeDoor};
use crate::ring::gate;
use crate::ring::launcher::Identity;
use crate::ring::model::{RailPort, Rank, RankInfo};
use crate::text::printable;
use crate::ring::options::Options;
use crate::ring::railplan::{self, Declaration, RailSel, Roster, Seat};
pub use crate::ring::relay::tag_frame;
use crate::ring::relay::{self, Epoch, In, Inbox, Out, RailLink, is_hello, lock, rail_body};
use crate::ring::rendezvous::{self, BootstrapError, HEARTBEAT, window_end};
use crate::ring::wire::{self, Hello, Msg, WireError};

/// The node door's token: a rank's own hello (a rail's ring, `--local`) is refused there.
pub fn node_token(token: &str) -> String {
    format!("{token}/rails")
}

/// The options a node's hello carries on the door: the run's, and its `--rails`.
fn door_params(opts: &Options, sel: &RailSel) -> String {
    format!("{} rails={}", opts.canonical(), sel.canonical())
}

/// The node door's configuration: the job's nodes, its token, rank 0's options (with its
/// `--rails`) and join window; no judge (each rail's coordinator judges its ring).
pub fn door_config(id: &Identity, opts: &Options, sel: &RailSel) -> CoordinatorConfig {
    CoordinatorConfig {
        world: id.world,
        token: node_token(&id.token),
        timeout: opts.timeout(),
        join_timeout: opts.join_timeout(),
        advertised: id.coordinator.clone(),
        params: door_params(opts, sel),
        judge: None,
        scan: None,
        on_row: None,
        rings: None,
        nodes: Vec::new(),
        silent: Default::default(),
        silent_wait: Duration::ZERO,
        relay: None,
        interrupt: Some(crate::ring::interrupt::process()),
    }
}

/// A node's hello on the node door: its rank, and every rail slot it has (driven or not).
pub(crate) fn node_hello(
    id: &Identity,
    host: String,
    slots: &[RailPort],
    (opts, sel): (&Options, &RailSel),
) -> Hello {
    Hello {
        protocol: wire::PROTOCOL,
        rank: id.rank,
        world: id.world,
        token: node_token(&id.token),
        info: RankInfo {
            rank: id.rank,
            host,
            address: String::new(),
            device: None,
            transport: String::new(),
            pid: Some(std::process::id()),
            capabilities: Vec::new(),
            rails: slots.to_vec(),
            node: None,
            // Each rail's rank says its own port's neighbour and maximum in its relayed hello.
            neighbor: None,
            port_max: None,
        },
        capabilities: Vec::new(),
        params: door_params(opts, sel),
    }
}

/// How long the hub writes what is queued once the job's verdict went out.
const FINISH_DRAIN: Duration = Duration::from_secs(2);

/// Rank 0's side once the nodes declared: the plan, and the connections to relay.
pub struct Hub {
    pub roster: Roster,
    door: NodeDoor,
    /// How long a node's queued messages may wait untaken (see `Mux::stall`).
    stall: Duration,
    /// The lines of what the door saw (joins, refusals), for the log.
    pub events: Vec<Event>,
}

/// Rank 0: gather every node's declaration on `listener` (rank 0's own is `me`) until all
/// `cfg.world` nodes declared or the join window ended, and plan the rails' rings.
pub fn gather(
    listener: TcpListener,
    cfg: &CoordinatorConfig,
    me: Declaration,
    wanted: Option<&[u32]>,
) -> Result<Hub, String> {
    let info = RankInfo {
        rank: me.rank,
        host: me.host.clone(),
        address: String::new(),
        device: None,
        transport: String::new(),
        pid: Some(std::process::id()),
        capabilities: Vec::new(),
        rails: me.slots.clone(),
        node: None,
        neighbor: None,
        port_max: None,
    };
    let door = coordinator::node_door(listener, cfg, info, Limits::default())?;
    let nodes: BTreeMap<Rank, Declaration> = door
        .seen
        .values()
        .map(|i| {
            let d = Declaration {
                rank: i.rank,
                host: i.host.clone(),
                slots: i.rails.clone(),
            };
            (i.rank, d)
        })
        .collect();
    let rings = railplan::plan(&nodes, cfg.world, wanted);
    let need = files_needed(cfg.world, &rings);
    let nofile = gate::raise_fd_limit();
    if nofile < need {
        door.stop.store(true, Ordering::Relaxed);
        return Err(format!(
            "coordinator: {} nodes on {} rails need {need} open files on rank 0 (each node's connection, \
             and each rail's coordinator), but its open-file limit (RLIMIT_NOFILE, \
             raised to the hard limit) is {nofile}: raise the hard limit to at least {need} on rank 0's \
             host (`ulimit -Hn {need}` as root before starting, LimitNOFILE={need} in a systemd unit)",
            cfg.world,
            rings.len()
        ));
    }
    let silent = (0..cfg.world).filter(|r| !nodes.contains_key(r)).collect();
    let events = door.rep.events.clone();
    Ok(Hub {
        roster: Roster {
            world: cfg.world,
            nodes,
            rings,
            silent,
        },
        door,
        stall: rendezvous::silence(cfg.timeout),
        events,
    })
}

/// Open files rank 0 needs for `world` nodes and these rails' rings: each node's one
/// connection (its rails' coordinators reach it through the hub in this process, no socket
/// between them), and each rail coordinator's own room (its listener for rank 0's own rank of
/// the rail, its event loop). Pure.
pub fn files_needed(world: u32, rings: &BTreeMap<u32, Vec<Rank>>) -> u64 {
    let rails = rings.values().filter(|r| r.len() >= 2).count() as u64;
    coordinator::files_needed(world) + 16 * rails
}

/// What the running hub is told.
enum Cmd {
    /// The job's verdict: sent to every node, then the hub ends.
    JobDone(Msg),
}

/// The running hub: its thread, the way to end it, and each rail's end.
pub struct HubHandle {
    cmd: Sender<Cmd>,
    thread: Option<thread::JoinHandle<Vec<Event>>>,
    links: BTreeMap<u32, RailLink>,
}

impl Hub {
    /// Seat every node that declared and relay each rail's ring (of two nodes or more) to its
    /// coordinator, which takes its end with [`HubHandle::link`], until [`HubHandle::finish`].
    pub fn start(self) -> HubHandle {
        let Hub {
            roster, door, stall, ..
        } = self;
        let NodeDoor {
            mut plane,
            rx,
            stop,
            mut rep,
            ..
        } = door;
        let shared = Arc::new(relay::Hub::default());
        shared.out.set_waker(plane.waker());
        let now = Instant::now();
        let mut seats = railplan::all_seats(&roster.rings, roster.world);
        for (&r, _) in roster.nodes.iter().filter(|(r, _)| **r != 0) {
            if let Some(s) = plane.shared_socket(r) {
                lock(&shared.socks).insert(r, s);
            }
            let seats = seats.get_mut(r as usize).map(std::mem::take).unwrap_or_default();
            if let Ok(f) = frame(&Msg::Seats { seats }) {
                let _ = plane.send(r, f, now);
            }
        }
        let rings: Vec<(u32, &Vec<Rank>)> = (roster.rings.iter())
            .filter(|(_, ring)| ring.len() >= 2)
            .map(|(&k, ring)| (k, ring))
            .collect();
        let rails = rings.len() as u32;
        let links: BTreeMap<u32, RailLink> = rings
            .into_iter()
            .map(|(rail, ring)| {
                let link = RailLink {
                    rail,
                    rails,
                    ring: Arc::new(ring.clone()),
                    inbox: Arc::default(),
                    hub: shared.clone(),
                };
                (rail, link)
            })
            .collect();
        let mut mux = Mux {
            n: roster.world,
            rails: links
                .values()
                .map(|l| (l.rail, RailEnd::new(l, roster.world)))
                .collect(),
            peers: rep.control_peers.clone(),
            plane,
            shared,
            stall,
        };
        let (cmd, cmd_rx) = mpsc::channel();
        let gathered = rep.events.len();
        let thread = thread::spawn(move || {
            mux.run(&cmd_rx, &rx, &mut rep);
            stop.store(true, Ordering::Relaxed);
            // What the door saw after the gathering (latecomers turned away), and the count
            // of refusals not listed.
            rep.close_events();
            rep.events.split_off(gathered)
        });
        HubHandle {
            cmd,
            thread: Some(thread),
            links,
        }
    }
}

impl HubHandle {
    /// Rail `rail`'s end of the hub, for its coordinator ([`CoordinatorConfig::relay`]);
    /// None: no ring of two nodes on that rail.
    pub fn link(&self, rail: u32) -> Option<RailLink> {
        self.links.get(&rail).cloned()
    }

    /// Send the job's verdict to every node, write it out (bounded), end the hub; returns
    /// what its door refused meanwhile.
    pub fn finish(mut self, failed: bool, why: Option<String>) -> Vec<Event> {
        let why = why.map(|w| printable(&w, 2000));
        let _ = self.cmd.send(Cmd::JobDone(Msg::JobDone { failed, why }));
        self.thread.take().and_then(|t| t.join().ok()).unwrap_or_default()
    }
}

impl Drop for HubHandle {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = self.cmd.send(Cmd::JobDone(Msg::JobDone {
                failed: true,
                why: Some("rank 0 ended without a verdict".into()),
            }));
            let _ = t.join();
        }
    }
}

/// The hub's side of one rail: its coordinator's inbox, each node's place on the rail's
/// ring, and each place's current relayed connection.
struct RailEnd {
    inbox: Arc<Inbox>,
    /// The ring rank of node i (`NONE`: not on this rail's ring).
    place: Vec<Rank>,
    /// The generation of each ring rank's relayed connection (0: it never said hello).
    epochs: Vec<Epoch>,
    /// What this turn of the loop hands the coordinator, at once.
    batch: Vec<In>,
}

const NONE: Rank = Rank::MAX;

impl RailEnd {
    fn new(l: &RailLink, world: u32) -> RailEnd {
        let mut place = vec![NONE; world as usize];
        for (r, &node) in l.ring.iter().enumerate() {
            if let Some(p) = place.get_mut(node as usize) {
                *p = r as Rank;
            }
        }
        RailEnd {
            inbox: l.inbox.clone(),
            place,
            epochs: vec![0; l.ring.len()],
            batch: Vec::new(),
        }
    }

    /// Node i's ring rank and its current relayed connection (None: not on this ring, or
    /// it never said hello).
    fn open(&self, i: Rank) -> Option<(Rank, Epoch)> {
        let r = *self.place.get(i as usize).filter(|&&r| r != NONE)?;
        let epoch = *self.epochs.get(r as usize).filter(|&&g| g != 0)?;
        Some((r, epoch))
    }
}

/// The hub's event loop: connection i is node i's; each rail's coordinator runs in its own
/// thread and is reached through its [`RailEnd`].
struct Mux {
    plane: Plane,
    n: u32,
    rails: BTreeMap<u32, RailEnd>,
    /// Each node's control connection, as the door saw it (named in its rails' events).
    peers: BTreeMap<Rank, String>,
    shared: Arc<relay::Hub>,
    /// How long a node's queued messages may wait with no byte taken before its rails'
    /// coordinators are told it does not read (theirs, `silence(timeout)`).
    stall: Duration,
}

/// What the hub cuts off a node's connection: a rail's message in this crate's encoding, as
/// its rail and body (one copy, never parsed here), or any other frame whole.
enum NodeUnit {
    Tagged(u32, Vec<u8>),
    Other(Vec<u8>),
}

impl control::Unit for NodeUnit {
    fn cut(buf: &mut Vec<u8>, out: &mut Vec<NodeUnit>) -> Result<(), WireError> {
        control::cut_frames(buf, |f| {
            out.push(match rail_body(f) {
                Some((rail, body)) => NodeUnit::Tagged(rail, body.to_vec()),
                None => NodeUnit::Other(f.to_vec()),
            });
            Ok(())
        })
    }
    fn from_body(body: &[u8]) -> Result<NodeUnit, WireError> {
        Ok(NodeUnit::Other(wire::frame_of(&[body])?))
    }
}

fn is_reset(e: &WireError) -> bool {
    !matches!(e, WireError::Closed)
}

/// How a relayed connection's end reads to its coordinator: a close, or a reset.
fn end_of(reset: bool) -> WireError {
    if reset {
        WireError::Io(io::ErrorKind::ConnectionReset.into())
    } else {
        WireError::Closed
    }
}

impl Mux {
    fn run(
        &mut self,
        cmd: &Receiver<Cmd>,
        late: &Receiver<gate::Incoming>,
        rep: &mut coordinator::CoordinatorReport,
    ) {
        let ping = frame(&Msg::Ping).ok();
        let mut next_ping = Instant::now();
        let mut ending: Option<Instant> = None;
        loop {
            for h in self.plane.wait_as::<NodeUnit>(Duration::from_millis(50)) {
                match h {
                    Happening::Msg(i, NodeUnit::Tagged(rail, body), at) => {
                        self.relay_to_rail(i, rail, body, at)
                    }
                    Happening::Msg(i, NodeUnit::Other(f), at) => self.node_frame(i, &f, at),
                    Happening::Closed(i, e) => self.node_gone(i, is_reset(&e)),
                }
            }
            // Said once what was read is in the inboxes (see `relay::Hub::caught_up`).
            let caught_up = self.plane.caught_up();
            self.hand_over();
            self.shared.set_caught_up(caught_up);
            if self.plane.take_woken() {
                turn_away(late, rep);
            }
            let now = Instant::now();
            self.take_from_rails(now);
            self.plane.flush_backlog(now);
            self.after_writes(now);
            // Each node hears from rank 0 while only other nodes' rails still run: well within
            // the silence its relay allows, not per heartbeat (16,384 writes each time).
            if let Some(p) = ping.as_ref().filter(|_| now >= next_ping) {
                self.plane.ping_idle(p, 0..self.n, now, |_| true);
                next_ping = now + (self.stall / 4).max(HEARTBEAT);
            }
            self.hand_over();
            let told = match cmd.try_recv() {
                Ok(Cmd::JobDone(m)) => Some(Some(m)),
                Err(mpsc::TryRecvError::Disconnected) => Some(None),
                Err(mpsc::TryRecvError::Empty) => None,
            };
            if let Some(m) = told.filter(|_| ending.is_none()) {
                ending = Some(now + FINISH_DRAIN);
                if let Some(f) = m.and_then(|m| frame(&m).ok()) {
                    for i in 1..self.n {
                        let _ = self.plane.send(i, f.clone(), now);
                    }
                }
            }
            if ending.is_some_and(|t| now >= t || self.plane.queued() == 0) {
                lock(&self.shared.socks).clear();
                return;
            }
        }
    }

    /// Each rail's batch to its coordinator (one lock and at most one wake-up per rail).
    fn hand_over(&mut self) {
        for end in self.rails.values_mut() {
            end.inbox.push_all(&mut end.batch);
        }
    }

    /// A node's frame that is not a rail's message in this crate's encoding (those are
    /// handed over by their tag, unparsed: [`NodeUnit`]): decoded, one of its rails' messages
    /// in another encoding, or the end of one of its rails' connections.
    fn node_frame(&mut self, i: Rank, f: &[u8], at: Instant) {
        match wire::decode(&f[8..]) {
            Ok(Msg::Rail { rail, msg }) => match frame(&msg) {
                Ok(inner) => self.relay_to_rail(i, rail, inner[8..].to_vec(), at),
                Err(_) => self.tell_closed(i, rail, true),
            },
            Ok(Msg::RailClosed { rail, reset }) => {
                if let Some(end) = self.rails.get_mut(&rail)
                    && let Some((r, epoch)) = end.open(i)
                {
                    end.batch.push(In::Closed {
                        r,
                        epoch,
                        err: end_of(reset),
                    });
                }
            }
            Ok(_) => {}
            // Garbage ends the node's connection, as the door's reader would.
            Err(_) => self.node_gone(i, true),
        }
    }

    /// Node i's message `body` for its rail `rail`'s coordinator (a hello opens a new relayed
    /// connection).
    fn relay_to_rail(&mut self, i: Rank, rail: u32, body: Vec<u8>, at: Instant) {
        let Some(end) = self.rails.get_mut(&rail) else {
            return self.tell_closed(i, rail, true);
        };
        let Some(r) = end.place.get(i as usize).copied().filter(|&r| r != NONE) else {
            return self.tell_closed(i, rail, true);
        };
        if is_hello(&body) {
            // A hello opens a new connection: the rank's earlier one (if any) ended.
            let old = end.epochs[r as usize];
            if old != 0 {
                let err = WireError::Closed;
                end.batch.push(In::Closed { r, epoch: old, err });
            }
            let epoch = old.wrapping_add(1).max(1);
            end.epochs[r as usize] = epoch;
            let peer = self.peers.get(&i).cloned().unwrap_or_else(|| format!("node {i}"));
            end.batch.push(In::Hello { r, epoch, peer, body });
            return;
        }
        // Before its hello there is no connection to speak on.
        if let Some(epoch) = end.epochs.get(r as usize).copied().filter(|&g| g != 0) {
            end.batch.push(In::Msg { r, epoch, body, at });
        }
    }

    /// What the rails' coordinators handed over: frames queued for their nodes (written
    /// together, [`Plane::flush_backlog`]), and relayed connections they ended, told to the
    /// node (unless a newer connection of that rail rank said hello since).
    fn take_from_rails(&mut self, now: Instant) {
        for item in self.shared.out.take() {
            match item {
                Out::Frame { node, frame, table } => match self.plane.queue(node, frame, table, now) {
                    Ok(()) | Err(QueueError::Gone) => {}
                    Err(QueueError::Full { queued, .. }) => self.not_reading(node, queued, Duration::ZERO),
                },
                Out::Close {
                    node,
                    rail,
                    epoch,
                    reset,
                } => {
                    let current = self.rails.get(&rail).and_then(|e| e.open(node));
                    if current.is_some_and(|(_, g)| g == epoch)
                        && let Ok(f) = frame(&Msg::RailClosed { rail, reset })
                    {
                        let _ = self.plane.queue(node, f, None, now);
                    }
                }
            }
        }
    }

    /// After the writes: tables that went out, and nodes that take nothing.
    fn after_writes(&mut self, now: Instant) {
        for (_, (rail, r, epoch), at) in self.plane.take_marks() {
            if let Some(end) = self.rails.get_mut(&rail) {
                end.batch.push(In::TableOut { r, epoch, at });
            }
        }
        for (node, queued, waited) in self.plane.stuck(now, self.stall) {
            self.not_reading(node, queued, waited);
        }
    }

    /// Node i takes none of its control messages: each of its rails' coordinators is told
    /// (each names its rank as not reading), and its connection is closed.
    fn not_reading(&mut self, i: Rank, queued: usize, waited: Duration) {
        for end in self.rails.values_mut() {
            if let Some((r, epoch)) = end.open(i) {
                end.batch.push(In::Stuck {
                    r,
                    epoch,
                    queued,
                    waited,
                });
            }
        }
        self.plane.remove(i);
        lock(&self.shared.socks).remove(&i);
    }

    fn tell_closed(&mut self, i: Rank, rail: u32, reset: bool) {
        if let Ok(f) = frame(&Msg::RailClosed { rail, reset }) {
            let _ = self.plane.send(i, f, Instant::now());
        }
    }

    /// Node i's connection ended: each of its rails' coordinators sees the same end.
    fn node_gone(&mut self, i: Rank, reset: bool) {
        self.plane.remove(i);
        lock(&self.shared.socks).remove(&i);
        for end in self.rails.values_mut() {
            if let Some((r, epoch)) = end.open(i) {
                end.batch.push(In::Closed {
                    r,
                    epoch,
                    err: end_of(reset),
                });
            }
        }
    }
}

/// Declarations read after the join window: told why, never closed unanswered.
fn turn_away(late: &Receiver<gate::Incoming>, rep: &mut coordinator::CoordinatorReport) {
    while let Ok((s, peer, hello)) = late.try_recv() {
        let reason = match hello {
            Ok(_) => LATE.to_string(),
            Err(e) => coordinator::door_reason(e),
        };
        coordinator::refuse_tcp(rep, &s, &peer.to_string(), &reason);
    }
}

/// Why a declaration read after rank 0's join window is not seated.
pub(crate) const LATE: &str = "rank 0's join window (--join-timeout) ended before this node's rails declaration was \
                        read; its rails are named missing on every rail's ring";

// ------------------------------------------------------------------ a node's side

/// Another node: declare this node's rails to rank 0 at `coordinator` (connecting again
/// while rank 0 is not up or its door is busy, within the join window; once seated, waiting
/// on rank 0's window) and return its seats and the connection, which stays open.
pub(crate) fn declare(
    coordinator: &str,
    hello: Hello,
    join_timeout: Duration,
) -> Result<(Vec<Seat>, TcpStream), BootstrapError> {
    let start = Instant::now();
    let mut retries = 0;
    loop {
        match declare_once(coordinator, &hello, join_timeout, start) {
            Err(BootstrapError::Rejected { reason, .. })
                if reason.starts_with(gate::BUSY) && start.elapsed() < join_timeout =>
            {
                thread::sleep(Duration::from_millis(100));
            }
            Err(e)
                if rendezvous::lost_before_table(&e)
                    && retries < rendezvous::MAX_JOIN_RETRIES
                    && start.elapsed() < join_timeout =>
            {
                retries += 1;
                thread::sleep(Duration::from_millis(100 * retries as u64));
            }
            other => return other,
        }
    }
}

fn declare_once(
    coordinator: &str,
    hello: &Hello,
    join_timeout: Duration,
    start: Instant,
) -> Result<(Vec<Seat>, TcpStream), BootstrapError> {
    let wire_err = |source| BootstrapError::Wire {
        peer: coordinator.to_string(),
        source,
    };
    let s = rendezvous::connect_hello(coordinator, hello, (join_timeout, Duration::from_secs(5)), start)?;
    // Rank 0's window, once it says so; until then this node's own.
    let mut deadline = start + join_timeout + rendezvous::JOIN_GRACE;
    loop {
        // Past the deadline, what already waits is still read (this process may have been
        // stopped while its seats came).
        let left = deadline.saturating_duration_since(Instant::now());
        s.set_read_timeout(Some(left.max(Duration::from_millis(10))))
            .map_err(|e| wire_err(e.into()))?;
        match wire::read_msg(&mut &s) {
            Err(WireError::TimedOut) if Instant::now() >= deadline => {
                return Err(BootstrapError::NoTable {
                    coordinator: coordinator.to_string(),
                    secs: join_timeout.as_secs(),
                });
            }
            Ok(Msg::Seats { seats }) => {
                return check_seats(&seats, hello.world)
                    .map(|_| (seats, s))
                    .map_err(|e| wire_err(WireError::Malformed(format!("the seats from rank 0: {e}"))));
            }
            Ok(Msg::Window { closes_in_ms }) => deadline = deadline.max(window_end(closes_in_ms)),
            Ok(Msg::Reject { reason }) => {
                return Err(BootstrapError::Rejected {
                    coordinator: coordinator.to_string(),
                    reason: printable(&reason, 400),
                });
            }
            Ok(Msg::Abort { reason }) => return Err(BootstrapError::Aborted(printable(&reason, 2000))),
            Ok(_) | Err(WireError::TimedOut) => continue,
            Err(WireError::Closed) => {
                return Err(BootstrapError::CoordinatorLost {
                    coordinator: coordinator.to_string(),
                    why: "closed before this node's seats came".into(),
                });
            }
            Err(e) => return Err(wire_err(e)),
        }
    }
}

/// Seats as a node checks them: bounded, each rail once, each rank inside its ring, no ring
/// larger than the job. Pure.
pub(crate) fn check_seats(seats: &[Seat], world: u32) -> Result<(), String> {
    let max = crate::ring::model::MAX_RAILS as usize;
    if seats.len() > max {
        return Err(format!("{} seats, at most {max}", seats.len()));
    }
    for (i, s) in seats.iter().enumerate() {
        if s.rail >= crate::ring::model::MAX_RAILS || seats[..i].iter().any(|t| t.rail == s.rail) {
            return Err(format!("rail {} is out of range or seated twice", s.rail));
        }
        if s.world > world || s.rank >= s.world {
            return Err(format!(
                "rail {}: rank {} of {} does not fit a job of {world} nodes",
                s.rail, s.rank, s.world
            ));
        }
    }
    Ok(())
}

/// A node's relay: each of its rails' ranks joins that rail's coordinator through a loopback
/// listener here, and their frames travel on the node's one connection, tagged.
pub(crate) struct NodeRelay {
    /// Each seated rail's loopback address (its rank joins there).
    pub addrs: BTreeMap<u32, String>,
    job: Receiver<(bool, Option<String>)>,
    stop: Arc<AtomicBool>,
}

type Locals = Arc<Mutex<BTreeMap<u32, TcpStream>>>;

/// How long one blocking read or accept of the relay waits before it looks at `stop`.
const SLICE: Duration = Duration::from_millis(100);

impl NodeRelay {
    /// Start relaying node connection `s` for `seats`. `quiet`: how long rank 0 may say
    /// nothing (it pings every [`HEARTBEAT`]) before the relay gives it up.
    pub fn start(s: TcpStream, seats: &[Seat], quiet: Duration) -> io::Result<NodeRelay> {
        let stop = Arc::new(AtomicBool::new(false));
        let locals: Locals = Arc::default();
        let writer = Arc::new(Mutex::new(s.try_clone()?));
        s.set_write_timeout(Some(Duration::from_secs(5)))?;
        let mut addrs = BTreeMap::new();
        for seat in seats {
            let l = TcpListener::bind("127.0.0.1:0")?;
            addrs.insert(seat.rail, l.local_addr()?.to_string());
            let (stop, locals, writer, rail) = (stop.clone(), locals.clone(), writer.clone(), seat.rail);
            thread::spawn(move || accept_rail(l, rail, &locals, &writer, &stop));
        }
        let (tx, job) = mpsc::channel();
        {
            let (stop, locals) = (stop.clone(), locals.clone());
            thread::spawn(move || from_rank0(s, &locals, &tx, &stop, quiet));
        }
        Ok(NodeRelay { addrs, job, stop })
    }

    /// The job's verdict from rank 0 (failed, why), waiting at most `limit`, and no longer
    /// than rank 0 stays connected and talking (the reader gives up after its silence,
    /// `quiet`); None: rank 0 went away without one.
    pub(crate) fn job_verdict(&self, limit: Duration) -> Option<(bool, Option<String>)> {
        let r = self.job.recv_timeout(limit).ok();
        r.map(|(f, w)| (f, w.map(|w| printable(&w, 2000))))
    }
}

impl Drop for NodeRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Rail `rail`'s loopback listener: each connection its rank opens (a retried join opens
/// another) replaces the one before.
fn accept_rail(
    l: TcpListener,
    rail: u32,
    locals: &Locals,
    writer: &Arc<Mutex<TcpStream>>,
    stop: &AtomicBool,
) {
    if l.set_nonblocking(true).is_err() {
        return;
    }
    while !stop.load(Ordering::Relaxed) {
        let Ok((c, _)) = l.accept() else {
            thread::sleep(Duration::from_millis(20));
            continue;
        };
        let (Ok(()), Ok(r)) = (c.set_nonblocking(false), c.try_clone()) else {
            continue;
        };
        let _ = c.set_write_timeout(Some(Duration::from_secs(5)));
        let old = locals.lock().unwrap_or_else(|p| p.into_inner()).insert(rail, c);
        if let Some(o) = old {
            let _ = o.shutdown(Shutdown::Both);
        }
        let (locals, writer) = (locals.clone(), writer.clone());
        thread::spawn(move || from_rail_rank(r, rail, &locals, &writer));
    }
}

/// Write one message to rank 0, tagged; false: the connection is gone.
fn to_rank0(writer: &Mutex<TcpStream>, m: &Msg) -> bool {
    let mut w = writer.lock().unwrap_or_else(|p| p.into_inner());
    wire::write_msg(&mut *w, m).is_ok()
}

/// Frames read off `s` into `buf` (with `s`'s read timeout): Ok(None) when none came in time.
fn read_frames(s: &mut TcpStream, buf: &mut Vec<u8>, chunk: &mut [u8]) -> Result<Vec<Msg>, WireError> {
    let mut msgs = Vec::new();
    match s.read(chunk) {
        Ok(0) => Err(WireError::Closed),
        Ok(k) => {
            buf.extend_from_slice(&chunk[..k]);
            take_frames(buf, &mut msgs)?;
            Ok(msgs)
        }
        Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => Ok(msgs),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(msgs),
        Err(e) => Err(e.into()),
    }
}

/// One rail rank's connection: its frames to rank 0, tagged; its end is told to rank 0.
fn from_rail_rank(mut s: TcpStream, rail: u32, locals: &Locals, writer: &Mutex<TcpStream>) {
    let _ = s.set_read_timeout(None);
    let (mut buf, mut chunk) = (Vec::new(), vec![0u8; 64 << 10]);
    let reset = loop {
        match read_frames(&mut s, &mut buf, &mut chunk) {
            Ok(msgs) => {
                for m in msgs {
                    let tagged = Msg::Rail {
                        rail,
                        msg: Box::new(m),
                    };
                    if !to_rank0(writer, &tagged) {
                        let _ = s.shutdown(Shutdown::Both);
                        return;
                    }
                }
            }
            Err(e) => break is_reset(&e),
        }
    };
    // Only the rail's current connection speaks for it (a replaced one ends quietly).
    let mut g = locals.lock().unwrap_or_else(|p| p.into_inner());
    let same = g
        .get(&rail)
        .and_then(|c| Some((c.peer_addr().ok()?, s.peer_addr().ok()?)))
        .is_some_and(|(a, b)| a == b);
    if same {
        g.remove(&rail);
        drop(g);
        to_rank0(writer, &Msg::RailClosed { rail, reset });
    }
}

/// Close a rail rank's connection as rank 0's side ended it.
fn close_local(c: TcpStream, reset: bool) {
    if reset {
        let _ = socket2::SockRef::from(&c).set_linger(Some(Duration::ZERO));
        drop(c);
    } else {
        let _ = c.shutdown(Shutdown::Both);
    }
}

/// Rank 0's frames: each rail's to its rank; the job's verdict to [`NodeRelay::job_verdict`].
/// Ends when rank 0's connection ends or is silent `quiet` (every rail rank sees it end).
fn from_rank0(
    mut s: TcpStream,
    locals: &Locals,
    job: &Sender<(bool, Option<String>)>,
    stop: &AtomicBool,
    quiet: Duration,
) {
    let _ = s.set_read_timeout(Some(SLICE));
    let (mut buf, mut chunk) = (Vec::new(), vec![0u8; 64 << 10]);
    let mut heard = Instant::now();
    let reset = loop {
        if stop.load(Ordering::Relaxed) {
            break false;
        }
        let msgs = match read_frames(&mut s, &mut buf, &mut chunk) {
            Ok(m) => m,
            Err(e) => break is_reset(&e),
        };
        // Judged after a read: a process that was stopped reads what waited first.
        if !msgs.is_empty() {
            heard = Instant::now();
        } else if heard.elapsed() > quiet {
            break true;
        }
        for m in msgs {
            match m {
                Msg::Rail { rail, msg } => {
                    let mut g = locals.lock().unwrap_or_else(|p| p.into_inner());
                    let ok = g.get_mut(&rail).is_some_and(|c| wire::write_msg(c, &msg).is_ok());
                    if !ok && let Some(c) = g.remove(&rail) {
                        close_local(c, true);
                    }
                }
                Msg::RailClosed { rail, reset } => {
                    let c = locals.lock().unwrap_or_else(|p| p.into_inner()).remove(&rail);
                    if let Some(c) = c {
                        close_local(c, reset);
                    }
                }
                Msg::JobDone { failed, why } => {
                    let _ = job.send((failed, why));
                }
                _ => {}
            }
        }
    };
    let all = std::mem::take(&mut *locals.lock().unwrap_or_else(|p| p.into_inner()));
    for (_, c) in all {
        close_local(c, reset);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame holding `body` as it is.
    fn framed(body: &[u8]) -> Vec<u8> {
        wire::frame_of(&[body]).unwrap()
    }
    use crate::ring::rendezvous::JOIN_GRACE;

    fn slot(rail: u32) -> RailPort {
        RailPort {
            rail,
            device: format!("eth{}", rail + 1),
            port: None,
            netdev: Some(format!("eth{}", rail + 1)),
            state: Some("up".into()),
            usable: true,
            label: None,
            address: None,
        }
    }

    /// A node of the other mode (`--rails all` against a run without `--rails`, or the
    /// reverse) is refused at the door naming both option strings: the token cannot tell.
    #[test]
    fn a_node_of_the_other_rails_mode_is_refused_naming_both() {
        let id = |rank| Identity {
            rank,
            world: 2,
            coordinator: "198.18.0.10:29517".into(),
            token: "job".into(),
            source: crate::ring::launcher::Source::Flags,
            coordinator_source: "--coordinator".into(),
            token_source: "--token".into(),
        };
        let opts = Options {
            sizes: vec![1 << 20],
            iters: 5,
            warmup: 1,
            check: 1,
            channels: 2,
            timeout_secs: 30,
            join_timeout_secs: 60,
            slots: 4,
            slot_bytes: 1 << 20,
            scan: None,
            sweep: true,
        };
        let seen = BTreeMap::new();
        for (rank0, node) in [(RailSel::One, RailSel::All), (RailSel::All, RailSel::One)] {
            let door = door_config(&id(0), &opts, &rank0);
            let h = node_hello(&id(1), "node-b".into(), &[slot(0)], (&opts, &node));
            let e = crate::ring::coordinator::validate(&h, &door, &seen).unwrap_err();
            let (a, b) = (node.canonical(), rank0.canonical());
            assert!(
                e.contains(&format!(" rails={a}], rank 0 with [")) && e.ends_with(&format!(" rails={b}]")),
                "{e}"
            );
            let same = node_hello(&id(1), "node-b".into(), &[slot(0)], (&opts, &rank0));
            assert_eq!(crate::ring::coordinator::validate(&same, &door, &seen), Ok(()));
        }
        assert_eq!(RailSel::List(vec![3]).canonical(), "3,");
        assert_eq!(RailSel::List(vec![0, 3]).canonical(), "0,3");
        assert_eq!(RailSel::Count(4).canonical(), "4");
    }

    fn cfg(world: u32, join: Duration) -> CoordinatorConfig {
        CoordinatorConfig {
            world,
            token: node_token("job"),
            timeout: Duration::from_secs(5),
            join_timeout: join,
            advertised: "test".into(),
            params: "p".into(),
            judge: None,
            scan: None,
            on_row: None,
            rings: None,
            nodes: Vec::new(),
            silent: Default::default(),
            silent_wait: Duration::ZERO,
            relay: None,
            interrupt: None,
        }
    }

    fn hello(rank: Rank, world: u32) -> Hello {
        Hello {
            protocol: wire::PROTOCOL,
            rank,
            world,
            token: node_token("job"),
            info: RankInfo {
                rank,
                host: format!("node-{rank}"),
                address: String::new(),
                device: None,
                transport: String::new(),
                pid: None,
                capabilities: Vec::new(),
                rails: vec![slot(0), slot(1)],
                node: None,
                neighbor: None,
                port_max: None,
            },
            capabilities: Vec::new(),
            params: "p".into(),
        }
    }

    fn me() -> Declaration {
        Declaration {
            rank: 0,
            host: "node-0".into(),
            slots: vec![slot(0), slot(1)],
        }
    }

    /// The hub's thread: the roster it seated and the events it logged.
    type Hub = thread::JoinHandle<(Roster, Vec<String>)>;

    /// Rank 0's door on a fresh port, gathering `world` nodes; the hub seats them (no rail
    /// relayed) and ends once `release` says so.
    fn rank0(world: u32, join: Duration) -> (String, Hub, Sender<()>) {
        gate::raise_fd_limit();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let (release, wait) = mpsc::channel::<()>();
        let h = thread::spawn(move || {
            let hub = gather(l, &cfg(world, join), me(), None).unwrap();
            let (roster, events) = (
                hub.roster.clone(),
                hub.events.iter().map(Event::line).collect::<Vec<_>>(),
            );
            let running = hub.start();
            let _ = wait.recv_timeout(Duration::from_secs(60));
            running.finish(false, None);
            (roster, events)
        });
        (addr, h, release)
    }

    fn declare_in(
        addr: &str,
        rank: Rank,
        world: u32,
        join: Duration,
    ) -> thread::JoinHandle<Result<Vec<Seat>, String>> {
        let addr = addr.to_string();
        thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(move || {
                declare(&addr, hello(rank, world), join)
                    .map(|(seats, _)| seats)
                    .map_err(|e| e.to_string())
            })
            .unwrap()
    }

    fn both(rank: Rank, world: u32) -> Vec<Seat> {
        (0..2).map(|rail| Seat { rail, rank, world }).collect()
    }

    /// Issue 31: 300 connections dripping a byte every 3 s on rank 0's port while the nodes
    /// declare their rails change nothing: every node is seated, none is named missing.
    #[test]
    fn a_slow_drip_during_a_rails_join_changes_nothing() {
        let (addr, r0, release) = rank0(3, Duration::from_secs(30));
        let stop = Arc::new(AtomicBool::new(false));
        let (connected, all_in) = mpsc::channel();
        let drip = {
            let (addr, stop) = (addr.clone(), stop.clone());
            thread::spawn(move || {
                use std::io::Write;
                let mut v: Vec<TcpStream> = (0..300).filter_map(|_| TcpStream::connect(&addr).ok()).collect();
                let n = v.len();
                let _ = connected.send(());
                // A valid frame's start, one byte per round: never garbage, never complete.
                let slow = b"FPR1\0\0\x01\0{\"type\":\"hello\",";
                let mut k = 0;
                while !stop.load(Ordering::Relaxed) {
                    for c in &mut v {
                        let _ = c.write(&slow[k % slow.len()..][..1]);
                    }
                    k += 1;
                    for _ in 0..30 {
                        if !stop.load(Ordering::Relaxed) {
                            thread::sleep(Duration::from_millis(100));
                        }
                    }
                }
                n
            })
        };
        all_in.recv_timeout(Duration::from_secs(20)).unwrap();
        thread::sleep(Duration::from_millis(500));
        let nodes: Vec<_> = (1..3)
            .map(|r| declare_in(&addr, r, 3, Duration::from_secs(30)))
            .collect();
        for (r, h) in (1..).zip(nodes) {
            assert_eq!(h.join().unwrap(), Ok(both(r, 3)), "node {r}");
        }
        release.send(()).unwrap();
        let (roster, events) = r0.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        assert_eq!(drip.join().unwrap(), 300);
        assert!(roster.silent.is_empty(), "{roster:?}");
        assert_eq!(roster.rings[&1], vec![0, 1, 2]);
        assert!(
            events.iter().any(|e| e.contains("rank 2 (node-2) joined")),
            "{events:?}"
        );
    }

    /// Issue 31: 1,000 nodes declaring their rails at once are all seated within a 10 s
    /// window (the roster's reader threads took 5 s for 199).
    #[test]
    fn a_thousand_nodes_declaring_rails_are_all_seated() {
        let world = 1001;
        let (addr, r0, release) = rank0(world, Duration::from_secs(10));
        let nodes: Vec<_> = (1..world)
            .map(|r| declare_in(&addr, r, world, Duration::from_secs(10)))
            .collect();
        for (r, h) in (1..).zip(nodes) {
            assert_eq!(h.join().unwrap(), Ok(both(r, world)), "node {r}");
        }
        release.send(()).unwrap();
        let (roster, _) = r0.join().unwrap();
        assert!(roster.silent.is_empty(), "silent: {:?}", roster.silent);
        assert_eq!(roster.nodes.len(), world as usize);
    }

    /// Issue 31: a node started well before rank 0 (its own join window long over by the time
    /// the last node comes) keeps waiting on rank 0's window once connected, and is seated.
    #[test]
    fn a_node_started_well_before_rank_0_is_seated() {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let t0 = Instant::now();
        let early = declare_in(&port.to_string(), 1, 3, Duration::from_secs(2));
        // Rank 0 comes 1 s later, with a 30 s window.
        thread::sleep(Duration::from_secs(1));
        let l = crate::ring::rendezvous::listen(port).unwrap();
        let (release, wait) = mpsc::channel::<()>();
        let r0 = thread::spawn(move || {
            let hub = gather(l, &cfg(3, Duration::from_secs(30)), me(), None).unwrap();
            let roster = hub.roster.clone();
            let running = hub.start();
            let _ = wait.recv_timeout(Duration::from_secs(60));
            running.finish(false, None);
            roster
        });
        // The last node comes once the early node's own clock (2 s and its grace) ran out.
        thread::sleep(
            (t0 + Duration::from_secs(2) + JOIN_GRACE + Duration::from_millis(500))
                .saturating_duration_since(Instant::now()),
        );
        let last = declare_in(&port.to_string(), 2, 3, Duration::from_secs(30));
        assert_eq!(last.join().unwrap(), Ok(both(2, 3)));
        assert_eq!(early.join().unwrap(), Ok(both(1, 3)));
        release.send(()).unwrap();
        assert!(r0.join().unwrap().silent.is_empty());
    }

    fn rail_cfg(rail: u32, relay: RailLink) -> CoordinatorConfig {
        CoordinatorConfig {
            token: format!("job/rail{rail}"),
            relay: Some(relay),
            ..cfg(2, Duration::from_secs(10))
        }
    }

    /// A rail's rank: join through `addr`, ready, go, results, done.
    fn rail_rank(addr: String, rail: u32, rank: Rank) -> thread::JoinHandle<Result<bool, String>> {
        thread::spawn(move || {
            let mut h = hello(rank, 2);
            h.token = format!("job/rail{rail}");
            h.info.rails.clear();
            let s = rendezvous::join_within(&addr, h, Duration::from_secs(10), Duration::from_secs(5))
                .map_err(|e| e.to_string())?;
            s.send(&Msg::Ready { rank }).map_err(|e| e.to_string())?;
            s.wait_go(Duration::from_secs(10)).map_err(|e| e.to_string())?;
            let res = crate::ring::wire::RankResults {
                rank,
                rows: vec![],
                links: vec![],
                link_size_bytes: 0,
                port_counters: vec![],
                chunk_waits: vec![],
            };
            s.send(&Msg::Results(res)).map_err(|e| e.to_string())?;
            s.wait_done(Duration::from_secs(10))
                .map(|d| d.0)
                .map_err(|e| e.to_string())
        })
    }

    type Reports = Vec<thread::JoinHandle<coordinator::CoordinatorReport>>;
    type OwnRanks = Vec<thread::JoinHandle<Result<bool, String>>>;

    /// Rank 0 of two nodes on two rails: its door on `l` gathers node 1, the hub relays to
    /// each rail's unchanged coordinator, and rank 0's own rank of each rail joins there.
    fn hub_and_two_rails(l: TcpListener) -> (HubHandle, Reports, OwnRanks) {
        let hub = gather(l, &cfg(2, Duration::from_secs(10)), me(), None).unwrap();
        let coords: Vec<TcpListener> = (0..2)
            .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let addrs: BTreeMap<u32, std::net::SocketAddr> = (0..2)
            .map(|k| (k, coords[k as usize].local_addr().unwrap()))
            .collect();
        let running = hub.start();
        let reports = coords
            .into_iter()
            .zip(0..)
            .map(|(c, k)| {
                let cfg = rail_cfg(k, running.link(k).unwrap());
                thread::spawn(move || coordinator::coordinate(c, cfg))
            })
            .collect();
        let own = (0..2).map(|k| rail_rank(addrs[&k].to_string(), k, 0)).collect();
        (running, reports, own)
    }

    /// Two rails of two nodes: node 1's rails' hellos, go, results and done travel on its one
    /// connection (through both relays) to each rail's unchanged coordinator, and the job's
    /// verdict reaches node 1 at the end.
    #[test]
    fn every_rail_runs_on_the_nodes_one_connection() {
        gate::raise_fd_limit();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let node = {
            let addr = addr.clone();
            thread::spawn(move || {
                let (seats, s) = declare(&addr, hello(1, 2), Duration::from_secs(10)).unwrap();
                let relay = NodeRelay::start(s, &seats, Duration::from_secs(5)).unwrap();
                let ranks: Vec<_> = (0..2).map(|k| rail_rank(relay.addrs[&k].clone(), k, 1)).collect();
                let done: Vec<_> = ranks.into_iter().map(|h| h.join().unwrap()).collect();
                (done, relay.job_verdict(Duration::from_secs(20)))
            })
        };
        let (running, reports, own) = hub_and_two_rails(l);
        for h in own {
            assert_eq!(h.join().unwrap(), Ok(false));
        }
        for h in reports {
            let rep = h.join().unwrap();
            assert!(rep.abort.is_none(), "{:?}", rep.abort);
            assert_eq!(rep.results.len(), 2);
        }
        running.finish(true, Some("rank 0's verdict: a stand-in".into()));
        let (done, job) = node.join().unwrap();
        assert_eq!(done, [Ok(false), Ok(false)]);
        assert_eq!(job, Some((true, Some("rank 0's verdict: a stand-in".into()))));
    }

    /// Node 1's process dies mid-run (its one connection reset): each rail's coordinator sees
    /// its connection end as a reset, as without the relay.
    #[test]
    fn a_nodes_reset_reaches_every_rails_coordinator() {
        gate::raise_fd_limit();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let node = {
            let addr = addr.clone();
            thread::spawn(move || {
                let (_, s) = declare(&addr, hello(1, 2), Duration::from_secs(10)).unwrap();
                for k in 0..2 {
                    let mut h = hello(1, 2);
                    h.token = format!("job/rail{k}");
                    h.info.rails.clear();
                    let m = Msg::Rail {
                        rail: k,
                        msg: Box::new(Msg::Hello(Box::new(h))),
                    };
                    wire::write_msg(&mut &s, &m).unwrap();
                }
                // Both tables came: then the process dies.
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let mut tables = 0;
                while tables < 2 {
                    if let Msg::Rail { msg, .. } = wire::read_msg(&mut &s).unwrap()
                        && matches!(*msg, Msg::Table { .. })
                    {
                        tables += 1;
                    }
                }
                socket2::SockRef::from(&s)
                    .set_linger(Some(Duration::ZERO))
                    .unwrap();
                drop(s);
            })
        };
        let (running, reports, own) = hub_and_two_rails(l);
        node.join().unwrap();
        for h in reports {
            let rep = h.join().unwrap();
            assert_eq!(rep.closed.get(&1).map(|c| c.1), Some(true), "{:?}", rep.closed);
            assert!(rep.abort.is_some());
        }
        for h in own {
            assert!(h.join().unwrap().is_err());
        }
        running.finish(true, None);
    }

    /// The hub forwards by the tag: what it cuts out of a node's rail frame is the message's
    /// own frame, and what it wraps is byte for byte the frame of `Msg::Rail` (the wire is
    /// unchanged); anything else is left to the full decoder.
    #[test]
    fn rail_frames_are_forwarded_by_their_tag() {
        let inner = [
            Msg::Ping,
            Msg::Hello(Box::new(hello(3, 4))),
            Msg::Ready { rank: 7 },
        ];
        for (rail, m) in [0u32, 7, 123_456].into_iter().zip(inner) {
            let own = frame(&m).unwrap();
            let tagged = frame(&Msg::Rail {
                rail,
                msg: Box::new(m.clone()),
            })
            .unwrap();
            assert_eq!(tag_frame(rail, &own).as_deref(), Some(&tagged[..]), "{m:?}");
            let (k, body) = rail_body(&tagged).unwrap();
            assert_eq!((k, &framed(body)[..]), (rail, &own[..]));
            assert_eq!(is_hello(body), matches!(m, Msg::Hello(_)));
        }
        let closed = frame(&Msg::RailClosed { rail: 1, reset: true }).unwrap();
        assert_eq!(rail_body(&closed), None);
        for odd in [
            &br#"{"type":"rail","rail":01,"msg":{"type":"ping"}}"#[..],
            br#"{"type":"rail","rail":99999999999,"msg":{"type":"ping"}}"#,
            br#"{"type":"rail","msg":{"type":"ping"},"rail":1}"#,
        ] {
            assert_eq!(rail_body(&framed(odd)), None, "{}", String::from_utf8_lossy(odd));
        }
        // A body cut short is forwarded as it is: the rail's coordinator refuses it as
        // malformed and ends that rail's connection only.
        let cut = br#"{"type":"rail","rail":1,"msg":{"type":"ping"}"#;
        let cut = framed(cut);
        let (_, body) = rail_body(&cut).unwrap();
        assert!(wire::decode(body).is_err());
        // A hello in another encoding (spaces) is still a hello.
        let spaced = serde_json::to_string_pretty(&Msg::Hello(Box::new(hello(1, 2)))).unwrap();
        assert!(is_hello(spaced.as_bytes()));
        // Over the frame limit once tagged: not forwarded.
        let big = framed(&vec![b' '; wire::MAX_FRAME - 5]);
        assert!(tag_frame(1, &big).is_none());
    }

    #[test]
    fn open_files_for_16384_nodes_on_8_rails() {
        let ring: Vec<Rank> = (0..16_384).collect();
        let rings: BTreeMap<u32, Vec<Rank>> = (0..8).map(|k| (k, ring.clone())).collect();
        // One per node whatever the rails (issue 31: 16,384 x 8 fits a limit of 20,000).
        assert_eq!(files_needed(16_384, &rings), 16_384 + 64 + 8 * 16);
        assert!(files_needed(16_384, &rings) < 20_000);
        // A rail one node drives runs no ring: no coordinator.
        assert_eq!(files_needed(4, &BTreeMap::from([(0, vec![0])])), 4 + 64);
    }

    #[test]
    fn seats_are_checked() {
        assert!(check_seats(&both(1, 3), 3).is_ok());
        for (seats, want) in [
            (both(3, 3), "rank 3 of 3"),
            (both(1, 4), "does not fit a job of 3"),
            (
                vec![
                    Seat {
                        rail: 0,
                        rank: 0,
                        world: 2
                    };
                    2
                ],
                "seated twice",
            ),
            (
                vec![Seat {
                    rail: 99,
                    rank: 0,
                    world: 2,
                }],
                "out of range",
            ),
        ] {
            let e = check_seats(&seats, 3).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
    }

    /// Issue 31: a node whose control connection takes nothing (its queue stuck past the
    /// hub's deadline) is told to each of its rails' coordinators as a node that does not
    /// read (each names its rank so, not as a reset), and its connection is closed; a close
    /// a coordinator sends for an earlier relayed connection of the node's rail rank is not
    /// passed on.
    #[test]
    fn a_node_that_stops_reading_is_told_to_its_rails_as_such() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let node = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        node.set_recv_buffer_size(4096).unwrap();
        node.connect(&l.local_addr().unwrap().into()).unwrap();
        let node: TcpStream = node.into();
        let (s, _) = l.accept().unwrap();
        socket2::SockRef::from(&s).set_send_buffer_size(4096).unwrap();
        let shared = Arc::new(relay::Hub::default());
        let link = RailLink {
            rail: 2,
            rails: 1,
            ring: Arc::new(vec![0, 1]),
            inbox: Arc::default(),
            hub: shared.clone(),
        };
        let mut plane = Plane::new(2).unwrap();
        plane.add(1, s).unwrap();
        lock(&shared.socks).insert(1, plane.shared_socket(1).unwrap());
        let mut mux = Mux {
            plane,
            n: 2,
            rails: BTreeMap::from([(2, RailEnd::new(&link, 2))]),
            peers: BTreeMap::new(),
            shared: shared.clone(),
            stall: Duration::from_millis(300),
        };
        // Node 1's rail rank said hello twice: its relayed connection is epoch 2.
        mux.rails.get_mut(&2).unwrap().epochs[1] = 2;
        // A close for epoch 1 (its earlier connection) is dropped; nothing is written.
        shared.out.push(Out::Close {
            node: 1,
            rail: 2,
            epoch: 1,
            reset: true,
        });
        mux.take_from_rails(Instant::now());
        assert_eq!(mux.plane.queued(), 0);
        // 1 MiB for a node that reads nothing: most of it stays queued, and past the
        // deadline the node is named to its rail, with what waited, and let go.
        let big: crate::ring::control::Frame = wire::frame_of(&[&vec![b' '; 1 << 20]]).unwrap().into();
        shared.out.push(Out::Frame {
            node: 1,
            frame: big,
            table: None,
        });
        mux.take_from_rails(Instant::now());
        mux.plane.flush_backlog(Instant::now());
        assert!(mux.plane.queued() > 0);
        thread::sleep(Duration::from_millis(400));
        mux.after_writes(Instant::now());
        mux.hand_over();
        let told = link.inbox.take();
        assert!(
            matches!(told.as_slice(), [In::Stuck { r: 1, epoch: 2, queued, waited }]
                if *queued > 0 && *waited >= Duration::from_millis(300)),
            "{told:?}"
        );
        assert!(!mux.plane.has(1));
        assert!(lock(&shared.socks).is_empty());
        drop(node);
    }
}
