//! `--rails` on rank 0: the rails of one node end together. The first rail whose ring is
//! judged failed is noted in a [`RailStop`] the rails' coordinators share, and each other
//! rail's judge ([`stopping_judge`]) ends its own ring a grace later. Owned here, below the
//! rank's run that wires it and the job's report that reads its marker.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::ring::coordinator::Judge;
use crate::ring::model::{Verdict, VerdictKind};

/// The rails of one node end together: the first rail whose ring is judged failed (a hang,
/// a link error, a lost rank) is noted here, and each other rail's coordinator stops its own
/// ring [`STOP_GRACE`] later, so the output comes within `--timeout` and a bounded grace
/// instead of after the healthy rails' own ends. The grace lets a fault every rail sees (a
/// dead node) be named by every rail, and so as "all rails".
#[derive(Default)]
pub struct RailStop {
    first: Mutex<Option<(u32, Instant, String)>>,
}

/// See [`RailStop`].
pub const STOP_GRACE: Duration = Duration::from_secs(1);

impl RailStop {
    /// Rail `rail` was judged failed with `why` (the first one counts).
    pub fn fail(&self, rail: u32, why: &str) {
        let mut g = self.first.lock().unwrap_or_else(|p| p.into_inner());
        if g.is_none() {
            *g = Some((rail, Instant::now(), why.to_string()));
        }
    }

    /// Another rail than `rail` failed at least `grace` ago: that rail and its cause.
    pub fn other(&self, rail: u32, grace: Duration) -> Option<(u32, String)> {
        let g = self.first.lock().unwrap_or_else(|p| p.into_inner());
        g.as_ref()
            .filter(|(k, at, _)| *k != rail && at.elapsed() >= grace)
            .map(|(k, _, why)| (*k, why.clone()))
    }
}

/// Rail `rail`'s judge: `inner`'s verdicts (noted in `stop` as this rail's failure), else,
/// while the ring runs and another rail has failed, a [`VerdictKind::RailStopped`] marker
/// that ends this rail's ring too (the job's report keeps it out of the verdicts).
pub fn stopping_judge(inner: Judge, rail: u32, stop: Arc<RailStop>) -> Judge {
    Arc::new(move |rep, now_ms, final_call| {
        let v = inner(rep, now_ms, final_call);
        if let Some(first) = v.first() {
            stop.fail(rail, &first.message);
            return v;
        }
        if final_call {
            return v;
        }
        match stop.other(rail, STOP_GRACE) {
            Some((k, why)) => vec![stopped(rail, k, &why)],
            None => v,
        }
    })
}

/// The marker that stops rail `rail` because rail `by` failed with `why`.
fn stopped(rail: u32, by: u32, why: &str) -> Verdict {
    Verdict {
        kind: VerdictKind::RailStopped,
        from_rank: None,
        to_rank: None,
        from_host: None,
        to_host: None,
        evidence: BTreeMap::from([("stopped_by_rail".to_string(), serde_json::json!(by))]),
        message: format!(
            "rail {rail} stopped: rail {by} failed first ({why}); this rail's ring had not failed"
        ),
        next: None,
        rail: None,
    }
}

#[cfg(test)]
mod tests {
    use std::thread;

    use super::*;

    #[test]
    fn a_failed_rail_stops_the_others_after_the_grace_and_never_itself() {
        use crate::ring::coordinator::CoordinatorReport;
        let failing: Judge = Arc::new(|_: &CoordinatorReport, _: u64, _: bool| {
            vec![stopped(9, 9, "stand-in for a hang verdict")]
        });
        let quiet: Judge = Arc::new(|_: &CoordinatorReport, _: u64, _: bool| Vec::new());
        let stop = Arc::new(RailStop::default());
        let rail0 = stopping_judge(quiet, 0, stop.clone());
        let rail1 = stopping_judge(failing, 1, stop.clone());
        let rep = CoordinatorReport::default();
        assert!(rail0(&rep, 0, false).is_empty(), "nothing failed yet");
        assert_eq!(rail1(&rep, 0, false).len(), 1);
        // Within the grace rail 0 may still name the same fault itself.
        assert!(rail0(&rep, 0, false).is_empty());
        thread::sleep(STOP_GRACE + Duration::from_millis(50));
        let v = rail0(&rep, 0, false);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].kind, VerdictKind::RailStopped);
        assert_eq!(
            v[0].message,
            "rail 0 stopped: rail 1 failed first (rail 9 stopped: rail 9 failed first (stand-in for a hang verdict); \
             this rail's ring had not failed); this rail's ring had not failed"
        );
        // The final judgement of a ring that ended by itself adds nothing; the failed rail
        // is never stopped by its own failure.
        assert!(rail0(&rep, 0, true).is_empty());
        assert_eq!(stop.other(1, Duration::ZERO), None);
    }
}
