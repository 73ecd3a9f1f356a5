//! `check` and `sweep`: table and Prometheus text.

use std::fmt::Write;

use crate::check::assemble::CheckReport;
use crate::check::sweep::SweepReport;
use crate::finding::{Finding, MissingFact, Severity};
use crate::host::FactsState;
use crate::render::text;

fn upper(s: Severity) -> &'static str {
    match s {
        Severity::Pass => "PASS",
        Severity::Unknown => "NOT EVALUATED",
        Severity::Warn => "WARN",
        Severity::Fail => "FAIL",
    }
}

fn dur(s: u64) -> String {
    let (d, h, m) = (s / 86_400, s % 86_400 / 3600, s % 3600 / 60);
    if d > 0 {
        format!("{d}d {h}h")
    } else {
        format!("{h}h {m}m")
    }
}

pub fn check_table(r: &CheckReport, hostname: Option<&str>, findings: &[Finding]) -> String {
    text::moved_view(&r.names_moved, || check_table_body(r, hostname, findings))
}

fn check_table_body(r: &CheckReport, hostname: Option<&str>, findings: &[Finding]) -> String {
    let s = check_header(r, hostname, findings);
    // The header's lines wrap too (a long CPU model, many device holders).
    // The first line, the verdict, stays whole for the scripts that read it.
    let mut s: String = s
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if i == 0 {
                format!("{l}\n")
            } else {
                text::wrap("", l, 2)
            }
        })
        .collect();
    finding_lines(&mut s, findings);
    s
}

/// The header's lines before wrapping: verdict, summary, ports not judged, host facts,
/// probes, what was seen, and the sample the rates come from.
fn check_header(r: &CheckReport, hostname: Option<&str>, findings: &[Finding]) -> String {
    let mut s = String::new();
    let head = format!(
        "fabprobe check: {}  policy {} ({})",
        upper(r.verdict),
        r.policy.name,
        r.policy.source
    );
    let host = format!("host {}", hostname.unwrap_or("?"));
    // The line reads as a table row (cells two spaces apart) and is not wrapped later: a
    // header wider than the terminal puts the host on a line of its own.
    let wide = super::text::width().is_some_and(|w| head.chars().count() + 2 + host.chars().count() > w);
    let _ = writeln!(s, "{head}{}{host}", if wide { "\n  " } else { "  " });
    // The cause first; what could not be judged on a line of its own, one entry per fact.
    let _ = writeln!(s, "{}", crate::check::decide::summary(findings, &[]));
    if !r.not_evaluated.is_empty() {
        let _ = writeln!(s, "{}", not_evaluated_line(&r.not_evaluated));
    }
    if !r.not_used_by_nccl.is_empty() {
        let what: Vec<String> = r
            .not_used_by_nccl
            .iter()
            .map(|n| format!("{} {} ({})", n.id, n.subject, n.severity.as_str()))
            .collect();
        let _ = writeln!(
            s,
            "not judged, not used by NCCL here ([policy] all_ports = true judges them): {}",
            what.join("; ")
        );
    }
    host_facts_lines(&mut s, &r.facts);
    let ran: Vec<&str> = r.probes.iter().map(|p| p.name.as_str()).collect();
    let _ = writeln!(s, "probes: {}", ran.join(" "));
    let _ = writeln!(s, "saw: {}", saw_line(&r.saw));
    if let Some(smp) = &r.sample {
        let _ = writeln!(
            s,
            "counter rates over {} s ({} {})",
            smp.interval_s.map(|x| format!("{x:.1}")).unwrap_or("?".into()),
            smp.kind,
            smp.baseline
        );
    }
    s
}

