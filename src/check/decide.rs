//! Decisive verdicts: what `check` does with the findings once every rule has spoken.
//! One cause is one finding (the rules it breaks listed in it), causes are ranked
//! (hardware state, then configuration, then host limits), what could not be evaluated is
//! said beside the verdict instead of scored as a warning, and ports NCCL would not use
//! here are listed, not judged, unless the policy asks for every port. Pure functions.

use serde::Serialize;
use serde_json::json;

use super::{Finding, Severity};
use crate::finding::MissingFact;

/// What kind of cause a finding is, in the order a person should act on them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// Broken or degraded hardware: a link down or downtrained, lanes or NVLinks lost,
    /// errors on a cable.
    Hardware,
    /// How the node or the job is set up: NCCL variables, GID index, PFC/ECN, GDR modules.
    Configuration,
    /// The host's own limits and leftovers: memlock, device holders, CPU and memory size.
    HostLimit,
}

impl Class {
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Hardware => "hardware",
            Class::Configuration => "configuration",
            Class::HostLimit => "host_limit",
        }
    }
}

/// Port and GPU rules whose failure means the hardware is degraded.
const HARDWARE_KEYS: &[&str] = &[
    "state",
    "rate_min_gbps",
    "width",
    "speed",
    "pcie_gen_min",
    "pcie_width_min",
    "count",
    "count_min",
    "nvlink_min",
    "max_per_hour",
];

/// The class of a finding, from its id (and, for `all_alike`, the field it compares).
pub(crate) fn class_of(f: &Finding) -> Class {
    let id = f.id.as_str();
    if id.starts_with("host.") || id.starts_with("policy.host.") {
        return Class::HostLimit;
    }
    if let Some(rest) = id.strip_prefix("policy.") {
        let key = rest.rsplit('.').next().unwrap_or("");
        let field = f.evidence.get("field").and_then(|v| v.as_str());
        let hw = HARDWARE_KEYS.contains(&key)
            || (key == "all_alike" && field.is_some_and(|x| x != "fw_ver" && x != "hca_type"));
        return if hw { Class::Hardware } else { Class::Configuration };
    }
    let hardware = [
        "topo.pcie_width_degraded",
        "topo.pcie_speed_degraded",
        "topo.nvlink_below_majority",
        "topo.gpu_not_in_nvml",
        "topo.nic_not_in_rdma",
        "links.pcie_downtrained",
        "links.port_not_active",
        "links.rate_below_peers",
        "links.errors_increasing",
        "links.errors_since_boot",
        "links.counter_saturated",
        "qos.pause_storm",
    ];
    if hardware.contains(&id) {
        Class::Hardware
    } else {
        Class::Configuration
    }
}

/// The cause a finding speaks of, and the device it concerns: findings with the same
/// (topic, device) are one cause. `None`: a finding of its own.
fn cause_of(f: &Finding) -> Option<(&'static str, String)> {
    let id = f.id.as_str();
    let key = id.rsplit('.').next().unwrap_or("");
    let field = f.evidence.get("field").and_then(|v| v.as_str());
    let counter = f.evidence.get("counter").and_then(|v| v.as_str());
    // A card's PCIe link: its width and speed, whichever function or port reports it.
    if matches!(id, "topo.pcie_width_degraded" | "topo.pcie_speed_degraded") {
        let bdf = topo_bdf(f)?;
        return Some((
            "pcie_link",
            bdf.rsplit_once('.').map_or(bdf, |(d, _)| d).to_string(),
        ));
    }
    if id.starts_with("policy.") && matches!(key, "pcie_gen_min" | "pcie_width_min") {
        let dev = f.subject.split_once('/').map_or(f.subject.as_str(), |(d, _)| d);
        return Some(("pcie_link", dev.to_string()));
    }
    // One port's physical link: a rate below what it should reach and errors on it are
    // the same cable or transceiver.
    let topic = match id {
        "links.rate_below_peers" => "port_speed",
        "links.port_not_active" => "port_state",
        "host.memlock_limited" => "memlock",
        "host.device_holders" => "holders",
        "topo.nvlink_below_majority" => "nvlink",
        "links.errors_since_boot" | "links.errors_increasing" | "links.counter_saturated" => "port_speed",
        // The qos probe and the [roce] keys judge the same DCB settings of one port.
        "qos.roce_priority_not_lossless" => "pfc",
        "qos.ecn_off_on_roce_priority" | "qos.ecn_marks_without_cnps" => "ecn",
        "qos.global_pause_with_pfc" => "global_pause",
        _ if !id.starts_with("policy.") => return None,
        _ => match key {
            "rate_min_gbps" | "speed" | "width" => "port_speed",
            "all_alike" if field == Some("rate") => "port_speed",
            "state" => "port_state",
            "memlock_unlimited" | "memlock_min_bytes" => "memlock",
            "device_holders_max" => "holders",
            "nvlink_min" => "nvlink",
            "pfc_priorities" => "pfc",
            "ecn_priorities" => "ecn",
            "global_pause" => "global_pause",
            // A physical-link error counter's rate is the cable the probe sees erring.
            "max_per_hour" if counter.is_some_and(|c| crate::probe::links::LINK_ERRORS.contains(&c)) => {
                "port_speed"
            }
            _ => return None,
        },
    };
    Some((topic, port_of(&f.subject).unwrap_or_else(|| f.subject.clone())))
}

/// The PCI address a topo device finding is about: its `pci_bdf`, or the last word of the
/// subject in reports saved before subjects were the device's name alone.
pub(crate) fn topo_bdf(f: &Finding) -> Option<&str> {
    match f.evidence.get("pci_bdf").and_then(|v| v.as_str()) {
        Some(b) => Some(b),
        None => f.subject.rsplit(' ').next().filter(|b| b.contains(':')),
    }
}

/// The one port a subject names, spelled `dev/port`: `mlx5_0/1` as it is, the qos probe's
/// `ens1f0np0 (mlx5_0 port 1)` as `mlx5_0/1`. `None` for any other subject.
pub(crate) fn port_of(subject: &str) -> Option<String> {
    let plain = |d: &str| !d.is_empty() && !d.contains(|c: char| c.is_whitespace() || c == ',');
    if let Some((d, p)) = subject.split_once('/')
        && plain(d)
        && p.parse::<u32>().is_ok()
    {
        return Some(subject.to_string());
    }
    // `ens1f0np0 (mlx5_0/1)`, the one spelling (finding::spell::port), or the older
    // `ens1f0np0 (mlx5_0 port 1)` of saved reports.
    let inner = subject.split_once(" (")?.1.strip_suffix(')')?;
    let (dev, port) = inner.split_once(" port ").or_else(|| inner.split_once('/'))?;
    (plain(dev) && port.parse::<u32>().is_ok()).then(|| format!("{dev}/{port}"))
}

