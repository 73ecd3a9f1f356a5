//! The coordinator at scale: `cargo bench --bench coordinator -- N` (release; about a minute).
//! N (else `FABPROBE_BENCH_RANKS`, default 4096) simulated ranks join one coordinator on
//! loopback (with the real watchdog as its judge). The simulated ranks run in a child process
//! (this same binary, `FABPROBE_BENCH_CLIENT` set) with its own open-file limit, so the
//! coordinator's N descriptors and the clients' N fit a hard limit of 20,000 at 16,384 ranks;
//! when they do not fit, the bench says what to set and exits 2, never hangs. Measured:
//! 1. join to go: from the coordinator's start until every rank has its table and its go;
//! 2. full progress rounds: every rank reports a row for one size; the time until the
//!    coordinator has them all (its row sink fires);
//! 3. the coordinator's CPU while ranks heartbeat every 500 ms (this process only);
//! 4. one rank stops sending (a frozen process, connection open): the verdict must be exactly
//!    `rank_stalled` naming it, within the silence deadline + 1 s. Any other verdict, at any
//!    point, exits 1.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use fabprobe::ring::control::take_frames;
use fabprobe::ring::coordinator::{self, CoordinatorConfig, CoordinatorReport};
use fabprobe::ring::gate;
use fabprobe::ring::model::{Phase, RankInfo, VerdictKind, WaitReport};
use fabprobe::ring::rendezvous::{self, HEARTBEAT, silence};
use fabprobe::ring::run::watchdog_judge;
use fabprobe::ring::wire::{self, Hello, Msg, RowResult};

const THREADS: usize = 8;
/// `--timeout` (the CLI's default): the silence deadline is then 10 s.
const TIMEOUT: Duration = Duration::from_secs(30);
/// `--join-timeout` (the CLI's default at `--timeout 30`).
const JOIN_TIMEOUT: Duration = Duration::from_secs(60);
const STEADY: Duration = Duration::from_secs(5);
const ROUNDS: u64 = 3;
/// Every wait of the bench ends by then.
const PHASE_DEADLINE: Duration = Duration::from_secs(120);

/// How the coordinator's run ended (its abort and verdicts), once it did.
static ENDED: Mutex<Option<String>> = Mutex::new(None);

/// The simulated ranks' progress, printed to stderr every second while they join (where a
/// slow join is: connecting, waiting for tables, or reconnecting after a refusal).
static CONNECTED: AtomicU64 = AtomicU64::new(0);
static TABLES: AtomicU64 = AtomicU64::new(0);
static GOS: AtomicU64 = AtomicU64::new(0);
static REJOINS: AtomicU64 = AtomicU64::new(0);

/// The judge's calls as the coordinator made them: the longest call, the longest gap
/// between two calls during the run, and when the first verdict came.
#[derive(Default)]
struct JudgeLog {
    last_call: Option<Instant>,
    max_gap: Duration,
    max_call: Duration,
    first_verdict: Option<Instant>,
}
static JUDGED: Mutex<Option<JudgeLog>> = Mutex::new(None);

fn frame(m: &Msg) -> Vec<u8> {
    let mut b = Vec::new();
    wire::write_msg(&mut b, m).unwrap();
    b
}

fn cpu_self() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    let Ok(ru) = getrusage(UsageWho::RUSAGE_SELF) else {
        return Duration::ZERO;
    };
    let tv = |t: nix::sys::time::TimeVal| Duration::new(t.tv_sec() as u64, t.tv_usec() as u32 * 1000);
    tv(ru.user_time()) + tv(ru.system_time())
}

fn fail(code: i32, msg: &str) -> ! {
    eprintln!("coordinator bench: {msg}");
    std::process::exit(code)
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
    if let Ok(addr) = std::env::var("FABPROBE_BENCH_CLIENT") {
        return client(n, addr.parse().unwrap_or_else(|_| fail(2, "bad client address")));
    }
    coordinator_side(n);
}

// ---------------------------------------------------------------- the coordinator's process

