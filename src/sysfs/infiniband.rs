//! `/sys/class/infiniband/<dev>/`: device attributes, ports (state, rate, LIDs), GID tables,
//! `counters/` and `hw_counters/` with their real widths, and the netdev mapping.
//! Formats: kernel drivers/infiniband/core/sysfs.c, core/cache.c, hw/mlx5/counters.c and
//! Documentation/ABI/stable/sysfs-class-infiniband. Parsers are pure; readers are thin and never fail
//! the whole device because one attribute is unreadable.

use std::net::Ipv6Addr;

use serde::{Deserialize, Serialize};

use crate::host::{Attr, Host};
use crate::sysfs::pci::{self, PciLink};

pub(crate) const CLASS_DIR: &str = "/sys/class/infiniband";

// ---------------------------------------------------------------------------------------
// Pure parsers
// ---------------------------------------------------------------------------------------

/// A `"%d: %s"` attribute (`state`, `phys_state`, `node_type`): the number and the name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NumName {
    pub id: u32,
    pub name: String,
}

/// `"4: ACTIVE"` -> {4, "ACTIVE"}; `"5: LinkUp"`; `"1: CA"`. Names may hold spaces
/// (`"7: Phy Test"`, `"5: usNIC UDP"`).
pub fn parse_num_name(s: &str) -> Option<NumName> {
    let (num, name) = s.trim_end_matches('\n').split_once(':')?;
    let id = num.trim().parse().ok()?;
    let name = name.trim();
    if name.is_empty() {
        return None;
    }
    Some(NumName {
        id,
        name: name.to_string(),
    })
}

/// A port `rate`: `"400 Gb/sec (4X NDR)"`, `"2.5 Gb/sec (1X SDR)"`, old kernels' `"10 Gb/sec (4X)"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rate {
    /// Verbatim kernel string.
    pub raw: String,
    pub gbps: f64,
    /// Lane count (1, 2, 4, 8, 12).
    pub lanes: Option<u32>,
    /// `SDR`..`XDR` as printed; `None` on old kernels that printed no suffix.
    pub speed: Option<String>,
    /// What the speed means: the suffix, or `SDR` for old kernels' suffix-less form.
    pub speed_name: Option<String>,
}

impl Rate {
    /// The speed name, with old kernels' missing suffix read as SDR (what it meant).
    pub(crate) fn speed_name(&self) -> Option<&str> {
        self.speed_name.as_deref()
    }
}

pub fn parse_rate(s: &str) -> Option<Rate> {
    let s = s.trim_end_matches('\n').trim();
    let (num, rest) = s.split_once(' ')?;
    let gbps: f64 = num.parse().ok()?;
    if !gbps.is_finite() || gbps < 0.0 {
        return None;
    }
    let rest = rest.strip_prefix("Gb/sec")?.trim();
    let (lanes, speed) = if rest.is_empty() {
        (None, None)
    } else {
        let inner = rest.strip_prefix('(')?.strip_suffix(')')?;
        let (w, sp) = match inner.split_once('X') {
            Some((w, sp)) => (w, sp.trim()),
            None => return None,
        };
        let lanes = w.trim().parse().ok()?;
        (Some(lanes), (!sp.is_empty()).then(|| sp.to_string()))
    };
    // Old kernels printed no suffix for SDR only (`rate_show` in core/sysfs.c).
    let speed_name = match (&speed, lanes) {
        (Some(sp), _) => Some(sp.clone()),
        (None, Some(_)) => Some("SDR".to_string()),
        (None, None) => None,
    };
    Some(Rate {
        raw: s.to_string(),
        gbps,
        lanes,
        speed,
        speed_name,
    })
}

/// `"0x3"` -> 3 (`lid`, `sm_lid`, `cap_mask`); sysfs prints them `"0x%x"`.
pub fn parse_hex_u32(s: &str) -> Option<u32> {
    let s = s.trim();
    let h = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X"))?;
    u32::from_str_radix(h, 16).ok()
}

/// `"0a7f:bc12:45ef:d23b"` (node_guid, sys_image_guid) -> the 64-bit GUID.
pub fn parse_guid(s: &str) -> Option<u64> {
    let groups: Vec<&str> = s.trim().split(':').collect();
    if groups.len() != 4 || groups.iter().any(|g| g.len() != 4) {
        return None;
    }
    let mut v = 0u64;
    for g in groups {
        v = (v << 16) | u64::from(u16::from_str_radix(g, 16).ok()?);
    }
    Some(v)
}

