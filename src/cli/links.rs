//! `fabprobe links`: RDMA port state, rate, identity, PCIe link and counters, with deltas
//! over an interval or against a baseline snapshot.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;

use super::{Format, GlobalArgs, Outcome, UsageError, open_host};
use crate::host::Host;
use crate::probe::links::{self, SampleInfo};
use crate::render::{Envelope, HostInfo};

#[derive(Debug, Args)]
#[command(after_long_help = links_help())]
pub(crate) struct LinksArgs {
    /// Sample the counters twice, SECONDS apart, and report deltas and rates (live only).
    #[arg(long, value_name = "SECONDS", conflicts_with = "baseline")]
    pub interval: Option<f64>,
    /// Only this RDMA device (as `gids --device`), e.g. `--device mlx5_0`; its ports are
    /// still judged against the whole host's (a rate below its peers').
    #[arg(long, value_name = "DEV")]
    pub device: Option<String>,
    /// An earlier snapshot of the same host: report deltas from it to --root (or to the
    /// live host); rates use the snapshots' captured_at times.
    #[arg(long, value_name = "SNAPSHOT")]
    pub baseline: Option<PathBuf>,
    /// Write the result to FILE atomically (a temporary file in FILE's directory, renamed
    /// over it) and exit 0 once it is written: the verdict is in the file. For textfile
    /// collectors: `fabprobe --format prom links --output /var/lib/node_exporter/fabprobe-links.prom`.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// The long help: prose, the FINDINGS list from the probe's rule table, the rest.
fn links_help() -> String {
    let rules = crate::render::text::findings_section(&crate::finding::docs(links::RULES));
    format!("{LINKS_HELP}{rules}\n{LINKS_HELP_DATA}")
}

const LINKS_HELP: &str = "\
Per device: node type, HCA type, firmware, board id, node GUID, the HCA's PCIe link (current vs
maximum) and netdevs. Per port: state and physical state (number and name), rate with lanes and
speed (old kernels' suffix-less form accepted), link layer, LID, SM LID, netdev. Every counter of
counters/ (IB PMA) and hw_counters/ with its real width: PMA counters saturate (16/8/4/32-bit,
data and packets 32 or 64-bit); port_xmit_data/port_rcv_data count 4-byte words (value_bytes is
x4); mlx5 q-counters wrap at 2^32; other hw counters are 64-bit. `N/A (no PMA)` and failed reads
are shown as unavailable, never as 0.

With --interval or --baseline each counter gets a delta (wraps undone; a saturated counter gives
a lower bound; a decrease of a saturating counter means it was cleared) and a rate per second:
data counters in bytes (delta_bytes, x4 the words the kernel counts) and GB/s (10^9 bytes/s),
with the share of the port's rate (the kernel's rate attribute, a signalling rate: 8b/10b links
such as QDR carry at most 80% of it as data); other counters in events per second. Pause time
is not an RDMA port counter: `fabprobe qos --interval` shows it as a share of the interval.

";

const LINKS_HELP_DATA: &str = "\
JSON DATA (fabprobe.links)
  {\"rdma\": {\"devices_found\", \"message\", \"names_moved\": [{\"name\", \"pci_bus_id\",
            \"was_to_be\", \"past\"}] (names ib_core moved past a NIC that did not
            register; absent when none),
            \"not_in_rdma\": [{\"label\", \"pci_bus_id\", \"vendor_device\",
              \"driver\", \"netdevs\", \"module_not_loaded\" (the module to load when
              none of the vendor's NICs registered; absent otherwise)}] (NICs in
            the PCI tree that registered no RDMA device; absent when none)},
   \"sample\": null | {\"kind\": \"interval\"|\"baseline\", \"baseline\", \"interval_s\"},
   \"verbs\": null | {\"error\" (e.g. ENOSYS), \"devices\": [{\"name\", \"port1_active\", \"error\"}]},
   \"devices\": [{\"name\", \"node_type\": {\"id\",\"name\"}, \"node_guid\", \"sys_image_guid\",
     \"fw_ver\", \"board_id\", \"hca_type\", \"hw_rev\", \"pci_bdf\", \"driver\",
     \"pci_link\": {\"current_speed\", \"current_width\", \"max_speed\", \"max_width\"} (a speed
       is {\"raw\", \"gts\", \"generation\"}),
     \"pci_netdevs\", \"device_counters\": [counter],
     \"ports\": [{\"port\", \"state\": {\"id\",\"name\"}, \"phys_state\": {\"id\",\"name\"},
       \"rate\": {\"raw\", \"gbps\", \"lanes\", \"speed\" (as printed), \"speed_name\" (SDR when unsuffixed)}, \"link_layer\", \"lid\", \"sm_lid\", \"netdev\", \"gid_netdevs\",
       \"counters\": [{\"name\", \"dir\" (counters|hw_counters|device_hw_counters), \"width_bits\",
         \"overflow\" (saturates|wraps), \"value\", \"value_bytes\", \"unavailable\", \"saturated\",
         \"delta\": null | {\"kind\": \"value\", \"value\", \"wrapped\"} | {\"kind\": \"saturated\",
         \"at_least\"} | {\"kind\": \"reset\", \"after\"}, \"delta_bytes\", \"rate_per_s\" (bytes/s for
         data counters, events/s otherwise), \"rate_gbs\" (data counters), \"line_rate_pct\"
         (data counters of a port with a known rate)}]}]}]}

