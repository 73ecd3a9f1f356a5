//! `fabprobe topo` output: the `nvidia-smi topo -m` table (same layout, byte for byte:
//! tab-separated cells, ` X ` on the diagonal, the same header, legend and `NIC Legend:`),
//! its NCCL-path-type variant, and NCCL topology XML.

use crate::finding::Finding;
use crate::nccl::topo_xml;
use crate::probe::topo::{TopoReport, to_nccl_system};

/// nvidia-smi's legend, verbatim (current drivers; see samples/legend-variants).
pub const SMI_LEGEND: &str = "Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
";

/// The same, for NCCL's path types (`--nccl`).
pub const NCCL_LEGEND: &str = "Legend (NCCL path types):

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU); NCCL has no NODE
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge (Broadcom two-level switches flattened)
  NVB  = Connection traversing NVLink through one intermediate GPU
  NVL  = Connection traversing NVLink, directly or through NVSwitch
  LOC  = Same NIC (ports of one adapter, merged by NCCL)
";

fn cell(c: &str) -> &str {
    if c == "X" { " X " } else { c }
}

/// The matrix as nvidia-smi prints it (`nccl`: NCCL's path types instead), then notes and
/// findings.
pub fn table(r: &TopoReport, findings: &[Finding], nccl: bool) -> String {
    let mut o = String::new();
    if r.labels.is_empty() {
        o.push_str("No NVIDIA GPU and no RDMA device to show.\n");
    } else {
        let m = if nccl { &r.nccl_matrix } else { &r.matrix };
        let has_gpus = !r.gpus.is_empty();
        for l in &r.labels {
            o.push('\t');
            o.push_str(l);
        }
        if has_gpus {
            o.push_str("\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID");
        }
        o.push('\n');
        for (i, l) in r.labels.iter().enumerate() {
            o.push_str(l);
            for c in m.get(i).map(Vec::as_slice).unwrap_or(&[]) {
                o.push('\t');
                o.push_str(cell(c));
            }
            if let Some(g) = r.gpus.get(i) {
                let numa = match g.pci.numa_node {
                    Some(n) if n >= 0 => n.to_string(),
                    _ => "N/A".into(),
                };
                let gnuma = g
                    .gpu_numa_id
                    .map(|n| n.to_string())
                    .unwrap_or_else(|| "N/A".into());
                o.push_str(&format!(
                    "\t{}\t{}\t\t{}",
                    g.pci.local_cpulist.as_deref().unwrap_or("N/A"),
                    numa,
                    gnuma
                ));
            }
            o.push('\n');
        }
        o.push('\n');
        o.push_str(if nccl { NCCL_LEGEND } else { SMI_LEGEND });
        if !r.nics.is_empty() {
            o.push_str("\nNIC Legend:\n\n");
            for n in &r.nics {
                o.push_str(&format!("  {}: {}\n", n.label, n.ibdev));
            }
        }
    }
    if !r.notes.is_empty() {
        o.push_str("\nNotes:\n");
        for n in &r.notes {
            o.push_str(&format!("  {n}\n"));
        }
    }
    o.push_str(&crate::render::text::findings(findings));
    o
}

/// NCCL topology XML, usable as `NCCL_TOPO_FILE`.
pub fn nccl_xml(r: &TopoReport) -> String {
    topo_xml::write(&to_nccl_system(r))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The legend must stay byte-identical to the real captures.
    #[test]
    fn legend_matches_the_real_samples() {
        for sample in [
            "SzymonOzog-blog_Penny-worklog-1_8xH100_8IB+5ETH_nvidia-smi-topo-m.txt",
            "XueSongTap-blog_4xA10_2NIC_nvidia-smi-topo-m.txt",
        ] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/data/nvidia-smi")
                .join(sample);
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(text.contains(SMI_LEGEND), "{sample}");
        }
    }
}
