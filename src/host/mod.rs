//! `Host`: the only door to the machine.
//!
//! Every file a probe reads goes through one root prefix (`/` live, a directory for a
//! snapshot); symlinks are resolved inside that root, so a snapshot can never leak to the
//! live `/sys`. Answers that are not files (NVML, the `NCCL_*` environment, host facts) come
//! from the same object: live calls, or the JSON side folder `fabprobe/` of a snapshot
//! (the ethtool statistics ioctl and DCB netlink too: [`netif`]).
//! A read that failed when the snapshot was captured (EINVAL on an empty GID slot, EACCES
//! as non-root) is replayed as that same failure, never as "file missing".

pub mod command;
pub mod fabricmanager;
pub mod facts;
pub mod ifaddrs;
pub mod netif;
// NVML symbols nvml-wrapper does not wrap (nvmlDeviceGetNvLinkRemoteDeviceType, the GPU
// fabric state and nvmlErrorString).
#[allow(unsafe_code)]
pub mod nvml;
pub mod side;
pub mod tarball;

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

pub use facts::{FactsState, HostFacts};
pub(crate) use netif::{EthtoolStats, NetAnswers, Reply};
pub use nvml::{NvLink, NvmlFacts, NvmlGpu, NvmlState};
pub use side::{HostMeta, SIDE_DIR};

/// Symlink hops allowed while resolving one path (the kernel's limit is 40 too).
const MAX_SYMLINK_HOPS: usize = 40;

/// The most fabprobe reads of any one file. A sysfs attribute is at most a page, the
/// biggest file probes read (`/proc/cpuinfo` of a few hundred CPUs) under 1 MiB; anything
/// larger is not what it claims to be, and is refused instead of read into memory.
pub(crate) const MAX_READ_BYTES: u64 = 16 << 20;

/// Read a whole file, but no more than `limit` bytes: a bigger one is an error of kind
/// `FileTooLarge`, found after reading `limit + 1` bytes at most.
pub(crate) fn read_capped(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let f = std::fs::File::open(path)?;
    let mut buf = Vec::new();
    f.take(limit.saturating_add(1)).read_to_end(&mut buf)?;
    if buf.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("larger than {limit} bytes"),
        ));
    }
    Ok(buf)
}

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("cannot {op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot resolve {path}: too many levels of symbolic links")]
    SymlinkLoop { path: PathBuf },
    #[error("snapshot {path}: {msg}")]
    Snapshot { path: PathBuf, msg: String },
    #[error("cannot read {path}: larger than {limit} bytes, more than any file fabprobe reads")]
    TooLarge { path: PathBuf, limit: u64 },
    /// `--root` one directory too high (or an empty one): refused, never read as a host
    /// without hardware.
    #[error("not a snapshot: {} (no sys/)", path.display())]
    NotASnapshot { path: PathBuf },
}

impl HostError {
    /// The errno behind a failed read, when there is one (EINVAL on an empty GID slot...).
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            HostError::Io { source, .. } => source.raw_os_error(),
            HostError::TooLarge { .. } => Some(libc::EFBIG),
            _ => None,
        }
    }
    pub(crate) fn is_not_found(&self) -> bool {
        matches!(self, HostError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

/// Where the answers come from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Live,
    Snapshot(PathBuf),
}

/// A sysfs attribute as read: its value (trailing newline removed), absent, or a read that
/// failed with an errno. Reports keep the failure instead of inventing a value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", content = "value", rename_all = "snake_case")]
pub enum Attr {
    Value(String),
    Absent,
    /// The read failed; the errno's name (`EINVAL`, `EACCES`, ...).
    Failed(String),
}

impl Attr {
    pub fn value(&self) -> Option<&str> {
        match self {
            Attr::Value(v) => Some(v),
            _ => None,
        }
    }
}

/// One access a probe made, recorded so `snapshot` can copy exactly that.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Access {
    Read(PathBuf),
    List(PathBuf),
    Resolve(PathBuf),
    /// The target of one symlink, without following it (capture recreates the link only).
    Link(PathBuf),
}