/// A GID: 16 raw bytes, printed in the kernel's full form (`%pI6`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gid(pub [u8; 16]);

/// The kernel's full form `fe80:0000:...` and the compressed `::ffff:192.0.2.10` that some
/// synthetic fixtures use (the kernel never prints it, but tools accept it).
pub fn parse_gid(s: &str) -> Option<Gid> {
    let a: Ipv6Addr = s.trim().parse().ok()?;
    Some(Gid(a.octets()))
}

impl Gid {
    pub(crate) fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }
    /// `fe80:0000:0000:0000` prefix.
    pub(crate) fn is_link_local(&self) -> bool {
        self.0[..8] == [0xfe, 0x80, 0, 0, 0, 0, 0, 0]
    }
    /// `fe80::` with an all-zero interface id: a reserved slot `show_gids` skips.
    pub(crate) fn is_link_local_zero(&self) -> bool {
        self.is_link_local() && self.0[8..] == [0; 8]
    }
    /// `show_gids`' skip rule: all zeros, or `fe80::` with zero trailer.
    pub(crate) fn is_empty_slot(&self) -> bool {
        self.is_zero() || self.is_link_local_zero()
    }
    /// `::ffff:a.b.c.d` (IN6_IS_ADDR_V4MAPPED).
    pub fn ipv4_mapped(&self) -> Option<std::net::Ipv4Addr> {
        (self.0[..10] == [0; 10] && self.0[10] == 0xff && self.0[11] == 0xff)
            .then(|| std::net::Ipv4Addr::new(self.0[12], self.0[13], self.0[14], self.0[15]))
    }
    /// Bytes 4-5 big-endian: an IB GID's FLID (NCCL's `ncclIbExtractFlid`).
    pub fn flid(&self) -> u16 {
        u16::from_be_bytes([self.0[4], self.0[5]])
    }
    /// The kernel's `%pI6`: eight groups of four lowercase hex digits.
    pub fn full(&self) -> String {
        let g: Vec<String> = self
            .0
            .chunks(2)
            .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
            .collect();
        g.join(":")
    }
}

impl Serialize for Gid {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.full())
    }
}

impl<'de> Deserialize<'de> for Gid {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Gid, D::Error> {
        let s = String::deserialize(d)?;
        parse_gid(&s).ok_or_else(|| serde::de::Error::custom(format!("bad gid {s:?}")))
    }
}

/// `gid_attrs/types/<i>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GidType {
    /// `"IB/RoCE v1"` (IB and RoCE v1 print the same, cache.c) or `"RoCE v1"`.
    #[serde(rename = "IB/RoCE v1")]
    IbRoceV1,
    #[serde(rename = "RoCE v2")]
    RoceV2,
}

impl GidType {
    /// NCCL's `ncclIbRoceGetVersionNum`: prefix compares of `IB/RoCE v1`, `RoCE v1`, `RoCE v2`.
    pub fn parse(s: &str) -> Option<GidType> {
        if s.starts_with("IB/RoCE v1") || s.starts_with("RoCE v1") {
            Some(GidType::IbRoceV1)
        } else if s.starts_with("RoCE v2") {
            Some(GidType::RoceV2)
        } else {
            None
        }
    }
    pub fn version(self) -> u8 {
        match self {
            GidType::IbRoceV1 => 1,
            GidType::RoceV2 => 2,
        }
    }
}

/// One counter file's content: a number, or old kernels' `N/A (no PMA)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CounterText {
    Value(u64),
    NoPma,
}

pub fn parse_counter(s: &str) -> Option<CounterText> {
    let s = s.trim();
    if s == "N/A (no PMA)" {
        return Some(CounterText::NoPma);
    }
    s.parse().ok().map(CounterText::Value)
}

// ---------------------------------------------------------------------------------------
// Counter widths and deltas
// ---------------------------------------------------------------------------------------

/// How a counter behaves at its width.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overflow {
    /// IB PMA counters stop at their maximum.
    Saturates,
    /// Hardware q-counters and 64-bit counters roll over to 0.
    Wraps,
}

