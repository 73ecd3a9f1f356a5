//! `fabprobe topo`: the GPU/NIC matrix `nvidia-smi topo -m` prints, from sysfs (+ NVML
//! for NVLink), and the same pairs as NCCL classifies them. Also builds the report from an
//! NCCL topology file, and the NCCL topology tree from a report.
//!
//! nvidia-smi's cells (rule derived from real `nvidia-smi topo -m` outputs, tests/data/, and
//! NVML's `nvmlGpuTopologyLevel_t` in nvml.h): different `numa_node` → SYS; different root bus → NODE; no common switch → PHB;
//! functions of one device or one switch crossed → PIX; more switches → PXB. Switches are
//! NCCL's "two path components per switch" nodes (a switch's upstream port).

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::finding::{Finding, Rule, Severity, judge_each};
use crate::host::{Host, NvmlState, natural_cmp};
use crate::nccl::topo::{self as ncclt, Attach};
use crate::nccl::topo_xml::{NcclCpu, NcclGpu, NcclNet, NcclNvlink, NcclPci, NcclSystem};
use crate::sysfs::node::{self, CpuFacts, NumaNode};
use crate::sysfs::pci::{self, LinkSpeed, PciIdent, PciLink};

/// Class of an NVSwitch (`tclass` of an NVLink to one).
pub(crate) const NVSWITCH_CLASS: &str = "0x068000";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TopoReport {
    /// Where the facts came from: `sysfs`, `sysfs+nvml`, or `nccl-xml:<file>`.
    pub source: String,
    /// Whether NVLink facts were available (NVML or the XML file), and why not.
    pub nvlink_available: bool,
    pub nvlink_unavailable_reason: Option<String>,
    pub gpus: Vec<TopoGpu>,
    pub nics: Vec<TopoNic>,
    /// NCCL switch nodes (upstream ports) above the GPUs and NICs.
    pub switches: Vec<TopoSwitch>,
    pub numa_nodes: Vec<NumaNode>,
    pub cpu: CpuFacts,
    /// Row/column labels of the matrices: `GPU0..`, then `NIC0..`.
    pub labels: Vec<String>,
    /// nvidia-smi's cells: `X`, `NV#`, `PIX`, `PXB`, `PHB`, `NODE`, `SYS` (`N/A`: unknown).
    pub matrix: Vec<Vec<String>>,
    /// NCCL's path types: `X`, `LOC`, `NVL`, `NVB`, `PIX`, `PXB`, `PHB`, `SYS`.
    pub nccl_matrix: Vec<Vec<String>>,
    /// What the report could not see, one line each.
    pub notes: Vec<String>,
    /// NVSwitches, the Fabric Manager and the GPUs' fabric state; absent on hosts without
    /// NVSwitches whose GPUs report no fabric (and from an NCCL topology file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric: Option<super::fabric::FabricReport>,
    /// NVIDIA GPUs the PCI tree shows and NVML does not list (fallen off the bus, or the
    /// driver lost them): named by their bus ID, left out of `gpus` and the matrices.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus_not_in_nvml: Vec<GpuNotInNvml>,
    /// RDMA NICs the PCI tree shows and `/sys/class/infiniband` does not list (mlx5_ib not
    /// loaded, or the driver did not bind or register it): named by their bus ID, left out
    /// of `nics` and the matrices; their labels are kept, so the others' do not shift.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nics_not_in_rdma: Vec<NicNotInRdma>,
    /// NVIDIA GPUs the PCI tree shows with NVIDIA's driver not bound to them (no driver, or
    /// nouveau), read when NVML did not load: CUDA can use none of them. A GPU handed to a
    /// VM (vfio-pci) is not listed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus_without_driver: Vec<GpuWithoutDriver>,
}

/// An NVIDIA GPU in the PCI tree that NVIDIA's driver does not drive.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuWithoutDriver {
    pub pci_bus_id: String,
    /// The driver bound to it (`nouveau`), None when none is.
    pub driver: Option<String>,
}

/// A NIC seen in the PCI tree only: what sysfs says of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NicNotInRdma {
    /// The label it would have had (`NIC7`): the other NICs keep theirs.
    pub label: String,
    pub pci_bus_id: String,
    /// `15b3:1021`, as lspci -n prints it.
    pub vendor_device: String,
    /// The PCI driver bound to it (`mlx5_core`), None when none is.
    pub driver: Option<String>,
    /// Its netdevs (`/sys/bus/pci/devices/<bdf>/net`), when the driver made any.
    pub netdevs: Vec<String>,
    /// The GPUs that share a PCIe switch with it (PIX/PXB): the ones whose NIC it was.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus_beside: Vec<String>,
    /// The kernel module that is not loaded (`mlx5_core`, `mlx5_ib`), when no RDMA device
    /// of its vendor registered at all: one module explains every such NIC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module_not_loaded: Option<String>,
}

/// The module to load for a NIC of `vendor:device` bound to `driver` that registered no
/// RDMA device: the vendor's NIC driver when none is bound, else its RDMA half
/// (drivers/infiniband/hw/*). None: a vendor this table does not know.
fn module_to_load(vendor: u32, device: u32, driver: Option<&str>) -> Option<&'static str> {
    Some(match (vendor, driver) {
        // ConnectX-3 (mlx4) and later (mlx5).
        (0x15b3, None) if matches!(device, 0x1003 | 0x1004 | 0x1007) => "mlx4_core",
        (0x15b3, None) => "mlx5_core",
        (0x15b3, Some("mlx5_core")) => "mlx5_ib",
        (0x15b3, Some("mlx4_core")) => "mlx4_ib",
        (0x14e4, None) => "bnxt_en",
        (0x14e4, Some("bnxt_en")) => "bnxt_re",
        // Omni-Path's hfi1 registers its own device; the E810's RDMA half is irdma.
        (0x8086, None) if matches!(device, 0x24f0 | 0x24f1) => "hfi1",
        (0x8086, None) => "ice",
        (0x8086, Some("ice")) => "irdma",
        (0x1077, Some("qede")) => "qedr",
        (0x1d0f, None) => "efa",
        _ => return None,
    })
}

/// The NICs of `missing` whose module is not loaded, by module (bus order within), and
/// the rest, each its own cause.
pub(crate) fn by_module_not_loaded(missing: &[NicNotInRdma]) -> (BTreeMap<&str, Vec<&NicNotInRdma>>, Vec<&NicNotInRdma>) {
    let mut groups: BTreeMap<&str, Vec<&NicNotInRdma>> = BTreeMap::new();
    let mut own = Vec::new();
    for n in missing {
        match n.module_not_loaded.as_deref() {
            Some(m) => groups.entry(m).or_default().push(n),
            None => own.push(n),
        }
    }
    (groups, own)
}

/// A GPU seen in the PCI tree only: what sysfs still says of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuNotInNvml {
    pub pci_bus_id: String,
    /// `current_link_speed` as the kernel prints it (`Unknown` when LnkSta reads all ones).
    pub current_link_speed: Option<String>,
}

/// Where a device sits in the PCI tree, and its PCI facts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PciPlace {
    pub pci_bus_id: Option<String>,
    /// Canonical sysfs path (`/sys/devices/pci0000:00/...`); None when not found.
    pub sysfs_path: Option<String>,
    /// The host bridge's root bus, `pci0000:00` (None from an NCCL file).
    pub root_bus: Option<String>,
    /// Every bridge between the root bus and the device, root port first.
    pub bridges: Vec<String>,
    /// NCCL's switch nodes above the device, top first.
    pub nccl_switches: Vec<String>,
    pub ident: PciIdent,
    /// `numa_node` as read: -1 when the firmware gave no proximity.
    pub numa_node: Option<i32>,
    /// `local_cpulist` verbatim.
    pub local_cpulist: Option<String>,
    pub link: Option<PciLink>,
    /// The upstream port's `max_link_speed`/`max_link_width`: what the slot allows.
    pub upstream_max_speed: Option<LinkSpeed>,
    pub upstream_max_width: Option<u32>,
    /// What NCCL writes as `link_speed`/`link_width`: the lower of device and upstream port.
    pub nccl_link_speed: Option<String>,
    pub nccl_link_width: Option<u32>,
    /// Why the place is unknown (the device path did not resolve).
    pub error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TopoGpu {
    pub label: String,
    /// NVML index, or the position in PCI bus order without NVML.
    pub index: u32,
    pub pci_bus_id: String,
    /// NVML's product name.
    pub name: Option<String>,
    /// CUDA compute capability × 10 (NCCL's `sm`).
    pub sm: Option<u32>,
    /// `nvmlDeviceGetNumaNodeId` (the GPU's own memory node on C2C systems).
    pub gpu_numa_id: Option<i32>,
    /// Active NVLinks grouped by far end.
    pub nvlinks: Vec<NvlinkPeer>,
    pub pci: PciPlace,
}

