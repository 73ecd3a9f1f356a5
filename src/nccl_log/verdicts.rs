//! From sightings to root-cause verdicts.
//!
//! Collapsing rules (the maintainers' diagnoses in the threads tests/data/nccl-logs/SOURCES.md names):
//! * per process only the first failure counts; later ones are its knock-ons;
//! * a `status=5` flush (IBV_WC_WR_FLUSH_ERR) is what a QP in error reports for the work
//!   still queued: never a cause while any other completion or verbs error is in the log;
//! * a closed or reset connection (`remote_process_exited`) is a knock-on of any hard
//!   failure elsewhere (a rank that died closes its sockets), and a collective timeout is a
//!   knock-on of either;
//! * the ranks that time out on the same PyTorch sequence number are one event; the ranks of
//!   the communicator missing from that list are the suspects (they never reached it);
//! * the same cause on the same host, device and peer is one verdict listing its ranks.

use std::collections::{BTreeMap, BTreeSet};

use super::causes::{self, Rank, Read, Scope};
use crate::finding::Severity;
use super::{Analyzer, HostSummary, Peer, Report, Sighting, Summary, RootCause};

/// A fail of its own (the registry's root causes, and the generic return codes), as opposed
/// to a warning, a knock-on, a WARN no rule knows (a tier of its own) or what the whole log
/// gives.
fn hard(cause: &str) -> bool {
    let c = causes::of(cause);
    c.severity == crate::finding::Severity::Fail
        && matches!(c.rank, Rank::Root | Rank::Generic)
        && !matches!(c.read, Read::Derived | Read::Unmatched)
}

/// A warning sighting (the registry's `Rank::Warning` causes read from a line).
fn warning(cause: &str) -> bool {
    causes::get(cause).is_some_and(|c| c.rank == Rank::Warning)
}

/// A cause said only by a return code (PyTorch's `unhandled system error`,
/// `ncclSystemError`, `remote process exited`: the registry's `codes`, on a line without
/// NCCL's header), or a WARN no rule knows: any named cause of the log outranks it.
fn generic(s: &Sighting) -> bool {
    let c = causes::of(s.cause);
    s.cause == "unclassified_failure"
        || (quoted(s) && s.result.is_some() && c.codes.iter().any(|(w, _)| s.line.contains(w)))
}

/// The quoted sightings (see [`quoted`]) whose cause a WARN of the same rank (or of no
/// known rank) already gives, taken out: one failure, one verdict; and how many.
fn drop_quotes<'a>(ctx: &Ctx, firsts: Vec<&'a Sighting>) -> (Vec<&'a Sighting>, u64) {
    let said: Vec<(&str, Option<u32>)> = firsts
        .iter()
        .filter(|s| !quoted(s))
        .map(|s| (s.cause, ctx.rank_of(s)))
        .collect();
    let same = |s: &Sighting| {
        let r = ctx.rank_of(s);
        said.iter()
            .any(|(c, q)| *c == s.cause && (r.is_none() || q.is_none() || *q == r))
    };
    let (dropped, kept): (Vec<&Sighting>, Vec<&Sighting>) =
        firsts.into_iter().partition(|s| quoted(s) && same(s));
    (kept, dropped.len() as u64)
}

/// A cause read from a line without NCCL's header (PyTorch's `Last error:` text, a bare
/// NCCL message): the same failure as the WARN it quotes when the log has that WARN.
fn quoted(s: &Sighting) -> bool {
    s.proc_.host == 0 && s.proc_.pid.is_none()
}

fn peer_ip(addr: &str) -> &str {
    let a = addr.split('<').next().unwrap_or(addr);
    a.split('%').next().unwrap_or(a)
}

struct Ctx<'a> {
    a: &'a Analyzer,
    host_ranks: BTreeMap<String, BTreeSet<u32>>,
    rank_host: BTreeMap<u32, String>,
}

impl Ctx<'_> {
    fn rank_of(&self, s: &Sighting) -> Option<u32> {
        self.a.procs.get(&s.proc_).and_then(|p| p.rank).or(s.rank_hint)
    }
    fn host_of(&self, s: &Sighting) -> Option<String> {
        if s.proc_.host != 0 {
            let h = self.a.host_name(s.proc_.host);
            return (!h.is_empty()).then(|| h.to_string());
        }
        self.rank_of(s).and_then(|r| self.rank_host.get(&r).cloned())
    }
    fn peer_of(&self, s: &Sighting) -> Option<Peer> {
        let addr = s.peer_addr.clone()?;
        let host = self.a.host_ips.get(peer_ip(&addr)).cloned().or_else(|| {
            // "Connection closed by remote peer node2<42830>": a host name.
            let h = peer_ip(&addr);
            self.host_ranks.contains_key(h).then(|| h.to_string())
        });
        let rank = host
            .as_ref()
            .and_then(|h| self.host_ranks.get(h))
            .filter(|r| r.len() == 1)
            .and_then(|r| r.iter().next().copied());
        Some(Peer {
            addr: Some(addr),
            host,
            rank,
        })
    }
    fn device_of(&self, s: &Sighting) -> Option<String> {
        s.hca.clone().or_else(|| s.dev.map(|d| format!("cuda:{d}")))
    }
}

