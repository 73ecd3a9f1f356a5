//! Port rates judged against the fabric, not against the port's own claim: pure, no I/O.
//!
//! A port that trained down (1X instead of 4X, 100 instead of 400 Gb/s) reports its lower
//! *active* rate, and a link at that rate looks "fine for its rate". So a rank's expected
//! rate is the rate most of its peers on the ring (one rail) run at; a rank below it is a
//! [`VerdictKind::PortDowntrained`] verdict whether or not the ring is slow, and the link
//! scan judges every link against the expected rate, never the downtrained port's own.
//!
//! API: [`expected_rates`]`(&rates) -> {rank: gbs}`; [`downtrained`]`(&ranks, &rates)`.

use std::collections::BTreeMap;

use serde_json::json;

use crate::ring::model::{Rank, RankInfo, Verdict, VerdictKind, shown};

/// Two rates this close (relative) are the same rate: sysfs speeds are exact, and an RDMA
/// port's `rate` is a whole number of Gb/s.
const SAME: f64 = 0.02;

/// The rate most of the other ranks report, when they are more than half of all the ranks
/// that report one (this one included: two ports at 100 beside two at 200 say nothing
/// about which pair trained down); None otherwise (nothing to judge against).
fn peers_majority(rates: &BTreeMap<Rank, f64>, me: Rank) -> Option<(f64, usize, usize)> {
    let peers: Vec<f64> = rates
        .iter()
        .filter(|&(&r, g)| r != me && g.is_finite() && *g > 0.0)
        .map(|(_, &g)| g)
        .collect();
    let agree = |x: f64| peers.iter().filter(|&&g| (g - x).abs() <= SAME * x).count();
    let (rate, count) = peers
        .iter()
        .map(|&g| (g, agree(g)))
        .max_by(|a, b| a.1.cmp(&b.1).then(a.0.total_cmp(&b.0)))?;
    (2 * count > peers.len() + 1).then_some((rate, count, peers.len()))
}

/// Each rank's expected rate: the higher of its own and its peers' majority rate. A rank
/// with no rate of its own stays unknown (nothing was read for it).
pub fn expected_rates(rates: &BTreeMap<Rank, f64>) -> BTreeMap<Rank, f64> {
    rates
        .iter()
        .filter(|(_, g)| g.is_finite() && **g > 0.0)
        .map(|(&r, &own)| {
            let peers = peers_majority(rates, r).map_or(own, |(p, _, _)| p);
            (r, own.max(peers))
        })
        .collect()
}

/// `400 Gb/s`, `100 Mb/s`: a port rate as ethtool and ibstat say it (10^9 bytes/s in).
pub fn fmt_port_rate(gbs: f64) -> String {
    let gbps = gbs * 8.0;
    if gbps >= 1.0 {
        format!("{} Gb/s", trim(gbps))
    } else {
        format!("{} Mb/s", trim(gbps * 1000.0))
    }
}

fn trim(x: f64) -> String {
    if (x - x.round()).abs() < 0.05 {
        format!("{:.0}", x.round())
    } else {
        format!("{x:.1}")
    }
}

/// A `port_downtrained` verdict for every rank whose active rate is below its peers'
/// majority rate (by more than [`SAME`]).
pub fn downtrained(ranks: &[RankInfo], rates: &BTreeMap<Rank, f64>) -> Vec<Verdict> {
    rates
        .iter()
        .filter_map(|(&r, &own)| {
            let (expected, agree, peers) = peers_majority(rates, r)?;
            (own < (1.0 - SAME) * expected).then(|| verdict(ranks, r, own, expected, agree, peers))
        })
        .collect()
}

