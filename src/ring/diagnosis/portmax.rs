//! What a rank's data port could run at, so that a port trained down is named even when
//! every port on the rail trained down alike (then no peer majority shows it): the fastest
//! Ethernet link mode both ends advertise (`ethtool IF`: our advertised, else supported,
//! link modes, and the link partner's), and the NIC's PCIe link against its maximum
//! (`/sys/bus/pci/devices/*/current_link_{speed,width}`, `max_link_{speed,width}`).
//! InfiniBand ports say no supported width or speed in sysfs (only MADs do): for them only
//! the PCIe link and the peers' rates count.
//!
//! Pure: [`parse_ethtool`], [`mode_mbps`], [`pcie_link`]; the rank reads its port through
//! the host in the ring's `portfacts` module.

use crate::ring::model::PcieLink;
use crate::sysfs::pci::PciLink;

/// The four figures of a PCIe link, where sysfs gave all of them. Pure.
pub(crate) fn pcie_link(l: &PciLink) -> Option<PcieLink> {
    let mts =
        |gts: f64| (gts.is_finite() && gts > 0.0 && gts <= 128.0).then(|| (gts * 1000.0).round() as u32);
    Some(PcieLink {
        speed_mts: mts(l.current_speed.as_ref()?.gts)?,
        width: l.current_width?,
        max_speed_mts: mts(l.max_speed.as_ref()?.gts)?,
        max_width: l.max_width?,
    })
}

/// `400000baseCR4/Full` -> 400000 (Mb/s). Pure.
pub(crate) fn mode_mbps(mode: &str) -> Option<u64> {
    let digits: String = mode.chars().take_while(char::is_ascii_digit).collect();
    let rest = &mode[digits.len()..];
    if digits.is_empty() || !rest.starts_with("base") {
        return None;
    }
    digits.parse().ok()
}

/// The link modes listed under `label` in `ethtool IF` output (the label's line and the
/// indented lines after it until the next `Label:`). None when the section is absent or
/// says `Not reported`.
fn modes<'a>(text: &'a str, label: &str) -> Option<Vec<&'a str>> {
    let mut lines = text.lines().map(str::trim);
    let first = lines.find_map(|l| l.strip_prefix(label))?;
    let mut out: Vec<&str> = first.split_whitespace().collect();
    for l in lines {
        if l.contains(':') {
            break;
        }
        out.extend(l.split_whitespace());
    }
    out.retain(|m| mode_mbps(m).is_some());
    (!out.is_empty()).then_some(out)
}

