//! The vocabulary every layer speaks: a finding (what, how bad, the evidence, the fix) and
//! its severity. It sits below the probes so they need not import the judgement layer.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The version of the JSON envelope that carries reports and their findings; bumped when
/// a field is removed or changes meaning, additions keep it. Here, below `check` and
/// `render`, because both read it (`sweep` refuses other versions).
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Pass,
    /// The rule could not be evaluated (a fact unread: permissions, a snapshot without it):
    /// said beside the verdict, never scored as a pass, a warn or a fail.
    Unknown,
    Warn,
    Fail,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Pass => "pass",
            Severity::Unknown => "unknown",
            Severity::Warn => "warn",
            Severity::Fail => "fail",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// Stable identifier for scripts, e.g. `topo.numa_node_unknown`.
    pub id: String,
    pub severity: Severity,
    /// What the finding is about: a device, a port, a pair (`GPU0-mlx5_3`).
    pub subject: String,
    /// One human line.
    pub message: String,
    /// The figures the verdict rests on (counter values, sysfs values, paths).
    #[serde(default)]
    pub evidence: BTreeMap<String, serde_json::Value>,
    /// What a person should try.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// An `unknown` finding with nothing to judge: the fact whose absence left it so, which
    /// `check` folds its not-evaluated keys by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing: Option<MissingFact>,
}

/// A fact whose absence leaves rules with nothing to judge. Typed where the reason is
/// written, so `check` folds the keys that follow from one fact by it, whatever the words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MissingFact {
    /// Neither an NVIDIA GPU nor an RDMA device: a driver not loaded.
    GpuAndRdma,
    /// No RDMA device at all (no InfiniBand support in the kernel, an empty class).
    RdmaDevice,
    /// No GPU.
    Gpu,
    /// No RoCE netdev: no Ethernet RDMA port.
    RoceNetdev,
    /// No InfiniBand port.
    InfinibandPort,
    /// No QoS reading (DCB, pause counters, ECN sysfs) of any netdev `qos` looked at.
    QosReading,
}

impl MissingFact {
    /// Every fact, widest first.
    pub const ALL: [MissingFact; 6] = [
        MissingFact::GpuAndRdma,
        MissingFact::RdmaDevice,
        MissingFact::Gpu,
        MissingFact::RoceNetdev,
        MissingFact::InfinibandPort,
        MissingFact::QosReading,
    ];

    /// Whether this fact missing leaves `other` missing too (no RDMA device at all leaves
    /// no RoCE netdev and no InfiniBand port).
    pub fn covers(self, other: MissingFact) -> bool {
        use MissingFact::*;
        self == other
            || self == GpuAndRdma
            || (self == RdmaDevice && matches!(other, RoceNetdev | InfinibandPort))
    }

    /// How many other facts this one covers: the widest names a fold.
    pub fn width(self) -> usize {
        MissingFact::ALL
            .iter()
            .filter(|o| **o != self && self.covers(**o))
            .count()
    }

    /// The fact in words, as the reasons that rest on it begin it.
    pub fn words(self) -> &'static str {
        match self {
            MissingFact::GpuAndRdma => "no NVIDIA GPU and no RDMA device",
            MissingFact::RdmaDevice => "no RDMA devices",
            MissingFact::Gpu => "0 GPUs found",
            MissingFact::RoceNetdev => "no RoCE netdev",
            MissingFact::InfinibandPort => "no InfiniBand ports",
            MissingFact::QosReading => "no QoS reading",
        }
    }
}

impl Finding {
    pub fn new(
        id: &str,
        severity: Severity,
        subject: impl Into<String>,
        message: impl Into<String>,
    ) -> Finding {
        Finding {
            id: id.to_string(),
            severity,
            subject: subject.into(),
            message: message.into(),
            evidence: BTreeMap::new(),
            fix: None,
            missing: None,
        }
    }
    pub fn evidence(mut self, key: &str, value: impl Into<serde_json::Value>) -> Finding {
        self.evidence.insert(key.to_string(), value.into());
        self
    }
    pub fn fix(mut self, fix: impl Into<String>) -> Finding {
        self.fix = Some(fix.into());
        self
    }
    /// The fact whose absence left nothing to judge (an `unknown` finding's).
    pub fn missing(mut self, fact: impl Into<Option<MissingFact>>) -> Finding {
        self.missing = fact.into();
        self
    }
}

