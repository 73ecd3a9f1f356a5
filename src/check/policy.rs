//! Policies: what a kind of node must look like, as TOML files in `checks/` (shipped inside
//! the binary) or any file a person writes. Read strictly: an unknown key, a wrong type or an
//! impossible value is an error naming the file, the line and the key, with the nearest valid
//! key suggested. [`keys`] is the whole language; the man page's POLICY FILES section is
//! generated from it.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use toml::de::{DeArray, DeTable, DeValue};

use super::sweep::{NUMERIC_KEYS, Tolerance};

/// The policies shipped with the binary: `--policy NAME`.
pub(crate) const BUILTIN: &[(&str, &str)] = &[
    ("default", include_str!("../../checks/default.toml")),
    ("dgx-h100", include_str!("../../checks/dgx-h100.toml")),
    ("hdr-a100", include_str!("../../checks/hdr-a100.toml")),
    ("roce-dcqcn", include_str!("../../checks/roce-dcqcn.toml")),
];

/// nvidia-smi's cells from nearest to farthest (X is the device itself).
pub(crate) const PATH_ORDER: &[&str] = &["PIX", "PXB", "PHB", "NODE", "SYS"];

/// The type and the possible values of one key.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Bool,
    /// An integer in `min..=max`.
    Int {
        min: i64,
        max: i64,
    },
    /// An integer from a fixed set.
    IntOneOf(&'static [i64]),
    /// A number (integer or float) in `min..=max`.
    Num {
        min: f64,
        max: f64,
    },
    /// A string; when the list is not empty, one of it.
    Str(&'static [&'static str]),
    /// A list of strings; when the list is not empty, each one of it.
    StrList(&'static [&'static str]),
    /// A list of integers, each in `min..=max`.
    IntList {
        min: i64,
        max: i64,
    },
    /// A table of counter name = maximum increase per hour.
    CounterRates,
    /// A table of numeric fingerprint key = tolerance (`sweep`).
    Tolerances,
}

impl Kind {
    fn describe(&self) -> String {
        match self {
            Kind::Bool => "true or false".into(),
            Kind::Int { min, max } => format!("an integer from {min} to {max}"),
            Kind::IntOneOf(v) => format!(
                "one of {}",
                v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", ")
            ),
            Kind::Num { min, max } => format!("a number from {min} to {max}"),
            Kind::Str([]) => "a string".into(),
            Kind::Str(v) => format!("one of \"{}\"", v.join("\", \"")),
            Kind::StrList([]) => "a list of strings".into(),
            Kind::StrList(v) => format!("a list of \"{}\"", v.join("\", \"")),
            Kind::IntList { min, max } => format!("a list of integers from {min} to {max}"),
            Kind::CounterRates => "a table: counter name = maximum increase per hour".into(),
            Kind::Tolerances => {
                "a table: fingerprint key = a number (in the key's unit) or \"N%\" (of the median)".into()
            }
        }
    }
}

/// Which judge of `check::judge` evaluates a key, or why `check` does not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum JudgedBy {
    /// How `check` runs (its name, what it leaves out or requires): no rule of its own.
    Setting,
    /// `judge::host`, on the host facts.
    Host,
    /// `judge::gpu`, on the topo report.
    Gpu,
    /// `judge::ports`, on the links report's ports of the section's link layer.
    Ports,
    /// `judge::roce`'s GID rule, on the gids report.
    RoceGid,
    /// `judge::roce`'s QoS rules, on each RoCE netdev of the qos report.
    RoceQos,
    /// `judge::ports`' counter rates, on the links report's two samples.
    Counters,
    /// `judge::gdr`, on the gdr report.
    Gdr,
    /// Read by `sweep --policy`, never by `check`.
    Sweep,
}

/// One key of the language: everything about it is here, made by [`key!`].
pub(crate) struct KeySpec {
    pub section: &'static str,
    pub key: &'static str,
    pub kind: Kind,
    pub doc: &'static str,
    /// The judge that evaluates the key.
    pub judged_by: JudgedBy,
    /// Stores a value of `kind` in the key's field of the policy.
    set: fn(&mut Policy, Val),
    /// Whether the policy sets the key (what the judges list as not evaluated).
    pub is_set: fn(&Policy) -> bool,
}

/// One key: section, name, kind, judge, the field of [`Policy`] it sets (`host.kernel`), doc.
/// The field's type says how a value is stored ([`FromVal`]) and when it is set ([`IsSet`]):
/// a key without a field, or a field of the wrong type, does not compile.
macro_rules! key {
    ($section:expr, $key:literal, $kind:expr, $judge:ident, $($field:ident).+, $doc:expr $(,)?) => {
        KeySpec {
            section: $section,
            key: $key,
            kind: $kind,
            doc: $doc,
            judged_by: JudgedBy::$judge,
            set: |p: &mut Policy, v: Val| {
                if let Some(x) = FromVal::from_val(v) {
                    p.$($field).+ = x;
                }
            },
            is_set: |p: &Policy| IsSet::is_set(&p.$($field).+),
        }
    };
}

const WIDTHS: &[&str] = &["1X", "2X", "4X", "8X", "12X"];
const SPEEDS: &[&str] = &["SDR", "DDR", "QDR", "FDR10", "FDR", "EDR", "HDR", "NDR", "XDR"];
const STATES: &[&str] = &["DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"];

