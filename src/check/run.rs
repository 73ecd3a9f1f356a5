//! `check`: every local probe, the host facts, and a policy, into one ranked list of
//! findings and the fingerprint `sweep` compares across nodes. This module runs the
//! probes and puts the report together; the judging is in `judge`, the host facts' own
//! rules in `facts`, the ranking and folding in `assemble`, the fingerprint in `fingerprint`.
//!
//! Adding a probe is one line in [`PROBES`] (plus the field it fills in [`Collected`]).

use std::time::Duration;

use crate::check::Finding;
use crate::check::assemble::{
    CheckReport, PolicyRef, ProbeRun, Saw, collapse, counts_of, ignored, same_cause, split_not_used_by_nccl,
    verdict_of, worst_of,
};
use crate::check::decide;
use crate::check::facts::{FACT_RULES, host_findings};
use crate::check::fingerprint::fingerprint;
use crate::check::judge::{judge, not_evaluated};
use crate::check::policy::Policy;
use crate::finding::{RuleDoc, Severity};
use crate::host::{FactsState, Host};
use crate::nccl::settings::NcclSettings;
use crate::probe::gdr::GdrReport;
use crate::probe::gids::GidsReport;
use crate::probe::links::{LinksReport, SampleInfo};
use crate::probe::qos::QosReport;
use crate::probe::topo::TopoReport;
use crate::probe::{gdr, gids, links, qos, topo};

/// How the links probe gets its second sample (for counter rates).
#[derive(Default)]
pub struct Sampling {
    /// Sample the live host twice, this far apart.
    pub interval: Option<Duration>,
    /// An earlier snapshot of the same host, and how it was named.
    pub baseline: Option<(Host, String)>,
}

/// What the probes reported; `None` for a probe that did not run.
#[derive(Default)]
pub(crate) struct Collected {
    /// NCCL's settings as the job sees them (the model the CLI built); probes take their
    /// NCCL values from here.
    pub nccl: NcclSettings,
    pub topo: Option<TopoReport>,
    pub gids: Option<GidsReport>,
    pub links: Option<LinksReport>,
    pub gdr: Option<GdrReport>,
    pub qos: Option<QosReport>,
    pub facts: Option<FactsState>,
    pub driver_version: Option<String>,
    /// With `--interval`: the first sample of the counters, taken before the one sleep.
    first: Option<FirstSample>,
}

struct FirstSample {
    links: LinksReport,
    qos: QosReport,
    at: std::time::Instant,
}

pub(crate) struct ProbeEntry {
    pub name: &'static str,
    pub run: fn(&Host, &Sampling, &mut Collected) -> Vec<Finding>,
}

/// Every local probe `check` runs, in order. A new probe is one line here.
pub(crate) const PROBES: &[ProbeEntry] = &[
    ProbeEntry {
        name: "topo",
        run: run_topo,
    },
    ProbeEntry {
        name: "gids",
        run: run_gids,
    },
    ProbeEntry {
        name: "links",
        run: run_links,
    },
    ProbeEntry {
        name: "gdr",
        run: run_gdr,
    },
    ProbeEntry {
        name: "qos",
        run: run_qos,
    },
    ProbeEntry {
        name: "host",
        run: run_host,
    },
    ProbeEntry {
        name: "nccl-env",
        run: run_nccl_env,
    },
];

fn run_topo(h: &Host, _: &Sampling, c: &mut Collected) -> Vec<Finding> {
    let r = topo::probe(h);
    let f = topo::judge(&r);
    c.topo = Some(r);
    f
}

fn run_gids(h: &Host, _: &Sampling, c: &mut Collected) -> Vec<Finding> {
    let r = gids::probe(h, &c.nccl.gid_env());
    let f = gids::findings(&r);
    c.gids = Some(r);
    f
}