/// What a finding folded into another is listed as, under `also`: itself, then what it
/// had folded in already.
fn also_lines(f: &Finding) -> Vec<String> {
    let mut v = vec![format!("{} ({}): {}", f.id, f.subject, f.message)];
    if let Some(a) = f.evidence.get("also").and_then(|a| a.as_array()) {
        v.extend(a.iter().filter_map(|x| x.as_str()).map(str::to_string));
    }
    v
}

/// Fold `symptoms` into `cause`: listed under its `also`, its fix kept (a symptom's fix
/// is the cause's), its severity the worst of them (the policy fails what follows from it).
fn fold(cause: &mut Finding, symptoms: Vec<Finding>) {
    if symptoms.is_empty() {
        return;
    }
    let mut also: Vec<String> = cause
        .evidence
        .get("also")
        .and_then(|a| a.as_array())
        .map(|a| a.iter().filter_map(|x| x.as_str()).map(str::to_string).collect())
        .unwrap_or_default();
    for s in symptoms {
        cause.severity = cause.severity.max(s.severity);
        if cause.fix.is_none() {
            cause.fix = s.fix.clone();
        }
        also.extend(also_lines(&s));
    }
    cause.evidence.insert("also".into(), json!(also));
}

/// How a symptom's subject relates to its cause's (both on one node).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    /// The same port, however each spells it ([`port_of`]).
    SamePort,
    /// The symptom's pair (`GPU0-mlx5_0`) is among the pairs the cause names.
    PairNamed,
    /// The symptom's subject names the cause's GPU (`GPU5`, `GPU5-GPU2`).
    SameGpu,
    /// Every GPU the symptom names (`GPU0-mlx5_0 GPU1-mlx5_1`) is among the cause's
    /// (`GPU0, GPU1, GPU2`).
    GpusNamed,
    /// A GPUDirect pair NCCL took because the GPU's nearer NIC, the cause's port's device,
    /// is not opened (the symptom's `nearer_nics_not_opened` names it).
    NearerNic,
    /// Every GPU the symptom names is among the cause's `gpus` evidence (the GPUs beside
    /// a NIC RDMA does not list).
    GpusBeside,
    /// Every GPU the symptom names is among the cause's `gpus_far` evidence (the GPUs with
    /// no NIC at the policy's path or nearer).
    GpusFar,
    /// The GPUs without a NIC of their own (the symptom's `gpus` less `matched`) are no
    /// more than the cause's `gpus`.
    NoMoreShort,
    /// The device the symptom's `selected_by_moved_name` names is among the cause's
    /// `names_moved` (`mlx5_7=0000:e9:00.0`).
    MovedName,
    /// The same device, spelled alike (a PCI bus ID).
    SameSubject,
    /// Any finding of the kind on the node.
    Node,
}

/// "A finding of rule `cause` explains the findings of rules `symptoms` on subjects related
/// by `via`". A rule is a finding id, `*.key` for that key under any policy section, and an
/// optional `{evidence=value}` the finding must carry. Written once, for every command.
struct Explains {
    cause: &'static [&'static str],
    symptoms: &'static [&'static str],
    via: Via,
}

