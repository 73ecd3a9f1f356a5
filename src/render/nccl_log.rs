//! `nccl-log` output: the summary, then the verdicts with their evidence and next step.

use crate::nccl_log::{Report, RootCause};
use crate::render::text;

fn list(v: &[String]) -> String {
    if v.is_empty() { "-".into() } else { v.join(" ") }
}

/// One verdict: its head line (severity, cause, who), the facts the line gave, the line
/// itself, then what it means and what to do.
fn verdict(v: &RootCause) -> String {
    let head = format!("  {:<4} {}", v.severity.as_str().to_uppercase(), v.cause);
    let who = who_long(v);
    let mut s = if who.is_empty() {
        format!("{head}\n")
    } else {
        text::wrap(&format!("{head}: "), &who.join(", "), 7)
    };
    for fact in facts(v) {
        s.push_str(&format!("       {fact}\n"));
    }
    if v.file.is_empty() {
        s.push_str(&format!(
            "       {}\n",
            crate::text::printable(&v.line, usize::MAX)
        ));
    } else {
        s.push_str(&format!(
            "       {}:{}: {}\n",
            v.file,
            v.line_no,
            crate::text::printable(&v.line, usize::MAX)
        ));
    }
    s.push_str(&text::wrap("       means: ", &v.meaning, 14));
    s.push_str(&text::wrap_remedy("       next: ", &v.next, 13));
    for e in &v.explains {
        s.push_str(&text::wrap("       explains: ", e, 17));
    }
    if v.knock_ons > 0 {
        s.push_str(&format!(
            "       knock-on failures explained by this: {}\n",
            v.knock_ons
        ));
    }
    s
}

/// Who a verdict's head line names: host, ranks, device (or that the line named none).
fn who_long(v: &RootCause) -> Vec<String> {
    let mut who = Vec::new();
    if let Some(h) = &v.host {
        who.push(format!("host {h}"));
    }
    if let Some(r) = v.rank {
        let mut all = vec![r];
        all.extend(&v.ranks);
        all.sort_unstable();
        who.push(format!("rank {}", crate::text::rank_runs(&all)));
    }
    if let Some(d) = &v.device {
        who.push(format!("device {d}"));
    }
    // A line pasted without NCCL's header names no host or rank: say so.
    if !v.file.is_empty() && v.host.is_none() && v.rank.is_none() {
        who.push("host and rank unknown (no NCCL header on the line)".into());
    }
    who
}

/// The facts a verdict's line gave, one per line: peer, GIDs, status, collective,
/// suspects, NCCL's result and errno.
fn facts(v: &RootCause) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(p) = &v.peer {
        let mut parts = Vec::new();
        if let Some(a) = &p.addr {
            parts.push(a.clone());
        }
        if let Some(h) = &p.host {
            parts.push(format!("host {h}"));
        }
        if let Some(r) = p.rank {
            parts.push(format!("rank {r}"));
        }
        out.push(format!("peer: {}", parts.join(", ")));
    }
    if v.local_gid.is_some() || v.remote_gid.is_some() {
        out.push(format!(
            "gid: local {} remote {}",
            v.local_gid.as_deref().unwrap_or("?"),
            v.remote_gid.as_deref().unwrap_or("?")
        ));
    }
    if v.status.is_some() || v.vendor_err.is_some() {
        let or_q = |x: Option<i64>| x.map(|x| x.to_string()).unwrap_or_else(|| "?".into());
        out.push(format!(
            "status {} vendor err {}",
            or_q(v.status),
            or_q(v.vendor_err)
        ));
    }
    if let (Some(seq), Some(op)) = (v.seq, &v.op) {
        out.push(format!("collective: SeqNum {seq} {op}"));
    }
    if !v.suspects.is_empty() {
        out.push(format!(
            "suspects (never reached it): rank {}",
            crate::text::rank_runs(&v.suspects)
        ));
    }
    if let Some(r) = &v.nccl_result {
        out.push(format!("NCCL returned {r}"));
    }
    if let Some(e) = v.errno {
        out.push(format!("errno {e}"));
    }
    out
}