/// `14 not evaluated: 0 GPUs found (4 keys: gpu.model, ...); no InfiniBand ports (7 keys:
/// ib.state, ...); host: the snapshot has no fabprobe/facts.json`: keys that follow from one
/// missing fact are one entry naming the fact, in the order they first appear, and a fact
/// that follows from a wider one missing too is folded into it (no RDMA device at all
/// leaves no RoCE netdev and no InfiniBand port to judge).
pub(crate) fn not_evaluated_line(not_evaluated: &[crate::check::decide::NotEvaluated]) -> String {
    // Each key's fact: the widest missing fact that covers its own (typed where the reason
    // was written: the words do not decide the grouping).
    let widest = |m: MissingFact| {
        not_evaluated
            .iter()
            .filter_map(|n| n.missing)
            .filter(|w| w.covers(m))
            .max_by_key(|w| w.width())
            .unwrap_or(m)
    };
    // (the fact, the first key's own reason, the keys)
    let mut facts: Vec<(String, &str, Vec<&str>)> = Vec::new();
    for n in not_evaluated {
        let fact = match n.missing {
            Some(m) => {
                let w = widest(m);
                let resting = not_evaluated.iter().filter(|o| o.missing == Some(w));
                fact_text(w, resting.map(|o| o.reason.as_str()))
            }
            None => n.reason.split("; and ").next().unwrap_or(&n.reason).to_string(),
        };
        match facts.iter_mut().find(|(f, _, _)| *f == fact) {
            Some((_, _, keys)) => keys.push(&n.key),
            None => facts.push((fact, &n.reason, vec![&n.key])),
        }
    }
    let parts: Vec<String> = facts
        .iter()
        .map(|(fact, reason, keys)| match keys.as_slice() {
            [one] => format!("{one}: {reason}"),
            many => format!("{fact} ({} keys: {})", many.len(), many.join(", ")),
        })
        .collect();
    format!("{} not evaluated: {}", not_evaluated.len(), parts.join("; "))
}

/// The words for a missing fact: the most specific a reason resting on it says (`no RoCE
/// netdev: the RDMA ports are not Ethernet` over `no RoCE netdev`), else the fact's own.
fn fact_text<'a>(m: MissingFact, reasons: impl Iterator<Item = &'a str>) -> String {
    let said = |r: &str, from: &str| -> Option<String> {
        let tail = &r[r.find(from)?..];
        // Up to the parenthesis around the fact (`no RoCE netdev to judge (no RDMA devices:
        // ...)`), keeping one the fact opens itself; the finding's subject `(host)` goes.
        let end = tail.find(')').map_or(tail.len(), |i| if tail[..i].contains('(') { i + 1 } else { i });
        Some(tail[..end].trim_end_matches(" (host)").to_string())
    };
    match m {
        // Counted facts: their reasons say the count, not the words.
        MissingFact::Gpu | MissingFact::InfinibandPort => m.words().to_string(),
        _ => reasons
            .filter_map(|r| said(r, m.words()))
            .max_by_key(String::len)
            .unwrap_or_else(|| m.words().to_string()),
    }
}

