//! The snapshot side folder `fabprobe/`: answers that are not files.
//!
//! Layout (all optional; a directory holding only `sys/` is a valid snapshot):
//! * `fabprobe/host.json`: [`HostMeta`] (hostname, kernel, captured_at, tool_version,
//!   env_source, skipped)
//! * `fabprobe/env.json`: `{"NCCL_IB_HCA": "mlx5_0", ...}` (only captured variables)
//! * `fabprobe/nvml.json`: [`NvmlState`](super::NvmlState)
//! * `fabprobe/facts.json`: [`FactsState`](super::FactsState) (OS, CPU, memory, memlock,
//!   device holders)
//! * `fabprobe/ethtool.json`: `{"eth0": {"ok": [["rx_prio3_pause", 12], ...]} | {"error": "EOPNOTSUPP"}}`
//!   (`ethtool -S` through the ioctl, names and order as the driver gives them)
//! * `fabprobe/dcb.json`: `{"eth0": {"ok": "<hex>"} | {"error": "EOPNOTSUPP"}}`, the raw
//!   `RTM_GETDCB`/`DCB_CMD_IEEE_GET` reply after its `nlmsghdr` (`struct dcbmsg` + attributes)
//! * `fabprobe/lldp.json`: `{"eth0": {"ok": ["<hex of a whole Ethernet frame>", ...]}}`, the
//!   LLDP frames heard with `qos --lldp` (none when nothing arrived)
//! * `fabprobe/ifaddrs.json`: `[{"name", "addr", "prefix_len", "running", "scope_id"?}]`, getifaddrs as
//!   NCCL sees it (absent in snapshots taken before it was captured)
//! * `fabprobe/fabricmanager.json`: [`FmAnswers`](super::fabricmanager::FmAnswers):
//!   `{"binary": "/usr/bin/nv-fabricmanager", "version_output": {"ok": "Fabric Manager version
//!   is : 550.54.15\n"} | {"error": "..."}}` (asked only on hosts with NVSwitches)
//! * `fabprobe/read-errors.json`: `{"/sys/.../gid_attrs/types/7": "EINVAL"}`, keyed by the
//!   canonical (symlink-free) host path; the file itself exists in the tree, empty.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{FactsState, HostError, NetAnswers, NvmlState};

pub const SIDE_DIR: &str = "fabprobe";

/// Facts about the host that the envelope carries.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostMeta {
    pub hostname: Option<String>,
    /// `uname -r`, from `/proc/sys/kernel/osrelease`.
    pub kernel: Option<String>,
    /// RFC 3339, UTC.
    pub captured_at: Option<String>,
    /// The fabprobe version that captured the snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_version: Option<String>,
    /// Where the captured environment came from (`shell`, `--env-from PID 1234`,
    /// `--env-file F`); absent in snapshots written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_source: Option<String>,
    /// The home whose `.nccl.conf` NCCL reads for this environment's user (the passwd
    /// home, not `$HOME`), so a replay reads the file the capture did; absent in older
    /// snapshots (then the environment's HOME).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_home: Option<String>,
    /// What capture could not read, one line each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
    /// `/proc/sys/kernel/random/boot_id`: new at every boot, so two samples with different
    /// ones straddle a reboot (every counter restarted); absent in older snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// `/proc/uptime`'s first field when captured: seconds since boot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uptime_s: Option<f64>,
}

impl HostMeta {
    pub fn live() -> HostMeta {
        HostMeta {
            hostname: hostname::get().ok().map(|h| h.to_string_lossy().into_owned()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .ok()
                .map(|s| s.trim().to_string()),
            captured_at: Some(humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()),
            tool_version: Some(env!("CARGO_PKG_VERSION").to_string()),
            // A capture says whose environment it holds; the replay then reads the same.
            env_source: Some("shell".into()),
            nccl_home: None,
            skipped: Vec::new(),
            boot_id: std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty()),
            uptime_s: std::fs::read_to_string("/proc/uptime")
                .ok()
                .and_then(|s| parse_uptime(&s)),
        }
    }
}

/// `/proc/uptime` (`"350735.47 234388.90\n"`: up and idle seconds) -> the first.
pub(crate) fn parse_uptime(s: &str) -> Option<f64> {
    s.split_whitespace()
        .next()?
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
}