/// A verdict derived from the whole log rather than from one line: no file, line, rank or
/// GID of its own; `explain(cause)` gives its meaning and next step.
fn derived(cause: &str, severity: Severity, line: String) -> RootCause {
    let (meaning, next) = causes::explain(cause, None);
    RootCause {
        line,
        meaning: meaning.into(),
        next: next.into(),
        ..RootCause::new(cause, severity)
    }
}

fn verdict(ctx: &Ctx, s: &Sighting, severity: Severity) -> RootCause {
    // The socket family's meaning depends on the errno it printed.
    let variant = match s.errno {
        Some(111) => Some("refused"),
        Some(110) => Some("timeout"),
        Some(101 | 113) => Some("noroute"),
        _ => None,
    };
    let (meaning, next) = causes::explain(s.cause, variant);
    RootCause {
        host: ctx.host_of(s),
        rank: ctx.rank_of(s),
        device: ctx.device_of(s),
        peer: ctx.peer_of(s),
        local_gid: s.local_gid.clone(),
        remote_gid: s.remote_gid.clone(),
        status: s.status,
        vendor_err: s.vendor_err,
        file: s.file.clone(),
        line_no: s.line_no,
        line: s.line.clone(),
        meaning: meaning.to_string(),
        next: next.to_string(),
        seq: s.seq,
        op: s.op.clone(),
        nccl_result: s
            .result
            .or_else(|| {
                // A warning's process may have failed later for another reason.
                (severity == Severity::Fail)
                    .then(|| ctx.a.procs.get(&s.proc_).and_then(|p| p.trail))
                    .flatten()
            })
            .map(|c| match super::events::result_name(c) {
                Some(n) => format!("{n} ({c})"),
                None => format!("code {c}"),
            }),
        errno: s.errno,
        ..RootCause::new(s.cause, severity)
    }
}

/// Group sightings into verdicts keyed by cause, host, device and peer host.
fn grouped(ctx: &Ctx, list: &[&Sighting], severity: Severity) -> Vec<RootCause> {
    let mut out: Vec<RootCause> = Vec::new();
    // (cause, host, device, peer host) -> index in `out`: thousands of processes can fail.
    type Group = (String, Option<String>, Option<String>, Option<String>);
    let mut index: std::collections::HashMap<Group, usize> = std::collections::HashMap::new();
    for s in list {
        let v = verdict(ctx, s, severity);
        let peer_host = v.peer.as_ref().and_then(|p| p.host.clone());
        let key = (v.cause.clone(), v.host.clone(), v.device.clone(), peer_host);
        if let Some(&i) = index.get(&key) {
            let o = &mut out[i];
            // Repeats go at the sort below (a linear check per rank is quadratic).
            if let Some(r) = v.rank.filter(|r| o.rank != Some(*r)) {
                o.ranks.push(r);
            }
            continue;
        }
        index.insert(key, out.len());
        out.push(v);
    }
    for v in &mut out {
        v.ranks.sort_unstable();
        v.ranks.dedup();
    }
    out
}

/// Each rank's host and each host's ranks, from the processes the log names.
fn context(a: &Analyzer) -> Ctx<'_> {
    let mut host_ranks: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    let mut rank_host = BTreeMap::new();
    // In key order (hosts by first appearance): a rank that several jobs' hosts claim maps
    // to the first one, the same on every run.
    let mut procs: Vec<_> = a.procs.iter().collect();
    procs.sort_unstable_by(|x, y| x.0.cmp(y.0));
    for (k, p) in procs {
        let name = a.host_name(k.host).to_string();
        let set = host_ranks.entry(name.clone()).or_default();
        if let Some(r) = p.rank {
            set.insert(r);
            // A process with no host name (a header cut away) names no rank's host.
            if !name.is_empty() {
                rank_host.entry(r).or_insert(name);
            }
        }
    }
    Ctx {
        a,
        host_ranks,
        rank_host,
    }
}

/// The sightings sorted: each process's first failure, the warnings, the timeouts, and
/// how many later failures the firsts stand for.
struct Sorted<'a> {
    firsts: Vec<Sighting>,
    warns: Vec<&'a Sighting>,
    timeouts: Vec<&'a Sighting>,
    knock: u64,
}

