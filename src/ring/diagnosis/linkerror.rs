//! `link_error` verdicts: a data link's queue pair completed a work request in error (RDMA),
//! and the status says why. Pure: the coordinator collects the faults the ranks report
//! (`Msg::Failed.link_fault`) and asks [`verdicts`] on every message.
//!
//! One verdict per directed ring link, from its first fault that is not a flush: status 5
//! (`IBV_WC_WR_FLUSH_ERR`) only follows an earlier error on the same queue pair, so it is the
//! knock-on, never the cause; a run whose only faults are flushes gets no verdict here (the
//! watchdog names the hang). Meanings follow what NCCL's maintainers conclude from each
//! status (rdma-core `enum ibv_wc_status` in libibverbs/verbs.h; NCCL issues such as NVIDIA/nccl#1814).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::ring::model::{LinkFault, Rank, RankInfo, Verdict, VerdictKind, shown};

fn label(ranks: &[RankInfo], r: Rank) -> String {
    match ranks.iter().find(|i| i.rank == r) {
        Some(i) => format!("rank {} ({})", i.shown(), i.host),
        None => format!("rank {r}"),
    }
}

fn host(ranks: &[RankInfo], r: Rank) -> Option<String> {
    ranks.iter().find(|i| i.rank == r).map(|i| i.host.clone())
}

/// What a person should check for this status, on the two hosts.
fn next(status: u32, fh: &str, th: &str) -> String {
    match status {
        12 => format!(
            "on {fh} and {th}: `fabprobe links` (port state; retry and sequence error counters) and `fabprobe gids` \
             (both ends on the same RoCE version and a routable GID index); check the path between them \
             (cable, switch port, PFC/ECN); NCCL_IB_TIMEOUT/NCCL_IB_RETRY_CNT only delay this error"
        ),
        13 => format!(
            "on {th}: the receiver posted no receive in time (a stalled process, or too few receives)"
        ),
        4 => format!(
            "on the rank that saw it: the buffer is not registered for this access; with GPU buffers check \
             fabprobe gdr on {fh} and {th} (ACS/IOMMU redirecting peer-to-peer traffic)"
        ),
        10 => format!(
            "on {th}: the rkey or address {fh} wrote to is not valid for remote write (a bug, or memory freed)"
        ),
        _ => format!("on {fh} and {th}: `fabprobe links` (port state and error counters)"),
    }
}

/// The rank at the other end of the link from the one that saw the fault.
fn far_end(f: &LinkFault) -> Rank {
    if f.seen_by == f.from_rank {
        f.to_rank
    } else {
        f.from_rank
    }
}

/// Is `f` what a queue pair does when its peer's process is gone (`gone`: ranks whose
/// control connection closed, or that were interrupted)? The dead peer's queue pair is
/// destroyed, so the survivor's sends run out of retries (status 12) or are flushed: the
/// rank's end explains it, never the link.
pub(crate) fn after_a_gone_peer(f: &LinkFault, gone: &BTreeSet<Rank>) -> bool {
    gone.contains(&far_end(f))
}

/// `faults` split into those a link may have caused and those a gone peer explains
/// ([`after_a_gone_peer`]), each in arrival order.
pub(crate) fn split_by_gone(faults: &[LinkFault], gone: &BTreeSet<Rank>) -> (Vec<LinkFault>, Vec<LinkFault>) {
    faults.iter().cloned().partition(|f| !after_a_gone_peer(f, gone))
}

/// Hang the faults a gone rank explains on that rank's own verdicts (`evidence.link_faults_after`),
/// so the report still shows what its peers saw.
pub(crate) fn attach_to_gone(verdicts: &mut [Verdict], explained: &[LinkFault], ranks: &[RankInfo]) {
    for v in verdicts.iter_mut().filter(|v| v.to_rank.is_none()) {
        let Some(r) = v.from_rank else { continue };
        let mine: Vec<Value> = explained
            .iter()
            .filter(|f| far_end(f) == r)
            .map(|f| {
                json!({
                    "from_rank": shown(ranks, f.from_rank),
                    "to_rank": shown(ranks, f.to_rank),
                    "seen_by_rank": shown(ranks, f.seen_by),
                    "status": f.status,
                    "status_name": f.status_name,
                })
            })
            .collect();
        if !mine.is_empty() {
            v.evidence.insert("link_faults_after".into(), Value::Array(mine));
        }
    }
}

