//! `sweep`: merge many nodes' `check --format json` reports. Which nodes failed and why
//! (grouped by cause), which differ from the majority of their peers on what should be
//! uniform (the reports' fingerprints), which reports are missing or unreadable, and the
//! Slurm drain lines for the bad nodes.
//!
//! Streaming: [`Sweeper::add`] keeps a node's verdict, failing findings and fingerprint
//! (interned), never the report itself, so memory grows with nodes x fingerprint keys only.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;

use serde::de::{Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ringsweep, Finding, Severity};
use crate::finding::spell::count as plural;
use crate::finding::SCHEMA_VERSION;

/// Every field optional and loosely typed, read in one pass: a report of another version
/// or schema still says which, and its hostname, without a second parse (a report can be
/// streamed from a 200 MB line, which cannot be read twice).
#[derive(Deserialize)]
struct RawReport {
    #[serde(default)]
    schema: Option<Value>,
    #[serde(default)]
    schema_version: Option<Value>,
    #[serde(default)]
    tool_version: Option<Value>,
    #[serde(default)]
    host: Option<RawHost>,
    #[serde(default)]
    data: Option<RawData>,
    #[serde(default)]
    findings: Option<Kept>,
}

#[derive(Deserialize)]
struct RawHost {
    #[serde(default)]
    hostname: Option<Value>,
}

#[derive(Default, Deserialize)]
struct RawData {
    #[serde(default)]
    verdict: Option<Value>,
    #[serde(default)]
    fingerprint: Option<BTreeMap<String, Value>>,
    /// A ring report's (`fabprobe.ring`): where to act, its size, why it ended early.
    #[serde(default)]
    drain: Option<Vec<ringsweep::RawDrain>>,
    #[serde(default)]
    ticket: Option<Vec<ringsweep::RawTicket>>,
    #[serde(default)]
    world: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    verdicts: Option<Vec<serde::de::IgnoredAny>>,
}

#[derive(Deserialize)]
struct RawFinding {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    severity: Option<Value>,
    #[serde(default)]
    subject: Option<Value>,
    #[serde(default)]
    message: Option<Value>,
}

/// One finding as the sweep keeps it: id, severity, subject, message.
#[derive(Clone, Debug, PartialEq)]
struct Kf {
    id: String,
    severity: Severity,
    subject: String,
    message: String,
}

/// The findings a sweep needs, kept while the array streams by: every fail, and the
/// first finding of the highest severity (check ranks its findings worst first, so that
/// is the report's worst cause). Pass findings are dropped as they are read.
#[derive(Default)]
struct Kept {
    fails: Vec<Kf>,
    worst: Option<Kf>,
}

fn str_of(v: &Option<Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        _ => String::new(),
    }
}

fn severity_of(v: &Option<Value>) -> Option<Severity> {
    v.clone().and_then(|v| serde_json::from_value(v).ok())
}

impl<'de> Deserialize<'de> for Kept {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Kept, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Kept;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an array of findings")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Kept, A::Error> {
                let mut k = Kept::default();
                while let Some(f) = seq.next_element::<RawFinding>()? {
                    let Some(sev) = severity_of(&f.severity) else {
                        continue;
                    };
                    if sev == Severity::Pass {
                        continue;
                    }
                    let kf = Kf {
                        id: str_of(&f.id),
                        severity: sev,
                        subject: str_of(&f.subject),
                        message: str_of(&f.message),
                    };
                    if k.worst.as_ref().is_none_or(|w| rank(w.severity) < rank(sev)) {
                        k.worst = Some(kf.clone());
                    }
                    if sev == Severity::Fail {
                        k.fails.push(kf);
                    }
                }
                Ok(k)
            }
        }
        d.deserialize_seq(V)
    }
}

/// A report the sweep can use.
struct Parsed {
    hostname: Option<String>,
    tool_version: Option<String>,
    verdict: Severity,
    fingerprint: BTreeMap<String, Value>,
    kept: Kept,
}

/// Why a report is unusable, with the hostname it gave when it gave one.
type Unusable = (Problem, String, Option<String>);

/// A serde error to the problem it shows.
fn classify(e: serde_json::Error) -> Unusable {
    use serde_json::error::Category;
    let p = match e.classify() {
        Category::Eof => (Problem::Truncated, format!("report ends early ({e})")),
        Category::Syntax => (Problem::NotJson, format!("not JSON ({e})")),
        Category::Io => {
            // The reader's own error, without serde's position.
            let io = std::io::Error::from(e);
            match io.kind() {
                std::io::ErrorKind::InvalidData => (Problem::NotUtf8, io.to_string()),
                _ => (Problem::CannotRead, format!("cannot read: {io}")),
            }
        }
        Category::Data => (
            Problem::NotACheckReport,
            format!("not a fabprobe.check report ({e})"),
        ),
    };
    (p.0, p.1, None)
}

/// A usable report: a node's check, or a ring run's (rank 0's) report.
enum Input {
    Check(Parsed),
    Ring(ringsweep::RingPart),
}

/// The envelope read, checked: schema version first (another version's shape may differ
/// anywhere), then schema, then the verdict.
fn validate(r: RawReport) -> Result<Input, Unusable> {
    let hostname = r
        .host
        .as_ref()
        .map(|h| str_of(&h.hostname))
        .filter(|h| !h.is_empty());
    let tool_version = match &r.tool_version {
        Some(Value::String(s)) => Some(s.clone()),
        _ => None,
    };
    let bad = |p: Problem, d: String| Err((p, d, hostname.clone()));
    match r.schema_version.as_ref().and_then(Value::as_u64) {
        Some(v) if v == u64::from(SCHEMA_VERSION) => {}
        Some(v) => {
            return bad(
                Problem::OtherVersion,
                format!(
                    "schema_version {v} (fabprobe {}), this sweep reads {SCHEMA_VERSION}",
                    tool_version.as_deref().unwrap_or("?")
                ),
            );
        }
        None => {
            return bad(
                Problem::NotACheckReport,
                "no schema_version: not a fabprobe report".into(),
            )
        }
    }
    match r.schema.as_ref().and_then(Value::as_str) {
        Some("fabprobe.check") => {}
        Some("fabprobe.ring") => {
            let d = r.data.unwrap_or_default();
            return Ok(Input::Ring(ringsweep::RingPart::from_raw(
                hostname,
                d.world.as_ref(),
                &d.error,
                d.verdicts.map_or(0, |v| v.len()),
                d.drain.unwrap_or_default(),
                d.ticket.unwrap_or_default(),
            )));
        }
        Some(s) => {
            return bad(
                Problem::NotACheckReport,
                format!("schema {s}, not fabprobe.check or fabprobe.ring"),
            );
        }
        None => {
            return bad(
                Problem::NotACheckReport,
                "no schema: not a fabprobe report".into(),
            )
        }
    }
    let data = r.data.unwrap_or_default();
    // `unknown`: the node saw no GPU and no RDMA device; it is listed apart, never healthy.
    if severity_of(&data.verdict) == Some(Severity::Unknown) {
        return bad(
            Problem::NothingJudged,
            "its check judged nothing: no GPU and no RDMA device showed up (a driver not loaded?)".into(),
        );
    }
    let Some(verdict) = severity_of(&data.verdict) else {
        return bad(
            Problem::NotACheckReport,
            "fabprobe.check report without data.verdict pass|warn|fail".into(),
        );
    };
    Ok(Input::Check(Parsed {
        hostname,
        tool_version,
        verdict,
        fingerprint: data.fingerprint.unwrap_or_default(),
        kept: r.findings.unwrap_or_default(),
    }))
}

/// A report's text to its envelope, or why it is unusable.
fn parse(text: &str) -> Result<Input, Unusable> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err((Problem::Missing, "empty report".into(), None));
    }
    match serde_json::from_str::<RawReport>(trimmed) {
        Ok(r) => validate(r),
        Err(e) => {
            let mut u = classify(e);
            u.2 = sniff_hostname(trimmed);
            Err(u)
        }
    }
}

/// A report streamed from a reader (bytes checked as UTF-8 on the way).
fn parse_reader(r: impl Read) -> Result<Input, Unusable> {
    let mut r = Utf8Reader::new(r);
    // serde_json reads a byte per call: a buffer keeps the checks off each byte.
    let res = serde_json::from_reader::<_, RawReport>(std::io::BufReader::with_capacity(64 << 10, &mut r));
    if r.seen == 0 {
        return Err((Problem::Missing, "empty report".into(), None));
    }
    match res {
        Ok(rep) => validate(rep),
        Err(e) => {
            let mut u = classify(e);
            u.2 = sniff_hostname(&String::from_utf8_lossy(&r.head));
            Err(u)
        }
    }
}

/// The hostname of a report that did not parse (cut short, stray bytes after it): the
/// envelope writes `"host":{"hostname":"..."` near its start.
fn sniff_hostname(text: &str) -> Option<String> {
    let head = &text[..text.len().min(8192)];
    let at = head.find("\"host\"")?;
    let rest = &head[at..];
    let h = rest.find("\"hostname\"")?;
    let after = rest[h + "\"hostname\"".len()..].trim_start().strip_prefix(':')?;
    let mut it = serde_json::Deserializer::from_str(after.trim_start()).into_iter::<String>();
    it.next()?.ok().filter(|s| !s.is_empty())
}

/// Passes bytes through, failing with `InvalidData` at the first byte that is not UTF-8,
/// and keeps the first 8 KiB for [`sniff_hostname`].
struct Utf8Reader<R> {
    inner: R,
    /// Bytes of a character cut at the end of the last read.
    carry: Vec<u8>,
    seen: u64,
    head: Vec<u8>,
}

impl<R: Read> Utf8Reader<R> {
    fn new(inner: R) -> Self {
        Utf8Reader {
            inner,
            carry: Vec::new(),
            seen: 0,
            head: Vec::new(),
        }
    }
}

impl<R: Read> Read for Utf8Reader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let at = self.seen;
        self.seen += n as u64;
        if self.head.len() < 8192 {
            let take = n.min(8192 - self.head.len());
            self.head.extend_from_slice(&buf[..take]);
        }
        let mut chunk = std::mem::take(&mut self.carry);
        chunk.extend_from_slice(&buf[..n]);
        if let Err(e) = std::str::from_utf8(&chunk) {
            // An incomplete character at the end is fine unless the input ends there.
            if e.error_len().is_some() || n == 0 {
                let off = at + e.valid_up_to() as u64 - (chunk.len() - n) as u64;
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("not UTF-8 (invalid byte at offset {off})"),
                ));
            }
            self.carry = chunk[e.valid_up_to()..].to_vec();
        }
        Ok(n)
    }
}

