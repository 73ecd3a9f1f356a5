//! The host's interface addresses, one entry per address in getifaddrs order (what NCCL's
//! `findInterfaces` walks), also the snapshot's `fabprobe/ifaddrs.json`.
//!
//! Read through `nix::ifaddrs`, not `pnet_datalink::interfaces()`: pnet merges addresses
//! per interface name (losing the per-address order NCCL's first-address-per-name rule
//! depends on: every IPv4 address before any IPv6 one) and returns an empty list when
//! getifaddrs fails, which would read as "no interface" instead of unknown.

use std::net::IpAddr;

use nix::ifaddrs::InterfaceAddress;
use nix::net::if_::InterfaceFlags;

/// One interface address as NCCL considers it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IfAddr {
    pub name: String,
    pub addr: IpAddr,
    pub prefix_len: u8,
    /// IFF_RUNNING (and UP).
    pub running: bool,
    /// The IPv6 `sin6_scope_id` (the interface index of a link-local address); 0 for IPv4,
    /// global IPv6, and snapshots taken before it was recorded.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub scope_id: u32,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

/// One getifaddrs entry as an [`IfAddr`]; `None` for entries without an IP address (the
/// `AF_PACKET` link entries, a missing address).
fn from_entry(e: &InterfaceAddress) -> Option<IfAddr> {
    let addr = e.address.as_ref()?;
    let mask = e.netmask.as_ref();
    let (addr, prefix_len, scope_id) = if let Some(a) = addr.as_sockaddr_in() {
        let len = mask
            .and_then(|m| m.as_sockaddr_in())
            .map_or(32, |m| u32::from(m.ip()).count_ones() as u8);
        (IpAddr::V4(a.ip()), len, 0)
    } else if let Some(a) = addr.as_sockaddr_in6() {
        let len = mask
            .and_then(|m| m.as_sockaddr_in6())
            .map_or(128, |m| u128::from(m.ip()).count_ones() as u8);
        (IpAddr::V6(a.ip()), len, a.scope_id())
    } else {
        return None;
    };
    let up_running = InterfaceFlags::IFF_UP | InterfaceFlags::IFF_RUNNING;
    Some(IfAddr {
        name: e.interface_name.clone(),
        addr,
        prefix_len,
        running: e.flags.contains(up_running),
        scope_id,
    })
}

/// The host's interface addresses (IPv4 and IPv6), in getifaddrs order.
pub fn list_interfaces() -> std::io::Result<Vec<IfAddr>> {
    let it = nix::ifaddrs::getifaddrs().map_err(std::io::Error::from)?;
    Ok(it.filter_map(|e| from_entry(&e)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::SockaddrStorage;

    fn entry(name: &str, addr: &str, mask: Option<&str>, flags: InterfaceFlags) -> InterfaceAddress {
        let sa = |s: &str| -> SockaddrStorage {
            match s.parse::<IpAddr>().unwrap() {
                IpAddr::V4(a) => SockaddrStorage::from(std::net::SocketAddrV4::new(a, 0)),
                IpAddr::V6(a) => SockaddrStorage::from(std::net::SocketAddrV6::new(a, 0, 0, 0)),
            }
        };
        InterfaceAddress {
            interface_name: name.into(),
            flags,
            address: Some(sa(addr)),
            netmask: mask.map(sa),
            broadcast: None,
            destination: None,
        }
    }

    #[test]
    fn entries_convert_with_prefix_and_flags() {
        let ur = InterfaceFlags::IFF_UP | InterfaceFlags::IFF_RUNNING;
        let got = from_entry(&entry("eth0", "198.18.0.1", Some("255.255.255.0"), ur)).unwrap();
        assert_eq!(got.addr, "198.18.0.1".parse::<IpAddr>().unwrap());
        assert_eq!((got.prefix_len, got.running), (24, true));
        // Up but not running (no carrier): NCCL skips it.
        let got = from_entry(&entry("eth1", "198.18.1.1", None, InterfaceFlags::IFF_UP)).unwrap();
        assert_eq!((got.prefix_len, got.running), (32, false));
        let got = from_entry(&entry("eth0", "fe80::1", Some("ffff:ffff:ffff:ffff::"), ur)).unwrap();
        assert_eq!(got.prefix_len, 64);
        let mut link = entry("eth0", "198.18.0.1", None, ur);
        link.address = None;
        assert_eq!(from_entry(&link), None);
    }

    #[test]
    fn live_interfaces_are_listed() {
        let ifs = list_interfaces().unwrap();
        assert!(ifs.iter().any(|i| i.addr.is_loopback()), "{ifs:?}");
    }
}
