//! `fabprobe check` and `fabprobe sweep`, run as a user runs them: whole reports per fixture
//! and per policy, the verdicts a dgx-h100 certification must give, policy errors, the NHC
//! drop-in and the Slurm health check program, and sweeps with injected outliers.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

fn run_in(args: &[&str], stdin: Option<&str>, env: &[(&str, &str)]) -> (String, String, i32) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fabprobe"));
    c.args(args).current_dir(env!("CARGO_MANIFEST_DIR"));
    for (k, v) in env {
        c.env(k, v);
    }
    c.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    if let Some(s) = stdin {
        let mut w = child.stdin.take().unwrap();
        let s = s.to_string();
        std::thread::spawn(move || w.write_all(s.as_bytes()));
    }
    let o = child.wait_with_output().unwrap();
    (
        String::from_utf8(o.stdout).unwrap(),
        String::from_utf8(o.stderr).unwrap(),
        o.status.code().unwrap_or(-1),
    )
}

fn run(args: &[&str]) -> (String, String, i32) {
    run_in(args, None, &[])
}

const FIXTURES: &[&str] = &[
    "roce-bond-host",
    "container-sparse-gids",
    "ib-degraded",
    "ib-degraded-later",
    "opa-hfi1",
    "old-kernel-nopma",
    "h100-sxm-8gpu",
    "h100-sxm-8gpu-bad",
    "h100-gdr-broken",
    "h100-penny",
    "pcie-2socket",
    "roce-qos-mismatch",
    "roce-pause-storm",
    "cloud-vm-flat",
    "cpu-only",
];

fn check_json(fixture: &str, policy: &str) -> (serde_json::Value, i32) {
    let (out, err, code) = run(&[
        "--root",
        &format!("fixtures/{fixture}"),
        "--format",
        "json",
        "check",
        "--policy",
        policy,
    ]);
    // 3: nothing to judge (cpu-only: no GPU and no RDMA device), never a pass.
    assert!(matches!(code, 0 | 1 | 3), "{fixture} {policy}: exit {code}: {err}");
    assert_eq!(out.lines().count(), 1, "check's JSON is one line");
    (serde_json::from_str(&out).unwrap(), code)
}

