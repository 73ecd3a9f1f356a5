//! The job's report of a `--rails` run from its rails' reports (rank 0): rows for the whole
//! node (algbw and busbw summed over the rails, as NCCL reports a job spread over rails;
//! time the slowest rail's), per-rail rows in `rails[]`, hops tagged with their rail, the
//! ranks' rails, verdicts naming their rail (or "all rails" when every rail that ran says
//! the same of a node or link), and `rail_missing` for a node that lacks a rail the others
//! drive. Pure.

use std::collections::BTreeMap;

use serde_json::json;

use crate::ring::model::{CounterMove, RailPort, Rank, RankInfo, Verdict, VerdictKind, VerdictRail};
use crate::ring::railplan::Roster;
use crate::ring::report::{Failure, RankOutcome, RunError};
use crate::ring::report::{InPlaceRow, LinkRow, RailReport, ResultRow, RingReport, avg_busbw, sum_wrong};

/// Merge what each rail's rank returned into this node's outcome (rank 0: the job's report).
/// `wanted`: the rails this run asks for by index (None: `all`, the rails most nodes have).
/// `roster` (rank 0 across nodes): who declared which rails, and each rail's ring.
pub(crate) fn merge(
    outcomes: Vec<(RailPort, Result<RankOutcome, RunError>)>,
    wanted: Option<&[u32]>,
    roster: Option<&Roster>,
) -> Result<RankOutcome, RunError> {
    let mut reports: Vec<(RailPort, RingReport)> = Vec::new();
    let mut errors: Vec<(RailPort, RunError)> = Vec::new();
    let mut failed = false;
    let mut whys: Vec<String> = Vec::new();
    for (p, r) in outcomes {
        match r {
            Ok(RankOutcome {
                report: Some(rep),
                failed: f,
                ..
            }) => {
                failed |= f;
                reports.push((p, rep));
            }
            Ok(RankOutcome {
                report: None,
                failed: f,
                why,
            }) => {
                failed |= f;
                whys.extend(why.map(|w| format!("rail {}: {w}", p.rail)));
            }
            Err(e) => errors.push((p, e)),
        }
    }
    if reports.is_empty() {
        // Not rank 0 (or rank 0 could run no rail): the rails' own errors, each named.
        if errors.is_empty() {
            let why = (!whys.is_empty()).then(|| whys.join("; "));
            return Ok(RankOutcome {
                report: None,
                failed,
                why,
            });
        }
        let kind = if errors.iter().all(|(_, e)| e.kind == Failure::CannotRun) {
            Failure::CannotRun
        } else {
            Failure::Fault
        };
        return Err(RunError {
            kind,
            message: errors
                .iter()
                .map(|(p, e)| format!("rail {}: {}", p.rail, e.message))
                .collect::<Vec<_>>()
                .join("; "),
        });
    }
    let report = job_report(reports, errors, wanted, roster);
    let failed = report.failed();
    Ok(RankOutcome {
        report: Some(report),
        failed,
        why: None,
    })
}

/// The job's report from the rails' reports (and the rails rank 0 could not run at all).
/// Each rail's report names the job's nodes already, a rail's ring of some of the nodes
/// too (its coordinator numbered it so: [`RingReport::number_by_node`]).
pub(crate) fn job_report(
    mut rails: Vec<(RailPort, RingReport)>,
    errors: Vec<(RailPort, RunError)>,
    wanted: Option<&[u32]>,
    roster: Option<&Roster>,
) -> RingReport {
    rails.sort_by_key(|(p, _)| p.rail);
    let rings = rail_rings(&rails, roster);
    stopped_as_errors(&mut rails);
    let mut ranks = merge_ranks(&rails);
    if let Some(x) = roster {
        declared_ranks(&mut ranks, x);
    }
    let world = match roster {
        Some(x) => x.world,
        None => rails.iter().map(|(_, r)| r.world).max().unwrap_or(0),
    };
    let ran: Vec<u32> = rails
        .iter()
        .map(|(p, _)| p.rail)
        .chain(errors.iter().map(|(p, _)| p.rail))
        .collect();
    let (expected, extra) = expected_rails(&ranks, world, &ran, wanted);
    let missing = missing_verdicts(&ranks, &expected, roster.map(|x| &x.rings));
    let lacking: Vec<u32> = missing
        .iter()
        .filter_map(|v| v.rail.as_ref().map(|r| r.index))
        .collect();
    // Rails every node drives: where a verdict on every one of them is a node's (or a link's),
    // not a rail's.
    let full: Vec<u32> = rails
        .iter()
        .map(|(p, _)| p.rail)
        .filter(|k| !lacking.contains(k) && !extra.contains(k))
        .collect();
    // A rail few nodes have is no rail of this job: what its ring said is not the job's.
    for (p, r) in rails.iter_mut() {
        if extra.contains(&p.rail) {
            r.verdicts.clear();
        }
    }
    let mut verdicts = missing;
    verdicts.extend(rail_verdicts(&rails, &ranks, &full));
    let errs = rail_errors(&rails, &errors, &extra, &lacking, roster.is_some());
    let summed: Vec<&RingReport> = rails
        .iter()
        .filter(|(p, r)| !r.results.is_empty() && !extra.contains(&p.rail))
        .map(|(_, r)| r)
        .collect();
    let results = sum_rows(&summed);
    let (links, port_counters) = links_and_counters(&rails);
    let base = &rails[0].1;
    RingReport {
        world,
        transport: base.transport.clone(),
        transport_note: rails.iter().find_map(|(_, r)| r.transport_note.clone()),
        launcher: base.launcher.clone(),
        options: base.options.clone(),
        ranks: ranks.clone(),
        avg_busbw_gbs: avg_busbw(&results),
        results,
        links,
        bootstrap_us: rails.iter().map(|(_, r)| r.bootstrap_us).max().unwrap_or(0),
        events: rails.iter().flat_map(|(_, r)| r.events.iter().cloned()).collect(),
        scan: None,
        verdicts,
        not_judged: rails.iter().flat_map(|(_, r)| r.not_judged.iter().cloned()).collect(),
        error: (!errs.is_empty()).then(|| errs.join("; ")),
        port_counters,
        rails: rail_reports(
            &rails,
            &errors,
            &rings,
            (&expected, &extra, &ran),
            &ranks,
            roster,
            world,
        ),
    }
}

/// Each rail's ring (node ranks): the roster's, else its report's ranks. Pure.
fn rail_rings(rails: &[(RailPort, RingReport)], roster: Option<&Roster>) -> BTreeMap<u32, Vec<Rank>> {
    let ring_of = |k: u32, r: &RingReport| -> Vec<Rank> {
        match roster.and_then(|x| x.rings.get(&k)) {
            Some(nodes) => nodes.clone(),
            None => r.ranks.iter().map(|i| i.rank).collect(),
        }
    };
    rails.iter().map(|(p, r)| (p.rail, ring_of(p.rail, r))).collect()
}

/// A rail stopped because another failed first: its marker is the rail's error, never a
/// verdict (the verdicts name the rail that failed).
fn stopped_as_errors(rails: &mut [(RailPort, RingReport)]) {
    for (_, r) in rails.iter_mut() {
        if let Some(m) = r.verdicts.iter().find(|v| v.kind == VerdictKind::RailStopped) {
            r.error = Some(m.message.clone());
        }
        r.verdicts.retain(|v| v.kind != VerdictKind::RailStopped);
    }
}

