//! A finding's fix or a verdict's next step that says `fabprobe <sub> [--flag]` must name a
//! subcommand that exists, and flags it takes. Subcommands and flags are read from the clap
//! definition, so the test keeps working as subcommands land (a remedy may name
//! `fabprobe qos --ifname` once `qos` takes it, not before).

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_fabprobe");

fn subcommands() -> BTreeSet<String> {
    fabprobe::cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect()
}

/// Every command line `fabprobe <sub> [--flag ...]` in `text`: the subcommand word and the
/// long flags that follow it up to the end of the command (a backtick, a bracket, a comma, a
/// semicolon, a line end). `fabprobe links (tx errors)` -> (`links`, []).
fn commands_after_fabprobe(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("fabprobe") {
        let after = &rest[i + "fabprobe".len()..];
        rest = after;
        let trimmed = after.trim_start_matches([' ', '\t', '\n', '\\']);
        if trimmed.len() == after.len() {
            continue; // `fabprobe.links`, `fabprobe_...`: a name, not a command line
        }
        let word: String = trimmed
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
            .collect();
        if word.chars().next().is_some_and(|c| c.is_ascii_lowercase()) {
            let tail = &trimmed[word.len()..];
            let end = tail
                .find(['`', '(', ')', ',', ';', '\n', '"', '|', '>', '&'])
                .unwrap_or(tail.len());
            let flags = tail[..end]
                .split_whitespace()
                .filter(|t| t.starts_with("--") && t.len() > 2)
                .map(|t| t.split('=').next().unwrap().to_string())
                .collect();
            out.push((word, flags));
        }
    }
    out
}

/// Every word that follows `fabprobe ` in `text` (`fabprobe links (tx errors)` -> `links`).
fn named_after_fabprobe(text: &str) -> Vec<String> {
    commands_after_fabprobe(text)
        .into_iter()
        .map(|(w, _)| w)
        .collect()
}

/// The long flags `fabprobe <sub>` accepts (its own and the global ones), from clap.
fn flags_of(sub: &str) -> BTreeSet<String> {
    let top = fabprobe::cli::command();
    let mut v: BTreeSet<String> = top
        .get_arguments()
        .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
        .collect();
    if let Some(c) = top.find_subcommand(sub) {
        v.extend(
            c.get_arguments()
                .filter_map(|a| a.get_long().map(|l| format!("--{l}"))),
        );
    }
    v.insert("--help".into());
    v
}

/// `fabprobe <sub> --flag` where `sub` is a subcommand and `--flag` one it does not take.
fn bad_flags(text: &str) -> Vec<String> {
    let subs = subcommands();
    let mut bad = Vec::new();
    for (w, flags) in commands_after_fabprobe(text) {
        if !subs.contains(&w) {
            continue;
        }
        let known = flags_of(&w);
        for f in flags {
            if !known.contains(&f) {
                bad.push(format!("`fabprobe {w} {f}`"));
            }
        }
    }
    bad
}

#[test]
fn flag_extraction() {
    assert_eq!(
        commands_after_fabprobe(
            "on a: fabprobe links (x), `fabprobe qos --ifname eth1` (PFC), fabprobe ring --scan --scan-time=2, y"
        ),
        [
            ("links".to_string(), vec![]),
            ("qos".to_string(), vec!["--ifname".to_string()]),
            (
                "ring".to_string(),
                vec!["--scan".to_string(), "--scan-time".to_string()]
            ),
        ]
    );
    assert!(bad_flags("`fabprobe qos --ifname eth1`").is_empty());
    // A pipeline ends the first command: `--expect` is sweep's, not check's.
    assert_eq!(
        commands_after_fabprobe("fabprobe check --format json | fabprobe sweep --expect x"),
        [
            ("check".to_string(), vec!["--format".to_string()]),
            ("sweep".to_string(), vec!["--expect".to_string()]),
        ]
    );
    assert_eq!(
        bad_flags("`fabprobe qos --iface eth1`"),
        ["`fabprobe qos --iface`"]
    );
}