/// First failure per process; later ones are its knock-ons, except that a cause NCCL
/// states replaces a generic one of the same process (PyTorch prints the class,
/// `ncclSystemError`, before NCCL's own `Last error:` text).
fn sort_sightings<'a>(a: &'a Analyzer, fallbacks: &'a [Sighting]) -> Sorted<'a> {
    use std::collections::btree_map::Entry;
    let mut first: BTreeMap<(super::ProcKey, Option<u32>), Sighting> = BTreeMap::new();
    let mut out = Sorted {
        firsts: Vec::new(),
        warns: fallbacks.iter().collect(),
        timeouts: Vec::new(),
        knock: 0,
    };
    for s in &a.sightings {
        if s.cause == super::TRAIL || recovered_warn(a, s) {
            continue;
        }
        if warning(s.cause) {
            out.warns.push(s);
            continue;
        }
        if s.cause == "collective_timeout" {
            out.timeouts.push(s);
            continue;
        }
        let key = (
            s.proc_.clone(),
            if s.proc_.host == 0 { s.rank_hint } else { None },
        );
        match first.entry(key) {
            Entry::Occupied(mut o) if generic(o.get()) && hard(s.cause) && !generic(s) => {
                let mut named = s.clone();
                named.result = named.result.or(o.get().result);
                o.insert(named);
                out.knock += 1;
            }
            Entry::Occupied(_) => out.knock += 1,
            Entry::Vacant(v) => {
                v.insert(s.clone());
            }
        }
    }
    out.firsts = first.into_values().collect();
    out.firsts
        .sort_by(|x, y| (x.file.as_str(), x.line_no).cmp(&(y.file.as_str(), y.line_no)));
    out
}

/// The fail verdicts of the first failures: root causes with what they explain, else the
/// tiers in order (a WARN no rule knows, a proxy failure, a flush, a closed connection);
/// the lower tiers are knock-ons when a higher one is there. Also the knock-ons counted.
fn failure_verdicts<'a>(
    ctx: &Ctx,
    firsts: &[&'a Sighting],
    warns: &mut Vec<&'a Sighting>,
) -> (Vec<RootCause>, u64) {
    let mut knock_ons = 0;
    let hard: Vec<&Sighting> = firsts.iter().copied().filter(|s| hard(s.cause)).collect();
    // A return code names no cause: with a named one in the log, it is a knock-on.
    let (hard, codes): (Vec<&Sighting>, Vec<&Sighting>) = if hard.iter().any(|s| !generic(s)) {
        hard.into_iter().partition(|s| !generic(s))
    } else {
        (hard, Vec::new())
    };
    knock_ons += codes.len() as u64;
    // Root cause over symptom: completion errors an earlier event explains are its
    // knock-ons, listed under it.
    let roots = explained(ctx, &hard, warns);
    let promoted: Vec<&Sighting> = roots.iter().filter_map(|r| r.promoted).collect();
    warns.retain(|w| !promoted.iter().any(|p| std::ptr::eq(*p, *w)));
    let hard: Vec<&Sighting> = promoted
        .iter()
        .copied()
        .chain(
            hard.iter()
                .copied()
                .filter(|s| !roots.iter().any(|r| r.explains(s))),
        )
        .collect();
    let mut verdicts = grouped(ctx, &hard, Severity::Fail);
    for r in &roots {
        let Some(v) = verdicts.iter_mut().find(|v| r.is_root_of(ctx, v)) else {
            continue;
        };
        for e in &r.knock {
            let w = verdict(ctx, e, Severity::Fail);
            v.explains.push(format!("{}{}", w.cause, describe(&w)));
        }
        knock_ons += r.knock.len() as u64;
    }
    let tier = |c: &str| -> Vec<&Sighting> { firsts.iter().copied().filter(|s| s.cause == c).collect() };
    for c in [
        "unclassified_failure",
        "proxy_connection_failed",
        "ib_wr_flush",
        "remote_process_exited",
    ] {
        let list = tier(c);
        if verdicts.is_empty() {
            verdicts.extend(grouped(ctx, &list, Severity::Fail));
        } else {
            knock_ons += list.len() as u64;
        }
    }
    (verdicts, knock_ons)
}

/// Collective timeouts: one event per (sequence number, op), whose suspects are the
/// communicator's ranks missing from it.
fn timeout_verdicts(ctx: &Ctx, timeouts: &[&Sighting]) -> Vec<RootCause> {
    let a = ctx.a;
    let mut by_seq: BTreeMap<(Option<u64>, Option<String>), Vec<&Sighting>> = BTreeMap::new();
    for t in timeouts {
        by_seq.entry((t.seq, t.op.clone())).or_default().push(t);
    }
    let mut out = Vec::new();
    for list in by_seq.into_values() {
        let mut v = verdict(ctx, list[0], Severity::Fail);
        let ranks: BTreeSet<u32> = list.iter().filter_map(|s| ctx.rank_of(s)).collect();
        v.rank = ranks.iter().next().copied();
        v.ranks = ranks.iter().skip(1).copied().collect();
        // The communicator's size when the log has it; else the gaps below the highest
        // rank that timed out (ranks above it cannot be told from absent ones).
        let world = a.world.or_else(|| ranks.iter().next_back().map(|m| m + 1));
        // A rank known to have reached a later sequence number passed this one.
        let passed = |r: &u32| match (a.progress.get(r), v.seq) {
            (Some(p), Some(q)) => *p >= q,
            _ => false,
        };
        if let Some(w) = world
            && (ranks.len() as u32) < w
        {
            v.suspects = (0..w).filter(|r| !ranks.contains(r) && !passed(r)).collect();
        }
        if a.world.is_none() && !v.suspects.is_empty() {
            v.meaning.push_str(
                " (the log has no communicator size: suspects are the gaps below the highest rank listed)",
            );
        }
        out.push(v);
    }
    out
}

