//! NVSwitch systems (issue 34): the Fabric Manager and the GPUs' fabric state in `topo` and
//! `check`. Fixture copies changed by one fact give exactly that fact's finding; the untouched
//! fixtures, GPU-less and PCIe-only hosts give none. The system's GPU daemons are not jobs.

use std::path::{Path, PathBuf};
use std::process::Command;

use fabprobe::host::Host;
use fabprobe::probe::topo;

fn copy_fixture(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let to = dir.path().join(name);
    let st = Command::new("cp")
        .args(["-a", &format!("fixtures/{name}"), to.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(st.success());
    (dir, to)
}

fn edit_json(path: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(path, v.to_string()).unwrap();
}

fn findings(root: &Path) -> Vec<fabprobe::finding::Finding> {
    topo::judge(&topo::probe(&Host::snapshot(root).unwrap()))
}

fn ids(root: &Path) -> Vec<String> {
    findings(root).into_iter().map(|f| f.id).collect()
}

/// The healthy NVSwitch fixtures: the Fabric Manager runs, of the driver's version, and every
/// GPU's fabric registration completed; their topo findings hold nothing about the fabric.
#[test]
fn healthy_nvswitch_fixtures_pass_the_fabric_rules() {
    for (f, version) in [
        ("h100-sxm-8gpu", "550.54.15"),
        ("h100-sxm-8gpu-bad", "550.54.15"),
        ("h100-gdr-broken", "535.161.08"),
    ] {
        let root = PathBuf::from(format!("fixtures/{f}"));
        let r = topo::probe(&Host::snapshot(&root).unwrap());
        let fab = r.fabric.as_ref().expect(f);
        assert_eq!(fab.nvswitches.len(), 4, "{f}");
        assert!(
            fab.nvswitches
                .iter()
                .all(|s| s.driver.as_deref() == Some("nvidia-nvswitch")),
            "{f}"
        );
        let fm = fab.fabric_manager.as_ref().unwrap();
        assert_eq!(
            fm.process,
            fabprobe::probe::fabric::FmProcess::Running { pids: vec![2201] },
            "{f}"
        );
        assert_eq!(fm.version.as_deref(), Some(version), "{f}");
        assert_eq!(fm.driver_version.as_deref(), Some(version), "{f}");
        assert!(
            matches!(fm.service, fabprobe::probe::fabric::FmService::Active { .. }),
            "{f}"
        );
        assert!(
            fab.gpus
                .iter()
                .all(|g| g.state.as_deref() == Some("completed") && g.status == Some(0)),
            "{f}"
        );
        let fabric_ids: Vec<String> = ids(&root).into_iter().filter(|i| i.contains("fabric")).collect();
        assert!(fabric_ids.is_empty(), "{f}: {fabric_ids:?}");
    }
    // The untouched fixture's topo findings are none at all.
    assert_eq!(ids(Path::new("fixtures/h100-sxm-8gpu")), Vec::<String>::new());
}

/// A host without NVSwitches (PCIe GPUs, or no GPU) says nothing about a Fabric Manager.
#[test]
fn gpu_less_and_pcie_only_hosts_say_nothing_about_it() {
    for f in ["cpu-only", "pcie-2socket"] {
        let root = PathBuf::from(format!("fixtures/{f}"));
        let r = topo::probe(&Host::snapshot(&root).unwrap());
        assert_eq!(r.fabric, None, "{f}");
        let table = fabprobe::render::topo::table(&r, &topo::judge(&r), false);
        assert!(!table.contains("Fabric"), "{f}: {table}");
        assert!(!ids(&root).iter().any(|i| i.contains("fabric")), "{f}");
    }
}

/// Each copy differs from `h100-sxm-8gpu` by one fact and gives exactly one finding.
#[test]
fn one_fact_one_finding() {
    // The Fabric Manager's process is gone (the unit stopped: its cgroup too).
    let (_d, snap) = copy_fixture("h100-sxm-8gpu");
    edit_json(&snap.join("fabprobe/facts.json"), |v| {
        v["system_daemons"]
            .as_array_mut()
            .unwrap()
            .retain(|d| d["daemon"] != "nv-fabricmanager");
    });
    std::fs::remove_dir_all(snap.join("sys/fs/cgroup/system.slice/nvidia-fabricmanager.service")).unwrap();
    let f = findings(&snap);
    assert_eq!(
        f.iter().map(|f| f.id.as_str()).collect::<Vec<_>>(),
        ["topo.fabric_manager_not_running"]
    );
    assert!(
        f[0].message
            .contains("CUDA will return 'system not yet initialized' (802)"),
        "{}",
        f[0].message
    );
    assert!(
        f[0].message.starts_with("4 NVSwitches and no Fabric Manager"),
        "{}",
        f[0].message
    );
    assert!(
        f[0].fix
            .as_deref()
            .unwrap()
            .starts_with("`systemctl start nvidia-fabricmanager`")
    );
    assert_eq!(f[0].evidence["service"]["state"], "not_active");

    // One GPU's fabric registration is still in progress.
    let (_d, snap) = copy_fixture("h100-sxm-8gpu");
    edit_json(&snap.join("fabprobe/nvml.json"), |v| {
        v["gpus"][3]["fabric"]["info"]["state"] = "in_progress".into();
    });
    let f = findings(&snap);
    assert_eq!(
        f.iter().map(|f| f.id.as_str()).collect::<Vec<_>>(),
        ["topo.gpu_fabric_not_ready"]
    );
    assert_eq!(f[0].subject, "GPU3");
    assert!(
        f[0].message.contains("NVML_GPU_FABRIC_STATE_IN_PROGRESS"),
        "{}",
        f[0].message
    );

    // The registration completed with an error: NVML's words are the message's.
    let (_d, snap) = copy_fixture("h100-sxm-8gpu");
    edit_json(&snap.join("fabprobe/nvml.json"), |v| {
        for g in [1, 6] {
            v["gpus"][g]["fabric"]["info"]["status"] = 999.into();
            v["gpus"][g]["fabric"]["info"]["status_text"] = "Unknown Error".into();
        }
    });
    let f = findings(&snap);
    assert_eq!(
        f.iter().map(|f| f.id.as_str()).collect::<Vec<_>>(),
        ["topo.gpu_fabric_not_ready"]
    );
    assert_eq!(f[0].subject, "GPU1,GPU6");
    assert!(
        f[0].message
            .contains("completed with an error: Unknown Error (NVML status 999)"),
        "{}",
        f[0].message
    );

    // The Fabric Manager's version is not the loaded driver's.
    let (_d, snap) = copy_fixture("h100-sxm-8gpu");
    edit_json(&snap.join("fabprobe/fabricmanager.json"), |v| {
        v["version_output"]["ok"] = "Fabric Manager version is : 550.90.07\n".into();
    });
    let f = findings(&snap);
    assert_eq!(
        f.iter().map(|f| f.id.as_str()).collect::<Vec<_>>(),
        ["topo.fabric_manager_version"]
    );
    assert!(
        f[0].message
            .starts_with("the Fabric Manager is version 550.90.07, the loaded driver 550.54.15")
    );
    let fix = f[0].fix.as_deref().unwrap();
    assert!(
        fix.contains("`apt-get install nvidia-fabricmanager-550=550.54.15-1`"),
        "{fix}"
    );
    assert!(fix.contains("`systemctl restart nvidia-fabricmanager`"), "{fix}");

    // No NVML: the GPUs' fabric state is not evaluated (never a pass), and said once.
    let (_d, snap) = copy_fixture("h100-sxm-8gpu");
    std::fs::remove_file(snap.join("fabprobe/nvml.json")).unwrap();
    let f = findings(&snap);
    let fabric: Vec<_> = f.iter().filter(|f| f.id.contains("fabric")).collect();
    assert_eq!(fabric.len(), 1, "{f:?}");
    assert_eq!(fabric[0].id, "topo.fabric_not_evaluated");
    assert_eq!(fabric[0].severity, fabprobe::finding::Severity::Unknown);
    assert_eq!(fabric[0].evidence["reasons"].as_array().unwrap().len(), 1);
    assert!(
        fabric[0]
            .message
            .contains("the GPUs' fabric state (8 GPUs): NVML:"),
        "{}",
        fabric[0].message
    );
}

/// A Fabric Manager that is not installed at all: the fix installs the driver's package.
#[test]
fn a_missing_fabric_manager_is_installed_by_the_fix() {
    let (_d, snap) = copy_fixture("h100-sxm-8gpu");
    edit_json(&snap.join("fabprobe/facts.json"), |v| {
        v["system_daemons"]
            .as_array_mut()
            .unwrap()
            .retain(|d| d["daemon"] != "nv-fabricmanager");
    });
    edit_json(&snap.join("fabprobe/fabricmanager.json"), |v| {
        v["version_output"] = serde_json::json!({"error": "/usr/bin/nv-fabricmanager is not installed"});
    });
    let f = findings(&snap);
    assert_eq!(
        f.iter().map(|f| f.id.as_str()).collect::<Vec<_>>(),
        ["topo.fabric_manager_not_running"]
    );
    assert!(
        f[0].fix.as_deref().unwrap().starts_with("install the Fabric Manager of driver 550.54.15: `apt-get install nvidia-fabricmanager-550=550.54.15-1`"),
        "{:?}",
        f[0].fix
    );
}

/// `check` judges it too: the default policy fails the node, naming the finding.
#[test]
fn check_fails_a_node_without_its_fabric_manager() {
    let (_d, snap) = copy_fixture("h100-sxm-8gpu");
    edit_json(&snap.join("fabprobe/facts.json"), |v| {
        v["system_daemons"]
            .as_array_mut()
            .unwrap()
            .retain(|d| d["daemon"] != "nv-fabricmanager");
    });
    let out = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .args(["--root", snap.to_str().unwrap(), "check", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["id"].as_str())
        .collect();
    assert!(ids.contains(&"topo.fabric_manager_not_running"), "{ids:?}");
}

/// `nvidia-persistenced` and `nv-fabricmanager` hold the device files by design: facts
/// written before daemons were told apart (listed among the holders by comm) are read with
/// them apart, so `device_holders_max = 0` does not fail a healthy DGX.
#[test]
fn system_daemons_in_older_facts_are_not_jobs() {
    let (_d, snap) = copy_fixture("h100-sxm-8gpu");
    edit_json(&snap.join("fabprobe/facts.json"), |v| {
        let o = v.as_object_mut().unwrap();
        o.remove("system_daemons");
        o.remove("daemons_scanned");
        o.insert(
            "device_holders".into(),
            serde_json::json!([
                {"pid": 2143, "comm": "nvidia-persiste", "devices": ["/dev/nvidia0", "/dev/nvidiactl"]},
                {"pid": 2201, "comm": "nv-fabricmanage", "devices": ["/dev/nvidia-nvswitch0", "/dev/nvidiactl"]},
            ]),
        );
    });
    let h = Host::snapshot(&snap).unwrap();
    let f = h.facts().facts().unwrap();
    assert!(f.device_holders.is_empty(), "{:?}", f.device_holders);
    let d: Vec<(&str, &str)> = f
        .system_daemons
        .iter()
        .map(|d| (d.daemon.as_str(), d.identified_by.as_str()))
        .collect();
    assert_eq!(d, [("nvidia-persistenced", "comm"), ("nv-fabricmanager", "comm")]);
    for policy in ["dgx-h100", "hdr-a100"] {
        let out = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
            .args([
                "--root",
                snap.to_str().unwrap(),
                "check",
                "--policy",
                policy,
                "--format",
                "json",
            ])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let holders: Vec<&serde_json::Value> = v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["id"].as_str().is_some_and(|i| i.contains("device_holders")))
            .collect();
        assert!(holders.is_empty(), "{policy}: {holders:?}");
    }
}
