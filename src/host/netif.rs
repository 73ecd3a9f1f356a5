//! Answers about a net device that are not files: the ethtool statistics ioctl
//! (`ETHTOOL_GSSET_INFO` / `ETHTOOL_GSTRINGS` / `ETHTOOL_GSTATS`, what `ethtool -S` prints)
//! and DCB netlink (`RTM_GETDCB` with `DCB_CMD_IEEE_GET`, what `mlnx_qos` and `dcb` read).
//!
//! Live, they are asked of the kernel and recorded; a snapshot keeps them in
//! `fabprobe/ethtool.json` and `fabprobe/dcb.json` and replays them, so a probe sees the
//! same answer either way. DCB replies are kept as the kernel's raw bytes (hex): the
//! probe's parser, not this module, decides what they mean, and a short or lying reply in
//! a snapshot reaches that parser exactly as it would live.

use std::collections::BTreeMap;

use std::io::ErrorKind;

use pnet::datalink;
use pnet::packet::ethernet::{EtherTypes, EthernetPacket};
use pnet::util::MacAddr;
use serde::{Deserialize, Serialize};

/// One answer: the value, the errno name the kernel returned (`EOPNOTSUPP` when the driver
/// has no DCB ops), or `not_captured` when a snapshot did not ask.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply<T> {
    Ok(T),
    Error(String),
    NotCaptured,
}

/// `ethtool -S`: counter names as the driver gives them, in the driver's order.
pub(crate) type EthtoolStats = Vec<(String, u64)>;

/// What a snapshot's side folder holds (and a live host recorded).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct NetAnswers {
    /// `fabprobe/ethtool.json`: ifname → stats.
    pub ethtool: BTreeMap<String, Reply<EthtoolStats>>,
    /// `fabprobe/dcb.json`: ifname → the `DCB_CMD_IEEE_GET` reply after the netlink
    /// header (`struct dcbmsg` and its attributes), hex.
    pub dcb_ieee: BTreeMap<String, Reply<String>>,
    /// `fabprobe/lldp.json`: ifname → the LLDP frames heard (whole Ethernet frames, hex).
    #[serde(default)]
    pub lldp: BTreeMap<String, Reply<Vec<String>>>,
}

