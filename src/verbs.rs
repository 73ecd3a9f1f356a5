//! A small, owned layer over libibverbs for the RDMA ring (feature `rdma`).
//!
//! The `ibverbs` crate's safe API ties every object to a borrowed context and only knows
//! port 1; it has no RDMA Write with immediate and no way to set the QP attributes NCCL sets
//! (path MTU, timeout, retry counts, traffic class, service level, GID index per QP). So this
//! module calls `ibverbs-sys` directly, and keeps that in one place: each object owns its
//! handle and an `Arc` of what it was created from, so destruction order is always QP, then
//! CQ and MR, then PD, then the device context, whichever is dropped first by the caller.
//!
//! This is hand-written `unsafe` by nature (every verb is a C call on raw handles), kept to
//! this module: the `ibverbs` crate's safe layer lacks what the ring needs (above), and no
//! other well-kept crate wraps libibverbs.
//!
//! Every failing call is an [`VerbsError`] naming the verbs call, the device and port, and
//! what a person should check; callers add the peer.
//!
//! Thread safety: libibverbs documents every verb as thread-safe (providers lock their
//! queues), so the handles may move between threads (`Send`) and be shared (`Sync`). Posting
//! to one QP from two threads is still serialised by the provider.

use std::ffi::CStr;
use std::fmt;
use std::sync::Arc;

use ibverbs_sys as ffi;
use thiserror::Error;

/// A failed verbs call: which call, on which device and port, the OS error, and a hint.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("{call}{} failed: {error}{}", on_text(.device, *.port), hint_text(.hint))]
pub(crate) struct VerbsError {
    pub call: String,
    pub device: String,
    pub port: u8,
    pub error: String,
    pub hint: Option<String>,
}

/// ` on mlx5_0:1`; nothing for calls on no device (`ibv_get_device_list`, device "-").
fn on_text(device: &str, port: u8) -> String {
    if device == "-" || device.is_empty() {
        String::new()
    } else {
        format!(" on {device}:{port}")
    }
}

fn hint_text(h: &Option<String>) -> String {
    h.as_ref().map(|h| format!("; hint: {h}")).unwrap_or_default()
}

fn errno_text(e: i32) -> String {
    std::io::Error::from_raw_os_error(e).to_string()
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The hint a person can act on for a failed call and errno.
fn hint_for(call: &str, errno: i32) -> Option<String> {
    match (call, errno) {
        ("ibv_get_device_list", libc::ENOSYS) => Some(
            "this kernel has no RDMA support (no ib_uverbs); use --transport tcp".into(),
        ),
        ("ibv_open_device", libc::EACCES | libc::EPERM) => Some(
            "no permission on /dev/infiniband/uverbs*; in containers map /dev/infiniband".into(),
        ),
        ("ibv_reg_mr", libc::ENOMEM | libc::EPERM) => Some(
            "the locked-memory limit is too small: raise `ulimit -l` (memlock) for this process".into(),
        ),
        (c, libc::EINVAL) if c.starts_with("ibv_modify_qp") => Some(
            "an attribute the port refuses: the GID index (set NCCL_IB_GID_INDEX=-1 or --gid-index to a RoCE v2 entry of `fabprobe gids`), the MTU or the port".into(),
        ),
        (c, libc::ETIMEDOUT) if c.starts_with("ibv_modify_qp") => Some(
            "the address vector is unusable: a link-local or wrong GID, or the two NICs are on different rails".into(),
        ),
        (_, libc::ENOMEM) => Some("the device ran out of resources (QPs, CQ entries, pinned memory)".into()),
        _ => None,
    }
}

fn err(call: &str, device: &str, port: u8, errno: i32) -> VerbsError {
    VerbsError {
        call: call.into(),
        device: device.into(),
        port,
        error: errno_text(errno),
        hint: hint_for(call, errno),
    }
}

/// The names of the RDMA devices libibverbs can open. ENOSYS (a kernel without RDMA) and an
/// empty list are both answers the caller words for the user.
pub(crate) fn device_names() -> Result<Vec<String>, VerbsError> {
    let mut n: i32 = 0;
    // SAFETY: ibv_get_device_list writes the count into n and returns a NULL-terminated array
    // (or NULL with errno); we free it with ibv_free_device_list below.
    let list = unsafe { ffi::ibv_get_device_list(&mut n) };
    if list.is_null() {
        return Err(err("ibv_get_device_list", "-", 0, last_errno()));
    }
    let mut names = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: i < n, the array holds n valid device pointers.
        let dev = unsafe { *list.add(i) };
        // SAFETY: dev is a valid device from the list; the name is a NUL-terminated string
        // owned by the device, copied before the list is freed.
        let name = unsafe { CStr::from_ptr(ffi::ibv_get_device_name(dev)) };
        names.push(name.to_string_lossy().into_owned());
    }
    // SAFETY: list came from ibv_get_device_list and is freed once.
    unsafe { ffi::ibv_free_device_list(list) };
    Ok(names)
}

