//! `--rails` across nodes, the plan: every node declares its rail slots in its hello on the
//! job's one coordinator port (the node door and its relay), and rank 0 forms each rail's
//! ring from the declarations. Rail k's ring is formed by the nodes that drive rail k, in
//! node order (renumbered 0..m: the coordinator and the data plane see an ordinary ring of
//! m ranks), so one node without rail k leaves rail k untested only on itself. Pure.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use std::net::IpAddr;

use crate::nccl::hca::{HcaSpec, PortCandidate};
use crate::nccl::ifname::{self, IfAddr, IfSpec};
use crate::ring::model::{MAX_RAILS, RailPort, Rank};
use crate::text::printable;
pub use crate::ring::wire::Seat;
use crate::sysfs::infiniband::NumName;

/// What one node declares: its rank and host, and every rail slot it has (driven or not).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Declaration {
    pub rank: Rank,
    pub host: String,
    pub slots: Vec<RailPort>,
}

/// Rank 0's view after the exchange.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Roster {
    /// The job's node count.
    pub world: u32,
    /// Every node that declared, by rank (rank 0 included).
    pub nodes: BTreeMap<Rank, Declaration>,
    /// Each rail of this job and the node ranks of its ring, in ring order (a node that
    /// never declared is kept on every rail: its ring names it as missing, as without rails).
    pub rings: BTreeMap<u32, Vec<Rank>>,
    /// Ranks that did not declare within the join window.
    pub silent: Vec<Rank>,
}

impl Roster {
    /// The seats of node `rank`: the rails whose ring has it and at least one other node.
    pub fn seats(&self, rank: Rank) -> Vec<Seat> {
        seats_of(&self.rings, rank)
    }
}

/// Every node's seats at once, by node rank (`world` entries): one pass over each ring, where
/// [`seats_of`] per node would search every ring for each (16,384 nodes x 8 rails took a
/// third of a second before the first seat went out). Pure.
pub(crate) fn all_seats(rings: &BTreeMap<u32, Vec<Rank>>, world: u32) -> Vec<Vec<Seat>> {
    let mut seats = vec![Vec::new(); world as usize];
    for (&rail, nodes) in rings.iter().filter(|(_, nodes)| nodes.len() >= 2) {
        // A node listed twice keeps its first place, as `seats_of` finds it.
        for (at, &node) in nodes.iter().enumerate().rev() {
            if let Some(s) = seats.get_mut(node as usize) {
                if s.last().is_some_and(|x: &Seat| x.rail == rail) {
                    s.pop();
                }
                s.push(Seat {
                    rail,
                    rank: at as Rank,
                    world: nodes.len() as u32,
                });
            }
        }
    }
    seats
}

pub(crate) fn seats_of(rings: &BTreeMap<u32, Vec<Rank>>, rank: Rank) -> Vec<Seat> {
    rings
        .iter()
        .filter(|(_, nodes)| nodes.len() >= 2)
        .filter_map(|(&rail, nodes)| {
            let at = nodes.iter().position(|&r| r == rank)?;
            Some(Seat {
                rail,
                rank: at as Rank,
                world: nodes.len() as u32,
            })
        })
        .collect()
}

/// The rails of this job and who drives each. `wanted`: the rails the flag names (None:
/// `all`, a rail at least half the nodes have a slot for, as the job's report judges). A
/// node drives rail k if its slot k is usable; a node that did not declare is put on
/// every rail. Pure.
pub(crate) fn plan(
    nodes: &BTreeMap<Rank, Declaration>,
    world: u32,
    wanted: Option<&[u32]>,
) -> BTreeMap<u32, Vec<Rank>> {
    let silent = |r: &Rank| !nodes.contains_key(r);
    let mut rails: Vec<u32> = nodes
        .values()
        .flat_map(|d| d.slots.iter().map(|s| s.rail))
        .chain(wanted.unwrap_or(&[]).iter().copied())
        .collect();
    rails.sort_unstable();
    rails.dedup();
    let quiet = (0..world).filter(silent).count() as u32;
    rails
        .into_iter()
        .filter(|k| match wanted {
            Some(w) => w.contains(k),
            None => {
                let has = nodes
                    .values()
                    .filter(|d| d.slots.iter().any(|s| s.rail == *k))
                    .count() as u32;
                (has + quiet) * 2 >= world.max(1)
            }
        })
        .map(|k| {
            let ring = (0..world)
                .filter(|r| silent(r) || nodes[r].slots.iter().any(|s| s.rail == k && s.usable))
                .collect();
            (k, ring)
        })
        .collect()
}

