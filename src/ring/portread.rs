//! What a rank reads of its own data port during the run, through [`Host`]: its line rate
//! (the scan judges links against it), the port counters at the start and since (the
//! sampler), the port's byte counters (contention) and its carrier counters (a flap). What
//! the readings mean is decided in the diagnosis room (`diagnosis::evidence`, `traffic`,
//! `flap`), which reads no host.

use std::sync::Mutex;
#[cfg(test)]
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::host::{Attr, Host};
use crate::probe::links::{self, LinksReport};
use crate::ring::diagnosis::evidence::{cap, moved};
use crate::ring::diagnosis::flap::{self, Carrier};
use crate::ring::diagnosis::traffic::{ByteCount, PortReading, parse_bytes};
use crate::ring::model::CounterMove;
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
            if (netdev.as_deref() == Some(ifname) || on_gids)
                && let Some(r) = ib::read_port(host, &dev, p).rate.filter(|r| r.gbps > 0.0)
            {
                return Some((r.gbps / 8.0, format!("rdma {dev} port {p}")));
            }
        }
    }
    net::read_speed_gbs(host, ifname).map(|g| (g, format!("/sys/class/net/{ifname}/speed")))
}

/// Where the sampler reads: this host, or successive fixture snapshots (tests).
enum Source {
    /// One live host for every sample: `Host::live()` reads host metadata and loads NVML,
    /// work a stuck report must not repeat (sysfs reads through it are never cached).
    Live(Box<std::sync::OnceLock<Host>>),
    #[cfg(test)]
    Hosts(Vec<Host>, AtomicUsize),
}

/// One rank's view of its data NIC's port counters: a sample at the start of the run, and
/// the evidence counters that moved since, on demand (end of the run, a stuck report).
/// The start finds the rank's ports once; later reads touch only their counter files, so
/// a stuck report is not held up by a sweep of every GID table and verbs provider.
pub(crate) struct Sampler {
    source: Source,
    ifname: Option<String>,
    before: Mutex<Option<LinksReport>>,
    /// The data netdev's carrier counters at the start (a port that flapped, [`flap`]).
    carrier: Mutex<Option<Carrier>>,
}

impl Sampler {
    /// This host's RDMA ports whose netdev is `ifname`, read through [`Host::live`].
    pub fn live(ifname: &str) -> Sampler {
        Sampler::new(Source::Live(Box::default()), Some(ifname))
    }

    /// Successive samples from `hosts` (the last one repeats): tests stand fixture snapshots
    /// in for the NIC's state before and after the run.
    #[cfg(test)]
    pub fn hosts(hosts: Vec<Host>, ifname: Option<&str>) -> Sampler {
        Sampler::new(Source::Hosts(hosts, AtomicUsize::new(0)), ifname)
    }

    fn new(source: Source, ifname: Option<&str>) -> Sampler {
        Sampler {
            source,
            ifname: ifname.map(String::from),
            before: Mutex::new(None),
            carrier: Mutex::new(None),
        }
    }

    fn with_host<R>(&self, f: impl FnOnce(&Host) -> R) -> Option<R> {
        match &self.source {
            Source::Live(h) => Some(f(h.get_or_init(Host::live))),
            #[cfg(test)]
            Source::Hosts(hosts, next) => {
                let i = next.fetch_add(1, Ordering::Relaxed);
                hosts.get(i).or(hosts.last()).map(f)
            }
        }
    }

    /// Take the baseline sample: this rank's ports only.
    pub fn start(&self) {
        let ifname = self.ifname.as_deref();
        let r = self.with_host(|h| (ours(links::probe_sysfs(h), ifname), ifname.map(|i| carrier(h, i))));
        let (ports, c) = r.map_or((None, None), |(p, c)| (Some(p), c));
        if let Ok(mut b) = self.before.lock() {
            *b = ports;
        }
        if let Ok(mut b) = self.carrier.lock() {
            *b = c;
        }
    }

    /// The evidence counters that moved since [`Sampler::start`] (none before it), capped.
    pub fn moved(&self, rank: u32, host: &str) -> Vec<CounterMove> {
        let Some(before) = self.before.lock().ok().and_then(|b| b.clone()) else {
            return Vec::new();
        };
        let ifname = self.ifname.as_deref();
        let Some((after, now)) =
            self.with_host(|h| (links::reread_counters(h, &before), ifname.map(|i| carrier(h, i))))
        else {
            return Vec::new();
        };
        let mut out = cap(moved(&before, &after, None, rank, host));
        let start = self.carrier.lock().ok().and_then(|c| *c);
        if let (Some(i), Some(a), Some(b)) = (ifname, start, now) {
            // Never capped away: a flap is a verdict of its own.
            out.extend(flap::moves(&a, &b, i, rank, host));
        }
        out
    }
}

impl Sampler {
    /// The data port's byte counters now, both ways (see [`port_bytes`]); fixture hosts are
    /// peeked, not advanced (their sequence is the run's start, end and stuck reports).
    pub fn bytes(&self) -> PortReading {
        let before = self.before.lock().ok().and_then(|b| b.clone());
        let read = |h: &Host| port_bytes(h, before.as_ref(), self.ifname.as_deref());
        match &self.source {
            Source::Live(h) => read(h.get_or_init(Host::live)),
            #[cfg(test)]
            Source::Hosts(hosts, next) => hosts
                .get(next.load(Ordering::Relaxed))
                .or(hosts.last())
                .map_or_else(|| PortReading::unknown("no host to read"), read),
        }
    }
}

