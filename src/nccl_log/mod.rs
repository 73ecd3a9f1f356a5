//! `nccl-log`: read a job's `NCCL_DEBUG` logs (one file per rank, one combined log, or
//! stdin), summarise what NCCL set up, and collapse the failures to root-cause verdicts.
//!
//! Reading: an input is cut into chunks of whole lines ([`chunked`]) that worker threads
//! analyse into partial states, merged back in input order ([`Analyzer::merge`] gives the
//! same state as one pass over the lines); lines are cut at [`MAX_LINE_BYTES`]; the state
//! kept is per process (bounded by the ranks) plus capped lists, so memory does not grow
//! with the log. Formats: [`line`] (headers, launcher prefixes) and [`events`] (the
//! messages, by NCCL version). Knock-on rules (from the maintainers' diagnoses in public threads: status 5 flushes after a
//! first error; collective timeouts grouped by sequence number).

pub mod causes;
pub mod chunked;
pub mod events;
#[cfg(test)]
mod fast_path_tests;
mod findings;
pub mod generate;
pub mod ifaces;
pub mod line;
mod merge;
// PyTorch flight-recorder dumps read beside the logs (issue 43).
pub mod flight;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::BuildHasherDefault;
use std::io::Read;

pub use chunked::ReadOptions;

use serde::Serialize;

use crate::finding::Severity;

use events::{Event, Transport};

/// The sighting of a process's first error trail (`file.cc:NNN -> N`), before judging.
const TRAIL: &str = "error_trail";

/// Longer lines are cut here (the rest is skipped, counted as truncated).
pub(crate) const MAX_LINE_BYTES: usize = 64 * 1024;
/// Caps on what is kept for the summary, so memory stays bounded on any log.
const MAX_CONNECTIONS: usize = 20_000;
const MAX_EVENTS: usize = 50_000;
const MAX_UNRECOGNISED_SAMPLES: usize = 5;
const MAX_LINE_TEXT: usize = 400;
const MAX_HEADERS: usize = 1 << 16;

/// Where an event was read: the file and line, the process it came from, its launcher
/// label and CUDA device.
struct Site<'a> {
    file: &'a str,
    line_no: u64,
    s: &'a str,
    key: &'a ProcKey,
    dev: Option<i32>,
    label: Option<u32>,
}

/// Who printed a line: a process (host and pid), and what the log says about its rank.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct ProcKey {
    /// Index into `Analyzer::host_names` (0: no host, a line without an NCCL header).
    host: u32,
    pid: Option<u32>,
    /// The launcher's rank label, when there is no pid to tell processes apart.
    label: Option<u32>,
}

#[derive(Clone, Debug, Default)]
struct Proc {
    rank: Option<u32>,
    nranks: Option<u32>,
    local_rank: Option<u32>,
    label: Option<u32>,
    network: Option<String>,
    /// The first error trail's code (`file.cc:NNN -> N`) this process printed.
    trail: Option<u8>,
    /// Where this process first said which network it uses (`Using network IB`): what
    /// failed before it in plugin or transport init, NCCL recovered from by falling back.
    net_at: Option<u64>,
}

/// One failure or warning sighting, before collapsing.
#[derive(Clone, Debug)]
struct Sighting {
    cause: &'static str,
    proc_: ProcKey,
    dev: Option<i32>,
    hca: Option<String>,
    peer_addr: Option<String>,
    local_gid: Option<String>,
    remote_gid: Option<String>,
    status: Option<i64>,
    vendor_err: Option<i64>,
    file: String,
    line_no: u64,
    line: String,
    /// Collective timeouts: the sequence number and the op.
    seq: Option<u64>,
    op: Option<String>,
    rank_hint: Option<u32>,
    result: Option<u8>,
    errno: Option<i64>,
}

/// The maps looked up on every line hash with [`FxHasher`]: their keys are short and come
/// from our own parsing, so SipHash's flood resistance buys nothing here.
type Fast = BuildHasherDefault<FxHasher>;

