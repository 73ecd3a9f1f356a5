//! `links` output: per-device port tables with counters, and Prometheus exposition named
//! `fabprobe_infiniband_*` after node_exporter's infiniband collector (same suffixes, so a
//! dashboard query maps across), never `node_infiniband_*`: that collector is on by default,
//! and the same names with other HELP in the textfile directory break the whole scrape.

use crate::finding::Finding;
use crate::probe::links::{Counter, LinkDevice, LinkPort, LinksReport};
use crate::render::{PromFamilies, prom_label, text};
use crate::sysfs::infiniband::{CounterDir, Delta};

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map(|x| x.to_string()).unwrap_or_else(|| "-".into())
}

fn device_header(d: &LinkDevice) -> String {
    let a = &d.attrs;
    let mut s = format!(
        "{}: {} {}, fw {}, board {}, node_guid {}",
        d.name,
        a.node_type
            .as_ref()
            .map(|n| n.name.clone())
            .unwrap_or_else(|| "?".into()),
        opt(&a.hca_type),
        opt(&a.fw_ver),
        opt(&a.board_id),
        opt(&a.node_guid)
    );
    if let Some(bdf) = &a.pci_bdf {
        s.push_str(&format!("\n  PCIe {bdf}"));
        if let Some(l) = &a.pci_link {
            let sp = |x: &Option<crate::sysfs::pci::LinkSpeed>| {
                x.as_ref().map(|v| v.raw.clone()).unwrap_or_else(|| "?".into())
            };
            s.push_str(&format!(
                ": {} x{} (max {} x{}){}",
                sp(&l.current_speed),
                opt(&l.current_width),
                sp(&l.max_speed),
                opt(&l.max_width),
                if l.width_degraded() || l.speed_degraded() {
                    "  DOWNTRAINED"
                } else {
                    ""
                }
            ));
        }
        if let Some(drv) = &a.driver {
            s.push_str(&format!(", driver {drv}"));
        }
    }
    if !a.pci_netdevs.is_empty() {
        s.push_str(&format!(", netdevs {}", a.pci_netdevs.join(",")));
    }
    // Each line within the width (the PCIe line's `  DOWNTRAINED` gap is not a table's).
    s.lines()
        .map(|l| {
            let body = l.trim_start();
            let lead = &l[..l.len() - body.len()];
            text::wrap(lead, body, lead.len() + 2)
        })
        .collect()
}

fn value_text(c: &Counter) -> String {
    match (c.value, &c.unavailable) {
        (Some(v), _) => {
            let mut s = v.to_string();
            if c.saturated {
                s.push_str(" (saturated)");
            }
            s
        }
        (None, Some(why)) => format!("unavailable ({why})"),
        (None, None) => "unavailable".into(),
    }
}

fn delta_text(c: &Counter) -> String {
    match &c.delta {
        None => String::new(),
        // Data counters in bytes (the kernel counts 4-byte words).
        Some(Delta::Value { value, wrapped }) => format!(
            "+{}{}",
            match c.delta_bytes {
                Some(b) => format!("{b} B"),
                None => value.to_string(),
            },
            if *wrapped { " (wrapped)" } else { "" }
        ),
        Some(Delta::Saturated { at_least }) => format!(">=+{at_least} (saturated)"),
        Some(Delta::Reset { after }) => format!("reset, {after} since"),
    }
}

/// Data counters in GB/s and, where the port's rate is known, its share of it; other
/// counters in events per second.
fn rate_text(c: &Counter) -> String {
    match (c.rate_per_s, c.rate_gbs) {
        (None, _) => String::new(),
        (Some(_), Some(g)) => {
            let pct = c
                .line_rate_pct
                .map(|p| format!(" ({p:.1}% of line rate)"))
                .unwrap_or_default();
            format!("{}{pct}", text::rate(g))
        }
        (Some(r), None) => format!("{:.2}/s", r),
    }
}

