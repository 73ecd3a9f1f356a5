//! `/sys/class/net/<if>/`: what the ring's link scan needs of a network interface, its
//! port speed. Format: kernel net/core/net-sysfs.c `speed_show` prints the ethtool speed in
//! Mbit/s as `"%d\n"`; `-1` (SPEED_UNKNOWN) when the driver does not know it, and reading
//! fails with EINVAL while the link is down or for devices without link settings (`lo`).

use crate::host::Host;

/// `"100000\n"` -> Some(100000.0) Mbit/s; `-1`, `0`, garbage -> None. Pure.
pub fn parse_speed_mbps(s: &str) -> Option<f64> {
    let v: i64 = s.trim_end_matches('\n').trim().parse().ok()?;
    (v > 0).then_some(v as f64)
}

/// The port speed of `ifname` in 10^9 bytes/s (Mbit/s / 8000), where the kernel knows it.
pub(crate) fn read_speed_gbs(host: &Host, ifname: &str) -> Option<f64> {
    if ifname.is_empty() || ifname.contains('/') {
        return None;
    }
    let raw = host.attr(format!("/sys/class/net/{ifname}/speed"));
    parse_speed_mbps(raw.value()?).map(|mbps| mbps / 8000.0)
}

/// `"9000\n"` -> Some(9000): the interface MTU in bytes (net-sysfs.c `mtu` prints `"%d\n"`).
pub(crate) fn parse_mtu(s: &str) -> Option<u32> {
    s.trim_end_matches('\n').trim().parse().ok().filter(|m| *m > 0)
}

pub(crate) fn read_mtu(host: &Host, ifname: &str) -> Option<u32> {
    if ifname.is_empty() || ifname.contains('/') {
        return None;
    }
    parse_mtu(host.attr(format!("/sys/class/net/{ifname}/mtu")).value()?)
}

/// The RoCE path MTU a netdev MTU allows: the largest IB MTU (256..4096) that fits after
/// the RoCE v2 headers, as the kernel's `iboe_get_mtu()` (include/rdma/ib_addr.h) computes
/// it: GRH 40 + UDP 8 + BTH 12 + XRC ext 4 + AtomicETH 28 + ICRC 4 = 96 bytes. mlx5 reports
/// this as the port's active_mtu. 9000 -> 4096, 4200 -> 4096, 4000 -> 2048, 1500 -> 1024.
pub(crate) fn roce_mtu(netdev_mtu: u32) -> Option<u32> {
    let room = netdev_mtu.checked_sub(96)?;
    [4096, 2048, 1024, 512, 256].into_iter().find(|m| room >= *m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roce_path_mtu_from_the_netdev_mtu() {
        for (netdev, want) in [
            (9000, Some(4096)),
            (4192, Some(4096)),
            (4191, Some(2048)),
            (4200, Some(4096)),
            (1500, Some(1024)),
            (1120, Some(1024)),
            (1119, Some(512)),
            (300, None),
            (50, None),
        ] {
            assert_eq!(roce_mtu(netdev), want, "{netdev}");
        }
        assert_eq!(parse_mtu("9000\n"), Some(9000));
        assert_eq!(parse_mtu("0\n"), None);
        assert_eq!(parse_mtu("x"), None);
    }

    #[test]
    fn speeds() {
        for (raw, want) in [
            ("100000\n", Some(100000.0)),
            ("10000", Some(10000.0)),
            ("-1\n", None),
            ("0\n", None),
            ("", None),
            ("fast\n", None),
        ] {
            assert_eq!(parse_speed_mbps(raw), want, "{raw:?}");
        }
    }
}
