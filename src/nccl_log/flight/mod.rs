//! PyTorch's flight recorder beside the NCCL logs: each rank's dump of its last collectives
//! (process group, sequence number, op, sizes, dtypes, state), read by content ([`parse`])
//! into a per-rank digest, then judged across ranks ([`judge`]): which rank never entered the
//! collective the others wait in, which called something else, which left no dump, or
//! whether every rank entered and none completed (the fabric or NCCL, not the application).
//!
//! Memory is bounded by the ranks and groups, not the entries: a dump is digested as it is
//! read (per group its last collective and P2P op; per sequence number the distinct calls,
//! with a capped sample of the ranks that made each).

pub mod digest;
mod fold;
pub mod judge;
pub mod parse;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};

use serde::Serialize;

pub use digest::{Digest, read_all};
pub use parse::{DumpError, Kind, sniff};

/// Ranks kept per distinct call at one sequence number (the count is always whole).
const RANK_SAMPLE: usize = 64;
/// Distinct calls kept per sequence number; more is said as a count.
const MAX_CALLS_PER_SEQ: usize = 16;

/// An entry's state as the recorder kept it. Gloo's recorder leaves every entry
/// `scheduled` (it does not track completion), so completion is judged only for a rank
/// whose dump shows the state moving ([`RankDump::tracks_completion`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Scheduled,
    Started,
    Completed,
    Unknown,
}

impl State {
    fn parse(s: Option<&str>) -> State {
        match s {
            Some("scheduled") => State::Scheduled,
            Some("started") => State::Started,
            Some("completed") => State::Completed,
            _ => State::Unknown,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            State::Scheduled => "scheduled",
            State::Started => "started",
            State::Completed => "completed",
            State::Unknown => "unknown",
        }
    }
}

/// One recorded call, as a verdict cites it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Call {
    /// The process group's name (`process_group[0]`); its description is in [`Group`].
    pub group: String,
    /// `collective_seq_id`, or `p2p_seq_id` for a P2P op.
    pub seq: u64,
    pub p2p: bool,
    /// `profiling_name` as recorded (`nccl:all_reduce`, `nccl:send 0->1`).
    pub op: String,
    pub input_sizes: Vec<Vec<i64>>,
    pub input_dtypes: Vec<String>,
    pub output_sizes: Vec<Vec<i64>>,
    pub output_dtypes: Vec<String>,
    pub state: State,
    #[serde(skip)]
    record_id: i64,
    /// A coalescing block: its ops in record order, the block's end (this call) last.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub coalesced: Vec<Call>,
}

impl Call {
    /// `nccl:all_reduce [[4]] Float` (sizes and dtypes as recorded); a coalescing block is
    /// its end's name with its ops in brackets.
    pub fn describe(&self) -> String {
        if !self.coalesced.is_empty() {
            let ops = &self.coalesced[..self.coalesced.len() - 1];
            let inner: Vec<String> = ops.iter().map(Call::describe).collect();
            return format!("{} {{{}}}", self.op, inner.join("; "));
        }
        let mut s = format!("{} {:?}", self.op, self.input_sizes);
        if !self.input_dtypes.is_empty() {
            s.push(' ');
            s.push_str(&self.input_dtypes.join(","));
        }
        if self.output_sizes != self.input_sizes || self.output_dtypes != self.input_dtypes {
            s.push_str(&format!(
                " -> {:?} {}",
                self.output_sizes,
                self.output_dtypes.join(",")
            ));
        }
        s
    }

    /// The op without backend prefix or P2P peers (`all_reduce`, `send`).
    pub fn kind(&self) -> &str {
        let name = self.op.split_once(':').map_or(self.op.as_str(), |(_, n)| n);
        name.split_whitespace().next().unwrap_or(name)
    }

    /// What must agree across the group's ranks at one sequence number. Ops whose sizes
    /// legitimately differ per rank (all_to_all, gather/scatter roots) agree on the op alone.
    fn signature(&self) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        if !self.coalesced.is_empty() {
            self.coalesced.iter().for_each(|c| c.signature().hash(&mut h));
            return h.finish();
        }
        self.kind().hash(&mut h);
        let uneven = matches!(
            self.kind(),
            "all_to_all" | "all_to_all_single" | "alltoall" | "alltoall_base" | "gather" | "scatter"
        );
        if !uneven {
            self.input_sizes.hash(&mut h);
            self.output_sizes.hash(&mut h);
        }
        self.input_dtypes.hash(&mut h);
        self.output_dtypes.hash(&mut h);
        h.finish()
    }

    /// `send 0->1` / `recv 1<-0`: the group ranks of the two ends, where the name says.
    pub(crate) fn p2p_ends(&self) -> Option<(u32, Option<u32>)> {
        let meta = self.op.split_whitespace().nth(1)?;
        if let Some((s, d)) = meta.split_once("->") {
            return Some((s.parse().ok()?, d.parse().ok()));
        }
        let (d, s) = meta.split_once("<-")?;
        Some((d.parse().ok()?, s.parse().ok()))
    }
}

