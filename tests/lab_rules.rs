//! The rules that keep a green CI run honest about the labs, checked end to end:
//! * a lab that cannot run fails its test under `FABPROBE_LAB=required` and only prints a
//!   loud SKIPPED line without it (this binary runs its own `Lab::new` as an unprivileged
//!   user, as a child process, both ways);
//! * `.ci/run` sets `FABPROBE_LAB=required`;
//! * no test skips on its own terms: every SKIPPED goes through `lab_unavailable`;
//! * no lab test waits with a fixed sleep where it can poll (polling intervals are short;
//!   a sleep of half a second or more is a guess at readiness).

mod lab;

use std::path::Path;
use std::process::Command;

const CHILD: &str = "FABPROBE_LAB_RULES_CHILD";

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Run only as the child of `a_missing_lab_fails_under_required_and_is_loud_without` (hence
/// ignored): asks for the network lab, as a user who cannot have it.
#[test]
#[ignore = "run by a_missing_lab_fails_under_required_and_is_loud_without as its child"]
fn child_asks_for_the_lab() {
    assert!(std::env::var_os(CHILD).is_some(), "run by its parent test only");
    assert!(!is_root(), "the child must run unprivileged");
    let got = lab::Lab::new("lab_rules_child", lab::LabOpts { nodes: 2, rate: None });
    assert!(got.is_none(), "an unprivileged user got a lab");
    println!("CHILD RETURNED");
}

#[test]
fn a_missing_lab_fails_under_required_and_is_loud_without() {
    if !is_root() {
        lab::lab_unavailable(
            "a_missing_lab_fails_under_required",
            "needs root to run itself as an unprivileged user",
        );
        return;
    }
    let me = std::env::current_exe().unwrap();
    let run = |lab_env: Option<&str>| {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&me)
            .args([
                "--exact",
                "child_asks_for_the_lab",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .env_remove(lab::LAB_ENV);
        if let Some(v) = lab_env {
            c.env(lab::LAB_ENV, v);
        }
        let o = c.output().expect("run setpriv (util-linux)");
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
        )
    };
    let (ok, out) = run(Some("required"));
    assert!(!ok, "under FABPROBE_LAB=required a missing lab passed:\n{out}");
    assert!(
        out.contains("lab test lab_rules_child cannot run: needs root")
            && out.contains("FABPROBE_LAB=required, so this is a failure"),
        "{out}"
    );
    assert!(!out.contains("CHILD RETURNED"), "{out}");
    for unset in [None, Some(""), Some("yes")] {
        let (ok, out) = run(unset);
        assert!(ok, "FABPROBE_LAB={unset:?}: a missing lab failed:\n{out}");
        assert!(
            out.contains("SKIPPED lab test lab_rules_child: needs root") && out.contains("CHILD RETURNED"),
            "FABPROBE_LAB={unset:?}:\n{out}"
        );
    }
}

#[test]
fn ci_requires_the_labs() {
    let ci = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/run")).unwrap();
    assert!(
        ci.lines().any(|l| l.trim() == "export FABPROBE_LAB=required"),
        ".ci/run must export FABPROBE_LAB=required:\n{ci}"
    );
}

/// Every `.rs` file under tests/, with its path relative to the crate.
fn test_sources() -> Vec<(String, String)> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<(String, String)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, root, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(root).unwrap().display().to_string();
                out.push((rel, std::fs::read_to_string(&p).unwrap()));
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut v = Vec::new();
    walk(&root.join("tests"), root, &mut v);
    v.sort();
    assert!(
        v.iter().any(|(p, _)| p == "tests/lab/mod.rs"),
        "{:?}",
        v.iter().map(|x| &x.0).collect::<Vec<_>>()
    );
    v
}

/// Lines of code (not comments) of a source.
fn code_lines(src: &str) -> impl Iterator<Item = (usize, &str)> {
    src.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
        .map(|(i, l)| (i + 1, l))
}

#[test]
fn every_skip_goes_through_lab_unavailable() {
    let mut bad = Vec::new();
    for (path, src) in test_sources() {
        if path == "tests/common/mod.rs" {
            continue;
        }
        for (n, l) in code_lines(&src) {
            let prints = ["loud(", "eprintln!", "println!", "eprint!", "writeln!"]
                .iter()
                .any(|m| l.contains(m));
            if l.contains("SKIPPED") && prints {
                bad.push(format!("{path}:{n}: {}", l.trim()));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "skips that do not call tests/common::lab_unavailable (they would pass under FABPROBE_LAB=required):\n{}",
        bad.join("\n")
    );
}

/// The milliseconds of a `sleep(Duration::from_millis(N))` or `from_secs(N)` on this line.
fn sleep_ms(line: &str) -> Option<u64> {
    let i = line.find("sleep(Duration::from_")?;
    let rest = &line[i + "sleep(Duration::from_".len()..];
    let (unit, rest) = rest.split_once('(')?;
    let n: f64 = rest.split(')').next()?.trim().replace('_', "").parse().ok()?;
    Some(match unit {
        "millis" => n as u64,
        "secs" => (n * 1000.0) as u64,
        "secs_f64" => (n * 1000.0) as u64,
        _ => return None,
    })
}

#[test]
fn sleep_detection() {
    assert_eq!(
        sleep_ms("std::thread::sleep(Duration::from_millis(1500));"),
        Some(1500)
    );
    assert_eq!(sleep_ms("thread::sleep(Duration::from_secs(2))"), Some(2000));
    assert_eq!(sleep_ms("thread::sleep(Duration::from_millis(50));"), Some(50));
    assert_eq!(sleep_ms("let x = 1;"), None);
}

#[test]
fn lab_tests_poll_instead_of_sleeping() {
    let mut bad = Vec::new();
    for (path, src) in test_sources() {
        // This file only names sleeps, in its own checks.
        if !path.starts_with("tests/lab") || path == "tests/lab_rules.rs" {
            continue;
        }
        for (n, l) in code_lines(&src) {
            if sleep_ms(l).is_some_and(|ms| ms >= 500) {
                bad.push(format!("{path}:{n}: {}", l.trim()));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "fixed sleeps in lab tests (poll for what the test waits for: tests/lab/mod.rs has \
         wait_listening, wait_data_flowing, wait_read_from, wait_connected_to):\n{}",
        bad.join("\n")
    );
}
