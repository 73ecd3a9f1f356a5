//! One rank of a job across nodes, one rail or `--rails`: this node's part of the job, every
//! rail it drives on its one control connection to rank 0. Rank 0 seats every node at its
//! door, hosts every rail's coordinator behind the hub (also of a rail it lacks) and merges
//! the rails' reports; the other nodes relay their rails through the one connection and
//! exit with the job's verdict. A run without `--rails` is the case R = 1 on the same path;
//! [`RailNode::single`] marks the few points where its outputs are those of a plain ring
//! (no rail tag, prefix or merge; the door's events in the report; its own exit status).

use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpListener;
use std::sync::Arc;

use super::fabric::{self, RailSetup};
use super::{
    Ctx, LaunchError, RankResult, declare_failed, hostname, interrupted, job_verdict, silent_ring_ranks,
};
use crate::host::Host;
use crate::ring::coordinator::Event;
use crate::ring::portread;
use crate::ring::launcher::Identity;
use crate::ring::model::{RailPort, Rank};
use crate::ring::railplan::Roster;
use crate::ring::rails::{self, RailRun, RailSel};
use crate::ring::run::{self, Failure, Options, RankOutcome, Setup};

/// One rank of a job across nodes: this node drives every selected rail (without `--rails`,
/// its one rail on the data interface), one rank per rail's ring, all on the node's one
/// control connection to rank 0 (see [`crate::ring::railmux`]).
pub(super) fn run_rails(
    cx: &Ctx,
    sel: &RailSel,
    spec: Option<&str>,
    opts: &Options,
    id: Identity,
) -> Result<RankResult, LaunchError> {
    let single = *sel == RailSel::One;
    let (mut slots, runs, note) = if single {
        fabric::one_rail(cx, spec, id.rank)?
    } else {
        let (slots, runs) = fabric::rail_setups(cx, sel, spec)?;
        (slots, runs, None)
    };
    // By index where the flag names them; for `all`, the rails most nodes have (rank 0's own
    // may be the odd ones).
    let wanted = rails::wanted(sel);
    // A selected rail this node cannot run after all (no address) is declared as not driven,
    // so its ring forms without this node instead of waiting for it.
    for s in slots.iter_mut() {
        let selected = rails::select(std::slice::from_ref(s), sel).len() == 1;
        if selected && !runs.iter().any(|r| r.0.rail == s.rail) {
            s.usable = false;
        }
    }
    let host = Host::live();
    // Each rail's switch port before declaring, every rail at once (one --lldp-wait in all).
    let neighbors: BTreeMap<u32, crate::ring::model::Neighbor> = std::thread::scope(|s| {
        let asks: Vec<_> = runs
            .iter()
            .map(|r| {
                let (host, netdev) = (&host, r.0.netdev.clone().unwrap_or_else(|| r.0.device.clone()));
                (r.0.rail, s.spawn(move || fabric::switch_port(cx, host, &netdev)))
            })
            .collect();
        asks.into_iter()
            .filter_map(|(k, h)| Some((k, h.join().ok().flatten()?)))
            .collect()
    });
    let live = cx.watch.live(opts);
    // One rail streams its rows as they complete; the rails' rows come merged, at the end.
    let on_row = if single {
        cx.watch.rows(&id, opts, note.clone())
    } else {
        None
    };
    let node = RailNode {
        cx,
        id: &id,
        slots: &slots,
        sel,
        wanted: wanted.as_deref(),
        opts,
        live,
        host,
        neighbors: std::sync::Mutex::new(neighbors),
        single,
        on_row: std::sync::Mutex::new(on_row),
    };
    let r = node.bind_early(runs).and_then(|runs| {
        if id.rank == 0 {
            node.rank0(runs)
        } else {
            node.other(runs)
        }
    });
    cx.watch.ended();
    Ok(note_transport(r, note))
}

/// Rank 0's report says why `--transport auto` ran tcp on rank 0 (one rail only).
fn note_transport(mut r: RankResult, note: Option<String>) -> RankResult {
    if let (
        Ok(RankOutcome {
            report: Some(rep), ..
        }),
        Some(note),
    ) = (&mut r, note)
    {
        rep.transport_note = Some(note);
    }
    r
}