/// Nothing to judge: the input had no NCCL line (exit 3, neither pass nor fault).
pub(crate) fn unknown(r: &Report) -> bool {
    use crate::finding::Severity;
    r.verdicts.iter().any(|v| v.severity == Severity::Unknown)
        && r.verdicts.iter().all(|v| v.severity != Severity::Fail)
}

/// Who a verdict is about, in a few words: `h rank 4 mlx5_0` (a CUDA device says less
/// than the rank).
fn who(v: &RootCause) -> String {
    let mut w = Vec::new();
    if let Some(h) = &v.host {
        w.push(h.clone());
    }
    if let Some(r) = v.rank {
        w.push(format!("rank {r}"));
    }
    if let Some(d) = v.device.as_ref().filter(|d| !d.starts_with("cuda:")) {
        w.push(d.clone());
    }
    if w.is_empty() {
        String::new()
    } else {
        format!(" on {}", w.join(" "))
    }
}

/// `fabprobe nccl-log: FAIL  2 fail, 1 warn; worst: ib_retry_exceeded on host a rank 4`.
fn headline(r: &Report) -> String {
    use crate::finding::Severity;
    let s = &r.summary;
    if unknown(r) {
        return text::wrap(
            "fabprobe nccl-log: UNKNOWN  ",
            &format!(
                "no NCCL line in {} line(s) from {} input(s): nothing to judge; rerun the job with NCCL_DEBUG=INFO",
                s.lines,
                s.inputs.len()
            ),
            2,
        );
    }
    let count = |sev: Severity| r.verdicts.iter().filter(|v| v.severity == sev).count();
    let (fail, warn) = (count(Severity::Fail), count(Severity::Warn));
    let worst = r
        .verdicts
        .iter()
        .find(|v| v.severity == Severity::Fail)
        .or_else(|| r.verdicts.iter().find(|v| v.severity == Severity::Warn));
    match worst {
        Some(v) => text::wrap(
            &format!("fabprobe nccl-log: {}  ", v.severity.as_str().to_uppercase()),
            &format!("{fail} fail, {warn} warn; worst: {}{}", v.cause, who(v)),
            2,
        ),
        None => format!(
            "fabprobe nccl-log: PASS  no failure in {} NCCL line(s) from {} host(s)\n",
            s.nccl_lines,
            s.hosts.len()
        ),
    }
}

/// Cells of the hosts table hold at most this many items, one a line, then `and N more`:
/// a job of many interfaces must not make a column hundreds of characters wide.
const CELL_ITEMS: usize = 4;

fn cell(v: &[String]) -> Vec<String> {
    if v.is_empty() {
        return vec!["-".into()];
    }
    let mut out: Vec<String> = v.iter().take(CELL_ITEMS).cloned().collect();
    if v.len() > CELL_ITEMS {
        out.push(format!("and {} more", v.len() - CELL_ITEMS));
    }
    out
}

/// The hosts table: one row per item of the list cells; too wide for the terminal, one
/// block per host with its lists wrapped at word boundaries (never a token cut in two).
fn hosts(s: &crate::nccl_log::Summary) -> String {
    let table = hosts_table(s);
    match text::width() {
        Some(w) if table.lines().any(|l| l.chars().count() > w) => hosts_blocks(s),
        _ => table,
    }
}

fn gdr_cells(h: &crate::nccl_log::HostSummary) -> Vec<String> {
    h.gdr
        .iter()
        .map(|(k, on)| format!("{k}:{}", if *on { "on" } else { "off" }))
        .collect()
}

fn hosts_blocks(s: &crate::nccl_log::Summary) -> String {
    let mut out = String::new();
    for h in &s.hosts {
        out.push_str(&text::wrap(
            "  ",
            &format!(
                "{}: ranks {}, {} process(es)",
                h.host,
                crate::text::rank_runs(&h.ranks),
                h.local_ranks
            ),
            4,
        ));
        let gdr = gdr_cells(h);
        for (name, v) in [
            ("bootstrap", &h.bootstrap),
            ("sockets", &h.socket_interfaces),
            ("hcas", &h.hcas),
            ("gdr", &gdr),
        ] {
            if !v.is_empty() {
                out.push_str(&text::wrap(&format!("    {name}: "), &cell(v).join(" "), 6));
            }
        }
    }
    out
}

