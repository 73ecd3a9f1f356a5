//! `fabprobe topo` against every fixture (whole matrices and whole reports), against the
//! real nvidia-smi capture the Penny fixture mirrors, and against the two real NCCL
//! topology files; the XML round trip; the CLI's JSON, exit codes and live run.

use std::path::Path;
use std::process::Command;

use fabprobe::host::Host;
use fabprobe::nccl::topo_xml;
use fabprobe::probe::topo::{self, TopoReport};
use fabprobe::render;

const FIXTURES: &[&str] = &[
    "h100-sxm-8gpu",
    "h100-penny",
    "pcie-2socket",
    "cloud-vm-flat",
    "cpu-only",
    "rxe-vm",
];

fn report(fixture: &str) -> TopoReport {
    // A relative path keeps the report's `source` the same on every machine.
    let host = Host::snapshot(format!("fixtures/{fixture}")).unwrap();
    topo::probe(&host)
}

/// Expand tabs to 8-column stops, as the published samples have them.
fn expand(s: &str) -> String {
    let mut out = String::new();
    for line in s.lines() {
        let mut col = 0;
        for ch in line.chars() {
            if ch == '\t' {
                let n = 8 - col % 8;
                out.extend(std::iter::repeat_n(' ', n));
                col += n;
            } else {
                out.push(ch);
                col += 1;
            }
        }
        // Published copies drop trailing blanks (the last ` X ` of a NIC row).
        while out.ends_with(' ') {
            out.pop();
        }
        out.push('\n');
    }
    out
}

fn sample(name: &str) -> String {
    std::fs::read_to_string(Path::new("tests/data/nvidia-smi").join(name)).unwrap()
}

/// The matrix and legends of a sample: everything after the `#` source lines and an
/// optional `$nvidia-smi topo -m` line, trailing blank lines removed.
fn sample_table(name: &str) -> String {
    let text = sample(name);
    let body: Vec<&str> = text
        .lines()
        .skip_while(|l| l.starts_with('#') || l.starts_with('$'))
        .collect();
    let mut s = body.join("\n");
    while s.ends_with('\n') {
        s.pop();
    }
    s.push('\n');
    expand(&s)
}

/// Consistency, not discovery: the `h100-penny` tree was generated to reproduce this very
/// capture (its PCI tree and NUMA facts chosen so), so this proves that the probe and the
/// renderer give the capture back from such a tree, cell for cell and byte for byte.
#[test]
fn penny_tree_built_from_the_capture_renders_the_capture_back() {
    let r = report("h100-penny");
    let ours = render::topo::table(&r, &[], false);
    // Our table stops at the NIC legend; notes (none here) would follow.
    let ours = expand(&ours);
    let want = sample_table("SzymonOzog-blog_Penny-worklog-1_8xH100_8IB+5ETH_nvidia-smi-topo-m.txt");
    assert_eq!(ours, want);
    // And cell for cell, from the sample's own rows.
    let rows: Vec<Vec<String>> = want
        .lines()
        .skip(1)
        .take(21)
        .map(|l| {
            l.split_whitespace()
                .skip(1)
                .take(21)
                .map(str::to_string)
                .collect()
        })
        .collect();
    assert_eq!(rows, r.matrix);
    assert!(r.notes.is_empty(), "{:?}", r.notes);
}

/// Layout only: the matrix is copied from the capture itself, so this proves where the
/// renderer puts every byte (tabs, ` X `, the affinity columns), not the cells.
#[test]
fn renderer_lays_out_the_a10_capture_matrix_byte_for_byte() {
    // Build the 4x A10 report by hand from the sample's cells and check the renderer puts
    // every byte where nvidia-smi did (tabs, ` X `, the misaligned GPU NUMA ID column).
    let want = sample_table("XueSongTap-blog_4xA10_2NIC_nvidia-smi-topo-m.txt");
    let mut r = report("pcie-2socket");
    let cells: Vec<Vec<String>> = want
        .lines()
        .skip(1)
        .take(6)
        .map(|l| l.split_whitespace().skip(1).take(6).map(str::to_string).collect())
        .collect();
    r.matrix = cells;
    for g in &mut r.gpus {
        g.pci.local_cpulist = Some("0-127".into());
        g.pci.numa_node = Some(0);
    }
    r.notes.clear();
    assert_eq!(expand(&render::topo::table(&r, &[], false)), want);
}