fn counters_block(cs: &[Counter], sampled: bool) -> String {
    if cs.is_empty() {
        return String::new();
    }
    let mut head = vec!["COUNTER", "DIR", "WIDTH", "VALUE"];
    if sampled {
        head.extend(["DELTA", "RATE"]);
    }
    let mut rows = vec![head.iter().map(|s| s.to_string()).collect::<Vec<_>>()];
    // Zeros that stayed zero are noise on call; JSON keeps every counter.
    let shown: Vec<&Counter> = cs
        .iter()
        .filter(|c| c.value != Some(0) || c.delta.as_ref().is_some_and(|d| d.lower_bound() > 0))
        .collect();
    let hidden = cs.len() - shown.len();
    for c in shown {
        let unit = if c.spec.bytes_per_unit.is_some() {
            format!(" x4 = {} B", opt(&c.value_bytes))
        } else {
            String::new()
        };
        let mut r = vec![
            c.name.clone(),
            match c.dir {
                CounterDir::Counters => "counters",
                CounterDir::HwCounters => "hw_counters",
                CounterDir::DeviceHwCounters => "dev hw_counters",
            }
            .to_string(),
            format!(
                "{}{}",
                c.width_bits,
                match c.overflow {
                    crate::sysfs::infiniband::Overflow::Saturates => "s",
                    crate::sysfs::infiniband::Overflow::Wraps => "w",
                }
            ),
            format!(
                "{}{}",
                value_text(c),
                if c.value.is_some() { unit } else { String::new() }
            ),
        ];
        if sampled {
            r.push(delta_text(c));
            r.push(rate_text(c));
        }
        rows.push(r);
    }
    let fit = text::width().map(|w| w.saturating_sub(4));
    let plain = crate::render::gids::columns_fit(&rows, None);
    if fit.is_some_and(|w| plain.lines().any(|l| l.chars().count() > w)) {
        // Too wide: the columns go in blocks of whole cells, the value (and delta, rate)
        // in the first, beside the name; where the counter is kept (DIR, WIDTH) after.
        for r in &mut rows {
            let kept: Vec<String> = r.drain(1..3).collect();
            r.extend(kept);
        }
    }
    let mut out: String = if rows.len() > 1 {
        indented(&crate::render::gids::column_blocks_fit(&rows, fit), "    ")
    } else {
        String::new()
    };
    if hidden > 0 {
        out.push_str(&format!(
            "    ({hidden} counters at 0 not shown; --format json lists every counter)\n"
        ));
    }
    out
}

/// Every line of `text` after `pad`, but the blank lines between column blocks.
fn indented(text: &str, pad: &str) -> String {
    text.lines()
        .map(|l| match l {
            "" => "\n".to_string(),
            l => format!("{pad}{l}\n"),
        })
        .collect()
}

/// The verdict, each device, its ports and counters, moved names marked.
pub(crate) fn table(r: &LinksReport, findings: &[Finding]) -> String {
    text::moved_view(&r.rdma.names_moved, || table_body(r, findings))
}

fn table_body(r: &LinksReport, findings: &[Finding]) -> String {
    if let Some(m) = &r.rdma.message {
        // The verdict first, as on every table: NOT EVALUATED when nothing showed up; what
        // else was said (RDMA NICs whose module is not loaded) is listed under it.
        if findings.iter().any(|f| !f.id.ends_with(".nothing_to_judge")) {
            return text::verdict_first("links", findings, format!("{m}\n"));
        }
        return format!("{}{m}\n", crate::render::text::verdict_line("links", findings));
    }
    let sampled = r.sample.as_ref().is_some_and(|s| s.has_deltas());
    let mut out = sample_header(r);
    for d in &r.devices {
        out.push_str(&device_block(d, sampled));
    }
    if let Some(v) = &r.verbs
        && let Some(e) = &v.error
    {
        out.push_str(&format!("libibverbs: ibv_get_device_list failed with {e}\n"));
    }
    text::verdict_first("links", findings, out)
}

/// What the deltas are against, or why there are none; empty without a sample.
fn sample_header(r: &LinksReport) -> String {
    let Some(s) = &r.sample else {
        return String::new();
    };
    match &s.counters_reset {
        Some(why) => format!(
            "no deltas against {} ({}): the counters were reset: {why}\n\n",
            s.baseline, s.kind
        ),
        None => format!(
            "deltas against {} ({}), interval {}\n\n",
            s.baseline,
            s.kind,
            s.interval_s
                .map(|x| format!("{x:.1} s"))
                .unwrap_or_else(|| "unknown: no rates".into())
        ),
    }
}

