//! Verdicts from the job's dumps, per process group, each blaming exactly the ranks the
//! records show: a collective where the ranks' calls differ (op, sizes, dtype); ranks that
//! never entered the collective the others wait in; P2P ops whose other end is not there;
//! members with no dump while the others wait (died or killed); a buffer that no longer
//! reaches the wait (said, not guessed around); and every member entered, none completed
//! (the fabric or NCCL, not the application). The ranks that waited, and ranks that died
//! after a mismatch, are listed under the cause, never blamed.

use crate::text::rank_runs;
use std::collections::BTreeMap;

use serde::Serialize;

use super::{Call, Group, Job, RankDump, State};
use crate::finding::Severity;

/// One rank's call, as a verdict cites it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RankCall {
    pub ranks: Vec<u32>,
    /// How many ranks made this call (`ranks` is a sample of at most 64).
    pub count: u32,
    pub call: String,
    pub state: State,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FlightVerdict {
    pub cause: &'static str,
    pub severity: Severity,
    /// The ranks the records blame (global ranks).
    pub ranks: Vec<u32>,
    pub group: String,
    pub group_desc: String,
    pub members: Vec<u32>,
    /// The sequence number in the group the verdict is about.
    pub seq: Option<u64>,
    /// The collective the others wait in (as recorded).
    pub op: Option<String>,
    /// Which ranks called what (a mismatch), or where each blamed rank was last seen.
    pub calls: Vec<RankCall>,
    /// Ranks waiting on the blamed ones: knock-ons, not causes.
    pub waiting: Vec<u32>,
    /// Other knock-ons, in words (a rank that left no dump after a mismatch, the NCCL
    /// log's collective timeouts).
    pub knock_ons: Vec<String>,
    /// What the NCCL log says of the blamed ranks (a rank with no dump).
    pub log_says: Vec<String>,
    /// Host of each rank named here, where the logs say.
    pub hosts: BTreeMap<u32, String>,
    pub meaning: String,
    pub next: String,
    /// The dump cited (a blamed rank's, else a waiting rank's).
    pub file: String,
}

/// The flight-recorder part of the job's report.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FlightReport {
    pub dumps: Vec<RankDump>,
    pub groups: Vec<Group>,
    pub verdicts: Vec<FlightVerdict>,
    /// What limits the reading (no completion tracking, duplicates skipped).
    pub notes: Vec<String>,
}

/// Judge the job; `hosts` maps global rank -> host where the NCCL logs say.
pub fn judge(job: &Job, hosts: &BTreeMap<u32, String>) -> FlightReport {
    let groups = job.groups();
    let mut verdicts = Vec::new();
    for g in &groups {
        verdicts.extend(judge_group(job, g, hosts));
    }
    verdicts.sort_by_key(|v| (std::cmp::Reverse(v.severity), rank_of(v.cause)));
    let mut notes = Vec::new();
    let untracked: Vec<u32> = job
        .dumps()
        .values()
        .filter(|d| !d.tracks_completion)
        .map(|d| d.rank)
        .collect();
    if !untracked.is_empty() {
        notes.push(format!(
            "rank {}: no entry moved past scheduled (Gloo's recorder does not track completion): whether the last collective completed is not judged",
            rank_runs(&untracked)
        ));
    }
    for e in job.unreadable.values().chain(&job.unreadable_files) {
        notes.push(format!("not judged: {e}"));
    }
    for f in &job.duplicates {
        notes.push(format!(
            "{f}: a second dump of a rank already read (the first is used)"
        ));
    }
    FlightReport {
        dumps: job.dumps().values().cloned().collect(),
        groups,
        verdicts,
        notes,
    }
}

/// Causes first, then what cannot be judged.
fn rank_of(cause: &str) -> u8 {
    match cause {
        "fr_collective_mismatch" => 0,
        "fr_p2p_mismatch" => 1,
        "fr_rank_not_entered" => 2,
        "fr_rank_no_dump" => 3,
        "fr_all_entered_none_completed" => 4,
        _ => 5,
    }
}

/// Where each dumped member stands in one group.
struct Standing<'a> {
    /// (rank, its newest collective in the group).
    seen: Vec<(u32, &'a Call)>,
    /// Members whose dump holds nothing of the group though its buffer wrapped.
    lost: Vec<u32>,
    /// Members whose dump holds nothing of the group (buffer not wrapped): never called one.
    never: Vec<u32>,
    /// Members with no dump.
    missing: Vec<u32>,
}