/// What the whole log gives: NCCL versions that differ, loopback and virtual interfaces
/// (and the connect failures they explain), sockets across hosts, GDR on one side only.
fn log_verdicts(a: &Analyzer, multi_host: bool, verdicts: &mut Vec<RootCause>) {
    if a.versions.len() > 1 {
        let desc: Vec<String> = a
            .versions
            .iter()
            .map(|(v, h)| format!("{v} on {}", h.iter().cloned().collect::<Vec<_>>().join(",")))
            .collect();
        verdicts.push(derived(
            "version_mismatch",
            Severity::Fail,
            format!("NCCL versions differ: {}", desc.join("; ")),
        ));
    }
    verdicts.extend(virtual_ifaces(a, multi_host));
    iface_explains(verdicts);
    let socket_conns = a.transports.keys().any(|k| k == "NET/Socket");
    if multi_host && (socket_conns || a.networks.contains("Socket")) {
        verdicts.push(derived(
            "net_socket_fallback",
            Severity::Warn,
            format!(
                "{} connection(s) via NET/Socket; networks: {}",
                a.transports.get("NET/Socket").copied().unwrap_or(0),
                a.networks.iter().cloned().collect::<Vec<_>>().join(", ")
            ),
        ));
    }
    verdicts.extend(gdr_one_direction(a));
}

/// Warnings, one per host and cause (and HCA for GDR), with the ranks of each group
/// gathered in one pass (a pass per group is quadratic on a log of many hosts).
fn warning_verdicts(ctx: &Ctx, warns: &[&Sighting]) -> Vec<RootCause> {
    type WarnGroup<'a> = (&'a str, Option<String>, Option<String>);
    let mut same: BTreeMap<WarnGroup, BTreeSet<u32>> = BTreeMap::new();
    for o in warns {
        let ranks = same.entry((o.cause, ctx.host_of(o), o.hca.clone())).or_default();
        ranks.extend(ctx.rank_of(o));
    }
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for s in warns {
        let key = (s.cause, ctx.host_of(s), s.hca.clone());
        if !seen.insert(key.clone()) {
            continue;
        }
        let mut v = verdict(ctx, s, Severity::Warn);
        let same = same.get(&key).cloned().unwrap_or_default();
        v.rank = same.iter().next().copied().or(v.rank);
        v.ranks = same.iter().skip(1).copied().collect();
        out.push(v);
    }
    out
}

pub(super) fn build(a: Analyzer) -> Report {
    let ctx = context(&a);
    let multi_host = ctx.host_ranks.keys().filter(|h| !h.is_empty()).count() > 1;
    // What NCCL recovered from (plugin and transport init before it chose a network) is
    // set apart: its trails are no failure, a plugin's own WARN a fallback warning.
    let (fallbacks, trails) = recovered(&a);
    let Sorted {
        firsts,
        mut warns,
        timeouts,
        knock,
    } = sort_sightings(&a, &fallbacks);
    let (firsts, same) = drop_quotes(&ctx, firsts.iter().collect());
    let (mut verdicts, knock_ons) = failure_verdicts(&ctx, &firsts, &mut warns);
    let mut knock_ons = knock + same + knock_ons;
    if verdicts.is_empty() {
        verdicts.extend(timeout_verdicts(&ctx, &timeouts));
    } else {
        knock_ons += timeouts.len() as u64;
    }
    // An error trail with no failure line at all (NCCL_DEBUG=WARN cut, or a WARN lost).
    if let (true, Some(t)) = (verdicts.is_empty(), trails.first()) {
        let mut t = (*t).clone();
        t.cause = "unclassified_failure";
        verdicts.push(verdict(&ctx, &t, Severity::Fail));
    }
    if let Some(v) = verdicts.first_mut() {
        v.knock_ons = knock_ons;
    }
    log_verdicts(&a, multi_host, &mut verdicts);
    verdicts.extend(warning_verdicts(&ctx, &warns));
    // Nothing NCCL printed: unknown, not "no failure" (issue 21).
    if verdicts.is_empty() && a.nccl_lines == 0 && a.versions.is_empty() {
        verdicts.push(derived(
            "no_nccl_output",
            Severity::Unknown,
            format!("no NCCL line in {} line(s) of input", a.lines),
        ));
    }
    for v in &mut verdicts {
        annotate(&a, v);
        fill_next(&ctx, v);
    }
    rank_verdicts(&mut verdicts);
    let summary = summarise(&a, &ctx);
    Report { summary, verdicts }
}

