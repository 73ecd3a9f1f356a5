//! Localization accuracy over randomized scenarios, and the false-positive rate on healthy
//! runs: `cargo bench --bench localize` (release build; a few seconds).
//!
//! A scenario degrades one node's egress, one node's ingress, or one directed pair to 30%,
//! 50% or 70% of the rate; every sample carries noise. A trial is right when the verdicts are
//! exactly one, of the right kind, naming the right rank (or pair).

use std::time::Instant;

use fabprobe::ring::diagnosis::localize::{Policy, judge, recheck_shifts, sim};
use fabprobe::ring::diagnosis::plan as scan;
use fabprobe::ring::model::{LinkSample, Rank, Verdict, VerdictKind};

/// One scan and its judgment; with `recheck`, the suspect orders are measured once more
/// (as the ring does) and the run judged on all samples.
fn trial(
    n: usize,
    orders: usize,
    reps: usize,
    noise: Noise,
    recheck: bool,
    rng: &mut sim::Rng,
    fault: Option<(Fault, f64)>,
) -> Vec<Verdict> {
    let policy = Policy::default();
    let ranks = sim::ranks(n);
    let mut s = samples(n, orders, reps, noise, rng, fault);
    let v = judge(&ranks, &s, &policy, None);
    if !recheck || v.is_empty() {
        return v;
    }
    let again: Vec<scan::Order> = recheck_shifts(&v, n)
        .into_iter()
        .enumerate()
        .filter_map(|(i, k)| scan::order(n, k, (orders + i) as u32))
        .collect();
    s.extend(measure(&again, reps, noise, rng, fault));
    judge(&ranks, &s, &policy, None)
}

#[derive(Clone, Copy)]
enum Noise {
    /// Uniform ±x.
    Uniform(f64),
    /// Gaussian with this relative standard deviation.
    Gauss(f64),
    /// Uniform ±10%, and with probability p a sample runs at half speed (a hiccup).
    Hiccup(f64),
}

impl Noise {
    fn name(self) -> String {
        match self {
            Noise::Uniform(x) => format!("uniform ±{:.0}%", x * 100.0),
            Noise::Gauss(x) => format!("gauss σ={:.0}%", x * 100.0),
            Noise::Hiccup(p) => format!("±10% + {:.0}% hiccups at 50%", p * 100.0),
        }
    }

