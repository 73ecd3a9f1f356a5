//! `NCCL_SOCKET_IFNAME` as NCCL reads it (`src/misc/socket.cc` `ncclFindInterfaces`,
//! `matchIf` in `src/misc/utils.cc`): `^` excludes, then `=` asks for exact names, then a
//! comma-separated list of prefixes (`name[:port]`, the port ignored for sockets). A value
//! of one character is ignored. Unset, NCCL tries `ib`, then (with `NCCL_COMM_ID`) the
//! interface in that address's subnet, then `^docker,lo,virbr`, `docker`, `lo`, `virbr`.
//! The matching is pure; [`list_interfaces`] is the thin reader (getifaddrs).

use std::net::IpAddr;

/// A parsed `NCCL_SOCKET_IFNAME` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IfSpec {
    pub exclude: bool,
    pub exact: bool,
    pub names: Vec<String>,
}

impl IfSpec {
    /// None when NCCL would ignore the value (unset, or `strlen <= 1`).
    pub fn parse(s: &str) -> Option<IfSpec> {
        if s.len() <= 1 {
            return None;
        }
        let (exclude, rest) = match s.strip_prefix('^') {
            Some(r) => (true, r),
            None => (false, s),
        };
        let (exact, rest) = match rest.strip_prefix('=') {
            Some(r) => (true, r),
            None => (false, rest),
        };
        let names = rest
            .split(',')
            .filter(|e| !e.is_empty())
            .map(|e| e.split(':').next().unwrap_or(e).to_string())
            .collect();
        Some(IfSpec {
            exclude,
            exact,
            names,
        })
    }

    /// `matchIfList(name) XOR searchNot`; an empty list matches everything.
    pub fn matches(&self, name: &str) -> bool {
        let hit = self.names.is_empty()
            || self.names.iter().any(|r| {
                if self.exact {
                    name == r
                } else {
                    name.starts_with(r.as_str())
                }
            });
        hit != self.exclude
    }
}

/// The host's address list (`crate::host::ifaddrs`); the rules here stay pure.
pub use crate::host::ifaddrs::{IfAddr, list_interfaces};

/// Which rule picked the interface, for the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    pub iface: IfAddr,
    pub rule: String,
}

fn candidates<'a>(ifs: &'a [IfAddr], spec: &IfSpec) -> Vec<&'a IfAddr> {
    let mut seen: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    for i in ifs {
        if !i.running || (i.addr.is_ipv6() && i.addr.is_loopback()) || !spec.matches(&i.name) {
            continue;
        }
        // The first address per name is the one used.
        if seen.contains(&i.name.as_str()) {
            continue;
        }
        seen.push(&i.name);
        out.push(i);
    }
    out
}

fn same_subnet(a: IpAddr, b: IpAddr, len: u8) -> bool {
    match (a, b) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let m = if len == 0 {
                0
            } else {
                u32::MAX << (32 - len.min(32) as u32)
            };
            u32::from(a) & m == u32::from(b) & m
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let m = if len == 0 {
                0
            } else {
                u128::MAX << (128 - len.min(128) as u32)
            };
            u128::from(a) & m == u128::from(b) & m
        }
        _ => false,
    }
}

