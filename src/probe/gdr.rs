//! `gdr`: GPUDirect RDMA readiness per GPU x RDMA NIC pair, the way NCCL decides it: the
//! pair's path type against `NCCL_NET_GDR_LEVEL`, a peer-memory client (the exact paths each
//! NCCL version checks) or the DMA-BUF prerequisites; and what breaks GDR below NCCL: ACS
//! redirect on the bridges between GPU and NIC, the IOMMU translating device DMA, BAR1.

use serde::Serialize;

use crate::finding::{Finding, Rule, Severity, judge_each};
use crate::host::Host;
use crate::nccl::settings::NcclSettings;
use crate::nccl::topo::{PathType, level_as_path_type};
use crate::nccl::version::NcclVersion;
use crate::probe::topo::{self, PciPlace};
use crate::sysfs::kernel::{self, IommuGroup};
use crate::sysfs::pcicfg::{self, Acs};

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GdrReport {
    pub gpus: Vec<GdrDevice>,
    pub nics: Vec<GdrDevice>,
    pub nccl_net_gdr_level: GdrLevel,
    pub peer_memory: PeerMemory,
    pub dmabuf: DmaBuf,
    pub iommu: Iommu,
    /// Every bridge between a GPU and a NIC that share a PCIe switch, with its ACS state.
    pub bridges: Vec<BridgeAcs>,
    pub pairs: Vec<GdrPair>,
    pub notes: Vec<String>,
    /// Device names ib_core moved past a NIC that did not register (topo's `moved_names`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names_moved: Vec<topo::MovedName>,
    /// NICs the PCI tree shows that registered no RDMA device (topo's `nics_not_in_rdma`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_in_rdma: Vec<topo::NicNotInRdma>,
    /// GPUs the PCI tree shows that NVML does not list (topo's `gpus_not_in_nvml`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus_not_in_nvml: Vec<topo::GpuNotInNvml>,
    /// GPUs the PCI tree shows that NVIDIA's driver does not drive (topo's
    /// `gpus_without_driver`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus_without_driver: Vec<topo::GpuWithoutDriver>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GdrDevice {
    /// `GPU0`, `NIC0` (the topo labels).
    pub label: String,
    /// The RDMA device name for NICs, the GPU name for GPUs.
    pub name: Option<String>,
    pub pci_bus_id: String,
    /// NVML's BAR1 size (GPUs, when NVML answered).
    pub bar1_total_bytes: Option<u64>,
    pub iommu_group: Option<IommuGroup>,
    /// NICs: whether NCCL opens one of its ports (NCCL_IB_DISABLE, NCCL_IB_HCA, port
    /// state and link layer: `nccl-env`'s rule), and why; `None` for GPUs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nccl_uses: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nccl_use_rule: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GdrLevel {
    /// What the level allows on PCIe paths (P2C allows what PXB does there).
    pub level: PathType,
    /// The level as NCCL names it (`P2C`, `PXB`, `PHB`...), as `nccl-env` shows it.
    pub name: String,
    /// Why it holds: `default, NCCL_NET_GDR_C2C=1`, `set in environment`, `set in
    /// /etc/nccl.conf:3` (the same words as `nccl-env`).
    pub source: String,
    /// The variable's raw value when set.
    pub raw: Option<String>,
    /// NCCL's own default level (`P2C`, `PXB`), when the level was set by hand: what
    /// unsetting it gives.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_name: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PathCheck {
    pub path: String,
    pub exists: bool,
    /// The NCCL versions that check this path.
    pub nccl_versions: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PeerMemory {
    /// `/sys/module` exists: module state is known. A snapshot without it (taken by an
    /// older fabprobe, or hand-made) cannot say whether peer memory was loaded.
    pub modules_visible: bool,
    /// NCCL's `ncclIbGdrSupport()` paths.
    pub paths: Vec<PathCheck>,
    /// NCCL would find a peer-memory client, under the rules of [`Self::nccl_rules`]. With
    /// an unknown version: only when every version would.
    pub nccl_gdr_support: bool,
    /// Which NCCL version's list of paths was applied, and where the version came from.
    pub nccl_rules: String,
    /// The NCCL version whose rules were applied; null when unknown.
    pub nccl_version: Option<String>,
    /// The NCCL version is unknown and versions disagree here (e.g. only
    /// `/sys/module/nvidia_peermem/version`, which NCCL 2.22 and older do not read).
    pub depends_on_version: bool,
    /// `/sys/module/nvidia_peermem` (loaded).
    pub nvidia_peermem_loaded: bool,
    pub nvidia_peermem_version: Option<String>,
    /// `/sys/module/nvidia_peermem/parameters/peerdirect_support`.
    pub peerdirect_support: Option<String>,
    /// The legacy out-of-tree `nv_peer_mem` (`/sys/module/nv_peer_mem`).
    pub nv_peer_mem_loaded: bool,
    /// `/sys/kernel/mm/memory_peers` exists: ib_core has MLNX_OFED/DOCA's peer-memory API,
    /// without which nvidia-peermem cannot load ("Invalid argument").
    pub peer_memory_api: bool,
    /// The module file as `modules.dep` lists it, when the module is not loaded.
    pub nvidia_peermem_module_file: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DmaBuf {
    pub kernel: Option<String>,
    /// Kernel ≥ 5.12 (`ib_umem_dmabuf`).
    pub kernel_ok: Option<bool>,
    /// rdma-core's version (from the `libibverbs.so.1` link), ≥ 34 has `ibv_reg_dmabuf_mr`.
    pub rdma_core: Option<u32>,
    pub rdma_core_source: Option<String>,
    pub rdma_core_ok: Option<bool>,
    /// `/proc/driver/nvidia/version`'s version.
    pub nvidia_driver: Option<String>,
    /// The NVIDIA open kernel module (DMA-BUF needs it in practice).
    pub nvidia_open_module: Option<bool>,
    /// All three known and met.
    pub possible: bool,
    /// `NCCL_DMABUF_ENABLE` as NCCL reads it (default 1): 0 keeps NCCL off DMA-BUF
    /// whatever the prerequisites (init.cc's dmaBufSupported).
    pub nccl_dmabuf_enable: bool,
    /// `yes` (all three met), `no` (one known unmet), `unknown` (none unmet, one not known).
    pub path: Known,
    /// The prerequisites that could not be read, by name.
    pub unknown: Vec<String>,
}

impl DmaBuf {
    /// The one wording of the DMA-BUF state every command prints (`gdr`, `nccl-env`).
    pub(crate) fn state_text(&self) -> String {
        match self.path {
            _ if !self.nccl_dmabuf_enable => "off (NCCL_DMABUF_ENABLE=0)".to_string(),
            Known::Yes => "possible".to_string(),
            Known::No => "not possible".to_string(),
            Known::Unknown => format!("unknown ({} not known)", self.unknown.join(", ")),
        }
    }
}

/// A yes/no question that may have no answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Known {
    Yes,
    No,
    Unknown,
}

impl Known {
    /// All of `v` met: `No` when one is known unmet, else `Unknown` when one is not known.
    pub fn all(v: &[Option<bool>]) -> Known {
        if v.contains(&Some(false)) {
            Known::No
        } else if v.contains(&None) {
            Known::Unknown
        } else {
            Known::Yes
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Known::Yes => "yes",
            Known::No => "no",
            Known::Unknown => "unknown",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Iommu {
    /// `/sys/class/iommu` entries (empty: no IOMMU active).
    pub units: Vec<String>,
    pub cmdline_flags: Vec<String>,
    /// `iommu=pt` and the like on the command line; `None` when it says nothing.
    pub cmdline_passthrough: Option<bool>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BridgeAcs {
    pub pci_bus_id: String,
    pub acs: Acs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GdrVerdict {
    /// Within the level, and a peer-memory client is there.
    On,
    /// Within the level, no peer-memory client, DMA-BUF prerequisites met.
    DmabufPossible,
    /// The path is farther than NCCL_NET_GDR_LEVEL.
    OffDistance,
    /// Within the level, but neither peer memory nor DMA-BUF.
    OffNoPeerMemory,
    /// Within the level, no peer memory seen, and peer memory unknown (no `/sys/module`, or
    /// the NCCL version is unknown and versions disagree on the files present) or a DMA-BUF
    /// prerequisite unknown.
    Unknown,
}

impl GdrVerdict {
    pub fn as_str(self) -> &'static str {
        match self {
            GdrVerdict::On => "on",
            GdrVerdict::DmabufPossible => "dmabuf_possible",
            GdrVerdict::OffDistance => "off_distance",
            GdrVerdict::OffNoPeerMemory => "off_no_peer_memory",
            GdrVerdict::Unknown => "unknown",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GdrPair {
    /// The GPU's label (`GPU0`, NVML's index) and the NIC's matrix label (`NIC0`): the
    /// row and column of the matrix.
    pub gpu: String,
    pub nic: String,
    /// The pair as every finding and command spells it: the GPU's label and the NIC's
    /// RDMA device name (`GPU0-mlx5_0`), never the NIC's matrix position, which shifts
    /// when a device is left out of the matrix.
    pub subject: String,
    /// NCCL's path type; `None` when a place is unknown.
    pub path: Option<PathType>,
    /// One of the GPU's nearest NICs: a pair NCCL would use.
    pub nccl_nearest: bool,
    pub verdict: Option<GdrVerdict>,
    /// Bridges between the two (not shared by both chains), top first.
    pub bridges_between: Vec<String>,
    /// Some bridge between them redirects P2P (ReqRedir/CmpltRedir).
    pub acs_redirect: bool,
    /// Some bridge's ACS could not be read.
    pub acs_unknown: bool,
}

const PEER_PATHS: &[(&str, &str)] = &[
    ("/sys/kernel/mm/memory_peers/nv_mem/version", "all"),
    ("/sys/kernel/mm/memory_peers/nv_mem_nc/version", ">=2.22"),
    ("/sys/module/nvidia_peermem/version", ">=2.23"),
    ("/sys/kernel/mm/memory_peers/nvidia-peermem/version", "2.9-2.21"),
];

/// Whether a [`PEER_PATHS`] version range (`all`, `>=2.22`, `2.9-2.21`) covers `v`.
fn applies(range: &str, v: (u32, u32)) -> bool {
    let p = |s: &str| crate::nccl::version::parse_version(s).map(|(a, b, _)| (a, b));
    if range == "all" {
        return true;
    }
    if let Some(lo) = range.strip_prefix(">=").and_then(p) {
        return v >= lo;
    }
    match range.split_once('-').map(|(a, b)| (p(a), p(b))) {
        Some((Some(lo), Some(hi))) => lo <= v && v <= hi,
        _ => false,
    }
}

/// One version on each side of every boundary in [`PEER_PATHS`].
const REPRESENTATIVE: &[(u32, u32)] = &[(2, 8), (2, 21), (2, 22), (2, 23)];

/// NCCL's peer-memory check and the modules behind it (also read by `nccl-env`).
pub(crate) fn peer_memory(host: &Host, version: &NcclVersion) -> PeerMemory {
    let paths: Vec<PathCheck> = PEER_PATHS
        .iter()
        .map(|(p, v)| PathCheck {
            path: p.to_string(),
            exists: host.exists(p),
            nccl_versions: v.to_string(),
        })
        .collect();
    let support_at = |v: (u32, u32)| paths.iter().any(|p| p.exists && applies(&p.nccl_versions, v));
    let (nccl_gdr_support, depends_on_version) = match version.parsed {
        Some((a, b, _)) => (support_at((a, b)), false),
        None => {
            let answers: Vec<bool> = REPRESENTATIVE.iter().map(|v| support_at(*v)).collect();
            let all = answers.iter().all(|x| *x);
            (all, !all && answers.iter().any(|x| *x))
        }
    };
    let loaded = host.exists("/sys/module/nvidia_peermem");
    let attr = |p: &str| host.attr(p).value().map(|s| s.trim().to_string());
    let module_file = if loaded {
        None
    } else {
        host.meta().kernel.as_ref().and_then(|k| {
            let dep = host.read_opt(format!("/lib/modules/{k}/modules.dep")).ok()??;
            dep.lines()
                .filter_map(|l| l.split(':').next())
                .find(|f| f.ends_with("/nvidia-peermem.ko") || f.contains("/nvidia-peermem.ko."))
                .map(|f| format!("/lib/modules/{k}/{f}"))
        })
    };
    PeerMemory {
        modules_visible: host.is_dir("/sys/module"),
        paths,
        nccl_gdr_support,
        nccl_rules: version.describe(),
        nccl_version: version.version.clone(),
        depends_on_version,
        nvidia_peermem_loaded: loaded,
        nvidia_peermem_version: attr("/sys/module/nvidia_peermem/version"),
        peerdirect_support: attr("/sys/module/nvidia_peermem/parameters/peerdirect_support"),
        nv_peer_mem_loaded: host.exists("/sys/module/nv_peer_mem"),
        peer_memory_api: host.is_dir("/sys/kernel/mm/memory_peers"),
        nvidia_peermem_module_file: module_file,
    }
}

/// DMA-BUF's prerequisites and `NCCL_DMABUF_ENABLE` (also read by `nccl-env`).
pub(crate) fn dmabuf(host: &Host, nccl: &NcclSettings) -> DmaBuf {
    let enable = crate::nccl::gid::nccl_param(nccl.value("NCCL_DMABUF_ENABLE"), 1) != 0;
    let kernel = host.meta().kernel.clone();
    let kernel_ok = kernel
        .as_deref()
        .and_then(kernel::kernel_version)
        .map(|v| v >= (5, 12));
    let rc = kernel::read_rdma_core(host);
    let nv = host
        .read_opt("/proc/driver/nvidia/version")
        .ok()
        .flatten()
        .and_then(|t| kernel::parse_nvidia_version(&t));
    let rdma_core_ok = rc.as_ref().map(|(v, _)| *v >= 34);
    let open = nv.as_ref().map(|(o, _)| *o);
    let unknown = [
        ("kernel", kernel_ok),
        ("rdma-core", rdma_core_ok),
        ("nvidia open module", open),
    ]
    .iter()
    .filter(|(_, v)| v.is_none())
    .map(|(n, _)| n.to_string())
    .collect();
    DmaBuf {
        possible: enable && kernel_ok == Some(true) && rdma_core_ok == Some(true) && open == Some(true),
        nccl_dmabuf_enable: enable,
        path: if enable {
            Known::all(&[kernel_ok, rdma_core_ok, open])
        } else {
            Known::No
        },
        unknown,
        kernel,
        kernel_ok,
        rdma_core: rc.as_ref().map(|(v, _)| *v),
        rdma_core_source: rc.map(|(_, s)| s),
        rdma_core_ok,
        nvidia_driver: nv.map(|(_, v)| v),
        nvidia_open_module: open,
    }
}

fn iommu(host: &Host) -> Iommu {
    let units = host
        .list_dir("/sys/class/iommu")
        .ok()
        .flatten()
        .unwrap_or_default();
    let flags = host
        .read_opt("/proc/cmdline")
        .ok()
        .flatten()
        .map(|c| kernel::iommu_cmdline_flags(&c))
        .unwrap_or_default();
    Iommu {
        cmdline_passthrough: kernel::cmdline_passthrough(&flags),
        cmdline_flags: flags,
        units,
    }
}

fn gdr_level(nccl: &NcclSettings, notes: &mut Vec<String>) -> GdrLevel {
    let set = nccl.gdr_level();
    let (name, source) = crate::nccl::params::net_gdr_level(
        set.as_ref().map(|s| (s.value.as_str(), s.from.as_str())),
        nccl.value("NCCL_NET_GDR_C2C"),
    );
    if let Some(s) = &set
        && crate::nccl::params::parse_level(&s.value).is_none()
    {
        notes.push(format!(
            "NCCL_NET_GDR_LEVEL={:?} ({}) is not a level NCCL knows (LOC, PIX, PXB, PHB, SYS or 0-4); NCCL keeps its default {name}",
            s.value, s.from
        ));
    }
    let (default, _) = crate::nccl::params::net_gdr_level(None, nccl.value("NCCL_NET_GDR_C2C"));
    GdrLevel {
        level: level_as_path_type(name).unwrap_or(PathType::Pxb),
        name: name.to_string(),
        source,
        default_name: set.as_ref().map(|_| default.to_string()),
        raw: set.map(|s| s.value),
    }
}

/// The sysfs path of bridge `bdf` on a device's canonical path.
fn bridge_path(place: &PciPlace, bdf: &str) -> Option<String> {
    let p = place.sysfs_path.as_deref()?;
    let pos = p.find(&format!("/{bdf}/"))?;
    Some(p[..pos + 1 + bdf.len()].to_string())
}

/// Bridges on either chain below the last bridge both share.
fn bridges_between(a: &PciPlace, b: &PciPlace) -> Vec<(String, String)> {
    if a.root_bus != b.root_bus {
        return Vec::new();
    }
    let common = a
        .bridges
        .iter()
        .zip(&b.bridges)
        .take_while(|(x, y)| x == y)
        .count();
    if common == 0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (place, chain) in [(a, &a.bridges), (b, &b.bridges)] {
        for bdf in &chain[common..] {
            if let Some(p) = bridge_path(place, bdf)
                && !out.iter().any(|(x, _): &(String, String)| x == bdf)
            {
                out.push((bdf.clone(), p));
            }
        }
    }
    out
}

/// `nccl`: the settings model (the GDR level and the version whose peer-memory rule applies).
pub fn probe(host: &Host, nccl: &NcclSettings) -> GdrReport {
    let t = topo::probe(host);
    let mut notes: Vec<String> = t
        .notes
        .iter()
        .filter(|n| n.starts_with("GPU") || n.starts_with("cannot") || n.contains("NVML"))
        .cloned()
        .collect();
    let nccl_net_gdr_level = gdr_level(nccl, &mut notes);
    let peer = peer_memory(host, &nccl.version);
    if !peer.modules_visible {
        notes.push("/sys/module is not visible (a snapshot without it): whether a peer-memory module is loaded is unknown".into());
    }
    let dmabuf = dmabuf(host, nccl);
    let iommu = iommu(host);
    let gpus = gdr_gpus(host, &t);
    let nics = gdr_nics(host, &t, &nccl.ib_use());
    let opened: Vec<bool> = nics.iter().map(|n| n.nccl_uses == Some(true)).collect();
    if !t.nics.is_empty() && !opened.contains(&true) {
        notes.push(none_opened(&nics));
    }
    // topo's notes already say why no GPU was found (sysfs and NVML).
    if t.nics.is_empty() {
        notes.push("no RDMA NIC found (/sys/class/infiniband is empty or absent)".into());
    }
    let ctx = PairCtx {
        level: nccl_net_gdr_level.level,
        peer: &peer,
        dmabuf: &dmabuf,
        opened: &opened,
    };
    let (pairs, bridges) = gdr_pairs(host, &t, &ctx);
    GdrReport {
        names_moved: topo::moved_names(&t),
        not_in_rdma: t.nics_not_in_rdma.clone(),
        gpus_not_in_nvml: t.gpus_not_in_nvml.clone(),
        gpus_without_driver: t.gpus_without_driver.clone(),
        gpus,
        nics,
        nccl_net_gdr_level,
        peer_memory: peer,
        dmabuf,
        iommu,
        bridges,
        pairs,
        notes,
    }
}

/// The GPUs as the gdr report lists them (BAR1 from NVML, the IOMMU group from sysfs).
fn gdr_gpus(host: &Host, t: &topo::TopoReport) -> Vec<GdrDevice> {
    let nvml = host.nvml().facts();
    t
        .gpus
        .iter()
        .map(|g| GdrDevice {
            label: g.label.clone(),
            name: g.name.clone(),
            pci_bus_id: g.pci_bus_id.clone(),
            bar1_total_bytes: nvml.and_then(|f| {
                f.gpus
                    .iter()
                    .find(|x| x.pci_bus_id == g.pci_bus_id)
                    .and_then(|x| x.bar1_total_bytes)
            }),
            iommu_group: kernel::read_iommu_group(host, &g.pci_bus_id),
            nccl_uses: None,
            nccl_use_rule: None,
        })
        .collect()
}

/// The RDMA NICs, with whether NCCL opens them and why.
fn gdr_nics(host: &Host, t: &topo::TopoReport, ib_use: &crate::nccl::settings::IbUse) -> Vec<GdrDevice> {
    t
        .nics
        .iter()
        .map(|n| {
            let (uses, rule) = nic_use(host, ib_use, &n.ibdev);
            GdrDevice {
                label: n.label.clone(),
                name: Some(n.ibdev.clone()),
                pci_bus_id: n.pci.pci_bus_id.clone().unwrap_or_default(),
                bar1_total_bytes: None,
                iommu_group: n
                    .pci
                    .pci_bus_id
                    .as_deref()
                    .and_then(|b| kernel::read_iommu_group(host, b)),
                nccl_uses: Some(uses),
                nccl_use_rule: Some(rule),
            }
        })
        .collect()
}

/// The note for a host where NCCL opens no RDMA port, grouped by reason
/// ("NCCL_IB_DISABLE=1: mlx5_0 mlx5_1", not one line per device).
fn none_opened(nics: &[GdrDevice]) -> String {
    let mut by_rule: Vec<(&str, Vec<&str>)> = Vec::new();
    for n in nics {
        let (Some(name), Some(rule)) = (n.name.as_deref(), n.nccl_use_rule.as_deref()) else {
            continue;
        };
        match by_rule.iter_mut().find(|(r, _)| *r == rule) {
            Some((_, names)) => names.push(name),
            None => by_rule.push((rule, vec![name])),
        }
    }
    let why = by_rule
        .iter()
        .map(|(rule, names)| format!("{rule}: {}", names.join(" ")))
        .collect::<Vec<_>>()
        .join("; ");
    format!(
        "NCCL opens none of this host's RDMA ports ({why}): it uses sockets, and GPUDirect RDMA does not apply"
    )
}

/// What every pair's verdict reads: the GDR level, peer memory, DMA-BUF, the NICs NCCL opens.
struct PairCtx<'a> {
    level: PathType,
    peer: &'a PeerMemory,
    dmabuf: &'a DmaBuf,
    opened: &'a [bool],
}

/// Every GPU-NIC pair: NCCL's path type, whether it is the GPU's nearest NIC that NCCL
/// opens, the GDR verdict and ACS on the bridges between them (each bridge read once).
fn gdr_pairs(host: &Host, t: &topo::TopoReport, x: &PairCtx) -> (Vec<GdrPair>, Vec<BridgeAcs>) {
    let nccl_uses = |k: usize| x.opened.get(k) == Some(&true);
    let ng = t.gpus.len();
    let mut bridges: Vec<BridgeAcs> = Vec::new();
    let mut pairs = Vec::new();
    for (i, g) in t.gpus.iter().enumerate() {
        let paths: Vec<Option<PathType>> = (0..t.nics.len())
            .map(|k| {
                t.nccl_matrix
                    .get(i)
                    .and_then(|r| r.get(ng + k))
                    .and_then(|c| PathType::from_name(c))
            })
            .collect();
        // NCCL's nearest among the NICs it opens (NCCL_IB_HCA and port state decide).
        let best = paths
            .iter()
            .enumerate()
            .filter(|(k, _)| nccl_uses(*k))
            .filter_map(|(_, p)| *p)
            .min();
        for (k, n) in t.nics.iter().enumerate() {
            let path = paths[k];
            let between = match path {
                Some(PathType::Pix | PathType::Pxb) => bridges_between(&g.pci, &n.pci),
                _ => Vec::new(),
            };
            let mut redirect = false;
            let mut unknown = false;
            for (bdf, p) in &between {
                if !bridges.iter().any(|b| &b.pci_bus_id == bdf) {
                    bridges.push(BridgeAcs {
                        pci_bus_id: bdf.clone(),
                        acs: pcicfg::read_acs(host, p),
                    });
                }
                match bridges.iter().find(|b| &b.pci_bus_id == bdf).map(|b| &b.acs) {
                    Some(Acs::Present { redirect: true, .. }) => redirect = true,
                    Some(Acs::Unknown { .. } | Acs::Unreadable { .. }) => unknown = true,
                    _ => {}
                }
            }
            let verdict = path.map(|p| verdict(p <= x.level, x.peer, x.dmabuf));
            pairs.push(GdrPair {
                gpu: g.label.clone(),
                nic: n.label.clone(),
                subject: pair_subject(&g.label, &n.ibdev),
                path,
                nccl_nearest: nccl_uses(k) && path.is_some() && path == best,
                verdict,
                bridges_between: between.into_iter().map(|(b, _)| b).collect(),
                acs_redirect: redirect,
                acs_unknown: unknown,
            });
        }
    }
    bridges.sort_by(|a, b| a.pci_bus_id.cmp(&b.pci_bus_id));
    (pairs, bridges)
}

/// Whether NCCL opens any port of RDMA device `dev` (the rule `nccl-env` prints per port),
/// and the reason of its first port in words.
fn nic_use(host: &Host, ib_use: &crate::nccl::settings::IbUse, dev: &str) -> (bool, String) {
    let mut uses = Vec::new();
    for port in crate::sysfs::infiniband::list_ports(host, dev) {
        let a = crate::sysfs::infiniband::read_port(host, dev, port);
        let state = a.state.as_ref().map(|s| s.name.as_str());
        uses.push(ib_use.port_use(dev, port, state, a.link_layer.as_deref()));
    }
    let rule = uses
        .iter()
        .find(|(u, _)| *u)
        .or(uses.first())
        .map(|(_, r)| r.clone())
        .unwrap_or_else(|| "no port listed".into());
    (uses.iter().any(|(u, _)| *u), rule)
}

/// What NCCL reaches for one GPU-NIC pair, given whether its path is within
/// NCCL_NET_GDR_LEVEL: peer memory first, then DMA-BUF (net_ib.cc's order).
pub(crate) fn verdict(within_level: bool, peer: &PeerMemory, dmabuf: &DmaBuf) -> GdrVerdict {
    if !within_level {
        GdrVerdict::OffDistance
    } else if peer.nccl_gdr_support {
        GdrVerdict::On
    } else if dmabuf.possible {
        GdrVerdict::DmabufPossible
    } else if !peer.modules_visible || peer.depends_on_version || dmabuf.path == Known::Unknown {
        // Without peer memory, an unknown DMA-BUF prerequisite leaves GDR unknown, not off.
        GdrVerdict::Unknown
    } else {
        GdrVerdict::OffNoPeerMemory
    }
}

/// `GPU0-mlx5_0`: a GPU-NIC pair, the GPU by NVML's label and the NIC by its RDMA device
/// name (`finding::spell`'s one spelling of each end).
pub(crate) fn pair_subject(gpu: &str, rdma_device: &str) -> String {
    format!("{gpu}-{rdma_device}")
}

fn pair_names(v: &[&GdrPair]) -> String {
    v.iter()
        .map(|p| p.subject.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Settings that send a pair's GPUDirect traffic up through the root complex instead of
/// across the switch between GPU and NIC, judged alike: a fail where NCCL would use the
/// pair, a warning elsewhere. The class, from NVIDIA's GPUDirect RDMA guide (CUDA docs,
/// "Design Considerations": GPUDirect RDMA needs physical addresses to look the same to
/// every PCIe device, so an IOMMU must be off or in pass-through, anything but a 1:1
/// translation breaks it) and NCCL's troubleshooting guide ("PCI Access Control Services":
/// ACS redirects all P2P to the root complex, hangs or slows GPUDirect; disable it):
/// * ACS request/completion redirect on a bridge between GPU and NIC (`gdr.acs_redirect`);
/// * the IOMMU translating the DMA of either end: group type DMA, DMA-FQ or DMA-SQ
///   (`gdr.iommu_translation`; `iommu=pt` gives `identity`).
pub(crate) fn detour_severity(used_by_nccl: bool) -> Severity {
    if used_by_nccl { Severity::Fail } else { Severity::Warn }
}

/// The DMA-translating IOMMU group type of either end of a pair (the GPU's first), if any.
pub(crate) fn translated_type(r: &GdrReport, pair: &GdrPair) -> Option<String> {
    let of = |label: &str, list: &[GdrDevice]| {
        list.iter()
            .find(|d| d.label == label)
            .and_then(|d| d.iommu_group.as_ref())
            .and_then(|g| g.r#type.clone())
            .filter(|t| kernel::is_translated(t))
    };
    of(&pair.gpu, &r.gpus).or_else(|| of(&pair.nic, &r.nics))
}

/// The NICs nearer to a pair's GPU than the pair's own NIC that NCCL does not open (a
/// port down, or left out by NCCL_IB_HCA): why NCCL took the farther one. RDMA names.
pub(crate) fn nearer_nics_not_opened(r: &GdrReport, pair: &GdrPair) -> Vec<String> {
    let Some(path) = pair.path else {
        return Vec::new();
    };
    r.pairs
        .iter()
        .filter(|p| p.gpu == pair.gpu && p.path.is_some_and(|q| q < path))
        .filter_map(|p| r.nics.iter().find(|n| n.label == p.nic))
        .filter(|n| n.nccl_uses == Some(false))
        .filter_map(|n| n.name.clone())
        .collect()
}

/// What a `gdr` rule reads: the report and the pairs NCCL would use (each GPU's nearest
/// NIC among the ports NCCL opens).
pub struct Gdr<'a> {
    pub r: &'a GdrReport,
    pub used: Vec<&'a GdrPair>,
}

/// A GPUDirect RDMA rule's judge.
pub(crate) type RuleFn = fn(&Gdr<'_>, &mut Vec<Finding>);

/// What keeps GPUDirect RDMA off or slow, each one finding over every pair it concerns.
pub static RULES: &[Rule<RuleFn>] = &[
    Rule {
        ids: &["gdr.nic_not_in_rdma", "gdr.rdma_driver_not_loaded"],
        severity: &[Severity::Unknown],
        about: "a NIC in the PCI tree that registered no RDMA device (topo.nic_not_in_rdma; every NIC of a \
                module that is not loaded in one finding, as topo.rdma_driver_not_loaded): \
                named by its bus ID and netdev; no GPU pair with it is judged",
        judge: gdr_not_in_rdma,
    },
    Rule {
        ids: &["gdr.gpu_not_in_nvml"],
        severity: &[Severity::Unknown],
        about: "a GPU in the PCI tree that NVML does not list (topo.gpu_not_in_nvml): named by \
                its bus ID; no NIC pair with it is judged",
        judge: gdr_gpu_not_in_nvml,
    },
    Rule {
        ids: &["gdr.gpu_driver_not_loaded"],
        severity: &[Severity::Unknown],
        about: "NVIDIA GPUs in the PCI tree that NVIDIA's driver does not drive \
                (topo.gpu_driver_not_loaded): one finding, subject the module; no NIC pair \
                with them is judged",
        judge: gdr_gpu_driver_not_loaded,
    },
    Rule {
        ids: &["gdr.nothing_to_judge"],
        severity: &[Severity::Unknown],
        about: "no GPU, or no RDMA device, showed up, or NCCL opens none of the RDMA ports \
                (NCCL_IB_DISABLE, NCCL_IB_HCA): no GPU-NIC pair to judge, NOT EVALUATED (exit 3)",
        judge: gdr_nothing,
    },
    Rule {
        ids: &["gdr.acs_redirect"],
        severity: &[Severity::Warn, Severity::Fail],
        about: "ReqRedir/CmpltRedir on a switch port between a GPU and a NIC (fail when NCCL \
                would use the pair); fix: setpci ECAP_ACS+0x6.w",
        judge: acs_redirect,
    },
    Rule {
        ids: &["gdr.acs_unknown"],
        severity: &[Severity::Unknown],
        about: "ACS of the ports NCCL's pairs cross is not readable (non-root)",
        judge: acs_unknown,
    },
    Rule {
        ids: &["gdr.peermem_not_loaded"],
        severity: &[Severity::Fail],
        about: "GDR off for pairs NCCL would use: no peer memory, no DMA-BUF",
        judge: peermem_not_loaded,
    },
    Rule {
        ids: &["gdr.unknown"],
        severity: &[Severity::Unknown],
        about: "no peer memory seen and DMA-BUF cannot be told (a prerequisite unreadable, or \
                the NCCL version unknown where versions differ): unknown, not off",
        judge: gdr_unknown,
    },
    Rule {
        ids: &["gdr.off_distance"],
        severity: &[Severity::Warn],
        about: "the nearest NIC is farther than NCCL_NET_GDR_LEVEL",
        judge: off_distance,
    },
    Rule {
        ids: &["gdr.iommu_translation"],
        severity: &[Severity::Warn, Severity::Fail],
        about: "DMA-translating IOMMU groups (DMA, DMA-FQ, DMA-SQ) on GDR pairs (fail when \
                NCCL would use the pair, as ACS redirect: both send GDR through the root complex)",
        judge: iommu_translation,
    },
];

fn gdr_nothing(x: &Gdr, out: &mut Vec<Finding>) {
    use crate::finding::MissingFact;
    let (fact, why) = match (x.r.gpus.is_empty(), x.r.nics.is_empty()) {
        // Neither: the one fact every probe words alike (check lists it once).
        (true, true) => (MissingFact::GpuAndRdma, crate::finding::NO_GPU_NO_RDMA.to_string()),
        (true, false) => (
            MissingFact::Gpu,
            "nothing to judge: no GPU on this host: GPUDirect RDMA does not apply".into(),
        ),
        (false, true) => (
            MissingFact::RdmaDevice,
            "nothing to judge: no RDMA device on this host: GPUDirect RDMA does not apply".into(),
        ),
        // NCCL opens none of the ports (the environment's choice): no pair is judged, which
        // is unknown as the missing devices are, never a pass.
        _ if x.r.nics.iter().all(|n| n.nccl_uses == Some(false)) => {
            let why = format!("nothing to judge: {}", none_opened(&x.r.nics));
            out.push(crate::finding::nothing_to_judge("gdr", "host", None, why));
            return;
        }
        _ => return,
    };
    out.push(crate::finding::nothing_to_judge("gdr", "host", Some(fact), why));
}

fn gdr_not_in_rdma(x: &Gdr, out: &mut Vec<Finding>) {
    let unread = "NCCL cannot open it, so no GPU's GPUDirect RDMA pair with it is judged";
    topo::unlisted_findings("gdr", unread, &x.r.not_in_rdma, out);
}

/// A GPU NVML lost has no pairs: say so, by its bus ID as topo names it, so its absence
/// from the pairs is never read as nothing wrong.
fn gdr_gpu_not_in_nvml(x: &Gdr, out: &mut Vec<Finding>) {
    for g in &x.r.gpus_not_in_nvml {
        out.push(
            Finding::new(
                "gdr.gpu_not_in_nvml",
                Severity::Unknown,
                &g.pci_bus_id,
                format!(
                    "not evaluated: the GPU at {} is in the PCI tree but NVML does not list it: CUDA and NCCL cannot use it, so no GPUDirect RDMA pair of it is judged",
                    g.pci_bus_id
                ),
            )
            .evidence("pci_bus_id", g.pci_bus_id.as_str())
            .fix(format!("see `fabprobe topo`'s topo.gpu_not_in_nvml {} for why and the fix", g.pci_bus_id)),
        );
    }
}

fn gdr_gpu_driver_not_loaded(x: &Gdr, out: &mut Vec<Finding>) {
    let g = &x.r.gpus_without_driver;
    if g.is_empty() {
        return;
    }
    let ids: Vec<&str> = g.iter().map(|x| x.pci_bus_id.as_str()).collect();
    let count = crate::finding::spell::count(g.len(), "NVIDIA GPU", "NVIDIA GPUs");
    out.push(
        Finding::new(
            "gdr.gpu_driver_not_loaded",
            Severity::Unknown,
            "nvidia",
            format!(
                "not evaluated: {count} in the PCI tree and NVIDIA's driver drives none of them: CUDA and NCCL cannot use them, so no GPUDirect RDMA pair of them is judged"
            ),
        )
        .evidence("gpus", ids.join(" "))
        .fix("see `fabprobe topo`'s topo.gpu_driver_not_loaded nvidia for why and the fix"),
    );
}

/// Judge GPUDirect RDMA by [`RULES`].
pub(crate) fn findings(r: &GdrReport) -> Vec<Finding> {
    let x = Gdr {
        r,
        used: r.pairs.iter().filter(|p| p.nccl_nearest).collect(),
    };
    let mut out = Vec::new();
    judge_each(RULES, |j| Some(*j), &x, &mut out);
    topo::say_moved(&mut out, &r.names_moved);
    out
}

fn acs_redirect(x: &Gdr, out: &mut Vec<Finding>) {
    let r = x.r;
    // ACS redirect on bridges between GPUs and their NICs: one finding, every bridge named.
    let redirecting: Vec<(&BridgeAcs, u16, &str)> = x.r
        .bridges
        .iter()
        .filter_map(|b| match &b.acs {
            Acs::Present {
                ctrl,
                ctrl_text,
                redirect: true,
                ..
            } => Some((b, *ctrl, ctrl_text.as_str())),
            _ => None,
        })
        .collect();
    if !redirecting.is_empty() {
        let affected: Vec<&GdrPair> = r.pairs.iter().filter(|p| p.acs_redirect).collect();
        let used_here = affected.iter().any(|p| p.nccl_nearest);
        // Only the two redirect bits change (setpci's `value:mask`), so one command serves
        // every bridge whatever else its control word holds; many bridges are found on the
        // host by class (PCI bridge, 0604) rather than pasted as a list of addresses.
        let write = format!("setpci -s $b ECAP_ACS+0x6.w=0:{:x}", pcicfg::ACS_REDIRECT);
        let ids: Vec<&str> = redirecting.iter().map(|(b, _, _)| b.pci_bus_id.as_str()).collect();
        let cmds: Vec<String> = vec![match ids.len() {
            1 => write.replace("$b", ids[0]),
            2..=4 => format!("for b in {}; do {write}; done", ids.join(" ")),
            _ => format!("for b in $(lspci -Dd ::0604 | cut -d' ' -f1); do {write}; done"),
        }];
        let bridges: Vec<&str> = redirecting
            .iter()
            .map(|(b, _, _)| b.pci_bus_id.as_str())
            .collect();
        out.push(
            Finding::new(
                "gdr.acs_redirect",
                detour_severity(used_here),
                pair_names(&affected),
                format!(
                    "ACS request/completion redirect is on for {} between these GPUs and NICs: peer-to-peer traffic goes up to the root complex (slow, or IBV_WC_LOC_PROT_ERR)",
                    crate::finding::spell::count(redirecting.len(), "PCIe switch port", "PCIe switch ports")
                ),
            )
            .evidence("bridges", bridges.join(" "))
            .evidence("acs_ctl", redirecting[0].2.to_string())
            .evidence("acs_ctl_hex", format!("0x{:04x}", redirecting[0].1))
            .fix(format!(
                "as root: `{}` (clears ReqRedir/CmpltRedir{}; it resets at reboot: disable ACS in the BIOS, or run it from a boot-time unit; Linux sets ACS on switch ports when the IOMMU is on)",
                cmds.join("; "),
                if ids.len() > 4 { " on every PCIe bridge, the ones listed in bridges among them" } else { "" }
            )),
        );
    }
}

fn acs_unknown(x: &Gdr, out: &mut Vec<Finding>) {
    // ACS not readable for bridges NCCL's pairs cross.
    let unknown: Vec<&GdrPair> = x.used.iter().copied().filter(|p| p.acs_unknown).collect();
    if !unknown.is_empty() {
        out.push(
            Finding::new(
                "gdr.acs_unknown",
                Severity::Unknown,
                pair_names(&unknown),
                "ACS of the switch ports between these GPUs and NICs is unknown: their config space could not be read past 64 bytes (only root can), or the snapshot lacks it",
            )
            .fix("run `sudo fabprobe gdr` (or capture the snapshot as root)"),
        );
    }
}

fn peermem_not_loaded(x: &Gdr, out: &mut Vec<Finding>) {
    let r = x.r;
    let p = &r.peer_memory;
    let off_peer: Vec<&GdrPair> = x.used
        .iter()
        .copied()
        .filter(|x| x.verdict == Some(GdrVerdict::OffNoPeerMemory))
        .collect();
    // Peer memory: not loaded (with or without the module on disk).
    if !off_peer.is_empty() {
        let (msg, fix) = if !p.peer_memory_api {
            (
                format!(
                    "no peer-memory client and no DMA-BUF path: GPUDirect RDMA is off for {} pairs NCCL would use; ib_core has no peer-memory API (inbox driver), so nvidia-peermem cannot load (modprobe says \"Invalid argument\")",
                    off_peer.len()
                ),
                "use DMA-BUF instead: the NVIDIA open kernel module, kernel >= 5.12, rdma-core >= 34 (NCCL uses it by default, NCCL_DMABUF_ENABLE=1); or install MLNX_OFED/DOCA-OFED and `modprobe nvidia-peermem`".to_string(),
            )
        } else if p.nvidia_peermem_module_file.is_some() {
            (
                format!(
                    "nvidia-peermem is installed but not loaded: GPUDirect RDMA is off for {} pairs NCCL would use",
                    off_peer.len()
                ),
                "`modprobe nvidia-peermem`, and load it at boot: `echo nvidia-peermem > /etc/modules-load.d/nvidia-peermem.conf`".to_string(),
            )
        } else {
            (
                format!(
                    "no peer-memory client (nvidia-peermem not loaded, none of NCCL's memory_peers paths exist) and no DMA-BUF path: GPUDirect RDMA is off for {} pairs NCCL would use",
                    off_peer.len()
                ),
                "`modprobe nvidia-peermem` (it ships with the NVIDIA driver), or meet DMA-BUF's prerequisites (open kernel module, kernel >= 5.12, rdma-core >= 34)".to_string(),
            )
        };
        let fix = if r.dmabuf.nccl_dmabuf_enable {
            fix
        } else {
            format!("NCCL_DMABUF_ENABLE=0 keeps NCCL off DMA-BUF: unset it (`nccl-env` says where it is set) if the prerequisites are met; or {fix}")
        };
        let mut f = Finding::new(
            "gdr.peermem_not_loaded",
            Severity::Fail,
            pair_names(&off_peer),
            msg,
        )
        .evidence("nvidia_peermem_loaded", p.nvidia_peermem_loaded)
        .evidence("peer_memory_api", p.peer_memory_api)
        .evidence("dmabuf_possible", r.dmabuf.possible)
        .fix(fix);
        if let Some(m) = &p.nvidia_peermem_module_file {
            f = f.evidence("module_file", m.clone());
        }
        out.push(f);
    }
}

fn gdr_unknown(x: &Gdr, out: &mut Vec<Finding>) {
    let r = x.r;
    // No peer memory, and DMA-BUF cannot be told: unknown, not off.
    let unknown_gdr: Vec<&GdrPair> = x.used
        .iter()
        .copied()
        .filter(|x| x.verdict == Some(GdrVerdict::Unknown))
        .collect();
    if !unknown_gdr.is_empty() {
        out.push(
            Finding::new(
                "gdr.unknown",
                Severity::Unknown,
                pair_names(&unknown_gdr),
                format!(
                    "GPUDirect RDMA is unknown for {} pairs NCCL would use: no peer-memory client seen{}",
                    unknown_gdr.len(),
                    unknown_why(r)
                ),
            )
            .evidence("dmabuf_path", r.dmabuf.path.as_str())
            .evidence("dmabuf_unknown", r.dmabuf.unknown.join(", "))
            .fix(unknown_fix(r)),
        );
    }
}

/// The fix for pairs off by distance with no nearer NIC left out: a level set by hand below
/// NCCL's default that would cover the path is undone (as `nccl-env` says it); else the
/// level that forces GDR over the path.
fn off_distance_fix(l: &GdrLevel, worst: PathType) -> String {
    let default_covers = l
        .default_name
        .as_deref()
        .and_then(level_as_path_type)
        .filter(|d| *d >= worst);
    match (default_covers, &l.default_name) {
        (Some(_), Some(d)) => format!(
            "unset NCCL_NET_GDR_LEVEL ({}; NCCL's default, {d}, covers these paths), or set it to {}",
            l.source,
            worst.as_str()
        ),
        _ => format!(
            "a NIC under the same PCIe switch as each GPU gives GDR; to force it over this path set NCCL_NET_GDR_LEVEL={} (measure: it can be slower than staging){}",
            worst.as_str(),
            match &l.raw {
                Some(_) => format!(" (now {})", l.source),
                None => String::new(),
            }
        ),
    }
}

fn off_distance(x: &Gdr, out: &mut Vec<Finding>) {
    let r = x.r;
    // GDR off by distance for pairs NCCL would use, one finding per reason: pairs NCCL took
    // because it does not open a nearer NIC apart from those the level alone turns off.
    let far: Vec<&GdrPair> = x
        .used
        .iter()
        .copied()
        .filter(|x| x.verdict == Some(GdrVerdict::OffDistance))
        .collect();
    let (passed_over, alone): (Vec<&GdrPair>, Vec<&GdrPair>) = far
        .into_iter()
        .partition(|p| !nearer_nics_not_opened(r, p).is_empty());
    for group in [passed_over, alone].iter().filter(|g| !g.is_empty()) {
        let mut nearer: Vec<String> = group.iter().flat_map(|p| nearer_nics_not_opened(r, p)).collect();
        nearer.sort();
        nearer.dedup();
        out.push(off_distance_finding(r, group, &nearer));
    }
}

/// One `gdr.off_distance` finding over `far`, the pairs whose nearer NICs `nearer` NCCL
/// does not open (none: the level is what turns them off).
fn off_distance_finding(r: &GdrReport, far: &[&GdrPair], nearer: &[String]) -> Finding {
    let worst = far.iter().filter_map(|x| x.path).max().unwrap_or(PathType::Sys);
    let f = Finding::new(
        "gdr.off_distance",
        Severity::Warn,
        pair_names(far),
        format!(
            "the nearest NIC of these GPUs is {} away, farther than NCCL_NET_GDR_LEVEL={} ({}): NCCL stages network traffic through host memory",
            worst.as_str(),
            r.nccl_net_gdr_level.name,
            r.nccl_net_gdr_level.source
        ),
    )
    .evidence("path", worst.as_str());
    // A nearer NIC NCCL does not open is why it took this one: that is the fix, not the level.
    match nearer.is_empty() {
        true => f.fix(off_distance_fix(&r.nccl_net_gdr_level, worst)),
        false => f.evidence("nearer_nics_not_opened", nearer.join(" ")).fix(format!(
            "NCCL does not open the nearer {} {} (a port not ACTIVE, or left out of NCCL_IB_HCA): bring the port up (`fabprobe links`) or name it in NCCL_IB_HCA",
            if nearer.len() == 1 { "NIC" } else { "NICs" },
            nearer.join(", ")
        )),
    }
}

fn iommu_translation(x: &Gdr, out: &mut Vec<Finding>) {
    let r = x.r;
    // IOMMU translating DMA on a pair within NCCL's GDR distance (whether peer memory is
    // there yet or not: fixing that next would run into this), judged as ACS redirect is.
    let tr: Vec<&GdrPair> = r
        .pairs
        .iter()
        .filter(|p| p.verdict.is_some_and(|v| v != GdrVerdict::OffDistance))
        .filter(|p| translated_type(r, p).is_some())
        .collect();
    if let Some(first) = tr.first() {
        let t = translated_type(r, first).unwrap_or_default();
        let used_here = tr.iter().any(|p| p.nccl_nearest);
        out.push(
            Finding::new(
                "gdr.iommu_translation",
                detour_severity(used_here),
                pair_names(&tr),
                format!(
                    "the IOMMU translates DMA (group type {t}) for the GPUs and NICs of these pairs: GPUDirect traffic goes through the root complex's IOMMU, which GPUDirect RDMA does not support (slow, or failing)"
                ),
            )
            .evidence("iommu_group_type", t)
            .evidence("cmdline_flags", r.iommu.cmdline_flags.join(" "))
            .fix("boot with `iommu=pt` (Intel: `intel_iommu=on iommu=pt`): add it to GRUB_CMDLINE_LINUX in /etc/default/grub, `update-grub`, reboot"),
        );
    }
}

/// What settles an unknown verdict: the NCCL version when that is what is missing, the
/// live host when files are.
fn unknown_fix(r: &GdrReport) -> String {
    let files = !r.peer_memory.modules_visible || r.dmabuf.path == Known::Unknown;
    let version = "name the NCCL version the job loads: `fabprobe gdr --nccl-version X.Y` (or run with the job's LD_LIBRARY_PATH, where its libnccl.so.2 is found)";
    let live = "run `fabprobe gdr` on the live host (it reads /sys/module, /proc/driver/nvidia/version, the kernel release and the libibverbs link)";
    match (r.peer_memory.depends_on_version, files) {
        (true, false) => version.to_string(),
        (true, true) => format!("{version}; and {live}"),
        _ => live.to_string(),
    }
}

/// Why a pair's verdict is unknown, in words (after "no peer-memory client seen").
fn unknown_why(r: &GdrReport) -> String {
    let mut v = Vec::new();
    if !r.peer_memory.modules_visible {
        v.push("/sys/module is not visible".to_string());
    }
    if r.peer_memory.depends_on_version {
        v.push("the NCCL version is unknown and versions read different peer-memory files here".to_string());
    }
    if r.dmabuf.path == Known::Unknown {
        v.push(format!(
            "DMA-BUF prerequisites unknown: {}",
            r.dmabuf.unknown.join(", ")
        ));
    }
    if v.is_empty() {
        String::new()
    } else {
        format!(" ({})", v.join("; "))
    }
}
