//! A rank's data port that flapped during the run (issue 45): its netdev's carrier counters
//! moved between the start and the end of the run. Reported as what it was, a hiccup of
//! the link to the switch, beside whatever else the run measured. Pure: the counters are
//! read through the host by `ring::portread::carrier`.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use crate::ring::diagnosis::stall::Stall;
use crate::ring::model::{CounterMove, Rank, RankInfo, Verdict, VerdictKind};

/// A netdev's carrier counters (`carrier_changes`; `carrier_up_count` and
/// `carrier_down_count` from Linux 4.16); None: absent or unreadable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Carrier {
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
pub(crate) fn moves(before: &Carrier, after: &Carrier, ifname: &str, rank: Rank, host: &str) -> Vec<CounterMove> {
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
pub(crate) fn verdicts(port_counters: &BTreeMap<Rank, Vec<CounterMove>>, ranks: &[RankInfo]) -> Vec<Verdict> {
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
        // Each key a literal where it is written: json_data's test reads them from here.
        let counts = [
            ("carrier_changes".to_string(), n),
            ("carrier_up".to_string(), up),
            ("carrier_down".to_string(), down),
        ];
        evidence.extend(counts.into_iter().filter_map(|(k, v)| v.map(|v| (k, json!(v)))));
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

/// The rank whose port flap explains verdict `v`, or None; `stalls`: the typed stalled
/// links a CONNECTION STALL verdict was built from (empty for every other kind). A flap
/// takes only what was measured across its port and what a link that went down and came
/// back makes of a measurement (issue 45: a hiccup reported as what it was). Each kind is
/// decided here, without a catch-all: a new kind must be weighed.
pub(crate) fn explained_by(v: &Verdict, stalls: &[Stall], flapped: &BTreeSet<Rank>) -> Option<Rank> {
    use VerdictKind::*;
    let on = |r: Option<Rank>| r.filter(|r| flapped.contains(r));
    match v.kind {
        // Slow while its carrier was down or the link retrained; a path slow on one
        // connection and not on the next is what a flap during one of them looks like.
        SlowLink | SlowPath => on(v.from_rank).or(on(v.to_rank)),
        // A node's every link out (in) is slow through its own port only: another rank's
        // flap slows one of them, never all.
        SlowEgress => on(v.from_rank),
        SlowIngress => on(v.to_rank),
        // Every stalled link touches a flapped port: its connections waited for the link.
        ConnectionStall if !stalls.is_empty() => {
            let ends = |s: &Stall| on(Some(s.from)).or(on(Some(s.to)));
            stalls
                .iter()
                .map(ends)
                .collect::<Option<Vec<Rank>>>()?
                .first()
                .copied()
        }
        // A stall verdict without its links is not weighed.
        ConnectionStall => None,
        // A hang outlasted the deadline and a completion error ended the run: what happened,
        // said beside the flap that may have caused it. A rank lost, stalled or unreachable,
        // the coordinator's own trouble: the control network and the processes, not the
        // data port. A rail missing, a port trained down: the port's state, read as it was.
        HangLink | LinkError | RankLost | RankStalled | RankUnreachable | CoordinatorLost
        | CoordinatorStalled | RailMissing | RailStopped | PortDowntrained | PortFlapped => None,
    }
}

/// What a taken verdict is called in its flap's message.
fn label(v: &Verdict, stalls: &[Stall], ranks: &[RankInfo]) -> String {
    let r = |x: Option<Rank>| {
        x.map_or_else(
            || "?".to_string(),
            |x| crate::ring::model::shown(ranks, x).to_string(),
        )
    };
    match v.kind {
        VerdictKind::ConnectionStall => format!(
            "connections across it stalled meanwhile ({}): the flap's, not a path's MTU",
            stalls
                .iter()
                .map(|s| s.said(ranks))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        VerdictKind::SlowEgress => format!(
            "the slow egress of rank {} measured meanwhile is the flap's",
            r(v.from_rank)
        ),
        VerdictKind::SlowIngress => format!(
            "the slow ingress of rank {} measured meanwhile is the flap's",
            r(v.to_rank)
        ),
        VerdictKind::SlowPath => format!(
            "the slow path {} -> {} measured meanwhile is the flap's",
            r(v.from_rank),
            r(v.to_rank)
        ),
        _ => format!(
            "the slow link {} -> {} measured meanwhile is the flap's",
            r(v.from_rank),
            r(v.to_rank)
        ),
    }
}

/// The verdicts that stay once each flap took what it explains ([`explained_by`]); `weighed`:
/// each verdict beside the typed stalls it was built from. A taken verdict joins its flap's
/// message and evidence (`stalls` for the stalled links, `explains` for the others: kind,
/// ranks, the message it would have had), never a verdict of its own: no MTU ping, no drain
/// or ticket for a hiccup.
pub(crate) fn absorb(
    flaps: &mut [Verdict],
    weighed: Vec<(Verdict, Vec<Stall>)>,
    ranks: &[RankInfo],
) -> Vec<Verdict> {
    let flapped: BTreeSet<Rank> = flaps.iter().filter_map(|f| f.from_rank).collect();
    let mut kept = Vec::new();
    for (v, stalls) in weighed {
        let flap = explained_by(&v, &stalls, &flapped)
            .and_then(|r| flaps.iter_mut().find(|f| f.from_rank == Some(r)));
        let Some(f) = flap else {
            kept.push(v);
            continue;
        };
        f.message.push_str(&format!("; {}", label(&v, &stalls, ranks)));
        let (list, add) = match v.kind {
            VerdictKind::ConnectionStall => (
                f.evidence.entry("stalls".to_string()),
                stalls.iter().map(Stall::json).collect(),
            ),
            _ => (
                f.evidence.entry("explains".to_string()),
                vec![
                    json!({"kind": v.kind, "from_rank": v.from_rank, "to_rank": v.to_rank, "message": v.message}),
                ],
            ),
        };
        if let Some(list) = list.or_insert(json!([])).as_array_mut() {
            list.extend(add);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::diagnosis::localize::sim::ranks;
    use crate::ring::diagnosis::pastes::assert_next_pastes;

    fn c(changes: Option<u64>, up: Option<u64>, down: Option<u64>) -> Carrier {
        Carrier { changes, up, down }
    }

    /// Rank 2's port flapped (carrier 1 -> 3).
    fn flapped_rank_2(r: &[RankInfo]) -> Vec<Verdict> {
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
        verdicts(&moved, r)
    }

    fn st(from: Rank, to: Rank) -> Stall {
        Stall {
            from,
            to,
            order: 0,
            seconds: 3.5,
        }
    }

    /// A verdict of `kind` naming `from` -> `to`.
    fn v(kind: VerdictKind, from: Option<Rank>, to: Option<Rank>) -> Verdict {
        Verdict {
            message: format!("{kind:?} {from:?} -> {to:?}"),
            ..Verdict::bare(kind, from, to)
        }
    }

    /// Every kind the diagnosis can give, with rank 2's port flapped: taken by the flap
    /// where it was measured across rank 2's port, kept where it names rank 2 for anything
    /// else, and kept, each, when the same verdict names only ranks whose ports held
    /// (the control: rank 2's flap on an unrelated rank).
    #[test]
    fn a_flap_takes_what_was_measured_across_its_port_and_nothing_else() {
        use VerdictKind::*;
        let r = ranks(4);
        let none: &[Stall] = &[];
        let through_2: &[Stall] = &[st(1, 2), st(2, 3)];
        let on_unrelated: &[Stall] = &[st(0, 1)];
        let partly: &[Stall] = &[st(1, 2), st(0, 1)];
        // (verdict, its stalls, taken by rank 2's flap)
        let table: Vec<(Verdict, &[Stall], bool)> = vec![
            (v(SlowLink, Some(1), Some(2)), none, true),
            (v(SlowLink, Some(2), Some(3)), none, true),
            (v(SlowLink, Some(0), Some(1)), none, false),
            (v(SlowPath, Some(2), Some(0)), none, true),
            (v(SlowPath, Some(3), Some(0)), none, false),
            (v(SlowEgress, Some(2), None), none, true),
            (v(SlowEgress, Some(1), None), none, false),
            (v(SlowIngress, None, Some(2)), none, true),
            (v(SlowIngress, None, Some(3)), none, false),
            (v(ConnectionStall, Some(2), None), through_2, true),
            (v(ConnectionStall, Some(1), Some(2)), &through_2[..1], true),
            (v(ConnectionStall, Some(0), Some(1)), on_unrelated, false),
            (v(ConnectionStall, None, None), partly, false),
            // A stall verdict whose links are not known is not weighed.
            (v(ConnectionStall, Some(2), None), none, false),
            (v(HangLink, Some(1), Some(2)), none, false),
            (v(HangLink, Some(0), Some(1)), none, false),
            (v(LinkError, Some(2), Some(3)), none, false),
            (v(RankLost, Some(2), None), none, false),
            (v(RankStalled, Some(2), None), none, false),
            (v(RankUnreachable, Some(2), None), none, false),
            (v(CoordinatorLost, Some(2), None), none, false),
            (v(CoordinatorStalled, Some(0), None), none, false),
            (v(RailMissing, Some(2), None), none, false),
            (v(RailStopped, Some(2), None), none, false),
            (v(PortDowntrained, Some(2), None), none, false),
            (v(PortFlapped, Some(2), None), none, false),
        ];
        for (verdict, stalls, taken) in table {
            let mut flaps = flapped_rank_2(&r);
            let before = flaps[0].clone();
            let kept = absorb(&mut flaps, vec![(verdict.clone(), stalls.to_vec())], &r);
            assert_eq!(kept.is_empty(), taken, "{verdict:?} {stalls:?}");
            assert_eq!(flaps[0] != before, taken, "{verdict:?}: {}", flaps[0].message);
            if !taken {
                assert_eq!(kept, std::slice::from_ref(&verdict));
            }
            // The control: the flap on rank 0, whose port no verdict here was measured
            // across except those naming rank 0 for it.
            let mut elsewhere = flapped_rank_2(&r);
            elsewhere[0].from_rank = Some(0);
            let kept = absorb(&mut elsewhere, vec![(verdict.clone(), stalls.to_vec())], &r);
            let names_0 = [verdict.from_rank, verdict.to_rank].contains(&Some(0))
                || stalls.iter().any(|s| s.from == 0 || s.to == 0);
            if !names_0 {
                assert_eq!(kept, std::slice::from_ref(&verdict), "rank 0's flap took {verdict:?}");
            }
        }
    }

    #[test]
    fn what_a_flap_takes_is_said_under_it() {
        let r = ranks(4);
        let mut flaps = flapped_rank_2(&r);
        let stall = v(VerdictKind::ConnectionStall, Some(2), None);
        let slow = v(VerdictKind::SlowEgress, Some(2), None);
        let other = v(VerdictKind::SlowLink, Some(0), Some(1));
        let kept = absorb(
            &mut flaps,
            vec![
                (stall, vec![st(1, 2), st(2, 3)]),
                (v(VerdictKind::ConnectionStall, Some(0), Some(1)), vec![st(0, 1)]),
                (slow.clone(), vec![]),
                (other.clone(), vec![]),
            ],
            &r,
        );
        // The stall on 0 -> 1 and the slow link 0 -> 1 stay.
        assert_eq!(kept.len(), 2, "{kept:?}");
        assert_eq!(kept[1], other);
        let f = &flaps[0];
        assert!(
            f.message.ends_with(
                "; connections across it stalled meanwhile (1 -> 2 3.5 s, 2 -> 3 3.5 s): the flap's, not a path's MTU; \
                 the slow egress of rank 2 measured meanwhile is the flap's"
            ),
            "{}",
            f.message
        );
        assert_eq!(f.evidence["stalls"].as_array().unwrap().len(), 2);
        assert_eq!(
            f.evidence["stalls"][0],
            json!({"from_rank": 1, "to_rank": 2, "order": 0, "silence_s": 3.5})
        );
        assert_eq!(
            f.evidence["explains"],
            json!([{"kind": "slow_egress", "from_rank": 2, "to_rank": null, "message": slow.message}])
        );
        assert!(!f.next.as_deref().unwrap().contains("ping"));
        assert_eq!(f.action(), crate::ring::model::Action::Investigate);
        // No flap: nothing is taken.
        let kept = absorb(&mut [], vec![(other.clone(), vec![])], &r);
        assert_eq!(kept, [other]);
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
