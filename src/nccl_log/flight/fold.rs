//! One dump's entries folded as the decoder hands them over, never kept as a list: the
//! distinct calls (a dump repeats a few shapes thousands of times), per collective entry its
//! sequence number and call, and the rank's newest and oldest calls. An entry that repeats
//! a call already seen allocates nothing beyond its decoding.

use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};

use serde::de::{Deserialize, Deserializer, SeqAccess, Visitor};

use super::parse::{RawEntry, Sizes, Str};
use super::{Call, State};

/// Where one entry sits: its call (an index into [`Entries::calls`]), sequence number and
/// record id.
#[derive(Clone, Copy, Debug)]
pub(super) struct Seen {
    pub shape: u32,
    pub seq: u64,
    pub record_id: i64,
}

/// What a rank's entries say, folded in the order they were recorded.
#[derive(Debug, Default)]
pub struct Entries {
    /// Every entry, whether or not it could be lined up across ranks.
    pub(super) count: usize,
    /// Group names in first-seen order, each with the first description its entries gave.
    pub(super) groups: Vec<(String, String)>,
    shapes: Vec<Shape>,
    by_hash: HashMap<u64, Vec<u32>>,
    /// The shape the previous entry had: most entries repeat it.
    prev: Option<u32>,
    /// Each collective entry: (sequence number, shape index).
    pub(super) seqs: Vec<(u64, u32)>,
    pub(super) tracks_completion: bool,
    /// Per (group index, P2P): the newest entry (ties: the later one).
    pub(super) last_by: HashMap<(u32, bool), Seen>,
    pub(super) last: Option<Seen>,
    /// The oldest entry (ties: the earlier one).
    pub(super) oldest: Option<Seen>,
    /// Per group, where its newest collective sits in `seqs`.
    open: Vec<(u32, usize)>,
    /// Coalescing blocks while they are read: position in `seqs` -> their shapes in record
    /// order (see [`Entries::note_collective`]).
    blocks: Vec<(usize, Vec<u32>)>,
    /// The distinct blocks, as shape lists; in `seqs` a block is `shapes.len() + index`.
    composites: Vec<Vec<u32>>,
    /// Per group, its newest P2P sequence number and the shapes recorded under it: more
    /// than one is a batch (batch_isend_irecv), its end last.
    pub(super) p2p_blocks: Vec<(u32, u64, Vec<u32>)>,
}

/// A distinct call: everything but the sequence number and the record id.
#[derive(Debug)]
struct Shape {
    group: u32,
    p2p: bool,
    op: String,
    input_sizes: Sizes,
    input_dtypes: Vec<String>,
    output_sizes: Sizes,
    output_dtypes: Vec<String>,
    state: State,
}

/// An entry's call as borrowed from the decoder, before it is matched to a shape.
struct View<'e, 'a> {
    group: u32,
    p2p: bool,
    op: &'e str,
    e: &'e RawEntry<'a>,
    state: State,
}

fn dtypes<'e>(d: &'e Option<Vec<Str<'_>>>) -> impl Iterator<Item = &'e str> + 'e {
    d.iter().flatten().map(|s| s.get().unwrap_or(""))
}

impl View<'_, '_> {
    fn hash(&self) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (self.group, self.p2p, self.op, self.state).hash(&mut h);
        (&self.e.input_sizes, &self.e.output_sizes).hash(&mut h);
        dtypes(&self.e.input_dtypes).for_each(|d| d.hash(&mut h));
        0xffu8.hash(&mut h);
        dtypes(&self.e.output_dtypes).for_each(|d| d.hash(&mut h));
        h.finish()
    }

    fn is(&self, s: &Shape) -> bool {
        s.group == self.group
            && s.p2p == self.p2p
            && s.state == self.state
            && s.op == self.op
            && s.input_sizes == self.e.input_sizes
            && s.output_sizes == self.e.output_sizes
            && dtypes(&self.e.input_dtypes).eq(s.input_dtypes.iter().map(String::as_str))
            && dtypes(&self.e.output_dtypes).eq(s.output_dtypes.iter().map(String::as_str))
    }

    fn shape(&self) -> Shape {
        let own = |d: &Option<Vec<Str>>| dtypes(d).map(str::to_string).collect();
        Shape {
            group: self.group,
            p2p: self.p2p,
            op: self.op.to_string(),
            input_sizes: self.e.input_sizes.clone(),
            input_dtypes: own(&self.e.input_dtypes),
            output_sizes: self.e.output_sizes.clone(),
            output_dtypes: own(&self.e.output_dtypes),
            state: self.state,
        }
    }
}

