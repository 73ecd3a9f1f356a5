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

/// The stall verdicts (`connection_stall`) each of whose stalled links has an end whose
/// port flapped: a link that went down stalls its connections, and that is the flap's, not
/// a path's MTU. Each leaves `verdicts` for the flap of its first link's end: its stalls join
/// the flap's evidence (`stalls`) and its message (no ping advice).
pub fn absorb_stalls(flaps: &mut [Verdict], verdicts: &mut Vec<Verdict>) {
    let flapped: Vec<Rank> = flaps.iter().filter_map(|f| f.from_rank).collect();
    if flapped.is_empty() {
        return;
    }
    let ends = |s: &serde_json::Value| -> Option<(Rank, Rank)> {
        Some((s["from_rank"].as_u64()? as Rank, s["to_rank"].as_u64()? as Rank))
    };
    verdicts.retain(|v| {
        let stalls = match (v.kind, v.evidence.get("stalls").and_then(|s| s.as_array())) {
            (VerdictKind::ConnectionStall, Some(s)) if !s.is_empty() => s,
            _ => return true,
        };
        let links: Option<Vec<(Rank, Rank)>> = stalls.iter().map(ends).collect();
        let Some(links) = links.filter(|l| l.iter().all(|(a, b)| flapped.contains(a) || flapped.contains(b)))
        else {
            return true;
        };
        let (a, b) = links[0];
        let Some(f) = flaps
            .iter_mut()
            .find(|f| f.from_rank == Some(a) || f.from_rank == Some(b))
        else {
            return true;
        };
        let said: Vec<String> = stalls
            .iter()
            .filter_map(|s| {
                let (a, b) = ends(s)?;
                Some(format!("{a} -> {b} {:.1} s", s["silence_s"].as_f64()?))
            })
            .collect();
        f.message.push_str(&format!(
            "; connections across it stalled meanwhile ({}): the flap's, not a path's MTU",
            said.join(", ")
        ));
        let list = f.evidence.entry("stalls".to_string()).or_insert(json!([]));
        if let Some(l) = list.as_array_mut() {
            l.extend(stalls.iter().cloned());
        }
        false
    });
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
    fn a_stall_across_a_flapped_port_is_the_flaps() {
        let r = ranks(4);
        let moved = BTreeMap::from([(
            2,
            moves(
                &c(Some(1), None, None),
                &c(Some(3), None, None),
                "eth1",
                2,
                "node-c",
            ),
        )]);
        let mut flaps = verdicts(&moved, &r);
        let base = flaps[0].clone();
        let stall = |links: &[(Rank, Rank)]| Verdict {
            kind: VerdictKind::ConnectionStall,
            evidence: BTreeMap::from([(
                "stalls".to_string(),
                json!(
                    links
                        .iter()
                        .map(|(a, b)| json!({"from_rank": a, "to_rank": b, "order": 0, "silence_s": 3.5}))
                        .collect::<Vec<_>>()
                ),
            )]),
            ..base.clone()
        };
        let other = Verdict {
            kind: VerdictKind::SlowLink,
            ..base.clone()
        };
        let mut v = vec![stall(&[(1, 2), (2, 3)]), stall(&[(0, 1)]), other.clone()];
        let lone = stall(&[(1, 2)]);
        absorb_stalls(&mut flaps, &mut v);
        // The stall through rank 2 is the flap's; the one on 0 -> 1 and the slow link stay.
        assert_eq!(v.len(), 2, "{v:?}");
        assert_eq!(v[0].evidence["stalls"][0]["from_rank"], json!(0));
        assert_eq!(v[1], other);
        assert!(
            flaps[0]
                .message
                .ends_with("; connections across it stalled meanwhile (1 -> 2 3.5 s, 2 -> 3 3.5 s): the flap's, not a path's MTU"),
            "{}",
            flaps[0].message
        );
        assert_eq!(flaps[0].evidence["stalls"].as_array().unwrap().len(), 2);
        assert!(!flaps[0].next.as_deref().unwrap().contains("ping"));
        // No flap: nothing moves.
        let mut v = vec![lone];
        absorb_stalls(&mut [], &mut v);
        assert_eq!(v.len(), 1);
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
