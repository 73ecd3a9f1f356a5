//! What one NCCL (or PyTorch) message says. Formats, by NCCL version, as printed in public
//! logs (tests/data/nccl-logs/SOURCES.md names each thread) and NCCL's source for each version:
//!
//! * completions: `Got completion with error %d, opcode %d, len %d, vendor err %d` (<= 2.9),
//!   `... from peer %s with error ...` (2.10-2.17), `... (Send) localGid X remoteGid Y`
//!   (2.18-2.19), `with status=%d opcode=%d ... remoteGidsY` (2.20-2.22, no space),
//!   `... hca mlx5_N` (2.23), `status=%s(%d) opcode=%s(%d) vendor_err=%u` (>= 2.28.7);
//! * connections: `Ring 00 : 3[3] -> 4[4] via P2P/IPC` (2.4-2.6), `Ring 00 : 34 -> 33 [send]
//!   via NET/Socket/0` (2.4), `Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0/GDRDMA`
//!   (2.7+), `via P2P/CUMEM/read`, `via SHM/direct/direct`, `via P2P/direct pointer`;
//! * PyTorch ProcessGroupNCCL: `[Rank N] Watchdog caught collective operation timeout:
//!   WorkNCCL(SeqNum=S, OpType=OP, ..., Timeout(ms)=T) ran for M milliseconds ...`.

use super::causes::{self, Cause, Read, Seen};
use super::line::Level;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transport {
    pub src: u32,
    pub dst: u32,
    pub via: String,
}

/// A failure line's facts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Failure {
    pub cause: &'static str,
    pub hca: Option<String>,
    pub peer: Option<String>,
    pub local_gid: Option<String>,
    pub remote_gid: Option<String>,
    pub status: Option<i64>,
    pub vendor_err: Option<i64>,
    pub seq: Option<u64>,
    pub op: Option<String>,
    pub rank: Option<u32>,
    /// NCCL's return code (`ncclResult_t`) when the line or its trail gives one.
    pub result: Option<u8>,
    /// The errno of a failed socket call.
    pub errno: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Understood, nothing to keep (return-code traces, setup chatter).
    Known,
    Version(String),
    Bootstrap(Vec<String>),
    SocketIfs(Vec<String>),
    IbUsing {
        hcas: Vec<String>,
        oob: Option<String>,
    },
    Plugin(String),
    /// A line about NCCL_TOPO_FILE: who set it, loading it, failing to open it.
    TopoFile(String),
    Network(String),
    Comm {
        rank: u32,
        nranks: Option<u32>,
        local_rank: Option<u32>,
        cuda_dev: Option<i32>,
    },
    Ring {
        channel: u32,
        order: String,
    },
    Tree {
        channels: Vec<u32>,
    },
    Channels(String),
    Connection(Transport),
    Gdr {
        hca: String,
        enabled: bool,
    },
    Failure(Failure),
    /// An error trail line (`transport/net.cc:1298 -> 6`): NCCLCHECK printing the
    /// `ncclResult_t` it passes up.
    Trail(u8),
    /// PyTorch: the last sequence number a rank enqueued (it reached every one before).
    Progress {
        rank: Option<u32>,
        enqueued: u64,
    },
}

/// NCCL's `ncclResult_t` names (src/nccl.h.in, `typedef enum { ncclSuccess = 0, ... }`).
pub(crate) fn result_name(code: u8) -> Option<&'static str> {
    Some(match code {
        0 => "ncclSuccess",
        1 => "ncclUnhandledCudaError",
        2 => "ncclSystemError",
        3 => "ncclInternalError",
        4 => "ncclInvalidArgument",
        5 => "ncclInvalidUsage",
        6 => "ncclRemoteError",
        7 => "ncclInProgress",
        _ => return None,
    })
}

/// `src/file.cc:123 -> 3` (also `.cu`, `.h`, `.cpp`): the code after the arrow.
fn trail(m: &str) -> Option<u8> {
    let (loc, code) = m.split_once(" -> ")?;
    let (file, line) = loc.trim().rsplit_once(':')?;
    if !file.contains('.') || line.is_empty() || !line.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits(code.trim()).parse().ok()
}

/// The ASCII digits `s` starts with (a slice: a number is parsed without a copy).
pub(super) fn digits(s: &str) -> &str {
    let n = s.bytes().take_while(u8::is_ascii_digit).count();
    &s[..n]
}

/// Where `needle` starts in `hay`: memchr for the rarest of its first bytes (by
/// [`BYTE_RANK`]), then a compare around it. A line runs through dozens of these on short
/// text, where building a two-way or SIMD searcher per call (std's `contains`, memchr's
/// `memmem::find`) costs more than the search itself, and where a needle's first byte (a
/// space, a lowercase letter) can stop memchr dozens of times per line.
pub(super) fn find(hay: &str, needle: &str) -> Option<usize> {
    let (h, n) = (hay.as_bytes(), needle.as_bytes());
    if n.is_empty() {
        return Some(0);
    }
    let last = h.len().checked_sub(n.len())?;
    let k = rarest(n);
    // The anchor byte of a match at `at` is at `at + k`, so the first anchor hit that
    // verifies is the first match.
    let mut from = k;
    while let Some(j) = memchr::memchr(n[k], &h[from..=last + k]) {
        let at = from + j - k;
        if starts_with(&h[at..], n) {
            return Some(at);
        }
        from += j + 1;
        if from > last + k {
            break;
        }
    }
    None
}

/// The index of the rarest byte among the needle's first eight (the first on a tie).
fn rarest(n: &[u8]) -> usize {
    // Over a slice, from 0 (the first byte never beats itself): `take(8).skip(1)` compiled
    // to a call per byte, half of `find`'s own time, on every call.
    let mut best = 0;
    for (i, &b) in n[..n.len().min(8)].iter().enumerate() {
        if BYTE_RANK[b as usize] < BYTE_RANK[n[best] as usize] {
            best = i;
        }
    }
    best
}

/// How common each byte is in log text (higher: more common), a rough order (space,
/// lowercase letters, digits and the punctuation of headers and addresses, then capitals):
/// where [`find`] anchors its search. A wrong guess costs speed only.
static BYTE_RANK: [u8; 256] = {
    const COMMON: &[u8] = b"Zzqjx<>|KBHFMUDkvGWPTSOEARILCN)(,][=-_/9876543210:.ybwgfpmucdhlrsnioate ";
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < COMMON.len() {
        t[COMMON[i] as usize] = (i + 1) as u8;
        i += 1;
    }
    t
};

/// `h` starts with `n`, compared in place: the needles are short and most candidates
/// differ within a few bytes, where a memcmp call costs more than the compare.
fn starts_with(h: &[u8], n: &[u8]) -> bool {
    h.len() >= n.len() && h.iter().zip(n).all(|(a, b)| a == b)
}

fn has(s: &str, needle: &str) -> bool {
    find(s, needle).is_some()
}

fn fail(cause: &'static str) -> Event {
    Event::Failure(Failure {
        cause,
        ..Failure::default()
    })
}

/// The integer right after `key` (`"rank "` -> 3), skipping spaces.
fn num_after(s: &str, key: &str) -> Option<i64> {
    let i = find(s, key)? + key.len();
    let rest = s[i..].trim_start();
    let neg = rest.starts_with('-');
    let v: i64 = digits(rest.trim_start_matches('-')).parse().ok()?;
    Some(if neg { -v } else { v })
}

