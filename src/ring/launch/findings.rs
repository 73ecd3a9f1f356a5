//! The ring's report as findings (the envelope's `findings`): wrong sums, each verdict (its
//! kind as `ring.<kind>`, its subject the link or rank it names, its next step as the fix),
//! and an aborted run that reached no verdict. Pure.

use crate::finding::{Finding, Severity, ToFindings};
use crate::ring::report::RingReport;

impl ToFindings for RingReport {
    fn findings(&self) -> Vec<Finding> {
        findings(self)
    }
}

/// The findings of `r`, in the report's order.
fn findings(r: &RingReport) -> Vec<Finding> {
    let mut f = Vec::new();
    let wrong = r.wrong_total();
    if wrong > 0 {
        f.push(
            Finding::new(
                "ring.wrong_results",
                Severity::Fail,
                "allreduce",
                format!("{wrong} elements differ from the exact sum"),
            )
            .evidence("wrong", wrong),
        );
    }
    for v in &r.verdicts {
        let subject = match (v.from_rank, v.to_rank) {
            (Some(a), Some(b)) => format!("rank {a} -> rank {b}"),
            (Some(a), None) | (None, Some(a)) => format!("rank {a}"),
            (None, None) => "ring".into(),
        };
        let mut x = Finding::new(
            &format!(
                "ring.{}",
                serde_json::to_value(v.kind)
                    .ok()
                    .and_then(|k| k.as_str().map(String::from))
                    .unwrap_or_default()
            ),
            Severity::Fail,
            subject,
            v.message.clone(),
        );
        if let Some(n) = &v.next {
            x = x.fix(n.clone());
        }
        f.push(x);
    }
    if let Some(e) = &r.error
        && r.verdicts.is_empty()
    {
        f.push(Finding::new("ring.aborted", Severity::Fail, "ring", e.clone()));
    }
    f
}
