//! A `fabprobe.ring` report as a page section: the verdicts first (the text report's own
//! words), the scan's sender x receiver matrix as a heatmap with each verdict's cells
//! outlined, busbw against size with the line rate and the scan's median link drawn, each
//! rail's own when `--rails` ran, and the hops table.

use std::collections::BTreeMap;

use maud::{Markup, html};
use serde::Deserialize;
use serde_json::Value;

use super::svg::{fraction_colour, num, size_label, ticks};
use super::{Envelope, HtmlError};
use crate::render::ring::fit;
use crate::render::text::rate;

#[derive(Deserialize)]
struct Ring {
    world: u32,
    transport: String,
    #[serde(default)]
    options: RingOptions,
    #[serde(default)]
    ranks: Vec<RankRow>,
    #[serde(default)]
    results: Vec<Row>,
    avg_busbw_gbs: Option<f64>,
    #[serde(default)]
    links: Vec<Hop>,
    scan: Option<Scan>,
    /// The sweep's not-judged stalls in a run without a scan.
    #[serde(default)]
    not_judged: Vec<VerdictView>,
    #[serde(default)]
    verdicts: Vec<VerdictView>,
    error: Option<String>,
    #[serde(default)]
    rails: Vec<Rail>,
}

#[derive(Deserialize, Default)]
struct RingOptions {
    #[serde(default)]
    sweep: bool,
}

#[derive(Deserialize)]
struct RankRow {
    rank: u32,
    host: String,
    device: Option<String>,
}

#[derive(Deserialize)]
struct Row {
    size_bytes: u64,
    #[serde(default)]
    count: Option<u64>,
    #[serde(default)]
    time_us: Option<f64>,
    #[serde(default)]
    algbw_gbs: Option<f64>,
    busbw_gbs: f64,
    wrong: Option<u64>,
    in_place: Option<Half>,
}

#[derive(Deserialize)]
struct Half {
    #[serde(default)]
    time_us: Option<f64>,
    #[serde(default)]
    algbw_gbs: Option<f64>,
    busbw_gbs: f64,
    wrong: Option<u64>,
}

#[derive(Deserialize)]
struct Hop {
    channel_count: u32,
    from_rank: u32,
    to_rank: u32,
    from_host: String,
    to_host: String,
    from_device: Option<String>,
    to_device: Option<String>,
    size_bytes: u64,
    gbs: f64,
    rail: Option<u32>,
}

#[derive(Deserialize)]
struct Scan {
    #[serde(default)]
    line_rate_gbs: BTreeMap<String, f64>,
    median_gbs: Option<f64>,
    #[serde(default)]
    links: Vec<ScanLink>,
    fabric_slow: Option<Said>,
    #[serde(default)]
    not_judged: Vec<VerdictView>,
    #[serde(default)]
    cleared_by_recheck: Vec<String>,
    /// Directed links of the world; absent in reports from before the scan said it.
    links_total: Option<usize>,
    #[serde(default)]
    unmeasured: Vec<Unmeasured>,
}

#[derive(Deserialize)]
struct Unmeasured {
    from_rank: u32,
    to_rank: u32,
    reason: String,
}

#[derive(Deserialize)]
struct ScanLink {
    from_rank: u32,
    to_rank: u32,
    gbs: f64,
    samples: u64,
    line_rate_gbs: Option<f64>,
    #[serde(default)]
    slow: bool,
}

#[derive(Deserialize)]
struct Said {
    message: String,
}

/// A verdict of the report as the page reads it back: the kind as text, so a kind this
/// build does not know still shows.
#[derive(Deserialize)]
struct VerdictView {
    kind: String,
    from_rank: Option<u32>,
    to_rank: Option<u32>,
    #[serde(default)]
    evidence: BTreeMap<String, Value>,
    message: String,
    next: Option<String>,
    rail: Option<RailRef>,
}

#[derive(Deserialize)]
struct RailRef {
    index: u32,
}

