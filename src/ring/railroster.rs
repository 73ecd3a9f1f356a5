//! `--rails` across nodes, before any rail's ring: every node tells rank 0 its rail slots
//! on the base coordinator port (one JSON line each way), and rank 0 answers each node with
//! its seat in each rail's ring. Rail k's ring is formed by the nodes that drive rail k, in
//! node order (renumbered 0..m: the coordinator and the data plane see an ordinary ring of
//! m ranks), so one node without rail k leaves rail k untested only on itself. Rank 0 hosts
//! every rail's coordinator (port + k), also one it does not drive. Then the same listener
//! serves rail 0's coordinator. Every wait has a deadline; a declaration is checked like a
//! hello (token, world, rank, bounded plain-text rail fields).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::ring::collective::transport::tcp::connect_not_self;
use crate::ring::coordinator::check_rails;
use crate::ring::model::{RailPort, Rank, printable};

/// Tags a declaration, so nothing else on the port is read as one.
const MAGIC: &str = "fabprobe-rails-roster/1";
/// The longest line either side reads (32 rails of 255-byte fields fit many times over).
const MAX_LINE: u64 = 256 * 1024;
/// One node's declaration must arrive this soon after it connected.
const READ_WITHIN: Duration = Duration::from_secs(5);
/// Declarations read at once; connections beyond are closed unread (a flood on the port).
const MAX_READERS: usize = 256;

/// What one node declares: its rank and host, and every rail slot it has (driven or not).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Declaration {
    pub rank: Rank,
    pub host: String,
    pub slots: Vec<RailPort>,
}

#[derive(Serialize, Deserialize)]
struct Ask {
    magic: String,
    token: String,
    world: u32,
    node: Declaration,
}

/// A node's place in one rail's ring: its rank there and the ring's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seat {
    pub rail: u32,
    pub rank: Rank,
    pub world: u32,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Answer {
    Seats(Vec<Seat>),
    Refused(String),
}

/// Rank 0's view after the exchange.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Roster {
    /// The job's node count.
    pub world: u32,
    /// Every node that declared, by rank (rank 0 included).
    pub nodes: BTreeMap<Rank, Declaration>,
    /// Each rail of this job and the node ranks of its ring, in ring order (a node that
    /// never declared is kept on every rail: its ring names it as missing, as without rails).
    pub rings: BTreeMap<u32, Vec<Rank>>,
    /// Ranks that did not declare within the join window.
    pub silent: Vec<Rank>,
}

impl Roster {
    /// The seats of node `rank`: the rails whose ring has it and at least one other node.
    pub fn seats(&self, rank: Rank) -> Vec<Seat> {
        seats_of(&self.rings, rank)
    }
}

fn seats_of(rings: &BTreeMap<u32, Vec<Rank>>, rank: Rank) -> Vec<Seat> {
    rings
        .iter()
        .filter(|(_, nodes)| nodes.len() >= 2)
        .filter_map(|(&rail, nodes)| {
            let at = nodes.iter().position(|&r| r == rank)?;
            Some(Seat {
                rail,
                rank: at as Rank,
                world: nodes.len() as u32,
            })
        })
        .collect()
}

/// The rails of this job and who drives each. `wanted`: the rails the flag names (None:
/// `all`, a rail at least half the nodes have a slot for, as the job's report judges). A
/// node drives rail k if its slot k is usable; a node that did not declare is put on
/// every rail. Pure.
pub fn plan(
    nodes: &BTreeMap<Rank, Declaration>,
    world: u32,
    wanted: Option<&[u32]>,
) -> BTreeMap<u32, Vec<Rank>> {
    let silent = |r: &Rank| !nodes.contains_key(r);
    let mut rails: Vec<u32> = nodes
        .values()
        .flat_map(|d| d.slots.iter().map(|s| s.rail))
        .chain(wanted.unwrap_or(&[]).iter().copied())
        .collect();
    rails.sort_unstable();
    rails.dedup();
    let quiet = (0..world).filter(silent).count() as u32;
    rails
        .into_iter()
        .filter(|k| match wanted {
            Some(w) => w.contains(k),
            None => {
                let has = nodes
                    .values()
                    .filter(|d| d.slots.iter().any(|s| s.rail == *k))
                    .count() as u32;
                (has + quiet) * 2 >= world.max(1)
            }
        })
        .map(|k| {
            let ring = (0..world)
                .filter(|r| silent(r) || nodes[r].slots.iter().any(|s| s.rail == k && s.usable))
                .collect();
            (k, ring)
        })
        .collect()
}

