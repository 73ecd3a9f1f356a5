//! The data plane's place on this host: the data interface by NCCL_SOCKET_IFNAME rules,
//! the RDMA port NCCL would use (through the job's own NCCL settings) and its fabric, each
//! rail's slot and address under `--rails`, and the facts a rank reports about its port
//! (switch port from LLDP, the most it could run at). What it decides it says with -v
//! through the CLI's [`Watch`](super::Watch).

use std::net::IpAddr;

use super::{Ctx, LaunchError, Transport};
use crate::host::Host;
use crate::nccl::ifname;
use crate::ring::collective::transport::Fabric;
use crate::ring::model::RailPort;
use crate::ring::rails::{self, RailSel};

/// One of this node's rail runs: (slot, data address, fabric, what it runs on).
pub(super) type RailSetup = (RailPort, IpAddr, Option<Box<dyn Fabric + Send>>, String);

/// The switch port at the other end of `netdev` (lldpd's table, then `--lldp-wait` of
/// listening), said with -v; None: unknown.
pub(super) fn switch_port(cx: &Ctx, host: &Host, netdev: &str) -> Option<crate::ring::model::Neighbor> {
    let l = crate::ring::portfacts::learn_neighbor(
        host,
        netdev,
        std::time::Duration::from_secs_f64(cx.net.lldp_wait_s),
    );
    match &l.neighbor {
        Some(n) => cx.log(
            1,
            format!("switch port of {netdev}: {} ({})", n.describe(), l.how),
        ),
        None => cx.log(1, format!("switch port of {netdev}: unknown: {}", l.how)),
    }
    l.neighbor
}

/// What `netdev` could run at (ethtool's link modes, the NIC's PCIe link), said with -v.
pub(super) fn port_max(cx: &Ctx, host: &Host, netdev: &str) -> Option<crate::ring::model::PortMax> {
    let (max, how) = crate::ring::portfacts::learn_port_max(host, netdev);
    cx.log(1, format!("most {netdev} could run at: {how}"));
    max
}

/// The host's addresses a data plane can use (link-local IPv6 needs a scope id the peers
/// cannot know).
pub(super) fn usable_interfaces() -> Result<Vec<ifname::IfAddr>, LaunchError> {
    Ok(ifname::list_interfaces()?
        .into_iter()
        .filter(|i| !matches!(i.addr, IpAddr::V6(v) if v.segments()[0] & 0xffc0 == 0xfe80))
        .collect())
}

/// The data interface and address, by NCCL_SOCKET_IFNAME rules; `comm_id` is the job's
/// `NCCL_COMM_ID` (from the settings model, like the interface spec).
pub(super) fn data_interface(
    spec: Option<&str>,
    comm_id: Option<&str>,
    family: Option<ifname::Family>,
    log: &dyn Fn(&str),
) -> Result<(IpAddr, String), LaunchError> {
    let ifs = usable_interfaces()?;
    let comm_id = comm_id.and_then(|v| ifname::parse_comm_id(v, &ifs));
    let choices = ifname::select(&ifs, spec, comm_id, family);
    let Some(c) = choices.first() else {
        let have: Vec<String> = ifs.iter().map(|i| format!("{} {}", i.name, i.addr)).collect();
        return Err(LaunchError::Usage(format!(
            "no data interface matches {}; this host has: {}",
            spec.unwrap_or("NCCL's default order"),
            have.join(", ")
        )));
    };
    log(&format!(
        "data interface {} {} ({})",
        c.iface.name, c.iface.addr, c.rule
    ));
    Ok((c.iface.addr, c.iface.name.clone()))
}