    fn factor(self, rng: &mut sim::Rng) -> f64 {
        match self {
            Noise::Uniform(x) => 1.0 + x * (2.0 * rng.unit() - 1.0),
            Noise::Gauss(s) => {
                let (u1, u2) = (rng.unit().max(1e-12), rng.unit());
                (1.0 + s * (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()).max(0.05)
            }
            Noise::Hiccup(p) => {
                let f = 1.0 + 0.1 * (2.0 * rng.unit() - 1.0);
                if rng.unit() < p { f * 0.5 } else { f }
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Fault {
    Egress(Rank),
    Ingress(Rank),
    Link(Rank, Rank),
}

fn samples(
    n: usize,
    orders: usize,
    reps: usize,
    noise: Noise,
    rng: &mut sim::Rng,
    fault: Option<(Fault, f64)>,
) -> Vec<LinkSample> {
    measure(&scan::plan(n, orders), reps, noise, rng, fault)
}

fn measure(
    plan: &[scan::Order],
    reps: usize,
    noise: Noise,
    rng: &mut sim::Rng,
    fault: Option<(Fault, f64)>,
) -> Vec<LinkSample> {
    let mut out = Vec::new();
    for o in plan {
        for _ in 0..reps {
            for (from, to) in o.links() {
                let hit = match fault {
                    Some((Fault::Egress(r), _)) => from == r,
                    Some((Fault::Ingress(r), _)) => to == r,
                    Some((Fault::Link(a, b), _)) => (from, to) == (a, b),
                    None => false,
                };
                let rate = if hit { fault.map_or(1.0, |(_, f)| f) } else { 1.0 } * 12.5;
                let gbs = rate * noise.factor(rng);
                let bytes = 256u64 << 20;
                out.push(LinkSample {
                    order: o.index,
                    from_rank: from,
                    to_rank: to,
                    bytes,
                    seconds: bytes as f64 / (gbs * 1e9),
                    cpu_wait: None,
                });
            }
        }
    }
    out
}

fn random_fault(n: usize, kind: usize, orders: usize, rng: &mut sim::Rng) -> Fault {
    let a = rng.below(n) as Rank;
    match kind {
        0 => Fault::Egress(a),
        1 => Fault::Ingress(a),
        // A pair the plan measures: the sender's partner in a random order.
        _ => {
            let plan = scan::plan(n, orders);
            let o = &plan[rng.below(plan.len())];
            Fault::Link(a, o.next[a as usize])
        }
    }
}

#[derive(Default)]
struct Tally {
    right: usize,
    extra: usize,
    wrong: usize,
    missed: usize,
    trials: usize,
}

fn main() {
    let trials = 400;
    let policy = Policy::default();
    println!(
        "# localization accuracy: {trials} random trials per cell; right = exactly one verdict, right kind and culprit"
    );
    println!("# columns: right% (missed% / wrong culprit or kind% / right but extra verdicts%)");
    for (noise, reps, recheck) in [
        (Noise::Uniform(0.10), 1, false),
        (Noise::Uniform(0.10), 3, false),
        (Noise::Gauss(0.10), 3, false),
        (Noise::Hiccup(0.05), 3, false),
        (Noise::Hiccup(0.05), 3, true),
    ] {
        let rc = if recheck { ", one re-check pass" } else { "" };
        println!(
            "\n## noise {}, {reps} sample(s) per link per order{rc}",
            noise.name()
        );
        println!(
            "{:>3} {:>7} {:>8} | {:>24} {:>24} {:>24}",
            "n", "orders", "fault", "30% of rate", "50% of rate", "70% of rate"
        );
        for n in [4usize, 8, 16] {
            for orders in [2usize, n - 1] {
                for (kind, kname) in ["egress", "ingress", "link"].iter().enumerate() {
                    let mut cells = Vec::new();
                    for level in [0.3, 0.5, 0.7] {
                        let mut rng = sim::Rng(
                            0x9e37_79b9_7f4a_7c15
                                ^ (n as u64 * 1000 + orders as u64 * 10 + kind as u64)
                                ^ ((level * 10.0) as u64) << 32,
                        );
                        let mut t = Tally::default();
                        for _ in 0..trials {
                            let fault = random_fault(n, kind, orders, &mut rng);
                            let v = trial(n, orders, reps, noise, recheck, &mut rng, Some((fault, level)));
                            let hit = |x: &fabprobe::ring::model::Verdict| match fault {
                                Fault::Egress(r) => {
                                    x.kind == VerdictKind::SlowEgress && x.from_rank == Some(r)
                                }
                                Fault::Ingress(r) => {
                                    x.kind == VerdictKind::SlowIngress && x.to_rank == Some(r)
                                }
                                Fault::Link(a, b) => {
                                    x.kind == VerdictKind::SlowLink
                                        && (x.from_rank, x.to_rank) == (Some(a), Some(b))
                                }
                            };
                            t.trials += 1;
                            match (v.iter().any(hit), v.len()) {
                                (true, 1) => t.right += 1,
                                (true, _) => t.extra += 1,
                                (false, 0) => t.missed += 1,
                                (false, _) => t.wrong += 1,
                            }
                        }
                        let p = |x: usize| 100.0 * x as f64 / t.trials as f64;
                        cells.push(format!(
                            "{:5.1} ({:4.1}/{:4.1}/{:4.1})",
                            p(t.right),
                            p(t.missed),
                            p(t.wrong),
                            p(t.extra)
                        ));
                    }
                    println!(
                        "{n:>3} {orders:>7} {kname:>8} | {:>24} {:>24} {:>24}",
                        cells[0], cells[1], cells[2]
                    );
                }
            }
        }
    }

    let healthy = 5000;
    println!("\n# false positives on healthy runs: {healthy} runs per row (runs with any verdict)");
    println!(
        "{:>3} {:>7} {:>4} {:>30} {:>10} {:>10} {:>14}",
        "n", "orders", "reps", "noise", "runs w/ FP", "verdicts", "after recheck"
    );
    for noise in [
        Noise::Uniform(0.10),
        Noise::Uniform(0.20),
        Noise::Gauss(0.05),
        Noise::Gauss(0.10),
        Noise::Hiccup(0.05),
    ] {
        for n in [4usize, 8, 16] {
            for (orders, reps) in [(2usize, 1usize), (n - 1, 1), (n - 1, 3)] {
                let mut fp = [0usize; 2];
                let mut verdicts = 0;
                for recheck in [false, true] {
                    let mut rng = sim::Rng(0x1234_5678 ^ n as u64 ^ ((orders * 100 + reps) as u64) << 20);
                    for _ in 0..healthy {
                        let v = trial(n, orders, reps, noise, recheck, &mut rng, None);
                        fp[usize::from(recheck)] += usize::from(!v.is_empty());
                        if !recheck {
                            verdicts += v.len();
                        }
                    }
                }
                let pc = |x: usize| 100.0 * x as f64 / healthy as f64;
                println!(
                    "{n:>3} {orders:>7} {reps:>4} {:>30} {:>9.2}% {:>10} {:>13.2}%",
                    noise.name(),
                    pc(fp[0]),
                    verdicts,
                    pc(fp[1])
                );
            }
        }
    }

    // Cost of one judgment (the coordinator runs it once per scan).
    for n in [8usize, 16, 64] {
        let mut rng = sim::Rng(7);
        let s = samples(
            n,
            n - 1,
            3,
            Noise::Uniform(0.1),
            &mut rng,
            Some((Fault::Egress(1), 0.5)),
        );
        let ranks = sim::ranks(n);
        let iters = if n > 16 { 20 } else { 200 };
        let t0 = Instant::now();
        for _ in 0..iters {
            std::hint::black_box(judge(&ranks, &s, &policy, None));
        }
        println!(
            "\n# judge() n={n}, {} samples: {:.2} ms per call",
            s.len(),
            t0.elapsed().as_secs_f64() * 1e3 / iters as f64
        );
    }
}
