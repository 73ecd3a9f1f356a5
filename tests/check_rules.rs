//! Every rule of every shipped policy (`checks/*.toml`), judged on three hosts: its input
//! present and good (pass), present and bad (fail), absent or unreadable (not_evaluated).
//! The rules are read from the policy files, so a rule added without its three rows fails
//! here. Each host is a fixture copied and changed by one fact in the test.
//! A rule is run alone (a one-rule policy with the shipped value), and only the findings
//! about that rule are looked at.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Changes a copied fixture (`root`) given the rule's value as the policy file writes it.
type Edit = fn(&Path, &str);

#[derive(Clone, Copy)]
struct Host {
    fixture: &'static str,
    /// `None`: the fixture as committed (read in place, not copied).
    edit: Option<Edit>,
}

struct Row {
    rule: &'static str,
    good: Host,
    bad: Host,
    absent: Host,
    /// Extra `check` arguments (counter rates need a baseline).
    baseline: Option<&'static str>,
}

const fn h(fixture: &'static str, edit: Edit) -> Host {
    Host {
        fixture,
        edit: Some(edit),
    }
}

const fn same(fixture: &'static str) -> Host {
    Host { fixture, edit: None }
}

// ---------------------------------------------------------------------------------------
// One-fact edits
// ---------------------------------------------------------------------------------------

fn real(root: &Path, rel: &str) -> PathBuf {
    std::fs::canonicalize(root.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn write(root: &Path, rel: &str, v: &str) {
    std::fs::write(real(root, rel), v).unwrap();
}

fn remove(root: &Path, rel: &str) {
    std::fs::remove_file(real(root, rel)).unwrap();
}

fn nccl_2_21_on_the_library_path(root: &Path, _: &str) {
    let dir = root.join("usr/lib/x86_64-linux-gnu");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("libnccl.so.2.21.5"), b"").unwrap();
}

fn edit_json(root: &Path, side: &str, f: impl FnOnce(&mut Value)) {
    let p = root.join("fabprobe").join(side);
    let mut v: Value = std::fs::read_to_string(&p)
        .ok()
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap_or(json!({}));
    f(&mut v);
    std::fs::write(&p, v.to_string()).unwrap();
}

fn num(v: &str) -> u64 {
    v.trim().parse().unwrap()
}

/// `["NDR"]` -> `NDR`.
fn first_str(v: &str) -> String {
    v.trim_matches(|c| c == '[' || c == ']' || c == ' ')
        .split(',')
        .next()
        .unwrap()
        .trim()
        .trim_matches('"')
        .to_string()
}

fn facts(root: &Path, f: impl FnOnce(&mut serde_json::Map<String, Value>)) {
    edit_json(root, "facts.json", |v| f(v.as_object_mut().unwrap()));
}

fn rdma_unlistable(root: &Path, _: &str) {
    edit_json(root, "read-errors.json", |v| {
        v["/sys/class/infiniband"] = json!("EACCES");
    });
}

fn nvml_unavailable(root: &Path, _: &str) {
    std::fs::write(
        root.join("fabprobe/nvml.json"),
        r#"{"state": "unavailable", "reason": "NVML: driver not loaded"}"#,
    )
    .unwrap();
}

fn no_rdma_devices(root: &Path, _: &str) {
    for e in std::fs::read_dir(root.join("sys/class/infiniband")).unwrap() {
        std::fs::remove_file(e.unwrap().path()).unwrap();
    }
}

/// The IB ports of h100-sxm-8gpu (mlx5_0..7), each port 1.
fn ib_ports(root: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(root.join("sys/class/infiniband"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| {
            std::fs::read_to_string(root.join(format!("sys/class/infiniband/{n}/ports/1/link_layer")))
                .is_ok_and(|l| l.trim() == "InfiniBand")
        })
        .collect();
    v.sort();
    v
}

fn set_rates(root: &Path, speed: &str) {
    let gbps = match speed {
        "NDR" => 400,
        "HDR" => 200,
        "EDR" => 100,
        other => panic!("no rate for {other}"),
    };
    for d in ib_ports(root) {
        write(
            root,
            &format!("sys/class/infiniband/{d}/ports/1/rate"),
            &format!("{gbps} Gb/sec (4X {speed})\n"),
        );
    }
}

fn pcie_of_first_nic(root: &Path, attr: &str) -> String {
    let d = &ib_ports(root)[0];
    format!("sys/class/infiniband/{d}/device/{attr}")
}

/// roce-bond-host's DCB reply for ens1f0, edited as hex.
fn dcb_hex(root: &Path, from: &str, to: &str) {
    edit_json(root, "dcb.json", |v| {
        let hex = v["ens1f0"]["ok"].as_str().unwrap().to_string();
        assert!(hex.contains(from), "the DCB reply no longer holds {from}");
        v["ens1f0"]["ok"] = json!(hex.replace(from, to));
    });
}

fn counters_unchanged(root: &Path, name: &str) {
    // The later snapshot's counter equals the baseline's on every port: no growth.
    let base = Path::new(ROOT).join("fixtures/ib-degraded");
    for d in ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"] {
        let rel = format!("sys/class/infiniband/{d}/ports/1/counters/{name}");
        let v = std::fs::read_to_string(std::fs::canonicalize(base.join(&rel)).unwrap()).unwrap();
        write(root, &rel, &v);
    }
}

fn counter_absent(root: &Path, name: &str) {
    for d in ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"] {
        remove(root, &format!("sys/class/infiniband/{d}/ports/1/counters/{name}"));
    }
}

