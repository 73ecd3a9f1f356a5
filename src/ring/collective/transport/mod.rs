//! The data-plane transport, shaped after RDMA Write with immediate data so that the TCP,
//! in-process and (next) ibverbs implementations are interchangeable:
//!
//! * the receiver registers `slots` buffers of `slot_bytes` each (an ibverbs MR) and tells
//!   the sender their count and size when the link is set up (rkey/addr exchange);
//! * the sender takes a credit for a free remote slot ([`SendLink::acquire`]; in RDMA the
//!   credits are the receiver's FIFO writes), then writes a chunk into that slot with a
//!   32-bit immediate ([`SendLink::write_imm`]; `IBV_WR_RDMA_WRITE_WITH_IMM`);
//! * the receiver is notified with the slot, length and immediate ([`RecvLink::poll`]; a
//!   receive completion with `IBV_WC_WITH_IMM`), reads the bytes in place and hands the
//!   slot back ([`RecvLink::consume`]), which returns the credit.
//!
//! Every wait takes a deadline.

pub mod accept;
/// The in-process transport for the unit tests (no test or bench of another crate uses it):
/// never in a release binary.
#[cfg(test)]
pub(crate) mod inproc;
#[cfg(feature = "rdma")]
#[allow(unsafe_code)]
pub mod rdma;
pub mod tcp;

use std::time::{Duration, Instant};

use thiserror::Error;

use crate::ring::model::{Rank, RankInfo};

/// A receive completion: which slot now holds `len` bytes, and the immediate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Completion {
    pub slot: u32,
    pub len: usize,
    pub imm: u32,
}

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum TransportError {
    #[error("timed out waiting on the link {dir} {peer}")]
    Timeout { peer: String, dir: &'static str },
    #[error("the link {dir} {peer} is closed: {why}")]
    Closed {
        peer: String,
        dir: &'static str,
        why: String,
    },
    /// A work request completed in error (RDMA); the fault is what the verdict is made of.
    #[error("the link {dir} {peer} is closed: {} completed with status {} ({}) on {}: {}; vendor syndrome {:#x}",
        fault.operation, fault.status, fault.status_name, fault.device, fault.meaning, fault.vendor_err)]
    Completion {
        peer: String,
        dir: &'static str,
        fault: Box<crate::ring::model::LinkFault>,
    },
    #[error("protocol error on the link {dir} {peer}: {what}")]
    Protocol {
        peer: String,
        dir: &'static str,
        what: String,
    },
    #[error("{what} ({peer}): {error}")]
    Setup {
        peer: String,
        what: String,
        error: String,
    },
}

impl TransportError {
    pub(crate) fn is_timeout(&self) -> bool {
        matches!(self, TransportError::Timeout { .. })
    }
    /// The completion error behind this one, if it is one.
    pub fn link_fault(&self) -> Option<&crate::ring::model::LinkFault> {
        match self {
            TransportError::Completion { fault, .. } => Some(fault),
            _ => None,
        }
    }
}

/// The sending end of one directed link.
pub trait SendLink: Send {
    /// Who is on the other end (`rank 3 (198.18.1.4:40001)`), for errors.
    fn peer(&self) -> &str;
    /// Largest chunk one write may carry (the receiver's slot size).
    fn slot_bytes(&self) -> usize;
    /// Wait until the receiver has a free slot; returns its id.
    fn acquire(&mut self, deadline: Instant) -> Result<u32, TransportError>;
    /// Write `data` (at most `slot_bytes`) into the remote `slot` taken by `acquire`; the
    /// receiver is notified with `imm` once all bytes landed. Returns when `data` may be
    /// reused. Blocks at most the link's timeout.
    fn write_imm(&mut self, slot: u32, data: &[u8], imm: u32) -> Result<(), TransportError>;
    /// Bytes written so far.
    fn bytes_sent(&self) -> u64;
    /// Report an error the link already knows of (an RDMA completion in error on its
    /// queue pair) without waiting; a rank waiting on its other link calls this, so a
    /// failed write is named while the rank waits elsewhere. Default: nothing to check.
    fn health(&mut self) -> Result<(), TransportError> {
        Ok(())
    }
    /// The run failed: closing the link must not wait for what is still in flight.
    fn abandon(&mut self) {}
}

