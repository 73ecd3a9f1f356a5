//! fabprobe: probe one GPU node's fabric and find the slow or dead link across many.
//!
//! Data flows one way: [`host::Host`] (live or snapshot) → [`probe`] → typed report →
//! [`check`] → [`render`]. Only [`cli`] prints or exits.

pub mod check;
pub mod cli;
pub mod finding;
pub mod host;
pub mod nccl;
pub mod nccl_log;
pub mod probe;
pub mod render;
pub mod ring;
pub mod snapshot;
pub mod sysfs;
#[cfg(feature = "rdma")]
pub mod verbs;
