//! `sweep` over `fabprobe ring` reports (schema `fabprobe.ring`, rank 0's JSON): the nodes
//! to drain and the links and paths to ticket, apart, merged over every ring report given.
//! A ring report already says where to act (`data.drain[]`, `data.ticket[]`, derived from
//! its verdicts); the sweep gathers them: one drain entry per node with every reason, one
//! ticket per link (both ends) with every report that named it.
//!
//! API: [`RingPart::from_raw`] (one report's lists, loosely typed as the sweep reads
//! everything), [`RingAcc::add`], [`RingAcc::finish`] -> [`RingSweep`].

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::sweep::same_host;
use crate::text::printable;

/// Longest text kept from a report's field (a report is data from disk or the network).
const MAX_TEXT: usize = 1000;

/// `data.drain[]` of a ring report, every field optional.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawDrain {
    #[serde(default)]
    host: Option<Value>,
    #[serde(default)]
    kinds: Option<Vec<Value>>,
    #[serde(default)]
    reason: Option<Value>,
    #[serde(default)]
    switch_ports: Option<Vec<Value>>,
}

/// `data.ticket[]` of a ring report, every field optional.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawTicket {
    #[serde(default)]
    kind: Option<Value>,
    #[serde(default)]
    from_rank: Option<Value>,
    #[serde(default)]
    to_rank: Option<Value>,
    #[serde(default)]
    from_host: Option<Value>,
    #[serde(default)]
    to_host: Option<Value>,
    #[serde(default)]
    rail: Option<Value>,
    #[serde(default)]
    message: Option<Value>,
    #[serde(default)]
    switch_ports: Option<Vec<Value>>,
}

fn text(v: &Option<Value>) -> Option<String> {
    match v {
        Some(Value::String(s)) if !s.trim().is_empty() => Some(printable(s.trim(), MAX_TEXT)),
        _ => None,
    }
}

fn texts(v: &Option<Vec<Value>>) -> Vec<String> {
    v.iter()
        .flatten()
        .filter_map(|x| text(&Some(x.clone())))
        .collect()
}

/// One ring report as the sweep keeps it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RingPart {
    /// Rank 0's hostname (the envelope's), where the report gave one.
    pub host: Option<String>,
    pub world: Option<u64>,
    /// `data.error`: why the run ended early, or None.
    pub error: Option<String>,
    pub verdicts: usize,
    pub drain: Vec<(String, Vec<String>, String, Vec<String>)>,
    pub ticket: Vec<RingTicket>,
}

impl RingPart {
    /// A ring report's lists: drain entries without a host and tickets without a kind are
    /// dropped (they name nothing to act on).
    pub fn from_raw(
        host: Option<String>,
        world: Option<&Value>,
        error: &Option<Value>,
        verdicts: usize,
        drain: Vec<RawDrain>,
        ticket: Vec<RawTicket>,
    ) -> RingPart {
        let drain = drain
            .into_iter()
            .filter_map(|d| {
                let host = text(&d.host)?;
                let reason = text(&d.reason).unwrap_or_default();
                Some((host, texts(&d.kinds), reason, texts(&d.switch_ports)))
            })
            .collect();
        let end = |host: &Option<Value>, rank: &Option<Value>| TicketEnd {
            host: text(host),
            rank: rank.as_ref().and_then(Value::as_u64),
        };
        let ticket = ticket
            .into_iter()
            .filter_map(|t| {
                Some(RingTicket {
                    kind: text(&t.kind)?,
                    from: end(&t.from_host, &t.from_rank),
                    to: end(&t.to_host, &t.to_rank),
                    rail: t
                        .rail
                        .as_ref()
                        .and_then(|r| r.get("index"))
                        .and_then(Value::as_u64),
                    message: text(&t.message).unwrap_or_default(),
                    switch_ports: texts(&t.switch_ports),
                    sources: Vec::new(),
                })
            })
            .collect();
        RingPart {
            host,
            world: world.and_then(Value::as_u64),
            error: text(error),
            verdicts,
            drain,
            ticket,
        }
    }
}