// ---- the rail slots of one node, and the selection --rails makes of them ----

/// `--rails`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RailSel {
    /// Today's single-rail run (the default).
    One,
    /// Every rail slot of the node.
    All,
    /// The first N slots.
    Count(u32),
    /// These rail indices (`0,3`; a single one as `3,`).
    List(Vec<u32>),
}

impl RailSel {
    /// As `--rails` spells it (`1` for a run without it): part of the options every node
    /// must share, so a node of another mode is refused at the door naming both.
    pub(crate) fn canonical(&self) -> String {
        match self {
            RailSel::One => "1".into(),
            RailSel::All => "all".into(),
            RailSel::Count(n) => n.to_string(),
            RailSel::List(v) => {
                let s: Vec<String> = v.iter().map(u32::to_string).collect();
                // A single index keeps its comma (`3,`), as the flag takes it.
                if v.len() == 1 {
                    format!("{},", s[0])
                } else {
                    s.join(",")
                }
            }
        }
    }
}

/// `all`, `N` (1..=32) or a comma-separated list of rail indices. Pure.
pub fn parse_rails(s: &str) -> Result<RailSel, String> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("all") {
        return Ok(RailSel::All);
    }
    let index = |x: &str| -> Result<u32, String> {
        x.trim()
            .parse::<u32>()
            .ok()
            .filter(|&n| n < MAX_RAILS)
            .ok_or_else(|| {
                format!(
                    "--rails {s:?}: `{x}` is not a rail index from 0 to {}",
                    MAX_RAILS - 1
                )
            })
    };
    if t.contains(',') {
        let mut v = Vec::new();
        for x in t.split(',').filter(|x| !x.trim().is_empty()) {
            let i = index(x)?;
            if v.contains(&i) {
                return Err(format!("--rails {s:?}: rail {i} is listed twice"));
            }
            v.push(i);
        }
        if v.is_empty() {
            return Err(format!("--rails {s:?} lists no rail"));
        }
        v.sort_unstable();
        return Ok(RailSel::List(v));
    }
    match t.parse::<u32>() {
        Ok(1) => Ok(RailSel::One),
        Ok(n) if (2..=MAX_RAILS).contains(&n) => Ok(RailSel::Count(n)),
        _ => Err(format!(
            "--rails {s:?}: expected `all`, a number of rails from 1 to {MAX_RAILS}, or rail indices such as `0,2`"
        )),
    }
}

/// The rail slots `sel` asks for among a node's slots (in rail order). Slots it names that
/// the node lacks are simply absent here: rank 0 names them (`rail_missing`). Pure.
pub fn select(slots: &[RailPort], sel: &RailSel) -> Vec<RailPort> {
    slots
        .iter()
        .filter(|p| match sel {
            RailSel::One => p.rail == 0,
            RailSel::All => true,
            RailSel::Count(n) => p.rail < *n,
            RailSel::List(ix) => ix.contains(&p.rail),
        })
        .cloned()
        .collect()
}

/// The rail indices this run wants, where the selection says (None: `all`, every slot the
/// node has). Pure.
pub fn wanted(sel: &RailSel) -> Option<Vec<u32>> {
    match sel {
        RailSel::One => Some(vec![0]),
        RailSel::All => None,
        RailSel::Count(n) => Some((0..*n).collect()),
        RailSel::List(ix) => Some(ix.clone()),
    }
}

