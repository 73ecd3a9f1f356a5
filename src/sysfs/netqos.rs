//! Lossless-RoCE facts of a netdev: the mlx5 pause counters of `ethtool -S` (names from
//! `en_stats.c`: `{rx,tx}_prio<p>_pause`, `_pause_duration` (µs), `rx_prio<p>_pause_transition`,
//! the same with `global`, `tx_pause_storm_{warning,error}_events`, `rx_prio<p>_marked`),
//! the MLNX_OFED ECN sysfs (`/sys/class/net/<if>/ecn/roce_{np,rp}/`), and the RoCE traffic
//! class file (`/sys/class/infiniband/<dev>/tc/<port>/traffic_class`, `Global tclass=160`).
//! mlx5 prints a priority's pause lines only when PFC is on for it, and the global ones only
//! when global pause is on: the counter set encodes the configuration.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::host::Host;

/// Which pause counter a name is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PauseName {
    /// (priority or None for global, tx?, kind)
    Pause {
        prio: Option<u8>,
        tx: bool,
        kind: PauseKind,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PauseKind {
    Frames,
    DurationUs,
    Transition,
}

/// `rx_prio3_pause_duration` → prio 3, rx, duration. Other names → None.
pub(crate) fn parse_pause_name(name: &str) -> Option<PauseName> {
    let (tx, rest) = if let Some(r) = name.strip_prefix("rx_") {
        (false, r)
    } else {
        (true, name.strip_prefix("tx_")?)
    };
    let (prio, rest) = if let Some(r) = rest.strip_prefix("global_") {
        (None, r)
    } else {
        let r = rest.strip_prefix("prio")?;
        let d = r.chars().next()?.to_digit(10)?;
        let d = u8::try_from(d).ok().filter(|&d| d <= 7)?;
        (Some(d), r.get(1..)?.strip_prefix('_')?)
    };
    let kind = match rest {
        "pause" => PauseKind::Frames,
        "pause_duration" => PauseKind::DurationUs,
        "pause_transition" => PauseKind::Transition,
        _ => return None,
    };
    Some(PauseName::Pause { prio, tx, kind })
}

/// `rx_prio5_marked` → 5 (ECN-marked packets received on a priority; newer mlx5).
pub(crate) fn parse_marked_name(name: &str) -> Option<u8> {
    let d = name.strip_prefix("rx_prio")?.strip_suffix("_marked")?;
    let p: u8 = d.parse().ok()?;
    (p < 8).then_some(p)
}

/// `Global tclass=160` (MLNX_OFED) → 160. A bare number is accepted too.
pub(crate) fn parse_traffic_class(s: &str) -> Option<u32> {
    let s = s.trim();
    let v = s.strip_prefix("Global tclass=").unwrap_or(s);
    let v: u32 = v.trim().parse().ok()?;
    (v < 256).then_some(v)
}

/// MLNX_OFED's ECN sysfs of one netdev.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct EcnSysfs {
    /// Priorities with `roce_rp/enable/<p>` = 1 (reaction point: the sender slows down on CNPs).
    pub rp_enabled: Vec<u8>,
    /// Priorities with `roce_np/enable/<p>` = 1 (notification point: marks become CNPs).
    pub np_enabled: Vec<u8>,
    pub cnp_dscp: Option<u32>,
    pub cnp_802p_prio: Option<u32>,
    pub min_time_between_cnps: Option<u32>,
    /// The other `roce_rp/` parameters (DCQCN), as read.
    pub rp_params: BTreeMap<String, u64>,
}

fn read_num(host: &Host, p: &str) -> Option<u64> {
    host.attr(p).value().and_then(|v| v.trim().parse().ok())
}

/// `None` when `/sys/class/net/<if>/ecn` does not exist (inbox/upstream mlx5 has no ECN
/// sysfs: the state is unknown, not off).
pub(crate) fn read_ecn(host: &Host, ifname: &str) -> Option<EcnSysfs> {
    let base = format!("/sys/class/net/{ifname}/ecn");
    if !host.is_dir(&base) {
        return None;
    }
    let mut e = EcnSysfs::default();
    for p in 0..8u8 {
        if read_num(host, &format!("{base}/roce_rp/enable/{p}")) == Some(1) {
            e.rp_enabled.push(p);
        }
        if read_num(host, &format!("{base}/roce_np/enable/{p}")) == Some(1) {
            e.np_enabled.push(p);
        }
    }
    let n = |k: &str| read_num(host, &format!("{base}/roce_np/{k}")).and_then(|v| u32::try_from(v).ok());
    e.cnp_dscp = n("cnp_dscp");
    e.cnp_802p_prio = n("cnp_802p_prio");
    e.min_time_between_cnps = n("min_time_between_cnps");
    for k in host
        .list_dir(format!("{base}/roce_rp"))
        .ok()
        .flatten()
        .unwrap_or_default()
    {
        if k == "enable" {
            continue;
        }
        if let Some(v) = read_num(host, &format!("{base}/roce_rp/{k}")) {
            e.rp_params.insert(k, v);
        }
    }
    Some(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pause_names() {
        use PauseKind::*;
        let p = |prio, tx, kind| Some(PauseName::Pause { prio, tx, kind });
        assert_eq!(parse_pause_name("rx_prio3_pause"), p(Some(3), false, Frames));
        assert_eq!(
            parse_pause_name("tx_prio3_pause_duration"),
            p(Some(3), true, DurationUs)
        );
        assert_eq!(
            parse_pause_name("rx_prio0_pause_transition"),
            p(Some(0), false, Transition)
        );
        assert_eq!(parse_pause_name("tx_global_pause"), p(None, true, Frames));
        assert_eq!(
            parse_pause_name("tx_global_pause_duration"),
            p(None, true, DurationUs)
        );
        assert_eq!(parse_pause_name("rx_pause_ctrl_phy"), None);
        assert_eq!(parse_pause_name("tx_pause_storm_warning_events"), None);
        assert_eq!(parse_pause_name("rx_prio8_pause"), None);
        assert_eq!(parse_pause_name("rx_prio0_bytes"), None);
        assert_eq!(parse_pause_name("rx_prio"), None);
        assert_eq!(parse_marked_name("rx_prio0_marked"), Some(0));
        assert_eq!(parse_marked_name("rx_prio9_marked"), None);
        assert_eq!(parse_marked_name("rx_prio0_cong_discard"), None);
    }

    #[test]
    fn traffic_class() {
        assert_eq!(parse_traffic_class("Global tclass=160\n"), Some(160));
        assert_eq!(parse_traffic_class("106"), Some(106));
        assert_eq!(parse_traffic_class("Global tclass=-1"), None);
        assert_eq!(parse_traffic_class("300"), None);
    }
}
