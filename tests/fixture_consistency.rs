//! Fixtures hold values a real kernel or driver would write. `fixtures/gen/consistency.py`
//! refuses the contradictions a review found (every generator runs it); here the suite runs
//! it too, on every committed tree (a hand edit cannot slip one in), and on copies of
//! fixtures with each of those contradictions put back, which it must refuse by name (a
//! checker that accepts everything would pass the first test alone).
//! Needs python3 (installed by `.ci/run`): without it the tests fail under
//! `FABPROBE_LAB=required` and otherwise print SKIPPED.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn python() -> bool {
    if Command::new("python3").arg("--version").output().is_ok() {
        return true;
    }
    common::lab_unavailable(
        "fixture_consistency",
        "python3 is not installed (it runs fixtures/gen/consistency.py)",
    );
    false
}

/// `consistency.py` on `roots`: (exit code, what it printed).
fn check(roots: &[PathBuf]) -> (i32, String) {
    let o = Command::new("python3")
        .arg(Path::new(ROOT).join("fixtures/gen/consistency.py"))
        .args(roots)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
    )
}

fn fixtures() -> Vec<PathBuf> {
    common::fixture_names().iter().map(|f| Path::new(ROOT).join("fixtures").join(f)).collect()
}

#[test]
fn every_committed_fixture_is_consistent() {
    if !python() {
        return;
    }
    let all = fixtures();
    assert!(all.len() >= 11, "{all:?}");
    let (code, out) = check(&all);
    assert_eq!(code, 0, "{out}");
    assert!(out.is_empty(), "{out}");
}

fn copy(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let to = dir.path().join(name);
    let st = Command::new("cp")
        .args(["-a", &format!("{ROOT}/fixtures/{name}")])
        .arg(&to)
        .status()
        .unwrap();
    assert!(st.success());
    (dir, to)
}

fn write(root: &Path, rel: &str, value: &str) {
    let p = root.join(rel);
    assert!(
        p.exists(),
        "{} does not exist: the case no longer edits a real file",
        p.display()
    );
    std::fs::write(p, value).unwrap();
}

/// Each contradiction the review found, put back into a copy: the checker must refuse it
/// with a message naming it.
#[test]
fn each_known_contradiction_is_refused() {
    if !python() {
        return;
    }
    let ib = "sys/class/infiniband/mlx5_0/ports/1";
    type Edit = Box<dyn Fn(&Path)>;
    let cases: Vec<(&str, &str, Edit)> = vec![
        (
            "cpu-only",
            "(the kernel prints 0, not 0-0)",
            Box::new(|r| write(r, "sys/devices/system/node/online", "0-0\n")),
        ),
        (
            "container-sparse-gids",
            "has 8 bytes; type 1 has 6",
            Box::new(|r| write(r, "sys/class/net/net1/address", "a6:ed:cc:ff:fe:8b:19:94\n")),
        ),
        (
            "opa-hfi1",
            "driver hfi1 on PCI class 0x0c8000",
            Box::new(|r| write(r, "sys/bus/pci/devices/0000:81:00.0/class", "0x0c8000\n")),
        ),
        (
            "ib-degraded",
            "128 GID slots on an mlx5 InfiniBand port",
            Box::new(move |r| {
                let gids = r.join(ib).join("gids");
                for i in 8..128 {
                    std::fs::write(
                        gids.join(i.to_string()),
                        "0000:0000:0000:0000:0000:0000:0000:0000\n",
                    )
                    .unwrap();
                }
            }),
        ),
        (
            "cloud-vm-flat",
            "name 'NVIDIA A100-SXM4-40GB' but PCI device 0x20b2",
            Box::new(|r| write(r, "sys/bus/pci/devices/0000:00:04.0/device", "0x20b2\n")),
        ),
        (
            "h100-sxm-8gpu",
            "pcie_link_gen_current 5 but sysfs current_link_speed is Gen1",
            Box::new(|r| {
                let p = r.join("fabprobe/nvml.json");
                let mut v: serde_json::Value =
                    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
                v["gpus"][0]["pcie_link_gen_current"] = 5.into();
                std::fs::write(p, v.to_string()).unwrap();
            }),
        ),
        (
            "ib-degraded",
            "port_rcv_packets 2987690000 < unicast 2987700000",
            Box::new(move |r| write(r, &format!("{ib}/counters/port_rcv_packets"), "2987690000\n")),
        ),
        (
            "ib-degraded",
            "port_xmit_packets 3012234010 < unicast 3012230000 + multicast 5000",
            Box::new(move |r| write(r, &format!("{ib}/counters/multicast_xmit_packets"), "5000\n")),
        ),
        (
            "ib-degraded",
            "port_rcv_data 798212334560 words with port_rcv_packets 0",
            Box::new(move |r| {
                for c in ["port_rcv_packets", "unicast_rcv_packets", "multicast_rcv_packets"] {
                    write(r, &format!("{ib}/counters/{c}"), "0\n");
                }
            }),
        ),
        (
            "old-kernel-nopma",
            "counters_ext/port_xmit_data_64 0 below the 32-bit port_xmit_data 3123123123",
            Box::new(|r| {
                write(
                    r,
                    "sys/class/infiniband/mlx4_0/ports/1/counters_ext/port_xmit_data_64",
                    "0\n",
                )
            }),
        ),
        (
            "cpu-only",
            "vendor 0x1022 with subsystem vendor 0x8086",
            Box::new(|r| {
                write(
                    r,
                    "sys/devices/pci0000:00/0000:00:01.1/subsystem_vendor",
                    "0x8086\n",
                )
            }),
        ),
    ];
    for (fixture, want, edit) in cases {
        let (_d, root) = copy(fixture);
        edit(&root);
        let (code, out) = check(std::slice::from_ref(&root));
        assert_eq!(code, 1, "{fixture}: {want:?} accepted:\n{out}");
        assert!(out.contains(want), "{fixture}: want {want:?} in:\n{out}");
    }
}
