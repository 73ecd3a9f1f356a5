//! `fabprobe gids` and `fabprobe links` through the binary: whole reports against every
//! RDMA fixture (insta snapshots in tests/snapshots), `--show-gids` against real show_gids
//! outputs, deltas between two snapshots, and the live run on a host without InfiniBand.

use std::path::Path;
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

fn data(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/show_gids")
            .join(name),
    )
    .unwrap()
}

/// Tabs to spaces at 8-column stops, as a terminal renders them.
fn expand_tabs(s: &str) -> String {
    let mut out = String::new();
    for line in s.split_inclusive('\n') {
        let mut col = 0;
        for c in line.chars() {
            if c == '\t' {
                let n = 8 - col % 8;
                out.push_str(&" ".repeat(n));
                col += n;
            } else {
                out.push(c);
                col += 1;
            }
        }
    }
    out
}

#[test]
fn show_gids_equals_ibm_sample() {
    let (out, _, code) = run(&[
        "--root",
        "fixtures/roce-bond-host",
        "gids",
        "--show-gids",
        "--device",
        "mlx5_0",
    ]);
    assert_eq!(code, 0);
    assert_eq!(expand_tabs(&out), data("ibm-spectrumscale-pr4.expanded.txt"));
}

#[test]
fn show_gids_equals_ucx_bond_sample() {
    let (out, _, _) = run(&[
        "--root",
        "fixtures/roce-bond-host",
        "gids",
        "--show-gids",
        "--device",
        "mlx5_bond_0",
    ]);
    // The source shows no footer; everything before it must match.
    let body = out
        .strip_suffix("n_gids_found=6\n")
        .expect("footer n_gids_found=6");
    assert_eq!(expand_tabs(body), data("ucx-pr9484.expanded.txt"));
}

#[test]
fn show_gids_equals_nccl_1573_container_sample_byte_for_byte() {
    let (out, _, _) = run(&["--root", "fixtures/container-sparse-gids", "gids", "--show-gids"]);
    let body = out
        .strip_suffix("n_gids_found=8\n")
        .expect("footer n_gids_found=8");
    assert_eq!(body, data("nccl-issue1573.txt"));
}

#[test]
fn show_gids_lexical_order_quirk() {
    let (out, _, _) = run(&[
        "--root",
        "fixtures/roce-bond-host",
        "gids",
        "--show-gids",
        "--device",
        "mlx5_1",
    ]);
    let idx: Vec<&str> = out.lines().skip(2).filter_map(|l| l.split('\t').nth(2)).collect();
    assert_eq!(
        idx,
        ["0", "1", "10", "11", "2", "3", "4", "5", "6", "7", "8", "9"]
    );
    assert!(out.ends_with("n_gids_found=12\n"));
}

/// A GID row for [`tree`]: index, GID, `types` content, `ndevs` content (`None`: EINVAL).
type Row<'a> = (u32, &'a str, &'a str, Option<&'a str>);

/// A snapshot of RoCE devices with one port each: `rows` per device; every other slot of a
/// 256-entry table is zero with EINVAL attributes, as on a real mlx5 port.
fn tree(devs: &[(&str, &[Row])]) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    std::fs::create_dir_all(r.join("sys/class/infiniband")).unwrap();
    std::fs::create_dir_all(r.join("fabprobe")).unwrap();
    let mut errors = serde_json::Map::new();
    for (n, (name, rows)) in devs.iter().enumerate() {
        let dev = format!("sys/devices/pci0000:00/0000:00:0{n}.0/0000:0{n}:00.0");
        let port = format!("{dev}/infiniband/{name}/ports/1");
        for sub in ["gids", "gid_attrs/types", "gid_attrs/ndevs"] {
            std::fs::create_dir_all(r.join(&port).join(sub)).unwrap();
        }
        std::os::unix::fs::symlink(
            format!("../../devices/pci0000:00/0000:00:0{n}.0/0000:0{n}:00.0/infiniband/{name}"),
            r.join("sys/class/infiniband").join(name),
        )
        .unwrap();
        for (f, v) in [
            ("state", "4: ACTIVE\n"),
            ("phys_state", "5: LinkUp\n"),
            ("link_layer", "Ethernet\n"),
        ] {
            std::fs::write(r.join(&port).join(f), v).unwrap();
        }
        for i in 0..256u32 {
            let hit = rows.iter().find(|g| g.0 == i);
            let gid = hit
                .map(|g| g.1)
                .unwrap_or("0000:0000:0000:0000:0000:0000:0000:0000");
            std::fs::write(r.join(&port).join(format!("gids/{i}")), format!("{gid}\n")).unwrap();
            for (sub, val) in [("types", hit.map(|g| g.2)), ("ndevs", hit.and_then(|g| g.3))] {
                let p = format!("{port}/gid_attrs/{sub}/{i}");
                match val {
                    Some(v) => std::fs::write(r.join(&p), format!("{v}\n")).unwrap(),
                    None => {
                        std::fs::write(r.join(&p), "").unwrap();
                        errors.insert(format!("/{p}"), "EINVAL".into());
                    }
                }
            }
        }
    }
    std::fs::write(
        r.join("fabprobe/read-errors.json"),
        serde_json::to_string(&errors).unwrap(),
    )
    .unwrap();
    t
}