/// `getpwuid_r(uid)->pw_dir` (NSS: local files, LDAP, sssd), or None.
fn passwd_home(uid: u32) -> Option<String> {
    let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)).ok()??;
    Some(user.dir.to_string_lossy().into_owned())
}

pub struct Host {
    root: PathBuf,
    source: Source,
    meta: HostMeta,
    env: BTreeMap<String, String>,
    /// Where `env` came from: `shell`, `--env-from PID n`, `--env-file PATH`, a snapshot's.
    env_source: String,
    nvml: NvmlState,
    /// Host facts: loaded from a snapshot, or collected live on first use (they scan /proc).
    facts: std::sync::OnceLock<FactsState>,
    /// ethtool and DCB answers: loaded from a snapshot, or recorded as asked live.
    net: Mutex<NetAnswers>,
    /// `nv-fabricmanager --version`: loaded from a snapshot, or run live on first use.
    fabric_manager: Mutex<Option<fabricmanager::FmAnswers>>,
    /// Canonical host paths whose read failed at capture time, with the errno name.
    /// Keyed by the path's bytes: a snapshot records thousands, and a `Path` key hashes and
    /// compares component by component on every read (paths here are normalized, so bytes
    /// are equal exactly when components are).
    read_errors: HashMap<OsString, String>,
    /// Interface addresses: live getifaddrs, or the snapshot's `ifaddrs.json`.
    ifaddrs: Result<Vec<ifaddrs::IfAddr>, String>,
    recorder: Option<Mutex<Vec<Access>>>,
    /// Directory paths (as asked) already resolved to their canonical host path.
    resolved_dirs: Mutex<std::collections::HashMap<OsString, PathBuf>>,
    /// A snapshot's files never change, and `check` runs several probes over the same
    /// attributes: contents by canonical path (`None`: not there), read once. Live hosts
    /// always read again (counters move).
    snapshot_reads: Option<Mutex<HashMap<OsString, Option<Vec<u8>>>>>,
    /// Keeps an extracted `.tar.gz` alive as long as the host.
    _extracted: Option<tempfile::TempDir>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("root", &self.root)
            .field("source", &self.source)
            .finish()
    }
}

impl Host {
    /// The live machine: files under `/`, NVML through the driver library, the process
    /// environment filtered to the variables probes use.
    pub fn live() -> Host {
        let env = std::env::vars()
            .filter(|(k, _)| side::env_is_captured(k))
            .collect();
        Host {
            root: PathBuf::from("/"),
            source: Source::Live,
            meta: HostMeta {
                // NCCL in a process of this user reads this home's .nccl.conf.
                nccl_home: passwd_home(nix::unistd::getuid().as_raw()),
                ..HostMeta::live()
            },
            env,
            env_source: "shell".into(),
            nvml: nvml::collect_live(),
            facts: std::sync::OnceLock::new(),
            read_errors: HashMap::new(),
            net: Mutex::default(),
            fabric_manager: Mutex::default(),
            ifaddrs: ifaddrs::list_interfaces().map_err(|e| format!("getifaddrs failed: {e}")),
            recorder: None,
            resolved_dirs: Mutex::default(),
            snapshot_reads: None,
            _extracted: None,
        }
    }

    /// A captured host: a directory mirroring `/` (a directory holding only `sys/` is
    /// valid), or a `.tar.gz` of one.
    pub fn snapshot(path: impl AsRef<Path>) -> Result<Host, HostError> {
        let path = path.as_ref();
        let meta = std::fs::metadata(path).map_err(|source| HostError::Io {
            op: "open snapshot",
            path: path.to_path_buf(),
            source,
        })?;
        let (root, extracted) = if meta.is_dir() {
            (path.to_path_buf(), None)
        } else {
            let dir = side::extract_tarball(path)?;
            (side::tarball_root(dir.path()), Some(dir))
        };
        if !root.join("sys").is_dir() {
            return Err(HostError::NotASnapshot {
                path: path.to_path_buf(),
            });
        }
        let loaded = side::load(&root, path)?;
        Ok(Host {
            root,
            source: Source::Snapshot(path.to_path_buf()),
            env_source: loaded
                .meta
                .env_source
                .clone()
                .unwrap_or_else(|| "the snapshot's environment".into()),
            meta: loaded.meta,
            env: loaded.env,
            nvml: loaded.nvml,
            facts: std::sync::OnceLock::from(loaded.facts),
            net: Mutex::new(loaded.net),
            fabric_manager: Mutex::new(loaded.fabric_manager),
            read_errors: loaded.read_errors,
            ifaddrs: loaded
                .ifaddrs
                .ok_or_else(|| format!("the snapshot has no {SIDE_DIR}/ifaddrs.json")),
            recorder: None,
            resolved_dirs: Mutex::default(),
            snapshot_reads: Some(Mutex::default()),
            _extracted: extracted,
        })
    }

