//! `fabprobe ring` as text: the verdict first (or one line saying the run was healthy, with
//! its figures), then nccl-tests' `all_reduce_perf` layout (header lines naming ranks, hosts
//! and devices; size, count, type, redop, root, time, algbw, busbw, #wrong; `# Avg bus
//! bandwidth`), with nccl-tests' out-of-place and in-place column groups, so the numbers
//! compare directly, then the per-link table and the scan's sender x receiver matrix.

use crate::render::text;
use crate::ring::diagnosis::driver::ScanReport;
use crate::ring::model::{RankInfo, Verdict};
use crate::ring::report::{LauncherInfo, ResultRow, RingReport};
use crate::ring::run::Options;

/// nccl-tests squeezes a number into its column: `%.2f`, else `%.1f`, `%.0f`, then `%e`.
pub(crate) fn fit(v: f64, width: usize) -> String {
    for prec in [2, 1, 0] {
        let s = format!("{v:.prec$}");
        if s.len() <= width {
            return s;
        }
    }
    format!("{v:.0e}")
}

/// How the nccl-tests part (header, device lines, rows) is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// nccl-tests' own columns, byte for byte, never wrapped: what scripts that parse
    /// `all_reduce_perf` output read (pipes, files, terminals wide enough for them).
    Nccl,
    /// On a terminal narrower than [`NCCL_WIDTH`]: the same figures in fewer columns, one
    /// line per size from 80 columns, below that one line per placement; device lines
    /// wrap.
    Compact { width: usize },
}

/// The width of nccl-tests' rows (and of their column headings).
pub(crate) const NCCL_WIDTH: usize = 118;

impl Layout {
    /// Compact only for a person: on a terminal (`tty`) narrower than nccl-tests' rows.
    pub fn pick(width: Option<usize>, tty: bool) -> Layout {
        match width {
            Some(width) if tty && width < NCCL_WIDTH => Layout::Compact { width },
            _ => Layout::Nccl,
        }
    }

    /// The width prose around the table fits: the compact form's, else the terminal's.
    fn width(self) -> Option<usize> {
        match self {
            Layout::Compact { width } => Some(width),
            Layout::Nccl => text::width(),
        }
    }
}

/// The whole report in nccl-tests' columns (see [`table_in`]).
#[cfg(test)]
pub(crate) fn table(r: &RingReport) -> String {
    table_in(r, Layout::Nccl)
}

/// The whole report: verdicts, header and rows in `layout`, then the tail.
pub(crate) fn table_in(r: &RingReport, layout: Layout) -> String {
    let mut o = String::new();
    verdicts(&mut o, r);
    let mut o = text::fit_prose_to(&o, layout.width());
    let mut h = Head::of(r);
    h.layout = layout;
    o.push_str(&head(&h));
    for row in &r.results {
        o.push_str(&row_line_in(row, layout));
    }
    let mut t = String::new();
    tail(&mut t, r, "above", layout.width());
    o.push_str(&text::fit_prose_to(&t, layout.width()));
    o
}

/// [`table_after_rows_in`] in nccl-tests' columns.
#[cfg(test)]
pub(crate) fn table_after_rows(r: &RingReport, shown: &[u64]) -> String {
    table_after_rows_in(r, shown, Layout::Nccl)
}

/// The rest of the table after [`head`] and the rows in `shown` were printed as the run
/// went: rows not shown, the tail, then the verdicts (last: the run is over when they are
/// known).
pub(crate) fn table_after_rows_in(r: &RingReport, shown: &[u64], layout: Layout) -> String {
    let mut o = String::new();
    for row in r.results.iter().filter(|x| !shown.contains(&x.size_bytes)) {
        o.push_str(&row_line_in(row, layout));
    }
    let mut t = String::new();
    tail(&mut t, r, "below", layout.width());
    // The rows streamed, so the verdict (or the healthy line) closes the output instead.
    t.push('\n');
    verdicts(&mut t, r);
    t.truncate(t.trim_end().len());
    t.push('\n');
    o.push_str(&text::fit_prose_to(&t, layout.width()));
    o
}

/// What the header lines need, known as soon as every rank has joined.
pub(crate) struct Head<'a> {
    pub world: u32,
    pub transport: &'a str,
    pub launcher: &'a LauncherInfo,
    pub options: &'a Options,
    pub ranks: &'a [RankInfo],
    /// Why `--transport auto` ran tcp (the report's `transport_note`).
    pub note: Option<&'a str>,
    /// A row of the sweep, whose type, operation and root the compact header names once.
    pub first_row: Option<&'a ResultRow>,
    pub layout: Layout,
}

impl<'a> Head<'a> {
    pub fn of(r: &'a RingReport) -> Self {
        Head {
            world: r.world,
            transport: &r.transport,
            launcher: &r.launcher,
            options: &r.options,
            ranks: &r.ranks,
            note: r.transport_note.as_deref(),
            first_row: r.results.first(),
            layout: Layout::Nccl,
        }
    }
}

/// Verdicts first: the one thing a person on call needs, with the next command.
fn verdicts(o: &mut String, r: &RingReport) {
    let mut line = |s: String| {
        o.push_str(&s);
        o.push('\n');
    };
    // Wrapped to the terminal (a trailing newline each, which `line` adds back).
    let wrapped = |s: String| s.trim_end_matches('\n').to_string();
    for v in &r.verdicts {
        line(wrapped(text::wrap("", &v.message, 2)));
        // Drain the node or ticket the link: the first thing on call decides.
        line(format!("  action: {}", v.action().as_str()));
        // The switch port at each end LLDP named: what the ticket or the drain note quotes.
        let ports = crate::ring::diagnosis::neighbor::texts(v);
        if !ports.is_empty() {
            line(wrapped(text::wrap("  switch port: ", &ports.join("; "), 4)));
        }
        if let Some(n) = &v.next {
            line(wrapped(text::wrap_remedy("  next: ", n, 8)));
        }
        if let Some(c) = v.evidence.get("port_counters").and_then(|c| c.as_object()) {
            let moved: Vec<String> = c.iter().map(|(k, d)| format!("{k} +{d}")).collect();
            line(wrapped(text::wrap(
                "  port counters that moved: ",
                &moved.join(", "),
                4,
            )));
        }
    }
    if let Some(f) = r.scan.as_ref().and_then(|s| s.fabric_slow.as_ref()) {
        line(wrapped(text::wrap("", &f.message, 2)));
    }
    // Unknown, not healthy: said after any verdict and instead of "no slow link".
    let not_judged: Vec<&Verdict> = r
        .not_judged
        .iter()
        .chain(scans(r).flat_map(|s| &s.not_judged))
        .collect();
    for v in &not_judged {
        line(wrapped(text::wrap("", &v.message, 2)));
        if let Some(n) = &v.next {
            line(wrapped(text::wrap_remedy("  next: ", n, 8)));
        }
    }
    // Suspects new connections did not confirm: figures, not verdicts.
    for v in scans(r).flat_map(|s| &s.unconfirmed) {
        line(wrapped(text::wrap("", &v.message, 2)));
    }
    // What the scan did not measure has no verdict either way: said beside the verdict.
    for s in coverage_lines(r) {
        line(wrapped(text::wrap("", &s, 2)));
    }
    if r.verdicts.is_empty() {
        line(wrapped(text::wrap("", &outcome(r, not_judged.len()), 2)));
    }
    line(String::new());
}

