//! `fabprobe topo` output: the `nvidia-smi topo -m` table (same layout, byte for byte:
//! tab-separated cells, ` X ` on the diagonal, the same header, legend and `NIC Legend:`),
//! its NCCL-path-type variant, and NCCL topology XML.

use crate::finding::Finding;
use crate::nccl::topo_xml;
use crate::probe::topo::{TopoReport, to_nccl_system};

/// nvidia-smi's legend, verbatim (current drivers; see samples/legend-variants).
pub(crate) const SMI_LEGEND: &str = "Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
";

/// The same, for NCCL's path types (`--nccl`).
pub(crate) const NCCL_LEGEND: &str = "Legend (NCCL path types):

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
    table_fit(r, findings, nccl, None)
}

/// [`table`] for a terminal `fit` columns wide: a matrix wider than that (8 GPUs and 10 NICs
/// need 150) is printed in column blocks, each a slice of nvidia-smi's layout with every row
/// (GPU columns, then NIC columns, then the affinities), instead of lines the terminal folds
/// into a jumble. The CLI passes a width only when stdout is a terminal: a pipe or a file
/// gets nvidia-smi's bytes, which is what users diff against.
pub(crate) fn table_fit(r: &TopoReport, findings: &[Finding], nccl: bool, fit: Option<usize>) -> String {
    // The verdict goes to stderr, so the moved names' legend goes last.
    let moved = crate::probe::topo::moved_names(r);
    if moved.is_empty() {
        return table_fit_body(r, findings, nccl, fit);
    }
    // Narrower by the marks a wrapped line can gain, so the marked lines still fit.
    let body = table_fit_body(r, findings, nccl, fit.map(|w| w.saturating_sub(3)));
    crate::render::text::mark_moved(&body, &moved) + &crate::render::text::moved_legend_to(&moved, fit)
}

fn table_fit_body(r: &TopoReport, findings: &[Finding], nccl: bool, fit: Option<usize>) -> String {
    let mut o = String::new();
    if r.labels.is_empty() {
        o.push_str("No NVIDIA GPU and no RDMA device to show.\n");
    } else {
        let whole = matrix(r, nccl);
        match fit.filter(|w| whole.lines().any(|l| shown_width(l) > *w)) {
            Some(w) => o.push_str(&blocks(r, nccl, w)),
            None => o.push_str(&whole),
        }
        o.push('\n');
        o.push_str(&legend(if nccl { NCCL_LEGEND } else { SMI_LEGEND }, fit));
        if !r.nics.is_empty() {
            o.push_str("\nNIC Legend:\n\n");
            for n in &r.nics {
                o.push_str(&format!("  {}: {}\n", n.label, n.ibdev));
            }
        }
    }
    if let Some(f) = &r.fabric {
        o.push_str(&fabric(f, fit));
    }
    if !r.notes.is_empty() {
        o.push_str("\nNotes:\n");
        for n in &r.notes {
            o.push_str(&crate::render::text::wrap("  ", n, 4));
        }
    }
    o.push_str(&crate::render::text::findings(findings));
    o
}

/// The NVSwitch section: the switches and their driver, the Fabric Manager (process, systemd
/// unit, version beside the driver's) and the GPUs' fabric state, grouped by state.
fn fabric(f: &crate::probe::fabric::FabricReport, fit: Option<usize>) -> String {
    use crate::probe::fabric::{FmProcess, FmService};
    let mut o = String::from("\nNVSwitch fabric:\n");
    if !f.nvswitches.is_empty() {
        let mut drivers: Vec<&str> = f.nvswitches.iter().map(|s| s.driver.as_deref().unwrap_or("no driver bound")).collect();
        drivers.dedup();
        let ids: Vec<&str> = f.nvswitches.iter().map(|s| s.pci_bus_id.as_str()).collect();
        let line = format!("NVSwitches: {} ({}), driver {}", ids.len(), ids.join(" "), drivers.join(", "));
        o.push_str(&crate::render::text::wrap_to("  ", &line, 4, fit));
    }
    if let Some(fm) = &f.fabric_manager {
        let process = match &fm.process {
            FmProcess::Running { pids } => {
                let p: Vec<String> = pids.iter().map(u32::to_string).collect();
                format!("running (pid {})", p.join(" "))
            }
            FmProcess::NotRunning => "NOT running".into(),
            FmProcess::Unknown { reason } => format!("unknown ({reason})"),
        };
        let service = match &fm.service {
            FmService::Active { .. } => "active".to_string(),
            FmService::NotActive { .. } => "not active (inactive or failed)".into(),
            FmService::Unknown { reason } => format!("unknown ({reason})"),
        };
        let version = fm.version.clone().unwrap_or_else(|| {
            format!("unknown ({})", fm.version_unknown.as_deref().unwrap_or("not read"))
        });
        let driver = fm.driver_version.as_deref().unwrap_or("unknown");
        let unit = crate::probe::fabric::FM_UNIT;
        o.push_str(&crate::render::text::wrap_to("  ", &format!("Fabric Manager: {process}; {unit} {service}"), 4, fit));
        o.push_str(&crate::render::text::wrap_to("  ", &format!("Fabric Manager version: {version}; driver {driver}"), 4, fit));
    }
    let mut groups: Vec<(String, Vec<&str>)> = Vec::new();
    for g in &f.gpus {
        let key = match (&g.state, &g.note) {
            (Some(s), _) => match &g.status_text {
                Some(t) => format!("{s} ({t})"),
                None => s.clone(),
            },
            (None, Some(n)) => format!("unknown: {n}"),
            (None, None) => "unknown".into(),
        };
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(&g.label),
            None => groups.push((key, vec![&g.label])),
        }
    }
    for (k, v) in groups {
        o.push_str(&crate::render::text::wrap_to("  ", &format!("GPU fabric state: {k}: {}", v.join(" ")), 4, fit));
    }
    o
}