/// The fastest link mode both ends advertise in `ethtool IF` output (ours: `Advertised link
/// modes`, else `Supported link modes`; theirs: `Link partner advertised link modes`), as
/// (Mb/s, mode). None when either side reports none (no autonegotiation, a veth). Pure.
pub(crate) fn parse_ethtool(text: &str) -> Option<(u64, String)> {
    let ours = modes(text, "Advertised link modes:").or_else(|| modes(text, "Supported link modes:"))?;
    let theirs = modes(text, "Link partner advertised link modes:")?;
    ours.iter()
        .filter(|m| theirs.contains(m))
        .filter_map(|m| Some((mode_mbps(m)?, m.to_string())))
        .max_by_key(|m| m.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sysfs::pci;

    /// `ethtool` of a ConnectX-7 port up at 200 Gb/s whose partner advertises 400 Gb/s
    /// (a cable that trained two of four lanes down, say).
    const CX7_AT_200: &str = "Settings for ens1f0np0:
\tSupported ports: [ Backplane ]
\tSupported link modes:   1000baseKX/Full
\t                        10000baseKR/Full
\t                        100000baseCR4/Full
\t                        200000baseCR4/Full
\t                        400000baseCR4/Full
\tSupported pause frame use: Symmetric
\tSupports auto-negotiation: Yes
\tSupported FEC modes: None\t RS\t BASER
\tAdvertised link modes:  100000baseCR4/Full
\t                        200000baseCR4/Full
\t                        400000baseCR4/Full
\tAdvertised pause frame use: Symmetric
\tAdvertised auto-negotiation: Yes
\tAdvertised FEC modes: RS
\tLink partner advertised link modes:  100000baseCR4/Full
\t                                     200000baseCR4/Full
\t                                     400000baseCR4/Full
\tLink partner advertised pause frame use: No
\tLink partner advertised auto-negotiation: Yes
\tLink partner advertised FEC modes: RS
\tSpeed: 200000Mb/s
\tLanes: 4
\tDuplex: Full
\tAuto-negotiation: on
\tLink detected: yes
";

    #[test]
    fn the_fastest_mode_both_ends_advertise() {
        assert_eq!(
            parse_ethtool(CX7_AT_200),
            Some((400_000, "400000baseCR4/Full".into()))
        );
        // A partner that advertises up to 200: 200 is the most this link can run.
        let partner_200 =
            CX7_AT_200.replace("\t                                     400000baseCR4/Full\n", "");
        assert_eq!(parse_ethtool(&partner_200).map(|m| m.0), Some(200_000));
        // Our advertisement limited by an admin to 100: 100 is the most.
        let ours_100 = CX7_AT_200
            .replace("\t                        200000baseCR4/Full\n\t                        400000baseCR4/Full\n\tAdvertised pause", "\tAdvertised pause");
        assert_eq!(parse_ethtool(&ours_100).map(|m| m.0), Some(100_000));
        // No partner advertisement (autonegotiation off, a DAC at a forced speed), a veth:
        // nothing to judge against.
        let forced = CX7_AT_200.replace(
            "Link partner advertised link modes:  100000baseCR4/Full",
            "Link partner advertised link modes:  Not reported",
        );
        let forced: String = forced
            .lines()
            .filter(|l| {
                !l.trim_start().starts_with("200000baseCR4") && !l.trim_start().starts_with("400000baseCR4")
            })
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(parse_ethtool(&forced), None);
        let veth = "Settings for eth1:\n\tSupported ports: [ ]\n\tSupported link modes:   Not reported\n\tSpeed: 10000Mb/s\n";
        assert_eq!(parse_ethtool(veth), None);
        assert_eq!(parse_ethtool(""), None);
    }

    #[test]
    fn mode_speeds() {
        for (m, want) in [
            ("400000baseCR4/Full", Some(400_000)),
            ("2500baseX/Full", Some(2500)),
            ("10baseT/Half", Some(10)),
            ("Not", None),
            ("reported", None),
            ("baseT", None),
            ("100000", None),
        ] {
            assert_eq!(mode_mbps(m), want, "{m}");
        }
    }

    #[test]
    fn pcie_figures_need_all_four() {
        let l = |c: Option<&str>, cw: Option<u32>, m: Option<&str>, mw: Option<u32>| PciLink {
            current_speed: c.and_then(pci::parse_link_speed),
            current_width: cw,
            max_speed: m.and_then(pci::parse_link_speed),
            max_width: mw,
        };
        let p = pcie_link(&l(
            Some("16.0 GT/s PCIe"),
            Some(8),
            Some("32.0 GT/s PCIe"),
            Some(16),
        ))
        .unwrap();
        assert!(p.degraded());
        assert_eq!(
            (p.now(), p.max()),
            ("16 GT/s x8".to_string(), "32 GT/s x16".to_string())
        );
        let gen1 = pcie_link(&l(Some("2.5 GT/s PCIe"), Some(1), Some("2.5 GT/s PCIe"), Some(1))).unwrap();
        assert_eq!(gen1.now(), "2.5 GT/s x1");
        assert_eq!(
            pcie_link(&l(Some("Unknown"), Some(8), Some("32.0 GT/s PCIe"), Some(16))),
            None
        );
        assert_eq!(
            pcie_link(&l(Some("32.0 GT/s PCIe"), Some(16), Some("32.0 GT/s PCIe"), None)),
            None
        );
        let full = pcie_link(&l(
            Some("32.0 GT/s PCIe"),
            Some(16),
            Some("32.0 GT/s PCIe"),
            Some(16),
        ))
        .unwrap();
        assert!(!full.degraded());
    }
}