    /// `--root` when given, else the live host.
    pub fn open(root: Option<&Path>) -> Result<Host, HostError> {
        match root {
            Some(p) => Host::snapshot(p),
            None => Ok(Host::live()),
        }
    }

    /// Replace the environment with the job's (`--env-from PID`, `--env-file`), keeping only
    /// the variables a snapshot would; `source` says where it came from.
    pub fn with_job_env(mut self, env: BTreeMap<String, String>, source: String) -> Host {
        // A job's file says nothing of its user but its HOME; `with_job_uid` knows better.
        self.meta.nccl_home = env.get("HOME").filter(|h| !h.is_empty()).cloned();
        self.env = env
            .into_iter()
            .filter(|(k, _)| side::env_is_captured(k))
            .collect();
        self.meta.env_source = Some(source.clone());
        self.env_source = source;
        self
    }

    /// The job runs as `uid` (the owner of `--env-from PID`): NCCL reads its home's
    /// `.nccl.conf`.
    pub(crate) fn with_job_uid(mut self, uid: u32) -> Host {
        self.meta.nccl_home = passwd_home(uid);
        self
    }

    /// The directory whose `.nccl.conf` NCCL reads. NCCL takes `getpwuid(getuid())->pw_dir`
    /// (`param.cc` `userHomeDir`), not `$HOME`: the job's user's on the live host
    /// (fabprobe's own without a job), the job environment's HOME with `--env-file`, what
    /// a snapshot recorded (else its HOME). None when none is known.
    pub(crate) fn nccl_home(&self) -> Option<String> {
        self.meta
            .nccl_home
            .clone()
            .or_else(|| self.env.get("HOME").filter(|h| !h.is_empty()).cloned())
    }

    /// Turn on access recording (used by `snapshot` capture).
    pub fn with_recording(mut self) -> Host {
        self.recorder = Some(Mutex::new(Vec::new()));
        self
    }

    /// Every access made so far, deduplicated and sorted.
    pub(crate) fn accesses(&self) -> Vec<Access> {
        let mut v = self
            .recorder
            .as_ref()
            .map(|r| r.lock().map(|g| g.clone()).unwrap_or_default())
            .unwrap_or_default();
        v.sort();
        v.dedup();
        v
    }

    fn record(&self, a: Access) {
        if let Some(r) = &self.recorder
            && let Ok(mut g) = r.lock()
        {
            g.push(a);
        }
    }

    pub fn source(&self) -> &Source {
        &self.source
    }
    pub(crate) fn is_live(&self) -> bool {
        self.source == Source::Live
    }
    pub fn meta(&self) -> &HostMeta {
        &self.meta
    }
    /// The captured environment (only the variables probes care about).
    pub fn env(&self) -> &BTreeMap<String, String> {
        &self.env
    }
    /// Where the environment came from (`shell`, `--env-from PID 1234`, ...).
    pub fn env_source(&self) -> &str {
        &self.env_source
    }
    pub fn env_var(&self, name: &str) -> Option<&str> {
        self.env.get(name).map(String::as_str)
    }
    /// The interface addresses NCCL's socket selection sees, or why they are unknown.
    pub fn ifaddrs(&self) -> Result<&[ifaddrs::IfAddr], &str> {
        self.ifaddrs.as_deref().map_err(String::as_str)
    }
    pub fn nvml(&self) -> &NvmlState {
        &self.nvml
    }
    /// OS, CPU, memory, load, memlock limit and device holders (collected live on first use).
    pub fn facts(&self) -> &FactsState {
        self.facts.get_or_init(facts::collect_live)
    }