/// The one line when no verdict names a culprit: the run's figures when it was healthy,
/// else what went wrong without one (an early end, wrong results).
fn outcome(r: &RingReport, not_judged: usize) -> String {
    if let Some(early) = ended_early(r) {
        return early;
    }
    let untested: Vec<&str> = r.rails.iter().filter_map(|x| x.not_tested.as_deref()).collect();
    healthy_line(&healthy_parts(r), not_judged, &untested)
}

/// The healthy run's sentence from its figures (`parts`), the slow figures not judged and
/// the rails not tested; the text report and the HTML page say it alike.
pub(crate) fn healthy_line(parts: &[String], not_judged: usize, untested: &[&str]) -> String {
    let said = match not_judged {
        0 => format!("no slow link, no hang: {}", parts.join(", ")),
        n => format!(
            "no hang; {n} slow figure(s) not judged (CPU-bound hosts, above), so no verdict on those links: {}",
            parts.join(", ")
        ),
    };
    // A rail no ring ran on is unknown, never part of the pass.
    match untested.is_empty() {
        true => said,
        false => format!("{said}; NOT TESTED: {}", untested.join("; ")),
    }
}

/// The outcome of a run that did not end as a pass: an error, wrong results, a rail that
/// ended early. None: it ran through.
fn ended_early(r: &RingReport) -> Option<String> {
    let wrong = r.wrong_total();
    if let Some(e) = &r.error {
        return Some(format!("RUN ENDED EARLY with no verdict: {e}"));
    }
    if wrong > 0 {
        let sizes: Vec<String> = r
            .results
            .iter()
            .filter(|x| x.wrong.unwrap_or(0) + x.in_place.as_ref().and_then(|h| h.wrong).unwrap_or(0) > 0)
            .map(|x| format!("{} B", x.size_bytes))
            .collect();
        return Some(format!(
            "WRONG RESULTS: {wrong} element(s) differ from the expected sum at {}: the data was corrupted on the way",
            sizes.join(", ")
        ));
    }
    let rail_errors: Vec<String> = r
        .rails
        .iter()
        .filter_map(|x| x.error.as_ref().map(|e| format!("rail {}: {e}", x.rail)))
        .collect();
    (!rail_errors.is_empty()).then(|| format!("RAIL ENDED EARLY: {}", rail_errors.join("; ")))
}

/// What a pass says it covered: ranks and rails, sizes and busbw, the scan's median and
/// slowest link, how many links it measured.
fn healthy_parts(r: &RingReport) -> Vec<String> {
    let mut parts = vec![match r.rails.iter().filter(|x| x.not_tested.is_none()).count() {
        0 => format!("{} ranks over {}", r.world, r.transport),
        n => format!("{} ranks x {n} rails over {}", r.world, r.transport),
    }];
    if r.options.sweep {
        parts.push(format!(
            "{} size(s), avg busbw {}",
            r.results.len(),
            r.avg_busbw_gbs
                .map(|b| format!("{} GB/s", fit(b, 6)))
                .unwrap_or_else(|| "N/A".into())
        ));
    }
    let scans: Vec<&ScanReport> = scans(r).collect();
    if let Some(m) = r.scan.as_ref().and_then(|s| s.median_gbs) {
        parts.push(format!("scan median link {}", text::rate(m)));
    }
    // The slowest link measured, so "healthy" shows how close the worst came.
    let slowest = scans
        .iter()
        .flat_map(|s| s.links.iter().map(|l| (l.from_rank, l.to_rank, l.gbs)))
        .chain(
            r.links
                .iter()
                .filter(|_| scans.is_empty())
                .map(|l| (l.from_rank, l.to_rank, l.gbs)),
        )
        .min_by(|a, b| a.2.total_cmp(&b.2));
    if let Some((f, t, g)) = slowest {
        parts.push(format!(
            "slowest link {} -> {} {}",
            rank_label(r, f),
            rank_label(r, t),
            text::rate(g)
        ));
    }
    // A pass covers only the links measured: how many of how many, always.
    let (measured, total) = scans.iter().fold((0, 0), |(m, t), s| {
        (
            m + s.links_total.saturating_sub(s.unmeasured.len()),
            t + s.links_total,
        )
    });
    if total > 0 {
        parts.push(format!("{measured} of {total} links measured"));
    }
    parts
}

/// The links each scan did not measure, grouped by why, and the confirmation the budget
/// left out: one line each (none when the scan measured every link and confirmed all).
fn coverage_lines(r: &RingReport) -> Vec<String> {
    let single = r.scan.iter().map(|s| (None, s));
    let rails = r
        .rails
        .iter()
        .filter_map(|x| x.scan.as_ref().map(|s| (Some(x.rail), s)));
    let mut out = Vec::new();
    for (rail, sc) in single.chain(rails) {
        let on = rail.map(|k| format!(" on rail {k}")).unwrap_or_default();
        for (reason, why) in [
            (
                "budget",
                format!("--scan-time {} s ended the plan before their orders", sc.budget_s),
            ),
            (
                "no_samples",
                "their order ran but the receiver reported no sample of them".to_string(),
            ),
        ] {
            let links: Vec<String> = sc
                .unmeasured
                .iter()
                .filter(|u| u.reason == reason)
                .map(|u| format!("{} -> {}", rank_label(r, u.from_rank), rank_label(r, u.to_rank)))
                .collect();
            if links.is_empty() {
                continue;
            }
            let more = match links.len().saturating_sub(UNMEASURED_SHOWN) {
                0 => String::new(),
                k => format!(" and {k} more (scan.unmeasured)"),
            };
            out.push(format!(
                "NOT MEASURED{on}: {} of {} links, no verdict on them ({why}): {}{more}",
                links.len(),
                sc.links_total,
                links[..links.len().min(UNMEASURED_SHOWN)].join(", ")
            ));
        }
        if sc.confirm_cut_orders > 0 {
            out.push(format!(
                "NOT CONFIRMED{on}: --scan-time {} s left out {} confirmation order(s); the suspects they would have measured are UNCONFIRMED",
                sc.budget_s, sc.confirm_cut_orders
            ));
        }
    }
    out
}

/// Unmeasured links named in the text report per reason; JSON has them all.
const UNMEASURED_SHOWN: usize = 6;

/// The run's scans: the single-rail one and each rail's.
fn scans(r: &RingReport) -> impl Iterator<Item = &ScanReport> {
    r.scan
        .iter()
        .chain(r.rails.iter().filter_map(|x| x.scan.as_ref()))
}

/// `rank 2 (node-c)`, or `rank 2` when the rank table does not have it.
fn rank_label(r: &RingReport, rank: u32) -> String {
    match r.ranks.iter().find(|i| i.rank == rank) {
        Some(i) => format!("rank {rank} ({})", i.host),
        None => format!("rank {rank}"),
    }
}

fn group(t: &str, a: &str, b: &str, w: &str) -> String {
    format!("  {t:>7}  {a:>6}  {b:>6}  {w:>6}")
}

