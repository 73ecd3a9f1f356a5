//! Shared by the test binaries: what a test does when the lab it needs is not here.
//!
//! A lab test that cannot run must never count as passed in CI. `.ci/run` sets
//! `FABPROBE_LAB=required`: then a missing lab (no root, no namespaces, no iproute2, no VM
//! image...) fails the test with the reason. Without it (a developer's laptop) the test
//! prints a loud SKIPPED line and returns. Every lab (the network-namespace lab in
//! `tests/lab/`, the RDMA VM lab, the Slurm lab, Chromium, node_exporter...) decides here:
//! [`lab_ready`] for what the machine must have (root, a program), [`lab_unavailable`] for a
//! reason a lab found itself. A test that cannot run returns only after one of them
//! (`tests/lab_rules.rs` checks every early return of every test).

#![allow(dead_code)]

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The environment variable `.ci/run` sets to `required`.
pub const LAB_ENV: &str = "FABPROBE_LAB";

/// Whether a missing lab must fail the test (`FABPROBE_LAB=required`).
pub fn lab_required() -> bool {
    std::env::var(LAB_ENV).is_ok_and(|v| v == "required")
}

/// Print past cargo's output capture: a skipped lab test must be seen.
pub fn loud(msg: &str) {
    let mut e = std::io::stderr();
    let _ = writeln!(e, "\n********\n{msg}\n********");
}

/// The lab `test` needs cannot run here, for `reason`. With `FABPROBE_LAB=required` this
/// panics (the test fails and says why); otherwise it prints a loud SKIPPED line and the
/// caller returns without testing anything.
pub fn lab_unavailable(test: &str, reason: &str) {
    if lab_required() {
        panic!("lab test {test} cannot run: {reason} ({LAB_ENV}=required, so this is a failure)");
    }
    loud(&format!(
        "SKIPPED lab test {test}: {reason} (set {LAB_ENV}=required to make this a failure)"
    ));
}

/// What a test needs from this machine.
pub enum Need<'a> {
    /// Effective uid 0, and what for.
    Root(&'a str),
    /// A program on PATH (or in /usr/sbin, /sbin), and the Debian package that has it.
    Program(&'a str, &'a str),
}

/// Whether this machine has all that `needs` lists for `test`. When one is missing, it goes to
/// [`lab_unavailable`] (a failure under `FABPROBE_LAB=required`, a loud SKIPPED line
/// otherwise) and the caller returns: `if !lab_ready(test, &[...]) { return; }`.
pub fn lab_ready(test: &str, needs: &[Need]) -> bool {
    for need in needs {
        let missing = match need {
            Need::Root(why) => (!nix::unistd::geteuid().is_root()).then(|| format!("needs root ({why})")),
            Need::Program(p, pkg) => {
                (!on_path(p)).then(|| format!("`{p}` is not installed (Debian package {pkg})"))
            }
        };
        if let Some(reason) = missing {
            lab_unavailable(test, &reason);
            return false;
        }
    }
    true
}

/// An executable file named `program` in a PATH directory, /usr/sbin or /sbin.
fn on_path(program: &str) -> bool {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .chain(["/usr/sbin", "/sbin"])
        .filter(|d| !d.is_empty())
        .any(|d| {
            std::fs::metadata(Path::new(d).join(program))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// A stand-in `scontrol` in `dir` that records its arguments, one per line, in
/// `dir/scontrol.log` (appended to), and a PATH that finds it before the real one: the
/// drop-ins' drain line read without a Slurm controller.
#[allow(dead_code)]
pub fn fake_scontrol(dir: &Path) -> (std::path::PathBuf, String) {
    let log = dir.join("scontrol.log");
    let fake = dir.join("scontrol");
    let script = format!(
        "#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done >> {}\n",
        log.display()
    );
    std::fs::write(&fake, script).unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default());
    (log, path)
}

/// Every fixture snapshot: the directories under `fixtures/` that hold a `sys/` tree, by
/// name, sorted (`fixtures/gen` holds the generator, not a snapshot).
pub fn fixture_names() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let mut v: Vec<String> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("read {}: {e}", root.display()))
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("sys").is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The commands that read one host (`--root`: the probes and `check`), from the CLI's own
/// catalogue (`fabprobe::cli::COMMANDS`), so a new one is run by every test that runs them
/// all.
pub fn host_commands() -> Vec<&'static str> {
    use fabprobe::cli::{COMMANDS, Input};
    COMMANDS
        .iter()
        .filter(|c| c.input == Input::Host)
        .map(|c| c.name)
        .collect()
}

