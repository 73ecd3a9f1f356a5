//! NCCL's own selection rules (socket interface, HCA list, GID index, path types),
//! shared by the probes and the ring so that both choose exactly as NCCL would.
pub mod conf;
pub mod gid;
pub mod hca;
pub mod ifname;
pub mod params;
pub mod settings;
pub mod topo;
pub mod topo_xml;
pub mod version;
