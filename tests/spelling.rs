//! One fact, one spelling (issue 42): every command on every fixture, as a table, JSON and
//! (where it has one) Prometheus text. A port is `mlx5_3/1` everywhere (never `mlx5_3:1` or
//! `mlx5_3 port 1`), a finding `check` repeats keeps its probe's subject, a metric's
//! `subject` label is a finding's subject, rendered rates say `Gb/s` (the kernel's
//! `Gb/sec` string stays verbatim in the data), and counts agree with their nouns.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;


/// A subject that names one device twice: a matrix label beside the kernel's name or the
/// PCI address (`NIC3 (mlx5_3) 0000:58:00.0`, `GPU3 0000:b2:00.0`). A device is its one
/// name (`mlx5_3`, `GPU3`); one known by its address alone (a GPU NVML lost) is the address.
fn two_names(atom: &str) -> bool {
    let re = regex::Regex::new(r"\b(NIC|GPU)\d+ (\(|[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])").unwrap();
    re.is_match(atom)
}
/// A NIC named by its matrix position (`NIC3`, `GPU0-NIC0`): the position shifts when a
/// device is left out of the matrix; a NIC is its RDMA device name (`mlx5_3`, `GPU0-mlx5_0`).
fn positional_nic(atom: &str) -> bool {
    let re = regex::Regex::new(r"\bNIC\d+\b").unwrap();
    re.is_match(atom)
}

/// A copy of `h100-sxm-8gpu` where one source misses a device: `mlx5_0` is in
/// /sys/class/infiniband but its `device` link is gone, so the PCI tree cannot place it and
/// `topo` leaves it out of the matrix (every NIC after it moves one column left).
fn one_device_unplaced() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/h100-sxm-8gpu/.");
    let st = Command::new("cp")
        .arg("-a")
        .arg(src)
        .arg(t.path())
        .status()
        .unwrap();
    assert!(st.success());
    let dev = t.path().join("sys/class/infiniband/mlx5_0/device");
    std::fs::remove_file(&dev).unwrap_or_else(|e| panic!("{}: {e}", dev.display()));
    t
}

/// A copy of `h100-sxm-8gpu` whose frontend RoCE port has no netdev: `eth0` (mlx5_8/1) was
/// moved into a container's network namespace, so the host's sysfs has neither
/// /sys/class/net/eth0, nor the PCI function's net/eth0, nor the port's GID netdev names.
fn roce_port_without_netdev() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/h100-sxm-8gpu/.");
    let st = Command::new("cp")
        .arg("-a")
        .arg(src)
        .arg(t.path())
        .status()
        .unwrap();
    assert!(st.success());
    let rm = |p: &str, dir: bool| {
        let path = t.path().join(p);
        let r = if dir {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        r.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    };
    rm("sys/class/net/eth0", false);
    rm("sys/bus/pci/devices/0000:e9:00.0/net/eth0", true);
    rm("sys/class/infiniband/mlx5_8/ports/1/gid_attrs/ndevs", true);
    t
}

/// qos's note on a RoCE port without a netdev spells the port `mlx5_8/1`, as every command does.
#[test]
fn a_roce_port_without_a_netdev_is_spelled_as_every_port() {
    let t = roce_port_without_netdev();
    let root = t.path().display().to_string();
    let devs = rdma_devices(&root);
    let json = run(&["--root", &root, "--format", "json", "qos"]);
    let table = run(&["--root", &root, "qos"]);
    assert!(
        json.contains("mlx5_8/1: RoCE port without a netdev"),
        "the note is not said: {json}"
    );
    for text in [&json, &table] {
        let bad = other_port_spellings(text, &devs);
        assert!(bad.is_empty(), "{bad:?}");
    }
}

const POLICIES: &[&str] = &["default", "dgx-h100", "hdr-a100", "roce-dcqcn"];