pub(crate) fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Hex back to bytes; `None` on an odd length or a non-hex digit.
pub(crate) fn from_hex(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn errno_reply<T>(raw: i32) -> Reply<T> {
    Reply::Error(
        super::side::errno_name(raw)
            .map(str::to_string)
            .unwrap_or_else(|| format!("errno {raw}")),
    )
}

/// The ethtool statistics ioctl: the one hand-written `unsafe` block left here (no
/// well-kept crate issues `SIOCETHTOOL` with `ETHTOOL_GSTATS`).
#[allow(unsafe_code)]
mod ethtool;
pub use ethtool::live_ethtool_stats;

fn io_reply<T>(e: &std::io::Error) -> Reply<T> {
    errno_reply(e.raw_os_error().unwrap_or(libc::EIO))
}

// ---------------------------------------------------------------------------------------
// Live: DCB netlink
// ---------------------------------------------------------------------------------------

const RTM_GETDCB: u16 = 78;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
pub(crate) const DCB_CMD_IEEE_GET: u8 = 21;
pub(crate) const DCB_ATTR_IFNAME: u16 = 1;

/// The `RTM_GETDCB` / `DCB_CMD_IEEE_GET` request for `ifname` (sequence number 1).
fn dcb_request(ifname: &str) -> Vec<u8> {
    let mut name = ifname.as_bytes().to_vec();
    name.push(0);
    let attr_len = 4 + name.len();
    let mut msg = Vec::new();
    let total = 16 + 4 + attr_len.div_ceil(4) * 4;
    msg.extend_from_slice(&(total as u32).to_ne_bytes());
    msg.extend_from_slice(&RTM_GETDCB.to_ne_bytes());
    msg.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    msg.extend_from_slice(&1u32.to_ne_bytes()); // seq
    msg.extend_from_slice(&0u32.to_ne_bytes()); // pid
    msg.extend_from_slice(&[0, DCB_CMD_IEEE_GET, 0, 0]); // struct dcbmsg
    msg.extend_from_slice(&(attr_len as u16).to_ne_bytes());
    msg.extend_from_slice(&DCB_ATTR_IFNAME.to_ne_bytes());
    msg.extend_from_slice(&name);
    msg.resize(total, 0);
    msg
}

/// `RTM_GETDCB` / `DCB_CMD_IEEE_GET` for `ifname`: the reply after its `nlmsghdr`.
pub(crate) fn live_dcb_ieee(ifname: &str) -> Reply<String> {
    use nix::sys::socket::{
        AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, recv, sendto, setsockopt,
        socket, sockopt,
    };
    use nix::sys::time::{TimeVal, TimeValLike};
    use std::os::fd::AsRawFd;
    let fd = match socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    ) {
        Ok(fd) => fd,
        Err(e) => return errno_reply(e as i32),
    };
    // A deadline: the kernel answers at once, but fabprobe never waits unbounded.
    if let Err(e) = setsockopt(&fd, sockopt::ReceiveTimeout, &TimeVal::seconds(2)) {
        return errno_reply(e as i32);
    }
    let msg = dcb_request(ifname);
    // Port 0: the kernel.
    if let Err(e) = sendto(fd.as_raw_fd(), &msg, &NetlinkAddr::new(0, 0), MsgFlags::empty()) {
        return errno_reply(e as i32);
    }
    let mut buf = vec![0u8; 65_536];
    loop {
        let n = match recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()) {
            Ok(n) => n,
            Err(e) => return errno_reply(e as i32),
        };
        if n < 16 {
            return Reply::Error("EPROTO".into());
        }
        let len = (u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize).min(n);
        let typ = u16::from_ne_bytes([buf[4], buf[5]]);
        let seq = u32::from_ne_bytes([buf[8], buf[9], buf[10], buf[11]]);
        if seq != 1 {
            continue;
        }
        if typ == NLMSG_ERROR {
            let code = if len >= 20 {
                i32::from_ne_bytes([buf[16], buf[17], buf[18], buf[19]])
            } else {
                -libc::EPROTO
            };
            return errno_reply(-code);
        }
        if typ == RTM_GETDCB {
            return Reply::Ok(to_hex(&buf[16..len.max(16)]));
        }
    }
}

// ---------------------------------------------------------------------------------------
// Live: LLDP frames on a netdev
// ---------------------------------------------------------------------------------------

/// Longest wait inside one receive, so the overall deadline is kept within this much
/// while other traffic keeps the socket busy.
const LLDP_POLL_SLICE: std::time::Duration = std::time::Duration::from_millis(200);

/// An LLDP frame sent by someone else. The capture socket sees every frame on the link
/// (`ETH_P_ALL`), the host's own outgoing ones too (an lldpd on this host): those are
/// not the switch's word, so a frame from `own_mac` is dropped.
fn is_peer_lldp(frame: &[u8], own_mac: Option<MacAddr>) -> bool {
    let Some(eth) = EthernetPacket::new(frame) else {
        return false;
    };
    eth.get_ethertype() == EtherTypes::Lldp && Some(eth.get_source()) != own_mac
}

