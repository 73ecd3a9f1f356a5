//! `links`: RDMA port health (`ibstat` + `ibstatus` + `perfquery` in one report): state,
//! rate, LIDs, device identity, the HCA's PCIe link, and every counter with its width;
//! deltas between two samples (an interval, or a baseline snapshot) and the findings.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::finding::{Finding, Rule, Severity, judge_each};
use crate::host::Host;
use crate::probe::gids::{RdmaPresence, presence};
use crate::sysfs::infiniband::{
    self as ib, CounterDir, CounterRead, CounterSpec, Delta, DeviceAttrs, NumName, Overflow, Rate,
};

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LinksReport {
    pub rdma: RdmaPresence,
    pub devices: Vec<LinkDevice>,
    /// Present when counters carry deltas: where the first sample came from.
    pub sample: Option<SampleInfo>,
    /// What libibverbs says (live runs with the `rdma` feature only).
    pub verbs: Option<VerbsView>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SampleInfo {
    /// `interval` (two live reads) or `baseline` (a second snapshot).
    pub kind: String,
    /// `live` or the baseline snapshot's path.
    pub baseline: String,
    /// Seconds between the samples, when known (for a baseline: the snapshots'
    /// `captured_at` difference).
    pub interval_s: Option<f64>,
    /// Why the two samples' counters cannot be compared (a reboot between them): then no
    /// delta is taken and the counters are read as one sample, never as a wrap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counters_reset: Option<String>,
}

impl SampleInfo {
    /// Whether the counters carry deltas (no reboot between the samples).
    pub(crate) fn has_deltas(&self) -> bool {
        self.counters_reset.is_none()
    }

    /// A second live read `secs` after the first: one boot, so a reset can only show as
    /// counters that fell (per device, [`device_reset`]).
    pub fn interval(secs: f64) -> SampleInfo {
        SampleInfo {
            kind: "interval".into(),
            baseline: "live".into(),
            interval_s: Some(secs),
            counters_reset: None,
        }
    }

    /// `host` against an earlier snapshot of it, `base` (shown as `name`): the interval
    /// from their capture times, a reboot between them from their boot ids and uptimes.
    pub fn baseline(base: &Host, host: &Host, name: String) -> SampleInfo {
        let (bm, hm) = (base.meta(), host.meta());
        let interval_s = seconds_between(bm.captured_at.as_deref(), hm.captured_at.as_deref());
        SampleInfo {
            kind: "baseline".into(),
            baseline: name,
            interval_s,
            counters_reset: crate::host::side::counters_reset_between(bm, hm, interval_s),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VerbsView {
    /// `ibv_get_device_list` failure, e.g. `ENOSYS` (no kernel support).
    pub error: Option<String>,
    pub devices: Vec<VerbsDevice>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VerbsDevice {
    pub name: String,
    /// Whether verbs could open the device and found port 1 ACTIVE or ARMED; the error
    /// text otherwise.
    pub port1_active: Option<bool>,
    pub error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LinkDevice {
    pub name: String,
    #[serde(flatten)]
    pub attrs: DeviceAttrs,
    pub ports: Vec<LinkPort>,
    /// `<dev>/hw_counters/` (device-level driver counters: hfi1, mlx5 switchdev).
    pub device_counters: Vec<Counter>,
    /// A counter of this device fell between the samples where no wrap can explain it
    /// (a driver reload or a reset restarted them): no delta was taken for any of them.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub counters_reset: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LinkPort {
    pub port: u32,
    pub state: Option<NumName>,
    pub phys_state: Option<NumName>,
    pub rate: Option<Rate>,
    pub link_layer: Option<String>,
    pub lid: Option<u32>,
    pub sm_lid: Option<u32>,
    /// The port's netdev: the L3 device of its first populated GID (a bond for
    /// `mlx5_bond_0`, as `ibdev2netdev` shows it), else the PCI function's netdev whose
    /// `dev_port` matches (IPoIB `ibN` on InfiniBand).
    pub netdev: Option<String>,
    /// Every distinct `gid_attrs/ndevs` of the port's GIDs (bond, VLAN, macvlan, vxlan).
    pub gid_netdevs: Vec<String>,
    pub counters: Vec<Counter>,
}

impl LinkPort {
    pub fn counter(&self, name: &str) -> Option<&Counter> {
        self.counters.iter().find(|c| c.name == name)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Counter {
    pub name: String,
    pub dir: CounterDir,
    pub width_bits: u8,
    pub overflow: Overflow,
    /// The raw value as the kernel printed it; `null` when unavailable.
    pub value: Option<u64>,
    /// For data counters (4-byte words): the value in bytes.
    pub value_bytes: Option<u64>,
    /// Why there is no value: `N/A (no PMA)`, an errno name.
    pub unavailable: Option<String>,
    /// At its maximum: a saturating counter that stopped counting.
    pub saturated: bool,
    pub delta: Option<Delta>,
    /// The delta in bytes, for data counters.
    pub delta_bytes: Option<u64>,
    /// Per second over the interval (bytes/s for data counters, events/s otherwise).
    pub rate_per_s: Option<f64>,
    /// Data counters: the rate in GB/s (10^9 bytes/s).
    pub rate_gbs: Option<f64>,
    /// Data counters of a port whose rate is known: the rate as a percentage of that rate
    /// (the kernel's `rate`, a signalling rate: 8b/10b links top out near 80%).
    pub line_rate_pct: Option<f64>,
    #[serde(skip)]
    pub spec: CounterSpec,
}

fn counter(c: CounterRead) -> Counter {
    let bpu = c.spec.bytes_per_unit.map(u64::from);
    Counter {
        width_bits: c.spec.width_bits,
        overflow: c.spec.overflow,
        value_bytes: c.raw.zip(bpu).map(|(v, b)| v.saturating_mul(b)),
        saturated: c.spec.overflow == Overflow::Saturates && c.raw.is_some_and(|v| v >= c.spec.max()),
        value: c.raw,
        unavailable: c.unavailable,
        delta: None,
        delta_bytes: None,
        rate_per_s: None,
        rate_gbs: None,
        line_rate_pct: None,
        spec: c.spec,
        name: c.name,
        dir: c.dir,
    }
}

fn is_mlx5(name: &str, a: &DeviceAttrs) -> bool {
    a.driver.as_deref() == Some("mlx5_core") || name.starts_with("mlx5_")
}

/// One sample of every device and port.
pub fn probe(host: &Host) -> LinksReport {
    LinksReport {
        verbs: if host.is_live() { verbs_view() } else { None },
        ..probe_sysfs(host)
    }
}

/// [`probe`] without libibverbs' view: sysfs only (opening every verbs provider costs
/// seconds on a slow VM, and counters do not need it).
pub(crate) fn probe_sysfs(host: &Host) -> LinksReport {
    let (rdma, names) = presence(host);
    let devices = names.iter().map(|n| probe_device(host, n)).collect();
    LinksReport {
        rdma,
        devices,
        sample: None,
        verbs: None,
    }
}

/// Re-read only the counters of the ports `sample` holds (no GID table, no device
/// attributes): what a sampler that already knows its ports reads while a run is stuck.
pub(crate) fn reread_counters(host: &Host, sample: &LinksReport) -> LinksReport {
    let mut after = sample.clone();
    for d in &mut after.devices {
        let mlx5 = is_mlx5(&d.name, &d.attrs);
        for p in &mut d.ports {
            p.counters = ib::read_port_counters(host, &d.name, p.port, mlx5)
                .into_iter()
                .map(counter)
                .collect();
        }
        d.device_counters = ib::read_device_counters(host, &d.name, mlx5)
            .into_iter()
            .map(counter)
            .collect();
    }
    after
}

fn probe_device(host: &Host, name: &str) -> LinkDevice {
    let attrs = ib::read_device(host, name);
    let mlx5 = is_mlx5(name, &attrs);
    let port_numbers = ib::list_ports(host, name);
    let n_ports = port_numbers.len();
    let ports = port_numbers
        .into_iter()
        .map(|p| {
            let a = ib::read_port(host, name, p);
            let mut gid_netdevs: Vec<String> = Vec::new();
            for slot in ib::read_gid_table(host, name, p)
                .iter()
                .filter(|s| s.is_populated())
            {
                if let Some(n) = slot.ndev.value().map(str::trim).filter(|n| !n.is_empty())
                    && !gid_netdevs.iter().any(|x| x == n)
                {
                    gid_netdevs.push(n.to_string());
                }
            }
            LinkPort {
                port: p,
                netdev: gid_netdevs
                    .first()
                    .cloned()
                    .or_else(|| ib::port_netdev(host, name, p, n_ports, &attrs.pci_netdevs)),
                gid_netdevs,
                state: a.state,
                phys_state: a.phys_state,
                rate: a.rate,
                link_layer: a.link_layer,
                lid: a.lid,
                sm_lid: a.sm_lid,
                counters: ib::read_port_counters(host, name, p, mlx5)
                    .into_iter()
                    .map(counter)
                    .collect(),
            }
        })
        .collect();
    LinkDevice {
        name: name.to_string(),
        device_counters: ib::read_device_counters(host, name, mlx5)
            .into_iter()
            .map(counter)
            .collect(),
        counters_reset: false,
        attrs,
        ports,
    }
}

/// Fill `after`'s counters with deltas from `before` (same device, port, directory and
/// name). `interval_s` gives rates. After a reboot (`info.counters_reset`) no delta is
/// taken anywhere, and a device whose counters fell where no wrap explains it gets none.
pub(crate) fn apply_deltas(after: &mut LinksReport, before: &LinksReport, info: SampleInfo) {
    let interval = info.interval_s.filter(|s| *s > 0.0);
    let rebooted = info.counters_reset.is_some();
    after.sample = Some(info);
    if rebooted {
        return;
    }
    for dev in &mut after.devices {
        let Some(bdev) = before.devices.iter().find(|d| same_device(d, dev)) else {
            continue;
        };
        if device_reset(bdev, dev) {
            dev.counters_reset = true;
            continue;
        }
        for c in &mut dev.device_counters {
            let prev = bdev.device_counters.iter().find(|p| p.name == c.name);
            fill_delta(c, prev, interval);
        }
        for port in &mut dev.ports {
            let bport = bdev.ports.iter().find(|p| p.port == port.port);
            let line_gbps = port.rate.as_ref().map(|r| r.gbps).filter(|g| *g > 0.0);
            for c in &mut port.counters {
                let prev = bport.and_then(|p| p.counters.iter().find(|x| x.name == c.name && x.dir == c.dir));
                fill_delta(c, prev, interval);
                c.line_rate_pct = c.rate_gbs.zip(line_gbps).map(|(r, g)| r * 8.0 / g * 100.0);
            }
        }
    }
}

/// Whether two samples' devices are one device, by its stable identity: the node GUID
/// when both have one, else the PCI function, else the name. A driver reload can give
/// `mlx5_0` another card's name; its counters are compared with its own.
pub(crate) fn same_device(a: &LinkDevice, b: &LinkDevice) -> bool {
    let guid = |d: &LinkDevice| {
        d.attrs
            .node_guid
            .clone()
            .filter(|g| !g.trim_start_matches(['0', ':']).is_empty())
    };
    match (guid(a), guid(b)) {
        (Some(x), Some(y)) => x == y,
        _ => match (&a.attrs.pci_bdf, &b.attrs.pci_bdf) {
            (Some(x), Some(y)) => x == y,
            _ => a.name == b.name,
        },
    }
}

fn fill_delta(c: &mut Counter, prev: Option<&Counter>, interval: Option<f64>) {
    let (Some(b), Some(a)) = (prev.and_then(|p| p.value), c.value) else {
        return;
    };
    let d = ib::counter_delta(b, a, c.spec);
    let bpu = c.spec.bytes_per_unit.map(u64::from);
    c.delta_bytes = d.exact().zip(bpu).map(|(v, b)| v.saturating_mul(b));
    c.rate_per_s = match (d.exact(), interval) {
        (Some(v), Some(s)) => Some(v as f64 * bpu.unwrap_or(1) as f64 / s),
        _ => None,
    };
    c.rate_gbs = c.rate_per_s.filter(|_| bpu.is_some()).map(|r| r / 1e9);
    c.delta = Some(d);
}

/// Whether a device's counters restarted between two samples: one fell that cannot have
/// wrapped in between (a 64-bit counter, or a saturating one). A 32-bit counter that fell
/// alone is a wrap; counters restarted by a driver reload or a reset fall together.
pub(crate) fn device_reset(before: &LinkDevice, after: &LinkDevice) -> bool {
    let fell = |b: &Counter, a: &Counter| match (b.value, a.value) {
        (Some(bv), Some(av)) => {
            av < bv && (a.spec.overflow == Overflow::Saturates || a.spec.width_bits >= 64)
        }
        _ => false,
    };
    let dev = after.device_counters.iter().any(|a| {
        before
            .device_counters
            .iter()
            .find(|b| b.name == a.name)
            .is_some_and(|b| fell(b, a))
    });
    dev || after.ports.iter().any(|p| {
        let Some(bp) = before.ports.iter().find(|x| x.port == p.port) else {
            return false;
        };
        p.counters.iter().any(|a| {
            bp.counters
                .iter()
                .find(|b| b.name == a.name && b.dir == a.dir)
                .is_some_and(|b| fell(b, a))
        })
    })
}

/// Seconds between two RFC 3339 timestamps (`captured_at` of two snapshots).
pub(crate) fn seconds_between(earlier: Option<&str>, later: Option<&str>) -> Option<f64> {
    let a = humantime::parse_rfc3339_weak(earlier?).ok()?;
    let b = humantime::parse_rfc3339_weak(later?).ok()?;
    b.duration_since(a).ok().map(|d| d.as_secs_f64())
}

/// Physical-link error counters (PMA): any increase is a finding; `link_downed` is a fault.
pub(crate) const LINK_ERRORS: &[&str] = &[
    "symbol_error",
    "link_downed",
    "link_error_recovery",
    "port_rcv_errors",
    "port_xmit_discards",
];

/// Transport retransmission and timeout counters (mlx5 hw_counters).
const RETRANSMISSIONS: &[&str] = &[
    "local_ack_timeout_err",
    "packet_seq_err",
    "out_of_sequence",
    "rnr_nak_retry_err",
    "req_transport_retries_exceeded",
];

/// `port_xmit_wait` grew by more than this share of `port_xmit_data` (both in their raw
/// units) over the interval: the port spent a large part of its sending time without
/// credits. A stated heuristic, not an IBTA threshold.
pub(crate) const XMIT_WAIT_RATIO: f64 = 0.1;

fn delta_text(d: &Delta) -> String {
    match d {
        Delta::Value {
            value,
            wrapped: false,
        } => format!("+{value}"),
        Delta::Value { value, wrapped: true } => format!("+{value} (wrapped)"),
        Delta::Saturated { at_least } => format!("+{at_least} or more (saturated at its maximum)"),
        Delta::Reset { after } => format!("counter was cleared; {after} since"),
    }
}

/// The commands that show a port's cable, transceiver and link, by what the port is:
/// `ibstat` for InfiniBand, `ethtool` for a RoCE netdev, `mlxlink` (MFT) on mlx5; never a
/// Mellanox tool for another vendor's port (an Omni-Path `hfi1`, `rxe`). `: a, b` or empty.
pub(crate) fn cable_tools(d: &LinkDevice, p: &LinkPort) -> String {
    let cmds = cable_commands(d, p);
    if cmds.is_empty() {
        String::new()
    } else {
        format!(": {}", cmds.join(", "))
    }
}

/// [`cable_tools`]'s commands, each in backticks, for fix lines of their own.
pub(crate) fn cable_commands(d: &LinkDevice, p: &LinkPort) -> Vec<String> {
    let mut cmds = Vec::new();
    match (p.link_layer.as_deref(), &p.netdev) {
        (Some("InfiniBand"), _) => cmds.push(format!("`ibstat {} {}`", d.name, p.port)),
        (_, Some(n)) => cmds.push(format!("`ethtool {n}`")),
        _ => {}
    }
    if is_mlx5(&d.name, &d.attrs) {
        cmds.push(format!(
            "`mlxlink -d {} -p {} -m -c` (MFT: module and cable errors)",
            d.name, p.port
        ));
    }
    cmds
}

/// Link error counters read once (no baseline, no interval) that are non-zero: what
/// happened since the counters were last cleared, usually boot. One warning per port
/// listing each, saturated ones marked; with a second sample the deltas judge instead.
const SINCE_BOOT: &[&str] = &[
    "link_downed",
    "symbol_error",
    "link_error_recovery",
    "port_rcv_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
];

fn errors_since_boot(x: &Port, out: &mut Vec<Finding>) {
    out.extend(since_boot(x.d, x.p, &x.subject));
}

fn since_boot(d: &LinkDevice, p: &LinkPort, subject: &str) -> Option<Finding> {
    let seen: Vec<&Counter> = p
        .counters
        .iter()
        .filter(|c| c.delta.is_none() && SINCE_BOOT.contains(&c.name.as_str()))
        .filter(|c| c.value.is_some_and(|v| v > 0))
        .collect();
    if seen.is_empty() {
        return None;
    }
    let text: Vec<String> = seen
        .iter()
        .map(|c| {
            let v = c.value.unwrap_or(0);
            if c.saturated {
                format!("{} {v} (saturated at its {}-bit maximum)", c.name, c.width_bits)
            } else {
                format!("{} {v}", c.name)
            }
        })
        .collect();
    let mut f = Finding::new(
        "links.errors_since_boot",
        Severity::Warn,
        subject,
        format!(
            "{} since the counters were last cleared (boot or a reset), no baseline: whether they still grow is unknown",
            text.join(", ")
        ),
    );
    for c in &seen {
        f = f.evidence(&c.name, c.value);
    }
    let ib = p.link_layer.as_deref() == Some("InfiniBand");
    Some(f.fix(if ib {
        format!(
            "sample again to see if they grow: `fabprobe links --interval 10`; clear them to start over: `perfquery -x -R -C {dev} -P {port}`",
            dev = d.name,
            port = p.port
        )
    } else {
        format!("sample again to see if they grow: `fabprobe links --interval 10` ({} port {})", d.name, p.port)
    }))
}

/// How a `links` rule judges: each device (its PCIe link), each port of it, in the
/// report's order, or the whole report once after them.
pub enum RuleFn {
    Device(fn(&LinkDevice, &mut Vec<Finding>)),
    Port(fn(&Port, &mut Vec<Finding>)),
    Report(fn(&LinksReport, &mut Vec<Finding>)),
}

/// A port as the port rules see it.
pub struct Port<'a> {
    pub d: &'a LinkDevice,
    pub p: &'a LinkPort,
    /// `device/port`.
    pub subject: String,
    /// The best ACTIVE rate among ports of this HCA model and link layer, and which port.
    pub peer_best: Option<&'a (f64, String)>,
    /// The HCA model the peers share (`hca_type`, else `board_id`, else the device name).
    pub model: String,
}

/// What breaks a link, in the order one port's findings are listed.
pub static RULES: &[Rule<RuleFn>] = &[
    Rule {
        ids: &["links.nic_not_in_rdma", "links.rdma_driver_not_loaded"],
        severity: &[Severity::Unknown],
        about: "a NIC in the PCI tree that registered no RDMA device (topo.nic_not_in_rdma; every NIC of a \
                module that is not loaded in one finding, as topo.rdma_driver_not_loaded): \
                named by its bus ID and netdev; its RDMA ports' state, rate and counters are unread",
        judge: RuleFn::Report(links_not_in_rdma),
    },
    Rule {
        ids: &["links.pcie_downtrained"],
        severity: &[Severity::Fail],
        about: "the HCA's PCIe link below its maximum speed or width",
        judge: RuleFn::Device(pcie_downtrained),
    },
    Rule {
        ids: &["links.port_state_unknown"],
        severity: &[Severity::Unknown],
        about: "state or phys_state could not be read (unknown, not down)",
        judge: RuleFn::Port(port_state_unknown),
    },
    Rule {
        ids: &["links.port_not_active"],
        severity: &[Severity::Warn, Severity::Fail],
        about: "state not ACTIVE or phys_state not LinkUp (Disabled: warn)",
        judge: RuleFn::Port(port_not_active),
    },
    Rule {
        ids: &["links.rate_below_peers"],
        severity: &[Severity::Fail],
        about: "an ACTIVE port slower than the best port of the same HCA model",
        judge: RuleFn::Port(rate_below_peers),
    },
    Rule {
        ids: &["links.errors_since_boot"],
        severity: &[Severity::Warn],
        about: "link_downed, symbol_error, link_error_recovery, port_rcv_errors, \
                local_link_integrity_errors or excessive_buffer_overrun_errors non-zero or \
                saturated in a single read (since boot, no baseline; one finding per port)",
        judge: RuleFn::Port(errors_since_boot),
    },
    Rule {
        ids: &["links.nothing_to_judge"],
        severity: &[Severity::Unknown],
        about: "no RDMA device showed up (no InfiniBand support, no driver loaded, an empty \
                /sys/class/infiniband): nothing was judged, NOT EVALUATED (exit 3)",
        judge: RuleFn::Report(links_nothing),
    },
    Rule {
        ids: &["links.counters_reset"],
        severity: &[Severity::Unknown],
        about: "the counters restarted between the two samples (a reboot: another boot id, \
                or less uptime than the interval; a driver reload: a counter that cannot \
                wrap fell): no delta, never a wrap",
        judge: RuleFn::Report(counters_reset),
    },
    Rule {
        ids: &["links.counter_saturated"],
        severity: &[Severity::Warn],
        about: "a PMA error counter stuck at its maximum across a sample",
        judge: RuleFn::Port(counter_saturated),
    },
    Rule {
        ids: &["links.errors_increasing", "links.retransmissions_increasing"],
        severity: &[Severity::Warn, Severity::Fail],
        about: "in a sample: symbol_error, link_downed (fail), link_error_recovery, \
                port_rcv_errors, port_xmit_discards increased; or local_ack_timeout_err, \
                packet_seq_err, out_of_sequence, rnr_nak_retry_err, \
                req_transport_retries_exceeded (fail) increased",
        judge: RuleFn::Port(counters_increasing),
    },
    Rule {
        ids: &["links.congestion"],
        severity: &[Severity::Warn],
        about: "port_xmit_wait grew by more than 10% of port_xmit_data (words)",
        judge: RuleFn::Port(congestion),
    },
    Rule {
        ids: &["links.verbs_missing_device"],
        severity: &[Severity::Warn],
        about: "sysfs lists a device libibverbs does not (live only)",
        judge: RuleFn::Report(verbs_missing_device),
    },
    Rule {
        ids: &["links.verbs_mismatch"],
        severity: &[Severity::Warn],
        about: "libibverbs and sysfs disagree about port 1 (live only)",
        judge: RuleFn::Report(verbs_mismatch),
    },
];

/// The HCA model ports are compared within.
fn model(d: &LinkDevice) -> String {
    d.attrs
        .hca_type
        .clone()
        .or_else(|| d.attrs.board_id.clone())
        .unwrap_or_else(|| d.name.clone())
}

/// The best ACTIVE rate per (HCA model, link layer), and the port that has it.
fn best_rates(r: &LinksReport) -> BTreeMap<(String, String), (f64, String)> {
    let mut best: BTreeMap<(String, String), (f64, String)> = BTreeMap::new();
    for d in &r.devices {
        for p in &d.ports {
            if p.state.as_ref().map(|s| s.name.as_str()) != Some("ACTIVE") {
                continue;
            }
            if let Some(rate) = &p.rate {
                let key = (model(d), p.link_layer.clone().unwrap_or_default());
                let e = best.entry(key).or_insert((0.0, String::new()));
                if rate.gbps > e.0 {
                    let shown = crate::finding::spell::rate(rate.gbps, rate.lanes, rate.speed.as_deref());
                    *e = (rate.gbps, format!("{} {shown}", crate::finding::spell::port(&d.name, p.port)));
                }
            }
        }
    }
    best
}

fn links_not_in_rdma(r: &LinksReport, out: &mut Vec<Finding>) {
    let unread = "it has no RDMA port, so its port state, rate and error counters are unknown (its netdev's link: `ethtool {netdev}`)";
    crate::probe::topo::unlisted_findings("links", unread, &r.rdma.not_in_rdma, out);
}

/// Judge the links by [`RULES`].
pub(crate) fn findings(r: &LinksReport) -> Vec<Finding> {
    let mut out = Vec::new();
    let best = best_rates(r);
    for d in &r.devices {
        judge_each(RULES, device_judge, d, &mut out);
        for p in &d.ports {
            let model = model(d);
            let port = Port {
                d,
                p,
                subject: crate::finding::spell::port(&d.name, p.port),
                peer_best: best.get(&(model.clone(), p.link_layer.clone().unwrap_or_default())),
                model,
            };
            judge_each(RULES, port_judge, &port, &mut out);
        }
    }
    judge_each(RULES, report_judge, r, &mut out);
    crate::probe::topo::say_moved(&mut out, &r.rdma.names_moved);
    out
}

fn device_judge(j: &RuleFn) -> Option<fn(&LinkDevice, &mut Vec<Finding>)> {
    match j {
        RuleFn::Device(j) => Some(*j),
        _ => None,
    }
}

fn port_judge(j: &RuleFn) -> Option<fn(&Port, &mut Vec<Finding>)> {
    match j {
        RuleFn::Port(j) => Some(*j),
        _ => None,
    }
}

fn report_judge(j: &RuleFn) -> Option<fn(&LinksReport, &mut Vec<Finding>)> {
    match j {
        RuleFn::Report(j) => Some(*j),
        _ => None,
    }
}

fn pcie_downtrained(d: &LinkDevice, out: &mut Vec<Finding>) {
    let Some(l) = d.attrs.pci_link.as_ref().filter(|l| l.width_degraded() || l.speed_degraded()) else {
        return;
    };
    let sp = |s: &Option<crate::sysfs::pci::LinkSpeed>| {
        s.as_ref()
            .map(|x| x.raw.clone())
            .unwrap_or_else(|| "unknown".into())
    };
    out.push(
        Finding::new(
            "links.pcie_downtrained",
            Severity::Fail,
            &d.name,
            format!(
                "HCA's PCIe link is downtrained: {} x{} of {} x{}",
                sp(&l.current_speed),
                l.current_width.map(|w| w.to_string()).unwrap_or("?".into()),
                sp(&l.max_speed),
                l.max_width.map(|w| w.to_string()).unwrap_or("?".into())
            ),
        )
        .evidence("pci_bdf", d.attrs.pci_bdf.clone())
        .evidence("current_link_speed", sp(&l.current_speed))
        .evidence("current_link_width", l.current_width)
        .evidence("max_link_speed", sp(&l.max_speed))
        .evidence("max_link_width", l.max_width)
        .fix(format!(
            "reseat the card or check the slot/riser (a downtrained NIC caps RDMA bandwidth); {}",
            crate::probe::topo::lnk_compare(d.attrs.pci_bdf.as_deref().unwrap_or(""))
        )),
    );
}

/// `4: ACTIVE`, or what could not be read.
fn num_name(n: Option<&NumName>, unread: &str) -> String {
    n.map(|s| format!("{}: {}", s.id, s.name)).unwrap_or(unread.into())
}

fn port_state_unknown(x: &Port, out: &mut Vec<Finding>) {
    let (d, p) = (x.d, x.p);
    if p.state.is_some() && p.phys_state.is_some() {
        return;
    }
    // Unreadable is unknown, not down: say what could not be read, blame nothing.
    out.push(
        Finding::new(
            "links.port_state_unknown",
            Severity::Unknown,
            &x.subject,
            format!(
                "port state could not be read ({} / {}): whether it carries traffic is unknown",
                num_name(p.state.as_ref(), "state unreadable"),
                num_name(p.phys_state.as_ref(), "phys_state unreadable")
            ),
        )
        .fix(format!(
            "read it as root: `cat /sys/class/infiniband/{}/ports/{}/state`, `ibstat {} {}`",
            d.name, p.port, d.name, p.port
        )),
    );
}

fn port_not_active(x: &Port, out: &mut Vec<Finding>) {
    let (d, p) = (x.d, x.p);
    let (Some(state), Some(phys)) = (&p.state, &p.phys_state) else {
        return;
    };
    let phys = phys.name.as_str();
    if state.name == "ACTIVE" && phys == "LinkUp" {
        return;
    }
    let disabled = phys == "Disabled";
    out.push(
        Finding::new(
            "links.port_not_active",
            if disabled { Severity::Warn } else { Severity::Fail },
            &x.subject,
            format!(
                "port is {} / {}",
                num_name(p.state.as_ref(), "unknown"),
                num_name(p.phys_state.as_ref(), "unknown")
            ),
        )
        .evidence("state", num_name(p.state.as_ref(), "unknown"))
        .evidence("phys_state", num_name(p.phys_state.as_ref(), "unknown"))
        .fix(match phys {
            "Polling" => format!(
                "no link partner: check the cable, the transceiver and the switch port{}",
                cable_tools(d, p)
            ),
            "Disabled" => "the port is administratively disabled; enable it if it should carry traffic".into(),
            "LinkUp" => format!(
                "link is up but the port is not ACTIVE: on InfiniBand check that a subnet manager is running (`sminfo -C {} -P {}`)",
                d.name, p.port
            ),
            _ => format!("check the cable, the transceiver and the switch port{}", cable_tools(d, p)),
        }),
    );
}

fn rate_below_peers(x: &Port, out: &mut Vec<Finding>) {
    let (d, p) = (x.d, x.p);
    let up = p.state.as_ref().is_some_and(|s| s.name == "ACTIVE")
        && p.phys_state.as_ref().is_some_and(|s| s.name == "LinkUp");
    let (Some(rate), Some((top, who))) = (&p.rate, x.peer_best) else {
        return;
    };
    if !up || rate.gbps >= *top {
        return;
    }
    out.push(
        Finding::new(
            "links.rate_below_peers",
            Severity::Fail,
            &x.subject,
            format!(
                "port runs at {} while the same HCA model reaches {}",
                crate::finding::spell::rate(rate.gbps, rate.lanes, rate.speed.as_deref()),
                who
            ),
        )
        .evidence("rate", rate.raw.clone())
        .evidence("peer", who.clone())
        .evidence("hca", x.model.clone())
        .fix(format!(
            "check the cable and transceiver generation and the switch port's speed setting{}",
            cable_tools(d, p)
        )),
    );
}

fn links_nothing(r: &LinksReport, out: &mut Vec<Finding>) {
    if r.devices.is_empty() && r.rdma.unreadable.is_none() {
        let why = r.rdma.message.clone().unwrap_or_else(|| "no RDMA devices".into());
        out.push(crate::finding::nothing_to_judge(
            "links",
            "host",
            Some(crate::finding::MissingFact::RdmaDevice),
            format!("nothing to judge: {why}"),
        ));
    }
}

fn counters_reset(r: &LinksReport, out: &mut Vec<Finding>) {
    let Some(sample) = &r.sample else { return };
    let again = match sample.kind.as_str() {
        "interval" => "sample again: `fabprobe links --interval 10`".to_string(),
        _ => "take a new baseline now (`fabprobe snapshot`) and compare a later snapshot with it".to_string(),
    };
    if let Some(why) = &sample.counters_reset {
        out.push(
            Finding::new(
                "links.counters_reset",
                Severity::Unknown,
                "counters",
                format!("not evaluated: the counters were reset: {why}; no deltas, the counters are read as one sample"),
            )
            .evidence("baseline", sample.baseline.clone())
            .fix(again.clone()),
        );
        return;
    }
    for d in r.devices.iter().filter(|d| d.counters_reset) {
        out.push(
            Finding::new(
                "links.counters_reset",
                Severity::Unknown,
                &d.name,
                format!(
                    "not evaluated: {}'s counters were reset between the samples (one fell that cannot wrap: a driver reload or a counter reset); no deltas for it",
                    d.name
                ),
            )
            .evidence("baseline", sample.baseline.clone())
            .fix(again.clone()),
        );
    }
}

fn counter_saturated(x: &Port, out: &mut Vec<Finding>) {
    let (d, p) = (x.d, x.p);
    for c in &p.counters {
        // Without a second sample a saturated counter is reported with the others by
        // `errors_since_boot`; one that grew says so in `errors_increasing`; here,
        // one stuck at its maximum across the sample, whose growth cannot be seen.
        let stuck = c.delta.as_ref().is_some_and(|d| d.lower_bound() == 0);
        if !(c.saturated && stuck && LINK_ERRORS.contains(&c.name.as_str())) {
            continue;
        }
        out.push(
            Finding::new(
                "links.counter_saturated",
                Severity::Warn,
                &x.subject,
                format!(
                    "{} is stuck at its {}-bit maximum: increases can no longer be seen",
                    c.name, c.width_bits
                ),
            )
            .evidence("counter", c.name.clone())
            .evidence("value", c.value)
            .fix(if p.link_layer.as_deref() == Some("InfiniBand") {
                format!(
                    "clear the port counters (`perfquery -x -R -C {} -P {}`) and sample again",
                    d.name, p.port
                )
            } else {
                "this counter cannot grow any more: compare later samples of the others, or reload the driver to clear it"
                    .into()
            }),
        );
    }
}

fn counters_increasing(x: &Port, out: &mut Vec<Finding>) {
    let p = x.p;
    for c in &p.counters {
        let Some(d) = &c.delta else { continue };
        if d.lower_bound() == 0 || matches!(d, Delta::Reset { .. }) {
            continue;
        }
        let name = c.name.as_str();
        let (id, sev, what) = if LINK_ERRORS.contains(&name) {
            let sev = if name == "link_downed" { Severity::Fail } else { Severity::Warn };
            ("links.errors_increasing", sev, "physical link errors")
        } else if RETRANSMISSIONS.contains(&name) {
            let sev = if name == "req_transport_retries_exceeded" {
                Severity::Fail
            } else {
                Severity::Warn
            };
            ("links.retransmissions_increasing", sev, "transport retransmissions/timeouts")
        } else {
            continue;
        };
        let mut f = Finding::new(id, sev, &x.subject, format!("{name} increased {} ({what})", delta_text(d)))
            .evidence("counter", name)
            .evidence("delta", delta_text(d))
            .evidence("value", c.value);
        if let Some(rate) = c.rate_per_s {
            f = f.evidence("per_s", (rate * 1000.0).round() / 1000.0);
        }
        out.push(f.fix(if id == "links.errors_increasing" {
            "a marginal cable or transceiver: check ports on both ends (mlxlink), replace the cable".to_string()
        } else if p.link_layer.as_deref() == Some("Ethernet") {
            // RoCE loses packets where PFC/ECN are off or mismatched: `qos` reads both.
            format!(
                "lossy path: check PFC/ECN configuration and the pause and ECN counters (`fabprobe qos --ifname {}`) and the link's error counters",
                p.netdev.as_deref().unwrap_or("<netdev>")
            )
        } else {
            // InfiniBand is lossless by credits: PFC does not apply; look along the path.
            "retransmissions on a credit-based link: check the error counters of every port on the path (`fabprobe links` on the peer, `perfquery` on the switch ports) and congestion (port_xmit_wait)".to_string()
        }));
    }
}

fn congestion(x: &Port, out: &mut Vec<Finding>) {
    let p = x.p;
    let (Some(w), Some(d)) = (p.counter("port_xmit_wait"), p.counter("port_xmit_data")) else {
        return;
    };
    let (Some(dw), Some(dx)) = (
        w.delta
            .as_ref()
            .filter(|x| !matches!(x, Delta::Reset { .. }))
            .map(Delta::lower_bound),
        d.delta
            .as_ref()
            .filter(|x| !matches!(x, Delta::Reset { .. }))
            .map(Delta::lower_bound),
    ) else {
        return;
    };
    if dw == 0 || (dx != 0 && dw as f64 <= XMIT_WAIT_RATIO * dx as f64) {
        return;
    }
    let mut f = Finding::new(
        "links.congestion",
        Severity::Warn,
        &x.subject,
        format!(
            "port_xmit_wait grew by {dw} against {dx} words sent: the port often waits for credits (congestion or a slow receiver)"
        ),
    )
    .evidence("counter", "port_xmit_wait")
    .evidence("delta", dw)
    .evidence("port_xmit_data_delta_words", dx)
    .evidence("threshold_ratio", XMIT_WAIT_RATIO);
    if let Some(rate) = w.rate_per_s {
        f = f.evidence("per_s", rate.round());
    }
    out.push(f.fix("look for a hot spot: the peer's port_rcv counters, switch congestion, PFC pause storms"));
}

fn verbs_missing_device(r: &LinksReport, out: &mut Vec<Finding>) {
    let Some(v) = &r.verbs else { return };
    // Devices sysfs shows but libibverbs cannot use: no provider library (libmlx5...)
    // or no /dev/infiniband in a container. Applications will see no HCA.
    for d in r.devices.iter().filter(|d| !v.devices.iter().any(|vd| vd.name == d.name)) {
        out.push(
            Finding::new(
                "links.verbs_missing_device",
                Severity::Warn,
                &d.name,
                "sysfs lists this device but libibverbs does not: RDMA applications (NCCL, perftest) will not see it",
            )
            .evidence("ibv_get_device_list_error", v.error.clone())
            .evidence("verbs_devices", v.devices.iter().map(|x| x.name.clone()).collect::<Vec<_>>())
            .evidence("driver", d.attrs.driver.clone())
            .fix("install the provider library (rdma-core: libmlx5/libibverbs-providers), and in containers map /dev/infiniband"),
        );
    }
}

fn verbs_mismatch(r: &LinksReport, out: &mut Vec<Finding>) {
    let Some(v) = &r.verbs else { return };
    for vd in &v.devices {
        let sysfs = r.devices.iter().find(|d| d.name == vd.name);
        let sysfs_active = sysfs
            .and_then(|d| d.ports.iter().find(|p| p.port == 1))
            .and_then(|p| p.state.as_ref())
            .map(|s| s.name == "ACTIVE" || s.name == "ARMED");
        if sysfs.is_none() || (vd.port1_active.is_some() && sysfs_active.is_some() && vd.port1_active != sysfs_active) {
            out.push(
                Finding::new(
                    "links.verbs_mismatch",
                    Severity::Warn,
                    &vd.name,
                    "libibverbs and sysfs disagree about this device's port 1",
                )
                .evidence("verbs_port1_active", vd.port1_active)
                .evidence("sysfs_port1_active", sysfs_active)
                .evidence("verbs_error", vd.error.clone()),
            );
        }
    }
}

/// libibverbs' view (live only). `ENOSYS` from `ibv_get_device_list` is the normal answer
/// on a kernel without InfiniBand support.
#[cfg(feature = "rdma")]
pub(crate) fn verbs_view() -> Option<VerbsView> {
    match ibverbs::devices() {
        Err(e) => Some(VerbsView {
            error: Some(
                e.raw_os_error()
                    .and_then(crate::host::side::errno_name)
                    .map(str::to_string)
                    .unwrap_or_else(|| e.to_string()),
            ),
            devices: Vec::new(),
        }),
        Ok(list) => Some(VerbsView {
            error: None,
            devices: list
                .iter()
                .map(|d| {
                    let name = d
                        .name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    // Context::open queries port 1 and refuses ports that are not
                    // ACTIVE/ARMED: that is the cross-check.
                    match d.open() {
                        Ok(_) => VerbsDevice {
                            name,
                            port1_active: Some(true),
                            error: None,
                        },
                        Err(e) if e.to_string().contains("not ACTIVE or ARMED") => VerbsDevice {
                            name,
                            port1_active: Some(false),
                            error: Some(e.to_string()),
                        },
                        Err(e) => VerbsDevice {
                            name,
                            port1_active: None,
                            error: Some(e.to_string()),
                        },
                    }
                })
                .collect(),
        }),
    }
}

#[cfg(not(feature = "rdma"))]
pub(crate) fn verbs_view() -> Option<VerbsView> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures")
            .join(name)
    }

    #[test]
    fn seconds_between_snapshots() {
        assert_eq!(
            seconds_between(Some("2026-11-20T10:00:00Z"), Some("2026-11-20T10:00:30Z")),
            Some(30.0)
        );
        assert_eq!(
            seconds_between(Some("2026-11-20T10:00:30Z"), Some("2026-11-20T10:00:00Z")),
            None
        );
        assert_eq!(seconds_between(None, Some("2026-11-20T10:00:00Z")), None);
        assert_eq!(
            seconds_between(Some("yesterday"), Some("2026-11-20T10:00:00Z")),
            None
        );
    }

    /// Deltas of a report against itself are all zero; a missing baseline counter gives none.
    #[test]
    fn deltas_against_self_and_missing() {
        let host = Host::snapshot(fixture("ib-degraded")).unwrap();
        let before = probe(&host);
        let mut after = before.clone();
        let info = SampleInfo {
            kind: "baseline".into(),
            baseline: "x".into(),
            interval_s: Some(10.0),
            counters_reset: None,
        };
        apply_deltas(&mut after, &before, info.clone());
        for d in &after.devices {
            for p in &d.ports {
                for c in &p.counters {
                    assert_eq!(
                        c.delta,
                        Some(Delta::Value {
                            value: 0,
                            wrapped: false
                        }),
                        "{}",
                        c.name
                    );
                }
            }
        }
        assert!(findings(&after).iter().all(|f| !f.id.contains("increasing")));
        let mut empty_before = before.clone();
        empty_before.devices.clear();
        let mut after = before.clone();
        apply_deltas(&mut after, &empty_before, info);
        assert!(
            after.devices[0].ports[0]
                .counters
                .iter()
                .all(|c| c.delta.is_none())
        );
    }
}

#[cfg(test)]
mod reset_tests {
    use super::*;

    fn fixture(name: &str) -> LinksReport {
        probe(&Host::snapshot(format!("{}/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap())
    }

    fn set(r: &mut LinksReport, dev: &str, name: &str, v: u64) {
        let d = r.devices.iter_mut().find(|d| d.name == dev).unwrap();
        let c = d.ports[0].counters.iter_mut().find(|c| c.name == name).unwrap();
        c.value = Some(v);
    }

    /// A 32-bit counter that fell alone wrapped; a 64-bit or saturating one that fell
    /// restarted its whole device (no delta there, an unknown finding), and the other
    /// devices keep theirs.
    #[test]
    fn a_fall_no_wrap_explains_resets_the_device_only() {
        let before = fixture("ib-degraded");
        for (counter, v, reset) in [
            ("rx_write_requests", 7, false), // mlx5 q-counter, 32 bits: a roll-over
            ("port_xmit_wait", 5, true),     // PMA counters saturate: never roll over
            ("port_xmit_data", 1000, true),  // 64-bit: cannot roll over in 30 s
            ("port_rcv_packets", 10, true),  // 64-bit
        ] {
            let mut after = fixture("ib-degraded-later");
            set(&mut after, "mlx5_0", counter, v);
            apply_deltas(&mut after, &before, SampleInfo::interval(30.0));
            let d0 = &after.devices[0];
            assert_eq!(d0.counters_reset, reset, "{counter}");
            if reset {
                assert!(
                    d0.ports[0]
                        .counters
                        .iter()
                        .all(|c| c.delta.is_none() && c.rate_per_s.is_none())
                );
            }
            // mlx5_2's errors still count: one device's reset says nothing of another's.
            let f = findings(&after);
            assert!(
                f.iter()
                    .any(|f| f.id == "links.errors_increasing" && f.subject.starts_with("mlx5_2"))
            );
            assert_eq!(
                f.iter().filter(|f| f.id == "links.counters_reset").count(),
                usize::from(reset),
                "{counter}"
            );
        }
    }

    /// A driver reload that renamed the devices (mlx5_0 and mlx5_2 swapped names): each
    /// device's counters are compared with its own earlier ones, found by node GUID, never
    /// with those of the device that had its name before.
    #[test]
    fn renamed_devices_are_compared_by_node_guid() {
        let before = fixture("ib-degraded");
        let mut after = fixture("ib-degraded-later");
        let (i0, i2) = (
            after.devices.iter().position(|d| d.name == "mlx5_0").unwrap(),
            after.devices.iter().position(|d| d.name == "mlx5_2").unwrap(),
        );
        let mut plain = after.clone();
        apply_deltas(&mut plain, &before, SampleInfo::interval(30.0));
        after.devices[i0].name = "mlx5_2".into();
        after.devices[i2].name = "mlx5_0".into();
        apply_deltas(&mut after, &before, SampleInfo::interval(30.0));
        assert_ne!(after.devices[i0].attrs.node_guid, before.devices[i2].attrs.node_guid);
        for (i, d) in after.devices.iter().enumerate() {
            assert!(!d.counters_reset, "{}", d.name);
            for (p, q) in d.ports.iter().zip(&plain.devices[i].ports) {
                for (c, e) in p.counters.iter().zip(&q.counters) {
                    assert_eq!(c.delta, e.delta, "{} {}", d.name, c.name);
                }
            }
        }
        // The renamed device's errors are still its own (mlx5_2's, now called mlx5_0).
        assert!(
            findings(&after)
                .iter()
                .any(|f| f.id == "links.errors_increasing" && f.subject.starts_with("mlx5_0"))
        );
    }

    /// After a reboot no counter has a delta, whatever it did: none is a wrap or a rate.
    #[test]
    fn a_reboot_takes_no_delta_anywhere() {
        let before = fixture("ib-degraded");
        let mut after = fixture("ib-degraded-later");
        let info = SampleInfo {
            counters_reset: Some("the host rebooted".into()),
            ..SampleInfo::interval(30.0)
        };
        apply_deltas(&mut after, &before, info);
        for d in &after.devices {
            for c in d.ports.iter().flat_map(|p| &p.counters).chain(&d.device_counters) {
                assert!(
                    c.delta.is_none() && c.rate_per_s.is_none(),
                    "{} {}",
                    d.name,
                    c.name
                );
            }
        }
        let f = findings(&after);
        assert!(
            f.iter()
                .all(|f| !f.id.contains("increasing") && f.id != "links.congestion")
        );
        let reset: Vec<&Finding> = f.iter().filter(|f| f.id == "links.counters_reset").collect();
        assert_eq!(reset.len(), 1);
        assert_eq!(reset[0].severity, Severity::Unknown);
    }
}

#[cfg(test)]
mod verbs_tests {
    use super::*;

    #[test]
    fn verbs_cross_check_findings() {
        let host = Host::snapshot(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/ib-degraded")).unwrap();
        let mut r = probe(&host);
        let dev = |name: &str, active: Option<bool>| VerbsDevice {
            name: name.into(),
            port1_active: active,
            error: None,
        };
        // mlx5_1 is DOWN in sysfs but verbs says active; mlx5_3 unseen by verbs; mlx5_9
        // only verbs knows.
        r.verbs = Some(VerbsView {
            error: None,
            devices: vec![
                dev("mlx5_0", Some(true)),
                dev("mlx5_1", Some(true)),
                dev("mlx5_2", Some(true)),
                dev("mlx5_9", None),
            ],
        });
        let got: Vec<(String, String)> = findings(&r)
            .into_iter()
            .filter(|f| f.id.starts_with("links.verbs"))
            .map(|f| (f.id, f.subject))
            .collect();
        assert_eq!(
            got,
            [
                ("links.verbs_missing_device".to_string(), "mlx5_3".to_string()),
                ("links.verbs_mismatch".to_string(), "mlx5_1".to_string()),
                ("links.verbs_mismatch".to_string(), "mlx5_9".to_string()),
            ]
        );
        // ENOSYS with no sysfs devices (this CI machine) is no verbs finding (nothing to judge
        // is said on its own).
        let none = LinksReport {
            rdma: r.rdma.clone(),
            devices: Vec::new(),
            sample: None,
            verbs: Some(VerbsView {
                error: Some("ENOSYS".into()),
                devices: Vec::new(),
            }),
        };
        let ids: Vec<String> = findings(&none).into_iter().map(|f| f.id).collect();
        assert_eq!(ids, ["links.nothing_to_judge"]);
    }
}