/// Class of a CPU at the far end of an NVLink (POWER9's NVLink; NCCL's `tclass`).
pub(crate) const NVLINK_CPU_CLASS: &str = "0x068001";

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvlinkPeer {
    /// The far end's bus id (None when NVML could not say).
    pub target_pci_bus_id: Option<String>,
    /// `gpu`, `nvswitch`, `cpu`, `other`, or `unknown` when nothing read says what the far
    /// end is. Only what the evidence says: a GPU in the report, NVML's remote device type,
    /// the far end's PCI class in sysfs, or the `tclass` of an NCCL file.
    pub target_kind: String,
    /// Active links to that end.
    pub count: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TopoNic {
    pub label: String,
    /// The RDMA device name (`/sys/class/infiniband/<ibdev>`).
    pub ibdev: String,
    /// `node_guid` verbatim (`946d:ae03:0050:709a`).
    pub node_guid: Option<String>,
    pub ports: Vec<NicPort>,
    pub pci: PciPlace,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NicPort {
    pub port: u32,
    /// `InfiniBand`, `Ethernet`.
    pub link_layer: Option<String>,
    /// `rate` verbatim (`400 Gb/sec (4X NDR)`).
    pub rate: Option<String>,
    pub rate_mbps: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TopoSwitch {
    pub pci_bus_id: String,
    /// The switch node above this one (None: it hangs off the CPU).
    pub parent: Option<String>,
    pub ident: PciIdent,
    pub nccl_link_speed: Option<String>,
    pub nccl_link_width: Option<u32>,
}

/// `"400 Gb/sec (4X NDR)"` → 400000 Mb/s; `"2.5 Gb/sec (1X SDR)"` → 2500; `"10 Gb/sec (4X)"`
/// (old kernels) → 10000. None for anything else.
pub fn parse_rate_mbps(s: &str) -> Option<u64> {
    let s = s.trim();
    let num = s.split_whitespace().next()?;
    if !s[num.len()..].trim_start().starts_with("Gb/sec") {
        return None;
    }
    let v: f64 = num.parse().ok()?;
    (v.is_finite() && v >= 0.0).then(|| (v * 1000.0).round() as u64)
}

/// `node_guid` `946d:ae03:0050:709a` → `0x9a70500003ae6d94`: NCCL prints the big-endian
/// GUID as a little-endian host integer (`%lx`), so its files show the bytes reversed.
pub fn nccl_guid(node_guid: &str) -> Option<String> {
    let hex: String = node_guid.trim().split(':').collect();
    if hex.len() != 16 {
        return None;
    }
    let be = u64::from_str_radix(&hex, 16).ok()?;
    Some(format!("0x{:x}", be.swap_bytes()))
}

fn is_gpu_class(class: u32) -> bool {
    matches!(class >> 8, 0x0300 | 0x0302)
}

fn attr_str(host: &Host, path: &str) -> Option<String> {
    host.attr(path).value().map(str::to_string)
}

/// Resolve a device link and read its place in the tree.
fn read_place(host: &Host, link: &str) -> PciPlace {
    let (prefix, chain) = match pci::read_chain(host, link) {
        Ok(c) => c,
        Err(e) => {
            return PciPlace {
                error: Some(e.to_string()),
                ..Default::default()
            };
        }
    };
    let n = chain.functions.len();
    let dev = chain.path_of(&prefix, n - 1);
    let link_attrs = pci::read_link(host, &dev);
    let (upstream_max_speed, upstream_max_width) = if n >= 2 {
        let up = pci::read_link_max(host, &chain.path_of(&prefix, n - 2));
        (up.0, up.1)
    } else {
        (None, None)
    };
    let (nccl_link_speed, nccl_link_width) =
        nccl_link(&link_attrs, upstream_max_speed.as_ref(), upstream_max_width);
    PciPlace {
        pci_bus_id: Some(chain.bdf().to_string()),
        sysfs_path: Some(dev.clone()),
        root_bus: Some(chain.root.clone()),
        bridges: chain.bridges().to_vec(),
        nccl_switches: ncclt::switch_nodes(chain.bridges()),
        ident: pci::read_ident(host, &dev),
        numa_node: host
            .attr(format!("{dev}/numa_node"))
            .value()
            .and_then(pci::parse_numa_node),
        local_cpulist: attr_str(host, &format!("{dev}/local_cpulist")),
        link: Some(link_attrs),
        upstream_max_speed,
        upstream_max_width,
        nccl_link_speed,
        nccl_link_width,
        error: None,
    }
}

/// NCCL's `link_speed`/`link_width`: the slower of the device's and its upstream port's max.
fn nccl_link(
    dev: &PciLink,
    up_speed: Option<&LinkSpeed>,
    up_width: Option<u32>,
) -> (Option<String>, Option<u32>) {
    let speed = match (dev.max_speed.as_ref(), up_speed) {
        (Some(d), Some(u)) if u.gts < d.gts => Some(u.raw.clone()),
        (Some(d), _) => Some(d.raw.clone()),
        (None, u) => u.map(|u| u.raw.clone()),
    };
    let width = match (dev.max_width, up_width) {
        (Some(d), Some(u)) => Some(d.min(u)),
        (d, u) => d.or(u),
    };
    (speed, width)
}

/// The sort key nvidia-smi's NIC order follows: registration order of the RDMA devices,
/// which is PCI probe (bus) order with bonds created last; names break ties naturally.
fn nic_order(a: &TopoNic, b: &TopoNic) -> std::cmp::Ordering {
    let bond = |n: &TopoNic| n.ibdev.contains("bond");
    bond(a)
        .cmp(&bond(b))
        .then_with(|| a.pci.pci_bus_id.cmp(&b.pci.pci_bus_id))
        .then_with(|| natural_cmp(&a.ibdev, &b.ibdev))
}

fn find_gpus_in_sysfs(host: &Host, notes: &mut Vec<String>) -> Vec<String> {
    let base = "/sys/bus/pci/devices";
    let names = match host.list_dir(base) {
        Ok(Some(n)) => n,
        Ok(None) => {
            notes.push(format!("{base} is absent: no PCI devices visible"));
            return Vec::new();
        }
        Err(e) => {
            notes.push(format!("cannot list PCI devices: {e}"));
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for bdf in names.iter().filter(|n| pci::is_bdf(n)) {
        let class = host.attr(format!("{base}/{bdf}/class"));
        if !class
            .value()
            .and_then(pci::parse_hex_id)
            .is_some_and(is_gpu_class)
        {
            continue;
        }
        let vendor = host.attr(format!("{base}/{bdf}/vendor"));
        if vendor.value().and_then(pci::parse_hex_id) == Some(0x10de) {
            out.push(bdf.clone());
        }
    }
    out.sort();
    out
}

fn read_nics(host: &Host, notes: &mut Vec<String>) -> Vec<TopoNic> {
    let base = "/sys/class/infiniband";
    let names = match host.list_dir(base) {
        Ok(Some(n)) => n,
        Ok(None) => Vec::new(),
        Err(e) => {
            notes.push(format!("cannot list {base}: {e}"));
            Vec::new()
        }
    };
    let mut nics = Vec::new();
    for name in names {
        let dir = format!("{base}/{name}");
        let place = read_place(host, &format!("{dir}/device"));
        if place.error.is_some() {
            notes.push(format!(
                "RDMA device {name} is not a PCI function ({}); left out of the matrix",
                place.error.as_deref().unwrap_or("")
            ));
            continue;
        }
        let mut ports = Vec::new();
        if let Ok(Some(pnames)) = host.list_dir(format!("{dir}/ports")) {
            let mut nums: Vec<u32> = pnames.iter().filter_map(|p| p.parse().ok()).collect();
            nums.sort_unstable();
            for port in nums {
                let rate = attr_str(host, &format!("{dir}/ports/{port}/rate"));
                ports.push(NicPort {
                    port,
                    link_layer: attr_str(host, &format!("{dir}/ports/{port}/link_layer")),
                    rate_mbps: rate.as_deref().and_then(parse_rate_mbps),
                    rate,
                });
            }
        }
        nics.push(TopoNic {
            label: String::new(),
            node_guid: attr_str(host, &format!("{dir}/node_guid")),
            ibdev: name,
            ports,
            pci: place,
        });
    }
    nics.sort_by(nic_order);
    for (i, n) in nics.iter_mut().enumerate() {
        n.label = format!("NIC{i}");
    }
    nics
}

/// What the far end of an NVLink is, from the evidence alone: one of the GPUs in the
/// report, NVML's remote device type, else the far end's PCI class in sysfs. A far end
/// none of these names is `unknown`, never assumed to be an NVSwitch.
fn nvlink_target_kind(
    host: &Host,
    target: Option<&str>,
    nvml_type: Option<&str>,
    gpu_bus_ids: &[String],
) -> &'static str {
    if target.is_some_and(|t| gpu_bus_ids.iter().any(|g| g == t)) {
        return "gpu";
    }
    match nvml_type {
        Some("switch") => return "nvswitch",
        Some("gpu") => return "gpu",
        Some("ibmnpu") => return "cpu",
        _ => {}
    }
    let class = target.filter(|t| pci::is_bdf(t)).and_then(|t| {
        host.attr(format!("/sys/bus/pci/devices/{t}/class"))
            .value()
            .map(str::to_string)
    });
    match class.as_deref() {
        Some(c) => kind_of_class(c),
        None => "unknown",
    }
}

/// NCCL's reading of a far end's class (`kvDictPciClass`, matched by prefix).
fn kind_of_class(class: &str) -> &'static str {
    let c = class.trim().to_ascii_lowercase();
    if c.starts_with(NVSWITCH_CLASS) {
        "nvswitch"
    } else if c.starts_with(NVLINK_CPU_CLASS) {
        "cpu"
    } else if c.starts_with("0x03") {
        "gpu"
    } else {
        "other"
    }
}

/// Active NVLinks of one NVML GPU grouped by far end.
fn nvml_peers(host: &Host, g: &crate::host::NvmlGpu, gpu_bus_ids: &[String]) -> Vec<NvlinkPeer> {
    let mut by: BTreeMap<(Option<String>, &'static str), u32> = BTreeMap::new();
    for l in g.nvlinks.iter().filter(|l| l.active) {
        let kind = nvlink_target_kind(
            host,
            l.remote_pci_bus_id.as_deref(),
            l.remote_device_type.as_deref(),
            gpu_bus_ids,
        );
        *by.entry((l.remote_pci_bus_id.clone(), kind)).or_default() += 1;
    }
    by.into_iter()
        .map(|((target, kind), count)| NvlinkPeer {
            target_kind: kind.into(),
            target_pci_bus_id: target,
            count,
        })
        .collect()
}

/// Read the host: GPUs (NVML, else sysfs), RDMA NICs, their places, and both matrices.
pub fn probe(host: &Host) -> TopoReport {
    let mut notes = Vec::new();
    let found = GpusFound::of(host, &mut notes);
    let gpus_not_in_nvml = match &found.nvml {
        Some(_) => gpus_missing_from(host, &found.bus_ids),
        None => Vec::new(),
    };
    let gpus_without_driver = match &found.nvml {
        Some(_) => Vec::new(),
        None => gpus_without_driver(host, &found.bus_ids),
    };
    let gpus = read_gpus(host, &found, &mut notes);
    let mut nics = read_nics(host, &mut notes);
    let mut nics_not_in_rdma = nics_missing_from(host, &mut nics);
    gpus_beside(host, &gpus, &mut nics_not_in_rdma);
    let switches = read_switches(host, &gpus, &nics);
    let gpu_ids: Vec<(String, String)> = gpus
        .iter()
        .map(|g| (g.label.clone(), g.pci_bus_id.clone()))
        .collect();
    let fabric = super::fabric::probe(host, &gpu_ids);
    let mut r = TopoReport {
        source: if found.nvml.is_some() {
            "sysfs+nvml"
        } else {
            "sysfs"
        }
        .to_string(),
        nvlink_available: found.nvlink_available,
        nvlink_unavailable_reason: found.nvlink_reason,
        gpus,
        nics,
        switches,
        numa_nodes: node::read_nodes(host),
        cpu: node::read_cpu_facts(host),
        labels: Vec::new(),
        matrix: Vec::new(),
        nccl_matrix: Vec::new(),
        notes,
        fabric,
        gpus_not_in_nvml,
        nics_not_in_rdma,
        gpus_without_driver,
    };
    finish(&mut r);
    r
}

/// The GPUs and who listed them: NVML (sorted by its index, NVLink readable), else the
/// PCI tree, with why NVLink is not.
struct GpusFound {
    bus_ids: Vec<String>,
    nvml: Option<Vec<crate::host::NvmlGpu>>,
    nvlink_available: bool,
    nvlink_reason: Option<String>,
}

impl GpusFound {
    fn of(host: &Host, notes: &mut Vec<String>) -> GpusFound {
        let from_sysfs = |notes: &mut Vec<String>, why: String| GpusFound {
            bus_ids: find_gpus_in_sysfs(host, notes),
            nvml: None,
            nvlink_available: false,
            nvlink_reason: Some(why),
        };
        match host.nvml() {
            NvmlState::Available(f) if !f.gpus.is_empty() => {
                let mut g = f.gpus.clone();
                g.sort_by_key(|g| g.index);
                GpusFound {
                    bus_ids: g.iter().map(|g| g.pci_bus_id.clone()).collect::<Vec<_>>(),
                    nvml: Some(g),
                    nvlink_available: true,
                    nvlink_reason: None,
                }
            }
            NvmlState::Available(_) => from_sysfs(notes, "NVML reports no GPU".to_string()),
            NvmlState::Unavailable { reason } => from_sysfs(notes, reason.clone()),
        }
    }
}

/// Each GPU's place in the PCI tree, with what NVML says of it where it listed it.
fn read_gpus(host: &Host, found: &GpusFound, notes: &mut Vec<String>) -> Vec<TopoGpu> {
    let mut gpus = Vec::new();
    for (i, bdf) in found.bus_ids.iter().enumerate() {
        let ng = found.nvml.as_ref().and_then(|v| v.get(i));
        let place = read_place(host, &format!("/sys/bus/pci/devices/{bdf}"));
        if let Some(e) = &place.error {
            notes.push(format!("GPU {bdf}: {e}; its cells are N/A"));
        }
        gpus.push(TopoGpu {
            // NVML's own index: a GPU NVML lost leaves a gap, the others keep their names.
            label: format!("GPU{}", ng.map(|g| g.index).unwrap_or(i as u32)),
            index: ng.map(|g| g.index).unwrap_or(i as u32),
            pci_bus_id: bdf.clone(),
            name: ng.and_then(|g| g.name.clone()),
            sm: ng.and_then(|g| Some((g.cuda_cc_major? * 10 + g.cuda_cc_minor?) as u32)),
            gpu_numa_id: ng.and_then(|g| g.numa_node_id),
            nvlinks: ng
                .map(|g| nvml_peers(host, g, &found.bus_ids))
                .unwrap_or_default(),
            pci: PciPlace {
                pci_bus_id: Some(bdf.clone()),
                ..place
            },
        });
    }
    gpus
}

/// The NVIDIA GPUs in the PCI tree that are not among NVML's (`listed`), with their link
/// speed as sysfs reads it.
fn gpus_missing_from(host: &Host, listed: &[String]) -> Vec<GpuNotInNvml> {
    // Not being able to list the PCI tree is said by the sysfs fallback, not here.
    let mut ignored = Vec::new();
    find_gpus_in_sysfs(host, &mut ignored)
        .into_iter()
        .filter(|b| !listed.contains(b))
        .map(|bdf| GpuNotInNvml {
            current_link_speed: host
                .attr(format!("/sys/bus/pci/devices/{bdf}/current_link_speed"))
                .value()
                .map(|v| v.trim().to_string()),
            pci_bus_id: bdf,
        })
        .collect()
}

/// Whether a PCI function is an RDMA NIC by its IDs: an InfiniBand controller (class
/// 0x0207), or a Mellanox/NVIDIA Ethernet function (0x0200, vendor 0x15b3: every mlx5
/// Ethernet function registers an RDMA device when mlx5_ib is loaded).
fn is_rdma_nic(class: u32, vendor: u32) -> bool {
    class >> 8 == 0x0207 || (class >> 8 == 0x0200 && vendor == 0x15b3)
}

/// The RDMA NICs of the PCI tree that `/sys/class/infiniband` does not list, labelled in
/// the order every NIC would have had (the listed `nics` relabelled around them). Nothing
/// when the class directory could not be listed (then what is missing is unknown), nor
/// for virtual functions or functions handed to vfio-pci (a VM's, not this host's).
fn nics_missing_from(host: &Host, nics: &mut [TopoNic]) -> Vec<NicNotInRdma> {
    let base = "/sys/bus/pci/devices";
    if host.list_dir("/sys/class/infiniband").is_err() {
        return Vec::new();
    }
    let Ok(Some(names)) = host.list_dir(base) else { return Vec::new() };
    let listed: Vec<&str> = nics.iter().filter_map(|n| n.pci.pci_bus_id.as_deref()).collect();
    let id = |bdf: &str, a: &str| host.attr(format!("{base}/{bdf}/{a}")).value().and_then(pci::parse_hex_id);
    let mut missing: Vec<NicNotInRdma> = Vec::new();
    // A function with an infiniband/ entry registered (its class link may be what is broken).
    let registered = |bdf: &str| {
        host.list_dir(format!("{base}/{bdf}/infiniband"))
            .ok()
            .flatten()
            .is_some_and(|v| !v.is_empty())
    };
    // A RoCE LAG registers one device (`mlx5_bond_0`) on its first function: the card's
    // other functions are in it, not missing.
    let slot = |bdf: &str| bdf.rsplit_once('.').map_or(bdf.to_string(), |(s, _)| s.to_string());
    let bonded: Vec<String> = nics
        .iter()
        .filter(|n| n.ibdev.contains("bond"))
        .filter_map(|n| n.pci.pci_bus_id.as_deref().map(slot))
        .collect();
    for bdf in names.iter().filter(|n| {
        pci::is_bdf(n) && !listed.contains(&n.as_str()) && !registered(n) && !bonded.contains(&slot(n))
    }) {
        let (Some(class), Some(vendor)) = (id(bdf, "class"), id(bdf, "vendor")) else { continue };
        let driver = host
            .read_link(format!("{base}/{bdf}/driver"))
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
        let handed_off = host.exists(format!("{base}/{bdf}/physfn")) || driver.as_deref() == Some("vfio-pci");
        if !is_rdma_nic(class, vendor) || handed_off {
            continue;
        }
        let mut netdevs = host.list_dir(format!("{base}/{bdf}/net")).ok().flatten().unwrap_or_default();
        netdevs.sort();
        missing.push(NicNotInRdma {
            label: String::new(),
            pci_bus_id: bdf.clone(),
            vendor_device: format!("{vendor:04x}:{:04x}", id(bdf, "device").unwrap_or(0)),
            driver,
            netdevs,
            gpus_beside: Vec::new(),
            module_not_loaded: None,
        });
    }
    missing.sort_by(|a, b| a.pci_bus_id.cmp(&b.pci_bus_id));
    // No registered RDMA device of the vendor: its module is not loaded (a probe that failed
    // on one NIC leaves the vendor's others registered).
    let vendors: Vec<u32> = nics.iter().filter_map(|n| n.pci.ident.vendor).collect();
    for m in &mut missing {
        let (vendor, device) = m
            .vendor_device
            .split_once(':')
            .map(|(v, d)| (u32::from_str_radix(v, 16).ok(), u32::from_str_radix(d, 16).ok()))
            .unwrap_or((None, None));
        if let Some(v) = vendor.filter(|v| !vendors.contains(v)) {
            m.module_not_loaded = module_to_load(v, device.unwrap_or(0), m.driver.as_deref()).map(str::to_string);
        }
    }
    relabel_around(nics, &mut missing);
    missing
}

/// The GPUs of `bus_ids` (found in sysfs) that NVIDIA's driver does not drive; a GPU bound
/// to vfio-pci belongs to a VM and is left out.
fn gpus_without_driver(host: &Host, bus_ids: &[String]) -> Vec<GpuWithoutDriver> {
    bus_ids
        .iter()
        .filter_map(|bdf| {
            let driver = host
                .read_link(format!("/sys/bus/pci/devices/{bdf}/driver"))
                .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
            match driver.as_deref() {
                Some("nvidia" | "vfio-pci") => None,
                _ => Some(GpuWithoutDriver {
                    pci_bus_id: bdf.clone(),
                    driver,
                }),
            }
        })
        .collect()
}

/// Each missing NIC's GPUs: those on its PCIe switch (PIX/PXB), as its place in the tree says.
fn gpus_beside(host: &Host, gpus: &[TopoGpu], missing: &mut [NicNotInRdma]) {
    for m in missing {
        let place = read_place(host, &format!("/sys/bus/pci/devices/{}", m.pci_bus_id));
        let Some(at) = attach(&place) else { continue };
        m.gpus_beside = gpus
            .iter()
            .filter(|g| attach(&g.pci).is_some_and(|a| matches!(smi_pci_level(&a, &at), "PIX" | "PXB")))
            .map(|g| g.label.clone())
            .collect();
    }
}

/// The names ib_core moved past the NICs that did not register: `(name now, the name it
/// would have had, its PCI bus ID)`, for the devices after `missing` in bus order. ib_core
/// gives each device it registers the lowest free index of its driver's pattern
/// (drivers/infiniband/core/device.c: alloc_name, ida_alloc), in probe (bus) order, and
/// mlx5_ib's pattern is `mlx5_%d`; other drivers' names are not guessed.
pub(crate) fn names_moved(r: &TopoReport, missing: &NicNotInRdma) -> Vec<(String, String, String)> {
    names_moved_in(&r.nics, &r.nics_not_in_rdma, missing)
}

/// [`names_moved`] over the listed NICs and every NIC RDMA does not list.
fn names_moved_in(nics: &[TopoNic], not_in_rdma: &[NicNotInRdma], missing: &NicNotInRdma) -> Vec<(String, String, String)> {
    let mlx5 = |m: &NicNotInRdma| m.driver.as_deref() == Some("mlx5_core");
    if !mlx5(missing) {
        return Vec::new();
    }
    let index = |n: &str| n.strip_prefix("mlx5_").and_then(|i| i.parse::<usize>().ok());
    let mut v = Vec::new();
    for n in nics {
        let (Some(i), Some(bdf)) = (index(&n.ibdev), n.pci.pci_bus_id.as_deref()) else { continue };
        if bdf <= missing.pci_bus_id.as_str() {
            continue;
        }
        let before = not_in_rdma.iter().filter(|m| mlx5(m) && m.pci_bus_id.as_str() < bdf).count();
        v.push((n.ibdev.clone(), format!("mlx5_{}", i + before), bdf.to_string()));
    }
    v.sort_by(|a, b| a.2.cmp(&b.2));
    v
}

/// An RDMA device whose name ib_core moved past a NIC that did not register: what every
/// command says beside the name (`mlx5_7` is the NIC at 0000:e9:00.0, not the one a
/// setting written for the full node means).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MovedName {
    /// The name it has now (`mlx5_7`).
    pub name: String,
    /// The PCI function it names now.
    pub pci_bus_id: String,
    /// The name it would have had had every NIC registered (`mlx5_8`).
    pub was_to_be: String,
    /// The NICs before it that did not register (their PCI bus IDs).
    pub past: Vec<String>,
}

/// Every name moved in a report: [`names_moved`] for each NIC RDMA does not list, one entry
/// per device, in bus order.
pub(crate) fn moved_names(r: &TopoReport) -> Vec<MovedName> {
    moved_names_in(&r.nics, &r.nics_not_in_rdma)
}

fn moved_names_in(nics: &[TopoNic], not_in_rdma: &[NicNotInRdma]) -> Vec<MovedName> {
    let mut by: BTreeMap<String, MovedName> = BTreeMap::new();
    for m in not_in_rdma {
        for (now, was, bdf) in names_moved_in(nics, not_in_rdma, m) {
            by.entry(bdf.clone())
                .or_insert_with(|| MovedName { name: now, pci_bus_id: bdf, was_to_be: was, past: Vec::new() })
                .past
                .push(m.pci_bus_id.clone());
        }
    }
    by.into_values().collect()
}

/// The NICs of the PCI tree RDMA does not list (as topo's `nics_not_in_rdma`, without the
/// GPUs beside them) and the names moved past them (as [`moved_names`] of the topo report),
/// for the commands that do not read the whole PCI tree: only the RDMA devices and the PCI
/// functions that did not register are read.
pub(crate) fn probe_unregistered(host: &Host) -> (Vec<NicNotInRdma>, Vec<MovedName>) {
    let mut notes = Vec::new();
    let mut nics = read_nics(host, &mut notes);
    let missing = nics_missing_from(host, &mut nics);
    let moved = moved_names_in(&nics, &missing);
    (missing, moved)
}

/// What a command that reads RDMA devices says of each NIC RDMA does not list: one
/// `<probe>.nic_not_in_rdma` finding, unknown (what it reads of a NIC comes from the RDMA
/// device the NIC does not have), subject its bus ID as topo's, naming its netdevs and
/// `unread`, what the command could not read. `check` folds it under topo's finding.
pub(crate) fn unlisted_findings(probe: &str, unread: &str, missing: &[NicNotInRdma], out: &mut Vec<Finding>) {
    let (groups, own) = by_module_not_loaded(missing);
    // A module not loaded: one finding for its NICs, subject the module, as topo's.
    for (module, nics) in groups {
        let mut f = module_finding(
            &format!("{probe}.rdma_driver_not_loaded"),
            Severity::Unknown,
            module,
            &nics,
            ("not evaluated: ", "none has an RDMA device for this command to read"),
        );
        f.fix = Some(format!("see `fabprobe topo`'s topo.rdma_driver_not_loaded {module} for the fix"));
        out.push(f);
    }
    for n in own {
        let netdev = match n.netdevs.as_slice() {
            [] => String::new(),
            v => format!(", netdev {}", v.join(" ")),
        };
        let unread = unread.replace("{netdev}", n.netdevs.first().map_or("NETDEV", String::as_str));
        out.push(
            Finding::new(
                &format!("{probe}.nic_not_in_rdma"),
                Severity::Unknown,
                &n.pci_bus_id,
                format!(
                    "not evaluated: the NIC at {} ({} {}{netdev}) is in the PCI tree but registered no RDMA device (/sys/class/infiniband does not list it): {unread}",
                    n.pci_bus_id, n.label, n.vendor_device
                ),
            )
            .evidence("pci_bus_id", n.pci_bus_id.as_str())
            .evidence("label", n.label.as_str())
            .evidence("vendor_device", n.vendor_device.as_str())
            .evidence("driver", n.driver.as_deref().unwrap_or("none"))
            .evidence("netdevs", n.netdevs.join(" "))
            .fix(format!("see `fabprobe topo`'s topo.nic_not_in_rdma {} for why and the fix", n.pci_bus_id)),
        );
    }
}

/// Findings that name a moved device (in their subject or message) say so in their
/// evidence: `names_moved: mlx5_7=0000:e9:00.0 (was to be mlx5_8)`. A finding that already
/// says it (topo's own) is left as it is.
pub(crate) fn say_moved(findings: &mut [Finding], moved: &[MovedName]) {
    for f in findings.iter_mut().filter(|f| !f.evidence.contains_key("names_moved")) {
        let said: Vec<String> = moved
            .iter()
            .filter(|m| names_word(&f.subject, &m.name) || names_word(&f.message, &m.name))
            .map(|m| format!("{}={} (was to be {})", m.name, m.pci_bus_id, m.was_to_be))
            .collect();
        if !said.is_empty() {
            f.evidence.insert("names_moved".to_string(), serde_json::Value::String(said.join(" ")));
        }
    }
}

/// Where `text` names the device `name` as a whole word (`mlx5_7` in `GPU7-mlx5_7` and
/// `mlx5_7/1`, not in `mlx5_70`): the byte offsets just past each.
pub(crate) fn name_ends(text: &str, name: &str) -> Vec<usize> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut v = Vec::new();
    for (at, _) in text.match_indices(name) {
        let end = at + name.len();
        let before = text[..at].chars().next_back().is_some_and(word);
        let after = text[end..].chars().next().is_some_and(word);
        if !before && !after {
            v.push(end);
        }
    }
    v
}

fn names_word(text: &str, name: &str) -> bool {
    !name_ends(text, name).is_empty()
}

/// What a missing NIC's finding says of the names that moved past it ([`names_moved`]):
/// the words of its message, its `names_moved` evidence (`mlx5_7=0000:e9:00.0 ...`) and
/// its `was_to_be` (`mlx5_7>mlx5_8 ...`).
fn moved_names_said(r: &TopoReport, n: &NicNotInRdma) -> (String, String, String) {
    let moved = names_moved(r, n);
    let Some(first) = moved.first() else { return (String::new(), String::new(), String::new()) };
    let said: Vec<String> = moved.iter().map(|(now, was, bdf)| format!("{now} is now {bdf} (was to be {was})")).collect();
    let words = format!(
        "; ib_core gave the devices after it the names one lower: {}, so a setting that names {} (NCCL_IB_HCA, a policy's rails) selects another NIC",
        said.join(", "),
        first.0
    );
    let ev: Vec<String> = moved.iter().map(|(now, _, bdf)| format!("{now}={bdf}")).collect();
    let was: Vec<String> = moved.iter().map(|(now, was, _)| format!("{now}>{was}")).collect();
    (words, ev.join(" "), was.join(" "))
}

/// Labels in the order of every NIC, listed or not ([`nic_order`]: bonds last, then by bus
/// ID): a NIC RDMA does not list keeps its place, and the ones after it keep theirs.
fn relabel_around(nics: &mut [TopoNic], missing: &mut [NicNotInRdma]) {
    // (bond, bus ID, which): the missing ones are PCI functions, never bonds.
    let mut all: Vec<(bool, String, Result<usize, usize>)> = nics
        .iter()
        .enumerate()
        .map(|(i, n)| (n.ibdev.contains("bond"), n.pci.pci_bus_id.clone().unwrap_or_default(), Ok(i)))
        .chain(missing.iter().enumerate().map(|(i, m)| (false, m.pci_bus_id.clone(), Err(i))))
        .collect();
    // Stable: listed NICs of one bus ID (a bond's ports) keep nic_order among themselves.
    all.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    for (k, (_, _, which)) in all.into_iter().enumerate() {
        match which {
            Ok(i) => nics[i].label = format!("NIC{k}"),
            Err(i) => missing[i].label = format!("NIC{k}"),
        }
    }
}

/// Identity and link of every switch node above the devices.
fn read_switches(host: &Host, gpus: &[TopoGpu], nics: &[TopoNic]) -> Vec<TopoSwitch> {
    let mut seen: BTreeMap<String, TopoSwitch> = BTreeMap::new();
    let places = gpus.iter().map(|g| &g.pci).chain(nics.iter().map(|n| &n.pci));
    for p in places {
        let Some(path) = &p.sysfs_path else { continue };
        for (k, sw) in p.nccl_switches.iter().enumerate() {
            if seen.contains_key(sw) {
                continue;
            }
            // The switch's own path is the device path cut back to it.
            let Some(pos) = path.find(&format!("/{sw}/")) else {
                continue;
            };
            let sw_path = &path[..pos + 1 + sw.len()];
            let own = pci::read_link(host, sw_path);
            let parent_path = &sw_path[..sw_path.rfind('/').unwrap_or(0)];
            let up = pci::read_link_max(host, parent_path);
            let (speed, width) = nccl_link(&own, up.0.as_ref(), up.1);
            seen.insert(
                sw.clone(),
                TopoSwitch {
                    pci_bus_id: sw.clone(),
                    parent: if k == 0 {
                        None
                    } else {
                        p.nccl_switches.get(k - 1).cloned()
                    },
                    ident: pci::read_ident(host, sw_path),
                    nccl_link_speed: speed,
                    nccl_link_width: width,
                },
            );
        }
    }
    seen.into_values().collect()
}

fn attach(p: &PciPlace) -> Option<Attach> {
    if p.error.is_some() {
        return None;
    }
    Some(Attach {
        numa: p.numa_node.unwrap_or(-1),
        root: p.root_bus.clone(),
        switches: p.nccl_switches.clone(),
        slot: p.pci_bus_id.as_deref().and_then(ncclt::slot_of),
    })
}

/// nvidia-smi's PCIe level between two placed devices.
pub(crate) fn smi_pci_level(a: &Attach, b: &Attach) -> &'static str {
    if a.numa != b.numa {
        return "SYS";
    }
    if let (Some(ra), Some(rb)) = (&a.root, &b.root)
        && ra != rb
    {
        return "NODE";
    }
    if a.slot.is_some() && a.slot == b.slot {
        return "PIX";
    }
    match ncclt::switches_crossed(&a.switches, &b.switches) {
        0 => "PHB",
        1 => "PIX",
        _ => "PXB",
    }
}

/// Labels and both matrices, filled from the devices.
fn finish(r: &mut TopoReport) {
    let (direct, to_switch) = nvlink_counts(r);
    note_uncounted_nvlinks(r);
    let nv = nv_matrix(&direct, &to_switch);
    let (smi, nccl) = path_matrices(r, &nv, &direct);
    r.labels = r
        .gpus
        .iter()
        .map(|g| g.label.clone())
        .chain(r.nics.iter().map(|n| n.label.clone()))
        .collect();
    r.matrix = smi;
    r.nccl_matrix = nccl;
    note_missing_devices(r);
}

/// NVLink counts per GPU: direct GPU-GPU links (`direct[i][j]`), and links into NVSwitches.
fn nvlink_counts(r: &TopoReport) -> (Vec<Vec<u32>>, Vec<u32>) {
    let ng = r.gpus.len();
    let gpu_ids: Vec<&str> = r.gpus.iter().map(|g| g.pci_bus_id.as_str()).collect();
    let mut direct = vec![vec![0u32; ng]; ng];
    let mut to_switch = vec![0u32; ng];
    for (i, g) in r.gpus.iter().enumerate() {
        for p in &g.nvlinks {
            match p
                .target_pci_bus_id
                .as_deref()
                .and_then(|t| gpu_ids.iter().position(|&x| x == t))
            {
                Some(j) if p.target_kind == "gpu" => direct[i][j] += p.count,
                _ if p.target_kind == "nvswitch" => to_switch[i] += p.count,
                _ => {}
            }
        }
    }
    (direct, to_switch)
}

/// Links the matrix leaves out, said out loud.
fn note_uncounted_nvlinks(r: &mut TopoReport) {
    let gpu_ids: Vec<&str> = r.gpus.iter().map(|g| g.pci_bus_id.as_str()).collect();
    let mut notes = Vec::new();
    for g in &r.gpus {
        for p in &g.nvlinks {
            let far = p.target_pci_bus_id.as_deref();
            let visible = far.is_some_and(|t| gpu_ids.contains(&t));
            let n = p.count;
            let s = if n == 1 { "" } else { "s" };
            match (p.target_kind.as_str(), far) {
                ("gpu", Some(t)) if !visible => notes.push(format!(
                    "{}: {n} NVLink{s} lead to GPU {t}, which this report does not list (hidden from \
                     this process, e.g. by NVIDIA_VISIBLE_DEVICES or a container): not counted in NV#",
                    g.label
                )),
                ("unknown", Some(t)) => notes.push(format!(
                    "{}: {n} NVLink{s} lead to {t}, and nothing read says what it is (not a GPU \
                     listed here, no NVML remote device type or tclass, no PCI class in sysfs): \
                     not counted in NV#",
                    g.label
                )),
                ("unknown", None) => notes.push(format!(
                    "{}: {n} active NVLink{s} whose far end NVML could not name: not counted in NV#",
                    g.label
                )),
                _ => {}
            }
        }
    }
    r.notes.extend(notes);
}

/// The NV# of each GPU pair: its direct links, plus the links both have into NVSwitches.
fn nv_matrix(direct: &[Vec<u32>], to_switch: &[u32]) -> Vec<Vec<u32>> {
    let ng = to_switch.len();
    let mut nv = vec![vec![0u32; ng]; ng];
    for i in 0..ng {
        for j in 0..ng {
            let d = direct[i][j].max(direct[j][i]);
            let s = if to_switch[i] > 0 && to_switch[j] > 0 {
                to_switch[i].min(to_switch[j])
            } else {
                0
            };
            nv[i][j] = d + s;
        }
    }
    nv
}

/// Broadcom PCIe switches fused over the switch tree, as NCCL flattens them.
fn bcm_fused(r: &TopoReport) -> HashMap<String, String> {
    // Broadcom flattening over the switch tree.
    let parents: HashMap<String, String> = r
        .switches
        .iter()
        .filter_map(|s| Some((s.pci_bus_id.clone(), s.parent.clone()?)))
        .collect();
    let idents: HashMap<String, u64> = r
        .switches
        .iter()
        .filter_map(|s| {
            let i = &s.ident;
            Some((
                s.pci_bus_id.clone(),
                ncclt::bcm_ident(i.vendor?, i.device?, i.subsystem_vendor?, i.subsystem_device?),
            ))
        })
        .collect();
    ncclt::bcm_flatten(&parents, &idents)
}

/// nvidia-smi's and NCCL's matrices over GPUs then NICs.
fn path_matrices(r: &TopoReport, nv: &[Vec<u32>], direct: &[Vec<u32>]) -> (Vec<Vec<String>>, Vec<Vec<String>>) {
    let ng = r.gpus.len();
    let places: Vec<(Option<Attach>, bool)> = r
        .gpus
        .iter()
        .map(|g| (attach(&g.pci), false))
        .chain(r.nics.iter().map(|n| (attach(&n.pci), true)))
        .collect();
    let fused = bcm_fused(r);
    let n = places.len();
    let mut smi = vec![vec![String::new(); n]; n];
    let mut nccl = vec![vec![String::new(); n]; n];
    for i in 0..n {
        for j in 0..n {
            if i == j {
                smi[i][j] = "X".into();
                nccl[i][j] = "X".into();
                continue;
            }
            let (Some(a), Some(b)) = (&places[i].0, &places[j].0) else {
                // NVLink needs no PCI place.
                let gpus = i < ng && j < ng;
                smi[i][j] = if gpus && nv[i][j] > 0 {
                    format!("NV{}", nv[i][j])
                } else {
                    "N/A".into()
                };
                nccl[i][j] = gpus
                    .then(|| ncclt::nvlink_path(i, j, nv, direct))
                    .flatten()
                    .map(|p| p.as_str().to_string())
                    .unwrap_or_else(|| "N/A".into());
                continue;
            };
            let gpus = i < ng && j < ng;
            smi[i][j] = if gpus && nv[i][j] > 0 {
                format!("NV{}", nv[i][j])
            } else {
                smi_pci_level(a, b).to_string()
            };
            let nvl = if gpus {
                ncclt::nvlink_path(i, j, nv, direct)
            } else {
                None
            };
            nccl[i][j] = nvl
                .unwrap_or_else(|| ncclt::pci_path(a, b, &fused, places[i].1 && places[j].1))
                .as_str()
                .to_string();
        }
    }
    (smi, nccl)
}

/// What the report lacks (GPUs, NVLink facts, RDMA devices), said as notes.
fn note_missing_devices(r: &mut TopoReport) {
    if r.gpus.is_empty() {
        r.notes.push(format!(
            "no NVIDIA GPU found (no PCI function with vendor 0x10de and a VGA or 3D controller class){}",
            r.nvlink_unavailable_reason
                .as_deref()
                .map(|w| format!("; NVML: {w}"))
                .unwrap_or_default()
        ));
    } else if !r.nvlink_available {
        r.notes.push(format!(
            "NVLink data unavailable ({}): GPU-GPU cells come from the PCI tree alone",
            r.nvlink_unavailable_reason
                .as_deref()
                .unwrap_or("no NVLink facts")
        ));
    }
    if r.nics.is_empty() {
        r.notes
            .push("no RDMA device (/sys/class/infiniband is absent or has no PCI device)".into());
    }
}

/// The command that shows a device's trained link beside what it can do (`LnkSta` vs
/// `LnkCap`), for a BDF `lspci -s` accepts; prose when the BDF is unknown.
pub(crate) fn lnk_compare(bdf: &str) -> String {
    let ok = !bdf.is_empty() && bdf.chars().all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.');
    if ok {
        format!("compare LnkSta with LnkCap: `lspci -vv -s {bdf} | grep -e LnkCap: -e LnkSta:` (as root)")
    } else {
        "compare LnkSta with LnkCap in `lspci -vv` (as root)".into()
    }
}

/// How a `topo` rule judges: each device (GPUs, then NICs), or the whole report once after.
pub enum RuleFn {
    Device(fn(&Dev, &mut Vec<Finding>)),
    Report(fn(&TopoReport, &mut Vec<Finding>)),
}

/// A GPU or NIC as the device rules see it.
pub struct Dev<'a> {
    /// `GPU0`, `mlx5_0` (the PCI address is the finding's `pci_bdf`).
    pub subject: String,
    pub bdf: String,
    pub p: &'a PciPlace,
    pub is_nic: bool,
    /// The host's NUMA nodes (one node: a -1 says nothing).
    pub numa_nodes: usize,
}