/// The host's facts in two lines (system, then memlock and device holders), or why not.
fn host_facts_lines(s: &mut String, facts: &FactsState) {
    match facts {
        FactsState::Available(f) => {
            let _ = writeln!(
                s,
                "host: {}, kernel {}, {} x {}, {} GiB, up {}, load {}",
                f.os.as_deref().unwrap_or("unknown OS"),
                f.kernel.as_deref().unwrap_or("?"),
                f.cpu_count.map(|n| n.to_string()).unwrap_or("?".into()),
                f.cpu_model.as_deref().unwrap_or("unknown CPU"),
                f.memory_total_bytes
                    .map(|b| (b >> 30).to_string())
                    .unwrap_or("?".into()),
                f.uptime_s.map(dur).unwrap_or("?".into()),
                f.load_avg
                    .map(|l| format!("{:.2} {:.2} {:.2}", l[0], l[1], l[2]))
                    .unwrap_or("?".into()),
            );
            let _ = writeln!(
                s,
                "memlock: {}; device holders: {}",
                f.memlock.map(|m| m.soft.show()).unwrap_or("unknown".into()),
                if f.device_holders.is_empty() {
                    "none".to_string()
                } else {
                    f.device_holders
                        .iter()
                        .map(|h| format!("{} {}", h.pid, h.comm.as_deref().unwrap_or("?")))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            );
        }
        FactsState::Unavailable { reason } => {
            let _ = writeln!(s, "host facts: unavailable ({reason})");
        }
    }
}

/// Each finding: severity, id and subject, then its message, evidence and fix indented.
fn finding_lines(s: &mut String, findings: &[Finding]) {
    if findings.is_empty() {
        s.push_str("\nno findings\n");
    }
    for f in findings {
        let head = format!("\n{}  {}  ", upper(f.severity), f.id);
        s.push_str(&text::wrap(&head, &f.subject, 6));
        s.push_str(&text::wrap("      ", &f.message, 6));
        s.push_str(&text::evidence_to("      evidence: ", &f.evidence, text::width()));
        if let Some(fix) = &f.fix {
            s.push_str(&text::wrap_remedy("      fix: ", fix, 11));
        }
    }
}


pub(crate) fn check_prom(r: &CheckReport, findings: &[Finding]) -> String {
    let mut s = String::new();
    let p = super::prom_label(&r.policy.name);
    s.push_str("# HELP fabprobe_check_verdict The node's verdict: 0 pass, 1 warn, 2 fail, 3 not evaluated (no GPU and no RDMA device seen).\n# TYPE fabprobe_check_verdict gauge\n");
    let v = match r.verdict {
        Severity::Pass => 0,
        Severity::Warn => 1,
        Severity::Fail => 2,
        Severity::Unknown => 3,
    };
    let _ = writeln!(s, "fabprobe_check_verdict{{policy=\"{p}\"}} {v}");
    // Warn and fail only: pass findings are not emitted one by one, so a pass count
    // here would be a series that is always 0.
    s.push_str(
        "# HELP fabprobe_check_findings Warn and fail findings by severity.\n# TYPE fabprobe_check_findings gauge\n",
    );
    for (sev, n) in [("fail", r.counts.fail), ("warn", r.counts.warn)] {
        let _ = writeln!(
            s,
            "fabprobe_check_findings{{policy=\"{p}\",severity=\"{sev}\"}} {n}"
        );
    }
    s.push_str("# HELP fabprobe_check_finding One warn or fail finding (value 1).\n# TYPE fabprobe_check_finding gauge\n");
    for f in findings.iter().filter(|f| f.severity != Severity::Pass) {
        let _ = writeln!(
            s,
            "fabprobe_check_finding{{policy=\"{p}\",id=\"{}\",subject=\"{}\",severity=\"{}\"}} 1",
            super::prom_label(&f.id),
            super::prom_label(&f.subject),
            f.severity.as_str()
        );
    }
    // Not evaluated is said, not scored: one series per key, so an alert can ask for it.
    if !r.not_evaluated.is_empty() {
        s.push_str("# HELP fabprobe_check_not_evaluated A policy key that could not be evaluated (value 1).\n# TYPE fabprobe_check_not_evaluated gauge\n");
    }
    for n in &r.not_evaluated {
        let _ = writeln!(s, "fabprobe_check_not_evaluated{{policy=\"{p}\",key=\"{}\"}} 1", super::prom_label(&n.key));
    }
    let w = &r.saw;
    let seen = [
        ("gpu", w.gpus),
        ("rdma", w.rdma_devices),
        ("rdma_port", w.rdma_ports),
        ("rdma_port_active", w.rdma_ports_active),
        ("roce_netdev", w.roce_netdevs),
    ];
    s.push_str(&crate::render::devices_prom(
        "check",
        &format!("policy=\"{p}\","),
        &seen,
    ));
    s.push_str(&crate::render::moved_prom("check", &format!("policy=\"{p}\","), &r.names_moved));
    if let FactsState::Available(f) = &r.facts {
        s.push_str("# HELP fabprobe_check_device_holders Processes holding /dev/nvidia* or /dev/infiniband/uverbs*.\n# TYPE fabprobe_check_device_holders gauge\n");
        // Labelled with the policy as every series is: two check files on one node (two
        // policies) must not give node_exporter one series twice.
        let _ = writeln!(
            s,
            "fabprobe_check_device_holders{{policy=\"{p}\"}} {}",
            f.device_holders.len()
        );
    }
    s
}

pub(crate) fn sweep_table(r: &SweepReport) -> String {
    let mut s = String::new();
    let n = &r.nodes;
    let what = if r.ring.is_some() {
        "check reports"
    } else {
        "reports"
    };
    let _ = write!(
        s,
        "fabprobe sweep: {} {what}: {} pass, {} warn, {} fail; {} outliers; {} unreadable; {} missing; {} to drain",
        n.reports, n.passed, n.warned, n.failed, n.outliers, n.unreadable, n.missing, n.drain
    );
    match &r.ring {
        Some(rr) => {
            let _ = writeln!(s, "; {} ring reports, {} to ticket", rr.reports, rr.ticket.len());
        }
        None => s.push('\n'),
    }
    failures_section(&mut s, r);
    outliers_section(&mut s, r);
    if !r.no_majority.is_empty() {
        s.push_str("\nNO MAJORITY\n");
        for sp in &r.no_majority {
            let v: Vec<String> = sp.values.iter().map(|(v, c)| format!("{v}: {c}")).collect();
            s.push_str(&text::wrap(
                &format!("  {:<16} ", sp.key),
                &format!("{}  [{}]", v.join(", "), sp.kind),
                19,
            ));
        }
    }
    unreadable_section(&mut s, r);
    if !r.notes.is_empty() {
        s.push_str("\nNOTES\n");
        for n in &r.notes {
            s.push_str(&text::wrap("  ", n, 4));
        }
    }
    if let Some(rr) = &r.ring {
        ring_lists(&mut s, rr);
    }
    if !r.bad_nodes.is_empty() {
        s.push_str("\nDRAIN\n");
        for b in &r.bad_nodes {
            s.push_str(&text::wrap(
                &format!("  {:<20} ", b.node),
                &b.reasons.join("; "),
                23,
            ));
        }
    }
    text::fit_prose(&s)
}

/// FAILED, BY CAUSE: each cause, how many nodes and which, and an example.
fn failures_section(s: &mut String, r: &SweepReport) {
    if !r.failures.is_empty() {
        s.push_str("\nFAILED, BY CAUSE\n");
        // The examples in their column when each fits there on one line; else (a terminal
        // too narrow) each on its own line under its cause, so the text gets the width.
        let column = format!("  {:<36}        e.g. ", "");
        let eg_lead = match text::width() {
            Some(w)
                if r.failures
                    .iter()
                    .any(|g| column.len() + g.example.chars().count() > w) =>
            {
                "    e.g. ".to_string()
            }
            _ => column,
        };
        for g in &r.failures {
            let lead = format!("  {:<36} {:>5} nodes  ", g.id, g.node_count);
            let nodes = short_list(&g.nodes);
            match text::width() {
                // Too wide for the terminal: the node list on the next lines, under the cause.
                Some(w) if lead.len() + nodes.chars().count() > w => {
                    s.push_str(lead.trim_end());
                    s.push('\n');
                    s.push_str(&text::wrap("    ", &nodes.replace(',', ", "), 4));
                }
                _ => s.push_str(&format!("{lead}{nodes}\n")),
            }
            s.push_str(&text::wrap(&eg_lead, &g.example, eg_lead.len()));
        }
    }
}

/// DIFFERENT FROM THEIR PEERS: each node's value beside the majority's.
fn outliers_section(s: &mut String, r: &SweepReport) {
    if !r.outliers.is_empty() {
        s.push_str("\nDIFFERENT FROM THEIR PEERS\n");
        let narrow = text::width().is_some_and(|w| w < 80);
        for o in &r.outliers {
            let said = format!(
                "{}  (majority {}{}: {} of {} nodes of its kind)",
                o.value,
                o.majority_value,
                crate::check::sweep::tol_text(o),
                o.majority_nodes,
                o.nodes_compared,
            );
            // Narrow, the value's column would be a ribbon: node and key lead the line.
            s.push_str(&if narrow {
                text::wrap(&format!("  {} {}: ", o.node, o.key), &said, 4)
            } else {
                text::wrap(&format!("  {:<20} {:<16} ", o.node, o.key), &said, 40)
            });
        }
    }
}

/// MISSING OR UNREADABLE REPORTS: each node, the problem, and the report it came from.
fn unreadable_section(s: &mut String, r: &SweepReport) {
    if !r.unreadable.is_empty() {
        s.push_str("\nMISSING OR UNREADABLE REPORTS\n");
        // Narrower than twice the detail's column, node and problem lead the line instead.
        let narrow = text::width().is_some_and(|w| w < 84);
        for u in &r.unreadable {
            let (node, problem) = (u.node.as_deref().unwrap_or("?"), u.problem.as_str());
            let detail = format!("{}  ({})", u.detail, u.source);
            s.push_str(&if narrow {
                text::wrap(&format!("  {node} {problem}: "), &detail, 4)
            } else {
                text::wrap(&format!("  {node:<20} {problem:<18} "), &detail, 42)
            });
        }
    }
}

/// The ring reports' lists, apart: nodes to drain (each kind and reason, the switch port at
/// its end) and links to ticket (both ends, the switch ports, the reports that named it).
fn ring_lists(s: &mut String, rr: &crate::check::ringsweep::RingSweep) {
    let _ = writeln!(
        s,
        "\nRING REPORTS: {}; {} to drain, {} to ticket",
        crate::finding::spell::count(rr.reports, "run", "runs"),
        crate::finding::spell::count(rr.drain.len(), "node", "nodes"),
        crate::finding::spell::count(rr.ticket.len(), "link or path", "links or paths")
    );
    for run in rr.runs.iter().filter(|r| r.error.is_some()) {
        let why = run.error.as_deref().unwrap_or_default();
        s.push_str(&text::wrap(&format!("  {}: ended early: ", run.source), why, 4));
    }
    if !rr.drain.is_empty() {
        s.push_str("\nRING: DRAIN (the node's own port or NIC)\n");
        for d in &rr.drain {
            let said = format!("{}: {}", d.kinds.join(", "), d.reasons.join("; "));
            s.push_str(&text::wrap(&format!("  {:<20} ", d.node), &said, 23));
            if !d.switch_ports.is_empty() {
                s.push_str(&text::wrap("    switch port: ", &d.switch_ports.join("; "), 6));
            }
        }
    }
    if !rr.ticket.is_empty() {
        s.push_str("\nRING: TICKET (the cable or switch ports between two nodes)\n");
        for t in &rr.ticket {
            let end = |e: &crate::check::ringsweep::TicketEnd| e.host.clone().unwrap_or_else(|| "?".into());
            let rail = t.rail.map(|k| format!(" rail {k}")).unwrap_or_default();
            let head = format!("  {} {} -> {}{rail}: ", t.kind, end(&t.from), end(&t.to));
            s.push_str(&text::wrap(&head, &t.message, 4));
            if !t.switch_ports.is_empty() {
                s.push_str(&text::wrap("    switch ports: ", &t.switch_ports.join("; "), 6));
            }
            s.push_str(&text::wrap("    named by: ", &t.sources.join(", "), 6));
        }
    }
}

fn short_list(v: &[String]) -> String {
    if v.len() <= 8 {
        v.join(",")
    } else {
        format!("{},... (+{})", v[..8].join(","), v.len() - 8)
    }
}

/// A fingerprint value as a label: a string as it is (no JSON quotes), anything else as JSON.
fn label_value(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

pub(crate) fn sweep_prom(r: &SweepReport) -> String {
    let mut s = String::new();
    let n = &r.nodes;
    s.push_str("# HELP fabprobe_sweep_nodes Reports by outcome.\n# TYPE fabprobe_sweep_nodes gauge\n");
    for (k, v) in [
        ("pass", n.passed),
        ("warn", n.warned),
        ("fail", n.failed),
        ("outlier", n.outliers),
        ("unreadable", n.unreadable),
        ("missing", n.missing),
        ("drain", n.drain),
    ] {
        let _ = writeln!(s, "fabprobe_sweep_nodes{{state=\"{k}\"}} {v}");
    }
    s.push_str("# HELP fabprobe_sweep_bad_node A node on the drain list (value 1).\n# TYPE fabprobe_sweep_bad_node gauge\n");
    for b in &r.bad_nodes {
        let _ = writeln!(s, "fabprobe_sweep_bad_node{{node=\"{}\"}} 1", super::prom_label(&b.node));
    }
    s.push_str("# HELP fabprobe_sweep_outlier A node unlike the majority on a key (value 1).\n# TYPE fabprobe_sweep_outlier gauge\n");
    for o in &r.outliers {
        let _ = writeln!(
            s,
            "fabprobe_sweep_outlier{{node=\"{}\",key=\"{}\",value=\"{}\",majority=\"{}\"}} 1",
            super::prom_label(&o.node),
            super::prom_label(&o.key),
            super::prom_label(&label_value(&o.value)),
            super::prom_label(&label_value(&o.majority_value))
        );
    }
    if let Some(rr) = &r.ring {
        s.push_str(
            "# HELP fabprobe_sweep_ticket A link or path ring reports name to ticket (value 1).\n# TYPE fabprobe_sweep_ticket gauge\n",
        );
        for t in &rr.ticket {
            let host = |e: &crate::check::ringsweep::TicketEnd| super::prom_label(e.host.as_deref().unwrap_or("?"));
            let rail = t.rail.map(|k| k.to_string()).unwrap_or_default();
            let _ = writeln!(
                s,
                "fabprobe_sweep_ticket{{kind=\"{}\",from=\"{}\",to=\"{}\",rail=\"{rail}\"}} 1",
                super::prom_label(&t.kind),
                host(&t.from),
                host(&t.to)
            );
        }
    }
    s
}

/// `8 GPUs, 10 RDMA devices (8 of 10 ports active), 2 RoCE netdevs`; `?` where unknown.
fn saw_line(w: &crate::check::assemble::Saw) -> String {
    let n = |v: Option<usize>| v.map(|x| x.to_string()).unwrap_or("?".into());
    // A count with its noun; `?` (unknown) takes the plural.
    let c = |v: Option<usize>, one: &str, many: &str| match v {
        Some(x) => crate::finding::spell::count(x, one, many),
        None => format!("? {many}"),
    };
    format!(
        "{}, {} ({} of {} active), {}",
        c(w.gpus, "GPU", "GPUs"),
        c(w.rdma_devices, "RDMA device", "RDMA devices"),
        n(w.rdma_ports_active),
        c(w.rdma_ports, "port", "ports"),
        c(w.roce_netdevs, "RoCE netdev", "RoCE netdevs")
    )
}

#[cfg(test)]
mod tests {
    use super::not_evaluated_line;
    use crate::check::decide::NotEvaluated;
    use crate::finding::MissingFact::{self, *};

    type Note<'a> = (&'a str, &'a str, Option<MissingFact>);

    fn line(notes: &[Note]) -> String {
        let n: Vec<NotEvaluated> = notes
            .iter()
            .map(|(k, r, m)| NotEvaluated {
                key: k.to_string(),
                reason: r.to_string(),
                missing: *m,
            })
            .collect();
        not_evaluated_line(&n)
    }

    /// Keys resting on one missing fact are one entry; a narrower fact folds into a wider
    /// one missing too; a reason of its own stays as it is.
    #[test]
    fn one_entry_per_missing_fact() {
        let none = "nothing to judge: no NVIDIA GPU and no RDMA device showed up (is a driver not loaded?) (host)";
        let no_ib = "nothing to judge: no RDMA devices: the kernel has no InfiniBand support (host)";
        let cases: &[(&[Note], &str)] = &[
            (
                &[
                    ("gpu.model", "no GPU to judge (0 GPUs found)", Some(Gpu)),
                    ("gdr.ready", "no GPU-NIC pair to judge (0 GPUs found)", Some(Gpu)),
                    ("gdr.nothing_to_judge", "nothing to judge: no GPU on this host: GPUDirect RDMA does not apply (host)", Some(Gpu)),
                ],
                "3 not evaluated: 0 GPUs found (3 keys: gpu.model, gdr.ready, gdr.nothing_to_judge)",
            ),
            (
                &[
                    ("roce.state", "no Ethernet ports to judge", Some(RoceNetdev)),
                    ("roce.gid", "no RoCE port to judge", Some(RoceNetdev)),
                    ("roce.mtu", "no RoCE netdev to judge (no RoCE netdev)", Some(RoceNetdev)),
                    ("qos.nothing_to_judge", "nothing to judge: no RoCE netdev: the RDMA ports are not Ethernet (host)", Some(RoceNetdev)),
                ],
                "4 not evaluated: no RoCE netdev: the RDMA ports are not Ethernet (4 keys: roce.state, roce.gid, roce.mtu, qos.nothing_to_judge)",
            ),
            (
                &[
                    ("ib.state", "no InfiniBand ports to judge", Some(InfinibandPort)),
                    ("roce.mtu", "no RoCE netdev to judge (no RDMA devices: the kernel has no InfiniBand support)", Some(RdmaDevice)),
                    ("gids.nothing_to_judge", no_ib, Some(RdmaDevice)),
                ],
                "3 not evaluated: no RDMA devices: the kernel has no InfiniBand support (3 keys: ib.state, roce.mtu, gids.nothing_to_judge)",
            ),
            (
                &[
                    ("gpu.model", "no GPU to judge (0 GPUs found)", Some(Gpu)),
                    ("ib.state", "no InfiniBand ports to judge", Some(InfinibandPort)),
                    ("counters.max_per_hour", "counter rates need two samples", None),
                    ("topo.nothing_to_judge", none, Some(GpuAndRdma)),
                    ("gids.nothing_to_judge", no_ib, Some(RdmaDevice)),
                ],
                "5 not evaluated: no NVIDIA GPU and no RDMA device showed up (is a driver not loaded?) (4 keys: gpu.model, ib.state, topo.nothing_to_judge, gids.nothing_to_judge); counters.max_per_hour: counter rates need two samples",
            ),
            (
                &[
                    ("ib.state", "no InfiniBand ports to judge", Some(InfinibandPort)),
                    ("gpu.model", "no GPU to judge (0 GPUs found)", Some(Gpu)),
                ],
                "2 not evaluated: ib.state: no InfiniBand ports to judge; gpu.model: no GPU to judge (0 GPUs found)",
            ),
            // GPUs and no RDMA device: the GPUDirect keys and the port keys are one fact
            // (gdr's own wording named no fact the old text match knew: it stood apart).
            (
                &[
                    ("gdr.ready", "no GPU-NIC pair to judge (8 GPUs, 0 RDMA NICs found)", Some(RdmaDevice)),
                    ("ib.state", "no InfiniBand ports to judge", Some(InfinibandPort)),
                    ("gdr.nothing_to_judge", "nothing to judge: no RDMA device on this host: GPUDirect RDMA does not apply (host)", Some(RdmaDevice)),
                    ("links.nothing_to_judge", no_ib, Some(RdmaDevice)),
                ],
                "4 not evaluated: no RDMA devices: the kernel has no InfiniBand support (4 keys: gdr.ready, ib.state, gdr.nothing_to_judge, links.nothing_to_judge)",
            ),
            // The fact decides, not the words: reasons reworded past any phrase still fold,
            // under the fact's own words; one that names a fact but rests on none stays apart.
            (
                &[
                    ("gids.nothing_to_judge", "the kernel lists no HCA", Some(RdmaDevice)),
                    ("ib.state", "InfiniBand: none here", Some(InfinibandPort)),
                    ("gpu.nvlink_min", "no GPU pair to judge (1 GPUs found)", None),
                    ("gpu.model", "no GPUs (0 GPUs found)", None),
                ],
                "4 not evaluated: no RDMA devices (2 keys: gids.nothing_to_judge, ib.state); gpu.nvlink_min: no GPU pair to judge (1 GPUs found); gpu.model: no GPUs (0 GPUs found)",
            ),
        ];
        for (notes, want) in cases {
            assert_eq!(line(notes), *want);
        }
    }
}
