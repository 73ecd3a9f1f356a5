//! The rooms of the crate and the direction of their arrows, read from the source: every
//! room of `src/` is in `ROOMS` (the order `src/lib.rs` documents), and no room names one
//! above it, tests included. A new import against the arrows, or a new room not placed in
//! the order, fails here; so does a function a reader must scroll.

use std::fs;
use std::path::Path;

#[path = "common/fnlen.rs"]
mod fnlen;

/// The rooms, lowest first (the order in `src/lib.rs`'s header). A room may name the rooms
/// before it and never one after it.
const ROOMS: &[&str] = &[
    "text", "finding", "host", "sysfs", "verbs", "nccl", "probe", "snapshot", "nccl_log", "ring", "check",
    "render", "cli",
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir` (relative to the crate) with its text.
fn sources(dir: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![root().join(dir)];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(root()).unwrap().display().to_string();
                out.push((rel, fs::read_to_string(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// The room a file of `src/` belongs to: `src/ring/x.rs` -> `ring`, `src/text.rs` -> `text`.
fn room_of(rel: &str) -> Option<&str> {
    let rest = rel.strip_prefix("src/")?;
    let first = rest.split('/').next()?;
    Some(first.strip_suffix(".rs").unwrap_or(first))
}

/// The rooms `text` names through `crate::room`, `crate::{room, ...}` or a doc link, in
/// code and doc comments (a plain `//` comment only explains).
fn named_rooms(text: &str) -> Vec<&'static str> {
    let code: String = text
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            !t.starts_with("//") || t.starts_with("///") || t.starts_with("//!")
        })
        .collect::<Vec<_>>()
        .join("\n");
    // `crate::x` anywhere (paths, doc links), and the first segments of `use crate::{...}`.
    let mut named: Vec<String> = code
        .match_indices("crate::")
        .map(|(i, _)| {
            let rest = &code[i + "crate::".len()..];
            rest.chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect()
        })
        .collect();
    named.extend(grouped(&code));
    ROOMS
        .iter()
        .copied()
        .filter(|r| named.iter().any(|n| n == r))
        .collect()
}

/// The first segments of every `use crate::{a::b, c, ...}` group.
fn grouped(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices("use crate::{") {
        let rest = &code[i + "use crate::{".len()..];
        let body = &rest[..rest.find("};").unwrap_or(rest.len())];
        let mut depth = 0;
        let mut start = 0;
        for (j, c) in body.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.push(body[start..j].trim().split("::").next().unwrap_or("").to_string());
                    start = j + 1;
                }
                _ => {}
            }
        }
        out.push(body[start..].trim().split("::").next().unwrap_or("").to_string());
    }
    out
}

#[test]
fn every_room_is_placed_in_the_order_lib_rs_documents() {
    let lib = fs::read_to_string(root().join("src/lib.rs")).unwrap();
    let mut declared: Vec<String> = lib
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';').to_string())
        .collect();
    declared.sort();
    let mut placed: Vec<String> = ROOMS.iter().map(|s| s.to_string()).collect();
    placed.sort();
    assert_eq!(
        declared, placed,
        "src/lib.rs's modules and this test's ROOMS differ"
    );
    let order = ROOMS.join(" < ");
    assert!(
        lib.contains(&order),
        "src/lib.rs's header does not give the order `{order}`"
    );
}

#[test]
fn no_room_names_one_above_it() {
    let mut bad = Vec::new();
    for (rel, text) in sources("src") {
        let Some(room) = room_of(&rel) else { continue };
        if room == "lib" || room == "main" {
            continue;
        }
        let Some(at) = ROOMS.iter().position(|r| *r == room) else {
            bad.push(format!("{rel}: room `{room}` is not in ROOMS"));
            continue;
        };
        for named in named_rooms(&text) {
            let there = ROOMS.iter().position(|r| *r == named).unwrap();
            if there > at {
                bad.push(format!("{rel} ({room}) names {named}, a room above it"));
            }
        }
    }
    assert!(bad.is_empty(), "against the arrows:\n{}", bad.join("\n"));
}

/// The reader of names sees paths, groups and doc links, and not plain comments.
#[test]
fn named_rooms_reads_paths_groups_and_doc_links() {
    assert_eq!(named_rooms("use crate::render::ring;"), ["render"]);
    assert_eq!(
        named_rooms("use crate::{host::Host, probe::gids};"),
        ["host", "probe"]
    );
    assert_eq!(named_rooms("/// see [`crate::cli::run`]"), ["cli"]);
    assert!(named_rooms("// crate::cli::run explains").is_empty());
    assert!(named_rooms("let x = crate::text::printable(a, 3);").contains(&"text"));
}