/// `IBV_QPF_GRH_REQUIRED` in `ibv_port_attr.flags`.
const GRH_REQUIRED: u8 = 1;

/// What a port reports (`ibv_query_port`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PortInfo {
    /// `IBV_PORT_ACTIVE` is 4.
    pub state: u32,
    /// The active MTU as the enum (1 = 256 ... 5 = 4096).
    pub active_mtu: u32,
    /// `InfiniBand`, `Ethernet` or `Unknown`.
    pub link_layer: &'static str,
    pub lid: u16,
    pub gid_tbl_len: i32,
    /// `IBV_QPF_GRH_REQUIRED` in the port's flags: every QP on it needs a GRH. The classic
    /// `ibv_query_port` entry may leave the flags unset (read as false).
    pub grh_required: bool,
}

impl PortInfo {
    pub fn active(&self) -> bool {
        self.state == ffi::ibv_port_state::IBV_PORT_ACTIVE
    }
    pub(crate) fn mtu_bytes(&self) -> u32 {
        mtu_bytes(self.active_mtu)
    }
}

/// The MTU enum (1 = 256 ... 5 = 4096) for a size in bytes; None for anything else.
pub(crate) fn mtu_enum(bytes: u32) -> Option<u32> {
    (1..=5).find(|&m| mtu_bytes(m) == bytes)
}

/// `IBV_MTU_256` (1) ... `IBV_MTU_4096` (5) in bytes; 0 for anything else.
pub(crate) fn mtu_bytes(mtu: u32) -> u32 {
    match mtu {
        1..=5 => 128 << mtu,
        _ => 0,
    }
}

struct CtxInner {
    ctx: *mut ffi::ibv_context,
    name: String,
}

// SAFETY: libibverbs contexts are thread-safe (module comment).
unsafe impl Send for CtxInner {}
// SAFETY: as above.
unsafe impl Sync for CtxInner {}

impl Drop for CtxInner {
    fn drop(&mut self) {
        // SAFETY: ctx came from ibv_open_device; every child object holds an Arc of this, so
        // none is alive now.
        unsafe { ffi::ibv_close_device(self.ctx) };
    }
}

/// An open device, used through one port.
#[derive(Clone)]
pub(crate) struct Device {
    inner: Arc<CtxInner>,
    pub port: u8,
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.inner.name, self.port)
    }
}

