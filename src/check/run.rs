//! `check`: every local probe, the host facts, and a policy, into one ranked list of
//! findings and the fingerprint `sweep` compares across nodes.
//!
//! Adding a probe is one line in [`PROBES`] (plus the field it fills in [`Collected`]).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};

use super::decide;
use super::policy::{PATH_ORDER, Policy, PortRules};
use super::{Finding, Severity};
use crate::host::facts::RLimit;
use crate::finding::{MissingFact, Rule, RuleDoc};
use crate::host::facts::HostFacts as Facts;
use crate::host::{FactsState, Host};
use crate::nccl::settings::NcclSettings;
use crate::probe::gdr::{GdrReport, Verdict as GdrVerdict};
use crate::probe::gids::GidsReport;
use crate::probe::links::{LinkDevice, LinkPort, LinksReport, SampleInfo};
use crate::probe::qos::{QosIf, QosReport};
use crate::probe::topo::TopoReport;
use crate::probe::{gdr, gids, links, qos, topo};
use crate::sysfs::net as netfs;

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
pub struct Collected {
    /// NCCL's settings as the job sees them (the model the CLI built); probes take their
    /// NCCL values from here.
    pub nccl: NcclSettings,
    pub topo: Option<TopoReport>,
    pub gids: Option<GidsReport>,
    pub links: Option<LinksReport>,
    pub gdr: Option<GdrReport>,
    pub qos: Option<QosReport>,
    /// The netdev MTU of each RoCE interface the qos probe found, by ifname.
    pub netdev_mtu: BTreeMap<String, Option<u32>>,
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

pub struct ProbeEntry {
    pub name: &'static str,
    pub run: fn(&Host, &Sampling, &mut Collected) -> Vec<Finding>,
}

/// Every local probe `check` runs, in order. A new probe is one line here.
pub const PROBES: &[ProbeEntry] = &[
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
    for i in &r.interfaces {
        c.netdev_mtu
            .insert(i.ifname.clone(), netfs::read_mtu(h, &i.ifname));
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

/// The holders' pids, as `kill` takes them.
fn pid_list(holders: &[crate::host::facts::DeviceHolder]) -> String {
    holders
        .iter()
        .map(|h| h.pid.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// A host-facts rule's judge.
pub type FactJudge = fn(&Facts, &mut Vec<Finding>);

/// The host facts' own rules (beside the policy's `[host]` keys), in the order their findings are written.
pub const FACT_RULES: &[Rule<FactJudge>] = &[
    Rule {
        ids: &["host.device_holders"],
        severity: "warn",
        about: "processes hold GPU/RDMA device files (a crashed job's leftovers make the next \
                job fail; the system's own GPU daemons are not holders)",
        judge: device_holders,
    },
    Rule {
        ids: &["host.device_holders_unknown"],
        severity: "unknown",
        about: "some processes' open files could not be read (not root): holders may be missing",
        judge: device_holders_unknown,
    },
    Rule {
        ids: &["host.memlock_limited"],
        severity: "warn",
        about: "RLIMIT_MEMLOCK (soft) is not unlimited",
        judge: memlock_limited,
    },
];

/// check's own findings beside the probes' and the host rules: what its man page lists.
pub const CHECK_RULES: &[RuleDoc] = &[
    RuleDoc {
        ids: &["policy.<section>.<key>"],
        severity: "fail",
        about: "the node breaks that policy key (evidence names the values)",
    },
    RuleDoc {
        ids: &["check.not_evaluated"],
        severity: "unknown",
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
        severity: "fail",
        about: "a key named by [policy] require or --require could not be judged",
    },
    RuleDoc {
        ids: &["host.facts_unavailable"],
        severity: "unknown",
        about: "a snapshot without fabprobe/facts.json: the host rules are not evaluated (key host)",
    },
];

/// Every rule `check` writes itself: [`CHECK_RULES`] and [`FACT_RULES`].
pub fn check_rule_docs() -> Vec<RuleDoc> {
    let mut d = CHECK_RULES.to_vec();
    d.extend(crate::finding::docs(FACT_RULES));
    d
}

pub fn host_findings(state: &FactsState) -> Vec<Finding> {
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

/// The `check` report (`data` of the `fabprobe.check` envelope).
#[derive(Debug, Serialize)]
pub struct CheckReport {
    /// pass | warn | fail: the worst finding. Not-evaluated keys are not scored.
    pub verdict: Severity,
    /// The worst cause (the first finding after ranking), what the drop-ins drain for.
    pub worst: Option<Worst>,
    /// Policy keys that could not be judged, and why: said beside the verdict.
    pub not_evaluated: Vec<decide::NotEvaluated>,
    /// Findings about RDMA devices NCCL would not use here (`NCCL_IB_HCA`,
    /// `NCCL_IB_DISABLE`), left out of the verdict unless `[policy] all_ports`.
    pub not_used_by_nccl: Vec<decide::NotUsed>,
    pub policy: PolicyRef,
    pub counts: Counts,
    pub probes: Vec<ProbeRun>,
    pub facts: FactsState,
    /// What should be uniform across a fleet; `sweep` compares these key by key.
    pub fingerprint: BTreeMap<String, Value>,
    /// Present when counter rates could be judged.
    pub sample: Option<SampleInfo>,
    /// What the probes saw, counted: the reader's first check that the right things were
    /// looked at. `None` where the probe did not run or could not tell.
    pub saw: Saw,
}

#[derive(Debug, Default, Serialize)]
pub struct Saw {
    pub gpus: Option<usize>,
    pub rdma_devices: Option<usize>,
    pub rdma_ports: Option<usize>,
    pub rdma_ports_active: Option<usize>,
    pub roce_netdevs: Option<usize>,
}

impl Saw {
    fn of(c: &Collected) -> Saw {
        // Unreadable RDMA listing: the counts would claim an absence nobody saw.
        let links = c.links.as_ref().filter(|l| l.rdma.unreadable.is_none());
        let ports = || {
            links
                .into_iter()
                .flat_map(|l| l.devices.iter().flat_map(|d| &d.ports))
        };
        Saw {
            gpus: c.topo.as_ref().map(|t| t.gpus.len()),
            rdma_devices: links.map(|l| l.devices.len()),
            rdma_ports: links.map(|_| ports().count()),
            rdma_ports_active: links.map(|_| {
                ports()
                    .filter(|p| p.state.as_ref().is_some_and(|s| s.name == "ACTIVE"))
                    .count()
            }),
            roce_netdevs: c
                .qos
                .as_ref()
                .filter(|q| q.rdma.unreadable.is_none())
                .map(|q| q.interfaces.len()),
        }
    }
}

/// The check's verdict: its worst finding, except that a host where no GPU and no RDMA
/// device showed up (a driver that did not load) is not evaluated, never a pass: only a
/// fail still says more than that.
fn verdict_of(findings: &[Finding], saw: &Saw) -> Severity {
    let worst = super::worst(findings);
    let nothing = saw.gpus == Some(0) && saw.rdma_devices == Some(0);
    if nothing && worst != Severity::Fail {
        Severity::Unknown
    } else {
        worst
    }
}

#[derive(Debug, Serialize)]
pub struct PolicyRef {
    pub name: String,
    pub source: String,
    pub description: Option<String>,
}

#[derive(Debug, Default, Serialize)]
pub struct Counts {
    pub fail: usize,
    pub warn: usize,
    pub pass: usize,
    pub not_evaluated: usize,
}

/// The worst cause of a check, with its class (hardware, configuration, host_limit).
#[derive(Debug, Serialize)]
pub struct Worst {
    pub id: String,
    pub subject: String,
    pub message: String,
    pub class: decide::Class,
}

#[derive(Debug, Serialize)]
pub struct ProbeRun {
    pub name: String,
    /// Findings the probe itself raised.
    pub findings: usize,
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

/// Findings about RDMA devices NCCL does not use here, set apart (unless the policy judges
/// all ports).
fn split_not_used_by_nccl(
    mut findings: Vec<Finding>,
    c: &Collected,
    policy: &Policy,
) -> (Vec<Finding>, Vec<decide::NotUsed>) {
    match (&c.links, policy.all_ports) {
        (Some(l), false) => {
            let devices: Vec<String> = l.devices.iter().map(|d| d.name.clone()).collect();
            // A device is used when NCCL's settings select any of its ports.
            let ib_use = c.nccl.ib_use();
            let uses = |dev: &str| {
                l.devices
                    .iter()
                    .filter(|d| d.name == dev)
                    .flat_map(|d| &d.ports)
                    .any(|p| ib_use.selects(dev, p.port))
            };
            // What the settings select only under a name ib_core moved (a NIC missing before it).
            let selected_as = |dev: &str, name: &str| {
                l.devices
                    .iter()
                    .filter(|d| d.name == dev)
                    .flat_map(|d| &d.ports)
                    .any(|p| ib_use.selects(name, p.port))
            };
            decide::mark_moved_names(&mut findings, &devices, selected_as);
            decide::split_not_used(findings, &devices, uses)
        }
        _ => (findings, Vec::new()),
    }
}

fn counts_of(findings: &[Finding], not_evaluated: usize) -> Counts {
    Counts {
        fail: findings.iter().filter(|f| f.severity == Severity::Fail).count(),
        warn: findings.iter().filter(|f| f.severity == Severity::Warn).count(),
        pass: findings.iter().filter(|f| f.severity == Severity::Pass).count(),
        not_evaluated,
    }
}

/// The worst finding (they are ranked), named for the drain reason.
fn worst_of(findings: &[Finding]) -> Option<Worst> {
    findings
        .iter()
        .find(|f| f.severity > Severity::Pass)
        .map(|f| Worst {
            id: f.id.clone(),
            subject: f.subject.clone(),
            message: f.message.clone(),
            class: decide::class_of(f),
        })
}

/// One cause, one finding: a NIC's narrow PCIe link is seen by topo (the slot) and by links
/// (the HCA); keep topo's, name the other in its evidence. Pure.
fn same_cause(mut findings: Vec<Finding>) -> Vec<Finding> {
    let topo_bdfs: Vec<(usize, String)> = findings
        .iter()
        .enumerate()
        .filter(|(_, f)| {
            matches!(
                f.id.as_str(),
                "topo.pcie_width_degraded" | "topo.pcie_speed_degraded"
            )
        })
        .filter_map(|(i, f)| decide::topo_bdf(f).map(|b| (i, b.to_string())))
        .collect();
    let mut drop = Vec::new();
    for (j, f) in findings.iter().enumerate() {
        if f.id != "links.pcie_downtrained" {
            continue;
        }
        let bdf = f.evidence.get("pci_bdf").and_then(|v| v.as_str()).unwrap_or("");
        if let Some((i, _)) = topo_bdfs.iter().find(|(_, b)| !bdf.is_empty() && b == bdf) {
            drop.push((j, *i, f.subject.clone()));
        }
    }
    for (_, i, subject) in &drop {
        findings[*i].evidence.insert(
            "same_cause".into(),
            json!(format!("links.pcie_downtrained {subject}")),
        );
    }
    let gone: Vec<usize> = drop.iter().map(|d| d.0).collect();
    let findings = findings
        .into_iter()
        .enumerate()
        .filter(|(j, _)| !gone.contains(j))
        .map(|(_, f)| f)
        .collect();
    policy_same_cause(findings)
}

/// The PCIe link of one NIC below a policy's minimum is also the probes' degraded link and,
/// among alike ports, the odd one out: keep the policy verdict (what the node is certified
/// against) and name the others in its `same_cause`. Pure.
fn policy_same_cause(mut findings: Vec<Finding>) -> Vec<Finding> {
    let bdf_of = |f: &Finding| -> Option<String> {
        match f.id.as_str() {
            "topo.pcie_width_degraded" | "topo.pcie_speed_degraded" => {
                decide::topo_bdf(f).map(str::to_string)
            }
            _ => f
                .evidence
                .get("pci_bdf")
                .and_then(|v| v.as_str())
                .map(str::to_string),
        }
        .filter(|b| !b.is_empty())
    };
    // Which probe finding (or peer comparison) says the same as a policy key.
    let same = |key: &str, p: &Finding, o: &Finding| -> bool {
        let probe = match key {
            "pcie_width_min" => ["topo.pcie_width_degraded", "links.pcie_downtrained"],
            _ => ["topo.pcie_speed_degraded", "links.pcie_downtrained"],
        };
        let alike = o.id.starts_with("policy.")
            && o.id.ends_with(".all_alike")
            && o.evidence.get("field").and_then(|v| v.as_str()) == Some("pcie_link")
            && o.subject == p.subject;
        alike || (probe.contains(&o.id.as_str()) && bdf_of(o).is_some() && bdf_of(o) == bdf_of(p))
    };
    let mut gone = vec![false; findings.len()];
    for i in 0..findings.len() {
        let p = &findings[i];
        let Some(key) = ["pcie_width_min", "pcie_gen_min"]
            .into_iter()
            .find(|k| p.id.starts_with("policy.") && p.id.ends_with(&format!(".{k}")))
        else {
            continue;
        };
        if gone[i] {
            continue;
        }
        let mut named = Vec::new();
        for j in 0..findings.len() {
            if j != i && !gone[j] && same(key, &findings[i], &findings[j]) {
                gone[j] = true;
                let o = &findings[j];
                named.push(format!("{} {}", o.id, o.subject));
                if let Some(more) = o.evidence.get("same_cause").and_then(|v| v.as_str()) {
                    named.push(more.to_string());
                }
            }
        }
        if !named.is_empty() {
            findings[i]
                .evidence
                .insert("same_cause".into(), json!(named.join("; ")));
        }
    }
    findings
        .into_iter()
        .zip(gone)
        .filter(|(_, g)| !g)
        .map(|(f, _)| f)
        .collect()
}

/// Repeated warnings of one kind with one message and the same facts named in evidence (one
/// per netdev, per port) collapse into one finding that lists the subjects. A fix that
/// differs only by the device's name is given once, "likewise" for the others; any other
/// fix is kept too. Pure.
fn collapse(findings: Vec<Finding>) -> Vec<Finding> {
    // Each kept finding, the subjects said likewise, and the evidence keys it came with.
    let mut out: Vec<(Finding, Vec<String>, Vec<String>)> = Vec::new();
    let first_word = |s: &str| s.split_whitespace().next().unwrap_or("").to_string();
    for f in findings {
        let keys: Vec<String> = f.evidence.keys().cloned().collect();
        let same = out.iter_mut().find(|(o, _, k)| {
            o.severity == Severity::Warn
                && f.severity == Severity::Warn
                && o.id == f.id
                && o.message == f.message
                // Other facts are another reason (pairs NCCL took past a nearer NIC it does
                // not open, apart from those the GDR level alone turns off).
                && *k == keys
        });
        let Some((o, likewise, _)) = same else {
            out.push((f, Vec::new(), keys));
            continue;
        };
        let (name, first) = (first_word(&f.subject), first_word(&o.subject));
        o.subject = format!("{}, {}", o.subject, f.subject);
        // Evidence that differs by device would speak for the first one only: drop it.
        o.evidence.retain(|k, v| f.evidence.get(k) == Some(v));
        match (f.fix, &mut o.fix) {
            (Some(fix), Some(x)) if !name.is_empty() && fix.replace(&name, &first) == *x => {
                likewise.push(name)
            }
            (Some(fix), Some(x)) if !x.contains(&fix) => *x = format!("{x}; {fix}"),
            (Some(fix), x @ None) => *x = Some(fix),
            _ => {}
        }
    }
    out.into_iter()
        .map(|(mut f, likewise, _)| {
            if let (Some(x), false) = (&mut f.fix, likewise.is_empty()) {
                *x = format!("{x}; likewise for {}", likewise.join(", "));
            }
            f
        })
        .collect()
}

fn ignored(patterns: &[String], id: &str) -> bool {
    patterns.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => id.starts_with(prefix),
        None => p == id,
    })
}

fn not_evaluated(key: &str, why: impl Into<String>) -> Finding {
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

/// `[gdr] ready`: every pair NCCL would use (each GPU with its nearest NICs) has GPUDirect
/// RDMA on (peer memory, or DMA-BUF possible) and no ACS redirect between the two.
fn judge_gdr(c: &Collected, want: bool, out: &mut Vec<Finding>) {
    let Some(r) = &c.gdr else {
        out.push(not_evaluated("gdr.ready", "the gdr probe did not run"));
        return;
    };
    if !want {
        // `ready = false` asks for nothing (a node that does not use GDR).
        return;
    }
    let used: Vec<_> = r.pairs.iter().filter(|x| x.nccl_nearest).collect();
    if r.gpus.is_empty() || r.nics.is_empty() {
        // No GPU or no RDMA NIC seen: nothing to judge (gpu.count / ib.count judge absence).
        // Worded by the one missing fact, as the [gpu] keys word it (one line in `check`).
        let (missing, fact) = match r.gpus.len() {
            0 => (MissingFact::Gpu, "0 GPUs found".to_string()),
            _ => (MissingFact::RdmaDevice, format!("{} GPUs, 0 RDMA NICs found", r.gpus.len())),
        };
        out.push(nothing_here("gdr.ready", Some(missing), format!("no GPU-NIC pair to judge ({fact})")));
        return;
    }
    if used.is_empty() {
        let f = violation(
            "gdr.ready",
            "host",
            format!(
                "no GPU-NIC pair for GPUDirect RDMA ({} GPUs, {} RDMA NICs)",
                r.gpus.len(),
                r.nics.len()
            ),
        )
        .evidence("gpus", r.gpus.len())
        .evidence("nics", r.nics.len())
        .fix("GDR needs NVIDIA GPUs and RDMA NICs on the same host: check `fabprobe topo`");
        out.push(f);
        return;
    }
    for x in used {
        gdr_pair(r, x, out);
    }
}

/// `gdr.ready` for one GPU-NIC pair NCCL would use: off (distance, no peer memory) or
/// redirected by ACS is a violation; unknown (path, peer memory, ACS unread) is not evaluated.
fn gdr_pair(r: &GdrReport, x: &crate::probe::gdr::GdrPair, out: &mut Vec<Finding>) {
    let subject = x.subject.clone();
    let path = x.path.map(|p| p.as_str()).unwrap_or("?");
    match x.verdict {
        None => out.push(not_evaluated(
            "gdr.ready",
            format!("{subject}: the path between them is unknown"),
        )),
        Some(GdrVerdict::Unknown) => out.push(
            not_evaluated(
                "gdr.ready",
                format!(
                    "{subject}: no peer-memory client seen and DMA-BUF cannot be told (unknown: {})",
                    if r.dmabuf.unknown.is_empty() {
                        "/sys/module not visible".to_string()
                    } else {
                        r.dmabuf.unknown.join(", ")
                    }
                ),
            )
            .evidence("dmabuf_path", r.dmabuf.path.as_str()),
        ),
        Some(v @ (GdrVerdict::OffDistance | GdrVerdict::OffNoPeerMemory)) => {
            let why = if v == GdrVerdict::OffDistance {
                format!(
                    "the path {path} is farther than NCCL_NET_GDR_LEVEL={} ({})",
                    r.nccl_net_gdr_level.name, r.nccl_net_gdr_level.source
                )
            } else {
                "no peer-memory client (nvidia-peermem) and no DMA-BUF path".to_string()
            };
            let nearer = crate::probe::gdr::nearer_nics_not_opened(r, x);
            let f = violation("gdr.ready", &subject, format!("GPUDirect RDMA is off for {subject}: {why}"))
                .evidence("verdict", v.as_str())
                .evidence("path", path)
                .evidence("nvidia_peermem_loaded", r.peer_memory.nvidia_peermem_loaded)
                .evidence("dmabuf_possible", r.dmabuf.possible)
                .fix("see the gdr.* finding for this pair, or `fabprobe gdr`");
            out.push(match nearer.is_empty() {
                true => f,
                false => f.evidence("nearer_nics_not_opened", nearer.join(" ")),
            });
        }
        // Both detours through the root complex fail alike (`gdr::detour_severity`).
        Some(_) if x.acs_redirect => out.push(
            violation(
                "gdr.ready",
                &subject,
                format!("ACS redirects peer-to-peer traffic between {subject} through the root complex"),
            )
            .evidence("verdict", "acs_redirect")
            .evidence("bridges_between", x.bridges_between.join(" "))
            .fix("turn ACS redirect off on the bridges between them (`setpci`, or the BIOS), see `fabprobe gdr`"),
        ),
        Some(_) if crate::probe::gdr::translated_type(r, x).is_some() => {
            let t = crate::probe::gdr::translated_type(r, x).unwrap_or_default();
            out.push(
                violation(
                    "gdr.ready",
                    &subject,
                    format!("the IOMMU translates the DMA of {subject} (group type {t}): GPUDirect traffic goes through the root complex"),
                )
                .evidence("verdict", "iommu_translation")
                .evidence("iommu_group_type", t)
                .fix("boot with `iommu=pt`, see `fabprobe gdr`"),
            )
        }
        // Unreadable ACS (non-root reads 64 bytes of config space): not a pass.
        Some(_) if x.acs_unknown => out.push(not_evaluated(
            "gdr.ready",
            format!(
                "{subject}: ACS of the bridges between them could not be read (config space past 64 bytes needs root)"
            ),
        )),
        Some(_) => {}
    }
}

/// The host facts as the `[host]` rules see them (the host probe read them).
struct HostFacts<'a> {
    f: &'a crate::host::facts::HostFacts,
    r: &'a super::policy::HostRules,
}

/// A `[host]` key's judge.
type HostJudge = fn(&HostFacts<'_>, &mut Vec<Finding>);

/// `[host]`: each key its own rule, in this order.
const HOST_RULES: &[(&[&str], HostJudge)] = &[
    (&["memlock_unlimited"], host_memlock_unlimited),
    (&["memlock_min_bytes"], host_memlock_min_bytes),
    (&["device_holders_max"], host_device_holders_max),
    (&["kernel"], host_kernel),
    (&["memory_min_gib"], host_memory_min_gib),
    (&["cpu_count_min"], host_cpu_count_min),
];

fn judge_host(c: &Collected, p: &Policy, out: &mut Vec<Finding>) {
    let r = &p.host;
    let any = r.memlock_unlimited.is_some()
        || r.memlock_min_bytes.is_some()
        || r.device_holders_max.is_some()
        || !r.kernel.is_empty()
        || r.memory_min_gib.is_some()
        || r.cpu_count_min.is_some();
    if !any {
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
    let x = HostFacts { f, r };
    for (_, judge) in HOST_RULES {
        judge(&x, out);
    }
}

fn host_memlock_unlimited(x: &HostFacts, out: &mut Vec<Finding>) {
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

fn host_memlock_min_bytes(x: &HostFacts, out: &mut Vec<Finding>) {
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

fn host_device_holders_max(x: &HostFacts, out: &mut Vec<Finding>) {
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

fn host_kernel(x: &HostFacts, out: &mut Vec<Finding>) {
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

fn host_memory_min_gib(x: &HostFacts, out: &mut Vec<Finding>) {
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

fn host_cpu_count_min(x: &HostFacts, out: &mut Vec<Finding>) {
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


/// The GPUs as the `[gpu]` rules see them (the topo probe ran).
struct Gpus<'a> {
    c: &'a Collected,
    t: &'a TopoReport,
    r: &'a super::policy::GpuRules,
}

/// A `[gpu]` key's judge.
type GpuJudge = fn(&Gpus<'_>, &mut Vec<Finding>);

/// `[gpu]`: each key its own rule, in this order.
const GPU_RULES: &[(&str, GpuJudge)] = &[
    ("count", gpu_count),
    ("model", gpu_model),
    ("driver", gpu_driver),
    ("nvlink_min", gpu_nvlink_min),
    ("nic_path_max", gpu_nic_path_max),
    ("nic_per_gpu", gpu_nic_per_gpu),
];

fn judge_gpu(c: &Collected, p: &Policy, out: &mut Vec<Finding>) {
    let r = &p.gpu;
    let Some(t) = &c.topo else {
        if *r != Default::default() {
            out.push(not_evaluated("gpu", "the topo probe did not run"));
        }
        return;
    };
    let x = Gpus { c, t, r };
    for (_, judge) in GPU_RULES {
        judge(&x, out);
    }
}

/// A `[gpu]` key with nothing to judge: `no GPU`, `no GPU pair`.
fn nothing_to_judge(t: &TopoReport, key: &str, what: &str) -> Finding {
    // One GPU and no pair is a reason of its own, not a missing fact.
    let fact = t.gpus.is_empty().then_some(MissingFact::Gpu);
    nothing_here(key, fact, format!("{what} to judge ({} GPUs found)", t.gpus.len()))
}

fn gpu_count(x: &Gpus, out: &mut Vec<Finding>) {
    let (t, r) = (x.t, x.r);
    // The PCI bus could not be listed (and NVML gave no list): the count is unknown.
    let unlisted = t
        .notes
        .iter()
        .find(|n| n.starts_with("cannot list PCI devices"))
        .filter(|_| t.gpus.is_empty());
    if let (Some(_), Some(why)) = (r.count, unlisted) {
        out.push(not_evaluated("gpu.count", why.clone()));
    }
    if let Some(n) = r.count
        && unlisted.is_none()
        && t.gpus.len() as u64 != n
    {
        let ids: Vec<&str> = t.gpus.iter().map(|g| g.pci_bus_id.as_str()).collect();
        out.push(
            violation(
            "gpu.count",
            "GPUs",
            format!("{} found, {n} expected", crate::finding::spell::count(t.gpus.len(), "GPU", "GPUs")),
        )
                .evidence("found", t.gpus.len())
                .evidence("expected", n)
                .evidence("pci_bus_ids", ids)
                .fix("a GPU fell off the bus or was not enumerated: check `dmesg | grep -i -e NVRM -e Xid`, `lspci -d 10de:`, reseat or RMA"),
        );
    }
}

fn gpu_model(x: &Gpus, out: &mut Vec<Finding>) {
    let (t, r) = (x.t, x.r);
    if t.gpus.is_empty() && r.model.is_some() {
        out.push(nothing_to_judge(t, "gpu.model", "no GPU"));
    }
    if let Some(model) = &r.model {
        for g in &t.gpus {
            match &g.name {
                None => {
                    out.push(not_evaluated(
                        "gpu.model",
                        format!("{}: no GPU name (NVML unavailable)", g.label),
                    ));
                    break;
                }
                Some(name) if !name.contains(model.as_str()) => out.push(
                    violation(
                        "gpu.model",
                        &g.label,
                        format!("{} is a {name}, not {model}", g.label),
                    )
                    .evidence("name", name.as_str())
                    .evidence("pci_bus_id", g.pci_bus_id.as_str()),
                ),
                _ => {}
            }
        }
    }
}

fn gpu_driver(x: &Gpus, out: &mut Vec<Finding>) {
    let (c, r) = (x.c, x.r);
    if !r.driver.is_empty() {
        match &c.driver_version {
            None => out.push(not_evaluated(
                "gpu.driver",
                "no driver version (NVML unavailable)",
            )),
            Some(v) if !r.driver.iter().any(|p| v.starts_with(p.as_str())) => out.push(
                violation(
                    "gpu.driver",
                    "driver",
                    format!("driver {v} is not one of the allowed {}", r.driver.join(", ")),
                )
                .evidence("driver_version", v.as_str())
                .fix("install the fleet's driver version"),
            ),
            _ => {}
        }
    }
}

fn gpu_nvlink_min(x: &Gpus, out: &mut Vec<Finding>) {
    let (t, r) = (x.t, x.r);
    if r.nvlink_min.is_some() && t.gpus.len() < 2 {
        out.push(nothing_to_judge(t, "gpu.nvlink_min", "no GPU pair"));
    }
    if let Some(min) = r.nvlink_min {
        if !t.nvlink_available {
            out.push(not_evaluated(
                "gpu.nvlink_min",
                t.nvlink_unavailable_reason
                    .clone()
                    .unwrap_or_else(|| "NVLink data unavailable".into()),
            ));
        } else {
            // One finding per GPU that lost links, not one per pair it is in.
            for l in topo::nvlink_by_gpu(t, |n| n < min) {
                let cells: Vec<String> = l
                    .pairs
                    .iter()
                    .map(|(p, c)| {
                        if p.is_empty() {
                            c.clone()
                        } else {
                            format!("{p} {c}")
                        }
                    })
                    .collect();
                out.push(
                    violation(
                        "gpu.nvlink_min",
                        &l.subject,
                        format!(
                            "{} is below NV{min} to {} of its {} GPU peers ({})",
                            l.subject,
                            l.pairs.len(),
                            l.peers,
                            cells.join(", ")
                        ),
                    )
                    .evidence("low_pairs", cells.join(", "))
                    .evidence("nvlink_min", min)
                    .fix(topo::nvlink_fix(&l.subject)),
                );
            }
        }
    }
}

/// For each GPU, the NICs at the policy's `nic_path_max` or nearer (every NIC without one).
fn near_nics(t: &TopoReport, r: &super::policy::GpuRules) -> Vec<Vec<usize>> {
    let idx = |label: &str| t.labels.iter().position(|l| l == label);
    let max_rank = r
        .nic_path_max
        .as_deref()
        .and_then(rank_of_cell)
        .unwrap_or(usize::MAX);
    t
        .gpus
        .iter()
        .map(|g| {
            let Some(i) = idx(&g.label) else { return Vec::new() };
            t.nics
                .iter()
                .enumerate()
                .filter(|(_, n)| {
                    idx(&n.label)
                        .and_then(|j| t.matrix.get(i)?.get(j))
                        .and_then(|c| rank_of_cell(c))
                        .is_some_and(|r| r <= max_rank)
                })
                .map(|(k, _)| k)
                .collect()
        })
        .collect()
}

fn gpu_nic_path_max(x: &Gpus, out: &mut Vec<Finding>) {
    let (t, r) = (x.t, x.r);
    if t.gpus.is_empty() && r.nic_path_max.is_some() {
        out.push(nothing_to_judge(t, "gpu.nic_path_max", "no GPU"));
    }
    let idx = |label: &str| t.labels.iter().position(|l| l == label);
    let near = near_nics(t, r);
    if let Some(max) = &r.nic_path_max {
        for (g, n) in t.gpus.iter().zip(&near) {
            if n.is_empty() {
                let best = idx(&g.label)
                    .and_then(|i| {
                        t.nics
                            .iter()
                            .filter_map(|nic| {
                                let c = t.matrix.get(i)?.get(idx(&nic.label)?)?;
                                Some((
                                    rank_of_cell(c).unwrap_or(usize::MAX),
                                    format!("{} {c}", nic.ibdev),
                                ))
                            })
                            .min()
                    })
                    .map(|(_, s)| s)
                    .unwrap_or_else(|| "no RDMA NIC".into());
                out.push(
                    violation("gpu.nic_path_max", &g.label, format!("{} has no RDMA NIC at {max} or nearer (nearest: {best})", g.label))
                        .evidence("nearest", best)
                        .evidence("nic_path_max", max.as_str())
                        .fix("traffic from this GPU crosses the CPU: check that the NIC behind its PCIe switch is present and bound to its driver (lspci, dmesg mlx5)"),
                );
            }
        }
    }
}

fn gpu_nic_per_gpu(x: &Gpus, out: &mut Vec<Finding>) {
    let (t, r) = (x.t, x.r);
    if t.gpus.is_empty() && r.nic_per_gpu == Some(true) {
        out.push(nothing_to_judge(t, "gpu.nic_per_gpu", "no GPU"));
    }
    let near = near_nics(t, r);
    if r.nic_per_gpu == Some(true) {
        let matched = matching(&near, t.nics.len());
        if matched < t.gpus.len() {
            out.push(
                violation(
                    "gpu.nic_per_gpu",
                    "GPUs",
                    format!(
                        "only {matched} of {} GPUs can have a NIC of their own{}",
                        t.gpus.len(),
                        r.nic_path_max.as_deref().map(|m| format!(" at {m} or nearer")).unwrap_or_default()
                    ),
                )
                .evidence("gpus", t.gpus.len())
                .evidence("nics", t.nics.len())
                .evidence("matched", matched)
                .fix("a NIC is missing or on the wrong PCIe switch: compare `fabprobe topo` with the platform's wiring"),
            );
        }
    }
}

/// Size of a maximum one-to-one matching of GPUs to NICs (Kuhn's augmenting paths).
fn matching(near: &[Vec<usize>], nics: usize) -> usize {
    fn try_gpu(g: usize, near: &[Vec<usize>], seen: &mut [bool], owner: &mut [Option<usize>]) -> bool {
        for &n in &near[g] {
            if n >= seen.len() || seen[n] {
                continue;
            }
            seen[n] = true;
            if owner[n].is_none_or(|o| try_gpu(o, near, seen, owner)) {
                owner[n] = Some(g);
                return true;
            }
        }
        false
    }
    let mut owner = vec![None; nics];
    (0..near.len())
        .filter(|&g| try_gpu(g, near, &mut vec![false; nics], &mut owner))
        .count()
}

fn ports_of<'a>(l: &'a LinksReport, layer: &str) -> Vec<(&'a LinkDevice, &'a LinkPort)> {
    l.devices
        .iter()
        .flat_map(|d| d.ports.iter().map(move |p| (d, p)))
        .filter(|(_, p)| p.link_layer.as_deref() == Some(layer))
        .collect()
}

/// A port's NIC against a policy's PCIe minimum, one shape for both attributes:
/// `pcie_gen_min` (the link speed's generation) and `pcie_width_min` (its width). An
/// unreadable attribute is not evaluated; below the minimum is a violation with the reading,
/// the minimum, the BDF and the fix.
fn pcie_minimum(key: &str, attr: &str, min: u64, d: &LinkDevice, s: &str) -> Option<Finding> {
    let link = d.attrs.pci_link.as_ref();
    let gen_check = attr == "pcie_gen_min";
    // (the value compared, its sysfs reading, the message) when the attribute was read.
    let reading: Option<(u64, Value, String)> = if gen_check {
        link.and_then(|l| l.current_speed.as_ref()).map(|sp| {
            let msg = format!("{}'s PCIe link runs at {}, below Gen{min}", d.name, sp.raw);
            (
                sp.generation.map(u64::from).unwrap_or(0),
                json!(sp.raw.as_str()),
                msg,
            )
        })
    } else {
        link.and_then(|l| l.current_width).map(|w| {
            let msg = format!("{}'s PCIe link is x{w}, below x{min}", d.name);
            (w as u64, json!(w), msg)
        })
    };
    let (sysfs, fix_head) = if gen_check {
        (
            "current_link_speed",
            "reseat the adapter; check the slot's BIOS PCIe speed setting",
        )
    } else {
        (
            "current_link_width",
            "reseat the adapter or move it to a x16 slot",
        )
    };
    let Some((value, raw, message)) = reading else {
        return Some(not_evaluated(key, format!("{}: no {sysfs}", d.name)));
    };
    (value < min).then(|| {
        violation(key, s, message)
            .evidence(sysfs, raw)
            .evidence(attr, min)
            .evidence("pci_bdf", d.attrs.pci_bdf.clone())
            .fix(format!(
                "{fix_head}; {}",
                crate::probe::topo::lnk_compare(d.attrs.pci_bdf.as_deref().unwrap_or(""))
            ))
    })
}

fn subject(d: &LinkDevice, p: &LinkPort) -> String {
    crate::finding::spell::port(&d.name, p.port)
}

/// One field `all_alike` compares, read from a port and its device.
type PortField = fn(&LinkDevice, &LinkPort) -> Option<String>;

/// One layer's ports (`[ib]`: InfiniBand, `[roce]`: Ethernet) as the port rules see them.
struct Ports<'a> {
    l: &'a LinksReport,
    sect: &'a str,
    layer: &'a str,
    r: &'a PortRules,
    ports: Vec<(&'a LinkDevice, &'a LinkPort)>,
}

impl Ports<'_> {
    /// `ib.state`: the key as the policy file names it.
    fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.sect)
    }
}

/// How a port rule judges: the layer's ports together, or each port (port by port, where
/// the first per-port rule stands, so one port's findings stay together).
enum PortJudge {
    Layer(fn(&Ports, &mut Vec<Finding>)),
    Port(fn(&Ports, &LinkDevice, &LinkPort, &mut Vec<Finding>)),
}

/// `[ib]` and `[roce]`: each key its own rule, in this order.
const PORT_RULES: &[(&[&str], PortJudge)] = &[
    (&["count", "count_min"], PortJudge::Layer(port_count)),
    (&["state"], PortJudge::Port(port_state)),
    (&["rate_min_gbps"], PortJudge::Port(port_rate_min_gbps)),
    (&["width"], PortJudge::Port(port_width)),
    (&["speed"], PortJudge::Port(port_speed)),
    (&["pcie_gen_min", "pcie_width_min"], PortJudge::Port(port_pcie_min)),
    (&["fw_ver"], PortJudge::Port(port_fw_ver)),
    (&["all_alike"], PortJudge::Layer(port_all_alike)),
];

fn judge_ports(l: &LinksReport, sect: &str, layer: &str, r: &PortRules, out: &mut Vec<Finding>) {
    if r.is_empty() {
        return;
    }
    let x = Ports {
        l,
        sect,
        layer,
        r,
        ports: ports_of(l, layer),
    };
    let key = |k: &str| x.key(k);
    if let Some(e) = &l.rdma.unreadable {
        // Whether there are ports at all is unknown: every rule, counts too.
        for k in r.set_keys() {
            out.push(not_evaluated(
                &key(k),
                format!("the RDMA devices could not be listed: {e}"),
            ));
        }
        return;
    }
    if x.ports.is_empty() {
        for k in r.set_keys().into_iter().filter(|k| !k.starts_with("count")) {
            let fact = match layer {
                "InfiniBand" => MissingFact::InfinibandPort,
                _ => MissingFact::RoceNetdev,
            };
            out.push(nothing_here(&key(k), Some(fact), format!("no {layer} ports to judge")));
        }
    }
    let mut ports_done = false;
    for (_, judge) in PORT_RULES {
        match judge {
            PortJudge::Layer(j) => j(&x, out),
            PortJudge::Port(_) if ports_done => {}
            PortJudge::Port(_) => {
                ports_done = true;
                for (d, p) in &x.ports {
                    for (_, judge) in PORT_RULES {
                        if let PortJudge::Port(j) = judge {
                            j(&x, d, p, out);
                        }
                    }
                }
            }
        }
    }
}

fn port_count(x: &Ports, out: &mut Vec<Finding>) {
    let (l, layer, r, ports) = (x.l, x.layer, x.r, &x.ports);
    let key = |k: &str| x.key(k);
    let names: Vec<String> = ports.iter().map(|(d, p)| subject(d, p)).collect();
    // Ports whose link_layer could not be read may be this layer's: a count that they
    // could make right is unknown, not wrong.
    let unlayered: Vec<String> = l
        .devices
        .iter()
        .flat_map(|d| d.ports.iter().map(move |p| (d, p)))
        .filter(|(_, p)| p.link_layer.is_none())
        .map(|(d, p)| subject(d, p))
        .collect();
    let (known, maybe) = (ports.len() as u64, (ports.len() + unlayered.len()) as u64);
    let unknown_count = |k: &str| {
        not_evaluated(
            &key(k),
            format!(
                "{known} found, and the link_layer of {} could not be read",
                unlayered.join(", ")
            ),
        )
    };
    if let Some(n) = r.count.filter(|n| *n != known) {
        if (known..=maybe).contains(&n) {
            out.push(unknown_count("count"));
        } else {
            out.push(
                violation(&key("count"), format!("{layer} ports"), format!("{} found, {n} expected", crate::finding::spell::count(known as usize, &format!("{layer} port"), &format!("{layer} ports"))))
                    .evidence("found", names.clone())
                    .evidence("expected", n)
                    .fix("an HCA is missing, disabled or in the wrong link-layer mode: `lspci -D -d 15b3:` lists the Mellanox adapters, `for d in $(lspci -D -d 15b3: | cut -d' ' -f1); do mlxconfig -d $d q LINK_TYPE_P1; done` their link type, `dmesg | grep mlx5` their errors"),
            );
        }
    }
    if let Some(n) = r.count_min.filter(|n| *n > known) {
        if maybe >= n {
            out.push(unknown_count("count_min"));
        } else {
            out.push(
                violation(
                    &key("count_min"),
                    format!("{layer} ports"),
                    format!(
                        "{} found, at least {n} expected",
                        crate::finding::spell::count(known as usize, &format!("{layer} port"), &format!("{layer} ports"))
                    ),
                )
                .evidence("found", names.clone())
                .evidence("count_min", n),
            );
        }
    }
}

fn port_state(x: &Ports, d: &LinkDevice, p: &LinkPort, out: &mut Vec<Finding>) {
    let r = x.r;
    let s = subject(d, p);
    if !r.state.is_empty() && p.state.is_none() {
        // Unreadable (missing, EACCES) is unknown, never "not ACTIVE".
        out.push(not_evaluated(
            &x.key("state"),
            format!("{s}: its state could not be read"),
        ));
    } else if !r.state.is_empty() {
        let st = p.state.as_ref().map(|x| x.name.as_str()).unwrap_or("unknown");
        if !r.state.iter().any(|x| x == st) {
            out.push(
                violation(&x.key("state"), &s, format!("{s} is {st}, expected {}", r.state.join(" or ")))
                    .evidence("state", st)
                    .evidence("phys_state", p.phys_state.as_ref().map(|x| x.name.clone()))
                    .fix(format!("check the cable and the switch port{}; Polling means no link partner, INIT/ARMED means no subnet manager has configured it", crate::probe::links::cable_tools(d, p))),
            );
        }
    }
}

fn port_rate_min_gbps(x: &Ports, d: &LinkDevice, p: &LinkPort, out: &mut Vec<Finding>) {
    let r = x.r;
    let s = subject(d, p);
    let rate = p.rate.as_ref();
    if let Some(min) = r.rate_min_gbps {
        match rate {
            None => out.push(not_evaluated(&x.key("rate_min_gbps"), format!("{s}: no rate attribute"))),
            Some(rt) if rt.gbps < min => out.push(
                violation(&x.key("rate_min_gbps"), &s, format!(
                    "{s} runs at {}, below {}",
                    crate::finding::spell::rate(rt.gbps, rt.lanes, rt.speed.as_deref()),
                    crate::finding::spell::gbps(min)
                ))
                    .evidence("rate", rt.raw.as_str())
                    .evidence("rate_min_gbps", min)
                    .fix(format!("the link trained down: reseat or replace the cable/transceiver, check the switch port speed settings{}", crate::probe::links::cable_tools(d, p))),
            ),
            _ => {}
        }
    }
}

fn port_width(x: &Ports, d: &LinkDevice, p: &LinkPort, out: &mut Vec<Finding>) {
    let r = x.r;
    let s = subject(d, p);
    let rate = p.rate.as_ref();
    if !r.width.is_empty() {
        let w = rate.and_then(|x| x.lanes).map(|n| format!("{n}X"));
        match w {
            None => out.push(not_evaluated(
                &x.key("width"),
                format!("{s}: no width in the rate attribute"),
            )),
            Some(w) if !r.width.contains(&w) => out.push(
                violation(
                    &x.key("width"),
                    &s,
                    format!("{s} is {w} wide, expected {}", r.width.join(" or ")),
                )
                .evidence("rate", rate.map(|x| x.raw.clone()))
                .fix(format!("a lane is down: reseat or replace the cable; lane errors{}", crate::probe::links::cable_tools(d, p))),
            ),
            _ => {}
        }
    }
}

fn port_speed(x: &Ports, d: &LinkDevice, p: &LinkPort, out: &mut Vec<Finding>) {
    let r = x.r;
    let s = subject(d, p);
    let rate = p.rate.as_ref();
    if !r.speed.is_empty() {
        match rate.and_then(|x| x.speed_name()) {
            None => out.push(not_evaluated(
                &x.key("speed"),
                format!("{s}: no lane speed in the rate attribute"),
            )),
            Some(sp) if !r.speed.iter().any(|x| x == sp) => out.push(
                violation(
                    &x.key("speed"),
                    &s,
                    format!("{s} runs at {sp}, expected {}", r.speed.join(" or ")),
                )
                .evidence("rate", rate.map(|x| x.raw.clone()))
                .fix("the link trained at a lower speed: check the cable's rating and the switch port"),
            ),
            _ => {}
        }
    }
}

fn port_pcie_min(x: &Ports, d: &LinkDevice, p: &LinkPort, out: &mut Vec<Finding>) {
    let r = x.r;
    let s = subject(d, p);
    for (k, min) in [
        ("pcie_gen_min", r.pcie_gen_min),
        ("pcie_width_min", r.pcie_width_min),
    ] {
        if let Some(min) = min {
            out.extend(pcie_minimum(&x.key(k), k, min, d, &s));
        }
    }
}

fn port_fw_ver(x: &Ports, d: &LinkDevice, p: &LinkPort, out: &mut Vec<Finding>) {
    let r = x.r;
    let s = subject(d, p);
    if !r.fw_ver.is_empty() {
        match &d.attrs.fw_ver {
            None => out.push(not_evaluated(&x.key("fw_ver"), format!("{}: no fw_ver", d.name))),
            Some(v) if !r.fw_ver.iter().any(|x| v.starts_with(x.as_str())) => out.push(
                violation(
                    &x.key("fw_ver"),
                    &s,
                    format!(
                        "{} firmware {v} is not one of the allowed {}",
                        d.name,
                        r.fw_ver.join(", ")
                    ),
                )
                .evidence("fw_ver", v.as_str())
                .fix("flash the fleet's firmware (mlxfwmanager) and reset the adapter"),
            ),
            _ => {}
        }
    }
}

fn port_all_alike(x: &Ports, out: &mut Vec<Finding>) {
    let (r, ports) = (x.r, &x.ports);
    let key = |k: &str| x.key(k);
    if r.all_alike == Some(true) && ports.len() > 1 {
        let fields: [(&str, PortField); 4] = [
            ("rate", |_, p| p.rate.as_ref().map(|r| r.raw.clone())),
            ("hca_type", |d, _| {
                d.attrs.hca_type.clone().or_else(|| d.attrs.board_id.clone())
            }),
            ("fw_ver", |d, _| d.attrs.fw_ver.clone()),
            ("pcie_link", |d, _| {
                d.attrs.pci_link.as_ref().map(|l| {
                    format!(
                        "{} x{}",
                        l.current_speed.as_ref().map(|s| s.raw.as_str()).unwrap_or("?"),
                        l.current_width.map(|w| w.to_string()).unwrap_or("?".into())
                    )
                })
            }),
        ];
        for (field, get) in fields {
            let vals: Vec<Option<String>> = ports.iter().map(|(d, p)| get(d, p)).collect();
            let mut counts: BTreeMap<&Option<String>, usize> = BTreeMap::new();
            for v in &vals {
                *counts.entry(v).or_default() += 1;
            }
            let Some((maj, n)) = counts.iter().max_by_key(|(_, n)| **n).map(|(v, n)| (*v, *n)) else {
                continue;
            };
            if counts.len() == 1 {
                continue;
            }
            for ((d, p), v) in ports.iter().zip(&vals) {
                if v.is_none() && maj.is_some() {
                    // A value that could not be read is not a different one.
                    out.push(not_evaluated(
                        &key("all_alike"),
                        format!("{}: its {field} could not be read", subject(d, p)),
                    ));
                    continue;
                }
                if v != maj {
                    let s = subject(d, p);
                    out.push(
                        violation(
                            &key("all_alike"),
                            &s,
                            // Shown in the one rendered unit; the evidence keeps the kernel's words.
                            format!(
                                "{s} {field} is {}, unlike {n} of {} ports ({})",
                                v.as_deref().unwrap_or("unknown").replace(" Gb/sec", " Gb/s"),
                                ports.len(),
                                maj.as_deref().unwrap_or("unknown").replace(" Gb/sec", " Gb/s")
                            ),
                        )
                        .evidence("field", field)
                        .evidence("value", v.clone())
                        .evidence("majority", maj.clone())
                        .evidence("majority_ports", n),
                    );
                }
            }
        }
    }
}

fn judge_counters(l: &LinksReport, p: &Policy, out: &mut Vec<Finding>) {
    if p.counters_max_per_hour.is_empty() {
        return;
    }
    if let Some(why) = l.sample.as_ref().and_then(|s| s.counters_reset.as_ref()) {
        out.push(not_evaluated(
            "counters.max_per_hour",
            format!("the counters were reset: {why}; a rate needs two samples of one boot"),
        ));
        return;
    }
    let Some(secs) = l.sample.as_ref().and_then(|s| s.interval_s).filter(|s| *s > 0.0) else {
        out.push(not_evaluated(
            "counters.max_per_hour",
            "counter rates need two samples: run with --interval SECONDS (live) or --baseline SNAPSHOT",
        ));
        return;
    };
    for name in p.counters_max_per_hour.keys() {
        let sampled = l
            .devices
            .iter()
            .flat_map(|d| &d.ports)
            .any(|port| port.counter(name).is_some_and(|c| c.delta.is_some()));
        if !sampled {
            out.push(not_evaluated(
                &format!("counters.max_per_hour.{name}"),
                format!("no port has a sampled {name} counter"),
            ));
        }
    }
    for d in &l.devices {
        for port in &d.ports {
            let s = subject(d, port);
            for (name, max) in &p.counters_max_per_hour {
                let Some(c) = port.counter(name) else { continue };
                let Some(delta) = &c.delta else { continue };
                let (inc, exact) = match delta.exact() {
                    Some(v) => (v, true),
                    None => (delta.lower_bound(), false),
                };
                let per_hour = inc as f64 * 3600.0 / secs;
                if per_hour > *max {
                    out.push(
                        violation("counters.max_per_hour", &s, format!(
                            "{s} {name} grew by {}{inc} in {secs:.0} s ({per_hour:.1}/h), at most {max}/h allowed",
                            if exact { "" } else { "at least " }
                        ))
                        .evidence("counter", name.as_str())
                        .evidence("delta", inc)
                        .evidence("interval_s", secs)
                        .evidence("per_hour", per_hour)
                        .evidence("max_per_hour", *max)
                        .fix(format!("errors on a live link: replace the cable or transceiver, and check the switch side{}", crate::probe::links::cable_tools(d, port))),
                    );
                }
            }
        }
    }
}

fn judge_roce(c: &Collected, p: &Policy, out: &mut Vec<Finding>) {
    if let Some(want) = &p.roce_qos.gid {
        roce_gid(c, want, out);
    }
    judge_roce_qos(c, &p.roce_qos, out);
}

/// `[roce] gid`: on every RoCE port, the GID NCCL would use is of the kind wanted.
fn roce_gid(c: &Collected, want: &str, out: &mut Vec<Finding>) {
    let Some(g) = &c.gids else {
        return out.push(not_evaluated("roce.gid", "the gids probe did not run"));
    };
    let roce = |p: &&crate::probe::gids::GidPort| p.link_layer.as_deref() == Some("Ethernet");
    if !g.ports.iter().any(|p| roce(&p)) {
        return out.push(nothing_here("roce.gid", Some(MissingFact::RoceNetdev), "no RoCE port to judge"));
    }
    for port in g.ports.iter().filter(roce) {
        roce_gid_port(port, want, out);
    }
}

/// `[roce] gid` on one port; unknown where NCCL's version decides and is not known.
fn roce_gid_port(port: &crate::probe::gids::GidPort, want: &str, out: &mut Vec<Finding>) {
    let s = crate::finding::spell::port(&port.device, port.port);
    let entry_at = |i: Option<u32>| i.and_then(|i| port.entries.iter().find(|e| e.index == i));
    let entry = entry_at(port.nccl.index);
    let fits = |e: Option<&crate::probe::gids::GidEntry>| {
        e.is_some_and(|e| {
            let v2 = e.roce_version.as_deref() == Some("v2");
            match want {
                "ipv4-v2" => v2 && e.ipv4.is_some(),
                "ipv6-v2" => v2 && e.ipv4.is_none() && !e.link_local,
                "v2" => v2,
                _ => true,
            }
        })
    };
    let ok = fits(entry);
    // Unknown NCCL version and no NCCL_IB_GID_INDEX: 2.21+ picks the index
    // above, older NCCL index 0. Where the two answers differ, unknown.
    if port.nccl.before_2_21_uses_0 && ok != fits(entry_at(Some(0))) {
        out.push(not_evaluated(
            "roce.gid",
            format!(
                "{s}: NCCL 2.21+ would use index {} ({}), older NCCL index 0 ({}), and the NCCL version is unknown: give --nccl-version",
                port.nccl.index.map(|i| i.to_string()).unwrap_or_else(|| "none".into()),
                if ok { "fits" } else { "does not fit" },
                if ok { "does not fit" } else { "fits" }
            ),
        ));
        return;
    }
    if !ok {
        let shown = entry
            .map(|e| {
                format!(
                    "index {} {} {}",
                    e.index,
                    e.ipv4.clone().unwrap_or_else(|| e.gid.full()),
                    e.roce_version.clone().unwrap_or_default()
                )
            })
            .unwrap_or_else(|| "no GID".into());
        out.push(
            violation("roce.gid", &s, format!("NCCL would use {shown} on {s}, not an {want} GID"))
                .evidence("nccl_gid_index", port.nccl.index)
                .evidence("nccl_reason", port.nccl.reason.as_str())
                .fix("give the port's netdev an IPv4 address (RoCE v2 GIDs follow the addresses), or set NCCL_IB_GID_INDEX to the IPv4 v2 index `fabprobe gids` shows"),
        );
    }
}

/// `[roce]`'s QoS keys on every RoCE netdev, and the RoCE ports no netdev was found for.
fn judge_roce_qos(c: &Collected, q: &super::policy::RoceRules, out: &mut Vec<Finding>) {
    let any_qos = q.mtu.is_some()
        || q.pfc_priorities.is_some()
        || q.ecn_priorities.is_some()
        || q.trust.is_some()
        || q.global_pause.is_some();
    if !any_qos {
        return;
    }
    let Some(r) = &c.qos else {
        out.push(not_evaluated("roce", "the qos probe did not run"));
        return;
    };
    let roce_ifs: Vec<&QosIf> = r.interfaces.iter().filter(|i| i.rdma_device.is_some()).collect();
    if roce_ifs.is_empty() {
        for (k, set) in [
            ("roce.mtu", q.mtu.is_some()),
            ("roce.pfc_priorities", q.pfc_priorities.is_some()),
            ("roce.ecn_priorities", q.ecn_priorities.is_some()),
            ("roce.trust", q.trust.is_some()),
            ("roce.global_pause", q.global_pause.is_some()),
        ] {
            if set {
                // Devices unlistable is unknown, not a missing fact.
                let fact = match (&r.rdma.message, &r.rdma.unreadable) {
                    (_, Some(_)) => None,
                    (Some(_), None) => Some(MissingFact::RdmaDevice),
                    (None, None) => Some(MissingFact::RoceNetdev),
                };
                let why = r.rdma.message.clone().unwrap_or_else(|| "no RoCE netdev".into());
                out.push(nothing_here(k, fact, format!("no RoCE netdev to judge ({why})")));
            }
        }
    }
    for i in roce_ifs {
        judge_qos_if(i, c.netdev_mtu.get(&i.ifname).copied().flatten(), q, out);
    }
    // A RoCE port the qos probe could not follow to a netdev is not a pass.
    if let Some(l) = &c.links {
        for (d, port) in ports_of(l, "Ethernet") {
            let seen = r
                .interfaces
                .iter()
                .any(|i| i.rdma_device.as_deref() == Some(d.name.as_str()) && i.rdma_port == Some(port.port));
            if !seen {
                out.push(not_evaluated(
                    "roce",
                    format!("{}: no netdev found for this RoCE port", subject(d, port)),
                ));
            }
        }
    }
}

/// `"3"`, `"3,4"`, `"none"`.
fn prio_list(v: &[u8]) -> String {
    if v.is_empty() {
        return "none".into();
    }
    v.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(",")
}

/// PFC as the qos probe reads it: DCB's `pfc_en`, else the priorities the driver keeps pause
/// counters for (mlx5 keeps them only where PFC is on), when it keeps a counter set at all.
pub fn pfc_of(i: &QosIf) -> Option<Vec<u8>> {
    i.dcb.pfc_enabled.clone().or_else(|| {
        (i.ethtool.error.is_none() && i.priorities.iter().all(|p| p.pfc_counters.is_some()))
            .then(|| i.ethtool.pfc_priorities_from_counters.clone())
    })
}

/// ECN (DCQCN) on, per priority: reaction point and notification point both enabled.
/// `(on, half)`: priorities with both, priorities with only one of the two.
pub fn ecn_of(i: &QosIf) -> Option<(Vec<u8>, Vec<u8>)> {
    let e = i.ecn.as_ref()?;
    let on = (0..8u8)
        .filter(|p| e.rp_enabled.contains(p) && e.np_enabled.contains(p))
        .collect();
    let half = (0..8u8)
        .filter(|p| e.rp_enabled.contains(p) != e.np_enabled.contains(p))
        .collect();
    Some((on, half))
}

/// Global (802.3x) pause on: the driver keeps global pause counters only while it is on.
pub fn global_pause_of(i: &QosIf) -> Option<bool> {
    i.ethtool
        .error
        .is_none()
        .then_some(i.ethtool.global_pause_counters)
}

/// A RoCE netdev as the `[roce]` QoS rules see it.
struct RoceIf<'a> {
    i: &'a QosIf,
    q: &'a super::policy::RoceRules,
    /// The netdev's MTU, when read.
    netdev_mtu: Option<u32>,
    /// `mlx5_2/1`, else the netdev.
    subject: String,
}

impl RoceIf<'_> {
    fn dcb_why(&self) -> String {
        format!(
            "{} ({}): no DCB answer ({})",
            self.subject,
            self.i.ifname,
            self.i.dcb.error.as_deref().unwrap_or("none")
        )
    }
}

/// A `[roce]` QoS key's judge, on one RoCE netdev.
type RoceQosJudge = fn(&RoceIf<'_>, &mut Vec<Finding>);

/// `[roce]`'s QoS keys, judged on each RoCE netdev: each key its own rule, in this order.
const ROCE_QOS_RULES: &[(&str, RoceQosJudge)] = &[
    ("mtu", roce_mtu),
    ("pfc_priorities", roce_pfc_priorities),
    ("ecn_priorities", roce_ecn_priorities),
    ("trust", roce_trust),
    ("global_pause", roce_global_pause),
];

fn judge_qos_if(i: &QosIf, netdev_mtu: Option<u32>, q: &super::policy::RoceRules, out: &mut Vec<Finding>) {
    let x = RoceIf {
        i,
        q,
        netdev_mtu,
        subject: match (&i.rdma_device, i.rdma_port) {
            (Some(d), Some(p)) => format!("{d}/{p}"),
            _ => i.ifname.clone(),
        },
    };
    for (_, judge) in ROCE_QOS_RULES {
        judge(&x, out);
    }
}

fn roce_mtu(x: &RoceIf, out: &mut Vec<Finding>) {
    let (q, subject, ifn) = (x.q, &x.subject, &x.i.ifname);
    let netdev_mtu = x.netdev_mtu;
    if let Some(want) = q.mtu {
        match netdev_mtu {
            None => out.push(not_evaluated("roce.mtu", format!("{subject}: no mtu for {ifn}"))),
            Some(m) => {
                let got = netfs::roce_mtu(m);
                if got.is_none_or(|g| u64::from(g) < want) {
                    out.push(
                        violation(
                            "roce.mtu",
                            subject,
                            format!(
                                "{ifn} MTU {m} gives a RoCE path MTU of {}, not {want}",
                                got.map(|g| g.to_string()).unwrap_or("none".into())
                            ),
                        )
                        .evidence("netdev", ifn.as_str())
                        .evidence("netdev_mtu", m)
                        .evidence("roce_mtu", got)
                        .fix(format!(
                            "a RoCE MTU of {want} needs a netdev MTU of at least {}: `ip link set {ifn} mtu 9000` (and the same on the switch ports)",
                            want + 96
                        )),
                    );
                }
            }
        }
    }
}

fn roce_pfc_priorities(x: &RoceIf, out: &mut Vec<Finding>) {
    let (i, q, subject, ifn) = (x.i, x.q, &x.subject, &x.i.ifname);
    let dcb_why = || x.dcb_why();
    if let Some(want) = &q.pfc_priorities {
        let mut want: Vec<u8> = want.iter().map(|p| *p as u8).collect();
        want.sort_unstable();
        match pfc_of(i) {
            None => out.push(not_evaluated("roce.pfc_priorities", dcb_why())),
            Some(got) if got != want => out.push(
                violation(
                    "roce.pfc_priorities",
                    subject,
                    format!("PFC on {ifn} is on priority {}, not exactly {}", prio_list(&got), prio_list(&want)),
                )
                .evidence("netdev", ifn.as_str())
                .evidence("pfc_enabled", prio_list(&got))
                .evidence("roce_priority", i.roce.priority)
                .fix(format!(
                    "`mlnx_qos -i {ifn} --pfc {}` (MLNX_OFED) or `dcb pfc set dev {ifn} prio-pfc {}` (iproute2)",
                    (0..8u8).map(|p| if want.contains(&p) { "1" } else { "0" }).collect::<Vec<_>>().join(","),
                    (0..8u8).map(|p| format!("{p}:{}", if want.contains(&p) { "on" } else { "off" })).collect::<Vec<_>>().join(" ")
                )),
            ),
            Some(_) => {}
        }
    }
}

/// Commands that leave ECN on exactly the `want` priorities of `ifn` (reaction and
/// notification point both), the others off: one loop per value written.
fn ecn_fix(ifn: &str, want: &[u8]) -> String {
    let (on, off): (Vec<u8>, Vec<u8>) = (0..8u8).partition(|p| want.contains(p));
    let set = |v: u8, ps: &[u8]| {
        let ps: Vec<String> = ps.iter().map(|p| p.to_string()).collect();
        format!(
            "for p in {}; do echo {v} > /sys/class/net/{ifn}/ecn/roce_rp/enable/$p; \
             echo {v} > /sys/class/net/{ifn}/ecn/roce_np/enable/$p; done",
            ps.join(" ")
        )
    };
    let cmds: Vec<String> = [(1, on), (0, off)]
        .into_iter()
        .filter(|(_, ps)| !ps.is_empty())
        .map(|(v, ps)| format!("`{}`", set(v, &ps)))
        .collect();
    format!("as root (MLNX_OFED): {}", cmds.join(" "))
}

fn roce_ecn_priorities(x: &RoceIf, out: &mut Vec<Finding>) {
    let (i, q, subject, ifn) = (x.i, x.q, &x.subject, &x.i.ifname);
    if let Some(want) = &q.ecn_priorities {
        let mut want: Vec<u8> = want.iter().map(|p| *p as u8).collect();
        want.sort_unstable();
        match ecn_of(i) {
            None => out.push(not_evaluated(
                "roce.ecn_priorities",
                format!(
                    "{subject}: {}",
                    i.ecn_unknown_reason
                        .clone()
                        .unwrap_or_else(|| format!("no ECN state for {ifn}"))
                ),
            )),
            Some((on, half)) if on != want || !half.is_empty() => {
                let e = i.ecn.as_ref();
                out.push(
                    violation(
                        "roce.ecn_priorities",
                        subject,
                        format!(
                            "ECN/DCQCN on {ifn} is on priority {}, not exactly {}{}",
                            prio_list(&on),
                            prio_list(&want),
                            if half.is_empty() {
                                String::new()
                            } else {
                                format!(" (half on, reaction or notification point only: {})", prio_list(&half))
                            }
                        ),
                    )
                    .evidence("netdev", ifn.as_str())
                    .evidence("roce_rp_enabled", prio_list(e.map(|e| e.rp_enabled.as_slice()).unwrap_or(&[])))
                    .evidence("roce_np_enabled", prio_list(e.map(|e| e.np_enabled.as_slice()).unwrap_or(&[])))
                    .fix(ecn_fix(ifn, &want)),
                );
            }
            Some(_) => {}
        }
    }
}

fn roce_trust(x: &RoceIf, out: &mut Vec<Finding>) {
    let (i, q, subject, ifn) = (x.i, x.q, &x.subject, &x.i.ifname);
    let dcb_why = || x.dcb_why();
    if let Some(want) = &q.trust {
        match &i.dcb.trust {
            None => out.push(not_evaluated("roce.trust", dcb_why())),
            Some(got) if got != want => out.push(
                violation("roce.trust", subject, format!("{ifn} trusts {got}, not {want}"))
                    .evidence("netdev", ifn.as_str())
                    .evidence("trust", got.as_str())
                    .fix(format!("`mlnx_qos -i {ifn} --trust {want}`")),
            ),
            Some(_) => {}
        }
    }
}

fn roce_global_pause(x: &RoceIf, out: &mut Vec<Finding>) {
    let (i, q, subject, ifn) = (x.i, x.q, &x.subject, &x.i.ifname);
    if let Some(allowed) = q.global_pause {
        match global_pause_of(i) {
            None => out.push(not_evaluated(
                "roce.global_pause",
                format!(
                    "{subject}: no ethtool counters for {ifn} ({})",
                    i.ethtool.error.as_deref().unwrap_or("none")
                ),
            )),
            Some(true) if !allowed => out.push(
                violation(
                    "roce.global_pause",
                    subject,
                    format!("global (802.3x) pause is on for {ifn}"),
                )
                .evidence("netdev", ifn.as_str())
                .fix(format!("`ethtool -A {ifn} rx off tx off` (PFC only)")),
            ),
            Some(_) => {}
        }
    }
}


/// FNV-1a, 64-bit: a stable hash for the topology signature (the same on every build).
fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn multiset(vals: impl IntoIterator<Item = String>) -> Value {
    let mut m: BTreeMap<String, usize> = BTreeMap::new();
    for v in vals {
        *m.entry(v).or_default() += 1;
    }
    if m.is_empty() {
        return Value::Null;
    }
    Value::String(
        m.iter()
            .map(|(v, n)| format!("{n}x {v}"))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

/// What should be the same on every node of a kind: `sweep` compares these key by key.
pub fn fingerprint(host: &Host, c: &Collected, p: &Policy) -> BTreeMap<String, Value> {
    let mut m = BTreeMap::new();
    let facts = c.facts.as_ref().and_then(|f| f.facts());
    m.insert("tool_version".into(), json!(env!("CARGO_PKG_VERSION")));
    m.insert("policy".into(), json!(p.name));
    m.insert(
        "kernel".into(),
        json!(
            facts
                .and_then(|f| f.kernel.clone())
                .or_else(|| host.meta().kernel.clone())
        ),
    );
    m.insert("os".into(), json!(facts.and_then(|f| f.os.clone())));
    m.insert("cpu_model".into(), json!(facts.and_then(|f| f.cpu_model.clone())));
    m.insert("cpu_count".into(), json!(facts.and_then(|f| f.cpu_count)));
    // Whole GiB, rounded: firmware reservations differ by megabytes between identical nodes.
    m.insert(
        "memory_gib".into(),
        json!(
            facts
                .and_then(|f| f.memory_total_bytes)
                .map(|b| (b as f64 / (1u64 << 30) as f64).round() as u64)
        ),
    );
    m.insert(
        "memlock_soft".into(),
        json!(facts.and_then(|f| f.memlock).map(|l| l.soft.show())),
    );
    m.insert("gpu_driver".into(), json!(c.driver_version));
    if let Some(t) = &c.topo {
        fingerprint_topo(t, &mut m);
    }
    if let Some(l) = &c.links {
        fingerprint_links(l, &mut m);
    }
    if let Some(r) = &c.gdr {
        fingerprint_gdr(r, &mut m);
    }
    if let Some(q) = &c.qos {
        fingerprint_qos(q, c, &mut m);
    }
    if let Some(g) = &c.gids {
        fingerprint_gids(g, &mut m);
    }
    m
}

/// GPUs, NICs, the fewest NVLinks and the matrix's shape (without device numbers).
fn fingerprint_topo(t: &TopoReport, m: &mut BTreeMap<String, Value>) {
    m.insert("gpu_count".into(), json!(t.gpus.len()));
    m.insert(
        "gpu_models".into(),
        multiset(t.gpus.iter().filter_map(|g| g.name.clone())),
    );
    m.insert("rdma_nic_count".into(), json!(t.nics.len()));
    let nv = t
        .matrix
        .iter()
        .flatten()
        .filter_map(|c| c.strip_prefix("NV")?.parse::<u64>().ok())
        .min();
    m.insert("nvlink_min".into(), json!(nv));
    let mut sig = Vec::new();
    for (label, row) in t.labels.iter().zip(&t.matrix) {
        // Labels without their numbers: GPU/NIC kinds and cells, not names.
        sig.extend(label.trim_end_matches(|c: char| c.is_ascii_digit()).bytes());
        for cell in row {
            sig.push(b' ');
            sig.extend(cell.bytes());
        }
        sig.push(b'\n');
    }
    m.insert("topo_signature".into(), json!(format!("{:016x}", fnv1a(&sig))));
}

/// Port counts and rates per link layer, HCA firmware and PCIe links.
fn fingerprint_links(l: &LinksReport, m: &mut BTreeMap<String, Value>) {
    for (key, layer) in [("ib", "InfiniBand"), ("roce", "Ethernet")] {
        let ports = ports_of(l, layer);
        m.insert(format!("{key}_ports"), json!(ports.len()));
        m.insert(
            format!("{key}_rates"),
            multiset(
                ports
                    .iter()
                    .map(|(_, p)| p.rate.as_ref().map(|r| r.raw.clone()).unwrap_or("unknown".into())),
            ),
        );
    }
    m.insert(
        "hca_firmware".into(),
        multiset(l.devices.iter().map(|d| {
            format!(
                "{} {}",
                d.attrs.hca_type.as_deref().unwrap_or("?"),
                d.attrs.fw_ver.as_deref().unwrap_or("?")
            )
        })),
    );
    m.insert(
        "hca_pcie".into(),
        multiset(l.devices.iter().filter_map(|d| {
            let k = d.attrs.pci_link.as_ref()?;
            Some(format!(
                "{} x{}",
                k.current_speed.as_ref().map(|s| s.raw.as_str()).unwrap_or("?"),
                k.current_width.map(|w| w.to_string()).unwrap_or("?".into())
            ))
        })),
    );
}

/// The peer-memory client and the GDR verdicts of the pairs NCCL would use.
fn fingerprint_gdr(r: &GdrReport, m: &mut BTreeMap<String, Value>) {
    let pm = &r.peer_memory;
    let client = if pm.nvidia_peermem_loaded {
        "nvidia_peermem"
    } else if pm.nv_peer_mem_loaded {
        "nv_peer_mem"
    } else if !pm.modules_visible {
        "unknown"
    } else {
        "none"
    };
    m.insert("gdr_peer_memory".into(), json!(client));
    m.insert(
        "gdr_pairs".into(),
        multiset(
            r.pairs
                .iter()
                .filter(|x| x.nccl_nearest)
                .map(|x| x.verdict.map(|v| v.as_str()).unwrap_or("unknown").to_string()),
        ),
    );
}

/// PFC, ECN, trust, global pause and MTU of the RoCE netdevs.
fn fingerprint_qos(q: &QosReport, c: &Collected, m: &mut BTreeMap<String, Value>) {
    let roce: Vec<&QosIf> = q.interfaces.iter().filter(|i| i.rdma_device.is_some()).collect();
    let show = |v: Option<String>| v.unwrap_or_else(|| "unknown".into());
    m.insert(
        "pfc_priorities".into(),
        multiset(roce.iter().map(|i| show(pfc_of(i).map(|v| prio_list(&v))))),
    );
    m.insert(
        "ecn_priorities".into(),
        multiset(roce.iter().map(|i| show(ecn_of(i).map(|(on, _)| prio_list(&on))))),
    );
    m.insert(
        "roce_trust".into(),
        multiset(roce.iter().map(|i| show(i.dcb.trust.clone()))),
    );
    m.insert(
        "global_pause".into(),
        multiset(
            roce.iter()
                .map(|i| show(global_pause_of(i).map(|g| if g { "on" } else { "off" }.to_string()))),
        ),
    );
    m.insert(
        "roce_netdev_mtu".into(),
        multiset(roce.iter().map(|i| {
            show(
                c.netdev_mtu
                    .get(&i.ifname)
                    .copied()
                    .flatten()
                    .map(|m| m.to_string()),
            )
        })),
    );
}

/// The GID index NCCL would use on each RoCE port.
fn fingerprint_gids(g: &GidsReport, m: &mut BTreeMap<String, Value>) {
    let picks: Vec<String> = g
        .ports
        .iter()
        .filter(|p| p.link_layer.as_deref() == Some("Ethernet"))
        .map(|p| p.nccl.index.map(|i| i.to_string()).unwrap_or("none".into()))
        .collect();
    m.insert("nccl_gid_index".into(), multiset(picks));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(id: &str, sev: Severity, subject: &str, msg: &str) -> Finding {
        Finding::new(id, sev, subject, msg)
    }

    /// Every `[host]`, `[gpu]`, `[ib]` and `[roce]` key of the policy language is judged by
    /// a rule of its own section's table, and every table key is in the language.
    #[test]
    fn every_host_gpu_and_port_key_has_its_rule() {
        use std::collections::BTreeSet;
        let tables: Vec<(&str, BTreeSet<&str>)> = vec![
            ("host", HOST_RULES.iter().flat_map(|(k, _)| k.iter().copied()).collect()),
            ("gpu", GPU_RULES.iter().map(|(k, _)| *k).collect()),
            ("ib", PORT_RULES.iter().flat_map(|(k, _)| k.iter().copied()).collect()),
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

    /// A NIC at x8: topo (the slot) and links (the HCA) both see it; check shows one
    /// finding, topo's, naming the other. A downtrained HCA elsewhere stays.
    #[test]
    fn one_narrow_pcie_link_is_one_finding() {
        let fs = vec![
            finding(
                "topo.pcie_width_degraded",
                Severity::Fail,
                "NIC3 (mlx5_3) 0000:58:00.0",
                "x8",
            ),
            finding("links.pcie_downtrained", Severity::Fail, "mlx5_3", "x8")
                .evidence("pci_bdf", "0000:58:00.0"),
            finding("links.pcie_downtrained", Severity::Fail, "mlx5_5", "x8")
                .evidence("pci_bdf", "0000:9a:00.0"),
        ];
        let out = same_cause(fs);
        let ids: Vec<(&str, &str)> = out.iter().map(|f| (f.id.as_str(), f.subject.as_str())).collect();
        assert_eq!(
            ids,
            vec![
                ("topo.pcie_width_degraded", "NIC3 (mlx5_3) 0000:58:00.0"),
                ("links.pcie_downtrained", "mlx5_5")
            ]
        );
        assert_eq!(out[0].evidence["same_cause"], "links.pcie_downtrained mlx5_3");
    }

    /// dgx-h100's `pcie_width_min` on a NIC at x8 and the probes' degraded-link findings for
    /// that NIC (and its odd-one-out among alike ports) are one line: the policy verdict,
    /// naming the others. Another NIC's finding stays.
    #[test]
    fn a_policy_minimum_and_the_probe_finding_for_one_link_are_one_line() {
        let fs = vec![
            finding(
                "policy.ib.pcie_width_min",
                Severity::Fail,
                "mlx5_3/1",
                "x8, below x16",
            )
            .evidence("pci_bdf", "0000:58:00.0"),
            finding(
                "policy.ib.all_alike",
                Severity::Fail,
                "mlx5_3/1",
                "pcie_link unlike 7",
            )
            .evidence("field", "pcie_link"),
            finding("policy.ib.all_alike", Severity::Fail, "mlx5_6/1", "rate unlike 7")
                .evidence("field", "rate"),
            finding(
                "topo.pcie_width_degraded",
                Severity::Fail,
                "NIC3 (mlx5_3) 0000:58:00.0",
                "x8",
            ),
            finding(
                "topo.pcie_width_degraded",
                Severity::Fail,
                "NIC5 (mlx5_5) 0000:9a:00.0",
                "x8",
            ),
            finding("links.pcie_downtrained", Severity::Fail, "mlx5_3", "x8")
                .evidence("pci_bdf", "0000:58:00.0"),
        ];
        let out = same_cause(fs);
        let ids: Vec<(&str, &str)> = out.iter().map(|f| (f.id.as_str(), f.subject.as_str())).collect();
        assert_eq!(
            ids,
            [
                ("policy.ib.pcie_width_min", "mlx5_3/1"),
                ("policy.ib.all_alike", "mlx5_6/1"),
                ("topo.pcie_width_degraded", "NIC5 (mlx5_5) 0000:9a:00.0"),
            ]
        );
        assert_eq!(
            out[0].evidence["same_cause"],
            "policy.ib.all_alike mlx5_3/1; topo.pcie_width_degraded NIC3 (mlx5_3) 0000:58:00.0; \
             links.pcie_downtrained mlx5_3"
        );
        // The speed minimum does not take a width finding.
        let fs = vec![
            finding("policy.ib.pcie_gen_min", Severity::Fail, "mlx5_3/1", "Gen4")
                .evidence("pci_bdf", "0000:58:00.0"),
            finding(
                "topo.pcie_width_degraded",
                Severity::Fail,
                "NIC3 (mlx5_3) 0000:58:00.0",
                "x8",
            ),
        ];
        assert_eq!(same_cause(fs).len(), 2);
    }

    /// Per-netdev warnings with one message become one line; the fix is given once with
    /// "likewise"; fails and different messages are never merged.
    #[test]
    fn repeated_warnings_collapse_into_one_line() {
        let w = |subj: &str, dev: &str| {
            finding("qos.x", Severity::Warn, subj, "PFC off").fix(format!("`dcb pfc show dev {dev}`"))
        };
        let fs = vec![
            w("eth0 (mlx5_8/1)", "eth0"),
            finding("qos.x", Severity::Fail, "eth2", "PFC off"),
            w("eth1 (mlx5_9/1)", "eth1"),
            finding("qos.x", Severity::Warn, "eth3", "other"),
        ];
        let out = collapse(fs);
        assert_eq!(out.len(), 3, "{out:#?}");
        assert_eq!(out[0].subject, "eth0 (mlx5_8/1), eth1 (mlx5_9/1)");
        assert_eq!(
            out[0].fix.as_deref(),
            Some("`dcb pfc show dev eth0`; likewise for eth1")
        );
        assert_eq!(out[1].severity, Severity::Fail);
        assert_eq!(out[2].message, "other");
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

    #[test]
    fn ignore_patterns() {
        let p = vec!["links.*".to_string(), "topo.gpu_nic_sys".to_string()];
        assert!(ignored(&p, "links.congestion"));
        assert!(ignored(&p, "topo.gpu_nic_sys"));
        assert!(!ignored(&p, "topo.numa_node_unknown"));
    }

    #[test]
    fn ranking_puts_fails_first_and_policy_before_probes() {
        let mut v = vec![
            Finding::new("links.x", Severity::Warn, "a", ""),
            Finding::new("links.y", Severity::Fail, "b", ""),
            Finding::new("policy.ib.count", Severity::Fail, "c", ""),
            Finding::new("check.not_evaluated", Severity::Unknown, "d", ""),
        ];
        decide::rank(&mut v);
        let ids: Vec<_> = v.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(
            ids,
            ["policy.ib.count", "links.y", "links.x", "check.not_evaluated"]
        );
    }
}