#[test]
fn every_fixture_table_and_nccl_table() {
    for f in FIXTURES {
        let r = report(f);
        let findings = topo::judge(&r);
        insta::assert_snapshot!(format!("table_{f}"), render::topo::table(&r, &findings, false));
        insta::assert_snapshot!(
            format!("nccl_table_{f}"),
            render::topo::table(&r, &findings, true)
        );
    }
}

#[test]
fn every_fixture_json_report() {
    for f in FIXTURES {
        let r = report(f);
        let findings = topo::judge(&r);
        insta::assert_json_snapshot!(
            format!("report_{f}"),
            serde_json::json!({"data": r, "findings": findings})
        );
    }
}

#[test]
fn every_fixture_nccl_xml() {
    for f in FIXTURES {
        let r = report(f);
        insta::assert_snapshot!(format!("nccl_xml_{f}"), render::topo::nccl_xml(&r));
    }
}

/// Export to NCCL XML, read it back: NCCL's matrix is unchanged; nvidia-smi's too except
/// NODE, which an NCCL file cannot express (host bridges are not recorded).
#[test]
fn nccl_xml_round_trip() {
    for f in FIXTURES {
        let r = report(f);
        let xml = render::topo::nccl_xml(&r);
        let sys = topo_xml::parse(&xml, Path::new("roundtrip.xml")).unwrap();
        let back = topo::from_nccl_system(&sys, "roundtrip.xml");
        assert_eq!(back.labels, r.labels, "{f}");
        assert_eq!(back.nccl_matrix, r.nccl_matrix, "{f}");
        let no_node: Vec<Vec<String>> = r
            .matrix
            .iter()
            .map(|row| {
                row.iter()
                    .map(|c| if c == "NODE" { "PHB".to_string() } else { c.clone() })
                    .collect()
            })
            .collect();
        assert_eq!(back.matrix, no_node, "{f}");
        let names = |r: &TopoReport| r.nics.iter().map(|n| n.ibdev.clone()).collect::<Vec<_>>();
        assert_eq!(names(&back), names(&r), "{f}");
        // And the file we wrote is a fixed point.
        assert_eq!(topo_xml::write(&sys), xml, "{f}");
    }
}

#[test]
fn real_oci_h100_topology_file() {
    let path = "tests/data/nccl-xml/oci-hpc_samples_gpu_H100-topology.xml";
    let sys = topo_xml::read_file(Path::new(path)).unwrap();
    let r = topo::from_nccl_system(&sys, path);
    assert_eq!(r.gpus.len(), 8);
    assert_eq!(r.nics.len(), 16);
    let i = |l: &str| r.labels.iter().position(|x| x == l).unwrap();
    // mlx5_0 and mlx5_1 are two ports of one adapter at 0c:00.0, under the Broadcom
    // sub-switch 0a; GPU0 is under sub-switch 0d of the same switch 08.
    assert_eq!(r.nics[0].ibdev, "mlx5_0");
    assert_eq!(r.matrix[i("GPU0")][i("GPU1")], "NV18");
    assert_eq!(r.matrix[i("GPU0")][i("NIC0")], "PXB");
    assert_eq!(r.nccl_matrix[i("GPU0")][i("NIC0")], "PIX", "Broadcom flattening");
    assert_eq!(r.nccl_matrix[i("NIC0")][i("NIC1")], "LOC");
    assert_eq!(r.matrix[i("NIC0")][i("NIC1")], "PIX");
    assert_eq!(r.nccl_matrix[i("GPU0")][i("NIC2")], "PHB");
    assert_eq!(r.nccl_matrix[i("GPU0")][i("GPU4")], "NVL");
    assert_eq!(r.matrix[i("GPU0")][i("NIC8")], "SYS");
    assert_eq!(r.gpus[0].pci.local_cpulist.as_deref(), Some("0-55,112-167"));
    insta::assert_snapshot!("xml_oci_h100", render::topo::table(&r, &topo::judge(&r), false));
    insta::assert_snapshot!("xml_oci_h100_nccl", render::topo::table(&r, &[], true));
}

