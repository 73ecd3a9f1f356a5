//! Benchmark: `nccl-log` on two generated logs, written to a temporary directory and
//! deleted after:
//! * a job log (default 1 GB, FABPROBE_BENCH_BYTES): 512 ranks behind `srun -l` labels,
//!   interleaved steady-state INFO lines, a status 12 failure and its knock-ons at the end;
//! * a failure-dense log (default 300 MB, FABPROBE_BENCH_DENSE_BYTES): 64 jobs' WARNs,
//!   error trails and watchdog timeouts mixed in one stream.
//!
//! Run: cargo bench --bench nccl_log (the full mode). `cargo test` runs it without
//! `--bench`, and `--quick` asks for it: the quick mode, a 60 MB job log of 128 ranks and a
//! 128 MB dense log of 8 jobs (whose kept state is full within its first half), with the
//! same assertions (scaled as said below) in a few seconds.
//!
//! FABPROBE_BENCH_DIR=DIR writes the logs there and keeps them (a log already there for the
//! asked size is reused: generating takes longer than reading); FABPROBE_BENCH_ONLY=job or
//! dense runs one of the two (for a profiler).
//!
//! For each log it prints the plain read rate (a 1 MiB read loop, what `cat` does), `grep
//! -cE` with three patterns, and `nccl-log` on one thread and on every core: GB/s, the time
//! against grep's, and peak RSS (VmHWM, reset before each step through
//! /proc/self/clear_refs), with the load average and the CPU seconds, since the machine is
//! shared: CPU seconds over wall seconds are the cores the run got (with the kernel's
//! autogroup scheduling, all of a process's threads share one session's CPU share, so on a
//! loaded machine a second thread may get no more CPU). Figures are printed, never asserted.
//!
//! Assertion groups, per log (each one `passed` in the libtest summary line it prints last,
//! exit 1 when any failed):
//! * one piece and chunks: the report of the input read on one thread in the largest chunks
//!   (64 MiB: the quick job log in one piece, the dense one in two) equals the report read
//!   in small chunks on every core and merged (64 KiB in quick mode, so nearly every chunk
//!   boundary cuts a line; the default 4 MiB in full mode);
//! * the verdict names the generated failure (cause, host, rank, device or knock-ons);
//! * flat RSS: peak RSS reading the whole log on one thread (in the small chunks) is within
//!   32 MiB of the peak on its first half in full mode (asserted from 256 MiB; smaller logs
//!   only print it), and within 32 MiB per GiB of input, at least 8 MiB, in quick mode. On
//!   one thread, because when worker threads' partial states are merged moves the peak of a
//!   threaded read by up to 16 MiB between runs.

use std::io::{BufWriter, Read, Write};
use std::path::Path;
use std::time::Instant;

use fabprobe::nccl_log::generate::{Scenario, dense, job};
use fabprobe::nccl_log::{Analyzer, ReadOptions, Report};

fn reset_peak_rss() {
    // "5" resets VmHWM to the current RSS (Linux >= 4.0).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).map(|l| l.to_string()))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|k| k.parse::<f64>().ok()))
        .map(|kib| kib / 1024.0)
        .unwrap_or(f64::NAN)
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// User plus system CPU seconds of this process so far.
fn cpu_s() -> f64 {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_SELF)
        .map(|u| {
            let t = |v: nix::sys::time::TimeVal| v.tv_sec() as f64 + v.tv_usec() as f64 / 1e6;
            t(u.user_time()) + t(u.system_time())
        })
        .unwrap_or(f64::NAN)
}

struct Run {
    report: Report,
    wall_s: f64,
    cpu_s: f64,
    peak_mib: f64,
}

/// Analyse the first `limit` bytes of `path` as `opts` says: wall and CPU seconds, peak RSS.
fn analyse(path: &Path, opts: &ReadOptions, limit: u64) -> Run {
    reset_peak_rss();
    let c = cpu_s();
    let t = Instant::now();
    let mut a = Analyzer::new();
    let f = std::fs::File::open(path).unwrap();
    a.read_with("bench.log", f.take(limit), opts).unwrap();
    let report = a.finish();
    Run {
        report,
        wall_s: t.elapsed().as_secs_f64(),
        cpu_s: cpu_s() - c,
        peak_mib: peak_rss_mib(),
    }
}

/// Quick (what `cargo test` runs) or full (`cargo bench`).
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Quick,
    Full,
}

/// The assertion groups' outcomes, for the libtest summary line.
#[derive(Default)]
struct Tally {
    passed: usize,
    failed: Vec<String>,
}

impl Tally {
    fn check(&mut self, name: &str, ok: Result<(), String>) {
        match ok {
            Ok(()) => {
                println!("  ok: {name}");
                self.passed += 1;
            }
            Err(e) => {
                println!("  FAILED: {name}: {e}");
                self.failed.push(format!("{name}: {e}"));
            }
        }
    }
}