/// The header lines, through the column headings of the sweep.
pub(crate) fn head(h: &Head) -> String {
    let mut o = String::new();
    let mut line = |s: String| {
        o.push_str(&s);
        o.push('\n');
    };
    let (min, max) = (
        h.options.sizes.first().copied().unwrap_or(0),
        h.options.sizes.last().copied().unwrap_or(0),
    );
    if h.options.sweep {
        line(format!(
            "# fabprobe {} ring: all_reduce over {}",
            env!("CARGO_PKG_VERSION"),
            h.transport
        ));
        line(format!(
            "# nRanks {} channels {} minBytes {min} maxBytes {max} step: 2(factor) warmup iters: {} iters: {} validation: {}",
            h.world,
            h.options.channels,
            h.options.warmup,
            h.options.iters,
            h.options.check.min(1)
        ));
    } else {
        line(format!(
            "# fabprobe {} ring: link scan over {}",
            env!("CARGO_PKG_VERSION"),
            h.transport
        ));
        line(format!("# nRanks {}", h.world));
    }
    if let Some(n) = h.note {
        line(format!("# transport: {n}"));
    }
    line(format!(
        "# launcher: {} (coordinator {} from {}, token from {})",
        h.launcher.source.name(),
        h.launcher.coordinator,
        h.launcher.coordinator_source,
        h.launcher.token_source
    ));
    line("#".into());
    line("# Using devices".into());
    let compact = h.layout != Layout::Nccl;
    for i in h.ranks {
        for l in device_lines(i, compact) {
            line(l);
        }
    }
    if h.ranks.iter().any(|i| !i.rails.is_empty()) && h.options.sweep {
        line(
            "# rails: rail k of every node is one ring, all rails at once; a row sums algbw and busbw over the rails (time: the slowest rail)"
                .into(),
        );
    }
    line("#".into());
    match h.layout {
        _ if !h.options.sweep => {}
        Layout::Nccl => nccl_headings(&mut line),
        Layout::Compact { width } => compact_headings(&mut line, h.first_row, width),
    }
    match h.layout {
        // nccl-tests' header as it prints it, never wrapped: scripts read these lines.
        Layout::Nccl => o,
        Layout::Compact { width } => text::fit_prose_to(&o, Some(width)),
    }
}

/// A rank's `# Using devices` lines: nccl-tests' padded columns, or on a narrow terminal
/// single-spaced (so that they wrap as prose).
fn device_lines(i: &RankInfo, compact: bool) -> Vec<String> {
    let pid = i.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into());
    let who = if compact {
        format!("#  Rank {} Pid {pid} on {}", i.rank, i.host)
    } else {
        format!("#  Rank {:>2} Pid {:>6} on {:>10}", i.rank, pid, i.host)
    };
    let mut out = Vec::new();
    if i.rails.is_empty() {
        out.push(format!(
            "{who} device {} [{}] {}",
            i.device.as_deref().unwrap_or("-"),
            i.address,
            i.transport
        ));
    }
    // `--rails`: one line per rail the rank drives, and the slots it cannot drive.
    for s in &i.rails {
        let what = match (&s.label, s.usable) {
            (Some(l), _) => format!(
                "device {l} [{}] {}",
                s.address.as_deref().unwrap_or("-"),
                i.transport
            ),
            (None, false) => format!(
                "device {}{} not driven ({})",
                s.device,
                s.port.map(|p| format!(":{p}")).unwrap_or_default(),
                s.state.as_deref().unwrap_or("state unknown")
            ),
            (None, true) => continue,
        };
        out.push(format!("{who} rail {} {what}", s.rail));
    }
    out
}

/// nccl-tests' column headings: size, count, type, redop, root, then time, algbw, busbw and
/// #wrong out of place and in place.
fn nccl_headings(line: &mut dyn FnMut(String)) {
    line(format!("#{:>74}{:>31}", "out-of-place", "in-place"));
    line(format!(
        "#{:>11}  {:>12}  {:>8}  {:>6}  {:>6}{}{}",
        "size",
        "count",
        "type",
        "redop",
        "root",
        group("time", "algbw", "busbw", "#wrong"),
        group("time", "algbw", "busbw", "#wrong")
    ));
    line(
        format!(
            "#{:>11}  {:>12}  {:>8}  {:>6}  {:>6}{}{}",
            "(B)",
            "(elements)",
            "",
            "",
            "",
            group("(us)", "(GB/s)", "(GB/s)", ""),
            group("(us)", "(GB/s)", "(GB/s)", "")
        )
        .trim_end()
        .to_string(),
    );
}

/// The compact form's widest layout: one line per size, both placements side by side.
pub(crate) const COMPACT_WIDE: usize = 80;

/// A placement's figures in the compact form: time, algbw, busbw, #wrong.
fn compact_group(t: &str, a: &str, b: &str, w: &str) -> String {
    format!("{t:>7} {a:>6} {b:>6} {w:>6}")
}

/// The compact column headings: type, operation and root once (the same on every row),
/// then the columns, with their units.
fn compact_headings(line: &mut dyn FnMut(String), first: Option<&ResultRow>, width: usize) {
    if let Some(r) = first {
        line(format!(
            "# type {}, redop {}, root {} (the same on every row)",
            r.dtype, r.redop, r.root
        ));
    }
    if width >= COMPACT_WIDE {
        line(format!("#{:>42}{:>29}", "out-of-place", "in-place"));
        let g = compact_group("time", "algbw", "busbw", "#wrong");
        line(format!("#{:>9} {:>10} {g}  {g}", "size", "count"));
        let u = compact_group("(us)", "(GB/s)", "(GB/s)", "");
        line(
            format!("#{:>9} {:>10} {u}  {u}", "(B)", "(elements)")
                .trim_end()
                .to_string(),
        );
    } else {
        line("# place: out = out-of-place, in = in-place".into());
        let g = compact_group("time", "algbw", "busbw", "#wrong");
        line(format!("#{:>9}  {:>10}  {:<5}{g}", "size", "count", "place"));
        let u = compact_group("(us)", "(GB/s)", "(GB/s)", "");
        line(
            format!("#{:>9}  {:>10}  {:<5}{u}", "(B)", "(elements)", "")
                .trim_end()
                .to_string(),
        );
    }
}

/// One size's line, nccl-tests' columns, with its newline.
#[cfg(test)]
pub(crate) fn row_line(row: &ResultRow) -> String {
    row_line_in(row, Layout::Nccl)
}

/// One size's line(s) in `layout`, with a newline each: in the compact form, the same
/// figures as nccl-tests' row but type, redop and root (in the header).
pub(crate) fn row_line_in(row: &ResultRow, layout: Layout) -> String {
    let Layout::Compact { width } = layout else {
        return nccl_row(row);
    };
    let wrong = |w: Option<u64>| w.map(|w| w.to_string()).unwrap_or_else(|| "N/A".into());
    let out = compact_group(
        &fit(row.time_us, 7),
        &fit(row.algbw_gbs, 6),
        &fit(row.busbw_gbs, 6),
        &wrong(row.wrong),
    );
    let inp = match &row.in_place {
        Some(h) => compact_group(
            &fit(h.time_us, 7),
            &fit(h.algbw_gbs, 6),
            &fit(h.busbw_gbs, 6),
            &wrong(h.wrong),
        ),
        None => compact_group("N/A", "N/A", "N/A", "N/A"),
    };
    if width >= COMPACT_WIDE {
        format!("{:>10} {:>10} {out}  {inp}\n", row.size_bytes, row.count)
    } else {
        format!(
            "{:>10}  {:>10}  {:<5}{out}\n{:>22}  {:<5}{inp}\n",
            row.size_bytes, row.count, "out", "", "in"
        )
    }
}

/// One size's line in nccl-tests' columns.
fn nccl_row(row: &ResultRow) -> String {
    let wrong = |w: Option<u64>| w.map(|w| w.to_string()).unwrap_or_else(|| "N/A".into());
    let in_place = match &row.in_place {
        Some(h) => group(
            &fit(h.time_us, 7),
            &fit(h.algbw_gbs, 6),
            &fit(h.busbw_gbs, 6),
            &wrong(h.wrong),
        ),
        // A rank did not report the in-place half.
        None => group("N/A", "N/A", "N/A", "N/A"),
    };
    format!(
        "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}{}{in_place}\n",
        row.size_bytes,
        row.count,
        row.dtype,
        row.redop,
        row.root,
        group(
            &fit(row.time_us, 7),
            &fit(row.algbw_gbs, 6),
            &fit(row.busbw_gbs, 6),
            &wrong(row.wrong)
        ),
    )
}

