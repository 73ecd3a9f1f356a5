//! The port counters that moved during the run as evidence, pure: which counters are
//! evidence, what moved between two samples of a rank's ports, the cap on a rank's report,
//! and their place on the verdicts that name the rank. The samples are read through the
//! host in `ring::portread`, below none of the diagnosis.

use std::collections::BTreeMap;

use crate::probe::links::{self, LinksReport, SampleInfo};
use crate::ring::model::CounterMove;

/// Counters worth showing as evidence: errors, drops, retransmissions, timeouts, pauses,
/// congestion notifications; not the data and packet counts that always move.
pub(crate) fn is_evidence(name: &str) -> bool {
    const MARKS: &[&str] = &[
        "err",
        "discard",
        "drop",
        "retr",
        "timeout",
        "pause",
        "cnp",
        "ecn",
        "downed",
        "recovery",
        "seq",
        "rnr",
        "out_of",
        "congest",
        "xmit_wait",
        "symbol",
    ];
    let n = name.to_ascii_lowercase();
    MARKS.iter().any(|m| n.contains(m))
}

/// The evidence counters that moved between `before` and `after` on the RDMA ports whose
/// netdev is `ifname` (every RDMA port when `ifname` is None). Pure.
pub(crate) fn moved(
    before: &LinksReport,
    after: &LinksReport,
    ifname: Option<&str>,
    rank: u32,
    host: &str,
) -> Vec<CounterMove> {
    let mut a = after.clone();
    links::apply_deltas(
        &mut a,
        before,
        SampleInfo {
            interval_s: None,
            ..SampleInfo::interval(0.0)
        },
    );
    let mut out = Vec::new();
    for d in &a.devices {
        for p in &d.ports {
            let ours =
                ifname.is_none_or(|i| p.netdev.as_deref() == Some(i) || p.gid_netdevs.iter().any(|g| g == i));
            if !ours {
                continue;
            }
            for c in &p.counters {
                let Some(delta) = c.delta.as_ref().map(|d| d.lower_bound()).filter(|&d| d > 0) else {
                    continue;
                };
                if is_evidence(&c.name) {
                    out.push(CounterMove {
                        rank,
                        host: host.to_string(),
                        device: d.name.clone(),
                        port: p.port,
                        netdev: p.netdev.clone(),
                        counter: c.name.clone(),
                        delta,
                    });
                }
            }
        }
    }
    out
}

/// Most moved counters one rank reports (the biggest changes kept): a control message stays
/// small whatever the NIC exposes.
pub(crate) const MAX_MOVES: usize = 64;

/// Keep the `MAX_MOVES` biggest changes, in device, port, counter order. Pure.
pub(crate) fn cap(mut moves: Vec<CounterMove>) -> Vec<CounterMove> {
    if moves.len() > MAX_MOVES {
        moves.sort_by_key(|m| std::cmp::Reverse(m.delta));
        moves.truncate(MAX_MOVES);
        moves.sort_by(|a, b| (&a.device, a.port, &a.counter).cmp(&(&b.device, b.port, &b.counter)));
    }
    moves
}

