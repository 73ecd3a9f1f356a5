//! A `fabprobe.nccl-log` report as a page section: the verdict line, the root cause first
//! with where it was read and what to do next, the other verdicts, the flight recorder's,
//! then the job's ranks and hosts as the logs describe them.

use maud::{Markup, html};
use serde::Deserialize;
use serde_json::Value;

use super::{Envelope, HtmlError, remedy, severity_word};

#[derive(Deserialize)]
struct NcclLog {
    summary: Summary,
    #[serde(default)]
    verdicts: Vec<CauseView>,
    #[serde(default)]
    flight_recorder: Option<Flight>,
}

#[derive(Deserialize)]
struct Summary {
    #[serde(default)]
    inputs: Vec<String>,
    #[serde(default)]
    lines: u64,
    #[serde(default)]
    nccl_lines: u64,
    #[serde(default)]
    unrecognised_lines: u64,
    #[serde(default)]
    nccl_versions: std::collections::BTreeMap<String, Vec<String>>,
    #[serde(default)]
    hosts: Vec<Host>,
    world_size: Option<u64>,
    #[serde(default)]
    ranks_seen: u64,
}

#[derive(Deserialize)]
struct Host {
    host: String,
    #[serde(default)]
    ranks: Vec<u64>,
    local_ranks: Option<u64>,
    #[serde(default)]
    bootstrap: Vec<String>,
    #[serde(default)]
    socket_interfaces: Vec<String>,
    #[serde(default)]
    hcas: Vec<String>,
}

/// A cause the logs or the flight recorder show (`data.verdicts[]`), as the page reads it
/// back: the fields both carry, the rest shown as `key: value` lines.
#[derive(Deserialize)]
struct CauseView {
    cause: String,
    severity: String,
    #[serde(default)]
    meaning: String,
    #[serde(default)]
    next: Option<String>,
    #[serde(flatten)]
    rest: serde_json::Map<String, Value>,
}

#[derive(Deserialize)]
struct Flight {
    #[serde(default)]
    verdicts: Vec<CauseView>,
}

/// The facts of a verdict worth a line, in the order a reader wants them.
const FACTS: [&str; 16] = [
    "host", "rank", "ranks", "device", "peer", "group", "op", "seq", "local_gid", "remote_gid", "status",
    "vendor_err", "nccl_result", "errno", "knock_ons", "file",
];

/// A JSON value as a person reads it: strings bare, lists spaced, objects `key value`.
fn spoken(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().map(spoken).collect::<Vec<_>>().join(" "),
        Value::Object(m) => m.iter().map(|(k, v)| format!("{k} {}", spoken(v))).collect::<Vec<_>>().join(", "),
        other => other.to_string(),
    }
}

/// The verdict line as the text report prints it: counted over the log's verdicts, the
/// worst the first failing one (else warning).
fn headline(n: &NcclLog) -> (&'static str, String) {
    let s = &n.summary;
    let count = |w: &str| n.verdicts.iter().filter(|v| v.severity == w).count();
    let worst = worst(&n.verdicts);
    match worst {
        Some(v) => {
            let (class, word) = severity_word(&v.severity);
            (class, format!("fabprobe nccl-log: {word}  {} fail, {} warn; worst: {}{}", count("fail"), count("warn"), v.cause, who(v)))
        }
        None if n.verdicts.iter().any(|v| v.severity == "unknown") => (
            "unknown",
            format!(
                "fabprobe nccl-log: UNKNOWN  no NCCL line in {} line(s) from {} input(s): nothing to judge; rerun the job with NCCL_DEBUG=INFO",
                s.lines,
                s.inputs.len()
            ),
        ),
        None => ("pass", format!("fabprobe nccl-log: PASS  no failure in {} NCCL line(s) from {} host(s)", s.nccl_lines, s.hosts.len())),
    }
}

fn worst(vs: &[CauseView]) -> Option<&CauseView> {
    vs.iter().find(|v| v.severity == "fail").or_else(|| vs.iter().find(|v| v.severity == "warn"))
}

