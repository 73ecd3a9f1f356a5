//! `--rails`: every rail of a node in one run. Rail k is the k-th port in NCCL's order on
//! every node (`--device` lists them, else the ports `NCCL_IB_HCA` allows; over tcp the
//! interfaces `--ifname` matches), so rails are matched across nodes by order. Each rail is
//! its own ring (rail k of node i sends to rail k of node i+1) with its own coordinator
//! (every rail's control messages on the node's one connection: [`crate::ring::railmux`]),
//! so the data plane, the scan and the watchdog run per rail unchanged;
//! [`crate::ring::railmerge`] turns the rails' reports into the job's. Pure except
//! [`run_node`].

use std::net::TcpListener;
use std::sync::Arc;
use std::thread;

use crate::ring::launcher::Identity;
use crate::ring::model::RailPort;
use crate::ring::railmerge;
use crate::ring::railplan::Roster;
use crate::ring::run::{self, Failure, Options, RankOutcome, RunError, Setup};
pub use crate::ring::wire::Seat;

pub use crate::ring::model::MAX_RAILS;

// When one rail fails the node's others stop: the coordinator's room (`railstop`).
pub use crate::ring::railstop::{RailStop, STOP_GRACE, stopping_judge};

// The rail slots and the selection are the job's plan (`railplan`): pure, below the run.
pub use crate::ring::railplan::{
    ABSENT, RailSel, link_state, parse_rails, rdma_slots, select, tcp_slots, wanted,
};

/// The identity of this node on rail `rail`'s ring: the same rank, world and coordinator
/// address (every rail's control messages travel on the node's one connection, see
/// [`crate::ring::railmux`]), and the token tagged with the rail (a rank of another rail, or
/// of a run without `--rails`, is refused by the token check). Pure.
pub(crate) fn rail_identity(id: &Identity, rail: u32) -> Identity {
    Identity {
        token: format!("{}/rail{rail}", id.token),
        ..id.clone()
    }
}

/// One rail this node drives: its slot and the rank's setup on that rail's ring.
pub(crate) struct RailRun {
    pub port: RailPort,
    pub setup: Setup,
}

/// Rank 0 on a rail it does not drive: the rail's coordinator, hosted for the nodes that do.
pub(crate) struct Hosted {
    pub rail: u32,
    /// The rail's identity: its coordinator address and token, its ring's world.
    pub identity: Identity,
    /// Already bound (rank 0's loopback listener for the rail), else bound from `identity`.
    pub listener: Option<TcpListener>,
    /// The job's node rank of each of the ring's ranks (see [`run::Setup::nodes`]).
    pub nodes: Vec<crate::ring::model::Rank>,
    /// The ring ranks whose nodes never declared their rails (see [`run::Setup::silent`]).
    pub silent: std::collections::BTreeSet<crate::ring::model::Rank>,
    /// The nodes reach it through rank 0's relay (see [`run::Setup::relay`]).
    pub relay: Option<crate::ring::coordinator::RailLink>,
}

/// Run every rail of this node at once (a thread per rail, each one rank of its rail's ring,
/// and on rank 0 a thread per rail it hosts without driving), then, on rank 0, merge the
/// rails' reports into the job's. `slots` is every rail slot of the node (driven or not),
/// announced in each rail's hello; `wanted` the rails this run asks for by index (None:
/// `all`, the rails most nodes have); `roster` rank 0's across nodes (None: `--local`,
/// where every rank drives every rail). On rank 0 the rails' coordinators stop together
/// (see [`RailStop`]).
pub(crate) fn run_node(
    rails: Vec<RailRun>,
    hosted: Vec<Hosted>,
    slots: &[RailPort],
    wanted: Option<&[u32]>,
    roster: Option<&Roster>,
    opts: &Options,
    log: &(dyn Fn(u8, &str) + Sync),
) -> Result<RankOutcome, RunError> {
    if rails.is_empty() && hosted.is_empty() {
        return Err(RunError {
            kind: Failure::CannotRun,
            message: format!(
                "no rail to drive here: {}",
                slots.iter().map(slot_line).collect::<Vec<_>>().join(", ")
            ),
        });
    }
    let stop = Arc::new(RailStop::default());
    let outcomes: Vec<(RailPort, Result<RankOutcome, RunError>)> = thread::scope(|sc| {
        let mut handles: Vec<_> = rails
            .into_iter()
            .map(|mut r| {
                r.setup.rails = slots.to_vec();
                r.setup.rail_stop = Some((r.port.rail, stop.clone()));
                let port = r.port.clone();
                let h = sc.spawn(move || {
                    let rail = r.port.rail;
                    let log = |level: u8, s: &str| log(level, &format!("rail {rail}: {s}"));
                    run::run_rank(r.setup, opts, &log)
                });
                (port, h)
            })
            .collect();
        for x in hosted {
            let port = slots
                .iter()
                .find(|p| p.rail == x.rail)
                .cloned()
                .unwrap_or(RailPort {
                    rail: x.rail,
                    device: String::new(),
                    port: None,
                    netdev: None,
                    state: None,
                    usable: false,
                    label: None,
                    address: None,
                });
            let stop = stop.clone();
            let h = sc.spawn(move || {
                let rail = x.rail;
                let log = |level: u8, s: &str| log(level, &format!("rail {rail}: {s}"));
                run::host_only(
                    x.listener,
                    &x.identity,
                    opts,
                    Some((rail, stop)),
                    ((x.nodes, x.silent), x.relay),
                    &log,
                )
            });
            handles.push((port, h));
        }
        handles
            .into_iter()
            .map(|(p, h)| {
                let r = h.join().unwrap_or_else(|_| {
                    Err(RunError {
                        kind: Failure::Fault,
                        message: format!("rail {}'s thread panicked", p.rail),
                    })
                });
                (p, r)
            })
            .collect()
    });
    railmerge::merge(outcomes, wanted, roster)
}

