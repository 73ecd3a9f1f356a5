//! Traffic on a rank's data port that was not the probe's (issue 45): each rank reads its
//! port's byte counters before and after each scan order ([`PortReading`], read by
//! `ring::portread::Sampler::bytes`) and sends the moves beside the bytes the probe itself
//! moved there ([`PortMove`]); the driver sums them per rank ([`Totals`]) and [`annotate`]
//! says on every slow verdict what its ports carried. A port that carried markedly more than
//! the probe is contention (another job, a backup): `evidence.contention`, action
//! investigate, never drain. Unknown counters are said as unknown, never taken as clean.

use std::collections::BTreeMap;

use serde_json::json;

use crate::ring::model::{PortMove, PortTraffic, Rank, RankInfo, Verdict, VerdictKind};
use crate::text::round3;

/// Traffic that was not the probe's is contention past both: this share of the probe's own
/// bytes (headers and acknowledgements stay well below it) ...
pub(crate) const CONTENTION_SHARE: f64 = 0.10;
/// ... and this many bytes (the control connection, ARP, LLDP stay well below it).
pub(crate) const CONTENTION_MIN_BYTES: u64 = 8_000_000;

/// One byte counter read now: which it is, and its value in bytes or why there is none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ByteCount {
    pub counter: String,
    pub bytes: Result<u64, String>,
}

/// A rank's data port's byte counters now, both ways.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PortReading {
    pub tx: ByteCount,
    pub rx: ByteCount,
}

impl PortReading {
    /// Both counters unknown for `why`.
    pub fn unknown(why: &str) -> PortReading {
        let c = |d: &str| ByteCount {
            counter: format!("{d} bytes"),
            bytes: Err(why.to_string()),
        };
        PortReading {
            tx: c("tx"),
            rx: c("rx"),
        }
    }
}

/// `"123456\n"` (net-sysfs.c `netstat_show`: `"%lu\n"`) -> Some(123456). Pure.
pub(crate) fn parse_bytes(s: &str) -> Option<u64> {
    s.trim_end_matches('\n').trim().parse().ok()
}

/// What the port carried over an order, `before` to `after`, beside the probe's bytes. Pure.
pub(crate) fn moved(before: &ByteCount, after: &ByteCount, probe_bytes: u64) -> PortMove {
    let (port_bytes, unknown) = match (&before.bytes, &after.bytes) {
        _ if before.counter != after.counter => {
            (None, Some("the counter read changed during the order".into()))
        }
        (Ok(a), Ok(b)) if b >= a => (Some(b - a), None),
        (Ok(_), Ok(_)) => (
            None,
            Some("the counter went back during the order (reset)".into()),
        ),
        (Err(e), _) | (_, Err(e)) => (None, Some(e.clone())),
    };
    PortMove {
        counter: after.counter.clone(),
        port_bytes,
        unknown,
        probe_bytes,
    }
}

/// Both ways of an order (see [`moved`]). Pure.
pub(crate) fn order_traffic(before: &PortReading, after: &PortReading, (sent, got): (u64, u64)) -> PortTraffic {
    PortTraffic {
        tx: moved(&before.tx, &after.tx, sent),
        rx: moved(&before.rx, &after.rx, got),
    }
}

/// One way of a rank's port summed over the scan's orders: unknown once any order's was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Sum {
    pub counter: String,
    pub port_bytes: Option<u64>,
    pub unknown: Option<String>,
    pub probe_bytes: u64,
}

impl Sum {
    fn add(&mut self, m: &PortMove) {
        self.probe_bytes = self.probe_bytes.saturating_add(m.probe_bytes);
        if self.unknown.is_some() {
            return;
        }
        match m.port_bytes {
            Some(b) => self.port_bytes = Some(self.port_bytes.unwrap_or(0).saturating_add(b)),
            None => {
                self.port_bytes = None;
                self.unknown = Some(m.unknown.clone().unwrap_or_else(|| "not read".into()));
            }
        }
        self.counter.clone_from(&m.counter);
    }