/// Connections of one rank pair over the network that disagree on GPUDirect RDMA (the
/// sender's `[send] via NET/IB/0/GDRDMA`, the receiver's `[receive] via NET/IB/0`): one
/// warning for the log, naming the first such pair and counting the rest.
fn gdr_one_direction(a: &Analyzer) -> Vec<RootCause> {
    /// The first connection of a pair seen with GPUDirect RDMA, and the first without.
    #[derive(Default)]
    struct Vias<'a> {
        gdr: Option<&'a str>,
        plain: Option<&'a str>,
    }
    let mut pairs: BTreeMap<(u32, u32), Vias> = BTreeMap::new();
    for (src, dst, via) in a.connections.keys().filter(|k| k.2.starts_with("NET/")) {
        let e = pairs.entry((*src, *dst)).or_default();
        if via.contains("GDRDMA") {
            e.gdr.get_or_insert(via);
        } else {
            e.plain.get_or_insert(via);
        }
    }
    let mixed: Vec<_> = pairs
        .iter()
        .filter_map(|(p, v)| Some((p, v.gdr?, v.plain?)))
        .collect();
    let Some(((src, dst), on, off)) = mixed.first() else {
        return Vec::new();
    };
    let more = match mixed.len() - 1 {
        0 => String::new(),
        n => format!(" (and {n} more rank pair(s))"),
    };
    let line = format!("rank {src} -> rank {dst}: via {on} on one side, via {off} on the other{more}");
    vec![derived("gdr_one_direction", Severity::Warn, line)]
}

/// Loopback and virtual interfaces (container, VM and CNI bridges, veths, overlays) NCCL
/// bootstrapped or connected over: one verdict per host and interface.
fn virtual_ifaces(a: &Analyzer, multi_host: bool) -> Vec<RootCause> {
    use super::ifaces::{classify, Kind};
    let mut out: Vec<RootCause> = Vec::new();
    for (host, ifs) in a.bootstrap.iter().chain(a.socket_ifs.iter()) {
        for i in ifs {
            let name = i.split(':').next().unwrap_or(i);
            let (cause, kind, what) = if name == "lo" || name.starts_with("lo:") {
                ("socket_iface_loopback", Kind::HostLocal, "loopback")
            } else {
                match classify(name) {
                    Some((k, w)) => ("socket_iface_virtual", k, w),
                    None => continue,
                }
            };
            if out
                .iter()
                .any(|v| v.host.as_deref() == Some(host) && v.device.as_deref() == Some(name))
            {
                continue;
            }
            // One host: a single-node job works over them; across hosts a host-local
            // address cannot be reached and an overlay costs encapsulation.
            let severity = if multi_host && kind == Kind::HostLocal {
                Severity::Fail
            } else {
                Severity::Warn
            };
            let line = if cause == "socket_iface_loopback" {
                format!("{host} uses {i}")
            } else {
                format!("{host} uses {i} ({what}, by its naming rule)")
            };
            let mut v = derived(cause, severity, line);
            if cause == "socket_iface_virtual" && kind == Kind::Overlay {
                let (m, n) = causes::explain(cause, Some("overlay"));
                v.meaning = m.to_string();
                v.next = n.to_string();
            }
            v.host = Some(host.clone());
            v.device = Some(name.to_string());
            out.push(v);
        }
    }
    out
}

/// A host-local interface NCCL gave out explains the socket connect failures: across hosts
/// (a fail) every one, since peers dial the address it advertised; on one host those whose
/// address names it as its scope (`fe80::1%ip6tnl0<46681>`). The interface is the verdict
/// (a fail), the connect failures are listed under it.
fn iface_explains(verdicts: &mut Vec<RootCause>) {
    let scope = |v: &RootCause| {
        let addr = v.peer.as_ref()?.addr.as_deref()?;
        let s = addr.split_once('%')?.1;
        Some(s.split('<').next().unwrap_or(s).to_string())
    };
    let mut i = 0;
    while i < verdicts.len() {
        let cause = verdicts[i].cause.clone();
        let sc = scope(&verdicts[i]);
        let root = verdicts.iter().position(|v| {
            let e = causes::of(&v.cause).explains;
            e.scope == Scope::Iface
                && e.causes.contains(&cause.as_str())
                && (v.severity == Severity::Fail || (sc.is_some() && v.device == sc))
        });
        let Some(r) = root else {
            i += 1;
            continue;
        };
        let c = verdicts.remove(i);
        let r = if r > i { r - 1 } else { r };
        let v = &mut verdicts[r];
        v.severity = Severity::Fail;
        v.explains.push(format!("{}{}", c.cause, describe(&c)));
        v.knock_ons += 1 + c.knock_ons;
    }
}