fn run(args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let code = o.status.code().unwrap_or(-1);
    assert!(
        (0..=3).contains(&code) && code != 2,
        "{args:?}: exit {code}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn fixtures() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures"))
        .unwrap()
        .map(|e| e.unwrap().path())
        // Snapshot trees only (not gen/ nor CAUSES.toml).
        .filter(|p| p.join("sys").is_dir())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn rdma_devices(root: &str) -> Vec<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(root)
        .join("sys/class/infiniband");
    std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// A subject's atoms: `check` joins the subjects of one cause with ", ".
fn atoms(s: &str) -> Vec<String> {
    s.split(", ").map(str::to_string).collect()
}

/// Ports spelled another way than `dev/N`, outside an `NCCL_IB_HCA` value (NCCL's own
/// syntax, `dev:port`, which a person pastes back).
fn other_port_spellings(text: &str, devs: &[String]) -> Vec<String> {
    let mut bad = Vec::new();
    for line in text.lines() {
        for d in devs {
            for sep in [":", " port "] {
                let pat = format!("{d}{sep}");
                let mut at = 0;
                while let Some(i) = line[at..].find(&pat) {
                    let start = at + i;
                    let after = &line[start + pat.len()..];
                    let before = &line[..start];
                    let in_hca = before
                        .rfind("NCCL_IB_HCA")
                        .is_some_and(|h| !before[h..].contains(' '));
                    let ends_name = !line[start + d.len()..]
                        .starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
                        && !before.ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
                    if ends_name && after.starts_with(|c: char| c.is_ascii_digit()) && !in_hca {
                        bad.push(line.trim().chars().take(160).collect());
                    }
                    at = start + pat.len();
                }
            }
        }
    }
    bad
}

/// `1 nodes`, `port(s)`: a count that disagrees with its noun, or a hedge instead of one.
fn bad_plurals(text: &str) -> Vec<String> {
    const NOUNS: &[&str] = &[
        "processes",
        "nodes",
        "ports",
        "GPUs",
        "reports",
        "devices",
        "NICs",
        "pairs",
        "runs",
        "links",
        "netdevs",
        "entries",
        "files",
        "rules",
        "findings",
    ];
    let mut bad = Vec::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split(|c: char| c.is_whitespace() || c == '"').collect();
        for w in words.windows(2) {
            let n = w[1].trim_end_matches([',', ';', ':', '.', ')']);
            if w[0] == "1" && NOUNS.contains(&n) {
                bad.push(line.trim().chars().take(160).collect());
            }
        }
        if line.contains("(s) ") || line.contains("(s)\"") || line.contains("(s);") || line.contains("(s),") {
            bad.push(line.trim().chars().take(160).collect());
        }
    }
    bad
}

