//! The multi-node ring AllReduce probe: launcher environment, bootstrap, transports
//! (tcp, inproc, rdma), the algorithms, and verdicts. Never imports `cli` or `render`.
pub mod allreduce;
pub mod bootstrap;
pub mod launcher;
pub mod linkscan;
pub mod localize;
pub mod nic;
pub mod run;
pub mod scan;
pub mod transport;
pub mod types;
#[cfg(test)]
mod verdict_tests;
pub mod watchdog;
pub mod wire;
