//! Which peers each rank talks to, and so which part of the rank table it is sent: its
//! successor and predecessor in every ring of the sweep ([`sweep_rings`]; one per rail when
//! a node drives several), and, with each scan order, the two ranks of that order. The bytes
//! the coordinator writes grow with the world (O(rings) entries per rank), not with its square.
//!
//! API: [`sweep_rings`]`(world)`, [`peers`]`(world, rings)`, [`part`], [`table_frames`]. Pure.

use crate::ring::control::{Frame, frame};
use crate::ring::model::{Rank, RankInfo};
use crate::ring::wire::{MAX_FRAME, Msg};

/// One ring: `next[i]` is the rank that rank `i` sends to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingOrder {
    pub next: Vec<Rank>,
}

/// The sweep's rings for `world` ranks: the natural ring (rank i sends to i + 1). Rails
/// supply their own (one per rail) through `CoordinatorConfig::rings`.
pub fn sweep_rings(world: u32) -> Vec<RingOrder> {
    vec![RingOrder {
        next: (0..world).map(|i| (i + 1) % world.max(1)).collect(),
    }]
}

/// Every rank's peers in `rings`: its successor and predecessor in each, without itself,
/// sorted. Entries outside the world are ignored. Pure; O(world x rings).
pub fn peers(world: u32, rings: &[RingOrder]) -> Vec<Vec<Rank>> {
    let mut out: Vec<Vec<Rank>> = vec![Vec::new(); world as usize];
    for ring in rings {
        for (i, &to) in ring.next.iter().enumerate().take(world as usize) {
            if to >= world || to as usize == i {
                continue;
            }
            out[i].push(to);
            out[to as usize].push(i as Rank);
        }
    }
    for p in &mut out {
        p.sort_unstable();
        p.dedup();
    }
    out
}

/// The two peers of rank `r` in the scan order of `shift`: where it sends, where it receives
/// from. Pure.
pub fn scan_peers(r: Rank, world: u32, shift: u32) -> [Rank; 2] {
    let n = world.max(1);
    let k = shift % n;
    [(r + k) % n, (r + n - k) % n]
}

/// Rank `r`'s part of the table: its own entry and its peers', in rank order. `ranks` is
/// the whole table in rank order (entry i is rank i).
pub fn part(r: Rank, peers: &[Rank], ranks: &[RankInfo]) -> Vec<RankInfo> {
    let mut want: Vec<Rank> = peers.iter().copied().chain([r]).collect();
    want.sort_unstable();
    want.dedup();
    want.iter()
        .filter_map(|&p| ranks.get(p as usize).cloned())
        .collect()
}

/// Bytes of entries per table frame: half the frame limit, so a frame stays well under it
/// whatever the entries hold (a validated entry is at most ~16 KiB: four fields of 255
/// bytes, the capabilities, 32 rails).
pub const TABLE_FRAME_BYTES: usize = MAX_FRAME / 2;

/// Rank `r`'s part of the table as frames of at most [`TABLE_FRAME_BYTES`] of entries each,
/// the last with `more: false`. An error names the frame limit (never dropped in silence).
pub fn table_frames(part: Vec<RankInfo>, shared_transport: Option<&str>) -> Result<Vec<Frame>, String> {
    let mut chunks: Vec<Vec<RankInfo>> = vec![Vec::new()];
    let mut bytes = 0;
    for i in part {
        // The entry as it is encoded (escapes included), and a comma.
        let n = serde_json::to_vec(&i).map(|v| v.len() + 1).unwrap_or(MAX_FRAME);
        if bytes + n > TABLE_FRAME_BYTES && chunks.last().is_some_and(|c| !c.is_empty()) {
            chunks.push(Vec::new());
            bytes = 0;
        }
        bytes += n;
        if let Some(c) = chunks.last_mut() {
            c.push(i);
        }
    }
    let n = chunks.len();
    chunks
        .into_iter()
        .enumerate()
        .map(|(i, ranks)| {
            frame(&Msg::Table {
                ranks,
                more: i + 1 < n,
                shared_transport: shared_transport.map(str::to_string),
            })
        })
        .collect()
}

