//! One fact, one state in every command (issue 29): `topo`, `gdr`, `nccl-env` and `check`
//! run on every fixture under NCCL settings that change which ports NCCL opens and whether
//! it may use DMA-BUF; a fact two reports give two states fails here. The facts: which RDMA
//! devices NCCL opens, NCCL's path type of each GPU-NIC pair, the GDR verdict of each pair
//! NCCL uses, the DMA-BUF and peer-memory states, a host without GPUs, and `check`'s gdr
//! findings against `gdr`'s own.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use serde_json::Value;

const SETTINGS: &[&[&str]] = &[
    &[],
    &["NCCL_IB_HCA==mlx5_8,mlx5_9"],
    &["NCCL_IB_HCA=^mlx5_0"],
    &["NCCL_IB_DISABLE=1"],
    &["NCCL_DMABUF_ENABLE=0"],
];

fn fixtures() -> Vec<String> {
    common::fixture_names()
}

/// `fabprobe --root FIXTURE --env-file ENV CMD --format json ARGS`: the envelope, and the
/// table's first line.
fn run(fixture: &str, env: &Path, cmd: &str, args: &[&str]) -> (Value, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(fixture);
    let go = |format: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
            .arg("--root")
            .arg(&root)
            .arg("--env-file")
            .arg(env)
            .arg(cmd)
            .args(["--format", format])
            .args(args)
            .output()
            .unwrap();
        let code = out.status.code().unwrap_or(-1);
        assert!(
            (0..=3).contains(&code),
            "{fixture} {cmd}: exit {code}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let json: Value = serde_json::from_str(&go("json"))
        .unwrap_or_else(|e| panic!("{fixture} {cmd}: not JSON: {e}"));
    let table = go("table");
    (json, table.lines().next().unwrap_or("").to_string())
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

#[test]
fn every_command_gives_each_shared_fact_one_state() {
    let dir = tempfile::tempdir().unwrap();
    let mut checked = BTreeMap::<&str, usize>::new();
    for fixture in fixtures() {
        for (i, lines) in SETTINGS.iter().enumerate() {
            let env = dir.path().join(format!("env{i}"));
            std::fs::write(&env, lines.join("\n") + "\n").unwrap();
            let at = format!("{fixture} under {lines:?}");
            let (topo, _) = run(&fixture, &env, "topo", &[]);
            let (gdr, gdr_line) = run(&fixture, &env, "gdr", &[]);
            let (env_r, _) = run(&fixture, &env, "nccl-env", &[]);
            let (check, _) = run(&fixture, &env, "check", &[]);
            let (topo, gdr, nenv) = (&topo["data"], &gdr, &env_r["data"]);
            let g = &gdr["data"];

            // Which devices NCCL opens: gdr's per-NIC answer is nccl-env's per-port rule.
            let mut opened = BTreeSet::new();
            for p in nenv["ib"]["ports"].as_array().into_iter().flatten() {
                if p["used"] == true {
                    opened.insert(s(&p["device"]).to_string());
                }
            }
            for n in g["nics"].as_array().into_iter().flatten() {
                let name = s(&n["name"]);
                assert_eq!(
                    n["nccl_uses"] == true,
                    opened.contains(name),
                    "{at}: gdr and nccl-env disagree on whether NCCL opens {name}"
                );
                *checked.entry("device opened").or_default() += 1;
            }

            // NCCL's path type: gdr's pair is topo's NCCL matrix cell.
            let labels: Vec<&str> = topo["labels"]
                .as_array()
                .into_iter()
                .flatten()
                .map(s)
                .collect();
            let ix = |l: &str| labels.iter().position(|x| *x == l);
            let nic_name: BTreeMap<&str, &str> = g["nics"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|n| (s(&n["label"]), s(&n["name"])))
                .collect();
            for p in g["pairs"].as_array().into_iter().flatten() {
                let (gpu, nic) = (s(&p["gpu"]), s(&p["nic"]));
                let cell = ix(gpu)
                    .zip(ix(nic))
                    .and_then(|(a, b)| topo["nccl_matrix"][a][b].as_str());
                let path = p["path"].as_str();
                assert_eq!(
                    path.unwrap_or("N/A"),
                    cell.unwrap_or("N/A"),
                    "{at}: {gpu}-{nic} path type differs between gdr and topo --nccl"
                );
                *checked.entry("path type").or_default() += 1;
                // The GDR verdict of a pair NCCL opens: the same in nccl-env.
                let name = nic_name.get(nic).copied().unwrap_or("");
                let in_env = nenv["gdr"]["pairs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|q| s(&q["gpu"]) == gpu && s(&q["nic"]) == name);
                match in_env {
                    Some(q) => {
                        assert!(opened.contains(name), "{at}: nccl-env judges GDR on {name}, which NCCL does not open");
                        assert_eq!(
                            s(&q["verdict"]),
                            p["verdict"].as_str().unwrap_or("unknown"),
                            "{at}: {gpu}-{nic} GDR verdict differs between gdr and nccl-env"
                        );
                        assert_eq!(s(&q["path"]), path.unwrap_or("N/A"), "{at}: {gpu}-{nic} path in nccl-env");
                        *checked.entry("gdr verdict").or_default() += 1;
                    }
                    None => assert!(
                        !opened.contains(name),
                        "{at}: nccl-env leaves out {gpu}-{name}, which NCCL opens"
                    ),
                }
                if p["nccl_nearest"] == true {
                    assert!(opened.contains(name), "{at}: gdr calls {gpu}-{nic} a pair NCCL uses, but NCCL does not open {name}");
                }
            }

            // DMA-BUF and peer memory: nccl-env's line is gdr's state, in gdr's words.
            let support = s(&nenv["gdr"]["kernel_support"]);
            let d = &g["dmabuf"];
            let dmabuf_words = match (d["nccl_dmabuf_enable"] == true, s(&d["path"])) {
                (false, _) => "DMA-BUF off (NCCL_DMABUF_ENABLE=0)",
                (true, "yes") => "DMA-BUF possible",
                (true, "no") => "DMA-BUF not possible",
                _ => "DMA-BUF unknown",
            };
            assert!(support.contains(dmabuf_words), "{at}: gdr's DMA-BUF is {dmabuf_words:?}, nccl-env says {support:?}");
            let pm = &g["peer_memory"];
            let peer_words = if pm["nccl_gdr_support"] == true {
                "peer memory found"
            } else if pm["modules_visible"] == false {
                "peer memory unknown"
            } else if pm["depends_on_version"] == true {
                "peer memory depends on the NCCL version"
            } else {
                "no peer-memory client"
            };
            assert!(support.starts_with(peer_words), "{at}: gdr's peer memory is {peer_words:?}, nccl-env says {support:?}");
            *checked.entry("dma-buf and peer memory").or_default() += 1;

            // No GPU, or no port NCCL opens: gdr judges nothing, and says so instead of PASS.
            let no_gpu = g["gpus"].as_array().is_none_or(|v| v.is_empty());
            let none_opened = !g["nics"].as_array().is_none_or(|v| v.is_empty()) && opened.is_empty();
            if no_gpu || none_opened {
                // ACS redirect still matters to GPU peer-to-peer; no verdict on GDR itself.
                let verdicts: Vec<&str> = gdr["findings"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|f| s(&f["id"]))
                    // Nothing to judge is said as its own (unknown) finding, not a verdict.
                    // ACS redirect and the IOMMU translating DMA (the same detour through the
                    // root complex) still matter to GPU peer-to-peer: no verdict on GDR itself.
                    // A device one source lists and another does not is named (unknown) by
                    // every command that reads its kind, whatever NCCL would open.
                    .filter(|id| {
                        ![
                            "gdr.acs_redirect",
                            "gdr.iommu_translation",
                            "gdr.nothing_to_judge",
                            "gdr.nic_not_in_rdma",
                            "gdr.gpu_not_in_nvml",
                        ]
                        .contains(id)
                    })
                    .collect();
                assert!(verdicts.is_empty(), "{at}: gdr judges GDR with no pair to judge: {verdicts:?}");
                assert!(!gdr_line.contains("PASS"), "{at}: gdr says {gdr_line:?}");
                *checked.entry("nothing to judge").or_default() += 1;
            }

            // check's gdr findings are gdr's (same ids, same subjects).
            let ids = |v: &Value| -> BTreeSet<(String, String)> {
                v["findings"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|f| s(&f["id"]).starts_with("gdr."))
                    .map(|f| (s(&f["id"]).to_string(), s(&f["subject"]).to_string()))
                    .collect()
            };
            let mut in_check = ids(&check);
            // Findings check set aside (not used by NCCL) still count as seen.
            for f in check["data"]["not_used_by_nccl"].as_array().into_iter().flatten() {
                if s(&f["id"]).starts_with("gdr.") {
                    in_check.insert((s(&f["id"]).to_string(), s(&f["subject"]).to_string()));
                }
            }
            // Findings check folded under their cause (evidence.also: a down port explains its
            // GPU's GDR pairs) still count as seen: "id (subject): message".
            for f in check["findings"].as_array().into_iter().flatten() {
                for a in f["evidence"]["also"].as_array().into_iter().flatten() {
                    if let Some((id, subject)) = s(a).split_once(" (").and_then(|(id, rest)| {
                        let mut depth = 1;
                        let end = rest.char_indices().find(|(_, c)| {
                            depth += match c { '(' => 1, ')' => -1, _ => 0 };
                            depth == 0
                        })?;
                        Some((id, &rest[..end.0]))
                    }) && id.starts_with("gdr.")
                    {
                        in_check.insert((id.to_string(), subject.to_string()));
                    }
                }
            }
            // What gdr could not read, check lists as not evaluated, under its key.
            let mut in_gdr = ids(gdr);
            let keys: BTreeSet<&str> = check["data"]["not_evaluated"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|n| s(&n["key"]))
                .collect();
            for (id, key) in [
                ("gdr.acs_unknown", "gdr.acs"),
                ("gdr.unknown", "gdr.ready"),
                ("gdr.nothing_to_judge", "gdr.nothing_to_judge"),
            ] {
                if in_gdr.iter().any(|(i, _)| i == id) {
                    // Or folded under the cause that explains it (a module not loaded): its `also`.
                    let folded = in_check.iter().any(|(i, _)| i == id);
                    assert!(
                        keys.contains(key) || folded,
                        "{at}: gdr's {id} is not listed by check as {key} not evaluated"
                    );
                    if !folded {
                        in_gdr.retain(|(i, _)| i != id);
                    }
                }
            }
            assert_eq!(in_check, in_gdr, "{at}: check's gdr findings differ from gdr's");
            *checked.entry("check vs gdr").or_default() += 1;
        }
    }
    // The test saw each fact often enough to mean something.
    for (fact, min) in [
        ("device opened", 100),
        ("path type", 500),
        ("gdr verdict", 100),
        ("dma-buf and peer memory", 50),
        ("nothing to judge", 10),
        ("check vs gdr", 50),
    ] {
        let n = checked.get(fact).copied().unwrap_or(0);
        assert!(n >= min, "only {n} comparisons of {fact}: the fixtures no longer exercise it");
    }
}
