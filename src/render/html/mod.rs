//! One self-contained HTML page from saved `--format json` envelopes of `ring`, `sweep`,
//! `check`, `topo` and `nccl-log`: the pictures an on-call engineer reads faster than the text (the
//! scan matrix, busbw against size, the fleet grid, the PCIe/NVLink tree).
//!
//! The page needs nothing outside itself: no script, no font, no image file, and a
//! Content-Security-Policy that forbids fetching anything, so it opens on an offline cluster
//! and pastes into a ticket. Colours follow `prefers-color-scheme`; print turns them light.
//! Markup is maud's (every value from the input is escaped by it); the SVG is written here
//! because the drawings need a class, a `<title>` and data attributes on each cell (dark
//! mode, hover text, tests), which plotting crates do not emit.
//!
//! Input is the JSON a report was saved as, read through small views of its own (never the
//! probes' types), so `report` reads any file `--format json` wrote with this schema version.

mod check;
mod nccl_log;
mod ring;
mod svg;
mod sweep;
mod topo;

use maud::{DOCTYPE, Markup, PreEscaped, html};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::render::SCHEMA_VERSION;

/// One saved report: where it came from (shown on the page) and its envelope.
pub(crate) struct Input {
    pub name: String,
    pub envelope: Value,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum HtmlError {
    #[error("{file}: not a fabprobe report (no \"schema\" string at the top)")]
    NoSchema { file: String },
    #[error(
        "{file}: schema {schema} is not one `report` draws (fabprobe.ring, fabprobe.sweep, fabprobe.check, fabprobe.topo, fabprobe.nccl-log)"
    )]
    Unsupported { file: String, schema: String },
    #[error("{file}: schema_version {found}, this fabprobe reads {SCHEMA_VERSION}")]
    Version { file: String, found: u64 },
    #[error("{file}: {schema} {part}: {why}")]
    Shape {
        file: String,
        schema: String,
        part: String,
        why: String,
    },
}

/// The envelope's parts every section reads.
struct Envelope<'a> {
    file: &'a str,
    schema: &'a str,
    hostname: Option<&'a str>,
    captured_at: Option<&'a str>,
    tool_version: Option<&'a str>,
    data: &'a Value,
    findings: Vec<Finding>,
}

/// A finding as the envelope carries it.
#[derive(Clone, Debug, serde::Deserialize)]
struct Finding {
    id: String,
    severity: String,
    #[serde(default)]
    subject: String,
    #[serde(default)]
    message: String,
    #[serde(default)]
    fix: Option<String>,
}

