//! A finding's fix or a verdict's next step that says `fabprobe <sub>` must name a
//! subcommand that exists. The list of subcommands is read from the clap definition, so
//! the test keeps working as subcommands land (a remedy may name `fabprobe qos` once `qos`
//! is a subcommand, not before).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_fabprobe");

fn subcommands() -> BTreeSet<String> {
    fabprobe::cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect()
}

/// Every word that follows `fabprobe ` in `text` (`fabprobe links (tx errors)` -> `links`).
fn named_after_fabprobe(text: &str) -> Vec<String> {
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
            out.push(word);
        }
    }
    out
}

#[test]
fn word_extraction() {
    assert_eq!(
        named_after_fabprobe("on a: fabprobe links (x), and fabprobe qos; fabprobe.topo, fabprobe {x}"),
        ["links", "qos"]
    );
    assert_eq!(named_after_fabprobe("run `fabprobe \\\n   gen-docs man`"), ["gen-docs"]);
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

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Words after "fabprobe " in the source's strings that are prose about the program, not a
/// command line ("fabprobe could not run", "not a fabprobe peer"). A subcommand that does not
/// exist can only pass by being added here, in review.
const PROSE: &[&str] = &[
    "could", "itself", "still", "reads", "rank", "process", "peer", "data", "version", "uses",
    "is", "cannot", "was", "will",
];

/// Every string in src/ that says `fabprobe <word>`: fixes, next steps, hints, help text.
#[test]
fn every_fabprobe_subcommand_named_in_the_source_exists() {
    let subs = subcommands();
    assert!(subs.contains("topo") && subs.contains("ring"), "{subs:?}");
    let mut files = Vec::new();
    rust_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
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
        }
    }
    // The scan found the remedies it is meant to check (links, topo, snapshot, ...).
    assert!(seen >= 10, "only {seen} mentions found: is the scan broken?");
    assert!(
        bad.is_empty(),
        "not subcommands ({subs:?}):\n{}",
        bad.join("\n")
    );
}

/// The README's sample verdict lines (`next: ...`) name real subcommands too.
#[test]
fn every_fabprobe_subcommand_in_the_readme_next_steps_exists() {
    let subs = subcommands();
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let next: Vec<&str> = readme
        .lines()
        .filter(|l| l.trim_start().starts_with("next:"))
        .collect();
    assert!(!next.is_empty());
    for l in next {
        for w in named_after_fabprobe(l) {
            assert!(subs.contains(&w), "README: `fabprobe {w}` is not a subcommand: {l}");
        }
    }
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
    let mut fixtures: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("sys").is_dir())
        .map(|p| p.display().to_string())
        .collect();
    fixtures.sort();
    assert!(fixtures.len() >= 10, "{fixtures:?}");
    let mut fixes = Vec::new();
    for f in &fixtures {
        for cmd in ["topo", "gids", "links"] {
            fixes.extend(findings_fixes(&["--root", f, "--format", "json", cmd]));
        }
    }
    let later = root.join("ib-degraded-later").display().to_string();
    let before = root.join("ib-degraded").display().to_string();
    fixes.extend(findings_fixes(&[
        "--root", &later, "--format", "json", "links", "--baseline", &before,
    ]));
    // Enough fixes to mean something, including the counter ones.
    assert!(fixes.len() >= 10, "{fixes:?}");
    assert!(fixes.iter().any(|f| f.contains("PFC")), "{fixes:?}");
    for fix in &fixes {
        for w in named_after_fabprobe(fix) {
            assert!(subs.contains(&w), "`fabprobe {w}` is not a subcommand: {fix}");
        }
    }
}
