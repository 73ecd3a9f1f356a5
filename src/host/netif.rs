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
pub type EthtoolStats = Vec<(String, u64)>;

/// What a snapshot's side folder holds (and a live host recorded).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetAnswers {
    /// `fabprobe/ethtool.json`: ifname → stats.
    pub ethtool: BTreeMap<String, Reply<EthtoolStats>>,
    /// `fabprobe/dcb.json`: ifname → the `DCB_CMD_IEEE_GET` reply after the netlink
    /// header (`struct dcbmsg` and its attributes), hex.
    pub dcb_ieee: BTreeMap<String, Reply<String>>,
    /// `fabprobe/lldp.json`: ifname → the LLDP frames heard (whole Ethernet frames, hex).
    #[serde(default)]
    pub lldp: BTreeMap<String, Reply<Vec<String>>>,
}

pub fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Hex back to bytes; `None` on an odd length or a non-hex digit.
pub fn from_hex(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    if s.len() % 2 != 0 {
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

// ---------------------------------------------------------------------------------------
// Live: the ethtool ioctl
// ---------------------------------------------------------------------------------------

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSTATS: u32 = 0x1d;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETH_SS_STATS: u32 = 1;
const ETH_GSTRING_LEN: usize = 32;
/// More counters than any driver has (mlx5 has a few thousand with many channels).
const MAX_STATS: usize = 65_536;

#[repr(C)]
struct IfreqData {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _pad: [u8; 16],
}

struct Fd(libc::c_int);
impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: the descriptor is owned by this guard and closed once.
        unsafe { libc::close(self.0) };
    }
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// One `SIOCETHTOOL` call with `buf` as the command block.
fn ethtool_ioctl(fd: &Fd, ifname: &str, buf: &mut [u64]) -> Result<(), i32> {
    let mut req = IfreqData {
        name: [0; libc::IFNAMSIZ],
        data: buf.as_mut_ptr().cast(),
        _pad: [0; 16],
    };
    let b = ifname.as_bytes();
    if b.is_empty() || b.len() >= libc::IFNAMSIZ || b.contains(&0) {
        return Err(libc::ENODEV);
    }
    for (d, s) in req.name.iter_mut().zip(b) {
        *d = *s as libc::c_char;
    }
    // SAFETY: `req` is a valid ifreq whose data points at `buf`, which is large enough for
    // the command the caller wrote into it (the kernel writes at most the sizes it was told).
    let rc = unsafe { libc::ioctl(fd.0, SIOCETHTOOL as _, &mut req as *mut IfreqData) };
    if rc < 0 { Err(last_errno()) } else { Ok(()) }
}

fn bytes_mut(buf: &mut [u64]) -> &mut [u8] {
    // SAFETY: u8 has no alignment or validity requirements; the length covers the same memory.
    unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<u8>(), buf.len() * 8) }
}
fn put_u32(buf: &mut [u64], off: usize, v: u32) {
    bytes_mut(buf)[off..off + 4].copy_from_slice(&v.to_ne_bytes());
}
fn get_u32(buf: &mut [u64], off: usize) -> u32 {
    let b = bytes_mut(buf);
    u32::from_ne_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// `ethtool -S <ifname>` through the ioctl.
pub fn live_ethtool_stats(ifname: &str) -> Reply<EthtoolStats> {
    // SAFETY: plain socket(2); the result is checked.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return errno_reply(last_errno());
    }
    let fd = Fd(raw);
    // struct ethtool_sset_info { u32 cmd; u32 reserved; u64 sset_mask; u32 data[1]; }
    let mut info = [0u64; 3];
    put_u32(&mut info, 0, ETHTOOL_GSSET_INFO);
    info[1] = 1u64 << ETH_SS_STATS;
    if let Err(e) = ethtool_ioctl(&fd, ifname, &mut info) {
        return errno_reply(e);
    }
    // The kernel clears the bit when the set is not supported.
    let n = if info[1] & (1 << ETH_SS_STATS) != 0 {
        get_u32(&mut info, 16) as usize
    } else {
        0
    };
    if n == 0 {
        return Reply::Ok(Vec::new());
    }
    let n = n.min(MAX_STATS);
    // struct ethtool_gstrings { u32 cmd; u32 string_set; u32 len; u8 data[]; }
    let mut strings = vec![0u64; (12 + n * ETH_GSTRING_LEN).div_ceil(8)];
    put_u32(&mut strings, 0, ETHTOOL_GSTRINGS);
    put_u32(&mut strings, 4, ETH_SS_STATS);
    put_u32(&mut strings, 8, n as u32);
    if let Err(e) = ethtool_ioctl(&fd, ifname, &mut strings) {
        return errno_reply(e);
    }
    // struct ethtool_stats { u32 cmd; u32 n_stats; u64 data[]; }
    let mut stats = vec![0u64; 1 + n];
    put_u32(&mut stats, 0, ETHTOOL_GSTATS);
    put_u32(&mut stats, 4, n as u32);
    if let Err(e) = ethtool_ioctl(&fd, ifname, &mut stats) {
        return errno_reply(e);
    }
    let got_strings = get_u32(&mut strings, 8) as usize;
    let got_stats = get_u32(&mut stats, 4) as usize;
    // The counter set may change between the calls (a channel count change): use the
    // smallest of the three counts rather than pair a name with the wrong value.
    let m = n.min(got_strings).min(got_stats);
    let sbytes = bytes_mut(&mut strings).to_vec();
    let out = (0..m)
        .map(|i| {
            let raw = &sbytes[12 + i * ETH_GSTRING_LEN..12 + (i + 1) * ETH_GSTRING_LEN];
            let end = raw.iter().position(|&c| c == 0).unwrap_or(raw.len());
            (String::from_utf8_lossy(&raw[..end]).into_owned(), stats[1 + i])
        })
        .collect();
    Reply::Ok(out)
}

