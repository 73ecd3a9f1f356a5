//! A simulated fabric for the link scan, with noise like real fabrics have, driven through
//! the coordinator's real [`Driver`] (plan, new partners, re-runs, new connections,
//! judgment, confirmation): for tests and `benches/localize.rs`, never in a release binary.
//!
//! A sample's rate is the product of: a per-pair factor fixed for the run (`spread`: a
//! longer path, a shared uplink), each node's send and receive factors (`node_slow`), a
//! per-connection factor (`half_paths`: that fraction of connections hashed onto a path at
//! half speed, drawn again for every new connection), a CPU-starved rank's share of time on
//! a CPU (`starved` ranks; the samples into them carry their wait as schedstat would), the
//! injected faults, and per-sample jitter.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::ring::diagnosis::driver::{Driver, ScanOptions, ScanOrder, ScanReport, Step};
use crate::ring::diagnosis::localize::Thresholds;
use crate::ring::diagnosis::localize::sim::{Rng, ranks};
use crate::ring::model::{LinkSample, Rank};

/// The noise of a simulated fabric.
#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    pub name: &'static str,
    /// Uniform ±jitter on every sample.
    pub jitter: f64,
    /// Uniform ±spread per directed pair, fixed for the run.
    pub spread: f64,
    /// Each node's egress and ingress at a factor uniform in [1 - node_slow, 1].
    pub node_slow: f64,
    /// This fraction of connections runs at half speed (drawn per connection).
    pub half_paths: f64,
    /// This many ranks wait for a CPU 30-60% of the time, and run that much slower.
    pub starved: usize,
}

impl Model {
    pub const fn new(name: &'static str) -> Model {
        Model {
            name,
            jitter: 0.05,
            spread: 0.0,
            node_slow: 0.0,
            half_paths: 0.0,
            starved: 0,
        }
    }
}

/// A fault injected into the simulated fabric.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fault {
    /// The node's sends at this factor.
    Egress(Rank, f64),
    Ingress(Rank, f64),
    /// One directed pair at this factor, on every connection.
    Link(Rank, Rank, f64),
}

/// One run's fabric: the draws fixed for the run.
struct World {
    n: usize,
    pair: Vec<f64>,
    node_out: Vec<f64>,
    node_in: Vec<f64>,
    starved: BTreeMap<Rank, f64>,
    conn: BTreeMap<(Rank, Rank, u32), f64>,
}

const BASE_GBS: f64 = 12.5;

impl World {
    fn new(n: usize, m: &Model, rng: &mut Rng) -> World {
        let mut sym = |x: f64| 1.0 + x * (2.0 * rng.unit() - 1.0);
        let pair = (0..n * n).map(|_| sym(m.spread)).collect();
        let node_out = (0..n).map(|_| 1.0 - m.node_slow * rng.unit()).collect();
        let node_in = (0..n).map(|_| 1.0 - m.node_slow * rng.unit()).collect();
        let mut starved = BTreeMap::new();
        while starved.len() < m.starved.min(n) {
            let r = rng.below(n) as Rank;
            let w = 0.3 + 0.3 * rng.unit();
            starved.insert(r, w);
        }
        World {
            n,
            pair,
            node_out,
            node_in,
            starved,
            conn: BTreeMap::new(),
        }
    }

    fn sample(&mut self, m: &Model, faults: &[Fault], o: &ScanOrder, from: Rank, to: Rank, rng: &mut Rng) -> LinkSample {
        let (f, t) = (from as usize, to as usize);
        let half = m.half_paths;
        let conn = *self
            .conn
            .entry((from, to, o.index))
            .or_insert_with(|| if rng.unit() < half { 0.5 } else { 1.0 });
        let mut rate = BASE_GBS * self.pair[f * self.n + t] * self.node_out[f] * self.node_in[t] * conn;
        for fault in faults {
            rate *= match *fault {
                Fault::Egress(r, x) if r == from => x,
                Fault::Ingress(r, x) if r == to => x,
                Fault::Link(a, b, x) if (a, b) == (from, to) => x,
                _ => 1.0,
            };
        }
        // A starved end runs only part of the time: its wait, or somewhat less of it.
        for r in [from, to] {
            if let Some(w) = self.starved.get(&r) {
                rate *= 1.0 - w * (0.6 + 0.4 * rng.unit());
            }
        }
        rate *= 1.0 + m.jitter * (2.0 * rng.unit() - 1.0);
        let cpu_wait = Some(self.starved.get(&to).copied().unwrap_or(0.01));
        LinkSample {
            order: o.index,
            from_rank: from,
            to_rank: to,
            bytes: o.bytes,
            seconds: o.bytes as f64 / (rate * 1e9),
            cpu_wait,
            silence_s: None,
        }
    }
}

/// One scan of `n` ranks whose plan is `orders` orders, through the real driver; `rates`
/// are the ranks' port rates as they report them (empty: unknown).
pub fn run(
    n: usize,
    orders: usize,
    m: &Model,
    faults: &[Fault],
    rates: &BTreeMap<Rank, f64>,
    rng: &mut Rng,
) -> ScanReport {
    let table = ranks(n);
    let per_order = Duration::from_millis(100);
    let opts = ScanOptions {
        // Sized so that orders_within() gives `orders` for 100 ms an order.
        budget_s: orders as f64 * 0.1 + 0.05,
        bytes: 16 << 20,
        reps: 3,
    };
    let mut world = World::new(n, m, rng);
    let mut d = Driver::new(n, opts, Thresholds::default());
    let mut now = Instant::now();
    let mut step = d.start(now);
    let mut guard = 0;
    while let Step::Run(o) = step {
        guard += 1;
        if guard > 4 * n + 16 {
            break;
        }
        now += per_order;
        step = Step::Wait;
        for to in 0..n as Rank {
            let from = (to + n as Rank - o.shift % n as Rank) % n as Rank;
            let samples = (0..o.reps)
                .map(|_| world.sample(m, faults, &o, from, to, rng))
                .collect();
            step = d.on_samples(to, o.index, samples, rates.get(&to).copied(), &table, now);
        }
    }
    d.report(&table)
}
