//! `fabprobe check`: every local probe and the host facts judged against a policy; one
//! ranked list of findings; exit 0 pass (warnings allowed), 1 fail, 2 could not run.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use super::{Format, GlobalArgs, Hinted, Outcome, UsageError, emit, open_host};
use crate::check::policy::{self, LoadError};
use crate::check::run::{self, Sampling};
use crate::host::Host;
use crate::render::{Envelope, HostInfo};

#[derive(Debug, Args)]
#[command(after_long_help = check_help())]
pub(crate) struct CheckArgs {
    /// The policy: a built-in name (default, dgx-h100, hdr-a100, roce-dcqcn) or a TOML file.
    #[arg(long, value_name = "NAME|FILE", default_value = "default")]
    pub policy: String,
    /// Print the named built-in policy's TOML (to copy and edit) and exit.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["interval", "baseline"])]
    pub show_policy: Option<String>,
    /// Sample the port counters twice, SECONDS apart, so counter rates can be judged (live).
    #[arg(long, value_name = "SECONDS", conflicts_with = "baseline")]
    pub interval: Option<f64>,
    /// An earlier snapshot of the same host: counter rates from it to --root (or live).
    #[arg(long, value_name = "SNAPSHOT")]
    pub baseline: Option<PathBuf>,
    /// A policy key that must be evaluated (repeatable): one that could not be fails the
    /// check instead of being noted in the verdict line, e.g. --require counters.max_per_hour.
    #[arg(long, value_name = "SECTION.KEY")]
    pub require: Vec<String>,
    /// Write the result to FILE atomically (a temporary file in FILE's directory, renamed
    /// over it) and exit 0 once it is written: the verdict is in the file. For textfile
    /// collectors: `fabprobe --format prom check --output /var/lib/node_exporter/fabprobe.prom`.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// The short sample a live check takes on its own when the policy has counter-rate rules
/// and neither --interval nor --baseline was given.
const AUTO_SAMPLE_S: f64 = 2.0;

const CHECK_HELP: &str = "\
Runs every local probe (topo, gids, links, and the host facts: OS, kernel, CPU, memory,
uptime, load, the locked-memory limit, processes holding /dev/nvidia* or
/dev/infiniband/uverbs*), judges the policy, and prints one list of causes.

Decisive: one cause is one finding (a cable at HDR on an NDR port breaks rate_min_gbps,
speed, all_alike and the probe's rate_below_peers; the finding lists the others under
evidence.also), a GPU that lost NVLinks is one finding, not one per pair. Causes are ranked
fail before warn, then hardware (links down or downtrained, lanes or NVLinks lost, link
errors) before configuration before host limits (memlock, device holders); the verdict line
names the worst (data.worst, with its class). Keys that could not be judged are counted in
the verdict line, not scored. Only the RDMA devices NCCL would use here are judged
(NCCL_IB_HCA, NCCL_IB_DISABLE): findings about the others are listed as not used by NCCL
(data.not_used_by_nccl) unless the policy sets [policy] all_ports = true. A live check whose
policy judges counter rates samples the counters 2 s apart unless --interval or --baseline
is given.

EXAMPLES
  fabprobe check                                  every probe's own findings
  fabprobe check --policy dgx-h100                judged as a DGX H100
  fabprobe check --policy /etc/fabprobe/rack7.toml --interval 60
  fabprobe --root node1.tar.gz check --policy hdr-a100
  fabprobe check --show-policy dgx-h100 > mine.toml
  srun -N2000 --ntasks-per-node=1 fabprobe check --format json > all.jsonl; fabprobe sweep all.jsonl

";

/// After check's own FINDINGS (generated from its rule tables).
const CHECK_HELP_DATA: &str =
    "  Beside these, every probe's own findings: fabprobe-topo(1), -gids, -links, -gdr, -qos,
  -nccl-env list them.