impl<'a> Envelope<'a> {
    fn of(i: &'a Input) -> Result<Envelope<'a>, HtmlError> {
        let v = &i.envelope;
        let file = i.name.as_str();
        let schema = v["schema"]
            .as_str()
            .ok_or_else(|| HtmlError::NoSchema { file: file.into() })?;
        if let Some(found) = v["schema_version"].as_u64().filter(|&n| n != u64::from(SCHEMA_VERSION)) {
            return Err(HtmlError::Version { file: file.into(), found });
        }
        let mut e = Envelope {
            file,
            schema,
            hostname: v["host"]["hostname"].as_str(),
            captured_at: v["host"]["captured_at"].as_str(),
            tool_version: v["tool_version"].as_str(),
            data: &v["data"],
            findings: Vec::new(),
        };
        e.findings = match v.get("findings") {
            Some(f) => e.view("findings", f)?,
            None => Vec::new(),
        };
        Ok(e)
    }

    /// `value` read as the view `T`; a mismatch names the file, the schema and the part.
    fn view<T: DeserializeOwned>(&self, part: &str, value: &Value) -> Result<T, HtmlError> {
        T::deserialize(value).map_err(|e| HtmlError::Shape {
            file: self.file.into(),
            schema: self.schema.into(),
            part: part.into(),
            why: e.to_string(),
        })
    }
}

/// How the page is drawn beyond its inputs.
#[derive(Default)]
pub struct Options {
    /// The page's title (default: the reports' kinds and host).
    pub title: Option<String>,
    /// A sweep's fleet map rows: a hostname pattern whose first capture names the group.
    pub group: Option<regex::Regex>,
}

/// The whole page: one section per input, in the order given (a topo section also marks
/// the findings of check reports from the same host).
pub(crate) fn page(inputs: &[Input], opts: &Options) -> Result<String, HtmlError> {
    let envs = inputs.iter().map(Envelope::of).collect::<Result<Vec<_>, _>>()?;
    let mut sections = Vec::new();
    for e in &envs {
        sections.push(match e.schema {
            "fabprobe.ring" => ring::section(e)?,
            "fabprobe.sweep" => sweep::section(e, &sweep::Grouping(opts.group.as_ref()))?,
            "fabprobe.check" => check::section(e)?,
            "fabprobe.nccl-log" => nccl_log::section(e)?,
            "fabprobe.topo" => {
                let same_host: Vec<&Finding> = envs
                    .iter()
                    .filter(|o| o.schema == "fabprobe.check" && o.hostname == e.hostname)
                    .flat_map(|o| &o.findings)
                    .collect();
                topo::section(e, &same_host)?
            }
            other => {
                return Err(HtmlError::Unsupported {
                    file: e.file.into(),
                    schema: other.into(),
                });
            }
        });
    }
    let title = opts.title.clone().unwrap_or_else(|| default_title(&envs));
    Ok(document(&title, &envs, &sections).into_string())
}

/// `fabprobe ring, topo: node-a` from the schemas and hosts of the inputs.
fn default_title(envs: &[Envelope]) -> String {
    // Each kind once, in the order given (`topo, check`, not `topo, check, topo, check`).
    let mut kinds: Vec<&str> = Vec::new();
    for k in envs.iter().map(|e| e.schema.trim_start_matches("fabprobe.")) {
        if !kinds.contains(&k) {
            kinds.push(k);
        }
    }
    // A sweep's host is the machine that ran it, not the fleet it judged: name the fleet.
    if let [e] = envs
        && e.schema == "fabprobe.sweep"
    {
        let n = e.data.get("nodes").and_then(|n| n.get("reports")).and_then(|r| r.as_u64());
        return match n {
            Some(n) => format!("fabprobe sweep: a fleet of {n} reports"),
            None => "fabprobe sweep".to_string(),
        };
    }
    let mut hosts: Vec<&str> = envs.iter().filter_map(|e| e.hostname).collect();
    hosts.sort_unstable();
    hosts.dedup();
    match hosts.as_slice() {
        [one] => format!("fabprobe {}: {one}", kinds.join(", ")),
        _ => format!("fabprobe {}", kinds.join(", ")),
    }
}

/// No fetch of any kind (`default-src 'none'`); only the page's own style element.
const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src data:";

fn document(title: &str, envs: &[Envelope], sections: &[Markup]) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="Content-Security-Policy" content=(CSP);
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="color-scheme" content="light dark";
                title { (title) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                header {
                    h1 { (title) }
                    p.muted {
                        "From "
                        @for (i, e) in envs.iter().enumerate() {
                            @if i > 0 { ", " }
                            code { (e.file) }
                            " (" (e.schema)
                            @if let Some(h) = e.hostname { " on " (h) }
                            @if let Some(t) = e.captured_at { ", " (t) }
                            ")"
                        }
                        @if let Some(v) = envs.first().and_then(|e| e.tool_version) {
                            "; fabprobe " (v)
                        }
                        "."
                    }
                }
                @for s in sections { (s) }
            }
        }
    }
}

/// `pass`/`warn`/`fail` as the class and the word the text reports print.
fn severity_word(s: &str) -> (&'static str, &'static str) {
    match s {
        "fail" => ("fail", "FAIL"),
        "warn" => ("warn", "WARN"),
        "pass" => ("pass", "PASS"),
        _ => ("unknown", "UNKNOWN"),
    }
}