/// One end of a ticketed link.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TicketEnd {
    pub host: Option<String>,
    /// Its rank in the run that named it (ranks differ from run to run; the host does not).
    pub rank: Option<u64>,
}

/// A link or path to ticket (`ring.ticket[]`): both ends, the first report's message, and
/// every report that named it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RingTicket {
    /// `slow_link`, `slow_path`, `link_error`, `hang_link`.
    pub kind: String,
    pub from: TicketEnd,
    pub to: TicketEnd,
    /// The rail, for a `--rails` run's verdict on one rail.
    pub rail: Option<u64>,
    pub message: String,
    /// The switch port at each end where LLDP named it (`node-b eth1 <-> leaf-07 Eth1/12`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub switch_ports: Vec<String>,
    pub sources: Vec<String>,
}

/// A node to drain (`ring.drain[]`): every ring report's reasons for it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RingDrain {
    pub node: String,
    /// Verdict kinds (`slow_egress`, `port_downtrained`...), each once.
    pub kinds: Vec<String>,
    /// Each report's reason (its first such verdict's message), each once.
    pub reasons: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub switch_ports: Vec<String>,
    pub sources: Vec<String>,
}

/// One ring report read (`ring.runs[]`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RingRun {
    pub source: String,
    /// Rank 0's host.
    pub host: Option<String>,
    pub world: Option<u64>,
    pub verdicts: usize,
    pub drain: usize,
    pub ticket: usize,
    /// Why the run ended early (its `data.error`), or null.
    pub error: Option<String>,
}

/// What the ring reports say (`ring` of `fabprobe.sweep`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RingSweep {
    pub reports: usize,
    pub runs: Vec<RingRun>,
    pub drain: Vec<RingDrain>,
    pub ticket: Vec<RingTicket>,
}

/// The ring reports read so far.
#[derive(Default)]
pub(crate) struct RingAcc {
    out: RingSweep,
}

impl RingAcc {

    /// One ring report from `source`.
    pub fn add(&mut self, source: &str, part: RingPart) {
        let o = &mut self.out;
        o.reports += 1;
        o.runs.push(RingRun {
            source: source.to_string(),
            host: part.host,
            world: part.world,
            verdicts: part.verdicts,
            drain: part.drain.len(),
            ticket: part.ticket.len(),
            error: part.error,
        });
        for (host, kinds, reason, ports) in part.drain {
            let at = o.drain.iter().position(|d| same_host(&d.node, &host));
            let d = match at {
                Some(i) => &mut o.drain[i],
                None => {
                    o.drain.push(RingDrain {
                        node: host,
                        kinds: Vec::new(),
                        reasons: Vec::new(),
                        switch_ports: Vec::new(),
                        sources: Vec::new(),
                    });
                    o.drain.last_mut().expect("just pushed")
                }
            };
            push_new(&mut d.kinds, kinds);
            push_new(&mut d.reasons, [reason].into_iter().filter(|r| !r.is_empty()));
            push_new(&mut d.switch_ports, ports);
            push_new(&mut d.sources, [source.to_string()]);
        }
        for t in part.ticket {
            let same = |x: &RingTicket| {
                x.kind == t.kind && x.rail == t.rail && same_end(&x.from, &t.from) && same_end(&x.to, &t.to)
            };
            match o.ticket.iter_mut().find(|x| same(x)) {
                Some(x) => {
                    push_new(&mut x.switch_ports, t.switch_ports);
                    push_new(&mut x.sources, [source.to_string()]);
                }
                None => o.ticket.push(RingTicket {
                    sources: vec![source.to_string()],
                    ..t
                }),
            }
        }
    }

    /// The lists, nodes and links in name order; None when no ring report was read.
    pub fn finish(self) -> Option<RingSweep> {
        let mut o = self.out;
        if o.reports == 0 {
            return None;
        }
        o.drain.sort_by(|a, b| a.node.cmp(&b.node));
        o.ticket.sort_by(|a, b| {
            (&a.from.host, &a.to.host, a.rail, &a.kind).cmp(&(&b.from.host, &b.to.host, b.rail, &b.kind))
        });
        Some(o)
    }
}