/// Byte counters of the port `ifname` names, both ways: an RDMA port's `port_xmit_data` /
/// `port_rcv_data` (4-byte words: the probe's `value_bytes` is x4) where `ports` (this
/// rank's RDMA ports, [`Sampler::start`]) has them, since RDMA traffic bypasses the
/// netdev's counters; else `/sys/class/net/<if>/statistics/{tx,rx}_bytes`.
pub(crate) fn port_bytes(host: &Host, ports: Option<&LinksReport>, ifname: Option<&str>) -> PortReading {
    let rdma = ports.map(|p| links::reread_counters(host, p));
    let way = |rdma_name: &str, stat: &str| {
        rdma.as_ref()
            .and_then(|r| rdma_count(r, rdma_name))
            .unwrap_or_else(|| netdev_count(host, ifname, stat))
    };
    PortReading {
        tx: way("port_xmit_data", "tx_bytes"),
        rx: way("port_rcv_data", "rx_bytes"),
    }
}

/// The first port's data counter `name`, in bytes; None where no port has it.
fn rdma_count(r: &LinksReport, name: &str) -> Option<ByteCount> {
    let (d, p, c) = r
        .devices
        .iter()
        .flat_map(|d| d.ports.iter().map(move |p| (d, p)))
        .find_map(|(d, p)| p.counters.iter().find(|c| c.name == name).map(|c| (d, p, c)))?;
    let bytes = match (c.value_bytes, &c.unavailable) {
        _ if c.saturated => Err(format!("{name} saturated at its {}-bit maximum", c.width_bits)),
        (Some(b), _) => Ok(b),
        (None, why) => Err(why.clone().unwrap_or_else(|| "unreadable".into())),
    };
    Some(ByteCount {
        counter: format!("{} port {} {name}", d.name, p.port),
        bytes,
    })
}

/// `/sys/class/net/<ifname>/statistics/<stat>` in bytes, or why not.
fn netdev_count(host: &Host, ifname: Option<&str>, stat: &str) -> ByteCount {
    let Some(i) = ifname.filter(|i| !i.is_empty() && !i.contains('/')) else {
        return ByteCount {
            counter: stat.to_string(),
            bytes: Err("no data interface known".into()),
        };
    };
    let path = format!("/sys/class/net/{i}/statistics/{stat}");
    let bytes = match host.attr(&path) {
        Attr::Value(v) => parse_bytes(&v).ok_or_else(|| format!("unreadable value {v:?}")),
        Attr::Absent => Err("absent".into()),
        Attr::Failed(e) => Err(format!("read failed ({e})")),
    };
    ByteCount { counter: path, bytes }
}

/// The sample cut down to the ports whose netdev (or a GID's netdev) is `ifname`; all of
/// them when `ifname` is None. Pure.
fn ours(mut r: LinksReport, ifname: Option<&str>) -> LinksReport {
    if let Some(i) = ifname {
        for d in &mut r.devices {
            d.ports
                .retain(|p| p.netdev.as_deref() == Some(i) || p.gid_netdevs.iter().any(|g| g == i));
        }
        r.devices.retain(|d| !d.ports.is_empty());
    }
    r
}

/// `ifname`'s carrier counters now (`/sys/class/net/<if>/carrier_changes`, and from Linux
/// 4.16 `carrier_up_count` and `carrier_down_count`, each `"%u\n"`); None: absent or not a
/// number.
pub(crate) fn carrier(host: &Host, ifname: &str) -> Carrier {
    if ifname.is_empty() || ifname.contains('/') {
        return Carrier::default();
    }
    let read = |f: &str| {
        host.attr(format!("/sys/class/net/{ifname}/{f}"))
            .value()
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    Carrier {
        changes: read("carrier_changes"),
        up: read("carrier_up_count"),
        down: read("carrier_down_count"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sampler_reports_nothing_before_its_start() {
        let s = Sampler::hosts(
            vec![
                Host::snapshot("fixtures/ib-degraded").unwrap(),
                Host::snapshot("fixtures/ib-degraded-later").unwrap(),
            ],
            Some("ibp77s0"),
        );
        assert!(s.moved(0, "x").is_empty());
        s.start();
        let m = s.moved(0, "x");
        assert!(!m.is_empty() && m.iter().all(|c| c.device == "mlx5_2"), "{m:?}");
        // Other netdevs' ports are not this rank's NIC.
        let other = Sampler::hosts(
            vec![
                Host::snapshot("fixtures/ib-degraded").unwrap(),
                Host::snapshot("fixtures/ib-degraded-later").unwrap(),
            ],
            Some("eth9"),
        );
        other.start();
        assert!(other.moved(0, "x").is_empty());
    }

    #[test]
    fn no_rdma_no_rate_no_counters() {
        // This machine's own /sys: no RDMA devices, and `lo` has no link speed.
        let h = Host::live();
        assert_eq!(line_rate(&h, "lo"), None);
    }
}
