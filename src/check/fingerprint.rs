//! The fingerprint: what should be the same on every node of a kind; `sweep` compares it
//! key by key.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::check::judge::ports::ports_of;
use crate::check::judge::roce::{ecn_of, global_pause_of, pfc_of, prio_list};
use crate::check::policy::Policy;
use crate::check::run::Collected;
use crate::host::Host;
use crate::probe::gdr::GdrReport;
use crate::probe::gids::GidsReport;
use crate::probe::links::LinksReport;
use crate::probe::qos::{QosIf, QosReport};
use crate::probe::topo::TopoReport;

/// FNV-1a, 64-bit: a stable hash for the topology signature (the same on every build).
fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn multiset(vals: impl IntoIterator<Item = String>) -> Value {
    let mut m: BTreeMap<String, usize> = BTreeMap::new();
    for v in vals {
        *m.entry(v).or_default() += 1;
    }
    if m.is_empty() {
        return Value::Null;
    }
    Value::String(
        m.iter()
            .map(|(v, n)| format!("{n}x {v}"))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

/// What should be the same on every node of a kind: `sweep` compares these key by key.
pub(crate) fn fingerprint(host: &Host, c: &Collected, p: &Policy) -> BTreeMap<String, Value> {
    let mut m = BTreeMap::new();
    let facts = c.facts.as_ref().and_then(|f| f.facts());
    m.insert("tool_version".into(), json!(env!("CARGO_PKG_VERSION")));
    m.insert("policy".into(), json!(p.name));
    m.insert(
        "kernel".into(),
        json!(
            facts
                .and_then(|f| f.kernel.clone())
                .or_else(|| host.meta().kernel.clone())
        ),
    );
    m.insert("os".into(), json!(facts.and_then(|f| f.os.clone())));
    m.insert("cpu_model".into(), json!(facts.and_then(|f| f.cpu_model.clone())));
    m.insert("cpu_count".into(), json!(facts.and_then(|f| f.cpu_count)));
    // Whole GiB, rounded: firmware reservations differ by megabytes between identical nodes.
    m.insert(
        "memory_gib".into(),
        json!(
            facts
                .and_then(|f| f.memory_total_bytes)
                .map(|b| (b as f64 / (1u64 << 30) as f64).round() as u64)
        ),
    );
    m.insert(
        "memlock_soft".into(),
        json!(facts.and_then(|f| f.memlock).map(|l| l.soft.show())),
    );
    m.insert("gpu_driver".into(), json!(c.driver_version));
    if let Some(t) = &c.topo {
        fingerprint_topo(t, &mut m);
    }
    if let Some(l) = &c.links {
        fingerprint_links(l, &mut m);
    }
    if let Some(r) = &c.gdr {
        fingerprint_gdr(r, &mut m);
    }
    if let Some(q) = &c.qos {
        fingerprint_qos(q, &mut m);
    }
    if let Some(g) = &c.gids {
        fingerprint_gids(g, &mut m);
    }
    m
}

/// GPUs, NICs, the fewest NVLinks and the matrix's shape (without device numbers).
fn fingerprint_topo(t: &TopoReport, m: &mut BTreeMap<String, Value>) {
    m.insert("gpu_count".into(), json!(t.gpus.len()));
    m.insert(
        "gpu_models".into(),
        multiset(t.gpus.iter().filter_map(|g| g.name.clone())),
    );
    m.insert("rdma_nic_count".into(), json!(t.nics.len()));
    let nv = t
        .matrix
        .iter()
        .flatten()
        .filter_map(|c| c.strip_prefix("NV")?.parse::<u64>().ok())
        .min();
    m.insert("nvlink_min".into(), json!(nv));
    let mut sig = Vec::new();
    for (label, row) in t.labels.iter().zip(&t.matrix) {
        // Labels without their numbers: GPU/NIC kinds and cells, not names.
        sig.extend(label.trim_end_matches(|c: char| c.is_ascii_digit()).bytes());
        for cell in row {
            sig.push(b' ');
            sig.extend(cell.bytes());
        }
        sig.push(b'\n');
    }
    m.insert("topo_signature".into(), json!(format!("{:016x}", fnv1a(&sig))));
}

/// Port counts and rates per link layer, HCA firmware and PCIe links.
fn fingerprint_links(l: &LinksReport, m: &mut BTreeMap<String, Value>) {
    for (key, layer) in [("ib", "InfiniBand"), ("roce", "Ethernet")] {
        let ports = ports_of(l, layer);
        m.insert(format!("{key}_ports"), json!(ports.len()));
        m.insert(
            format!("{key}_rates"),
            multiset(
                ports
                    .iter()
                    .map(|(_, p)| p.rate.as_ref().map(|r| r.raw.clone()).unwrap_or("unknown".into())),
            ),
        );
    }
    m.insert(
        "hca_firmware".into(),
        multiset(l.devices.iter().map(|d| {
            format!(
                "{} {}",
                d.attrs.hca_type.as_deref().unwrap_or("?"),
                d.attrs.fw_ver.as_deref().unwrap_or("?")
            )
        })),
    );
    m.insert(
        "hca_pcie".into(),
        multiset(l.devices.iter().filter_map(|d| {
            let k = d.attrs.pci_link.as_ref()?;
            Some(format!(
                "{} x{}",
                k.current_speed.as_ref().map(|s| s.raw.as_str()).unwrap_or("?"),
                k.current_width.map(|w| w.to_string()).unwrap_or("?".into())
            ))
        })),
    );
}

/// The peer-memory client and the GDR verdicts of the pairs NCCL would use.
fn fingerprint_gdr(r: &GdrReport, m: &mut BTreeMap<String, Value>) {
    let pm = &r.peer_memory;
    let client = if pm.nvidia_peermem_loaded {
        "nvidia_peermem"
    } else if pm.nv_peer_mem_loaded {
        "nv_peer_mem"
    } else if !pm.modules_visible {
        "unknown"
    } else {
        "none"
    };
    m.insert("gdr_peer_memory".into(), json!(client));
    m.insert(
        "gdr_pairs".into(),
        multiset(
            r.pairs
                .iter()
                .filter(|x| x.nccl_nearest)
                .map(|x| x.verdict.map(|v| v.as_str()).unwrap_or("unknown").to_string()),
        ),
    );
}

/// PFC, ECN, trust, global pause and MTU of the RoCE netdevs.
fn fingerprint_qos(q: &QosReport, m: &mut BTreeMap<String, Value>) {
    let roce: Vec<&QosIf> = q.interfaces.iter().filter(|i| i.rdma_device.is_some()).collect();
    let show = |v: Option<String>| v.unwrap_or_else(|| "unknown".into());
    m.insert(
        "pfc_priorities".into(),
        multiset(roce.iter().map(|i| show(pfc_of(i).map(|v| prio_list(&v))))),
    );
    m.insert(
        "ecn_priorities".into(),
        multiset(roce.iter().map(|i| show(ecn_of(i).map(|(on, _)| prio_list(&on))))),
    );
    m.insert(
        "roce_trust".into(),
        multiset(roce.iter().map(|i| show(i.dcb.trust.clone()))),
    );
    m.insert(
        "global_pause".into(),
        multiset(
            roce.iter()
                .map(|i| show(global_pause_of(i).map(|g| if g { "on" } else { "off" }.to_string()))),
        ),
    );
    m.insert(
        "roce_netdev_mtu".into(),
        multiset(roce.iter().map(|i| show(i.netdev_mtu.map(|m| m.to_string())))),
    );
}

/// The GID index NCCL would use on each RoCE port.
fn fingerprint_gids(g: &GidsReport, m: &mut BTreeMap<String, Value>) {
    let picks: Vec<String> = g
        .ports
        .iter()
        .filter(|p| p.link_layer.as_deref() == Some("Ethernet"))
        .map(|p| p.nccl.index.map(|i| i.to_string()).unwrap_or("none".into()))
        .collect();
    m.insert("nccl_gid_index".into(), multiset(picks));
}