/// The receiving end of one directed link.
pub(crate) trait RecvLink: Send {
    fn peer(&self) -> &str;
    /// Wait for the next completion (in the order the sender wrote).
    fn poll(&mut self, deadline: Instant) -> Result<Completion, TransportError>;
    /// Give `f` the landed bytes of `c`, then return the slot to the sender (a credit).
    fn consume(&mut self, c: &Completion, f: &mut dyn FnMut(&[u8])) -> Result<(), TransportError>;
    /// Bytes that landed so far.
    fn bytes_received(&self) -> u64;
    /// As [`SendLink::health`]: an error already on the link (a failed credit write).
    fn health(&mut self) -> Result<(), TransportError> {
        Ok(())
    }
}

/// A directed link's identity on one side: the peer rank and a tag (the ring channel; the
/// link scan can use its own tags so its links never mix with the ring's).
pub(crate) type LinkKey = (Rank, u32);

/// What a rank asks its fabric for.
pub(crate) struct LinkRequest<'a> {
    pub me: Rank,
    pub token: &'a str,
    /// The bootstrap table: where this rank's peers listen (its part of the table).
    pub table: &'a [RankInfo],
    /// The transport every rank of the world offers, when they all offer the same one
    /// (from the coordinator: this rank's part of the table cannot tell).
    pub shared_transport: Option<&'a str>,
    /// Links this rank writes into (peer = receiver).
    pub sends: &'a [LinkKey],
    /// Links this rank receives on (peer = sender), with `slots` slots of `slot_bytes`.
    pub recvs: &'a [LinkKey],
    pub slots: usize,
    pub slot_bytes: usize,
    /// Setup must finish by this instant.
    pub deadline: Instant,
    /// Every later blocking operation on the links is bounded by this.
    pub timeout: Duration,
}

/// The links a request produced, in request order, and the refused connection attempts
/// (lines for the log: wrong token, garbage, unexpected peers).
pub(crate) struct OpenLinks {
    pub sends: Vec<Box<dyn SendLink>>,
    pub recvs: Vec<Box<dyn RecvLink>>,
    pub rejected: Vec<String>,
}

/// One rank's end of a transport: where it listens and how it opens links to its peers.
/// `tcp` now; `rdma` next (the handshake then carries QP number, GID, rkey and slot
/// addresses, and the links post RDMA_WRITE_WITH_IMM on an RC QP).
pub(crate) trait Fabric: Sync {
    /// `tcp`, `rdma`.
    fn transport(&self) -> &'static str;
    /// The address this rank advertises in its hello.
    fn address(&self) -> String;
    /// Accept the `recvs` and connect the `sends` concurrently, by `req.deadline`.
    fn open(&self, req: &LinkRequest) -> Result<OpenLinks, TransportError>;
}

/// How errors name a peer: `rank 3 (node-d, 198.19.0.13:40001)`.
pub(crate) fn peer_name(table: &[RankInfo], r: Rank) -> String {
    match table.iter().find(|i| i.rank == r) {
        Some(i) => format!("rank {} ({}, {})", i.shown(), i.host, i.address),
        None => format!("rank {r}"),
    }
}

/// View f32s as bytes for the wire (every f32 bit pattern is valid bytes).
pub(crate) fn f32_bytes(v: &[f32]) -> &[u8] {
    bytemuck::cast_slice(v)
}

/// Slot storage aligned for f32, so landed bytes can be read as floats in place.
pub(crate) fn slot_buffer(bytes: usize) -> Vec<u32> {
    vec![0u32; bytes.div_ceil(4)]
}

pub(crate) fn words_as_bytes(v: &[u32]) -> &[u8] {
    bytemuck::cast_slice(v)
}

pub(crate) fn words_as_bytes_mut(v: &mut [u32]) -> &mut [u8] {
    bytemuck::cast_slice_mut(v)
}

/// Landed bytes as f32s when aligned and a multiple of 4 (always, for slots from
/// `slot_buffer`); None otherwise.
pub(crate) fn bytes_f32(b: &[u8]) -> Option<&[f32]> {
    // bytemuck refuses an empty slice whose dangling pointer is not f32-aligned; an empty
    // chunk is still zero floats.
    if b.is_empty() {
        return Some(&[]);
    }
    bytemuck::try_cast_slice(b).ok()
}

