//! The multi-node ring AllReduce probe. Never imports `cli` or `render`. Its rooms, from the
//! bottom up: each module names only modules of its own room or of rooms below it (issue 31;
//! `tests/ring_layers.rs` reads the sources and holds it so):
//!
//! * lower: [`model`] (shared types: ranks, verdicts, wait reports, rail slots), [`wire`] (the
//!   one framing, shared by the control plane and the data handshakes), [`interrupt`] (the
//!   scheduler's SIGTERM, or a Ctrl-C), [`gate`] (the coordinator's door: accept, hello
//!   deadlines, flood eviction), [`control`] (the coordinator's control connections on one
//!   event loop, bounded per-rank queues), [`lag`] (the coordinator's own loop lag: a stall of
//!   rank 0 blames no rank), [`schedstat`] (how long threads waited for a CPU), [`tcpinfo`];
//! * [`diagnosis`] (pure): scan plan and driver, localization, watchdog, counter evidence;
//! * the launch's word and the job's plan: [`launcher`] (rank and world from flags or the
//!   launcher's environment), [`options`], [`orders`] (rings and table parts), [`railplan`];
//!   what a rank reads of its own port through the host: [`portfacts`] (before it joins),
//!   [`portread`] (during the run: line rate, counters, bytes, carrier);
//! * the coordinator and the ranks' data planes: [`coordinator`] (rank 0's serve loop; the
//!   run's judge plugs in through [`coordinator::Judge`] and [`coordinator::ScanDriver`]),
//!   [`rendezvous`] (bind, hello, join: the rank's side of the control plane), [`collective`]
//!   (transports `tcp`, `rdma`, test-only `inproc`; progress, allreduce, the scan step);
//! * the job's report: [`report`], [`railmerge`] (the job's report from the rails' reports);
//! * one rank's whole run: [`run`], and `--rails`: [`rails`], [`railmux`] (one ring per rail
//!   of the node among the nodes that drive that rail, every rail's control messages on the
//!   node's one connection);
//! * the entry the CLI calls: [`launch`] (one run as the CLI's flags ask for it, one rail,
//!   `--rails` or `--local`: data interface and fabric, rank 0's door; it prints nothing
//!   and never exits, the CLI's [`launch::Watch`] takes its lines and rows).
pub mod collective;
pub mod control;
pub mod coordinator;
pub mod diagnosis;
pub mod gate;
pub mod interrupt;
#[cfg(test)]
mod judged_tests;
pub mod lag;
pub mod launch;
pub mod launcher;
pub mod model;
pub mod options;
pub mod orders;
pub mod portfacts;
pub mod portread;
pub mod railmerge;
pub mod railmux;
pub mod railplan;
pub mod rails;
pub mod railstop;
pub mod relay;
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
