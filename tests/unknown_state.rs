//! "Cannot tell" is its own state (issue 17, sections 2 and 4): each test copies a fixture,
//! changes one fact, and asserts that qos / gdr / check say unknown (or not_evaluated)
//! instead of a pass or a fail, or that the fact the fix reads is used.

use std::path::{Path, PathBuf};
use std::process::Command;

fn run(args: &[&str]) -> (String, String, i32) {
    let out = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
        out.status.code().unwrap_or(-1),
    )
}

fn json(root: &Path, args: &[&str]) -> (serde_json::Value, i32) {
    let mut a = vec!["--root", root.to_str().unwrap(), "--format", "json"];
    a.extend_from_slice(args);
    let (out, err, code) = run(&a);
    assert!(code == 0 || code == 1, "{args:?}: exit {code}: {err}");
    (serde_json::from_str(&out).unwrap(), code)
}

/// A copy of `fixtures/NAME` in a temporary directory.
fn copy(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let to = dir.path().join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(name);
    let st = Command::new("cp").arg("-a").arg(src).arg(&to).status().unwrap();
    assert!(st.success());
    (dir, to)
}

fn ids(v: &serde_json::Value) -> Vec<String> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            format!(
                "{}:{}",
                f["severity"].as_str().unwrap(),
                f["id"].as_str().unwrap()
            )
        })
        .collect()
}

fn iface<'a>(v: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    v["data"]["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["ifname"] == name)
        .unwrap_or_else(|| panic!("no interface {name} in {}", v["data"]["interfaces"]))
}

/// roce-bond-host without its per-port traffic_class files: no NCCL_IB_TC anywhere either.
fn without_traffic_class() -> (tempfile::TempDir, PathBuf) {
    let (d, root) = copy("roce-bond-host");
    for dev in ["mlx5_0", "mlx5_1", "mlx5_bond_0"] {
        let p = root.join(format!("sys/class/infiniband/{dev}/tc/1/traffic_class"));
        let real = std::fs::canonicalize(&p).unwrap();
        std::fs::remove_file(real).unwrap();
    }
    (d, root)
}

#[test]
fn qos_unknown_roce_priority_never_fails_a_node_with_lossless_priority_3() {
    let (_d, root) = without_traffic_class();
    let (v, code) = json(&root, &["qos"]);
    assert_eq!(code, 0, "{:?}", ids(&v));
    assert!(!ids(&v).iter().any(|i| i.starts_with("fail:")), "{:?}", ids(&v));
    assert!(
        ids(&v).contains(&"unknown:qos.roce_priority_unknown".to_string()),
        "{:?}",
        ids(&v)
    );
    let i = iface(&v, "ens1f0");
    assert_eq!(i["roce"]["priority"], serde_json::Value::Null);
    assert_eq!(i["roce"]["traffic_class"], serde_json::Value::Null);
    assert_eq!(
        i["roce"]["priority_source"],
        "RoCE priority unknown (no NCCL_IB_TC in the environment or conf files, no per-port traffic_class)"
    );
    let (out, _, _) = run(&["--root", root.to_str().unwrap(), "qos"]);
    assert!(out.contains("RoCE priority unknown"), "{out}");
    // The policy that demands PFC/ECN on 3 judges the config, not a guessed priority
    // (its all_alike rule fails this host for its mixed 100/200 Gb/s cards, unrelated).
    let (v, _) = json(&root, &["check", "--policy", "roce-dcqcn"]);
    let qos_fails: Vec<String> = ids(&v)
        .into_iter()
        .filter(|i| {
            i.starts_with("fail:qos.")
                || i.starts_with("fail:policy.roce.pfc")
                || i.starts_with("fail:policy.roce.ecn")
        })
        .collect();
    assert!(qos_fails.is_empty(), "{qos_fails:?}");
}

#[test]
fn qos_reads_nccl_ib_tc_from_etc_nccl_conf() {
    let (_d, root) = without_traffic_class();
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::write(
        root.join("etc/nccl.conf"),
        "# RoCE on the lossless class\nNCCL_IB_TC=106\n",
    )
    .unwrap();
    let (v, code) = json(&root, &["qos"]);
    assert_eq!(code, 0, "{:?}", ids(&v));
    let i = iface(&v, "ens1f0");
    assert_eq!(i["roce"]["priority"], 3);
    assert_eq!(i["roce"]["traffic_class_source"], "NCCL_IB_TC=106 (/etc/nccl.conf:2)");
    // A value that moves RoCE off the lossless priority now fails, on a known priority.
    std::fs::write(root.join("etc/nccl.conf"), "NCCL_IB_TC=0\n").unwrap();
    let (v, code) = json(&root, &["qos"]);
    assert_eq!(code, 1);
    assert!(
        ids(&v).contains(&"fail:qos.roce_priority_not_lossless".to_string()),
        "{:?}",
        ids(&v)
    );
}

#[test]
fn qos_ecn_notification_point_must_be_on_for_roce_priority_itself() {
    let (_d, root) = copy("roce-bond-host");
    // One fact: ens1f0's notification point moves from priority 3 to priority 5.
    let np = std::fs::canonicalize(root.join("sys/class/net/ens1f0/ecn/roce_np/enable")).unwrap();
    std::fs::write(np.join("3"), "0\n").unwrap();
    std::fs::write(np.join("5"), "1\n").unwrap();
    let (v, _) = json(&root, &["qos"]);
    let f: Vec<&serde_json::Value> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["id"] == "qos.ecn_off_on_roce_priority")
        .collect();
    assert_eq!(f.len(), 1, "{:?}", ids(&v));
    assert!(
        f[0]["subject"].as_str().unwrap().starts_with("ens1f0"),
        "{}",
        f[0]
    );
    assert!(
        f[0]["message"]
            .as_str()
            .unwrap()
            .contains("notification point off"),
        "{}",
        f[0]
    );
}

