//! NVML facts: what the GPU driver says about each GPU (identity, PCI bus id, NVLinks).
//! Live through nvml-wrapper (which dlopens libnvidia-ml.so.1); in a snapshot from
//! `fabprobe/nvml.json`. Without the driver library the state is `Unavailable` with the
//! reason, and probes fall back to sysfs.
//!
//! Hand-written `unsafe` (calls through symbols nvml-wrapper already loaded):
//! `nvmlDeviceGetNvLinkRemoteDeviceType` (nvml-wrapper 0.13's own `remote_device_type` hands
//! NVML a pointer to a temporary and always answers `Unknown`), and the GPU's fabric state
//! `nvmlDeviceGetGpuFabricInfoV`/`nvmlDeviceGetGpuFabricInfo` with `nvmlErrorString`
//! (nvml-wrapper 0.13 does not wrap them; their structs come from nvml-wrapper-sys).

use serde::{Deserialize, Serialize};

/// NVML's NVLink count limit per GPU (NVML_NVLINK_MAX_LINKS).
pub(crate) const NVLINK_MAX_LINKS: u32 = 18;

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
    /// The GPU's registration with the NVLink fabric (Hopper and later); None when not
    /// asked (snapshots taken before it was captured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric: Option<GpuFabric>,
}

/// What `nvmlDeviceGetGpuFabricInfo(V)` answered: the info, or the call's error in NVML's
/// words (`Not Supported` before Hopper, or on a driver without the call).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuFabric {
    Info(GpuFabricInfo),
    Error(String),
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuFabricInfo {
    /// The call that answered: `nvmlDeviceGetGpuFabricInfoV` (struct v3 or v2) or
    /// `nvmlDeviceGetGpuFabricInfo`.
    pub call: String,
    /// `NVML_GPU_FABRIC_STATE_*` in snake case: `not_supported`, `not_started`,
    /// `in_progress`, `completed` (or the raw number when NVML adds one).
    pub state: String,
    /// The registration's `nvmlReturn_t` (meaningful once `completed`): 0 is success.
    pub status: u32,
    /// `nvmlErrorString(status)`: NVML's words for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_text: Option<String>,
    pub clique_id: u32,
    /// The fabric cluster's UUID (zero until registered).
    pub cluster_uuid: String,
    /// `healthMask` (struct v2 and later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_mask: Option<u32>,
}

/// `NVML_GPU_FABRIC_STATE_*` as `nvml.json` spells it.
pub(crate) fn fabric_state_name(raw: u8) -> String {
    match raw {
        0 => "not_supported".into(),
        1 => "not_started".into(),
        2 => "in_progress".into(),
        3 => "completed".into(),
        n => format!("state_{n}"),
    }
}

/// NVML's `NVML_STRUCT_VERSION(name, ver)`: the struct's size with the version in the top byte.
fn struct_version<T>(ver: u32) -> u32 {
    std::mem::size_of::<T>() as u32 | (ver << 24)
}

/// `nvmlErrorString(rc)` through the loaded symbol.
fn error_string(nvml: &nvml_wrapper::Nvml, rc: u32) -> Option<String> {
    let sym = nvml.lib().nvmlErrorString.as_ref().ok()?;
    // SAFETY: nvmlErrorString takes any nvmlReturn_t and returns a pointer to a static
    // NUL-terminated string (or NULL).
    let p = unsafe { sym(rc) };
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null, static and NUL-terminated per NVML's contract.
    Some(unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

fn uuid_text(b: &[u8; 16]) -> String {
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}

/// The GPU's fabric state: the versioned call with struct v3, then v2 (R550 drivers know
/// no v3), then the unversioned call (drivers before the V call). None when NVML has
/// neither symbol.
fn live_fabric(nvml: &nvml_wrapper::Nvml, dev: &nvml_wrapper::Device) -> Option<GpuFabric> {
    use nvml_wrapper_sys::bindings as b;
    const VERSION_MISMATCH: u32 = b::nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    let lib = nvml.lib();
    let mut last = None;
    if let Ok(sym) = lib.nvmlDeviceGetGpuFabricInfoV.as_ref() {
        for (ver, size_of) in [
            (3, struct_version::<b::nvmlGpuFabricInfo_v3_t>(3)),
            (2, struct_version::<b::nvmlGpuFabricInfo_v2_t>(2)),
        ] {
            // SAFETY: all-zero is a valid value of this plain C struct.
            let mut v: b::nvmlGpuFabricInfoV_t = unsafe { std::mem::zeroed() };
            v.version = size_of;
            // SAFETY: the handle is from this NVML session; `v` is a v3 struct, at least
            // as large as the version it announces, so NVML writes inside it.
            let rc = unsafe { sym(dev.handle(), &mut v) };
            if rc == VERSION_MISMATCH {
                last = Some(rc);
                continue;
            }
            if rc != 0 {
                return Some(GpuFabric::Error(error_string(nvml, rc).unwrap_or_else(|| format!("NVML error {rc}"))));
            }
            return Some(GpuFabric::Info(GpuFabricInfo {
                call: format!("nvmlDeviceGetGpuFabricInfoV (v{ver})"),
                state: fabric_state_name(v.state),
                status: v.status,
                status_text: error_string(nvml, v.status),
                clique_id: v.cliqueId,
                cluster_uuid: uuid_text(&v.clusterUuid),
                health_mask: Some(v.healthMask),
            }));
        }
    }
    let Ok(sym) = lib.nvmlDeviceGetGpuFabricInfo.as_ref() else {
        return last.map(|rc| GpuFabric::Error(error_string(nvml, rc).unwrap_or_default()));
    };
    // SAFETY: as above, with the unversioned struct the unversioned call writes.
    let mut v: b::nvmlGpuFabricInfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: the handle is from this NVML session; `v` is the struct the call writes.
    let rc = unsafe { sym(dev.handle(), &mut v) };
    if rc != 0 {
        return Some(GpuFabric::Error(error_string(nvml, rc).unwrap_or_else(|| format!("NVML error {rc}"))));
    }
    Some(GpuFabric::Info(GpuFabricInfo {
        call: "nvmlDeviceGetGpuFabricInfo".into(),
        state: fabric_state_name(v.state),
        status: v.status,
        status_text: error_string(nvml, v.status),
        clique_id: v.cliqueId,
        cluster_uuid: uuid_text(&v.clusterUuid),
        health_mask: None,
    }))
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
pub(crate) fn remote_device_type_name(raw: u32) -> &'static str {
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
pub(crate) fn normalize_bus_id(raw: &str) -> String {
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
pub(crate) fn collect_live() -> NvmlState {
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
            fabric: live_fabric(&nvml, &dev),
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
