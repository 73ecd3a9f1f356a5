//! Types shared by the ring's layers: who the ranks are, what a link measurement is,
//! what a stuck rank reports, and the verdicts the coordinator hands to the user.
//! The JSON field names here are a contract (`data.ranks[]`, `data.links[]`,
//! `data.verdicts[]` of `fabprobe.ring`).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::text::printable;

pub type Rank = u32;

/// One rank as the bootstrap table lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankInfo {
    pub rank: Rank,
    pub host: String,
    /// Data-plane address this rank listens on (`198.18.1.2:40123`).
    pub address: String,
    /// Interface or RDMA device the data plane uses (`eth1`, `mlx5_0`).
    pub device: Option<String>,
    /// `tcp`, `rdma` or `inproc`.
    pub transport: String,
    pub pid: Option<u32>,
    /// The transports this rank can run (its hello's `capabilities`, e.g. `["rdma", "tcp"]`),
    /// so every rank reads from the table what the others offer (`--transport auto` picks
    /// the best one all of them have). Empty from a rank that predates the field.
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// With `--rails`: every rail slot of this node in NCCL's order (those it drives and
    /// those it cannot: a port down), so rank 0 can name a missing rail. Empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rails: Vec<RailPort>,
    /// With `--rails`, on a rail's ring of some of the nodes (renumbered 0..m): the job's
    /// rank of this node, which every message names (set by the coordinator, not the
    /// hello). None: the ring's rank is the node's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<Rank>,
    /// The switch port at the other end of this rank's data port, where LLDP says it
    /// (lldpd's table, or frames heard before joining); None: unknown, nothing invented.
    /// From the hello: an entry that is not bounded, printable text reads as unknown.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "Neighbor::lenient"
    )]
    pub neighbor: Option<Neighbor>,
    /// What this rank's data port could run at, where the kernel says it (the link modes
    /// both ends advertise, the NIC's PCIe link): a port below it trained down, however its
    /// peers run. From the hello: out-of-range figures read as unknown.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "PortMax::lenient"
    )]
    pub port_max: Option<PortMax>,
}

/// The most a rank's data port could run at (`data.ranks[].port_max`). Integers, so that a
/// rank's table entry compares exactly.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortMax {
    /// The fastest link mode the port and its link partner both advertise, Mb/s (ethtool);
    /// None: not reported (no autonegotiation, InfiniBand, a veth).
    pub rate_mbps: Option<u64>,
    /// That mode as ethtool names it (`400000baseCR4/Full`).
    pub rate_mode: Option<String>,
    /// The NIC's PCIe link, where sysfs gives all four figures.
    pub pcie: Option<PcieLink>,
}

/// A PCIe link now and at most (`current_link_speed`/`_width`, `max_link_speed`/`_width`),
/// speeds in MT/s (2500 .. 64000).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PcieLink {
    pub speed_mts: u32,
    pub width: u32,
    pub max_speed_mts: u32,
    pub max_width: u32,
}

impl PcieLink {
    /// Below its maximum width or speed: trained down (a NIC's link does not power-save).
    pub fn degraded(&self) -> bool {
        self.width < self.max_width || self.speed_mts < self.max_speed_mts
    }

    /// `16 GT/s x8`, `2.5 GT/s x1`.
    pub fn describe(mts: u32, width: u32) -> String {
        let g = match mts % 1000 {
            0 => format!("{}", mts / 1000),
            r => format!("{}.{}", mts / 1000, r / 100),
        };
        format!("{g} GT/s x{width}")
    }

    pub fn now(&self) -> String {
        PcieLink::describe(self.speed_mts, self.width)
    }

    pub fn max(&self) -> String {
        PcieLink::describe(self.max_speed_mts, self.max_width)
    }
}

impl PortMax {
    /// The rate in 10^9 bytes/s, as the ring's rates are.
    pub fn rate_gbs(&self) -> Option<f64> {
        self.rate_mbps.map(|m| m as f64 / 8000.0)
    }