/// Why the counters of `after` cannot be compared with those of `before` (the same host
/// sampled twice, `interval_s` apart): a reboot between them restarted every counter, so
/// a drop is not a wrap and a rise is not what happened in the interval. None when
/// nothing says so (an older snapshot without boot id or uptime is given the benefit).
pub(crate) fn counters_reset_between(
    before: &HostMeta,
    after: &HostMeta,
    interval_s: Option<f64>,
) -> Option<String> {
    if let (Some(b), Some(a)) = (&before.boot_id, &after.boot_id)
        && b != a
    {
        return Some(format!(
            "the host rebooted between the samples (boot id {b} -> {a})"
        ));
    }
    if let (Some(b), Some(a)) = (before.uptime_s, after.uptime_s)
        && a < b
    {
        return Some(format!(
            "the host rebooted between the samples (up {b:.0} s at the first, {a:.0} s at the second)"
        ));
    }
    if let (Some(a), Some(i)) = (after.uptime_s, interval_s)
        && a < i
    {
        return Some(format!(
            "the host had been up {a:.0} s at the second sample, less than the {i:.0} s between the samples: it rebooted"
        ));
    }
    None
}

/// Environment variables a probe may read, and so the only ones a snapshot keeps. Never a
/// secret: `FABPROBE_TOKEN` (the ring's job token) or anything named like a credential,
/// since snapshots are made to be handed to others.
pub(crate) fn env_is_captured(name: &str) -> bool {
    const SECRET_MARKS: &[&str] = &["TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL"];
    let upper = name.to_ascii_uppercase();
    if SECRET_MARKS.iter().any(|m| upper.contains(m)) {
        return false;
    }
    const PREFIXES: &[&str] = &["NCCL_", "UCX_", "FABPROBE_"];
    const EXACT: &[&str] = &[
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "NVIDIA_VISIBLE_DEVICES",
        "OMPI_MCA_btl_tcp_if_include",
        "OMPI_MCA_btl_tcp_if_exclude",
        "OMPI_MCA_oob_tcp_if_include",
        // nccl-env: where ~/.nccl.conf is, and where NCCL's dlopen looks for a net plugin.
        "HOME",
        "LD_LIBRARY_PATH",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p)) || EXACT.contains(&name)
}

const ERRNOS: &[(&str, i32)] = &[
    ("EPERM", libc::EPERM),
    ("ENOENT", libc::ENOENT),
    ("EIO", libc::EIO),
    ("ENXIO", libc::ENXIO),
    ("EACCES", libc::EACCES),
    ("EBUSY", libc::EBUSY),
    ("ENODEV", libc::ENODEV),
    ("EINVAL", libc::EINVAL),
    ("ENOSYS", libc::ENOSYS),
    ("ENODATA", libc::ENODATA),
    ("EOPNOTSUPP", libc::EOPNOTSUPP),
    ("ETIMEDOUT", libc::ETIMEDOUT),
    ("EAGAIN", libc::EAGAIN),
    ("EFBIG", libc::EFBIG),
];

pub(crate) fn errno_name(raw: i32) -> Option<&'static str> {
    ERRNOS.iter().find(|(_, n)| *n == raw).map(|(s, _)| *s)
}

pub(crate) fn errno_from_name(name: &str) -> Option<i32> {
    ERRNOS.iter().find(|(s, _)| *s == name).map(|(_, n)| *n)
}

pub(super) struct Loaded {
    pub meta: HostMeta,
    pub env: BTreeMap<String, String>,
    pub nvml: NvmlState,
    pub facts: FactsState,
    pub net: NetAnswers,
    pub fabric_manager: Option<super::fabricmanager::FmAnswers>,
    /// Keyed by the normalized path's bytes.
    pub read_errors: HashMap<std::ffi::OsString, String>,
    pub ifaddrs: Option<Vec<super::ifaddrs::IfAddr>>,
}

fn load_json<T: serde::de::DeserializeOwned>(
    root: &Path,
    name: &str,
    shown: &Path,
) -> Result<Option<T>, HostError> {
    let p = root.join(SIDE_DIR).join(name);
    // Errors name the snapshot as given (a tarball's temporary directory means nothing).
    let text = match super::read_capped(&p, super::MAX_READ_BYTES) {
        Ok(t) => String::from_utf8_lossy(&t).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(HostError::Snapshot {
                path: shown.to_path_buf(),
                msg: format!("cannot read {SIDE_DIR}/{name}: {e}"),
            });
        }
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| HostError::Snapshot {
            path: shown.to_path_buf(),
            // serde quotes the offending value: printed escaped.
            msg: format!("{SIDE_DIR}/{name}: {}", crate::text::printable(&e.to_string(), 300)),
        })
}

