//! Every text report fits the terminal: at `COLUMNS=80` every subcommand's report for every
//! fixture host (check, topo and `topo --nccl` on a terminal, gids, links, links and qos
//! against a baseline, gdr, qos, nccl-env), `sweep` over the fixtures' check reports (table
//! and `--drain`), `nccl-log` over the whole corpus, and a local `ring` run. Sweep, nccl-log
//! and ring are also read at 60 columns, as tests/wrap.rs reads check.
//!
//! A line may run past the width only when it is one unbreakable thing; the rule it meets:
//! * `token`: one word (a backticked command, a path, a JSON value), alone on its line or
//!   after its label (`evidence: holders=[...]`): breaking it would break the paste;
//! * `command`: a remedy that is one bare command (`fix: echo 1 > /sys/...; echo 1 > ...`)
//!   or a Slurm drain line (`scontrol update ... Reason="..."`): pasted whole into a shell;
//! * `nccl-tests` (ring only): the results table and the `#  Rank  0 Pid ...` device lines
//!   in nccl-tests' own columns, which scripts that parse nccl-tests output read (gap: no
//!   narrow form on a terminal yet).

use std::path::{Path, PathBuf};
use std::process::Command;

// The tools a bare-command remedy starts with, as the renderer decides.
use fabprobe::render::text::COMMAND_WORDS as TOOLS;
// The words of a line, a backticked span one word, as the wrapper sees them.
use fabprobe::render::text::words;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const BIN: &str = env!("CARGO_BIN_EXE_fabprobe");

/// stdout and stderr of fabprobe at `columns` (piped: the width comes from COLUMNS).
fn run(args: &[&str], columns: usize, stdin: Option<&Path>) -> String {
    let mut c = Command::new(BIN);
    c.args(args)
        .current_dir(ROOT)
        .env("COLUMNS", columns.to_string())
        .env("NO_COLOR", "1");
    if let Some(f) = stdin {
        c.stdin(std::fs::File::open(f).unwrap());
    }
    let o = c.output().unwrap();
    assert!(
        matches!(o.status.code(), Some(0 | 1)),
        "{args:?}: {:?} {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap() + &String::from_utf8(o.stderr).unwrap()
}

/// fabprobe on a terminal (`script` gives it a pty), `columns` wide: topo splits its matrix
/// only there (piped, its bytes stay nvidia-smi's, which users diff against).
fn run_on_tty(args: &[&str], columns: usize) -> String {
    let cmd = std::iter::once(BIN)
        .chain(args.iter().copied())
        .map(|a| format!("'{a}'"))
        .collect::<Vec<_>>()
        .join(" ");
    let o = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .current_dir(ROOT)
        .env("COLUMNS", columns.to_string())
        .env("NO_COLOR", "1")
        .output()
        .expect("script(1) from util-linux runs fabprobe on a pty");
    assert!(matches!(o.status.code(), Some(0 | 1)), "{args:?}: {o:?}");
    String::from_utf8(o.stdout).unwrap().replace('\r', "")
}

/// Why a line over the width may be (None: it may not).
fn exempt(l: &str, ring: bool) -> Option<&'static str> {
    let w = words(l);
    let label = |x: &str| x.ends_with(':');
    if w.len() == 1 || (w.len() == 2 && label(w[0])) {
        return Some("token");
    }
    let remedy = matches!(w[0], "fix:" | "next:");
    let tool = |x: &str| TOOLS.contains(&x);
    if (remedy && tool(w[1]) && !l.contains('`') && !l.contains(", ")) || w[0] == "scontrol" {
        return Some("command");
    }
    let numeric = |x: &str| x.parse::<f64>().is_ok();
    let nccl_tests_head = ["size", "(B)", "out-of-place", "Rank"].contains(&w.get(1).copied().unwrap_or(""));
    if ring && ((w[0] == "#" && nccl_tests_head) || (numeric(w[0]) && w.len() > 8)) {
        return Some("nccl-tests");
    }
    None
}

/// The lines of `out` over `width` that no rule allows, each with what produced it.
fn too_wide(what: &str, out: &str, width: usize, ring: bool) -> Vec<String> {
    out.lines()
        .filter(|l| l.chars().count() > width && exempt(l, ring).is_none())
        .map(|l| format!("{what}: {} columns: {l}", l.chars().count()))
        .collect()
}

fn fixtures() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(Path::new(ROOT).join("fixtures"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("sys").is_dir())
        .map(|p| format!("fixtures/{}", p.file_name().unwrap().to_str().unwrap()))
        .collect();
    v.sort();
    assert!(v.len() >= 15, "{v:?}");
    v
}

/// Every fixture's `check --format json` report in one directory, for `sweep`.
fn reports(only: Option<&[&str]>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for f in fixtures() {
        let name = f.trim_start_matches("fixtures/");
        if only.is_some_and(|o| !o.contains(&name)) {
            continue;
        }
        let o = Command::new(BIN)
            .args(["--root", &f, "--format", "json", "check"])
            .current_dir(ROOT)
            .output()
            .unwrap();
        std::fs::write(dir.path().join(format!("{name}.json")), o.stdout).unwrap();
    }
    dir
}

