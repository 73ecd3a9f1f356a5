//! `fabprobe ring`: the multi-node ring AllReduce probe. Parses nccl-tests-style options,
//! works out who this rank is (flags or launcher environment), picks the data interface
//! with NCCL_SOCKET_IFNAME rules, runs the rank, and (rank 0) prints the report.

use std::sync::{Arc, Mutex};

use clap::{Args, ValueEnum};

use super::{Format, GlobalArgs, Outcome, UsageError, emit, progress};
use crate::host::Host;
use crate::render;
use crate::render::{Envelope, HostInfo};
use crate::ring::diagnosis::driver::ScanOptions;
use crate::ring::launch::{self, JobEnv, Launch, LaunchError, Net, Ranks, Transport, Watch};
use crate::ring::launcher::{self, Flags, Identity};
use crate::ring::model::{LiveStatus, RankInfo};
use crate::ring::rails::{self, RailSel};
use crate::ring::report::{DrainItem, LauncherInfo, ResultRow, RingReport, TicketItem, action_lists};
use crate::ring::run::{self, Failure, Options, RankOutcome};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum TransportArg {
    /// TCP sockets over the interface chosen by --ifname.
    Tcp,
    /// ibverbs RC QPs with RDMA Write with immediate, on the port NCCL would use (--device,
    /// NCCL_IB_HCA, the data interface's port) and NCCL's GID index (--gid-index,
    /// NCCL_IB_GID_INDEX).
    Rdma,
    /// rdma where every rank has a usable RDMA port, else tcp.
    Auto,
}

#[derive(Debug, Args)]
#[command(after_long_help = RING_HELP)]
pub(crate) struct RingArgs {
    /// Smallest message size (K, M, G suffixes: powers of 1024, as nccl-tests).
    #[arg(short = 'b', long = "minbytes", value_name = "SIZE", default_value = "32M", value_parser = parse_size)]
    pub min_bytes: u64,
    /// Largest message size.
    #[arg(short = 'e', long = "maxbytes", value_name = "SIZE", default_value = "32M", value_parser = parse_size)]
    pub max_bytes: u64,
    /// Multiply the size by this factor between steps.
    #[arg(short = 'f', long = "stepfactor", value_name = "F", default_value_t = 2)]
    pub factor: u64,
    /// Timed iterations per size.
    #[arg(short = 'n', long = "iters", value_name = "N", default_value_t = 20)]
    pub iters: u32,
    /// Warm-up iterations per size (not timed).
    #[arg(short = 'w', long = "warmup_iters", value_name = "N", default_value_t = 1)]
    pub warmup: u32,
    /// Verify the result of every size (0 turns checking off: #wrong shows N/A).
    #[arg(short = 'c', long = "check", value_name = "0|1", default_value_t = 1)]
    pub check: u32,
    /// Independent rings, each on its own connections (NCCL's channels).
    #[arg(long, value_name = "C", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub channels: u32,
    /// Data-plane transport.
    #[arg(long, value_enum, default_value_t = TransportArg::Auto)]
    pub transport: TransportArg,
    /// Data interface, NCCL_SOCKET_IFNAME syntax: prefixes, `^` excludes, `=` exact
    /// (default: $NCCL_SOCKET_IFNAME, else NCCL's own default order).
    #[arg(long, value_name = "SPEC")]
    pub ifname: Option<String>,
    /// RDMA port for --transport rdma/auto, `mlx5_0` or `mlx5_0:1` (exact name; default:
    /// NCCL_IB_HCA rules, then the ACTIVE port whose netdev is the data interface).
    #[arg(long, value_name = "DEV[:PORT]")]
    pub device: Option<String>,
    /// GID index for RoCE (default: NCCL_IB_GID_INDEX, else NCCL's automatic choice, as
    /// `fabprobe gids` shows it).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=255))]
    pub gid_index: Option<u32>,
    /// Deadline in seconds for every wait (bootstrap, link setup, each chunk).
    #[arg(long, value_name = "SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub timeout: u64,
    /// How long ranks may take to join, in seconds (default max(60, --timeout)): launchers
    /// start the ranks of a big job seconds apart; a rank that has not joined by then is
    /// named as missing.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub join_timeout: Option<u64>,
    /// Job token all ranks must share (default: $FABPROBE_TOKEN, else the launcher's job id).
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
    /// This rank (default: from the launcher's environment).
    #[arg(long, value_name = "R", requires = "world")]
    pub rank: Option<u32>,
    /// Number of ranks.
    #[arg(long, value_name = "N", requires = "rank")]
    pub world: Option<u32>,
    /// Rank 0's host and port (rank 0 listens there).
    #[arg(long, value_name = "HOST:PORT")]
    pub coordinator: Option<String>,
    /// Run the link scan only (no AllReduce sweep): measure every directed link on its own
    /// and name slow links and nodes.
    #[arg(long, conflicts_with = "no_scan")]
    pub scan: bool,
    /// Skip the link scan that runs before the sweep (with --local it runs only with
    /// --scan).
    #[arg(long)]
    pub no_scan: bool,
    /// Time budget of the whole link scan in seconds, confirmation included: an order starts
    /// only when it fits. The minimum runs whatever it says: two ring orders (so that a node
    /// can be told from a link) and, when there are suspects, 4 orders that confirm them.
    /// Links it leaves unmeasured are listed (scan.unmeasured).
    #[arg(long, value_name = "SECS", default_value_t = 10.0, value_parser = parse_seconds)]
    pub scan_time: f64,
    /// Bytes each scan sample moves over a link.
    #[arg(long, value_name = "SIZE", default_value = "16M", value_parser = parse_size)]
    pub scan_bytes: u64,
    /// Samples per link per scan order.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub scan_reps: u32,
    /// Run N ranks on this host (threads of this process) over loopback, or over the
    /// interface --ifname names: a self-test.
    #[arg(long, value_name = "N", conflicts_with_all = ["rank", "world", "coordinator"],
          value_parser = clap::value_parser!(u32).range(2..=256))]
    pub local: Option<u32>,
    /// Rails per node, one ring per rail (rail k of every node to rail k of the next, all
    /// at once): `all` (every RDMA port NCCL would use: --device lists them, e.g.
    /// `mlx5_0,mlx5_1`, else NCCL_IB_HCA rules; with --transport tcp every interface
    /// --ifname matches), N (the first N), or rail indices (`0,3`; one rail as `3,`).
    /// Default: one rail. Every node holds one control connection to rank 0 for all its
    /// rails.
    #[arg(long, value_name = "all|N|LIST", value_parser = rails::parse_rails)]
    pub rails: Option<RailSel>,
    /// Before joining, listen this long on each data netdev for the switch's LLDP when
    /// lldpd's table (lldpcli) has no neighbour for it, so verdicts name the switch port at
    /// the other end (`node-b eth1 <-> leaf-07 Eth1/12`); needs CAP_NET_RAW. The listen
    /// ends at the first frame. 0: lldpd's table only.
    #[arg(long, value_name = "SECS", default_value_t = 0.0, value_parser = parse_lldp_wait)]
    pub lldp_wait: f64,
    /// Also write the report as a self-contained HTML page (rank 0 only): the verdicts, the
    /// scan matrix, busbw against size, the hops (fabprobe-report(1)).
    #[arg(long, value_name = "OUT.html")]
    pub html: Option<std::path::PathBuf>,
    /// Write rank 0's report (table or JSON) to FILE instead of stdout, atomically: a
    /// temporary file in FILE's directory, fsynced, renamed over it, so a reader sees the
    /// old file or the whole report, also when a rank dies or a signal ends the run. The
    /// exit status stays the verdict's. Other ranks write nothing.
    #[arg(long, value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,
    /// The global --root, hidden here: a snapshot has no peers to move bytes to. Its value
    /// reaches GlobalArgs (same id), where `run` refuses it by name.
    #[arg(long = "root", value_name = "SNAPSHOT", hide = true)]
    pub root: Option<std::path::PathBuf>,
}