/// One conformance suite, run against every implementation: a factory makes a connected
/// (sender, receiver) pair with the given slots and slot size.
#[cfg(test)]
pub(crate) mod conformance {
    use std::thread;
    use std::time::{Duration, Instant};

    use super::*;

    pub(crate) type Pair = (Box<dyn SendLink>, Box<dyn RecvLink>);

    fn soon(ms: u64) -> Instant {
        Instant::now() + Duration::from_millis(ms)
    }

    /// Chunks arrive in order, with their immediates and bytes, through more writes than
    /// slots (so credits must flow back).
    pub(crate) fn delivers_in_order_with_credit_reuse(make: impl Fn(usize, usize) -> Pair) {
        let (mut s, mut r) = make(3, 64);
        let t = thread::spawn(move || {
            for i in 0..50u32 {
                let slot = s.acquire(soon(5000)).unwrap();
                let data: Vec<u8> = (0..(i as usize % 64) + 1).map(|k| (k as u32 + i) as u8).collect();
                s.write_imm(slot, &data, 1000 + i).unwrap();
            }
            s
        });
        let mut total = 0;
        for i in 0..50u32 {
            let c = r.poll(soon(5000)).unwrap();
            assert_eq!(c.imm, 1000 + i);
            assert_eq!(c.len, (i as usize % 64) + 1);
            let mut got = Vec::new();
            r.consume(&c, &mut |b| got.extend_from_slice(b)).unwrap();
            let want: Vec<u8> = (0..c.len).map(|k| (k as u32 + i) as u8).collect();
            assert_eq!(got, want, "chunk {i}");
            total += c.len as u64;
        }
        let s = t.join().unwrap();
        assert_eq!(r.bytes_received(), total);
        assert_eq!(s.bytes_sent(), total);
    }

    /// Without credits back the sender cannot overrun the receiver: acquire times out.
    pub(crate) fn no_overrun_without_credits(make: impl Fn(usize, usize) -> Pair) {
        let (mut s, mut r) = make(2, 16);
        for i in 0..2 {
            let slot = s.acquire(soon(2000)).unwrap();
            s.write_imm(slot, &[i as u8; 16], i).unwrap();
        }
        let t0 = Instant::now();
        let e = s.acquire(soon(200)).unwrap_err();
        assert!(e.is_timeout(), "{e}");
        assert!(t0.elapsed() >= Duration::from_millis(150));
        // One credit back: exactly one more slot.
        let c = r.poll(soon(2000)).unwrap();
        r.consume(&c, &mut |_| {}).unwrap();
        let slot = s.acquire(soon(2000)).unwrap();
        assert_eq!(slot, c.slot);
    }

    pub(crate) fn poll_times_out_when_idle(make: impl Fn(usize, usize) -> Pair) {
        let (_s, mut r) = make(2, 16);
        let t0 = Instant::now();
        let e = r.poll(soon(150)).unwrap_err();
        assert!(e.is_timeout(), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(2));
    }

    pub(crate) fn oversized_write_is_refused(make: impl Fn(usize, usize) -> Pair) {
        let (mut s, _r) = make(2, 16);
        let slot = s.acquire(soon(2000)).unwrap();
        assert!(matches!(
            s.write_imm(slot, &[0; 17], 0),
            Err(TransportError::Protocol { .. })
        ));
    }

    /// A sender that goes away is reported as closed, not as a timeout.
    pub(crate) fn sender_death_is_seen(make: impl Fn(usize, usize) -> Pair) {
        let (s, mut r) = make(2, 16);
        drop(s);
        let e = r.poll(soon(3000)).unwrap_err();
        assert!(matches!(e, TransportError::Closed { .. }), "{e}");
    }

    pub(crate) fn receiver_death_is_seen(make: impl Fn(usize, usize) -> Pair) {
        let (mut s, r) = make(1, 16);
        drop(r);
        let deadline = soon(3000);
        // The first write may still land in a buffer; the link must fail soon after.
        let mut err = None;
        for _ in 0..4 {
            match s
                .acquire(deadline)
                .and_then(|slot| s.write_imm(slot, &[1; 16], 0))
            {
                Ok(()) => continue,
                Err(e) => {
                    err = Some(e);
                    break;
                }
            }
        }
        let e = err.expect("writes to a dead receiver kept succeeding");
        assert!(matches!(e, TransportError::Closed { .. }), "{e}");
    }