fn corpus() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(Path::new(ROOT).join("tests/data/nccl-logs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    v.sort();
    assert!(v.len() >= 20, "{v:?}");
    v
}

fn assert_none(bad: Vec<String>) {
    assert!(
        bad.is_empty(),
        "{} lines over the width:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// Every subcommand's text report for every fixture host fits 80 columns.
#[test]
fn every_fixture_report_fits_80_columns() {
    let mut bad = Vec::new();
    for f in fixtures() {
        for cmd in ["check", "gids", "links", "gdr", "qos", "nccl-env"] {
            let out = run(&["--root", &f, cmd], 80, None);
            bad.extend(too_wide(&format!("{f} {cmd}"), &out, 80, false));
        }
        for topo in [&["topo"][..], &["topo", "--nccl"]] {
            let args: Vec<&str> = ["--root", f.as_str()]
                .into_iter()
                .chain(topo.iter().copied())
                .collect();
            let out = run_on_tty(&args, 80);
            bad.extend(too_wide(&format!("{f} {topo:?} on a terminal"), &out, 80, false));
        }
    }
    for (cmd, later, earlier) in [
        ("links", "ib-degraded-later", "ib-degraded"),
        ("qos", "roce-pause-storm-later", "roce-pause-storm"),
    ] {
        let (l, e) = (format!("fixtures/{later}"), format!("fixtures/{earlier}"));
        let out = run(&["--root", &l, cmd, "--baseline", &e], 80, None);
        bad.extend(too_wide(&format!("{later} {cmd} --baseline"), &out, 80, false));
    }
    assert_none(bad);
}

/// The checks above look at what they should: piped without a terminal, topo keeps
/// nvidia-smi's long lines (so `run_on_tty` is what fits them), and a report whose lines
/// are long is long without COLUMNS (so the fitting above did something).
#[test]
fn the_width_checks_see_long_lines() {
    let piped = run(&["--root", "fixtures/h100-sxm-8gpu", "topo"], 80, None);
    assert!(!too_wide("topo piped", &piped, 80, false).is_empty(), "{piped}");
    let o = Command::new(BIN)
        .args(["--root", "fixtures/h100-gdr-broken", "gdr"])
        .current_dir(ROOT)
        .env_remove("COLUMNS")
        .output()
        .unwrap();
    let whole = String::from_utf8(o.stdout).unwrap();
    assert!(
        !too_wide("gdr unwrapped", &whole, 80, false).is_empty(),
        "{whole}"
    );
    assert!(exempt("       fix: echo 1 > /sys/x; echo 1 > /sys/y", false).is_some());
    assert!(exempt("       next: fabprobe gdr (ACS, IOMMU); fabprobe topo", false).is_none());
    assert!(
        exempt(
            "     1048576   262144  float  sum  -1  2299.20  0.46  0.46  0  549.18",
            false
        )
        .is_none()
    );
}

/// `sweep` over the fixtures' reports at 80 and 60 columns: the table and the drain lines.
#[test]
fn sweep_fits_80_and_60_columns() {
    let dir = reports(None);
    let d = dir.path().to_str().unwrap();
    for width in [80, 60] {
        let mut bad = Vec::new();
        for args in [&["sweep", d][..], &["sweep", d, "--drain"]] {
            let out = run(args, width, None);
            bad.extend(too_wide(&format!("{args:?} at {width}"), &out, width, false));
        }
        assert_none(bad);
    }
    // The drain lines stay a script: every wrapped comment line is a comment.
    let out = run(&["sweep", d, "--drain"], 60, None);
    assert!(
        out.lines()
            .all(|l| l.starts_with("scontrol ") || l.starts_with('#')),
        "{out}"
    );
    assert!(out.lines().any(|l| l.starts_with("#   ")), "{out}");
}

/// The sweep table of the fleet without duplicate hosts, as a reader at 80 and 60 columns
/// sees it.
#[test]
fn sweep_table_at_80_and_60_columns() {
    let dir = reports(Some(&[
        "cloud-vm-flat",
        "container-sparse-gids",
        "h100-gdr-broken",
        "h100-penny",
        "ib-degraded",
        "pcie-2socket",
        "roce-bond-host",
        "roce-qos-mismatch",
    ]));
    let d = dir.path().to_str().unwrap();
    for width in [80, 60] {
        let out = run(&["sweep", d], width, None).replace(d, "[DIR]");
        insta::assert_snapshot!(format!("sweep_fixtures_columns_{width}"), out);
    }
}

/// `nccl-log` on every log of the corpus, and on the whole directory, at 80 and 60 columns.
#[test]
fn nccl_log_fits_80_and_60_columns() {
    for width in [80, 60] {
        let mut bad = Vec::new();
        for log in corpus() {
            let out = run(&["nccl-log", log.to_str().unwrap()], width, None);
            bad.extend(too_wide(
                &format!("{} at {width}", log.display()),
                &out,
                width,
                false,
            ));
        }
        let out = run(&["nccl-log", "tests/data/nccl-logs"], width, None);
        bad.extend(too_wide(&format!("the corpus at {width}"), &out, width, false));
        assert_none(bad);
    }
}

/// One triaged log as a reader at 80 and 60 columns sees it: the next steps that are prose
/// wrap, quoted log lines wrap under their place.
#[test]
fn nccl_log_at_80_and_60_columns() {
    for width in [80, 60] {
        let out = run(
            &["nccl-log", "tests/data/nccl-logs/nccl-1814-roce-status12.log"],
            width,
            None,
        );
        insta::assert_snapshot!(format!("nccl_log_roce_status12_columns_{width}"), out);
    }
}

/// A local ring over TCP at 80 and 60 columns: verdict, header, per-link table and scan fit;
/// the nccl-tests results table keeps nccl-tests' columns.
#[test]
fn ring_fits_80_and_60_columns() {
    for width in [80, 60] {
        let out = run(
            &[
                "ring",
                "--local",
                "3",
                "--transport",
                "tcp",
                "-b",
                "64K",
                "-e",
                "128K",
                "-n",
                "5",
            ],
            width,
            None,
        );
        assert!(out.contains("Per-link bandwidth"), "{out}");
        assert_none(too_wide(&format!("ring at {width}"), &out, width, true));
    }
}