JSON DATA (fabprobe.check)
  Printed on ONE line, so many nodes' output is JSON lines.
  verdict                       pass | warn | fail
  policy                        {name, source (builtin:NAME or the file), description}
  counts                        {fail, warn, pass, not_evaluated}
  worst                         null | {id, subject, message, class}: the cause the verdict
                                line names (a hardware cause before a configuration one)
  saw                           {gpus, rdma_devices, rdma_ports, rdma_ports_active,
                                roce_netdevs}: what the probes found to judge
  names_moved[]                 {name, pci_bus_id, was_to_be, past}: names ib_core moved
                                past a NIC that did not register (absent when none)
  not_evaluated[]               {key, reason}: a policy key with nothing to judge
  not_used_by_nccl[]            {id, subject, severity}: findings on devices NCCL_IB_HCA
                                leaves out, kept apart from the verdict
  probes[]                      {name, ran (false: not in this build), findings}
  facts                         {state: available, kernel, os, cpu_model, cpu_count,
                                 memory_total_bytes, uptime_s, load_avg [1m,5m,15m],
                                 memlock {soft, hard} (\"unlimited\" | {bytes}),
                                 device_holders [{pid, comm, devices}], processes_unreadable,
                                 system_daemons [{pid, daemon, identified_by (exe|comm),
                                   exe, comm, devices}]: holders known to hold the devices
                                   by design, daemons_scanned}
                                | {state: unavailable, reason}
  fingerprint                   what fabprobe sweep compares across nodes: tool_version, policy,
                                kernel, os, cpu_model, cpu_count, memory_gib, memlock_soft,
                                gpu_driver, gpu_count, gpu_models, nvlink_min, rdma_nic_count,
                                topo_signature (FNV-1a of the nvidia-smi matrix), ib_ports,
                                ib_rates, roce_ports, roce_rates, hca_firmware, hca_pcie,
                                nccl_gid_index, roce_netdev_mtu, roce_trust, pfc_priorities,
                                ecn_priorities, global_pause, gdr_pairs, gdr_peer_memory
                                (multisets read \"8x 400 Gb/sec (4X NDR)\")
  sample                        null | {kind, baseline, interval_s}: counter rates were judged
  not_evaluated[]               {key, reason, missing}: a key that could not be judged;
                                missing is the fact it rests on (gpu_and_rdma, rdma_device,
                                gpu, roce_netdev, infiniband_port, qos_reading) or null
                                for a reason of its own; keys on one fact are one entry in the verdict line

PROMETHEUS (--format prom)
  fabprobe_check_verdict{policy} 0|1|2, fabprobe_check_findings{policy,severity=fail|warn},
  fabprobe_check_finding{policy,id,subject,severity} 1, fabprobe_check_not_evaluated{policy,key}
  1 (one per key that could not be evaluated), fabprobe_check_device_holders{policy},
  fabprobe_check_name_moved{policy,device,pci_bus_id,was_to_be} 1 for each RDMA device name
  ib_core moved past a NIC that did not register (absent when none; the other series keep
  the kernel's name as their device label, and this one says that name is now another NIC).
  Every series carries the policy, so one file per policy can share a textfile directory.
  A textfile cron job writes with --output, which replaces the file atomically and exits 0
  once it is written (the verdict is in the metrics):
    fabprobe --format prom check --policy dgx-h100 \\
      --output /var/lib/prometheus/node-exporter/fabprobe-dgx-h100.prom

";

fn check_help() -> String {
    let rules = crate::render::text::findings_section(&run::check_rule_docs());
    format!("{CHECK_HELP}{rules}{CHECK_HELP_DATA}{}", policy::language_doc())
}

pub(crate) fn run(g: &GlobalArgs, a: CheckArgs) -> anyhow::Result<Outcome> {
    if let Some(name) = &a.show_policy {
        let Some((_, text)) = policy::BUILTIN.iter().find(|(n, _)| n == name) else {
            return Err(UsageError(format!(
                "no built-in policy named `{name}`; built-in policies: {}",
                policy::builtin_names()
            ))
            .into());
        };
        emit(text)?;
        return Ok(Outcome::Pass);
    }
    let fmt = g.format;
    let pol = policy::load(&a.policy).map_err(|e| match e {
        LoadError::Invalid(pe) => anyhow::Error::new(Hinted {
            msg: format!("policy {pe}"),
            hint: "every key is listed in `man fabprobe-check` (POLICY FILES); `fabprobe check --show-policy default` prints a starting point".into(),
        }),
        other => anyhow::Error::new(other),
    })?;
    for r in &a.require {
        policy::check_require(r).map_err(|m| UsageError(format!("--require {r}: {m}")))?;
    }
    g.log(1, format!("policy {} ({})", pol.name, pol.source));
    let host = open_host(g)?;
    let sampling = sampling_of(g, &a, &host, &pol)?;
    let mut pol = pol;
    pol.require.extend(a.require.iter().cloned());
    let nccl = super::nccl_settings(g, &host);
    let (report, findings) = run::run(&host, &nccl, &pol, &sampling);
    let info = HostInfo::of(&host);
    let text = match fmt {
        Format::Json => Envelope::new("check", info, &report, &findings).to_json_line(),
        Format::Prom => crate::render::check::check_prom(&report, &findings),
        _ => crate::render::check::check_table(&report, info.hostname.as_deref(), &findings),
    };
    if let Some(path) = &a.output {
        // Writing the metrics succeeded: a cron job's `&& mv` pattern must not break exactly
        // when a fault is found. The verdict is in what was written.
        super::out::write_atomic(path, &text)?;
        return Ok(Outcome::Pass);
    }
    emit(&text)?;
    Ok(match report.verdict {
        crate::finding::Severity::Fail => Outcome::Fault,
        crate::finding::Severity::Unknown => Outcome::Unknown,
        _ => Outcome::Pass,
    })
}

/// How the counters are sampled: `--interval` (live only), `--baseline`, or on a live host
/// whose policy judges counter rates, twice [`AUTO_SAMPLE_S`] apart.
fn sampling_of(g: &GlobalArgs, a: &CheckArgs, host: &Host, pol: &policy::Policy) -> anyhow::Result<Sampling> {
    let mut sampling = Sampling::default();
    if let Some(secs) = a.interval {
        if !host.is_live() {
            return Err(UsageError(
                "--interval samples the live host twice; with --root use --baseline EARLIER_SNAPSHOT".into(),
            )
            .into());
        }
        if !(secs > 0.0 && secs <= 86_400.0) {
            return Err(UsageError(format!(
                "--interval {secs}: give a number of seconds between 0 and 86400"
            ))
            .into());
        }
        g.log(1, format!("sampling counters twice, {secs} s apart"));
        sampling.interval = Some(Duration::from_secs_f64(secs));
    }
    if let Some(b) = &a.baseline {
        let base = Host::snapshot(b).with_context(|| format!("reading --baseline {}", b.display()))?;
        super::baseline::ensure_earlier_same_host(&base, b, host)?;
        sampling.baseline = Some((base, b.display().to_string()));
    }
    if host.is_live()
        && sampling.interval.is_none()
        && sampling.baseline.is_none()
        && !pol.counters_max_per_hour.is_empty()
    {
        g.log(
            1,
            format!("the policy judges counter rates: sampling counters twice, {AUTO_SAMPLE_S} s apart"),
        );
        sampling.interval = Some(Duration::from_secs_f64(AUTO_SAMPLE_S));
    }
    Ok(sampling)
}