#[test]
fn qos_probes_every_member_of_a_roce_lag() {
    let (v, _) = json(Path::new("fixtures/roce-bond-host"), &["qos"]);
    for m in ["ens2f0", "ens2f1"] {
        let i = iface(&v, m);
        assert_eq!(i["rdma_device"], "mlx5_bond_0", "{m}");
        assert_eq!(i["dcb"]["pfc_enabled"], serde_json::json!([3]), "{m}");
    }
}

#[test]
fn qos_finds_a_roce_netdev_outside_the_pci_device_through_gid_ndevs() {
    let (_d, root) = copy("roce-bond-host");
    // One fact: ens1f1 is not under mlx5_1's PCI function (moved to the virtual devices,
    // as in a container or behind a representor); its GIDs still name it.
    let link = root.join("sys/class/net/ens1f1");
    let real = std::fs::canonicalize(&link).unwrap();
    let virt = root.join("sys/devices/virtual/net/ens1f1");
    std::fs::create_dir_all(virt.parent().unwrap()).unwrap();
    std::fs::rename(&real, &virt).unwrap();
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink("../../devices/virtual/net/ens1f1", &link).unwrap();
    let (v, _) = json(&root, &["qos"]);
    let i = iface(&v, "ens1f1");
    assert_eq!(i["rdma_device"], "mlx5_1");
    assert!(
        !v["data"]["notes"]
            .to_string()
            .contains("mlx5_1 port 1: RoCE port without a netdev"),
        "{}",
        v["data"]["notes"]
    );
}

#[test]
fn permission_denied_on_sys_class_infiniband_is_not_no_infiniband() {
    let (_d, root) = copy("roce-bond-host");
    std::fs::write(
        root.join("fabprobe/read-errors.json"),
        r#"{"/sys/class/infiniband": "EACCES"}"#,
    )
    .unwrap();
    for cmd in ["qos", "gids", "links"] {
        let (v, _) = json(&root, &[cmd]);
        let msg = v["data"]["rdma"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(msg.starts_with("RDMA devices unknown"), "{cmd}: {msg}");
        assert!(!msg.contains("no InfiniBand support"), "{cmd}: {msg}");
        assert!(v["data"]["rdma"]["unreadable"].is_string(), "{cmd}");
    }
    // check: the [roce] rules are not evaluated, not passed.
    let (v, code) = json(&root, &["check", "--policy", "roce-dcqcn"]);
    assert_eq!(code, 0, "{:?}", ids(&v));
    assert!(
        !v["data"]["not_evaluated"].as_array().unwrap().is_empty(),
        "{:?}",
        v["data"]
    );
}

#[test]
fn gdr_unknown_dmabuf_prerequisite_is_unknown_not_no_path() {
    let (_d, root) = copy("h100-gdr-broken");
    // One fact: the NVIDIA driver version (open or proprietary module) cannot be read.
    std::fs::remove_file(root.join("proc/driver/nvidia/version")).unwrap();
    let (v, _) = json(&root, &["gdr"]);
    assert_eq!(v["data"]["dmabuf"]["path"], "unknown");
    assert_eq!(
        v["data"]["dmabuf"]["unknown"],
        serde_json::json!(["nvidia open module"])
    );
    let i = ids(&v);
    assert!(!i.contains(&"fail:gdr.peermem_not_loaded".to_string()), "{i:?}");
    assert!(i.contains(&"unknown:gdr.unknown".to_string()), "{i:?}");
    let pairs = v["data"]["pairs"].as_array().unwrap();
    assert!(
        pairs
            .iter()
            .filter(|p| p["nccl_nearest"] == true && p["verdict"] != "off_distance")
            .all(|p| p["verdict"] == "unknown"),
        "{pairs:?}"
    );
    let (out, _, _) = run(&["--root", root.to_str().unwrap(), "gdr"]);
    assert!(out.contains("DMA-BUF: unknown"), "{out}");
}

#[test]
fn gdr_ready_with_unreadable_acs_is_not_evaluated() {
    let (_d, root) = copy("h100-sxm-8gpu");
    // One fact: config space read as a non-root user (64 bytes: no extended capabilities).
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
    let (v, _) = json(&root, &["check", "--policy", "dgx-h100"]);
    assert!(
        !ids(&v).contains(&"fail:policy.gdr.ready".to_string()),
        "{:?}",
        ids(&v)
    );
    let ne: Vec<&serde_json::Value> = v["data"]["not_evaluated"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["key"] == "gdr.ready")
        .collect();
    assert!(!ne.is_empty(), "{:?}", ids(&v));
    assert!(ne[0]["reason"].as_str().unwrap().contains("ACS"), "{}", ne[0]);
}

/// What `check` could not evaluate reaches the metrics as its own series (one per key), not
/// as a warn or a fail: h100-penny as non-root reads no ACS and sees no peer-memory client.
#[test]
fn check_prom_names_each_key_not_evaluated() {
    let (out, err, code) = run(&["--root", "fixtures/h100-penny", "--format", "prom", "check"]);
    assert_eq!(code, 0, "{err}");
    for key in ["gdr.acs", "gdr.ready"] {
        let line = format!("fabprobe_check_not_evaluated{{policy=\"default\",key=\"{key}\"}} 1");
        assert!(out.lines().any(|l| l == line), "{line} missing in\n{out}");
    }
    assert!(out.contains("fabprobe_check_verdict{policy=\"default\"} 0"), "{out}");
}