/// What the child says on its stdout, one line each.
fn lines(child: &mut Child) -> Receiver<String> {
    let out = child.stdout.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for l in BufReader::new(out).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

fn expect(rx: &Receiver<String>, want: &str, child: &mut Child) -> Instant {
    match rx.recv_timeout(PHASE_DEADLINE) {
        Ok(l) if l == want => Instant::now(),
        Ok(l) => {
            let _ = child.kill();
            fail(2, &format!("the simulated ranks said {l:?}, expected {want:?}"))
        }
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            fail(
                2,
                &format!(
                    "the simulated ranks ended or said nothing within {PHASE_DEADLINE:?} (waiting for {want:?}); \
                     the coordinator: {}",
                    {
                        thread::sleep(Duration::from_secs(1));
                        ENDED
                            .lock()
                            .unwrap()
                            .clone()
                            .unwrap_or_else(|| "still running".into())
                    }
                ),
            )
        }
    }
}

fn tell(stdin: &mut ChildStdin, line: &str) {
    let _ = writeln!(stdin, "{line}");
    let _ = stdin.flush();
}

fn coordinator_side(n: u32) {
    let stalled: u32 = n * 3 / 10;
    let nofile = gate::raise_fd_limit();
    if let Err(e) = coordinator::check_fd_limit(n, nofile) {
        fail(2, &e);
    }
    let cores = thread::available_parallelism().map(|c| c.get()).unwrap_or(1);
    println!(
        "coordinator bench: {n} ranks ({THREADS} client threads in a child process), --timeout {} s, fd limit {nofile}, {cores} cores, {}",
        TIMEOUT.as_secs(),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    let l = rendezvous::listen("127.0.0.1:0".parse().unwrap()).unwrap_or_else(|e| fail(2, &e.to_string()));
    let addr = l.local_addr().unwrap();
    let rows: Arc<Mutex<Vec<(u64, Instant)>>> = Arc::default();
    let sink_rows = rows.clone();
    let cfg = CoordinatorConfig {
        world: n,
        token: "bench".into(),
        timeout: TIMEOUT,
        join_timeout: JOIN_TIMEOUT,
        advertised: addr.to_string(),
        params: "p".into(),
        judge: Some({
            let inner = watchdog_judge(TIMEOUT);
            Arc::new(move |rep: &CoordinatorReport, now_ms: u64, final_call: bool| {
                let t = Instant::now();
                let v = inner(rep, now_ms, final_call);
                let mut g = JUDGED.lock().unwrap();
                let log = g.get_or_insert_with(JudgeLog::default);
                if let Some(prev) = log.last_call.filter(|_| !final_call) {
                    log.max_gap = log.max_gap.max(t.duration_since(prev));
                }
                log.last_call = Some(t);
                log.max_call = log.max_call.max(t.elapsed());
                if !v.is_empty() && log.first_verdict.is_none() {
                    log.first_verdict = Some(Instant::now());
                }
                v
            })
        }),
        scan: None,
        on_row: Some(Arc::new(move |_: &[RankInfo], rows: Vec<RowResult>| {
            let size = rows.first().map(|r| r.size_bytes).unwrap_or(0);
            sink_rows.lock().unwrap().push((size, Instant::now()));
        })),
        rings: None,
    };
    let mut child = Command::new(std::env::current_exe().unwrap())
        .arg(n.to_string())
        .env("FABPROBE_BENCH_CLIENT", addr.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| fail(2, &format!("cannot start the simulated ranks: {e}")));
    let rx = lines(&mut child);
    let mut stdin = child.stdin.take().expect("piped");
    let t_start = Instant::now();
    let coord = thread::spawn(move || {
        let rep = coordinator::coordinate(l, cfg);
        *ENDED.lock().unwrap() = Some(format!(
            "{:?}; verdicts {:?}; {} connections rejected",
            rep.abort,
            rep.verdicts.iter().map(|v| &v.message).collect::<Vec<_>>(),
            rep.rejected_listed as u64 + rep.rejected_unlisted
        ));
        (rep, Instant::now())
    });
    let false_verdict = |coord: &thread::JoinHandle<(CoordinatorReport, Instant)>, child: &mut Child| {
        if coord.is_finished() {
            let _ = child.kill();
            let _ = child.wait();
            let why = ENDED.lock().unwrap().clone().unwrap_or_default();
            if let Some(log) = JUDGED.lock().unwrap().as_ref() {
                eprintln!(
                    "judge: longest call {:.0} ms, longest gap between calls {:.0} ms",
                    log.max_call.as_secs_f64() * 1e3,
                    log.max_gap.as_secs_f64() * 1e3
                );
            }
            // The first verdicts only: thousands of lines tell nothing more.
            let why: String = why.chars().take(2000).collect();
            fail(
                1,
                &format!("FALSE VERDICT on a healthy world (the coordinator ended the run): {why}"),
            );
        }
    };
    let go = expect(&rx, "go", &mut child);
    println!("join to go: {:.2} s", go.duration_since(t_start).as_secs_f64());
    false_verdict(&coord, &mut child);
    // Full progress rounds: every rank reports a row of one size.
    for k in 1..=ROUNDS {
        let t0 = Instant::now();
        tell(&mut stdin, &format!("row {k}"));
        let until = t0 + PHASE_DEADLINE;
        let done = loop {
            if let Some(&(_, at)) = rows.lock().unwrap().iter().find(|(s, _)| *s == k) {
                break at;
            }
            if Instant::now() > until {
                let _ = child.kill();
                fail(
                    1,
                    &format!("round {k}: not every rank's row arrived within {PHASE_DEADLINE:?}"),
                );
            }
            false_verdict(&coord, &mut child);
            thread::sleep(Duration::from_millis(2));
        };
        println!(
            "progress round {k}: every rank's row at the coordinator after {:.0} ms",
            done.duration_since(t0).as_secs_f64() * 1e3
        );
    }
    // Steady heartbeats: this process's CPU is the coordinator's (the ranks are the child).
    thread::sleep(Duration::from_secs(1));
    let (c0, t0) = (cpu_self(), Instant::now());
    thread::sleep(STEADY);
    let (c1, wall) = (cpu_self(), t0.elapsed());
    let beats = n as f64 * wall.as_secs_f64() / HEARTBEAT.as_secs_f64();
    let cpu = c1 - c0;
    println!(
        "steady: ~{beats:.0} heartbeats in {:.1} s; coordinator CPU {:.2} s = {:.0}% of one core, {:.1} us per heartbeat",
        wall.as_secs_f64(),
        cpu.as_secs_f64(),
        100.0 * cpu.as_secs_f64() / wall.as_secs_f64(),
        cpu.as_secs_f64() * 1e6 / beats.max(1.0)
    );
    false_verdict(&coord, &mut child);
    // One rank freezes; its last heartbeat was at most one period before this.
    let t_stall = Instant::now();
    tell(&mut stdin, "stall");
    let stall_deadline = t_stall + silence(TIMEOUT) + Duration::from_secs(30);
    while !coord.is_finished() && Instant::now() < stall_deadline {
        thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    if !coord.is_finished() {
        fail(1, "the frozen rank was never named");
    }
    let (rep, ended) = coord.join().unwrap();
    let took = ended.duration_since(t_stall);
    let bound = silence(TIMEOUT) + Duration::from_secs(1);
    let kinds: Vec<_> = rep.verdicts.iter().map(|v| (v.kind, v.from_rank)).collect();
    let right = kinds == vec![(VerdictKind::RankStalled, Some(stalled))];
    println!(
        "stall: rank {stalled} named {:.2} s after it stopped (its last heartbeat up to {:.1} s earlier; bound: silence {:.0} s + 1 s): {}; verdicts {:?}",
        took.as_secs_f64(),
        HEARTBEAT.as_secs_f64(),
        silence(TIMEOUT).as_secs_f64(),
        if took <= bound { "within" } else { "LATE" },
        kinds
    );
    if let Some(v) = rep.verdicts.first() {
        println!("  {}", v.message);
    }
    if let Some(log) = JUDGED.lock().unwrap().as_ref() {
        println!(
            "judge: longest call {:.0} ms, longest gap between calls {:.0} ms; first verdict {:.2} s after the stall, \
             the run's end {:.2} s after it",
            log.max_call.as_secs_f64() * 1e3,
            log.max_gap.as_secs_f64() * 1e3,
            log.first_verdict
                .map(|t| t.duration_since(t_stall).as_secs_f64())
                .unwrap_or(f64::NAN),
            took.as_secs_f64()
        );
    }
    println!("result: {}", if right && took <= bound { "PASS" } else { "FAIL" });
    if !(right && took <= bound) {
        std::process::exit(1);
    }
}

// ---------------------------------------------------------------- the simulated ranks

fn hello(r: u32, n: u32) -> Msg {
    Msg::Hello(Hello {
        protocol: wire::PROTOCOL,
        rank: r,
        world: n,
        token: "bench".into(),
        info: RankInfo {
            rails: Vec::new(),
            rank: r,
            host: format!("sim-{r}"),
            address: format!("127.0.0.1:{}", 10000 + r % 50000),
            device: Some("lo".into()),
            transport: "tcp".into(),
            pid: Some(r),
            capabilities: vec!["tcp".into()],
        },
        capabilities: vec!["tcp".into()],
        params: "p".into(),
    })
}

/// Connect and say hello; a busy refusal (the door's per-source cap: every simulated rank
/// comes from 127.0.0.1) is retried as a real rank does.
fn join_one(addr: SocketAddr, r: u32, n: u32, deadline: Instant) -> TcpStream {
    loop {
        if Instant::now() > deadline {
            fail(2, &format!("rank {r} could not join within {PHASE_DEADLINE:?}"));
        }
        let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(5)) else {
            thread::sleep(Duration::from_millis(20));
            continue;
        };
        let _ = s.set_nodelay(true);
        if s.write_all(&frame(&hello(r, n))).is_err() {
            continue;
        }
        CONNECTED.fetch_add(1, Ordering::Relaxed);
        return s;
    }
}

/// Connections one client thread has in flight at once (connecting, hello not yet written):
/// all threads together stay under the listen backlog, so no SYN is dropped into a
/// one-second retransmit.
const IN_FLIGHT: usize = 256;

/// Connect every rank of `mine` and write its hello, many at once (nonblocking): one blocking
/// connect after another waits a scheduler wake-up each, and 2,048 in a row took 40 s on
/// this machine at load 13 (the simulated ranks, not the coordinator, were the limit). A
/// connection refused or reset is started again, until `deadline`.
fn join_many(addr: SocketAddr, mine: &[u32], n: u32, deadline: Instant) -> Vec<(u32, TcpStream)> {
    use socket2::{Domain, Socket, Type};
    let start = |r: u32| -> (u32, Socket, Vec<u8>, usize) {
        let s = Socket::new(Domain::for_address(addr), Type::STREAM, None)
            .unwrap_or_else(|e| fail(2, &format!("rank {r}: socket: {e}")));
        s.set_nonblocking(true).unwrap();
        let _ = s.set_tcp_nodelay(true);
        // In progress (EINPROGRESS) is the normal answer; a failure shows on the first write.
        // Each 1,024 ranks from their own loopback address: from one source address the
        // kernel's search for a free port checks every established connection (perf: a third
        // of the bench's CPU in __inet_check_established at 16,384 ranks).
        if let std::net::IpAddr::V4(ip) = addr.ip()
            && ip.is_loopback()
        {
            let src = std::net::Ipv4Addr::new(127, 0, (r / 1024 / 250) as u8, 2 + (r / 1024 % 250) as u8);
            let _ = s.bind(&SocketAddr::new(src.into(), 0).into());
        }
        let _ = s.connect(&addr.into());
        (r, s, frame(&hello(r, n)), 0)
    };
    let mut todo: std::collections::VecDeque<u32> = mine.iter().copied().collect();
    let mut flying: Vec<(u32, Socket, Vec<u8>, usize)> = Vec::new();
    let mut done = Vec::with_capacity(mine.len());
    while !todo.is_empty() || !flying.is_empty() {
        if Instant::now() > deadline {
            fail(
                2,
                &format!(
                    "{} simulated ranks could not join within {PHASE_DEADLINE:?}",
                    todo.len() + flying.len()
                ),
            );
        }
        while flying.len() < IN_FLIGHT
            && let Some(r) = todo.pop_front()
        {
            flying.push(start(r));
        }
        let mut i = 0;
        while i < flying.len() {
            let (r, s, hello, off) = &mut flying[i];
            match s.send(&hello[*off..]) {
                Ok(k) => *off += k,
                Err(e) if e.kind() == ErrorKind::WouldBlock || e.raw_os_error() == Some(libc::ENOTCONN) => {}
                Err(_) => {
                    REJOINS.fetch_add(1, Ordering::Relaxed);
                    let r = *r;
                    flying[i] = start(r);
                }
            }
            let (_, _, hello, off) = &flying[i];
            if *off == hello.len() {
                let (r, s, _, _) = flying.swap_remove(i);
                CONNECTED.fetch_add(1, Ordering::Relaxed);
                done.push((r, TcpStream::from(s)));
            } else {
                i += 1;
            }
        }
        thread::sleep(Duration::from_millis(1));
    }
    done.sort_by_key(|c| c.0);
    done
}

fn client(n: u32, addr: SocketAddr) {
    let nofile = gate::raise_fd_limit();
    if nofile < n as u64 + 64 {
        fail(
            2,
            &format!(
                "the simulated ranks need {} open files, the limit is {nofile}: raise `ulimit -Hn`",
                n as u64 + 64
            ),
        );
    }
    let stalled: u32 = n * 3 / 10;
    let go = Arc::new(Barrier::new(THREADS + 1));
    let row = Arc::new(AtomicU64::new(0));
    let stall = Arc::new(AtomicBool::new(false));
    let deadline = Instant::now() + PHASE_DEADLINE;
    for t in 0..THREADS {
        let (go, row, stall) = (go.clone(), row.clone(), stall.clone());
        thread::spawn(move || {
            let mine: Vec<u32> = (0..n).filter(|r| *r as usize % THREADS == t).collect();
            let mut conns = join_many(addr, &mine, n, deadline);
            until_go(&mut conns, addr, n, deadline);
            go.wait();
            beat(&mut conns, stalled, &row, &stall);
        });
    }
    let t0 = Instant::now();
    let joined = Arc::new(AtomicBool::new(false));
    {
        let joined = joined.clone();
        thread::spawn(move || {
            while !joined.load(Ordering::Relaxed) {
                thread::sleep(Duration::from_secs(1));
                eprintln!(
                    "  simulated ranks at {:.1} s: {} connections made, {} tables, {} go, {} reconnects",
                    t0.elapsed().as_secs_f64(),
                    CONNECTED.load(Ordering::Relaxed),
                    TABLES.load(Ordering::Relaxed),
                    GOS.load(Ordering::Relaxed),
                    REJOINS.load(Ordering::Relaxed)
                );
            }
        });
    }
    go.wait();
    joined.store(true, Ordering::Relaxed);
    println!("go");
    // Commands from the coordinator's process: `row K`, `stall`; EOF ends the client.
    for l in std::io::stdin().lock().lines() {
        let Ok(l) = l else { break };
        if let Some(k) = l.strip_prefix("row ").and_then(|k| k.parse().ok()) {
            row.store(k, Ordering::Relaxed);
        } else if l == "stall" {
            stall.store(true, Ordering::Relaxed);
        }
    }
}

/// Like a real rank, each simulated one reads its table, says ready at once, and heartbeats
/// from its table on until the go (all nonblocking: one thread serves many ranks).
fn until_go(conns: &mut [(u32, TcpStream)], addr: SocketAddr, n: u32, deadline: Instant) {
    for (_, s) in conns.iter_mut() {
        s.set_nonblocking(true).unwrap();
    }
    let mut bufs: Vec<Vec<u8>> = vec![Vec::new(); conns.len()];
    let mut pend: Vec<Vec<u8>> = vec![Vec::new(); conns.len()];
    // 0: waiting for its table, 1: ready sent, 2: go.
    let mut state = vec![0u8; conns.len()];
    let mut scratch = vec![0u8; 1 << 16];
    let mut next_beat = Instant::now();
    while state.iter().any(|&x| x < 2) {
        if Instant::now() > deadline {
            fail(
                2,
                &format!("not every simulated rank had its go within {PHASE_DEADLINE:?}"),
            );
        }
        let beat_now = Instant::now() >= next_beat;
        if beat_now {
            next_beat = Instant::now() + HEARTBEAT;
        }
        for (i, (r, s)) in conns.iter_mut().enumerate() {
            let mut ended = None;
            loop {
                match s.read(&mut scratch) {
                    Ok(0) => ended = Some("the coordinator closed the connection".to_string()),
                    Ok(k) => {
                        bufs[i].extend_from_slice(&scratch[..k]);
                        continue;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => ended = Some(e.to_string()),
                }
                break;
            }
            if let Some(why) = ended {
                // Before its table, the door may have turned it away (busy, its reason lost
                // to a reset): join again, as `rendezvous::join` does on a busy refusal.
                if state[i] > 0 {
                    fail(2, &format!("rank {r}: {why}"));
                }
                REJOINS.fetch_add(1, Ordering::Relaxed);
                *s = join_one(addr, *r, n, deadline);
                s.set_nonblocking(true).unwrap();
                bufs[i].clear();
                pend[i].clear();
                continue;
            }
            let mut msgs = Vec::new();
            if let Err(e) = take_frames(&mut bufs[i], &mut msgs) {
                fail(2, &format!("rank {r}: {e}"));
            }
            for m in msgs {
                match m {
                    Msg::Table { more: false, .. } => {
                        send_nb(s, &mut pend[i], &frame(&Msg::Ready { rank: *r }));
                        state[i] = 1;
                        TABLES.fetch_add(1, Ordering::Relaxed);
                    }
                    Msg::Go => {
                        state[i] = 2;
                        GOS.fetch_add(1, Ordering::Relaxed);
                    }
                    Msg::Reject { reason } if reason.starts_with(gate::BUSY) => {
                        REJOINS.fetch_add(1, Ordering::Relaxed);
                        *s = join_one(addr, *r, n, deadline);
                        s.set_nonblocking(true).unwrap();
                        bufs[i].clear();
                        pend[i].clear();
                        break;
                    }
                    Msg::Reject { reason } | Msg::Abort { reason } => fail(2, &format!("rank {r}: {reason}")),
                    _ => {}
                }
            }
            if beat_now && state[i] >= 1 {
                let mut w = WaitReport {
                    rank: *r,
                    phase: Phase::Bootstrap,
                    round: 0,
                    step: 0,
                    channel: 0,
                    waiting_on: None,
                    waiting_to_receive: false,
                    bytes_received: 0,
                    bytes_sent: 0,
                    since_progress_ms: 0,
                    progress: 1,
                };
                w.rank = *r;
                send_nb(s, &mut pend[i], &frame(&Msg::Heartbeat(w)));
            }
        }
        // A pass reads every socket; heartbeats are 500 ms apart, so 50 ms between passes
        // loses nothing and spares the coordinator's CPU a million empty reads a second (the
        // eight client threads otherwise took 84% of the bench's CPU at 16,384 ranks, perf).
        thread::sleep(Duration::from_millis(50));
    }
}

/// Heartbeat every rank every 500 ms as a working rank does, send each new row once, and
/// drain what the coordinator sends (pings) so no buffer fills.
fn beat(conns: &mut [(u32, TcpStream)], stalled: u32, row: &AtomicU64, stall: &AtomicBool) {
    let mut progress = 1u64;
    let mut sent_row = 0u64;
    let mut scratch = vec![0u8; 1 << 16];
    let mut pend: Vec<Vec<u8>> = vec![Vec::new(); conns.len()];
    let mut next_beat = Instant::now();
    loop {
        let now = Instant::now();
        let k = row.load(Ordering::Relaxed);
        let beat_now = now >= next_beat;
        if beat_now {
            progress += 1;
            next_beat = now + HEARTBEAT;
        }
        for (i, (r, s)) in conns.iter_mut().enumerate() {
            if *r == stalled && stall.load(Ordering::Relaxed) {
                continue;
            }
            let mut out = Vec::new();
            if k > sent_row {
                out.extend(frame(&Msg::Row {
                    rank: *r,
                    row: RowResult {
                        size_bytes: k,
                        time_us: 1.0,
                        wrong: Some(0),
                        in_place: None,
                    },
                }));
            }
            if beat_now {
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
                out.extend(frame(&Msg::Heartbeat(w)));
            }
            if !out.is_empty() {
                send_nb(s, &mut pend[i], &out);
            }
            loop {
                match s.read(&mut scratch) {
                    Ok(0) => break,
                    Ok(_) => continue,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(_) => break,
                }
            }
        }
        sent_row = k;
        // As in `until_go`; a round's rows wait up to this much more at the ranks.
        thread::sleep(Duration::from_millis(100));
    }
}

/// Queue `b` behind what `pending` holds for this socket and write what the socket takes
/// now, never waiting: a thread serves many ranks, and one socket the coordinator reads late
/// must not hold the others' heartbeats (a blocking retry here once silenced a whole thread's
/// ranks for 13 s and the bench read it as the coordinator's false verdict).
fn send_nb(s: &mut TcpStream, pending: &mut Vec<u8>, b: &[u8]) {
    pending.extend_from_slice(b);
    let mut off = 0;
    while off < pending.len() {
        match s.write(&pending[off..]) {
            Ok(0) => break,
            Ok(k) => off += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    pending.drain(..off);
}