/// The verdicts for the faults reported so far (first fault per link, flushes skipped), in
/// the order their links first failed.
pub(crate) fn verdicts(faults: &[LinkFault], ranks: &[RankInfo]) -> Vec<Verdict> {
    let mut by_link: BTreeMap<(Rank, Rank), Vec<&LinkFault>> = BTreeMap::new();
    let mut order: Vec<(Rank, Rank)> = Vec::new();
    for f in faults.iter().filter(|f| !f.is_flush()) {
        let k = (f.from_rank, f.to_rank);
        if !by_link.contains_key(&k) {
            order.push(k);
        }
        by_link.entry(k).or_default().push(f);
    }
    order
        .into_iter()
        .map(|k| {
            let fs = &by_link[&k];
            let f = fs[0];
            let (from, to) = (label(ranks, f.from_rank), label(ranks, f.to_rank));
            let mut ev: BTreeMap<String, Value> = BTreeMap::new();
            ev.insert("status".into(), json!(f.status));
            ev.insert("status_name".into(), json!(f.status_name));
            ev.insert("vendor_err".into(), json!(format!("{:#x}", f.vendor_err)));
            ev.insert("seen_by_rank".into(), json!(shown(ranks, f.seen_by)));
            ev.insert("device".into(), json!(f.device));
            ev.insert("operation".into(), json!(f.operation));
            ev.insert(
                "reports".into(),
                json!(
                    fs.iter()
                        .map(|x| json!({
                            "seen_by_rank": shown(ranks, x.seen_by),
                            "device": x.device,
                            "operation": x.operation,
                            "status": x.status,
                            "vendor_err": format!("{:#x}", x.vendor_err),
                        }))
                        .collect::<Vec<_>>()
                ),
            );
            let message = format!(
                "LINK ERROR {from} -> {to}: {} completed with status {} ({}) on {} of {}: {}; vendor syndrome {:#x}",
                f.operation,
                f.status,
                f.status_name,
                f.device,
                label(ranks, f.seen_by),
                f.meaning,
                f.vendor_err
            );
            let fh = host(ranks, f.from_rank)
                .unwrap_or_else(|| format!("rank {}'s host", shown(ranks, f.from_rank)));
            let th = host(ranks, f.to_rank).unwrap_or_else(|| format!("rank {}'s host", shown(ranks, f.to_rank)));
            Verdict { rail: None,
                kind: VerdictKind::LinkError,
                from_rank: Some(f.from_rank),
                to_rank: Some(f.to_rank),
                from_host: host(ranks, f.from_rank),
                to_host: host(ranks, f.to_rank),
                evidence: ev,
                message,
                next: Some(next(f.status, &fh, &th)),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranks() -> Vec<RankInfo> {
        (0..3)
            .map(|r| RankInfo {
                neighbor: None,
                port_max: None,
                rails: Vec::new(),
                node: None,
                rank: r,
                host: format!("node-{}", (b'a' + r as u8) as char),
                address: format!("198.18.5.{}:4000", 10 + r),
                device: Some("rxe0:1 gid 1 (eth0)".into()),
                transport: "rdma".into(),
                pid: None,
                capabilities: vec!["rdma".into()],
            })
            .collect()
    }

    fn fault(from: Rank, to: Rank, seen_by: Rank, status: u32) -> LinkFault {
        LinkFault {
            from_rank: from,
            to_rank: to,
            seen_by,
            device: "rxe0:1 gid 1".into(),
            operation: if seen_by == from {
                "an RDMA write"
            } else {
                "a credit"
            }
            .into(),
            status,
            status_name: "some status".into(),
            meaning: "what it means".into(),
            vendor_err: 0x81,
        }
    }

    #[test]
    fn retry_exceeded_names_the_link_and_the_status() {
        let v = verdicts(&[fault(0, 1, 0, 12)], &ranks());
        assert_eq!(v.len(), 1);
        let v = &v[0];
        assert_eq!(
            (v.kind, v.from_rank, v.to_rank),
            (VerdictKind::LinkError, Some(0), Some(1))
        );
        assert_eq!(v.from_host.as_deref(), Some("node-a"));
        assert_eq!(v.to_host.as_deref(), Some("node-b"));
        assert_eq!(
            v.message,
            "LINK ERROR rank 0 (node-a) -> rank 1 (node-b): an RDMA write completed with status 12 (some status) \
             on rxe0:1 gid 1 of rank 0 (node-a): what it means; vendor syndrome 0x81"
        );
        assert_eq!(v.evidence["status"], 12);
        assert_eq!(v.evidence["vendor_err"], "0x81");
        assert!(
            v.next.as_deref().unwrap().contains("fabprobe gids"),
            "{:?}",
            v.next
        );
    }

    #[test]
    fn a_flush_is_never_the_verdict() {
        assert!(verdicts(&[fault(0, 1, 1, 5)], &ranks()).is_empty());
        // The flush came in first; the cause behind it is what the verdict names.
        let v = verdicts(&[fault(1, 2, 2, 5), fault(0, 1, 0, 12)], &ranks());
        assert_eq!(v.len(), 1);
        assert_eq!((v[0].from_rank, v[0].to_rank), (Some(0), Some(1)));
        assert_eq!(v[0].evidence["status"], 12);
    }

    #[test]
    fn both_ends_of_one_link_give_one_verdict_with_both_reports() {
        let v = verdicts(&[fault(0, 1, 0, 12), fault(0, 1, 1, 12)], &ranks());
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].evidence["seen_by_rank"], 0);
        assert_eq!(v[0].evidence["reports"].as_array().unwrap().len(), 2);
    }

    /// Every fault a 3-ring can report (each directed link, seen by either end, each status
    /// a dead peer or a real fault gives) against every set of gone ranks: a fault is the
    /// gone peer's exactly when the end that did not see it is gone; the rest stay causes,
    /// in order, and a gone rank's own earlier report stays one.
    #[test]
    fn a_fault_on_a_link_to_a_gone_rank_is_that_ranks_never_the_links() {
        let mut all = Vec::new();
        for (from, to) in [(0, 1), (1, 2), (2, 0)] {
            for seen_by in [from, to] {
                for status in [12, 13, 5, 4, 10] {
                    all.push(fault(from, to, seen_by, status));
                }
            }
        }
        for mask in 0u8..8 {
            let gone: BTreeSet<Rank> = (0..3).filter(|r| mask & (1 << r) != 0).collect();
            let (own, explained) = split_by_gone(&all, &gone);
            assert_eq!(own.len() + explained.len(), all.len());
            for f in &all {
                let other = if f.seen_by == f.from_rank {
                    f.to_rank
                } else {
                    f.from_rank
                };
                let want_explained = gone.contains(&other);
                assert_eq!(explained.contains(f), want_explained, "gone {gone:?}: {f:?}");
                assert_eq!(own.contains(f), !want_explained, "gone {gone:?}: {f:?}");
            }
            // No gone rank: every fault is judged as before.
            if gone.is_empty() {
                assert_eq!(verdicts(&own, &ranks()), verdicts(&all, &ranks()));
            }
        }
        // Rank 2 killed: rank 1's retry-exceeded on 1 -> 2 and rank 0's on 2 -> 0 are rank
        // 2's; nothing is left to blame a link.
        let gone = BTreeSet::from([2]);
        let (own, explained) = split_by_gone(&[fault(1, 2, 1, 12), fault(2, 0, 0, 12)], &gone);
        assert!(verdicts(&own, &ranks()).is_empty());
        let mut v = vec![Verdict::bare(VerdictKind::RankLost, Some(2), None)];
        attach_to_gone(&mut v, &explained, &ranks());
        let after = v[0].evidence["link_faults_after"].as_array().unwrap();
        assert_eq!(after.len(), 2, "{after:?}");
        assert_eq!(after[0]["seen_by_rank"], 1);
        assert_eq!(after[1]["status"], 12);
        // A verdict on a link, or on another rank, gets none of them.
        let mut v = vec![
            Verdict::bare(VerdictKind::RankLost, Some(1), None),
            Verdict::bare(VerdictKind::HangLink, Some(2), Some(0)),
        ];
        attach_to_gone(&mut v, &explained, &ranks());
        assert!(v.iter().all(|v| v.evidence.is_empty()), "{v:?}");
    }

    #[test]
    fn each_status_has_its_own_advice() {
        let r = ranks();
        for (status, says) in [
            (12, "fabprobe gids"),
            (13, "no receive"),
            (4, "fabprobe gdr"),
            (10, "rkey"),
            (9, "fabprobe links"),
        ] {
            let v = verdicts(&[fault(2, 0, 2, status)], &r);
            crate::ring::diagnosis::pastes::assert_next_pastes(&v[0]);
            assert!(
                v[0].next.as_deref().unwrap().contains(says),
                "{status}: {:?}",
                v[0].next
            );
        }
    }
}
