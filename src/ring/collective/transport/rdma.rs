//! The RDMA transport (feature `rdma`): one RC queue pair per directed link and channel,
//! set up with NCCL's recipe (net_ib `connect.cc`): INIT -> RTR -> RTS, path MTU = the
//! smaller of both ports' active MTUs, a GRH on RoCE and on IB when the port requires it or
//! the peer is in another subnet (then addressed by its FLID), `min_rnr_timer` 12,
//! `timeout`/`retry_cnt` from `NCCL_IB_TIMEOUT`/`NCCL_IB_RETRY_CNT`, `rnr_retry` 7,
//! `max_rd_atomic` 1, the P_Key index from `NCCL_IB_PKEY`, traffic class and SL from
//! `NCCL_IB_TC`/`NCCL_IB_SL`, and on RoCE `NCCL_IB_FIFO_TC` for the QP that writes credits.
//!
//! * The receiver registers its `slots` (remote write allowed on them only). Slots are used
//!   strictly in turn: the k-th chunk on a link goes to slot `k % slots`, so both ends know
//!   the slot without saying it, and the immediate carries the caller's 32 bits untouched.
//! * A chunk is one RDMA Write with immediate from a registered staging copy into the
//!   receiver's slot; the receive completion (`IBV_WC_RECV_RDMA_WITH_IMM`) says it landed.
//! * A credit is a zero-byte RDMA Write with immediate (the slot id) back on the same QP into
//!   a small region of the sender; the sender reuses a slot only when its credit came back
//!   and its own write completed, so no slot is overrun and the staging copy is never
//!   rewritten while the NIC may still read it. Receives are posted before the QP leaves
//!   INIT and re-posted as they complete, so nothing waits on a receive never posted.
//! * Endpoints (QPN, PSN, LID, GID, MTU, link layer, slot address and rkey) are exchanged
//!   over a TCP connection to the address the rank advertised in its hello (the same
//!   control path the TCP transport uses, accepted by the same machinery): versioned,
//!   bounded, token-checked, and checked against the rank table. A mismatch of link layer or
//!   GID family names both ends; every size the peer sends is checked before it is used.
//!   The connection stays open: its EOF is how a dead peer is seen at once (RC has no such
//!   signal until its retries run out, which by NCCL's defaults takes minutes).
//! * Completion errors end the link with the status, its meaning and the vendor syndrome;
//!   flushes (status 5) are reported only as the knock-on they are. Every wait takes a
//!   deadline; polling backs off to sleeps so a 1-vCPU VM keeps its CPU for the NIC.
//!
//! Hand-written `unsafe` (two blocks): copying into the staging slot and reading a landed
//! slot of a registered region. The NIC reads and writes those regions behind Rust's back,
//! so they are held as raw memory (in [`crate::verbs`]) and each access says which slot
//! protocol rule keeps the NIC off it; no crate can type memory a device DMAs into.

use std::collections::VecDeque;
use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::accept::{self, AcceptSpec, Refused};
use super::tcp::{MAX_SLOT_BYTES, MAX_SLOTS, read_frame_by, write_frame};
use super::{Completion, Fabric, LinkRequest, OpenLinks, RecvLink, SendLink, TransportError, peer_name};
use crate::ring::model::LinkFault;
use crate::verbs::{self, Cq, Device, Endpoint, Mr, Pd, PortInfo, Qp, QpParams, VerbsError, Wc};

/// The endpoint exchange's version; a peer with another one is refused by name.
pub(crate) const RDMA_HS_VERSION: u32 = 2;
/// Extra receives and send slots beyond the slot count.
const SPARE_WR: u32 = 8;

/// Which device, port and GID, and the NCCL knobs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RdmaSettings {
    pub device: String,
    pub port: u8,
    pub gid_index: u8,
    /// `NCCL_IB_TIMEOUT` (20).
    pub timeout: u8,
    /// `NCCL_IB_RETRY_CNT` (7).
    pub retry_cnt: u8,
    /// `NCCL_IB_TC` (0).
    pub traffic_class: u8,
    /// `NCCL_IB_SL` (0).
    pub service_level: u8,
    /// `NCCL_IB_PKEY` (0): the P_Key index.
    pub pkey_index: u16,
    /// `NCCL_IB_FIFO_TC` (unset): the traffic class of the credit writes on RoCE.
    pub fifo_tc: Option<u8>,
}

impl RdmaSettings {
    /// NCCL's defaults and `NCCL_IB_TIMEOUT`, `NCCL_IB_RETRY_CNT`, `NCCL_IB_TC`, `NCCL_IB_SL`
    /// from `get`, parsed as NCCL does (`strtoll`, out of range -> clamped to the field).
    pub(crate) fn with_nccl_env(
        device: &str,
        port: u8,
        gid_index: u8,
        get: impl Fn(&str) -> Option<String>,
    ) -> Self {
        let p = |name: &str, def: i64, max: i64| -> u8 {
            crate::nccl::gid::nccl_param(get(name).as_deref(), def).clamp(0, max) as u8
        };
        RdmaSettings {
            device: device.into(),
            port,
            gid_index,
            timeout: p("NCCL_IB_TIMEOUT", 20, 31),
            retry_cnt: p("NCCL_IB_RETRY_CNT", 7, 7),
            traffic_class: p("NCCL_IB_TC", 0, 255),
            service_level: p("NCCL_IB_SL", 0, 15),
            pkey_index: crate::nccl::gid::nccl_param(get("NCCL_IB_PKEY").as_deref(), 0).clamp(0, 0xffff)
                as u16,
            // NCCL's default -1 means "as NCCL_IB_TC".
            fifo_tc: Some(crate::nccl::gid::nccl_param(
                get("NCCL_IB_FIFO_TC").as_deref(),
                -1,
            ))
            .filter(|&v| v >= 0)
            .map(|v| v.min(255) as u8),
        }
    }
}

/// `::ffff:a.b.c.d` is IPv4; anything else IPv6 (RoCE) or a subnet-prefixed IB GID.
fn gid_family(link_layer: &str, gid: &[u8; 16]) -> &'static str {
    if link_layer == "InfiniBand" {
        "ib"
    } else if gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff {
        "ipv4"
    } else {
        "ipv6"
    }
}

/// What the sender says when it opens a link.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct RdmaHello {
    pub version: u32,
    pub token: String,
    pub from_rank: u32,
    pub to_rank: u32,
    pub channel: u32,
    /// `rxe0:1 gid 1`, for errors on the other side.
    pub device: String,
    pub link_layer: String,
    pub gid_family: String,
    pub mtu_bytes: u32,
    pub endpoint: Endpoint,
    /// Where credits land (a small region of the sender with remote write).
    pub credit_addr: u64,
    pub credit_rkey: u32,
}

/// The receiver's answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct RdmaReply {
    pub ok: bool,
    pub reason: String,
    pub device: String,
    pub endpoint: Option<Endpoint>,
    pub slots: u32,
    pub slot_bytes: u64,
    /// Distance between slots (slot_bytes rounded up to 8, so every slot is f32-aligned).
    pub stride: u64,
    pub addr: u64,
    pub rkey: u32,
    /// The receiver's active MTU in bytes (the path MTU is the smaller of both ends').
    pub mtu_bytes: u32,
}

/// What the peer said of its end, for the QP attributes.
struct PeerPort {
    mtu_bytes: u32,
    gid: [u8; 16],
}

impl RdmaHello {
    fn port_attrs(&self) -> PeerPort {
        PeerPort {
            mtu_bytes: self.mtu_bytes,
            gid: self.endpoint.gid,
        }
    }
}

/// The low 16 bits of a GID's subnet prefix: the local subnet NCCL compares.
fn local_subnet(gid: &[u8; 16]) -> u16 {
    u16::from_be_bytes([gid[6], gid[7]])
}