/// Over tcp: rail k is the k-th interface `spec` matches (NCCL_SOCKET_IFNAME syntax), in the
/// host's order, running or not (a stopped interface keeps its place: its rail is missing,
/// the next one is not shifted onto it); with no spec, the interfaces NCCL's default order
/// picks. Returns each slot with its address (the first one per name). Pure.
pub fn tcp_slots(ifs: &[IfAddr], spec: Option<&str>) -> Vec<(RailPort, IpAddr)> {
    let names: Vec<&IfAddr> = match spec.and_then(IfSpec::parse) {
        Some(s) => {
            let mut seen: Vec<&str> = Vec::new();
            ifs.iter()
                .filter(|i| !(i.addr.is_ipv6() && i.addr.is_loopback()) && s.matches(&i.name))
                .filter(|i| {
                    let new = !seen.contains(&i.name.as_str());
                    seen.push(&i.name);
                    new
                })
                .collect()
        }
        None => {
            let chosen = ifname::select(ifs, None, None, None);
            chosen
                .iter()
                .filter_map(|c| {
                    ifs.iter()
                        .find(|i| i.name == c.iface.name && i.addr == c.iface.addr)
                })
                .collect()
        }
    };
    names
        .into_iter()
        .enumerate()
        .map(|(k, i)| {
            (
                RailPort {
                    rail: k as u32,
                    device: i.name.clone(),
                    port: None,
                    netdev: Some(i.name.clone()),
                    state: Some(if i.running { "up" } else { "down" }.into()),
                    usable: i.running,
                    label: None,
                    address: None,
                },
                i.addr,
            )
        })
        .collect()
}

/// A port's state as the links probe read it: `ACTIVE`, or for any other state the
/// physical state too (`DOWN (phys Disabled)`, `INIT (phys LinkUp)`), so a rail_missing
/// verdict says what the port really is. Pure.
pub fn link_state(state: Option<&NumName>, phys: Option<&NumName>) -> Option<String> {
    let s = state?.name.clone();
    Some(match phys {
        Some(p) if s != "ACTIVE" => format!("{s} (phys {})", p.name),
        _ => s,
    })
}

/// `mlx5_10` after `mlx5_9`: the name's trailing number compares as a number.
fn natural_key(name: &str) -> (&str, u64) {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (stem, num) = name.split_at(name.len() - digits);
    (stem, num.parse().unwrap_or(0))
}

/// Over RDMA: rail k is the k-th port NCCL would use: `--device` (`mlx5_0,mlx5_1:1`, exact
/// names, in the order given), else the ports `NCCL_IB_HCA` allows in device order. Every
/// port keeps its slot whatever its state; an ACTIVE InfiniBand/Ethernet port is usable.
/// A `--device` entry that names no port of this node keeps its slot too, as state
/// `absent` (one slot, whatever ports it has elsewhere): this node lacks that rail, the
/// others still run it, and the job's report names it (`rail_missing`). Pure.
pub fn rdma_slots(
    ports: &[PortCandidate],
    device_flag: Option<&str>,
    hca_env: Option<&str>,
) -> Vec<RailPort> {
    let mut sorted: Vec<&PortCandidate> = ports.iter().collect();
    sorted.sort_by(|a, b| (natural_key(&a.device), a.port).cmp(&(natural_key(&b.device), b.port)));
    // A port, or a `--device` entry that matches none here.
    let chosen: Vec<Result<&PortCandidate, &str>> = match device_flag {
        Some(list) => {
            let mut out: Vec<Result<&PortCandidate, &str>> = Vec::new();
            for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
                let spec = HcaSpec::parse(&format!("={entry}"));
                let hits: Vec<&PortCandidate> = sorted
                    .iter()
                    .copied()
                    .filter(|p| spec.selects(&p.device, p.port))
                    .collect();
                if hits.is_empty() {
                    out.push(Err(entry));
                }
                for h in hits {
                    if !out.contains(&Ok(h)) {
                        out.push(Ok(h));
                    }
                }
            }
            out
        }
        None => {
            let spec = hca_env
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(HcaSpec::parse);
            sorted
                .into_iter()
                .filter(|p| spec.as_ref().is_none_or(|s| s.selects(&p.device, p.port)))
                .map(Ok)
                .collect()
        }
    };
    chosen
        .into_iter()
        .enumerate()
        .map(|(k, c)| match c {
            Ok(p) => RailPort {
                rail: k as u32,
                device: p.device.clone(),
                port: Some(p.port),
                netdev: p.netdevs.first().cloned(),
                state: p.state.clone(),
                usable: p.state.as_deref() == Some("ACTIVE")
                    && matches!(p.link_layer.as_deref(), Some("InfiniBand") | Some("Ethernet")),
                label: None,
                address: None,
            },
            Err(entry) => {
                let (device, port) = match entry.rsplit_once(':') {
                    Some((d, p)) => (d, p.parse().ok()),
                    None => (entry, None),
                };
                RailPort {
                    rail: k as u32,
                    device: printable(device, 64),
                    port,
                    netdev: None,
                    state: Some(ABSENT.into()),
                    usable: false,
                    label: None,
                    address: None,
                }
            }
        })
        .collect()
}