// ---------------------------------------------------------------------------------------
// The table: one row per rule key (a key shipped by several policies is run with each
// policy's value).
// ---------------------------------------------------------------------------------------

const H100: &str = "h100-sxm-8gpu";
const ROCE: &str = "roce-bond-host";
const LATER: &str = "ib-degraded-later";

fn rows() -> Vec<Row> {
    let r = |rule, good, bad, absent| Row {
        rule,
        good,
        bad,
        absent,
        baseline: None,
    };
    vec![
        r(
            "policy.probe_findings",
            same(ROCE),
            h(ROCE, |root, _| {
                std::fs::create_dir_all(root.join("etc")).unwrap();
                std::fs::write(root.join("etc/nccl.conf"), "NCCL_IB_TC=0\n").unwrap();
            }),
            h(ROCE, rdma_unlistable),
        ),
        r(
            "host.memlock_unlimited",
            same(H100),
            h(H100, |root, _| {
                facts(root, |f| {
                    f["memlock"] = json!({"soft": {"bytes": 65536}, "hard": {"bytes": 65536}})
                })
            }),
            h(H100, |root, _| facts(root, |f| drop(f.remove("memlock")))),
        ),
        r(
            "host.device_holders_max",
            same(H100),
            h(H100, |root, _| {
                facts(
                    root,
                    |f| {
                        f["device_holders"] =
                            json!([{"pid": 4242, "comm": "python3", "devices": ["/dev/nvidia0"]}])
                    },
                )
            }),
            h(H100, |root, _| {
                facts(root, |f| f["processes_unreadable"] = json!(17))
            }),
        ),
        r(
            "host.cpu_count_min",
            h(H100, |root, v| facts(root, |f| f["cpu_count"] = json!(num(v)))),
            h(H100, |root, v| {
                facts(root, |f| f["cpu_count"] = json!(num(v) - 1))
            }),
            h(H100, |root, _| facts(root, |f| drop(f.remove("cpu_count")))),
        ),
        r(
            "host.memory_min_gib",
            h(H100, |root, v| {
                facts(root, |f| f["memory_total_bytes"] = json!(num(v) << 30))
            }),
            h(H100, |root, v| {
                facts(root, |f| f["memory_total_bytes"] = json!((num(v) - 1) << 30))
            }),
            h(H100, |root, _| {
                facts(root, |f| drop(f.remove("memory_total_bytes")))
            }),
        ),
        r(
            "gpu.count",
            same(H100),
            h(H100, |root, _| {
                edit_json(root, "nvml.json", |v| {
                    v["gpus"].as_array_mut().unwrap().pop();
                })
            }),
            // No answer from NVML and a PCI bus that cannot be listed: the count is unknown.
            h(H100, |root, v| {
                nvml_unavailable(root, v);
                edit_json(root, "read-errors.json", |e| {
                    e["/sys/bus/pci/devices"] = json!("EACCES");
                });
            }),
        ),
        r(
            "gpu.model",
            h(H100, |root, v| {
                let model = v.trim_matches('"').to_string();
                edit_json(root, "nvml.json", |n| {
                    for g in n["gpus"].as_array_mut().unwrap() {
                        g["name"] = json!(format!("NVIDIA {model}-SXM 80GB"));
                    }
                })
            }),
            h(H100, |root, _| {
                edit_json(root, "nvml.json", |n| n["gpus"][3]["name"] = json!("NVIDIA L40S"))
            }),
            h(H100, nvml_unavailable),
        ),
        r(
            "gpu.nvlink_min",
            same(H100),
            h(H100, |root, _| {
                edit_json(root, "nvml.json", |n| {
                    for l in n["gpus"][0]["nvlinks"]
                        .as_array_mut()
                        .unwrap()
                        .iter_mut()
                        .take(12)
                    {
                        l["active"] = json!(false);
                    }
                })
            }),
            h(H100, nvml_unavailable),
        ),
        r(
            "gpu.nic_path_max",
            same(H100),
            h(H100, no_rdma_devices),
            same("cpu-only"),
        ),
        r(
            "gpu.nic_per_gpu",
            same(H100),
            h(H100, no_rdma_devices),
            same("cpu-only"),
        ),
        r(
            "ib.count",
            same(H100),
            h(H100, |root, _| {
                let d = ib_ports(root).pop().unwrap();
                std::fs::remove_file(root.join(format!("sys/class/infiniband/{d}"))).unwrap();
            }),
            h(H100, rdma_unlistable),
        ),
        r(
            "ib.state",
            same(H100),
            h(H100, |root, _| {
                let d = &ib_ports(root)[0];
                write(
                    root,
                    &format!("sys/class/infiniband/{d}/ports/1/state"),
                    "1: DOWN\n",
                );
            }),
            h(H100, rdma_unlistable),
        ),
        r(
            "ib.rate_min_gbps",
            same(H100),
            h(H100, |root, _| {
                let d = &ib_ports(root)[0];
                write(
                    root,
                    &format!("sys/class/infiniband/{d}/ports/1/rate"),
                    "100 Gb/sec (4X EDR)\n",
                );
            }),
            h(H100, |root, _| {
                let d = &ib_ports(root)[0];
                remove(root, &format!("sys/class/infiniband/{d}/ports/1/rate"));
            }),
        ),
        r(
            "ib.width",
            same(H100),
            h(H100, |root, _| {
                let d = &ib_ports(root)[0];
                write(
                    root,
                    &format!("sys/class/infiniband/{d}/ports/1/rate"),
                    "200 Gb/sec (2X NDR)\n",
                );
            }),
            h(H100, |root, _| {
                let d = &ib_ports(root)[0];
                remove(root, &format!("sys/class/infiniband/{d}/ports/1/rate"));
            }),
        ),
        r(
            "ib.speed",
            h(H100, |root, v| set_rates(root, &first_str(v))),
            h(H100, |root, _| set_rates(root, "EDR")),
            // The other ports at the policy's speed, one port without a rate file.
            h(H100, |root, v| {
                set_rates(root, &first_str(v));
                let d = &ib_ports(root)[0];
                remove(root, &format!("sys/class/infiniband/{d}/ports/1/rate"));
            }),
        ),
        r(
            "ib.pcie_gen_min",
            same(H100),
            h(H100, |root, _| {
                write(
                    root,
                    &pcie_of_first_nic(root, "current_link_speed"),
                    "8.0 GT/s PCIe\n",
                )
            }),
            h(H100, |root, _| {
                remove(root, &pcie_of_first_nic(root, "current_link_speed"))
            }),
        ),
        r(
            "ib.pcie_width_min",
            same(H100),
            h(H100, |root, _| {
                write(root, &pcie_of_first_nic(root, "current_link_width"), "8\n")
            }),
            h(H100, |root, _| {
                remove(root, &pcie_of_first_nic(root, "current_link_width"))
            }),
        ),
        r(
            "ib.all_alike",
            same(H100),
            h(H100, |root, _| {
                let d = &ib_ports(root)[0];
                write(root, &format!("sys/class/infiniband/{d}/fw_ver"), "28.39.1002\n");
            }),
            h(H100, rdma_unlistable),
        ),
        r(
            "gdr.ready",
            same(H100),
            h(H100, |root, _| {
                edit_json(root, "env.json", |e| e["NCCL_NET_GDR_LEVEL"] = json!("LOC"))
            }),
            // Config space as a non-root reader gets it: ACS unknown.
            h(H100, |root, _| {
                let mut stack = vec![root.join("sys/devices")];
                while let Some(d) = stack.pop() {
                    for e in std::fs::read_dir(&d).unwrap() {
                        let e = e.unwrap();
                        let t = e.file_type().unwrap();
                        if t.is_dir() {
                            stack.push(e.path());
                        } else if t.is_file() && e.file_name() == "config" {
                            let b = std::fs::read(e.path()).unwrap();
                            std::fs::write(e.path(), &b[..64.min(b.len())]).unwrap();
                        }
                    }
                }
            }),
        ),
        Row {
            rule: "counters.max_per_hour.link_downed",
            good: h(LATER, |root, _| counters_unchanged(root, "link_downed")),
            bad: same(LATER),
            absent: h(LATER, |root, _| counter_absent(root, "link_downed")),
            baseline: Some("fixtures/ib-degraded"),
        },
        Row {
            rule: "counters.max_per_hour.symbol_error",
            good: h(LATER, |root, _| counters_unchanged(root, "symbol_error")),
            bad: same(LATER),
            absent: h(LATER, |root, _| counter_absent(root, "symbol_error")),
            baseline: Some("fixtures/ib-degraded"),
        },
        r(
            "roce.count_min",
            same(ROCE),
            h(ROCE, no_rdma_devices),
            h(ROCE, rdma_unlistable),
        ),
        r(
            "roce.state",
            same(ROCE),
            h(ROCE, |root, _| {
                write(root, "sys/class/infiniband/mlx5_1/ports/1/state", "1: DOWN\n")
            }),
            h(ROCE, rdma_unlistable),
        ),
        r(
            "roce.all_alike",
            // Only the two ConnectX-6 ports (the LAG device's card differs).
            h(ROCE, |root, _| {
                std::fs::remove_file(root.join("sys/class/infiniband/mlx5_bond_0")).unwrap()
            }),
            same(ROCE),
            h(ROCE, rdma_unlistable),
        ),
        r(
            "roce.gid",
            // NCCL 2.21+ on the library path: the index it picks is known (with an unknown
            // version, older NCCL's index 0 is a different answer: not evaluated).
            h(ROCE, nccl_2_21_on_the_library_path),
            h(ROCE, |root, _| {
                edit_json(root, "env.json", |e| e["NCCL_IB_GID_INDEX"] = json!("0"))
            }),
            h(ROCE, rdma_unlistable),
        ),
        r(
            "roce.mtu",
            same(ROCE),
            h(ROCE, |root, _| write(root, "sys/class/net/ens1f0/mtu", "1500\n")),
            h(ROCE, |root, _| remove(root, "sys/class/net/ens1f0/mtu")),
        ),
        r(
            "roce.pfc_priorities",
            same(ROCE),
            // struct ieee_pfc after its attribute header: pfc_cap 8, pfc_en 0x08 -> 0x10.
            h(ROCE, |root, _| dcb_hex(root, "8c0002000808", "8c0002000810")),
            h(ROCE, |root, _| {
                edit_json(root, "dcb.json", |v| v["ens1f0"] = json!({"error": "EOPNOTSUPP"}));
                edit_json(root, "ethtool.json", |v| {
                    v["ens1f0"] = json!({"error": "EOPNOTSUPP"})
                });
            }),
        ),
        r(
            "roce.ecn_priorities",
            same(ROCE),
            h(ROCE, |root, _| {
                write(root, "sys/class/net/ens1f0/ecn/roce_np/enable/3", "0\n")
            }),
            h(ROCE, |root, _| {
                std::fs::remove_dir_all(real(root, "sys/class/net/ens1f0/ecn")).unwrap()
            }),
        ),
        r(
            "roce.trust",
            same(ROCE),
            // Every APP entry's selector from DSCP (5) to ethertype (1): trust pcp.
            h(ROCE, |root, _| dcb_hex(root, "0800010005", "0800010001")),
            h(ROCE, |root, _| {
                edit_json(root, "dcb.json", |v| v["ens1f0"] = json!({"error": "EOPNOTSUPP"}))
            }),
        ),
        r(
            "roce.global_pause",
            same(ROCE),
            h(ROCE, |root, _| {
                edit_json(root, "ethtool.json", |v| {
                    v["ens1f0"]["ok"]
                        .as_array_mut()
                        .unwrap()
                        .push(json!(["rx_global_pause", 0]));
                })
            }),
            h(ROCE, |root, _| {
                edit_json(root, "ethtool.json", |v| {
                    v["ens1f0"] = json!({"error": "EOPNOTSUPP"})
                })
            }),
        ),
    ]
}

