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
    let generation = match gts {
        x if x == 2.5 => Some(1),
        x if x == 5.0 => Some(2),
        x if x == 8.0 => Some(3),
        x if x == 16.0 => Some(4),
        x if x == 32.0 => Some(5),
        x if x == 64.0 => Some(6),
        _ => None,
    };
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
    pub fn width_degraded(&self) -> bool {
        matches!((self.current_width, self.max_width), (Some(c), Some(m)) if c < m)
    }
    /// Speed below maximum: a fault on a NIC; on an idle GPU it is power saving.
    pub fn speed_degraded(&self) -> bool {
        matches!((&self.current_speed, &self.max_speed), (Some(c), Some(m)) if c.gts < m.gts)
    }
}

/// Read the link attributes of the function at host path `dev` (e.g. a realpath under
/// `/sys/devices`, or `/sys/bus/pci/devices/<bdf>`).
pub fn read_link(host: &Host, dev: &str) -> PciLink {
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
    fn bdf_format() {
        assert!(is_bdf("0000:1b:00.0"));
        assert!(!is_bdf("pci0000:00"));
        assert!(!is_bdf("0000:1b:00"));
        assert!(!is_bdf("0000:1g:00.0"));
    }
}