impl Entries {
    /// One entry. One without a group or sequence number is counted only (nothing to line
    /// up across ranks); its group's description is still taken, as it was given.
    fn add(&mut self, e: RawEntry<'_>) {
        self.count += 1;
        let pg_id;
        let name = match e.process_group.name.get() {
            Some(n) => n,
            None => match e.pg_id {
                Some(id) => {
                    pg_id = id.to_string();
                    pg_id.as_str()
                }
                None => return,
            },
        };
        let group = self.group(name, e.process_group.desc.get().unwrap_or(""));
        let op = e.profiling_name.get().unwrap_or("");
        let p2p = e.is_p2p.unwrap_or_else(|| {
            let k = op.split_once(':').map_or(op, |(_, n)| n);
            k.starts_with("send") || k.starts_with("recv")
        });
        let seq = if p2p { e.p2p_seq_id } else { e.collective_seq_id };
        let Some(seq) = seq.or(e.seq_id).and_then(|s| u64::try_from(s).ok()) else {
            return;
        };
        let state = State::parse(e.state.get());
        let view = View {
            group,
            p2p,
            op,
            e: &e,
            state,
        };
        let shape = self.intern(&view);
        let seen = Seen {
            shape,
            seq,
            record_id: e.record_id.unwrap_or(0),
        };
        self.note(group, p2p, seen, state);
    }

    /// The index of a group name, added with its description when first seen.
    fn group(&mut self, name: &str, desc: &str) -> u32 {
        match self.groups.iter().position(|(n, _)| n == name) {
            Some(i) => i as u32,
            None => {
                self.groups.push((name.to_string(), desc.to_string()));
                (self.groups.len() - 1) as u32
            }
        }
    }

    fn intern(&mut self, v: &View) -> u32 {
        if let Some(p) = self.prev.filter(|&p| v.is(&self.shapes[p as usize])) {
            return p;
        }
        let slot = self.by_hash.entry(v.hash()).or_default();
        let i = match slot.iter().find(|&&i| v.is(&self.shapes[i as usize])) {
            Some(&i) => i,
            None => {
                let i = self.shapes.len() as u32;
                slot.push(i);
                self.shapes.push(v.shape());
                i
            }
        };
        self.prev = Some(i);
        i
    }

    fn note(&mut self, group: u32, p2p: bool, seen: Seen, state: State) {
        self.tracks_completion |= matches!(state, State::Started | State::Completed);
        let newer = |old: &Option<Seen>| old.is_none_or(|o| seen.record_id >= o.record_id);
        let slot = self.last_by.entry((group, p2p)).or_insert(seen);
        if seen.record_id >= slot.record_id {
            *slot = seen;
        }
        if newer(&self.last) {
            self.last = Some(seen);
        }
        if self.oldest.is_none_or(|o| seen.record_id < o.record_id) {
            self.oldest = Some(seen);
        }
        if !p2p {
            self.note_collective(group, seen);
        } else {
            self.note_p2p(group, seen);
        }
    }

    /// A P2P entry: the ops of one batch share a P2P sequence number, as a coalescing
    /// block's do (see [`Entries::note_collective`]).
    fn note_p2p(&mut self, group: u32, seen: Seen) {
        match self.p2p_blocks.iter_mut().find(|(g, _, _)| *g == group) {
            Some((_, seq, shapes)) if *seq == seen.seq => shapes.push(seen.shape),
            Some(b) => *b = (group, seen.seq, vec![seen.shape]),
            None => self.p2p_blocks.push((group, seen.seq, vec![seen.shape])),
        }
    }

