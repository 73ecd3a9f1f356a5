//! Probes: pure functions from a [`Host`] to a typed report. They never print.

pub mod topo;

use crate::host::Host;

/// Run every local probe once, for `snapshot` capture: what they read is what a snapshot
/// holds. Returns one line per probe that failed (the capture still goes on).
pub fn run_all_for_capture(host: &Host) -> Vec<String> {
    let mut errors = Vec::new();
    errors.extend(
        topo::probe(host)
            .notes
            .into_iter()
            .filter(|n| n.starts_with("cannot"))
            .map(|n| format!("topo: {n}")),
    );
    errors
}
