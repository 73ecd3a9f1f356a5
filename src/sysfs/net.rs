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
pub fn read_speed_gbs(host: &Host, ifname: &str) -> Option<f64> {
    if ifname.is_empty() || ifname.contains('/') {
        return None;
    }
    let raw = host.attr(format!("/sys/class/net/{ifname}/speed"));
    parse_speed_mbps(raw.value()?).map(|mbps| mbps / 8000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

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