/// A process group as the dumps configure it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Group {
    pub name: String,
    pub desc: String,
    /// Global ranks; from `pg_config` where it names this group, else inferred (see
    /// `members_from`).
    pub ranks: Vec<u32>,
    /// `pg_config`, `world` (the default group: every rank up to the largest group seen) or
    /// `dumps` (the ranks whose dumps hold this group's entries).
    pub members_from: String,
}

/// What one rank's dump says, digested.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RankDump {
    pub rank: u32,
    pub file: String,
    pub format: &'static str,
    pub version: String,
    pub entries: usize,
    /// The ring buffer wrapped: its oldest kept record is not the first (record_id > 0).
    pub wrapped: bool,
    /// Some entry moved past `scheduled` (NCCL does; Gloo leaves all `scheduled`).
    pub tracks_completion: bool,
    /// The newest entry of all (where the rank was last seen).
    pub last: Option<Call>,
    /// The oldest entry kept.
    #[serde(skip)]
    oldest: Option<Call>,
    /// Per group: the newest collective and the newest P2P op.
    #[serde(skip)]
    groups: BTreeMap<String, GroupSeen>,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct GroupSeen {
    last: Option<Call>,
    last_p2p: Option<Call>,
}

impl RankDump {
    /// The oldest record kept, for saying how far back the buffer reaches.
    pub(crate) fn oldest(&self) -> Option<&Call> {
        self.oldest.as_ref()
    }
    /// The newest collective of this group in the dump.
    pub(crate) fn last_in(&self, group: &str) -> Option<&Call> {
        self.groups.get(group).and_then(|g| g.last.as_ref())
    }
    pub(crate) fn last_p2p_in(&self, group: &str) -> Option<&Call> {
        self.groups.get(group).and_then(|g| g.last_p2p.as_ref())
    }
}

/// The distinct calls the ranks made at one (group, sequence number).
#[derive(Clone, Debug, Default)]
struct SeqCalls {
    calls: Vec<SeqCall>,
    /// Calls beyond [`MAX_CALLS_PER_SEQ`] distinct ones.
    more: u32,
}

#[derive(Clone, Debug)]
struct SeqCall {
    sig: u64,
    call: Call,
    count: u32,
    ranks: Vec<u32>,
}

/// The job's dumps, merged one at a time in input order (decoded on any thread).
#[derive(Default)]
pub struct Job {
    dumps: BTreeMap<u32, RankDump>,
    /// pg_config entries by name, as the first dump that named them wrote them.
    config: BTreeMap<String, (String, Vec<u32>)>,
    /// Group name -> description, from the entries.
    descs: BTreeMap<String, String>,
    /// Group -> sequence number -> the distinct calls made there.
    seqs: HashMap<String, HashMap<u64, SeqCalls>>,
    /// Files that held a second dump for a rank already read.
    pub duplicates: Vec<String>,
    /// Ranks whose dump could not be read, with the error: not judged, never taken for dead.
    pub unreadable: BTreeMap<u32, String>,
    /// Dumps that name no rank (the error).
    pub unreadable_files: Vec<String>,
}

impl Job {
    pub fn new() -> Job {
        Job::default()
    }

    /// No dump was recognised among the inputs (read or not).
    pub fn is_empty(&self) -> bool {
        self.dumps.is_empty() && self.unreadable.is_empty() && self.unreadable_files.is_empty()
    }

    /// Read one dump (the bytes of a file [`sniff`] recognised). A bad dump is an error
    /// naming the file and field, and leaves the job as it was.
    pub fn add(&mut self, file: &str, kind: Kind, bytes: &[u8]) -> Result<(), DumpError> {
        self.merge(digest::digest(file, kind, bytes))
    }

