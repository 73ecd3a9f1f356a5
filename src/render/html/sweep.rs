//! A `fabprobe.sweep` report as a page section: the fleet map (every node one square in
//! `--expect` order, or grouped by a hostname pattern, coloured by its state), the node x
//! cause grid of the nodes with something to say, the drain list and the unusable reports.

use std::collections::{BTreeMap, HashMap};

use maud::{Markup, html};
use serde::Deserialize;
use serde_json::Value;

use super::{Envelope, HtmlError};

#[derive(Deserialize)]
struct Sweep {
    nodes: Counts,
    #[serde(default)]
    failures: Vec<Cause>,
    #[serde(default)]
    outliers: Vec<Outlier>,
    #[serde(default)]
    unreadable: Vec<Unreadable>,
    #[serde(default)]
    bad_nodes: Vec<BadNode>,
    #[serde(default)]
    notes: Vec<String>,
    /// Every node with its state, in `--expect` order then the order read (newer sweeps).
    #[serde(default)]
    node_states: Vec<NodeState>,
    /// Links, cables or switch ports to ticket, where a sweep names them.
    #[serde(default)]
    tickets: Vec<Value>,
    /// What ring reports said (`ring.ticket[]`: links and paths to ticket, both ends).
    #[serde(default)]
    ring: Option<RingLists>,
}

#[derive(Deserialize)]
struct RingLists {
    #[serde(default)]
    ticket: Vec<Value>,
}

#[derive(Deserialize)]
struct Counts {
    reports: u64,
    passed: u64,
    warned: u64,
    failed: u64,
    outliers: u64,
    unreadable: u64,
    missing: u64,
    drain: u64,
}

#[derive(Deserialize)]
struct Cause {
    id: String,
    nodes: Vec<String>,
    #[serde(default)]
    example: String,
}

#[derive(Deserialize)]
struct Outlier {
    node: String,
    key: String,
    value: Value,
    majority_value: Value,
}

#[derive(Deserialize)]
struct Unreadable {
    node: Option<String>,
    source: String,
    problem: String,
    detail: String,
}

#[derive(Deserialize)]
struct BadNode {
    node: String,
    reasons: Vec<String>,
}

#[derive(Deserialize)]
struct NodeState {
    node: String,
    state: String,
}

/// How the fleet map groups its nodes: a pattern whose first capture (else whole match)
/// names the group (`rack(\d+)`), else rows of [`ROW`] in order.
pub(crate) struct Grouping<'a>(pub Option<&'a regex::Regex>);

const ROW: usize = 40;

/// One column of the grid: a failing finding, a fingerprint key a node differs on, or a
/// report problem.
struct Column {
    title: String,
    class: &'static str,
    example: String,
}

/// A finding id that may wrap only after a `.` or `_` (`gdr.acs_` / `redirect`), never
/// inside a word.
fn breakable(id: &str) -> Markup {
    let mut pieces = Vec::new();
    let mut start = 0;
    for (i, c) in id.char_indices() {
        if c == '.' || c == '_' {
            pieces.push(&id[start..=i]);
            start = i + 1;
        }
    }
    pieces.push(&id[start..]);
    html! { @for p in &pieces { (p) wbr; } }
}

