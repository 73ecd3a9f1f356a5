//! "NOT EVALUATED" is a finding, in every command (issue 42): every host command
//! (`fabprobe::cli::COMMANDS`, `check` under every shipped policy) on every fixture, under
//! the NCCL settings that open no port (NCCL_IB_DISABLE=1, an NCCL_IB_HCA that selects
//! nothing) and `qos --ifname` of every netdev of the fixture, in text, JSON and metrics:
//! (a) a NOT EVALUATED / not evaluated line of the text has an `unknown` finding behind it in
//! the JSON; (b) a run that judged nothing exits 3, never 0, and exit 3 is said by a
//! `*.nothing_to_judge` finding; (c) a run that saw no device of the kind it judges says so
//! as a finding, and its metrics carry the device count (0) an alert can use.

mod common;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

const SETTINGS: &[(&str, &str)] = &[
    ("default", ""),
    ("NCCL_IB_DISABLE=1", "NCCL_IB_DISABLE=1\n"),
    ("NCCL_IB_HCA selecting nothing", "NCCL_IB_HCA==nosuch_9\n"),
];


/// Every run of one fixture: each host command (check once per policy, qos once more per
/// netdev with --ifname).
fn runs(fixture: &str) -> Vec<Vec<String>> {
    let mut v = Vec::new();
    for cmd in common::host_commands() {
        match cmd {
            "check" => v.extend(
                common::policies()
                    .into_iter()
                    .map(|p| vec!["check".into(), "--policy".into(), p]),
            ),
            "qos" => {
                v.push(vec!["qos".into()]);
                let net = Path::new(ROOT)
                    .join("fixtures")
                    .join(fixture)
                    .join("sys/class/net");
                let mut names: Vec<String> = std::fs::read_dir(net)
                    .into_iter()
                    .flatten()
                    .filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .collect();
                names.sort();
                v.extend(
                    names
                        .into_iter()
                        .map(|n| vec!["qos".into(), "--ifname".into(), n]),
                );
            }
            c => v.push(vec![c.to_string()]),
        }
    }
    v
}

struct Run {
    code: i32,
    out: String,
    err: String,
}

