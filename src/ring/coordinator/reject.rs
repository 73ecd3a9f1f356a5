//! Rejections: what is not a rank of this job, or comes too late, is told why and recorded.

use std::net::TcpStream;
use std::sync::mpsc::Receiver;

use super::join::{Knock, knocks};
use super::*;
use crate::ring::control::Plane;
use crate::ring::gate::{self, BUSY, Incoming};
use crate::text::printable;
use crate::ring::wire::WireError;

/// Turn a connection away: tell it why (best effort, never blocks) and record it. Busy
/// refusals were told by the door already.
pub(crate) fn refuse(rep: &mut CoordinatorReport, plane: &mut Plane, s: &Knock, peer: &str, reason: &str) {
    if !reason.starts_with(BUSY) {
        s.reject(plane, &printable(reason, MAX_REASON_CHARS));
    }
    rep.reject(peer, reason);
}

/// [`refuse`] for a connection of its own (rank 0's door for nodes, which relays nothing).
pub(crate) fn refuse_tcp(rep: &mut CoordinatorReport, s: &TcpStream, peer: &str, reason: &str) {
    if !reason.starts_with(BUSY) {
        gate::reject_now(s, &printable(reason, MAX_REASON_CHARS));
    }
    rep.reject(peer, reason);
}

/// Why the door turned a connection away, in plain words (its own refusals are not a
/// malformed message).
pub(crate) fn door_reason(e: WireError) -> String {
    match e {
        WireError::Malformed(m) if m.starts_with(BUSY) || m.starts_with("no complete hello") => m,
        WireError::Closed => "closed before saying hello".into(),
        e => e.to_string(),
    }
}

/// Late arrivals (after the table went out) are turned away, and recorded; a claim of a
/// rank in the run names the connection that holds it.
pub(super) fn drain_rejections(
    cfg: &CoordinatorConfig,
    rx: &Receiver<Incoming>,
    rep: &mut CoordinatorReport,
    plane: &mut Plane,
) {
    for (s, peer, hello) in knocks(rx, plane, None) {
        let reason = match hello {
            Ok(h) => match rep.control_peers.get(&h.rank) {
                Some(holder) if plane.has(h.rank) => {
                    let who = cfg.claimed(h.rank);
                    format!("{who} arrived after the run started; the run's {who} is connected from {holder}")
                }
                _ => format!(
                    "{} arrived after the run started (or was aborted)",
                    cfg.claimed(h.rank)
                ),
            },
            Err(e) => door_reason(e),
        };
        refuse(rep, plane, &s, &peer, &reason);
    }
}
