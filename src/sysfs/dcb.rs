//! DCB netlink: the `RTM_GETDCB` / `DCB_CMD_IEEE_GET` reply (kernel `net/dcb/dcbnl.c`,
//! `dcbnl_ieee_fill`; structs in `include/uapi/linux/dcbnl.h`). Pure parser of the bytes
//! after the `nlmsghdr`: `struct dcbmsg` (4 bytes), then attributes. A short attribute, a
//! struct shorter than the kernel's or a length that runs past the buffer is a note, never
//! a panic; what parsed before it is kept.

use serde::Serialize;

const DCB_ATTR_IEEE: u16 = 13;
// `enum dcbnl_attrs` (uapi/linux/dcbnl.h): ... APP 12, IEEE 13, DCBX 14, FEATCFG 15.
const DCB_ATTR_DCBX: u16 = 14;
const DCB_ATTR_IEEE_ETS: u16 = 1;
const DCB_ATTR_IEEE_PFC: u16 = 2;
const DCB_ATTR_IEEE_APP_TABLE: u16 = 3;
const DCB_ATTR_IEEE_APP: u16 = 1;
const DCB_ATTR_DCB_BUFFER: u16 = 10;
/// `NLA_F_NESTED | NLA_F_NET_BYTEORDER`: flag bits of `nla_type`.
const NLA_TYPE_MASK: u16 = 0x3fff;

