//! NCCL's view of a node's PCI tree (`src/graph/topo.cc`, `paths.cc` @ NCCL 2.30.7):
//! which bridges become switch nodes, the Broadcom two-level switch flattening, and the
//! path type (LOC/NVL/NVB/PIX/PXB/PHB/SYS) NCCL gives a pair of devices. Pure functions;
//! the topo probe and the GDR checks share them.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// NCCL path types (`graph.h`), best first. PXN, P2C, C2C, NET and DIS are routing or
/// Grace-only types that a PCI/NVLink pair classification never yields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum PathType {
    Loc,
    Nvl,
    Nvb,
    Pix,
    Pxb,
    Phb,
    Sys,
}

impl PathType {
    pub fn as_str(self) -> &'static str {
        match self {
            PathType::Loc => "LOC",
            PathType::Nvl => "NVL",
            PathType::Nvb => "NVB",
            PathType::Pix => "PIX",
            PathType::Pxb => "PXB",
            PathType::Phb => "PHB",
            PathType::Sys => "SYS",
        }
    }
}

impl PathType {
    /// A path type name as NCCL spells it (`topoPathTypeStr`).
    pub(crate) fn from_name(s: &str) -> Option<PathType> {
        Some(match s {
            "LOC" => PathType::Loc,
            "NVL" => PathType::Nvl,
            "NVB" => PathType::Nvb,
            "PIX" => PathType::Pix,
            "PXB" => PathType::Pxb,
            "PHB" => PathType::Phb,
            "SYS" => PathType::Sys,
            _ => return None,
        })
    }
}

/// One of NCCL's level names (`params::LEVELS`, as `params::parse_level` reads a variable)
/// in this PCI classification's order: `C2C`, `P2C` and `PXN` are Grace/routing levels it
/// never yields, so C2C orders below PIX (read as NVB), P2C and PXN between PXB and PHB
/// (read as PXB). The one parser of the variable's value is `params::parse_level`.
pub(crate) fn level_as_path_type(name: &str) -> Option<PathType> {
    match name {
        "C2C" => Some(PathType::Nvb),
        "P2C" | "PXN" => Some(PathType::Pxb),
        n => PathType::from_name(n),
    }
}

/// The switch nodes NCCL makes from a device's bridge chain (root port first, device
/// excluded): cutting the device path two components at a time, every second bridge above
/// the device (a switch's upstream port) becomes a node; downstream and root ports vanish.
/// Returned top (nearest the CPU) first.
pub(crate) fn switch_nodes(bridges: &[String]) -> Vec<String> {
    // The device sits at index n; its parents are at n-2, n-4, ... while >= 0.
    let n = bridges.len() as isize;
    let mut out = Vec::new();
    let mut i = n - 2;
    while i >= 0 {
        out.push(bridges[i as usize].clone());
        i -= 2;
    }
    out.reverse();
    out
}

/// `(vendor<<48 | device<<32 | subsystem_vendor<<16 | subsystem_device)`, NCCL's
/// `pci.device` of a switch node.
pub(crate) fn bcm_ident(vendor: u32, device: u32, subsystem_vendor: u32, subsystem_device: u32) -> u64 {
    ((vendor as u64 & 0xffff) << 48)
        | ((device as u64 & 0xffff) << 32)
        | ((subsystem_vendor as u64 & 0xffff) << 16)
        | (subsystem_device as u64 & 0xffff)
}

/// NCCL's `getBcmGen`: 4 or 5 for a Broadcom PEX switch of that generation at `level`
/// (0 = the parent switch, 1 = a sub-switch), else 0.
pub(crate) fn bcm_gen(ident: u64, level: u64) -> u32 {
    const MASK: u64 = !0xfff;
    if ident & MASK == 0x1000_c010_1000_a000 {
        4
    } else if ident & MASK == 0x1000_c030_1000_0000 | (level * 0x1000) {
        5
    } else {
        0
    }
}

/// Where one device hangs in the tree, as both classifiers need it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Attach {
    /// The NUMA node of the host bridge (NCCL's `<cpu numaid>`); -1 when unknown.
    pub numa: i32,
    /// The root bus (`pci0000:00`), when known (an NCCL XML file does not keep it).
    pub root: Option<String>,
    /// Switch nodes, top first (bus ids of upstream ports).
    pub switches: Vec<String>,
    /// `DDDD:BB:DD` of the device: equal values are functions of one adapter.
    pub slot: Option<String>,
}

/// `0000:21:00.1` → `0000:21:00`.
pub fn slot_of(bdf: &str) -> Option<String> {
    bdf.rsplit_once('.').map(|(s, _)| s.to_string())
}

