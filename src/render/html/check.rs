//! A `fabprobe.check` report as a page section: its verdict line, as `check` prints it, and
//! the ranked findings with their fixes.

use maud::{Markup, html};
use serde::Deserialize;

use super::{Envelope, HtmlError, findings_table, severity_word};

#[derive(Deserialize)]
struct Check {
    verdict: String,
    policy: PolicyView,
    counts: Counts,
    #[serde(default)]
    worst: Option<Worst>,
    #[serde(default)]
    not_evaluated: Vec<Unread>,
}

#[derive(Deserialize)]
struct Unread {
    key: String,
    reason: String,
    /// The missing fact the key rests on: the fold is by it, as in the text.
    #[serde(default)]
    missing: Option<crate::finding::MissingFact>,
}

/// The policy the report was judged by (`data.policy`), as the page reads it back.
#[derive(Deserialize)]
struct PolicyView {
    name: String,
    source: String,
}

#[derive(Deserialize)]
struct Counts {
    fail: u64,
    warn: u64,
}

#[derive(Deserialize)]
struct Worst {
    id: String,
    subject: String,
    message: String,
}

/// The verdict line as `check` prints it, the counts (or that nothing failed or warned), the
/// worst cause, what was not evaluated (one entry per missing fact), then the findings.
pub(super) fn section(e: &Envelope) -> Result<Markup, HtmlError> {
    let c: Check = e.view("data", e.data)?;
    let (class, word) = severity_word(&c.verdict);
    let findings: Vec<_> = e.findings.iter().collect();
    let counts = if c.counts.fail + c.counts.warn == 0 {
        "no fail or warn findings".to_string()
    } else {
        format!("{} fail, {} warn", c.counts.fail, c.counts.warn)
    };
    Ok(html! {
        section.check {
            h2 { "Check" @if let Some(h) = e.hostname { ": " (h) } }
            div class={"verdicts " (class)} {
                p.verdict { "fabprobe check: " (word) "  policy " (c.policy.name) " (" (c.policy.source) ")  host "
                    (e.hostname.unwrap_or("?")) }
                p.verdict { (counts)
                    @if let Some(w) = &c.worst { "; worst: " code { (w.id) } " " (w.subject) ": " (w.message) } }
                @if !c.not_evaluated.is_empty() {
                    p.verdict.unread { (unread_line(&c.not_evaluated)) }
                }
            }
            @if !findings.is_empty() { (findings_table(&findings)) }
        }
    })
}

fn unread_line(u: &[Unread]) -> String {
    let notes: Vec<crate::check::decide::NotEvaluated> = u
        .iter()
        .map(|n| crate::check::decide::NotEvaluated {
            key: n.key.clone(),
            reason: n.reason.clone(),
            missing: n.missing,
        })
        .collect();
    crate::render::check::not_evaluated_line(&notes)
}