    /// Figures a kernel can give: a rate up to 10 Tb/s, PCIe up to 128 GT/s x32; a mode
    /// name of plain characters. Anything else from a hello is unknown.
    pub fn checked(mut self) -> Option<PortMax> {
        self.rate_mbps = self.rate_mbps.filter(|m| (1..=10_000_000).contains(m));
        self.rate_mode = self.rate_mode.filter(|m| {
            m.len() <= 40 && m.bytes().all(|b| b.is_ascii_alphanumeric() || b"/_-".contains(&b))
        });
        self.pcie = self.pcie.filter(|p| {
            let mts = |g: u32| (1000..=128_000).contains(&g);
            mts(p.speed_mts) && mts(p.max_speed_mts) && (1..=32).contains(&p.width) && (1..=32).contains(&p.max_width)
        });
        (self.rate_mbps.is_some() || self.pcie.is_some()).then_some(self)
    }

    /// `deserialize_with` for [`RankInfo::port_max`]: malformed or out of range is None.
    pub(crate) fn lenient<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<PortMax>, D::Error> {
        let v = Option::<serde_json::Value>::deserialize(d)?;
        Ok(v.and_then(|v| serde_json::from_value::<PortMax>(v).ok())
            .and_then(PortMax::checked))
    }
}

/// The switch and port a rank's data port is cabled to, as LLDP names them
/// (`data.ranks[].neighbor`, a verdict's `evidence.neighbor`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Neighbor {
    /// LLDP System Name (`leaf-07`).
    pub system_name: Option<String>,
    /// LLDP Chassis ID (a MAC, most often).
    pub chassis_id: Option<String>,
    /// LLDP Port ID (`Ethernet1/12`, or a MAC on some switches).
    pub port_id: Option<String>,
    /// LLDP Port Description (`Eth1/12`, or what the switch's admin wrote).
    pub port_description: Option<String>,
    /// Where it was learned: `lldpd` (lldpcli's table) or `lldp` (a frame fabprobe heard).
    pub source: String,
}

impl Neighbor {
    /// Longest field kept from a peer's hello: LLDP's own strings stop at 255 bytes.
    pub(crate) const MAX_CHARS: usize = 255;

    /// The neighbour if every field is bounded, printable text and it names a switch and a
    /// port; None otherwise (a hello's garbage is unknown, not a switch port).
    pub fn checked(self) -> Option<Neighbor> {
        let fields = [
            &self.system_name,
            &self.chassis_id,
            &self.port_id,
            &self.port_description,
        ];
        let ok = |s: &str| s.len() <= Self::MAX_CHARS && printable(s, Self::MAX_CHARS) == s;
        let all_ok =
            fields.iter().all(|f| f.as_deref().is_none_or(ok)) && ok(&self.source) && self.source.len() <= 16;
        (all_ok && self.switch().is_some() && self.port().is_some()).then_some(self)
    }

    /// `deserialize_with` for [`RankInfo::neighbor`]: a malformed or unchecked entry is
    /// None, never a refused hello (the neighbour is a hint, the rank still runs).
    pub(crate) fn lenient<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Neighbor>, D::Error> {
        let v = Option::<serde_json::Value>::deserialize(d)?;
        Ok(v.and_then(|v| serde_json::from_value::<Neighbor>(v).ok())
            .and_then(Neighbor::checked))
    }

    /// The switch's name: its System Name, else its Chassis ID.
    pub fn switch(&self) -> Option<&str> {
        nonempty(&self.system_name).or(nonempty(&self.chassis_id))
    }

    /// The switch's port: its Port ID, unless that is a MAC address and a description
    /// exists (a MAC names no port a person can find on the switch).
    pub fn port(&self) -> Option<&str> {
        let id = nonempty(&self.port_id);
        let descr = nonempty(&self.port_description);
        match id {
            Some(i) if looks_like_mac(i) => descr.or(Some(i)),
            Some(i) => Some(i),
            None => descr,
        }
    }

    /// `leaf-07 Eth1/12`.
    pub fn describe(&self) -> String {
        format!("{} {}", self.switch().unwrap_or("?"), self.port().unwrap_or("?"))
    }
}

