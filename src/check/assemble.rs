//! The `check` report and its assembly: the verdict, the worst cause, the counts, and the
//! folding of findings that share one cause or repeat one message. Pure.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Value, json};

use crate::check::decide;
use crate::check::policy::Policy;
use crate::check::run::Collected;
use crate::check::{Finding, Severity};
use crate::host::FactsState;
use crate::probe::links::SampleInfo;

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
    /// Device names ib_core moved past a NIC that did not register (topo's `moved_names`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names_moved: Vec<crate::probe::topo::MovedName>,
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
    pub(crate) fn of(c: &Collected) -> Saw {
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
pub(crate) fn verdict_of(findings: &[Finding], saw: &Saw) -> Severity {
    let worst = crate::check::worst(findings);
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

/// Findings about RDMA devices NCCL does not use here, set apart (unless the policy judges
/// all ports).
pub(crate) fn split_not_used_by_nccl(
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

pub(crate) fn counts_of(findings: &[Finding], not_evaluated: usize) -> Counts {
    Counts {
        fail: findings.iter().filter(|f| f.severity == Severity::Fail).count(),
        warn: findings.iter().filter(|f| f.severity == Severity::Warn).count(),
        pass: findings.iter().filter(|f| f.severity == Severity::Pass).count(),
        not_evaluated,
    }
}

/// The worst finding (they are ranked), named for the drain reason.
pub(crate) fn worst_of(findings: &[Finding]) -> Option<Worst> {
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
pub(crate) fn same_cause(mut findings: Vec<Finding>) -> Vec<Finding> {
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
pub(crate) fn collapse(findings: Vec<Finding>) -> Vec<Finding> {
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

pub(crate) fn ignored(patterns: &[String], id: &str) -> bool {
    patterns.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => id.starts_with(prefix),
        None => p == id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(id: &str, sev: Severity, subject: &str, msg: &str) -> Finding {
        Finding::new(id, sev, subject, msg)
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
