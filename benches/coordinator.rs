//! The coordinator at scale: `cargo bench --bench coordinator -- N` (release; ~1 minute).
//! N (else `FABPROBE_BENCH_RANKS`, default 4096) simulated ranks, served by 8 threads that each own
//! many nonblocking control connections, join one coordinator on loopback (with the real
//! watchdog as its judge), then heartbeat every 500 ms as a working rank does. Measured:
//! 1. the coordinator's CPU while it serves the heartbeats (process CPU minus the simulated
//!    ranks' own threads), per heartbeat and as a share of one core;
//! 2. one rank stops sending (a frozen process, connection open): the time from its last
//!    heartbeat to the coordinator's verdict, against the silence deadline + 1 s, and that
//!    the verdict is exactly `rank_stalled` naming that rank (no false verdict).

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use fabprobe::ring::coordinator::{self, CoordinatorConfig};
use fabprobe::ring::gate;
use fabprobe::ring::model::{Phase, RankInfo, VerdictKind, WaitReport};
use fabprobe::ring::rendezvous::{HEARTBEAT, silence};
use fabprobe::ring::run::watchdog_judge;
use fabprobe::ring::wire::{self, Hello, Msg};

const THREADS: usize = 8;
/// `--timeout` (the CLI's default): the silence deadline is then 10 s.
const TIMEOUT: Duration = Duration::from_secs(30);
const STEADY: Duration = Duration::from_secs(6);

fn frame(m: &Msg) -> Vec<u8> {
    let mut b = Vec::new();
    wire::write_msg(&mut b, m).unwrap();
    b
}

/// Read one frame; decode it only when small (the table is skipped unparsed).
fn read_small(s: &mut TcpStream) -> Option<Msg> {
    let mut head = [0u8; 8];
    s.read_exact(&mut head).ok()?;
    let len = u32::from_be_bytes([head[4], head[5], head[6], head[7]]) as usize;
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).ok()?;
    if len < 4096 {
        wire::decode(&body).ok()
    } else {
        Some(Msg::Ping)
    }
}

fn thread_cpu() -> Duration {
    cpu(libc::RUSAGE_THREAD)
}

fn cpu(who: libc::c_int) -> Duration {
    // SAFETY: getrusage into a zeroed local struct.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(who, &mut ru);
        ru
    };
    let t = |tv: libc::timeval| Duration::new(tv.tv_sec as u64, tv.tv_usec as u32 * 1000);
    t(ru.ru_utime) + t(ru.ru_stime)
}