pub(super) fn load(root: &Path, shown: &Path) -> Result<Loaded, HostError> {
    let meta: HostMeta = load_json(root, "host.json", shown)?.unwrap_or_default();
    let mut env: BTreeMap<String, String> = load_json(root, "env.json", shown)?.unwrap_or_default();
    // Snapshots written before the filter knew about secrets may hold one: never use it.
    env.retain(|k, _| env_is_captured(k));
    let nvml = load_json(root, "nvml.json", shown)?.unwrap_or(NvmlState::Unavailable {
        reason: "the snapshot has no fabprobe/nvml.json".into(),
    });
    let mut facts = load_json(root, "facts.json", shown)?.unwrap_or(FactsState::Unavailable {
        reason: "the snapshot has no fabprobe/facts.json".into(),
    });
    // Older facts list the system's GPU daemons among the holders: never read them as jobs.
    if let FactsState::Available(f) = &mut facts
        && !f.daemons_scanned
    {
        f.separate_daemons();
    }
    let net = NetAnswers {
        ethtool: load_json(root, "ethtool.json", shown)?.unwrap_or_default(),
        dcb_ieee: load_json(root, "dcb.json", shown)?.unwrap_or_default(),
        lldp: load_json(root, "lldp.json", shown)?.unwrap_or_default(),
    };
    let raw: HashMap<PathBuf, String> = load_json(root, "read-errors.json", shown)?.unwrap_or_default();
    // The first bad entry in path order, so the message is the same on every run.
    let bad = raw
        .iter()
        .filter(|(_, e)| errno_from_name(e).is_none())
        .min_by(|a, b| a.0.cmp(b.0));
    if let Some((path, errno)) = bad {
        return Err(HostError::Snapshot {
            path: shown.to_path_buf(),
            msg: format!(
                "{SIDE_DIR}/read-errors.json: {}: unknown errno name {errno:?}",
                path.display()
            ),
        });
    }
    let ifaddrs = load_json(root, "ifaddrs.json", shown)?;
    let fabric_manager = load_json(root, "fabricmanager.json", shown)?;
    Ok(Loaded {
        fabric_manager,
        meta,
        env,
        nvml,
        facts,
        net,
        // Normalized (`//`, a trailing `/`), so the host's byte-keyed lookups find them.
        read_errors: raw
            .into_iter()
            .map(|(k, v)| (k.components().collect::<PathBuf>().into_os_string(), v))
            .collect(),
        ifaddrs,
    })
}

/// Unpack a `.tar.gz` snapshot into a private temporary directory, within
/// [`tarball::LIMITS`](super::tarball::LIMITS); a refusal names the archive and the entry.
pub(super) fn extract_tarball(path: &Path) -> Result<tempfile::TempDir, HostError> {
    extract_tarball_within(path, &super::tarball::LIMITS)
}

pub(super) fn extract_tarball_within(
    path: &Path,
    limits: &super::tarball::Limits,
) -> Result<tempfile::TempDir, HostError> {
    let err = |msg: String| HostError::Snapshot {
        path: path.to_path_buf(),
        msg,
    };
    let open = || std::fs::File::open(path).map(|f| flate2::read::GzDecoder::new(std::io::BufReader::new(f)));
    // Opened once here so a missing file is an I/O error naming it, not a refusal.
    open().map_err(|source| HostError::Io {
        op: "open snapshot",
        path: path.to_path_buf(),
        source,
    })?;
    let dir = tempfile::Builder::new()
        .prefix("fabprobe-snap")
        .tempdir()
        .map_err(|e| err(format!("cannot create a temporary directory: {e}")))?;
    super::tarball::unpack(open, dir.path(), limits).map_err(|r| err(r.to_string()))?;
    Ok(dir)
}

