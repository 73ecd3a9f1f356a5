//! `[gdr] ready`.

use super::{not_evaluated, nothing_here, violation};
use crate::check::Finding;
use crate::check::run::Collected;
use crate::finding::MissingFact;
use crate::probe::gdr::{GdrReport, GdrVerdict};

/// `[gdr] ready`: every pair NCCL would use (each GPU with its nearest NICs) has GPUDirect
/// RDMA on (peer memory, or DMA-BUF possible) and no ACS redirect between the two.
pub(crate) fn judge_gdr(c: &Collected, want: bool, out: &mut Vec<Finding>) {
    let Some(r) = &c.gdr else {
        out.push(not_evaluated("gdr.ready", "the gdr probe did not run"));
        return;
    };
    if !want {
        // `ready = false` asks for nothing (a node that does not use GDR).
        return;
    }
    let used: Vec<_> = r.pairs.iter().filter(|x| x.nccl_nearest).collect();
    if r.gpus.is_empty() || r.nics.is_empty() {
        // No GPU or no RDMA NIC seen: nothing to judge (gpu.count / ib.count judge absence).
        // Worded by the one missing fact, as the [gpu] keys word it (one line in `check`).
        let (missing, fact) = match r.gpus.len() {
            0 => (MissingFact::Gpu, "0 GPUs found".to_string()),
            _ => (
                MissingFact::RdmaDevice,
                format!("{} GPUs, 0 RDMA NICs found", r.gpus.len()),
            ),
        };
        out.push(nothing_here(
            "gdr.ready",
            Some(missing),
            format!("no GPU-NIC pair to judge ({fact})"),
        ));
        return;
    }
    if used.is_empty() {
        let f = violation(
            "gdr.ready",
            "host",
            format!(
                "no GPU-NIC pair for GPUDirect RDMA ({} GPUs, {} RDMA NICs)",
                r.gpus.len(),
                r.nics.len()
            ),
        )
        .evidence("gpus", r.gpus.len())
        .evidence("nics", r.nics.len())
        .fix("GDR needs NVIDIA GPUs and RDMA NICs on the same host: check `fabprobe topo`");
        out.push(f);
        return;
    }
    for x in used {
        gdr_pair(r, x, out);
    }
}

/// `gdr.ready` for one GPU-NIC pair NCCL would use: off (distance, no peer memory) or
/// redirected by ACS is a violation; unknown (path, peer memory, ACS unread) is not evaluated.
fn gdr_pair(r: &GdrReport, x: &crate::probe::gdr::GdrPair, out: &mut Vec<Finding>) {
    let subject = x.subject.clone();
    let path = x.path.map(|p| p.as_str()).unwrap_or("?");
    match x.verdict {
        None => out.push(not_evaluated(
            "gdr.ready",
            format!("{subject}: the path between them is unknown"),
        )),
        Some(GdrVerdict::Unknown) => out.push(
            not_evaluated(
                "gdr.ready",
                format!(
                    "{subject}: no peer-memory client seen and DMA-BUF cannot be told (unknown: {})",
                    if r.dmabuf.unknown.is_empty() {
                        "/sys/module not visible".to_string()
                    } else {
                        r.dmabuf.unknown.join(", ")
                    }
                ),
            )
            .evidence("dmabuf_path", r.dmabuf.path.as_str()),
        ),
        Some(v @ (GdrVerdict::OffDistance | GdrVerdict::OffNoPeerMemory)) => {
            let why = if v == GdrVerdict::OffDistance {
                format!(
                    "the path {path} is farther than NCCL_NET_GDR_LEVEL={} ({})",
                    r.nccl_net_gdr_level.name, r.nccl_net_gdr_level.source
                )
            } else {
                "no peer-memory client (nvidia-peermem) and no DMA-BUF path".to_string()
            };
            let nearer = crate::probe::gdr::nearer_nics_not_opened(r, x);
            let f = violation("gdr.ready", &subject, format!("GPUDirect RDMA is off for {subject}: {why}"))
                .evidence("verdict", v.as_str())
                .evidence("path", path)
                .evidence("nvidia_peermem_loaded", r.peer_memory.nvidia_peermem_loaded)
                .evidence("dmabuf_possible", r.dmabuf.possible)
                .fix("see the gdr.* finding for this pair, or `fabprobe gdr`");
            out.push(match nearer.is_empty() {
                true => f,
                false => f.evidence("nearer_nics_not_opened", nearer.join(" ")),
            });
        }
        // Both detours through the root complex fail alike (`gdr::detour_severity`).
        Some(_) if x.acs_redirect => out.push(
            violation(
                "gdr.ready",
                &subject,
                format!("ACS redirects peer-to-peer traffic between {subject} through the root complex"),
            )
            .evidence("verdict", "acs_redirect")
            .evidence("bridges_between", x.bridges_between.join(" "))
            .fix("turn ACS redirect off on the bridges between them (`setpci`, or the BIOS), see `fabprobe gdr`"),
        ),
        Some(_) if crate::probe::gdr::translated_type(r, x).is_some() => {
            let t = crate::probe::gdr::translated_type(r, x).unwrap_or_default();
            out.push(
                violation(
                    "gdr.ready",
                    &subject,
                    format!("the IOMMU translates the DMA of {subject} (group type {t}): GPUDirect traffic goes through the root complex"),
                )
                .evidence("verdict", "iommu_translation")
                .evidence("iommu_group_type", t)
                .fix("boot with `iommu=pt`, see `fabprobe gdr`"),
            )
        }
        // Unreadable ACS (non-root reads 64 bytes of config space): not a pass.
        Some(_) if x.acs_unknown => out.push(not_evaluated(
            "gdr.ready",
            format!(
                "{subject}: ACS of the bridges between them could not be read (config space past 64 bytes needs root)"
            ),
        )),
        Some(_) => {}
    }
}