fn one_port_tree(rows: &[Row]) -> tempfile::TempDir {
    tree(&[("mlx5_0", rows)])
}

#[test]
fn show_gids_equals_proxmox_sample_with_einval_ndev() {
    let ll0 = "fe80:0000:0000:0000:9640:c9ff:fe8c:a09c";
    let ip0 = "0000:0000:0000:0000:0000:ffff:c0a8:0684";
    let t = tree(&[
        (
            "mlx5_0",
            &[
                (0, ll0, "IB/RoCE v1", Some("mce0")),
                (1, ll0, "RoCE v2", Some("mce0")),
                (2, ip0, "IB/RoCE v1", Some("mce0")),
                (3, ip0, "RoCE v2", Some("mce0")),
            ],
        ),
        // The second port's ndevs read fails (EINVAL): show_gids prints an empty DEV.
        (
            "mlx5_1",
            &[(0, "fe80:0000:0000:0000:9440:c9ff:ff8c:a09d", "IB/RoCE v1", None)],
        ),
    ]);
    let (out, _, _) = run(&["--root", t.path().to_str().unwrap(), "gids", "--show-gids"]);
    // The source strips trailing blanks of the last row; the footer is the same.
    let got: String = expand_tabs(&out)
        .lines()
        .map(|l| format!("{}\n", l.trim_end()))
        .collect();
    assert_eq!(got, data("proxmox-down-port.expanded.txt"));
    assert!(out.contains("mlx5_1\t1\t0\tfe80:0000:0000:0000:9440:c9ff:ff8c:a09d\t\t\tv1\t\n"));
}

#[test]
fn show_gids_equals_empty_pod_sample() {
    let t = one_port_tree(&[]);
    let (out, _, code) = run(&["--root", t.path().to_str().unwrap(), "gids", "--show-gids"]);
    // An ACTIVE RoCE port without a single GID: NCCL would pick the empty index 0.
    assert_eq!(code, 1);
    assert_eq!(out, data("k8s-sriov-issue30-empty.txt"));
    let (table, _, _) = run(&["--root", t.path().to_str().unwrap(), "gids"]);
    assert!(
        table.contains("gids.nccl_gid_unusable") || table.contains("index 0) is empty"),
        "{table}"
    );
}

#[test]
fn show_gids_equals_rdma0_sample() {
    let ll = "fe80:0000:0000:0000:0ac0:ebff:fe21:03da";
    let ip = "0000:0000:0000:0000:0000:ffff:c0a8:d3f2";
    let t = one_port_tree(&[
        (0, ll, "IB/RoCE v1", Some("rdma0")),
        (1, ll, "RoCE v2", Some("rdma0")),
        (2, ip, "IB/RoCE v1", Some("rdma0")),
        (3, ip, "RoCE v2", Some("rdma0")),
    ]);
    let (out, _, _) = run(&["--root", t.path().to_str().unwrap(), "gids", "--show-gids"]);
    assert_eq!(out, data("attack-research-rdma0.txt"));
    // And NCCL picks the IPv4 RoCE v2 entry.
    let (json, _, _) = run(&["--root", t.path().to_str().unwrap(), "--format", "json", "gids"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["data"]["ports"][0]["nccl"]["index"], 3);
}

const FIXTURES: &[&str] = &[
    "roce-bond-host",
    "container-sparse-gids",
    "ib-degraded",
    "ib-degraded-later",
    "opa-hfi1",
    "old-kernel-nopma",
    "h100-sxm-8gpu",
    "h100-penny",
    "pcie-2socket",
    "cloud-vm-flat",
    "cpu-only",
    "rxe-vm",
];

fn snapshot_reports(cmd: &str) {
    for f in FIXTURES {
        let root = format!("fixtures/{f}");
        let (table, err, code) = run(&["--root", &root, cmd]);
        assert!(code == 0 || code == 1 || code == 3, "{f}: exit {code}: {err}");
        insta::assert_snapshot!(format!("{cmd}_table__{f}"), format!("exit {code}\n{table}"));
        let (json, _, jcode) = run(&["--root", &root, "--format", "json", cmd]);
        assert_eq!(code, jcode, "{f}: table and json disagree on the exit code");
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["schema"], format!("fabprobe.{cmd}"));
        insta::assert_json_snapshot!(format!("{cmd}_json__{f}"), v);
    }
}

