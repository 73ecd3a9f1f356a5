//! The run's options, the same on every rank (each hello carries their canonical form).
//! Their own module, so the report (which lists them) and the run (which uses them) do not
//! import each other.

use std::time::Duration;

use serde::Serialize;

use crate::ring::diagnosis::driver::ScanOptions;

/// The run's options, the same on every rank.
#[derive(Clone, Debug, Serialize)]
pub struct Options {
    pub sizes: Vec<u64>,
    pub iters: u32,
    pub warmup: u32,
    /// Verify results (`-c`); 0 shows `N/A` in `#wrong`.
    pub check: u32,
    pub channels: u32,
    #[serde(rename = "timeout_s")]
    pub timeout_secs: u64,
    /// How long ranks may take to join (`--join-timeout`); not in the canonical form: a
    /// rank's own join window does not change what the run measures.
    #[serde(rename = "join_timeout_s")]
    pub join_timeout_secs: u64,
    /// Receive slots per link and their size (the pipeline depth and the chunk size).
    pub slots: usize,
    pub slot_bytes: usize,
    /// The link scan before the sweep (`--scan`, default on; off with `--no-scan`).
    pub scan: Option<ScanOptions>,
    /// The AllReduce sweep (off with `--scan` alone).
    pub sweep: bool,
}

impl Options {
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_secs)
    }
    pub fn join_timeout(&self) -> Duration {
        Duration::from_secs(self.join_timeout_secs)
    }
    /// `--join-timeout`'s default: at least a minute (launch skew on big jobs), never less
    /// than `--timeout`.
    pub(crate) fn default_join_timeout(timeout_secs: u64) -> u64 {
        timeout_secs.max(60)
    }
    /// The canonical string every rank's hello carries.
    pub(crate) fn canonical(&self) -> String {
        let scan = match &self.scan {
            Some(s) => format!("scan=({} s, {} B x {})", s.budget_s, s.bytes, s.reps),
            None => "scan=off".into(),
        };
        format!(
            "sizes={:?} iters={} warmup={} check={} channels={} slots={} slot_bytes={} {scan} sweep={} timeout={}",
            self.sizes,
            self.iters,
            self.warmup,
            self.check,
            self.channels,
            self.slots,
            self.slot_bytes,
            self.sweep,
            self.timeout_secs
        )
    }
}
