//! `fabprobe gids`: every GID of every RDMA port and the index NCCL would pick.

use std::path::PathBuf;

use clap::Args;

use super::{Format, GlobalArgs, Outcome, UsageError, open_host};
use crate::probe::gids;
use crate::render::{Envelope, HostInfo};

#[derive(Debug, Args)]
#[command(after_long_help = gids_help())]
pub(crate) struct GidsArgs {
    /// Print exactly what the show_gids script prints (tabs, its lexical order, footer
    /// n_gids_found=N), for scripts that parse it.
    #[arg(long)]
    pub show_gids: bool,
    /// Only this RDMA device (like `show_gids DEV`).
    #[arg(long, value_name = "DEV")]
    pub device: Option<String>,
    /// Write the result to FILE atomically (a temporary file in FILE's directory, renamed
    /// over it) and exit 0 once it is written: the verdict is in the file. For textfile
    /// collectors: `fabprobe --format prom gids --output /var/lib/node_exporter/fabprobe-gids.prom`.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// The long help: prose, the FINDINGS list from the probe's rule table, the data formats.
fn gids_help() -> String {
    let rules = crate::render::text::findings_section(&crate::finding::docs(gids::RULES));
    format!("{GIDS_HELP}{rules}\n{GIDS_HELP_DATA}")
}

const GIDS_HELP: &str = "\
Rows are every populated GID (all-zero and fe80:: zero-trailer slots are skipped, as show_gids
does) in numeric index order. For each port the index NCCL would use is marked, computed with
NCCL's own rules (NCCL >= 2.21: NCCL_IB_GID_INDEX, NCCL_IB_ROCE_VERSION_NUM,
NCCL_IB_ADDR_FAMILY, NCCL_IB_ADDR_RANGE; on InfiniBand the routable-FLID rule with
NCCL_IB_ROUTABLE_FLID_GID_INDEX) and the environment of the host or snapshot, and likewise
perftest's default (-x not given). Reads of gid_attrs/types and ndevs that fail with EINVAL
(empty slots, IB ports, unmapped container slots) are treated as the kernel means them.

NARROW TERMINALS
  When the full table is wider than the terminal (COLUMNS, else the terminal's width), a
  compact form keeps each GID on one line: device/port in one column, an IPv4-mapped GID as
  ::ffff:a.b.c.d (the same 16 bytes), and the link layer and the NCCL and perftest picks left
  to the per-port lines under the table, which wrap. Piped without COLUMNS, or on a wide
  terminal, the full table. --show-gids prints show_gids' own bytes at any width, for scripts
  that parse show_gids; `fabprobe gids | cat` gives the full table on a terminal. A device
  name ib_core moved past a NIC that did not register is said on stderr under --show-gids
  (`fabprobe: name moved: mlx5_7~ is the NIC at ...`), so the rows a script parses keep
  show_gids' form; the table marks it `mlx5_7~` and says it after the verdict.

";

const GIDS_HELP_DATA: &str = "\
JSON DATA (fabprobe.gids)
  {\"rdma\": {\"devices_found\": bool, \"message\": str|null, \"names_moved\": [{\"name\",
            \"pci_bus_id\", \"was_to_be\", \"past\"}] (names ib_core moved past a NIC
            that did not register; absent when none),
            \"not_in_rdma\": [{\"label\", \"pci_bus_id\", \"vendor_device\",
              \"driver\", \"netdevs\", \"module_not_loaded\" (the module to load when
              none of the vendor's NICs registered; absent otherwise)}] (NICs in
            the PCI tree that registered no RDMA device; absent when none)},
   \"nccl_env\": {\"gid_index\", \"roce_version_num\", \"addr_family\", \"addr_range\",
                \"routable_flid_gid_index\" (null when unset), \"auto_default\" (NCCL picks the
                index itself when NCCL_IB_GID_INDEX is unset: 2.21+; null: version unknown),
                \"nccl_version\" (whose rule that is)},
   \"ports\": [{\"device\", \"port\", \"link_layer\", \"node_type\", \"state\", \"gid_tbl_len\",
              \"entries\": [{\"index\", \"gid\" (kernel full form), \"ipv4\", \"roce_version\"
                           (v1|v2|IB|null), \"gid_type\" (types file as read), \"netdev\",
                           \"attr_errors\": {\"types\"|\"ndevs\": errno}, \"link_local\",
                           \"nccl_pick\", \"perftest_pick\"}],
              \"nccl\": {\"index\", \"reason\"}, \"perftest\": {\"index\", \"reason\"}}]}

PROMETHEUS (--format prom)
  fabprobe_infiniband_gid_info{device,port,index,gid,ipv4,version,netdev} 1
  fabprobe_infiniband_nccl_gid_index{device,port}
  fabprobe_gids_name_moved{device,pci_bus_id,was_to_be} 1 for each RDMA device name ib_core
  moved past a NIC that did not register (absent when none): the other series keep the
  kernel's name as their device label, and this one says that name is now another NIC.
  The verdict: fabprobe_gids_verdict 0|1|2, fabprobe_gids_findings{severity=fail|warn|unknown},
  fabprobe_gids_finding{id,subject,severity} N (how many). A textfile cron job writes with
  --output FILE: replaced atomically, exit 0 once written.";

pub(crate) fn run(g: &GlobalArgs, a: GidsArgs) -> anyhow::Result<Outcome> {
    let fmt = g.format;
    if a.show_gids && fmt != Format::Table {
        return Err(UsageError(
            "--show-gids prints show_gids' own text; it cannot be combined with --format".into(),
        )
        .into());
    }
    let host = open_host(g)?;
    super::check_names(
        &host,
        "--device",
        a.device.as_slice(),
        "/sys/class/infiniband",
        "RDMA device",
    )?;
    let nccl = super::nccl_settings(g, &host);
    let mut report = gids::probe(&host, &nccl.gid_env());
    let mut findings = gids::findings(&report);
    if let Some(dev) = &a.device {
        let found = report.rdma.devices_found;
        findings = super::device_view(&mut report.ports, dev, |p| p.device.as_str(), found, findings)?;
    }
    if let Some(m) = &report.rdma.message {
        g.log(1, m);
    }
    let text = if a.show_gids {
        // show_gids' rows stay its own; what a moved name now names is said beside them.
        let legend = crate::render::text::moved_legend_to(&report.rdma.names_moved, None);
        for l in legend.lines() {
            g.log(0, l);
        }
        crate::render::gids::show_gids(&report)
    } else {
        match fmt {
            Format::Json => Envelope::new("gids", HostInfo::of(&host), &report, &findings).to_json(),
            Format::Prom => {
                let known = report.rdma.unreadable.is_none();
                let mut devs: Vec<&str> = report.ports.iter().map(|p| p.device.as_str()).collect();
                devs.dedup();
                crate::render::gids::prom(&report)
                    + &super::out::findings_prom("gids", &findings)
                    + &crate::render::moved_prom("gids", "", &report.rdma.names_moved)
                    + &crate::render::devices_prom(
                        "gids",
                        "",
                        &[
                            ("rdma", known.then_some(devs.len())),
                            ("rdma_port", known.then_some(report.ports.len())),
                        ],
                    )
            }
            _ => crate::render::gids::table(&report, &findings),
        }
    };
    super::out::deliver(&text, a.output.as_deref(), Outcome::from_findings(&findings))
}
