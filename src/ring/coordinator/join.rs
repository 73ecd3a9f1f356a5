//! Joining and tables: each hello checked against the job, the gathering of the ranks on
//! the door (claims, replaced connections, the join window), and every rank's table.

use std::collections::BTreeMap;
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant};

use super::reject::refuse;
use super::*;
use crate::ring::control::{Happening, Plane, RelayedHello, frame};
use crate::ring::gate::{self, BUSY, Incoming};
use crate::ring::model::{Rank, RankInfo, check_rails};
use crate::text::printable;
use crate::ring::orders;
use crate::ring::relay::Epoch;
use crate::ring::rendezvous::list;
use crate::ring::wire::{self, Hello, Msg};

pub(super) fn token_eq(a: &str, b: &str) -> bool {
    // Length-independent comparison time is not needed (the token is a job id, not a
    // secret), but comparing every byte costs nothing.
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Check a hello against the job. Pure.
pub fn validate(h: &Hello, cfg: &CoordinatorConfig, seen: &BTreeMap<Rank, RankInfo>) -> Result<(), String> {
    let (cfg_world, cfg_token) = (cfg.world, cfg.token.as_str());
    if h.protocol != wire::PROTOCOL {
        return Err(format!(
            "protocol {} (this coordinator speaks {})",
            h.protocol,
            wire::PROTOCOL
        ));
    }
    if !token_eq(&h.token, cfg_token) {
        return Err("wrong token (a rank of another job, or a different --token)".into());
    }
    // On a rail's ring of some of the nodes, the claim is named by the job's node rank.
    let who = cfg.claimed(h.rank);
    if h.world != cfg_world {
        return Err(if cfg.nodes.is_empty() {
            format!(
                "{who} says world size {}, the coordinator expects {cfg_world}",
                h.world
            )
        } else {
            format!(
                "{who} says this rail's ring has {} nodes, the coordinator has {cfg_world} (nodes {})",
                h.world,
                list(&cfg.nodes)
            )
        });
    }
    if h.rank >= cfg_world || h.info.rank != h.rank {
        return Err(if cfg.nodes.is_empty() {
            format!("{who} is out of range for world size {cfg_world}")
        } else {
            format!(
                "ring rank {} is out of range for this rail's ring of {cfg_world} nodes ({})",
                h.rank,
                list(&cfg.nodes)
            )
        });
    }
    if h.params != cfg.params {
        return Err(format!(
            "{who} runs with options [{}], rank 0 with [{}]",
            h.params, cfg.params
        ));
    }
    for (what, v) in [
        ("host", h.info.host.as_str()),
        ("address", h.info.address.as_str()),
        ("transport", h.info.transport.as_str()),
        ("device", h.info.device.as_deref().unwrap_or("")),
    ] {
        if v.len() > 255 || printable(v, 255) != v {
            return Err(format!("{who}'s {what} is not plain text of at most 255 bytes"));
        }
    }
    check_rails(&h.info.rails).map_err(|why| format!("{who}'s rails: {why}"))?;
    for caps in [&h.capabilities, &h.info.capabilities] {
        if let Err(why) = check_capabilities(caps) {
            return Err(format!("{who}'s capabilities: {why}"));
        }
    }
    if let Some(prev) = seen.get(&h.rank) {
        return Err(format!(
            "{who} already joined from {} ({})",
            prev.host, prev.address
        ));
    }
    Ok(())
}

/// Most transports a hello may list, and the longest name: the table repeats them for
/// every rank, so a peer must not grow it.
pub const MAX_CAPABILITIES: usize = 8;
pub const MAX_CAPABILITY_CHARS: usize = 16;

/// A hello's transport list: at most [`MAX_CAPABILITIES`] names of at most
/// [`MAX_CAPABILITY_CHARS`] lowercase letters, digits, `-` or `_`. Pure.
pub fn check_capabilities(caps: &[String]) -> Result<(), String> {
    if caps.len() > MAX_CAPABILITIES {
        return Err(format!(
            "{} entries, at most {MAX_CAPABILITIES} allowed",
            caps.len()
        ));
    }
    for c in caps {
        let plain = !c.is_empty()
            && c.len() <= MAX_CAPABILITY_CHARS
            && c.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if !plain {
            return Err(format!(
                "{:?} is not a transport name (at most {MAX_CAPABILITY_CHARS} of a-z, 0-9, -, _)",
                printable(c, 40)
            ));
        }
    }
    Ok(())
}

/// Open files the coordinator needs for `world` ranks: each control connection, and room
/// for the listener, its event loops, strangers and the process itself.
pub fn files_needed(world: u32) -> u64 {
    world as u64 + 64
}

/// The coordinator's own limit, as an error naming it and what to set, when `world` ranks
/// do not fit in `nofile` open files (already raised to the hard limit). Pure.
pub fn check_fd_limit(world: u32, nofile: u64) -> Result<(), String> {
    let need = files_needed(world);
    if nofile >= need {
        return Ok(());
    }
    Err(format!(
        "coordinator: {world} ranks need {need} open files (1 per rank and 64 more), but its open-file limit \
         (RLIMIT_NOFILE, raised to the hard limit) is {nofile}: raise the hard limit to at least {need} on rank 0's \
         host (`ulimit -Hn {need}` as root before starting, LimitNOFILE={need} in a systemd unit, or `nofile` in \
         /etc/security/limits.conf; Slurm: the limit slurmd passes on)"
    ))
}

/// Keepalive on a control connection: an idle connection to a host that vanished is noticed
/// by the kernel too (the pings normally keep data in flight; TCP_INFO reads that).
pub(super) fn keepalive(s: &TcpStream) {
    let ka = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(2))
        .with_interval(Duration::from_secs(1))
        .with_retries(5);
    let _ = socket2::SockRef::from(s).set_tcp_keepalive(&ka);
}