impl Device {
    /// Open `name` for use through `port`.
    pub fn open(name: &str, port: u8) -> Result<Device, VerbsError> {
        let mut n: i32 = 0;
        // SAFETY: as in device_names.
        let list = unsafe { ffi::ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Err(err("ibv_get_device_list", name, port, last_errno()));
        }
        let mut found = std::ptr::null_mut();
        for i in 0..n.max(0) as usize {
            // SAFETY: i < n; the name pointer is valid while the list is.
            let dev = unsafe { *list.add(i) };
            // SAFETY: dev is an entry of the live list; the name is a C string it owns.
            let dn = unsafe { CStr::from_ptr(ffi::ibv_get_device_name(dev)) };
            if dn.to_bytes() == name.as_bytes() {
                found = dev;
                break;
            }
        }
        let ctx = if found.is_null() {
            std::ptr::null_mut()
        } else {
            // SAFETY: found is a device of the live list; ibv_open_device keeps its own
            // reference, so freeing the list afterwards is allowed (libibverbs man page).
            unsafe { ffi::ibv_open_device(found) }
        };
        let errno = last_errno();
        // SAFETY: list from ibv_get_device_list, freed once.
        unsafe { ffi::ibv_free_device_list(list) };
        if found.is_null() {
            return Err(VerbsError {
                call: "ibv_get_device_list".into(),
                device: name.into(),
                port,
                error: "no such device".into(),
                hint: Some("`fabprobe links` lists the RDMA devices of this host".into()),
            });
        }
        if ctx.is_null() {
            return Err(err("ibv_open_device", name, port, errno));
        }
        Ok(Device {
            inner: Arc::new(CtxInner {
                ctx,
                name: name.into(),
            }),
            port,
        })
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    fn err(&self, call: &str, errno: i32) -> VerbsError {
        err(call, &self.inner.name, self.port, errno)
    }

    pub(crate) fn query_port(&self) -> Result<PortInfo, VerbsError> {
        let mut a = ffi::ibv_port_attr::default();
        // SAFETY: a valid context and a port_attr of the size the library expects
        // (ibv_query_port is the compat entry point that fills the classic struct).
        let rc = unsafe { ffi::ibv_query_port(self.inner.ctx, self.port, &mut a as *mut _ as *mut _) };
        if rc != 0 {
            return Err(self.err("ibv_query_port", rc));
        }
        Ok(PortInfo {
            state: a.state,
            active_mtu: a.active_mtu,
            link_layer: match a.link_layer as u32 {
                ffi::IBV_LINK_LAYER_INFINIBAND => "InfiniBand",
                ffi::IBV_LINK_LAYER_ETHERNET => "Ethernet",
                // Old providers report 0 (unspecified) on IB ports.
                _ => "InfiniBand",
            },
            lid: a.lid,
            gid_tbl_len: a.gid_tbl_len,
            grh_required: a.flags & GRH_REQUIRED != 0,
        })
    }

    pub(crate) fn query_gid(&self, index: u8) -> Result<[u8; 16], VerbsError> {
        let mut g = ffi::ibv_gid::default();
        // SAFETY: a valid context and an ibv_gid to fill.
        let rc = unsafe { ffi::ibv_query_gid(self.inner.ctx, self.port, index as i32, &mut g) };
        if rc != 0 {
            return Err(self.err(&format!("ibv_query_gid(index {index})"), last_errno()));
        }
        // SAFETY: raw is the byte view of the union; every bit pattern is valid.
        Ok(unsafe { g.raw })
    }

    pub(crate) fn alloc_pd(&self) -> Result<Pd, VerbsError> {
        // SAFETY: a valid context.
        let pd = unsafe { ffi::ibv_alloc_pd(self.inner.ctx) };
        if pd.is_null() {
            return Err(self.err("ibv_alloc_pd", last_errno()));
        }
        Ok(Pd {
            inner: Arc::new(PdInner {
                pd,
                dev: self.clone(),
            }),
        })
    }

    pub(crate) fn create_cq(&self, entries: i32) -> Result<Cq, VerbsError> {
        // SAFETY: a valid context; no completion channel (we poll), vector 0.
        let cq = unsafe {
            ffi::ibv_create_cq(
                self.inner.ctx,
                entries,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        if cq.is_null() {
            return Err(self.err("ibv_create_cq", last_errno()));
        }
        Ok(Cq {
            inner: Arc::new(CqInner {
                cq,
                dev: self.clone(),
            }),
        })
    }
}

struct PdInner {
    pd: *mut ffi::ibv_pd,
    dev: Device,
}

// SAFETY: see the module comment.
unsafe impl Send for PdInner {}
// SAFETY: see the module comment.
unsafe impl Sync for PdInner {}

impl Drop for PdInner {
    fn drop(&mut self) {
        // SAFETY: every MR and QP of this PD holds an Arc of it, so none is alive.
        unsafe { ffi::ibv_dealloc_pd(self.pd) };
    }
}

/// A protection domain.
#[derive(Clone)]
pub(crate) struct Pd {
    inner: Arc<PdInner>,
}

impl Pd {

    /// Register a new zeroed buffer of `bytes` (rounded up to 8), owned by the region so it
    /// cannot be freed or moved while the NIC may use it. `remote_write` lets the peer
    /// RDMA-write into it (the receive slots only).
    pub fn register(&self, bytes: usize, remote_write: bool) -> Result<Mr, VerbsError> {
        let words = bytes.div_ceil(8).max(1);
        // Raw from here on: the NIC writes this memory behind Rust's back, so no Rust
        // reference to it is kept (Mr hands out pointers), and it is freed only after a
        // successful deregistration.
        let buf: *mut [u64] = Box::into_raw(vec![0u64; words].into_boxed_slice());
        let mut access = ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
        if remote_write {
            access |= ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
        }
        // SAFETY: buf is a live heap allocation of words * 8 bytes that the Mr owns and never
        // reallocates; it is deregistered (Drop) before it is freed.
        let mr =
            unsafe { ffi::ibv_reg_mr(self.inner.pd, buf.cast::<u64>().cast(), words * 8, access as i32) };
        if mr.is_null() {
            let e = self.inner.dev.err("ibv_reg_mr", last_errno());
            // SAFETY: never registered: the allocation is ours alone, freed once.
            drop(unsafe { Box::from_raw(buf) });
            return Err(e);
        }
        Ok(Mr {
            mr,
            buf,
            len: bytes,
            _pd: self.clone(),
        })
    }

    /// An RC queue pair on `cq` (both queues), with room for `send` and `recv` work requests.
    pub(crate) fn create_rc_qp(&self, cq: &Cq, send: u32, recv: u32) -> Result<Qp, VerbsError> {
        let mut attr = ffi::ibv_qp_init_attr {
            qp_context: std::ptr::null_mut(),
            send_cq: cq.inner.cq,
            recv_cq: cq.inner.cq,
            srq: std::ptr::null_mut(),
            cap: ffi::ibv_qp_cap {
                max_send_wr: send,
                max_recv_wr: recv,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: ffi::ibv_qp_type::IBV_QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: a valid PD and CQ of the same context; attr is fully initialised.
        let qp = unsafe { ffi::ibv_create_qp(self.inner.pd, &mut attr) };
        if qp.is_null() {
            return Err(self.inner.dev.err("ibv_create_qp", last_errno()));
        }
        Ok(Qp {
            qp,
            dev: self.inner.dev.clone(),
            _pd: self.clone(),
            _cq: cq.clone(),
        })
    }
}

/// A registered buffer the region owns. It hands out pointers, never `&[u8]`: the NIC
/// writes it whenever the peer likes, and only the transport's protocol (a slot is read
/// between its completion and its credit) says when a view of it is stable.
pub(crate) struct Mr {
    mr: *mut ffi::ibv_mr,
    buf: *mut [u64],
    len: usize,
    _pd: Pd,
}

// SAFETY: the MR handle is thread-safe (module comment) and the buffer is plain memory
// reached only through raw pointers.
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}

impl Mr {
    pub fn addr(&self) -> u64 {
        self.buf.cast::<u64>() as u64
    }
    pub(crate) fn rkey(&self) -> u32 {
        // SAFETY: mr is valid while self lives.
        unsafe { (*self.mr).rkey }
    }
    pub(crate) fn lkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.mr).lkey }
    }
    pub fn len(&self) -> usize {
        self.len
    }
    /// The first byte (8-aligned, so f32 views line up); `len()` bytes are valid.
    pub(crate) fn as_ptr(&self) -> *const u8 {
        self.buf.cast::<u8>()
    }
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.buf.cast::<u8>()
    }
}