/// A command's report whose verdicts become the envelope's findings: the one way a command
/// that judges in verdicts of its own (`nccl-log`'s report, `ring`'s report) turns them into
/// findings, implemented beside each verdict type. The probes and `check` make findings
/// directly, through their rule tables.
pub trait ToFindings {
    /// The findings, in the report's order.
    fn findings(&self) -> Vec<Finding>;
}

/// The verdict of what was evaluated: the worst severity among findings, `Pass` when there
/// are none or only `Unknown` ones (those are said beside the verdict, not scored).
pub fn worst(findings: &[Finding]) -> Severity {
    findings
        .iter()
        .map(|f| f.severity)
        .filter(|s| *s != Severity::Unknown)
        .max()
        .unwrap_or(Severity::Pass)
}

/// The key a not-evaluated finding is listed under (what `check --require` names to make it
/// fail): the policy area the unread fact decides, else the finding's own id.
pub(crate) fn not_evaluated_key(id: &str) -> &str {
    const KEYS: &[(&str, &str)] = &[
        // A snapshot without fabprobe/facts.json: memlock and device holders unread.
        ("host.facts_unavailable", "host"),
        // Config space past 64 bytes needs root: ACS of the bridges NCCL's pairs cross unread.
        ("gdr.acs_unknown", "gdr.acs"),
        // No peer memory seen and a DMA-BUF prerequisite unread: GDR neither on nor off.
        ("gdr.unknown", "gdr.ready"),
    ];
    KEYS.iter().find(|(i, _)| *i == id).map_or(id, |(_, k)| k)
}

/// A probe that saw nothing it judges (no RDMA device, no GPU, no RoCE netdev: a driver
/// that did not load) says so with an `unknown` finding `<probe>.nothing_to_judge`: its
/// verdict is NOT EVALUATED (exit 3), never a pass. `fact` is the missing fact it rests on
/// (`None` only for a reason of its own, not one of [`MissingFact`]).
pub(crate) fn nothing_to_judge(
    probe: &str,
    subject: &str,
    fact: Option<MissingFact>,
    why: impl Into<String>,
) -> Finding {
    Finding::new(
        &format!("{probe}.nothing_to_judge"),
        Severity::Unknown,
        subject,
        why,
    )
    .missing(fact)
}

/// The one wording of a host where neither an NVIDIA GPU nor an RDMA device shows up:
/// every probe with nothing to judge for that one fact says it so, and `check` lists the
/// keys it leaves unjudged on one line.
pub(crate) const NO_GPU_NO_RDMA: &str =
    "nothing to judge: no NVIDIA GPU and no RDMA device showed up (is a driver not loaded?)";

/// The finding that says a probe judged nothing, if there is one.
pub(crate) fn nothing_judged(findings: &[Finding]) -> Option<&Finding> {
    findings
        .iter()
        .find(|f| f.severity == Severity::Unknown && f.id.ends_with(".nothing_to_judge"))
}

/// The findings that say a rule could not be evaluated, in the probe's order.
pub(crate) fn not_evaluated(findings: &[Finding]) -> impl Iterator<Item = &Finding> {
    findings.iter().filter(|f| f.severity == Severity::Unknown)
}

/// One rule of a probe: the finding ids it writes, the severities it gives and what it
/// judges, beside the function that judges. A probe keeps its rules in one table that its
/// `findings` (and so `check`), the man page's FINDINGS list and tests/rules.rs all read,
/// so a rule is added in one place. `J` is the probe's own judge signature.
pub struct Rule<J> {
    /// Usually one id; a rule that repeats another probe's verdict names those ids.
    pub ids: &'static [&'static str],
    /// The severities its findings may have: `[Warn]`, `[Fail]`, `[Warn, Fail]` (the text
    /// says which when), or `[Unknown]` for a rule that says what could not be read. Typed,
    /// so a misspelling does not compile; the man page writes them `warn|fail`.
    pub severity: &'static [Severity],
    /// One line for the man page: what breaks the rule.
    pub about: &'static str,
    pub judge: J,
}