/// What follows from what, on one node.
const EXPLAINS: &[Explains] = &[
    // A port that is down: its rate, speed and width are meaningless, its error counters
    // counted it going down (link_downed), and NCCL skips it (ncclIbInit opens ACTIVE ports
    // only), so its GPU's traffic takes a farther NIC and GPUDirect RDMA turns off by distance.
    Explains {
        cause: &["links.port_not_active", "*.state"],
        symptoms: &[
            "*.rate_min_gbps",
            "*.speed",
            "*.width",
            "*.all_alike{field=rate}",
            "links.rate_below_peers",
            "links.errors_since_boot",
            "links.errors_increasing",
            "links.counter_saturated",
            "*.max_per_hour",
        ],
        via: Via::SamePort,
    },
    Explains {
        cause: &["links.port_not_active", "*.state"],
        symptoms: &["gdr.off_distance", "policy.gdr.ready{verdict=off_distance}"],
        via: Via::NearerNic,
    },
    // A missing peer-memory module, ACS redirect, a translating IOMMU, a NIC beyond the GDR
    // level: each pair `gdr.ready` fails for it is the gdr probe's one finding.
    Explains {
        cause: &["gdr.peermem_not_loaded"],
        symptoms: &["policy.gdr.ready{verdict=off_no_peer_memory}"],
        via: Via::PairNamed,
    },
    Explains {
        cause: &["gdr.acs_redirect"],
        symptoms: &["policy.gdr.ready{verdict=acs_redirect}"],
        via: Via::PairNamed,
    },
    Explains {
        cause: &["gdr.iommu_translation"],
        symptoms: &["policy.gdr.ready{verdict=iommu_translation}"],
        via: Via::PairNamed,
    },
    Explains {
        cause: &["gdr.off_distance"],
        symptoms: &["policy.gdr.ready{verdict=off_distance}"],
        via: Via::PairNamed,
    },
    // NCCL_NET_GDR_LEVEL set below the path to GPUs' nearest NIC (nccl-env's finding, from
    // the job's settings): the pairs it leaves off by distance follow from the setting.
    Explains {
        cause: &["nccl_env.gdr_level_strands_gpus"],
        symptoms: &["gdr.off_distance", "policy.gdr.ready{verdict=off_distance}"],
        via: Via::GpusNamed,
    },
    // A NIC the RDMA stack does not list (mlx5_ib not loaded, a driver that did not bind):
    // the node is a NIC short of the policy's count; the GPUs beside it (on its PCIe
    // switch), and only those, have no NIC of their own and their traffic takes a farther
    // NIC, GPUDirect RDMA off by distance (NCCL sees only what /sys/class/infiniband lists).
    Explains {
        cause: &["topo.nic_not_in_rdma", "topo.rdma_driver_not_loaded"],
        symptoms: &[
            "policy.ib.count",
            "policy.ib.count_min",
            "policy.roce.count",
            "policy.roce.count_min",
        ],
        via: Via::Node,
    },
    // What each command could not read of that NIC, having no RDMA device to read it from.
    // A module not loaded, the same way: each command's finding has the module as subject.
    Explains {
        cause: &["topo.rdma_driver_not_loaded"],
        symptoms: &[
            "gids.rdma_driver_not_loaded",
            "links.rdma_driver_not_loaded",
            "qos.rdma_driver_not_loaded",
            "gdr.rdma_driver_not_loaded",
            "nccl_env.rdma_driver_not_loaded",
        ],
        via: Via::SameSubject,
    },
    Explains {
        cause: &["topo.nic_not_in_rdma"],
        symptoms: &[
            "gids.nic_not_in_rdma",
            "links.nic_not_in_rdma",
            "qos.nic_not_in_rdma",
            "gdr.nic_not_in_rdma",
            "nccl_env.nic_not_in_rdma",
        ],
        via: Via::SameSubject,
    },
    Explains {
        cause: &["topo.nic_not_in_rdma", "topo.rdma_driver_not_loaded"],
        symptoms: &["*.nic_per_gpu"],
        via: Via::NoMoreShort,
    },
    Explains {
        cause: &["topo.nic_not_in_rdma", "topo.rdma_driver_not_loaded"],
        symptoms: &[
            "*.nic_path_max",
            "gdr.off_distance",
            "policy.gdr.ready{verdict=off_distance}",
        ],
        via: Via::GpusBeside,
    },
    // ib_core named the devices after it one lower: what NCCL's settings select only under
    // a name that moved (the frontend port now called mlx5_7) is judged because of it.
    Explains {
        cause: &["topo.nic_not_in_rdma"],
        symptoms: &["*{selected_by_moved_name}"],
        via: Via::MovedName,
    },
    // No NIC near some GPUs (where the cards sit): those GPUs' far NIC and GPUDirect RDMA
    // off by distance follow from it, and no other GPU's.
    Explains {
        cause: &["*.nic_per_gpu"],
        symptoms: &[
            "*.nic_path_max",
            "gdr.off_distance",
            "policy.gdr.ready{verdict=off_distance}",
        ],
        via: Via::GpusFar,
    },
    // A port on another HCA model than its peers runs that model's firmware family and
    // reaches that model's rate.
    Explains {
        cause: &["*.all_alike{field=hca_type}"],
        symptoms: &["*.all_alike{field=fw_ver}", "*.all_alike{field=rate}"],
        via: Via::SamePort,
    },
    // A GPU NVML lost (fallen off the bus) is one GPU short of the count the policy wants,
    // and has no GPUDirect pair for gdr to judge.
    Explains {
        cause: &["topo.gpu_not_in_nvml"],
        symptoms: &["gdr.gpu_not_in_nvml"],
        via: Via::SameSubject,
    },
    Explains {
        cause: &["topo.gpu_not_in_nvml"],
        symptoms: &["policy.gpu.count"],
        via: Via::Node,
    },
    // NVIDIA's driver not loaded: nvidia-persistenced and the Fabric Manager cannot run,
    // and what they would report is not there to read.
    Explains {
        cause: &["topo.gpu_driver_not_loaded"],
        symptoms: &["topo.fabric_manager_not_running", "topo.fabric_not_evaluated"],
        via: Via::Node,
    },
    Explains {
        cause: &["topo.gpu_driver_not_loaded"],
        symptoms: &["gdr.gpu_driver_not_loaded"],
        via: Via::SameSubject,
    },
    // A GPU of another model than the policy's has that model's NVLinks.
    Explains {
        cause: &["policy.gpu.model"],
        symptoms: &["policy.gpu.nvlink_min"],
        via: Via::SameGpu,
    },
];

/// Whether `f` is a finding of `rule` (`id`, `*.key`, `*` any, optionally `{evidence=value}`
/// or `{evidence}`, which it must carry).
fn is_rule(f: &Finding, rule: &str) -> bool {
    let (id, cond) = match rule.split_once('{') {
        Some((id, c)) => (id, c.strip_suffix('}')),
        None => (rule, None),
    };
    let id_ok = match id.strip_prefix("*.") {
        Some(key) => f.id.starts_with("policy.") && f.id.rsplit('.').next() == Some(key),
        None => id == "*" || f.id == id,
    };
    let cond_ok = cond.is_none_or(|c| match c.split_once('=') {
        Some((k, v)) => f.evidence.get(k).and_then(|x| x.as_str()) == Some(v),
        None => f.evidence.contains_key(c),
    });
    id_ok && cond_ok
}

/// The GPU labels a subject names (`GPU5`, both of `GPU0-GPU1`).
fn gpus_named(subject: &str) -> Vec<&str> {
    subject
        .split(|c: char| c.is_whitespace() || c == '-' || c == ',')
        .filter(|t| {
            t.strip_prefix("GPU")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect()
}

fn related(via: Via, cause: &Finding, symptom: &Finding) -> bool {
    match via {
        Via::SamePort => port_of(&cause.subject).is_some_and(|p| port_of(&symptom.subject) == Some(p)),
        Via::PairNamed => {
            let pairs: Vec<&str> = symptom.subject.split_whitespace().collect();
            !pairs.is_empty()
                && pairs
                    .iter()
                    .all(|p| cause.subject.split_whitespace().any(|c| c == *p))
        }
        Via::SameGpu => {
            let g = gpus_named(&cause.subject);
            g.len() == 1 && gpus_named(&symptom.subject).contains(&g[0])
        }
        Via::GpusNamed => {
            let (c, s) = (gpus_named(&cause.subject), gpus_named(&symptom.subject));
            !s.is_empty() && s.iter().all(|g| c.contains(g))
        }
        Via::NearerNic => {
            let dev = port_of(&cause.subject).and_then(|p| p.split_once('/').map(|(d, _)| d.to_string()));
            let nearer = symptom
                .evidence
                .get("nearer_nics_not_opened")
                .and_then(|v| v.as_str());
            dev.zip(nearer)
                .is_some_and(|(d, n)| n.split_whitespace().any(|x| x == d))
        }
        Via::GpusBeside => gpus_among(cause, "gpus", symptom),
        Via::GpusFar => gpus_among(cause, "gpus_far", symptom),
        Via::NoMoreShort => {
            let n = |f: &Finding, k: &str| f.evidence.get(k).and_then(|v| v.as_u64());
            let short = n(symptom, "gpus")
                .zip(n(symptom, "matched"))
                .map(|(g, m)| g.saturating_sub(m));
            short.is_some_and(|s| s as usize <= words(cause, "gpus").len())
        }
        Via::MovedName => {
            let dev = symptom
                .evidence
                .get("selected_by_moved_name")
                .and_then(|v| v.as_str())
                .and_then(|v| v.split_whitespace().next());
            let moved = words(cause, "names_moved");
            dev.is_some_and(|d| {
                moved
                    .iter()
                    .any(|m| m.split_once('=').is_some_and(|(n, _)| n == d))
            })
        }
        Via::SameSubject => cause.subject == symptom.subject,
        Via::Node => true,
    }
}

/// Whether the symptom names GPUs and every one is among the cause's evidence `key`.
fn gpus_among(cause: &Finding, key: &str, symptom: &Finding) -> bool {
    let among = words(cause, key);
    let s = gpus_named(&symptom.subject);
    !s.is_empty() && s.iter().all(|g| among.contains(g))
}

/// The words of a finding's string evidence `key` (none when absent).
fn words<'a>(f: &'a Finding, key: &str) -> Vec<&'a str> {
    f.evidence
        .get(key)
        .and_then(|v| v.as_str())
        .map(|v| v.split_whitespace().collect())
        .unwrap_or_default()
}

