//! A rank's data port that flapped during the run (issue 45): its netdev's carrier counters
//! moved between the start and the end of the run. Reported as what it was, a hiccup of
//! the link to the switch, beside whatever else the run measured. Pure: the counters are
//! read through the host by `evidence::carrier`.

use std::collections::BTreeMap;

use serde_json::json;

use crate::ring::model::{CounterMove, Rank, RankInfo, Verdict, VerdictKind};

/// A netdev's carrier counters (`carrier_changes`; `carrier_up_count` and
/// `carrier_down_count` from Linux 4.16); None: absent or unreadable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Carrier {
    pub changes: Option<u64>,
    pub up: Option<u64>,
    pub down: Option<u64>,
}

/// The counter names as the report shows them.
const CHANGES: &str = "carrier_changes";
const UP: &str = "carrier_up_count";
const DOWN: &str = "carrier_down_count";

/// The carrier counters of `ifname` that moved from `before` to `after`, as counter moves
/// (device: the netdev, port 0). A counter that went backwards (the netdev was re-created)
/// is no move.
pub fn moves(before: &Carrier, after: &Carrier, ifname: &str, rank: Rank, host: &str) -> Vec<CounterMove> {
    [
        (CHANGES, before.changes, after.changes),
        (UP, before.up, after.up),
        (DOWN, before.down, after.down),
    ]
    .into_iter()
    .filter_map(|(name, b, a)| {
        let delta = a?.checked_sub(b?).filter(|d| *d > 0)?;
        Some(CounterMove {
            rank,
            host: host.to_string(),
            device: ifname.to_string(),
            port: 0,
            netdev: Some(ifname.to_string()),
            counter: name.to_string(),
            delta,
        })
    })
    .collect()
}

/// One PORT FLAPPED verdict per rank whose data port's carrier changed (each rank's latest
/// counters, as the coordinator keeps them), to investigate.
pub fn verdicts(port_counters: &BTreeMap<Rank, Vec<CounterMove>>, ranks: &[RankInfo]) -> Vec<Verdict> {
    let mut out = Vec::new();
    for (&r, moved) in port_counters {
        let get = |name: &str| moved.iter().find(|m| m.counter == name && m.netdev.is_some());
        let Some(changes) = get(CHANGES).or(get(DOWN)) else {
            continue;
        };
        let dev = changes.device.clone();
        let host = ranks
            .iter()
            .find(|i| i.rank == r)
            .map_or_else(|| changes.host.clone(), |i| i.host.clone());
        let (up, down) = (get(UP).map(|m| m.delta), get(DOWN).map(|m| m.delta));
        let how = match (down, up) {
            (Some(d), Some(u)) => format!(" (down {d}, up {u})"),
            _ => String::new(),
        };
        let n = get(CHANGES).map(|m| m.delta);
        let mut evidence = BTreeMap::from([("netdev".to_string(), json!(dev))]);
        for (k, v) in [(CHANGES, n), ("carrier_up", up), ("carrier_down", down)] {
            if let Some(v) = v {
                evidence.insert(k.to_string(), json!(v));
            }
        }
        let shown = crate::ring::model::shown(ranks, r);
        out.push(Verdict {
            kind: VerdictKind::PortFlapped,
            from_rank: Some(r),
            to_rank: None,
            from_host: Some(host.clone()),
            to_host: None,
            evidence,
            message: format!(
                "PORT FLAPPED rank {shown} ({host}, {dev}): its carrier changed {} during the run{how}: the link \
                 to the switch went down and came back, a hiccup of this port; what the run measured across it \
                 is said beside",
                n.map_or_else(|| "at least once".to_string(), |n| format!("{n} times")),
            ),
            next: Some(format!(
                "on {host}: `ip -s link show {dev}` (carrier changes) and the switch port's log for the link going \
                 down; `fabprobe links` (error counters); if it flaps again, reseat or replace the cable or optic"
            )),
            rail: None,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::diagnosis::localize::sim::ranks;
    use crate::ring::diagnosis::pastes::assert_next_pastes;

    fn c(changes: Option<u64>, up: Option<u64>, down: Option<u64>) -> Carrier {
        Carrier { changes, up, down }
    }

    #[test]
    fn only_counters_that_moved_forward_are_moves() {
        let m = moves(
            &c(Some(1), Some(1), Some(0)),
            &c(Some(3), Some(2), Some(1)),
            "eth1",
            2,
            "node-c",
        );
        let got: Vec<_> = m.iter().map(|m| (m.counter.as_str(), m.delta)).collect();
        assert_eq!(got, [(CHANGES, 2), (UP, 1), (DOWN, 1)]);
        // Nothing moved; a counter that went back (a re-created netdev); absent counters.
        for (a, b) in [
            (c(Some(3), Some(2), Some(1)), c(Some(3), Some(2), Some(1))),
            (c(Some(9), None, None), c(Some(1), None, None)),
            (c(None, None, None), c(Some(4), None, None)),
        ] {
            assert!(moves(&a, &b, "eth1", 2, "node-c").is_empty(), "{a:?} {b:?}");
        }
    }

    #[test]
    fn a_rank_whose_carrier_changed_is_named_and_no_other() {
        let r = ranks(4);
        let mut pc = BTreeMap::new();
        pc.insert(
            2,
            moves(
                &c(Some(1), Some(1), Some(0)),
                &c(Some(3), Some(2), Some(1)),
                "eth1",
                2,
                "node-c",
            ),
        );
        // Rank 1's counters moved too, but none of them is a carrier's.
        pc.insert(
            1,
            vec![CounterMove {
                rank: 1,
                host: "node-b".into(),
                device: "mlx5_1".into(),
                port: 1,
                netdev: Some("eth1".into()),
                counter: "port_rcv_errors".into(),
                delta: 4,
            }],
        );
        let v = verdicts(&pc, &r);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(
            (v[0].kind, v[0].from_rank, v[0].to_rank),
            (VerdictKind::PortFlapped, Some(2), None)
        );
        assert_eq!(v[0].action(), crate::ring::model::Action::Investigate);
        assert_eq!(
            v[0].message,
            "PORT FLAPPED rank 2 (node-c, eth1): its carrier changed 2 times during the run (down 1, up 1): the \
             link to the switch went down and came back, a hiccup of this port; what the run measured across it \
             is said beside"
        );
        assert_eq!(v[0].evidence["carrier_changes"], json!(2));
        assert_eq!(assert_next_pastes(&v[0])[0], "ip -s link show eth1");
        assert!(verdicts(&BTreeMap::new(), &r).is_empty());
    }
}
