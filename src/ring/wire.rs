//! The control-plane wire format between ranks and the coordinator: length-prefixed frames
//! (`FPR1` magic, u32 big-endian length, JSON body) with a hard size bound, so garbage on the
//! port is rejected after at most a few bytes and never allocates more than `MAX_FRAME`.

// A length from the wire narrowed with `as` would wrap silently: convert with a check.
#![deny(clippy::cast_possible_truncation)]

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::ring::model::{CounterMove, LinkFault, LinkSample, RankInfo, Verdict, WaitReport};

pub(crate) const MAGIC: &[u8; 4] = b"FPR1";
/// Largest control frame accepted: a rank's part of the table or a results message is a few
/// KiB; larger tables go in several frames.
pub const MAX_FRAME: usize = 1 << 20;
/// Bumped when a message changes meaning; ranks of different versions refuse each other.
pub const PROTOCOL: u32 = 6;

/// How many verdicts the end-of-run message carries to the ranks (each rank prints only
/// their messages; rank 0's report has them all); the rest are counted.
pub const SENT_VERDICTS: usize = 16;

#[derive(Debug, Error)]
pub enum WireError {
    #[error("not a fabprobe peer (bad magic {0:02x?})")]
    BadMagic([u8; 4]),
    #[error("frame of {0} bytes exceeds the {MAX_FRAME}-byte limit")]
    TooLarge(usize),
    #[error("malformed message: {0}")]
    Malformed(String),
    #[error("connection closed")]
    Closed,
    #[error("timed out")]
    TimedOut,
    #[error("{0}")]
    Io(io::Error),
}

impl From<io::Error> for WireError {
    fn from(e: io::Error) -> Self {
        match e.kind() {
            io::ErrorKind::UnexpectedEof => WireError::Closed,
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => WireError::TimedOut,
            _ => WireError::Io(e),
        }
    }
}

/// What a rank tells the coordinator first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    pub protocol: u32,
    pub rank: u32,
    pub world: u32,
    pub token: String,
    pub info: RankInfo,
    /// What this rank can do (`tcp`, later `rdma`). The same list travels in
    /// `info.capabilities`, so the table every rank receives carries every rank's list
    /// (`--transport auto` picks from it); this field stays for older coordinators.
    pub capabilities: Vec<String>,
    /// The run's options (sizes, iterations, channels...) in one canonical string: every
    /// rank must run the same sweep, or the chunks would not line up.
    pub params: String,
}

/// One size's result on one rank.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RowResult {
    pub size_bytes: u64,
    pub time_us: f64,
    /// Mismatching elements on this rank; None when checking was off (`-c 0`).
    pub wrong: Option<u64>,
    /// The in-place half of the same size; absent from older ranks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place: Option<HalfResult>,
}

impl RowResult {
    /// Mismatching elements in either half.
    pub(crate) fn wrong_total(&self) -> u64 {
        // Saturating: the counts come off the network.
        self.wrong
            .unwrap_or(0)
            .saturating_add(self.in_place.as_ref().and_then(|h| h.wrong).unwrap_or(0))
    }
}

/// One half (out of place or in place) of one size on one rank.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HalfResult {
    pub time_us: f64,
    pub wrong: Option<u64>,
}

