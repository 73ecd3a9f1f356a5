//! One rank's whole run over TCP: host the coordinator (rank 0), bootstrap, connect the
//! ring's data links per channel, sweep the sizes, report to the coordinator, and (rank 0)
//! assemble the job's report. Returns data; the CLI prints.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::ring::collective::allreduce::{self, Buffers, ChannelLinks, Progress, Ring, RingError, SizeSpec};
use crate::ring::collective::scanstep::{self, RankCtx, ScanLinks};
use crate::ring::collective::transport::tcp::{self, TcpFabric};
use crate::ring::collective::transport::{Fabric, LinkKey, LinkRequest};
use crate::ring::coordinator::{self, CoordinatorConfig, CoordinatorReport, ScanDriver};
use crate::ring::diagnosis::driver::{Driver, ScanReport, Step};
use crate::ring::diagnosis::evidence;
use crate::ring::portread::Sampler;
use crate::ring::diagnosis::traffic::{self, PortReading};
use crate::ring::diagnosis::localize::Thresholds;
use crate::ring::diagnosis::watchdog::{self, Control, RankWatch, WatchState};
use crate::ring::diagnosis::{linkerror, neighbor};
use crate::ring::launcher::Identity;
use crate::ring::model::{CounterMove, LiveStatus, Verdict, shown, thousands};
use crate::text::printable;
use crate::ring::model::{LinkSample, Phase, Position, Rank, RankInfo, WaitReport};
use crate::ring::rendezvous::{self, BootstrapError, Session};
use crate::ring::report::{LauncherInfo, ResultRow, RingReport, aggregate, avg_busbw};
use crate::ring::wire::{self, Hello, Msg, RankResults, RowResult};

pub use crate::ring::options::Options;
// What a rank's run ends with is the report's vocabulary (railmerge reads it too).
pub use crate::ring::report::{Failure, RankOutcome, RunError};

/// Where this rank is and how it reaches the others.
pub(crate) struct Setup {
    pub identity: Identity,
    pub host: String,
    /// Data-plane address to listen on, and the interface it belongs to.
    pub data_ip: IpAddr,
    pub device: Option<String>,
    /// Rank 0 only: the coordinator's port, already bound (else bound from `identity`).
    pub coordinator_listener: Option<TcpListener>,
    /// Port rate of the data interface in 10^9 bytes/s, where known (the scan judges links
    /// against it).
    pub line_rate_gbs: Option<f64>,
    /// The switch port the data interface is cabled to, where LLDP said it (sent in the
    /// hello; see [`crate::ring::diagnosis::neighbor`]); None: unknown.
    pub neighbor: Option<crate::ring::model::Neighbor>,
    /// What the data port could run at (see [`crate::ring::diagnosis::portmax`]), sent in
    /// the hello; None: unknown.
    pub port_max: Option<crate::ring::model::PortMax>,
    /// The data plane; None: TCP on `data_ip`. Tests pass an in-process fabric.
    pub fabric: Option<Box<dyn Fabric + Send>>,
    /// This rank's data NIC port counters (sampled at the start, the end, and a stuck
    /// report); None: not sampled.
    pub counters: Option<Sampler>,
    /// Where the run says what it is doing, for a progress line; None: nobody watches.
    pub live: Option<Arc<LiveStatus>>,
    /// Rank 0 only: shown each size's row (and the rank table) when every rank finished
    /// that size, before the report; None: rows only in the report.
    pub on_row: Option<ShowRow>,
    /// With `--rails`: every rail slot of this node, announced in the hello; empty
    /// otherwise.
    pub rails: Vec<crate::ring::model::RailPort>,
    /// With `--rails`, rank 0: this rail's index and the node's shared stop, so a failed
    /// rail ends the other rails' rings too (see [`crate::ring::railstop::RailStop`]).
    pub rail_stop: Option<(u32, Arc<crate::ring::railstop::RailStop>)>,
    /// With `--rails`: this node is rank 0 of a rail's ring that another node's process
    /// (the job's rank 0, which lacks the rail) hosts the coordinator of: join it, host none.
    pub join_only: bool,
    /// With `--rails`, another node: join this rail's coordinator through this address (the
    /// node's relay onto its one control connection).
    pub join_via: Option<String>,
    /// With `--rails`, rank 0: this rail's coordinator is reached through rank 0's relay
    /// (see [`CoordinatorConfig::relay`]).
    pub relay: Option<coordinator::RailLink>,
    /// With `--rails`, rank 0 of a rail's ring of some of the nodes: ring rank i is the
    /// job's node `nodes[i]` (see [`CoordinatorConfig::nodes`]); empty otherwise.
    pub nodes: Vec<crate::ring::model::Rank>,
    /// With `--rails`, rank 0 of a rail's ring: its ring ranks whose nodes never declared
    /// their rails (see [`CoordinatorConfig::silent`]); empty otherwise.
    pub silent: BTreeSet<Rank>,
    /// With `--rails`: this node's rank in the job (`identity.rank` is its rank on the
    /// rail's ring), which this rank's own messages name before its table says it.
    pub node: Option<Rank>,
}

impl Setup {
    /// A rank that is `identity` on `host`, its data on `data_ip` (`device`), and nothing
    /// else given: tcp, no counters, no rows shown, no rails, hosting the coordinator when it
    /// is rank 0 (on the coordinator's own address).
    pub fn new(identity: Identity, host: String, data_ip: IpAddr, device: Option<String>) -> Setup {
        Setup {
            identity,
            host,
            data_ip,
            device,
            coordinator_listener: None,
            line_rate_gbs: None,
            neighbor: None,
            port_max: None,
            fabric: None,
            counters: None,
            live: None,
            on_row: None,
            rails: Vec::new(),
            rail_stop: None,
            join_only: false,
            join_via: None,
            relay: None,
            nodes: Vec::new(),
            silent: BTreeSet::new(),
            node: None,
        }
    }
}

/// See [`Setup::on_row`].
pub(crate) type ShowRow = Arc<dyn Fn(&[RankInfo], &ResultRow) + Send + Sync>;

fn fault(message: impl Into<String>) -> RunError {
    RunError {
        kind: Failure::Fault,
        message: message.into(),
    }
}

