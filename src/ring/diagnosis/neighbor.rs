//! The switch port at the other end of a rank's data port, so that a ticket names it
//! (`node-b mlx5_3 (eth3) <-> leaf-07 Eth1/12`): learned by each rank before it joins, from
//! lldpd's table (`lldpcli -f json0 show neighbors ports IF`) or, with `--lldp-wait`, from an
//! LLDP frame heard on the netdev (the way `qos --lldp` listens); carried in the rank's hello
//! ([`RankInfo::neighbor`]) and attached by rank 0 to the verdicts that name the rank.
//!
//! Pure: [`from_lldpcli`], [`from_frame`], [`attach`], [`end_text`]; the rank learns its
//! neighbour through the host in the ring's `portfacts` module.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::ring::model::{Action, Neighbor, RankInfo, Verdict, VerdictKind};
use crate::sysfs::lldp::Lldpdu;

/// `[{"value": "x"}]` (json0's shape for every leaf) or a plain string: the text.
fn leaf(v: Option<&Value>) -> Option<String> {
    let v = v?;
    let s = match v {
        Value::String(s) => s.as_str(),
        Value::Array(a) => a.first()?.get("value")?.as_str()?,
        Value::Object(o) => o.get("value")?.as_str()?,
        _ => return None,
    };
    Some(s.trim().to_string()).filter(|s| !s.is_empty())
}

/// The first element of a json0 list (`"chassis": [{...}]`), or the object itself.
fn first(v: Option<&Value>) -> Option<&Value> {
    match v? {
        Value::Array(a) => a.first(),
        o @ Value::Object(_) => Some(o),
        _ => None,
    }
}

/// lldpd's neighbour of `ifname` from `lldpcli -f json0 show neighbors` output
/// (`{"lldp": [{"interface": [{"name": "eth3", "chassis": [{"id": [{"type", "value"}],
/// "name": [{"value"}]}], "port": [{"id": [...], "descr": [...]}]}]}]}`). Pure; None when
/// it lists none for `ifname` or names no switch and port.
pub(crate) fn from_lldpcli(text: &str, ifname: &str) -> Option<Neighbor> {
    let v: Value = serde_json::from_str(text).ok()?;
    let lldp = first(v.get("lldp"))?;
    let ifaces = lldp.get("interface")?.as_array()?;
    let i = ifaces
        .iter()
        .find(|i| leaf(i.get("name")).as_deref() == Some(ifname))?;
    let chassis = first(i.get("chassis"));
    let port = first(i.get("port"));
    let id_of = |o: Option<&Value>| {
        first(o.and_then(|o| o.get("id"))).and_then(|id| leaf(id.get("value")).or(leaf(Some(id))))
    };
    Neighbor {
        system_name: leaf(chassis.and_then(|c| c.get("name"))),
        chassis_id: id_of(chassis),
        port_id: id_of(port),
        port_description: leaf(port.and_then(|p| p.get("descr"))),
        source: "lldpd".into(),
    }
    .checked()
}

/// The neighbour an LLDPDU names. Pure; None when it names no switch and port.
pub(crate) fn from_frame(d: &Lldpdu) -> Option<Neighbor> {
    Neighbor {
        system_name: d.system_name.clone(),
        chassis_id: d.chassis_id.clone(),
        port_id: d.port_id.clone(),
        port_description: d.port_description.clone(),
        source: "lldp".into(),
    }
    .checked()
}

/// The rank's own port as a person names it: `eth1` over TCP, `mlx5_3 (eth3)` from an
/// RDMA label `mlx5_3:1 gid 3 (eth3)` (port 1 implied), `mlx5_0:2` for another port.
fn local_port(i: &RankInfo) -> Option<String> {
    let label = i.device.as_deref()?.trim();
    let dev = label.split_whitespace().next()?;
    let dev = dev.strip_suffix(":1").unwrap_or(dev);
    Some(match i.netdev().filter(|n| *n != dev) {
        Some(n) => format!("{dev} ({n})"),
        None => dev.to_string(),
    })
}

/// `node-b mlx5_3 (eth3) <-> leaf-07 Eth1/12`, for a rank whose neighbour is known. Pure.
pub(crate) fn end_text(i: &RankInfo) -> Option<String> {
    let n = i.neighbor.as_ref()?;
    let mine = match local_port(i) {
        Some(p) => format!("{} {p}", i.host),
        None => i.host.clone(),
    };
    Some(format!("{mine} <-> {}", n.describe()))
}