    /// Take in one dump's [`Digest`] (dumps merged in the order they were given). A dump
    /// that could not be read is kept as such (named in the report, never taken for dead).
    pub fn merge(&mut self, d: Digest) -> Result<(), DumpError> {
        let b = match d {
            Digest::NoRank(e) => {
                self.unreadable_files.push(e.to_string());
                return Err(e);
            }
            Digest::Unreadable(rank, e) => {
                self.unreadable.entry(rank).or_insert_with(|| e.to_string());
                return Err(e);
            }
            Digest::Read(b) => *b,
        };
        let rank = b.dump.rank;
        if self.dumps.contains_key(&rank) {
            // The same rank's pickle and JSON (or two dumps): the first read is kept.
            self.duplicates.push(b.dump.file);
            return Ok(());
        }
        for (name, desc, ranks) in b.config {
            self.config.entry(name).or_insert((desc, ranks));
        }
        for (group, desc) in b.descs {
            self.descs.entry(group).or_insert(desc);
        }
        // Merging is the one serial step: each distinct call's signature is taken once.
        let sigs: Vec<u64> = b.calls.iter().map(Call::signature).collect();
        for (seq, i) in b.seqs {
            if let (Some(c), Some(&sig)) = (b.calls.get(i as usize), sigs.get(i as usize)) {
                self.note_seq(rank, c, sig, seq);
            }
        }
        self.dumps.insert(rank, b.dump);
        Ok(())
    }

    /// A collective's call at its (group, sequence number), beside the other ranks' calls.
    fn note_seq(&mut self, rank: u32, c: &Call, sig: u64, seq: u64) {
        if !self.seqs.contains_key(&c.group) {
            self.seqs.insert(c.group.clone(), HashMap::new());
        }
        let Some(by_seq) = self.seqs.get_mut(&c.group) else {
            return;
        };
        let s = by_seq.entry(seq).or_default();
        if let Some(x) = s.calls.iter_mut().find(|x| x.sig == sig) {
            x.count += 1;
            if x.ranks.len() < RANK_SAMPLE {
                x.ranks.push(rank);
            }
        } else if s.calls.len() < MAX_CALLS_PER_SEQ {
            s.calls.push(SeqCall {
                sig,
                call: Call { seq, ..c.clone() },
                count: 1,
                ranks: vec![rank],
            });
        } else {
            s.more += 1;
        }
    }

    /// The groups the dumps name, with their members (see [`Group::members_from`]).
    pub fn groups(&self) -> Vec<Group> {
        let names: BTreeSet<&String> = self.descs.keys().collect();
        // Gloo writes every group under the name "" in pg_config (the same key, so the last
        // created wins): a config is trusted only for a name the entries use.
        let world = self
            .config
            .values()
            .map(|(_, r)| r.iter().max().map_or(0, |m| m + 1))
            .chain(self.dumps.keys().map(|r| r + 1))
            .max()
            .unwrap_or(0);
        names
            .into_iter()
            .map(|name| {
                let desc = self.descs.get(name).cloned().unwrap_or_default();
                let (ranks, from) = match self.config.get(name) {
                    Some((_, r)) if !r.is_empty() => (r.clone(), "pg_config"),
                    _ if desc == "default_pg" || name == "0" => ((0..world).collect(), "world"),
                    _ => (
                        self.dumps
                            .values()
                            .filter(|d| d.groups.contains_key(name))
                            .map(|d| d.rank)
                            .collect(),
                        "dumps",
                    ),
                };
                Group {
                    name: name.clone(),
                    desc,
                    ranks,
                    members_from: from.to_string(),
                }
            })
            .collect()
    }

    pub fn dumps(&self) -> &BTreeMap<u32, RankDump> {
        &self.dumps
    }

    /// The lowest sequence number of a group where the ranks' calls differ, with each call
    /// and the ranks that made it (largest group first).
    fn first_disagreement(&self, group: &str) -> Option<(u64, Vec<CallRanks>, u32)> {
        let mut found: Option<(u64, &SeqCalls)> = None;
        for (seq, s) in self.seqs.get(group).into_iter().flatten() {
            if (s.calls.len() > 1 || s.more > 0) && found.is_none_or(|(f, _)| *seq < f) {
                found = Some((*seq, s));
            }
        }
        let (seq, s) = found?;
        let mut calls: Vec<CallRanks> = s
            .calls
            .iter()
            .map(|c| (c.call.clone(), c.count, sorted(c.ranks.clone())))
            .collect();
        calls.sort_by(|a, b| b.1.cmp(&a.1).then(a.2.cmp(&b.2)));
        Some((seq, calls, s.more))
    }
}

/// A call, how many ranks made it, and those ranks (up to [`RANK_SAMPLE`], sorted).
type CallRanks = (Call, u32, Vec<u32>);

fn sorted(mut v: Vec<u32>) -> Vec<u32> {
    v.sort_unstable();
    v
}