macro_rules! port_keys {
    ($s:literal, $f:ident) => {
        [
            key!(
                $s,
                "count",
                Kind::Int { min: 0, max: 64 },
                Ports,
                $f.count,
                "exactly this many ports"
            ),
            key!(
                $s,
                "count_min",
                Kind::Int { min: 0, max: 64 },
                Ports,
                $f.count_min,
                "at least this many ports"
            ),
            key!(
                $s,
                "state",
                Kind::StrList(STATES),
                Ports,
                $f.state,
                "allowed port states (sysfs state names), e.g. [\"ACTIVE\"]"
            ),
            key!(
                $s,
                "rate_min_gbps",
                Kind::Num {
                    min: 1.0,
                    max: 2400.0,
                },
                Ports,
                $f.rate_min_gbps,
                "minimum port rate in Gb/s (sysfs rate)"
            ),
            key!(
                $s,
                "width",
                Kind::StrList(WIDTHS),
                Ports,
                $f.width,
                "allowed link widths, e.g. [\"4X\"]"
            ),
            key!(
                $s,
                "speed",
                Kind::StrList(SPEEDS),
                Ports,
                $f.speed,
                "allowed lane speeds, e.g. [\"NDR\"] (an unsuffixed old-kernel rate is SDR)"
            ),
            key!(
                $s,
                "pcie_gen_min",
                Kind::Int { min: 1, max: 6 },
                Ports,
                $f.pcie_gen_min,
                "minimum PCIe generation the HCA's link trained at (current_link_speed)"
            ),
            key!(
                $s,
                "pcie_width_min",
                Kind::IntOneOf(&[1, 2, 4, 8, 16, 32]),
                Ports,
                $f.pcie_width_min,
                "minimum PCIe width the HCA's link trained at (current_link_width)"
            ),
            key!(
                $s,
                "fw_ver",
                Kind::StrList(&[]),
                Ports,
                $f.fw_ver,
                "allowed firmware versions (prefixes of fw_ver, e.g. \"28.39.\")"
            ),
            key!(
                $s,
                "all_alike",
                Kind::Bool,
                Ports,
                $f.all_alike,
                "every port has the same rate, HCA model, firmware and PCIe link"
            ),
        ]
    };
}

const IB_KEYS: [KeySpec; 10] = port_keys!("ib", ib);
const ROCE_KEYS: [KeySpec; 10] = port_keys!("roce", roce);

const OTHER_KEYS: &[KeySpec] = &[
    key!(
        "policy",
        "name",
        Kind::Str(&[]),
        Setting,
        name,
        "the policy's name, shown in reports (default: the file name)"
    ),
    key!(
        "policy",
        "description",
        Kind::Str(&[]),
        Setting,
        description,
        "one line saying what kind of node this is"
    ),
    key!(
        "policy",
        "probe_findings",
        Kind::Bool,
        Setting,
        probe_findings,
        "include every probe's own findings (default true)"
    ),
    key!(
        "policy",
        "ignore",
        Kind::StrList(&[]),
        Setting,
        ignore,
        "finding ids to leave out; \"links.*\" leaves out a whole probe"
    ),
    key!(
        "policy",
        "all_ports",
        Kind::Bool,
        Setting,
        all_ports,
        "judge every RDMA port and RoCE netdev, also those NCCL would not use here (NCCL_IB_HCA, NCCL_IB_DISABLE); default false: those are listed as not used by NCCL"
    ),
    key!(
        "policy",
        "require",
        Kind::StrList(&[]),
        Setting,
        require,
        "policy keys (e.g. \"counters.max_per_hour\") that must be evaluated: one that could not be is a failure, not a note in the verdict line"
    ),
    key!(
        "host",
        "memlock_unlimited",
        Kind::Bool,
        Host,
        host.memlock_unlimited,
        "the locked-memory limit (RLIMIT_MEMLOCK, soft) must be unlimited"
    ),
    key!(
        "host",
        "memlock_min_bytes",
        Kind::Int {
            min: 0,
            max: i64::MAX,
        },
        Host,
        host.memlock_min_bytes,
        "the soft locked-memory limit must be at least this"
    ),
    key!(
        "host",
        "device_holders_max",
        Kind::Int { min: 0, max: 100_000 },
        Host,
        host.device_holders_max,
        "at most this many processes may hold /dev/nvidia* or /dev/infiniband/uverbs* open (0 before a job)"
    ),
    key!(
        "host",
        "kernel",
        Kind::StrList(&[]),
        Host,
        host.kernel,
        "allowed kernels (prefixes of uname -r)"
    ),
    key!(
        "host",
        "memory_min_gib",
        Kind::Int { min: 1, max: 1 << 20 },
        Host,
        host.memory_min_gib,
        "minimum memory in GiB"
    ),
    key!(
        "host",
        "cpu_count_min",
        Kind::Int { min: 1, max: 1 << 16 },
        Host,
        host.cpu_count_min,
        "minimum logical CPUs"
    ),
    key!(
        "gpu",
        "count",
        Kind::Int { min: 0, max: 64 },
        Gpu,
        gpu.count,
        "exactly this many NVIDIA GPUs"
    ),
    key!(
        "gpu",
        "model",
        Kind::Str(&[]),
        Gpu,
        gpu.model,
        "every GPU's NVML name contains this, e.g. \"H100\""
    ),
    key!(
        "gpu",
        "driver",
        Kind::StrList(&[]),
        Gpu,
        gpu.driver,
        "allowed driver versions (prefixes of NVML's driver version)"
    ),
    key!(
        "gpu",
        "nvlink_min",
        Kind::Int { min: 1, max: 18 },
        Gpu,
        gpu.nvlink_min,
        "every GPU pair is at least NV<this> (bonded NVLinks, direct or through NVSwitch)"
    ),
    key!(
        "gpu",
        "nic_path_max",
        Kind::Str(PATH_ORDER),
        Gpu,
        gpu.nic_path_max,
        "every GPU has an RDMA NIC at this nvidia-smi path type or nearer (PIX < PXB < PHB < NODE < SYS)"
    ),
    key!(
        "gpu",
        "nic_per_gpu",
        Kind::Bool,
        Gpu,
        gpu.nic_per_gpu,
        "each GPU gets a NIC of its own within nic_path_max (a one-to-one matching)"
    ),
    key!(
        "roce",
        "gid",
        Kind::Str(&["ipv4-v2", "ipv6-v2", "v2", "any"]),
        RoceGid,
        roce_qos.gid,
        "the GID NCCL picks on every RoCE port: IPv4 RoCE v2, IPv6 RoCE v2, any v2, any"
    ),
    key!(
        "roce",
        "mtu",
        Kind::IntOneOf(&[256, 512, 1024, 2048, 4096]),
        RoceQos,
        roce_qos.mtu,
        "the RoCE path MTU every port must reach: the largest IB MTU that fits the netdev MTU less 96 bytes of RoCE v2 headers (the kernel's iboe_get_mtu, mlx5's active_mtu)"
    ),
    key!(
        "roce",
        "pfc_priorities",
        Kind::IntList { min: 0, max: 7 },
        RoceQos,
        roce_qos.pfc_priorities,
        "PFC enabled on exactly these priorities (DCB pfc_en, else the priorities with pause counters)"
    ),
    key!(
        "roce",
        "ecn_priorities",
        Kind::IntList { min: 0, max: 7 },
        RoceQos,
        roce_qos.ecn_priorities,
        "ECN (DCQCN) on exactly these priorities: reaction and notification point both enabled (ecn/roce_rp, ecn/roce_np; MLNX_OFED sysfs)"
    ),
    key!(
        "roce",
        "trust",
        Kind::Str(&["pcp", "dscp"]),
        RoceQos,
        roce_qos.trust,
        "the trust mode (dscp when the DCB APP table maps DSCP values, else pcp)"
    ),
    key!(
        "roce",
        "global_pause",
        Kind::Bool,
        RoceQos,
        roce_qos.global_pause,
        "whether global (802.3x) pause may be on (on: the driver keeps global pause counters)"
    ),
    key!(
        "gdr",
        "ready",
        Kind::Bool,
        Gdr,
        gdr_ready,
        "GPUDirect RDMA on for every pair NCCL would use (each GPU and its nearest NICs): peer memory or DMA-BUF, within NCCL_NET_GDR_LEVEL, no ACS redirect between them; false checks nothing"
    ),
    key!(
        "sweep",
        "tolerance",
        Kind::Tolerances,
        Sweep,
        sweep_tolerance,
        "for `fabprobe sweep --policy`: how far a numeric fingerprint value may be from \
              the median of its hardware kind and still agree, e.g. { memory_gib = \"2%\", \
              cpu_count = 0 }; keys: cpu_count, gpu_count, ib_ports, memory_gib, nvlink_min, \
              rdma_nic_count, roce_ports; default memory_gib = \"1%\", every other exact"
    ),
    key!(
        "counters",
        "max_per_hour",
        Kind::CounterRates,
        Counters,
        counters_max_per_hour,
        "per port: counter = maximum increase per hour, e.g. { symbol_error = 10 }; \
              needs two samples (--interval or --baseline)"
    ),
];

