//! Records built in one place (issue 46): the ring's heartbeat (`WaitReport`) is written out
//! field by field only in `WaitReport::new`, and every other literal spreads from it
//! (`WaitReport { step, ..WaitReport::new(rank, phase) }`), so a new field is one edit, not
//! seven found by three rounds of the compiler; a ring test's `Verdict` spreads from
//! `Verdict::bare` the same way.

mod common;
#[path = "common/fnlen.rs"]
mod fnlen;

use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Each struct literal of `ty` in `code` (comments and strings blanked: [`fnlen::code_only`]):
/// its byte offset and whether it spreads from a base (`..base` in its own braces). A type's
/// declaration, impl or a function's return type before its body is no literal.
fn literals(code: &str, ty: &str) -> Vec<(usize, bool)> {
    let re = regex::Regex::new(&format!(r"\b{ty}\s*\{{")).unwrap();
    let b = code.as_bytes();
    let mut out = Vec::new();
    for m in re.find_iter(code) {
        let before = code[..m.start()].trim_end();
        if ["struct", "impl", "->", "for", "enum"].iter().any(|w| before.ends_with(w)) {
            continue;
        }
        let (mut depth, mut spread) = (0i32, false);
        for j in m.end() - 1..b.len() {
            match b[j] {
                b'{' | b'(' | b'[' => depth += 1,
                b'}' | b')' | b']' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                b'.' if depth == 1 && b.get(j + 1) == Some(&b'.') => spread = true,
                _ => {}
            }
        }
        out.push((m.start(), spread));
    }
    out
}

fn files(dirs: &[&str]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for d in dirs {
        common::rust_files(&Path::new(ROOT).join(d), &mut out);
    }
    out.sort();
    out
}

fn place(p: &Path, code: &str, at: usize) -> String {
    let line = code[..at].matches('\n').count() + 1;
    format!("{}:{line}", p.strip_prefix(ROOT).unwrap().display())
}

#[test]
fn the_literal_reader_tells_a_whole_literal_from_a_spread_one() {
    let code = "fn f(r: u32) -> WaitReport {\n    let a = WaitReport { rank: r, positions: vec![] };\n    \
                let b = WaitReport { step: (0..2).len(), ..WaitReport::new(r, p) };\n}\n\
                impl WaitReport {}\npub struct WaitReport { rank: u32 }\n";
    let found: Vec<bool> = literals(code, "WaitReport").into_iter().map(|(_, s)| s).collect();
    assert_eq!(found, [false, true]);
}

#[test]
fn a_wait_report_is_written_out_only_in_its_constructor() {
    let (mut whole, mut spread) = (Vec::new(), 0);
    for p in files(&["src", "tests", "benches"]) {
        let code = fnlen::code_only(&std::fs::read_to_string(&p).unwrap());
        for (at, s) in literals(&code, "WaitReport") {
            if s {
                spread += 1;
            } else {
                whole.push(place(&p, &code, at));
            }
        }
    }
    assert!(
        whole.len() == 1 && whole[0].starts_with("src/ring/model.rs:"),
        "WaitReport written out field by field outside WaitReport::new (spread from it: \
         `..WaitReport::new(rank, phase)`): {whole:?}"
    );
    // allreduce, wire (2), the watchdog's tests, the bench, lab_attack, the decoder props.
    assert!(spread >= 7, "only {spread} spread literals found: the reader lost them");
}

#[test]
fn a_ring_test_builds_its_verdict_from_verdict_bare() {
    let (mut whole, mut spread) = (Vec::new(), 0);
    for p in files(&["src/ring"]) {
        let code = fnlen::code_only(&std::fs::read_to_string(&p).unwrap());
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let tests = if name == "tests.rs" || name.ends_with("_tests.rs") {
            // The whole file is tests: one range.
            std::iter::once(0..code.len()).collect::<Vec<_>>()
        } else {
            fnlen::test_modules(&code)
        };
        for r in tests {
            for (at, s) in literals(&code[r.clone()], "Verdict") {
                if s {
                    spread += 1;
                } else {
                    whole.push(place(&p, &code, r.start + at));
                }
            }
        }
    }
    assert!(whole.is_empty(), "a ring test builds a Verdict by hand (use `..Verdict::bare(kind, from, to)`): {whole:?}");
    assert!(spread >= 12, "only {spread} spread test verdicts found: the reader lost them");
}
