//! `fabprobe gdr` and `fabprobe qos` through the binary: whole reports (table and JSON)
//! against fixtures, deltas between two snapshots, Prometheus, bad recorded replies, the
//! snapshot round trip of ioctl/netlink answers, and the live host (no GPU, no RDMA).

mod common;

use std::path::Path;
use std::process::Command;

use fabprobe::host::Host;
use fabprobe::nccl::settings::NcclSettings;
use fabprobe::probe::{gdr, qos};

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

fn snapshot_reports(cmd: &str, fixtures: &[(&str, i32)]) {
    for (f, want) in fixtures {
        let root = format!("fixtures/{f}");
        let (table, err, code) = run(&["--root", &root, cmd]);
        assert_eq!(code, *want, "{f}: exit {code}: {err}");
        insta::assert_snapshot!(format!("{cmd}_table__{f}"), format!("exit {code}\n{table}"));
        let (json, _, jcode) = run(&["--root", &root, "--format", "json", cmd]);
        assert_eq!(code, jcode, "{f}: table and json disagree on the exit code");
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["schema"], format!("fabprobe.{cmd}"));
        insta::assert_json_snapshot!(format!("{cmd}_json__{f}"), v);
    }
}

#[test]
fn gdr_whole_reports() {
    snapshot_reports(
        "gdr",
        &[
            ("h100-sxm-8gpu", 0),
            ("h100-gdr-broken", 1),
            ("cloud-vm-flat", 0),
            // No GPU: nothing to judge, exit 3.
            ("roce-bond-host", 3),
            ("cpu-only", 3),
        ],
    );
}