/// Where a counter lives and what its raw value means.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterSpec {
    pub width_bits: u8,
    pub overflow: Overflow,
    /// Bytes per raw unit: 4 for `port_xmit_data`/`port_rcv_data` (4-octet words), else 1
    /// (and the counter counts events, not bytes).
    pub bytes_per_unit: Option<u8>,
}

impl CounterSpec {
    pub fn max(&self) -> u64 {
        if self.width_bits >= 64 {
            u64::MAX
        } else {
            (1u64 << self.width_bits) - 1
        }
    }
}

/// The spec of a `counters/` (PMA) file. `ext` is true when the kernel picked the
/// PortCountersExtended table (64-bit data/packet counters).
pub(crate) fn pma_spec(name: &str, ext: bool) -> CounterSpec {
    let sat = |w| CounterSpec {
        width_bits: w,
        overflow: Overflow::Saturates,
        bytes_per_unit: None,
    };
    match name {
        "symbol_error"
        | "port_rcv_errors"
        | "port_rcv_remote_physical_errors"
        | "port_rcv_switch_relay_errors"
        | "port_xmit_discards"
        | "VL15_dropped" => sat(16),
        "link_error_recovery"
        | "link_downed"
        | "port_xmit_constraint_errors"
        | "port_rcv_constraint_errors" => sat(8),
        "local_link_integrity_errors" | "excessive_buffer_overrun_errors" => sat(4),
        "port_xmit_wait" => sat(32),
        "port_xmit_data" | "port_rcv_data" => CounterSpec {
            width_bits: if ext { 64 } else { 32 },
            overflow: Overflow::Saturates,
            bytes_per_unit: Some(4),
        },
        "port_xmit_packets" | "port_rcv_packets" => sat(if ext { 64 } else { 32 }),
        // Only in the extended table.
        "unicast_xmit_packets"
        | "unicast_rcv_packets"
        | "multicast_xmit_packets"
        | "multicast_rcv_packets" => sat(64),
        // Unknown PMA names: treat as 64-bit, saturating (no wrap is ever invented).
        _ => sat(64),
    }
}

/// mlx5 q-counters (read as be32: they wrap at 2^32).
pub(crate) const MLX5_Q_COUNTERS: &[&str] = &[
    "rx_write_requests",
    "rx_read_requests",
    "rx_atomic_requests",
    "rx_dct_connect",
    "out_of_buffer",
    "out_of_sequence",
    "duplicate_request",
    "rnr_nak_retry_err",
    "packet_seq_err",
    "implied_nak_seq_err",
    "local_ack_timeout_err",
    "resp_local_length_error",
    "resp_cqe_error",
    "req_cqe_error",
    "req_remote_invalid_request",
    "req_remote_access_errors",
    "resp_remote_access_errors",
    "resp_cqe_flush_error",
    "req_cqe_flush_error",
    "req_transport_retries_exceeded",
    "req_rnr_retries_exceeded",
    "roce_adp_retrans",
    "roce_adp_retrans_to",
    "roce_slow_restart",
    "roce_slow_restart_cnps",
    "roce_slow_restart_trans",
];

/// The spec of a `hw_counters/` file. mlx5 q-counters wrap at 2^32; congestion counters,
/// `rx_icrc_encapsulated` and other drivers' counters are `%llu` of 64-bit values.
pub(crate) fn hw_spec(name: &str, mlx5: bool) -> CounterSpec {
    let base = name.strip_prefix("vport_").unwrap_or(name);
    let width_bits = if mlx5 && MLX5_Q_COUNTERS.contains(&base) {
        32
    } else {
        64
    };
    CounterSpec {
        width_bits,
        overflow: Overflow::Wraps,
        bytes_per_unit: None,
    }
}

/// The change of a counter between two samples, with its width and overflow rule applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Delta {
    /// The counter moved by `value` (after a wrap when `wrapped`).
    Value { value: u64, wrapped: bool },
    /// A saturating counter sits at its maximum: it increased by at least `at_least`, the
    /// true change is unknown (clear the counters with `perfquery -x -R`).
    Saturated { at_least: u64 },
    /// A saturating counter went down: someone cleared it between the samples.
    Reset { after: u64 },
}

