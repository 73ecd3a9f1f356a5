//! Attacks on a running 4-rank job in the network lab (tests/lab/mod.rs), from a fifth node
//! (`node-e`, 198.18.0.14) that runs no rank, and from a rank's own node: a port scan, 600
//! slow-drip connections, garbage and oversize frames, a replayed wrong-token hello, a fake
//! rank claiming a taken slot. The job must finish with correct results within --timeout plus
//! a grace, every refusal must name the foreign source address, and nothing printed may carry
//! the attackers' raw bytes. One helper per attack (each returns what it must keep open);
//! data-port attacks join this file later. Needs root; without it every test prints SKIPPED,
//! and fails under `FABPROBE_LAB=required` (CI).

mod lab;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use fabprobe::ring::model::RankInfo;
use fabprobe::ring::wire::{self, Hello, Msg};
use lab::{Lab, LabOpts, text};

const TIMEOUT: u64 = 10;
/// Process start, bootstrap under attack, the sweep, the end-of-run exchange.
const GRACE: Duration = Duration::from_secs(10);
const ATTACKER: usize = 4;
/// What the attackers send that must never reach a terminal raw.
const EVIL: &str = "\x1b]0;pwned\x07\x1b[2J\u{9b}31m";

/// Raise this process's open-file limit: 600 drip connections and the rest.
fn raise_nofile() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((cur, max)) = getrlimit(Resource::RLIMIT_NOFILE)
        && cur < max.min(8192)
    {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, max.min(8192), max);
    }
}

fn frame(m: &Msg) -> Vec<u8> {
    let mut b = Vec::new();
    wire::write_msg(&mut b, m).unwrap();
    b
}

fn hello(rank: u32, world: u32, token: &str, params: &str) -> Hello {
    Hello {
        protocol: wire::PROTOCOL,
        rank,
        world,
        token: token.into(),
        info: RankInfo {
            neighbor: None,
            port_max: None,
            rails: Vec::new(),
            node: None,
            rank,
            host: "intruder".into(),
            address: "198.18.0.14:1".into(),
            device: Some("eth0".into()),
            transport: "tcp".into(),
            pid: None,
            capabilities: Vec::new(),
        },
        capabilities: vec!["tcp".into()],
        params: params.into(),
    }
}

/// What a node says on rank 0's door (a run without `--rails` declares its one rail
/// there, with the door's token).
fn node_claim(rank: u32, token: &str, params: &str) -> Hello {
    let mut h = hello(rank, 4, &fabprobe::ring::railmux::node_token(token), params);
    h.info.rails = vec![fabprobe::ring::model::RailPort {
        rail: 0,
        device: "eth1".into(),
        port: None,
        netdev: Some("eth1".into()),
        state: None,
        usable: true,
        label: None,
        address: None,
    }];
    h
}

/// Connect from inside `node`'s namespace (a socket of that node).
fn connect_from(lab: &Lab, node: usize, target: SocketAddr, n: usize) -> Vec<TcpStream> {
    lab.in_netns(node, move || {
        (0..n)
            .filter_map(|_| TcpStream::connect_timeout(&target, Duration::from_secs(2)).ok())
            .collect()
    })
}

/// Port scan: connect and close at once, `n` times.
fn attack_port_scan(lab: &Lab, from: usize, target: SocketAddr, n: usize) -> usize {
    connect_from(lab, from, target, n).len()
}

/// Slow drip: `n` connections that each send one byte of a valid frame start every 3 s
/// (never garbage, never a whole hello) until `stop`. Returns the dripping thread.
fn attack_slow_drip(
    lab: &Lab,
    from: usize,
    target: SocketAddr,
    n: usize,
    stop: Arc<AtomicBool>,
) -> thread::JoinHandle<usize> {
    let mut conns = connect_from(lab, from, target, n);
    let opened = conns.len();
    thread::spawn(move || {
        let slow = b"FPR1\0\0\x01\0{\"type\":\"hello\",";
        let mut k = 0;
        while !stop.load(Ordering::Relaxed) {
            for c in &mut conns {
                let _ = c.write(&slow[k % slow.len()..][..1]);
            }
            k += 1;
            for _ in 0..30 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                thread::sleep(Duration::from_millis(100));
            }
        }
        opened
    })
}

