//! Host facts that `check` judges and `sweep` compares: OS, kernel, CPU, memory, uptime and
//! load (from the `sysinfo` crate), the locked-memory limit RDMA registration needs
//! (`getrlimit(RLIMIT_MEMLOCK)`), and the processes that still hold a GPU or RDMA device
//! file (a crashed job's leftovers make the next job fail). Live they are collected once, on
//! first use; in a snapshot they come from `fabprobe/facts.json`.
//!
//! The system's own GPU daemons ([`GPU_DAEMONS`]: `nvidia-persistenced`, `nv-fabricmanager`,
//! DCGM's `nv-hostengine`, ...) hold the device files by design: they are listed apart as
//! [`SystemDaemon`]s, never as holders, so a health check does not read them as a job.

use std::path::Path;

use serde::{Deserialize, Serialize};

// One per host, read once: the size of the unavailable variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum FactsState {
    Available(HostFacts),
    Unavailable { reason: String },
}

impl FactsState {
    pub fn facts(&self) -> Option<&HostFacts> {
        match self {
            FactsState::Available(f) => Some(f),
            FactsState::Unavailable { .. } => None,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostFacts {
    /// `uname -r`.
    pub kernel: Option<String>,
    /// The distribution's long name, e.g. `Linux (Ubuntu 22.04)`.
    pub os: Option<String>,
    /// The first CPU's brand string.
    pub cpu_model: Option<String>,
    /// Logical CPUs.
    pub cpu_count: Option<u32>,
    pub memory_total_bytes: Option<u64>,
    pub uptime_s: Option<u64>,
    /// 1, 5 and 15 minute load averages.
    pub load_avg: Option<[f64; 3]>,
    /// RLIMIT_MEMLOCK of the process that collected the facts (a job inherits the same
    /// limit from the same daemon).
    pub memlock: Option<Memlock>,
    /// Processes with an open `/dev/nvidia*` or `/dev/infiniband/uverbs*`, by pid.
    #[serde(default)]
    pub device_holders: Vec<DeviceHolder>,
    /// Processes whose open files could not be read (not root): holders may be missing.
    #[serde(default)]
    pub processes_unreadable: u32,
    /// The system's GPU daemons found running (whether or not they hold a device file).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub system_daemons: Vec<SystemDaemon>,
    /// Whether every process was looked at for [`GPU_DAEMONS`]; false in facts written
    /// before the scan existed, so an absent daemon there is unknown, not stopped.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub daemons_scanned: bool,
}

/// The system's daemons that hold GPU or RDMA device files by design, by executable name,
/// and what each is for: every long-running program the packages below install (their
/// command-line tools, `nvidia-smi`, `dcgmi`, ..., come and go and are not listed). Their
/// comm is the name cut to 15 bytes (`nv-fabricmanage`), as the kernel keeps it.
///
/// Sources (the packages' file lists):
/// * the NVIDIA driver: NVIDIA/yum-packaging-nvidia-driver `nvidia-driver.spec` (`%files
///   cuda`: nvidia-cuda-mps-control, nvidia-cuda-mps-server), NVIDIA/yum-packaging-nvidia-
///   persistenced (nvidia-persistenced), NVIDIA/debian-packaging-nvidia-driver
///   `debian/nvidia-powerd.install.in` (nvidia-powerd); the vGPU guest driver's licensing
///   daemon nvidia-gridd (NVIDIA Virtual GPU Software Licensing User Guide);
/// * the NVSwitch and NVLink packages of the driver branch: nvidia-fabricmanager
///   (nv-fabricmanager), nvidia-imex (nvidia-imex), nvlsm (nvlsm);
/// * DCGM: NVIDIA/DCGM (nv-hostengine, and nvvs, the diagnostics it runs on the GPUs),
///   NVIDIA/dcgm-exporter (dcgm-exporter, which embeds a host engine by default);
/// * Kubernetes and containers: NVIDIA/k8s-device-plugin (nvidia-device-plugin,
///   gpu-feature-discovery), NVIDIA/mig-parted (nvidia-mig-manager), NVIDIA/libnvidia-
///   container (nvidia-container-cli, run by the runtime hook at every container start);
/// * rdma-core: `ibacm` (the InfiniBand address and route cache opens every verbs device;
///   rdma-core's other daemons, rdma-ndd, iwpmd and srp_daemon, use netlink or umad only).
pub const GPU_DAEMONS: &[(&str, &str)] = &[
    ("nvidia-persistenced", "keeps the GPUs initialised (persistence mode)"),
    ("nvidia-cuda-mps-control", "CUDA MPS control daemon"),
    ("nvidia-cuda-mps-server", "CUDA MPS server: runs the MPS clients' work on the GPU"),
    ("nvidia-powerd", "NVIDIA Dynamic Boost power daemon"),
    ("nvidia-gridd", "NVIDIA vGPU licensing daemon"),
    ("nv-fabricmanager", "NVIDIA Fabric Manager: sets up the NVSwitch fabric"),
    ("nvidia-imex", "NVIDIA IMEX: memory export across the NVLink domain"),
    ("nvlsm", "NVLink Subnet Manager"),
    ("nv-hostengine", "DCGM host engine"),
    ("nvvs", "DCGM diagnostics (NVIDIA Validation Suite), run by the host engine"),
    ("dcgm-exporter", "DCGM's Prometheus exporter (embeds a host engine)"),
    ("nvidia-device-plugin", "Kubernetes NVIDIA device plugin"),
    ("gpu-feature-discovery", "Kubernetes GPU feature discovery (node labels)"),
    ("nvidia-mig-manager", "Kubernetes MIG manager (mig-parted)"),
    ("nvidia-container-cli", "libnvidia-container: sets up a container's GPUs at its start"),
    ("ibacm", "rdma-core's InfiniBand address and route cache"),
];

/// A running system GPU daemon.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemDaemon {
    pub pid: u32,
    /// Which of [`GPU_DAEMONS`] it is: `nv-fabricmanager`.
    pub daemon: String,
    /// How it was recognised: `exe` (`/proc/<pid>/exe`, what really runs), `cmdline` (its
    /// argv\[0\], when exe is unreadable) or `comm` (the last resort, and in old snapshots).
    pub identified_by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exe: Option<String>,
    pub comm: Option<String>,
    /// The device files it holds open (empty when none, or when its fds were unreadable).
    #[serde(default)]
    pub devices: Vec<String>,
}

impl HostFacts {
    /// The running instances of one daemon (`nv-fabricmanager`); None when processes were
    /// not scanned for daemons (facts from an older snapshot).
    pub(crate) fn daemon_pids(&self, name: &str) -> Option<Vec<u32>> {
        self.daemons_scanned.then(|| {
            self.system_daemons
                .iter()
                .filter(|d| d.daemon == name)
                .map(|d| d.pid)
                .collect()
        })
    }

    /// Facts written before daemons were told apart list them among the holders: move the
    /// ones whose comm names a daemon (all such a snapshot recorded) to `system_daemons`.
    pub(crate) fn separate_daemons(&mut self) {
        let holders = std::mem::take(&mut self.device_holders);
        for h in holders {
            match identify_daemon(h.exe.as_deref(), None, h.comm.as_deref()) {
                Some((daemon, by)) => self.system_daemons.push(SystemDaemon {
                    pid: h.pid,
                    daemon: daemon.into(),
                    identified_by: by.into(),
                    exe: h.exe,
                    comm: h.comm,
                    devices: h.devices,
                }),
                None => self.device_holders.push(h),
            }
        }
    }
}

/// Which system daemon a process is, from what runs (`exe`, trusted when readable: a job
/// cannot fake it), else its argv\[0\], else its comm (15 bytes of the name). The answer
/// says which of the three it rests on.
pub(crate) fn identify_daemon(
    exe: Option<&str>,
    argv0: Option<&str>,
    comm: Option<&str>,
) -> Option<(&'static str, &'static str)> {
    let base = |p: &str| {
        let p = p.strip_suffix(" (deleted)").unwrap_or(p);
        p.rsplit('/').next().unwrap_or(p).to_string()
    };
    let by_name = |n: &str| GPU_DAEMONS.iter().map(|d| d.0).find(|d| *d == n);
    if let Some(e) = exe {
        return by_name(&base(e)).map(|d| (d, "exe"));
    }
    if let Some(a) = argv0.filter(|a| !a.is_empty()) {
        return by_name(&base(a)).map(|d| (d, "cmdline"));
    }
    let c = comm?;
    GPU_DAEMONS
        .iter()
        .map(|d| d.0)
        .find(|d| &d[..d.len().min(15)] == c)
        .map(|d| (d, "comm"))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memlock {
    pub soft: RLimit,
    pub hard: RLimit,
}

/// A resource limit: `"unlimited"` or `{"bytes": N}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RLimit {
    Unlimited,
    Bytes(u64),
}

impl RLimit {
    pub fn at_least(self, bytes: u64) -> bool {
        match self {
            RLimit::Unlimited => true,
            RLimit::Bytes(b) => b >= bytes,
        }
    }
    pub fn show(self) -> String {
        match self {
            RLimit::Unlimited => "unlimited".into(),
            RLimit::Bytes(b) if b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
            RLimit::Bytes(b) => format!("{} KiB", b >> 10),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceHolder {
    pub pid: u32,
    /// `/proc/<pid>/comm`.
    pub comm: Option<String>,
    /// `/proc/<pid>/exe`: what runs (absent in older snapshots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exe: Option<String>,
    /// The device files it holds open, e.g. `/dev/nvidia3`, `/dev/infiniband/uverbs0`.
    pub devices: Vec<String>,
}

/// Whether a `/proc/<pid>/fd/*` link target is a GPU or RDMA device file.
pub(crate) fn is_held_device(target: &str) -> bool {
    target.starts_with("/dev/nvidia") || target.starts_with("/dev/infiniband/uverbs")
}

/// Collect the facts of the machine this process runs on.
pub(crate) fn collect_live() -> FactsState {
    use sysinfo::{CpuRefreshKind, System};
    let mut sys = System::new();
    sys.refresh_memory();
    sys.refresh_cpu_list(CpuRefreshKind::nothing());
    let cpu_model = sys
        .cpus()
        .first()
        .map(|c| c.brand().trim().to_string())
        .filter(|b| !b.is_empty());
    let cpu_count = Some(sys.cpus().len() as u32).filter(|n| *n > 0);
    let load = System::load_average();
    let scan = scan_processes(Path::new("/proc"));
    FactsState::Available(HostFacts {
        kernel: System::kernel_version(),
        os: System::long_os_version(),
        cpu_model,
        cpu_count,
        memory_total_bytes: Some(sys.total_memory()).filter(|m| *m > 0),
        uptime_s: Some(System::uptime()),
        load_avg: Some([load.one, load.five, load.fifteen]),
        memlock: memlock_live(),
        device_holders: scan.holders,
        processes_unreadable: scan.unreadable,
        system_daemons: scan.daemons,
        daemons_scanned: scan.scanned,
    })
}

fn memlock_live() -> Option<Memlock> {
    use nix::sys::resource::{RLIM_INFINITY, Resource, getrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_MEMLOCK).ok()?;
    let conv = |v| {
        if v == RLIM_INFINITY {
            RLimit::Unlimited
        } else {
            RLimit::Bytes(v)
        }
    };
    Some(Memlock {
        soft: conv(soft),
        hard: conv(hard),
    })
}

/// What a walk of `/proc` found.
#[derive(Debug, Default, PartialEq)]
pub struct ProcScan {
    pub holders: Vec<DeviceHolder>,
    pub daemons: Vec<SystemDaemon>,
    /// Processes whose open files could not be read (and that are no known daemon).
    pub unreadable: u32,
    /// False when `/proc` itself could not be listed.
    pub scanned: bool,
}

/// Walk `<proc>/<pid>/fd/*` for device holders, skipping this process. A process that
/// exits during the walk is simply gone; one whose fds are unreadable is counted.
#[cfg(test)]
pub(crate) fn scan_holders(proc_dir: &Path) -> (Vec<DeviceHolder>, u32) {
    let s = scan_processes(proc_dir);
    (s.holders, s.unreadable)
}

/// [`scan_holders`], with the system's GPU daemons told apart from the jobs.
pub fn scan_processes(proc_dir: &Path) -> ProcScan {
    let me = std::process::id();
    let mut out = ProcScan::default();
    let Ok(rd) = std::fs::read_dir(proc_dir) else {
        return out;
    };
    out.scanned = true;
    let mut pids: Vec<u32> = rd
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|p| *p != me)
        .collect();
    pids.sort_unstable();
    for pid in pids {
        scan_one(&proc_dir.join(pid.to_string()), pid, &mut out);
    }
    out
}

fn scan_one(dir: &Path, pid: u32, out: &mut ProcScan) {
    let comm = std::fs::read_to_string(dir.join("comm"))
        .ok()
        .map(|s| s.trim_end().to_string());
    let devices = match std::fs::read_dir(dir.join("fd")) {
        Ok(fds) => {
            let mut d: Vec<String> = fds
                .flatten()
                .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                .filter_map(|t| t.to_str().map(str::to_string))
                .filter(|t| is_held_device(t))
                .collect();
            d.sort();
            d.dedup();
            Some(d)
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => None,
        Err(_) => return,
    };
    let holds = devices.as_ref().is_some_and(|d| !d.is_empty());
    // Only a holder, or a process whose comm names a daemon, needs its exe read.
    let maybe_daemon = comm
        .as_deref()
        .is_some_and(|c| identify_daemon(None, None, Some(c)).is_some());
    if !holds && !maybe_daemon {
        if devices.is_none() {
            out.unreadable += 1;
        }
        return;
    }
    let exe = std::fs::read_link(dir.join("exe"))
        .ok()
        .and_then(|p| p.to_str().map(str::to_string));
    let argv0 = if exe.is_none() {
        std::fs::read(dir.join("cmdline"))
            .ok()
            .and_then(|b| b.split(|c| *c == 0).next().map(|a| String::from_utf8_lossy(a).into_owned()))
    } else {
        None
    };
    if let Some((daemon, by)) = identify_daemon(exe.as_deref(), argv0.as_deref(), comm.as_deref()) {
        out.daemons.push(SystemDaemon {
            pid,
            daemon: daemon.into(),
            identified_by: by.into(),
            exe,
            comm,
            devices: devices.unwrap_or_default(),
        });
        return;
    }
    match devices {
        Some(devices) if !devices.is_empty() => out.holders.push(DeviceHolder {
            pid,
            comm,
            exe,
            devices,
        }),
        Some(_) => {}
        None => out.unreadable += 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn device_file_names() {
        for (t, held) in [
            ("/dev/nvidia0", true),
            ("/dev/nvidiactl", true),
            ("/dev/nvidia-uvm", true),
            ("/dev/infiniband/uverbs3", true),
            ("/dev/infiniband/rdma_cm", false),
            ("/dev/null", false),
            ("socket:[1234]", false),
        ] {
            assert_eq!(is_held_device(t), held, "{t}");
        }
    }

    #[test]
    fn scan_finds_holders_in_a_proc_tree() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path();
        for (pid, comm, targets) in [
            (
                "4242",
                "python",
                &["/dev/nvidia0", "/dev/nvidiactl", "/dev/null"][..],
            ),
            ("77", "ib_write_bw", &["/dev/infiniband/uverbs1"][..]),
            ("99", "bash", &["/dev/pts/0"][..]),
        ] {
            std::fs::create_dir_all(p.join(pid).join("fd")).unwrap();
            std::fs::write(p.join(pid).join("comm"), format!("{comm}\n")).unwrap();
            for (i, t) in targets.iter().enumerate() {
                symlink(t, p.join(pid).join("fd").join(i.to_string())).unwrap();
            }
        }
        std::fs::create_dir_all(p.join("self")).unwrap();
        let (h, unreadable) = scan_holders(p);
        assert_eq!(unreadable, 0);
        assert_eq!(
            h,
            vec![
                DeviceHolder {
                    pid: 77,
                    comm: Some("ib_write_bw".into()),
                    exe: None,
                    devices: vec!["/dev/infiniband/uverbs1".into()]
                },
                DeviceHolder {
                    pid: 4242,
                    comm: Some("python".into()),
                    exe: None,
                    devices: vec!["/dev/nvidia0".into(), "/dev/nvidiactl".into()]
                },
            ]
        );
    }

    #[test]
    fn daemons_are_known_by_what_runs() {
        for (exe, argv0, comm, want) in [
            (Some("/usr/bin/nv-fabricmanager"), None, Some("nv-fabricmanage"), Some(("nv-fabricmanager", "exe"))),
            (Some("/usr/bin/nvidia-persistenced (deleted)"), None, None, Some(("nvidia-persistenced", "exe"))),
            (Some("/usr/bin/nv-hostengine"), None, Some("nv-hostengine"), Some(("nv-hostengine", "exe"))),
            // A job that names itself like a daemon is still a job: its exe says what it is.
            (Some("/usr/bin/python3.10"), None, Some("nv-fabricmanage"), None),
            (None, Some("/usr/bin/nv-fabricmanager"), Some("nv-fabricmanage"), Some(("nv-fabricmanager", "cmdline"))),
            (None, Some("python3"), Some("nv-fabricmanage"), None),
            (None, None, Some("nv-fabricmanage"), Some(("nv-fabricmanager", "comm"))),
            (None, None, Some("nvidia-persiste"), Some(("nvidia-persistenced", "comm"))),
            (None, None, Some("nv-fabricmanager"), None),
            (None, None, Some("python"), None),
        ] {
            assert_eq!(identify_daemon(exe, argv0, comm), want, "{exe:?} {argv0:?} {comm:?}");
        }
    }

    #[test]
    fn scan_tells_daemons_from_jobs() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path();
        for (pid, comm, exe, targets) in [
            ("2143", "nvidia-persiste", "/usr/bin/nvidia-persistenced", &["/dev/nvidia0", "/dev/nvidiactl"][..]),
            ("2201", "nv-fabricmanage", "/usr/bin/nv-fabricmanager", &["/dev/nvidia-nvswitch0"][..]),
            // A daemon holding nothing is still found; a job posing as one is a holder.
            ("2300", "nv-hostengine", "/usr/bin/nv-hostengine", &[][..]),
            ("4242", "nv-fabricmanage", "/usr/bin/python3", &["/dev/nvidia3"][..]),
        ] {
            std::fs::create_dir_all(p.join(pid).join("fd")).unwrap();
            std::fs::write(p.join(pid).join("comm"), format!("{comm}\n")).unwrap();
            symlink(exe, p.join(pid).join("exe")).unwrap();
            for (i, t) in targets.iter().enumerate() {
                symlink(t, p.join(pid).join("fd").join(i.to_string())).unwrap();
            }
        }
        let s = scan_processes(p);
        assert!(s.scanned);
        let daemons: Vec<(u32, &str, &str)> =
            s.daemons.iter().map(|d| (d.pid, d.daemon.as_str(), d.identified_by.as_str())).collect();
        assert_eq!(
            daemons,
            [
                (2143, "nvidia-persistenced", "exe"),
                (2201, "nv-fabricmanager", "exe"),
                (2300, "nv-hostengine", "exe")
            ]
        );
        assert_eq!(s.holders.len(), 1);
        assert_eq!((s.holders[0].pid, s.holders[0].exe.as_deref()), (4242, Some("/usr/bin/python3")));
        let f = HostFacts {
            system_daemons: s.daemons,
            daemons_scanned: true,
            ..Default::default()
        };
        assert_eq!(f.daemon_pids("nv-fabricmanager"), Some(vec![2201]));
        assert_eq!(f.daemon_pids("nvlsm"), Some(vec![]));
        assert_eq!(HostFacts::default().daemon_pids("nv-fabricmanager"), None);
    }

    #[test]
    fn live_facts_are_read() {
        let FactsState::Available(f) = collect_live() else {
            panic!("live facts unavailable")
        };
        assert!(f.kernel.is_some() && f.cpu_count.unwrap_or(0) > 0);
        assert!(f.memory_total_bytes.unwrap_or(0) > 0);
        assert!(f.memlock.is_some());
    }

    #[test]
    fn rlimit_json_forms() {
        let m = Memlock {
            soft: RLimit::Bytes(65536),
            hard: RLimit::Unlimited,
        };
        let s = serde_json::to_string(&m).unwrap();
        assert_eq!(s, r#"{"soft":{"bytes":65536},"hard":"unlimited"}"#);
        assert_eq!(serde_json::from_str::<Memlock>(&s).unwrap(), m);
        assert!(RLimit::Unlimited.at_least(u64::MAX) && !RLimit::Bytes(64 << 10).at_least(1 << 20));
    }
}
