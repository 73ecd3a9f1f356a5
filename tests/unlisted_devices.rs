//! Issue 42: a device one source lists and another does not (a NIC in the PCI tree that
//! registered no RDMA device, a GPU in the PCI tree that NVML lost) is named by every
//! command that reads that kind of device, in text and JSON, by its PCI bus ID; a probe
//! says what it could not read of it (unknown, never a pass), and `check` keeps one finding
//! for it, topo's, with the probes' under its `also`.
//! A device whose kernel module is not loaded at all (every NIC of a vendor, every NVIDIA
//! GPU) is named the same way inside one finding per module, subject the module.
//! The fixtures are found, not listed: every fixture whose `topo` JSON names such a device.

mod common;

use serde_json::Value;

/// stdout of one run (exit 0-3: a verdict, never a usage error or a panic).
fn run(fixture: &str, format: &str, cmd: &[String]) -> String {
    common::run_fixture(fixture, format, cmd).0
}

/// A device seen by one source only, as topo names it: (kind, bus ID, netdevs).
#[derive(Debug)]
struct Unlisted {
    nic: bool,
    bdf: String,
    netdevs: Vec<String>,
    /// The module not loaded that names it with its siblings (`mlx5_core`, `nvidia`).
    module: Option<String>,
}

fn unlisted(fixture: &str) -> Vec<Unlisted> {
    let v: Value = serde_json::from_str(&run(fixture, "json", &["topo".to_string()])).unwrap();
    let mut out = Vec::new();
    for n in v["data"]["nics_not_in_rdma"].as_array().into_iter().flatten() {
        out.push(Unlisted {
            nic: true,
            bdf: n["pci_bus_id"].as_str().unwrap().to_string(),
            netdevs: n["netdevs"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect(),
            module: n["module_not_loaded"].as_str().map(str::to_string),
        });
    }
    for g in v["data"]["gpus_not_in_nvml"].as_array().into_iter().flatten() {
        out.push(Unlisted {
            nic: false,
            bdf: g["pci_bus_id"].as_str().unwrap().to_string(),
            netdevs: Vec::new(),
            module: None,
        });
    }
    for g in v["data"]["gpus_without_driver"].as_array().into_iter().flatten() {
        out.push(Unlisted {
            nic: false,
            bdf: g["pci_bus_id"].as_str().unwrap().to_string(),
            netdevs: Vec::new(),
            module: Some("nvidia".into()),
        });
    }
    out
}

/// The commands that read the device's kind: every host command reads RDMA NICs; a GPU
/// is read by topo, gdr and check.
fn commands(nic: bool) -> Vec<Vec<String>> {
    let probes: Vec<&str> = common::probes()
        .into_iter()
        .filter(|c| nic || matches!(*c, "topo" | "gdr"))
        .collect();
    assert!(probes.len() >= if nic { 6 } else { 2 }, "{probes:?}");
    common::probe_and_check_runs(&probes)
}

/// The findings of a report that name `d`: subject its bus ID, or subject its module with
/// its bus ID in the finding's `nics` or `gpus`.
fn findings_on<'a>(v: &'a Value, d: &Unlisted) -> Vec<&'a Value> {
    let lists = |f: &Value| {
        ["nics", "gpus"]
            .iter()
            .any(|k| f["evidence"][*k].as_str().is_some_and(|s| s.contains(&d.bdf)))
    };
    common::findings(v)
        .filter(|f| match &d.module {
            None => f["subject"] == d.bdf.as_str(),
            Some(m) => f["subject"] == m.as_str() && lists(f),
        })
        .collect()
}

#[test]
fn every_command_names_a_device_one_source_lists_and_another_does_not() {
    let fixtures: Vec<(String, Vec<Unlisted>)> = common::fixture_names()
        .into_iter()
        .map(|f| {
            let u = unlisted(&f);
            (f, u)
        })
        .filter(|(_, u)| !u.is_empty())
        .collect();
    let names: Vec<&str> = fixtures.iter().map(|(f, _)| f.as_str()).collect();
    for f in [
        "h100-eth-unregistered",
        "h100-nic-unregistered",
        "h100-nic-unregistered-port-down",
        "h100-gpu-lost",
        "h100-drivers-unloaded",
    ] {
        assert!(names.contains(&f), "{f} not among {names:?}");
    }
    let mut bad = Vec::new();
    for (fixture, devices) in &fixtures {
        for d in devices {
            for cmd in commands(d.nic) {
                let what = format!("{fixture} {} ({})", cmd.join(" "), d.bdf);
                bad.extend(said(&what, fixture, &cmd, d));
            }
        }
    }
    assert!(bad.is_empty(), "{} misses:\n{}", bad.len(), bad.join("\n"));
}

