//! `--format prom` beside a real node_exporter: every command's exposition goes into the
//! textfile collector's directory while node_exporter's own infiniband collector reads the
//! same fixture's sysfs, and one scrape on loopback must carry every fabprobe family with
//! no gathering error (a `node_infiniband_*` name with other HELP fails the whole family).

mod common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const NODE_EXPORTER: &str = "prometheus-node-exporter";

fn fabprobe(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "fabprobe {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Families in one exposition, each checked to have exactly one HELP and one TYPE line.
fn families(text: &str) -> BTreeSet<String> {
    let mut help = Vec::new();
    let mut kind = Vec::new();
    for l in text.lines() {
        if let Some(r) = l.strip_prefix("# HELP ") {
            help.push(r.split(' ').next().unwrap().to_string());
        } else if let Some(r) = l.strip_prefix("# TYPE ") {
            kind.push(r.split(' ').next().unwrap().to_string());
        }
    }
    let set: BTreeSet<String> = help.iter().cloned().collect();
    assert_eq!(set.len(), help.len(), "a family with two HELP lines:\n{text}");
    assert_eq!(
        set,
        kind.iter().cloned().collect(),
        "HELP and TYPE differ:\n{text}"
    );
    assert_eq!(kind.len(), set.len(), "a family with two TYPE lines:\n{text}");
    set
}

/// The node_exporter child, killed and reaped however the test ends.
struct Exporter(Child);
impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One `GET /metrics` on loopback, retried until the exporter listens (10 s deadline).
fn scrape(port: u16) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect((Ipv4Addr::LOCALHOST, port)) {
            Ok(mut s) => {
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
                    .unwrap();
                let mut body = String::new();
                s.read_to_string(&mut body).unwrap();
                return body;
            }
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("node_exporter on 127.0.0.1:{port} never answered: {e}"),
        }
    }
}

#[test]
fn node_exporter_scrapes_every_fabprobe_family_without_error() {
    if Command::new(NODE_EXPORTER).arg("--version").output().is_err() {
        common::lab_unavailable(
            "node_exporter_scrapes_every_fabprobe_family_without_error",
            "no prometheus-node-exporter (apt-get install prometheus-node-exporter)",
        );
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let outputs: [(&str, Vec<&str>); 3] = [
        (
            "links",
            vec!["--root", "fixtures/ib-degraded", "--format", "prom", "links"],
        ),
        (
            "gids",
            vec!["--root", "fixtures/roce-bond-host", "--format", "prom", "gids"],
        ),
        (
            "qos",
            vec!["--root", "fixtures/roce-bond-host", "--format", "prom", "qos"],
        ),
    ];
    let mut want = BTreeSet::new();
    for (name, args) in &outputs {
        // Each probe's file as a textfile job writes it: --output, exit 0 although
        // ib-degraded's links fail (the verdict is in the file).
        let file = dir.path().join(format!("{name}.prom"));
        let out = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
            .args(args)
            .arg("--output")
            .arg(&file)
            .current_dir(root)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(out.stdout.is_empty(), "{name}: --output writes the file, not stdout");
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(text, fabprobe(args), "{name}: the file differs from stdout");
        assert!(text.contains(&format!("\nfabprobe_{name}_verdict ")), "{name}: no verdict\n{text}");
        let fams = families(&text);
        assert!(!fams.is_empty(), "{name}: no metric at all");
        for f in &fams {
            assert!(
                f.starts_with("fabprobe_"),
                "{name}: {f} is not prefixed fabprobe_"
            );
        }
        want.extend(fams);
    }
    // A sweep of the failing node's check report, written the same way.
    let reports = tempfile::tempdir().unwrap();
    let report = fabprobe(&["--root", "fixtures/h100-sxm-8gpu-bad", "--format", "json", "check", "--policy", "dgx-h100"]);
    std::fs::write(reports.path().join("gpu01.json"), report).unwrap();
    let sweep_file = dir.path().join("sweep.prom");
    let out = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .args(["--format", "prom", "sweep"])
        .arg(reports.path())
        .arg("--output")
        .arg(&sweep_file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "sweep: {}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&sweep_file).unwrap();
    assert!(text.contains("fabprobe_sweep_bad_node{"), "{text}");
    // A family with no series (no outlier in one node) is not exposed by node_exporter.
    let sampled = |f: &String| text.lines().any(|l| !l.starts_with('#') && l.starts_with(f.as_str()));
    want.extend(families(&text).into_iter().filter(sampled));
    // The textfile pattern: one node, two policies, each written by `check --output`, which
    // exits 0 once the file is written although the node fails (the verdict is inside).
    for pol in ["dgx-h100", "default"] {
        let file = dir.path().join(format!("check-{pol}.prom"));
        let out = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
            .args(["--root", "fixtures/h100-sxm-8gpu-bad", "--format", "prom", "check"])
            .args(["--policy", pol, "--output"])
            .arg(&file)
            .current_dir(root)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.stdout.is_empty(), "--output writes the file, not stdout");
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            text.contains(&format!("fabprobe_check_verdict{{policy=\"{pol}\"}} 2\n")),
            "{text}"
        );
        want.extend(families(&text));
    }
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
    let port = common::server_port();
    let log: PathBuf = dir.path().join("node_exporter.log");
    let child = Command::new(NODE_EXPORTER)
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--collector.disable-defaults")
        .arg("--collector.textfile")
        .arg(format!("--collector.textfile.directory={}", dir.path().display()))
        // Its own infiniband collector on the same fixture: the names must not collide.
        .arg("--collector.infiniband")
        .arg(format!(
            "--path.sysfs={}",
            root.join("fixtures/ib-degraded/sys").display()
        ))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let exporter = Exporter(child);
    let body = scrape(port);
    drop(exporter);
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(
        body.starts_with("HTTP/1.0 200") || body.starts_with("HTTP/1.1 200"),
        "{body}"
    );
    assert!(!log.contains("error gathering metrics"), "{log}");
    assert!(!log.contains("collected before"), "{log}");
    assert!(!body.contains("collected before"), "{body}");
    assert!(body.contains("\nfabprobe_links_verdict 2\n"), "{body}");
    for pol in ["dgx-h100", "default"] {
        assert!(
            body.contains(&format!("\nfabprobe_check_verdict{{policy=\"{pol}\"}} 2\n")),
            "{body}"
        );
    }
    assert!(body.contains("\nnode_textfile_scrape_error 0\n"), "{body}\n{log}");
    // node_exporter's infiniband collector ran on the fixture beside ours.
    assert!(body.contains("\nnode_infiniband_info{"), "{body}");
    for f in &want {
        assert!(
            body.contains(&format!("\n# TYPE {f} ")),
            "{f} missing from the scrape\n{log}"
        );
    }
}
