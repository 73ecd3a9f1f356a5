//! One dump reduced to what the job keeps ([`Digest`]), apart from the job so that dumps are
//! decoded in parallel ([`read_all`]) and merged in input order: the job is the same as from
//! reading the dumps one by one, and memory holds a few dumps at a time, never the job's.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::parse::{self, DumpError, Kind, RawDump};
use super::{Call, RankDump, State};

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
    /// The distinct collective calls (a dump repeats a few shapes thousands of times).
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
    let mut d = RankDump {
        rank,
        file: file.to_string(),
        format: match kind {
            Kind::Pickle => "pickle",
            Kind::Json => "json",
        },
        version: raw.version.unwrap_or_default(),
        entries: raw.entries.len(),
        ..RankDump::default()
    };
    let config = raw
        .pg_config
        .into_iter()
        .map(|(name, g)| (name, g.desc.unwrap_or_default(), g.ranks.unwrap_or_default()))
        .collect();
    let mut descs = BTreeMap::new();
    let calls: Vec<Call> = raw
        .entries
        .into_iter()
        .filter_map(|e| super::call(e, &mut descs))
        .collect();
    summarize(&mut d, &calls);
    let (calls, seqs) = intern(calls);
    Body {
        dump: d,
        config,
        descs,
        calls,
        seqs,
    }
}

/// The rank's digest: the newest call per group (collective and P2P), the newest and the
/// oldest of all, whether completion is tracked and whether the buffer wrapped.
fn summarize(d: &mut RankDump, calls: &[Call]) {
    let newer = |a: &Call, b: &Call| a.record_id >= b.record_id;
    let mut last: BTreeMap<(&str, bool), &Call> = BTreeMap::new();
    for c in calls {
        let slot = last.entry((c.group.as_str(), c.p2p)).or_insert(c);
        if newer(c, slot) {
            *slot = c;
        }
        d.tracks_completion |= matches!(c.state, State::Started | State::Completed);
    }
    for ((group, p2p), c) in last {
        let g = d.groups.entry(group.to_string()).or_default();
        *(if p2p { &mut g.last_p2p } else { &mut g.last }) = Some(c.clone());
    }
    d.last = calls
        .iter()
        .reduce(|a, b| if newer(b, a) { b } else { a })
        .cloned();
    d.oldest = calls
        .iter()
        .reduce(|a, b| if b.record_id < a.record_id { b } else { a })
        .cloned();
    // record_id counts every entry the rank recorded: an oldest kept above 0 means the
    // ring dropped the ones before it.
    d.wrapped = d.oldest.as_ref().is_some_and(|o| o.record_id > 0);
}

/// The collectives as distinct calls (all but the sequence number and record id) and, per
/// entry, its sequence number and call.
fn intern(calls: Vec<Call>) -> (Vec<Call>, Vec<(u64, u32)>) {
    let mut distinct: Vec<Call> = Vec::new();
    let mut index: HashMap<u64, Vec<u32>> = HashMap::new();
    let mut seqs = Vec::with_capacity(calls.len());
    for c in calls.into_iter().filter(|c| !c.p2p) {
        let slot = index.entry(shape_hash(&c)).or_default();
        let i = match slot.iter().find(|&&i| same_shape(&distinct[i as usize], &c)) {
            Some(&i) => i,
            None => {
                let i = distinct.len() as u32;
                slot.push(i);
                distinct.push(c.clone());
                i
            }
        };
        seqs.push((c.seq, i));
    }
    (distinct, seqs)
}

fn shape_hash(c: &Call) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (&c.group, &c.op, &c.input_sizes, &c.input_dtypes).hash(&mut h);
    (&c.output_sizes, &c.output_dtypes, c.state).hash(&mut h);
    h.finish()
}

fn same_shape(a: &Call, b: &Call) -> bool {
    a.group == b.group
        && a.p2p == b.p2p
        && a.op == b.op
        && a.input_sizes == b.input_sizes
        && a.input_dtypes == b.input_dtypes
        && a.output_sizes == b.output_sizes
        && a.output_dtypes == b.output_dtypes
        && a.state == b.state
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
