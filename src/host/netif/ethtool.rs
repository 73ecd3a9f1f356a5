//! `ethtool -S` through the `SIOCETHTOOL` ioctl (`ETHTOOL_GSSET_INFO` / `ETHTOOL_GSTRINGS`
//! / `ETHTOOL_GSTATS`). The ioctl itself is the only `unsafe` here: no well-kept crate
//! issues it (the netlink `ethtool` crate cannot: ethtool netlink has no message for the
//! driver's private `ethtool -S` counters, only the ioctl does; nix's `ioctl_*!` macros
//! generate `unsafe fn`s too), and the command blocks are plain `u64` buffers viewed as
//! bytes by bytemuck.

use std::os::fd::{AsRawFd, OwnedFd};

use super::{EthtoolStats, Reply, errno_reply};

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

fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// One `SIOCETHTOOL` call with `buf` as the command block.
fn ethtool_ioctl(fd: &OwnedFd, ifname: &str, buf: &mut [u64]) -> Result<(), i32> {
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
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), SIOCETHTOOL as _, &mut req as *mut IfreqData) };
    if rc < 0 { Err(last_errno()) } else { Ok(()) }
}

fn bytes_mut(buf: &mut [u64]) -> &mut [u8] {
    bytemuck::cast_slice_mut(buf)
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
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socket};
    let fd = match socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    ) {
        Ok(fd) => fd,
        Err(e) => return errno_reply(e as i32),
    };
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