#[test]
fn real_azure_ndv5_topology_file() {
    let path = "tests/data/nccl-xml/azhpc-images_topology_ndv5-topo.xml";
    let sys = topo_xml::read_file(Path::new(path)).unwrap();
    let r = topo::from_nccl_system(&sys, path);
    assert_eq!(r.gpus.len(), 8);
    assert_eq!(r.nics.len(), 8);
    // Bare <pci> NICs (class 0x020700) are named by bus id; each shares a (virtual) switch
    // with one GPU.
    assert_eq!(r.nics[0].ibdev, "0101:00:00.0");
    assert_eq!(r.matrix[0][8], "PIX");
    assert_eq!(r.matrix[0][9], "PHB");
    assert_eq!(r.matrix[0][4], "SYS");
    assert_eq!(r.matrix[0][1], "PHB", "no <nvlink> in Azure's file");
    assert!(!r.nvlink_available);
    assert_eq!(r.gpus[0].pci.local_cpulist.as_deref(), Some("0-47"));
    assert_eq!(r.gpus[4].pci.local_cpulist.as_deref(), Some("48-95"));
    insta::assert_snapshot!("xml_azure_ndv5", render::topo::table(&r, &topo::judge(&r), false));
}

// ---- the binary ----------------------------------------------------------------------

