//! Port rates judged against the fabric, not against the port's own claim: pure, no I/O.
//!
//! A port that trained down (1X instead of 4X, 100 instead of 400 Gb/s) reports its lower
//! *active* rate, and a link at that rate looks "fine for its rate". So a rank's expected
//! rate is the rate most of its peers on the ring (one rail) run at, or the fastest link mode
//! its port and the switch port both advertise where its hello says it (so a rail that
//! trained down alike is still named); a rank below it, or whose NIC's PCIe link runs below
//! its maximum, is a [`VerdictKind::PortDowntrained`] verdict whether or not the ring is
//! slow, and the link scan judges every link against the expected rate, never the
//! downtrained port's own.
//!
//! API: [`expected_rates`]`(&ranks, &rates) -> {rank: gbs}`; [`downtrained`]`(&ranks, &rates)`.

use std::collections::BTreeMap;

use serde_json::json;

use crate::ring::model::{PcieLink, Rank, RankInfo, Verdict, VerdictKind, shown};

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

/// The fastest link mode a rank's port and its partner both advertise (10^9 bytes/s and
/// the mode), where its hello said it.
fn port_max_rate(ranks: &[RankInfo], r: Rank) -> Option<(f64, Option<String>)> {
    let m = ranks.iter().find(|i| i.rank == r)?.port_max.as_ref()?;
    Some((m.rate_gbs()?, m.rate_mode.clone()))
}

/// Each rank's expected rate: the highest of its own, its peers' majority rate and the
/// fastest mode its port and the link partner both advertise. A rank with no rate of its
/// own stays unknown (nothing was read for it).
pub(crate) fn expected_rates(ranks: &[RankInfo], rates: &BTreeMap<Rank, f64>) -> BTreeMap<Rank, f64> {
    rates
        .iter()
        .filter(|(_, g)| g.is_finite() && **g > 0.0)
        .map(|(&r, &own)| {
            let peers = peers_majority(rates, r).map_or(own, |(p, _, _)| p);
            let max = port_max_rate(ranks, r).map_or(own, |(m, _)| m);
            (r, own.max(peers).max(max))
        })
        .collect()
}

