//! The job's report as rank 0 assembles it (`data` of `fabprobe.ring`): the nccl-tests-style
//! rows, per-link figures, and the pure aggregation of every rank's results.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::ring::collective::allreduce;
use crate::ring::coordinator::Event;
use crate::ring::diagnosis::driver::ScanReport;
use crate::ring::diagnosis::neighbor;
use crate::ring::launcher::{Identity, Source};
use crate::ring::model::{Action, CounterMove, Rank, RankInfo, Verdict, VerdictKind, VerdictRail};
use crate::ring::options::Options;
use crate::ring::wire::{self, RankResults, RowResult};

/// One row of the nccl-tests-style table (`data.results[]`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ResultRow {
    pub size_bytes: u64,
    pub count: u64,
    #[serde(rename = "type")]
    pub dtype: &'static str,
    pub redop: &'static str,
    pub root: i32,
    pub time_us: f64,
    pub algbw_gbs: f64,
    pub busbw_gbs: f64,
    /// Mismatching elements summed over ranks; null with `-c 0`.
    pub wrong: Option<u64>,
    /// The in-place half (the fields above are the out-of-place half); null when a rank
    /// did not report one.
    pub in_place: Option<InPlaceRow>,
}

/// The in-place half of a row (`data.results[].in_place`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct InPlaceRow {
    pub time_us: f64,
    pub algbw_gbs: f64,
    pub busbw_gbs: f64,
    pub wrong: Option<u64>,
}

/// One ring hop as measured at its receiver (`data.links[]`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LinkRow {
    pub channel_count: u32,
    pub from_rank: Rank,
    pub to_rank: Rank,
    pub from_host: String,
    pub to_host: String,
    pub from_device: Option<String>,
    pub to_device: Option<String>,
    /// The message size the hop was measured at (the largest of the sweep).
    pub size_bytes: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub gbs: f64,
    /// With `--rails`: the rail this hop belongs to (null in a single-rail run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rail: Option<u32>,
}

#[derive(Clone, Debug, Serialize)]
pub struct LauncherInfo {
    pub source: Source,
    pub coordinator: String,
    pub coordinator_source: String,
    pub token_source: String,
}

impl LauncherInfo {
    /// Where a rank's identity came from (never the token itself).
    pub fn of(id: &Identity) -> Self {
        LauncherInfo {
            source: id.source,
            coordinator: id.coordinator.clone(),
            coordinator_source: id.coordinator_source.clone(),
            token_source: id.token_source.clone(),
        }
    }
}

/// The job's report, assembled by rank 0 (`data` of `fabprobe.ring`).
#[derive(Clone, Debug, Serialize)]
pub struct RingReport {
    pub world: u32,
    pub transport: String,
    /// Why `--transport auto` ran over tcp though some rank offered rdma (who did not).
    pub transport_note: Option<String>,
    pub launcher: LauncherInfo,
    pub options: Options,
    pub ranks: Vec<RankInfo>,
    pub results: Vec<ResultRow>,
    pub avg_busbw_gbs: Option<f64>,
    pub links: Vec<LinkRow>,
    pub bootstrap_us: u64,
    pub events: Vec<Event>,
    /// The link scan, when it ran to its end.
    pub scan: Option<ScanReport>,
    /// What the watchdog and the scan concluded; empty on a healthy run.
    pub verdicts: Vec<Verdict>,
    /// Would-be verdicts of the sweep that a host starved of CPU could explain, in a run
    /// without a scan (with one they are the scan's `not_judged`): unknown, not verdicts.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_judged: Vec<Verdict>,
    /// Why the run ended early (partial results above), or null.
    pub error: Option<String>,
    /// RDMA port counters (errors, retransmissions, pauses, CNPs) that moved during the run
    /// on each rank's data NIC, as each rank reported them (at the end, or when stuck).
    pub port_counters: Vec<CounterMove>,
    /// With `--rails`: each rail's own ring (`data.rails[]`); empty in a single-rail run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rails: Vec<RailReport>,
}

