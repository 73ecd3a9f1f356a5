//! The host facts' own rules (beside the policy's `[host]` keys): leftover device holders,
//! unreadable holders, a small memlock limit.

use serde_json::{Value, json};

use crate::check::{Finding, Severity};
use crate::finding::Rule;
use crate::host::FactsState;
use crate::host::facts::HostFacts as Facts;
use crate::host::facts::RLimit;

/// The holders' pids, as `kill` takes them.
pub(crate) fn pid_list(holders: &[crate::host::facts::DeviceHolder]) -> String {
    holders
        .iter()
        .map(|h| h.pid.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// A host-facts rule's judge.
pub(crate) type RuleFn = fn(&Facts, &mut Vec<Finding>);

/// The host facts' own rules (beside the policy's `[host]` keys), in the order their findings are written.
pub(crate) const FACT_RULES: &[Rule<RuleFn>] = &[
    Rule {
        ids: &["host.device_holders"],
        severity: &[Severity::Warn],
        about: "processes hold GPU/RDMA device files (a crashed job's leftovers make the next \
                job fail; the system's own GPU daemons are not holders)",
        judge: device_holders,
    },
    Rule {
        ids: &["host.device_holders_unknown"],
        severity: &[Severity::Unknown],
        about: "some processes' open files could not be read (not root): holders may be missing",
        judge: device_holders_unknown,
    },
    Rule {
        ids: &["host.memlock_limited"],
        severity: &[Severity::Warn],
        about: "RLIMIT_MEMLOCK (soft) is not unlimited",
        judge: memlock_limited,
    },
];

pub(crate) fn host_findings(state: &FactsState) -> Vec<Finding> {
    let mut out = Vec::new();
    match state {
        FactsState::Available(f) => FACT_RULES.iter().for_each(|r| (r.judge)(f, &mut out)),
        FactsState::Unavailable { reason } => out.push(
            Finding::new(
                "host.facts_unavailable",
                Severity::Unknown,
                "host",
                format!("host facts unavailable: {reason}"),
            )
            .evidence("reason", reason.as_str())
            .fix("capture snapshots with a fabprobe that records fabprobe/facts.json"),
        ),
    }
    out
}

fn device_holders(f: &Facts, out: &mut Vec<Finding>) {
    if f.device_holders.is_empty() {
        return;
    }
    let list: Vec<Value> = f
        .device_holders
        .iter()
        .map(|h| json!({"pid": h.pid, "comm": h.comm, "devices": h.devices}))
        .collect();
    let names: Vec<String> = f
        .device_holders
        .iter()
        .map(|h| format!("{} ({})", h.pid, h.comm.as_deref().unwrap_or("?")))
        .collect();
    out.push(
        Finding::new(
            "host.device_holders",
            Severity::Warn,
            "host",
            format!(
                "{} process(es) hold GPU or RDMA device files: {}",
                f.device_holders.len(),
                names.join(", ")
            ),
        )
        .evidence("holders", list)
        .fix(format!(
            "if no job should be running, these are a crashed job's leftovers: end them (`kill {}`) or reboot before the next job",
            pid_list(&f.device_holders)
        )),
    );
}

fn device_holders_unknown(f: &Facts, out: &mut Vec<Finding>) {
    if f.processes_unreadable == 0 {
        return;
    }
    out.push(
        Finding::new(
            "host.device_holders_unknown",
            Severity::Unknown,
            "host",
            format!(
                "the open files of {} could not be read; device holders may be missing",
                crate::finding::spell::count(f.processes_unreadable as usize, "process", "processes")
            ),
        )
        .evidence("processes_unreadable", f.processes_unreadable)
        .fix("run `sudo fabprobe check` to see every process"),
    );
}

fn memlock_limited(f: &Facts, out: &mut Vec<Finding>) {
    let Some(m) = f.memlock.filter(|m| m.soft != RLimit::Unlimited) else {
        return;
    };
    out.push(
        Finding::new(
            "host.memlock_limited",
            Severity::Warn,
            "host",
            format!("locked-memory limit is {}; RDMA memory registration of large buffers fails", m.soft.show()),
        )
        .evidence("memlock_soft", serde_json::to_value(m.soft).unwrap_or(Value::Null))
        .evidence("memlock_hard", serde_json::to_value(m.hard).unwrap_or(Value::Null))
        .fix("add to /etc/security/limits.conf: `* - memlock unlimited`; for slurmd, LimitMEMLOCK=infinity in its systemd unit; for containers, docker run --ulimit memlock=-1"),
    );
}