/// The trimmed text of a field that says something.
fn nonempty(s: &Option<String>) -> Option<&str> {
    s.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

/// `50:6b:4b:11:22:33` (or with dashes): six hex pairs.
fn looks_like_mac(s: &str) -> bool {
    let parts: Vec<&str> = s.split([':', '-']).collect();
    parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// One rail slot of a node (`data.ranks[].rails[]`): rail k is the k-th port in NCCL's order
/// (`NCCL_IB_HCA` rules or `--device`; over tcp the k-th interface `--ifname` matches).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RailPort {
    pub rail: u32,
    /// RDMA device (`mlx5_1`), or over tcp the interface (`eth2`).
    pub device: String,
    pub port: Option<u32>,
    pub netdev: Option<String>,
    /// `ACTIVE`, `DOWN`... (the RDMA port's state), or over tcp `up`/`down` (IFF_RUNNING).
    pub state: Option<String>,
    /// The node drives this rail (an ACTIVE port, a running interface).
    pub usable: bool,
    /// What the rail's ring ran on (`eth2`, `rxe1:1 gid 1 (eth2)`) and its data address;
    /// filled in the job's report, null for a rail the node does not drive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

/// The most rails a node drives (NCCL's `MAXCHANNELS`/NIC limits are far above real nodes).
pub const MAX_RAILS: u32 = 32;

/// A hello's rail list (the table repeats it for every rank): at most [`MAX_RAILS`] rails,
/// each text field plain text of at most 255 bytes. Pure.
pub fn check_rails(rails: &[RailPort]) -> Result<(), String> {
    let max = MAX_RAILS as usize;
    if rails.len() > max {
        return Err(format!("{} entries, at most {max} allowed", rails.len()));
    }
    for p in rails {
        let fields = [
            Some(p.device.as_str()),
            p.netdev.as_deref(),
            p.state.as_deref(),
            p.label.as_deref(),
            p.address.as_deref(),
        ];
        if fields
            .into_iter()
            .flatten()
            .any(|v| v.len() > 255 || printable(v, 255) != v)
        {
            return Err(format!(
                "rail {}: a field is not plain text of at most 255 bytes",
                p.rail
            ));
        }
    }
    Ok(())
}

impl RailPort {
    /// `rail 1 (mlx5_1:1, eth2)` / `rail 1 (eth2)`, for messages.
    pub fn describe(&self) -> String {
        let mut s = format!("rail {} ({}", self.rail, self.device);
        if let Some(p) = self.port {
            s += &format!(":{p}");
        }
        if let Some(n) = self.netdev.as_deref().filter(|n| *n != self.device) {
            s += &format!(", {n}");
        }
        s + ")"
    }
}

/// The rail a verdict concerns (`data.verdicts[].rail`): its index and the port at each end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerdictRail {
    pub index: u32,
    pub from: Option<RailPort>,
    pub to: Option<RailPort>,
}

impl RankInfo {
    /// The rank people are told: the node's rank in the job ([`RankInfo::node`]).
    pub fn shown(&self) -> Rank {
        self.node.unwrap_or(self.rank)
    }

    /// The net device behind [`RankInfo::device`], for commands a person runs.
    pub fn netdev(&self) -> Option<&str> {
        self.device.as_deref().and_then(netdev_of)
    }
}

/// Ring rank `r` as people are told it: the node's rank in the job where the table maps it
/// (a rail's ring of some of the nodes), else `r` itself. Pure.
pub(crate) fn shown(ranks: &[RankInfo], r: Rank) -> Rank {
    ranks.iter().find(|i| i.rank == r).map_or(r, RankInfo::shown)
}

/// The net device a data-plane label names: the label itself over TCP (`eth1`), the one in
/// parentheses of an RDMA label (`rxe0:1 gid 1 (eth0)` -> `eth0`), None when there is none
/// (`mlx5_0:1 gid 0`: InfiniBand). Pure.
pub(crate) fn netdev_of(label: &str) -> Option<&str> {
    let label = label.trim();
    let name = match label.strip_suffix(')').and_then(|l| l.rsplit_once(" (")) {
        Some((_, inner)) => inner,
        None => label,
    };
    let plain = !name.is_empty()
        && name.len() <= 15
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.@".contains(&b));
    plain.then_some(name)
}

/// One directed link measured at its receiver.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkSample {
    /// Which ring order of the scan produced this sample (0 = the natural ring).
    pub order: u32,
    pub from_rank: Rank,
    pub to_rank: Rank,
    pub bytes: u64,
    pub seconds: f64,
    /// Of this order's wall time, the share the receiving rank's most-waiting thread was
    /// runnable but waited for a CPU (`schedstat`); None
    /// where the kernel keeps none or the process runs several ranks. The sender's is in
    /// its own sample of the same order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_wait: Option<f64>,
    /// On an order's first sample only: the longest the link was silent in that order
    /// (before its first chunk or between two), when it was a stall (seconds, and far
    /// longer than its other gaps, by the scan's stall rule); None: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub silence_s: Option<f64>,
}

