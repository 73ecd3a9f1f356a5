//! Attacks on every data port of a running 4-rank `fabprobe ring` in the network lab (see
//! tests/lab/mod.rs): a port scan, 600 slow-drip connections, garbage and oversize frames,
//! frames carrying terminal escapes, wrong-token handshakes, and a fake rank claiming each
//! rank's ring links from a foreign address (a fifth node, 198.19.0.14). The job must finish
//! with correct results within --timeout + grace, name the attacker by its address, never
//! an innocent rank's, and print none of the attacker's bytes. Needs root and python3 (the
//! attacker is tests/lab/attack_data.py): without them SKIPPED, a failure under
//! `FABPROBE_LAB=required` (CI).

mod lab;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lab::{Lab, LabOpts, lab_unavailable, text};

/// The attacker processes, killed however the test ends (the lab also kills everything
/// left in its namespaces).
struct Attackers(Vec<Child>);

impl Drop for Attackers {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The data port `node`'s fabprobe listens on (not the coordinator's), once it does.
fn data_port(lab: &Lab, node: usize, by: Instant) -> u16 {
    let ip = lab.nodes[node].data_ip.clone();
    loop {
        let o = lab.exec(node, "ss", &["-Hltn"]);
        for line in text(&o.stdout).lines() {
            if let Some(local) = line.split_whitespace().nth(3)
                && let Some(p) = local.strip_prefix(&format!("{ip}:"))
            {
                return p.parse().unwrap();
            }
        }
        assert!(Instant::now() < by, "node {node} never listened on {ip}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn attack(lab: &Lab, token: &str, targets: &[String], drips: usize) -> Child {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/lab/attack_data.py");
    Command::new("ip")
        .args([
            "netns",
            "exec",
            &lab.nodes[4].ns,
            "python3",
            script,
            token,
            "40",
            &drips.to_string(),
        ])
        .args(targets)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the attacker")
}

#[test]
fn attacks_on_every_data_port_neither_stop_the_job_nor_blame_a_rank() {
    if Command::new("python3").arg("--version").output().is_err() {
        lab_unavailable(
            "attack_data",
            "python3 (the attacker, tests/lab/attack_data.py) is not installed",
        );
        return;
    }
    let Some(lab) = Lab::new(
        "attack_data",
        LabOpts {
            nodes: 5,
            rate: Some("1gbit".into()),
        },
    ) else {
        return;
    };
    let token = "attack4";
    let timeout = 10;
    let extra = [
        "-b",
        "64K",
        "-e",
        "1M",
        "-f",
        "4",
        "-n",
        "3",
        "--timeout",
        "10",
        "--scan-time",
        "2",
        "--format",
        "json",
    ];
    let by = Instant::now() + Duration::from_secs(10);
    // Ranks 0-2 first: their data ports are attacked while they wait for rank 3, so the
    // attack is queued before any link opens, and it goes on through the scan and sweep.
    let mut ids = lab.spawn_ring(0..3, 4, token, &extra);
    let target = |r: usize, port: u16| format!("{}:{port}:{}:{r}", lab.nodes[r].data_ip, (r + 3) % 4);
    let first: Vec<String> = (0..3).map(|r| target(r, data_port(&lab, r, by))).collect();
    let mut attackers = Attackers(vec![attack(&lab, token, &first, 150)]);
    // The attack is on before rank 3 starts: past its port scan, the attacker holds its slow
    // drips on every port (64 of its 150 each: a victim keeps at most 128 waiting in all).
    let ports: Vec<String> = first
        .iter()
        .map(|t| t.split(':').take(2).collect::<Vec<_>>().join(":"))
        .collect();
    lab.wait_connected_to(4, &ports, 64, Duration::from_secs(15));
    let t0 = Instant::now();
    ids.extend(lab.spawn_ring(3..4, 4, token, &extra));
    attackers
        .0
        .push(attack(&lab, token, &[target(3, data_port(&lab, 3, by))], 150));
    let outs: Vec<_> = ids
        .iter()
        .map(|&id| lab.wait(id, Duration::from_secs(timeout + 30)).0)
        .collect();
    let took = t0.elapsed();
    drop(attackers);
    let all_err: String = outs
        .iter()
        .map(|o| text(&o.stderr))
        .collect::<Vec<_>>()
        .join("\n");
    for (r, o) in outs.iter().enumerate() {
        assert!(
            o.status.success(),
            "rank {r} failed:\n{all_err}\n{}",
            text(&o.stdout)
        );
        // Nothing printed carries the attacker's bytes (escapes, bells, its text).
        for b in [&o.stdout, &o.stderr] {
            let t = text(b);
            assert!(
                !b.contains(&0x1b) && !b.contains(&0x07) && !t.contains("PWNED"),
                "rank {r}: {t}"
            );
        }
    }
    let j: serde_json::Value = serde_json::from_slice(&outs[0].stdout).unwrap();
    let d = &j["data"];
    assert!(d["error"].is_null(), "{}", d["error"]);
    assert_eq!(
        d["verdicts"].as_array().map(Vec::len),
        Some(0),
        "{}",
        d["verdicts"]
    );
    for r in d["results"].as_array().unwrap() {
        assert_eq!(r["wrong"], 0, "{r}");
        assert_eq!(r["in_place"]["wrong"], 0, "{r}");
    }
    // Refusals name the attacker's address, never a rank's.
    assert!(all_err.contains("data link from 198.19.0.14"), "{all_err}");
    for i in 10..14 {
        assert!(
            !all_err.contains(&format!("data link from 198.19.0.{i}")),
            "{all_err}"
        );
    }
    assert!(
        took < Duration::from_secs(timeout + 15),
        "the job took {took:?} under attack"
    );
    eprintln!("job under attack finished in {took:?}");
}