/// Each rank's latest report of moved counters, as evidence on every verdict that names the
/// rank (`from_rank` or `to_rank`), under `evidence.port_counters`
/// (`"rank R <device> port P <counter>": delta`, `"rank R <netdev> <counter>"` for a
/// netdev's own counter, R as `ranks` names it). Pure.
pub(crate) fn attach(
    verdicts: &mut [crate::ring::model::Verdict],
    moved: &BTreeMap<u32, Vec<CounterMove>>,
    ranks: &[crate::ring::model::RankInfo],
) {
    for v in verdicts {
        let mut o = serde_json::Map::new();
        for r in [v.from_rank, v.to_rank].into_iter().flatten() {
            for m in moved.get(&r).into_iter().flatten() {
                o.insert(
                    format!(
                        "rank {} {} {}",
                        crate::ring::model::shown(ranks, m.rank),
                        m.port_name(),
                        m.counter
                    ),
                    serde_json::json!(m.delta),
                );
            }
        }
        if !o.is_empty() {
            v.evidence
                .insert("port_counters".into(), serde_json::Value::Object(o));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::Host;

    #[test]
    fn evidence_names() {
        for n in [
            "symbol_error",
            "port_rcv_errors",
            "local_ack_timeout_err",
            "packet_seq_err",
            "np_cnp_sent",
            "rx_pause_ctrl_phy",
            "port_xmit_wait",
            "link_downed",
        ] {
            assert!(is_evidence(n), "{n}");
        }
        for n in ["port_xmit_data", "port_rcv_packets", "unicast_xmit_packets"] {
            assert!(!is_evidence(n), "{n}");
        }
    }

    #[test]
    fn moved_counters_between_two_fixture_snapshots() {
        let a = links::probe(&Host::snapshot("fixtures/ib-degraded").unwrap());
        let b = links::probe(&Host::snapshot("fixtures/ib-degraded-later").unwrap());
        let m = moved(&a, &b, None, 3, "node-d");
        let of = |dev: &str, name: &str| {
            m.iter()
                .find(|c| c.device == dev && c.counter == name)
                .map(|c| c.delta)
        };
        // The fixture's degraded port: errors and a flap between the two captures.
        assert_eq!(of("mlx5_2", "symbol_error"), Some(4699));
        assert_eq!(of("mlx5_2", "link_downed"), Some(2));
        assert_eq!(of("mlx5_2", "port_rcv_errors"), Some(57));
        assert_eq!(of("mlx5_2", "port_xmit_data"), None);
        // Only evidence counters, each with its device, port and a positive change.
        for c in &m {
            assert!(is_evidence(&c.counter) && c.delta > 0, "{c:?}");
            assert_eq!((c.rank, c.host.as_str()), (3, "node-d"));
        }
        // Nothing moved between a snapshot and itself.
        assert!(moved(&a, &a, None, 3, "node-d").is_empty());
    }

    #[test]
    fn nothing_moved_between_a_report_and_itself() {
        let r = links::probe(&Host::live());
        assert!(moved(&r, &r, Some("lo"), 0, "x").is_empty());
    }

    fn mv(rank: u32, counter: &str, delta: u64) -> CounterMove {
        CounterMove {
            rank,
            host: format!("h{rank}"),
            device: "mlx5_0".into(),
            port: 1,
            netdev: None,
            counter: counter.into(),
            delta,
        }
    }

    #[test]
    fn cap_keeps_the_biggest_changes_in_name_order() {
        let many: Vec<CounterMove> = (0..MAX_MOVES as u64 + 10)
            .map(|i| mv(0, &format!("c{i:03}_err"), i + 1))
            .collect();
        let kept = cap(many.clone());
        assert_eq!(kept, many[10..].to_vec());
        assert_eq!(cap(many[..3].to_vec()), many[..3].to_vec());
    }

    #[test]
    fn attach_puts_each_named_ranks_counters_on_its_verdicts() {
        use crate::ring::model::{Verdict, VerdictKind};
        let v = |from: Option<u32>, to: Option<u32>| Verdict::bare(VerdictKind::SlowLink, from, to);
        let mut vs = vec![v(Some(1), Some(2)), v(None, Some(3)), v(Some(0), None)];
        let moved = BTreeMap::from([
            (1, vec![mv(1, "symbol_error", 5)]),
            (2, vec![mv(2, "np_cnp_sent", 7)]),
            (3, vec![mv(3, "rx_pause_ctrl_phy", 9)]),
        ]);
        attach(&mut vs, &moved, &[]);
        assert_eq!(
            vs[0].evidence["port_counters"],
            serde_json::json!({"rank 1 mlx5_0 port 1 symbol_error": 5, "rank 2 mlx5_0 port 1 np_cnp_sent": 7})
        );
        assert_eq!(
            vs[1].evidence["port_counters"],
            serde_json::json!({"rank 3 mlx5_0 port 1 rx_pause_ctrl_phy": 9})
        );
        // Rank 0 reported nothing: no empty evidence entry.
        assert!(!vs[2].evidence.contains_key("port_counters"));
    }
}