/// Mark the findings NCCL's settings judge only because ib_core moved a name past a NIC
/// that did not register (`topo.nic_not_in_rdma`'s `was_to_be`, `mlx5_7>mlx5_8`): every RDMA device they
/// name is selected under its name now and would not be under the one it was to have
/// (`selected_as(device, name)`: the settings select that device's ports called `name`).
/// They get `selected_by_moved_name` (`mlx5_7 (0000:e9:00.0, was to be mlx5_8)`).
pub(crate) fn mark_moved_names(
    findings: &mut [Finding],
    devices: &[String],
    selected_as: impl Fn(&str, &str) -> bool,
) {
    let moved: Vec<(String, String)> = findings
        .iter()
        .filter(|f| f.id == "topo.nic_not_in_rdma")
        .filter_map(|f| f.evidence.get("was_to_be").and_then(|v| v.as_str()))
        .flat_map(|v| v.split_whitespace())
        .filter_map(|m| {
            m.split_once('>')
                .map(|(now, was)| (now.to_string(), was.to_string()))
        })
        .collect();
    if moved.is_empty() {
        return;
    }
    let only_by_move = |d: &str| {
        moved
            .iter()
            .find(|(now, _)| now == d)
            .is_some_and(|(now, was)| selected_as(d, now) && !selected_as(d, was))
    };
    for f in findings.iter_mut().filter(|f| f.id != "topo.nic_not_in_rdma") {
        let named = devices_named(&f.subject, devices);
        if named.is_empty() || !named.iter().all(|d| only_by_move(d)) {
            continue;
        }
        let was: Vec<String> = named
            .iter()
            .filter_map(|d| {
                moved
                    .iter()
                    .find(|(n, _)| n == d)
                    .map(|(n, w)| format!("{n} (was to be {w})"))
            })
            .collect();
        f.evidence
            .insert("selected_by_moved_name".into(), json!(was.join(", ")));
    }
}

/// The finding that explains `findings[i]`, by [`EXPLAINS`]; not itself.
fn explainer(findings: &[Finding], i: usize) -> Option<usize> {
    let s = &findings[i];
    EXPLAINS
        .iter()
        .filter(|e| e.symptoms.iter().any(|r| is_rule(s, r)))
        .find_map(|e| {
            (0..findings.len()).find(|&j| {
                j != i && e.cause.iter().any(|r| is_rule(&findings[j], r)) && related(e.via, &findings[j], s)
            })
        })
}

/// Each module-not-loaded cause and the fact it leaves missing: no device of that kind is
/// in its class (`/sys/class/infiniband`, NVML), so a probe's "nothing to judge" for lack of
/// it follows from it.
const MODULE_FACTS: &[(&str, MissingFact)] = &[
    ("topo.rdma_driver_not_loaded", MissingFact::RdmaDevice),
    ("topo.gpu_driver_not_loaded", MissingFact::Gpu),
];

/// The module-not-loaded cause an unknown finding follows from: its missing fact is one the
/// modules not loaded leave missing (no GPU and no RDMA device: only when both are).
fn module_cause(findings: &[Finding], i: usize) -> Option<usize> {
    let m = findings[i].missing?;
    let causes: Vec<(usize, MissingFact)> = MODULE_FACTS
        .iter()
        .filter_map(|(id, fact)| {
            let j = findings
                .iter()
                .position(|f| f.id == *id && f.severity != Severity::Unknown)?;
            Some((j, *fact))
        })
        .collect();
    let covered = |m: MissingFact| causes.iter().any(|(_, f)| f.covers(m));
    let explained = match m {
        MissingFact::GpuAndRdma => covered(MissingFact::Gpu) && covered(MissingFact::RdmaDevice),
        m => covered(m),
    };
    let first = causes.iter().find(|(_, f)| f.covers(m) || m.covers(*f));
    first.filter(|_| explained).map(|(j, _)| *j)
}

/// What could not be evaluated only because of a cause (a NIC with no RDMA device has no
/// GID table or RDMA port to read) is listed under that cause's `also`, not as a
/// not-evaluated line of its own: one cause, one line. Run before the unknowns are set aside.
pub(crate) fn fold_explained_unknowns(findings: Vec<Finding>) -> Vec<Finding> {
    let known = |f: &Finding| f.severity != Severity::Unknown;
    let parent: Vec<Option<usize>> = (0..findings.len())
        .map(|i| {
            (findings[i].severity == Severity::Unknown)
                .then(|| explainer(&findings, i).or_else(|| module_cause(&findings, i)))
                .flatten()
                .filter(|&p| known(&findings[p]))
        })
        .collect();
    let mut slots: Vec<Option<Finding>> = findings.into_iter().map(Some).collect();
    let mut under: Vec<Vec<Finding>> = vec![Vec::new(); slots.len()];
    for (i, p) in parent.iter().enumerate() {
        if let Some(p) = p {
            under[*p].extend(slots[i].take());
        }
    }
    let mut out = Vec::new();
    for (slot, symptoms) in slots.into_iter().zip(under) {
        if let Some(mut cause) = slot {
            fold(&mut cause, symptoms);
            out.push(cause);
        }
    }
    out
}

