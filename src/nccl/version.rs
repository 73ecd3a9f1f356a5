//! Which NCCL's rules apply: the version from `--nccl-version`, else the `libnccl.so.2.X.Y`
//! files on the job's library path (read through the host, so a snapshot carries them).
//! Rules that changed between versions and were read in NVIDIA/nccl's source:
//! * the default GID index: `NCCL_PARAM(IbGidIndex, "IB_GID_INDEX", 0)` and no automatic
//!   choice in 2.20.5 (`transport/net_ib.cc`); `-1` and `ncclIbGetGidIndex` since 2.21;
//! * the peer-memory files `ncclIbGdrSupport` checks: 2.20.5 reads only
//!   `/sys/kernel/mm/memory_peers/{nv_mem,nvidia-peermem}/version`; master reads
//!   `memory_peers/nv_mem`, `memory_peers/nv_mem_nc` and `/sys/module/nvidia_peermem/version`
//!   (the version each file appeared in is `probe::gdr`'s table).

use serde::Serialize;

use crate::host::Host;

/// Directories dlopen searches besides `LD_LIBRARY_PATH` (its defaults and the usual
/// multiarch ones; `/etc/ld.so.cache` itself is not parsed).
pub(crate) const LIB_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
    "/usr/local/lib",
];

/// `major.minor[.patch]`.
pub(crate) type Triple = (u32, u32, Option<u32>);

/// The NCCL version whose rules were applied, and how it was found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NcclVersion {
    /// `2.21.5`, `2.21` (from `--nccl-version`), or null when unknown.
    pub version: Option<String>,
    #[serde(skip)]
    pub parsed: Option<Triple>,
    /// `--nccl-version`, the library file found, or why it is unknown.
    pub source: String,
    /// Other NCCL versions found later on the library path (dlopen takes the first).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub also_found: Vec<String>,
}

/// `2.21`, `2.21.5` (a leading `v` is accepted). `None` for anything else.
pub(crate) fn parse_version(s: &str) -> Option<Triple> {
    let s = s.trim().strip_prefix('v').unwrap_or(s.trim());
    let mut it = s.split('.');
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    let patch = match it.next() {
        Some(p) => Some(p.parse().ok()?),
        None => None,
    };
    if it.next().is_some() {
        return None;
    }
    Some((major, minor, patch))
}

/// `libnccl.so.2.21.5` -> (2, 21, 5). `libnccl.so.2` (the soname link) says nothing.
pub(crate) fn parse_lib_name(name: &str) -> Option<Triple> {
    let v = parse_version(name.strip_prefix("libnccl.so.")?)?;
    v.2.map(|_| v)
}

fn text((a, b, c): Triple) -> String {
    match c {
        Some(c) => format!("{a}.{b}.{c}"),
        None => format!("{a}.{b}"),
    }
}

impl NcclVersion {
    /// From `--nccl-version`.
    pub fn given(s: &str) -> Option<NcclVersion> {
        let v = parse_version(s)?;
        Some(NcclVersion {
            version: Some(text(v)),
            parsed: Some(v),
            source: "--nccl-version".into(),
            also_found: Vec::new(),
        })
    }

    /// The first `libnccl.so.2.X.Y` in `LD_LIBRARY_PATH` then [`LIB_DIRS`] order.
    pub fn detect(host: &Host, ld_library_path: Option<&str>) -> NcclVersion {
        let mut dirs: Vec<String> = ld_library_path
            .unwrap_or("")
            .split(':')
            .filter(|d| !d.is_empty())
            .map(str::to_string)
            .collect();
        dirs.extend(LIB_DIRS.iter().map(|d| d.to_string()));
        let mut found: Vec<(String, Triple)> = Vec::new();
        for d in &dirs {
            let Ok(Some(mut names)) = host.list_dir(d) else {
                continue;
            };
            names.sort();
            for n in names {
                if let Some(v) = parse_lib_name(&n) {
                    found.push((format!("{}/{n}", d.trim_end_matches('/')), v));
                }
            }
        }
        let Some((path, v)) = found.first().cloned() else {
            return NcclVersion::unknown(
                "no libnccl.so.2.X.Y on the library path (LD_LIBRARY_PATH and the usual directories; a library bundled inside a Python wheel is not seen): give --nccl-version",
            );
        };
        let also_found = found
            .iter()
            .filter(|(_, x)| *x != v)
            .map(|(p, _)| p.clone())
            .collect();
        NcclVersion {
            version: Some(text(v)),
            parsed: Some(v),
            source: path,
            also_found,
        }
    }

    pub fn unknown(why: &str) -> NcclVersion {
        NcclVersion {
            version: None,
            parsed: None,
            source: why.to_string(),
            also_found: Vec::new(),
        }
    }

    /// Whether the version is at least `major.minor`; `None` when unknown.
    pub fn at_least(&self, major: u32, minor: u32) -> Option<bool> {
        self.parsed.map(|(a, b, _)| (a, b) >= (major, minor))
    }

    /// NCCL 2.21+ picks the GID index itself when `NCCL_IB_GID_INDEX` is unset; older
    /// versions use index 0. `None`: the version is unknown.
    pub(crate) fn gid_index_auto(&self) -> Option<bool> {
        self.at_least(2, 21)
    }

    /// One line for reports: `NCCL 2.21.5 (from ...)` or `NCCL version unknown (...)`.
    pub fn describe(&self) -> String {
        format!("{} ({})", rules_label(self.version.as_deref()), self.source)
    }
}

/// `NCCL 2.21.5 rules` or `NCCL version unknown`: whose rules a report applied, in one
/// wording for every command.
pub(crate) fn rules_label(version: Option<&str>) -> String {
    match version {
        Some(v) => format!("NCCL {v} rules"),
        None => "NCCL version unknown".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(parse_version("2.21"), Some((2, 21, None)));
        assert_eq!(parse_version("v2.21.5"), Some((2, 21, 5.into())));
        assert_eq!(parse_version("2"), None);
        assert_eq!(parse_version("2.x"), None);
        assert_eq!(parse_version("2.21.5.1"), None);
        assert_eq!(parse_lib_name("libnccl.so.2.21.5"), Some((2, 21, Some(5))));
        assert_eq!(parse_lib_name("libnccl.so.2"), None);
        assert_eq!(parse_lib_name("libnccl-net.so"), None);
    }

    #[test]
    fn version_rules() {
        let old = NcclVersion::given("2.20.5").unwrap();
        let new = NcclVersion::given("2.21").unwrap();
        assert_eq!(old.gid_index_auto(), Some(false));
        assert_eq!(new.gid_index_auto(), Some(true));
        assert_eq!(NcclVersion::unknown("x").gid_index_auto(), None);
        assert_eq!(NcclVersion::given("3.0").unwrap().at_least(2, 23), Some(true));
    }
}