#[test]
fn gids_whole_reports() {
    snapshot_reports("gids");
}

#[test]
fn links_whole_reports() {
    snapshot_reports("links");
}

#[test]
fn links_deltas_between_two_snapshots() {
    let args = [
        "--root",
        "fixtures/ib-degraded-later",
        "links",
        "--baseline",
        "fixtures/ib-degraded",
    ];
    let (table, _, code) = run(&args);
    assert_eq!(code, 1, "link_downed and downtrained PCIe are faults");
    insta::assert_snapshot!("links_baseline_table__ib-degraded", table);
    let mut jargs = args.to_vec();
    jargs.insert(0, "json");
    jargs.insert(0, "--format");
    let (json, _, _) = run(&jargs);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    insta::assert_json_snapshot!("links_baseline_json__ib-degraded", v);
    // Spot checks of the rules, independent of the snapshot.
    let port = |dev: usize| &v["data"]["devices"][dev]["ports"][0];
    let counter = |dev: usize, name: &str| {
        port(dev)["counters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap()
    };
    assert_eq!(v["data"]["sample"]["interval_s"], 30.0);
    assert_eq!(counter(0, "rx_write_requests")["delta"]["value"], 796);
    assert_eq!(counter(0, "rx_write_requests")["delta"]["wrapped"], true);
    assert_eq!(counter(0, "port_xmit_data")["delta_bytes"], 76_000_000_000u64);
    // Words x4 = bytes, over 30 s, in GB/s and as a share of the 400 Gb/s port.
    assert_eq!(port(0)["rate"]["gbps"], 400.0);
    let x = counter(0, "port_xmit_data");
    let near = |v: &serde_json::Value, want: f64| (v.as_f64().unwrap() - want).abs() < 1e-6;
    assert!(near(&x["rate_gbs"], 76.0 / 30.0), "{x}");
    assert!(near(&x["line_rate_pct"], 76.0 / 30.0 * 8.0 / 400.0 * 100.0), "{x}");
    // Not a data counter: events per second only.
    assert!(counter(2, "symbol_error")["rate_gbs"].is_null());
    assert!(table.contains("+76000000000 B  2.5 GB/s (5.1% of line rate)"), "{table}");
    assert_eq!(counter(2, "symbol_error")["delta"]["value"], 4699);
    assert_eq!(counter(3, "symbol_error")["delta"]["kind"], "saturated");
    assert_eq!(counter(3, "symbol_error")["delta"]["at_least"], 5);
    let ids: Vec<String> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| format!("{} {}", f["id"].as_str().unwrap(), f["subject"].as_str().unwrap()))
        .collect();
    for want in [
        "links.congestion mlx5_0/1",
        "links.port_not_active mlx5_1/1",
        "links.rate_below_peers mlx5_2/1",
        "links.errors_increasing mlx5_2/1",
        "links.retransmissions_increasing mlx5_2/1",
        "links.pcie_downtrained mlx5_3",
        "links.errors_increasing mlx5_3/1",
    ] {
        assert!(ids.iter().any(|i| i == want), "missing {want} in {ids:?}");
    }
    let (prom, _, _) = run(&[
        "--root",
        "fixtures/ib-degraded-later",
        "--format",
        "prom",
        "links",
        "--baseline",
        "fixtures/ib-degraded",
    ]);
    insta::assert_snapshot!("links_baseline_prom__ib-degraded", prom);
}

#[test]
fn gids_prom() {
    let (prom, _, _) = run(&["--root", "fixtures/roce-bond-host", "--format", "prom", "gids"]);
    insta::assert_snapshot!("gids_prom__roce-bond-host", prom);
}