struct NodeRec {
    /// The name the drain line uses: `--expect`'s, else the launcher's label, else the
    /// report's hostname.
    name: String,
    /// Every report for this node: (source, verdict); `counted` is the one that counts.
    sources: Vec<(String, Severity)>,
    counted: usize,
    verdict: Severity,
    /// The failing findings of every failing report for the node (each once).
    fails: Vec<Kf>,
    /// The counted report's worst cause.
    worst: Option<Kf>,
    /// Interned value id per fingerprint key id.
    values: Vec<(u32, u32)>,
    /// Interned tool_version.
    version: u32,
}

/// What names the node a report came from, besides the report's own hostname.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hint<'a> {
    None,
    /// A pdsh/clush/srun prefix: the launcher ran the command on that host, so it wins
    /// over the hostname the report gives (containers and images often say `localhost`).
    Launcher(&'a str),
    /// A file's name: a convention, not a fact; the report's hostname wins over it.
    File(&'a str),
}

impl<'a> Hint<'a> {
    /// A launcher prefix, or nothing: what the tests and benches pass.
    pub fn launcher(l: Option<&'a str>) -> Hint<'a> {
        l.map_or(Hint::None, Hint::Launcher)
    }

    /// The name it gives (a bare `srun -l` task number names no node).
    fn name(self) -> Option<&'a str> {
        match self {
            Hint::None => None,
            Hint::Launcher(l) | Hint::File(l) => host_label(Some(l)),
        }
    }
}

/// Hostnames every container or unconfigured image reports: they name no node.
fn names_a_host(h: &str) -> bool {
    !matches!(
        h.to_ascii_lowercase().as_str(),
        "" | "localhost" | "localhost.localdomain" | "(none)"
    )
}

/// Fingerprint keys that say how the report was made, not what the node is.
const NOT_COMPARED: &[&str] = &["tool_version", "policy"];

/// The numeric fingerprint keys `check` writes (`check::run::fingerprint`): what a
/// `[sweep] tolerance` table may name.
pub(crate) const NUMERIC_KEYS: &[&str] = &[
    "cpu_count",
    "gpu_count",
    "ib_ports",
    "memory_gib",
    "nvlink_min",
    "rdma_nic_count",
    "roce_ports",
];

/// How far a numeric fingerprint value may be from the median of its hardware kind and
/// still agree with it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum Tolerance {
    /// In the key's own unit (`memory_gib = 4`).
    Abs(f64),
    /// A fraction of the median (`"1%"` is 0.01).
    Rel(f64),
}

/// What identical nodes differ by without a fault. MemTotal moves with the firmware's and
/// the kernel's reservations (crashkernel, ACPI tables): hundreds of MiB, so identical
/// nodes straddle a whole GiB; a missing DIMM is 2% or more of any GPU node's memory.
/// Counts (CPUs, GPUs, NICs, ports, NVLinks) are exact: a lost device is a difference.
pub(crate) const DEFAULT_TOLERANCES: &[(&str, Tolerance)] = &[("memory_gib", Tolerance::Rel(0.01))];

impl Tolerance {
    /// A policy's value: a number (absolute, 0 or more) or `"N%"` (0 to 100).
    pub(crate) fn parse_percent(s: &str) -> Option<Tolerance> {
        let n: f64 = s.trim().strip_suffix('%')?.trim().parse().ok()?;
        (n.is_finite() && (0.0..=100.0).contains(&n)).then_some(Tolerance::Rel(n / 100.0))
    }

    fn allows(self, median: f64, v: f64) -> bool {
        let d = (v - median).abs();
        // A hair of slack: 2016 * 0.01 must admit 20.16 exactly.
        match self {
            Tolerance::Abs(a) => d <= a + 1e-9,
            Tolerance::Rel(r) => d <= r * median.abs() + 1e-9,
        }
    }

    /// `±1%`, `±2`.
    pub fn show(self) -> String {
        match self {
            Tolerance::Abs(a) => format!("±{a}"),
            Tolerance::Rel(r) => format!("±{}%", (r * 1e4).round() / 1e2),
        }
    }
}

/// Fingerprint keys that name a node's hardware kind: nodes are compared only with nodes of
/// their kind. The port counts are a kind (a 4-NIC and an 8-NIC node are two SKUs, not one
/// misconfigured), and are not compared within it.
const KIND_KEYS: [&str; 4] = ["gpu_models", "hca_firmware", "ib_ports", "roce_ports"];
const KIND_ONLY: &[&str] = &["ib_ports", "roce_ports"];