/// Sections in the order the man page lists them.
pub(crate) const SECTIONS: &[&str] = &["policy", "host", "gpu", "ib", "roce", "gdr", "counters", "sweep"];

/// Every key of the language.
pub(crate) fn keys() -> impl Iterator<Item = &'static KeySpec> {
    SECTIONS.iter().flat_map(|s| {
        IB_KEYS
            .iter()
            .chain(ROCE_KEYS.iter())
            .chain(OTHER_KEYS.iter())
            .filter(move |k| k.section == *s)
    })
}

/// The keys of `section` judged by `judge` that `p` sets, in the language's order.
pub(crate) fn set_keys(p: &Policy, section: &str, judge: JudgedBy) -> Vec<&'static str> {
    keys()
        .filter(|k| k.section == section && k.judged_by == judge && (k.is_set)(p))
        .map(|k| k.key)
        .collect()
}

/// Counter names `counters.max_per_hour` accepts: the IB PMA set and the hw counters
/// fabprobe knows (mlx5 q-counters and congestion counters).
pub(crate) fn counter_names() -> Vec<&'static str> {
    let mut v = vec![
        "symbol_error",
        "link_error_recovery",
        "link_downed",
        "port_rcv_errors",
        "port_rcv_remote_physical_errors",
        "port_rcv_switch_relay_errors",
        "port_xmit_discards",
        "port_xmit_constraint_errors",
        "port_rcv_constraint_errors",
        "local_link_integrity_errors",
        "excessive_buffer_overrun_errors",
        "VL15_dropped",
        "port_xmit_wait",
        "np_cnp_sent",
        "np_ecn_marked_roce_packets",
        "rp_cnp_handled",
        "rp_cnp_ignored",
        "rx_icrc_encapsulated",
    ];
    v.extend_from_slice(crate::sysfs::infiniband::MLX5_Q_COUNTERS);
    v
}

