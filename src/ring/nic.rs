//! What the ring needs to know about this rank's data NIC, through [`Host`]: its port rate
//! (the scan judges links against it) and the port counters that moved during the run on
//! it (evidence for verdicts that name it). RDMA ports come from the `links` probe; a plain
//! interface's rate from `/sys/class/net/<if>/speed`.

use serde::Serialize;

use crate::host::Host;
use crate::probe::links::{self, LinksReport, SampleInfo};
use crate::sysfs::infiniband as ib;
use crate::sysfs::net;

/// The port rate of `ifname` in 10^9 bytes/s and where it came from: the RDMA port whose
/// netdev it is (`rdma mlx5_0 port 1`), else the interface's ethtool speed (`sysfs speed`).
pub fn line_rate(host: &Host, ifname: &str) -> Option<(f64, String)> {
    for dev in ib::list_devices(host).unwrap_or_default() {
        let attrs = ib::read_device(host, &dev);
        let ports = ib::list_ports(host, &dev);
        for &p in &ports {
            let netdev = ib::port_netdev(host, &dev, p, ports.len(), &attrs.pci_netdevs);
            let on_gids = ib::read_gid_table(host, &dev, p)
                .iter()
                .any(|g| g.ndev.value().map(str::trim) == Some(ifname));
            if netdev.as_deref() == Some(ifname) || on_gids {
                if let Some(r) = ib::read_port(host, &dev, p).rate.filter(|r| r.gbps > 0.0) {
                    return Some((r.gbps / 8.0, format!("rdma {dev} port {p}")));
                }
            }
        }
    }
    net::read_speed_gbs(host, ifname).map(|g| (g, format!("/sys/class/net/{ifname}/speed")))
}

/// One port counter that moved during the run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CounterMove {
    pub rank: u32,
    pub host: String,
    pub device: String,
    pub port: u32,
    pub netdev: Option<String>,
    pub counter: String,
    /// At least this much (exact unless the counter saturated or was cleared).
    pub delta: u64,
}

/// Counters worth showing as evidence: errors, drops, retransmissions, timeouts, pauses,
/// congestion notifications; not the data and packet counts that always move.
pub fn is_evidence(name: &str) -> bool {
    const MARKS: &[&str] = &[
        "err",
        "discard",
        "drop",
        "retr",
        "timeout",
        "pause",
        "cnp",
        "ecn",
        "downed",
        "recovery",
        "seq",
        "rnr",
        "out_of",
        "congest",
        "xmit_wait",
        "symbol",
    ];
    let n = name.to_ascii_lowercase();
    MARKS.iter().any(|m| n.contains(m))
}

/// The evidence counters that moved between `before` and `after` on the RDMA ports whose
/// netdev is `ifname` (every RDMA port when `ifname` is None). Pure.
pub fn moved(
    before: &LinksReport,
    after: &LinksReport,
    ifname: Option<&str>,
    rank: u32,
    host: &str,
) -> Vec<CounterMove> {
    let mut a = after.clone();
    links::apply_deltas(
        &mut a,
        before,
        SampleInfo {
            kind: "interval".into(),
            baseline: "live".into(),
            interval_s: None,
        },
    );
    let mut out = Vec::new();
    for d in &a.devices {
        for p in &d.ports {
            let ours =
                ifname.is_none_or(|i| p.netdev.as_deref() == Some(i) || p.gid_netdevs.iter().any(|g| g == i));
            if !ours {
                continue;
            }
            for c in &p.counters {
                let Some(delta) = c.delta.as_ref().map(|d| d.lower_bound()).filter(|&d| d > 0) else {
                    continue;
                };
                if is_evidence(&c.name) {
                    out.push(CounterMove {
                        rank,
                        host: host.to_string(),
                        device: d.name.clone(),
                        port: p.port,
                        netdev: p.netdev.clone(),
                        counter: c.name.clone(),
                        delta,
                    });
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_names() {
        for n in [
            "symbol_error",
            "port_rcv_errors",
            "local_ack_timeout_err",
            "packet_seq_err",
            "np_cnp_sent",
            "rx_pause_ctrl_phy",
            "port_xmit_wait",
            "link_downed",
        ] {
            assert!(is_evidence(n), "{n}");
        }
        for n in ["port_xmit_data", "port_rcv_packets", "unicast_xmit_packets"] {
            assert!(!is_evidence(n), "{n}");
        }
    }

    #[test]
    fn moved_counters_between_two_fixture_snapshots() {
        let a = links::probe(&Host::snapshot("fixtures/ib-degraded").unwrap());
        let b = links::probe(&Host::snapshot("fixtures/ib-degraded-later").unwrap());
        let m = moved(&a, &b, None, 3, "node-d");
        let of = |dev: &str, name: &str| {
            m.iter()
                .find(|c| c.device == dev && c.counter == name)
                .map(|c| c.delta)
        };
        // The fixture's degraded port: errors and a flap between the two captures.
        assert_eq!(of("mlx5_2", "symbol_error"), Some(4699));
        assert_eq!(of("mlx5_2", "link_downed"), Some(2));
        assert_eq!(of("mlx5_2", "port_rcv_errors"), Some(57));
        assert_eq!(of("mlx5_2", "port_xmit_data"), None);
        // Only evidence counters, each with its device, port and a positive change.
        for c in &m {
            assert!(is_evidence(&c.counter) && c.delta > 0, "{c:?}");
            assert_eq!((c.rank, c.host.as_str()), (3, "node-d"));
        }
        // Nothing moved between a snapshot and itself.
        assert!(moved(&a, &a, None, 3, "node-d").is_empty());
    }

    #[test]
    fn no_rdma_no_rate_no_counters() {
        // This machine's own /sys: no RDMA devices, and `lo` has no link speed.
        let h = Host::live();
        assert_eq!(line_rate(&h, "lo"), None);
        let r = links::probe(&h);
        assert!(moved(&r, &r, Some("lo"), 0, "x").is_empty());
    }
}
