//! `[ib]` and `[roce]` port rules, and `[counters]`.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{not_evaluated, nothing_here, violation};
use crate::check::Finding;
use crate::check::policy::{JudgedBy, Policy, PortRules, set_keys};
use crate::finding::MissingFact;
use crate::probe::links::{LinkDevice, LinkPort, LinksReport};

pub(crate) fn ports_of<'a>(l: &'a LinksReport, layer: &str) -> Vec<(&'a LinkDevice, &'a LinkPort)> {
    l.devices
        .iter()
        .flat_map(|d| d.ports.iter().map(move |p| (d, p)))
        .filter(|(_, p)| p.link_layer.as_deref() == Some(layer))
        .collect()
}

/// A port's NIC against a policy's PCIe minimum, one shape for both attributes:
/// `pcie_gen_min` (the link speed's generation) and `pcie_width_min` (its width). An
/// unreadable attribute is not evaluated; below the minimum is a violation with the reading,
/// the minimum, the BDF and the fix.
fn pcie_minimum(key: &str, attr: &str, min: u64, d: &LinkDevice, s: &str) -> Option<Finding> {
    let link = d.attrs.pci_link.as_ref();
    let gen_check = attr == "pcie_gen_min";
    // (the value compared, its sysfs reading, the message) when the attribute was read.
    let reading: Option<(u64, Value, String)> = if gen_check {
        link.and_then(|l| l.current_speed.as_ref()).map(|sp| {
            let msg = format!("{}'s PCIe link runs at {}, below Gen{min}", d.name, sp.raw);
            (
                sp.generation.map(u64::from).unwrap_or(0),
                json!(sp.raw.as_str()),
                msg,
            )
        })
    } else {
        link.and_then(|l| l.current_width).map(|w| {
            let msg = format!("{}'s PCIe link is x{w}, below x{min}", d.name);
            (w as u64, json!(w), msg)
        })
    };
    let (sysfs, fix_head) = if gen_check {
        (
            "current_link_speed",
            "reseat the adapter; check the slot's BIOS PCIe speed setting",
        )
    } else {
        (
            "current_link_width",
            "reseat the adapter or move it to a x16 slot",
        )
    };
    let Some((value, raw, message)) = reading else {
        return Some(not_evaluated(key, format!("{}: no {sysfs}", d.name)));
    };
    (value < min).then(|| {
        violation(key, s, message)
            .evidence(sysfs, raw)
            .evidence(attr, min)
            .evidence("pci_bdf", d.attrs.pci_bdf.clone())
            .fix(format!(
                "{fix_head}; {}",
                crate::probe::topo::lnk_compare(d.attrs.pci_bdf.as_deref().unwrap_or(""))
            ))
    })
}

pub(crate) fn subject(d: &LinkDevice, p: &LinkPort) -> String {
    crate::finding::spell::port(&d.name, p.port)
}

/// One field `all_alike` compares, read from a port and its device.
type PortField = fn(&LinkDevice, &LinkPort) -> Option<String>;

/// One layer's ports (`[ib]`: InfiniBand, `[roce]`: Ethernet) as the port rules see them.
pub(super) struct Ports<'a> {
    l: &'a LinksReport,
    sect: &'a str,
    layer: &'a str,
    r: &'a PortRules,
    ports: Vec<(&'a LinkDevice, &'a LinkPort)>,
}

impl Ports<'_> {
    /// `ib.state`: the key as the policy file names it.
    fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.sect)
    }
}

/// How a port rule judges: the layer's ports together, or each port (port by port, where
/// the first per-port rule stands, so one port's findings stay together).
pub(super) enum PortJudge {
    Layer(fn(&Ports, &mut Vec<Finding>)),
    Port(fn(&Ports, &LinkDevice, &LinkPort, &mut Vec<Finding>)),
}

/// `[ib]` and `[roce]`: each key its own rule, in this order.
pub(super) const PORT_RULES: &[(&[&str], PortJudge)] = &[
    (&["count", "count_min"], PortJudge::Layer(port_count)),
    (&["state"], PortJudge::Port(port_state)),
    (&["rate_min_gbps"], PortJudge::Port(port_rate_min_gbps)),
    (&["width"], PortJudge::Port(port_width)),
    (&["speed"], PortJudge::Port(port_speed)),
    (
        &["pcie_gen_min", "pcie_width_min"],
        PortJudge::Port(port_pcie_min),
    ),
    (&["fw_ver"], PortJudge::Port(port_fw_ver)),
    (&["all_alike"], PortJudge::Layer(port_all_alike)),
];