/// The job's report: the NCCL logs' and the dumps' verdicts in one list (root cause first),
/// with the flight recorder's own section.
#[derive(Debug, Serialize)]
pub(crate) struct JobReport<'a> {
    #[serde(flatten)]
    pub log: &'a super::Report,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flight_recorder: Option<&'a judge::FlightReport>,
}

/// Global rank -> host as the logs say (a rank the logs put on two hosts is left out).
pub(crate) fn rank_hosts(r: &super::Report) -> BTreeMap<u32, String> {
    let mut out: BTreeMap<u32, String> = BTreeMap::new();
    let mut twice = BTreeSet::new();
    for h in r.summary.hosts.iter().filter(|h| !h.host.is_empty()) {
        for &k in &h.ranks {
            if out.insert(k, h.host.clone()).is_some_and(|o| o != h.host) {
                twice.insert(k);
            }
        }
    }
    out.retain(|k, _| !twice.contains(k));
    out
}

/// Judge the dumps and join them to the log's report: the dumps' verdicts go first; the
/// log's collective timeouts become knock-ons of a dump's cause (they are the ranks that
/// waited); what the log says of a rank that left no dump is joined to that verdict.
pub(crate) fn join(report: &mut super::Report, job: &Job) -> judge::FlightReport {
    let hosts = rank_hosts(report);
    let mut fr = judge::judge(job, &hosts);
    // The dumps were judged: "no NCCL output" is no longer the whole answer.
    report.verdicts.retain(|v| v.cause != "no_nccl_output");
    let caused = fr
        .verdicts
        .iter()
        .position(|v| v.severity == crate::finding::Severity::Fail && !v.ranks.is_empty());
    let mut absorbed = Vec::new();
    if let Some(i) = caused {
        report.verdicts.retain(|v| {
            let timeout = v.cause == "collective_timeout";
            if timeout {
                absorbed.push(log_words(v));
            }
            !timeout
        });
        fr.verdicts[i].knock_ons.extend(absorbed);
    }
    for v in fr.verdicts.iter_mut().filter(|v| v.cause == "fr_rank_no_dump") {
        for l in &report.verdicts {
            let of: Vec<u32> = l.rank.into_iter().chain(l.ranks.iter().copied()).collect();
            if of.iter().any(|r| v.ranks.contains(r)) {
                v.log_says.push(log_words(l));
            }
        }
    }
    let mut joined: Vec<super::RootCause> = fr.verdicts.iter().map(as_verdict).collect();
    joined.append(&mut report.verdicts);
    report.verdicts = joined;
    fr
}

/// A log verdict in a line: `collective_timeout on host-a rank 0: <line>`.
fn log_words(v: &super::RootCause) -> String {
    let mut s = format!("NCCL log: {}", v.cause);
    if let Some(h) = &v.host {
        s.push_str(&format!(" on {h}"));
    }
    if let Some(r) = v.rank {
        let mut all = vec![r];
        all.extend(&v.ranks);
        s.push_str(&format!(" rank {}", crate::text::rank_runs(&all)));
    }
    if let Some(q) = v.seq {
        s.push_str(&format!(" seq {q}"));
    }
    if !v.file.is_empty() {
        s.push_str(&format!(" ({}:{})", v.file, v.line_no));
    }
    s
}

/// A dump verdict in the log's verdict shape (findings, exit status, the table's list).
fn as_verdict(v: &judge::FlightVerdict) -> super::RootCause {
    let rank = v.ranks.first().copied();
    let mut explains: Vec<String> = v.knock_ons.clone();
    if !v.waiting.is_empty() {
        explains.insert(
            0,
            format!(
                "rank {} waited (timed out) on it",
                crate::text::rank_runs(&v.waiting)
            ),
        );
    }
    explains.extend(v.log_says.iter().cloned());
    let calls: Vec<String> = v
        .calls
        .iter()
        .map(|c| format!("rank {}: {}", crate::text::rank_runs(&c.ranks), c.call))
        .collect();
    super::RootCause {
        host: rank.and_then(|r| v.hosts.get(&r).cloned()),
        rank,
        ranks: v.ranks.iter().skip(1).copied().collect(),
        file: v.file.clone(),
        line: format!(
            "process group {}{}: {}",
            v.group,
            if v.group_desc.is_empty() {
                String::new()
            } else {
                format!(" ({})", v.group_desc)
            },
            calls.join("; ")
        ),
        meaning: v.meaning.clone(),
        next: v.next.clone(),
        seq: v.seq,
        op: v.op.clone(),
        knock_ons: (v.waiting.len() + v.knock_ons.len()) as u64,
        explains,
        ..super::RootCause::new(v.cause, v.severity)
    }
}
