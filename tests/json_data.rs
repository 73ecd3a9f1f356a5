//! Every field a command writes under `data` in its JSON report is named in the JSON DATA
//! section of its `--help` (and so of its man page), issue 46. The sections are read from the
//! help the binary prints; the fields from real reports: every probe and `check` on every
//! fixture (and a baseline pair), `sweep` of those checks, `nccl-log` on the log corpus and
//! the flight-recorder dumps, `ring` run in-process and the recorded lab reports.

mod common;
#[path = "common/fnlen.rs"]
mod fnlen;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const BIN: &str = env!("CARGO_BIN_EXE_fabprobe");

/// Objects whose keys are data (kernel file names, versions, hosts, ranks, links), each
/// documented as such in its section (`{version: [host]}`, `{"from->to": gbs}`).
const MAPS: &[(&str, &str)] = &[
    ("qos", "rp_params"),
    ("qos", "np_params"),
    ("nccl-log", "nccl_versions"),
    ("nccl-log", "transports"),
    ("nccl-log", "gdr"),
    ("nccl-log", "hosts"),
    ("ring", "line_rate_gbs"),
    ("ring", "links_gbs"),
    ("ring", "port_counters"),
];

fn run(args: &[&str]) -> Vec<u8> {
    let o = Command::new(BIN).args(args).current_dir(ROOT).output().unwrap();
    o.stdout
}