/// Symptoms under their causes: each finding another explains ([`EXPLAINS`], followed to
/// the root cause) is folded into that cause. Order of the causes is kept.
pub(crate) fn explain(findings: Vec<Finding>) -> Vec<Finding> {
    let parent: Vec<Option<usize>> = (0..findings.len()).map(|i| explainer(&findings, i)).collect();
    let root = |mut i: usize| {
        // A chain is at most as long as the findings; a cycle keeps the last one reached.
        for _ in 0..findings.len() {
            match parent[i] {
                Some(p) if p != i => i = p,
                _ => break,
            }
        }
        i
    };
    let roots: Vec<usize> = (0..findings.len()).map(root).collect();
    let mut slots: Vec<Option<Finding>> = findings.into_iter().map(Some).collect();
    let mut under: Vec<Vec<Finding>> = vec![Vec::new(); slots.len()];
    for (i, r) in roots.iter().enumerate() {
        if *r != i {
            let s = slots[i].take().expect("each symptom taken once");
            under[*r].push(s);
        }
    }
    let mut out = Vec::new();
    for (mut slot, symptoms) in slots.into_iter().zip(under) {
        if let Some(mut cause) = slot.take() {
            fold(&mut cause, symptoms);
            out.push(cause);
        }
    }
    out
}

/// A failing finding's words with its own device blanked out, and the field it compares.
type FactKey = (String, String);

/// The words of a failing finding with its own device blanked out, with the field it
/// compares: alike devices failing one rule alike read the same. `None` for other findings
/// and for messages that do not name their subject (one of a kind already).
fn same_fact(f: &Finding) -> Option<FactKey> {
    if f.severity != Severity::Fail {
        return None;
    }
    let mut m = f.message.replace(&f.subject, "{}");
    if let Some((dev, _)) = f.subject.split_once('/') {
        m = m.replace(dev, "{}");
    }
    // A port's rule may name its netdev instead (`net1 MTU 1500 ...`).
    if let Some(n) = f
        .evidence
        .get("netdev")
        .and_then(|v| v.as_str())
        .filter(|n| !n.is_empty())
    {
        m = m.replace(n, "{}");
    }
    if m == f.message {
        return None;
    }
    let field = f.evidence.get("field").and_then(|v| v.as_str()).unwrap_or("");
    Some((f.id.clone(), format!("{m}\u{0}{field}")))
}

/// One fact about alike devices is one cause: fails of one rule that read the same once
/// each device is blanked out (eight GPUs that are A100s where the policy says H100, eight
/// ports at NDR where it says HDR, two functions of one card at 8 GT/s) become the first
/// of them, the others listed under its `also`.
pub(crate) fn merge_same_fact(findings: Vec<Finding>) -> Vec<Finding> {
    let keys: Vec<Option<FactKey>> = findings.iter().map(same_fact).collect();
    let mut out: Vec<(Finding, Vec<Finding>, Option<FactKey>)> = Vec::new();
    for (f, k) in findings.into_iter().zip(keys) {
        match out.iter_mut().find(|(_, _, o)| k.is_some() && *o == k) {
            Some((_, same, _)) => same.push(f),
            None => out.push((f, Vec::new(), k)),
        }
    }
    out.into_iter()
        .map(|(mut f, same, _)| {
            fold(&mut f, same);
            f
        })
        .collect()
}

/// One cause, one finding, on one node: the same cause seen by several rules merged
/// ([`merge_causes`]), symptoms folded into their causes ([`explain`]), one fact about
/// alike devices once ([`merge_same_fact`]). What `check` counts, ranks and drains for.
pub fn causes(findings: Vec<Finding>) -> Vec<Finding> {
    merge_same_fact(explain(merge_causes(findings)))
}

/// One cause, one finding: findings about the same device and the same cause become the
/// worst of them (a policy verdict before a probe's at equal severity), which lists the
/// others under `also` (`id (subject): message`). Order is kept otherwise.
pub(crate) fn merge_causes(findings: Vec<Finding>) -> Vec<Finding> {
    let keys: Vec<Option<(&'static str, String)>> = findings.iter().map(cause_of).collect();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let found = k
            .as_ref()
            .and_then(|k| groups.iter_mut().find(|g| keys[g[0]].as_ref() == Some(k)));
        match found {
            Some(g) => g.push(i),
            None => groups.push(vec![i]),
        }
    }
    let mut slots: Vec<Option<Finding>> = findings.into_iter().map(Some).collect();
    let mut out = Vec::new();
    for g in groups {
        let lead = *g
            .iter()
            .max_by_key(|i| {
                let f = slots[**i].as_ref().expect("each index is in one group");
                (f.severity, f.id.starts_with("policy."), std::cmp::Reverse(**i))
            })
            .expect("groups are not empty");
        let mut primary = slots[lead].take().expect("taken once");
        let mut also: Vec<String> = Vec::new();
        for i in g.into_iter().filter(|i| *i != lead) {
            let o = slots[i].take().expect("taken once");
            also.push(format!("{} ({}): {}", o.id, o.subject, o.message));
            if primary.fix.is_none() {
                primary.fix = o.fix;
            }
        }
        if !also.is_empty() {
            primary.evidence.insert("also".into(), json!(also));
        }
        out.push(primary);
    }
    out
}

/// How soon a rule's hardware fault should be acted on, lowest first: a GPU gone, then
/// NVLinks lost (every collective on the node slows), a port down, a PCIe link narrowed,
/// then the rest (a port's rate, its errors, ...).
fn urgency_of(id: &str) -> u8 {
    let key = id.rsplit('.').next().unwrap_or("");
    match id {
        "topo.gpu_not_in_nvml" | "topo.gpu_driver_not_loaded" | "policy.gpu.count" => 0,
        "topo.nvlink_below_majority" => 1,
        "links.port_not_active" | "topo.nic_not_in_rdma" | "topo.rdma_driver_not_loaded" => 2,
        "topo.pcie_width_degraded" | "topo.pcie_speed_degraded" | "links.pcie_downtrained" => 3,
        _ if !id.starts_with("policy.") => 4,
        _ => match key {
            "nvlink_min" => 1,
            "state" | "count" | "count_min" => 2,
            "pcie_width_min" | "pcie_gen_min" => 3,
            _ => 4,
        },
    }
}

/// A finding's urgency: the most urgent of its own rule and the rules folded into it
/// (`also`, `same_cause`), so a cause ranks the same whichever rule leads it, in `check`
/// and in the probe that saw it.
fn urgency(f: &Finding) -> u8 {
    let folded = f
        .evidence
        .get("also")
        .and_then(|a| a.as_array())
        .into_iter()
        .flatten()
        .filter_map(|x| x.as_str())
        // `same_cause` is `id subject; id subject`.
        .chain(
            f.evidence
                .get("same_cause")
                .and_then(|v| v.as_str())
                .into_iter()
                .flat_map(|s| s.split("; ")),
        )
        .map(|x| x.split([' ', ':']).next().unwrap_or(""));
    std::iter::once(f.id.as_str())
        .chain(folded)
        .map(urgency_of)
        .min()
        .unwrap_or(4)
}