/// The word right after `key`, up to whitespace or one of `stops`.
fn word_after<'a>(s: &'a str, key: &str, stops: &[char]) -> Option<&'a str> {
    let i = find(s, key)? + key.len();
    let rest = s[i..].trim_start();
    let end = rest
        .find(|c: char| c.is_whitespace() || stops.contains(&c))
        .unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

/// `[0]eth0:10.0.0.1<0> [1]ib0:...` or `eth0:10.0.0.1<0>` -> `["eth0:10.0.0.1<0>", ...]`.
fn iface_list(s: &str) -> Vec<String> {
    s.split_whitespace()
        .filter(|w| w.contains(':'))
        .map(|w| match w.find(']') {
            Some(i) if w.starts_with('[') => w[i + 1..].to_string(),
            _ => w.to_string(),
        })
        .collect()
}

fn after<'a>(s: &'a str, key: &str) -> Option<&'a str> {
    find(s, key).map(|i| &s[i + key.len()..])
}

/// A message from a line with an NCCL header.
pub(crate) fn classify(level: Level, msg: &str) -> Option<Event> {
    let m = msg.trim();
    if let Some(v) = m.strip_prefix("NCCL version ").filter(|_| level != Level::Warn) {
        return Some(Event::Version(v.split_whitespace().next()?.to_string()));
    }
    if level == Level::Warn {
        // A WARN no rule knows is still a failure: unclassified, never guessed at.
        return Some(warn_rule(m).event(m));
    }
    // Every test below looks at the start of the message (or one short token), so a line
    // costs a few comparisons however many rules there are: logs run to gigabytes.
    // The first word (`split(' ')`'s first piece), by a byte loop: its searcher costs more
    // than the few bytes it looks at.
    let first = &m[..m.bytes().position(|b| b == b' ').unwrap_or(m.len())];
    // The steady state of NCCL_DEBUG_SUBSYS=COLL: one line per collective call.
    if let "AllReduce:" | "Broadcast:" | "AllGather:" | "ReduceScatter:" | "Reduce:" | "Send:" | "Recv:"
    | "AllToAll:" = first
    {
        return Some(Event::Known);
    }
    // Source-annotated traces: "transport/net.cc:1298 -> 6", "channel.cc:55 Cuda Alloc ...".
    if first.as_bytes().contains(&b'.') && first.as_bytes().contains(&b':') {
        if let Some(code) = trail(m) {
            return Some(Event::Trail(code));
        }
        return Some(Event::Known);
    }
    if let Some(ev) = net_setup(m) {
        return Some(ev);
    }
    if let Some(ev) = layout(m, first) {
        return Some(ev);
    }
    if let Some(ev) = gdr(m) {
        return Some(ev);
    }
    if CHATTER.iter().any(|c| m.starts_with(c)) {
        return Some(Event::Known);
    }
    None
}

/// Setup chatter NCCL prints at INFO that carries nothing the summary uses.
const CHATTER: &[&str] = &[
    "cudaDriverVersion",
    "NCCL_",
    "Setting affinity",
    "Connected all",
    "P2P Chunksize",
    "threadThresholds",
    "Using non-device net plugin",
    "Tree ",
    "NVLS",
    "Allocated",
    "Comm config",
    "DMA-BUF",
    "Launch mode",
    "CC ",
    "MNNVL",
    "Assigned ",
    "GPU/",
    "CPU/",
    "NET/",
    "=== System",
    "Pattern ",
    "New proxy",
    "Mem Realloc",
    "ncclPollProxyResponse",
    "resp.opId",
    "sendConnect",
    "recvConnect",
    "proxyProgressAsync",
    "Received and initiated",
    "CUDA Dev",
    "+ ",
    "Enabled NCCL Func",
    "ENV/Plugin",
    "TUNER/Plugin",
    "PROFILER/Plugin",
    "Failed to initialize NET plugin",
    "NCCL git version",
    "AllReduce:",
    "Broadcast:",
    "AllGather:",
    "ReduceScatter:",
    "Reduce:",
    "Send:",
    "Recv:",
    "Bootstrap",
    "Symmetric",
    "RAS",
    "NVLink",
    "[Service thread]",
    "Connection closed by localRank",
    "Init COMPLETE",
    "ncclCommFinalize",
    "comm ",
    "Initialized",
    "Using ",
    "Channel",
    "Ring",
    "Trees",
    "Dev ",
    "Could not",
    "Topology",
    "Loaded",
    "GIN",
    "Proxy",
    "Device",
    "Nvls",
    "Memory",
];

/// The strip of the first of `prefixes` that `m` starts with.
fn strip_any<'a>(m: &'a str, prefixes: &[&str]) -> Option<&'a str> {
    prefixes.iter().find_map(|p| m.strip_prefix(p))
}

/// The networks an INFO line says NCCL set up: interfaces, HCAs, the plugin and its
/// loading, the network chosen.
fn net_setup(m: &str) -> Option<Event> {
    let strip = |prefixes: &[&str]| strip_any(m, prefixes);
    // libibverbs missing (misc/ibvwrap.cc `wrap_ibv_symbols`, INFO from 2.8 on): the IB
    // transport is off and NCCL falls back to sockets.
    if m.starts_with("Failed to open libibverbs") {
        return Some(fail("ib_verbs_unavailable"));
    }
    // NCCL 2.4-2.6 (`bootstrap.cc`/`net_socket.cc`): "NET : Using interface eth0:10.0.0.1<0>".
    if let Some(r) = m.strip_prefix("NET : Using interface") {
        return Some(Event::Bootstrap(iface_list(r)));
    }
    if let Some(r) = strip(&["Bootstrap : Using", "Bootstrap: Using"]) {
        return Some(Event::Bootstrap(iface_list(r)));
    }
    if let Some(r) = strip(&["NET/Socket : Using", "NET/Socket: Using"]) {
        return Some(Event::SocketIfs(iface_list(r)));
    }
    if m.starts_with("NET/IB : No device found") || m.starts_with("NET/IB: No device found") {
        return Some(fail("ib_no_device"));
    }
    if let Some(r) = strip(&["NET/IB : Using", "NET/IB: Using"]) {
        let (devs, oob) = match r.split_once("; OOB") {
            Some((d, o)) => (d, Some(o.trim().to_string())),
            None => (r, None),
        };
        let hcas = devs
            .split_whitespace()
            .filter(|w| *w != "[RO]")
            .map(|w| match w.find(']') {
                Some(i) if w.starts_with('[') => w[i + 1..].to_string(),
                _ => w.to_string(),
            })
            .filter(|w| !w.is_empty())
            .collect();
        return Some(Event::IbUsing { hcas, oob });
    }
    if let Some(r) = m.strip_prefix("Using network ") {
        return Some(Event::Network(r.trim().to_string()));
    }
    if m.starts_with("NET/Plugin") || m.starts_with("Plugin Path") || m.starts_with("P2P plugin") {
        if plugin_load_failed(m) {
            return Some(fail("net_plugin_load_failed"));
        }
        if let Some(r) = after(m, "Loaded net plugin ") {
            return Some(Event::Plugin(r.trim().to_string()));
        }
        if let Some(r) = m.strip_prefix("P2P plugin ") {
            return Some(Event::Plugin(r.trim().to_string()));
        }
        if has(m, "No plugin found") || has(m, "Could not find") || has(m, "returned 2") {
            return Some(Event::Plugin("none (internal)".into()));
        }
        return Some(Event::Known);
    }
    if let Some(r) = m.strip_prefix("Initialized NET plugin ") {
        return Some(Event::Plugin(r.trim().to_string()));
    }
    // aws-ofi-nccl names itself and its version: `NET/OFI Using aws-ofi-nccl 1.3.0aws`,
    // `NET/OFI Initializing aws-ofi-nccl 1.7.4-aws`.
    if let Some(r) = after(m, "NET/OFI Using ").or_else(|| after(m, "NET/OFI Initializing ")) {
        return Some(Event::Plugin(r.trim().to_string()));
    }
    None
}