/// One sweep channel's long waits at one rank, by chunk: the chunks a channel's link carried
/// are counted from the sweep's start, the same count at its two ends (each chunk is checked
/// in order). A receiver's wait that its sender's own wait for the chunk before and its time
/// to send this one do not explain is the link's own (`diagnosis::stall::sweep_silences`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ChunkWaits {
    /// This rank's waits to receive chunk k from its predecessor: (k, seconds).
    pub recv_wait: Vec<(u64, f64)>,
    /// This rank's time from receiving chunk k - 1 to handing chunk k to its successor (its
    /// own work, a barrier, the successor's flow control): (k, seconds).
    pub send_delay: Vec<(u64, f64)>,
    /// Every wait and delay not listed was shorter than this (seconds).
    pub floor_s: f64,
}

/// What one direction of a rank's data port carried over one scan order: the port's byte
/// counter's move beside the probe's own bytes that way (issue 45: traffic that is not the
/// probe's on a port is contention, not a broken port).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortMove {
    /// The counter read: `/sys/class/net/eth1/statistics/tx_bytes`, `mlx5_0 port 1
    /// port_xmit_data`.
    pub counter: String,
    /// The counter's move over the order in bytes; None: unknown, `unknown` says why.
    pub port_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown: Option<String>,
    /// The probe's own payload bytes that way in the order.
    pub probe_bytes: u64,
}

/// A rank's data port over one scan order, both ways (see [`PortMove`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortTraffic {
    pub tx: PortMove,
    pub rx: PortMove,
}

impl LinkSample {
    /// 10^9 bytes per second, as nccl-tests reports.
    pub fn gbs(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 / self.seconds / 1e9
        } else {
            0.0
        }
    }
}

/// Which part of the run a rank is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Bootstrap,
    Connect,
    Scan,
    /// Allocating, filling or registering the buffers of a size: no data wait.
    Prepare,
    /// Between blocks, iterations or sizes (a block finished, the next not begun).
    Between,
    /// Verifying a size's result against the expected sums: no data wait.
    Check,
    ReduceScatter,
    AllGather,
    Results,
}

impl Phase {
    /// Every phase in run order: a sender in a later phase has sent everything of an
    /// earlier one.
    /// The non-data phases sit before the data ones: a rank in them at round `r` has
    /// finished `r` blocks and sent nothing of the next (the end of the block it finished).
    pub(crate) const IN_ORDER: [Phase; 9] = [
        Phase::Bootstrap,
        Phase::Connect,
        Phase::Scan,
        Phase::Prepare,
        Phase::Between,
        Phase::Check,
        Phase::ReduceScatter,
        Phase::AllGather,
        Phase::Results,
    ];

    /// Position in [`Phase::IN_ORDER`] (also the phase's code in an atomic).
    pub(crate) fn ordinal(self) -> u32 {
        Phase::IN_ORDER.iter().position(|&p| p == self).unwrap_or(0) as u32
    }

    /// The inverse of [`Phase::ordinal`]; out-of-range codes read as `Results`.
    pub fn from_ordinal(c: u32) -> Phase {
        Phase::IN_ORDER.get(c as usize).copied().unwrap_or(Phase::Results)
    }

    /// Local work between data steps (allocation, result check, between sizes): a rank in
    /// it waits on no peer, and the watchdog gives it its own allowance.
    pub(crate) fn is_local_work(self) -> bool {
        matches!(self, Phase::Prepare | Phase::Between | Phase::Check)
    }

    pub fn name(self) -> &'static str {
        match self {
            Phase::Bootstrap => "bootstrap",
            Phase::Connect => "connect",
            Phase::Scan => "scan",
            Phase::Prepare => "prepare",
            Phase::Between => "between",
            Phase::Check => "check",
            Phase::ReduceScatter => "reduce-scatter",
            Phase::AllGather => "all-gather",
            Phase::Results => "results",
        }
    }
}