/// Findings a person should act on: unknown NUMA placement, PCIe links below what the slot
/// allows (width anywhere; speed on NICs only, since idle GPUs lower their speed to save
/// power), NVLinks below the host's majority, the NVSwitch fabric, and GPUs whose nearest
/// RDMA NIC is across the CPU interconnect; in the order they are listed.
pub static RULES: &[Rule<RuleFn>] = &[
    Rule {
        ids: &["topo.nothing_to_judge"],
        severity: &[Severity::Unknown],
        about: "neither an NVIDIA GPU nor an RDMA device showed up (drivers not loaded?): \
                nothing was judged, NOT EVALUATED (exit 3)",
        judge: RuleFn::Report(topo_nothing),
    },
    Rule {
        ids: &["topo.numa_node_unknown"],
        severity: &[Severity::Warn],
        about: "numa_node is -1 on a host with several (or unknown) NUMA nodes",
        judge: RuleFn::Device(numa_node_unknown),
    },
    Rule {
        ids: &["topo.gpu_not_in_nvml"],
        severity: &[Severity::Fail],
        about: "an NVIDIA GPU in the PCI tree that NVML does not list (fallen off the bus, \
                Xid 79, or lost by the driver), named by its PCI bus ID",
        judge: RuleFn::Report(gpu_not_in_nvml),
    },
    Rule {
        ids: &["topo.nic_not_in_rdma"],
        severity: &[Severity::Fail],
        about: "an RDMA NIC (InfiniBand controller, or Mellanox Ethernet function) in the PCI \
                tree that /sys/class/infiniband does not list (mlx5_ib not loaded, the driver \
                did not bind or register it), named by its PCI bus ID",
        judge: RuleFn::Report(nic_not_in_rdma),
    },
    Rule {
        ids: &["topo.gpu_driver_not_loaded"],
        severity: &[Severity::Fail],
        about: "NVIDIA GPUs in the PCI tree that NVIDIA's driver does not drive (no driver \
                bound, or nouveau) while NVML does not load; one finding for all of them, \
                subject the module",
        judge: RuleFn::Report(gpu_driver_not_loaded),
    },
    Rule {
        ids: &["topo.rdma_driver_not_loaded"],
        severity: &[Severity::Fail],
        about: "RDMA NICs in the PCI tree and none of their vendor in /sys/class/infiniband: \
                one kernel module is not loaded (mlx5_core with no driver bound, mlx5_ib \
                under a bound mlx5_core); one finding for all of them, subject the module",
        judge: RuleFn::Report(rdma_driver_not_loaded),
    },
    Rule {
        ids: &["topo.pcie_width_degraded"],
        severity: &[Severity::Fail],
        about: "link width below what device and upstream port support",
        judge: RuleFn::Device(pcie_width_degraded),
    },
    Rule {
        ids: &["topo.pcie_speed_degraded"],
        severity: &[Severity::Fail],
        about: "a NIC's link speed below what device and upstream port support (idle GPUs \
                lower their speed to save power: not a fault)",
        judge: RuleFn::Device(pcie_speed_degraded),
    },
    Rule {
        ids: &["topo.nvlink_below_majority"],
        severity: &[Severity::Fail],
        about: "a GPU with fewer NVLinks to its peers than most GPUs of the host have (one \
                finding per GPU, not per pair)",
        judge: RuleFn::Report(nvlink_below_majority),
    },
    Rule {
        ids: &[
            "topo.fabric_manager_not_running",
            "topo.fabric_manager_version",
            "topo.gpu_fabric_not_ready",
            "topo.fabric_not_evaluated",
        ],
        severity: &[Severity::Warn, Severity::Fail, Severity::Unknown],
        about: "NVSwitches and no nv-fabricmanager process: CUDA returns 'system not yet \
                initialized' (802); the Fabric Manager's version is not the loaded driver's (it \
                refuses to start; the fix names the package); a GPU's NVML fabric state is \
                not_started/in_progress or completed with an error status; (unknown) the process \
                scan, a version or NVML could not be read on an NVSwitch host",
        judge: RuleFn::Report(fabric),
    },
    Rule {
        ids: &["topo.gpu_nic_sys"],
        severity: &[Severity::Warn],
        about: "every RDMA NIC is SYS away from a GPU",
        judge: RuleFn::Report(gpu_nic_sys),
    },
];

