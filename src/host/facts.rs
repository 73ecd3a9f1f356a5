//! Host facts that `check` judges and `sweep` compares: OS, kernel, CPU, memory, uptime and
//! load (from the `sysinfo` crate), the locked-memory limit RDMA registration needs
//! (`getrlimit(RLIMIT_MEMLOCK)`), and the processes that still hold a GPU or RDMA device
//! file (a crashed job's leftovers make the next job fail). Live they are collected once, on
//! first use; in a snapshot they come from `fabprobe/facts.json`.

use std::path::Path;

use serde::{Deserialize, Serialize};

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
    /// The device files it holds open, e.g. `/dev/nvidia3`, `/dev/infiniband/uverbs0`.
    pub devices: Vec<String>,
}

/// Whether a `/proc/<pid>/fd/*` link target is a GPU or RDMA device file.
pub fn is_held_device(target: &str) -> bool {
    target.starts_with("/dev/nvidia") || target.starts_with("/dev/infiniband/uverbs")
}

/// Collect the facts of the machine this process runs on.
pub fn collect_live() -> FactsState {
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
    let (device_holders, processes_unreadable) = scan_holders(Path::new("/proc"));
    FactsState::Available(HostFacts {
        kernel: System::kernel_version(),
        os: System::long_os_version(),
        cpu_model,
        cpu_count,
        memory_total_bytes: Some(sys.total_memory()).filter(|m| *m > 0),
        uptime_s: Some(System::uptime()),
        load_avg: Some([load.one, load.five, load.fifteen]),
        memlock: memlock_live(),
        device_holders,
        processes_unreadable,
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

/// Walk `<proc>/<pid>/fd/*` for device holders, skipping this process. A process that
/// exits during the walk is simply gone; one whose fds are unreadable is counted.
pub fn scan_holders(proc_dir: &Path) -> (Vec<DeviceHolder>, u32) {
    let me = std::process::id();
    let mut holders = Vec::new();
    let mut unreadable = 0;
    let Ok(rd) = std::fs::read_dir(proc_dir) else {
        return (holders, 0);
    };
    let mut pids: Vec<u32> = rd
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|p| *p != me)
        .collect();
    pids.sort_unstable();
    for pid in pids {
        let fd_dir = proc_dir.join(pid.to_string()).join("fd");
        let fds = match std::fs::read_dir(&fd_dir) {
            Ok(fds) => fds,
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                unreadable += 1;
                continue;
            }
            Err(_) => continue,
        };
        let mut devices: Vec<String> = fds
            .flatten()
            .filter_map(|fd| std::fs::read_link(fd.path()).ok())
            .filter_map(|t| t.to_str().map(str::to_string))
            .filter(|t| is_held_device(t))
            .collect();
        if devices.is_empty() {
            continue;
        }
        devices.sort();
        devices.dedup();
        let comm = std::fs::read_to_string(proc_dir.join(pid.to_string()).join("comm"))
            .ok()
            .map(|s| s.trim_end().to_string());
        holders.push(DeviceHolder { pid, comm, devices });
    }
    (holders, unreadable)
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
                    devices: vec!["/dev/infiniband/uverbs1".into()]
                },
                DeviceHolder {
                    pid: 4242,
                    comm: Some("python".into()),
                    devices: vec!["/dev/nvidia0".into(), "/dev/nvidiactl".into()]
                },
            ]
        );
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
