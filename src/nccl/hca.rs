//! `NCCL_IB_HCA` as NCCL reads it (`ncclIbInitDevices`, `src/transport/net_ib/init.cc`): `^` excludes,
//! then `=` asks for exact names, then a comma-separated list of `dev[:port[:rail[:plane]]]`.
//! Without `=`, an entry is a prefix: `mlx5_1` also matches `mlx5_10`..`mlx5_19`. The ring's
//! choice of one port for a rank ([`choose_port`]) adds one rule of its own: among the ports
//! NCCL would use, the one whose netdev carries the rank's data interface.

use serde::Serialize;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HcaEntry {
    pub name: String,
    /// None: any port (none given, or `-1`). `atoi` of what follows the `:`, so an empty
    /// or non-numeric port is 0, which no port matches.
    pub port: Option<i64>,
}

/// C's `atoi`: leading white space, a sign, then digits up to the first non-digit; no
/// digits is 0 (`"2x"` is 2, `""` and `"x"` are 0). Saturates where C overflows.
pub(crate) fn atoi(s: &str) -> i64 {
    let t = s.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let n = t.bytes().take_while(u8::is_ascii_digit).fold(0i64, |n, d| {
        n.saturating_mul(10).saturating_add(i64::from(d - b'0'))
    });
    if neg { -n } else { n }
}

/// NCCL's `parseStringList` (`src/misc/utils.cc`) after the caller removed `^` and `=`:
/// `name[:port[:...]]` entries split at `,`; an entry with an empty name is skipped; the
/// port is `atoi` of the text after the first `:` (the rest up to `,` ignored), and
/// without a `:` it is -1 (any).
pub(crate) fn parse_string_list(s: &str) -> Vec<(String, i64)> {
    s.split(',')
        .filter_map(|item| {
            let (name, port) = match item.split_once(':') {
                Some((n, p)) => (n, atoi(p)),
                None => (item, -1),
            };
            (!name.is_empty()).then(|| (name.to_string(), port))
        })
        .collect()
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HcaSpec {
    pub exclude: bool,
    pub exact: bool,
    pub entries: Vec<HcaEntry>,
}

impl HcaSpec {
    pub fn parse(s: &str) -> HcaSpec {
        let (exclude, rest) = match s.strip_prefix('^') {
            Some(r) => (true, r),
            None => (false, s),
        };
        let (exact, rest) = match rest.strip_prefix('=') {
            Some(r) => (true, r),
            None => (false, rest),
        };
        let entries = parse_string_list(rest)
            .into_iter()
            .map(|(name, port)| HcaEntry {
                name,
                // matchPort: -1 on either side matches any port.
                port: (port != -1).then_some(port),
            })
            .collect();
        HcaSpec {
            exclude,
            exact,
            entries,
        }
    }

    /// The entry a device port matches (prefix or exact name, and the port if given).
    pub(crate) fn matching_entry(&self, dev: &str, port: u32) -> Option<&HcaEntry> {
        self.entries.iter().find(|e| {
            let name_ok = if self.exact {
                dev == e.name
            } else {
                dev.starts_with(e.name.as_str())
            };
            name_ok && e.port.is_none_or(|p| p == i64::from(port))
        })
    }

    /// `matchIfList(...) XOR searchNot`; an empty list matches everything.
    pub fn selects(&self, dev: &str, port: u32) -> bool {
        let hit = self.entries.is_empty() || self.matching_entry(dev, port).is_some();
        hit != self.exclude
    }

    /// Entries without `=` that also match a longer device name than the one written
    /// (`mlx5_1` matching `mlx5_10`): the (entry, surprise device) pairs among `devices`.
    pub(crate) fn prefix_surprises<'a>(&self, devices: &'a [String]) -> Vec<(String, &'a str)> {
        if self.exact {
            return Vec::new();
        }
        let mut out = Vec::new();
        for e in &self.entries {
            for d in devices {
                if d != &e.name && d.starts_with(e.name.as_str()) && devices.contains(&e.name) {
                    out.push((e.name.clone(), d.as_str()));
                }
            }
        }
        out
    }
}

/// One RDMA port as the choice sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortCandidate {
    pub device: String,
    pub port: u32,
    /// `ACTIVE`, `DOWN`, ...
    pub state: Option<String>,
    pub link_layer: Option<String>,
    /// The netdevs its GIDs are on.
    pub netdevs: Vec<String>,
    /// The GID index NCCL would use, and why (or why none).
    pub gid_index: Option<u32>,
    pub gid_reason: String,
}

/// The port a ring rank uses, and why (for the log and the report header).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PortChoice {
    pub device: String,
    pub port: u32,
    pub gid_index: u32,
    pub why: String,
}