impl Delta {
    /// The change, when it is known exactly.
    pub fn exact(&self) -> Option<u64> {
        match self {
            Delta::Value { value, .. } => Some(*value),
            _ => None,
        }
    }
    /// At least this much happened.
    pub(crate) fn lower_bound(&self) -> u64 {
        match self {
            Delta::Value { value, .. } => *value,
            Delta::Saturated { at_least } => *at_least,
            Delta::Reset { after } => *after,
        }
    }
}

/// `after - before` under the counter's rules. Pure; table-tested.
pub(crate) fn counter_delta(before: u64, after: u64, spec: CounterSpec) -> Delta {
    let max = spec.max();
    match spec.overflow {
        Overflow::Saturates => {
            if after < before {
                Delta::Reset { after }
            } else if after >= max {
                Delta::Saturated {
                    at_least: after - before,
                }
            } else {
                Delta::Value {
                    value: after - before,
                    wrapped: false,
                }
            }
        }
        Overflow::Wraps => {
            if after >= before {
                Delta::Value {
                    value: after - before,
                    wrapped: false,
                }
            } else {
                // One roll-over of a `width_bits` counter: (max - before) + after + 1.
                Delta::Value {
                    value: (max - before.min(max)).wrapping_add(after).wrapping_add(1),
                    wrapped: true,
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Readers
// ---------------------------------------------------------------------------------------

/// RDMA device names in `/sys/class/infiniband`, natural order; `None` when the class is
/// absent (a kernel without InfiniBand support).
pub(crate) fn list_devices(host: &Host) -> Option<Vec<String>> {
    let mut v = host.list_dir(CLASS_DIR).ok().flatten()?;
    v.sort_by(|a, b| crate::host::natural_cmp(a, b));
    Some(v)
}

pub(crate) fn dev_dir(dev: &str) -> String {
    format!("{CLASS_DIR}/{dev}")
}

pub(crate) fn port_dir(dev: &str, port: u32) -> String {
    format!("{CLASS_DIR}/{dev}/ports/{port}")
}

/// Port numbers of a device, ascending.
pub(crate) fn list_ports(host: &Host, dev: &str) -> Vec<u32> {
    let mut v: Vec<u32> = host
        .list_dir(format!("{}/ports", dev_dir(dev)))
        .ok()
        .flatten()
        .unwrap_or_default()
        .iter()
        .filter_map(|p| p.parse().ok())
        .collect();
    v.sort_unstable();
    v
}

/// Device-level attributes, each as read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceAttrs {
    pub node_type: Option<NumName>,
    pub node_guid: Option<String>,
    pub sys_image_guid: Option<String>,
    pub fw_ver: Option<String>,
    pub board_id: Option<String>,
    pub hca_type: Option<String>,
    pub hw_rev: Option<String>,
    /// The PCI function (`realpath device`), when the device has one.
    pub pci_bdf: Option<String>,
    /// The PCI driver's name (`device/driver` link), e.g. `mlx5_core`, `hfi1`.
    pub driver: Option<String>,
    pub pci_link: Option<PciLink>,
    /// `device/net/*`: the PCI function's netdevs (`ibN` for IB, the PF for RoCE).
    pub pci_netdevs: Vec<String>,
}

fn value(a: Attr) -> Option<String> {
    a.value().map(|s| s.trim().to_string())
}

pub(crate) fn read_device(host: &Host, dev: &str) -> DeviceAttrs {
    let d = dev_dir(dev);
    let get = |n: &str| value(host.attr(format!("{d}/{n}")));
    let pci_path = host
        .realpath(format!("{d}/device"))
        .ok()
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(pci::is_bdf));
    let pci_bdf = pci_path
        .as_ref()
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned());
    let driver = host
        .realpath(format!("{d}/device/driver"))
        .ok()
        .filter(|_| host.exists(format!("{d}/device/driver")))
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    let pci_link = pci_path
        .as_ref()
        .map(|p| pci::read_link(host, &p.to_string_lossy()))
        .filter(|l| l.current_speed.is_some() || l.current_width.is_some() || l.max_width.is_some());
    let mut pci_netdevs = if pci_path.is_some() {
        host.list_dir(format!("{d}/device/net"))
            .ok()
            .flatten()
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    pci_netdevs.sort_by(|a, b| crate::host::natural_cmp(a, b));
    DeviceAttrs {
        node_type: get("node_type").and_then(|s| parse_num_name(&s)),
        node_guid: get("node_guid"),
        sys_image_guid: get("sys_image_guid"),
        fw_ver: get("fw_ver"),
        board_id: get("board_id"),
        hca_type: get("hca_type"),
        hw_rev: get("hw_rev"),
        pci_bdf,
        driver,
        pci_link,
        pci_netdevs,
    }
}

/// The netdev of port `port` among the PCI function's netdevs: the one whose `dev_port`
/// is `port - 1` (what `ibdev2netdev` uses), or the only one of a single-port device.
pub(crate) fn port_netdev(
    host: &Host,
    dev: &str,
    port: u32,
    n_ports: usize,
    pci_netdevs: &[String],
) -> Option<String> {
    let by_dev_port = pci_netdevs.iter().find(|n| {
        value(host.attr(format!("{}/device/net/{n}/dev_port", dev_dir(dev))))
            .and_then(|v| v.parse::<u32>().ok())
            .is_some_and(|p| p + 1 == port)
    });
    by_dev_port
        .cloned()
        .or_else(|| (n_ports == 1 && pci_netdevs.len() == 1).then(|| pci_netdevs[0].clone()))
}

/// Port attributes, each as read (`None` when absent or unparsable).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct PortAttrs {
    pub state: Option<NumName>,
    pub phys_state: Option<NumName>,
    pub rate: Option<Rate>,
    pub link_layer: Option<String>,
    pub lid: Option<u32>,
    pub sm_lid: Option<u32>,
    pub lid_mask_count: Option<u32>,
    pub cap_mask: Option<u32>,
}

pub(crate) fn read_port(host: &Host, dev: &str, port: u32) -> PortAttrs {
    let p = port_dir(dev, port);
    let get = |n: &str| value(host.attr(format!("{p}/{n}")));
    PortAttrs {
        state: get("state").and_then(|s| parse_num_name(&s)),
        phys_state: get("phys_state").and_then(|s| parse_num_name(&s)),
        rate: get("rate").and_then(|s| parse_rate(&s)),
        link_layer: get("link_layer"),
        lid: get("lid").and_then(|s| parse_hex_u32(&s)),
        sm_lid: get("sm_lid").and_then(|s| parse_hex_u32(&s)),
        lid_mask_count: get("lid_mask_count").and_then(|s| s.parse().ok()),
        cap_mask: get("cap_mask").and_then(|s| parse_hex_u32(&s)),
    }
}

/// One slot of a port's GID table, as read.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct GidSlot {
    pub index: u32,
    /// `None` when the `gids/<i>` read failed or did not parse.
    pub gid: Option<Gid>,
    /// `gid_attrs/types/<i>`: EINVAL on empty slots (rdma-core reads that as v1).
    pub gid_type: Attr,
    /// `gid_attrs/ndevs/<i>`: EINVAL on empty slots and on IB ports.
    pub ndev: Attr,
}

impl GidSlot {
    pub(crate) fn parsed_type(&self) -> Option<GidType> {
        self.gid_type.value().and_then(GidType::parse)
    }
    /// A slot `show_gids` prints: readable and not all-zero / `fe80::` with zero trailer.
    pub(crate) fn is_populated(&self) -> bool {
        self.gid.is_some_and(|g| !g.is_empty_slot())
    }
}

/// Every slot of `ports/<n>/gids/`, in numeric index order. The table length is the
/// number of slots (`gid_tbl_len`, 256 on mlx5 RoCE); attributes of empty slots are read
/// too, because NCCL reads them and their EINVAL is part of the picture.
pub(crate) fn read_gid_table(host: &Host, dev: &str, port: u32) -> Vec<GidSlot> {
    let p = port_dir(dev, port);
    let mut idx: Vec<u32> = host
        .list_dir(format!("{p}/gids"))
        .ok()
        .flatten()
        .unwrap_or_default()
        .iter()
        .filter_map(|s| s.parse().ok())
        .collect();
    idx.sort_unstable();
    idx.into_iter()
        .map(|i| {
            let gid = value(host.attr(format!("{p}/gids/{i}"))).and_then(|s| parse_gid(&s));
            let populated = gid.is_some_and(|g| !g.is_empty_slot());
            // Attributes of empty slots only matter to NCCL's version reads; skip reading
            // the ndev of empty slots (nothing looks at it).
            let gid_type = host.attr(format!("{p}/gid_attrs/types/{i}"));
            let ndev = if populated {
                host.attr(format!("{p}/gid_attrs/ndevs/{i}"))
            } else {
                Attr::Absent
            };
            GidSlot {
                index: i,
                gid,
                gid_type,
                ndev,
            }
        })
        .collect()
}

/// Which directory a counter came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CounterDir {
    /// `ports/<n>/counters/`: IB PMA counters.
    Counters,
    /// `ports/<n>/hw_counters/`: driver counters.
    HwCounters,
    /// `<dev>/hw_counters/`: device-level driver counters (switchdev, hfi1).
    DeviceHwCounters,
}