/// The transport every rank offers, when they all offer the same one (`--transport auto`
/// uses rdma only then, and every rank must decide alike). Pure.
pub fn shared_transport(ranks: &[RankInfo]) -> Option<&str> {
    let first = ranks.first()?.transport.as_str();
    ranks.iter().all(|i| i.transport == first).then_some(first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::wire;

    fn info(r: Rank, host_len: usize) -> RankInfo {
        RankInfo {
            neighbor: None,
            port_max: None,
            rails: Vec::new(),
            node: None,
            rank: r,
            host: "h".repeat(host_len),
            address: format!("[fd00:1234:5678:9abc:def0:1234:5678:{:x}]:29500", r),
            device: Some("mlx5_0".into()),
            transport: "tcp".into(),
            pid: Some(4_000_000 + r),
            capabilities: vec!["tcp".into(), "rdma".into()],
        }
    }

    fn total_bytes(world: u32, host_len: usize) -> (usize, usize) {
        let ranks: Vec<RankInfo> = (0..world).map(|r| info(r, host_len)).collect();
        let peers = peers(world, &sweep_rings(world));
        let mut total = 0;
        let mut largest = 0;
        for r in 0..world {
            for f in table_frames(part(r, &peers[r as usize], &ranks), Some("tcp")).unwrap() {
                total += f.len();
                largest = largest.max(f.len());
            }
        }
        (total, largest)
    }

    #[test]
    fn peers_table() {
        let p = peers(4, &sweep_rings(4));
        assert_eq!(p, vec![vec![1, 3], vec![0, 2], vec![1, 3], vec![0, 2]]);
        assert_eq!(peers(1, &sweep_rings(1)), vec![Vec::<Rank>::new()]);
        assert_eq!(peers(2, &sweep_rings(2)), vec![vec![1], vec![0]]);
        // Two rings (rails): both neighbours in each; junk entries are ignored.
        let rings = [
            RingOrder {
                next: vec![1, 2, 3, 0],
            },
            RingOrder {
                next: vec![2, 9, 0, 3],
            },
        ];
        assert_eq!(
            peers(4, &rings),
            vec![vec![1, 2, 3], vec![0, 2], vec![0, 1, 3], vec![0, 2]]
        );
        assert_eq!(scan_peers(0, 5, 2), [2, 3]);
        assert_eq!(scan_peers(4, 5, 7), [1, 2]);
    }

    /// Issue 18: the bytes of every rank's table grow with the world, not its square.
    #[test]
    fn table_bytes_grow_linearly_with_the_world() {
        let (small, _) = total_bytes(1024, 40);
        let (big, _) = total_bytes(4096, 40);
        let ratio = big as f64 / small as f64;
        assert!((3.9..4.2).contains(&ratio), "{small} -> {big}: x{ratio:.2}");
        // About three entries per rank, not the whole table.
        assert!(big < 4096 * 3 * 400, "{big}");
    }

    /// Issue 18: a world whose whole table is over the frame limit (4,096 ranks with 255-byte
    /// host names, IPv6) is still delivered: each rank's part fits.
    #[test]
    fn a_world_over_the_old_frame_limit_is_delivered_in_parts() {
        let ranks: Vec<RankInfo> = (0..4096).map(|r| info(r, 255)).collect();
        let whole = frame(&Msg::Table {
            ranks: ranks.clone(),
            more: false,
            shared_transport: None,
        });
        assert!(whole.unwrap_err().contains("over the control frame limit"));
        let (_, largest) = total_bytes(4096, 255);
        assert!(largest < 4096, "{largest}");
    }

    /// A part larger than one frame (many rails) goes in several frames, every entry kept.
    #[test]
    fn a_large_part_is_split_into_bounded_frames() {
        let ranks: Vec<RankInfo> = (0..4000).map(|r| info(r, 255)).collect();
        let frames = table_frames(ranks.clone(), None).unwrap();
        assert!(frames.len() >= 3, "{}", frames.len());
        let last = frames.len() - 1;
        let mut got = Vec::new();
        for (i, f) in frames.iter().enumerate() {
            assert!(f.len() <= TABLE_FRAME_BYTES + 1024, "{}", f.len());
            match wire::read_msg(&mut &f[..]).unwrap() {
                Msg::Table { ranks, more, .. } => {
                    assert_eq!(more, i < last);
                    got.extend(ranks);
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(got, ranks);
        assert_eq!(table_frames(Vec::new(), None).unwrap().len(), 1);
    }

    /// Entries as large as validation allows (32 rails of 255-byte fields, ~40 KB each) still
    /// go in frames under the limit: frames are cut by bytes, not by a count of entries.
    #[test]
    fn the_largest_valid_entries_fit_their_frames() {
        use crate::ring::model::RailPort;
        let big = |r: Rank| {
            let mut i = info(r, 255);
            i.rails = (0..crate::ring::model::MAX_RAILS)
                .map(|k| RailPort {
                    rail: k,
                    device: "d".repeat(255),
                    port: Some(1),
                    netdev: Some("n".repeat(255)),
                    state: Some("s".repeat(255)),
                    usable: true,
                    label: Some("l".repeat(255)),
                    address: Some("a".repeat(255)),
                })
                .collect();
            assert!(crate::ring::model::check_rails(&i.rails).is_ok());
            i
        };
        let ranks: Vec<RankInfo> = (0..256).map(big).collect();
        let frames = table_frames(ranks, None).unwrap();
        assert!(frames.len() > 8, "{}", frames.len());
        assert!(
            frames.iter().all(|f| f.len() <= MAX_FRAME),
            "{:?}",
            frames.iter().map(|f| f.len()).max()
        );
        // One rail more than allowed is refused.
        let mut one = big(0);
        let extra = one.rails[0].clone();
        one.rails.push(extra);
        assert!(
            crate::ring::model::check_rails(&one.rails)
                .unwrap_err()
                .contains("at most 32")
        );
    }

    #[test]
    fn shared_transport_table() {
        let mut r = vec![info(0, 1), info(1, 1)];
        assert_eq!(shared_transport(&r), Some("tcp"));
        r[1].transport = "rdma".into();
        assert_eq!(shared_transport(&r), None);
        assert_eq!(shared_transport(&[]), None);
    }
}
