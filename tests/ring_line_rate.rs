//! The line rate the ring's link scan judges links against: the RDMA port's rate where the
//! data interface is an RDMA port's netdev (or a GID's), else `/sys/class/net/<if>/speed`,
//! else unknown. Read through snapshots with known rates; the lab checks the `speed` path
//! live on veths
//! (tests/lab_localize.rs, `scan_line_rate_is_each_ranks_sysfs_speed`).

use fabprobe::host::Host;
use fabprobe::ring::portread::line_rate;

fn rate(fixture: &str, ifname: &str) -> Option<(f64, String)> {
    line_rate(&Host::snapshot(format!("fixtures/{fixture}")).unwrap(), ifname)
}

#[test]
fn rdma_port_rate_of_the_interface() {
    // mlx5_0's netdev ens1f0: "100 Gb/sec (4X EDR)" = 12.5 GB/s.
    assert_eq!(
        rate("roce-bond-host", "ens1f0"),
        Some((12.5, "rdma mlx5_0 port 1".into()))
    );
    // bond1 is no PCI function's netdev; mlx5_bond_0's GIDs name it: "200 Gb/sec (4X HDR)".
    assert_eq!(
        rate("roce-bond-host", "bond1"),
        Some((25.0, "rdma mlx5_bond_0 port 1".into()))
    );
}

#[test]
fn sysfs_speed_when_no_rdma_port_carries_the_interface() {
    // cpu-only: an E810 port without RDMA, `speed` 100000 (Mb/s) = 12.5 GB/s.
    assert_eq!(
        rate("cpu-only", "ens1f0"),
        Some((12.5, "/sys/class/net/ens1f0/speed".into()))
    );
}

#[test]
fn unknown_interface_has_no_rate() {
    assert_eq!(rate("cpu-only", "eth9"), None);
    assert_eq!(rate("roce-bond-host", "eth9"), None);
}
