//! Snapshot capture: run every probe against a recording live host, then copy exactly
//! the files, directories and symlinks they touched into a tree that mirrors `/`, plus
//! the side folder (host facts, NVML, the filtered environment, failed reads).
//! Symlinks are kept as relative symlinks so a copied `/sys` subtree works unmodified.

use std::collections::BTreeMap;
use std::io;
use std::path::{Component, Path, PathBuf};

use serde::Serialize;

use crate::host::{Access, Host, HostMeta, SIDE_DIR, side};

/// Listed regular files bigger than this are not copied (BAR `resource*` files, ROMs).
const MAX_LISTED_FILE_BYTES: u64 = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    // The OS error is said once, in this line: as a `#[source]` too, anyhow's chain
    // repeated it ("directory is not empty: directory is not empty").
    #[error("cannot {op} {path}: {err}")]
    Io {
        op: &'static str,
        path: PathBuf,
        err: io::Error,
    },
}

fn io_err(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> CaptureError {
    let path = path.to_path_buf();
    move |err| CaptureError::Io { op, path, err }
}

/// What capture did, for the user.
#[derive(Debug, Default, Serialize)]
pub struct CaptureSummary {
    pub files: usize,
    pub symlinks: usize,
    pub directories: usize,
    /// Reads that failed live and are recorded (path → errno name).
    pub failed_reads: BTreeMap<PathBuf, String>,
    /// Things not captured, one line each (probe errors, oversized files).
    pub skipped: Vec<String>,
}

struct Mirror<'a> {
    host: Option<&'a Host>,
    src: &'a Path,
    dest: &'a Path,
    summary: CaptureSummary,
    /// Directory paths (as asked) already recreated, with their canonical host path.
    walked: std::collections::HashMap<PathBuf, PathBuf>,
}

