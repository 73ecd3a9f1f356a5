//! `--rails` on rank 0: what passes between the hub (which holds every node's one control
//! connection) and each rail's coordinator, inside rank 0's process, with no socket between
//! them. A node's rail rank is a *relayed* connection of its rail's coordinator: what the node
//! sends for that rail reaches the coordinator's event loop through the rail's [`Inbox`], and
//! what the coordinator sends it goes, already tagged with the rail, into the hub's
//! [`Outbox`]. Both are queues behind a mutex, handed over in batches; a waker tells the
//! other side only when a queue goes from empty to not empty. This module owns the queues and
//! their items; the hub's loop is `railmux`, the coordinator's side `control::Plane`.

use std::collections::HashMap;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mio::Waker;

use crate::ring::control::Frame;
use crate::ring::model::Rank;
use crate::ring::tcpinfo::{self, AckState};
use crate::ring::wire::{self, Msg, WireError};

/// A relayed connection's generation: each hello a node's rail rank sends opens a new one, so
/// that what was said of an earlier connection (its close) never reaches a newer one.
pub(crate) type Epoch = u32;

/// What the hub hands a rail's coordinator; `r` is the ring rank (the node's place on the
/// rail's ring), `epoch` the connection it concerns.
#[derive(Debug)]
pub enum In {
    /// A rail rank's hello (the first message of a relayed connection), its body undecoded
    /// (the coordinator's thread decodes it, not the hub's); `peer` is the node's control
    /// connection, as the door's events name it.
    Hello {
        r: Rank,
        epoch: Epoch,
        peer: String,
        body: Vec<u8>,
    },
    /// Any later message's body (the frame's payload, undecoded), and when the hub read it.
    Msg {
        r: Rank,
        epoch: Epoch,
        body: Vec<u8>,
        at: Instant,
    },
    /// The connection ended: the node said its rank's connection closed or reset, or the
    /// node's own connection ended.
    Closed { r: Rank, epoch: Epoch, err: WireError },
    /// The last byte of the rank's table left rank 0 for its node (the silence clock starts).
    TableOut { r: Rank, epoch: Epoch, at: Instant },
    /// The node has not taken its queued control messages for `waited`: it does not read.
    Stuck {
        r: Rank,
        epoch: Epoch,
        queued: usize,
        waited: Duration,
    },
}

/// What a rail's coordinator hands the hub for node `node`.
#[derive(Debug)]
pub enum Out {
    /// A frame already tagged with the rail (`Msg::Rail`); `table` marks the last frame of a
    /// table: the hub says when it went out ([`In::TableOut`]).
    Frame {
        node: Rank,
        frame: Frame,
        table: Option<(u32, Rank, Epoch)>,
    },
    /// The coordinator ended the rail rank's connection (`reset`: as a dropped connection with
    /// unread data; else after its last message). Ignored when `epoch` is not the current one.
    Close {
        node: Rank,
        rail: u32,
        epoch: Epoch,
        reset: bool,
    },
}

/// A queue handed over in batches, with the waker of the side that takes it.
pub struct Queue<T> {
    items: Mutex<Vec<T>>,
    /// Items wait and the taker was woken: the next push need not wake it again.
    pending: AtomicBool,
    waker: Mutex<Option<Arc<Waker>>>,
}