/// What the whole log adds to a verdict: the plugin and its version for a plugin's own
/// error, the topology file NCCL was told to load (and who set it) for a topology error.
fn annotate(a: &Analyzer, v: &mut RootCause) {
    if v.cause.starts_with("net_plugin") {
        if v.device.is_none() || v.device.as_deref().is_some_and(|d| d.starts_with("cuda:")) {
            v.device = plugin_of(&v.line).map(str::to_string).or(v.device.take());
        }
        let named: Vec<&str> = a
            .plugins
            .iter()
            .map(String::as_str)
            .filter(|p| !p.starts_with("none"))
            .collect();
        if !named.is_empty() {
            v.meaning.push_str(&format!(" (plugin: {})", named.join(", ")));
        }
    }
    if (v.cause.starts_with("topology_file") || v.cause == "graph_file_error") && !a.topo_files.is_empty() {
        let said: Vec<&str> = a.topo_files.iter().map(String::as_str).collect();
        v.meaning
            .push_str(&format!("; the log says: {}", said.join("; ")));
    }
}

/// At most this many hosts are named in one next step; more are counted.
const MAX_NAMED_HOSTS: usize = 4;

/// `a`, `a and b`, `a, b, c and 2 more`.
fn host_list(hosts: &[&str]) -> String {
    let named: Vec<&str> = hosts.iter().copied().take(MAX_NAMED_HOSTS).collect();
    let more = hosts.len() - named.len();
    match (named.as_slice(), more) {
        ([], _) => String::new(),
        ([one], 0) => one.to_string(),
        (n, 0) => format!("{} and {}", n[..n.len() - 1].join(", "), n[n.len() - 1]),
        (n, m) => format!("{} and {m} more", n.join(", ")),
    }
}

/// The file a `NCCL_TOPO_FILE set ... to PATH` or `NCCL_GRAPH_FILE set ... to PATH` line
/// names, for the variable asked.
fn said_file<'a>(a: &'a Analyzer, var: &str) -> Option<&'a str> {
    a.topo_files
        .iter()
        .filter(|l| l.starts_with(var) || (var == "NCCL_TOPO_FILE" && l.starts_with("Loading topology file")))
        .find_map(|l| l.split_whitespace().last())
        .map(|p| p.trim_end_matches('.'))
        .filter(|p| p.contains('/'))
}

/// The next step with what the log knows put in, so it pastes: `{host}` the verdict's host,
/// `{peer}` its peer's, `{hosts}` both, `{all}` the log's hosts, `{suspects}` the suspects'
/// hosts, and the topology or graph file; what the log does not name stays a phrase
/// ("that host"), never a placeholder.
fn fill_next(ctx: &Ctx, v: &mut RootCause) {
    let host = v.host.as_deref().filter(|h| !h.is_empty());
    let peer = v.peer.as_ref().and_then(|p| p.host.as_deref());
    let hosts = match (host, peer) {
        (Some(a), Some(b)) if a == b => a.to_string(),
        (Some(a), Some(b)) => format!("{a} and {b}"),
        (Some(a), None) => format!("{a} and the peer's host"),
        (None, Some(b)) => format!("{b} and the other host"),
        (None, None) => "both hosts".into(),
    };
    let all: Vec<&str> = ctx
        .host_ranks
        .keys()
        .map(String::as_str)
        .filter(|h| !h.is_empty())
        .collect();
    let all = if all.is_empty() {
        "each host".to_string()
    } else {
        host_list(&all)
    };
    let mut sus: Vec<&str> = v
        .suspects
        .iter()
        .filter_map(|r| ctx.rank_host.get(r).map(String::as_str))
        .collect();
    sus.dedup();
    let suspects = if sus.is_empty() {
        "the suspects' hosts".to_string()
    } else {
        host_list(&sus)
    };
    let topo = said_file(ctx.a, "NCCL_TOPO_FILE");
    let xmllint = match topo {
        Some(f) => format!("`xmllint --noout {f}`"),
        None => "check the topology XML NCCL loaded with xmllint --noout".into(),
    };
    let ls = match topo {
        Some(f) => format!("`ls -l {f}`"),
        None => "check that the NCCL_TOPO_FILE path exists".into(),
    };
    let origin = match said_file(ctx.a, "NCCL_GRAPH_FILE") {
        Some(f) => format!(
            "{f}: the environment, /etc/nccl.conf or ~/.nccl.conf, all of which NCCL reports as set by environment"
        ),
        None => "the environment, /etc/nccl.conf or ~/.nccl.conf".into(),
    };
    v.next = v
        .next
        .replace("{hosts}", &hosts)
        .replace("{host}", host.unwrap_or("that host"))
        .replace("{peer}", peer.unwrap_or("the peer's host"))
        .replace("{all}", &all)
        .replace("{suspects}", &suspects)
        .replace("{xmllint}", &xmllint)
        .replace("{ls}", &ls)
        .replace("{origin}", &origin);
}