/// After the rows: bus bandwidth, links, the scan, counters, and why the run ended early
/// (`verdict_at`: whether the verdicts print above or below this; `width`: the terminal's).
fn tail(o: &mut String, r: &RingReport, verdict_at: &str, width: Option<usize>) {
    let mut line = |s: String| {
        o.push_str(&s);
        o.push('\n');
    };
    if r.options.sweep {
        sweep_totals(&mut line, r);
    }
    rails_busbw(&mut line, r);
    if !r.links.is_empty() {
        per_link(&mut line, r, width);
    }
    if let Some(sc) = &r.scan {
        scan_table(&mut line, sc, r.world, width);
    }
    for (k, sc) in r
        .rails
        .iter()
        .filter_map(|x| x.scan.as_ref().map(|s| (x.rail, s)))
    {
        line(format!("# Rail {k}:"));
        scan_table(&mut line, sc, r.world, width);
    }
    if !r.port_counters.is_empty() {
        port_counters(&mut line, r);
    }
    if let Some(e) = &r.error {
        let said: Vec<&str> = r.verdicts.iter().map(|v| v.message.as_str()).collect();
        if !said.is_empty() && *e == said.join("; ") {
            line(format!(
                "# ERROR: the run ended early on the verdict {verdict_at}"
            ));
        } else {
            line(format!("# ERROR: the run ended early: {e}"));
        }
    }
}

/// nccl-tests' closing lines of a sweep: rows out of bounds, average bus bandwidth.
fn sweep_totals(line: &mut dyn FnMut(String), r: &RingReport) {
    let bad_rows = r
        .results
        .iter()
        .filter(|x| x.wrong.unwrap_or(0) + x.in_place.as_ref().and_then(|h| h.wrong).unwrap_or(0) > 0)
        .count();
    line(format!(
        "# Out of bounds values : {bad_rows} {}",
        if bad_rows == 0 { "OK" } else { "FAILED" }
    ));
    line(format!(
        "# Avg bus bandwidth    : {}",
        r.avg_busbw_gbs.map(|b| fit(b, 6)).unwrap_or_else(|| "N/A".into())
    ));
    line("#".into());
}

/// Each ring hop's rate at the largest size, measured at its receiver.
fn per_link(line: &mut dyn FnMut(String), r: &RingReport, width: Option<usize>) {
    let size = r.links[0].size_bytes;
    line(format!(
        "# Per-link bandwidth (each ring hop, measured at its receiver over {} channel(s), at {size} B):",
        r.links[0].channel_count
    ));
    let end = |l: &crate::ring::report::LinkRow, from: bool| {
        let rail = l.rail.map(|k| format!("rail {k} ")).unwrap_or_default();
        let (rank, host, dev) = if from {
            (l.from_rank, &l.from_host, &l.from_device)
        } else {
            (l.to_rank, &l.to_host, &l.to_device)
        };
        match dev {
            Some(d) => format!("{rail}rank {rank} ({host}, {d})"),
            None => format!("{rail}rank {rank} ({host})"),
        }
    };
    // 32 columns a side as always, or on a terminal only as wide as the names.
    let side = match width {
        Some(_) => r
            .links
            .iter()
            .flat_map(|l| [end(l, true), end(l, false)])
            .map(|s| s.chars().count())
            .max()
            .unwrap_or(0)
            .max(4),
        None => 32,
    };
    line(format!("#  {:<side$}  {:<side$}  {:>11}", "from", "to", "rate"));
    for l in &r.links {
        line(format!(
            "   {:<side$}  {:<side$}  {:>11}",
            end(l, true),
            end(l, false),
            text::rate_cell(l.gbs)
        ));
    }
    line("#".into());
}

/// The port counters that moved during the run, as each rank reported them.
fn port_counters(line: &mut dyn FnMut(String), r: &RingReport) {
    line("# Port counters that moved during the run (this rank's data NIC):".into());
    for m in &r.port_counters {
        line(format!(
            "#  rank {} ({}) {}: {} +{}",
            m.rank,
            m.host,
            m.port_label(),
            m.counter,
            m.delta
        ));
    }
    line("#".into());
}

/// `--rails`: each rail's own bus bandwidth (the rows sum them).
fn rails_busbw(line: &mut dyn FnMut(String), r: &RingReport) {
    if r.rails.is_empty() || !r.options.sweep {
        return;
    }
    line("# Per-rail bus bandwidth (each rail's own ring; the rows above sum them):".into());
    for x in &r.rails {
        let last = x.results.last();
        let text = match (x.avg_busbw_gbs, last) {
            (Some(avg), Some(row)) => format!(
                "avg {} GB/s; at {} B {} GB/s out of place, {} in place",
                fit(avg, 6),
                row.size_bytes,
                fit(row.busbw_gbs, 6),
                row.in_place
                    .as_ref()
                    .map(|h| format!("{} GB/s", fit(h.busbw_gbs, 6)))
                    .unwrap_or_else(|| "N/A".into())
            ),
            _ => "no results".into(),
        };
        // A rail some node lacks ran on the others: say which.
        let on = if !x.nodes.is_empty() && (x.nodes.len() as u32) < r.world {
            let ranks: Vec<String> = x.nodes.iter().map(|n| n.to_string()).collect();
            format!(" (on ranks {} of {})", ranks.join(", "), r.world)
        } else {
            String::new()
        };
        match (&x.not_tested, &x.error) {
            (Some(why), _) => line(format!("#  rail {}: {why}", x.rail)),
            (None, Some(e)) => line(format!("#  rail {}{on}: {text}; ended early: {e}", x.rail)),
            (None, None) => line(format!("#  rail {}{on}: {text}", x.rail)),
        }
    }
    line("#".into());
}

/// The link scan: every directed link's median over its samples, measured at its receiver;
/// a sender x receiver matrix up to [`MATRIX_MAX`] ranks, a list beyond. `width`: the
/// terminal's, if known.
fn scan_table(line: &mut dyn FnMut(String), sc: &ScanReport, world: u32, width: Option<usize>) {
    let names: Vec<String> = sc
        .orders
        .iter()
        .map(|o| format!("{}{}", o.name, if o.recheck { " (re-check)" } else { "" }))
        .collect();
    line(format!(
        "# Link scan: {} order(s) [{}], {} x {} B per link and order, {:.1} s; median link {}; {} of {} links measured",
        sc.orders.len(),
        names.join(", "),
        sc.reps,
        sc.bytes,
        sc.seconds,
        sc.median_gbs.map(text::rate).unwrap_or_else(|| "N/A".into()),
        sc.links_total.saturating_sub(sc.unmeasured.len()),
        sc.links_total
    ));
    if !sc.line_rate_gbs.is_empty() {
        let rates: Vec<String> = sc
            .line_rate_gbs
            .iter()
            .map(|(r, g)| format!("rank {r} {}", text::rate(*g)))
            .collect();
        line(format!("# Line rates: {}", rates.join(", ")));
    }
    if world as usize <= MATRIX_MAX && !sc.links.is_empty() {
        scan_matrix(line, sc, world, width);
    } else {
        scan_list(line, sc);
    }
    let confirm = sc.orders.iter().filter(|o| o.recheck).count();
    if confirm > 0 {
        line(format!(
            "# Confirmation: {confirm} order(s) after the plan (new partners, re-runs, new connections), {:.1} s",
            sc.confirm_s
        ));
    }
    for c in &sc.cleared_by_recheck {
        line(format!("# cleared by the re-check (a transient): {c}"));
    }
    line("#".into());
}