fn standing<'a>(job: &'a Job, g: &Group) -> Standing<'a> {
    let mut s = Standing {
        seen: vec![],
        lost: vec![],
        never: vec![],
        missing: vec![],
    };
    for &r in &g.ranks {
        match job.dumps().get(&r) {
            None if job.unreadable.contains_key(&r) => {}
            None => s.missing.push(r),
            Some(d) => match d.last_in(&g.name) {
                Some(c) => s.seen.push((r, c)),
                None if d.wrapped => s.lost.push(r),
                None => s.never.push(r),
            },
        }
    }
    s
}

/// A verdict of `cause` on group `g` with nothing found yet.
fn blank(g: &Group, cause: &'static str, severity: Severity) -> FlightVerdict {
    FlightVerdict {
        cause,
        severity,
        ranks: vec![],
        group: g.name.clone(),
        group_desc: g.desc.clone(),
        members: g.ranks.clone(),
        seq: None,
        op: None,
        calls: vec![],
        waiting: vec![],
        knock_ons: vec![],
        log_says: vec![],
        hosts: BTreeMap::new(),
        meaning: String::new(),
        next: String::new(),
        file: String::new(),
    }
}

fn judge_group(job: &Job, g: &Group, hosts: &BTreeMap<u32, String>) -> Vec<FlightVerdict> {
    let st = standing(job, g);
    let base = |cause, severity| blank(g, cause, severity);
    if let Some(v) = mismatch(job, g, &st, base("fr_collective_mismatch", Severity::Fail)) {
        return vec![finish(v, job, hosts)];
    }
    let mut out = Vec::new();
    if let Some(v) = p2p_mismatch(job, g, base("fr_p2p_mismatch", Severity::Fail)) {
        out.push(v);
    }
    let Some(top) = st.seen.iter().map(|(_, c)| c.seq).max() else {
        return out.into_iter().map(|v| finish(v, job, hosts)).collect();
    };
    let at_top: Vec<(u32, &Call)> = st.seen.iter().filter(|(_, c)| c.seq == top).cloned().collect();
    let behind: Vec<(u32, &Call)> = st.seen.iter().filter(|(_, c)| c.seq < top).cloned().collect();
    // A collective completes on every member or none: one that completed at `top` means the
    // members behind were dumped earlier, not that they never came.
    let top_completed = at_top.iter().any(|(_, c)| c.state == State::Completed);
    let waiting: Vec<u32> = at_top.iter().map(|(r, _)| *r).collect();
    let top_call = at_top.first().map(|(_, c)| (*c).clone());
    let stuck = !top_completed && (!behind.is_empty() || !st.never.is_empty() || !st.missing.is_empty());
    if stuck && (!behind.is_empty() || !st.never.is_empty()) {
        out.push(not_entered(
            job,
            g,
            &behind,
            &st.never,
            &waiting,
            top_call.as_ref(),
            base("fr_rank_not_entered", Severity::Fail),
        ));
    }
    if stuck && !st.missing.is_empty() {
        out.push(no_dump(
            &st.missing,
            &waiting,
            top_call.as_ref(),
            job,
            base("fr_rank_no_dump", Severity::Fail),
        ));
    }
    if !st.lost.is_empty() && !top_completed {
        out.push(wrapped(
            job,
            &st.lost,
            &waiting,
            top_call.as_ref(),
            base("fr_buffer_wrapped", Severity::Unknown),
        ));
    }
    if out.is_empty()
        && st.lost.is_empty()
        && !st.seen.is_empty()
        && let Some(v) = none_completed(
            job,
            &at_top,
            g,
            base("fr_all_entered_none_completed", Severity::Fail),
        )
    {
        out.push(v);
    }
    out.into_iter().map(|v| finish(v, job, hosts)).collect()
}