/// A parsed policy. Every rule is optional: an unset key checks nothing.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Policy {
    pub name: String,
    /// `builtin:<name>` or the file's path.
    pub source: String,
    pub description: Option<String>,
    pub probe_findings: bool,
    pub ignore: Vec<String>,
    /// Judge ports NCCL would not use too (`[policy] all_ports`).
    pub all_ports: bool,
    /// Keys whose not-evaluated state fails the check (`[policy] require`).
    pub require: Vec<String>,
    pub host: HostRules,
    pub gpu: GpuRules,
    pub ib: PortRules,
    pub roce: PortRules,
    pub roce_qos: RoceRules,
    pub gdr_ready: Option<bool>,
    pub counters_max_per_hour: BTreeMap<String, f64>,
    /// `[sweep] tolerance`: read by `sweep --policy`, not by `check`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub sweep_tolerance: BTreeMap<String, Tolerance>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct HostRules {
    pub memlock_unlimited: Option<bool>,
    pub memlock_min_bytes: Option<u64>,
    pub device_holders_max: Option<u64>,
    pub kernel: Vec<String>,
    pub memory_min_gib: Option<u64>,
    pub cpu_count_min: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct GpuRules {
    pub count: Option<u64>,
    pub model: Option<String>,
    pub driver: Vec<String>,
    pub nvlink_min: Option<u64>,
    pub nic_path_max: Option<String>,
    pub nic_per_gpu: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PortRules {
    pub count: Option<u64>,
    pub count_min: Option<u64>,
    pub state: Vec<String>,
    pub rate_min_gbps: Option<f64>,
    pub width: Vec<String>,
    pub speed: Vec<String>,
    pub pcie_gen_min: Option<u64>,
    pub pcie_width_min: Option<u64>,
    pub fw_ver: Vec<String>,
    pub all_alike: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RoceRules {
    pub gid: Option<String>,
    pub mtu: Option<u64>,
    pub pfc_priorities: Option<Vec<u64>>,
    pub ecn_priorities: Option<Vec<u64>>,
    pub trust: Option<String>,
    pub global_pause: Option<bool>,
}

/// A policy that could not be read: the file, the line, the key, what is wrong and, for an
/// unknown key, the nearest valid one.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{file}:{line}: {key}: {msg}")]
pub struct PolicyError {
    pub file: String,
    pub line: usize,
    /// `section.key` (or the section alone).
    pub key: String,
    pub msg: String,
}

/// A value as the walker sees it, with its line.
struct At<'a> {
    file: &'a str,
    text: &'a str,
}

impl At<'_> {
    fn line(&self, offset: usize) -> usize {
        self.text[..offset.min(self.text.len())]
            .bytes()
            .filter(|b| *b == b'\n')
            .count()
            + 1
    }
    fn err(&self, offset: usize, key: &str, msg: impl Into<String>) -> PolicyError {
        PolicyError {
            file: self.file.to_string(),
            line: self.line(offset),
            key: key.to_string(),
            msg: msg.into(),
        }
    }
}

/// Every key `require` (`[policy] require`, `--require`) can name: a policy key
/// (`counters.max_per_hour`) or its section (`host`), and each probe rule that says what it
/// could not read (`links.port_state_unknown`) or the area it is noted under (`gdr.acs`).
/// A key beyond a policy key (`counters.max_per_hour.symbol_error`) names one part of it.
pub fn require_keys() -> Vec<String> {
    use crate::finding::{RuleDoc, Severity, docs, not_evaluated_key};
    use crate::probe::{gdr, gids, links, nccl_env, qos, topo};
    let mut v: Vec<String> = keys().map(|k| format!("{}.{}", k.section, k.key)).collect();
    v.extend(SECTIONS.iter().map(|s| s.to_string()));
    let tables: [Vec<RuleDoc>; 6] = [
        docs(gids::RULES),
        docs(links::RULES),
        docs(gdr::RULES),
        docs(qos::RULES),
        docs(nccl_env::RULES),
        docs(topo::RULES),
    ];
    for r in tables.iter().flatten().filter(|r| r.allows(Severity::Unknown)) {
        for id in r.ids {
            v.push(id.to_string());
            v.push(not_evaluated_key(id).to_string());
        }
    }
    v.sort();
    v.dedup();
    v
}

/// A `require` key fabprobe knows, or why not (naming it, with the nearest known key):
/// a typo must not turn the requirement off without a word.
pub fn check_require(key: &str) -> Result<(), String> {
    let known = require_keys();
    let covered = |k: &str| known.iter().any(|x| x == k);
    // `counters.max_per_hour.symbol_error`: a part of a policy key that takes a table.
    let part_of_table = key.rsplit_once('.').is_some_and(|(head, tail)| {
        !tail.is_empty()
            && keys()
                .any(|k| format!("{}.{}", k.section, k.key) == head && matches!(k.kind, Kind::CounterRates))
    });
    if covered(key) || part_of_table {
        return Ok(());
    }
    Err(format!(
        "unknown require key `{key}`{}; keys: policy keys (`man fabprobe-check`, POLICY FILES), their sections, or a probe rule that can be not evaluated",
        did_you_mean(nearest(key, known.iter().map(String::as_str)))
    ))
}

/// The nearest of `candidates` to `word` (Damerau-Levenshtein), when it is near enough.
pub(crate) fn nearest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    // Ties go to a candidate with the same letters (`PBX` is `PXB` swapped, not `PIX`), then
    // to one that differs only in case (`4x` is `4X`).
    let sorted = |s: &str| {
        let mut v: Vec<char> = s.to_ascii_lowercase().chars().collect();
        v.sort_unstable();
        v
    };
    let letters = sorted(word);
    candidates
        .into_iter()
        .map(|c| {
            let d = strsim::damerau_levenshtein(word, c);
            (d, sorted(c) != letters, !c.eq_ignore_ascii_case(word), c)
        })
        .filter(|(d, _, _, c)| *d <= (c.len().max(word.len()) / 3).max(2))
        .min_by_key(|(d, a, b, _)| (*d, *a, *b))
        .map(|(_, _, _, c)| c)
}

fn did_you_mean(s: Option<&str>) -> String {
    s.map(|s| format!("; did you mean `{s}`?")).unwrap_or_default()
}

