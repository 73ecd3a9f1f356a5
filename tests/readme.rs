//! The README's examples run as written: its `sh` block that writes `reports/` and every
//! `console` block's `$ fabprobe ...` commands, with `fabprobe` on PATH as `./quickstart`
//! leaves it, at 80 columns. Each printed line of a block (`...` stands for lines left out)
//! must come out of the command, in order: a README whose output went stale fails here.

use std::path::Path;
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const BIN: &str = env!("CARGO_BIN_EXE_fabprobe");

/// The fenced blocks of the README: (language, lines).
fn blocks() -> Vec<(String, Vec<String>)> {
    let text = std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap();
    let mut out = Vec::new();
    let mut cur: Option<(String, Vec<String>)> = None;
    for l in text.lines() {
        match (&mut cur, l.strip_prefix("```")) {
            (None, Some(lang)) => cur = Some((lang.trim().to_string(), Vec::new())),
            (Some(_), Some(_)) => out.push(cur.take().unwrap()),
            (Some((_, lines)), None) => lines.push(l.to_string()),
            (None, None) => {}
        }
    }
    out
}

/// A directory like the repository's root for the examples (fixtures, tests, checks), with
/// `fabprobe` first on PATH.
fn workdir() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    for d in ["fixtures", "tests", "checks"] {
        std::os::unix::fs::symlink(Path::new(ROOT).join(d), dir.path().join(d)).unwrap();
    }
    let bin_dir = Path::new(BIN).parent().unwrap().display().to_string();
    let path = format!("{bin_dir}:{}", std::env::var("PATH").unwrap_or_default());
    (dir, path)
}

fn bash(script: &str, dir: &Path, path: &str) -> (Option<i32>, String) {
    let o = Command::new("bash")
        .args(["-c", script])
        .current_dir(dir)
        .env("PATH", path)
        .env("COLUMNS", "80")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    (o.status.code(), text)
}

#[test]
fn readme_console_blocks_run_as_written() {
    let (dir, path) = workdir();
    let blocks = blocks();
    // The block that writes the sweep example's reports runs first, as the reader would.
    let setup = blocks
        .iter()
        .find(|(lang, lines)| lang == "sh" && lines.iter().any(|l| l.starts_with("mkdir -p reports")))
        .expect("the README writes reports/ for its sweep example");
    let (code, out) = bash(&setup.1.join("\n"), dir.path(), &path);
    assert!(matches!(code, Some(0 | 1)), "setup: {code:?}\n{out}");
    let mut ran = 0;
    for (lang, lines) in blocks.iter().filter(|(l, _)| l == "console") {
        let mut i = 0;
        while i < lines.len() {
            let Some(cmd) = lines[i].strip_prefix("$ ") else {
                panic!("{lang} block: output before a command: {:?}", lines[i]);
            };
            let mut want = Vec::new();
            i += 1;
            while i < lines.len() && !lines[i].starts_with("$ ") {
                want.push(lines[i].as_str());
                i += 1;
            }
            let (code, got) = bash(cmd, dir.path(), &path);
            assert!(matches!(code, Some(0..=3)), "`{cmd}`: {code:?}\n{got}");
            let got: Vec<&str> = got.lines().map(str::trim_end).collect();
            let mut at = 0;
            for w in want.iter().filter(|w| w.trim() != "...") {
                // A line cut short with `...` matches the line it starts.
                let same = |g: &&str| match w.split_once("...") {
                    Some((head, _)) => g.starts_with(head),
                    None => *g == w.trim_end(),
                };
                match got[at..].iter().position(same) {
                    Some(n) => at += n + 1,
                    None => panic!(
                        "`{cmd}`: the README's line\n{w}\nis not in the output (after line {at}):\n{}",
                        got.join("\n")
                    ),
                }
            }
            ran += 1;
        }
    }
    assert!(ran >= 4, "only {ran} console commands");
}

/// The README's exit-status table is the one the man pages and --help print.
#[test]
fn readme_exit_status_is_the_shared_table() {
    let text = std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap();
    for (code, what) in fabprobe::cli::exit_statuses("fabprobe") {
        let row = format!("| {code} | {} |", what.replace("nccl-log", "`nccl-log`"));
        assert!(text.contains(&row), "README lacks {row}");
    }
    let help = Command::new(BIN).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for (code, what) in fabprobe::cli::exit_statuses("fabprobe") {
        let row = format!("  {code}  {}", &what[..20]);
        assert!(help.contains(&row), "--help lacks {row:?}:\n{help}");
    }
}

/// Each status of the table is what the commands return: 0 and 1 on a healthy and a broken
/// fixture, 2 for a missing policy (its OS error said once) and for an empty directory given
/// to sweep or nccl-log alike, 3 for a log with no NCCL line.
#[test]
fn commands_return_the_documented_statuses() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let blank = dir.path().join("blank.log");
    std::fs::write(&blank, "hello\n").unwrap();
    let (e, b) = (empty.to_str().unwrap(), blank.to_str().unwrap());
    let cases: &[(&[&str], i32)] = &[
        (
            &[
                "--root",
                "fixtures/h100-sxm-8gpu",
                "check",
                "--policy",
                "dgx-h100",
            ],
            0,
        ),
        (
            &[
                "--root",
                "fixtures/h100-sxm-8gpu-bad",
                "check",
                "--policy",
                "dgx-h100",
            ],
            1,
        ),
        (&["check", "--policy", "/nonexistent/policy.toml"], 2),
        (&["sweep", e], 2),
        (&["nccl-log", e], 2),
        (&["nccl-log", b], 3),
    ];
    for (args, want) in cases {
        let o = Command::new(BIN).args(*args).current_dir(ROOT).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(*want), "{args:?}: {err}");
        if *want == 2 {
            assert!(err.contains("fabprobe: error:"), "{args:?}: {err}");
        }
        assert!(
            err.matches("No such file or directory").count() <= 1,
            "{args:?}: {err}"
        );
    }
}