/// The lowest sequence number where the ranks' calls differ: the ranks outside the largest
/// group of identical calls are blamed; members that left no dump are knock-ons (a rank
/// that crashed on the bad data).
fn mismatch(job: &Job, g: &Group, st: &Standing, mut v: FlightVerdict) -> Option<FlightVerdict> {
    let (seq, calls, more) = job.first_disagreement(&g.name)?;
    let (first, rest) = calls.split_first()?;
    // A tie has no majority to measure against: every side is named.
    let tie = rest.first().is_some_and(|c| c.1 == first.1);
    let blamed: Vec<&(Call, u32, Vec<u32>)> = if tie {
        calls.iter().collect()
    } else {
        rest.iter().collect()
    };
    v.ranks = sorted_flat(blamed.iter().map(|c| &c.2));
    v.seq = Some(seq);
    v.op = Some(first.0.describe());
    v.calls = calls
        .iter()
        .map(|(c, n, r)| RankCall {
            ranks: r.clone(),
            count: *n,
            call: c.describe(),
            state: c.state,
        })
        .collect();
    v.waiting = if tie { vec![] } else { first.2.clone() };
    for r in &st.missing {
        v.knock_ons.push(format!(
            "rank {r} left no dump (it likely crashed on the mismatched data, or was killed)"
        ));
    }
    let what = differ(&first.0, &rest.first()?.0);
    v.meaning = format!(
        "at sequence number {seq} of process group {} the ranks called different collectives ({what}){}: the application issued them in a different order or shape on these ranks; the job hangs or fails there, not in the fabric",
        label(g),
        if more > 0 {
            format!("; {more} more distinct calls not kept")
        } else {
            String::new()
        },
    );
    v.next = format!(
        "fix the application: find where rank {} issues `{}` at this point (a rank-dependent branch, an uneven last batch, a dtype cast); rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL to have PyTorch check each collective",
        rank_runs(&v.ranks),
        rest.first()?.0.describe(),
    );
    v.file = cite(job, &v.ranks);
    Some(v)
}

/// What differs between two calls: op, sizes or dtype (in a coalescing block, of its first
/// op that differs, or the count of its ops).
fn differ(a: &Call, b: &Call) -> &'static str {
    if !a.coalesced.is_empty() || !b.coalesced.is_empty() {
        if a.coalesced.is_empty() || b.coalesced.is_empty() {
            return "a coalesced block on some ranks, a single op on others";
        }
        if a.coalesced.len() != b.coalesced.len() {
            return "the coalesced blocks hold different numbers of ops";
        }
        return a
            .coalesced
            .iter()
            .zip(&b.coalesced)
            .find(|(x, y)| x.signature() != y.signature())
            .map_or("sizes differ", |(x, y)| differ(x, y));
    }
    if a.kind() != b.kind() {
        "op differs"
    } else if a.input_dtypes != b.input_dtypes || a.output_dtypes != b.output_dtypes {
        "dtype differs"
    } else {
        "sizes differ"
    }
}

fn not_entered(
    job: &Job,
    g: &Group,
    behind: &[(u32, &Call)],
    never: &[u32],
    waiting: &[u32],
    top: Option<&Call>,
    mut v: FlightVerdict,
) -> FlightVerdict {
    v.ranks = sorted_flat([behind.iter().map(|(r, _)| *r).collect::<Vec<_>>(), never.to_vec()].iter());
    v.seq = top.map(|c| c.seq);
    v.op = top.map(Call::describe);
    v.waiting = waiting.to_vec();
    for (r, c) in behind {
        v.calls.push(last_seen(job, *r, c));
    }
    for r in never {
        if let Some(c) = job.dumps().get(r).and_then(|d| d.last.as_ref()) {
            v.calls.push(RankCall {
                ranks: vec![*r],
                count: 1,
                call: format!("{} in group {} seq {}", c.describe(), c.group, c.seq),
                state: c.state,
            });
        }
    }
    let op = top.map_or("it".to_string(), |c| format!("`{}`", c.describe()));
    v.meaning = format!(
        "rank {} never entered sequence number {} of process group {} ({op}), which rank {} entered and wait in; it was last seen in the call listed: the application on that rank stalled or took another path, not the fabric",
        rank_runs(&v.ranks),
        v.seq.map_or("?".into(), |s| s.to_string()),
        label(g),
        rank_runs(waiting),
    );
    v.next = format!(
        "on rank {}: its stack (py-spy dump --pid PID, or the dump's frames with TORCH_FR stack traces on) and its log around the last call; the waiting ranks are knock-ons",
        rank_runs(&v.ranks)
    );
    v.file = cite(job, &v.ranks);
    v
}

/// Where a rank behind was last seen: its newest call in the group, and its newest of all
/// when that is elsewhere (the group it is busy in).
fn last_seen(job: &Job, r: u32, in_group: &Call) -> RankCall {
    let mut call = format!("seq {} {}", in_group.seq, in_group.describe());
    if let Some(last) = job.dumps().get(&r).and_then(|d| d.last.as_ref())
        && last.group != in_group.group
    {
        call.push_str(&format!(
            "; newest of all: group {} seq {} {} ({})",
            last.group,
            last.seq,
            last.describe(),
            last.state.as_str()
        ));
    }
    RankCall {
        ranks: vec![r],
        count: 1,
        call,
        state: in_group.state,
    }
}

