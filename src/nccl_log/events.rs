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
pub fn result_name(code: u8) -> Option<&'static str> {
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

/// Where `needle` starts in `hay`: memchr for its first byte, then a compare. A line runs
/// through dozens of these on short text, where building a two-way or SIMD searcher per
/// call (std's `contains`, memchr's `memmem::find`) costs more than the search itself.
pub(super) fn find(hay: &str, needle: &str) -> Option<usize> {
    let (h, n) = (hay.as_bytes(), needle.as_bytes());
    let Some((&first, rest)) = n.split_first() else {
        return Some(0);
    };
    let mut from = 0;
    while let Some(j) = memchr::memchr(first, &h[from..]) {
        let at = from + j;
        // The second byte first, inline: a needle that starts with a space or a common
        // letter has dozens of false starts per line, each a memcmp call otherwise.
        let second = rest.first().is_none_or(|b| h.get(at + 1) == Some(b));
        if second && starts_with(&h[at + 1..], rest) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

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
pub fn classify(level: Level, msg: &str) -> Option<Event> {
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
    // libibverbs missing (misc/ibvwrap.cc `wrap_ibv_symbols`, INFO from 2.8 on): the IB
    // transport is off and NCCL falls back to sockets.
    if m.starts_with("Failed to open libibverbs") {
        return Some(fail("ib_verbs_unavailable"));
    }
    // NCCL 2.4-2.6 (`bootstrap.cc`/`net_socket.cc`): "NET : Using interface eth0:10.0.0.1<0>".
    if let Some(r) = m.strip_prefix("NET : Using interface") {
        return Some(Event::Bootstrap(iface_list(r)));
    }
    let strip = |prefixes: &[&str]| prefixes.iter().find_map(|p| m.strip_prefix(p));
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
    // Setup chatter NCCL prints at INFO that carries nothing the summary uses.
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
    if CHATTER.iter().any(|c| m.starts_with(c)) {
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
pub fn transport_class(via: &str) -> String {
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
        if r.starts_with(|c: char| c.is_ascii_digit()) {
            return num_after(m, "status=");
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

/// A WARN message: the cause it names, or `None` when no rule knows it.
fn warn(m: &str) -> Option<Event> {
    match warn_rule(m) {
        WarnRule::Unknown => None,
        r => Some(r.event(m)),
    }
}

/// The rule a WARN message falls under: the one ordered chain of tests, before any field is
/// taken out of the message (a repeat is dropped on this alone, see [`WarnRule::cause`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WarnRule {
    Completion,
    Async,
    ModifyQp,
    /// A cause with no fields.
    Fixed(&'static str),
    DuplicateGpu,
    Closed,
    Connect,
    Proxy,
    Known,
    /// No rule: `unclassified_failure`.
    Unknown,
}

pub fn warn_rule(m: &str) -> WarnRule {
    let t = Text::new(m);
    rule_of(m, |k| t.has(k))
}

/// [`warn_rule`] with a plain search per keyword, for the tests to compare with.
#[cfg(test)]
pub fn warn_rule_plain(m: &str) -> WarnRule {
    rule_of(m, |k| has(m, k))
}

/// The cause of a network plugin's own WARN: `NET/<name>` other than the internal ones.
fn plugin_cause(m: &str) -> Option<&'static str> {
    let rest = m.strip_prefix("NET/").or_else(|| m.strip_prefix("CollNet"))?;
    let name = rest.split([' ', ':']).next().unwrap_or("");
    if matches!(name, "IB" | "Socket" | "Plugin" | "GDR") || name.starts_with("IBext") {
        return None;
    }
    let l = m.to_ascii_lowercase();
    Some(if l.contains("register memory") || l.contains("mr_reg") || l.contains("memory registration") {
        "net_plugin_reg_mr_failed"
    } else if l.contains("provider") || l.contains("fi_getinfo") || l.contains("protocol") {
        "net_plugin_provider_error"
    } else {
        "net_plugin_error"
    })
}

/// The chain, given the keyword test `has`.
fn rule_of(m: &str, has: impl Fn(&str) -> bool) -> WarnRule {
    use WarnRule::*;
    if has("Got completion") {
        return Completion;
    }
    // A network plugin's own WARN (aws-ofi-nccl `NET/OFI`, UCX, other net and CollNet
    // plugins); the internal `NET/IB`, `NET/Socket` and plugin loading have rules of theirs.
    if let Some(c) = plugin_cause(m) {
        return Fixed(c);
    }
    // graph/search.cc importing NCCL_GRAPH_FILE: a graph written for other GPUs or NICs.
    if has("XML Import Channel") {
        return Fixed("graph_file_error");
    }
    // graph/xml.h reading a node the topology file left out (`Attribute arch of node cpu
    // not found`): a static file written for another machine or NCCL version.
    if has("Attribute ") && has(" of node ") && has("not found") {
        return Fixed("topology_file_error");
    }
    // graph/xml.cc parsing NCCL_TOPO_FILE (or a topology dumped by another version).
    if has("XML Parse") || has("XML Mismatch") || has("XML Topology") || has("XML parser") || has("XML Import") {
        return Fixed("topology_file_error");
    }
    if has("async event") || has("async fatal event") {
        return Async;
    }
    if has("ibv_modify_qp") {
        return ModifyQp;
    }
    if has("ibv_reg_mr") || has("ibv_reg_dmabuf_mr") {
        return Fixed("ib_reg_mr_failed");
    }
    if has("ibv_open_device") || has("Unable to open device") {
        return Fixed("ib_device_open_failed");
    }
    if m.starts_with("Failed to open libibverbs") {
        return Fixed("ib_verbs_unavailable");
    }
    if has("Call to ibv_") || has("ibv_") && has("failed") {
        return Fixed("system_error");
    }
    let lower_cuda = has("Cuda failure") || has("CUDA failure") || has("cuda failure");
    // CUDACHECK (include/checks.h): `Cuda failure %d '%s'` (`'%s'` alone before 2.19).
    if (lower_cuda || has("cudaMalloc") || has("cuMem")) && has("out of memory") {
        return Fixed("cuda_oom");
    }
    // cudaErrorSystemNotReady (802): an NVSwitch system whose Fabric Manager has not set up
    // the NVLink fabric (`Cuda failure 802 'system not yet initialized'`).
    if has("system not yet initialized") {
        return Fixed("cuda_system_not_ready");
    }
    if lower_cuda {
        return Fixed("cuda_error");
    }
    // misc/shmutils.cc `ncclShmOpen`: `Error: failed to extend %s to %ld bytes`, `failed to
    // create shared memory file`; 2.4-2.11 include/shm.h `shmOpen`: `Error while creating
    // shared memory segment %s (size %d)`; transport/net.cc `netCreateShm`.
    // 2.4-2.7 include/shm.h `shmOpen`: `Call to posix_fallocate failed : %s` first.
    if has("shared memory") || has("/dev/shm") || has("shm_open") || has("posix_fallocate") {
        return Fixed("shm_alloc_failed");
    }
    // init.cc `initTransportsRank`: `Duplicate GPU detected : rank %d and rank %d both on
    // CUDA device %lx` (returns ncclInvalidUsage).
    if has("Duplicate GPU detected") {
        return DuplicateGpu;
    }
    // bootstrap.cc `bootstrapRoot`: `Bootstrap Root : mismatch in rank count from procs
    // %d : %d`, `rank %d of %d ranks has already checked in`.
    if has("mismatch in rank count") || has("has already checked in") {
        return Fixed("bootstrap_rank_mismatch");
    }
    if has("no socket interface found")
        || has("no usable interface")
        || has("No usable listening interface")
        || has("no interface found")
        // misc/socket.cc `ncclSocketInit` given no address (NCCL_SOCKET_IFNAME matched none).
        || has("nor AF_INET6")
        // 2.3 include/socket.h `createListenSocket` on an address of a family the kernel
        // lacks: nccl#210, where the maintainers found no IP interface on the machine.
        || has("Socket creation failed") && has("Address family not supported")
    {
        return Fixed("socket_no_interface");
    }
    if has("Connection closed by remote peer")
        || has("Connection reset by peer")
        || has("Broken pipe")
        || has("remote process exited")
    {
        return Closed;
    }
    // The socket-connect family (misc/socket.cc `socketPollConnect`/`socketConnect`, 2.19+:
    // `socketPollConnect: Connect to %s returned %d(%s) errno %d(%s)`, `exceeded timeouts
    // (%d)`, `exceeded retries (%d)`; later `connect to %s returned %s, exceeded error retry
    // count after %d attempts`; 2.4-2.8 include/socket.h `connectAddress`: `Call to connect
    // timeout : %s`, `Call to connect returned %s, retrying`, `Connect to %s failed : %s`).
    if has("PollConnect")
        || has("Call to connect")
        || has("exceeded retries")
        || has("connect() failed")
        || ((has("Connect to") || has("connect to")) && (has("failed") || has("returned")))
    {
        return Connect;
    }
    // proxy.cc `proxyServiceInitOp`/`ncclProxyService`: `[Proxy Service %d] Failed to
    // execute operation %s from rank %d, retcode %d`; `[Service thread] Error encountered
    // progressing operation=%s, res=%d, closing connection`; `Proxy Call to rank %d failed`.
    if has("Proxy Service") || has("[Service thread]") || has("Proxy Call") || has("ncclProxyConnect") {
        return Proxy;
    }
    if has("Message truncated") || has("Mismatched NCCL version") || has("version mismatch") {
        return Fixed("version_mismatch");
    }
    if has("collective mismatch") || has("Mismatched collective") {
        return Fixed("collective_mismatch");
    }
    if has("Could not open XML topology file") {
        return Fixed("topology_file_unreadable");
    }
    if has("NET/Plugin") {
        return Known;
    }
    Unknown
}

impl WarnRule {
    /// The cause of [`WarnRule::event`] when the message gives it cheaply and the event has
    /// no rank and no sequence number (so cause, process and launcher label are its repeat
    /// key); `None` when only the whole reading tells (or there is no failure).
    pub fn cause(self, m: &str) -> Option<&'static str> {
        match self {
            WarnRule::Completion => Some(completion_cause(completion_status(m))),
            WarnRule::Fixed(c) => Some(c),
            WarnRule::Closed => Some("remote_process_exited"),
            WarnRule::Connect => Some("socket_connect_failed"),
            WarnRule::Proxy => Some("proxy_connection_failed"),
            WarnRule::Unknown => Some("unclassified_failure"),
            WarnRule::Async | WarnRule::ModifyQp | WarnRule::DuplicateGpu | WarnRule::Known => None,
        }
    }

    /// The event the message gives under this rule (an unknown WARN is still a failure).
    pub fn event(self, m: &str) -> Event {
        match self {
            WarnRule::Completion => completion(m),
            WarnRule::Async => async_event(m),
            WarnRule::ModifyQp => modify_qp(m),
            WarnRule::Fixed(c) => fail(c),
            WarnRule::DuplicateGpu => Event::Failure(Failure {
                cause: "duplicate_gpu",
                rank: num_after(m, "rank ").map(|r| r as u32),
                result: Some(5),
                ..Failure::default()
            }),
            WarnRule::Closed => {
                let peer = ["remote peer ", "send to ", "recv from ", " from ", " to "]
                    .iter()
                    .find_map(|k| word_after(m, k, &[]))
                    .filter(|p| p.contains('<') || p.contains('.') || p.contains(':'));
                Event::Failure(Failure {
                    cause: "remote_process_exited",
                    peer: peer.map(str::to_string),
                    ..Failure::default()
                })
            }
            WarnRule::Connect => {
                let peer = word_after(m, "Connect to ", &[','])
                    .or_else(|| word_after(m, "connect to ", &[',']))
                    .filter(|p| p.contains('<') || p.contains('.') || p.contains(':'))
                    .map(str::to_string);
                Event::Failure(Failure {
                    cause: "socket_connect_failed",
                    peer,
                    errno: socket_errno(m),
                    result: has(m, "exceeded").then_some(6),
                    ..Failure::default()
                })
            }
            WarnRule::Proxy => {
                let code = num_after(m, "retcode ").or_else(|| num_after(m, "res="));
                Event::Failure(Failure {
                    cause: "proxy_connection_failed",
                    result: code.and_then(|c| u8::try_from(c).ok()),
                    ..Failure::default()
                })
            }
            WarnRule::Known => Event::Known,
            WarnRule::Unknown => fail("unclassified_failure"),
        }
    }
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
        let mut pairs = [0u64; 16];
        for w in s.as_bytes().windows(2) {
            let h = pair_hash(w[0], w[1]);
            pairs[h >> 6] |= 1 << (h & 63);
        }
        pairs
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
pub fn plain_host(s: &str) -> Option<&str> {
    let h = s[..find(s, ": Test CUDA failure")?].trim();
    (!h.is_empty() && !h.contains(char::is_whitespace)).then_some(h)
}

/// A line without an NCCL header: the version banner, PyTorch's ProcessGroupNCCL.
pub fn classify_plain(s: &str) -> Option<Event> {
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
    // NCCL's own WARN text repeated by PyTorch after "Last error:" (no NCCL marker).
    const OWN: &[&str] = &[
        "Duplicate GPU detected",
        "Error while creating shared memory segment",
        "Error while attaching to shared memory segment",
        "mismatch in rank count",
        "PollConnect",
        "nor AF_INET6",
    ];
    if OWN.iter().any(|o| has(s, o)) {
        return warn(s);
    }
    if has(s, "ProcessGroupNCCL")
        || has(s, "NCCL failure")
        || has(s, "ncclSystemError")
        || has(s, "ncclRemoteError")
        || has(s, "ncclUnhandledCudaError")
        || has(s, "ncclInternalError")
        || has(s, "ncclInvalidUsage")
        || has(s, "ncclInvalidArgument")
        || has(s, "NCCL error")
    {
        let rank = pytorch_rank(s);
        // PyTorch prints the ncclResult_t by its name or ncclGetErrorString's text.
        let (cause, result) = if has(s, "unhandled system error") || has(s, "ncclSystemError") {
            ("system_error", 2)
        } else if has(s, "ncclRemoteError") || has(s, "remote process exit") {
            ("remote_process_exited", 6)
        } else if has(s, "unhandled cuda error") || has(s, "ncclUnhandledCudaError") {
            ("cuda_error", 1)
        } else if has(s, "internal error") || has(s, "ncclInternalError") {
            ("unclassified_failure", 3)
        } else if has(s, "invalid usage") || has(s, "ncclInvalidUsage") {
            ("unclassified_failure", 5)
        } else if has(s, "invalid argument") || has(s, "ncclInvalidArgument") {
            ("unclassified_failure", 4)
        } else {
            return Some(Event::Known);
        };
        return Some(Event::Failure(Failure {
            cause,
            rank,
            result: Some(result),
            ..Failure::default()
        }));
    }
    None
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
        assert_eq!(warn_rule("Cuda failure 802 'system not yet initialized'"), WarnRule::Fixed("cuda_system_not_ready"));
        assert_eq!(warn_rule("Cuda failure 'system not yet initialized'"), WarnRule::Fixed("cuda_system_not_ready"));
        for s in [
            "RuntimeError: CUDA error: system not yet initialized",
            "UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). Error 802: system not yet initialized (Triggered internally at  ../c10/cuda/CUDAFunctions.cpp:112.)",
            "RuntimeError: cuda runtime error (802) : system not yet initialized at /opt/conda/THCGeneral.cpp:50",
            "test: Test CUDA failure common.cu:941 'system not yet initialized'",
        ] {
            assert!(
                matches!(classify_plain(s), Some(Event::Failure(Failure { cause: "cuda_system_not_ready", .. }))),
                "{s}"
            );
        }
        assert_eq!(plain_host("test: Test CUDA failure common.cu:941 'system not yet initialized'"), Some("test"));
        assert_eq!(plain_host("RuntimeError: CUDA error: system not yet initialized"), None);
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
}