/// `eth2 down`, `mlx5_1:1 DOWN`.
pub(crate) fn slot_line(p: &RailPort) -> String {
    let port = p.port.map(|n| format!(":{n}")).unwrap_or_default();
    format!(
        "rail {} {}{port} {}",
        p.rail,
        p.device,
        p.state.as_deref().unwrap_or("state unknown")
    )
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;
    use crate::nccl::hca::PortCandidate;
    use crate::nccl::ifname::IfAddr;
    use crate::ring::launcher::Source;
    use crate::sysfs::infiniband::NumName;

    #[test]
    fn rails_flag_table() {
        for (s, want) in [
            ("all", Ok(RailSel::All)),
            ("ALL", Ok(RailSel::All)),
            ("1", Ok(RailSel::One)),
            ("2", Ok(RailSel::Count(2))),
            ("8", Ok(RailSel::Count(8))),
            ("0,3", Ok(RailSel::List(vec![0, 3]))),
            ("3,0", Ok(RailSel::List(vec![0, 3]))),
            ("3,", Ok(RailSel::List(vec![3]))),
            ("0", Err(())),
            ("33", Err(())),
            ("x", Err(())),
            ("1,1", Err(())),
            ("1,40", Err(())),
            (",", Err(())),
        ] {
            assert_eq!(parse_rails(s).map_err(|_| ()), want, "{s}");
        }
        assert!(parse_rails("1,1").unwrap_err().contains("rail 1 is listed twice"));
    }

    fn ifa(name: &str, addr: [u8; 4], running: bool) -> IfAddr {
        IfAddr {
            name: name.into(),
            addr: IpAddr::from(addr),
            prefix_len: 24,
            running,
            scope_id: 0,
        }
    }

    #[test]
    fn tcp_rails_keep_the_slot_of_a_stopped_interface() {
        let ifs = [
            ifa("lo", [127, 0, 0, 1], true),
            ifa("eth0", [198, 18, 0, 10], true),
            ifa("eth1", [198, 19, 0, 10], true),
            ifa("eth1", [198, 19, 9, 10], true),
            ifa("eth2", [198, 19, 1, 10], false),
            ifa("eth3", [198, 19, 2, 10], true),
        ];
        let got: Vec<(String, String, bool, IpAddr)> = tcp_slots(&ifs, Some("=eth1,eth2,eth3"))
            .into_iter()
            .map(|(p, a)| (format!("{}", p.rail), p.device, p.usable, a))
            .collect();
        assert_eq!(
            got,
            vec![
                ("0".into(), "eth1".into(), true, IpAddr::from([198, 19, 0, 10])),
                ("1".into(), "eth2".into(), false, IpAddr::from([198, 19, 1, 10])),
                ("2".into(), "eth3".into(), true, IpAddr::from([198, 19, 2, 10])),
            ]
        );
        // A prefix, an exclusion: NCCL_SOCKET_IFNAME rules, in the host's order.
        let names =
            |spec| -> Vec<String> { tcp_slots(&ifs, spec).into_iter().map(|(p, _)| p.device).collect() };
        assert_eq!(names(Some("eth")), ["eth0", "eth1", "eth2", "eth3"]);
        assert_eq!(names(Some("^lo,eth0")), ["eth1", "eth2", "eth3"]);
        // No spec: NCCL's default order (running interfaces, not lo).
        assert_eq!(names(None), ["eth0", "eth1", "eth3"]);
        assert_eq!(tcp_slots(&ifs, Some("=eth2"))[0].0.state.as_deref(), Some("down"));
    }

    fn port(dev: &str, port: u32, state: &str, netdev: &str) -> PortCandidate {
        PortCandidate {
            device: dev.into(),
            port,
            state: Some(state.into()),
            link_layer: Some("Ethernet".into()),
            netdevs: vec![netdev.into()],
            gid_index: Some(3),
            gid_reason: String::new(),
        }
    }

    #[test]
    fn rdma_rails_in_nccl_order() {
        let ports = [
            port("mlx5_10", 1, "ACTIVE", "ens10"),
            port("mlx5_2", 1, "DOWN", "ens2"),
            port("mlx5_1", 1, "ACTIVE", "ens1"),
            port("mlx5_0", 1, "ACTIVE", "ens0"),
        ];
        let devs = |v: Vec<RailPort>| -> Vec<(u32, String, bool)> {
            v.into_iter().map(|p| (p.rail, p.device, p.usable)).collect()
        };
        // Device order with numbers as numbers; a DOWN port keeps its slot.
        assert_eq!(
            devs(rdma_slots(&ports, None, None)),
            vec![
                (0, "mlx5_0".into(), true),
                (1, "mlx5_1".into(), true),
                (2, "mlx5_2".into(), false),
                (3, "mlx5_10".into(), true),
            ]
        );
        // NCCL_IB_HCA prefix rules: `mlx5_1` also matches mlx5_10, as NCCL does.
        assert_eq!(
            devs(rdma_slots(&ports, None, Some("mlx5_1"))),
            vec![(0, "mlx5_1".into(), true), (1, "mlx5_10".into(), true)]
        );
        assert_eq!(
            devs(rdma_slots(&ports, None, Some("^=mlx5_0"))).len(),
            3,
            "exclusion"
        );
        // --device: exact names, in the order given.
        assert_eq!(
            devs(rdma_slots(&ports, Some("mlx5_10,mlx5_0:1"), Some("mlx5_1"))),
            vec![(0, "mlx5_10".into(), true), (1, "mlx5_0".into(), true)]
        );
        // A device this node lacks keeps its slot, absent: the rail after it is not
        // shifted onto it, and the node is named as missing that rail.
        let v = rdma_slots(&ports, Some("mlx5_7:1,mlx5_0,mlx5_9"), None);
        let got: Vec<_> = v
            .iter()
            .map(|p| (p.rail, p.device.as_str(), p.port, p.state.as_deref(), p.usable))
            .collect();
        assert_eq!(
            got,
            [
                (0, "mlx5_7", Some(1), Some("absent"), false),
                (1, "mlx5_0", Some(1), Some("ACTIVE"), true),
                (2, "mlx5_9", None, Some("absent"), false),
            ]
        );
        let s = &rdma_slots(&ports, None, None)[2];
        assert_eq!(
            (s.port, s.netdev.as_deref(), s.state.as_deref()),
            (Some(1), Some("ens2"), Some("DOWN"))
        );
        assert_eq!(s.describe(), "rail 2 (mlx5_2:1, ens2)");
    }

    #[test]
    fn selection_and_wanted_rails() {
        let slots: Vec<RailPort> = rdma_slots(
            &[
                port("mlx5_0", 1, "ACTIVE", "a"),
                port("mlx5_1", 1, "DOWN", "b"),
                port("mlx5_2", 1, "ACTIVE", "c"),
            ],
            None,
            None,
        );
        let ix = |sel: RailSel| -> Vec<u32> { select(&slots, &sel).iter().map(|p| p.rail).collect() };
        assert_eq!(ix(RailSel::All), [0, 1, 2]);
        assert_eq!(ix(RailSel::Count(2)), [0, 1]);
        assert_eq!(ix(RailSel::List(vec![2])), [2]);
        assert_eq!(ix(RailSel::Count(8)), [0, 1, 2]);
        assert_eq!(wanted(&RailSel::Count(3)), Some(vec![0, 1, 2]));
        assert_eq!(wanted(&RailSel::All), None);
    }

    #[test]
    fn link_state_names_the_phys_state_of_a_port_that_is_not_active() {
        let n = |id, name: &str| NumName {
            id,
            name: name.into(),
        };
        for (state, phys, want) in [
            (Some(n(4, "ACTIVE")), Some(n(5, "LinkUp")), Some("ACTIVE")),
            (
                Some(n(1, "DOWN")),
                Some(n(3, "Disabled")),
                Some("DOWN (phys Disabled)"),
            ),
            (
                Some(n(2, "INIT")),
                Some(n(5, "LinkUp")),
                Some("INIT (phys LinkUp)"),
            ),
            (Some(n(1, "DOWN")), None, Some("DOWN")),
            (None, Some(n(5, "LinkUp")), None),
        ] {
            assert_eq!(link_state(state.as_ref(), phys.as_ref()).as_deref(), want);
        }
    }

    #[test]
    fn rail_identity_tags_the_token() {
        let id = Identity {
            rank: 3,
            world: 8,
            coordinator: "198.18.0.10:29517".into(),
            token: "job42".into(),
            source: Source::Flags,
            coordinator_source: "--coordinator".into(),
            token_source: "--token".into(),
        };
        let r = rail_identity(&id, 2);
        assert_eq!(
            (r.rank, r.world, r.coordinator.as_str(), r.token.as_str()),
            (3, 8, "198.18.0.10:29517", "job42/rail2")
        );
    }
}