/// The findings as a table: severity, id, subject, message and fix.
fn findings_table(findings: &[&Finding]) -> Markup {
    html! {
        table.findings {
            thead { tr { th { "severity" } th { "finding" } th { "subject" } th { "message and fix" } } }
            tbody {
                @for f in findings {
                    @let (class, word) = severity_word(&f.severity);
                    tr class=(class) {
                        td { span class={"badge " (class)} { (word) } }
                        td { code { (f.id) } }
                        td { (f.subject) }
                        td {
                            (f.message)
                            @if let Some(fix) = &f.fix { (remedy("fix", fix)) }
                        }
                    }
                }
            }
        }
    }
}

/// A fix or next step: its prose as text, each command a block of its own that copies
/// as it is (no backticks), inline references in `code`, file lines named as such.
pub(crate) fn remedy(word: &str, text: &str) -> Markup {
    use crate::render::remedy::{parts, Part};
    html! {
        div.fix {
            (word) ": "
            @for p in parts(text) {
                @match p {
                    Part::Prose(t) => { (t) " " }
                    Part::Inline(c) => { code { (c) } }
                    Part::Command(c) => { pre.cmd { code { (c) } } }
                    Part::FileLine(c) => { pre.cmd.file { code { (c) } } }
                }
            }
        }
    }
}

