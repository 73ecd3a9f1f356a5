//! Reading one input on every core: the input is cut into chunks of whole lines, worker
//! threads analyse each chunk into a fresh [`Analyzer`], and the caller's thread merges
//! those in input order ([`Analyzer::merge`]). A line longer than [`MAX_LINE_BYTES`] is
//! kept to one byte past the limit (so the chunk's reader sees it was cut) and the rest is
//! skipped and only counted, so no chunk grows with a line. At most `2 x threads` chunks
//! are in flight, so memory does not grow with the input.

use std::collections::{BTreeMap, HashMap};
use std::io::{ErrorKind, Read};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, mpsc};

use super::{Analyzer, MAX_LINE_BYTES};

/// How an input is read.
#[derive(Clone, Debug)]
pub struct ReadOptions {
    /// Worker threads (1: everything on the caller's thread).
    pub threads: usize,
    /// A chunk is cut at the first line end past this many bytes (1 to 64 MiB).
    pub chunk_bytes: usize,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            threads: std::thread::available_parallelism().map_or(1, |n| n.get().min(8)),
            chunk_bytes: 4 << 20,
        }
    }
}

/// Bytes asked of the input per read call.
const READ_BYTES: usize = 256 << 10;

/// Whole lines in `buf[..len]` (the input's last line may lack its newline) and the bytes
/// of over-long lines skipped before they got into `buf`.
pub(super) struct Chunk {
    buf: Vec<u8>,
    len: usize,
    skipped: u64,
}