/// The Fx hash (rustc's): rotate, xor, multiply, one word at a time.
#[derive(Default)]
pub(crate) struct FxHasher(u64);

impl std::hash::Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut it = bytes.chunks_exact(8);
        for c in &mut it {
            let w = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
            self.write_u64(w);
        }
        // The tail as one zero-padded word, shifted in (a copy is a memcpy call): one
        // multiply, not one per byte, each waiting for the one before.
        let rest = it.remainder();
        if !rest.is_empty() {
            self.write_u64(rest.iter().rev().fold(0, |w, &b| w << 8 | u64::from(b)));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.write_u64(i as u64);
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64);
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A line's header as [`Analyzer::feed`] uses it, kept per header bytes (what is before
/// the line's one NCCL marker, less the source location, [`line::split_src`]: all the
/// header's parse reads): a log repeats a few thousand headers millions of times, each
/// process's from a few source lines.
#[derive(Clone, Debug)]
struct Header {
    key: ProcKey,
    label: Option<u32>,
    dev: Option<i32>,
    /// The [`Analyzer::epoch`] whose process table already holds this header's process and
    /// label (0: none), so a cached header's line skips that lookup.
    seen: u64,
}

/// A number for each new [`Analyzer`] (from 1): a chunk's state is a fresh one, while the
/// header cache goes from chunk to chunk.
fn next_epoch() -> u64 {
    static EPOCH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    EPOCH.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The bytes of a header as the key of [`Analyzer::headers`], held in the entry itself: a
/// failure-dense log of thousands of processes looks up one of tens of thousands of
/// headers per line, and a key behind a pointer was one more cache miss per line (a
/// sixth of such a log's time). Longer headers are not kept (they are parsed each time).
#[derive(Clone)]
struct HeaderKey {
    len: u8,
    bytes: [u8; HEADER_KEY_BYTES],
}

const HEADER_KEY_BYTES: usize = 64;

impl HeaderKey {
    fn new(b: &[u8]) -> Option<HeaderKey> {
        let mut bytes = [0; HEADER_KEY_BYTES];
        bytes.get_mut(..b.len())?.copy_from_slice(b);
        Some(HeaderKey {
            len: b.len() as u8,
            bytes,
        })
    }
}

/// Compared eight bytes at a time in place (the bytes past `len` are zero in both): the
/// derived compare was a 64-byte memcmp call per line.
impl PartialEq for HeaderKey {
    fn eq(&self, o: &HeaderKey) -> bool {
        let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
        self.len == o.len
            && (self.bytes.chunks_exact(8))
                .zip(o.bytes.chunks_exact(8))
                .all(|(a, b)| word(a) == word(b))
    }
}

impl Eq for HeaderKey {}

impl std::hash::Hash for HeaderKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write(&self.bytes[..self.len as usize]);
    }
}