/// Choose the port: `--device dev[:port]` if given, else the ports `NCCL_IB_HCA` allows;
/// ACTIVE IB/Ethernet only; the one on `data_netdev` first, else the first in name order.
/// The GID index is `gid_override` (`--gid-index`), else NCCL's choice for that port.
/// Errors say what was there and what to change.
pub(crate) fn choose_port(
    ports: &[PortCandidate],
    device_flag: Option<&str>,
    hca_env: Option<&str>,
    data_netdev: Option<&str>,
    gid_override: Option<u32>,
) -> Result<PortChoice, String> {
    if ports.is_empty() {
        return Err("no RDMA devices on this host".into());
    }
    let (spec, source) = match device_flag {
        Some(d) => (Some(HcaSpec::parse(&format!("={d}"))), "--device"),
        None => (
            hca_env
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(HcaSpec::parse),
            "NCCL_IB_HCA",
        ),
    };
    let mut usable: Vec<&PortCandidate> = ports
        .iter()
        .filter(|p| spec.as_ref().is_none_or(|s| s.selects(&p.device, p.port)))
        .collect();
    if usable.is_empty() {
        let all: Vec<String> = ports.iter().map(|p| format!("{}:{}", p.device, p.port)).collect();
        return Err(format!(
            "{source} matches none of the RDMA ports ({}); hint: `fabprobe links` lists them",
            all.join(", ")
        ));
    }
    let before = usable.clone();
    usable.retain(|p| {
        p.state.as_deref() == Some("ACTIVE")
            && matches!(p.link_layer.as_deref(), Some("InfiniBand") | Some("Ethernet"))
    });
    if usable.is_empty() {
        return Err(no_active_port(&before));
    }
    usable.sort_by(|a, b| (a.device.as_str(), a.port).cmp(&(b.device.as_str(), b.port)));
    let on_data = data_netdev.and_then(|n| usable.iter().find(|p| p.netdevs.iter().any(|d| d == n)));
    let (p, why) = match on_data {
        Some(p) => (
            *p,
            format!("the port on the data interface {}", data_netdev.unwrap_or("-")),
        ),
        None => (usable[0], "the first ACTIVE port".to_string()),
    };
    let why = match spec {
        Some(_) => format!("{why} that {source} allows"),
        None => why,
    };
    let (gid_index, gwhy) = match (gid_override, p.gid_index) {
        (Some(g), _) => (g, "--gid-index".to_string()),
        (None, Some(g)) => (g, format!("NCCL's choice: {}", p.gid_reason)),
        (None, None) => {
            return Err(format!(
                "no usable GID index on {}:{} ({}); hint: pick one from `fabprobe gids` with --gid-index",
                p.device, p.port, p.gid_reason
            ));
        }
    };
    Ok(PortChoice {
        device: p.device.clone(),
        port: p.port,
        gid_index,
        why: format!("{why}; GID index {gid_index} from {gwhy}"),
    })
}

