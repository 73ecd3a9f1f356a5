//! `fabprobe topo`: the GPU/NIC topology matrix.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use super::{Format, GlobalArgs, Outcome, UsageError, emit, open_host};
use crate::probe::topo;
use crate::render::{Envelope, HostInfo};

#[derive(Debug, Args)]
#[command(after_long_help = topo_help())]
pub(crate) struct TopoArgs {
    /// Print NCCL's path types (LOC/NVL/NVB/PIX/PXB/PHB/SYS: no NODE, Broadcom switches
    /// flattened, ports of one adapter merged) instead of nvidia-smi's. Table only: the JSON
    /// report always carries both matrices.
    #[arg(long)]
    pub nccl: bool,
    /// Read the topology from an NCCL topology file (NCCL_TOPO_FILE / NCCL_TOPO_DUMP_FILE)
    /// instead of the host; on cloud VMs that file is the truth.
    #[arg(long, value_name = "FILE")]
    pub nccl_xml: Option<PathBuf>,
    /// Only this RDMA device among the NICs (as `gids --device`), e.g. `--device mlx5_0`:
    /// every GPU, and that NIC's row and column under the label the whole host gives it.
    #[arg(long, value_name = "DEV")]
    pub device: Option<String>,
}

/// The long help: prose, the FINDINGS list from the probe's rule table, the rest.
fn topo_help() -> String {
    let rules = crate::render::text::findings_section(&crate::finding::docs(topo::RULES));
    format!("{TOPO_HELP}{rules}\n{TOPO_HELP_DATA}")
}

const TOPO_HELP: &str = "\
EXAMPLES
  fabprobe topo                          this host, laid out as nvidia-smi topo -m prints it
  fabprobe topo --nccl                   the same pairs as NCCL classifies them
  fabprobe --root node1.tar.gz topo      a captured host
  fabprobe topo --format nccl-xml >t.xml then NCCL_TOPO_FILE=t.xml
  fabprobe topo --nccl-xml /var/run/nvidia-topologyd/virtualTopology.xml

CELLS
  X self; NV# bonded NVLinks (direct or through NVSwitch, from NVML); PIX at most one PCIe
  switch; PXB several switches, no host bridge; PHB through the host bridge; NODE between host
  bridges of one NUMA node; SYS across NUMA nodes. Without NVML (no driver, a container, a
  snapshot without fabprobe/nvml.json) GPUs are the PCI functions with vendor 0x10de and a VGA
  or 3D class in bus order, GPU-GPU cells come from the PCI tree alone, and a note says so.
  NICs are the RDMA devices of /sys/class/infiniband in registration order (PCI bus order,
  bonds last), which is natural name order for kernel-assigned names.

NARROW TERMINALS
  On a terminal narrower than the matrix (COLUMNS, else the terminal's width; 8 GPUs and 10
  NICs take about 150 columns) the matrix prints in column blocks, each a slice of nvidia-smi's
  layout with every row (GPU columns, then NIC columns, then the affinities), and the legend
  wraps under its meanings. Piped or redirected, stdout is nvidia-smi's bytes at any width, so
  `fabprobe topo | diff - <(nvidia-smi topo -m)` compares like for like; on a terminal,
  `fabprobe topo | cat` prints those bytes. The verdict line goes to stderr either way.

";

const TOPO_HELP_DATA: &str = "\
NVSWITCH FABRIC
  Only on hosts with NVSwitches (PCI vendor 0x10de, class 0x068000) or GPUs whose NVML fabric
  state is not not_supported: the switches and their bound driver; the nv-fabricmanager
  process (the /proc scan, by executable); systemd's nvidia-fabricmanager.service from its
  cgroup (/sys/fs/cgroup/system.slice/, v1: .../systemd/system.slice/: present = active,
  absent = inactive or failed); its version from `nv-fabricmanager --version` (the running
  binary, else /usr/bin/nv-fabricmanager; run live with a 5 s deadline, kept in a snapshot's
  fabprobe/fabricmanager.json) beside /proc/driver/nvidia/version; each GPU's state from
  nvmlDeviceGetGpuFabricInfoV (else nvmlDeviceGetGpuFabricInfo; Hopper and later).