impl<T> Default for Queue<T> {
    fn default() -> Self {
        Queue {
            items: Mutex::new(Vec::new()),
            pending: AtomicBool::new(false),
            waker: Mutex::new(None),
        }
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<T> Queue<T> {
    /// The taker's waker (its event loop's); items already waiting wake it at once.
    pub(crate) fn set_waker(&self, w: Arc<Waker>) {
        *lock(&self.waker) = Some(w.clone());
        if !lock(&self.items).is_empty() {
            let _ = w.wake();
        }
    }

    /// Append `batch` (emptied) and wake the taker unless it was woken already.
    pub(crate) fn push_all(&self, batch: &mut Vec<T>) {
        if batch.is_empty() {
            return;
        }
        lock(&self.items).append(batch);
        if !self.pending.swap(true, Ordering::AcqRel)
            && let Some(w) = lock(&self.waker).as_ref()
        {
            let _ = w.wake();
        }
    }

    pub fn push(&self, item: T) {
        self.push_all(&mut vec![item]);
    }

    /// Everything waiting, in the order it was pushed.
    pub fn take(&self) -> Vec<T> {
        self.pending.store(false, Ordering::Release);
        std::mem::take(&mut *lock(&self.items))
    }

    pub fn is_empty(&self) -> bool {
        lock(&self.items).is_empty()
    }
}

/// A rail coordinator's queue of what its relayed ranks said.
pub(crate) type Inbox = Queue<In>;

/// What the hub shares with every rail's coordinator: its outbox, each node's control socket
/// (TCP_INFO: is the node's host still acknowledging?), and how far its own loop has read.
pub struct Hub {
    pub out: Queue<Out>,
    /// Each node's control connection, the one the hub's loop holds (the same descriptor).
    pub socks: Mutex<HashMap<Rank, Arc<TcpStream>>>,
    /// Every byte a node sent before this instant has been handed to its rail's inbox (the
    /// hub loop's `Plane::caught_up`): silence after it may be the hub's own lag.
    caught_up: Mutex<Instant>,
}

impl Default for Hub {
    fn default() -> Self {
        Hub {
            out: Queue::default(),
            socks: Mutex::new(HashMap::new()),
            caught_up: Mutex::new(Instant::now()),
        }
    }
}

impl Hub {
    pub(crate) fn caught_up(&self) -> Instant {
        *lock(&self.caught_up)
    }

    /// Said after the items read before `at` were pushed to their inboxes.
    pub(crate) fn set_caught_up(&self, at: Instant) {
        *lock(&self.caught_up) = at;
    }
}

/// One rail's end of the hub, handed to that rail's coordinator.
#[derive(Clone)]
pub struct RailLink {
    pub rail: u32,
    /// How many rails the hub relays (the job's ranks are about the ring's times these).
    pub rails: u32,
    /// The rail's ring: ring rank i is node `ring[i]`.
    pub ring: Arc<Vec<Rank>>,
    pub inbox: Arc<Inbox>,
    pub hub: Arc<Hub>,
}

impl RailLink {
    /// The node of ring rank `r`.
    pub fn node(&self, r: Rank) -> Option<Rank> {
        self.ring.get(r as usize).copied()
    }

    /// TCP_INFO of ring rank `r`'s node's control connection.
    pub(crate) fn ack_state(&self, r: Rank) -> Option<AckState> {
        let node = self.node(r)?;
        let s = lock(&self.hub.socks).get(&node).cloned()?;
        tcpinfo::ack_state(&s)
    }
}

// ------------------------------------------------------------- the rail tag

/// Frame `f` (header and body) read as a [`Msg::Rail`] in this crate's encoding, without
/// parsing its message: the rail and the message's body. None: anything else. Pure.
pub(crate) fn rail_body(f: &[u8]) -> Option<(u32, &[u8])> {
    wire::rail_parts(f.get(8..)?)
}

/// Frame `f` (a rail coordinator's message, encoded) as the frame of `Msg::Rail { rail, msg }`
/// (the same bytes [`crate::ring::control::frame`] writes), without parsing it; None over the
/// frame limit. Pure.
pub fn tag_frame(rail: u32, f: &[u8]) -> Option<Frame> {
    let body = f.get(8..)?;
    let tag = rail.to_string();
    let b = wire::frame_of(&[wire::RAIL_HEAD, tag.as_bytes(), wire::MSG_KEY, body, b"}"]).ok()?;
    Some(b.into())
}

/// Whether a message's body is a hello (read by its tag when this crate encoded it). Pure.
pub(crate) fn is_hello(body: &[u8]) -> bool {
    match body.strip_prefix(br#"{"type":""#) {
        Some(rest) => rest.starts_with(br#"hello""#),
        None => matches!(wire::decode(body), Ok(Msg::Hello(_))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_wakes_its_taker_once_per_batch_and_keeps_order() {
        let poll = mio::Poll::new().unwrap();
        let w = Arc::new(Waker::new(poll.registry(), mio::Token(7)).unwrap());
        let q: Queue<u32> = Queue::default();
        q.push(1);
        // Items that waited before the waker was set wake it at once.
        q.set_waker(w);
        q.push_all(&mut vec![2, 3]);
        assert_eq!(q.take(), vec![1, 2, 3]);
        assert!(q.is_empty());
        q.push(4);
        assert_eq!(q.take(), vec![4]);
    }
}