    /// A collective entry at its sequence number. PyTorch bumps a group's number once per
    /// coalescing block and records each op of the block, then the block's end
    /// (`nccl:coalesced`, `nccl:ALLGATHER_coalesced`, ...), under that one number
    /// (ProcessGroupNCCL::startCoalescing; the analyzer's `find_coalesced_group`): entries of
    /// one group at one number are one call, compared across ranks as a whole.
    fn note_collective(&mut self, group: u32, seen: Seen) {
        match self.open.iter().position(|&(g, _)| g == group) {
            Some(i) => {
                let pos = self.open[i].1;
                if self.seqs.get(pos).is_some_and(|&(s, _)| s == seen.seq) {
                    let first = self.seqs[pos].1;
                    match self.blocks.iter_mut().rev().find(|(p, _)| *p == pos) {
                        Some((_, b)) => b.push(seen.shape),
                        None => self.blocks.push((pos, vec![first, seen.shape])),
                    }
                    return;
                }
                self.open[i].1 = self.seqs.len();
            }
            None => self.open.push((group, self.seqs.len())),
        }
        self.seqs.push((seen.seq, seen.shape));
    }

    /// After the last entry: each block becomes one call in `seqs`. A buffer that wrapped may
    /// have lost the start of its oldest block, which is then not compared (the other ranks'
    /// blocks at that number still are).
    fn finish(&mut self) {
        let base = self.shapes.len() as u32;
        let mut known: HashMap<Vec<u32>, u32> = HashMap::new();
        for (pos, shapes) in std::mem::take(&mut self.blocks) {
            let next = self.composites.len() as u32;
            let c = *known.entry(shapes.clone()).or_insert(next);
            if c == next {
                self.composites.push(shapes);
            }
            self.seqs[pos].1 = base + c;
        }
        if self.oldest.is_some_and(|o| o.record_id > 0) {
            self.drop_cut_blocks(base);
        }
    }

    /// In a wrapped buffer, each group's oldest call may be what is left of a block whose
    /// first ops fell off: the end alone, or a block. A cut leaves a suffix, which ends
    /// with the block's end, so a single plain op there is whole and is kept.
    fn drop_cut_blocks(&mut self, base: u32) {
        let (shapes, composites) = (&self.shapes, &self.composites);
        // (group, whether the call may be cut)
        let of = |i: u32| match shapes.get(i as usize) {
            Some(s) => (s.group, s.op.ends_with("coalesced")),
            None => {
                let first = composites.get((i - base) as usize).and_then(|c| c.first());
                let group = first
                    .and_then(|&f| shapes.get(f as usize))
                    .map_or(u32::MAX, |s| s.group);
                (group, true)
            }
        };
        let mut started: Vec<u32> = Vec::new();
        self.seqs.retain(|&(_, i)| {
            let (g, may_be_cut) = of(i);
            if started.contains(&g) {
                return true;
            }
            started.push(g);
            !may_be_cut
        });
    }

    /// The distinct calls as [`Call`]s (sequence number and record id 0), in index order.
    pub(super) fn calls(&self) -> Vec<Call> {
        let mut calls: Vec<Call> = self.shape_calls();
        let blocks: Vec<Call> = self
            .composites
            .iter()
            .filter_map(|members| {
                let parts: Vec<Call> = members
                    .iter()
                    .filter_map(|&m| calls.get(m as usize).cloned())
                    .collect();
                let end = parts.last()?.clone();
                Some(Call {
                    coalesced: parts,
                    ..end
                })
            })
            .collect();
        calls.extend(blocks);
        calls
    }

    fn shape_calls(&self) -> Vec<Call> {
        self.shapes
            .iter()
            .map(|s| Call {
                group: self.groups[s.group as usize].0.clone(),
                seq: 0,
                p2p: s.p2p,
                op: s.op.clone(),
                input_sizes: s.input_sizes.nested(),
                input_dtypes: s.input_dtypes.clone(),
                output_sizes: s.output_sizes.nested(),
                output_dtypes: s.output_dtypes.clone(),
                state: s.state,
                record_id: 0,
                coalesced: Vec::new(),
            })
            .collect()
    }
}

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Entries;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a sequence")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Entries, A::Error> {
                let mut out = Entries::default();
                while let Some(e) = s.next_element::<RawEntry<'de>>()? {
                    out.add(e);
                }
                out.finish();
                Ok(out)
            }
        }
        d.deserialize_seq(V)
    }
}