#[derive(Deserialize)]
struct Rail {
    rail: u32,
    #[serde(default)]
    results: Vec<Row>,
    scan: Option<Scan>,
    error: Option<String>,
    not_tested: Option<String>,
}

pub(super) fn section(e: &Envelope) -> Result<Markup, HtmlError> {
    let r: Ring = e.view("data", e.data)?;
    let failed = !r.verdicts.is_empty() || r.error.is_some() || wrong_total(&r) > 0;
    let unknown = !all_not_judged(&r).is_empty() || r.rails.iter().any(|x| x.not_tested.is_some());
    let class = if failed { "fail" } else if unknown { "unknown" } else { "pass" };
    let single_rate = r.scan.as_ref().and_then(line_rate);
    Ok(html! {
        section.ring {
            h2 { "Ring: " (r.world) " ranks over " (r.transport) }
            div class={"verdicts " (class)} { (verdict_lines(&r)) }
            @if let Some(s) = &r.scan {
                h3 { "Link scan: sender x receiver" }
                (heatmap(&r, s, None))
            }
            @if !r.results.is_empty() {
                h3 { "Bus bandwidth against size" @if !r.rails.is_empty() { " (all rails summed)" } }
                (busbw_chart(&r.results, single_rate, r.scan.as_ref().and_then(|s| s.median_gbs)))
                (results_table(&r.results))
            }
            @for rail in &r.rails {
                h3 { "Rail " (rail.rail) }
                @if let Some(why) = &rail.not_tested { p.muted { "NOT TESTED: " (why) } }
                @if let Some(err) = &rail.error { p { "ended early: " (err) } }
                @if let Some(s) = &rail.scan { (heatmap(&r, s, Some(rail.rail))) }
                @if !rail.results.is_empty() {
                    (busbw_chart(&rail.results, rail.scan.as_ref().and_then(line_rate), rail.scan.as_ref().and_then(|s| s.median_gbs)))
                    (results_table(&rail.results))
                }
            }
            @if !r.links.is_empty() {
                h3 { "Hops (each measured at its receiver, at the largest size)" }
                (hops(&r))
            }
        }
    })
}

/// The table nccl-tests prints, the one its users read first: size, count, then time
/// (us), algbw and busbw (GB/s) and #wrong, out of place and in place.
fn results_table(rows: &[Row]) -> Markup {
    let num = |x: Option<f64>, d: usize| x.map(|v| format!("{v:.d$}")).unwrap_or_else(|| "N/A".into());
    let wrong = |w: Option<u64>| w.map(|w| w.to_string()).unwrap_or_else(|| "N/A".into());
    html! {
        div.scroll { table.results {
            thead {
                tr { th rowspan="2" { "size (B)" } th rowspan="2" { "count (elements)" }
                    th colspan="4" { "out-of-place" } th colspan="4" { "in-place" } }
                tr { @for _ in 0..2 { th { "time (us)" } th { "algbw (GB/s)" } th { "busbw (GB/s)" } th { "#wrong" } } }
            }
            tbody { @for r in rows {
                tr {
                    td.num { (r.size_bytes) } td.num { (r.count.map(|c| c.to_string()).unwrap_or_else(|| "N/A".into())) }
                    td.num { (num(r.time_us, 1)) } td.num { (num(r.algbw_gbs, 2)) } td.num { (num(Some(r.busbw_gbs), 2)) }
                    td.num { (wrong(r.wrong)) }
                    @match &r.in_place {
                        Some(h) => {
                            td.num { (num(h.time_us, 1)) } td.num { (num(h.algbw_gbs, 2)) }
                            td.num { (num(Some(h.busbw_gbs), 2)) } td.num { (wrong(h.wrong)) }
                        }
                        None => { @for _ in 0..4 { td.num { "N/A" } } }
                    }
                }
            } }
        } }
    }
}

fn wrong_total(r: &Ring) -> u64 {
    r.results
        .iter()
        .map(|x| x.wrong.unwrap_or(0).saturating_add(x.in_place.as_ref().and_then(|h| h.wrong).unwrap_or(0)))
        .fold(0, u64::saturating_add)
}