fn topo_nothing(r: &TopoReport, out: &mut Vec<Finding>) {
    if r.gpus.is_empty() && r.nics.is_empty() {
        out.push(crate::finding::nothing_to_judge(
            "topo",
            "host",
            Some(crate::finding::MissingFact::GpuAndRdma),
            crate::finding::NO_GPU_NO_RDMA,
        ));
    }
}

fn nic_not_in_rdma(r: &TopoReport, out: &mut Vec<Finding>) {
    for n in by_module_not_loaded(&r.nics_not_in_rdma).1 {
        let netdev = match n.netdevs.as_slice() {
            [] => String::new(),
            v => format!(", netdev {}", v.join(" ")),
        };
        let (why, fix) = match n.driver.as_deref() {
            Some("mlx5_core") => (
                "mlx5_core drives it but it registered no RDMA device (mlx5_ib not loaded, or its probe failed)".to_string(),
                format!(
                    "`modprobe mlx5_ib` (and list it in /etc/modules-load.d/ so it loads at boot); if it is loaded, read why this function failed: `dmesg | grep -i {}`",
                    n.pci_bus_id
                ),
            ),
            Some(d) => (
                format!("its driver {d} registered no RDMA device"),
                format!("load the RDMA module for {d} and read `dmesg | grep -i {}`", n.pci_bus_id),
            ),
            None => (
                "no driver is bound to it".to_string(),
                format!(
                    "check the driver: `lspci -k -s {}` and `dmesg | grep -i {}` (mlx5_core loaded? firmware error?); reload it with `modprobe mlx5_core`",
                    n.pci_bus_id, n.pci_bus_id
                ),
            ),
        };
        // A NIC with no GPU on its PCIe switch (a frontend port) strands no GPU's traffic.
        let traffic = match n.gpus_beside.as_slice() {
            [] => String::new(),
            v => format!(", and {}'s traffic takes a farther NIC", v.join(", ")),
        };
        let (moved_words, moved_ev, was_to_be) = moved_names_said(r, n);
        out.push(
            Finding::new(
                "topo.nic_not_in_rdma",
                Severity::Fail,
                &n.pci_bus_id,
                format!(
                    "the NIC at {} ({} {}{netdev}) is in the PCI tree but /sys/class/infiniband does not list it: {why}; NCCL cannot use it{traffic}{moved_words}",
                    n.pci_bus_id, n.label, n.vendor_device
                ),
            )
            .evidence("gpus", n.gpus_beside.join(" "))
            .evidence("names_moved", moved_ev)
            .evidence("was_to_be", was_to_be)
            .evidence("pci_bus_id", n.pci_bus_id.as_str())
            .evidence("label", n.label.as_str())
            .evidence("vendor_device", n.vendor_device.as_str())
            .evidence("driver", n.driver.as_deref().unwrap_or("none"))
            .evidence("netdevs", n.netdevs.join(" "))
            .fix(fix),
        );
    }
}

