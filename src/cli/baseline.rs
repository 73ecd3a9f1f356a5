//! `--baseline SNAPSHOT`: counter deltas only mean something against an earlier capture of
//! the same host. Another host (hostname or RDMA node GUIDs differ) or a baseline taken after
//! the report is refused, naming both sides, instead of judging fake deltas.

use std::collections::BTreeSet;
use std::path::Path;

use super::UsageError;
use crate::host::Host;

/// The RDMA node GUIDs of a host (empty when it has none or they cannot be read).
fn node_guids(host: &Host) -> BTreeSet<String> {
    let Ok(Some(devs)) = host.list_dir("/sys/class/infiniband") else {
        return BTreeSet::new();
    };
    devs.iter()
        .filter_map(|d| {
            host.read_opt(format!("/sys/class/infiniband/{d}/node_guid"))
                .ok()?
        })
        .map(|g| g.trim().to_string())
        .filter(|g| !g.is_empty() && g != "0000:0000:0000:0000")
        .collect()
}

/// Refuse a baseline of another host or from after the report.
pub(crate) fn ensure_earlier_same_host(base: &Host, base_path: &Path, host: &Host) -> Result<(), UsageError> {
    let (bm, hm) = (base.meta(), host.meta());
    let shown = base_path.display();
    let name = |h: Option<&String>| h.cloned().unwrap_or_else(|| "?".into());
    if let (Some(b), Some(h)) = (&bm.hostname, &hm.hostname)
        && b != h
    {
        return Err(UsageError(format!(
            "--baseline {shown} is host {b}, this report is host {h}: a baseline must be an earlier snapshot of the same host"
        )));
    }
    let (bg, hg) = (node_guids(base), node_guids(host));
    if !bg.is_empty() && !hg.is_empty() && bg != hg {
        let only_b: Vec<&str> = bg.difference(&hg).map(String::as_str).collect();
        let only_h: Vec<&str> = hg.difference(&bg).map(String::as_str).collect();
        return Err(UsageError(format!(
            "--baseline {shown} (host {}) has other RDMA node GUIDs than this host {}: baseline only {}, here only {}; a baseline must be an earlier snapshot of the same hardware",
            name(bm.hostname.as_ref()),
            name(hm.hostname.as_ref()),
            if only_b.is_empty() {
                "-".into()
            } else {
                only_b.join(",")
            },
            if only_h.is_empty() {
                "-".into()
            } else {
                only_h.join(",")
            },
        )));
    }
    if let (Some(bt), Some(ht)) = (&bm.captured_at, &hm.captured_at)
        && let (Ok(b), Ok(h)) = (
            humantime::parse_rfc3339_weak(bt),
            humantime::parse_rfc3339_weak(ht),
        )
        && b > h
    {
        return Err(UsageError(format!(
            "--baseline {shown} was captured at {bt} on host {}, after this report ({ht} on host {}): give the earlier snapshot as --baseline",
            name(bm.hostname.as_ref()),
            name(hm.hostname.as_ref()),
        )));
    }
    Ok(())
}