/// Every not-judged would-be verdict: the scans' and the sweep's without a scan.
fn all_not_judged(r: &Ring) -> Vec<&VerdictView> {
    r.not_judged.iter().chain(scans(r).flat_map(|s| &s.not_judged)).collect()
}

fn scans(r: &Ring) -> impl Iterator<Item = &Scan> {
    r.scan.iter().chain(r.rails.iter().filter_map(|x| x.scan.as_ref()))
}

/// The slowest end's port rate bounds the ring: the least of the ranks' line rates.
fn line_rate(s: &Scan) -> Option<f64> {
    s.line_rate_gbs.values().copied().filter(|g| g.is_finite()).reduce(f64::min)
}

fn rank_label(r: &Ring, rank: u32) -> String {
    match r.ranks.iter().find(|i| i.rank == rank) {
        Some(i) => format!("rank {rank} ({})", i.host),
        None => format!("rank {rank}"),
    }
}

/// The lines the text report leads with, in its words (render::ring's `verdicts`).
fn verdict_lines(r: &Ring) -> Markup {
    let not_judged = all_not_judged(r);
    html! {
        @for v in &r.verdicts {
            p.verdict { (v.message) }
            @if let Some(n) = &v.next { div.next { (super::remedy("next", n)) } }
            @if let Some(c) = v.evidence.get("port_counters").and_then(Value::as_object) {
                @let moved: Vec<String> = c.iter().map(|(k, d)| format!("{k} +{d}")).collect();
                p.next { "port counters that moved: " (moved.join(", ")) }
            }
        }
        @if let Some(f) = r.scan.as_ref().and_then(|s| s.fabric_slow.as_ref()) { p.verdict { (f.message) } }
        @for v in &not_judged {
            p.verdict { (v.message) }
            @if let Some(n) = &v.next { div.next { (super::remedy("next", n)) } }
        }
        @if r.verdicts.is_empty() { p.verdict { (outcome(r, not_judged.len())) } }
    }
}

/// The one line when no verdict names a culprit (render::ring's `outcome`, from the JSON).
fn outcome(r: &Ring, not_judged: usize) -> String {
    if let Some(e) = &r.error {
        return format!("RUN ENDED EARLY with no verdict: {e}");
    }
    let wrong = wrong_total(r);
    if wrong > 0 {
        let sizes: Vec<String> = r
            .results
            .iter()
            .filter(|x| x.wrong.unwrap_or(0) + x.in_place.as_ref().and_then(|h| h.wrong).unwrap_or(0) > 0)
            .map(|x| format!("{} B", x.size_bytes))
            .collect();
        return format!(
            "WRONG RESULTS: {wrong} element(s) differ from the expected sum at {}: the data was corrupted on the way",
            sizes.join(", ")
        );
    }
    let rail_errors: Vec<String> =
        r.rails.iter().filter_map(|x| x.error.as_ref().map(|e| format!("rail {}: {e}", x.rail))).collect();
    if !rail_errors.is_empty() {
        return format!("RAIL ENDED EARLY: {}", rail_errors.join("; "));
    }
    let mut parts = vec![match r.rails.iter().filter(|x| x.not_tested.is_none()).count() {
        0 => format!("{} ranks over {}", r.world, r.transport),
        n => format!("{} ranks x {n} rails over {}", r.world, r.transport),
    }];
    if r.options.sweep {
        let avg = r.avg_busbw_gbs.map(|b| format!("{} GB/s", fit(b, 6))).unwrap_or_else(|| "N/A".into());
        parts.push(format!("{} size(s), avg busbw {avg}", r.results.len()));
    }
    if let Some(m) = r.scan.as_ref().and_then(|s| s.median_gbs) {
        parts.push(format!("scan median link {}", rate(m)));
    }
    let all: Vec<&Scan> = scans(r).collect();
    let slowest = all
        .iter()
        .flat_map(|s| s.links.iter().map(|l| (l.from_rank, l.to_rank, l.gbs)))
        .chain(r.links.iter().filter(|_| all.is_empty()).map(|l| (l.from_rank, l.to_rank, l.gbs)))
        .min_by(|a, b| a.2.total_cmp(&b.2));
    if let Some((f, t, g)) = slowest {
        parts.push(format!("slowest link {} -> {} {}", rank_label(r, f), rank_label(r, t), rate(g)));
    }
    let untested: Vec<&str> = r.rails.iter().filter_map(|x| x.not_tested.as_deref()).collect();
    crate::render::ring::healthy_line(&parts, not_judged, &untested)
}

