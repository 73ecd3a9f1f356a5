//! `sweep`: merge many nodes' `check --format json` reports. Which nodes failed and why
//! (grouped by cause), which differ from the majority of their peers on what should be
//! uniform (the reports' fingerprints), which reports are missing or unreadable, and the
//! Slurm drain lines for the bad nodes.
//!
//! Streaming: [`Sweeper::add`] keeps a node's verdict, failing findings and fingerprint
//! (interned), never the report itself, so memory grows with nodes x fingerprint keys only.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Finding, Severity};
use crate::render::SCHEMA_VERSION;

#[derive(Deserialize)]
struct RawReport {
    schema: String,
    schema_version: u32,
    #[serde(default)]
    tool_version: Option<String>,
    host: RawHost,
    data: RawData,
    #[serde(default)]
    findings: Vec<RawFinding>,
}

/// Enough of any envelope to say which version wrote it.
#[derive(Deserialize)]
struct Header {
    schema: Option<String>,
    schema_version: Option<u32>,
    tool_version: Option<String>,
}

#[derive(Deserialize)]
struct RawHost {
    hostname: Option<String>,
}

#[derive(Deserialize)]
struct RawData {
    verdict: Severity,
    #[serde(default)]
    fingerprint: BTreeMap<String, Value>,
}

#[derive(Deserialize)]
struct RawFinding {
    id: String,
    severity: Severity,
    #[serde(default)]
    subject: String,
    #[serde(default)]
    message: String,
}

struct NodeRec {
    name: String,
    verdict: Severity,
    fails: Vec<(String, String, String)>,
    /// Interned value id per fingerprint key id.
    values: Vec<(u32, u32)>,
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
    /// Valid JSON from another fabprobe schema version.
    OtherVersion,
    /// JSON, but not a `fabprobe.check` report.
    NotACheckReport,
    /// A second report for a node already seen (the first one counts).
    Duplicate,
}

