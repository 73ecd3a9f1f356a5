//! `fabprobe nccl-env`: what NCCL would choose here, and a lint of the NCCL configuration.

use clap::Args;

use super::{Format, GlobalArgs, Outcome, emit, open_host};
use crate::probe::nccl_env;
use crate::render::{Envelope, HostInfo};

#[derive(Debug, Args)]
#[command(after_long_help = NCCL_ENV_HELP)]
pub struct NcclEnvArgs {}

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

FINDINGS
  nccl_env.unknown_name            an NCCL_* name NCCL does not read (nearest real name)
  nccl_env.bad_value               a value NCCL misreads (no digits: read as 0, not the default;
                                   trailing text, an unknown word or level)
  nccl_env.out_of_range            NCCL_IB_TIMEOUT outside 1-31, NCCL_IB_RETRY_CNT outside
                                   0-7 (fail); NCCL_IB_ROCE_VERSION_NUM not 1 or 2 (warn)
  nccl_env.ifname_ignored          NCCL_SOCKET_IFNAME of one character
  nccl_env.comm_id_by_name         NCCL_COMM_ID names a host: NCCL resolves it on each node
  nccl_env.no_socket_interface     nothing matches, or NCCL_COMM_ID is on no local subnet:
                                   bootstrap fails (fail)
  nccl_env.socket_interface_unusable  lo or a docker/virbr bridge (fail), a link-local
                                   address (warn) picked for the bootstrap
  nccl_env.hca_prefix_match        NCCL_IB_HCA without '=' also selects mlx5_10.. for mlx5_1
  nccl_env.hca_matches_nothing     NCCL_IB_HCA selects no active port: sockets (fail)
  nccl_env.ib_disabled             NCCL_IB_DISABLE=1 with active RDMA ports
  nccl_env.p2p_disabled_nvlink     NCCL_P2P_DISABLE=1 on a host with NVLink
  nccl_env.gdr_off                 a GPU whose every used HCA is beyond NCCL_NET_GDR_LEVEL
  nccl_env.net_plugin_missing      NCCL_NET_PLUGIN names a library that is not found
  nccl_env.topo_file_missing       NCCL_TOPO_FILE names a missing file
  nccl_env.conf_file_unreadable    NCCL_CONF_FILE names a missing or unreadable file
  nccl_env.conf_line_misread       a configuration line NCCL reads otherwise than it looks:
                                   `NCCL_IB_HCA = mlx5_0` sets \"NCCL_IB_HCA \", `X=eth0 # c`
                                   the value \"eth0 # c\", a DOS line end keeps \\r
  gids.nccl_gid_index_bad, gids.nccl_gid_unusable, gids.nccl_gid_error
                                   NCCL_IB_GID_INDEX (or the automatic choice) on a used
                                   port points at an empty, link-local or RoCE v1 entry
Exit 1 when a finding is fail.

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
   \"topo_file\": {\"path\", \"from_env\", \"exists\"}}";

pub fn run(g: &GlobalArgs, _a: NcclEnvArgs) -> anyhow::Result<Outcome> {
    let fmt = g.require_format("nccl-env", &[Format::Table, Format::Json])?;
    let host = open_host(g)?;
    let nccl = super::nccl_settings(g, &host);
    let report = nccl_env::probe(&host, &nccl);
    let findings = nccl_env::findings(&host, &report);
    let text = match fmt {
        Format::Json => Envelope::new("nccl-env", HostInfo::of(&host), &report, &findings).to_json(),
        _ => crate::render::nccl_env::table(&report, &findings),
    };
    emit(&text)?;
    Ok(Outcome::from_findings(&findings))
}
