//! Judgement: policies applied to probe reports, and `sweep` across nodes. The finding
//! vocabulary itself lives in `crate::finding`.

pub mod decide;
pub mod hostlist;
pub mod policy;
pub mod ringsweep;
pub mod run;
pub mod sweep;

pub use crate::finding::{Finding, Severity, worst};
