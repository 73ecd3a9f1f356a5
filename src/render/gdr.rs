//! `gdr` output: the prerequisites (peer memory, DMA-BUF, IOMMU), a GPU x NIC matrix of
//! NCCL path types and GDR verdicts, the ACS state of the bridges between them, findings.

use crate::finding::Finding;
use crate::probe::gdr::{GdrReport, GdrVerdict};
use crate::render::gids::columns;
use crate::render::text;
use crate::sysfs::pcicfg::Acs;

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

fn opt_bool(b: Option<bool>, yes_s: &str, no_s: &str) -> String {
    match b {
        Some(true) => yes_s.to_string(),
        Some(false) => no_s.to_string(),
        None => "unknown".to_string(),
    }
}

fn short(v: GdrVerdict) -> &'static str {
    match v {
        GdrVerdict::On => "on",
        GdrVerdict::DmabufPossible => "dmabuf",
        GdrVerdict::OffDistance => "off-dist",
        GdrVerdict::OffNoPeerMemory => "off-peer",
        GdrVerdict::Unknown => "unknown",
    }
}

fn gib(b: u64) -> String {
    if b.is_multiple_of(1 << 30) {
        format!("{} GiB", b >> 30)
    } else {
        format!("{} MiB", b >> 20)
    }
}

/// The verdict, the GPU x NIC matrix and the kernel's GPUDirect facts, moved names marked.
pub(crate) fn table(r: &GdrReport, findings: &[Finding]) -> String {
    text::moved_view(&r.names_moved, || table_body(r, findings))
}

fn table_body(r: &GdrReport, findings: &[Finding]) -> String {
    let mut s = String::new();
    peer_memory(r, &mut s);
    dmabuf_and_iommu(r, &mut s);
    pair_matrix(r, &mut s);
    devices(r, &mut s);
    bridges(r, &mut s);
    if !r.notes.is_empty() {
        s.push_str("\nNotes:\n");
        for n in &r.notes {
            s.push_str(&format!("  {n}\n"));
        }
    }
    // No GPU, or no port NCCL opens: gdr.nothing_to_judge says so (NOT EVALUATED, exit 3);
    // the verdict line is the findings', never one of the renderer's own.
    text::verdict_first("gdr", findings, s)
}

/// NCCL_NET_GDR_LEVEL, the peer-memory modules and the files NCCL looks for.
fn peer_memory(r: &GdrReport, s: &mut String) {
    let l = &r.nccl_net_gdr_level;
    s.push_str(&format!(
        "NCCL_NET_GDR_LEVEL: {} ({}{})\n",
        l.name,
        l.source,
        l.raw
            .as_ref()
            .map(|v| format!(", set to {v:?}"))
            .unwrap_or_default()
    ));
    let p = &r.peer_memory;
    s.push_str(&format!(
        "Peer memory: nvidia_peermem {}{}{}; nv_peer_mem {}; ib_core peer-memory API {}; NCCL finds a client: {} ({})\n",
        if p.nvidia_peermem_loaded { "loaded" } else { "not loaded" },
        p.nvidia_peermem_version
            .as_ref()
            .map(|v| format!(" (version {v})"))
            .unwrap_or_default(),
        p.peerdirect_support
            .as_ref()
            .map(|v| format!(", peerdirect_support={v}"))
            .unwrap_or_default(),
        if p.nv_peer_mem_loaded { "loaded" } else { "not loaded" },
        if p.peer_memory_api {
            "present (/sys/kernel/mm/memory_peers)"
        } else {
            "absent (inbox ib_core)"
        },
        if p.depends_on_version {
            "depends on the NCCL version"
        } else {
            yes(p.nccl_gdr_support)
        },
        // Where the version came from is on the NCCL line of nccl-env.
        crate::nccl::version::rules_label(p.nccl_version.as_deref())
    ));
    if let Some(m) = &p.nvidia_peermem_module_file {
        s.push_str(&format!("  module on disk, not loaded: {m}\n"));
    }
    for c in &p.paths {
        s.push_str(&format!(
            "  {:<52} {:<7} (NCCL {})\n",
            c.path,
            if c.exists { "exists" } else { "absent" },
            c.nccl_versions
        ));
    }
}