/// A declaration as rank 0 checks it. Pure.
fn check(ask: &Ask, token: &str, world: u32) -> Result<(), String> {
    if ask.magic != MAGIC {
        return Err("not a rail declaration".into());
    }
    if ask.token != token {
        return Err("wrong token (another job's rank?)".into());
    }
    if ask.world != world {
        return Err(format!(
            "rank {} says the world is {} ranks, rank 0 has {world}",
            ask.node.rank, ask.world
        ));
    }
    if ask.node.rank == 0 || ask.node.rank >= world {
        return Err(format!(
            "rank {} is not a rank from 1 to {}",
            ask.node.rank,
            world - 1
        ));
    }
    if ask.node.host.len() > 255 || printable(&ask.node.host, 255) != ask.node.host {
        return Err(format!("rank {}'s host name is not plain text", ask.node.rank));
    }
    check_rails(&ask.node.slots).map_err(|why| format!("rank {}'s rails: {why}", ask.node.rank))
}

/// One line of at most [`MAX_LINE`] bytes, within the stream's read timeout.
fn read_line(s: &TcpStream) -> Result<String, String> {
    let mut line = String::new();
    BufReader::new(s.take(MAX_LINE))
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    if !line.ends_with('\n') {
        return Err(if line.is_empty() {
            "closed before a line came".into()
        } else {
            "a line longer than 256 KiB, or cut short".into()
        });
    }
    Ok(line)
}

fn write_line<T: Serialize>(mut s: &TcpStream, v: &T) -> std::io::Result<()> {
    let mut b = serde_json::to_vec(v).map_err(std::io::Error::other)?;
    b.push(b'\n');
    s.set_write_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(&b)
}

