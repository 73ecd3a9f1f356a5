//! `fabprobe snapshot -o FILE.tar.gz|DIR`.

use std::path::PathBuf;

use clap::Args;

use super::{GlobalArgs, Outcome, UsageError};

#[derive(Debug, Args)]
#[command(after_long_help = SNAPSHOT_FORMAT)]
pub(crate) struct SnapshotArgs {
    /// Where to write: a name ending in .tar.gz or .tgz gives a tarball, anything else an
    /// (empty or new) directory.
    #[arg(short, long, value_name = "FILE.tar.gz|DIR")]
    pub output: PathBuf,
    /// Also listen this many seconds for the switch's LLDP on every RoCE netdev (needs root)
    /// and keep the frames, for `qos --lldp` on the snapshot.
    #[arg(long, value_name = "SECONDS")]
    pub lldp_wait: Option<f64>,
    /// Replace an existing FILE.tar.gz (a directory is never emptied).
    #[arg(long)]
    pub force: bool,
}

/// Refused before anything is probed: an archive that exists (without --force) and a
/// directory that is not empty.
fn check_target(out: &std::path::Path, force: bool) -> anyhow::Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(out) else {
        return Ok(());
    };
    if meta.is_dir() {
        let empty = std::fs::read_dir(out).map(|mut d| d.next().is_none()).unwrap_or(false);
        if !empty {
            return Err(UsageError(format!(
                "-o {}: the directory is not empty; give a new or empty directory (--force never empties one)",
                out.display()
            ))
            .into());
        }
    } else if !force {
        return Err(UsageError(format!(
            "-o {}: the file exists; --force replaces it",
            out.display()
        ))
        .into());
    }
    Ok(())
}

const SNAPSHOT_FORMAT: &str = "\
SNAPSHOT FORMAT
  A snapshot is a directory (or a .tar.gz of one) that mirrors the live paths: <root>/sys/...,
  <root>/proc/..., with symlinks kept as relative symlinks, so a real /sys subtree copied in
  works unmodified. It holds exactly what the probes read (the PCI ancestry of every GPU and
  RDMA/NIC device, /sys/class/infiniband, the relevant /sys/class/net entries, NUMA node
  files, the /proc and /sys/module files probes use), nothing more. Of a library directory
  (/usr/lib/x86_64-linux-gnu, an LD_LIBRARY_PATH entry) it keeps only the libraries the
  probes look for by name (libnccl*, libibverbs*, librdmacm*, rdma-core's providers
  lib*-rdmav*, libmlx4/5, libcuda*, libnvidia-ml*), as symlinks and empty files of that
  name: the name is what the probes read (the NCCL version, rdma-core's version).

  Answers that are not files live in the side folder <root>/fabprobe/ (all optional; a
  directory holding only sys/ is a valid snapshot):
    host.json         {hostname, kernel, captured_at, tool_version, skipped[]}
    env.json          {\"NCCL_IB_HCA\": \"=mlx5_0\", ...}: only NCCL_*, UCX_*, FABPROBE_* and
                      CUDA_VISIBLE_DEVICES-style variables, never the rest of the environment
                      and never a secret (FABPROBE_TOKEN, names with TOKEN, SECRET, PASSWORD)
    nvml.json         {\"state\": \"available\", \"driver_version\", \"gpus\": [{index, pci_bus_id,
                      nvlinks: [{link, active, remote_pci_bus_id,
                      remote_device_type (gpu|switch|ibmnpu|unknown)}], ...}]} or
                      {\"state\": \"unavailable\", \"reason\": \"...\"}
    facts.json        {\"state\": \"available\", \"kernel\", \"os\", \"cpu_model\", \"cpu_count\",
                      \"memory_total_bytes\", \"uptime_s\", \"load_avg\": [1m, 5m, 15m],
                      \"memlock\": {\"soft\", \"hard\"} (\"unlimited\" or {\"bytes\": N}),
                      \"device_holders\": [{pid, comm, devices}] (open /dev/nvidia* and
                      /dev/infiniband/uverbs*), \"processes_unreadable\"} or unavailable
    read-errors.json  {\"/sys/<canonical path>\": \"EINVAL\"}: reads that failed on the live host;
                      the file exists (empty) in the tree and reads of it fail with that errno
    ethtool.json      {\"eth0\": {\"ok\": [[\"rx_prio3_pause\", 12], ...]} | {\"error\": \"EOPNOTSUPP\"}}:
                      the ethtool statistics ioctl (ethtool -S), names and order as the driver gave them
    dcb.json          {\"eth0\": {\"ok\": \"<hex>\"} | {\"error\": \"EOPNOTSUPP\"}}: the raw DCB netlink
                      reply (RTM_GETDCB, DCB_CMD_IEEE_GET) after its nlmsghdr
    lldp.json         {\"eth0\": {\"ok\": [\"<hex of an Ethernet frame>\"]}}: LLDP frames heard
                      (only with --lldp-wait)

  A .tar.gz given to --root is unpacked into a private temporary directory and refused,
  naming the entry, when it holds anything a capture never writes: device files, FIFOs,
  hard links, GNU sparse files, absolute names or `..`, symbolic links that leave the
  snapshot, more than 200000 entries or 256 MiB, or one file over 16 MiB.

  Capture works as non-root: what could not be read is recorded as its errno and listed
  under skipped. Use it with any probe: fabprobe --root node1.tar.gz topo";

pub(crate) fn run(g: &GlobalArgs, a: SnapshotArgs) -> anyhow::Result<Outcome> {
    if g.root.is_some() {
        return Err(UsageError(
            "`fabprobe snapshot` captures the live host; --root cannot be used with it".into(),
        )
        .into());
    }
    let lldp_wait = match a.lldp_wait {
        Some(s) if !(0.0..=3600.0).contains(&s) => {
            return Err(UsageError(format!(
                "--lldp-wait {s}: give a number of seconds between 0 and 3600"
            ))
            .into());
        }
        Some(s) => {
            g.log(1, format!("listening for LLDP for up to {s} s"));
            Some(std::time::Duration::from_secs_f64(s))
        }
        None => None,
    };
    check_target(&a.output, a.force)?;
    g.log(1, format!("capturing into {}", a.output.display()));
    // The job's environment (--env-from, --env-file) is what the snapshot records.
    let host = super::open_host(g)?.with_recording();
    let summary = crate::snapshot::capture_host_with(host, &a.output, lldp_wait)?;
    say!(
        "fabprobe: wrote {} ({} files, {} symlinks, {} directories)",
        a.output.display(),
        summary.files,
        summary.symlinks,
        summary.directories
    );
    if !summary.failed_reads.is_empty() {
        say!(
            "fabprobe: {} reads failed and are recorded as such (see fabprobe/read-errors.json)",
            summary.failed_reads.len()
        );
        for (p, e) in summary.failed_reads.iter().take(10) {
            g.log(1, format!("  {}: {e}", p.display()));
        }
    }
    // One line, not one per file: -v lists them.
    if !summary.skipped.is_empty() {
        let first = &summary.skipped[0];
        say!(
            "fabprobe: skipped {} paths (e.g. {first}){}",
            summary.skipped.len(),
            if g.verbose == 0 { "; -v lists them" } else { "" }
        );
        for s in &summary.skipped {
            g.log(1, format!("  skipped: {s}"));
        }
    }
    Ok(Outcome::Pass)
}