const RING_HELP: &str = "\
HOW TO RUN
  One process per rank, started by the launcher you already use; rank 0 hosts the
  coordinator (TCP, default port 29517 or $FABPROBE_PORT):
    srun -N4 --ntasks-per-node=1 fabprobe ring -b 1M -e 256M -f 4
    mpirun -np 4 -H a,b,c,d -x FABPROBE_COORDINATOR=a:29517 fabprobe ring
    RANK=1 WORLD_SIZE=4 MASTER_ADDR=a MASTER_PORT=29517 fabprobe ring
    fabprobe ring --rank 1 --world 4 --coordinator a:29517 --token job42
    fabprobe ring --local 4
  Rank and world come from --rank/--world, else FABPROBE_RANK/FABPROBE_WORLD, Slurm
  (SLURM_PROCID/SLURM_NTASKS; coordinator = first host of the job), Open MPI
  (OMPI_COMM_WORLD_RANK/SIZE), PMI (PMI_RANK/PMI_SIZE), torchrun (RANK/WORLD_SIZE,
  MASTER_ADDR:MASTER_PORT, or MASTER_PORT+1 under torchrun itself). Open MPI and PMI do not
  say where rank 0 is: pass --coordinator or FABPROBE_COORDINATOR. The token is --token,
  $FABPROBE_TOKEN, or the launcher's job id; connections with another token are refused.
  Ranks join within --join-timeout (default max(60, --timeout) s; launchers start the ranks
  of a big job seconds apart); a rank that has not joined by then is named as missing (exit
  1), not as a stall. A rank whose connection to rank 0 is reset before its table arrived
  connects again, within the same window.