/// Each rail's early end, named with its rail. A rail's ring that could not start because a
/// node lacks it: the rail_missing verdict is its cause; a rail only a few nodes have is no
/// ring of this job; any other early end is the rail's own. Pure.
fn rail_errors(
    rails: &[(RailPort, RingReport)],
    errors: &[(RailPort, RunError)],
    extra: &[u32],
    lacking: &[u32],
    roster: bool,
) -> Vec<String> {
    let mut errs: Vec<String> = Vec::new();
    for (p, r) in rails {
        if extra.contains(&p.rail) {
            continue;
        }
        // Without a roster a lacking rail's ring waited for the node without it: that
        // early end is the rail_missing verdict's; with one, the ring ran without it.
        if let Some(e) = r.error.as_ref().filter(|_| roster || !lacking.contains(&p.rail)) {
            // A stopped rail's line names its rail already.
            if e.starts_with(&format!("rail {} ", p.rail)) {
                errs.push(e.clone());
            } else {
                errs.push(format!("rail {}: {e}", p.rail));
            }
        }
    }
    for (p, e) in errors {
        errs.push(format!("rail {}: {}", p.rail, e.message));
    }
    errs
}

/// Every rail's links (tagged with their rail) and its moved counters, each once. Pure.
fn links_and_counters(rails: &[(RailPort, RingReport)]) -> (Vec<LinkRow>, Vec<CounterMove>) {
    let mut links: Vec<_> = rails
        .iter()
        .flat_map(|(p, r)| {
            r.links.iter().cloned().map(move |mut l| {
                l.rail = Some(p.rail);
                l
            })
        })
        .collect();
    links.sort_by_key(|l| (l.rail, l.from_rank));
    let mut port_counters = Vec::new();
    for m in rails.iter().flat_map(|(_, r)| r.port_counters.iter()) {
        if !port_counters.contains(m) {
            port_counters.push(m.clone());
        }
    }
    (links, port_counters)
}

/// The job's per-rail lines: each rail that ran, each rail rank 0 could not run, each rail
/// most nodes have that rank 0 ran no ring for, and each rail few nodes have. Pure.
fn rail_reports(
    rails: &[(RailPort, RingReport)],
    errors: &[(RailPort, RunError)],
    rings: &BTreeMap<u32, Vec<Rank>>,
    (expected, extra, ran): (&[u32], &[u32], &[u32]),
    ranks: &[RankInfo],
    roster: Option<&Roster>,
    world: u32,
) -> Vec<RailReport> {
    rails
        .iter()
        .map(|(p, r)| {
            // A rail few nodes have that ran anyway (no roster): not the job's, said so.
            let extra = extra.contains(&p.rail);
            RailReport {
                rail: p.rail,
                nodes: rings[&p.rail].clone(),
                transport: r.transport.clone(),
                results: if extra { Vec::new() } else { r.results.clone() },
                avg_busbw_gbs: if extra { None } else { r.avg_busbw_gbs },
                scan: r.scan.clone().filter(|_| !extra),
                error: r.error.clone().filter(|_| !extra),
                not_tested: extra.then(|| extra_note(ranks, p.rail, world)),
            }
        })
        .chain(errors.iter().map(|(p, e)| {
            RailReport {
                rail: p.rail,
                nodes: roster
                    .and_then(|x| x.rings.get(&p.rail).cloned())
                    .unwrap_or_default(),
                transport: String::new(),
                results: Vec::new(),
                avg_busbw_gbs: None,
                scan: None,
                error: Some(e.message.clone()),
                not_tested: None,
            }
        }))
        // A rail most nodes have that rank 0 ran no ring for (rank 0 lacks it).
        .chain(expected.iter().filter(|k| !ran.contains(k)).map(|&k| RailReport {
            rail: k,
            nodes: roster.and_then(|x| x.rings.get(&k).cloned()).unwrap_or_default(),
            transport: String::new(),
            results: Vec::new(),
            avg_busbw_gbs: None,
            scan: None,
            error: Some(not_run_note(ranks, k, roster)),
            not_tested: None,
        }))
        // A rail fewer than half the nodes have ran nowhere: said, with who has it.
        .chain(extra.iter().filter(|k| !ran.contains(k)).map(|&k| RailReport {
            rail: k,
            nodes: have_rail(ranks, k).iter().map(|i| i.rank).collect(),
            transport: String::new(),
            results: Vec::new(),
            avg_busbw_gbs: None,
            scan: None,
            error: None,
            not_tested: Some(extra_note(ranks, k, world)),
        }))
        .collect()
}

/// The rails every node is expected to drive, and the rails only a few nodes have (`all`
/// only). Named by index (`wanted`): those. `all`: a rail that at least half the nodes
/// have a port for, or drive (a tie names the node without it); rank 0's own rails are
/// one node's, not the job's. Pure.
fn expected_rails(
    ranks: &[RankInfo],
    world: u32,
    ran: &[u32],
    wanted: Option<&[u32]>,
) -> (Vec<u32>, Vec<u32>) {
    let mut all: Vec<u32> = ranks
        .iter()
        .flat_map(|i| i.rails.iter().map(|s| s.rail))
        .chain(ran.iter().copied())
        .chain(wanted.unwrap_or(&[]).iter().copied())
        .collect();
    all.sort_unstable();
    all.dedup();
    if let Some(w) = wanted {
        return (all.into_iter().filter(|k| w.contains(k)).collect(), Vec::new());
    }
    let nodes = world.max(ranks.len() as u32).max(1);
    all.into_iter().partition(|k| {
        let has = ranks
            .iter()
            .filter(|i| i.rails.iter().any(|s| s.rail == *k))
            .count() as u32;
        has * 2 >= nodes
    })
}

/// The nodes that have a slot for rail `k` (driven or not).
fn have_rail(ranks: &[RankInfo], k: u32) -> Vec<&RankInfo> {
    ranks
        .iter()
        .filter(|i| i.rails.iter().any(|s| s.rail == k))
        .collect()
}

/// Why a rail only a few nodes have was not tested (no verdict: by the majority, the
/// nodes are the ones without it), and what to look at if every node should have it.
fn extra_note(ranks: &[RankInfo], k: u32, world: u32) -> String {
    let have = have_rail(ranks, k);
    let named: Vec<String> = have
        .iter()
        .map(|i| format!("rank {} ({})", i.rank, i.host))
        .collect();
    let lack: Vec<String> = ranks
        .iter()
        .filter(|i| !i.rails.is_empty() && !have.iter().any(|h| h.rank == i.rank))
        .map(|i| i.host.clone())
        .collect();
    format!(
        "rail {k} not tested: only {} of {world} nodes {} it ({}), fewer than half, so it is no rail of this job and \
         its ring did not run; if every node should have it, the others lack it: fabprobe links on {}",
        have.len(),
        if have.len() == 1 { "has" } else { "have" },
        if named.is_empty() {
            "none".to_string()
        } else {
            named.join(", ")
        },
        if lack.is_empty() {
            "them".to_string()
        } else {
            lack.join(", ")
        }
    )
}