/// The FLID NCCL reads from an IB GID (bytes 4..6), 0 when none.
fn flid(gid: &[u8; 16]) -> u16 {
    u16::from_be_bytes([gid[4], gid[5]])
}

/// NCCL's QP attributes for a link from our port to `peer`. `credits`: this QP writes the
/// credits (NCCL's FIFO), which take `NCCL_IB_FIFO_TC` on RoCE.
fn qp_params(
    s: &RdmaSettings,
    local: &PortInfo,
    gid: &[u8; 16],
    peer: Option<&PeerPort>,
    credits: bool,
) -> QpParams {
    let ethernet = local.link_layer == "Ethernet";
    let mut p = QpParams {
        port: s.port,
        gid_index: s.gid_index,
        path_mtu: local.active_mtu,
        timeout: s.timeout,
        retry_cnt: s.retry_cnt,
        rnr_retry: 7,
        min_rnr_timer: 12,
        max_rd_atomic: 1,
        traffic_class: match s.fifo_tc {
            Some(tc) if credits && ethernet => tc,
            _ => s.traffic_class,
        },
        service_level: s.service_level,
        global: ethernet || local.grh_required,
        pkey_index: s.pkey_index,
        dlid: None,
    };
    if let Some(peer) = peer {
        if let Some(m) = verbs::mtu_enum(peer.mtu_bytes) {
            p.path_mtu = p.path_mtu.min(m);
        }
        if !ethernet && local_subnet(gid) != local_subnet(&peer.gid) {
            p.global = true;
            p.dlid = Some(flid(&peer.gid)).filter(|&f| f != 0);
        }
    }
    p
}

/// The slot layout a receiver offered, checked: what the sender may write, and where.
#[derive(Debug, PartialEq)]
struct Layout {
    slots: u32,
    slot_bytes: usize,
    stride: usize,
    /// `slots * stride`: the staging copy's size and the remote region's.
    region: usize,
}

/// Check a receiver's reply before any of its sizes is used: the same limits as the TCP
/// data plane, no more slots than asked for, and no arithmetic that wraps.
fn check_layout(r: &RdmaReply, asked_slots: usize) -> Result<Layout, String> {
    let offer = || {
        format!(
            "{} slots of {} bytes (stride {})",
            r.slots, r.slot_bytes, r.stride
        )
    };
    if !(1..=MAX_SLOTS).contains(&r.slots) || r.slots as usize > asked_slots {
        return Err(format!(
            "{}: want 1..={} slots",
            offer(),
            asked_slots.min(MAX_SLOTS as usize)
        ));
    }
    if !(4..=MAX_SLOT_BYTES).contains(&r.slot_bytes) {
        return Err(format!("{}: want 4..={MAX_SLOT_BYTES} bytes a slot", offer()));
    }
    if r.stride < r.slot_bytes || !r.stride.is_multiple_of(8) || r.stride > MAX_SLOT_BYTES + 8 {
        return Err(format!(
            "{}: the stride must be a multiple of 8 from the slot size to {}",
            offer(),
            MAX_SLOT_BYTES + 8
        ));
    }
    let region = u64::from(r.slots)
        .checked_mul(r.stride)
        .filter(|&n| r.addr.checked_add(n).is_some())
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| format!("{} at {:#x}: the region wraps", offer(), r.addr))?;
    Ok(Layout {
        slots: r.slots,
        slot_bytes: r.slot_bytes as usize,
        stride: r.stride as usize,
        region,
    })
}

/// Work request ids say what completed (a completion in error has no valid opcode): writes
/// carry their slot, receives and credits these.
const WR_RECV: u64 = 1 << 63;
const WR_CREDIT: u64 = WR_RECV | 1;

/// What a completion on a sender's queue was, from its `wr_id`.
fn sender_op(wc: &Wc) -> &'static str {
    if wc.wr_id == WR_RECV {
        "a credit"
    } else {
        "an RDMA write"
    }
}

/// What a completion on a receiver's queue was, from its `wr_id`.
fn receiver_op(wc: &Wc) -> &'static str {
    if wc.wr_id == WR_RECV {
        "a chunk"
    } else {
        "a credit"
    }
}

/// Sleep-backed polling: a few quick retries, then sleeps growing to 200 µs.
struct Backoff(u32);

impl Backoff {
    fn wait(&mut self) {
        self.0 += 1;
        if self.0 < 16 {
            thread::yield_now();
        } else {
            let us = (10u64 << ((self.0 - 16) / 8).min(5)).min(200);
            thread::sleep(Duration::from_micros(us));
        }
    }
}

/// A peer that closed the side connection (or crashed: the kernel closes it).
fn peer_gone(s: &TcpStream) -> Option<String> {
    let _ = s.set_nonblocking(true);
    let mut b = [0u8; 1];
    let r = match s.peek(&mut b) {
        Ok(0) => Some("the peer closed its connection (process gone?)".to_string()),
        Ok(_) => None,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
        Err(e) => Some(format!("the side connection failed: {e}")),
    };
    let _ = s.set_nonblocking(false);
    r
}

/// A completion error on the link `from -> to`, seen by `me`: status, meaning, syndrome.
fn completion_error(
    peer: &str,
    dir: &'static str,
    link: (u32, u32, u32),
    dev: &str,
    what: &str,
    wc: &Wc,
) -> TransportError {
    let (name, meaning) = verbs::status_meaning(wc.status);
    TransportError::Completion {
        peer: peer.into(),
        dir,
        fault: Box::new(LinkFault {
            from_rank: link.0,
            to_rank: link.1,
            seen_by: link.2,
            device: dev.into(),
            operation: what.into(),
            status: wc.status,
            status_name: name,
            meaning: meaning.into(),
            vendor_err: wc.vendor_err,
        }),
    }
}

/// The completion to report from a batch: the first error that is not a flush (a flush is
/// the knock-on of an earlier error on the queue pair, and may be polled before it).
/// The first error of a link end sticks: every later call gets it again.
fn stick(slot: &mut Option<TransportError>, e: TransportError) -> TransportError {
    if slot.is_none() {
        *slot = Some(e.clone());
    }
    e
}

fn verbs_closed(peer: &str, dir: &'static str, e: VerbsError) -> TransportError {
    TransportError::Closed {
        peer: peer.into(),
        dir,
        why: e.to_string(),
    }
}

/// What names one end of a link in its errors.
struct End<'a> {
    peer: &'a str,
    dir: &'static str,
    link: (u32, u32, u32),
    dev: &'a str,
}

impl End<'_> {
    /// One poll of the end's CQ: the number of completions in `wcs`, or the error that ends
    /// the link (an earlier one, a failed poll, or the first completion in error that is not
    /// a flush, named by `what` it was), which then sticks in `slot`.
    fn poll(
        &self,
        cq: &Cq,
        slot: &mut Option<TransportError>,
        wcs: &mut [Wc],
        what: impl Fn(&Wc) -> &'static str,
    ) -> Result<usize, TransportError> {
        if let Some(e) = slot {
            return Err(e.clone());
        }
        let n = cq
            .poll(wcs)
            .map_err(|e| stick(slot, verbs_closed(self.peer, self.dir, e)))?;
        if let Some(wc) = first_error(&wcs[..n]) {
            let e = completion_error(self.peer, self.dir, self.link, self.dev, what(wc), wc);
            return Err(stick(slot, e));
        }
        Ok(n)
    }
}

fn first_error(wcs: &[Wc]) -> Option<&Wc> {
    let mut bad = wcs.iter().filter(|w| !w.ok());
    let first = bad.clone().next()?;
    Some(bad.find(|w| w.status != verbs::WC_WR_FLUSH_ERR).unwrap_or(first))
}