/// A parsed value of a known key.
enum Val {
    Bool(bool),
    Int(i64),
    Num(f64),
    Str(String),
    StrList(Vec<String>),
    IntList(Vec<i64>),
    Counters(BTreeMap<String, f64>),
    Tolerances(BTreeMap<String, Tolerance>),
}

/// A field of [`Policy`] a key's value is stored in: `None` for a value of another kind
/// (never, after `check_value`; the key sweep's test would see the key change nothing).
trait FromVal: Sized {
    fn from_val(v: Val) -> Option<Self>;
}

macro_rules! from_val {
    ($t:ty, $variant:ident) => {
        impl FromVal for $t {
            fn from_val(v: Val) -> Option<Self> {
                match v {
                    Val::$variant(x) => Some(x),
                    _ => None,
                }
            }
        }
    };
}

from_val!(bool, Bool);
from_val!(f64, Num);
from_val!(String, Str);
from_val!(Vec<String>, StrList);
from_val!(BTreeMap<String, f64>, Counters);
from_val!(BTreeMap<String, Tolerance>, Tolerances);

impl FromVal for u64 {
    fn from_val(v: Val) -> Option<Self> {
        match v {
            Val::Int(i) => u64::try_from(i).ok(),
            _ => None,
        }
    }
}

impl FromVal for Vec<u64> {
    fn from_val(v: Val) -> Option<Self> {
        match v {
            Val::IntList(l) => l.into_iter().map(|i| u64::try_from(i).ok()).collect(),
            _ => None,
        }
    }
}

impl<T: FromVal> FromVal for Option<T> {
    fn from_val(v: Val) -> Option<Self> {
        T::from_val(v).map(Some)
    }
}

/// Whether a policy's field holds a rule: a value, a non-empty list or table, `true`.
trait IsSet {
    fn is_set(&self) -> bool;
}

impl<T> IsSet for Option<T> {
    fn is_set(&self) -> bool {
        self.is_some()
    }
}

impl<T> IsSet for Vec<T> {
    fn is_set(&self) -> bool {
        !self.is_empty()
    }
}

impl<V> IsSet for BTreeMap<String, V> {
    fn is_set(&self) -> bool {
        !self.is_empty()
    }
}

impl IsSet for String {
    fn is_set(&self) -> bool {
        !self.is_empty()
    }
}

impl IsSet for bool {
    fn is_set(&self) -> bool {
        *self
    }
}

fn type_name(v: &DeValue) -> &'static str {
    match v {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a date",
        DeValue::Array(_) => "an array",
        DeValue::Table(_) => "a table",
    }
}

fn as_int(v: &DeValue) -> Option<i64> {
    match v {
        DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix()).ok(),
        _ => None,
    }
}

fn as_num(v: &DeValue) -> Option<f64> {
    match v {
        DeValue::Integer(_) => as_int(v).map(|i| i as f64),
        DeValue::Float(f) => f.as_str().parse().ok(),
        _ => None,
    }
}

fn check_value(at: &At, offset: usize, path: &str, kind: Kind, v: &DeValue) -> Result<Val, PolicyError> {
    let wrong = || wrong_type(at, offset, path, kind, v);
    match kind {
        Kind::Bool => match v {
            DeValue::Boolean(b) => Ok(Val::Bool(*b)),
            _ => Err(wrong()),
        },
        Kind::Int { .. } | Kind::IntOneOf(_) => {
            let DeValue::Integer(_) = v else {
                return Err(wrong());
            };
            let i = as_int(v).ok_or_else(|| impossible(at, offset, path, kind, "(too large)".into()))?;
            let fits = match kind {
                Kind::Int { min, max } => i >= min && i <= max,
                Kind::IntOneOf(allowed) => allowed.contains(&i),
                _ => unreachable!("matched above"),
            };
            if !fits {
                return Err(impossible(at, offset, path, kind, i.to_string()));
            }
            Ok(Val::Int(i))
        }
        Kind::Num { min, max } => {
            let n = as_num(v).ok_or_else(wrong)?;
            if !(n >= min && n <= max) {
                return Err(impossible(at, offset, path, kind, n.to_string()));
            }
            Ok(Val::Num(n))
        }
        Kind::Str(allowed) => {
            let DeValue::String(s) = v else {
                return Err(wrong());
            };
            one_of(at, offset, path, kind, allowed, s)?;
            Ok(Val::Str(s.to_string()))
        }
        Kind::StrList(allowed) => str_list(at, offset, path, kind, allowed, v).map(Val::StrList),
        Kind::IntList { min, max } => {
            let DeValue::Array(a) = v else { return Err(wrong()) };
            int_list(at, path, kind, (min, max), a).map(Val::IntList)
        }
        Kind::Tolerances => tolerances(at, offset, path, v).map(Val::Tolerances),
        Kind::CounterRates => {
            let DeValue::Table(t) = v else { return Err(wrong()) };
            counter_rates(at, path, t).map(Val::Counters)
        }
    }
}

/// `expected <kind>, found <what v is>`.
fn wrong_type(at: &At, offset: usize, path: &str, kind: Kind, v: &DeValue) -> PolicyError {
    at.err(
        offset,
        path,
        format!("expected {}, found {}", kind.describe(), type_name(v)),
    )
}

/// `impossible value <shown>: expected <kind>`.
fn impossible(at: &At, offset: usize, path: &str, kind: Kind, shown: String) -> PolicyError {
    at.err(
        offset,
        path,
        format!("impossible value {shown}: expected {}", kind.describe()),
    )
}