    /// `ethtool -S <ifname>`: the statistics ioctl live (recorded for capture), the
    /// snapshot's `fabprobe/ethtool.json` otherwise.
    pub(crate) fn ethtool_stats(&self, ifname: &str) -> Reply<EthtoolStats> {
        if self.is_live() {
            let r = netif::live_ethtool_stats(ifname);
            if let Ok(mut n) = self.net.lock() {
                n.ethtool.insert(ifname.to_string(), r.clone());
            }
            return r;
        }
        self.net
            .lock()
            .ok()
            .and_then(|n| n.ethtool.get(ifname).cloned())
            .unwrap_or(Reply::NotCaptured)
    }

    /// The raw `DCB_CMD_IEEE_GET` reply for `ifname` (after the netlink header): DCB
    /// netlink live (recorded), the snapshot's `fabprobe/dcb.json` otherwise.
    pub(crate) fn dcb_ieee(&self, ifname: &str) -> Reply<Vec<u8>> {
        let hex = if self.is_live() {
            let r = netif::live_dcb_ieee(ifname);
            if let Ok(mut n) = self.net.lock() {
                n.dcb_ieee.insert(ifname.to_string(), r.clone());
            }
            r
        } else {
            self.net
                .lock()
                .ok()
                .and_then(|n| n.dcb_ieee.get(ifname).cloned())
                .unwrap_or(Reply::NotCaptured)
        };
        match hex {
            Reply::Ok(h) => match netif::from_hex(&h) {
                Some(b) => Reply::Ok(b),
                None => Reply::Error("the recorded reply is not hex".into()),
            },
            Reply::Error(e) => Reply::Error(e),
            Reply::NotCaptured => Reply::NotCaptured,
        }
    }

    /// LLDP frames heard on `ifname` within `wait` (live, recorded), or the snapshot's
    /// `fabprobe/lldp.json` (no waiting).
    pub(crate) fn lldp_frames(&self, ifname: &str, wait: std::time::Duration) -> Reply<Vec<Vec<u8>>> {
        let hex = if self.is_live() {
            let r = netif::live_lldp(ifname, wait);
            if let Ok(mut n) = self.net.lock() {
                n.lldp.insert(ifname.to_string(), r.clone());
            }
            r
        } else {
            self.net
                .lock()
                .ok()
                .and_then(|n| n.lldp.get(ifname).cloned())
                .unwrap_or(Reply::NotCaptured)
        };
        match hex {
            Reply::Ok(v) => match v.iter().map(|h| netif::from_hex(h)).collect::<Option<Vec<_>>>() {
                Some(b) => Reply::Ok(b),
                None => Reply::Error("a recorded frame is not hex".into()),
            },
            Reply::Error(e) => Reply::Error(e),
            Reply::NotCaptured => Reply::NotCaptured,
        }
    }

    /// The Fabric Manager binary's `--version` output: `binary` run once live (recorded
    /// for capture), the snapshot's `fabprobe/fabricmanager.json` otherwise.
    pub fn fabric_manager_version(&self, binary: &str) -> Reply<String> {
        let Ok(mut fm) = self.fabric_manager.lock() else {
            return Reply::NotCaptured;
        };
        if fm.is_none() && self.is_live() {
            *fm = Some(fabricmanager::live_version(binary));
        }
        fm.as_ref()
            .and_then(|a| a.version_output.clone())
            .unwrap_or(Reply::NotCaptured)
    }

    /// The Fabric Manager answers asked so far (live) or loaded (snapshot), for capture.
    pub(crate) fn fabric_manager_answers(&self) -> Option<fabricmanager::FmAnswers> {
        self.fabric_manager.lock().ok().and_then(|f| f.clone())
    }

    /// Every ethtool/DCB answer asked so far (live) or loaded (snapshot), for capture.
    pub(crate) fn net_answers(&self) -> NetAnswers {
        self.net.lock().map(|n| n.clone()).unwrap_or_default()
    }

