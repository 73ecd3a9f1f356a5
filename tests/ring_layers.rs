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