fn setup_err(peer: &str, what: &str, e: impl ToString) -> TransportError {
    TransportError::Setup {
        peer: peer.into(),
        what: what.into(),
        error: e.to_string(),
    }
}

// ---------------------------------------------------------------- sender

pub(crate) struct RdmaSend {
    // Field order is drop order: the QP before its CQ and regions.
    qp: Qp,
    cq: Cq,
    staging: Mr,
    _credit: Mr,
    side: TcpStream,
    peer: String,
    /// (from, to, me): the ring link this QP carries, for completion errors.
    link: (u32, u32, u32),
    dev: String,
    slots: u32,
    slot_bytes: usize,
    stride: usize,
    remote_addr: u64,
    rkey: u32,
    /// Writes posted so far; the next goes to slot `next % slots`.
    next: u64,
    /// The receiver handed the slot back (or never had it).
    credited: Vec<bool>,
    /// Our write into the slot has not completed yet.
    inflight: Vec<bool>,
    timeout: Duration,
    error: Option<TransportError>,
    sent: u64,
    /// The run failed: closing must not wait for writes to be acknowledged.
    abandoned: bool,
    /// When the write now in each slot was posted.
    posted_at: Vec<Option<Instant>>,
}

impl RdmaSend {
    fn fail(&mut self, e: TransportError) -> TransportError {
        stick(&mut self.error, e)
    }

    fn verbs_fail(&mut self, e: VerbsError) -> TransportError {
        let e = verbs_closed(&self.peer, "to", e);
        self.fail(e)
    }

    /// Drain the CQ: credits free slots, write completions clear `inflight`.
    fn progress(&mut self) -> Result<bool, TransportError> {
        let mut wcs = [Wc::default(); 16];
        let end = End {
            peer: &self.peer,
            dir: "to",
            link: self.link,
            dev: &self.dev,
        };
        let n = end.poll(&self.cq, &mut self.error, &mut wcs, sender_op)?;
        for wc in &wcs[..n] {
            if wc.wr_id == WR_RECV {
                let slot = wc.imm.unwrap_or(u32::MAX);
                if slot >= self.slots {
                    let peer = self.peer.clone();
                    return Err(self.fail(TransportError::Protocol {
                        peer,
                        dir: "to",
                        what: format!("credit for slot {slot} of {}", self.slots),
                    }));
                }
                self.credited[slot as usize] = true;
                if let Err(e) = self.qp.post_recv(WR_RECV) {
                    return Err(self.verbs_fail(e));
                }
            } else if let Some(f) = self.inflight.get_mut(wc.wr_id as usize) {
                *f = false;
            }
        }
        Ok(n > 0)
    }

    fn slot_ready(&self, slot: usize) -> bool {
        self.credited[slot] && !self.inflight[slot]
    }
}

impl SendLink for RdmaSend {
    fn peer(&self) -> &str {
        &self.peer
    }
    fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }
    fn acquire(&mut self, deadline: Instant) -> Result<u32, TransportError> {
        let slot = (self.next % self.slots as u64) as usize;
        let mut b = Backoff(0);
        let mut last_side = Instant::now();
        loop {
            if self.progress()? {
                b = Backoff(0);
            }
            if self.slot_ready(slot) {
                return Ok(slot as u32);
            }
            if last_side.elapsed() > Duration::from_millis(2) {
                last_side = Instant::now();
                if let Some(why) = peer_gone(&self.side) {
                    // A credit may have landed just before the close.
                    self.progress()?;
                    if self.slot_ready(slot) {
                        return Ok(slot as u32);
                    }
                    let peer = self.peer.clone();
                    return Err(self.fail(TransportError::Closed { peer, dir: "to", why }));
                }
            }
            if Instant::now() >= deadline {
                return Err(TransportError::Timeout {
                    peer: self.peer.clone(),
                    dir: "to",
                });
            }
            b.wait();
        }
    }
    fn write_imm(&mut self, slot: u32, data: &[u8], imm: u32) -> Result<(), TransportError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        if data.len() > self.slot_bytes {
            return Err(TransportError::Protocol {
                peer: self.peer.clone(),
                dir: "to",
                what: format!(
                    "write of {} bytes into a {}-byte slot",
                    data.len(),
                    self.slot_bytes
                ),
            });
        }
        let due = (self.next % self.slots as u64) as u32;
        if slot != due || !self.slot_ready(slot as usize) {
            return Err(TransportError::Protocol {
                peer: self.peer.clone(),
                dir: "to",
                what: format!("write into slot {slot}, but slot {due} is the one acquired"),
            });
        }
        let off = slot as usize * self.stride;
        // The slot is within the staging region (slot < slots, len <= slot_bytes <= stride,
        // checked in `check_layout`), and no write of ours reads it now (`slot_ready`).
        debug_assert!(off + data.len() <= self.staging.len());
        // SAFETY: in bounds (above); the NIC only reads the staging region, and not this slot
        // until the write posted below.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.staging.as_mut_ptr().add(off), data.len());
        }
        let r = self.qp.post_write_imm(
            slot as u64,
            &self.staging,
            off,
            data.len(),
            self.remote_addr + off as u64,
            self.rkey,
            imm,
        );
        if let Err(e) = r {
            return Err(self.verbs_fail(e));
        }
        self.credited[slot as usize] = false;
        self.inflight[slot as usize] = true;
        self.posted_at[slot as usize] = Some(Instant::now());
        self.next += 1;
        self.sent += data.len() as u64;
        Ok(())
    }
    fn health(&mut self) -> Result<(), TransportError> {
        self.progress()?;
        // A write the NIC still has not completed after the link's timeout: the path
        // swallows it (the QP retries, by NCCL's defaults for minutes). This rank is a
        // sender blocked on that link, which is what the hang verdict needs to know.
        let now = Instant::now();
        if self
            .posted_at
            .iter()
            .zip(&self.inflight)
            .any(|(t, &f)| f && t.is_some_and(|t| now.duration_since(t) > self.timeout))
        {
            return Err(TransportError::Timeout {
                peer: self.peer.clone(),
                dir: "to",
            });
        }
        Ok(())
    }
    fn abandon(&mut self) {
        self.abandoned = true;
    }
    fn bytes_sent(&self) -> u64 {
        self.sent
    }
}

impl Drop for RdmaSend {
    fn drop(&mut self) {
        // Destroying a QP aborts writes it has not finished: wait (bounded) until the
        // receiver acknowledged them, then close the side connection.
        // An abandoned link (the run failed) has nothing worth waiting for: a write on a
        // broken path would only be acknowledged after the NIC's retries, or never.
        let wait = if self.abandoned {
            Duration::ZERO
        } else {
            self.timeout.min(Duration::from_secs(5))
        };
        let until = Instant::now() + wait;
        let mut b = Backoff(0);
        while self.inflight.iter().any(|&f| f) && Instant::now() < until {
            if self.progress().is_err() {
                break;
            }
            b.wait();
        }
        let _ = self.side.shutdown(Shutdown::Both);
    }
}

// ---------------------------------------------------------------- receiver

pub(crate) struct RdmaRecv {
    qp: Qp,
    cq: Cq,
    slots_mr: Mr,
    /// The zero-byte credit writes still need a valid local region for their (empty) list.
    credit_src: Mr,
    side: TcpStream,
    peer: String,
    /// (from, to, me): the ring link this QP carries, for completion errors.
    link: (u32, u32, u32),
    dev: String,
    slots: u32,
    stride: usize,
    credit_addr: u64,
    credit_rkey: u32,
    /// Completions seen so far; the k-th landed in slot `k % slots`.
    seen: u64,
    ready: VecDeque<Completion>,
    busy: Vec<bool>,
    credits_inflight: u32,
    error: Option<TransportError>,
    received: u64,
}

