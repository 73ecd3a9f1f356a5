//! NVSwitch systems, part of `topo`: the NVSwitches (PCI class `0x068000`, vendor `0x10de`)
//! and the Fabric Manager that must set up their NVLink fabric before CUDA starts a job
//! (until it has, CUDA returns `cudaErrorSystemNotReady`, 802, "system not yet
//! initialized"), and each GPU's own fabric state from NVML.
//!
//! What is read, and from where:
//! * the NVSwitches and their bound driver: `/sys/bus/pci/devices/*/{class,vendor,device,driver}`;
//! * the Fabric Manager process: the host facts' scan of `/proc` (by executable, see
//!   [`crate::host::facts::identify_daemon`]);
//! * systemd's unit `nvidia-fabricmanager.service`: its cgroup (`/sys/fs/cgroup/system.slice/`
//!   with cgroup v2, `/sys/fs/cgroup/systemd/system.slice/` with v1) exists while the unit is
//!   active; absent there, the unit is inactive or failed (`systemctl status` says which);
//! * the Fabric Manager's version: `nv-fabricmanager --version` ([`crate::host::fabricmanager`]),
//!   beside the loaded driver's, `/proc/driver/nvidia/version` (NVML's when that is absent):
//!   the Fabric Manager refuses to start when the two differ;
//! * each GPU's fabric state and status: `nvmlDeviceGetGpuFabricInfo(V)` (Hopper and later).
//!
//! Unknown stays unknown: without the process scan, the version or NVML the rule says it was
//! not evaluated, never that it passed. A host without NVSwitches and without a GPU whose
//! fabric state NVML reports gets no section at all.

use serde::{Deserialize, Serialize};

use crate::finding::{Finding, Severity};
use crate::host::fabricmanager::parse_version_output;
use crate::host::nvml::GpuFabric;
use crate::host::{Host, Reply};
use crate::sysfs::pci;

/// The Fabric Manager's executable (and the name the process scan knows it by).
pub(crate) const FM_DAEMON: &str = "nv-fabricmanager";
/// Its systemd unit.
pub(crate) const FM_UNIT: &str = "nvidia-fabricmanager.service";
/// PCI class of an NVSwitch ("bridge, other", NVIDIA's `PCI_CLASS_BRIDGE_NVSWITCH` 0x0680).
const NVSWITCH_CLASS: u32 = 0x068000;
const NVIDIA: u32 = 0x10de;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FabricReport {
    pub nvswitches: Vec<NvSwitch>,
    /// Only on hosts with NVSwitches.
    pub fabric_manager: Option<FabricManager>,
    /// Each GPU's fabric state, in the report's GPU order.
    pub gpus: Vec<GpuFabricState>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvSwitch {
    pub pci_bus_id: String,
    /// PCI device id, `0x22a3` (H100's third-generation NVSwitch).
    pub device_id: Option<String>,
    /// The driver bound to it (`nvidia-nvswitch`); None when none is.
    pub driver: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FabricManager {
    pub process: FmProcess,
    pub service: FmService,
    /// `nv-fabricmanager --version`.
    pub version: Option<String>,
    /// Why the version is unknown.
    pub version_unknown: Option<String>,
    /// The loaded driver's version, which the Fabric Manager's must equal.
    pub driver_version: Option<String>,
    /// `/proc/driver/nvidia/version` or `nvml`.
    pub driver_version_source: Option<String>,
}

/// The `nv-fabricmanager` process, from the host facts' scan of `/proc`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum FmProcess {
    Running { pids: Vec<u32> },
    NotRunning,
    Unknown { reason: String },
}

/// systemd's `nvidia-fabricmanager.service`, from its cgroup.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum FmService {
    /// The unit's cgroup exists: systemd runs it.
    Active {
        cgroup: String,
        pids: Vec<u32>,
    },
    /// systemd's tree is there, the unit's cgroup is not: inactive or failed.
    NotActive {
        cgroup: String,
    },
    Unknown {
        reason: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuFabricState {
    pub label: String,
    pub pci_bus_id: String,
    /// `not_supported`, `not_started`, `in_progress`, `completed`; None when unknown.
    pub state: Option<String>,
    /// The registration's nvmlReturn_t and NVML's words for it.
    pub status: Option<u32>,
    pub status_text: Option<String>,
    /// Why the state is unknown, or the call's error (`Not Supported` before Hopper).
    pub note: Option<String>,
}

/// `NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build ...`
/// -> `550.54.15`: the first token of digits and dots on the `NVRM version` line. Pure.
pub(crate) fn parse_nvrm_version(s: &str) -> Option<String> {
    let line = s.lines().find(|l| l.starts_with("NVRM version:"))?;
    line.split_whitespace()
        .find(|t| {
            t.contains('.')
                && t.chars().all(|c| c.is_ascii_digit() || c == '.')
                && t.starts_with(|c: char| c.is_ascii_digit())
        })
        .map(str::to_string)
}

/// NVIDIA functions of class 0x068000, with their bound driver.
fn read_nvswitches(host: &Host) -> Vec<NvSwitch> {
    let base = "/sys/bus/pci/devices";
    let Ok(Some(names)) = host.list_dir(base) else {
        return Vec::new();
    };
    let hex = |bdf: &str, f: &str| {
        host.attr(format!("{base}/{bdf}/{f}"))
            .value()
            .and_then(pci::parse_hex_id)
    };
    names
        .iter()
        .filter(|n| pci::is_bdf(n))
        .filter(|bdf| hex(bdf, "class") == Some(NVSWITCH_CLASS) && hex(bdf, "vendor") == Some(NVIDIA))
        .map(|bdf| NvSwitch {
            pci_bus_id: bdf.clone(),
            device_id: hex(bdf, "device").map(|d| format!("0x{d:04x}")),
            driver: host
                .read_link(format!("{base}/{bdf}/driver"))
                .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned())),
        })
        .collect()
}

