//! The cause registry (`src/nccl_log/causes.rs`, issue 44): every entry complete, every
//! cause id used anywhere (the verdicts of every corpus log, the code, the tests' assertions,
//! docs/probes.md) has an entry, the generated cause table in docs/probes.md is current, and
//! no function of `src/nccl_log` needs scrolling.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use fabprobe::finding::Severity;
use fabprobe::nccl_log::causes::{self, Read, Seen, CAUSES};
use fabprobe::nccl_log::Analyzer;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn is_id(w: &str) -> bool {
    w.contains('_')
        && w.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && w.starts_with(|c: char| c.is_ascii_lowercase())
}

#[test]
fn every_entry_has_every_part() {
    let mut ids = BTreeSet::new();
    for c in CAUSES {
        assert!(is_id(c.id), "{}: not an id", c.id);
        assert!(ids.insert(c.id), "{}: two entries", c.id);
        for (part, text) in [("about", c.about), ("meaning", c.meaning), ("next", c.next)] {
            assert!(text.trim().len() > 10, "{}: no {part}", c.id);
        }
        assert!(c.severity != Severity::Pass, "{}: a cause is never a pass", c.id);
        match c.seen {
            Seen::Texts(sets) => {
                assert!(!sets.is_empty() && c.read != Read::Derived, "{}: no text", c.id);
                for set in sets {
                    assert!(
                        !set.is_empty() && set.iter().all(|k| !k.trim().is_empty()),
                        "{}: an empty text",
                        c.id
                    );
                }
            }
            Seen::Derived(what) => assert!(
                c.read == Read::Derived && what.len() > 10,
                "{}: derived from what",
                c.id
            ),
        }
        for k in c.explains.causes {
            assert!(
                causes::get(k).is_some(),
                "{}: explains {k}, which has no entry",
                c.id
            );
        }
        // A fabprobe command in `next` is in backticks, so it pastes (every corpus verdict's
        // filled-in step is parsed by tests/nccl_log_threads.rs).
        let bare = c.next.split('`').step_by(2).any(|t| t.contains("fabprobe "));
        assert!(
            !bare,
            "{}: a fabprobe command outside backticks: {}",
            c.id, c.next
        );
    }
    for (id, variant, m, n) in causes::VARIANTS {
        assert!(
            causes::get(id).is_some() && !variant.is_empty() && !m.is_empty() && !n.is_empty(),
            "{id}/{variant}"
        );
    }
}

/// The cause ids of every report of every corpus log.
fn corpus_causes() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for e in fs::read_dir(root().join("tests/data/nccl-logs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "log") {
            continue;
        }
        let mut a = Analyzer::new();
        a.read(&p.display().to_string(), fs::File::open(&p).unwrap())
            .unwrap();
        out.extend(a.finish().verdicts.into_iter().map(|v| v.cause));
    }
    out
}

/// String literals in `text` that follow one of `marks` (`cause: "`, `plain("`).
fn literals_after<'a>(text: &'a str, marks: &[&str]) -> Vec<&'a str> {
    let mut out = Vec::new();
    for m in marks {
        let mut from = 0;
        while let Some(i) = text[from..].find(m) {
            let at = from + i + m.len();
            from = at;
            let end = text[at..].find('"').map_or(at, |e| at + e);
            out.push(&text[at..end]);
        }
    }
    out.into_iter().filter(|w| is_id(w)).collect()
}