/// A counter as read: the raw value, or why it is unavailable (never a fake 0).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct CounterRead {
    pub name: String,
    pub dir: CounterDir,
    pub spec: CounterSpec,
    pub raw: Option<u64>,
    /// `N/A (no PMA)`, an errno name, or `unparsable: ...`.
    pub unavailable: Option<String>,
}

fn read_counter_dir(
    host: &Host,
    path: &str,
    dir: CounterDir,
    spec_of: &dyn Fn(&str) -> CounterSpec,
) -> Vec<CounterRead> {
    let names = host.list_dir(path).ok().flatten().unwrap_or_default();
    names
        .into_iter()
        // `lifespan` is the hw_counters cache time in ms, not a counter.
        .filter(|n| n != "lifespan")
        .map(|name| {
            let (raw, unavailable) = match host.attr(format!("{path}/{name}")) {
                Attr::Value(v) => match parse_counter(&v) {
                    Some(CounterText::Value(n)) => (Some(n), None),
                    Some(CounterText::NoPma) => (None, Some("N/A (no PMA)".to_string())),
                    None => (None, Some(format!("unparsable: {:?}", v.trim()))),
                },
                Attr::Failed(e) => (None, Some(e)),
                Attr::Absent => (None, Some("absent".to_string())),
            };
            CounterRead {
                spec: spec_of(&name),
                name,
                dir,
                raw,
                unavailable,
            }
        })
        .collect()
}