/// Where one rail's rank sits and how it reaches its coordinator.
struct Place {
    seat: rails::Seat,
    /// Rank 0: the rail's ring (node ranks), its silent ring ranks, its loopback listener and
    /// the relay's TCP_INFO; another node: its relay's loopback address.
    ring: (Vec<Rank>, BTreeSet<Rank>),
    listener: Option<TcpListener>,
    relay: Option<crate::ring::coordinator::RailLink>,
    join_via: Option<String>,
}

/// This node's part of a `--rails` job.
struct RailNode<'a> {
    cx: &'a Ctx<'a>,
    id: &'a Identity,
    slots: &'a [RailPort],
    /// `--rails` as given: every node's must be rank 0's.
    sel: &'a RailSel,
    wanted: Option<&'a [u32]>,
    opts: &'a Options,
    live: Option<Arc<crate::ring::model::LiveStatus>>,
    host: Host,
    /// Each rail's switch port (LLDP), learnt before declaring; taken by its rail's run.
    neighbors: std::sync::Mutex<BTreeMap<u32, crate::ring::model::Neighbor>>,
    /// A run without `--rails` (R = 1): its outputs are a plain ring's. Its token carries no
    /// rail tag and its lines no `rail 0:` prefix; its rank runs alone, not merged into
    /// `rails[]`; rank 0 puts what its door turned away into the report's events; another
    /// node ends with its own rank's end, not the job's verdict.
    single: bool,
    /// Rank 0 of one rail: the CLI's sink for the rows as each size completes; taken by the
    /// rail's run.
    on_row: std::sync::Mutex<Option<run::ShowRow>>,
}

/// How long another node waits for the job's verdict after its own rails ended (rank 0's
/// other rails may still run; a silent or vanished rank 0 ends the wait much sooner).
const JOB_VERDICT_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