/// What a verdict outlines on the matrix.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Shape {
    Cell(u32, u32),
    Row(u32),
    Column(u32),
    /// A node's own fault: its row and its column.
    Cross(u32),
}

/// The outline of a verdict kind, where its ranks say; None for one the matrix cannot show.
fn shape(v: &VerdictView) -> Option<Shape> {
    match (v.kind.as_str(), v.from_rank, v.to_rank) {
        ("slow_link" | "hang_link" | "link_error", Some(f), Some(t)) => Some(Shape::Cell(f, t)),
        ("slow_egress", Some(f), _) => Some(Shape::Row(f)),
        ("slow_ingress", _, Some(t)) | ("slow_ingress", Some(t), None) => Some(Shape::Column(t)),
        (_, Some(n), None) | (_, None, Some(n)) => Some(Shape::Cross(n)),
        _ => None,
    }
}

fn covers(s: Shape, from: u32, to: u32) -> bool {
    match s {
        Shape::Cell(f, t) => f == from && t == to,
        Shape::Row(f) => f == from,
        Shape::Column(t) => t == to,
        Shape::Cross(n) => n == from || n == to,
    }
}

/// A verdict drawn on one matrix: its tag (`v1`), kind, shape, and whether it was judged.
struct Mark<'a> {
    tag: String,
    v: &'a VerdictView,
    shape: Shape,
    judged: bool,
}

/// The verdicts of `rail` (None: a single-rail run): the job's own, then the scan's
/// not-judged ones (dashed: unconfirmed suspects).
fn marks<'a>(r: &'a Ring, s: &'a Scan, rail: Option<u32>) -> Vec<Mark<'a>> {
    let ours = |v: &&VerdictView| rail.is_none() || v.rail.as_ref().is_none_or(|x| Some(x.index) == rail);
    let judged = r.verdicts.iter().filter(ours).map(|v| (v, true));
    let unjudged = s.not_judged.iter().map(|v| (v, false));
    judged
        .chain(unjudged)
        .filter_map(|(v, judged)| Some((v, judged, shape(v)?)))
        .enumerate()
        .map(|(i, (v, judged, shape))| Mark { tag: format!("v{}", i + 1), v, shape, judged })
        .collect()
}

/// Geometry of the matrix: cell size and where the grid starts.
struct Grid {
    n: u32,
    cell: f64,
    left: f64,
    top: f64,
}

impl Grid {
    fn x(&self, col: u32) -> f64 {
        self.left + f64::from(col) * self.cell
    }
    fn y(&self, row: u32) -> f64 {
        self.top + f64::from(row) * self.cell
    }
    fn side(&self) -> f64 {
        f64::from(self.n) * self.cell
    }
}

/// `10 of 12 links measured; not measured: 1→3, 3→1 (the --scan-time budget ended the plan
/// first)`, as the text report says it; none for a report without the count.
fn coverage(s: &Scan) -> Option<String> {
    let total = s.links_total?;
    let mut line = format!("{} of {total} links measured", s.links.len());
    let mut reasons: Vec<&str> = s.unmeasured.iter().map(|u| u.reason.as_str()).collect();
    reasons.dedup();
    let parts: Vec<String> = reasons
        .iter()
        .map(|why| {
            let links: Vec<String> = s
                .unmeasured
                .iter()
                .filter(|u| u.reason == *why)
                .map(|u| format!("{}\u{2192}{}", u.from_rank, u.to_rank))
                .collect();
            let said = match *why {
                "budget" => "the --scan-time budget ended the plan first",
                "no_samples" => "their order ran, but the receiver reported no sample",
                other => other,
            };
            format!("{} ({said})", links.join(", "))
        })
        .collect();
    if !parts.is_empty() {
        line.push_str(&format!("; not measured: {}", parts.join("; ")));
    }
    Some(line)
}