fn main() {
    // `cargo bench` passes `--bench` first; the rank count is the first number.
    let n: u32 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .or_else(|| {
            std::env::var("FABPROBE_BENCH_RANKS")
                .ok()
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(4096);
    let stalled: u32 = n * 3 / 10;
    let nofile = gate::raise_fd_limit();
    println!(
        "coordinator bench: {n} ranks, {THREADS} client threads, --timeout {} s, fd limit {nofile}",
        TIMEOUT.as_secs()
    );
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let cfg = CoordinatorConfig {
        world: n,
        token: "bench".into(),
        timeout: TIMEOUT,
        advertised: addr.to_string(),
        params: "p".into(),
        judge: Some(watchdog_judge(TIMEOUT)),
        scan: None,
        on_row: None,
    };
    let t_start = Instant::now();
    let coord = thread::spawn(move || {
        let rep = coordinator::coordinate(l, cfg);
        (rep, Instant::now())
    });
    let go_barrier = Arc::new(Barrier::new(THREADS + 1));
    let stop = Arc::new(AtomicBool::new(false));
    let stall = Arc::new(AtomicBool::new(false));
    let last_beat_of_stalled: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let beats = Arc::new(AtomicU64::new(0));
    let sims_cpu = Arc::new(Mutex::new(Vec::<(Duration, Duration)>::new()));
    // 1: measure from the next round on; 2: stop measuring.
    let window = Arc::new(std::sync::atomic::AtomicU8::new(0));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (go_barrier, stop, stall, last, beats, sims_cpu, window) = (
                go_barrier.clone(),
                stop.clone(),
                stall.clone(),
                last_beat_of_stalled.clone(),
                beats.clone(),
                sims_cpu.clone(),
                window.clone(),
            );
            thread::spawn(move || {
                let mine: Vec<u32> = (0..n).filter(|r| *r as usize % THREADS == t).collect();
                let mut conns: Vec<(u32, TcpStream)> = Vec::new();
                for &r in &mine {
                    let mut s = loop {
                        match TcpStream::connect(addr) {
                            Ok(s) => break s,
                            Err(_) => thread::sleep(Duration::from_millis(20)),
                        }
                    };
                    let h = Hello {
                        protocol: wire::PROTOCOL,
                        rank: r,
                        world: n,
                        token: "bench".into(),
                        info: RankInfo {
                            rails: Vec::new(),
                            rank: r,
                            host: format!("sim-{r}"),
                            address: format!("127.0.0.1:{}", 10000 + r),
                            device: Some("lo".into()),
                            transport: "tcp".into(),
                            pid: Some(r),
                            capabilities: Vec::new(),
                        },
                        capabilities: vec!["tcp".into()],
                        params: "p".into(),
                    };
                    s.write_all(&frame(&Msg::Hello(h))).unwrap();
                    conns.push((r, s));
                }
                // The table, then ready, then go (pings may come in between).
                for (_, s) in &mut conns {
                    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
                    match read_small(s) {
                        Some(Msg::Reject { reason }) => panic!("rejected: {reason}"),
                        Some(_) => {}
                        None => panic!("no table"),
                    }
                }
                for (r, s) in &mut conns {
                    s.write_all(&frame(&Msg::Ready { rank: *r })).unwrap();
                }
                for (_, s) in &mut conns {
                    loop {
                        match read_small(s) {
                            Some(Msg::Go) => break,
                            Some(_) => continue,
                            None => panic!("no go"),
                        }
                    }
                    s.set_nonblocking(true).unwrap();
                }
                go_barrier.wait();
                let mut progress = 1u64;
                let mut scratch = vec![0u8; 1 << 16];
                let mut measuring: Option<Duration> = None;
                let mut phase = 0;
                while !stop.load(Ordering::Relaxed) {
                    let round = Instant::now();
                    progress += 1;
                    for (r, s) in &mut conns {
                        if *r == stalled && stall.load(Ordering::Relaxed) {
                            continue;
                        }
                        let w = WaitReport {
                            rank: *r,
                            phase: Phase::ReduceScatter,
                            round: progress,
                            step: 0,
                            channel: 0,
                            waiting_on: None,
                            waiting_to_receive: false,
                            bytes_received: 0,
                            bytes_sent: 0,
                            since_progress_ms: 0,
                            progress,
                        };
                        let _ = s.write_all(&frame(&Msg::Heartbeat(w)));
                        beats.fetch_add(1, Ordering::Relaxed);
                        if *r == stalled {
                            *last.lock().unwrap() = Some(Instant::now());
                        }
                        // Drain pings (and the end) so no buffer fills.
                        loop {
                            match s.read(&mut scratch) {
                                Ok(0) => break,
                                Ok(_) => continue,
                                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                                Err(_) => break,
                            }
                        }
                    }
                    // Measurement window: main says when (once, at a round boundary).
                    let w = window.load(Ordering::Relaxed);
                    if phase == 0 && w == 1 {
                        measuring = Some(thread_cpu());
                        phase = 1;
                    } else if phase == 1 && w == 2 {
                        let c0 = measuring.take().unwrap_or_default();
                        sims_cpu.lock().unwrap().push((c0, thread_cpu()));
                        phase = 2;
                    }
                    let left = HEARTBEAT.saturating_sub(round.elapsed());
                    thread::sleep(left);
                }
                conns.len()
            })
        })
        .collect();
    go_barrier.wait();
    let joined = t_start.elapsed();
    println!("joined and go after {:.1} s", joined.as_secs_f64());
    thread::sleep(Duration::from_secs(2));
    // Steady heartbeats: the coordinator's CPU over the window.
    window.store(1, Ordering::Relaxed);
    let (p0, b0, t0) = (
        cpu(libc::RUSAGE_SELF),
        beats.load(Ordering::Relaxed),
        Instant::now(),
    );
    thread::sleep(STEADY);
    window.store(2, Ordering::Relaxed);
    let (p1, b1, wall) = (
        cpu(libc::RUSAGE_SELF),
        beats.load(Ordering::Relaxed),
        t0.elapsed(),
    );
    // Each client thread closes its own window at its next round.
    while sims_cpu.lock().unwrap().len() < THREADS {
        thread::sleep(Duration::from_millis(20));
    }
    let sims: Duration = sims_cpu
        .lock()
        .unwrap()
        .iter()
        .map(|(a, b)| b.saturating_sub(*a))
        .sum();
    let coord_cpu = (p1 - p0).saturating_sub(sims);
    let nbeats = b1 - b0;
    println!(
        "steady: {nbeats} heartbeats in {:.1} s ({:.0}/s); coordinator CPU {:.2} s = {:.0}% of one core, {:.1} us per heartbeat (simulated ranks: {:.2} s)",
        wall.as_secs_f64(),
        nbeats as f64 / wall.as_secs_f64(),
        coord_cpu.as_secs_f64(),
        100.0 * coord_cpu.as_secs_f64() / wall.as_secs_f64(),
        coord_cpu.as_secs_f64() * 1e6 / nbeats.max(1) as f64,
        sims.as_secs_f64()
    );
    // A healthy world gives no verdict: the coordinator is still serving.
    if coord.is_finished() {
        let (rep, _) = coord.join().unwrap();
        println!(
            "FALSE VERDICT on a healthy world: {:?} {:?}",
            rep.verdicts, rep.abort
        );
        std::process::exit(1);
    }
    // One rank freezes.
    stall.store(true, Ordering::Relaxed);
    let (rep, ended) = coord.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        let _ = h.join();
    }
    let last = last_beat_of_stalled.lock().unwrap().unwrap_or(t0);
    let took = ended.duration_since(last);
    let bound = silence(TIMEOUT) + Duration::from_secs(1);
    let kinds: Vec<_> = rep.verdicts.iter().map(|v| (v.kind, v.from_rank)).collect();
    let right = kinds == vec![(VerdictKind::RankStalled, Some(stalled))];
    println!(
        "stall: rank {stalled} named {:.2} s after its last heartbeat (bound: silence {:.0} s + 1 s = {:.0} s): {}; verdicts {:?}",
        took.as_secs_f64(),
        silence(TIMEOUT).as_secs_f64(),
        bound.as_secs_f64(),
        if took <= bound { "within" } else { "LATE" },
        kinds
    );
    if let Some(v) = rep.verdicts.first() {
        println!("  {}", v.message);
    }
    println!("result: {}", if right && took <= bound { "PASS" } else { "FAIL" });
    if !(right && took <= bound) {
        std::process::exit(1);
    }
}