/// One rail's ring in a `--rails` run (`data.rails[]`): its rows (the rail's own busbw; the
/// top-level rows sum the rails), its scan, and why it ended early.
#[derive(Clone, Debug, Serialize)]
pub struct RailReport {
    pub rail: u32,
    /// The nodes (job ranks) this rail's ring ran on, in ring order (its scan and every
    /// message name them so); every node unless one lacks the rail. For a rail not tested
    /// (`not_tested`): the nodes that have it.
    pub nodes: Vec<Rank>,
    pub transport: String,
    pub results: Vec<ResultRow>,
    pub avg_busbw_gbs: Option<f64>,
    pub scan: Option<ScanReport>,
    pub error: Option<String>,
    /// `--rails all`: why this rail ran no ring though some node has it (fewer than half
    /// the nodes do: not a rail of this job). Unknown, never a pass; no verdict either.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_tested: Option<String>,
}

impl RingReport {
    /// Mismatching elements over both halves of every row.
    pub(crate) fn wrong_total(&self) -> u64 {
        self.results
            .iter()
            .map(|r| {
                r.wrong
                    .unwrap_or(0)
                    .saturating_add(r.in_place.as_ref().and_then(|h| h.wrong).unwrap_or(0))
            })
            .fold(0, u64::saturating_add)
    }
    pub fn failed(&self) -> bool {
        self.error.is_some() || self.wrong_total() > 0 || !self.verdicts.is_empty()
    }

    /// A rail's ring of some of the nodes, numbered as the job's nodes once it is over:
    /// every rank field takes its [`RankInfo::node`] (the words say it already: the
    /// diagnosis wrote them so). The coordinator's arithmetic needed the ring's own ranks
    /// until here. A no-op where no rank has a node rank of its own.
    pub(crate) fn number_by_node(&mut self) {
        let map: BTreeMap<Rank, Rank> = self
            .ranks
            .iter()
            .filter_map(|i| Some((i.rank, i.node?)))
            .collect();
        let node = |r: Rank| map.get(&r).copied().unwrap_or(r);
        for i in &mut self.ranks {
            (i.rank, i.node) = (node(i.rank), None);
        }
        for l in &mut self.links {
            (l.from_rank, l.to_rank) = (node(l.from_rank), node(l.to_rank));
        }
        let verdicts = self.verdicts.iter_mut().chain(self.not_judged.iter_mut()).chain(
            self.scan
                .iter_mut()
                .flat_map(|s| s.not_judged.iter_mut().chain(s.unconfirmed.iter_mut()).chain(s.verdicts.iter_mut())),
        );
        for v in verdicts {
            (v.from_rank, v.to_rank) = (v.from_rank.map(node), v.to_rank.map(node));
        }
        for e in &mut self.events {
            if let Event::Joined { rank, .. } | Event::Replaced { rank, .. } = e {
                *rank = node(*rank);
            }
        }
        for c in &mut self.port_counters {
            c.rank = node(c.rank);
        }
        if let Some(s) = self.scan.as_mut() {
            for l in &mut s.links {
                (l.from_rank, l.to_rank) = (node(l.from_rank), node(l.to_rank));
            }
            s.line_rate_gbs = std::mem::take(&mut s.line_rate_gbs)
                .into_iter()
                .map(|(r, g)| (node(r), g))
                .collect();
        }
    }
}

/// Why the run used tcp though some rank offered rdma (only `--transport auto` mixes
/// offers): the ranks that did not offer it. None when every rank offered what was used.
pub(crate) fn transport_note(ranks: &[RankInfo], used: &str) -> Option<String> {
    if used != "tcp" || !ranks.iter().any(|i| i.transport == "rdma") {
        return None;
    }
    let without: Vec<String> = ranks
        .iter()
        .filter(|i| i.transport != "rdma")
        .map(|i| format!("rank {} ({})", i.shown(), i.host))
        .collect();
    Some(format!(
        "auto chose tcp: {} offer{} no usable RDMA port (its stderr with -v says why)",
        without.join(", "),
        if without.len() == 1 { "s" } else { "" }
    ))
}

/// Wrong-element counts from the ranks (None if one did not check), saturating: a peer's
/// count comes off the network, and a sum that wrapped could read as 0 wrong.
pub(crate) fn sum_wrong(counts: impl Iterator<Item = Option<u64>>) -> Option<u64> {
    let mut total = 0u64;
    for c in counts {
        total = total.saturating_add(c?);
    }
    Some(total)
}