    /// The bytes the port carried that were not the probe's, where known.
    pub(crate) fn other_bytes(&self) -> Option<u64> {
        self.port_bytes.map(|p| p.saturating_sub(self.probe_bytes))
    }

    /// Markedly more than the probe: past [`CONTENTION_SHARE`] and [`CONTENTION_MIN_BYTES`].
    pub(crate) fn contended(&self) -> bool {
        self.other_bytes().is_some_and(|o| {
            o > CONTENTION_MIN_BYTES && o as f64 > CONTENTION_SHARE * self.probe_bytes as f64
        })
    }
}

/// Every rank's port over the scan, both ways (`(rank, "tx"|"rx")`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Totals(BTreeMap<(Rank, &'static str), Sum>);

impl Totals {
    /// Add one order's reading of `rank`.
    pub fn add(&mut self, rank: Rank, t: &PortTraffic) {
        for (way, m) in [("tx", &t.tx), ("rx", &t.rx)] {
            self.0
                .entry((rank, way))
                .or_insert_with(|| Sum {
                    counter: m.counter.clone(),
                    port_bytes: Some(0),
                    unknown: None,
                    probe_bytes: 0,
                })
                .add(m);
        }
    }

    /// `rank`'s port one way as its counter saw it: the probe's bytes of every rank on the
    /// same host and device (`--local`, several ranks per node), whose traffic the same
    /// counter counts; unknown where one of them sent no reading.
    pub fn port(&self, rank: Rank, way: &'static str, ranks: &[RankInfo]) -> Sum {
        let mut s = self.get(rank, way);
        let me = ranks.iter().find(|i| i.rank == rank);
        let sharing = ranks
            .iter()
            .filter(|i| i.rank != rank && me.is_some_and(|m| m.host == i.host && m.device == i.device));
        for i in sharing {
            let other = self.get(i.rank, way);
            s.probe_bytes = s.probe_bytes.saturating_add(other.probe_bytes);
            if other.port_bytes.is_none() && s.unknown.is_none() {
                s.port_bytes = None;
                s.unknown = Some(format!(
                    "rank {} shares the port and {}",
                    i.rank,
                    other.unknown.unwrap_or_default()
                ));
            }
        }
        s
    }

    /// `rank`'s port one way; unknown where the rank sent no reading.
    pub fn get(&self, rank: Rank, way: &'static str) -> Sum {
        self.0.get(&(rank, way)).cloned().unwrap_or_else(|| Sum {
            counter: format!("{way} bytes"),
            port_bytes: None,
            unknown: Some("the rank sent no port counter reading".into()),
            probe_bytes: 0,
        })
    }
}

/// The ports a slow verdict is about: a slow egress its sender's outgoing way, a slow
/// ingress its receiver's incoming way, a slow link or path both. None for other kinds.
fn ends(v: &Verdict) -> Vec<(Rank, &'static str)> {
    use VerdictKind::*;
    let (from, to) = (v.from_rank.map(|r| (r, "tx")), v.to_rank.map(|r| (r, "rx")));
    match v.kind {
        SlowEgress => from.into_iter().collect(),
        SlowIngress => to.into_iter().collect(),
        SlowLink | SlowPath => from.into_iter().chain(to).collect(),
        _ => Vec::new(),
    }
}