fn read_loop(path: &Path) -> f64 {
    let mut buf = vec![0u8; 1 << 20];
    let t = Instant::now();
    let mut f = std::fs::File::open(path).unwrap();
    while f.read(&mut buf).unwrap() > 0 {}
    t.elapsed().as_secs_f64()
}

/// `grep -cE` with three patterns: the least a search for failures costs.
fn grep(path: &Path) -> Option<f64> {
    let t = Instant::now();
    let out = std::process::Command::new("grep")
        .args(["-cE", "NCCL WARN|Watchdog caught|Got completion"])
        .arg(path)
        .output()
        .ok()?;
    let s = t.elapsed().as_secs_f64();
    println!(
        "  grep -cE (3 patterns): {} matching lines",
        String::from_utf8_lossy(&out.stdout).trim()
    );
    Some(s)
}

fn bench(mode: Mode, what: &str, path: &Path, tally: &mut Tally, check: impl Fn(&Report) -> Result<(), String>) {
    let size = std::fs::metadata(path).unwrap().len();
    let gb = size as f64 / 1e9;
    println!("{what}: {gb:.3} GB");
    let s = read_loop(path);
    println!("  read loop: {:.2} GB/s ({s:.2} s)", gb / s);
    let g = grep(path);
    if let Some(g) = g {
        println!("  grep: {:.2} GB/s ({g:.2} s)  [load {}]", gb / g, load());
    }
    // One piece: one thread, the largest chunks (the quick job log fits in one).
    let one_piece = ReadOptions {
        threads: 1,
        chunk_bytes: 64 << 20,
    };
    // Chunks: every core, and in quick mode chunks so small that nearly every boundary
    // cuts a line.
    let chunked = ReadOptions {
        chunk_bytes: if mode == Mode::Quick { 64 << 10 } else { ReadOptions::default().chunk_bytes },
        ..ReadOptions::default()
    };
    let one = analyse(path, &one_piece, u64::MAX);
    println!(
        "  nccl-log 1 thread: {:.2} GB/s ({:.2} s, {:.2} CPU s, {:.2} GB per CPU s); peak RSS {:.1} MiB  [load {}]",
        gb / one.wall_s,
        one.wall_s,
        one.cpu_s,
        gb / one.cpu_s,
        one.peak_mib,
        load()
    );
    let all = analyse(path, &chunked, u64::MAX);
    let vs = g
        .map(|g| format!("; {:.1}x grep's time", all.wall_s / g))
        .unwrap_or_default();
    println!(
        "  nccl-log {} threads, {} KiB chunks: {:.2} GB/s ({:.2} s, {:.2} CPU s: {:.2} cores got{vs}); peak RSS {:.1} MiB  [load {}]",
        chunked.threads,
        chunked.chunk_bytes >> 10,
        gb / all.wall_s,
        all.wall_s,
        all.cpu_s,
        all.cpu_s / all.wall_s,
        all.peak_mib,
        load()
    );
    // Memory on one thread, in the same chunks: when worker threads' partial states are
    // merged is up to the scheduler, which moves the peak by some MiB from run to run.
    let serial = ReadOptions {
        threads: 1,
        ..chunked.clone()
    };
    let half = analyse(path, &serial, size / 2).peak_mib;
    let whole = analyse(path, &serial, u64::MAX).peak_mib;
    println!("  peak RSS on one thread: {whole:.1} MiB (first half: {half:.1} MiB)");
    // A faster read that changes the report is a defect, not a speed-up.
    tally.check(
        &format!("{what}: one piece and chunks give one report"),
        if all.report == one.report {
            Ok(())
        } else {
            Err("the chunked, threaded report differs from the one-piece report".into())
        },
    );
    tally.check(&format!("{what}: the verdict names the generated failure"), check(&all.report));
    // The kept state is capped, and it is full within the first half of these logs (the
    // quick dense log's by 64 MB; 8 jobs' processes): from there, more input must not mean
    // more memory.
    // Full mode: 32 MiB; quick: 32 MiB per GiB of input, at least 8 MiB (the allocator's and
    // the threads' own noise, a few MiB either way between runs).
    let allowed = match mode {
        Mode::Full => 32.0,
        Mode::Quick => (32.0 * size as f64 / (1u64 << 30) as f64).max(8.0),
    };
    let grew = whole - half;
    if mode == Mode::Full && size < 256 << 20 {
        println!("  peak RSS grew {grew:.1} MiB from the first half (not asserted under 256 MiB in full mode)");
    } else {
        tally.check(
            &format!("{what}: flat RSS (grew {grew:.1} MiB from the first half, {allowed:.1} allowed)"),
            if grew <= allowed { Ok(()) } else { Err("peak RSS grows with the input".into()) },
        );
    }
    let all = all.report;
    if let Some(v) = all.verdicts.first() {
        println!(
            "  verdict: {} on {} rank {:?} ({} knock-ons); {} lines",
            v.cause,
            v.host.as_deref().unwrap_or("?"),
            v.rank,
            v.knock_ons,
            all.summary.lines
        );
    }
}