/// Every node once (in rank order), with its rail slots as it announced them and, for each
/// rail whose ring it joined, the label and address it ran there.
fn merge_ranks(rails: &[(RailPort, RingReport)]) -> Vec<RankInfo> {
    let mut by_rank: BTreeMap<Rank, RankInfo> = BTreeMap::new();
    for (p, r) in rails {
        for i in &r.ranks {
            let e = by_rank.entry(i.rank).or_insert_with(|| i.clone());
            if e.rails.is_empty() {
                e.rails = i.rails.clone();
            }
            if !e.rails.iter().any(|s| s.rail == p.rail) {
                e.rails.push(RailPort {
                    rail: p.rail,
                    device: i.device.clone().unwrap_or_default(),
                    port: None,
                    netdev: i.netdev().map(str::to_string),
                    state: None,
                    usable: true,
                    label: None,
                    address: None,
                });
            }
            if let Some(s) = e.rails.iter_mut().find(|s| s.rail == p.rail) {
                s.label = i.device.clone();
                s.address = Some(i.address.clone());
            }
        }
    }
    let mut v: Vec<RankInfo> = by_rank.into_values().collect();
    for i in &mut v {
        i.rails.sort_by_key(|s| s.rail);
    }
    v
}

/// The node's rows: for each size every rail that ran finished, the slowest rail's time and
/// algbw/busbw summed over the rails (each rail moved the whole size at the same time).
fn sum_rows(rails: &[&RingReport]) -> Vec<ResultRow> {
    let Some(first) = rails.first() else {
        return Vec::new();
    };
    first
        .results
        .iter()
        .filter_map(|row0| {
            let per: Vec<&ResultRow> = rails
                .iter()
                .map(|r| r.results.iter().find(|x| x.size_bytes == row0.size_bytes))
                .collect::<Option<_>>()?;
            let max = |f: &dyn Fn(&ResultRow) -> f64| per.iter().map(|r| f(r)).fold(0.0, f64::max);
            let sum = |f: &dyn Fn(&ResultRow) -> f64| per.iter().map(|r| f(r)).sum::<f64>();
            let halves: Option<Vec<&InPlaceRow>> = per.iter().map(|r| r.in_place.as_ref()).collect();
            Some(ResultRow {
                time_us: max(&|r| r.time_us),
                algbw_gbs: sum(&|r| r.algbw_gbs),
                busbw_gbs: sum(&|r| r.busbw_gbs),
                wrong: sum_wrong(per.iter().map(|r| r.wrong)),
                in_place: halves.map(|h| InPlaceRow {
                    time_us: h.iter().map(|x| x.time_us).fold(0.0, f64::max),
                    algbw_gbs: h.iter().map(|x| x.algbw_gbs).sum(),
                    busbw_gbs: h.iter().map(|x| x.busbw_gbs).sum(),
                    wrong: sum_wrong(h.iter().map(|x| x.wrong)),
                }),
                ..row0.clone()
            })
        })
        .collect()
}

/// Why node `i` misses rail `k` (its slot there, if any), and what to run on it. Pure.
fn why_missing(i: &RankInfo, k: u32, slot: Option<&RailPort>) -> (String, String) {
    match slot {
        Some(s) if s.state.as_deref() == Some(crate::ring::railplan::ABSENT) => (
            format!(
                "its rail {k} port {} is absent (--device names no such RDMA port there)",
                port_name(s)
            ),
            format!(
                "on {}: `fabprobe links` (which RDMA ports it has); `ls /sys/class/infiniband`; `dmesg | grep -i -e mlx -e infiniband` (a device that failed or vanished)",
                i.host
            ),
        ),
        Some(s) => (
            format!(
                "its rail {k} port {} is {}",
                port_name(s),
                s.state.as_deref().unwrap_or("in an unknown state")
            ),
            match (s.port, s.netdev.as_deref()) {
                (Some(_), n) => format!(
                    "on {}: `fabprobe links` (state, phys state and errors of {}){}",
                    i.host,
                    port_name(s),
                    n.map(|n| format!("; ip link show {n}")).unwrap_or_default()
                ),
                (None, _) => {
                    format!("on {}: ip link show {}; ethtool {}", i.host, s.device, s.device)
                }
            },
        ),
        None => (
            format!("it has no rail {k} ({} rail slot(s))", i.rails.len()),
            format!(
                "on {}: `fabprobe links` (which RDMA ports and interfaces it has)",
                i.host
            ),
        ),
    }
}

/// `rail_missing` for every node that lacks (or cannot drive) a rail the job expects. With
/// the rails' rings (`rings`, across nodes), the verdict names the nodes rail k ran on
/// without this one; without them (every node a rank of every rail's ring), the nodes the
/// missing one kept it from running on.
fn missing_verdicts(
    ranks: &[RankInfo],
    expected: &[u32],
    rings: Option<&BTreeMap<u32, Vec<Rank>>>,
) -> Vec<Verdict> {
    let mut out = Vec::new();
    for i in ranks.iter().filter(|i| !i.rails.is_empty()) {
        for &k in expected {
            let slot = i.rails.iter().find(|s| s.rail == k);
            if slot.is_some_and(|s| s.usable) {
                continue;
            }
            let (what, next) = why_missing(i, k, slot);
            let have: Vec<&RankInfo> = ranks
                .iter()
                .filter(|o| o.rails.iter().any(|s| s.rail == k && s.usable))
                .collect();
            let mut evidence = BTreeMap::new();
            let ring = rings.map(|m| m.get(&k).cloned().unwrap_or_default());
            let not_run = not_run_on(ranks, k, ring, &have, &mut evidence);
            if rings.is_none() {
                evidence.insert(
                    "not_run_on_ranks".into(),
                    json!(have.iter().map(|o| o.rank).collect::<Vec<_>>()),
                );
            }
            if let Some(s) = slot {
                evidence.insert("device".into(), json!(s.device));
                evidence.insert("port".into(), json!(s.port));
                evidence.insert("netdev".into(), json!(s.netdev));
                evidence.insert("state".into(), json!(s.state));
            }
            out.push(Verdict {
                kind: VerdictKind::RailMissing,
                from_rank: Some(i.rank),
                to_rank: None,
                from_host: Some(i.host.clone()),
                to_host: None,
                evidence,
                message: format!(
                    "RAIL MISSING rank {} ({}): {what}; {not_run}; the other rails ran",
                    i.rank, i.host
                ),
                next: Some(next),
                rail: Some(VerdictRail {
                    index: k,
                    from: slot.cloned(),
                    to: None,
                }),
            });
        }
    }
    out
}