pub(super) fn section(e: &Envelope, group: &Grouping) -> Result<Markup, HtmlError> {
    let s: Sweep = e.view("data", e.data)?;
    let (cols, cells) = grid(&s);
    let order = node_order(&s, &cells);
    let state = states(&s);
    let n = &s.nodes;
    // The bar's colour is the worst state on the page, as the fleet map colours it.
    let class = match () {
        _ if n.failed + n.outliers + n.unreadable + n.missing + n.drain > 0 => "fail",
        _ if n.warned > 0 => "warn",
        _ => "pass",
    };
    let bad: Vec<&String> = order.iter().filter(|x| cells.contains_key(*x)).collect();
    Ok(html! {
        section.sweep {
            h2 { "Sweep: " (n.reports) " reports" }
            div class={"verdicts " (class)} {
                p.verdict { "fabprobe sweep: " (n.reports) " reports: " (n.passed) " pass, " (n.warned) " warn, "
                    (n.failed) " fail; " (n.outliers) " outliers; " (n.unreadable) " unreadable; "
                    (n.missing) " missing; " (n.drain) " to drain" }
            }
            h3 { "Fleet map" }
            (legend())
            (fleet_map(&order, &state, &cells, &cols, group))
            @if !bad.is_empty() {
                h3 { "Nodes x causes (" (bad.len()) " of " (order.len()) " nodes; the others have none)" }
                div.scroll { table.grid {
                    thead { tr { th { "node" } @for c in &cols { th title=(c.example) data-id=(c.title) { code { (breakable(&c.title)) } } } } }
                    tbody {
                        @for node in &bad {
                            tr {
                                td { (node) }
                                @for (i, c) in cols.iter().enumerate() {
                                    @if cells[*node].contains(&i) { td class={"hit " (c.class)} { span class={"badge " (c.class)} { "×" } } }
                                    @else { td {} }
                                }
                            }
                        }
                    }
                } }
            }
            @if !s.bad_nodes.is_empty() {
                h3 { "Drain list (" (s.bad_nodes.len()) ")" }
                table.drain { thead { tr { th { "node" } th { "reasons" } } }
                    tbody { @for b in &s.bad_nodes { tr { td { (b.node) } td { (b.reasons.join("; ")) } } } } }
            }
            @let tickets: Vec<&Value> = s.tickets.iter().chain(s.ring.iter().flat_map(|r| &r.ticket)).collect();
            @if !tickets.is_empty() {
                h3 { "Tickets (" (tickets.len()) ")" }
                ul.tickets { @for t in &tickets { li { (ticket_line(t)) } } }
            }
            @if !s.unreadable.is_empty() {
                h3 { "Missing and unreadable reports (" (s.unreadable.len()) ")" }
                table.unreadable { thead { tr { th { "node" } th { "problem" } th { "source" } th { "detail" } } }
                    tbody { @for u in &s.unreadable {
                        tr { td { (u.node.as_deref().unwrap_or("?")) } td { (u.problem) } td { code { (u.source) } } td { (u.detail) } }
                    } } }
            }
            @if !s.notes.is_empty() { h3 { "Notes" } ul { @for x in &s.notes { li { (x) } } } }
        }
    })
}

/// A ticket as the sweep wrote it: its fields `key: value`, whatever they are.
fn ticket_line(t: &Value) -> String {
    // A ring report's ticket: `slow_link node-b -> node-d: message (switch ports: ...)`.
    if let (Some(kind), Some(from), Some(to)) = (t.get("kind"), t.get("from"), t.get("to")) {
        let host = |e: &Value| e.get("host").and_then(Value::as_str).unwrap_or("?").to_string();
        let ports: Vec<&str> = t
            .get("switch_ports")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut line = format!(
            "{} {} -> {}: {}",
            kind.as_str().unwrap_or("?"),
            host(from),
            host(to),
            t.get("message").and_then(Value::as_str).unwrap_or("")
        );
        if !ports.is_empty() {
            line += &format!(" (switch ports: {})", ports.join("; "));
        }
        return line;
    }
    match t {
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| format!("{k}: {}", v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string())))
            .collect::<Vec<_>>()
            .join(", "),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The grid's columns and, per node, the columns it has a mark in.
fn grid(s: &Sweep) -> (Vec<Column>, HashMap<String, Vec<usize>>) {
    let mut cols = Vec::new();
    let mut cells: HashMap<String, Vec<usize>> = HashMap::new();
    for f in &s.failures {
        for node in &f.nodes {
            cells.entry(node.clone()).or_default().push(cols.len());
        }
        cols.push(Column { title: f.id.clone(), class: "fail", example: f.example.clone() });
    }
    let mut keys: BTreeMap<&str, usize> = BTreeMap::new();
    for o in &s.outliers {
        let i = *keys.entry(&o.key).or_insert_with(|| {
            cols.push(Column {
                title: format!("≠ {}", o.key),
                class: "outlier",
                example: format!("{} has {}; the majority {}", o.node, o.value, o.majority_value),
            });
            cols.len() - 1
        });
        cells.entry(o.node.clone()).or_default().push(i);
    }
    let mut problems: BTreeMap<&str, usize> = BTreeMap::new();
    for u in &s.unreadable {
        let Some(node) = &u.node else { continue };
        let i = *problems.entry(&u.problem).or_insert_with(|| {
            let class = if u.problem == "missing" { "missing" } else { "unknown" };
            cols.push(Column { title: u.problem.clone(), class, example: u.detail.clone() });
            cols.len() - 1
        });
        cells.entry(node.clone()).or_default().push(i);
    }
    (cols, cells)
}

/// The sweep's own order when it lists every node, else every node named, by name with
/// numbers compared as numbers (gpu9 before gpu10).
fn node_order(s: &Sweep, cells: &HashMap<String, Vec<usize>>) -> Vec<String> {
    if !s.node_states.is_empty() {
        return s.node_states.iter().map(|x| x.node.clone()).collect();
    }
    let mut v: Vec<String> = cells.keys().cloned().collect();
    v.sort_by_key(|a| natural(a));
    v
}

