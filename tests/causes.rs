//! One cause, one finding, on every fixture (issue 42): `fixtures/CAUSES.toml` declares,
//! from how each fixture was made, the causes each shipped policy must fail for. For every
//! fixture x every shipped policy (and the `--baseline` pairs): the fail findings are
//! exactly those causes (one each, no symptom counted), the worst is one of them, and the
//! Slurm drop-in drains for it.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The shipped policies: every `checks/*.toml` (the builtins are those files).
fn policies() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(Path::new(ROOT).join("checks"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".toml").map(str::to_string))
        .collect();
    v.sort();
    assert_eq!(
        v,
        ["default", "dgx-h100", "hdr-a100", "roce-dcqcn"],
        "a new policy needs its causes declared"
    );
    v
}

/// Every snapshot tree under fixtures/, and the before/after pairs a baseline compares.
fn cases() -> Vec<(String, Option<String>)> {
    let mut v: Vec<(String, Option<String>)> = std::fs::read_dir(Path::new(ROOT).join("fixtures"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("sys").is_dir())
        .map(|e| (e.file_name().to_str().unwrap().to_string(), None))
        .collect();
    // A `-later` tree was sampled after its sibling: the pair is a counter-rate case; a
    // `-rebooted` one after a reboot: the pair is a reset, judged without rates.
    let later: Vec<(String, Option<String>)> = v
        .iter()
        .filter_map(|(f, _)| {
            let base = f.strip_suffix("-later").or_else(|| f.strip_suffix("-rebooted"))?;
            Some((f.clone(), Some(base.to_string())))
        })
        .collect();
    v.extend(later);
    v.sort();
    v
}

fn key(fixture: &str, baseline: &Option<String>) -> String {
    match baseline {
        Some(b) => format!("{fixture}+{b}"),
        None => fixture.to_string(),
    }
}

fn check(fixture: &str, baseline: &Option<String>, policy: &str) -> serde_json::Value {
    let root = format!("fixtures/{fixture}");
    let mut args = vec!["--root", &root, "--format", "json", "check", "--policy", policy];
    let b = baseline.as_ref().map(|b| format!("fixtures/{b}"));
    if let Some(b) = &b {
        args.extend(["--baseline", b.as_str()]);
    }
    let o = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .args(&args)
        .current_dir(ROOT)
        .output()
        .unwrap();
    let code = o.status.code();
    assert!(
        // 3: nothing to judge (no GPU and no RDMA device), no fail either.
        matches!(code, Some(0 | 1 | 3)),
        "{fixture} {policy}: exit {code:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

type Truth = BTreeMap<String, BTreeMap<String, toml::Value>>;

fn truth() -> Truth {
    let text = std::fs::read_to_string(Path::new(ROOT).join("fixtures/CAUSES.toml")).unwrap();
    toml::from_str(&text).unwrap()
}

/// The declared causes of a case under a policy, each `id subject`.
fn declared(t: &Truth, case: &str, policy: &str) -> Vec<String> {
    let entry = t
        .get(case)
        .unwrap_or_else(|| panic!("fixtures/CAUSES.toml has no [{case}]"));
    assert!(
        entry.get("made").and_then(|m| m.as_str()).is_some(),
        "[{case}] says how it was made"
    );
    let list = entry
        .get(policy)
        .unwrap_or_else(|| panic!("fixtures/CAUSES.toml [{case}] declares nothing for {policy}"));
    let mut v: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

fn fails(v: &serde_json::Value) -> Vec<String> {
    let mut out: Vec<String> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] == "fail")
        .map(|f| format!("{} {}", f["id"].as_str().unwrap(), f["subject"].as_str().unwrap()))
        .collect();
    out.sort();
    out
}

#[test]
fn every_fixture_fails_once_per_declared_cause_under_every_policy() {
    let t = truth();
    let mut wrong = Vec::new();
    let mut n = 0;
    for (fixture, baseline) in cases() {
        let case = key(&fixture, &baseline);
        for p in policies() {
            n += 1;
            let v = check(&fixture, &baseline, &p);
            let want = declared(&t, &case, &p);
            let got = fails(&v);
            if got != want {
                wrong.push(format!(
                    "{case} {p}: {} fails for {} causes\n  got  {got:?}\n  want {want:?}",
                    got.len(),
                    want.len()
                ));
            }
            assert_eq!(v["data"]["counts"]["fail"], got.len(), "{case} {p}");
            // The worst (the drain reason) is a declared cause whenever something failed.
            let w = &v["data"]["worst"];
            if !want.is_empty() {
                let named = format!(
                    "{} {}",
                    w["id"].as_str().unwrap_or(""),
                    w["subject"].as_str().unwrap_or("")
                );
                if !want.contains(&named) {
                    wrong.push(format!("{case} {p}: worst {named:?} is not a declared cause"));
                }
            }
        }
    }
    assert!(n >= 15 * 4 + 2 * 4, "{n} cases");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // Nothing declared for a case that no longer exists.
    let known: Vec<String> = cases().iter().map(|(f, b)| key(f, b)).collect();
    let stale: Vec<&String> = t.keys().filter(|k| !known.contains(k)).collect();
    assert!(stale.is_empty(), "{stale:?}");
}

/// The Slurm health check program drains for the worst cause, on every failing case.
#[test]
fn the_drop_ins_drain_for_the_worst_cause() {
    let needs = [
        common::Need::Program("sh", "dash"),
        common::Need::Program("awk", "mawk"),
        common::Need::Program("timeout", "coreutils"),
    ];
    if !common::lab_ready("the_drop_ins_drain_for_the_worst_cause", &needs) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // Removed before each run: each run's drain line alone.
    let (log, path) = common::fake_scontrol(tmp.path());
    let t = truth();
    let mut wrong = Vec::new();
    for (fixture, baseline) in cases().into_iter().filter(|(_, b)| b.is_none()) {
        for p in policies() {
            if declared(&t, &fixture, &p).is_empty() {
                continue;
            }
            let _ = std::fs::remove_file(&log);
            let st = Command::new("checks/slurm/fabprobe-healthcheck")
                .current_dir(ROOT)
                .env("PATH", &path)
                .env("FABPROBE", env!("CARGO_BIN_EXE_fabprobe"))
                .env("FABPROBE_ARGS", format!("--root fixtures/{fixture}"))
                .env("FABPROBE_POLICY", &p)
                .env("FABPROBE_NODENAME", "n1")
                .status()
                .unwrap();
            assert!(st.success());
            let args = std::fs::read_to_string(&log).unwrap_or_default();
            let reason = args.lines().find_map(|l| l.strip_prefix("Reason=")).unwrap_or("");
            let w = check(&fixture, &baseline, &p)["data"]["worst"].clone();
            let cause = format!("{} {}", w["id"].as_str().unwrap(), w["subject"].as_str().unwrap());
            let said = format!("fabprobe {p}: {cause}").replace('"', "'");
            let said: String = said.chars().take(200).collect();
            if !reason.starts_with(&said) || !declared(&t, &fixture, &p).contains(&cause) {
                wrong.push(format!(
                    "{fixture} {p}: drained for {reason:?}, the worst cause is {cause:?}"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

fn topo(fixture: &str) -> serde_json::Value {
    let root = format!("fixtures/{fixture}");
    let o = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .args(["--root", &root, "--format", "json", "topo"])
        .current_dir(ROOT)
        .output()
        .unwrap();
    assert!(
        matches!(o.status.code(), Some(0 | 1 | 3)),
        "{fixture} topo: {:?}",
        o.status
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// `id (subject)`, as a cause lists what it explains under `also`.
fn named(f: &serde_json::Value) -> String {
    format!(
        "{} ({})",
        f["id"].as_str().unwrap(),
        f["subject"].as_str().unwrap()
    )
}

/// `topo` and `check` name the same worst cause for one report: of check's findings that
/// carry a topo finding (as the cause, or under its `also`), the first in check's ranking
/// at topo's worst severity is topo's worst, on every fixture under every policy.
#[test]
fn topo_and_check_name_the_same_worst_cause() {
    let mut wrong = Vec::new();
    let mut n = 0;
    for (fixture, _) in cases().into_iter().filter(|(_, b)| b.is_none()) {
        let t = topo(&fixture);
        let sev = |f: &serde_json::Value| f["severity"].as_str().unwrap_or("").to_string();
        let tf = t["findings"].as_array().unwrap();
        let Some(worst) = ["fail", "warn"]
            .iter()
            .find_map(|s| tf.iter().find(|f| sev(f) == *s))
        else {
            continue;
        };
        let topo_worst = named(worst);
        for p in policies() {
            let v = check(&fixture, &None, &p);
            // What a check finding carries: itself, what it folded in (`also`) and the
            // probe finding it stands for (`same_cause`), each `id (subject)`; a warning
            // check lists once for several subjects (`a, b`) is each of them.
            let carried = |f: &serde_json::Value| -> Vec<String> {
                let id = f["id"].as_str().unwrap_or("");
                let mut v: Vec<String> = f["subject"]
                    .as_str()
                    .unwrap_or("")
                    .split(", ")
                    .map(|s| format!("{id} ({s})"))
                    .collect();
                for x in f["evidence"]["also"].as_array().into_iter().flatten() {
                    let x = x.as_str().unwrap_or("");
                    v.push(
                        x.split_once("): ")
                            .map_or(x.to_string(), |(a, _)| format!("{a})")),
                    );
                }
                // `id subject; id subject`.
                for one in f["evidence"]["same_cause"].as_str().unwrap_or("").split("; ") {
                    if let Some((i, s)) = one.split_once(' ') {
                        v.push(format!("{i} ({s})"));
                    }
                }
                v
            };
            let carries = |f: &serde_json::Value| carried(f).iter().any(|c| c.starts_with("topo."));
            // Findings about devices NCCL would not use are set aside by check, not judged.
            let set_aside: Vec<String> = v["data"]["not_used_by_nccl"]
                .as_array()
                .map(|a| a.iter().map(named).collect())
                .unwrap_or_default();
            if set_aside.contains(&topo_worst) {
                continue;
            }
            n += 1;
            let first = v["findings"]
                .as_array()
                .unwrap()
                .iter()
                .find(|f| carries(f) && sev(f) == sev(worst));
            let agrees = first.is_some_and(|f| carried(f).contains(&topo_worst));
            if !agrees {
                wrong.push(format!(
                    "{fixture} {p}: topo's worst is {topo_worst}, check's first topo cause {:?}",
                    first.map(named)
                ));
            }
        }
    }
    assert!(n >= 20, "{n} cases compared");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Whether a not-evaluated entry says there was nothing to judge (a probe's
/// `*.nothing_to_judge`, a rule's `... to judge`, or a reason naming a fact that is absent):
/// the words the producers use today, read here only to find the entries that must carry
/// the typed fact `check` folds by.
fn says_nothing_to_judge(key: &str, reason: &str) -> bool {
    let first = reason.split("; and ").next().unwrap_or(reason);
    const ABSENT: &[&str] = &[
        "no NVIDIA GPU and no RDMA device",
        "no RDMA device",
        "0 GPUs found",
        "no GPU on this host",
        "no RoCE netdev",
        "no RoCE port",
        "no Ethernet ports",
        "no InfiniBand ports",
    ];
    key.ends_with(".nothing_to_judge")
        || first.contains(" to judge")
        || ABSENT.iter().any(|a| first.contains(a))
}

/// The reasons of the nothing-to-judge kind that rest on no missing fact: a single GPU (a
/// pair rule's), RDMA devices without ports.
fn of_its_own(reason: &str) -> bool {
    reason.contains("(1 GPUs found)") || reason.starts_with("nothing to judge: no RDMA ports")
}

/// Every not-evaluated entry of the nothing-to-judge kind, on every fixture x every shipped
/// policy (and the baseline pairs), carries the typed missing fact the verdict line folds
/// by: a producer that words a reason without it fails here, not silently in the renderer.
#[test]
fn every_nothing_to_judge_entry_names_its_missing_fact() {
    const FACTS: [&str; 6] = [
        "gpu_and_rdma",
        "rdma_device",
        "gpu",
        "roce_netdev",
        "infiniband_port",
        "qos_reading",
    ];
    let mut wrong = Vec::new();
    let mut seen = BTreeMap::<String, usize>::new();
    for (fixture, baseline) in cases() {
        for p in policies() {
            let v = check(&fixture, &baseline, &p);
            for n in v["data"]["not_evaluated"].as_array().unwrap() {
                let (k, r) = (n["key"].as_str().unwrap(), n["reason"].as_str().unwrap());
                let fact = n.get("missing").expect("every entry has the field (null: none)");
                if let Some(f) = fact.as_str() {
                    assert!(FACTS.contains(&f), "{fixture} {p} {k}: unknown fact {f}");
                    *seen.entry(f.to_string()).or_default() += 1;
                } else if says_nothing_to_judge(k, r) && !of_its_own(r) {
                    wrong.push(format!("{} {p} {k}: {r}", key(&fixture, &baseline)));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "nothing to judge without the typed fact:\n{}",
        wrong.join("\n")
    );
    // The sweep reaches every fact (else a producer of it is untested here).
    let reached: Vec<&str> = seen.keys().map(String::as_str).collect();
    assert_eq!(reached.len(), FACTS.len(), "facts reached: {seen:?}");
}