/// A string that must be one of `allowed` (any string when it is empty), with the nearest
/// allowed one suggested.
fn one_of(
    at: &At,
    offset: usize,
    path: &str,
    kind: Kind,
    allowed: &[&str],
    s: &str,
) -> Result<(), PolicyError> {
    if allowed.is_empty() || allowed.contains(&s) {
        return Ok(());
    }
    Err(at.err(
        offset,
        path,
        format!(
            "impossible value \"{s}\": expected {}{}",
            kind.describe(),
            did_you_mean(nearest(s, allowed.iter().copied()))
        ),
    ))
}

/// `expected <kind>, found a list holding <what item is>`.
fn wrong_item(at: &At, path: &str, kind: Kind, item: &toml::Spanned<DeValue>) -> PolicyError {
    at.err(
        item.span().start,
        path,
        format!(
            "expected {}, found a list holding {}",
            kind.describe(),
            type_name(item.get_ref())
        ),
    )
}

/// A non-empty list of strings, each one of `allowed` when that is not empty.
fn str_list(
    at: &At,
    offset: usize,
    path: &str,
    kind: Kind,
    allowed: &[&str],
    v: &DeValue,
) -> Result<Vec<String>, PolicyError> {
    let DeValue::Array(a) = v else {
        return Err(wrong_type(at, offset, path, kind, v));
    };
    let mut out = Vec::new();
    for item in a.iter() {
        let DeValue::String(s) = item.get_ref() else {
            return Err(wrong_item(at, path, kind, item));
        };
        one_of(at, item.span().start, path, kind, allowed, s)?;
        out.push(s.to_string());
    }
    if out.is_empty() {
        return Err(at.err(
            offset,
            path,
            "an empty list allows nothing; leave the key out to check nothing",
        ));
    }
    Ok(out)
}

/// A list of integers, each in `min..=max` and listed once.
fn int_list(
    at: &At,
    path: &str,
    kind: Kind,
    (min, max): (i64, i64),
    a: &DeArray,
) -> Result<Vec<i64>, PolicyError> {
    let mut out = Vec::new();
    for item in a.iter() {
        let off = item.span().start;
        let Some(i) = as_int(item.get_ref()) else {
            return Err(wrong_item(at, path, kind, item));
        };
        if i < min || i > max {
            return Err(impossible(at, off, path, kind, i.to_string()));
        }
        if out.contains(&i) {
            return Err(at.err(off, path, format!("{i} is listed twice")));
        }
        out.push(i);
    }
    Ok(out)
}

/// A table of known counter name = increase per hour, each 0 or more.
fn counter_rates(at: &At, path: &str, t: &DeTable) -> Result<BTreeMap<String, f64>, PolicyError> {
    let names = counter_names();
    let mut out = BTreeMap::new();
    for (k, val) in t.iter() {
        let name = k.get_ref().as_ref();
        let kpath = format!("{path}.{name}");
        if !names.contains(&name) {
            return Err(at.err(
                k.span().start,
                &kpath,
                format!(
                    "unknown counter{}",
                    did_you_mean(nearest(name, names.iter().copied()))
                ),
            ));
        }
        let n = as_num(val.get_ref()).ok_or_else(|| {
            at.err(
                val.span().start,
                &kpath,
                format!(
                    "expected a number (increase per hour), found {}",
                    type_name(val.get_ref())
                ),
            )
        })?;
        if !(n >= 0.0 && n.is_finite()) {
            return Err(at.err(
                val.span().start,
                &kpath,
                format!("impossible value {n}: expected a number of 0 or more"),
            ));
        }
        out.insert(name.to_string(), n);
    }
    Ok(out)
}

/// `[sweep] tolerance = { memory_gib = "2%", cpu_count = 0 }`: each key a numeric
/// fingerprint key, each value a number of 0 or more or `"N%"` with N from 0 to 100.
fn tolerances(
    at: &At,
    offset: usize,
    path: &str,
    v: &DeValue,
) -> Result<BTreeMap<String, Tolerance>, PolicyError> {
    let DeValue::Table(t) = v else {
        return Err(at.err(
            offset,
            path,
            format!("expected {}, found {}", Kind::Tolerances.describe(), type_name(v)),
        ));
    };
    let mut out = BTreeMap::new();
    for (k, val) in t.iter() {
        let name = k.get_ref().as_ref();
        let kpath = format!("{path}.{name}");
        if !NUMERIC_KEYS.contains(&name) {
            return Err(at.err(
                k.span().start,
                &kpath,
                format!(
                    "not a numeric fingerprint key{}; they are: {}",
                    did_you_mean(nearest(name, NUMERIC_KEYS.iter().copied())),
                    NUMERIC_KEYS.join(", ")
                ),
            ));
        }
        let off = val.span().start;
        let tol = match val.get_ref() {
            DeValue::String(s) => Tolerance::parse_percent(s).ok_or_else(|| {
                at.err(
                    off,
                    &kpath,
                    format!("impossible value \"{s}\": expected \"N%\" with N from 0 to 100"),
                )
            })?,
            other => {
                let n = as_num(other).ok_or_else(|| {
                    at.err(
                        off,
                        &kpath,
                        format!("expected a number or \"N%\", found {}", type_name(other)),
                    )
                })?;
                if !(n >= 0.0 && n.is_finite()) {
                    return Err(at.err(off, &kpath, format!("impossible value {n}: expected 0 or more")));
                }
                Tolerance::Abs(n)
            }
        };
        out.insert(name.to_string(), tol);
    }
    Ok(out)
}