PROMETHEUS (--format prom)
  every name starts fabprobe_ (node_exporter's own infiniband collector, on by default,
  owns node_infiniband_*; the same names in its textfile directory break the scrape). Its
  suffixes are kept: fabprobe_infiniband_info, fabprobe_infiniband_state_id,
  fabprobe_infiniband_physical_state_id, fabprobe_infiniband_rate_bytes_per_second,
  fabprobe_infiniband_port_data_{received,transmitted}_bytes_total, ..._symbol_error_total,
  ..._link_downed_total, ..._port_transmit_wait_total, ...; other counters as
  fabprobe_infiniband_hw_counter_total{counter=...}; rates as
  fabprobe_infiniband_counter_rate_per_second{counter=...}.
  fabprobe_links_name_moved{device,pci_bus_id,was_to_be} 1 for each RDMA device name ib_core
  moved past a NIC that did not register (absent when none): the other series keep the
  kernel's name as their device label, and this one says that name is now another NIC.
  The verdict: fabprobe_links_verdict 0|1|2, fabprobe_links_findings{severity=fail|warn|unknown},
  fabprobe_links_finding{id,subject,severity} N (how many). A textfile cron job writes with
  --output FILE: replaced atomically, exit 0 once written.";

pub(crate) fn run(g: &GlobalArgs, a: LinksArgs) -> anyhow::Result<Outcome> {
    let fmt = g.format;
    let host = open_host(g)?;
    let mut report = links::probe(&host);
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
        if report.rdma.devices_found {
            let t0 = Instant::now();
            g.log(1, format!("sampling again in {secs} s"));
            std::thread::sleep(Duration::from_secs_f64(secs));
            let mut second = links::probe(&host);
            let info = SampleInfo::interval(t0.elapsed().as_secs_f64());
            links::apply_deltas(&mut second, &report, info);
            report = second;
        }
    } else if let Some(b) = &a.baseline {
        let base_host = Host::snapshot(b)?;
        super::baseline::ensure_earlier_same_host(&base_host, b, &host)?;
        let before = links::probe(&base_host);
        let info = SampleInfo::baseline(&base_host, &host, b.display().to_string());
        links::apply_deltas(&mut report, &before, info);
    }
    let mut findings = links::findings(&report);
    if let Some(dev) = &a.device {
        let found = report.rdma.devices_found;
        findings = super::device_view(&mut report.devices, dev, |d| d.name.as_str(), found, findings)?;
        if let Some(v) = report.verbs.as_mut() {
            v.devices.retain(|d| &d.name == dev);
        }
    }
    if let Some(m) = &report.rdma.message {
        g.log(1, m);
    }
    let text = match fmt {
        Format::Json => Envelope::new("links", HostInfo::of(&host), &report, &findings).to_json(),
        Format::Prom => {
            let known = report.rdma.unreadable.is_none();
            let ports = report.devices.iter().map(|d| d.ports.len()).sum();
            crate::render::links::prom(&report)
                + &super::out::findings_prom("links", &findings)
                + &crate::render::moved_prom("links", "", &report.rdma.names_moved)
                + &crate::render::devices_prom(
                    "links",
                    "",
                    &[
                        ("rdma", known.then_some(report.devices.len())),
                        ("rdma_port", known.then_some(ports)),
                    ],
                )
        }
        _ => crate::render::links::table(&report, &findings),
    };
    super::out::deliver(&text, a.output.as_deref(), Outcome::from_findings(&findings))
}