fn verdict(ranks: &[RankInfo], r: Rank, own: f64, expected: f64, agree: usize, peers: usize) -> Verdict {
    let info = ranks.iter().find(|i| i.rank == r);
    let host = info.map_or_else(|| format!("rank {}'s host", shown(ranks, r)), |i| i.host.clone());
    let device = info.and_then(|i| i.device.clone());
    let netdev = info.and_then(|i| i.netdev()).map(str::to_string);
    let label = match &device {
        Some(d) => format!("rank {} ({host}, {d})", shown(ranks, r)),
        None => format!("rank {} ({host})", shown(ranks, r)),
    };
    let mut evidence = BTreeMap::new();
    evidence.insert("active_rate_gbs".into(), json!(round3(own)));
    evidence.insert("expected_rate_gbs".into(), json!(round3(expected)));
    evidence.insert("peers_at_expected".into(), json!(agree));
    evidence.insert("peers_with_rate".into(), json!(peers));
    if let Some(d) = &device {
        evidence.insert("device".into(), json!(d));
    }
    if let Some(n) = &netdev {
        evidence.insert("netdev".into(), json!(n));
    }
    let message = format!(
        "PORT DOWNTRAINED {label}: its port's active rate is {}, {agree} of its {peers} peers on this ring \
         run at {}; its links are judged against {}",
        fmt_port_rate(own),
        fmt_port_rate(expected),
        fmt_port_rate(expected)
    );
    let next = match &netdev {
        Some(n) => format!(
            "on {host}: `ethtool {n}` (Speed, Lanes, supported link modes), `fabprobe links` (the RDMA port's \
             rate and width, PCIe link); reseat or replace the cable or transceiver, and drain {host} until \
             {n} runs at {}",
            fmt_port_rate(expected)
        ),
        None => format!(
            "on {host}: `fabprobe links` (the port's rate and width, PCIe link) and ibstat; reseat or replace \
             the cable or transceiver, and drain {host} until it runs at {}",
            fmt_port_rate(expected)
        ),
    };
    Verdict {
        rail: None,
        kind: VerdictKind::PortDowntrained,
        from_rank: Some(r),
        to_rank: None,
        from_host: info.map(|i| i.host.clone()),
        to_host: None,
        evidence,
        message,
        next: Some(next),
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::diagnosis::localize::sim::ranks;
    use crate::ring::model::Action;

    fn rates(v: &[f64]) -> BTreeMap<Rank, f64> {
        v.iter().enumerate().map(|(i, &g)| (i as Rank, g)).collect()
    }

    /// The namespace lab's case: six ports at 400 Mb/s, rank 2's at 100 Mb/s.
    #[test]
    fn a_port_below_its_peers_majority_is_named_with_its_rates() {
        let r = rates(&[0.05, 0.05, 0.0125, 0.05, 0.05, 0.05]);
        let v = downtrained(&ranks(6), &r);
        assert_eq!(v.len(), 1, "{v:#?}");
        let v = &v[0];
        crate::ring::diagnosis::pastes::assert_next_pastes(v);
        assert_eq!((v.kind, v.from_rank, v.action()), (VerdictKind::PortDowntrained, Some(2), Action::Drain));
        assert_eq!(
            v.message,
            "PORT DOWNTRAINED rank 2 (node-c, eth1): its port's active rate is 100 Mb/s, 5 of its 5 peers on \
             this ring run at 400 Mb/s; its links are judged against 400 Mb/s"
        );
        assert_eq!(v.evidence["active_rate_gbs"], json!(0.013));
        assert_eq!(v.evidence["expected_rate_gbs"], json!(0.05));
        assert_eq!(v.evidence["netdev"], json!("eth1"));
        assert!(v.next.as_deref().unwrap().contains("`ethtool eth1`"), "{:?}", v.next);
        let e = expected_rates(&r);
        assert_eq!(e[&2], 0.05);
        assert_eq!(e[&0], 0.05);
    }

    /// 400 Gb/s ports beside one at 100 (1X of 4X): named; a faster port is never "expected"
    /// down to its peers; without a majority nothing is judged.
    #[test]
    fn majority_rules() {
        let hdr = 50.0;
        let v = downtrained(&ranks(8), &rates(&[hdr, hdr, hdr, 12.5, hdr, hdr, hdr, hdr]));
        assert_eq!(v.iter().map(|v| v.from_rank).collect::<Vec<_>>(), [Some(3)]);
        assert!(v[0].message.contains("active rate is 100 Gb/s, 7 of its 7 peers on this ring run at 400 Gb/s"));
        // One faster port among slower ones: not a fault, and its expectation is its own.
        let r = rates(&[12.5, 12.5, 25.0, 12.5]);
        assert!(downtrained(&ranks(4), &r).is_empty());
        assert_eq!(expected_rates(&r)[&2], 25.0);
        // Two rates, two ranks each: no majority, no verdict.
        assert!(downtrained(&ranks(4), &rates(&[12.5, 12.5, 25.0, 25.0])).is_empty());
        // Equal within rounding: the same rate.
        assert!(downtrained(&ranks(3), &rates(&[12.5, 12.4, 12.5])).is_empty());
        // Two ranks: one against one is no majority. Three: two agree.
        assert!(downtrained(&ranks(2), &rates(&[12.5, 50.0])).is_empty());
        assert_eq!(downtrained(&ranks(3), &rates(&[12.5, 50.0, 50.0])).len(), 1);
        // Unknown or garbage rates judge nothing and are not judged.
        let mut r = rates(&[hdr, hdr, hdr]);
        r.insert(3, f64::NAN);
        assert!(downtrained(&ranks(4), &r).is_empty());
        assert!(!expected_rates(&r).contains_key(&3));
    }
}