/// Rows and links from every rank's results. Pure.
pub(crate) fn aggregate(
    world: u32,
    ranks: &[RankInfo],
    results: &[RankResults],
    channels: u32,
) -> (Vec<ResultRow>, Vec<LinkRow>) {
    let mut sizes: Vec<u64> = results
        .iter()
        .flat_map(|r| r.rows.iter().map(|row| row.size_bytes))
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    let rows = sizes
        .iter()
        .filter_map(|&size| {
            let per: Vec<&RowResult> = results
                .iter()
                .filter_map(|r| r.rows.iter().find(|x| x.size_bytes == size))
                .collect();
            // A size is complete only when every rank finished it.
            if per.len() as u32 != world {
                return None;
            }
            let time_us = per.iter().map(|r| r.time_us).sum::<f64>() / per.len() as f64;
            let algbw = algbw_gbs(size, time_us);
            let wrong = sum_wrong(per.iter().map(|r| r.wrong));
            let halves: Option<Vec<&wire::HalfResult>> = per.iter().map(|r| r.in_place.as_ref()).collect();
            let in_place = halves.map(|h| {
                let time_us = h.iter().map(|x| x.time_us).sum::<f64>() / h.len() as f64;
                let algbw = algbw_gbs(size, time_us);
                InPlaceRow {
                    time_us,
                    algbw_gbs: algbw,
                    busbw_gbs: allreduce::busbw(algbw, world),
                    wrong: sum_wrong(h.iter().map(|x| x.wrong)),
                }
            });
            Some(ResultRow {
                size_bytes: size,
                count: size / 4,
                dtype: "float",
                redop: "sum",
                root: -1,
                time_us,
                algbw_gbs: algbw,
                busbw_gbs: allreduce::busbw(algbw, world),
                wrong,
                in_place,
            })
        })
        .collect();
    let info = |r: Rank| ranks.iter().find(|i| i.rank == r);
    let mut links: Vec<LinkRow> = results
        .iter()
        .flat_map(|r| r.links.iter().map(move |s| (r.link_size_bytes, s)))
        .map(|(size, s)| LinkRow {
            channel_count: channels,
            from_rank: s.from_rank,
            to_rank: s.to_rank,
            from_host: info(s.from_rank).map(|i| i.host.clone()).unwrap_or_default(),
            to_host: info(s.to_rank).map(|i| i.host.clone()).unwrap_or_default(),
            from_device: info(s.from_rank).and_then(|i| i.device.clone()),
            to_device: info(s.to_rank).and_then(|i| i.device.clone()),
            size_bytes: size,
            bytes: s.bytes,
            seconds: s.seconds,
            gbs: s.gbs(),
            rail: None,
        })
        .collect();
    links.sort_by_key(|l| l.from_rank);
    (rows, links)
}

/// 10^9 bytes/s, as nccl-tests (0 for a zero time).
fn algbw_gbs(size: u64, time_us: f64) -> f64 {
    if time_us > 0.0 {
        size as f64 / time_us / 1e3
    } else {
        0.0
    }
}

/// Mean busbw over both halves of every row, as nccl-tests' `# Avg bus bandwidth`.
pub(crate) fn avg_busbw(rows: &[ResultRow]) -> Option<f64> {
    let all: Vec<f64> = rows
        .iter()
        .flat_map(|r| std::iter::once(r.busbw_gbs).chain(r.in_place.as_ref().map(|h| h.busbw_gbs)))
        .collect();
    (!all.is_empty()).then(|| all.iter().sum::<f64>() / all.len() as f64)
}

/// A node to take out of service (`data.drain[]`): one entry per host, with every verdict
/// that calls for it (a slow egress or ingress, a port down or downtrained, a missing rail).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct DrainItem {
    /// The node's hostname as its rank reported it; null where the verdict names none.
    pub host: Option<String>,
    pub ranks: Vec<Rank>,
    pub kinds: Vec<VerdictKind>,
    /// The first such verdict's message (what a drain reason field holds).
    pub reason: String,
    /// The switch ports at the node's end where LLDP named them
    /// (`node-c eth1 <-> leaf-03 Eth1/7`); absent when unknown.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub switch_ports: Vec<String>,
}