/// `on h rank 4 mlx5_0`, as the text names whom a verdict is about (a CUDA device says less
/// than the rank).
fn who(v: &CauseView) -> String {
    let mut w = Vec::new();
    if let Some(h) = v.rest.get("host").and_then(Value::as_str) {
        w.push(h.to_string());
    }
    if let Some(r) = v.rest.get("rank").and_then(Value::as_u64) {
        w.push(format!("rank {r}"));
    }
    if let Some(d) = v.rest.get("device").and_then(Value::as_str).filter(|d| !d.starts_with("cuda:")) {
        w.push(d.to_string());
    }
    if w.is_empty() { String::new() } else { format!(" on {}", w.join(" ")) }
}

pub(super) fn section(e: &Envelope) -> Result<Markup, HtmlError> {
    let n: NcclLog = e.view("data", e.data)?;
    let s = &n.summary;
    let (class, line) = headline(&n);
    // The root cause first (the verdict the line names), then the rest as the report lists them.
    let first = worst(&n.verdicts);
    let flight = n.flight_recorder.as_ref().map(|f| f.verdicts.as_slice()).unwrap_or_default();
    let rest = n.verdicts.iter().chain(flight).filter(|v| !first.is_some_and(|f| std::ptr::eq(*v, f)));
    let order: Vec<&CauseView> = first.into_iter().chain(rest).collect();
    Ok(html! {
        section.nccl-log {
            h2 { "NCCL log: " (s.inputs.len()) " input(s), " (s.ranks_seen) " rank(s) seen"
                @if let Some(w) = s.world_size { " of " (w) } ", " (s.hosts.len()) " host(s)" }
            div class={"verdicts " (class)} { p.verdict { (line) } }
            @for (i, v) in order.iter().enumerate() {
                h3 { @if i == 0 && first.is_some() { "Root cause: " } @else { "Verdict: " } (v.cause) }
                (verdict(v))
            }
            (hosts(s))
        }
    })
}

/// One verdict: its badge and facts, what it means, and the next steps.
fn verdict(v: &CauseView) -> Markup {
    let (class, word) = severity_word(&v.severity);
    html! {
        div.nccl-verdict {
            span class={"badge " (class)} { (word) } " " code { (v.cause) }
            table.facts { tbody {
                @for k in FACTS {
                    @if let Some(x) = v.rest.get(k).filter(|x| !x.is_null() && x.as_array().is_none_or(|a| !a.is_empty())) {
                        tr { th { (k.replace('_', " ")) } td { (spoken(x)) @if k == "file" { @if let Some(l) = v.rest.get("line_no") { ":" (spoken(l)) } } } }
                    }
                }
            } }
            @if let Some(line) = v.rest.get("line").and_then(Value::as_str) { pre.cmd.file { code { (line) } } }
            @if !v.meaning.is_empty() { p { "means: " (v.meaning) } }
            @if let Some(next) = &v.next { (remedy("next", next)) }
        }
    }
}

/// The ranks and hosts the logs name, and what each host brought up.
fn hosts(s: &Summary) -> Markup {
    html! {
        h3 { "Ranks and hosts" }
        p.muted { (s.lines) " line(s) read, " (s.nccl_lines) " from NCCL, " (s.unrecognised_lines) " not understood"
            @for (v, files) in &s.nccl_versions { "; NCCL " (v) " (" (files.len()) " input(s))" } }
        @if !s.hosts.is_empty() {
            table.hosts {
                thead { tr { th { "host" } th { "ranks" } th { "processes" } th { "bootstrap" } th { "sockets" } th { "HCAs" } } }
                tbody { @for h in &s.hosts {
                    tr { td { (h.host) } td { (spoken_list(&h.ranks)) } td.num { (h.local_ranks.map(|n| n.to_string()).unwrap_or_default()) }
                        td { (few(&h.bootstrap)) } td { (few(&h.socket_interfaces)) } td { (few(&h.hcas)) } }
                } }
            }
        }
    }
}

/// At most 4 items of a list cell, then `and N more`, as the text's hosts table: a job of
/// many interfaces must not make a column the page's width.
fn few(v: &[String]) -> String {
    let mut out: Vec<String> = v.iter().take(4).cloned().collect();
    if v.len() > 4 {
        out.push(format!("and {} more", v.len() - 4));
    }
    out.join(" ")
}

fn spoken_list(v: &[u64]) -> String {
    v.iter().map(u64::to_string).collect::<Vec<_>>().join(" ")
}