// ---------------------------------------------------------------------------------------
// The rules the shipped policies hold, and the verdict `check` gives one rule.
// ---------------------------------------------------------------------------------------

/// (policy file, section, key, value as written) for every rule of `checks/*.toml`.
fn shipped_rules() -> Vec<(String, String, String, String)> {
    let mut out = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(Path::new(ROOT).join("checks"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(files.len() >= 4, "{files:?}");
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let mut section = String::new();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = s.to_string();
                continue;
            }
            let (k, v) = line.split_once('=').unwrap_or_else(|| panic!("{name}: {line}"));
            let k = k.trim().to_string();
            if section == "policy" && ["name", "description"].contains(&k.as_str()) {
                continue;
            }
            out.push((name.clone(), section.clone(), k, v.trim().to_string()));
        }
    }
    out
}

#[derive(Debug, PartialEq)]
enum Outcome {
    Pass,
    Fail,
    NotEvaluated,
}

fn outcome(findings: &[Value], rule: &str) -> (Outcome, Vec<String>) {
    let (sect, _) = rule.rsplit_once('.').unwrap();
    let about = |f: &Value| -> Option<Outcome> {
        let id = f["id"].as_str().unwrap_or_default();
        if id == "check.not_evaluated" {
            let k = f["evidence"]["key"].as_str().unwrap_or_default();
            let hit = k == rule || rule.starts_with(&format!("{k}.")) || (k == sect);
            return hit.then_some(Outcome::NotEvaluated);
        }
        if f["severity"] != "fail" {
            return None;
        }
        if rule == "policy.probe_findings" {
            return (!id.starts_with("policy.") && !id.starts_with("check.")).then_some(Outcome::Fail);
        }
        if let Some(c) = rule.strip_prefix("counters.max_per_hour.") {
            return (id == "policy.counters.max_per_hour" && f["evidence"]["counter"] == c)
                .then_some(Outcome::Fail);
        }
        (id == format!("policy.{rule}")).then_some(Outcome::Fail)
    };
    let mut seen: Vec<(Outcome, String)> = findings
        .iter()
        .filter_map(|f| about(f).map(|o| (o, format!("{}: {}", f["id"], f["message"]))))
        .collect();
    let shown = seen.iter().map(|(_, s)| s.clone()).collect();
    // A fail outranks a not_evaluated on another port: the node breaks the rule.
    seen.sort_by_key(|(o, _)| match o {
        Outcome::Fail => 0,
        Outcome::NotEvaluated => 1,
        Outcome::Pass => 2,
    });
    (
        seen.into_iter().next().map(|(o, _)| o).unwrap_or(Outcome::Pass),
        shown,
    )
}

