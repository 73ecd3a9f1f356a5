//! `qos`: lossless RoCE configuration and counters per RoCE netdev: PFC and ETS from DCB
//! netlink, trust mode (the APP table's DSCP entries), DCBX mode, the pause and pause-storm
//! counters of `ethtool -S` (whose very presence says which priorities have PFC on), ECN /
//! DCQCN from the MLNX_OFED sysfs, CNP and ECN counters from `hw_counters`, and the RoCE
//! traffic class; then the questions a person asks: is RoCE's priority lossless, is ECN on
//! for it, is anything else lossless by accident, is global pause mixed in, is it storming,
//! do CNPs flow when ECN marks do.

use serde::Serialize;

use crate::finding::{Finding, Rule, Severity, judge_each};
use crate::host::{Host, Reply};
use crate::nccl::settings::Sourced;
use crate::probe::gids::{RdmaPresence, presence};
use crate::sysfs::dcb::{self, DcbIeee};
use crate::sysfs::infiniband as ib;
use crate::sysfs::lldp;
use crate::sysfs::netqos::{self, EcnSysfs, PauseKind, PauseName};

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct QosReport {
    pub rdma: RdmaPresence,
    pub interfaces: Vec<QosIf>,
    /// Where the first sample came from, when counters carry deltas.
    pub sample: Option<Sample>,
    pub notes: Vec<String>,
}

