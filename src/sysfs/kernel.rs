//! Kernel, driver and library facts the GPUDirect checks need: `/proc/cmdline` IOMMU
//! options, the kernel release, `/proc/driver/nvidia/version`, the rdma-core version from
//! the `libibverbs.so.1` link name, IOMMU groups. Pure parsers plus thin readers.

use serde::Serialize;

use crate::host::Host;

/// The IOMMU options of a kernel command line, in order (`intel_iommu=on`, `iommu=pt`,
/// `amd_iommu=off`, `iommu.passthrough=1`, ...).
pub(crate) fn iommu_cmdline_flags(cmdline: &str) -> Vec<String> {
    cmdline
        .split_whitespace()
        .take_while(|w| *w != "--")
        .filter(|w| {
            w.starts_with("intel_iommu=")
                || w.starts_with("amd_iommu=")
                || w.starts_with("iommu=")
                || w.starts_with("iommu.passthrough=")
                || w.starts_with("iommu.strict=")
        })
        .map(str::to_string)
        .collect()
}

/// Whether the command line asks for passthrough (`iommu=pt`, `iommu.passthrough=1|y|on`);
/// `Some(false)` when it asks for translation (`iommu=nopt`, `iommu.passthrough=0`), `None`
/// when it says nothing (the kernel's build default decides).
pub(crate) fn cmdline_passthrough(flags: &[String]) -> Option<bool> {
    let mut v = None;
    for f in flags {
        match f.as_str() {
            "iommu=pt" => v = Some(true),
            "iommu=nopt" => v = Some(false),
            _ => {
                if let Some(x) = f.strip_prefix("iommu.passthrough=") {
                    v = Some(matches!(x, "1" | "y" | "Y" | "on"));
                }
            }
        }
    }
    v
}

/// `5.15.0-105-generic` → (5, 15).
pub(crate) fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor))
}

/// The first line of `/proc/driver/nvidia/version`:
/// `NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  555.58.02  Release Build ...`
/// → (open, "555.58.02"). The proprietary module's line lacks "Open".
pub(crate) fn parse_nvidia_version(text: &str) -> Option<(bool, String)> {
    let line = text.lines().next()?;
    let rest = line.strip_prefix("NVRM version:")?;
    let open = rest.contains("Open Kernel Module");
    let version = rest
        .split_whitespace()
        .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'))?
        .to_string();
    Some((open, version))
}

/// rdma-core's version from libibverbs' file name: `libibverbs.so.1.14.50.0` → 50
/// (rdma-core names the library `1.<abi minor>.<rdma-core major>.<patch>`).
pub(crate) fn rdma_core_from_soname(target: &str) -> Option<u32> {
    let name = target.rsplit('/').next()?;
    let rest = name.strip_prefix("libibverbs.so.1.")?;
    let parts: Vec<&str> = rest.split('.').collect();
    parts.get(1)?.parse().ok()
}

/// Where distributions put libibverbs.
pub(crate) const LIBIBVERBS_LINKS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/libibverbs.so.1",
    "/usr/lib/aarch64-linux-gnu/libibverbs.so.1",
    "/usr/lib64/libibverbs.so.1",
    "/usr/lib/libibverbs.so.1",
];

/// rdma-core's version and the link it came from.
pub(crate) fn read_rdma_core(host: &Host) -> Option<(u32, String)> {
    LIBIBVERBS_LINKS.iter().find_map(|l| {
        let t = host.read_link(l)?;
        let t = t.to_string_lossy().into_owned();
        rdma_core_from_soname(&t).map(|v| (v, format!("{l} -> {t}")))
    })
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IommuGroup {
    pub group: u32,
    /// `identity` (passthrough), `DMA`, `DMA-FQ`, `DMA-SQ`, `blocked`, `unmanaged`, `unknown`:
    /// the group's default domain.
    pub r#type: Option<String>,
}

/// `/sys/bus/pci/devices/<bdf>/iommu_group` → its group and type; `None` without an IOMMU.
pub(crate) fn read_iommu_group(host: &Host, bdf: &str) -> Option<IommuGroup> {
    let link = format!("/sys/bus/pci/devices/{bdf}/iommu_group");
    if !host.exists(&link) {
        return None;
    }
    let real = host.realpath(&link).ok()?;
    let group = real.file_name()?.to_str()?.parse().ok()?;
    let t = host
        .attr(format!("/sys/kernel/iommu_groups/{group}/type"))
        .value()
        .map(|s| s.trim().to_string());
    Some(IommuGroup { group, r#type: t })
}

/// A group type in which device DMA is translated (not passthrough).
pub(crate) fn is_translated(t: &str) -> bool {
    matches!(t, "DMA" | "DMA-FQ" | "DMA-SQ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmdline() {
        let f = iommu_cmdline_flags(
            "BOOT_IMAGE=/vmlinuz root=/dev/sda1 intel_iommu=on iommu=pt quiet -- iommu=nopt",
        );
        assert_eq!(f, vec!["intel_iommu=on", "iommu=pt"]);
        assert_eq!(cmdline_passthrough(&f), Some(true));
        let f = iommu_cmdline_flags("amd_iommu=on iommu.passthrough=0");
        assert_eq!(cmdline_passthrough(&f), Some(false));
        assert_eq!(cmdline_passthrough(&iommu_cmdline_flags("quiet")), None);
    }

    #[test]
    fn versions() {
        assert_eq!(kernel_version("5.15.0-105-generic"), Some((5, 15)));
        assert_eq!(kernel_version("6.8.0"), Some((6, 8)));
        assert_eq!(kernel_version("5"), None);
        assert_eq!(kernel_version(""), None);
        assert_eq!(
            parse_nvidia_version(
                "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  555.58.02  Release Build  (dvs-builder@U16-I3-B03-4-3)  Tue Jun 25 01:26:03 UTC 2024\nGCC version:  gcc version 12.3.0\n"
            ),
            Some((true, "555.58.02".to_string()))
        );
        assert_eq!(
            parse_nvidia_version(
                "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.08  Tue Mar  5 22:42:15 UTC 2024\n"
            ),
            Some((false, "535.161.08".to_string()))
        );
        assert_eq!(parse_nvidia_version("garbage"), None);
        assert_eq!(rdma_core_from_soname("libibverbs.so.1.14.44.0"), Some(44));
        assert_eq!(
            rdma_core_from_soname("/usr/lib64/libibverbs.so.1.14.50.0"),
            Some(50)
        );
        assert_eq!(rdma_core_from_soname("libibverbs.so.1"), None);
        assert_eq!(rdma_core_from_soname("libmlx5.so.1.24.44.0"), None);
    }
}
