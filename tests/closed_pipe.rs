//! A reader that goes away is not an error (design: "a broken pipe is not an error", exit 0):
//! no command panics (exit 101) when its stdout, or its stdout and stderr together
//! (`2>&1 | head`), is a pipe whose reader closed before the first write, or after reading
//! a few bytes of an output larger than the pipe's buffer (so the write that fails is the
//! one after it). Every command, in each of its formats, on fixtures with faults (exit 1
//! when read whole) and without devices.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_fabprobe");
const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn fixture(name: &str) -> String {
    format!("{ROOT}/fixtures/{name}")
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// Every probe command in each format it writes, on `fx`.
fn probe_commands(fx: &str) -> Vec<Vec<String>> {
    let root = fixture(fx);
    let mut out = Vec::new();
    for cmd in common::host_commands() {
        for f in common::formats(cmd) {
            // -v: the command logs to stderr too, which the second case closes as well.
            out.push(s(&["-v", "--root", &root, "--format", f, cmd]));
        }
    }
    out
}

/// A sweep input larger than a pipe's buffer: `n` copies of one check report, one host each.
fn sweep_input(dir: &Path, n: usize) -> PathBuf {
    let o = Command::new(BIN)
        .args([
            "--root",
            &fixture("h100-sxm-8gpu-bad"),
            "--format",
            "json",
            "check",
        ])
        .output()
        .unwrap();
    let mut v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut text = String::new();
    for i in 0..n {
        v["host"]["hostname"] = format!("gpu{i:05}").into();
        text.push_str(&v.to_string());
        text.push('\n');
    }
    let p = dir.join("fleet.jsonl");
    std::fs::write(&p, text).unwrap();
    p
}

fn other_commands(dir: &Path) -> Vec<Vec<String>> {
    let fleet = sweep_input(dir, 2000);
    let f = fleet.to_str().unwrap();
    let log = format!("{ROOT}/tests/data/nccl-logs/basicsr-737-pg-watchdog.log");
    let ring = format!("{ROOT}/tests/data/ring-reports/slow-egress-node-c.json");
    vec![
        s(&["sweep", f]),
        s(&["--format", "json", "sweep", f]),
        s(&["--format", "prom", "sweep", f]),
        s(&["sweep", "--drain", f]),
        s(&["-v", "nccl-log", &log]),
        s(&["--format", "json", "nccl-log", &log]),
        s(&["report", &ring, "--html", "-"]),
        s(&["report", f, "--html", "-"]),
        s(&["completions", "bash"]),
        s(&["check", "--show-policy", "dgx-h100"]),
        s(&["--help"]),
        s(&["check", "--help"]),
    ]
}

/// Run `args` with stdout a pipe whose reader is gone before the child starts (and stderr
/// the same pipe when `stderr_too`); stderr is captured otherwise.
fn closed_before(args: &[String], stderr_too: bool) -> (ExitStatus, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut c = Command::new(BIN);
    c.args(args).stdin(Stdio::null());
    if stderr_too {
        c.stderr(writer.try_clone().unwrap());
    } else {
        c.stderr(Stdio::piped());
    }
    c.stdout(writer);
    let out = c.output().unwrap();
    (out.status, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Run `args`, read `n` bytes of its stdout (and stderr, the same pipe), then close it.
fn closed_after(args: &[String], n: usize) -> ExitStatus {
    let (mut reader, writer) = std::io::pipe().unwrap();
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stderr(writer.try_clone().unwrap())
        .stdout(writer)
        .spawn()
        .unwrap();
    let mut buf = vec![0u8; n];
    let _ = reader.read_exact(&mut buf);
    drop(reader);
    child.wait().unwrap()
}

fn assert_clean(args: &[String], st: ExitStatus, stderr: &str, how: &str) {
    assert_ne!(
        st.code(),
        Some(101),
        "{how}: `fabprobe {}` panicked: {stderr}",
        args.join(" ")
    );
    assert!(
        !stderr.contains("panicked"),
        "{how}: `fabprobe {}`: {stderr}",
        args.join(" ")
    );
    assert_eq!(
        st.code(),
        Some(0),
        "{how}: `fabprobe {}`: a reader that went away is not an error: {stderr}",
        args.join(" ")
    );
}

#[test]
fn no_command_fails_when_its_reader_is_gone_before_it_writes() {
    let dir = tempfile::tempdir().unwrap();
    let mut all = other_commands(dir.path());
    for fx in [
        "h100-sxm-8gpu-bad",
        "ib-degraded",
        "roce-qos-mismatch",
        "cpu-only",
    ] {
        all.extend(probe_commands(fx));
    }
    for args in &all {
        let (st, err) = closed_before(args, false);
        assert_clean(args, st, &err, "stdout closed");
        let (st, _) = closed_before(args, true);
        assert_clean(args, st, "", "stdout and stderr closed");
    }
}

#[test]
fn large_outputs_cut_after_a_few_bytes_exit_0() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = sweep_input(dir.path(), 2000);
    let f = fleet.to_str().unwrap();
    for args in [
        s(&["sweep", f]),
        s(&["--format", "json", "sweep", f]),
        s(&["--format", "prom", "sweep", f]),
        s(&["sweep", "--drain", f]),
        s(&["report", f, "--html", "-"]),
    ] {
        // The output is well over a pipe's 64 KiB: the write after the reader left fails.
        let full = Command::new(BIN).args(&args).output().unwrap();
        assert!(
            full.stdout.len() > 80 << 10,
            "`{}`: {} bytes",
            args.join(" "),
            full.stdout.len()
        );
        for n in [1, 64, 4096] {
            let st = closed_after(&args, n);
            assert_clean(&args, st, "", &format!("closed after {n} bytes"));
        }
    }
}