/// Map each flattened sub-switch to the switch it is fused into (`ncclTopoFlattenBcmSwitches`).
/// `parents`: switch → its parent switch; `idents`: switch → [`bcm_ident`].
pub(crate) fn bcm_flatten(
    parents: &HashMap<String, String>,
    idents: &HashMap<String, u64>,
) -> HashMap<String, String> {
    let depth = |s: &String| {
        let mut s = s.as_str();
        let mut d = 0;
        while let Some(p) = parents.get(s) {
            d += 1;
            s = p.as_str();
            if d > 64 {
                break;
            }
        }
        d
    };
    // NCCL walks switches parents first; a fused switch is gone, and a switch that fused its
    // children has its id zeroed, so only one level is ever flattened.
    let mut children: Vec<(&String, &String)> = parents.iter().collect();
    children.sort_by_key(|(c, p)| (depth(p), (*p).clone(), (*c).clone()));
    let mut fused = HashMap::new();
    for (child, parent) in children {
        if fused.contains_key(parent) {
            continue;
        }
        let (Some(&pi), Some(&ci)) = (idents.get(parent), idents.get(child)) else {
            continue;
        };
        let generation = bcm_gen(pi, 0);
        if generation != 0 && bcm_gen(ci, 1) == generation {
            fused.insert(child.clone(), parent.clone());
        }
    }
    fused
}

/// Apply a flattening to a switch list: fused sub-switches become their parent.
pub(crate) fn flattened(switches: &[String], fused: &HashMap<String, String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(switches.len());
    for s in switches {
        let s = fused.get(s).unwrap_or(s);
        if out.last() != Some(s) {
            out.push(s.clone());
        }
    }
    out
}

