//! `TCP_INFO` on a control connection: what the peer's kernel has acknowledged. The one
//! hand-written `unsafe` of the coordinator (one `getsockopt`): neither `nix` 0.32,
//! `rustix` 1.1 nor `socket2` 0.6 exposes this option.

use std::net::TcpStream;
use std::os::fd::AsRawFd;

/// What TCP_INFO says about data this end sent on a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckState {
    /// Segments sent and not yet acknowledged.
    pub unacked: u32,
    /// Retransmissions of the oldest unacknowledged segment, and the timer's backoff.
    pub retransmits: u8,
    pub backoff: u8,
    /// Milliseconds since the peer's kernel last acknowledged anything.
    pub last_ack_recv_ms: u32,
}

/// Read TCP_INFO; None when the kernel refuses.
pub(crate) fn ack_state(s: &TcpStream) -> Option<AckState> {
    let mut ti = std::mem::MaybeUninit::<libc::tcp_info>::zeroed();
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: getsockopt(TCP_INFO) into a zeroed tcp_info with its size; the kernel writes
    // at most `len` bytes, and every bit pattern is a valid tcp_info (plain integers).
    let ti = unsafe {
        let r = libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            ti.as_mut_ptr().cast(),
            &mut len,
        );
        if r != 0 {
            return None;
        }
        ti.assume_init()
    };
    Some(AckState {
        unacked: ti.tcpi_unacked,
        retransmits: ti.tcpi_retransmits,
        backoff: ti.tcpi_backoff,
        last_ack_recv_ms: ti.tcpi_last_ack_recv,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_loopback_connection_has_nothing_unacked() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let a = ack_state(&c).unwrap();
        assert_eq!((a.unacked, a.retransmits), (0, 0));
    }
}
