//! LLDP frames (IEEE 802.1AB) as a switch sends them, and the IEEE 802.1Qaz DCBX TLVs
//! inside (organizationally specific, OUI 00-80-C2: ETS configuration (subtype 9), ETS
//! recommendation (10), PFC configuration (11), application priority (12)). Pure parser of
//! the raw Ethernet frame; a truncated or lying TLV ends the walk with a note, never a panic.

use serde::Serialize;

pub(crate) const ETH_P_LLDP: u16 = 0x88cc;
const OUI_8021: [u8; 3] = [0x00, 0x80, 0xc2];

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Lldpdu {
    pub source_mac: String,
    pub chassis_id: Option<String>,
    pub port_id: Option<String>,
    pub ttl_s: Option<u16>,
    pub port_description: Option<String>,
    pub system_name: Option<String>,
    pub ets: Option<LldpEts>,
    pub ets_recommendation: Option<LldpEts>,
    pub pfc: Option<LldpPfc>,
    /// Application priority entries: (selector, protocol, priority).
    pub app: Vec<LldpApp>,
    pub notes: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LldpEts {
    pub willing: Option<bool>,
    /// Traffic class of each priority 0-7.
    pub prio_tc: [u8; 8],
    pub tc_bw: [u8; 8],
    pub tc_tsa: [u8; 8],
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LldpPfc {
    pub willing: bool,
    pub mbc: bool,
    pub pfc_cap: u8,
    /// Bit p set: PFC on priority p.
    pub pfc_enable: u8,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LldpApp {
    /// 1 ethertype, 2 TCP/SCTP port, 3 UDP/DCCP port, 4 TCP/SCTP/UDP/DCCP port, 5 DSCP.
    pub selector: u8,
    pub protocol: u16,
    pub priority: u8,
}

fn mac(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(":")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).trim_end_matches('\0').to_string()
}

/// Chassis and port IDs: a MAC (subtype 4 / 3), a network address (5 / 4), else text.
fn id(b: &[u8], mac_subtype: u8, addr_subtype: u8) -> String {
    let Some((&sub, v)) = b.split_first() else {
        return String::new();
    };
    if sub == mac_subtype && v.len() == 6 {
        mac(v)
    } else if sub == addr_subtype && v.len() == 5 && v[0] == 1 {
        format!("{}.{}.{}.{}", v[1], v[2], v[3], v[4])
    } else {
        text(v)
    }
}

fn nibbles(b: &[u8]) -> [u8; 8] {
    let mut out = [0u8; 8];
    for (i, byte) in b.iter().take(4).enumerate() {
        out[2 * i] = byte >> 4;
        out[2 * i + 1] = byte & 0x0f;
    }
    out
}

fn ets(v: &[u8], with_flags: bool) -> Option<LldpEts> {
    // 1 flags/reserved byte, 4 bytes of priority nibbles, 8 bandwidths, 8 TSAs.
    if v.len() < 21 {
        return None;
    }
    let mut bw = [0u8; 8];
    bw.copy_from_slice(&v[5..13]);
    let mut tsa = [0u8; 8];
    tsa.copy_from_slice(&v[13..21]);
    Some(LldpEts {
        willing: with_flags.then_some(v[0] & 0x80 != 0),
        prio_tc: nibbles(&v[1..5]),
        tc_bw: bw,
        tc_tsa: tsa,
    })
}

/// Parse one Ethernet frame carrying an LLDPDU (an 802.1Q tag is allowed).
pub(crate) fn parse_frame(f: &[u8]) -> Result<Lldpdu, String> {
    let off = lldp_offset(f)?;
    let mut d = Lldpdu {
        source_mac: mac(&f[6..12]),
        ..Default::default()
    };
    let mut b = &f[off + 2..];
    while !b.is_empty() {
        if b.len() < 2 {
            d.notes.push("a trailing byte shorter than a TLV header".into());
            break;
        }
        let h = u16::from_be_bytes([b[0], b[1]]);
        let (typ, len) = ((h >> 9) as u8, (h & 0x1ff) as usize);
        if typ == 0 {
            break; // End of LLDPDU.
        }
        if 2 + len > b.len() {
            d.notes.push(format!(
                "TLV type {typ} claims {len} bytes, {} remain",
                b.len() - 2
            ));
            break;
        }
        let v = &b[2..2 + len];
        match typ {
            1 => d.chassis_id = Some(id(v, 4, 5)),
            2 => d.port_id = Some(id(v, 3, 4)),
            3 if len >= 2 => d.ttl_s = Some(u16::from_be_bytes([v[0], v[1]])),
            4 => d.port_description = Some(text(v)),
            5 => d.system_name = Some(text(v)),
            127 if len >= 4 && v[..3] == OUI_8021 => dot1qaz_tlv(&mut d, v[3], &v[4..]),
            _ => {}
        }
        b = &b[2 + len..];
    }
    Ok(d)
}

/// Where the ethertype sits (12, or 16 after an 802.1Q tag), once it is checked to be LLDP.
fn lldp_offset(f: &[u8]) -> Result<usize, String> {
    if f.len() < 14 {
        return Err(format!(
            "frame of {} bytes is shorter than an Ethernet header",
            f.len()
        ));
    }
    let mut off = 12;
    let mut ethertype = u16::from_be_bytes([f[12], f[13]]);
    if ethertype == 0x8100 {
        if f.len() < 18 {
            return Err("VLAN-tagged frame shorter than its tag".into());
        }
        ethertype = u16::from_be_bytes([f[16], f[17]]);
        off = 16;
    }
    if ethertype != ETH_P_LLDP {
        return Err(format!("ethertype 0x{ethertype:04x} is not LLDP (0x88cc)"));
    }
    Ok(off)
}

/// An 802.1Qaz organizational TLV (`sub` its subtype, `rest` after it): ETS, PFC or the
/// application priority table; one too short becomes a note, the others are skipped.
fn dot1qaz_tlv(d: &mut Lldpdu, sub: u8, rest: &[u8]) {
    let short = |name: &str, want: usize, d: &mut Lldpdu| {
        d.notes.push(format!(
            "802.1Qaz {name} TLV of {} bytes, needs {want}",
            rest.len()
        ))
    };
    match sub {
        9 => match ets(rest, true) {
            Some(e) => d.ets = Some(e),
            None => short("ETS configuration", 21, d),
        },
        10 => match ets(rest, false) {
            Some(e) => d.ets_recommendation = Some(e),
            None => short("ETS recommendation", 21, d),
        },
        11 => {
            if rest.len() >= 2 {
                d.pfc = Some(LldpPfc {
                    willing: rest[0] & 0x80 != 0,
                    mbc: rest[0] & 0x40 != 0,
                    pfc_cap: rest[0] & 0x0f,
                    pfc_enable: rest[1],
                });
            } else {
                short("PFC configuration", 2, d);
            }
        }
        12 => {
            // 1 reserved byte, then 3-byte entries.
            let entries = rest.get(1..).unwrap_or(&[]);
            if entries.len() % 3 != 0 {
                d.notes.push(format!(
                    "802.1Qaz application priority TLV: {} entry bytes, not a multiple of 3",
                    entries.len()
                ));
            }
            for e in entries.chunks_exact(3) {
                d.app.push(LldpApp {
                    priority: e[0] >> 5,
                    selector: e[0] & 0x07,
                    protocol: u16::from_be_bytes([e[1], e[2]]),
                });
            }
        }
        _ => {}
    }
}

impl LldpPfc {
    pub fn priorities(&self) -> Vec<u8> {
        (0..8u8).filter(|p| self.pfc_enable & (1 << p) != 0).collect()
    }
}

/// Test, lab and fixture helper: build an LLDP frame with the 802.1Qaz TLVs.
pub mod encode {
    fn tlv(typ: u8, v: &[u8]) -> Vec<u8> {
        // The length field is 9 bits: a longer value would wrap into a corrupt frame.
        let len = u16::try_from(v.len())
            .ok()
            .filter(|&l| l <= 0x1ff)
            .expect("an LLDP TLV holds at most 511 bytes");
        let h = (u16::from(typ) << 9) | len;
        let mut out = h.to_be_bytes().to_vec();
        out.extend_from_slice(v);
        out
    }

    fn org(sub: u8, v: &[u8]) -> Vec<u8> {
        let mut b = vec![0x00, 0x80, 0xc2, sub];
        b.extend_from_slice(v);
        tlv(127, &b)
    }

    /// A switch port's LLDPDU: chassis MAC, port name, system name, ETS (prio 3 in tc 3),
    /// PFC on `pfc_prios`, APP entries (selector, protocol, priority).
    pub fn frame(
        src: [u8; 6],
        system_name: &str,
        port: &str,
        pfc_prios: &[u8],
        app: &[(u8, u16, u8)],
    ) -> Vec<u8> {
        let mut f = vec![0x01, 0x80, 0xc2, 0x00, 0x00, 0x0e];
        f.extend_from_slice(&src);
        f.extend_from_slice(&0x88ccu16.to_be_bytes());
        let mut chassis = vec![4];
        chassis.extend_from_slice(&src);
        f.extend(tlv(1, &chassis));
        let mut pid = vec![5]; // interface name
        pid.extend_from_slice(port.as_bytes());
        f.extend(tlv(2, &pid));
        f.extend(tlv(3, &120u16.to_be_bytes()));
        f.extend(tlv(4, port.as_bytes()));
        f.extend(tlv(5, system_name.as_bytes()));
        let mut ets = vec![0x08, 0x00, 0x03, 0x00, 0x60];
        ets.extend_from_slice(&[50, 0, 0, 50, 0, 0, 0, 0]);
        ets.extend_from_slice(&[2, 0, 0, 2, 0, 0, 0, 0]);
        f.extend(org(9, &ets));
        let en = pfc_prios.iter().fold(0u8, |a, p| a | (1 << p));
        f.extend(org(11, &[0x08, en]));
        let mut a = vec![0u8];
        for (sel, proto, prio) in app {
            a.push((prio << 5) | (sel & 7));
            a.extend_from_slice(&proto.to_be_bytes());
        }
        f.extend(org(12, &a));
        f.extend(tlv(0, &[]));
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The encoder refuses a value its 9-bit length cannot hold (it wrapped into a corrupt
    /// frame before).
    #[test]
    #[should_panic(expected = "at most 511 bytes")]
    fn encoder_refuses_an_oversized_tlv() {
        encode::frame([2, 0, 0, 0, 0, 1], &"x".repeat(512), "p1", &[], &[]);
    }

    fn sample() -> Vec<u8> {
        encode::frame(
            [0x50, 0x6b, 0x4b, 0x11, 0x22, 0x33],
            "leaf-07",
            "Ethernet1/12",
            &[3],
            &[(5, 26, 3), (5, 48, 6)],
        )
    }

    #[test]
    fn decodes_identity_and_dcbx() {
        let d = parse_frame(&sample()).unwrap();
        assert!(d.notes.is_empty(), "{:?}", d.notes);
        assert_eq!(d.source_mac, "50:6b:4b:11:22:33");
        assert_eq!(d.chassis_id.as_deref(), Some("50:6b:4b:11:22:33"));
        assert_eq!(d.port_id.as_deref(), Some("Ethernet1/12"));
        assert_eq!(d.system_name.as_deref(), Some("leaf-07"));
        assert_eq!(d.ttl_s, Some(120));
        assert_eq!(d.pfc.as_ref().unwrap().priorities(), vec![3]);
        let e = d.ets.unwrap();
        assert_eq!(e.prio_tc, [0, 0, 0, 3, 0, 0, 6, 0]);
        assert_eq!(e.tc_bw[3], 50);
        assert_eq!(
            d.app,
            vec![
                LldpApp {
                    selector: 5,
                    protocol: 26,
                    priority: 3
                },
                LldpApp {
                    selector: 5,
                    protocol: 48,
                    priority: 6
                }
            ]
        );
    }

    #[test]
    fn truncated_and_lying_frames() {
        let f = sample();
        for n in 0..f.len() {
            let _ = parse_frame(&f[..n]);
        }
        assert!(parse_frame(&f[..10]).is_err());
        let r = parse_frame(&f[..20]).unwrap();
        assert!(r.notes[0].contains("claims"), "{:?}", r.notes);
        // A PFC TLV that says it is 5 bytes long (only the OUI and subtype).
        let mut lie = f[..14].to_vec();
        lie.extend_from_slice(&[0xfe, 0x04, 0x00, 0x80, 0xc2, 0x0b]);
        let r = parse_frame(&lie).unwrap();
        assert!(r.notes[0].contains("PFC configuration"), "{:?}", r.notes);
        assert!(parse_frame(&[0u8; 14]).unwrap_err().contains("not LLDP"));
    }
}