/// Say on every slow verdict what its ports carried (`evidence.port_traffic`); a port that
/// carried markedly more than the probe makes it contention (`evidence.contention`, action
/// investigate) and its message and next step say so; an unknown counter is said. Pure.
pub(crate) fn annotate(verdicts: &mut [Verdict], totals: &Totals, ranks: &[RankInfo]) {
    for v in verdicts {
        let ends = ends(v);
        if ends.is_empty() {
            continue;
        }
        let sums: Vec<(Rank, &str, Sum)> = ends
            .iter()
            .map(|&(r, w)| (r, w, totals.port(r, w, ranks)))
            .collect();
        let figures: Vec<serde_json::Value> = sums.iter().map(|(r, w, s)| figure(*r, w, s)).collect();
        v.evidence.insert("port_traffic".into(), json!(figures));
        let contended: Vec<&(Rank, &str, Sum)> = sums.iter().filter(|(_, _, s)| s.contended()).collect();
        if !contended.is_empty() {
            v.evidence.insert("contention".into(), json!(true));
            let said: Vec<String> = contended
                .iter()
                .map(|(r, w, s)| contention_words(*r, w, s, ranks))
                .collect();
            v.message.push_str(&format!(
                "; CONTENTION: {}: another job or a backup shares the port; investigate, do not drain",
                said.join("; ")
            ));
            v.next = Some(next_step(&contended, ranks));
            continue;
        }
        for (r, _, s) in sums.iter().filter(|(_, _, s)| s.port_bytes.is_none()) {
            v.message.push_str(&format!(
                "; port byte counters of rank {} unknown ({}): traffic that was not the probe's is not ruled out",
                shown(ranks, *r),
                s.unknown.as_deref().unwrap_or("not read")
            ));
        }
    }
}

fn shown(ranks: &[RankInfo], r: Rank) -> String {
    crate::ring::model::shown(ranks, r).to_string()
}

fn host_dev(ranks: &[RankInfo], r: Rank) -> (String, String) {
    let i = ranks.iter().find(|i| i.rank == r);
    (
        i.map(|i| i.host.clone()).unwrap_or_else(|| format!("rank {r}")),
        i.and_then(|i| i.netdev().or(i.device.as_deref()).map(String::from))
            .unwrap_or_else(|| "its data port".into()),
    )
}

fn mb(b: u64) -> f64 {
    round3(b as f64 / 1e6)
}

/// One end's figures: `{rank, direction, counter, port_mb, probe_mb, other_mb}`, or with
/// `unknown` (why) and no port figures.
fn figure(r: Rank, way: &str, s: &Sum) -> serde_json::Value {
    let mut o = json!({"rank": r, "direction": way, "counter": s.counter, "probe_mb": mb(s.probe_bytes)});
    match (s.port_bytes, &s.unknown) {
        (Some(p), _) => {
            o["port_mb"] = json!(mb(p));
            o["other_mb"] = json!(mb(s.other_bytes().unwrap_or(0)));
        }
        (None, why) => o["unknown"] = json!(why.as_deref().unwrap_or("not read")),
    }
    o
}

fn contention_words(r: Rank, way: &str, s: &Sum, ranks: &[RankInfo]) -> String {
    let (host, dev) = host_dev(ranks, r);
    format!(
        "the port of rank {} ({host}, {dev}) carried {:.0} MB {} that were not the probe's ({:.0} MB in all, the probe's {:.0} MB)",
        shown(ranks, r),
        mb(s.other_bytes().unwrap_or(0)),
        if way == "tx" { "out" } else { "in" },
        mb(s.port_bytes.unwrap_or(0)),
        mb(s.probe_bytes),
    )
}