/// `"8x NVIDIA H100 80GB HBM3, 1x X"` -> the distinct items without their counts, and with
/// `fw` the last word (a firmware version) cut too: `"2x MT4125 22.39.2048"` -> `MT4125`.
fn models(v: &Value, fw: bool) -> Vec<String> {
    let Value::String(s) = v else {
        return Vec::new();
    };
    let mut out: Vec<String> = s
        .split(", ")
        .map(|item| {
            let item = match item.split_once("x ") {
                Some((n, rest)) if !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()) => rest,
                _ => item,
            };
            let item = if fw {
                item.rsplit_once(' ').map_or(item, |(m, _)| m)
            } else {
                item
            };
            item.to_string()
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// A node's hardware kind from the values of [`KIND_KEYS`]: `NVIDIA H100 80GB HBM3 |
/// MT4125, MT4129 | 8 IB + 2 RoCE ports`. Nothing else of the report is read: the
/// fingerprints name the kinds themselves.
pub fn kind_of(gpu_models: &Value, hca_firmware: &Value, ib_ports: &Value, roce_ports: &Value) -> String {
    let gpus = models(gpu_models, false);
    let hcas = models(hca_firmware, true);
    let list = |v: Vec<String>, none: &str| {
        if v.is_empty() {
            none.to_string()
        } else {
            v.join(", ")
        }
    };
    let n = |v: &Value| v.as_u64().map_or("?".to_string(), |n| n.to_string());
    format!(
        "{} | {} | {} IB + {} RoCE ports",
        list(gpus, "no GPU"),
        list(hcas, "no HCA"),
        n(ib_ports),
        n(roce_ports)
    )
}

/// Why a report could not be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Problem {
    /// Expected (--expect) but no report, or an empty one.
    Missing,
    /// JSON that ends early.
    Truncated,
    NotJson,
    /// Bytes that are not UTF-8 (a binary, a crashed writer).
    NotUtf8,
    /// A file in a directory that could not be read.
    CannotRead,
    /// Valid JSON from another fabprobe schema version.
    OtherVersion,
    /// JSON, but not a `fabprobe.check` report.
    NotACheckReport,
    /// More than one report for a node (the worse one counts).
    Duplicate,
    /// A check that saw no GPU and no RDMA device (verdict `unknown`): neither healthy nor
    /// failed.
    NothingJudged,
}

impl Problem {
    pub fn as_str(self) -> &'static str {
        match self {
            Problem::Missing => "missing",
            Problem::Truncated => "truncated",
            Problem::NotJson => "not_json",
            Problem::NotUtf8 => "not_utf8",
            Problem::CannotRead => "cannot_read",
            Problem::OtherVersion => "other_version",
            Problem::NotACheckReport => "not_a_check_report",
            Problem::Duplicate => "duplicate",
            Problem::NothingJudged => "nothing_judged",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Unreadable {
    /// The node, when it can be told (report hostname, file name, launcher prefix).
    pub node: Option<String>,
    /// File, `stdin:LINE`, or the launcher's prefix.
    pub source: String,
    pub problem: Problem,
    pub detail: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CauseGroup {
    /// The finding id all these nodes fail on.
    pub id: String,
    pub node_count: usize,
    pub nodes: Vec<String>,
    /// One node's message, as an example.
    pub example: String,
}

/// A node that did not fail but differs from the majority of its hardware kind on a key.
/// A failed node is never one: it is listed once, under its failure.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Outlier {
    pub node: String,
    pub key: String,
    pub value: Value,
    /// The majority's value; for a key with a tolerance, the median of its kind.
    pub majority_value: Value,
    /// How far a value may be from `majority_value` and still agree (`±1%`, `±2`); null
    /// when values must be equal.
    pub tolerance: Option<String>,
    pub majority_nodes: usize,
    /// Reports the majority was taken over: every report of the node's hardware kind
    /// (failed ones too) whose fabprobe version emits the key.
    pub nodes_compared: usize,
    /// The hardware kind the node was compared within ([`kind_of`]).
    pub kind: String,
}

impl Outlier {
    /// Why the node is drained for this key: `key value (majority m ±t: n nodes)`.
    fn reason(&self) -> String {
        format!(
            "{} {} (majority {}{}: {})",
            self.key,
            self.value,
            self.majority_value,
            self.tolerance
                .as_deref()
                .map(|t| format!(" {t}"))
                .unwrap_or_default(),
            plural(self.majority_nodes, "node", "nodes")
        )
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Split {
    pub key: String,
    /// The hardware kind whose nodes split.
    pub kind: String,
    /// Each value with how many nodes share it, most common first.
    pub values: Vec<(Value, usize)>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BadNode {
    pub node: String,
    pub reasons: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SweepCounts {
    pub reports: usize,
    pub passed: usize,
    pub warned: usize,
    pub failed: usize,
    pub outliers: usize,
    pub unreadable: usize,
    pub missing: usize,
    /// Nodes on the drain list.
    pub drain: usize,
}

/// One node as the sweep judged it (the `hosts[]` of the JSON).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HostVerdict {
    pub node: String,
    /// pass|warn|fail from its report, or unknown when no usable report came.
    pub verdict: &'static str,
    /// The report's worst finding (the first of its highest severity); null on a pass
    /// and when unknown.
    pub worst: Option<WorstCause>,
    /// Why the verdict is unknown (missing, truncated, ...); null otherwise.
    pub problem: Option<Problem>,
    /// Whether the node is on the drain list.
    pub drain: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WorstCause {
    pub id: String,
    pub severity: Severity,
    pub subject: String,
    pub message: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SweepReport {
    pub nodes: SweepCounts,
    /// Every node by name, with its verdict and worst cause.
    pub hosts: Vec<HostVerdict>,
    pub failures: Vec<CauseGroup>,
    pub outliers: Vec<Outlier>,
    /// Keys where no value is held by more than half of the compared nodes.
    pub no_majority: Vec<Split>,
    pub unreadable: Vec<Unreadable>,
    /// The drain list: failed nodes, and outliers only with `--drain-outliers`, with why.
    pub bad_nodes: Vec<BadNode>,
    /// What the reader should know about the comparison itself (mixed tool versions,
    /// keys not compared, labels that disagree with hostnames).
    pub notes: Vec<String>,
    /// Every node named, once, in `--expect` order and then in the order read: what a
    /// fleet map draws (`fabprobe report`).
    pub node_states: Vec<NodeState>,
    /// What `fabprobe.ring` reports say, where any was read: the nodes to drain (also on
    /// `bad_nodes`) and the links and paths to ticket, apart.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ring: Option<ringsweep::RingSweep>,
}

/// A node's state in the sweep: `pass`, `warn`, `fail` (its report's verdict), or
/// `missing` / `unreadable` (no usable report: unknown, neither a pass nor a fail).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NodeState {
    pub node: String,
    pub state: &'static str,
}

#[derive(Default)]
pub struct Sweeper {
    nodes: Vec<NodeRec>,
    /// Lowercased short name -> nodes with that short name (FQDNs of other domains differ).
    by_short: HashMap<String, Vec<usize>>,
    keys: Vec<String>,
    key_ids: HashMap<String, u32>,
    values: Vec<Value>,
    value_ids: HashMap<String, u32>,
    versions: Vec<String>,
    version_ids: HashMap<String, u32>,
    unreadable: Vec<Unreadable>,
    expected: Vec<String>,
    drain_outliers: bool,
    /// (source, label, hostname) where the launcher's label names another host (the
    /// label wins), and where a file's name does (the hostname wins).
    relabelled: Vec<(String, String, String)>,
    renamed_files: Vec<(String, String, String)>,
    /// Notes the caller adds (inputs skipped).
    extra_notes: Vec<String>,
    /// `fabprobe.ring` reports: their drain and ticket lists.
    ring: ringsweep::RingAcc,
    /// A policy's `[sweep] tolerance`, over [`DEFAULT_TOLERANCES`].
    tolerances: BTreeMap<String, Tolerance>,
    /// What the comparison found to say (kinds, majorities held by failed nodes).
    compare_notes: Vec<String>,
}

/// One fingerprint key compared within one hardware kind.
struct KeyGroup<'a> {
    key: usize,
    kind: &'a str,
    members: &'a [usize],
}

/// A class of values in one [`KeyGroup`]: a value id, or [`WITHIN`] (within the tolerance
/// of the kind's median).
const WITHIN: u32 = u32::MAX;

fn intern(ids: &mut HashMap<String, u32>, canonical: String, mut store: impl FnMut()) -> u32 {
    let next = ids.len() as u32;
    *ids.entry(canonical).or_insert_with(|| {
        store();
        next
    })
}

/// `gpu001.cluster.local` -> `gpu001`; an IPv4 address stays whole.
fn short_name(name: &str) -> &str {
    if name.bytes().all(|c| c.is_ascii_digit() || c == b'.') {
        return name;
    }
    name.split('.').next().unwrap_or(name)
}

/// One host under two spellings: equal (any case), or a short name and an FQDN starting
/// with it. Two FQDNs of different domains are different hosts.
pub(crate) fn same_host(a: &str, b: &str) -> bool {
    if a.eq_ignore_ascii_case(b) {
        return true;
    }
    let (sa, sb) = (short_name(a), short_name(b));
    sa.eq_ignore_ascii_case(sb) && (sa.len() == a.len() || sb.len() == b.len())
}

/// `srun -l` labels lines with the task number, which names no host.
fn host_label(label: Option<&str>) -> Option<&str> {
    label
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.bytes().all(|c| c.is_ascii_digit()))
}

fn rank(s: Severity) -> u8 {
    match s {
        // Not evaluated is not scored: a node's worst finding is a warn or a fail.
        Severity::Pass | Severity::Unknown => 0,
        Severity::Warn => 1,
        Severity::Fail => 2,
    }
}

impl Sweeper {
    pub fn new() -> Sweeper {
        Sweeper::default()
    }

    /// A policy's `[sweep] tolerance` table: each key's tolerance replaces the default
    /// (`Abs(0.0)` makes a key exact).
    pub(crate) fn tolerances(&mut self, t: &BTreeMap<String, Tolerance>) {
        self.tolerances.extend(t.iter().map(|(k, v)| (k.clone(), *v)));
    }

    /// A key's tolerance; None when its values must be equal (a policy's 0 says so too).
    fn tolerance_of(&self, key: &str) -> Option<Tolerance> {
        self.tolerances
            .get(key)
            .copied()
            .or_else(|| {
                DEFAULT_TOLERANCES
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map(|(_, t)| *t)
            })
            .filter(|t| !matches!(t, Tolerance::Abs(a) | Tolerance::Rel(a) if *a == 0.0))
    }

    /// `--drain-outliers`: put nodes that passed but differ from their peers on the drain
    /// list too. Without it they are listed, never drained.
    pub(crate) fn drain_outliers(&mut self, yes: bool) {
        self.drain_outliers = yes;
    }

    /// One report as bytes: text that is not UTF-8 is listed as unreadable, not fatal.
    /// `name_hint` is a launcher's prefix (see [`Hint::Launcher`]).
    pub fn add_bytes(&mut self, source: &str, name_hint: Option<&str>, bytes: &[u8]) {
        self.add_bytes_hinted(source, Hint::launcher(name_hint), bytes);
    }

    pub(crate) fn add_bytes_hinted(&mut self, source: &str, hint: Hint, bytes: &[u8]) {
        match std::str::from_utf8(bytes) {
            Ok(text) => self.add_hinted(source, hint, text),
            Err(e) => {
                // The hostname of the valid part, if it got that far.
                let host = sniff_hostname(std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or(""));
                self.unusable(
                    source,
                    hint,
                    (
                        Problem::NotUtf8,
                        format!("not UTF-8 (invalid byte at offset {})", e.valid_up_to()),
                        host,
                    ),
                );
            }
        }
    }

    /// One report read from a stream (a line too long to hold, a large file), parsed as it
    /// is read: memory holds what the sweep keeps, not the report.
    pub(crate) fn add_reader(&mut self, source: &str, hint: Hint, r: impl Read) {
        match parse_reader(r) {
            Ok(p) => self.add_input(source, hint, p),
            Err(u) => self.unusable(source, hint, u),
        }
    }

    /// A file that could not be read (inside a directory given as input).
    pub(crate) fn add_unreadable_file(&mut self, source: &str, name_hint: Option<&str>, err: &str) {
        self.unreadable.push(Unreadable {
            node: host_label(name_hint).map(str::to_string),
            source: source.to_string(),
            problem: Problem::CannotRead,
            detail: err.to_string(),
        });
    }

    /// A note for the report (inputs skipped and why).
    pub fn note(&mut self, note: String) {
        self.extra_notes.push(note);
    }

    /// One report. `source` names where it came from; `name_hint` is the launcher's prefix
    /// (a bare task number names no node).
    pub fn add(&mut self, source: &str, name_hint: Option<&str>, text: &str) {
        self.add_hinted(source, Hint::launcher(name_hint), text);
    }

    pub(crate) fn add_hinted(&mut self, source: &str, hint: Hint, text: &str) {
        match parse(text) {
            Ok(p) => self.add_input(source, hint, p),
            Err(u) => self.unusable(source, hint, u),
        }
    }

    /// An unusable report keeps the node its label, file name or readable hostname gives.
    fn unusable(&mut self, source: &str, hint: Hint, (problem, detail, host): Unusable) {
        let host = host.filter(|h| names_a_host(h));
        let node = match hint {
            Hint::Launcher(_) => hint.name().map(str::to_string).or(host),
            _ => host.or(hint.name().map(str::to_string)),
        };
        self.unreadable.push(Unreadable {
            node,
            source: source.to_string(),
            problem,
            detail,
        });
    }

    /// The node's name: a launcher's label wins over the hostname (and is noted when they
    /// differ); the hostname wins over a file's name; `localhost` names no node.
    fn node_name(&mut self, source: &str, hint: Hint, hostname: Option<String>) -> String {
        let label = hint.name();
        let host = hostname.filter(|h| names_a_host(h));
        match (host, label) {
            (Some(h), Some(l)) if same_host(&h, l) => l.to_string(),
            (Some(h), Some(l)) => {
                let rec = (source.to_string(), l.to_string(), h.clone());
                if matches!(hint, Hint::Launcher(_)) {
                    self.relabelled.push(rec);
                    l.to_string()
                } else {
                    self.renamed_files.push(rec);
                    h
                }
            }
            (Some(h), None) => h,
            (None, Some(l)) => l.to_string(),
            (None, None) => source.to_string(),
        }
    }

    fn add_input(&mut self, source: &str, hint: Hint, r: Input) {
        match r {
            Input::Check(p) => self.add_parsed(source, hint, p),
            Input::Ring(p) => self.ring.add(source, p),
        }
    }

    fn add_parsed(&mut self, source: &str, hint: Hint, r: Parsed) {
        let name = self.node_name(source, hint, r.hostname);
        let version = {
            let v = r.tool_version.unwrap_or_else(|| "?".into());
            let store = &mut self.versions;
            intern(&mut self.version_ids, v.clone(), || store.push(v.clone()))
        };
        let mut values = Vec::with_capacity(r.fingerprint.len());
        for (k, v) in r.fingerprint {
            let keys = &mut self.keys;
            let kid = intern(&mut self.key_ids, k.clone(), || keys.push(k.clone()));
            let canon = v.to_string();
            let store = &mut self.values;
            let vid = intern(&mut self.value_ids, canon, || store.push(v.clone()));
            values.push((kid, vid));
        }
        let (verdict, fails, worst) = (r.verdict, r.kept.fails, r.kept.worst);
        let short = short_name(&name).to_ascii_lowercase();
        let same = self.by_short.get(&short).and_then(|ids| {
            ids.iter()
                .copied()
                .find(|&i| same_host(&self.nodes[i].name, &name))
        });
        if let Some(i) = same {
            // Two reports for one host: the worse one counts, both stay named, and every
            // failing report's causes reach the drain reason.
            let n = &mut self.nodes[i];
            n.sources.push((source.to_string(), verdict));
            for f in fails {
                if !n.fails.iter().any(|g| g.id == f.id && g.subject == f.subject) {
                    n.fails.push(f);
                }
            }
            if rank(verdict) > rank(n.verdict) {
                n.counted = n.sources.len() - 1;
                n.verdict = verdict;
                n.worst = worst;
                n.values = values;
                n.version = version;
            }
            return;
        }
        self.by_short.entry(short).or_default().push(self.nodes.len());
        self.nodes.push(NodeRec {
            name,
            sources: vec![(source.to_string(), verdict)],
            counted: 0,
            verdict,
            fails,
            worst,
            values,
            version,
        });
    }

    /// Nodes that should have reported (`--expect`): those without any report are missing,
    /// and a report whose hostname is an FQDN of an expected short name (or the other way
    /// round) takes the expected name.
    pub fn expect(&mut self, expected: &[String]) {
        self.expected.extend(expected.iter().cloned());
    }

    pub fn finish(mut self) -> SweepReport {
        let mut rep = SweepReport::default();
        let expected = self.expected.clone();
        self.apply_expected();
        rep.nodes.reports = self.nodes.len();
        rep.failures = self.causes(&mut rep.nodes);
        let outlier_reasons = self.compare(&mut rep);
        rep.nodes.outliers = outlier_reasons.len();
        rep.bad_nodes = self.drain_list(outlier_reasons);
        rep.ring = std::mem::take(&mut self.ring).finish();
        if let Some(r) = &rep.ring {
            ring_drains(&mut rep.bad_nodes, r);
        }
        rep.nodes.drain = rep.bad_nodes.len();
        self.list_duplicates();
        self.notes(&mut rep.notes);
        self.unreadable
            .sort_by(|a, b| a.problem.cmp(&b.problem).then(a.source.cmp(&b.source)));
        rep.nodes.missing = self
            .unreadable
            .iter()
            .filter(|u| u.problem == Problem::Missing)
            .count();
        rep.nodes.unreadable = self.unreadable.len() - rep.nodes.missing;
        rep.node_states = self.node_states(&expected);
        rep.hosts = self.hosts(&rep.bad_nodes);
        rep.unreadable = self.unreadable;
        rep
    }

    /// Each node once: expected ones first in `--expect` order, then the others as read.
    fn node_states(&self, expected: &[String]) -> Vec<NodeState> {
        let mut state: HashMap<&str, &'static str> = HashMap::new();
        for n in &self.nodes {
            state.insert(&n.name, n.verdict.as_str());
        }
        for u in &self.unreadable {
            if let Some(n) = &u.node {
                let s = if u.problem == Problem::Missing {
                    "missing"
                } else {
                    "unreadable"
                };
                state.entry(n).or_insert(s);
            }
        }
        let names = expected
            .iter()
            .map(String::as_str)
            .chain(self.nodes.iter().map(|n| n.name.as_str()))
            .chain(self.unreadable.iter().filter_map(|u| u.node.as_deref()));
        let mut out = Vec::with_capacity(state.len());
        for name in names {
            if let Some(s) = state.remove(name) {
                out.push(NodeState {
                    node: name.to_string(),
                    state: s,
                });
            }
        }
        out
    }

    /// Every node by name: those with a report, then those without a usable one (unknown).
    fn hosts(&self, bad: &[BadNode]) -> Vec<HostVerdict> {
        let drained: std::collections::HashSet<&str> = bad.iter().map(|b| b.node.as_str()).collect();
        let mut out: Vec<HostVerdict> = self
            .nodes
            .iter()
            .map(|n| HostVerdict {
                node: n.name.clone(),
                verdict: n.verdict.as_str(),
                worst: n.worst.as_ref().map(|w| WorstCause {
                    id: w.id.clone(),
                    severity: w.severity,
                    subject: w.subject.clone(),
                    message: w.message.clone(),
                }),
                problem: None,
                drain: drained.contains(n.name.as_str()),
            })
            .collect();
        let known: std::collections::HashSet<String> = out.iter().map(|h| h.node.clone()).collect();
        let mut unknown: BTreeMap<&str, Problem> = BTreeMap::new();
        for u in &self.unreadable {
            if let Some(n) = u.node.as_deref().filter(|n| !known.contains(*n)) {
                unknown.entry(n).or_insert(u.problem);
            }
        }
        out.extend(unknown.into_iter().map(|(n, p)| HostVerdict {
            node: n.to_string(),
            verdict: "unknown",
            worst: None,
            problem: Some(p),
            drain: false,
        }));
        out.sort_by(|a, b| a.node.cmp(&b.node));
        out
    }

    /// Rename reports to the `--expect` spelling of their host and list the expected nodes
    /// that sent nothing.
    fn apply_expected(&mut self) {
        let expected = std::mem::take(&mut self.expected);
        if expected.is_empty() {
            return;
        }
        let mut index: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, e) in expected.iter().enumerate() {
            index
                .entry(short_name(e).to_ascii_lowercase())
                .or_default()
                .push(i);
        }
        let find = |name: &str| {
            index
                .get(&short_name(name).to_ascii_lowercase())?
                .iter()
                .copied()
                .find(|&i| same_host(&expected[i], name))
        };
        let mut seen = vec![false; expected.len()];
        let names = self
            .nodes
            .iter_mut()
            .map(|n| &mut n.name)
            .chain(self.unreadable.iter_mut().filter_map(|u| u.node.as_mut()));
        for name in names {
            if let Some(i) = find(name) {
                name.clone_from(&expected[i]);
                seen[i] = true;
            }
        }
        for (e, seen) in expected.iter().zip(seen) {
            if !seen {
                self.unreadable.push(Unreadable {
                    node: Some(e.clone()),
                    source: "--expect".into(),
                    problem: Problem::Missing,
                    detail: "no report".into(),
                });
            }
        }
    }

    /// Verdict counts, and the failed nodes grouped by failing finding id.
    fn causes(&self, counts: &mut SweepCounts) -> Vec<CauseGroup> {
        let mut causes: BTreeMap<&str, (Vec<&str>, &str)> = BTreeMap::new();
        for node in &self.nodes {
            match node.verdict {
                // A check's verdict is never `unknown` (refused on reading).
                Severity::Pass | Severity::Unknown => counts.passed += 1,
                Severity::Warn => counts.warned += 1,
                Severity::Fail => counts.failed += 1,
            }
            if node.verdict != Severity::Fail {
                continue;
            }
            for f in &node.fails {
                let e = causes.entry(f.id.as_str()).or_insert_with(|| (Vec::new(), ""));
                if e.0.last() != Some(&node.name.as_str()) {
                    e.0.push(&node.name);
                }
                if e.1.is_empty() {
                    e.1 = if f.message.is_empty() {
                        &f.subject
                    } else {
                        &f.message
                    };
                }
            }
        }
        let mut failures: Vec<CauseGroup> = causes
            .into_iter()
            .map(|(id, (mut nodes, ex))| {
                nodes.sort();
                CauseGroup {
                    id: id.to_string(),
                    node_count: nodes.len(),
                    nodes: nodes.into_iter().map(str::to_string).collect(),
                    example: ex.to_string(),
                }
            })
            .collect();
        failures.sort_by(|a, b| b.node_count.cmp(&a.node_count).then(a.id.cmp(&b.id)));
        failures
    }

    /// Which tool versions emit each key (a key some versions lack is not compared).
    fn emitted_by_all_versions(&self) -> Vec<bool> {
        let (nk, nv) = (self.keys.len(), self.versions.len());
        let mut emits = vec![vec![false; nv]; nk];
        for node in &self.nodes {
            for (k, _) in &node.values {
                emits[*k as usize][node.version as usize] = true;
            }
        }
        let present: Vec<bool> = {
            let mut p = vec![false; nv];
            for node in &self.nodes {
                p[node.version as usize] = true;
            }
            p
        };
        emits
            .iter()
            .map(|by_v| by_v.iter().zip(&present).all(|(e, p)| *e || !*p))
            .collect()
    }

    /// Per hardware kind and hardware/configuration key, the value more than half of the
    /// kind's reports share (failed ones too: a node that failed on a port still says
    /// which kernel it runs); every node that did not fail and is unlike it is an outlier.
    /// Returns each outlier node's reasons.
    fn compare(&mut self, rep: &mut SweepReport) -> BTreeMap<usize, Vec<String>> {
        let null_id = {
            let store = &mut self.values;
            intern(&mut self.value_ids, "null".into(), || store.push(Value::Null))
        };
        let nk = self.keys.len();
        let all_versions = self.emitted_by_all_versions();
        let compared_key = |k: usize| {
            let name = self.keys[k].as_str();
            all_versions[k] && !NOT_COMPARED.contains(&name) && !KIND_ONLY.contains(&name)
        };
        // A key a node lacks (its version emits it) counts as null: absent is a difference.
        let rows: Vec<Vec<u32>> = self
            .nodes
            .iter()
            .map(|node| {
                let mut row = vec![null_id; nk];
                for (k, v) in &node.values {
                    row[*k as usize] = *v;
                }
                row
            })
            .collect();
        let (labels, groups) = self.kinds(&rows, null_id);
        let mut key_order: Vec<usize> = (0..nk).filter(|&k| compared_key(k)).collect();
        key_order.sort_by(|a, b| self.keys[*a].cmp(&self.keys[*b]));
        let mut reasons: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for k in key_order {
            for (kind, members) in &groups {
                if members.len() < 2 {
                    continue;
                }
                let g = KeyGroup {
                    key: k,
                    kind: &labels[*kind],
                    members,
                };
                self.compare_key(&g, &rows, rep, &mut reasons);
            }
        }
        self.kind_notes(&labels, &groups);
        rep.outliers
            .sort_by(|a, b| a.node.cmp(&b.node).then(a.key.cmp(&b.key)));
        reasons
    }

    /// Each node's hardware kind ([`kind_of`]): the labels, and the nodes of each kind in
    /// the order read (kinds in order of first appearance).
    fn kinds(&self, rows: &[Vec<u32>], null_id: u32) -> (Vec<String>, Vec<(usize, Vec<usize>)>) {
        let ids: Vec<Option<u32>> = KIND_KEYS.iter().map(|k| self.key_ids.get(*k).copied()).collect();
        let mut by_values: HashMap<[u32; 4], usize> = HashMap::new();
        let mut labels: Vec<String> = Vec::new();
        let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
        for (i, row) in rows.iter().enumerate() {
            let mut at = [null_id; 4];
            for (slot, id) in at.iter_mut().zip(&ids) {
                if let Some(k) = id {
                    *slot = row[*k as usize];
                }
            }
            let v = |j: usize| &self.values[at[j] as usize];
            let g = *by_values.entry(at).or_insert_with(|| {
                let label = kind_of(v(0), v(1), v(2), v(3));
                // Two value sets can name one kind (8x and 7x of one GPU model).
                let kind = labels.iter().position(|l| *l == label).unwrap_or_else(|| {
                    labels.push(label);
                    labels.len() - 1
                });
                match groups.iter().position(|(k, _)| *k == kind) {
                    Some(p) => p,
                    None => {
                        groups.push((kind, Vec::new()));
                        groups.len() - 1
                    }
                }
            });
            groups[g].1.push(i);
        }
        (labels, groups)
    }

    /// One key within one kind: the majority (or the median and its tolerance), and the
    /// nodes that did not fail and are unlike it.
    fn compare_key(
        &mut self,
        g: &KeyGroup,
        rows: &[Vec<u32>],
        rep: &mut SweepReport,
        reasons: &mut BTreeMap<usize, Vec<String>>,
    ) {
        let key = self.keys[g.key].clone();
        let tol = self.tolerance_of(&key);
        let median = tol.and_then(|_| self.median(g, rows));
        let class = |i: usize| {
            let v = rows[i][g.key];
            match (tol, median, self.values[v as usize].as_f64()) {
                (Some(t), Some(m), Some(x)) if t.allows(m, x) => WITHIN,
                _ => v,
            }
        };
        let counts = self.tally(g, &class);
        let compared = g.members.len();
        let Some((&maj, &(maj_n, maj_ok))) = counts
            .iter()
            .max_by(|a, b| a.1 .0.cmp(&b.1 .0).then(b.0.cmp(a.0)))
        else {
            return;
        };
        let show = |c: u32| match (c, median) {
            (WITHIN, Some(m)) => number(m),
            _ => self.values[c as usize].clone(),
        };
        if maj_n * 2 <= compared {
            let mut values: Vec<(Value, usize)> = counts.iter().map(|(v, c)| (show(*v), c.0)).collect();
            values.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.to_string().cmp(&b.0.to_string())));
            rep.no_majority.push(Split {
                key,
                kind: g.kind.to_string(),
                values,
            });
            return;
        }
        let mut spared = 0;
        for &i in g.members {
            let c = class(i);
            let node = &self.nodes[i];
            if c == maj || node.verdict == Severity::Fail {
                continue;
            }
            if counts[&c].1 > maj_ok {
                // More nodes that did not fail hold this value than the majority's.
                spared += 1;
                continue;
            }
            let o = Outlier {
                node: node.name.clone(),
                key: key.clone(),
                value: self.values[rows[i][g.key] as usize].clone(),
                majority_value: show(maj),
                tolerance: (maj == WITHIN).then(|| tol.map(Tolerance::show)).flatten(),
                majority_nodes: maj_n,
                nodes_compared: compared,
                kind: g.kind.to_string(),
            };
            reasons.entry(i).or_default().push(o.reason());
            rep.outliers.push(o);
        }
        if spared > 0 {
            self.compare_notes.push(format!(
                "{key}: the majority value {} ({maj_n} of {}) is held mostly by failed nodes; {} that did not fail but differ from it {} not called outliers",
                show(maj),
                plural(compared, "node", "nodes"),
                plural(spared, "node", "nodes"),
                if spared == 1 { "is" } else { "are" }
            ));
        }
    }

    /// Each class's count over every report of the kind, and apart, the count of those
    /// that did not fail (a majority they contradict blames none of them).
    fn tally(&self, g: &KeyGroup, class: &dyn Fn(usize) -> u32) -> HashMap<u32, (usize, usize)> {
        let mut counts: HashMap<u32, (usize, usize)> = HashMap::new();
        for &i in g.members {
            let e = counts.entry(class(i)).or_default();
            e.0 += 1;
            if self.nodes[i].verdict != Severity::Fail {
                e.1 += 1;
            }
        }
        counts
    }

    /// The median of a key's numeric values within a group (None when none is a number).
    fn median(&self, g: &KeyGroup, rows: &[Vec<u32>]) -> Option<f64> {
        let mut v: Vec<f64> = g
            .members
            .iter()
            .filter_map(|&i| self.values[rows[i][g.key] as usize].as_f64())
            .collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some(v[v.len() / 2])
    }

    /// More than one hardware kind: which, and the kinds with one node (compared with no
    /// peer, so whatever it lost cannot show as a difference).
    fn kind_notes(&mut self, labels: &[String], groups: &[(usize, Vec<usize>)]) {
        if groups.len() < 2 {
            return;
        }
        let list: Vec<String> = groups
            .iter()
            .map(|(k, m)| format!("{} ({})", labels[*k], m.len()))
            .collect();
        self.compare_notes.push(format!(
            "{} hardware kinds, each compared only within itself: {}",
            groups.len(),
            list.join("; ")
        ));
        let alone: Vec<String> = groups
            .iter()
            .filter(|(_, m)| m.len() == 1)
            .map(|(k, m)| format!("{} ({})", self.nodes[m[0]].name, labels[*k]))
            .collect();
        if !alone.is_empty() {
            self.compare_notes.push(format!(
                "{} the only one of {} hardware kind, compared with no peer: {}",
                plural(alone.len(), "node is", "nodes are"),
                if alone.len() == 1 { "its" } else { "their" },
                alone.join("; ")
            ));
        }
    }

    /// Failed nodes (their failing ids), and outliers (never failed ones) only when
    /// `--drain-outliers` asks for them.
    fn drain_list(&self, mut outlier_reasons: BTreeMap<usize, Vec<String>>) -> Vec<BadNode> {
        let mut out = Vec::new();
        for (i, node) in self.nodes.iter().enumerate() {
            let mut reasons = Vec::new();
            if node.verdict == Severity::Fail {
                // One reason per failing id, in rank order: `id subject (+N more)`.
                let mut by_id: Vec<(&str, &str, usize)> = Vec::new();
                for f in &node.fails {
                    match by_id.iter_mut().find(|(x, _, _)| *x == f.id) {
                        Some(e) => e.2 += 1,
                        None => by_id.push((&f.id, &f.subject, 0)),
                    }
                }
                reasons.extend(by_id.into_iter().map(|(id, subject, more)| match more {
                    0 => format!("{id} {subject}"),
                    n => format!("{id} {subject} (+{n} more)"),
                }));
                if reasons.is_empty() {
                    reasons.push("check verdict fail".into());
                }
            } else if !self.drain_outliers {
                continue;
            }
            reasons.extend(outlier_reasons.remove(&i).unwrap_or_default());
            if !reasons.is_empty() {
                out.push(BadNode {
                    node: node.name.clone(),
                    reasons,
                });
            }
        }
        out.sort_by(|a, b| a.node.cmp(&b.node));
        out
    }

    /// One entry per node with more than one report, naming every source.
    fn list_duplicates(&mut self) {
        for n in &self.nodes {
            if n.sources.len() < 2 {
                continue;
            }
            let all: Vec<String> = n
                .sources
                .iter()
                .map(|(s, v)| format!("{s}: {}", v.as_str()))
                .collect();
            let (src, v) = &n.sources[n.counted];
            self.unreadable.push(Unreadable {
                node: Some(n.name.clone()),
                source: n
                    .sources
                    .iter()
                    .map(|(s, _)| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                problem: Problem::Duplicate,
                detail: format!(
                    "{} reports for this node ({}); the worse one counts ({}, {src})",
                    n.sources.len(),
                    all.join("; "),
                    v.as_str()
                ),
            });
        }
    }

    /// Verdicts under different policies are not one standard: say so.
    fn policy_note(&self, notes: &mut Vec<String>) {
        let Some(&pk) = self.key_ids.get("policy") else {
            return;
        };
        let mut per: BTreeMap<String, usize> = BTreeMap::new();
        for n in &self.nodes {
            let name = match n.values.iter().find(|(k, _)| *k == pk) {
                Some((_, v)) => match &self.values[*v as usize] {
                    Value::String(s) => s.clone(),
                    v => v.to_string(),
                },
                None => "?".into(),
            };
            *per.entry(name).or_default() += 1;
        }
        if per.len() > 1 {
            let list: Vec<String> = per.iter().map(|(p, c)| format!("{p} ({c})")).collect();
            notes.push(format!(
                "reports made under {} policies: {}; their verdicts hold each node to a different rule set",
                per.len(),
                list.join(", ")
            ));
        }
    }

    fn notes(&self, notes: &mut Vec<String>) {
        if self.versions.len() > 1 {
            let mut per: BTreeMap<&str, usize> = BTreeMap::new();
            for n in &self.nodes {
                *per.entry(self.versions[n.version as usize].as_str()).or_default() += 1;
            }
            let list: Vec<String> = per.iter().map(|(v, c)| format!("{v} ({c})")).collect();
            notes.push(format!(
                "reports from {} tool versions: {}",
                per.len(),
                list.join(", ")
            ));
            let all = self.emitted_by_all_versions();
            let mut partial: Vec<&str> = (0..self.keys.len())
                .filter(|&k| !all[k])
                .map(|k| self.keys[k].as_str())
                .collect();
            partial.sort();
            if !partial.is_empty() {
                notes.push(format!(
                    "not compared (only some tool versions emit them): {}",
                    partial.join(", ")
                ));
            }
        }
        if !self.nodes.is_empty() && self.nodes.iter().all(|n| n.verdict == Severity::Fail) {
            notes.push("every report failed: no passing peer to compare against".into());
        }
        if let Some((src, label, host)) = self.relabelled.first() {
            notes.push(format!(
                "{} from the hostname, named by label (e.g. {src}: label {label}, hostname {host})",
                plural(
                    self.relabelled.len(),
                    "report's launcher label differs",
                    "reports' launcher labels differ"
                )
            ));
        }
        if let Some((src, _, host)) = self.renamed_files.first() {
            notes.push(format!(
                "{} from the hostname, named by hostname (e.g. {src}: hostname {host})",
                plural(
                    self.renamed_files.len(),
                    "report's file name differs",
                    "reports' file names differ"
                )
            ));
        }
        self.policy_note(notes);
        notes.extend(self.compare_notes.iter().cloned());
        notes.extend(self.extra_notes.iter().cloned());
    }
}

/// ` ±1%` after a majority value with a tolerance, else nothing.
pub(crate) fn tol_text(o: &Outlier) -> String {
    o.tolerance
        .as_deref()
        .map(|t| format!(" {t}"))
        .unwrap_or_default()
}

/// A median as JSON: a whole number as an integer (`2016`, not `2016.0`).
fn number(m: f64) -> Value {
    if m.fract() == 0.0 && m.abs() < 9.0e15 {
        Value::from(m as i64)
    } else {
        Value::from(m)
    }
}

/// The ring reports' nodes to drain join the drain list, a node already on it (its check
/// failed) gaining the ring's reasons: `ring slow_egress`.
fn ring_drains(bad: &mut Vec<BadNode>, r: &ringsweep::RingSweep) {
    for d in &r.drain {
        let reasons = d.kinds.iter().map(|k| format!("ring {k}"));
        match bad.iter_mut().find(|b| same_host(&b.node, &d.node)) {
            Some(b) => b
                .reasons
                .extend(reasons.filter(|x| !b.reasons.contains(x)).collect::<Vec<_>>()),
            None => bad.push(BadNode {
                node: d.node.clone(),
                reasons: reasons.collect(),
            }),
        }
    }
    bad.sort_by(|a, b| a.node.cmp(&b.node));
}

impl SweepReport {
    /// Whether anything needs a person: a node to drain, a link to ticket, an outlier, a
    /// missing or unreadable report.
    pub(crate) fn has_fault(&self) -> bool {
        !self.bad_nodes.is_empty()
            || !self.outliers.is_empty()
            || !self.unreadable.is_empty()
            || self.ring.as_ref().is_some_and(|r| !r.ticket.is_empty())
    }

    /// Reports read: nodes' checks and ring runs.
    pub(crate) fn reports_read(&self) -> usize {
        self.nodes.reports + self.ring.as_ref().map_or(0, |r| r.reports)
    }

    /// `scontrol update ... State=DRAIN` lines for the drain list (never run by fabprobe),
    /// then `#` comments for outliers not drained and for unusable reports. The lines are
    /// pasted into a shell: the node name must be a plain hostname, and the reason (from
    /// the reports, so from the network) loses what a shell would expand inside quotes.
    pub(crate) fn drain_lines(&self) -> String {
        let mut s = String::new();
        for b in &self.bad_nodes {
            let reason = drain_reason(&b.reasons);
            if plain_hostname(&b.node) {
                s.push_str(&format!(
                    "scontrol update NodeName={} State=DRAIN Reason=\"{reason}\"\n",
                    b.node
                ));
            } else {
                s.push_str(&format!(
                    "# {:?}: not a plain hostname, no drain line printed: {reason}\n",
                    b.node
                ));
            }
        }
        let drained: std::collections::HashSet<&str> =
            self.bad_nodes.iter().map(|b| b.node.as_str()).collect();
        let mut seen = std::collections::HashSet::new();
        for o in &self.outliers {
            if drained.contains(o.node.as_str()) || !seen.insert(o.node.as_str()) {
                continue;
            }
            let why: Vec<String> = self
                .outliers
                .iter()
                .filter(|x| x.node == o.node)
                .map(|x| {
                    format!(
                        "{} {} (majority {}{})",
                        x.key,
                        x.value,
                        x.majority_value,
                        tol_text(x)
                    )
                })
                .collect();
            s.push_str(&format!(
                "# {}: passed but differs from its peers, not drained (--drain-outliers drains it): {}\n",
                clean(&o.node),
                clean(&why.join("; "))
            ));
        }
        for u in &self.unreadable {
            s.push_str(&format!(
                "# {}: {} report ({}): {}\n",
                clean(u.node.as_deref().unwrap_or(&u.source)),
                u.problem.as_str(),
                clean(&u.source),
                clean(&u.detail)
            ));
        }
        // Links are ticketed, not drained: said as comments, with both ends.
        for t in self.ring.iter().flat_map(|r| &r.ticket) {
            let end = |e: &ringsweep::TicketEnd| clean(e.host.as_deref().unwrap_or("?"));
            let ports = match t.switch_ports.is_empty() {
                true => String::new(),
                false => format!(" [{}]", clean(&t.switch_ports.join("; "))),
            };
            s.push_str(&format!(
                "# ticket {} {} -> {}{ports}: not drained (a link or path, not a node)\n",
                clean(&t.kind),
                end(&t.from),
                end(&t.to)
            ));
        }
        s
    }

    /// Findings for the envelope: one per node to drain (fail), per outlier not drained
    /// and per unusable report (warn).
    pub fn findings(&self) -> Vec<Finding> {
        let mut out: Vec<Finding> = self
            .bad_nodes
            .iter()
            .map(|b| {
                Finding::new("sweep.bad_node", Severity::Fail, &b.node, b.reasons.join("; "))
                    .fix("drain it (`fabprobe sweep --drain`), then run `fabprobe check` on it")
            })
            .collect();
        let drained: std::collections::HashSet<&str> =
            self.bad_nodes.iter().map(|b| b.node.as_str()).collect();
        out.extend(
            self.outliers
                .iter()
                .filter(|o| !drained.contains(o.node.as_str()))
                .map(|o| {
                    Finding::new(
                        "sweep.outlier",
                        Severity::Warn,
                        &o.node,
                        format!(
                            "{} {} (majority {}{}: {} of {} nodes of its kind)",
                            o.key,
                            o.value,
                            o.majority_value,
                            tol_text(o),
                            o.majority_nodes,
                            o.nodes_compared
                        ),
                    )
                }),
        );
        out.extend(self.ring.iter().flat_map(|r| &r.ticket).map(|t| {
            let end = |e: &ringsweep::TicketEnd| e.host.clone().unwrap_or_else(|| "?".into());
            Finding::new(
                "sweep.ticket",
                Severity::Fail,
                format!("{} -> {}", end(&t.from), end(&t.to)),
                format!("{}: {}", t.kind, t.message),
            )
            .evidence("switch_ports", t.switch_ports.clone())
            .fix("file a ticket for the cable and switch ports between them (the message says what was measured)")
        }));
        out.extend(self.unreadable.iter().map(|u| {
            Finding::new(
                "sweep.unreadable",
                Severity::Warn,
                u.node.clone().unwrap_or_else(|| u.source.clone()),
                format!("{}: {}", u.problem.as_str(), u.detail),
            )
            .evidence("source", u.source.as_str())
        }));
        out
    }
}

/// A Slurm node name a shell passes through unchanged.
fn plain_hostname(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('-')
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"._-".contains(&c))
}

/// Text safe on one `#` comment line: no control characters.
fn clean(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect()
}

/// `fabprobe: reason; reason`, at most 200 bytes, safe inside double quotes in sh: `"`
/// becomes `'`, and `$`, backquote and backslash (which sh expands there) become `_`.
fn drain_reason(reasons: &[String]) -> String {
    let mut reason: String = format!("fabprobe: {}", reasons.join("; "))
        .chars()
        .map(|c| match c {
            '"' => '\'',
            '$' | '`' | '\\' => '_',
            c if c.is_control() => ' ',
            c => c,
        })
        .collect();
    if reason.len() > 200 {
        let mut cut = 197;
        while !reason.is_char_boundary(cut) {
            cut -= 1;
        }
        reason.truncate(cut);
        reason.push_str("...");
    }
    reason
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(host: &str, verdict: &str, kernel: &str, gpus: u32, fails: &[&str]) -> String {
        let findings: Vec<Value> = fails
            .iter()
            .map(|id| serde_json::json!({"id": id, "severity": "fail", "subject": "x", "message": format!("{id} broke")}))
            .collect();
        serde_json::json!({
            "schema": "fabprobe.check", "schema_version": 1, "tool_version": "0.1.0",
            "host": {"hostname": host},
            "data": {"verdict": verdict, "fingerprint": {"tool_version": "0.1.0", "policy": "default", "kernel": kernel, "gpu_count": gpus}},
            "findings": findings,
        })
        .to_string()
    }

    fn drained(r: &SweepReport) -> Vec<&str> {
        r.bad_nodes.iter().map(|b| b.node.as_str()).collect()
    }

    #[test]
    fn finds_outliers_failures_and_bad_reports() {
        let mut s = Sweeper::new();
        for i in 0..10 {
            let k = if i == 3 { "6.8.0-40" } else { "6.8.0-45" };
            let g = if i == 7 { 7 } else { 8 };
            let (v, f): (&str, &[&str]) = if i == 5 {
                ("fail", &["links.port_not_active"])
            } else {
                ("pass", &[])
            };
            s.add(
                &format!("n{i}.json"),
                Some(&format!("n{i}")),
                &report(&format!("n{i}"), v, k, g, f),
            );
        }
        let full = report("n10", "pass", "6.8.0-45", 8, &[]);
        s.add("n10.json", Some("n10"), &full[..full.len() / 2]);
        s.add("n11.json", Some("n11"), "Segmentation fault");
        s.add(
            "n12.json",
            Some("n12"),
            &full.replace("\"schema_version\":1", "\"schema_version\":2"),
        );
        s.add("dup.json", None, &report("n1", "pass", "6.8.0-45", 8, &[]));
        s.expect(&["n1".into(), "n10".into(), "n13".into()]);
        let r = s.finish();
        let outl: Vec<(&str, &str)> = r
            .outliers
            .iter()
            .map(|o| (o.node.as_str(), o.key.as_str()))
            .collect();
        assert_eq!(outl, [("n3", "kernel"), ("n7", "gpu_count")]);
        // The majority is taken over every report, the failed n5's too.
        assert_eq!(
            (r.outliers[0].majority_nodes, r.outliers[0].nodes_compared),
            (9, 10)
        );
        assert_eq!(r.failures.len(), 1);
        assert_eq!(r.failures[0].nodes, ["n5"]);
        // Outliers that passed are listed, never drained.
        assert_eq!(drained(&r), ["n5"]);
        let probs: Vec<(Option<&str>, Problem)> = r
            .unreadable
            .iter()
            .map(|u| (u.node.as_deref(), u.problem))
            .collect();
        assert_eq!(
            probs,
            [
                (Some("n13"), Problem::Missing),
                (Some("n10"), Problem::Truncated),
                (Some("n11"), Problem::NotJson),
                (Some("n12"), Problem::OtherVersion),
                (Some("n1"), Problem::Duplicate),
            ]
        );
        assert_eq!(r.unreadable[4].source, "n1.json, dup.json");
        assert_eq!(
            (
                r.nodes.reports,
                r.nodes.failed,
                r.nodes.outliers,
                r.nodes.missing,
                r.nodes.unreadable,
                r.nodes.drain
            ),
            (10, 1, 2, 1, 4, 1)
        );
        let d = r.drain_lines();
        assert!(
            d.starts_with(
                "scontrol update NodeName=n5 State=DRAIN Reason=\"fabprobe: links.port_not_active x\"\n"
            ),
            "{d}"
        );
        assert_eq!(d.matches("scontrol").count(), 1, "{d}");
        assert!(d.contains("# n3: passed but differs from its peers, not drained (--drain-outliers drains it): kernel \"6.8.0-40\" (majority \"6.8.0-45\")\n"), "{d}");
        assert!(r.has_fault());
    }

    #[test]
    fn drain_outliers_adds_them_to_the_drain_list() {
        let mut s = Sweeper::new();
        s.drain_outliers(true);
        for i in 0..5 {
            let k = if i == 3 { "6.8.0-40" } else { "6.8.0-45" };
            s.add("stdin", None, &report(&format!("n{i}"), "pass", k, 8, &[]));
        }
        let r = s.finish();
        assert_eq!(drained(&r), ["n3"]);
        assert!(r.drain_lines().starts_with("scontrol update NodeName=n3 State=DRAIN Reason=\"fabprobe: kernel '6.8.0-40' (majority '6.8.0-45': 4 nodes)\"\n"));
    }

    #[test]
    fn a_failing_majority_does_not_make_the_healthy_nodes_outliers() {
        // 6 nodes fail on a bad kernel, 4 pass on the good one: the majority (over every
        // report) is the bad kernel, which no passing node holds: nothing healthy is an
        // outlier, the failed nodes are listed once (under their failure), and a note says why.
        let mut s = Sweeper::new();
        s.drain_outliers(true);
        for i in 0..10 {
            let (v, k, f): (&str, &str, &[&str]) = if i < 6 {
                ("fail", "6.8.0-bad", &["policy.host.kernel"])
            } else {
                ("pass", "6.8.0-45", &[])
            };
            s.add("stdin", None, &report(&format!("n{i}"), v, k, 8, f));
        }
        let r = s.finish();
        assert_eq!(drained(&r), ["n0", "n1", "n2", "n3", "n4", "n5"]);
        assert!(r.outliers.is_empty(), "{:?}", r.outliers);
        assert_eq!(r.bad_nodes[0].reasons, ["policy.host.kernel x"]);
        assert_eq!(
            r.notes,
            ["kernel: the majority value \"6.8.0-bad\" (6 of 10 nodes) is held mostly by failed nodes; 4 nodes that did not fail but differ from it are not called outliers"]
        );
    }

    #[test]
    fn a_failed_node_is_never_also_an_outlier() {
        // n9 fails on a port and runs another kernel: listed once, under its failure.
        let mut s = Sweeper::new();
        for i in 0..10 {
            let (v, k, f): (&str, &str, &[&str]) = if i == 9 {
                ("fail", "6.8.0-40", &["links.port_down"])
            } else {
                ("pass", "6.8.0-45", &[])
            };
            s.add("stdin", None, &report(&format!("n{i}"), v, k, 8, f));
        }
        let r = s.finish();
        assert!(r.outliers.is_empty(), "{:?}", r.outliers);
        assert_eq!(r.nodes.outliers, 0);
        assert_eq!(r.bad_nodes[0].reasons, ["links.port_down x"]);
    }

    /// A report with these fingerprint values (the keys of one H100 node's).
    fn hw_report(host: &str, gpus: &str, hcas: &str, ib: u64, mem: Value) -> String {
        serde_json::json!({
            "schema": "fabprobe.check", "schema_version": 1, "tool_version": "0.1.0",
            "host": {"hostname": host},
            "data": {"verdict": "pass", "fingerprint": {"tool_version": "0.1.0", "policy": "default",
                "kernel": "k", "gpu_models": gpus, "hca_firmware": hcas, "ib_ports": ib,
                "roce_ports": 0, "memory_gib": mem}},
            "findings": [],
        })
        .to_string()
    }

    #[test]
    fn nodes_are_compared_within_their_hardware_kind() {
        let mut s = Sweeper::new();
        // 6 H100 nodes with 8 IB ports, 3 A100 nodes with 4: two kinds, no outlier; one
        // H100 node that lost a GPU is one within its kind.
        for i in 0..6 {
            let g = if i == 2 { "7x H100" } else { "8x H100" };
            s.add(
                "x",
                None,
                &hw_report(&format!("h{i}"), g, "8x MT4129 28.39.2048", 8, 2016.into()),
            );
        }
        for i in 0..3 {
            s.add(
                "x",
                None,
                &hw_report(
                    &format!("a{i}"),
                    "8x A100",
                    "4x MT4123 20.31.1014",
                    4,
                    1008.into(),
                ),
            );
        }
        // An H100 node with 4 ports: a kind of its own (a SKU), not a misconfiguration.
        s.add(
            "x",
            None,
            &hw_report("h9", "8x H100", "4x MT4129 28.39.2048", 4, 2016.into()),
        );
        let r = s.finish();
        let o: Vec<(&str, &str, &str)> = r
            .outliers
            .iter()
            .map(|o| (o.node.as_str(), o.key.as_str(), o.kind.as_str()))
            .collect();
        assert_eq!(o, [("h2", "gpu_models", "H100 | MT4129 | 8 IB + 0 RoCE ports")]);
        assert_eq!(
            (r.outliers[0].majority_nodes, r.outliers[0].nodes_compared),
            (5, 6)
        );
        assert_eq!(
            r.notes,
            [
                "3 hardware kinds, each compared only within itself: H100 | MT4129 | 8 IB + 0 RoCE ports (6); A100 | MT4123 | 4 IB + 0 RoCE ports (3); H100 | MT4129 | 4 IB + 0 RoCE ports (1)",
                "1 node is the only one of its hardware kind, compared with no peer: h9 (H100 | MT4129 | 4 IB + 0 RoCE ports)"
            ]
        );
    }

    #[test]
    fn numbers_agree_within_their_tolerance() {
        let fleet = |s: &mut Sweeper| {
            for (i, m) in [2016, 2015, 2016, 2017, 2016, 1952, 2016].iter().enumerate() {
                s.add(
                    "x",
                    None,
                    &hw_report(&format!("n{i}"), "8x H100", "8x MT4129 1", 8, (*m).into()),
                );
            }
        };
        // Default: memory_gib within 1% of the median (2016): 2015 and 2017 agree, a node
        // short of a 64 GiB DIMM does not.
        let mut s = Sweeper::new();
        fleet(&mut s);
        let r = s.finish();
        let o: Vec<(&str, &Value, Option<&str>)> = r
            .outliers
            .iter()
            .map(|o| (o.node.as_str(), &o.value, o.tolerance.as_deref()))
            .collect();
        assert_eq!(o, [("n5", &Value::from(1952), Some("±1%"))]);
        assert_eq!(
            (&r.outliers[0].majority_value, r.outliers[0].majority_nodes),
            (&Value::from(2016), 6)
        );
        assert!(
            r.drain_lines().contains("memory_gib 1952 (majority 2016 ±1%)"),
            "{}",
            r.drain_lines()
        );
        // A policy makes it exact, or wider.
        let mut s = Sweeper::new();
        s.tolerances(&BTreeMap::from([("memory_gib".to_string(), Tolerance::Abs(0.0))]));
        fleet(&mut s);
        let r = s.finish();
        let o: Vec<&str> = r.outliers.iter().map(|o| o.node.as_str()).collect();
        assert_eq!(o, ["n1", "n3", "n5"]);
        assert_eq!(r.outliers[0].tolerance, None);
        let mut s = Sweeper::new();
        s.tolerances(&BTreeMap::from([(
            "memory_gib".to_string(),
            Tolerance::Rel(0.05),
        )]));
        fleet(&mut s);
        assert!(s.finish().outliers.is_empty());
    }

    #[test]
    fn kinds_from_fingerprint_values() {
        let k = kind_of(
            &"8x NVIDIA H100 80GB HBM3".into(),
            &"2x MT4125 22.39.2048, 8x MT4129 28.39.2048".into(),
            &8.into(),
            &2.into(),
        );
        assert_eq!(k, "NVIDIA H100 80GB HBM3 | MT4125, MT4129 | 8 IB + 2 RoCE ports");
        assert_eq!(
            kind_of(&Value::Null, &Value::Null, &Value::Null, &0.into()),
            "no GPU | no HCA | ? IB + 0 RoCE ports"
        );
        assert_eq!(Tolerance::parse_percent("2.5%"), Some(Tolerance::Rel(0.025)));
        assert_eq!(Tolerance::parse_percent("101%"), None);
        assert_eq!(Tolerance::parse_percent("2"), None);
    }

    #[test]
    fn versions_are_a_note_not_a_difference() {
        let mut s = Sweeper::new();
        for i in 0..10 {
            let mut v: Value = serde_json::from_str(&report(&format!("n{i}"), "pass", "k", 8, &[])).unwrap();
            if i < 3 {
                // A newer fabprobe: another tool_version and a key the old one lacks.
                v["tool_version"] = "0.2.0".into();
                v["data"]["fingerprint"]["tool_version"] = "0.2.0".into();
                v["data"]["fingerprint"]["nccl_version"] = "2.21.5".into();
                v["data"]["fingerprint"]["policy"] = "dgx-h100".into();
            }
            s.add("stdin", None, &v.to_string());
        }
        let r = s.finish();
        assert!(r.outliers.is_empty(), "{:?}", r.outliers);
        assert!(r.no_majority.is_empty());
        assert!(!r.has_fault());
        assert_eq!(
            r.notes,
            [
                "reports from 2 tool versions: 0.1.0 (7), 0.2.0 (3)",
                "not compared (only some tool versions emit them): nccl_version",
                "reports made under 2 policies: default (7), dgx-h100 (3); their verdicts hold each node to a different rule set"
            ]
        );
    }

    #[test]
    fn two_reports_for_one_host_the_worse_counts() {
        let mut s = Sweeper::new();
        for i in 0..4 {
            s.add(
                &format!("a:{i}"),
                None,
                &report(&format!("n{i}"), "pass", "k", 8, &[]),
            );
        }
        // n2 again, failing, as an FQDN from another collection.
        s.add(
            "b:1",
            None,
            &report("n2.cluster.local", "fail", "k", 8, &["links.port_down"]),
        );
        s.add("b:2", None, &report("n1", "warn", "k", 8, &[]));
        s.add("b:3", None, &report("n1.cluster.local", "pass", "k", 8, &[]));
        let r = s.finish();
        assert_eq!(r.nodes.reports, 4);
        assert_eq!(drained(&r), ["n2"]);
        let dups: Vec<(&str, &str)> = r
            .unreadable
            .iter()
            .map(|u| (u.source.as_str(), u.detail.as_str()))
            .collect();
        assert_eq!(
            dups,
            [
                (
                    "a:1, b:2, b:3",
                    "3 reports for this node (a:1: pass; b:2: warn; b:3: pass); the worse one counts (warn, b:2)"
                ),
                (
                    "a:2, b:1",
                    "2 reports for this node (a:2: pass; b:1: fail); the worse one counts (fail, b:1)"
                ),
            ]
        );
        assert_eq!((r.nodes.passed, r.nodes.warned, r.nodes.failed), (2, 1, 1));
    }

    #[test]
    fn bytes_that_are_not_utf8_are_listed_and_the_sweep_goes_on() {
        let mut s = Sweeper::new();
        s.add_bytes("x:1", Some("n0"), b"{\"schema\": \"fabprobe.check\xff\"}");
        s.add_bytes("x:2", Some("7"), b"\xfe\xff");
        s.add_bytes("x:3", None, report("n1", "pass", "k", 8, &[]).as_bytes());
        let r = s.finish();
        assert_eq!(r.nodes.reports, 1);
        let u: Vec<(Option<&str>, &str, Problem)> = r
            .unreadable
            .iter()
            .map(|u| (u.node.as_deref(), u.source.as_str(), u.problem))
            .collect();
        // A bare task number names no node.
        assert_eq!(
            u,
            [
                (Some("n0"), "x:1", Problem::NotUtf8),
                (None, "x:2", Problem::NotUtf8)
            ]
        );
        assert_eq!(r.unreadable[0].detail, "not UTF-8 (invalid byte at offset 26)");
    }

    #[test]
    fn fqdn_reports_take_the_label_and_the_expected_name() {
        let mut s = Sweeper::new();
        s.add(
            "stdin:1",
            Some("gpu001"),
            &report("gpu001.cluster.local", "pass", "k", 8, &[]),
        );
        s.add(
            "stdin:2",
            None,
            &report("gpu002.cluster.local", "fail", "k", 8, &["x.y"]),
        );
        s.add("stdin:3", Some("gpu003"), &report("gpu099", "pass", "k", 8, &[]));
        s.add(
            "stdin:4",
            Some("gpu004.cluster.local"),
            "bash: fabprobe: command not found",
        );
        s.expect(&hostlist_names("gpu", 1..=5));
        let r = s.finish();
        assert_eq!(drained(&r), ["gpu002"]);
        let missing: Vec<&str> = r
            .unreadable
            .iter()
            .filter(|u| u.problem == Problem::Missing)
            .map(|u| u.node.as_deref().unwrap())
            .collect();
        // gpu003's label names another host than its report: the launcher ran it on
        // gpu003, so the label wins (and a note says so).
        assert_eq!(missing, ["gpu005"]);
        assert!(r
            .unreadable
            .iter()
            .any(|u| u.node.as_deref() == Some("gpu004") && u.problem == Problem::NotJson));
        assert_eq!(
            r.notes,
            [
                "1 report's launcher label differs from the hostname, named by label (e.g. stdin:3: label gpu003, hostname gpu099)"
            ]
        );
    }

    #[test]
    fn launcher_labels_win_over_localhost_and_file_names_lose_to_hostnames() {
        let mut s = Sweeper::new();
        // Two containers that both say localhost: two nodes, and the failing one drains.
        s.add(
            "stdin:1",
            Some("gpu001"),
            &report("localhost", "pass", "k", 8, &[]),
        );
        s.add(
            "stdin:2",
            Some("gpu002"),
            &report("localhost", "fail", "k", 8, &["links.port_down"]),
        );
        // A file's name is a convention: the hostname names the node.
        s.add_hinted(
            "r/latest.json",
            Hint::File("latest"),
            &report("gpu003", "pass", "k", 8, &[]),
        );
        // localhost with only a file name: the file name names it.
        s.add_hinted(
            "r/gpu004.json",
            Hint::File("gpu004"),
            &report("localhost", "pass", "k", 8, &[]),
        );
        let r = s.finish();
        let hosts: Vec<(&str, &str)> = r.hosts.iter().map(|h| (h.node.as_str(), h.verdict)).collect();
        assert_eq!(
            hosts,
            [
                ("gpu001", "pass"),
                ("gpu002", "fail"),
                ("gpu003", "pass"),
                ("gpu004", "pass")
            ]
        );
        assert_eq!(drained(&r), ["gpu002"]);
        assert!(r.unreadable.is_empty(), "{:?}", r.unreadable);
        assert_eq!(
            r.notes,
            ["1 report's file name differs from the hostname, named by hostname (e.g. r/latest.json: hostname gpu003)"]
        );
    }

    #[test]
    fn every_failing_report_of_a_host_reaches_its_drain_reason() {
        let mut s = Sweeper::new();
        s.add(
            "a:1",
            Some("n1"),
            &report("n1", "fail", "k", 8, &["gpu.nvlink_lost"]),
        );
        s.add(
            "b:1",
            Some("n1"),
            &report("n1", "fail", "k", 8, &["host.memlock", "gpu.nvlink_lost"]),
        );
        let r = s.finish();
        assert_eq!(r.bad_nodes[0].reasons, ["gpu.nvlink_lost x", "host.memlock x"]);
        assert_eq!(
            r.failures.iter().map(|f| f.id.as_str()).collect::<Vec<_>>(),
            ["gpu.nvlink_lost", "host.memlock"]
        );
    }

    #[test]
    fn an_unusable_report_keeps_its_readable_hostname() {
        let mut s = Sweeper::new();
        let full = report("gpu002", "pass", "k", 8, &[]);
        s.add(
            "stdin:1",
            None,
            &full.replace("\"schema_version\":1", "\"schema_version\":2"),
        );
        s.add("stdin:2", None, &report("gpu001", "pass", "k", 8, &[]));
        // Cut short after the hostname: still gpu003's report.
        let cut = report("gpu003", "pass", "k", 8, &[]);
        s.add("stdin:3", None, &cut[..cut.find("gpu003").unwrap() + 40]);
        s.expect(&hostlist_names("gpu", 1..=4));
        let r = s.finish();
        let u: Vec<(Option<&str>, Problem)> = r
            .unreadable
            .iter()
            .map(|u| (u.node.as_deref(), u.problem))
            .collect();
        assert_eq!(
            u,
            [
                (Some("gpu004"), Problem::Missing),
                (Some("gpu003"), Problem::Truncated),
                (Some("gpu002"), Problem::OtherVersion)
            ]
        );
        let hosts: Vec<(&str, &str, Option<Problem>)> = r
            .hosts
            .iter()
            .map(|h| (h.node.as_str(), h.verdict, h.problem))
            .collect();
        assert_eq!(
            hosts,
            [
                ("gpu001", "pass", None),
                ("gpu002", "unknown", Some(Problem::OtherVersion)),
                ("gpu003", "unknown", Some(Problem::Truncated)),
                ("gpu004", "unknown", Some(Problem::Missing))
            ]
        );
    }

    #[test]
    fn hosts_carry_the_first_finding_of_the_highest_severity() {
        let mut v: Value = serde_json::from_str(&report("n1", "warn", "k", 8, &[])).unwrap();
        v["findings"] = serde_json::json!([
            {"id": "a.pass", "severity": "pass", "subject": "s0", "message": "fine"},
            {"id": "b.warn", "severity": "warn", "subject": "s1", "message": "first warn"},
            {"id": "c.warn", "severity": "warn", "subject": "s2", "message": "second warn"},
        ]);
        let mut s = Sweeper::new();
        s.add("x", None, &v.to_string());
        v["host"]["hostname"] = "n2".into();
        v["data"]["verdict"] = "fail".into();
        v["findings"][2]["severity"] = "fail".into();
        s.add("y", None, &v.to_string());
        s.add("z", None, &report("n3", "pass", "k", 8, &[]));
        let r = s.finish();
        let w: Vec<(&str, Option<&str>, bool)> = r
            .hosts
            .iter()
            .map(|h| (h.node.as_str(), h.worst.as_ref().map(|w| w.id.as_str()), h.drain))
            .collect();
        assert_eq!(
            w,
            [
                ("n1", Some("b.warn"), false),
                ("n2", Some("c.warn"), true),
                ("n3", None, false)
            ]
        );
        assert_eq!(r.hosts[1].worst.as_ref().unwrap().severity, Severity::Fail);
    }

    #[test]
    fn a_streamed_report_is_the_same_as_a_held_one() {
        let text = report("n1", "fail", "k", 8, &["links.port_down"]);
        let mut a = Sweeper::new();
        a.add("x", None, &text);
        let mut b = Sweeper::new();
        // One byte per read: the UTF-8 check and the parse see every boundary.
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let Some((&c, rest)) = self.0.split_first() else {
                    return Ok(0);
                };
                buf[0] = c;
                self.0 = rest;
                Ok(1)
            }
        }
        let padded = text.replace("\"x\"", "\"x ✓ ü\"");
        b.add_reader("x", Hint::None, Trickle(padded.as_bytes()));
        let (ra, rb) = (a.finish(), b.finish());
        assert_eq!(ra.bad_nodes[0].node, rb.bad_nodes[0].node);
        assert_eq!(rb.bad_nodes[0].reasons, ["links.port_down x ✓ ü"]);
        let mut c = Sweeper::new();
        let mut bad = text.into_bytes();
        bad.insert(30, 0xff);
        c.add_reader("y", Hint::None, Trickle(&bad));
        let rc = c.finish();
        assert_eq!(rc.unreadable[0].problem, Problem::NotUtf8);
        assert_eq!(rc.unreadable[0].detail, "not UTF-8 (invalid byte at offset 30)");
    }

    fn hostlist_names(prefix: &str, r: std::ops::RangeInclusive<u32>) -> Vec<String> {
        r.map(|i| format!("{prefix}{i:03}")).collect()
    }

    #[test]
    fn same_host_spellings() {
        assert!(same_host("gpu001", "gpu001.cluster.local"));
        assert!(same_host("GPU001.cluster.local", "gpu001"));
        assert!(!same_host("gpu001.a", "gpu001.b"));
        assert!(!same_host("gpu001", "gpu0011"));
        assert!(!same_host("10.0.0.1", "10"));
    }

    #[test]
    fn drain_lines_are_safe_to_paste_into_sh() {
        let mut s = Sweeper::new();
        let evil = r#"{"schema":"fabprobe.check","schema_version":1,"host":{"hostname":"n1"},"data":{"verdict":"fail","fingerprint":{}},"findings":[{"id":"x.y","severity":"fail","subject":"$(reboot) `id` \" \\ a\nb","message":""}]}"#;
        s.add("a", None, evil);
        s.add("b", None, &evil.replace("\"n1\"", "\"n2;reboot\""));
        let d = s.finish().drain_lines();
        assert_eq!(
            d,
            "scontrol update NodeName=n1 State=DRAIN Reason=\"fabprobe: x.y _(reboot) _id_ ' _ a b\"\n\
             # \"n2;reboot\": not a plain hostname, no drain line printed: fabprobe: x.y _(reboot) _id_ ' _ a b\n"
        );
    }

    #[test]
    fn no_majority_is_not_an_outlier() {
        let mut s = Sweeper::new();
        s.add("a", None, &report("a", "pass", "k1", 8, &[]));
        s.add("b", None, &report("b", "pass", "k2", 8, &[]));
        let r = s.finish();
        assert!(r.outliers.is_empty());
        assert_eq!(r.no_majority.len(), 1);
        assert_eq!(r.no_majority[0].key, "kernel");
        assert!(!r.has_fault());
    }

    #[test]
    fn another_check_report_schema_is_named() {
        let mut s = Sweeper::new();
        s.add(
            "t.json",
            Some("t"),
            r#"{"schema":"fabprobe.topo","schema_version":1,"host":{},"data":{},"findings":[]}"#,
        );
        let r = s.finish();
        assert_eq!(r.unreadable[0].problem, Problem::NotACheckReport);
        assert!(
            r.unreadable[0].detail.contains("fabprobe.topo"),
            "{:?}",
            r.unreadable
        );
    }
}
