//! `fabprobe nccl-log FILE... | DIR | -`: summary and root-cause verdicts from NCCL logs.

use std::path::PathBuf;

use clap::Args;

use super::{Format, GlobalArgs, Hinted, Outcome, UsageError, emit};
use crate::nccl_log::Analyzer;
use crate::render::{Envelope, HostInfo};

#[derive(Debug, Args)]
#[command(after_long_help = nccl_log_help())]
pub struct NcclLogArgs {
    /// Log files, a directory of them (read in name order, not recursively), or `-` for
    /// stdin. Files may be one per rank or one combined job log.
    #[arg(required = true, value_name = "FILE|DIR|-")]
    pub inputs: Vec<PathBuf>,
}

const NCCL_LOG_HELP: &str = "\
Reads NCCL_DEBUG=WARN, INFO or TRACE output as people have it: one file per rank, one
combined job log, or stdin; lines pasted without NCCL's header or with it anonymised
(`host-01:XXXXXX [5]`, `<hostname>:<pid>`), markdown debris, ANSI colour and CRLF (the
verdict then says host and rank are unknown); behind launcher prefixes (mpirun --tag-output/--timestamp-output
`[1,N]<stdout>:`, srun -l `N: `, PyTorch `[rankN]:`, torchrun `[defaultN]:`, pdsh `host: `,
container timestamps, Ray's `(Worker pid=N)`); interleaved ranks; headers with or without
pid:tid; NCCL 1.x (`WARN file.cu:NNN`), 2.0-2.2 (the level without `NCCL`: `host:pid:tid
[dev] file:line WARN`, `... [dev] INFO`), 2.4-2.8 (`include/socket.h`, `.cu` files, `NET :
Using interface`) to 2.29 formats; PyTorch ProcessGroupNCCL watchdog lines. Each input is
cut into chunks of whole lines that every core reads in parallel, merged in input order to
the answer one pass gives, in bounded memory (lines longer than 64 KiB are cut). A line no
rule understands is counted, never fatal.
--root does not apply.

SUMMARY
  NCCL versions per host, hosts, ranks and local ranks, ring and tree channels, NCCL's
  channel line, per connection (from rank, to rank) the transport as NCCL printed it and
  counts per class (NET/IB/GDRDMA, NET/IB, NET/Socket, P2P/IPC, P2P/CUMEM, SHM, ...),
  bootstrap and socket interfaces, HCAs, GDR on/off per HCA, network and plugin.

VERDICTS
  The first failure of each process, collapsed to root causes: status 5 flushes, closed
  connections and collective timeouts are knock-ons of a hard failure (counted in the first
  verdict's knock_ons); timeouts on one sequence number are one event whose suspects are the
  communicator's ranks missing from it; one cause on one host, device and peer is one
  verdict listing its ranks. Cause ids:
    ib_retry_exceeded (status 12)    ib_rnr_retry_exceeded (13)   ib_local_protection (4)
    ib_remote_access (10)            ib_remote_op (11)            ib_completion_error (other)
    ib_wr_flush (5, only when nothing else explains it)
    ib_modify_qp_failed              gid_index_unusable           ib_reg_mr_failed
    ib_device_open_failed            ib_no_device (warn)          net_socket_fallback (warn)
    socket_iface_loopback (fail across hosts, warn on one)        socket_no_interface
    socket_connect_failed            remote_process_exited        collective_timeout
    gdr_disabled (warn)              version_mismatch             collective_mismatch
    cuda_error                       cuda_oom                     system_error
    cuda_system_not_ready (CUDA 802: the host's Fabric Manager)
    shm_alloc_failed (/dev/shm)      duplicate_gpu                bootstrap_rank_mismatch
    ib_port_error                    ib_device_fatal              ib_async_error
    ib_gid_change (warn)             ib_verbs_unavailable (warn: sockets instead)
    proxy_connection_failed          no_nccl_output (unknown: nothing to judge)
    socket_iface_virtual (a Docker/Podman/libvirt/CNI bridge, veth or tap by those projects'
      naming rules, or a kernel fallback tunnel such as ip6tnl0: fail across hosts; an
      overlay such as flannel.N or cni0: warn)
    net_plugin_reg_mr_failed  net_plugin_provider_error  net_plugin_error (a net plugin's own
      WARN, e.g. NET/OFI; names the plugin and its version)
    net_plugin_fallback (warn: a plugin or transport failed before NCCL chose its network and
      NCCL moved on; its error trail is no failure)
    topology_file_error  topology_file_unreadable (warn; both name the NCCL_TOPO_FILE and who
      set it, as the log says)  graph_file_error (NCCL_GRAPH_FILE names GPUs or NICs the job
      does not have)
    unclassified_failure (a WARN or an error trail `file.cc:NNN -> N` no rule explains; ranked
      after every classified cause)
  An earlier event that explains later completion errors (an IB async or port event, a GID
  table change, a peer's own failure) is the verdict; those errors are listed under it
  (explains) and counted as knock-ons. A loopback or virtual interface NCCL gave out explains
  the socket connect failures: every one across hosts, on one host those whose address
  names it (fe80::1%ip6tnl0).
  socket_connect_failed carries the errno (111 refused, 110 timed out, 113 no route);
  failures carry NCCL's return code as nccl_result (`ncclSystemError (2)`, from the line
  or the process's error trail). PyTorch's global rank is the launcher's [rankN] label, not
  the group rank in [PG ID ... Rank N]; a rank seen past a sequence number is no suspect.
  With no NCCL line in the input (an empty file, a log written without NCCL_DEBUG) the
  verdict is no_nccl_output, severity unknown (no finding in the JSON envelope, exit 3):
  rerun the job with NCCL_DEBUG=INFO. A directory with no file in it is a mistake in the
  command (exit 2), as it is for sweep.
  Each next: step fills in the hosts, peer and files the log names, so it pastes: commands
  are in backticks (on node-a and node-b: `fabprobe links`); what the log does not name is
  said in words (on that host).

OUTPUT
  The headline first (fabprobe nccl-log: FAIL|WARN|PASS|UNKNOWN ...; worst: ...), then the
  verdicts, fail before warn, then the summary and the hosts table (at most 4 interfaces or
  HCAs per cell, then \"and N more\"; JSON has them all), then lines not understood.

JSON DATA (fabprobe.nccl-log)
  {\"summary\": {\"inputs\", \"bytes\", \"lines\", \"nccl_lines\", \"unrecognised_lines\",
     \"unrecognised_samples\", \"truncated_lines\", \"nccl_versions\": {version: [host]},
     \"hosts\": [{\"host\", \"ranks\", \"local_ranks\", \"bootstrap\", \"socket_interfaces\",
     \"hcas\", \"gdr\": {hca: bool}}], \"world_size\", \"ranks_seen\", \"ring_channels\",
     \"ring_sample\", \"tree_channels\", \"channels\", \"networks\", \"plugins\",
     \"transports\": {class: count}, \"connections\": [{\"from_rank\", \"to_rank\", \"via\"}],
     \"connections_dropped\"},
   \"verdicts\": [{\"cause\", \"severity\", \"host\", \"rank\", \"ranks\", \"device\",
     \"peer\": {\"addr\", \"host\", \"rank\"}, \"local_gid\", \"remote_gid\", \"status\",
     \"vendor_err\", \"file\", \"line_no\", \"line\", \"meaning\", \"next\", \"seq\", \"op\",
     \"suspects\", \"knock_ons\", \"explains\", \"nccl_result\", \"errno\"}]}
  seq, op, suspects, explains, nccl_result and errno are left out when absent.
  The envelope's findings repeat each verdict as nccl_log.<cause>.";

fn nccl_log_help() -> String {
    format!("{NCCL_LOG_HELP}\n{}", super::exit_status_text("nccl-log"))
}

fn cannot(what: &str, p: &std::path::Path, e: std::io::Error) -> anyhow::Error {
    Hinted {
        msg: format!("cannot {what} {}: {e}", p.display()),
        hint: "nccl-log takes log files, a directory of them, or - for stdin".into(),
    }
    .into()
}

pub fn run(g: &GlobalArgs, a: NcclLogArgs) -> anyhow::Result<Outcome> {
    let fmt = g.require_format("nccl-log", &[Format::Table, Format::Json])?;
    if g.root.is_some() {
        return Err(UsageError("--root does not apply to nccl-log: it reads log files".into()).into());
    }
    let mut an = Analyzer::new();
    for p in &a.inputs {
        if p.as_os_str() == "-" {
            an.read("-", std::io::stdin().lock())
                .map_err(|e| cannot("read", p, e))?;
            continue;
        }
        let meta = std::fs::metadata(p).map_err(|e| cannot("open", p, e))?;
        if meta.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| cannot("list", p, e))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.is_file())
                .collect();
            files.sort();
            // No file at all is a mistake in the command, not a log with nothing to judge:
            // exit 2 as sweep does for the same directory (3 is for input read and empty).
            if files.is_empty() {
                return Err(cannot(
                    "read logs from",
                    p,
                    std::io::Error::other("the directory holds no files"),
                ));
            }
            for f in files {
                g.log(1, format!("reading {}", f.display()));
                let fh = std::fs::File::open(&f).map_err(|e| cannot("open", &f, e))?;
                an.read(&f.display().to_string(), fh)
                    .map_err(|e| cannot("read", &f, e))?;
            }
        } else {
            g.log(1, format!("reading {}", p.display()));
            let fh = std::fs::File::open(p).map_err(|e| cannot("open", p, e))?;
            an.read(&p.display().to_string(), fh)
                .map_err(|e| cannot("read", p, e))?;
        }
    }
    let report = an.finish();
    let findings = crate::render::nccl_log::findings(&report);
    let text = match fmt {
        Format::Json => {
            let host = HostInfo {
                hostname: None,
                kernel: None,
                captured_at: None,
                source: report.summary.inputs.join(","),
            };
            Envelope::new("nccl-log", host, &report, &findings).to_json()
        }
        _ => crate::render::nccl_log::table(&report),
    };
    emit(&text)?;
    // Nothing to judge is its own answer (exit 3), so `nccl-log logs/ && echo clean` does
    // not say clean about a log without NCCL_DEBUG.
    if crate::render::nccl_log::unknown(&report) {
        return Ok(Outcome::Unknown);
    }
    Ok(Outcome::from_findings(&findings))
}