impl RdmaRecv {
    fn fail(&mut self, e: TransportError) -> TransportError {
        stick(&mut self.error, e)
    }

    fn verbs_fail(&mut self, e: VerbsError) -> TransportError {
        let e = verbs_closed(&self.peer, "from", e);
        self.fail(e)
    }

    fn progress(&mut self) -> Result<bool, TransportError> {
        let mut wcs = [Wc::default(); 16];
        let end = End {
            peer: &self.peer,
            dir: "from",
            link: self.link,
            dev: &self.dev,
        };
        let n = end.poll(&self.cq, &mut self.error, &mut wcs, receiver_op)?;
        for wc in &wcs[..n] {
            if wc.wr_id != WR_RECV {
                self.credits_inflight = self.credits_inflight.saturating_sub(1);
                continue;
            }
            let slot = (self.seen % self.slots as u64) as u32;
            self.seen += 1;
            if self.busy[slot as usize] {
                let peer = self.peer.clone();
                return Err(self.fail(TransportError::Protocol {
                    peer,
                    dir: "from",
                    what: format!("write into slot {slot} before its credit came back (overrun)"),
                }));
            }
            self.busy[slot as usize] = true;
            self.ready.push_back(Completion {
                slot,
                len: wc.byte_len as usize,
                imm: wc.imm.unwrap_or(0),
            });
            if let Err(e) = self.qp.post_recv(WR_RECV) {
                return Err(self.verbs_fail(e));
            }
        }
        Ok(n > 0)
    }
}

impl RecvLink for RdmaRecv {
    fn peer(&self) -> &str {
        &self.peer
    }
    fn poll(&mut self, deadline: Instant) -> Result<Completion, TransportError> {
        let mut b = Backoff(0);
        let mut last_side = Instant::now();
        loop {
            if let Some(c) = self.ready.pop_front() {
                self.received += c.len as u64;
                return Ok(c);
            }
            if self.progress()? {
                b = Backoff(0);
                continue;
            }
            if last_side.elapsed() > Duration::from_millis(2) {
                last_side = Instant::now();
                if let Some(why) = peer_gone(&self.side) {
                    // Chunks written before the close are delivered first.
                    self.progress()?;
                    if !self.ready.is_empty() {
                        continue;
                    }
                    let peer = self.peer.clone();
                    return Err(self.fail(TransportError::Closed {
                        peer,
                        dir: "from",
                        why,
                    }));
                }
            }
            if Instant::now() >= deadline {
                return Err(TransportError::Timeout {
                    peer: self.peer.clone(),
                    dir: "from",
                });
            }
            b.wait();
        }
    }
    fn consume(&mut self, c: &Completion, f: &mut dyn FnMut(&[u8])) -> Result<(), TransportError> {
        let s = c.slot as usize;
        if s >= self.slots as usize || !self.busy[s] || c.len > self.stride {
            return Err(TransportError::Protocol {
                peer: self.peer.clone(),
                dir: "from",
                what: format!("no landed chunk in slot {}", c.slot),
            });
        }
        let off = s * self.stride;
        // SAFETY: slot s lies in the region (s < slots, len <= stride, checked above). Its
        // write completed and its credit is not yet returned, so the sender may not write it
        // (an overrun is caught as a protocol error) while `f` reads it.
        let landed = unsafe { std::slice::from_raw_parts(self.slots_mr.as_ptr().add(off), c.len) };
        f(landed);
        self.busy[s] = false;
        // Keep the send queue within its depth: credits complete fast, but wait if needed.
        let mut b = Backoff(0);
        while self.credits_inflight >= self.slots + SPARE_WR / 2 {
            match self.progress() {
                Ok(_) => b.wait(),
                // The link is broken; the next poll reports it.
                Err(_) => return Ok(()),
            }
        }
        // A sender that finished needs no credit; a broken QP shows up in the next poll.
        if let Ok(()) = self.qp.post_write_imm(
            WR_CREDIT,
            &self.credit_src,
            0,
            0,
            self.credit_addr,
            self.credit_rkey,
            c.slot,
        ) {
            self.credits_inflight += 1;
        }
        Ok(())
    }
    fn health(&mut self) -> Result<(), TransportError> {
        self.progress().map(|_| ())
    }
    fn bytes_received(&self) -> u64 {
        self.received
    }
}

impl Drop for RdmaRecv {
    fn drop(&mut self) {
        let _ = self.side.shutdown(Shutdown::Both);
    }
}

// ---------------------------------------------------------------- setup

/// One open device port with the chosen GID: what every link of this rank is made on.
pub(crate) struct RdmaPort {
    pub settings: RdmaSettings,
    dev: Device,
    pd: Pd,
    pub info: PortInfo,
    pub gid: [u8; 16],
}

impl RdmaPort {
    /// Open the device and check the port is usable: ACTIVE, and a non-zero GID at the index
    /// on RoCE. Errors say which and what to check.
    pub fn open(settings: RdmaSettings) -> Result<RdmaPort, VerbsError> {
        let dev = Device::open(&settings.device, settings.port)?;
        let info = dev.query_port()?;
        let bad = |error: String, hint: &str| VerbsError {
            call: "ibv_query_port".into(),
            device: settings.device.clone(),
            port: settings.port,
            error,
            hint: Some(hint.into()),
        };
        if !info.active() {
            return Err(bad(
                format!("port state {} is not ACTIVE", info.state),
                "`fabprobe links` shows the port's state and physical state",
            ));
        }
        let gid = dev.query_gid(settings.gid_index)?;
        if info.link_layer == "Ethernet" && gid.iter().all(|&b| b == 0) {
            return Err(VerbsError {
                call: format!("ibv_query_gid(index {})", settings.gid_index),
                device: settings.device.clone(),
                port: settings.port,
                error: "the GID at this index is empty".into(),
                hint: Some(
                    "pick a populated RoCE v2 index from `fabprobe gids` (--gid-index or NCCL_IB_GID_INDEX)"
                        .into(),
                ),
            });
        }
        let pd = dev.alloc_pd()?;
        Ok(RdmaPort {
            settings,
            dev,
            pd,
            info,
            gid,
        })
    }

    /// `rxe0:1 gid 1`.
    pub fn label(&self) -> String {
        format!(
            "{}:{} gid {}",
            self.settings.device, self.settings.port, self.settings.gid_index
        )
    }

    fn params(&self, peer: Option<&PeerPort>, credits: bool) -> QpParams {
        qp_params(&self.settings, &self.info, &self.gid, peer, credits)
    }

    fn family(&self) -> &'static str {
        gid_family(self.info.link_layer, &self.gid)
    }

    /// A QP in INIT with its CQ and `recvs` receives posted.
    fn new_qp(&self, slots: usize) -> Result<(Qp, Cq, u32), VerbsError> {
        let depth = slots as u32 + SPARE_WR;
        let cq = self.dev.create_cq(2 * depth as i32)?;
        let qp = self.pd.create_rc_qp(&cq, depth, depth)?;
        qp.to_init(&self.params(None, false))?;
        for _ in 0..depth {
            qp.post_recv(WR_RECV)?;
        }
        let psn = fresh_psn(qp.qpn());
        Ok((qp, cq, psn))
    }

    fn endpoint(&self, qp: &Qp, psn: u32) -> Endpoint {
        Endpoint {
            qpn: qp.qpn(),
            psn,
            lid: self.info.lid,
            gid: self.gid,
        }
    }

    /// A mismatch between our port and a peer's, naming both ends; None when compatible.
    fn mismatch(
        &self,
        me: &str,
        peer: &str,
        peer_dev: &str,
        link_layer: &str,
        family: &str,
    ) -> Option<String> {
        let mine = format!("{me} {}", self.label());
        let theirs = format!("{peer} {peer_dev}");
        if link_layer != self.info.link_layer {
            return Some(format!(
                "link layer {} on {mine} but {link_layer} on {theirs}",
                self.info.link_layer
            ));
        }
        if family != self.family() {
            return Some(format!(
                "GID family {} on {mine} but {family} on {theirs} (hint: pick the same kind of GID index on both, `fabprobe gids`)",
                self.family()
            ));
        }
        None
    }
}