fn policy_text(section: &str, key: &str, value: &str) -> String {
    let head = "[policy]\nname = \"one-rule\"\ndescription = \"one rule of a shipped policy\"\n";
    if section == "policy" {
        format!("{head}{key} = {value}\n")
    } else {
        format!("{head}[{section}]\n{key} = {value}\n")
    }
}

fn judge(row: &Row, host: Host, policy: &Path, value: &str) -> (Outcome, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let committed = Path::new(ROOT).join("fixtures").join(host.fixture);
    let root = match host.edit {
        None => committed,
        Some(edit) => {
            let root = dir.path().join(host.fixture);
            let st = Command::new("cp")
                .arg("-a")
                .arg(&committed)
                .arg(&root)
                .status()
                .unwrap();
            assert!(st.success());
            edit(&root, value);
            root
        }
    };
    let mut args: Vec<String> = vec![
        "--root".into(),
        root.to_string_lossy().into_owned(),
        "--format".into(),
        "json".into(),
        "check".into(),
        "--policy".into(),
        policy.to_string_lossy().into_owned(),
    ];
    if let Some(b) = row.baseline {
        args.push("--baseline".into());
        args.push(Path::new(ROOT).join(b).to_string_lossy().into_owned());
    }
    let o = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .args(&args)
        .current_dir(ROOT)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let v: Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("{}: {e}: {out} {}", row.rule, String::from_utf8_lossy(&o.stderr)));
    outcome(&judged(&v), row.rule)
}