/// Fail before warn before pass; hardware before configuration before host limits; within
/// a class the most urgent fault first ([`urgency`]); policy verdicts before probe findings
/// (they are what the node is certified against); then as found. `topo` ranks its findings
/// with it too, so both name the same worst cause.
pub(crate) fn rank(findings: &mut [Finding]) {
    findings.sort_by_key(|f| {
        (
            std::cmp::Reverse(f.severity),
            class_of(f),
            urgency(f),
            !f.id.starts_with("policy."),
        )
    });
}

/// A policy key that could not be judged, and why. Said in the verdict line, not scored.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NotEvaluated {
    pub key: String,
    pub reason: String,
    /// The missing fact the key rests on (its first reason's), `null` for a reason of its
    /// own: keys that share one are one entry in the verdict line.
    pub missing: Option<crate::finding::MissingFact>,
}

/// Take the not-evaluated findings (`check.not_evaluated`, the probes' `unknown` ones) out
/// of the verdict, one note per key ([`crate::finding::not_evaluated_key`]). A key the policy
/// requires (`[policy] require`, `--require`) that could not be judged fails instead.
pub(crate) fn split_not_evaluated(findings: Vec<Finding>, require: &[String]) -> (Vec<Finding>, Vec<NotEvaluated>) {
    let mut kept = Vec::new();
    // Per key, its reasons in order, each once: one line per key, however many devices.
    let mut by_key: Vec<(String, Vec<String>, Option<crate::finding::MissingFact>)> = Vec::new();
    for f in findings {
        if f.severity != Severity::Unknown {
            kept.push(f);
            continue;
        }
        // check's own note names its key as subject; a probe's names the device it concerns.
        let from_probe = f.id != "check.not_evaluated";
        let key = match from_probe {
            true => crate::finding::not_evaluated_key(&f.id).to_string(),
            false => f.subject.clone(),
        };
        let reason = match (f.evidence.get("reason").and_then(|v| v.as_str()), from_probe) {
            (Some(r), _) => r.to_string(),
            (None, true) => format!("{} ({})", f.message, f.subject),
            (None, false) => f.message.clone(),
        };
        match by_key.iter_mut().find(|(k, _, _)| *k == key) {
            Some((_, reasons, _)) if !reasons.contains(&reason) => reasons.push(reason),
            Some(_) => {}
            None => by_key.push((key, vec![reason], f.missing)),
        }
    }
    let mut notes = Vec::new();
    for (key, reasons, missing) in by_key {
        let reason = match reasons.len() {
            1 => reasons[0].clone(),
            n => format!("{}; and {} more", reasons[0], n - 1),
        };
        // A required key covers its parts: `host` its keys, `counters.max_per_hour` each counter's.
        if require.iter().any(|r| {
            key.strip_prefix(r.as_str())
                .is_some_and(|t| t.is_empty() || t.starts_with('.'))
        }) {
            kept.push(
                Finding::new(
                    "check.required_not_evaluated",
                    Severity::Fail,
                    &key,
                    format!("{key} is required by the policy and could not be evaluated: {reason}"),
                )
                .evidence("key", key.as_str())
                .evidence("reason", reason.as_str()),
            );
        }
        notes.push(NotEvaluated { key, reason, missing });
    }
    (kept, notes)
}

/// A finding left out of the verdict because it concerns only devices NCCL would not use.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NotUsed {
    pub id: String,
    pub subject: String,
    pub severity: Severity,
}

/// The RDMA devices a finding's subject names (`mlx5_6/1`, `eth0 (mlx5_8 port 1)`,
/// `NIC3 (mlx5_3) 0000:58:00.0`), among the host's `devices`.
pub(crate) fn devices_named<'a>(subject: &str, devices: &'a [String]) -> Vec<&'a str> {
    let tokens: Vec<&str> = subject
        .split(|c: char| c.is_whitespace() || matches!(c, '/' | '(' | ')' | ',' | ':'))
        .filter(|t| !t.is_empty())
        .collect();
    // A pair (`GPU0-mlx5_10`) names both ends; a name with a dash of its own still matches whole.
    let named = |d: &str| {
        tokens
            .iter()
            .any(|t| *t == d || t.split('-').any(|part| part == d))
    };
    devices.iter().filter(|d| named(d)).map(String::as_str).collect()
}

/// Split off the findings that name only RDMA devices NCCL would not use (`used` says
/// which do). Findings that name no RDMA device, or a used one, stay.
pub(crate) fn split_not_used(
    findings: Vec<Finding>,
    devices: &[String],
    used: impl Fn(&str) -> bool,
) -> (Vec<Finding>, Vec<NotUsed>) {
    let mut kept = Vec::new();
    let mut gone = Vec::new();
    for f in findings {
        let named = devices_named(&f.subject, devices);
        if !named.is_empty() && named.iter().all(|d| !used(d)) {
            gone.push(NotUsed {
                id: f.id.clone(),
                subject: f.subject.clone(),
                severity: f.severity,
            });
        } else {
            kept.push(f);
        }
    }
    (kept, gone)
}