/// What a rank sends the coordinator when a data-link wait passes its deadline, and in
/// its periodic heartbeats (then `waiting_on` is None).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WaitReport {
    pub rank: Rank,
    pub phase: Phase,
    /// Blocks this channel completed before the current one (every AllReduce iteration of
    /// every size moves one or more blocks, each through all the steps of both phases):
    /// positions of two ranks compare as (round, phase, step).
    #[serde(default)]
    pub round: u64,
    /// Step within the phase (ring step 0..n-1, or the scan order).
    pub step: u32,
    pub channel: u32,
    /// The peer this rank waits for data from (its ring predecessor) or to send to.
    pub waiting_on: Option<Rank>,
    /// `true`: waiting to receive from `waiting_on`; `false`: blocked sending to it.
    pub waiting_to_receive: bool,
    /// Bytes this rank has received from `waiting_on` in the current step.
    pub bytes_received: u64,
    /// Bytes this rank has handed to the link towards its successor in the current step.
    pub bytes_sent: u64,
    /// Milliseconds since this rank last made progress on any data link.
    pub since_progress_ms: u64,
    /// Monotonic progress counter (chunks completed); the coordinator compares successive
    /// heartbeats to tell "alive but not progressing" from "working".
    pub progress: u64,
    /// In heartbeats: how long this rank's most-waiting thread was runnable but off a CPU
    /// since its previous heartbeat (schedstat), so a starved rank is not read as a hung
    /// link. None: not measured (no schedstat, a stuck report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuWait>,
    /// Every channel's position, in channel order, from a rank that runs more than one: the
    /// fields above show one channel (the longest waiting), and a receiver that waits on
    /// another channel is judged against where this rank stands on that one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub positions: Vec<Position>,
    /// This rank's own run failed (it told the coordinator why) and it now waits for the
    /// coordinator's word on the cause: a wait on the coordinator by design, so its still
    /// progress counter is not a stalled rank's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub awaiting_coordinator: bool,
}

impl WaitReport {
    /// Rank `rank` at the start of `phase` on channel 0: no wait, no bytes, no progress, no
    /// CPU figure, no other channel. The one place every field is named: callers set what
    /// they know (`WaitReport { step, waiting_on, ..WaitReport::new(rank, phase) }`), so a
    /// new field is added here alone.
    pub fn new(rank: Rank, phase: Phase) -> WaitReport {
        WaitReport {
            rank,
            phase,
            round: 0,
            step: 0,
            channel: 0,
            waiting_on: None,
            waiting_to_receive: false,
            bytes_received: 0,
            bytes_sent: 0,
            since_progress_ms: 0,
            progress: 0,
            cpu: None,
            positions: Vec::new(),
            awaiting_coordinator: false,
        }
    }

    /// Where this rank stands on `channel`: its own fields for the channel it shows, else
    /// its `positions` entry (None when it did not send one).
    pub(crate) fn position_on(&self, channel: u32) -> Option<Position> {
        if channel == self.channel {
            return Some(self.position());
        }
        self.positions.get(channel as usize).copied()
    }

    /// Where this rank stands on the channel it shows.
    pub fn position(&self) -> Position {
        Position {
            round: self.round,
            phase: self.phase,
            step: self.step,
        }
    }
}

/// Where one channel of a rank stands: two ranks' positions on the same channel compare as
/// (round, phase, step).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    pub round: u64,
    pub phase: Phase,
    pub step: u32,
}

impl Position {
    /// The order key: a later (round, phase, step) has sent everything of an earlier one.
    pub fn key(&self) -> (u64, u32, u32) {
        (self.round, self.phase.ordinal(), self.step)
    }
}

/// Of `window_ms` of wall time, `wait_ms` runnable but waiting for a CPU (the most-waiting
/// thread of the rank's process).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuWait {
    pub wait_ms: u64,
    pub window_ms: u64,
}