/// A link or path to file a ticket for (`data.ticket[]`): the cable or switch port between
/// two nodes, one entry per verdict (slow_link, slow_path, link_error, hang_link).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct TicketItem {
    pub kind: VerdictKind,
    pub from_rank: Option<Rank>,
    pub to_rank: Option<Rank>,
    pub from_host: Option<String>,
    pub to_host: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rail: Option<VerdictRail>,
    pub message: String,
    /// The switch port at each end where LLDP named it, from then to
    /// (`node-b mlx5_3 (eth3) <-> leaf-07 Eth1/12`); absent when neither is known.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub switch_ports: Vec<String>,
}

/// The drain list and the ticket list of `verdicts`, apart (verdicts whose action is
/// `investigate` are in neither). A node's verdict names it as `from` (egress, port) or,
/// for a slow ingress, as `to`.
pub(crate) fn action_lists(verdicts: &[Verdict]) -> (Vec<DrainItem>, Vec<TicketItem>) {
    let mut drain: Vec<DrainItem> = Vec::new();
    let mut ticket = Vec::new();
    for v in verdicts {
        match v.action() {
            Action::Drain => {
                let (host, rank) = match v.kind {
                    VerdictKind::SlowIngress => (v.to_host.clone(), v.to_rank),
                    _ => (v.from_host.clone().or(v.to_host.clone()), v.from_rank.or(v.to_rank)),
                };
                let at = drain.iter().position(|d| d.host.is_some() && d.host == host);
                let d = match at {
                    Some(i) => &mut drain[i],
                    None => {
                        drain.push(DrainItem {
                            host,
                            ranks: Vec::new(),
                            kinds: Vec::new(),
                            reason: v.message.clone(),
                            switch_ports: Vec::new(),
                        });
                        drain.last_mut().expect("just pushed")
                    }
                };
                if let Some(r) = rank.filter(|r| !d.ranks.contains(r)) {
                    d.ranks.push(r);
                }
                if !d.kinds.contains(&v.kind) {
                    d.kinds.push(v.kind);
                }
                for t in neighbor::texts(v) {
                    if !d.switch_ports.contains(&t) {
                        d.switch_ports.push(t);
                    }
                }
            }
            Action::Ticket => ticket.push(TicketItem {
                kind: v.kind,
                from_rank: v.from_rank,
                to_rank: v.to_rank,
                from_host: v.from_host.clone(),
                to_host: v.to_host.clone(),
                rail: v.rail.clone(),
                message: v.message.clone(),
                switch_ports: neighbor::texts(v),
            }),
            Action::Investigate => {}
        }
    }
    (drain, ticket)
}

// ---- what one rank's run ends with ----

/// Outcome kinds for the exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Failure {
    /// The cluster has a fault (a rank missing, a link dead, a hang, wrong results): exit 1.
    Fault,
    /// fabprobe itself could not run here (cannot bind, bad address): exit 2.
    CannotRun,
}

#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct RunError {
    pub kind: Failure,
    pub message: String,
}

/// What one rank's run produced.
pub struct RankOutcome {
    /// Rank 0 only.
    pub report: Option<RingReport>,
    /// The coordinator said the run failed (wrong results or a verdict).
    pub failed: bool,
    /// Not rank 0: why the coordinator failed the run, for this rank's stderr (its exit 1
    /// must not come without a reason).
    pub why: Option<String>,
}

#[cfg(test)]
mod action_tests {
    use super::*;

    fn v(kind: VerdictKind, from: Option<(Rank, &str)>, to: Option<(Rank, &str)>) -> Verdict {
        Verdict {
            from_host: from.map(|f| f.1.to_string()),
            to_host: to.map(|t| t.1.to_string()),
            message: format!("{kind:?}"),
            ..Verdict::bare(kind, from.map(|f| f.0), to.map(|t| t.0))
        }
    }