pub(crate) fn judge_ports(
    l: &LinksReport,
    p: &Policy,
    sect: &str,
    layer: &str,
    r: &PortRules,
    out: &mut Vec<Finding>,
) {
    let set = set_keys(p, sect, JudgedBy::Ports);
    if set.is_empty() {
        return;
    }
    let x = Ports {
        l,
        sect,
        layer,
        r,
        ports: ports_of(l, layer),
    };
    let key = |k: &str| x.key(k);
    if let Some(e) = &l.rdma.unreadable {
        // Whether there are ports at all is unknown: every rule, counts too.
        for k in set {
            out.push(not_evaluated(
                &key(k),
                format!("the RDMA devices could not be listed: {e}"),
            ));
        }
        return;
    }
    if x.ports.is_empty() {
        for k in set.iter().filter(|k| !k.starts_with("count")) {
            let fact = match layer {
                "InfiniBand" => MissingFact::InfinibandPort,
                _ => MissingFact::RoceNetdev,
            };
            out.push(nothing_here(
                &key(k),
                Some(fact),
                format!("no {layer} ports to judge"),
            ));
        }
    }
    let mut ports_done = false;
    for (_, judge) in PORT_RULES {
        match judge {
            PortJudge::Layer(j) => j(&x, out),
            PortJudge::Port(_) if ports_done => {}
            PortJudge::Port(_) => {
                ports_done = true;
                for (d, p) in &x.ports {
                    for (_, judge) in PORT_RULES {
                        if let PortJudge::Port(j) = judge {
                            j(&x, d, p, out);
                        }
                    }
                }
            }
        }
    }
}

fn port_count(x: &Ports, out: &mut Vec<Finding>) {
    let (l, layer, r, ports) = (x.l, x.layer, x.r, &x.ports);
    let key = |k: &str| x.key(k);
    let names: Vec<String> = ports.iter().map(|(d, p)| subject(d, p)).collect();
    // Ports whose link_layer could not be read may be this layer's: a count that they
    // could make right is unknown, not wrong.
    let unlayered: Vec<String> = l
        .devices
        .iter()
        .flat_map(|d| d.ports.iter().map(move |p| (d, p)))
        .filter(|(_, p)| p.link_layer.is_none())
        .map(|(d, p)| subject(d, p))
        .collect();
    let (known, maybe) = (ports.len() as u64, (ports.len() + unlayered.len()) as u64);
    let unknown_count = |k: &str| {
        not_evaluated(
            &key(k),
            format!(
                "{known} found, and the link_layer of {} could not be read",
                unlayered.join(", ")
            ),
        )
    };
    if let Some(n) = r.count.filter(|n| *n != known) {
        if (known..=maybe).contains(&n) {
            out.push(unknown_count("count"));
        } else {
            out.push(
                violation(&key("count"), format!("{layer} ports"), format!("{} found, {n} expected", crate::finding::spell::count(known as usize, &format!("{layer} port"), &format!("{layer} ports"))))
                    .evidence("found", names.clone())
                    .evidence("expected", n)
                    .fix("an HCA is missing, disabled or in the wrong link-layer mode: `lspci -D -d 15b3:` lists the Mellanox adapters, `for d in $(lspci -D -d 15b3: | cut -d' ' -f1); do mlxconfig -d $d q LINK_TYPE_P1; done` their link type, `dmesg | grep mlx5` their errors"),
            );
        }
    }
    if let Some(n) = r.count_min.filter(|n| *n > known) {
        if maybe >= n {
            out.push(unknown_count("count_min"));
        } else {
            out.push(
                violation(
                    &key("count_min"),
                    format!("{layer} ports"),
                    format!(
                        "{} found, at least {n} expected",
                        crate::finding::spell::count(
                            known as usize,
                            &format!("{layer} port"),
                            &format!("{layer} ports")
                        )
                    ),
                )
                .evidence("found", names.clone())
                .evidence("count_min", n),
            );
        }
    }
}

fn port_state(x: &Ports, d: &LinkDevice, p: &LinkPort, out: &mut Vec<Finding>) {
    let r = x.r;
    let s = subject(d, p);
    if !r.state.is_empty() && p.state.is_none() {
        // Unreadable (missing, EACCES) is unknown, never "not ACTIVE".
        out.push(not_evaluated(
            &x.key("state"),
            format!("{s}: its state could not be read"),
        ));
    } else if !r.state.is_empty() {
        let st = p.state.as_ref().map(|x| x.name.as_str()).unwrap_or("unknown");
        if !r.state.iter().any(|x| x == st) {
            out.push(
                violation(&x.key("state"), &s, format!("{s} is {st}, expected {}", r.state.join(" or ")))
                    .evidence("state", st)
                    .evidence("phys_state", p.phys_state.as_ref().map(|x| x.name.clone()))
                    .fix(format!("check the cable and the switch port{}; Polling means no link partner, INIT/ARMED means no subnet manager has configured it", crate::probe::links::cable_tools(d, p))),
            );
        }
    }
}