/// `400 Gb/s`, `100 Mb/s`: a port rate as ethtool and ibstat say it (10^9 bytes/s in).
pub(crate) fn fmt_port_rate(gbs: f64) -> String {
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

/// Why a rank's port is downtrained: below its peers' majority rate, below the fastest mode
/// both ends advertise, its NIC's PCIe link below its maximum (any of them).
struct Why {
    own: Option<f64>,
    /// (rate, peers at it, peers with a rate).
    peers: Option<(f64, usize, usize)>,
    max: Option<(f64, Option<String>)>,
    pcie: Option<PcieLink>,
}

impl Why {
    fn of(ranks: &[RankInfo], rates: &BTreeMap<Rank, f64>, r: Rank) -> Option<Why> {
        let own = rates.get(&r).copied().filter(|g| g.is_finite() && *g > 0.0);
        let below = |e: f64| own.is_some_and(|o| o < (1.0 - SAME) * e);
        let w = Why {
            own,
            peers: own.and_then(|_| peers_majority(rates, r)).filter(|p| below(p.0)),
            max: port_max_rate(ranks, r).filter(|m| below(m.0)),
            pcie: ranks
                .iter()
                .find(|i| i.rank == r)
                .and_then(|i| i.port_max.as_ref()?.pcie)
                .filter(PcieLink::degraded),
        };
        (w.peers.is_some() || w.max.is_some() || w.pcie.is_some()).then_some(w)
    }

    /// The rate the links are judged against, where the port's rate is the fault.
    fn expected(&self) -> Option<f64> {
        match (self.peers.map(|p| p.0), self.max.as_ref().map(|m| m.0)) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }
}

/// A `port_downtrained` verdict for every rank whose active rate is below its peers'
/// majority rate or the fastest mode both ends advertise (by more than [`SAME`]), or whose
/// NIC's PCIe link runs below its maximum width or speed.
pub(crate) fn downtrained(ranks: &[RankInfo], rates: &BTreeMap<Rank, f64>) -> Vec<Verdict> {
    let mut all: Vec<Rank> = rates.keys().copied().collect();
    all.extend(ranks.iter().filter(|i| i.port_max.is_some()).map(|i| i.rank));
    all.sort_unstable();
    all.dedup();
    all.into_iter()
        .filter_map(|r| Some(verdict(ranks, r, Why::of(ranks, rates, r)?)))
        .collect()
}

/// The message's clauses: the rate and what it is below, then the PCIe link.
fn clauses(w: &Why) -> Vec<String> {
    let mut out = Vec::new();
    if let (Some(own), Some(expected)) = (w.own, w.expected()) {
        let mut below = Vec::new();
        if let Some((p, agree, peers)) = w.peers {
            below.push(format!(
                "{agree} of its {peers} peers on this ring run at {}",
                fmt_port_rate(p)
            ));
        }
        if let Some((m, mode)) = &w.max {
            let mode = mode.as_deref().map(|m| format!(" ({m})")).unwrap_or_default();
            below.push(format!(
                "though its port and the switch port both advertise {}{mode}",
                fmt_port_rate(*m)
            ));
        }
        out.push(format!(
            "its port's active rate is {}, {}; its links are judged against {}",
            fmt_port_rate(own),
            below.join(", and "),
            fmt_port_rate(expected)
        ));
    }
    if let Some(p) = w.pcie {
        out.push(format!(
            "its NIC's PCIe link runs at {}, below the {} it supports (a narrower or slower PCIe link caps \
             what the NIC moves, whatever the port's rate)",
            p.now(),
            p.max()
        ));
    }
    out
}

fn verdict(ranks: &[RankInfo], r: Rank, w: Why) -> Verdict {
    let info = ranks.iter().find(|i| i.rank == r);
    let host = info.map_or_else(|| format!("rank {}'s host", shown(ranks, r)), |i| i.host.clone());
    let device = info.and_then(|i| i.device.clone());
    let netdev = info.and_then(|i| i.netdev()).map(str::to_string);
    let label = match &device {
        Some(d) => format!("rank {} ({host}, {d})", shown(ranks, r)),
        None => format!("rank {} ({host})", shown(ranks, r)),
    };
    let mut evidence = BTreeMap::new();
    if let (Some(own), Some(expected)) = (w.own, w.expected()) {
        evidence.insert("active_rate_gbs".into(), json!(crate::text::round3(own)));
        evidence.insert("expected_rate_gbs".into(), json!(crate::text::round3(expected)));
    }
    if let Some((_, agree, peers)) = w.peers {
        evidence.insert("peers_at_expected".into(), json!(agree));
        evidence.insert("peers_with_rate".into(), json!(peers));
    }
    if let Some((m, mode)) = &w.max {
        evidence.insert("advertised_rate_gbs".into(), json!(crate::text::round3(*m)));
        evidence.insert("advertised_mode".into(), json!(mode));
    }
    if let Some(p) = w.pcie {
        evidence.insert("pcie_link".into(), json!(p.now()));
        evidence.insert("pcie_max".into(), json!(p.max()));
    }
    let cause: Vec<&str> = [(w.expected().is_some(), "port_rate"), (w.pcie.is_some(), "pcie")]
        .into_iter()
        .filter_map(|(on, c)| on.then_some(c))
        .collect();
    evidence.insert("cause".into(), json!(cause));
    if let Some(d) = &device {
        evidence.insert("device".into(), json!(d));
    }
    if let Some(n) = &netdev {
        evidence.insert("netdev".into(), json!(n));
    }
    let message = format!("PORT DOWNTRAINED {label}: {}", clauses(&w).join("; "));
    Verdict {
        rail: None,
        kind: VerdictKind::PortDowntrained,
        from_rank: Some(r),
        to_rank: None,
        from_host: info.map(|i| i.host.clone()),
        to_host: None,
        evidence,
        message,
        next: Some(next_step(&host, netdev.as_deref(), &w)),
    }
}

/// What to run and do: the port's rate (ethtool, links), the PCIe link (lspci), then drain.
fn next_step(host: &str, netdev: Option<&str>, w: &Why) -> String {
    let mut steps = Vec::new();
    if let Some(e) = w.expected() {
        steps.push(match netdev {
            Some(n) => format!(
                "`ethtool {n}` (Speed, Lanes, supported link modes), `fabprobe links` (the RDMA port's rate \
                 and width, PCIe link); reseat or replace the cable or transceiver, and drain {host} until {n} \
                 runs at {}",
                fmt_port_rate(e)
            ),
            None => format!(
                "`fabprobe links` (the port's rate and width, PCIe link) and ibstat; reseat or replace the \
                 cable or transceiver, and drain {host} until it runs at {}",
                fmt_port_rate(e)
            ),
        });
    }
    if let Some(p) = w.pcie {
        let lspci = match netdev {
            Some(n) => format!("`lspci -vv -s $(basename $(readlink -f /sys/class/net/{n}/device))`"),
            None => "`fabprobe links`".to_string(),
        };
        steps.push(format!(
            "{lspci} (LnkSta against LnkCap); reseat the NIC or check its slot and riser, and drain {host} \
             until its PCIe link runs at {}",
            p.max()
        ));
    }
    format!("on {host}: {}", steps.join("; then "))
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
        assert_eq!(
            (v.kind, v.from_rank, v.action()),
            (VerdictKind::PortDowntrained, Some(2), Action::Drain)
        );
        assert_eq!(
            v.message,
            "PORT DOWNTRAINED rank 2 (node-c, eth1): its port's active rate is 100 Mb/s, 5 of its 5 peers on \
             this ring run at 400 Mb/s; its links are judged against 400 Mb/s"
        );
        assert_eq!(v.evidence["active_rate_gbs"], json!(0.013));
        assert_eq!(v.evidence["expected_rate_gbs"], json!(0.05));
        assert_eq!(v.evidence["netdev"], json!("eth1"));
        assert!(
            v.next.as_deref().unwrap().contains("`ethtool eth1`"),
            "{:?}",
            v.next
        );
        let e = expected_rates(&ranks(6), &r);
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
        assert!(
            v[0].message
                .contains("active rate is 100 Gb/s, 7 of its 7 peers on this ring run at 400 Gb/s")
        );
        // One faster port among slower ones: not a fault, and its expectation is its own.
        let r = rates(&[12.5, 12.5, 25.0, 12.5]);
        assert!(downtrained(&ranks(4), &r).is_empty());
        assert_eq!(expected_rates(&ranks(4), &r)[&2], 25.0);
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
        assert!(!expected_rates(&ranks(4), &r).contains_key(&3));
    }

    fn at_max(mut ranks: Vec<RankInfo>, mbps: u64, pcie: Option<PcieLink>) -> Vec<RankInfo> {
        for i in &mut ranks {
            i.port_max = Some(crate::ring::model::PortMax {
                rate_mbps: Some(mbps),
                rate_mode: Some(format!("{mbps}baseCR4/Full")),
                pcie,
            });
        }
        ranks
    }

    /// Every port of the rail at 200 Gb/s though both ends advertise 400: no peer majority
    /// shows it, the advertised maximum does; each is named, and judged against 400.
    #[test]
    fn a_rail_trained_down_alike_is_named_by_what_both_ends_advertise() {
        let rs = at_max(ranks(4), 400_000, None);
        let r = rates(&[25.0; 4]);
        let v = downtrained(&rs, &r);
        assert_eq!(
            v.iter().map(|v| v.from_rank).collect::<Vec<_>>(),
            [Some(0), Some(1), Some(2), Some(3)]
        );
        assert_eq!(
            v[2].message,
            "PORT DOWNTRAINED rank 2 (node-c, eth1): its port's active rate is 200 Gb/s, though its port and the \
             switch port both advertise 400 Gb/s (400000baseCR4/Full); its links are judged against 400 Gb/s"
        );
        assert_eq!(v[2].evidence["cause"], json!(["port_rate"]));
        assert_eq!(v[2].evidence["advertised_rate_gbs"], json!(50.0));
        crate::ring::diagnosis::pastes::assert_next_pastes(&v[2]);
        assert_eq!(expected_rates(&rs, &r)[&2], 50.0);
        // Running at what both ends advertise: nothing. Advertised below the active rate
        // (a stale table): the active rate stands.
        assert!(downtrained(&at_max(ranks(4), 200_000, None), &r).is_empty());
        assert!(downtrained(&at_max(ranks(4), 100_000, None), &r).is_empty());
        assert_eq!(expected_rates(&at_max(ranks(4), 100_000, None), &r)[&2], 25.0);
        // Below both its peers and the advertised rate: one verdict saying both.
        let v = downtrained(
            &at_max(ranks(4), 400_000, None),
            &rates(&[50.0, 50.0, 12.5, 50.0]),
        );
        assert_eq!(v.len(), 1, "{v:#?}");
        assert!(
            v[0].message
                .contains("3 of its 3 peers on this ring run at 400 Gb/s, and though its port"),
            "{}",
            v[0].message
        );
    }

    /// A NIC whose PCIe link trained to x8 of x16 is named for it, port rate fine or unknown;
    /// a full-width link is not.
    #[test]
    fn a_pcie_link_below_its_maximum_is_the_cause_named() {
        let x8 = PcieLink {
            speed_mts: 32_000,
            width: 8,
            max_speed_mts: 32_000,
            max_width: 16,
        };
        let mut rs = ranks(4);
        rs[1].port_max = Some(crate::ring::model::PortMax {
            rate_mbps: None,
            rate_mode: None,
            pcie: Some(x8),
        });
        let v = downtrained(&rs, &rates(&[50.0; 4]));
        assert_eq!(v.len(), 1, "{v:#?}");
        assert_eq!(v[0].from_rank, Some(1));
        assert_eq!(
            v[0].message,
            "PORT DOWNTRAINED rank 1 (node-b, eth1): its NIC's PCIe link runs at 32 GT/s x8, below the 32 GT/s \
             x16 it supports (a narrower or slower PCIe link caps what the NIC moves, whatever the port's rate)"
        );
        assert_eq!(v[0].evidence["cause"], json!(["pcie"]));
        assert_eq!(
            (&v[0].evidence["pcie_link"], &v[0].evidence["pcie_max"]),
            (&json!("32 GT/s x8"), &json!("32 GT/s x16"))
        );
        assert!(!v[0].evidence.contains_key("expected_rate_gbs"));
        let cmds = crate::ring::diagnosis::pastes::assert_next_pastes(&v[0]);
        assert_eq!(
            cmds,
            ["lspci -vv -s $(basename $(readlink -f /sys/class/net/eth1/device))"]
        );
        // No rate read at all: the PCIe link is still judged.
        assert_eq!(downtrained(&rs, &BTreeMap::new()).len(), 1);
        let full = PcieLink { width: 16, ..x8 };
        rs[1].port_max.as_mut().unwrap().pcie = Some(full);
        assert!(downtrained(&rs, &rates(&[50.0; 4])).is_empty());
    }

    /// A hello's figures out of range read as unknown.
    #[test]
    fn port_max_from_a_hello_is_checked() {
        let base = json!({"rank": 1, "host": "node-b", "address": "a", "device": "eth1", "transport": "tcp", "pid": null});
        let with = |pm: serde_json::Value| {
            let mut v = base.clone();
            v["port_max"] = pm;
            serde_json::from_value::<RankInfo>(v).unwrap().port_max
        };
        let ok = with(json!({"rate_mbps": 400000, "rate_mode": "400000baseCR4/Full",
            "pcie": {"speed_mts": 32000, "width": 8, "max_speed_mts": 32000, "max_width": 16}}));
        assert_eq!(ok.as_ref().and_then(|p| p.rate_gbs()), Some(50.0));
        for bad in [
            json!({"rate_mbps": 0, "rate_mode": null, "pcie": null}),
            json!({"rate_mbps": null, "rate_mode": null, "pcie": {"speed_mts": 1, "width": 8, "max_speed_mts": 32000, "max_width": 99}}),
            json!({"rate_mbps": -5}),
            json!("fast"),
        ] {
            assert_eq!(with(bad.clone()), None, "{bad}");
        }
        let m = with(json!({"rate_mbps": 400000, "rate_mode": "\u{1b}[2J", "pcie": null})).unwrap();
        assert_eq!(m.rate_mode, None);
    }
}
