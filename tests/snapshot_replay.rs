//! `fabprobe snapshot` end to end: a live capture of this host (as root and as an
//! unprivileged user) replays to the reports the live host gives, and re-capturing every
//! fixture replays to the same reports as the fixture itself. "The same" is the whole JSON
//! envelope of every probe, less what differs by construction (named where it is dropped).

mod common;

use std::path::Path;
use std::process::Command;

use fabprobe::host::Host;

const BIN: &str = env!("CARGO_BIN_EXE_fabprobe");

/// Subcommands that do not read one host: everything else is a probe and is compared here,
/// so a probe that lands later is covered without editing this file (and one that needs more
/// than `--root R --format json <sub>` fails loudly until it is listed here with its reason).
const NOT_PROBES: [&str; 9] = [
    "report", "ring", "snapshot", "sweep", "nccl-log", "check", "gen-docs", "completions", "help",
];

/// Every probe subcommand, from the clap definition.
fn probes() -> Vec<String> {
    let v: Vec<String> = fabprobe::cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .filter(|n| !NOT_PROBES.contains(&n.as_str()))
        .collect();
    for p in ["topo", "gids", "links"] {
        assert!(v.iter().any(|n| n == p), "{p} missing from {v:?}");
    }
    v
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// `fabprobe args`, as `nobody` when `as_nobody` (needs root to switch).
fn run(as_nobody: bool, args: &[&str]) -> (i32, String, String) {
    let mut c = if as_nobody {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN]);
        c
    } else {
        Command::new(BIN)
    };
    let o = c.args(args).output().expect("run fabprobe");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A probe's JSON envelope, less `host.source` (the live host or the snapshot's path) and
/// `host.captured_at` (now, or the capture's time).
fn envelope(as_nobody: bool, root: Option<&str>, probe: &str) -> (i32, serde_json::Value) {
    let mut args = Vec::new();
    if let Some(r) = root {
        args.extend(["--root", r]);
    }
    args.extend(["--format", "json", probe]);
    let (code, out, err) = run(as_nobody, &args);
    let mut v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {err}"));
    let host = v["host"].as_object_mut().unwrap();
    assert!(host.remove("source").is_some(), "{args:?}");
    host.remove("captured_at");
    (code, v)
}

/// Capture this host live, replay, and compare every probe's report with the live one.
fn live_capture_replays_to_the_live_reports(as_nobody: bool) {
    let dir = tempfile::tempdir().unwrap();
    // The unprivileged user writes the snapshot into the test's directory.
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let snap = dir.path().join("live");
    let snap = snap.to_str().unwrap();
    let (code, _, err) = run(as_nobody, &["snapshot", "-o", snap]);
    assert_eq!(code, 0, "snapshot: {err}");
    assert!(err.contains("wrote "), "{err}");
    for probe in probes() {
        let probe = probe.as_str();
        let (live_code, mut live) = envelope(as_nobody, None, probe);
        let (code, mut replay) = envelope(as_nobody, Some(snap), probe);
        assert_eq!(code, live_code, "{probe}");
        if probe == "links" {
            // The verbs cross-check asks libibverbs, which only the live host has; a
            // snapshot does not carry its answer (a gap: README "not verified").
            assert!(replay["data"]["verbs"].is_null(), "{}", replay["data"]);
            live["data"]["verbs"] = serde_json::Value::Null;
            replay["data"]["verbs"] = serde_json::Value::Null;
        }
        assert_eq!(
            replay,
            live,
            "{probe}: replay of the live capture{} differs from the live report",
            if as_nobody { " (as nobody)" } else { "" }
        );
    }
}

#[test]
fn live_capture_as_root_replays_every_probe() {
    if !is_root() {
        common::lab_unavailable("live_capture_as_root", "needs root to capture as root");
        return;
    }
    live_capture_replays_to_the_live_reports(false);
}

#[test]
fn live_capture_unprivileged_replays_every_probe() {
    if is_root() {
        if Command::new("setpriv").arg("--version").output().is_err() {
            common::lab_unavailable(
                "live_capture_unprivileged",
                "setpriv (util-linux) is not installed",
            );
            return;
        }
        live_capture_replays_to_the_live_reports(true);
    } else {
        // Already unprivileged.
        live_capture_replays_to_the_live_reports(false);
    }
}

fn fixtures() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let mut v: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("sys").is_dir())
        .map(|p| p.display().to_string())
        .collect();
    v.sort();
    v
}

/// Every fixture, captured again through `snapshot::capture` (what the probes touch, and
/// nothing else) and replayed: every probe's whole report is the fixture's own. Through a
/// directory for every fixture, through a tarball for the smallest (unpacking a large
/// tarball takes tens of seconds on a loaded CI machine; the format is the same).
#[test]
fn recapture_of_every_fixture_replays_every_probe() {
    let all = fixtures();
    assert!(all.len() >= 11, "{all:?}");
    for f in &all {
        let host = Host::snapshot(f).unwrap().with_recording();
        let dir = tempfile::tempdir().unwrap();
        let mut outs = vec![dir.path().join("snap")];
        if f.ends_with("/cpu-only") {
            outs.push(dir.path().join("snap.tar.gz"));
        }
        for out in outs {
            fabprobe::snapshot::capture(&host, Path::new(f), &out).unwrap();
            let out = out.to_str().unwrap();
            for probe in probes() {
                let probe = probe.as_str();
                let (c0, want) = envelope(false, Some(f), probe);
                let (c1, got) = envelope(false, Some(out), probe);
                assert_eq!(c1, c0, "{f} {probe}");
                assert_eq!(got, want, "{f} {probe}: re-capture {out} replays differently");
            }
        }
    }
}

/// An existing archive is never overwritten without --force, a non-empty directory never
/// written into; both refused before anything is probed, with one plain message.
#[test]
fn snapshot_refuses_an_existing_archive_and_a_full_directory() {
    let dir = tempfile::tempdir().unwrap();
    let tgz = dir.path().join("snap.tar.gz");
    std::fs::write(&tgz, b"keep me").unwrap();
    let run = |out: &std::path::Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_fabprobe"))
            .args(["snapshot", "-o"])
            .arg(out)
            .output()
            .unwrap()
    };
    let o = run(&tgz);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("the file exists; --force replaces it"), "{err}");
    assert_eq!(std::fs::read(&tgz).unwrap(), b"keep me");
    let o = run(dir.path());
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("the directory is not empty; give a new or empty directory"), "{err}");
    assert_eq!(err.matches("not empty").count(), 1, "{err}");
}