JSON DATA (schema fabprobe.topo)
  source                    sysfs | sysfs+nvml | nccl-xml:<file>
  nvlink_available, nvlink_unavailable_reason
  labels                    [\"GPU0\", ..., \"NIC0\", ...]: rows and columns of both matrices
  matrix                    nvidia-smi cells (X, NV18, PIX, PXB, PHB, NODE, SYS;
                             N/A: the device's PCI place is unknown)
  nccl_matrix               NCCL path types (X, LOC, NVL, NVB, PIX, PXB, PHB, SYS)
  gpus[]                    {label, index, pci_bus_id, name, sm, gpu_numa_id,
                             nvlinks[] {target_pci_bus_id,
                                        target_kind (gpu|nvswitch|cpu|other|unknown: from a
                                        listed GPU, NVML's remote device type, the far end's
                                        PCI class or the file's tclass; unknown and hidden
                                        GPUs are not counted in NV# and get a note),
                                        count},
                             pci}
  nics[]                    {label, ibdev, node_guid,
                             ports[] {port, link_layer, rate, rate_mbps}, pci}
  pci (of a GPU or NIC)     {pci_bus_id, sysfs_path, root_bus, bridges[], nccl_switches[],
                             ident {class, vendor, device, subsystem_vendor, subsystem_device}
                               (kernel spelling: \"0x030200\", \"0x10de\"),
                             numa_node (-1 kept), local_cpulist,
                             link {current_speed, current_width, max_speed, max_width}
                               (a speed is {raw, gts, generation}),
                             upstream_max_speed, upstream_max_width, nccl_link_speed,
                             nccl_link_width, error}
  switches[]                NCCL switch nodes: {pci_bus_id, parent, ident,
                             nccl_link_speed, nccl_link_width}
  numa_nodes[]              {id, cpulist, cpumap}
  cpu                       {arch, vendor, family_id, model_id} (from /proc/cpuinfo)
  gpus_not_in_nvml[]        {pci_bus_id, current_link_speed (as the kernel prints it)}:
                             NVIDIA GPUs on the PCI bus that NVML does not list
  nics_not_in_rdma[]        {label (the one it would have had), pci_bus_id, vendor_device
                             (15b3:1021), driver, netdevs[], gpus_beside[] (on its PCIe
                             switch; absent: none), module_not_loaded (mlx5_core: the
                             module to load when none of the vendor's NICs registered;
                             absent otherwise)}: RDMA-capable NICs on the PCI bus that
                             /sys/class/infiniband does not list
  gpus_without_driver[]     {pci_bus_id, driver (nouveau; null: none bound)}: NVIDIA GPUs
                             on the PCI bus that NVIDIA's driver does not drive, read when
                             NVML did not load (vfio-pci ones are left out); absent: none
  notes[]                   what the report could not see
  fabric                    absent without NVSwitches and fabric-reporting GPUs, else
                            {nvswitches[] {pci_bus_id, device_id, driver},
                             fabric_manager (null without NVSwitches):
                              {process {state: running (pids) | not_running | unknown (reason)},
                               service {state: active (cgroup, pids) | not_active (cgroup) |
                                        unknown (reason)},
                               version, version_unknown, driver_version,
                               driver_version_source (/proc/driver/nvidia/version | nvml)},
                             gpus[] {label, pci_bus_id, state (not_supported | not_started |
                                     in_progress | completed; null: unknown), status
                                     (nvmlReturn_t), status_text (nvmlErrorString), note}}

";

/// `--device DEV`: the GPUs and that NIC, judged on the whole host first (a NIC's PCIe width
/// against its peers'). The GPUs stay because the question is which GPUs sit near DEV; the
/// NIC keeps its label (NIC3 stays NIC3), so the view reads as a cut of the full matrix.
fn only_nic(
    r: &mut topo::TopoReport,
    dev: &str,
    findings: Vec<crate::finding::Finding>,
) -> Result<Vec<crate::finding::Finding>, UsageError> {
    // A finding may name a NIC by its device (`mlx5_3`) or its label (`NIC3`).
    let names = |n: &topo::TopoNic| [n.ibdev.clone(), n.label.clone()];
    let kept: Vec<String> = r.nics.iter().filter(|n| n.ibdev == dev).flat_map(names).collect();
    let dropped: Vec<String> = r.nics.iter().filter(|n| n.ibdev != dev).flat_map(names).collect();
    super::only_device(&mut r.nics, dev, |n| n.ibdev.as_str(), true)?;
    let (k, d): (Vec<&str>, Vec<&str>) = (kept.iter().map(|s| s.as_str()).collect(), dropped.iter().map(|s| s.as_str()).collect());
    let findings = super::findings_kept(findings, &k, &d);
    let keep: Vec<bool> = r.labels.iter().map(|l| !dropped.contains(l)).collect();
    let on = |i: usize| keep.get(i).copied().unwrap_or(true);
    for m in [&mut r.matrix, &mut r.nccl_matrix] {
        *m = std::mem::take(m)
            .into_iter()
            .enumerate()
            .filter(|(i, _)| on(*i))
            .map(|(_, row)| row.into_iter().enumerate().filter(|(j, _)| on(*j)).map(|(_, c)| c).collect())
            .collect();
    }
    r.labels = std::mem::take(&mut r.labels).into_iter().enumerate().filter(|(i, _)| on(*i)).map(|(_, l)| l).collect();
    Ok(findings)
}

pub(crate) fn run(g: &GlobalArgs, a: TopoArgs) -> anyhow::Result<Outcome> {
    let fmt = g.format;
    let (mut report, host_info) = match &a.nccl_xml {
        Some(file) => {
            if g.root.is_some() {
                return Err(UsageError(
                    "--nccl-xml reads a topology file; it cannot be combined with --root".into(),
                )
                .into());
            }
            g.log(1, format!("reading NCCL topology file {}", file.display()));
            let sys = crate::nccl::topo_xml::read_file(file)?;
            let shown = file.display().to_string();
            (
                topo::from_nccl_system(&sys, &shown),
                HostInfo {
                    hostname: None,
                    kernel: None,
                    captured_at: None,
                    source: format!("nccl-xml:{shown}"),
                },
            )
        }
        None => {
            let host = open_host(g)?;
            let r = topo::probe(&host);
            (r, HostInfo::of(&host))
        }
    };
    // The one cause model `check` uses: one finding per cause, ranked as `check` ranks them,
    // so both name the same worst cause for one report.
    let mut findings = crate::check::decide::causes(topo::judge(&report));
    crate::check::decide::rank(&mut findings);
    if let Some(dev) = &a.device {
        findings = only_nic(&mut report, dev, findings)?;
    }
    let text = match fmt {
        Format::Json => Envelope::new("topo", host_info, &report, &findings).to_json(),
        Format::NcclXml => crate::render::topo::nccl_xml(&report),
        _ => {
            // stdout stays nvidia-smi's layout for scripts that parse it; the verdict goes to stderr.
            {
                use std::io::Write as _;
                let _ = write!(
                    std::io::stderr().lock(),
                    "{}",
                    crate::render::text::mark_moved(
                        &crate::render::text::verdict_line("topo", &findings),
                        &topo::moved_names(&report)
                    )
                );
            }
            // Split to the terminal's width only on a terminal: piped, the bytes stay nvidia-smi's.
            use std::io::IsTerminal;
            let fit = crate::render::text::width().filter(|_| std::io::stdout().is_terminal());
            crate::render::topo::table_fit(&report, &findings, a.nccl, fit)
        }
    };
    emit(&text).context("writing the report")?;
    Ok(Outcome::from_findings(&findings))
}
