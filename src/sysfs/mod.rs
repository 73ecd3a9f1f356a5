//! One module per sysfs area: pure parse functions of the kernel's formats plus thin
//! readers through [`crate::host::Host`].
// Kernel numbers and TLV fields narrowed with `as` would wrap silently: convert with a check.
#![deny(clippy::cast_possible_truncation)]
pub mod dcb;
pub mod infiniband;
pub mod kernel;
pub mod lldp;
pub mod net;
pub mod netqos;
pub mod node;
pub mod pci;
pub mod pcicfg;