/// What one command's text and JSON fail to say of `d`.
fn said(what: &str, fixture: &str, cmd: &[String], d: &Unlisted) -> Vec<String> {
    let mut bad = Vec::new();
    let text = run(fixture, "table", cmd);
    // The first line (the verdict) names it: one of its findings or a not-evaluated entry.
    if !text.contains(&d.bdf) {
        bad.push(format!("{what}: the text does not name {}", d.bdf));
    }
    for n in &d.netdevs {
        if !text.contains(n.as_str()) {
            bad.push(format!("{what}: the text does not name its netdev {n}"));
        }
    }
    let v: Value = serde_json::from_str(&run(fixture, "json", cmd)).unwrap();
    let on = findings_on(&v, d);
    let check = cmd[0] == "check";
    match (check, on.as_slice()) {
        // check: one finding, topo's (the cause), the probes' under its also.
        (true, [f]) => {
            let kind = match (d.nic, &d.module) {
                (true, None) => "topo.nic_not_in_rdma",
                (true, Some(_)) => "topo.rdma_driver_not_loaded",
                (false, None) => "topo.gpu_not_in_nvml",
                (false, Some(_)) => "topo.gpu_driver_not_loaded",
            };
            if f["id"] != kind {
                bad.push(format!("{what} (json): its finding is {}, not {kind}", f["id"]));
            }
            let nev = v["data"]["not_evaluated"].to_string();
            if nev.contains(&d.bdf) {
                bad.push(format!("{what} (json): also said as not evaluated: {nev}"));
            }
            // What no device of its kind leaves to judge follows from the module: under its
            // also, never a not-evaluated entry of its own (both kinds gone: both modules).
            let facts: &[&str] = match d.nic {
                true => &["rdma_device", "roce_netdev", "infiniband_port"],
                false => &["gpu"],
            };
            let modules = common::findings(&v)
                .filter(|f| {
                    f["id"]
                        .as_str()
                        .is_some_and(|i| i.ends_with("_driver_not_loaded"))
                })
                .count();
            for n in v["data"]["not_evaluated"].as_array().into_iter().flatten() {
                let m = n["missing"].as_str().unwrap_or_default();
                if d.module.is_some() && (facts.contains(&m) || (m == "gpu_and_rdma" && modules == 2)) {
                    bad.push(format!(
                        "{what} (json): {} said as not evaluated ({m}), not under its module",
                        n["key"]
                    ));
                }
            }
        }
        (true, fs) => bad.push(format!("{what} (json): {} findings name it, not 1", fs.len())),
        (false, []) => bad.push(format!("{what} (json): no finding names it")),
        (false, fs) => {
            // A probe other than topo could not read it: unknown, never a pass.
            for f in fs {
                let own = cmd[0] == "topo";
                if !own && f["severity"] != "unknown" {
                    bad.push(format!(
                        "{what} (json): {} is {}, not unknown",
                        f["id"], f["severity"]
                    ));
                }
            }
        }
    }
    bad
}

#[test]
fn no_command_names_an_unlisted_device_where_none_is() {
    let mut bad = Vec::new();
    for fixture in common::fixture_names() {
        if !unlisted(&fixture).is_empty() {
            continue;
        }
        for cmd in commands(true) {
            let v: Value = serde_json::from_str(&run(&fixture, "json", &cmd)).unwrap();
            let s = v["findings"].to_string();
            if ["_not_in_rdma", "_not_in_nvml", "_driver_not_loaded"]
                .iter()
                .any(|k| s.contains(k))
            {
                bad.push(format!("{fixture} {}", cmd.join(" ")));
            }
        }
    }
    assert!(bad.is_empty(), "{bad:?}");
}

#[test]
fn qos_says_what_it_could_not_read_of_a_netdev_with_no_rdma_device() {
    let text = run("h100-eth-unregistered", "table", &["qos".to_string()]);
    let verdict = text.lines().next().unwrap();
    assert!(
        verdict.contains("not evaluated: qos.nic_not_in_rdma 0000:e9:00.1"),
        "{verdict}"
    );
    let v: Value = serde_json::from_str(&run("h100-eth-unregistered", "json", &["qos".to_string()])).unwrap();
    let eth1 = Unlisted {
        nic: true,
        bdf: "0000:e9:00.1".into(),
        netdevs: vec!["eth1".into()],
        module: None,
    };
    let f = findings_on(&v, &eth1);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0]["severity"], "unknown");
    assert_eq!(f[0]["evidence"]["netdevs"], "eth1");
    let m = f[0]["message"].as_str().unwrap();
    for said in ["traffic class", "CNP counters", "not judged", "--ifname eth1"] {
        assert!(m.contains(said), "{said}: {m}");
    }
    assert_eq!(v["data"]["rdma"]["not_in_rdma"][0]["pci_bus_id"], "0000:e9:00.1");
}