fn fabprobe(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn json_envelope_decodes() {
    let (code, out, err) = fabprobe(&["--root", "fixtures/h100-sxm-8gpu", "topo", "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["schema"], "fabprobe.topo");
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["host"]["hostname"], "gpu-h100-017");
    assert_eq!(v["host"]["source"], "fixtures/h100-sxm-8gpu");
    let d = &v["data"];
    assert_eq!(d["source"], "sysfs+nvml");
    assert_eq!(d["labels"].as_array().unwrap().len(), 18);
    assert_eq!(d["matrix"][0][1], "NV18");
    assert_eq!(d["matrix"][0][8], "PXB");
    assert_eq!(d["nccl_matrix"][0][8], "PIX");
    assert_eq!(d["nics"][8]["ibdev"], "mlx5_8");
    assert_eq!(d["nics"][0]["ports"][0]["rate_mbps"], 400000);
    assert_eq!(
        d["gpus"][0]["pci"]["link"]["current_speed"]["raw"],
        "2.5 GT/s PCIe"
    );
    assert_eq!(d["gpus"][0]["pci"]["numa_node"], 0);
    assert_eq!(
        v["findings"].as_array().unwrap().len(),
        0,
        "idle GPU speed is not a fault"
    );
    // The report type reads back from its own JSON.
    let back: TopoReport = serde_json::from_value(d.clone()).unwrap();
    assert_eq!(back, report("h100-sxm-8gpu"));
}

#[test]
fn faults_exit_1_and_bad_xml_exits_2_naming_file_and_attribute() {
    let (code, out, _) = fabprobe(&["--root", "fixtures/pcie-2socket", "topo"]);
    assert_eq!(code, 1);
    assert!(
        out.contains("FAIL GPU3: PCIe link runs at x8"),
        "{out}"
    );
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.xml");
    std::fs::write(
        &bad,
        "<system version=\"1\">\n  <cpu numaid=\"zero\"/>\n</system>\n",
    )
    .unwrap();
    let (code, out, err) = fabprobe(&["topo", "--nccl-xml", bad.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(out.is_empty());
    assert!(
        err.contains("bad.xml: line 2: attribute numaid=\"zero\" of <cpu> is not an integer"),
        "{err}"
    );
    let (code, _, err) = fabprobe(&["topo", "--nccl-xml", "/nonexistent/topo.xml"]);
    assert_eq!(code, 2);
    assert!(err.contains("/nonexistent/topo.xml"), "{err}");
    let (code, _, err) = fabprobe(&["topo", "--format", "prom"]);
    assert_eq!(code, 2);
    assert!(err.contains("--format prom"), "{err}");
}

#[test]
fn nccl_xml_cli_reads_what_it_wrote() {
    let (code, xml, err) = fabprobe(&["--root", "fixtures/h100-sxm-8gpu", "topo", "--format", "nccl-xml"]);
    assert_eq!(code, 0, "{err}");
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("topo.xml");
    std::fs::write(&f, &xml).unwrap();
    let (code, out, err) = fabprobe(&["topo", "--nccl-xml", f.to_str().unwrap(), "--nccl"]);
    assert_eq!(code, 0, "{err}");
    let (_, direct, _) = fabprobe(&["--root", "fixtures/h100-sxm-8gpu", "topo", "--nccl"]);
    // Same NCCL matrix; only the notes differ (and an NCCL file has no NVSwitch section).
    let table = |s: &str| {
        let s = s.split("\nNotes:").next().unwrap();
        s.split("\nNVSwitch fabric:").next().unwrap().to_string()
    };
    assert_eq!(table(&out), table(&direct));
}

/// PCI functions this host shows with NVIDIA's vendor id and a display class (VGA or 3D):
/// what topo counts as GPUs when NVML is not there.
fn live_nvidia_display_functions() -> usize {
    let Ok(rd) = std::fs::read_dir("/sys/bus/pci/devices") else {
        return 0;
    };
    rd.filter(|e| {
        let p = e.as_ref().unwrap().path();
        let read = |f: &str| std::fs::read_to_string(p.join(f)).unwrap_or_default();
        read("vendor").trim() == "0x10de"
            && (read("class").starts_with("0x0300") || read("class").starts_with("0x0302"))
    })
    .count()
}

/// The live host, whatever it has: on this CI machine (no GPU, no RDMA device) topo says
/// so and exits 0; on a host with NVIDIA GPUs or RDMA devices it shows them, the NICs being
/// exactly the devices the kernel lists.
#[test]
fn live_host_topo_shows_what_the_host_has() {
    let (code, out, err) = fabprobe(&["topo"]);
    let mut rdma: Vec<String> = std::fs::read_dir("/sys/class/infiniband")
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    rdma.sort();
    let (jcode, json, jerr) = fabprobe(&["topo", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {jerr}"));
    assert_eq!(v["host"]["source"], "live");
    assert_eq!(jcode, code);
    let gpus = v["data"]["gpus"].as_array().unwrap();
    let mut nics: Vec<String> = v["data"]["nics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["ibdev"].as_str().unwrap().to_string())
        .collect();
    nics.sort();
    assert_eq!(nics, rdma, "topo's NICs are the kernel's RDMA devices");
    // A GPU on the PCI bus is never missed (NVML may add GPUs sysfs does not show).
    let display = live_nvidia_display_functions();
    assert!(
        gpus.len() >= display,
        "{display} NVIDIA display functions, {} GPUs: {out}",
        gpus.len()
    );
    if gpus.is_empty() && nics.is_empty() {
        // Nothing to judge: exit 3, said on stderr (issue 42).
        assert_eq!(code, 3, "{err}");
        assert!(err.contains("fabprobe topo: NOT EVALUATED  nothing to judge"), "{err}");
        assert!(out.contains("No NVIDIA GPU and no RDMA device to show."), "{out}");
        assert!(out.contains("no NVIDIA GPU found"), "{out}");
        assert!(out.contains("no RDMA device"), "{out}");
    } else {
        // A matrix (pass, or a fault such as a narrow PCIe link), never "could not run".
        assert!(code == 0 || code == 1, "exit {code}: {err}");
        assert!(
            !out.contains("No NVIDIA GPU and no RDMA device to show."),
            "{out}"
        );
        let rows = v["data"]["matrix"].as_array().unwrap().len();
        assert_eq!(rows, gpus.len() + nics.len(), "{out}");
        if !gpus.is_empty() {
            assert!(!out.contains("no NVIDIA GPU found"), "{out}");
        }
    }
}

/// `snapshot` captures what topo reads: re-capturing a fixture gives the same report.
#[test]
fn snapshot_recapture_keeps_the_topo_report() {
    for f in ["h100-sxm-8gpu", "pcie-2socket", "cloud-vm-flat"] {
        let src = format!("fixtures/{f}");
        let host = Host::snapshot(&src).unwrap().with_recording();
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("snap");
        fabprobe::snapshot::capture(&host, Path::new(&src), &out).unwrap();
        let again = topo::probe(&Host::snapshot(&out).unwrap());
        let orig = report(f);
        assert_eq!(again.gpus, orig.gpus, "{f}");
        assert_eq!(again.nics, orig.nics, "{f}");
        assert_eq!(again.matrix, orig.matrix, "{f}");
        assert_eq!(again.nccl_matrix, orig.nccl_matrix, "{f}");
        assert_eq!(again.numa_nodes, orig.numa_nodes, "{f}");
        assert_eq!(again.cpu, orig.cpu, "{f}");
        assert_eq!(again.switches, orig.switches, "{f}");
        // The NVSwitch section: the cgroup, the Fabric Manager's answer, facts and NVML.
        assert_eq!(again.fabric, orig.fabric, "{f}");
    }
    // Through a tarball too.
    let src = "fixtures/h100-sxm-8gpu";
    let host = Host::snapshot(src).unwrap().with_recording();
    let dir = tempfile::tempdir().unwrap();
    let tgz = dir.path().join("node.tar.gz");
    fabprobe::snapshot::capture(&host, Path::new(src), &tgz).unwrap();
    let again = topo::probe(&Host::snapshot(&tgz).unwrap());
    assert_eq!(again.matrix, report("h100-sxm-8gpu").matrix);
    assert_eq!(again.nics, report("h100-sxm-8gpu").nics);
}

/// NVML knows GPUs that sysfs does not show (a container): NVLink cells still come from
/// NVML, direct GPU-GPU links are counted, PCIe cells are N/A, and a note says why.
#[test]
fn nvml_gpus_without_sysfs_get_nvlink_cells_and_na() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("sys")).unwrap();
    std::fs::create_dir_all(dir.path().join("fabprobe")).unwrap();
    let link = |l: u32, to: &str| serde_json::json!({"link": l, "active": true, "remote_pci_bus_id": to});
    let nvml = serde_json::json!({"state": "available", "gpus": [
        {"index": 0, "pci_bus_id": "0000:17:00.0", "nvlinks": [link(0, "0000:65:00.0"), link(1, "0000:65:00.0"),
            link(2, "0000:65:00.0"), link(3, "0000:65:00.0"), {"link": 4, "active": false, "remote_pci_bus_id": null}]},
        {"index": 1, "pci_bus_id": "0000:65:00.0", "nvlinks": [link(0, "0000:17:00.0"), link(1, "0000:17:00.0"),
            link(2, "0000:17:00.0"), link(3, "0000:17:00.0"), link(4, "0000:ca:00.0")]},
        {"index": 2, "pci_bus_id": "0000:ca:00.0", "nvlinks": [link(0, "0000:65:00.0")]}
    ]});
    std::fs::write(dir.path().join("fabprobe/nvml.json"), nvml.to_string()).unwrap();
    let r = topo::probe(&Host::snapshot(dir.path()).unwrap());
    let m = |v: &[&[&str]]| -> Vec<Vec<String>> {
        v.iter()
            .map(|r| r.iter().map(|c| c.to_string()).collect())
            .collect()
    };
    assert_eq!(
        r.matrix,
        m(&[&["X", "NV4", "N/A"], &["NV4", "X", "NV1"], &["N/A", "NV1", "X"]])
    );
    // GPU0 and GPU2 reach each other through GPU1: NVB for NCCL.
    assert_eq!(
        r.nccl_matrix,
        m(&[&["X", "NVL", "NVB"], &["NVL", "X", "NVL"], &["NVB", "NVL", "X"]])
    );
    assert!(
        r.notes
            .iter()
            .any(|n| n.starts_with("GPU 0000:17:00.0:") && n.ends_with("its cells are N/A")),
        "{:?}",
        r.notes
    );
    assert_eq!(r.source, "sysfs+nvml");
}

/// NICs in registration order with bonds last: `roce-bond-host` has its bond on bus 3b, below
/// the plain ports on bus 86, and still lists it after them (as nvidia-smi does).
#[test]
fn bond_devices_come_after_the_plain_nics() {
    let r = report("roce-bond-host");
    let nics: Vec<(&str, &str)> = r
        .nics
        .iter()
        .map(|n| (n.ibdev.as_str(), n.pci.pci_bus_id.as_deref().unwrap_or("")))
        .collect();
    assert_eq!(
        nics,
        [
            ("mlx5_0", "0000:86:00.0"),
            ("mlx5_1", "0000:86:00.1"),
            ("mlx5_bond_0", "0000:3b:00.0")
        ]
    );
    let (code, out, err) = fabprobe(&["--root", "fixtures/roce-bond-host", "topo"]);
    assert!(code == 0 || code == 1, "{err}");
    let legend: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("NIC Legend:"))
        .filter(|l| l.trim_start().starts_with("NIC"))
        .skip(1)
        .map(str::trim)
        .collect();
    assert_eq!(
        legend,
        ["NIC0: mlx5_0", "NIC1: mlx5_1", "NIC2: mlx5_bond_0"],
        "{out}"
    );
}

/// `numa_node` -1 is only a warning where there is more than one node to be wrong about: on
/// a single-node host (`cpu-only`, node/online "0") a device at -1 gives no finding, while
/// the same value on the two-node `cloud-vm-flat` does.
#[test]
fn numa_minus_one_warns_only_on_a_multi_node_host() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("cpu-only");
    let st = Command::new("cp")
        .args(["-a", "fixtures/cpu-only"])
        .arg(&copy)
        .status()
        .unwrap();
    assert!(st.success());
    let nic = copy.join("sys/devices/pci0000:00/0000:00:01.1/0000:01:00.0/numa_node");
    assert_eq!(std::fs::read_to_string(&nic).unwrap(), "0\n");
    std::fs::write(&nic, "-1\n").unwrap();
    assert_eq!(
        std::fs::read_to_string(copy.join("sys/devices/system/node/online")).unwrap(),
        "0\n"
    );
    let ids = |root: &str| -> Vec<String> {
        let (_, out, err) = fabprobe(&["--root", root, "--format", "json", "topo"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {err}"));
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["id"].as_str().unwrap().to_string())
            .collect()
    };
    let single = ids(copy.to_str().unwrap());
    assert!(
        !single.iter().any(|i| i == "topo.numa_node_unknown"),
        "{single:?}"
    );
    let multi = ids("fixtures/cloud-vm-flat");
    assert!(multi.iter().any(|i| i == "topo.numa_node_unknown"), "{multi:?}");
}

fn copy_fixture(name: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let to = dir.path().join(name);
    let st = Command::new("cp")
        .args(["-a", &format!("fixtures/{name}"), to.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(st.success());
    (dir, to)
}

/// NV# rests on evidence: NVML's remote device type, else the far end's PCI class. Without
/// either, the links are left out of NV# and a note says so; nothing is assumed a switch.
#[test]
fn nvlink_far_ends_are_only_what_the_evidence_says() {
    let (_d, snap) = copy_fixture("h100-sxm-8gpu");
    let nvml_path = snap.join("fabprobe/nvml.json");
    let mut nvml: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&nvml_path).unwrap()).unwrap();
    for g in nvml["gpus"].as_array_mut().unwrap() {
        for l in g["nvlinks"].as_array_mut().unwrap() {
            l.as_object_mut().unwrap().remove("remote_device_type");
        }
    }
    std::fs::write(&nvml_path, nvml.to_string()).unwrap();
    // NVML no longer says; the switches' class in sysfs (0x068000) still does.
    let r = topo::probe(&Host::snapshot(&snap).unwrap());
    assert_eq!(r.matrix, report("h100-sxm-8gpu").matrix);
    assert_eq!(r.gpus[0].nvlinks[0].target_kind, "nvswitch");
    assert!(!r.notes.iter().any(|n| n.contains("NV#")), "{:?}", r.notes);

    // The switches' class files unreadable too: nothing says what the far ends are.
    for sw in ["0000:03:00.0", "0000:04:00.0", "0000:05:00.0", "0000:06:00.0"] {
        let dev = std::fs::canonicalize(snap.join("sys/bus/pci/devices").join(sw)).unwrap();
        std::fs::remove_file(dev.join("class")).unwrap();
    }
    let r = topo::probe(&Host::snapshot(&snap).unwrap());
    let ng = r.gpus.len();
    for row in &r.matrix[..ng] {
        assert!(!row.iter().any(|c| c.starts_with("NV")), "{row:?}");
    }
    assert_eq!(r.matrix[0][1], "NODE");
    assert_eq!(r.gpus[0].nvlinks[0].target_kind, "unknown");
    assert!(
        r.notes.contains(
            &"GPU0: 5 NVLinks lead to 0000:03:00.0, and nothing read says what it is \
             (not a GPU listed here, no NVML remote device type or tclass, no PCI class in sysfs): \
             not counted in NV#"
                .to_string()
        ),
        "{:?}",
        r.notes
    );
    // The NCCL file leaves tclass out, so NCCL reads it from the host as it does itself.
    let xml = topo_xml::write(&topo::to_nccl_system(&r));
    assert!(
        xml.contains("<nvlink target=\"0000:03:00.0\" count=\"5\"/>"),
        "{xml}"
    );
}

/// NVLinks into GPUs this process cannot see (NVIDIA_VISIBLE_DEVICES, a container) give no
/// NV# between the GPUs it can see.
#[test]
fn hidden_gpus_give_no_nvlink_cells() {
    let dir = tempfile::tempdir().unwrap();
    let hidden = dir.path().join("sys/bus/pci/devices/0000:99:00.0");
    std::fs::create_dir_all(&hidden).unwrap();
    std::fs::write(hidden.join("class"), "0x030200\n").unwrap();
    std::fs::create_dir_all(dir.path().join("fabprobe")).unwrap();
    let links = |to: &str, n: u32, typ: Option<&str>| -> Vec<serde_json::Value> {
        (0..n)
            .map(|l| {
                let mut v = serde_json::json!({"link": l, "active": true, "remote_pci_bus_id": to});
                if let Some(t) = typ {
                    v["remote_device_type"] = t.into();
                }
                v
            })
            .collect()
    };
    let nvml = serde_json::json!({"state": "available", "gpus": [
        {"index": 0, "pci_bus_id": "0000:17:00.0", "nvlinks": links("0000:99:00.0", 4, None)},
        {"index": 1, "pci_bus_id": "0000:65:00.0", "nvlinks": links("0000:aa:00.0", 4, Some("gpu"))},
    ]});
    std::fs::write(dir.path().join("fabprobe/nvml.json"), nvml.to_string()).unwrap();
    let r = topo::probe(&Host::snapshot(dir.path()).unwrap());
    assert_eq!(r.matrix[0][1], "N/A", "{:?}", r.matrix);
    assert_eq!(r.nccl_matrix[0][1], "N/A", "{:?}", r.nccl_matrix);
    for (gpu, far) in [("GPU0", "0000:99:00.0"), ("GPU1", "0000:aa:00.0")] {
        let want = format!("{gpu}: 4 NVLinks lead to GPU {far}, which this report does not list");
        assert!(
            r.notes.iter().any(|n| n.starts_with(&want)),
            "{want}: {:?}",
            r.notes
        );
    }
}
