//! Plain-text helpers shared by table renderers: findings lines.

use crate::finding::{Finding, Severity};

/// Findings as lines under a table: `FAIL subject: message` plus evidence and fix.
pub fn findings(findings: &[Finding]) -> String {
    let mut out = String::new();
    let shown: Vec<_> = findings.iter().filter(|f| f.severity != Severity::Pass).collect();
    if shown.is_empty() {
        return out;
    }
    out.push_str("\nFindings:\n");
    for f in shown {
        out.push_str(&format!(
            "  {:<4} {}: {}\n",
            f.severity.as_str().to_uppercase(),
            f.subject,
            f.message
        ));
        if !f.evidence.is_empty() {
            let ev: Vec<String> = f
                .evidence
                .iter()
                .map(|(k, v)| match v {
                    serde_json::Value::String(s) => format!("{k}={s}"),
                    other => format!("{k}={other}"),
                })
                .collect();
            out.push_str(&format!("       evidence: {}\n", ev.join(", ")));
        }
        if let Some(fix) = &f.fix {
            out.push_str(&format!("       fix: {fix}\n"));
        }
    }
    out
}
