//! fabprobe: probe one GPU node's fabric and find the slow or dead link across many.
//!
//! Data flows one way: [`host::Host`] (live or snapshot) → [`probe`] → typed report →
//! [`check`] → [`render`]. Only [`cli`] prints or exits.

// Hand-written unsafe only in the few modules that allow it (ethtool ioctl, the NVML
// symbol nvml-wrapper lacks, verbs, and the ring files whose poll/setsockopt are being
// replaced on their own branches); each block says why it is sound.
#![deny(unsafe_code)]
// warn, not deny: verbs.rs (another branch's file) still has one block without a comment.
#![warn(clippy::undocumented_unsafe_blocks)]

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
#[allow(unsafe_code)]
pub mod verbs;
