//! Every text report fits the terminal: at `COLUMNS=80` every subcommand's report for every
//! fixture host (check, topo and `topo --nccl` on a terminal, gids, links, links and qos
//! against a baseline, gdr, qos, nccl-env), `sweep` over the fixtures' check reports (table
//! and `--drain`), `nccl-log` over the whole corpus, and a local `ring` run on a terminal.
//! Sweep, nccl-log and ring are also read at 60 columns, as tests/wrap.rs reads check. Piped,
//! ring keeps nccl-tests' columns whatever the width (scripts parse them): checked apart.
//! Fitting breaks no cell a reader reads as one (a GID, a port rate, a GDR matrix cell).
//!
//! A line may run past the width only when it is one unbreakable thing; the rule it meets:
//! * `token`: one word (a backticked command, a path, a JSON value), alone on its line or
//!   after its label (`evidence: holders=[...]`): breaking it would break the paste;
//! * `command`: a remedy that is one bare command (`fix: echo 1 > /sys/...; echo 1 > ...`)
//!   or a Slurm drain line (`scontrol update ... Reason="..."`): pasted whole into a shell.

mod common;

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
        matches!(o.status.code(), Some(0 | 1 | 3)),
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
    assert!(matches!(o.status.code(), Some(0 | 1 | 3)), "{args:?}: {o:?}");
    String::from_utf8(o.stdout).unwrap().replace('\r', "")
}

/// Why a line over the width may be (None: it may not).
fn exempt(l: &str) -> Option<&'static str> {
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
    None
}

/// The lines of `out` over `width` that no rule allows, each with what produced it.
fn too_wide(what: &str, out: &str, width: usize) -> Vec<String> {
    out.lines()
        .filter(|l| l.chars().count() > width && exempt(l).is_none())
        .map(|l| format!("{what}: {} columns: {l}", l.chars().count()))
        .collect()
}

fn fixtures() -> Vec<String> {
    let v: Vec<String> = common::fixture_names().iter().map(|f| format!("fixtures/{f}")).collect();
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
        for cmd in common::host_commands().into_iter().filter(|c| *c != "topo") {
            let out = run(&["--root", &f, cmd], 80, None);
            bad.extend(too_wide(&format!("{f} {cmd}"), &out, 80));
        }
        for topo in [&["topo"][..], &["topo", "--nccl"]] {
            let args: Vec<&str> = ["--root", f.as_str()]
                .into_iter()
                .chain(topo.iter().copied())
                .collect();
            let out = run_on_tty(&args, 80);
            bad.extend(too_wide(&format!("{f} {topo:?} on a terminal"), &out, 80));
        }
    }
    for (cmd, later, earlier) in [
        ("links", "ib-degraded-later", "ib-degraded"),
        ("qos", "roce-pause-storm-later", "roce-pause-storm"),
    ] {
        let (l, e) = (format!("fixtures/{later}"), format!("fixtures/{earlier}"));
        let out = run(&["--root", &l, cmd, "--baseline", &e], 80, None);
        bad.extend(too_wide(&format!("{later} {cmd} --baseline"), &out, 80));
    }
    assert_none(bad);
}