fn heatmap(r: &Ring, s: &Scan, rail: Option<u32>) -> Markup {
    let n = r.world.max(s.links.iter().map(|l| l.from_rank.max(l.to_rank) + 1).max().unwrap_or(0));
    let cell = (560.0 / f64::from(n.max(1))).clamp(5.0, 40.0);
    let g = Grid { n, cell, left: if n <= 32 { 120.0 } else { 50.0 }, top: 46.0 };
    let marks = marks(r, s, rail);
    let (w, h) = (g.left + g.side() + 230.0, g.top + g.side() + 40.0);
    let median = s.median_gbs;
    let measured: BTreeMap<(u32, u32), &ScanLink> = s.links.iter().map(|l| ((l.from_rank, l.to_rank), l)).collect();
    html! {
        p.legend {
            "Each cell: the link from the row's rank to the column's, coloured by its rate as a fraction of the scan's median link"
            @if let Some(m) = median { " (" (rate(m)) ")" }
            "; red is slow, green as expected, grey not measured. Outlined: a verdict's cells; dashed: not judged."
        }
        @if let Some(c) = coverage(s) { p.coverage { (c) } }
        svg.heatmap xmlns="http://www.w3.org/2000/svg" width=(w) height=(h) viewBox={"0 0 " (w) " " (h)}
            role="img" aria-label="link scan matrix" {
            text x=(g.left) y="14" { "receiver →" }
            text x="4" y=(g.top - 6.0) { "sender ↓" }
            @for i in 0..n { (axis_labels(r, &g, i)) }
            @for from in 0..n {
                @for to in 0..n {
                    @if from != to {
                        @match measured.get(&(from, to)) {
                            Some(l) => (cell_rect(r, &g, l, median, &marks)),
                            None => @if n <= 64 {
                                rect.empty x=(g.x(to)) y=(g.y(from)) width=(cell - 1.0) height=(cell - 1.0) {
                                    title { (rank_label(r, from)) " → " (rank_label(r, to)) ": not measured" }
                                }
                            },
                        }
                    }
                }
            }
            @for m in &marks { (outline(&g, m)) }
        }
        @if !marks.is_empty() {
            ul.marks {
                @for m in &marks {
                    li { b { (m.tag) } " " (m.v.kind.replace('_', " "))
                        @if !m.judged { " (not judged: an unconfirmed suspect)" }
                        ": " (m.v.message) }
                }
            }
        }
        @if !s.cleared_by_recheck.is_empty() {
            p { "Suspects the re-check cleared (not verdicts):" }
            ul.cleared { @for c in &s.cleared_by_recheck { li { (c) } } }
        }
    }
}

fn axis_labels(r: &Ring, g: &Grid, i: u32) -> Markup {
    let every = (g.n / 16).max(1);
    let host = r.ranks.iter().find(|x| x.rank == i).map(|x| x.host.as_str());
    html! {
        @if i.is_multiple_of(every) {
            text.small x=(g.x(i) + g.cell / 2.0) y=(g.top - 4.0) text-anchor="middle" { (i) }
            text.small x=(g.left - 4.0) y=(g.y(i) + g.cell / 2.0 + 3.0) text-anchor="end" {
                (i) @if g.n <= 32 { @if let Some(h) = host { " " (h) } }
            }
        }
    }
}