fn read_process(host: &Host) -> FmProcess {
    match host.facts().facts() {
        None => FmProcess::Unknown {
            reason: "the host facts (the process scan) are unavailable".into(),
        },
        Some(f) => match f.daemon_pids(FM_DAEMON) {
            None => FmProcess::Unknown {
                reason: "the processes were not scanned for system daemons (facts from an older snapshot)"
                    .into(),
            },
            Some(p) if p.is_empty() => FmProcess::NotRunning,
            Some(pids) => FmProcess::Running { pids },
        },
    }
}

fn read_service(host: &Host) -> FmService {
    for base in [
        "/sys/fs/cgroup/system.slice",
        "/sys/fs/cgroup/systemd/system.slice",
    ] {
        if !host.is_dir(base) {
            continue;
        }
        let cgroup = format!("{base}/{FM_UNIT}");
        return match host.read_opt(format!("{cgroup}/cgroup.procs")) {
            Ok(Some(t)) => FmService::Active {
                pids: t.split_whitespace().filter_map(|p| p.parse().ok()).collect(),
                cgroup,
            },
            Ok(None) => FmService::NotActive { cgroup },
            Err(e) => FmService::Unknown {
                reason: e.to_string(),
            },
        };
    }
    FmService::Unknown {
        reason: "no systemd cgroup tree (/sys/fs/cgroup/system.slice) is visible".into(),
    }
}

fn read_fabric_manager(host: &Host) -> FabricManager {
    // The running daemon's own binary where the scan saw it (distributions differ:
    // Bottlerocket's is /usr/libexec/nvidia/tesla/bin/nv-fabricmanager), else the packages'.
    let running_exe = host.facts().facts().and_then(|f| {
        f.system_daemons
            .iter()
            .find(|d| d.daemon == FM_DAEMON && d.identified_by == "exe")
            .and_then(|d| d.exe.clone())
    });
    let binary = running_exe
        .as_deref()
        .unwrap_or(crate::host::fabricmanager::FM_BINARY);
    let (version, version_unknown) = match host.fabric_manager_version(binary) {
        Reply::Ok(out) => match parse_version_output(&out) {
            Some(v) => (Some(v), None),
            None => (
                None,
                Some(format!(
                    "`nv-fabricmanager --version` printed no version: {}",
                    out.trim()
                )),
            ),
        },
        Reply::Error(e) => (None, Some(e)),
        Reply::NotCaptured => (
            None,
            Some("the snapshot has no fabprobe/fabricmanager.json".into()),
        ),
    };
    let proc_version = host
        .read_opt("/proc/driver/nvidia/version")
        .ok()
        .flatten()
        .and_then(|s| parse_nvrm_version(&s));
    let (driver_version, driver_version_source) = match proc_version {
        Some(v) => (Some(v), Some("/proc/driver/nvidia/version".to_string())),
        None => match host.nvml().facts().and_then(|n| n.driver_version.clone()) {
            Some(v) => (Some(v), Some("nvml".into())),
            None => (None, None),
        },
    };
    FabricManager {
        process: read_process(host),
        service: read_service(host),
        version,
        version_unknown,
        driver_version,
        driver_version_source,
    }
}

