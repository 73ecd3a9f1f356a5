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
        &["launcher", "options", "orders", "railplan"],
    ),
    (
        "the coordinator and the ranks' data planes",
        &["coordinator", "collective", "rendezvous", "railstop"],
    ),
    ("the job's report", &["report", "railmerge"]),
    ("one rank's run", &["run"]),
    ("--rails across nodes", &["rails", "railmux"]),
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

/// The longest a function of `src/ring` may be (its signature to its closing brace): one
/// screen, read without scrolling.
const MAX_FN_LINES: usize = 80;

/// Files whose long functions are not split yet: another branch rewrites them now.
const LONG_FNS_PENDING: &[&str] = &[];

/// `text` with comments, strings and char literals blanked (newlines kept), so that braces
/// count only as code.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let blank =
        |out: &mut Vec<u8>, s: &[u8]| out.extend(s.iter().map(|&c| if c == b'\n' { c } else { b' ' }));
    while i < b.len() {
        let rest = &b[i..];
        let prev_ident = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        let end = if rest.starts_with(b"//") {
            i + rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len())
        } else if rest.starts_with(b"/*") {
            i + 2
                + rest[2..]
                    .windows(2)
                    .position(|w| w == b"*/")
                    .map_or(rest.len() - 2, |p| p + 2)
        } else if !prev_ident
            && (rest.starts_with(b"r\"") || rest.starts_with(b"r#") || rest.starts_with(b"br"))
        {
            let start = if rest[0] == b'b' { 2 } else { 1 };
            let hashes = rest[start..].iter().take_while(|&&c| c == b'#').count();
            if rest.get(start + hashes) != Some(&b'"') {
                i + 1
            } else {
                let close: Vec<u8> = std::iter::once(b'"')
                    .chain(std::iter::repeat_n(b'#', hashes))
                    .collect();
                let body = start + hashes + 1;
                i + body
                    + rest[body..]
                        .windows(close.len())
                        .position(|w| w == close)
                        .map_or(rest.len() - body, |p| p + close.len())
            }
        } else if rest[0] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            i + (j + 1).min(rest.len())
        } else if rest[0] == b'\'' {
            // A char literal ('x', '\n', '\'', 'é'), not a lifetime ('a).
            let len = match rest.get(1) {
                Some(b'\\') => rest.iter().skip(3).position(|&c| c == b'\'').map(|p| p + 4),
                Some(&c) if c >= 0x80 => rest
                    .iter()
                    .skip(1)
                    .take(5)
                    .position(|&c| c == b'\'')
                    .map(|p| p + 2),
                Some(_) if rest.get(2) == Some(&b'\'') => Some(3),
                _ => None,
            };
            len.map_or(i + 1, |n| i + n)
        } else {
            i + 1
        };
        if end == i + 1 {
            out.push(b[i]);
        } else {
            blank(&mut out, &b[i..end]);
        }
        i = end;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Each `fn` with a body in `text` before its `#[cfg(test)]` module: (name, first line,
/// lines), brace-matched on the code alone.
fn fn_lengths(text: &str) -> Vec<(String, usize, usize)> {
    let code = code_only(text);
    let tests_at = code.find("#[cfg(test)]\nmod ").unwrap_or(code.len());
    let b = code.as_bytes();
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(p) = code[from..tests_at].find("fn ") {
        let at = from + p;
        from = at + 3;
        if at > 0 && (b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_') {
            continue;
        }
        let name: String = code[at + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // The body's brace: the first `{` outside the signature's brackets; a `;` first is a
        // declaration without a body.
        let (mut depth, mut k) = (0i32, at + 3);
        while k < b.len() {
            match b[k] {
                b'(' | b'[' | b'<' => depth += 1,
                b')' | b']' => depth -= 1,
                b'>' if b[k - 1] != b'-' => depth -= 1,
                b';' if depth <= 0 => break,
                b'{' if depth <= 0 => break,
                _ => {}
            }
            k += 1;
        }
        if k >= b.len() || b[k] != b'{' {
            continue;
        }
        let mut braces = 0;
        let mut end = k;
        for (j, &c) in b.iter().enumerate().skip(k) {
            braces += (c == b'{') as i32 - (c == b'}') as i32;
            if braces == 0 {
                end = j;
                break;
            }
        }
        let first = line_of(at);
        out.push((name, first, line_of(end) - first + 1));
    }
    out
}

#[test]
fn no_ring_function_needs_scrolling() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut stack = vec![root.join("src/ring")];
    let mut long = Vec::new();
    let mut fns = 0;
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") && !LONG_FNS_PENDING.contains(&rel.as_str()) {
                // Test-only modules are tests through and through.
                if rel.ends_with("/tests.rs") || rel.ends_with("_tests.rs") {
                    continue;
                }
                for (name, line, n) in fn_lengths(&fs::read_to_string(&p).unwrap()) {
                    fns += 1;
                    if n > MAX_FN_LINES {
                        long.push(format!("{rel}:{line} {name}: {n} lines"));
                    }
                }
            }
        }
    }
    assert!(fns > 300, "only {fns} functions found");
    assert!(long.is_empty(), "over {MAX_FN_LINES} lines:\n{}", long.join("\n"));
}

/// The length reader counts a body by its braces, not by braces in strings, chars or
/// comments, and stops at the tests.
#[test]
fn fn_lengths_match_braces_in_code_only() {
    let t = "fn a() {\n    let s = \"}}\"; // }\n    let c = '}';\n    let r = r#\"{\"#;\n}\nfn b<'x>(v: &'x str) -> Vec<u8>\nwhere\n    u8: Copy,\n{\n    v.into()\n}\nfn decl();\n#[cfg(test)]\nmod tests {\n    fn c() {}\n}\n";
    assert_eq!(fn_lengths(t), [("a".to_string(), 1, 5), ("b".to_string(), 6, 6)]);
}
