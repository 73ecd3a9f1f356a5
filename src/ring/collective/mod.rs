//! The data plane: transports (one trait, `tcp` and test-only `inproc` implementations),
//! the ring AllReduce and its progress tracking, and one rank's part of a link-scan order.
pub mod allreduce;
pub mod scanstep;
pub mod transport;