/// How a module that is not loaded reads: why, and the fix.
fn module_words(module: &str, nics: &[&NicNotInRdma]) -> (String, String) {
    let bound = nics.iter().find_map(|n| n.driver.as_deref());
    let why = match bound {
        Some(d) => format!("{d} drives them, but its RDMA module {module} is not loaded: no RDMA device registered"),
        None => format!("no driver is bound to any of them: {module} is not loaded"),
    };
    let first = nics.first().map_or("", |n| n.pci_bus_id.as_str());
    let fix = format!(
        "`modprobe {module}` (and list it in /etc/modules-load.d/ so it loads at boot); if it fails, `dmesg | grep -i {module}` and `lspci -k -s {first}` say why (a module not built for this kernel: `dkms status`)"
    );
    (why, fix)
}

/// Every NIC of a vendor missing from RDMA because one module is not loaded: one cause, one
/// finding (the per-NIC `topo.nic_not_in_rdma` is for a NIC whose siblings registered).
fn rdma_driver_not_loaded(r: &TopoReport, out: &mut Vec<Finding>) {
    for (module, nics) in by_module_not_loaded(&r.nics_not_in_rdma).0 {
        out.push(module_finding("topo.rdma_driver_not_loaded", Severity::Fail, module, &nics, ("", "NCCL can use none of them")));
    }
}

/// The finding of `id` for the NICs `nics` that `module` not loaded leaves without an RDMA
/// device; `lead` and `cost` say what it costs the command.
pub(crate) fn module_finding(
    id: &str,
    severity: Severity,
    module: &str,
    nics: &[&NicNotInRdma],
    (lead, cost): (&str, &str),
) -> Finding {
    let (why, fix) = module_words(module, nics);
    let listed: Vec<String> = nics
        .iter()
        .map(|n| match n.netdevs.as_slice() {
            [] => format!("{} {}", n.pci_bus_id, n.label),
            v => format!("{} {} ({})", n.pci_bus_id, n.label, v.join(" ")),
        })
        .collect();
    let gpus: Vec<&str> = nics.iter().flat_map(|n| n.gpus_beside.iter().map(String::as_str)).collect();
    let count = crate::finding::spell::count(nics.len(), "RDMA NIC", "RDMA NICs");
    let f = Finding::new(
        id,
        severity,
        module,
        format!("{lead}{count} in the PCI tree and none in /sys/class/infiniband: {why}; {cost}"),
    )
    .evidence("nics", listed.join(", "))
    .evidence("module", module)
    .evidence("driver", nics.iter().find_map(|n| n.driver.as_deref()).unwrap_or("none"))
    .fix(fix);
    // The GPUs whose NICs they were (topo reads them; the other commands do not).
    match gpus.is_empty() {
        true => f,
        false => f.evidence("gpus", gpus.join(" ")),
    }
}