/// Give every verdict that names hardware (a drain or a ticket) `evidence.neighbor`:
/// `{"from": {...}, "to": {...}}`, the switch port at each end it names whose neighbour is
/// known (host, rank, the local port, the LLDP fields, source, and the `text` a ticket
/// quotes). Ends without a known neighbour are left out; nothing is invented. Pure.
pub(crate) fn attach(verdicts: &mut [Verdict], ranks: &[RankInfo]) {
    for v in verdicts.iter_mut() {
        if v.kind.action() == Action::Investigate || v.kind == VerdictKind::RailStopped {
            continue;
        }
        let mut ends = BTreeMap::new();
        for (end, rank) in [("from", v.from_rank), ("to", v.to_rank)] {
            let Some(i) = rank.and_then(|r| ranks.iter().find(|i| i.rank == r)) else {
                continue;
            };
            let (Some(n), Some(text)) = (i.neighbor.as_ref(), end_text(i)) else {
                continue;
            };
            ends.insert(
                end.to_string(),
                json!({
                    "rank": i.shown(),
                    "host": i.host,
                    "port": local_port(i),
                    "system_name": n.system_name,
                    "chassis_id": n.chassis_id,
                    "port_id": n.port_id,
                    "port_description": n.port_description,
                    "source": n.source,
                    "text": text,
                }),
            );
        }
        if !ends.is_empty() {
            v.evidence.insert("neighbor".into(), json!(ends));
        }
    }
}