/// What an INFO line says of the topology and the job's layout: the topology file,
/// communicators, rings, trees and channels.
fn layout(m: &str, first: &str) -> Option<Event> {
    // The topology file NCCL was told to load, and who told it (the environment or
    // /etc/nccl.conf), or that it could not open it.
    if m.starts_with("Could not open XML topology file") {
        return Some(fail("topology_file_unreadable"));
    }
    if m.starts_with("NCCL_TOPO_FILE set")
        || m.starts_with("NCCL_GRAPH_FILE set")
        || m.starts_with("Loading topology file")
    {
        return Some(Event::TopoFile(m.trim().to_string()));
    }
    // "comm 0x.. rank 3 nranks 16 cudaDev 3 ..." / "ncclCommInitRank comm ..." /
    // "comm 0x.. rank 3 nRanks 4 nNodes 2 localRanks 2 localRank 1 MNNVL 0"
    if first == "comm" || first.starts_with("ncclCommInit") {
        let Some(rank) = num_after(m, " rank ") else {
            return Some(Event::Known);
        };
        let nranks = num_after(m, " nranks ")
            .or_else(|| num_after(m, " nRanks "))
            .map(|v| v as u32);
        let local_rank = num_after(m, " localRank ").map(|v| v as u32);
        let cuda_dev = num_after(m, " cudaDev ").map(|v| v as i32);
        return Some(Event::Comm {
            rank: rank as u32,
            nranks,
            local_rank,
            cuda_dev,
        });
    }
    if first == "Channel" || first == "Ring" {
        return Some(channel_line(m).unwrap_or(Event::Known));
    }
    if let Some(r) = m.strip_prefix("Trees ") {
        let channels = r
            .split('[')
            .skip(1)
            .filter_map(|x| x.split(']').next()?.trim().parse().ok())
            .collect();
        return Some(Event::Tree { channels });
    }
    if first.bytes().all(|b| b.is_ascii_digit()) && !first.is_empty() {
        // "32 coll channels, 32 nvls channels, ..." and topology dumps (" 1 : NET/0 GPU/1").
        if has(m, " coll channels") {
            return Some(Event::Channels(m.to_string()));
        }
        return Some(Event::Known);
    }
    None
}

/// GPUDirect RDMA on or off for an HCA.
fn gdr(m: &str) -> Option<Event> {
    let strip = |prefixes: &[&str]| strip_any(m, prefixes);
    if let Some(r) = strip(&[
        "NET/IB : GPU Direct RDMA ",
        "NET/IB: GPU Direct RDMA ",
        "NET/Socket : GPU Direct RDMA ",
        "GPU Direct RDMA ",
    ]) {
        // The Socket transport prints the same for its interfaces: expected, not a fault.
        if m.starts_with("NET/Socket") {
            return Some(Event::Known);
        }
        let enabled = r.starts_with("Enabled")
            || r.starts_with("(nvidia-peermem) enabled")
            || r.starts_with("(DMABUF) enabled");
        if r.contains("for HCA") {
            // "Disabled for HCA 0 'mlx5_0'" (no peer memory client).
            let hca = m.split('\'').nth(1).unwrap_or("?").to_string();
            return Some(Event::Gdr { hca, enabled });
        }
        if r.contains("for GPU") {
            // "Disabled for GPU 42000 / HCA 0 (distance 6 > 4)": by topology.
            let hca = format!("HCA {}", num_after(m, "/ HCA ").unwrap_or(-1));
            return Some(Event::Gdr { hca, enabled });
        }
        return Some(Event::Known);
    }
    None
}

/// `Channel 00/02 :    0   1` (ring order), `Ring 00 : 2 -> 0 -> 1` (2.2x per-rank ring),
/// or a connection `Channel 00/0 : 0[0] -> 1[1] via P2P/IPC`.
fn channel_line(m: &str) -> Option<Event> {
    let (head, body) = m.split_once(" : ").or_else(|| m.split_once(": "))?;
    let ch: u32 = head.split_whitespace().nth(1)?.split('/').next()?.parse().ok()?;
    if let Some((pair, via)) = body.split_once(" via ") {
        let mut it = pair.split("->");
        let a = it.next()?.trim();
        let b = it.next()?.trim();
        let rank = |x: &str| -> Option<u32> { x.split(['[', ' ']).next()?.trim().parse().ok() };
        return Some(Event::Connection(Transport {
            src: rank(a)?,
            dst: rank(b)?,
            via: via.trim().to_string(),
        }));
    }
    if body.contains("->")
        || body
            .split_whitespace()
            .all(|w| w.bytes().all(|b| b.is_ascii_digit()))
    {
        return Some(Event::Ring {
            channel: ch,
            order: body.split_whitespace().collect::<Vec<_>>().join(" "),
        });
    }
    None
}

/// The class a transport string belongs to, for counting: `NET/IB/0/GDRDMA` ->
/// `NET/IB/GDRDMA`, `NET/Socket/1` -> `NET/Socket`, `P2P/IPC/read` -> `P2P/IPC`,
/// `SHM/direct/direct` -> `SHM`, `P2P/CUMEM/CE` -> `P2P/CUMEM`.
pub(crate) fn transport_class(via: &str) -> String {
    let parts: Vec<&str> = via.split('/').collect();
    match parts.first().copied() {
        Some("NET") => {
            let name = parts.get(1).copied().unwrap_or("?");
            if via.contains("GDRDMA") {
                format!("NET/{name}/GDRDMA")
            } else {
                format!("NET/{name}")
            }
        }
        Some("P2P") => format!("P2P/{}", parts.get(1).copied().unwrap_or("?")),
        Some("SHM") => "SHM".into(),
        Some(other) => other.split_whitespace().next().unwrap_or(other).to_string(),
        None => via.to_string(),
    }
}

/// The completion status: `error 12,` / `status=12 ` / `status=transport retry counter
/// exceeded(12)`.
fn completion_status(m: &str) -> Option<i64> {
    if let Some(r) = after(m, "status=") {
        // `status=12`: read where it was found (`num_after` would search again).
        if r.starts_with(|c: char| c.is_ascii_digit()) {
            return digits(r).parse().ok();
        }
        let open = r.find('(')?;
        return digits(&r[open + 1..]).parse().ok();
    }
    num_after(m, "with error ")
}

/// A completion's cause: its status (`ibv_wc_status`).
fn completion_cause(status: Option<i64>) -> &'static str {
    match status {
        Some(12) => "ib_retry_exceeded",
        Some(13) => "ib_rnr_retry_exceeded",
        Some(4) => "ib_local_protection",
        Some(10) => "ib_remote_access",
        Some(11) => "ib_remote_op",
        Some(5) => "ib_wr_flush",
        _ => "ib_completion_error",
    }
}

fn completion(m: &str) -> Event {
    let status = completion_status(m);
    let vendor_err = num_after(m, "vendor err ").or_else(|| num_after(m, "vendor_err="));
    let peer = word_after(m, "from peer ", &[]).map(|p| p.to_string());
    let local_gid = word_after(m, "localGid ", &[]).map(str::to_string);
    // 2.20-2.22 print "remoteGids" glued to the GID.
    let remote_gid = after(m, "remoteGid")
        .map(|r| r.strip_prefix('s').unwrap_or(r).trim_start())
        .and_then(|r| r.split_whitespace().next())
        .map(str::to_string);
    let hca = word_after(m, " hca ", &[]).map(str::to_string);
    Event::Failure(Failure {
        cause: completion_cause(status),
        hca,
        peer,
        local_gid,
        remote_gid,
        status,
        vendor_err,
        ..Failure::default()
    })
}

