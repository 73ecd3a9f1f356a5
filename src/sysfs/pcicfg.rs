//! PCI configuration space (`/sys/bus/pci/devices/<bdf>/config`): the ACS extended
//! capability (ID 0x000D) that decides whether peer-to-peer traffic between a GPU and a NIC
//! below one PCIe switch stays in the switch or is redirected to the root complex.
//!
//! Extended capabilities start at 0x100; each header is a u32 (ID bits 0-15, version 16-19,
//! next pointer 20-31). ACS_CAP is the u16 at +4, ACS_CTRL the u16 at +6 (`lspci -vvv`
//! prints them as `ACSCap:`/`ACSCtl:`). A non-root reader gets only the first 64 bytes of
//! config space, so there is no way to tell ACS off from ACS unread: that is `Unknown`.

use serde::Serialize;

use crate::host::{Attr, Host};

pub(crate) const ACS_CAP_ID: u16 = 0x000d;
/// The control bits in `lspci`'s order and spelling.
pub(crate) const ACS_BITS: [(u16, &str); 7] = [
    (0x01, "SrcValid"),
    (0x02, "TransBlk"),
    (0x04, "ReqRedir"),
    (0x08, "CmpltRedir"),
    (0x10, "UpstreamFwd"),
    (0x20, "EgressCtrl"),
    (0x40, "DirectTrans"),
];
/// Request and completion redirect: P2P goes up to the root complex.
pub(crate) const ACS_REDIRECT: u16 = 0x04 | 0x08;

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Acs {
    /// The ACS capability and its control register.
    Present {
        cap: u16,
        ctrl: u16,
        /// `lspci -vvv`'s `ACSCtl:` line, e.g. `SrcValid+ TransBlk- ReqRedir+ ...`.
        ctrl_text: String,
        /// ReqRedir or CmpltRedir set.
        redirect: bool,
    },
    /// Extended config space was read and has no ACS capability.
    Absent,
    /// Only the first `bytes_read` bytes were readable (non-root): ACS is not known.
    Unknown { bytes_read: usize, reason: String },
    /// The config file could not be read at all.
    Unreadable { error: String },
}

/// `lspci`'s rendering of a control word.
pub(crate) fn ctrl_text(ctrl: u16) -> String {
    ACS_BITS
        .iter()
        .map(|(bit, name)| format!("{name}{}", if ctrl & bit != 0 { '+' } else { '-' }))
        .collect::<Vec<_>>()
        .join(" ")
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    let s = b.get(off..off + 4)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    let s = b.get(off..off + 2)?;
    Some(u16::from_le_bytes([s[0], s[1]]))
}

/// Find ACS in a config space image (config space is little-endian).
pub(crate) fn parse_acs(config: &[u8]) -> Acs {
    if config.len() < 0x104 {
        return Acs::Unknown {
            bytes_read: config.len(),
            reason: format!(
                "only {} bytes of config space were readable (non-root reads stop at 64); run as root",
                config.len()
            ),
        };
    }
    let mut off = 0x100usize;
    // At most (4096 - 256) / 4 headers; a loop in the next pointers cannot hang the probe.
    for _ in 0..960 {
        let Some(h) = u32_at(config, off) else {
            return Acs::Unknown {
                bytes_read: config.len(),
                reason: "the capability list runs past the readable config space".into(),
            };
        };
        if h == 0 || h == 0xffff_ffff {
            break;
        }
        if (h & 0xffff) as u16 == ACS_CAP_ID {
            return match (u16_at(config, off + 4), u16_at(config, off + 6)) {
                (Some(cap), Some(ctrl)) => Acs::Present {
                    cap,
                    ctrl,
                    ctrl_text: ctrl_text(ctrl),
                    redirect: ctrl & ACS_REDIRECT != 0,
                },
                _ => Acs::Unknown {
                    bytes_read: config.len(),
                    reason: "the ACS capability runs past the readable config space".into(),
                },
            };
        }
        let next = (h >> 20) as usize;
        if next < 0x100 || next == off {
            break;
        }
        off = next;
    }
    Acs::Absent
}

