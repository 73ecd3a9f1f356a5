//! Benchmark (not a test): `nccl-log` on a generated 1 GB job log (512 ranks, srun -l
//! labels, interleaved, a status 12 failure and 512 watchdog timeouts at the end).
//! Run: cargo bench --bench nccl_log   (FABPROBE_BENCH_BYTES to change the size)
//!
//! Prints: the plain read rate of the same file (a 1 MiB-buffer read loop, what `cat`
//! does), the analyser's rate, and the process's peak resident memory after each step.

use std::io::{BufWriter, Read, Write};
use std::time::Instant;

use fabprobe::nccl_log::Analyzer;
use fabprobe::nccl_log::generate::{Scenario, job};

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).map(|l| l.to_string()))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|k| k.parse::<f64>().ok()))
        .map(|kib| kib / 1024.0)
        .unwrap_or(f64::NAN)
}

fn main() {
    let bytes: u64 = std::env::var("FABPROBE_BENCH_BYTES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1 << 30);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job.log");
    let t = Instant::now();
    {
        let f = std::fs::File::create(&path).unwrap();
        let mut w = BufWriter::with_capacity(1 << 20, f);
        // ~225 bytes per steady-state line.
        job(
            &mut w,
            64,
            8,
            Scenario::RetryExceeded {
                host: 37,
                peer_host: 12,
                hca: 3,
            },
            bytes / 225,
            7,
        )
        .unwrap();
        w.flush().unwrap();
    }
    let size = std::fs::metadata(&path).unwrap().len();
    println!(
        "generated {:.2} GB in {:.1} s; peak RSS {:.1} MiB",
        size as f64 / 1e9,
        t.elapsed().as_secs_f64(),
        peak_rss_mib()
    );

    let mut buf = vec![0u8; 1 << 20];
    for round in 0..2 {
        let t = Instant::now();
        let mut f = std::fs::File::open(&path).unwrap();
        let mut n = 0u64;
        loop {
            let k = f.read(&mut buf).unwrap();
            if k == 0 {
                break;
            }
            n += k as u64;
        }
        let s = t.elapsed().as_secs_f64();
        println!("read loop {round}: {:.0} MB/s ({:.2} s)", n as f64 / 1e6 / s, s);

        let t = Instant::now();
        let mut a = Analyzer::new();
        a.read("job.log", std::fs::File::open(&path).unwrap()).unwrap();
        let r = a.finish();
        let s = t.elapsed().as_secs_f64();
        println!(
            "nccl-log {round}: {:.0} MB/s ({:.2} s, {} lines, {} verdict(s), first {} knock-ons {}); peak RSS {:.1} MiB",
            size as f64 / 1e6 / s,
            s,
            r.summary.lines,
            r.verdicts.len(),
            r.verdicts.first().map(|v| v.cause.as_str()).unwrap_or("-"),
            r.verdicts.first().map(|v| v.knock_ons).unwrap_or(0),
            peak_rss_mib()
        );
    }
}