/// NVIDIA GPUs that NVIDIA's driver does not drive: one cause (the nvidia module is not
/// loaded, or another driver holds them), one finding, subject the module.
fn gpu_driver_not_loaded(r: &TopoReport, out: &mut Vec<Finding>) {
    let g = &r.gpus_without_driver;
    if g.is_empty() {
        return;
    }
    let others: Vec<&str> = g.iter().filter_map(|x| x.driver.as_deref()).collect();
    let why = match others.first() {
        None => "no driver is bound to any of them: the nvidia kernel module is not loaded".to_string(),
        Some(d) => format!("{d} drives them, not nvidia"),
    };
    let nvml = r
        .nvlink_unavailable_reason
        .as_deref()
        .map_or(String::new(), |x| format!(" (NVML: {x})"));
    let count = crate::finding::spell::count(g.len(), "NVIDIA GPU", "NVIDIA GPUs");
    let ids: Vec<&str> = g.iter().map(|x| x.pci_bus_id.as_str()).collect();
    let fix = match others.first() {
        None => "`modprobe nvidia` (then `nvidia-smi` lists every GPU); if it fails, `dmesg | grep -i nvrm` says why (a module not built for this kernel: `dkms status`); then start nvidia-persistenced and, on NVSwitch hosts, nvidia-fabricmanager".to_string(),
        Some(d) => format!("blacklist {d} (`/etc/modprobe.d/`), rebuild the initramfs, and load nvidia; `lspci -k -s {}` shows which driver holds it", ids[0]),
    };
    out.push(
        Finding::new(
            "topo.gpu_driver_not_loaded",
            Severity::Fail,
            "nvidia",
            format!("{count} in the PCI tree and {why}{nvml}; CUDA and NCCL can use none of them"),
        )
        .evidence("gpus", ids.join(" "))
        .evidence("driver", others.first().copied().unwrap_or("none"))
        .fix(fix),
    );
}

fn gpu_not_in_nvml(r: &TopoReport, out: &mut Vec<Finding>) {
    for g in &r.gpus_not_in_nvml {
        // LnkSta reads all ones from a device that left the bus: the kernel prints Unknown.
        let gone = g.current_link_speed.as_deref() == Some("Unknown");
        let why = match gone {
            true => "its PCIe link speed reads Unknown (config space reads all ones): it fell off the bus",
            false => "the driver does not list it",
        };
        out.push(
            Finding::new(
                "topo.gpu_not_in_nvml",
                Severity::Fail,
                &g.pci_bus_id,
                format!(
                    "the NVIDIA GPU at {} is in the PCI tree but NVML does not list it: {why}; NCCL and CUDA cannot use it",
                    g.pci_bus_id
                ),
            )
            .evidence("pci_bus_id", g.pci_bus_id.as_str())
            .evidence("current_link_speed", g.current_link_speed.as_deref().unwrap_or("unreadable"))
            .fix(format!(
                "look for Xid 79/74 in `dmesg | grep -i xid` and ask `nvidia-smi -q -i {}`; a GPU that fell off the bus needs a reboot (a reseat or RMA if it recurs)",
                g.pci_bus_id
            )),
        );
    }
}

/// Judge the topology by [`RULES`].
pub fn judge(r: &TopoReport) -> Vec<Finding> {
    let mut out = Vec::new();
    // The one spelling of a device (finding::spell): a GPU by its label (NVML's index), a
    // NIC by its kernel name; the PCI address goes in the evidence.
    let devices = r
        .gpus
        .iter()
        .map(|g| (g.label.clone(), &g.pci, false))
        .chain(r.nics.iter().map(|n| (n.ibdev.clone(), &n.pci, true)));
    for (name, p, is_nic) in devices {
        let bdf = p.pci_bus_id.clone().unwrap_or_default();
        let x = Dev {
            subject: name,
            bdf: bdf.clone(),
            p,
            is_nic,
            numa_nodes: r.numa_nodes.len(),
        };
        let from = out.len();
        judge_each(RULES, device_judge, &x, &mut out);
        for f in out[from..].iter_mut().filter(|_| !bdf.is_empty()) {
            f.evidence.insert("pci_bdf".into(), bdf.clone().into());
        }
    }
    judge_each(RULES, report_judge, r, &mut out);
    say_moved(&mut out, &moved_names(r));
    out
}

fn device_judge(j: &RuleFn) -> Option<fn(&Dev, &mut Vec<Finding>)> {
    match j {
        RuleFn::Device(j) => Some(*j),
        _ => None,
    }
}

fn report_judge(j: &RuleFn) -> Option<fn(&TopoReport, &mut Vec<Finding>)> {
    match j {
        RuleFn::Report(j) => Some(*j),
        _ => None,
    }
}

fn nvlink_below_majority(r: &TopoReport, out: &mut Vec<Finding>) {
    out.extend(nvlink_findings(r));
}

fn fabric(r: &TopoReport, out: &mut Vec<Finding>) {
    if let Some(f) = &r.fabric {
        out.extend(super::fabric::judge(f));
    }
}

fn numa_node_unknown(x: &Dev, out: &mut Vec<Finding>) {
    let (p, subject) = (x.p, &x.subject);
    if p.numa_node == Some(-1) && x.numa_nodes != 1 {
        out.push(
            Finding::new(
                "topo.numa_node_unknown",
                Severity::Warn,
                subject,
                "numa_node is -1: the firmware publishes no NUMA proximity for this device, so NCCL \
                 and nvidia-smi cannot tell which CPU socket it is near",
            )
            .evidence("numa_node", -1)
            .evidence("sysfs_path", p.sysfs_path.clone())
            .fix(
                "enable the firmware setting that publishes PCIe NUMA proximity (ACPI SRAT/_PXM); \
                 on a VM, give NCCL the bare-metal topology file via NCCL_TOPO_FILE",
            ),
        );
    }
}

fn pcie_width_degraded(x: &Dev, out: &mut Vec<Finding>) {
    let (p, subject, bdf) = (x.p, &x.subject, &x.bdf);
    let Some(link) = &p.link else { return };
    let allowed_width = match (link.max_width, p.upstream_max_width) {
        (Some(d), Some(u)) => Some(d.min(u)),
        (d, u) => d.or(u),
    };
    if let (Some(cur), Some(max)) = (link.current_width, allowed_width)
        && cur < max
    {
        out.push(
            Finding::new(
                "topo.pcie_width_degraded",
                Severity::Fail,
                subject,
                format!("PCIe link runs at x{cur}, below the x{max} that device and slot support"),
            )
            .evidence("current_link_width", cur)
            .evidence("max_link_width", link.max_width)
            .evidence("upstream_max_link_width", p.upstream_max_width)
            .fix(format!(
                "reseat the card and its riser or cable; {}",
                lnk_compare(bdf)
            )),
        );
    }
}

fn pcie_speed_degraded(x: &Dev, out: &mut Vec<Finding>) {
    let (p, subject, bdf) = (x.p, &x.subject, &x.bdf);
    let Some(link) = &p.link else { return };
    let allowed_speed = match (&link.max_speed, &p.upstream_max_speed) {
        (Some(d), Some(u)) if u.gts < d.gts => Some(u),
        (Some(d), _) => Some(d),
        (None, u) => u.as_ref(),
    };
    if let (true, Some(cur), Some(max)) = (x.is_nic, &link.current_speed, allowed_speed)
        && cur.gts < max.gts
    {
        out.push(
            Finding::new(
                "topo.pcie_speed_degraded",
                Severity::Fail,
                subject,
                format!(
                    "PCIe link trained at {}, below the {} that device and slot support",
                    cur.raw, max.raw
                ),
            )
            .evidence("current_link_speed", cur.raw.clone())
            .evidence("max_link_speed", link.max_speed.as_ref().map(|s| s.raw.clone()))
            .evidence(
                "upstream_max_link_speed",
                p.upstream_max_speed.as_ref().map(|s| s.raw.clone()),
            )
            .fix(format!(
                "reseat the card; check BIOS PCIe speed settings and the riser; {}",
                lnk_compare(bdf)
            )),
        );
    }
}

fn gpu_nic_sys(r: &TopoReport, out: &mut Vec<Finding>) {
    let ng = r.gpus.len();
    if !r.nics.is_empty() {
        for (i, g) in r.gpus.iter().enumerate() {
            let Some(row) = r.matrix.get(i) else { continue };
            let cells: Vec<&str> = row.get(ng..).unwrap_or(&[]).iter().map(String::as_str).collect();
            if !cells.is_empty() && cells.iter().all(|c| *c == "SYS") {
                out.push(
                    Finding::new(
                        "topo.gpu_nic_sys",
                        Severity::Warn,
                        &g.label,
                        "every RDMA NIC is across the CPU interconnect (SYS): GPUDirect RDMA is off by \
                         default (NCCL_NET_GDR_LEVEL=PXB) and traffic crosses sockets",
                    )
                    .evidence("nearest_nic_path", "SYS")
                    .evidence("pci_bdf", g.pci_bus_id.as_str())
                    .fix("place a NIC under the same CPU socket as this GPU, or check numa_node of GPU and NICs"),
                );
            }
        }
    }
}

// ---- NCCL topology XML ---------------------------------------------------------------

fn hex4(v: Option<u32>) -> Option<String> {
    v.map(|v| format!("0x{v:04x}"))
}

/// The NCCL topology tree of this report (what `--format nccl-xml` writes).
pub fn to_nccl_system(r: &TopoReport) -> NcclSystem {
    let switch_of: HashMap<&str, &TopoSwitch> =
        r.switches.iter().map(|s| (s.pci_bus_id.as_str(), s)).collect();
    let gpu_class = gpu_classes(r);
    let mut cpus: BTreeMap<i32, NcclCpu> = BTreeMap::new();
    for g in &r.gpus {
        let mut l = pci_leaf(g.pci_bus_id.clone(), &g.pci, "0x030200");
        // Without NVML the compute capability is unknown; NCCL requires `sm` on a <gpu>,
        // so leave the element out and let NCCL fill it, as Azure's files do.
        l.gpu = g.sm.map(|sm| nccl_gpu(g, sm, &gpu_class));
        let path = switch_nodes(&switch_of, &g.pci);
        insert(
            &mut cpu_of(&mut cpus, r, g.pci.numa_node.unwrap_or(-1)).pcis,
            &path,
            l,
        );
    }
    add_nics(r, &switch_of, &mut cpus);
    let mut sys = NcclSystem {
        cpus: cpus.into_values().collect(),
    };
    for c in &mut sys.cpus {
        sort_by_busid(&mut c.pcis);
    }
    sys
}

/// Each GPU's PCI class as NCCL writes it, by bus id: the `tclass` of NVLinks to it.
fn gpu_classes(r: &TopoReport) -> HashMap<&str, String> {
    r.gpus
        .iter()
        .map(|g| {
            (
                g.pci_bus_id.as_str(),
                g.pci
                    .ident
                    .class
                    .map(|c| format!("0x{c:06x}"))
                    .unwrap_or_else(|| "0x030200".into()),
            )
        })
        .collect()
}