/// The host probes: [`host_commands`] without `check`.
pub fn probes() -> Vec<&'static str> {
    host_commands().into_iter().filter(|c| *c != "check").collect()
}

/// The `--format` names `command` renders.
pub fn formats(command: &str) -> Vec<&'static str> {
    fabprobe::cli::command_info(command)
        .map(|c| c.formats.iter().map(|f| f.name()).collect())
        .unwrap_or_default()
}

/// Every `.rs` file under `dir`, depth first, for tests that read the sources.
pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// A loopback port for a server another process will bind (a coordinator, an exporter).
/// A port the kernel handed out (`bind(":0")`) and the test let go is back in the ephemeral
/// range, where any process of the run (a rank's data listener, a connect's source port) can
/// take it before the server binds it; CI saw rank 0 fail with "Address already in use"
/// that way. So the port is taken below `net.ipv4.ip_local_port_range`, which the kernel
/// never hands out by itself, and checked free on IPv4 and IPv6 (fabprobe binds `[::]`).
pub fn server_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768);
    let (first, span) = (10_000u32, low.saturating_sub(10_000).max(1000));
    // Spread over the span by process id: test binaries of other checkouts may run beside.
    let seed = std::process::id().wrapping_mul(7919);
    for _ in 0..span {
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (first + (seed.wrapping_add(k) % span)) as u16;
        // One at a time: a dual-stack `[::]` conflicts with a bound 127.0.0.1.
        let v4 = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, port)).is_ok();
        let v6 = std::net::TcpListener::bind((std::net::Ipv6Addr::UNSPECIFIED, port)).is_ok()
            || !std::path::Path::new("/proc/net/tcp6").exists();
        if v4 && v6 {
            return port;
        }
    }
    panic!(
        "no free loopback port below the ephemeral range ({first}..{})",
        first + span
    );
}

/// The ring's scan alone, small and quick (4 MiB samples, 2 s an order, a 10 s data
/// timeout), as JSON: the lab tests that localize a fault by the scan start from it.
pub const SCAN_ARGS: [&str; 9] = [
    "--scan",
    "--scan-bytes",
    "4M",
    "--scan-time",
    "2",
    "--timeout",
    "10",
    "--format",
    "json",
];

/// A ring long enough for a fault to land in its sweep (8 MiB, 1000 iterations), judged
/// after a data timeout of `timeout_s` seconds, as JSON; without the scan unless `scan`:
/// the lab tests that stop, kill or cut something mid-run.
pub fn long_sweep(timeout_s: &str, scan: bool) -> Vec<&str> {
    let mut v = if scan { vec![] } else { vec!["--no-scan"] };
    v.extend([
        "-b",
        "8M",
        "-e",
        "8M",
        "-n",
        "1000",
        "--timeout",
        timeout_s,
        "--format",
        "json",
    ]);
    v
}

/// The policies shipped in `checks/` (`--policy NAME`), by name, sorted: each `*.toml`
/// there, read from the directory so a new one is run by every test that runs them all.
pub fn policies() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("checks");
    let mut v: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    v.sort();
    v
}

/// Every host command as an operator runs it on a node: each of `probes` on its own, then
/// `check` under each shipped policy.
pub fn probe_and_check_runs(probes: &[&str]) -> Vec<Vec<String>> {
    let mut v: Vec<Vec<String>> = probes.iter().map(|c| vec![c.to_string()]).collect();
    for p in policies() {
        v.push(vec!["check".into(), "--policy".into(), p]);
    }
    v
}

/// stdout and stderr of `fabprobe --root fixtures/FIXTURE --format FORMAT CMD..`, asserting
/// exit 0-3 (a verdict, never a usage error or a panic).
pub fn run_fixture(fixture: &str, format: &str, cmd: &[String]) -> (String, String) {
    let root = format!("fixtures/{fixture}");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .args(["--root", &root, "--format", format])
        .args(cmd)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        matches!(o.status.code(), Some(0..=3)),
        "{fixture} {cmd:?}: exit {:?}: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The findings of a JSON report (`findings[]` of the envelope), none when it has none.
pub fn findings(report: &serde_json::Value) -> impl Iterator<Item = &serde_json::Value> {
    report["findings"].as_array().into_iter().flatten()
}