fn go(fixture: &str, env: &Path, args: &[String], format: &str) -> Run {
    let o = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .args(["--root", &format!("fixtures/{fixture}"), "--format", format])
        .arg("--env-file")
        .arg(env)
        .args(args)
        .current_dir(ROOT)
        .output()
        .unwrap();
    Run {
        code: o.status.code().unwrap_or(-1),
        out: String::from_utf8_lossy(&o.stdout).into_owned(),
        err: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

fn sev(f: &Value) -> &str {
    f["severity"].as_str().unwrap_or("")
}

/// The unknown findings of a report: its own, and those a cause carries under `also`.
fn unknowns(v: &Value) -> usize {
    let fs = v["findings"].as_array().unwrap();
    let own = fs.iter().filter(|f| sev(f) == "unknown").count();
    let also = fs
        .iter()
        .flat_map(|f| f["evidence"]["also"].as_array().into_iter().flatten())
        .filter(|a| a.as_str().is_some_and(|a| a.contains("not evaluated")))
        .count();
    let listed = v["data"]["not_evaluated"].as_array().map_or(0, Vec::len);
    own + also + listed
}

fn nothing_to_judge(v: &Value) -> bool {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| sev(f) == "unknown" && f["id"].as_str().unwrap_or("").ends_with(".nothing_to_judge"))
}

/// The device counts of a command's metrics (`fabprobe_<cmd>_devices{...kind="k"} n`).
fn device_counts(prom: &str, cmd: &str) -> Vec<(String, u64)> {
    let head = format!("fabprobe_{}_devices{{", cmd.replace('-', "_"));
    prom.lines()
        .filter_map(|l| l.strip_prefix(&head))
        .filter_map(|l| {
            let kind = l.split("kind=\"").nth(1)?.split('"').next()?.to_string();
            Some((kind, l.rsplit(' ').next()?.parse().ok()?))
        })
        .collect()
}

/// What the run had to judge, read from its own report (not from its findings): None when
/// the command's report has no such count.
fn judged_nothing(cmd: &[String], v: &Value) -> Option<bool> {
    let d = &v["data"];
    let empty = |k: &str| d[k].as_array().is_none_or(Vec::is_empty);
    Some(match cmd[0].as_str() {
        "topo" => empty("gpus") && empty("nics"),
        // A pair judged is one NCCL would use; none when no port is opened.
        "gdr" => !d["pairs"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["nccl_nearest"] == true),
        // An interface with no QoS reading at all: no DCB answer, no counters, no ECN.
        "qos" => d["interfaces"].as_array().into_iter().flatten().all(|i| {
            i["dcb"]["pfc_enabled"].is_null() && i["ethtool"]["counters_total"] == 0 && i["ecn"].is_null()
        }),
        _ => return None,
    })
}

#[test]
fn not_evaluated_always_has_a_finding_behind_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut wrong = Vec::new();
    let mut n = 0;
    let mut unknown_runs = 0;
    for fixture in common::fixture_names() {
        for (i, (name, text)) in SETTINGS.iter().enumerate() {
            let env = dir.path().join(format!("env{i}"));
            std::fs::write(&env, text).unwrap();
            for args in runs(&fixture) {
                let cmd = args[0].as_str();
                // Every name --ifname is given here exists: the qos runs under the default
                // settings only (the NCCL settings change no QoS reading).
                if args.len() > 1 && cmd == "qos" && i > 0 {
                    continue;
                }
                n += 1;
                let at = format!("{fixture} {} under {name}", args.join(" "));
                let j = go(&fixture, &env, &args, "json");
                let t = go(&fixture, &env, &args, "table");
                assert!(matches!(j.code, 0 | 1 | 3), "{at}: exit {}: {}", j.code, j.err);
                assert_eq!(j.code, t.code, "{at}: table and JSON exit differently");
                let v: Value = serde_json::from_str(&j.out).unwrap_or_else(|e| panic!("{at}: {e}"));
                // (a) Every NOT EVALUATED / not evaluated line has an unknown finding.
                let said: Vec<&str> = t
                    .out
                    .lines()
                    .chain(t.err.lines())
                    .filter(|l| l.contains("NOT EVALUATED") || l.contains("not evaluated"))
                    .collect();
                if !said.is_empty() && unknowns(&v) == 0 {
                    wrong.push(format!(
                        "{at}: the text says {:?}, no unknown finding in the JSON",
                        said[0]
                    ));
                }
                let verdict_line =
                    t.out.lines().next().unwrap_or("").to_string() + t.err.lines().next().unwrap_or("");
                if verdict_line.contains("NOT EVALUATED") && cmd != "check" && !nothing_to_judge(&v) {
                    wrong.push(format!(
                        "{at}: NOT EVALUATED verdict with no *.nothing_to_judge finding"
                    ));
                }
                // (b) Exit 3 is a nothing_to_judge finding (check: its verdict), and a finding
                // that says nothing was judged is exit 3 unless something failed.
                let fails = v["findings"].as_array().unwrap().iter().any(|f| sev(f) == "fail");
                let unknown = if cmd == "check" {
                    v["data"]["verdict"] == "unknown"
                } else {
                    nothing_to_judge(&v)
                };
                if j.code == 3 && !unknown {
                    wrong.push(format!(
                        "{at}: exit 3 with no finding that says nothing was judged"
                    ));
                }
                if unknown && !fails && j.code != 3 {
                    wrong.push(format!("{at}: nothing judged, exit {}", j.code));
                }
                if let Some(nothing) = judged_nothing(&args, &v)
                    && nothing
                    && !fails
                    && j.code != 3
                {
                    wrong.push(format!(
                        "{at}: the report has nothing judged, exit {} (findings {:?})",
                        j.code,
                        ids(&v)
                    ));
                }
                if j.code == 3 {
                    unknown_runs += 1;
                }
                // (c) The metrics count the devices; none of the kind judged is exit 3.
                if common::formats(cmd).contains(&"prom") {
                    let p = go(&fixture, &env, &args, "prom");
                    assert_eq!(p.code, j.code, "{at}: prom and JSON exit differently");
                    let counts = device_counts(&p.out, cmd);
                    if counts.is_empty() {
                        wrong.push(format!("{at}: the metrics carry no device count"));
                    } else if counts.iter().all(|(_, c)| *c == 0) && !fails && (j.code != 3 || !unknown) {
                        wrong.push(format!(
                            "{at}: 0 devices ({counts:?}), exit {}, no finding says so",
                            j.code
                        ));
                    }
                }
            }
        }
    }
    assert!(n > 500, "{n} runs");
    assert!(
        unknown_runs > 20,
        "only {unknown_runs} runs judged nothing: the sweep no longer reaches the class"
    );
    assert!(wrong.is_empty(), "{} runs:\n{}", wrong.len(), wrong.join("\n"));
}

fn ids(v: &Value) -> Vec<String> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| format!("{}:{}", sev(f), f["id"].as_str().unwrap_or("")))
        .collect()
}
