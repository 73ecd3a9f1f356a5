//! What a rank learns of its own data port before it joins, through the host: the switch
//! port at the other end (lldpd's table, or an LLDP frame heard on it) and the most the port
//! could run at (ethtool's link modes, the NIC's PCIe link). The I/O, bounded in time; the
//! parsers are pure, in the diagnosis room (`diagnosis::neighbor`, `diagnosis::portmax`).

use std::time::Duration;

use crate::host::command::run_bounded;
use crate::host::{Host, Reply};
use crate::ring::diagnosis::neighbor::{from_frame, from_lldpcli};
use crate::ring::diagnosis::portmax::{parse_ethtool, pcie_link};
use crate::ring::model::{Neighbor, PortMax};
use crate::sysfs::{lldp, pci};

/// How long lldpcli may take to answer (it asks a local daemon over a Unix socket).
pub(crate) const LLDPCLI_DEADLINE: Duration = Duration::from_secs(2);

/// What a rank learned about its switch port, and how (for `-v`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Learned {
    pub neighbor: Option<Neighbor>,
    /// `from lldpd's table`, `no LLDP frame within 5 s`, `lldpcli is not installed`...
    pub how: String,
}

/// The neighbour of `ifname`: lldpd's table first (no waiting), then, when `wait` is not
/// zero, the first LLDP frame heard on it within `wait` (needs CAP_NET_RAW).
pub(crate) fn learn_neighbor(host: &Host, ifname: &str, wait: Duration) -> Learned {
    let table = match run_lldpcli(ifname) {
        Ok(text) => match from_lldpcli(&text, ifname) {
            Some(n) => {
                return Learned {
                    neighbor: Some(n),
                    how: "from lldpd's table (lldpcli)".into(),
                };
            }
            None => "lldpd's table has no neighbour on it".to_string(),
        },
        Err(e) => e,
    };
    if wait.is_zero() {
        return Learned {
            neighbor: None,
            how: format!("{table}; not listening for LLDP (--lldp-wait 0)"),
        };
    }
    let heard = match host.lldp_frames(ifname, wait) {
        Reply::Ok(frames) => frames
            .iter()
            .find_map(|f| lldp::parse_frame(f).ok().and_then(|d| from_frame(&d))),
        Reply::Error(e) => {
            return Learned {
                neighbor: None,
                how: format!("{table}; cannot listen for LLDP: {e} (needs CAP_NET_RAW)"),
            };
        }
        Reply::NotCaptured => None,
    };
    match heard {
        Some(n) => Learned {
            neighbor: Some(n),
            how: "from an LLDP frame heard on it".into(),
        },
        None => Learned {
            neighbor: None,
            how: format!(
                "{table}; no LLDP frame naming a switch port within {:.1} s",
                wait.as_secs_f64()
            ),
        },
    }
}

/// `lldpcli -f json0 show neighbors ports IF`, within [`LLDPCLI_DEADLINE`].
fn run_lldpcli(ifname: &str) -> Result<String, String> {
    run_bounded(
        "lldpcli",
        &["-f", "json0", "show", "neighbors", "ports", ifname],
        LLDPCLI_DEADLINE,
    )
    .map_err(|e| e.replace("lldpcli failed", "lldpcli failed (is lldpd running?)"))
}

/// How long `ethtool IF` may take (it asks the driver, which can sleep on firmware).
pub(crate) const ETHTOOL_DEADLINE: Duration = Duration::from_secs(2);

/// What the port could run at, and how it was learned (for `-v`). None: nothing known.
pub(crate) fn learn_port_max(host: &Host, netdev: &str) -> (Option<PortMax>, String) {
    let (mode, how) = match run_bounded("ethtool", &[netdev], ETHTOOL_DEADLINE) {
        Ok(text) => match parse_ethtool(&text) {
            Some((mbps, m)) => (
                Some((mbps, m.clone())),
                format!("ethtool: {m} advertised by both ends"),
            ),
            None => (
                None,
                "ethtool reports no link mode both ends advertise".to_string(),
            ),
        },
        Err(e) => (None, e),
    };
    let pcie = host
        .realpath(format!("/sys/class/net/{netdev}/device"))
        .ok()
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(pci::is_bdf))
        .and_then(|p| pcie_link(&pci::read_link(host, &p.to_string_lossy())));
    let how = match &pcie {
        Some(p) => format!("{how}; PCIe {} of {}", p.now(), p.max()),
        None => format!("{how}; no PCIe link figures"),
    };
    let max = PortMax {
        rate_mbps: mode.as_ref().map(|(mbps, _)| *mbps),
        rate_mode: mode.map(|(_, m)| m),
        pcie,
    }
    .checked();
    (max, how)
}