#[test]
fn unknown_device_and_bad_flags_are_usage_errors() {
    let (_, err, code) = run(&["--root", "fixtures/roce-bond-host", "gids", "--device", "mlx5_9"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("mlx5_9"), "{err}");
    let (_, err, code) = run(&["--root", "fixtures/ib-degraded", "links", "--interval", "1"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--baseline"), "{err}");
    let (_, _, code) = run(&[
        "--root",
        "fixtures/roce-bond-host",
        "--format",
        "json",
        "gids",
        "--show-gids",
    ]);
    assert_eq!(code, 2);
    let (_, _, code) = run(&[
        "--root",
        "fixtures/roce-bond-host",
        "--format",
        "nccl-xml",
        "links",
    ]);
    assert_eq!(code, 2);
}

/// The RDMA devices this host's kernel lists, or None without InfiniBand support.
fn live_rdma_devices() -> Option<Vec<String>> {
    let rd = std::fs::read_dir("/sys/class/infiniband").ok()?;
    let mut v: Vec<String> = rd
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    Some(v)
}

/// The live host, whatever it has: without InfiniBand in the kernel (this CI machine) both
/// commands say so and exit 0; with an empty `/sys/class/infiniband` they say that; with
/// devices they report exactly the devices the kernel lists. JSON is a valid envelope in
/// every case.
#[test]
fn live_run_reports_what_the_kernel_lists() {
    let devs = live_rdma_devices();
    let message = match &devs {
        None => Some("no RDMA devices: the kernel has no InfiniBand support"),
        Some(d) if d.is_empty() => Some("no RDMA devices: /sys/class/infiniband is empty"),
        Some(_) => None,
    };
    for cmd in ["gids", "links"] {
        let (out, err, code) = run(&[cmd]);
        let (json, jerr, jcode) = run(&["--format", "json", cmd]);
        let v: serde_json::Value =
            serde_json::from_str(&json).unwrap_or_else(|e| panic!("{cmd}: {e}: {jerr}"));
        assert_eq!(v["schema"], format!("fabprobe.{cmd}"));
        assert_eq!(v["host"]["source"], "live");
        match message {
            Some(m) => {
                // Nothing to judge: NOT EVALUATED and exit 3, never a pass (issue 42).
                assert_eq!(code, 3, "{cmd}: {err}");
                assert_eq!(
                    out,
                    format!("fabprobe {cmd}: NOT EVALUATED  nothing to judge: {m}\n{m}\n")
                );
                assert_eq!(jcode, 3);
                assert_eq!(v["data"]["rdma"]["devices_found"], false);
                assert_eq!(v["data"]["rdma"]["message"], m);
                let ids: Vec<&str> = v["findings"].as_array().unwrap().iter().map(|f| f["id"].as_str().unwrap()).collect();
                assert_eq!(ids, [format!("{cmd}.nothing_to_judge")]);
            }
            None => {
                // Devices: a report (pass or a fault found), never "could not run".
                assert!(code == 0 || code == 1, "{cmd}: exit {code}: {err}");
                assert_eq!(jcode, code, "{cmd}: {jerr}");
                assert_eq!(v["data"]["rdma"]["devices_found"], true);
                assert!(v["data"]["rdma"]["message"].is_null());
                assert!(!out.starts_with("no RDMA devices"), "{out}");
            }
        }
        if let (Some(d), "links") = (&devs, cmd) {
            let mut names: Vec<String> = v["data"]["devices"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d["name"].as_str().unwrap().to_string())
                .collect();
            names.sort();
            assert_eq!(
                &names, d,
                "links reports every device the kernel lists, and no other"
            );
        }
        if let (Some(d), "gids") = (&devs, cmd) {
            for p in v["data"]["ports"].as_array().unwrap() {
                assert!(d.contains(&p["device"].as_str().unwrap().to_string()), "{p}");
            }
        }
    }
    if message.is_some() {
        // --interval does not wait when there is nothing to sample.
        let t0 = std::time::Instant::now();
        let (out, _, code) = run(&["links", "--interval", "30"]);
        assert_eq!(code, 3, "nothing to judge");
        assert!(out.contains("\nno RDMA devices"), "{out}");
        assert!(t0.elapsed() < std::time::Duration::from_secs(30));
        let (out, _, code) = run(&["gids", "--show-gids"]);
        assert_eq!(code, 3, "nothing to judge");
        assert!(out.ends_with("n_gids_found=0\n"));
    }
}

/// A device whose class link dangles and a port with garbage attributes do not hide the
/// other devices' reports, and nothing panics.
#[test]
fn broken_device_does_not_hide_the_others() {
    let ip = "0000:0000:0000:0000:0000:ffff:0a00:0001";
    let t = tree(&[("mlx5_0", &[(3, ip, "RoCE v2", Some("eth0"))])]);
    std::os::unix::fs::symlink(
        "../../devices/nowhere/infiniband/mlx5_9",
        t.path().join("sys/class/infiniband/mlx5_9"),
    )
    .unwrap();
    let p2 = t
        .path()
        .join("sys/devices/pci0000:00/0000:00:00.0/0000:00:00.0/infiniband/mlx5_0/ports/2");
    std::fs::create_dir_all(&p2).unwrap();
    std::fs::write(p2.join("state"), "garbage\n").unwrap();
    std::fs::write(p2.join("rate"), "fast\n").unwrap();
    let root = t.path().to_str().unwrap();
    let (json, err, code) = run(&["--root", root, "--format", "json", "gids"]);
    assert!(code == 0 || code == 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["data"]["ports"][0]["nccl"]["index"], 3);
    // mlx5_0 port 2's state is garbage: unknown (a warning), never a failed port.
    let (json, err, code) = run(&["--root", root, "--format", "json", "links"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let names: Vec<&str> = v["data"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["mlx5_0", "mlx5_9"]);
    assert_eq!(
        v["data"]["devices"][0]["ports"][1]["state"],
        serde_json::Value::Null
    );
    assert_eq!(
        v["data"]["devices"][0]["ports"][1]["rate"],
        serde_json::Value::Null
    );
}

/// NCCL's GID variables travel in the snapshot's `fabprobe/env.json` and drive the choice
/// end to end; the environment of the process reading the snapshot does not.
#[test]
fn nccl_gid_variables_come_from_the_snapshots_env_json() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("roce-bond-host");
    assert!(
        Command::new("cp")
            .args(["-a", "fixtures/roce-bond-host"])
            .arg(&copy)
            .status()
            .unwrap()
            .success()
    );
    let pick = |env_json: &str| -> Vec<(String, u64, String)> {
        std::fs::write(copy.join("fabprobe/env.json"), env_json).unwrap();
        let o = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
            .args(["--root", copy.to_str().unwrap(), "--format", "json", "gids"])
            // The caller's own setting must not leak into the snapshot's answer.
            .env("NCCL_IB_ROCE_VERSION_NUM", "2")
            .env("NCCL_IB_GID_INDEX", "0")
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["data"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["device"].as_str().unwrap().to_string(),
                    p["nccl"]["index"].as_u64().unwrap(),
                    p["nccl"]["reason"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let idx = |v: &[(String, u64, String)]| v.iter().map(|(d, i, _)| (d.clone(), *i)).collect::<Vec<_>>();
    let s = |d: &str, i: u64| (d.to_string(), i);
    // No variables: NCCL's default, the first IPv4 RoCE v2 GID (index 5 on the IBM table,
    // 3 on the UCX bond table).
    let default = pick("{}\n");
    assert_eq!(
        idx(&default),
        [s("mlx5_0", 5), s("mlx5_1", 3), s("mlx5_bond_0", 3)]
    );
    // RoCE v1 asked for in the snapshot's environment: the v1 twin of each.
    let v1 = pick("{\"NCCL_IB_ROCE_VERSION_NUM\": \"1\"}\n");
    assert_eq!(idx(&v1), [s("mlx5_0", 4), s("mlx5_1", 2), s("mlx5_bond_0", 2)]);
    assert!(v1.iter().all(|(_, _, r)| r.contains("RoCE v1")), "{v1:?}");
    // An index forced in the snapshot's environment.
    let forced = pick("{\"NCCL_IB_GID_INDEX\": \"1\"}\n");
    assert_eq!(
        idx(&forced),
        [s("mlx5_0", 1), s("mlx5_1", 1), s("mlx5_bond_0", 1)]
    );
    assert!(
        forced.iter().all(|(_, _, r)| r.contains("NCCL_IB_GID_INDEX=1")),
        "{forced:?}"
    );
}

/// The fixture captured from a real kernel (Soft-RoCE in a VM): facts the kernel wrote, not
/// ones a generator chose.
#[test]
fn rxe_vm_fixture_reads_as_the_kernel_wrote_it() {
    let (json, err, code) = run(&["--root", "fixtures/rxe-vm", "--format", "json", "gids"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let port = &v["data"]["ports"][0];
    assert_eq!(port["device"], "rxe0");
    assert_eq!(port["link_layer"], "Ethernet");
    assert_eq!(port["gid_tbl_len"], 1024);
    assert_eq!(port["entries"].as_array().unwrap().len(), 2, "{port}");
    assert_eq!(port["entries"][1]["ipv4"], "198.18.5.10");
    assert_eq!(port["entries"][1]["gid_type"], "RoCE v2");
    assert_eq!(port["nccl"]["index"], 1);
    let (json, err, code) = run(&["--root", "fixtures/rxe-vm", "--format", "json", "links"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let text = v.to_string();
    for want in [
        "sent_pkts",
        "retry_exceeded_err",
        "rcvd_seq_err",
        "2.5 Gb/sec (1X SDR)",
    ] {
        assert!(text.contains(want), "{want} missing from {text}");
    }
}
