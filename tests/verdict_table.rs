//! Every fixture under every shipped policy: the verdict and the worst cause `check` names
//! (issue 29). A healthy node passes every policy that fits its hardware; a degraded one
//! fails for its hardware fault first; a changed rule shows here as one row.

use std::process::Command;

/// (fixture, policy, verdict, worst id, worst subject); no worst on a pass.
const TABLE: &[(&str, &str, &str, &str, &str)] = &[
    ("cloud-vm-flat", "default", "warn", "topo.numa_node_unknown", "GPU0, GPU1, GPU2, GPU3, mlx5_0, mlx5_1"),
    ("cloud-vm-flat", "dgx-h100", "fail", "policy.gpu.count", "GPUs"),
    ("cloud-vm-flat", "hdr-a100", "fail", "policy.gpu.count", "GPUs"),
    ("cloud-vm-flat", "roce-dcqcn", "fail", "policy.roce.count_min", "Ethernet ports"),
    ("container-sparse-gids", "default", "warn", "gids.sparse_table", "mlx5_0/1, mlx5_1/1"),
    ("container-sparse-gids", "dgx-h100", "fail", "policy.gpu.count", "GPUs"),
    ("container-sparse-gids", "hdr-a100", "fail", "policy.gpu.count", "GPUs"),
    ("container-sparse-gids", "roce-dcqcn", "fail", "policy.roce.mtu", "mlx5_0/1"),
    // No GPU and no RDMA device showed up: nothing was judged, never a pass.
    ("cpu-only", "default", "unknown", "", ""),
    ("cpu-only", "dgx-h100", "fail", "policy.gpu.count", "GPUs"),
    ("cpu-only", "hdr-a100", "fail", "policy.gpu.count", "GPUs"),
    ("cpu-only", "roce-dcqcn", "fail", "policy.roce.count_min", "Ethernet ports"),
    ("h100-gdr-broken", "default", "fail", "gdr.acs_redirect", "GPU0-mlx5_0 GPU1-mlx5_1 GPU2-mlx5_2 GPU3-mlx5_3 GPU4-mlx5_4 GPU5-mlx5_5 GPU6-mlx5_6 GPU7-mlx5_7"),
    // The eight pairs gdr.ready fails are symptoms of the gdr probe's causes (issue 42).
    ("h100-gdr-broken", "dgx-h100", "fail", "gdr.acs_redirect", "GPU0-mlx5_0 GPU1-mlx5_1 GPU2-mlx5_2 GPU3-mlx5_3 GPU4-mlx5_4 GPU5-mlx5_5 GPU6-mlx5_6 GPU7-mlx5_7"),
    ("h100-gdr-broken", "hdr-a100", "fail", "policy.ib.speed", "mlx5_0/1"),
    ("h100-gdr-broken", "roce-dcqcn", "fail", "gdr.acs_redirect", "GPU0-mlx5_0 GPU1-mlx5_1 GPU2-mlx5_2 GPU3-mlx5_3 GPU4-mlx5_4 GPU5-mlx5_5 GPU6-mlx5_6 GPU7-mlx5_7"),
    ("h100-gdr-acs", "default", "fail", "gdr.acs_redirect", "GPU0-mlx5_0 GPU1-mlx5_1 GPU2-mlx5_2 GPU3-mlx5_3 GPU4-mlx5_4 GPU5-mlx5_5 GPU6-mlx5_6 GPU7-mlx5_7"),
    ("h100-gdr-acs", "dgx-h100", "fail", "gdr.acs_redirect", "GPU0-mlx5_0 GPU1-mlx5_1 GPU2-mlx5_2 GPU3-mlx5_3 GPU4-mlx5_4 GPU5-mlx5_5 GPU6-mlx5_6 GPU7-mlx5_7"),
    ("h100-gdr-acs", "hdr-a100", "fail", "policy.ib.speed", "mlx5_0/1"),
    ("h100-gdr-acs", "roce-dcqcn", "fail", "gdr.acs_redirect", "GPU0-mlx5_0 GPU1-mlx5_1 GPU2-mlx5_2 GPU3-mlx5_3 GPU4-mlx5_4 GPU5-mlx5_5 GPU6-mlx5_6 GPU7-mlx5_7"),
    ("h100-gdr-iommu", "default", "fail", "gdr.iommu_translation", "GPU0-mlx5_0 GPU1-mlx5_1 GPU2-mlx5_2 GPU3-mlx5_3 GPU4-mlx5_4 GPU5-mlx5_5 GPU6-mlx5_6 GPU7-mlx5_7"),
    ("h100-gdr-iommu", "dgx-h100", "fail", "gdr.iommu_translation", "GPU0-mlx5_0 GPU1-mlx5_1 GPU2-mlx5_2 GPU3-mlx5_3 GPU4-mlx5_4 GPU5-mlx5_5 GPU6-mlx5_6 GPU7-mlx5_7"),
    ("h100-gdr-iommu", "hdr-a100", "fail", "policy.ib.speed", "mlx5_0/1"),
    ("h100-gdr-iommu", "roce-dcqcn", "fail", "gdr.iommu_translation", "GPU0-mlx5_0 GPU1-mlx5_1 GPU2-mlx5_2 GPU3-mlx5_3 GPU4-mlx5_4 GPU5-mlx5_5 GPU6-mlx5_6 GPU7-mlx5_7"),
    ("h100-port-down", "default", "fail", "links.port_not_active", "mlx5_2/1"),
    ("h100-port-down", "dgx-h100", "fail", "policy.ib.state", "mlx5_2/1"),
    ("h100-port-down", "hdr-a100", "fail", "policy.ib.state", "mlx5_2/1"),
    ("h100-port-down", "roce-dcqcn", "fail", "links.port_not_active", "mlx5_2/1"),
    ("h100-gpu-lost", "default", "fail", "topo.gpu_not_in_nvml", "0000:5b:00.0"),
    ("h100-gpu-lost", "dgx-h100", "fail", "topo.gpu_not_in_nvml", "0000:5b:00.0"),
    ("h100-gpu-lost", "hdr-a100", "fail", "topo.gpu_not_in_nvml", "0000:5b:00.0"),
    ("h100-gpu-lost", "roce-dcqcn", "fail", "topo.gpu_not_in_nvml", "0000:5b:00.0"),
    ("h100-eth-unregistered", "default", "fail", "topo.nic_not_in_rdma", "0000:e9:00.1"),
    ("h100-eth-unregistered", "dgx-h100", "fail", "topo.nic_not_in_rdma", "0000:e9:00.1"),
    ("h100-eth-unregistered", "hdr-a100", "fail", "topo.nic_not_in_rdma", "0000:e9:00.1"),
    ("h100-eth-unregistered", "roce-dcqcn", "fail", "topo.nic_not_in_rdma", "0000:e9:00.1"),
    // Every GPU without its driver is the first to act on; mlx5_core not loaded is the other cause.
    ("h100-drivers-unloaded", "default", "fail", "topo.gpu_driver_not_loaded", "nvidia"),
    ("h100-drivers-unloaded", "dgx-h100", "fail", "topo.gpu_driver_not_loaded", "nvidia"),
    ("h100-drivers-unloaded", "hdr-a100", "fail", "topo.gpu_driver_not_loaded", "nvidia"),
    ("h100-drivers-unloaded", "roce-dcqcn", "fail", "topo.gpu_driver_not_loaded", "nvidia"),
    ("h100-nic-unregistered", "default", "fail", "topo.nic_not_in_rdma", "0000:d5:00.0"),
    ("h100-nic-unregistered", "dgx-h100", "fail", "topo.nic_not_in_rdma", "0000:d5:00.0"),
    ("h100-nic-unregistered", "hdr-a100", "fail", "topo.nic_not_in_rdma", "0000:d5:00.0"),
    ("h100-nic-unregistered", "roce-dcqcn", "fail", "topo.nic_not_in_rdma", "0000:d5:00.0"),
    // The missing NIC beside GPU7 and mlx5_0's port down beside GPU0: two causes, each with
    // its own GPU's GDR pairs (issue 42); the policy's port state leads where it judges one.
    ("h100-nic-unregistered-port-down", "default", "fail", "topo.nic_not_in_rdma", "0000:d5:00.0"),
    ("h100-nic-unregistered-port-down", "dgx-h100", "fail", "policy.ib.state", "mlx5_0/1"),
    ("h100-nic-unregistered-port-down", "hdr-a100", "fail", "policy.ib.state", "mlx5_0/1"),
    ("h100-nic-unregistered-port-down", "roce-dcqcn", "fail", "topo.nic_not_in_rdma", "0000:d5:00.0"),
    ("h100-penny", "default", "pass", "", ""),
    ("h100-penny", "dgx-h100", "pass", "", ""),
    ("h100-penny", "hdr-a100", "fail", "policy.ib.speed", "mlx5_ib0/1"),
    ("h100-penny", "roce-dcqcn", "pass", "", ""),
    ("h100-sxm-8gpu-bad", "default", "fail", "topo.nvlink_below_majority", "GPU5"),
    ("h100-sxm-8gpu-bad", "dgx-h100", "fail", "policy.gpu.nvlink_min", "GPU5"),
    ("h100-sxm-8gpu-bad", "hdr-a100", "fail", "topo.nvlink_below_majority", "GPU5"),
    ("h100-sxm-8gpu-bad", "roce-dcqcn", "fail", "topo.nvlink_below_majority", "GPU5"),
    ("h100-sxm-8gpu", "default", "pass", "", ""),
    ("h100-sxm-8gpu", "dgx-h100", "pass", "", ""),
    ("h100-sxm-8gpu", "hdr-a100", "fail", "policy.ib.speed", "mlx5_0/1"),
    ("h100-sxm-8gpu", "roce-dcqcn", "pass", "", ""),
    ("ib-degraded-later", "default", "fail", "links.port_not_active", "mlx5_1/1"),
    ("ib-degraded-later", "dgx-h100", "fail", "policy.gpu.count", "GPUs"),
    ("ib-degraded-later", "hdr-a100", "fail", "policy.gpu.count", "GPUs"),
    ("ib-degraded-later", "roce-dcqcn", "fail", "policy.roce.count_min", "Ethernet ports"),
    ("ib-degraded-rebooted", "default", "fail", "links.port_not_active", "mlx5_1/1"),
    ("ib-degraded-rebooted", "dgx-h100", "fail", "policy.gpu.count", "GPUs"),
    ("ib-degraded-rebooted", "hdr-a100", "fail", "policy.gpu.count", "GPUs"),
    ("ib-degraded-rebooted", "roce-dcqcn", "fail", "policy.roce.count_min", "Ethernet ports"),
    ("ib-degraded", "default", "fail", "links.port_not_active", "mlx5_1/1"),
    ("ib-degraded", "dgx-h100", "fail", "policy.gpu.count", "GPUs"),
    ("ib-degraded", "hdr-a100", "fail", "policy.gpu.count", "GPUs"),
    ("ib-degraded", "roce-dcqcn", "fail", "policy.roce.count_min", "Ethernet ports"),
    ("old-kernel-nopma", "default", "fail", "links.rate_below_peers", "mlx4_0/2"),
    ("old-kernel-nopma", "dgx-h100", "fail", "policy.gpu.count", "GPUs"),
    ("old-kernel-nopma", "hdr-a100", "fail", "policy.gpu.count", "GPUs"),
    ("old-kernel-nopma", "roce-dcqcn", "fail", "links.rate_below_peers", "mlx4_0/2"),
    ("opa-hfi1", "default", "pass", "", ""),
    ("opa-hfi1", "dgx-h100", "fail", "policy.gpu.count", "GPUs"),
    ("opa-hfi1", "hdr-a100", "fail", "policy.gpu.count", "GPUs"),
    ("opa-hfi1", "roce-dcqcn", "fail", "policy.roce.count_min", "Ethernet ports"),
    ("pcie-2socket", "default", "fail", "topo.pcie_width_degraded", "GPU3"),
    ("pcie-2socket", "dgx-h100", "fail", "policy.gpu.count", "GPUs"),
    ("pcie-2socket", "hdr-a100", "fail", "policy.gpu.count", "GPUs"),
    ("pcie-2socket", "roce-dcqcn", "fail", "topo.pcie_width_degraded", "GPU3"),
    ("roce-bond-host", "default", "pass", "", ""),
    ("roce-bond-host", "dgx-h100", "fail", "policy.gpu.count", "GPUs"),
    ("roce-bond-host", "hdr-a100", "fail", "policy.gpu.count", "GPUs"),
    ("roce-bond-host", "roce-dcqcn", "fail", "policy.roce.all_alike", "mlx5_bond_0/1"),
    ("roce-pause-storm-later", "default", "fail", "qos.pause_storm", "ens1f0np0 (mlx5_0/1)"),
    ("roce-pause-storm-later", "dgx-h100", "fail", "policy.gpu.count", "GPUs"),
    ("roce-pause-storm-later", "hdr-a100", "fail", "policy.gpu.count", "GPUs"),
    ("roce-pause-storm-later", "roce-dcqcn", "fail", "qos.pause_storm", "ens1f0np0 (mlx5_0/1)"),
    ("roce-pause-storm", "default", "warn", "qos.pause_storm", "ens1f0np0 (mlx5_0/1)"),
    ("roce-pause-storm", "dgx-h100", "fail", "policy.gpu.count", "GPUs"),
    ("roce-pause-storm", "hdr-a100", "fail", "policy.gpu.count", "GPUs"),
    ("roce-pause-storm", "roce-dcqcn", "warn", "qos.pause_storm", "ens1f0np0 (mlx5_0/1)"),
    ("roce-qos-mismatch", "default", "fail", "qos.roce_priority_not_lossless", "ens1f0np0 (mlx5_0/1)"),
    ("roce-qos-mismatch", "dgx-h100", "fail", "policy.gpu.count", "GPUs"),
    ("roce-qos-mismatch", "hdr-a100", "fail", "policy.gpu.count", "GPUs"),
    ("roce-qos-mismatch", "roce-dcqcn", "fail", "policy.roce.pfc_priorities", "mlx5_0/1"),
    ("rxe-vm", "default", "pass", "", ""),
    ("rxe-vm", "dgx-h100", "fail", "policy.gpu.count", "GPUs"),
    ("rxe-vm", "hdr-a100", "fail", "policy.gpu.count", "GPUs"),
    ("rxe-vm", "roce-dcqcn", "pass", "", ""),
];