/// Parse a policy. `file` is what errors name (a path, or `checks/<name>.toml` for a
/// built-in one); `default_name` is used when `[policy] name` is not set.
pub(crate) fn parse(text: &str, file: &str, default_name: &str, source: &str) -> Result<Policy, PolicyError> {
    let at = At { file, text };
    let doc = DeTable::parse(text).map_err(|e| {
        let off = e.span().map(|s| s.start).unwrap_or(0);
        at.err(off, "(syntax)", format!("not valid TOML: {}", e.message().trim()))
    })?;
    let mut p = Policy {
        name: default_name.to_string(),
        source: source.to_string(),
        probe_findings: true,
        ..Policy::default()
    };
    for (sect, sval) in doc.get_ref().iter() {
        let sname = sect.get_ref().as_ref();
        let t = section_table(&at, sname, sect.span().start, sval.get_ref())?;
        for (k, v) in t.iter() {
            let kname = k.get_ref().as_ref();
            let path = format!("{sname}.{kname}");
            let Some(spec) = keys().find(|s| s.section == sname && s.key == kname) else {
                return Err(at.err(k.span().start, &path, unknown_key(sname, kname)));
            };
            let val = check_value(&at, v.span().start, &path, spec.kind, v.get_ref())?;
            (spec.set)(&mut p, val);
        }
    }
    check_together(&at, &p)?;
    Ok(p)
}

/// A top-level entry as a section's table: a known section, and a table.
fn section_table<'v, 'i>(
    at: &At,
    sname: &str,
    soff: usize,
    sval: &'v DeValue<'i>,
) -> Result<&'v DeTable<'i>, PolicyError> {
    if !SECTIONS.contains(&sname) {
        // A key written at the top level instead of under its section.
        let home = keys().find(|k| k.key == sname).map(|k| k.section);
        let msg = match home {
            Some(h) => format!("`{sname}` belongs under [{h}]"),
            None => format!(
                "unknown section{}",
                did_you_mean(nearest(sname, SECTIONS.iter().copied()))
            ),
        };
        return Err(at.err(soff, sname, msg));
    }
    let DeValue::Table(t) = sval else {
        return Err(at.err(
            soff,
            sname,
            format!("expected a table [{sname}], found {}", type_name(sval)),
        ));
    };
    Ok(t)
}

/// Why `kname` is no key of [`sname`]: the section it belongs in, the nearest key, or the
/// keys the section takes.
fn unknown_key(sname: &str, kname: &str) -> String {
    let near = nearest(kname, keys().filter(|s| s.section == sname).map(|s| s.key));
    let elsewhere = keys().find(|s| s.key == kname).map(|s| s.section);
    // A key that exists as written in another section was put in the wrong one.
    match (elsewhere, near) {
        (Some(h), _) => format!("unknown key in [{sname}]; `{kname}` belongs under [{h}]"),
        (None, Some(n)) => format!("unknown key; did you mean `{n}`?"),
        (None, None) => format!(
            "unknown key; [{sname}] takes: {}",
            keys()
                .filter(|s| s.section == sname)
                .map(|s| s.key)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Keys that are each possible but impossible together, and `require` entries.
fn check_together(at: &At, p: &Policy) -> Result<(), PolicyError> {
    let text = at.text;
    for (sect, rules) in [("ib", &p.ib), ("roce", &p.roce)] {
        if let (Some(c), Some(m)) = (rules.count, rules.count_min)
            && c < m
        {
            let off = find_key_offset(text, "count_min");
            return Err(at.err(
                off,
                &format!("{sect}.count_min"),
                format!("impossible: count = {c} is below count_min = {m}"),
            ));
        }
    }
    if p.gpu.nic_per_gpu == Some(true) && p.gpu.count == Some(0) {
        let off = find_key_offset(text, "nic_per_gpu");
        return Err(at.err(off, "gpu.nic_per_gpu", "impossible with gpu.count = 0"));
    }
    for r in &p.require {
        if let Err(msg) = check_require(r) {
            return Err(at.err(find_key_offset(text, "require"), "policy.require", msg));
        }
    }
    Ok(())
}

fn find_key_offset(text: &str, key: &str) -> usize {
    text.find(&format!("\n{key}")).map(|i| i + 1).unwrap_or(0)
}

/// How `--policy` was resolved.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Invalid(#[from] PolicyError),
    #[error("cannot read policy {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "no policy named `{name}`{suggestion}; built-in policies: {}",
        builtin_names()
    )]
    Unknown { name: String, suggestion: String },
}

pub(crate) fn builtin_names() -> String {
    BUILTIN.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

/// `--policy NAME|FILE`: a path (it exists, has a `/`, or ends in `.toml`) is read; anything
/// else must be a built-in name.
pub fn load(arg: &str) -> Result<Policy, LoadError> {
    let path = Path::new(arg);
    let looks_like_path = arg.contains('/') || arg.ends_with(".toml") || path.exists();
    if !looks_like_path {
        let Some((name, text)) = BUILTIN.iter().find(|(n, _)| *n == arg) else {
            return Err(LoadError::Unknown {
                name: arg.to_string(),
                suggestion: did_you_mean(nearest(arg, BUILTIN.iter().map(|(n, _)| *n))),
            });
        };
        return Ok(parse(
            text,
            &format!("checks/{name}.toml"),
            name,
            &format!("builtin:{name}"),
        )?);
    }
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Io {
        path: arg.to_string(),
        source,
    })?;
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| arg.to_string());
    Ok(parse(&text, arg, &stem, arg)?)
}

