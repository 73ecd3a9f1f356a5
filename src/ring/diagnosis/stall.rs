//! Stalls inside the scan's connections (issue 45): a link silent for seconds, then running
//! at its rate, as an MTU black hole looks under TCP's MTU probing (each new connection
//! loses its first big segments until the kernel falls back to small ones) or a hiccup of
//! one end. The receiver measures the silence ([`silence`]); the coordinator names what the
//! stalled links have in common and what the wait cost the scan ([`verdicts`]). Pure.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use crate::ring::diagnosis::driver::OrderRun;
use crate::ring::model::{ChunkWaits, CpuWait, LinkSample, Rank, RankInfo, Verdict, VerdictKind};

/// A silence shorter than this is no stall: a control message apart, a scheduler slice.
pub(crate) const MIN_SILENCE_S: f64 = 3.0;

/// A stall is this many times the link's typical gap between chunks or more: a link slow
/// all along has long gaps everywhere, and that is its rate, not a stall.
pub(crate) const OVER_TYPICAL_GAP: f64 = 10.0;

/// The stall among one order's gaps on one link (seconds: the receiver's wait for the
/// first chunk, then between chunks), or None. At least three gaps: with fewer, a stall
/// and a slow link look alike.
pub(crate) fn silence(gaps: &[f64]) -> Option<f64> {
    if gaps.len() < 3 || gaps.iter().any(|g| !g.is_finite() || *g < 0.0) {
        return None;
    }
    let mut g = gaps.to_vec();
    g.sort_by(f64::total_cmp);
    let longest = g.pop()?;
    let typical = g[g.len() / 2];
    (longest >= MIN_SILENCE_S && longest >= OVER_TYPICAL_GAP * typical).then_some(longest)
}

/// The stalls of the AllReduce sweep's ring hops `pred -> rank`, from every rank's
/// [`ChunkWaits`] (one per channel): a ring passes every wait on (a rank sends chunk k only
/// after chunk k - 1 arrived), so a receiver's wait is the link's own only for the part that
/// its sender's wait for chunk k - 1 and its delay to send chunk k do not explain. What the
/// sender did not list counts as its floor, so each figure is a lower bound. The longest
/// per hop, where it is a stall ([`MIN_SILENCE_S`]); hops an end did not report are absent.
pub(crate) fn sweep_silences(world: u32, waits: &BTreeMap<Rank, Vec<ChunkWaits>>) -> BTreeMap<(Rank, Rank), f64> {
    let mut out = BTreeMap::new();
    if world < 2 {
        return out;
    }
    for (&to, channels) in waits {
        let from = (to + world - 1) % world;
        let Some(sender) = waits.get(&from) else {
            continue;
        };
        for (mine, theirs) in channels.iter().zip(sender) {
            let find =
                |list: &[(u64, f64)], k: u64| list.iter().find(|x| x.0 == k).map_or(theirs.floor_s, |x| x.1);
            for &(k, wait) in mine.recv_wait.iter().filter(|x| x.1 >= MIN_SILENCE_S) {
                // The first chunk waits on nothing the sender received (the run's go).
                let before = match k {
                    0 => 0.0,
                    _ => find(&theirs.recv_wait, k - 1),
                };
                let own = wait - before - find(&theirs.send_delay, k);
                if own.is_finite() && own >= MIN_SILENCE_S {
                    let e = out.entry((from, to)).or_insert(0.0f64);
                    *e = e.max(own);
                }
            }
        }
    }
    out
}

/// The sweep's stall verdicts ([`verdicts`] of the hops, `order` 0, with the silences of
/// [`sweep_silences`]): what they cost is the longest, the ring waits for it.
#[cfg(test)]
pub(crate) fn sweep_verdicts(
    world: u32,
    hops: &[LinkSample],
    waits: &BTreeMap<Rank, Vec<ChunkWaits>>,
    ranks: &[RankInfo],
) -> Vec<Verdict> {
    verdicts(&sweep_hops(world, hops, waits), &[], ranks)
}

/// The sweep's ring hops, each with its own silence ([`sweep_silences`]) where it stalled.
pub(crate) fn sweep_hops(
    world: u32,
    hops: &[LinkSample],
    waits: &BTreeMap<Rank, Vec<ChunkWaits>>,
) -> Vec<LinkSample> {
    let silences = sweep_silences(world, waits);
    hops.iter()
        .map(|h| LinkSample {
            silence_s: silences.get(&(h.from_rank, h.to_rank)).copied(),
            ..h.clone()
        })
        .collect()
}