#[test]
fn every_command_spells_each_subject_one_way() {
    let mut problems: Vec<String> = Vec::new();
    let mut outputs = 0;
    let mut compared = 0;
    let unplaced = one_device_unplaced();
    let mut roots: Vec<(String, String)> = fixtures()
        .into_iter()
        .map(|fx| (fx.clone(), format!("fixtures/{fx}")))
        .collect();
    roots.push((
        "h100-sxm-8gpu (mlx5_0 unplaced)".into(),
        unplaced.path().display().to_string(),
    ));
    let no_netdev = roce_port_without_netdev();
    roots.push((
        "h100-sxm-8gpu (mlx5_8/1 without a netdev)".into(),
        no_netdev.path().display().to_string(),
    ));
    for (fx, root) in roots {
        let devs = rdma_devices(&root);
        let mut texts: Vec<(String, String)> = Vec::new();
        // Each probe's subjects by finding id.
        let mut probe_subjects: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for cmd in common::probes() {
            let json = run(&["--root", &root, "--format", "json", cmd]);
            let v: serde_json::Value = serde_json::from_str(&json).unwrap();
            let mut own: BTreeSet<String> = BTreeSet::new();
            for f in v["findings"].as_array().into_iter().flatten() {
                let id = f["id"].as_str().unwrap().to_string();
                own.insert(f["subject"].as_str().unwrap().to_string());
                for a in atoms(f["subject"].as_str().unwrap()) {
                    if two_names(&a) {
                        problems.push(format!("{fx} {cmd}: {id} names a device twice: {a:?}"));
                    }
                    if positional_nic(&a) {
                        problems.push(format!("{fx} {cmd}: {id} names a NIC by position: {a:?}"));
                    }
                }
                probe_subjects
                    .entry(id)
                    .or_default()
                    .extend(atoms(f["subject"].as_str().unwrap()));
                if let Some(m) = f["message"].as_str().filter(|m| m.contains("Gb/sec")) {
                    problems.push(format!("{fx} {cmd}: a message renders the kernel's unit: {m}"));
                }
            }
            if common::formats(cmd).contains(&"prom") {
                let prom = run(&["--root", &root, "--format", "prom", cmd]);
                for l in prom.lines().filter(|l| l.contains("subject=\"")) {
                    let s = l.split("subject=\"").nth(1).unwrap().split('"').next().unwrap();
                    compared += 1;
                    if !own.contains(s) {
                        problems.push(format!(
                            "{fx} {cmd} prom: subject label {s:?} is no finding's subject"
                        ));
                    }
                }
                texts.push((format!("{cmd} prom"), prom));
            }
            texts.push((format!("{cmd} json"), json));
            texts.push((format!("{cmd} table"), run(&["--root", &root, cmd])));
        }
        for pol in POLICIES {
            let json = run(&["--root", &root, "--format", "json", "check", "--policy", pol]);
            let v: serde_json::Value = serde_json::from_str(&json).unwrap();
            let findings = v["findings"].as_array().cloned().unwrap_or_default();
            let subjects: BTreeSet<&str> = findings.iter().filter_map(|f| f["subject"].as_str()).collect();
            for f in &findings {
                let id = f["id"].as_str().unwrap();
                for a in atoms(f["subject"].as_str().unwrap()) {
                    if two_names(&a) {
                        problems.push(format!("{fx} check {pol}: {id} names a device twice: {a:?}"));
                    }
                    if positional_nic(&a) {
                        problems.push(format!("{fx} check {pol}: {id} names a NIC by position: {a:?}"));
                    }
                }
                if let Some(m) = f["message"].as_str().filter(|m| m.contains("Gb/sec")) {
                    problems.push(format!(
                        "{fx} check {pol}: a message renders the kernel's unit: {m}"
                    ));
                }
                // A probe's finding, repeated by check: each subject as the probe spelled it.
                if let Some(seen) = probe_subjects.get(id) {
                    for a in atoms(f["subject"].as_str().unwrap()) {
                        compared += 1;
                        if !seen.contains(&a) {
                            problems.push(format!(
                                "{fx} check {pol}: {id} subject {a:?}, the probe says {seen:?}"
                            ));
                        }
                    }
                }
            }
            let prom = run(&["--root", &root, "--format", "prom", "check", "--policy", pol]);
            for l in prom.lines().filter(|l| l.contains("subject=\"")) {
                let s = l.split("subject=\"").nth(1).unwrap().split('"').next().unwrap();
                if !subjects.contains(s) {
                    problems.push(format!(
                        "{fx} check {pol} prom: subject label {s:?} is no finding's subject"
                    ));
                }
            }
            texts.push((format!("check {pol} json"), json));
            texts.push((format!("check {pol} prom"), prom));
            texts.push((
                format!("check {pol} table"),
                run(&["--root", &root, "check", "--policy", pol]),
            ));
        }
        for (what, t) in &texts {
            outputs += 1;
            for b in other_port_spellings(t, &devs) {
                problems.push(format!("{fx} {what}: a port spelled another way: {b}"));
            }
            for b in bad_plurals(t) {
                problems.push(format!("{fx} {what}: a count unlike its noun: {b}"));
            }
        }
    }
    problems.sort();
    problems.dedup();
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
    assert!(
        outputs > 300 && compared > 100,
        "{outputs} outputs, {compared} subjects compared"
    );
}

