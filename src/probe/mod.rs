//! Probes: pure functions from a [`Host`] to a typed report. They never print.

pub mod fabric;
pub mod gdr;
pub mod gids;
pub mod links;
pub mod nccl_env;
pub mod qos;
pub mod topo;

use crate::host::Host;
use crate::nccl::settings::NcclSettings;

/// Run every local probe once, for `snapshot` capture: what they read is what a snapshot
/// holds. Returns one line per probe that failed (the capture still goes on).
pub(crate) fn run_all_for_capture(host: &Host) -> Vec<String> {
    let mut errors = Vec::new();
    // Reads the configuration files and lists the library path for libnccl.so.2.X.Y, so
    // the snapshot carries what the model was built from.
    let nccl = NcclSettings::build(host, None);
    let _ = gids::probe(host, &nccl.gid_env());
    let _ = links::probe(host);
    let _ = gdr::probe(host, &nccl);
    let _ = qos::probe(host, nccl.ib_tc().as_ref());
    // The plugin's library path: existence checks, no listings.
    let _ = nccl_env::probe(host, &nccl);
    errors.extend(
        topo::probe(host)
            .notes
            .into_iter()
            .filter(|n| n.starts_with("cannot"))
            .map(|n| format!("topo: {n}")),
    );
    errors
}