/// The `text` of each end in a verdict's `evidence.neighbor`, from then to; for a verdict
/// every rail gives, each rail's (`evidence.rails_neighbor`, in rail order), each once. Pure.
pub(crate) fn texts(v: &Verdict) -> Vec<String> {
    let ends = |n: &serde_json::Value| -> Vec<String> {
        ["from", "to"]
            .iter()
            .filter_map(|e| n.get(e)?.get("text")?.as_str().map(str::to_string))
            .collect()
    };
    let mut out: Vec<String> = v.evidence.get("neighbor").map(ends).unwrap_or_default();
    if let Some(serde_json::Value::Object(per)) = v.evidence.get("rails_neighbor") {
        let mut rails: Vec<(u64, &serde_json::Value)> = per
            .iter()
            .map(|(k, n)| (k.parse().unwrap_or(u64::MAX), n))
            .collect();
        rails.sort_by_key(|(k, _)| *k);
        for t in rails.into_iter().flat_map(|(_, n)| ends(n)) {
            if !out.contains(&t) {
                out.push(t);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sysfs::lldp;
    use crate::ring::diagnosis::localize::sim::ranks;

    const JSON0: &str = r#"{"lldp": [{"interface": [{"name": "eth3", "via": "LLDP", "rid": "1",
        "age": "0 day, 00:01:02",
        "chassis": [{"id": [{"type": "mac", "value": "50:6b:4b:11:22:33"}],
                     "name": [{"value": "leaf-07"}], "descr": [{"value": "SONiC"}]}],
        "port": [{"id": [{"type": "ifname", "value": "Ethernet1/12"}],
                  "descr": [{"value": "Eth1/12"}], "ttl": [{"value": "120"}]}]}]}]}"#;

    #[test]
    fn lldpcli_json0_table() {
        let n = from_lldpcli(JSON0, "eth3").unwrap();
        assert_eq!(n.system_name.as_deref(), Some("leaf-07"));
        assert_eq!(n.chassis_id.as_deref(), Some("50:6b:4b:11:22:33"));
        assert_eq!(n.port_id.as_deref(), Some("Ethernet1/12"));
        assert_eq!(n.port_description.as_deref(), Some("Eth1/12"));
        assert_eq!(
            (n.source.as_str(), n.describe()),
            ("lldpd", "leaf-07 Ethernet1/12".to_string())
        );
        // Another interface, an empty table, garbage: nothing invented.
        assert_eq!(from_lldpcli(JSON0, "eth1"), None);
        assert_eq!(from_lldpcli(r#"{"lldp": [{}]}"#, "eth3"), None);
        assert_eq!(from_lldpcli("lldpd not running", "eth3"), None);
        // A port ID that is a MAC names the port by its description; no name: the chassis.
        let mac = JSON0
            .replace(
                r#""type": "ifname", "value": "Ethernet1/12""#,
                r#""type": "mac", "value": "50:6b:4b:aa:bb:cc""#,
            )
            .replace(r#""name": [{"value": "leaf-07"}], "#, "");
        assert_eq!(
            from_lldpcli(&mac, "eth3").unwrap().describe(),
            "50:6b:4b:11:22:33 Eth1/12"
        );
        // Escapes in a switch's strings are not printed: unknown instead.
        let esc = JSON0.replace("leaf-07", "leaf\\u001b[31m");
        assert_eq!(from_lldpcli(&esc, "eth3"), None);
    }

    #[test]
    fn a_frame_names_the_switch_port() {
        let f = lldp::encode::frame(
            [0x50, 0x6b, 0x4b, 0x11, 0x22, 0x33],
            "leaf-07",
            "Ethernet1/12",
            &[3],
            &[],
        );
        let n = from_frame(&lldp::parse_frame(&f).unwrap()).unwrap();
        assert_eq!(
            (n.describe(), n.source.as_str()),
            ("leaf-07 Ethernet1/12".to_string(), "lldp")
        );
        assert_eq!(from_frame(&Lldpdu::default()), None);
    }

    /// A hello's neighbour that is not bounded, printable text reads as unknown; the rank
    /// is still seated.
    #[test]
    fn a_hello_neighbor_is_checked_not_trusted() {
        let ok = json!({"rank": 1, "host": "node-b", "address": "a", "device": "eth1", "transport": "tcp",
            "pid": null, "neighbor": {"system_name": "leaf-07", "chassis_id": null, "port_id": "Eth1/12",
            "port_description": null, "source": "lldp"}});
        let i: RankInfo = serde_json::from_value(ok.clone()).unwrap();
        assert_eq!(i.neighbor.unwrap().describe(), "leaf-07 Eth1/12");
        for bad in [
            json!({"system_name": "x".repeat(300), "port_id": "p", "source": "lldp"}),
            json!({"system_name": "leaf\u{1b}[2J", "port_id": "p", "source": "lldp"}),
            json!({"system_name": "leaf-07", "source": "lldp"}),
            json!("leaf-07 Eth1/12"),
            json!(42),
        ] {
            let mut v = ok.clone();
            v["neighbor"] = bad.clone();
            let i: RankInfo = serde_json::from_value(v).unwrap_or_else(|e| panic!("{bad}: {e}"));
            assert_eq!(i.neighbor, None, "{bad}");
        }
        let mut v = ok;
        v.as_object_mut().unwrap().remove("neighbor");
        assert_eq!(serde_json::from_value::<RankInfo>(v).unwrap().neighbor, None);
    }

    #[test]
    fn verdicts_name_the_switch_port_at_each_known_end() {
        let mut rs = ranks(4);
        rs[1].device = Some("mlx5_3:1 gid 3 (eth3)".into());
        rs[1].neighbor = Some(Neighbor {
            system_name: Some("leaf-07".into()),
            chassis_id: None,
            port_id: Some("Eth1/12".into()),
            port_description: None,
            source: "lldp".into(),
        });
        let v = Verdict::bare;
        let mut vs = vec![
            v(VerdictKind::SlowLink, Some(1), Some(3)),
            v(VerdictKind::SlowIngress, None, Some(1)),
            v(VerdictKind::SlowLink, Some(0), Some(2)),
            v(VerdictKind::RankLost, Some(1), None),
        ];
        attach(&mut vs, &rs);
        assert_eq!(texts(&vs[0]), ["node-b mlx5_3 (eth3) <-> leaf-07 Eth1/12"]);
        let e = &vs[0].evidence["neighbor"];
        assert_eq!(e["from"]["port"], json!("mlx5_3 (eth3)"));
        assert_eq!(e["from"]["rank"], json!(1));
        assert!(e.get("to").is_none(), "{e}");
        assert_eq!(vs[1].evidence["neighbor"]["to"]["system_name"], json!("leaf-07"));
        // No end known, or nothing to act on at the hardware: no neighbour.
        assert!(!vs[2].evidence.contains_key("neighbor"));
        assert!(!vs[3].evidence.contains_key("neighbor"));
        // Over TCP the port is the netdev itself.
        rs[1].device = Some("eth1".into());
        assert_eq!(end_text(&rs[1]).unwrap(), "node-b eth1 <-> leaf-07 Eth1/12");
    }
}
