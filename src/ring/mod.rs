//! The multi-node ring AllReduce probe. Never imports `cli` or `render`. Layout, from the
//! bottom up (each layer uses only those above it in this list):
//!
//! * [`model`]: shared types (ranks, verdicts, wait reports, counter moves), no deps;
//! * [`interrupt`]: the scheduler's SIGTERM (or a Ctrl-C), noted by the CLI, no deps;
//! * [`wire`]: the one framing, shared by the control plane and the data handshakes;
//! * [`launcher`]: rank and world from flags or the launcher's environment;
//! * [`diagnosis`]: scan plan and driver, localization, watchdog, counter evidence;
//! * [`rendezvous`]: bind, hello, join, cancellation (the rank's side of the control plane);
//! * [`gate`]: the coordinator's door (accept, hello deadlines, flood eviction);
//! * [`control`]: the coordinator's control connections on one event loop (bounded per-rank queues);
//! * [`lag`]: the coordinator's own loop lag and CPU figures (a stall of rank 0 blames no rank);
//! * [`coordinator`]: rank 0's serve loop; reaches diagnosis only through [`coordinator::Judge`]
//!   and [`coordinator::ScanDriver`];
//! * [`collective`]: transports (`tcp`, `rdma`, test-only `inproc`), progress, allreduce,
//!   the per-rank scan step;
//! * [`run`] and [`report`]: one rank's whole run, and the job's report;
//! * [`schedstat`]: how long a rank's threads waited for a CPU (scan evidence);
//! * [`rails`], [`railplan`], [`railmux`] and [`railmerge`]: `--rails`, one ring per rail of
//!   the node (each a [`run`]) among the nodes that drive that rail, every rail's control
//!   messages on the node's one connection, and the job's report from the rails' reports.
pub mod collective;
pub mod control;
pub mod coordinator;
pub mod diagnosis;
pub mod gate;
pub mod interrupt;
#[cfg(test)]
mod judged_tests;
pub mod lag;
pub mod launcher;
pub mod model;
pub mod options;
pub mod orders;
pub mod railmerge;
pub mod railmux;
pub mod railplan;
pub mod rails;
pub mod rendezvous;
pub mod report;
pub mod run;
pub mod schedstat;
// TCP_INFO: no well-kept crate exposes it (one getsockopt, with its SAFETY note).
#[allow(unsafe_code)]
pub mod tcpinfo;
#[cfg(test)]
mod verdict_tests;
pub mod wire;