/// The checks above look at what they should: piped without a terminal, topo keeps
/// nvidia-smi's long lines (so `run_on_tty` is what fits them), and a report whose lines
/// are long is long without COLUMNS (so the fitting above did something).
#[test]
fn the_width_checks_see_long_lines() {
    let piped = run(&["--root", "fixtures/h100-sxm-8gpu", "topo"], 80, None);
    assert!(!too_wide("topo piped", &piped, 80).is_empty(), "{piped}");
    let o = Command::new(BIN)
        .args(["--root", "fixtures/h100-gdr-broken", "gdr"])
        .current_dir(ROOT)
        .env_remove("COLUMNS")
        .output()
        .unwrap();
    let whole = String::from_utf8(o.stdout).unwrap();
    assert!(!too_wide("gdr unwrapped", &whole, 80).is_empty(), "{whole}");
    assert!(exempt("       fix: echo 1 > /sys/x; echo 1 > /sys/y").is_some());
    assert!(exempt("       next: fabprobe gdr (ACS, IOMMU); fabprobe topo").is_none());
    assert!(exempt("     1048576   262144  float  sum  -1  2299.20  0.46  0.46  0  549.18").is_none());
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
            bad.extend(too_wide(&format!("{args:?} at {width}"), &out, width));
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
    // Two more nodes of cloud-vm-flat's kind, one on another kernel: an outlier within its
    // kind (nodes of other kinds are never compared with it).
    let vm: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("cloud-vm-flat.json")).unwrap()).unwrap();
    for (name, kernel) in [("cloud-vm-b", None), ("cloud-vm-c", Some("5.15.0-97-generic"))] {
        let mut v = vm.clone();
        v["host"]["hostname"] = name.into();
        if let Some(k) = kernel {
            v["data"]["fingerprint"]["kernel"] = k.into();
        }
        std::fs::write(dir.path().join(format!("{name}.json")), v.to_string()).unwrap();
    }
    let d = dir.path().to_str().unwrap();
    for width in [80, 60] {
        let out = run(&["sweep", d], width, None).replace(d, "[DIR]");
        // A cause's example gets the width: on its own line four columns in, not in a
        // ribbon at column 51; an outlier's value follows its node and key.
        let eg: Vec<&str> = out
            .lines()
            .filter(|l| l.trim_start().starts_with("e.g. "))
            .collect();
        assert!(
            !eg.is_empty() && eg.iter().all(|l| l.starts_with("    e.g. ")),
            "{out}"
        );
        if width < 80 {
            let peers = out
                .lines()
                .skip_while(|l| *l != "DIFFERENT FROM THEIR PEERS")
                .skip(1)
                .take_while(|l| !l.is_empty());
            assert!(peers.clone().count() > 0, "{out}");
            assert!(peers.clone().all(|l| !l.starts_with("     ")), "{out}");
        }
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
            bad.extend(too_wide(&format!("{} at {width}", log.display()), &out, width));
        }
        let out = run(&["nccl-log", "tests/data/nccl-logs"], width, None);
        bad.extend(too_wide(&format!("the corpus at {width}"), &out, width));
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

const RING: &[&str] = &[
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
];

/// A local ring on a terminal `columns` wide (stderr, the progress line, left out).
fn ring_on_tty(columns: usize) -> String {
    let cmd = std::iter::once(BIN)
        .chain(RING.iter().copied())
        .map(|a| format!("'{a}'"))
        .collect::<Vec<_>>()
        .join(" ");
    let o = Command::new("script")
        .args(["-qec", &format!("{cmd} 2>/dev/null"), "/dev/null"])
        .current_dir(ROOT)
        .env("COLUMNS", columns.to_string())
        .env("NO_COLOR", "1")
        .output()
        .expect("script(1) from util-linux runs fabprobe on a pty");
    assert!(matches!(o.status.code(), Some(0 | 1 | 3)), "{o:?}");
    String::from_utf8(o.stdout).unwrap().replace('\r', "")
}

/// A local ring over TCP on a terminal 80 and 60 columns wide: verdict, header, device
/// lines, the results in the compact form (every figure, with units), the per-link table
/// and the scan all fit; nothing is exempt.
#[test]
fn ring_fits_80_and_60_columns() {
    for width in [80, 60] {
        let out = ring_on_tty(width);
        assert!(out.contains("Per-link bandwidth"), "{out}");
        assert!(out.contains("# type float, redop sum, root -1"), "{out}");
        assert!(out.contains("(GB/s)") && out.contains("#wrong"), "{out}");
        // Both sizes, each with its in-place line below 80 columns.
        for size in ["65536", "131072"] {
            assert!(
                out.lines().any(|l| l.split_whitespace().next() == Some(size)),
                "{size}: {out}"
            );
        }
        let in_place = out.lines().filter(|l| l.split_whitespace().next() == Some("in"));
        assert_eq!(in_place.count(), if width < 80 { 2 } else { 0 }, "{out}");
        assert_none(too_wide(&format!("ring at {width}"), &out, width));
    }
}