/// One device: its header, the port table, then each port's counters and the device's.
fn device_block(d: &LinkDevice, sampled: bool) -> String {
    let mut out = device_header(d);
    let mut rows = vec![
        [
            "PORT",
            "STATE",
            "PHYS_STATE",
            "RATE",
            "LINK",
            "LID",
            "SM_LID",
            "NETDEV",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>(),
    ];
    rows.extend(d.ports.iter().map(port_row));
    // Within the width with the two columns of indent; too wide, in blocks of whole
    // columns each led by PORT (a rate or a state never breaks mid-word).
    let fit = text::width().map(|w| w.saturating_sub(2));
    out.push_str(&indented(
        &crate::render::gids::column_blocks_fit(&rows, fit),
        "  ",
    ));
    for p in &d.ports {
        if !p.counters.is_empty() {
            out.push_str(&format!(
                "  port {} counters (width: s = saturates, w = wraps):\n",
                p.port
            ));
            out.push_str(&counters_block(&p.counters, sampled));
        }
    }
    if !d.device_counters.is_empty() {
        out.push_str("  device counters:\n");
        out.push_str(&counters_block(&d.device_counters, sampled));
    }
    out.push('\n');
    out
}

fn port_row(p: &LinkPort) -> Vec<String> {
    vec![
        p.port.to_string(),
        p.state
            .as_ref()
            .map(|s| format!("{}: {}", s.id, s.name))
            .unwrap_or("-".into()),
        p.phys_state
            .as_ref()
            .map(|s| format!("{}: {}", s.id, s.name))
            .unwrap_or("-".into()),
        p.rate.as_ref().map(|r| r.raw.clone()).unwrap_or("-".into()),
        opt(&p.link_layer),
        p.lid.map(|l| format!("0x{l:x}")).unwrap_or("-".into()),
        p.sm_lid.map(|l| format!("0x{l:x}")).unwrap_or("-".into()),
        netdev_cell(p),
    ]
}

/// The port's netdev, and the other netdevs its GIDs sit on (a bond's slaves, VLANs).
fn netdev_cell(p: &LinkPort) -> String {
    let others: Vec<&str> = p
        .gid_netdevs
        .iter()
        .filter(|n| Some(*n) != p.netdev.as_ref())
        .map(String::as_str)
        .collect();
    if others.is_empty() {
        opt(&p.netdev)
    } else {
        format!("{} (GIDs also on {})", opt(&p.netdev), others.join(","))
    }
}

/// The name suffixes node_exporter's infiniband collector gives the PMA counters (bytes
/// for data); fabprobe prefixes them `fabprobe_infiniband_`.
fn node_exporter_name(name: &str) -> Option<&'static str> {
    Some(match name {
        "port_rcv_data" => "port_data_received_bytes_total",
        "port_xmit_data" => "port_data_transmitted_bytes_total",
        "port_rcv_packets" => "port_packets_received_total",
        "port_xmit_packets" => "port_packets_transmitted_total",
        "unicast_rcv_packets" => "unicast_packets_received_total",
        "unicast_xmit_packets" => "unicast_packets_transmitted_total",
        "multicast_rcv_packets" => "multicast_packets_received_total",
        "multicast_xmit_packets" => "multicast_packets_transmitted_total",
        "port_rcv_errors" => "port_errors_received_total",
        "port_xmit_discards" => "port_discards_transmitted_total",
        "port_rcv_remote_physical_errors" => "port_receive_remote_physical_errors_total",
        "port_rcv_switch_relay_errors" => "port_receive_switch_relay_errors_total",
        "port_rcv_constraint_errors" => "port_constraint_errors_received_total",
        "port_xmit_constraint_errors" => "port_constraint_errors_transmitted_total",
        "port_xmit_wait" => "port_transmit_wait_total",
        "symbol_error" => "symbol_error_total",
        "link_downed" => "link_downed_total",
        "link_error_recovery" => "link_error_recovery_total",
        "local_link_integrity_errors" => "local_link_integrity_errors_total",
        "excessive_buffer_overrun_errors" => "excessive_buffer_overrun_errors_total",
        "VL15_dropped" => "vl15_dropped_total",
        _ => return None,
    })
}

