//! `nccl-env`: what NCCL would choose on this host with this environment, each choice with
//! the rule that made it, and a lint of the `NCCL_*` configuration.
//!
//! Rules (NVIDIA/nccl @ 5067397c: `misc/socket.cc`, `transport/net_ib/{init,connect,gdr}.cc`): configuration files and precedence (`param.cc`), the socket
//! interfaces (`nccl::ifname`, already NCCL's), the HCAs and ports (`nccl::hca`), the GID
//! index (`probe::gids`, already NCCL's), GDR per GPU-NIC pair from NCCL's path type against
//! `NCCL_NET_GDR_LEVEL` (`paths.cc`; the kernel side of GDR is `fabprobe gdr`'s), the net
//! plugin (`plugin_open.cc`: `NCCL_NET_PLUGIN`, `libnccl-net-<name>.so`) and the topology file.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::Serialize;

use crate::finding::spell::count as plural;
use crate::finding::{judge_each, Finding, Rule, Severity};
use crate::host::Host;
use crate::nccl::conf::Setting;
use crate::nccl::hca::HcaSpec;
use crate::nccl::settings::{origin_text, NcclSettings};
pub use crate::nccl::settings::{ConfFile, ConfLint};
use crate::nccl::topo::PathType;
use crate::nccl::version::{NcclVersion, LIB_DIRS};
use crate::nccl::{ifname, params};
use crate::probe::{gdr, gids, topo};