impl CpuWait {
    /// Waited at least half of a window long enough to say so (200 ms): starved of CPU.
    pub fn starved(&self) -> bool {
        self.window_ms >= 200 && self.wait_ms.saturating_mul(2) >= self.window_ms
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictKind {
    SlowLink,
    SlowEgress,
    SlowIngress,
    HangLink,
    RankLost,
    RankStalled,
    /// The rank's host stopped acknowledging its control connection (TCP_INFO): powered off,
    /// crashed, or its network link cut; not a stopped process (whose kernel still answers).
    RankUnreachable,
    CoordinatorLost,
    /// Rank 0's own process did not run (stopped, starved of CPU) past the ranks' silence
    /// deadline: what the ranks reported after it is its consequence (see the coordinator's
    /// lag clock).
    CoordinatorStalled,
    /// A data link's queue pair completed a work request in error (RDMA): the status names
    /// the cause (12 retry exceeded, 13 RNR, 4 local protection, 10 remote access).
    LinkError,
    /// With `--rails`: a node lacks a rail the others drive (its port down or absent).
    RailMissing,
    /// With `--rails`, internal: this rail's ring was stopped because another rail failed
    /// first (`--rails` stops the other rails' rings). The job's report turns it into the rail's
    /// `error`; it is never one of the report's verdicts.
    RailStopped,
    /// A port whose active rate is below the rate its peers on the rail run (trained down:
    /// fewer lanes or a lower speed), whatever the ring measured.
    PortDowntrained,
    /// Flows between two ranks slow on some connections and not on others: the slowness
    /// moves with the connection (ECMP hashing, a congested uplink), a switch-side problem.
    SlowPath,
    /// Connections of the scan went silent for seconds, then ran at their rate (an MTU
    /// black hole that TCP's MTU probing steps around, a hiccup): what the wait cost.
    ConnectionStall,
    /// A rank's data port lost its carrier and got it back during the run (its carrier
    /// counters moved): a hiccup of the link to the switch, whatever else was measured.
    PortFlapped,
}

/// Where to act on a verdict: take the node out of service, file a ticket for the link or
/// path (cable, switch port), or look further.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Drain,
    Ticket,
    Investigate,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Drain => "drain",
            Action::Ticket => "ticket",
            Action::Investigate => "investigate",
        }
    }
}

impl VerdictKind {
    /// The action a verdict of this kind calls for: a node's own port or NIC is drained,
    /// a link or path is ticketed, what names no hardware is investigated.
    pub fn action(self) -> Action {
        use VerdictKind::*;
        match self {
            SlowEgress | SlowIngress | PortDowntrained | RailMissing => Action::Drain,
            SlowLink | SlowPath | LinkError | HangLink => Action::Ticket,
            RankLost | RankStalled | RankUnreachable | CoordinatorLost | CoordinatorStalled | RailStopped
            | ConnectionStall | PortFlapped => Action::Investigate,
        }
    }
}

/// A completion error on one directed data link, as the rank that polled it saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkFault {
    /// The ring link: data flows `from_rank` -> `to_rank` (either end may report it).
    pub from_rank: Rank,
    pub to_rank: Rank,
    /// The rank whose completion queue held the error.
    pub seen_by: Rank,
    /// `rxe0:1 gid 1`.
    pub device: String,
    /// What completed in error: `an RDMA write`, `a credit`, `a chunk`.
    pub operation: String,
    /// `ibv_wc_status` and `ibv_wc_status_str`.
    pub status: u32,
    pub status_name: String,
    pub meaning: String,
    /// The NIC's vendor syndrome (`vendor_err`).
    pub vendor_err: u32,
}

impl LinkFault {
    /// `IBV_WC_WR_FLUSH_ERR`: the knock-on of an earlier error on the same queue pair, so
    /// never the cause.
    pub(crate) fn is_flush(&self) -> bool {
        self.status == 5
    }
}

/// A conclusion the user sees: human line first, figures as evidence. Serialized with its
/// `action` ([`Verdict::action`]), which is derived, never read back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(into = "VerdictOut")]
pub struct Verdict {
    pub kind: VerdictKind,
    pub from_rank: Option<Rank>,
    pub to_rank: Option<Rank>,
    pub from_host: Option<String>,
    pub to_host: Option<String>,
    /// Figures the verdict rests on (`gbs`, `median_gbs`, `ratio`, `step`, `waited_ms`...).
    pub evidence: BTreeMap<String, serde_json::Value>,
    pub message: String,
    /// The next command a person should run.
    pub next: Option<String>,
    /// With `--rails`: the one rail this verdict concerns; null for a single-rail run and for
    /// a verdict on every rail of a node (its message says "all rails").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rail: Option<VerdictRail>,
}