// ---------------------------------------------------------------------------------------
// Live: DCB netlink
// ---------------------------------------------------------------------------------------

const RTM_GETDCB: u16 = 78;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
pub const DCB_CMD_IEEE_GET: u8 = 21;
pub const DCB_ATTR_IFNAME: u16 = 1;

/// `RTM_GETDCB` / `DCB_CMD_IEEE_GET` for `ifname`: the reply after its `nlmsghdr`.
pub fn live_dcb_ieee(ifname: &str) -> Reply<String> {
    // SAFETY: plain socket(2); the result is checked.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if raw < 0 {
        return errno_reply(last_errno());
    }
    let fd = Fd(raw);
    // A deadline: the kernel answers at once, but fabprobe never waits unbounded.
    let tv = libc::timeval {
        tv_sec: 2,
        tv_usec: 0,
    };
    // SAFETY: setsockopt with a correctly sized timeval.
    unsafe {
        libc::setsockopt(
            fd.0,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        );
    }
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
    // SAFETY: sockaddr_nl zeroed is the kernel as destination.
    let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    // SAFETY: msg and sa are valid for the lengths given.
    let sent = unsafe {
        libc::sendto(
            fd.0,
            msg.as_ptr().cast(),
            msg.len(),
            0,
            (&sa as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if sent < 0 {
        return errno_reply(last_errno());
    }
    let mut buf = vec![0u8; 65_536];
    loop {
        // SAFETY: buf is valid for its length.
        let n = unsafe { libc::recv(fd.0, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return errno_reply(last_errno());
        }
        let n = n as usize;
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

const ETH_P_LLDP: u16 = 0x88cc;
/// The nearest-bridge LLDP group address every switch sends to.
const LLDP_MULTICAST: [u8; 6] = [0x01, 0x80, 0xc2, 0x00, 0x00, 0x0e];

/// Listen on `ifname` for LLDP frames until the first arrives or `wait` passes. Returns the
/// frames heard (possibly none). Needs CAP_NET_RAW.
pub fn live_lldp(ifname: &str, wait: std::time::Duration) -> Reply<Vec<String>> {
    let Ok(cname) = std::ffi::CString::new(ifname) else {
        return Reply::Error("ENODEV".into());
    };
    // SAFETY: if_nametoindex reads a NUL-terminated string.
    let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if ifindex == 0 {
        return errno_reply(last_errno());
    }
    let proto = (ETH_P_LLDP).to_be() as libc::c_int;
    // SAFETY: plain socket(2); the result is checked.
    let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, proto) };
    if raw < 0 {
        return errno_reply(last_errno());
    }
    let fd = Fd(raw);
    // SAFETY: sockaddr_ll zeroed, then filled; sizes passed are the struct's.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = ETH_P_LLDP.to_be();
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: valid sockaddr_ll for bind.
    let rc = unsafe {
        libc::bind(
            fd.0,
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return errno_reply(last_errno());
    }
    // Join the LLDP group address so the NIC's filter passes it up.
    // SAFETY: packet_mreq zeroed then filled.
    let mut mr: libc::packet_mreq = unsafe { std::mem::zeroed() };
    mr.mr_ifindex = ifindex as i32;
    mr.mr_type = libc::PACKET_MR_MULTICAST as u16;
    mr.mr_alen = 6;
    mr.mr_address[..6].copy_from_slice(&LLDP_MULTICAST);
    // SAFETY: setsockopt with a correctly sized packet_mreq; failure only means we rely on
    // the NIC passing the group already (most do), so it is not checked.
    unsafe {
        libc::setsockopt(
            fd.0,
            libc::SOL_PACKET,
            libc::PACKET_ADD_MEMBERSHIP,
            (&mr as *const libc::packet_mreq).cast(),
            std::mem::size_of::<libc::packet_mreq>() as libc::socklen_t,
        );
    }
    let deadline = std::time::Instant::now() + wait;
    let mut frames = Vec::new();
    let mut buf = vec![0u8; 9216];
    while frames.is_empty() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            break;
        }
        let tv = libc::timeval {
            tv_sec: left.as_secs() as libc::time_t,
            tv_usec: left.subsec_micros().max(1) as libc::suseconds_t,
        };
        // SAFETY: setsockopt with a correctly sized timeval.
        unsafe {
            libc::setsockopt(
                fd.0,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            );
        }
        // SAFETY: buf is valid for its length.
        let n = unsafe { libc::recv(fd.0, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            let e = last_errno();
            if e == libc::EAGAIN || e == libc::EINTR {
                continue;
            }
            return errno_reply(e);
        }
        frames.push(to_hex(&buf[..n as usize]));
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
    }
}