/// Everything one rank measured, sent to the coordinator at the end.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RankResults {
    pub rank: u32,
    pub rows: Vec<RowResult>,
    /// The hop into this rank (predecessor -> this rank), measured at this receiver
    /// (`order` 0: the natural ring) during the timed iterations of `link_size_bytes`.
    pub links: Vec<LinkSample>,
    pub link_size_bytes: u64,
    /// Evidence counters of this rank's data NIC that moved during the run (at most
    /// `nic::MAX_MOVES`); absent from older ranks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub port_counters: Vec<CounterMove>,
    /// Each sweep channel's long waits on this rank (stalls inside connections, issue 45);
    /// absent from older ranks and runs without a sweep.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chunk_waits: Vec<crate::ring::model::ChunkWaits>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Msg {
    /// Boxed: the largest message (its rank info, token and params), sent once per connection,
    /// so the heartbeats and samples that fill the queues stay small.
    Hello(Box<Hello>),
    /// Every rank arrived: this rank's part of the table (its own entry and its peers' in
    /// each ring, in rank order), in frames of bounded size; `more`: another part follows.
    Table {
        ranks: Vec<RankInfo>,
        #[serde(default)]
        more: bool,
        /// The transport every rank of the world offers, when they all offer the same one
        /// (`--transport auto` uses rdma only then).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        shared_transport: Option<String>,
    },
    /// The coordinator seated this rank: its join window closes in `closes_in_ms` (the
    /// rank waits for its table on rank 0's clock, not on its own start).
    Window {
        closes_in_ms: u64,
    },
    /// The coordinator refuses this connection (wrong token, duplicate rank...).
    Reject {
        reason: String,
    },
    /// Data links are up on this rank.
    Ready {
        rank: u32,
    },
    /// All ranks are ready: start.
    Go,
    /// Periodic status, and the report sent when a data wait passes its deadline.
    Heartbeat(WaitReport),
    /// The same fields as a heartbeat, and the counters of this rank's data NIC that moved
    /// since the start (absent from older ranks).
    Stuck {
        #[serde(flatten)]
        wait: WaitReport,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        port_counters: Vec<CounterMove>,
    },
    /// A rank failed on its own (not a timeout): the error, for the coordinator to relay.
    Failed {
        rank: u32,
        error: String,
        /// The completion error behind it (RDMA), for a `link_error` verdict.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        link_fault: Option<LinkFault>,
        /// The counters of this rank's data NIC that moved since the start.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        port_counters: Vec<CounterMove>,
        /// The failure is a data link its peer closed: it follows another rank's end, and
        /// names the run's end only when nothing else does (absent from older ranks).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        peer_closed: bool,
    },
    Results(RankResults),
    /// A rank's answer to an abort: the counters of its data NIC that moved since the start,
    /// so a verdict reached on other ranks' reports still shows this rank's evidence.
    Counters {
        #[serde(default)]
        port_counters: Vec<CounterMove>,
    },
    /// One size finished on this rank (sent as each size ends, so rank 0 can print the row
    /// when every rank has it; the `Results` at the end stay the record).
    Row {
        rank: u32,
        row: RowResult,
    },
    /// The run ended; `failed` tells every rank which exit status to use.
    Done {
        failed: bool,
        /// At most [`SENT_VERDICTS`] of rank 0's verdicts.
        verdicts: Vec<Verdict>,
        /// How many more verdicts rank 0's report holds.
        #[serde(default)]
        more_verdicts: u64,
    },
    /// This rank's process was told to stop (SIGTERM from the scheduler, Ctrl-C): it stopped
    /// its data plane at `at` (`size 1048576 bytes, step 3 of round 7`); rank 0 ends the run
    /// and reports what is known, naming no rank for it.
    Interrupted {
        rank: u32,
        signal: String,
        at: String,
    },
    /// The coordinator ends the run early; every rank exits with this message.
    Abort {
        reason: String,
    },
    /// The coordinator is alive (sent every heartbeat period).
    Ping,
    /// Link scan: run one order (every rank sends `reps` x `bytes` to rank + `shift` and
    /// receives from rank - `shift`); samples are numbered `index`.
    ScanRun {
        index: u32,
        shift: u32,
        bytes: u64,
        reps: u32,
        /// The table entries of this rank's two peers in the order (to, from), which its
        /// part of the table may not hold.
        #[serde(default)]
        peers: Vec<RankInfo>,
    },
    /// One rank's samples of one scan order (the links into it, measured here), the port
    /// rate of its data interface where known, and what its port carried in the order.
    ScanSamples {
        rank: u32,
        index: u32,
        samples: Vec<LinkSample>,
        line_rate_gbs: Option<f64>,
        /// This rank's data port's byte counters over the order beside the probe's own
        /// bytes; None from a rank that predates the field.
        #[serde(default)]
        traffic: Option<crate::ring::model::PortTraffic>,
    },
    /// The scan is over: go on with the sweep (or report, with `--scan` alone).
    ScanEnd,
    /// `--rails`: rank 0 seated this node (its hello declared its rail slots): its place in
    /// each rail's ring (at most [`crate::ring::model::MAX_RAILS`]).
    Seats {
        seats: Vec<Seat>,
    },
    /// `--rails`: one rail's control message on the node's one control connection (either
    /// way). Never nested.
    Rail {
        rail: u32,
        msg: Box<Msg>,
    },
    /// `--rails`: this rail's control connection ended on the other side (`reset`: not in
    /// order, as a dying process's).
    RailClosed {
        rail: u32,
        reset: bool,
    },
    /// `--rails`: the job's verdict over every rail, so each node exits with its status.
    JobDone {
        failed: bool,
        why: Option<String>,
    },
}

