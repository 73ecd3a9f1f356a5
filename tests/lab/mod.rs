//! The network lab: a small cluster on one machine. N network namespaces (`node-a`, ...),
//! each with a management interface `eth0` (198.18.0.0/24) and a data interface `eth1`
//! (198.19.0.0/24, MTU 9000) on two bridges, data links optionally shaped with `tc tbf`; real
//! `fabprobe` processes run inside with `ip netns exec` (and their own UTS namespace, so each
//! node has its own hostname). Everything is torn down by `Drop` (also on panic), and
//! leftovers of killed runs are removed by their name prefix `fpl<pid>`.
//! Needs root and iproute2; without them `Lab::new` fails the test under
//! `FABPROBE_LAB=required` (as `.ci/run` sets it) and otherwise prints a loud SKIPPED line
//! and returns None (`tests/common/mod.rs`).

#![allow(dead_code)]

#[path = "../common/mod.rs"]
mod common;
pub mod slurm;
#[allow(unused_imports)] // each test binary uses its own part
pub use common::{LAB_ENV, Need, SCAN_ARGS, lab_ready, lab_required, lab_unavailable, long_sweep, loud};

use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// One lab at a time per test binary: they share the CPU, and the figures must not lie.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
static COUNTER: AtomicU32 = AtomicU32::new(0);

pub const BIN: &str = env!("CARGO_BIN_EXE_fabprobe");

pub struct Node {
    pub ns: String,
    pub name: String,
    pub mgmt_ip: String,
    pub data_ip: String,
}

pub struct LabOpts {
    pub nodes: usize,
    /// `tc tbf` rate on every node's data egress (`1gbit`), or unshaped.
    pub rate: Option<String>,
}

pub struct Lab {
    pub prefix: String,
    pub nodes: Vec<Node>,
    children: Mutex<Vec<Child>>,
    _guard: std::sync::MutexGuard<'static, ()>,
}

fn sh(args: &[&str]) -> Output {
    Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {args:?}: {e}"))
}