#[test]
fn every_cause_id_used_anywhere_has_an_entry() {
    let mut missing = Vec::new();
    for c in corpus_causes() {
        if causes::get(&c).is_none() {
            missing.push(format!("a corpus verdict: {c}"));
        }
    }
    // Where the code and the tests name a cause.
    let code_marks = [
        "cause: \"",
        "cause == \"",
        "cause != \"",
        "fail(\"",
        "derived(\"",
        "of(\"",
        "get(\"",
        "explain(\"",
        // The flight recorder's verdicts (flight/judge.rs) start from `base("fr_...", ...)`.
        "base(\"",
    ];
    let test_marks = ["plain(\"", "s(\"", "cause: \"", "cause == \"", "fail(\""];
    let mut files: Vec<(String, &[&str])> = Vec::new();
    let mut dirs = vec![root().join("src/nccl_log")];
    while let Some(d) = dirs.pop() {
        for e in fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                files.push((p.display().to_string(), &code_marks));
            }
        }
    }
    for e in fs::read_dir(root().join("tests")).unwrap() {
        let p = e.unwrap().path().display().to_string();
        if p.contains("nccl_log") && p.ends_with(".rs") {
            files.push((p, &test_marks));
        }
    }
    let fields = [
        "nccl_result",
        "error_trail",
        "vendor_err",
        "local_gid",
        "remote_gid",
        "knock_ons",
    ];
    for (f, marks) in files {
        let text = fs::read_to_string(&f).unwrap();
        for w in literals_after(&text, marks) {
            if causes::get(w).is_none() && !fields.contains(&w) && !w.starts_with("ncc") {
                missing.push(format!("{f}: {w}"));
            }
        }
    }
    // docs/probes.md's nccl-log section names causes in backticks.
    let doc = fs::read_to_string(root().join("docs/probes.md")).unwrap();
    let from = doc
        .find("## `fabprobe nccl-env` and `fabprobe nccl-log`")
        .unwrap();
    let section = &doc[from..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    // The generated table (checked whole below) quotes the texts NCCL prints, not ids.
    let section = match (section.find(BEGIN), section.find(END)) {
        (Some(a), Some(b)) if a < b => format!("{}{}", &section[..a], &section[b..]),
        _ => section.to_string(),
    };
    let json_fields = [
        "nccl_result",
        "vendor_err",
        "local_gid",
        "remote_gid",
        "knock_ons",
        "nccl_lines",
        "line_no",
        "socket_interfaces",
        "ring_sample",
        "world_size",
        "nccl_versions",
        "full_path",
        "unrecognised_lines",
    ];
    // Not causes: kernel and driver names the section cites; test names (five or more
    // words) and device names (digits) are not ids either.
    let others = ["nv_mem_nc", "sched_autogroup_enabled"];
    let cause_shaped =
        |w: &&str| is_id(w) && w.matches('_').count() < 5 && !w.contains(|c: char| c.is_ascii_digit());
    for w in section.split('`').skip(1).step_by(2).filter(cause_shaped) {
        if causes::get(w).is_none()
            && !json_fields.contains(&w)
            && !others.contains(&w)
            && !w.starts_with("nccl_")
        {
            missing.push(format!("docs/probes.md: {w}"));
        }
    }
    assert!(
        missing.is_empty(),
        "cause ids without a registry entry:\n{}",
        missing.join("\n")
    );
}

/// The man page (generated from `--help`, itself from the registry) lists every cause.
#[test]
fn the_man_page_lists_every_cause() {
    let man = fs::read_to_string(root().join("man/fabprobe-nccl-log.1")).unwrap();
    for c in CAUSES {
        assert!(
            man.contains(&c.id.replace('_', "\\_")) || man.contains(c.id),
            "man page lacks {}",
            c.id
        );
    }
}

const BEGIN: &str = "<!-- nccl-log causes: generated from src/nccl_log/causes.rs -->\n";
const END: &str = "<!-- end of nccl-log causes -->";

/// docs/probes.md's cause table is the registry's (FABPROBE_UPDATE_DOCS=1 rewrites it).
#[test]
fn the_doc_cause_table_is_current() {
    let path = root().join("docs/probes.md");
    let doc = fs::read_to_string(&path).unwrap();
    let a = doc.find(BEGIN).expect("docs/probes.md: no cause table marker") + BEGIN.len();
    let b = a + doc[a..].find(END).expect("docs/probes.md: no end marker");
    let want = causes::doc_table();
    if std::env::var_os("FABPROBE_UPDATE_DOCS").is_some() {
        fs::write(&path, format!("{}{want}{}", &doc[..a], &doc[b..])).unwrap();
    } else {
        assert!(
            doc[a..b] == want,
            "docs/probes.md's cause table is stale; run: FABPROBE_UPDATE_DOCS=1 cargo test --test nccl_log_registry"
        );
    }
}