/// Prometheus text exposition for a textfile collector. Unavailable counters are left out
/// (never exported as 0).
pub(crate) fn prom(r: &LinksReport) -> String {
    let mut m = PromFamilies::default();
    for d in &r.devices {
        let a = &d.attrs;
        m.add(
            "fabprobe_infiniband_info",
            "Non-numeric data from /sys/class/infiniband/<device>, value is always 1.",
            "gauge",
            format!(
                "fabprobe_infiniband_info{{board_id=\"{}\",device=\"{}\",firmware_version=\"{}\",hca_type=\"{}\"}} 1",
                prom_label(a.board_id.as_deref().unwrap_or("")),
                prom_label(&d.name),
                prom_label(a.fw_ver.as_deref().unwrap_or("")),
                prom_label(a.hca_type.as_deref().unwrap_or(""))
            ),
        );
        for p in &d.ports {
            let l = format!("device=\"{}\",port=\"{}\"", prom_label(&d.name), p.port);
            port_prom(&mut m, &l, p);
            for c in &p.counters {
                counter_prom(&mut m, &l, c);
            }
        }
    }
    m.text()
}

/// A port's state, physical state and rate, each where it was read.
fn port_prom(m: &mut PromFamilies, l: &str, p: &LinkPort) {
    if let Some(s) = &p.state {
        m.add(
            "fabprobe_infiniband_state_id",
            "State of the InfiniBand port (0: no change, 1: down, 2: init, 3: armed, 4: active, 5: act defer)",
            "gauge",
            format!("fabprobe_infiniband_state_id{{{l}}} {}", s.id),
        );
    }
    if let Some(s) = &p.phys_state {
        m.add(
            "fabprobe_infiniband_physical_state_id",
            "Physical state of the InfiniBand port (0: no change, 1: sleep, 2: polling, 3: disable, 4: shift, 5: link up, 6: link error recover, 7: phytest)",
            "gauge",
            format!("fabprobe_infiniband_physical_state_id{{{l}}} {}", s.id),
        );
    }
    if let Some(rate) = &p.rate {
        m.add(
            "fabprobe_infiniband_rate_bytes_per_second",
            "Maximum signal transfer rate",
            "gauge",
            format!(
                "fabprobe_infiniband_rate_bytes_per_second{{{l}}} {}",
                (rate.gbps * 1e9 / 8.0) as u64
            ),
        );
    }
}

/// One counter under its node_exporter name (bytes for data) or as a `hw_counter`, and its
/// rate over the sample; an unavailable counter is left out.
fn counter_prom(m: &mut PromFamilies, l: &str, c: &Counter) {
    let Some(v) = c.value else { return };
    match (c.dir, node_exporter_name(&c.name)) {
        (CounterDir::Counters, Some(n)) => {
            let v = v.saturating_mul(c.spec.bytes_per_unit.map(u64::from).unwrap_or(1));
            m.add(
                &format!("fabprobe_infiniband_{n}"),
                &format!("Infiniband counter {}", c.name),
                "counter",
                format!("fabprobe_infiniband_{n}{{{l}}} {v}"),
            );
        }
        _ => m.add(
            "fabprobe_infiniband_hw_counter_total",
            "A counter of ports/<n>/counters or hw_counters without a node_exporter-style name.",
            "counter",
            format!(
                "fabprobe_infiniband_hw_counter_total{{{l},counter=\"{}\"}} {v}",
                prom_label(&c.name)
            ),
        ),
    }
    if let Some(rate) = c.rate_per_s {
        m.add(
            "fabprobe_infiniband_counter_rate_per_second",
            "Counter increase per second over the sampling interval (bytes/s for data counters).",
            "gauge",
            format!(
                "fabprobe_infiniband_counter_rate_per_second{{{l},counter=\"{}\"}} {rate}",
                prom_label(&c.name)
            ),
        );
    }
}
