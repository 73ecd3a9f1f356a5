//! The policy's judges, one module per section: `policy.<section>.<key>` fail findings for
//! what the node breaks, `check.not_evaluated` for what could not be seen.

pub mod gdr;
pub mod gpu;
pub mod host;
pub mod ports;
pub mod roce;

use crate::check::policy::{PATH_ORDER, Policy};
use crate::check::run::Collected;
use crate::check::{Finding, Severity};
use crate::finding::MissingFact;
use gdr::judge_gdr;
use gpu::judge_gpu;
use host::judge_host;
use ports::{judge_counters, judge_ports};
use roce::judge_roce;

pub(crate) fn not_evaluated(key: &str, why: impl Into<String>) -> Finding {
    let why = why.into();
    Finding::new(
        "check.not_evaluated",
        Severity::Unknown,
        key,
        format!("{key} not evaluated: {why}"),
    )
    .evidence("key", key)
    .evidence("reason", why)
}

/// A key with nothing to judge, typed by the missing fact it rests on (`check` folds by it).
fn nothing_here(key: &str, fact: Option<MissingFact>, why: impl Into<String>) -> Finding {
    not_evaluated(key, why).missing(fact)
}

fn violation(key: &str, subject: impl Into<String>, msg: impl Into<String>) -> Finding {
    Finding::new(&format!("policy.{key}"), Severity::Fail, subject, msg)
}

fn rank_of_cell(cell: &str) -> Option<usize> {
    if cell == "X" {
        return Some(0);
    }
    if cell.starts_with("NV") {
        return Some(0);
    }
    PATH_ORDER.iter().position(|c| *c == cell).map(|i| i + 1)
}

/// Judge the collected reports against a policy: `policy.<section>.<key>` fail findings for
/// what the node breaks, `check.not_evaluated` warnings for what could not be seen.
pub fn judge(c: &Collected, p: &Policy) -> Vec<Finding> {
    let mut out = Vec::new();
    judge_host(c, p, &mut out);
    judge_gpu(c, p, &mut out);
    if let Some(l) = &c.links {
        judge_ports(l, "ib", "InfiniBand", &p.ib, &mut out);
        judge_ports(l, "roce", "Ethernet", &p.roce, &mut out);
        judge_counters(l, p, &mut out);
    }
    judge_roce(c, p, &mut out);
    if let Some(want) = p.gdr_ready {
        judge_gdr(c, want, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::gpu::{GPU_RULES, matching};
    use super::host::HOST_RULES;
    use super::ports::PORT_RULES;
    use super::roce::ROCE_QOS_RULES;
    use super::*;

    /// Every `[host]`, `[gpu]`, `[ib]` and `[roce]` key of the policy language is judged by
    /// a rule of its own section's table, and every table key is in the language.
    #[test]
    fn every_host_gpu_and_port_key_has_its_rule() {
        use std::collections::BTreeSet;
        let tables: Vec<(&str, BTreeSet<&str>)> = vec![
            (
                "host",
                HOST_RULES.iter().flat_map(|(k, _)| k.iter().copied()).collect(),
            ),
            ("gpu", GPU_RULES.iter().map(|(k, _)| *k).collect()),
            (
                "ib",
                PORT_RULES.iter().flat_map(|(k, _)| k.iter().copied()).collect(),
            ),
            (
                "roce",
                // The QoS keys judged on each RoCE netdev, and `gid` (`judge_roce`).
                PORT_RULES
                    .iter()
                    .flat_map(|(k, _)| k.iter().copied())
                    .chain(ROCE_QOS_RULES.iter().map(|(k, _)| *k))
                    .chain(["gid"])
                    .collect(),
            ),
        ];
        for (sect, judged) in tables {
            let language: BTreeSet<&str> = crate::check::policy::keys()
                .filter(|k| k.section == sect)
                .map(|k| k.key)
                .collect();
            assert_eq!(judged, language, "[{sect}]");
        }
    }

    #[test]
    fn matching_finds_a_one_to_one_assignment() {
        // GPU0 can use NIC0 or NIC1, GPU1 only NIC0: both get one.
        assert_eq!(matching(&[vec![0, 1], vec![0]], 2), 2);
        // Two GPUs that can only share NIC0.
        assert_eq!(matching(&[vec![0], vec![0]], 2), 1);
        assert_eq!(matching(&[vec![], vec![1]], 2), 1);
    }

    #[test]
    fn path_ranks() {
        assert!(rank_of_cell("PIX") < rank_of_cell("PXB"));
        assert!(rank_of_cell("NV18") < rank_of_cell("PIX"));
        assert!(rank_of_cell("NODE") < rank_of_cell("SYS"));
        assert_eq!(rank_of_cell("N/A"), None);
    }
}