fn port_rate_min_gbps(x: &Ports, d: &LinkDevice, p: &LinkPort, out: &mut Vec<Finding>) {
    let r = x.r;
    let s = subject(d, p);
    let rate = p.rate.as_ref();
    if let Some(min) = r.rate_min_gbps {
        match rate {
            None => out.push(not_evaluated(&x.key("rate_min_gbps"), format!("{s}: no rate attribute"))),
            Some(rt) if rt.gbps < min => out.push(
                violation(&x.key("rate_min_gbps"), &s, format!(
                    "{s} runs at {}, below {}",
                    crate::finding::spell::rate(rt.gbps, rt.lanes, rt.speed.as_deref()),
                    crate::finding::spell::gbps(min)
                ))
                    .evidence("rate", rt.raw.as_str())
                    .evidence("rate_min_gbps", min)
                    .fix(format!("the link trained down: reseat or replace the cable/transceiver, check the switch port speed settings{}", crate::probe::links::cable_tools(d, p))),
            ),
            _ => {}
        }
    }
}

fn port_width(x: &Ports, d: &LinkDevice, p: &LinkPort, out: &mut Vec<Finding>) {
    let r = x.r;
    let s = subject(d, p);
    let rate = p.rate.as_ref();
    if !r.width.is_empty() {
        let w = rate.and_then(|x| x.lanes).map(|n| format!("{n}X"));
        match w {
            None => out.push(not_evaluated(
                &x.key("width"),
                format!("{s}: no width in the rate attribute"),
            )),
            Some(w) if !r.width.contains(&w) => out.push(
                violation(
                    &x.key("width"),
                    &s,
                    format!("{s} is {w} wide, expected {}", r.width.join(" or ")),
                )
                .evidence("rate", rate.map(|x| x.raw.clone()))
                .fix(format!(
                    "a lane is down: reseat or replace the cable; lane errors{}",
                    crate::probe::links::cable_tools(d, p)
                )),
            ),
            _ => {}
        }
    }
}

fn port_speed(x: &Ports, d: &LinkDevice, p: &LinkPort, out: &mut Vec<Finding>) {
    let r = x.r;
    let s = subject(d, p);
    let rate = p.rate.as_ref();
    if !r.speed.is_empty() {
        match rate.and_then(|x| x.speed_name()) {
            None => out.push(not_evaluated(
                &x.key("speed"),
                format!("{s}: no lane speed in the rate attribute"),
            )),
            Some(sp) if !r.speed.iter().any(|x| x == sp) => out.push(
                violation(
                    &x.key("speed"),
                    &s,
                    format!("{s} runs at {sp}, expected {}", r.speed.join(" or ")),
                )
                .evidence("rate", rate.map(|x| x.raw.clone()))
                .fix("the link trained at a lower speed: check the cable's rating and the switch port"),
            ),
            _ => {}
        }
    }
}

fn port_pcie_min(x: &Ports, d: &LinkDevice, p: &LinkPort, out: &mut Vec<Finding>) {
    let r = x.r;
    let s = subject(d, p);
    for (k, min) in [
        ("pcie_gen_min", r.pcie_gen_min),
        ("pcie_width_min", r.pcie_width_min),
    ] {
        if let Some(min) = min {
            out.extend(pcie_minimum(&x.key(k), k, min, d, &s));
        }
    }
}

fn port_fw_ver(x: &Ports, d: &LinkDevice, p: &LinkPort, out: &mut Vec<Finding>) {
    let r = x.r;
    let s = subject(d, p);
    if !r.fw_ver.is_empty() {
        match &d.attrs.fw_ver {
            None => out.push(not_evaluated(&x.key("fw_ver"), format!("{}: no fw_ver", d.name))),
            Some(v) if !r.fw_ver.iter().any(|x| v.starts_with(x.as_str())) => out.push(
                violation(
                    &x.key("fw_ver"),
                    &s,
                    format!(
                        "{} firmware {v} is not one of the allowed {}",
                        d.name,
                        r.fw_ver.join(", ")
                    ),
                )
                .evidence("fw_ver", v.as_str())
                .fix("flash the fleet's firmware (mlxfwmanager) and reset the adapter"),
            ),
            _ => {}
        }
    }
}

