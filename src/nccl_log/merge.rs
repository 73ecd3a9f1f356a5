//! Merging the state of a later chunk of one input into the state of everything before it.
//!
//! Each field merges by the rule its per-line update follows, so that merging the chunks'
//! states in input order gives the state one pass over all the lines gives: counts add,
//! sets unite, "first seen" keeps the earlier chunk's and "last seen" the later one's,
//! maxima take the larger; host ids are re-interned; sightings are offered again, in
//! order, to the same de-duplication and cap; line numbers move by the lines before.

use std::collections::hash_map::Entry;

use super::{Analyzer, MAX_UNRECOGNISED_SAMPLES, Proc, ProcKey};

impl Proc {
    /// `later`'s lines follow this process's lines so far.
    fn absorb(&mut self, later: Proc) {
        // The communicator rule in `apply` (the widest communicator's rank; while no size
        // is known, the latest): the later chunk's answer stands when it saw a `comm` line
        // and either no size is known yet or its size is larger.
        if later.rank.is_some() {
            let take = match (self.rank, self.nranks, later.nranks) {
                (None, _, _) | (Some(_), None, _) => true,
                (Some(_), Some(n), Some(m)) => m > n,
                (Some(_), Some(_), None) => false,
            };
            if take {
                self.rank = later.rank;
                self.nranks = later.nranks;
            }
        }
        if later.local_rank.is_some() {
            self.local_rank = later.local_rank;
        }
        if later.network.is_some() {
            self.network = later.network;
        }
        self.label = self.label.or(later.label);
        self.trail = self.trail.or(later.trail);
        self.net_at = self.net_at.or(later.net_at);
    }
}

impl Analyzer {
    /// Merge the state of the lines that follow, read from the same input by a fresh
    /// `Analyzer` (its line numbers start at 1).
    pub(super) fn merge(&mut self, later: Analyzer) {
        let offset = self.input_lines;
        self.input_lines += later.input_lines;
        self.lines += later.lines;
        self.nccl_lines += later.nccl_lines;
        self.recognised += later.recognised;
        self.unrecognised += later.unrecognised;
        self.truncated_lines += later.truncated_lines;
        self.bytes += later.bytes;
        let room = MAX_UNRECOGNISED_SAMPLES.saturating_sub(self.unrecognised_samples.len());
        self.unrecognised_samples
            .extend(later.unrecognised_samples.into_iter().take(room));
        for (v, hosts) in later.versions {
            self.versions.entry(v).or_default().extend(hosts);
        }
        // Host ids: the later chunk's in its order of first appearance, so new hosts get
        // the ids one pass would have given them.
        let ids: Vec<u32> = later.host_names.iter().map(|h| self.host_id(h)).collect();
        let rekey = |k: ProcKey| ProcKey {
            host: ids.get(k.host as usize).copied().unwrap_or(0),
            ..k
        };
        for (k, mut p) in later.procs {
            p.net_at = p.net_at.map(|l| l + offset);
            match self.procs.entry(rekey(k)) {
                Entry::Occupied(mut o) => o.get_mut().absorb(p),
                Entry::Vacant(v) => {
                    v.insert(p);
                }
            }
        }
        for (ip, host) in later.host_ips {
            self.host_ips.entry(ip).or_insert(host);
        }
        for (h, s) in later.bootstrap {
            self.bootstrap.entry(h).or_default().extend(s);
        }
        for (h, s) in later.socket_ifs {
            self.socket_ifs.entry(h).or_default().extend(s);
        }
        for (h, s) in later.hcas {
            self.hcas.entry(h).or_default().extend(s);
        }
        for (k, on) in later.gdr {
            let e = self.gdr.entry(k).or_insert(on);
            *e = *e && on;
        }
        self.plugins.extend(later.plugins);
        for t in later.topo_files {
            if self.topo_files.len() < MAX_UNRECOGNISED_SAMPLES {
                self.topo_files.insert(t);
            }
        }
        self.networks.extend(later.networks);
        self.rings.extend(later.rings);
        self.trees.extend(later.trees);
        self.ring_sample = self.ring_sample.take().or(later.ring_sample);
        if later.channels.is_some() {
            self.channels = later.channels;
        }
        self.connection_lines += later.connection_lines;
        for (c, n) in later.connections {
            self.add_connection(c, n);
        }
        for (class, n) in later.transports {
            *self.transports.entry(class).or_default() += n;
        }
        for mut s in later.sightings {
            s.proc_ = rekey(s.proc_);
            s.line_no += offset;
            self.sight(s);
        }
        self.world = self.world.max(later.world);
        for (r, q) in later.progress {
            let e = self.progress.entry(r).or_insert(q);
            *e = (*e).max(q);
        }
    }
}