/// Fail before warn; among fails, a cause no rule explains after every classified one
/// (it never outranks a named cause), carrying its knock-on count to the new first.
fn rank_verdicts(verdicts: &mut [RootCause]) {
    let key = |v: &RootCause| (std::cmp::Reverse(v.severity), v.cause == "unclassified_failure");
    let before = verdicts
        .first()
        .map(|v| (v.cause.clone(), v.line_no, v.file.clone()));
    verdicts.sort_by_key(key);
    let moved = verdicts
        .first()
        .map(|v| (v.cause.clone(), v.line_no, v.file.clone()))
        != before;
    if moved {
        let n: u64 = verdicts.iter().map(|v| v.knock_ons).sum();
        for v in verdicts.iter_mut() {
            v.knock_ons = 0;
        }
        if let Some(v) = verdicts.first_mut() {
            v.knock_ons = n;
        }
    }
}

/// ` on HOST rank R DEVICE` for a knock-on listed under its root cause.
fn describe(v: &RootCause) -> String {
    let mut w = Vec::new();
    if let Some(h) = &v.host {
        w.push(h.clone());
    }
    if let Some(r) = v.rank {
        w.push(format!("rank {r}"));
    }
    if let Some(d) = &v.device {
        w.push(d.clone());
    }
    if let Some(s) = v.status {
        w.push(format!("status {s}"));
    }
    if w.is_empty() {
        String::new()
    } else {
        format!(" on {}", w.join(" "))
    }
}

/// A sighting before its process chose a network (`Using network X`), from plugin or
/// transport init: NCCL went on to the next plugin (src/plugin/net.cc `ncclNetInit`: a
/// plugin whose init or devices call fails is disabled and the next one tried).
fn before_network(a: &Analyzer, s: &Sighting) -> bool {
    a.procs
        .get(&s.proc_)
        .and_then(|p| p.net_at)
        .is_some_and(|at| s.line_no < at)
}

/// A WARN from a network plugin's or transport's init that NCCL recovered from.
fn recovered_warn(a: &Analyzer, s: &Sighting) -> bool {
    ((s.cause.starts_with("net_plugin") && hard(s.cause)) || s.cause == "unclassified_failure")
        && plugin_of(&s.line).is_some()
        && before_network(a, s)
}

/// The plugin a WARN names by its prefix: `NET/OFI`, `NET/UCX`, `NET/IB`, `CollNet/...`.
pub(super) fn plugin_of(line: &str) -> Option<&str> {
    let i = line.find("NET/").or_else(|| line.find("CollNet"))?;
    let w = line[i..].split([' ', ':']).next()?;
    Some(w.trim_end_matches(','))
}

/// The recovered plugin WARNs as `net_plugin_fallback` warnings, and the error trails
/// NCCL did not recover from, first first.
fn recovered(a: &Analyzer) -> (Vec<Sighting>, Vec<&Sighting>) {
    let mut fallbacks = Vec::new();
    let mut trails = Vec::new();
    for s in &a.sightings {
        if recovered_warn(a, s) {
            let mut f = s.clone();
            f.cause = "net_plugin_fallback";
            fallbacks.push(f);
        } else if s.cause == super::TRAIL && !before_network(a, s) {
            trails.push(s);
        }
    }
    (fallbacks, trails)
}

/// An event that explains later completion errors: an async port/device event or a GID
/// table change on a host, or a peer that failed for a reason of its own first.
struct Root<'a> {
    root: &'a Sighting,
    /// A warning made the verdict because it explains failures (a GID table change).
    promoted: Option<&'a Sighting>,
    knock: Vec<&'a Sighting>,
}

impl Root<'_> {
    fn explains(&self, s: &Sighting) -> bool {
        self.knock.iter().any(|k| std::ptr::eq(*k, s))
    }
    fn is_root_of(&self, ctx: &Ctx, v: &RootCause) -> bool {
        v.cause == self.root.cause && v.host == ctx.host_of(self.root) && v.device == ctx.device_of(self.root)
    }
}

/// Earlier in the same input (or in another input, whose order is unknown: the event
/// still explains the errors of the job).
fn earlier(a: &Sighting, b: &Sighting) -> bool {
    a.file != b.file || a.line_no < b.line_no
}