/// Regions whose deregistration failed: their memory is leaked on purpose (the NIC may still
/// write it), and the error kept here for whoever reports at the end.
static LEAKED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// The deregistrations that failed in this process since the last call (their memory was
/// leaked, not freed): taken, so a run says each once (`ring::launch` at the end of a run).
pub(crate) fn leaked_regions() -> Vec<String> {
    std::mem::take(&mut *LEAKED.lock().unwrap_or_else(|p| p.into_inner()))
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: mr came from ibv_reg_mr and is deregistered once.
        let rc = unsafe { ffi::ibv_dereg_mr(self.mr) };
        if rc != 0 {
            let e = self._pd.inner.dev.err("ibv_dereg_mr", rc);
            LEAKED.lock().unwrap_or_else(|p| p.into_inner()).push(format!(
                "{e}; {} bytes leaked rather than freed under the NIC",
                self.len
            ));
            return;
        }
        // SAFETY: from Box::into_raw in register, no longer registered, freed once.
        drop(unsafe { Box::from_raw(self.buf) });
    }
}

struct CqInner {
    cq: *mut ffi::ibv_cq,
    dev: Device,
}

// SAFETY: see the module comment.
unsafe impl Send for CqInner {}
// SAFETY: see the module comment.
unsafe impl Sync for CqInner {}

