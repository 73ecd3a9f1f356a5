//! `--local N`: the ring's N ranks as threads of this process over loopback (or the
//! interface `--ifname` names), one rail or `--rails R`, each rail its own ring on its own
//! coordinator. Rank 0's outcome is the process's; the other ranks' errors are said with -v.

use std::net::{IpAddr, TcpListener};
use std::sync::Arc;

use super::{Ctx, LaunchError, RankResult, fabric, hostname};
use crate::ring::portread;
use crate::ring::launcher::{Identity, Source};
use crate::ring::model::RailPort;
use crate::ring::rails::{self, RailRun, RailSel};
use crate::ring::run::{self, Failure, Options, Setup};

/// One rank's run of loopback rail `port` under `--local` (rank 0 hosts the rail's
/// coordinator on `listener`).
fn local_rail_run(
    port: RailPort,
    identity: Identity,
    host: &str,
    listener: Option<TcpListener>,
    live: Option<Arc<crate::ring::model::LiveStatus>>,
) -> RailRun {
    RailRun {
        port,
        setup: Setup {
            coordinator_listener: listener,
            live,
            ..Setup::new(
                identity,
                host.to_string(),
                IpAddr::from([127, 0, 0, 1]),
                Some("lo".into()),
            )
        },
    }
}

/// `--local --rails N`: N loopback rail slots, and each rail's coordinator listener and
/// address.
#[allow(clippy::type_complexity)]
fn local_rails(count: u32) -> std::io::Result<(Vec<RailPort>, Vec<Option<TcpListener>>, Vec<String>)> {
    let slots: Vec<RailPort> = (0..count)
        .map(|k| RailPort {
            rail: k,
            device: "lo".into(),
            port: None,
            netdev: Some("lo".into()),
            state: Some("up".into()),
            usable: true,
            label: None,
            address: None,
        })
        .collect();
    let mut listeners = Vec::new();
    let mut coords = Vec::new();
    for _ in 0..count {
        let l = TcpListener::bind("127.0.0.1:0")?;
        coords.push(l.local_addr()?.to_string());
        listeners.push(Some(l));
    }
    Ok((slots, listeners, coords))
}

/// `--local N --rails R`: N ranks as threads, each driving R rails over loopback (rail k of
/// every rank is one ring, on its own coordinator).
pub(super) fn run_local_rails(
    cx: &Ctx,
    n: u32,
    sel: &RailSel,
    opts: &Options,
    given_token: Option<&str>,
) -> Result<RankResult, LaunchError> {
    let count = match sel {
        RailSel::Count(r) => *r,
        RailSel::One => 1,
        _ => {
            return Err(LaunchError::Usage(
                "--local runs a number of rails over loopback: --rails N (all and lists need real ports)"
                    .into(),
            ));
        }
    };
    let (slots, mut listeners, coords) = local_rails(count)?;
    let live = cx.watch.live(opts);
    let token = given_token
        .map(str::to_string)
        .unwrap_or_else(|| format!("local-{}", std::process::id()));
    let host = hostname();
    let wanted: Vec<u32> = (0..count).collect();
    let mut per_rank: Vec<Vec<RailRun>> = Vec::new();
    for rank in 0..n {
        let runs = slots
            .iter()
            .map(|p| {
                let k = p.rail as usize;
                let identity = Identity {
                    rank,
                    world: n,
                    coordinator: coords[k].clone(),
                    token: format!("{token}/rail{}", p.rail),
                    source: Source::Local,
                    coordinator_source: "--local".into(),
                    token_source: token_source(given_token),
                };
                let listener = if rank == 0 { listeners[k].take() } else { None };
                let live = live.clone().filter(|_| rank == 0 && p.rail == 0);
                local_rail_run(p.clone(), identity, &host, listener, live)
            })
            .collect();
        per_rank.push(runs);
    }
    let results: Vec<RankResult> = std::thread::scope(|sc| {
        let handles: Vec<_> = per_rank
            .into_iter()
            .map(|runs| {
                let (slots, wanted) = (&slots, &wanted);
                sc.spawn(move || {
                    rails::run_node(runs, Vec::new(), slots, Some(wanted), None, opts, &rank_log(cx))
                })
            })
            .collect();
        joined(handles)
    });
    cx.watch.ended();
    Ok(first_rank(cx, results))
}

