//! The report's verdicts as the envelope's findings (`nccl_log.<cause>`): subject the host
//! and rank, message what the cause means, evidence the line and where it was read, fix the
//! next step. Pure.

use crate::finding::{Finding, ToFindings};
use crate::nccl_log::Report;

impl ToFindings for Report {
    fn findings(&self) -> Vec<Finding> {
        findings(self)
    }
}

/// The verdicts as envelope findings (`nccl_log.<cause>`), for scripts and the exit code.
fn findings(r: &Report) -> Vec<Finding> {
    r.verdicts
        .iter()
        .filter_map(|v| {
            // Unknown is no finding: nothing was judged (exit 3 says so).
            let severity = v.severity;
            if severity == crate::finding::Severity::Unknown {
                return None;
            }
            let subject = match (&v.host, v.rank) {
                (Some(h), Some(k)) => format!("{h} rank {k}"),
                (Some(h), None) => h.clone(),
                (None, Some(k)) => format!("rank {k}"),
                (None, None) => "job".into(),
            };
            let mut f = Finding::new(
                &format!("nccl_log.{}", v.cause),
                severity,
                subject,
                v.meaning.clone(),
            )
            .evidence("line", v.line.clone())
            .fix(v.next.clone());
            if !v.file.is_empty() {
                f = f.evidence("at", format!("{}:{}", v.file, v.line_no));
            }
            Some(f)
        })
        .collect()
}
