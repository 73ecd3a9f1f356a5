//! `/sys/bus/pci/devices/<bdf>/`: identity, NUMA affinity and PCIe link attributes.
//! Formats: kernel drivers/pci/pci-sysfs.c (`current_link_speed` is `"%s\n"` of
//! `pci_speed_string()`: "2.5 GT/s PCIe" .. "64.0 GT/s PCIe" since Linux 5.7, "8 GT/s"-style
//! without the suffix before it, "Unknown" when the link is down or unknown).

use serde::{Deserialize, Serialize};

use crate::host::{Attr, Host};

/// A PCIe link speed as sysfs prints it, with the rate parsed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkSpeed {
    /// Verbatim kernel string, e.g. `32.0 GT/s PCIe`.
    pub raw: String,
    /// Transfer rate per lane in GT/s.
    pub gts: f64,
    /// PCIe generation implied by the rate (1 = 2.5 GT/s ... 6 = 64 GT/s).
    pub generation: Option<u8>,
}

/// `"16.0 GT/s PCIe"`, `"8 GT/s"`, `"2.5 GT/s"` → Some; `"Unknown"` / garbage → None.
pub fn parse_link_speed(s: &str) -> Option<LinkSpeed> {
    let s = s.trim();
    let num = s.split_whitespace().next()?;
    let gts: f64 = num.parse().ok()?;
    if !s[num.len()..].trim_start().starts_with("GT/s") || !gts.is_finite() || gts <= 0.0 {
        return None;
    }
    const GENERATIONS: [(f64, u8); 6] = [(2.5, 1), (5.0, 2), (8.0, 3), (16.0, 4), (32.0, 5), (64.0, 6)];
    let generation = GENERATIONS.iter().find(|(rate, _)| *rate == gts).map(|(_, g)| *g);
    Some(LinkSpeed {
        raw: s.to_string(),
        gts,
        generation,
    })
}

/// `"16"` → 16. Some virtual devices print 0, which means unknown.
pub fn parse_link_width(s: &str) -> Option<u32> {
    match s.trim().parse::<u32>() {
        Ok(0) | Err(_) => None,
        Ok(w) => Some(w),
    }
}

/// The four link attributes of one PCI function, as read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PciLink {
    pub current_speed: Option<LinkSpeed>,
    pub current_width: Option<u32>,
    pub max_speed: Option<LinkSpeed>,
    pub max_width: Option<u32>,
}

impl PciLink {
    /// Width below maximum: a fault wherever it happens.
    pub(crate) fn width_degraded(&self) -> bool {
        matches!((self.current_width, self.max_width), (Some(c), Some(m)) if c < m)
    }
    /// Speed below maximum: a fault on a NIC; on an idle GPU it is power saving.
    pub(crate) fn speed_degraded(&self) -> bool {
        matches!((&self.current_speed, &self.max_speed), (Some(c), Some(m)) if c.gts < m.gts)
    }
}

/// Read the link attributes of the function at host path `dev` (e.g. a realpath under
/// `/sys/devices`, or `/sys/bus/pci/devices/<bdf>`).
pub(crate) fn read_link(host: &Host, dev: &str) -> PciLink {
    let get = |name: &str| match host.attr(format!("{dev}/{name}")) {
        Attr::Value(v) => Some(v),
        _ => None,
    };
    PciLink {
        current_speed: get("current_link_speed").and_then(|s| parse_link_speed(&s)),
        current_width: get("current_link_width").and_then(|s| parse_link_width(&s)),
        max_speed: get("max_link_speed").and_then(|s| parse_link_speed(&s)),
        max_width: get("max_link_width").and_then(|s| parse_link_width(&s)),
    }
}

/// `"0x10de\n"` → 0x10de: the `vendor`, `device`, `subsystem_*` and `class` files (`"0x%04x\n"`,
/// `"0x%06x\n"`). Anything else → None.
pub fn parse_hex_id(s: &str) -> Option<u32> {
    let h = s.trim().strip_prefix("0x")?;
    if h.is_empty() || h.len() > 8 {
        return None;
    }
    u32::from_str_radix(h, 16).ok()
}

/// `numa_node` (`"%d\n"`): `-1` (no proximity information) is kept as -1; garbage → None.
pub fn parse_numa_node(s: &str) -> Option<i32> {
    s.trim().parse().ok()
}

/// Identity of one PCI function, as its sysfs files say. In JSON the values keep the
/// kernel's spelling (`"0x030200"`, `"0x10de"`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PciIdent {
    /// `class`, 24 bits: base class, subclass, prog-if (`0x030200` = 3D controller).
    #[serde(with = "hex6")]
    pub class: Option<u32>,
    #[serde(with = "hex4")]
    pub vendor: Option<u32>,
    #[serde(with = "hex4")]
    pub device: Option<u32>,
    #[serde(with = "hex4")]
    pub subsystem_vendor: Option<u32>,
    #[serde(with = "hex4")]
    pub subsystem_device: Option<u32>,
}