/// The most ranks whose scan prints as a matrix (16 columns of 8 fit 132 columns).
pub(crate) const MATRIX_MAX: usize = 16;

/// A link's rate in a matrix cell, GB/s with three significant figures at most.
fn cell(gbs: f64) -> String {
    if gbs >= 100.0 {
        format!("{gbs:.0}")
    } else if gbs >= 10.0 {
        format!("{gbs:.1}")
    } else if gbs >= 0.1 {
        format!("{gbs:.2}")
    } else if gbs >= 0.001 {
        format!("{gbs:.3}")
    } else {
        format!("{gbs:.0e}")
    }
}

/// Rows are senders, columns receivers; `-` the diagonal, `.` a link no scan order measured,
/// `*` a link a verdict names. On a terminal narrower than the matrix the receivers come in
/// blocks that fit, each block with every sender's row (a wrapped matrix row is unreadable).
fn scan_matrix(line: &mut dyn FnMut(String), sc: &ScanReport, world: u32, width: Option<usize>) {
    let mut host: Vec<String> = vec![String::new(); world as usize];
    for l in &sc.links {
        for (r, h) in [(l.from_rank, &l.from_host), (l.to_rank, &l.to_host)] {
            if let Some(x) = host.get_mut(r as usize) {
                *x = h.clone();
            }
        }
    }
    let labels: Vec<String> = (0..world)
        .map(|r| format!("{r} {}", host[r as usize]).trim_end().to_string())
        .collect();
    let w = labels
        .iter()
        .map(String::len)
        .max()
        .unwrap_or(0)
        .max("from \\ to".len());
    line("# GB/s, sender (row) -> receiver (column), each link's median; * slow, . not measured".into());
    let receivers: Vec<u32> = (0..world).collect();
    // A row is 3 + w columns of label, then 8 per cell.
    let per = width
        .map_or(receivers.len(), |wd| wd.saturating_sub(3 + w) / 8)
        .max(1);
    for block in receivers.chunks(per) {
        matrix_block(line, sc, (&labels, w), block);
    }
}

/// One block of receivers of [`scan_matrix`]: the heading and every sender's row.
fn matrix_block(
    line: &mut dyn FnMut(String),
    sc: &ScanReport,
    (labels, w): (&[String], usize),
    block: &[u32],
) {
    let cols: String = block.iter().map(|r| format!("{r:>7} ")).collect();
    line(format!("#  {:<w$}{cols}", "from \\ to").trim_end().to_string());
    for (f, label) in labels.iter().enumerate() {
        let cells: String = block
            .iter()
            .map(|&t| {
                let c = if t as usize == f {
                    "-".to_string()
                } else {
                    match sc
                        .links
                        .iter()
                        .find(|l| l.from_rank as usize == f && l.to_rank == t)
                    {
                        Some(l) => format!("{}{}", cell(l.gbs), if l.slow { "*" } else { " " }),
                        None => ". ".to_string(),
                    }
                };
                // Right-aligned numbers, the marker in the last column of the cell.
                if c == "-" {
                    format!("{:>7} ", c)
                } else {
                    format!("{c:>8}")
                }
            })
            .collect();
        line(format!("   {label:<w$}{cells}").trim_end().to_string());
    }
}