    /// The errno name a snapshot recorded for this canonical path, if its read failed at
    /// capture time (lets a re-capture keep the failure).
    pub(crate) fn recorded_failure(&self, canonical: &Path) -> Option<&str> {
        self.read_errors.get(canonical.as_os_str()).map(String::as_str)
    }

    /// The on-disk location of a host-absolute path, without resolving symlinks.
    fn on_disk(&self, host_path: &Path) -> PathBuf {
        let rel: PathBuf = host_path
            .components()
            .filter(|c| matches!(c, Component::Normal(_)))
            .collect();
        self.root.join(rel)
    }

    /// `realpath` inside the root: every symlink is followed, absolute targets are taken
    /// relative to the root, `..` never climbs above it. Returns a host-absolute path.
    /// The final component need not exist (like `realpath -m` for the last part only).
    pub(crate) fn realpath(&self, host_path: impl AsRef<Path>) -> Result<PathBuf, HostError> {
        let host_path = host_path.as_ref();
        self.record(Access::Resolve(host_path.to_path_buf()));
        self.resolve(host_path)
    }

    fn resolve(&self, host_path: &Path) -> Result<PathBuf, HostError> {
        let comps: Vec<std::ffi::OsString> = host_path
            .components()
            .filter_map(|c| match c {
                Component::Normal(s) => Some(s.to_os_string()),
                Component::ParentDir => Some("..".into()),
                _ => None,
            })
            .collect();
        // In a snapshot the whole path's answer is kept too (nothing there changes).
        let key = comps.iter().collect::<PathBuf>().into_os_string();
        if self.snapshot_reads.is_some()
            && let Some(hit) = self.resolved_dirs.lock().ok().and_then(|c| c.get(&key).cloned())
        {
            return Ok(hit);
        }
        let real = self.resolve_comps(&comps, 0, host_path)?;
        if self.snapshot_reads.is_some()
            && let Ok(mut c) = self.resolved_dirs.lock()
        {
            c.insert(key, real.clone());
        }
        Ok(real)
    }

    /// Resolve a normalized component list: the parent first (memoized, since probes read
    /// hundreds of files in the same directories), then the last component.
    fn resolve_comps(
        &self,
        comps: &[std::ffi::OsString],
        hops: usize,
        asked: &Path,
    ) -> Result<PathBuf, HostError> {
        let Some((last, parent)) = comps.split_last() else {
            return Ok(PathBuf::from("/"));
        };
        let parent_key = parent.iter().collect::<PathBuf>().into_os_string();
        let cached = self
            .resolved_dirs
            .lock()
            .ok()
            .and_then(|c| c.get(&parent_key).cloned());
        let parent_real = match cached {
            Some(p) => p,
            None => {
                let p = self.resolve_comps(parent, hops, asked)?;
                if let Ok(mut c) = self.resolved_dirs.lock() {
                    c.insert(parent_key, p.clone());
                }
                p
            }
        };
        if last == ".." {
            let mut up = parent_real;
            up.pop();
            return Ok(up);
        }
        let candidate = parent_real.join(last);
        match std::fs::symlink_metadata(self.on_disk(&candidate)) {
            Ok(m) if m.file_type().is_symlink() => {
                if hops >= MAX_SYMLINK_HOPS {
                    return Err(HostError::SymlinkLoop {
                        path: asked.to_path_buf(),
                    });
                }
                let target =
                    std::fs::read_link(self.on_disk(&candidate)).map_err(|source| HostError::Io {
                        op: "read link",
                        path: candidate.clone(),
                        source,
                    })?;
                // An absolute target is taken relative to the root, never the live `/`.
                let base = if target.is_absolute() {
                    PathBuf::from("/")
                } else {
                    parent_real
                };
                let next: Vec<std::ffi::OsString> = base
                    .components()
                    .chain(target.components())
                    .filter_map(|c| match c {
                        Component::Normal(s) => Some(s.to_os_string()),
                        Component::ParentDir => Some("..".into()),
                        _ => None,
                    })
                    .collect();
                self.resolve_comps(&next, hops + 1, asked)
            }
            _ => Ok(candidate),
        }
    }

    fn io_err(op: &'static str, path: &Path, source: io::Error) -> HostError {
        HostError::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }

