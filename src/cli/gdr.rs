//! `fabprobe gdr`: GPUDirect RDMA readiness per GPU x RDMA NIC pair.

use clap::Args;

use super::{Format, GlobalArgs, Outcome, emit, open_host};
use crate::probe::gdr;
use crate::render::{Envelope, HostInfo};

#[derive(Debug, Args)]
#[command(after_long_help = gdr_help())]
pub(crate) struct GdrArgs {
    /// Only the pairs whose NIC is this RDMA device (as `gids --device`), e.g.
    /// `--device mlx5_0`: every GPU against that NIC.
    #[arg(long, value_name = "DEV")]
    pub device: Option<String>,
}

/// The long help: prose, the FINDINGS list from the probe's rule table, the rest.
fn gdr_help() -> String {
    let rules = crate::render::text::findings_section(&crate::finding::docs(gdr::RULES));
    format!("{GDR_HELP}{rules}\n{GDR_HELP_DATA}")
}

const GDR_HELP: &str = "\
For every GPU x RDMA NIC pair: NCCL's path type (as `fabprobe topo --nccl`) against
NCCL_NET_GDR_LEVEL (default PXB; names or the old numbers 0-4), and the verdict NCCL reaches:
on (a peer-memory client), dmabuf_possible (no peer memory, DMA-BUF prerequisites met),
off_distance, off_no_peer_memory, or unknown (no peer memory seen, and /sys/module not visible
or a DMA-BUF prerequisite that could not be read: each prerequisite is yes / no / unknown, and
an unknown one never gives off_no_peer_memory). Nearest NICs (what NCCL uses) are marked *.

Peer memory: the paths NCCL's ncclIbGdrSupport() checks (>= 2.23: memory_peers/nv_mem,
memory_peers/nv_mem_nc, /sys/module/nvidia_peermem/version; 2.9-2.21 memory_peers/nvidia-peermem),
nvidia_peermem and nv_peer_mem, peerdirect_support, whether ib_core has the MLNX_OFED/DOCA
peer-memory API (/sys/kernel/mm/memory_peers), and nvidia-peermem.ko in modules.dep when it is
not loaded. DMA-BUF: kernel >= 5.12, rdma-core >= 34 (from the libibverbs.so.1 link name), the
NVIDIA open kernel module (/proc/driver/nvidia/version). ACS: the extended capability 0x0D in
the config space of every bridge below the last bridge a GPU and a NIC share (as non-root only
64 bytes are readable: shown as unknown, never off). IOMMU: /sys/class/iommu, each device's
iommu_group type, the kernel command line. BAR1: NVML.

";

const GDR_HELP_DATA: &str = "\
JSON DATA (fabprobe.gdr)
  {\"gpus\"|\"nics\": [{\"label\", \"name\", \"pci_bus_id\", \"bar1_total_bytes\",
     \"iommu_group\": null | {\"group\", \"type\"}; a NIC also \"nccl_uses\" (bool: NCCL_IB_HCA
     keeps it) and \"nccl_use_rule\" (why)}],
   \"nccl_net_gdr_level\": {\"level\" (what it allows on PCIe: LOC..SYS), \"name\" (as NCCL names it: PXB, P2C...),
     \"source\" (default, NCCL_NET_GDR_C2C=N | set in <where>), \"raw\",
     \"default_name\" (NCCL's own default, present only when the level was set)},
   \"peer_memory\": {\"modules_visible\", \"paths\": [{\"path\", \"exists\", \"nccl_versions\"}], \"nccl_gdr_support\",
     \"nccl_rules\" (whose rules, and where the version came from), \"nccl_version\" (null:
     unknown), \"depends_on_version\",
     \"nvidia_peermem_loaded\", \"nvidia_peermem_version\", \"peerdirect_support\",
     \"nv_peer_mem_loaded\", \"peer_memory_api\", \"nvidia_peermem_module_file\"},
   \"dmabuf\": {\"kernel\", \"kernel_ok\", \"rdma_core\", \"rdma_core_source\", \"rdma_core_ok\",
     \"nvidia_driver\", \"nvidia_open_module\", \"possible\", \"nccl_dmabuf_enable\", \"path\" (yes|no|unknown), \"unknown\"},
   \"iommu\": {\"units\", \"cmdline_flags\", \"cmdline_passthrough\"},
   \"bridges\": [{\"pci_bus_id\", \"acs\": {\"state\": \"present\", \"cap\", \"ctrl\", \"ctrl_text\",
     \"redirect\"} | {\"state\": \"absent\"} | {\"state\": \"unknown\", \"bytes_read\", \"reason\"} |
     {\"state\": \"unreadable\", \"error\"}}],
   \"pairs\": [{\"subject\" (GPU0-mlx5_0), \"gpu\", \"nic\", \"path\", \"nccl_nearest\", \"verdict\" (on|dmabuf_possible|
     off_distance|off_no_peer_memory|unknown), \"bridges_between\", \"acs_redirect\", \"acs_unknown\"}],
   \"notes\",
   \"names_moved\": [{\"name\", \"pci_bus_id\", \"was_to_be\", \"past\"}] (names ib_core
     moved past a NIC that did not register; absent when none),
   \"not_in_rdma\": [{\"label\", \"pci_bus_id\", \"vendor_device\",
     \"driver\", \"netdevs\", \"gpus_beside\", \"module_not_loaded\" (the module to
     load when none of the vendor's NICs registered)}] (NICs in the PCI tree that registered
     no RDMA device, and the GPUs on their PCIe switch; absent when none),
   \"gpus_not_in_nvml\": [{\"pci_bus_id\", \"current_link_speed\"}] (GPUs in the
     PCI tree that NVML does not list; absent when none),
   \"gpus_without_driver\": [{\"pci_bus_id\", \"driver\"}] (GPUs in the PCI tree that
     NVIDIA's driver does not drive, read when NVML did not load; absent when none)}

NOT CHECKED
  NCCL's own ibv_reg_dmabuf_mr(fd=-1) probe and CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED (need
  verbs and CUDA at run time); NCCL_IB_HCA filtering of the NIC list.";

pub(crate) fn run(g: &GlobalArgs, a: GdrArgs) -> anyhow::Result<Outcome> {
    let fmt = g.format;
    let host = open_host(g)?;
    let nccl = super::nccl_settings(g, &host);
    let mut report = gdr::probe(&host, &nccl);
    // Every gdr rule judges pairs one by one (NCCL's nearest NIC is marked by the probe):
    // judged after the cut, a finding lists the kept NIC's pairs only.
    if let Some(dev) = &a.device {
        let name = |n: &gdr::GdrDevice| n.name.clone().unwrap_or_else(|| n.label.clone());
        let mut names: Vec<String> = report.nics.iter().map(name).collect();
        super::only_device(&mut names, dev, String::as_str, true)?;
        report.nics.retain(|n| name(n) == *dev);
        let labels: Vec<&str> = report.nics.iter().map(|n| n.label.as_str()).collect();
        report.pairs.retain(|p| labels.contains(&p.nic.as_str()));
        // The switch ports shown are those between the GPUs and this NIC.
        let between: Vec<&String> = report.pairs.iter().flat_map(|p| &p.bridges_between).collect();
        report.bridges.retain(|b| between.contains(&&b.pci_bus_id));
    }
    let findings = gdr::findings(&report);
    let text = match fmt {
        Format::Json => Envelope::new("gdr", HostInfo::of(&host), &report, &findings).to_json(),
        _ => crate::render::gdr::table(&report, &findings),
    };
    emit(&text)?;
    Ok(Outcome::from_findings(&findings))
}