/// A rank's longest stretch of successive heartbeat windows during the sweep in which it
/// waited for a CPU at least half the time ([`CpuWait::starved`]): the most of a sweep
/// stall its host can explain. A silence of seconds needs a thread kept off a CPU for
/// seconds; load that costs each window a little cannot make one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Starved {
    /// The current stretch and the longest: (ms waited, ms of windows).
    run: (u64, u64),
    longest: (u64, u64),
}

impl Starved {
    /// One heartbeat's window, in arrival order.
    pub fn add(&mut self, c: CpuWait) {
        if !c.starved() {
            self.run = (0, 0);
            return;
        }
        self.run = (
            self.run.0.saturating_add(c.wait_ms),
            self.run.1.saturating_add(c.window_ms),
        );
        if self.run.0 > self.longest.0 {
            self.longest = self.run;
        }
    }

    /// Seconds waited in the longest stretch.
    pub(crate) fn wait_s(&self) -> f64 {
        self.longest.0 as f64 / 1000.0
    }

    /// The share of the longest stretch spent waiting.
    fn share(&self) -> f64 {
        match self.longest.1 {
            0 => 0.0,
            w => (self.longest.0 as f64 / w as f64).min(1.0),
        }
    }
}

/// The stalls a starved host could explain, apart from the rest, and the ranks whose
/// stretches explain them (rank: share of its stretch spent waiting). A stall is explained
/// when what is left of it once the longest stretch of any rank is taken out is no stall
/// ([`MIN_SILENCE_S`]): any rank, as the scan's rule, since a starved rank holds up the ring
/// beyond its own links. The rest are judged.
pub(crate) fn cpu_split(
    stalls: &[Stall],
    starved: &BTreeMap<Rank, Starved>,
) -> (Vec<Stall>, Vec<Stall>, BTreeMap<Rank, f64>) {
    let most = starved.values().map(Starved::wait_s).fold(0.0, f64::max);
    let (explained, judged): (Vec<Stall>, Vec<Stall>) = stalls
        .iter()
        .partition(|s| most > 0.0 && s.seconds - most < MIN_SILENCE_S);
    let least = explained.iter().map(|s| s.seconds).fold(f64::INFINITY, f64::min);
    let who = starved
        .iter()
        .filter(|(_, w)| w.wait_s() > 0.0 && least - w.wait_s() < MIN_SILENCE_S)
        .map(|(&r, w)| (r, w.share()))
        .collect();
    (judged, explained, who)
}

/// One stalled link in one order (the sweep's: order 0): what a stall verdict is built
/// from, and what the run's end weighs against a port flap and a starved host.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stall {
    pub from: Rank,
    pub to: Rank,
    pub order: u32,
    pub seconds: f64,
}

impl Stall {
    /// Its entry in a verdict's `evidence.stalls`.
    pub fn json(&self) -> serde_json::Value {
        json!({"from_rank": self.from, "to_rank": self.to, "order": self.order, "silence_s": round(self.seconds)})
    }

    /// `1 -> 2 3.5 s`, ranks as people are told them.
    pub fn said(&self, ranks: &[RankInfo]) -> String {
        listed(std::slice::from_ref(self), ranks)
    }
}

/// The stalled links among `samples` (a silence of [`MIN_SILENCE_S`] or more).
pub(crate) fn stalls(samples: &[LinkSample]) -> Vec<Stall> {
    samples
        .iter()
        .filter_map(|s| {
            s.silence_s
                .filter(|x| x.is_finite() && *x >= MIN_SILENCE_S)
                .map(|seconds| Stall {
                    from: s.from_rank,
                    to: s.to_rank,
                    order: s.order,
                    seconds,
                })
        })
        .collect()
}

/// The stall verdicts of a scan: one naming the rank every stalled link goes through (two
/// links or more), else one naming the link (only one stalled), else one naming no rank
/// (never an innocent: links with no common end). Action investigate, always.
pub(crate) fn verdicts(samples: &[LinkSample], orders: &[OrderRun], ranks: &[RankInfo]) -> Vec<Verdict> {
    of_stalls(&stalls(samples), samples, orders, ranks)
}