fn cell_rect(r: &Ring, g: &Grid, l: &ScanLink, median: Option<f64>, marks: &[Mark]) -> Markup {
    let frac = median.filter(|m| *m > 0.0).map(|m| l.gbs / m);
    // Not measured against a median is the unknown state, in its one colour (CSS).
    let fill = frac.map(fraction_colour);
    let tags: Vec<&str> = marks
        .iter()
        .filter(|m| covers(m.shape, l.from_rank, l.to_rank))
        .map(|m| m.tag.as_str())
        .collect();
    let class = match (l.slow, fill.is_some()) {
        (true, true) => "cell slow",
        (false, true) => "cell",
        (true, false) => "cell slow unknown",
        (false, false) => "cell unknown",
    };
    html! {
        rect class=(class) x=(g.x(l.to_rank)) y=(g.y(l.from_rank)) width=(g.cell - 1.0) height=(g.cell - 1.0)
            fill=[fill] data-from=(l.from_rank) data-to=(l.to_rank) data-gbs=(l.gbs)
            data-verdicts=[(!tags.is_empty()).then(|| tags.join(" "))] {
            title {
                (rank_label(r, l.from_rank)) " → " (rank_label(r, l.to_rank)) ": " (rate(l.gbs))
                @if let Some(f) = frac { ", " (format!("{:.0}", f * 100.0)) "% of the median" }
                @if let Some(lr) = l.line_rate_gbs { ", line rate " (rate(lr)) }
                ", " (l.samples) " samples"
                @if l.slow { "; named by a verdict" }
            }
        }
        @if g.cell >= 30.0 {
            @if let Some(f) = frac {
                text.small x=(g.x(l.to_rank) + g.cell / 2.0) y=(g.y(l.from_rank) + g.cell / 2.0 + 3.0) text-anchor="middle" {
                    (format!("{:.0}%", f * 100.0))
                }
            }
        }
    }
}

/// The rectangles a verdict outlines (a cross is its row and its column) and its tag beside
/// the matrix.
fn outline(g: &Grid, m: &Mark) -> Markup {
    let side = g.side();
    let rects: Vec<(f64, f64, f64, f64)> = match m.shape {
        Shape::Cell(f, t) => vec![(g.x(t), g.y(f), g.cell, g.cell)],
        Shape::Row(f) => vec![(g.left, g.y(f), side, g.cell)],
        Shape::Column(t) => vec![(g.x(t), g.top, g.cell, side)],
        Shape::Cross(n) => vec![(g.left, g.y(n), side, g.cell), (g.x(n), g.top, g.cell, side)],
    };
    let (lx, ly) = match m.shape {
        Shape::Cell(f, _) | Shape::Row(f) | Shape::Cross(f) => (g.left + side + 8.0, g.y(f) + g.cell / 2.0 + 4.0),
        Shape::Column(t) => (g.x(t), g.top + side + 16.0),
    };
    let class = if m.judged { "outline" } else { "outline not-judged" };
    let (from, to) = (m.v.from_rank, m.v.to_rank);
    html! {
        @for (x, y, w, h) in &rects {
            rect class=(class) x=(x - 1.0) y=(y - 1.0) width=(w + 1.0) height=(h + 1.0)
                data-verdict=(m.v.kind) data-tag=(m.tag) data-from=[from] data-to=[to] {
                title { (m.tag) ": " (m.v.message) }
            }
        }
        text.label x=(lx) y=(ly) data-tag=(m.tag) {
            (m.tag) " " (m.v.kind.replace('_', " ").to_uppercase())
            @if !m.judged { " (not judged)" }
        }
    }
}