LINK SCAN AND VERDICTS
  Before the sweep (unless --no-scan; alone with --scan) every rank sends to rank+k and
  receives from rank-k at the same time, for several ring orders k (natural, reversed, then
  the others) within --scan-time; each directed link is measured at its receiver,
  --scan-reps samples of --scan-bytes per order. Rank 0 judges every link against the
  median link and, where known, the line rate (an RDMA port's rate, else
  /sys/class/net/<if>/speed): a node whose outgoing (or incoming) links are all slow is a
  slow_egress (slow_ingress), a single slow link a slow_link, each beyond the run's noise
  (the spread of the links and of each link's own samples). Confirm before blame: after
  the plan, a suspect is measured again, first with new partners (a shift the plan did not
  run), then on new connections (new source ports, so a hashed path changes), with a link's
  own order re-run; the suspects that re-run reproduced get the new connections first, each
  suspect's whole; at most 8 orders more (scan.confirm_s). The plan is sized by a plan
  order's typical time (its wall time less its slowest link's excess over the median link,
  the median over the orders run: one slow link or one rank's hiccup does not cut it), and
  --scan-time bounds the whole scan: an order (plan or confirmation) starts only when the
  time so far plus what it is expected to take fits, past the minimum (two plan orders, 4
  of confirmation). Links the scan did not measure are listed beside the verdict (NOT
  MEASURED, with why: the budget ended the plan, or no sample arrived) and a healthy line
  says how many of the links it covers (`28 of 30 links measured`); confirmation orders the
  budget left out are said too (NOT CONFIRMED).
  Slowness that follows the node is its egress or ingress, one that follows the pair on
  every new connection is the link, one that moves with the connection is a slow_path
  (ECMP or uplink congestion: switch-side next steps, not the cable); a suspect that does
  not confirm is listed as UNCONFIRMED with its figures, not a verdict. A port whose active
  rate is below the rate most of its peers on the ring report is port_downtrained, whether
  or not the ring is slow, and every link is judged against that expected rate, never a
  downtrained port's own. A port is also port_downtrained when its active rate is below
  the fastest link mode its port and the switch port both advertise (ethtool IF, read by
  each rank before it joins, within 2 s), so a rail that trained down alike is named, or
  when its NIC's PCIe link runs below its maximum width or speed (sysfs current_link_* vs
  max_link_*): the message then names the PCIe link as the cause. Every verdict says where to act: action drain (a node's egress or
  ingress, its port down or downtrained), ticket (a link or path: cable, switch port), or
  investigate. Each rank reads its data port's byte counters around every scan order
  (sysfs statistics/tx_bytes and rx_bytes of the netdev; an RDMA port's port_xmit_data and
  port_rcv_data, 4-byte words) beside the bytes the probe moved there: a slow verdict
  whose port carried more than 10% and more than 8 MB beyond the probe's own traffic
  (another job, a backup) says CONTENTION with those figures and is investigate, never
  drain (exit 1 as every verdict); counters that could not be read are said as unknown
  on the verdict, never taken as clean. The receiver of each scan link times its wait for
  every chunk, the first from the order's start: a silence of 3 s or more and 10 times the
  link's other gaps is a stall (a new connection through an MTU black hole while TCP's MTU
  probing is on loses its first big segments for seconds, then runs at its rate; a hiccup).
  Stalled links that all go through one rank name it (connection_stall, investigate, with
  the links, each silence and what the orders lost waiting: evidence.stalls, lost_s), one
  stalled link names the link, links with no common rank name none; beside a rank starved
  of CPU (not judged: cpu_bound) the stalls are not judged either; the next step is a
  full-size ping that may not be fragmented (`ping -M do -s` the interface's MTU less 28),
  which fails on that fault where a plain ping passes. Each rank reads its data netdev's
  carrier counters (sysfs carrier_changes, carrier_up_count, carrier_down_count) at the
  start and the end of the run: a port whose carrier changed is port_flapped (investigate,
  evidence.carrier_changes), said beside whatever else the run measured; what a flap on
  one of its ends explains moves under it (a stall: evidence.stalls; a slow link, path,
  egress or ingress: evidence.explains[] {kind, from_rank, to_rank, message}). Where a rank knows its switch neighbour (lldpd's table through lldpcli, or
  with --lldp-wait an LLDP frame heard on the data netdev before joining), a drain or
  ticket verdict names the switch port at that end, `switch port: node-b mlx5_3 (eth3) <->
  leaf-07 Eth1/12` (evidence.neighbor, ticket[].switch_ports); unknown is left out.
  However noisy the run, a node (of 4 or more) is also
  named when every sample of its outgoing (incoming) links runs 4x below the slowest link
  among the other nodes; the message then says so. A slow figure that an end's wait for a CPU could
  explain (schedstat: had it run instead of waiting, gbs / (1 - wait share) reaches the
  threshold) is not judged: the line says NOT JUDGED (CPU-bound host), who waited, and to
  scan again when the host is idle; it is neither a verdict nor a pass.
  With --local the scan runs only with --scan.
  Every data wait has the deadline --timeout; a rank whose wait passes it reports where it
  is to rank 0, which names the cause: hang_link (the receiver waits, its sender shows it
  sent), rank_lost (control connection closed or reset: the process died), rank_stalled
  (connection open, nothing sent for max(3, min(--timeout, 10)) s: SIGSTOP, a stuck
  process), rank_unreachable (as silent, and its host no longer acknowledges the control
  connection, TCP_INFO: powered off, crashed or cut off; check its power, BMC and link).
  If rank 0 dies, every other rank exits with coordinator_lost. A rank whose own process
  did not run (stopped, frozen, starved: a clock thread of its process woke a second or
  more late, half the silence deadline or more) just before it found the coordinator
  gone or silent says on its stderr RANK STALLED rank N (host), this rank: the
  coordinator gave up on it, it was not lost. SIGTERM (Slurm tearing the
  step down, scancel) or SIGINT on any rank stops every rank's data plane and rank 0 prints
  its whole report at once, data.error saying 'interrupted by SIGTERM on rank N (host) at
  size S bytes (i of the sweep), step K of round R'; no interrupted rank is blamed; exit 2
  unless a verdict came first; a second signal, or 15 s after the first, ends the process. If rank 0's own process
  stops or starves (its event loop comes round half the silence deadline or more later than
  it asked; schedstat says whether it ran, waited for a CPU or was not runnable), every rank
  gets a fresh silence deadline from then, and a failure seen within it is
  coordinator_stalled: rank 0's own, naming no other rank (they end with coordinator_lost).
  Heartbeats carry each rank's CPU wait: a rank that waited for a CPU half the time while a
  wait past the deadline involves it is rank_stalled (starved of CPU), not a hang_link. Over rdma, a work request
  that completes in error is a link_error naming the link, the status and its meaning (12
  retry exceeded: the peer is unreachable on the fabric; 13 RNR retry exceeded; 4 local
  protection; 10 remote access) and the vendor syndrome; a flush (status 5) is the knock-on
  of an earlier error and never the verdict. The run ends within --timeout plus a few
  seconds whatever fails, also while a queue pair still retries (NCCL_IB_TIMEOUT x
  NCCL_IB_RETRY_CNT can be minutes): then the verdict is hang_link.
  Verdict lines come first, each with the command to run next:
    SLOW LINK rank 3 (node-d, eth1) -> rank 4 (node-e, eth1): 40 MB/s, 30% of the median 0.12 GB/s
      next: on node-d and node-e: `fabprobe links` (port errors, retransmissions, PFC pauses); ...
    HANG rank 2 (node-c) waits for data from rank 1 (node-b) since step 2 of all-gather; rank 1
    sent it and moved on to step 2 of reduce-scatter: suspect the link node-b -> node-c

RAILS
  --rails all|N|LIST drives every rail of the node in one run (one process per node, as
  before): rail k is the k-th port in NCCL's order (--device in the order given, else the
  ports NCCL_IB_HCA allows, in device order; over tcp the k-th interface --ifname matches);
  a port that is down keeps its slot, and so does a --device entry a node lacks (state
  absent: that node's rail_missing). Every node declares its rail slots in its hello on
  the coordinator port and keeps that one connection for the whole run; rail k's ring is
  every node that drives rail k, all rails at once, each with --channels channels and its
  own coordinator (hosted by rank 0, also for a rail rank 0 lacks), every rail's control
  messages tagged with its rail on the node's one connection. Every node exits with the
  job's verdict over all rails. Rows sum algbw and busbw over the
  rails (time: the slowest rail); data.rails[] has each rail's rows and the nodes it ran
  on. Verdicts name their rail (rail 1: SLOW EGRESS rank 2 (node-c, eth2) ...), the same
  verdict on every rail of a node says all rails, and a node lacking a rail most nodes have
  (rank 0 included) is rail_missing, with the port's state from the links probe; that rail
  still runs on the nodes that have it (the verdict names them; a rail fewer than two
  nodes drive does not run, and says so). Every rank a rail's ring names is the node's own
  rank. With all, a rail fewer than half the nodes have is no rail of the job: it runs no
  ring and no verdict, and the report says NOT TESTED with the nodes that have it
  (data.rails[].not_tested). When one rail fails (a hang, a link error), the
  node's other rails stop a second later, so the run ends within --timeout and a grace;
  their data.rails[].error says which rail failed first.

OUTPUT
  --format table (the default): the verdict first, each with its next step, or on a
  healthy run one line (no slow link, no hang: ranks, sizes, avg busbw, the scan's median
  and slowest link); then nccl-tests' table, the per-link bandwidth and the scan as a
  sender x receiver matrix (up to 16 ranks; a list beyond). On a terminal narrower than
  nccl-tests' 118 columns the table holds the same figures in a compact form (type, redop
  and root once; one line per size from 80 columns, below that one line per placement,
  out and in); a pipe or a file keeps nccl-tests' columns whatever COLUMNS says. With the
  AllReduce sweep the rows print as each size completes, so the verdict or the healthy
  line closes the output instead. --format json: one fabprobe.ring envelope at the end
  (below). Other formats are refused, and so is --root: the ring moves bytes between live
  hosts.
  Rank 0 prints the report; other ranks print only errors (stderr). The exit status is
  the table's below (2 also when the coordinator refused the rank: another job's token, a
  different --world, sweep or scan). What was not
  measured leaves the status as it is and is said on the outcome line instead, never as a
  pass: NOT JUDGED (a CPU-bound host) and NOT TESTED (a rail too few nodes have); scripts
  that must know read data.scan.not_judged[] and data.rails[].not_tested.