/// The errno a socket message names, by number (`returned 111(...)`) or by its text.
fn socket_errno(m: &str) -> Option<i64> {
    // `returned 111(Connection refused)`: a number glued to its text.
    if let Some(r) = after(m, "returned ") {
        let d = digits(r);
        if !d.is_empty() && r[d.len()..].starts_with('(') {
            return d.parse().ok();
        }
    }
    const TEXT: &[(&str, i64)] = &[
        ("Connection refused", 111),
        ("Connection timed out", 110),
        ("No route to host", 113),
        ("Network is unreachable", 101),
        ("Connection reset by peer", 104),
        ("Software caused connection abort", 103),
        ("exceeded timeouts", 110),
        ("timeout", 110),
    ];
    TEXT.iter().find(|(t, _)| has(m, t)).map(|(_, n)| *n)
}

/// IB async events (transport/net_ib.cc `ncclIbAsyncThreadMain`: `NET/IB : Got async
/// event : %s` up to 2.19, `NET/IB : %s:%d Got async event : %s` after; the text is
/// libibverbs' `ibv_event_type_str`).
fn async_event(m: &str) -> Event {
    let what = m.rsplit(" : ").next().unwrap_or(m).trim();
    let hca = after(m, "NET/IB : ")
        .or_else(|| after(m, "NET/IB: "))
        .and_then(|r| r.split_whitespace().next())
        .filter(|d| d.contains(':') && !d.starts_with("Got"))
        .map(|d| d.split(':').next().unwrap_or(d).to_string());
    let cause = match what {
        w if w.contains("port error") => "ib_port_error",
        w if w.contains("local catastrophic error") || w.contains("device fatal") => "ib_device_fatal",
        w if w.contains("GID table change") => "ib_gid_change",
        // Routine fabric events: the port came up, the SM re-registered or moved.
        "port active" | "client reregistration" | "LID change" | "SM change" | "P_Key change" => {
            return Event::Known;
        }
        _ => "ib_async_error",
    };
    Event::Failure(Failure {
        cause,
        hca,
        ..Failure::default()
    })
}

/// The rule a WARN message falls under: the registry entry whose texts it matches first
/// (before any field is taken out of the message: a repeat is dropped on this alone, see
/// [`WarnRule::cause`]).
#[derive(Clone, Copy)]
pub(crate) enum WarnRule {
    /// The entry matched; a family's reading (completion status, async event, QP state)
    /// picks its member from the message.
    Cause(&'static Cause),
    /// Plugin loading chatter NCCL prints as a WARN: understood, no failure.
    Known,
    /// No rule: `unclassified_failure`.
    Unknown,
}

impl PartialEq for WarnRule {
    fn eq(&self, o: &WarnRule) -> bool {
        match (self, o) {
            (WarnRule::Cause(a), WarnRule::Cause(b)) => a.id == b.id,
            (WarnRule::Known, WarnRule::Known) | (WarnRule::Unknown, WarnRule::Unknown) => true,
            _ => false,
        }
    }
}

impl Eq for WarnRule {}

impl std::fmt::Debug for WarnRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WarnRule::Cause(c) => write!(f, "Cause({})", c.id),
            WarnRule::Known => f.write_str("Known"),
            WarnRule::Unknown => f.write_str("Unknown"),
        }
    }
}

pub(crate) fn warn_rule(m: &str) -> WarnRule {
    let t = Text::new(m);
    rule_of(m, |k| t.has(k), |sets| t.maybe(sets))
}

/// [`warn_rule`] with a plain search per keyword, for the tests to compare with.
#[cfg(test)]
pub(crate) fn warn_rule_plain(m: &str) -> WarnRule {
    rule_of(m, |k| has(m, k), |_| true)
}

/// The cause of a network plugin's own WARN: `NET/<name>` other than the internal ones,
/// by its words in any case (the registry's texts for the `net_plugin_*` entries).
fn plugin_cause(m: &str) -> Option<&'static str> {
    let rest = m.strip_prefix("NET/").or_else(|| m.strip_prefix("CollNet"))?;
    let name = rest.split([' ', ':']).next().unwrap_or("");
    if matches!(name, "IB" | "Socket" | "Plugin" | "GDR") || name.starts_with("IBext") {
        return None;
    }
    let l = m.to_ascii_lowercase();
    let id = |c: &Cause| matches!(c.seen, Seen::Texts(sets) if sets.iter().any(|set| set.len() > 1 && set[1..].iter().all(|k| l.contains(&k.to_ascii_lowercase()))));
    let named = causes::CAUSES
        .iter()
        .filter(|c| c.read == Read::Plugin)
        .find(|c| id(c));
    Some(named.map_or("net_plugin_error", |c| c.id))
}

/// A net plugin that is there but did not load: the loader's line (src/plugin/net.cc
/// `NET/Plugin: Plugin load returned %d : %s : when loading %s`, 2.21; src/net.cc `NET/Plugin :
/// Plugin load (%s) returned %d : %s`, 2.12-2.18; src/plugin/plugin_open.cc `%s/Plugin: %s:
/// %s`, 2.23+) with a dlerror of the `net_plugin_load_failed` texts. The plugin's own file
/// not found (`libnccl-net.so: cannot open shared object file`, ENOENT) is no plugin at all.
fn plugin_load_failed(m: &str) -> bool {
    if !causes::of("net_plugin_load_failed").matches(&|k| has(m, k)) {
        return false;
    }
    match find(m, ": cannot open shared object file") {
        // The file dlopen could not open: the plugin itself (absent), or a library it needs.
        Some(i) => {
            let file = m[..i].rsplit([' ', ':', '/', '=']).next().unwrap_or("");
            !file.starts_with("libnccl-net")
        }
        None => true,
    }
}

/// A WARN rule: its entry, whether its texts are the previous rule's (a family: seven
/// completion statuses, four async events share one text), and the byte pairs of each of
/// its keyword sets (see [`Text`]).
struct WarnRuleEntry {
    cause: &'static Cause,
    same_texts: bool,
    sets: Vec<[u64; 16]>,
}

/// The registry's WARN rules in order, built once.
fn warn_rules() -> &'static [WarnRuleEntry] {
    static RULES: std::sync::LazyLock<Vec<WarnRuleEntry>> = std::sync::LazyLock::new(|| {
        let rules: Vec<&'static Cause> = causes::CAUSES.iter().filter(|c| c.warn_rule()).collect();
        let same = |i: usize| i > 0 && rules[i].read != Read::Plugin && rules[i - 1].seen == rules[i].seen;
        let sets = |c: &Cause| match c.seen {
            Seen::Texts(sets) => sets.iter().map(|set| Text::filter_all(set)).collect(),
            Seen::Derived(_) => Vec::new(),
        };
        (0..rules.len())
            .map(|i| WarnRuleEntry {
                cause: rules[i],
                same_texts: same(i),
                sets: sets(rules[i]),
            })
            .collect()
    });
    &RULES
}

