//! `/sys/devices/system/node/node<N>/`: NUMA nodes and their CPUs, and the `/proc/cpuinfo`
//! facts NCCL's topology XML carries about a CPU. Formats: kernel drivers/base/node.c
//! (`cpumap` is `"%*pb\n"`: comma-separated 32-bit hex words, most significant first;
//! `cpulist` is `"%*pbl\n"`: `0-55,112-167`).

use serde::{Deserialize, Serialize};

use crate::host::Host;

/// One NUMA node as sysfs shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NumaNode {
    pub id: i32,
    /// `cpulist` verbatim, e.g. `0-55,112-167`.
    pub cpulist: Option<String>,
    /// `cpumap` verbatim, e.g. `00ffffff,ffffffff` (what NCCL's `<cpu affinity>` holds).
    pub cpumap: Option<String>,
}

/// `node12` → 12; anything else (`has_cpu`, `possible`, `power`) → None.
pub fn parse_node_dir(name: &str) -> Option<i32> {
    let n = name.strip_prefix("node")?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

/// Every node under `/sys/devices/system/node`, in id order. Empty when the directory is
/// absent (a kernel without NUMA, a snapshot that did not capture it).
pub(crate) fn read_nodes(host: &Host) -> Vec<NumaNode> {
    let base = "/sys/devices/system/node";
    let Ok(Some(names)) = host.list_dir(base) else {
        return Vec::new();
    };
    let mut ids: Vec<i32> = names.iter().filter_map(|n| parse_node_dir(n)).collect();
    ids.sort_unstable();
    ids.into_iter()
        .map(|id| NumaNode {
            id,
            cpulist: host
                .attr(format!("{base}/node{id}/cpulist"))
                .value()
                .map(str::to_string),
            cpumap: host
                .attr(format!("{base}/node{id}/cpumap"))
                .value()
                .map(str::to_string),
        })
        .collect()
}

/// A cpumap (`"0000ffff,ffffffff"`, most significant word first) as a cpulist
/// (`"0-47"`), the form `nvidia-smi` prints. None when a word is not hex.
pub fn cpumap_to_cpulist(map: &str) -> Option<String> {
    let words: Vec<&str> = map.trim().split(',').collect();
    let mut cpus = Vec::new();
    for (i, w) in words.iter().rev().enumerate() {
        if w.is_empty() || w.len() > 8 {
            return None;
        }
        let v = u32::from_str_radix(w, 16).ok()?;
        for bit in 0..32 {
            if v & (1 << bit) != 0 {
                cpus.push(i * 32 + bit);
            }
        }
    }
    Some(format_cpulist(&cpus))
}

/// Sorted CPU numbers → `0-3,8,10-11`.
pub(crate) fn format_cpulist(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    out.join(",")
}

/// What NCCL's `<cpu>` element says about the processor (NCCL takes it from CPUID; the
/// first `processor` block of `/proc/cpuinfo` carries the same values).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuFacts {
    /// `x86_64`, `arm64` or `ppc64`, inferred from the fields present.
    pub arch: Option<String>,
    /// `vendor_id`: `GenuineIntel`, `AuthenticAMD`.
    pub vendor: Option<String>,
    /// `cpu family` (decimal).
    pub family_id: Option<u32>,
    /// `model` (decimal).
    pub model_id: Option<u32>,
}

/// Parse the first processor block of `/proc/cpuinfo`.
pub fn parse_cpuinfo(text: &str) -> CpuFacts {
    let mut f = CpuFacts::default();
    for line in text.lines() {
        if line.trim().is_empty() {
            if f.arch.is_some() {
                break; // end of the first processor block
            }
            continue;
        }
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        match k {
            "vendor_id" => {
                f.vendor = Some(v.to_string());
                f.arch = Some("x86_64".into());
            }
            "cpu family" => f.family_id = v.parse().ok(),
            "model" => f.model_id = v.parse().ok(),
            "CPU implementer" => f.arch = Some("arm64".into()),
            "cpu" if v.starts_with("POWER") => f.arch = Some("ppc64".into()),
            _ => {}
        }
    }
    f
}

/// `/proc/cpuinfo` through the host; default (all None) when unreadable.
pub(crate) fn read_cpu_facts(host: &Host) -> CpuFacts {
    host.read("/proc/cpuinfo")
        .map(|t| parse_cpuinfo(&t))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_dirs() {
        let cases = [
            ("node0", Some(0)),
            ("node12", Some(12)),
            ("node", None),
            ("has_cpu", None),
            ("possible", None),
            ("nodex", None),
        ];
        for (n, want) in cases {
            assert_eq!(parse_node_dir(n), want, "{n}");
        }
    }

    #[test]
    fn cpumaps_become_cpulists() {
        let cases = [
            ("00000000,0000ffff,ffffffff", Some("0-47")),
            ("ffffffff,ffff0000,00000000", Some("48-95")),
            ("0000000f", Some("0-3")),
            ("00000005", Some("0,2")),
            ("00000000", Some("")),
            // The OCI H100 node 0: CPUs 0-55 and 112-167 out of 224.
            (
                "00000000,000000ff,ffffffff,ffff0000,00000000,00ffffff,ffffffff",
                Some("0-55,112-167"),
            ),
            ("xyz", None),
            ("", None),
        ];
        for (m, want) in cases {
            assert_eq!(cpumap_to_cpulist(m).as_deref(), want, "{m}");
        }
    }

    #[test]
    fn cpuinfo() {
        let x86 = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n\
                   model name\t: Intel(R) Xeon(R) Platinum 8480+\n\nprocessor\t: 1\nvendor_id\t: AuthenticAMD\n";
        assert_eq!(
            parse_cpuinfo(x86),
            CpuFacts {
                arch: Some("x86_64".into()),
                vendor: Some("GenuineIntel".into()),
                family_id: Some(6),
                model_id: Some(143),
            }
        );
        let arm = "processor\t: 0\nBogoMIPS\t: 2000.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd4f\n";
        assert_eq!(parse_cpuinfo(arm).arch.as_deref(), Some("arm64"));
        assert_eq!(parse_cpuinfo("").arch, None);
    }
}