impl Verdict {
    /// A verdict of `kind` naming `from` -> `to` and nothing else, for tests to fill in
    /// (`Verdict { message, ..Verdict::bare(kind, from, to) }`): a new field is added here.
    #[cfg(test)]
    pub(crate) fn bare(kind: VerdictKind, from_rank: Option<Rank>, to_rank: Option<Rank>) -> Verdict {
        Verdict {
            kind,
            from_rank,
            to_rank,
            from_host: None,
            to_host: None,
            evidence: BTreeMap::new(),
            message: String::new(),
            next: None,
            rail: None,
        }
    }

    /// Where to act: the kind's action ([`VerdictKind::action`]), except that a would-be
    /// verdict the host's CPU wait explains (`evidence.not_judged`) or a suspect new
    /// connections did not confirm (`evidence.unconfirmed`) or whose port carried traffic
    /// that was not the probe's (`evidence.contention`) is only investigated.
    pub fn action(&self) -> Action {
        let soft = ["not_judged", "unconfirmed", "contention"];
        if soft.iter().any(|k| self.evidence.contains_key(*k)) {
            Action::Investigate
        } else {
            self.kind.action()
        }
    }
}

/// A verdict as JSON: its fields and the derived `action`.
#[derive(Serialize)]
struct VerdictOut {
    kind: VerdictKind,
    action: Action,
    from_rank: Option<Rank>,
    to_rank: Option<Rank>,
    from_host: Option<String>,
    to_host: Option<String>,
    evidence: BTreeMap<String, serde_json::Value>,
    message: String,
    next: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rail: Option<VerdictRail>,
}

impl From<Verdict> for VerdictOut {
    fn from(v: Verdict) -> Self {
        VerdictOut {
            action: v.action(),
            kind: v.kind,
            from_rank: v.from_rank,
            to_rank: v.to_rank,
            from_host: v.from_host,
            to_host: v.to_host,
            evidence: v.evidence,
            message: v.message,
            next: v.next,
            rail: v.rail,
        }
    }
}

/// One port counter that moved during the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CounterMove {
    pub rank: u32,
    pub host: String,
    pub device: String,
    pub port: u32,
    pub netdev: Option<String>,
    pub counter: String,
    /// At least this much (exact unless the counter saturated or was cleared).
    pub delta: u64,
}

impl CounterMove {
    /// The port as every report names it: `mlx5_0 port 1`; a netdev's own counter (the
    /// carrier's, port 0 by convention) is the netdev alone: `eth1`, never `eth1 port 0`.
    pub(crate) fn port_name(&self) -> String {
        match &self.netdev {
            Some(n) if self.port == 0 && *n == self.device => n.clone(),
            _ => format!("{} port {}", self.device, self.port),
        }
    }

    /// [`Self::port_name`] with the netdev of an RDMA port: `mlx5_0 port 1 (eth1)`, `eth1`.
    pub(crate) fn port_label(&self) -> String {
        match &self.netdev {
            Some(n) if self.port_name() != *n => format!("{} ({n})", self.port_name()),
            _ => self.port_name(),
        }
    }
}

/// Set when the run must end: the coordinator said so, or it is gone.
#[derive(Debug, Default)]
pub struct AbortFlag {
    set: AtomicBool,
    reason: Mutex<Option<String>>,
}

impl AbortFlag {
    pub fn raise(&self, reason: String) {
        if let Ok(mut r) = self.reason.lock() {
            r.get_or_insert(reason);
        }
        self.set.store(true, Ordering::SeqCst);
    }
    pub fn reason(&self) -> Option<String> {
        self.reason.lock().ok().and_then(|r| r.clone())
    }
}

/// What this rank is doing right now, for a person watching (the CLI's progress line).
/// Written by the run, read by any thread; every field is a plain counter.
#[derive(Debug, Default)]
pub(crate) struct LiveStatus {
    /// 0 setting up, 1 link scan, 2 size sweep, 3 finished.
    pub stage: AtomicU8,
    /// Link scan: the order running now (0-based) and the orders planned so far.
    pub scan_order: AtomicU32,
    /// Size sweep: the size running now (0-based), its bytes, and the half (0 out of
    /// place, 1 in place).
    pub size_index: AtomicU32,
    pub size_bytes: AtomicU64,
    pub half: AtomicU8,
    /// Iteration of the current half, warm-up included.
    pub iteration: AtomicU32,
}