#[test]
fn qos_whole_reports() {
    snapshot_reports(
        "qos",
        &[
            ("roce-bond-host", 0),
            ("roce-qos-mismatch", 1),
            ("roce-pause-storm", 0),
            ("roce-pause-storm-later", 1),
            // Its two RoCE ports (mlx5_8, mlx5_9) are judged: PFC off is a warning.
            ("h100-sxm-8gpu", 0),
            // No RDMA device: no RoCE netdev to judge, exit 3.
            ("cpu-only", 3),
        ],
    );
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

#[test]
fn gdr_verdicts_and_findings() {
    let (out, _, _) = run(&["--root", "fixtures/h100-sxm-8gpu", "--format", "json", "gdr"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(ids(&v).is_empty(), "{:?}", ids(&v));
    let pairs = v["data"]["pairs"].as_array().unwrap();
    let nearest: Vec<_> = pairs.iter().filter(|p| p["nccl_nearest"] == true).collect();
    assert_eq!(nearest.len(), 8);
    assert!(nearest.iter().all(|p| p["verdict"] == "on" && p["path"] == "PIX"));
    assert_eq!(v["data"]["gpus"][0]["bar1_total_bytes"], 137438953472u64);

    let (out, _, code) = run(&["--root", "fixtures/h100-gdr-broken", "--format", "json", "gdr"]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        ids(&v),
        [
            "fail:gdr.acs_redirect",
            "fail:gdr.peermem_not_loaded",
            "fail:gdr.iommu_translation"
        ]
    );
    assert_eq!(v["data"]["dmabuf"]["possible"], false);
    assert_eq!(v["data"]["dmabuf"]["nvidia_open_module"], false);

    // NCCL_NET_GDR_LEVEL from the environment moves the verdicts.
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    copy_tree(Path::new("fixtures/h100-sxm-8gpu"), &snap);
    std::fs::write(snap.join("fabprobe/env.json"), r#"{"NCCL_NET_GDR_LEVEL": "LOC"}"#).unwrap();
    let (out, _, _) = run(&["--root", snap.to_str().unwrap(), "--format", "json", "gdr"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["data"]["nccl_net_gdr_level"]["level"], "LOC");
    assert_eq!(ids(&v), ["warn:gdr.off_distance"]);
    std::fs::write(snap.join("fabprobe/env.json"), r#"{"NCCL_NET_GDR_LEVEL": "SYS"}"#).unwrap();
    let (out, _, _) = run(&["--root", snap.to_str().unwrap(), "--format", "json", "gdr"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["data"]["pairs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["verdict"] == "on")
    );
}

/// ACS as a non-root reader sees it: 64 bytes of config space give "unknown", never "off".
#[test]
fn acs_from_64_byte_config_is_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    copy_tree(Path::new("fixtures/h100-gdr-broken"), &snap);
    for entry in walk(&snap) {
        if entry.file_name().is_some_and(|n| n == "config") {
            let b = std::fs::read(&entry).unwrap();
            std::fs::write(&entry, &b[..64]).unwrap();
        }
    }
    let (out, _, _) = run(&["--root", snap.to_str().unwrap(), "--format", "json", "gdr"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        ids(&v).contains(&"unknown:gdr.acs_unknown".to_string()),
        "{:?}",
        ids(&v)
    );
    assert!(!ids(&v).contains(&"fail:gdr.acs_redirect".to_string()));
    assert_eq!(v["data"]["bridges"][0]["acs"]["state"], "unknown");
    assert_eq!(v["data"]["bridges"][0]["acs"]["bytes_read"], 64);
}

#[test]
fn qos_findings_per_fixture() {
    let get = |f: &str| {
        let (out, _, _) = run(&["--root", &format!("fixtures/{f}"), "--format", "json", "qos"]);
        serde_json::from_str::<serde_json::Value>(&out).unwrap()
    };
    assert!(ids(&get("roce-bond-host")).is_empty());
    assert_eq!(
        ids(&get("roce-qos-mismatch")),
        [
            "fail:qos.roce_priority_not_lossless",
            "warn:qos.ecn_off_on_roce_priority",
            "fail:qos.global_pause_with_pfc",
            "warn:qos.ecn_marks_without_cnps"
        ]
    );
    let v = get("roce-bond-host");
    let i = &v["data"]["interfaces"][0];
    assert_eq!(i["dcb"]["pfc_enabled"], serde_json::json!([3]));
    assert_eq!(
        i["ethtool"]["pfc_priorities_from_counters"],
        serde_json::json!([3])
    );
    assert_eq!(i["roce"]["priority"], 3);
    assert_eq!(i["dcb"]["trust"], "dscp");
    assert_eq!(i["dcb"]["dcbx_mode"], "firmware controlled");
    let v = get("roce-pause-storm");
    assert_eq!(v["data"]["interfaces"][0]["ecn"], serde_json::Value::Null);
    assert!(
        v["data"]["interfaces"][0]["ecn_unknown_reason"]
            .as_str()
            .unwrap()
            .starts_with("unknown (inbox driver)")
    );
}

#[test]
fn qos_deltas_between_two_snapshots() {
    let args = [
        "--root",
        "fixtures/roce-pause-storm-later",
        "qos",
        "--baseline",
        "fixtures/roce-pause-storm",
    ];
    let (table, err, code) = run(&args);
    assert_eq!(code, 1, "{err}");
    insta::assert_snapshot!("qos_baseline_table__roce-pause-storm", table);
    let mut j = args.to_vec();
    j.insert(2, "--format");
    j.insert(3, "json");
    let (json, _, _) = run(&j);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["data"]["sample"]["interval_s"], 60.0);
    let p3 = &v["data"]["interfaces"][0]["priorities"][3]["pause"];
    assert_eq!(p3["tx_pause"]["delta"], 1_233_200);
    assert_eq!(p3["tx_pause_duration_us"]["rate_per_s"], 850_000.0);
    assert_eq!(ids(&v), ["fail:qos.pause_storm", "warn:qos.pause_time_high"]);
    // Swapped: a baseline captured after the report is refused (issue 21), naming both
    // times, instead of judging counters that went backwards.
    let (json, err, code) = run(&[
        "--root",
        "fixtures/roce-pause-storm",
        "--format",
        "json",
        "qos",
        "--baseline",
        "fixtures/roce-pause-storm-later",
    ]);
    assert_eq!(code, 2, "{json}");
    assert!(err.contains("--baseline fixtures/roce-pause-storm-later was captured at"), "{err}");
}

#[test]
fn qos_prom() {
    let (prom, _, _) = run(&["--root", "fixtures/roce-bond-host", "--format", "prom", "qos"]);
    insta::assert_snapshot!("qos_prom__roce-bond-host", prom);
}

/// Recorded DCB replies that are short, lying or not hex, and a snapshot without the side
/// files: notes and errors in the report, never a panic, exit 0 or 1.
#[test]
fn bad_recorded_replies() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    copy_tree(Path::new("fixtures/roce-qos-mismatch"), &snap);
    let dcb: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(snap.join("fabprobe/dcb.json")).unwrap()).unwrap();
    let hex = dcb["ens1f0np0"]["ok"].as_str().unwrap().to_string();
    for (cut, expect) in [
        (hex[..50].to_string(), "claims"),
        (hex[..6].to_string(), "shorter than struct dcbmsg"),
    ] {
        std::fs::write(
            snap.join("fabprobe/dcb.json"),
            serde_json::json!({"ens1f0np0": {"ok": cut}}).to_string(),
        )
        .unwrap();
        let (out, err, code) = run(&["--root", snap.to_str().unwrap(), "--format", "json", "qos"]);
        assert!(code == 0 || code == 1, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let notes = v["data"]["interfaces"][0]["dcb"]["notes"].to_string();
        assert!(notes.contains(expect), "{notes}");
    }
    std::fs::write(snap.join("fabprobe/dcb.json"), r#"{"ens1f0np0": {"ok": "zz1"}}"#).unwrap();
    let (out, _, _) = run(&["--root", snap.to_str().unwrap(), "--format", "json", "qos"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["data"]["interfaces"][0]["dcb"]["error"],
        "the recorded reply is not hex"
    );
    std::fs::remove_file(snap.join("fabprobe/dcb.json")).unwrap();
    std::fs::remove_file(snap.join("fabprobe/ethtool.json")).unwrap();
    let (table, _, code) = run(&["--root", snap.to_str().unwrap(), "qos"]);
    assert_eq!(code, 0);
    assert!(table.contains("DCB: not captured in this snapshot"), "{table}");
    assert!(table.contains("ethtool statistics: not_captured"), "{table}");
    // A side file that is not JSON names itself.
    std::fs::write(snap.join("fabprobe/dcb.json"), "{not json").unwrap();
    let (_, err, code) = run(&["--root", snap.to_str().unwrap(), "qos"]);
    assert_eq!(code, 2);
    assert!(err.contains("fabprobe/dcb.json"), "{err}");
}

/// `snapshot` keeps what gdr and qos read, ioctl/netlink answers and symlink names included:
/// re-capturing a fixture gives the same reports.
#[test]
fn recapture_keeps_gdr_and_qos_reports() {
    for f in [
        "h100-sxm-8gpu",
        "h100-gdr-broken",
        "roce-qos-mismatch",
        "roce-bond-host",
    ] {
        let src = format!("fixtures/{f}");
        let host = Host::snapshot(&src).unwrap().with_recording();
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("snap");
        fabprobe::snapshot::capture(&host, Path::new(&src), &out).unwrap();
        let orig = Host::snapshot(&src).unwrap();
        let again = Host::snapshot(&out).unwrap();
        let (na, no) = (
            NcclSettings::build(&again, None),
            NcclSettings::build(&orig, None),
        );
        assert_eq!(gdr::probe(&again, &na), gdr::probe(&orig, &no), "{f}");
        assert_eq!(
            qos::probe(&again, na.ib_tc().as_ref()),
            qos::probe(&orig, no.ib_tc().as_ref()),
            "{f}"
        );
    }
}

#[test]
fn live_host_runs_cleanly() {
    let (out, err, code) = run(&["gdr"]);
    assert!(code == 0 || code == 3, "{err}");
    assert!(out.contains("NCCL_NET_GDR_LEVEL"), "{out}");
    let (out, err, code) = run(&["qos"]);
    assert!(code == 0 || code == 3, "{err}");
    assert!(!out.is_empty());
    // Loopback has no DCB ops: the kernel answers EOPNOTSUPP, shown as not supported; with
    // no pause counter and no ecn/ either, nothing was judged: NOT EVALUATED, exit 3 (issue
    // 42), never a pass.
    let (out, err, code) = run(&["qos", "--ifname", "lo", "--format", "json"]);
    assert_eq!(code, 3, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["data"]["interfaces"][0]["dcb"]["error"], "EOPNOTSUPP");
    assert_eq!(v["findings"][0]["id"], "qos.nothing_to_judge", "{out}");
    assert!(
        v["findings"][0]["message"]
            .as_str()
            .unwrap()
            .contains("lo (DCB: EOPNOTSUPP"),
        "{out}"
    );
    let (_, _, code) = run(&["qos", "--ifname", "lo", "--interval", "0.2"]);
    assert_eq!(code, 3);
    // A netdev the host does not have is a mistake in the command, named (issue 42).
    let (_, err, code) = run(&["qos", "--ifname", "no-such-if0", "--format", "json"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--ifname no-such-if0: no netdev named no-such-if0"), "{err}");
    let (_, err, code) = run(&["--root", "fixtures/roce-bond-host", "qos", "--interval", "1"]);
    assert_eq!(code, 2);
    assert!(err.contains("--baseline"), "{err}");
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                stack.push(e.path());
            } else if ft.is_file() {
                out.push(e.path());
            }
        }
    }
    out
}

/// `cp -a` (symlinks kept as symlinks).
fn copy_tree(src: &Path, dst: &Path) {
    let st = Command::new("cp").arg("-a").arg(src).arg(dst).status().unwrap();
    assert!(st.success());
}

#[test]
fn qos_lldp_replayed_from_a_snapshot() {
    let (out, _, code) = run(&[
        "--root",
        "fixtures/roce-qos-mismatch",
        "--format",
        "json",
        "qos",
        "--lldp",
    ]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let sw = &v["data"]["interfaces"][0]["switch"]["lldp"];
    assert_eq!(sw["system_name"], "leaf-07");
    assert_eq!(sw["port_id"], "Ethernet1/12");
    assert_eq!(sw["pfc"]["pfc_enable"], 8);
    let f = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "qos.switch_pfc_mismatch")
        .expect("switch mismatch finding");
    assert_eq!(
        f["message"],
        "switch leaf-07 Ethernet1/12 enables PFC on priority 3, this host on priority 4"
    );
    let (table, _, _) = run(&["--root", "fixtures/roce-qos-mismatch", "qos", "--lldp"]);
    insta::assert_snapshot!("qos_lldp_table__roce-qos-mismatch", table);
    // Without --lldp the recorded frame is not consulted.
    let (out, _, _) = run(&["--root", "fixtures/roce-qos-mismatch", "--format", "json", "qos"]);
    assert!(!out.contains("switch_pfc_mismatch"));
}

/// Network lab: a real LLDP frame with PFC/ETS/APP TLVs sent from another namespace over a
/// veth pair, decoded live by `fabprobe qos --lldp`; and a silent peer said plainly.
#[test]
fn lab_qos_decodes_live_lldp_over_veth() {
    let needs = [
        common::Need::Root("network namespaces and a veth pair"),
        common::Need::Program("ip", "iproute2"),
    ];
    if !common::lab_ready("lab_qos_decodes_live_lldp_over_veth", &needs) {
        return;
    }
    let id = std::process::id() % 100_000;
    let (na, nb) = (format!("fpql{id}a"), format!("fpql{id}b"));
    let (va, vb) = (format!("fql{id}a"), format!("fql{id}b"));
    struct Cleanup(String, String);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
            let _ = Command::new("ip").args(["netns", "del", &self.1]).status();
        }
    }
    let _c = Cleanup(na.clone(), nb.clone());
    let sh = |args: &[&str]| {
        let st = Command::new("ip").args(args).status().unwrap();
        assert!(st.success(), "ip {args:?}");
    };
    sh(&["netns", "add", &na]);
    sh(&["netns", "add", &nb]);
    sh(&["link", "add", &va, "type", "veth", "peer", "name", &vb]);
    sh(&["link", "set", &va, "netns", &na]);
    sh(&["link", "set", &vb, "netns", &nb]);
    sh(&["-n", &na, "link", "set", &va, "up"]);
    sh(&["-n", &nb, "link", "set", &vb, "up"]);
    let bin = env!("CARGO_BIN_EXE_fabprobe");
    // Nobody sends yet: the silence is reported with its likely reasons, exit 0.
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &na,
            bin,
            "qos",
            "--ifname",
            &va,
            "--lldp",
            "--lldp-wait",
            "0.5",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("no LLDP frame arrived"), "{text}");
    // A sender in the other namespace: the frame the fixtures use, every 200 ms.
    let frame = fabprobe::sysfs::lldp::encode::frame(
        [0x50, 0x6b, 0x4b, 0x11, 0x22, 0x33],
        "leaf-07",
        "Ethernet1/12",
        &[3],
        &[(5, 26, 3)],
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sender = {
        let (stop, nb, vb) = (stop.clone(), nb.clone(), vb.clone());
        std::thread::spawn(move || send_frames_in_netns(&nb, &vb, &frame, &stop))
    };
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &na,
            bin,
            "--format",
            "json",
            "qos",
            "--ifname",
            &va,
            "--lldp",
            "--lldp-wait",
            "5",
        ])
        .output()
        .unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let sent = sender.join().unwrap();
    assert!(sent > 0, "the sender thread sent nothing");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let i = &v["data"]["interfaces"][0];
    assert_eq!(i["dcb"]["error"], "EOPNOTSUPP");
    let l = &i["switch"]["lldp"];
    assert_eq!(l["system_name"], "leaf-07");
    assert_eq!(l["chassis_id"], "50:6b:4b:11:22:33");
    assert_eq!(l["pfc"]["pfc_enable"], 8);
    assert_eq!(l["ets"]["prio_tc"], serde_json::json!([0, 0, 0, 3, 0, 0, 6, 0]));
    assert_eq!(l["app"][0]["protocol"], 26);
    assert!(i["switch"]["waited_s"].as_f64().unwrap() <= 5.0);
}

/// From a thread moved into network namespace `ns` (setns affects this thread only), send
/// `frame` on `ifname` through an AF_PACKET socket every 200 ms until `stop`. Returns the
/// number of frames sent.
fn send_frames_in_netns(ns: &str, ifname: &str, frame: &[u8], stop: &std::sync::atomic::AtomicBool) -> usize {
    use pnet::datalink::{self, Channel};
    let f = std::fs::File::open(format!("/run/netns/{ns}")).unwrap();
    nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap_or_else(|e| panic!("setns {ns}: {e}"));
    let iface = datalink::interfaces()
        .into_iter()
        .find(|i| i.name == ifname)
        .unwrap_or_else(|| panic!("{ifname} not found in {ns}"));
    let Ok(Channel::Ethernet(mut tx, _rx)) = datalink::channel(&iface, datalink::Config::default()) else {
        panic!("no AF_PACKET channel on {ifname} in {ns}");
    };
    let mut sent = 0;
    for _ in 0..100 {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
        if let Some(Ok(())) = tx.send_to(frame, None) {
            sent += 1;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    sent
}