/// The data plane for --transport: None is TCP on the data interface. Returns the device
/// label for the report (`eth0`, or `rxe0:1 gid 1 (eth0)` on RDMA) and, where `auto` fell
/// back to tcp on this rank, why.
#[allow(clippy::type_complexity)]
pub(super) fn data_fabric(
    cx: &Ctx,
    ip: IpAddr,
    netdev: &str,
) -> Result<(Option<Box<dyn Fabric + Send>>, String, Option<String>), LaunchError> {
    if cx.net.transport == Transport::Tcp {
        return Ok((None, netdev.to_string(), None));
    }
    match rdma_fabric(cx, ip, netdev, cx.net.device.as_deref()) {
        Ok((f, label, why)) => {
            cx.log(
                1,
                format!("transport {}: rdma on {label}: {why}", cx.net.transport.name()),
            );
            Ok((Some(f), label, None))
        }
        Err(why) if cx.net.transport == Transport::Auto => {
            cx.log(1, format!("transport auto: tcp ({why})"));
            // The device stays the interface (verdicts name it in commands to run); rank 0's
            // header note says why, and names the other ranks that offered no rdma.
            Ok((None, netdev.to_string(), Some(why)))
        }
        Err(why) => Err(LaunchError::Cannot(format!(
            "--transport rdma cannot run here: {why}"
        ))),
    }
}

/// The job's host and NCCL settings (the CLI reads them once): the RDMA port choice and
/// QP attributes read the same model as the data interface, never fabprobe's own shell alone.
#[cfg(feature = "rdma")]
fn job_nccl<'a>(cx: &Ctx<'a>) -> Result<&'a super::JobEnv, String> {
    cx.job
        .ok_or_else(|| "the job's NCCL settings were not read (a --local run has none)".to_string())
}

/// The RDMA ports as the port choice sees them, and `NCCL_IB_HCA` from the job's settings.
#[cfg(feature = "rdma")]
pub(super) fn rdma_candidates(
    cx: &Ctx,
) -> Result<(Vec<crate::nccl::hca::PortCandidate>, Option<String>), String> {
    use crate::nccl::hca::PortCandidate;
    use crate::probe::gids;
    // libibverbs first: ENOSYS (no RDMA in this kernel) and "no provider" show up here.
    let names = crate::verbs::device_names().map_err(|e| e.to_string())?;
    if names.is_empty() {
        return Err("libibverbs lists no RDMA devices (hint: `fabprobe links` says what sysfs has)".into());
    }
    // The rank runs in the job's environment: NCCL's variables and files, as NCCL reads them.
    let job = job_nccl(cx)?;
    let (host, nccl) = (&job.host, &job.nccl);
    let rep = gids::probe(host, &nccl.gid_env());
    // Every port the links probe sees, in its real state (state and phys state, as
    // `fabprobe links` shows them); the GID table adds its netdevs and NCCL's GID index.
    let links = crate::probe::links::probe_sysfs(host);
    let cands: Vec<PortCandidate> = links
        .devices
        .iter()
        .filter(|d| names.contains(&d.name))
        .flat_map(|d| d.ports.iter().map(move |lp| (d, lp)))
        .map(|(d, lp)| {
            let g = rep.ports.iter().find(|p| p.device == d.name && p.port == lp.port);
            let mut netdevs: Vec<String> = g
                .map(|p| p.entries.iter().filter_map(|e| e.netdev.clone()).collect())
                .unwrap_or_default();
            netdevs.dedup();
            if netdevs.is_empty() {
                netdevs.extend(lp.netdev.clone());
            }
            PortCandidate {
                device: d.name.clone(),
                port: lp.port,
                state: rails::link_state(lp.state.as_ref(), lp.phys_state.as_ref()),
                link_layer: lp
                    .link_layer
                    .clone()
                    .or_else(|| g.and_then(|p| p.link_layer.clone())),
                netdevs,
                gid_index: g.and_then(|p| p.nccl.index),
                gid_reason: g
                    .map(|p| p.nccl.reason.clone())
                    .unwrap_or_else(|| "no GID table for this port".into()),
            }
        })
        .collect();
    Ok((cands, nccl.value("NCCL_IB_HCA").map(str::to_string)))
}

#[cfg(not(feature = "rdma"))]
pub(super) fn rdma_candidates(
    _cx: &Ctx,
) -> Result<(Vec<crate::nccl::hca::PortCandidate>, Option<String>), String> {
    Err("this fabprobe was built without the `rdma` feature (libibverbs)".into())
}

