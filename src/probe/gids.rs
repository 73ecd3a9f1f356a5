//! `gids`: every GID of every RDMA port, with the index NCCL and perftest would pick.
//! Reads `/sys/class/infiniband/*/ports/*/{gids,gid_attrs}` through the host; findings for
//! the GID mistakes that break RoCE jobs (kernel `core/sysfs.c` and `core/cache.c`, `show_gids`, NCCL's `ncclIbGetGidIndex`).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::finding::{Finding, Rule, Severity, judge_each};
use crate::host::{Attr, Host};
use crate::nccl::gid::{self, GidChoice, GidEnv};
use crate::sysfs::infiniband::{self as ib, Gid, GidSlot, GidType};

/// Whether the host has RDMA devices at all, in words a person reads.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RdmaPresence {
    pub devices_found: bool,
    /// Why there is nothing to report (`no RDMA devices: ...`), when nothing was found.
    pub message: Option<String>,
    /// The error listing `/sys/class/infiniband` gave: whether there are devices is unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<String>,
    /// Device names ib_core moved past a NIC that did not register (`topo`'s
    /// `nics_not_in_rdma`): every command says them beside the name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names_moved: Vec<crate::probe::topo::MovedName>,
    /// NICs the PCI tree shows that registered no RDMA device (`topo`'s
    /// `nics_not_in_rdma`): every command names them, by bus ID and netdev.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_in_rdma: Vec<crate::probe::topo::NicNotInRdma>,
}

pub(crate) const NO_IB_KERNEL: &str = "no RDMA devices: the kernel has no InfiniBand support";

