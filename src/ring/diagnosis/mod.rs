//! Turning what the ranks saw into verdicts: the link-scan plan ([`plan`]) and its
//! coordinator-side driver ([`driver`]), slow-link localization ([`localize`]), hang and
//! death verdicts ([`watchdog`]), RDMA completion errors ([`linkerror`]), and port-counter evidence from each rank's NIC
//! ([`evidence`]), the switch port at the other end of it ([`neighbor`]); port rates against the peers' and the port's own maximum ([`rates`], [`portmax`]) and the confirmation of
//! suspects on new connections ([`confirm`]); traffic on a port that was not the probe's
//! ([`traffic`]); connections that went silent for seconds, then ran ([`stall`]); a data port
//! that flapped during the run ([`flap`]).
pub mod confirm;
pub mod driver;
pub mod evidence;
pub mod flap;
pub mod linkerror;
pub mod localize;
pub mod neighbor;
#[cfg(test)]
#[cfg(test)]
pub mod pastes;
pub mod plan;
pub mod portmax;
pub mod rates;
#[cfg(any(test, feature = "testkit"))]
pub mod simfabric;
pub mod stall;
pub mod traffic;
pub mod watchdog;