/// A tarball may hold the tree at its top or inside one directory (`node1/sys/...`).
pub(super) fn tarball_root(dir: &Path) -> PathBuf {
    let top: Vec<_> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    let has_tree = |p: &Path| p.join("sys").is_dir() || p.join(SIDE_DIR).is_dir() || p.join("proc").is_dir();
    if has_tree(dir) {
        return dir.to_path_buf();
    }
    // A real directory, not a link to one: the root must be the unpacked tree itself.
    let real_dir = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
    match top.as_slice() {
        [only] if real_dir(only) && has_tree(only) => only.clone(),
        _ => dir.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uptime_parses_the_first_field() {
        for (raw, want) in [
            ("350735.47 234388.90\n", Some(350735.47)),
            ("12.00 3.00", Some(12.0)),
            ("", None),
            ("x 1", None),
            ("-4 1", None),
        ] {
            assert_eq!(parse_uptime(raw), want, "{raw:?}");
        }
    }

    #[test]
    fn reset_between_samples_from_boot_id_or_uptime() {
        let m = |boot: Option<&str>, up: Option<f64>| HostMeta {
            boot_id: boot.map(str::to_string),
            uptime_s: up,
            ..HostMeta::default()
        };
        let cases = [
            // (before, after, interval, reset?)
            (
                m(Some("a"), Some(100.0)),
                m(Some("a"), Some(130.0)),
                Some(30.0),
                false,
            ),
            (
                m(Some("a"), Some(100.0)),
                m(Some("b"), Some(130.0)),
                Some(30.0),
                true,
            ),
            (m(None, Some(100.0)), m(None, Some(20.0)), Some(30.0), true),
            (m(None, None), m(None, Some(20.0)), Some(30.0), true),
            (m(None, None), m(None, Some(40.0)), Some(30.0), false),
            (m(None, None), m(None, None), Some(30.0), false),
            (m(Some("a"), None), m(None, None), None, false),
            (m(None, Some(5000.0)), m(None, Some(4000.0)), None, true),
        ];
        for (i, (b, a, iv, want)) in cases.iter().enumerate() {
            assert_eq!(counters_reset_between(b, a, *iv).is_some(), *want, "case {i}");
        }
    }

    #[test]
    fn env_filter_keeps_only_probe_variables() {
        assert!(env_is_captured("NCCL_IB_HCA"));
        assert!(env_is_captured("CUDA_VISIBLE_DEVICES"));
        assert!(env_is_captured("UCX_NET_DEVICES"));
        assert!(!env_is_captured("AWS_SECRET_ACCESS_KEY"));
        assert!(!env_is_captured("PATH"));
        assert!(!env_is_captured("CUDA_HOME"));
        // The ring's job token is a secret, not a probe input.
        assert!(env_is_captured("FABPROBE_COORDINATOR"));
        assert!(!env_is_captured("FABPROBE_TOKEN"));
        assert!(!env_is_captured("NCCL_SOME_SECRET"));
    }

    #[test]
    fn a_token_in_an_old_snapshot_is_not_loaded() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join(SIDE_DIR)).unwrap();
        std::fs::write(
            t.path().join(SIDE_DIR).join("env.json"),
            r#"{"FABPROBE_TOKEN": "s3cret", "NCCL_IB_HCA": "mlx5_0"}"#,
        )
        .unwrap();
        let l = load(t.path(), t.path()).unwrap();
        assert_eq!(l.env.keys().collect::<Vec<_>>(), vec!["NCCL_IB_HCA"]);
    }

    #[test]
    fn errno_names_round_trip() {
        for (name, raw) in ERRNOS {
            assert_eq!(errno_name(*raw), Some(*name));
            assert_eq!(errno_from_name(name), Some(*raw));
        }
    }

    #[test]
    fn bad_side_json_names_the_file() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join(SIDE_DIR)).unwrap();
        std::fs::write(t.path().join(SIDE_DIR).join("env.json"), "{not json").unwrap();
        let e = load(t.path(), t.path()).err().unwrap().to_string();
        assert!(e.contains("fabprobe/env.json"), "{e}");
        std::fs::write(t.path().join(SIDE_DIR).join("env.json"), "{}").unwrap();
        std::fs::write(
            t.path().join(SIDE_DIR).join("read-errors.json"),
            r#"{"/sys/x": "EWHAT"}"#,
        )
        .unwrap();
        let e = load(t.path(), t.path()).err().unwrap().to_string();
        assert!(e.contains("EWHAT") && e.contains("/sys/x"), "{e}");
    }

    #[test]
    fn unreadable_side_files_name_the_snapshot_as_given() {
        // `fabprobe` a file, not a folder (found by the archive property test).
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join(SIDE_DIR), "x").unwrap();
        let e = load(t.path(), Path::new("node1.tar.gz"))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.starts_with("snapshot node1.tar.gz: cannot read fabprobe/host.json: "),
            "{e}"
        );
        // Too large: refused, and named the same way.
        std::fs::remove_file(t.path().join(SIDE_DIR)).unwrap();
        std::fs::create_dir(t.path().join(SIDE_DIR)).unwrap();
        let f = std::fs::File::create(t.path().join(SIDE_DIR).join("nvml.json")).unwrap();
        f.set_len(super::super::MAX_READ_BYTES + 1).unwrap();
        let e = load(t.path(), Path::new("node1.tar.gz"))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.starts_with(
                "snapshot node1.tar.gz: cannot read fabprobe/nvml.json: larger than 16777216 bytes"
            ),
            "{e}"
        );
    }
}
