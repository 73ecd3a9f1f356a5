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
pub(crate) fn judge(c: &Collected, p: &Policy) -> Vec<Finding> {
    let mut out = Vec::new();
    judge_host(c, p, &mut out);
    judge_gpu(c, p, &mut out);
    if let Some(l) = &c.links {
        judge_ports(l, p, "ib", "InfiniBand", &p.ib, &mut out);
        judge_ports(l, p, "roce", "Ethernet", &p.roce, &mut out);
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
    use std::collections::BTreeSet;

    use super::*;
    use crate::check::policy::{JudgedBy, Kind, keys, parse};

    /// The rule tables' keys, by the judge a key declares ([`JudgedBy`]): a key whose judge
    /// has no rule for it, or a rule for a key the language lacks, fails here.
    fn judged_by_tables() -> Vec<(JudgedBy, BTreeSet<&'static str>)> {
        fn flat<J>(t: &[(&'static [&'static str], J)]) -> BTreeSet<&'static str> {
            t.iter().flat_map(|(k, _)| k.iter().copied()).collect()
        }
        vec![
            (JudgedBy::Host, flat(HOST_RULES)),
            (JudgedBy::Gpu, GPU_RULES.iter().map(|(k, _)| *k).collect()),
            (JudgedBy::Ports, flat(PORT_RULES)),
            (
                JudgedBy::RoceQos,
                ROCE_QOS_RULES.iter().map(|(k, _)| *k).collect(),
            ),
            // One rule each: `judge_roce`'s GID rule, `judge_counters`, `judge_gdr`.
            (JudgedBy::RoceGid, ["gid"].into()),
            (JudgedBy::Counters, ["max_per_hour"].into()),
            (JudgedBy::Gdr, ["ready"].into()),
        ]
    }

    #[test]
    fn every_key_is_in_the_rule_table_of_its_judge() {
        let tables = judged_by_tables();
        for k in keys().filter(|k| !matches!(k.judged_by, JudgedBy::Setting | JudgedBy::Sweep)) {
            assert!(tables.iter().any(|(j, _)| *j == k.judged_by), "{}: no table", k.key);
        }
        for (judge, table) in judged_by_tables() {
            let declared: BTreeSet<&str> = keys().filter(|k| k.judged_by == judge).map(|k| k.key).collect();
            assert_eq!(table, declared, "{judge:?}");
        }
    }

    /// Values of a key's kind, as TOML: its bounds, each allowed value, one unknown string.
    fn samples(kind: Kind) -> Vec<String> {
        let quoted = |v: &[&str]| v.iter().map(|s| format!("\"{s}\"")).collect::<Vec<_>>();
        match kind {
            Kind::Bool => vec!["true".into(), "false".into()],
            Kind::Int { min, max } => vec![min.to_string(), max.to_string()],
            Kind::IntOneOf(v) => v.iter().map(|i| i.to_string()).collect(),
            Kind::Num { min, max } => vec![format!("{min:?}"), format!("{max:?}")],
            Kind::Str([]) => vec!["\"no-such-value\"".into()],
            Kind::Str(v) => quoted(v),
            Kind::StrList([]) => vec!["[\"no-such-value\"]".into(), "[\"host\"]".into()],
            Kind::StrList(v) => quoted(v).into_iter().map(|s| format!("[{s}]")).collect(),
            Kind::IntList { min, max } => vec![format!("[{min}]"), format!("[{max}]")],
            Kind::CounterRates => vec!["{ symbol_error = 0 }".into()],
            Kind::Tolerances => vec!["{ memory_gib = 0 }".into()],
        }
    }

    /// Every snapshot under `fixtures/`, probed once: what the judges see.
    fn fixtures() -> Vec<(String, Collected)> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        let mut out = Vec::new();
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            if let Ok(host) = crate::host::Host::snapshot(&path) {
                let nccl = crate::nccl::settings::NcclSettings::default();
                out.push((
                    path.display().to_string(),
                    crate::check::run::collected(&host, &nccl),
                ));
            }
        }
        assert!(out.len() >= 20, "{} fixtures read", out.len());
        out
    }

    /// Every key of the language, alone in a policy with each sample value of its kind:
    /// some sample parses and changes the policy (its setter stores it), and a key `check`
    /// judges gets a finding of its own (a violation or not evaluated) on some fixture. A
    /// key `check` does not judge (`[policy]`, `[sweep]`) is declared so.
    #[test]
    fn every_key_parses_into_the_policy_and_is_judged_on_some_fixture() {
        let base = parse("", "t.toml", "t", "t.toml").unwrap();
        let fixtures = fixtures();
        for k in keys() {
            let path = format!("{}.{}", k.section, k.key);
            let mut changed = false;
            let mut judged = false;
            for v in samples(k.kind) {
                let text = format!("[{}]\n{} = {v}\n", k.section, k.key);
                let Ok(p) = parse(&text, "t.toml", "t", "t.toml") else {
                    continue;
                };
                changed |= p != base;
                // A setting's default is a value too (`probe_findings = true`).
                if k.judged_by != JudgedBy::Setting {
                    assert_eq!((k.is_set)(&p), p != base, "{text}");
                }
                judged |= fixtures.iter().any(|(_, c)| {
                    judge(c, &p)
                        .iter()
                        .any(|f| f.id == format!("policy.{path}") || f.subject == path)
                });
            }
            assert!(changed, "{path}: no sample value changed the policy");
            match k.judged_by {
                JudgedBy::Setting | JudgedBy::Sweep => assert!(!judged, "{path} is judged"),
                _ => assert!(judged, "{path}: no finding on any fixture"),
            }
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
