//! Which peers each rank talks to, and so which part of the rank table it is sent: its
//! successor and predecessor in every ring of the sweep ([`sweep_rings`]; one per rail when
//! a node drives several), and, with each scan order, the two ranks of that order. The bytes
//! the coordinator writes grow with the world (O(rings) entries per rank), not with its square.
//!
//! API: [`sweep_rings`]`(world)`, [`peers`]`(world, rings)`, [`part`], [`encode_entries`] (each
//! entry encoded once), [`table_frames`] (a part's frames spliced from them). Pure.

use crate::ring::control::Frame;
#[cfg(test)]
use crate::ring::control::frame;
use crate::ring::model::{Rank, RankInfo};
#[cfg(test)]
use crate::ring::wire::Msg;
use crate::ring::wire::{self, MAX_FRAME};

/// One ring: `next[i]` is the rank that rank `i` sends to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingOrder {
    pub next: Vec<Rank>,
}

/// The sweep's rings for `world` ranks: the natural ring (rank i sends to i + 1). Rails
/// supply their own (one per rail) through `CoordinatorConfig::rings`.
pub(crate) fn sweep_rings(world: u32) -> Vec<RingOrder> {
    vec![RingOrder {
        next: (0..world).map(|i| (i + 1) % world.max(1)).collect(),
    }]
}