fn port_all_alike(x: &Ports, out: &mut Vec<Finding>) {
    let (r, ports) = (x.r, &x.ports);
    let key = |k: &str| x.key(k);
    if r.all_alike == Some(true) && ports.len() > 1 {
        let fields: [(&str, PortField); 4] = [
            ("rate", |_, p| p.rate.as_ref().map(|r| r.raw.clone())),
            ("hca_type", |d, _| {
                d.attrs.hca_type.clone().or_else(|| d.attrs.board_id.clone())
            }),
            ("fw_ver", |d, _| d.attrs.fw_ver.clone()),
            ("pcie_link", |d, _| {
                d.attrs.pci_link.as_ref().map(|l| {
                    format!(
                        "{} x{}",
                        l.current_speed.as_ref().map(|s| s.raw.as_str()).unwrap_or("?"),
                        l.current_width.map(|w| w.to_string()).unwrap_or("?".into())
                    )
                })
            }),
        ];
        for (field, get) in fields {
            let vals: Vec<Option<String>> = ports.iter().map(|(d, p)| get(d, p)).collect();
            let mut counts: BTreeMap<&Option<String>, usize> = BTreeMap::new();
            for v in &vals {
                *counts.entry(v).or_default() += 1;
            }
            let Some((maj, n)) = counts.iter().max_by_key(|(_, n)| **n).map(|(v, n)| (*v, *n)) else {
                continue;
            };
            if counts.len() == 1 {
                continue;
            }
            for ((d, p), v) in ports.iter().zip(&vals) {
                if v.is_none() && maj.is_some() {
                    // A value that could not be read is not a different one.
                    out.push(not_evaluated(
                        &key("all_alike"),
                        format!("{}: its {field} could not be read", subject(d, p)),
                    ));
                    continue;
                }
                if v != maj {
                    let s = subject(d, p);
                    out.push(
                        violation(
                            &key("all_alike"),
                            &s,
                            // Shown in the one rendered unit; the evidence keeps the kernel's words.
                            format!(
                                "{s} {field} is {}, unlike {n} of {} ports ({})",
                                v.as_deref().unwrap_or("unknown").replace(" Gb/sec", " Gb/s"),
                                ports.len(),
                                maj.as_deref().unwrap_or("unknown").replace(" Gb/sec", " Gb/s")
                            ),
                        )
                        .evidence("field", field)
                        .evidence("value", v.clone())
                        .evidence("majority", maj.clone())
                        .evidence("majority_ports", n),
                    );
                }
            }
        }
    }
}

pub(crate) fn judge_counters(l: &LinksReport, p: &Policy, out: &mut Vec<Finding>) {
    if p.counters_max_per_hour.is_empty() {
        return;
    }
    if let Some(why) = l.sample.as_ref().and_then(|s| s.counters_reset.as_ref()) {
        out.push(not_evaluated(
            "counters.max_per_hour",
            format!("the counters were reset: {why}; a rate needs two samples of one boot"),
        ));
        return;
    }
    let Some(secs) = l.sample.as_ref().and_then(|s| s.interval_s).filter(|s| *s > 0.0) else {
        out.push(not_evaluated(
            "counters.max_per_hour",
            "counter rates need two samples: run with --interval SECONDS (live) or --baseline SNAPSHOT",
        ));
        return;
    };
    for name in p.counters_max_per_hour.keys() {
        let sampled = l
            .devices
            .iter()
            .flat_map(|d| &d.ports)
            .any(|port| port.counter(name).is_some_and(|c| c.delta.is_some()));
        if !sampled {
            out.push(not_evaluated(
                &format!("counters.max_per_hour.{name}"),
                format!("no port has a sampled {name} counter"),
            ));
        }
    }
    for d in &l.devices {
        for port in &d.ports {
            let s = subject(d, port);
            for (name, max) in &p.counters_max_per_hour {
                let Some(c) = port.counter(name) else { continue };
                let Some(delta) = &c.delta else { continue };
                let (inc, exact) = match delta.exact() {
                    Some(v) => (v, true),
                    None => (delta.lower_bound(), false),
                };
                let per_hour = inc as f64 * 3600.0 / secs;
                if per_hour > *max {
                    out.push(
                        violation("counters.max_per_hour", &s, format!(
                            "{s} {name} grew by {}{inc} in {secs:.0} s ({per_hour:.1}/h), at most {max}/h allowed",
                            if exact { "" } else { "at least " }
                        ))
                        .evidence("counter", name.as_str())
                        .evidence("delta", inc)
                        .evidence("interval_s", secs)
                        .evidence("per_hour", per_hour)
                        .evidence("max_per_hour", *max)
                        .fix(format!("errors on a live link: replace the cable or transceiver, and check the switch side{}", crate::probe::links::cable_tools(d, port))),
                    );
                }
            }
        }
    }
}
