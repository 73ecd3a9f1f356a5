//! `fabprobe links --interval` on a live host that has RDMA devices. The CI machine has
//! none, so the test gives it some: in a private mount namespace a tmpfs over `/sys` holds a
//! copy of a fixture's sysfs tree, and `fabprobe` (no `--root`: the live host, sampled twice)
//! runs there. Between its two samples the test moves counters the way traffic and a bad
//! cable would, and the report must carry exactly those moves over the measured interval.
//! Needs root (mount namespaces); without it the test fails under `FABPROBE_LAB=required`
//! (CI) and otherwise prints SKIPPED. The host's own `/sys` is never touched.

mod common;

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_fabprobe");

/// Runs inside `unshare --mount`: mount, copy, start fabprobe, wait for its first sample
/// (its `-v` line "sampling again"), move the counters, wait for the report.
const SCRIPT: &str = r#"
set -eu
fixture=$1 bin=$2 out=$3
mount -t tmpfs fabprobe-test /sys
cp -a "$fixture"/sys/. /sys/
"$bin" --format json -v links --interval 2 >"$out/report.json" 2>"$out/stderr.txt" &
pid=$!
i=0
until grep -q "sampling again" "$out/stderr.txt"; do
  i=$((i + 1)); [ "$i" -lt 400 ] || { echo "no first sample within 20 s" >&2; exit 3; }
  sleep 0.05
done
c=/sys/class/infiniband/mlx5_0/ports/1/counters
echo $(( $(cat $c/port_xmit_data) + 1000 )) > $c/port_xmit_data
echo $(( $(cat $c/symbol_error) + 7 )) > $c/symbol_error
set +e
wait $pid
echo $? > "$out/rc"
"#;

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

#[test]
fn interval_on_a_live_host_with_devices_reports_the_moves_between_its_samples() {
    if !is_root() {
        common::lab_unavailable("links_interval_live", "needs root for a private mount namespace");
        return;
    }
    if Command::new("unshare").arg("--version").output().is_err() {
        common::lab_unavailable("links_interval_live", "unshare (util-linux) is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/ib-degraded");
    let before = |name: &str| -> u64 {
        let p = format!("{fixture}/sys/class/infiniband/mlx5_0/ports/1/counters/{name}");
        std::fs::read_to_string(p).unwrap().trim().parse().unwrap()
    };
    let (xmit0, sym0) = (before("port_xmit_data"), before("symbol_error"));
    let o = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            SCRIPT,
            "sh",
            fixture,
            BIN,
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap_or_default();
    let err = read("stderr.txt");
    assert!(
        o.status.success(),
        "{}\n{}\nfabprobe: {err}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    // ib-degraded has faults of its own (a port down, a downtrained PCIe link): exit 1.
    assert_eq!(read("rc").trim(), "1", "{err}");
    let v: serde_json::Value =
        serde_json::from_str(&read("report.json")).unwrap_or_else(|e| panic!("{e}: {err}"));
    assert_eq!(v["host"]["source"], "live");
    let s = &v["data"]["sample"];
    assert_eq!(
        (s["kind"].as_str(), s["baseline"].as_str()),
        (Some("interval"), Some("live")),
        "{s}"
    );
    let secs = s["interval_s"].as_f64().unwrap();
    assert!((2.0..10.0).contains(&secs), "{s}");
    let devices = v["data"]["devices"].as_array().unwrap();
    let names: Vec<&str> = devices.iter().map(|d| d["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]);
    let counter = |name: &str| {
        devices[0]["ports"][0]["counters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name}"))
    };
    // port_xmit_data counts 4-byte words: 1,000 more words are 4,000 bytes.
    let x = counter("port_xmit_data");
    assert_eq!(x["value"], xmit0 + 1000, "{x}");
    assert_eq!(
        x["delta"],
        serde_json::json!({"kind": "value", "value": 1000, "wrapped": false}),
        "{x}"
    );
    assert_eq!(x["delta_bytes"], 4000, "{x}");
    // A data counter's rate is in bytes per second of the measured interval.
    let rate = x["rate_per_s"].as_f64().unwrap();
    assert!((rate - 4000.0 / secs).abs() < 1e-6, "{x} over {secs} s");
    let e = counter("symbol_error");
    assert_eq!(e["value"], sym0 + 7, "{e}");
    assert_eq!(e["delta"]["value"], 7, "{e}");
    // Every other counter of every port stood still between the samples.
    for d in devices {
        for p in d["ports"].as_array().unwrap() {
            for c in p["counters"].as_array().unwrap() {
                let moved =
                    d["name"] == "mlx5_0" && (c["name"] == "port_xmit_data" || c["name"] == "symbol_error");
                if !moved && c["delta"]["kind"] == "value" {
                    assert_eq!(c["delta"]["value"], 0, "{} {c}", d["name"]);
                }
            }
        }
    }
    // The rising error counter is a finding that names the port and shows its evidence.
    let f: Vec<&serde_json::Value> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["id"] == "links.errors_increasing" && f["subject"] == "mlx5_0/1")
        .collect();
    assert_eq!(f.len(), 1, "{}", v["findings"]);
    assert_eq!(f[0]["evidence"]["counter"], "symbol_error");
    assert_eq!(f[0]["evidence"]["delta"], "+7");
}