/// The RDMA devices of a host, or the reason there are none.
pub(crate) fn presence(host: &Host) -> (RdmaPresence, Vec<String>) {
    // A class directory that cannot be listed (EACCES) says nothing about InfiniBand support.
    if let Err(e) = host.list_dir("/sys/class/infiniband") {
        return (
            RdmaPresence {
                devices_found: false,
                message: Some(format!("RDMA devices unknown: {e}")),
                unreadable: Some(e.to_string()),
                names_moved: Vec::new(),
                not_in_rdma: Vec::new(),
            },
            Vec::new(),
        );
    }
    match ib::list_devices(host) {
        None => {
            // No class directory (ib_core not loaded): RDMA NICs in the PCI tree are still
            // named, and the kernel's support is not doubted for them.
            let (not_in_rdma, names_moved) = crate::probe::topo::probe_unregistered(host);
            let message = match not_in_rdma.is_empty() {
                true => NO_IB_KERNEL.to_string(),
                false => "no RDMA devices: /sys/class/infiniband is absent (ib_core not loaded) and the PCI tree has RDMA NICs".to_string(),
            };
            let presence = RdmaPresence {
                devices_found: false,
                message: Some(message),
                unreadable: None,
                names_moved,
                not_in_rdma,
            };
            (presence, Vec::new())
        }
        Some(v) => {
            // A driver that did not register its NICs leaves the class empty: name them too.
            let (not_in_rdma, names_moved) = crate::probe::topo::probe_unregistered(host);
            let found = !v.is_empty();
            let presence = RdmaPresence {
                devices_found: found,
                message: (!found).then(|| "no RDMA devices: /sys/class/infiniband is empty".to_string()),
                unreadable: None,
                names_moved,
                not_in_rdma,
            };
            (presence, v)
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GidsReport {
    pub rdma: RdmaPresence,
    /// The NCCL variables the choice used (from the host's or snapshot's environment).
    pub nccl_env: GidEnv,
    pub ports: Vec<GidPort>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GidPort {
    pub device: String,
    pub port: u32,
    pub link_layer: Option<String>,
    /// The device's `node_type` name (`CA`, `RNIC` for iWARP, ...).
    pub node_type: Option<String>,
    /// `state` name (`ACTIVE`, `DOWN`, ...).
    pub state: Option<String>,
    /// Slots in `gids/` (`gid_tbl_len`).
    pub gid_tbl_len: u32,
    /// Populated entries only (all-zero and `fe80::` zero-trailer slots skipped, as
    /// `show_gids` does), in numeric index order.
    pub entries: Vec<GidEntry>,
    pub nccl: GidChoice,
    pub perftest: GidChoice,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GidEntry {
    pub index: u32,
    /// The kernel's full form.
    pub gid: Gid,
    /// The address, when the GID is IPv4-mapped.
    pub ipv4: Option<String>,
    /// `v1`, `v2`, or `IB` on InfiniBand ports; `null` when `types` could not be read.
    pub roce_version: Option<String>,
    /// `gid_attrs/types/<i>` as read (`IB/RoCE v1`, `RoCE v2`), or `null`.
    pub gid_type: Option<String>,
    /// `gid_attrs/ndevs/<i>`: the L3 netdev (bond, VLAN, macvlan, vxlan included).
    pub netdev: Option<String>,
    /// The errno when `types`/`ndevs` reads failed (EINVAL on IB ports is normal).
    pub attr_errors: BTreeMap<String, String>,
    pub link_local: bool,
    pub nccl_pick: bool,
    pub perftest_pick: bool,
}

fn attr_text(a: &Attr) -> Option<String> {
    a.value().map(|s| s.trim().to_string())
}

pub fn probe(host: &Host, env: &GidEnv) -> GidsReport {
    let (rdma, devices) = presence(host);
    let mut ports = Vec::new();
    for dev in &devices {
        for port in ib::list_ports(host, dev) {
            ports.push(probe_port(host, dev, port, env));
        }
    }
    GidsReport {
        rdma,
        nccl_env: env.clone(),
        ports,
    }
}

fn probe_port(host: &Host, dev: &str, port: u32, env: &GidEnv) -> GidPort {
    let pdir = ib::port_dir(dev, port);
    let link_layer = attr_text(&host.attr(format!("{pdir}/link_layer")));
    let state = attr_text(&host.attr(format!("{pdir}/state")))
        .and_then(|s| ib::parse_num_name(&s))
        .map(|n| n.name);
    let node_type = attr_text(&host.attr(format!("{}/node_type", ib::dev_dir(dev))))
        .and_then(|s| ib::parse_num_name(&s))
        .map(|n| n.name);
    let table = ib::read_gid_table(host, dev, port);
    let nccl = gid::nccl_gid_index(link_layer.as_deref(), &table, env);
    let perftest = gid::perftest_gid_index(link_layer.as_deref(), &table, false);
    let is_ib = link_layer.as_deref() == Some("InfiniBand");
    let entries = table
        .iter()
        .filter(|s| s.is_populated())
        .filter_map(|s| entry(s, is_ib, &nccl, &perftest))
        .collect();
    GidPort {
        device: dev.to_string(),
        port,
        link_layer,
        node_type,
        state,
        gid_tbl_len: table.iter().map(|s| s.index + 1).max().unwrap_or(0),
        entries,
        nccl,
        perftest,
    }
}

fn entry(s: &GidSlot, is_ib: bool, nccl: &GidChoice, perftest: &GidChoice) -> Option<GidEntry> {
    let g = s.gid?;
    let mut attr_errors = BTreeMap::new();
    if let Attr::Failed(e) = &s.gid_type {
        attr_errors.insert("types".to_string(), e.clone());
    }
    if let Attr::Failed(e) = &s.ndev {
        attr_errors.insert("ndevs".to_string(), e.clone());
    }
    let roce_version = match (is_ib, s.parsed_type()) {
        (true, _) => Some("IB".to_string()),
        (false, Some(GidType::IbRoceV1)) => Some("v1".to_string()),
        (false, Some(GidType::RoceV2)) => Some("v2".to_string()),
        (false, None) => None,
    };
    Some(GidEntry {
        index: s.index,
        gid: g,
        ipv4: g.ipv4_mapped().map(|a| a.to_string()),
        roce_version,
        gid_type: attr_text(&s.gid_type),
        netdev: attr_text(&s.ndev).filter(|n| !n.is_empty()),
        attr_errors,
        link_local: g.is_link_local(),
        nccl_pick: nccl.index == Some(s.index),
        perftest_pick: perftest.index == Some(s.index),
    })
}

/// How a `gids` rule judges: one port at a time (in port order, as the table prints them),
/// or the whole report once after the ports.
pub enum RuleFn {
    Port(fn(&Port, &mut Vec<Finding>)),
    Report(fn(&GidsReport, &mut Vec<Finding>)),
}

/// A port as the port rules see it.
pub struct Port<'a> {
    pub p: &'a GidPort,
    /// `device/port`.
    pub subject: String,
    /// RoCE (an Ethernet link layer, not an iWARP RNIC, which has no RoCE GID types).
    pub roce: bool,
    /// NCCL_IB_GID_INDEX as NCCL reads it (-1: automatic).
    pub forced: i64,
}

/// The GID mistakes that make RoCE connections fail or pick the wrong path, in the order a
/// port's findings are listed.
pub static RULES: &[Rule<RuleFn>] = &[
    Rule {
        ids: &["gids.nic_not_in_rdma", "gids.rdma_driver_not_loaded"],
        severity: &[Severity::Unknown],
        about: "a NIC in the PCI tree that registered no RDMA device (topo.nic_not_in_rdma; every NIC of a \
                module that is not loaded in one finding, as topo.rdma_driver_not_loaded): \
                named by its bus ID and netdev; it has no GID table to read",
        judge: RuleFn::Report(gids_not_in_rdma),
    },
    Rule {
        ids: &["gids.no_roce_v2"],
        severity: &[Severity::Warn],
        about: "a RoCE port without any RoCE v2 GID",
        judge: RuleFn::Port(no_roce_v2),
    },
    Rule {
        ids: &["gids.sparse_table"],
        severity: &[Severity::Warn],
        about: "the first populated index is above 0 (container view)",
        judge: RuleFn::Port(sparse_table),
    },
    Rule {
        ids: &["gids.nccl_gid_index_bad", "gids.nccl_gid_unusable"],
        severity: &[Severity::Warn, Severity::Fail],
        about: "NCCL_IB_GID_INDEX points at an empty, link-local (fail) or v1 (warn) entry; \
                or NCCL's automatic choice is link-local or empty (fail)",
        judge: RuleFn::Port(nccl_gid_bad),
    },
    Rule {
        ids: &["gids.nccl_gid_error"],
        severity: &[Severity::Fail],
        about: "NCCL would stop with an error (a types file missing)",
        judge: RuleFn::Port(nccl_gid_error),
    },
    Rule {
        ids: &["gids.nothing_to_judge"],
        severity: &[Severity::Unknown],
        about: "no RDMA port showed up (no InfiniBand support, no driver loaded): nothing was \
                judged, NOT EVALUATED (exit 3)",
        judge: RuleFn::Report(gids_nothing),
    },
    Rule {
        ids: &["gids.duplicate_ipv4"],
        severity: &[Severity::Warn],
        about: "the same IPv4 address on two ports",
        judge: RuleFn::Report(duplicate_ipv4),
    },
];

fn gids_nothing(r: &GidsReport, out: &mut Vec<Finding>) {
    if r.ports.is_empty() && r.rdma.unreadable.is_none() {
        // No device at all, or (devices without ports) a reason of its own.
        let fact = r
            .rdma
            .message
            .is_some()
            .then_some(crate::finding::MissingFact::RdmaDevice);
        let why = r.rdma.message.clone().unwrap_or_else(|| "no RDMA ports".into());
        out.push(crate::finding::nothing_to_judge(
            "gids",
            "host",
            fact,
            format!("nothing to judge: {why}"),
        ));
    }
}

fn gids_not_in_rdma(r: &GidsReport, out: &mut Vec<Finding>) {
    let unread = "it has no GID table, so neither NCCL nor perftest can pick a GID on it";
    crate::probe::topo::unlisted_findings("gids", unread, &r.rdma.not_in_rdma, out);
}

/// Judge the GID tables by [`RULES`].
pub(crate) fn findings(r: &GidsReport) -> Vec<Finding> {
    let mut out = Vec::new();
    let forced = gid::nccl_param(r.nccl_env.gid_index.as_deref(), -1);
    for p in &r.ports {
        let port = Port {
            p,
            subject: crate::finding::spell::port(&p.device, p.port),
            roce: p.link_layer.as_deref() == Some("Ethernet") && p.node_type.as_deref() != Some("RNIC"),
            forced,
        };
        judge_each(RULES, port_judge, &port, &mut out);
    }
    judge_each(RULES, report_judge, r, &mut out);
    crate::probe::topo::say_moved(&mut out, &r.rdma.names_moved);
    out
}

fn port_judge(j: &RuleFn) -> Option<fn(&Port, &mut Vec<Finding>)> {
    match j {
        RuleFn::Port(j) => Some(*j),
        _ => None,
    }
}

fn report_judge(j: &RuleFn) -> Option<fn(&GidsReport, &mut Vec<Finding>)> {
    match j {
        RuleFn::Report(j) => Some(*j),
        _ => None,
    }
}

fn no_roce_v2(x: &Port, out: &mut Vec<Finding>) {
    let p = x.p;
    if !x.roce || p.entries.is_empty() || p.entries.iter().any(|e| e.roce_version.as_deref() == Some("v2")) {
        return;
    }
    out.push(
        Finding::new(
            "gids.no_roce_v2",
            Severity::Warn,
            &x.subject,
            "RoCE port has no RoCE v2 GID: traffic cannot be routed across L3 and NCCL falls back to v1",
        )
        .evidence("populated_gids", p.entries.len() as u64)
        .evidence(
            "types",
            p.entries
                .iter()
                .map(|e| e.gid_type.clone().unwrap_or_else(|| "unreadable".into()))
                .collect::<Vec<_>>(),
        )
        .fix("check that the netdev has an IP address and that RoCE v2 is enabled (rdma_cm default_roce_mode, cma_roce_mode)"),
    );
}

fn sparse_table(x: &Port, out: &mut Vec<Finding>) {
    let p = x.p;
    let Some(first) = p.entries.first().filter(|f| x.roce && f.index > 0) else {
        return;
    };
    out.push(
        Finding::new(
            "gids.sparse_table",
            Severity::Warn,
            &x.subject,
            format!(
                "GID table is sparse: the first populated index is {} (container-style view); tools that assume index 0, or treat EINVAL on unmapped slots as an error, fail here",
                first.index
            ),
        )
        .evidence("first_index", first.index)
        .evidence("nccl_index", p.nccl.index)
        .fix(match p.nccl.index {
            Some(i) => format!("use an NCCL whose auto selection tolerates EINVAL on unmapped slots (NCCL issue #1573), or pin the index NCCL picks here: NCCL_IB_GID_INDEX={i}"),
            None => "use an NCCL whose auto selection tolerates EINVAL on unmapped slots (NCCL issue #1573); NCCL picks no index here (see `fabprobe gids`)".to_string(),
        }),
    );
}

/// NCCL's GID is judged on active RoCE ports only: elsewhere NCCL opens nothing.
fn judged(x: &Port) -> bool {
    x.roce && x.p.state.as_deref() == Some("ACTIVE")
}

fn nccl_gid_bad(x: &Port, out: &mut Vec<Finding>) {
    let (p, forced) = (x.p, x.forced);
    if !judged(x) {
        return;
    }
    let chosen = p.nccl.index.and_then(|i| p.entries.iter().find(|e| e.index == i));
    let what = match (p.nccl.index, chosen) {
        (None, _) => None,
        (Some(_), None) => Some(("empty", Severity::Fail)),
        (Some(_), Some(e)) if e.link_local => Some(("link-local", Severity::Fail)),
        (Some(_), Some(e)) if e.roce_version.as_deref() == Some("v1") && forced >= 0 => {
            Some(("RoCE v1", Severity::Warn))
        }
        _ => None,
    };
    let (Some((kind, sev)), Some(idx)) = (what, p.nccl.index) else {
        return;
    };
    let (id, msg, fix) = if forced >= 0 {
        (
            "gids.nccl_gid_index_bad",
            format!("NCCL_IB_GID_INDEX={forced} points at a {kind} entry"),
            "unset NCCL_IB_GID_INDEX (NCCL >= 2.21 picks the first IPv4 RoCE v2 GID) or set it to that index",
        )
    } else {
        (
            "gids.nccl_gid_unusable",
            format!("the GID NCCL would pick (index {idx}) is {kind}: connections across subnets fail"),
            "give the port's netdev an IPv4 address so a routable RoCE v2 GID appears",
        )
    };
    let mut f = Finding::new(id, sev, &x.subject, msg)
        .evidence("index", idx)
        .evidence("reason", p.nccl.reason.clone())
        .fix(fix);
    if let Some(e) = chosen {
        f = f.evidence("gid", e.gid.full());
        if let Some(t) = &e.gid_type {
            f = f.evidence("type", t.clone());
        }
    }
    out.push(f);
}

fn nccl_gid_error(x: &Port, out: &mut Vec<Finding>) {
    if !judged(x) || x.p.nccl.index.is_some() {
        return;
    }
    out.push(
        Finding::new(
            "gids.nccl_gid_error",
            Severity::Fail,
            &x.subject,
            format!("NCCL cannot choose a GID: {}", x.p.nccl.reason),
        )
        .evidence("reason", x.p.nccl.reason.clone()),
    );
}

fn duplicate_ipv4(r: &GidsReport, out: &mut Vec<Finding>) {
    let mut by_ip: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in &r.ports {
        let subject = crate::finding::spell::port(&p.device, p.port);
        for ip in p.entries.iter().filter_map(|e| e.ipv4.as_ref()) {
            let v = by_ip.entry(ip.clone()).or_default();
            if !v.contains(&subject) {
                v.push(subject.clone());
            }
        }
    }
    for (ip, subjects) in by_ip.into_iter().filter(|(_, s)| s.len() > 1) {
        out.push(
            Finding::new(
                "gids.duplicate_ipv4",
                Severity::Warn,
                subjects.join(","),
                format!(
                    "IPv4 address {ip} appears on {} ports: traffic meant for one rail can leave on another",
                    subjects.len()
                ),
            )
            .evidence("ipv4", ip.clone())
            .evidence("ports", subjects.clone())
            .fix("give every RDMA port its own address (or its own subnet per rail)"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finding::Severity;

    fn report(env: &[(&str, &str)]) -> GidsReport {
        let host = Host::snapshot(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/roce-bond-host")).unwrap();
        let env = GidEnv::from_lookup(|k| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()));
        probe(&host, &env)
    }

    fn ids(f: &[Finding]) -> Vec<(String, String, Severity)> {
        f.iter()
            .map(|f| (f.id.clone(), f.subject.clone(), f.severity))
            .collect()
    }

    #[test]
    fn healthy_roce_host_has_no_findings() {
        let r = report(&[]);
        assert_eq!(
            r.ports.iter().map(|p| p.nccl.index).collect::<Vec<_>>(),
            [Some(5), Some(3), Some(3)]
        );
        assert!(findings(&r).is_empty(), "{:?}", findings(&r));
    }

    #[test]
    fn forced_index_at_link_local_v1_or_empty() {
        let ll = ids(&findings(&report(&[("NCCL_IB_GID_INDEX", "1")])));
        assert_eq!(ll.len(), 3);
        assert!(
            ll.iter()
                .all(|(id, _, s)| id == "gids.nccl_gid_index_bad" && *s == Severity::Fail)
        );
        // Index 4 is 172.19.0.60 v1 on mlx5_0, a VLAN link-local on mlx5_1, an IPv4 v1 on the bond.
        let v = ids(&findings(&report(&[("NCCL_IB_GID_INDEX", "4")])));
        assert_eq!(
            v,
            [
                (
                    "gids.nccl_gid_index_bad".into(),
                    "mlx5_0/1".into(),
                    Severity::Warn
                ),
                (
                    "gids.nccl_gid_index_bad".into(),
                    "mlx5_1/1".into(),
                    Severity::Fail
                ),
                (
                    "gids.nccl_gid_index_bad".into(),
                    "mlx5_bond_0/1".into(),
                    Severity::Warn
                ),
            ]
        );
        let empty = findings(&report(&[("NCCL_IB_GID_INDEX", "200")]));
        assert_eq!(empty.len(), 3);
        assert!(empty.iter().all(|f| f.message.contains("empty")), "{empty:?}");
        // A forced v2 IPv4 entry is fine.
        assert!(
            findings(&report(&[("NCCL_IB_GID_INDEX", "5")]))
                .iter()
                .all(|f| f.subject != "mlx5_0/1")
        );
    }

    #[test]
    fn auto_choice_on_link_local_is_a_fault() {
        // RoCE v1 only, AF_INET6: NCCL stays on index 0, a link-local GID.
        let f = findings(&report(&[("NCCL_IB_ADDR_FAMILY", "AF_INET6")]));
        assert_eq!(f.len(), 3, "{f:?}");
        assert!(
            f.iter()
                .all(|f| f.id == "gids.nccl_gid_unusable" && f.severity == Severity::Fail)
        );
    }

    #[test]
    fn same_ipv4_on_two_ports() {
        let mut r = report(&[]);
        for e in &mut r.ports[1].entries {
            if e.ipv4.is_some() {
                e.ipv4 = Some("172.19.0.60".into());
            }
        }
        let f = findings(&r);
        assert_eq!(
            ids(&f),
            [(
                "gids.duplicate_ipv4".into(),
                "mlx5_0/1,mlx5_1/1".into(),
                Severity::Warn
            )]
        );
        assert_eq!(f[0].evidence["ipv4"], "172.19.0.60");
    }

    #[test]
    fn roce_port_without_v2() {
        let mut r = report(&[]);
        r.ports[0]
            .entries
            .retain(|e| e.roce_version.as_deref() == Some("v1"));
        let f = findings(&r);
        assert!(
            f.iter()
                .any(|f| f.id == "gids.no_roce_v2" && f.subject == "mlx5_0/1"),
            "{f:?}"
        );
    }
}