/// Every rule's word in a check report: its findings, the rules a merged finding lists
/// under `evidence.also` (`id (subject): message`, same severity), and the keys it could
/// not evaluate (`data.not_evaluated`, as `check.not_evaluated` entries).
fn judged(v: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    for f in v["findings"].as_array().unwrap() {
        out.push(f.clone());
        for a in f["evidence"]["also"].as_array().into_iter().flatten() {
            let id = a.as_str().unwrap_or("").split(' ').next().unwrap_or("");
            let mut g = f.clone();
            g["id"] = Value::from(id);
            out.push(g);
        }
    }
    for n in v["data"]["not_evaluated"].as_array().into_iter().flatten() {
        out.push(serde_json::json!({"id": "check.not_evaluated", "severity": "warn", "evidence": {"key": n["key"]}}));
    }
    out
}

/// (policy file, rule, section, value, row, which host, the host, the outcome it must give).
type Job<'a> = (
    String,
    String,
    String,
    String,
    &'a Row,
    &'static str,
    Host,
    Outcome,
);

fn rule_name(section: &str, key: &str) -> String {
    match section {
        "policy" => format!("policy.{key}"),
        _ => format!("{section}.{key}"),
    }
}

#[test]
fn every_rule_of_every_shipped_policy_passes_fails_and_is_not_evaluated() {
    let rows = rows();
    // One job per (rule, value, host): a rule shipped by two policies with one value runs once.
    let mut jobs: Vec<Job> = Vec::new();
    for (file, section, key, value) in shipped_rules() {
        let rule = rule_name(&section, &key);
        let row = rows.iter().find(|r| r.rule == rule).unwrap_or_else(|| {
            panic!(
                "{file}: rule {rule} has no row: add its present-good, present-bad and absent hosts to rows()"
            )
        });
        for (what, host, want) in [
            ("present-good", row.good, Outcome::Pass),
            ("present-bad", row.bad, Outcome::Fail),
            ("absent", row.absent, Outcome::NotEvaluated),
        ] {
            if !jobs.iter().any(|j| j.1 == rule && j.3 == value && j.5 == what) {
                jobs.push((
                    file.clone(),
                    rule.clone(),
                    section.clone(),
                    value.clone(),
                    row,
                    what,
                    host,
                    want,
                ));
            }
        }
        let _ = &key;
    }
    assert!(jobs.len() >= 90, "{}", jobs.len());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((file, rule, section, value, row, what, host, want)) = jobs.get(i) else {
                    break;
                };
                let key = rule.strip_prefix(&format!("{section}.")).unwrap_or(rule);
                let dir = tempfile::tempdir().unwrap();
                let policy = dir.path().join("one-rule.toml");
                std::fs::write(&policy, policy_text(section, key, value)).unwrap();
                let (got, shown) = judge(row, *host, &policy, value);
                if got != *want {
                    failures.lock().unwrap().push(format!(
                        "{file} {rule} = {value} on {what} ({}): {got:?}, expected {want:?}; findings about it: {shown:?}",
                        host.fixture
                    ));
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {}:\n{}",
        failures.len(),
        jobs.len(),
        failures.join("\n")
    );
}

#[test]
fn every_row_is_a_rule_some_policy_ships() {
    // A row left behind by a removed rule is dead weight that would hide a typo.
    let shipped: Vec<String> = shipped_rules()
        .into_iter()
        .map(|(_, s, k, _)| rule_name(&s, &k))
        .collect();
    for r in rows() {
        assert!(
            shipped.contains(&r.rule.to_string()),
            "row {} matches no shipped rule",
            r.rule
        );
    }
}