impl LiveStatus {
    pub const SETUP: u8 = 0;
    pub(crate) const SCAN: u8 = 1;
    pub(crate) const SWEEP: u8 = 2;
    pub(crate) const DONE: u8 = 3;

    pub(crate) fn set_stage(&self, s: u8) {
        self.stage.store(s, Ordering::Relaxed);
    }
    pub(crate) fn stage(&self) -> u8 {
        self.stage.load(Ordering::Relaxed)
    }
}

/// `4812` -> `4,812`: counts people read in a reason.
pub(crate) fn thousands(n: usize) -> String {
    let d = n.to_string();
    let mut out = String::with_capacity(d.len() + d.len() / 3);
    for (i, c) in d.chars().enumerate() {
        if i > 0 && (d.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// How many names a reason sent to the ranks lists before it counts the rest.
pub(crate) const REASON_NAMES: usize = 16;

/// How many verdict messages one reason joins before it counts the rest.
pub(crate) const REASON_MESSAGES: usize = 4;

/// The characters a reason sent to every rank keeps at most (far below the frame limit,
/// whatever the number of ranks it concerns).
pub(crate) const REASON_CHARS: usize = 4000;

/// At most `shown` items, then the count of the rest: `0, 2, 3 and 4,812 more`. Pure.
pub(crate) fn bounded_list<T: std::fmt::Display>(items: &[T], shown: usize) -> String {
    let head = items.iter().take(shown).map(|i| i.to_string()).collect::<Vec<_>>().join(", ");
    match items.len().saturating_sub(shown) {
        0 => head,
        more => format!("{head} and {} more", thousands(more)),
    }
}

/// Messages joined by `; `, at most [`REASON_MESSAGES`] of them and then the count of the
/// rest, within [`REASON_CHARS`]: a reason sent to every rank fits one frame however many
/// ranks failed. Pure.
pub(crate) fn bounded_reason<S: AsRef<str>>(messages: &[S]) -> String {
    let head = messages
        .iter()
        .take(REASON_MESSAGES)
        .map(|m| m.as_ref())
        .collect::<Vec<_>>()
        .join("; ");
    let head = printable(&head, REASON_CHARS);
    match messages.len().saturating_sub(REASON_MESSAGES) {
        0 => head,
        more => format!("{head}; and {} more", thousands(more)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_and_bounded_lists() {
        for (n, want) in [(0, "0"), (999, "999"), (1000, "1,000"), (4812, "4,812"), (1234567, "1,234,567")] {
            assert_eq!(thousands(n), want);
        }
        assert_eq!(bounded_list(&[0, 2, 3], 16), "0, 2, 3");
        let many: Vec<u32> = (0..4828).collect();
        let l = bounded_list(&many, 16);
        assert!(l.starts_with("0, 1, 2,") && l.ends_with("14, 15 and 4,812 more"), "{l}");
    }

    #[test]
    fn a_reason_from_any_number_of_messages_is_bounded() {
        assert_eq!(bounded_reason(&["a", "b"]), "a; b");
        let msgs: Vec<String> = (0..16_384).map(|r| format!("rank {r} (node{r}) sent nothing for 10 s")).collect();
        let r = bounded_reason(&msgs);
        assert!(r.ends_with("; and 16,380 more"), "{r}");
        assert!(r.starts_with("rank 0 (node0) sent nothing"), "{r}");
        let long: Vec<String> = (0..3).map(|_| "x".repeat(100_000)).collect();
        assert!(bounded_reason(&long).chars().count() <= REASON_CHARS + 3);
        let long: Vec<String> = (0..9).map(|_| "x".repeat(100_000)).collect();
        assert!(bounded_reason(&long).ends_with("...; and 5 more"));
    }

    #[test]
    fn netdev_of_labels() {
        for (label, want) in [
            ("eth1", Some("eth1")),
            ("rxe0:1 gid 1 (eth0)", Some("eth0")),
            ("mlx5_2:1 gid 3 (ens1f0np0)", Some("ens1f0np0")),
            ("mlx5_0:1 gid 0", None),
            ("rxe0:1 gid 1 ()", None),
            ("<data interface>", None),
            ("", None),
            ("a-very-long-interface-name", None),
        ] {
            assert_eq!(netdev_of(label), want, "{label}");
        }
    }
}