/// A node's place in one rail's ring: its rank there and the ring's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seat {
    pub rail: u32,
    pub rank: u32,
    pub world: u32,
}

impl Msg {
    /// The message's name, for errors.
    pub fn kind(&self) -> &'static str {
        match self {
            Msg::Hello(_) => "hello",
            Msg::Table { .. } => "table",
            Msg::Window { .. } => "window",
            Msg::Reject { .. } => "reject",
            Msg::Ready { .. } => "ready",
            Msg::Go => "go",
            Msg::Heartbeat(_) => "heartbeat",
            Msg::Stuck { .. } => "stuck",
            Msg::Failed { .. } => "failed",
            Msg::Results(_) => "results",
            Msg::Counters { .. } => "counters",
            Msg::Row { .. } => "row",
            Msg::Done { .. } => "done",
            Msg::Interrupted { .. } => "interrupted",
            Msg::Abort { .. } => "abort",
            Msg::Ping => "ping",
            Msg::ScanRun { .. } => "scan-run",
            Msg::ScanSamples { .. } => "scan-samples",
            Msg::ScanEnd => "scan-end",
            Msg::Seats { .. } => "seats",
            Msg::Rail { .. } => "rail",
            Msg::RailClosed { .. } => "rail-closed",
            Msg::JobDone { .. } => "job-done",
        }
    }
}

/// One frame whose body is `parts` as they are, one after the other (a relay frames bytes
/// it did not parse); over [`MAX_FRAME`] is an error.
pub(crate) fn frame_of(parts: &[&[u8]]) -> Result<Vec<u8>, WireError> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    if len > MAX_FRAME {
        return Err(WireError::TooLarge(len));
    }
    let mut frame = Vec::with_capacity(len + 8);
    frame.extend_from_slice(MAGIC);
    frame.extend_from_slice(
        &u32::try_from(len)
            .map_err(|_| WireError::TooLarge(len))?
            .to_be_bytes(),
    );
    for p in parts {
        frame.extend_from_slice(p);
    }
    Ok(frame)
}

/// Write one frame.
pub fn write_msg(w: &mut impl Write, msg: &Msg) -> Result<(), WireError> {
    let body = serde_json::to_vec(msg).map_err(|e| WireError::Malformed(e.to_string()))?;
    let frame = frame_of(&[&body])?;
    w.write_all(&frame)?;
    w.flush()?;
    Ok(())
}