fn must(args: &[&str]) {
    let o = sh(args);
    assert!(
        o.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Delete namespaces and links of labs whose process is gone (a SIGKILLed test run).
fn clean_leftovers() {
    let alive = |name: &str| -> bool {
        let digits: String = name
            .trim_start_matches("fpl")
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        match digits.parse::<u32>() {
            Ok(pid) => std::path::Path::new(&format!("/proc/{pid}")).exists(),
            Err(_) => true,
        }
    };
    let ns = String::from_utf8_lossy(&sh(&["ip", "netns", "list"]).stdout).to_string();
    for line in ns.lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        if name.starts_with("fpl") && !alive(name) {
            kill_ns_pids(name);
            let _ = sh(&["ip", "netns", "del", name]);
        }
    }
    let links = String::from_utf8_lossy(&sh(&["ip", "-o", "link", "show"]).stdout).to_string();
    for line in links.lines() {
        let name = line
            .split(':')
            .nth(1)
            .unwrap_or("")
            .trim()
            .split('@')
            .next()
            .unwrap_or("");
        if name.starts_with("fpl") && !alive(name) {
            let _ = sh(&["ip", "link", "del", name]);
        }
    }
}

fn kill_ns_pids(ns: &str) {
    let pids = String::from_utf8_lossy(&sh(&["ip", "netns", "pids", ns]).stdout).to_string();
    for p in pids.split_whitespace() {
        if let Ok(pid) = p.parse::<i32>() {
            // A pid that lives in our own lab namespace.
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

impl Lab {
    /// Build the lab, or None (after a loud SKIPPED line) where it cannot run; under
    /// `FABPROBE_LAB=required` a lab that cannot run fails the test instead.
    pub fn new(test: &str, opts: LabOpts) -> Option<Lab> {
        let needs = [
            Need::Root("network namespaces, bridges, tc"),
            Need::Program("ip", "iproute2"),
        ];
        if !lab_ready(test, &needs) {
            return None;
        }
        let guard = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        clean_leftovers();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let prefix = format!("fpl{}{}", std::process::id(), (b'a' + (n % 26) as u8) as char);
        let probe = format!("{prefix}-probe");
        let added = sh(&["ip", "netns", "add", &probe]);
        if !added.status.success() {
            lab_unavailable(
                test,
                &format!(
                    "cannot create network namespaces here (no CAP_SYS_ADMIN?): {}",
                    String::from_utf8_lossy(&added.stderr).trim()
                ),
            );
            return None;
        }
        let _ = sh(&["ip", "netns", "del", &probe]);
        let mut lab = Lab {
            prefix: prefix.clone(),
            nodes: Vec::new(),
            children: Mutex::new(Vec::new()),
            _guard: guard,
        };
        let (brm, brd) = (format!("{prefix}m"), format!("{prefix}d"));
        must(&["ip", "link", "add", &brm, "type", "bridge"]);
        must(&["ip", "link", "add", &brd, "type", "bridge"]);
        must(&["ip", "link", "set", &brd, "mtu", "9000"]);
        must(&["ip", "link", "set", &brm, "up"]);
        must(&["ip", "link", "set", &brd, "up"]);
        for i in 0..opts.nodes {
            let ns = format!("{prefix}-n{i}");
            let name = format!("node-{}", (b'a' + i as u8) as char);
            let node = Node {
                ns: ns.clone(),
                name,
                mgmt_ip: format!("198.18.0.{}", 10 + i),
                data_ip: format!("198.19.0.{}", 10 + i),
            };
            must(&["ip", "netns", "add", &ns]);
            lab.nodes.push(node);
            let x = |args: &[&str]| {
                let mut a = vec!["ip", "netns", "exec", ns.as_str()];
                a.extend_from_slice(args);
                must(&a);
            };
            x(&["ip", "link", "set", "lo", "up"]);
            for (suffix, inner, br, ip, mtu) in [
                ("m", "eth0", &brm, format!("198.18.0.{}/24", 10 + i), "1500"),
                ("d", "eth1", &brd, format!("198.19.0.{}/24", 10 + i), "9000"),
            ] {
                let outer = format!("{prefix}{i}{suffix}");
                must(&[
                    "ip", "link", "add", &outer, "mtu", mtu, "type", "veth", "peer", "name", inner, "mtu",
                    mtu, "netns", &ns,
                ]);
                must(&["ip", "link", "set", &outer, "master", br, "up"]);
                x(&["ip", "addr", "add", &ip, "dev", inner]);
                x(&["ip", "link", "set", inner, "up"]);
            }
            if let Some(rate) = &opts.rate {
                // Egress of the data interface: every ring hop leaves through exactly one.
                x(&[
                    "tc", "qdisc", "add", "dev", "eth1", "root", "tbf", "rate", rate, "burst", "512kb",
                    "latency", "100ms",
                ]);
            }
        }
        Some(lab)
    }

    /// `ip netns exec <node> unshare --uts sh -c 'hostname <name>; exec ...'`.
    fn command(&self, node: usize, program: &str, args: &[&str]) -> Command {
        let n = &self.nodes[node];
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &n.ns, "unshare", "--uts", "sh", "-c"])
            .arg(format!("hostname {} && exec \"$0\" \"$@\"", n.name))
            .arg(program)
            .args(args);
        c
    }

    /// Start `fabprobe <args>` on a node; stdout and stderr are captured.
    pub fn spawn(&self, node: usize, args: &[&str]) -> usize {
        self.spawn_program(node, BIN, args)
    }

    /// Start `program args` on a node (e.g. `nice`, `taskset` around fabprobe, or a CPU hog);
    /// output captured, killed with the lab.
    pub fn spawn_program(&self, node: usize, program: &str, args: &[&str]) -> usize {
        let child = self
            .command(node, program, args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn a program in the lab");
        let mut c = self.children.lock().unwrap();
        c.push(child);
        c.len() - 1
    }

    /// Wait for a spawned process, killing it at the deadline; returns its output and
    /// how long it ran after this call.
    pub fn wait(&self, id: usize, limit: Duration) -> (Output, Duration) {
        let t0 = Instant::now();
        let child = {
            let mut c = self.children.lock().unwrap();
            std::mem::replace(&mut c[id], Command::new("true").spawn().unwrap())
        };
        let mut child = child;
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if t0.elapsed() > limit => {
                    let _ = child.kill();
                    let o = child.wait_with_output().unwrap();
                    panic!(
                        "process {id} did not exit within {limit:?}\nstdout:\n{}\nstderr:\n{}",
                        String::from_utf8_lossy(&o.stdout),
                        String::from_utf8_lossy(&o.stderr)
                    );
                }
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        (child.wait_with_output().unwrap(), t0.elapsed())
    }

    /// Poll (every 50 ms) whether spawned process `id` is still running, for `span` at most
    /// (a fault held that long, e.g. a rank kept frozen): false as soon as it has exited.
    pub fn runs_for(&self, id: usize, span: Duration) -> bool {
        let t0 = Instant::now();
        while t0.elapsed() < span {
            if let Ok(Some(_)) = self.children.lock().unwrap()[id].try_wait() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        true
    }

    /// Run any command on a node to completion.
    pub fn exec(&self, node: usize, program: &str, args: &[&str]) -> Output {
        self.command(node, program, args)
            .stdin(Stdio::null())
            .output()
            .expect("exec in the lab")
    }

    fn in_ns(&self, node: usize, args: &[&str]) {
        let mut a = vec!["ip", "netns", "exec", self.nodes[node].ns.as_str()];
        a.extend_from_slice(args);
        must(&a);
    }

    /// Shape everything `node` sends on its data interface to `rate` (`tbf`; replaces any
    /// earlier shaping): a slow egress.
    pub fn shape_egress(&self, node: usize, rate: &str) {
        self.shape_dev(node, "eth1", rate);
    }

    /// Shape everything `node` sends on `dev` to `rate` (`tbf`, replacing earlier shaping).
    pub fn shape_dev(&self, node: usize, dev: &str, rate: &str) {
        self.in_ns(
            node,
            &[
                "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst", "512kb",
                "latency", "100ms",
            ],
        );
    }

    /// A second data rail, as a rail-optimized fabric gives every NIC its own leaf switch: a
    /// bridge of its own and `eth2` (198.19.1.x/24, MTU 9000) on every node.
    pub fn add_rail(&self) {
        let br = format!("{}r", self.prefix);
        must(&["ip", "link", "add", &br, "type", "bridge"]);
        must(&["ip", "link", "set", &br, "mtu", "9000"]);
        must(&["ip", "link", "set", &br, "up"]);
        for (i, n) in self.nodes.iter().enumerate() {
            let outer = format!("{}{i}r", self.prefix);
            must(&[
                "ip", "link", "add", &outer, "mtu", "9000", "type", "veth", "peer", "name", "eth2", "mtu",
                "9000", "netns", &n.ns,
            ]);
            must(&["ip", "link", "set", &outer, "master", &br, "up"]);
            self.in_ns(
                i,
                &[
                    "ip",
                    "addr",
                    "add",
                    &format!("198.19.1.{}/24", 10 + i),
                    "dev",
                    "eth2",
                ],
            );
            self.in_ns(i, &["ip", "link", "set", "eth2", "up"]);
        }
    }

    /// The MTU of `node`'s data port on the switch (the bridge's side of its veth): frames
    /// bigger than it are dropped there, both ways, with no ICMP (an MTU black hole).
    pub fn switch_port_mtu(&self, node: usize, mtu: u32) {
        must(&[
            "ip",
            "link",
            "set",
            &format!("{}{node}d", self.prefix),
            "mtu",
            &mtu.to_string(),
        ]);
    }

    /// `node`'s data port flaps: its switch side (the bridge's end of its veth) goes down
    /// for `down`, then up (the node's `eth1` loses its carrier and gets it back).
    pub fn switch_port_flap(&self, node: usize, down: Duration) {
        let port = format!("{}{node}d", self.prefix);
        must(&["ip", "link", "set", &port, "down"]);
        std::thread::sleep(down);
        must(&["ip", "link", "set", &port, "up"]);
    }

    /// `node`'s data interface hands one frame per packet to its veth (`gso_max_segs 1`): a
    /// veth passes a GSO super-packet over a bridge port whatever that port's MTU, where a
    /// real NIC puts MTU-sized frames on the wire (a switch port's MTU drops them).
    pub fn one_frame_per_packet(&self, node: usize) {
        self.in_ns(node, &["ip", "link", "set", "eth1", "gso_max_segs", "1"]);
    }

    /// `sysctl -w key=value` in `node`'s network namespace (a per-namespace sysctl).
    pub fn sysctl(&self, node: usize, key: &str, value: &str) {
        self.in_ns(node, &["sysctl", "-qw", &format!("{key}={value}")]);
    }

    /// `ip link set <dev> down` inside `node`: that interface's link is gone.
    pub fn link_down(&self, node: usize, dev: &str) {
        self.in_ns(node, &["ip", "link", "set", dev, "down"]);
    }

    /// Shape only what `from` sends to `to`'s data address (`htb` with a `u32` filter on the
    /// destination); other destinations keep `other_rate`: a single slow pair.
    pub fn shape_pair(&self, from: usize, to: usize, rate: &str, other_rate: &str) {
        let dst = format!("{}/32", self.nodes[to].data_ip);
        self.in_ns(
            from,
            &[
                "tc", "qdisc", "replace", "dev", "eth1", "root", "handle", "1:", "htb", "default", "20",
            ],
        );
        self.in_ns(
            from,
            &[
                "tc", "class", "add", "dev", "eth1", "parent", "1:", "classid", "1:10", "htb", "rate", rate,
                "ceil", rate,
            ],
        );
        self.in_ns(
            from,
            &[
                "tc", "class", "add", "dev", "eth1", "parent", "1:", "classid", "1:20", "htb", "rate",
                other_rate, "ceil", other_rate,
            ],
        );
        self.in_ns(
            from,
            &[
                "tc", "filter", "add", "dev", "eth1", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
                "match", "ip", "dst", &dst, "flowid", "1:10",
            ],
        );
    }

    /// Silently drop everything `node` receives on its data interface from `peer` (the
    /// management network keeps working): a cut data link.
    pub fn cut_data_link(&self, node: usize, peer: usize) {
        let src = self.nodes[peer].data_ip.clone();
        self.in_ns(
            node,
            &["iptables", "-A", "INPUT", "-i", "eth1", "-s", &src, "-j", "DROP"],
        );
    }

    /// Poll (every 50 ms, up to `limit`) until something listens on TCP `port` in `node`'s
    /// namespace: a coordinator that is ready for connections, instead of a fixed sleep.
    pub fn wait_listening(&self, node: usize, port: u16, limit: Duration) {
        let t0 = Instant::now();
        let filter = format!("sport = :{port}");
        loop {
            let o = self.ns_output(node, &["ss", "-Hltn", &filter]);
            if !o.trim().is_empty() {
                return;
            }
            assert!(
                t0.elapsed() < limit,
                "nothing listens on port {port} in {} after {limit:?}",
                self.nodes[node].name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Poll (every 50 ms, up to `limit`) until at least `count` TCP listeners on 127.0.0.1
    /// exist in `node`'s namespace (rank 0's rail coordinators behind its relay).
    pub fn wait_loopback_listeners(&self, node: usize, count: usize, limit: Duration) {
        let t0 = Instant::now();
        loop {
            let o = self.ns_output(node, &["ss", "-Hltn", "src", "127.0.0.1"]);
            if o.lines().filter(|l| !l.trim().is_empty()).count() >= count {
                return;
            }
            assert!(
                t0.elapsed() < limit,
                "fewer than {count} loopback listeners in {} after {limit:?}",
                self.nodes[node].name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Poll (every 50 ms, up to `limit`) until every node in `nodes` has received bytes on
    /// an established TCP connection of its data address: the run is past the bootstrap and
    /// data flows into every rank, so a fault injected now lands mid-run. Replaces a fixed
    /// sleep, which on a loaded machine can end before the data links exist.
    pub fn wait_data_flowing(&self, nodes: std::ops::Range<usize>, limit: Duration) {
        let t0 = Instant::now();
        for node in nodes {
            let src = format!("src {}", self.nodes[node].data_ip);
            loop {
                let o = self.ns_output(node, &["sh", "-c", &format!("ss -Htni state established {src}")]);
                let received = o.split_whitespace().any(|w| {
                    w.strip_prefix("bytes_received:")
                        .and_then(|n| n.parse::<u64>().ok())
                        .is_some_and(|n| n > 0)
                });
                if received {
                    break;
                }
                assert!(
                    t0.elapsed() < limit,
                    "no data reached {} ({}) within {limit:?}; its connections:\n{o}",
                    self.nodes[node].name,
                    self.nodes[node].data_ip
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// Poll (every 50 ms, up to `limit`) until `node` holds an established connection on
    /// its TCP `port` from `from_ip` whose bytes it has received and read (`bytes_received`
    /// above 0, Recv-Q 0): the listener has taken in what that peer said first (a rank's
    /// hello), instead of a fixed sleep that hopes it has.
    pub fn wait_read_from(&self, node: usize, port: u16, from_ip: &str, limit: Duration) {
        let t0 = Instant::now();
        let filter = format!("ss -Htni state established '( sport = :{port} )' dst {from_ip}");
        loop {
            let o = self.ns_output(node, &["sh", "-c", &filter]);
            // `ss -i` prints each socket on one line and its TCP info on the next.
            let lines: Vec<&str> = o.lines().collect();
            let taken_in = lines.chunks(2).any(|c| {
                let recv_q = c[0].split_whitespace().next().and_then(|q| q.parse::<u64>().ok());
                let received = c.get(1).is_some_and(|info| {
                    info.split_whitespace().any(|w| {
                        w.strip_prefix("bytes_received:")
                            .and_then(|n| n.parse::<u64>().ok())
                            .is_some_and(|n| n > 0)
                    })
                });
                recv_q == Some(0) && received
            });
            if taken_in {
                return;
            }
            assert!(
                t0.elapsed() < limit,
                "{} never read what {from_ip} sent to port {port} within {limit:?}; connections:\n{o}",
                self.nodes[node].name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Poll (every 50 ms, up to `limit`) until `node` holds at least `min_each` established
    /// TCP connections to every `ip:port` in `targets` (an attacker whose connections are open).
    pub fn wait_connected_to(&self, node: usize, targets: &[String], min_each: usize, limit: Duration) {
        let t0 = Instant::now();
        for t in targets {
            loop {
                let o = self.ns_output(node, &["sh", "-c", &format!("ss -Htn state established dst {t}")]);
                let n = o.lines().filter(|l| !l.trim().is_empty()).count();
                if n >= min_each {
                    break;
                }
                assert!(
                    t0.elapsed() < limit,
                    "{} holds {n} connections to {t} after {limit:?}, not {min_each}",
                    self.nodes[node].name
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    fn ns_output(&self, node: usize, args: &[&str]) -> String {
        let mut a = vec!["ip", "netns", "exec", self.nodes[node].ns.as_str()];
        a.extend_from_slice(args);
        text(&sh(&a).stdout)
    }

    /// Pull the plug on a node: delete its management and data links (from the host side),
    /// as a power loss would look to every other node; its processes keep running, cut off.
    pub fn pull_plug(&self, node: usize) {
        for suffix in ["m", "d"] {
            must(&["ip", "link", "del", &format!("{}{node}{suffix}", self.prefix)]);
        }
    }

    /// Run `f` on a thread that lives in `node`'s network namespace: sockets it creates
    /// belong there (usable from any thread afterwards).
    pub fn in_netns<T: Send + 'static>(&self, node: usize, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/run/netns/{}", self.nodes[node].ns);
        std::thread::spawn(move || {
            let ns = std::fs::File::open(&path).unwrap_or_else(|e| panic!("cannot open {path}: {e}"));
            nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)
                .unwrap_or_else(|e| panic!("setns {path}: {e}"));
            drop(ns);
            f()
        })
        .join()
        .expect("lab namespace thread")
    }

    /// The pid of a spawned process (to signal it: SIGKILL, SIGSTOP).
    pub fn pid(&self, id: usize) -> u32 {
        self.children.lock().unwrap()[id].id()
    }

    /// Send `sig` to a spawned process (SIGKILL a rank, SIGSTOP one to freeze it).
    pub fn signal(&self, id: usize, sig: Signal) {
        let pid = Pid::from_raw(self.pid(id) as i32);
        kill(pid, sig).unwrap_or_else(|e| panic!("kill {sig} to child {id} ({pid}): {e}"));
    }

    /// `fabprobe ring` arguments for rank `rank` of `world`, coordinator on node 0's
    /// management address, data on eth1.
    /// Start `fabprobe ring` for each rank in `ranks` (rank r on node r) of a `world`.
    pub fn spawn_ring(
        &self,
        ranks: std::ops::Range<usize>,
        world: usize,
        token: &str,
        extra: &[&str],
    ) -> Vec<usize> {
        ranks
            .map(|r| {
                let a = self.ring_args(r, world, token, extra);
                self.spawn(r, &a.iter().map(|s| s.as_str()).collect::<Vec<_>>())
            })
            .collect()
    }

    /// `fabprobe ring` on every node (rank r on node r) with `extra`, each waited for up
    /// to `limit`: rank 0's output (the report); the other ranks print nothing on stdout.
    pub fn ring_report(&self, token: &str, extra: &[&str], limit: Duration) -> Output {
        self.ring_report_with(token, extra, limit, |_| {})
    }

    /// [`Lab::ring_report`] with `during` done once the ranks are started (a fault that
    /// must land mid-run).
    pub fn ring_report_with(
        &self,
        token: &str,
        extra: &[&str],
        limit: Duration,
        during: impl FnOnce(&Lab),
    ) -> Output {
        let n = self.nodes.len();
        let ids = self.spawn_ring(0..n, n, token, extra);
        during(self);
        let outs: Vec<Output> = ids.iter().map(|&id| self.wait(id, limit).0).collect();
        for (r, o) in outs.iter().enumerate().skip(1) {
            assert!(o.stdout.is_empty(), "rank {r} printed: {}", text(&o.stdout));
        }
        outs.into_iter().next().expect("a lab has a node")
    }

    pub fn ring_args(&self, rank: usize, world: usize, token: &str, extra: &[&str]) -> Vec<String> {
        let mut a: Vec<String> = [
            "ring",
            "--rank",
            &rank.to_string(),
            "--world",
            &world.to_string(),
            "--coordinator",
            &format!("{}:29517", self.nodes[0].mgmt_ip),
            "--ifname",
            "=eth1",
            "--token",
            token,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    }
}

/// A switch port sending LLDP: `frame` out of the data bridge's port to one node every
/// 200 ms (what a switch does every 30 s), until dropped. The bridge's ports live in this
/// (the switch's) namespace, so the frame reaches only that node's `eth1`.
pub struct LldpSender {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<usize>>,
}

impl LldpSender {
    /// Frames sent so far, stopping the sender.
    pub fn stop(mut self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().map(|t| t.join().unwrap_or(0)).unwrap_or(0)
    }
}

impl Drop for LldpSender {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Lab {
    /// Send `frame` (an LLDPDU, `fabprobe::sysfs::lldp::encode::frame`) to `node`'s data
    /// interface from its switch port on the data bridge, every 200 ms for at most 60 s.
    pub fn send_lldp(&self, node: usize, frame: Vec<u8>) -> LldpSender {
        use pnet::datalink::{self, Channel};
        let port = format!("{}{node}d", self.prefix);
        let iface = datalink::interfaces()
            .into_iter()
            .find(|i| i.name == port)
            .unwrap_or_else(|| panic!("the bridge port {port} is missing"));
        let Ok(Channel::Ethernet(mut tx, _rx)) = datalink::channel(&iface, datalink::Config::default())
        else {
            panic!("no AF_PACKET channel on {port}");
        };
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut sent = 0;
            for _ in 0..300 {
                if s.load(Ordering::Relaxed) {
                    break;
                }
                if let Some(Ok(())) = tx.send_to(&frame, None) {
                    sent += 1;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            sent
        });
        LldpSender {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Ok(mut c) = self.children.lock() {
            for ch in c.iter_mut() {
                let _ = ch.kill();
                let _ = ch.wait();
            }
        }
        for n in &self.nodes {
            kill_ns_pids(&n.ns);
            let _ = sh(&["ip", "netns", "del", &n.ns]);
        }
        let _ = sh(&["ip", "link", "del", &format!("{}m", self.prefix)]);
        let _ = sh(&["ip", "link", "del", &format!("{}d", self.prefix)]);
        // The second rail's bridge, where `add_rail` made one.
        let _ = sh(&["ip", "link", "del", &format!("{}r", self.prefix)]);
    }
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A JSON report, or a panic that shows what came instead.
pub fn json(out: &[u8]) -> serde_json::Value {
    serde_json::from_slice(out).unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", text(out)))
}

/// How many times a repeated lab case runs: `FABPROBE_LAB_RUNS` when set (a proof run by
/// hand, 10 or 20), else `default` (what CI runs).
pub fn runs(default: usize) -> usize {
    std::env::var("FABPROBE_LAB_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(default)
}