impl Drop for CqInner {
    fn drop(&mut self) {
        // SAFETY: every QP using this CQ holds an Arc of it, so none is alive.
        unsafe { ffi::ibv_destroy_cq(self.cq) };
    }
}

/// A completion queue (polled, no channel).
#[derive(Clone)]
pub(crate) struct Cq {
    inner: Arc<CqInner>,
}

impl Cq {
    /// Poll up to `out.len()` completions; returns how many were written.
    pub fn poll(&self, out: &mut [Wc]) -> Result<usize, VerbsError> {
        let mut raw = [ffi::ibv_wc::default(); 16];
        let want = out.len().min(raw.len());
        // SAFETY: cq is valid; poll_cq is the provider's entry (ibv_poll_cq is a static inline
        // in verbs.h calling exactly this); raw has room for `want` entries.
        let n = unsafe {
            let cq = self.inner.cq;
            let f = (*(*cq).context)
                .ops
                .poll_cq
                .expect("libibverbs context without poll_cq");
            f(cq, want as i32, raw.as_mut_ptr())
        };
        if n < 0 {
            return Err(self.inner.dev.err("ibv_poll_cq", -n));
        }
        for (o, w) in out.iter_mut().zip(raw.iter().take(n as usize)) {
            *o = Wc::from_raw(w);
        }
        Ok(n as usize)
    }
}

/// One work completion, decoded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Wc {
    pub wr_id: u64,
    /// `IBV_WC_SUCCESS` is 0; see [`status_meaning`].
    pub status: u32,
    pub vendor_err: u32,
    pub opcode: u32,
    pub byte_len: u32,
    /// Host order.
    pub imm: Option<u32>,
    pub qp_num: u32,
}

impl Wc {
    fn from_raw(w: &ffi::ibv_wc) -> Wc {
        let (status, vendor_err) = w.error().unwrap_or((0, 0));
        Wc {
            wr_id: w.wr_id(),
            status,
            vendor_err,
            opcode: w.opcode(),
            byte_len: w.len() as u32,
            imm: w.imm_data().map(u32::from_be),
            qp_num: w.qp_num,
        }
    }
    pub fn ok(&self) -> bool {
        self.status == 0
    }
}

