//! The ring's layering, read from the source: the diagnosis reads samples and reports, not
//! the control wire format; the run and its report do not import each other.

use std::fs;
use std::path::Path;

fn code(path: &Path) -> String {
    // Comments say why, they are not imports: only code lines count.
    fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn diagnosis_reads_samples_not_the_wire() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ring/diagnosis");
    let mut seen = 0;
    for e in fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "rs") {
            seen += 1;
            let c = code(&p);
            for word in ["ring::wire", "wire::", "Msg::", "Msg)", "Msg,"] {
                assert!(!c.contains(word), "{} uses the wire format ({word})", p.display());
            }
        }
    }
    assert!(seen >= 5, "no diagnosis sources found in {}", dir.display());
}

#[test]
fn run_and_report_do_not_import_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ring");
    let report = code(&src.join("report.rs"));
    let run = code(&src.join("run.rs"));
    assert!(!report.contains("ring::run"), "report.rs imports run.rs");
    assert!(!report.contains("super::run"), "report.rs imports run.rs");
    // run.rs assembles the report from its parts; the cycle is what is refused.
    assert!(run.contains("ring::report"), "the test reads the wrong file");
}

/// The ring's rooms, bottom to top, as imports go: a module names only modules of its own
/// room or of rooms below it (issue 31: one direction through the rooms). The flow of a run
/// is the other way round (launch -> plan -> coordinator and data planes -> diagnosis ->
/// report): each room is handed what the rooms above it decided, it does not reach up.
const ROOMS: &[(&str, &[&str])] = &[
    (
        "lower",
        &[
            "model",
            "wire",
            "lag",
            "schedstat",
            "tcpinfo",
            "gate",
            "interrupt",
            "control",
            "relay",
        ],
    ),
    ("diagnosis (pure)", &["diagnosis"]),
    (
        "the launch's word and the job's plan",
        &["launcher", "options", "orders", "portfacts", "portread", "railplan"],
    ),
    (
        "the coordinator and the ranks' data planes",
        &["coordinator", "collective", "rendezvous", "railstop"],
    ),
    ("the job's report", &["report", "railmerge"]),
    ("one rank's run", &["run"]),
    ("--rails across nodes", &["rails", "railmux"]),
    ("the entry the CLI calls", &["launch"]),
    ("tests of whole worlds", &["verdict_tests", "judged_tests"]),
];

/// Names of a room above that a module still uses (none: the list stays for a move that
/// must land in two steps). Each entry is (module, module above it).
const ABOVE_PENDING: &[(&str, &str)] = &[];

/// Lines that name things: code and doc comments (a doc link is a name rustdoc resolves);
/// plain `//` comments only explain.
fn naming_lines(text: &str) -> String {
    text.lines()
        .filter(|l| {
            let t = l.trim_start();
            !t.starts_with("//") || t.starts_with("///") || t.starts_with("//!")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The ring modules `text` names: `crate::ring::m`, `crate::ring::{m, ...}`, and `super::m`
/// from a file `depth` modules below the ring's own (`super::super::m` at depth 1).
fn named_modules(text: &str, depth: usize) -> std::collections::BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = std::collections::BTreeSet::new();
    let up = format!("{}super::", "super::".repeat(depth));
    for prefix in ["crate::ring::".to_string(), up] {
        for (i, _) in text.match_indices(&prefix) {
            // `super::super::x` also contains `super::x`: only the whole path counts.
            let before = &text[..i];
            if before.ends_with("::") {
                continue;
            }
            let rest = &text[i + prefix.len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let group = &group[..group.find('}').unwrap_or(group.len())];
                out.extend(group.split(',').map(|p| ident(p.trim())));
            } else {
                out.insert(ident(rest));
            }
        }
    }
    out.retain(|m| m != "super" && m != "self");
    out
}

/// Every module of `src/ring` (a file or a directory) with the text of its files and
/// each file's depth below `src/ring`.
fn ring_modules() -> Vec<(String, Vec<(String, usize)>)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ring");
    let mut mods = Vec::new();
    for e in fs::read_dir(&src).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_stem().unwrap().to_string_lossy().to_string();
        if name == "mod" {
            continue;
        }
        let mut files = Vec::new();
        let mut stack = vec![(p.clone(), 0usize)];
        while let Some((q, depth)) = stack.pop() {
            if q.is_dir() {
                for e in fs::read_dir(&q).unwrap() {
                    stack.push((e.unwrap().path(), depth + 1));
                }
            } else if q.extension().is_some_and(|x| x == "rs") {
                // `super::` of a directory's mod.rs is the ring itself, as in a file beside it.
                let own = q.file_name().is_some_and(|f| f == "mod.rs") as usize;
                let text = fs::read_to_string(&q).unwrap();
                files.push((naming_lines(&text), depth.saturating_sub(own)));
            }
        }
        mods.push((name, files));
    }
    mods
}

