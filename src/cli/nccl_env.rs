//! `fabprobe nccl-env`: what NCCL would choose here, and a lint of the NCCL configuration.

use clap::Args;

use super::{Format, GlobalArgs, Outcome, emit, open_host};
use crate::probe::nccl_env;
use crate::render::{Envelope, HostInfo};

#[derive(Debug, Args)]
#[command(after_long_help = nccl_env_help())]
pub(crate) struct NcclEnvArgs {}

/// The long help: prose, the FINDINGS list from the probe's rule table, the rest.
fn nccl_env_help() -> String {
    let rules = crate::render::text::findings_section(&crate::finding::docs(nccl_env::RULES));
    format!("{NCCL_ENV_HELP}{rules}\n{NCCL_ENV_HELP_DATA}")
}

const NCCL_ENV_HELP: &str = "\
Applies NCCL's own rules to this host (or --root snapshot) and the job's NCCL_* environment
(this shell's, or --env-from PID / --env-file FILE), the configuration files included:
NCCL_CONF_FILE (else ~/.nccl.conf in the passwd home of the job's user, as NCCL's
getpwuid(getuid()): the owner of --env-from's process, else fabprobe's own user; with
--env-file or a snapshot the job's HOME), then /etc/nccl.conf, read as NCCL's param.cc
does (only lines starting with '#' are comments, split at the first '=', nothing
trimmed); a value set earlier wins, so the environment beats both files. The NCCL version
whose rules apply is --nccl-version, else the first libnccl.so.2.X.Y on the library path
(the default GID index is 0 before 2.21; the peer-memory files NCCL checks changed in 2.22
and 2.23). Each choice names the rule that made it:
  sockets   NCCL_SOCKET_IFNAME (^ exclude, = exact, prefixes; ignored when 1 character),
            else ib*, the NCCL_COMM_ID subnet, ^docker,lo,virbr, docker, lo, virbr; only
            IPv4 or IPv6 addresses with NCCL_SOCKET_FAMILY=AF_INET or AF_INET6. The first
            interface is the IB out-of-band one and the bootstrap, unless NCCL_COMM_ID is
            set: then the bootstrap is the interface on that address's subnet, whatever
            the rest says (NCCL's bootstrapNetInit), and none there fails the bootstrap.
  IB ports  active ports with an IB or Ethernet link layer, filtered by NCCL_IB_HCA
            (^ exclude, = exact, dev[:port]; without = an entry is a prefix; the port is
            C's atoi of what follows ':', so ':1x' is 1, ':' is 0 and matches no port,
            ':-1' any; an entry without a name is skipped), none when
            NCCL_IB_DISABLE=1; the GID index per port as `fabprobe gids` computes it.
  GDR       NCCL's path type of each GPU to each used HCA against NCCL_NET_GDR_LEVEL
            (names LOC..SYS or old numbers; default PXB, or P2C with NCCL_NET_GDR_C2C=1).
            Then what NCCL reaches there: peer memory first, then DMA-BUF, as
            `fabprobe gdr` judges them (ACS and IOMMU, which NCCL does not check: gdr).
  plugin    NCCL_NET_PLUGIN: none (or empty) for no plugin, else a comma-separated list,
            each NAME tried as given, then as libnccl-net-NAME.so (unless it has a '/' or
            is lib*.so), the first found wins; unset: libnccl-net.so. Looked up in
            LD_LIBRARY_PATH and the usual library directories (not /etc/ld.so.cache).
  topology  NCCL_TOPO_FILE, else /var/run/nvidia-topologyd/virtualTopology.xml if present.
Socket interfaces need getifaddrs: live, or a snapshot's fabprobe/ifaddrs.json (written by
`fabprobe snapshot`); an older snapshot says they are unknown.

";

const NCCL_ENV_HELP_DATA: &str = "\
JSON DATA (fabprobe.nccl-env)
  {\"env_source\": \"shell\" | \"--env-from PID n\" | \"--env-file F\" | a snapshot's,
   \"nccl_version\": {\"version\" (null: unknown), \"source\", \"also_found\"},
   \"conf_files\": [{\"path\", \"role\", \"state\" (read|absent|error), \"values\"}],
   \"conf_lints\": [{\"file\", \"line\", \"nccl_name\", \"nccl_value\", \"meant_name\",
                   \"meant_value\", \"why\"}],
   \"settings\": [{\"name\", \"value\", \"origin\": {\"kind\": environment|file, \"path\"},
                 \"line\", \"shadowed\": [{\"value\", \"origin\", \"line\"}]}],
   \"sockets\": {\"ifname\", \"interfaces\": [{\"name\", \"addr\", \"rule\"}],
               \"bootstrap\": {\"name\", \"addr\", \"rule\"} | null, \"unknown\"},
   \"ib\": {\"disabled\", \"hca\", \"message\", \"ports\": [{\"device\", \"port\", \"link_layer\",
           \"state\", \"used\", \"rule\", \"gid_index\", \"gid\", \"gid_rule\"}]},
   \"gdr\": {\"level\", \"level_rule\", \"kernel_support\",
            \"pairs\": [{\"gpu\", \"gpu_pci_bus_id\", \"nic\", \"path\", \"enabled\",
                       \"verdict\": on|dmabuf_possible|off_distance|off_no_peer_memory|unknown}]},
   \"net_plugin\": {\"requested\", \"tries\", \"found\", \"rule\"},
   \"topo_file\": {\"path\", \"from_env\", \"exists\"},
   \"names_moved\": [{\"name\", \"pci_bus_id\", \"was_to_be\", \"past\"}] (names ib_core
     moved past a NIC that did not register: NCCL_IB_HCA selects another NIC under them;
     absent when none),
   \"not_in_rdma\": [{\"label\", \"pci_bus_id\", \"vendor_device\",
     \"driver\", \"netdevs\", \"module_not_loaded\" (the module to load when
              none of the vendor's NICs registered; absent otherwise)}] (NICs in
     the PCI tree that registered no RDMA device: NCCL cannot use them; absent
     when none)}";

pub(crate) fn run(g: &GlobalArgs, _a: NcclEnvArgs) -> anyhow::Result<Outcome> {
    let fmt = g.format;
    let host = open_host(g)?;
    let nccl = super::nccl_settings(g, &host);
    let report = nccl_env::probe(&host, &nccl);
    let findings = nccl_env::findings(&host, &report);
    let text = match fmt {
        Format::Json => Envelope::new("nccl-env", HostInfo::of(&host), &report, &findings).to_json(),
        // The verdict and its findings, and the devices the settings were judged against.
        Format::Prom => {
            let gpus = nccl_env::gpu_count(&host);
            super::out::findings_prom("nccl_env", &findings)
                + &crate::render::moved_prom("nccl_env", "", &report.names_moved)
                + &crate::render::devices_prom(
                    "nccl_env",
                    "",
                    &[("gpu", Some(gpus)), ("rdma_port", Some(report.ib.ports.len()))],
                )
        }
        _ => crate::render::nccl_env::table(&report, &findings),
    };
    emit(&text)?;
    Ok(Outcome::from_findings(&findings))
}