/// NCCL's default topology file, read when `NCCL_TOPO_FILE` is unset (`topo.cc`).
pub(crate) const DEFAULT_TOPO_FILE: &str = "/var/run/nvidia-topologyd/virtualTopology.xml";

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NcclEnvReport {
    /// Where the job's environment came from (`shell`, `--env-from PID 1234`, ...).
    pub env_source: String,
    /// The NCCL version whose rules were applied, and how it was found.
    pub nccl_version: NcclVersion,
    /// The configuration files in the order NCCL reads them.
    pub conf_files: Vec<ConfFile>,
    /// Configuration lines NCCL reads differently from what they seem to say.
    pub conf_lints: Vec<ConfLint>,
    /// Every `NCCL_*` value in effect, with where it came from.
    pub settings: Vec<Setting>,
    pub sockets: Sockets,
    pub ib: Ib,
    pub gdr: Gdr,
    pub net_plugin: NetPlugin,
    pub topo_file: TopoFile,
    /// Device names ib_core moved past a NIC that did not register (topo's `moved_names`):
    /// an `NCCL_IB_HCA` written for the full node selects another NIC under them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names_moved: Vec<topo::MovedName>,
    /// NICs the PCI tree shows that registered no RDMA device (topo's `nics_not_in_rdma`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_in_rdma: Vec<topo::NicNotInRdma>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Sockets {
    /// `NCCL_SOCKET_IFNAME` as NCCL reads it (null when unset or ignored).
    pub ifname: Option<String>,
    /// The interfaces NCCL's socket transport would use, in order (the first is the IB
    /// out-of-band one), after `NCCL_SOCKET_FAMILY`.
    pub interfaces: Vec<SocketIface>,
    /// The interface NCCL's bootstrap listens on: the first of `interfaces`, or with
    /// `NCCL_COMM_ID` the one on that address's subnet; null when there is none (NCCL fails).
    pub bootstrap: Option<SocketIface>,
    /// Why the interfaces are unknown (a snapshot without `ifaddrs.json`).
    pub unknown: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SocketIface {
    pub name: String,
    pub addr: String,
    pub rule: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Ib {
    /// `NCCL_IB_DISABLE` parsed (the transport is off when 1).
    pub disabled: bool,
    pub hca: Option<String>,
    pub ports: Vec<IbPort>,
    /// Why nothing is listed (no RDMA devices).
    pub message: Option<String>,
    /// The gids probe's findings on these ports, with NCCL's variables as merged here (the
    /// lint reads them; they are the `gids` report's, not repeated in this one).
    #[serde(skip)]
    pub gid_findings: Vec<Finding>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IbPort {
    pub device: String,
    pub port: u32,
    pub link_layer: Option<String>,
    pub state: Option<String>,
    pub used: bool,
    /// Why the port is used or not.
    pub rule: String,
    pub gid_index: Option<u32>,
    pub gid: Option<String>,
    pub gid_rule: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Gdr {
    /// The level in effect (`PXB` by default).
    pub level: String,
    pub level_rule: String,
    /// Each GPU with each used HCA: NCCL's path type and whether the topology allows GDR.
    pub pairs: Vec<GdrPair>,
    /// The kernel side (peermem, DMA-BUF, ACS) is not judged here.
    pub kernel_support: String,
    /// GPUs whose nearest NIC (of those NCCL could open) `NCCL_IB_HCA` leaves out; the
    /// rule `nccl_env.hca_strands_gpus` reads them.
    #[serde(skip)]
    pub stranded: Vec<Stranded>,
    /// Settings that keep GPUs from GPUDirect RDMA to the nearest NIC NCCL opens for them
    /// ([`GdrStrand`]); the `nccl_env.*_strands_gpus` GDR rules read them.
    #[serde(skip)]
    pub setting_strands: Vec<GdrStrand>,
    /// NCCL_NET_GDR_LEVEL's default here (`P2C`, or `PXB` with NCCL_NET_GDR_C2C=0).
    #[serde(skip)]
    pub default_level: &'static str,
}

/// A setting that keeps GPUs from GPUDirect RDMA to their nearest NIC where the topology
/// and NCCL's defaults give it (`graph/paths.cc` ncclTopoCheckGdr, `init.cc` ncclNetInit):
/// * `NCCL_NET_GDR_LEVEL` below the path to the nearest NIC, which the default reaches;
/// * `NCCL_NET_GDR_READ=0`: no GPUDirect for sends (reads of GPU memory by the NIC), which
///   NCCL's default (-2) gives GPUs of compute capability 8.0 or newer, GPUs with an NVLink
///   peer, and a lone GPU;
/// * `NCCL_NET=Socket` (names match without case): the socket transport, no RDMA at all.
#[derive(Clone, Debug, PartialEq)]
pub struct GdrStrand {
    /// The rule's finding id.
    pub id: &'static str,
    /// The variable.
    pub name: &'static str,
    /// Each GPU it strands: its label, its nearest NIC NCCL opens (RDMA name), the path.
    pub gpus: Vec<(String, String, PathType)>,
}

/// A GPU that `NCCL_IB_HCA` keeps from its nearest NIC: NCCL picks each GPU's NICs by the
/// shortest path type (`ncclTopoGetLocalNet`), so it takes the best of those left.
#[derive(Clone, Debug, PartialEq)]
pub struct Stranded {
    pub gpu: String,
    /// The nearest NICs NCCL could open without `NCCL_IB_HCA`, and their path.
    pub nearest: Vec<String>,
    pub nearest_path: PathType,
    /// The nearest of the NICs it selects (None: none it selects is reachable).
    pub left: Option<(String, PathType)>,
    /// Whether the path left is within NCCL_NET_GDR_LEVEL (GDR stays on over it).
    pub gdr_on: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GdrPair {
    pub gpu: String,
    pub gpu_pci_bus_id: String,
    pub nic: String,
    pub path: String,
    /// The topology gate: the path is within NCCL_NET_GDR_LEVEL.
    pub enabled: bool,
    /// What NCCL reaches with this host's kernel side too (`fabprobe gdr`'s verdict:
    /// `on`, `dmabuf_possible`, `off_distance`, `off_no_peer_memory`, `unknown`).
    pub verdict: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NetPlugin {
    pub requested: Option<String>,
    /// The library names NCCL would dlopen, in order.
    pub tries: Vec<String>,
    /// Where the first of them was found on the library path.
    pub found: Option<String>,
    pub rule: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TopoFile {
    pub path: String,
    pub from_env: bool,
    pub exists: bool,
}

/// Everything that must be known before judging, gathered from the host; NCCL's values
/// come from the settings model.
pub fn probe(host: &Host, nccl: &NcclSettings) -> NcclEnvReport {
    let get = |k: &str| nccl.value(k).map(str::to_string);

    let sockets = sockets(
        host,
        get("NCCL_SOCKET_IFNAME").as_deref(),
        get("NCCL_COMM_ID").as_deref(),
        ifname::Family::parse(get("NCCL_SOCKET_FAMILY").as_deref()),
    );
    let ib = ib_ports(host, nccl);
    let gdr = gdr(host, nccl, &ib);
    let net_plugin = net_plugin(host, get("NCCL_NET_PLUGIN").as_deref());
    let topo_file = match get("NCCL_TOPO_FILE").filter(|s| !s.is_empty()) {
        Some(p) => TopoFile {
            exists: host.exists(&p),
            path: p,
            from_env: true,
        },
        None => TopoFile {
            path: DEFAULT_TOPO_FILE.into(),
            from_env: false,
            exists: host.exists(DEFAULT_TOPO_FILE),
        },
    };
    let (not_in_rdma, names_moved) = topo::probe_unregistered(host);
    NcclEnvReport {
        names_moved,
        not_in_rdma,
        env_source: nccl.env_source.clone(),
        nccl_version: nccl.version.clone(),
        conf_files: nccl.conf_files.clone(),
        conf_lints: nccl.conf_lints.clone(),
        settings: nccl
            .all()
            .filter(|s| s.name.starts_with("NCCL_"))
            .cloned()
            .collect(),
        sockets,
        ib,
        gdr,
        net_plugin,
        topo_file,
    }
}

fn sockets(
    host: &Host,
    spec: Option<&str>,
    comm_id: Option<&str>,
    family: Option<ifname::Family>,
) -> Sockets {
    let ifname = spec
        .filter(|s| ifname::IfSpec::parse(s).is_some())
        .map(str::to_string);
    let row = |c: ifname::Choice| SocketIface {
        name: c.iface.name,
        addr: c.iface.addr.to_string(),
        rule: c.rule,
    };
    match host.ifaddrs() {
        Err(why) => Sockets {
            ifname,
            interfaces: Vec::new(),
            bootstrap: None,
            unknown: Some(why.to_string()),
        },
        Ok(ifs) => {
            let id = comm_id.and_then(|v| ifname::parse_comm_id(v, ifs));
            Sockets {
                ifname,
                interfaces: ifname::select(ifs, spec, id, family)
                    .into_iter()
                    .map(row)
                    .collect(),
                bootstrap: ifname::bootstrap(ifs, spec, id, family).map(row),
                unknown: None,
            }
        }
    }
}

fn ib_ports(host: &Host, nccl: &NcclSettings) -> Ib {
    let ib_use = nccl.ib_use();
    let disabled = ib_use.disabled;
    let hca = ib_use
        .hca
        .as_ref()
        .and(nccl.value("NCCL_IB_HCA"))
        .map(str::to_string);
    let report = gids::probe(host, &nccl.gid_env());
    let ports = report
        .ports
        .iter()
        .map(|p| {
            let (used, rule) =
                ib_use.port_use(&p.device, p.port, p.state.as_deref(), p.link_layer.as_deref());
            let gid = p
                .nccl
                .index
                .and_then(|i| p.entries.iter().find(|e| e.index == i))
                .map(|e| e.gid.full());
            IbPort {
                device: p.device.clone(),
                port: p.port,
                link_layer: p.link_layer.clone(),
                state: p.state.clone(),
                used,
                rule,
                gid_index: p.nccl.index,
                gid,
                gid_rule: p.nccl.reason.clone(),
            }
        })
        .collect();
    Ib {
        disabled,
        hca,
        ports,
        gid_findings: gids::findings(&report),
        message: report.rdma.message,
    }
}

/// GDR per GPU and used HCA, from `fabprobe gdr`'s probe: one decision of path, level,
/// NCCL_IB_HCA and kernel side for both commands.
fn gdr(host: &Host, nccl: &NcclSettings, ib: &Ib) -> Gdr {
    let r = gdr::probe(host, nccl);
    let stranded = stranded(&r, ib);
    let name = |label: &str, list: &[gdr::GdrDevice]| list.iter().find(|d| d.label == label).cloned();
    let pairs = r
        .pairs
        .iter()
        .filter_map(|p| {
            let g = name(&p.gpu, &r.gpus)?;
            let n = name(&p.nic, &r.nics)?;
            if n.nccl_uses != Some(true) {
                return None;
            }
            let enabled = p.path.is_some_and(|x| x <= r.nccl_net_gdr_level.level);
            Some(GdrPair {
                gpu: g.label,
                gpu_pci_bus_id: g.pci_bus_id,
                nic: n.name.unwrap_or(n.label),
                path: p
                    .path
                    .map(|x| x.as_str().to_string())
                    .unwrap_or_else(|| "N/A".into()),
                enabled,
                verdict: p.verdict.map(|v| v.as_str()).unwrap_or("unknown").into(),
            })
        })
        .collect();
    let (default_level, _) = params::net_gdr_level(None, nccl.value("NCCL_NET_GDR_C2C"));
    Gdr {
        level: r.nccl_net_gdr_level.name.clone(),
        level_rule: r.nccl_net_gdr_level.source.clone(),
        pairs,
        kernel_support: kernel_support(&r.peer_memory, &r.dmabuf),
        stranded,
        setting_strands: setting_strands(host, nccl, &r, default_level),
        default_level,
    }
}

/// Each GPU's nearest NIC among those NCCL opens (RDMA name) and the path to it: the pair
/// NCCL would use. GPUs with no such NIC are left out.
fn nearest_opened(r: &gdr::GdrReport) -> Vec<(String, String, PathType)> {
    let opened = |label: &str| r.nics.iter().find(|n| n.label == label && n.nccl_uses == Some(true));
    r.gpus
        .iter()
        .filter_map(|g| {
            let (nic, path) = r
                .pairs
                .iter()
                .filter(|p| p.gpu == g.label)
                .filter_map(|p| Some((opened(&p.nic)?, p.path?)))
                .min_by_key(|(_, path)| *path)?;
            Some((g.label.clone(), nic.name.clone().unwrap_or_default(), path))
        })
        .collect()
}

/// The GDR settings of [`GdrStrand`] that strand GPUs here, each with the GPUs it strands.
fn setting_strands(host: &Host, nccl: &NcclSettings, r: &gdr::GdrReport, default_level: &str) -> Vec<GdrStrand> {
    let near = nearest_opened(r);
    let level = r.nccl_net_gdr_level.level;
    let dflt = crate::nccl::topo::level_as_path_type(default_level).unwrap_or(PathType::Pxb);
    let mut out = Vec::new();
    let mut push = |id, name, gpus: Vec<(String, String, PathType)>| {
        if !gpus.is_empty() {
            out.push(GdrStrand { id, name, gpus });
        }
    };
    let within = |x: &&(String, String, PathType)| x.2 <= level;
    // With the socket transport no RDMA port is used: the level and reads do not apply.
    if nccl.value("NCCL_NET").is_some_and(|v| v.eq_ignore_ascii_case("Socket")) {
        push("nccl_env.net_strands_gpus", "NCCL_NET", near.iter().filter(within).cloned().collect());
        return out;
    }
    if nccl.gdr_level().is_some() {
        let cut: Vec<_> = near.iter().filter(|x| x.2 <= dflt && x.2 > level).cloned().collect();
        push("nccl_env.gdr_level_strands_gpus", "NCCL_NET_GDR_LEVEL", cut);
    }
    let read = nccl.value("NCCL_NET_GDR_READ");
    if read.is_some() && crate::nccl::gid::nccl_param(read, -2) == 0 {
        let t = topo::probe(host);
        let reads_by_default = |label: &str| {
            let Some(g) = t.gpus.iter().find(|g| g.label == label) else {
                return false;
            };
            let nvl_peer = g
                .nvlinks
                .iter()
                .any(|l| l.count > 0 && matches!(l.target_kind.as_str(), "gpu" | "nvswitch"));
            // An unknown compute capability without an NVLink peer: not claimed.
            g.sm.is_some_and(|sm| sm >= 80) || nvl_peer || t.gpus.len() == 1
        };
        let cut: Vec<_> = near.iter().filter(within).filter(|x| reads_by_default(&x.0)).cloned().collect();
        push("nccl_env.gdr_read_strands_gpus", "NCCL_NET_GDR_READ", cut);
    }
    out
}

/// The GPUs `NCCL_IB_HCA` keeps from their nearest NIC. A NIC NCCL could open is one with
/// an ACTIVE port of an InfiniBand or Ethernet link layer (net_ib's init without the list);
/// the list only takes NICs away, so a GPU is stranded when the best path left is longer.
fn stranded(r: &gdr::GdrReport, ib: &Ib) -> Vec<Stranded> {
    // A list that selects nothing is `hca_matches_nothing`'s cause, not this one's.
    if ib.disabled || ib.hca.is_none() || !ib.ports.iter().any(|p| p.used) {
        return Vec::new();
    }
    let openable = |name: &str| {
        ib.ports.iter().any(|p| {
            p.device == name
                && p.state.as_deref() == Some("ACTIVE")
                && matches!(p.link_layer.as_deref(), Some("InfiniBand" | "Ethernet"))
        })
    };
    let nic = |label: &str| r.nics.iter().find(|n| n.label == label);
    let mut out = Vec::new();
    for g in &r.gpus {
        // (NIC name, path, selected) for every NIC NCCL could open, with a known path.
        let reach: Vec<(&str, PathType, bool)> = r
            .pairs
            .iter()
            .filter(|p| p.gpu == g.label)
            .filter_map(|p| {
                let n = nic(&p.nic)?;
                let name = n.name.as_deref()?;
                openable(name).then_some((name, p.path?, n.nccl_uses == Some(true)))
            })
            .collect();
        let Some(best) = reach.iter().map(|x| x.1).min() else {
            continue;
        };
        let left = reach.iter().filter(|x| x.2).min_by_key(|x| x.1);
        if left.is_some_and(|l| l.1 <= best) {
            continue;
        }
        out.push(Stranded {
            gpu: g.label.clone(),
            nearest: reach
                .iter()
                .filter(|x| x.1 == best)
                .map(|x| x.0.to_string())
                .collect(),
            nearest_path: best,
            left: left.map(|l| (l.0.to_string(), l.1)),
            gdr_on: left.is_some_and(|l| l.1 <= r.nccl_net_gdr_level.level),
        });
    }
    out
}

/// One line on the kernel side of GDR, as `fabprobe gdr` reads it (ACS and IOMMU, which
/// NCCL does not check, stay `fabprobe gdr`'s).
fn kernel_support(peer: &gdr::PeerMemory, dmabuf: &gdr::DmaBuf) -> String {
    let peer_s = if peer.nccl_gdr_support {
        let at = peer
            .paths
            .iter()
            .find(|p| p.exists)
            .map(|p| p.path.as_str())
            .unwrap_or("-");
        format!("peer memory found ({at})")
    } else if !peer.modules_visible {
        "peer memory unknown (no /sys/module)".to_string()
    } else if peer.depends_on_version {
        "peer memory depends on the NCCL version (unknown: give --nccl-version)".to_string()
    } else {
        "no peer-memory client".to_string()
    };
    let dmabuf_s = format!("DMA-BUF {}", dmabuf.state_text());
    format!("{peer_s}; {dmabuf_s}; ACS and IOMMU: see `fabprobe gdr`")
}

/// What NCCL dlopens for one `NCCL_NET_PLUGIN` entry (`plugin_open.cc`): the name as
/// given, then `libnccl-net-NAME.so` unless the name has a `/` or already is `lib*.so`.
fn plugin_names(name: &str) -> Vec<String> {
    let mut out = vec![name.to_string()];
    let full = name.starts_with("lib") && name.len() >= 3 && name.ends_with(".so");
    if !name.contains('/') && !full {
        out.push(format!("libnccl-net-{name}.so"));
    }
    out
}

/// `NCCL_NET_PLUGIN` as `initPluginLibsOnceFunc` (`plugin/net.cc`) reads it: `none` (any
/// case) or an empty value loads no plugin; otherwise a comma-separated list, each entry
/// tried in order ([`plugin_names`]), the first that loads wins; unset: `libnccl-net.so`.
fn net_plugin_tries(requested: Option<&str>) -> (Vec<String>, String) {
    match requested {
        None => (
            vec!["libnccl-net.so".to_string()],
            "default: libnccl-net.so".to_string(),
        ),
        Some(r) if r.is_empty() || r.eq_ignore_ascii_case("none") => (
            Vec::new(),
            format!("NCCL_NET_PLUGIN={r:?}: no plugin, internal IB/Socket"),
        ),
        Some(r) => {
            let tries: Vec<String> = r
                .split(',')
                .filter(|e| !e.is_empty())
                .flat_map(plugin_names)
                .collect();
            let rule = format!("NCCL_NET_PLUGIN={r}: {}, the first found", tries.join(", then "));
            (tries, rule)
        }
    }
}

fn net_plugin(host: &Host, requested: Option<&str>) -> NetPlugin {
    let (tries, rule) = net_plugin_tries(requested);
    let requested = requested.map(str::to_string);
    let mut dirs: Vec<String> = host
        .env_var("LD_LIBRARY_PATH")
        .unwrap_or("")
        .split(':')
        .filter(|d| !d.is_empty())
        .map(str::to_string)
        .collect();
    dirs.extend(LIB_DIRS.iter().map(|d| d.to_string()));
    let mut found = None;
    'outer: for t in &tries {
        if t.contains('/') {
            if host.exists(t) {
                found = Some(t.clone());
                break;
            }
            continue;
        }
        for d in &dirs {
            let p = format!("{}/{t}", d.trim_end_matches('/'));
            if host.exists(&p) {
                found = Some(p);
                break 'outer;
            }
        }
    }
    NetPlugin {
        requested,
        tries,
        found,
        rule,
    }
}

fn is_loopback_name(n: &str) -> bool {
    n == "lo" || n.starts_with("lo:")
}

fn link_local(a: &str) -> bool {
    match a.parse::<IpAddr>() {
        Ok(IpAddr::V4(v)) => v.is_link_local(),
        Ok(IpAddr::V6(v)) => (v.segments()[0] & 0xffc0) == 0xfe80,
        Err(_) => false,
    }
}

/// Values NCCL reads from a fixed set of words (case-insensitive, as NCCL's strcasecmp).
const ENUMS: &[(&str, &[&str])] = &[
    (
        "NCCL_DEBUG",
        &["VERSION", "WARN", "INFO", "TRACE", "ABORT", "NONE"],
    ),
    ("NCCL_SOCKET_FAMILY", &["AF_INET", "AF_INET6"]),
    ("NCCL_IB_ADDR_FAMILY", &["AF_INET", "AF_INET6"]),
];

/// Integer ranges outside which NCCL misbehaves, and why.
const RANGES: &[(&str, i64, i64, Severity, &str)] = &[
    (
        "NCCL_IB_TIMEOUT",
        1,
        31,
        Severity::Fail,
        "the QP's local ACK timeout is a 5-bit exponent (4.096 us * 2^t): 0 waits forever and values above 31 do not fit",
    ),
    (
        "NCCL_IB_RETRY_CNT",
        0,
        7,
        Severity::Fail,
        "the QP retry count is a 3-bit field (0-7); larger values do not fit",
    ),
    (
        "NCCL_IB_ROCE_VERSION_NUM",
        1,
        2,
        Severity::Warn,
        "RoCE versions are 1 and 2; no GID matches another number, so NCCL keeps index 0 or the first family match",
    ),
];

/// Judge the report: the lint of every value and the known traps.
/// What an `nccl-env` rule reads: the host (for the topology a rule needs) and the report.
pub struct Env<'a> {
    pub host: &'a Host,
    pub r: &'a NcclEnvReport,
}

/// How an `nccl-env` rule judges: each setting (run setting by setting, where the first
/// setting rule stands in the table), or the whole report once.
pub enum RuleFn {
    Setting(fn(&Env, &Setting, &mut Vec<Finding>)),
    Report(fn(&Env, &mut Vec<Finding>)),
}

/// What NCCL would read otherwise than meant, or what breaks its transport here, in the
/// order the findings are listed.
pub static RULES: &[Rule<RuleFn>] = &[
    Rule {
        ids: &["nccl_env.nic_not_in_rdma", "nccl_env.rdma_driver_not_loaded"],
        severity: &[Severity::Unknown],
        about: "a NIC in the PCI tree that registered no RDMA device (topo.nic_not_in_rdma; every NIC of a \
                module that is not loaded in one finding, as topo.rdma_driver_not_loaded): \
                named by its bus ID and netdev; NCCL_IB_HCA cannot select it",
        judge: RuleFn::Report(nccl_env_not_in_rdma),
    },
    Rule {
        ids: &["nccl_env.nothing_to_judge"],
        severity: &[Severity::Unknown],
        about: "neither an NVIDIA GPU nor an RDMA port showed up (drivers not loaded?): the \
                NCCL settings had nothing to be judged against, NOT EVALUATED (exit 3)",
        judge: RuleFn::Report(nccl_env_nothing),
    },
    Rule {
        ids: &["nccl_env.conf_file_unreadable"],
        severity: &[Severity::Warn],
        about: "NCCL_CONF_FILE names a missing or unreadable file",
        judge: RuleFn::Report(conf_file_unreadable),
    },
    Rule {
        ids: &["nccl_env.conf_line_misread"],
        severity: &[Severity::Warn],
        about: "a configuration line NCCL reads otherwise than it looks: `NCCL_IB_HCA = mlx5_0` \
                sets \"NCCL_IB_HCA \", `X=eth0 # c` the value \"eth0 # c\", a DOS line end keeps \\r",
        judge: RuleFn::Report(conf_line_misread),
    },
    Rule {
        ids: &["nccl_env.unknown_name"],
        severity: &[Severity::Warn],
        about: "an NCCL_* name NCCL does not read (nearest real name)",
        judge: RuleFn::Setting(unknown_name),
    },
    Rule {
        ids: &["nccl_env.bad_value"],
        severity: &[Severity::Warn],
        about: "a value NCCL misreads (no digits: read as 0, not the default; trailing text, \
                an unknown word or level)",
        judge: RuleFn::Setting(bad_value),
    },
    Rule {
        ids: &["nccl_env.out_of_range"],
        severity: &[Severity::Warn, Severity::Fail],
        about: "NCCL_IB_TIMEOUT outside 1-31, NCCL_IB_RETRY_CNT outside 0-7 (fail); \
                NCCL_IB_ROCE_VERSION_NUM not 1 or 2 (warn)",
        judge: RuleFn::Setting(out_of_range),
    },
    Rule {
        ids: &["nccl_env.ifname_ignored"],
        severity: &[Severity::Warn],
        about: "NCCL_SOCKET_IFNAME of one character or empty",
        judge: RuleFn::Setting(ifname_ignored),
    },
    Rule {
        ids: &["nccl_env.comm_id_by_name"],
        severity: &[Severity::Warn],
        about: "NCCL_COMM_ID names a host: NCCL resolves it on each node",
        judge: RuleFn::Report(comm_id_by_name),
    },
    Rule {
        ids: &[
            "nccl_env.no_socket_interface",
            "nccl_env.socket_interface_unusable",
        ],
        severity: &[Severity::Warn, Severity::Fail],
        about: "no interface matches, or NCCL_COMM_ID is on no local subnet: bootstrap fails \
                (fail); lo or a docker/virbr bridge (fail), a link-local address (warn) picked \
                for the bootstrap",
        judge: RuleFn::Report(socket_interface),
    },
    Rule {
        ids: &["nccl_env.hca_prefix_match", "nccl_env.hca_matches_nothing"],
        severity: &[Severity::Warn, Severity::Fail],
        about: "NCCL_IB_HCA without '=' also selects mlx5_10.. for mlx5_1 (warn); \
                NCCL_IB_HCA selects no active port: NCCL falls back to sockets (fail)",
        judge: RuleFn::Report(hcas),
    },
    Rule {
        ids: &["nccl_env.hca_selects_moved_name"],
        severity: &[Severity::Warn, Severity::Fail],
        about: "NCCL_IB_HCA selects a device under a name ib_core moved past a NIC that did not \
                register, and would not under the name it was to have (fail: it picks up that \
                NIC), or the reverse (warn: it leaves that NIC out); every form: prefix, '=', \
                '^', ':port'",
        judge: RuleFn::Report(hca_selects_moved_name),
    },
    Rule {
        ids: &["nccl_env.hca_strands_gpus"],
        severity: &[Severity::Warn, Severity::Fail],
        about: "NCCL_IB_HCA leaves GPUs without their nearest NIC (NCCL picks each GPU's NICs by \
                path type): their traffic takes a longer path; fail when it crosses the CPU \
                interconnect (SYS) and no NVLink peer can relay it (PXN), else warn",
        judge: RuleFn::Report(hca_strands_gpus),
    },
    Rule {
        ids: &[
            "nccl_env.gdr_level_strands_gpus",
            "nccl_env.gdr_read_strands_gpus",
            "nccl_env.net_strands_gpus",
        ],
        severity: &[Severity::Warn],
        about: "a setting keeps GPUs from GPUDirect RDMA to their nearest NIC, which the topology \
                and NCCL's defaults give: NCCL_NET_GDR_LEVEL below that path, NCCL_NET_GDR_READ=0 \
                (sends of GPUs NCCL reads directly by default: compute capability 8.0 or newer, \
                an NVLink peer), NCCL_NET=Socket (no RDMA at all); names the GPUs",
        judge: RuleFn::Report(gdr_settings_strand_gpus),
    },
    Rule {
        ids: &["nccl_env.ib_disabled"],
        severity: &[Severity::Warn],
        about: "NCCL_IB_DISABLE=1 with active RDMA ports",
        judge: RuleFn::Report(ib_disabled),
    },
    Rule {
        ids: &[
            "gids.nccl_gid_index_bad",
            "gids.nccl_gid_unusable",
            "gids.nccl_gid_error",
        ],
        severity: &[Severity::Warn, Severity::Fail],
        about: "NCCL_IB_GID_INDEX (or the automatic choice) on a port NCCL uses points at an \
                empty, link-local or RoCE v1 entry (`gids`' rules)",
        judge: RuleFn::Report(gid_traps),
    },
    Rule {
        ids: &["nccl_env.p2p_disabled_nvlink"],
        severity: &[Severity::Warn],
        about: "NCCL_P2P_DISABLE=1 on a host with NVLink",
        judge: RuleFn::Report(p2p_disabled_nvlink),
    },
    Rule {
        ids: &["nccl_env.gdr_off", "nccl_env.gdr_no_kernel_support"],
        severity: &[Severity::Warn, Severity::Fail],
        about: "a GPU whose every used HCA is beyond NCCL_NET_GDR_LEVEL (warn); close enough \
                but the kernel gives NCCL neither peer memory nor DMA-BUF (fail)",
        judge: RuleFn::Report(gdr_by_topology),
    },
    Rule {
        ids: &["nccl_env.net_plugin_missing"],
        severity: &[Severity::Warn],
        about: "NCCL_NET_PLUGIN names a library that is not found",
        judge: RuleFn::Report(net_plugin_missing),
    },
    Rule {
        ids: &["nccl_env.topo_file_missing"],
        severity: &[Severity::Warn],
        about: "NCCL_TOPO_FILE names a missing file",
        judge: RuleFn::Report(topo_file_missing),
    },
];

fn nccl_env_not_in_rdma(x: &Env, out: &mut Vec<Finding>) {
    let unread = "NCCL lists RDMA devices only, so no NCCL_IB_HCA can select it and NCCL does not use it";
    topo::unlisted_findings("nccl_env", unread, &x.r.not_in_rdma, out);
}

/// Judge the NCCL environment by [`RULES`].
pub fn findings(host: &Host, r: &NcclEnvReport) -> Vec<Finding> {
    let x = Env { host, r };
    let mut f = Vec::new();
    // The settings are judged where the table's first setting rule stands: the rules above
    // it (the conf files) come first, the whole-host ones after.
    let first_setting = RULES
        .iter()
        .position(|r| matches!(r.judge, RuleFn::Setting(_)))
        .unwrap_or(RULES.len());
    let (before, after) = RULES.split_at(first_setting);
    judge_each(before, report_judge, &x, &mut f);
    let env = &x;
    let setting_judge = |j: &RuleFn| match *j {
        RuleFn::Setting(j) => Some(move |s: &Setting, f: &mut Vec<Finding>| j(env, s, f)),
        RuleFn::Report(_) => None,
    };
    for s in &r.settings {
        judge_each(RULES, setting_judge, s, &mut f);
    }
    judge_each(after, report_judge, &x, &mut f);
    topo::say_moved(&mut f, &r.names_moved);
    f
}

fn report_judge(j: &RuleFn) -> Option<fn(&Env, &mut Vec<Finding>)> {
    match j {
        RuleFn::Report(j) => Some(*j),
        RuleFn::Setting(_) => None,
    }
}

/// The GPUs NCCL would see here (NVML's, else the PCI tree's), as `topo` counts them.
/// The GPUs NCCL can use: those of the PCI tree that NVIDIA's driver drives (one with no
/// driver bound is in topo's `gpus` and `gpus_without_driver`).
pub(crate) fn gpu_count(host: &Host) -> usize {
    let t = topo::probe(host);
    t.gpus.len().saturating_sub(t.gpus_without_driver.len())
}

fn nccl_env_nothing(x: &Env, f: &mut Vec<Finding>) {
    if x.r.ib.ports.is_empty() && gpu_count(x.host) == 0 {
        f.push(crate::finding::nothing_to_judge(
            "nccl_env",
            "host",
            Some(crate::finding::MissingFact::GpuAndRdma),
            crate::finding::NO_GPU_NO_RDMA,
        ));
    }
}

fn conf_file_unreadable(x: &Env, f: &mut Vec<Finding>) {
    let r = x.r;
    for c in &r.conf_files {
        if c.role == "NCCL_CONF_FILE" && c.state != "read" {
            f.push(
                Finding::new(
                    "nccl_env.conf_file_unreadable",
                    Severity::Warn,
                    &c.path,
                    format!(
                        "NCCL_CONF_FILE names {} but it is {}; NCCL reads /etc/nccl.conf only",
                        c.path, c.state
                    ),
                )
                .evidence("state", c.state.clone())
                .fix("point NCCL_CONF_FILE at an existing file, or unset it"),
            );
        }
    }
}

fn conf_line_misread(x: &Env, f: &mut Vec<Finding>) {
    let r = x.r;
    for l in &r.conf_lints {
        f.push(
            Finding::new(
                "nccl_env.conf_line_misread",
                Severity::Warn,
                format!("{}:{}", l.file, l.line),
                format!(
                    "{}:{}: NCCL sets {:?}={:?}, not {}={}: {}",
                    l.file,
                    l.line,
                    l.nccl_name,
                    l.nccl_value,
                    l.meant_name,
                    l.meant_value,
                    l.why.join("; ")
                ),
            )
            .evidence("nccl_reads", format!("{}={}", l.nccl_name, l.nccl_value))
            .evidence("meant", format!("{}={}", l.meant_name, l.meant_value))
            .fix(format!(
                "write the line as {}={} (NCCL splits at the first '=' and trims nothing; only lines starting with '#' are comments)",
                l.meant_name, l.meant_value
            )),
        );
    }
}

fn unknown_name(_: &Env, s: &Setting, f: &mut Vec<Finding>) {
    // A name with blanks comes from a misread configuration line, reported apart.
    if params::lookup(&s.name).is_some()
        || params::is_foreign(&s.name)
        || s.name.contains(char::is_whitespace)
    {
        return;
    }
    let from = origin_text(s);
    let near = params::nearest(&s.name);
    let mut x = Finding::new(
        "nccl_env.unknown_name",
        Severity::Warn,
        &s.name,
        match near {
            Some(n) => format!(
                "{} is not a variable NCCL reads (did you mean {n}?); it has no effect",
                s.name
            ),
            None => format!("{} is not a variable NCCL reads; it has no effect", s.name),
        },
    )
    .evidence("value", s.value.clone())
    .evidence("from", from.clone());
    if let Some(n) = near {
        x = x.evidence("nearest", n).fix(format!("rename it to {n}"));
    }
    f.push(x);
}

fn bad_value(_: &Env, s: &Setting, f: &mut Vec<Finding>) {
    let Some(k) = params::lookup(&s.name) else { return };
    if k.is_int_param() {
        let default = k.default;
        match params::parse_int(&s.value) {
            params::IntParse::NoDigits => f.push(
                bad_value_finding(
                    s,
                    format!(
                        "{}={:?} is not a number: NCCL reads it as 0 (strtoll finds no digits and sets no error), not as its default ({default})",
                        s.name, s.value
                    ),
                )
                .evidence("read_as", 0)
                .evidence("default", default)
                .fix(format!("set an integer, or unset {} for the default (NCCL parses it with strtoll: decimal, 0x hex, 0 octal)", s.name)),
            ),
            params::IntParse::OutOfRange => f.push(
                bad_value_finding(
                    s,
                    format!(
                        "{}={:?} overflows a 64-bit integer: NCCL ignores it and uses its default ({default})",
                        s.name, s.value
                    ),
                )
                .evidence("default", default),
            ),
            params::IntParse::Trailing(v) => f.push(
                bad_value_finding(
                    s,
                    format!("{}={:?}: NCCL reads {v} and silently ignores the rest", s.name, s.value),
                )
                .evidence("read_as", v),
            ),
            params::IntParse::Clean(_) => {}
        }
    }
    if let Some((_, words)) = ENUMS.iter().find(|(n, _)| *n == s.name)
        && !words.iter().any(|w| w.eq_ignore_ascii_case(&s.value))
    {
        f.push(bad_value_finding(
            s,
            format!(
                "{}={:?} is not one of {}: NCCL ignores it",
                s.name,
                s.value,
                words.join(", ")
            ),
        ));
    }
    if matches!(s.name.as_str(), "NCCL_NET_GDR_LEVEL" | "NCCL_P2P_LEVEL")
        && params::parse_level(&s.value).is_none()
    {
        f.push(bad_value_finding(
            s,
            format!(
                "{}={:?} is not a level NCCL reads ({} or a number; upper case): NCCL uses its default",
                s.name,
                s.value,
                params::LEVELS.join(" ")
            ),
        ));
    }
}

/// A `nccl_env.bad_value` warning on one setting, with the value and where it came from;
/// each way of misreading adds what NCCL reads instead.
fn bad_value_finding(s: &Setting, message: String) -> Finding {
    Finding::new("nccl_env.bad_value", Severity::Warn, &s.name, message)
        .evidence("value", s.value.clone())
        .evidence("from", origin_text(s))
}

fn out_of_range(_: &Env, s: &Setting, f: &mut Vec<Finding>) {
    let from = origin_text(s);
    let Some(k) = params::lookup(&s.name) else { return };
    if let Some((_, lo, hi, sev, why)) = RANGES.iter().find(|(n, ..)| *n == s.name) {
        let read = match params::parse_int(&s.value) {
            params::IntParse::Clean(v) | params::IntParse::Trailing(v) => Some(v),
            params::IntParse::NoDigits => Some(0),
            params::IntParse::OutOfRange => None,
        };
        if let Some(v) = read
            && (v < *lo || v > *hi)
        {
            f.push(
                Finding::new(
                    "nccl_env.out_of_range",
                    *sev,
                    &s.name,
                    format!("{}={v} is outside {lo}-{hi}: {why}", s.name),
                )
                .evidence("value", s.value.clone())
                .evidence("from", from.clone())
                .fix(format!(
                    "use a value in {lo}-{hi} (NCCL's default is {})",
                    k.default
                )),
            );
        }
    }
}

fn ifname_ignored(_: &Env, s: &Setting, f: &mut Vec<Finding>) {
    let from = origin_text(s);
    if s.name == "NCCL_SOCKET_IFNAME" && s.value.len() <= 1 {
        f.push(
            Finding::new(
                "nccl_env.ifname_ignored",
                Severity::Warn,
                &s.name,
                format!("NCCL_SOCKET_IFNAME={:?} is one character or empty: NCCL ignores it and uses its default order", s.value),
            )
            .evidence("from", from.clone()),
        );
    }
}

fn comm_id_by_name(x: &Env, f: &mut Vec<Finding>) {
    let r = x.r;
    // NCCL_COMM_ID by name: NCCL resolves it on each node (getaddrinfo); fabprobe does not,
    // so which interface the bootstrap takes is not judged here: say so.
    if let Some(s) = r.settings.iter().find(|s| s.name == "NCCL_COMM_ID") {
        let host_part = s.value.rsplit_once(':').map(|(h, _)| h).unwrap_or(&s.value);
        let host_part = host_part.trim_start_matches('[').trim_end_matches(']');
        if !host_part.is_empty() && host_part.parse::<std::net::IpAddr>().is_err() {
            f.push(
                Finding::new(
                    "nccl_env.comm_id_by_name",
                    Severity::Warn,
                    "NCCL_COMM_ID",
                    format!(
                        "NCCL_COMM_ID={} names a host, not an address: NCCL resolves {host_part} on each node and this report does not, so the bootstrap interface shown ignores it",
                        s.value
                    ),
                )
                .evidence("value", s.value.clone())
                .fix(format!("check what it resolves to on every node (`getent ahosts {host_part}`), or set the address itself")),
            );
        }
    }
}

fn socket_interface(x: &Env, f: &mut Vec<Finding>) {
    let r = x.r;
    // Sockets.
    if r.sockets.unknown.is_none() {
        let comm_id = r
            .settings
            .iter()
            .find(|s| s.name == "NCCL_COMM_ID")
            .map(|s| s.value.clone());
        match r.sockets.bootstrap.as_ref() {
            None => f.push(
                Finding::new(
                    "nccl_env.no_socket_interface",
                    Severity::Fail,
                    "sockets",
                    match (&comm_id, &r.sockets.ifname) {
                        (Some(id), _) => format!("NCCL_COMM_ID={id} is on no subnet of this host: NCCL's bootstrap fails (No usable listening interface found)"),
                        (None, Some(s)) => format!("NCCL_SOCKET_IFNAME={s} matches no running interface with an address: NCCL's bootstrap fails"),
                        (None, None) => "no running interface with an address: NCCL's bootstrap fails".to_string(),
                    },
                )
                .fix("set NCCL_SOCKET_IFNAME to the interface the nodes reach each other on (`ip -br addr`)"),
            ),
            Some(i) => {
                let bad = if is_loopback_name(&i.name) {
                    Some((Severity::Fail, "the loopback interface: other nodes cannot reach it"))
                } else if i.name.starts_with("docker") || i.name.starts_with("virbr") {
                    Some((Severity::Fail, "a container bridge: other nodes cannot reach it"))
                } else if link_local(&i.addr) {
                    Some((Severity::Warn, "a link-local address: reachable only on one segment, often not at all"))
                } else {
                    None
                };
                if let Some((sev, why)) = bad {
                    f.push(
                        Finding::new(
                            "nccl_env.socket_interface_unusable",
                            sev,
                            &i.name,
                            format!("NCCL would bootstrap over {} {} ({}): {why}", i.name, i.addr, i.rule),
                        )
                        .evidence("interface", i.name.clone())
                        .evidence("addr", i.addr.clone())
                        .evidence("rule", i.rule.clone())
                        .fix("set NCCL_SOCKET_IFNAME to the interface the nodes reach each other on (`ip -br addr`)"),
                    );
                }
            }
        }
    }
}

fn hcas(x: &Env, f: &mut Vec<Finding>) {
    let r = x.r;
    // HCAs.
    let devices: Vec<String> = {
        let mut d: Vec<String> = r.ib.ports.iter().map(|p| p.device.clone()).collect();
        d.dedup();
        d
    };
    let active: Vec<&IbPort> =
        r.ib.ports
            .iter()
            .filter(|p| p.state.as_deref() == Some("ACTIVE"))
            .collect();
    if let Some(raw) = &r.ib.hca {
        let spec = HcaSpec::parse(raw);
        for (entry, dev) in spec.prefix_surprises(&devices) {
            f.push(
                Finding::new(
                    "nccl_env.hca_prefix_match",
                    Severity::Warn,
                    dev,
                    format!(
                        "NCCL_IB_HCA={raw}: without a leading '=', {entry} is a prefix and also selects {dev}"
                    ),
                )
                .evidence("entry", entry.clone())
                .evidence("also_matches", dev)
                .fix(format!(
                    "write NCCL_IB_HCA={}{} to match exact names",
                    if spec.exclude { "^=" } else { "=" },
                    raw.trim_start_matches('^')
                )),
            );
        }
        if !r.ib.disabled && !active.is_empty() && !r.ib.ports.iter().any(|p| p.used) {
            f.push(
                Finding::new(
                    "nccl_env.hca_matches_nothing",
                    Severity::Fail,
                    "NCCL_IB_HCA",
                    format!(
                        "NCCL_IB_HCA={raw} selects no active port: NCCL falls back to sockets (NET/Socket)"
                    ),
                )
                .evidence(
                    "active_ports",
                    active
                        .iter()
                        .map(|p| crate::finding::spell::port(&p.device, p.port))
                        .collect::<Vec<_>>(),
                )
                .fix("name the active devices (`fabprobe links`), e.g. NCCL_IB_HCA==mlx5_0,mlx5_1"),
            );
        }
    }
}

/// A port whose selection by `spec` a moved name changed: `(moved, port, selected now)`,
/// for each port of a moved device that `spec` selects under its name now and not under
/// the name it was to have, or the reverse. A setting written for the whole node means the
/// names it was to have; NCCL matches the names it has (`ncclIbInitDevices`).
pub(crate) fn moved_selection<'a>(
    spec: &HcaSpec,
    moved: &'a [topo::MovedName],
    ports: &[(String, u32)],
) -> Vec<(&'a topo::MovedName, u32, bool)> {
    let mut out = Vec::new();
    for m in moved {
        for (_, p) in ports.iter().filter(|(d, _)| *d == m.name) {
            let (now, meant) = (spec.selects(&m.name, *p), spec.selects(&m.was_to_be, *p));
            if now != meant {
                out.push((m, *p, now));
            }
        }
    }
    out
}

/// `NCCL_IB_HCA` read with the names ib_core moved: a port it now selects only because a
/// name moved (it picks up a NIC it was not written for), or leaves out only because of it.
fn hca_selects_moved_name(x: &Env, f: &mut Vec<Finding>) {
    let r = x.r;
    let Some(raw) = &r.ib.hca else { return };
    let ports: Vec<(String, u32)> = r.ib.ports.iter().map(|p| (p.device.clone(), p.port)).collect();
    for (m, p, now) in moved_selection(&HcaSpec::parse(raw), &r.names_moved, &ports) {
        let port = crate::finding::spell::port(&m.name, p);
        let (sev, what) = match now {
            true => (Severity::Fail, format!("selects {port}, which is now the NIC at {}", m.pci_bus_id)),
            false => (Severity::Warn, format!("leaves out {port}, the NIC at {}", m.pci_bus_id)),
        };
        f.push(
            Finding::new(
                "nccl_env.hca_selects_moved_name",
                sev,
                &port,
                format!(
                    "NCCL_IB_HCA={raw} {what}: ib_core named it {} past a NIC that did not register ({}); as it was to be {} the setting would {}select it",
                    m.name,
                    m.past.join(", "),
                    m.was_to_be,
                    if now { "not " } else { "" }
                ),
            )
            .evidence("selected_by_moved_name", format!("{} (was to be {})", m.name, m.was_to_be))
            .evidence("pci_bus_id", m.pci_bus_id.as_str())
            .fix("make the NIC that did not register come back (`fabprobe topo`'s topo.nic_not_in_rdma), or write NCCL_IB_HCA for the names the devices have now (`fabprobe links`)"),
        );
    }
}

/// One finding for every GPU `NCCL_IB_HCA` strands (one cause: the list), naming each GPU,
/// the NIC it loses and the one it is left with.
fn hca_strands_gpus(x: &Env, f: &mut Vec<Finding>) {
    let r = x.r;
    let st = &r.gdr.stranded;
    let (Some(raw), false) = (&r.ib.hca, st.is_empty()) else {
        return;
    };
    // With NVLink, NCCL can relay a GPU's traffic through a peer's NIC (PXN).
    let nvlink = topo::probe(x.host)
        .gpus
        .iter()
        .any(|g| g.nvlinks.iter().any(|l| l.count > 0));
    let crosses_sys = st
        .iter()
        .any(|s| s.left.as_ref().is_none_or(|l| l.1 == PathType::Sys));
    let sev = if crosses_sys && !nvlink {
        Severity::Fail
    } else {
        Severity::Warn
    };
    let gpus: Vec<&str> = st.iter().map(|s| s.gpu.as_str()).collect();
    let each: Vec<String> = st
        .iter()
        .map(|s| {
            let left = match &s.left {
                Some((n, p)) => format!("{n} {}{}", p.as_str(), if s.gdr_on { "" } else { " without GDR" }),
                None => "no NIC".into(),
            };
            format!(
                "{}: {} {} -> {left}",
                s.gpu,
                s.nearest.join("/"),
                s.nearest_path.as_str()
            )
        })
        .collect();
    let relay = if nvlink {
        "; NCCL may relay it over NVLink through a peer GPU's NIC (PXN), sharing that NIC"
    } else {
        ""
    };
    let mut keep: Vec<String> =
        r.ib.ports
            .iter()
            .filter(|p| p.used)
            .map(|p| p.device.clone())
            .collect();
    keep.extend(st.iter().flat_map(|s| s.nearest.iter().cloned()));
    keep.sort();
    keep.dedup();
    f.push(
        Finding::new(
            "nccl_env.hca_strands_gpus",
            sev,
            gpus.join(", "),
            format!(
                "NCCL_IB_HCA={raw} leaves {} without {} nearest NIC: {} network traffic takes a longer path{relay}",
                plural(gpus.len(), "GPU", "GPUs"),
                if gpus.len() == 1 { "its" } else { "their" },
                if gpus.len() == 1 { "its" } else { "their" },
            ),
        )
        .evidence("from", r.settings.iter().find(|s| s.name == "NCCL_IB_HCA").map(origin_text).unwrap_or_default())
        .evidence("nearest_to_left", each)
        .fix(format!("select each GPU's nearest NIC too, e.g. NCCL_IB_HCA=={}", keep.join(","))),
    );
}

/// One finding per GDR setting that strands GPUs ([`GdrStrand`]), naming them, their
/// nearest NIC and where the setting comes from.
fn gdr_settings_strand_gpus(x: &Env, f: &mut Vec<Finding>) {
    let r = x.r;
    for s in &r.gdr.setting_strands {
        let Some(set) = r.settings.iter().find(|v| v.name == s.name) else {
            continue;
        };
        let gpus: Vec<&str> = s.gpus.iter().map(|g| g.0.as_str()).collect();
        let (what, fix) = strand_words(s, &r.gdr);
        f.push(
            Finding::new(
                s.id,
                Severity::Warn,
                gpus.join(", "),
                format!("{}={} {what}", s.name, set.value),
            )
            .evidence("from", origin_text(set))
            .evidence(
                "nearest_nic",
                s.gpus
                    .iter()
                    .map(|(g, n, p)| format!("{g}: {n} {}", p.as_str()))
                    .collect::<Vec<_>>(),
            )
            .fix(fix),
        );
    }
}

/// What a stranding GDR setting does to its GPUs, and the fix, in words.
fn strand_words(s: &GdrStrand, g: &Gdr) -> (String, String) {
    let n = s.gpus.len();
    let (gpus, its) = (plural(n, "GPU", "GPUs"), if n == 1 { "its" } else { "their" });
    let worst = s.gpus.iter().map(|x| x.2).max().unwrap_or(PathType::Sys).as_str();
    match s.name {
        "NCCL_NET_GDR_LEVEL" => (
            format!(
                "leaves {gpus} without GPUDirect RDMA to {its} nearest NIC ({worst} or nearer, within NCCL's default level {}): NCCL stages {its} network traffic through host memory",
                g.default_level
            ),
            format!(
                "unset NCCL_NET_GDR_LEVEL (NCCL's default, {}, covers these paths), or set it to {worst}",
                g.default_level
            ),
        ),
        "NCCL_NET_GDR_READ" => (
            format!(
                "turns GPUDirect RDMA off for the sends of {gpus}: the NIC no longer reads {its} memory directly, sends are staged through host memory (receives keep GPUDirect RDMA)"
            ),
            "unset NCCL_NET_GDR_READ: by default NCCL sends straight from the memory of these GPUs (compute capability 8.0 or newer, or an NVLink peer)".to_string(),
        ),
        _ => (
            format!(
                "makes NCCL use its TCP socket transport: {gpus} lose RDMA and GPUDirect RDMA to {its} nearest NIC"
            ),
            "unset NCCL_NET (NCCL takes its IB transport when an RDMA port is active), or set NCCL_NET=IB".to_string(),
        ),
    }
}

fn ib_disabled(x: &Env, f: &mut Vec<Finding>) {
    let r = x.r;
    let get = |k: &str| r.settings.iter().find(|s| s.name == k);
    let active: Vec<&IbPort> =
        r.ib.ports
            .iter()
            .filter(|p| p.state.as_deref() == Some("ACTIVE"))
            .collect();
    if r.ib.disabled && !active.is_empty() {
        let s = get("NCCL_IB_DISABLE");
        f.push(
            Finding::new(
                "nccl_env.ib_disabled",
                Severity::Warn,
                "NCCL_IB_DISABLE",
                format!(
                    "NCCL_IB_DISABLE=1 with {}: NCCL uses TCP sockets, typically several times slower",
                    crate::finding::spell::count(active.len(), "active RDMA port", "active RDMA ports")
                ),
            )
            .evidence("from", s.map(origin_text).unwrap_or_default())
            .evidence(
                "active_ports",
                active
                    .iter()
                    .map(|p| crate::finding::spell::port(&p.device, p.port))
                    .collect::<Vec<_>>(),
            )
            .fix("unset NCCL_IB_DISABLE unless sockets are intended"),
        );
    }
}

fn gid_traps(x: &Env, f: &mut Vec<Finding>) {
    let r = x.r;
    // GID traps, judged by the gids probe on the ports NCCL uses.
    for g in r.ib.gid_findings.iter().cloned() {
        let used =
            r.ib.ports
                .iter()
                .any(|p| p.used && g.subject == crate::finding::spell::port(&p.device, p.port));
        if used
            && matches!(
                g.id.as_str(),
                "gids.nccl_gid_index_bad" | "gids.nccl_gid_unusable" | "gids.nccl_gid_error"
            )
        {
            f.push(g);
        }
    }
}

fn p2p_disabled_nvlink(x: &Env, f: &mut Vec<Finding>) {
    let r = x.r;
    let get = |k: &str| r.settings.iter().find(|s| s.name == k);
    let host = x.host;
    // NVLink and P2P.
    if let Some(s) = get("NCCL_P2P_DISABLE")
        && crate::nccl::gid::nccl_param(Some(&s.value), 0) == 1
    {
        let t = topo::probe(host);
        let nvl = t
            .gpus
            .iter()
            .filter(|g| g.nvlinks.iter().any(|l| l.count > 0))
            .count();
        if nvl > 0 {
            f.push(
                    Finding::new(
                        "nccl_env.p2p_disabled_nvlink",
                        Severity::Warn,
                        "NCCL_P2P_DISABLE",
                        format!("NCCL_P2P_DISABLE=1 on a host with NVLink ({nvl} GPUs linked): intra-node traffic goes through host memory instead"),
                    )
                    .evidence("from", origin_text(s))
                    .evidence("gpus_with_nvlink", nvl)
                    .fix("unset NCCL_P2P_DISABLE (use NCCL_P2P_LEVEL to limit P2P by path instead)"),
                );
        }
    }
}

/// Whether NCCL_IB_HCA or NCCL_NET_GDR_LEVEL strands GPU `g`: its GDR state is that
/// finding's, said there (one cause, one finding).
fn stranded_by_a_setting(g: &Gdr, gpu: &str) -> bool {
    g.stranded.iter().any(|s| s.gpu == gpu)
        || g.setting_strands
            .iter()
            .filter(|s| s.name == "NCCL_NET_GDR_LEVEL")
            .any(|s| s.gpus.iter().any(|x| x.0 == gpu))
}

fn gdr_by_topology(x: &Env, f: &mut Vec<Finding>) {
    let r = x.r;
    // GDR by topology: a GPU whose every used NIC is beyond the level. One finding for
    // all such GPUs, in the gdr probe's words and severity (one fact, one wording).
    let mut by_gpu: BTreeMap<&str, Vec<&GdrPair>> = BTreeMap::new();
    let stranded = |g: &str| stranded_by_a_setting(&r.gdr, g);
    for p in r.gdr.pairs.iter().filter(|p| !stranded(&p.gpu)) {
        by_gpu.entry(p.gpu.as_str()).or_default().push(p);
    }
    let mut far: Vec<(&str, String)> = Vec::new();
    let mut no_kernel: Vec<&str> = Vec::new();
    for (gpu, pairs) in by_gpu {
        if pairs.iter().all(|p| !p.enabled) {
            // The nearest NIC's path (NCCL's order), as the gdr probe names it.
            let nearest = pairs
                .iter()
                .map(|p| p.path.as_str())
                .min_by_key(|p| params::level_rank(p).unwrap_or(usize::MAX))
                .unwrap_or("N/A");
            far.push((gpu, nearest.to_string()));
        } else if pairs
            .iter()
            .filter(|p| p.enabled)
            .all(|p| p.verdict == "off_no_peer_memory")
        {
            no_kernel.push(gpu);
        }
    }
    if !far.is_empty() {
        let worst = far
            .iter()
            .map(|(_, p)| p.as_str())
            .max_by_key(|p| params::level_rank(p).unwrap_or(usize::MAX))
            .unwrap_or("SYS")
            .to_string();
        let gpus: Vec<&str> = far.iter().map(|(g, _)| *g).collect();
        f.push(
            Finding::new(
                "nccl_env.gdr_off",
                Severity::Warn,
                gpus.join(", "),
                format!(
                    "the nearest NIC of these GPUs is {worst} away, farther than NCCL_NET_GDR_LEVEL={} ({}): NCCL stages network traffic through host memory",
                    r.gdr.level, r.gdr.level_rule
                ),
            )
            .evidence("level", r.gdr.level.clone())
            .evidence(
                "nearest_path",
                far.iter().map(|(g, p)| format!("{g}={p}")).collect::<Vec<_>>(),
            )
            .fix(format!(
                "a NIC under the same PCIe switch as each GPU gives GDR; to force it over this path set NCCL_NET_GDR_LEVEL={worst} (measure: it can be slower than staging)"
            )),
        );
    }
    // Close enough, but the kernel gives NCCL neither peer memory nor DMA-BUF: one finding
    // for all such GPUs (the cause is the host's, not a GPU's), failed as `gdr` fails it.
    if !no_kernel.is_empty() {
        let gpus = no_kernel.join(", ");
        f.push(
            Finding::new(
                "nccl_env.gdr_no_kernel_support",
                Severity::Fail,
                gpus.clone(),
                format!(
                    "no peer-memory client and no DMA-BUF path: GPUDirect RDMA is off for these GPUs, whose HCAs are within NCCL_NET_GDR_LEVEL={} ({})",
                    r.gdr.level, r.gdr.level_rule
                ),
            )
            .evidence("kernel_support", r.gdr.kernel_support.clone())
            .fix("run `fabprobe gdr` for why (nvidia_peermem not loaded, no MLNX_OFED/DOCA peer-memory API, proprietary NVIDIA module)"),
        );
    }
}

fn net_plugin_missing(x: &Env, f: &mut Vec<Finding>) {
    let r = x.r;
    // Plugin and topology file.
    if let Some(req) = &r.net_plugin.requested
        && !r.net_plugin.tries.is_empty()
        && r.net_plugin.found.is_none()
    {
        f.push(
                Finding::new(
                    "nccl_env.net_plugin_missing",
                    Severity::Warn,
                    "NCCL_NET_PLUGIN",
                    format!("NCCL_NET_PLUGIN={req}: none of {} is on the library path: NCCL uses its internal IB/Socket transport", r.net_plugin.tries.join(", ")),
                )
                .evidence("tries", r.net_plugin.tries.clone())
                .fix("add the plugin's directory to LD_LIBRARY_PATH"),
            );
    }
}

fn topo_file_missing(x: &Env, f: &mut Vec<Finding>) {
    let r = x.r;
    if r.topo_file.from_env && !r.topo_file.exists {
        f.push(
            Finding::new(
                "nccl_env.topo_file_missing",
                Severity::Warn,
                "NCCL_TOPO_FILE",
                format!(
                    "NCCL_TOPO_FILE={} does not exist: NCCL detects the topology itself",
                    r.topo_file.path
                ),
            )
            .fix("fix the path, or generate one with `fabprobe topo --format nccl-xml`"),
        );
    }
}

#[cfg(test)]
mod tests {
    /// Every form of NCCL_IB_HCA (NCCL's ncclIbInitDevices: prefix, `=` exact, `^` exclude,
    /// `:port`) against the names h100-nic-unregistered moved: mlx5_7 (was to be mlx5_8) and
    /// mlx5_8 (was to be mlx5_9), one port each; mlx5_10 (was to be mlx5_11) for the prefix
    /// that matches both names.
    #[test]
    fn moved_selection_reads_every_form_of_nccl_ib_hca() {
        use super::{HcaSpec, moved_selection, topo::MovedName};
        let mv = |name: &str, was: &str| MovedName {
            name: name.into(),
            pci_bus_id: "0000:e9:00.0".into(),
            was_to_be: was.into(),
            past: vec!["0000:d5:00.0".into()],
        };
        let moved = [mv("mlx5_7", "mlx5_8"), mv("mlx5_8", "mlx5_9"), mv("mlx5_10", "mlx5_11")];
        let ports: Vec<(String, u32)> = ["mlx5_0", "mlx5_7", "mlx5_8", "mlx5_10"]
            .iter()
            .map(|d| (d.to_string(), 1))
            .collect();
        // (NCCL_IB_HCA, the (device, selected now) it changes)
        let table: &[(&str, &[(&str, bool)])] = &[
            // Written for the full node: mlx5_7 was the eighth NDR NIC, now the frontend.
            ("=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7", &[("mlx5_7", true)]),
            ("mlx5_7", &[("mlx5_7", true)]),
            ("=mlx5_7", &[("mlx5_7", true)]),
            ("mlx5_7:1", &[("mlx5_7", true)]),
            ("=mlx5_7:1", &[("mlx5_7", true)]),
            // Port 2 selects no port of these one-port devices, under either name.
            ("=mlx5_7:2", &[]),
            // mlx5_8 meant the frontend: now it is the frontend's second function, and the
            // frontend (mlx5_7) is left out.
            ("=mlx5_8", &[("mlx5_7", false), ("mlx5_8", true)]),
            // Excluding the frontend by the name it was to have.
            ("^mlx5_8", &[("mlx5_7", true), ("mlx5_8", false)]),
            ("^=mlx5_8,mlx5_9", &[("mlx5_7", true)]),
            // A prefix that matches both the name now and the one it was to be.
            ("mlx5", &[]),
            ("mlx5_1", &[]),
            ("^mlx5_1", &[]),
            ("=mlx5_1", &[]),
            // The name it was to have, as a prefix: it matches mlx5_11, not mlx5_10.
            ("mlx5_11", &[("mlx5_10", false)]),
            ("^mlx5_11", &[("mlx5_10", true)]),
            // Unset or empty is every device, under any name.
            ("", &[]),
        ];
        for (hca, want) in table {
            let got: Vec<(&str, bool)> = moved_selection(&HcaSpec::parse(hca), &moved, &ports)
                .into_iter()
                .map(|(m, p, now)| {
                    assert_eq!(p, 1);
                    (m.name.as_str(), now)
                })
                .collect();
            assert_eq!(&got, want, "NCCL_IB_HCA={hca}");
        }
        // Nothing moved: nothing changes, whatever the setting.
        assert!(moved_selection(&HcaSpec::parse("mlx5_7"), &[], &ports).is_empty());
    }

    use super::*;

    #[test]
    fn net_plugin_lookup_order() {
        let t = |r: Option<&str>| net_plugin_tries(r).0;
        assert_eq!(t(None), ["libnccl-net.so"]);
        assert!(t(Some("none")).is_empty());
        assert!(t(Some("NONE")).is_empty());
        assert!(t(Some("")).is_empty());
        assert_eq!(t(Some("aws-ofi")), ["aws-ofi", "libnccl-net-aws-ofi.so"]);
        assert_eq!(
            t(Some("a,,libnccl-net-b.so,/opt/c.so")),
            ["a", "libnccl-net-a.so", "libnccl-net-b.so", "/opt/c.so"]
        );
    }

    #[test]
    fn link_locals() {
        assert!(link_local("169.254.3.1"));
        assert!(link_local("fe80::1"));
        assert!(!link_local("10.0.0.1"));
    }
}