/// The words of `cmd`'s JSON DATA section: from its heading to the next heading (a line at
/// the margin whose first word is capitals).
fn documented(cmd: &str) -> BTreeSet<String> {
    let help = String::from_utf8(run(&[cmd, "--help"])).unwrap();
    let start = help.find("JSON DATA").unwrap_or_else(|| panic!("{cmd} --help has no JSON DATA"));
    let mut section = String::new();
    for (i, line) in help[start..].lines().enumerate() {
        let first = line.split_whitespace().next().unwrap_or("");
        let heading = !line.starts_with(' ')
            && first.len() >= 3
            && first.chars().all(|c| c.is_ascii_uppercase());
        if i > 0 && heading {
            break;
        }
        section.push_str(line);
        section.push('\n');
    }
    section
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

/// Every key under `v`, with the first path it was seen at.
fn keys(cmd: &str, v: &Value, path: &str, out: &mut BTreeMap<String, String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                out.entry(k.clone()).or_insert_with(|| path.to_string());
                // A map's values are still walked when they are objects of named fields.
                let map = MAPS.contains(&(cmd, k.as_str()));
                if !map || !x.as_object().is_some_and(|o| o.values().all(|v| !v.is_object())) {
                    keys(cmd, x, &format!("{path}.{k}"), out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| keys(cmd, x, &format!("{path}[]"), out)),
        _ => {}
    }
}

fn data_keys(cmd: &str, reports: &[Vec<u8>]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut parsed = 0;
    for r in reports {
        // check prints one line per report; sweep and the probes one document.
        for doc in serde_json::Deserializer::from_slice(r).into_iter::<Value>() {
            let doc = doc.unwrap_or_else(|e| panic!("{cmd}: not JSON: {e}"));
            if doc["schema"].as_str().is_some_and(|s| s.ends_with(cmd)) {
                parsed += 1;
                keys(cmd, &doc["data"], "", &mut out);
            }
        }
    }
    assert!(parsed > 0, "{cmd}: no report of its schema read");
    out
}

/// `key` is a word of the section, or a key with a number at its end (`cpu_wait_rank_3`)
/// is documented with a letter there (`cpu_wait_rank_R`).
fn named(words: &BTreeSet<String>, key: &str) -> bool {
    if words.contains(key) {
        return true;
    }
    let stem = key.trim_end_matches(|c: char| c.is_ascii_digit());
    stem.len() < key.len() && stem.ends_with('_') && ["R", "N"].iter().any(|l| words.contains(&format!("{stem}{l}")))
}

fn undocumented(cmd: &str, reports: &[Vec<u8>]) -> Vec<String> {
    let words = documented(cmd);
    data_keys(cmd, reports)
        .into_iter()
        .filter(|(k, _)| !named(&words, k))
        .map(|(k, p)| format!("{cmd}: `{k}` (at data{p})"))
        .collect()
}

fn fixtures() -> Vec<String> {
    let v: Vec<String> = common::fixture_names()
        .iter()
        .map(|f| Path::new(ROOT).join("fixtures").join(f).display().to_string())
        .collect();
    assert!(v.len() >= 10, "{v:?}");
    v
}

fn files(dir: &str, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(Path::new(ROOT).join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    v.sort();
    v
}

#[test]
fn section_and_key_reading() {
    let words = documented("gids");
    assert!(words.contains("ports") && words.contains("gid_tbl_len"), "{words:?}");
    assert!(!words.contains("PROMETHEUS") && !words.contains("fabprobe_infiniband_gid_info"));
    let mut out = BTreeMap::new();
    keys("qos", &serde_json::json!({"a": [{"b": 1}], "rp_params": {"rpg_gd": 1}}), "", &mut out);
    assert_eq!(out.keys().collect::<Vec<_>>(), ["a", "b", "rp_params"]);
    assert!(named(&words, "gid_tbl_len") && !named(&words, "gid_tbl_len_2"));
    let ring = documented("ring");
    assert!(named(&ring, "cpu_wait_rank_3"), "a key with a rank in it is documented as _R");
}

#[test]
fn probes_and_check_document_every_field_they_write() {
    let later = format!("{ROOT}/fixtures/ib-degraded-later");
    let before = format!("{ROOT}/fixtures/ib-degraded");
    let mut bad = Vec::new();
    for cmd in common::host_commands() {
        let mut reports: Vec<Vec<u8>> = fixtures()
            .iter()
            .map(|f| run(&["--root", f, "--format", "json", cmd]))
            .collect();
        if matches!(cmd, "links" | "check" | "qos") {
            reports.push(run(&["--root", &later, "--format", "json", cmd, "--baseline", &before]));
        }
        bad.extend(undocumented(cmd, &reports));
    }
    assert!(bad.is_empty(), "fields written but not in --help's JSON DATA:\n{}", bad.join("\n"));
}

#[test]
fn sweep_documents_every_field_it_writes() {
    let dir = std::env::temp_dir().join(format!("fabprobe-json-data-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (i, f) in fixtures().iter().enumerate() {
        std::fs::write(dir.join(format!("n{i}.json")), run(&["--root", f, "--format", "json", "check"])).unwrap();
    }
    let d = dir.display().to_string();
    let reports = vec![run(&["--format", "json", "sweep", &d])];
    std::fs::remove_dir_all(&dir).ok();
    let bad = undocumented("sweep", &reports);
    assert!(bad.is_empty(), "fields written but not in --help's JSON DATA:\n{}", bad.join("\n"));
}

#[test]
fn nccl_log_documents_every_field_it_writes() {
    let mut reports: Vec<Vec<u8>> = files("tests/data/nccl-logs", "log")
        .iter()
        .map(|p| run(&["--format", "json", "nccl-log", &p.display().to_string()]))
        .collect();
    for e in std::fs::read_dir(Path::new(ROOT).join("tests/data/flight-recorder")).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            reports.push(run(&["--format", "json", "nccl-log", &p.display().to_string()]));
        }
    }
    assert!(reports.len() >= 60, "{}", reports.len());
    let bad = undocumented("nccl-log", &reports);
    assert!(bad.is_empty(), "fields written but not in --help's JSON DATA:\n{}", bad.join("\n"));
}

#[test]
fn ring_documents_every_field_it_writes() {
    let mut reports = vec![run(&["--format", "json", "ring", "--local", "4", "-b", "1M", "-e", "1M", "-n", "2", "--scan"])];
    for dir in ["tests/data/ring-reports", "tests/data/html"] {
        for p in files(dir, "json") {
            reports.push(std::fs::read(p).unwrap());
        }
    }
    let bad = undocumented("ring", &reports);
    assert!(bad.is_empty(), "fields written but not in --help's JSON DATA:\n{}", bad.join("\n"));
}

/// Every evidence key the ring's code can write is named in `ring`'s JSON DATA, whether or
/// not a run or a recorded report here happened to produce the verdict that writes it (a
/// hang, a lost rank, a link error need a lab or a fault). Read from all of `src/ring` but
/// its test modules (a `#[cfg(test)]` item mid-file hides nothing after it), in each form a
/// key is written: `insert("k".into(), ..)` or `.to_string()`, `entry("k"..)`, a
/// `("k".to_string(), ..)` pair a map is built from, and `format!("k_{r}")` into an
/// `evidence` map (each `{..}` any word: `cpu_wait_rank_{}` is documented as
/// `cpu_wait_rank_R`). A key an `evidence` map takes from a variable fails here, so none is
/// out of the test's sight.
#[test]
fn ring_documents_every_evidence_key_its_code_writes() {
    let mut srcs = Vec::new();
    common::rust_files(&Path::new(ROOT).join("src/ring"), &mut srcs);
    srcs.sort();
    let words = documented("ring");
    let mut bad = BTreeSet::new();
    let mut seen = BTreeSet::new();
    for p in srcs {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name == "tests.rs" || name.ends_with("_tests.rs") {
            continue;
        }
        let code = fnlen::outside_test_modules(&std::fs::read_to_string(&p).unwrap());
        let at = p.strip_prefix(ROOT).unwrap().display().to_string();
        for (key, form) in evidence_keys(&code) {
            let ok = match form {
                KeyForm::Literal => named(&words, &key) || UNWRITTEN.iter().any(|(k, _)| *k == key),
                KeyForm::Format => pattern_named(&words, &key),
                KeyForm::Variable => false,
            };
            if !ok {
                bad.insert(format!("ring: `{key}` ({form:?}, {at})"));
            }
            seen.insert(key);
        }
    }
    // The forms the code uses today, each seen: a regex that stopped matching is no pass.
    let unwritten = UNWRITTEN.iter().map(|(k, _)| *k);
    let forms = ["sender_state", "stalls", "explains", "carrier_up", "cpu_wait_rank_{}", "incoming_gbs", "outgoing_gbs"];
    for k in forms.into_iter().chain(unwritten) {
        assert!(seen.contains(k), "evidence key `{k}` not read from src/ring: {seen:?}");
    }
    assert!(bad.is_empty(), "evidence keys written but not in ring --help's JSON DATA (a variable key: write it as a literal):\n{}", bad.into_iter().collect::<Vec<_>>().join("\n"));
}

/// Evidence keys of verdicts that never reach a report, each with why.
const UNWRITTEN: &[(&str, &str)] = &[(
    "stopped_by_rail",
    "rail_stopped is a marker railmerge turns into the rail's error, never a verdict",
)];

#[derive(Debug)]
enum KeyForm {
    /// `"k".into()` and its kin: the key itself.
    Literal,
    /// `format!("k_{r}")`: a pattern of keys.
    Format,
    /// Neither: a name whose value the source does not show.
    Variable,
}

/// The evidence keys `code` writes, each with the form it is written in.
fn evidence_keys(code: &str) -> Vec<(String, KeyForm)> {
    let literal = regex::Regex::new(
        r#"(?:\binsert\(|\bentry\(|[\[,]\s*\()\s*"([a-z][a-z0-9_]*)"\.(?:into|to_string|to_owned)\(\)\s*[,)]"#,
    )
    .unwrap();
    let into_evidence = regex::Regex::new(
        r#"\b(?:evidence|ev)\s*\.\s*(?:insert|entry)\(\s*(format!\(\s*"([^"]*)"|"|[A-Za-z_][A-Za-z0-9_]*)"#,
    )
    .unwrap();
    let mut out: Vec<(String, KeyForm)> =
        literal.captures_iter(code).map(|c| (c[1].to_string(), KeyForm::Literal)).collect();
    for c in into_evidence.captures_iter(code) {
        match (c.get(2), &c[1]) {
            (Some(f), _) => out.push((f.as_str().to_string(), KeyForm::Format)),
            (None, "\"") => {}
            (None, v) => out.push((v.to_string(), KeyForm::Variable)),
        }
    }
    out
}

/// A `format!` key is documented when a word of the section fits it, each `{..}` standing
/// for one word (`cpu_wait_rank_{}` fits `cpu_wait_rank_R`).
fn pattern_named(words: &BTreeSet<String>, format: &str) -> bool {
    let hole = regex::Regex::new(r"\{[^}]*\}").unwrap();
    let parts: Vec<String> = hole.split(format).map(regex::escape).collect();
    let re = regex::Regex::new(&format!("^{}$", parts.join("[A-Za-z0-9]+"))).unwrap();
    words.iter().any(|w| re.is_match(w))
}