macro_rules! hex_serde {
    ($name:ident, $width:literal) => {
        mod $name {
            use serde::{Deserialize, Deserializer, Serializer};
            pub(crate) fn serialize<S: Serializer>(v: &Option<u32>, s: S) -> Result<S::Ok, S::Error> {
                match v {
                    Some(v) => s.serialize_str(&format!("0x{:0w$x}", v, w = $width)),
                    None => s.serialize_none(),
                }
            }
            pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
                let v: Option<String> = Option::deserialize(d)?;
                match v {
                    None => Ok(None),
                    Some(s) => super::parse_hex_id(&s)
                        .map(Some)
                        .ok_or_else(|| serde::de::Error::custom(format!("not a 0x-prefixed hex id: {s:?}"))),
                }
            }
        }
    };
}
hex_serde!(hex4, 4);
hex_serde!(hex6, 6);

/// The identity files of the function at host path `dev`.
pub(crate) fn read_ident(host: &Host, dev: &str) -> PciIdent {
    let get = |name: &str| host.attr(format!("{dev}/{name}")).value().and_then(parse_hex_id);
    PciIdent {
        class: get("class"),
        vendor: get("vendor"),
        device: get("device"),
        subsystem_vendor: get("subsystem_vendor"),
        subsystem_device: get("subsystem_device"),
    }
}

/// Where a PCI function sits: its root bus and the bridges down to it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PciChain {
    /// The host bridge's bus component, `pci0000:00` (`pciDDDD:BB`).
    pub root: String,
    /// Every function from the one below the root bus down to the device itself (last).
    pub functions: Vec<String>,
}

impl PciChain {
    /// The device itself (the last element).
    pub fn bdf(&self) -> &str {
        self.functions.last().map(String::as_str).unwrap_or("")
    }
    /// The bridges above the device, root port first.
    pub fn bridges(&self) -> &[String] {
        &self.functions[..self.functions.len().saturating_sub(1)]
    }
    /// The canonical sysfs path of function `i` of the chain (`/sys/devices/.../<bdf>`).
    pub(crate) fn path_of(&self, prefix: &str, i: usize) -> String {
        let mut p = format!("{prefix}/{}", self.root);
        for f in &self.functions[..=i.min(self.functions.len().saturating_sub(1))] {
            p.push('/');
            p.push_str(f);
        }
        p
    }
}

/// Is `s` a root bus component `pciDDDD:BB`?
pub fn is_root_bus(s: &str) -> bool {
    let Some(rest) = s.strip_prefix("pci") else {
        return false;
    };
    let b = rest.as_bytes();
    b.len() == 7 && b[4] == b':' && [0, 1, 2, 3, 5, 6].iter().all(|&i| b[i].is_ascii_hexdigit())
}

/// Split a canonical device path into its chain: `/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0`
/// → root `pci0000:00`, functions `[0000:00:01.0, 0000:01:00.0]`. The root bus may sit below
/// other platform nodes (Hyper-V: `.../VMBUS:00/<guid>/pci0001:00/0001:00:00.0`). Returns the
/// chain and the path prefix above the root bus; None when the path has no PCI root bus or a
/// non-BDF component follows it.
pub fn parse_chain(path: &str) -> Option<(String, PciChain)> {
    let comps: Vec<&str> = path.split('/').collect();
    let r = comps.iter().rposition(|c| is_root_bus(c))?;
    let functions: Vec<String> = comps[r + 1..]
        .iter()
        .filter(|c| !c.is_empty())
        .map(|c| c.to_string())
        .collect();
    if functions.is_empty() || !functions.iter().all(|f| is_bdf(f)) {
        return None;
    }
    Some((
        comps[..r].join("/"),
        PciChain {
            root: comps[r].to_string(),
            functions,
        },
    ))
}