impl Chunk {
    fn data(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// Cuts an input into [`Chunk`]s at line ends, reading straight into the chunk's buffer.
struct Chunker<R> {
    r: R,
    chunk_bytes: usize,
    cur: Vec<u8>,
    /// Bytes read into `cur`.
    fill: usize,
    /// Where the line that has no newline yet starts in `cur`.
    tail: usize,
    /// That line is already past the limit: skip to its newline.
    long: bool,
    skipped: u64,
    eof: bool,
    /// Buffers handed back by the workers.
    pool: Vec<Vec<u8>>,
    /// Buffers kept for reuse: every buffer that can be in use at once, so none is freed
    /// and allocated again (a fresh 4 MiB buffer costs a page fault and a zeroed page per
    /// 4 KiB on its first read, about as much as reading it).
    keep: usize,
}

impl<R: Read> Chunker<R> {
    fn new(r: R, chunk_bytes: usize) -> Self {
        let chunk_bytes = chunk_bytes.clamp(1, 64 << 20);
        let mut c = Chunker {
            r,
            chunk_bytes,
            cur: Vec::new(),
            fill: 0,
            tail: 0,
            long: false,
            skipped: 0,
            eof: false,
            pool: Vec::new(),
            keep: 2,
        };
        c.cur = c.buffer();
        c
    }

    /// Before a read, `tail < chunk_bytes` and the open line holds at most
    /// `MAX_LINE_BYTES + 1` bytes, so a read of `READ_BYTES` always fits.
    fn capacity(&self) -> usize {
        self.chunk_bytes + MAX_LINE_BYTES + 1 + READ_BYTES
    }

    fn buffer(&mut self) -> Vec<u8> {
        self.pool.pop().unwrap_or_else(|| vec![0; self.capacity()])
    }

    fn recycle(&mut self, c: Chunk) {
        if self.pool.len() < self.keep {
            self.pool.push(c.buf);
        }
    }

    fn next_chunk(&mut self) -> std::io::Result<Option<Chunk>> {
        loop {
            if self.eof {
                if self.fill == 0 {
                    return Ok(None);
                }
                self.tail = self.fill;
                return Ok(Some(self.cut()));
            }
            if self.tail >= self.chunk_bytes {
                return Ok(Some(self.cut()));
            }
            let end = (self.fill + READ_BYTES).min(self.cur.len());
            match self.r.read(&mut self.cur[self.fill..end]) {
                Ok(0) => self.eof = true,
                Ok(n) => self.take(n),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Account for `n` bytes just read at `cur[fill..]`.
    fn take(&mut self, mut n: usize) {
        let start = self.fill;
        if self.long {
            match memchr::memchr(b'\n', &self.cur[start..start + n]) {
                None => {
                    self.skipped += n as u64;
                    return;
                }
                Some(i) => {
                    self.skipped += i as u64;
                    self.cur.copy_within(start + i..start + n, start);
                    n -= i;
                    self.long = false;
                }
            }
        }
        self.fill = start + n;
        if let Some(i) = memchr::memrchr(b'\n', &self.cur[start..self.fill]) {
            self.tail = start + i + 1;
        }
        if self.fill - self.tail > MAX_LINE_BYTES + 1 {
            let keep = self.tail + MAX_LINE_BYTES + 1;
            self.skipped += (self.fill - keep) as u64;
            self.fill = keep;
            self.long = true;
        }
    }

    /// Hand out `cur[..tail]`; the open line moves to the start of a fresh buffer.
    fn cut(&mut self) -> Chunk {
        let mut next = self.buffer();
        let open = self.fill - self.tail;
        next[..open].copy_from_slice(&self.cur[self.tail..self.fill]);
        let buf = std::mem::replace(&mut self.cur, next);
        let c = Chunk {
            buf,
            len: self.tail,
            skipped: std::mem::take(&mut self.skipped),
        };
        self.fill = open;
        self.tail = 0;
        c
    }
}

/// Read `r` to its end into `a`.
pub(super) fn read<R: Read>(a: &mut Analyzer, name: &str, r: R, opts: &ReadOptions) -> std::io::Result<()> {
    let mut ch = Chunker::new(r, opts.chunk_bytes);
    let Some(first) = ch.next_chunk()? else {
        return Ok(());
    };
    // One chunk, or one thread: no workers to start.
    if opts.threads <= 1 || (ch.eof && ch.fill == 0) {
        a.feed_chunk(name, first.data(), first.skipped);
        ch.recycle(first);
        while let Some(c) = ch.next_chunk()? {
            a.feed_chunk(name, c.data(), c.skipped);
            ch.recycle(c);
        }
        return Ok(());
    }
    parallel(a, name, ch, first, opts.threads)
}

/// A worker thread: analyses the chunks it is given, in input order, until the work
/// channel closes, sending each chunk's state back.
fn worker(
    name: &str,
    work_rx: &Mutex<mpsc::Receiver<(u64, Chunk)>>,
    done_tx: mpsc::Sender<Done>,
    full: &AtomicBool,
) {
    // Kept from chunk to chunk of this worker: host ids, the headers read (with those ids)
    // and the failures it has seen. A worker gets its chunks in input order, so a failure
    // it saw in an earlier chunk is a repeat in any later one, and is dropped there before
    // its text is copied (a log of thousands of processes repeats each one's failures in
    // every chunk).
    let mut memory = Analyzer::new();
    loop {
        let job = work_rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
        let Ok((seq, c)) = job else { break };
        let part = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            analyse_chunk(&mut memory, name, &c, full.load(Ordering::Acquire))
        }))
        .ok();
        if done_tx.send((seq, part, c)).is_err() {
            break;
        }
    }
}

/// One chunk's state, read with what the worker remembers of its earlier chunks.
fn analyse_chunk(memory: &mut Analyzer, name: &str, c: &Chunk, after_full: bool) -> Analyzer {
    let mut p = Analyzer::new();
    p.after_full = after_full;
    p.host_names = std::mem::take(&mut memory.host_names);
    p.host_ids = std::mem::take(&mut memory.host_ids);
    p.seen_sightings = std::mem::take(&mut memory.seen_sightings);
    p.headers = std::mem::take(&mut memory.headers);
    // Sized for the processes of the worker's last chunk: a chunk meets most of a log's
    // processes again, and growing the table from empty rehashed it a dozen times a chunk.
    p.procs = std::mem::take(&mut memory.procs);
    p.feed_chunk(name, c.data(), c.skipped);
    memory.procs = HashMap::with_capacity_and_hasher(p.procs.len(), Default::default());
    memory.host_names = p.host_names.clone();
    memory.host_ids = std::mem::take(&mut p.host_ids);
    memory.headers = std::mem::take(&mut p.headers);
    memory.seen_sightings = std::mem::take(&mut p.seen_sightings);
    // Forgetting only costs speed (the merge drops repeats too): memory stays bounded on a
    // log of ever-new failures.
    if memory.seen_sightings.len() > 2 * super::MAX_EVENTS {
        memory.seen_sightings.clear();
    }
    p
}

/// A worker's answer: the chunk's number, its state (`None`: the analysis panicked) and the
/// buffer to reuse.
type Done = (u64, Option<Analyzer>, Chunk);

fn parallel<R: Read>(
    a: &mut Analyzer,
    name: &str,
    mut ch: Chunker<R>,
    first: Chunk,
    threads: usize,
) -> std::io::Result<()> {
    let max_in_flight = 2 * threads as u64;
    // In use at once: the chunks in flight, the one being filled and the one waiting to be sent.
    ch.keep = max_in_flight as usize + 2;
    let (work_tx, work_rx) = mpsc::sync_channel::<(u64, Chunk)>(threads);
    let work_rx = Mutex::new(work_rx);
    let (done_tx, done_rx) = mpsc::channel::<Done>();
    // Set once the merged state holds all the sightings it keeps: every chunk not yet merged
    // comes later in the input, so its workers skip building sightings that the merge
    // would drop (a failure-dense log fills the cap early).
    let full = AtomicBool::new(a.sightings_full());
    std::thread::scope(|sc| {
        for _ in 0..threads {
            let done_tx = done_tx.clone();
            let (work_rx, full) = (&work_rx, &full);
            sc.spawn(move || worker(name, work_rx, done_tx, full));
        }
        drop(done_tx);
        let mut m = Merger {
            next: 0,
            ready: BTreeMap::new(),
            failed: false,
            full: &full,
        };
        let mut sent = 0u64;
        let mut pending = Some(first);
        let result = loop {
            let c = match pending.take() {
                Some(c) => c,
                None => match ch.next_chunk() {
                    Ok(Some(c)) => c,
                    Ok(None) => break Ok(()),
                    Err(e) => break Err(e),
                },
            };
            while sent - m.next >= max_in_flight && !m.failed {
                match done_rx.recv() {
                    Ok(d) => m.take(a, &mut ch, d),
                    Err(_) => m.failed = true,
                }
            }
            if m.failed || work_tx.send((sent, c)).is_err() {
                break Ok(());
            }
            sent += 1;
        };
        drop(work_tx);
        while m.next < sent && !m.failed {
            match done_rx.recv() {
                Ok(d) => m.take(a, &mut ch, d),
                Err(_) => m.failed = true,
            }
        }
        if m.failed {
            return Err(std::io::Error::other(format!(
                "analysing {name} failed in a worker thread (a bug: please report it with the log)"
            )));
        }
        result
    })
}

/// Merges the workers' states in input order.
struct Merger<'a> {
    next: u64,
    ready: BTreeMap<u64, Analyzer>,
    failed: bool,
    full: &'a AtomicBool,
}

impl Merger<'_> {
    fn take<R: Read>(&mut self, a: &mut Analyzer, ch: &mut Chunker<R>, (seq, part, c): Done) {
        ch.recycle(c);
        let Some(part) = part else {
            self.failed = true;
            return;
        };
        self.ready.insert(seq, part);
        while let Some(p) = self.ready.remove(&self.next) {
            a.merge(p);
            self.next += 1;
        }
        if a.sightings_full() {
            self.full.store(true, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Past the sightings cap, workers skip the sightings of chunks the merge has not
    /// reached: the report must still be one pass's.
    #[test]
    fn a_log_past_the_sightings_cap_reads_the_same_on_every_core() {
        let mut log = Vec::new();
        super::super::generate::dense(&mut log, 64, 64 << 20, 3).unwrap();
        let read = |threads| {
            let mut a = Analyzer::new();
            let opts = ReadOptions {
                threads,
                chunk_bytes: 1 << 20,
            };
            a.read_with("dense.log", &log[..], &opts).unwrap();
            a
        };
        let one = read(1);
        assert!(one.sightings_full(), "the log must fill the cap to test this");
        let all = read(3);
        assert_eq!(all.sightings.len(), one.sightings.len());
        assert!(all.finish() == one.finish());
    }
}
