//! `[host]`: the host facts against the policy's limits.

use serde_json::Value;

use super::{not_evaluated, violation};
use crate::check::Finding;
use crate::check::facts::pid_list;
use crate::check::policy::{JudgedBy, Policy, set_keys};
use crate::check::run::Collected;
use crate::host::FactsState;
use crate::host::facts::RLimit;

/// The host facts as the `[host]` rules see them (the host probe read them).
pub(super) struct HostView<'a> {
    f: &'a crate::host::facts::HostFacts,
    r: &'a crate::check::policy::HostRules,
}

/// A `[host]` key's judge.
type HostJudge = fn(&HostView<'_>, &mut Vec<Finding>);

/// `[host]`: each key its own rule, in this order.
pub(super) const HOST_RULES: &[(&[&str], HostJudge)] = &[
    (&["memlock_unlimited"], host_memlock_unlimited),
    (&["memlock_min_bytes"], host_memlock_min_bytes),
    (&["device_holders_max"], host_device_holders_max),
    (&["kernel"], host_kernel),
    (&["memory_min_gib"], host_memory_min_gib),
    (&["cpu_count_min"], host_cpu_count_min),
];

pub(crate) fn judge_host(c: &Collected, p: &Policy, out: &mut Vec<Finding>) {
    let r = &p.host;
    if set_keys(p, "host", JudgedBy::Host).is_empty() {
        return;
    }
    let Some(FactsState::Available(f)) = &c.facts else {
        let why = match &c.facts {
            Some(FactsState::Unavailable { reason }) => reason.clone(),
            _ => "the host probe did not run".into(),
        };
        out.push(not_evaluated("host", why));
        return;
    };
    let x = HostView { f, r };
    for (_, judge) in HOST_RULES {
        judge(&x, out);
    }
}

fn host_memlock_unlimited(x: &HostView, out: &mut Vec<Finding>) {
    let (f, r) = (x.f, x.r);
    let memlock = f.memlock.map(|m| m.soft);
    if r.memlock_unlimited == Some(true) {
        match memlock {
            None => out.push(not_evaluated("host.memlock_unlimited", "the memlock limit was not read")),
            Some(RLimit::Unlimited) => {}
            Some(s) => out.push(
                violation("host.memlock_unlimited", "host", format!("locked-memory limit is {}, not unlimited", s.show()))
                    .evidence("memlock_soft", serde_json::to_value(s).unwrap_or(Value::Null))
                    .fix("add to /etc/security/limits.conf: `* - memlock unlimited`; set LimitMEMLOCK=infinity in slurmd's systemd unit, then `systemctl restart slurmd`"),
            ),
        }
    }
}

fn host_memlock_min_bytes(x: &HostView, out: &mut Vec<Finding>) {
    let (f, r) = (x.f, x.r);
    let memlock = f.memlock.map(|m| m.soft);
    if let Some(min) = r.memlock_min_bytes {
        match memlock {
            None => out.push(not_evaluated(
                "host.memlock_min_bytes",
                "the memlock limit was not read",
            )),
            Some(s) if !s.at_least(min) => out.push(
                violation(
                    "host.memlock_min_bytes",
                    "host",
                    format!("locked-memory limit {} is below {min} bytes", s.show()),
                )
                .evidence("memlock_soft", serde_json::to_value(s).unwrap_or(Value::Null))
                .evidence("memlock_min_bytes", min)
                .fix("raise memlock in /etc/security/limits.conf (and LimitMEMLOCK for slurmd)"),
            ),
            _ => {}
        }
    }
}

fn host_device_holders_max(x: &HostView, out: &mut Vec<Finding>) {
    let (f, r) = (x.f, x.r);
    if let Some(max) = r.device_holders_max
        && f.device_holders.len() as u64 <= max
        && f.processes_unreadable > 0
    {
        // Holders may hide among the processes whose open files could not be read.
        out.push(not_evaluated(
            "host.device_holders_max",
            format!(
                "the open files of {} could not be read (not root): device holders among them are unknown",
                crate::finding::spell::count(f.processes_unreadable as usize, "process", "processes")
            ),
        ));
    }
    if let Some(max) = r.device_holders_max
        && f.device_holders.len() as u64 > max
    {
        let pids: Vec<String> = f
            .device_holders
            .iter()
            .map(|h| {
                format!(
                    "{} {} {}",
                    h.pid,
                    h.comm.as_deref().unwrap_or("?"),
                    h.devices.join(",")
                )
            })
            .collect();
        out.push(
            violation(
                "host.device_holders_max",
                "host",
                format!(
                    "{} GPU/RDMA device files, at most {max} allowed",
                    crate::finding::spell::count(f.device_holders.len(), "process holds", "processes hold")
                ),
            )
            .evidence("holders", pids)
            .fix(format!(
                "end the leftover processes (`kill {}`) or reboot; find them again with `fuser -v /dev/nvidia* /dev/infiniband/uverbs*`",
                pid_list(&f.device_holders)
            )),
        );
    }
}

fn host_kernel(x: &HostView, out: &mut Vec<Finding>) {
    let (f, r) = (x.f, x.r);
    if !r.kernel.is_empty() {
        match &f.kernel {
            None => out.push(not_evaluated("host.kernel", "the kernel release was not read")),
            Some(k) if !r.kernel.iter().any(|p| k.starts_with(p.as_str())) => out.push(
                violation(
                    "host.kernel",
                    "host",
                    format!("kernel {k} is not one of the allowed {}", r.kernel.join(", ")),
                )
                .evidence("kernel", k.as_str())
                .evidence("allowed", r.kernel.clone())
                .fix("boot the fleet's kernel (check the GRUB default and the last kernel update)"),
            ),
            _ => {}
        }
    }
}

fn host_memory_min_gib(x: &HostView, out: &mut Vec<Finding>) {
    let (f, r) = (x.f, x.r);
    if let Some(min) = r.memory_min_gib {
        match f.memory_total_bytes {
            None => out.push(not_evaluated("host.memory_min_gib", "total memory was not read")),
            Some(b) if b < min << 30 => out.push(
                violation(
                    "host.memory_min_gib",
                    "host",
                    format!("{} GiB of memory, below {min} GiB", b >> 30),
                )
                .evidence("memory_total_bytes", b)
                .fix("a DIMM is missing or failed: check `dmidecode -t memory` and the BMC's event log"),
            ),
            _ => {}
        }
    }
}

fn host_cpu_count_min(x: &HostView, out: &mut Vec<Finding>) {
    let (f, r) = (x.f, x.r);
    if let Some(min) = r.cpu_count_min {
        match f.cpu_count {
            None => out.push(not_evaluated("host.cpu_count_min", "the CPU count was not read")),
            Some(n) if (n as u64) < min => out.push(
                violation("host.cpu_count_min", "host", format!("{n} logical CPUs, below {min}"))
                    .evidence("cpu_count", n)
                    .fix("check BIOS settings (SMT/hyper-threading, a disabled socket) and the kernel command line (maxcpus, nosmt)"),
            ),
            _ => {}
        }
    }
}