#[test]
fn word_extraction() {
    assert_eq!(
        named_after_fabprobe("on a: fabprobe links (x), and fabprobe qos; fabprobe.topo, fabprobe {x}"),
        ["links", "qos"]
    );
    assert_eq!(
        named_after_fabprobe("run `fabprobe \\\n   gen-docs man`"),
        ["gen-docs"]
    );
}

/// The string literals of a Rust source file (comments skipped), escapes left as written.
fn string_literals(src: &str) -> Vec<String> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 2;
            }
            b'\'' => {
                // A char literal ('"', '\'', 'x') is skipped whole; a lifetime is one tick.
                if b.get(i + 1) == Some(&b'\\') {
                    let end = src[i + 2..].find('\'').map_or(b.len(), |e| i + 2 + e);
                    i = end + 1;
                } else if b.get(i + 2) == Some(&b'\'') {
                    i += 3;
                } else {
                    i += 1;
                }
            }
            b'r' if (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
                && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) =>
            {
                let mut j = i + 1;
                let mut hashes = 0;
                while b.get(j) == Some(&b'#') {
                    hashes += 1;
                    j += 1;
                }
                if b.get(j) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close = format!("\"{}", "#".repeat(hashes));
                let start = j + 1;
                let end = src[start..].find(&close).map_or(b.len(), |e| start + e);
                out.push(src[start..end].to_string());
                i = end + close.len();
            }
            b'"' => {
                let start = i + 1;
                let mut j = start;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                out.push(src[start..j.min(b.len())].to_string());
                i = j + 1;
            }
            _ => i += 1,
        }
    }
    out
}

#[test]
fn literal_extraction() {
    let src = r####"
        // "fabprobe commented" out
        let c = '"'; let l: &'a str = "one \" fabprobe two";
        /* "block" */ let r = r#"raw "fabprobe three""#;
    "####;
    assert_eq!(
        string_literals(src),
        ["one \\\" fabprobe two", "raw \"fabprobe three\""]
    );
}


/// Words after "fabprobe " in the source's strings that are prose about the program, not a
/// command line ("fabprobe could not run", "not a fabprobe peer"). A subcommand that does not
/// exist can only pass by being added here, in review.
const PROSE: &[&str] = &[
    "could", "itself", "still", "reads", "rank", "process", "peer", "data", "version", "uses", "is",
    "cannot", "was", "will", "that",
];

/// Every string in src/ that says `fabprobe <word>`: fixes, next steps, hints, help text.
#[test]
fn every_fabprobe_subcommand_named_in_the_source_exists() {
    let subs = subcommands();
    assert!(subs.contains("topo") && subs.contains("ring"), "{subs:?}");
    let mut files = Vec::new();
    common::rust_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
    files.sort();
    let mut bad = Vec::new();
    let mut seen = 0;
    for f in &files {
        let src = std::fs::read_to_string(f).unwrap();
        for lit in string_literals(&src) {
            for w in named_after_fabprobe(&lit) {
                seen += 1;
                if !subs.contains(&w) && !PROSE.contains(&w.as_str()) {
                    bad.push(format!("{}: `fabprobe {w}` in \"{lit}\"", f.display()));
                }
            }
            for b in bad_flags(&lit) {
                bad.push(format!(
                    "{}: {b} is not a flag of that subcommand, in \"{lit}\"",
                    f.display()
                ));
            }
        }
    }
    // The scan found the remedies it is meant to check (links, topo, snapshot, ...).
    assert!(seen >= 10, "only {seen} mentions found: is the scan broken?");
    assert!(bad.is_empty(), "not subcommands ({subs:?}):\n{}", bad.join("\n"));
}

/// The README's and docs/*.md's sample verdict lines (`next: ...`) name real subcommands too.
#[test]
fn every_fabprobe_subcommand_in_the_readme_next_steps_exists() {
    let subs = subcommands();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    for e in std::fs::read_dir(root.join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            readme.push_str(&std::fs::read_to_string(&p).unwrap());
        }
    }
    let next: Vec<&str> = readme
        .lines()
        .filter(|l| l.trim_start().starts_with("next:"))
        .collect();
    assert!(!next.is_empty());
    for l in next {
        for w in named_after_fabprobe(l) {
            assert!(
                subs.contains(&w),
                "README: `fabprobe {w}` is not a subcommand: {l}"
            );
        }
        assert!(bad_flags(l).is_empty(), "README: {:?} in {l}", bad_flags(l));
    }
}