/// `--rails`, rank 0: the job's one door, where every node's hello declares its rail slots
/// (`info.rails`, checked like every hello). What it gathered, and the connections it holds
/// (each node's one control connection for the whole run, every rail's messages on it).
pub struct NodeDoor {
    pub plane: Plane,
    /// Hellos the door reads after the gathering (latecomers, to turn away).
    pub rx: Receiver<Incoming>,
    /// Ends the door's thread.
    pub stop: Arc<AtomicBool>,
    /// Every node seated, rank 0's own (`me`) included.
    pub seen: BTreeMap<Rank, RankInfo>,
    pub rep: CoordinatorReport,
}

/// Gather the nodes' hellos on `listener` (the same door, deadlines and claims as a ring's
/// coordinator: [`gather`]) until every node of `cfg.world` declared or the join window
/// ended. `me` is rank 0's own node, seated without a connection. An error is rank 0's own
/// (its open-file limit, its event loop).
pub fn node_door(
    listener: TcpListener,
    cfg: &CoordinatorConfig,
    me: RankInfo,
    limits: Limits,
) -> Result<NodeDoor, String> {
    let start = Instant::now();
    let nofile = gate::raise_fd_limit();
    check_fd_limit(cfg.world, nofile)?;
    let mut plane =
        Plane::new(cfg.world).map_err(|e| format!("coordinator: cannot start its event loop: {e}"))?;
    let stop = Arc::new(AtomicBool::new(false));
    let gathering = Arc::new(AtomicBool::new(true));
    let (tx, rx) = mpsc::channel::<Incoming>();
    {
        let (stop, gathering, wake, door) = (stop.clone(), gathering.clone(), plane.waker(), limits.door);
        thread::spawn(move || gate::run(listener, tx, Some(wake), stop, gathering, door));
    }
    let mut rep = CoordinatorReport::default();
    let seeded = BTreeMap::from([(me.rank, me)]);
    let seen = gather(cfg, &mut rep, (&mut plane, seeded), &rx, start, limits.sndbuf);
    gathering.store(false, Ordering::Relaxed);
    rep.stats.joined = Some(start.elapsed());
    Ok(NodeDoor {
        plane,
        rx,
        stop,
        seen,
        rep,
    })
}

/// Rank 0 was interrupted while `joined` ranks had joined: the reason every joined rank is
/// told (the missing ones are named, not judged). None: not interrupted.
pub(super) fn interrupted_join(cfg: &CoordinatorConfig, joined: usize, missing: &[Rank]) -> Option<String> {
    let signal = cfg.interrupt.as_ref()?.caught()?;
    Some(format!(
        "interrupted by {signal} on rank 0 while {joined} of {} ranks had joined (missing rank{} {}); no rank is judged",
        cfg.world,
        if missing.len() == 1 { "" } else { "s" },
        list(&missing.iter().map(|&r| cfg.node_of(r)).collect::<Vec<_>>())
    ))
}