/// The legend as nvidia-smi words it; on a terminal narrower than a line, that line wraps
/// under its meaning (`  SYS  = Connection traversing PCIe as well as the SMP` and the rest
/// nine columns in): only the compatible bytes (a pipe, a file) need the long lines.
fn legend(text: &str, fit: Option<usize>) -> String {
    let Some(w) = fit else {
        return text.to_string();
    };
    let mut o = String::new();
    for l in text.lines() {
        match l.split_at_checked(9) {
            Some((key, meaning)) if l.chars().count() > w && key.ends_with("= ") => {
                o.push_str(&crate::render::text::wrap_to(key, meaning, 9, Some(w)))
            }
            _ => {
                o.push_str(l);
                o.push('\n');
            }
        }
    }
    o
}

/// Columns a line takes on a terminal: tabs stop every 8.
fn shown_width(line: &str) -> usize {
    line.chars()
        .fold(0, |c, ch| if ch == '\t' { (c / 8 + 1) * 8 } else { c + 1 })
}

/// A GPU's affinity cells as nvidia-smi prints them (its empty column before the GPU NUMA ID
/// kept).
fn affinity(g: &crate::probe::topo::TopoGpu) -> String {
    let numa = match g.pci.numa_node {
        Some(n) if n >= 0 => n.to_string(),
        _ => "N/A".into(),
    };
    let gnuma = g
        .gpu_numa_id
        .map(|n| n.to_string())
        .unwrap_or_else(|| "N/A".into());
    format!(
        "\t{}\t{}\t\t{}",
        g.pci.local_cpulist.as_deref().unwrap_or("N/A"),
        numa,
        gnuma
    )
}

/// The header and rows of the matrix, with only the columns in `cols` (and the affinity
/// columns when `affinities`).
fn matrix_cols(r: &TopoReport, nccl: bool, cols: &[usize], affinities: bool) -> String {
    let m = if nccl { &r.nccl_matrix } else { &r.matrix };
    let mut o = String::new();
    for &j in cols {
        o.push('\t');
        o.push_str(&r.labels[j]);
    }
    if affinities {
        o.push_str("\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID");
    }
    o.push('\n');
    for (i, l) in r.labels.iter().enumerate() {
        let gpu = r.gpus.get(i);
        if cols.is_empty() && gpu.is_none() {
            continue; // the affinity block: GPU rows only
        }
        o.push_str(l);
        let row = m.get(i).map(Vec::as_slice).unwrap_or(&[]);
        for &j in cols {
            o.push('\t');
            o.push_str(row.get(j).map(|c| cell(c)).unwrap_or(""));
        }
        if let Some(g) = gpu.filter(|_| affinities) {
            o.push_str(&affinity(g));
        }
        o.push('\n');
    }
    o
}

/// The whole matrix, nvidia-smi's layout byte for byte.
fn matrix(r: &TopoReport, nccl: bool) -> String {
    let all: Vec<usize> = (0..r.labels.len()).collect();
    matrix_cols(r, nccl, &all, !r.gpus.is_empty())
}