/// [`verdicts`] of these typed stalls; `samples`: every link measured (a rank verdict
/// says how many of the links through it stalled).
pub(crate) fn of_stalls(
    stalls: &[Stall],
    samples: &[LinkSample],
    orders: &[OrderRun],
    ranks: &[RankInfo],
) -> Vec<Verdict> {
    if stalls.is_empty() {
        return Vec::new();
    }
    let mut common: BTreeSet<Rank> = [stalls[0].from, stalls[0].to].into();
    for s in stalls {
        common.retain(|r| *r == s.from || *r == s.to);
    }
    let links: BTreeSet<(Rank, Rank)> = stalls.iter().map(|s| (s.from, s.to)).collect();
    let mut v = match (links.len(), common.first()) {
        (1, _) => link_verdict(stalls, ranks),
        (_, Some(&r)) if common.len() == 1 => rank_verdict(r, stalls, samples, ranks),
        _ => unattributed(stalls, ranks),
    };
    v.evidence.extend(cost(stalls, orders));
    vec![v]
}

/// Whether stall verdict `v` names what each of `stalls` went through: its rank (every
/// link touches it), its link, or, naming no rank, a list of links that holds them.
fn covers(v: &Verdict, own: &[Stall], stalls: &[Stall]) -> bool {
    stalls.iter().all(|s| match (v.from_rank, v.to_rank) {
        (Some(r), None) => s.from == r || s.to == r,
        (Some(a), Some(b)) => (s.from, s.to) == (a, b),
        _ => own.iter().any(|o| (o.from, o.to) == (s.from, s.to)),
    })
}

/// The sweep's stall verdict beside the scan's (`weighed`: the run's verdicts, each with
/// the typed stalls it was built from): where one of them names what the other's stalls
/// went through, one verdict, the wider, saying the other's stalls too; else both (issue
/// 45: two faults are two verdicts, one fault one).
pub(crate) fn merge_sweep(
    weighed: &mut Vec<(Verdict, Vec<Stall>)>,
    sweep: (Verdict, Vec<Stall>),
    ranks: &[RankInfo],
) {
    let same = weighed.iter().position(|(v, own)| {
        v.kind == VerdictKind::ConnectionStall
            && (covers(v, own, &sweep.1) || covers(&sweep.0, &sweep.1, own))
    });
    let Some(i) = same else {
        weighed.push(sweep);
        return;
    };
    let scan = weighed.remove(i);
    let (mut wide, narrow, whose) = if covers(&scan.0, &scan.1, &sweep.1) {
        (scan, sweep, "sweep's")
    } else {
        (sweep, scan, "scan's")
    };
    wide.0.message.push_str(&format!(
        "; the {whose} connections stalled there too ({})",
        listed(&narrow.1, ranks)
    ));
    wide.1.extend(narrow.1);
    weighed.insert(i, wide);
}