/// The POLICY FILES section of the man page, generated from [`keys`].
pub(crate) fn language_doc() -> String {
    let mut s = String::from("POLICY FILES\n");
    let intro = format!(
        "TOML, read strictly: an unknown section or key, a wrong type or an impossible value is \
         an error naming the file, line and key (with the nearest valid key). Every key is \
         optional; an unset key checks nothing. Built-in policies (--policy NAME, the files in \
         checks/): {}. [ib] judges the ports whose link layer is InfiniBand, [roce] those on \
         Ethernet. A rule that cannot be judged (its data or its probe is missing) gives \
         check.not_evaluated (warn), never a pass.",
        builtin_names()
    );
    for line in wrap(&intro, 74) {
        s.push_str(&format!("  {line}\n"));
    }
    for sect in SECTIONS {
        s.push_str(&format!("\n  [{sect}]\n"));
        for k in keys().filter(|k| k.section == *sect) {
            let mut first = true;
            for line in wrap(&k.kind.describe(), 54) {
                if first {
                    s.push_str(&format!("    {:<20}{line}\n", k.key));
                    first = false;
                } else {
                    s.push_str(&format!("{:24}{line}\n", ""));
                }
            }
            for line in wrap(k.doc, 52) {
                s.push_str(&format!("{:26}{line}\n", ""));
            }
        }
    }
    s
}

fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for w in text.split_whitespace() {
        let cur = lines.last_mut().expect("one line");
        if !cur.is_empty() && cur.len() + 1 + w.len() > width {
            lines.push(w.to_string());
        } else {
            if !cur.is_empty() {
                cur.push(' ');
            }
            cur.push_str(w);
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> PolicyError {
        parse(text, "t.toml", "t", "t.toml").unwrap_err()
    }

    #[test]
    fn builtin_policies_parse() {
        for (name, _) in BUILTIN {
            let p = load(name).unwrap();
            assert_eq!(p.source, format!("builtin:{name}"));
            assert_eq!(&p.name, name);
        }
        let p = load("dgx-h100").unwrap();
        assert_eq!(p.gpu.count, Some(8));
        assert_eq!(p.gpu.nvlink_min, Some(18));
        assert_eq!(p.ib.count, Some(8));
        assert_eq!(p.ib.rate_min_gbps, Some(400.0));
        assert_eq!(p.ib.pcie_gen_min, Some(5));
        assert_eq!(p.ib.pcie_width_min, Some(16));
        assert_eq!(p.gpu.nic_path_max.as_deref(), Some("PXB"));
        let r = load("roce-dcqcn").unwrap();
        assert_eq!(r.roce_qos.pfc_priorities, Some(vec![3]));
        assert_eq!(r.roce_qos.gid.as_deref(), Some("ipv4-v2"));
    }

    #[test]
    fn unknown_key_names_file_line_key_and_the_nearest() {
        let e = err("# c\n[ib]\ncount = 8\nrate_mn_gbps = 400\n");
        assert_eq!(
            (e.file.as_str(), e.line, e.key.as_str()),
            ("t.toml", 4, "ib.rate_mn_gbps")
        );
        assert!(e.msg.contains("did you mean `rate_min_gbps`"), "{e}");
        assert_eq!(
            e.to_string(),
            "t.toml:4: ib.rate_mn_gbps: unknown key; did you mean `rate_min_gbps`?"
        );
        let e = err("[gpus]\ncount = 8\n");
        assert!(e.msg.contains("did you mean `gpu`"), "{e}");
        assert_eq!(e.line, 1);
        let e = err("[ib]\nnvlink_min = 18\n");
        assert!(e.msg.contains("belongs under [gpu]"), "{e}");
        let e = err("[counters.max_per_hour]\nsymbol_errors = 3\n");
        assert_eq!(e.key, "counters.max_per_hour.symbol_errors");
        assert!(e.msg.contains("did you mean `symbol_error`"), "{e}");
        assert_eq!(e.line, 2);
    }

    #[test]
    fn wrong_type_and_impossible_values() {
        let e = err("[gpu]\n\ncount = \"8\"\n");
        assert_eq!((e.line, e.key.as_str()), (3, "gpu.count"));
        assert!(
            e.msg.contains("expected an integer from 0 to 64, found a string"),
            "{e}"
        );
        let e = err("[ib]\npcie_width_min = 12\n");
        assert!(e.msg.contains("impossible value 12"), "{e}");
        let e = err("[ib]\nrate_min_gbps = -5\n");
        assert!(e.msg.contains("impossible value -5"), "{e}");
        let e = err("[ib]\nwidth = [\"4x\"]\n");
        assert!(e.msg.contains("did you mean `4X`"), "{e}");
        let e = err("[gpu]\nnic_path_max = \"PBX\"\n");
        assert!(e.msg.contains("did you mean `PXB`"), "{e}");
        let e = err("[roce]\npfc_priorities = [3, 9]\n");
        assert!(e.msg.contains("impossible value 9"), "{e}");
        let e = err("[ib]\ncount = 4\ncount_min = 8\n");
        assert_eq!((e.line, e.key.as_str()), (3, "ib.count_min"));
        let e = err("[ib]\nstate = []\n");
        assert!(e.msg.contains("empty list"), "{e}");
        let e = err("[ib\ncount = 1\n");
        assert!(e.msg.contains("not valid TOML"), "{e}");
        let e = err("gpu = 3\n");
        assert!(e.msg.contains("expected a table"), "{e}");
        let e = err("nvlink_min = 3\n");
        assert!(e.msg.contains("belongs under [gpu]"), "{e}");
    }

    #[test]
    fn unknown_builtin_name_is_suggested() {
        let e = load("dgx-h10").unwrap_err().to_string();
        assert!(e.contains("did you mean `dgx-h100`"), "{e}");
    }

    #[test]
    fn every_key_is_documented_in_the_language_section() {
        let doc = language_doc();
        for k in keys() {
            assert!(doc.contains(&format!("    {:<20}", k.key)), "{} missing", k.key);
        }
        for s in SECTIONS {
            assert!(doc.contains(&format!("[{s}]")));
        }
    }
}