/// The interfaces NCCL would use, in order, with the rule that chose them. `spec` is the
/// `NCCL_SOCKET_IFNAME` value (or `--ifname`), `comm_id` the `NCCL_COMM_ID` address.
pub fn select(ifs: &[IfAddr], spec: Option<&str>, comm_id: Option<IpAddr>) -> Vec<Choice> {
    let pick = |spec: &IfSpec, rule: &str| -> Vec<Choice> {
        candidates(ifs, spec)
            .into_iter()
            .map(|i| Choice {
                iface: i.clone(),
                rule: rule.to_string(),
            })
            .collect()
    };
    if let Some(s) = spec.and_then(IfSpec::parse) {
        return pick(&s, &format!("matches {}", spec.unwrap_or_default()));
    }
    let prefix = |p: &str| {
        IfSpec::parse(p).unwrap_or(IfSpec {
            exclude: false,
            exact: false,
            names: vec![p.into()],
        })
    };
    let ib = pick(&prefix("ib"), "default: ib*");
    if !ib.is_empty() {
        return ib;
    }
    if let Some(id) = comm_id {
        let all = IfSpec {
            exclude: false,
            exact: false,
            names: vec![],
        };
        if let Some(i) = candidates(ifs, &all)
            .into_iter()
            .find(|i| same_subnet(i.addr, id, i.prefix_len))
        {
            return vec![Choice {
                iface: i.clone(),
                rule: format!("default: same subnet as NCCL_COMM_ID {id}"),
            }];
        }
    }
    for (s, rule) in [
        ("^docker,lo,virbr", "default: ^docker,lo,virbr"),
        ("docker", "default: docker*"),
        ("lo", "default: lo*"),
        ("virbr", "default: virbr*"),
    ] {
        let c = pick(&prefix(s), rule);
        if !c.is_empty() {
            return c;
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_table() {
        let s = |e, x, n: &[&str]| {
            Some(IfSpec {
                exclude: e,
                exact: x,
                names: n.iter().map(|s| s.to_string()).collect(),
            })
        };
        for (v, want) in [
            ("", None),
            ("e", None),
            ("^", None),
            ("eth", s(false, false, &["eth"])),
            ("^docker,lo", s(true, false, &["docker", "lo"])),
            ("=eth1", s(false, true, &["eth1"])),
            ("^=eth1,eth2", s(true, true, &["eth1", "eth2"])),
            ("ib0:1,ib1", s(false, false, &["ib0", "ib1"])),
            ("=^eth", s(false, true, &["^eth"])),
        ] {
            assert_eq!(IfSpec::parse(v), want, "{v:?}");
        }
    }

    #[test]
    fn match_table() {
        for (spec, name, want) in [
            ("eth", "eth10", true),
            ("eth1", "eth10", true),
            ("=eth1", "eth10", false),
            ("=eth1", "eth1", true),
            ("^eth", "eth0", false),
            ("^eth", "ens1", true),
            ("^=eth1", "eth10", true),
            ("ens,eth", "ens3f0", true),
            ("^docker,lo,virbr", "lo", false),
            ("^docker,lo,virbr", "eth0", true),
        ] {
            assert_eq!(IfSpec::parse(spec).unwrap().matches(name), want, "{spec} {name}");
        }
    }

    fn ifa(name: &str, addr: &str, len: u8, running: bool) -> IfAddr {
        IfAddr {
            name: name.into(),
            addr: addr.parse().unwrap(),
            prefix_len: len,
            running,
        }
    }

    #[test]
    fn default_order_and_rules() {
        let host = vec![
            ifa("lo", "127.0.0.1", 8, true),
            ifa("docker0", "172.17.0.1", 16, true),
            ifa("eth0", "198.18.0.10", 24, true),
            ifa("eth1", "198.19.0.10", 24, true),
            ifa("eth1", "198.19.9.10", 24, true),
            ifa("eth2", "10.9.0.1", 24, false),
            ifa("lo", "::1", 128, true),
        ];
        let names = |c: Vec<Choice>| {
            c.into_iter()
                .map(|c| format!("{} {} ({})", c.iface.name, c.iface.addr, c.rule))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(select(&host, None, None)),
            [
                "eth0 198.18.0.10 (default: ^docker,lo,virbr)",
                "eth1 198.19.0.10 (default: ^docker,lo,virbr)"
            ]
        );
        assert_eq!(
            names(select(&host, None, Some("198.19.0.99".parse().unwrap()))),
            ["eth1 198.19.0.10 (default: same subnet as NCCL_COMM_ID 198.19.0.99)"]
        );
        assert_eq!(
            names(select(&host, Some("=eth1"), None)),
            ["eth1 198.19.0.10 (matches =eth1)"]
        );
        assert_eq!(names(select(&host, Some("eth2"), None)), Vec::<String>::new());
        // One character: ignored, the default applies.
        assert_eq!(names(select(&host, Some("e"), None)).len(), 2);
        let mut with_ib = host.clone();
        with_ib.push(ifa("ib0", "192.168.0.1", 24, true));
        assert_eq!(
            names(select(&with_ib, None, None)),
            ["ib0 192.168.0.1 (default: ib*)"]
        );
        let only_lo = vec![ifa("lo", "127.0.0.1", 8, true), ifa("lo", "::1", 128, true)];
        assert_eq!(
            names(select(&only_lo, None, None)),
            ["lo 127.0.0.1 (default: lo*)"]
        );
    }
}