/// Subcommands that do not read one host; every other one is a probe whose findings' fixes
/// are checked on every fixture (a probe that lands later is covered without editing this).
const NOT_PROBES: [&str; 9] = [
    "report",
    "ring",
    "snapshot",
    "sweep",
    "nccl-log",
    "check",
    "gen-docs",
    "completions",
    "help",
];

fn probes() -> Vec<String> {
    let v: Vec<String> = subcommands()
        .into_iter()
        .filter(|n| !NOT_PROBES.contains(&n.as_str()))
        .collect();
    assert!(v.iter().any(|n| n == "links"), "{v:?}");
    v
}

/// Every fixture snapshot (a directory with `sys/`), sorted.
fn fixture_dirs(root: &Path) -> Vec<String> {
    common::fixture_names().iter().map(|f| root.join(f).display().to_string()).collect()
}

fn findings_fixes(args: &[&str]) -> Vec<String> {
    let o = Command::new(BIN).args(args).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {}", String::from_utf8_lossy(&o.stderr)));
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["fix"].as_str().map(str::to_string))
        .collect()
}

/// The fixes the probes really give on every fixture (and on a before/after pair, where the
/// counter findings live) name real subcommands.
#[test]
fn every_fix_given_on_the_fixtures_names_real_subcommands() {
    let subs = subcommands();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let fixtures = fixture_dirs(&root);
    assert!(fixtures.len() >= 10, "{fixtures:?}");
    let mut fixes = Vec::new();
    for f in &fixtures {
        for cmd in probes() {
            fixes.extend(findings_fixes(&["--root", f, "--format", "json", &cmd]));
        }
    }
    let later = root.join("ib-degraded-later").display().to_string();
    let before = root.join("ib-degraded").display().to_string();
    fixes.extend(findings_fixes(&[
        "--root",
        &later,
        "--format",
        "json",
        "links",
        "--baseline",
        &before,
    ]));
    // Enough fixes to mean something, including the counter ones.
    assert!(fixes.len() >= 10, "{fixes:?}");
    assert!(fixes.iter().any(|f| f.contains("PFC")), "{fixes:?}");
    for fix in &fixes {
        for w in named_after_fabprobe(fix) {
            assert!(subs.contains(&w), "`fabprobe {w}` is not a subcommand: {fix}");
        }
        assert!(bad_flags(fix).is_empty(), "{:?} in {fix}", bad_flags(fix));
    }
}