impl RailNode<'_> {
    fn me(&self) -> crate::ring::railplan::Declaration {
        crate::ring::railplan::Declaration {
            rank: self.id.rank,
            host: hostname(),
            slots: self.slots.to_vec(),
        }
    }

    /// One rail's run: its identity on the rail's ring and its setup.
    fn rail_run(&self, (p, ip, fabric, label): RailSetup, at: Place, first: bool) -> RailRun {
        let mut identity = if self.single {
            self.id.clone()
        } else {
            rails::rail_identity(self.id, p.rail)
        };
        (identity.rank, identity.world) = (at.seat.rank, at.seat.world);
        let netdev = p.netdev.clone().unwrap_or_else(|| p.device.clone());
        let rate = portread::line_rate(&self.host, &netdev);
        if !self.single {
            self.cx.log(
                1,
                format!(
                    "{}: data {ip} device {label}; rank {} of this rail's {} nodes",
                    p.describe(),
                    at.seat.rank,
                    at.seat.world
                ),
            );
        }
        let (mut nodes, silent) = at.ring;
        if self.single {
            // One ring of every node in rank order: its ranks are the job's nodes.
            nodes.clear();
        }
        RailRun {
            setup: Setup {
                coordinator_listener: at.listener,
                line_rate_gbs: rate.map(|r| r.0),
                neighbor: self.neighbors.lock().ok().and_then(|mut n| n.remove(&p.rail)),
                port_max: fabric::port_max(self.cx, &self.host, &netdev),
                fabric,
                counters: Some(portread::Sampler::live(&netdev)),
                live: if first { self.live.clone() } else { None },
                on_row: self.on_row.lock().ok().and_then(|mut r| r.take()),
                // The job's rank 0 hosts every rail's coordinator, also one it lacks.
                join_only: self.id.rank != 0,
                join_via: at.join_via,
                relay: at.relay,
                // Rank 0's coordinator names the rail's ranks as the job's nodes.
                nodes,
                silent,
                node: (!self.single).then_some(self.id.rank),
                ..Setup::new(identity, hostname(), ip, Some(label))
            },
            port: p,
        }
    }

    fn not_seated(&self, p: &RailPort) {
        // One rail unseated is the node's failure, said by `drive`.
        if self.single {
            return;
        }
        self.cx.log(
            0,
            format!(
                "{}: not run: its ring would have fewer than two nodes (rank 0's report says why)",
                p.describe()
            ),
        );
    }

    /// Rank 0: seat every node, host every rail's coordinator behind the relay, run its own
    /// rails, merge, and send the job's verdict to every node.
    fn rank0(&self, runs: Vec<RailSetup>) -> RankResult {
        let cannot = |message: String| run::RunError {
            kind: Failure::CannotRun,
            message,
        };
        let l = crate::ring::rendezvous::bind(&self.id.coordinator).map_err(|e| cannot(e.to_string()))?;
        let cfg = crate::ring::railmux::door_config(self.id, self.opts, self.sel);
        let hub = crate::ring::railmux::gather(l, &cfg, self.me(), self.wanted).map_err(cannot)?;
        // Joins with -v; what the door turned away always (one rail: in its report, below).
        let mut door = Vec::new();
        for e in &hub.events {
            let joined = matches!(e, Event::Joined { .. });
            match (self.single, joined) {
                // One rail's joins are its coordinator's too, through the hub.
                (true, true) => {}
                (true, false) => door.push(e.clone()),
                (false, _) => self.cx.log(if joined { 1 } else { 0 }, e.line()),
            }
        }
        let roster = hub.roster.clone();
        // Each rail's coordinator listens on loopback for rank 0's own rank of the rail only;
        // the other nodes' ranks reach it through the hub.
        let mut listeners = std::collections::BTreeMap::new();
        for (&k, ring) in roster.rings.iter().filter(|(_, r)| r.len() >= 2) {
            let l = crate::ring::rendezvous::listen(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
                .map_err(|e| cannot(format!("rail {k}: {e}")))?;
            listeners.insert(k, (l, ring.clone()));
        }
        let hub = hub.start();
        // Each rail's ring (node ranks) and its ring ranks whose nodes never declared: those
        // are awaited a moment only, once the others joined (they had the whole join window).
        let mut place = |k: u32, seat: rails::Seat| -> Place {
            let (listener, nodes) = match listeners.remove(&k) {
                Some((l, n)) => (Some(l), n),
                None => (None, Vec::new()),
            };
            let silent = silent_ring_ranks(&nodes, &roster.silent);
            Place {
                seat,
                relay: hub.link(k),
                ring: (nodes, silent),
                listener,
                join_via: None,
            }
        };
        let seats = roster.seats(0);
        let mut rail_runs = Vec::new();
        for x in runs {
            let Some(seat) = seats.iter().find(|s| s.rail == x.0.rail).copied() else {
                self.not_seated(&x.0);
                continue;
            };
            let at = place(x.0.rail, seat);
            rail_runs.push(self.rail_run(x, at, rail_runs.is_empty()));
        }
        let hosted = self.hosted(&roster, &mut place);
        let mut r = self.drive(rail_runs, hosted, Some(&roster));
        let (failed, why) = job_verdict(&r);
        door.extend(hub.finish(failed, why));
        self.door_said(&mut r, door);
        r
    }

    /// Runs this node's rails: each rail's rank (and rank 0's hosted coordinators) at once,
    /// merged into the job's report; one rail's rank alone, its report the job's.
    fn drive(
        &self,
        rail_runs: Vec<RailRun>,
        hosted: Vec<rails::Hosted>,
        roster: Option<&Roster>,
    ) -> RankResult {
        let log = |level: u8, s: &str| self.cx.log(if level == 0 { 0 } else { 1 }, s);
        if !self.single {
            return rails::run_node(
                rail_runs,
                hosted,
                self.slots,
                self.wanted,
                roster,
                self.opts,
                &log,
            );
        }
        match rail_runs.into_iter().next() {
            Some(r) => run::run_rank(r.setup, self.opts, &log),
            None => Err(run::RunError {
                kind: Failure::CannotRun,
                message: format!("rank {}: rank 0 gave it no place on the ring", self.id.rank),
            }),
        }
    }

    /// What rank 0's door turned away and said at the end: one rail's report carries it in
    /// its events (the door is its coordinator's port), before the coordinator's own; the
    /// rails' (and a failed rank's) go to stderr.
    fn door_said(&self, r: &mut RankResult, mut door: Vec<Event>) {
        if let (
            true,
            Ok(RankOutcome {
                report: Some(rep), ..
            }),
        ) = (self.single, &mut *r)
        {
            door.append(&mut rep.events);
            rep.events = door;
            return;
        }
        for e in door {
            self.cx.log(0, e.line());
        }
    }

    /// One rail listens for its data links while the others join, as a rank without
    /// `--rails` always did, and says it cannot before it takes a seat; the rails bind
    /// theirs as each rail's run starts.
    fn bind_early(&self, runs: Vec<RailSetup>) -> Result<Vec<RailSetup>, run::RunError> {
        if !self.single {
            return Ok(runs);
        }
        runs.into_iter()
            .map(|(p, ip, f, label)| Ok((p, ip, Some(run::bind_data(f, ip)?), label)))
            .collect()
    }

    /// Rank 0: the coordinators of the rails it does not drive, hosted for the nodes that do.
    fn hosted(
        &self,
        roster: &crate::ring::railplan::Roster,
        place: &mut dyn FnMut(u32, rails::Seat) -> Place,
    ) -> Vec<rails::Hosted> {
        let mut hosted = Vec::new();
        for (&k, nodes) in roster.rings.iter() {
            if nodes.len() < 2 || nodes.first() == Some(&0) {
                continue;
            }
            let mut identity = rails::rail_identity(self.id, k);
            identity.world = nodes.len() as u32;
            let n = nodes.len();
            self.cx.log(
                1,
                format!("rail {k}: this node lacks it; hosting its coordinator for {n} nodes"),
            );
            let seat = rails::Seat {
                rail: k,
                rank: 0,
                world: identity.world,
            };
            let at = place(k, seat);
            hosted.push(rails::Hosted {
                rail: k,
                identity,
                listener: at.listener,
                nodes: at.ring.0,
                silent: at.ring.1,
                relay: at.relay,
            });
        }
        hosted
    }

    /// Another node: declare its rails on the one connection, run the rails it is seated on
    /// through it, and exit with the job's verdict.
    fn other(&self, runs: Vec<RailSetup>) -> RankResult {
        use crate::ring::railmux;
        let hello = railmux::node_hello(self.id, hostname(), self.slots, (self.opts, self.sel));
        let (seats, s) = railmux::declare(&self.id.coordinator, hello, self.opts.join_timeout())
            .map_err(|e| declare_failed(self.id.rank, e))?;
        let quiet = crate::ring::rendezvous::silence(self.opts.timeout());
        let relay = railmux::NodeRelay::start(s, &seats, quiet).map_err(|e| run::RunError {
            kind: Failure::CannotRun,
            message: if self.single {
                format!("rank {}: cannot relay its control connection: {e}", self.id.rank)
            } else {
                format!("rails: cannot relay this node's rails: {e}")
            },
        })?;
        let mut rail_runs = Vec::new();
        for x in runs {
            let Some(seat) = seats.iter().find(|s| s.rail == x.0.rail).copied() else {
                self.not_seated(&x.0);
                continue;
            };
            let at = Place {
                seat,
                ring: Default::default(),
                listener: None,
                relay: None,
                join_via: relay.addrs.get(&seat.rail).cloned(),
            };
            rail_runs.push(self.rail_run(x, at, rail_runs.is_empty()));
        }
        let r = self.drive(rail_runs, Vec::new(), None);
        if self.single {
            // One rail's rank heard the job's end from its coordinator: its own end is it.
            return r;
        }
        // Told to stop (the scheduler's SIGTERM, SIGKILL to follow): rank 0's word within
        // a moment, or this node's own end.
        let wait = if interrupted() {
            std::time::Duration::from_secs(2)
        } else {
            JOB_VERDICT_WAIT
        };
        let job = relay.job_verdict(wait);
        match (r, job) {
            (Err(e), _) if e.kind == Failure::CannotRun => Err(e),
            // This node's own rails' end says what it saw; the job's verdict decides.
            (Err(e), Some(j)) => {
                self.cx.log(0, format!("ring: {}", e.message));
                Ok(RankOutcome {
                    report: None,
                    failed: j.0,
                    why: j.1.filter(|_| j.0),
                })
            }
            // The job's verdict over every rail decides this node's exit status.
            (_, Some((failed, why))) => Ok(RankOutcome {
                report: None,
                failed,
                why: why.filter(|_| failed),
            }),
            (r, None) => r,
        }
    }
}