/// No room runs a program or reads the host's files from the diagnosis (the pure room).
#[test]
fn the_diagnosis_room_is_pure() {
    // Modules declared under `#[cfg(test)]` are test helpers (`pastes` runs `bash -n`).
    let module = fs::read_to_string(root().join("src/ring/diagnosis/mod.rs")).unwrap();
    let lines: Vec<&str> = module.lines().collect();
    let test_only: Vec<String> = lines
        .windows(2)
        .filter(|w| w[0].trim() == "#[cfg(test)]")
        .filter_map(|w| {
            w[1].trim()
                .strip_prefix("pub mod ")
                .map(|m| format!("{}.rs", m.trim_end_matches(';')))
        })
        .collect();
    assert!(test_only.contains(&"pastes.rs".to_string()), "{test_only:?}");
    for (rel, text) in sources("src/ring/diagnosis") {
        if test_only.iter().any(|m| rel.ends_with(&format!("/{m}"))) {
            continue;
        }
        // The code before its unit tests (a test may build a host or run a tool).
        let body = &text[..text.find("#[cfg(test)]").unwrap_or(text.len())];
        let code = fnlen::code_only(body);
        for pat in [
            "Command::new",
            "std::fs::",
            "fs::read",
            "File::open",
            "TcpStream",
            "UdpSocket",
        ] {
            assert!(
                !code.contains(pat),
                "{rel} does I/O ({pat}): the diagnosis is pure"
            );
        }
    }
}

/// `check` judges; it does not render.
#[test]
fn check_never_names_render() {
    for (rel, text) in sources("src/check") {
        let hits = named_rooms(&text);
        assert!(
            !hits.contains(&"render") && !hits.contains(&"cli"),
            "{rel} names {hits:?}"
        );
    }
}

/// No probe, rule or check reads `NCCL_*` from the process environment: the settings model
/// (`nccl::settings`) is the one source.
#[test]
fn nothing_below_the_cli_reads_nccl_variables_itself() {
    for dir in [
        "src/probe",
        "src/nccl",
        "src/check",
        "src/host",
        "src/snapshot",
        "src/ring",
        "src/nccl_log",
    ] {
        for (p, text) in sources(dir) {
            for pat in ["env::var(\"NCCL_", "env::var_os(\"NCCL_", "env_var(\"NCCL_"] {
                assert!(!text.contains(pat), "{p} reads NCCL_* itself ({pat})");
            }
        }
    }
}

/// The longest a function may be (its signature to its closing brace): one screen.
const MAX_FN_LINES: usize = 80;

/// Functions over the limit that are not split yet, as `file fn`. The list only shrinks:
/// an entry that is no longer long fails too, so a split is recorded here when it lands.
const LONG_FNS_PENDING: &[&str] = &[];

#[test]
fn no_function_needs_scrolling() {
    let mut long = Vec::new();
    let mut fns = 0;
    for (rel, text) in sources("src") {
        // Test-only modules are tests through and through.
        if rel.ends_with("/tests.rs") || rel.ends_with("_tests.rs") {
            continue;
        }
        for (name, line, n) in fnlen::fn_lengths(&text) {
            fns += 1;
            if n > MAX_FN_LINES {
                long.push((format!("{rel} {name}"), format!("{rel}:{line} {name}: {n} lines")));
            }
        }
    }
    assert!(fns > 1500, "only {fns} functions found");
    let new: Vec<&str> = long
        .iter()
        .filter(|(k, _)| !LONG_FNS_PENDING.contains(&k.as_str()))
        .map(|(_, m)| m.as_str())
        .collect();
    let done: Vec<&&str> = LONG_FNS_PENDING
        .iter()
        .filter(|p| !long.iter().any(|(k, _)| k == *p))
        .collect();
    assert!(new.is_empty(), "over {MAX_FN_LINES} lines:\n{}", new.join("\n"));
    assert!(
        done.is_empty(),
        "split now, take them off LONG_FNS_PENDING: {done:?}"
    );
}

/// The length reader counts a body by its braces, not by braces in strings, chars or
/// comments, and stops at the tests.
#[test]
fn fn_lengths_match_braces_in_code_only() {
    let t = "fn a() {\n    let s = \"}}\"; // }\n    let c = '}';\n    let r = r#\"{\"#;\n}\nfn b<'x>(v: &'x str) -> Vec<u8>\nwhere\n    u8: Copy,\n{\n    v.into()\n}\nfn decl();\n#[cfg(test)]\nmod tests {\n    fn c() {}\n}\n";
    assert_eq!(
        fnlen::fn_lengths(t),
        [("a".to_string(), 1, 5), ("b".to_string(), 6, 6)]
    );
    // A test-only file declared above the code does not end the code.
    let t = "#[cfg(test)]\nmod helpers;\nfn long() {\n    x();\n}\n";
    assert_eq!(fnlen::fn_lengths(t), [("long".to_string(), 3, 3)]);
}
