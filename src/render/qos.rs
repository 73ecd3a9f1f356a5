//! `qos` output: per netdev the DCB/PFC/ETS/trust state, a per-priority table (PFC from DCB
//! and from the counter set, ETS class, ECN, pause counters), storms, CNPs; Prometheus
//! exposition of the counters.

use crate::finding::Finding;
use crate::probe::qos::{
    Count, DcbView, EthtoolView, PauseCounters, PrioRow, QosIf, QosReport, RoceClass, SwitchView,
};
use crate::render::gids::column_blocks;
use crate::render::{PromFamilies, prom_label, text};
use crate::sysfs::dcb::tsa_name;

fn b(v: Option<bool>) -> String {
    match v {
        Some(true) => "on".into(),
        Some(false) => "off".into(),
        None => "?".into(),
    }
}

fn count(c: &Count, sampled: bool) -> String {
    let Some(v) = c.value else { return "-".into() };
    if c.went_backwards {
        return format!("{v} (went back)");
    }
    match (sampled, c.delta, c.rate_per_s) {
        (true, Some(d), Some(r)) => format!("{v} (+{d}, {r:.1}/s)"),
        (true, Some(d), None) => format!("{v} (+{d})"),
        _ => v.to_string(),
    }
}

/// A pause duration counter (microseconds): over a sample, also the share of the time the
/// port was paused (µs paused per second / 10^6).
fn paused(c: &Count, sampled: bool) -> String {
    match (sampled, c.went_backwards, c.value, c.delta, c.rate_per_s) {
        (true, false, Some(v), Some(d), Some(r)) => {
            format!("{v} (+{d}, {:.1}% of the time)", (r / 1e4).min(100.0))
        }
        _ => count(c, sampled),
    }
}

fn list(v: &[u8]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(",")
    }
}