/// Retransmissions on a RoCE port point to `fabprobe qos --ifname <its netdev>`, and that
/// command, run as written on the same host, reports that netdev's PFC and pause counters;
/// on InfiniBand (no PFC) they point along the path instead.
#[test]
fn retransmission_fix_is_a_command_that_answers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let dir = tempfile::tempdir().unwrap();
    let later = dir.path().join("later");
    let st = Command::new("cp")
        .arg("-a")
        .arg(root.join("roce-pause-storm"))
        .arg(&later)
        .status()
        .unwrap();
    assert!(st.success());
    let c = later.join("sys/class/infiniband/mlx5_0/ports/1/hw_counters/local_ack_timeout_err");
    let before: u64 = std::fs::read_to_string(&c).unwrap().trim().parse().unwrap();
    std::fs::write(&c, format!("{}\n", before + 25)).unwrap();
    let base = root.join("roce-pause-storm");
    let o = Command::new(BIN)
        .arg("--root")
        .arg(&later)
        .args(["--format", "json", "links", "--baseline"])
        .arg(&base)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let f = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "links.retransmissions_increasing")
        .unwrap_or_else(|| panic!("{}", v["findings"]))
        .clone();
    assert_eq!(f["evidence"]["delta"], "+25", "{f}");
    let fix = f["fix"].as_str().unwrap();
    let netdev = v["data"]["devices"][0]["ports"][0]["netdev"].as_str().unwrap();
    let cmd = format!("fabprobe qos --ifname {netdev}");
    assert!(fix.contains(&format!("`{cmd}`")), "{fix}");
    // Run it as the fix says, on the same host.
    let args: Vec<&str> = cmd.split_whitespace().skip(1).collect();
    let o = Command::new(BIN)
        .arg("--root")
        .arg(&later)
        .args(["--format", "json"])
        .args(&args)
        .output()
        .unwrap();
    assert!(
        matches!(o.status.code(), Some(0 | 1 | 3)),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let q: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let text = q["data"].to_string();
    assert!(
        text.contains(&format!("\"{netdev}\"")),
        "qos does not report {netdev}: {text}"
    );
    assert!(text.contains("pfc") && text.contains("pause"), "{text}");

    // InfiniBand: no PFC advice.
    let fixes = findings_fixes(&[
        "--root",
        root.join("ib-degraded-later").to_str().unwrap(),
        "--format",
        "json",
        "links",
        "--baseline",
        root.join("ib-degraded").to_str().unwrap(),
    ]);
    let ib: Vec<&String> = fixes
        .iter()
        .filter(|f| f.starts_with("retransmissions on a credit-based link"))
        .collect();
    assert!(!ib.is_empty(), "{fixes:?}");
    assert!(
        ib.iter().all(|f| !f.contains("PFC") && !f.contains("qos")),
        "{ib:?}"
    );
}

/// Every backticked command in every fix the probes and `check` give on the fixtures (and on
/// the before/after pairs) is shell that parses (`bash -n`), starts with a real tool, and
/// carries no placeholder where the finding knows the value (`PID`, `<priority>`, `BDF`).
#[test]
fn every_command_in_a_fix_parses_and_has_no_placeholder() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let fixtures = fixture_dirs(&root);
    let mut fixes = Vec::new();
    for f in &fixtures {
        for cmd in probes().iter().map(String::as_str).chain(["check"]) {
            fixes.extend(findings_fixes(&["--root", f, "--format", "json", cmd]));
        }
        // The shipped policies' verdicts carry fixes of their own.
        for policy in ["dgx-h100", "hdr-a100", "roce-dcqcn"] {
            fixes.extend(findings_fixes(&[
                "--root", f, "--format", "json", "check", "--policy", policy,
            ]));
        }
    }
    for (later, before) in [
        ("ib-degraded-later", "ib-degraded"),
        ("roce-pause-storm-later", "roce-pause-storm"),
    ] {
        for cmd in ["links", "qos"] {
            fixes.extend(findings_fixes(&[
                "--root",
                root.join(later).to_str().unwrap(),
                "--format",
                "json",
                cmd,
                "--baseline",
                root.join(before).to_str().unwrap(),
            ]));
        }
    }
    fixes.sort();
    fixes.dedup();
    let commands: Vec<(String, String)> = fixes
        .iter()
        .flat_map(|fix| {
            fix.split('`')
                .skip(1)
                .step_by(2)
                .map(move |c| (c.to_string(), fix.clone()))
        })
        .collect();
    assert!(commands.len() >= 15, "{commands:#?}");
    const TOOLS: &[&str] = &[
        "fabprobe",
        "sudo",
        "ethtool",
        "lspci",
        "mlnx_qos",
        "dcb",
        "mlxlink",
        "ibstat",
        "sminfo",
        "perfquery",
        "ibportstate",
        "modprobe",
        "update-grub",
        "kill",
        "fuser",
        "for",
        "echo",
        "cat",
        "ip",
        "tc",
        "rdma",
    ];
    for (cmd, fix) in &commands {
        let first = cmd.split_whitespace().next().unwrap_or("");
        // A file or setting name in backticks (`* - memlock unlimited`, `iommu=pt`) is not a
        // command; anything that starts with a tool is one.
        if !TOOLS.contains(&first) {
            continue;
        }
        let o = Command::new("bash").args(["-n", "-c", cmd]).output().unwrap();
        assert!(
            o.status.success(),
            "`{cmd}` does not parse: {}\nin: {fix}",
            String::from_utf8_lossy(&o.stderr)
        );
        for w in cmd.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '<' || c == '>')) {
            let placeholder = ["PID", "DEV", "BDF", "N", "IFNAME", "PORT"].contains(&w)
                || (w.len() > 2 && w.starts_with('<') && w.ends_with('>'));
            assert!(!placeholder, "`{cmd}` has the placeholder {w}\nin: {fix}");
        }
    }
    // The fixes that name processes and devices name them.
    assert!(
        commands
            .iter()
            .any(|(c, _)| c.starts_with("kill ") && c[5..].trim().parse::<u32>().is_ok()),
        "{commands:#?}"
    );
    assert!(
        commands.iter().any(|(c, _)| c.starts_with("lspci -vv -s 0000:")),
        "{commands:#?}"
    );
    assert!(
        commands.iter().any(|(c, _)| c.starts_with("mlxlink -d mlx5_")),
        "{commands:#?}"
    );
}