/// `IBV_WC_WR_FLUSH_ERR`: a work request flushed because its queue pair is in error.
pub(crate) const WC_WR_FLUSH_ERR: u32 = 5;

/// `ibv_wc_status_str` and what the status means on a fabric, for verdicts.
pub(crate) fn status_meaning(status: u32) -> (String, &'static str) {
    // SAFETY: ibv_wc_status_str returns a static string for any value.
    let name = unsafe { CStr::from_ptr(ffi::ibv_wc_status_str(status)) }
        .to_string_lossy()
        .into_owned();
    let meaning = match status {
        12 => {
            "transport retry counter exceeded: the peer is unreachable on the fabric (GID, routing, PFC, a cable)"
        }
        13 => "RNR retry counter exceeded: the peer posted no receive in time",
        4 => {
            "local protection error: a local buffer is not registered for this access (on GPUs: ACS/IOMMU breaking GPUDirect)"
        }
        10 => "remote access error: the peer's rkey or address does not allow this write",
        5 => "flushed: a knock-on of an earlier error on this queue pair",
        9 => "remote invalid request",
        11 => "remote operation error",
        _ => "a completion error",
    };
    (name, meaning)
}

/// The QP attributes NCCL sets (net_ib connect.cc), with NCCL's defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct QpParams {
    pub port: u8,
    pub gid_index: u8,
    /// The enum (1..5), normally the port's active MTU.
    pub path_mtu: u32,
    /// 4.096 µs · 2^timeout per try (`NCCL_IB_TIMEOUT`, 20).
    pub timeout: u8,
    /// `NCCL_IB_RETRY_CNT` (7).
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    /// `NCCL_IB_TC` (0).
    pub traffic_class: u8,
    /// `NCCL_IB_SL` (0).
    pub service_level: u8,
    /// Global routing (GRH): RoCE always, IB across subnets or when the port requires it.
    pub global: bool,
    /// `NCCL_IB_PKEY` (0): the P_Key index.
    pub pkey_index: u16,
    /// The destination LID when not the peer's own (its FLID across IB subnets).
    pub dlid: Option<u16>,
}

/// One end of an RC connection, as exchanged with the peer.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Endpoint {
    pub qpn: u32,
    pub psn: u32,
    pub lid: u16,
    pub gid: [u8; 16],
}

/// An RC queue pair.
pub(crate) struct Qp {
    qp: *mut ffi::ibv_qp,
    dev: Device,
    _pd: Pd,
    _cq: Cq,
}

// SAFETY: see the module comment.
unsafe impl Send for Qp {}
// SAFETY: see the module comment.
unsafe impl Sync for Qp {}

impl Qp {
    pub(crate) fn qpn(&self) -> u32 {
        // SAFETY: qp is valid while self lives.
        unsafe { (*self.qp).qp_num }
    }

    fn modify(&self, what: &str, attr: &mut ffi::ibv_qp_attr, mask: u32) -> Result<(), VerbsError> {
        // SAFETY: a valid QP; attr is fully initialised (zeroed, then set) for the mask.
        let rc = unsafe { ffi::ibv_modify_qp(self.qp, attr, mask as i32) };
        if rc != 0 {
            return Err(self.dev.err(&format!("ibv_modify_qp({what})"), rc));
        }
        Ok(())
    }