JSON DATA (fabprobe.ring)
  world, transport, transport_note (null, or why --transport auto chose tcp though some rank
  offered rdma), launcher {source, coordinator, coordinator_source, token_source},
  options {sizes[], iters, warmup, check, channels, timeout_s, join_timeout_s, slots,
             slot_bytes},
  ranks[]    {rank, host, address, device, transport, pid, capabilities[], neighbor,
             port_max}: neighbor (absent when unknown) {system_name, chassis_id, port_id,
             port_description, source: lldpd|lldp}: the switch port the data port is
             cabled to, from lldpd's table or an LLDP frame heard with --lldp-wait (with
             --rails: the first rail's, like device); port_max (absent when unknown)
             {rate_mbps, rate_mode (the fastest link mode both ends advertise, ethtool),
             pcie {speed_mts, width, max_speed_mts, max_width} (the NIC's PCIe link now and
             at most, sysfs)}
  results[]  {size_bytes, count, type, redop, root, time_us, algbw_gbs, busbw_gbs, wrong,
              in_place {time_us, algbw_gbs, busbw_gbs, wrong}}: the top-level time..wrong
             are the out-of-place half (input and output buffers distinct), in_place the
             in-place half (the output is the input buffer), each over the same -w/-n
             iterations, as nccl-tests' two column groups; in_place null if a rank did not
             report it (GB/s = 10^9 bytes/s; busbw = algbw x 2(n-1)/n, as nccl-tests; wrong
             = mismatching elements summed over ranks, null with -c 0; exit 1 if wrong > 0
             in either half)
  avg_busbw_gbs (mean busbw over both halves of every row, as nccl-tests' Avg bus bandwidth)
  links[]    {channel_count, from_rank, to_rank, from_host, to_host, from_device, to_device,
              size_bytes, bytes, seconds, gbs}: each ring hop measured at its receiver
  bootstrap_us, events[] {kind: joined|rejected|replaced|more_rejected, peer, ...}: at
  most 32 rejected listed, then more_rejected {count}; peer text escaped, error (null, or
  why the run ended early)
  verdicts[] {kind: slow_link|slow_egress|slow_ingress|slow_path|port_downtrained|hang_link|
             rank_lost|rank_stalled|rank_unreachable|coordinator_lost|coordinator_stalled|
             link_error|rail_missing|connection_stall|port_flapped,
             action: drain|ticket|investigate (derived from kind; investigate for not_judged,
             unconfirmed and contention), from_rank, to_rank, from_host, to_host
             (null where not applicable: a slow egress names only its sender), evidence {gbs,
             median_gbs, ratio, samples, line_rate_gbs, links_gbs {\"from->to\": gbs}, noise,
             threshold_gbs, median_fraction and line_rate_fraction (the thresholds' fractions
             it was judged by), partners and incoming_gbs or outgoing_gbs (a slow egress or
             ingress: how many links it has that way, the median of the other way),
             others_slowest_gbs and fastest_sample_gbs (a slow egress or ingress told by
             separation: the other nodes' slowest link, the node's own fastest sample),
             others_median_gbs (a slow egress or ingress every link of which is 10x or more
             below the median link among the other nodes, however noisy the run),
             ambiguous (true: too few scan orders to tell the link from its ends),
             not_run_on_ranks (a rail_missing whose rail needs every node: the ranks that
             have the rail, where it did not run either),
             cpu_wait_rank_R (share of the samples' wall time rank R's most-waiting thread
             was runnable but waited for a CPU, from schedstat; not with --local); phase,
             step, channel, waited_ms, bytes_received, conclusive, sender_state,
             sender_phase, sender_step, sender_bytes_sent (a hang: where the receiver
             waits, what it got, and where its sender stood); no_progress_ms, progress (a
             rank whose progress counter stood still); own_late_ms (a rank whose own
             process did not run); closed_ms_ago, silent_ms,
             unacked_ms, pid, link_faults_after[] {from_rank, to_rank, seen_by_rank, status,
             status_name} (a rank_lost: completion errors its peers saw on their links to
             it after its process was gone; never a link_error); cpu_wait_ms, cpu_window_ms (a starved rank); lag_ms, asked_ms,
             window_ms, on_cpu_ms, cpu_wait_ms, not_runnable_ms, silence_ms (coordinator_stalled);
             status, status_name, vendor_err, seen_by_rank, device, operation,
             confirm_gbs (the new connections' figures), confirmed, first_connection_gbs;
             active_rate_gbs, expected_rate_gbs, peers_at_expected, peers_with_rate, netdev,
             advertised_rate_gbs, advertised_mode, pcie_link, pcie_max, cause[] (port_rate,
             pcie: what made a port_downtrained); reports[];
             stalls[] {from_rank, to_rank, order, silence_s}, stall_s, lost_s,
             orders_stalled, scan_orders_s (a connection_stall: its silences, the longest,
             the time the orders lost to them, how many orders, and the orders' time);
             netdev, carrier_changes, carrier_up, carrier_down (a port_flapped: the carrier
             counters' moves), with what the flap explains: stalls[], explains[] {kind,
             from_rank, to_rank, message};
             neighbor {from, to} (drain and ticket verdicts whose end's switch port is
             known: {rank, host, port (the rank's own: eth1, mlx5_3 (eth3)), system_name,
             chassis_id, port_id, port_description, source, text: \"node-b mlx5_3 (eth3) <->
             leaf-07 Eth1/12\"}; an end not known is absent);
             port_counters {\"rank R dev port P counter\": delta} (the moved counters of the
             NICs of the ranks it names); port_traffic[] (slow_egress: the sender's tx,
             slow_ingress: the receiver's rx, slow_link and slow_path: both) {rank,
             direction: tx|rx, counter (the sysfs file or RDMA counter read), probe_mb (the
             probe's own bytes there over the scan's orders, 10^6 bytes), port_mb, other_mb
             (what the port's counter moved, and the part that was not the probe's), or
             unknown (why: absent, unreadable, reset, saturated, not reported) in place of
             port_mb and other_mb}; contention (true: other_mb is more than 10% of probe_mb
             and more than 8 MB), as applicable},
             message (the human line), next (the command to run next), rail (--rails only:
             {index, from, to}: the rail and the port at each end, as in ranks[].rails[];
             absent for a verdict on all rails, whose evidence has rails[], rails_gbs and,
             where the rails' switch ports are known, rails_neighbor {rail: neighbor} in place
             of neighbor)};
             empty on a healthy run
  not_judged[] (--no-scan) the sweep's would-be verdicts that a rank starved of CPU could
             explain (evidence.not_judged: cpu_bound), as verdicts[]: unknown, neither a
             fault nor a pass; absent when none (with a scan they are scan.not_judged)
  drain[]    {host, ranks[], kinds[], reason, switch_ports[]}: the nodes to take out of
             service, one per host, from the verdicts whose action is drain (reason: the
             first one's message)
  ticket[]   {kind, from_rank, to_rank, from_host, to_host, rail, message, switch_ports[]}:
             the links and paths to file a ticket for (the cable, the switch port), one per
             verdict whose action is ticket; neither list holds an investigate verdict;
             switch_ports[] (absent when none is known): the text of each end's
             evidence.neighbor, from then to (every rail's, for a verdict on all rails). fabprobe sweep merges these lists over many
             ring reports
  scan       {bytes, reps, budget_s, seconds, orders[] {index, shift, name, recheck, seconds},
             line_rate_gbs {rank: gbs}, median_gbs, links[] {from_rank, to_rank, from_host,
             to_host, gbs, samples, line_rate_gbs, slow}, fabric_slow (null, or {median_gbs,
             line_rate_gbs, ratio, message}: the whole fabric below its line rate),
             not_judged[] (would-be slow_link/slow_egress/slow_ingress verdicts that an end's
             wait for a CPU could explain: evidence not_judged \"cpu_bound\", gbs_if_idle =
             gbs / (1 - wait), null at a wait of 0.75 or more; unknown: not in verdicts[], and
             the exit status is that of the verdicts),
             unconfirmed[] (suspects new connections did not confirm: evidence unconfirmed
             true, action investigate; not in verdicts[]), confirm_s (seconds of the orders
             after the plan), cleared_by_recheck[] (first-pass verdicts the re-measurement did
             not keep), typical_order_s (what a plan order takes less its slowest link's
             excess, the median over the plan: what sized the plan; null before any order),
             links_total (the world's directed links, n(n-1)), unmeasured[] {from_rank,
             to_rank, from_host, to_host, reason: budget (--scan-time ended the plan before
             its order) | no_samples (its order ran, its receiver reported no sample)} (no
             verdict on them, either way), confirm_cut_orders (confirmation orders the budget
             left out: the suspects they would have measured stay unconfirmed)}, or null; scan.links[].line_rate_gbs is the expected rate the link is
             judged against, scan.line_rate_gbs each rank's active rate
  port_counters[] {rank, host, device, port, netdev, counter, delta}: RDMA port counters
             (errors, retransmissions, pauses, CNPs) that moved on each rank's data NIC
             (the RDMA ports whose netdev is its data interface, where RDMA devices exist),
             sampled by that rank at its start and at its end or its stuck report; at most
             64 per rank (the biggest changes); delta is a lower bound when a counter
             saturated or was cleared; a rank lost before reporting contributes none
  With --rails only: ranks[].rails[] {rail, device, port, netdev, state, usable, label,
             address}: every rail slot of the node (label and address: what its rail's ring
             ran on); links[].rail; rails[] {rail, nodes (the ranks of the nodes its ring
             ran on, in ring order; for a rail not tested, the nodes that have it),
             transport, results[] (that rail's own rows), avg_busbw_gbs, scan (numbered by
             the nodes' ranks, as everything else), error, not_tested (all only: why a rail
             fewer than half the nodes have ran no ring; absent otherwise)}: each rail's ring
             (results[] above sum them); a rail_missing verdict's evidence has ran_on_ranks
             (the nodes that rail ran on without it; empty: it did not run), and its state is
             absent for a --device entry the node has no port for";

/// `512`, `64K`, `1M`, `2G` (powers of 1024, as nccl-tests' parseInt).
/// Seconds: a finite number from 0 to a day (`inf`, `nan` and negatives are refused: a
/// budget of infinity would never end the scan).
pub(crate) fn parse_seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{}` is not a number of seconds", s.escape_default()))?;
    if !v.is_finite() || !(0.0..=86_400.0).contains(&v) {
        return Err(format!("{v} is not a time from 0 to 86400 seconds"));
    }
    Ok(v)
}

/// `--lldp-wait`: at most 120 s (a switch sends LLDP every 30 s by default; the ranks wait
/// this long before joining).
pub(crate) fn parse_lldp_wait(s: &str) -> Result<f64, String> {
    let v = parse_seconds(s)?;
    if v > 120.0 {
        return Err(format!(
            "{v} s: --lldp-wait is at most 120 s (switches send LLDP every 30 s by default)"
        ));
    }
    Ok(v)
}

pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m' | 'M') => (&t[..t.len() - 1], 1 << 20),
        Some('g' | 'G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("{s:?} is not a size (a number with an optional K, M or G suffix)"))
}

/// The sweep: from min to max multiplying by factor; each size rounded down to whole floats.
pub(crate) fn sizes(min: u64, max: u64, factor: u64) -> Result<Vec<u64>, String> {
    if min > max {
        return Err(format!("-b {min} is larger than -e {max}"));
    }
    if factor < 2 && min != max {
        return Err("-f must be at least 2".into());
    }
    let mut out = Vec::new();
    let mut s = min.max(4);
    while s <= max {
        out.push(s / 4 * 4);
        match s.checked_mul(factor.max(2)) {
            Some(n) => s = n,
            None => break,
        }
    }
    Ok(out)
}

fn options(a: &RingArgs) -> anyhow::Result<Options> {
    let sizes = sizes(a.min_bytes, a.max_bytes, a.factor).map_err(UsageError)?;
    Ok(Options {
        sizes,
        iters: a.iters,
        warmup: a.warmup,
        check: a.check,
        channels: a.channels,
        timeout_secs: a.timeout,
        join_timeout_secs: a.join_timeout.unwrap_or(Options::default_join_timeout(a.timeout)),
        slots: 4,
        slot_bytes: 1 << 20,
        // `--local` ranks share one CPU and loopback: their link figures measure the
        // scheduler, not links, so the scan runs there only when asked for (`--scan`).
        scan: (!a.no_scan && (a.local.is_none() || a.scan)).then(|| ScanOptions {
            budget_s: a.scan_time.max(0.0),
            bytes: a.scan_bytes.max(8),
            reps: a.scan_reps,
        }),
        sweep: !a.scan,
    })
}

/// Rows as each size completes (nccl-tests prints them so): rank 0's coordinator hands
/// each finished size here; the header goes out with the first row, and the report at the
/// end prints only what is left.
struct RowPrinter {
    launcher: LauncherInfo,
    options: Options,
    /// Why rank 0 runs tcp under `--transport auto`, for the header.
    rank0_note: Option<String>,
    /// The progress line on stderr (same terminal): rows are printed with it cleared.
    progress: Option<indicatif::ProgressBar>,
    /// Sizes printed so far, and whether stdout failed (a closed pipe: stop printing).
    shown: Mutex<(Vec<u64>, bool)>,
    /// nccl-tests' columns, or the compact form on a narrow terminal.
    layout: render::ring::Layout,
}

impl RowPrinter {
    /// Table format with a sweep only: JSON is one document at the end.
    fn start(
        fmt: Format,
        id: &Identity,
        opts: &Options,
        progress: Option<indicatif::ProgressBar>,
        rank0_note: Option<String>,
    ) -> Option<Arc<RowPrinter>> {
        use std::io::IsTerminal;
        streams_rows(fmt, opts.sweep, std::io::stdout().is_terminal()).then(|| {
            Arc::new(RowPrinter {
                launcher: LauncherInfo::of(id),
                options: opts.clone(),
                rank0_note,
                progress,
                shown: Mutex::new((Vec::new(), false)),
                layout: layout(),
            })
        })
    }

    fn sink(this: &Arc<RowPrinter>) -> run::ShowRow {
        let this = this.clone();
        Arc::new(move |ranks: &[RankInfo], row: &ResultRow| this.show(ranks, row))
    }

    fn show(&self, ranks: &[RankInfo], row: &ResultRow) {
        let Ok(mut shown) = self.shown.lock() else { return };
        if shown.1 {
            return;
        }
        let mut text = String::new();
        if shown.0.is_empty() {
            // What ran: what every rank offered, else tcp (`auto` with a rank without rdma).
            let first = ranks.first().map(|r| r.transport.as_str()).unwrap_or("tcp");
            let transport = if ranks.iter().all(|r| r.transport == first) {
                first
            } else {
                "tcp"
            };
            let note = self
                .rank0_note
                .clone()
                .or_else(|| crate::ring::report::transport_note(ranks, transport));
            text.push_str(&render::ring::head(&render::ring::Head {
                world: ranks.len() as u32,
                transport,
                launcher: &self.launcher,
                options: &self.options,
                ranks,
                note: note.as_deref(),
                first_row: Some(row),
                layout: self.layout,
            }));
        }
        text.push_str(&render::ring::row_line_in(row, self.layout));
        let printed = match &self.progress {
            Some(bar) => bar.suspend(|| emit(&text)),
            None => emit(&text),
        };
        match printed {
            Ok(()) => shown.0.push(row.size_bytes),
            Err(_) => shown.1 = true,
        }
    }

    /// The sizes already on stdout.
    fn shown(&self) -> Vec<u64> {
        self.shown.lock().map(|s| s.0.clone()).unwrap_or_default()
    }
}

/// Rows go out as each size completes only to a terminal, where someone watches the run;
/// a pipe or a file gets the whole report at the end, verdict first like every other
/// command (what `head -1`, a log or a ticket should show), and a watcher of a redirected
/// run has the progress line on stderr.
fn streams_rows(fmt: Format, sweep: bool, stdout_tty: bool) -> bool {
    fmt == Format::Table && sweep && stdout_tty
}

/// nccl-tests' columns unless a person reads a terminal narrower than them: a pipe or a
/// file keeps them whatever `COLUMNS` says (scripts parse them).
fn layout() -> render::ring::Layout {
    use std::io::IsTerminal;
    render::ring::Layout::pick(render::text::width(), std::io::stdout().is_terminal())
}

fn print_report(
    g: &GlobalArgs,
    fmt: Format,
    r: &RingReport,
    rows: Option<&RowPrinter>,
) -> anyhow::Result<()> {
    for e in &r.events {
        use crate::ring::coordinator::Event;
        if matches!(
            e,
            Event::Rejected { .. } | Event::Replaced { .. } | Event::MoreRejected { .. }
        ) || g.verbose > 0
        {
            // Parts of the line came from strangers on the port: never print their raw bytes.
            say!("fabprobe: {}", crate::text::printable(&e.line(), 1000));
        }
    }
    let f = crate::finding::ToFindings::findings(r);
    // The whole report in one buffer, written by one writer (super::delivery).
    let text = match fmt {
        Format::Json => {
            let host = crate::host::Host::live();
            Envelope::new("ring", HostInfo::of(&host), &RingData::of(r), &f).to_json()
        }
        _ => match rows.map(RowPrinter::shown).filter(|s| !s.is_empty()) {
            Some(shown) => render::ring::table_after_rows_in(r, &shown, layout()),
            None => render::ring::table_in(r, layout()),
        },
    };
    super::delivery::deliver(&text, REPORT_OUT.get().map(|p| p.as_path()))?;
    if let Some(out) = HTML_OUT.get() {
        let host = crate::host::Host::live();
        let data = RingData::of(r);
        super::report::write_envelope(
            out,
            "ring",
            &Envelope::new("ring", HostInfo::of(&host), &data, &f),
        )?;
    }
    if let Some(e) = &r.error {
        say!("fabprobe: ring: {e}");
    }
    Ok(())
}

/// `data` of `fabprobe.ring`: the report, and where to act on its verdicts, derived from
/// them and never read back: the nodes to drain and the links to ticket, apart.
#[derive(serde::Serialize)]
struct RingData<'a> {
    #[serde(flatten)]
    report: &'a RingReport,
    drain: Vec<DrainItem>,
    ticket: Vec<TicketItem>,
}

impl<'a> RingData<'a> {
    fn of(report: &'a RingReport) -> Self {
        let (drain, ticket) = action_lists(&report.verdicts);
        RingData {
            report,
            drain,
            ticket,
        }
    }
}

/// `--html`: set once by `run`, read where rank 0 prints its report (every run mode ends
/// there), so the flag need not travel through each mode's signature.
static HTML_OUT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// `--output`: set once by `run`, like [`HTML_OUT`].
static REPORT_OUT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

pub(crate) fn run(g: &GlobalArgs, a: RingArgs) -> anyhow::Result<Outcome> {
    let fmt = g.format;
    super::delivery::catch_interrupts(g);
    if g.root.is_some() || a.root.is_some() {
        return Err(UsageError(
            "`fabprobe ring` moves bytes between live hosts; --root cannot be used with it".into(),
        )
        .into());
    }
    let opts = options(&a)?;
    if let Some(out) = &a.html {
        // Refused now, not after the run: a page that cannot be written loses nothing yet.
        super::report::check_writable(out)?;
        let _ = HTML_OUT.set(out.clone());
    }
    if let Some(out) = &a.output {
        super::report::check_writable(out)?;
        let _ = REPORT_OUT.set(out.clone());
    }
    let ranks = match a.local {
        Some(_) if a.transport == TransportArg::Rdma => {
            return Err(UsageError(
                "--local runs its ranks over tcp; --transport rdma needs one rank per host (--rank/--world or a launcher)"
                    .into(),
            )
            .into());
        }
        Some(count) => Ranks::Local {
            count,
            token: a.token.clone(),
        },
        None => Ranks::Job {
            id: identity(g, &a)?,
            env: Box::new(job_env(g)?),
        },
    };
    let launch = Launch {
        opts,
        net: Net {
            transport: a.transport.into(),
            ifname: a.ifname.clone(),
            device: a.device.clone(),
            gid_index: a.gid_index,
            lldp_wait_s: a.lldp_wait,
        },
        rails: a.rails.clone().unwrap_or(RailSel::One),
        ranks,
    };
    let watch = Watcher {
        g,
        fmt,
        display: Mutex::new(None),
        rows: Mutex::new(None),
    };
    let r = launch::run(launch, &watch).map_err(|e| match e {
        LaunchError::Usage(m) => UsageError(m).into(),
        e => anyhow::Error::from(e),
    })?;
    watch.ended();
    let rows = watch.rows.lock().ok().and_then(|mut r| r.take());
    outcome(g, fmt, r, rows.as_deref())
}

/// Who this rank is: the flags, else the launcher's environment (said with -v).
fn identity(g: &GlobalArgs, a: &RingArgs) -> anyhow::Result<Identity> {
    let flags = Flags {
        rank: a.rank,
        world: a.world,
        coordinator: a.coordinator.clone(),
        token: a.token.clone(),
    };
    let id = launcher::resolve(&flags, &launcher::process_env()).map_err(|e| UsageError(e.to_string()))?;
    g.log(
        1,
        format!(
            "rank {} of {} from {}; coordinator {} ({}); token from {}",
            id.rank,
            id.world,
            id.source.name(),
            id.coordinator,
            id.coordinator_source,
            id.token_source
        ),
    );
    Ok(id)
}

/// NCCL's variables as the job has them (environment, --env-from/--env-file, conf files),
/// on the live host with the job's environment: the data interface, the RDMA port choice and
/// the QP attributes all read this one model, never fabprobe's own shell alone.
fn job_env(g: &GlobalArgs) -> anyhow::Result<JobEnv> {
    let host = super::with_job_env(g, Host::live())?;
    let nccl = super::nccl_settings(g, &host);
    Ok(JobEnv { host, nccl })
}

impl From<TransportArg> for Transport {
    fn from(t: TransportArg) -> Transport {
        match t {
            TransportArg::Tcp => Transport::Tcp,
            TransportArg::Rdma => Transport::Rdma,
            TransportArg::Auto => Transport::Auto,
        }
    }
}

/// The CLI's side of a run: -v lines on stderr, the progress line (a terminal only) and
/// rank 0's rows as each size completes (see [`RowPrinter`]).
struct Watcher<'a> {
    g: &'a GlobalArgs,
    fmt: Format,
    display: Mutex<Option<progress::Display>>,
    rows: Mutex<Option<Arc<RowPrinter>>>,
}

impl Watch for Watcher<'_> {
    fn log(&self, level: u8, line: &str) {
        self.g.log(level, line);
    }

    fn live(&self, opts: &Options) -> Option<Arc<LiveStatus>> {
        let (live, display) = progress::Display::start(self.fmt == Format::Table, opts);
        if let Ok(mut d) = self.display.lock() {
            *d = display;
        }
        live
    }

    fn rows(&self, id: &Identity, opts: &Options, note: Option<String>) -> Option<run::ShowRow> {
        let bar = self
            .display
            .lock()
            .ok()
            .and_then(|d| d.as_ref().map(progress::Display::bar));
        let rows = RowPrinter::start(self.fmt, id, opts, bar, note)?;
        if let Ok(mut r) = self.rows.lock() {
            *r = Some(rows.clone());
        }
        Some(RowPrinter::sink(&rows))
    }

    fn ended(&self) {
        // Dropping the display stops and clears the progress line.
        if let Ok(mut d) = self.display.lock() {
            d.take();
        }
    }
}

fn outcome(
    g: &GlobalArgs,
    fmt: Format,
    r: Result<RankOutcome, run::RunError>,
    rows: Option<&RowPrinter>,
) -> anyhow::Result<Outcome> {
    match r {
        Ok(RankOutcome {
            report: Some(rep), ..
        }) => {
            print_report(g, fmt, &rep, rows)?;
            // Interrupted before any fault was found: not a pass, not a fault (exit 2).
            if launch::interrupted() && rep.verdicts.is_empty() && rep.wrong_total() == 0 {
                return Err(anyhow::anyhow!(
                    rep.error.clone().unwrap_or_else(|| "interrupted".into())
                ));
            }
            Ok(if rep.failed() {
                Outcome::Fault
            } else {
                Outcome::Pass
            })
        }
        Ok(RankOutcome {
            report: None,
            failed,
            why,
        }) => {
            // Rank 0 prints the report; this rank says why it exits 1.
            if failed {
                say!(
                    "fabprobe: ring: the run failed: {}",
                    why.as_deref()
                        .unwrap_or("rank 0 says so (its report has the cause)")
                );
            }
            Ok(if failed { Outcome::Fault } else { Outcome::Pass })
        }
        Err(e) if e.kind == Failure::CannotRun || launch::interrupted() => Err(anyhow::anyhow!(e.message)),
        Err(e) => {
            say!("fabprobe: ring: {}", e.message);
            Ok(Outcome::Fault)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_stream_to_a_terminal_only() {
        assert!(streams_rows(Format::Table, true, true));
        // A pipe or a file: the report at the end, verdict first.
        assert!(!streams_rows(Format::Table, true, false));
        assert!(!streams_rows(Format::Json, true, true));
        assert!(!streams_rows(Format::Table, false, true));
    }

    #[test]
    fn sizes_parse_like_nccl_tests() {
        for (s, want) in [
            ("8", Ok(8)),
            ("1K", Ok(1024)),
            ("32M", Ok(32 << 20)),
            ("2g", Ok(2 << 30)),
            ("x", Err(())),
            ("1T", Err(())),
        ] {
            assert_eq!(parse_size(s).map_err(|_| ()), want, "{s}");
        }
        assert_eq!(sizes(1024, 8192, 2).unwrap(), vec![1024, 2048, 4096, 8192]);
        assert_eq!(
            sizes(1 << 20, 64 << 20, 4).unwrap(),
            vec![1 << 20, 4 << 20, 16 << 20, 64 << 20]
        );
        assert_eq!(sizes(6, 6, 2).unwrap(), vec![4]);
        assert!(sizes(10, 5, 2).is_err());
    }

    /// The RDMA port choice and QP settings read `--env-file` like the data interface does
    /// (they once read only fabprobe's own shell).
    #[cfg(feature = "rdma")]
    #[test]
    fn rdma_settings_come_from_the_job_env_file() {
        let dir = std::env::temp_dir().join(format!("fabprobe-ring-env-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("job.env");
        std::fs::write(&f, "NCCL_IB_HCA==mlx5_7:1\nNCCL_IB_TC=106\n").unwrap();
        let g = GlobalArgs {
            root: None,
            format: Format::Table,
            verbose: 0,
            env_from: None,
            env_file: Some(f),
            nccl_version: None,
        };
        let nccl = job_env(&g).unwrap().nccl;
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(nccl.value("NCCL_IB_HCA"), Some("=mlx5_7:1"));
        assert_eq!(nccl.value("NCCL_IB_TC"), Some("106"));
    }

    #[test]
    fn seconds_are_finite_and_bounded() {
        assert_eq!(parse_seconds("2.5"), Ok(2.5));
        assert_eq!(parse_seconds("0"), Ok(0.0));
        for bad in ["inf", "-inf", "NaN", "-1", "1e300", "x", "\x1b[31m"] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
        }
    }
}