fn no_dump(
    missing: &[u32],
    waiting: &[u32],
    top: Option<&Call>,
    job: &Job,
    mut v: FlightVerdict,
) -> FlightVerdict {
    v.ranks = missing.to_vec();
    v.seq = top.map(|c| c.seq);
    v.op = top.map(Call::describe);
    v.waiting = waiting.to_vec();
    v.meaning = format!(
        "rank {} left no dump among the inputs while rank {} wait in sequence number {} of process group {}: it died or was killed (a dump is written by a live process), or its dump was not collected",
        rank_runs(missing),
        rank_runs(waiting),
        v.seq.map_or("?".into(), |s| s.to_string()),
        if v.group_desc.is_empty() {
            v.group.clone()
        } else {
            format!("{} ({})", v.group, v.group_desc)
        },
    );
    v.next = format!(
        "on the host of rank {}: why the process ended (dmesg for the OOM killer, the scheduler's log, the rank's stderr); collect its dump if one exists",
        rank_runs(missing)
    );
    v.file = cite(job, waiting);
    v
}

fn wrapped(
    job: &Job,
    lost: &[u32],
    waiting: &[u32],
    top: Option<&Call>,
    mut v: FlightVerdict,
) -> FlightVerdict {
    v.ranks = vec![];
    v.seq = top.map(|c| c.seq);
    v.op = top.map(Call::describe);
    v.waiting = waiting.to_vec();
    for r in lost {
        if let Some(o) = job.dumps().get(r).and_then(|d| d.oldest()) {
            v.calls.push(RankCall {
                ranks: vec![*r],
                count: 1,
                call: format!("oldest kept: group {} seq {} {}", o.group, o.seq, o.describe()),
                state: o.state,
            });
        }
    }
    v.meaning = format!(
        "the buffers of rank {} wrapped: their oldest records are newer than this group's calls, so whether they entered sequence number {} of process group {} is not in the records (not judged)",
        rank_runs(lost),
        v.seq.map_or("?".into(), |s| s.to_string()),
        v.group,
    );
    v.next = "rerun with a larger TORCH_FR_BUFFER_SIZE (entries per rank) so the dumps reach back to the wait; the NCCL log's watchdog lines say which ranks timed out".into();
    v.file = cite(job, lost);
    v
}

/// Every member entered the same collective and none completed it, on ranks whose records
/// track completion: the application did its part; the fabric or NCCL did not.
fn none_completed(
    job: &Job,
    at_top: &[(u32, &Call)],
    g: &Group,
    mut v: FlightVerdict,
) -> Option<FlightVerdict> {
    let tracked = at_top
        .iter()
        .all(|(r, _)| job.dumps().get(r).is_some_and(|d| d.tracks_completion));
    let open = at_top.iter().all(|(_, c)| c.state != State::Completed);
    if !tracked || !open || at_top.len() != g.ranks.len() {
        return None;
    }
    let (_, c) = at_top.first()?;
    v.ranks = at_top.iter().map(|(r, _)| *r).collect();
    v.seq = Some(c.seq);
    v.op = Some(c.describe());
    v.calls = at_top
        .iter()
        .map(|(r, c)| RankCall {
            ranks: vec![*r],
            count: 1,
            call: c.describe(),
            state: c.state,
        })
        .collect();
    v.meaning = format!(
        "every member of process group {} entered sequence number {} with the same call and none completed it: not the application; the fabric or NCCL under it did not deliver",
        label(g),
        c.seq
    );
    v.file = cite(job, &v.ranks);
    Some(v)
}

