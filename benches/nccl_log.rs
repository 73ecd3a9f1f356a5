//! Benchmark (not a test): `nccl-log` on two generated logs, written to a temporary
//! directory and deleted after:
//! * a job log (default 1 GB, FABPROBE_BENCH_BYTES): 512 ranks behind `srun -l` labels,
//!   interleaved steady-state INFO lines, a status 12 failure and its knock-ons at the end;
//! * a failure-dense log (default 300 MB, FABPROBE_BENCH_DENSE_BYTES): 64 jobs' WARNs,
//!   error trails and watchdog timeouts mixed in one stream.
//!
//! Run: cargo bench --bench nccl_log
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
//! loaded machine a second thread may get no more CPU). It asserts that the threaded report equals the one-thread report and names the
//! generated failure, and that peak RSS on the whole log is within 32 MiB of that on its
//! first half.

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

/// Analyse the first `limit` bytes of `path`: wall and CPU seconds, peak RSS.
fn analyse(path: &Path, threads: usize, limit: u64) -> Run {
    reset_peak_rss();
    let c = cpu_s();
    let t = Instant::now();
    let mut a = Analyzer::new();
    let opts = ReadOptions {
        threads,
        ..ReadOptions::default()
    };
    let f = std::fs::File::open(path).unwrap();
    a.read_with("bench.log", f.take(limit), &opts).unwrap();
    let report = a.finish();
    Run {
        report,
        wall_s: t.elapsed().as_secs_f64(),
        cpu_s: cpu_s() - c,
        peak_mib: peak_rss_mib(),
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

fn bench(what: &str, path: &Path, check: impl Fn(&Report)) {
    let size = std::fs::metadata(path).unwrap().len();
    let gb = size as f64 / 1e9;
    println!("{what}: {gb:.2} GB");
    let s = read_loop(path);
    println!("  read loop: {:.2} GB/s ({s:.2} s)", gb / s);
    let g = grep(path);
    if let Some(g) = g {
        println!("  grep: {:.2} GB/s ({g:.2} s)  [load {}]", gb / g, load());
    }
    let threads = ReadOptions::default().threads;
    let one = analyse(path, 1, u64::MAX);
    println!(
        "  nccl-log 1 thread: {:.2} GB/s ({:.2} s, {:.2} CPU s, {:.2} GB per CPU s); peak RSS {:.1} MiB  [load {}]",
        gb / one.wall_s,
        one.wall_s,
        one.cpu_s,
        gb / one.cpu_s,
        one.peak_mib,
        load()
    );
    let half = analyse(path, threads, size / 2);
    let all = analyse(path, threads, u64::MAX);
    let vs = g
        .map(|g| format!("; {:.1}x grep's time", all.wall_s / g))
        .unwrap_or_default();
    println!(
        "  nccl-log {threads} threads: {:.2} GB/s ({:.2} s, {:.2} CPU s: {:.2} cores got{vs}); peak RSS {:.1} MiB (first half: {:.1} MiB)  [load {}]",
        gb / all.wall_s,
        all.wall_s,
        all.cpu_s,
        all.cpu_s / all.wall_s,
        all.peak_mib,
        half.peak_mib,
        load()
    );
    // A faster read that changes the report is a defect, not a speed-up.
    assert!(
        all.report == one.report,
        "{what}: the threaded report differs from the one-thread report"
    );
    check(&all.report);
    // The kept state is capped, and the caps fill within the first 128 MB of these logs:
    // from there, more input must not mean more memory.
    assert!(
        size < 256 << 20 || all.peak_mib < half.peak_mib + 32.0,
        "{what}: peak RSS grows with the input ({:.1} MiB on half, {:.1} MiB on all)",
        half.peak_mib,
        all.peak_mib
    );
    let all = all.report;
    let v = &all.verdicts[0];
    println!(
        "  verdict: {} on {} rank {:?} ({} knock-ons); {} lines",
        v.cause,
        v.host.as_deref().unwrap_or("?"),
        v.rank,
        v.knock_ons,
        all.summary.lines
    );
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
    let env = |k: &str, d: u64| std::env::var(k).ok().and_then(|s| s.parse().ok()).unwrap_or(d);
    let bytes = env("FABPROBE_BENCH_BYTES", 1 << 30);
    let dense_bytes = env("FABPROBE_BENCH_DENSE_BYTES", 300_000_000);
    let only = std::env::var("FABPROBE_BENCH_ONLY").unwrap_or_default();
    let keep_dir = std::env::var_os("FABPROBE_BENCH_DIR").map(std::path::PathBuf::from);
    let tmp = tempfile::tempdir().unwrap();
    let dir = keep_dir.as_deref().unwrap_or(tmp.path());
    let keep = keep_dir.is_some();

    if only.is_empty() || only == "job" {
        // ~225 bytes per steady-state line.
        let path = log_file(dir, &format!("job-{bytes}.log"), keep, |w| {
            let sc = Scenario::RetryExceeded {
                host: 37,
                peer_host: 12,
                hca: 3,
            };
            job(w, 64, 8, sc, bytes / 225, 7)
        });
        bench("job log", &path, |r| {
            let v = &r.verdicts[0];
            assert_eq!(
                (v.cause.as_str(), v.host.as_deref(), v.rank, v.knock_ons),
                ("ib_retry_exceeded", Some("gpu-037"), Some(37 * 8 + 3), 511 + 512)
            );
        });
        if !keep {
            std::fs::remove_file(&path).unwrap();
        }
    }

    if only.is_empty() || only == "dense" {
        let path = log_file(dir, &format!("dense-{dense_bytes}.log"), keep, |w| {
            dense(w, 64, dense_bytes, 7)
        });
        bench("failure-dense log", &path, |r| {
            let v = &r.verdicts[0];
            assert_eq!(
                (v.cause.as_str(), v.host.as_deref(), v.rank, v.device.as_deref()),
                ("ib_retry_exceeded", Some("job000-n01"), Some(11), Some("mlx5_3"))
            );
        });
    }
}