#[test]
fn no_ring_room_names_one_above_it() {
    let room_of = |m: &str| ROOMS.iter().position(|(_, ms)| ms.contains(&m));
    let mut bad = Vec::new();
    let mut seen = 0;
    for (m, files) in ring_modules() {
        let Some(mine) = room_of(&m) else {
            bad.push(format!("src/ring/{m} is in no room: add it to ROOMS"));
            continue;
        };
        seen += 1;
        for (text, depth) in &files {
            for n in named_modules(text, *depth) {
                let Some(theirs) = room_of(&n) else { continue };
                if theirs > mine && !ABOVE_PENDING.contains(&(m.as_str(), n.as_str())) {
                    bad.push(format!("{m} ({}) names {n} ({})", ROOMS[mine].0, ROOMS[theirs].0));
                }
            }
        }
    }
    assert!(seen >= 20, "only {seen} ring modules found");
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The reader of names finds what the rooms test relies on (a test that can fail).
#[test]
fn named_modules_reads_paths_groups_and_supers() {
    let t = "use crate::ring::{model::Rank, wire};\nuse super::lag;\n/// [`crate::ring::rails::X`]\nsuper::super::run::f();";
    let got: Vec<String> = named_modules(t, 0).into_iter().collect();
    assert_eq!(got, ["lag", "model", "rails", "wire"]);
    let got: Vec<String> = named_modules(t, 1).into_iter().collect();
    assert_eq!(got, ["model", "rails", "run", "wire"]);
    assert_eq!(naming_lines("// crate::ring::run\n/// a\nx"), "/// a\nx");
}

/// Nothing below the CLI prints or exits (issue 46): the ring's entry hands lines, the live
/// status and rows to the CLI's `launch::Watch` and returns the outcome; the CLI prints and
/// picks the exit status.
#[test]
fn the_ring_neither_prints_nor_exits() {
    let mut seen = 0;
    let mut bad = Vec::new();
    for (m, files) in ring_modules() {
        for (text, _) in &files {
            seen += 1;
            for word in [
                "println!", "eprintln!", "print!(", "eprint!(", "process::exit", "stdout()",
                "stderr()",
            ] {
                if text.contains(word) {
                    bad.push(format!("src/ring/{m} uses {word}"));
                }
            }
        }
    }
    assert!(seen >= 40, "only {seen} ring files found");
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The diagnosis room is pure (src/ring/mod.rs): it judges samples and reports handed to it
/// and reads no host, file or program; what reads the host sits in a room above it
/// (`portfacts` before the join, `portread` during the run). Test code is not held to it.
#[test]
fn the_diagnosis_room_reads_no_host() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ring/diagnosis");
    // Modules declared `#[cfg(test)]` in mod.rs are test helpers (pastes: `bash -n`).
    let m = fs::read_to_string(dir.join("mod.rs")).unwrap();
    let test_only: Vec<String> = m
        .split("#[cfg(test)]")
        .skip(1)
        .filter_map(|rest| rest.trim_start().strip_prefix("pub mod ").or(rest.trim_start().strip_prefix("mod ")))
        .filter_map(|rest| rest.split(';').next().map(|n| format!("{n}.rs")))
        .collect();
    let mut bad = Vec::new();
    let mut seen = 0;
    for e in fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if p.extension().is_none_or(|x| x != "rs") || test_only.contains(&name) {
            continue;
        }
        seen += 1;
        let c = code(&p);
        let c = c.split("#[cfg(test)]").next().unwrap_or("");
        for word in ["Host", "host::", "std::fs", "fs::read", "Command::new", "run_bounded", "std::process"] {
            if c.contains(word) {
                bad.push(format!("{} ({word})", p.display()));
            }
        }
    }
    assert!(seen >= 5, "no diagnosis sources found in {}", dir.display());
    assert!(bad.is_empty(), "the diagnosis room reads the host:\n{}", bad.join("\n"));
}