/// Where rail `k` ran without a node that misses it: on its ring (`ring`, across nodes;
/// noted in `evidence`), or, without rings, nowhere (every node is a rank of its ring). Pure
/// but for `evidence`.
fn not_run_on(
    ranks: &[RankInfo],
    k: u32,
    ring: Option<Vec<Rank>>,
    have: &[&RankInfo],
    evidence: &mut BTreeMap<String, serde_json::Value>,
) -> String {
    let named = |v: &[&RankInfo]| {
        v.iter()
            .map(|o| format!("rank {} ({})", o.rank, o.host))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(ring) = ring {
        let on: Vec<&RankInfo> = ring
            .iter()
            .filter_map(|r| ranks.iter().find(|o| o.rank == *r))
            .collect();
        evidence.insert(
            "ran_on_ranks".into(),
            json!(if on.len() >= 2 { ring } else { Vec::new() }),
        );
        match on.len() {
            0 => format!("no node drives rail {k}"),
            1 => format!(
                "rail {k} did not run: a ring needs two nodes and only {} drives it",
                named(&on)
            ),
            _ => format!("rail {k} ran without it on {}", named(&on)),
        }
    } else if have.is_empty() {
        format!("no node drives rail {k}")
    } else {
        format!(
            "rail {k}'s ring needs every node, so it did not run on {} either",
            named(have)
        )
    }
}

/// Why rail `k`, which the job expects, has no ring of its own here.
fn not_run_note(ranks: &[RankInfo], k: u32, roster: Option<&Roster>) -> String {
    let Some(ring) = roster.and_then(|x| x.rings.get(&k)) else {
        return format!("rail {k}'s ring did not run: see rail_missing");
    };
    let on: Vec<String> = ring
        .iter()
        .map(|r| match ranks.iter().find(|o| o.rank == *r) {
            Some(o) => format!("rank {r} ({})", o.host),
            None => format!("rank {r}"),
        })
        .collect();
    match on.len() {
        0 => format!("rail {k}'s ring did not run: no node drives it; see rail_missing"),
        _ => format!(
            "rail {k}'s ring did not run: a ring needs two nodes and only {} drives it; see rail_missing",
            on.join(", ")
        ),
    }
}

/// Every node that declared its rails, in `ranks` (one that ran no rail's ring is in no
/// rail's report), with its rail slots as declared.
fn declared_ranks(ranks: &mut Vec<RankInfo>, roster: &Roster) {
    for d in roster.nodes.values() {
        match ranks.iter_mut().find(|i| i.rank == d.rank) {
            Some(i) if i.rails.is_empty() => i.rails = d.slots.clone(),
            Some(_) => {}
            None => ranks.push(RankInfo {
                neighbor: None,
                port_max: None,
                rank: d.rank,
                host: d.host.clone(),
                address: String::new(),
                device: None,
                transport: String::new(),
                pid: None,
                capabilities: Vec::new(),
                rails: d.slots.clone(),
                node: None,
            }),
        }
    }
    ranks.sort_by_key(|i| i.rank);
}

/// `mlx5_1:1 (eth2)`, `eth2`.
fn port_name(s: &RailPort) -> String {
    match (s.port, s.netdev.as_deref().filter(|n| *n != s.device)) {
        (Some(p), Some(n)) => format!("{}:{p} ({n})", s.device),
        (Some(p), None) => format!("{}:{p}", s.device),
        (None, _) => s.device.clone(),
    }
}

type Key = (VerdictKind, Option<Rank>, Option<Rank>);

/// Each rail's verdicts, naming their rail; one that every rail in `full` gives about the
/// same node (or link) is said once, for "all rails".
fn rail_verdicts(rails: &[(RailPort, RingReport)], ranks: &[RankInfo], full: &[u32]) -> Vec<Verdict> {
    let key = |v: &Verdict| -> Key { (v.kind, v.from_rank, v.to_rank) };
    let on: BTreeMap<u32, Vec<Key>> = rails
        .iter()
        .map(|(p, r)| (p.rail, r.verdicts.iter().map(key).collect()))
        .collect();
    let everywhere = |k: &Key| {
        full.len() >= 2
            && full
                .iter()
                .all(|rail| on.get(rail).is_some_and(|ks| ks.contains(k)))
    };
    let slot = |r: Option<Rank>, rail: u32| -> Option<RailPort> {
        let i = ranks.iter().find(|i| Some(i.rank) == r)?;
        i.rails.iter().find(|s| s.rail == rail).cloned()
    };
    let mut out: Vec<Verdict> = Vec::new();
    let mut said: Vec<Key> = Vec::new();
    for (p, r) in rails {
        for v in &r.verdicts {
            let k = key(v);
            if everywhere(&k) {
                if !said.contains(&k) {
                    said.push(k);
                    out.push(all_rails(v, rails, full));
                }
                continue;
            }
            let mut v = v.clone();
            // A hang's sentence names its rail itself, not only through the prefix.
            if let Some(rest) = v.message.strip_prefix("HANG ") {
                v.message = format!("HANG on rail {}: {rest}", p.rail);
            }
            v.message = format!("rail {}: {}", p.rail, v.message);
            v.rail = Some(VerdictRail {
                index: p.rail,
                from: slot(v.from_rank, p.rail),
                to: slot(v.to_rank, p.rail),
            });
            out.push(v);
        }
    }
    out
}

/// The lowest rail's verdict, said of every rail: the rank labels name no one rail's device,
/// and the evidence keeps each rail's figure.
fn all_rails(v: &Verdict, rails: &[(RailPort, RingReport)], full: &[u32]) -> Verdict {
    let mut out = v.clone();
    let rep = rails.iter().find(|(_, r)| r.verdicts.contains(v)).map(|(_, r)| r);
    let mut msg = v.message.clone();
    for (rank, host) in [(v.from_rank, &v.from_host), (v.to_rank, &v.to_host)] {
        let (Some(rank), Some(host)) = (rank, host.as_deref()) else {
            continue;
        };
        let dev = rep
            .and_then(|r| r.ranks.iter().find(|i| i.rank == rank))
            .and_then(|i| i.device.clone());
        if let Some(d) = dev {
            msg = msg.replace(
                &format!("rank {rank} ({host}, {d})"),
                &format!("rank {rank} ({host}, all rails)"),
            );
        }
        msg = msg.replace(
            &format!("rank {rank} ({host})"),
            &format!("rank {rank} ({host}, all rails)"),
        );
    }
    out.message = format!("all rails: {msg}");
    out.rail = None;
    out.evidence.insert("rails".into(), json!(full));
    // Each rail's figure, and each rail's switch ports (not the lowest rail's alone: every
    // rail's cable and port is a suspect of a verdict every rail gives).
    let per_rail = |key: &str| -> BTreeMap<String, serde_json::Value> {
        same_on_each_rail(v, rails)
            .filter_map(|(k, w)| Some((k.to_string(), w.evidence.get(key)?.clone())))
            .collect()
    };
    let per = per_rail("gbs");
    if !per.is_empty() {
        out.evidence.insert("rails_gbs".into(), json!(per));
    }
    let nbr = per_rail("neighbor");
    if nbr.len() > 1 {
        out.evidence.remove("neighbor");
        out.evidence.insert("rails_neighbor".into(), json!(nbr));
    }
    out.next = all_rails_next(v, rails);
    out
}

/// Each rail's verdict of the same kind between the same ranks as `v`, with its rail.
fn same_on_each_rail<'a>(
    v: &'a Verdict,
    rails: &'a [(RailPort, RingReport)],
) -> impl Iterator<Item = (u32, &'a Verdict)> + 'a {
    rails.iter().filter_map(move |(p, r)| {
        let same = r
            .verdicts
            .iter()
            .find(|w| (w.kind, w.from_rank, w.to_rank) == (v.kind, v.from_rank, v.to_rank))?;
        Some((p.rail, same))
    })
}

/// The next step of a verdict every rail gives: each rail's own (they name that rail's
/// device or netdev), said once where they are the same. Pure.
fn all_rails_next(v: &Verdict, rails: &[(RailPort, RingReport)]) -> Option<String> {
    let mut steps: Vec<(u32, String)> = Vec::new();
    for (k, w) in same_on_each_rail(v, rails) {
        if let Some(n) = w.next.clone()
            && !steps.iter().any(|(_, s)| *s == n)
        {
            steps.push((k, n));
        }
    }
    match steps.len() {
        0 => v.next.clone(),
        1 => steps.pop().map(|(_, n)| n),
        _ => Some(
            steps
                .iter()
                .map(|(k, n)| format!("rail {k}: {n}"))
                .collect::<Vec<_>>()
                .join("; "),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::launcher::Source;
    use crate::ring::options::Options;
    use crate::ring::report::LauncherInfo;

    fn slot(rail: u32, dev: &str, usable: bool) -> RailPort {
        RailPort {
            rail,
            device: dev.into(),
            port: Some(1),
            netdev: Some(format!("eth{}", rail + 1)),
            state: Some(if usable { "ACTIVE" } else { "DOWN" }.into()),
            usable,
            label: None,
            address: None,
        }
    }

    /// Three nodes; node-b's rail 1 is `b1_up`.
    fn ranks(rail: u32, b1_up: bool) -> Vec<RankInfo> {
        (0..3)
            .map(|r| RankInfo {
                neighbor: None,
                port_max: None,
                rank: r,
                host: format!("node-{}", (b'a' + r as u8) as char),
                address: format!("198.19.{rail}.{}:4000", 10 + r),
                device: Some(format!("eth{}", rail + 1)),
                transport: "tcp".into(),
                pid: Some(100 + r),
                capabilities: vec!["tcp".into()],
                rails: vec![slot(0, "mlx5_0", true), slot(1, "mlx5_1", r != 1 || b1_up)],
                node: None,
            })
            .collect()
    }

    fn row(size: u64, time_us: f64, busbw: f64) -> ResultRow {
        ResultRow {
            size_bytes: size,
            count: size / 4,
            dtype: "float",
            redop: "sum",
            root: -1,
            time_us,
            algbw_gbs: busbw * 0.75,
            busbw_gbs: busbw,
            wrong: Some(0),
            in_place: Some(InPlaceRow {
                time_us,
                algbw_gbs: busbw * 0.75,
                busbw_gbs: busbw,
                wrong: Some(0),
            }),
        }
    }

    fn verdict(kind: VerdictKind, from: u32, dev: &str, gbs: f64) -> Verdict {
        let host = format!("node-{}", (b'a' + from as u8) as char);
        Verdict {
            from_host: Some(host.clone()),
            evidence: BTreeMap::from([("gbs".to_string(), json!(gbs))]),
            message: format!(
                "SLOW EGRESS rank {from} ({host}, {dev}): its 2 outgoing links run at {gbs} GB/s"
            ),
            next: Some(format!("on {host}: `fabprobe links`")),
            ..Verdict::bare(kind, Some(from), None)
        }
    }

    fn report(rail: u32, b1_up: bool, rows: Vec<ResultRow>, verdicts: Vec<Verdict>) -> RingReport {
        RingReport {
            world: 3,
            transport: "tcp".into(),
            transport_note: None,
            launcher: LauncherInfo {
                source: Source::Flags,
                coordinator: format!("198.18.0.10:{}", 29517 + rail),
                coordinator_source: "--coordinator".into(),
                token_source: "--token".into(),
            },
            options: Options {
                sizes: vec![1 << 20],
                iters: 1,
                warmup: 0,
                check: 1,
                channels: 1,
                timeout_secs: 5,
                join_timeout_secs: 5,
                slots: 4,
                slot_bytes: 1 << 20,
                scan: None,
                sweep: true,
            },
            ranks: ranks(rail, b1_up),
            avg_busbw_gbs: None,
            results: rows,
            links: vec![],
            bootstrap_us: 10,
            events: vec![],
            scan: None,
            verdicts,
            not_judged: vec![],
            error: None,
            port_counters: vec![],
            rails: vec![],
        }
    }

    #[test]
    fn rows_sum_the_rails_and_take_the_slowest_time() {
        let r = job_report(
            vec![
                (
                    slot(1, "mlx5_1", true),
                    report(1, true, vec![row(1 << 20, 300.0, 0.5)], vec![]),
                ),
                (
                    slot(0, "mlx5_0", true),
                    report(0, true, vec![row(1 << 20, 200.0, 1.0)], vec![]),
                ),
            ],
            vec![],
            Some(&[0, 1]),
            None,
        );
        assert_eq!(r.results.len(), 1);
        let x = &r.results[0];
        assert_eq!((x.time_us, x.busbw_gbs, x.algbw_gbs), (300.0, 1.5, 1.125));
        assert_eq!(x.in_place.as_ref().unwrap().busbw_gbs, 1.5);
        assert_eq!(r.avg_busbw_gbs, Some(1.5));
        assert_eq!(r.rails.iter().map(|x| x.rail).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(r.rails[1].results[0].busbw_gbs, 0.5);
        // Each node once, with its rails as it ran them.
        assert_eq!(r.ranks.len(), 3);
        let b = &r.ranks[1].rails;
        assert_eq!(
            (b[1].label.as_deref(), b[1].address.as_deref()),
            (Some("eth2"), Some("198.19.1.11:4000"))
        );
        assert!(r.verdicts.is_empty() && r.error.is_none(), "{:?}", r.verdicts);
    }

    #[test]
    fn a_verdict_on_one_rail_names_it_and_on_every_rail_says_all_rails() {
        let one = job_report(
            vec![
                (slot(0, "mlx5_0", true), report(0, true, vec![], vec![])),
                (
                    slot(1, "mlx5_1", true),
                    report(
                        1,
                        true,
                        vec![],
                        vec![verdict(VerdictKind::SlowEgress, 1, "eth2", 0.01)],
                    ),
                ),
            ],
            vec![],
            Some(&[0, 1]),
            None,
        );
        assert_eq!(one.verdicts.len(), 1);
        let v = &one.verdicts[0];
        assert_eq!(
            v.message,
            "rail 1: SLOW EGRESS rank 1 (node-b, eth2): its 2 outgoing links run at 0.01 GB/s"
        );
        let rail = v.rail.as_ref().unwrap();
        assert_eq!(rail.index, 1);
        assert_eq!(rail.from.as_ref().map(|p| p.device.as_str()), Some("mlx5_1"));
        assert_eq!(rail.to, None);

        let all = job_report(
            vec![
                (
                    slot(0, "mlx5_0", true),
                    report(
                        0,
                        true,
                        vec![],
                        vec![verdict(VerdictKind::SlowEgress, 2, "eth1", 0.02)],
                    ),
                ),
                (
                    slot(1, "mlx5_1", true),
                    report(
                        1,
                        true,
                        vec![],
                        vec![verdict(VerdictKind::SlowEgress, 2, "eth2", 0.03)],
                    ),
                ),
            ],
            vec![],
            Some(&[0, 1]),
            None,
        );
        assert_eq!(all.verdicts.len(), 1, "{:?}", all.verdicts);
        let v = &all.verdicts[0];
        assert_eq!(
            v.message,
            "all rails: SLOW EGRESS rank 2 (node-c, all rails): its 2 outgoing links run at 0.02 GB/s"
        );
        assert_eq!(v.rail, None);
        assert_eq!(v.evidence["rails"], json!([0, 1]));
        assert_eq!(v.evidence["rails_gbs"], json!({"0": 0.02, "1": 0.03}));
        // The same next step on every rail is said once.
        assert_eq!(v.next.as_deref(), Some("on node-c: `fabprobe links`"));
    }

    /// Issue 31: an all-rails verdict's next step names every rail's netdev, not only the
    /// lowest rail's.
    #[test]
    fn an_all_rails_verdicts_next_step_names_every_rails_netdev() {
        let on = |rail: u32, dev: &str| {
            let mut v = verdict(VerdictKind::SlowEgress, 2, dev, 0.02);
            v.next = Some(format!("on node-c: `ethtool -S {dev}`"));
            (
                slot(rail, &format!("mlx5_{rail}"), true),
                report(rail, true, vec![], vec![v]),
            )
        };
        let all = job_report(vec![on(0, "eth1"), on(1, "eth2")], vec![], Some(&[0, 1]), None);
        assert_eq!(all.verdicts.len(), 1, "{:?}", all.verdicts);
        let v = &all.verdicts[0];
        assert!(v.message.starts_with("all rails: "), "{}", v.message);
        assert_eq!(
            v.next.as_deref(),
            Some("rail 0: on node-c: `ethtool -S eth1`; rail 1: on node-c: `ethtool -S eth2`")
        );
        crate::ring::diagnosis::pastes::assert_next_pastes(v);
    }

    /// Issue 30: an all-rails verdict names every rail's switch port (LLDP), not only the
    /// lowest rail's.
    #[test]
    fn an_all_rails_verdict_names_every_rails_switch_port() {
        let on = |rail: u32, dev: &str, port: &str| {
            let mut v = verdict(VerdictKind::SlowEgress, 2, dev, 0.02);
            let text = format!("node-c {dev} <-> leaf-07 {port}");
            v.evidence
                .insert("neighbor".into(), json!({"from": {"rank": 2, "text": text}}));
            (
                slot(rail, &format!("mlx5_{rail}"), true),
                report(rail, true, vec![], vec![v]),
            )
        };
        let all = job_report(
            vec![on(0, "eth1", "Eth1/1"), on(1, "eth2", "Eth1/2")],
            vec![],
            Some(&[0, 1]),
            None,
        );
        let v = &all.verdicts[0];
        assert!(v.message.starts_with("all rails: "), "{}", v.message);
        assert!(!v.evidence.contains_key("neighbor"), "{:?}", v.evidence);
        assert_eq!(
            crate::ring::diagnosis::neighbor::texts(v),
            ["node-c eth1 <-> leaf-07 Eth1/1", "node-c eth2 <-> leaf-07 Eth1/2"]
        );
        let (drain, _) = crate::ring::report::action_lists(&all.verdicts);
        assert_eq!(drain[0].switch_ports.len(), 2, "{drain:?}");
    }

    #[test]
    fn a_node_without_a_rail_is_rail_missing_and_explains_that_rails_early_end() {
        let mut rail1 = report(1, false, vec![], vec![]);
        rail1.error = Some("1 of 3 ranks never reached the coordinator: missing rank 1".into());
        let r = job_report(
            vec![
                (
                    slot(0, "mlx5_0", true),
                    report(0, false, vec![row(1 << 20, 200.0, 1.0)], vec![]),
                ),
                (slot(1, "mlx5_1", true), rail1),
            ],
            vec![],
            Some(&[0, 1]),
            None,
        );
        assert_eq!(r.verdicts.len(), 1, "{:?}", r.verdicts);
        let v = &r.verdicts[0];
        assert_eq!(v.kind, VerdictKind::RailMissing);
        assert_eq!((v.from_rank, v.from_host.as_deref()), (Some(1), Some("node-b")));
        assert_eq!(
            v.message,
            "RAIL MISSING rank 1 (node-b): its rail 1 port mlx5_1:1 (eth2) is DOWN; rail 1's ring needs every \
             node, so it did not run on rank 0 (node-a), rank 2 (node-c) either; the other rails ran"
        );
        assert_eq!(v.evidence["not_run_on_ranks"], json!([0, 2]));
        assert_eq!(v.rail.as_ref().map(|x| x.index), Some(1));
        assert_eq!(v.evidence["state"], json!("DOWN"));
        // The rail's own early end is explained by the verdict; the rows are rail 0's.
        assert_eq!(r.error, None);
        assert_eq!(r.results[0].busbw_gbs, 1.0);
        assert!(r.failed());
        // Another early end of a rail is the rail's, named.
        let mut rail0 = report(0, true, vec![], vec![]);
        rail0.error = Some("rank 2 lost".into());
        let r = job_report(vec![(slot(0, "mlx5_0", true), rail0)], vec![], Some(&[0]), None);
        assert_eq!(r.error.as_deref(), Some("rail 0: rank 2 lost"));
    }

    #[test]
    fn with_a_roster_a_rail_runs_on_the_nodes_that_have_it_and_is_numbered_by_node() {
        use crate::ring::railplan::{Declaration, Roster};
        // node-b's rail 1 is down: rail 1's ring was node-a (its rank 0) and node-c (its
        // rank 1), and it found node-c's rail 1 egress slow; its coordinator numbered its
        // report by node.
        let mut rail1 = report(
            1,
            false,
            vec![row(1 << 20, 300.0, 0.5)],
            vec![verdict(VerdictKind::SlowEgress, 2, "eth2", 0.01)],
        );
        rail1.world = 2;
        rail1.ranks.retain(|i| i.rank != 1);
        rail1.verdicts[0].message = "SLOW EGRESS rank 2 (node-c, eth2): 0.01 GB/s".into();
        let decl = |r: u32| Declaration {
            rank: r,
            host: format!("node-{}", (b'a' + r as u8) as char),
            slots: ranks(0, false)[r as usize].rails.clone(),
        };
        let roster = Roster {
            world: 3,
            nodes: (0..3).map(|r| (r, decl(r))).collect(),
            rings: BTreeMap::from([(0, vec![0, 1, 2]), (1, vec![0, 2])]),
            silent: vec![],
        };
        let r = job_report(
            vec![
                (
                    slot(0, "mlx5_0", true),
                    report(0, false, vec![row(1 << 20, 200.0, 1.0)], vec![]),
                ),
                (slot(1, "mlx5_1", true), rail1),
            ],
            vec![],
            None,
            Some(&roster),
        );
        let msgs: Vec<&str> = r.verdicts.iter().map(|v| v.message.as_str()).collect();
        assert_eq!(
            msgs,
            [
                "RAIL MISSING rank 1 (node-b): its rail 1 port mlx5_1:1 (eth2) is DOWN; rail 1 ran without it \
                 on rank 0 (node-a), rank 2 (node-c); the other rails ran",
                "rail 1: SLOW EGRESS rank 2 (node-c, eth2): 0.01 GB/s",
            ]
        );
        assert_eq!(r.verdicts[0].evidence["ran_on_ranks"], json!([0, 2]));
        assert_eq!(r.verdicts[1].from_rank, Some(2));
        assert_eq!(
            r.verdicts[1]
                .rail
                .as_ref()
                .and_then(|x| x.from.as_ref())
                .map(|p| p.device.as_str()),
            Some("mlx5_1")
        );
        let nodes: Vec<(u32, Vec<u32>)> = r.rails.iter().map(|x| (x.rail, x.nodes.clone())).collect();
        assert_eq!(nodes, [(0, vec![0, 1, 2]), (1, vec![0, 2])]);
        // Both rails' rows count: rail 1 ran.
        assert_eq!(r.results[0].busbw_gbs, 1.5);
        assert_eq!(r.world, 3);
        // Only one node drives the rail: no ring, and the verdict and the rail say so.
        let roster = Roster {
            rings: BTreeMap::from([(0, vec![0, 1, 2]), (1, vec![0])]),
            ..roster
        };
        let r = job_report(
            vec![(slot(0, "mlx5_0", true), report(0, false, vec![], vec![]))],
            vec![],
            None,
            Some(&roster),
        );
        assert!(
            r.verdicts[0]
                .message
                .contains("rail 1 did not run: a ring needs two nodes and only rank 0 (node-a) drives it"),
            "{}",
            r.verdicts[0].message
        );
        assert_eq!(
            r.rails[1].error.as_deref(),
            Some(
                "rail 1's ring did not run: a ring needs two nodes and only rank 0 (node-a) drives it; see rail_missing"
            )
        );
    }

    /// The roster of `n` nodes, each with the rail slots `slots(rank)` gives, and the rings
    /// [`crate::ring::railplan::plan`] makes of them for `wanted`.
    fn roster_of(n: u32, slots: impl Fn(u32) -> Vec<RailPort>, wanted: Option<&[u32]>) -> Roster {
        use crate::ring::railplan::{Declaration, plan};
        let nodes: BTreeMap<Rank, Declaration> = (0..n)
            .map(|r| {
                let d = Declaration {
                    rank: r,
                    host: format!("node-{}", (b'a' + r as u8) as char),
                    slots: slots(r),
                };
                (r, d)
            })
            .collect();
        Roster {
            world: n,
            rings: plan(&nodes, n, wanted),
            nodes,
            silent: vec![],
        }
    }

    /// A rail's report as its coordinator hands it over: the ring of `nodes` (the job's
    /// ranks), each named as itself, one row.
    fn ring_of(rail: u32, nodes: &[u32], slots: impl Fn(u32) -> Vec<RailPort>) -> RingReport {
        let mut r = report(rail, true, vec![row(1 << 20, 200.0, 1.0)], vec![]);
        r.world = nodes.len() as u32;
        r.ranks = nodes
            .iter()
            .map(|&n| RankInfo {
                neighbor: None,
                port_max: None,
                rank: n,
                host: format!("node-{}", (b'a' + n as u8) as char),
                rails: slots(n),
                ..r.ranks[0].clone()
            })
            .collect();
        r
    }

    /// `--device mlx5_0,mlx5_7` where node-b has no mlx5_7: its slot 1 is absent (not an
    /// error of node-b), rail 1 runs on node-a and node-c, and node-b is named for it.
    #[test]
    fn a_device_a_node_lacks_is_its_rail_missing_and_the_rail_runs_on_the_others() {
        use crate::nccl::hca::PortCandidate;
        let port = |dev: &str| PortCandidate {
            device: dev.into(),
            port: 1,
            state: Some("ACTIVE".into()),
            link_layer: Some("Ethernet".into()),
            netdevs: vec![format!("en{dev}")],
            gid_index: Some(3),
            gid_reason: String::new(),
        };
        let slots = |r: u32| {
            let have: Vec<PortCandidate> = match r {
                1 => vec![port("mlx5_0")],
                _ => vec![port("mlx5_0"), port("mlx5_7")],
            };
            crate::ring::railplan::rdma_slots(&have, Some("mlx5_0,mlx5_7"), None)
        };
        let roster = roster_of(3, slots, None);
        assert_eq!(
            roster.rings,
            BTreeMap::from([(0, vec![0, 1, 2]), (1, vec![0, 2])])
        );
        let r = job_report(
            vec![
                (slots(0)[0].clone(), ring_of(0, &[0, 1, 2], slots)),
                (slots(0)[1].clone(), ring_of(1, &[0, 2], slots)),
            ],
            vec![],
            None,
            Some(&roster),
        );
        assert_eq!(r.verdicts.len(), 1, "{:?}", r.verdicts);
        let v = &r.verdicts[0];
        assert_eq!(
            (v.kind, v.from_rank, v.rail.as_ref().map(|x| x.index)),
            (VerdictKind::RailMissing, Some(1), Some(1))
        );
        assert_eq!(
            v.message,
            "RAIL MISSING rank 1 (node-b): its rail 1 port mlx5_7 is absent (--device names no such RDMA port \
             there); rail 1 ran without it on rank 0 (node-a), rank 2 (node-c); the other rails ran"
        );
        assert_eq!(v.evidence["state"], json!("absent"));
        assert_eq!(v.evidence["device"], json!("mlx5_7"));
        assert!(
            v.next
                .as_deref()
                .unwrap()
                .starts_with("on node-b: `fabprobe links`")
        );
        crate::ring::diagnosis::pastes::assert_next_pastes(v);
        assert_eq!(r.results[0].busbw_gbs, 2.0);
        assert!(r.failed());
    }

    /// `--rails all` with a rail fewer than half the nodes have: no ring, no verdict, no
    /// rows of it, and the report says it was not tested and who has it (never a pass of
    /// it); at half or more, the nodes without it are its rail_missing.
    #[test]
    fn a_rail_a_minority_has_is_said_not_tested_never_passed() {
        let two = |_: u32| vec![slot(0, "mlx5_0", true), slot(1, "mlx5_1", true)];
        let three = |_: u32| {
            vec![
                slot(0, "mlx5_0", true),
                slot(1, "mlx5_1", true),
                slot(2, "mlx5_2", true),
            ]
        };
        // Four nodes, node-d alone with a rail 2; five nodes, node-d and node-e with one.
        for (n, with) in [(4, vec![3]), (5, vec![3, 4])] {
            let slots = |r: u32| if with.contains(&r) { three(r) } else { two(r) };
            let roster = roster_of(n, slots, None);
            let all: Vec<u32> = (0..n).collect();
            assert_eq!(roster.rings.keys().copied().collect::<Vec<_>>(), [0, 1], "{n}");
            let r = job_report(
                vec![
                    (slot(0, "mlx5_0", true), ring_of(0, &all, slots)),
                    (slot(1, "mlx5_1", true), ring_of(1, &all, slots)),
                ],
                vec![],
                None,
                Some(&roster),
            );
            assert!(
                r.verdicts.is_empty() && r.error.is_none(),
                "{n}: {:?}",
                r.verdicts
            );
            assert!(!r.failed(), "{n}");
            assert_eq!(r.results[0].busbw_gbs, 2.0, "{n}: only the job's rails count");
            let x = r.rails.iter().find(|x| x.rail == 2).expect("rail 2 is listed");
            assert_eq!(x.nodes, with, "{n}");
            assert!(x.results.is_empty() && x.error.is_none());
            let why = x.not_tested.as_deref().unwrap();
            let have = if n == 4 {
                "only 1 of 4 nodes has it (rank 3 (node-d))"
            } else {
                "only 2 of 5 nodes have it (rank 3 (node-d), rank 4 (node-e))"
            };
            assert!(
                why.starts_with(&format!("rail 2 not tested: {have}, fewer than half")),
                "{why}"
            );
            assert!(why.ends_with("fabprobe links on node-a, node-b, node-c"), "{why}");
            // The job's rails are the two it ran (render::ring's tests hold the words).
            assert_eq!(r.rails.iter().filter(|x| x.not_tested.is_none()).count(), 2, "{n}");
        }
        // Two of four have it: a rail of the job, run between them, the others named.
        let slots = |r: u32| if r >= 2 { three(r) } else { two(r) };
        let roster = roster_of(4, slots, None);
        assert_eq!(roster.rings[&2], vec![2, 3]);
        let all: Vec<u32> = (0..4).collect();
        let r = job_report(
            vec![
                (slot(0, "mlx5_0", true), ring_of(0, &all, slots)),
                (slot(1, "mlx5_1", true), ring_of(1, &all, slots)),
                (slot(2, "mlx5_2", true), ring_of(2, &[2, 3], slots)),
            ],
            vec![],
            None,
            Some(&roster),
        );
        let named: Vec<_> = r.verdicts.iter().map(|v| (v.kind, v.from_rank)).collect();
        assert_eq!(
            named,
            [
                (VerdictKind::RailMissing, Some(0)),
                (VerdictKind::RailMissing, Some(1))
            ]
        );
        assert!(r.rails.iter().all(|x| x.not_tested.is_none()));
    }

    #[test]
    fn rank_0_without_a_rail_the_majority_drives_is_the_one_named() {
        // `all`: rank 0 has no rail 1 at all (one slot); node-b and node-c drive rails 0
        // and 1. Rank 0 ran only rail 0, so rail 1 comes from the other nodes' slots.
        let mut rail0 = report(0, true, vec![row(1 << 20, 200.0, 1.0)], vec![]);
        rail0.ranks[0].rails.truncate(1);
        let r = job_report(vec![(slot(0, "mlx5_0", true), rail0)], vec![], None, None);
        assert_eq!(r.verdicts.len(), 1, "{:?}", r.verdicts);
        let v = &r.verdicts[0];
        assert_eq!(
            (v.kind, v.from_rank, v.rail.as_ref().map(|x| x.index)),
            (VerdictKind::RailMissing, Some(0), Some(1))
        );
        assert_eq!(
            v.message,
            "RAIL MISSING rank 0 (node-a): it has no rail 1 (1 rail slot(s)); rail 1's ring needs every node, so \
             it did not run on rank 1 (node-b), rank 2 (node-c) either; the other rails ran"
        );
        // Rail 1 is listed, as not run; the rows are rail 0's.
        assert_eq!(r.rails.iter().map(|x| x.rail).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(
            r.rails[1].error.as_deref(),
            Some("rail 1's ring did not run: see rail_missing")
        );
        assert!(r.failed());

        // A DOWN port on rank 0 (its slot exists): the port's state from the links probe.
        let mut rail0 = report(0, true, vec![row(1 << 20, 200.0, 1.0)], vec![]);
        rail0.ranks[0].rails[1].usable = false;
        rail0.ranks[0].rails[1].state = Some("DOWN (phys Disabled)".into());
        let r = job_report(vec![(slot(0, "mlx5_0", true), rail0)], vec![], None, None);
        let named: Vec<_> = r.verdicts.iter().map(|v| (v.kind, v.from_rank)).collect();
        assert_eq!(named, [(VerdictKind::RailMissing, Some(0))]);
        assert!(
            r.verdicts[0].message.contains("is DOWN (phys Disabled)"),
            "{}",
            r.verdicts[0].message
        );
    }

    #[test]
    fn a_rail_only_rank_0_has_is_no_verdict_and_says_why_it_did_not_run() {
        // `all`: rank 0 alone has a rail 2; its ring waited for ranks that never came.
        let extra = RailPort {
            rail: 2,
            ..slot(2, "mlx5_2", true)
        };
        let mut rail0 = report(0, true, vec![row(1 << 20, 200.0, 1.0)], vec![]);
        rail0.ranks[0].rails.push(extra.clone());
        let mut rail1 = report(1, true, vec![row(1 << 20, 200.0, 1.0)], vec![]);
        rail1.ranks[0].rails.push(extra.clone());
        // Only rank 0 joined rail 2's ring.
        let mut rail2 = report(2, true, vec![], vec![]);
        rail2.ranks = vec![rail0.ranks[0].clone()];
        rail2.error = Some("2 of 3 ranks never reached the coordinator".into());
        let r = job_report(
            vec![
                (slot(0, "mlx5_0", true), rail0),
                (slot(1, "mlx5_1", true), rail1),
                (extra, rail2),
            ],
            vec![],
            None,
            None,
        );
        assert!(r.verdicts.is_empty(), "{:?}", r.verdicts);
        assert_eq!(r.error, None);
        assert_eq!(r.rails[2].error, None);
        assert_eq!(
            r.rails[2].not_tested.as_deref(),
            Some(
                "rail 2 not tested: only 1 of 3 nodes has it (rank 0 (node-a)), fewer than half, so it is no rail of \
                 this job and its ring did not run; if every node should have it, the others lack it: fabprobe links \
                 on node-b, node-c"
            )
        );
        assert!(!r.failed());
        assert_eq!(r.results[0].busbw_gbs, 2.0);
    }

    #[test]
    fn a_rail_stopped_for_another_is_no_verdict_and_a_hang_names_its_rail() {
        let mut rail0 = report(0, true, vec![], vec![]);
        let stop = Verdict {
            message: "rail 0 stopped: rail 1 failed first (HANG ...); this rail's ring had not failed".into(),
            ..Verdict::bare(VerdictKind::RailStopped, None, None)
        };
        rail0.verdicts.push(stop.clone());
        rail0.error = Some(stop.message.clone());
        let hang = Verdict {
            kind: VerdictKind::HangLink,
            to_rank: Some(2),
            to_host: Some("node-c".into()),
            message:
                "HANG rank 2 (node-c) waits for data from rank 1 (node-b) since step 0 of reduce-scatter"
                    .into(),
            ..verdict(VerdictKind::HangLink, 1, "eth2", 0.0)
        };
        let rail1 = report(1, true, vec![], vec![hang]);
        let r = job_report(
            vec![(slot(0, "mlx5_0", true), rail0), (slot(1, "mlx5_1", true), rail1)],
            vec![],
            None,
            None,
        );
        assert_eq!(r.verdicts.len(), 1, "{:?}", r.verdicts);
        assert_eq!(
            r.verdicts[0].message,
            "rail 1: HANG on rail 1: rank 2 (node-c) waits for data from rank 1 (node-b) since step 0 of reduce-scatter"
        );
        assert_eq!(r.verdicts[0].rail.as_ref().map(|x| x.index), Some(1));
        assert!(
            r.rails[0]
                .error
                .as_deref()
                .is_some_and(|e| e.contains("rail 1 failed first")),
            "{:?}",
            r.rails[0]
        );
    }
}