/// The error when none of the allowed ports is ACTIVE: each one with its state.
fn no_active_port(allowed: &[&PortCandidate]) -> String {
    let states: Vec<String> = allowed
        .iter()
        .map(|p| {
            format!(
                "{}:{} {}",
                p.device,
                p.port,
                p.state.as_deref().unwrap_or("state unknown")
            )
        })
        .collect();
    format!(
        "no ACTIVE RDMA port ({}); hint: `fabprobe links` shows why a port is down",
        states.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_and_exact() {
        let s = HcaSpec::parse("mlx5_1");
        assert!(s.selects("mlx5_1", 1));
        assert!(s.selects("mlx5_10", 1));
        assert!(!s.selects("mlx5_2", 1));
        let e = HcaSpec::parse("=mlx5_1");
        assert!(e.selects("mlx5_1", 1));
        assert!(!e.selects("mlx5_10", 1));
        let x = HcaSpec::parse("^=mlx5_1");
        assert!(!x.selects("mlx5_1", 1));
        assert!(x.selects("mlx5_10", 1));
    }

    #[test]
    fn ports() {
        let s = HcaSpec::parse("mlx5_0:1,mlx5_1:2");
        assert!(s.selects("mlx5_0", 1));
        assert!(!s.selects("mlx5_0", 2));
        assert!(s.selects("mlx5_1", 2));
        assert_eq!(s.entries[0].port, Some(1));
    }

    /// Ports as NCCL's `parseStringList` reads them: `atoi` of the text after the first
    /// `:`, -1 meaning any port, entries without a name skipped.
    #[test]
    fn ports_as_parse_string_list_reads_them() {
        for (spec, dev, port, want) in [
            ("mlx5_0:1x", "mlx5_0", 1, true),
            ("mlx5_0: 2", "mlx5_0", 2, true),
            ("mlx5_0:+1", "mlx5_0", 1, true),
            ("mlx5_0:1:0", "mlx5_0", 1, true),
            ("mlx5_0:-1", "mlx5_0", 2, true),
            ("mlx5_0:", "mlx5_0", 1, false),
            ("mlx5_0:x", "mlx5_0", 1, false),
            ("mlx5_0:-2", "mlx5_0", 1, false),
            // No entry left: an empty list selects every port, as if unset.
            (":1", "mlx5_0", 2, true),
            (":1,mlx5_1", "mlx5_0", 1, false),
            (":1,mlx5_1", "mlx5_1", 1, true),
            // No entry left: an empty list matches every port, and `^` then excludes all.
            ("^:1", "mlx5_0", 1, false),
        ] {
            assert_eq!(
                HcaSpec::parse(spec).selects(dev, port),
                want,
                "{spec} {dev}:{port}"
            );
        }
        assert_eq!(HcaSpec::parse(":1").entries, vec![]);
        assert_eq!(
            parse_string_list("a:7z:1,,b,:3,c:"),
            vec![("a".into(), 7), ("b".into(), -1), ("c".into(), 0)]
        );
        for (s, n) in [
            ("", 0),
            ("12", 12),
            (" \t-3k", -3),
            ("+4", 4),
            ("x1", 0),
            ("99999999999999999999", i64::MAX),
        ] {
            assert_eq!(atoi(s), n, "{s:?}");
        }
    }

    #[test]
    fn surprises() {
        let devs: Vec<String> = ["mlx5_0", "mlx5_1", "mlx5_10", "mlx5_11"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let s = HcaSpec::parse("mlx5_0,mlx5_1");
        assert_eq!(
            s.prefix_surprises(&devs),
            vec![
                ("mlx5_1".to_string(), "mlx5_10"),
                ("mlx5_1".to_string(), "mlx5_11")
            ]
        );
        assert!(HcaSpec::parse("=mlx5_1").prefix_surprises(&devs).is_empty());
        // `mlx5` alone is a deliberate prefix: no device is named exactly that.
        assert!(HcaSpec::parse("mlx5").prefix_surprises(&devs).is_empty());
    }

    fn cand(dev: &str, port: u32, state: &str, netdev: &str, gid: Option<u32>) -> PortCandidate {
        PortCandidate {
            device: dev.into(),
            port,
            state: Some(state.into()),
            link_layer: Some("Ethernet".into()),
            netdevs: vec![netdev.into()],
            gid_index: gid,
            gid_reason: "auto".into(),
        }
    }

    #[test]
    fn the_port_on_the_data_interface_wins() {
        let ports = [
            cand("mlx5_0", 1, "ACTIVE", "eth0", Some(3)),
            cand("mlx5_1", 1, "ACTIVE", "eth1", Some(3)),
        ];
        let c = choose_port(&ports, None, None, Some("eth1"), None).unwrap();
        assert_eq!((c.device.as_str(), c.port, c.gid_index), ("mlx5_1", 1, 3));
        assert!(c.why.contains("data interface eth1"), "{}", c.why);
        let c = choose_port(&ports, None, None, Some("ib9"), None).unwrap();
        assert_eq!(c.device, "mlx5_0");
        let c = choose_port(&ports, None, Some("^mlx5_0"), Some("eth0"), Some(1)).unwrap();
        assert_eq!((c.device.as_str(), c.gid_index), ("mlx5_1", 1));
        assert!(
            c.why.contains("NCCL_IB_HCA") && c.why.contains("--gid-index"),
            "{}",
            c.why
        );
        let c = choose_port(&ports, Some("mlx5_1:1"), Some("mlx5_0"), None, None).unwrap();
        assert_eq!(c.device, "mlx5_1");
    }

    #[test]
    fn refusals_say_what_is_there() {
        let ports = [cand("mlx5_0", 1, "DOWN", "eth0", Some(3))];
        let e = choose_port(&ports, None, None, None, None).unwrap_err();
        assert!(e.contains("no ACTIVE RDMA port (mlx5_0:1 DOWN)"), "{e}");
        let e = choose_port(&ports, None, Some("=mlx5_1"), None, None).unwrap_err();
        assert!(
            e.contains("NCCL_IB_HCA matches none") && e.contains("mlx5_0:1"),
            "{e}"
        );
        let ports = [cand("rxe0", 1, "ACTIVE", "eth0", None)];
        let e = choose_port(&ports, None, None, None, None).unwrap_err();
        assert!(e.contains("no usable GID index on rxe0:1"), "{e}");
        assert!(choose_port(&[], None, None, None, None).is_err());
    }
}
