//! fabprobe: probe one GPU node's fabric and find the slow or dead link across many.
//!
//! Data flows one way: [`host::Host`] (live or snapshot) → [`probe`] → typed report →
//! [`check`] → [`render`]. Only [`cli`] prints or exits.
//!
//! The rooms, lowest first; a room names only rooms before it (tests/layering.rs holds it):
//! text < finding < host < sysfs < verbs < nccl < probe < snapshot < nccl_log < ring < check < render < cli

// Hand-written unsafe only in the few modules that allow it, each header saying why no
// well-kept crate covers it: verbs, transport/rdma, ring/tcpinfo (TCP_INFO),
// host/netif/ethtool (the statistics ioctl), host/nvml (one NVML symbol). Cargo.toml's
// [lints] also deny unsafe_code in tests and benches, and undocumented unsafe blocks.
#![deny(unsafe_code)]

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
pub mod text;
#[cfg(feature = "rdma")]
#[allow(unsafe_code)]
pub mod verbs;