/// The verdict line's words after the severity: the counts, the worst cause and what was
/// not evaluated (`1 fail, 2 warn; worst: GPU5 ...; 1 not evaluated: counters.max_per_hour
/// (counter rates need two samples)`).
pub(crate) fn summary(findings: &[Finding], not_evaluated: &[NotEvaluated]) -> String {
    let fail = findings.iter().filter(|f| f.severity == Severity::Fail).count();
    let warn = findings.iter().filter(|f| f.severity == Severity::Warn).count();
    let mut s = format!("{fail} fail, {warn} warn");
    if let Some(w) = findings.iter().find(|f| f.severity > Severity::Pass) {
        s.push_str(&format!("; worst: {} {}: {}", w.id, w.subject, w.message));
    }
    if !not_evaluated.is_empty() {
        let what: Vec<String> = not_evaluated
            .iter()
            .map(|n| format!("{} ({})", n.key, n.reason))
            .collect();
        s.push_str(&format!(
            "; {} not evaluated: {}",
            not_evaluated.len(),
            what.join("; ")
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(id: &str, sev: Severity, subject: &str) -> Finding {
        Finding::new(id, sev, subject, format!("{id} on {subject}"))
    }

    /// A probe's nothing-to-judge (and a policy key's not-evaluated) folds under the module
    /// not loaded that leaves its fact missing: every cause set against every fact. No GPU
    /// and no RDMA device needs both modules; a QoS reading neither; without a cause nothing
    /// folds.
    #[test]
    fn what_a_module_not_loaded_leaves_to_judge_folds_under_it() {
        use MissingFact::*;
        let rdma = f("topo.rdma_driver_not_loaded", Severity::Fail, "mlx5_core");
        let gpu = f("topo.gpu_driver_not_loaded", Severity::Fail, "nvidia");
        for (causes, folded) in [
            (vec![], vec![]),
            (vec![rdma.clone()], vec![RdmaDevice, RoceNetdev, InfinibandPort]),
            (vec![gpu.clone()], vec![Gpu]),
            (
                vec![rdma.clone(), gpu.clone()],
                vec![GpuAndRdma, RdmaDevice, Gpu, RoceNetdev, InfinibandPort],
            ),
        ] {
            for m in MissingFact::ALL {
                let mut unknown = f("gids.nothing_to_judge", Severity::Unknown, "host");
                unknown.missing = Some(m);
                let mut all = causes.clone();
                all.push(unknown);
                let out = fold_explained_unknowns(all);
                let want = folded.contains(&m);
                let ids: Vec<&str> = out.iter().map(|f| f.id.as_str()).collect();
                assert_eq!(
                    out.len(),
                    causes.len() + usize::from(!want),
                    "{m:?} under {ids:?}"
                );
                let none_left = out.iter().all(|f| f.severity != Severity::Unknown);
                assert_eq!(none_left, want, "{m:?}: {ids:?}");
            }
        }
    }

    /// NCCL_NET_GDR_LEVEL below the nearest NIC's path explains the pairs it turns off, and
    /// only those: a pair of a GPU the setting does not strand is off for another reason.
    #[test]
    fn a_gdr_level_setting_explains_the_pairs_it_turns_off() {
        let cause = f("nccl_env.gdr_level_strands_gpus", Severity::Warn, "GPU0, GPU1");
        let off = f("gdr.off_distance", Severity::Warn, "GPU0-mlx5_0 GPU1-mlx5_1");
        let ready = f("policy.gdr.ready", Severity::Fail, "GPU1-mlx5_1").evidence("verdict", "off_distance");
        let out = explain(vec![off, cause.clone(), ready]);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].id, cause.id);
        assert_eq!(out[0].severity, Severity::Fail);
        let other = f("gdr.off_distance", Severity::Warn, "GPU0-mlx5_0 GPU5-mlx5_5");
        assert_eq!(explain(vec![cause, other]).len(), 2);
    }

    /// A NIC RDMA does not list explains what follows for the GPUs beside it, and only
    /// those: a far GPU's pair and a shortfall of more GPUs than it had stay causes.
    #[test]
    fn a_missing_nic_explains_its_own_gpus_only() {
        let nic = f("topo.nic_not_in_rdma", Severity::Fail, "0000:d5:00.0").evidence("gpus", "GPU7");
        let near = f("gdr.off_distance", Severity::Warn, "GPU7-mlx5_4 GPU7-mlx5_5");
        let far = f("policy.gdr.ready", Severity::Fail, "GPU0-mlx5_1").evidence("verdict", "off_distance");
        let short = |m: u64| {
            f("policy.gpu.nic_per_gpu", Severity::Fail, "GPUs")
                .evidence("gpus", 8u64)
                .evidence("matched", m)
        };
        let out = explain(vec![nic.clone(), near, far.clone()]);
        let ids: Vec<&str> = out.iter().map(|f| f.subject.as_str()).collect();
        assert_eq!(ids, ["0000:d5:00.0", "GPU0-mlx5_1"], "{out:#?}");
        assert_eq!(out[0].evidence["also"].as_array().unwrap().len(), 1);
        assert_eq!(explain(vec![nic.clone(), short(7)]).len(), 1, "one GPU short, one NIC missing");
        assert_eq!(
            explain(vec![nic, short(6)]).len(),
            2,
            "two GPUs short, one NIC missing"
        );
    }

    /// A node short of a NIC per GPU (no NIC missing from RDMA: the card is not in the PCI
    /// tree) explains the far NIC and the GDR pairs off by distance of the GPUs with no NIC
    /// near them (`gpus_far`), and no other GPU's: one row per symptom, (GPUs far, symptom,
    /// whether it folds).
    #[test]
    fn a_nic_short_per_gpu_explains_its_far_gpus_only() {
        let ready = |s: &str| f("policy.gdr.ready", Severity::Fail, s).evidence("verdict", "off_distance");
        let rows: Vec<(&str, Finding, bool)> = vec![
            ("GPU7", f("policy.gpu.nic_path_max", Severity::Fail, "GPU7"), true),
            ("GPU7", f("policy.gpu.nic_path_max", Severity::Fail, "GPU3"), false),
            ("GPU7", f("gdr.off_distance", Severity::Warn, "GPU7-mlx5_4 GPU7-mlx5_5"), true),
            ("GPU7", f("gdr.off_distance", Severity::Warn, "GPU7-mlx5_4 GPU0-mlx5_1"), false),
            ("GPU6 GPU7", f("gdr.off_distance", Severity::Warn, "GPU6-mlx5_4 GPU7-mlx5_5"), true),
            ("GPU7", ready("GPU7-mlx5_6"), true),
            ("GPU7", ready("GPU0-mlx5_1"), false),
            ("GPU7", f("policy.gdr.ready", Severity::Fail, "GPU7-mlx5_6").evidence("verdict", "acs_redirect"), false),
            ("", f("policy.gpu.nic_path_max", Severity::Fail, "GPU7"), false),
        ];
        for (far, symptom, folds) in rows {
            let cause = f("policy.gpu.nic_per_gpu", Severity::Fail, "GPUs")
                .evidence("gpus", 8u64)
                .evidence("matched", 7u64)
                .evidence("gpus_far", far);
            let out = explain(vec![cause, symptom.clone()]);
            assert_eq!(out.len(), if folds { 1 } else { 2 }, "{far} {} {}: {out:#?}", symptom.id, symptom.subject);
        }
    }

    /// What NCCL's settings select only under a name ib_core moved past a missing NIC is
    /// judged because of it; the same finding under settings that select it by either name
    /// (every port) is its own.
    #[test]
    fn what_a_moved_name_selects_is_under_the_missing_nic() {
        let devs: Vec<String> = (0..9).map(|i| format!("mlx5_{i}")).collect();
        let nic = f("topo.nic_not_in_rdma", Severity::Fail, "0000:d5:00.0")
            .evidence("names_moved", "mlx5_7=0000:e9:00.0 mlx5_8=0000:e9:00.1")
            .evidence("was_to_be", "mlx5_7>mlx5_8 mlx5_8>mlx5_9");
        let trust = f("policy.roce.trust", Severity::Fail, "mlx5_7/1");
        let other = f("policy.roce.trust", Severity::Fail, "mlx5_6/1");
        let hca =
            |_: &str, name: &str| name.strip_prefix("mlx5_").and_then(|i| i.parse::<u32>().ok()) < Some(8);
        let mut v = vec![nic.clone(), trust.clone(), other.clone()];
        mark_moved_names(&mut v, &devs, hca);
        assert_eq!(
            v[1].evidence["selected_by_moved_name"],
            "mlx5_7 (was to be mlx5_8)"
        );
        assert!(!v[2].evidence.contains_key("selected_by_moved_name"));
        let out = explain(v);
        assert_eq!(out.len(), 2, "{out:#?}");
        assert_eq!(out[0].evidence["also"].as_array().unwrap().len(), 1);
        let mut all = vec![nic, trust, other];
        mark_moved_names(&mut all, &devs, |_, _| true);
        assert_eq!(explain(all).len(), 3);
    }

    #[test]
    fn one_cable_is_one_finding_that_lists_every_rule() {
        let v = vec![
            f("policy.ib.rate_min_gbps", Severity::Fail, "mlx5_6/1"),
            f("policy.ib.speed", Severity::Fail, "mlx5_6/1"),
            f("policy.ib.all_alike", Severity::Fail, "mlx5_6/1").evidence("field", "rate"),
            f("policy.ib.all_alike", Severity::Fail, "mlx5_6/1").evidence("field", "fw_ver"),
            f("links.rate_below_peers", Severity::Fail, "mlx5_6/1"),
            f("links.rate_below_peers", Severity::Fail, "mlx5_7/1"),
        ];
        let m = merge_causes(v);
        assert_eq!(m.len(), 3, "{m:#?}");
        assert_eq!(m[0].id, "policy.ib.rate_min_gbps");
        assert_eq!(m[0].evidence["also"].as_array().unwrap().len(), 3);
        assert_eq!(
            m[1].evidence.get("field").unwrap(),
            "fw_ver",
            "firmware is its own cause"
        );
        assert_eq!(m[2].subject, "mlx5_7/1");
    }

    #[test]
    fn the_worse_finding_leads_and_a_policy_one_at_equal_severity() {
        let v = vec![
            f("host.memlock_limited", Severity::Warn, "host"),
            f("policy.host.memlock_unlimited", Severity::Fail, "host"),
            f("host.device_holders", Severity::Warn, "host"),
            f("policy.host.device_holders_max", Severity::Fail, "host"),
        ];
        let m = merge_causes(v);
        let ids: Vec<&str> = m.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(
            ids,
            ["policy.host.memlock_unlimited", "policy.host.device_holders_max"]
        );
    }

    #[test]
    fn hardware_ranks_before_configuration_before_host_limits() {
        let mut v = vec![
            f("policy.host.memlock_unlimited", Severity::Fail, "host"),
            f("policy.roce.trust", Severity::Fail, "mlx5_8/1"),
            f("policy.gpu.nvlink_min", Severity::Fail, "GPU5"),
            f("topo.numa_node_unknown", Severity::Warn, "GPU0"),
            f("links.port_not_active", Severity::Fail, "mlx5_1/1"),
        ];
        rank(&mut v);
        let ids: Vec<&str> = v.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "policy.gpu.nvlink_min",
                "links.port_not_active",
                "policy.roce.trust",
                "policy.host.memlock_unlimited",
                "topo.numa_node_unknown"
            ]
        );
    }

    #[test]
    fn not_evaluated_is_said_not_scored_unless_required() {
        let ne = Finding::new(
            "check.not_evaluated",
            Severity::Unknown,
            "counters.max_per_hour",
            "x",
        )
        .evidence("reason", "counter rates need two samples");
        let (kept, notes) = split_not_evaluated(vec![ne.clone()], &[]);
        assert!(kept.is_empty());
        assert_eq!(notes[0].key, "counters.max_per_hour");
        let (kept, _) = split_not_evaluated(vec![ne], &["counters.max_per_hour".to_string()]);
        assert_eq!(kept[0].id, "check.required_not_evaluated");
        assert_eq!(kept[0].severity, Severity::Fail);
    }

    #[test]
    fn a_probes_unknown_finding_is_listed_under_its_key_not_scored() {
        let acs = Finding::new("gdr.acs_unknown", Severity::Unknown, "GPU0-mlx5_0", "ACS unread");
        let state = Finding::new(
            "links.port_state_unknown",
            Severity::Unknown,
            "mlx5_0/1",
            "unread",
        );
        let warn = Finding::new("links.x", Severity::Warn, "mlx5_1/1", "w");
        let (kept, notes) = split_not_evaluated(vec![acs, state, warn.clone()], &[]);
        assert_eq!(kept, [warn]);
        let keys: Vec<&str> = notes.iter().map(|n| n.key.as_str()).collect();
        assert_eq!(keys, ["gdr.acs", "links.port_state_unknown"]);
        assert_eq!(notes[1].reason, "unread (mlx5_0/1)");
    }

    #[test]
    fn findings_about_unused_devices_only_are_set_aside() {
        let devs: Vec<String> = ["mlx5_0", "mlx5_8", "mlx5_9", "mlx5_10"]
            .map(String::from)
            .to_vec();
        let v = vec![
            f(
                "qos.roce_priority_not_lossless",
                Severity::Warn,
                "eth0 (mlx5_8 port 1), eth1 (mlx5_9 port 1)",
            ),
            f("links.port_not_active", Severity::Fail, "mlx5_0/1"),
            f("host.memlock_limited", Severity::Warn, "host"),
            f("gdr.off_distance", Severity::Warn, "GPU0-mlx5_10"),
        ];
        let used = |d: &str| d == "mlx5_0" || d == "mlx5_1";
        let (kept, gone) = split_not_used(v, &devs, used);
        assert_eq!(kept.len(), 2);
        assert_eq!(gone.len(), 2);
        assert_eq!(devices_named("NIC3 (mlx5_10) 0000:58:00.0", &devs), ["mlx5_10"]);
        assert!(
            devices_named("mlx5_1/1", &devs).is_empty(),
            "mlx5_1 is not mlx5_10"
        );
    }
}