/// The matrix in column blocks of at most `width` columns (a block holds one column at
/// least), the affinities last; a line says why the layout is not nvidia-smi's.
fn blocks(r: &TopoReport, nccl: bool, width: usize) -> String {
    let fits = |cols: &[usize]| {
        matrix_cols(r, nccl, cols, false)
            .lines()
            .all(|l| shown_width(l) <= width)
    };
    // GPU and NIC columns in separate blocks, as the reader looks for them; blocks of one
    // kind even in size (10 NICs in 80 columns: 5 and 5, not 9 and 1).
    let n_gpu = r.gpus.len().min(r.labels.len());
    let mut chunks: Vec<Vec<usize>> = Vec::new();
    for kind in [0..n_gpu, n_gpu..r.labels.len()] {
        let cols: Vec<usize> = kind.collect();
        if cols.is_empty() {
            continue;
        }
        let most = (1..=cols.len())
            .take_while(|&k| fits(&cols[..k]))
            .last()
            .unwrap_or(1);
        let per = cols.len().div_ceil(cols.len().div_ceil(most));
        chunks.extend(cols.chunks(per).map(<[usize]>::to_vec));
    }
    let why = format!(
        "(the matrix in {} column blocks to fit {width} columns; piped, or on a wider terminal, \
         it prints as nvidia-smi topo -m does)",
        chunks.len() + usize::from(!r.gpus.is_empty())
    );
    let mut o = crate::render::text::wrap_to("", &why, 1, Some(width));
    o.push('\n');
    let mut parts: Vec<String> = chunks.iter().map(|c| matrix_cols(r, nccl, c, false)).collect();
    if !r.gpus.is_empty() {
        parts.push(matrix_cols(r, nccl, &[], true));
    }
    o.push_str(&parts.join("\n"));
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

    fn report(fixture: &str) -> TopoReport {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures")
            .join(fixture);
        crate::probe::topo::probe(&crate::host::Host::snapshot(root).unwrap())
    }

    /// 8 GPUs and 10 NICs at 80 columns: every line fits, and every cell of nvidia-smi's
    /// matrix is still there, under the same row and column labels.
    #[test]
    fn narrow_terminal_gets_column_blocks_with_every_cell() {
        let r = report("h100-sxm-8gpu");
        assert_eq!((r.gpus.len(), r.nics.len()), (8, 10));
        let whole = table(&r, &[], false);
        assert!(whole.lines().any(|l| shown_width(l) > 80), "{whole}");
        // Wide enough, or no width: byte for byte the same.
        assert_eq!(table_fit(&r, &[], false, Some(400)), whole);
        for width in [80, 60] {
            let narrow = table_fit(&r, &[], false, Some(width));
            let matrix_end = narrow.find("Legend:").unwrap();
            for l in narrow[..matrix_end].lines() {
                assert!(shown_width(l) <= width, "{width}: {l:?}\n{narrow}");
            }
            // Read the blocks back into (row, column) -> cell and compare with the report.
            let mut seen = std::collections::BTreeMap::new();
            let mut cols: Vec<String> = Vec::new();
            for l in narrow[..matrix_end].lines().filter(|l| l.contains('\t')) {
                let f: Vec<&str> = l.split('\t').collect();
                if f[0].is_empty() {
                    cols = f[1..].iter().map(|s| s.to_string()).collect();
                } else {
                    for (c, v) in cols.iter().zip(&f[1..]) {
                        seen.insert((f[0].to_string(), c.clone()), v.trim().to_string());
                    }
                }
            }
            for (i, row) in r.labels.iter().enumerate() {
                for (j, col) in r.labels.iter().enumerate() {
                    let got = seen.get(&(row.clone(), col.clone()));
                    assert_eq!(
                        got.map(String::as_str),
                        Some(r.matrix[i][j].as_str()),
                        "{row} x {col}"
                    );
                }
            }
            assert!(seen.contains_key(&("GPU7".to_string(), "CPU Affinity".to_string())));
            // The legend and NIC legend say the same words, each line within the width
            // (a legend line wraps under its meaning, nine columns in).
            let (legend, was) = (&narrow[matrix_end..], &whole[whole.find("Legend:").unwrap()..]);
            let words = |t: &str| t.split_whitespace().map(str::to_string).collect::<Vec<_>>();
            assert_eq!(words(legend), words(was));
            assert!(legend.lines().all(|l| l.chars().count() <= width), "{legend}");
            let under = |l: &str| l.starts_with("         ") && !l[9..].starts_with(' ');
            assert!(legend.lines().any(under), "{legend}");
        }
    }
}
