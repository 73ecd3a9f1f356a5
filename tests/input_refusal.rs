//! Wrong input is refused with exit 2 and a message naming it, never reported as a clean
//! node (issue 21): `--root` that is not a snapshot, a `--baseline` of another host or from
//! after the report.

mod common;

use std::process::Command;

fn run(args: &[&str]) -> (String, String, i32) {
    let o = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        o.status.code().unwrap_or(-1),
    )
}

#[test]
fn root_without_sys_is_not_a_snapshot_for_every_command() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().to_str().unwrap();
    let commands: Vec<[&str; 1]> = common::host_commands().into_iter().map(|c| [c]).collect();
    // Every command that takes --root (snapshot, ring, sweep, nccl-log refuse it), on an
    // empty directory and on the fixtures directory (one level too high).
    for root in [empty, "fixtures"] {
        for c in &commands {
            let mut args = vec!["--root", root];
            args.extend_from_slice(c);
            let (stdout, err, code) = run(&args);
            assert_eq!(code, 2, "{args:?}: {stdout}{err}");
            assert!(
                err.contains(&format!("not a snapshot: {root} (no sys/)")),
                "{args:?}: {err}"
            );
        }
    }
}

#[test]
fn baseline_of_another_host_is_refused_naming_both() {
    let (out, err, code) = run(&[
        "--root",
        "fixtures/ib-degraded-later",
        "links",
        "--baseline",
        "fixtures/roce-bond-host",
    ]);
    assert_eq!(code, 2, "{out}");
    assert!(
        err.contains(
            "--baseline fixtures/roce-bond-host is host roce-node-07, this report is host gpu-ib-12"
        ),
        "{err}"
    );
}

#[test]
fn baseline_with_other_node_guids_is_refused() {
    // The same hostname on other hardware: a copy of the baseline with one GUID changed.
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    let st = Command::new("cp")
        .args(["-a", "fixtures/ib-degraded"])
        .arg(&base)
        .status()
        .unwrap();
    assert!(st.success());
    let guid = base.join("sys/class/infiniband");
    let dev = std::fs::read_dir(&guid).unwrap().next().unwrap().unwrap().path();
    let node_guid = std::fs::canonicalize(dev).unwrap().join("node_guid");
    let before = std::fs::read_to_string(&node_guid).unwrap();
    std::fs::write(&node_guid, "dead:beef:0000:0001\n").unwrap();
    let (out, err, code) = run(&[
        "--root",
        "fixtures/ib-degraded-later",
        "links",
        "--baseline",
        base.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{out}");
    assert!(
        err.contains("has other RDMA node GUIDs than this host gpu-ib-12"),
        "{err}"
    );
    assert!(err.contains("baseline only dead:beef:0000:0001"), "{err}");
    assert!(err.contains(&format!("here only {}", before.trim())), "{err}");
}

#[test]
fn baseline_newer_than_the_report_is_refused_naming_both_times() {
    for cmd in ["links", "qos", "check"] {
        let (later, earlier) = if cmd == "qos" {
            ("fixtures/roce-pause-storm-later", "fixtures/roce-pause-storm")
        } else {
            ("fixtures/ib-degraded-later", "fixtures/ib-degraded")
        };
        let (out, err, code) = run(&["--root", earlier, cmd, "--baseline", later]);
        assert_eq!(code, 2, "{cmd}: {out}{err}");
        assert!(
            err.contains(&format!("--baseline {later} was captured at")),
            "{cmd}: {err}"
        );
        assert!(err.contains("after this report ("), "{cmd}: {err}");
        // The right order still works.
        let (_, err, code) = run(&["--root", later, cmd, "--baseline", earlier]);
        assert!(code == 0 || code == 1, "{cmd}: {err}");
    }
}