/// Each GPU's fabric state (`gpus`: label and bus id in the report's order).
fn read_gpus(host: &Host, gpus: &[(String, String)]) -> Vec<GpuFabricState> {
    let nvml = host.nvml();
    gpus.iter()
        .map(|(label, bdf)| {
            let mut s = GpuFabricState {
                label: label.clone(),
                pci_bus_id: bdf.clone(),
                state: None,
                status: None,
                status_text: None,
                note: None,
            };
            let ng = nvml
                .facts()
                .and_then(|f| f.gpus.iter().find(|g| &g.pci_bus_id == bdf));
            match (nvml, ng.and_then(|g| g.fabric.as_ref())) {
                (crate::host::NvmlState::Unavailable { reason }, _) => {
                    s.note = Some(format!("NVML: {reason}"))
                }
                (_, None) => {
                    s.note = Some("NVML's fabric state was not read (a snapshot from before it was)".into())
                }
                (_, Some(GpuFabric::Error(e))) => s.note = Some(format!("nvmlDeviceGetGpuFabricInfo: {e}")),
                (_, Some(GpuFabric::Info(i))) => {
                    s.state = Some(i.state.clone());
                    s.status = Some(i.status);
                    s.status_text = i.status_text.clone();
                }
            }
            s
        })
        .collect()
}

/// The section, or None where there is nothing to say: no NVSwitch and no GPU whose fabric
/// state NVML reports as anything but `not_supported`.
pub fn probe(host: &Host, gpus: &[(String, String)]) -> Option<FabricReport> {
    let nvswitches = read_nvswitches(host);
    let states = read_gpus(host, gpus);
    let fabric_gpus = states
        .iter()
        .any(|g| g.state.as_deref().is_some_and(|s| s != "not_supported"));
    if nvswitches.is_empty() && !fabric_gpus {
        return None;
    }
    Some(FabricReport {
        fabric_manager: (!nvswitches.is_empty()).then(|| read_fabric_manager(host)),
        nvswitches,
        gpus: states,
    })
}

// ---- judgement ------------------------------------------------------------------------

/// The Debian/Ubuntu and RHEL commands that install the Fabric Manager of driver `v`.
fn install_fm(v: &str) -> String {
    let branch = v.split('.').next().unwrap_or(v);
    format!(
        "install the Fabric Manager of driver {v}: `apt-get install nvidia-fabricmanager-{branch}={v}-1` \
         (Debian/Ubuntu) or `dnf install nvidia-fabric-manager-{v}-1` (RHEL), then \
         `systemctl restart nvidia-fabricmanager`"
    )
}

fn not_ready(g: &GpuFabricState) -> bool {
    match g.state.as_deref() {
        Some("not_started" | "in_progress") => true,
        Some("completed") => g.status.is_some_and(|s| s != 0),
        _ => false,
    }
}