fn one(i: &QosIf, sampled: bool) -> String {
    let mut s = i.ifname.clone();
    if let (Some(d), Some(p)) = (&i.rdma_device, i.rdma_port) {
        s.push_str(&format!(" ({})", crate::finding::spell::port(d, p)));
    }
    s.push('\n');
    s.push_str(&dcb_lines(&i.dcb));
    s.push_str(&ethtool_line(&i.ethtool));
    match (&i.ecn, &i.ecn_unknown_reason) {
        (Some(e), _) => s.push_str(&format!(
            "  ECN: reaction point on priority {}, notification point on priority {}; cnp_dscp {}, cnp_802p_prio {}\n",
            list(&e.rp_enabled),
            list(&e.np_enabled),
            e.cnp_dscp.map(|v| v.to_string()).unwrap_or_else(|| "-".into()),
            e.cnp_802p_prio.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
        )),
        (None, Some(r)) => s.push_str(&format!("  ECN: {r}\n")),
        _ => {}
    }
    if i.rdma_device.is_some() {
        s.push_str(&roce_line(&i.roce));
    }
    // Without DCB and without a driver that keeps per-priority counters there is nothing
    // per priority to show.
    if i.dcb.error.is_none() || i.priorities.iter().any(|p| p.pfc_counters.is_some()) {
        // Counters and names stay whole: a narrow terminal gets blocks of columns.
        s.push_str(&column_blocks(&priority_rows(i, sampled)));
    }
    s.push_str(&pause_lines(i, sampled));
    if let Some(sw) = &i.switch {
        s.push_str(&switch_lines(sw));
    }
    if !i.cnp.is_empty() {
        s.push_str(&format!(
            "  {}\n",
            i.cnp
                .iter()
                .map(|c| format!("{} {}", c.name, count(&c.count, sampled)))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    s
}

fn joined(v: &[impl ToString]) -> String {
    v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",")
}

/// The DCB state (DCBX, trust, PFC, receive buffers), or why it could not be read.
fn dcb_lines(d: &DcbView) -> String {
    match &d.error {
        Some(e) if e == "EOPNOTSUPP" => {
            "  DCB: not supported by this driver (DCB netlink: EOPNOTSUPP)\n".into()
        }
        Some(e) if e == "not_captured" => "  DCB: not captured in this snapshot\n".into(),
        Some(e) => format!("  DCB: netlink error {e}\n"),
        None => {
            let mut s = format!(
                "  DCB: DCBX {}, trust {}, PFC on priority {}{}\n",
                d.dcbx_mode.as_deref().unwrap_or("unknown"),
                d.trust.as_deref().unwrap_or("?"),
                d.pfc_enabled
                    .as_deref()
                    .map(list)
                    .unwrap_or_else(|| "? (no PFC attribute)".into()),
                d.pfc_delay.map(|x| format!(", delay {x}")).unwrap_or_default()
            );
            if let Some(buf) = &d.buffer {
                s.push_str(&format!(
                    "  Receive buffers (bytes): {}; total {}; prio2buffer {}\n",
                    joined(&buf.buffer_size_bytes),
                    buf.total_size_bytes,
                    joined(&buf.prio2buffer)
                ));
            }
            for n in &d.notes {
                s.push_str(&format!("  DCB reply: {n}\n"));
            }
            s
        }
    }
}

fn ethtool_line(e: &EthtoolView) -> String {
    match &e.error {
        Some(err) => format!("  ethtool statistics: {err}\n"),
        None => format!(
            "  ethtool statistics: {} counters; pause counters for priority {}; global pause counters {}\n",
            e.counters_total,
            list(&e.pfc_priorities_from_counters),
            if e.global_pause_counters {
                "present (global pause on)"
            } else {
                "absent"
            }
        ),
    }
}

/// The RoCE traffic's class and priority, with where each was read.
fn roce_line(r: &RoceClass) -> String {
    format!(
        "  RoCE traffic class {} ({}), dscp {}: priority {} ({})\n",
        r.traffic_class
            .map(|v| v.to_string())
            .unwrap_or_else(|| "?".into()),
        r.traffic_class_source,
        r.dscp.map(|v| v.to_string()).unwrap_or_else(|| "?".into()),
        r.priority
            .map(|v| v.to_string())
            .unwrap_or_else(|| "unknown".into()),
        r.priority_source
    )
}

/// The per-priority table: header, then one row per priority.
fn priority_rows(i: &QosIf, sampled: bool) -> Vec<Vec<String>> {
    let mut rows = vec![
        [
            "  PRIO",
            "ROCE",
            "PFC(DCB)",
            "PFC(CNT)",
            "TC",
            "TSA",
            "ECN RP",
            "ECN NP",
            "RX_PAUSE",
            "RX_PAUSE_US",
            "TX_PAUSE",
            "TX_PAUSE_US",
            "RX_MARKED",
        ]
        .iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>(),
    ];
    for p in &i.priorities {
        let pc = |f: &dyn Fn(&PauseCounters) -> &Count| {
            p.pause
                .as_ref()
                .map(|x| count(f(x), sampled))
                .unwrap_or_else(|| "-".into())
        };
        let pd = |f: &dyn Fn(&PauseCounters) -> &Count| {
            p.pause
                .as_ref()
                .map(|x| paused(f(x), sampled))
                .unwrap_or_else(|| "-".into())
        };
        let tsa = match (&i.dcb.ets, p.ets_tc) {
            (Some(e), Some(tc)) => tsa_name(e.tc_tsa[(tc & 7) as usize]).to_string(),
            _ => "-".into(),
        };
        rows.push(vec![
            format!("  {}", p.priority),
            if p.roce { "<-".into() } else { String::new() },
            b(p.pfc_dcb),
            b(p.pfc_counters),
            p.ets_tc.map(|t| t.to_string()).unwrap_or_else(|| "-".into()),
            tsa,
            b(p.ecn_rp),
            b(p.ecn_np),
            pc(&|x| &x.rx_pause),
            pd(&|x| &x.rx_pause_duration_us),
            pc(&|x| &x.tx_pause),
            pd(&|x| &x.tx_pause_duration_us),
            optional_count(&p.rx_marked, sampled),
        ]);
    }
    rows
}

fn optional_count(c: &Option<Count>, sampled: bool) -> String {
    c.as_ref()
        .map(|c| count(c, sampled))
        .unwrap_or_else(|| "-".into())
}

/// Global (802.3x) pause counters and pause storm events, where the driver has them.
fn pause_lines(i: &QosIf, sampled: bool) -> String {
    let mut s = String::new();
    if let Some(g) = &i.global_pause {
        s.push_str(&format!(
            "  global pause: rx {} ({} us), tx {} ({} us)\n",
            count(&g.rx_pause, sampled),
            paused(&g.rx_pause_duration_us, sampled),
            count(&g.tx_pause, sampled),
            paused(&g.tx_pause_duration_us, sampled)
        ));
    }
    let st = &i.pause_storm;
    if st.tx_pause_storm_warning_events.is_some() || st.tx_pause_storm_error_events.is_some() {
        s.push_str(&format!(
            "  pause storm events: warning {}, error {}\n",
            optional_count(&st.tx_pause_storm_warning_events, sampled),
            optional_count(&st.tx_pause_storm_error_events, sampled)
        ));
    }
    s
}

/// What the switch port says over LLDP (PFC, ETS, DSCP APP entries), or why nothing.
fn switch_lines(sw: &SwitchView) -> String {
    match (&sw.lldp, &sw.error, &sw.none_reason) {
        (Some(l), _, _) => {
            let mut s = format!(
                "  switch (LLDP): {} port {} ({}), chassis {}",
                l.system_name.as_deref().unwrap_or("?"),
                l.port_id.as_deref().unwrap_or("?"),
                l.port_description.as_deref().unwrap_or("-"),
                l.chassis_id.as_deref().unwrap_or("?")
            );
            if let Some(p) = &l.pfc {
                s.push_str(&format!(
                    "; PFC on priority {}{}",
                    list(&p.priorities()),
                    if p.willing { " (willing)" } else { "" }
                ));
            }
            if let Some(e) = &l.ets {
                s.push_str(&format!("; ETS prio->tc {}", joined(&e.prio_tc)));
            }
            let dscp: Vec<String> = l
                .app
                .iter()
                .filter(|a| a.selector == 5)
                .map(|a| format!("{}->{}", a.protocol, a.priority))
                .collect();
            if !dscp.is_empty() {
                s.push_str(&format!("; APP dscp {}", dscp.join(" ")));
            }
            s.push('\n');
            for n in &l.notes {
                s.push_str(&format!("  LLDP: {n}\n"));
            }
            s
        }
        (None, _, Some(r)) => format!("  switch (LLDP): {r}\n"),
        (None, Some(e), None) => format!("  switch (LLDP): {e}\n"),
        _ => String::new(),
    }
}

/// The verdict and each RoCE netdev's QoS, moved names marked.
pub(crate) fn table(r: &QosReport, findings: &[Finding]) -> String {
    text::moved_view(&r.rdma.names_moved, || table_body(r, findings))
}

fn table_body(r: &QosReport, findings: &[Finding]) -> String {
    let mut s = String::new();
    if let Some(why) = r.sample.as_ref().and_then(|smp| smp.counters_reset.as_ref()) {
        s.push_str(&format!("No deltas: the counters were reset: {why}\n\n"));
    } else if let Some(smp) = &r.sample {
        s.push_str(&format!(
            "Deltas from {} ({}{})\n\n",
            smp.baseline,
            smp.kind,
            smp.interval_s.map(|x| format!(", {x:.1} s")).unwrap_or_default()
        ));
    }
    if r.interfaces.is_empty() {
        match &r.rdma.message {
            Some(m) => s.push_str(&format!(
                "{m}; name a netdev with --ifname to see its DCB and pause counters\n"
            )),
            None => s.push_str("no RoCE netdev to report\n"),
        }
    }
    let sampled = r.sample.as_ref().is_some_and(|s| s.has_deltas());
    for (k, i) in r.interfaces.iter().enumerate() {
        if k > 0 {
            s.push('\n');
        }
        s.push_str(&one(i, sampled));
    }
    if !r.notes.is_empty() {
        s.push_str("\nNotes:\n");
        for n in &r.notes {
            s.push_str(&format!("  {n}\n"));
        }
    }
    text::verdict_first("qos", findings, s)
}

/// Prometheus text exposition: pause counters, storm events, CNP/ECN counters, PFC state.
pub(crate) fn prom(r: &QosReport) -> String {
    let mut m = PromFamilies::default();
    for i in &r.interfaces {
        let dev = format!("device=\"{}\"", prom_label(&i.ifname));
        for p in &i.priorities {
            priority_prom(&mut m, &format!("{dev},priority=\"{}\"", p.priority), p);
        }
        for (kind, c) in [
            ("warning", &i.pause_storm.tx_pause_storm_warning_events),
            ("error", &i.pause_storm.tx_pause_storm_error_events),
        ] {
            if let Some(v) = c.as_ref().and_then(|c| c.value) {
                m.add(
                    "fabprobe_qos_pause_storm_events_total",
                    "tx_pause_storm_{warning,error}_events of the driver.",
                    "counter",
                    format!("fabprobe_qos_pause_storm_events_total{{{dev},level=\"{kind}\"}} {v}"),
                );
            }
        }
        for c in &i.cnp {
            if let Some(v) = c.count.value {
                m.add(
                    "fabprobe_qos_rdma_cc_counter_total",
                    "RoCE congestion-control hw_counters (np_ecn_marked_roce_packets, np_cnp_sent, rp_cnp_handled, rp_cnp_ignored).",
                    "counter",
                    format!(
                        "fabprobe_qos_rdma_cc_counter_total{{{dev},counter=\"{}\"}} {v}",
                        prom_label(&c.name)
                    ),
                );
            }
        }
    }
    m.text()
}

/// One priority's PFC state, pause frames and durations, and ECN-marked packets.
fn priority_prom(m: &mut PromFamilies, l: &str, p: &PrioRow) {
    if let Some(on) = p.pfc_dcb.or(p.pfc_counters) {
        m.add(
            "fabprobe_qos_pfc_enabled",
            "PFC enabled on the priority (DCB netlink, else the driver's counter set).",
            "gauge",
            format!("fabprobe_qos_pfc_enabled{{{l}}} {}", u8::from(on)),
        );
    }
    if let Some(pc) = &p.pause {
        for (name, help, c) in [
            (
                "fabprobe_qos_rx_pause_frames_total",
                "PFC pause frames received.",
                &pc.rx_pause,
            ),
            (
                "fabprobe_qos_tx_pause_frames_total",
                "PFC pause frames sent.",
                &pc.tx_pause,
            ),
        ] {
            if let Some(v) = c.value {
                m.add(name, help, "counter", format!("{name}{{{l}}} {v}"));
            }
        }
        // The driver counts microseconds; Prometheus's unit is the second.
        for (name, help, c) in [
            (
                "fabprobe_qos_rx_pause_duration_seconds_total",
                "Time the port was paused by the peer (rx_prio<p>_pause_duration, microseconds / 1e6).",
                &pc.rx_pause_duration_us,
            ),
            (
                "fabprobe_qos_tx_pause_duration_seconds_total",
                "Time the port paused its peer (tx_prio<p>_pause_duration, microseconds / 1e6).",
                &pc.tx_pause_duration_us,
            ),
        ] {
            if let Some(v) = c.value {
                m.add(name, help, "counter", format!("{name}{{{l}}} {}", v as f64 / 1e6));
            }
        }
    }
    if let Some(v) = p.rx_marked.as_ref().and_then(|c| c.value) {
        m.add(
            "fabprobe_qos_rx_ecn_marked_packets_total",
            "ECN-marked packets received on the priority (rx_prio<p>_marked).",
            "counter",
            format!("fabprobe_qos_rx_ecn_marked_packets_total{{{l}}} {v}"),
        );
    }
}
