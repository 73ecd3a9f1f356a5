//! What the README and the provenance files point at must be there: a claim backed by
//! "test `name`" names a test that exists (a renamed or deleted test leaves the claim
//! unbacked), a backticked repository path exists, and nothing cites the project's private
//! reference folder, which is outside this repository (cite the public source itself).

use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The repository's files with one of `exts`, outside target/ and .git/ (no git needed: CI
/// may test an exported tree).
fn files(exts: &[&str]) -> Vec<(String, String)> {
    fn walk(dir: &Path, exts: &[&str], out: &mut Vec<(String, String)>) {
        let Ok(rd) = std::fs::read_dir(dir) else { return };
        for e in rd {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if p.is_symlink() || name == "target" || name == ".git" {
                continue;
            }
            if p.is_dir() {
                walk(&p, exts, out);
            } else if p.extension().is_some_and(|x| exts.iter().any(|e| x == *e))
                && let Ok(s) = std::fs::read_to_string(&p)
            {
                let rel = p.strip_prefix(ROOT).unwrap().display().to_string();
                out.push((rel, s));
            }
        }
    }
    let mut v = Vec::new();
    walk(Path::new(ROOT), exts, &mut v);
    v.sort();
    v
}

/// The Markdown files (README, PROVENANCE, tests/data READMEs...).
fn docs() -> Vec<(String, String)> {
    let v = files(&["md"]);
    assert!(
        v.iter().any(|(p, _)| p == "README.md"),
        "{:?}",
        v.iter().map(|x| &x.0).collect::<Vec<_>>()
    );
    v
}

/// Every `fn` name in the crate's Rust sources (tests/, src/, benches/).
fn fn_names() -> std::collections::BTreeSet<String> {
    fn walk(dir: &Path, out: &mut std::collections::BTreeSet<String>) {
        let Ok(rd) = std::fs::read_dir(dir) else { return };
        for e in rd {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let s = std::fs::read_to_string(&p).unwrap();
                for part in s.split("fn ").skip(1) {
                    let name: String = part
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if !name.is_empty() {
                        out.insert(name);
                    }
                }
            }
        }
    }
    let mut out = Default::default();
    for d in ["tests", "src", "benches"] {
        walk(&Path::new(ROOT).join(d), &mut out);
    }
    out
}

/// Names in backticks right after the word "test" or "tests" (across line breaks and an
/// opening parenthesis): "test `a_b`", "(test\n`a_b`: ...)", "tests `a` and `b`" (the first).
fn cited_tests(text: &str) -> Vec<String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut out = Vec::new();
    for w in words.windows(2) {
        let lead = w[0].trim_start_matches('(').to_ascii_lowercase();
        if lead != "test" && lead != "tests" {
            continue;
        }
        if let Some(rest) = w[1].strip_prefix('`') {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name.contains('_') && rest[name.len()..].starts_with('`') {
                out.push(name);
            }
        }
    }
    out
}

#[test]
fn citation_extraction() {
    assert_eq!(
        cited_tests("(test\n`penny_tree_x`: the tree) and test `a_b`. a `c_d` test"),
        ["penny_tree_x", "a_b"]
    );
    assert!(cited_tests("the test `fabprobe`, `tests/lab/`").is_empty());
}

#[test]
fn every_cited_test_exists() {
    let fns = fn_names();
    let mut cited = 0;
    let mut missing = Vec::new();
    for (path, text) in docs() {
        for name in cited_tests(&text) {
            cited += 1;
            if !fns.contains(&name) {
                missing.push(format!("{path}: test `{name}`"));
            }
        }
    }
    assert!(
        cited >= 2,
        "the README cites tests by name; the extraction found {cited}"
    );
    assert!(
        missing.is_empty(),
        "cited tests that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn every_backticked_repository_path_exists() {
    const DIRS: [&str; 7] = [
        "tests/",
        "fixtures/",
        "src/",
        "man/",
        "checks/",
        "benches/",
        ".ci/",
    ];
    let mut checked = 0;
    let mut missing = Vec::new();
    for (path, text) in docs() {
        for (i, chunk) in text.split('`').enumerate() {
            // Odd chunks are inside backticks.
            if i % 2 == 0 || !DIRS.iter().any(|d| chunk.starts_with(d)) || chunk.contains(' ') {
                continue;
            }
            // `fixtures/*/PROVENANCE.md`: the part before the first wildcard.
            let p = chunk.split('*').next().unwrap();
            checked += 1;
            if !Path::new(ROOT).join(p).exists() {
                missing.push(format!("{path}: `{chunk}`"));
            }
        }
    }
    assert!(checked >= 10, "found only {checked} paths");
    assert!(
        missing.is_empty(),
        "paths named in the docs that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn nothing_cites_the_private_reference_folder() {
    // The folder and the names of the notes in it (built here so this file does not match).
    let needles: Vec<String> = [
        ("shared", "/reference"),
        ("rdma", "-facts"),
        ("topology", "-facts"),
        ("probe", "-facts"),
        ("rdma-vm", ".md"),
    ]
    .iter()
    .map(|(a, b)| format!("{a}{b}"))
    .collect();
    let hits: Vec<String> = files(&["md", "rs", "py", "toml", "sh", "1"])
        .into_iter()
        .flat_map(|(p, s)| {
            s.lines()
                .enumerate()
                .filter(|(_, l)| needles.iter().any(|n| l.contains(n.as_str())))
                .map(|(n, l)| format!("{p}:{}: {}", n + 1, l.trim()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        hits.is_empty(),
        "the project's reference notes ({needles:?}) are not in this repository; cite the public source:\n{}",
        hits.join("\n")
    );
}