/// A failed run's reason as the coordinator's end-of-run message gives it to the other
/// ranks: its verdicts, else wrong results. Bounded and printable (it came off the network).
pub(crate) fn failed_why(verdicts: &[Verdict], more: u64) -> String {
    if verdicts.is_empty() {
        return "rank 0 reports wrong results (its report has the rows)".into();
    }
    let all = verdicts
        .iter()
        .map(|v| v.message.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    let all = printable(&all, 2000);
    match more {
        0 => format!("rank 0's verdict: {all}"),
        n => format!(
            "rank 0's verdict: {all}; and {} more (rank 0's report lists them)",
            thousands(usize::try_from(n).unwrap_or(usize::MAX))
        ),
    }
}

/// Listen for data links now (TCP on `data_ip`, unless a fabric was given): a node that
/// declares on rank 0's door listens while the others join, and one that cannot listen
/// says so before it takes a seat.
pub(crate) fn bind_data(
    given: Option<Box<dyn Fabric + Send>>,
    data_ip: IpAddr,
) -> Result<Box<dyn Fabric + Send>, RunError> {
    data_plane(given, data_ip)
}

/// The fabric given, or TCP listening on `data_ip`.
fn data_plane(
    given: Option<Box<dyn Fabric + Send>>,
    data_ip: IpAddr,
) -> Result<Box<dyn Fabric + Send>, RunError> {
    match given {
        Some(f) => Ok(f),
        None => TcpFabric::bind(data_ip)
            .map(|f| Box::new(f) as Box<dyn Fabric + Send>)
            .map_err(|e| RunError {
                kind: Failure::CannotRun,
                message: format!("cannot listen for data links on {data_ip}: {e}"),
            }),
    }
}

/// Run one rank to the end. `log` gets progress lines (the CLI decides where they go).
pub(crate) fn run_rank(
    mut setup: Setup,
    opts: &Options,
    log: &(dyn Fn(u8, &str) + Sync),
) -> Result<RankOutcome, RunError> {
    let coordinator = start_coordinator(&mut setup, opts, log)?;
    let fabric = data_plane(setup.fabric.take(), setup.data_ip);
    let id = &setup.identity;
    let join_addr = coordinator
        .as_ref()
        .and_then(|(_, own)| own.clone())
        .or_else(|| setup.join_via.clone())
        .unwrap_or_else(|| id.coordinator.clone());
    let counters = setup.counters;
    let live = setup.live.clone().unwrap_or_default();
    let result = fabric.as_ref().map_err(|e| RunError {
        kind: e.kind,
        message: e.message.clone(),
    });
    let result = result.and_then(|fabric| {
        rank_body(
            &join_addr,
            (&setup.identity, setup.rails.clone(), setup.node),
            &setup.host,
            fabric.as_ref(),
            (
                setup.device.clone(),
                setup.neighbor.clone(),
                setup.port_max.clone(),
            ),
            setup.line_rate_gbs,
            counters.as_ref(),
            live,
            opts,
            log,
        )
    });
    // Read after the run: `--transport auto` decides once it has seen the rank table.
    let transport = fabric
        .as_ref()
        .map(|f| f.transport())
        .unwrap_or("tcp")
        .to_string();
    drop(fabric);
    let Some((coord, _)) = coordinator else {
        return result;
    };
    // Rank 0: the coordinator's view is the report, whatever happened to this rank.
    let crep: CoordinatorReport = coord.join().unwrap_or_default();
    let local_err = result.as_ref().err().map(|e| e.message.clone());
    job_outcome(id, opts, crep, transport, local_err)
}

/// Rank 0's coordinator thread and the address rank 0 joins it through.
type HostedCoordinator = (thread::JoinHandle<CoordinatorReport>, Option<String>);

/// Rank 0 hosts the coordinator (unless it only joins) on its own thread, for the whole run.
fn start_coordinator(
    setup: &mut Setup,
    opts: &Options,
    log: &(dyn Fn(u8, &str) + Sync),
) -> Result<Option<HostedCoordinator>, RunError> {
    let cannot = |m: String| RunError {
        kind: Failure::CannotRun,
        message: m,
    };
    if setup.identity.rank != 0 || setup.join_only {
        return Ok(None);
    }
    let listener = setup.coordinator_listener.take();
    let id = &setup.identity;
    let l = match listener {
        Some(l) => l,
        None => rendezvous::bind(&id.coordinator).map_err(|e| cannot(e.to_string()))?,
    };
    log(
        1,
        &format!(
            "coordinator listening on {} for {} ranks",
            l.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            id.world
        ),
    );
    let mut cfg = coordinator_config(
        id,
        opts,
        setup.rail_stop.clone(),
        setup.on_row.clone(),
        (setup.nodes.clone(), setup.silent.clone()),
    );
    cfg.relay = setup.relay.clone();
    // Rank 0 joins through its own listener's address (the advertised name may not
    // resolve to this host from itself, or name port 0).
    let own = l.local_addr().ok().map(|a| {
        let ip = if a.ip().is_unspecified() {
            IpAddr::from([127, 0, 0, 1])
        } else {
            a.ip()
        };
        SocketAddr::new(ip, a.port()).to_string()
    });
    Ok(Some((
        thread::spawn(move || coordinator::coordinate(l, cfg)),
        own,
    )))
}

/// Rank 0's coordinator configuration: the watchdog (stopping with the node's other rails
/// under `--rails`), the scan, the rows as they complete.
fn coordinator_config(
    id: &Identity,
    opts: &Options,
    rail_stop: Option<(u32, Arc<crate::ring::railstop::RailStop>)>,
    on_row: Option<ShowRow>,
    (nodes, silent): (Vec<Rank>, BTreeSet<Rank>),
) -> CoordinatorConfig {
    let timeout = opts.timeout();
    CoordinatorConfig {
        world: id.world,
        token: id.token.clone(),
        timeout,
        join_timeout: opts.join_timeout(),
        advertised: id.coordinator.clone(),
        params: opts.canonical(),
        // The watchdog, live; the scan's verdicts join at the end (see below).
        judge: Some(match rail_stop {
            Some((rail, stop)) => crate::ring::railstop::stopping_judge(watchdog_judge(timeout), rail, stop),
            None => watchdog_judge(timeout),
        }),
        // The natural ring (the sweep's `Ring`); rails plug their rings in here.
        rings: None,
        nodes,
        silent,
        silent_wait: SILENT_WAIT,
        relay: None,
        interrupt: Some(crate::ring::interrupt::process()),
        scan: opts.scan.clone().map(|o| {
            let make: Arc<dyn Fn(usize) -> Box<dyn ScanDriver> + Send + Sync> =
                Arc::new(move |n| Box::new(Driver::new(n, o.clone(), Thresholds::default())));
            make
        }),
        on_row: on_row.map(|show| {
            let (world, channels) = (id.world, opts.channels);
            let sink: coordinator::RowSink = Arc::new(move |ranks: &[RankInfo], rows: Vec<RowResult>| {
                // The same arithmetic as the report's rows (the sink gets ranks in order).
                let results: Vec<RankResults> = rows
                    .into_iter()
                    .zip(ranks)
                    .map(|(row, info)| RankResults {
                        rank: info.rank,
                        rows: vec![row],
                        links: vec![],
                        link_size_bytes: 0,
                        port_counters: vec![],
                        chunk_waits: vec![],
                    })
                    .collect();
                if let Some(row) = aggregate(world, ranks, &results, channels).0.first() {
                    show(ranks, row);
                }
            });
            sink
        }),
    }
}

/// Rank 0's outcome from its coordinator's report: the job's report (or the coordinator's
/// own limit, exit 2).
fn job_outcome(
    id: &Identity,
    opts: &Options,
    crep: CoordinatorReport,
    transport: String,
    local_err: Option<String>,
) -> Result<RankOutcome, RunError> {
    // The coordinator's own limit: fabprobe could not run the job here (exit 2), no verdict.
    if let Some(message) = crep.coordinator_error.clone() {
        return Err(RunError {
            kind: Failure::CannotRun,
            message,
        });
    }
    let (rows, links) = aggregate(id.world, &crep.ranks, &crep.results, opts.channels);
    let error = crep.abort.clone().or(local_err);
    let mut verdicts = crep.verdicts.clone();
    for v in crep.scan.iter().flat_map(|s| s.verdicts.iter()) {
        if !verdicts.contains(v) {
            verdicts.push(v.clone());
        }
    }
    evidence::attach(&mut verdicts, &crep.port_counters, &crep.ranks);
    neighbor::attach(&mut verdicts, &crep.ranks);
    let mut report = RingReport {
        world: id.world,
        transport_note: crate::ring::report::transport_note(&crep.ranks, &transport),
        transport,
        launcher: LauncherInfo::of(id),
        options: opts.clone(),
        avg_busbw_gbs: avg_busbw(&rows),
        ranks: crep.ranks,
        results: rows,
        links,
        bootstrap_us: crep.bootstrap_us,
        events: crep.events,
        scan: crep.scan,
        verdicts,
        not_judged: crep.not_judged,
        error,
        port_counters: crep.port_counters.into_values().flatten().collect(),
        rails: Vec::new(),
    };
    report.number_by_node();
    let failed = report.failed();
    Ok(RankOutcome {
        report: Some(report),
        failed,
        why: None,
    })
}

/// With `--rails`, rank 0 on a rail it does not drive: host that rail's coordinator for the
/// nodes that do (`id` is the rail's: its world is theirs), and return the rail's report.
pub(crate) fn host_only(
    listener: Option<TcpListener>,
    id: &Identity,
    opts: &Options,
    rail_stop: Option<(u32, Arc<crate::ring::railstop::RailStop>)>,
    (nodes, relay): ((Vec<Rank>, BTreeSet<Rank>), Option<coordinator::RailLink>),
    log: &(dyn Fn(u8, &str) + Sync),
) -> Result<RankOutcome, RunError> {
    let l = match listener {
        Some(l) => l,
        None => rendezvous::bind(&id.coordinator).map_err(|e| RunError {
            kind: Failure::CannotRun,
            message: e.to_string(),
        })?,
    };
    log(
        1,
        &format!(
            "coordinator (not a rank of this ring) listening on {} for {} ranks",
            l.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            id.world
        ),
    );
    let mut cfg = coordinator_config(id, opts, rail_stop, None, nodes);
    cfg.relay = relay;
    let crep = coordinator::coordinate(l, cfg);
    let transport = crep
        .ranks
        .first()
        .map(|i| i.transport.clone())
        .unwrap_or_else(|| "tcp".into());
    job_outcome(id, opts, crep, transport, None)
}

#[allow(clippy::too_many_arguments)]
fn rank_body(
    join_addr: &str,
    (id, rails, node): (&Identity, Vec<crate::ring::model::RailPort>, Option<Rank>),
    host: &str,
    fabric: &dyn Fabric,
    (device, neighbor, port_max): (
        Option<String>,
        Option<crate::ring::model::Neighbor>,
        Option<crate::ring::model::PortMax>,
    ),
    line_rate_gbs: Option<f64>,
    counters: Option<&Sampler>,
    live: Arc<LiveStatus>,
    opts: &Options,
    log: &(dyn Fn(u8, &str) + Sync),
) -> Result<RankOutcome, RunError> {
    let timeout = opts.timeout();
    if let Some(c) = counters {
        c.start();
    }
    let moved = || counters.map(|c| c.moved(id.rank, host)).unwrap_or_default();
    let cannot = |m: String| RunError {
        kind: Failure::CannotRun,
        message: m,
    };
    // Every rail's rank of a node heartbeats: the job's ranks are the ring's times the rails.
    let driven = rails.iter().filter(|p| p.usable).count().max(1) as u64;
    let every = rendezvous::heartbeat_every(id.world as u64 * driven, timeout);
    let hello = rank_hello(id, (rails, host), fabric, (device, neighbor, port_max), opts);
    let t0 = Instant::now();
    // Before its table, this rank names itself as the job's node (a rail's ring rank is not
    // the rank the operator launched).
    let me = node.unwrap_or(id.rank);
    // Named as the operator gave it, whichever address this rank joined through.
    let session = rendezvous::join_through(join_addr, &id.coordinator, hello, (opts.join_timeout(), timeout))
        .map_err(|e| (own_bootstrap_error(me, &e), e))
        .map_err(|(m, e)| match e {
            // Refused for its own options (token, world, sweep): a usage problem here.
            BootstrapError::Bind { .. } | BootstrapError::Rejected { .. } => cannot(m),
            _ => fault(m),
        })?;
    log(
        1,
        &format!(
            "rank {me}: its part of the rank table ({} entries) after {} ms",
            session.table.len(),
            t0.elapsed().as_millis()
        ),
    );
    let session = Arc::new(session);
    let beat = Beat::new(opts.channels, live);
    let stop = AtomicBool::new(false);
    // Heartbeats from the table to the end of the run (also while a failed rank waits for
    // the coordinator's word): the watchdog tells a silent rank from a waiting one by them.
    thread::scope(|sc| {
        sc.spawn(|| heartbeats(id.rank, &session, &beat, &stop, (timeout, every)));
        let bytes = || counters.map_or_else(|| PortReading::unknown("not sampled"), Sampler::bytes);
        let port = Port {
            line_rate_gbs,
            bytes: &bytes,
        };
        let r = after_join(id, &session, fabric, port, &moved, &beat, opts, log);
        stop.store(true, Ordering::Relaxed);
        // The data links are closed now; let their receivers take the last bytes (bounded
        // in all, however many links) before this process may exit.
        tcp::wait_closed(Instant::now() + tcp::CLOSE_LINGER);
        r
    })
}

/// This rank's hello: who it is, where its data links listen, its rails and switch port.
fn rank_hello(
    id: &Identity,
    (rails, host): (Vec<crate::ring::model::RailPort>, &str),
    fabric: &dyn Fabric,
    (device, neighbor, port_max): (
        Option<String>,
        Option<crate::ring::model::Neighbor>,
        Option<crate::ring::model::PortMax>,
    ),
    opts: &Options,
) -> Hello {
    let info = RankInfo {
        neighbor,
        port_max,
        rails,
        capabilities: vec![fabric.transport().into()],
        rank: id.rank,
        host: host.to_string(),
        address: fabric.address(),
        device,
        transport: fabric.transport().into(),
        pid: Some(std::process::id()),
        node: None,
    };
    Hello {
        protocol: wire::PROTOCOL,
        rank: id.rank,
        world: id.world,
        token: id.token.clone(),
        info,
        capabilities: vec![fabric.transport().into()],
        params: opts.canonical(),
    }
}

/// A heartbeat every `every` ([`rendezvous::heartbeat_every`]) until `stop`, and rank 0 told at once when
/// this process is interrupted.
fn heartbeats(
    rank: Rank,
    session: &Arc<Session>,
    beat: &Beat,
    stop: &AtomicBool,
    (timeout, every): (Duration, Duration),
) {
    let mut cpu = crate::ring::schedstat::Meter::default();
    let interrupt = crate::ring::interrupt::process();
    let mut told = false;
    while !stop.load(Ordering::Relaxed) {
        let mut w = beat.report(rank, timeout.as_millis() as u64);
        w.cpu = cpu.read();
        let _ = session.send(&Msg::Heartbeat(w));
        let until = Instant::now() + every;
        while Instant::now() < until && !stop.load(Ordering::Relaxed) {
            if let Some(signal) = interrupt.caught().filter(|_| !told) {
                told = true;
                interrupted(rank, session, beat, signal);
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

/// This process was told to stop: rank 0 learns where this rank was (it ends the run and
/// reports), and the data plane stops.
fn interrupted(rank: Rank, session: &Session, beat: &Beat, signal: String) {
    let at = position(beat, rank);
    let _ = session.send(&Msg::Interrupted {
        rank,
        signal: signal.clone(),
        at: at.clone(),
    });
    session.abort.raise(format!("interrupted by {signal} at {at}"));
}

/// Where this rank's run is, in words: `size 1048576 bytes (3 of the sweep), step 2 of round
/// 5`, `scan order 4`, `link setup`.
fn position(beat: &Beat, rank: Rank) -> String {
    let live = &beat.live;
    let w = beat.report(rank, u64::MAX);
    match live.stage() {
        LiveStatus::SCAN => format!("link scan order {}", live.scan_order.load(Ordering::Relaxed) + 1),
        LiveStatus::SWEEP => format!(
            "size {} bytes ({} of the sweep), step {} of round {}",
            live.size_bytes.load(Ordering::Relaxed),
            live.size_index.load(Ordering::Relaxed) + 1,
            w.step,
            w.round
        ),
        LiveStatus::DONE => "the end of the run".into(),
        _ => "link setup".into(),
    }
}

/// A rank's own error before its table arrived, naming it as rank `me` (the job's node
/// rank); the coordinator's abort is its word and names the ranks concerned itself. Pure.
pub(crate) fn own_bootstrap_error(me: Rank, e: &BootstrapError) -> String {
    match e {
        BootstrapError::Aborted(reason) => reason.clone(),
        e => format!("rank {me}: {e}"),
    }
}

/// How long a rail's coordinator awaits a node that never declared its rails, once every
/// other rank joined (see [`CoordinatorConfig::silent`]): not at all, since rank 0's one door
/// turns such a node away when it comes later (`railmux::LATE`), and it had the door's whole
/// join window.
pub(crate) const SILENT_WAIT: Duration = Duration::ZERO;

/// Which progress the heartbeats report.
const MODE_SETUP: u8 = 0;
const MODE_SCAN: u8 = 1;
const MODE_SWEEP: u8 = 2;

/// What this rank is doing, for heartbeats: the scan's progress, then the channels'.
struct Beat {
    mode: AtomicU8,
    /// The run ended here (its results or its failure went to the coordinator) and this
    /// rank waits for the coordinator's word: heartbeats say so.
    awaiting: AtomicBool,
    scan: Progress,
    chans: Vec<Progress>,
    live: Arc<LiveStatus>,
}

impl Beat {
    fn new(channels: u32, live: Arc<LiveStatus>) -> Beat {
        Beat {
            mode: AtomicU8::new(MODE_SETUP),
            awaiting: AtomicBool::new(false),
            scan: Progress::default(),
            chans: (0..channels).map(|_| Progress::default()).collect(),
            live,
        }
    }
    /// A heartbeat names the peer it waits on only once that wait passed `timeout_ms` (then
    /// it repeats the stuck report): the watchdog reads every named wait as a stuck one.
    fn report(&self, rank: Rank, timeout_ms: u64) -> WaitReport {
        let mut w = match self.mode.load(Ordering::Relaxed) {
            MODE_SETUP => {
                // Link setup has its own deadline and reports its own failure; not a data wait.
                let mut w = self.scan.report(rank, 0);
                w.phase = Phase::Bootstrap;
                w
            }
            MODE_SCAN => self.scan.report(rank, 0),
            _ => allreduce::worst_report(rank, &self.chans),
        };
        if w.since_progress_ms < timeout_ms {
            w.waiting_on = None;
        }
        w.awaiting_coordinator = self.awaiting.load(Ordering::Relaxed);
        w
    }
    /// Every channel's position while the sweep runs (empty before it, and for one channel).
    fn positions(&self) -> Vec<Position> {
        if self.mode.load(Ordering::Relaxed) == MODE_SWEEP {
            allreduce::positions(&self.chans)
        } else {
            Vec::new()
        }
    }
}

/// The moved counters of this rank's data NIC since the start of the run.
type Moved<'a> = &'a (dyn Fn() -> Vec<CounterMove> + Sync);

/// This rank's data port as its scan samples carry it: its rate where known, and its byte
/// counters now (read around each scan order: traffic that was not the probe's).
#[derive(Clone, Copy)]
struct Port<'a> {
    line_rate_gbs: Option<f64>,
    bytes: &'a (dyn Fn() -> PortReading + Sync),
}

#[allow(clippy::too_many_arguments)]
fn after_join(
    id: &Identity,
    session: &Arc<Session>,
    fabric: &dyn Fabric,
    port: Port,
    moved: Moved,
    beat: &Beat,
    opts: &Options,
    log: &(dyn Fn(u8, &str) + Sync),
) -> Result<RankOutcome, RunError> {
    let timeout = opts.timeout();
    let reported = AtomicBool::new(false);
    let out = connected_run(
        id,
        session,
        fabric,
        port,
        moved,
        beat,
        &reported,
        opts,
        log,
    );
    match out {
        Ok(rows_links) => {
            let (rows, links, link_size_bytes, _open_links) = rows_links;
            session
                .send(&Msg::Results(RankResults {
                    rank: id.rank,
                    rows,
                    links,
                    link_size_bytes,
                    port_counters: moved(),
                    chunk_waits: _open_links.0.iter().map(|l| l.trace.waits()).collect(),
                }))
                .map_err(|e| fault(e.to_string()))?;
            beat.awaiting.store(true, Ordering::Relaxed);
            // The coordinator answers once every rank reported, within its own deadlines.
            match session.wait_done(timeout * 2 + Duration::from_secs(5)) {
                Ok((failed, verdicts, more)) => Ok(RankOutcome {
                    report: None,
                    failed,
                    why: failed.then(|| failed_why(&verdicts, more)),
                }),
                Err(e) => Err(fault(e.to_string())),
            }
        }
        Err(e) => {
            let positions = beat.positions();
            beat.awaiting.store(true, Ordering::Relaxed);
            Err(after_failure(
                id,
                session,
                e,
                &reported,
                (moved, positions),
                timeout,
            ))
        }
    }
}

/// This rank failed (`e`): tell the coordinator what went wrong here (once), then take its
/// word for the cause, within the silence deadline and its grace.
fn after_failure(
    id: &Identity,
    session: &Session,
    e: RingError,
    reported: &AtomicBool,
    (moved, positions): (Moved, Vec<Position>),
    timeout: Duration,
) -> RunError {
    // Tell the coordinator what went wrong here, then take its word for the cause.
    let msg = match &e {
        RingError::Stuck(w, _) => Msg::Stuck {
            // With every channel's position: the judge compares a sender on its
            // receiver's channel, which need not be the one that failed here.
            wait: WaitReport {
                positions,
                ..(**w).clone()
            },
            port_counters: moved(),
        },
        other => Msg::Failed {
            rank: id.rank,
            error: other.to_string(),
            link_fault: other.link_fault().cloned(),
            port_counters: moved(),
            peer_closed: other.peer_closed(),
        },
    };
    if let Some(signal) = crate::ring::interrupt::process().caught() {
        // The scheduler tears the job down: rank 0 reports, this rank just stops.
        return fault(format!("interrupted by {signal}: {e}"));
    }
    let already = matches!(e, RingError::Stuck(..)) && reported.load(Ordering::Relaxed);
    if !matches!(e, RingError::Aborted(_)) && !already {
        let _ = session.send(&msg);
    }

    // The coordinator names the cause within the silence deadline and its grace.
    let wait = rendezvous::silence(timeout) + rendezvous::FAILURE_GRACE + Duration::from_secs(2);
    let why = match session.wait_done(wait) {
        Err(BootstrapError::Aborted(reason)) => {
            // The verdict may name this rank: its NIC's counters, as they are now
            // (a NIC still retrying has counted more since any stuck report).
            let _ = session.send(&Msg::Counters {
                port_counters: moved(),
            });
            reason
        }
        _ => e.to_string(),
    };
    fault(why)
}

/// Rows, the hop sample, its size, and the data links themselves: they stay open until the
/// coordinator says every rank is done (closing a socket with unread credits sends a reset
/// that would destroy data a slower peer has not read yet).
type Measured = (
    Vec<RowResult>,
    Vec<LinkSample>,
    u64,
    (Vec<ChannelLinks>, ScanLinks),
);

#[allow(clippy::too_many_arguments)]
fn connected_run(
    id: &Identity,
    session: &Arc<Session>,
    fabric: &dyn Fabric,
    port: Port,
    moved: Moved,
    beat: &Beat,
    reported: &AtomicBool,
    opts: &Options,
    log: &(dyn Fn(u8, &str) + Sync),
) -> Result<Measured, RingError> {
    let timeout = opts.timeout();
    let ring = Ring {
        rank: id.rank,
        world: id.world,
        timeout,
    };
    let (pred, succ) = (ring.pred(), ring.succ());
    let mut links = if opts.sweep {
        sweep_links(id, session, fabric, (pred, succ), opts, log)?
    } else {
        Vec::new()
    };
    // The buffers of the largest size, allocated and filled before this rank says it is
    // ready: the go barrier absorbs the time, no peer waits on it during the sweep.
    let mut bufs = match opts.sizes.iter().max() {
        Some(&max) if opts.sweep => Buffers::new(id.rank, max),
        _ => Buffers::default(),
    };
    session
        .send(&Msg::Ready { rank: id.rank })
        .map_err(|e| RingError::Aborted(e.to_string()))?;
    session
        .wait_go(timeout)
        .map_err(|e| RingError::Aborted(e.to_string()))?;

    let mut scan_links = ScanLinks::default();
    if opts.scan.is_some() && id.world >= 2 {
        beat.mode.store(MODE_SCAN, Ordering::Relaxed);
        beat.live.set_stage(LiveStatus::SCAN);
        scan_loop(
            id,
            session,
            fabric,
            port,
            moved,
            beat,
            reported,
            &mut scan_links,
            opts,
        )?;
    }
    beat.mode.store(MODE_SWEEP, Ordering::Relaxed);
    beat.live.set_stage(LiveStatus::SWEEP);
    if !opts.sweep {
        return Ok((Vec::new(), Vec::new(), 0, (links, scan_links)));
    }
    let (rows, last) = sweep(
        ring,
        (&mut links, &mut bufs),
        &beat.chans,
        &beat.live,
        session,
        opts,
        log,
    )?;
    beat.live.set_stage(LiveStatus::DONE);
    // The hop into this rank during the timed iterations of the last size.
    let samples = last.iter().map(|r| hop_sample(pred, id.rank, r)).collect();
    Ok((
        rows,
        samples,
        last.map(|r| r.bytes).unwrap_or(0),
        (links, scan_links),
    ))
}

/// The hop `from` -> `to` as this receiver measured it in size result `r`. Pure.
fn hop_sample(from: Rank, to: Rank, r: &allreduce::SizeResult) -> LinkSample {
    LinkSample {
        order: 0,
        from_rank: from,
        to_rank: to,
        bytes: r.hop_bytes,
        seconds: r.hop_seconds,
        cpu_wait: None,
        silence_s: None,
    }
}

/// The sweep's data links: `--channels` to the successor and from the predecessor (links
/// the fabric refused are logged).
fn sweep_links(
    id: &Identity,
    session: &Session,
    fabric: &dyn Fabric,
    (pred, succ): (Rank, Rank),
    opts: &Options,
    log: &(dyn Fn(u8, &str) + Sync),
) -> Result<Vec<ChannelLinks>, RingError> {
    let timeout = opts.timeout();
    let sends: Vec<LinkKey> = (0..opts.channels).map(|c| (succ, c)).collect();
    let recvs: Vec<LinkKey> = (0..opts.channels).map(|c| (pred, c)).collect();
    let req = LinkRequest {
        me: id.rank,
        token: &id.token,
        table: &session.table,
        shared_transport: session.shared_transport.as_deref(),
        sends: &sends,
        recvs: &recvs,
        slots: opts.slots,
        slot_bytes: opts.slot_bytes,
        deadline: Instant::now() + timeout,
        timeout,
    };
    let open = fabric.open(&req).map_err(RingError::Transport)?;
    for r in &open.rejected {
        log(
            0,
            &format!("rank {}: rejected {r}", shown(&session.table, id.rank)),
        );
    }
    Ok(open
        .sends
        .into_iter()
        .zip(open.recvs)
        .map(|(send, recv)| ChannelLinks {
            send,
            recv,
            trace: Default::default(),
        })
        .collect())
}

/// Run the scan orders the coordinator hands out until it says the scan is over.
#[allow(clippy::too_many_arguments)]
fn scan_loop(
    id: &Identity,
    session: &Arc<Session>,
    fabric: &dyn Fabric,
    port: Port,
    moved: Moved,
    beat: &Beat,
    reported: &AtomicBool,
    scan_links: &mut ScanLinks,
    opts: &Options,
) -> Result<(), RingError> {
    let timeout = opts.timeout();
    // This rank's part of the table, and the peers each scan order brings.
    let mut table = session.table.clone();
    let on_stuck = |w: &WaitReport| {
        reported.store(true, Ordering::Relaxed);
        let _ = session.send(&Msg::Stuck {
            wait: w.clone(),
            port_counters: moved(),
        });
    };
    // Between orders this rank waits for the coordinator, which waits for the slowest
    // rank's samples; the coordinator's watchdog ends a stuck order. This bound is a
    // backstop for a coordinator that pings but never answers.
    let backstop = timeout * 10 + Duration::from_secs(10);
    let mut idle_since = Instant::now();
    loop {
        let msg = session
            .recv(Duration::from_millis(200))
            .map_err(|e| RingError::Aborted(e.to_string()))?;
        match msg {
            Some(Msg::ScanRun {
                index,
                shift,
                bytes,
                reps,
                peers,
            }) => {
                merge_peers(&mut table, peers, id.world);
                let run = (index, shift, bytes, reps);
                let at = (&table[..], &mut *scan_links);
                scan_order(id, session, fabric, port, beat, at, opts, &on_stuck, run)?;
                idle_since = Instant::now();
            }
            Some(Msg::ScanEnd) => return Ok(()),
            _ => {
                // Waiting on the coordinator by design, also while its pings arrive: not
                // a stuck rank (the watchdog reads an unmoved counter as one).
                beat.scan.tick();
                if idle_since.elapsed() > backstop {
                    return Err(RingError::Aborted(format!(
                        "the coordinator sent no scan instruction within {} s",
                        backstop.as_secs()
                    )));
                }
            }
        }
    }
}

/// One scan order: run it (sending `reps` x `bytes` to rank + `shift`) and send its samples.
#[allow(clippy::too_many_arguments)]
fn scan_order(
    id: &Identity,
    session: &Session,
    fabric: &dyn Fabric,
    port: Port,
    beat: &Beat,
    (table, scan_links): (&[RankInfo], &mut ScanLinks),
    opts: &Options,
    on_stuck: &(dyn Fn(&WaitReport) + Sync),
    (index, shift, bytes, reps): (u32, u32, u64, u32),
) -> Result<(), RingError> {
    let timeout = opts.timeout();
    let ctx = RankCtx {
        me: id.rank,
        world: id.world,
        token: &id.token,
        table,
        shared_transport: session.shared_transport.as_deref(),
        slots: opts.slots,
        slot_bytes: opts.slot_bytes,
        timeout,
        measure_cpu: id.source != crate::ring::launcher::Source::Local,
    };
    beat.live.scan_order.store(index, Ordering::Relaxed);
    let before = (port.bytes)();
    let samples = scanstep::run_order(
        &ctx,
        fabric,
        scan_links,
        index,
        shift,
        bytes,
        reps,
        &beat.scan,
        &session.abort,
        on_stuck,
    )?;
    // What the probe moved through the port: reps x bytes out when the order ran, its
    // samples' bytes in.
    let sent = if samples.is_empty() { 0 } else { bytes.saturating_mul(reps as u64) };
    let got = samples.iter().map(|s| s.bytes).sum();
    let traffic = traffic::order_traffic(&before, &(port.bytes)(), (sent, got));
    session
        .send(&Msg::ScanSamples {
            rank: id.rank,
            index,
            samples,
            line_rate_gbs: port.line_rate_gbs,
            traffic: Some(traffic),
        })
        .map_err(|e| RingError::Aborted(e.to_string()))?;
    beat.scan.tick();
    Ok(())
}

/// Add a scan order's peers to this rank's table (ranks of the world it does not hold yet;
/// at most the world in all), kept in rank order.
fn merge_peers(table: &mut Vec<RankInfo>, peers: Vec<RankInfo>, world: u32) {
    for p in peers {
        if p.rank < world && table.len() < world as usize && !table.iter().any(|t| t.rank == p.rank) {
            table.push(p);
        }
    }
    table.sort_by_key(|i| i.rank);
}

/// The watchdog as the coordinator's judge: live during the run, and once at the end (the
/// scan's verdicts join at the end, see `run_rank`).
pub fn watchdog_judge(timeout: Duration) -> coordinator::Judge {
    let timeout_ms = timeout.as_millis() as u64;
    Arc::new(move |rep: &CoordinatorReport, now_ms: u64, final_call: bool| {
        // At the end of a failed run nothing more will arrive: judge as if the watchdog's
        // grace had passed, so an inconclusive hang is still named.
        let failed =
            rep.abort.is_some() || !rep.stuck.is_empty() || !rep.lost.is_empty() || !rep.failed.is_empty();
        let at = if final_call && failed {
            now_ms + WATCH_GRACE_MS
        } else {
            now_ms
        };
        // A completion error names its link and cause at once (RDMA), unless the peer's
        // process is gone: then the rank's death is the verdict, and the faults its evidence.
        let (own, explained) = linkerror::split_by_gone(&rep.link_faults, &rep.gone_ranks());
        let v = linkerror::verdicts(&own, &rep.ranks);
        if !v.is_empty() {
            return v;
        }
        let mut v = watchdog::judge(&watch_state(rep, at, timeout_ms), at);
        linkerror::attach_to_gone(&mut v, &explained, &rep.ranks);
        v
    })
}

/// The watchdog's view of the coordinator's report at `now_ms` (run clock). A rank that
/// delivered its results is done: it waits for the end, not for data.
pub(crate) fn watch_state(rep: &CoordinatorReport, now_ms: u64, timeout_ms: u64) -> WatchState<'_> {
    let failed: BTreeSet<Rank> = rep.failed.iter().map(|(r, _)| *r).collect();
    let watch = rep
        .ranks
        .iter()
        .map(|i| {
            let r = i.rank;
            let finished = rep.finished_ms.contains_key(&r);
            let control = match (rep.closed.get(&r), rep.unacked_since_ms.get(&r)) {
                (Some(&(at_ms, reset)), _) if !finished => Control::Closed { at_ms, reset },
                (None, Some(&since_ms)) if !finished => Control::Unacked { since_ms },
                _ => Control::Open,
            };
            let last = if finished {
                rep.reports.get(&r).map(|(_, w)| {
                    let mut w = w.clone();
                    w.phase = Phase::Results;
                    w.waiting_on = None;
                    (now_ms, w)
                })
            } else {
                // A stuck rank repeats its wait in every heartbeat; the watchdog's grace counts
                // from when the wait passed its deadline, not from the latest repetition.
                rep.reports.get(&r).map(|(at, w)| {
                    let mut w = w.clone();
                    let mut at = *at;
                    // It said its own run failed: it waits for the coordinator's word since
                    // (whatever its heartbeats say; an older rank's do not say it).
                    w.awaiting_coordinator |= failed.contains(&r);
                    if w.waiting_on.is_some() {
                        let extra = w.since_progress_ms.saturating_sub(timeout_ms).min(at);
                        at -= extra;
                        w.since_progress_ms -= extra;
                    }
                    (at, w)
                })
            };
            RankWatch {
                rank: r,
                control,
                last,
                // Only the trailing run of equal counters matters (how long progress has
                // stood still): O(1) per working rank, not its whole history.
                progress: match rep.progress.get(&r) {
                    Some(h) if !finished => {
                        let cur = h.last().map(|x| x.1);
                        let k = h.iter().rev().take_while(|x| Some(x.1) == cur).count();
                        h[h.len() - k..].to_vec()
                    }
                    _ => Vec::new(),
                },
            }
        })
        .collect();
    let silence_ms = rendezvous::silence(Duration::from_millis(timeout_ms)).as_millis() as u64;
    WatchState {
        ranks: (&rep.ranks[..]).into(),
        watch,
        timeout_ms,
        silence_ms,
        // An inconclusive hang may be a frozen sender: wait until its silence would show.
        grace_ms: WATCH_GRACE_MS.max((silence_ms + 500).saturating_sub(timeout_ms)),
        // A rank never heard from is silent since its table went out, not before.
        since_ms: rep.tables_out_ms,
    }
}

/// How long after the first wait report an inconclusive hang is named anyway.
pub(crate) const WATCH_GRACE_MS: u64 = 1000;

fn sweep(
    ring: Ring,
    (links, bufs): (&mut [ChannelLinks], &mut Buffers),
    progress: &[Progress],
    live: &Arc<LiveStatus>,
    session: &Session,
    opts: &Options,
    log: &(dyn Fn(u8, &str) + Sync),
) -> Result<(Vec<RowResult>, Option<allreduce::SizeResult>), RingError> {
    let mut rows = Vec::new();
    let mut last = None;
    for (i, &bytes) in opts.sizes.iter().enumerate() {
        live.size_index.store(i as u32, Ordering::Relaxed);
        live.size_bytes.store(bytes, Ordering::Relaxed);
        for p in progress {
            p.touch();
        }
        let spec = |in_place| SizeSpec {
            bytes,
            warmup: opts.warmup,
            iters: opts.iters,
            check: opts.check > 0,
            in_place,
            live: Some(live.clone()),
        };
        // nccl-tests' two halves: out of place, then in place, each with its own warm-up.
        live.half.store(0, Ordering::Relaxed);
        let r = allreduce::run_size(
            ring,
            links,
            progress,
            &session.abort,
            &spec(false),
            opts.slot_bytes,
            bufs,
        )?;
        live.half.store(1, Ordering::Relaxed);
        let ip = allreduce::run_size(
            ring,
            links,
            progress,
            &session.abort,
            &spec(true),
            opts.slot_bytes,
            bufs,
        )?;
        if ring.rank == 0 {
            log(
                1,
                &format!(
                    "size {bytes}: {:.1} us out of place, {:.1} us in place",
                    r.seconds * 1e6,
                    ip.seconds * 1e6
                ),
            );
        }
        let row = RowResult {
            size_bytes: bytes,
            time_us: r.seconds * 1e6,
            wrong: r.wrong,
            in_place: Some(wire::HalfResult {
                time_us: ip.seconds * 1e6,
                wrong: ip.wrong,
            }),
        };
        // For the live table only: the `Results` at the end are the record, and a broken
        // control connection is the heartbeat's to notice.
        let _ = session.send(&Msg::Row {
            rank: ring.rank,
            row: row.clone(),
        });
        rows.push(row);
        // The hop rates come from the out-of-place half.
        last = Some(r);
    }
    Ok((rows, last))
}

/// The scan driver plugs into the coordinator through its trait (the coordinator knows no
/// diagnosis code).
impl ScanDriver for Driver {
    fn start(&mut self, now: Instant) -> Step {
        Driver::start(self, now)
    }
    fn on_samples(
        &mut self,
        rank: Rank,
        index: u32,
        samples: Vec<LinkSample>,
        line_rate_gbs: Option<f64>,
        ranks: &[RankInfo],
        now: Instant,
    ) -> Step {
        Driver::on_samples(self, rank, index, samples, line_rate_gbs, ranks, now)
    }
    fn on_traffic(&mut self, rank: Rank, index: u32, traffic: crate::ring::model::PortTraffic) {
        Driver::on_traffic(self, rank, index, &traffic)
    }
    fn report(&self, ranks: &[RankInfo]) -> ScanReport {
        Driver::report(self, ranks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::launcher::Source;
    use crate::ring::report::{InPlaceRow, ResultRow};

    fn info(rank: u32, host: &str) -> RankInfo {
        RankInfo {
            neighbor: None,
            port_max: None,
            rails: Vec::new(),
            node: None,
            capabilities: Vec::new(),
            rank,
            host: host.into(),
            address: format!("10.0.0.{rank}:1"),
            device: Some("eth1".into()),
            transport: "tcp".into(),
            pid: None,
        }
    }

    #[test]
    fn aggregate_averages_times_sums_wrong_and_skips_incomplete_sizes() {
        let ranks = vec![info(0, "a"), info(1, "b")];
        let res = vec![
            RankResults {
                rank: 0,
                rows: vec![
                    RowResult {
                        size_bytes: 1 << 20,
                        time_us: 1000.0,
                        wrong: Some(0),
                        in_place: Some(wire::HalfResult {
                            time_us: 500.0,
                            wrong: Some(1),
                        }),
                    },
                    RowResult {
                        size_bytes: 1 << 21,
                        time_us: 9.0,
                        wrong: Some(0),
                        in_place: None,
                    },
                ],
                links: vec![LinkSample {
                    order: 0,
                    from_rank: 1,
                    to_rank: 0,
                    bytes: 2_000_000,
                    seconds: 0.5,
                    cpu_wait: None,
                    silence_s: None,
                }],
                link_size_bytes: 1 << 20,
                port_counters: vec![],
                chunk_waits: vec![],
            },
            RankResults {
                rank: 1,
                rows: vec![RowResult {
                    size_bytes: 1 << 20,
                    time_us: 3000.0,
                    wrong: Some(3),
                    in_place: Some(wire::HalfResult {
                        time_us: 1500.0,
                        wrong: Some(0),
                    }),
                }],
                links: vec![LinkSample {
                    order: 0,
                    from_rank: 0,
                    to_rank: 1,
                    bytes: 1_000_000,
                    seconds: 0.5,
                    cpu_wait: None,
                    silence_s: None,
                }],
                link_size_bytes: 1 << 20,
                port_counters: vec![],
                chunk_waits: vec![],
            },
        ];
        let (rows, links) = aggregate(2, &ranks, &res, 1);
        assert_eq!(
            rows,
            vec![ResultRow {
                size_bytes: 1 << 20,
                count: 1 << 18,
                dtype: "float",
                redop: "sum",
                root: -1,
                time_us: 2000.0,
                algbw_gbs: 1048576.0 / 2000.0 / 1e3,
                busbw_gbs: 1048576.0 / 2000.0 / 1e3,
                wrong: Some(3),
                in_place: Some(InPlaceRow {
                    time_us: 1000.0,
                    algbw_gbs: 1048576.0 / 1000.0 / 1e3,
                    busbw_gbs: 1048576.0 / 1000.0 / 1e3,
                    wrong: Some(1),
                }),
            }]
        );
        assert_eq!(links.len(), 2);
        assert_eq!(
            (
                links[0].from_rank,
                links[0].to_rank,
                links[0].from_host.as_str(),
                links[0].to_host.as_str()
            ),
            (0, 1, "a", "b")
        );
        assert!((links[0].gbs - 0.002).abs() < 1e-12);
        // The mean over both halves, as nccl-tests.
        assert_eq!(avg_busbw(&rows), Some((1.048576 / 2.0 + 1.048576) / 2.0));
        // Wrong elements fail the run (exit 1), as a verdict or an early end does.
        let report = |rows: Vec<ResultRow>, error: Option<String>| RingReport {
            rails: Vec::new(),
            world: 2,
            transport: "tcp".into(),
            transport_note: None,
            launcher: LauncherInfo {
                source: Source::Flags,
                coordinator: String::new(),
                coordinator_source: String::new(),
                token_source: String::new(),
            },
            options: Options {
                sizes: vec![],
                iters: 1,
                warmup: 0,
                check: 1,
                channels: 1,
                timeout_secs: 1,
                join_timeout_secs: 1,
                slots: 1,
                slot_bytes: 4,
                scan: None,
                sweep: true,
            },
            ranks: ranks.clone(),
            avg_busbw_gbs: avg_busbw(&rows),
            results: rows,
            links: vec![],
            bootstrap_us: 0,
            events: vec![],
            scan: None,
            verdicts: vec![],
            not_judged: vec![],
            error,
            port_counters: vec![],
        };
        assert!(report(rows.clone(), None).failed());
        let mut ok = rows.clone();
        ok[0].wrong = Some(0);
        // Wrong elements in the in-place half alone fail it too.
        assert!(report(ok.clone(), None).failed());
        ok[0].in_place.as_mut().unwrap().wrong = Some(0);
        assert!(!report(ok.clone(), None).failed());
        assert!(report(ok, Some("rank 1 lost".into())).failed());
    }

    #[test]
    fn watch_state_dates_a_repeated_wait_from_its_deadline_and_retires_finished_ranks() {
        let ranks = vec![info(0, "a"), info(1, "b"), info(2, "c")];
        let mut rep = CoordinatorReport {
            ranks: ranks.clone(),
            ..CoordinatorReport::default()
        };
        let mut w = Progress::default().report(1, 0);
        w.waiting_on = Some(0);
        w.waiting_to_receive = true;
        w.since_progress_ms = 4_500; // a heartbeat 1.5 s after the 3 s deadline
        rep.reports.insert(1, (10_000, w.clone()));
        let mut done = Progress::default().report(2, 0);
        done.phase = Phase::AllGather;
        rep.reports.insert(2, (2_000, done));
        rep.finished_ms.insert(2, 2_000);
        rep.closed.insert(2, (9_000, false));
        rep.progress.insert(2, vec![(1_000, 5), (2_000, 5)]);
        let s = watch_state(&rep, 10_200, 3_000);
        let (at, got) = s.watch[1].last.clone().unwrap();
        assert_eq!((at, got.since_progress_ms), (8_500, 3_000));
        // Finished: not lost when its connection closes, not stalled in a data phase.
        assert_eq!(s.watch[2].control, Control::Open);
        let (at2, r2) = s.watch[2].last.clone().unwrap();
        assert_eq!((at2, r2.phase, r2.waiting_on), (10_200, Phase::Results, None));
        assert!(s.watch[2].progress.is_empty());
        assert_eq!(s.watch[0].last, None);
        assert_eq!(
            (s.timeout_ms, s.silence_ms, s.grace_ms),
            (3_000, 3_000, WATCH_GRACE_MS)
        );
    }

    /// Issue 45, the kept report (`lab-failures/cpu_starved-14306-12`, `--timeout 10`):
    /// rank 0 at step 0 of the scan, its progress counter at 5 for 11.1 s, waiting on no
    /// peer, was judged RANK STALLED; it had failed (a link of its order closed under it when
    /// a peer's open ran out on the starved rank) and waited for the coordinator's word. Told
    /// so by its failure report, or by its own heartbeats, it is not a stalled rank; the same
    /// picture with neither still is (the rule is not switched off).
    #[test]
    fn a_rank_that_failed_and_awaits_the_coordinator_is_not_stalled() {
        let ranks: Vec<RankInfo> = ["node-a", "node-b", "node-c", "node-d"]
            .iter()
            .enumerate()
            .map(|(r, h)| info(r as u32, h))
            .collect();
        let judge = watchdog_judge(Duration::from_secs(10));
        for (failed, awaiting, stalled) in [
            (false, false, true),
            (true, false, false),
            (false, true, false),
            (true, true, false),
        ] {
            let mut rep = CoordinatorReport {
                ranks: ranks.clone(),
                ..CoordinatorReport::default()
            };
            for r in 0..4u32 {
                let mut w = Progress::default().report(r, 0);
                w.phase = Phase::Scan;
                w.progress = if r == 0 { 5 } else { 40 };
                w.awaiting_coordinator = r == 0 && awaiting;
                rep.reports.insert(r, (20_000, w));
                let h = if r == 0 {
                    vec![(8_900, 5), (20_000, 5)]
                } else {
                    vec![(19_000, 39), (20_000, 40)]
                };
                rep.progress.insert(r, h);
            }
            if failed {
                rep.failed.push((0, "the link from rank 3 is closed".into()));
            }
            let v = judge(&rep, 20_000, false);
            let named: Vec<_> = v.iter().map(|v| (v.kind, v.from_rank)).collect();
            let want = if stalled {
                vec![(crate::ring::model::VerdictKind::RankStalled, Some(0))]
            } else {
                vec![]
            };
            assert_eq!(named, want, "failed {failed}, awaiting {awaiting}: {v:#?}");
            if stalled {
                assert!(
                    v[0].message
                        .contains("no progress for 11.1 s and not waiting on any peer")
                );
            }
        }
    }

    /// Over RDMA a killed rank's queue pairs are destroyed, so its neighbours' sends run out
    /// of retries (status 12) on their links to it. Those links are innocent: with rank 2's
    /// control connection closed (killed) or its interrupt said, no verdict names a link, and
    /// the kill is `rank_lost` with the faults as its evidence; with rank 2 still there the
    /// same faults are link errors, as before.
    #[test]
    fn a_gone_ranks_neighbours_completion_errors_never_blame_their_links() {
        use crate::ring::model::{LinkFault, VerdictKind};
        let ranks: Vec<RankInfo> = (0..4).map(|r| info(r, &format!("node-{r}"))).collect();
        let judge = watchdog_judge(Duration::from_secs(5));
        let fault = |from: Rank, to: Rank, seen_by: Rank| LinkFault {
            from_rank: from,
            to_rank: to,
            seen_by,
            device: "rxe0:1 gid 1".into(),
            operation: "an RDMA write".into(),
            status: 12,
            status_name: "transport retry counter exceeded".into(),
            meaning: "no acknowledgement".into(),
            vendor_err: 0x81,
        };
        for (how, final_call) in [
            ("killed", false),
            ("killed", true),
            ("interrupted", true),
            ("there", true),
        ] {
            let mut rep = CoordinatorReport {
                ranks: ranks.clone(),
                ..CoordinatorReport::default()
            };
            for r in 0..4u32 {
                let mut w = Progress::default().report(r, 0);
                w.phase = Phase::ReduceScatter;
                w.progress = 40;
                rep.reports.insert(r, (9_800, w));
                rep.progress.insert(r, vec![(9_000, 39), (9_800, 40)]);
            }
            rep.link_faults = vec![fault(1, 2, 1), fault(2, 3, 3)];
            match how {
                "killed" => {
                    rep.closed.insert(2, (9_000, true));
                }
                "interrupted" => {
                    rep.interrupted_ranks.insert(2);
                }
                _ => {}
            }
            let v = judge(&rep, 10_000, final_call);
            let kinds: Vec<_> = v.iter().map(|v| (v.kind, v.from_rank, v.to_rank)).collect();
            let links = v.iter().filter(|v| v.kind == VerdictKind::LinkError).count();
            match how {
                "killed" => {
                    assert_eq!(kinds, vec![(VerdictKind::RankLost, Some(2), None)], "{v:#?}");
                    let after = v[0].evidence["link_faults_after"].as_array().unwrap();
                    assert_eq!(after.len(), 2, "{v:#?}");
                }
                "interrupted" => assert_eq!(links, 0, "{v:#?}"),
                _ => assert_eq!(links, 2, "{v:#?}"),
            }
        }
    }
}
