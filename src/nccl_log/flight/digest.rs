//! One dump reduced to what the job keeps ([`Digest`]), apart from the job so that dumps are
//! decoded in parallel ([`read_all`]) and merged in input order: the job is the same as from
//! reading the dumps one by one, and memory holds a few dumps at a time, never the job's.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::fold::Seen;
use super::parse::{self, DumpError, Kind, RawDump};
use super::{Call, RankDump};

/// One dump, decoded and digested (or why not), ready for [`super::Job::merge`].
pub enum Digest {
    /// The file name holds no rank.
    NoRank(DumpError),
    /// The rank's dump could not be decoded.
    Unreadable(u32, DumpError),
    Read(Box<Body>),
}

/// What one dump adds to the job.
pub struct Body {
    pub(super) dump: RankDump,
    /// `pg_config`: (name, desc, ranks), in the dump's key order.
    pub(super) config: Vec<(String, String, Vec<u32>)>,
    /// Group name -> the first description its entries gave.
    pub(super) descs: BTreeMap<String, String>,
    /// The distinct calls (a dump repeats a few shapes thousands of times).
    pub(super) calls: Vec<Call>,
    /// Each collective entry in order: (sequence number, index into `calls`).
    pub(super) seqs: Vec<(u64, u32)>,
}

/// Decode and digest one dump (pure: any thread).
pub fn digest(file: &str, kind: Kind, bytes: &[u8]) -> Digest {
    let rank = match parse::rank_from_name(file) {
        Ok(r) => r,
        Err(e) => return Digest::NoRank(e),
    };
    match parse::decode(file, kind, bytes) {
        Ok(raw) => Digest::Read(Box::new(body(rank, file, kind, raw))),
        Err(e) => Digest::Unreadable(rank, e),
    }
}

fn body(rank: u32, file: &str, kind: Kind, raw: RawDump) -> Body {
    let e = raw.entries;
    let mut d = RankDump {
        rank,
        file: file.to_string(),
        format: match kind {
            Kind::Pickle => "pickle",
            Kind::Json => "json",
        },
        version: raw.version.unwrap_or_default(),
        entries: e.count,
        tracks_completion: e.tracks_completion,
        ..RankDump::default()
    };
    let config = raw
        .pg_config
        .into_iter()
        .map(|(name, g)| (name, g.desc.unwrap_or_default(), g.ranks.unwrap_or_default()))
        .collect();
    let calls = e.calls();
    let at = |s: Seen| Call {
        seq: s.seq,
        record_id: s.record_id,
        ..calls[s.shape as usize].clone()
    };
    for (&(group, p2p), &s) in &e.last_by {
        let g = d.groups.entry(e.groups[group as usize].0.clone()).or_default();
        let mut call = at(s);
        if p2p {
            call.coalesced = batch(&e.p2p_blocks, group, s.seq, &at);
        }
        *(if p2p { &mut g.last_p2p } else { &mut g.last }) = Some(call);
    }
    d.last = e.last.map(at);
    d.oldest = e.oldest.map(at);
    // record_id counts every entry the rank recorded: an oldest kept above 0 means the
    // ring dropped the ones before it.
    d.wrapped = d.oldest.as_ref().is_some_and(|o| o.record_id > 0);
    let mut descs = BTreeMap::new();
    for (name, desc) in e.groups {
        descs.entry(name).or_insert(desc);
    }
    Body {
        dump: d,
        config,
        descs,
        calls,
        seqs: e.seqs,
    }
}

/// The ops of the group's newest P2P batch when the newest P2P entry ends one (several
/// entries under its sequence number), else none.
fn batch(blocks: &[(u32, u64, Vec<u32>)], group: u32, seq: u64, at: &impl Fn(Seen) -> Call) -> Vec<Call> {
    let Some((_, _, shapes)) = blocks.iter().find(|(g, s, _)| *g == group && *s == seq) else {
        return Vec::new();
    };
    if shapes.len() < 2 {
        return Vec::new();
    }
    shapes
        .iter()
        .map(|&shape| {
            at(Seen {
                shape,
                seq,
                record_id: 0,
            })
        })
        .collect()
}

/// Dumps held at once per thread: enough to keep the threads busy, few enough to bound
/// memory by a handful of dumps.
const PER_THREAD: usize = 4;

/// Read `n` dumps on up to `threads` threads and merge them into `job` in index order (the
/// job is the one reading them one by one gives). `load(i)` reads dump i and gives its
/// [`digest`]; its error stops the reading. A dump that cannot be decoded is kept in the job
/// (see [`super::Job::merge`]), not an error here.
pub fn read_all<E, F>(job: &mut super::Job, n: usize, threads: usize, load: F) -> Result<(), E>
where
    E: Send,
    F: Fn(usize) -> Result<Digest, E> + Sync,
{
    let threads = threads.clamp(1, 64);
    let mut start = 0;
    while start < n {
        let end = n.min(start + threads * PER_THREAD);
        let slots: Vec<Mutex<Option<Result<Digest, E>>>> = (start..end).map(|_| Mutex::new(None)).collect();
        let next = AtomicUsize::new(start);
        let work = || loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= end {
                break;
            }
            let d = load(i);
            if let Ok(mut s) = slots[i - start].lock() {
                *s = Some(d);
            }
        };
        if threads == 1 {
            work();
        } else {
            std::thread::scope(|s| {
                for _ in 1..threads.min(end - start) {
                    s.spawn(work);
                }
                work();
            });
        }
        for slot in slots {
            match slot.into_inner().ok().flatten() {
                Some(Ok(d)) => {
                    // The job keeps a dump's error (unreadable): reported, not fatal.
                    let _ = job.merge(d);
                }
                Some(Err(e)) => return Err(e),
                None => {}
            }
        }
        start = end;
    }
    Ok(())
}

/// Threads for reading dumps: the machine's cores, at most 8 (decoding is CPU-bound and the
/// files are read whole).
pub fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(8))
}