/// Piped, whatever COLUMNS says, ring prints nccl-tests' `all_reduce_perf` layout byte for
/// byte: the column headings, every row in its columns (118 wide), `#  Rank N Pid` device
/// lines padded as nccl-tests pads them, and its header lines unwrapped.
#[test]
fn ring_piped_keeps_nccl_tests_columns() {
    let headings = [
        "#                                                              out-of-place                       in-place",
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)",
    ];
    for width in [60, 80] {
        let out = run(RING, width, None);
        let lines: Vec<&str> = out.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.contains("out-of-place"))
            .unwrap_or_else(|| panic!("{out}"));
        assert_eq!(lines[at..at + 3], headings, "{out}");
        let rows: Vec<&str> = lines[at + 3..]
            .iter()
            .take_while(|l| !l.starts_with('#'))
            .copied()
            .collect();
        assert_eq!(rows.len(), 2, "{out}");
        for row in rows {
            let f: Vec<&str> = row.split_whitespace().collect();
            assert_eq!(f.len(), 13, "{row}");
            let mut want = format!(
                "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}",
                f[0], f[1], f[2], f[3], f[4]
            );
            for g in f[5..].chunks(4) {
                want.push_str(&format!("  {:>7}  {:>6}  {:>6}  {:>6}", g[0], g[1], g[2], g[3]));
            }
            assert_eq!(row, want);
            assert_eq!(&f[2..5], ["float", "sum", "-1"], "{row}");
        }
        let devices: Vec<&str> = lines
            .iter()
            .filter(|l| l.starts_with("#  Rank"))
            .copied()
            .collect();
        assert_eq!(devices.len(), 3, "{out}");
        for d in devices {
            let f: Vec<&str> = d.split_whitespace().collect();
            let want = format!(
                "#  Rank {:>2} Pid {:>6} on {:>10} {}",
                f[2],
                f[4],
                f[6],
                f[7..].join(" ")
            );
            assert_eq!(d, want);
        }
        let n = lines.iter().find(|l| l.starts_with("# nRanks")).unwrap();
        assert!(n.ends_with("validation: 1"), "{n}");
        assert!(!out.contains("# type float"), "{out}");
    }
}

/// A fixture's `--format json` data for `cmd`.
fn json_data(fixture: &str, cmd: &str) -> serde_json::Value {
    let o = Command::new(BIN)
        .args(["--root", fixture, "--format", "json", cmd])
        .current_dir(ROOT)
        .output()
        .unwrap();
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{fixture} {cmd}: {e}"));
    v["data"].clone()
}

/// Fitting never breaks a value a reader copies or reads as one: at 80 and 60 columns every
/// GID stays one word in `gids` and `nccl-env` (an IPv4-mapped one may read `::ffff:a.b.c.d`),
/// every port's rate (`400 Gb/sec (4X NDR)`) stays on one line in `links`, and every cell of
/// `gdr`'s GPU x NIC matrix stays whole.
#[test]
fn cells_stay_whole_at_80_and_60_columns() {
    let word = |out: &str, w: &str| out.lines().any(|l| l.split_whitespace().any(|x| x == w));
    let mut bad = Vec::new();
    for f in fixtures() {
        let gids = json_data(&f, "gids");
        let links = json_data(&f, "links");
        let env = json_data(&f, "nccl-env");
        for width in [80, 60] {
            let out = run(&["--root", &f, "gids"], width, None);
            for e in gids["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|p| p["entries"].as_array().into_iter().flatten())
            {
                let gid = e["gid"].as_str().unwrap();
                let mapped = e["ipv4"].as_str().map(|v| format!("::ffff:{v}"));
                if !word(&out, gid) && !mapped.is_some_and(|m| word(&out, &m)) {
                    bad.push(format!("{f} gids at {width}: {gid} broken"));
                }
            }
            let out = run(&["--root", &f, "links"], width, None);
            for p in links["devices"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|d| d["ports"].as_array().into_iter().flatten())
            {
                if let Some(rate) = p["rate"]["raw"].as_str()
                    && !out.lines().any(|l| l.contains(rate))
                {
                    bad.push(format!("{f} links at {width}: {rate:?} broken"));
                }
            }
            // The GPU x NIC matrix: every word at this width is one of the wide matrix's
            // (a broken cell, `off-pe` `er*!`, is not).
            let matrix = |out: &str| -> Vec<String> {
                // From the NIC column labels (past the legend) to the device table.
                let label = |l: &str| {
                    let w = l.split_whitespace().next().unwrap_or("");
                    w.starts_with("NIC") && w[3..].starts_with(|c: char| c.is_ascii_digit())
                };
                out.lines()
                    .skip_while(|l| !l.starts_with("GPU x NIC"))
                    .skip_while(|l| !label(l))
                    .take_while(|l| !l.starts_with("DEVICE"))
                    .flat_map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>())
                    .collect()
            };
            let wide = matrix(&run(&["--root", &f, "gdr"], 1000, None));
            for w in matrix(&run(&["--root", &f, "gdr"], width, None)) {
                if !wide.contains(&w) {
                    bad.push(format!("{f} gdr at {width}: {w:?} is part of a cell"));
                }
            }
            let out = run(&["--root", &f, "nccl-env"], width, None);
            for p in env["ib"]["ports"].as_array().into_iter().flatten() {
                if let (Some(true), Some(gid)) = (p["used"].as_bool(), p["gid"].as_str())
                    && !word(&out, gid)
                {
                    bad.push(format!("{f} nccl-env at {width}: {gid} broken"));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