/// The RDMA fabric on the port `device` names (`--device`, or one rail's `dev:port`), else
/// the one NCCL's rules pick for `netdev`.
#[cfg(feature = "rdma")]
#[allow(clippy::type_complexity)]
pub(super) fn rdma_fabric(
    cx: &Ctx,
    ip: IpAddr,
    netdev: &str,
    device: Option<&str>,
) -> Result<(Box<dyn Fabric + Send>, String, String), String> {
    use crate::nccl::hca;
    use crate::ring::collective::transport::rdma::{AutoFabric, RdmaFabric, RdmaPort, RdmaSettings};
    let (cands, hca_env) = rdma_candidates(cx)?;
    let c = hca::choose_port(&cands, device, hca_env.as_deref(), Some(netdev), cx.net.gid_index)?;
    let (port, gid) = (
        u8::try_from(c.port).map_err(|_| format!("port {} is out of range", c.port))?,
        u8::try_from(c.gid_index).map_err(|_| format!("GID index {} is out of range", c.gid_index))?,
    );
    let nccl = &job_nccl(cx)?.nccl;
    let settings = RdmaSettings::with_nccl_env(&c.device, port, gid, |k| nccl.value(k).map(str::to_string));
    let p = RdmaPort::open(settings).map_err(|e| e.to_string())?;
    let label = format!("{} ({netdev})", p.label());
    let f = RdmaFabric::bind(ip, p).map_err(|e| format!("cannot listen on {ip}: {e}"))?;
    let f: Box<dyn Fabric + Send> = if cx.net.transport == Transport::Auto {
        Box::new(AutoFabric::new(f).map_err(|e| e.to_string())?)
    } else {
        Box::new(f)
    };
    Ok((f, label, c.why))
}

#[cfg(not(feature = "rdma"))]
#[allow(clippy::type_complexity)]
pub(super) fn rdma_fabric(
    _cx: &Ctx,
    _ip: IpAddr,
    _netdev: &str,
    _device: Option<&str>,
) -> Result<(Box<dyn Fabric + Send>, String, String), String> {
    Err("this fabprobe was built without the `rdma` feature (libibverbs)".into())
}

/// Over rdma (or `auto` with a usable port): this node's RDMA rail slots; None over tcp.
pub(super) fn rdma_rails(cx: &Ctx) -> Result<Option<Vec<RailPort>>, LaunchError> {
    Ok(match cx.net.transport {
        Transport::Tcp => None,
        _ => match rdma_candidates(cx).map(|(c, hca)| {
            let slots = rails::rdma_slots(&c, cx.net.device.as_deref(), hca.as_deref());
            // A `--device` entry this node lacks is its missing rail, not its error.
            for p in slots.iter().filter(|p| p.state.as_deref() == Some(rails::ABSENT)) {
                let have: Vec<String> = c.iter().map(|x| format!("{}:{}", x.device, x.port)).collect();
                cx.log(
                    0,
                    format!(
                        "{}: --device names no RDMA port of this node ({}): this rail is missing here",
                        p.describe(),
                        if have.is_empty() {
                            "none".into()
                        } else {
                            have.join(", ")
                        }
                    ),
                );
            }
            slots
        }) {
            Ok(slots) if slots.iter().any(|p| p.usable) => Some(slots),
            Ok(_) if cx.net.transport == Transport::Rdma => {
                return Err(LaunchError::Cannot(
                    "--transport rdma --rails: no ACTIVE RDMA port here".into(),
                ));
            }
            Err(why) if cx.net.transport == Transport::Rdma => {
                return Err(LaunchError::Cannot(format!(
                    "--transport rdma cannot run here: {why}"
                )));
            }
            Ok(_) | Err(_) => {
                cx.log(1, "transport auto: tcp rails (no usable RDMA port)");
                None
            }
        },
    })
}