/// Every rank's peers in `rings`: its successor and predecessor in each, without itself,
/// sorted. Entries outside the world are ignored. Pure; O(world x rings).
pub(crate) fn peers(world: u32, rings: &[RingOrder]) -> Vec<Vec<Rank>> {
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
pub(crate) fn scan_peers(r: Rank, world: u32, shift: u32) -> [Rank; 2] {
    let n = world.max(1);
    let k = shift % n;
    [(r + k) % n, (r + n - k) % n]
}

/// Rank `r`'s part of the table: itself and its peers, in rank order, those of the `world`
/// only (entry i of the table is rank i).
pub(crate) fn part(r: Rank, peers: &[Rank], world: usize) -> Vec<Rank> {
    let mut want: Vec<Rank> = peers.iter().copied().chain([r]).collect();
    want.sort_unstable();
    want.dedup();
    want.retain(|&p| (p as usize) < world);
    want
}

/// Every rank's table entry as it is encoded, once: an entry goes to about three ranks per
/// ring, and encoding it for each of them (twice: to size the frame, then in it) was most of
/// building 16,384 tables.
pub(crate) fn encode_entries(ranks: &[RankInfo]) -> Result<Vec<Vec<u8>>, String> {
    ranks
        .iter()
        .map(|i| {
            serde_json::to_vec(i).map_err(|e| format!("rank {}'s table entry cannot be encoded: {e}", i.rank))
        })
        .collect()
}

/// Bytes of entries per table frame: half the frame limit, so a frame stays well under it
/// whatever the entries hold (a validated entry is at most ~16 KiB: four fields of 255
/// bytes, the capabilities, 32 rails).
pub(crate) const TABLE_FRAME_BYTES: usize = MAX_FRAME / 2;

/// A rank's part of the table, its entries encoded ([`encode_entries`]), as frames of at
/// most [`TABLE_FRAME_BYTES`] of entries each, the last with `more: false`: the bytes
/// `frame(&Msg::Table { .. })` writes, spliced from the entries. An error names the frame
/// limit (never dropped in silence).
pub(crate) fn table_frames(part: &[&[u8]], shared_transport: Option<&str>) -> Result<Vec<Frame>, String> {
    let mut chunks: Vec<&[&[u8]]> = Vec::new();
    let (mut from, mut bytes) = (0, 0);
    for (i, e) in part.iter().enumerate() {
        // The entry and a comma.
        let n = e.len() + 1;
        if bytes + n > TABLE_FRAME_BYTES && i > from {
            chunks.push(&part[from..i]);
            (from, bytes) = (i, 0);
        }
        bytes += n;
    }
    chunks.push(&part[from..]);
    let shared = match shared_transport {
        Some(t) => {
            let t = serde_json::to_vec(t).map_err(|e| format!("its table message cannot be encoded: {e}"))?;
            [&br#","shared_transport":"#[..], &t].concat()
        }
        None => Vec::new(),
    };
    let n = chunks.len();
    chunks
        .into_iter()
        .enumerate()
        .map(|(k, entries)| {
            let mut parts: Vec<&[u8]> = Vec::with_capacity(2 * entries.len() + 4);
            parts.push(br#"{"type":"table","ranks":["#);
            for (j, e) in entries.iter().enumerate() {
                if j > 0 {
                    parts.push(b",");
                }
                parts.push(e);
            }
            parts.push(if k + 1 < n {
                br#"],"more":true"#
            } else {
                br#"],"more":false"#
            });
            parts.push(&shared);
            parts.push(b"}");
            wire::frame_of(&parts).map(Frame::from).map_err(|e| match e {
                wire::WireError::TooLarge(n) => format!(
                    "its table message is {n} bytes, over the control frame limit of {MAX_FRAME} bytes"
                ),
                e => format!("its table message cannot be encoded: {e}"),
            })
        })
        .collect()
}

/// The transport every rank offers, when they all offer the same one (`--transport auto`
/// uses rdma only then, and every rank must decide alike). Pure.
pub(crate) fn shared_transport(ranks: &[RankInfo]) -> Option<&str> {
    let first = ranks.first()?.transport.as_str();
    ranks.iter().all(|i| i.transport == first).then_some(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `part`'s frames from `ranks` (the whole table, in rank order).
    fn frames_of(part_ranks: &[Rank], ranks: &[RankInfo], shared: Option<&str>) -> Vec<Frame> {
        let entries = encode_entries(ranks).unwrap();
        let part: Vec<&[u8]> = part_ranks.iter().map(|&p| &entries[p as usize][..]).collect();
        table_frames(&part, shared).unwrap()
    }

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
            for f in frames_of(&part(r, &peers[r as usize], ranks.len()), &ranks, Some("tcp")) {
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
        let all: Vec<Rank> = (0..4000).collect();
        let frames = frames_of(&all, &ranks, None);
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
        assert_eq!(table_frames(&[], None).unwrap().len(), 1);
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
        let all: Vec<Rank> = (0..256).collect();
        let frames = frames_of(&all, &ranks, None);
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

    /// The spliced frames are byte for byte what serde writes for the same message, cut or not.
    #[test]
    fn table_frames_are_the_bytes_serde_writes() {
        let mut ranks: Vec<RankInfo> = (0..3000).map(|r| info(r, 200)).collect();
        ranks[1].host = "quote\" back\\ tab\t \u{e9}".into();
        for (part_ranks, shared) in [
            (vec![0, 1, 2], Some("tcp")),
            (vec![1], None),
            (vec![], Some("rdma \"x\"")),
            ((0..3000).collect::<Vec<Rank>>(), Some("tcp")),
        ] {
            let frames = frames_of(&part_ranks, &ranks, shared);
            let mut got = Vec::new();
            for (i, f) in frames.iter().enumerate() {
                let m = wire::read_msg(&mut &f[..]).unwrap();
                assert_eq!(&frame(&m).unwrap()[..], &f[..], "frame {i}");
                match m {
                    Msg::Table {
                        ranks,
                        more,
                        shared_transport,
                    } => {
                        assert_eq!(
                            (more, shared_transport.as_deref()),
                            (i + 1 < frames.len(), shared)
                        );
                        got.extend(ranks.into_iter().map(|x| x.rank));
                    }
                    other => panic!("{other:?}"),
                }
            }
            assert_eq!(got, part_ranks);
        }
        assert_eq!(part(2, &[7, 1, 1, 9], 8), vec![1, 2, 7]);
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