/// busbw (out of place, in place) against size on a log2 axis, with the line rate and the
/// scan's median link as horizontal lines where known.
fn busbw_chart(rows: &[Row], line: Option<f64>, median: Option<f64>) -> Markup {
    let (w, h, l, rgt, t, b) = (720.0, 300.0, 56.0, 190.0, 14.0, 44.0);
    let (pw, ph) = (w - l - rgt, h - t - b);
    let sizes: Vec<f64> = rows.iter().map(|x| (x.size_bytes.max(1) as f64).log2()).collect();
    let (lo, hi) = sizes.iter().fold((f64::MAX, f64::MIN), |(a, b), s| (a.min(*s), b.max(*s)));
    let x = |s: f64| if hi > lo { l + (s - lo) / (hi - lo) * pw } else { l + pw / 2.0 };
    let top = rows
        .iter()
        .flat_map(|r| [Some(r.busbw_gbs), r.in_place.as_ref().map(|h| h.busbw_gbs)])
        .chain([line, median])
        .flatten()
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let ys = ticks(top * 1.05, 5);
    let ymax = ys.last().copied().unwrap_or(1.0).max(f64::MIN_POSITIVE);
    let y = |v: f64| t + ph - (v / ymax).clamp(0.0, 1.0) * ph;
    let oop: Vec<(f64, f64)> = rows.iter().zip(&sizes).map(|(r, s)| (x(*s), y(r.busbw_gbs))).collect();
    let ip: Vec<(f64, f64)> = rows
        .iter()
        .zip(&sizes)
        .filter_map(|(r, s)| Some((x(*s), y(r.in_place.as_ref()?.busbw_gbs))))
        .collect();
    let points = |p: &[(f64, f64)]| p.iter().map(|(a, b)| format!("{a:.1},{b:.1}")).collect::<Vec<_>>().join(" ");
    html! {
        svg.busbw xmlns="http://www.w3.org/2000/svg" width=(w) height=(h) viewBox={"0 0 " (w) " " (h)}
            role="img" aria-label="bus bandwidth against message size" {
            @for v in &ys {
                line.grid x1=(l) x2=(l + pw) y1=(y(*v)) y2=(y(*v)) {}
                text.small x=(l - 5.0) y=(y(*v) + 3.0) text-anchor="end" { (num(*v)) }
            }
            @for (r, s) in rows.iter().zip(&sizes) {
                text.small x=(x(*s)) y=(t + ph + 14.0) text-anchor="middle" { (size_label(r.size_bytes)) }
            }
            path.axis d={"M" (l) "," (t) " V" (t + ph) " H" (l + pw)} {}
            text x=(l + pw / 2.0) y=(h - 6.0) text-anchor="middle" { "message size (bytes)" }
            text x="12" y=(t + ph / 2.0) transform={"rotate(-90 12 " (t + ph / 2.0) ")"} text-anchor="middle" { "busbw GB/s" }
            @if let Some(v) = line {
                line.rate x1=(l) x2=(l + pw) y1=(y(v)) y2=(y(v)) {}
                text x=(l + pw + 6.0) y=(y(v) + 4.0) { "line rate " (rate(v)) }
            }
            @if let Some(v) = median {
                line.median x1=(l) x2=(l + pw) y1=(y(v)) y2=(y(v)) {}
                text x=(l + pw + 6.0) y=(y(v) + 16.0) { "scan median link " (rate(v)) }
            }
            polyline.series.oop points=(points(&oop)) {}
            @if !ip.is_empty() { polyline.series.ip points=(points(&ip)) {} }
            @for (r, (px, py)) in rows.iter().zip(&oop) {
                circle.dot.oop cx=(px) cy=(py) r="3.5" {
                    title { (size_label(r.size_bytes)) ": busbw " (fit(r.busbw_gbs, 6)) " GB/s out of place" }
                }
            }
        }
        p.legend {
            span style="--c:var(--data1)" { "out of place" } span style="--c:var(--data2)" { "in place" }
            @if line.is_some() { span style="--c:var(--fg)" { "line rate (slowest port)" } }
            @else { span style="--c:var(--empty)" { "line rate unknown (no port rate read)" } }
            @if median.is_some() { span style="--c:var(--muted)" { "scan median link" } }
        }
    }
}