fn fails(v: &serde_json::Value) -> Vec<(String, String)> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] == "fail")
        .map(|f| {
            (
                f["id"].as_str().unwrap().to_string(),
                f["subject"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn default_policy_whole_reports() {
    for f in FIXTURES {
        let root = format!("fixtures/{f}");
        let (table, err, code) = run(&["--root", &root, "check"]);
        assert!(code == 0 || code == 1 || code == 3, "{f}: exit {code}: {err}");
        insta::assert_snapshot!(
            format!("check_table__default__{f}"),
            format!("exit {code}\n{table}")
        );
        let (v, jcode) = check_json(f, "default");
        assert_eq!(code, jcode, "{f}: table and json disagree on the exit code");
        assert_eq!(v["schema"], "fabprobe.check");
        insta::assert_json_snapshot!(format!("check_json__default__{f}"), v);
    }
}

const POLICY_CASES: &[(&str, &str)] = &[
    ("dgx-h100", "h100-sxm-8gpu"),
    ("dgx-h100", "h100-sxm-8gpu-bad"),
    ("dgx-h100", "h100-penny"),
    ("dgx-h100", "h100-gdr-broken"),
    ("dgx-h100", "cloud-vm-flat"),
    ("hdr-a100", "cloud-vm-flat"),
    ("hdr-a100", "h100-sxm-8gpu"),
    ("roce-dcqcn", "roce-bond-host"),
    ("roce-dcqcn", "container-sparse-gids"),
    ("roce-dcqcn", "h100-sxm-8gpu"),
    ("roce-dcqcn", "roce-qos-mismatch"),
    ("roce-dcqcn", "roce-pause-storm"),
];

#[test]
fn policy_whole_reports() {
    for (p, f) in POLICY_CASES {
        let (table, _, code) = run(&["--root", &format!("fixtures/{f}"), "check", "--policy", p]);
        insta::assert_snapshot!(format!("check_table__{p}__{f}"), format!("exit {code}\n{table}"));
        let (v, jcode) = check_json(f, p);
        assert_eq!(code, jcode);
        insta::assert_json_snapshot!(format!("check_json__{p}__{f}"), v);
    }
}

/// The h100 fixtures against dgx-h100: the healthy one passes every key; the others fail
/// exactly on what was built into them (see their PROVENANCE.md).
#[test]
fn dgx_h100_verdicts_are_true() {
    let (v, code) = check_json("h100-sxm-8gpu", "dgx-h100");
    assert_eq!(code, 0);
    assert_eq!(fails(&v), Vec::<(String, String)>::new());
    // A healthy node passes; the counter rates it could not judge (no second sample) are
    // said beside the verdict, never scored as a warning.
    assert_eq!(v["data"]["verdict"], "pass");
    assert_eq!(v["findings"], serde_json::json!([]));
    let not_eval: Vec<&str> = v["data"]["not_evaluated"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["key"].as_str().unwrap())
        .collect();
    assert_eq!(not_eval, ["counters.max_per_hour"]);
    // The two RoCE netdevs outside NCCL_IB_HCA are listed, not judged.
    let unused: Vec<&str> = v["data"]["not_used_by_nccl"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["subject"].as_str().unwrap())
        .collect();
    assert_eq!(unused, ["eth0 (mlx5_8/1)", "eth1 (mlx5_9/1)"]);
    let all8 = "GPU0-mlx5_0 GPU1-mlx5_1 GPU2-mlx5_2 GPU3-mlx5_3 GPU4-mlx5_4 GPU5-mlx5_5 GPU6-mlx5_6 GPU7-mlx5_7";
    // penny: its snapshot has /sys/module without nvidia_peermem and inbox ib_core, but
    // neither the NVIDIA module type nor rdma-core's version: DMA-BUF, and so GDR, is
    // unknown there (not_evaluated), never "no DMA-BUF path" (issue 17).
    let (v, code) = check_json("h100-penny", "dgx-h100");
    assert_eq!(code, 0);
    assert_eq!(fails(&v), Vec::<(String, String)>::new());
    let gdr_ne: Vec<&str> = v["data"]["not_evaluated"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["key"] == "gdr.ready")
        .map(|x| x["reason"].as_str().unwrap())
        .collect();
    // One line per key: the first pair's reason, and the count of the others.
    assert_eq!(gdr_ne.len(), 1, "{gdr_ne:?}");
    assert!(gdr_ne[0].starts_with("GPU0-mlx5_ib0: ") && gdr_ne[0].ends_with("; and 8 more"), "{}", gdr_ne[0]);
    assert!(
        gdr_ne[0].contains("rdma-core, nvidia open module"),
        "{}",
        gdr_ne[0]
    );
    // gdr-broken: peer memory cannot load, the proprietary module (no DMA-BUF), ACS redirect,
    // the IOMMU translating: three causes, one finding each; the eight pairs gdr.ready fails
    // for want of peer memory are listed under the peer-memory cause, not counted.
    let (v, code) = check_json("h100-gdr-broken", "dgx-h100");
    assert_eq!(code, 1);
    let want: Vec<(String, String)> = ["gdr.acs_redirect", "gdr.peermem_not_loaded", "gdr.iommu_translation"]
        .iter()
        .map(|id| (id.to_string(), all8.to_string()))
        .collect();
    assert_eq!(fails(&v), want);
    let peer = &v["findings"][1];
    let also: Vec<&str> = peer["evidence"]["also"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(also.len(), 8, "{also:?}");
    assert!(also.iter().all(|a| a.starts_with("policy.gdr.ready (GPU")), "{also:?}");
    let (v, code) = check_json("h100-sxm-8gpu-bad", "dgx-h100");
    assert_eq!(code, 1);
    let mut got = fails(&v);
    got.sort();
    // One finding per cause, worst first: GPU5's lost NVLinks (one finding, not one per
    // pair), mlx5_3's x8 link, mlx5_6's HDR cable (listing speed, all_alike and the probe's
    // rate_below_peers), then the host limits.
    let order: Vec<(String, String)> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] == "fail")
        .map(|f| (f["id"].as_str().unwrap().to_string(), f["subject"].as_str().unwrap().to_string()))
        .collect();
    let mut want: Vec<(String, String)> = [
        ("policy.gpu.nvlink_min", "GPU5"),
        ("policy.ib.pcie_width_min", "mlx5_3/1"),
        ("policy.ib.rate_min_gbps", "mlx5_6/1"),
        ("policy.host.memlock_unlimited", "host"),
        ("policy.host.device_holders_max", "host"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(order, want);
    let cable = v["findings"].as_array().unwrap().iter().find(|f| f["id"] == "policy.ib.rate_min_gbps").unwrap();
    let also: Vec<&str> = cable["evidence"]["also"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().split(' ').next().unwrap())
        .collect();
    assert_eq!(also, ["policy.ib.speed", "policy.ib.all_alike", "links.rate_below_peers"]);
    want.sort();
    assert_eq!(got, want);
    let x8 = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "policy.ib.pcie_width_min")
        .unwrap();
    assert_eq!(
        x8["evidence"]["same_cause"],
        "policy.ib.all_alike mlx5_3/1; topo.pcie_width_degraded mlx5_3; \
         links.pcie_downtrained mlx5_3",
        "{x8}"
    );
    assert!(
        x8["fix"].as_str().unwrap().contains("`lspci -vv -s 0000:58:00.0 | grep -e LnkCap: -e LnkSta:`"),
        "{x8}"
    );
    // Ranked: every fail before any warn, policy verdicts before probe findings.
    let sev: Vec<&str> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["severity"].as_str().unwrap())
        .collect();
    let first_warn = sev.iter().position(|s| *s == "warn").unwrap_or(sev.len());
    assert!(sev[first_warn..].iter().all(|s| *s != "fail"));
    assert!(v["findings"][0]["id"].as_str().unwrap().starts_with("policy."));
    // The same node judged as an A100 fails on what differs.
    let (a, code) = check_json("h100-sxm-8gpu", "hdr-a100");
    assert_eq!(code, 1);
    let ids: Vec<String> = fails(&a).into_iter().map(|(i, _)| i).collect();
    assert!(
        ids.contains(&"policy.gpu.model".to_string()) && ids.contains(&"policy.ib.speed".to_string()),
        "{ids:?}"
    );
    assert!(
        !ids.contains(&"policy.ib.rate_min_gbps".to_string()),
        "400 >= 200: {ids:?}"
    );
}

/// roce-dcqcn against the qos fixtures: the mismatched host fails on PFC (4, not 3), ECN
/// (notification point off) and global pause; the storm fixture is configured right.
#[test]
fn roce_dcqcn_verdicts_are_true() {
    let (v, code) = check_json("roce-qos-mismatch", "roce-dcqcn");
    assert_eq!(code, 1);
    let policy: Vec<(String, String)> = fails(&v)
        .into_iter()
        .filter(|(id, _)| id.starts_with("policy."))
        .collect();
    let want: Vec<(String, String)> = ["pfc_priorities", "ecn_priorities", "global_pause"]
        .iter()
        .map(|k| (format!("policy.roce.{k}"), "mlx5_0/1".to_string()))
        .collect();
    assert_eq!(policy, want);
    let pfc = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "policy.roce.pfc_priorities")
        .unwrap();
    assert_eq!(pfc["evidence"]["pfc_enabled"], "4");
    assert_eq!(v["data"]["fingerprint"]["pfc_priorities"], "1x 4");
    let (v, code) = check_json("roce-pause-storm", "roce-dcqcn");
    assert_eq!(code, 0, "{:?}", fails(&v));
    assert_eq!(v["data"]["fingerprint"]["pfc_priorities"], "1x 3");
    assert_eq!(v["data"]["fingerprint"]["roce_trust"], "1x dscp");
    // Without ECN sysfs (inbox driver) the ECN rule is not evaluated, never passed.
    assert!(
        v["data"]["not_evaluated"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["key"] == "roce.ecn_priorities"),
        "{}",
        v["data"]
    );
}

#[test]
fn counter_rates_need_two_samples_and_are_judged_with_a_baseline() {
    let tmp = tempfile::tempdir().unwrap();
    let pol = tmp.path().join("rates.toml");
    std::fs::write(
        &pol,
        "[counters.max_per_hour]\nsymbol_error = 10\nlink_downed = 0\n",
    )
    .unwrap();
    let pol = pol.to_str().unwrap();
    let (out, _, code) = run(&[
        "--root",
        "fixtures/ib-degraded-later",
        "--format",
        "json",
        "check",
        "--policy",
        pol,
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        !fails(&v)
            .iter()
            .any(|(id, _)| id == "policy.counters.max_per_hour")
    );
    assert!(out.contains("counter rates need two samples"));
    let _ = code;
    let (out, err, code) = run(&[
        "--root",
        "fixtures/ib-degraded-later",
        "--format",
        "json",
        "check",
        "--policy",
        pol,
        "--baseline",
        "fixtures/ib-degraded",
    ]);
    assert_eq!(code, 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rates: Vec<(String, String)> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["id"] == "policy.counters.max_per_hour")
        .map(|f| {
            (
                f["subject"].as_str().unwrap().to_string(),
                f["evidence"]["counter"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    // One cable, one finding: mlx5_2's symbol_error rate and the probe's rising counters
    // are listed under its link_downed rate.
    assert_eq!(
        rates,
        [
            ("mlx5_2/1".to_string(), "link_downed".to_string()),
            ("mlx5_3/1".into(), "symbol_error".into())
        ]
    );
    let cable = v["findings"].as_array().unwrap().iter().find(|f| f["subject"] == "mlx5_2/1").unwrap();
    let also = cable["evidence"]["also"].to_string();
    assert!(also.contains("policy.counters.max_per_hour (mlx5_2/1): mlx5_2/1 symbol_error"), "{also}");
    assert_eq!(v["data"]["sample"]["kind"], "baseline");
}

/// roce.mtu from the netdev's MTU: the same host at MTU 4000 reaches only RoCE MTU 2048.
#[test]
fn roce_mtu_follows_the_netdev_mtu() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("host");
    let st = Command::new("cp")
        .args(["-a", "fixtures/roce-qos-mismatch"])
        .arg(&root)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .unwrap();
    assert!(st.success());
    let pol = tmp.path().join("mtu.toml");
    std::fs::write(&pol, "[roce]\nmtu = 4096\n").unwrap();
    let args = [
        "--root",
        root.to_str().unwrap(),
        "--format",
        "json",
        "check",
        "--policy",
        pol.to_str().unwrap(),
    ];
    let (out, _, _) = run(&args);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        !fails(&v).iter().any(|(id, _)| id == "policy.roce.mtu"),
        "9000 gives 4096"
    );
    assert_eq!(v["data"]["fingerprint"]["roce_netdev_mtu"], "1x 9000");
    let mtu = root.join("sys/devices/pci0000:16/0000:16:02.0/0000:17:00.0/net/ens1f0np0/mtu");
    std::fs::write(&mtu, "4000\n").unwrap();
    let (out, _, code) = run(&args);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let f = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "policy.roce.mtu")
        .unwrap();
    assert_eq!(f["subject"], "mlx5_0/1");
    assert_eq!(
        (
            f["evidence"]["netdev_mtu"].as_u64(),
            f["evidence"]["roce_mtu"].as_u64()
        ),
        (Some(4000), Some(2048))
    );
}

#[test]
fn a_bad_policy_is_exit_2_naming_file_line_and_key() {
    let tmp = tempfile::tempdir().unwrap();
    let pol = tmp.path().join("rack7.toml");
    std::fs::write(&pol, "# rack 7\n[ib]\ncount = 8\nrate_mn_gbps = 400\n").unwrap();
    let p = pol.to_str().unwrap();
    let (out, err, code) = run(&["--root", "fixtures/h100-sxm-8gpu", "check", "--policy", p]);
    assert_eq!(code, 2);
    assert!(out.is_empty());
    assert!(
        err.contains(&format!(
            "{p}:4: ib.rate_mn_gbps: unknown key; did you mean `rate_min_gbps`?"
        )),
        "{err}"
    );
    assert!(err.contains("hint: "), "{err}");
    std::fs::write(&pol, "[gpu]\ncount = \"eight\"\n").unwrap();
    let (_, err, code) = run(&["--root", "fixtures/h100-sxm-8gpu", "check", "--policy", p]);
    assert_eq!(code, 2);
    assert!(
        err.contains(":2: gpu.count: expected an integer from 0 to 64, found a string"),
        "{err}"
    );
    let (_, err, code) = run(&["check", "--policy", "dgx-h10"]);
    assert_eq!(code, 2);
    assert!(err.contains("did you mean `dgx-h100`"), "{err}");
    let (_, err, code) = run(&["check", "--policy", "/nonexistent/p.toml"]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot read policy /nonexistent/p.toml"), "{err}");
}

#[test]
fn show_policy_prints_the_shipped_file() {
    let (out, _, code) = run(&["check", "--show-policy", "dgx-h100"]);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("checks/dgx-h100.toml")).unwrap()
    );
}

#[test]
fn prom_output() {
    let (out, _, code) = run(&[
        "--root",
        "fixtures/h100-sxm-8gpu-bad",
        "--format",
        "prom",
        "check",
        "--policy",
        "dgx-h100",
    ]);
    assert_eq!(code, 1);
    assert!(
        out.contains("fabprobe_check_verdict{policy=\"dgx-h100\"} 2\n"),
        "{out}"
    );
    assert!(
        out.contains("fabprobe_check_findings{policy=\"dgx-h100\",severity=\"fail\"} 5\n"),
        "{out}"
    );
    assert!(out.contains("fabprobe_check_device_holders{policy=\"dgx-h100\"} 1\n"));
    assert!(!out.contains("severity=\"pass\""), "no always-0 pass count: {out}");
}

#[test]
fn live_check_runs_and_snapshot_captures_the_facts() {
    let (out, err, code) = run(&["--format", "json", "check"]);
    // 3: this machine has no GPU and no RDMA device, nothing to judge (never a pass).
    assert!(code == 0 || code == 1 || code == 3, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["data"]["facts"]["state"], "available");
    assert!(v["data"]["facts"]["cpu_count"].as_u64().unwrap() > 0);
    let tmp = tempfile::tempdir().unwrap();
    let snap = tmp.path().join("snap");
    let (_, err, code) = run(&["snapshot", "-o", snap.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let facts: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(snap.join("fabprobe/facts.json")).unwrap()).unwrap();
    assert_eq!(facts["state"], "available");
    let (out, _, _) = run(&["--root", snap.to_str().unwrap(), "--format", "json", "check"]);
    let w: serde_json::Value = serde_json::from_str(&out).unwrap();
    // The snapshot replays the facts it captured.
    assert_eq!(w["data"]["facts"]["kernel"], facts["kernel"]);
    assert_eq!(w["data"]["facts"]["memlock"], facts["memlock"]);
}

/// `n` reports of the healthy fixture as nodes `node0000...`, with known faults injected.
fn fleet(dir: &Path, n: usize) {
    let (good, _) = check_json("h100-sxm-8gpu", "dgx-h100");
    let (bad, _) = check_json("h100-sxm-8gpu-bad", "dgx-h100");
    let (nogdr, _) = check_json("h100-gdr-broken", "dgx-h100");
    for i in 0..n {
        let name = format!("node{i:04}");
        let mut v = match i {
            17 => bad.clone(),
            50 => nogdr.clone(),
            _ => good.clone(),
        };
        v["host"]["hostname"] = name.clone().into();
        if i == 5 {
            v["data"]["fingerprint"]["kernel"] = "5.15.0-97-generic".into();
        }
        if i == 40 {
            v["data"]["fingerprint"]["gpu_driver"] = "535.183.01".into();
        }
        let mut text = serde_json::to_string(&v).unwrap();
        if i == 23 {
            text.truncate(text.len() / 3);
        }
        if i == 31 {
            text = "srun: error: node0031: task 31: Exited with exit code 127".into();
        }
        if i == 44 {
            continue;
        }
        std::fs::write(dir.join(format!("{name}.json")), text + "\n").unwrap();
    }
}

#[test]
fn sweep_finds_exactly_the_injected_faults() {
    let tmp = tempfile::tempdir().unwrap();
    fleet(tmp.path(), 60);
    let d = tmp.path().to_str().unwrap();
    let (out, err, code) = run(&["--format", "json", "sweep", d, "--expect", "node[0000-0059]"]);
    assert_eq!(code, 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let r = &v["data"];
    let outl: Vec<(&str, &str)> = r["outliers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["node"].as_str().unwrap(), o["key"].as_str().unwrap()))
        .collect();
    // node0017 (the bad fixture) and node0050 (no peer memory) failed: they are listed once,
    // under their failures, however they differ; node0005/0040 as injected.
    assert_eq!(outl, [("node0005", "kernel"), ("node0040", "gpu_driver")]);
    assert_eq!(r["outliers"][0]["majority_value"], "5.15.0-105-generic");
    // The majority is taken over every report of the kind (57), the failed ones too.
    assert_eq!(r["outliers"][0]["majority_nodes"], 56);
    assert_eq!(r["outliers"][0]["nodes_compared"], 57);
    let bad: Vec<&str> = r["bad_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["node"].as_str().unwrap())
        .collect();
    // node0005 and node0040 passed: outliers are listed, never drained.
    assert_eq!(bad, ["node0017", "node0050"]);
    let unread: Vec<(&str, &str)> = r["unreadable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| (u["node"].as_str().unwrap(), u["problem"].as_str().unwrap()))
        .collect();
    assert_eq!(
        unread,
        [
            ("node0044", "missing"),
            ("node0023", "truncated"),
            ("node0031", "not_json")
        ]
    );
    let by_cause: Vec<(&str, serde_json::Value)> = r["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["id"].as_str().unwrap(), f["nodes"].clone()))
        .collect();
    // node0050's GPUDirect pairs are symptoms of its peer-memory cause (issue 42).
    assert!(
        by_cause.contains(&("gdr.peermem_not_loaded", serde_json::json!(["node0050"]))),
        "{by_cause:?}"
    );
    assert!(!by_cause.iter().any(|(id, _)| *id == "policy.gdr.ready"), "{by_cause:?}");
    // One cable at HDR is one cause, rate_min_gbps, listing speed, all_alike and the
    // probe's rate_below_peers.
    assert!(
        by_cause.contains(&("policy.ib.rate_min_gbps", serde_json::json!(["node0017"]))),
        "{by_cause:?}"
    );
    assert_eq!(r["nodes"]["reports"], 57);

    let (drain, _, code) = run(&["sweep", d, "--drain"]);
    assert_eq!(code, 1);
    let lines: Vec<&str> = drain.lines().filter(|l| l.starts_with("scontrol")).collect();
    assert_eq!(lines.len(), 2);
    assert!(lines[0].starts_with("scontrol update NodeName=node0017 State=DRAIN Reason=\"fabprobe: policy.gpu.nvlink_min GPU5;"), "{drain}");
    assert!(drain.contains("\n# node0005: passed but differs from its peers, not drained (--drain-outliers drains it): kernel \"5.15.0-97-generic\" (majority \"5.15.0-105-generic\")\n"), "{drain}");
    let (drain, _, _) = run(&["sweep", d, "--drain", "--drain-outliers"]);
    let lines: Vec<&str> = drain.lines().filter(|l| l.starts_with("scontrol")).collect();
    assert_eq!(lines.len(), 4);
    assert!(lines[0].starts_with("scontrol update NodeName=node0005 State=DRAIN Reason=\"fabprobe: kernel '5.15.0-97-generic' (majority '5.15.0-105-generic': 56 nodes)\""), "{drain}");
    assert!(lines.iter().all(|l| l.len() < 280));

    // The same reports as pdsh would print them, on stdin.
    let mut stdin = String::new();
    for e in std::fs::read_dir(tmp.path()).unwrap() {
        let p = e.unwrap().path();
        let node = p.file_stem().unwrap().to_str().unwrap().to_string();
        for line in std::fs::read_to_string(&p).unwrap().lines() {
            stdin.push_str(&format!("{node}: {line}\n"));
        }
    }
    let (out2, _, code) = run_in(
        &["--format", "json", "sweep", "--expect", "node[0000-0059]"],
        Some(&stdin),
        &[],
    );
    assert_eq!(code, 1);
    let w: serde_json::Value = serde_json::from_str(&out2).unwrap();
    assert_eq!(w["data"]["outliers"], r["outliers"]);
    assert_eq!(w["data"]["bad_nodes"], r["bad_nodes"]);
    let mut a: Vec<String> = w["data"]["unreadable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| format!("{}{}", u["node"], u["problem"]))
        .collect();
    let mut b: Vec<String> = r["unreadable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| format!("{}{}", u["node"], u["problem"]))
        .collect();
    a.sort();
    b.sort();
    assert_eq!(a, b);
    let (table, _, _) = run(&["sweep", d]);
    insta::assert_snapshot!("sweep_table__fleet60", table.replace(d, "DIR"));
}

#[test]
fn sweep_of_a_healthy_fleet_passes() {
    let tmp = tempfile::tempdir().unwrap();
    let (good, _) = check_json("h100-sxm-8gpu", "dgx-h100");
    let mut lines = String::new();
    for i in 0..5 {
        let mut v = good.clone();
        v["host"]["hostname"] = format!("n{i}").into();
        lines.push_str(&serde_json::to_string(&v).unwrap());
        lines.push('\n');
    }
    std::fs::write(tmp.path().join("all.jsonl"), &lines).unwrap();
    let (out, _, code) = run(&["sweep", tmp.path().join("all.jsonl").to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.starts_with(
            "fabprobe sweep: 5 reports: 5 pass, 0 warn, 0 fail; 0 outliers; 0 unreadable; 0 missing"
        ),
        "{out}"
    );
    let (out, _, code) = run(&["--format", "prom", "sweep", tmp.path().to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(out.contains("fabprobe_sweep_nodes{state=\"pass\"} 5\n"), "{out}");
}

/// LBNL NHC is not packaged in Debian, so the drop-in runs under NHC's documented calling
/// convention: nhc sources scripts/*.nhc and runs the configured check function; `die CODE
/// MSG` records the failure (nhc marks the node offline with MSG) and the check returns
/// non-zero.
#[test]
fn nhc_drop_in_catches_a_bad_node() {
    if !common::lab_ready("nhc_drop_in_catches_a_bad_node", &[common::Need::Program("bash", "bash")]) {
        return;
    }
    let harness = r#"
        set -u
        DIED=""
        die() { local code=$1; shift; DIED="$*"; return "$code"; }
        log() { :; }
        dbg() { :; }
        source checks/nhc/fabprobe.nhc
        check_fabprobe "$POLICY"
        rc=$?
        echo "rc=$rc"
        echo "died=$DIED"
    "#;
    let bin = env!("CARGO_BIN_EXE_fabprobe");
    let go = |root: &str, policy: &str| {
        let o = Command::new("bash")
            .arg("-c")
            .arg(harness)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("FABPROBE", bin)
            .env("FABPROBE_ARGS", format!("--root fixtures/{root}"))
            .env("POLICY", policy)
            .output()
            .unwrap();
        String::from_utf8(o.stdout).unwrap()
    };
    let ok = go("h100-sxm-8gpu", "dgx-h100");
    assert_eq!(ok, "rc=0\ndied=\n");
    let bad = go("h100-sxm-8gpu-bad", "dgx-h100");
    // The worst cause (a GPU that lost NVLinks), not the first rule that happened to fail.
    assert_eq!(
        bad,
        "rc=1\ndied=check_fabprobe: fabprobe dgx-h100: policy.gpu.nvlink_min GPU5: GPU5 is below NV18 to 7 of its 7 GPU peers (GPU0 NV12, GPU1 NV12, GPU2 NV12, GPU3 NV12, GPU4 NV12, GPU6 NV12, GPU7 NV12)\n"
    );
    // A configuration error is the same on every node: logged, never a failed node.
    let typo = go("h100-sxm-8gpu-bad", "dgx-h10");
    assert_eq!(typo, "rc=0\ndied=\n");
    let broken = go("does-not-exist", "dgx-h100");
    assert_eq!(broken, "rc=0\ndied=\n");
}

#[test]
fn slurm_health_check_program_drains_a_bad_node() {
    let needs = [
        common::Need::Program("sh", "dash"),
        common::Need::Program("awk", "mawk"),
        common::Need::Program("timeout", "coreutils"),
    ];
    if !common::lab_ready("slurm_health_check_program_drains_a_bad_node", &needs) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (log, path) = common::fake_scontrol(tmp.path());
    let go = |root: &str, policy: &str| {
        let st = Command::new("checks/slurm/fabprobe-healthcheck")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("PATH", &path)
            .env("FABPROBE", env!("CARGO_BIN_EXE_fabprobe"))
            .env("FABPROBE_ARGS", format!("--root fixtures/{root}"))
            .env("FABPROBE_POLICY", policy)
            .env("FABPROBE_NODENAME", "gpu-h100-018")
            .status()
            .unwrap();
        assert!(st.success());
    };
    go("h100-sxm-8gpu", "dgx-h100");
    assert!(!log.exists(), "a healthy node is not drained");
    go("h100-sxm-8gpu-bad", "dgx-h10");
    assert!(!log.exists(), "a misspelled policy drains nothing");
    go("h100-sxm-8gpu-bad", "dgx-h100");
    let args = std::fs::read_to_string(&log).unwrap();
    // The worst cause with its whole subject, cut to 200 characters.
    assert_eq!(
        args,
        "update\nNodeName=gpu-h100-018\nState=DRAIN\nReason=fabprobe dgx-h100: policy.gpu.nvlink_min GPU5: GPU5 is below NV18 to 7 of its 7 GPU peers (GPU0 NV12, GPU1 NV12, GPU2 NV12, GPU3 NV12, GPU4 NV12, GPU6 NV12, GPU7 NV12)\n"
    );
}