/// When gathering ends, for a coordinator started at `start`: the join window, or, once
/// every rank but the silent ones ([`CoordinatorConfig::silent`]) joined, `silent_wait`
/// after `start` if that is sooner. Counted from the start, not from the last join: a silent
/// node already had the roster's whole join window, and one that declares after it is told it
/// has no seat, so waiting on after the others joined would only delay the verdict. Pure.
pub fn gather_deadline(cfg: &CoordinatorConfig, seen: &BTreeMap<Rank, RankInfo>, start: Instant) -> Instant {
    let full = start + cfg.join_timeout;
    if cfg.silent.is_empty() {
        return full;
    }
    let declared = cfg.world as usize - cfg.silent.iter().filter(|&&r| r < cfg.world).count();
    let joined = seen.keys().filter(|r| !cfg.silent.contains(r)).count();
    if joined >= declared {
        full.min(start + cfg.silent_wait)
    } else {
        full
    }
}

/// Gather hellos until every rank joined or the deadline ([`gather_deadline`]): each joined
/// connection is held by the event loop, and one that closes before the table goes out
/// frees its slot.
pub(super) fn gather(
    cfg: &CoordinatorConfig,
    rep: &mut CoordinatorReport,
    (plane, mut seen): (&mut Plane, BTreeMap<Rank, RankInfo>),
    rx: &Receiver<Incoming>,
    start: Instant,
    sndbuf: Option<usize>,
) -> BTreeMap<Rank, RankInfo> {
    // Ranks whose holder is being checked because a second claim came: since when.
    let mut checking: BTreeMap<Rank, Instant> = BTreeMap::new();
    while (seen.len() as u32) < cfg.world {
        let now = Instant::now();
        let deadline = gather_deadline(cfg, &seen, start);
        if now >= deadline || cfg.interrupt.as_ref().is_some_and(|i| i.caught().is_some()) {
            break;
        }
        for h in plane.wait((deadline - now).min(Duration::from_millis(50))) {
            // Nothing is expected before the table; a connection that ended frees its slot.
            if let Happening::Closed(r, _) = h {
                seen.remove(&r);
            }
        }
        plane.take_woken();
        let t = Instant::now();
        for knock in knocks(rx, plane, sndbuf) {
            gather_one(cfg, rep, (&mut seen, &mut checking), (plane, start), knock);
            rep.stats.hellos += 1;
        }
        rep.stats.hello_time += t.elapsed();
        if seen.len() as u32 == cfg.world {
            // Before the table goes out: a rank whose connection already closed (restarted,
            // or a claim that went away) frees its slot and is waited for again.
            // (A rank seated without a connection is the coordinator's own process.)
            let dead: Vec<Rank> = seen
                .keys()
                .copied()
                .filter(|&r| plane.has(r) && plane.is_dead(r))
                .collect();
            for r in dead {
                seen.remove(&r);
                plane.remove(r);
            }
        }
    }
    seen
}

/// How long a second claim of a taken rank is told "busy" while the holder's connection is
/// checked. A connection whose far end is gone (a reset that never reached rank 0, a node
/// that rebooted) answers the check with a reset within a round trip.
pub const HOLDER_CHECK: Duration = Duration::from_secs(3);

/// A finished hello at the door: on a connection of its own, or a node's rail rank relayed
/// by the hub (ring rank `r`, the only one it may claim; see [`crate::ring::relay`]).
pub(crate) enum Knock {
    Tcp(TcpStream),
    Relayed { r: Rank, epoch: Epoch },
}

/// A finished hello, where it came from, and what it said.
pub(crate) type Knocked = (Knock, String, Result<Hello, wire::WireError>);

/// Every hello finished since the last call: the door's (their send buffer set to `sndbuf`
/// when given), then the hub's relayed ones.
pub(crate) fn knocks(rx: &Receiver<Incoming>, plane: &mut Plane, sndbuf: Option<usize>) -> Vec<Knocked> {
    let mut v = Vec::new();
    while let Ok((s, peer, hello)) = rx.try_recv() {
        if let Some(b) = sndbuf {
            let _ = socket2::SockRef::from(&s).set_send_buffer_size(b);
        }
        v.push((Knock::Tcp(s), peer.to_string(), hello));
    }
    v.extend(plane.take_hellos().into_iter().map(Knock::relayed));
    v
}

impl Knock {
    fn relayed(h: RelayedHello) -> Knocked {
        (
            Knock::Relayed {
                r: h.r,
                epoch: h.epoch,
            },
            h.peer,
            h.hello,
        )
    }

    /// Tell it why it is turned away (best effort, never blocks) and close it.
    pub(crate) fn reject(&self, plane: &mut Plane, reason: &str) {
        match self {
            Knock::Tcp(s) => gate::reject_now(s, reason),
            Knock::Relayed { r, epoch } => plane.refuse_relayed(*r, *epoch, reason),
        }
    }
}

