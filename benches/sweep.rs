//! Benchmark: `fabprobe sweep` merges 20,000 node reports (real `check` reports of the
//! fixtures, as JSON lines with pdsh prefixes) with generated faults in under 1 s, and must
//! drain exactly the injected failed nodes, never a passing outlier.
//! Run: cargo bench --bench sweep. `cargo test` runs its quick mode (2,000 nodes, every kind
//! of injected fault still present, the same assertions; benches/common/mod.rs).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use fabprobe::check::policy;
use fabprobe::check::run::{self, Sampling};
use fabprobe::check::sweep::Sweeper;
use fabprobe::host::Host;
use fabprobe::render::{Envelope, HostInfo};

mod common;
use common::Groups;

fn report(dir: &Path, pol: &policy::Policy) -> serde_json::Value {
    let host = Host::snapshot(dir).unwrap();
    let (r, f) = run::run(
        &host,
        &fabprobe::nccl::settings::NcclSettings::build(&host, None),
        pol,
        &Sampling::default(),
    );
    serde_json::from_str(&Envelope::new("check", HostInfo::of(&host), &r, &f).to_json_line()).unwrap()
}

/// The fleet of `nodes` as pdsh would print it, and the drain list it must produce.
fn fleet(
    nodes: usize,
    good: &serde_json::Value,
    bad: &serde_json::Value,
    nogdr: &serde_json::Value,
) -> (Vec<u8>, Vec<String>) {
    let mut out = Vec::new();
    let mut drain = Vec::new();
    for i in 0..nodes {
        let label = format!("gpu{i:05}");
        // Every 5th node reports its FQDN.
        let host = if i % 5 == 0 {
            format!("{label}.cluster.local")
        } else {
            label.clone()
        };
        let mut v = if i % 997 == 13 {
            drain.push(label.clone());
            bad.clone()
        } else if i % 1499 == 7 {
            drain.push(label.clone());
            nogdr.clone()
        } else {
            good.clone()
        };
        v["host"]["hostname"] = host.clone().into();
        if i % 2003 == 11 {
            // A passing outlier: listed, never drained.
            v["data"]["fingerprint"]["kernel"] = "5.15.0-97-generic".into();
        }
        if i % 10 == 9 {
            v["tool_version"] = "9.9.9".into();
            v["data"]["fingerprint"]["tool_version"] = "9.9.9".into();
            v["data"]["fingerprint"]["nccl_version"] = "2.21.5".into();
        }
        let mut line = serde_json::to_vec(&v).unwrap();
        match i % 4001 {
            100 => line.insert(20, 0xff),
            200 => line.truncate(line.len() / 2),
            300 => continue,
            _ => {}
        }
        out.extend_from_slice(format!("{label}: ").as_bytes());
        out.extend_from_slice(&line);
        out.push(b'\n');
        if i % 3001 == 17 {
            // A second report for the node, failing: the worse counts.
            out.extend_from_slice(format!("{host}: ").as_bytes());
            let mut b = bad.clone();
            b["host"]["hostname"] = host.into();
            out.extend_from_slice(&serde_json::to_vec(&b).unwrap());
            out.push(b'\n');
            if !drain.contains(&label) {
                drain.push(label.clone());
            }
        }
    }
    drain.sort();
    (out, drain)
}

/// CPU time of this process (user + system): on a shared, oversubscribed machine wall time
/// mostly measures waiting for a core.
fn cpu_now() -> std::time::Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    let Ok(ru) = getrusage(UsageWho::RUSAGE_SELF) else {
        return std::time::Duration::ZERO;
    };
    let tv =
        |t: nix::sys::time::TimeVal| std::time::Duration::new(t.tv_sec() as u64, t.tv_usec() as u32 * 1000);
    tv(ru.user_time()) + tv(ru.system_time())
}

fn sweep(input: &[u8], nodes: usize) -> fabprobe::check::sweep::SweepReport {
    let mut sw = Sweeper::new();
    for (n, line) in input.split(|&c| c == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        let at = line.windows(2).position(|w| w == b": ").unwrap();
        let label = std::str::from_utf8(&line[..at]).unwrap();
        sw.add_bytes(&format!("stdin:{}", n + 1), Some(label), &line[at + 2..]);
    }
    sw.expect(&fabprobe::check::hostlist::expand(&expect(nodes)).unwrap());
    sw.finish()
}