impl Problem {
    pub fn as_str(self) -> &'static str {
        match self {
            Problem::Missing => "missing",
            Problem::Truncated => "truncated",
            Problem::NotJson => "not_json",
            Problem::OtherVersion => "other_version",
            Problem::NotACheckReport => "not_a_check_report",
            Problem::Duplicate => "duplicate",
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

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Outlier {
    pub node: String,
    pub key: String,
    pub value: Value,
    pub majority_value: Value,
    pub majority_nodes: usize,
    pub nodes_compared: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Split {
    pub key: String,
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
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SweepReport {
    pub nodes: SweepCounts,
    pub failures: Vec<CauseGroup>,
    pub outliers: Vec<Outlier>,
    /// Keys where no value is held by more than half of the nodes.
    pub no_majority: Vec<Split>,
    pub unreadable: Vec<Unreadable>,
    /// Failed nodes and outliers, by name, with why.
    pub bad_nodes: Vec<BadNode>,
}

#[derive(Default)]
pub struct Sweeper {
    nodes: Vec<NodeRec>,
    by_name: HashMap<String, usize>,
    keys: Vec<String>,
    key_ids: HashMap<String, u32>,
    values: Vec<Value>,
    value_ids: HashMap<String, u32>,
    unreadable: Vec<Unreadable>,
}

fn intern(ids: &mut HashMap<String, u32>, canonical: String, mut store: impl FnMut()) -> u32 {
    let next = ids.len() as u32;
    *ids.entry(canonical).or_insert_with(|| {
        store();
        next
    })
}

impl Sweeper {
    pub fn new() -> Sweeper {
        Sweeper::default()
    }

    /// One report. `source` names where it came from; `name_hint` is the node as the file
    /// name or the launcher's prefix says, used when the report itself cannot be read.
    pub fn add(&mut self, source: &str, name_hint: Option<&str>, text: &str) {
        let trimmed = text.trim();
        let bad = |problem, detail: String| Unreadable {
            node: name_hint.map(str::to_string),
            source: source.to_string(),
            problem,
            detail,
        };
        if trimmed.is_empty() {
            self.unreadable.push(bad(Problem::Missing, "empty report".into()));
            return;
        }
        let r: RawReport = match serde_json::from_str(trimmed) {
            Ok(r) => r,
            Err(e) if e.is_eof() => {
                self.unreadable
                    .push(bad(Problem::Truncated, format!("report ends early ({e})")));
                return;
            }
            Err(e) if e.is_syntax() => {
                self.unreadable
                    .push(bad(Problem::NotJson, format!("not JSON ({e})")));
                return;
            }
            Err(e) => {
                let h: Option<Header> = serde_json::from_str(trimmed).ok();
                let (problem, detail) = match h {
                    Some(Header {
                        schema_version: Some(v),
                        tool_version,
                        ..
                    }) if v != SCHEMA_VERSION => (
                        Problem::OtherVersion,
                        format!(
                            "schema_version {v} (fabprobe {}), this sweep reads {SCHEMA_VERSION}",
                            tool_version.as_deref().unwrap_or("?")
                        ),
                    ),
                    Some(Header { schema: Some(s), .. }) if s != "fabprobe.check" => (
                        Problem::NotACheckReport,
                        format!("schema {s}, not fabprobe.check"),
                    ),
                    _ => (
                        Problem::NotACheckReport,
                        format!("not a fabprobe.check report ({e})"),
                    ),
                };
                self.unreadable.push(bad(problem, detail));
                return;
            }
        };
        if r.schema_version != SCHEMA_VERSION {
            self.unreadable.push(bad(
                Problem::OtherVersion,
                format!(
                    "schema_version {} (fabprobe {}), this sweep reads {SCHEMA_VERSION}",
                    r.schema_version,
                    r.tool_version.as_deref().unwrap_or("?")
                ),
            ));
            return;
        }
        if r.schema != "fabprobe.check" {
            self.unreadable.push(bad(
                Problem::NotACheckReport,
                format!("schema {}, not fabprobe.check", r.schema),
            ));
            return;
        }
        let name = r
            .host
            .hostname
            .or_else(|| name_hint.map(str::to_string))
            .unwrap_or_else(|| source.to_string());
        if self.by_name.contains_key(&name) {
            self.unreadable.push(Unreadable {
                node: Some(name),
                source: source.to_string(),
                problem: Problem::Duplicate,
                detail: "a second report for this node; the first one counts".into(),
            });
            return;
        }
        let mut values = Vec::with_capacity(r.data.fingerprint.len());
        for (k, v) in r.data.fingerprint {
            let keys = &mut self.keys;
            let kid = intern(&mut self.key_ids, k.clone(), || keys.push(k.clone()));
            let canon = v.to_string();
            let store = &mut self.values;
            let vid = intern(&mut self.value_ids, canon, || store.push(v.clone()));
            values.push((kid, vid));
        }
        let fails = r
            .findings
            .into_iter()
            .filter(|f| f.severity == Severity::Fail)
            .map(|f| (f.id, f.subject, f.message))
            .collect();
        self.by_name.insert(name.clone(), self.nodes.len());
        self.nodes.push(NodeRec {
            name,
            verdict: r.data.verdict,
            fails,
            values,
        });
    }

    /// Nodes that should have reported (`--expect`): those without any report are missing.
    pub fn expect(&mut self, expected: &[String]) {
        for n in expected {
            let seen = self.by_name.contains_key(n)
                || self
                    .unreadable
                    .iter()
                    .any(|u| u.node.as_deref() == Some(n.as_str()));
            if !seen {
                self.unreadable.push(Unreadable {
                    node: Some(n.clone()),
                    source: "--expect".into(),
                    problem: Problem::Missing,
                    detail: "no report".into(),
                });
            }
        }
    }

    pub fn finish(mut self) -> SweepReport {
        let mut rep = SweepReport::default();
        let n = self.nodes.len();
        rep.nodes.reports = n;
        // Causes: finding id -> nodes.
        let mut causes: BTreeMap<&str, (Vec<&str>, &str)> = BTreeMap::new();
        for node in &self.nodes {
            match node.verdict {
                Severity::Pass => rep.nodes.passed += 1,
                Severity::Warn => rep.nodes.warned += 1,
                Severity::Fail => rep.nodes.failed += 1,
            }
            let mut ids: Vec<&str> = node.fails.iter().map(|(id, _, _)| id.as_str()).collect();
            ids.dedup();
            for (id, subject, msg) in &node.fails {
                let e = causes.entry(id.as_str()).or_insert_with(|| (Vec::new(), ""));
                if e.0.last() != Some(&node.name.as_str()) {
                    e.0.push(&node.name);
                }
                if e.1.is_empty() {
                    e.1 = if msg.is_empty() { subject } else { msg };
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
        rep.failures = failures;

        // Outliers: per key, the value more than half of the nodes share.
        let null_id = {
            let store = &mut self.values;
            intern(&mut self.value_ids, "null".into(), || store.push(Value::Null))
        };
        let nk = self.keys.len();
        let mut per_key: Vec<HashMap<u32, usize>> = vec![HashMap::new(); nk];
        let mut node_vals: Vec<Vec<u32>> = Vec::with_capacity(n);
        for node in &self.nodes {
            // A key a node lacks counts as null: absent is a difference too.
            let mut row = vec![null_id; nk];
            for (k, v) in &node.values {
                row[*k as usize] = *v;
            }
            for (k, v) in row.iter().enumerate() {
                *per_key[k].entry(*v).or_default() += 1;
            }
            node_vals.push(row);
        }
        let mut key_order: Vec<usize> = (0..nk).collect();
        key_order.sort_by(|a, b| self.keys[*a].cmp(&self.keys[*b]));
        let mut reasons: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for k in key_order {
            let counts = &per_key[k];
            let Some((&maj, &maj_n)) = counts.iter().max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0))) else {
                continue;
            };
            if counts.len() < 2 {
                continue;
            }
            if maj_n * 2 <= n {
                let mut values: Vec<(Value, usize)> = counts
                    .iter()
                    .map(|(v, c)| (self.values[*v as usize].clone(), *c))
                    .collect();
                values.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.to_string().cmp(&b.0.to_string())));
                rep.no_majority.push(Split {
                    key: self.keys[k].clone(),
                    values,
                });
                continue;
            }
            for (node, row) in self.nodes.iter().zip(&node_vals) {
                if row[k] != maj {
                    let o = Outlier {
                        node: node.name.clone(),
                        key: self.keys[k].clone(),
                        value: self.values[row[k] as usize].clone(),
                        majority_value: self.values[maj as usize].clone(),
                        majority_nodes: maj_n,
                        nodes_compared: n,
                    };
                    reasons.entry(node.name.clone()).or_default().push(format!(
                        "{} {} (majority {}: {maj_n} nodes)",
                        o.key, o.value, o.majority_value
                    ));
                    rep.outliers.push(o);
                }
            }
        }
        rep.outliers
            .sort_by(|a, b| a.node.cmp(&b.node).then(a.key.cmp(&b.key)));
        rep.nodes.outliers = reasons.len();
        for node in &self.nodes {
            if node.verdict == Severity::Fail {
                // One reason per failing id, in rank order: `id subject (+N more)`.
                let mut by_id: Vec<(&str, &str, usize)> = Vec::new();
                for (id, subject, _) in &node.fails {
                    match by_id.iter_mut().find(|(i, _, _)| i == id) {
                        Some(e) => e.2 += 1,
                        None => by_id.push((id, subject, 0)),
                    }
                }
                let ids: Vec<String> = by_id
                    .into_iter()
                    .map(|(id, subject, more)| match more {
                        0 => format!("{id} {subject}"),
                        n => format!("{id} {subject} (+{n} more)"),
                    })
                    .collect();
                let r = reasons.entry(node.name.clone()).or_default();
                // Failures first: they are why the node is drained.
                let mut all = ids;
                all.append(r);
                *r = all;
            }
        }
        rep.bad_nodes = reasons
            .into_iter()
            .map(|(node, reasons)| BadNode { node, reasons })
            .collect();
        self.unreadable
            .sort_by(|a, b| a.problem.cmp(&b.problem).then(a.source.cmp(&b.source)));
        rep.nodes.missing = self
            .unreadable
            .iter()
            .filter(|u| u.problem == Problem::Missing)
            .count();
        rep.nodes.unreadable = self.unreadable.len() - rep.nodes.missing;
        rep.unreadable = self.unreadable;
        rep
    }
}

impl SweepReport {
    /// Whether anything needs a person: a failed node, an outlier, a missing or unreadable
    /// report.
    pub fn has_fault(&self) -> bool {
        !self.bad_nodes.is_empty() || !self.unreadable.is_empty()
    }

    /// `scontrol update ... State=DRAIN` lines for the bad nodes (never run by fabprobe).
    /// Slurm keeps the reason as one quoted string; quotes inside become single quotes.
    pub fn drain_lines(&self) -> String {
        let mut s = String::new();
        for b in &self.bad_nodes {
            let mut reason = format!("fabprobe: {}", b.reasons.join("; "));
            if reason.len() > 200 {
                let mut cut = 197;
                while !reason.is_char_boundary(cut) {
                    cut -= 1;
                }
                reason.truncate(cut);
                reason.push_str("...");
            }
            let reason = reason.replace('"', "'");
            s.push_str(&format!(
                "scontrol update NodeName={} State=DRAIN Reason=\"{reason}\"\n",
                b.node
            ));
        }
        for u in &self.unreadable {
            s.push_str(&format!(
                "# {}: {} report ({}): {}\n",
                u.node.as_deref().unwrap_or(&u.source),
                u.problem.as_str(),
                u.source,
                u.detail
            ));
        }
        s
    }

    /// Findings for the envelope: one per bad node (fail) and per unusable report (warn).
    pub fn findings(&self) -> Vec<Finding> {
        let mut out: Vec<Finding> = self
            .bad_nodes
            .iter()
            .map(|b| {
                Finding::new("sweep.bad_node", Severity::Fail, &b.node, b.reasons.join("; "))
                    .fix("drain it (fabprobe sweep --drain), then run fabprobe check on it")
            })
            .collect();
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
            "data": {"verdict": verdict, "fingerprint": {"kernel": kernel, "gpu_count": gpus}},
            "findings": findings,
        })
        .to_string()
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
        assert_eq!(r.outliers[0].majority_nodes, 9);
        assert_eq!(r.failures.len(), 1);
        assert_eq!(r.failures[0].nodes, ["n5"]);
        let bad: Vec<&str> = r.bad_nodes.iter().map(|b| b.node.as_str()).collect();
        assert_eq!(bad, ["n3", "n5", "n7"]);
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
        assert_eq!(
            (
                r.nodes.reports,
                r.nodes.failed,
                r.nodes.outliers,
                r.nodes.missing,
                r.nodes.unreadable
            ),
            (10, 1, 2, 1, 4)
        );
        let d = r.drain_lines();
        assert!(d.contains("scontrol update NodeName=n3 State=DRAIN Reason=\"fabprobe: kernel '6.8.0-40' (majority '6.8.0-45': 9 nodes)\""), "{d}");
        assert!(
            d.contains("NodeName=n5 State=DRAIN Reason=\"fabprobe: links.port_not_active x\""),
            "{d}"
        );
        assert!(r.has_fault());
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