/// Beyond [`MATRIX_MAX`] ranks: one line per link.
fn scan_list(line: &mut dyn FnMut(String), sc: &ScanReport) {
    line(format!(
        "#  {:<24}  {:<24}  {:>11}  {:>7}",
        "from", "to", "rate", "samples"
    ));
    for l in &sc.links {
        line(
            format!(
                "   {:<24}  {:<24}  {:>11}  {:>7}  {}",
                format!("rank {} ({})", l.from_rank, l.from_host),
                format!("rank {} ({})", l.to_rank, l.to_host),
                text::rate_cell(l.gbs),
                l.samples,
                if l.slow { "SLOW" } else { "" }
            )
            .trim_end()
            .to_string(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::coordinator::Event;
    use crate::ring::launcher::Source;
    use crate::ring::model::RankInfo;
    use crate::ring::report::{InPlaceRow, LauncherInfo, LinkRow, ResultRow, RingReport};
    use crate::ring::run::Options;

    fn report() -> RingReport {
        let host = |r: u32| ["node-a", "node-b", "node-c", "node-d"][r as usize].to_string();
        let row = |size: u64, time_us: f64, wrong| {
            let alg = size as f64 / time_us / 1e3;
            // In place a little faster, as on real hardware (no separate output to touch).
            let ip_us = time_us * 0.96;
            let ip_alg = size as f64 / ip_us / 1e3;
            ResultRow {
                size_bytes: size,
                count: size / 4,
                dtype: "float",
                redop: "sum",
                root: -1,
                time_us,
                algbw_gbs: alg,
                busbw_gbs: alg * 1.5,
                wrong,
                in_place: Some(InPlaceRow {
                    time_us: ip_us,
                    algbw_gbs: ip_alg,
                    busbw_gbs: ip_alg * 1.5,
                    wrong,
                }),
            }
        };
        RingReport {
            rails: Vec::new(),
            world: 4,
            transport: "tcp".into(),
            transport_note: None,
            launcher: LauncherInfo {
                source: Source::Slurm,
                coordinator: "node-a:29517".into(),
                coordinator_source: "the first host of SLURM_JOB_NODELIST".into(),
                token_source: "SLURM_JOB_ID".into(),
            },
            options: Options {
                sizes: vec![1 << 20, 64 << 20],
                iters: 20,
                warmup: 1,
                check: 1,
                channels: 2,
                timeout_secs: 30,
                join_timeout_secs: 30,
                slots: 4,
                slot_bytes: 1 << 20,
                scan: None,
                sweep: true,
            },
            ranks: (0..4)
                .map(|r| RankInfo {
                    neighbor: None,
                    port_max: None,
                    rails: Vec::new(),
                    node: None,
                    capabilities: Vec::new(),
                    rank: r,
                    host: host(r),
                    address: format!("198.19.0.{}:4000{r}", 10 + r),
                    device: Some("eth1".into()),
                    transport: "tcp".into(),
                    pid: Some(1000 + r),
                })
                .collect(),
            results: vec![row(1 << 20, 13_000.0, Some(0)), row(64 << 20, 807_000.0, Some(0))],
            avg_busbw_gbs: Some(0.1208),
            links: (0..4)
                .map(|r| LinkRow {
                    rail: None,
                    channel_count: 2,
                    from_rank: r,
                    to_rank: (r + 1) % 4,
                    from_host: host(r),
                    to_host: host((r + 1) % 4),
                    from_device: Some("eth1".into()),
                    to_device: Some("eth1".into()),
                    size_bytes: 64 << 20,
                    bytes: 503_316_480,
                    seconds: 4.035,
                    gbs: 0.1247,
                })
                .collect(),
            bootstrap_us: 5400,
            events: vec![Event::Rejected {
                peer: "198.18.0.99:5555".into(),
                reason: "wrong token".into(),
            }],
            scan: None,
            verdicts: vec![],
            not_judged: vec![],
            error: None,
            port_counters: vec![],
        }
    }

    /// A rail no ring ran on is said in the outcome line and in its own line, and the rail
    /// count is the job's rails (words compared whole: a narrow terminal wraps the lines).
    /// A carrier change is the netdev's own counter: `eth1`, as every report names a
    /// port, never `eth1 port 0`; an RDMA port keeps its number and netdev.
    #[test]
    fn a_carrier_change_names_the_netdev_as_every_port_is_named() {
        let mut r = report();
        let mv = |device: &str, port: u32, counter: &str| crate::ring::model::CounterMove {
            rank: 2,
            host: "node-c".into(),
            device: device.into(),
            port,
            netdev: Some("eth1".into()),
            counter: counter.into(),
            delta: 2,
        };
        r.port_counters = vec![mv("eth1", 0, "carrier_changes"), mv("mlx5_0", 1, "symbol_error")];
        let text = table(&r);
        assert!(
            text.contains("#  rank 2 (node-c) eth1: carrier_changes +2\n"),
            "{text}"
        );
        assert!(
            text.contains("#  rank 2 (node-c) mlx5_0 port 1 (eth1): symbol_error +2\n"),
            "{text}"
        );
        assert!(!text.contains("port 0"), "{text}");
    }

    #[test]
    fn a_rail_not_tested_is_said_never_counted() {
        use crate::ring::report::RailReport;
        let mut r = report();
        r.options.sweep = true;
        let rail = |rail: u32, not_tested: Option<&str>| RailReport {
            rail,
            nodes: if not_tested.is_some() {
                vec![3]
            } else {
                vec![0, 1, 2, 3]
            },
            transport: "tcp".into(),
            results: Vec::new(),
            avg_busbw_gbs: None,
            scan: None,
            error: None,
            not_tested: not_tested.map(str::to_string),
        };
        let why = "rail 2 not tested: only 1 of 4 nodes has it (rank 3 (node-d)), fewer than half";
        r.rails = vec![rail(0, None), rail(1, None), rail(2, Some(why))];
        let text = table(&r).split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(text.contains("; NOT TESTED: rail 2 not tested: only"), "{text}");
        assert!(text.contains("4 ranks x 2 rails"), "{text}");
        assert!(text.contains("# rail 2: rail 2 not tested"), "{text}");
    }

    #[test]
    fn whole_table() {
        insta::assert_snapshot!(table(&report()));
    }

    /// A scan of 4 ranks in two orders (shift 1 and 2): 8 of the 12 directed links, the
    /// link `slow` (if any) at 30% of the others and marked as a verdict names it.
    fn scan(slow: Option<(u32, u32)>) -> crate::ring::diagnosis::driver::ScanReport {
        use crate::ring::diagnosis::driver::{OrderRun, ScanLink, ScanReport, Unmeasured};
        let link = |f: u32, t: u32| {
            let is_slow = slow == Some((f, t));
            ScanLink {
                from_rank: f,
                to_rank: t,
                from_host: format!("node-{}", (b'a' + f as u8) as char),
                to_host: format!("node-{}", (b'a' + t as u8) as char),
                gbs: if is_slow { 0.037 } else { 0.124 - 0.001 * f as f64 },
                samples: 3,
                line_rate_gbs: None,
                slow: is_slow,
            }
        };
        let order = |index: u32, shift: u32, recheck: bool| OrderRun {
            index,
            shift,
            name: if shift == 1 {
                "natural".into()
            } else {
                format!("shift+{shift}")
            },
            recheck,
            seconds: 0.4,
        };
        ScanReport {
            bytes: 4 << 20,
            reps: 3,
            budget_s: 3.0,
            seconds: 1.25,
            orders: vec![order(0, 1, false), order(1, 2, false)],
            line_rate_gbs: Default::default(),
            median_gbs: Some(0.124),
            links: (0..4)
                .flat_map(|f| [1, 2].map(|k| link(f, (f + k) % 4)))
                .collect(),
            fabric_slow: None,
            not_judged: vec![],
            unconfirmed: vec![],
            confirm_s: 0.0,
            typical_order_s: Some(0.4),
            links_total: 12,
            // Shift 3's links: the budget ended the plan before it.
            unmeasured: (0..4)
                .map(|f| Unmeasured {
                    from_rank: f,
                    to_rank: (f + 3) % 4,
                    from_host: format!("node-{}", (b'a' + f as u8) as char),
                    to_host: format!("node-{}", (b'a' + ((f + 3) % 4) as u8) as char),
                    reason: "budget",
                })
                .collect(),
            confirm_cut_orders: 0,
            verdicts: vec![],
            cleared_by_recheck: vec![],
            cpu_bound: Default::default(),
            stalls: vec![],
        }
    }

    fn slow_link_verdict() -> crate::ring::model::Verdict {
        use crate::ring::model::{Verdict, VerdictKind};
        Verdict {
            rail: None,
            kind: VerdictKind::SlowLink,
            from_rank: Some(1),
            to_rank: Some(3),
            from_host: Some("node-b".into()),
            to_host: Some("node-d".into()),
            evidence: [("gbs".to_string(), serde_json::json!(0.037))].into_iter().collect(),
            message: "SLOW LINK rank 1 (node-b, eth1) -> rank 3 (node-d, eth1): 37 MB/s, 30% of the median 0.12 GB/s"
                .into(),
            next: Some("on node-b and node-d: fabprobe links (port errors, retransmissions, PFC pauses)".into()),
        }
    }

    #[test]
    fn scan_only_with_a_verdict() {
        let mut r = report();
        r.options.sweep = false;
        r.results.clear();
        r.links.clear();
        r.avg_busbw_gbs = None;
        r.verdicts = vec![slow_link_verdict()];
        r.scan = Some(scan(Some((1, 3))));
        let t = table(&r);
        assert!(
            t.starts_with("SLOW LINK rank 1 (node-b, eth1) -> rank 3 (node-d, eth1): "),
            "{t}"
        );
        insta::assert_snapshot!(t);
    }

    /// Where LLDP named the switch port at an end, a line under the verdict quotes it
    /// (`node-b eth1 <-> leaf-07 Eth1/12`); an end with none is not guessed.
    #[test]
    fn switch_ports_under_a_verdict() {
        let mut r = report();
        r.ranks[1].neighbor = Some(crate::ring::model::Neighbor {
            system_name: Some("leaf-07".into()),
            chassis_id: None,
            port_id: Some("Eth1/12".into()),
            port_description: None,
            source: "lldpd".into(),
        });
        r.verdicts = vec![slow_link_verdict()];
        crate::ring::diagnosis::neighbor::attach(&mut r.verdicts, &r.ranks);
        let t = table(&r);
        let lines: Vec<&str> = t.lines().take(3).collect();
        assert_eq!(lines[1], "  action: ticket", "{t}");
        assert_eq!(lines[2], "  switch port: node-b eth1 <-> leaf-07 Eth1/12", "{t}");
    }

    /// Healthy: one line with the figures first, then the table; the matrix has every scanned
    /// link in its sender's row and receiver's column.
    #[test]
    fn healthy_with_scan() {
        let mut r = report();
        r.scan = Some(scan(None));
        let t = table(&r);
        let lines: Vec<&str> = t.lines().take(2).collect();
        // The links the budget left out first, then a pass that says what it covers.
        assert_eq!(
            lines,
            [
                "NOT MEASURED: 4 of 12 links, no verdict on them (--scan-time 3 s ended the plan before their \
                 orders): rank 0 (node-a) -> rank 3 (node-d), rank 1 (node-b) -> rank 0 (node-a), rank 2 (node-c) \
                 -> rank 1 (node-b), rank 3 (node-d) -> rank 2 (node-c)",
                "no slow link, no hang: 4 ranks over tcp, 2 size(s), avg busbw 0.12 GB/s, scan median link 0.12 \
                 GB/s, slowest link rank 3 (node-d) -> rank 0 (node-a) 0.12 GB/s, 8 of 12 links measured"
            ],
            "{t}"
        );
        // Every link measured: no NOT MEASURED line, and the pass says 12 of 12.
        let mut all = scan(None);
        all.unmeasured.clear();
        r.scan = Some(all);
        let t = table(&r);
        assert!(
            t.lines().next().unwrap().ends_with(", 12 of 12 links measured"),
            "{t}"
        );
        assert!(!t.contains("NOT MEASURED"), "{t}");
        r.scan = Some(scan(None));
        let t = table(&r);
        let row = t
            .lines()
            .find(|l| l.starts_with("   2 node-c"))
            .unwrap_or_else(|| panic!("{t}"));
        // Rank 2 sends to 3 and 0 (shifts 1 and 2), not to 1.
        let cells: Vec<&str> = row["   2 node-c".len()..].split_whitespace().collect();
        assert_eq!(cells, ["0.12", ".", "-", "0.12"], "{t}");
        assert!(!t.lines().any(|l| l.starts_with("   ") && l.contains('*')), "{t}");
        insta::assert_snapshot!(t);
    }

    /// A slow figure the host's CPU wait explains: said as not judged with its next step,
    /// and the closing line does not claim "no slow link".
    #[test]
    fn not_judged_is_neither_a_verdict_nor_healthy() {
        let mut r = report();
        let mut sc = scan(None);
        let mut v = slow_link_verdict();
        v.message = format!(
            "NOT JUDGED (CPU-bound host): {}; but rank 3 (node-d, eth1) waited",
            v.message
        );
        v.next = Some(
            "see what else runs on node-d (top; /proc/pressure/cpu) and scan again when it is idle".into(),
        );
        sc.not_judged = vec![v];
        r.scan = Some(sc);
        let t = table(&r);
        let lines: Vec<&str> = t.lines().take(3).collect();
        assert!(
            lines[0].starts_with("NOT JUDGED (CPU-bound host): SLOW LINK rank 1 "),
            "{t}"
        );
        assert!(
            lines[1].starts_with("  next: see what else runs on node-d"),
            "{t}"
        );
        assert!(lines[2].starts_with("NOT MEASURED: 4 of 12 links"), "{t}");
        let last = t.lines().nth(3).unwrap();
        assert!(
            last.starts_with("no hang; 1 slow figure(s) not judged (CPU-bound hosts, above), so no verdict on those links: 4 ranks"),
            "{t}"
        );
        assert!(!t.contains("no slow link"), "{t}");
    }

    /// A slow link found by the scan before the sweep: the verdict first, the cell marked.
    #[test]
    fn slow_link_with_sweep() {
        let mut r = report();
        r.verdicts = vec![slow_link_verdict()];
        r.scan = Some(scan(Some((1, 3))));
        let t = table(&r);
        assert!(t.starts_with("SLOW LINK rank 1 "), "{t}");
        assert!(!t.contains("no slow link"), "{t}");
        let row = t
            .lines()
            .find(|l| l.starts_with("   1 node-b"))
            .unwrap_or_else(|| panic!("{t}"));
        assert!(row.ends_with("0.037*"), "{row}");
        insta::assert_snapshot!(t);
    }

    /// A hang: the verdict and its next step first, the partial table, the error line last.
    #[test]
    fn hang() {
        use crate::ring::model::{Verdict, VerdictKind};
        let mut r = report();
        r.results.truncate(1);
        r.links.clear();
        let v = Verdict {
            rail: None,
            kind: VerdictKind::HangLink,
            from_rank: Some(2),
            to_rank: Some(3),
            from_host: Some("node-c".into()),
            to_host: Some("node-d".into()),
            evidence: [("waited_ms".to_string(), serde_json::json!(31000))]
                .into_iter()
                .collect(),
            message:
                "HANG rank 3 (node-d) waits for data from rank 2 (node-c) since step 2 of reduce-scatter; \
                      rank 2 sent it and is blocked sending more: suspect the link node-c -> node-d"
                    .into(),
            next: Some(
                "on node-c and node-d: fabprobe links (port state, error counters); check the data path \
                 node-c (eth1) -> node-d (eth1): firewall rules on the data interface, the switch port, \
                 `ping -I eth1 198.19.0.13` from node-c"
                    .into(),
            ),
        };
        r.error = Some(v.message.clone());
        r.verdicts = vec![v];
        let t = table(&r);
        assert!(t.starts_with("HANG rank 3 (node-d) waits"), "{t}");
        assert!(
            t.ends_with("# ERROR: the run ended early on the verdict above\n"),
            "{t}"
        );
        insta::assert_snapshot!(t);
    }

    /// Rows already streamed: the rest of the table, then the verdict or the healthy line last.
    #[test]
    fn streamed_rows_end_with_the_outcome() {
        let r = report();
        let shown: Vec<u64> = r.results.iter().map(|x| x.size_bytes).collect();
        let t = table_after_rows(&r, &shown);
        assert!(!t.contains("     1048576  "), "a shown row again: {t}");
        assert!(
            t.trim_end()
                .lines()
                .last()
                .unwrap()
                .starts_with("no slow link, no hang: 4 ranks"),
            "{t}"
        );
        let mut r = report();
        r.verdicts = vec![slow_link_verdict()];
        let t = table_after_rows(&r, &shown);
        assert!(
            t.contains("\nSLOW LINK rank 1 ") && !t.contains("no slow link"),
            "{t}"
        );
    }

    /// No verdict but an early end or wrong sums: never the healthy line.
    #[test]
    fn no_verdict_but_not_healthy() {
        let mut r = report();
        r.error = Some("rank 2 (node-c) closed its control connection".into());
        assert!(table(&r).starts_with("RUN ENDED EARLY with no verdict: rank 2 (node-c) closed"));
        let mut r = report();
        r.results[1].wrong = Some(3);
        let t = table(&r);
        assert!(
            t.starts_with("WRONG RESULTS: 3 element(s) differ from the expected sum at 67108864 B"),
            "{t}"
        );
    }

    #[test]
    fn matrix_cells_and_list_beyond_sixteen() {
        assert_eq!(
            [cell(123.4), cell(23.46), cell(1.234), cell(0.037), cell(0.0004)],
            ["123", "23.5", "1.23", "0.037", "4e-4"]
        );
        let mut o = String::new();
        let mut line = |s: String| {
            o.push_str(&s);
            o.push('\n');
        };
        scan_table(&mut line, &scan(Some((1, 3))), 17, None);
        assert!(
            o.contains("   rank 1 (node-b)           rank 3 (node-d)           37.000 MB/s        3  SLOW"),
            "{o}"
        );
    }

    /// Issue 21: 16 ranks' matrix (135 columns) on an 80- or 60-column terminal comes in
    /// blocks of receivers; every line fits, and every link's cell is printed once.
    #[test]
    fn a_wide_scan_matrix_comes_in_blocks_of_receivers() {
        let mut sc = scan(Some((1, 3)));
        let one = sc.links[0].clone();
        sc.links = (0..16u32)
            .flat_map(|f| (0..16u32).filter(move |&t| t != f).map(move |t| (f, t)))
            .map(|(f, t)| crate::ring::diagnosis::driver::ScanLink {
                from_rank: f,
                to_rank: t,
                from_host: format!("node-{f:02}"),
                to_host: format!("node-{t:02}"),
                gbs: 10.0 + f as f64 + t as f64 / 100.0,
                slow: (f, t) == (1, 3),
                ..one.clone()
            })
            .collect();
        let render = |width: Option<usize>| {
            let mut o = String::new();
            scan_table(&mut |s: String| o.push_str(&(s + "\n")), &sc, 16, width);
            o
        };
        let cells = |o: &str| {
            let mut v: Vec<String> = o
                .lines()
                .filter(|l| l.starts_with("   "))
                .flat_map(|l| {
                    l.split_whitespace()
                        .skip(2)
                        .map(str::to_string)
                        .collect::<Vec<_>>()
                })
                .filter(|c| c != "-")
                .collect();
            v.sort();
            v
        };
        let wide = render(None);
        assert_eq!(cells(&wide).len(), 240, "{wide}");
        assert!(wide.contains("11.0*"), "{wide}");
        for width in [80, 60] {
            let o = render(Some(width));
            let over: Vec<&str> = o
                .lines()
                .filter(|l| l.starts_with("   ") && l.len() > width)
                .collect();
            assert!(over.is_empty(), "{width}: {over:?}\n{o}");
            assert_eq!(cells(&o), cells(&wide), "{o}");
            assert!(o.matches("#  from \\ to").count() > 1, "{o}");
        }
    }

    #[test]
    fn na_when_not_checked_and_error_line() {
        let mut r = report();
        r.results.iter_mut().for_each(|x| {
            x.wrong = None;
            if let Some(h) = x.in_place.as_mut() {
                h.wrong = None;
            }
        });
        r.error = Some("rank 2 (node-c) closed its control connection".into());
        let t = table(&r);
        // Both halves say N/A.
        assert!(t.contains("     N/A  "), "{t}");
        assert!(t.contains("    N/A\n"), "{t}");
        assert!(
            t.ends_with("# ERROR: the run ended early: rank 2 (node-c) closed its control connection\n"),
            "{t}"
        );
    }

    /// The header lines and a row against the nccl-tests sample in the reference facts
    /// (its time column printed with %.2f, as `fit` squeezes).
    #[test]
    fn header_and_row_line_up_with_nccl_tests() {
        let mut r = report();
        r.results = vec![ResultRow {
            size_bytes: 1048576,
            count: 262144,
            dtype: "float",
            redop: "sum",
            root: -1,
            time_us: 354.9,
            algbw_gbs: 2.95,
            busbw_gbs: 5.76,
            wrong: Some(0),
            in_place: Some(InPlaceRow {
                time_us: 345.7,
                algbw_gbs: 3.03,
                busbw_gbs: 5.92,
                wrong: Some(0),
            }),
        }];
        r.avg_busbw_gbs = crate::ring::report::avg_busbw(&r.results);
        let t = table(&r);
        let want = [
            "#                                                              out-of-place                       in-place",
            "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong",
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)",
            "     1048576        262144     float     sum      -1   354.90    2.95    5.76       0   345.70    3.03    5.92       0",
            "# Out of bounds values : 0 OK",
            "# Avg bus bandwidth    : 5.84",
        ];
        let lines: Vec<&str> = t.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.contains("out-of-place"))
            .unwrap_or_else(|| panic!("{t}"));
        assert_eq!(lines[at..at + want.len()], want, "{t}");
    }

    /// The figures of a size's nccl-tests row but type, redop and root, in order.
    fn figures(row: &ResultRow) -> Vec<String> {
        let line = row_line(row);
        let w: Vec<&str> = line.split_whitespace().collect();
        w[..2].iter().chain(&w[5..]).map(|x| x.to_string()).collect()
    }

    /// On a narrow terminal every figure of every row is still there (two lines per size
    /// below 80 columns), the header names type, redop and root once, and every line fits.
    #[test]
    fn compact_rows_keep_every_figure_and_fit() {
        let mut r = report();
        r.results[1].in_place.as_mut().unwrap().wrong = None;
        r.results[0].wrong = Some(3);
        for (width, lines_per_row) in [(80, 1), (79, 2), (60, 2)] {
            let t = table_in(&r, Layout::Compact { width });
            for l in t.lines() {
                assert!(l.chars().count() <= width, "{width}: {l}\n{t}");
            }
            assert!(t.contains("# type float, redop sum, root -1"), "{t}");
            assert!(!t.contains("float     sum"), "{t}");
            for row in &r.results {
                // The rows, after the column headings (a wrapped verdict may name a size).
                let lines: Vec<&str> = t.lines().skip_while(|l| !l.contains("#wrong")).collect();
                let at = lines
                    .iter()
                    .position(|l| l.split_whitespace().next() == Some(&row.size_bytes.to_string()))
                    .unwrap_or_else(|| panic!("{width}: no row for {}\n{t}", row.size_bytes));
                let got: Vec<String> = lines[at..at + lines_per_row]
                    .iter()
                    .flat_map(|l| l.split_whitespace())
                    .filter(|w| !matches!(*w, "out" | "in"))
                    .map(String::from)
                    .collect();
                assert_eq!(got, figures(row), "{width}:\n{t}");
            }
            // Units stay with their columns.
            for u in ["(B)", "(elements)", "(us)", "(GB/s)", "#wrong"] {
                assert!(t.contains(u), "{width}: {u}\n{t}");
            }
        }
    }

    /// The columns of the compact form line up with its headings: each figure ends where
    /// its heading ends.
    #[test]
    fn compact_columns_line_up() {
        let r = report();
        for width in [80, 60] {
            let t = table_in(&r, Layout::Compact { width });
            let lines: Vec<&str> = t.lines().collect();
            let head = lines.iter().find(|l| l.contains("#wrong")).unwrap();
            let row = lines
                .iter()
                .find(|l| l.trim_start().starts_with("1048576"))
                .unwrap();
            let ends = |l: &str| -> Vec<usize> {
                let b = l.as_bytes();
                (0..b.len())
                    .filter(|&i| b[i] != b' ' && b.get(i + 1).is_none_or(|c| *c == b' '))
                    .collect()
            };
            let (h, v) = (ends(head), ends(row));
            // The heading's first word is the comment mark; "place" is left-aligned.
            let h: Vec<usize> = h.into_iter().skip(1).collect();
            let v: Vec<usize> = v.into_iter().collect();
            let (h, v) = if width < COMPACT_WIDE {
                ([&h[..2], &h[3..]].concat(), [&v[..2], &v[3..]].concat())
            } else {
                (h, v)
            };
            assert_eq!(h, v, "{width}:\n{head}\n{row}");
        }
    }

    /// A terminal as wide as nccl-tests' rows, or any pipe, gets nccl-tests' columns.
    #[test]
    fn compact_only_on_a_narrow_terminal() {
        assert_eq!(Layout::pick(Some(80), true), Layout::Compact { width: 80 });
        assert_eq!(Layout::pick(Some(80), false), Layout::Nccl);
        assert_eq!(Layout::pick(Some(NCCL_WIDTH), true), Layout::Nccl);
        assert_eq!(Layout::pick(None, true), Layout::Nccl);
        let r = report();
        assert_eq!(table_in(&r, Layout::Nccl), table(&r));
        let row = row_line(&r.results[0]);
        assert_eq!(row.trim_end().chars().count(), NCCL_WIDTH, "{row}");
    }

    #[test]
    fn in_place_wrong_fails_the_row() {
        let mut r = report();
        r.results[1].in_place.as_mut().unwrap().wrong = Some(7);
        let t = table(&r);
        assert!(t.contains("# Out of bounds values : 1 FAILED\n"), "{t}");
        assert_eq!(r.wrong_total(), 7);
        assert!(r.failed());
    }

    #[test]
    fn squeezes_like_nccl_tests() {
        assert_eq!(fit(354.9, 7), "354.90");
        assert_eq!(fit(123456.78, 7), "123457");
        assert_eq!(fit(5.76, 6), "5.76");
        assert_eq!(fit(12345.6, 6), "12346");
        assert_eq!(fit(12345678.0, 6), "1e7");
    }
}