/// One finished hello while ranks gather: join, replace a dead earlier connection of the
/// same rank, or refuse (a second live claim names both source addresses, see
/// [`held_claim`]).
pub(super) fn gather_one(
    cfg: &CoordinatorConfig,
    rep: &mut CoordinatorReport,
    (seen, checking): (&mut BTreeMap<Rank, RankInfo>, &mut BTreeMap<Rank, Instant>),
    (plane, start): (&mut Plane, Instant),
    (s, peer_s, hello): Knocked,
) {
    let h = match hello {
        Ok(h) => h,
        Err(e) => return refuse(rep, plane, &s, &peer_s, &door_reason(e)),
    };
    // Judged as if the slot were free: a claim of a taken slot with the right token is
    // either a restarted rank (its old connection is dead) or a second process.
    if let Err(reason) = validate(&h, cfg, &BTreeMap::new()) {
        return refuse(rep, plane, &s, &peer_s, &reason);
    }
    if seen.contains_key(&h.rank) && !rep.control_peers.contains_key(&h.rank) {
        let reason = format!("{} is rank 0's own process", cfg.claimed(h.rank));
        return refuse(rep, plane, &s, &peer_s, &reason);
    }
    if let Knock::Relayed { r, .. } = s
        && r != h.rank
    {
        let reason = format!(
            "{} claims ring rank {} of this rail; its node's place on the rail's ring is {r}",
            cfg.claimed(r),
            h.rank
        );
        return refuse(rep, plane, &s, &peer_s, &reason);
    }
    match rep.control_peers.get(&h.rank).cloned() {
        Some(old_peer) if plane.has(h.rank) && !plane.is_dead(h.rank) => {
            let host = seen.get(&h.rank).map(|i| i.host.clone()).unwrap_or_default();
            let held = (h.rank, old_peer.as_str(), host.as_str());
            return held_claim(cfg, rep, (checking, plane), (&s, &peer_s), held);
        }
        Some(old_peer) => {
            checking.remove(&h.rank);
            rep.events.push(Event::Replaced {
                rank: h.rank,
                peer: peer_s.clone(),
                old_peer,
            })
        }
        None => rep.events.push(Event::Joined {
            rank: h.rank,
            peer: peer_s.clone(),
            host: h.info.host.clone(),
        }),
    }
    seat(cfg, rep, (seen, plane, start), (s, peer_s), h);
}

/// A claim of rank `r`, held by a connection from `old_peer` (on `host`) that looks alive.
/// The holder is checked first (a ping, which a live rank ignores before its table and a
/// vanished one answers with a reset) and the claimant told "busy" meanwhile, so a rank
/// whose own end was reset connects again instead of being refused; after [`HOLDER_CHECK`]
/// the second claim is refused, naming both addresses.
fn held_claim(
    cfg: &CoordinatorConfig,
    rep: &mut CoordinatorReport,
    (checking, plane): (&mut BTreeMap<Rank, Instant>, &mut Plane),
    (s, peer_s): (&Knock, &str),
    (r, old_peer, host): (Rank, &str, &str),
) {
    let now = Instant::now();
    let first = !checking.contains_key(&r);
    let since = *checking.entry(r).or_insert(now);
    if now.duration_since(since) < HOLDER_CHECK {
        if first && let Ok(f) = frame(&Msg::Ping) {
            let _ = plane.send(r, f, now);
        }
        let reason = format!(
            "{BUSY}{} is held by an earlier connection from {old_peer}; checking that it is alive",
            cfg.claimed(r)
        );
        s.reject(plane, &reason);
        // Listed once: the claimant asks again every 100 ms while the check lasts.
        if first {
            rep.reject(peer_s, &reason);
        }
        return;
    }
    let who = cfg.claimed(r);
    let reason = format!(
        "{who} is already taken by {old_peer} ({}); a second claim from {peer_s} is refused (two \
         processes started as {who}, or a foreign process with this job's token)",
        printable(host, 64),
    );
    refuse(rep, plane, s, peer_s, &reason);
}

/// Seat the rank of hello `h` on connection `s`: the event loop holds it, and it is told
/// when the join window closes.
fn seat(
    cfg: &CoordinatorConfig,
    rep: &mut CoordinatorReport,
    (seen, plane, start): (&mut BTreeMap<Rank, RankInfo>, &mut Plane, Instant),
    (s, peer_s): (Knock, String),
    h: Hello,
) {
    let added = match s {
        Knock::Tcp(s) => {
            keepalive(&s);
            plane.add(h.rank, s)
        }
        Knock::Relayed { r, epoch } => plane.add_relayed(r, epoch),
    };
    if let Err(e) = added {
        // The event loop's own limit (epoll's watches): the coordinator's, not the rank's.
        rep.reject(
            &peer_s,
            &format!(
                "coordinator: cannot hold {}'s connection: {e}",
                cfg.claimed(h.rank)
            ),
        );
        seen.remove(&h.rank);
        return;
    }
    rep.control_peers.insert(h.rank, peer_s);
    // The coordinator's numbering, never the hello's word.
    let mut info = h.info;
    info.node = cfg.nodes.get(h.rank as usize).copied();
    seen.insert(h.rank, info);
    tell_window(cfg, seen, (plane, start), h.rank);
}