/// `sizeof(struct ieee_ets)`: willing, ets_cap, cbs, then seven arrays of 8.
pub(crate) const IEEE_ETS_LEN: usize = 59;
/// `sizeof(struct ieee_pfc)` with natural alignment (offsets 0,1,2,4,8,72).
pub(crate) const IEEE_PFC_LEN: usize = 136;
/// `sizeof(struct dcbnl_buffer)`: prio2buffer[8], buffer_size[8] (u32), total_size (u32).
pub(crate) const DCB_BUFFER_LEN: usize = 44;
/// `IEEE_8021QAZ_APP_SEL_DSCP`.
pub(crate) const APP_SEL_DSCP: u8 = 5;

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub(crate) struct DcbIeee {
    pub ets: Option<Ets>,
    pub pfc: Option<Pfc>,
    /// `DCB_ATTR_IEEE_APP_TABLE`, every entry as the kernel gave it.
    pub app: Vec<DcbApp>,
    pub buffer: Option<DcbBuffer>,
    /// `DCB_ATTR_DCBX`: the `DCB_CAP_DCBX_*` bitmask.
    pub dcbx: Option<u8>,
    /// What did not parse (short attributes, truncated structs).
    pub notes: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Ets {
    pub willing: u8,
    pub ets_cap: u8,
    pub cbs: u8,
    pub tc_tx_bw: [u8; 8],
    /// `IEEE_8021QAZ_TSA_*` of each traffic class: 0 strict, 1 cbs, 2 ets, 255 vendor.
    pub tc_tsa: [u8; 8],
    /// Traffic class of each priority.
    pub prio_tc: [u8; 8],
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Pfc {
    pub pfc_cap: u8,
    /// Bit p set: PFC on priority p.
    pub pfc_en: u8,
    pub mbc: u8,
    pub delay: u16,
    /// PFC frames sent, per priority.
    pub requests: [u64; 8],
    /// PFC frames received, per priority.
    pub indications: [u64; 8],
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct DcbApp {
    pub selector: u8,
    pub priority: u8,
    pub protocol: u16,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DcbBuffer {
    pub prio2buffer: [u8; 8],
    pub buffer_size_bytes: [u32; 8],
    pub total_size_bytes: u32,
}

pub(crate) fn tsa_name(tsa: u8) -> &'static str {
    match tsa {
        0 => "strict",
        1 => "cbs",
        2 => "ets",
        255 => "vendor",
        _ => "unknown",
    }
}

/// `DCB_CAP_DCBX_HOST` (0x01): the OS's LLDP agent runs DCBX ("OS controlled" in
/// mlnx_qos); `DCB_CAP_DCBX_LLD_MANAGED` (0x02): the NIC firmware does ("Firmware
/// controlled").
pub(crate) fn dcbx_mode(bits: u8) -> &'static str {
    if bits & 0x02 != 0 {
        "firmware controlled"
    } else if bits & 0x01 != 0 {
        "os controlled"
    } else {
        "off"
    }
}

/// Netlink attributes of `b`: (type without flag bits, payload). Stops at the first bad
/// length with a note.
fn attrs<'a>(mut b: &'a [u8], ctx: &str, notes: &mut Vec<String>) -> Vec<(u16, &'a [u8])> {
    let mut out = Vec::new();
    while !b.is_empty() {
        if b.len() < 4 {
            notes.push(format!(
                "{ctx}: {} trailing bytes, shorter than an attribute header",
                b.len()
            ));
            break;
        }
        let len = u16::from_ne_bytes([b[0], b[1]]) as usize;
        let typ = u16::from_ne_bytes([b[2], b[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > b.len() {
            notes.push(format!(
                "{ctx}: attribute {typ} claims {len} bytes, {} remain",
                b.len()
            ));
            break;
        }
        out.push((typ, &b[4..len]));
        let next = len.div_ceil(4) * 4;
        b = b.get(next..).unwrap_or(&[]);
    }
    out
}

fn arr8(b: &[u8], off: usize) -> [u8; 8] {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    a
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_ne_bytes(a)
}

pub(crate) fn parse_ets(b: &[u8]) -> Option<Ets> {
    if b.len() < IEEE_ETS_LEN {
        return None;
    }
    Some(Ets {
        willing: b[0],
        ets_cap: b[1],
        cbs: b[2],
        tc_tx_bw: arr8(b, 3),
        // tc_rx_bw at 11 is unused by the kernel's drivers.
        tc_tsa: arr8(b, 19),
        prio_tc: arr8(b, 27),
    })
}

pub(crate) fn parse_pfc(b: &[u8]) -> Option<Pfc> {
    if b.len() < IEEE_PFC_LEN {
        return None;
    }
    let mut requests = [0u64; 8];
    let mut indications = [0u64; 8];
    for i in 0..8 {
        requests[i] = u64_at(b, 8 + 8 * i);
        indications[i] = u64_at(b, 72 + 8 * i);
    }
    Some(Pfc {
        pfc_cap: b[0],
        pfc_en: b[1],
        mbc: b[2],
        delay: u16::from_ne_bytes([b[4], b[5]]),
        requests,
        indications,
    })
}

pub(crate) fn parse_buffer(b: &[u8]) -> Option<DcbBuffer> {
    if b.len() < DCB_BUFFER_LEN {
        return None;
    }
    let u32_at = |o: usize| u32::from_ne_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let mut sizes = [0u32; 8];
    for (i, s) in sizes.iter_mut().enumerate() {
        *s = u32_at(8 + 4 * i);
    }
    Some(DcbBuffer {
        prio2buffer: arr8(b, 0),
        buffer_size_bytes: sizes,
        total_size_bytes: u32_at(40),
    })
}

/// Parse a `DCB_CMD_IEEE_GET` reply (after `nlmsghdr`).
pub(crate) fn parse_ieee_reply(reply: &[u8]) -> DcbIeee {
    let mut r = DcbIeee::default();
    if reply.len() < 4 {
        r.notes.push(format!(
            "reply of {} bytes is shorter than struct dcbmsg (4)",
            reply.len()
        ));
        return r;
    }
    let mut notes = Vec::new();
    for (typ, payload) in attrs(&reply[4..], "reply", &mut notes) {
        match typ {
            DCB_ATTR_DCBX => r.dcbx = payload.first().copied(),
            DCB_ATTR_IEEE => {
                for (t, p) in attrs(payload, "DCB_ATTR_IEEE", &mut notes) {
                    match t {
                        DCB_ATTR_IEEE_ETS => {
                            r.ets = parse_ets(p);
                            if r.ets.is_none() {
                                notes.push(format!(
                                    "DCB_ATTR_IEEE_ETS: {} bytes, struct ieee_ets is {IEEE_ETS_LEN}",
                                    p.len()
                                ));
                            }
                        }
                        DCB_ATTR_IEEE_PFC => {
                            r.pfc = parse_pfc(p);
                            if r.pfc.is_none() {
                                notes.push(format!(
                                    "DCB_ATTR_IEEE_PFC: {} bytes, struct ieee_pfc is {IEEE_PFC_LEN}",
                                    p.len()
                                ));
                            }
                        }
                        DCB_ATTR_DCB_BUFFER => {
                            r.buffer = parse_buffer(p);
                            if r.buffer.is_none() {
                                notes.push(format!(
                                    "DCB_ATTR_DCB_BUFFER: {} bytes, struct dcbnl_buffer is {DCB_BUFFER_LEN}",
                                    p.len()
                                ));
                            }
                        }
                        DCB_ATTR_IEEE_APP_TABLE => {
                            for (at, ap) in attrs(p, "DCB_ATTR_IEEE_APP_TABLE", &mut notes) {
                                if at != DCB_ATTR_IEEE_APP {
                                    continue;
                                }
                                if ap.len() < 4 {
                                    notes.push(format!(
                                        "DCB_ATTR_IEEE_APP: {} bytes, struct dcb_app is 4",
                                        ap.len()
                                    ));
                                    continue;
                                }
                                r.app.push(DcbApp {
                                    selector: ap[0],
                                    priority: ap[1],
                                    protocol: u16::from_ne_bytes([ap[2], ap[3]]),
                                });
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    r.notes = notes;
    r
}

impl DcbIeee {
    /// The DSCP → priority map of the APP table (`trust dscp` when non-empty).
    pub(crate) fn dscp_map(&self) -> Vec<(u8, u8)> {
        let mut v: Vec<(u8, u8)> = self
            .app
            .iter()
            .filter(|a| a.selector == APP_SEL_DSCP)
            .filter_map(|a| Some((u8::try_from(a.protocol).ok().filter(|&p| p < 64)?, a.priority)))
            .collect();
        v.sort_unstable();
        v
    }
}

/// Test and fixture helper: encode a reply as the kernel does (native endian, 4-byte
/// attribute alignment). Kept next to the parser so both follow the same layout.
pub mod encode {
    pub fn attr(typ: u16, payload: &[u8]) -> Vec<u8> {
        let len = 4 + payload.len();
        let mut v = Vec::with_capacity(len.div_ceil(4) * 4);
        let len16 = u16::try_from(len).expect("a netlink attribute holds at most 65535 bytes");
        v.extend_from_slice(&len16.to_ne_bytes());
        v.extend_from_slice(&typ.to_ne_bytes());
        v.extend_from_slice(payload);
        v.resize(len.div_ceil(4) * 4, 0);
        v
    }

    pub fn ets(prio_tc: [u8; 8], tc_tsa: [u8; 8], tc_tx_bw: [u8; 8]) -> Vec<u8> {
        let mut b = vec![0u8, 8, 0];
        b.extend_from_slice(&tc_tx_bw);
        b.extend_from_slice(&[0; 8]);
        b.extend_from_slice(&tc_tsa);
        b.extend_from_slice(&prio_tc);
        b.extend_from_slice(&[0; 24]);
        b
    }

    pub fn pfc(pfc_en: u8, requests: [u64; 8], indications: [u64; 8]) -> Vec<u8> {
        let mut b = vec![8u8, pfc_en, 0, 0];
        b.extend_from_slice(&0u16.to_ne_bytes());
        b.extend_from_slice(&[0, 0]);
        for r in requests {
            b.extend_from_slice(&r.to_ne_bytes());
        }
        for i in indications {
            b.extend_from_slice(&i.to_ne_bytes());
        }
        b
    }

    /// `struct dcbmsg` + IFNAME + IEEE{ETS, PFC, APP_TABLE} + DCBX.
    pub fn reply(ifname: &str, ets: &[u8], pfc: &[u8], apps: &[(u8, u8, u16)], dcbx: u8) -> Vec<u8> {
        let mut name = ifname.as_bytes().to_vec();
        name.push(0);
        let mut table = Vec::new();
        for (sel, prio, proto) in apps {
            let mut a = vec![*sel, *prio];
            a.extend_from_slice(&proto.to_ne_bytes());
            table.extend(attr(1, &a));
        }
        let mut ieee = attr(1, ets);
        ieee.extend(attr(2, pfc));
        ieee.extend(attr(3 | 0x8000, &table));
        let mut v = vec![0u8, 21, 0, 0];
        v.extend(attr(1, &name));
        v.extend(attr(13 | 0x8000, &ieee));
        v.extend(attr(14, &[dcbx]));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn healthy() -> Vec<u8> {
        let apps: Vec<(u8, u8, u16)> = (0..64u8).map(|d| (APP_SEL_DSCP, d >> 3, u16::from(d))).collect();
        encode::reply(
            "ens1f0",
            &encode::ets(
                [0, 0, 0, 3, 0, 0, 6, 0],
                [2, 0, 0, 2, 0, 0, 255, 0],
                [50, 0, 0, 50, 0, 0, 0, 0],
            ),
            &encode::pfc(1 << 3, [0, 0, 0, 17, 0, 0, 0, 0], [0, 0, 0, 5, 0, 0, 0, 0]),
            &apps,
            0x01 | 0x08,
        )
    }

    #[test]
    fn parses_a_whole_reply() {
        let r = parse_ieee_reply(&healthy());
        assert!(r.notes.is_empty(), "{:?}", r.notes);
        let pfc = r.pfc.clone().unwrap();
        assert_eq!(pfc.pfc_en, 0x08);
        assert_eq!(pfc.requests[3], 17);
        assert_eq!(pfc.indications[3], 5);
        let ets = r.ets.clone().unwrap();
        assert_eq!(ets.prio_tc, [0, 0, 0, 3, 0, 0, 6, 0]);
        assert_eq!(tsa_name(ets.tc_tsa[6]), "vendor");
        assert_eq!(r.dscp_map().len(), 64);
        assert_eq!(r.dscp_map()[26], (26, 3));
        assert_eq!(r.dcbx, Some(0x09));
        assert_eq!(dcbx_mode(0x09), "os controlled");
        assert_eq!(dcbx_mode(0x0a), "firmware controlled");
    }

    #[test]
    fn dcbx_is_attribute_14_and_featcfg_15_is_not_read_as_it() {
        // dcbnl_ieee_fill puts DCB_ATTR_DCBX (14); a FEATCFG nest (15) after it must not
        // overwrite the mode with its first byte (a length byte of the nest).
        let mut v = healthy();
        let mut feat = encode::attr(2, &[0x06]);
        feat.extend(encode::attr(3, &[0x06]));
        v.extend(encode::attr(15 | 0x8000, &feat));
        let r = parse_ieee_reply(&v);
        assert_eq!(r.dcbx, Some(0x09));
        let mut only_feat = vec![0u8, 21, 0, 0];
        only_feat.extend(encode::attr(15, &[0x0a]));
        assert_eq!(parse_ieee_reply(&only_feat).dcbx, None);
    }

    #[test]
    fn every_truncation_is_a_note_not_a_panic() {
        let full = healthy();
        // Attribute boundaries: after dcbmsg (4), after IFNAME "ens1f0\0" (15 unpadded, 16
        // padded), after the IEEE nest (len - 8); a cut anywhere else leaves a partial one.
        for n in 0..full.len() {
            let r = parse_ieee_reply(&full[..n]);
            if ![4, 15, 16].contains(&n) && n < full.len() - 8 {
                assert!(!r.notes.is_empty(), "cut at {n}: no note");
            }
        }
    }

    #[test]
    fn short_structs_and_lying_lengths() {
        // An ETS attribute of 10 bytes and a PFC of 8 inside a valid nest.
        let mut ieee = encode::attr(1, &[0; 10]);
        ieee.extend(encode::attr(2, &[0; 8]));
        let mut v = vec![0u8, 21, 0, 0];
        v.extend(encode::attr(13, &ieee));
        let r = parse_ieee_reply(&v);
        assert_eq!(r.ets, None);
        assert_eq!(r.pfc, None);
        assert!(
            r.notes.iter().any(|n| n.contains("struct ieee_ets is 59")),
            "{:?}",
            r.notes
        );
        assert!(
            r.notes.iter().any(|n| n.contains("struct ieee_pfc is 136")),
            "{:?}",
            r.notes
        );
        // A length that claims more than the buffer holds.
        let mut lie = vec![0u8, 21, 0, 0];
        lie.extend_from_slice(&200u16.to_ne_bytes());
        lie.extend_from_slice(&13u16.to_ne_bytes());
        lie.extend_from_slice(&[0; 8]);
        let r = parse_ieee_reply(&lie);
        assert!(r.notes[0].contains("claims 200 bytes"), "{:?}", r.notes);
        // A length below the header size must not loop forever.
        let mut zero = vec![0u8, 21, 0, 0];
        zero.extend_from_slice(&[0, 0, 1, 0]);
        assert!(!parse_ieee_reply(&zero).notes.is_empty());
        assert!(!parse_ieee_reply(&[0, 21]).notes.is_empty());
    }

    #[test]
    fn buffer_struct() {
        let mut b = vec![0u8, 0, 0, 1, 0, 0, 0, 0];
        for s in [130_944u32, 130_944, 0, 0, 0, 0, 0, 0, 262_016] {
            b.extend_from_slice(&s.to_ne_bytes());
        }
        let buf = parse_buffer(&b).unwrap();
        assert_eq!(buf.prio2buffer[3], 1);
        assert_eq!(buf.buffer_size_bytes[1], 130_944);
        assert_eq!(buf.total_size_bytes, 262_016);
        assert_eq!(parse_buffer(&b[..43]), None);
    }
}