#[test]
fn the_detectors_find_what_they_look_for() {
    let devs = vec!["mlx5_1".to_string()];
    assert_eq!(other_port_spellings("x mlx5_1:1 y", &devs).len(), 1);
    assert_eq!(other_port_spellings("eth0 (mlx5_1 port 1)", &devs).len(), 1);
    assert!(other_port_spellings("mlx5_1/1 and mlx5_10:1 and NCCL_IB_HCA=mlx5_1:1", &devs).is_empty());
    assert!(two_names("NIC3 (mlx5_3) 0000:58:00.0"));
    assert!(two_names("GPU3 0000:b2:00.0"));
    assert!(!two_names("mlx5_3") && !two_names("GPU3") && !two_names("0000:5b:00.0"));
    assert!(!two_names("GPU0-NIC0 GPU1-NIC1") && !two_names("ens1f0np0 (mlx5_0/1)"));
    assert!(positional_nic("GPU0-NIC0") && positional_nic("NIC3"));
    assert!(!positional_nic("GPU0-mlx5_0") && !positional_nic("mlx5_3/1") && !positional_nic("NIC"));
    assert_eq!(bad_plurals("\"1 processes hold\"").len(), 1);
    assert_eq!(bad_plurals("2 run(s); x").len(), 1);
    assert!(bad_plurals("1 process; 2 nodes; 11 nodes").is_empty());
}

/// A device one source misses (mlx5_0 in /sys/class/infiniband, not placed in the PCI tree)
/// shifts the matrix's NIC columns, never a name: each GPU's pair with the NIC under its own
/// switch is still `GPUk-mlx5_k` in gdr's data and findings, and in `check`'s, while the
/// column label of that NIC has moved (`NIC{k-1}`); topo says which device it left out.
#[test]
fn a_device_one_source_misses_is_named_not_shifted() {
    let t = one_device_unplaced();
    let root = t.path().display().to_string();
    let gdr: serde_json::Value =
        serde_json::from_str(&run(&["--root", &root, "--format", "json", "gdr"])).unwrap();
    let pairs = gdr["data"]["pairs"].as_array().unwrap();
    for k in 1..8 {
        let gpu = format!("GPU{k}");
        let p = pairs
            .iter()
            .find(|p| p["gpu"] == gpu.as_str() && p["nccl_nearest"] == true)
            .unwrap_or_else(|| panic!("{gpu} has no nearest pair"));
        assert_eq!(p["subject"], format!("GPU{k}-mlx5_{k}").as_str(), "{p}");
        assert_eq!(
            p["nic"],
            format!("NIC{}", k - 1).as_str(),
            "the columns shifted: {p}"
        );
    }
    // GPU0 lost its own NIC: its finding names the NIC it is left with, by name.
    let subjects: Vec<&str> = gdr["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["subject"].as_str())
        .collect();
    assert!(
        subjects
            .iter()
            .any(|s| s.split(' ').any(|p| p.starts_with("GPU0-mlx5_"))),
        "{subjects:?}"
    );
    assert!(
        subjects
            .iter()
            .all(|s| !positional_nic(s) && !s.contains("mlx5_0")),
        "{subjects:?}"
    );
    let topo: serde_json::Value =
        serde_json::from_str(&run(&["--root", &root, "--format", "json", "topo"])).unwrap();
    let notes = topo["data"]["notes"].to_string();
    assert!(notes.contains("RDMA device mlx5_0"), "{notes}");
    let check: serde_json::Value = serde_json::from_str(&run(&[
        "--root", &root, "--format", "json", "check", "--policy", "dgx-h100",
    ]))
    .unwrap();
    for f in check["findings"].as_array().unwrap() {
        let s = f["subject"].as_str().unwrap();
        assert!(!positional_nic(s), "{f}");
    }
}