/// This node's rail slots and, for each selected rail it drives, its setup (over tcp: the
/// interface's address; over rdma: that port, its netdev's address).
pub(super) fn rail_setups(
    cx: &Ctx,
    sel: &RailSel,
    spec: Option<&str>,
) -> Result<(Vec<RailPort>, Vec<RailSetup>), LaunchError> {
    let ifs = usable_interfaces()?;
    let rdma = rdma_rails(cx)?;
    let (slots, addrs): (Vec<RailPort>, Vec<Option<IpAddr>>) = match &rdma {
        Some(slots) => {
            // The rail's handshake listens on its own netdev's address, else the data interface's.
            let fallback = data_interface(spec, None, None, &|s| cx.log(1, s))
                .ok()
                .map(|x| x.0);
            let addr = |p: &RailPort| {
                p.netdev
                    .as_deref()
                    .and_then(|n| ifs.iter().find(|i| i.name == n && i.addr.is_ipv4()))
                    .map(|i| i.addr)
                    .or(fallback)
            };
            (slots.clone(), slots.iter().map(addr).collect())
        }
        None => rails::tcp_slots(&ifs, spec)
            .into_iter()
            .map(|(p, ip)| (p, Some(ip)))
            .unzip(),
    };
    if slots.is_empty() {
        return Err(LaunchError::Usage(format!(
            "--rails: no rail here ({}); hint: --ifname or --device lists them",
            if rdma.is_some() {
                "no RDMA port"
            } else {
                "no interface matches"
            }
        )));
    }
    let mut runs = Vec::new();
    for p in rails::select(&slots, sel).into_iter().filter(|p| p.usable) {
        let idx = slots.iter().position(|s| s.rail == p.rail).unwrap_or(0);
        let Some(ip) = addrs[idx] else {
            cx.log(
                0,
                format!("{}: no IPv4 address to run on; it will be missing", p.describe()),
            );
            continue;
        };
        let netdev = p.netdev.clone().unwrap_or_else(|| p.device.clone());
        if rdma.is_some() {
            let dev = format!("{}:{}", p.device, p.port.unwrap_or(1));
            let (f, label, why) = rdma_fabric(cx, ip, &netdev, Some(&dev))
                .map_err(|e| LaunchError::Cannot(format!("{}: {e}", p.describe())))?;
            cx.log(1, format!("{}: rdma on {label}: {why}", p.describe()));
            runs.push((p, ip, Some(f), label));
        } else {
            runs.push((p, ip, None, netdev));
        }
    }
    Ok((slots, runs))
}

/// A run's one rail: its slot, its setup, and rank 0's transport note.
pub(super) type OneRail = (Vec<RailPort>, Vec<RailSetup>, Option<String>);

/// A run without `--rails` (R = 1): its one rail is the data interface NCCL_SOCKET_IFNAME
/// rules pick (with the job's NCCL_COMM_ID and NCCL_SOCKET_FAMILY, as NCCL picks it), on
/// the transport `--transport` allows there. Returns the slot, its setup and, on rank 0
/// where `auto` fell back to tcp, the report's note saying why.
pub(super) fn one_rail(
    cx: &Ctx,
    spec: Option<&str>,
    rank: crate::ring::model::Rank,
) -> Result<OneRail, LaunchError> {
    let log = |s: &str| cx.log(1, s);
    let value = |k: &str| cx.nccl().and_then(|n| n.value(k));
    let family = ifname::Family::parse(value("NCCL_SOCKET_FAMILY"));
    let (ip, dev) = data_interface(spec, value("NCCL_COMM_ID"), family, &log)?;
    let (fabric, label, no_rdma) = data_fabric(cx, ip, &dev)?;
    if let Some((gbs, from)) = crate::ring::portread::line_rate(&Host::live(), &dev) {
        log(&format!("line rate of {dev}: {gbs:.3} GB/s (from {from})"));
    }
    // Rank 0 fell back to tcp itself: its own reason is the one it can name.
    let note = no_rdma.filter(|_| rank == 0).map(|why| {
        format!(
            "auto chose tcp: rank 0 ({}) has no usable RDMA port: {why}",
            super::hostname()
        )
    });
    let slot = RailPort {
        rail: 0,
        device: dev.clone(),
        port: None,
        netdev: Some(dev),
        state: None,
        usable: true,
        label: None,
        address: None,
    };
    Ok((vec![slot.clone()], vec![(slot, ip, fabric, label)], note))
}
