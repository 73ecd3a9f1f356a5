//! Rules a reader can find (issue 29): each probe's rules sit in one table (`RULES`) that
//! its findings, `check`, the man page's FINDINGS list and this test read. Every finding
//! any command writes on any fixture is a rule of its command's table (or, for `check`,
//! of a probe's table or check's own documented list), no table names an id twice, and
//! every id of a table is in its generated man page.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use fabprobe::finding::{RuleDoc, Severity, docs};
use fabprobe::probe::{gdr, gids, links, nccl_env, qos, topo};

fn tables() -> Vec<(&'static str, Vec<RuleDoc>)> {
    vec![
        ("gids", docs(gids::RULES)),
        ("links", docs(links::RULES)),
        ("gdr", docs(gdr::RULES)),
        ("qos", docs(qos::RULES)),
        ("nccl-env", docs(nccl_env::RULES)),
        ("topo", docs(topo::RULES)),
    ]
}

fn ids(d: &[RuleDoc]) -> BTreeSet<&'static str> {
    d.iter().flat_map(|r| r.ids.iter().copied()).collect()
}

fn fixtures() -> Vec<String> {
    common::fixture_names()
}

/// The finding ids of `fabprobe --root FIXTURE ARGS --format json`.
fn finding_ids(fixture: &str, args: &[&str]) -> Vec<String> {
    finding_sevs(fixture, args).into_iter().map(|(id, _)| id).collect()
}

/// The (id, severity) of each finding of `fabprobe --root FIXTURE ARGS --format json`.
fn finding_sevs(fixture: &str, args: &[&str]) -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(fixture);
    let out = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .arg("--root")
        .arg(&root)
        .args(args)
        .args(["--format", "json"])
        .output()
        .unwrap();
    let code = out.status.code().unwrap_or(-1);
    assert!(
        matches!(code, 0 | 1 | 3),
        "{fixture} {args:?}: exit {code}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{fixture} {args:?}: not JSON: {e}"));
    v["findings"]
        .as_array()
        .unwrap_or_else(|| panic!("{fixture} {args:?}: no findings array"))
        .iter()
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap_or("").to_string();
            (s("id"), s("severity"))
        })
        .collect()
}

#[test]
fn no_table_names_an_id_twice_and_every_id_is_in_its_man_page() {
    let mut all = tables();
    all.push(("check", fabprobe::check::run::check_rule_docs()));
    for (cmd, d) in all {
        let mut seen = BTreeSet::new();
        for id in d.iter().flat_map(|r| r.ids.iter()) {
            assert!(seen.insert(*id), "{cmd}: {id} is in two rules");
        }
        let page = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("man/fabprobe-{cmd}.1"));
        let text = std::fs::read_to_string(&page).unwrap();
        for id in &seen {
            // roff escapes nothing in an id but may break a long line after a comma.
            assert!(
                text.contains(id),
                "{}: {id} is missing (run `cargo run --release -- gen-docs man`)",
                page.display()
            );
        }
        for r in &d {
            // A rule names what it may give: never a pass, each severity once.
            let mut seen = r.severity.to_vec();
            seen.sort();
            seen.dedup();
            assert!(
                !r.severity.is_empty() && !r.allows(Severity::Pass) && seen.len() == r.severity.len(),
                "{cmd}: {:?} has severity {:?}",
                r.ids,
                r.severity
            );
        }
    }
}

#[test]
fn every_finding_on_every_fixture_is_a_rule_of_its_table() {
    let tables = tables();
    let all: BTreeSet<&str> = tables.iter().flat_map(|(_, d)| ids(d)).collect();
    let own = ids(&fabprobe::check::run::check_rule_docs());
    let mut bad = Vec::new();
    let mut fired = BTreeSet::new();
    for f in fixtures() {
        for (cmd, d) in &tables {
            let known = ids(d);
            for id in finding_ids(&f, &[cmd]) {
                if !known.contains(id.as_str()) {
                    bad.push(format!("{f} {cmd}: {id} is in no rule of {cmd}'s table"));
                }
                fired.insert(id);
            }
        }
        for id in finding_ids(&f, &["check"]) {
            let documented =
                all.contains(id.as_str()) || id.starts_with("policy.") || own.contains(id.as_str());
            if !documented {
                bad.push(format!(
                    "{f} check: {id} is in no probe's table nor check's own (check_rule_docs)"
                ));
            }
        }
    }
    for (cmd, later, earlier) in [
        ("links", "ib-degraded-later", "ib-degraded"),
        ("qos", "roce-pause-storm-later", "roce-pause-storm"),
    ] {
        let base = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures")
            .join(earlier);
        let known = ids(&tables.iter().find(|(c, _)| *c == cmd).unwrap().1);
        for id in finding_ids(later, &[cmd, "--baseline", base.to_str().unwrap()]) {
            if !known.contains(id.as_str()) {
                bad.push(format!(
                    "{later} {cmd} --baseline: {id} is in no rule of {cmd}'s table"
                ));
            }
            fired.insert(id);
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    // The fixtures exercise the tables: most rules fire somewhere (a test that cannot fail
    // would pass on fixtures that judge nothing).
    assert!(
        fired.len() >= 25,
        "only {} distinct finding ids fired: {fired:?}",
        fired.len()
    );
}

/// A finding's severity is one its rule says (`warn|fail` allows either; `unknown` is a
/// rule that says what could not be read, never a warn or a fail).
#[test]
fn every_finding_has_a_severity_its_rule_allows() {
    let mut bad = Vec::new();
    let mut unknown = 0;
    for f in fixtures() {
        for (cmd, d) in tables() {
            for (id, sev) in finding_sevs(&f, &[cmd]) {
                let Some(rule) = d.iter().find(|r| r.ids.contains(&id.as_str())) else {
                    continue;
                };
                if !rule.severity.iter().any(|s| s.as_str() == sev) {
                    bad.push(format!(
                        "{f} {cmd}: {id} is {sev}, its rule says {}",
                        rule.severity_text()
                    ));
                }
                unknown += usize::from(sev == "unknown");
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    // The fixtures hold unreadable facts (ACS as non-root, no peer memory seen).
    assert!(unknown > 0, "no fixture gave an unknown finding");
}