/// The registry's WARN rules in order, given the keyword test `has`; `maybe` answers
/// whether one of a rule's keyword sets can be in the message (false only when none can),
/// so that a rule is passed over without a keyword test.
fn rule_of(m: &str, has: impl Fn(&str) -> bool, maybe: impl Fn(&[[u64; 16]]) -> bool) -> WarnRule {
    let mut plugin_tried = false;
    // A rule whose texts are the previous one's (which did not match) does not match
    // either: the family's members are not tested again.
    let mut prev_failed = false;
    for r in warn_rules() {
        let (c, same_texts) = (r.cause, r.same_texts);
        if c.read == Read::Plugin {
            // A plugin's WARN is told by its prefix, not a keyword: tested once, where the
            // first plugin entry stands.
            if !std::mem::replace(&mut plugin_tried, true)
                && let Some(id) = plugin_cause(m)
            {
                return WarnRule::Cause(causes::of(id));
            }
            prev_failed = false;
            continue;
        }
        if same_texts && prev_failed {
            continue;
        }
        if maybe(&r.sets) && c.matches(&has) {
            return WarnRule::Cause(c);
        }
        prev_failed = true;
    }
    if has("NET/Plugin") {
        return WarnRule::Known;
    }
    WarnRule::Unknown
}

impl WarnRule {
    /// The cause of [`WarnRule::event`] when the message gives it cheaply and the event has
    /// no rank and no sequence number (so cause, process and launcher label are its repeat
    /// key); `None` when only the whole reading tells (or there is no failure).
    pub fn cause(self, m: &str) -> Option<&'static str> {
        let c = match self {
            WarnRule::Cause(c) => c,
            WarnRule::Unknown => return Some("unclassified_failure"),
            WarnRule::Known => return None,
        };
        match c.read {
            Read::Completion => Some(completion_cause(completion_status(m))),
            Read::Async | Read::ModifyQp | Read::DuplicateGpu => None,
            _ => Some(c.id),
        }
    }

    /// The event the message gives under this rule (an unknown WARN is still a failure).
    pub fn event(self, m: &str) -> Event {
        let c = match self {
            WarnRule::Cause(c) => c,
            WarnRule::Known => return Event::Known,
            WarnRule::Unknown => return fail("unclassified_failure"),
        };
        match c.read {
            Read::Completion => completion(m),
            Read::Async => async_event(m),
            Read::ModifyQp => modify_qp(m),
            Read::DuplicateGpu => Event::Failure(Failure {
                cause: c.id,
                rank: num_after(m, "rank ").map(|r| r as u32),
                result: Some(5),
                ..Failure::default()
            }),
            Read::Closed => closed(c.id, m),
            Read::Connect => connect(c.id, m),
            Read::Proxy => {
                let code = num_after(m, "retcode ").or_else(|| num_after(m, "res="));
                Event::Failure(Failure {
                    cause: c.id,
                    result: code.and_then(|c| u8::try_from(c).ok()),
                    ..Failure::default()
                })
            }
            _ => fail(c.id),
        }
    }
}

/// A closed or reset connection: the peer it names, when it names an address.
fn closed(cause: &'static str, m: &str) -> Event {
    let peer = ["remote peer ", "send to ", "recv from ", " from ", " to "]
        .iter()
        .find_map(|k| word_after(m, k, &[]))
        .filter(|p| p.contains('<') || p.contains('.') || p.contains(':'));
    Event::Failure(Failure {
        cause,
        peer: peer.map(str::to_string),
        ..Failure::default()
    })
}

/// A failed socket connect: the peer, the errno, and ncclRemoteError once retries ran out.
fn connect(cause: &'static str, m: &str) -> Event {
    let peer = word_after(m, "Connect to ", &[','])
        .or_else(|| word_after(m, "connect to ", &[',']))
        .filter(|p| p.contains('<') || p.contains('.') || p.contains(':'))
        .map(str::to_string);
    Event::Failure(Failure {
        cause,
        peer,
        errno: socket_errno(m),
        result: has(m, "exceeded").then_some(6),
        ..Failure::default()
    })
}

/// A message and the byte pairs in it (a 1,024-bit Bloom filter), so that the dozens of
/// keyword tests of [`warn_rule`] mostly end without a search: a keyword whose pairs are
/// not all in the filter is not in the message (a filter only answers "maybe" wrongly,
/// and then the search decides).
///
/// The filter is built on the second test, not before the first: building it reads the
/// whole message, as one search does, and the chain's first test (`Got completion`, the
/// WARN a failing fabric prints most) decides most messages of a failure-dense log alone.
struct Text<'a> {
    s: &'a str,
    pairs: std::cell::OnceCell<[u64; 16]>,
    tests: std::cell::Cell<u32>,
}

