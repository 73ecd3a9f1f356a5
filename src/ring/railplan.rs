//! `--rails` across nodes, the plan: every node declares its rail slots in its hello on the
//! job's one coordinator port (see [`crate::ring::railmux`]), and rank 0 forms each rail's
//! ring from the declarations. Rail k's ring is formed by the nodes that drive rail k, in
//! node order (renumbered 0..m: the coordinator and the data plane see an ordinary ring of
//! m ranks), so one node without rail k leaves rail k untested only on itself. Pure.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ring::model::{RailPort, Rank};
pub use crate::ring::wire::Seat;

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

pub fn seats_of(rings: &BTreeMap<u32, Vec<Rank>>, rank: Rank) -> Vec<Seat> {
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
pub fn plan(
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