/// What makes a sighting a repeat: cause, process, rank label, sequence number, HCA.
type SightingKey = (&'static str, ProcKey, Option<u32>, Option<u64>, Option<String>);

#[derive(Default)]
pub struct Analyzer {
    lines: u64,
    nccl_lines: u64,
    recognised: u64,
    unrecognised: u64,
    unrecognised_samples: Vec<String>,
    truncated_lines: u64,
    bytes: u64,
    versions: BTreeMap<String, BTreeSet<String>>,
    procs: HashMap<ProcKey, Proc, Fast>,
    host_names: Vec<String>,
    host_ids: HashMap<String, u32, Fast>,
    host_ips: BTreeMap<String, String>,
    bootstrap: BTreeMap<String, BTreeSet<String>>,
    socket_ifs: BTreeMap<String, BTreeSet<String>>,
    hcas: BTreeMap<String, BTreeSet<String>>,
    gdr: BTreeMap<(String, String), bool>,
    plugins: BTreeSet<String>,
    /// What the log says about NCCL_TOPO_FILE (who set it, loading, failing to open).
    topo_files: BTreeSet<String>,
    networks: BTreeSet<String>,
    rings: BTreeSet<u32>,
    ring_sample: Option<String>,
    trees: BTreeSet<u32>,
    channels: Option<String>,
    /// The [`MAX_CONNECTIONS`] smallest (from, to, via), each with its line count: the
    /// smallest, not the first, so that chunk states merge to exactly one pass's answer.
    connections: BTreeMap<(u32, u32, String), u64>,
    connection_lines: u64,
    transports: BTreeMap<String, u64>,
    sightings: Vec<Sighting>,
    seen_sightings: HashSet<SightingKey, Fast>,
    world: Option<u32>,
    inputs: Vec<String>,
    /// PyTorch: per global rank, the highest sequence number it is known to have reached.
    progress: BTreeMap<u32, u64>,
    /// Lines of the input being read so far (line numbers are per input).
    input_lines: u64,
    /// A chunk's state: the lines before this chunk already filled the sightings, so one
    /// pass would keep none of this chunk's (set by [`chunked`] before the chunk is read).
    after_full: bool,
    /// Header bytes -> what they say (at most [`MAX_HEADERS`]; host ids are this state's).
    headers: HashMap<HeaderKey, Header, Fast>,
    /// Tests: take every line apart in full (no repeat dropped early), to compare with.
    full_path: bool,
    /// This state's number (see [`Header::seen`]).
    epoch: u64,
}

impl Analyzer {
    pub fn new() -> Analyzer {
        Analyzer {
            host_names: vec![String::new()],
            epoch: next_epoch(),
            ..Analyzer::default()
        }
    }

    /// The id of a host name (interned: lines repeat a few hosts millions of times).
    fn host_id(&mut self, h: &str) -> u32 {
        if h.is_empty() {
            return 0;
        }
        if let Some(&i) = self.host_ids.get(h) {
            return i;
        }
        let i = self.host_names.len() as u32;
        self.host_names.push(h.to_string());
        self.host_ids.insert(h.to_string(), i);
        i
    }

    fn host_name(&self, id: u32) -> &str {
        self.host_names.get(id as usize).map(String::as_str).unwrap_or("")
    }

    /// Read one input to its end in bounded memory, on every core (see [`ReadOptions`]).
    pub fn read<R: Read>(&mut self, name: &str, r: R) -> std::io::Result<()> {
        self.read_with(name, r, &ReadOptions::default())
    }

    /// [`Analyzer::read`] with the thread count and chunk size given.
    pub fn read_with<R: Read>(&mut self, name: &str, r: R, opts: &ReadOptions) -> std::io::Result<()> {
        self.inputs.push(name.to_string());
        self.input_lines = 0;
        chunked::read(self, name, r, opts)
    }

    /// Whole lines (the last may lack its newline); `skipped` bytes of over-long lines were
    /// dropped before they got here and count towards the input's size.
    fn feed_chunk(&mut self, file: &str, data: &[u8], skipped: u64) {
        self.bytes += data.len() as u64 + skipped;
        // One search of the chunk for colour codes instead of one per line: a log has them
        // everywhere or nowhere.
        let ansi = memchr::memchr(0x1b, data).is_some();
        // One UTF-8 check of the chunk instead of one per line (lines end at '\n', a
        // character boundary); a chunk that is not valid UTF-8 is checked line by line.
        let text = std::str::from_utf8(data).ok();
        let mut pos = 0;
        while pos < data.len() {
            let end = memchr::memchr(b'\n', &data[pos..]).map_or(data.len(), |i| pos + i);
            let mut line = &data[pos..end];
            let start = pos;
            pos = end + 1;
            self.input_lines += 1;
            if line.len() > MAX_LINE_BYTES {
                self.truncated_lines += 1;
                line = &line[..MAX_LINE_BYTES];
            }
            while let [rest @ .., b'\r' | b'\n'] = line {
                line = rest;
            }
            let n = self.input_lines;
            // The line as `from_utf8` would give it: a slice of the checked chunk, unless
            // the cut of an over-long line splits a character.
            let checked = text.and_then(|t| t.get(start..start + line.len()));
            match checked.map_or_else(|| std::str::from_utf8(line), Ok) {
                Ok(s) => self.feed_line(file, n, s, ansi),
                Err(_) => self.feed_line(file, n, &String::from_utf8_lossy(line), ansi),
            }
        }
    }

    /// One physical line.
    pub fn feed(&mut self, file: &str, line_no: u64, s: &str) {
        self.feed_line(file, line_no, s, true)
    }

    /// [`Analyzer::feed`]; `ansi`: the line may hold colour codes (false: it has no ESC).
    fn feed_line(&mut self, file: &str, line_no: u64, s: &str, ansi: bool) {
        self.lines += 1;
        // A line that starts with a visible ASCII byte is not blank: no trim needed.
        let visible = s.as_bytes().first().is_some_and(|b| b.is_ascii_graphic());
        if !visible && s.trim().is_empty() {
            return;
        }
        // Colour codes from a terminal capture; CR from a Windows paste.
        let clean = if ansi { line::strip_ansi(s) } else { None };
        let s = clean.as_deref().unwrap_or(s).trim_end_matches('\r');
        let marks = line::marks(s);
        let key = match marks {
            line::Marks::One(at, _) if !self.full_path => HeaderKey::new(line::split_src(s, at).0.as_bytes()),
            _ => None,
        };
        if let (Some(k), line::Marks::One(at, level)) = (&key, marks)
            && let Some(h) = self.headers.get_mut(k)
        {
            let copy = h.clone();
            // Written once per state, not per line: a clean cache line is cheaper to evict.
            if h.seen != self.epoch {
                h.seen = self.epoch;
            }
            let h = copy;
            return self.feed_message(file, line_no, s, h, level, line::message_at(s, at, level));
        }
        let recs = match line::scan_marks(s, marks) {
            line::Records::One(prefix, rec) => {
                let h = self.header(prefix, &rec);
                if let Some(k) = key {
                    // Bounded: a log of ever-new headers (timestamps in the prefix) only
                    // misses.
                    if self.headers.len() >= MAX_HEADERS {
                        self.headers.clear();
                    }
                    let seen = self.epoch;
                    self.headers.insert(k, Header { seen, ..h.clone() });
                }
                return self.feed_message(file, line_no, s, h, rec.level, rec.msg);
            }
            line::Records::Other(v) => v,
        };
        if recs.is_empty() {
            // No NCCL header: the version banner, PyTorch's watchdog, launcher noise.
            let label = line::prefix_rank(s);
            match events::classify_plain(s) {
                Some(ev) => {
                    self.recognised += 1;
                    let key = ProcKey {
                        // nccl-tests names its host before a CUDA failure.
                        host: events::plain_host(s).map(|h| self.host_id(h)).unwrap_or(0),
                        pid: None,
                        label,
                    };
                    self.apply(
                        &Site {
                            file,
                            line_no,
                            s,
                            key: &key,
                            dev: None,
                            label,
                        },
                        ev,
                    );
                }
                None => {
                    if s.contains("NCCL") {
                        self.note_unrecognised(s);
                    }
                }
            }
            return;
        }
        for (prefix, rec) in recs {
            let h = self.header(prefix, &rec);
            self.feed_message(file, line_no, s, h, rec.level, rec.msg);
        }
    }

    /// What a record's launcher `prefix` and NCCL header say.
    fn header(&mut self, prefix: &str, rec: &line::Nccl<'_>) -> Header {
        let label = line::prefix_rank(prefix);
        Header {
            key: ProcKey {
                host: self.host_id(rec.host),
                pid: rec.pid,
                label: if rec.pid.is_none() { label } else { None },
            },
            label,
            dev: rec.dev,
            seen: 0,
        }
    }

    /// One NCCL record of line `s`: its header `h`, level and message.
    fn feed_message(&mut self, file: &str, line_no: u64, s: &str, h: Header, level: line::Level, msg: &str) {
        self.nccl_lines += 1;
        let Header {
            key,
            label,
            dev,
            seen,
        } = h;
        // Once per header and state: the process is in the table and its label set (a
        // state made by `Analyzer::default()` has epoch 0, as an unseen header: always).
        if seen == 0 || seen != self.epoch {
            let p = self.procs.entry(key.clone()).or_default();
            if p.label.is_none() {
                p.label = label;
            }
        }
        let ev = if level == line::Level::Warn {
            let m = msg.trim();
            let rule = events::warn_rule(m);
            // A repeat of a failure already kept (or one past the cap) is counted and
            // dropped before its fields are taken out: failure-dense logs are mostly repeats.
            if let Some(cause) = rule.cause(m).filter(|_| !self.full_path)
                && self.repeat(cause, &key, label)
            {
                if cause == "unclassified_failure" {
                    self.note_unrecognised(s);
                } else {
                    self.recognised += 1;
                }
                return;
            }
            Some(rule.event(m))
        } else {
            events::classify(level, msg)
        };
        match ev {
            Some(ev) => {
                // An unknown WARN is a failure all the same, and a format to learn.
                if matches!(&ev, Event::Failure(f) if f.cause == "unclassified_failure") {
                    self.note_unrecognised(s);
                } else {
                    self.recognised += 1;
                }
                self.apply(
                    &Site {
                        file,
                        line_no,
                        s,
                        key: &key,
                        dev,
                        label,
                    },
                    ev,
                );
            }
            None => self.note_unrecognised(s),
        }
    }

    /// Count a connection line; keep the smallest [`MAX_CONNECTIONS`] connections.
    fn add_connection(&mut self, c: (u32, u32, String), lines: u64) {
        *self.connections.entry(c).or_default() += lines;
        if self.connections.len() > MAX_CONNECTIONS {
            self.connections.pop_last();
        }
    }

    fn note_unrecognised(&mut self, s: &str) {
        self.unrecognised += 1;
        if self.unrecognised_samples.len() < MAX_UNRECOGNISED_SAMPLES {
            self.unrecognised_samples.push(clip(s));
        }
    }

    /// One event of the line `at` names: the tables it feeds, the sightings it makes.
    fn apply(&mut self, at: &Site<'_>, ev: Event) {
        match ev {
            Event::Known => {}
            Event::Version(v) => {
                let h = if at.key.host == 0 {
                    at.label
                        .map(|l| format!("rank label {l}"))
                        .unwrap_or_else(|| at.file.to_string())
                } else {
                    self.host_name(at.key.host).to_string()
                };
                self.versions.entry(v).or_default().insert(h);
            }
            Event::Bootstrap(ifs) => {
                let host = self.host_name(at.key.host).to_string();
                for i in &ifs {
                    self.note_host_ip(Some(i.as_str()), &host);
                }
                self.bootstrap.entry(host).or_default().extend(ifs);
            }
            Event::SocketIfs(ifs) => {
                let host = self.host_name(at.key.host).to_string();
                self.socket_ifs.entry(host).or_default().extend(ifs);
            }
            Event::IbUsing { hcas, oob } => {
                let host = self.host_name(at.key.host).to_string();
                self.note_host_ip(oob.as_deref(), &host);
                self.hcas.entry(host).or_default().extend(hcas);
            }
            Event::Plugin(p) => {
                self.plugins.insert(p);
            }
            Event::TopoFile(t) => {
                if self.topo_files.len() < MAX_UNRECOGNISED_SAMPLES {
                    self.topo_files.insert(clip(&t));
                }
            }
            Event::Network(n) => {
                if let Some(p) = self.procs.get_mut(at.key) {
                    p.network = Some(n.clone());
                    p.net_at.get_or_insert(at.line_no);
                }
                self.networks.insert(n);
            }
            Event::Comm {
                rank,
                nranks,
                local_rank,
                cuda_dev: _,
            } => self.note_comm(at.key, rank, nranks, local_rank),
            Event::Ring { channel, order } => {
                self.rings.insert(channel);
                if self.ring_sample.is_none() {
                    self.ring_sample = Some(clip(&order));
                }
            }
            Event::Tree { channels } => {
                self.trees.extend(channels);
            }
            Event::Channels(c) => self.channels = Some(c),
            Event::Connection(Transport { src, dst, via }) => {
                let class = events::transport_class(&via);
                *self.transports.entry(class).or_default() += 1;
                self.connection_lines += 1;
                self.add_connection((src, dst, via), 1);
            }
            Event::Gdr { hca, enabled } => self.note_gdr(at, hca, enabled),
            Event::Failure(f) => self.note_failure(at, f),
            Event::Progress { rank, enqueued } => {
                if let Some(r) = at.label.or(rank) {
                    let e = self.progress.entry(r).or_insert(enqueued);
                    *e = (*e).max(enqueued);
                }
            }
            Event::Trail(code) => self.note_trail(at, code),
        }
    }

    /// The host an interface or OOB address (`ib0:10.0.0.1<0>`) belongs to, first seen wins.
    fn note_host_ip(&mut self, iface: Option<&str>, host: &str) {
        if let Some(ip) = iface
            .and_then(|o| o.split(':').nth(1))
            .and_then(|a| a.split('<').next())
        {
            self.host_ips
                .entry(ip.to_string())
                .or_insert_with(|| host.to_string());
        }
    }

    /// A communicator the process joined: its rank in the widest one is its job rank.
    fn note_comm(&mut self, key: &ProcKey, rank: u32, nranks: Option<u32>, local_rank: Option<u32>) {
        let p = self.procs.entry(key.clone()).or_default();
        if p.nranks.is_none_or(|n| nranks.is_some_and(|m| m > n)) || p.rank.is_none() {
            p.rank = Some(rank);
            if nranks.is_some() {
                p.nranks = nranks;
            }
        }
        if local_rank.is_some() {
            p.local_rank = local_rank;
        }
        if let Some(n) = nranks {
            self.world = Some(self.world.map_or(n, |w| w.max(n)));
        }
    }

    /// GPUDirect on or off for an HCA of the host; off is a sighting.
    fn note_gdr(&mut self, at: &Site<'_>, hca: String, enabled: bool) {
        let host = self.host_name(at.key.host).to_string();
        let e = self.gdr.entry((host, hca.clone())).or_insert(enabled);
        *e = *e && enabled;
        if !enabled {
            self.sight(Sighting {
                cause: "gdr_disabled",
                hca: Some(hca),
                ..self.base(at)
            });
        }
    }

    /// A failure: the rank's progress, and a sighting unless it repeats one kept.
    fn note_failure(&mut self, at: &Site<'_>, f: events::Failure) {
        // The launcher's label is the global rank; a rank in the text only counts
        // without one (PyTorch's `[PG ID 1 ... Rank 0]` is a group rank).
        let rank_hint = at.label.or(f.rank);
        if let (Some(r), Some(q)) = (rank_hint, f.seq) {
            let e = self.progress.entry(r).or_insert(q);
            *e = (*e).max(q);
        }
        // A repeat is dropped before its text is copied: failure-dense logs are
        // mostly repeats.
        let hca = (f.cause == "gdr_disabled").then(|| f.hca.clone()).flatten();
        if self.sightings_full()
            || self
                .seen_sightings
                .contains(&(f.cause, at.key.clone(), rank_hint, f.seq, hca))
        {
            return;
        }
        let mut sg = self.base(at);
        sg.cause = f.cause;
        sg.hca = f.hca;
        sg.peer_addr = f.peer;
        sg.local_gid = f.local_gid;
        sg.remote_gid = f.remote_gid;
        sg.status = f.status;
        sg.vendor_err = f.vendor_err;
        sg.seq = f.seq;
        sg.op = f.op;
        sg.result = f.result;
        sg.errno = f.errno;
        sg.rank_hint = rank_hint;
        self.sight(sg);
    }

    /// A non-zero return code in NCCL's trail: the process's first one is a sighting.
    fn note_trail(&mut self, at: &Site<'_>, code: u8) {
        // 0 is success and 7 (ncclInProgress) is the non-blocking API's normal answer.
        if code == 0 || code == 7 {
            return;
        }
        let first = match self.procs.get_mut(at.key) {
            Some(p) => p.trail.replace(p.trail.unwrap_or(code)).is_none(),
            None => true,
        };
        // Each process's first trail: the ones NCCL recovered from (before it chose
        // a network) are told apart when the whole log is read. Past the cap it would not
        // be kept: not built (a chunk's fresh state sees each process's first again).
        if first && !self.sightings_full() {
            let mut sg = self.base(at);
            sg.cause = TRAIL;
            sg.result = Some(code);
            self.sight(sg);
        }
    }

    fn base(&self, at: &Site<'_>) -> Sighting {
        Sighting {
            cause: "",
            proc_: at.key.clone(),
            dev: at.dev,
            hca: None,
            peer_addr: None,
            local_gid: None,
            remote_gid: None,
            status: None,
            vendor_err: None,
            file: at.file.to_string(),
            line_no: at.line_no,
            line: clip(at.s),
            seq: None,
            op: None,
            rank_hint: at.label,
            result: None,
            errno: None,
        }
    }

    /// A failure with no sequence number and no rank of its own would not be kept: the cap
    /// is reached or the same (cause, process, launcher label) was (see [`Analyzer::sight`]).
    fn repeat(&self, cause: &'static str, key: &ProcKey, label: Option<u32>) -> bool {
        self.sightings_full()
            || self
                .seen_sightings
                .contains(&(cause, key.clone(), label, None, None))
    }

    /// No sighting is kept from here on (the cap is reached, here or before this chunk).
    fn sightings_full(&self) -> bool {
        self.after_full || self.sightings.len() >= MAX_EVENTS
    }

    fn sight(&mut self, s: Sighting) {
        // Only the first sighting of a cause per process matters (later ones repeat it),
        // except timeouts, which are grouped by sequence number across ranks.
        // GDR is judged per HCA; everything else once per process.
        let hca = if s.cause == "gdr_disabled" {
            s.hca.clone()
        } else {
            None
        };
        let key = (s.cause, s.proc_.clone(), s.rank_hint, s.seq, hca);
        if self.sightings_full() || self.seen_sightings.contains(&key) {
            return;
        }
        self.seen_sightings.insert(key);
        self.sightings.push(s);
    }

    /// Summarise and judge.
    pub fn finish(self) -> Report {
        verdicts::build(self)
    }
}

fn clip(s: &str) -> String {
    if s.len() <= MAX_LINE_TEXT {
        return s.to_string();
    }
    let mut end = MAX_LINE_TEXT;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// What the log says NCCL set up.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    pub inputs: Vec<String>,
    pub bytes: u64,
    pub lines: u64,
    pub nccl_lines: u64,
    /// Lines with an NCCL header (or NCCL/PyTorch text) that no rule understood.
    pub unrecognised_lines: u64,
    pub unrecognised_samples: Vec<String>,
    pub truncated_lines: u64,
    /// NCCL version -> the hosts that printed it.
    pub nccl_versions: BTreeMap<String, Vec<String>>,
    pub hosts: Vec<HostSummary>,
    /// The largest communicator size seen (`nranks`).
    pub world_size: Option<u32>,
    pub ranks_seen: usize,
    pub ring_channels: usize,
    pub ring_sample: Option<String>,
    pub tree_channels: usize,
    /// NCCL's own channel line (`N coll channels, ...`).
    pub channels: Option<String>,
    pub networks: Vec<String>,
    pub plugins: Vec<String>,
    /// Connections by transport class (`NET/IB/GDRDMA`, `NET/Socket`, `P2P/IPC`, `SHM`, ...).
    pub transports: BTreeMap<String, u64>,
    /// Each distinct (from rank, to rank, transport as NCCL printed it).
    pub connections: Vec<Connection>,
    pub connections_dropped: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct HostSummary {
    pub host: String,
    pub ranks: Vec<u32>,
    pub local_ranks: usize,
    pub bootstrap: Vec<String>,
    pub socket_interfaces: Vec<String>,
    pub hcas: Vec<String>,
    /// HCA -> GDR on (true) or off, as NCCL reported it.
    pub gdr: BTreeMap<String, bool>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Connection {
    pub from_rank: u32,
    pub to_rank: u32,
    pub via: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Peer {
    pub addr: Option<String>,
    pub host: Option<String>,
    pub rank: Option<u32>,
}

/// One root cause the logs show, with where and whom it hit; the later failures it explains
/// are folded in (`knock_ons`). An entry of nccl-log's `data.verdicts[]`; named apart from
/// the ring's `Verdict`, which judges links and ranks.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RootCause {
    pub cause: String,
    /// Fail, warn, or unknown: nothing could be judged (`no_nccl_output`), neither a pass
    /// nor a warning; an unknown verdict gives no envelope finding and, alone, exit 3.
    pub severity: Severity,
    pub host: Option<String>,
    pub rank: Option<u32>,
    /// Other ranks with the same first failure (same cause, host, device and peer).
    pub ranks: Vec<u32>,
    /// The HCA, or the CUDA device as `cuda:N`.
    pub device: Option<String>,
    pub peer: Option<Peer>,
    pub local_gid: Option<String>,
    pub remote_gid: Option<String>,
    pub status: Option<i64>,
    pub vendor_err: Option<i64>,
    pub file: String,
    pub line_no: u64,
    pub line: String,
    pub meaning: String,
    pub next: String,
    /// Collective timeouts: the sequence number, op and the ranks not in the list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub suspects: Vec<u32>,
    /// Later failures explained by this one (flushes, timeouts, closed connections).
    pub knock_ons: u64,
    /// The later failures this earlier event explains, each as `cause on host rank device`
    /// (an async event or GID change before completion errors, a peer's own failure before
    /// the completion errors towards it); counted in knock_ons too.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub explains: Vec<String>,
    /// NCCL's return code as `ncclSystemError (2)`, from the line or its error trail.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nccl_result: Option<String>,
    /// The errno of a failed socket call (111 refused, 110 timed out, 113 no route).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errno: Option<i64>,
}

impl RootCause {
    /// A verdict of this cause and severity, every other field empty: callers fill what
    /// they know (`RootCause { rank, line, ..RootCause::new(cause, severity) }`).
    pub fn new(cause: &str, severity: Severity) -> RootCause {
        RootCause {
            cause: cause.to_string(),
            severity,
            host: None,
            rank: None,
            ranks: Vec::new(),
            device: None,
            peer: None,
            local_gid: None,
            remote_gid: None,
            status: None,
            vendor_err: None,
            file: String::new(),
            line_no: 0,
            line: String::new(),
            meaning: String::new(),
            next: String::new(),
            seq: None,
            op: None,
            suspects: Vec::new(),
            knock_ons: 0,
            explains: Vec::new(),
            nccl_result: None,
            errno: None,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Report {
    pub summary: Summary,
    pub verdicts: Vec<RootCause>,
}

pub mod verdicts;