/// Where the first sample came from: one type with `links`, so a reboot between the
/// samples is told the same way in both.
pub use crate::probe::links::SampleInfo as Sample;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct QosIf {
    pub ifname: String,
    /// The RDMA device and port on this netdev (none for a netdev named with --ifname).
    pub rdma_device: Option<String>,
    pub rdma_port: Option<u32>,
    pub dcb: DcbView,
    pub ethtool: EthtoolView,
    /// `None`: no `ecn/` sysfs (inbox driver), so ECN state is unknown, not off.
    pub ecn: Option<EcnSysfs>,
    pub ecn_unknown_reason: Option<String>,
    pub roce: RoceClass,
    /// One row per priority 0-7.
    pub priorities: Vec<PrioRow>,
    pub global_pause: Option<PauseCounters>,
    pub pause_storm: StormCounters,
    /// `hw_counters` of the RDMA port: `np_ecn_marked_roce_packets`, `np_cnp_sent`,
    /// `rp_cnp_handled`, `rp_cnp_ignored`.
    pub cnp: Vec<NamedCount>,
    /// What the switch port says over LLDP (only with `--lldp`).
    pub switch: Option<SwitchView>,
    /// The netdev's MTU (`/sys/class/net/<if>/mtu`), read here so that `check` judges
    /// `roce.mtu` from the report and never reads the host; not in qos's JSON.
    #[serde(skip)]
    pub netdev_mtu: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SwitchView {
    /// Seconds listened (0 for a snapshot's recorded frames).
    pub waited_s: f64,
    /// The socket error (`EPERM` without CAP_NET_RAW), or `not_captured`.
    pub error: Option<String>,
    /// The last LLDPDU heard; `None` when nothing arrived.
    pub lldp: Option<lldp::Lldpdu>,
    /// Why nothing arrived, in words.
    pub none_reason: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DcbView {
    /// The errno DCB netlink answered (`EOPNOTSUPP`: the driver has no DCB ops), or
    /// `not_captured` for a snapshot without `fabprobe/dcb.json`.
    pub error: Option<String>,
    /// Priorities with PFC on (`ieee_pfc.pfc_en`).
    pub pfc_enabled: Option<Vec<u8>>,
    pub pfc_delay: Option<u16>,
    /// `dscp` when the APP table has DSCP entries, else `pcp`; `None` without DCB.
    pub trust: Option<String>,
    /// (dscp, priority) pairs of the APP table.
    pub dscp2prio: Vec<(u8, u8)>,
    pub dcbx_mode: Option<String>,
    pub ets: Option<dcb::Ets>,
    pub buffer: Option<dcb::DcbBuffer>,
    pub notes: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EthtoolView {
    pub error: Option<String>,
    pub counters_total: usize,
    /// Priorities that have pause counters (mlx5 prints them only where PFC is on).
    pub pfc_priorities_from_counters: Vec<u8>,
    /// Whether `*_global_pause*` counters are present (global pause on).
    pub global_pause_counters: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RoceClass {
    /// The IP traffic class (ToS byte) RoCE traffic carries.
    pub traffic_class: Option<u32>,
    /// `tc/<port>/traffic_class`, `NCCL_IB_TC`, or `default` (NCCL's 0).
    pub traffic_class_source: String,
    pub dscp: Option<u8>,
    /// The priority the NIC gives that traffic (DSCP through the APP table under trust
    /// dscp); `None` under trust pcp (it comes from the VLAN PCP) or without DCB.
    pub priority: Option<u8>,
    pub priority_source: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Count {
    pub value: Option<u64>,
    pub delta: Option<u64>,
    pub rate_per_s: Option<f64>,
    /// The counter is lower than in the first sample (cleared, or a driver reload).
    pub went_backwards: bool,
}

impl Count {
    fn of(v: Option<u64>) -> Count {
        Count {
            value: v,
            ..Count::default()
        }
    }
    /// The delta when sampled, else the value (since the counters were last cleared).
    pub fn moved(&self) -> Option<u64> {
        self.delta.or(if self.went_backwards { None } else { self.value })
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PauseCounters {
    pub rx_pause: Count,
    pub rx_pause_duration_us: Count,
    pub tx_pause: Count,
    pub tx_pause_duration_us: Count,
    pub rx_pause_transition: Count,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PrioRow {
    pub priority: u8,
    pub pfc_dcb: Option<bool>,
    pub pfc_counters: Option<bool>,
    pub ets_tc: Option<u8>,
    pub ecn_rp: Option<bool>,
    pub ecn_np: Option<bool>,
    /// RoCE traffic uses this priority.
    pub roce: bool,
    pub pause: Option<PauseCounters>,
    pub rx_marked: Option<Count>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StormCounters {
    pub tx_pause_storm_warning_events: Option<Count>,
    pub tx_pause_storm_error_events: Option<Count>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NamedCount {
    pub name: String,
    #[serde(flatten)]
    pub count: Count,
}

/// A priority paused for at least this share of a sample is reported: heavy, sustained
/// back-pressure (a stated heuristic; brief bursts of PFC are normal).
pub(crate) const PAUSED_SHARE_WARN: f64 = 0.25;

pub(crate) const CNP_COUNTERS: &[&str] = &[
    "np_ecn_marked_roce_packets",
    "np_cnp_sent",
    "rp_cnp_handled",
    "rp_cnp_ignored",
];

fn reply_error<T>(r: &Reply<T>) -> Option<String> {
    match r {
        Reply::Ok(_) => None,
        Reply::Error(e) => Some(e.clone()),
        Reply::NotCaptured => Some("not_captured".into()),
    }
}

/// What `qos` says when neither NCCL nor the device names RoCE's traffic class.
pub(crate) const PRIORITY_UNKNOWN: &str =
    "RoCE priority unknown (no NCCL_IB_TC in the environment or conf files, no per-port traffic_class)";

/// The RoCE netdev(s) of one RDMA port: the PCI function's netdev, the `parent` of a
/// virtual device (rxe), else the netdev its GIDs name (`gid_attrs/ndevs`, as show_gids
/// reads them); a bond stands for its members, where PFC and the counters live.
fn port_netdevs(host: &Host, dev: &str, p: u32, n_ports: usize, pci: &[String]) -> Vec<String> {
    let found = ib::port_netdev(host, dev, p, n_ports, pci)
        .or_else(|| {
            // Soft-RoCE (rxe) and other virtual devices name their netdev in `parent`.
            host.attr(format!("{}/parent", ib::dev_dir(dev)))
                .value()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        })
        .or_else(|| gid_ndev(host, dev, p));
    let Some(n) = found else { return Vec::new() };
    match lag_members(host, &n) {
        Some(m) if !m.is_empty() => m,
        _ => vec![n],
    }
}

/// The netdev of the port's first GID that names one (index 0 is the port's own netdev).
fn gid_ndev(host: &Host, dev: &str, p: u32) -> Option<String> {
    let dir = format!("{}/gid_attrs/ndevs", ib::port_dir(dev, p));
    let mut idx: Vec<u32> = host
        .list_dir(&dir)
        .ok()
        .flatten()?
        .iter()
        .filter_map(|n| n.parse().ok())
        .collect();
    idx.sort_unstable();
    idx.iter().find_map(|i| {
        host.attr(format!("{dir}/{i}"))
            .value()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    })
}

/// The members of the bond `n` is or belongs to (`bonding/slaves`), `None` outside a bond.
fn lag_members(host: &Host, n: &str) -> Option<Vec<String>> {
    let slaves = |b: &str| {
        host.attr(format!("/sys/class/net/{b}/bonding/slaves"))
            .value()
            .map(|s| s.split_whitespace().map(str::to_string).collect::<Vec<_>>())
    };
    if let Some(m) = slaves(n) {
        return Some(m);
    }
    let all = host.list_dir("/sys/class/net").ok().flatten()?;
    all.iter()
        .filter_map(|b| slaves(b))
        .find(|m| m.iter().any(|x| x == n))
}

/// The RoCE netdevs of the host (Ethernet link layer RDMA ports), each probed. `tc`: the
/// job's `NCCL_IB_TC` from the settings model (`None`: no source sets it).
pub fn probe(host: &Host, tc: Option<&Sourced<u32>>) -> QosReport {
    let (rdma, names) = presence(host);
    let mut notes = Vec::new();
    let mut interfaces = Vec::new();
    for dev in &names {
        let attrs = ib::read_device(host, dev);
        let ports = ib::list_ports(host, dev);
        for &p in &ports {
            let pa = ib::read_port(host, dev, p);
            if pa.link_layer.as_deref() != Some("Ethernet") {
                continue;
            }
            let members = port_netdevs(host, dev, p, ports.len(), &attrs.pci_netdevs);
            if members.is_empty() {
                notes.push(format!(
                    "{dev}/{p}: RoCE port without a netdev (none under the PCI device, no parent, no gid_attrs/ndevs entry)"
                ));
            }
            for (k, n) in members.iter().enumerate() {
                let mut i = probe_if(host, n, Some((dev.as_str(), p)), tc);
                if k > 0 {
                    // The RDMA port's CNP counters are the bond's, shown once (first member).
                    i.cnp.clear();
                }
                interfaces.push(i);
            }
        }
    }
    if rdma.devices_found && interfaces.is_empty() {
        notes.push("no RoCE port (Ethernet link layer) among the RDMA devices".into());
    }
    QosReport {
        rdma,
        interfaces,
        sample: None,
        notes,
    }
}

/// Named netdevs (`--ifname`), with or without RDMA.
pub(crate) fn probe_ifnames(host: &Host, ifnames: &[String], tc: Option<&Sourced<u32>>) -> QosReport {
    let (rdma, names) = presence(host);
    let mut owner = std::collections::HashMap::new();
    for dev in &names {
        let attrs = ib::read_device(host, dev);
        let ports = ib::list_ports(host, dev);
        for &p in &ports {
            for n in port_netdevs(host, dev, p, ports.len(), &attrs.pci_netdevs) {
                owner.entry(n).or_insert((dev.clone(), p));
            }
        }
    }
    let mut notes = Vec::new();
    let interfaces = ifnames
        .iter()
        .filter(|n| {
            let ok = host.exists(format!("/sys/class/net/{n}"));
            if !ok {
                notes.push(format!("{n}: no such netdev in /sys/class/net"));
            }
            ok
        })
        .map(|n| {
            let o = owner.get(n);
            probe_if(host, n, o.map(|(d, p)| (d.as_str(), *p)), tc)
        })
        .collect();
    QosReport {
        rdma,
        interfaces,
        sample: None,
        notes,
    }
}

fn dcb_view(host: &Host, ifname: &str) -> (DcbView, Option<DcbIeee>) {
    let reply = host.dcb_ieee(ifname);
    let parsed = match &reply {
        Reply::Ok(b) => Some(dcb::parse_ieee_reply(b)),
        _ => None,
    };
    let v = match &parsed {
        None => DcbView {
            error: reply_error(&reply),
            pfc_enabled: None,
            pfc_delay: None,
            trust: None,
            dscp2prio: Vec::new(),
            dcbx_mode: None,
            ets: None,
            buffer: None,
            notes: Vec::new(),
        },
        Some(d) => {
            let map = d.dscp_map();
            DcbView {
                error: None,
                pfc_enabled: d
                    .pfc
                    .as_ref()
                    .map(|p| (0..8u8).filter(|i| p.pfc_en & (1 << i) != 0).collect()),
                pfc_delay: d.pfc.as_ref().map(|p| p.delay),
                trust: Some(if map.is_empty() { "pcp" } else { "dscp" }.into()),
                dscp2prio: map,
                dcbx_mode: d.dcbx.map(|b| dcb::dcbx_mode(b).to_string()),
                ets: d.ets.clone(),
                buffer: d.buffer.clone(),
                notes: d.notes.clone(),
            }
        }
    };
    (v, parsed)
}

/// The pause, ECN-marked and pause storm counters of one netdev's ethtool statistics, by
/// priority where the name has one.
#[derive(Default)]
struct EthtoolCounters {
    prio_pause: [Option<PauseCounters>; 8],
    global: Option<PauseCounters>,
    marked: [Option<Count>; 8],
    storm: StormCounters,
}

impl EthtoolCounters {
    fn of(list: &[(String, u64)]) -> EthtoolCounters {
        let mut e = EthtoolCounters::default();
        for (name, v) in list {
            if let Some(PauseName::Pause { prio, tx, kind }) = netqos::parse_pause_name(name) {
                let slot = match prio {
                    Some(p) => e.prio_pause[p as usize].get_or_insert_with(PauseCounters::default),
                    None => e.global.get_or_insert_with(PauseCounters::default),
                };
                let c = Count::of(Some(*v));
                match (tx, kind) {
                    (false, PauseKind::Frames) => slot.rx_pause = c,
                    (false, PauseKind::DurationUs) => slot.rx_pause_duration_us = c,
                    (true, PauseKind::Frames) => slot.tx_pause = c,
                    (true, PauseKind::DurationUs) => slot.tx_pause_duration_us = c,
                    (_, PauseKind::Transition) => slot.rx_pause_transition = c,
                }
            } else if let Some(p) = netqos::parse_marked_name(name) {
                e.marked[p as usize] = Some(Count::of(Some(*v)));
            } else if name == "tx_pause_storm_warning_events" {
                e.storm.tx_pause_storm_warning_events = Some(Count::of(Some(*v)));
            } else if name == "tx_pause_storm_error_events" {
                e.storm.tx_pause_storm_error_events = Some(Count::of(Some(*v)));
            }
        }
        e
    }
}

/// The RoCE congestion-control hw_counters the port has (an absent one is left out).
fn cnp_counters(host: &Host, dev: &str, port: u32) -> Vec<NamedCount> {
    CNP_COUNTERS
        .iter()
        .filter_map(|n| {
            let a = host.attr(format!("{}/hw_counters/{n}", ib::port_dir(dev, port)));
            let v = a.value()?.trim().parse::<u64>().ok();
            Some(NamedCount {
                name: n.to_string(),
                count: Count::of(v),
            })
        })
        .collect()
}

fn probe_if(host: &Host, ifname: &str, rdma: Option<(&str, u32)>, tc: Option<&Sourced<u32>>) -> QosIf {
    let (dcb, parsed) = dcb_view(host, ifname);
    let stats = host.ethtool_stats(ifname);
    let list: &[(String, u64)] = match &stats {
        Reply::Ok(v) => v,
        _ => &[],
    };
    let EthtoolCounters {
        prio_pause,
        global,
        marked,
        storm,
    } = EthtoolCounters::of(list);
    let stats_ok = matches!(stats, Reply::Ok(_));
    let pfc_from_counters: Vec<u8> = (0..8u8).filter(|p| prio_pause[*p as usize].is_some()).collect();
    let ethtool = EthtoolView {
        error: reply_error(&stats),
        counters_total: list.len(),
        pfc_priorities_from_counters: pfc_from_counters.clone(),
        global_pause_counters: global.is_some(),
    };
    let ecn = netqos::read_ecn(host, ifname);
    let ecn_unknown_reason = ecn.is_none().then(|| {
        format!("unknown (inbox driver): /sys/class/net/{ifname}/ecn is absent (MLNX_OFED's ECN sysfs)")
    });
    let roce = roce_class(host, rdma, parsed.as_ref(), tc);
    // The counter set encodes PFC only for a driver that prints per-priority counters at all.
    let mlx5_like = list
        .iter()
        .any(|(n, _)| n.starts_with("rx_prio0_") || n.ends_with("_phy"));
    let priorities = (0..8u8)
        .map(|p| PrioRow {
            priority: p,
            pfc_dcb: dcb.pfc_enabled.as_ref().map(|v| v.contains(&p)),
            pfc_counters: (stats_ok && mlx5_like).then(|| pfc_from_counters.contains(&p)),
            ets_tc: dcb.ets.as_ref().map(|e| e.prio_tc[p as usize]),
            ecn_rp: ecn.as_ref().map(|e| e.rp_enabled.contains(&p)),
            ecn_np: ecn.as_ref().map(|e| e.np_enabled.contains(&p)),
            roce: roce.priority == Some(p),
            pause: prio_pause[p as usize].clone(),
            rx_marked: marked[p as usize].clone(),
        })
        .collect();
    let cnp = rdma
        .map(|(dev, port)| cnp_counters(host, dev, port))
        .unwrap_or_default();
    QosIf {
        ifname: ifname.to_string(),
        rdma_device: rdma.map(|(d, _)| d.to_string()),
        rdma_port: rdma.map(|(_, p)| p),
        dcb,
        ethtool,
        ecn,
        ecn_unknown_reason,
        roce,
        priorities,
        global_pause: global,
        pause_storm: storm,
        cnp,
        switch: None,
        netdev_mtu: crate::sysfs::net::read_mtu(host, ifname),
    }
}

/// Listen for the switch's LLDP on every interface of the report at once (live: up to
/// `wait`; a snapshot replays `fabprobe/lldp.json`).
pub(crate) fn add_lldp(host: &Host, r: &mut QosReport, wait: std::time::Duration) {
    let names: Vec<String> = r.interfaces.iter().map(|i| i.ifname.clone()).collect();
    let replies: Vec<Reply<Vec<Vec<u8>>>> = std::thread::scope(|s| {
        let hs: Vec<_> = names
            .iter()
            .map(|n| s.spawn(move || host.lldp_frames(n, wait)))
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or(Reply::Error("listener thread failed".into())))
            .collect()
    });
    let waited_s = if host.is_live() { wait.as_secs_f64() } else { 0.0 };
    for (i, reply) in r.interfaces.iter_mut().zip(replies) {
        let mut v = SwitchView {
            waited_s,
            error: reply_error(&reply),
            lldp: None,
            none_reason: None,
        };
        if let Reply::Ok(frames) = reply {
            let mut notes = Vec::new();
            for f in &frames {
                match lldp::parse_frame(f) {
                    Ok(d) => v.lldp = Some(d),
                    Err(e) => notes.push(e),
                }
            }
            if v.lldp.is_none() {
                v.none_reason = Some(if frames.is_empty() {
                    format!(
                        "no LLDP frame arrived on {} within {waited_s:.0} s: the switch may not run LLDP on this port, or the NIC's firmware LLDP agent consumes the frames before the host sees them (mlx5 with DCBX firmware controlled, Intel with the firmware LLDP agent on)",
                        i.ifname
                    )
                } else {
                    format!("frames arrived but none decoded: {}", notes.join("; "))
                });
            }
        }
        if v.error.as_deref() == Some("EPERM") {
            v.none_reason = Some("listening for LLDP needs CAP_NET_RAW: run as root".into());
        }
        i.switch = Some(v);
    }
}

fn roce_class(
    host: &Host,
    rdma: Option<(&str, u32)>,
    dcb: Option<&DcbIeee>,
    nccl: Option<&Sourced<u32>>,
) -> RoceClass {
    let from_file = rdma.and_then(|(dev, port)| {
        let path = format!("{}/tc/{port}/traffic_class", ib::dev_dir(dev));
        host.attr(&path)
            .value()
            .and_then(netqos::parse_traffic_class)
            .map(|v| (v, path.clone()))
    });
    // NCCL sets the QP's traffic class from NCCL_IB_TC; the tc file is the device default
    // for connections that do not set one (rdma_cm), so NCCL's variable wins when set.
    // The settings model reads NCCL_IB_TC as NCCL does (strtoll, low 8 bits), so a value
    // that reaches here is always a traffic class.
    let (tc, src) = match nccl.map(|t| (t.value, t.from.clone())).or(from_file) {
        Some((v, s)) => (Some(v), s),
        None => (None, PRIORITY_UNKNOWN.to_string()),
    };
    let dscp = tc.map(|t| (t >> 2) as u8);
    let (priority, priority_source) = match (dcb, dscp) {
        (Some(d), Some(ds)) => {
            let map = d.dscp_map();
            if map.is_empty() {
                (
                    None,
                    "trust pcp: the priority is the VLAN PCP of the RoCE traffic (not visible here)"
                        .to_string(),
                )
            } else {
                match map.iter().find(|(x, _)| *x == ds) {
                    Some((_, p)) => (
                        Some(*p),
                        format!("dscp {ds} -> priority {p} (DCB APP table, trust dscp)"),
                    ),
                    None => (None, format!("dscp {ds} has no entry in the DCB APP table")),
                }
            }
        }
        (None, _) => (None, "unknown: no DCB answer for this netdev".to_string()),
        (_, None) => (None, src.clone()),
    };
    RoceClass {
        traffic_class: tc,
        traffic_class_source: src,
        dscp,
        priority,
        priority_source,
    }
}

// ---------------------------------------------------------------------------------------
// Deltas
// ---------------------------------------------------------------------------------------

fn delta(c: &mut Count, before: Option<&Count>, secs: Option<f64>) {
    let (Some(b), Some(a)) = (before.and_then(|x| x.value), c.value) else {
        return;
    };
    if a < b {
        c.went_backwards = true;
        return;
    }
    c.delta = Some(a - b);
    c.rate_per_s = secs.filter(|s| *s > 0.0).map(|s| (a - b) as f64 / s);
}

fn delta_pause(p: &mut PauseCounters, b: Option<&PauseCounters>, s: Option<f64>) {
    delta(&mut p.rx_pause, b.map(|x| &x.rx_pause), s);
    delta(&mut p.rx_pause_duration_us, b.map(|x| &x.rx_pause_duration_us), s);
    delta(&mut p.tx_pause, b.map(|x| &x.tx_pause), s);
    delta(&mut p.tx_pause_duration_us, b.map(|x| &x.tx_pause_duration_us), s);
    delta(&mut p.rx_pause_transition, b.map(|x| &x.rx_pause_transition), s);
}

/// Fill `after`'s counters with deltas and rates from `before` (same netdev).
/// After a reboot between them (`sample.counters_reset`) no delta is taken: the counters
/// are read as one sample.
pub(crate) fn apply_deltas(after: &mut QosReport, before: &QosReport, sample: Sample) {
    let s = sample.interval_s;
    if sample.counters_reset.is_some() {
        after.sample = Some(sample);
        return;
    }
    for i in &mut after.interfaces {
        let Some(b) = before.interfaces.iter().find(|x| x.ifname == i.ifname) else {
            continue;
        };
        for (row, brow) in i.priorities.iter_mut().zip(&b.priorities) {
            if let Some(p) = &mut row.pause {
                delta_pause(p, brow.pause.as_ref(), s);
            }
            if let Some(m) = &mut row.rx_marked {
                delta(m, brow.rx_marked.as_ref(), s);
            }
        }
        if let Some(g) = &mut i.global_pause {
            delta_pause(g, b.global_pause.as_ref(), s);
        }
        if let Some(c) = &mut i.pause_storm.tx_pause_storm_warning_events {
            delta(c, b.pause_storm.tx_pause_storm_warning_events.as_ref(), s);
        }
        if let Some(c) = &mut i.pause_storm.tx_pause_storm_error_events {
            delta(c, b.pause_storm.tx_pause_storm_error_events.as_ref(), s);
        }
        for c in &mut i.cnp {
            let prev = b.cnp.iter().find(|x| x.name == c.name).map(|x| &x.count);
            delta(&mut c.count, prev, s);
        }
    }
    after.sample = Some(sample);
}

// ---------------------------------------------------------------------------------------
// Findings
// ---------------------------------------------------------------------------------------

fn list(v: &[u8]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(",")
    }
}

fn pfc_arg(prios: &[u8]) -> String {
    (0..8u8)
        .map(|p| if prios.contains(&p) { "1" } else { "0" })
        .collect::<Vec<_>>()
        .join(",")
}

/// Counters that went backwards: notes a person should know, not faults.
pub(crate) fn backwards_notes(r: &QosReport) -> Vec<String> {
    let mut out = Vec::new();
    for i in &r.interfaces {
        let mut names = Vec::new();
        for row in &i.priorities {
            if let Some(p) = &row.pause {
                for (n, c) in [
                    ("rx_pause", &p.rx_pause),
                    ("tx_pause", &p.tx_pause),
                    ("rx_pause_duration", &p.rx_pause_duration_us),
                    ("tx_pause_duration", &p.tx_pause_duration_us),
                ] {
                    if c.went_backwards {
                        names.push(format!("{}_prio{}_{}", &n[..2], row.priority, &n[3..]));
                    }
                }
            }
        }
        for c in &i.cnp {
            if c.count.went_backwards {
                names.push(c.name.clone());
            }
        }
        if !names.is_empty() {
            out.push(format!(
                "{}: counters went backwards since the first sample (cleared or driver reloaded): {}; no delta for them",
                i.ifname,
                names.join(", ")
            ));
        }
    }
    out
}

/// An interface as the `qos` rules see it.
pub struct If<'a> {
    pub r: &'a QosReport,
    pub i: &'a QosIf,
    /// `eth2 (mlx5_2/1)`: the netdev, and its port as every command spells a port.
    pub subj: String,
    /// The priorities with PFC on: DCB's answer, else the driver's counter set when it keeps
    /// one for every priority; None when neither tells.
    pub pfc: Option<Vec<u8>>,
}

/// A rule's judge: one interface's findings, added to the list.
pub(crate) type RuleFn = fn(&If, &mut Vec<Finding>);

/// What makes RoCE lossy or slow on an interface, in the order its findings are listed.
pub static RULES: &[Rule<RuleFn>] = &[
    Rule {
        ids: &["qos.nothing_to_judge"],
        severity: &[Severity::Unknown],
        about: "no RoCE netdev showed up (no RDMA device, or InfiniBand ports only) and none \
                named with --ifname, or no netdev it looked at gave a QoS reading (no DCB \
                answer, no pause counters, no ecn/ sysfs): nothing was judged, NOT EVALUATED \
                (exit 3)",
        judge: qos_nothing,
    },
    Rule {
        ids: &["qos.nic_not_in_rdma", "qos.rdma_driver_not_loaded"],
        severity: &[Severity::Unknown],
        about: "a NIC in the PCI tree that registered no RDMA device (topo.nic_not_in_rdma; every NIC of a \
                module that is not loaded in one finding, as topo.rdma_driver_not_loaded): \
                named by its bus ID and netdev; RoCE cannot run on it, its RDMA port's traffic \
                class and CNP counters are unread, and whether it is lossless is not judged \
                (its netdev's DCB and pause counters: qos --ifname)",
        judge: qos_nothing,
    },
    Rule {
        ids: &["qos.counters_reset"],
        severity: &[Severity::Unknown],
        about: "(--interval/--baseline) the host rebooted between the samples: no deltas, \
                the counters are read as one sample",
        judge: counters_reset,
    },
    Rule {
        ids: &["qos.switch_pfc_mismatch"],
        severity: &[Severity::Fail],
        about: "(--lldp) the switch's PFC priorities differ from the host's",
        judge: switch_pfc_mismatch,
    },
    Rule {
        ids: &["qos.roce_priority_not_lossless"],
        severity: &[Severity::Warn, Severity::Fail],
        about: "RoCE's priority has no PFC (fail when PFC is on elsewhere, warn when on nowhere: \
                lossy RoCE, also when RoCE's priority is unknown)",
        judge: roce_priority_not_lossless,
    },
    Rule {
        ids: &["qos.extra_lossless_priority"],
        severity: &[Severity::Warn],
        about: "PFC on priorities RoCE does not use",
        judge: extra_lossless_priority,
    },
    Rule {
        ids: &["qos.ecn_off_on_roce_priority"],
        severity: &[Severity::Warn],
        about: "ECN reaction or notification point off for RoCE's priority",
        judge: ecn_off_on_roce_priority,
    },
    Rule {
        ids: &["qos.roce_priority_unknown"],
        severity: &[Severity::Unknown],
        about: "RoCE's priority unknown while PFC is on somewhere",
        judge: roce_priority_unknown,
    },
    Rule {
        ids: &["qos.ecn_off_on_lossless_priority"],
        severity: &[Severity::Warn],
        about: "(RoCE's priority unknown) ECN not on for a lossless priority",
        judge: ecn_off_on_lossless_priority,
    },
    Rule {
        ids: &["qos.global_pause_with_pfc"],
        severity: &[Severity::Fail],
        about: "global pause counters present while PFC is on",
        judge: global_pause_with_pfc,
    },
    Rule {
        ids: &["qos.pfc_dcb_counters_disagree"],
        severity: &[Severity::Warn],
        about: "DCB's pfc_en and the driver's counter set differ",
        judge: pfc_dcb_counters_disagree,
    },
    Rule {
        ids: &["qos.pause_storm"],
        severity: &[Severity::Warn, Severity::Fail],
        about: "tx_pause_storm_error_events (fail) / _warning_events (warn) moved (in the sample, \
                else since cleared)",
        judge: pause_storm,
    },
    Rule {
        ids: &["qos.pause_time_high"],
        severity: &[Severity::Warn],
        about: "a priority paused >= 25% of a sample (--interval/--baseline)",
        judge: pause_time_high,
    },
    Rule {
        ids: &["qos.ecn_marks_without_cnps"],
        severity: &[Severity::Warn],
        about: "ECN-marked packets arrived, no CNP was sent",
        judge: ecn_marks_without_cnps,
    },
];

/// Judge every interface by [`RULES`].
pub(crate) fn findings(r: &QosReport) -> Vec<Finding> {
    let mut out = Vec::new();
    for i in &r.interfaces {
        let x = If {
            r,
            i,
            subj: match (&i.rdma_device, i.rdma_port) {
                (Some(d), Some(p)) => format!("{} ({})", i.ifname, crate::finding::spell::port(d, p)),
                _ => i.ifname.clone(),
            },
            pfc: i.dcb.pfc_enabled.clone().or_else(|| {
                i.priorities
                    .iter()
                    .all(|p| p.pfc_counters.is_some())
                    .then(|| i.ethtool.pfc_priorities_from_counters.clone())
            }),
        };
        judge_each(RULES, |j| Some(*j), &x, &mut out);
    }
    if r.interfaces.is_empty() && r.rdma.unreadable.is_none() {
        let (fact, why) = match &r.rdma.message {
            Some(m) => (crate::finding::MissingFact::RdmaDevice, m.clone()),
            None => (
                crate::finding::MissingFact::RoceNetdev,
                "no RoCE netdev: the RDMA ports are not Ethernet".into(),
            ),
        };
        out.push(crate::finding::nothing_to_judge(
            "qos",
            "host",
            Some(fact),
            format!("nothing to judge: {why}"),
        ));
    }
    if let Some(f) = nothing_read(r) {
        out.push(f);
    }
    let unread = "RoCE cannot run on it, its RDMA port's traffic class and CNP counters cannot be read, so whether RoCE would be lossless on it is not judged (PFC, ETS and the pause counters are the netdev's: `fabprobe qos --ifname {netdev}`)";
    crate::probe::topo::unlisted_findings("qos", unread, &r.rdma.not_in_rdma, &mut out);
    crate::probe::topo::say_moved(&mut out, &r.rdma.names_moved);
    out
}

/// Every interface looked at, none with a QoS reading (no DCB answer, no driver counters, no
/// `ecn/` sysfs: a snapshot without them, a driver without DCB ops): no rule had a fact to
/// judge, which is NOT EVALUATED naming what was unread, never a pass.
fn nothing_read(r: &QosReport) -> Option<Finding> {
    let unread = |i: &QosIf| i.dcb.pfc_enabled.is_none() && i.ethtool.counters_total == 0 && i.ecn.is_none();
    if r.interfaces.is_empty() || !r.interfaces.iter().all(unread) {
        return None;
    }
    // Netdevs unread for the same reasons are named together.
    let mut by_why: Vec<(String, Vec<&str>)> = Vec::new();
    for i in &r.interfaces {
        let err = |e: &Option<String>| e.clone().unwrap_or_else(|| "no answer".into());
        let why = format!(
            "DCB: {}; ethtool -S: {}; no ecn/ sysfs",
            err(&i.dcb.error),
            err(&i.ethtool.error)
        );
        match by_why.iter_mut().find(|(w, _)| *w == why) {
            Some((_, names)) => names.push(&i.ifname),
            None => by_why.push((why, vec![&i.ifname])),
        }
    }
    let said: Vec<String> = by_why
        .iter()
        .map(|(why, names)| format!("{} ({why})", names.join(", ")))
        .collect();
    let why = format!(
        "nothing to judge: no QoS reading of {}: PFC, pause counters and ECN unknown",
        said.join("; ")
    );
    Some(crate::finding::nothing_to_judge(
        "qos",
        "host",
        Some(crate::finding::MissingFact::QosReading),
        why,
    ))
}

/// Said by [`findings`] itself: when there is no interface no [`If`] is judged, and a NIC
/// with no RDMA device has no RDMA port to be an [`If`] of.
fn qos_nothing(_: &If, _: &mut Vec<Finding>) {}

fn counters_reset(x: &If, out: &mut Vec<Finding>) {
    let Some(smp) = &x.r.sample else { return };
    let Some(why) = &smp.counters_reset else { return };
    out.push(
        Finding::new(
            "qos.counters_reset",
            Severity::Unknown,
            &x.subj,
            format!("not evaluated: the counters were reset: {why}; no deltas, the counters are read as one sample"),
        )
        .evidence("baseline", smp.baseline.clone())
        .fix("take a new baseline now (`fabprobe snapshot`) and compare a later snapshot with it"),
    );
}

fn switch_pfc_mismatch(x: &If, out: &mut Vec<Finding>) {
    let i = x.i;
    // The switch's PFC against the host's.
    if let (Some(host_pfc), Some(sw)) = (&x.pfc, i.switch.as_ref().and_then(|s| s.lldp.as_ref()))
        && let Some(sp) = &sw.pfc
    {
        let sw_prios = sp.priorities();
        if &sw_prios != host_pfc {
            let who = format!(
                "switch {} {}",
                sw.system_name.as_deref().unwrap_or(&sw.source_mac),
                sw.port_id.as_deref().unwrap_or("?")
            );
            out.push(
                    Finding::new(
                        "qos.switch_pfc_mismatch",
                        Severity::Fail,
                        &x.subj,
                        format!(
                            "{who} enables PFC on priority {}, this host on priority {}",
                            list(&sw_prios),
                            list(host_pfc)
                        ),
                    )
                    .evidence("switch_pfc", list(&sw_prios))
                    .evidence("host_pfc", list(host_pfc))
                    .evidence("switch_willing", sp.willing)
                    .fix(format!(
                        "agree on one lossless priority on both sides: to follow the switch, `mlnx_qos -i {0} --pfc {1}` (MLNX_OFED) or `dcb pfc set dev {0} prio-pfc {2}` (iproute2); or change the switch port's PFC configuration",
                        i.ifname,
                        pfc_arg(&sw_prios),
                        (0..8u8)
                            .filter(|p| sw_prios.contains(p) || host_pfc.contains(p))
                            .map(|p| format!("{p}:{}", if sw_prios.contains(&p) { "on" } else { "off" }))
                            .collect::<Vec<_>>()
                            .join(" ")
                    )),
                );
        }
    }
}

fn global_pause_with_pfc(x: &If, out: &mut Vec<Finding>) {
    let i = x.i;
    // Global pause mixed with PFC.
    let pfc_on = x.pfc.as_ref().is_some_and(|v| !v.is_empty());
    if i.ethtool.global_pause_counters && pfc_on {
        out.push(
            Finding::new(
                "qos.global_pause_with_pfc",
                Severity::Fail,
                &x.subj,
                "global pause (802.3x) is on together with PFC: a global pause stops every priority, lossy ones too",
            )
            .evidence("pfc_enabled", list(x.pfc.as_deref().unwrap_or(&[])))
            .fix(format!("`ethtool -A {} rx off tx off` (keep PFC only)", i.ifname)),
        );
    }
}

fn pfc_dcb_counters_disagree(x: &If, out: &mut Vec<Finding>) {
    let i = x.i;
    // PFC from DCB against the counter set.
    if let Some(d) = &i.dcb.pfc_enabled {
        let from_counters = &i.ethtool.pfc_priorities_from_counters;
        if i.priorities.iter().all(|p| p.pfc_counters.is_some()) && d != from_counters {
            out.push(
                Finding::new(
                    "qos.pfc_dcb_counters_disagree",
                    Severity::Warn,
                    &x.subj,
                    format!(
                        "DCB says PFC is on for priority {} but the driver keeps pause counters for priority {}",
                        list(d),
                        list(from_counters)
                    ),
                )
                .evidence("pfc_dcb", list(d))
                .evidence("pfc_counters", list(from_counters)),
            );
        }
    }
}

fn pause_storm(x: &If, out: &mut Vec<Finding>) {
    let i = x.i;
    // Pause storms.
    let sampled = x.r.sample.as_ref().is_some_and(|s| s.has_deltas());
    for (name, c, sev) in [
        (
            "tx_pause_storm_error_events",
            &i.pause_storm.tx_pause_storm_error_events,
            Severity::Fail,
        ),
        (
            "tx_pause_storm_warning_events",
            &i.pause_storm.tx_pause_storm_warning_events,
            Severity::Warn,
        ),
    ] {
        let Some(c) = c else { continue };
        let Some(n) = c.moved().filter(|n| *n > 0) else {
            continue;
        };
        let when = if sampled {
            "during the sample"
        } else {
            "since the counters were cleared"
        };
        let mut f = Finding::new(
            "qos.pause_storm",
            sev,
            &x.subj,
            format!(
                "{name} = {n} {when}: the NIC kept sending pause frames because it could not drain its receive buffer (a stalled host or PCIe), and its storm guard {}",
                if sev == Severity::Fail { "stopped sending pauses" } else { "is close to stepping in" }
            ),
        )
        .evidence(name, n)
        .fix("find what stops the receiver draining: `ethtool -S {if} | grep -e pause -e discard -e out_of_buffer`, PCIe errors (`fabprobe links`), a hung process or host; the storm guard's timeout: `ethtool --get-tunable {if} pfc-prevention-tout`".replace("{if}", &i.ifname));
        if let Some(v) = c.value {
            f = f.evidence(&format!("{name}_total"), v);
        }
        out.push(f);
        break;
    }
}

fn pause_time_high(x: &If, out: &mut Vec<Finding>) {
    let i = x.i;
    // Pause time per second over a sample: the share of time the port was paused.
    if let Some(secs) =
        x.r.sample
            .as_ref()
            .filter(|s| s.has_deltas())
            .and_then(|s| s.interval_s)
            .filter(|s| *s > 0.0)
    {
        for row in &i.priorities {
            let Some(p) = &row.pause else { continue };
            for (dir, c) in [("tx", &p.tx_pause_duration_us), ("rx", &p.rx_pause_duration_us)] {
                let Some(d) = c.delta else { continue };
                let share = d as f64 / (secs * 1e6);
                if share >= PAUSED_SHARE_WARN {
                    let who = if dir == "tx" {
                        "this port paused its link partner"
                    } else {
                        "the link partner paused this port"
                    };
                    out.push(
                        Finding::new(
                            "qos.pause_time_high",
                            Severity::Warn,
                            &x.subj,
                            format!(
                                "{who} {:.0}% of the time on priority {} over {secs:.0} s",
                                share.min(1.0) * 100.0,
                                row.priority
                            ),
                        )
                        .evidence(&format!("{dir}_prio{}_pause_duration_delta_us", row.priority), d)
                        .evidence("interval_s", secs),
                    );
                }
            }
        }
    }
}

fn ecn_marks_without_cnps(x: &If, out: &mut Vec<Finding>) {
    let i = x.i;
    // CNPs should flow when ECN marks do.
    let get = |n: &str| i.cnp.iter().find(|c| c.name == n).and_then(|c| c.count.moved());
    if let (Some(marked), Some(sent)) = (get("np_ecn_marked_roce_packets"), get("np_cnp_sent"))
        && marked > 0
        && sent == 0
    {
        out.push(
            Finding::new(
                "qos.ecn_marks_without_cnps",
                Severity::Warn,
                &x.subj,
                format!(
                    "{marked} ECN-marked RoCE packets arrived and no CNP was sent: the notification point is off, so senders never slow down"
                ),
            )
            .evidence("np_ecn_marked_roce_packets", marked)
            .evidence("np_cnp_sent", sent)
            .fix(match i.roce.priority {
                Some(p) => format!(
                    "enable the notification point for RoCE's priority {p}: `echo 1 > /sys/class/net/{}/ecn/roce_np/enable/{p}` (MLNX_OFED)",
                    i.ifname
                ),
                // No guessed priority in a command that runs as printed.
                None => format!(
                    "enable the notification point for RoCE's priority in /sys/class/net/{}/ecn/roce_np/enable/ (MLNX_OFED); \
                     the priority is unknown here (set NCCL_IB_TC or the port's tc/1/traffic_class to make it known)",
                    i.ifname
                ),
            }),
        );
    }
}

/// `, or /sys/class/infiniband/DEV/tc/PORT/traffic_class` for the netdev's RDMA port (the
/// MLNX_OFED per-port class file), named; nothing when the netdev has no RDMA port.
fn tc_file(i: &QosIf) -> String {
    match (&i.rdma_device, i.rdma_port) {
        (Some(d), Some(p)) => format!(", or /sys/class/infiniband/{d}/tc/{p}/traffic_class"),
        _ => String::new(),
    }
}

fn roce_priority_not_lossless(x: &If, out: &mut Vec<Finding>) {
    let (i, subj) = (x.i, &x.subj);
    let Some(pfc) = &x.pfc else { return };
    let Some(rp) = i.roce.priority else {
        // RoCE's priority unknown: PFC off everywhere is lossy whatever RoCE uses.
        if pfc.is_empty() {
            let why = i.roce.priority_source.clone();
            out.push(
                Finding::new(
                    "qos.roce_priority_not_lossless",
                    Severity::Warn,
                    subj,
                    format!("PFC is off on every priority, so RoCE is lossy whichever priority it uses ({why})"),
                )
                .evidence("pfc_enabled", "none")
                .evidence("priority_source", why.clone())
                .fix(format!(
                    "turn PFC on for the priority RoCE uses, as on the switch (dcb pfc set dev {} prio-pfc P:on); \
                     P is unknown here (set NCCL_IB_TC or the port's tc/1/traffic_class to make it known)",
                    i.ifname
                )),
            );
        }
        return;
    };
    if pfc.contains(&rp) {
        return;
    }
    let (sev, msg) = if pfc.is_empty() {
        (
            Severity::Warn,
            format!(
                "RoCE traffic uses priority {rp} and PFC is off on every priority: lossy RoCE, congestion drops packets unless ECN/DCQCN reacts first"
            ),
        )
    } else {
        (
            Severity::Fail,
            format!(
                "RoCE traffic uses priority {rp} but PFC is on for priority {} only: RoCE is not lossless and the lossless priority carries nothing",
                list(pfc)
            ),
        )
    };
    out.push(
        Finding::new("qos.roce_priority_not_lossless", sev, subj, msg)
            .evidence("roce_priority", rp)
            .evidence("pfc_enabled", list(pfc))
            .evidence("traffic_class", i.roce.traffic_class.unwrap_or(0))
            .evidence("priority_source", i.roce.priority_source.clone())
            .fix(format!(
                "make the host match the switch: `mlnx_qos -i {0} --pfc {1}` (MLNX_OFED) or `dcb pfc set dev {0} prio-pfc {rp}:on` (iproute2); or move RoCE to the lossless priority with NCCL_IB_TC{2}",
                i.ifname,
                pfc_arg(&[rp]),
                tc_file(i)
            )),
    );
}

/// Lossless priorities that RoCE does not use.
fn extra_lossless_priority(x: &If, out: &mut Vec<Finding>) {
    let i = x.i;
    let (Some(pfc), Some(rp)) = (&x.pfc, i.roce.priority) else {
        return;
    };
    let extra: Vec<u8> = pfc.iter().copied().filter(|p| *p != rp).collect();
    if extra.is_empty() || !pfc.contains(&rp) {
        return;
    }
    out.push(
        Finding::new(
            "qos.extra_lossless_priority",
            Severity::Warn,
            &x.subj,
            format!(
                "PFC is also on for priority {} which RoCE does not use: other traffic there can pause the link",
                list(&extra)
            ),
        )
        .evidence("pfc_enabled", list(pfc))
        .evidence("roce_priority", rp)
        .fix(format!("`mlnx_qos -i {} --pfc {}`", i.ifname, pfc_arg(&[rp]))),
    );
}

/// ECN on RoCE's known priority: both the reaction point (senders slow down) and the
/// notification point (receivers send CNPs) must be on for that priority itself.
fn ecn_off_on_roce_priority(x: &If, out: &mut Vec<Finding>) {
    let i = x.i;
    let (Some(e), Some(rp)) = (&i.ecn, i.roce.priority) else {
        return;
    };
    let rp_on = e.rp_enabled.contains(&rp);
    let np_on = e.np_enabled.contains(&rp);
    if rp_on && np_on {
        return;
    }
    out.push(
        Finding::new(
            "qos.ecn_off_on_roce_priority",
            Severity::Warn,
            &x.subj,
            format!(
                "ECN/DCQCN is not on for RoCE's priority {rp} (reaction point {}, notification point {}): ECN marks do not slow the senders down",
                if rp_on { "on" } else { "off" },
                if np_on { "on" } else { "off" }
            ),
        )
        .evidence("roce_rp_enabled", list(&e.rp_enabled))
        .evidence("roce_np_enabled", list(&e.np_enabled))
        .fix(format!(
            "echo 1 > /sys/class/net/{0}/ecn/roce_rp/enable/{rp}; echo 1 > /sys/class/net/{0}/ecn/roce_np/enable/{rp}",
            i.ifname
        )),
    );
}

/// The lossless priorities while RoCE's own is unknown: judged without blaming a guess.
fn unknown_priority_pfc<'a>(x: &'a If) -> Option<&'a [u8]> {
    x.pfc
        .as_deref()
        .filter(|pfc| x.i.roce.priority.is_none() && !pfc.is_empty())
}

fn roce_priority_unknown(x: &If, out: &mut Vec<Finding>) {
    let i = x.i;
    let Some(pfc) = unknown_priority_pfc(x) else {
        return;
    };
    let why = i.roce.priority_source.clone();
    out.push(
        Finding::new(
            "qos.roce_priority_unknown",
            Severity::Unknown,
            &x.subj,
            format!(
                "{why}: PFC is on for priority {}; whether RoCE uses it is not evaluated, ECN is judged on each lossless priority",
                list(pfc)
            ),
        )
        .evidence("pfc_enabled", list(pfc))
        .evidence("priority_source", why.clone())
        .fix(format!("set NCCL_IB_TC in the job's environment or /etc/nccl.conf (e.g. 106 = DSCP 26){}", tc_file(i))),
    );
}

fn ecn_off_on_lossless_priority(x: &If, out: &mut Vec<Finding>) {
    let i = x.i;
    let (Some(pfc), Some(e)) = (unknown_priority_pfc(x), &i.ecn) else {
        return;
    };
    let off: Vec<u8> = pfc
        .iter()
        .copied()
        .filter(|p| !e.rp_enabled.contains(p) || !e.np_enabled.contains(p))
        .collect();
    if off.is_empty() {
        return;
    }
    let prios = off.iter().map(u8::to_string).collect::<Vec<_>>().join(" ");
    out.push(
        Finding::new(
            "qos.ecn_off_on_lossless_priority",
            Severity::Warn,
            &x.subj,
            format!(
                "ECN/DCQCN is not on (reaction and notification point) for lossless priority {}: if RoCE runs there, ECN marks do not slow the senders down",
                list(&off)
            ),
        )
        .evidence("pfc_enabled", list(pfc))
        .evidence("rp_enabled", list(&e.rp_enabled))
        .evidence("np_enabled", list(&e.np_enabled))
        .fix(format!(
            "for p in {prios}; do echo 1 > /sys/class/net/{0}/ecn/roce_rp/enable/$p; echo 1 > /sys/class/net/{0}/ecn/roce_np/enable/$p; done",
            i.ifname
        )),
    );
}
