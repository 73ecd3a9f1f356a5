//! `NCCL_IB_HCA` as NCCL reads it (`ncclIbInitDevices`, rdma-facts.md §3(b)): `^` excludes,
//! then `=` asks for exact names, then a comma-separated list of `dev[:port[:rail[:plane]]]`.
//! Without `=`, an entry is a prefix: `mlx5_1` also matches `mlx5_10`..`mlx5_19`.

use serde::Serialize;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HcaEntry {
    pub name: String,
    /// None: any port.
    pub port: Option<u32>,
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
        let entries = rest
            .split(',')
            .filter(|e| !e.is_empty())
            .map(|e| {
                let mut f = e.split(':');
                HcaEntry {
                    name: f.next().unwrap_or("").to_string(),
                    // NCCL parses the port with atoi; a bad one reads as 0 and matches no port.
                    port: f.next().map(|p| p.trim().parse().unwrap_or(0)),
                }
            })
            .collect();
        HcaSpec {
            exclude,
            exact,
            entries,
        }
    }

    /// The entry a device port matches (prefix or exact name, and the port if given).
    pub fn matching_entry(&self, dev: &str, port: u32) -> Option<&HcaEntry> {
        self.entries.iter().find(|e| {
            let name_ok = if self.exact {
                dev == e.name
            } else {
                dev.starts_with(e.name.as_str())
            };
            name_ok && e.port.is_none_or(|p| p == port)
        })
    }

    /// `matchIfList(...) XOR searchNot`; an empty list matches everything.
    pub fn selects(&self, dev: &str, port: u32) -> bool {
        let hit = self.entries.is_empty() || self.matching_entry(dev, port).is_some();
        hit != self.exclude
    }

    /// Entries without `=` that also match a longer device name than the one written
    /// (`mlx5_1` matching `mlx5_10`): the (entry, surprise device) pairs among `devices`.
    pub fn prefix_surprises<'a>(&self, devices: &'a [String]) -> Vec<(String, &'a str)> {
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
}