fn run_links(h: &Host, s: &Sampling, c: &mut Collected) -> Vec<Finding> {
    let mut r = links::probe(h);
    if let Some((base, name)) = &s.baseline {
        let before = links::probe(base);
        let info = SampleInfo::baseline(base, h, name.clone());
        links::apply_deltas(&mut r, &before, info);
    } else if let Some(first) = &c.first {
        let info = SampleInfo::interval(first.at.elapsed().as_secs_f64());
        links::apply_deltas(&mut r, &first.links, info);
    }
    let f = links::findings(&r);
    c.links = Some(r);
    f
}

fn run_gdr(h: &Host, _: &Sampling, c: &mut Collected) -> Vec<Finding> {
    let r = gdr::probe(h, &c.nccl);
    let f = gdr::findings(&r);
    c.gdr = Some(r);
    f
}

fn run_qos(h: &Host, s: &Sampling, c: &mut Collected) -> Vec<Finding> {
    let tc = c.nccl.ib_tc();
    let mut r = qos::probe(h, tc.as_ref());
    if let Some((base, name)) = &s.baseline {
        let before = qos::probe(base, tc.as_ref());
        let sample = qos::Sample::baseline(base, h, name.clone());
        qos::apply_deltas(&mut r, &before, sample);
    } else if let Some(first) = &c.first {
        let sample = qos::Sample::interval(first.at.elapsed().as_secs_f64());
        qos::apply_deltas(&mut r, &first.qos, sample);
    }
    let f = qos::findings(&r);
    c.qos = Some(r);
    f
}

/// The host facts' own findings: leftover device holders and a small memlock limit.
fn run_host(h: &Host, _: &Sampling, c: &mut Collected) -> Vec<Finding> {
    let state = h.facts().clone();
    c.driver_version = h.nvml().facts().and_then(|n| n.driver_version.clone());
    let f = host_findings(&state);
    c.facts = Some(state);
    f
}

/// The `nccl-env` lint on the job's settings: what NCCL will do with them. Its GID and GDR
/// findings restate the gids and gdr probes' (which `check` runs): one fact, one finding.
fn run_nccl_env(h: &Host, _: &Sampling, c: &mut Collected) -> Vec<Finding> {
    let r = crate::probe::nccl_env::probe(h, &c.nccl);
    crate::probe::nccl_env::findings(h, &r)
        .into_iter()
        .filter(|f| {
            f.id.starts_with("nccl_env.")
                && !matches!(
                    f.id.as_str(),
                    "nccl_env.gdr_off" | "nccl_env.gdr_no_kernel_support"
                )
        })
        .collect()
}

/// check's own findings beside the probes' and the host rules: what its man page lists.
pub(crate) const CHECK_RULES: &[RuleDoc] = &[
    RuleDoc {
        ids: &["policy.<section>.<key>"],
        severity: &[Severity::Fail],
        about: "the node breaks that policy key (evidence names the values)",
    },
    RuleDoc {
        ids: &["check.not_evaluated"],
        severity: &[Severity::Unknown],
        about: "a policy key that could not be judged: its data is missing or unreadable (RDMA \
                devices not listable, no port with that counter, /proc entries unreadable for \
                device_holders_max, ACS unreadable for gdr.ready), or there is nothing to judge \
                (no InfiniBand/RoCE port, no GPU). Said in the verdict line and in \
                data.not_evaluated [{key, reason, missing}], never counted as a pass or a failure; so are \
                the probes' unknown findings (gdr.acs_unknown under key gdr.acs, gdr.unknown \
                under gdr.ready, the others under their own id)",
    },
    RuleDoc {
        ids: &["check.required_not_evaluated"],
        severity: &[Severity::Fail],
        about: "a key named by [policy] require or --require could not be judged",
    },
    RuleDoc {
        ids: &["host.facts_unavailable"],
        severity: &[Severity::Unknown],
        about: "a snapshot without fabprobe/facts.json: the host rules are not evaluated (key host)",
    },
];

/// Every rule `check` writes itself: [`CHECK_RULES`] and [`FACT_RULES`].
pub fn check_rule_docs() -> Vec<RuleDoc> {
    let mut d = CHECK_RULES.to_vec();
    d.extend(crate::finding::docs(FACT_RULES));
    d
}

