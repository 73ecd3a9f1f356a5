//! Turning what the ranks saw into verdicts: the link-scan plan ([`plan`]) and its
//! coordinator-side driver ([`driver`]), slow-link localization ([`localize`]), hang and
//! death verdicts ([`watchdog`]), RDMA completion errors ([`linkerror`]), and port-counter evidence from each rank's NIC
//! ([`evidence`]).
pub mod driver;
pub mod evidence;
pub mod linkerror;
pub mod localize;
#[cfg(test)]
pub mod pastes;
pub mod plan;
pub mod watchdog;