/// A rule without its judge: what the man page and the tests read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuleDoc {
    pub ids: &'static [&'static str],
    pub severity: &'static [Severity],
    pub about: &'static str,
}

impl RuleDoc {
    /// The severities as the man page's FINDINGS list writes them: `warn|fail`.
    pub fn severity_text(&self) -> String {
        let words: Vec<&str> = self.severity.iter().map(|s| s.as_str()).collect();
        words.join("|")
    }

    /// Whether a finding of this rule may have severity `s`.
    pub fn allows(&self, s: Severity) -> bool {
        self.severity.contains(&s)
    }
}

/// The documentation of every rule in a table, in its order.
pub fn docs<J>(rules: &[Rule<J>]) -> Vec<RuleDoc> {
    rules
        .iter()
        .map(|r| RuleDoc {
            ids: r.ids,
            severity: r.severity,
            about: r.about,
        })
        .collect()
}

/// Runs, in table order, every rule whose judge `pick` selects for this kind of item (a
/// port, a device, a setting, the whole report) on `item`. Each probe's `findings` then
/// says only which items it walks, and the order of findings stays the table's.
pub(crate) fn judge_each<J, T: ?Sized, F: Fn(&T, &mut Vec<Finding>)>(
    rules: &[Rule<J>],
    pick: impl Fn(&J) -> Option<F>,
    item: &T,
    out: &mut Vec<Finding>,
) {
    for rule in rules {
        if let Some(j) = pick(&rule.judge) {
            j(item, out);
        }
    }
}

/// One spelling for each kind of subject and unit, in every command, table, JSON and metric
/// label (issue 42): a port is `mlx5_3/1` (device, `/`, port number, as sysfs nests it), a
/// device its kernel name (`mlx5_3`), a GPU its NVML label (`GPU2`), a GPU-NIC pair
/// `GPU2-mlx5_3` (never a matrix position such as `NIC3`); a link rate `400 Gb/s (4X NDR)` (the kernel's `Gb/sec` string stays in the
/// evidence, verbatim); a count agrees with its noun (`1 process`, `2 processes`).
pub mod spell {
    use std::fmt::Display;

    /// `mlx5_3/1`.
    pub fn port(device: &str, port: impl Display) -> String {
        format!("{device}/{port}")
    }

    /// `400 Gb/s`, `2.5 Gb/s`: a link rate in bits, the unit `Gb/s` whatever source said it.
    pub fn gbps(v: f64) -> String {
        format!("{} Gb/s", trim_float(v))
    }

    /// `400 Gb/s (4X NDR)`, `10 Gb/s (4X)`: a parsed port rate with its lanes and speed.
    pub fn rate(gbps_v: f64, lanes: Option<u32>, speed: Option<&str>) -> String {
        let width = lanes.map(|l| format!("{l}X"));
        match (width, speed) {
            (Some(w), Some(s)) => format!("{} ({w} {s})", gbps(gbps_v)),
            (Some(w), None) => format!("{} ({w})", gbps(gbps_v)),
            (None, Some(s)) => format!("{} ({s})", gbps(gbps_v)),
            (None, None) => gbps(gbps_v),
        }
    }

    /// `1 process`, `3 processes`: `n` with the noun's singular or plural.
    pub fn count(n: usize, one: &str, many: &str) -> String {
        format!("{n} {}", if n == 1 { one } else { many })
    }

    fn trim_float(v: f64) -> String {
        if v.fract() == 0.0 {
            format!("{v:.0}")
        } else {
            let s = format!("{v:.3}");
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn spellings() {
            assert_eq!(port("mlx5_3", 1), "mlx5_3/1");
            assert_eq!(gbps(400.0), "400 Gb/s");
            assert_eq!(gbps(2.5), "2.5 Gb/s");
            assert_eq!(rate(200.0, Some(4), Some("HDR")), "200 Gb/s (4X HDR)");
            assert_eq!(rate(10.0, Some(4), None), "10 Gb/s (4X)");
            assert_eq!(count(1, "process", "processes"), "1 process");
            assert_eq!(count(0, "node", "nodes"), "0 nodes");
        }
    }
}