#[test]
fn every_fixture_under_every_policy_has_its_verdict_and_worst_cause() {
    let mut wrong = Vec::new();
    for (fixture, policy, verdict, id, subject) in TABLE {
        let o = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
            .args(["--root", &format!("fixtures/{fixture}"), "--format", "json", "check", "--policy", policy])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{fixture} {policy}: {e}: {}", String::from_utf8_lossy(&o.stderr)));
        let d = &v["data"];
        let got = (
            d["verdict"].as_str().unwrap_or("").to_string(),
            d["worst"]["id"].as_str().unwrap_or("").to_string(),
            d["worst"]["subject"].as_str().unwrap_or("").to_string(),
        );
        if got != (verdict.to_string(), id.to_string(), subject.to_string()) {
            wrong.push(format!("{fixture} {policy}: {got:?}"));
        }
        // The exit status follows the verdict: 1 on a fail, 3 when nothing was judged, else 0.
        let want = match *verdict {
            "fail" => 1,
            "unknown" => 3,
            _ => 0,
        };
        assert_eq!(o.status.code(), Some(want), "{fixture} {policy}");
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // Every fixture with a snapshot tree is in the table, under every shipped policy.
    let fixtures = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("sys").is_dir())
        .count();
    assert_eq!(TABLE.len(), fixtures * 4);
}