fn hosts_table(s: &crate::nccl_log::Summary) -> String {
    let mut rows: Vec<Vec<String>> = vec![
        ["  HOST", "RANKS", "PROCS", "BOOTSTRAP", "SOCKETS", "HCAS", "GDR"]
            .iter()
            .map(|x| x.to_string())
            .collect(),
    ];
    for h in &s.hosts {
        let gdr = gdr_cells(h);
        let lists = [
            cell(&h.bootstrap),
            cell(&h.socket_interfaces),
            cell(&h.hcas),
            cell(&gdr),
        ];
        let n = lists.iter().map(Vec::len).max().unwrap_or(1);
        for i in 0..n {
            let mut row = if i == 0 {
                vec![
                    format!("  {}", h.host),
                    crate::text::rank_runs(&h.ranks),
                    h.local_ranks.to_string(),
                ]
            } else {
                vec![String::new(), String::new(), String::new()]
            };
            row.extend(lists.iter().map(|l| l.get(i).cloned().unwrap_or_default()));
            rows.push(row);
        }
    }
    crate::render::gids::columns_fit(&rows, None)
}

fn summary(r: &Report) -> String {
    let s = &r.summary;
    let mut out = String::new();
    out.push_str(&format!(
        "Read {} line(s), {} bytes from {} input(s); {} NCCL line(s), {} not understood{}\n",
        s.lines,
        s.bytes,
        s.inputs.len(),
        s.nccl_lines,
        s.unrecognised_lines,
        if s.truncated_lines > 0 {
            format!(", {} cut at 64 KiB", s.truncated_lines)
        } else {
            String::new()
        }
    ));
    let versions: Vec<String> = s
        .nccl_versions
        .iter()
        .map(|(v, h)| format!("{v} ({})", h.join(",")))
        .collect();
    out.push_str(&format!("NCCL version: {}\n", list(&versions)));
    out.push_str(&format!(
        "Ranks: {} seen{}; hosts: {}\n",
        s.ranks_seen,
        s.world_size.map(|w| format!(" of {w}")).unwrap_or_default(),
        s.hosts.len()
    ));
    out.push_str(&format!(
        "Rings: {} channel(s){}; trees: {} channel(s)\n",
        s.ring_channels,
        s.ring_sample
            .as_ref()
            .map(|r| format!(" (channel order: {r})"))
            .unwrap_or_default(),
        s.tree_channels
    ));
    if let Some(c) = &s.channels {
        out.push_str(&format!("Channels: {c}\n"));
    }
    out.push_str(&format!(
        "Network: {}; plugin: {}\n",
        list(&s.networks),
        list(&s.plugins)
    ));
    let tr: Vec<String> = s.transports.iter().map(|(k, v)| format!("{k} {v}")).collect();
    out.push_str(&format!(
        "Transports: {} ({} distinct rank pairs{})\n",
        list(&tr),
        s.connections.len(),
        if s.connections_dropped > 0 {
            format!(", {} more not kept", s.connections_dropped)
        } else {
            String::new()
        }
    ));
    out
}

pub fn table(r: &Report) -> String {
    let s = &r.summary;
    let mut out = headline(r);
    if !r.verdicts.is_empty() {
        let mut list = String::from("\nVerdicts:\n");
        for v in &r.verdicts {
            list.push_str(&verdict(v));
        }
        // Quoted log lines within the width too.
        out.push_str(&text::fit_prose(&list));
    }
    out.push('\n');
    out.push_str(&text::fit_prose(&summary(r)));
    if !s.hosts.is_empty() {
        out.push_str("\nHosts:\n");
        out.push_str(&hosts(s));
    }
    if !s.unrecognised_samples.is_empty() {
        let mut tail = String::from("\nNot understood (first lines):\n");
        for l in &s.unrecognised_samples {
            tail.push_str(&format!("  {l}\n"));
        }
        out.push_str(&text::fit_prose(&tail));
    }
    out
}