/// What the stalls cost: each order waits for its slowest link, so an order lost its
/// longest silence; summed over the orders, beside the orders' time.
fn cost(stalls: &[Stall], orders: &[OrderRun]) -> BTreeMap<String, serde_json::Value> {
    let mut per_order: BTreeMap<u32, f64> = BTreeMap::new();
    for s in stalls {
        let e = per_order.entry(s.order).or_insert(0.0);
        *e = e.max(s.seconds);
    }
    let lost: f64 = per_order.values().fold(0.0, |a, b| a + b);
    let scan: f64 = orders.iter().map(|o| o.seconds).fold(0.0, |a, b| a + b);
    let list: Vec<_> = stalls.iter().map(Stall::json).collect();
    let longest = stalls.iter().map(|s| s.seconds).fold(0.0, f64::max);
    let mut out = BTreeMap::from([
        ("stalls".to_string(), json!(list)),
        ("stall_s".to_string(), json!(round(longest))),
        ("lost_s".to_string(), json!(round(lost))),
    ]);
    // The sweep has no orders: its one ring lost the longest silence.
    if !orders.is_empty() {
        out.insert("orders_stalled".to_string(), json!(per_order.len()));
        out.insert("scan_orders_s".to_string(), json!(round(scan)));
    }
    out
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn info(ranks: &[RankInfo], r: Rank) -> Option<&RankInfo> {
    ranks.iter().find(|i| i.rank == r)
}

fn host(ranks: &[RankInfo], r: Rank) -> String {
    info(ranks, r)
        .map(|i| i.host.clone())
        .unwrap_or_else(|| format!("rank {r}"))
}

/// `rank 2 (node-c)` as people are told it.
fn who(ranks: &[RankInfo], r: Rank) -> String {
    format!(
        "rank {} ({})",
        crate::ring::model::shown(ranks, r),
        host(ranks, r)
    )
}

/// `0.9-1.2 s` or `3.0 s`.
fn span(stalls: &[Stall]) -> String {
    let lo = stalls.iter().map(|s| s.seconds).fold(f64::INFINITY, f64::min);
    let hi = stalls.iter().map(|s| s.seconds).fold(0.0, f64::max);
    let (lo, hi) = (format!("{lo:.1}"), format!("{hi:.1}"));
    if lo == hi {
        format!("{hi} s")
    } else {
        format!("{lo}-{hi} s")
    }
}

/// `1 -> 2 3.0 s, 2 -> 3 2.9 s`.
fn listed(stalls: &[Stall], ranks: &[RankInfo]) -> String {
    let shown = |r| crate::ring::model::shown(ranks, r);
    stalls
        .iter()
        .map(|s| format!("{} -> {} {:.1} s", shown(s.from), shown(s.to), s.seconds))
        .collect::<Vec<_>>()
        .join(", ")
}

fn verdict(
    kind_of: (Option<Rank>, Option<Rank>),
    ranks: &[RankInfo],
    message: String,
    next: String,
) -> Verdict {
    let (from, to) = kind_of;
    Verdict {
        kind: VerdictKind::ConnectionStall,
        from_rank: from,
        to_rank: to,
        from_host: from.map(|r| host(ranks, r)),
        to_host: to.map(|r| host(ranks, r)),
        evidence: BTreeMap::new(),
        message,
        next: Some(next),
        rail: None,
    }
}

/// Every stalled link goes through rank `r`: its port or its host, to investigate.
fn rank_verdict(r: Rank, stalls: &[Stall], samples: &[LinkSample], ranks: &[RankInfo]) -> Verdict {
    let through: BTreeSet<(Rank, Rank)> = samples
        .iter()
        .filter(|s| s.from_rank == r || s.to_rank == r)
        .map(|s| (s.from_rank, s.to_rank))
        .collect();
    let stalled: BTreeSet<(Rank, Rank)> = stalls.iter().map(|s| (s.from, s.to)).collect();
    let dev = info(ranks, r).and_then(|i| i.device.clone());
    let at = match &dev {
        Some(d) => format!("{}, {d}", host(ranks, r)),
        None => host(ranks, r),
    };
    let message = format!(
        "CONNECTION STALLS at rank {} ({at}): {} of the {} links measured through it went silent for {} \
         before they ran at their rates ({}); no link without it stalled. A path that drops big frames \
         (an MTU below the hosts' while TCP's MTU probing is on) or a hiccup of this node looks so",
        crate::ring::model::shown(ranks, r),
        stalled.len(),
        through.len(),
        span(stalls),
        listed(stalls, ranks),
    );
    let peer = stalls
        .iter()
        .map(|s| if s.from == r { s.to } else { s.from })
        .next()
        .unwrap_or(r);
    let mut v = verdict((Some(r), None), ranks, message, mtu_next(r, peer, ranks));
    v.evidence.insert("rank".into(), json!(r));
    v
}

/// One link stalled, nothing else: its two ends, to investigate.
fn link_verdict(stalls: &[Stall], ranks: &[RankInfo]) -> Verdict {
    let (from, to) = (stalls[0].from, stalls[0].to);
    let message = format!(
        "CONNECTION STALL on the link {} -> {}: silent for {} before it ran at its rate; no other link stalled",
        who(ranks, from),
        who(ranks, to),
        span(stalls),
    );
    verdict((Some(from), Some(to)), ranks, message, mtu_next(from, to, ranks))
}

/// Stalled links with no one rank common to them: no rank is named.
fn unattributed(stalls: &[Stall], ranks: &[RankInfo]) -> Verdict {
    let hosts: BTreeSet<String> = stalls
        .iter()
        .flat_map(|s| [host(ranks, s.from), host(ranks, s.to)])
        .collect();
    let message = format!(
        "CONNECTION STALLS on {} links with no one rank common to them: silent for {} before they ran at \
         their rates ({})",
        stalls
            .iter()
            .map(|s| (s.from, s.to))
            .collect::<BTreeSet<_>>()
            .len(),
        span(stalls),
        listed(stalls, ranks),
    );
    let next = format!(
        "on {}: `fabprobe links` (carrier changes, errors) and a full-size ping that may not be fragmented \
         from each stalled link's sender to its receiver",
        hosts.into_iter().collect::<Vec<_>>().join(", ")
    );
    verdict((None, None), ranks, message, next)
}

/// A full-size frame that may not be fragmented, from `r` to `peer`: the test of an MTU
/// black hole (a plain ping's frames are small and pass), then the 1500-byte size that
/// tells a lower MTU on the path from loss. Without a netdev: the port's own facts.
fn mtu_next(r: Rank, peer: Rank, ranks: &[RankInfo]) -> String {
    let on = host(ranks, r);
    let dev = info(ranks, r).and_then(|i| i.netdev().map(str::to_string));
    let ip = info(ranks, peer).map(|i| {
        i.address
            .rsplit_once(':')
            .map(|(a, _)| a)
            .unwrap_or(&i.address)
            .trim_matches(|c| c == '[' || c == ']')
            .to_string()
    });
    match (dev, ip) {
        (Some(d), Some(ip)) => format!(
            "on {on}: a frame of the interface's full MTU that may not be fragmented, to {} \
             (a plain ping passes on an MTU black hole): `ping -M do -s $(( $(cat /sys/class/net/{d}/mtu) - 28 )) -c 3 {ip}`; \
             if it fails and `ping -M do -s 1472 -c 3 {ip}` passes, a hop between them has an MTU below {d}'s \
             (the switch ports' MTU); `fabprobe links` (carrier changes, errors)",
            who(ranks, peer)
        ),
        _ => format!(
            "on {on}: `fabprobe links` (port state, carrier changes, errors) and the path MTU to {}",
            who(ranks, peer)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::diagnosis::localize::sim::ranks;
    use crate::ring::diagnosis::pastes::assert_next_pastes;

    #[test]
    fn a_silence_is_a_stall_only_when_long_and_far_past_the_links_pace() {
        for (gaps, want) in [
            // The black hole: 3 s before the first chunk, then 4 ms apart.
            (&[3.1, 0.004, 0.004, 0.005, 0.004][..], Some(3.1)),
            // A stall in the middle of the transfer.
            (&[0.01, 0.004, 4.0, 0.004, 0.004][..], Some(4.0)),
            // 1-2 s: what a connection flood or a busy host costs a healthy link (the lab's
            // attacks and starved ranks), below the black hole's 6.5 s.
            (&[0.01, 0.004, 1.7, 0.004, 0.004][..], None),
            // A slow link: every gap long, none a stall.
            (&[1.5, 1.4, 1.6, 1.5, 1.5][..], None),
            // Short: a control message apart.
            (&[0.3, 0.004, 0.004, 0.004][..], None),
            // Long, but the link's pace is slow too (10x rule).
            (&[1.2, 0.2, 0.2, 0.2][..], None),
            // Too few gaps to tell a stall from a slow link.
            (&[3.0, 0.004][..], None),
            (&[][..], None),
            (&[f64::NAN, 0.004, 0.004, 3.0][..], None),
        ] {
            assert_eq!(silence(gaps), want, "{gaps:?}");
        }
    }

    fn s(order: u32, from: Rank, to: Rank, silence_s: Option<f64>) -> LinkSample {
        LinkSample {
            order,
            from_rank: from,
            to_rank: to,
            bytes: 4 << 20,
            seconds: 0.03,
            cpu_wait: None,
            silence_s,
        }
    }

    fn orders() -> Vec<OrderRun> {
        [(0, 1, "natural", 3.3), (1, 3, "reversed", 3.2)]
            .into_iter()
            .map(|(index, shift, name, seconds)| OrderRun {
                index,
                shift,
                name: name.into(),
                recheck: false,
                seconds,
            })
            .collect()
    }

    /// Orders natural and reversed of 4 ranks; `stalled` links had a silence of 3 s.
    fn scan(stalled: &[(Rank, Rank)]) -> Vec<LinkSample> {
        let mut out = Vec::new();
        for (order, shift) in [(0u32, 1u32), (1, 3)] {
            for from in 0..4 {
                let to = (from + shift) % 4;
                let x = stalled.contains(&(from, to)).then_some(3.0);
                out.push(s(order, from, to, x));
            }
        }
        out
    }

    #[test]
    fn every_stalled_link_through_one_rank_names_that_rank_to_investigate() {
        let r = ranks(4);
        let v = verdicts(&scan(&[(1, 2), (2, 3), (3, 2), (2, 1)]), &orders(), &r);
        assert_eq!(v.len(), 1, "{v:?}");
        let v = &v[0];
        assert_eq!(
            (v.kind, v.from_rank, v.to_rank),
            (VerdictKind::ConnectionStall, Some(2), None)
        );
        assert_eq!(v.action(), crate::ring::model::Action::Investigate);
        assert!(
            v.message.starts_with("CONNECTION STALLS at rank 2 (")
                && v.message
                    .contains("4 of the 4 links measured through it went silent for 3.0 s"),
            "{}",
            v.message
        );
        // Two orders each lost 3 s.
        assert_eq!(v.evidence["lost_s"], json!(6.0));
        assert_eq!(v.evidence["orders_stalled"], json!(2));
        assert_eq!(v.evidence["scan_orders_s"], json!(6.5));
        let next = v.next.as_deref().unwrap();
        let cmds = assert_next_pastes(v);
        assert!(
            cmds.iter()
                .any(|c| c.starts_with("ping -M do -s $(( $(cat /sys/class/net/")),
            "{next}"
        );
        assert!(
            cmds.iter().any(|c| c.starts_with("ping -M do -s 1472 -c 3 ")),
            "{next}"
        );
    }

    #[test]
    fn one_stalled_link_names_the_link_and_no_common_end_names_no_rank() {
        let r = ranks(4);
        let v = verdicts(&scan(&[(1, 2)]), &orders(), &r);
        assert_eq!((v[0].from_rank, v[0].to_rank), (Some(1), Some(2)), "{v:?}");
        assert!(
            v[0].message.starts_with("CONNECTION STALL on the link rank 1 ("),
            "{}",
            v[0].message
        );
        assert_next_pastes(&v[0]);
        // 0 -> 1 and 2 -> 3 share no rank: nobody is blamed.
        let v = verdicts(&scan(&[(0, 1), (2, 3)]), &orders(), &r);
        assert_eq!((v[0].from_rank, v[0].to_rank), (None, None), "{v:?}");
        assert_eq!(v[0].action(), crate::ring::model::Action::Investigate);
        assert_next_pastes(&v[0]);
        // Nothing stalled: no verdict.
        assert!(verdicts(&scan(&[]), &orders(), &r).is_empty());
    }

    /// One channel's waits: `recv` (chunk, s), `send` (chunk, s), floor 0.25 s.
    fn cw(recv: &[(u64, f64)], send: &[(u64, f64)]) -> Vec<ChunkWaits> {
        vec![ChunkWaits {
            recv_wait: recv.to_vec(),
            send_delay: send.to_vec(),
            floor_s: 0.25,
        }]
    }

    /// The black hole at rank 2 in the sweep: its two links stall 6 s on their first chunk,
    /// and the ring passes the wait on: rank 0 waits as long for chunk 1 (rank 3 sends it
    /// once chunk 0 arrived), rank 1 for chunk 2.
    fn black_hole() -> BTreeMap<Rank, Vec<ChunkWaits>> {
        BTreeMap::from([
            (0, cw(&[(1, 6.0)], &[])),
            (1, cw(&[(2, 6.1)], &[])),
            (2, cw(&[(0, 6.2)], &[])),
            (3, cw(&[(0, 6.0)], &[])),
        ])
    }

    #[test]
    fn a_sweep_wait_passed_on_by_the_ring_is_not_the_links_own() {
        let got = sweep_silences(4, &black_hole());
        // 1 -> 2 and 2 -> 3 stalled; 3 -> 0 and 0 -> 1 waited on them (6.0 - 6.0 - 0.25).
        // The senders' delays were not listed: up to the floor, 0.25 s, is theirs.
        assert_eq!(got.keys().copied().collect::<Vec<_>>(), [(1, 2), (2, 3)]);
        assert!(
            (got[&(1, 2)] - 5.95).abs() < 1e-9 && (got[&(2, 3)] - 5.75).abs() < 1e-9,
            "{got:?}"
        );
        // A sender's own delay to send the chunk (a barrier, its flow control) explains it.
        let w = BTreeMap::from([(0, cw(&[], &[(4, 5.0)])), (1, cw(&[(4, 5.1)], &[]))]);
        assert!(sweep_silences(2, &w).is_empty());
        // Not listed at the sender: up to its floor for each of the two (its wait for the
        // chunk before, its delay to send this one), so 3.45 s is a stall of 2.95 s or
        // more: none; 3.55 s is.
        let w = BTreeMap::from([(0, cw(&[], &[])), (1, cw(&[(4, 3.45)], &[]))]);
        assert!(sweep_silences(2, &w).is_empty());
        let w = BTreeMap::from([(0, cw(&[], &[])), (1, cw(&[(4, 3.55)], &[]))]);
        assert_eq!(sweep_silences(2, &w).len(), 1);
        // A sender that did not report: no figure for its hop.
        let w = BTreeMap::from([(1, cw(&[(0, 9.0)], &[]))]);
        assert!(sweep_silences(2, &w).is_empty());
    }

    #[test]
    fn the_sweeps_stalls_name_the_rank_they_share() {
        let r = ranks(4);
        let hops: Vec<LinkSample> = (0..4).map(|to| s(0, (to + 3) % 4, to, None)).collect();
        let v = sweep_verdicts(4, &hops, &black_hole(), &r);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(
            (v[0].kind, v[0].from_rank, v[0].to_rank),
            (VerdictKind::ConnectionStall, Some(2), None)
        );
        assert!(
            v[0].message
                .contains("2 of the 2 links measured through it went silent for 5.8-6.0 s"),
            "{}",
            v[0].message
        );
        // One ring: it lost the longest; no scan orders to speak of.
        assert_eq!(v[0].evidence["lost_s"], json!(5.95));
        assert!(
            !v[0].evidence.contains_key("scan_orders_s"),
            "{:?}",
            v[0].evidence
        );
        assert_next_pastes(&v[0]);
        assert!(sweep_verdicts(4, &hops, &BTreeMap::new(), &r).is_empty());
    }

    #[test]
    fn a_short_silence_reported_by_a_peer_is_no_stall() {
        let mut x = scan(&[]);
        x[0].silence_s = Some(0.5);
        x[1].silence_s = Some(f64::NAN);
        assert!(verdicts(&x, &orders(), &ranks(4)).is_empty());
    }

    fn st(from: Rank, to: Rank, seconds: f64) -> Stall {
        Stall {
            from,
            to,
            order: 0,
            seconds,
        }
    }

    /// The stall verdict of `stalls` over the ring hops of 4 ranks and the scan's orders.
    fn verdict_of(stalls: &[Stall]) -> (Verdict, Vec<Stall>) {
        let v = of_stalls(stalls, &scan(&[]), &orders(), &ranks(4)).pop().unwrap();
        (v, stalls.to_vec())
    }

    /// Issue 45: with both scan and sweep, one verdict where both name the same fault (one
    /// names what the other's stalls went through), both where they are different links
    /// or ranks; the sweep's stalls were dropped whenever the scan named one.
    #[test]
    fn the_sweeps_stall_beside_the_scans_is_one_verdict_where_the_same_and_two_where_not() {
        let r = ranks(4);
        let at_2 = [st(1, 2, 6.5), st(2, 3, 6.4)];
        let slow = (
            Verdict {
                kind: VerdictKind::SlowLink,
                ..verdict_of(&[st(0, 1, 4.0)]).0
            },
            vec![],
        );
        // (scan's stalls, sweep's stalls, the stall verdicts after: (from, to))
        let one = vec![at_2[0]];
        let at_2 = at_2.to_vec();
        let apart = vec![st(0, 1, 4.0), st(2, 3, 4.0)];
        type Row = (Vec<Stall>, Vec<Stall>, Vec<(Option<Rank>, Option<Rank>)>);
        let table: Vec<Row> = vec![
            // The same rank, the same links.
            (at_2.clone(), at_2.clone(), vec![(Some(2), None)]),
            // The scan's rank holds the sweep's one link (1 -> 2), and the other way round.
            (at_2.clone(), one.clone(), vec![(Some(2), None)]),
            (one.clone(), at_2.clone(), vec![(Some(2), None)]),
            // The same one link.
            (one.clone(), one.clone(), vec![(Some(1), Some(2))]),
            // Different ranks and links: both.
            (
                at_2.clone(),
                vec![st(3, 0, 4.0), st(0, 1, 4.0)],
                vec![(Some(2), None), (Some(0), None)],
            ),
            (
                one.clone(),
                vec![st(3, 0, 4.0)],
                vec![(Some(1), Some(2)), (Some(3), Some(0))],
            ),
            // Links with no common rank: the same list is one, a list that holds the
            // other's links is one, another list is two.
            (apart.clone(), apart.clone(), vec![(None, None)]),
            (apart.clone(), vec![st(2, 3, 4.0)], vec![(None, None)]),
            (
                apart.clone(),
                vec![st(1, 2, 4.0)],
                vec![(None, None), (Some(1), Some(2))],
            ),
        ];
        for (scan_stalls, sweep_stalls, want) in table {
            let (scan_stalls, sweep_stalls) = (&scan_stalls[..], &sweep_stalls[..]);
            let mut weighed = vec![slow.clone(), verdict_of(scan_stalls)];
            merge_sweep(&mut weighed, verdict_of(sweep_stalls), &r);
            assert_eq!(weighed[0], slow, "{scan_stalls:?} {sweep_stalls:?}");
            let got: Vec<_> = weighed[1..]
                .iter()
                .map(|(v, _)| (v.from_rank, v.to_rank))
                .collect();
            assert_eq!(got, want, "{scan_stalls:?} {sweep_stalls:?}");
            if want.len() == 1 {
                // One verdict: it says the other's stalls and holds them all.
                let (v, links) = &weighed[1];
                assert!(
                    v.message
                        .contains("; the sweep's connections stalled there too (")
                        || v.message.contains("; the scan's connections stalled there too ("),
                    "{}",
                    v.message
                );
                assert_eq!(links.len(), scan_stalls.len() + sweep_stalls.len());
            }
        }
        // No scan stall: the sweep's joins the list.
        let mut weighed = vec![slow.clone()];
        merge_sweep(&mut weighed, verdict_of(&at_2), &r);
        assert_eq!(weighed.len(), 2);
        assert!(!weighed[1].0.message.contains("stalled there too"));
    }

    fn beat(wait_ms: u64, window_ms: u64) -> CpuWait {
        CpuWait { wait_ms, window_ms }
    }

    #[test]
    fn a_starved_stretch_is_successive_windows_each_mostly_waiting() {
        let mut s = Starved::default();
        // Load that costs each window a little: no stretch.
        for _ in 0..40 {
            s.add(beat(200, 500));
        }
        assert_eq!(s.wait_s(), 0.0);
        // 3 starved windows, one that is not, 2 more: the longest is the 3.
        for b in [
            beat(450, 500),
            beat(900, 1000),
            beat(1900, 2000),
            beat(100, 500),
            beat(500, 500),
            beat(500, 500),
        ] {
            s.add(b);
        }
        assert!((s.wait_s() - 3.25).abs() < 1e-9, "{s:?}");
        assert!((s.share() - 3250.0 / 3500.0).abs() < 1e-9);
        // A window too short to say (150 ms) breaks a stretch.
        let mut s = Starved::default();
        for b in [beat(150, 150), beat(150, 150)] {
            s.add(b);
        }
        assert_eq!(s.wait_s(), 0.0);
    }

    /// Issue 45, `--no-scan`: a sweep stall a starved host could explain is set apart (its
    /// ranks named), one it cannot is judged.
    #[test]
    fn a_sweep_stall_a_starved_rank_explains_is_set_apart_and_one_it_cannot_is_judged() {
        let starved = |w: &[(Rank, u64)]| -> BTreeMap<Rank, Starved> {
            w.iter()
                .map(|&(r, ms)| {
                    let mut s = Starved::default();
                    s.add(beat(ms, ms + ms / 10));
                    (r, s)
                })
                .collect()
        };
        let black_hole = [st(1, 2, 6.3), st(2, 3, 6.2)];
        for (stalls, cpu, judged, explained, who) in [
            // No rank starved: judged.
            (&black_hole[..], starved(&[]), 2, 0, vec![]),
            // Starved 1.5 s: 6.3 - 1.5 still a stall.
            (&black_hole[..], starved(&[(2, 1500)]), 2, 0, vec![]),
            // Starved 4 s: 6.3 - 4 is no stall; the rank that waited so long is named.
            (&black_hole[..], starved(&[(2, 4000), (0, 200)]), 0, 2, vec![2]),
            // Starved 2 s: a 4 s stall is explained, a 9 s one stands.
            (
                &[st(1, 2, 4.0), st(3, 0, 9.0)][..],
                starved(&[(1, 2000)]),
                1,
                1,
                vec![1],
            ),
        ] {
            let (j, e, w) = cpu_split(stalls, &cpu);
            assert_eq!((j.len(), e.len()), (judged, explained), "{stalls:?} {cpu:?}");
            assert_eq!(w.keys().copied().collect::<Vec<_>>(), who, "{stalls:?} {cpu:?}");
            for share in w.values() {
                assert!((share - 1.0 / 1.1).abs() < 0.01, "{w:?}");
            }
        }
    }
}