/// Two ends are the same when both name one host (ranks differ between runs).
fn same_end(a: &TicketEnd, b: &TicketEnd) -> bool {
    match (&a.host, &b.host) {
        (Some(x), Some(y)) => same_host(x, y),
        (None, None) => a.rank == b.rank,
        _ => false,
    }
}

fn push_new(v: &mut Vec<String>, items: impl IntoIterator<Item = String>) {
    for i in items {
        if !v.contains(&i) {
            v.push(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn part(v: Value) -> RingPart {
        let d = &v["data"];
        let drain = serde_json::from_value(d["drain"].clone()).unwrap_or_default();
        let ticket = serde_json::from_value(d["ticket"].clone()).unwrap_or_default();
        RingPart::from_raw(
            Some("node-a".into()),
            d.get("world"),
            &d.get("error").cloned(),
            0,
            drain,
            ticket,
        )
    }

    /// Two runs naming the same node and the same link are one drain entry and one ticket,
    /// each with both sources; FQDN and short name are one host; unusable entries drop.
    #[test]
    fn merges_over_reports() {
        let a = json!({"data": {"world": 4, "drain": [{"host": "node-c", "kinds": ["slow_egress"],
            "reason": "SLOW EGRESS rank 2 (node-c, eth1): ..."}, {"kinds": ["slow_egress"]}],
            "ticket": [{"kind": "slow_link", "from_rank": 1, "to_rank": 3, "from_host": "node-b",
            "to_host": "node-d", "message": "SLOW LINK rank 1 ...",
            "switch_ports": ["node-b eth1 <-> leaf-07 Ethernet1/2"]}, {"from_host": "x"}]}});
        let b = json!({"data": {"world": 8, "error": "interrupted by SIGTERM", "drain": [{"host": "node-c.cluster",
            "kinds": ["port_downtrained"], "reason": "PORT DOWNTRAINED rank 5 (node-c.cluster, eth1): ...",
            "switch_ports": ["node-c eth1 <-> leaf-07 Ethernet1/3"]}],
            "ticket": [{"kind": "slow_link", "from_rank": 6, "to_rank": 0, "from_host": "node-b", "to_host": "node-d"}]}});
        let mut acc = RingAcc::default();
        acc.add("a.json", part(a));
        acc.add("b.json", part(b));
        let r = acc.finish().unwrap();
        assert_eq!(r.reports, 2);
        assert_eq!(r.runs[1].error.as_deref(), Some("interrupted by SIGTERM"));
        assert_eq!(
            (r.runs[0].drain, r.runs[0].ticket, r.runs[0].world),
            (1, 1, Some(4))
        );
        assert_eq!(r.drain.len(), 1, "{:#?}", r.drain);
        let d = &r.drain[0];
        assert_eq!(d.node, "node-c");
        assert_eq!(d.kinds, ["slow_egress", "port_downtrained"]);
        assert_eq!(d.reasons.len(), 2);
        assert_eq!(d.sources, ["a.json", "b.json"]);
        assert_eq!(d.switch_ports, ["node-c eth1 <-> leaf-07 Ethernet1/3"]);
        assert_eq!(r.ticket.len(), 1, "{:#?}", r.ticket);
        let t = &r.ticket[0];
        assert_eq!(
            (t.from.host.as_deref(), t.to.host.as_deref()),
            (Some("node-b"), Some("node-d"))
        );
        assert_eq!(t.sources, ["a.json", "b.json"]);
        assert_eq!(t.switch_ports, ["node-b eth1 <-> leaf-07 Ethernet1/2"]);
    }

    #[test]
    fn report_text_is_made_printable() {
        let a = json!({"data": {"drain": [{"host": "node-c", "reason": "x\u{1b}[2Jy"}]}});
        let mut acc = RingAcc::default();
        acc.add("a", part(a));
        assert_eq!(acc.finish().unwrap().drain[0].reasons, ["x\\x1b[2Jy"]);
        assert_eq!(RingAcc::default().finish(), None);
    }
}