/// A 24-bit starting PSN that differs between QPs and runs.
fn fresh_psn(qpn: u32) -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    (t ^ qpn.wrapping_mul(2_654_435_761) ^ std::process::id()) & 0x00ff_ffff
}

/// Connect to the receiver's address `addr` for the endpoint exchange, again until
/// `deadline` (the receiver may not listen yet).
fn dial(addr: &str, peer: &str, deadline: Instant) -> Result<TcpStream, TransportError> {
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| setup_err(peer, &format!("resolving {addr}"), e))?
        .collect();
    let mut last = String::from("no address");
    let mut stream = None;
    'retry: while Instant::now() < deadline {
        for a in &addrs {
            let left = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1));
            match super::tcp::connect_not_self(a, left) {
                Ok(s) => {
                    stream = Some(s);
                    break 'retry;
                }
                Err(e) => last = e.to_string(),
            }
        }
        thread::sleep(Duration::from_millis(50));
    }
    stream.ok_or_else(|| {
        setup_err(
            peer,
            &format!("connecting to {addr} for the endpoint exchange"),
            last,
        )
    })
}

/// Open the sending end: connect to the receiver's advertised address, exchange endpoints.
#[allow(clippy::too_many_arguments)]
pub(crate) fn connect(
    port: &RdmaPort,
    addr: &str,
    peer: &str,
    me: &str,
    hello: (String, u32, u32, u32),
    slots: usize,
    deadline: Instant,
    timeout: Duration,
) -> Result<RdmaSend, TransportError> {
    let _ = me;
    let (token, from_rank, to_rank, channel) = hello;
    let verr = |e: VerbsError| setup_err(peer, "setting up the RDMA link", e);
    let (qp, cq, psn) = port.new_qp(slots).map_err(verr)?;
    let credit = port.pd.register(8, true).map_err(verr)?;
    let mut s = dial(addr, peer, deadline)?;
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(10));
    let _ = s.set_read_timeout(Some(left));
    let _ = s.set_write_timeout(Some(left));
    let _ = s.set_nodelay(true);
    let h = RdmaHello {
        version: RDMA_HS_VERSION,
        token,
        from_rank,
        to_rank,
        channel,
        device: port.label(),
        link_layer: port.info.link_layer.into(),
        gid_family: port.family().into(),
        mtu_bytes: port.info.mtu_bytes(),
        endpoint: port.endpoint(&qp, psn),
        credit_addr: credit.addr(),
        credit_rkey: credit.rkey(),
    };
    write_frame(&mut s, &h).map_err(|e| setup_err(peer, "sending the RDMA endpoint", e))?;
    let r: RdmaReply = read_frame_by(&mut s, Instant::now() + left)
        .map_err(|e| setup_err(peer, "reading the RDMA endpoint", e))?;
    if !r.ok {
        return Err(setup_err(peer, "the receiver refused the RDMA link", r.reason));
    }
    let ep = r
        .endpoint
        .clone()
        .ok_or_else(|| setup_err(peer, "reading the RDMA endpoint", "no endpoint in the reply"))?;
    let lay = check_layout(&r, slots).map_err(|e| setup_err(peer, "reading the RDMA endpoint", e))?;
    let remote = PeerPort {
        mtu_bytes: r.mtu_bytes,
        gid: ep.gid,
    };
    let p = port.params(Some(&remote), false);
    qp.to_rtr(&p, &ep).map_err(verr)?;
    qp.to_rts(&p, psn).map_err(verr)?;
    let staging = port.pd.register(lay.region, false).map_err(verr)?;
    let _ = s.set_read_timeout(None);
    Ok(RdmaSend {
        qp,
        cq,
        staging,
        _credit: credit,
        side: s,
        peer: peer.into(),
        link: (from_rank, to_rank, from_rank),
        dev: port.label(),
        slots: lay.slots,
        slot_bytes: lay.slot_bytes,
        stride: lay.stride,
        remote_addr: r.addr,
        rkey: r.rkey,
        next: 0,
        credited: vec![true; lay.slots as usize],
        inflight: vec![false; lay.slots as usize],
        timeout,
        error: None,
        sent: 0,
        abandoned: false,
        posted_at: vec![None; lay.slots as usize],
    })
}

/// Accepted links and refusals, as in the TCP transport.
pub(crate) type AcceptResult = accept::AcceptResult<RdmaHello, RdmaRecv>;

impl accept::Hello for RdmaHello {
    fn token(&self) -> &str {
        &self.token
    }
    fn sender(&self) -> u32 {
        self.from_rank
    }
    fn receiver(&self) -> u32 {
        self.to_rank
    }
    fn channel(&self) -> u32 {
        self.channel
    }
}

/// What taking an RDMA link means: check the peer's port against ours, make the QP and the
/// slots, answer with our endpoint.
struct RdmaAdmit<'a> {
    port: &'a RdmaPort,
    spec: &'a AcceptSpec<'a>,
    /// This rank's name, for mismatch errors that name both ends.
    me: String,
    /// Distance between slots (slot_bytes rounded up to 8, so every slot is f32-aligned).
    stride: usize,
    /// `slots * stride`, checked.
    region: usize,
}

impl RdmaAdmit<'_> {
    fn reply(&self, reason: &str) -> RdmaReply {
        RdmaReply {
            ok: false,
            reason: reason.into(),
            device: self.port.label(),
            endpoint: None,
            slots: 0,
            slot_bytes: 0,
            stride: 0,
            addr: 0,
            rkey: 0,
            mtu_bytes: 0,
        }
    }

    fn make(&self, s: &mut TcpStream, h: &RdmaHello) -> Result<RdmaRecv, VerbsError> {
        let (port, spec) = (self.port, self.spec);
        let (qp, cq, psn) = port.new_qp(spec.slots)?;
        let slots_mr = port.pd.register(self.region, true)?;
        let credit_src = port.pd.register(8, false)?;
        let p = port.params(Some(&h.port_attrs()), true);
        qp.to_rtr(&p, &h.endpoint)?;
        qp.to_rts(&p, psn)?;
        let reply = RdmaReply {
            ok: true,
            endpoint: Some(port.endpoint(&qp, psn)),
            slots: spec.slots as u32,
            slot_bytes: spec.slot_bytes as u64,
            stride: self.stride as u64,
            addr: slots_mr.addr(),
            rkey: slots_mr.rkey(),
            mtu_bytes: port.info.mtu_bytes(),
            ..self.reply("")
        };
        let io = |call: &str, e: io::Error| VerbsError {
            call: call.into(),
            device: port.settings.device.clone(),
            port: port.settings.port,
            error: e.to_string(),
            hint: None,
        };
        write_frame(s, &reply).map_err(|e| io("endpoint exchange", e))?;
        let side = s.try_clone().map_err(|e| io("dup", e))?;
        let _ = side.set_read_timeout(None);
        let to_rank = spec.me;
        Ok(RdmaRecv {
            qp,
            cq,
            slots_mr,
            credit_src,
            side,
            peer: (spec.peer_name)(h.from_rank),
            link: (h.from_rank, to_rank, to_rank),
            dev: port.label(),
            slots: spec.slots as u32,
            stride: self.stride,
            credit_addr: h.credit_addr,
            credit_rkey: h.credit_rkey,
            seen: 0,
            ready: VecDeque::new(),
            busy: vec![false; spec.slots],
            credits_inflight: 0,
            error: None,
            received: 0,
        })
    }
}