fn next_step(contended: &[&(Rank, &str, Sum)], ranks: &[RankInfo]) -> String {
    let on: Vec<String> = contended
        .iter()
        .map(|(r, _, _)| {
            let (host, dev) = host_dev(ranks, *r);
            format!("{host} ({dev})")
        })
        .collect();
    format!(
        "on {}: find what else uses the port (ss -tinp; the scheduler's other jobs on the node), then run the scan again when it is quiet",
        on.join(" and ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(v: Result<u64, &str>) -> ByteCount {
        ByteCount {
            counter: "/sys/class/net/eth1/statistics/tx_bytes".into(),
            bytes: v.map_err(String::from),
        }
    }

    #[test]
    fn parse_bytes_reads_the_kernels_format() {
        for (raw, want) in [
            ("0\n", Some(0)),
            ("18446744073709551615\n", Some(u64::MAX)),
            ("12 \n", Some(12)),
            ("", None),
            ("-1\n", None),
            ("x\n", None),
        ] {
            assert_eq!(parse_bytes(raw), want, "{raw:?}");
        }
    }

    #[test]
    fn a_move_is_known_only_when_both_reads_are_and_the_counter_went_forward() {
        // (the read before, the read after, the bytes moved, why unknown)
        type Read = Result<u64, &'static str>;
        let cases: [(Read, Read, Option<u64>, Option<&str>); 5] = [
            (Ok(100), Ok(350), Some(250), None),
            (Ok(100), Ok(100), Some(0), None),
            (
                Ok(500),
                Ok(100),
                None,
                Some("the counter went back during the order (reset)"),
            ),
            (Err("absent"), Ok(100), None, Some("absent")),
            (Ok(1), Err("EIO"), None, Some("EIO")),
        ];
        for (a, b, bytes, why) in cases {
            let m = moved(&count(a), &count(b), 7);
            assert_eq!(
                (m.port_bytes, m.unknown.as_deref(), m.probe_bytes),
                (bytes, why, 7),
                "{a:?} {b:?}"
            );
        }
        let mut other = count(Ok(900));
        other.counter = "mlx5_0 port 1 port_xmit_data".into();
        assert_eq!(moved(&count(Ok(1)), &other, 0).port_bytes, None);
    }

    fn traffic(port_tx: Option<u64>, probe_tx: u64) -> PortTraffic {
        let m = |p: Option<u64>, probe| PortMove {
            counter: "c".into(),
            port_bytes: p,
            unknown: p.is_none().then(|| "absent".into()),
            probe_bytes: probe,
        };
        PortTraffic {
            tx: m(port_tx, probe_tx),
            rx: m(Some(probe_tx), probe_tx),
        }
    }

    #[test]
    fn contention_needs_both_the_share_and_the_bytes() {
        // (port, probe) per order over two orders -> contended.
        let cases = [
            ((105_000_000, 100_000_000), false), // headers: 5%
            ((120_000_000, 100_000_000), true),  // 20 MB, 20%
            ((9_000_000, 1_000_000), false),     // 800%, but 8 MB: not past the bytes
            ((10_000_000, 1_000_000), true),     // 9 MB
            ((1_000_000_000, 900_000_000), true),
            ((40_000_000, 39_000_000), false),
        ];
        for ((port, probe), want) in cases {
            let mut t = Totals::default();
            t.add(1, &traffic(Some(port / 2), probe / 2));
            t.add(1, &traffic(Some(port / 2), probe / 2));
            assert_eq!(t.get(1, "tx").contended(), want, "{port} {probe}");
        }
    }

    #[test]
    fn one_unknown_order_makes_the_sum_unknown() {
        let mut t = Totals::default();
        t.add(2, &traffic(Some(900_000_000), 1000));
        t.add(2, &traffic(None, 1000));
        t.add(2, &traffic(Some(5), 1000));
        let s = t.get(2, "tx");
        assert_eq!(
            (s.port_bytes, s.unknown.as_deref(), s.probe_bytes),
            (None, Some("absent"), 3000)
        );
        assert!(!s.contended());
        assert_eq!(
            t.get(3, "tx").unknown.as_deref(),
            Some("the rank sent no port counter reading")
        );
    }

    fn ranks() -> Vec<RankInfo> {
        (0..4)
            .map(|r| RankInfo {
                rank: r,
                host: format!("node-{}", (b'a' + r as u8) as char),
                address: String::new(),
                device: Some("eth1".into()),
                transport: "tcp".into(),
                pid: None,
                capabilities: vec![],
                rails: vec![],
                node: None,
                neighbor: None,
                port_max: None,
            })
            .collect()
    }

    fn verdict(kind: VerdictKind, from: Option<Rank>, to: Option<Rank>) -> Verdict {
        Verdict {
            message: "SLOW".into(),
            next: Some("fabprobe links".into()),
            ..Verdict::bare(kind, from, to)
        }
    }

    #[test]
    fn a_contended_port_turns_drain_into_investigate_and_a_clean_one_does_not() {
        use crate::ring::model::Action;
        let mut t = Totals::default();
        for r in 0..4 {
            t.add(
                r,
                &traffic(Some(if r == 2 { 600_000_000 } else { 101_000_000 }), 100_000_000),
            );
        }
        let mut v = vec![
            verdict(VerdictKind::SlowEgress, Some(2), None),
            verdict(VerdictKind::SlowEgress, Some(1), None),
            verdict(VerdictKind::SlowLink, Some(0), Some(2)),
            verdict(VerdictKind::SlowLink, Some(2), Some(3)),
            verdict(VerdictKind::RankStalled, Some(2), None),
        ];
        annotate(&mut v, &t, &ranks());
        let actions: Vec<Action> = v.iter().map(Verdict::action).collect();
        assert_eq!(
            actions,
            [
                Action::Investigate,
                Action::Drain,
                Action::Ticket,
                Action::Investigate,
                Action::Investigate
            ]
        );
        assert!(v[0].message.starts_with("SLOW; CONTENTION: the port of rank 2 (node-c, eth1) carried 500 MB out that were not the probe's (600 MB in all, the probe's 100 MB)"), "{}", v[0].message);
        assert!(
            v[0].next
                .as_deref()
                .unwrap()
                .starts_with("on node-c (eth1): find what else"),
            "{:?}",
            v[0].next
        );
        assert_eq!(v[1].message, "SLOW");
        assert_eq!(v[1].evidence["port_traffic"][0]["other_mb"], json!(1.0));
        // A link into a contended receiver names only the way the contention took: rank 2
        // received only what the probe sent it.
        assert!(!v[2].evidence.contains_key("contention"), "{:?}", v[2].evidence);
        assert_eq!(v[2].evidence["port_traffic"].as_array().unwrap().len(), 2);
        assert!(!v[4].evidence.contains_key("port_traffic"));
    }

    /// `--local` or several ranks on one node: one counter counts every rank's traffic on
    /// the port, and all of it is the probe's.
    #[test]
    fn ranks_that_share_a_port_share_its_counter() {
        let mut ranks = ranks();
        for i in &mut ranks {
            i.host = "one".into();
        }
        let mut t = Totals::default();
        for r in 0..4 {
            t.add(r, &traffic(Some(400_000_000), 100_000_000));
        }
        let mut v = vec![verdict(VerdictKind::SlowEgress, Some(2), None)];
        annotate(&mut v, &t, &ranks);
        assert_eq!(
            v[0].evidence["port_traffic"][0]["other_mb"],
            json!(0.0),
            "{:?}",
            v[0].evidence
        );
        assert_eq!(v[0].action(), crate::ring::model::Action::Drain);
        // One of them silent: the counter cannot be told apart.
        let mut t = Totals::default();
        for r in 0..3 {
            t.add(r, &traffic(Some(400_000_000), 100_000_000));
        }
        let mut v = vec![verdict(VerdictKind::SlowEgress, Some(2), None)];
        annotate(&mut v, &t, &ranks);
        assert_eq!(
            v[0].evidence["port_traffic"][0]["unknown"],
            "rank 3 shares the port and the rank sent no port counter reading"
        );
    }

    #[test]
    fn unknown_counters_are_said_never_clean() {
        let mut t = Totals::default();
        t.add(1, &traffic(None, 100_000_000));
        let mut v = vec![
            verdict(VerdictKind::SlowEgress, Some(1), None),
            verdict(VerdictKind::SlowIngress, None, Some(3)),
        ];
        annotate(&mut v, &t, &ranks());
        assert_eq!(v[0].action(), crate::ring::model::Action::Drain);
        assert_eq!(
            v[0].message,
            "SLOW; port byte counters of rank 1 unknown (absent): traffic that was not the probe's is not ruled out"
        );
        assert_eq!(v[0].evidence["port_traffic"][0]["unknown"], "absent");
        assert!(
            v[1].message
                .contains("rank 3 unknown (the rank sent no port counter reading)"),
            "{}",
            v[1].message
        );
    }
}