/// Garbage and oversize frames: each on its own connection, which is then read until the
/// coordinator closes it (a reject, or nothing).
fn attack_garbage(lab: &Lab, from: usize, target: SocketAddr) -> Vec<Vec<u8>> {
    let mut big_header = b"FPR1".to_vec();
    big_header.extend_from_slice(&u32::MAX.to_be_bytes());
    let mut just_over = b"FPR1".to_vec();
    just_over.extend_from_slice(&((wire::MAX_FRAME + 1) as u32).to_be_bytes());
    just_over.extend(std::iter::repeat_n(b'{', 4096));
    let mut not_json = b"FPR1".to_vec();
    let body = format!("{{\"type\":\"hello\",\"token\":\"{EVIL}\"");
    not_json.extend_from_slice(&(body.len() as u32).to_be_bytes());
    not_json.extend_from_slice(body.as_bytes());
    let payloads: Vec<Vec<u8>> = vec![
        b"GET / HTTP/1.0\r\n\r\n".to_vec(),
        format!("{EVIL}\r\n").into_bytes(),
        (0..=255u8).collect(),
        big_header,
        just_over,
        not_json,
        frame(&Msg::Ping),
        frame(&Msg::Heartbeat(fabprobe::ring::model::WaitReport {
            waiting_on: Some(2),
            waiting_to_receive: true,
            since_progress_ms: 999_999,
            ..fabprobe::ring::model::WaitReport::new(1, fabprobe::ring::model::Phase::AllGather)
        })),
    ];
    let replies = Arc::new(Mutex::new(Vec::new()));
    let r2 = replies.clone();
    lab.in_netns(from, move || {
        for p in payloads {
            let Ok(mut c) = TcpStream::connect_timeout(&target, Duration::from_secs(2)) else {
                continue;
            };
            let _ = c.write_all(&p);
            let _ = c.set_read_timeout(Some(Duration::from_secs(7)));
            let mut got = Vec::new();
            let _ = c.read_to_end(&mut got);
            r2.lock().unwrap().push(got);
        }
    });
    Arc::try_unwrap(replies).unwrap().into_inner().unwrap()
}

/// A hello captured from another job (wrong token), replayed; carries escapes in its options.
fn attack_replayed_hello(lab: &Lab, from: usize, target: SocketAddr, rank: u32) -> Option<String> {
    let f = frame(&Msg::Hello(Box::new(hello(rank, 4, "another-job", EVIL))));
    lab.in_netns(from, move || {
        let mut c = TcpStream::connect_timeout(&target, Duration::from_secs(2)).ok()?;
        c.write_all(&f).ok()?;
        c.set_read_timeout(Some(Duration::from_secs(7))).ok()?;
        match wire::read_msg(&mut c) {
            Ok(Msg::Reject { reason }) => Some(reason),
            _ => None,
        }
    })
}

/// A foreign process that knows the token claims a rank that is already in the job. It
/// learns the job's options the way an attacker would: from the refusal of a first try.
fn attack_fake_rank(lab: &Lab, from: usize, target: SocketAddr, rank: u32, token: &str) -> Option<String> {
    let token = token.to_string();
    lab.in_netns(from, move || {
        let ask = |params: &str| -> Option<String> {
            let mut c = TcpStream::connect_timeout(&target, Duration::from_secs(2)).ok()?;
            c.write_all(&frame(&Msg::Hello(Box::new(node_claim(rank, &token, params)))))
                .ok()?;
            c.set_read_timeout(Some(Duration::from_secs(7))).ok()?;
            match wire::read_msg(&mut c) {
                Ok(Msg::Reject { reason }) => Some(reason),
                other => Some(format!("not refused: {other:?}")),
            }
        };
        let first = ask("guess")?;
        let params = first
            .split_once("rank 0 with [")?
            .1
            .strip_suffix(']')?
            .to_string();
        // Told "busy" while rank 0 checks that the holder is alive (it is): ask again, as a
        // rank does, until the refusal.
        let t0 = Instant::now();
        let mut reply = ask(&params)?;
        while reply.starts_with("busy: ") && t0.elapsed() < Duration::from_secs(10) {
            thread::sleep(Duration::from_millis(100));
            reply = ask(&params)?;
        }
        Some(reply)
    })
}