impl accept::Admit for RdmaAdmit<'_> {
    type Hello = RdmaHello;
    type Link = RdmaRecv;
    fn label(&self) -> &'static str {
        "RDMA link"
    }
    fn check(&self, h: &RdmaHello) -> Result<(), Refused> {
        if h.version != RDMA_HS_VERSION {
            return Err(Refused::Stray(format!(
                "endpoint exchange version {} (this build speaks {RDMA_HS_VERSION})",
                h.version
            )));
        }
        let from = (self.spec.peer_name)(h.from_rank);
        let mismatch = self
            .port
            .mismatch(&self.me, &from, &h.device, &h.link_layer, &h.gid_family);
        match mismatch {
            // A mismatch is a fault of the pair, not a stray connection: stop here.
            Some(reason) => Err(Refused::Fatal {
                error: setup_err(&from, "matching the RDMA ports", &reason),
                reason,
            }),
            None => Ok(()),
        }
    }
    fn refuse(&self, s: &mut TcpStream, reason: &str) {
        let _ = write_frame(s, &self.reply(reason));
    }
    fn take(&self, mut s: TcpStream, h: &RdmaHello) -> Result<RdmaRecv, Refused> {
        let _ = s.set_nodelay(true);
        let from = (self.spec.peer_name)(h.from_rank);
        self.make(&mut s, h).map_err(|e| {
            let reason = e.to_string();
            Refused::Fatal {
                error: setup_err(&from, "setting up the RDMA link", e),
                reason,
            }
        })
    }
}

/// Accept exactly the links in `spec.expect` on `listener` by `spec.deadline`: the TCP data
/// plane's machinery ([`accept::accept`]: one poll thread, a deadline per hello, a cap on
/// waiting connections, a pause when out of file descriptors), with RDMA endpoints.
pub(crate) fn accept(port: &RdmaPort, listener: &TcpListener, spec: &AcceptSpec) -> AcceptResult {
    let stride = spec.slot_bytes.div_ceil(8).saturating_mul(8);
    let Some(region) = spec.slots.checked_mul(stride).filter(|_| spec.slots > 0) else {
        let e = setup_err(
            "RDMA link listener",
            "sizing the slots",
            format!(
                "{} slots of {} bytes do not fit in memory",
                spec.slots, spec.slot_bytes
            ),
        );
        return Err((e, Vec::new()));
    };
    let admit = RdmaAdmit {
        port,
        spec,
        me: (spec.peer_name)(spec.me),
        stride,
        region,
    };
    accept::accept(listener, spec, &admit)
}

/// The RDMA fabric of one rank: an open port and the listener for endpoint exchanges.
pub(crate) struct RdmaFabric {
    port: RdmaPort,
    listener: TcpListener,
    address: String,
}

impl RdmaFabric {
    /// Listen on `ip` (port chosen by the kernel) with an open RDMA port.
    pub fn bind(ip: std::net::IpAddr, port: RdmaPort) -> io::Result<RdmaFabric> {
        RdmaFabric::from_listener(TcpListener::bind(SocketAddr::new(ip, 0))?, port)
    }

    pub(crate) fn from_listener(listener: TcpListener, port: RdmaPort) -> io::Result<RdmaFabric> {
        let address = listener.local_addr()?.to_string();
        Ok(RdmaFabric {
            port,
            listener,
            address,
        })
    }

}

impl Fabric for RdmaFabric {
    fn transport(&self) -> &'static str {
        "rdma"
    }
    fn address(&self) -> String {
        self.address.clone()
    }
    fn open(&self, req: &LinkRequest) -> Result<OpenLinks, TransportError> {
        let name = |r: u32| peer_name(req.table, r);
        let rank_ip = |r: u32| {
            req.table
                .iter()
                .find(|i| i.rank == r)
                .and_then(|i| i.address.parse::<SocketAddr>().ok())
                .map(|a| a.ip())
        };
        let spec = AcceptSpec {
            token: req.token,
            me: req.me,
            expect: req.recvs,
            slots: req.slots,
            slot_bytes: req.slot_bytes,
            deadline: req.deadline,
            timeout: req.timeout,
            peer_name: &name,
            rank_ip: &rank_ip,
        };
        let (sends, accepted) = thread::scope(|sc| {
            let acc = sc.spawn(|| accept(&self.port, &self.listener, &spec));
            let sends = self.send_links(req);
            (sends, acc.join())
        });
        let (got, rejected) = match accepted {
            Ok(Ok(x)) => x,
            Ok(Err((e, _))) => return Err(e),
            Err(_) => return Err(setup_err("-", "accepting RDMA links", "panicked")),
        };
        let sends = sends?;
        let recvs = recv_links(req, got)?;
        Ok(OpenLinks {
            sends,
            recvs,
            rejected,
        })
    }
}

impl RdmaFabric {
    /// Connect this rank's sending links of `req`: each peer must offer rdma.
    fn send_links(&self, req: &LinkRequest) -> Result<Vec<Box<dyn SendLink>>, TransportError> {
        let name = |r: u32| peer_name(req.table, r);
        let me = name(req.me);
        req.sends
            .iter()
            .map(|&(peer, tag)| {
                let info =
                    req.table.iter().find(|i| i.rank == peer).ok_or_else(|| {
                        setup_err(&name(peer), "finding the data address", "not in the table")
                    })?;
                if info.transport != "rdma" {
                    return Err(setup_err(
                        &name(peer),
                        "opening an RDMA link",
                        format!("that rank runs the {} transport", info.transport),
                    ));
                }
                connect(
                    &self.port,
                    &info.address,
                    &name(peer),
                    &me,
                    (req.token.to_string(), req.me, peer, tag),
                    req.slots,
                    req.deadline,
                    req.timeout,
                )
                .map(|s| Box::new(s) as Box<dyn SendLink>)
            })
            .collect()
    }
}

/// The receiving links of `req`, in its order, from the links accepted (`got`).
fn recv_links(
    req: &LinkRequest,
    got: Vec<accept::Accepted<RdmaHello, RdmaRecv>>,
) -> Result<Vec<Box<dyn RecvLink>>, TransportError> {
    let mut got: Vec<Option<accept::Accepted<RdmaHello, RdmaRecv>>> = got.into_iter().map(Some).collect();
    let mut recvs: Vec<Box<dyn RecvLink>> = Vec::new();
    for &(peer, tag) in req.recvs {
        let accept::Accepted { link, .. } = got
            .iter_mut()
            .find(|a| {
                a.as_ref()
                    .is_some_and(|a| a.handshake.from_rank == peer && a.handshake.channel == tag)
            })
            .and_then(Option::take)
            .ok_or_else(|| {
                setup_err(
                    &peer_name(req.table, peer),
                    "accepting",
                    format!("link {tag} missing after accept"),
                )
            })?;
        recvs.push(Box::new(link));
    }
    Ok(recvs)
}

/// `--transport auto`: one listening address for both transports; the rank offers rdma (its
/// table entry says `rdma`) and the links are RDMA when every rank of the world offers it
/// (the coordinator's `shared_transport`), else TCP for everyone (all decide the same). The
/// report's rank rows show what each rank offered: the reason when TCP was chosen.
pub(crate) struct AutoFabric {
    rdma: RdmaFabric,
    tcp: super::tcp::TcpFabric,
    chosen: std::sync::OnceLock<&'static str>,
}

impl AutoFabric {
    pub fn new(rdma: RdmaFabric) -> io::Result<AutoFabric> {
        let tcp = super::tcp::TcpFabric::from_listener(rdma.listener.try_clone()?)?;
        Ok(AutoFabric {
            rdma,
            tcp,
            chosen: std::sync::OnceLock::new(),
        })
    }
}