/// Read `<dev>/config` (a sysfs device path) and find ACS.
pub(crate) fn read_acs(host: &Host, dev: &str) -> Acs {
    let path = format!("{dev}/config");
    match host.read_bytes(&path) {
        Ok(b) => parse_acs(&b),
        Err(e) => Acs::Unreadable {
            error: match host.attr(&path) {
                Attr::Failed(errno) => errno,
                Attr::Absent => "absent".into(),
                Attr::Value(_) => e.to_string(),
            },
        },
    }
}

/// Test and fixture helper: a 4096-byte config image with ACS at `at` holding `ctrl`, after
/// an AER capability at 0x100.
#[cfg(test)]
pub(crate) fn image_with_acs(at: usize, ctrl: u16) -> Vec<u8> {
    let mut c = vec![0u8; 4096];
    // AER (ID 1, version 2) at 0x100 pointing to `at`.
    let next = u32::try_from(at)
        .ok()
        .filter(|&a| a < 0x1000)
        .expect("ACS offset within the 4 KiB config space");
    let aer: u32 = 0x0001 | (2 << 16) | (next << 20);
    c[0x100..0x104].copy_from_slice(&aer.to_le_bytes());
    let acs: u32 = ACS_CAP_ID as u32 | (1 << 16);
    c[at..at + 4].copy_from_slice(&acs.to_le_bytes());
    c[at + 4..at + 6].copy_from_slice(&0x005fu16.to_le_bytes());
    c[at + 6..at + 8].copy_from_slice(&ctrl.to_le_bytes());
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_acs_after_another_capability() {
        let c = image_with_acs(0x148, 0x1d);
        match parse_acs(&c) {
            Acs::Present {
                cap,
                ctrl,
                ctrl_text,
                redirect,
            } => {
                assert_eq!((cap, ctrl), (0x5f, 0x1d));
                assert_eq!(
                    ctrl_text,
                    "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"
                );
                assert!(redirect);
            }
            other => panic!("{other:?}"),
        }
        let off = image_with_acs(0x148, 0x00);
        assert!(matches!(parse_acs(&off), Acs::Present { redirect: false, .. }));
    }

    #[test]
    fn non_root_64_bytes_is_unknown_never_off() {
        let c = image_with_acs(0x148, 0x1d);
        match parse_acs(&c[..64]) {
            Acs::Unknown { bytes_read, reason } => {
                assert_eq!(bytes_read, 64);
                assert!(reason.contains("run as root"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        // 256 bytes: a conventional-only device (no extended space) is unknown too.
        assert!(matches!(parse_acs(&c[..256]), Acs::Unknown { .. }));
    }

    #[test]
    fn absent_loops_and_truncation() {
        // Only AER, next pointer 0.
        let mut c = vec![0u8; 4096];
        c[0x100..0x104].copy_from_slice(&0x0002_0001u32.to_le_bytes());
        assert_eq!(parse_acs(&c), Acs::Absent);
        // A next pointer to itself.
        c[0x100..0x104].copy_from_slice(&(0x0001u32 | (0x100 << 20)).to_le_bytes());
        assert_eq!(parse_acs(&c), Acs::Absent);
        // A pointer past the end of a short image: not known.
        let mut s = vec![0u8; 0x110];
        s[0x100..0x104].copy_from_slice(&(0x0001u32 | (0xff0 << 20)).to_le_bytes());
        assert!(matches!(parse_acs(&s), Acs::Unknown { .. }));
        // ACS header at the last readable bytes, its registers cut off.
        let mut t = image_with_acs(0x148, 0x1d);
        t.truncate(0x14a);
        assert!(matches!(parse_acs(&t), Acs::Unknown { .. }));
    }
}