/// The state of a `--device` entry that names no RDMA port of this node.
pub const ABSENT: &str = "absent";

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(rail: u32, usable: bool) -> RailPort {
        RailPort {
            rail,
            device: format!("eth{}", rail + 1),
            port: None,
            netdev: Some(format!("eth{}", rail + 1)),
            state: Some(if usable { "up" } else { "down" }.into()),
            usable,
            label: None,
            address: None,
        }
    }

    fn node(rank: Rank, slots: Vec<RailPort>) -> (Rank, Declaration) {
        (
            rank,
            Declaration {
                rank,
                host: format!("node-{rank}"),
                slots,
            },
        )
    }

    #[test]
    fn all_seats_are_each_nodes_seats() {
        // Rail 2 has one node (no seat); node 1 is listed twice on rail 1 (its first place
        // counts); node 4 is on no ring; node 9 is past the world (ignored).
        let rings = BTreeMap::from([(0, vec![0, 1, 2, 3]), (1, vec![3, 1, 0, 1, 9]), (2, vec![2])]);
        let all = all_seats(&rings, 5);
        assert_eq!(all.len(), 5);
        for r in 0..5 {
            assert_eq!(all[r as usize], seats_of(&rings, r), "node {r}");
        }
        assert!(all[4].is_empty());
        assert_eq!(all[1][1].rank, 1);
    }

    #[test]
    fn plan_table() {
        let two = |r| node(r, vec![slot(0, true), slot(1, true)]);
        // node 1's rail 1 down: rail 1's ring is nodes 0 and 2.
        let nodes = BTreeMap::from([two(0), node(1, vec![slot(0, true), slot(1, false)]), two(2)]);
        let p = plan(&nodes, 3, None);
        assert_eq!(p, BTreeMap::from([(0, vec![0, 1, 2]), (1, vec![0, 2])]));
        assert_eq!(
            seats_of(&p, 2),
            [
                Seat {
                    rail: 0,
                    rank: 2,
                    world: 3
                },
                Seat {
                    rail: 1,
                    rank: 1,
                    world: 2
                }
            ]
        );
        assert_eq!(
            seats_of(&p, 1),
            [Seat {
                rail: 0,
                rank: 1,
                world: 3
            }]
        );
        // Rank 0 without rail 1 at all: the others still form it; it is the majority's rail.
        let nodes = BTreeMap::from([node(0, vec![slot(0, true)]), two(1), two(2)]);
        assert_eq!(plan(&nodes, 3, None)[&1], vec![1, 2]);
        assert_eq!(
            seats_of(&plan(&nodes, 3, None), 1)[1],
            Seat {
                rail: 1,
                rank: 0,
                world: 2
            }
        );
        // Only one node has rail 1 usable: listed, but no seat (a ring needs two).
        let nodes = BTreeMap::from([two(0), node(1, vec![slot(0, true), slot(1, false)])]);
        let p = plan(&nodes, 2, None);
        assert_eq!(p[&1], vec![0]);
        assert!(seats_of(&p, 0).iter().all(|s| s.rail == 0));
        // A rail only a minority has is no rail of the job (`all`); named, it is.
        let nodes = BTreeMap::from([node(0, vec![slot(0, true)]), node(1, vec![slot(0, true)]), two(2)]);
        assert!(!plan(&nodes, 3, None).contains_key(&1));
        assert_eq!(plan(&nodes, 3, Some(&[1]))[&1], vec![2]);
        // A node that never declared is on every rail (its ring names it missing).
        let nodes = BTreeMap::from([node(0, vec![slot(0, true), slot(1, false)])]);
        assert_eq!(
            plan(&nodes, 2, None),
            BTreeMap::from([(0, vec![0, 1]), (1, vec![1])])
        );
    }
}