    /// RESET -> INIT, allowing the peer to RDMA-write (only MRs registered for remote write
    /// can be targeted).
    pub(crate) fn to_init(&self, p: &QpParams) -> Result<(), VerbsError> {
        let mut a = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_INIT,
            pkey_index: p.pkey_index,
            port_num: p.port,
            qp_access_flags: ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0,
            ..Default::default()
        };
        use ffi::ibv_qp_attr_mask as m;
        self.modify(
            "INIT",
            &mut a,
            (m::IBV_QP_STATE | m::IBV_QP_PKEY_INDEX | m::IBV_QP_PORT | m::IBV_QP_ACCESS_FLAGS).0,
        )
    }

    /// INIT -> RTR towards `remote`.
    pub(crate) fn to_rtr(&self, p: &QpParams, remote: &Endpoint) -> Result<(), VerbsError> {
        let mut a = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_RTR,
            path_mtu: p.path_mtu,
            dest_qp_num: remote.qpn,
            rq_psn: remote.psn,
            max_dest_rd_atomic: p.max_rd_atomic,
            min_rnr_timer: p.min_rnr_timer,
            ..Default::default()
        };
        a.ah_attr.dlid = p.dlid.unwrap_or(remote.lid);
        a.ah_attr.sl = p.service_level;
        a.ah_attr.port_num = p.port;
        if p.global {
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid = ffi::ibv_gid { raw: remote.gid };
            a.ah_attr.grh.sgid_index = p.gid_index;
            a.ah_attr.grh.hop_limit = 255;
            a.ah_attr.grh.traffic_class = p.traffic_class;
        }
        use ffi::ibv_qp_attr_mask as m;
        self.modify(
            "RTR",
            &mut a,
            (m::IBV_QP_STATE
                | m::IBV_QP_AV
                | m::IBV_QP_PATH_MTU
                | m::IBV_QP_DEST_QPN
                | m::IBV_QP_RQ_PSN
                | m::IBV_QP_MAX_DEST_RD_ATOMIC
                | m::IBV_QP_MIN_RNR_TIMER)
                .0,
        )
    }

    /// RTR -> RTS with our send PSN.
    pub(crate) fn to_rts(&self, p: &QpParams, psn: u32) -> Result<(), VerbsError> {
        let mut a = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_RTS,
            timeout: p.timeout,
            retry_cnt: p.retry_cnt,
            rnr_retry: p.rnr_retry,
            sq_psn: psn,
            max_rd_atomic: p.max_rd_atomic,
            ..Default::default()
        };
        use ffi::ibv_qp_attr_mask as m;
        self.modify(
            "RTS",
            &mut a,
            (m::IBV_QP_STATE
                | m::IBV_QP_TIMEOUT
                | m::IBV_QP_RETRY_CNT
                | m::IBV_QP_RNR_RETRY
                | m::IBV_QP_SQ_PSN
                | m::IBV_QP_MAX_QP_RD_ATOMIC)
                .0,
        )
    }

    /// Post a receive with no buffer (RDMA Write with immediate consumes one, its bytes go to
    /// the address the writer named).
    pub(crate) fn post_recv(&self, wr_id: u64) -> Result<(), VerbsError> {
        let mut wr = ffi::ibv_recv_wr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: std::ptr::null_mut(),
            num_sge: 0,
        };
        let mut bad = std::ptr::null_mut();
        // SAFETY: a valid QP; wr lives across the call (the provider copies it); post_recv is
        // the provider entry ibv_post_recv inlines.
        let rc = unsafe {
            let ctx = (*self.qp).context;
            let f = (*ctx)
                .ops
                .post_recv
                .expect("libibverbs context without post_recv");
            f(self.qp, &mut wr, &mut bad)
        };
        if rc != 0 {
            return Err(self.dev.err("ibv_post_recv", rc));
        }
        Ok(())
    }

    /// Post an RDMA Write with immediate of `local[off..off+len]` to `remote_addr`/`rkey`.
    /// `len` 0 sends only the immediate. Always signalled.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn post_write_imm(
        &self,
        wr_id: u64,
        local: &Mr,
        off: usize,
        len: usize,
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    ) -> Result<(), VerbsError> {
        if off + len > local.len() {
            return Err(VerbsError {
                call: "ibv_post_send".into(),
                device: self.dev.name().into(),
                port: self.dev.port,
                error: format!("{len} bytes at {off} exceed the {}-byte region", local.len()),
                hint: None,
            });
        }
        let mut sge = ffi::ibv_sge {
            addr: local.addr() + off as u64,
            length: len as u32,
            lkey: local.lkey(),
        };
        let mut wr = ffi::ibv_send_wr {
            wr_id,
            sg_list: &mut sge,
            num_sge: if len == 0 { 0 } else { 1 },
            opcode: ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM,
            send_flags: ffi::ibv_send_flags::IBV_SEND_SIGNALED.0,
            ..Default::default()
        };
        wr.__bindgen_anon_1.imm_data = imm.to_be();
        wr.wr.rdma.remote_addr = remote_addr;
        wr.wr.rdma.rkey = rkey;
        let mut bad = std::ptr::null_mut();
        // SAFETY: a valid QP; wr and sge live across the call; the local range was checked
        // against the registered region, which outlives the completion because the caller
        // owns both and polls before reusing or dropping the region.
        let rc = unsafe {
            let ctx = (*self.qp).context;
            let f = (*ctx)
                .ops
                .post_send
                .expect("libibverbs context without post_send");
            f(self.qp, &mut wr, &mut bad)
        };
        if rc != 0 {
            return Err(self.dev.err("ibv_post_send(RDMA_WRITE_WITH_IMM)", rc));
        }
        Ok(())
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: qp came from ibv_create_qp and is destroyed once; its PD and CQ are Arcs
        // held by this struct, released only after this.
        unsafe { ffi::ibv_destroy_qp(self.qp) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leaked_region_is_said_once() {
        let line = "ibv_dereg_mr on test0: EBUSY; 4096 bytes leaked rather than freed under the NIC";
        LEAKED.lock().unwrap().push(line.to_string());
        assert!(leaked_regions().iter().any(|l| l == line));
        assert!(!leaked_regions().iter().any(|l| l == line), "said twice");
    }

    #[test]
    fn mtu_enum_to_bytes() {
        assert_eq!(mtu_bytes(1), 256);
        assert_eq!(mtu_bytes(3), 1024);
        assert_eq!(mtu_bytes(5), 4096);
        assert_eq!(mtu_bytes(0), 0);
        assert_eq!(mtu_bytes(6), 0);
        assert_eq!(mtu_enum(4096), Some(5));
        assert_eq!(mtu_enum(256), Some(1));
        assert_eq!(mtu_enum(1500), None);
        assert_eq!(mtu_enum(0), None);
    }

    #[test]
    fn status_meanings_name_the_fabric_cause() {
        assert!(status_meaning(12).1.contains("unreachable"));
        assert!(status_meaning(12).0.to_lowercase().contains("retry"));
        assert!(status_meaning(5).1.contains("knock-on"));
        assert!(status_meaning(13).1.contains("RNR"));
    }

    #[test]
    fn errors_name_call_device_port_and_hint() {
        let e = err("ibv_modify_qp(RTR)", "mlx5_0", 1, libc::EINVAL);
        let s = e.to_string();
        assert!(s.starts_with("ibv_modify_qp(RTR) on mlx5_0:1 failed: "), "{s}");
        assert!(s.contains("hint: ") && s.contains("NCCL_IB_GID_INDEX"), "{s}");
        let e = err("ibv_get_device_list", "-", 0, libc::ENOSYS);
        assert!(e.to_string().contains("no RDMA support"), "{e}");
    }

    /// On a host without RDMA (this CI machine's kernel) the answer is an error, not a panic.
    #[test]
    fn device_list_answers_without_panicking() {
        match device_names() {
            Ok(names) => assert!(names.iter().all(|n| !n.is_empty())),
            Err(e) => assert_eq!(e.call, "ibv_get_device_list"),
        }
    }
}
