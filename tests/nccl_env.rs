//! `fabprobe nccl-env` as a user runs it: whole reports (data and findings) against every
//! fixture, and the known traps on fixture copies with a crafted environment, configuration
//! files and interface list.

mod common;

use std::path::Path;
use std::process::Command;

use fabprobe::host::Host;
use fabprobe::nccl::settings::NcclSettings;
use fabprobe::probe::nccl_env;

const FIXTURES: &[&str] = &[
    "cloud-vm-flat",
    "container-sparse-gids",
    "cpu-only",
    "h100-gdr-broken",
    "h100-penny",
    "h100-sxm-8gpu",
    "ib-degraded",
    "opa-hfi1",
    "pcie-2socket",
    "roce-bond-host",
];

/// Every fixture with GPUs and RDMA NICs: its path, host and topology.
fn gpu_nic_fixtures() -> Vec<(std::path::PathBuf, Host, fabprobe::probe::topo::TopoReport)> {
    let mut out = Vec::new();
    for fx in std::fs::read_dir("fixtures").unwrap() {
        let fx = fx.unwrap().path();
        if !fx.join("sys").exists() {
            continue;
        }
        let host = Host::snapshot(&fx).unwrap();
        let t = fabprobe::probe::topo::probe(&host);
        if !t.gpus.is_empty() && !t.nics.is_empty() {
            out.push((fx, host, t));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn whole(root: &Path) -> serde_json::Value {
    let host = Host::snapshot(root).unwrap();
    let r = nccl_env::probe(&host, &NcclSettings::build(&host, None));
    let f = nccl_env::findings(&host, &r);
    serde_json::json!({"data": r, "findings": f})
}

#[test]
fn whole_reports_match_fixtures() {
    for f in FIXTURES {
        let v = whole(&Path::new("fixtures").join(f));
        insta::assert_json_snapshot!(format!("nccl_env__{f}"), v);
    }
}

/// A copy of a fixture with `fabprobe/env.json`, `fabprobe/ifaddrs.json` and extra files.
fn doctored(
    fixture: &str,
    env: serde_json::Value,
    ifaddrs: serde_json::Value,
    files: &[(&str, &str)],
) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let st = Command::new("cp")
        .arg("-a")
        .arg(format!("fixtures/{fixture}/."))
        .arg(t.path())
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::write(t.path().join("fabprobe/env.json"), env.to_string()).unwrap();
    std::fs::write(t.path().join("fabprobe/ifaddrs.json"), ifaddrs.to_string()).unwrap();
    for (p, text) in files {
        let at = t.path().join(p.trim_start_matches('/'));
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::fs::write(at, text).unwrap();
    }
    t
}

fn ids(v: &serde_json::Value) -> Vec<(String, String, String)> {
    let mut out: Vec<_> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["id"].as_str().unwrap().to_string(),
                f["severity"].as_str().unwrap().to_string(),
                f["subject"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

fn run_json(root: &Path) -> (i32, serde_json::Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .args(["--format", "json", "--root"])
        .arg(root)
        .arg("nccl-env")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema"], "fabprobe.nccl-env");
    (out.status.code().unwrap(), v)
}

fn ifs(list: &[(&str, &str, u8)]) -> serde_json::Value {
    serde_json::Value::Array(
        list.iter()
            .map(|(n, a, l)| serde_json::json!({"name": n, "addr": a, "prefix_len": l, "running": true}))
            .collect(),
    )
}

#[test]
fn roce_traps_and_conf_precedence() {
    let t = doctored(
        "roce-bond-host",
        serde_json::json!({
            "HOME": "/home/u",
            "NCCL_IB_HCA": "mlx5_1",
            "NCCL_IB_GID_INDEX": "0",
            "NCCL_IB_TIMEOUT": "32",
            "NCCL_SOCKET_IFNAMES": "ens1f1",
            "NCCL_SOCKET_IFNAME": "lo",
            "NCCL_DEBUG": "INFO"
        }),
        ifs(&[
            ("lo", "127.0.0.1", 8),
            ("ens1f0", "172.19.0.60", 24),
            ("ens1f1", "192.168.20.11", 24),
        ]),
        &[
            (
                "/home/u/.nccl.conf",
                "# user\nNCCL_DEBUG=WARN\nNCCL_NET_GDR_LEVEL=NODE\nNCCL_IB_RETRY_CNT=seven\n",
            ),
            ("/etc/nccl.conf", "NCCL_NET_GDR_LEVEL=PHB\nNCCL_IB_TC=106\n"),
        ],
    );
    // `mlx5_10`: a second name for mlx5_1's device, so NCCL_IB_HCA=mlx5_1 also matches it.
    let ib = t.path().join("sys/class/infiniband");
    let target = std::fs::read_link(ib.join("mlx5_1")).unwrap();
    std::os::unix::fs::symlink(target, ib.join("mlx5_10")).unwrap();

    let (code, v) = run_json(t.path());
    assert_eq!(code, 1, "lo for sockets and NCCL_IB_TIMEOUT=32 are fails");
    let got = ids(&v);
    for want in [
        ("gids.nccl_gid_index_bad", "fail", "mlx5_1/1"),
        ("nccl_env.bad_value", "warn", "NCCL_IB_RETRY_CNT"),
        ("nccl_env.bad_value", "warn", "NCCL_NET_GDR_LEVEL"),
        ("nccl_env.hca_prefix_match", "warn", "mlx5_10"),
        ("nccl_env.out_of_range", "fail", "NCCL_IB_TIMEOUT"),
        ("nccl_env.socket_interface_unusable", "fail", "lo"),
        ("nccl_env.unknown_name", "warn", "NCCL_SOCKET_IFNAMES"),
    ] {
        assert!(
            got.iter()
                .any(|g| (g.0.as_str(), g.1.as_str(), g.2.as_str()) == want),
            "missing {want:?} in {got:#?}"
        );
    }
    let unknown = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "nccl_env.unknown_name")
        .unwrap();
    assert_eq!(unknown["evidence"]["nearest"], "NCCL_SOCKET_IFNAME");
    // Precedence: the environment beats ~/.nccl.conf, which beats /etc/nccl.conf.
    let s = |n: &str| {
        v["data"]["settings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == n)
            .unwrap()
            .clone()
    };
    assert_eq!(s("NCCL_DEBUG")["value"], "INFO");
    assert_eq!(
        s("NCCL_DEBUG")["shadowed"][0]["origin"]["path"],
        "/home/u/.nccl.conf"
    );
    assert_eq!(s("NCCL_NET_GDR_LEVEL")["value"], "NODE");
    assert_eq!(s("NCCL_NET_GDR_LEVEL")["line"], 3);
    assert_eq!(s("NCCL_NET_GDR_LEVEL")["shadowed"][0]["value"], "PHB");
    assert_eq!(s("NCCL_IB_TC")["origin"]["path"], "/etc/nccl.conf");
    // The ports NCCL uses, and why.
    let used: Vec<String> = v["data"]["ib"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["used"] == true)
        .map(|p| {
            format!(
                "{}:{}",
                p["device"].as_str().unwrap(),
                p["rule"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        used,
        vec![
            "mlx5_1:listed in NCCL_IB_HCA",
            "mlx5_10:NCCL_IB_HCA prefix mlx5_1 matches"
        ]
    );
    assert_eq!(v["data"]["sockets"]["interfaces"][0]["name"], "lo");
    insta::assert_json_snapshot!(
        "nccl_env__roce_traps",
        serde_json::json!({"data": v["data"], "findings": v["findings"]})
    );
}

#[test]
fn ib_disabled_p2p_disabled_plugin_and_docker_default() {
    let t = doctored(
        "h100-sxm-8gpu",
        serde_json::json!({
            "NCCL_IB_DISABLE": "1",
            "NCCL_P2P_DISABLE": "1",
            "NCCL_NET_PLUGIN": "aws-ofi",
            "NCCL_TOPO_FILE": "/opt/topo/missing.xml",
            "NCCL_CONF_FILE": "/opt/nccl/nccl.conf",
            "LD_LIBRARY_PATH": "/opt/plugins"
        }),
        ifs(&[("lo", "127.0.0.1", 8), ("docker0", "172.17.0.1", 16)]),
        &[("/opt/plugins/libnccl-net-aws-ofi.so.0", "not the file NCCL opens")],
    );
    let (code, v) = run_json(t.path());
    assert_eq!(code, 1, "docker0 picked for the bootstrap is a fail");
    let got = ids(&v);
    for want in [
        ("nccl_env.conf_file_unreadable", "warn", "/opt/nccl/nccl.conf"),
        ("nccl_env.ib_disabled", "warn", "NCCL_IB_DISABLE"),
        ("nccl_env.net_plugin_missing", "warn", "NCCL_NET_PLUGIN"),
        ("nccl_env.p2p_disabled_nvlink", "warn", "NCCL_P2P_DISABLE"),
        ("nccl_env.socket_interface_unusable", "fail", "docker0"),
        ("nccl_env.topo_file_missing", "warn", "NCCL_TOPO_FILE"),
    ] {
        assert!(
            got.iter()
                .any(|g| (g.0.as_str(), g.1.as_str(), g.2.as_str()) == want),
            "missing {want:?} in {got:#?}"
        );
    }
    assert_eq!(v["data"]["sockets"]["interfaces"][0]["rule"], "default: docker*");
    assert!(
        v["data"]["ib"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["used"] == false)
    );
    // NCCL_CONF_FILE replaces ~/.nccl.conf: only it and /etc/nccl.conf are listed.
    let roles: Vec<&str> = v["data"]["conf_files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, vec!["NCCL_CONF_FILE", "/etc/nccl.conf"]);
}

#[test]
fn plugin_found_and_hca_matching_nothing() {
    let t = doctored(
        "h100-sxm-8gpu",
        serde_json::json!({
            "NCCL_IB_HCA": "=mlx5_99",
            "NCCL_NET_PLUGIN": "aws-ofi",
            "NCCL_NET_GDR_LEVEL": "LOC",
            "LD_LIBRARY_PATH": "/opt/plugins"
        }),
        ifs(&[("lo", "127.0.0.1", 8), ("eth0", "10.0.0.5", 24)]),
        &[("/opt/plugins/libnccl-net-aws-ofi.so", "")],
    );
    let (code, v) = run_json(t.path());
    assert_eq!(code, 1);
    let got = ids(&v);
    assert!(
        got.iter()
            .any(|g| g.0 == "nccl_env.hca_matches_nothing" && g.1 == "fail"),
        "{got:#?}"
    );
    assert!(
        !got.iter().any(|g| g.0 == "nccl_env.net_plugin_missing"),
        "{got:#?}"
    );
    assert_eq!(
        v["data"]["net_plugin"]["found"],
        "/opt/plugins/libnccl-net-aws-ofi.so"
    );
    assert_eq!(v["data"]["sockets"]["interfaces"][0]["name"], "eth0");
    assert_eq!(v["data"]["gdr"]["level"], "LOC");
}

#[test]
fn gdr_level_gates_by_path_type() {
    // Every GPU's nearest HCA is PIX on this fixture: on at the default, off at LOC.
    let t = doctored(
        "h100-sxm-8gpu",
        serde_json::json!({"NCCL_NET_GDR_LEVEL": "0"}),
        ifs(&[("eth0", "10.0.0.5", 24)]),
        &[],
    );
    let (code, v) = run_json(t.path());
    assert_eq!(code, 0, "a warning");
    assert_eq!(v["data"]["gdr"]["level"], "LOC");
    assert_eq!(v["data"]["gdr"]["level_rule"], "set to 0 in environment");
    let off: Vec<_> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["id"] == "nccl_env.gdr_level_strands_gpus")
        .collect();
    // One finding for the eight GPUs, naming the setting that strands them (their PIX NIC
    // is within NCCL's default level), not `gdr_off` (a NIC too far by the topology).
    assert_eq!(off.len(), 1);
    assert_eq!(
        off[0]["subject"],
        "GPU0, GPU1, GPU2, GPU3, GPU4, GPU5, GPU6, GPU7"
    );
    assert_eq!(
        off[0]["evidence"]["nearest_nic"].as_array().map(Vec::len),
        Some(8)
    );
    assert!(
        !v["findings"].as_array().unwrap().iter().any(|f| f["id"] == "nccl_env.gdr_off"),
        "{v}"
    );
    let dflt = whole(Path::new("fixtures/h100-sxm-8gpu"));
    assert!(
        dflt["data"]["gdr"]["pairs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["enabled"] == true)
    );
    assert!(
        !dflt["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["id"] == "nccl_env.gdr_off")
    );
}

/// nccl-env's GDR verdict per GPU-HCA pair is `fabprobe gdr`'s, on every fixture (both
/// read NCCL_NET_GDR_LEVEL's default: PXB and P2C allow the same PCI paths).
#[test]
fn gdr_verdicts_agree_with_fabprobe_gdr() {
    use fabprobe::probe::gdr;
    let mut compared = 0;
    for f in FIXTURES {
        let host = Host::snapshot(Path::new("fixtures").join(f)).unwrap();
        let nccl = NcclSettings::build(&host, None);
        let env = nccl_env::probe(&host, &nccl);
        let g = gdr::probe(&host, &nccl);
        let nic_name = |label: &str| {
            g.nics
                .iter()
                .find(|n| n.label == label)
                .and_then(|n| n.name.clone())
        };
        for p in &env.gdr.pairs {
            let theirs = g
                .pairs
                .iter()
                .find(|q| q.gpu == p.gpu && nic_name(&q.nic).as_deref() == Some(p.nic.as_str()))
                .unwrap_or_else(|| panic!("{f}: gdr has no pair {} {}", p.gpu, p.nic));
            assert_eq!(
                Some(p.verdict.as_str()),
                theirs.verdict.map(|v| v.as_str()),
                "{f}: {} {}",
                p.gpu,
                p.nic
            );
            compared += 1;
        }
    }
    // h100-penny, h100-sxm-8gpu and h100-gdr-broken have GPUs with used HCAs.
    assert!(compared >= 100, "{compared}");
}

/// A copy of `fixture` whose job environment is `env` and with extra files (one fact
/// changed per case, built here rather than in a fixture tree).
fn with_env_and_files(fixture: &str, env: serde_json::Value, files: &[(&str, &str)]) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let st = Command::new("cp")
        .arg("-a")
        .arg(format!("fixtures/{fixture}/."))
        .arg(t.path())
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::write(t.path().join("fabprobe/env.json"), env.to_string()).unwrap();
    for (p, text) in files {
        let at = t.path().join(p.trim_start_matches('/'));
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::fs::write(at, text).unwrap();
    }
    t
}

fn cli_json(root: &Path, args: &[&str]) -> (i32, serde_json::Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .args(["--format", "json", "--root"])
        .arg(root)
        .args(args)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap(), v)
}

/// Slurm runs the HealthCheckProgram with an almost empty environment: a host whose
/// /etc/nccl.conf puts RoCE on its lossless priority (and sets the GDR level and GID index)
/// must be judged exactly as with the same values in the job's environment. Before the
/// settings model, qos took NCCL_IB_TC from fabprobe's own environment only, and failed it.
#[test]
fn etc_nccl_conf_gives_the_verdicts_of_the_environment() {
    let conf = "NCCL_IB_TC=106\nNCCL_NET_GDR_LEVEL=PHB\nNCCL_IB_GID_INDEX=3\n";
    let from_file = with_env_and_files(
        "roce-pause-storm",
        serde_json::json!({}),
        &[("/etc/nccl.conf", conf)],
    );
    let from_env = with_env_and_files(
        "roce-pause-storm",
        serde_json::json!({"NCCL_IB_TC": "106", "NCCL_NET_GDR_LEVEL": "PHB", "NCCL_IB_GID_INDEX": "3"}),
        &[],
    );
    let neither = with_env_and_files("roce-pause-storm", serde_json::json!({}), &[]);
    for policy in ["default", "roce-dcqcn"] {
        let (code_f, f) = cli_json(from_file.path(), &["check", "--policy", policy]);
        let (code_e, e) = cli_json(from_env.path(), &["check", "--policy", policy]);
        let (_, n) = cli_json(neither.path(), &["check", "--policy", policy]);
        assert_eq!(ids(&f), ids(&e), "{policy}");
        assert_eq!(
            (code_f, &f["data"]["verdict"]),
            (code_e, &e["data"]["verdict"]),
            "{policy}"
        );
        // The setting matters on this host: without it RoCE's priority is unknown, which is
        // said as not evaluated (never failed on a guess: issue 17, "unknown is a state of
        // its own"), and not with it.
        let unread = |v: &serde_json::Value| v["data"]["not_evaluated"].to_string();
        assert!(
            unread(&n).contains("\"key\":\"qos.roce_priority_unknown\""),
            "{policy}: {}",
            unread(&n)
        );
        assert!(
            !unread(&f).contains("roce_priority_unknown"),
            "{policy}: {}",
            unread(&f)
        );
        assert_eq!(code_f, 0, "{policy}");
    }
    let (_, gf) = cli_json(from_file.path(), &["gdr"]);
    let (_, ge) = cli_json(from_env.path(), &["gdr"]);
    assert_eq!(gf["data"]["nccl_net_gdr_level"]["level"], "PHB");
    assert_eq!(
        gf["data"]["nccl_net_gdr_level"]["level"],
        ge["data"]["nccl_net_gdr_level"]["level"]
    );
    assert_eq!(
        gf["data"]["nccl_net_gdr_level"]["source"],
        "set to PHB in /etc/nccl.conf:2"
    );
    let (_, xf) = cli_json(from_file.path(), &["gids"]);
    let (_, xe) = cli_json(from_env.path(), &["gids"]);
    let picks = |v: &serde_json::Value| -> Vec<serde_json::Value> {
        v["data"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["nccl"]["index"].clone())
            .collect()
    };
    assert_eq!(picks(&xf), picks(&xe));
    assert!(picks(&xf).iter().all(|i| i == 3), "{:?}", picks(&xf));
    let (_, qf) = cli_json(from_file.path(), &["qos"]);
    let src = qf["data"]["interfaces"][0]["roce"]["traffic_class_source"]
        .as_str()
        .unwrap_or("");
    assert!(src.contains("/etc/nccl.conf:1"), "{src}");
}

/// `NCCL_IB_HCA = mlx5_0` and a trailing `# note` are read by NCCL literally: the report
/// says what NCCL really does and lints each line.
#[test]
fn conf_lines_are_read_as_nccl_reads_them() {
    let conf = "NCCL_IB_HCA = mlx5_0\nNCCL_SOCKET_IFNAME=eth0 # data network\n#NCCL_DEBUG=INFO\n";
    let t = with_env_and_files(
        "roce-bond-host",
        serde_json::json!({}),
        &[("/etc/nccl.conf", conf)],
    );
    let (_, v) = cli_json(t.path(), &["nccl-env"]);
    let names: Vec<&str> = v["data"]["settings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"NCCL_IB_HCA "), "{names:?}");
    assert!(!names.contains(&"NCCL_IB_HCA"), "{names:?}");
    assert!(!names.contains(&"NCCL_DEBUG"), "{names:?}");
    assert_eq!(v["data"]["ib"]["hca"], serde_json::Value::Null);
    let ifname = v["data"]["settings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "NCCL_SOCKET_IFNAME")
        .unwrap();
    assert_eq!(ifname["value"], "eth0 # data network");
    let lints: Vec<(String, String)> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["id"] == "nccl_env.conf_line_misread")
        .map(|f| {
            (
                f["subject"].as_str().unwrap().to_string(),
                f["evidence"]["meant"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        lints,
        vec![
            ("/etc/nccl.conf:1".to_string(), "NCCL_IB_HCA=mlx5_0".to_string()),
            (
                "/etc/nccl.conf:2".to_string(),
                "NCCL_SOCKET_IFNAME=eth0".to_string()
            ),
        ]
    );
}

/// `--env-file` is the job's environment; `--nccl-version` picks the rules and every
/// report says which; a library on the path is found through the host.
#[test]
fn env_file_and_nccl_version() {
    let t = with_env_and_files(
        "roce-pause-storm",
        serde_json::json!({"LD_LIBRARY_PATH": "/opt/nccl/lib"}),
        &[("/opt/nccl/lib/libnccl.so.2.20.5", "")],
    );
    let job = tempfile::NamedTempFile::new().unwrap();
    // The job's environment replaces the snapshot's: its library path comes with it.
    std::fs::write(
        job.path(),
        "export NCCL_IB_TC=106\nLD_LIBRARY_PATH=/opt/nccl/lib\n",
    )
    .unwrap();
    let jf = job.path().to_str().unwrap();
    let (code, v) = cli_json(t.path(), &["--env-file", jf, "nccl-env"]);
    // NCCL 2.20 uses GID index 0, the link-local entry, on RoCE: a real fault there.
    assert_eq!(code, 1);
    assert!(
        ids(&v)
            .iter()
            .any(|(id, sev, _)| id.starts_with("gids.nccl_gid") && sev == "fail"),
        "{:?}",
        ids(&v)
    );
    assert_eq!(v["data"]["env_source"], format!("--env-file {jf}"));
    assert_eq!(v["data"]["nccl_version"]["version"], "2.20.5");
    assert_eq!(
        v["data"]["nccl_version"]["source"],
        "/opt/nccl/lib/libnccl.so.2.20.5"
    );
    // NCCL 2.20 has no automatic GID choice: index 0 on every RoCE port.
    let (_, g) = cli_json(t.path(), &["gids"]);
    for p in g["data"]["ports"].as_array().unwrap() {
        if p["link_layer"] == "Ethernet" {
            assert_eq!(p["nccl"]["index"], 0, "{}", p["nccl"]["reason"]);
        }
    }
    let (_, g) = cli_json(t.path(), &["--nccl-version", "2.21", "gids"]);
    assert_eq!(g["data"]["nccl_env"]["nccl_version"], "2.21");
    let (_, q) = cli_json(t.path(), &["--env-file", jf, "qos"]);
    let src = q["data"]["interfaces"][0]["roce"]["traffic_class_source"]
        .as_str()
        .unwrap_or("");
    assert!(src.contains("NCCL_IB_TC=106 (environment)"), "{src}");
    let out = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .args(["--nccl-version", "two", "gids"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .args(["--root", "fixtures/roce-pause-storm", "--env-from", "1", "gids"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--env-from"));
}

/// 2.22 and older read only /sys/kernel/mm/memory_peers/nv_mem*: a host with only
/// nvidia_peermem loaded (no nv_mem) has no peer memory there; 2.23+ finds it; with the
/// version unknown the verdict says unknown, never on or off.
#[test]
fn peer_memory_follows_the_nccl_version() {
    let t = with_env_and_files("h100-sxm-8gpu", serde_json::json!({}), &[]);
    std::fs::remove_dir_all(t.path().join("sys/kernel/mm/memory_peers/nv_mem")).unwrap();
    std::fs::remove_dir_all(t.path().join("sys/kernel/mm/memory_peers/nv_mem_nc")).unwrap();
    assert!(t.path().join("sys/module/nvidia_peermem/version").exists());
    let verdicts = |args: &[&str]| -> (bool, Vec<String>) {
        let (_, v) = cli_json(t.path(), args);
        let pm = &v["data"]["peer_memory"];
        let vs = v["data"]["pairs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["nccl_nearest"] == true)
            .map(|p| p["verdict"].as_str().unwrap_or("null").to_string())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        (pm["nccl_gdr_support"].as_bool().unwrap(), vs)
    };
    let (s23, v23) = verdicts(&["--nccl-version", "2.23.4", "gdr"]);
    assert!(s23);
    assert_eq!(v23, vec!["on"]);
    let (s22, v22) = verdicts(&["--nccl-version", "2.22.3", "gdr"]);
    assert!(!s22);
    assert!(!v22.contains(&"on".to_string()), "{v22:?}");
    let (su, vu) = verdicts(&["gdr"]);
    assert!(!su);
    assert!(
        vu.iter().all(|v| v == "unknown" || v == "dmabuf_possible"),
        "{vu:?}"
    );
}

/// `check` runs the `nccl-env` lint on the job's settings: a socket interface NCCL cannot
/// find fails the node in `check` as it does in `nccl-env`, and the GDR facts the gdr probe
/// already reports are not counted twice.
#[test]
fn check_runs_the_nccl_env_lint_once_per_fact() {
    let t = doctored(
        "pcie-2socket",
        serde_json::json!({}),
        ifs(&[("eth0", "10.0.0.5", 24)]),
        &[],
    );
    let job = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(job.path(), "NCCL_SOCKET_IFNAME==nosuch9\n").unwrap();
    let jf = job.path().to_str().unwrap();
    let (_, lint) = cli_json(t.path(), &["--env-file", jf, "nccl-env"]);
    let (code, c) = cli_json(t.path(), &["--env-file", jf, "check"]);
    let lint_ids: Vec<String> = ids(&lint).into_iter().map(|(id, _, _)| id).collect();
    let check_ids: Vec<String> = ids(&c).into_iter().map(|(id, _, _)| id).collect();
    assert!(
        lint_ids.iter().any(|i| i == "nccl_env.no_socket_interface"),
        "{lint_ids:?}"
    );
    assert!(
        check_ids.iter().any(|i| i == "nccl_env.no_socket_interface"),
        "{check_ids:?}"
    );
    assert_eq!(code, 1);
    assert!(
        c["data"]["probes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "nccl-env")
    );
    // GDR off by distance: once (the gdr probe's), in one line for every GPU.
    assert!(
        lint_ids.iter().filter(|i| *i == "nccl_env.gdr_off").count() == 1,
        "{lint_ids:?}"
    );
    assert!(
        !check_ids.iter().any(|i| i.starts_with("nccl_env.gdr")),
        "{check_ids:?}"
    );
    assert_eq!(check_ids.iter().filter(|i| *i == "gdr.off_distance").count(), 1);
    // What it saw, counted.
    assert_eq!(c["data"]["saw"]["gpus"], 4, "{}", c["data"]["saw"]);
}

/// `getpwuid(uid)->pw_dir`, as NCCL's `userHomeDir` finds it.
fn passwd_home(uid: u32) -> String {
    let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .unwrap_or_else(|e| panic!("reading the passwd entry of uid {uid}: {e}"))
        .unwrap_or_else(|| panic!("uid {uid} has no passwd entry"));
    user.dir.to_string_lossy().into_owned()
}

fn conf_paths(v: &serde_json::Value) -> Vec<String> {
    v["data"]["conf_files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_string())
        .collect()
}

/// NCCL reads `~/.nccl.conf` from the passwd home of its process's user (`param.cc`
/// `userHomeDir`: `getpwuid(getuid())`), not from `$HOME`: fabprobe's own HOME (root's
/// shell under Slurm, a `sudo -E`) is not where the job's NCCL looks, and with `--env-from`
/// it is the home of that process's owner.
#[test]
fn nccl_conf_is_read_from_the_job_users_home() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join(".nccl.conf"), "NCCL_IB_TC=106\n").unwrap();
    let run = |args: &[&str]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_fabprobe"))
            .args(args)
            .env_clear()
            .env("HOME", tmp.path())
            .output()
            .unwrap();
        // 3: this machine may have no GPU and no RDMA port (nothing to judge).
        assert!(
            o.status.code().is_some_and(|c| c < 2 || c == 3),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let me = nix::unistd::getuid().as_raw();
    let v = run(&["nccl-env", "--format", "json"]);
    let own = format!("{}/.nccl.conf", passwd_home(me).trim_end_matches('/'));
    assert_eq!(conf_paths(&v)[0], own, "{}", v["data"]["conf_files"]);
    // The first half ran; the second needs a process of another user.
    let why = common::Need::Root("--env-from another user's process: the second half of this test");
    if !common::lab_ready("nccl_conf_is_read_from_the_job_users_home", &[why]) {
        return;
    }
    // A training process of user 65534 (nobody) whose HOME says otherwise.
    let mut job = std::process::Command::new("sleep");
    std::os::unix::process::CommandExt::uid(&mut job, 65534);
    let mut job = job.arg("30").env_clear().env("HOME", tmp.path()).spawn().unwrap();
    let pid = job.id().to_string();
    let v = run(&["--env-from", &pid, "nccl-env", "--format", "json"]);
    let _ = job.kill();
    let _ = job.wait();
    let theirs = format!("{}/.nccl.conf", passwd_home(65534).trim_end_matches('/'));
    assert_eq!(conf_paths(&v)[0], theirs, "{}", v["data"]["conf_files"]);
}

/// `NCCL_COMM_ID` moves NCCL's bootstrap to the interface on that address's subnet
/// (`bootstrapNetInit` / `ncclFindInterfaceMatchSubnet`), whatever `NCCL_SOCKET_IFNAME`
/// says; `NCCL_SOCKET_FAMILY=AF_INET6` keeps only IPv6 addresses in the socket list; a
/// COMM_ID on no local subnet fails the bootstrap; `NCCL_IB_HCA` entries are read as
/// `parseStringList` reads them (`:1` alone names nothing).
#[test]
fn comm_id_bootstrap_socket_family_and_hca_ports() {
    let addrs = ifs(&[
        ("lo", "127.0.0.1", 8),
        ("ens1f0", "172.19.0.60", 24),
        ("ens1f0", "fd00::60", 64),
        ("ens1f1", "192.168.20.11", 24),
        ("ens1f1", "fd01::11", 64),
    ]);
    let env = |comm_id: &str| {
        serde_json::json!({
            "NCCL_SOCKET_IFNAME": "ens1f0",
            "NCCL_SOCKET_FAMILY": "AF_INET6",
            "NCCL_COMM_ID": comm_id,
            "NCCL_IB_HCA": ":1,mlx5_1:1x",
        })
    };
    let t = doctored("roce-bond-host", env("192.168.20.1:29500"), addrs.clone(), &[]);
    let (_, v) = run_json(t.path());
    let s = &v["data"]["sockets"];
    assert_eq!(s["bootstrap"]["name"], "ens1f1", "{s}");
    assert_eq!(s["bootstrap"]["addr"], "192.168.20.11", "{s}");
    assert_eq!(
        s["bootstrap"]["rule"], "NCCL_COMM_ID 192.168.20.1: same subnet",
        "{s}"
    );
    assert_eq!(s["interfaces"][0]["addr"], "fd00::60", "{s}");
    assert_eq!(s["interfaces"].as_array().unwrap().len(), 1, "{s}");
    let used: Vec<String> = v["data"]["ib"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["used"] == true)
        .map(|p| format!("{}/{}", p["device"].as_str().unwrap(), p["port"]))
        .collect();
    assert_eq!(used, ["mlx5_1/1"], "{}", v["data"]["ib"]);
    let table = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .arg("--root")
        .arg(t.path())
        .arg("nccl-env")
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.lines().any(|l| l
            .split_whitespace()
            .take(3)
            .eq(["bootstrap", "ens1f1", "192.168.20.11"])),
        "{table}"
    );
    let t = doctored("roce-bond-host", env("10.1.2.3:29500"), addrs, &[]);
    let (code, v) = run_json(t.path());
    assert_eq!(code, 1);
    assert!(v["data"]["sockets"]["bootstrap"].is_null());
    let f = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "nccl_env.no_socket_interface")
        .unwrap();
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .starts_with("NCCL_COMM_ID=10.1.2.3:29500 is on no subnet"),
        "{f}"
    );
}

/// `NCCL_NET_PLUGIN` is a comma-separated list, each entry tried as given and then as
/// `libnccl-net-NAME.so` (`plugin/net.cc`, `plugin_open.cc`); the first found wins.
#[test]
fn net_plugin_is_a_list_tried_in_nccls_order() {
    let t = doctored(
        "h100-sxm-8gpu",
        serde_json::json!({
            "NCCL_NET_PLUGIN": "aws-ofi,ucx",
            "LD_LIBRARY_PATH": "/opt/plugins"
        }),
        ifs(&[("eth0", "10.0.0.5", 24)]),
        &[("/opt/plugins/libnccl-net-ucx.so", ""), ("/opt/plugins/ucx", "")],
    );
    let (_, v) = run_json(t.path());
    let p = &v["data"]["net_plugin"];
    assert_eq!(
        p["tries"],
        serde_json::json!(["aws-ofi", "libnccl-net-aws-ofi.so", "ucx", "libnccl-net-ucx.so"])
    );
    // `ucx` as given comes before libnccl-net-ucx.so.
    assert_eq!(p["found"], "/opt/plugins/ucx", "{p}");
    assert!(!ids(&v).iter().any(|g| g.0 == "nccl_env.net_plugin_missing"));
}

/// nvidia-smi's cell as NCCL ranks paths (NODE, within one socket, is NCCL's PHB), for the
/// oracle below: a second reading of the topology, from `topo`'s matrix, not `gdr`'s paths.
fn path_rank(cell: &str) -> Option<u8> {
    Some(match cell {
        "PIX" => 0,
        "PXB" => 1,
        "PHB" | "NODE" => 2,
        "SYS" => 3,
        _ => return None,
    })
}

/// The GPUs an `NCCL_IB_HCA` value strands, read from `topo`'s matrix, the ports' states
/// and `HcaSpec` (what NCCL's init selects): the best path left is longer than the best path
/// to any NIC NCCL could open. None selected at all is another finding's.
fn stranded_by(host: &Host, hca: &str) -> Vec<String> {
    use fabprobe::nccl::hca::HcaSpec;
    let t = fabprobe::probe::topo::probe(host);
    let v = NcclSettings::from_env(&[], fabprobe::nccl::version::NcclVersion::unknown("test"));
    let ports = fabprobe::probe::gids::probe(host, &v.gid_env()).ports;
    let spec = HcaSpec::parse(hca);
    let open = |dev: &str, sel: bool| {
        ports.iter().any(|p| {
            p.device == dev
                && p.state.as_deref() == Some("ACTIVE")
                && matches!(p.link_layer.as_deref(), Some("InfiniBand" | "Ethernet"))
                && (!sel || spec.selects(dev, p.port))
        })
    };
    if !t.nics.iter().any(|n| open(&n.ibdev, true)) {
        return Vec::new();
    }
    let col = |label: &str| t.labels.iter().position(|l| l == label);
    let mut out = Vec::new();
    for g in &t.gpus {
        let Some(row) = col(&g.label) else { continue };
        let best = |sel: bool| {
            t.nics
                .iter()
                .filter(|n| open(&n.ibdev, sel))
                .filter_map(|n| path_rank(&t.matrix[row][col(&n.label)?]))
                .min()
        };
        if let Some(all) = best(false)
            && best(true).is_none_or(|left| left > all)
        {
            out.push(g.label.clone());
        }
    }
    out
}

/// `NCCL_IB_HCA` against the topology, on every fixture with GPUs and NICs and a set of lists
/// made from its devices (exact `=`, `^` exclusion, prefixes, port suffixes, one device, all
/// but one): the GPUs `nccl_env.hca_strands_gpus` names are exactly those the oracle finds,
/// and a GPU it names is not also `nccl_env.gdr_off` (one cause, one finding).
#[test]
fn hca_lists_that_strand_gpus_name_them() {
    let mut cases = 0;
    let mut stranding = 0;
    for (fx, _, t) in gpu_nic_fixtures() {
        let devs: Vec<String> = t.nics.iter().map(|n| n.ibdev.clone()).collect();
        let half = devs.len().div_ceil(2);
        let mut lists = vec![
            format!("={}", devs[..half].join(",")),
            format!("^={}", devs[half..].join(",")),
            format!(
                "={}",
                devs.iter()
                    .map(|d| format!("{d}:1"))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            format!(
                "={}",
                devs[..half]
                    .iter()
                    .map(|d| format!("{d}:1"))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            devs.iter()
                .map(|d| d.trim_end_matches(|c: char| c.is_ascii_digit()).to_string())
                .next()
                .unwrap(),
            devs[0].clone(),
            format!("{}:2", devs[0]),
        ];
        for d in &devs {
            lists.push(format!("={d}"));
            lists.push(format!("^={d}"));
        }
        for hca in &lists {
            let mut h = Host::snapshot(&fx).unwrap();
            h = h.with_job_env([("NCCL_IB_HCA".to_string(), hca.clone())].into(), "test".into());
            let r = nccl_env::probe(&h, &NcclSettings::build(&h, None));
            let f = nccl_env::findings(&h, &r);
            let want = stranded_by(&h, hca);
            let got: Vec<String> = f
                .iter()
                .filter(|x| x.id == "nccl_env.hca_strands_gpus")
                .flat_map(|x| x.subject.split(", ").map(str::to_string).collect::<Vec<_>>())
                .collect();
            assert_eq!(got, want, "{} NCCL_IB_HCA={hca}", fx.display());
            let off: Vec<&str> = f
                .iter()
                .filter(|x| x.id == "nccl_env.gdr_off")
                .flat_map(|x| x.subject.split(", "))
                .collect();
            assert!(
                want.iter().all(|g| !off.contains(&g.as_str())),
                "{} {hca}: {off:?}",
                fx.display()
            );
            cases += 1;
            stranding += usize::from(!want.is_empty());
        }
    }
    assert!(
        cases > 40 && stranding > 5,
        "{cases} cases, {stranding} strand GPUs"
    );
}

/// The same judgement through the CLI: `nccl-env --env-file` and `check --env-file` name
/// the stranded GPUs of the H100 node when NCCL_IB_HCA keeps only the first socket's NICs.
#[test]
fn env_file_hca_that_strands_gpus_is_a_finding_in_both_commands() {
    let dir = tempfile::tempdir().unwrap();
    let env = dir.path().join("job.env");
    std::fs::write(&env, "NCCL_IB_HCA==mlx5_0,mlx5_1,mlx5_2,mlx5_3\n").unwrap();
    let root = Path::new("fixtures/h100-sxm-8gpu");
    let host = Host::snapshot(root).unwrap();
    let h = host.with_job_env(
        [("NCCL_IB_HCA".into(), "=mlx5_0,mlx5_1,mlx5_2,mlx5_3".into())].into(),
        "t".into(),
    );
    let want = stranded_by(&h, "=mlx5_0,mlx5_1,mlx5_2,mlx5_3").join(", ");
    assert!(!want.is_empty());
    for cmd in ["nccl-env", "check"] {
        let (_, v) = cli_json(root, &["--env-file", env.to_str().unwrap(), cmd]);
        let f = v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["id"] == "nccl_env.hca_strands_gpus")
            .unwrap_or_else(|| panic!("{cmd}: {v}"));
        assert_eq!(f["subject"], want.as_str(), "{cmd}");
        assert!(f["fix"].as_str().unwrap().contains("NCCL_IB_HCA=="), "{f}");
    }
}

/// Nothing to judge is NOT EVALUATED (exit 3), on every fixture where neither a GPU nor an
/// RDMA port shows up, and never elsewhere; the metrics carry the counts the verdict rests
/// on (`fabprobe_nccl_env_devices{kind}`), the GPUs as `topo` counts them (less those with no
/// NVIDIA driver: h100-drivers-unloaded) and the ports as the JSON lists them.
#[test]
fn nothing_to_judge_is_not_evaluated_and_the_metrics_count_devices() {
    let mut fixtures: Vec<String> = std::fs::read_dir("fixtures")
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("sys").is_dir())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    fixtures.sort();
    let mut nothing = 0;
    for fx in &fixtures {
        let root = format!("fixtures/{fx}");
        let run = |args: &[&str]| {
            let o = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
                .args(["--root", root.as_str()])
                .args(args)
                .output()
                .unwrap();
            (o.status.code().unwrap(), String::from_utf8(o.stdout).unwrap())
        };
        let (code, json) = run(&["--format", "json", "nccl-env"]);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let ports = v["data"]["ib"]["ports"].as_array().unwrap().len();
        let (_, topo) = run(&["--format", "json", "topo"]);
        let t: serde_json::Value = serde_json::from_str(&topo).unwrap();
        // The GPUs NCCL can use: topo's, less those NVIDIA's driver does not drive.
        let unusable = t["data"]["gpus_without_driver"].as_array().map_or(0, Vec::len);
        let gpus = t["data"]["gpus"].as_array().unwrap().len() - unusable;
        let empty = gpus == 0 && ports == 0;
        nothing += usize::from(empty);
        let said = v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["id"] == "nccl_env.nothing_to_judge" && f["severity"] == "unknown");
        assert_eq!(said, empty, "{fx}: {gpus} GPUs, {ports} ports");
        if empty {
            assert_eq!(code, 3, "{fx}: nothing to judge is exit 3");
        } else {
            assert_ne!(code, 3, "{fx}");
        }
        let (pcode, prom) = run(&["--format", "prom", "nccl-env"]);
        assert_eq!(pcode, code, "{fx}: prom's exit is the verdict's");
        for (kind, n) in [("gpu", gpus), ("rdma_port", ports)] {
            let line = format!("fabprobe_nccl_env_devices{{kind=\"{kind}\"}} {n}");
            assert!(prom.lines().any(|l| l == line), "{fx}: no {line:?} in\n{prom}");
        }
        let verdict = if empty { "3" } else { "" };
        assert!(
            !empty
                || prom
                    .lines()
                    .any(|l| l == format!("fabprobe_nccl_env_verdict {verdict}")),
            "{fx}: {prom}"
        );
    }
    assert!(
        nothing >= 1 && nothing < fixtures.len(),
        "{nothing} of {}",
        fixtures.len()
    );
}

/// NCCL's level order for the oracle below (`graph/paths.cc`): LOC, PIX, PXB, PHB, SYS and
/// the legacy integers 0-4; NCCL_NET_GDR_LEVEL's default (P2C) reaches what PXB does on PCI.
fn level_rank(v: &str) -> usize {
    match v {
        "LOC" | "0" => 0,
        "PIX" | "1" => 1,
        "PXB" | "P2C" | "2" => 2,
        "PHB" | "3" => 3,
        "SYS" | "4" => 4,
        other => panic!("{other}"),
    }
}

/// Each GPU's nearest NIC among those NCCL opens (an ACTIVE InfiniBand or Ethernet port,
/// no NCCL_IB_HCA), as a rank of `level_rank`, read from `topo`'s NCCL matrix and the
/// gids probe's port states: a second reading beside nccl-env's own.
fn nearest_ranks(host: &Host) -> Vec<(String, usize)> {
    let t = fabprobe::probe::topo::probe(host);
    let v = NcclSettings::from_env(&[], fabprobe::nccl::version::NcclVersion::unknown("test"));
    let ports = fabprobe::probe::gids::probe(host, &v.gid_env()).ports;
    let open = |dev: &str| {
        ports.iter().any(|p| {
            p.device == dev
                && p.state.as_deref() == Some("ACTIVE")
                && matches!(p.link_layer.as_deref(), Some("InfiniBand" | "Ethernet"))
        })
    };
    let col = |label: &str| t.labels.iter().position(|l| l == label);
    let mut out = Vec::new();
    for g in &t.gpus {
        let Some(row) = col(&g.label) else { continue };
        let best = t
            .nics
            .iter()
            .filter(|n| open(&n.ibdev))
            .filter_map(|n| {
                let c = t.nccl_matrix[row][col(&n.label)?].as_str();
                matches!(c, "PIX" | "PXB" | "PHB" | "SYS").then(|| level_rank(c))
            })
            .min();
        if let Some(b) = best {
            out.push((g.label.clone(), b));
        }
    }
    out
}

/// NCCL's GDR settings against the topology, on every fixture with GPUs and NICs x every
/// level NCCL_NET_GDR_LEVEL takes (names and legacy integers), NCCL_NET_GDR_READ 0 and 1,
/// NCCL_NET Socket (any case) and IB: the GPUs each `nccl_env.*_strands_gpus` finding names
/// are exactly those the setting keeps from GPUDirect RDMA to their nearest NIC where the
/// default gives it; a GPU the level strands is not also `nccl_env.gdr_off`.
#[test]
fn gdr_settings_that_strand_gpus_name_them() {
    let settings: Vec<(&str, &str, &str)> = ["LOC", "PIX", "PXB", "PHB", "SYS", "0", "1", "2", "3", "4"]
        .iter()
        .map(|l| ("NCCL_NET_GDR_LEVEL", *l, "nccl_env.gdr_level_strands_gpus"))
        .chain([
            ("NCCL_NET_GDR_READ", "0", "nccl_env.gdr_read_strands_gpus"),
            ("NCCL_NET_GDR_READ", "1", "nccl_env.gdr_read_strands_gpus"),
            ("NCCL_NET", "Socket", "nccl_env.net_strands_gpus"),
            ("NCCL_NET", "socket", "nccl_env.net_strands_gpus"),
            ("NCCL_NET", "IB", "nccl_env.net_strands_gpus"),
        ])
        .collect();
    let (mut cases, mut stranding) = (0, 0);
    for (fx, host, t) in gpu_nic_fixtures() {
        let near = nearest_ranks(&host);
        let reads_by_default = |gpu: &str| {
            let g = t.gpus.iter().find(|g| g.label == gpu).unwrap();
            g.sm.is_some_and(|sm| sm >= 80)
                || t.gpus.len() == 1
                || g.nvlinks.iter().any(|l| l.count > 0 && matches!(l.target_kind.as_str(), "gpu" | "nvswitch"))
        };
        for (name, value, id) in &settings {
            let h = Host::snapshot(&fx)
                .unwrap()
                .with_job_env([(name.to_string(), value.to_string())].into(), "test".into());
            let r = nccl_env::probe(&h, &NcclSettings::build(&h, None));
            let f = nccl_env::findings(&h, &r);
            let want: Vec<String> = near
                .iter()
                .filter(|(g, b)| {
                    *b <= 2
                        && match *name {
                            "NCCL_NET_GDR_LEVEL" => *b > level_rank(value),
                            "NCCL_NET_GDR_READ" => *value == "0" && reads_by_default(g),
                            _ => value.eq_ignore_ascii_case("Socket"),
                        }
                })
                .map(|(g, _)| g.clone())
                .collect();
            let named = |id: &str| -> Vec<String> {
                f.iter()
                    .filter(|x| x.id == id)
                    .flat_map(|x| x.subject.split(", ").map(str::to_string).collect::<Vec<_>>())
                    .collect()
            };
            let ctx = format!("{} {name}={value}", fx.display());
            assert_eq!(named(id), want, "{ctx}");
            if let Some(x) = f.iter().find(|x| x.id == *id) {
                assert_eq!(x.severity, fabprobe::finding::Severity::Warn, "{ctx}");
                assert!(x.message.starts_with(&format!("{name}={value} ")), "{ctx}: {}", x.message);
                assert!(x.fix.as_deref().is_some_and(|s| s.contains(name)), "{ctx}");
            }
            let off = named("nccl_env.gdr_off");
            assert!(want.iter().all(|g| !off.contains(g)), "{ctx}: {off:?}");
            cases += 1;
            stranding += usize::from(!want.is_empty());
        }
    }
    assert!(cases >= 60 && stranding >= 15, "{cases} cases, {stranding} strand GPUs");
}

/// Through the CLI: `check --env-file` with NCCL_NET_GDR_LEVEL=LOC on the healthy H100 node
/// under dgx-h100 adds one cause to what the same file without it gives: the setting,
/// naming the eight GPUs; the pairs `gdr` and the policy's `gdr.ready` find off by distance
/// are its symptoms (`evidence.also`), not causes.
#[test]
fn env_file_gdr_level_is_one_cause_in_check() {
    let root = Path::new("fixtures/h100-sxm-8gpu");
    let dir = tempfile::tempdir().unwrap();
    let bad = |name: &str, text: &str| {
        let env = dir.path().join(name);
        std::fs::write(&env, text).unwrap();
        let (code, v) = cli_json(root, &["--env-file", env.to_str().unwrap(), "check", "--policy", "dgx-h100"]);
        let found: Vec<serde_json::Value> = v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| matches!(f["severity"].as_str(), Some("fail" | "warn")))
            .cloned()
            .collect();
        (code, found)
    };
    let (_, before) = bad("plain.env", "NCCL_DEBUG=WARN\n");
    let (code, after) = bad("loc.env", "NCCL_DEBUG=WARN\nNCCL_NET_GDR_LEVEL=LOC\n");
    let new: Vec<&serde_json::Value> = after.iter().filter(|f| !before.contains(f)).collect();
    assert_eq!(new.len(), 1, "{new:#?}");
    assert_eq!(after.len(), before.len() + 1, "{after:#?}");
    assert_eq!(new[0]["id"], "nccl_env.gdr_level_strands_gpus");
    assert_eq!(new[0]["subject"], "GPU0, GPU1, GPU2, GPU3, GPU4, GPU5, GPU6, GPU7");
    let also = new[0]["evidence"]["also"].to_string();
    assert!(also.contains("gdr.off_distance") && also.contains("policy.gdr.ready"), "{also}");
    assert!(also.contains("GPU0-mlx5_0"), "{also}");
    assert_eq!(code, 1, "the policy wants GDR ready: a fail");
    let env = dir.path().join("loc.env");
    let (_, v) = cli_json(root, &["--env-file", env.to_str().unwrap(), "nccl-env"]);
    assert!(
        v["findings"].as_array().unwrap().iter().any(|f| f["id"] == "nccl_env.gdr_level_strands_gpus"),
        "{v}"
    );
}

/// `gdr.off_distance`'s fix follows where the level came from: a level set by hand below
/// NCCL's default that would cover the path is undone (`unset NCCL_NET_GDR_LEVEL`, as
/// nccl-env's own finding says it), from the job's environment file or its environment;
/// a level set by hand that the default would not cover either is raised, naming where it
/// was set; NCCL's own default is never told to be unset.
#[test]
fn gdr_off_distance_fix_undoes_a_level_set_by_hand() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/h100-sxm-8gpu");
    let fix_of = |v: &serde_json::Value, id: &str| -> Option<String> {
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["id"] == id)
            .map(|f| f["fix"].as_str().unwrap_or("").to_string())
    };
    let job = tempfile::NamedTempFile::new().unwrap();
    let jf = job.path().to_str().unwrap();
    for (set, unset) in [("LOC", true), ("0", true)] {
        std::fs::write(job.path(), format!("NCCL_NET_GDR_LEVEL={set}\n")).unwrap();
        let (_, g) = cli_json(&root, &["--env-file", jf, "gdr"]);
        let (_, lint) = cli_json(&root, &["--env-file", jf, "nccl-env"]);
        let gfix = fix_of(&g, "gdr.off_distance").unwrap_or_else(|| panic!("{set}: no gdr.off_distance: {g}"));
        let lfix = fix_of(&lint, "nccl_env.gdr_level_strands_gpus").expect("nccl-env names the setting");
        assert_eq!(gfix.starts_with("unset NCCL_NET_GDR_LEVEL"), unset, "{set}: {gfix}");
        assert!(lfix.starts_with("unset NCCL_NET_GDR_LEVEL"), "{lfix}");
        assert!(gfix.contains(&format!("set to {set} in ")), "names where it was set: {gfix}");
    }
    // Set by hand below a path the default does not cover either: raised, not unset.
    let two = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pcie-2socket");
    std::fs::write(job.path(), "NCCL_NET_GDR_LEVEL=PIX\n").unwrap();
    let (_, g) = cli_json(&two, &["--env-file", jf, "gdr"]);
    let gfix = fix_of(&g, "gdr.off_distance").expect("off by distance");
    assert!(!gfix.starts_with("unset") && gfix.contains("set NCCL_NET_GDR_LEVEL=SYS") && gfix.contains("now set to PIX in "), "{gfix}");
    // NCCL's default: a far NIC is not a setting to unset.
    let (_, g) = cli_json(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pcie-2socket"),
        &["gdr"],
    );
    let gfix = fix_of(&g, "gdr.off_distance").expect("pcie-2socket's GPUs are far from their NICs");
    assert!(!gfix.contains("unset"), "{gfix}");
}