/// Read one frame; the reader's own timeout bounds the wait.
pub fn read_msg(r: &mut impl Read) -> Result<Msg, WireError> {
    let mut head = [0u8; 8];
    r.read_exact(&mut head)?;
    let magic = [head[0], head[1], head[2], head[3]];
    if &magic != MAGIC {
        return Err(WireError::BadMagic(magic));
    }
    let len = u32::from_be_bytes([head[4], head[5], head[6], head[7]]) as usize;
    if len > MAX_FRAME {
        return Err(WireError::TooLarge(len));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    decode(&body)
}

/// Parse a frame body. Pure.
pub fn decode(body: &[u8]) -> Result<Msg, WireError> {
    if let Some(m) = decode_direct(body) {
        return Ok(m);
    }
    serde_json::from_slice(body).map_err(|e| WireError::Malformed(e.to_string()))
}

/// How this crate encodes [`Msg::Rail`] (serde writes the tag, then the fields in order):
/// `{"type":"rail","rail":K,"msg":BODY}`, BODY the message's own encoding.
pub(crate) const RAIL_HEAD: &[u8] = br#"{"type":"rail","rail":"#;
pub(crate) const MSG_KEY: &[u8] = br#","msg":"#;

/// A message body read as a [`Msg::Rail`] in this crate's encoding, without parsing its
/// message: the rail and the message's body. None: anything else. Pure.
pub(crate) fn rail_parts(body: &[u8]) -> Option<(u32, &[u8])> {
    let rest = body.strip_prefix(RAIL_HEAD)?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    // JSON has no leading zeros; ten digits may pass u32.
    if digits == 0 || digits > 10 || (digits > 1 && rest[0] == b'0') {
        return None;
    }
    let rail = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
    let inner = rest[digits..].strip_prefix(MSG_KEY)?.strip_suffix(b"}")?;
    Some((rail, inner))
}

/// The messages that come by the hundred thousand (hellos, tables, readies, heartbeats, rows,
/// a rail's message) decoded straight into their variant when the body starts with its tag,
/// as this crate writes it: serde reads an internally tagged enum into a generic tree first
/// and then again into the variant, which was most of the decoding CPU of a 16,384 x 8 join
/// (perf). The variant's fields ignore the `type` key as any unknown one. None: anything
/// else, or a body this path cannot read: the general path decodes it (and names the error).
fn decode_direct(body: &[u8]) -> Option<Msg> {
    #[derive(Deserialize)]
    struct Table {
        ranks: Vec<RankInfo>,
        #[serde(default)]
        more: bool,
        #[serde(default)]
        shared_transport: Option<String>,
    }
    #[derive(Deserialize)]
    struct Ready {
        rank: u32,
    }
    #[derive(Deserialize)]
    struct Row {
        rank: u32,
        row: RowResult,
    }
    let rest = body.strip_prefix(br#"{"type":""#)?;
    let kind = &rest[..rest.iter().position(|&b| b == b'"')?];
    let m = match kind {
        b"hello" => Msg::Hello(serde_json::from_slice(body).ok()?),
        b"heartbeat" => Msg::Heartbeat(serde_json::from_slice(body).ok()?),
        b"table" => {
            let t: Table = serde_json::from_slice(body).ok()?;
            Msg::Table {
                ranks: t.ranks,
                more: t.more,
                shared_transport: t.shared_transport,
            }
        }
        b"ready" => Msg::Ready {
            rank: serde_json::from_slice::<Ready>(body).ok()?.rank,
        },
        b"row" => {
            let r: Row = serde_json::from_slice(body).ok()?;
            Msg::Row {
                rank: r.rank,
                row: r.row,
            }
        }
        b"go" if body == br#"{"type":"go"}"# => Msg::Go,
        b"ping" if body == br#"{"type":"ping"}"# => Msg::Ping,
        // Its message decoded by itself; never nested.
        b"rail" => {
            let (rail, inner) = rail_parts(body)?;
            match decode_direct(inner)? {
                Msg::Rail { .. } => return None,
                msg => Msg::Rail {
                    rail,
                    msg: Box::new(msg),
                },
            }
        }
        _ => return None,
    };
    Some(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut f = MAGIC.to_vec();
        f.extend_from_slice(&u32::try_from(body.len()).unwrap().to_be_bytes());
        f.extend_from_slice(body);
        f
    }

    /// The direct path reads what the general one reads, and leaves to it what it cannot.
    #[test]
    fn the_hot_messages_decode_directly_as_serde_reads_them() {
        use crate::ring::model::Phase;
        let info = RankInfo {
            neighbor: None,
            port_max: None,
            rails: Vec::new(),
            node: Some(3),
            rank: 2,
            host: "h\"2\u{e9}".into(),
            address: "127.0.0.1:9".into(),
            device: Some("eth0".into()),
            transport: "tcp".into(),
            pid: Some(7),
            capabilities: vec!["tcp".into()],
        };
        let hello = Msg::Hello(Box::new(Hello {
            protocol: PROTOCOL,
            rank: 2,
            world: 4,
            token: "t".into(),
            info: info.clone(),
            capabilities: vec!["tcp".into()],
            params: "p".into(),
        }));
        let report = |rank| WaitReport {
            round: 3,
            step: 1,
            bytes_sent: 4096,
            since_progress_ms: 12,
            progress: 9,
            ..WaitReport::new(rank, Phase::ReduceScatter)
        };
        let beat = Msg::Heartbeat(report(1));
        let mut stuck_beat = report(2);
        stuck_beat.phase = Phase::AllGather;
        stuck_beat.waiting_on = Some(1);
        stuck_beat.waiting_to_receive = true;
        let row = RowResult {
            size_bytes: 8,
            time_us: 1.5,
            wrong: None,
            in_place: Some(HalfResult {
                time_us: 2.0,
                wrong: Some(1),
            }),
        };
        let msgs = vec![
            hello.clone(),
            beat,
            Msg::Heartbeat(stuck_beat),
            Msg::Table {
                ranks: vec![info.clone(), info],
                more: true,
                shared_transport: Some("tcp".into()),
            },
            Msg::Table {
                ranks: vec![],
                more: false,
                shared_transport: None,
            },
            Msg::Ready { rank: 5 },
            Msg::Row { rank: 1, row },
            Msg::Go,
            Msg::Ping,
            Msg::Rail {
                rail: 12,
                msg: Box::new(hello),
            },
            Msg::Rail {
                rail: 0,
                msg: Box::new(Msg::Go),
            },
        ];
        for m in msgs {
            let body = serde_json::to_vec(&m).unwrap();
            let direct = decode_direct(&body);
            assert_eq!(direct.as_ref(), Some(&m), "{}", String::from_utf8_lossy(&body));
            assert_eq!(serde_json::from_slice::<Msg>(&body).unwrap(), m);
        }
        // Not this path's: other messages, other spellings, broken bodies (the general path
        // names the error), a rail inside a rail.
        for body in [
            &br#"{"type":"abort","reason":"x"}"#[..],
            br#"{ "type":"go"}"#,
            br#"{"type":"go","x":1}"#,
            br#"{"type":"ready"}"#,
            br#"{"type":"hello","protocol":6}"#,
            br#"{"type":"rail","rail":01,"msg":{"type":"go"}}"#,
            br#"{"type":"rail","rail":1,"msg":{"type":"rail","rail":2,"msg":{"type":"go"}}}"#,
            br#"{"type":"heartbeat""#,
        ] {
            assert_eq!(decode_direct(body), None, "{}", String::from_utf8_lossy(body));
        }
        let e = decode(br#"{"type":"ready"}"#).unwrap_err().to_string();
        assert!(e.contains("missing field `rank`"), "{e}");
        // What the general path reads of those, it still reads.
        assert_eq!(decode(br#"{ "type":"go"}"#).unwrap(), Msg::Go);
    }

    #[test]
    fn round_trip() {
        let m = Msg::Done {
            failed: true,
            verdicts: vec![],
            more_verdicts: 3,
        };
        let mut buf = Vec::new();
        write_msg(&mut buf, &m).unwrap();
        assert_eq!(read_msg(&mut &buf[..]).unwrap(), m);
    }

    /// The moved counters travel with a stuck report and with the results; a message from
    /// a rank that sends none (an older one) reads as an empty list.
    #[test]
    fn port_counters_round_trip_and_default_to_none() {
        let moved = CounterMove {
            rank: 3,
            host: "node-d".into(),
            device: "mlx5_2".into(),
            port: 1,
            netdev: Some("ibp77s0".into()),
            counter: "symbol_error".into(),
            delta: 4699,
        };
        // A fresh rank's report, as its data plane writes it (the wire needs no data plane).
        let wait = WaitReport::new(3, crate::ring::model::Phase::from_ordinal(0));
        let msgs = [
            Msg::Stuck {
                wait: wait.clone(),
                port_counters: vec![moved.clone()],
            },
            Msg::Results(RankResults {
                rank: 3,
                rows: vec![],
                links: vec![],
                link_size_bytes: 0,
                port_counters: vec![moved],
                chunk_waits: vec![],
            }),
        ];
        for m in msgs {
            let mut buf = Vec::new();
            write_msg(&mut buf, &m).unwrap();
            assert_eq!(read_msg(&mut &buf[..]).unwrap(), m);
        }
        // The stuck report keeps a heartbeat's fields at the top level.
        let mut v = serde_json::to_value(Msg::Heartbeat(wait.clone())).unwrap();
        v["type"] = "stuck".into();
        assert_eq!(
            decode(v.to_string().as_bytes()).unwrap(),
            Msg::Stuck {
                wait,
                port_counters: vec![]
            }
        );
        let old = br#"{"type":"results","rank":2,"rows":[],"links":[],"link_size_bytes":0}"#;
        let Msg::Results(r) = decode(old).unwrap() else {
            panic!("not results")
        };
        assert!(r.port_counters.is_empty());
    }

    /// A row carries its in-place half; an older rank's row (none) reads as None, and
    /// wrong elements in either half count.
    #[test]
    fn rows_carry_the_in_place_half() {
        let row = RowResult {
            size_bytes: 4096,
            time_us: 10.0,
            wrong: Some(0),
            in_place: Some(HalfResult {
                time_us: 9.0,
                wrong: Some(2),
            }),
        };
        assert_eq!(row.wrong_total(), 2);
        let m = Msg::Results(RankResults {
            rank: 1,
            rows: vec![row],
            links: vec![],
            link_size_bytes: 0,
            port_counters: vec![],
            chunk_waits: vec![],
        });
        let mut buf = Vec::new();
        write_msg(&mut buf, &m).unwrap();
        assert_eq!(read_msg(&mut &buf[..]).unwrap(), m);
        let old = br#"{"type":"results","rank":2,"rows":[{"size_bytes":8,"time_us":1.0,"wrong":3}],"links":[],"link_size_bytes":0}"#;
        let Msg::Results(r) = decode(old).unwrap() else {
            panic!("not results")
        };
        assert_eq!((r.rows[0].in_place.clone(), r.rows[0].wrong_total()), (None, 3));
    }

    /// Random bytes and random bodies behind a valid header never panic the reader.
    #[test]
    #[allow(clippy::cast_possible_truncation)] // random bytes: truncating is the point
    fn random_input_never_panics() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..2000 {
            let len = (next() % 300) as usize;
            let mut body: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if i % 3 == 0 {
                // Mutate a real message so the JSON is almost valid.
                let mut real = serde_json::to_vec(&Msg::Reject { reason: "x".into() }).unwrap();
                let at = (next() as usize) % real.len();
                real[at] = next() as u8;
                body = real;
            }
            let bytes = if i % 2 == 0 { frame(&body) } else { body };
            let _ = read_msg(&mut &bytes[..]);
        }
    }

    #[test]
    fn garbage_is_rejected_without_allocating() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"GET / HTTP/1.1\r\n\r\n".to_vec(), "bad magic"),
            ([MAGIC.as_slice(), &u32::MAX.to_be_bytes()].concat(), "exceeds"),
            (frame(b"{not json"), "malformed"),
            (frame(br#"{"type":"launch_missiles"}"#), "malformed"),
            (MAGIC[..2].to_vec(), "closed"),
            (frame(br#"{"type":"go"}"#)[..10].to_vec(), "closed"),
        ];
        for (bytes, want) in cases {
            let e = read_msg(&mut &bytes[..]).unwrap_err().to_string();
            assert!(e.contains(want), "{bytes:?}: {e}");
        }
    }
}
