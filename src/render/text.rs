//! Plain-text helpers shared by table renderers: the verdict line and findings lines.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::finding::{Finding, Severity};

/// The width tables must fit, 0 for none; the CLI sets it once from `COLUMNS` or the
/// terminal (renderers read no environment).
static WIDTH: AtomicUsize = AtomicUsize::new(0);

/// Fit tables to `width` columns from now on (None: as wide as their content).
pub fn set_width(width: Option<usize>) {
    WIDTH.store(width.unwrap_or(0), Ordering::Relaxed);
}

pub fn width() -> Option<usize> {
    Some(WIDTH.load(Ordering::Relaxed)).filter(|w| *w > 0)
}

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

/// `fabprobe gids: WARN  0 fail, 2 warn; worst: mlx5_0:1: ...`: what the reader needs first.
pub fn verdict_line(command: &str, findings: &[Finding]) -> String {
    let count = |s: Severity| findings.iter().filter(|f| f.severity == s).count();
    let (fail, warn) = (count(Severity::Fail), count(Severity::Warn));
    let worst = crate::finding::worst(findings);
    // The first finding of the worst severity, in the probe's own order.
    match findings.iter().find(|f| f.severity == worst && worst != Severity::Pass) {
        Some(f) => format!(
            "fabprobe {command}: {}  {fail} fail, {warn} warn; worst: {}: {}\n",
            worst.as_str().to_uppercase(),
            f.subject,
            f.message
        ),
        None => format!("fabprobe {command}: PASS  no fail or warn findings\n"),
    }
}

/// The verdict line, then the findings ranked fail before warn, then the detail tables.
pub fn verdict_first(command: &str, findings: &[Finding], body: String) -> String {
    let mut ranked: Vec<Finding> = findings.to_vec();
    // Stable: within one severity the probe's order (device, then port) stays.
    ranked.sort_by_key(|f| std::cmp::Reverse(f.severity));
    let mut out = verdict_line(command, findings);
    let listed = self::findings(&ranked);
    out.push_str(listed.strip_prefix("\nFindings:\n").unwrap_or(&listed));
    out.push('\n');
    out.push_str(&body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdict_line_names_the_worst_and_counts() {
        let w = Finding::new("a.w", Severity::Warn, "mlx5_0:1", "a warning");
        let f = Finding::new("a.f", Severity::Fail, "mlx5_1:1", "a failure");
        let p = Finding::new("a.p", Severity::Pass, "x", "fine");
        assert_eq!(verdict_line("gids", &[]), "fabprobe gids: PASS  no fail or warn findings\n");
        assert_eq!(verdict_line("gids", std::slice::from_ref(&p)), "fabprobe gids: PASS  no fail or warn findings\n");
        assert_eq!(
            verdict_line("links", &[w.clone(), f.clone()]),
            "fabprobe links: FAIL  1 fail, 1 warn; worst: mlx5_1:1: a failure\n"
        );
        let out = verdict_first("links", &[w, p, f], "BODY\n".into());
        let fail_at = out.find("  FAIL mlx5_1:1").unwrap();
        let warn_at = out.find("  WARN mlx5_0:1").unwrap();
        assert!(fail_at < warn_at && out.ends_with("\nBODY\n"), "{out}");
    }
}