/// Tell seated rank `r` when the join window closes: it waits on this clock, not on its
/// own start (it may have started long before rank 0).
pub(super) fn tell_window(
    cfg: &CoordinatorConfig,
    seen: &BTreeMap<Rank, RankInfo>,
    (plane, start): (&mut Plane, Instant),
    r: Rank,
) {
    let now = Instant::now();
    let left = gather_deadline(cfg, seen, start).saturating_duration_since(now);
    if let Ok(f) = frame(&Msg::Window {
        closes_in_ms: left.as_millis() as u64,
    }) {
        let _ = plane.send(r, f, now);
    }
}

impl Serve<'_> {
    /// Not every rank joined: every joined rank is told why (the missing ones are named as
    /// the job's nodes: no table entry of theirs says it), and the judge has its final word
    /// unless rank 0 was interrupted.
    pub(super) fn join_failed(&mut self, rep: &mut CoordinatorReport, seen: &BTreeMap<Rank, RankInfo>) {
        let cfg = self.cfg;
        let missing: Vec<Rank> = (0..cfg.world).filter(|r| !seen.contains_key(r)).collect();
        let interrupted = interrupted_join(cfg, seen.len(), &missing);
        rep.interrupted = interrupted.clone();
        // A run of one rail has no rails to speak of: its silent nodes never reached rank 0.
        let one_rail = cfg.relay.as_ref().is_some_and(|l| l.rails <= 1);
        let reason = interrupted.unwrap_or_else(|| {
            BootstrapError::Missing {
                missing: missing.iter().map(|&r| cfg.node_of(r)).collect(),
                silent: missing
                    .iter()
                    .filter(|r| cfg.silent.contains(r) && !one_rail)
                    .map(|&r| cfg.node_of(r))
                    .collect(),
                world: cfg.world,
                coordinator: cfg.advertised.clone(),
                secs: cfg.join_timeout.as_secs(),
            }
            .to_string()
        });
        self.tell_all(
            rep,
            &Msg::Abort {
                reason: reason.clone(),
            },
        );
        rep.abort = Some(reason);
        if let Some(judge) = cfg.judge.as_ref().filter(|_| rep.interrupted.is_none()) {
            rep.verdicts = judge(rep, 0, true);
        }
    }

    /// The table cannot be sent (`e`): never dropped in silence; every rank is told, and no
    /// rank is blamed.
    pub(super) fn tables_failed(&mut self, rep: &mut CoordinatorReport, e: String) {
        let reason = format!(
            "coordinator: the rank table for {} ranks cannot be sent: {e}",
            self.cfg.world
        );
        self.tell_all(
            rep,
            &Msg::Abort {
                reason: reason.clone(),
            },
        );
        own_error(rep, reason);
    }

    /// Every rank its part of the table (itself and its peers in every ring, in bounded
    /// frames); the run clock starts now. An error is the coordinator's own.
    pub(super) fn send_tables(&mut self, rep: &mut CoordinatorReport) -> Result<(), String> {
        let world = self.cfg.world;
        let rings = match &self.cfg.rings {
            Some(f) => f(world),
            None => orders::sweep_rings(world),
        };
        let peers = orders::peers(world, &rings);
        let shared = orders::shared_transport(&self.ranks).map(str::to_string);
        let entries = orders::encode_entries(&self.ranks)?;
        let mut frames = Vec::with_capacity(world as usize);
        for (r, p) in peers.iter().enumerate() {
            let part: Vec<&[u8]> = (orders::part(r as Rank, p, entries.len()).iter())
                .map(|&q| &entries[q as usize][..])
                .collect();
            frames.push(orders::table_frames(&part, shared.as_deref())?);
        }
        rep.stats.tables_built = Some(self.started.elapsed());
        rep.stats.table_bytes = frames.iter().flatten().map(|f| f.len() as u64).sum();
        self.run_start = Instant::now();
        let now = Instant::now();
        self.ping_cycle = now;
        for (r, f) in frames.into_iter().enumerate() {
            if let Err(e) = self.plane.send_table(r as Rank, f, now) {
                self.queue_error(rep, r as Rank, e);
            }
        }
        Ok(())
    }
}
