//! `[roce]`: the GID NCCL picks, and the QoS keys on each RoCE netdev.

use super::ports::{ports_of, subject};
use super::{not_evaluated, nothing_here, violation};
use crate::check::Finding;
use crate::check::policy::{JudgedBy, Policy, set_keys};
use crate::check::run::Collected;
use crate::finding::MissingFact;
use crate::probe::qos::QosIf;
use crate::sysfs::net as netfs;

pub(crate) fn judge_roce(c: &Collected, p: &Policy, out: &mut Vec<Finding>) {
    if let Some(want) = &p.roce_qos.gid {
        roce_gid(c, want, out);
    }
    judge_roce_qos(c, p, out);
}

/// `[roce] gid`: on every RoCE port, the GID NCCL would use is of the kind wanted.
fn roce_gid(c: &Collected, want: &str, out: &mut Vec<Finding>) {
    let Some(g) = &c.gids else {
        return out.push(not_evaluated("roce.gid", "the gids probe did not run"));
    };
    let roce = |p: &&crate::probe::gids::GidPort| p.link_layer.as_deref() == Some("Ethernet");
    if !g.ports.iter().any(|p| roce(&p)) {
        return out.push(nothing_here(
            "roce.gid",
            Some(MissingFact::RoceNetdev),
            "no RoCE port to judge",
        ));
    }
    for port in g.ports.iter().filter(roce) {
        roce_gid_port(port, want, out);
    }
}

/// `[roce] gid` on one port; unknown where NCCL's version decides and is not known.
fn roce_gid_port(port: &crate::probe::gids::GidPort, want: &str, out: &mut Vec<Finding>) {
    let s = crate::finding::spell::port(&port.device, port.port);
    let entry_at = |i: Option<u32>| i.and_then(|i| port.entries.iter().find(|e| e.index == i));
    let entry = entry_at(port.nccl.index);
    let fits = |e: Option<&crate::probe::gids::GidEntry>| {
        e.is_some_and(|e| {
            let v2 = e.roce_version.as_deref() == Some("v2");
            match want {
                "ipv4-v2" => v2 && e.ipv4.is_some(),
                "ipv6-v2" => v2 && e.ipv4.is_none() && !e.link_local,
                "v2" => v2,
                _ => true,
            }
        })
    };
    let ok = fits(entry);
    // Unknown NCCL version and no NCCL_IB_GID_INDEX: 2.21+ picks the index
    // above, older NCCL index 0. Where the two answers differ, unknown.
    if port.nccl.before_2_21_uses_0 && ok != fits(entry_at(Some(0))) {
        out.push(not_evaluated(
            "roce.gid",
            format!(
                "{s}: NCCL 2.21+ would use index {} ({}), older NCCL index 0 ({}), and the NCCL version is unknown: give --nccl-version",
                port.nccl.index.map(|i| i.to_string()).unwrap_or_else(|| "none".into()),
                if ok { "fits" } else { "does not fit" },
                if ok { "does not fit" } else { "fits" }
            ),
        ));
        return;
    }
    if !ok {
        let shown = entry
            .map(|e| {
                format!(
                    "index {} {} {}",
                    e.index,
                    e.ipv4.clone().unwrap_or_else(|| e.gid.full()),
                    e.roce_version.clone().unwrap_or_default()
                )
            })
            .unwrap_or_else(|| "no GID".into());
        out.push(
            violation("roce.gid", &s, format!("NCCL would use {shown} on {s}, not an {want} GID"))
                .evidence("nccl_gid_index", port.nccl.index)
                .evidence("nccl_reason", port.nccl.reason.as_str())
                .fix("give the port's netdev an IPv4 address (RoCE v2 GIDs follow the addresses), or set NCCL_IB_GID_INDEX to the IPv4 v2 index `fabprobe gids` shows"),
        );
    }
}