    pub(crate) fn empty_write_is_a_completion(make: impl Fn(usize, usize) -> Pair) {
        let (mut s, mut r) = make(1, 16);
        let slot = s.acquire(soon(2000)).unwrap();
        s.write_imm(slot, &[], 7).unwrap();
        let c = r.poll(soon(2000)).unwrap();
        assert_eq!((c.len, c.imm), (0, 7));
    }

    /// Streams 32 MiB with a sender and a receiver thread; the bytes are intact and the
    /// landed buffers are f32-aligned.
    pub(crate) fn streams_bulk_data(make: impl Fn(usize, usize) -> Pair) {
        let (mut s, mut r) = make(4, 1 << 20);
        let chunks = 32u32;
        let t = thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 20];
            for i in 0..chunks {
                buf.iter_mut()
                    .enumerate()
                    .for_each(|(k, b)| *b = (k as u32 ^ i) as u8);
                let slot = s.acquire(soon(10_000)).unwrap();
                s.write_imm(slot, &buf, i).unwrap();
            }
        });
        for i in 0..chunks {
            let c = r.poll(soon(10_000)).unwrap();
            assert_eq!(c.imm, i);
            let mut ok = false;
            r.consume(&c, &mut |b| {
                ok = bytes_f32(b).is_some() && b.iter().enumerate().all(|(k, &x)| x == (k as u32 ^ i) as u8);
            })
            .unwrap();
            assert!(ok, "chunk {i} corrupted or misaligned");
        }
        t.join().unwrap();
    }

    /// Generate one #[test] per case for an implementation's factory.
    macro_rules! conformance_suite {
        ($factory:expr) => {
            #[test]
            fn delivers_in_order_with_credit_reuse() {
                $crate::ring::collective::transport::conformance::delivers_in_order_with_credit_reuse(
                    $factory,
                );
            }
            #[test]
            fn no_overrun_without_credits() {
                $crate::ring::collective::transport::conformance::no_overrun_without_credits($factory);
            }
            #[test]
            fn poll_times_out_when_idle() {
                $crate::ring::collective::transport::conformance::poll_times_out_when_idle($factory);
            }
            #[test]
            fn oversized_write_is_refused() {
                $crate::ring::collective::transport::conformance::oversized_write_is_refused($factory);
            }
            #[test]
            fn sender_death_is_seen() {
                $crate::ring::collective::transport::conformance::sender_death_is_seen($factory);
            }
            #[test]
            fn receiver_death_is_seen() {
                $crate::ring::collective::transport::conformance::receiver_death_is_seen($factory);
            }
            #[test]
            fn empty_write_is_a_completion() {
                $crate::ring::collective::transport::conformance::empty_write_is_a_completion($factory);
            }
            #[test]
            fn streams_bulk_data() {
                $crate::ring::collective::transport::conformance::streams_bulk_data($factory);
            }
        };
    }
    pub(crate) use conformance_suite;
}

#[cfg(test)]
mod byte_view_tests {
    use super::*;

    /// The f32 views round-trip, and a landed buffer that is misaligned or not a whole
    /// number of floats is refused rather than read.
    #[test]
    fn f32_views_round_trip_and_refuse_bad_buffers() {
        let v = [1.5f32, -2.0, f32::MAX];
        assert_eq!(bytes_f32(f32_bytes(&v)), Some(&v[..]));
        let words = slot_buffer(12);
        let b = words_as_bytes(&words);
        assert_eq!(bytes_f32(&b[..8]).map(<[f32]>::len), Some(2));
        assert_eq!(bytes_f32(&b[..7]), None);
        assert_eq!(bytes_f32(&b[1..5]), None);
        assert_eq!(bytes_f32(&[]), Some(&[][..]));
        let mut words = slot_buffer(4);
        words_as_bytes_mut(&mut words).copy_from_slice(&1.0f32.to_ne_bytes());
        assert_eq!(bytes_f32(words_as_bytes(&words)), Some(&[1.0f32][..]));
    }
}