fn natural(s: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut digits = String::new();
    for c in s.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
        } else {
            if !digits.is_empty() {
                out.push((std::mem::take(&mut text), digits.parse().unwrap_or(u64::MAX)));
                digits.clear();
            }
            text.push(c);
        }
    }
    out.push((text, digits.parse().unwrap_or(0)));
    out
}

/// Each node's state on the map: the sweep's, where it lists it; a node only in a cause
/// is failed, in a problem missing/unreadable, else an outlier.
fn states(s: &Sweep) -> HashMap<String, String> {
    let mut m: HashMap<String, String> = HashMap::new();
    for o in &s.outliers {
        m.insert(o.node.clone(), "outlier".into());
    }
    for u in &s.unreadable {
        if let Some(n) = &u.node {
            let st = if u.problem == "missing" { "missing" } else { "unreadable" };
            m.insert(n.clone(), st.into());
        }
    }
    for f in &s.failures {
        for n in &f.nodes {
            m.insert(n.clone(), "fail".into());
        }
    }
    for x in &s.node_states {
        // A node that passed but differs from its peers is drawn as an outlier.
        if !(x.state == "pass" || x.state == "warn") || !m.contains_key(&x.node) {
            m.insert(x.node.clone(), x.state.clone());
        }
    }
    m
}

fn legend() -> Markup {
    html! {
        p.legend {
            span style="--c:var(--pass)" { "pass" } span style="--c:var(--warn)" { "warn" }
            span style="--c:var(--outlier)" { "outlier (unlike its peers)" }
            span style="--c:var(--fail)" { "fail" } span style="--c:var(--missing)" { "missing (no report)" }
            span style="--c:var(--unknown)" { "unreadable report" }
        }
    }
}

/// Group name of `node`: the pattern's first capture (or match), else None.
fn group_of(g: &Grouping, node: &str) -> Option<String> {
    let c = g.0?.captures(node)?;
    Some(c.get(1).or_else(|| c.get(0))?.as_str().to_string())
}

fn fleet_map(
    order: &[String],
    state: &HashMap<String, String>,
    cells: &HashMap<String, Vec<usize>>,
    cols: &[Column],
    group: &Grouping,
) -> Markup {
    // Rows: the pattern's groups in order of first appearance, else runs of ROW nodes.
    let mut rows: Vec<(String, Vec<&String>)> = Vec::new();
    if group.0.is_some() {
        let mut at: HashMap<String, usize> = HashMap::new();
        for n in order {
            let g = group_of(group, n).unwrap_or_else(|| "(no match)".into());
            let i = *at.entry(g.clone()).or_insert_with(|| {
                rows.push((g, Vec::new()));
                rows.len() - 1
            });
            rows[i].1.push(n);
        }
    } else {
        for chunk in order.chunks(ROW) {
            rows.push((chunk[0].clone(), chunk.iter().collect()));
        }
    }
    let widest = rows.iter().map(|r| r.1.len()).max().unwrap_or(1);
    let sq = if order.len() <= 400 { 18.0 } else { 12.0 };
    let (left, top) = (130.0, 6.0);
    let w = left + widest as f64 * sq + 10.0;
    let h = top + rows.len() as f64 * sq + 6.0;
    html! {
        svg.fleet xmlns="http://www.w3.org/2000/svg" width=(w) height=(h) viewBox={"0 0 " (w) " " (h)}
            role="img" aria-label="fleet map" {
            @for (r, (name, nodes)) in rows.iter().enumerate() {
                @let y = top + r as f64 * sq;
                text.small x=(left - 6.0) y=(y + sq / 2.0 + 2.0) text-anchor="end" { (name) }
                @for (i, n) in nodes.iter().enumerate() {
                    @let st = state.get(*n).map(String::as_str).unwrap_or("pass");
                    rect class={"node " (st)} x=(left + i as f64 * sq) y=(y) width=(sq - 2.0) height=(sq - 2.0) data-node=(n) {
                        title { (n) ": " (st)
                            @if let Some(c) = cells.get(*n) {
                                " (" (c.iter().map(|&i| cols[i].title.as_str()).collect::<Vec<_>>().join(", ")) ")"
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_with_numbers_as_numbers() {
        let mut v = vec!["gpu10", "gpu9", "gpu100", "cpu2", "gpu09a"];
        v.sort_by_key(|a| natural(a));
        assert_eq!(v, ["cpu2", "gpu9", "gpu09a", "gpu10", "gpu100"]);
    }

    #[test]
    fn groups_by_the_first_capture() {
        let re = regex::Regex::new(r"^(r\d+)n").unwrap();
        let g = Grouping(Some(&re));
        assert_eq!(group_of(&g, "r12n003").as_deref(), Some("r12"));
        assert_eq!(group_of(&g, "login1"), None);
        assert_eq!(group_of(&Grouping(None), "r12n003"), None);
    }
}