    /// Read a whole file (lossy UTF-8). A failure recorded at capture time is replayed.
    pub fn read(&self, host_path: impl AsRef<Path>) -> Result<String, HostError> {
        let bytes = self.read_bytes(host_path)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    pub(crate) fn read_bytes(&self, host_path: impl AsRef<Path>) -> Result<Vec<u8>, HostError> {
        let host_path = host_path.as_ref();
        self.record(Access::Read(host_path.to_path_buf()));
        let real = self.resolve(host_path)?;
        if let Some(errno) = self.read_errors.get(real.as_os_str()) {
            let raw = side::errno_from_name(errno).unwrap_or(libc::EIO);
            return Err(Self::io_err("read", host_path, io::Error::from_raw_os_error(raw)));
        }
        let cache = self.snapshot_reads.as_ref().and_then(|c| c.lock().ok());
        if let Some(hit) = cache.as_ref().and_then(|c| c.get(real.as_os_str())) {
            return match hit {
                Some(bytes) => Ok(bytes.clone()),
                None => Err(Self::io_err(
                    "read",
                    host_path,
                    io::Error::from_raw_os_error(libc::ENOENT),
                )),
            };
        }
        drop(cache);
        let got = read_capped(&self.on_disk(&real), MAX_READ_BYTES);
        if let Some(mut c) = self.snapshot_reads.as_ref().and_then(|c| c.lock().ok()) {
            match &got {
                Ok(b) => {
                    c.insert(real.clone().into_os_string(), Some(b.clone()));
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    c.insert(real.clone().into_os_string(), None);
                }
                Err(_) => {}
            }
        }
        got.map_err(|e| {
            if e.kind() == io::ErrorKind::FileTooLarge {
                HostError::TooLarge {
                    path: host_path.to_path_buf(),
                    limit: MAX_READ_BYTES,
                }
            } else {
                Self::io_err("read", host_path, e)
            }
        })
    }

    /// Read a file; `None` when it does not exist. Other failures are errors.
    pub(crate) fn read_opt(&self, host_path: impl AsRef<Path>) -> Result<Option<String>, HostError> {
        match self.read(host_path) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Read a sysfs attribute: the value without its trailing newline, `Absent`, or the
    /// failure's errno name.
    pub fn attr(&self, host_path: impl AsRef<Path>) -> Attr {
        match self.read(host_path) {
            Ok(s) => Attr::Value(s.strip_suffix('\n').unwrap_or(&s).to_string()),
            Err(e) if e.is_not_found() => Attr::Absent,
            Err(e) => Attr::Failed(
                e.raw_os_error()
                    .and_then(side::errno_name)
                    .unwrap_or("EIO")
                    .to_string(),
            ),
        }
    }

    /// Entry names of a directory, sorted bytewise; `None` when the directory is absent.
    pub(crate) fn list_dir(&self, host_path: impl AsRef<Path>) -> Result<Option<Vec<String>>, HostError> {
        let host_path = host_path.as_ref();
        self.record(Access::List(host_path.to_path_buf()));
        let real = self.resolve(host_path)?;
        // A directory whose listing failed at capture time (EACCES) fails again here.
        if let Some(errno) = self.read_errors.get(real.as_os_str()) {
            let raw = side::errno_from_name(errno).unwrap_or(libc::EIO);
            return Err(Self::io_err("list", host_path, io::Error::from_raw_os_error(raw)));
        }
        let rd = match std::fs::read_dir(self.on_disk(&real)) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Self::io_err("list", host_path, e)),
        };
        let mut names = Vec::new();
        for entry in rd {
            let entry = entry.map_err(|e| Self::io_err("list", host_path, e))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(Some(names))
    }

    /// The target of the symlink at `host_path` (its parent resolved inside the root),
    /// as written; `None` when it is not a symlink or does not exist. Used where the link's
    /// name is the fact (`libibverbs.so.1 -> libibverbs.so.1.14.50.0`).
    pub fn read_link(&self, host_path: impl AsRef<Path>) -> Option<PathBuf> {
        let host_path = host_path.as_ref();
        self.record(Access::Link(host_path.to_path_buf()));
        let name = host_path.file_name()?;
        let parent = self.resolve(host_path.parent()?).ok()?;
        std::fs::read_link(self.on_disk(&parent.join(name))).ok()
    }

    /// Whether a path exists (symlinks followed inside the root).
    pub fn exists(&self, host_path: impl AsRef<Path>) -> bool {
        let host_path = host_path.as_ref();
        self.record(Access::Resolve(host_path.to_path_buf()));
        match self.resolve(host_path) {
            Ok(real) => {
                self.read_errors.contains_key(real.as_os_str())
                    || self.on_disk(&real).symlink_metadata().is_ok()
            }
            Err(_) => false,
        }
    }

    /// Whether a path is a directory (symlinks followed inside the root).
    pub fn is_dir(&self, host_path: impl AsRef<Path>) -> bool {
        let host_path = host_path.as_ref();
        self.record(Access::Resolve(host_path.to_path_buf()));
        self.resolve(host_path)
            .map(|r| self.on_disk(&r).is_dir())
            .unwrap_or(false)
    }
}

/// Natural order for device names: `mlx5_2` before `mlx5_10`.
pub(crate) fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        match (a.first(), b.first()) {
            (None, None) => return std::cmp::Ordering::Equal,
            (None, _) => return std::cmp::Ordering::Less,
            (_, None) => return std::cmp::Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let na = a.iter().take_while(|c| c.is_ascii_digit()).count();
                let nb = b.iter().take_while(|c| c.is_ascii_digit()).count();
                let (da, db) = (trim_zeros(&a[..na]), trim_zeros(&b[..nb]));
                let ord = da.len().cmp(&db.len()).then_with(|| da.cmp(db)).then(na.cmp(&nb));
                if ord != std::cmp::Ordering::Equal {
                    return ord;
                }
                a = &a[na..];
                b = &b[nb..];
            }
            (Some(x), Some(y)) => {
                if x != y {
                    return x.cmp(y);
                }
                a = &a[1..];
                b = &b[1..];
            }
        }
    }
}

