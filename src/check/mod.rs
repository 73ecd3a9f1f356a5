//! Judgement: policies applied to probe reports, and `sweep` across nodes. The finding
//! vocabulary itself lives in `crate::finding`.

pub mod assemble;
pub mod decide;
pub mod facts;
pub mod fingerprint;
pub mod hostlist;
pub mod judge;
pub mod policy;
pub mod ringsweep;
pub mod run;
pub mod sweep;

pub use crate::finding::{Finding, Severity, worst};