/// Run every probe with NCCL's settings `nccl`, judge the policy, rank the findings.
pub fn run(
    host: &Host,
    nccl: &NcclSettings,
    policy: &Policy,
    sampling: &Sampling,
) -> (CheckReport, Vec<Finding>) {
    let mut c = Collected {
        nccl: nccl.clone(),
        ..Collected::default()
    };
    c.first = first_sample(host, nccl, sampling);
    let (probes, probe_findings) = run_probes(host, sampling, &mut c);
    let mut findings = judge(&c, policy);
    if policy.probe_findings {
        findings.extend(probe_findings);
        // The probes' silence about RDMA means nothing when its devices could not be listed.
        if let Some(e) = c.links.as_ref().and_then(|l| l.rdma.unreadable.as_ref()) {
            findings.push(not_evaluated(
                "policy.probe_findings",
                format!("the RDMA probes saw nothing: the RDMA devices could not be listed: {e}"),
            ));
        }
    }
    findings.retain(|f| !ignored(&policy.ignore, &f.id));
    let findings = decide::fold_explained_unknowns(findings);
    let (findings, not_evaluated) = decide::split_not_evaluated(findings, &policy.require);
    let (findings, not_used_by_nccl) = split_not_used_by_nccl(findings, &c, policy);
    let mut findings = decide::causes(collapse(same_cause(findings)));
    decide::rank(&mut findings);
    let counts = counts_of(&findings, not_evaluated.len());
    let worst = worst_of(&findings);
    let report = CheckReport {
        worst,
        not_evaluated,
        not_used_by_nccl,
        verdict: verdict_of(&findings, &Saw::of(&c)),
        policy: PolicyRef {
            name: policy.name.clone(),
            source: policy.source.clone(),
            description: policy.description.clone(),
        },
        counts,
        probes,
        fingerprint: fingerprint(host, &c, policy),
        sample: c.links.as_ref().and_then(|l| l.sample.clone()),
        saw: Saw::of(&c),
        names_moved: c.topo.as_ref().map(crate::probe::topo::moved_names).unwrap_or_default(),
        facts: c.facts.take().unwrap_or(FactsState::Unavailable {
            reason: "the host probe did not run".into(),
        }),
    };
    (report, findings)
}

/// The first counter sample of a live rate rule: one sleep for every counter (links and
/// qos), not one per probe; none with a baseline given or no RDMA device.
fn first_sample(host: &Host, nccl: &NcclSettings, sampling: &Sampling) -> Option<FirstSample> {
    let d = match (sampling.interval, &sampling.baseline) {
        (Some(d), None) => d,
        _ => return None,
    };
    let l = links::probe(host);
    if !l.rdma.devices_found {
        return None;
    }
    let q = qos::probe(host, nccl.ib_tc().as_ref());
    let at = std::time::Instant::now();
    std::thread::sleep(d);
    Some(FirstSample { links: l, qos: q, at })
}

/// Every probe's report on `host`, one sample: what the judges see, for their tests.
#[cfg(test)]
pub(crate) fn collected(host: &Host, nccl: &NcclSettings) -> Collected {
    let mut c = Collected {
        nccl: nccl.clone(),
        ..Collected::default()
    };
    run_probes(host, &Sampling::default(), &mut c);
    c
}

/// Every probe in [`PROBES`] order: what each raised, and all their findings.
fn run_probes(host: &Host, sampling: &Sampling, c: &mut Collected) -> (Vec<ProbeRun>, Vec<Finding>) {
    let mut probe_findings = Vec::new();
    let mut probes = Vec::new();
    for p in PROBES {
        let f = (p.run)(host, sampling, c);
        probes.push(ProbeRun {
            name: p.name.into(),
            findings: f.len(),
        });
        probe_findings.extend(f);
    }
    (probes, probe_findings)
}
