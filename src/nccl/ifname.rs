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
        // The ports are parsed and ignored for sockets; an entry without a name is skipped.
        let names = crate::nccl::hca::parse_string_list(rest)
            .into_iter()
            .map(|(name, _)| name)
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

/// `NCCL_SOCKET_FAMILY` as `ncclEnvSocketFamily` reads it: exactly `AF_INET` or
/// `AF_INET6` restricts the interface list to that family; anything else is ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn parse(s: Option<&str>) -> Option<Family> {
        match s {
            Some("AF_INET") => Some(Family::V4),
            Some("AF_INET6") => Some(Family::V6),
            _ => None,
        }
    }
    fn admits(family: Option<Family>, addr: IpAddr) -> bool {
        match family {
            None => true,
            Some(Family::V4) => addr.is_ipv4(),
            Some(Family::V6) => addr.is_ipv6(),
        }
    }
}

fn candidates<'a>(ifs: &'a [IfAddr], spec: &IfSpec, family: Option<Family>) -> Vec<&'a IfAddr> {
    let mut seen: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    for i in ifs {
        if !i.running
            || !Family::admits(family, i.addr)
            || (i.addr.is_ipv6() && i.addr.is_loopback())
            || !spec.matches(&i.name)
        {
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

/// `NCCL_COMM_ID`'s address as NCCL resolves it (`ncclSocketGetAddrFromString`): `ip:port`
/// or `[v6]:port`, an IPv6 address optionally scoped `%ifname` or `%index` (getaddrinfo turns
/// a name into that interface's index: the `sin6_scope_id` of its link-local addresses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommId {
    pub addr: IpAddr,
    pub scope_id: u32,
}

impl From<IpAddr> for CommId {
    fn from(addr: IpAddr) -> CommId {
        CommId { addr, scope_id: 0 }
    }
}

impl std::fmt::Display for CommId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.scope_id {
            0 => write!(f, "{}", self.addr),
            s => write!(f, "{}%{s}", self.addr),
        }
    }
}

