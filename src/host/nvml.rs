//! NVML facts: what the GPU driver says about each GPU (identity, PCI bus id, NVLinks).
//! Live through nvml-wrapper (which dlopens libnvidia-ml.so.1); in a snapshot from
//! `fabprobe/nvml.json`. Without the driver library the state is `Unavailable` with the
//! reason, and probes fall back to sysfs.
//!
//! Hand-written `unsafe` (the one call here): `nvmlDeviceGetNvLinkRemoteDeviceType` through
//! the symbol nvml-wrapper already loaded. nvml-wrapper 0.13's own `remote_device_type` hands
//! NVML a pointer to a temporary and always answers `Unknown`; no other crate wraps NVML.

use serde::{Deserialize, Serialize};

/// NVML's NVLink count limit per GPU (NVML_NVLINK_MAX_LINKS).
pub const NVLINK_MAX_LINKS: u32 = 18;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum NvmlState {
    Available(NvmlFacts),
    Unavailable { reason: String },
}

impl NvmlState {
    pub fn facts(&self) -> Option<&NvmlFacts> {
        match self {
            NvmlState::Available(f) => Some(f),
            NvmlState::Unavailable { .. } => None,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NvmlFacts {
    pub driver_version: Option<String>,
    /// `nvmlSystemGetCudaDriverVersion`, e.g. 12040.
    pub cuda_driver_version: Option<i32>,
    pub gpus: Vec<NvmlGpu>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NvmlGpu {
    /// NVML index (the `dev` of NCCL's topology XML).
    pub index: u32,
    pub name: Option<String>,
    pub uuid: Option<String>,
    /// Normalized to sysfs spelling: `0000:1b:00.0`.
    pub pci_bus_id: String,
    /// `nvmlDeviceGetNumaNodeId`: the GPU's own memory node on C2C systems.
    #[serde(default)]
    pub numa_node_id: Option<i32>,
    /// `nvmlDeviceGetCudaComputeCapability` (9, 0 on H100): NCCL's `sm` = major*10+minor.
    #[serde(default)]
    pub cuda_cc_major: Option<i32>,
    #[serde(default)]
    pub cuda_cc_minor: Option<i32>,
    #[serde(default)]
    pub bar1_total_bytes: Option<u64>,
    #[serde(default)]
    pub pcie_link_gen_current: Option<u32>,
    #[serde(default)]
    pub pcie_link_gen_max: Option<u32>,
    #[serde(default)]
    pub pcie_link_width_current: Option<u32>,
    #[serde(default)]
    pub pcie_link_width_max: Option<u32>,
    /// Every link NVML reports, active or not.
    #[serde(default)]
    pub nvlinks: Vec<NvLink>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NvLink {
    pub link: u32,
    pub active: bool,
    /// The far end's PCI bus id (sysfs spelling); an NVSwitch or a peer GPU.
    pub remote_pci_bus_id: Option<String>,
    /// `nvmlDeviceGetNvLinkRemoteDeviceType`: `gpu`, `ibmnpu`, `switch` or `unknown`; None
    /// when NVML could not say (or the snapshot predates the field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_device_type: Option<String>,
}

/// NVML's `nvmlIntNvLinkDeviceType_t` in the spelling `nvml.json` keeps.
pub fn remote_device_type_name(raw: u32) -> &'static str {
    match raw {
        0 => "gpu",
        1 => "ibmnpu",
        2 => "switch",
        _ => "unknown",
    }
}

/// What is at the far end of one NVLink, straight from the driver. Called through the raw
/// symbol: nvml-wrapper 0.13's `remote_device_type` hands NVML a pointer to a temporary
/// and so always answers `Unknown`.
fn live_remote_device_type(
    nvml: &nvml_wrapper::Nvml,
    dev: &nvml_wrapper::Device,
    link: u32,
) -> Option<String> {
    let sym = nvml.lib().nvmlDeviceGetNvLinkRemoteDeviceType.as_ref().ok()?;
    let mut raw: u32 = 0xff;
    // SAFETY: the handle comes from this NVML session, which outlives the call, and `raw`
    // is the c_uint the function writes.
    let rc = unsafe { sym(dev.handle(), link, &mut raw) };
    (rc == 0).then(|| remote_device_type_name(raw).to_string())
}

/// NVML's `00000000:1B:00.0` (or `0000:1B:00.0`) in sysfs spelling `0000:1b:00.0`.
pub fn normalize_bus_id(raw: &str) -> String {
    let raw = raw.trim().to_ascii_lowercase();
    match raw.split_once(':') {
        Some((dom, rest)) if dom.len() > 4 => {
            let dom = &dom[dom.len() - 4..];
            format!("{dom}:{rest}")
        }
        _ => raw,
    }
}

/// Ask the driver. Every per-GPU call is optional: a failing call leaves that field `None`.
pub fn collect_live() -> NvmlState {
    use nvml_wrapper::Nvml;
    let nvml = match Nvml::init() {
        Ok(n) => n,
        Err(e) => {
            return NvmlState::Unavailable {
                reason: format!("NVML could not be loaded: {e}"),
            };
        }
    };
    let count = match nvml.device_count() {
        Ok(c) => c,
        Err(e) => {
            return NvmlState::Unavailable {
                reason: format!("nvmlDeviceGetCount failed: {e}"),
            };
        }
    };
    let mut gpus = Vec::new();
    for index in 0..count {
        let Ok(dev) = nvml.device_by_index(index) else {
            continue;
        };
        let Ok(pci) = dev.pci_info() else { continue };
        let mut nvlinks = Vec::new();
        for link in 0..NVLINK_MAX_LINKS {
            let l = dev.link_wrapper_for(link);
            match l.is_active() {
                Ok(active) => nvlinks.push(NvLink {
                    link,
                    active,
                    remote_pci_bus_id: if active {
                        l.remote_pci_info().ok().map(|p| normalize_bus_id(&p.bus_id))
                    } else {
                        None
                    },
                    remote_device_type: if active {
                        live_remote_device_type(&nvml, &dev, link)
                    } else {
                        None
                    },
                }),
                // NOT_SUPPORTED / INVALID_ARGUMENT past the GPU's last link.
                Err(_) => continue,
            }
        }
        gpus.push(NvmlGpu {
            index,
            name: dev.name().ok(),
            uuid: dev.uuid().ok(),
            pci_bus_id: normalize_bus_id(&pci.bus_id),
            // NOT_SUPPORTED off coherent (C2C) systems, where nvidia-smi prints N/A too.
            numa_node_id: dev.numa_node_id().ok().and_then(|v| i32::try_from(v).ok()),
            cuda_cc_major: dev.cuda_compute_capability().ok().map(|c| c.major),
            cuda_cc_minor: dev.cuda_compute_capability().ok().map(|c| c.minor),
            bar1_total_bytes: dev.bar1_memory_info().ok().map(|b| b.total),
            pcie_link_gen_current: dev.current_pcie_link_gen().ok(),
            pcie_link_gen_max: dev.max_pcie_link_gen().ok(),
            pcie_link_width_current: dev.current_pcie_link_width().ok(),
            pcie_link_width_max: dev.max_pcie_link_width().ok(),
            nvlinks,
        });
    }
    NvmlState::Available(NvmlFacts {
        driver_version: nvml.sys_driver_version().ok(),
        cuda_driver_version: nvml.sys_cuda_driver_version().ok(),
        gpus,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_normalize_to_sysfs_spelling() {
        assert_eq!(normalize_bus_id("00000000:1B:00.0"), "0000:1b:00.0");
        assert_eq!(normalize_bus_id("0000:C1:00.0"), "0000:c1:00.0");
        assert_eq!(normalize_bus_id("0001:0a:00.0"), "0001:0a:00.0");
    }

    #[test]
    fn state_json_round_trips() {
        let s = NvmlState::Available(NvmlFacts {
            driver_version: Some("550.54.15".into()),
            cuda_driver_version: Some(12040),
            gpus: vec![NvmlGpu {
                index: 0,
                pci_bus_id: "0000:1b:00.0".into(),
                ..Default::default()
            }],
        });
        let j = serde_json::to_string(&s).unwrap();
        assert!(j.contains(r#""state":"available""#), "{j}");
        assert_eq!(serde_json::from_str::<NvmlState>(&j).unwrap(), s);
        let u: NvmlState = serde_json::from_str(r#"{"state":"unavailable","reason":"x"}"#).unwrap();
        assert_eq!(u, NvmlState::Unavailable { reason: "x".into() });
    }
}