/// The `--expect` hostlist of the fleet.
fn expect(nodes: usize) -> String {
    format!("gpu[00000-{:05}]", nodes - 1)
}

/// The drain list `fabprobe sweep --drain` prints, node names in order.
fn drained(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("scontrol update NodeName="))
        .map(|l| l.split(' ').next().unwrap_or(""))
        .collect()
}

fn main() {
    let mut g = Groups::start("sweep");
    let nodes = g.mode.pick(2_000, 20_000);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let dgx = policy::load("dgx-h100").unwrap();
    let good = report(&root.join("h100-sxm-8gpu"), &dgx);
    let bad = report(&root.join("h100-sxm-8gpu-bad"), &dgx);
    let nogdr = report(&root.join("h100-gdr-broken"), &dgx);
    let (input, want) = fleet(nodes, &good, &bad, &nogdr);
    println!(
        "fleet: {nodes} nodes, {:.1} MiB of JSON lines, {} to drain",
        input.len() as f64 / f64::from(1 << 20),
        want.len()
    );
    in_process(&mut g, &input, nodes, &want);
    let process = process(&mut g, &input, nodes, &want);
    g.speed_target("20,000 reports in under 1 s, the fabprobe process", process < 1.0);
    g.finish();
}

/// Five in-process sweeps: each drains exactly `want` and counts every missing node.
fn in_process(g: &mut Groups, input: &[u8], nodes: usize, want: &[String]) {
    let mut times = Vec::new();
    let mut cpu = Vec::new();
    let mut runs = Vec::new();
    for _ in 0..5 {
        let (t, c) = (Instant::now(), cpu_now());
        let r = sweep(input, nodes);
        times.push(t.elapsed());
        cpu.push(cpu_now() - c);
        runs.push(r);
    }
    g.check(
        "sweep in-process drains exactly the injected failed nodes",
        || {
            for r in &runs {
                let got: Vec<&str> = r.bad_nodes.iter().map(|b| b.node.as_str()).collect();
                assert_eq!(
                    got, want,
                    "the sweep must drain exactly the injected failed nodes"
                );
            }
        },
    );
    g.check("sweep in-process counts every missing node", || {
        for r in &runs {
            let missing = r
                .unreadable
                .iter()
                .filter(|u| u.problem.as_str() == "missing")
                .count();
            assert_eq!(missing, (0..nodes).filter(|i| i % 4001 == 300).count());
        }
    });
    times.sort();
    cpu.sort();
    println!(
        "sweep in-process, {nodes} reports: cpu median {:.0} ms (best {:.0} ms)",
        cpu[2].as_secs_f64() * 1e3,
        cpu[0].as_secs_f64() * 1e3
    );
    println!(
        "sweep in-process, {nodes} reports: median {:.0} ms (best {:.0} ms, 5 runs)",
        times[2].as_secs_f64() * 1e3,
        times[0].as_secs_f64() * 1e3
    );
}

/// Three runs of `fabprobe sweep --expect --drain` on stdin: exit 1 and exactly `want`'s
/// drain lines. Returns the median wall seconds.
fn process(g: &mut Groups, input: &[u8], nodes: usize, want: &[String]) -> f64 {
    let bin = env!("CARGO_BIN_EXE_fabprobe");
    let expect = expect(nodes);
    let mut times = Vec::new();
    let mut outs = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let mut c = Command::new(bin)
            .args(["sweep", "--expect", &expect, "--drain"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut w = c.stdin.take().unwrap();
        let data = input.to_vec();
        let writer = std::thread::spawn(move || w.write_all(&data));
        let o = c.wait_with_output().unwrap();
        writer.join().unwrap().unwrap();
        times.push(t.elapsed());
        outs.push(o);
    }
    g.check(
        "fabprobe sweep --drain prints exactly the injected failed nodes",
        || {
            for o in &outs {
                assert_eq!(o.status.code(), Some(1));
                let text = String::from_utf8_lossy(&o.stdout);
                assert_eq!(
                    drained(&text),
                    want,
                    "fabprobe sweep --drain must print exactly these nodes"
                );
            }
        },
    );
    times.sort();
    println!(
        "process: fabprobe sweep --drain < {nodes} lines: median {:.0} ms",
        times[1].as_secs_f64() * 1e3
    );
    times[1].as_secs_f64()
}