fn common_prefix(a: &[String], b: &[String]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Switches a PCIe path between two devices under one host crosses (0: it goes through the
/// host bridge or both are functions of one device; 1: one switch; more: PXB).
pub(crate) fn switches_crossed(a: &[String], b: &[String]) -> usize {
    let c = common_prefix(a, b);
    if c == 0 {
        0
    } else {
        (a.len() - c) + (b.len() - c) + 1
    }
}

/// NCCL's PCI path type between two devices (no NVLink): SYS across CPUs (NUMA domains),
/// PHB through the CPU, PXB across a switch-to-switch hop, PIX through one switch.
/// `nics` merges the functions of one adapter into one node (LOC), as NCCL's IB plugin does.
pub(crate) fn pci_path(a: &Attach, b: &Attach, fused: &HashMap<String, String>, both_nics: bool) -> PathType {
    if a.numa != b.numa {
        return PathType::Sys;
    }
    if both_nics && a.slot.is_some() && a.slot == b.slot {
        return PathType::Loc;
    }
    let (fa, fb) = (flattened(&a.switches, fused), flattened(&b.switches, fused));
    match switches_crossed(&fa, &fb) {
        0 => PathType::Phb,
        1 => PathType::Pix,
        _ => PathType::Pxb,
    }
}

/// NVLink between GPUs `i` and `j` as NCCL sees it: NVL over a direct link or an NVSwitch,
/// NVB through one intermediate GPU (direct links only), else None (PCI decides).
/// `nv[i][j]` is the NVLink count between GPUs (switch-routed counts included);
/// `direct[i][j]` is the direct GPU-to-GPU link count only.
pub(crate) fn nvlink_path(i: usize, j: usize, nv: &[Vec<u32>], direct: &[Vec<u32>]) -> Option<PathType> {
    if nv.get(i)?.get(j).copied().unwrap_or(0) > 0 {
        return Some(PathType::Nvl);
    }
    let n = direct.len();
    let relay = (0..n).any(|k| {
        k != i
            && k != j
            && direct[i].get(k).copied().unwrap_or(0) > 0
            && direct.get(k).and_then(|r| r.get(j)).copied().unwrap_or(0) > 0
    });
    relay.then_some(PathType::Nvb)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn net_gdr_level() {
        // The variable's raw value, through the one parser, to the PCI view.
        let view = |raw: &str| crate::nccl::params::parse_level(raw).and_then(level_as_path_type);
        assert_eq!(view("PHB"), Some(PathType::Phb));
        assert_eq!(view("SYS"), Some(PathType::Sys));
        assert_eq!(view("0"), Some(PathType::Loc));
        assert_eq!(view("2"), Some(PathType::Pxb));
        assert_eq!(view("9"), Some(PathType::Sys));
        assert_eq!(view("P2C"), Some(PathType::Pxb));
        assert_eq!(view("PXN"), Some(PathType::Pxb));
        assert_eq!(view("C2C"), Some(PathType::Nvb));
        assert_eq!(view("pxb"), None);
        assert_eq!(view(""), None);
        for l in crate::nccl::params::LEVELS {
            assert!(level_as_path_type(l).is_some(), "{l}");
        }
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn switch_nodes_take_every_second_bridge() {
        let cases: [(&[&str], &[&str]); 5] = [
            (&[], &[]),
            (&["rp"], &[]),
            (&["rp", "usp", "dsp"], &["usp"]),
            (&["rp", "usp1", "dsp1", "usp2", "dsp2"], &["usp1", "usp2"]),
            (&["rp", "br"], &["rp"]),
        ];
        for (bridges, want) in cases {
            assert_eq!(switch_nodes(&s(bridges)), s(want), "{bridges:?}");
        }
    }

    #[test]
    fn broadcom_generations() {
        // OCI BM.GPU.H100.8: 1000:c030 subsystem 1000:0072 (level 0), 1000:1003 (level 1).
        let top = bcm_ident(0x1000, 0xc030, 0x1000, 0x0072);
        let sub = bcm_ident(0x1000, 0xc030, 0x1000, 0x1003);
        assert_eq!(top, 0x1000_c030_1000_0072);
        assert_eq!(bcm_gen(top, 0), 5);
        assert_eq!(bcm_gen(sub, 1), 5);
        assert_eq!(bcm_gen(sub, 0), 0);
        assert_eq!(bcm_gen(top, 1), 0);
        let gen4 = bcm_ident(0x1000, 0xc010, 0x1000, 0xa064);
        assert_eq!(bcm_gen(gen4, 0), 4);
        assert_eq!(bcm_gen(gen4, 1), 4);
        assert_eq!(bcm_gen(bcm_ident(0x10b5, 0xc010, 0x1000, 0xa000), 0), 0);
    }

    #[test]
    fn pci_paths() {
        let at = |numa, sw: &[&str], slot: &str| Attach {
            numa,
            root: None,
            switches: s(sw),
            slot: Some(slot.into()),
        };
        let none = HashMap::new();
        let gpu0 = at(0, &["08", "0d"], "0000:0f:00");
        let nic0 = at(0, &["08", "0a"], "0000:0c:00");
        let gpu1 = at(0, &["26", "2b"], "0000:2d:00");
        let gpu4 = at(1, &["82", "87"], "0000:89:00");
        assert_eq!(pci_path(&gpu0, &nic0, &none, false), PathType::Pxb);
        assert_eq!(pci_path(&gpu0, &gpu1, &none, false), PathType::Phb);
        assert_eq!(pci_path(&gpu0, &gpu4, &none, false), PathType::Sys);
        // Broadcom flattening fuses 0d and 0a into 08: GPU0-NIC0 becomes PIX.
        let fused: HashMap<String, String> = [
            ("0d".to_string(), "08".to_string()),
            ("0a".to_string(), "08".to_string()),
        ]
        .into();
        assert_eq!(pci_path(&gpu0, &nic0, &fused, false), PathType::Pix);
        // Two ports of one adapter are one NCCL NIC.
        let p0 = at(0, &["08"], "0000:0c:00");
        let p1 = at(0, &["08"], "0000:0c:00");
        assert_eq!(pci_path(&p0, &p1, &none, true), PathType::Loc);
        assert_eq!(pci_path(&p0, &p1, &none, false), PathType::Pix);
    }

    #[test]
    fn flattening_needs_matching_levels() {
        let parents: HashMap<String, String> = [
            ("0d".to_string(), "08".to_string()),
            ("0a".to_string(), "08".to_string()),
            ("x1".to_string(), "x0".to_string()),
        ]
        .into();
        let idents: HashMap<String, u64> = [
            ("08".to_string(), bcm_ident(0x1000, 0xc030, 0x1000, 0x0072)),
            ("0d".to_string(), bcm_ident(0x1000, 0xc030, 0x1000, 0x1003)),
            ("0a".to_string(), bcm_ident(0x1000, 0xc030, 0x1000, 0x1003)),
            // A PLX/Microchip pair is never flattened.
            ("x0".to_string(), bcm_ident(0x10b5, 0x8796, 0x10b5, 0x8796)),
            ("x1".to_string(), bcm_ident(0x10b5, 0x8796, 0x10b5, 0x8796)),
        ]
        .into();
        let f = bcm_flatten(&parents, &idents);
        assert_eq!(f.len(), 2);
        assert_eq!(f["0d"], "08");
        assert_eq!(flattened(&s(&["08", "0d"]), &f), s(&["08"]));
    }

    #[test]
    fn nvlink_relay_is_nvb() {
        // 0-1 and 1-2 direct, 0-2 none: NVB through GPU1.
        let direct = vec![vec![0, 2, 0], vec![2, 0, 2], vec![0, 2, 0]];
        assert_eq!(nvlink_path(0, 1, &direct, &direct), Some(PathType::Nvl));
        assert_eq!(nvlink_path(0, 2, &direct, &direct), Some(PathType::Nvb));
        let none = vec![vec![0; 3]; 3];
        assert_eq!(nvlink_path(0, 2, &none, &none), None);
    }
}