/// Resolve `/sys/bus/pci/devices/<bdf>` (or any device symlink) to its chain.
pub(crate) fn read_chain(host: &Host, link: &str) -> Result<(String, PciChain), ChainError> {
    let real = host
        .realpath(link)
        .map_err(|e| ChainError::Resolve(e.to_string()))?;
    let s = real.to_string_lossy();
    if !host.is_dir(&real) {
        return Err(ChainError::Missing(link.to_string()));
    }
    parse_chain(&s).ok_or_else(|| ChainError::NotPci(s.into_owned()))
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ChainError {
    #[error("{0}")]
    Resolve(String),
    #[error("{0} does not exist")]
    Missing(String),
    #[error("{0} is not under a PCI root bus")]
    NotPci(String),
}

/// Only `max_link_speed`/`max_link_width` of the function at `dev` (an upstream port: what
/// the slot allows).
pub(crate) fn read_link_max(host: &Host, dev: &str) -> (Option<LinkSpeed>, Option<u32>) {
    let get = |name: &str| host.attr(format!("{dev}/{name}")).value().map(str::to_string);
    (
        get("max_link_speed").and_then(|s| parse_link_speed(&s)),
        get("max_link_width").and_then(|s| parse_link_width(&s)),
    )
}

/// Is `s` a PCI function address `DDDD:BB:DD.F` (NCCL's `checkBDFFormat`)?
pub fn is_bdf(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && [0, 1, 2, 3, 5, 6, 8, 9, 11]
            .iter()
            .all(|&i| b[i].is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_speeds_in_every_kernel_spelling() {
        let cases = [
            ("32.0 GT/s PCIe", Some((32.0, Some(5)))),
            ("16.0 GT/s PCIe", Some((16.0, Some(4)))),
            ("8.0 GT/s PCIe", Some((8.0, Some(3)))),
            ("2.5 GT/s PCIe", Some((2.5, Some(1)))),
            ("64.0 GT/s PCIe", Some((64.0, Some(6)))),
            ("16 GT/s", Some((16.0, Some(4)))),
            ("8 GT/s", Some((8.0, Some(3)))),
            ("5.0 GT/s", Some((5.0, Some(2)))),
            ("Unknown", None),
            ("Unknown speed", None),
            ("", None),
            ("fast", None),
            ("16.0 Gb/s", None),
        ];
        for (raw, want) in cases {
            let got = parse_link_speed(raw).map(|l| (l.gts, l.generation));
            assert_eq!(got, want, "{raw:?}");
        }
    }

    #[test]
    fn link_widths() {
        assert_eq!(parse_link_width("16\n"), Some(16));
        assert_eq!(parse_link_width("0"), None);
        assert_eq!(parse_link_width("x16"), None);
    }

    #[test]
    fn hex_ids_and_numa() {
        let cases = [
            ("0x10de\n", Some(0x10de)),
            ("0x030200\n", Some(0x030200)),
            ("0x15b3", Some(0x15b3)),
            ("10de", None),
            ("0x", None),
            ("0xzz", None),
            ("", None),
        ];
        for (raw, want) in cases {
            assert_eq!(parse_hex_id(raw), want, "{raw:?}");
        }
        assert_eq!(parse_numa_node("-1\n"), Some(-1));
        assert_eq!(parse_numa_node("1\n"), Some(1));
        assert_eq!(parse_numa_node(""), None);
    }

    #[test]
    fn chains() {
        type Chain<'a> = (&'a str, &'a str, &'a [&'a str]);
        let cases: [(&str, Option<Chain>); 6] = [
            (
                "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0",
                Some(("/sys/devices", "pci0000:00", &["0000:00:01.0", "0000:01:00.0"])),
            ),
            (
                "/sys/devices/pci0000:c0/0000:c0:04.2",
                Some(("/sys/devices", "pci0000:c0", &["0000:c0:04.2"])),
            ),
            (
                "/sys/devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00/00000001-0001-0000-3130-444532304235/pci0001:00/0001:00:00.0",
                Some((
                    "/sys/devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00/00000001-0001-0000-3130-444532304235",
                    "pci0001:00",
                    &["0001:00:00.0"],
                )),
            ),
            ("/sys/devices/pci0000:00", None),
            ("/sys/devices/virtual/net/lo", None),
            ("/sys/devices/pci0000:00/0000:00:01.0/usb1", None),
        ];
        for (path, want) in cases {
            let got = parse_chain(path);
            let want = want.map(|(p, r, f)| {
                (
                    p.to_string(),
                    PciChain {
                        root: r.to_string(),
                        functions: f.iter().map(|s| s.to_string()).collect(),
                    },
                )
            });
            assert_eq!(got, want, "{path}");
        }
        assert!(is_root_bus("pci0000:00"));
        assert!(is_root_bus("pci0001:ff"));
        assert!(!is_root_bus("pci_bus"));
        assert!(!is_root_bus("0000:00:01.0"));
    }

    #[test]
    fn bdf_format() {
        assert!(is_bdf("0000:1b:00.0"));
        assert!(!is_bdf("pci0000:00"));
        assert!(!is_bdf("0000:1b:00"));
        assert!(!is_bdf("0000:1g:00.0"));
    }
}