/// N ranks as threads of this process over loopback.
pub(super) fn run_local(
    cx: &Ctx,
    n: u32,
    opts: &Options,
    given_token: Option<&str>,
) -> Result<RankResult, LaunchError> {
    // Loopback unless --ifname names another local interface to run the ring over.
    let (data_ip, device) = match &cx.net.ifname {
        Some(spec) => fabric::data_interface(Some(spec), None, None, &|s| cx.log(1, s))?,
        None => (IpAddr::from([127, 0, 0, 1]), "lo".to_string()),
    };
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let coord = listener.local_addr()?.to_string();
    let live = cx.watch.live(opts);
    let token = given_token
        .map(str::to_string)
        .unwrap_or_else(|| format!("local-{}", std::process::id()));
    let host = hostname();
    let local_id = |rank: u32| Identity {
        rank,
        world: n,
        coordinator: coord.clone(),
        token: token.clone(),
        source: Source::Local,
        coordinator_source: "--local".into(),
        token_source: token_source(given_token),
    };
    let rows = cx.watch.rows(&local_id(0), opts, None);
    let mut listener = Some(listener);
    let results: Vec<RankResult> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..n)
            .map(|rank| {
                let setup = Setup {
                    coordinator_listener: if rank == 0 { listener.take() } else { None },
                    counters: Some(portread::Sampler::live(&device)),
                    live: if rank == 0 { live.clone() } else { None },
                    on_row: rows.clone().filter(|_| rank == 0),
                    ..Setup::new(local_id(rank), host.clone(), data_ip, Some(device.clone()))
                };
                sc.spawn(move || run::run_rank(setup, opts, &rank_log(cx)))
            })
            .collect();
        joined(handles)
    });
    cx.watch.ended();
    Ok(first_rank(cx, results))
}

/// Where the token came from, as the report says it.
fn token_source(given_token: Option<&str>) -> String {
    if given_token.is_some() {
        "--token"
    } else {
        "--local"
    }
    .into()
}

/// A rank thread's log: its own lines at the run's level 0, the rest only with -vv.
fn rank_log<'c>(cx: &'c Ctx<'_>) -> impl Fn(u8, &str) + Sync + 'c {
    |level: u8, s: &str| cx.log(if level == 0 { 0 } else { 2 }, s)
}

/// Every rank thread's result, in rank order; a thread that panicked is its rank's error.
fn joined(handles: Vec<std::thread::ScopedJoinHandle<'_, RankResult>>) -> Vec<RankResult> {
    handles
        .into_iter()
        .map(|h| h.join().unwrap_or_else(|_| Err(rank_thread_panicked())))
        .collect()
}

/// A rank thread of an in-process run that panicked, as that rank's error.
fn rank_thread_panicked() -> run::RunError {
    run::RunError {
        kind: Failure::Fault,
        message: "a rank thread panicked".into(),
    }
}

/// Rank 0's result of an in-process run (the one reported); the other ranks' errors are
/// logged.
fn first_rank(cx: &Ctx, results: Vec<RankResult>) -> RankResult {
    let mut it = results.into_iter();
    let first = it.next().unwrap_or_else(|| {
        Err(run::RunError {
            kind: Failure::CannotRun,
            message: "no ranks".into(),
        })
    });
    for (i, r) in it.enumerate() {
        if let Err(e) = r {
            cx.log(1, format!("rank {}: {}", i + 1, e.message));
        }
    }
    first
}