/// GPUs whose fabric state or status is wrong, one finding per distinct state and status.
fn gpu_findings(r: &FabricReport, out: &mut Vec<Finding>) {
    let mut groups: Vec<(&GpuFabricState, Vec<&GpuFabricState>)> = Vec::new();
    for g in r.gpus.iter().filter(|g| not_ready(g)) {
        match groups
            .iter_mut()
            .find(|(k, _)| k.state == g.state && k.status == g.status)
        {
            Some((_, v)) => v.push(g),
            None => groups.push((g, vec![g])),
        }
    }
    for (k, v) in groups {
        let labels: Vec<&str> = v.iter().map(|g| g.label.as_str()).collect();
        let subject = match v.as_slice() {
            [one] => one.label.clone(),
            _ => labels.join(","),
        };
        let state = k.state.as_deref().unwrap_or("");
        let message = if state == "completed" {
            format!(
                "the GPU's fabric registration completed with an error: {} (NVML status {}); CUDA cannot use its NVLinks",
                k.status_text.as_deref().unwrap_or("no text"),
                k.status.unwrap_or(0)
            )
        } else {
            format!(
                "the GPU's fabric state is {} (NVML_GPU_FABRIC_STATE_{}): the Fabric Manager has not finished \
                 setting up its NVLink fabric, and until it has CUDA will return 'system not yet initialized' (802)",
                state,
                state.to_ascii_uppercase()
            )
        };
        out.push(
            Finding::new("topo.gpu_fabric_not_ready", Severity::Fail, subject, message)
                .evidence("gpus", labels)
                .evidence("fabric_state", state)
                .evidence("fabric_status", k.status)
                .evidence("fabric_status_text", k.status_text.clone())
                .fix(
                    "`systemctl status nvidia-fabricmanager` and the end of /var/log/fabricmanager.log; \
                     `nvidia-smi -q | grep -A 3 Fabric` shows each GPU's state; a GPU that stays unregistered \
                     with the Fabric Manager running needs `systemctl restart nvidia-fabricmanager` or a reboot",
                ),
        );
    }
}

/// The Fabric Manager's findings: not running, or not the driver's version (the usual reason
/// it does not run).
fn fm_findings(r: &FabricReport, fm: &FabricManager, out: &mut Vec<Finding>) -> bool {
    let n = r.nvswitches.len();
    let running = matches!(fm.process, FmProcess::Running { .. });
    let not_ready: Vec<&str> = r
        .gpus
        .iter()
        .filter(|g| not_ready(g))
        .map(|g| g.label.as_str())
        .collect();
    if let (Some(f), Some(d)) = (&fm.version, &fm.driver_version)
        && f != d
    {
        let also = if running { "" } else { "; it is not running" };
        out.push(
                Finding::new(
                    "topo.fabric_manager_version",
                    Severity::Fail,
                    "Fabric Manager",
                    format!(
                        "the Fabric Manager is version {f}, the loaded driver {d}: the Fabric Manager refuses to \
                         start with another driver version{also}, and without it CUDA will return 'system not yet \
                         initialized' (802)"
                    ),
                )
                .evidence("fabric_manager_version", f.clone())
                .evidence("driver_version", d.clone())
                .evidence("driver_version_source", fm.driver_version_source.clone())
                .evidence("process", serde_json::to_value(&fm.process).unwrap_or_default())
                .evidence("gpus_not_ready", not_ready)
                .fix(format!(
                    "{} (or, if driver {f} is installed but not loaded, reboot into it)",
                    install_fm(d)
                )),
            );
        return true;
    }
    if !matches!(fm.process, FmProcess::NotRunning) {
        return false;
    }
    let installed = !fm
        .version_unknown
        .as_deref()
        .is_some_and(|w| w.ends_with("is not installed"));
    let fix = match (installed, &fm.driver_version) {
        (true, _) => "`systemctl start nvidia-fabricmanager` (and `systemctl enable nvidia-fabricmanager`); \
                      if it does not stay up, `journalctl -u nvidia-fabricmanager -n 50` and /var/log/fabricmanager.log say why"
            .to_string(),
        (false, Some(d)) => format!("{}; `systemctl enable nvidia-fabricmanager`", install_fm(d)),
        (false, None) => "install the nvidia-fabricmanager package of the loaded driver's version, then \
                          `systemctl enable --now nvidia-fabricmanager`"
            .to_string(),
    };
    out.push(
        Finding::new(
            "topo.fabric_manager_not_running",
            Severity::Fail,
            "Fabric Manager",
            format!(
                "{n} NVSwitch{} and no Fabric Manager ({FM_DAEMON}) running: CUDA will return 'system not yet \
                 initialized' (802) and NCCL fails at init",
                if n == 1 { "" } else { "es" }
            ),
        )
        .evidence("nvswitches", n)
        .evidence("service", serde_json::to_value(&fm.service).unwrap_or_default())
        .evidence("fabric_manager_version", fm.version.clone().or(fm.version_unknown.clone()))
        .evidence("gpus_not_ready", not_ready)
        .fix(fix),
    );
    true
}