/// The source text of each `.fix(...)` call's arguments: from the open paren to its match,
/// parens inside string literals not counted.
fn fix_calls(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in src.match_indices(".fix(") {
        let start = i + ".fix(".len();
        let (mut depth, mut in_str, mut esc) = (1usize, false, false);
        let mut end = src.len();
        for (j, c) in src[start..].char_indices() {
            match (in_str, esc, c) {
                (true, true, _) => esc = false,
                (true, false, '\\') => esc = true,
                (true, false, '"') => in_str = false,
                (true, false, _) => {}
                (false, _, '"') => in_str = true,
                (false, _, '(') => depth += 1,
                (false, _, ')') => {
                    depth -= 1;
                    if depth == 0 {
                        end = start + j;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.push(src[start..end].to_string());
    }
    out
}

/// `fabprobe <sub>` outside backticks in `lit`, for every subcommand in `subs`.
fn unquoted_commands(lit: &str, subs: &BTreeSet<String>) -> Vec<String> {
    let mut bad = Vec::new();
    for (k, _) in lit.match_indices("fabprobe ") {
        let word: String = lit[k + "fabprobe ".len()..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '-')
            .collect();
        if subs.contains(&word) && lit[..k].matches('`').count().is_multiple_of(2) {
            bad.push(format!("fabprobe {word}"));
        }
    }
    bad
}

#[test]
fn unquoted_command_detection() {
    let subs: BTreeSet<String> = ["check", "sweep"].iter().map(|s| s.to_string()).collect();
    assert_eq!(unquoted_commands("drain it (fabprobe sweep --drain)", &subs), ["fabprobe sweep"]);
    assert!(unquoted_commands("run `sudo fabprobe check` again", &subs).is_empty());
    assert!(unquoted_commands("not a fabprobe report", &subs).is_empty());
    let calls = fix_calls(r#"x.fix(format!("a (b) `c`", d(e))).y(); z.fix("run fabprobe check")"#);
    assert_eq!(calls, [r#"format!("a (b) `c`", d(e))"#, r#""run fabprobe check""#]);
}

/// A `fabprobe <sub>` in a fix is a command a person pastes: it stands in backticks, so the
/// text sets it apart and the HTML page draws it as a command block (issue 47). Every
/// `.fix(...)` in the source, whichever command gives it.
#[test]
fn every_fabprobe_command_in_a_fix_is_backticked() {
    let subs = subcommands();
    let mut files = Vec::new();
    common::rust_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
    files.sort();
    let (mut calls, mut bad) = (0, Vec::new());
    for f in &files {
        let src = std::fs::read_to_string(f).unwrap();
        for call in fix_calls(&src) {
            calls += 1;
            for lit in string_literals(&call) {
                for c in unquoted_commands(&lit, &subs) {
                    bad.push(format!("{}: `{c}` without backticks in \"{lit}\"", f.display()));
                }
            }
        }
    }
    assert!(calls >= 80, "only {calls} .fix( calls found: is the scan broken?");
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