fn hops(r: &Ring) -> Markup {
    let slowest = r.links.iter().map(|l| l.gbs).fold(f64::INFINITY, f64::min);
    let fastest = r.links.iter().map(|l| l.gbs).fold(0.0, f64::max);
    // Bold the slowest hop only when it stands out (5% under the fastest): among equals
    // there is no slowest to point at.
    let marked = slowest < 0.95 * fastest;
    let rails = r.links.iter().any(|l| l.rail.is_some());
    let end = |rank: u32, host: &str, dev: &Option<String>| match dev {
        Some(d) => format!("{rank} {host} {d}"),
        None => format!("{rank} {host}"),
    };
    html! {
        table.hops {
            thead { tr {
                @if rails { th { "rail" } }
                th { "from" } th { "to" } th { "channels" } th { "size" } th { "rate" }
            } }
            tbody {
                @for l in &r.links {
                    tr class=[(marked && l.gbs == slowest).then_some("slow")] {
                        @if rails { td.num { (l.rail.map(|x| x.to_string()).unwrap_or_default()) } }
                        td { (end(l.from_rank, &l.from_host, &l.from_device)) }
                        td { (end(l.to_rank, &l.to_host, &l.to_device)) }
                        td.num { (l.channel_count) }
                        td.num { (size_label(l.size_bytes)) }
                        td.num { (crate::render::text::rate_cell(l.gbs)) }
                    }
                }
            }
        }
        @if r.ranks.iter().any(|x| x.device.is_some()) {
            p.muted { "Devices: "
                @for (i, x) in r.ranks.iter().enumerate() {
                    @if i > 0 { "; " }
                    (x.rank) " " (x.host) @if let Some(d) = &x.device { " " (d) }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(kind: &str, from: Option<u32>, to: Option<u32>) -> VerdictView {
        VerdictView {
            kind: kind.into(),
            from_rank: from,
            to_rank: to,
            evidence: BTreeMap::new(),
            message: String::new(),
            next: None,
            rail: None,
        }
    }

    #[test]
    fn coverage_says_what_was_not_measured_and_why() {
        let scan = |j: &str| serde_json::from_str::<Scan>(j).unwrap();
        let link = r#"{"from_rank":0,"to_rank":1,"gbs":1.0,"samples":3,"line_rate_gbs":null}"#;
        assert_eq!(coverage(&scan(&format!(r#"{{"median_gbs":1.0,"links":[{link}],"fabric_slow":null}}"#))), None);
        assert_eq!(
            coverage(&scan(&format!(
                r#"{{"median_gbs":1.0,"links":[{link}],"fabric_slow":null,"links_total":2,"unmeasured":[]}}"#
            ))),
            Some("1 of 2 links measured".into())
        );
        let two = r#"[{"from_rank":1,"to_rank":0,"reason":"budget"},{"from_rank":2,"to_rank":0,"reason":"budget"},{"from_rank":0,"to_rank":2,"reason":"no_samples"}]"#;
        assert_eq!(
            coverage(&scan(&format!(
                r#"{{"median_gbs":1.0,"links":[{link}],"fabric_slow":null,"links_total":4,"unmeasured":{two}}}"#
            ))),
            Some("1 of 4 links measured; not measured: 1\u{2192}0, 2\u{2192}0 (the --scan-time budget ended the plan first); 0\u{2192}2 (their order ran, but the receiver reported no sample)".into())
        );
    }

    #[test]
    fn each_verdict_kind_outlines_its_cells() {
        assert_eq!(shape(&v("slow_link", Some(1), Some(3))), Some(Shape::Cell(1, 3)));
        assert_eq!(shape(&v("slow_egress", Some(2), None)), Some(Shape::Row(2)));
        assert_eq!(shape(&v("slow_ingress", None, Some(0))), Some(Shape::Column(0)));
        assert_eq!(shape(&v("rank_lost", Some(4), None)), Some(Shape::Cross(4)));
        assert_eq!(shape(&v("coordinator_lost", None, None)), None);
        assert!(covers(Shape::Row(2), 2, 0) && !covers(Shape::Row(2), 0, 2));
        assert!(covers(Shape::Cross(2), 0, 2) && covers(Shape::Cross(2), 2, 1));
    }
}
