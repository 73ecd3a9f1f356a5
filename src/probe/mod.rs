//! Probes: pure functions from a [`Host`] to a typed report. They never print.

pub mod gdr;
pub mod gids;
pub mod links;
pub mod nccl_env;
pub mod qos;
pub mod topo;

use crate::host::Host;

/// Run every local probe once, for `snapshot` capture: what they read is what a snapshot
/// holds. Returns one line per probe that failed (the capture still goes on).
pub fn run_all_for_capture(host: &Host) -> Vec<String> {
    let mut errors = Vec::new();
    let _ = gids::probe(host, &gids::env_of(host));
    let _ = links::probe(host);
    let _ = gdr::probe(host);
    let _ = qos::probe(host);
    // Configuration files and the plugin's library path: existence checks, no listings.
    let _ = nccl_env::probe(host);
    errors.extend(
        topo::probe(host)
            .notes
            .into_iter()
            .filter(|n| n.starts_with("cannot"))
            .map(|n| format!("topo: {n}")),
    );
    errors
}
