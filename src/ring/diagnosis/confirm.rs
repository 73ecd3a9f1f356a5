//! Confirm before blame: a suspect the scan found ([`crate::ring::diagnosis::localize`]) is
//! a verdict only when new connections measure it slow again. Pure, no I/O.
//!
//! A connection is one scan order's link (its `order` index): a re-run of the same order
//! reuses its connections, an order with a new index opens new ones (new source ports, so
//! a hashed ECMP path changes). The localization judges each link on its first connection;
//! this step reads the others:
//! * a slow egress or ingress stands when its links on new connections are slow too (the
//!   slowness follows the node);
//! * a slow link stands when every new connection of the pair is slow (it follows the
//!   pair); when a new connection runs clearly faster it is a [`VerdictKind::SlowPath`]
//!   (it moves with the connection: ECMP or an uplink, never "check the cable");
//! * anything else, or a suspect with no new connection, is *unconfirmed*: listed with its
//!   figures, not a verdict.
//!
//! API: [`confirm`]`(&analysis, &samples, &Thresholds) -> Confirmed`; [`connections`].

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::ring::diagnosis::localize::{Analysis, LinkStat, Thresholds, fmt_gbs};
use crate::ring::model::{LinkSample, Rank, RankInfo, Verdict, VerdictKind, shown};

/// New connections a slow link must be slow on to stand as the link: a healthy pair that
/// lands on a slow path once in 30 connections does so twice more once in 900.
pub(crate) const LINK_NEW_CONNECTIONS: usize = 2;

/// A new connection must run this much faster than the first one's figure before the
/// slowness is said to move with the connection (else the figures are too close to tell).
const PATH_FRACTION: f64 = 0.75;

/// The verdicts that stood and the suspects that did not.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Confirmed {
    pub verdicts: Vec<Verdict>,
    /// Suspects not confirmed (evidence `unconfirmed: true`): figures, not verdicts.
    pub unconfirmed: Vec<Verdict>,
}

/// Each directed link's connections: `{(from, to): {order: upper median of its samples}}`.
pub(crate) fn connections(samples: &[LinkSample]) -> BTreeMap<(Rank, Rank), BTreeMap<u32, f64>> {
    let mut raw: BTreeMap<(Rank, Rank), BTreeMap<u32, Vec<f64>>> = BTreeMap::new();
    for s in samples {
        if s.from_rank == s.to_rank || !(s.seconds.is_finite() && s.seconds > 0.0) {
            continue;
        }
        raw.entry((s.from_rank, s.to_rank))
            .or_default()
            .entry(s.order)
            .or_default()
            .push(s.gbs());
    }
    raw.into_iter()
        .map(|(k, by)| {
            let figs = by
                .into_iter()
                .filter_map(|(o, mut v)| {
                    v.retain(|g| g.is_finite());
                    v.sort_by(f64::total_cmp);
                    v.get(v.len() / 2).map(|&g| (o, g))
                })
                .collect();
            (k, figs)
        })
        .collect()
}

/// The figures of a link's connections after its first (lowest order index).
fn new_figures(conns: &BTreeMap<(Rank, Rank), BTreeMap<u32, f64>>, from: Rank, to: Rank) -> Vec<f64> {
    conns
        .get(&(from, to))
        .map(|by| by.values().skip(1).copied().collect())
        .unwrap_or_default()
}

/// Sort the analysis's verdicts into confirmed ones (slow paths among them) and
/// unconfirmed suspects. Verdicts of other kinds pass unchanged.
pub(crate) fn confirm(ranks: &[RankInfo], a: &Analysis, samples: &[LinkSample], policy: &Thresholds) -> Confirmed {
    let conns = connections(samples);
    let Some(reference) = a.median_gbs else {
        return Confirmed::default();
    };
    let slow = policy.median_fraction * reference;
    let mut out = Confirmed::default();
    for v in &a.verdicts {
        let cells: Vec<&LinkStat> = match (v.kind, v.from_rank, v.to_rank) {
            (VerdictKind::SlowLink, Some(f), Some(t)) => {
                a.links.iter().filter(|l| (l.from_rank, l.to_rank) == (f, t)).collect()
            }
            (VerdictKind::SlowEgress, Some(f), _) => a.links.iter().filter(|l| l.from_rank == f).collect(),
            (VerdictKind::SlowIngress, _, Some(t)) => a.links.iter().filter(|l| l.to_rank == t).collect(),
            _ => {
                out.verdicts.push(v.clone());
                continue;
            }
        };
        let news: Vec<f64> = cells
            .iter()
            .flat_map(|l| new_figures(&conns, l.from_rank, l.to_rank))
            .collect();
        let mut v = v.clone();
        v.evidence.insert("confirm_gbs".into(), json!(news.iter().map(|&g| crate::text::round3(g)).collect::<Vec<_>>()));
        let fastest = news.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let first = cells.iter().map(|l| l.gbs).fold(f64::INFINITY, f64::min);
        match v.kind {
            _ if news.is_empty() => out.unconfirmed.push(unconfirmed(v, "not re-measured on a new connection")),
            VerdictKind::SlowLink if news.len() >= LINK_NEW_CONNECTIONS && news.iter().all(|&g| g < slow) => {
                out.verdicts.push(confirmed(v, &news))
            }
            VerdictKind::SlowLink if first < PATH_FRACTION * fastest && fastest >= slow => {
                out.verdicts.push(slow_path(ranks, &v, first, &news))
            }
            VerdictKind::SlowEgress | VerdictKind::SlowIngress
                if median(&news) < slow || followed(&conns, &cells) =>
            {
                out.verdicts.push(confirmed(v, &news))
            }
            _ => {
                let why = format!("new connections measured {}", list(&news));
                out.unconfirmed.push(unconfirmed(v, &why));
            }
        }
    }
    for v in &a.tied {
        let why = "as slow are the partners' other direction, and the orders run could not tell which is the fault";
        out.unconfirmed.push(unconfirmed(v.clone(), why));
    }
    out
}

