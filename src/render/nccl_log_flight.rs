//! `nccl-log`'s flight-recorder section: the dumps read, each verdict's calls per rank and
//! the ranks that waited, then the process groups (after the joined verdict list).

use crate::nccl_log::flight::judge::{FlightReport, FlightVerdict};
use crate::text::rank_runs;
use crate::render::text;

pub(crate) fn section(fr: &FlightReport) -> String {
    let mut s = String::from("\nFLIGHT RECORDER\n");
    let mut versions: std::collections::BTreeMap<(&str, &str), Vec<u32>> = Default::default();
    for d in &fr.dumps {
        versions
            .entry((d.version.as_str(), d.format))
            .or_default()
            .push(d.rank);
    }
    for ((v, f), ranks) in &versions {
        s.push_str(&format!("  dumps: rank {} (version {v}, {f})\n", rank_runs(ranks)));
    }
    let wrapped: Vec<u32> = fr.dumps.iter().filter(|d| d.wrapped).map(|d| d.rank).collect();
    if !wrapped.is_empty() {
        s.push_str(&format!(
            "  buffer wrapped (older entries dropped): rank {}\n",
            rank_runs(&wrapped)
        ));
    }
    for v in &fr.verdicts {
        s.push_str(&verdict(v));
    }
    if fr.verdicts.is_empty() {
        s.push_str(
            "  no verdict: every group's members reached the same sequence number with the same calls\n",
        );
    }
    s.push_str("  process groups:\n");
    for g in &fr.groups {
        let desc = if g.desc.is_empty() {
            String::new()
        } else {
            format!(" ({})", g.desc)
        };
        s.push_str(&format!(
            "    {}{desc}: rank {} (members from {})\n",
            g.name,
            rank_runs(&g.ranks),
            g.members_from
        ));
    }
    for n in &fr.notes {
        s.push_str(&text::wrap("  note: ", n, 8));
    }
    s
}

fn verdict(v: &FlightVerdict) -> String {
    let mut s = format!("  {} {}", v.severity.as_str().to_uppercase(), v.cause);
    let desc = if v.group_desc.is_empty() {
        String::new()
    } else {
        format!(" ({})", v.group_desc)
    };
    s.push_str(&format!(": group {}{desc} [{}]", v.group, rank_runs(&v.members)));
    if let Some(q) = v.seq {
        s.push_str(&format!(" seq {q}"));
    }
    if !v.ranks.is_empty() {
        s.push_str(&format!(", blames rank {}", rank_runs(&v.ranks)));
    }
    s.push('\n');
    for c in &v.calls {
        let more = if c.count as usize > c.ranks.len() {
            format!(" (and {} more)", c.count as usize - c.ranks.len())
        } else {
            String::new()
        };
        s.push_str(&text::wrap(
            &format!("    rank {}{more}: ", rank_runs(&c.ranks)),
            &format!("{} [{}]", c.call, c.state.as_str()),
            6,
        ));
    }
    if !v.waiting.is_empty() {
        s.push_str(&format!("    waiting (knock-on): rank {}\n", rank_runs(&v.waiting)));
    }
    for k in v.knock_ons.iter().chain(&v.log_says) {
        s.push_str(&text::wrap("    ", k, 6));
    }
    if !v.hosts.is_empty() {
        let hs: Vec<String> = v.hosts.iter().map(|(r, h)| format!("{r}={h}")).collect();
        s.push_str(&text::wrap("    hosts: ", &hs.join(" "), 6));
    }
    s
}