/// A GPU's `<gpu>` element: its index, compute capability and NVLinks.
fn nccl_gpu(g: &TopoGpu, sm: u32, gpu_class: &HashMap<&str, String>) -> NcclGpu {
    NcclGpu {
        dev: Some(g.index),
        sm: Some(sm),
        nvlinks: g
            .nvlinks
            .iter()
            .filter_map(|p| {
                Some(NcclNvlink {
                    target: p.target_pci_bus_id.clone()?,
                    count: p.count,
                    // An unknown far end gets no tclass: NCCL then reads the
                    // class from the host's sysfs itself, as for its own dumps.
                    tclass: match p.target_kind.as_str() {
                        "gpu" => Some(
                            gpu_class
                                .get(p.target_pci_bus_id.as_deref().unwrap_or(""))
                                .cloned()
                                .unwrap_or_else(|| "0x030200".into()),
                        ),
                        "nvswitch" => Some(NVSWITCH_CLASS.into()),
                        "cpu" => Some(NVLINK_CPU_CLASS.into()),
                        _ => None,
                    },
                })
            })
            .collect(),
    }
}

/// The NICs under their CPUs. NCCL's IB plugin forces the function to 0, merging the
/// ports of one adapter.
fn add_nics(r: &TopoReport, switch_of: &HashMap<&str, &TopoSwitch>, cpus: &mut BTreeMap<i32, NcclCpu>) {
    // (ports merged so far, the first port's GUID: NCCL reports the merged device's).
    let mut merged: HashMap<String, (u32, Option<String>)> = HashMap::new();
    for (k, n) in r.nics.iter().enumerate() {
        let Some(bdf) = &n.pci.pci_bus_id else {
            continue;
        };
        let busid = ncclt::slot_of(bdf)
            .map(|s| format!("{s}.0"))
            .unwrap_or(bdf.clone());
        let (real_port, guid) = merged
            .entry(busid.clone())
            .or_insert_with(|| (0, n.node_guid.as_deref().and_then(nccl_guid)));
        let first = n.ports.first();
        let mut l = pci_leaf(busid.clone(), &n.pci, "0x020000");
        l.nets.push(NcclNet {
            name: n.ibdev.clone(),
            dev: Some(k as u32),
            speed: first.and_then(|p| p.rate_mbps),
            port: Some(first.map(|p| p.port).unwrap_or(1) + *real_port),
            guid: guid.clone(),
        });
        *real_port += 1;
        let path = switch_nodes(switch_of, &n.pci);
        insert(
            &mut cpu_of(cpus, r, n.pci.numa_node.unwrap_or(-1)).pcis,
            &path,
            l,
        );
    }
}

/// Insert a device under its CPU, creating switch nodes on the way.
fn insert(list: &mut Vec<NcclPci>, path: &[NcclPci], leaf: NcclPci) {
    match path.split_first() {
        None => match list.iter_mut().find(|p| p.busid == leaf.busid) {
            // Functions of one NIC are one NCCL node: merge their nets.
            Some(existing) => existing.nets.extend(leaf.nets),
            None => list.push(leaf),
        },
        Some((sw, rest)) => {
            let pos = match list.iter().position(|p| p.busid == sw.busid) {
                Some(p) => p,
                None => {
                    list.push(sw.clone());
                    list.len() - 1
                }
            };
            insert(&mut list[pos].children, rest, leaf);
        }
    }
}

/// The `<cpu>` of a NUMA node, made on first use from the host's CPU facts.
fn cpu_of<'c>(cpus: &'c mut BTreeMap<i32, NcclCpu>, r: &TopoReport, numa: i32) -> &'c mut NcclCpu {
    cpus.entry(numa).or_insert_with(|| NcclCpu {
        numaid: numa,
        affinity: r
            .numa_nodes
            .iter()
            .find(|n| n.id == numa)
            .and_then(|n| n.cpumap.clone()),
        arch: r.cpu.arch.clone(),
        vendor: r.cpu.vendor.clone(),
        familyid: r.cpu.family_id,
        modelid: r.cpu.model_id,
        ..Default::default()
    })
}

/// The PCIe switches NCCL sees above a device, as `<pci>` nodes, top first.
fn switch_nodes(switch_of: &HashMap<&str, &TopoSwitch>, p: &PciPlace) -> Vec<NcclPci> {
    p.nccl_switches
        .iter()
        .map(|b| {
            let s = switch_of.get(b.as_str());
            NcclPci {
                busid: b.clone(),
                class: Some(
                    s.and_then(|s| s.ident.class)
                        .map(|c| format!("0x{c:06x}"))
                        .unwrap_or_else(|| "0x060400".into()),
                ),
                vendor: hex4(s.and_then(|s| s.ident.vendor)),
                device: hex4(s.and_then(|s| s.ident.device)),
                subsystem_vendor: hex4(s.and_then(|s| s.ident.subsystem_vendor)),
                subsystem_device: hex4(s.and_then(|s| s.ident.subsystem_device)),
                link_speed: s.and_then(|s| s.nccl_link_speed.clone()),
                link_width: s.and_then(|s| s.nccl_link_width),
                ..Default::default()
            }
        })
        .collect()
}

/// A device's own `<pci>` node; `default_class` when its class was not read.
fn pci_leaf(busid: String, p: &PciPlace, default_class: &str) -> NcclPci {
    NcclPci {
        busid,
        class: Some(
            p.ident
                .class
                .map(|c| format!("0x{c:06x}"))
                .unwrap_or_else(|| default_class.into()),
        ),
        vendor: hex4(p.ident.vendor),
        device: hex4(p.ident.device),
        subsystem_vendor: hex4(p.ident.subsystem_vendor),
        subsystem_device: hex4(p.ident.subsystem_device),
        link_speed: p.nccl_link_speed.clone(),
        link_width: p.nccl_link_width,
        ..Default::default()
    }
}

/// Every level in bus-id order, as NCCL's own dumps list them.
fn sort_by_busid(list: &mut [NcclPci]) {
    list.sort_by(|a, b| a.busid.cmp(&b.busid));
    for p in list {
        sort_by_busid(&mut p.children);
    }
}

/// Build the report from an NCCL topology file's tree (`--nccl-xml FILE`).
pub fn from_nccl_system(sys: &NcclSystem, file: &str) -> TopoReport {
    let mut raw_gpus = Vec::new();
    let mut raw_nics = Vec::new();
    let mut raw_sw = Vec::new();
    let mut w = Walk {
        gpus: &mut raw_gpus,
        nics: &mut raw_nics,
        switches: &mut raw_sw,
    };
    let (numa_nodes, cpu) = walk_cpus(sys, &mut w);
    let switches: Vec<TopoSwitch> = raw_sw
        .into_iter()
        .map(|(p, parent)| TopoSwitch {
            pci_bus_id: p.busid.clone(),
            parent,
            ident: xml_ident(&p),
            nccl_link_speed: p.link_speed.clone(),
            nccl_link_width: p.link_width,
        })
        .collect();
    raw_gpus.sort_by(|a, b| {
        let dev = |g: &NcclPci| g.gpu.as_ref().and_then(|g| g.dev);
        (dev(&a.0).is_none(), dev(&a.0), &a.0.busid).cmp(&(dev(&b.0).is_none(), dev(&b.0), &b.0.busid))
    });
    let gpu_ids: Vec<String> = raw_gpus.iter().map(|(p, _)| p.busid.clone()).collect();
    let gpus: Vec<TopoGpu> = raw_gpus
        .into_iter()
        .enumerate()
        .map(|(i, (p, place))| xml_gpu(i, p, place, &gpu_ids))
        .collect();
    let mut nics: Vec<TopoNic> = raw_nics.into_iter().map(|(n, place)| xml_nic(n, place)).collect();
    nics.sort_by(nic_order);
    for (i, n) in nics.iter_mut().enumerate() {
        n.label = format!("NIC{i}");
    }
    let any_nvlink = gpus.iter().any(|g| !g.nvlinks.is_empty());
    let mut r = TopoReport {
        source: format!("nccl-xml:{file}"),
        nvlink_available: any_nvlink,
        nvlink_unavailable_reason: (!any_nvlink)
            .then(|| "the NCCL topology file has no <nvlink> elements".into()),
        gpus,
        nics,
        switches,
        numa_nodes,
        cpu,
        labels: Vec::new(),
        matrix: Vec::new(),
        nccl_matrix: Vec::new(),
        notes: vec![
            "read from an NCCL topology file: host bridges are not recorded there, so nvidia-smi's NODE \
             shows as PHB"
                .into(),
        ],
        fabric: None,
        gpus_not_in_nvml: Vec::new(),
        nics_not_in_rdma: Vec::new(),
        gpus_without_driver: Vec::new(),
    };
    finish(&mut r);
    r
}

/// A `<pci>` element's identity, its hex ids parsed.
fn xml_ident(p: &NcclPci) -> PciIdent {
    let hexv = |v: &Option<String>| v.as_deref().and_then(pci::parse_hex_id);
    PciIdent {
        class: p.class_num(),
        vendor: hexv(&p.vendor),
        device: hexv(&p.device),
        subsystem_vendor: hexv(&p.subsystem_vendor),
        subsystem_device: hexv(&p.subsystem_device),
    }
}

/// The GPUs, NICs and switches found under the file's CPUs, in the file's order.
struct Walk<'a> {
    gpus: &'a mut Vec<(NcclPci, PciPlace)>,
    nics: &'a mut Vec<(NcclNet, PciPlace)>,
    switches: &'a mut Vec<(NcclPci, Option<String>)>,
}

/// One `<pci>` and what is below it; `above` holds the switches passed on the way down.
fn walk(w: &mut Walk, p: &NcclPci, above: &mut Vec<String>, base: &PciPlace) {
    let place = PciPlace {
        pci_bus_id: Some(p.busid.clone()),
        nccl_switches: above.clone(),
        nccl_link_speed: p.link_speed.clone(),
        nccl_link_width: p.link_width,
        ..base.clone()
    };
    if p.is_gpu() {
        w.gpus.push((p.clone(), place));
    } else if p.is_nic() {
        if p.nets.is_empty() {
            // Azure's files carry bare <pci> NICs: name them by bus id.
            w.nics.push((
                NcclNet {
                    name: p.busid.clone(),
                    ..Default::default()
                },
                place,
            ));
        } else {
            for n in &p.nets {
                w.nics.push((n.clone(), place.clone()));
            }
        }
    } else if !p.children.is_empty() {
        w.switches.push((p.clone(), above.last().cloned()));
        above.push(p.busid.clone());
        for c in &p.children {
            walk(w, c, above, base);
        }
        above.pop();
    }
}

/// Walk every `<cpu>`: its NUMA node, the CPU facts (from the first that has them), and
/// the devices under it.
fn walk_cpus(sys: &NcclSystem, w: &mut Walk) -> (Vec<NumaNode>, CpuFacts) {
    let mut numa_nodes = Vec::new();
    let mut cpu = CpuFacts::default();
for c in &sys.cpus {
    let cpulist = c.affinity.as_deref().and_then(node::cpumap_to_cpulist);
    if !numa_nodes.iter().any(|n: &NumaNode| n.id == c.numaid) && c.numaid >= 0 {
        numa_nodes.push(NumaNode {
            id: c.numaid,
            cpulist: cpulist.clone(),
            cpumap: c.affinity.clone(),
        });
    }
    if cpu.arch.is_none() {
        cpu = CpuFacts {
            arch: c.arch.clone(),
            vendor: c.vendor.clone(),
            family_id: c.familyid,
            model_id: c.modelid,
        };
    }
    let base = PciPlace {
        numa_node: Some(c.numaid),
        local_cpulist: cpulist,
        ..Default::default()
    };
    for p in &c.pcis {
        walk(w, p, &mut Vec::new(), &base);
    }
    for n in &c.nets {
        w.nics.push((n.clone(), base.clone()));
    }
}
    (numa_nodes, cpu)
}