/// DMA-BUF's prerequisites and the IOMMU.
fn dmabuf_and_iommu(r: &GdrReport, s: &mut String) {
    let d = &r.dmabuf;
    s.push_str(&format!(
        "DMA-BUF: {}: kernel {} ({}), rdma-core {} ({}), NVIDIA driver {}\n",
        d.state_text(),
        d.kernel.as_deref().unwrap_or("unknown"),
        opt_bool(d.kernel_ok, ">= 5.12", "< 5.12"),
        d.rdma_core
            .map(|v| v.to_string())
            .unwrap_or_else(|| "unknown".into()),
        opt_bool(d.rdma_core_ok, ">= 34", "< 34"),
        match (&d.nvidia_driver, d.nvidia_open_module) {
            (Some(v), Some(true)) => format!("{v} (open kernel module)"),
            (Some(v), _) => format!("{v} (proprietary kernel module: no DMA-BUF)"),
            (None, _) => "unknown (no /proc/driver/nvidia/version)".to_string(),
        },
    ));
    let i = &r.iommu;
    s.push_str(&format!(
        "IOMMU: {}; kernel command line: {}\n",
        if i.units.is_empty() {
            "off (no /sys/class/iommu entries)".to_string()
        } else {
            format!("on ({})", i.units.join(" "))
        },
        if i.cmdline_flags.is_empty() {
            "no IOMMU options".to_string()
        } else {
            format!(
                "{} ({})",
                i.cmdline_flags.join(" "),
                opt_bool(i.cmdline_passthrough, "passthrough", "translated")
                    .replace("unknown", "no iommu=pt: the kernel's default mode")
            )
        }
    ));
}

/// GPU x NIC: NCCL's path type and the GDR verdict of each pair.
fn pair_matrix(r: &GdrReport, s: &mut String) {
    if !r.gpus.is_empty() && !r.nics.is_empty() {
        s.push_str("\nGPU x NIC: NCCL's path type (as `fabprobe topo --nccl`; nvidia-smi may name it otherwise) and GDR verdict (* = a nearest NIC NCCL opens, which NCCL uses; ! = ACS redirect between them; ? = ACS unknown)\n");
        let mut rows = vec![
            std::iter::once(String::new())
                .chain(r.nics.iter().map(|n| n.label.clone()))
                .collect::<Vec<_>>(),
        ];
        for g in &r.gpus {
            let mut row = vec![g.label.clone()];
            for n in &r.nics {
                let cell = r
                    .pairs
                    .iter()
                    .find(|p| p.gpu == g.label && p.nic == n.label)
                    .map(|p| {
                        format!(
                            "{} {}{}{}",
                            p.path.map(|x| x.as_str()).unwrap_or("N/A"),
                            p.verdict.map(short).unwrap_or("-"),
                            if p.nccl_nearest { "*" } else { "" },
                            if p.acs_redirect {
                                "!"
                            } else if p.acs_unknown {
                                "?"
                            } else {
                                ""
                            }
                        )
                    })
                    .unwrap_or_default();
                row.push(cell);
            }
            rows.push(row);
        }
        // Too wide, NIC columns in blocks led by the GPU: a cell (`PIX off-peer*!`) never breaks.
        s.push_str(&crate::render::gids::column_blocks(&rows));
    }
}

/// The GPUs and NICs: name, PCI address, BAR1, IOMMU group.
fn devices(r: &GdrReport, s: &mut String) {
    if !r.gpus.is_empty() || !r.nics.is_empty() {
        s.push('\n');
        let mut rows = vec![vec![
            "DEVICE".to_string(),
            "NAME".into(),
            "PCI".into(),
            "BAR1".into(),
            "IOMMU GROUP".into(),
        ]];
        for d in r.gpus.iter().chain(&r.nics) {
            rows.push(vec![
                d.label.clone(),
                d.name.clone().unwrap_or_else(|| "-".into()),
                d.pci_bus_id.clone(),
                d.bar1_total_bytes.map(gib).unwrap_or_else(|| "-".into()),
                d.iommu_group
                    .as_ref()
                    .map(|g| format!("{} ({})", g.group, g.r#type.as_deref().unwrap_or("?")))
                    .unwrap_or_else(|| "-".into()),
            ]);
        }
        s.push_str(&columns(&rows));
    }
}

/// ACS on the switch ports between GPUs and NICs.
fn bridges(r: &GdrReport, s: &mut String) {
    if !r.bridges.is_empty() {
        s.push_str("\nACS on the switch ports between GPUs and NICs:\n");
        let rows: Vec<Vec<String>> = r
            .bridges
            .iter()
            .map(|b| {
                vec![
                    format!("  {}", b.pci_bus_id),
                    match &b.acs {
                        Acs::Present { ctrl_text, .. } => format!("ACSCtl: {ctrl_text}"),
                        Acs::Absent => "no ACS capability".into(),
                        Acs::Unknown { reason, .. } => format!("unknown: {reason}"),
                        Acs::Unreadable { error } => format!("config unreadable: {error}"),
                    },
                ]
            })
            .collect();
        s.push_str(&columns(&rows));
    }
}