/// Rank 0: read every other node's declaration on `listener` until all `world` nodes have
/// declared or `join_timeout` has passed, then answer each with its seats. Connections that
/// are not a declaration of this job are answered with why and closed; `refused` lists them.
pub fn gather(
    listener: &TcpListener,
    token: &str,
    me: Declaration,
    world: u32,
    wanted: Option<&[u32]>,
    join_timeout: Duration,
) -> Result<(Roster, Vec<String>), String> {
    let deadline = Instant::now() + join_timeout;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("rail roster: cannot poll the coordinator port: {e}"))?;
    let (tx, rx) = mpsc::channel::<(TcpStream, SocketAddr, Result<Ask, String>)>();
    let readers = Arc::new(AtomicUsize::new(0));
    let mut nodes = BTreeMap::from([(0, me)]);
    let mut waiting: BTreeMap<Rank, TcpStream> = BTreeMap::new();
    let mut refused = Vec::new();
    while (nodes.len() as u32) < world && Instant::now() < deadline {
        match listener.accept() {
            Ok((s, peer)) if readers.load(Ordering::Relaxed) < MAX_READERS => {
                readers.fetch_add(1, Ordering::Relaxed);
                let (tx, readers) = (tx.clone(), readers.clone());
                thread::spawn(move || {
                    let ask = s
                        .set_nonblocking(false)
                        .and_then(|_| s.set_read_timeout(Some(READ_WITHIN)))
                        .map_err(|e| e.to_string())
                        .and_then(|_| read_line(&s))
                        .and_then(|l| serde_json::from_str::<Ask>(&l).map_err(|e| e.to_string()));
                    readers.fetch_sub(1, Ordering::Relaxed);
                    // Read after rank 0 stopped waiting: say so, never a silent close.
                    if let Err(mpsc::SendError((s, _, _))) = tx.send((s, peer, ask)) {
                        let _ = write_line(&s, &Answer::Refused(late(join_timeout)));
                    }
                });
            }
            Ok((_, peer)) => refused.push(format!("{peer}: too many connections at once")),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => refused.push(format!("accept: {e}")),
        }
        while let Ok((s, peer, ask)) = rx.recv_timeout(Duration::from_millis(20)) {
            match ask.and_then(|a| check(&a, token, world).map(|_| a)) {
                Ok(a) if nodes.contains_key(&a.node.rank) => {
                    let why = format!("rank {} declared its rails already", a.node.rank);
                    let _ = write_line(&s, &Answer::Refused(why.clone()));
                    refused.push(format!("{peer}: {why}"));
                }
                Ok(a) => {
                    waiting.insert(a.node.rank, s);
                    nodes.insert(a.node.rank, a.node);
                }
                Err(why) => {
                    let why = printable(&why, 240);
                    let _ = write_line(&s, &Answer::Refused(why.clone()));
                    refused.push(format!("{peer}: {why}"));
                }
            }
        }
    }
    // Declarations read while the window closed: answered, not dropped.
    while let Ok((s, peer, _)) = rx.try_recv() {
        let why = late(join_timeout);
        let _ = write_line(&s, &Answer::Refused(why.clone()));
        refused.push(format!("{peer}: {why}"));
    }
    drop(rx);
    // The coordinator of rail 0 takes the listener over.
    listener
        .set_nonblocking(false)
        .map_err(|e| format!("rail roster: {e}"))?;
    let rings = plan(&nodes, world, wanted);
    for (&r, s) in &waiting {
        let _ = write_line(s, &Answer::Seats(seats_of(&rings, r)));
    }
    let silent = (0..world).filter(|r| !nodes.contains_key(r)).collect();
    Ok((
        Roster {
            world,
            nodes,
            rings,
            silent,
        },
        refused,
    ))
}

/// Why a declaration read after rank 0's join window is not seated.
fn late(join_timeout: Duration) -> String {
    format!(
        "rank 0's join window ({} s, --join-timeout) ended before this node's rails declaration \
         was read; its rails are named missing on every rail's ring",
        join_timeout.as_secs_f64()
    )
}

