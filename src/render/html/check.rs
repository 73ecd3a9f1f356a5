//! A `fabprobe.check` report as a page section: its verdict line, as `check` prints it, and
//! the ranked findings with their fixes.

use maud::{Markup, html};
use serde::Deserialize;

use super::{Envelope, HtmlError, findings_table, severity_word};

#[derive(Deserialize)]
struct Check {
    verdict: String,
    policy: Policy,
    counts: Counts,
}

#[derive(Deserialize)]
struct Policy {
    name: String,
    source: String,
}

#[derive(Deserialize)]
struct Counts {
    fail: u64,
    warn: u64,
    pass: u64,
}

pub(super) fn section(e: &Envelope) -> Result<Markup, HtmlError> {
    let c: Check = e.view("data", e.data)?;
    let (class, word) = severity_word(&c.verdict);
    let findings: Vec<_> = e.findings.iter().collect();
    Ok(html! {
        section.check {
            h2 { "Check" @if let Some(h) = e.hostname { ": " (h) } }
            div class={"verdicts " (if class == "warn" { "pass" } else { class })} {
                p.verdict { "fabprobe check: " (word) "  policy " (c.policy.name) " (" (c.policy.source) ")  host "
                    (e.hostname.unwrap_or("?")) }
                p.verdict { (c.counts.fail) " fail, " (c.counts.warn) " warn, " (c.counts.pass) " pass" }
            }
            @if !findings.is_empty() { (findings_table(&findings)) }
        }
    })
}
