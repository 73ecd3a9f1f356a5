//! Issue 45: traffic that is not the probe's on a healthy port (another job, a backup) is
//! contention, action investigate, never a drained node. In the network lab (tests/lab/mod.rs,
//! every data egress shaped to 1 Gbit/s), node-c sends four TCP flows of its own to node-d
//! over its data interface while the ring scans: its egress is slow for the probe, and its
//! port's byte counters (`/sys/class/net/eth1/statistics/tx_bytes`) carried far more than the
//! probe sent. The control (a shaped egress, nothing else on the port: drain) is
//! `slow_egress_of_one_node_is_named` in tests/lab_localize.rs. Needs root; without it the
//! test fails under `FABPROBE_LAB=required` (CI) and otherwise prints SKIPPED.

mod lab;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use lab::{Lab, LabOpts, SCAN_ARGS, json, text};

/// A port no rank listens on.
const PORT: u16 = 5201;

/// TCP flows from one lab node to another's data address, inside their namespaces, until
/// dropped (also on a failed assertion: `Drop` stops and joins every thread).
struct Competitor {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    received: Arc<AtomicU64>,
}

impl Competitor {
    fn start(lab: &Lab, from: usize, to: usize, flows: usize) -> Competitor {
        let stop = Arc::new(AtomicBool::new(false));
        let received = Arc::new(AtomicU64::new(0));
        let addr: SocketAddr = format!("{}:{PORT}", lab.nodes[to].data_ip).parse().unwrap();
        let listener = lab.in_netns(to, move || {
            TcpListener::bind(addr).expect("bind the competitor's receiver")
        });
        listener.set_nonblocking(true).unwrap();
        let mut c = Competitor {
            stop: stop.clone(),
            threads: Vec::new(),
            received: received.clone(),
        };
        let (s, got) = (stop.clone(), received.clone());
        c.threads
            .push(std::thread::spawn(move || receive(listener, &s, &got)));
        for _ in 0..flows {
            let conn = lab.in_netns(from, move || {
                TcpStream::connect_timeout(&addr, Duration::from_secs(2))
            });
            let mut conn = conn.expect("connect the competing flow");
            conn.set_write_timeout(Some(Duration::from_millis(200))).unwrap();
            let s = stop.clone();
            c.threads.push(std::thread::spawn(move || {
                let buf = vec![0x5au8; 64 << 10];
                while !s.load(Ordering::Relaxed) {
                    match conn.write(&buf) {
                        Ok(_) => {}
                        Err(e)
                            if matches!(
                                e.kind(),
                                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                            ) => {}
                        Err(_) => return,
                    }
                }
            }));
        }
        c
    }

    /// Bytes the receiver read so far.
    fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }
}

impl Drop for Competitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Accept and read every flow (each on its own thread) until `stop`.
fn receive(listener: TcpListener, stop: &Arc<AtomicBool>, got: &Arc<AtomicU64>) {
    let mut readers = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((mut conn, _)) => {
                conn.set_nonblocking(false).unwrap();
                conn.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
                let (s, g) = (stop.clone(), got.clone());
                readers.push(std::thread::spawn(move || {
                    let mut buf = vec![0u8; 256 << 10];
                    while !s.load(Ordering::Relaxed) {
                        match conn.read(&mut buf) {
                            Ok(0) => return,
                            Ok(n) => {
                                g.fetch_add(n as u64, Ordering::Relaxed);
                            }
                            Err(e)
                                if matches!(
                                    e.kind(),
                                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                                ) => {}
                            Err(_) => return,
                        }
                    }
                }));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    for r in readers {
        let _ = r.join();
    }
}

/// The scan over 4 nodes while node-c sends 4 flows of its own to node-d.
fn contended_scan(name: &str) -> Option<(Output, u64)> {
    let lab = Lab::new(
        name,
        LabOpts {
            nodes: 4,
            rate: Some("1gbit".into()),
        },
    )?;
    let flows = Competitor::start(&lab, 2, 3, 4);
    // The flows fill node-c's shaper before the scan's first order.
    let t0 = Instant::now();
    while flows.received() < 20_000_000 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the competing flows moved {} bytes in 10 s",
            flows.received()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = lab.ring_report(name, &SCAN_ARGS, Duration::from_secs(60));
    let moved = flows.received();
    drop(flows);
    Some((o, moved))
}

#[test]
fn a_competing_flow_is_contention_to_investigate_not_a_node_to_drain() {
    let Some((o, moved)) = contended_scan("contention") else {
        return;
    };
    let j = json(&o.stdout);
    let verdicts = j["data"]["verdicts"].as_array().unwrap();
    // Slow it is (a verdict: exit 1, as the exit table says for every verdict) ...
    assert_eq!(
        o.status.code(),
        Some(1),
        "moved {moved}\n{}\n{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    assert!(!verdicts.is_empty(), "{}", text(&o.stdout));
    // ... and every slow verdict is rank 2's port, said as contention, to investigate.
    let mut named = false;
    for v in verdicts {
        assert_eq!(v["action"], "investigate", "{v}");
        assert_eq!(v["evidence"]["contention"], true, "{v}");
        assert_eq!(v["from_rank"], 2, "an innocent named: {v}");
        let m = v["message"].as_str().unwrap();
        named |= v["kind"] == "slow_egress";
        assert!(
            m.contains("CONTENTION: the port of rank 2 (node-c, eth1) carried ")
                && m.contains(" MB out that were not the probe's"),
            "{m}"
        );
        let t = &v["evidence"]["port_traffic"][0];
        assert_eq!(
            (t["rank"].as_u64(), t["direction"].as_str()),
            (Some(2), Some("tx")),
            "{t}"
        );
        assert_eq!(t["counter"], "/sys/class/net/eth1/statistics/tx_bytes", "{t}");
        // The other traffic is the competitor's order of magnitude: more than the probe's.
        let (other, probe) = (t["other_mb"].as_f64().unwrap(), t["probe_mb"].as_f64().unwrap());
        assert!(
            other > probe && other * 1e6 < moved as f64 * 1.5,
            "other {other} MB, probe {probe} MB, the flows moved {moved} bytes: {t}"
        );
        assert!(
            v["next"]
                .as_str()
                .unwrap()
                .starts_with("on node-c (eth1): find what else uses the port"),
            "{v}"
        );
    }
    assert!(named, "{}", text(&o.stdout));
    // What the run said, for the record (--nocapture).
    eprintln!("{}\n  next: {}", verdicts[0]["message"], verdicts[0]["next"]);
    // Nothing to drain.
    assert_eq!(j["data"]["drain"], serde_json::json!([]), "{}", j["data"]);
}
