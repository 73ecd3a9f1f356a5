//! `NCCL_IB_HCA` as NCCL reads it (`src/transport/net_ib/init.cc` `ncclIbInitDevices`; see
//! rdma-facts.md §3(b)): `^` excludes, then `=` asks for exact names, then a comma-separated
//! list of `dev[:port]`. Without `=`, `mlx5_1` is a prefix and also matches `mlx5_10`. A port
//! is matched only when given. Only ACTIVE ports with an InfiniBand or Ethernet link layer
//! are used. The ring's choice of one port for a rank adds one rule of its own: among the
//! ports NCCL would use, the one whose netdev carries the rank's data interface.

/// A parsed `NCCL_IB_HCA` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HcaSpec {
    pub exclude: bool,
    pub exact: bool,
    /// `(device, port)`; the port None when not given.
    pub entries: Vec<(String, Option<u32>)>,
}

impl HcaSpec {
    /// None for an empty value (NCCL then uses every device).
    pub fn parse(s: &str) -> Option<HcaSpec> {
        let s = s.trim();
        if s.is_empty() {
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
        let entries = rest
            .split(',')
            .filter(|e| !e.is_empty())
            .map(|e| {
                let mut it = e.split(':');
                let dev = it.next().unwrap_or("").to_string();
                // `dev:port[:rail[:plane]]`; an unparsable port counts as "any" like atoi's 0
                // would not: NCCL's strtol gives 0, which matches no port, so keep it as 0.
                let port = it.next().map(|p| p.trim().parse::<u32>().unwrap_or(0));
                (dev, port)
            })
            .collect();
        Some(HcaSpec {
            exclude,
            exact,
            entries,
        })
    }

    /// `matchIfList(dev, port) XOR searchNot`; an empty list matches everything.
    pub fn matches(&self, dev: &str, port: u32) -> bool {
        let hit = self.entries.is_empty()
            || self.entries.iter().any(|(name, p)| {
                let name_ok = if self.exact {
                    dev == name
                } else {
                    dev.starts_with(name.as_str())
                };
                name_ok && p.is_none_or(|p| p == port)
            });
        hit != self.exclude
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
pub struct PortChoice {
    pub device: String,
    pub port: u32,
    pub gid_index: u32,
    pub why: String,
}

/// Choose the port: `--device dev[:port]` if given, else the ports `NCCL_IB_HCA` allows;
/// ACTIVE IB/Ethernet only; the one on `data_netdev` first, else the first in name order.
/// The GID index is `gid_override` (`--gid-index`), else NCCL's choice for that port.
/// Errors say what was there and what to change.
pub fn choose_port(
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
        Some(d) => (HcaSpec::parse(&format!("={d}")), "--device"),
        None => (hca_env.and_then(HcaSpec::parse), "NCCL_IB_HCA"),
    };
    let mut usable: Vec<&PortCandidate> = ports
        .iter()
        .filter(|p| spec.as_ref().is_none_or(|s| s.matches(&p.device, p.port)))
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
        let states: Vec<String> = before
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
        return Err(format!(
            "no ACTIVE RDMA port ({}); hint: `fabprobe links` shows why a port is down",
            states.join(", ")
        ));
    }
    usable.sort_by(|a, b| (a.device.as_str(), a.port).cmp(&(b.device.as_str(), b.port)));
    let on_data = data_netdev.and_then(|n| usable.iter().find(|p| p.netdevs.iter().any(|d| d == n)));
    let (p, why) = match on_data {
        Some(p) => (*p, format!("the port on the data interface {}", data_netdev.unwrap_or("-"))),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_exact_exclude_and_ports() {
        let s = HcaSpec::parse("mlx5_1").unwrap();
        assert!(s.matches("mlx5_1", 1));
        assert!(s.matches("mlx5_10", 1), "a prefix without = matches mlx5_10");
        assert!(!s.matches("mlx5_2", 1));
        let s = HcaSpec::parse("=mlx5_1").unwrap();
        assert!(!s.matches("mlx5_10", 1));
        let s = HcaSpec::parse("^mlx5_0,mlx5_1:2").unwrap();
        assert!(!s.matches("mlx5_0", 1));
        assert!(!s.matches("mlx5_1", 2));
        assert!(s.matches("mlx5_1", 1));
        assert!(s.matches("mlx5_2", 1));
        let s = HcaSpec::parse("mlx5_0:1:0:0").unwrap();
        assert_eq!(s.entries, vec![("mlx5_0".to_string(), Some(1))]);
        assert!(HcaSpec::parse("").is_none());
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
        assert!(c.why.contains("NCCL_IB_HCA") && c.why.contains("--gid-index"), "{}", c.why);
        let c = choose_port(&ports, Some("mlx5_1:1"), Some("mlx5_0"), None, None).unwrap();
        assert_eq!(c.device, "mlx5_1");
    }

    #[test]
    fn refusals_say_what_is_there() {
        let ports = [cand("mlx5_0", 1, "DOWN", "eth0", Some(3))];
        let e = choose_port(&ports, None, None, None, None).unwrap_err();
        assert!(e.contains("no ACTIVE RDMA port (mlx5_0:1 DOWN)"), "{e}");
        let e = choose_port(&ports, None, Some("=mlx5_1"), None, None).unwrap_err();
        assert!(e.contains("NCCL_IB_HCA matches none") && e.contains("mlx5_0:1"), "{e}");
        let ports = [cand("rxe0", 1, "ACTIVE", "eth0", None)];
        let e = choose_port(&ports, None, None, None, None).unwrap_err();
        assert!(e.contains("no usable GID index on rxe0:1"), "{e}");
        assert!(choose_port(&[], None, None, None, None).is_err());
    }
}
