//! `fabprobe qos`: PFC/ETS/trust/DCBX, pause and storm counters, ECN/DCQCN, CNPs and the
//! RoCE priority per RoCE netdev, with rates over an interval or against a baseline.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;

use super::{Format, GlobalArgs, Outcome, UsageError, open_host};
use crate::host::Host;
use crate::nccl::settings::Sourced;
use crate::probe::qos::{self, QosReport, Sample};
use crate::render::{Envelope, HostInfo};

#[derive(Debug, Args)]
#[command(after_long_help = qos_help())]
pub(crate) struct QosArgs {
    /// Only these netdevs (repeatable); any netdev, RDMA or not (live: veth, virtio...).
    #[arg(long, value_name = "IF")]
    pub ifname: Vec<String>,
    /// Only the netdev of this RDMA device (as `gids --device`), e.g. `--device mlx5_0`.
    #[arg(long, value_name = "DEV")]
    pub device: Option<String>,
    /// Sample the counters twice, SECONDS apart: pauses/s, pause time per second, CNPs/s
    /// (live only).
    #[arg(long, value_name = "SECONDS", conflicts_with = "baseline")]
    pub interval: Option<f64>,
    /// An earlier snapshot of the same host: deltas from it to --root (or the live host).
    #[arg(long, value_name = "SNAPSHOT")]
    pub baseline: Option<PathBuf>,
    /// Listen for the switch's LLDP (chassis, port, system name, 802.1Qaz ETS/PFC/APP) on
    /// every reported netdev and compare it with the host (live: needs root; a snapshot
    /// replays its recorded frames).
    #[arg(long)]
    pub lldp: bool,
    /// How long --lldp listens: a little over the usual 30 s LLDP interval.
    #[arg(long, value_name = "SECONDS", default_value_t = 31.0, requires = "lldp")]
    pub lldp_wait: f64,
    /// Write the result to FILE atomically (a temporary file in FILE's directory, renamed
    /// over it) and exit 0 once it is written: the verdict is in the file. For textfile
    /// collectors: `fabprobe --format prom qos --output /var/lib/node_exporter/fabprobe-qos.prom`.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// The long help: prose, the FINDINGS list from the probe's rule table, the rest.
fn qos_help() -> String {
    let rules = crate::render::text::findings_section(&crate::finding::docs(qos::RULES));
    format!("{QOS_HELP}{rules}\n{QOS_HELP_DATA}")
}

const QOS_HELP: &str = "\
For each RoCE netdev (the netdev of every Ethernet-link-layer RDMA port; --ifname for others):
PFC, ETS, the APP table and DCBX from DCB netlink (RTM_GETDCB, DCB_CMD_IEEE_GET; a driver
without DCB answers EOPNOTSUPP, shown as not supported), trust mode (dscp when the APP table has
DSCP entries, else pcp), receive buffers (DCB_ATTR_DCB_BUFFER); the ethtool statistics ioctl's
pause counters ({rx,tx}_prio<p>_pause[_duration], rx_prio<p>_pause_transition, *_global_pause*,
tx_pause_storm_{warning,error}_events, rx_prio<p>_marked) whose presence encodes which
priorities have PFC on; ECN/DCQCN from MLNX_OFED's /sys/class/net/<if>/ecn (absent on inbox
drivers: unknown, not off); np_ecn_marked_roce_packets, np_cnp_sent, rp_cnp_handled,
rp_cnp_ignored from hw_counters; the RoCE traffic class (NCCL_IB_TC from the environment or
NCCL's conf files, else /sys/class/infiniband/<dev>/tc/<port>/traffic_class, else unknown), its
DSCP (tclass >> 2) and the priority the APP table maps it to. A RoCE port's netdev is the PCI
function's, the parent of a virtual device, else the one its GIDs name (gid_attrs/ndevs); a
bond stands for its members, each probed. When RoCE's priority is unknown, PFC and ECN are
judged on every lossless priority and nothing fails on a guessed priority.

";

const QOS_HELP_DATA: &str = "\
JSON DATA (fabprobe.qos)
  {\"rdma\": {\"devices_found\", \"message\", \"names_moved\": [{\"name\", \"pci_bus_id\",
            \"was_to_be\", \"past\"}] (names ib_core moved past a NIC that did not
            register; absent when none),
            \"not_in_rdma\": [{\"label\", \"pci_bus_id\", \"vendor_device\",
              \"driver\", \"netdevs\", \"module_not_loaded\" (the module to load when
              none of the vendor's NICs registered; absent otherwise)}] (NICs in
            the PCI tree that registered no RDMA device; absent when none)},
   \"sample\": null | {\"kind\": \"interval\"|\"baseline\", \"baseline\", \"interval_s\"},
   \"interfaces\": [{\"ifname\", \"rdma_device\", \"rdma_port\",
     \"dcb\": {\"error\" (EOPNOTSUPP, not_captured, ...), \"pfc_enabled\": [prio], \"pfc_delay\",
       \"trust\" (dscp|pcp), \"dscp2prio\": [[dscp, prio]], \"dcbx_mode\" (os controlled|
       firmware controlled|off), \"ets\": {\"willing\", \"ets_cap\", \"cbs\", \"tc_tx_bw\", \"tc_tsa\",
       \"prio_tc\"}, \"buffer\": {\"prio2buffer\", \"buffer_size_bytes\", \"total_size_bytes\"},
       \"notes\"},
     \"ethtool\": {\"error\", \"counters_total\", \"pfc_priorities_from_counters\",
       \"global_pause_counters\"},
     \"ecn\": null | {\"rp_enabled\", \"np_enabled\", \"cnp_dscp\", \"cnp_802p_prio\",
       \"min_time_between_cnps\", \"rp_params\": {name: value}}, \"ecn_unknown_reason\",
     \"roce\": {\"traffic_class\", \"traffic_class_source\", \"dscp\", \"priority\", \"priority_source\"},
     \"priorities\": [{\"priority\", \"pfc_dcb\", \"pfc_counters\", \"ets_tc\", \"ecn_rp\", \"ecn_np\",
       \"roce\", \"pause\": null | {\"rx_pause\", \"rx_pause_duration_us\", \"tx_pause\",
       \"tx_pause_duration_us\", \"rx_pause_transition\"}, \"rx_marked\"}],
     \"global_pause\": null | {same as pause},
     \"pause_storm\": {\"tx_pause_storm_warning_events\", \"tx_pause_storm_error_events\"},
     \"cnp\": [{\"name\", count}],
     \"switch\": null | {\"waited_s\", \"error\", \"none_reason\", \"lldp\": null | {\"source_mac\",
       \"chassis_id\", \"port_id\", \"ttl_s\", \"port_description\", \"system_name\",
       \"ets\"|\"ets_recommendation\": {\"willing\", \"prio_tc\", \"tc_bw\", \"tc_tsa\"},
       \"pfc\": {\"willing\", \"mbc\", \"pfc_cap\", \"pfc_enable\" (bitmap)},
       \"app\": [{\"selector\", \"protocol\", \"priority\"}], \"notes\"}}}],
   \"notes\"}
  Every count is {\"value\", \"delta\", \"rate_per_s\", \"went_backwards\"}; durations are in
  microseconds, so a duration's rate_per_s is microseconds paused per second.

PROMETHEUS (--format prom)
  fabprobe_qos_pfc_enabled{device,priority}, fabprobe_qos_{rx,tx}_pause_frames_total,
  fabprobe_qos_{rx,tx}_pause_duration_seconds_total, fabprobe_qos_rx_ecn_marked_packets_total,
  fabprobe_qos_pause_storm_events_total{level}, fabprobe_qos_rdma_cc_counter_total{counter}.
  fabprobe_qos_name_moved{device,pci_bus_id,was_to_be} 1 for each RDMA device name ib_core
  moved past a NIC that did not register (absent when none): the other series keep the
  kernel's name as their device label, and this one says that name is now another NIC.
  The verdict: fabprobe_qos_verdict 0|1|2, fabprobe_qos_findings{severity=fail|warn|unknown},
  fabprobe_qos_finding{id,subject,severity} N (how many). A textfile cron job writes with
  --output FILE: replaced atomically, exit 0 once written.

LLDP (--lldp)
  An AF_PACKET socket on each netdev joins 01:80:c2:00:00:0e and takes the first LLDP frame
  within --lldp-wait; it decodes chassis ID, port ID, TTL, port description, system name and the
  IEEE 802.1Qaz TLVs (OUI 00-80-C2: ETS configuration and recommendation, PFC configuration,
  application priority). Nothing arriving is said plainly (the switch does not send LLDP there,
  or the NIC's firmware LLDP agent consumes it). `fabprobe snapshot` does not listen; frames
  recorded in a snapshot's fabprobe/lldp.json are replayed.";

/// The RDMA device a netdev belongs to; a netdev of none (`--ifname veth0`) by its own name.
fn device_of(i: &qos::QosIf) -> &str {
    i.rdma_device.as_deref().unwrap_or(&i.ifname)
}

fn sample(host: &Host, a: &QosArgs, tc: Option<&Sourced<u32>>) -> QosReport {
    if a.ifname.is_empty() {
        qos::probe(host, tc)
    } else {
        qos::probe_ifnames(host, &a.ifname, tc)
    }
}

pub(crate) fn run(g: &GlobalArgs, a: QosArgs) -> anyhow::Result<Outcome> {
    let fmt = g.format;
    let host = open_host(g)?;
    super::check_names(&host, "--ifname", &a.ifname, "/sys/class/net", "netdev")?;
    let tc = super::nccl_settings(g, &host).ib_tc();
    let mut report = sample(&host, &a, tc.as_ref());
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
        if !report.interfaces.is_empty() {
            let t0 = Instant::now();
            g.log(1, format!("sampling again in {secs} s"));
            std::thread::sleep(Duration::from_secs_f64(secs));
            let mut second = sample(&host, &a, tc.as_ref());
            qos::apply_deltas(&mut second, &report, Sample::interval(t0.elapsed().as_secs_f64()));
            report = second;
        }
    } else if let Some(b) = &a.baseline {
        let base = Host::snapshot(b)?;
        super::baseline::ensure_earlier_same_host(&base, b, &host)?;
        let before = sample(&base, &a, tc.as_ref());
        qos::apply_deltas(
            &mut report,
            &before,
            Sample::baseline(&base, &host, b.display().to_string()),
        );
    }
    if a.lldp {
        if !(a.lldp_wait >= 0.0 && a.lldp_wait <= 3600.0) {
            return Err(UsageError(format!(
                "--lldp-wait {}: give a number of seconds between 0 and 3600",
                a.lldp_wait
            ))
            .into());
        }
        g.log(1, format!("listening for LLDP for up to {} s", a.lldp_wait));
        qos::add_lldp(&host, &mut report, Duration::from_secs_f64(a.lldp_wait));
    }
    report.notes.extend(qos::backwards_notes(&report));
    let mut findings = qos::findings(&report);
    if let Some(dev) = &a.device {
        let found = report.rdma.devices_found;
        findings = super::device_view(&mut report.interfaces, dev, device_of, found, findings)?;
    }
    let text = match fmt {
        Format::Json => Envelope::new("qos", HostInfo::of(&host), &report, &findings).to_json(),
        Format::Prom => {
            let known = report
                .rdma
                .unreadable
                .is_none()
                .then_some(report.interfaces.len());
            crate::render::qos::prom(&report)
                + &super::out::findings_prom("qos", &findings)
                + &crate::render::moved_prom("qos", "", &report.rdma.names_moved)
                + &crate::render::devices_prom("qos", "", &[("roce_netdev", known)])
        }
        _ => crate::render::qos::table(&report, &findings),
    };
    super::out::deliver(&text, a.output.as_deref(), Outcome::from_findings(&findings))
}