/// P2P ops pending with no matching op at the other end. Ranks are blamed where the peer
/// their op names is not pending toward anyone else (it is idle, done, or facing the same
/// way): the ranks whose op waits on a peer busy elsewhere are knock-ons.
fn p2p_mismatch(job: &Job, g: &Group, mut v: FlightVerdict) -> Option<FlightVerdict> {
    let pending = pending_p2p(job, g);
    let matched = |r: u32, c: &Call, peer: Option<u32>| -> bool {
        let Some(p) = peer else { return true };
        pending.get(&p).is_some_and(|ops| {
            ops.iter()
                .any(|(pc, _, pp)| *pp == Some(r) && pc.kind() != c.kind())
        })
    };
    let unmatched: Vec<(u32, &Call, Option<u32>)> = pending
        .iter()
        .flat_map(|(r, ops)| ops.iter().map(move |(c, _, peer)| (*r, *c, *peer)))
        .filter(|(r, c, peer)| !matched(*r, c, *peer))
        .collect();
    if unmatched.is_empty() {
        return None;
    }
    let (mut blamed, late) = blame_p2p(&pending, &unmatched, &g.ranks);
    blamed.sort_unstable();
    blamed.dedup();
    v.waiting = unmatched
        .iter()
        .map(|u| u.0)
        .filter(|r| !blamed.contains(r))
        .collect();
    v.waiting.sort_unstable();
    v.waiting.dedup();
    v.ranks = blamed;
    v.calls = unmatched
        .iter()
        .map(|(r, c, p)| RankCall {
            ranks: vec![*r],
            count: 1,
            call: format!(
                "p2p seq {} {} (global peer {})",
                c.seq,
                c.op,
                p.map_or("?".into(), |p| p.to_string())
            ),
            state: c.state,
        })
        .collect();
    if late {
        v.meaning = format!(
            "rank {} has no P2P op pending in process group {} while rank {} wait on it: it has not reached the send/recv they wait for (stalled or on another path before it), or it left no dump; not the fabric",
            rank_runs(&v.ranks),
            label(g),
            rank_runs(&v.waiting)
        );
        v.next = format!(
            "find where rank {} is (`py-spy dump --pid PID` on its host; its newest call is in its dump)",
            rank_runs(&v.ranks)
        );
    } else {
        v.meaning = format!(
            "P2P ops in process group {} have no matching op at the other end: rank {} waits on a peer that is not sending (receiving) to it; the pipeline's send/recv order differs between ranks",
            label(g),
            rank_runs(&v.ranks)
        );
        v.next = format!(
            "fix the application's send/recv pairing on rank {} (each send needs the peer's recv at the same point)",
            rank_runs(&v.ranks)
        );
    }
    v.file = cite(job, &v.ranks);
    Some(v)
}

type P2pOps<'j> = BTreeMap<u32, Vec<(&'j Call, u32, Option<u32>)>>;

/// Whom unmatched P2P ops blame, and whether those are late peers. A rank that waits on a
/// peer with no P2P op pending, while no unmatched op faces the waiting rank itself, waits
/// for a peer that has not reached its op: the peer is blamed (late). Otherwise a rank is
/// blamed where its peer is not pending toward anyone else; where every end is busy (a
/// batch on each rank), the op that breaks the pattern the others keep; else every end.
fn blame_p2p(pending: &P2pOps, unmatched: &[(u32, &Call, Option<u32>)], members: &[u32]) -> (Vec<u32>, bool) {
    let faced = |r: u32| unmatched.iter().any(|(q, _, peer)| *q != r && *peer == Some(r));
    let late: Vec<u32> = unmatched
        .iter()
        .filter_map(|(r, _, p)| (*p).filter(|p| !pending.contains_key(p) && !faced(*r)))
        .collect();
    if !late.is_empty() {
        return (late, true);
    }
    let busy_elsewhere = |r: u32, peer: Option<u32>| {
        peer.is_some_and(|p| {
            pending
                .get(&p)
                .is_some_and(|ops| ops.iter().all(|(_, _, pp)| *pp != Some(r)))
        })
    };
    let mut blamed: Vec<u32> = unmatched
        .iter()
        .filter(|(r, _, p)| !busy_elsewhere(*r, *p))
        .map(|u| u.0)
        .collect();
    if blamed.is_empty() {
        blamed = odd_ones_out(pending, unmatched, members);
    }
    if blamed.is_empty() {
        blamed = unmatched.iter().map(|u| u.0).collect();
    }
    (blamed, false)
}

/// The ranks of unmatched ops whose peer offset (peer minus self, around the group) differs
/// from the one most pending ops of the same kind keep, when more than half keep one: in a
/// ring of batches where one rank receives from the wrong peer, its receive is the odd one.
fn odd_ones_out(pending: &P2pOps, unmatched: &[(u32, &Call, Option<u32>)], members: &[u32]) -> Vec<u32> {
    let n = members.len();
    let local = |r: u32| members.iter().position(|&m| m == r);
    let offset = |r: u32, peer: Option<u32>| Some((local(peer?)? + n - local(r)?) % n);
    let mut counts: BTreeMap<(&str, usize), usize> = BTreeMap::new();
    let mut totals: BTreeMap<&str, usize> = BTreeMap::new();
    for (r, ops) in pending {
        for (c, _, peer) in ops {
            if let Some(o) = offset(*r, *peer) {
                *counts.entry((c.kind(), o)).or_default() += 1;
                *totals.entry(c.kind()).or_default() += 1;
            }
        }
    }
    let keeps = |kind: &str| {
        let total = totals.get(kind).copied().unwrap_or(0);
        counts
            .iter()
            .filter(|((k, _), _)| *k == kind)
            .max_by_key(|(_, n)| **n)
            .filter(|(_, n)| 2 * **n > total)
            .map(|((_, o), _)| *o)
    };
    unmatched
        .iter()
        .filter(|(r, c, peer)| keeps(c.kind()).is_some_and(|o| offset(*r, *peer) != Some(o)))
        .map(|u| u.0)
        .collect()
}