fn trim_zeros(d: &[u8]) -> &[u8] {
    let n = d.iter().take_while(|&&c| c == b'0').count();
    &d[n.min(d.len().saturating_sub(1))..]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tree() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        std::fs::create_dir_all(
            r.join("sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/infiniband/mlx5_0/ports/1/gids"),
        )
        .unwrap();
        std::fs::create_dir_all(r.join("sys/class/infiniband")).unwrap();
        symlink(
            "../../devices/pci0000:00/0000:00:01.0/0000:01:00.0/infiniband/mlx5_0",
            r.join("sys/class/infiniband/mlx5_0"),
        )
        .unwrap();
        symlink(
            "../../../0000:01:00.0",
            r.join("sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/infiniband/mlx5_0/device"),
        )
        .unwrap();
        std::fs::write(
            r.join("sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/infiniband/mlx5_0/ports/1/state"),
            "4: ACTIVE\n",
        )
        .unwrap();
        std::fs::write(
            r.join("sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/infiniband/mlx5_0/ports/1/gids/0"),
            "",
        )
        .unwrap();
        // An absolute symlink must stay inside the root.
        symlink("/sys/devices/pci0000:00", r.join("sys/class/abs")).unwrap();
        symlink("loop2", r.join("sys/class/loop1")).unwrap();
        symlink("loop1", r.join("sys/class/loop2")).unwrap();
        std::fs::create_dir_all(r.join(SIDE_DIR)).unwrap();
        std::fs::write(
            r.join(SIDE_DIR).join("read-errors.json"),
            r#"{"/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/infiniband/mlx5_0/ports/1/gids/0": "EINVAL"}"#,
        )
        .unwrap();
        t
    }

    #[test]
    fn reads_through_relative_symlinks() {
        let t = tree();
        let h = Host::snapshot(t.path()).unwrap();
        assert_eq!(
            h.read("/sys/class/infiniband/mlx5_0/ports/1/state").unwrap(),
            "4: ACTIVE\n"
        );
        assert_eq!(
            h.attr("/sys/class/infiniband/mlx5_0/ports/1/state"),
            Attr::Value("4: ACTIVE".into())
        );
        assert_eq!(
            h.realpath("/sys/class/infiniband/mlx5_0/device").unwrap(),
            PathBuf::from("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0")
        );
    }

    #[test]
    fn absolute_symlinks_stay_inside_root() {
        let t = tree();
        let h = Host::snapshot(t.path()).unwrap();
        assert_eq!(
            h.realpath("/sys/class/abs").unwrap(),
            PathBuf::from("/sys/devices/pci0000:00")
        );
        assert!(h.is_dir("/sys/class/abs/0000:00:01.0"));
        // `..` cannot climb above the root.
        assert_eq!(
            h.realpath("/../../sys/class").unwrap(),
            PathBuf::from("/sys/class")
        );
    }

    #[test]
    fn recorded_failure_is_replayed_not_missing() {
        let t = tree();
        let h = Host::snapshot(t.path()).unwrap();
        let e = h.read("/sys/class/infiniband/mlx5_0/ports/1/gids/0").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        assert!(!e.is_not_found());
        assert_eq!(
            h.attr("/sys/class/infiniband/mlx5_0/ports/1/gids/0"),
            Attr::Failed("EINVAL".into())
        );
        assert_eq!(h.attr("/sys/class/infiniband/mlx5_0/ports/1/nope"), Attr::Absent);
        assert!(h.exists("/sys/class/infiniband/mlx5_0/ports/1/gids/0"));
    }

    #[test]
    fn a_huge_file_is_refused_not_read_into_memory() {
        let t = tree();
        let big = t.path().join("sys/class/big");
        let f = std::fs::File::create(&big).unwrap();
        // Sparse on disk: 1 GiB that costs nothing to make.
        f.set_len(1 << 30).unwrap();
        let h = Host::snapshot(t.path()).unwrap();
        let e = h.read("/sys/class/big").unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot read /sys/class/big: larger than 16777216 bytes, more than any file fabprobe reads"
        );
        assert_eq!(h.attr("/sys/class/big"), Attr::Failed("EFBIG".into()));
        // At the limit it is read.
        std::fs::File::create(&big)
            .unwrap()
            .set_len(MAX_READ_BYTES)
            .unwrap();
        assert_eq!(
            h.read_bytes("/sys/class/big").unwrap().len() as u64,
            MAX_READ_BYTES
        );
    }

    #[test]
    fn symlink_loop_is_an_error_not_a_hang() {
        let t = tree();
        let h = Host::snapshot(t.path()).unwrap();
        assert!(matches!(
            h.realpath("/sys/class/loop1"),
            Err(HostError::SymlinkLoop { .. })
        ));
    }

    #[test]
    fn a_directory_without_sys_is_not_a_snapshot() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("fixture/sys/class")).unwrap();
        for dir in [t.path().to_path_buf(), t.path().join("fixture/sys")] {
            let Err(e) = Host::snapshot(&dir) else {
                panic!("refused")
            };
            assert_eq!(e.to_string(), format!("not a snapshot: {} (no sys/)", dir.display()));
        }
    }

    #[test]
    fn sys_only_directory_is_a_snapshot() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("sys/class")).unwrap();
        let h = Host::snapshot(t.path()).unwrap();
        assert!(h.env().is_empty());
        assert!(matches!(h.nvml(), NvmlState::Unavailable { .. }));
        assert_eq!(h.list_dir("/sys/class/infiniband").unwrap(), None);
    }

    #[test]
    fn recording_sees_every_access() {
        let t = tree();
        let h = Host::snapshot(t.path()).unwrap().with_recording();
        let _ = h.list_dir("/sys/class/infiniband");
        let _ = h.read("/sys/class/infiniband/mlx5_0/ports/1/state");
        assert_eq!(
            h.accesses(),
            vec![
                Access::Read("/sys/class/infiniband/mlx5_0/ports/1/state".into()),
                Access::List("/sys/class/infiniband".into()),
            ]
        );
    }

    #[test]
    fn natural_order() {
        let mut v = vec!["mlx5_10", "mlx5_2", "mlx5_bond_0", "mlx5_1", "mlx5_0"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(v, vec!["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_10", "mlx5_bond_0"]);
    }
}