/// The earlier events that explain later failures, by the registry's `explains`: in the
/// order of scopes below (a port or device event under the fabric first, then a GID table
/// change on a host, then a process that failed first for a reason of its own), each
/// failure explained once.
fn explained<'a>(ctx: &Ctx, hard: &[&'a Sighting], warns: &[&'a Sighting]) -> Vec<Root<'a>> {
    let mut roots: Vec<Root> = Vec::new();
    for scope in [Scope::Job, Scope::HostOrPeer, Scope::PeerIsHost] {
        let candidates = hard.iter().chain(warns.iter()).copied().filter(|s| {
            let e = causes::of(s.cause).explains;
            e.scope == scope && !e.causes.is_empty()
        });
        for r in candidates {
            let knock: Vec<&Sighting> = hard
                .iter()
                .copied()
                .filter(|c| causes::of(r.cause).explains.causes.contains(&c.cause))
                .filter(|c| in_scope(ctx, scope, r, c))
                .filter(|c| earlier(r, c) && !roots.iter().any(|x| x.explains(c)))
                .collect();
            if !knock.is_empty() {
                let promoted = warning(r.cause).then_some(r);
                roots.push(Root {
                    root: r,
                    promoted,
                    knock,
                });
            }
        }
    }
    roots
}

/// `c` is where `scope` lets root `r` explain it.
fn in_scope(ctx: &Ctx, scope: Scope, r: &Sighting, c: &Sighting) -> bool {
    let host = ctx.host_of(r);
    let peer = || ctx.peer_of(c).and_then(|p| p.host);
    match scope {
        Scope::Job => true,
        Scope::HostOrPeer => host.is_some() && (ctx.host_of(c) == host || peer() == host),
        Scope::PeerIsHost => host.is_some() && peer() == host,
        Scope::Iface => false,
    }
}

/// A summary line per host the log names: its ranks, interfaces, HCAs and GDR.
fn host_summaries(a: &Analyzer, ctx: &Ctx) -> Vec<HostSummary> {
    let mut hosts: Vec<HostSummary> = Vec::new();
    let names: BTreeSet<&String> = ctx
        .host_ranks
        .keys()
        .chain(a.bootstrap.keys())
        .chain(a.hcas.keys())
        .filter(|h| !h.is_empty())
        .collect();
    // Processes per host, counted once (a per-host scan of every process is quadratic).
    let mut procs_on: BTreeMap<&str, usize> = BTreeMap::new();
    for k in a.procs.keys() {
        *procs_on.entry(a.host_name(k.host)).or_default() += 1;
    }
    for h in names {
        let ranks: Vec<u32> = ctx
            .host_ranks
            .get(h)
            .map(|r| r.iter().copied().collect())
            .unwrap_or_default();
        let local_ranks = procs_on.get(h.as_str()).copied().unwrap_or(0);
        hosts.push(HostSummary {
            host: h.clone(),
            ranks,
            local_ranks,
            bootstrap: a
                .bootstrap
                .get(h)
                .map(|s| s.iter().cloned().collect())
                .unwrap_or_default(),
            socket_interfaces: a
                .socket_ifs
                .get(h)
                .map(|s| s.iter().cloned().collect())
                .unwrap_or_default(),
            hcas: a
                .hcas
                .get(h)
                .map(|s| s.iter().cloned().collect())
                .unwrap_or_default(),
            gdr: a
                .gdr
                .range((h.clone(), String::new())..)
                .take_while(|((hh, _), _)| hh == h)
                .map(|((_, hca), on)| (hca.clone(), *on))
                .collect(),
        });
    }
    hosts
}

fn summarise(a: &Analyzer, ctx: &Ctx) -> Summary {
    let hosts = host_summaries(a, ctx);
    Summary {
        inputs: a.inputs.clone(),
        bytes: a.bytes,
        lines: a.lines,
        nccl_lines: a.nccl_lines,
        unrecognised_lines: a.unrecognised,
        unrecognised_samples: a.unrecognised_samples.clone(),
        truncated_lines: a.truncated_lines,
        nccl_versions: a
            .versions
            .iter()
            .map(|(v, h)| (v.clone(), h.iter().cloned().collect()))
            .collect(),
        hosts,
        world_size: a.world,
        ranks_seen: a
            .procs
            .values()
            .filter_map(|p| p.rank)
            .collect::<BTreeSet<_>>()
            .len(),
        ring_channels: a.rings.len(),
        ring_sample: a.ring_sample.clone(),
        tree_channels: a.trees.len(),
        channels: a.channels.clone(),
        networks: a.networks.iter().cloned().collect(),
        plugins: a.plugins.iter().cloned().collect(),
        transports: a.transports.clone(),
        connections: a
            .connections
            .keys()
            .map(|(s, d, v)| super::Connection {
                from_rank: *s,
                to_rank: *d,
                via: v.clone(),
            })
            .collect(),
        // Connection lines whose connection is not in the list.
        connections_dropped: a.connection_lines - a.connections.values().sum::<u64>(),
    }
}
