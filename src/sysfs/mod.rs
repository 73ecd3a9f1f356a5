//! One module per sysfs area: pure parse functions of the kernel's formats plus thin
//! readers through [`crate::host::Host`].
pub mod infiniband;
pub mod net;
pub mod node;
pub mod pci;