/// A node's links ran on their new connections about as on their first (none clearly
/// faster, by [`PATH_FRACTION`]): the slowness followed the node. Its links then sit
/// where the scan found them, and a 30% slower egress beside a ±10% spread, judged on its
/// new figures against 80% of the median alone, was cleared in 1 run of 1,000.
fn followed(conns: &BTreeMap<(Rank, Rank), BTreeMap<u32, f64>>, cells: &[&LinkStat]) -> bool {
    let ratios: Vec<f64> = cells
        .iter()
        .filter_map(|l| conns.get(&(l.from_rank, l.to_rank)))
        .flat_map(|by| {
            let first = by.values().next().copied().unwrap_or(f64::NAN);
            by.values().skip(1).map(move |&g| g / first).collect::<Vec<_>>()
        })
        .filter(|r| r.is_finite())
        .collect();
    !ratios.is_empty() && ratios.iter().all(|&r| r * PATH_FRACTION < 1.0)
}

fn confirmed(mut v: Verdict, news: &[f64]) -> Verdict {
    v.message += &format!("; confirmed on {} new connection(s): {}", news.len(), list(news));
    v.evidence.insert("confirmed".into(), json!(true));
    v
}

fn unconfirmed(mut v: Verdict, why: &str) -> Verdict {
    v.message = format!("UNCONFIRMED (not a verdict): {}; {why}", v.message);
    v.evidence.insert("unconfirmed".into(), json!(true));
    v
}

/// The pair is slow on its first connection and not on a new one.
fn slow_path(ranks: &[RankInfo], link: &Verdict, first: f64, news: &[f64]) -> Verdict {
    let (f, t) = (link.from_rank.unwrap_or(0), link.to_rank.unwrap_or(0));
    let info = |r: Rank| ranks.iter().find(|i| i.rank == r);
    let host = |r: Rank| info(r).map_or_else(|| format!("rank {}'s host", shown(ranks, r)), |i| i.host.clone());
    let label = |r: Rank| match info(r).and_then(|i| i.device.clone()) {
        Some(d) => format!("rank {} ({}, {d})", shown(ranks, r), host(r)),
        None => format!("rank {} ({})", shown(ranks, r), host(r)),
    };
    let mut evidence: BTreeMap<String, Value> = link.evidence.clone();
    evidence.remove("threshold_gbs");
    evidence.insert("first_connection_gbs".into(), json!(crate::text::round3(first)));
    let message = format!(
        "SLOW PATH {} -> {}: flows from {} to {} are slow on some paths and not others: {} on the first \
         connection, {} on new ones (ECMP or uplink congestion, a switch-side problem; not the cable)",
        label(f),
        label(t),
        host(f),
        host(t),
        fmt_gbs(first),
        list(news)
    );
    let dev = |r: Rank| info(r).and_then(|i| i.netdev()).map(str::to_string);
    let qos = match dev(f) {
        Some(d) => format!("`fabprobe qos --ifname {d}` on {} (pauses received, ECN marks)", host(f)),
        None => format!("fabprobe qos on {} (pauses received, ECN marks)", host(f)),
    };
    let next = format!(
        "on the switches between {} and {}: the ECMP group's and uplinks' utilization and drop, PFC and ECN \
         counters, and the hash's balance; {qos}; scan again to see whether other flows hit the same path",
        host(f),
        host(t)
    );
    Verdict {
        rail: link.rail.clone(),
        kind: VerdictKind::SlowPath,
        from_rank: Some(f),
        to_rank: Some(t),
        from_host: link.from_host.clone(),
        to_host: link.to_host.clone(),
        evidence,
        message,
        next: Some(next),
    }
}

fn median(v: &[f64]) -> f64 {
    crate::text::median(v).unwrap_or(f64::INFINITY)
}

fn list(v: &[f64]) -> String {
    v.iter().map(|&g| fmt_gbs(g)).collect::<Vec<_>>().join(", ")
}