/// What could not be judged on this NVSwitch host, one line each.
fn unknowns(r: &FabricReport, fm: &FabricManager) -> Vec<String> {
    let mut why = Vec::new();
    if let FmProcess::Unknown { reason } = &fm.process {
        why.push(format!("whether the Fabric Manager runs: {reason}"));
    }
    // Not installed and not running: the not-running finding says it, with the install.
    let absent = matches!(fm.process, FmProcess::NotRunning)
        && fm
            .version_unknown
            .as_deref()
            .is_some_and(|w| w.ends_with("is not installed"));
    match (&fm.version, &fm.driver_version) {
        (Some(_), Some(_)) => {}
        (None, _) if absent => {}
        (None, _) => why.push(format!(
            "the Fabric Manager's version: {}",
            fm.version_unknown.as_deref().unwrap_or("unknown")
        )),
        (_, None) => {
            why.push("the driver's version: neither /proc/driver/nvidia/version nor NVML gave it".into())
        }
    }
    let unknown: Vec<&GpuFabricState> = r
        .gpus
        .iter()
        .filter(|g| {
            g.state.is_none()
                && !g
                    .note
                    .as_deref()
                    .is_some_and(|n| n.starts_with("nvmlDeviceGetGpuFabricInfo"))
        })
        .collect();
    if let Some(g) = unknown.first() {
        why.push(format!(
            "the GPUs' fabric state ({} GPU{}): {}",
            unknown.len(),
            if unknown.len() == 1 { "" } else { "s" },
            g.note.as_deref().unwrap_or("unknown")
        ));
    }
    why
}

/// The findings of the section: a Fabric Manager that is not running or not the driver's
/// version, GPUs whose fabric is not ready (folded into the Fabric Manager's finding when
/// that is their cause), and one `topo.fabric_not_evaluated` for what could not be read.
pub(crate) fn judge(r: &FabricReport) -> Vec<Finding> {
    let mut out = Vec::new();
    let fm_down = r
        .fabric_manager
        .as_ref()
        .is_some_and(|fm| fm_findings(r, fm, &mut out));
    if !fm_down {
        gpu_findings(r, &mut out);
    }
    if let Some(fm) = &r.fabric_manager {
        let why = unknowns(r, fm);
        if !why.is_empty() {
            out.push(
                Finding::new(
                    "topo.fabric_not_evaluated",
                    Severity::Unknown,
                    "Fabric Manager",
                    format!("not evaluated on this NVSwitch host: {}", why.join("; ")),
                )
                .evidence("reasons", why),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvrm_versions() {
        for (s, want) in [
            (
                "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  (dvs-builder@U16-I3-D08-1-2)  Mon Feb 19 20:42:40 UTC 2024\nGCC version:  gcc\n",
                Some("550.54.15"),
            ),
            (
                "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.08  Tue Mar  5 22:42:15 UTC 2024\n",
                Some("535.161.08"),
            ),
            (
                "NVRM version: NVIDIA UNIX aarch64 Kernel Module  570.86.15\n",
                Some("570.86.15"),
            ),
            ("GCC version: 12.3\n", None),
            ("", None),
        ] {
            assert_eq!(parse_nvrm_version(s).as_deref(), want, "{s:?}");
        }
    }

    #[test]
    fn install_commands_name_branch_and_version() {
        let s = install_fm("550.54.15");
        assert!(
            s.contains("`apt-get install nvidia-fabricmanager-550=550.54.15-1`"),
            "{s}"
        );
        assert!(
            s.contains("`dnf install nvidia-fabric-manager-550.54.15-1`"),
            "{s}"
        );
    }
}
