//! `[gpu]`: count, model, driver, NVLinks and the GPUs' NICs.

use super::{not_evaluated, nothing_here, rank_of_cell, violation};
use crate::check::Finding;
use crate::check::policy::{JudgedBy, Policy, set_keys};
use crate::check::run::Collected;
use crate::finding::MissingFact;
use crate::probe::topo;
use crate::probe::topo::TopoReport;

/// The GPUs as the `[gpu]` rules see them (the topo probe ran).
pub(super) struct Gpus<'a> {
    c: &'a Collected,
    t: &'a TopoReport,
    r: &'a crate::check::policy::GpuRules,
}

/// A `[gpu]` key's judge.
type GpuJudge = fn(&Gpus<'_>, &mut Vec<Finding>);

/// `[gpu]`: each key its own rule, in this order.
pub(super) const GPU_RULES: &[(&str, GpuJudge)] = &[
    ("count", gpu_count),
    ("model", gpu_model),
    ("driver", gpu_driver),
    ("nvlink_min", gpu_nvlink_min),
    ("nic_path_max", gpu_nic_path_max),
    ("nic_per_gpu", gpu_nic_per_gpu),
];

pub(crate) fn judge_gpu(c: &Collected, p: &Policy, out: &mut Vec<Finding>) {
    let r = &p.gpu;
    let Some(t) = &c.topo else {
        if !set_keys(p, "gpu", JudgedBy::Gpu).is_empty() {
            out.push(not_evaluated("gpu", "the topo probe did not run"));
        }
        return;
    };
    let x = Gpus { c, t, r };
    for (_, judge) in GPU_RULES {
        judge(&x, out);
    }
}

/// A `[gpu]` key with nothing to judge: `no GPU`, `no GPU pair`.
fn nothing_to_judge(t: &TopoReport, key: &str, what: &str) -> Finding {
    // One GPU and no pair is a reason of its own, not a missing fact.
    let fact = t.gpus.is_empty().then_some(MissingFact::Gpu);
    nothing_here(
        key,
        fact,
        format!("{what} to judge ({} GPUs found)", t.gpus.len()),
    )
}

fn gpu_count(x: &Gpus, out: &mut Vec<Finding>) {
    let (t, r) = (x.t, x.r);
    // The PCI bus could not be listed (and NVML gave no list): the count is unknown.
    let unlisted = t
        .notes
        .iter()
        .find(|n| n.starts_with("cannot list PCI devices"))
        .filter(|_| t.gpus.is_empty());
    if let (Some(_), Some(why)) = (r.count, unlisted) {
        out.push(not_evaluated("gpu.count", why.clone()));
    }
    if let Some(n) = r.count
        && unlisted.is_none()
        && t.gpus.len() as u64 != n
    {
        let ids: Vec<&str> = t.gpus.iter().map(|g| g.pci_bus_id.as_str()).collect();
        out.push(
            violation(
            "gpu.count",
            "GPUs",
            format!("{} found, {n} expected", crate::finding::spell::count(t.gpus.len(), "GPU", "GPUs")),
        )
                .evidence("found", t.gpus.len())
                .evidence("expected", n)
                .evidence("pci_bus_ids", ids)
                .fix("a GPU fell off the bus or was not enumerated: check `dmesg | grep -i -e NVRM -e Xid`, `lspci -d 10de:`, reseat or RMA"),
        );
    }
}

fn gpu_model(x: &Gpus, out: &mut Vec<Finding>) {
    let (t, r) = (x.t, x.r);
    if t.gpus.is_empty() && r.model.is_some() {
        out.push(nothing_to_judge(t, "gpu.model", "no GPU"));
    }
    if let Some(model) = &r.model {
        for g in &t.gpus {
            match &g.name {
                None => {
                    out.push(not_evaluated(
                        "gpu.model",
                        format!("{}: no GPU name (NVML unavailable)", g.label),
                    ));
                    break;
                }
                Some(name) if !name.contains(model.as_str()) => out.push(
                    violation(
                        "gpu.model",
                        &g.label,
                        format!("{} is a {name}, not {model}", g.label),
                    )
                    .evidence("name", name.as_str())
                    .evidence("pci_bus_id", g.pci_bus_id.as_str()),
                ),
                _ => {}
            }
        }
    }
}

fn gpu_driver(x: &Gpus, out: &mut Vec<Finding>) {
    let (c, r) = (x.c, x.r);
    if !r.driver.is_empty() {
        match &c.driver_version {
            None => out.push(not_evaluated(
                "gpu.driver",
                "no driver version (NVML unavailable)",
            )),
            Some(v) if !r.driver.iter().any(|p| v.starts_with(p.as_str())) => out.push(
                violation(
                    "gpu.driver",
                    "driver",
                    format!("driver {v} is not one of the allowed {}", r.driver.join(", ")),
                )
                .evidence("driver_version", v.as_str())
                .fix("install the fleet's driver version"),
            ),
            _ => {}
        }
    }
}

fn gpu_nvlink_min(x: &Gpus, out: &mut Vec<Finding>) {
    let (t, r) = (x.t, x.r);
    if r.nvlink_min.is_some() && t.gpus.len() < 2 {
        out.push(nothing_to_judge(t, "gpu.nvlink_min", "no GPU pair"));
    }
    if let Some(min) = r.nvlink_min {
        if !t.nvlink_available {
            out.push(not_evaluated(
                "gpu.nvlink_min",
                t.nvlink_unavailable_reason
                    .clone()
                    .unwrap_or_else(|| "NVLink data unavailable".into()),
            ));
        } else {
            // One finding per GPU that lost links, not one per pair it is in.
            for l in topo::nvlink_by_gpu(t, |n| n < min) {
                let cells: Vec<String> = l
                    .pairs
                    .iter()
                    .map(|(p, c)| {
                        if p.is_empty() {
                            c.clone()
                        } else {
                            format!("{p} {c}")
                        }
                    })
                    .collect();
                out.push(
                    violation(
                        "gpu.nvlink_min",
                        &l.subject,
                        format!(
                            "{} is below NV{min} to {} of its {} GPU peers ({})",
                            l.subject,
                            l.pairs.len(),
                            l.peers,
                            cells.join(", ")
                        ),
                    )
                    .evidence("low_pairs", cells.join(", "))
                    .evidence("nvlink_min", min)
                    .fix(topo::nvlink_fix(&l.subject)),
                );
            }
        }
    }
}

/// For each GPU, the NICs at the policy's `nic_path_max` or nearer (every NIC without one).
fn near_nics(t: &TopoReport, r: &crate::check::policy::GpuRules) -> Vec<Vec<usize>> {
    let idx = |label: &str| t.labels.iter().position(|l| l == label);
    let max_rank = r
        .nic_path_max
        .as_deref()
        .and_then(rank_of_cell)
        .unwrap_or(usize::MAX);
    t.gpus
        .iter()
        .map(|g| {
            let Some(i) = idx(&g.label) else { return Vec::new() };
            t.nics
                .iter()
                .enumerate()
                .filter(|(_, n)| {
                    idx(&n.label)
                        .and_then(|j| t.matrix.get(i)?.get(j))
                        .and_then(|c| rank_of_cell(c))
                        .is_some_and(|r| r <= max_rank)
                })
                .map(|(k, _)| k)
                .collect()
        })
        .collect()
}

fn gpu_nic_path_max(x: &Gpus, out: &mut Vec<Finding>) {
    let (t, r) = (x.t, x.r);
    if t.gpus.is_empty() && r.nic_path_max.is_some() {
        out.push(nothing_to_judge(t, "gpu.nic_path_max", "no GPU"));
    }
    let idx = |label: &str| t.labels.iter().position(|l| l == label);
    let near = near_nics(t, r);
    if let Some(max) = &r.nic_path_max {
        for (g, n) in t.gpus.iter().zip(&near) {
            if n.is_empty() {
                let best = idx(&g.label)
                    .and_then(|i| {
                        t.nics
                            .iter()
                            .filter_map(|nic| {
                                let c = t.matrix.get(i)?.get(idx(&nic.label)?)?;
                                Some((
                                    rank_of_cell(c).unwrap_or(usize::MAX),
                                    format!("{} {c}", nic.ibdev),
                                ))
                            })
                            .min()
                    })
                    .map(|(_, s)| s)
                    .unwrap_or_else(|| "no RDMA NIC".into());
                out.push(
                    violation("gpu.nic_path_max", &g.label, format!("{} has no RDMA NIC at {max} or nearer (nearest: {best})", g.label))
                        .evidence("nearest", best)
                        .evidence("nic_path_max", max.as_str())
                        .fix("traffic from this GPU crosses the CPU: check that the NIC behind its PCIe switch is present and bound to its driver (lspci, dmesg mlx5)"),
                );
            }
        }
    }
}

fn gpu_nic_per_gpu(x: &Gpus, out: &mut Vec<Finding>) {
    let (t, r) = (x.t, x.r);
    if t.gpus.is_empty() && r.nic_per_gpu == Some(true) {
        out.push(nothing_to_judge(t, "gpu.nic_per_gpu", "no GPU"));
    }
    let near = near_nics(t, r);
    if r.nic_per_gpu == Some(true) {
        let matched = matching(&near, t.nics.len());
        // The GPUs with no NIC near at all: what follows for them (a far NIC, GDR off by
        // distance) follows from this, and for no other GPU.
        let far: Vec<&str> = t
            .gpus
            .iter()
            .zip(&near)
            .filter(|(_, n)| n.is_empty())
            .map(|(g, _)| g.label.as_str())
            .collect();
        if matched < t.gpus.len() {
            out.push(
                violation(
                    "gpu.nic_per_gpu",
                    "GPUs",
                    format!(
                        "only {matched} of {} GPUs can have a NIC of their own{}",
                        t.gpus.len(),
                        r.nic_path_max.as_deref().map(|m| format!(" at {m} or nearer")).unwrap_or_default()
                    ),
                )
                .evidence("gpus", t.gpus.len())
                .evidence("nics", t.nics.len())
                .evidence("matched", matched)
                .evidence("gpus_far", far.join(" "))
                .fix("a NIC is missing or on the wrong PCIe switch: compare `fabprobe topo` with the platform's wiring"),
            );
        }
    }
}

/// Size of a maximum one-to-one matching of GPUs to NICs (Kuhn's augmenting paths).
pub(crate) fn matching(near: &[Vec<usize>], nics: usize) -> usize {
    fn try_gpu(g: usize, near: &[Vec<usize>], seen: &mut [bool], owner: &mut [Option<usize>]) -> bool {
        for &n in &near[g] {
            if n >= seen.len() || seen[n] {
                continue;
            }
            seen[n] = true;
            if owner[n].is_none_or(|o| try_gpu(o, near, seen, owner)) {
                owner[n] = Some(g);
                return true;
            }
        }
        false
    }
    let mut owner = vec![None; nics];
    (0..near.len())
        .filter(|&g| try_gpu(g, near, &mut vec![false; nics], &mut owner))
        .count()
}