/// Listen on `ifname` for LLDP frames until the first arrives or `wait` passes. Returns the
/// frames heard (possibly none). Needs CAP_NET_RAW.
pub(crate) fn live_lldp(ifname: &str, wait: std::time::Duration) -> Reply<Vec<String>> {
    let Some(iface) = datalink::interfaces().into_iter().find(|i| i.name == ifname) else {
        return Reply::Error("ENODEV".into());
    };
    // Promiscuous: pnet's way to let the nearest-bridge group (01:80:c2:00:00:0e) past the
    // NIC's filter; the kernel drops it again when the channel closes.
    let config = datalink::Config {
        read_buffer_size: 9216,
        read_timeout: Some(wait.min(LLDP_POLL_SLICE)),
        promiscuous: true,
        ..datalink::Config::default()
    };
    let mut rx = match datalink::channel(&iface, config) {
        Ok(datalink::Channel::Ethernet(_tx, rx)) => rx,
        Ok(_) => return Reply::Error("EPROTO".into()),
        Err(e) => return io_reply(&e),
    };
    let deadline = std::time::Instant::now() + wait;
    let mut frames = Vec::new();
    while frames.is_empty() && std::time::Instant::now() < deadline {
        match rx.next() {
            Ok(f) if is_peer_lldp(f, iface.mac) => frames.push(to_hex(f)),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::Interrupted) => {}
            Err(e) => return io_reply(&e),
        }
    }
    Reply::Ok(frames)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_rejects_junk() {
        assert_eq!(
            from_hex(&to_hex(&[0, 1, 0xab, 0xff])),
            Some(vec![0, 1, 0xab, 0xff])
        );
        assert_eq!(from_hex("abc"), None);
        assert_eq!(from_hex("zz"), None);
        assert_eq!(from_hex(""), Some(vec![]));
    }

    #[test]
    fn replies_serialize_as_documented() {
        let r: Reply<String> = Reply::Error("EOPNOTSUPP".into());
        assert_eq!(serde_json::to_string(&r).unwrap(), r#"{"error":"EOPNOTSUPP"}"#);
        let s: Reply<EthtoolStats> = Reply::Ok(vec![("rx_prio3_pause".into(), 7)]);
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            r#"{"ok":[["rx_prio3_pause",7]]}"#
        );
    }

    /// Only LLDP frames count, and never the host's own (the capture sees outgoing frames).
    #[test]
    fn peer_lldp_filter_table() {
        let frame = |src: [u8; 6], ethertype: u16| {
            let mut f = vec![0x01, 0x80, 0xc2, 0x00, 0x00, 0x0e];
            f.extend_from_slice(&src);
            f.extend_from_slice(&ethertype.to_be_bytes());
            f.extend_from_slice(&[0x02, 0x07, 0x04]);
            f
        };
        let own = MacAddr::new(0x02, 0, 0, 0, 0, 1);
        let peer = [0x50, 0x6b, 0x4b, 0x11, 0x22, 0x33];
        assert!(is_peer_lldp(&frame(peer, 0x88cc), Some(own)));
        assert!(is_peer_lldp(&frame(peer, 0x88cc), None));
        assert!(!is_peer_lldp(&frame([0x02, 0, 0, 0, 0, 1], 0x88cc), Some(own)));
        assert!(!is_peer_lldp(&frame(peer, 0x0800), Some(own)));
        assert!(!is_peer_lldp(&[0x01, 0x80, 0xc2], Some(own)));
    }

    #[test]
    fn dcb_request_is_padded_and_names_the_device() {
        let m = dcb_request("eth0");
        assert_eq!(m.len(), 16 + 4 + 12);
        assert_eq!(u32::from_ne_bytes([m[0], m[1], m[2], m[3]]) as usize, m.len());
        assert_eq!(&m[24..29], b"eth0\0");
    }

    /// The loopback device has no DCB ops: the kernel says EOPNOTSUPP, and lo's ethtool
    /// statistics set is empty or unsupported, never an error that stops the probe.
    #[test]
    fn live_loopback_answers() {
        match live_dcb_ieee("lo") {
            Reply::Error(e) => assert!(e == "EOPNOTSUPP" || e == "ENODEV" || e == "EPERM", "{e}"),
            other => panic!("lo has DCB? {other:?}"),
        }
        assert_eq!(live_dcb_ieee("nonexistent-if0"), Reply::Error("ENODEV".into()));
        assert!(matches!(live_ethtool_stats("lo"), Reply::Ok(_) | Reply::Error(_)));
        assert_eq!(
            live_ethtool_stats("nonexistent-if0"),
            Reply::Error("ENODEV".into())
        );
        let t0 = std::time::Instant::now();
        let wait = std::time::Duration::from_millis(300);
        match live_lldp("lo", wait) {
            // Nobody sends LLDP on lo; the deadline is kept (loosely: the machine may be busy).
            Reply::Ok(f) => assert!(
                f.is_empty() && t0.elapsed() < wait * 8,
                "{f:?} {:?}",
                t0.elapsed()
            ),
            Reply::Error(e) => assert_eq!(e, "EPERM"),
            Reply::NotCaptured => panic!("live never says not captured"),
        }
        assert_eq!(live_lldp("nonexistent-if0", wait), Reply::Error("ENODEV".into()));
    }
}