/// Any other node: declare this node's rails to rank 0 at `coordinator` (retrying until
/// the join window ends: rank 0 may start later) and wait for its seats (rank 0 waits up to
/// its own join window for the last node).
pub fn declare(
    coordinator: &str,
    token: &str,
    me: Declaration,
    world: u32,
    join_timeout: Duration,
) -> Result<Vec<Seat>, String> {
    let start = Instant::now();
    let deadline = start + join_timeout;
    let ask = Ask {
        magic: MAGIC.into(),
        token: token.into(),
        world,
        node: me,
    };
    let mut last = String::from("not tried");
    let s = loop {
        if Instant::now() >= deadline {
            return Err(format!(
                "rail roster: cannot reach rank 0 at {coordinator} within {} s: {last}",
                join_timeout.as_secs()
            ));
        }
        let addrs: Vec<SocketAddr> = match coordinator.to_socket_addrs() {
            Ok(a) => a.collect(),
            Err(e) => {
                last = format!("cannot resolve: {e}");
                Vec::new()
            }
        };
        let got = addrs
            .iter()
            .find_map(|a| match connect_not_self(a, Duration::from_secs(2)) {
                Ok(s) => Some(s),
                Err(e) => {
                    last = e.to_string();
                    None
                }
            });
        if let Some(s) = got {
            break s;
        }
        thread::sleep(Duration::from_millis(100));
    };
    write_line(&s, &ask).map_err(|e| format!("rail roster: sending to rank 0 at {coordinator}: {e}"))?;
    // Rank 0 answers when the last node declared, at most its join window after it started.
    let wait = join_timeout + join_timeout.saturating_sub(start.elapsed()) + Duration::from_secs(5);
    s.set_read_timeout(Some(wait))
        .map_err(|e| format!("rail roster: {e}"))?;
    let line = read_line(&s).map_err(|e| {
        format!(
            "rail roster: no answer from rank 0 at {coordinator} within {} s: {e}",
            wait.as_secs()
        )
    })?;
    match serde_json::from_str::<Answer>(&line) {
        Ok(Answer::Seats(v)) => Ok(v),
        Ok(Answer::Refused(why)) => Err(format!(
            "rail roster: rank 0 at {coordinator} refused this node: {}",
            printable(&why, 240)
        )),
        Err(e) => Err(format!(
            "rail roster: rank 0 at {coordinator} answered no seats: {e}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(rail: u32, usable: bool) -> RailPort {
        RailPort {
            rail,
            device: format!("eth{}", rail + 1),
            port: None,
            netdev: Some(format!("eth{}", rail + 1)),
            state: Some(if usable { "up" } else { "down" }.into()),
            usable,
            label: None,
            address: None,
        }
    }

    fn node(rank: Rank, slots: Vec<RailPort>) -> (Rank, Declaration) {
        (
            rank,
            Declaration {
                rank,
                host: format!("node-{rank}"),
                slots,
            },
        )
    }

    #[test]
    fn plan_table() {
        let two = |r| node(r, vec![slot(0, true), slot(1, true)]);
        // node 1's rail 1 down: rail 1's ring is nodes 0 and 2.
        let nodes = BTreeMap::from([two(0), node(1, vec![slot(0, true), slot(1, false)]), two(2)]);
        let p = plan(&nodes, 3, None);
        assert_eq!(p, BTreeMap::from([(0, vec![0, 1, 2]), (1, vec![0, 2])]));
        assert_eq!(
            seats_of(&p, 2),
            [
                Seat {
                    rail: 0,
                    rank: 2,
                    world: 3
                },
                Seat {
                    rail: 1,
                    rank: 1,
                    world: 2
                }
            ]
        );
        assert_eq!(
            seats_of(&p, 1),
            [Seat {
                rail: 0,
                rank: 1,
                world: 3
            }]
        );
        // Rank 0 without rail 1 at all: the others still form it; it is the majority's rail.
        let nodes = BTreeMap::from([node(0, vec![slot(0, true)]), two(1), two(2)]);
        assert_eq!(plan(&nodes, 3, None)[&1], vec![1, 2]);
        assert_eq!(
            seats_of(&plan(&nodes, 3, None), 1)[1],
            Seat {
                rail: 1,
                rank: 0,
                world: 2
            }
        );
        // Only one node has rail 1 usable: listed, but no seat (a ring needs two).
        let nodes = BTreeMap::from([two(0), node(1, vec![slot(0, true), slot(1, false)])]);
        let p = plan(&nodes, 2, None);
        assert_eq!(p[&1], vec![0]);
        assert!(seats_of(&p, 0).iter().all(|s| s.rail == 0));
        // A rail only a minority has is no rail of the job (`all`); named, it is.
        let nodes = BTreeMap::from([node(0, vec![slot(0, true)]), node(1, vec![slot(0, true)]), two(2)]);
        assert!(!plan(&nodes, 3, None).contains_key(&1));
        assert_eq!(plan(&nodes, 3, Some(&[1]))[&1], vec![2]);
        // A node that never declared is on every rail (its ring names it missing).
        let nodes = BTreeMap::from([node(0, vec![slot(0, true), slot(1, false)])]);
        assert_eq!(
            plan(&nodes, 2, None),
            BTreeMap::from([(0, vec![0, 1]), (1, vec![1])])
        );
    }

    #[test]
    fn declarations_are_checked_like_hellos() {
        let ask = |magic: &str, token: &str, world, rank, host: &str| Ask {
            magic: magic.into(),
            token: token.into(),
            world,
            node: Declaration {
                rank,
                host: host.into(),
                slots: vec![slot(0, true)],
            },
        };
        assert!(check(&ask(MAGIC, "t", 3, 1, "b"), "t", 3).is_ok());
        for (a, want) in [
            (ask("x", "t", 3, 1, "b"), "not a rail declaration"),
            (ask(MAGIC, "u", 3, 1, "b"), "wrong token"),
            (ask(MAGIC, "t", 4, 1, "b"), "says the world is 4 ranks"),
            (ask(MAGIC, "t", 3, 0, "b"), "rank 0 is not a rank from 1 to 2"),
            (ask(MAGIC, "t", 3, 3, "b"), "rank 3 is not a rank"),
            (ask(MAGIC, "t", 3, 1, "b\x1b[2J"), "host name is not plain text"),
        ] {
            let e = check(&a, "t", 3).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
    }

    #[test]
    fn three_nodes_exchange_over_loopback_and_strangers_are_refused() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let decl = |r: Rank, up: bool| Declaration {
            rank: r,
            host: format!("node-{r}"),
            slots: vec![slot(0, true), slot(1, up)],
        };
        let rank0 = thread::spawn(move || gather(&l, "job", decl(0, true), 3, None, Duration::from_secs(10)));
        // Something else on the port first: answered with why, and closed.
        let mut s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        assert!(read_line(&s).unwrap().contains("refused"));
        let others: Vec<_> = [(1, false), (2, true)]
            .into_iter()
            .map(|(r, up)| {
                let addr = addr.clone();
                thread::spawn(move || declare(&addr, "job", decl(r, up), 3, Duration::from_secs(10)))
            })
            .collect();
        let (roster, refused) = rank0.join().unwrap().unwrap();
        assert_eq!(
            roster.rings,
            BTreeMap::from([(0, vec![0, 1, 2]), (1, vec![0, 2])])
        );
        assert!(roster.silent.is_empty());
        let got: Vec<Vec<Seat>> = others.into_iter().map(|h| h.join().unwrap().unwrap()).collect();
        assert_eq!(
            got[0],
            [Seat {
                rail: 0,
                rank: 1,
                world: 3
            }]
        );
        assert_eq!(
            got[1],
            [
                Seat {
                    rail: 0,
                    rank: 2,
                    world: 3
                },
                Seat {
                    rail: 1,
                    rank: 1,
                    world: 2
                }
            ]
        );
        assert_eq!(refused.len(), 1, "{refused:?}");
    }

    /// A declaration that arrives after rank 0's window is answered with why, not closed
    /// unanswered (a node saw `closed before a line came` in a starved VM).
    #[test]
    fn a_late_declaration_is_told_why_it_has_no_seat() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let me = Declaration {
            rank: 0,
            host: "a".into(),
            slots: vec![slot(0, true)],
        };
        // Connected in the window, its line sent after the window: the reader still reads.
        let late_node = thread::spawn(move || {
            let s = TcpStream::connect(addr).unwrap();
            thread::sleep(Duration::from_millis(700));
            let ask = Ask {
                magic: MAGIC.into(),
                token: "job".into(),
                world: 2,
                node: Declaration {
                    rank: 1,
                    host: "b".into(),
                    slots: vec![slot(0, true)],
                },
            };
            write_line(&s, &ask).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            read_line(&s)
        });
        let (roster, _) = gather(&l, "job", me, 2, None, Duration::from_millis(400)).unwrap();
        assert_eq!(roster.silent, [1]);
        let answer = late_node.join().unwrap().expect("an answer, not a close");
        match serde_json::from_str::<Answer>(&answer).unwrap() {
            Answer::Refused(why) => assert!(
                why.starts_with("rank 0's join window (0.4 s, --join-timeout) ended before"),
                "{why}"
            ),
            Answer::Seats(v) => panic!("seated late: {v:?}"),
        }
    }

    #[test]
    fn a_silent_node_ends_the_wait_at_the_join_window() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let me = Declaration {
            rank: 0,
            host: "a".into(),
            slots: vec![slot(0, true)],
        };
        let t0 = Instant::now();
        let (roster, _) = gather(&l, "job", me, 2, None, Duration::from_millis(300)).unwrap();
        assert!(t0.elapsed() < Duration::from_secs(2));
        assert_eq!(roster.silent, [1]);
        assert_eq!(roster.rings[&0], vec![0, 1]);
    }
}