impl Mirror<'_> {
    fn src_of(&self, p: &Path) -> PathBuf {
        self.src.join(rel(p))
    }
    fn dest_of(&self, p: &Path) -> PathBuf {
        self.dest.join(rel(p))
    }

    /// Recreate `host_path` in `dest`: every directory on the way, every symlink as a
    /// (relative) symlink, and return the canonical host path it resolved to.
    fn walk(&mut self, host_path: &Path) -> Result<Option<PathBuf>, CaptureError> {
        let mut comps = components_rev(host_path);
        comps.reverse();
        self.walk_comps(&comps, 0)
    }

    /// The parent first (memoized: probes touch thousands of files in few directories),
    /// then the last component; a symlink is recreated and its target walked in turn.
    fn walk_comps(
        &mut self,
        comps: &[std::ffi::OsString],
        hops: usize,
    ) -> Result<Option<PathBuf>, CaptureError> {
        let Some((last, parent)) = comps.split_last() else {
            return Ok(Some(PathBuf::from("/")));
        };
        let key: PathBuf = parent.iter().collect();
        let parent_real = match self.walked.get(&key) {
            Some(p) => p.clone(),
            None => {
                let Some(p) = self.walk_comps(parent, hops)? else {
                    return Ok(None);
                };
                self.walked.insert(key, p.clone());
                p
            }
        };
        if last == ".." {
            let mut up = parent_real;
            up.pop();
            return Ok(Some(up));
        }
        let next = parent_real.join(last);
        let Ok(meta) = std::fs::symlink_metadata(self.src_of(&next)) else {
            return Ok(None);
        };
        if meta.file_type().is_symlink() {
            if hops >= 40 {
                return Ok(None);
            }
            let target = std::fs::read_link(self.src_of(&next)).map_err(io_err("read link", &next))?;
            self.make_symlink(&next, &target)?;
            let base = if target.is_absolute() {
                PathBuf::from("/")
            } else {
                parent_real
            };
            let mut joined = components_rev(&base.join(&target));
            joined.reverse();
            return self.walk_comps(&joined, hops + 1);
        }
        if meta.is_dir() {
            self.make_dir(&next)?;
        }
        Ok(Some(next))
    }

    fn make_dir(&mut self, p: &Path) -> Result<(), CaptureError> {
        let d = self.dest_of(p);
        if !d.is_dir() {
            std::fs::create_dir_all(&d).map_err(io_err("create directory", &d))?;
            self.summary.directories += 1;
        }
        Ok(())
    }

    fn make_symlink(&mut self, at: &Path, target: &Path) -> Result<(), CaptureError> {
        let d = self.dest_of(at);
        if d.symlink_metadata().is_ok() {
            return Ok(());
        }
        if let Some(parent) = at.parent() {
            self.make_dir(parent)?;
        }
        // Absolute targets become relative so the snapshot never points at the live `/`.
        let target = if target.is_absolute() {
            relative_to(at.parent().unwrap_or(Path::new("/")), target)
        } else {
            target.to_path_buf()
        };
        std::os::unix::fs::symlink(&target, &d).map_err(io_err("create symlink", &d))?;
        self.summary.symlinks += 1;
        Ok(())
    }

    fn copy_file(&mut self, canonical: &Path, limit: Option<u64>) -> Result<(), CaptureError> {
        let d = self.dest_of(canonical);
        if d.symlink_metadata().is_ok() {
            return Ok(());
        }
        if let Some(parent) = canonical.parent() {
            self.make_dir(parent)?;
        }
        // Re-capturing a snapshot keeps the failures it recorded.
        if let Some(errno) = self.host.and_then(|h| h.recorded_failure(canonical)) {
            self.summary
                .failed_reads
                .insert(canonical.to_path_buf(), errno.to_string());
            std::fs::write(&d, b"").map_err(io_err("write", &d))?;
            self.summary.files += 1;
            return Ok(());
        }
        let s = self.src_of(canonical);
        if let Some(limit) = limit
            && std::fs::metadata(&s).map(|m| m.len() > limit).unwrap_or(false)
        {
            self.summary.skipped.push(format!(
                "{}: larger than {limit} bytes, not copied",
                canonical.display()
            ));
            return Ok(());
        }
        match crate::host::read_capped(&s, crate::host::MAX_READ_BYTES) {
            Ok(bytes) => std::fs::write(&d, bytes).map_err(io_err("write", &d))?,
            Err(e) if e.kind() == io::ErrorKind::FileTooLarge => {
                self.summary.skipped.push(format!(
                    "{}: larger than {} bytes, not copied",
                    canonical.display(),
                    crate::host::MAX_READ_BYTES
                ));
                return Ok(());
            }
            Err(e) => {
                // The kernel's answer is the fact: keep the file (it exists) and the errno.
                let name = e.raw_os_error().and_then(side::errno_name).unwrap_or("EIO");
                self.summary
                    .failed_reads
                    .insert(canonical.to_path_buf(), name.to_string());
                std::fs::write(&d, b"").map_err(io_err("write", &d))?;
            }
        }
        self.summary.files += 1;
        Ok(())
    }

    /// A library the probes know by its name alone: an empty file of that name.
    fn name_only(&mut self, canonical: &Path) -> Result<(), CaptureError> {
        let d = self.dest_of(canonical);
        if d.symlink_metadata().is_ok() {
            return Ok(());
        }
        if let Some(parent) = canonical.parent() {
            self.make_dir(parent)?;
        }
        std::fs::write(&d, b"").map_err(io_err("write", &d))?;
        self.summary.files += 1;
        Ok(())
    }

    /// A read whose path could not even be looked at (EACCES on `~/.nccl.conf` under a
    /// 0700 home, for an unprivileged capture): the probe saw that failure, so the snapshot
    /// keeps it (an empty file and its errno), not an absence. A path that is really absent
    /// stays absent; one under an unreadable directory of its own is left out.
    fn record_unreachable(&mut self, p: &Path) -> Result<(), CaptureError> {
        let (Some(parent), Some(name)) = (p.parent(), p.file_name()) else {
            return Ok(());
        };
        let Some(dir) = self.walk(parent)? else {
            return Ok(());
        };
        let at = dir.join(name);
        let err = match std::fs::symlink_metadata(self.src_of(&at)) {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        if err.kind() == io::ErrorKind::NotFound {
            return Ok(());
        }
        let name = err.raw_os_error().and_then(side::errno_name).unwrap_or("EIO");
        let d = self.dest_of(&at);
        if d.symlink_metadata().is_ok() {
            return Ok(());
        }
        self.make_dir(&dir)?;
        self.summary.failed_reads.insert(at.clone(), name.to_string());
        std::fs::write(&d, b"").map_err(io_err("write", &d))?;
        self.summary.files += 1;
        Ok(())
    }

    fn capture(&mut self, access: &Access) -> Result<(), CaptureError> {
        match access {
            Access::Read(p) | Access::Resolve(p) => {
                if let Some(c) = self.walk(p)? {
                    let m = std::fs::symlink_metadata(self.src_of(&c));
                    if m.map(|m| m.is_file()).unwrap_or(false) {
                        self.copy_file(&c, None)?;
                    }
                } else if matches!(access, Access::Read(_)) {
                    self.record_unreachable(p)?;
                }
            }
            Access::Link(p) => {
                let (Some(parent), Some(name)) = (p.parent(), p.file_name()) else {
                    return Ok(());
                };
                let Some(c) = self.walk(parent)? else {
                    return Ok(());
                };
                let at = c.join(name);
                if let Ok(target) = std::fs::read_link(self.src_of(&at)) {
                    self.make_symlink(&at, &target)?;
                }
            }
            Access::List(p) => {
                let Some(c) = self.walk(p)? else {
                    return Ok(());
                };
                let Ok(rd) = std::fs::read_dir(self.src_of(&c)) else {
                    return Ok(());
                };
                let library_dir = is_library_dir(p);
                for entry in rd.flatten() {
                    // A library directory is listed for the names the probes look for
                    // (libnccl.so.2.X.Y, the libibverbs.so.1 link): the rest of the host's
                    // libraries are no part of the capture, and those kept are kept by name.
                    if library_dir && !is_probed_library(&entry.file_name().to_string_lossy()) {
                        continue;
                    }
                    let child = c.join(entry.file_name());
                    let Ok(m) = std::fs::symlink_metadata(entry.path()) else {
                        continue;
                    };
                    if m.file_type().is_symlink() {
                        let target = std::fs::read_link(entry.path()).map_err(io_err("read link", &child))?;
                        self.make_symlink(&child, &target)?;
                    } else if m.is_dir() {
                        self.make_dir(&child)?;
                    } else if m.is_file() && library_dir {
                        self.name_only(&child)?;
                    } else if m.is_file() {
                        self.copy_file(&child, Some(MAX_LISTED_FILE_BYTES))?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// A directory of shared libraries (`/usr/lib/x86_64-linux-gnu`, `/opt/nccl/lib`, an
/// LD_LIBRARY_PATH entry): outside the kernel's trees, with a `lib*` component.
fn is_library_dir(p: &Path) -> bool {
    let kernel = ["/sys", "/proc", "/dev"].iter().any(|k| p.starts_with(k));
    !kernel && p.components().any(|c| c.as_os_str().to_string_lossy().starts_with("lib"))
}

/// The libraries the probes look for by name: NCCL and its net plugins, libibverbs,
/// librdmacm and rdma-core's providers (`libmlx5-rdmav34.so`), CUDA and NVML.
fn is_probed_library(name: &str) -> bool {
    const PREFIXES: [&str; 8] =
        ["libnccl", "libibverbs", "librdmacm", "libmlx4", "libmlx5", "libcuda", "libcudart", "libnvidia-ml"];
    PREFIXES.iter().any(|p| name.starts_with(p)) || name.contains("-rdmav")
}

fn rel(p: &Path) -> PathBuf {
    p.components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .collect()
}

fn components_rev(p: &Path) -> Vec<std::ffi::OsString> {
    p.components()
        .rev()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_os_string()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect()
}

/// The relative path from directory `from` to `to` (both host-absolute).
fn relative_to(from: &Path, to: &Path) -> PathBuf {
    let f: Vec<_> = rel(from)
        .components()
        .map(|c| c.as_os_str().to_os_string())
        .collect();
    let t: Vec<_> = rel(to)
        .components()
        .map(|c| c.as_os_str().to_os_string())
        .collect();
    let common = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..f.len() {
        out.push("..");
    }
    for c in &t[common..] {
        out.push(c);
    }
    if out.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        out
    }
}

/// Copy what `host` (a recording host) accessed from `src_root` into `dest`, and write the
/// side folder. `dest` must be an empty or missing directory.
pub(crate) fn write_tree(
    host: &Host,
    src_root: &Path,
    dest: &Path,
    mut skipped: Vec<String>,
) -> Result<CaptureSummary, CaptureError> {
    std::fs::create_dir_all(dest).map_err(io_err("create directory", dest))?;
    let mut m = Mirror {
        host: Some(host),
        src: src_root,
        dest,
        summary: CaptureSummary::default(),
        walked: Default::default(),
    };
    for a in host.accesses() {
        m.capture(&a)?;
    }
    let mut summary = m.summary;
    skipped.append(&mut summary.skipped);
    summary.skipped = skipped;
    let side_dir = dest.join(SIDE_DIR);
    std::fs::create_dir_all(&side_dir).map_err(io_err("create directory", &side_dir))?;
    let meta = HostMeta {
        skipped: summary.skipped.clone(),
        ..host.meta().clone()
    };
    write_json(&side_dir.join("host.json"), &meta)?;
    // Filtered again here: a host built from an older snapshot may carry a secret.
    let env: BTreeMap<&String, &String> = host
        .env()
        .iter()
        .filter(|(k, _)| side::env_is_captured(k))
        .collect();
    write_json(&side_dir.join("env.json"), &env)?;
    write_json(&side_dir.join("nvml.json"), host.nvml())?;
    write_json(&side_dir.join("facts.json"), host.facts())?;
    write_json(&side_dir.join("read-errors.json"), &summary.failed_reads)?;
    let net = host.net_answers();
    if !net.ethtool.is_empty() {
        write_json(&side_dir.join("ethtool.json"), &net.ethtool)?;
    }
    if !net.dcb_ieee.is_empty() {
        write_json(&side_dir.join("dcb.json"), &net.dcb_ieee)?;
    }
    if !net.lldp.is_empty() {
        write_json(&side_dir.join("lldp.json"), &net.lldp)?;
    }
    if let Ok(ifs) = host.ifaddrs() {
        write_json(&side_dir.join("ifaddrs.json"), ifs)?;
    }
    if let Some(fm) = host.fabric_manager_answers() {
        write_json(&side_dir.join("fabricmanager.json"), &fm)?;
    }
    Ok(summary)
}

fn write_json<T: Serialize + ?Sized>(path: &Path, v: &T) -> Result<(), CaptureError> {
    let mut s = serde_json::to_string_pretty(v).map_err(|e| CaptureError::Io {
        op: "encode",
        path: path.to_path_buf(),
        err: io::Error::other(e),
    })?;
    s.push('\n');
    std::fs::write(path, s).map_err(io_err("write", path))
}

/// Pack a captured tree into a `.tar.gz`, symlinks kept as symlinks.
pub(crate) fn write_tarball(tree: &Path, out: &Path) -> Result<(), CaptureError> {
    let f = std::fs::File::create(out).map_err(io_err("create", out))?;
    let gz = flate2::write::GzEncoder::new(f, flate2::Compression::default());
    let mut b = tar::Builder::new(gz);
    b.follow_symlinks(false);
    b.append_dir_all(".", tree).map_err(io_err("archive", tree))?;
    let gz = b.into_inner().map_err(io_err("finish", out))?;
    gz.finish().map_err(io_err("finish", out))?;
    Ok(())
}

/// Capture `host` (live, with recording on, and maybe the job's environment from
/// `--env-from`/`--env-file`), first listening `lldp_wait` for the switch's LLDP on every RoCE netdev (the frames
/// land in `fabprobe/lldp.json`).
pub(crate) fn capture_host_with(
    host: Host,
    out: &Path,
    lldp_wait: Option<std::time::Duration>,
) -> Result<CaptureSummary, CaptureError> {
    if let Some(w) = lldp_wait {
        let tc = crate::nccl::settings::NcclSettings::build(&host, None).ib_tc();
        let mut r = crate::probe::qos::probe(&host, tc.as_ref());
        crate::probe::qos::add_lldp(&host, &mut r, w);
    }
    capture(&host, Path::new("/"), out)
}

/// Capture from any host (the live one, or a snapshot for re-capture) into `out`.
pub fn capture(host: &Host, src_root: &Path, out: &Path) -> Result<CaptureSummary, CaptureError> {
    let skipped = crate::probe::run_all_for_capture(host);
    let name = out.to_string_lossy();
    if name.ends_with(".tar.gz") || name.ends_with(".tgz") {
        let tmp = tempfile::Builder::new()
            .prefix("fabprobe-capture")
            .tempdir()
            .map_err(io_err("create a temporary directory for", out))?;
        let summary = write_tree(host, src_root, tmp.path(), skipped)?;
        write_tarball(tmp.path(), out)?;
        Ok(summary)
    } else {
        if std::fs::read_dir(out)
            .map(|mut d| d.next().is_some())
            .unwrap_or(false)
        {
            return Err(CaptureError::Io {
                op: "write snapshot into",
                path: out.to_path_buf(),
                err: io::Error::new(io::ErrorKind::AlreadyExists, "directory is not empty"),
            });
        }
        write_tree(host, src_root, out, skipped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn relative_paths() {
        assert_eq!(
            relative_to(Path::new("/sys/class/net"), Path::new("/sys/devices/x")),
            PathBuf::from("../../devices/x")
        );
        assert_eq!(
            relative_to(Path::new("/a"), Path::new("/a/b")),
            PathBuf::from("b")
        );
    }

    /// Capture from a fake root and read the result back: same answers, same failures.
    #[test]
    fn capture_round_trips_reads_links_and_failures() {
        let src = tempfile::tempdir().unwrap();
        let r = src.path();
        let dev = r.join("sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0");
        std::fs::create_dir_all(dev.join("infiniband/mlx5_0/ports/1")).unwrap();
        std::fs::create_dir_all(r.join("sys/class/infiniband")).unwrap();
        symlink(
            "../../devices/pci0000:00/0000:00:01.0/0000:01:00.0/infiniband/mlx5_0",
            r.join("sys/class/infiniband/mlx5_0"),
        )
        .unwrap();
        symlink("../../../0000:01:00.0", dev.join("infiniband/mlx5_0/device")).unwrap();
        std::fs::write(dev.join("infiniband/mlx5_0/ports/1/state"), "4: ACTIVE\n").unwrap();
        std::fs::write(dev.join("numa_node"), "1\n").unwrap();
        std::fs::write(dev.join("secret_not_read"), "x\n").unwrap();
        // An absolute symlink in the source becomes relative in the capture.
        symlink("/sys/devices/pci0000:00", r.join("sys/class/abs")).unwrap();

        let host = Host::snapshot(r).unwrap().with_recording();
        let _ = host.list_dir("/sys/class/infiniband");
        let _ = host.read("/sys/class/infiniband/mlx5_0/ports/1/state");
        let _ = host.read("/sys/class/infiniband/mlx5_0/device/numa_node");
        let _ = host.realpath("/sys/class/abs");

        let out = tempfile::tempdir().unwrap();
        let dest = out.path().join("snap");
        let summary = write_tree(&host, r, &dest, vec!["probe x: failed".into()]).unwrap();
        assert_eq!(summary.skipped, vec!["probe x: failed".to_string()]);
        assert!(
            !dest
                .join("sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/secret_not_read")
                .exists()
        );
        assert_eq!(
            std::fs::read_link(dest.join("sys/class/abs")).unwrap(),
            PathBuf::from("../devices/pci0000:00")
        );

        let back = Host::snapshot(&dest).unwrap();
        assert_eq!(
            back.read("/sys/class/infiniband/mlx5_0/ports/1/state").unwrap(),
            "4: ACTIVE\n"
        );
        assert_eq!(
            back.read("/sys/class/infiniband/mlx5_0/device/numa_node")
                .unwrap(),
            "1\n"
        );
        assert_eq!(
            back.list_dir("/sys/class/infiniband").unwrap(),
            Some(vec!["mlx5_0".to_string()])
        );
        assert_eq!(back.meta().skipped, vec!["probe x: failed".to_string()]);

        // The same through a tarball.
        let tgz = out.path().join("snap.tar.gz");
        write_tarball(&dest, &tgz).unwrap();
        let t = Host::snapshot(&tgz).unwrap();
        assert_eq!(
            t.read("/sys/class/infiniband/mlx5_0/ports/1/state").unwrap(),
            "4: ACTIVE\n"
        );
    }

    /// A fake root whose library directory holds NCCL, the verbs libraries and a provider
    /// among unrelated libraries, small and large: the capture keeps the first by name
    /// (the NCCL version is read back from the snapshot) and none of the others, and skips
    /// nothing.
    #[test]
    fn a_library_directory_keeps_only_the_libraries_the_probes_name() {
        let src = tempfile::tempdir().unwrap();
        let lib = src.path().join("usr/lib/x86_64-linux-gnu");
        std::fs::create_dir_all(lib.join("gtk-3.0")).unwrap();
        std::fs::create_dir_all(src.path().join("sys/class/infiniband")).unwrap();
        for (name, bytes) in [
            ("libnccl.so.2.21.5", 300_000),
            ("libibverbs.so.1.14.50.0", 90_000),
            ("libmlx5-rdmav34.so", 1_000),
            ("libgtk-3.so.0.2404.32", 300_000),
            ("libz.so.1.3", 1_000),
            ("ld.so.cache", 100),
        ] {
            std::fs::write(lib.join(name), vec![0u8; bytes]).unwrap();
        }
        symlink("libnccl.so.2.21.5", lib.join("libnccl.so.2")).unwrap();
        symlink("libibverbs.so.1.14.50.0", lib.join("libibverbs.so.1")).unwrap();
        symlink("libz.so.1.3", lib.join("libz.so.1")).unwrap();

        let host = Host::snapshot(src.path()).unwrap().with_recording();
        let _ = host.list_dir("/sys/class/infiniband");
        let live = crate::nccl::version::NcclVersion::detect(&host, None);
        assert_eq!(live.version.as_deref(), Some("2.21.5"));
        let out = tempfile::tempdir().unwrap();
        let dest = out.path().join("snap");
        let summary = write_tree(&host, src.path(), &dest, Vec::new()).unwrap();
        assert_eq!(summary.skipped, Vec::<String>::new());

        let mut kept: Vec<String> = std::fs::read_dir(dest.join("usr/lib/x86_64-linux-gnu"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        kept.sort();
        assert_eq!(
            kept,
            [
                "libibverbs.so.1",
                "libibverbs.so.1.14.50.0",
                "libmlx5-rdmav34.so",
                "libnccl.so.2",
                "libnccl.so.2.21.5"
            ]
        );
        let back = Host::snapshot(&dest).unwrap();
        let replayed = crate::nccl::version::NcclVersion::detect(&back, None);
        assert_eq!(replayed.version, live.version);
        assert_eq!(replayed.source, "/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5");
    }

    #[test]
    fn a_non_empty_directory_is_refused_in_one_plain_line() {
        let out = tempfile::tempdir().unwrap();
        std::fs::write(out.path().join("x"), "").unwrap();
        let src = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(src.path().join("sys")).unwrap();
        let host = Host::snapshot(src.path()).unwrap().with_recording();
        let e = capture(&host, src.path(), out.path()).unwrap_err();
        let chain = format!("{:#}", anyhow::Error::from(e));
        assert_eq!(chain.matches("directory is not empty").count(), 1, "{chain}");
    }

    #[test]
    fn failed_live_read_is_recorded_and_replayed() {
        // Root can read anything, so drive the failure path with a source that vanished.
        let out = tempfile::tempdir().unwrap();
        let mut m = Mirror {
            host: None,
            src: Path::new("/nonexistent-src"),
            dest: out.path(),
            summary: CaptureSummary::default(),
            walked: Default::default(),
        };
        m.copy_file(Path::new("/sys/class/infiniband/x/gid_attrs/types/9"), None)
            .unwrap();
        assert_eq!(m.summary.failed_reads.len(), 1);
        assert!(
            out.path()
                .join("sys/class/infiniband/x/gid_attrs/types/9")
                .exists()
        );
    }
}