/// Light by default, dark when the reader's system asks, light again on paper. Data colours
/// (the heatmap's scale, verdict states) are the same in both; ink and lines follow `--fg`.
/// Below 820 px tables tighten and the sweep grid's cause headers stand on their side, so
/// a 700 px window shows every column without a scroll bar (tests/html_report.rs measures).
const STYLE: &str = r#"
:root { color-scheme: light dark; --bg: #ffffff; --fg: #1d1f21; --muted: #5f6368; --line: #c8ccd0;
  --panel: #f4f5f7; --fail: #c62828; --warn: #b36200; --pass: #2e7d32; --unknown: #6b6f76;
  --missing: #8e24aa; --outlier: #00838f; --outline: #111111; --empty: #e3e5e8;
  --data1: #1e88e5; --data2: #8d6e63; }
@media (prefers-color-scheme: dark) {
  :root { --bg: #16181b; --fg: #e4e6e8; --muted: #a2a7ad; --line: #41464d; --panel: #202328;
    --fail: #ef5350; --warn: #ffa726; --pass: #66bb6a; --unknown: #9aa0a6; --missing: #ce93d8;
    --outlier: #4dd0e1; --outline: #ffffff; --empty: #2a2e34; --data1: #64b5f6; --data2: #bcaaa4; }
}
@media print {
  :root { --bg: #ffffff; --fg: #000000; --muted: #444444; --line: #999999; --panel: #ffffff;
    --outline: #000000; --empty: #eeeeee; }
  section { break-inside: avoid-page; } header { border: 0; }
  * { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
}
body { background: var(--bg); color: var(--fg); font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif;
  max-width: 1280px; margin: 0 auto; padding: 12px 20px 40px; }
h1 { font-size: 20px; margin: 8px 0 2px; } h2 { font-size: 18px; margin: 28px 0 6px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
header { padding-bottom: 2px; }
code, .mono { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 12.5px; }
.muted { color: var(--muted); }
section { border-top: 2px solid var(--line); margin-top: 18px; }
.verdicts { background: var(--panel); border-left: 5px solid var(--line); padding: 8px 12px; margin: 10px 0; }
.verdicts.pass { border-left-color: var(--pass); } .verdicts.fail { border-left-color: var(--fail); } .verdicts.unknown { border-left-color: var(--unknown); }
.verdicts.warn { border-left-color: var(--warn); } .verdicts p.unread { color: var(--muted); }
.verdicts p { margin: 4px 0; font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 13px;
  white-space: pre-wrap; overflow-wrap: anywhere; }
.verdicts p.next, .verdicts div.next { margin-left: 2em; color: var(--muted); }
table { border-collapse: collapse; margin: 6px 0 12px; font-size: 13px; }
th, td { border: 1px solid var(--line); padding: 3px 7px; text-align: left; vertical-align: top; }
th { background: var(--panel); } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.fix { color: var(--muted); margin-top: 3px; }
pre.cmd { margin: 3px 0 3px 1.5em; padding: 2px 6px; background: var(--panel); color: var(--fg);
  white-space: pre-wrap; overflow-wrap: anywhere; border-left: 3px solid var(--line); }
pre.cmd.file { border-left-style: dashed; }
.badge { display: inline-block; padding: 0 6px; border-radius: 3px; font-weight: 600; font-size: 12px; color: #fff; }
.badge.fail { background: var(--fail); } .badge.warn { background: var(--warn); }
.badge.pass { background: var(--pass); } .badge.unknown { background: var(--unknown); }
.badge.missing { background: var(--missing); } .badge.outlier { background: var(--outlier); }
tr.slow td { font-weight: 600; } td.outlier { background: color-mix(in srgb, var(--outlier) 25%, transparent); }
td.hit { text-align: center; }
svg { display: block; max-width: 100%; height: auto; margin: 6px 0; }
svg text { fill: var(--fg); font: 11px system-ui, sans-serif; }
svg text.small { font-size: 9px; } svg text.label { font-weight: 700; }
svg .axis { stroke: var(--fg); stroke-width: 1; fill: none; }
svg .grid { stroke: var(--line); stroke-width: 1; fill: none; }
svg .empty { fill: var(--empty); }
svg .outline { fill: none; stroke: var(--outline); stroke-width: 3; }
svg .outline.not-judged { stroke-dasharray: 6 4; stroke-width: 2; }
svg .series { fill: none; stroke-width: 2.2; } svg .oop { stroke: var(--data1); } svg .ip { stroke: var(--data2); stroke-dasharray: 5 3; }
svg .dot.oop { fill: var(--data1); } svg .dot.ip { fill: var(--data2); }
svg .rate { stroke: var(--fg); stroke-width: 1.5; stroke-dasharray: 8 4; }
svg .median { stroke: var(--muted); stroke-width: 1.5; stroke-dasharray: 2 3; }
svg .pass { fill: var(--pass); } svg .warn { fill: var(--warn); } svg .fail { fill: var(--fail); }
svg .missing { fill: var(--missing); } svg .unreadable { fill: var(--unknown); } svg .outlier { fill: var(--outlier); }
svg rect.cell.unknown { fill: var(--unknown); }
.scroll { overflow-x: auto; } th code { white-space: normal; overflow-wrap: normal; word-break: keep-all; }
table.grid th { min-width: 5.5em; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 14px; font-size: 12px; margin: 4px 0; }
.legend span::before { content: ""; display: inline-block; width: 11px; height: 11px; margin-right: 4px;
  vertical-align: -1px; background: var(--c); border: 1px solid var(--line); }
.tree { display: flex; flex-wrap: wrap; gap: 10px; align-items: flex-start; }
.box { border: 1px solid var(--line); border-radius: 4px; padding: 4px 6px 6px; margin: 4px 0; background: var(--bg); }
.box > .title { font-size: 12px; font-weight: 600; color: var(--muted); }
.box.numa { background: var(--panel); } .box.numa > .title { color: var(--fg); font-size: 13px; }
.kids { display: flex; flex-wrap: wrap; gap: 6px; align-items: flex-start; }
.dev { border: 2px solid var(--line); border-radius: 4px; padding: 3px 6px; min-width: 120px; font-size: 12px; }
.dev.gpu { border-color: var(--data1); } .dev.nic { border-color: var(--data2); }
.dev.fail { outline: 3px solid var(--fail); } .dev.warn { outline: 3px solid var(--warn); }
.dev b { font-size: 13px; } .dev .finding { font-weight: 600; }
table.hosts td, table.facts td { overflow-wrap: anywhere; } table.hosts td:first-child { white-space: nowrap; } .nccl-verdict { margin: 4px 0 14px; }
@media (max-width: 820px) {
  body { padding: 8px 10px 30px; } table { font-size: 12px; } th, td { padding: 2px 4px; }
  table.grid th { min-width: 0; } table.grid th[data-id] { writing-mode: sideways-lr; vertical-align: bottom; }
}
"#;

#[cfg(test)]
mod tests {
    use super::STYLE;

    /// The states a page colours, each with the class words that mark it.
    const STATES: &[(&str, &[&str])] = &[
        ("fail", &["fail"]),
        ("warn", &["warn"]),
        ("pass", &["pass"]),
        ("unknown", &["unknown", "unreadable"]),
        ("missing", &["missing"]),
        ("outlier", &["outlier"]),
    ];

    /// Every `selector { declarations }` of the stylesheet outside `:root` (where the
    /// colours are defined) and outside the `@media` wrappers' own braces.
    fn rules() -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut rest = STYLE;
        while let Some(open) = rest.find('{') {
            let head = rest[..open].trim();
            let head = head.rsplit('}').next().unwrap_or(head).trim();
            if head.starts_with('@') {
                rest = &rest[open + 1..];
                continue;
            }
            let close = rest[open..].find('}').map(|i| open + i).unwrap_or(rest.len());
            if !head.starts_with(":root") {
                out.push((head.to_string(), rest[open + 1..close].to_string()));
            }
            rest = &rest[(close + 1).min(rest.len())..];
        }
        out
    }

    // One colour per state on every page (issue 47): a state's colour is used only by
    // rules for that state, and a state's rule uses no other state's colour.
    #[test]
    fn each_state_colour_belongs_to_its_state_only() {
        let rules = rules();
        assert!(rules.len() > 40, "the stylesheet parse found only {} rules", rules.len());
        for (selector, decls) in &rules {
            for (state, words) in STATES {
                let marked = words.iter().any(|w| selector.contains(&format!(".{w}")));
                let uses = decls.contains(&format!("var(--{state})"));
                assert!(!uses || marked, "`{selector}` uses --{state} without that state's class");
                if marked {
                    for (other, _) in STATES.iter().filter(|(o, _)| o != state) {
                        assert!(
                            !decls.contains(&format!("var(--{other})")),
                            "`{selector}` marks {state} but uses --{other}"
                        );
                    }
                }
            }
            // Colours come from the named variables; the badge's white text is the one literal.
            let literal = decls.replace("color: #fff;", "");
            assert!(!literal.contains('#') && !literal.contains("hsl("), "`{selector}` has a literal colour: {decls}");
        }
    }

    // The legends say what each colour means: a state's colour is named by that state.
    #[test]
    fn legends_name_the_state_of_each_state_colour() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/render/html");
        let mut seen = 0;
        for entry in std::fs::read_dir(dir).expect("src/render/html") {
            let path = entry.expect("entry").path();
            let text = std::fs::read_to_string(&path).expect("source");
            for (i, _) in text.match_indices("style=\"--c:") {
                let span = &text[i..text[i..].find('}').map(|j| i + j).unwrap_or(text.len())];
                assert!(!span.contains("--c:#"), "{}: a legend with a literal colour: {span}", path.display());
                for (state, words) in STATES {
                    if span.contains(&format!("var(--{state})")) {
                        seen += 1;
                        let label = span.to_lowercase();
                        assert!(words.iter().any(|w| label.contains(w)), "{}: --{state} labelled otherwise: {span}", path.display());
                    }
                }
            }
        }
        assert!(seen >= 8, "only {seen} state legends found");
    }
}
