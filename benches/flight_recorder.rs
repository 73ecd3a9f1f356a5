//! Benchmark: a job's flight-recorder dumps read and judged (`nccl-log`'s flight::Job):
//! 4,096 ranks x 2,000 entries per dump in full mode (`cargo bench --bench
//! flight_recorder`), 64 x 200 in quick mode (`cargo test`). Every rank's dump is the
//! same generated one (pickle laid out as PyTorch's C++ pickler writes a dump, see
//! [`torch_pickle`]; JSON for the JSON figure) except
//! rank 17's, which stops one collective short: the verdict must blame rank 17 alone.
//! Dumps are generated once and read as the CLI reads files (`flight::read_all` on the
//! machine's cores, merged in rank order); the time is the decode, the digest and the
//! judgment, with the binary's allocator (mimalloc, as `src/main.rs` declares). Peak RSS
//! over the whole read (VmHWM, reset before each run: every thread's memory, the allocator's
//! own included) must stay bounded: the digest keeps per rank its last calls and per
//! sequence number the distinct calls with a capped sample of ranks, never the entries; a
//! few dumps are decoded at once. CPU seconds (user+sys, all threads) are printed beside
//! the wall time, for figures taken on a shared machine. `FLIGHT_RECORDER_SIZE=256x2000`
//! runs other sizes (for profiling); `FLIGHT_RECORDER_KEEP=FILE` writes one rank's pickle
//! there.

mod common;

use std::time::Instant;

// The allocator the CLI runs with (src/main.rs), so that the figures are the CLI's:
// serde-pickle allocates per value, and mimalloc took about 30% off the pickle reading.
// (allocation-counter's heap count would replace it, and counted only the calling thread.)
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use fabprobe::nccl_log::flight::{Job, Kind, digest, judge::judge, read_all};
use serde_json::{Value, json};

const CULPRIT: u32 = 17;

fn dump(entries: usize, short: bool) -> Value {
    let n = if short { entries - 1 } else { entries };
    let es: Vec<Value> = (0..n)
        .map(|i| {
            let open = i + 1 == entries;
            let state = if open { "scheduled" } else { "completed" };
            json!({
                "record_id": i, "pg_id": 0, "process_group": ["0", "default_pg"],
                "collective_seq_id": i + 1, "p2p_seq_id": 0, "op_id": i + 1,
                "profiling_name": "nccl:all_reduce", "time_created_ns": 1_780_000_000_000_000_000u64 + i as u64,
                "input_sizes": [[262144]], "input_dtypes": ["BFloat16"],
                "output_sizes": [[262144]], "output_dtypes": ["BFloat16"],
                "state": state,
                "time_discovered_started_ns": null, "time_discovered_completed_ns": null,
                "retired": !open, "timeout_ms": 600000, "is_p2p": false,
                "thread_id": "140000000000000", "thread_name": "pt_main_thread",
            })
        })
        .collect();
    json!({"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[]"}},
           "pg_status": {"0": {"last_enqueued_collective": n, "last_started_collective": -1, "last_completed_collective": n - 1}},
           "comm_lib_version": "2.27.5", "entries": es})
}

/// A dump pickled as PyTorch writes one (`torch::jit::pickle_save`, as the committed Gloo
/// dumps in tests/data/flight-recorder show under `pickletools`): protocol 2, each distinct
/// string written once (BINUNICODE + BINPUT) and named again by its memo index (BINGET),
/// `process_group` a 2-tuple, the smallest integer opcode that holds the value. About 200
/// bytes an entry, where serde-pickle's writer (no memo) takes about 500.
fn torch_pickle(v: &Value) -> Vec<u8> {
    let mut w = TorchPickler::default();
    w.out.extend_from_slice(&[0x80, 2]);
    w.value(v, false);
    w.out.push(b'.');
    w.out
}

#[derive(Default)]
struct TorchPickler {
    out: Vec<u8>,
    memo: std::collections::HashMap<String, u32>,
}