/// Per member rank, its P2P ops still pending in the group: the newest op, or every op of
/// the newest batch (a batch is pending until its end completes), each with its own end
/// and its peer as global ranks.
fn pending_p2p<'j>(job: &'j Job, g: &Group) -> P2pOps<'j> {
    let members = &g.ranks;
    let global = |local: u32| members.get(local as usize).copied();
    members
        .iter()
        .filter_map(|r| {
            let c = job.dumps().get(r)?.last_p2p_in(&g.name)?;
            if c.state == State::Completed {
                return None;
            }
            let ops: Vec<&Call> = if c.coalesced.is_empty() {
                vec![c]
            } else {
                c.coalesced.iter().collect()
            };
            // send a->b: this rank is a, peer b; recv a<-b: this rank is a, peer b. The
            // batch's end names no peer and is left out.
            let ends: Vec<(&Call, u32, Option<u32>)> = ops
                .into_iter()
                .filter_map(|op| {
                    let (a, b) = op.p2p_ends()?;
                    Some((op, global(a)?, b.and_then(global)))
                })
                .collect();
            (!ends.is_empty()).then_some((*r, ends))
        })
        .collect()
}

/// Hosts of the ranks named, and the next step of the fabric verdict (it needs them).
fn finish(mut v: FlightVerdict, _job: &Job, hosts: &BTreeMap<u32, String>) -> FlightVerdict {
    let named = v.ranks.iter().chain(&v.waiting).chain(&v.members);
    v.hosts = named
        .filter_map(|r| hosts.get(r).map(|h| (*r, h.clone())))
        .collect();
    if v.cause == "fr_all_entered_none_completed" {
        v.next = ring_step(&v.ranks, hosts);
    }
    v
}

/// `fabprobe ring` across exactly the hosts of these ranks, pasteable when the logs name them.
fn ring_step(ranks: &[u32], hosts: &BTreeMap<u32, String>) -> String {
    let mut hs: Vec<&str> = ranks
        .iter()
        .filter_map(|r| hosts.get(r).map(String::as_str))
        .collect();
    hs.sort_unstable();
    hs.dedup();
    let unnamed: Vec<u32> = ranks.iter().copied().filter(|r| !hosts.contains_key(r)).collect();
    if hs.is_empty() {
        return format!(
            "`fabprobe ring` across the hosts of rank {} (one process per host; the dumps do not name hosts: pass the job's NCCL logs too)",
            rank_runs(ranks)
        );
    }
    let mut s = format!(
        "`mpirun -np {} -H {} -x FABPROBE_COORDINATOR={}:29517 fabprobe ring` (one process per host), then `fabprobe links` on the hosts it names",
        hs.len(),
        hs.join(","),
        hs[0]
    );
    if !unnamed.is_empty() {
        s.push_str(&format!(
            "; the logs do not name the host of rank {}: add it",
            rank_runs(&unnamed)
        ));
    }
    s
}

fn label(g: &Group) -> String {
    let members = if g.ranks.len() <= 16 {
        format!("[{}]", rank_runs(&g.ranks))
    } else {
        format!("{} ranks", g.ranks.len())
    };
    if g.desc.is_empty() {
        format!("{} {members}", g.name)
    } else {
        format!("{} ({}) {members}", g.name, g.desc)
    }
}

fn cite(job: &Job, ranks: &[u32]) -> String {
    ranks
        .iter()
        .find_map(|r| job.dumps().get(r))
        .map(|d| d.file.clone())
        .unwrap_or_default()
}

fn sorted_flat<'a, I: Iterator<Item = &'a Vec<u32>>>(it: I) -> Vec<u32> {
    let mut v: Vec<u32> = it.flatten().copied().collect();
    v.sort_unstable();
    v.dedup();
    v
}