fn write(path: &Path, f: impl FnOnce(&mut BufWriter<std::fs::File>) -> std::io::Result<()>) {
    let t = Instant::now();
    let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(path).unwrap());
    f(&mut w).unwrap();
    w.flush().unwrap();
    println!(
        "generated {} in {:.1} s",
        path.display(),
        t.elapsed().as_secs_f64()
    );
}

/// The log at `dir/name`, generated unless `keep` and it is there (the size asked for is
/// in the name).
fn log_file(
    dir: &Path,
    name: &str,
    keep: bool,
    generate: impl FnOnce(&mut BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> std::path::PathBuf {
    let path = dir.join(name);
    if keep && path.exists() {
        println!("reusing {}", path.display());
    } else {
        write(&path, generate);
    }
    path
}

fn main() {
    // `cargo bench` passes --bench; `cargo test` passes nothing (and maybe a filter).
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = if args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--quick") {
        Mode::Full
    } else {
        Mode::Quick
    };
    let env = |k: &str, d: u64| std::env::var(k).ok().and_then(|s| s.parse().ok()).unwrap_or(d);
    let (bytes, dense_bytes, hosts) = match mode {
        Mode::Full => (env("FABPROBE_BENCH_BYTES", 1 << 30), env("FABPROBE_BENCH_DENSE_BYTES", 300_000_000), 64),
        Mode::Quick => (60_000_000, 128_000_000, 16),
    };
    // Quick: 8 jobs, whose processes and caps are all seen within the first 64 MB.
    let dense_jobs = match mode {
        Mode::Full => 64,
        Mode::Quick => 8,
    };
    println!(
        "nccl-log bench, {} mode  [load {}]",
        if mode == Mode::Full { "full" } else { "quick" },
        load()
    );
    let only = std::env::var("FABPROBE_BENCH_ONLY").unwrap_or_default();
    let keep_dir = std::env::var_os("FABPROBE_BENCH_DIR").map(std::path::PathBuf::from);
    let tmp = tempfile::tempdir().unwrap();
    let dir = keep_dir.as_deref().unwrap_or(tmp.path());
    let keep = keep_dir.is_some();
    let mut tally = Tally::default();

    if only.is_empty() || only == "job" {
        // ~225 bytes per steady-state line.
        let path = log_file(dir, &format!("job-{hosts}x8-{bytes}.log"), keep, |w| {
            let sc = Scenario::RetryExceeded {
                host: 37 % hosts,
                peer_host: 12,
                hca: 3,
            };
            job(w, hosts, 8, sc, bytes / 225, 7)
        });
        let world = hosts as u64 * 8;
        let host = format!("gpu-{:03}", 37 % hosts);
        bench(mode, "job log", &path, &mut tally, |r| {
            let v = r.verdicts.first().ok_or("no verdict")?;
            let got = (v.cause.as_str(), v.host.as_deref(), v.rank, v.knock_ons);
            // Every other rank flushes, and every rank times out.
            let want = ("ib_retry_exceeded", Some(host.as_str()), Some((37 % hosts) as u32 * 8 + 3), world - 1 + world);
            if got == want { Ok(()) } else { Err(format!("{got:?}, expected {want:?}")) }
        });
        if !keep {
            std::fs::remove_file(&path).unwrap();
        }
    }

    if only.is_empty() || only == "dense" {
        let path = log_file(dir, &format!("dense-{dense_jobs}-{dense_bytes}.log"), keep, |w| {
            dense(w, dense_jobs, dense_bytes, 7)
        });
        bench(mode, "failure-dense log", &path, &mut tally, |r| {
            let v = r.verdicts.first().ok_or("no verdict")?;
            let got = (v.cause.as_str(), v.host.as_deref(), v.rank, v.device.as_deref());
            let want = ("ib_retry_exceeded", Some("job000-n01"), Some(11), Some("mlx5_3"));
            if got == want { Ok(()) } else { Err(format!("{got:?}, expected {want:?}")) }
        });
    }

    for f in &tally.failed {
        eprintln!("failed: {f}");
    }
    let failed = tally.failed.len();
    println!(
        "test result: {}. {} passed; {failed} failed; 0 ignored; 0 measured; 0 filtered out",
        if failed == 0 { "ok" } else { "FAILED" },
        tally.passed
    );
    if failed > 0 {
        std::process::exit(1);
    }
}