impl TorchPickler {
    fn value(&mut self, v: &Value, tuple: bool) {
        match v {
            Value::Null => self.out.push(b'N'),
            Value::Bool(b) => self.out.push(if *b { 0x88 } else { 0x89 }),
            Value::Number(n) => self.int(
                n.as_i64()
                    .map(i128::from)
                    .or(n.as_u64().map(i128::from))
                    .expect("an integer"),
            ),
            Value::String(s) => self.string(s),
            Value::Array(a) if tuple && a.len() == 2 => {
                self.value(&a[0], false);
                self.value(&a[1], false);
                self.out.push(0x86); // TUPLE2
            }
            Value::Array(a) => {
                self.out.push(b']');
                if !a.is_empty() {
                    self.out.push(b'(');
                    a.iter().for_each(|x| self.value(x, false));
                    self.out.push(b'e');
                }
            }
            Value::Object(m) => {
                self.out.push(b'}');
                if !m.is_empty() {
                    self.out.push(b'(');
                    for (k, x) in m {
                        self.string(k);
                        self.value(x, k == "process_group");
                    }
                    self.out.push(b'u');
                }
            }
        }
    }

    fn string(&mut self, s: &str) {
        if let Some(&i) = self.memo.get(s) {
            match u8::try_from(i) {
                Ok(i) => self.out.extend_from_slice(&[b'h', i]),
                Err(_) => {
                    self.out.push(b'j');
                    self.out.extend_from_slice(&i.to_le_bytes());
                }
            }
            return;
        }
        self.out.push(b'X');
        self.out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.out.extend_from_slice(s.as_bytes());
        let i = self.memo.len() as u32;
        self.memo.insert(s.to_string(), i);
        match u8::try_from(i) {
            Ok(i) => self.out.extend_from_slice(&[b'q', i]),
            Err(_) => {
                self.out.push(b'r');
                self.out.extend_from_slice(&i.to_le_bytes());
            }
        }
    }

    fn int(&mut self, n: i128) {
        if let Ok(b) = u8::try_from(n) {
            self.out.extend_from_slice(&[b'K', b]);
        } else if let Ok(h) = u16::try_from(n) {
            self.out.push(b'M');
            self.out.extend_from_slice(&h.to_le_bytes());
        } else if let Ok(i) = i32::try_from(n) {
            self.out.push(b'J');
            self.out.extend_from_slice(&i.to_le_bytes());
        } else {
            // LONG1: little-endian two's complement, as few bytes as keep the sign.
            let b = n.to_le_bytes();
            let mut len = 16;
            while len > 1
                && ((b[len - 1] == 0 && b[len - 2] & 0x80 == 0)
                    || (b[len - 1] == 0xff && b[len - 2] & 0x80 != 0))
            {
                len -= 1;
            }
            self.out.extend_from_slice(&[0x8a, len as u8]);
            self.out.extend_from_slice(&b[..len]);
        }
    }
}

struct Run {
    secs: f64,
    /// user+sys of every thread of the process over the read.
    cpu_secs: Option<f64>,
    peak_rss_kib: Option<u64>,
    bytes_read: u64,
    verdict: (String, Vec<u32>),
}

/// The process's peak resident set (VmHWM), in KiB.
fn peak_rss_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let l = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    l.split_whitespace().nth(1)?.parse().ok()
}

/// This process's CPU time so far (user+sys, every thread), from /proc/self/stat in
/// USER_HZ ticks (100 a second on Linux, fixed by the /proc ABI).
fn cpu_secs() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name (in parentheses, which may hold spaces).
    let rest = &s[s.rfind(')')? + 2..];
    let mut f = rest.split_whitespace().skip(11);
    let user: u64 = f.next()?.parse().ok()?;
    let sys: u64 = f.next()?.parse().ok()?;
    Some((user + sys) as f64 / 100.0)
}

fn read(ranks: u32, kind: Kind, normal: &[u8], short: &[u8], threads: usize) -> Run {
    // Reset the peak RSS to the current one (Linux 4.0+), so each run reports its own.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let (t, cpu0) = (Instant::now(), cpu_secs());
    let bytes_read: u64 = (0..ranks)
        .map(|r| if r == CULPRIT { short.len() } else { normal.len() } as u64)
        .sum();
    let out = {
        let mut job = Job::new();
        read_all(&mut job, ranks as usize, threads, |r| {
            let b = if r as u32 == CULPRIT { short } else { normal };
            Ok::<_, ()>(digest::digest(&format!("dumps/nccl_trace_rank_{r}"), kind, b))
        })
        .expect("generated dumps read");
        assert!(job.unreadable.is_empty(), "{:?}", job.unreadable);
        let rep = judge(&job, &Default::default());
        rep.verdicts
            .first()
            .map(|v| (v.cause.to_string(), v.ranks.clone()))
    };
    Run {
        secs: t.elapsed().as_secs_f64(),
        cpu_secs: cpu_secs().zip(cpu0).map(|(b, a)| b - a),
        peak_rss_kib: peak_rss_kib(),
        bytes_read,
        verdict: out.unwrap_or_default(),
    }
}