/// `[roce]`'s QoS keys on every RoCE netdev, and the RoCE ports no netdev was found for.
fn judge_roce_qos(c: &Collected, p: &Policy, out: &mut Vec<Finding>) {
    let (q, set) = (&p.roce_qos, set_keys(p, "roce", JudgedBy::RoceQos));
    if set.is_empty() {
        return;
    }
    let Some(r) = &c.qos else {
        out.push(not_evaluated("roce", "the qos probe did not run"));
        return;
    };
    let roce_ifs: Vec<&QosIf> = r.interfaces.iter().filter(|i| i.rdma_device.is_some()).collect();
    if roce_ifs.is_empty() {
        for k in &set {
            // Devices unlistable is unknown, not a missing fact.
            let fact = match (&r.rdma.message, &r.rdma.unreadable) {
                (_, Some(_)) => None,
                (Some(_), None) => Some(MissingFact::RdmaDevice),
                (None, None) => Some(MissingFact::RoceNetdev),
            };
            let why = r.rdma.message.clone().unwrap_or_else(|| "no RoCE netdev".into());
            out.push(nothing_here(
                &format!("roce.{k}"),
                fact,
                format!("no RoCE netdev to judge ({why})"),
            ));
        }
    }
    for i in roce_ifs {
        judge_qos_if(i, i.netdev_mtu, q, out);
    }
    // A RoCE port the qos probe could not follow to a netdev is not a pass.
    if let Some(l) = &c.links {
        for (d, port) in ports_of(l, "Ethernet") {
            let seen = r
                .interfaces
                .iter()
                .any(|i| i.rdma_device.as_deref() == Some(d.name.as_str()) && i.rdma_port == Some(port.port));
            if !seen {
                out.push(not_evaluated(
                    "roce",
                    format!("{}: no netdev found for this RoCE port", subject(d, port)),
                ));
            }
        }
    }
}

/// `"3"`, `"3,4"`, `"none"`.
pub(crate) fn prio_list(v: &[u8]) -> String {
    if v.is_empty() {
        return "none".into();
    }
    v.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(",")
}

/// PFC as the qos probe reads it: DCB's `pfc_en`, else the priorities the driver keeps pause
/// counters for (mlx5 keeps them only where PFC is on), when it keeps a counter set at all.
pub(crate) fn pfc_of(i: &QosIf) -> Option<Vec<u8>> {
    i.dcb.pfc_enabled.clone().or_else(|| {
        (i.ethtool.error.is_none() && i.priorities.iter().all(|p| p.pfc_counters.is_some()))
            .then(|| i.ethtool.pfc_priorities_from_counters.clone())
    })
}

/// ECN (DCQCN) on, per priority: reaction point and notification point both enabled.
/// `(on, half)`: priorities with both, priorities with only one of the two.
pub(crate) fn ecn_of(i: &QosIf) -> Option<(Vec<u8>, Vec<u8>)> {
    let e = i.ecn.as_ref()?;
    let on = (0..8u8)
        .filter(|p| e.rp_enabled.contains(p) && e.np_enabled.contains(p))
        .collect();
    let half = (0..8u8)
        .filter(|p| e.rp_enabled.contains(p) != e.np_enabled.contains(p))
        .collect();
    Some((on, half))
}

/// Global (802.3x) pause on: the driver keeps global pause counters only while it is on.
pub(crate) fn global_pause_of(i: &QosIf) -> Option<bool> {
    i.ethtool
        .error
        .is_none()
        .then_some(i.ethtool.global_pause_counters)
}

/// A RoCE netdev as the `[roce]` QoS rules see it.
pub(super) struct RoceIf<'a> {
    i: &'a QosIf,
    q: &'a crate::check::policy::RoceRules,
    /// The netdev's MTU, when read.
    netdev_mtu: Option<u32>,
    /// `mlx5_2/1`, else the netdev.
    subject: String,
}

impl RoceIf<'_> {
    fn dcb_why(&self) -> String {
        format!(
            "{} ({}): no DCB answer ({})",
            self.subject,
            self.i.ifname,
            self.i.dcb.error.as_deref().unwrap_or("none")
        )
    }
}

