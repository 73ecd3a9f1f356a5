//! The direction of the arrows in the design (shared/design.md): lower layers never name
//! the layers above them. Read from the source, so a new import that breaks it fails here.

use std::path::Path;

fn sources(dir: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join(dir)];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p
                    .strip_prefix(env!("CARGO_MANIFEST_DIR"))
                    .unwrap()
                    .display()
                    .to_string();
                out.push((rel, std::fs::read_to_string(&p).unwrap()));
            }
        }
    }
    out
}

fn offenders(dir: &str, above: &[&str], pending: &[&str]) -> Vec<String> {
    sources(dir)
        .into_iter()
        .filter(|(p, _)| !pending.contains(&p.as_str()))
        .filter_map(|(p, text)| {
            let hits: Vec<&str> = above
                .iter()
                .copied()
                .filter(|m| text.contains(&format!("crate::{m}::")) || text.contains(&format!("crate::{m};")))
                .collect();
            (!hits.is_empty()).then(|| format!("{p} names {hits:?}"))
        })
        .collect()
}

#[test]
fn probes_and_nccl_rules_never_name_the_layers_above() {
    for dir in ["src/probe", "src/nccl", "src/sysfs", "src/host", "src/snapshot"] {
        let bad = offenders(dir, &["check", "render", "cli"], &[]);
        assert!(bad.is_empty(), "{bad:?}");
    }
}

/// `check` judges; it does not render. `src/check/sweep.rs` still imports the envelope's
/// version through `render` (a re-export of `finding::SCHEMA_VERSION`): that file is being
/// reworked on another branch, which drops the import.
#[test]
fn check_never_names_render() {
    let bad = offenders("src/check", &["render", "cli"], &["src/check/sweep.rs"]);
    assert!(bad.is_empty(), "{bad:?}");
}

/// No probe, rule or check reads `NCCL_*` from the process environment: the settings model
/// (`nccl::settings`) is the one source.
#[test]
fn nothing_below_the_cli_reads_nccl_variables_itself() {
    for dir in ["src/probe", "src/nccl", "src/check", "src/host", "src/snapshot"] {
        for (p, text) in sources(dir) {
            for pat in ["env::var(\"NCCL_", "env::var_os(\"NCCL_", "env_var(\"NCCL_"] {
                assert!(!text.contains(pat), "{p} reads NCCL_* itself ({pat})");
            }
        }
    }
}