/// No control characters but newlines and tabs: no terminal escape from a peer got through.
fn assert_printable(what: &str, b: &[u8]) {
    let s = String::from_utf8_lossy(b);
    let bad: Vec<(usize, char)> = s
        .char_indices()
        .filter(|(_, c)| (c.is_control() && *c != '\n' && *c != '\t') || *c == '\u{9b}')
        .collect();
    assert!(bad.is_empty(), "{what} carries raw control bytes {bad:?}:\n{s}");
    assert!(!s.contains("\x1b"), "{what}");
}

#[test]
fn attacks_on_the_coordinator_port_do_not_break_a_running_job() {
    raise_nofile();
    let Some(lab) = Lab::new("attack_coordinator", LabOpts { nodes: 5, rate: None }) else {
        return;
    };
    let t = TIMEOUT.to_string();
    let extra = ["-b", "64K", "-e", "1M", "-n", "5", "--timeout", &t, "--no-scan"];
    let target: SocketAddr = format!("{}:29517", lab.nodes[0].mgmt_ip).parse().unwrap();
    let a0 = lab.ring_args(0, 4, "job", &extra);
    let r0 = lab.spawn(0, &a0.iter().map(|s| s.as_str()).collect::<Vec<_>>());
    // Wait for the port.
    let t_up = Instant::now();
    while lab.in_netns(ATTACKER, move || {
        TcpStream::connect_timeout(&target, Duration::from_millis(200)).is_err()
    }) {
        assert!(
            t_up.elapsed() < Duration::from_secs(10),
            "coordinator never listened"
        );
        thread::sleep(Duration::from_millis(50));
    }
    let t0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    // Bootstrap under attack: a scan, 600 drips from rank 1's own node, garbage, a replay.
    assert_eq!(attack_port_scan(&lab, ATTACKER, target, 200), 200);
    let drip = attack_slow_drip(&lab, 1, target, 600, stop.clone());
    let replies = attack_garbage(&lab, ATTACKER, target);
    let replay = attack_replayed_hello(&lab, ATTACKER, target, 1);
    assert!(
        replay.as_deref().is_some_and(|r| r.contains("wrong token")),
        "{replay:?}"
    );
    let ids: Vec<usize> = lab.spawn_ring(1..3, 4, "job", &extra);
    // Rank 2's hello read by the coordinator (not a fixed sleep that hopes it was).
    let node2 = lab.nodes[2].mgmt_ip.clone();
    lab.wait_read_from(0, 29517, &node2, GRACE);
    // Rank 2 is in (the table waits for rank 3): a foreign claim of its slot.
    let fake = attack_fake_rank(&lab, ATTACKER, target, 2, "job");
    let r3 = lab.spawn_ring(3..4, 4, "job", &extra)[0];
    let limit = Duration::from_secs(TIMEOUT) + GRACE;
    let mut outs = vec![lab.wait(r0, limit).0];
    for id in ids.into_iter().chain([r3]) {
        outs.push(lab.wait(id, limit).0);
    }
    let took = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    assert_eq!(drip.join().unwrap(), 600);
    for (r, o) in outs.iter().enumerate() {
        assert_eq!(
            o.status.code(),
            Some(0),
            "rank {r}:\n{}\n{}",
            text(&o.stderr),
            text(&o.stdout)
        );
        assert_printable(&format!("rank {r} stdout"), &o.stdout);
        assert_printable(&format!("rank {r} stderr"), &o.stderr);
    }
    assert!(took < limit, "{took:?}");
    let out0 = text(&outs[0].stdout);
    assert!(out0.contains("# Out of bounds values : 0 OK"), "{out0}");
    let err0 = text(&outs[0].stderr);
    // Every refusal names where it came from: the attacker, or (the drips) node-b.
    for l in err0.lines().filter(|l| l.contains("rejected connection from")) {
        assert!(
            l.contains("from 198.18.0.14:") || l.contains("from 198.18.0.11:"),
            "{l}"
        );
    }
    assert!(err0.contains("rejected connection from 198.18.0.14"), "{err0}");
    assert!(err0.contains("more rejected connections (not listed)"), "{err0}");
    // The fake claim was refused naming the holder and the claimant.
    let fake = fake.unwrap_or_default();
    assert!(
        fake.starts_with("rank 2 is already taken by 198.18.0.12:")
            && fake.contains("a second claim from 198.18.0.14:"),
        "{fake}"
    );
    // Garbage got a refusal (or nothing), never an echo of itself.
    for r in &replies {
        assert!(!String::from_utf8_lossy(r).contains("pwned\x07"), "{r:?}");
    }
}