/// A `[roce]` QoS key's judge, on one RoCE netdev.
type RoceQosJudge = fn(&RoceIf<'_>, &mut Vec<Finding>);

/// `[roce]`'s QoS keys, judged on each RoCE netdev: each key its own rule, in this order.
pub(super) const ROCE_QOS_RULES: &[(&str, RoceQosJudge)] = &[
    ("mtu", roce_mtu),
    ("pfc_priorities", roce_pfc_priorities),
    ("ecn_priorities", roce_ecn_priorities),
    ("trust", roce_trust),
    ("global_pause", roce_global_pause),
];

fn judge_qos_if(
    i: &QosIf,
    netdev_mtu: Option<u32>,
    q: &crate::check::policy::RoceRules,
    out: &mut Vec<Finding>,
) {
    let x = RoceIf {
        i,
        q,
        netdev_mtu,
        subject: match (&i.rdma_device, i.rdma_port) {
            (Some(d), Some(p)) => format!("{d}/{p}"),
            _ => i.ifname.clone(),
        },
    };
    for (_, judge) in ROCE_QOS_RULES {
        judge(&x, out);
    }
}

fn roce_mtu(x: &RoceIf, out: &mut Vec<Finding>) {
    let (q, subject, ifn) = (x.q, &x.subject, &x.i.ifname);
    let netdev_mtu = x.netdev_mtu;
    if let Some(want) = q.mtu {
        match netdev_mtu {
            None => out.push(not_evaluated("roce.mtu", format!("{subject}: no mtu for {ifn}"))),
            Some(m) => {
                let got = netfs::roce_mtu(m);
                if got.is_none_or(|g| u64::from(g) < want) {
                    out.push(
                        violation(
                            "roce.mtu",
                            subject,
                            format!(
                                "{ifn} MTU {m} gives a RoCE path MTU of {}, not {want}",
                                got.map(|g| g.to_string()).unwrap_or("none".into())
                            ),
                        )
                        .evidence("netdev", ifn.as_str())
                        .evidence("netdev_mtu", m)
                        .evidence("roce_mtu", got)
                        .fix(format!(
                            "a RoCE MTU of {want} needs a netdev MTU of at least {}: `ip link set {ifn} mtu 9000` (and the same on the switch ports)",
                            want + 96
                        )),
                    );
                }
            }
        }
    }
}

fn roce_pfc_priorities(x: &RoceIf, out: &mut Vec<Finding>) {
    let (i, q, subject, ifn) = (x.i, x.q, &x.subject, &x.i.ifname);
    let dcb_why = || x.dcb_why();
    if let Some(want) = &q.pfc_priorities {
        let mut want: Vec<u8> = want.iter().map(|p| *p as u8).collect();
        want.sort_unstable();
        match pfc_of(i) {
            None => out.push(not_evaluated("roce.pfc_priorities", dcb_why())),
            Some(got) if got != want => out.push(
                violation(
                    "roce.pfc_priorities",
                    subject,
                    format!("PFC on {ifn} is on priority {}, not exactly {}", prio_list(&got), prio_list(&want)),
                )
                .evidence("netdev", ifn.as_str())
                .evidence("pfc_enabled", prio_list(&got))
                .evidence("roce_priority", i.roce.priority)
                .fix(format!(
                    "`mlnx_qos -i {ifn} --pfc {}` (MLNX_OFED) or `dcb pfc set dev {ifn} prio-pfc {}` (iproute2)",
                    (0..8u8).map(|p| if want.contains(&p) { "1" } else { "0" }).collect::<Vec<_>>().join(","),
                    (0..8u8).map(|p| format!("{p}:{}", if want.contains(&p) { "on" } else { "off" })).collect::<Vec<_>>().join(" ")
                )),
            ),
            Some(_) => {}
        }
    }
}

/// Commands that leave ECN on exactly the `want` priorities of `ifn` (reaction and
/// notification point both), the others off: one loop per value written.
fn ecn_fix(ifn: &str, want: &[u8]) -> String {
    let (on, off): (Vec<u8>, Vec<u8>) = (0..8u8).partition(|p| want.contains(p));
    let set = |v: u8, ps: &[u8]| {
        let ps: Vec<String> = ps.iter().map(|p| p.to_string()).collect();
        format!(
            "for p in {}; do echo {v} > /sys/class/net/{ifn}/ecn/roce_rp/enable/$p; \
             echo {v} > /sys/class/net/{ifn}/ecn/roce_np/enable/$p; done",
            ps.join(" ")
        )
    };
    let cmds: Vec<String> = [(1, on), (0, off)]
        .into_iter()
        .filter(|(_, ps)| !ps.is_empty())
        .map(|(v, ps)| format!("`{}`", set(v, &ps)))
        .collect();
    format!("as root (MLNX_OFED): {}", cmds.join(" "))
}

fn roce_ecn_priorities(x: &RoceIf, out: &mut Vec<Finding>) {
    let (i, q, subject, ifn) = (x.i, x.q, &x.subject, &x.i.ifname);
    if let Some(want) = &q.ecn_priorities {
        let mut want: Vec<u8> = want.iter().map(|p| *p as u8).collect();
        want.sort_unstable();
        match ecn_of(i) {
            None => out.push(not_evaluated(
                "roce.ecn_priorities",
                format!(
                    "{subject}: {}",
                    i.ecn_unknown_reason
                        .clone()
                        .unwrap_or_else(|| format!("no ECN state for {ifn}"))
                ),
            )),
            Some((on, half)) if on != want || !half.is_empty() => {
                let e = i.ecn.as_ref();
                out.push(
                    violation(
                        "roce.ecn_priorities",
                        subject,
                        format!(
                            "ECN/DCQCN on {ifn} is on priority {}, not exactly {}{}",
                            prio_list(&on),
                            prio_list(&want),
                            if half.is_empty() {
                                String::new()
                            } else {
                                format!(
                                    " (half on, reaction or notification point only: {})",
                                    prio_list(&half)
                                )
                            }
                        ),
                    )
                    .evidence("netdev", ifn.as_str())
                    .evidence(
                        "roce_rp_enabled",
                        prio_list(e.map(|e| e.rp_enabled.as_slice()).unwrap_or(&[])),
                    )
                    .evidence(
                        "roce_np_enabled",
                        prio_list(e.map(|e| e.np_enabled.as_slice()).unwrap_or(&[])),
                    )
                    .fix(ecn_fix(ifn, &want)),
                );
            }
            Some(_) => {}
        }
    }
}

fn roce_trust(x: &RoceIf, out: &mut Vec<Finding>) {
    let (i, q, subject, ifn) = (x.i, x.q, &x.subject, &x.i.ifname);
    let dcb_why = || x.dcb_why();
    if let Some(want) = &q.trust {
        match &i.dcb.trust {
            None => out.push(not_evaluated("roce.trust", dcb_why())),
            Some(got) if got != want => out.push(
                violation("roce.trust", subject, format!("{ifn} trusts {got}, not {want}"))
                    .evidence("netdev", ifn.as_str())
                    .evidence("trust", got.as_str())
                    .fix(format!("`mlnx_qos -i {ifn} --trust {want}`")),
            ),
            Some(_) => {}
        }
    }
}

fn roce_global_pause(x: &RoceIf, out: &mut Vec<Finding>) {
    let (i, q, subject, ifn) = (x.i, x.q, &x.subject, &x.i.ifname);
    if let Some(allowed) = q.global_pause {
        match global_pause_of(i) {
            None => out.push(not_evaluated(
                "roce.global_pause",
                format!(
                    "{subject}: no ethtool counters for {ifn} ({})",
                    i.ethtool.error.as_deref().unwrap_or("none")
                ),
            )),
            Some(true) if !allowed => out.push(
                violation(
                    "roce.global_pause",
                    subject,
                    format!("global (802.3x) pause is on for {ifn}"),
                )
                .evidence("netdev", ifn.as_str())
                .fix(format!("`ethtool -A {ifn} rx off tx off` (PFC only)")),
            ),
            Some(_) => {}
        }
    }
}