/// The address of an `NCCL_COMM_ID` value; a `%ifname` scope is that interface's index as
/// its link-local addresses in `ifs` carry it. None: a host name (not resolved here), no
/// address, or a scope naming no interface with a link-local address.
pub(crate) fn parse_comm_id(value: &str, ifs: &[IfAddr]) -> Option<CommId> {
    let host = match value.strip_prefix('[') {
        Some(r) => r.split(']').next()?,
        // A bare IPv6 address (more than one colon) has no port to cut.
        None if value.matches(':').count() > 1 => value,
        None => value.rsplit_once(':').map_or(value, |(h, _)| h),
    };
    let (ip, scope) = match host.split_once('%') {
        Some((ip, scope)) => (ip, Some(scope)),
        None => (host, None),
    };
    let addr: IpAddr = ip.parse().ok()?;
    let scope_id = match scope {
        None => 0,
        Some(_) if addr.is_ipv4() => return None,
        Some(s) => match s.parse::<u32>() {
            Ok(n) => n,
            Err(_) => {
                ifs.iter()
                    .find(|i| i.name == s && i.addr.is_ipv6() && i.scope_id != 0)?
                    .scope_id
            }
        },
    };
    Some(CommId { addr, scope_id })
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

/// `ncclFindInterfaceMatchSubnet`: the first address (getifaddrs order) in the subnet of
/// `remote`, of its family, whatever its name, state, `NCCL_SOCKET_IFNAME` or
/// `NCCL_SOCKET_FAMILY`. IPv6 also compares scope ids, as `matchSubnet` does: a link-local
/// `NCCL_COMM_ID` matches only with its `%scope`, and then only that interface.
fn match_subnet(ifs: &[IfAddr], remote: CommId) -> Option<&IfAddr> {
    ifs.iter().find(|i| {
        same_subnet(i.addr, remote.addr, i.prefix_len) && (i.addr.is_ipv4() || i.scope_id == remote.scope_id)
    })
}

/// The interface NCCL's bootstrap listens on (`bootstrapNetInit`): with `NCCL_COMM_ID` the
/// one on that address's subnet (None: NCCL fails, "No usable listening interface
/// found"), else the first of [`select`]'s list.
pub(crate) fn bootstrap(
    ifs: &[IfAddr],
    spec: Option<&str>,
    comm_id: Option<CommId>,
    family: Option<Family>,
) -> Option<Choice> {
    match comm_id {
        Some(id) => match_subnet(ifs, id).map(|i| Choice {
            iface: i.clone(),
            rule: format!("NCCL_COMM_ID {id}: same subnet"),
        }),
        None => select(ifs, spec, None, family).into_iter().next(),
    }
}

/// The interfaces NCCL would use, in order, with the rule that chose them. `spec` is the
/// `NCCL_SOCKET_IFNAME` value (or `--ifname`), `comm_id` the `NCCL_COMM_ID` address,
/// `family` `NCCL_SOCKET_FAMILY`.
pub fn select(
    ifs: &[IfAddr],
    spec: Option<&str>,
    comm_id: Option<CommId>,
    family: Option<Family>,
) -> Vec<Choice> {
    let pick = |spec: &IfSpec, rule: &str| -> Vec<Choice> {
        candidates(ifs, spec, family)
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
    if let Some(id) = comm_id
        && let Some(i) = match_subnet(ifs, id)
    {
        return vec![Choice {
            iface: i.clone(),
            rule: format!("default: same subnet as NCCL_COMM_ID {id}"),
        }];
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
            // parseStringList skips an entry without a name (not a prefix matching all).
            (":1,eth", s(false, false, &["eth"])),
            ("^:0", s(true, false, &[])),
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
            scope_id: 0,
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
            names(select(&host, None, None, None)),
            [
                "eth0 198.18.0.10 (default: ^docker,lo,virbr)",
                "eth1 198.19.0.10 (default: ^docker,lo,virbr)"
            ]
        );
        assert_eq!(
            names(select(&host, None, parse_comm_id("198.19.0.99", &host), None)),
            ["eth1 198.19.0.10 (default: same subnet as NCCL_COMM_ID 198.19.0.99)"]
        );
        assert_eq!(
            names(select(&host, Some("=eth1"), None, None)),
            ["eth1 198.19.0.10 (matches =eth1)"]
        );
        assert_eq!(
            names(select(&host, Some("eth2"), None, None)),
            Vec::<String>::new()
        );
        // One character: ignored, the default applies.
        assert_eq!(names(select(&host, Some("e"), None, None)).len(), 2);
        let mut with_ib = host.clone();
        with_ib.push(ifa("ib0", "192.168.0.1", 24, true));
        assert_eq!(
            names(select(&with_ib, None, None, None)),
            ["ib0 192.168.0.1 (default: ib*)"]
        );
        let only_lo = vec![ifa("lo", "127.0.0.1", 8, true), ifa("lo", "::1", 128, true)];
        assert_eq!(
            names(select(&only_lo, None, None, None)),
            ["lo 127.0.0.1 (default: lo*)"]
        );
    }

    /// `NCCL_COMM_ID` values as NCCL resolves them: a `%scope` (name or index) only on IPv6;
    /// a link-local COMM_ID bootstraps on its scope's interface only, and without a scope on
    /// none (NCCL's `matchSubnet` compares `sin6_scope_id`, 0 for an unscoped address).
    #[test]
    fn comm_id_scopes() {
        let mut host = vec![
            ifa("eth0", "198.18.0.10", 24, true),
            ifa("eth0", "fe80::10", 64, true),
            ifa("eth1", "fe80::11", 64, true),
            ifa("eth1", "fd00::11", 64, true),
        ];
        host[1].scope_id = 2;
        host[2].scope_id = 3;
        let id = |v: &str| parse_comm_id(v, &host).map(|c| c.to_string());
        for (v, want) in [
            ("10.0.0.1:29500", Some("10.0.0.1")),
            ("[fd00::1]:29500", Some("fd00::1")),
            ("[fe80::1%eth1]:29500", Some("fe80::1%3")),
            ("[fe80::1%7]:29500", Some("fe80::1%7")),
            ("[fe80::1%eth9]:29500", None),
            ("10.0.0.1%eth0:29500", None),
            ("fe80::1%eth0", Some("fe80::1%2")),
            ("nonsense", None),
            ("node-a:29500", None),
        ] {
            assert_eq!(id(v).as_deref(), want, "{v}");
        }
        let boot = |v: &str| {
            bootstrap(&host, None, parse_comm_id(v, &host), None)
                .map(|c| format!("{} {}", c.iface.name, c.iface.addr))
        };
        assert_eq!(boot("[fe80::1%eth1]:1").as_deref(), Some("eth1 fe80::11"));
        assert_eq!(boot("[fe80::1%2]:1").as_deref(), Some("eth0 fe80::10"));
        assert_eq!(boot("[fe80::1]:1"), None);
        assert_eq!(boot("[fd00::1]:1").as_deref(), Some("eth1 fd00::11"));
    }

    /// NCCL_SOCKET_FAMILY narrows every step of the list; NCCL_COMM_ID moves the bootstrap
    /// to its subnet's interface whatever NCCL_SOCKET_IFNAME, ib* or the family say, and a
    /// COMM_ID on no local subnet leaves no bootstrap interface (NCCL fails).
    #[test]
    fn family_and_comm_id_bootstrap() {
        let host = vec![
            ifa("ib0", "192.168.0.1", 24, true),
            ifa("eth0", "198.18.0.10", 24, true),
            ifa("eth0", "fd00::10", 64, true),
            ifa("eth1", "fd01::10", 64, true),
            ifa("eth2", "198.19.0.10", 24, false),
        ];
        let names = |c: Vec<Choice>| {
            c.into_iter()
                .map(|c| format!("{} {}", c.iface.name, c.iface.addr))
                .collect::<Vec<_>>()
        };
        let v6 = Family::parse(Some("AF_INET6"));
        assert_eq!(v6, Some(Family::V6));
        assert_eq!(Family::parse(Some("AF_INET")), Some(Family::V4));
        assert_eq!(Family::parse(Some("inet6")), None);
        assert_eq!(
            names(select(&host, Some("eth"), None, v6)),
            ["eth0 fd00::10", "eth1 fd01::10"]
        );
        assert_eq!(
            names(select(&host, Some("eth"), None, None)),
            ["eth0 198.18.0.10", "eth1 fd01::10"]
        );
        assert_eq!(
            names(select(&host, None, None, v6)),
            ["eth0 fd00::10", "eth1 fd01::10"]
        );
        let b = |spec, id: Option<&str>, fam| {
            bootstrap(&host, spec, id.map(|s| parse_comm_id(s, &host).unwrap()), fam)
                .map(|c| format!("{} {} ({})", c.iface.name, c.iface.addr, c.rule))
        };
        assert_eq!(
            b(None, None, None).as_deref(),
            Some("ib0 192.168.0.1 (default: ib*)")
        );
        assert_eq!(
            b(Some("=eth0"), Some("198.19.0.99"), v6).as_deref(),
            Some("eth2 198.19.0.10 (NCCL_COMM_ID 198.19.0.99: same subnet)")
        );
        assert_eq!(
            b(None, Some("fd01::1"), None).as_deref(),
            Some("eth1 fd01::10 (NCCL_COMM_ID fd01::1: same subnet)")
        );
        assert_eq!(b(None, Some("10.0.0.1"), None), None);
    }
}