    /// A node named twice is one drain entry; a slow ingress drains the receiver; links and
    /// paths are tickets; an unconfirmed suspect and a lost rank are in neither list.
    #[test]
    fn drain_and_ticket_apart() {
        let mut unconfirmed = v(VerdictKind::SlowEgress, Some((1, "node-b")), None);
        unconfirmed.evidence.insert("unconfirmed".into(), serde_json::json!(true));
        let vs = [
            v(VerdictKind::PortDowntrained, Some((2, "node-c")), None),
            v(VerdictKind::SlowEgress, Some((2, "node-c")), None),
            v(VerdictKind::SlowIngress, None, Some((3, "node-d"))),
            v(VerdictKind::SlowLink, Some((0, "node-a")), Some((3, "node-d"))),
            v(VerdictKind::SlowPath, Some((1, "node-b")), Some((0, "node-a"))),
            v(VerdictKind::RankLost, Some((1, "node-b")), None),
            unconfirmed,
        ];
        let (drain, ticket) = action_lists(&vs);
        let d: Vec<(Option<&str>, &[Rank], &[VerdictKind])> =
            drain.iter().map(|d| (d.host.as_deref(), &d.ranks[..], &d.kinds[..])).collect();
        assert_eq!(
            d,
            [
                (Some("node-c"), &[2][..], &[VerdictKind::PortDowntrained, VerdictKind::SlowEgress][..]),
                (Some("node-d"), &[3][..], &[VerdictKind::SlowIngress][..]),
            ]
        );
        assert_eq!(drain[0].reason, "PortDowntrained");
        let t: Vec<(VerdictKind, Option<Rank>, Option<Rank>)> =
            ticket.iter().map(|t| (t.kind, t.from_rank, t.to_rank)).collect();
        assert_eq!(t, [(VerdictKind::SlowLink, Some(0), Some(3)), (VerdictKind::SlowPath, Some(1), Some(0))]);
        assert!(ticket.iter().all(|t| t.switch_ports.is_empty()) && drain.iter().all(|d| d.switch_ports.is_empty()));
    }

    /// Where LLDP named the switch port, the ticket quotes both ends and the drain entry its
    /// node's; in JSON only when known.
    #[test]
    fn tickets_and_drains_quote_the_switch_ports() {
        let mut ranks = crate::ring::diagnosis::localize::sim::ranks(4);
        for (r, port) in [(0, "Eth1/1"), (3, "Eth1/4")] {
            ranks[r].neighbor = Some(crate::ring::model::Neighbor {
                system_name: Some("leaf-07".into()),
                chassis_id: None,
                port_id: Some(port.into()),
                port_description: None,
                source: "lldpd".into(),
            });
        }
        let mut vs = [
            v(VerdictKind::SlowLink, Some((0, "node-a")), Some((3, "node-d"))),
            v(VerdictKind::SlowEgress, Some((3, "node-d")), None),
            v(VerdictKind::SlowLink, Some((1, "node-b")), Some((2, "node-c"))),
        ];
        neighbor::attach(&mut vs, &ranks);
        let (drain, ticket) = action_lists(&vs);
        assert_eq!(ticket[0].switch_ports, ["node-a eth1 <-> leaf-07 Eth1/1", "node-d eth1 <-> leaf-07 Eth1/4"]);
        assert_eq!(drain[0].switch_ports, ["node-d eth1 <-> leaf-07 Eth1/4"]);
        let j = serde_json::to_value(&ticket).unwrap();
        assert!(j[1].get("switch_ports").is_none(), "{j}");
    }
}

#[cfg(test)]
mod note_tests {
    use super::*;

    fn rank(r: Rank, transport: &str) -> RankInfo {
        RankInfo {
            neighbor: None,
            port_max: None,
            rails: Vec::new(),
            node: None,
            rank: r,
            host: format!("node-{r}"),
            address: String::new(),
            device: None,
            transport: transport.into(),
            pid: None,
            capabilities: vec![transport.into()],
        }
    }

    #[test]
    fn auto_says_who_had_no_rdma() {
        let mixed = [rank(0, "rdma"), rank(1, "tcp"), rank(2, "rdma")];
        assert_eq!(
            transport_note(&mixed, "tcp").as_deref(),
            Some("auto chose tcp: rank 1 (node-1) offers no usable RDMA port (its stderr with -v says why)")
        );
        // Every rank asked for tcp, or every rank ran rdma: nothing to explain.
        assert_eq!(transport_note(&[rank(0, "tcp"), rank(1, "tcp")], "tcp"), None);
        assert_eq!(transport_note(&[rank(0, "rdma"), rank(1, "rdma")], "rdma"), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_counts_saturate_instead_of_wrapping_to_zero() {
        assert_eq!(sum_wrong([Some(u64::MAX), Some(1)].into_iter()), Some(u64::MAX));
        assert_eq!(sum_wrong([Some(2), Some(3)].into_iter()), Some(5));
        assert_eq!(sum_wrong([Some(2), None].into_iter()), None);
        assert_eq!(sum_wrong(std::iter::empty()), Some(0));
    }
}