/// `FLIGHT_RECORDER_SIZE=RANKSxENTRIES` (e.g. `256x2000`) instead of the mode's sizes, for
/// profiling a size between the two.
fn size() -> Option<(u32, usize)> {
    let v = std::env::var("FLIGHT_RECORDER_SIZE").ok()?;
    let (r, e) = v.split_once('x')?;
    Some((r.parse().ok()?, e.parse().ok()?))
}

fn main() {
    let mut g = common::Groups::start("flight_recorder");
    let (ranks, entries) = size().unwrap_or(g.mode.pick((64u32, 200usize), (4096, 2000)));
    // The world's members come from the default group: every rank up to the largest seen.
    let normal_v = dump(entries, false);
    let short_v = dump(entries, true);
    let (np, sp) = (torch_pickle(&normal_v), torch_pickle(&short_v));
    // The writer's output is a pickle every reader takes, and the same dump.
    let back: Value =
        serde_pickle::from_slice(&np, serde_pickle::DeOptions::new()).expect("the bench's pickle decodes");
    assert_eq!(
        back["entries"][0]["process_group"],
        normal_v["entries"][0]["process_group"]
    );
    assert_eq!(back["entries"].as_array().map(Vec::len), Some(entries));
    let (nj, sj) = (
        serde_json::to_vec(&normal_v).unwrap(),
        serde_json::to_vec(&short_v).unwrap(),
    );
    drop((normal_v, short_v));
    // FLIGHT_RECORDER_KEEP=FILE keeps one rank's pickle, to compare with a real dump under
    // `python3 -m pickletools`.
    if let Ok(f) = std::env::var("FLIGHT_RECORDER_KEEP") {
        std::fs::write(&f, &np).unwrap_or_else(|e| panic!("write {f}: {e}"));
    }
    let threads = digest::threads();
    println!(
        "{ranks} ranks x {entries} entries; one dump: pickle {} KiB, JSON {} KiB; {threads} threads",
        np.len() / 1024,
        nj.len() / 1024
    );
    for (name, kind, n, s) in [("pickle", Kind::Pickle, &np, &sp), ("json", Kind::Json, &nj, &sj)] {
        let r = read(ranks, kind, n, s, threads);
        println!(
            "{name}: {:.2} s for {:.0} MB ({:.0} MB/s, {:.2} us per entry), CPU {} (one dump {:.1} MiB), peak RSS {}",
            r.secs,
            r.bytes_read as f64 / 1e6,
            r.bytes_read as f64 / 1e6 / r.secs,
            r.secs * 1e6 / (ranks as f64 * entries as f64),
            r.cpu_secs.map_or("unknown".into(), |c| format!(
                "{c:.2} s user+sys ({:.2} us per entry)",
                c * 1e6 / (ranks as f64 * entries as f64)
            )),
            n.len() as f64 / 1048576.0,
            r.peak_rss_kib
                .map_or("unknown".into(), |k| format!("{:.1} MiB", k as f64 / 1024.0)),
        );
        g.check(
            &format!("{name}: the verdict blames rank {CULPRIT} alone"),
            || {
                assert_eq!(r.verdict, ("fr_rank_not_entered".to_string(), vec![CULPRIT]));
            },
        );
        // Bounded: the digest per rank is a few calls, per sequence number a capped sample;
        // the dumps' bytes (ranks x one dump) are never held at once: one being decoded per
        // thread, and the digests of a round (a few KiB each). RSS adds the process itself
        // (code, the generated dumps, the allocator's retained pages): 64 MiB more than the
        // heap bound this bench asserted before (allocation-counter, the calling thread's).
        let bound = 128 * 1048576 + 8 * (ranks as u64) * 1024 + 40 * (n.len() as u64) * threads as u64;
        g.check(
            &format!("{name}: peak RSS bounded ({} MiB)", bound / 1048576),
            || {
                let kib = r.peak_rss_kib.expect("VmHWM in /proc/self/status");
                assert!(kib * 1024 < bound, "peak RSS {kib} KiB");
            },
        );
        g.speed_target(
            &format!("{name}: {ranks} x {entries} read in under 10 s"),
            r.secs < 10.0,
        );
    }
    g.finish()
}