/// The `i`th GPU (in NCCL's device order) of the file, its NVLinks summed by far end.
fn xml_gpu(i: usize, p: NcclPci, place: PciPlace, gpu_ids: &[String]) -> TopoGpu {
    let g = p.gpu.clone().unwrap_or_default();
    let mut by: BTreeMap<(String, String), u32> = BTreeMap::new();
    for l in &g.nvlinks {
        let kind = match l.tclass.as_deref() {
            _ if gpu_ids.contains(&l.target) => "gpu",
            Some(c) => kind_of_class(c),
            // NCCL would read the class from the host's sysfs; a file alone cannot say.
            None => "unknown",
        };
        *by.entry((l.target.clone(), kind.to_string())).or_default() += l.count;
    }
    TopoGpu {
        label: format!("GPU{i}"),
        index: g.dev.unwrap_or(i as u32),
        pci_bus_id: p.busid.clone(),
        name: None,
        sm: g.sm,
        gpu_numa_id: None,
        nvlinks: by
            .into_iter()
            .map(|((t, k), count)| NvlinkPeer {
                target_pci_bus_id: Some(t),
                target_kind: k,
                count,
            })
            .collect(),
        pci: PciPlace {
            ident: xml_ident(&p),
            ..place
        },
    }
}

/// A NIC of the file: its name, and a port when the file gives its speed.
fn xml_nic(n: NcclNet, place: PciPlace) -> TopoNic {
    TopoNic {
        label: String::new(),
        ibdev: n.name.clone(),
        node_guid: None,
        ports: n
            .speed
            .map(|s| {
                vec![NicPort {
                    port: n.port.unwrap_or(1),
                    link_layer: None,
                    rate: None,
                    rate_mbps: Some(s),
                }]
            })
            .unwrap_or_default(),
        pci: place,
    }
}

/// One GPU's NVLink pairs below a bar, as [`nvlink_by_gpu`] attributes them.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct LowLinks {
    /// The GPU the low pairs are blamed on (`GPU5`); for a pair that cannot be attributed
    /// (both ends low equally often), both labels joined (`GPU0-GPU1`).
    pub subject: String,
    /// (peer label, cell) of each low pair.
    pub pairs: Vec<(String, String)>,
    /// How many GPU peers the subject has in the matrix.
    pub peers: usize,
}

/// The GPU-GPU NVLink count of a cell (`NV12` -> 12, anything else 0).
fn nv_count(cell: &str) -> u64 {
    cell.strip_prefix("NV").and_then(|x| x.parse().ok()).unwrap_or(0)
}

/// GPU-GPU pairs whose NVLink count `is_low`, grouped by the GPU to blame: a GPU that lost
/// links is low to every peer, so each low pair goes to whichever end is in more low pairs
/// (one finding per GPU, not per pair). Pure.
pub(crate) fn nvlink_by_gpu(r: &TopoReport, is_low: impl Fn(u64) -> bool) -> Vec<LowLinks> {
    let ng = r.gpus.len();
    let cell = |i: usize, j: usize| r.matrix.get(i).and_then(|row| row.get(j)).map(String::as_str);
    let mut low: Vec<(usize, usize, String)> = Vec::new();
    for i in 0..ng {
        for j in i + 1..ng {
            if let Some(c) = cell(i, j).filter(|c| is_low(nv_count(c))) {
                low.push((i, j, c.to_string()));
            }
        }
    }
    let mut times = vec![0usize; ng];
    for (i, j, _) in &low {
        times[*i] += 1;
        times[*j] += 1;
    }
    let label = |i: usize| r.gpus[i].label.clone();
    let mut out: Vec<LowLinks> = Vec::new();
    for (i, j, c) in low {
        let (subject, peer) = match times[i].cmp(&times[j]) {
            std::cmp::Ordering::Greater => (label(i), label(j)),
            std::cmp::Ordering::Less => (label(j), label(i)),
            std::cmp::Ordering::Equal => (format!("{}-{}", label(i), label(j)), String::new()),
        };
        match out.iter_mut().find(|l| l.subject == subject) {
            Some(l) => l.pairs.push((peer, c)),
            None => out.push(LowLinks {
                peers: if peer.is_empty() { 1 } else { ng - 1 },
                subject,
                pairs: vec![(peer, c)],
            }),
        }
    }
    out
}

/// The NVLink count most GPU pairs of this host have, where NVLink facts exist and at
/// least three pairs agree on one non-zero count.
pub(crate) fn nvlink_majority(r: &TopoReport) -> Option<u64> {
    if !r.nvlink_available {
        return None;
    }
    let ng = r.gpus.len();
    let mut counts: std::collections::BTreeMap<u64, usize> = Default::default();
    for i in 0..ng {
        for j in i + 1..ng {
            if let Some(c) = r.matrix.get(i).and_then(|row| row.get(j)) {
                *counts.entry(nv_count(c)).or_default() += 1;
            }
        }
    }
    let pairs: usize = counts.values().sum();
    let (n, k) = counts.into_iter().max_by_key(|(n, k)| (*k, *n))?;
    (n > 0 && k >= 3 && 2 * k > pairs).then_some(n)
}

/// A GPU with fewer NVLinks to its peers than the host's majority pair has lost links:
/// one fail per GPU, however many pairs show it.
fn nvlink_findings(r: &TopoReport) -> Vec<Finding> {
    let Some(majority) = nvlink_majority(r) else {
        return Vec::new();
    };
    nvlink_by_gpu(r, |n| n < majority)
        .into_iter()
        .map(|l| {
            let cells: Vec<String> = l
                .pairs
                .iter()
                .map(|(p, c)| if p.is_empty() { c.clone() } else { format!("{p} {c}") })
                .collect();
            let lowest = l.pairs.iter().map(|(_, c)| nv_count(c)).min().unwrap_or(0);
            Finding::new(
                "topo.nvlink_below_majority",
                Severity::Fail,
                &l.subject,
                format!(
                    "{} has NV{lowest} or fewer to {} of its {} GPU peers, where this host's GPU pairs have NV{majority}: NVLinks are down",
                    l.subject,
                    l.pairs.len(),
                    l.peers
                ),
            )
            .evidence("majority_nvlinks", majority)
            .evidence("low_pairs", cells.join(", "))
            .fix(nvlink_fix(&l.subject))
        })
        .collect()
}

/// What a person runs for a GPU whose NVLinks are down (`GPU5` -> `nvidia-smi nvlink -s -i 5`).
pub(crate) fn nvlink_fix(subject: &str) -> String {
    let idx = subject.strip_prefix("GPU").filter(|i| i.chars().all(|c| c.is_ascii_digit()));
    let status = match idx {
        Some(i) => format!("`nvidia-smi nvlink -s -i {i}` and `nvidia-smi nvlink -e -i {i}`"),
        None => "`nvidia-smi nvlink -s`".to_string(),
    };
    format!(
        "{status}; look for Xid 74/79 and NVLink errors in `dmesg`; on NVSwitch systems check `systemctl status nvidia-fabricmanager`; a link that stays down after a reboot needs the GPU baseboard serviced"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 42: the module a NIC that registered no RDMA device waits for, by vendor,
    /// device and bound driver (the NIC driver when none is bound, else its RDMA half).
    #[test]
    fn module_to_load_table() {
        let cases = [
            (0x15b3, 0x1021, None, Some("mlx5_core")),
            (0x15b3, 0x101d, Some("mlx5_core"), Some("mlx5_ib")),
            (0x15b3, 0x1007, None, Some("mlx4_core")),
            (0x15b3, 0x1007, Some("mlx4_core"), Some("mlx4_ib")),
            (0x14e4, 0x1750, None, Some("bnxt_en")),
            (0x14e4, 0x1750, Some("bnxt_en"), Some("bnxt_re")),
            (0x8086, 0x1592, None, Some("ice")),
            (0x8086, 0x1592, Some("ice"), Some("irdma")),
            (0x8086, 0x24f0, None, Some("hfi1")),
            (0x1077, 0x8070, Some("qede"), Some("qedr")),
            (0x1d0f, 0xefa1, None, Some("efa")),
            // A driver this table does not pair with an RDMA module: each NIC its own cause.
            (0x15b3, 0x1021, Some("vfio-pci"), None),
            (0x1af4, 0x1041, None, None),
        ];
        for (v, d, drv, want) in cases {
            assert_eq!(module_to_load(v, d, drv), want, "{v:04x}:{d:04x} {drv:?}");
        }
    }

    /// One module not loaded groups its NICs; a NIC whose vendor registered others is its own.
    #[test]
    fn only_nics_marked_with_a_module_are_grouped() {
        let nic = |bdf: &str, module: Option<&str>| NicNotInRdma {
            label: String::new(),
            pci_bus_id: bdf.into(),
            vendor_device: "15b3:1021".into(),
            driver: None,
            netdevs: vec![],
            gpus_beside: vec![],
            module_not_loaded: module.map(str::to_string),
        };
        let missing = [
            nic("0000:0c:00.0", Some("mlx5_core")),
            nic("0000:2a:00.0", None),
            nic("0000:41:00.0", Some("mlx5_core")),
            nic("0000:58:00.0", Some("bnxt_en")),
        ];
        let (groups, own) = by_module_not_loaded(&missing);
        let g: Vec<(&str, Vec<&str>)> = groups
            .iter()
            .map(|(m, v)| (*m, v.iter().map(|n| n.pci_bus_id.as_str()).collect()))
            .collect();
        assert_eq!(
            g,
            [("bnxt_en", vec!["0000:58:00.0"]), ("mlx5_core", vec!["0000:0c:00.0", "0000:41:00.0"])]
        );
        assert_eq!(own.iter().map(|n| n.pci_bus_id.as_str()).collect::<Vec<_>>(), ["0000:2a:00.0"]);
    }

    #[test]
    fn rates() {
        let cases = [
            ("400 Gb/sec (4X NDR)", Some(400_000)),
            ("200 Gb/sec (2X NDR)", Some(200_000)),
            ("2.5 Gb/sec (1X SDR)", Some(2_500)),
            ("25 Gb/sec (1X EDR)", Some(25_000)),
            ("10 Gb/sec (4X)", Some(10_000)),
            ("56 Gb/sec (4X FDR)", Some(56_000)),
            ("fast", None),
            ("", None),
            ("100 Mb/sec", None),
        ];
        for (raw, want) in cases {
            assert_eq!(parse_rate_mbps(raw), want, "{raw:?}");
        }
    }

    #[test]
    fn guids_as_nccl_prints_them() {
        // OCI sample: mlx5_0 guid="0x9a70500003ae6d94" (Mellanox OUI 94:6d:ae).
        assert_eq!(
            nccl_guid("946d:ae03:0050:709a").as_deref(),
            Some("0x9a70500003ae6d94")
        );
        assert_eq!(
            nccl_guid("946d:ae03:00e0:1108").as_deref(),
            Some("0x811e00003ae6d94")
        );
        assert_eq!(nccl_guid("nope"), None);
    }

    fn at(numa: i32, root: &str, sw: &[&str], slot: &str) -> Attach {
        Attach {
            numa,
            root: Some(root.into()),
            switches: sw.iter().map(|s| s.to_string()).collect(),
            slot: Some(slot.into()),
        }
    }

    #[test]
    fn smi_levels() {
        let g0 = at(0, "pci0000:00", &["a", "a1"], "0000:03:00");
        let n0 = at(0, "pci0000:00", &["a", "a1"], "0000:04:00");
        let n1 = at(0, "pci0000:00", &["a", "a2"], "0000:06:00");
        let other_rc = at(0, "pci0000:40", &["b"], "0000:43:00");
        let same_rc_no_switch = at(0, "pci0000:00", &[], "0000:09:00");
        let remote = at(1, "pci0000:80", &["c"], "0000:83:00");
        let f0 = at(0, "pci0000:00", &[], "0000:21:00");
        assert_eq!(smi_pci_level(&g0, &n0), "PIX");
        assert_eq!(smi_pci_level(&g0, &n1), "PXB");
        assert_eq!(smi_pci_level(&g0, &other_rc), "NODE");
        assert_eq!(smi_pci_level(&g0, &same_rc_no_switch), "PHB");
        assert_eq!(smi_pci_level(&g0, &remote), "SYS");
        assert_eq!(smi_pci_level(&f0, &f0.clone()), "PIX");
    }
}