impl<'a> Text<'a> {
    fn new(s: &'a str) -> Text<'a> {
        Text {
            s,
            pairs: std::cell::OnceCell::new(),
            tests: std::cell::Cell::new(0),
        }
    }

    fn filter(s: &str) -> [u64; 16] {
        Text::filter_all(&[s])
    }

    /// The byte pairs of all of `keys` (each on its own: no pair across two).
    fn filter_all(keys: &[&str]) -> [u64; 16] {
        let mut pairs = [0u64; 16];
        for k in keys {
            for w in k.as_bytes().windows(2) {
                let h = pair_hash(w[0], w[1]);
                pairs[h >> 6] |= 1 << (h & 63);
            }
        }
        pairs
    }

    /// Whether all the pairs of one of `sets` (a rule's keyword sets, [`Text::filter_all`])
    /// are in the message: a set with a pair not there has a keyword not there. Before the
    /// first keyword test, always (the filter is built on the second, as for [`Text::has`]).
    fn maybe(&self, sets: &[[u64; 16]]) -> bool {
        if self.tests.get() == 0 {
            return true;
        }
        let pairs = self.pairs.get_or_init(|| Text::filter(self.s));
        // Whole words, no early exit: sixteen and-nots the compiler can vectorise cost less
        // than the branches of a pair-by-pair test per keyword.
        sets.iter()
            .any(|set| set.iter().zip(pairs).fold(0, |acc, (k, p)| acc | (k & !p)) == 0)
    }

    fn has(&self, k: &str) -> bool {
        let n = self.tests.get();
        self.tests.set(n + 1);
        if n == 0 {
            return has(self.s, k);
        }
        let pairs = self.pairs.get_or_init(|| Text::filter(self.s));
        let maybe = k.as_bytes().windows(2).all(|w| {
            let h = pair_hash(w[0], w[1]);
            pairs[h >> 6] & (1 << (h & 63)) != 0
        });
        maybe && has(self.s, k)
    }
}

fn pair_hash(a: u8, b: u8) -> usize {
    ((a as usize) << 3 ^ (b as usize) ^ (b as usize) >> 5) & 1023
}

fn modify_qp(m: &str) -> Event {
    // "failed with 110 Connection timed out, on dev mlx5_0:1, curr state INIT, next
    // state RTR, local GID index 3, local GID ::ffff:.., remote GID ::ffff:.." (2.27+).
    let hca = word_after(m, "on dev ", &[',']).map(|d| d.split(':').next().unwrap_or(d).to_string());
    // "local GID index 3, local GID ::ffff:..": the address follows the index.
    let rest = after(m, "local GID index").unwrap_or(m);
    let local_gid = word_after(rest, "local GID ", &[',']).map(str::to_string);
    let remote_gid = word_after(m, "remote GID ", &[',']).map(str::to_string);
    let einval = has(m, "Invalid argument");
    let link_local = local_gid.as_deref().is_some_and(|g| g.starts_with("fe80"));
    let cause = if einval || link_local {
        "gid_index_unusable"
    } else {
        "ib_modify_qp_failed"
    };
    Event::Failure(Failure {
        cause,
        hca,
        local_gid,
        remote_gid,
        status: num_after(m, "failed with "),
        ..Failure::default()
    })
}

/// The rank PyTorch's own `[Rank N]` tag names: the global rank only without a process
/// group tag (`[PG ID 1 PG GUID 3 Rank 0]` is the rank inside that group, not the job's).
fn pytorch_rank(s: &str) -> Option<u32> {
    if has(s, "[PG ") {
        return None;
    }
    num_after(s, "[Rank ").map(|r| r as u32)
}

/// The host nccl-tests names before its CUDA failure (`%s: Test CUDA failure %s:%d '%s'`).
pub(crate) fn plain_host(s: &str) -> Option<&str> {
    let h = s[..find(s, ": Test CUDA failure")?].trim();
    (!h.is_empty() && !h.contains(char::is_whitespace)).then_some(h)
}

/// A line without an NCCL header: the version banner, PyTorch's ProcessGroupNCCL.
pub(crate) fn classify_plain(s: &str) -> Option<Event> {
    // CUDA's 802 (cudaErrorSystemNotReady) before NCCL ever runs, in PyTorch's words
    // (`CUDA error: system not yet initialized`, `Error 802: system not yet initialized`,
    // `cuda runtime error (802) : system not yet initialized`) or nccl-tests'.
    if has(s, "system not yet initialized") {
        return Some(Event::Failure(Failure {
            cause: "cuda_system_not_ready",
            rank: pytorch_rank(s),
            ..Failure::default()
        }));
    }
    if let Some(i) = find(s, "NCCL version ") {
        // The banner is its own line ("NCCL version 2.18.5+cuda12.0"), possibly prefixed.
        let v = s[i + 13..].split_whitespace().next()?;
        if v.starts_with(|c: char| c.is_ascii_digit()) && !has(s, "NCCL error") {
            return Some(Event::Version(v.trim_end_matches(',').to_string()));
        }
    }
    if has(s, "Watchdog caught collective operation timeout") {
        let seq = num_after(s, "SeqNum=").map(|v| v as u64);
        let op = word_after(s, "OpType=", &[',', ')']).map(str::to_string);
        return Some(Event::Failure(Failure {
            cause: "collective_timeout",
            seq,
            op,
            rank: pytorch_rank(s),
            ..Failure::default()
        }));
    }
    // PyTorch >= 2.2 after a timeout: "Timeout at NCCL work: 1580, last enqueued NCCL work:
    // 1581, last completed NCCL work: 1579." A rank that enqueued S reached S.
    // Its 2.6 wording: "PG status: last enqueued work: 2855, last completed work: 2846".
    if let Some(e) = num_after(s, "last enqueued NCCL work:").or_else(|| num_after(s, "last enqueued work:"))
    {
        return Some(Event::Progress {
            rank: pytorch_rank(s),
            enqueued: e.max(0) as u64,
        });
    }
    if let Some(ev) = bare_connection(s) {
        return Some(ev);
    }
    if let Some(ev) = quoted(s) {
        return Some(ev);
    }
    return_code(s)
}

/// A connection line pasted without NCCL's header (`Channel 00/0 : 0[0] -> 1[0] [send] via
/// NET/IB/0/GDRDMA`, behind a launcher prefix or none): the connection all the same.
fn bare_connection(s: &str) -> Option<Event> {
    let i = find(s, "Channel ").or_else(|| find(s, "Ring "))?;
    if !has(&s[i..], " via ") || !has(&s[i..], "->") {
        return None;
    }
    match channel_line(s[i..].trim_end()) {
        Some(ev @ Event::Connection(_)) => Some(ev),
        _ => None,
    }
}

/// NCCL's own words on a line without its header: PyTorch's (and the frameworks') `Last
/// error:` text (`ncclGetLastError`, NCCL 2.19+: the last WARN's message, after the
/// exception or on the next line, often behind `[rankN]:`), or a bare NCCL message. Read by
/// the registry's WARN rules; a phrase any program prints (a closed connection, `Connect to
/// ... failed` without NCCL's socket function) counts only after `Last error:`.
fn quoted(s: &str) -> Option<Event> {
    let (text, stated) = match find(s, "Last error:") {
        Some(i) => (s[i + 11..].trim(), true),
        None => (strip_prefix_tags(s), false),
    };
    if text.is_empty() || text.starts_with("Unknown NCCL Error") {
        return None;
    }
    let rule = warn_rule(text);
    let WarnRule::Cause(c) = rule else {
        return None;
    };
    // NCCL's socket and network functions name themselves first (`socketProgressOpt:`,
    // `socketStartConnect:`, `NET/IB :`); 2.0-2.3 said `Call to connect`.
    let nccl_words = match c.read {
        Read::Closed | Read::Connect => {
            ["socket", "ncclSocket", "NET/", "Net :"]
                .iter()
                .any(|p| text.starts_with(p))
                || has(text, "PollConnect")
                || has(text, "Call to connect")
        }
        _ => true,
    };
    if !stated && !nccl_words {
        return None;
    }
    match rule.event(text) {
        Event::Failure(mut f) => {
            f.rank = f.rank.or_else(|| pytorch_rank(s));
            Some(Event::Failure(f))
        }
        other => Some(other),
    }
}

/// The line without the launcher's and logger's leading tags (`[rank3]:`, `[default0]:`,
/// `[E ProcessGroupNCCL.cpp:1]`).
fn strip_prefix_tags(s: &str) -> &str {
    let mut t = s.trim_start();
    while t.starts_with('[') {
        let Some(end) = t.find(']') else { break };
        t = t[end + 1..].trim_start_matches(':').trim_start();
    }
    t
}

/// PyTorch's exception for an NCCL return code (`NCCL error in: ..., unhandled system
/// error`, `ncclSystemError: System call ...`): the class the registry's `codes` name.
fn return_code(s: &str) -> Option<Event> {
    const NCCL: &[&str] = &[
        "ProcessGroupNCCL",
        "NCCL failure",
        "ncclSystemError",
        "ncclRemoteError",
        "ncclUnhandledCudaError",
        "ncclInternalError",
        "ncclInvalidUsage",
        "ncclInvalidArgument",
        "NCCL error",
    ];
    if !NCCL.iter().any(|k| has(s, k)) {
        return None;
    }
    let Some((c, result)) = causes::code_in(s, has) else {
        return Some(Event::Known);
    };
    Some(Event::Failure(Failure {
        cause: c.id,
        rank: pytorch_rank(s),
        result: Some(result),
        ..Failure::default()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(level: Level, m: &str) -> Failure {
        match classify(level, m) {
            Some(Event::Failure(f)) => f,
            other => panic!("{m}: {other:?}"),
        }
    }

    #[test]
    fn cuda_802_in_every_wording() {
        assert_eq!(
            warn_rule("Cuda failure 802 'system not yet initialized'").cause(""),
            Some("cuda_system_not_ready")
        );
        assert_eq!(
            warn_rule("Cuda failure 'system not yet initialized'").cause(""),
            Some("cuda_system_not_ready")
        );
        for s in [
            "RuntimeError: CUDA error: system not yet initialized",
            "UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). Error 802: system not yet initialized (Triggered internally at  ../c10/cuda/CUDAFunctions.cpp:112.)",
            "RuntimeError: cuda runtime error (802) : system not yet initialized at /opt/conda/THCGeneral.cpp:50",
            "test: Test CUDA failure common.cu:941 'system not yet initialized'",
        ] {
            assert!(
                matches!(
                    classify_plain(s),
                    Some(Event::Failure(Failure {
                        cause: "cuda_system_not_ready",
                        ..
                    }))
                ),
                "{s}"
            );
        }
        assert_eq!(
            plain_host("test: Test CUDA failure common.cu:941 'system not yet initialized'"),
            Some("test")
        );
        assert_eq!(
            plain_host("RuntimeError: CUDA error: system not yet initialized"),
            None
        );
    }

    #[test]
    fn completions_by_version() {
        // <= 2.9
        let f = failure(
            Level::Warn,
            "NET/IB : Got completion with error 12, opcode 1, len 0, vendor err 129",
        );
        assert_eq!(
            (f.cause, f.status, f.vendor_err, f.peer.clone()),
            ("ib_retry_exceeded", Some(12), Some(129), None)
        );
        // 2.10-2.17
        let f = failure(
            Level::Warn,
            "NET/IB : Got completion from peer fe80::966d:ae03:8b:df78%ib0<53249> with error 4, opcode 32564, len 32564, vendor err 81 (Send)",
        );
        assert_eq!(
            (f.cause, f.status, f.vendor_err),
            ("ib_local_protection", Some(4), Some(81))
        );
        assert_eq!(f.peer.as_deref(), Some("fe80::966d:ae03:8b:df78%ib0<53249>"));
        // 2.18-2.19
        let f = failure(
            Level::Warn,
            "NET/IB : Got completion from peer 10.0.0.2<3> with error 12, opcode 0, len 0, vendor err 129 (Recv) localGid ::ffff:10.0.0.1 remoteGid ::ffff:10.0.0.2",
        );
        assert_eq!(f.local_gid.as_deref(), Some("::ffff:10.0.0.1"));
        assert_eq!(f.remote_gid.as_deref(), Some("::ffff:10.0.0.2"));
        // 2.20-2.22, remoteGids glued, and 2.23's hca
        let f = failure(
            Level::Warn,
            "NET/IB : Got completion from peer 172.36.143.59<44206> with status=5 opcode=32656 len=32659 vendor err 249 (Recv) localGid ::ffff:29.87.88.182 remoteGids::ffff:29.87.4.221 hca mlx5_3",
        );
        assert_eq!(
            (f.cause, f.status, f.vendor_err),
            ("ib_wr_flush", Some(5), Some(249))
        );
        assert_eq!(f.remote_gid.as_deref(), Some("::ffff:29.87.4.221"));
        assert_eq!(f.hca.as_deref(), Some("mlx5_3"));
        // >= 2.28.7
        let f = failure(
            Level::Warn,
            "NET/IB: Got completion from peer 10.1.1.2<4000> with status=transport retry counter exceeded(12) opcode=IBV_WC_SEND(0) vendor_err=129 localGid ::ffff:10.1.1.1 remoteGids::ffff:10.1.1.2 hca mlx5_0",
        );
        assert_eq!(
            (f.cause, f.status, f.vendor_err),
            ("ib_retry_exceeded", Some(12), Some(129))
        );
    }

    #[test]
    fn modify_qp() {
        let f = failure(
            Level::Warn,
            "Call to ibv_modify_qp failed with 110 Connection timed out, on dev mlx5_3:1, curr state INIT, next state RTR, local GID index 3, local GID ::ffff:10.0.0.1, remote GID ::ffff:10.0.1.1",
        );
        assert_eq!(f.cause, "ib_modify_qp_failed");
        assert_eq!(f.hca.as_deref(), Some("mlx5_3"));
        assert_eq!(f.local_gid.as_deref(), Some("::ffff:10.0.0.1"));
        assert_eq!(f.remote_gid.as_deref(), Some("::ffff:10.0.1.1"));
        assert_eq!(f.status, Some(110));
        let f = failure(
            Level::Warn,
            "Call to ibv_modify_qp failed with error Invalid argument",
        );
        assert_eq!(f.cause, "gid_index_unusable");
    }

    #[test]
    fn connections_old_and_new() {
        for (m, src, dst, via, class) in [
            (
                "Ring 00 : 26[2] -> 24[0] via P2P/IPC",
                26,
                24,
                "P2P/IPC",
                "P2P/IPC",
            ),
            (
                "Ring 00 : 34 -> 33 [send] via NET/Socket/0",
                34,
                33,
                "NET/Socket/0",
                "NET/Socket",
            ),
            (
                "Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0/GDRDMA",
                7,
                8,
                "NET/IB/0/GDRDMA",
                "NET/IB/GDRDMA",
            ),
            (
                "Channel 01/0 : 8[0] -> 15[7] via P2P/IPC/read",
                8,
                15,
                "P2P/IPC/read",
                "P2P/IPC",
            ),
            (
                "Channel 00 : 2[1] -> 0[0] via SHM/direct/direct",
                2,
                0,
                "SHM/direct/direct",
                "SHM",
            ),
            (
                "Channel 00 : 2[a000] -> 3[b000] via P2P/direct pointer",
                2,
                3,
                "P2P/direct pointer",
                "P2P/direct pointer",
            ),
            (
                "Channel 03/0 : 1[1] -> 0[0] via P2P/CUMEM/read",
                1,
                0,
                "P2P/CUMEM/read",
                "P2P/CUMEM",
            ),
        ] {
            match classify(Level::Info, m) {
                Some(Event::Connection(t)) => {
                    assert_eq!((t.src, t.dst, t.via.as_str()), (src, dst, via), "{m}");
                    assert_eq!(transport_class(&t.via), class, "{m}");
                }
                other => panic!("{m}: {other:?}"),
            }
        }
        assert!(matches!(
            classify(Level::Info, "Channel 00/02 :    0   1"),
            Some(Event::Ring { channel: 0, .. })
        ));
        assert!(matches!(
            classify(Level::Info, "Ring 02 : 2 -> 0 -> 1"),
            Some(Event::Ring { channel: 2, .. })
        ));
    }

    #[test]
    fn setup_lines() {
        assert_eq!(
            classify(
                Level::Info,
                "NET/IB : Using [0]mlx5_10:1/RoCE [1]mlx5_11:1/RoCE [RO]; OOB enp220s0np0:11.1.128.136<0>"
            ),
            Some(Event::IbUsing {
                hcas: vec!["mlx5_10:1/RoCE".into(), "mlx5_11:1/RoCE".into()],
                oob: Some("enp220s0np0:11.1.128.136<0>".into())
            })
        );
        assert_eq!(
            classify(Level::Info, "Bootstrap : Using [0]lo:127.0.0.1<0>"),
            Some(Event::Bootstrap(vec!["lo:127.0.0.1<0>".into()]))
        );
        assert_eq!(
            classify(Level::Info, "NCCL version 2.29.2+cuda12.8"),
            Some(Event::Version("2.29.2+cuda12.8".into()))
        );
        assert_eq!(
            classify(
                Level::Info,
                "comm 0x5b0bc60 rank 3 nRanks 4 nNodes 2 localRanks 2 localRank 1 MNNVL 0"
            ),
            Some(Event::Comm {
                rank: 3,
                nranks: Some(4),
                local_rank: Some(1),
                cuda_dev: None
            })
        );
        assert_eq!(
            classify(
                Level::Info,
                "GPU Direct RDMA Disabled for GPU 42000 / HCA 0 (distance 6 > 4)"
            ),
            Some(Event::Gdr {
                hca: "HCA 0".into(),
                enabled: false
            })
        );
        assert_eq!(
            classify(
                Level::Info,
                "NET/Socket : GPU Direct RDMA Disabled for HCA 0 'bond0'"
            ),
            Some(Event::Known)
        );
    }

    #[test]
    fn pytorch() {
        let s = "[rank4]:[E321 02:07:08.414640780 ProcessGroupNCCL.cpp:607] [Rank 4] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) ran for 600067 milliseconds before timing out.";
        match classify_plain(s) {
            Some(Event::Failure(f)) => {
                assert_eq!(
                    (f.cause, f.rank, f.seq, f.op.as_deref()),
                    ("collective_timeout", Some(4), Some(1580), Some("ALLREDUCE"))
                );
            }
            other => panic!("{other:?}"),
        }
        let old = "[E ProcessGroupNCCL.cpp:737] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=469508, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1802212 milliseconds before timing out.";
        assert!(matches!(
            classify_plain(old),
            Some(Event::Failure(Failure {
                seq: Some(469508),
                rank: Some(1),
                ..
            }))
        ));
    }

    fn cause_of(e: Option<Event>) -> Option<&'static str> {
        match e {
            Some(Event::Failure(f)) => Some(f.cause),
            _ => None,
        }
    }

    /// PyTorch's `getNcclErrorDetailStr` (torch/csrc/distributed/c10d/NCCLUtils.cpp):
    /// `interpret + "\nLast error:\n" + ncclGetLastError(NULL)`, where NCCL's last error is
    /// the last WARN's message as formatted (src/debug.cc:268, `vsnprintf(ncclLastError,
    /// ..., fmt, vcopy)`): the text after `Last error:` is a WARN message without its header.
    #[test]
    fn last_error_text_is_read_as_the_warn_it_quotes() {
        for (line, cause) in [
            // misc/socket.cc `socketStartConnect: Connect to %s failed : %s`
            (
                "[rank1]: socketStartConnect: Connect to 10.0.0.2<35000> failed : Software caused connection abort",
                "socket_connect_failed",
            ),
            // transport/net_ib.cc `NET/IB : Got completion from peer %s with status=%d ...`
            (
                "[rank0]: NET/IB : Got completion from peer 10.0.0.2<4000> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:10.0.0.1 remoteGids::ffff:10.0.0.2 hca mlx5_0",
                "ib_retry_exceeded",
            ),
            // misc/ibvwrap.cc `Call to ibv_reg_mr failed with error %s`
            (
                "Call to ibv_reg_mr failed with error Cannot allocate memory",
                "ib_reg_mr_failed",
            ),
            // include/checks.h CUDACHECK `Cuda failure %d '%s'`
            ("[default3]:Cuda failure 2 'out of memory'", "cuda_oom"),
            // A closed connection counts after `Last error:` on the same line only.
            (
                "Last error: socketProgress: Connection closed by remote peer node2<53422>",
                "remote_process_exited",
            ),
            // misc/socket.cc `socketProgressOpt: Call to recv from %s failed : %s`
            (
                "socketProgressOpt: Call to recv from 10.0.0.2<33759> failed : Connection reset by peer",
                "remote_process_exited",
            ),
        ] {
            assert_eq!(cause_of(classify_plain(line)), Some(cause), "{line}");
        }
        // Words any program prints, with no `Last error:` before them, are no NCCL failure.
        for line in [
            "worker: Connection reset by peer",
            "redis: Connect to cache failed",
            "[rank0]: Last error:",
            "[rank0]: Last error: Unknown NCCL Error",
        ] {
            assert_eq!(cause_of(classify_plain(line)), None, "{line}");
        }
        // The return code alone is generic (the registry's codes).
        let f = classify_plain(
            "[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5",
        );
        assert!(
            matches!(
                f,
                Some(Event::Failure(Failure {
                    cause: "system_error",
                    result: Some(2),
                    rank: None,
                    ..
                }))
            ),
            "{f:?}"
        );
    }

    /// NCCL's WARNs that a feature needs a newer CUDA driver, runtime or NCCL:
    /// src/include/alloc.h:418 `CUMEM not supported prior to CUDA 11.3`, :134 `CUMEM Host is
    /// not supported prior to CUDA 12.2`, src/enqueue.cc:2820 `One-sided RMA requires CUDA
    /// driver 12.5 or later (found %d.%d).`, src/misc/strongstream.cc:91 `NCCL cannot be
    /// captured in a graph if either it wasn't built with CUDA runtime >= 11.3 or ...`,
    /// src/dev_runtime.cc:1428 `NCCL library is too old. ...`, and CUDACHECK's text for
    /// cudaErrorInsufficientDriver (35).
    #[test]
    fn requirement_warns_are_version_requirement() {
        for m in [
            "CUMEM not supported prior to CUDA 11.3",
            "CUMEM Host is not supported prior to CUDA 12.2",
            "One-sided RMA requires CUDA driver 12.5 or later (found 12.4).",
            "NCCL cannot be captured in a graph if either it wasn't built with CUDA runtime >= 11.3 or if the installed CUDA driver < R465.",
            "NCCL library is too old. This application was compiled with NCCL version 2.29.2, but is running with NCCL 2.27.3",
            "Cuda failure 35 'CUDA driver version is insufficient for CUDA runtime version'",
        ] {
            assert_eq!(warn_rule(m).cause(m), Some("version_requirement"), "{m}");
        }
    }

    /// The net plugin loader: src/net.cc (2.12-2.18) `NET/Plugin : Plugin load (%s) returned
    /// %d : %s`, src/plugin/net.cc (2.19-2.22) `NET/Plugin: Plugin load returned %d : %s when
    /// loading %s`, src/plugin/plugin_open.cc:100 (2.23+) `%s/Plugin: %s: %s` with dlerror.
    /// A plugin there but unloadable is a finding; the plugin's own file missing (ENOENT,
    /// plugin_open.cc `tryOpenLib`) and `No plugin found` are not.
    #[test]
    fn a_plugin_that_fails_to_load_is_seen_and_an_absent_one_is_not() {
        for m in [
            "NET/Plugin : Plugin load (libnccl-net.so) returned 2 : /usr/lib/libnccl-net.so: undefined symbol: ncclNetPlugin_v6",
            "NET/Plugin: Plugin load returned 0 : /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.34' not found (required by /opt/aws-ofi-nccl/lib/libnccl-net.so) when loading libnccl-net.so",
            "NET/Plugin: libnccl-net.so: libfabric.so.1: cannot open shared object file: No such file or directory",
        ] {
            assert_eq!(
                cause_of(classify(Level::Info, m)),
                Some("net_plugin_load_failed"),
                "{m}"
            );
        }
        for m in [
            "NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open shared object file: No such file or directory",
            "NET/Plugin : No plugin found, using internal implementation",
            "NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin.",
            "NET/Plugin : dlerror=libnccl-net.so: cannot open shared object file: No such file or directory No plugin found (libnccl-net.so), using internal implementation",
        ] {
            assert_eq!(cause_of(classify(Level::Info, m)), None, "{m}");
        }
    }

    /// Connection lines pasted without NCCL's header (src/transport/net.cc:324 `Channel
    /// %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s%s`, :377 the same `[receive]`).
    #[test]
    fn connection_lines_without_a_header_are_read() {
        for (l, via) in [
            (
                "Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA",
                "NET/IB/0/GDRDMA",
            ),
            (
                "[rank1]: Channel 00/0 : 0[0] -> 1[0] [receive] via NET/IB/0",
                "NET/IB/0",
            ),
            ("  Channel 01/1 : 2[2] -> 3[3] via P2P/IPC/read", "P2P/IPC/read"),
        ] {
            match classify_plain(l) {
                Some(Event::Connection(t)) => assert_eq!(t.via, via, "{l}"),
                other => panic!("{l}: {other:?}"),
            }
        }
        assert_eq!(classify_plain("Channel 5 of the TV -> news"), None);
    }
}