/// All counters of one port (`counters/`, `hw_counters/`), plus the device-level
/// `hw_counters/` when `with_device` is set. `mlx5` picks the q-counter widths.
pub(crate) fn read_port_counters(host: &Host, dev: &str, port: u32, mlx5: bool) -> Vec<CounterRead> {
    let p = port_dir(dev, port);
    let pma_names = host
        .list_dir(format!("{p}/counters"))
        .ok()
        .flatten()
        .unwrap_or_default();
    // PortCountersExtended is in use when its extra counters exist; mlx5 always uses it.
    let ext = mlx5 || pma_names.iter().any(|n| n == "unicast_xmit_packets");
    let mut v = read_counter_dir(host, &format!("{p}/counters"), CounterDir::Counters, &|n| {
        pma_spec(n, ext)
    });
    v.extend(read_counter_dir(
        host,
        &format!("{p}/hw_counters"),
        CounterDir::HwCounters,
        &|n| hw_spec(n, mlx5),
    ));
    v
}

/// Device-level `hw_counters/` (hfi1 driver counters, mlx5 switchdev).
pub(crate) fn read_device_counters(host: &Host, dev: &str, mlx5: bool) -> Vec<CounterRead> {
    read_counter_dir(
        host,
        &format!("{}/hw_counters", dev_dir(dev)),
        CounterDir::DeviceHwCounters,
        &|n| hw_spec(n, mlx5),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn num_name_values() {
        let cases: &[(&str, Option<(u32, &str)>)] = &[
            ("4: ACTIVE", Some((4, "ACTIVE"))),
            ("1: DOWN\n", Some((1, "DOWN"))),
            ("5: ACTIVE_DEFER", Some((5, "ACTIVE_DEFER"))),
            ("5: LinkUp", Some((5, "LinkUp"))),
            ("2: Polling", Some((2, "Polling"))),
            ("7: Phy Test", Some((7, "Phy Test"))),
            (
                "4: PortConfigurationTraining",
                Some((4, "PortConfigurationTraining")),
            ),
            ("9: <unknown>", Some((9, "<unknown>"))),
            ("1: CA", Some((1, "CA"))),
            ("5: usNIC UDP", Some((5, "usNIC UDP"))),
            ("ACTIVE", None),
            ("x: ACTIVE", None),
            ("4:", None),
            ("", None),
        ];
        for (raw, want) in cases {
            let got = parse_num_name(raw);
            assert_eq!(got.as_ref().map(|n| (n.id, n.name.as_str())), *want, "{raw:?}");
        }
    }

    type RateCase<'a> = (&'a str, Option<(f64, Option<u32>, Option<&'a str>)>);

    #[test]
    fn rates_in_every_kernel_spelling() {
        let cases: &[RateCase] = &[
            ("400 Gb/sec (4X NDR)", Some((400.0, Some(4), Some("NDR")))),
            ("200 Gb/sec (4X HDR)\n", Some((200.0, Some(4), Some("HDR")))),
            ("800 Gb/sec (4X XDR)", Some((800.0, Some(4), Some("XDR")))),
            ("2.5 Gb/sec (1X SDR)", Some((2.5, Some(1), Some("SDR")))),
            ("56 Gb/sec (4X FDR)", Some((56.0, Some(4), Some("FDR")))),
            ("40 Gb/sec (4X FDR10)", Some((40.0, Some(4), Some("FDR10")))),
            ("25 Gb/sec (1X EDR)", Some((25.0, Some(1), Some("EDR")))),
            ("100 Gb/sec (2X HDR)", Some((100.0, Some(2), Some("HDR")))),
            ("120 Gb/sec (12X QDR)", Some((120.0, Some(12), Some("QDR")))),
            // Old kernels printed no suffix for SDR.
            ("10 Gb/sec (4X)", Some((10.0, Some(4), None))),
            ("30 Gb/sec (12X)", Some((30.0, Some(12), None))),
            ("400", None),
            ("400 Gb/s (4X NDR)", None),
            ("fast Gb/sec (4X NDR)", None),
            ("400 Gb/sec (X NDR)", None),
            ("400 Gb/sec 4X NDR", None),
        ];
        for (raw, want) in cases {
            let got = parse_rate(raw).map(|r| (r.gbps, r.lanes, r.speed.clone()));
            let want = want.map(|(g, l, s)| (g, l, s.map(str::to_string)));
            assert_eq!(got, want, "{raw:?}");
        }
        assert_eq!(parse_rate("10 Gb/sec (4X)").unwrap().speed_name(), Some("SDR"));
        assert_eq!(
            parse_rate("400 Gb/sec (4X NDR)").unwrap().speed_name(),
            Some("NDR")
        );
    }

    #[test]
    fn hex_and_guid() {
        assert_eq!(parse_hex_u32("0x3"), Some(3));
        assert_eq!(parse_hex_u32("0x0\n"), Some(0));
        assert_eq!(parse_hex_u32("0x04010000"), Some(0x0401_0000));
        assert_eq!(parse_hex_u32("3"), None);
        assert_eq!(parse_hex_u32("0xzz"), None);
        assert_eq!(parse_guid("0a7f:bc12:45ef:d23b"), Some(0x0a7f_bc12_45ef_d23b));
        assert_eq!(parse_guid("0a7f:bc12:45ef"), None);
        assert_eq!(parse_guid("0a7f:bc12:45ef:d23"), None);
        assert_eq!(parse_guid("0x0a7fbc1245efd23b"), None);
    }

    #[test]
    fn gids_full_and_compressed() {
        let full = parse_gid("0000:0000:0000:0000:0000:ffff:c0a8:0101\n").unwrap();
        let short = parse_gid("::ffff:192.168.1.1").unwrap();
        assert_eq!(full, short);
        assert_eq!(full.ipv4_mapped(), Some(std::net::Ipv4Addr::new(192, 168, 1, 1)));
        assert_eq!(full.full(), "0000:0000:0000:0000:0000:ffff:c0a8:0101");
        let ll = parse_gid("fe80:0000:0000:0000:0ac0:ebff:fe79:391a").unwrap();
        assert!(ll.is_link_local() && !ll.is_empty_slot() && ll.ipv4_mapped().is_none());
        assert_eq!(ll.full(), "fe80:0000:0000:0000:0ac0:ebff:fe79:391a");
        assert!(
            parse_gid("fe80:0000:0000:0000:0000:0000:0000:0000")
                .unwrap()
                .is_empty_slot()
        );
        assert!(
            parse_gid("0000:0000:0000:0000:0000:0000:0000:0000")
                .unwrap()
                .is_empty_slot()
        );
        // IPv4-compatible (no ffff) is not mapped.
        assert_eq!(parse_gid("::c0a8:0101").unwrap().ipv4_mapped(), None);
        let flid = parse_gid("fec0:0000:0012:0000:0000:0000:0000:0001").unwrap();
        assert_eq!(flid.flid(), 0x12);
        assert_eq!(parse_gid("nonsense"), None);
        assert_eq!(parse_gid(""), None);
    }

    #[test]
    fn gid_types() {
        assert_eq!(GidType::parse("IB/RoCE v1"), Some(GidType::IbRoceV1));
        assert_eq!(GidType::parse("RoCE v1"), Some(GidType::IbRoceV1));
        assert_eq!(GidType::parse("RoCE v2"), Some(GidType::RoceV2));
        assert_eq!(GidType::parse("v2"), None);
        assert_eq!(GidType::parse(""), None);
    }

    #[test]
    fn counters_text() {
        assert_eq!(parse_counter("12345\n"), Some(CounterText::Value(12345)));
        assert_eq!(parse_counter("N/A (no PMA)\n"), Some(CounterText::NoPma));
        assert_eq!(
            parse_counter("18446744073709551615"),
            Some(CounterText::Value(u64::MAX))
        );
        assert_eq!(parse_counter("-1"), None);
        assert_eq!(parse_counter(""), None);
    }

    #[test]
    fn widths() {
        assert_eq!(pma_spec("symbol_error", true).width_bits, 16);
        assert_eq!(pma_spec("link_downed", true).width_bits, 8);
        assert_eq!(pma_spec("local_link_integrity_errors", true).width_bits, 4);
        assert_eq!(pma_spec("port_xmit_wait", true).width_bits, 32);
        assert_eq!(pma_spec("port_xmit_data", false).width_bits, 32);
        assert_eq!(pma_spec("port_xmit_data", true).width_bits, 64);
        assert_eq!(pma_spec("port_rcv_data", true).bytes_per_unit, Some(4));
        assert_eq!(pma_spec("port_rcv_packets", true).bytes_per_unit, None);
        assert_eq!(hw_spec("local_ack_timeout_err", true).width_bits, 32);
        assert_eq!(hw_spec("vport_out_of_buffer", true).width_bits, 32);
        assert_eq!(hw_spec("np_cnp_sent", true).width_bits, 64);
        assert_eq!(hw_spec("rx_icrc_encapsulated", true).width_bits, 64);
        assert_eq!(hw_spec("local_ack_timeout_err", false).width_bits, 64);
        assert_eq!(hw_spec("np_cnp_sent", true).overflow, Overflow::Wraps);
    }

    #[test]
    fn deltas_wrap_and_saturate() {
        let sat16 = pma_spec("symbol_error", true);
        let sat8 = pma_spec("link_downed", true);
        let q32 = hw_spec("packet_seq_err", true);
        let w64 = hw_spec("np_cnp_sent", true);
        let v = |value, wrapped| Delta::Value { value, wrapped };
        let cases = [
            (10, 25, sat16, v(15, false)),
            (0, 0, sat16, v(0, false)),
            (65530, 65535, sat16, Delta::Saturated { at_least: 5 }),
            (65535, 65535, sat16, Delta::Saturated { at_least: 0 }),
            (200, 3, sat8, Delta::Reset { after: 3 }),
            (254, 255, sat8, Delta::Saturated { at_least: 1 }),
            (4_294_967_290, 4, q32, v(10, true)),
            (4_294_967_295, 0, q32, v(1, true)),
            (7, 9, q32, v(2, false)),
            (u64::MAX - 1, 1, w64, v(3, true)),
        ];
        for (b, a, spec, want) in cases {
            assert_eq!(counter_delta(b, a, spec), want, "{b} -> {a} ({spec:?})");
        }
        assert_eq!(Delta::Saturated { at_least: 5 }.exact(), None);
        assert_eq!(Delta::Saturated { at_least: 5 }.lower_bound(), 5);
    }
}