/// Whether every rank of the world offers rdma, as the coordinator says: every rank decides
/// alike, whatever part of the table it holds.
pub(crate) fn all_offer_rdma(shared_transport: Option<&str>) -> bool {
    shared_transport == Some("rdma")
}

impl Fabric for AutoFabric {
    /// Before the links open: what this rank offers (`rdma`); after: what was used.
    fn transport(&self) -> &'static str {
        self.chosen.get().copied().unwrap_or("rdma")
    }
    fn address(&self) -> String {
        self.rdma.address()
    }
    fn open(&self, req: &LinkRequest) -> Result<OpenLinks, TransportError> {
        let use_rdma = all_offer_rdma(req.shared_transport);
        let _ = self.chosen.set(if use_rdma { "rdma" } else { "tcp" });
        if use_rdma {
            self.rdma.open(req)
        } else {
            self.tcp.open(req)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_env_sets_the_qp_knobs_with_nccl_defaults() {
        let s = RdmaSettings::with_nccl_env("mlx5_0", 1, 3, |_| None);
        assert_eq!(
            (s.timeout, s.retry_cnt, s.traffic_class, s.service_level),
            (20, 7, 0, 0)
        );
        let env = |k: &str| match k {
            "NCCL_IB_TIMEOUT" => Some("22".to_string()),
            "NCCL_IB_RETRY_CNT" => Some("9".to_string()),
            "NCCL_IB_TC" => Some("106".to_string()),
            "NCCL_IB_SL" => Some("0x3".to_string()),
            _ => None,
        };
        let s = RdmaSettings::with_nccl_env("mlx5_0", 1, 3, env);
        // retry_cnt is a 3-bit field: 9 is clamped to 7.
        assert_eq!(
            (s.timeout, s.retry_cnt, s.traffic_class, s.service_level),
            (22, 7, 106, 3)
        );
    }

    #[test]
    fn gid_families() {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&[198, 18, 5, 10]);
        assert_eq!(gid_family("Ethernet", &g), "ipv4");
        g[0] = 0xfe;
        g[1] = 0x80;
        assert_eq!(gid_family("Ethernet", &g), "ipv6");
        assert_eq!(gid_family("InfiniBand", &g), "ib");
    }

    #[test]
    fn nccl_env_sets_pkey_and_fifo_tc() {
        let s = RdmaSettings::with_nccl_env("mlx5_0", 1, 3, |_| None);
        assert_eq!((s.pkey_index, s.fifo_tc), (0, None));
        let env = |k: &str| match k {
            "NCCL_IB_PKEY" => Some("2".to_string()),
            "NCCL_IB_FIFO_TC" => Some("184".to_string()),
            _ => None,
        };
        let s = RdmaSettings::with_nccl_env("mlx5_0", 1, 3, env);
        assert_eq!((s.pkey_index, s.fifo_tc), (2, Some(184)));
        let s =
            RdmaSettings::with_nccl_env("mlx5_0", 1, 3, |k| (k == "NCCL_IB_FIFO_TC").then(|| "-1".into()));
        assert_eq!(s.fifo_tc, None);
    }

    fn port(link_layer: &'static str, mtu: u32) -> PortInfo {
        PortInfo {
            state: 4,
            active_mtu: mtu,
            link_layer,
            lid: 7,
            gid_tbl_len: 16,
            grh_required: false,
        }
    }

    /// An IB GID with the local subnet `subnet` and FLID `flid`.
    fn ib_gid(subnet: u16, flid: u16) -> [u8; 16] {
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        g[4..6].copy_from_slice(&flid.to_be_bytes());
        g[6..8].copy_from_slice(&subnet.to_be_bytes());
        g[15] = 1;
        g
    }

    #[test]
    fn qp_attributes_follow_nccl() {
        let env = |k: &str| match k {
            "NCCL_IB_TC" => Some("106".to_string()),
            "NCCL_IB_FIFO_TC" => Some("184".to_string()),
            "NCCL_IB_PKEY" => Some("1".to_string()),
            _ => None,
        };
        let s = RdmaSettings::with_nccl_env("mlx5_0", 1, 3, env);
        let peer = |mtu_bytes, gid| PeerPort { mtu_bytes, gid };
        let roce = port("Ethernet", 5);
        let g = [0u8; 16];
        // Path MTU: the smaller of both ends', whichever is smaller.
        let p = qp_params(&s, &roce, &g, Some(&peer(1024, g)), false);
        assert_eq!(
            (p.path_mtu, p.global, p.traffic_class, p.pkey_index),
            (3, true, 106, 1)
        );
        let p = qp_params(&s, &port("Ethernet", 3), &g, Some(&peer(4096, g)), false);
        assert_eq!(p.path_mtu, 3);
        // The credit writes take NCCL_IB_FIFO_TC on RoCE.
        assert_eq!(
            qp_params(&s, &roce, &g, Some(&peer(4096, g)), true).traffic_class,
            184
        );
        // IB in one subnet: no GRH, the peer's LID; FIFO TC is a RoCE knob.
        let ib = port("InfiniBand", 5);
        let p = qp_params(&s, &ib, &ib_gid(1, 0), Some(&peer(4096, ib_gid(1, 0))), true);
        assert_eq!((p.global, p.dlid, p.traffic_class), (false, None, 106));
        // IB across subnets: GRH, addressed by the peer's FLID (its LID when it has none).
        let p = qp_params(
            &s,
            &ib,
            &ib_gid(1, 0),
            Some(&peer(4096, ib_gid(2, 0x4321))),
            false,
        );
        assert_eq!((p.global, p.dlid), (true, Some(0x4321)));
        let p = qp_params(&s, &ib, &ib_gid(1, 0), Some(&peer(4096, ib_gid(2, 0))), false);
        assert_eq!((p.global, p.dlid), (true, None));
        // A port that requires a GRH gets one in its own subnet too.
        let grh = PortInfo {
            grh_required: true,
            ..port("InfiniBand", 5)
        };
        let p = qp_params(&s, &grh, &ib_gid(1, 0), Some(&peer(4096, ib_gid(1, 0))), false);
        assert_eq!((p.global, p.dlid), (true, None));
    }

    #[test]
    fn error_completions_are_named_from_wr_id_not_opcode() {
        // A completion in error carries no valid opcode: here one that reads as a receive.
        let bad = |wr_id| Wc {
            wr_id,
            status: 12,
            opcode: 128,
            ..Wc::default()
        };
        assert_eq!(sender_op(&bad(3)), "an RDMA write");
        assert_eq!(sender_op(&bad(WR_RECV)), "a credit");
        assert_eq!(receiver_op(&bad(WR_CREDIT)), "a credit");
        assert_eq!(receiver_op(&bad(WR_RECV)), "a chunk");
        let ok_recv = Wc {
            opcode: 0,
            ..bad(WR_RECV)
        };
        assert_eq!(receiver_op(&ok_recv), "a chunk");
    }

    fn reply(slots: u32, slot_bytes: u64, stride: u64, addr: u64) -> RdmaReply {
        RdmaReply {
            ok: true,
            reason: String::new(),
            device: "rxe0:1 gid 1".into(),
            endpoint: None,
            slots,
            slot_bytes,
            stride,
            addr,
            rkey: 1,
            mtu_bytes: 1024,
        }
    }

    #[test]
    fn peer_sizes_are_bounded_with_checked_arithmetic() {
        let ok = check_layout(&reply(4, 100, 104, 0x1000), 4).unwrap();
        assert_eq!(
            (ok.slots, ok.slot_bytes, ok.stride, ok.region),
            (4, 100, 104, 416)
        );
        for (r, want) in [
            // slots * stride wraps u64 (and usize): an error, not a panic or a tiny region.
            (reply(4, 64, 1 << 62, 0), "stride"),
            (reply(4, 64, u64::MAX - 7, 0), "stride"),
            (reply(0, 64, 64, 0), "want 1..=4 slots"),
            (reply(5, 64, 64, 0), "want 1..=4 slots"),
            (reply(u32::MAX, 64, 64, 0), "slots"),
            (reply(4, 0, 8, 0), "bytes a slot"),
            (reply(4, u64::MAX, u64::MAX, 0), "bytes a slot"),
            (reply(4, 64, 60, 0), "stride"),
            (reply(4, 64, 68, 0), "stride"),
            // The region would run past the end of the address space.
            (reply(4, 64, 64, u64::MAX - 100), "wraps"),
        ] {
            let e = check_layout(&r, 4).expect_err(&format!("{r:?} taken"));
            assert!(
                e.contains(want) && e.contains(&format!("{} slots", r.slots)),
                "{e}"
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn check_layout_never_panics_and_fits(
            slots in proptest::prelude::any::<u32>(),
            slot_bytes in proptest::prelude::any::<u64>(),
            stride in proptest::prelude::any::<u64>(),
            addr in proptest::prelude::any::<u64>(),
            asked in 0usize..2048,
        ) {
            if let Ok(l) = check_layout(&reply(slots, slot_bytes, stride, addr), asked) {
                proptest::prop_assert!(l.slots as usize <= asked && l.slot_bytes <= l.stride);
                proptest::prop_assert_eq!(l.region as u64, u64::from(l.slots) * l.stride as u64);
                proptest::prop_assert!(addr.checked_add(l.region as u64).is_some());
                proptest::prop_assert!(l.slot_bytes as u64 <= MAX_SLOT_BYTES);
            }
        }
    }

    #[test]
    fn backoff_sleeps_are_bounded() {
        let t0 = Instant::now();
        let mut b = Backoff(0);
        for _ in 0..100 {
            b.wait();
        }
        assert!(t0.elapsed() < Duration::from_secs(1));
    }

    /// The conformance suite on a real device: both ends on one port (rxe loops a
    /// device's own traffic back), set by `FABPROBE_RDMA_TEST_DEVICE=rxe0:1:1`
    /// (device:port:gid index). Ignored on the host, so they count where they really run:
    /// the VM lab runs them (`--ignored`) inside a Soft-RoCE VM (tests/vm_rdma.rs).
    mod conformance_on_a_device {
        use super::*;
        use crate::ring::collective::transport::conformance::{self as c, Pair};

        /// What rank 1 expects here: token `t`, every source taken as the rank's own.
        fn spec<'a>(
            expect: &'a [(u32, u32)],
            slots: usize,
            slot_bytes: usize,
            deadline: Instant,
        ) -> AcceptSpec<'a> {
            AcceptSpec {
                token: "t",
                me: 1,
                expect,
                slots,
                slot_bytes,
                deadline,
                timeout: Duration::from_secs(5),
                peer_name: &|r| format!("rank {r}"),
                rank_ip: &|_| None,
            }
        }

        fn device() -> (String, u8, u8) {
            let spec = std::env::var("FABPROBE_RDMA_TEST_DEVICE")
                .expect("FABPROBE_RDMA_TEST_DEVICE (device:port:gid) is not set: the VM lab runs these");
            let mut it = spec.split(':');
            let mut next = || it.next().unwrap_or_default().to_string();
            let (d, p, g) = (next(), next(), next());
            (d, p.parse().expect("port"), g.parse().expect("gid index"))
        }

        /// An idle connection (a port scanner) and a slow dripper on the exchange port
        /// neither delay the real peer nor get it named.
        #[test]
        #[ignore = "needs an RDMA device: the VM lab runs it (tests/vm_rdma.rs)"]
        fn idle_connections_do_not_delay_the_exchange() {
            let (dev, port_no, gid) = device();
            let settings = RdmaSettings::with_nccl_env(&dev, port_no, gid, |_| None);
            let p = RdmaPort::open(settings.clone()).unwrap();
            let q = RdmaPort::open(settings).unwrap();
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let t0 = Instant::now();
            let deadline = t0 + Duration::from_secs(8);
            // Idle: connected, never a byte (the old exchange read each for up to 5 s).
            let idle: Vec<TcpStream> = (0..20).map(|_| TcpStream::connect(addr).unwrap()).collect();
            let t = thread::spawn(move || {
                thread::sleep(Duration::from_millis(100));
                connect(
                    &q,
                    &addr.to_string(),
                    "rank 1",
                    "rank 0",
                    ("t".into(), 0, 1, 0),
                    2,
                    deadline,
                    Duration::from_secs(5),
                )
                .map_err(|e| e.to_string())
                .map(|s| (s, q))
            });
            let (got, _rej) = accept(&p, &l, &spec(&[(0, 0)], 2, 64, deadline))
                .map_err(|(e, rej)| format!("{e} {rej:?}"))
                .unwrap();
            let took = t0.elapsed();
            assert_eq!(got.len(), 1);
            assert!(took < Duration::from_secs(2), "the exchange took {took:?}");
            let (_s, _q) = t.join().unwrap().unwrap();
            drop(idle);
            // With no real peer, the error names the missing rank and the idle sources, and
            // returns at the deadline (not 5 s per idle connection).
            let idle: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(addr).unwrap()).collect();
            let t0 = Instant::now();
            let (e, rej) = accept(&p, &l, &spec(&[(0, 0)], 2, 64, t0 + Duration::from_millis(1500)))
                .err()
                .unwrap();
            assert!(t0.elapsed() < Duration::from_millis(2500), "{:?}", t0.elapsed());
            let e = e.to_string();
            assert!(
                e.contains("rank 0 channel 0")
                    && e.contains("3 foreign connection(s) refused (127.0.0.1: 3)"),
                "{e}"
            );
            assert!(
                rej.iter()
                    .any(|r| r.starts_with("RDMA link from 127.0.0.1: 3 connections refused")),
                "{rej:?}"
            );
            drop(idle);
        }

        fn factory() -> impl Fn(usize, usize) -> Pair {
            let (dev, port, gid) = device();
            move |slots: usize, slot_bytes: usize| -> Pair {
                let settings = RdmaSettings::with_nccl_env(&dev, port, gid, |_| None);
                let p = RdmaPort::open(settings.clone()).unwrap();
                let q = RdmaPort::open(settings).unwrap();
                let l = TcpListener::bind("127.0.0.1:0").unwrap();
                let addr = l.local_addr().unwrap().to_string();
                let deadline = Instant::now() + Duration::from_secs(10);
                let t = thread::spawn(move || {
                    connect(
                        &q,
                        &addr,
                        "rank 1",
                        "rank 0",
                        ("t".into(), 0, 1, 0),
                        slots,
                        deadline,
                        Duration::from_secs(5),
                    )
                    .map_err(|e| e.to_string())
                    .map(|s| (s, q))
                });
                let (mut got, rej) = accept(&p, &l, &spec(&[(0, 0)], slots, slot_bytes, deadline))
                    .map_err(|(e, _)| e.to_string())
                    .unwrap();
                assert!(rej.is_empty(), "{rej:?}");
                let (s, _q) = t.join().unwrap().unwrap();
                (Box::new(s), Box::new(got.remove(0).link))
            }
        }

        macro_rules! on_device {
            ($($name:ident),*) => {$(
                #[test]
                #[ignore = "needs an RDMA device: the VM lab runs it (tests/vm_rdma.rs)"]
                fn $name() {
                    c::$name(factory())
                }
            )*};
        }

        on_device!(
            delivers_in_order_with_credit_reuse,
            no_overrun_without_credits,
            poll_times_out_when_idle,
            oversized_write_is_refused,
            sender_death_is_seen,
            receiver_death_is_seen,
            empty_write_is_a_completion,
            streams_bulk_data
        );
    }
}
