//! The link scan's plan: which ring orders to run so that every directed link is measured
//! on its own and every node is seen with different partners.
//!
//! In a pipelined ring every hop runs at the slowest hop's speed, so the scan instead moves
//! data along every link of one order at once with no dependency between links: each rank
//! sends to `next[rank]` and receives from `prev[rank]`, and the receiver times it.
//!
//! API: [`plan`]`(n, max_orders) -> Vec<Order>`; [`orders_within`] turns a time budget into
//! `max_orders`. Pure and deterministic: every rank computes the same plan from `n`.
//!
//! The orders are "shift by k" (rank i sends to i+k mod n) for k = 1 (the natural ring),
//! n-1 (the reversed ring), then the other shifts, those coprime to n (single rings) before
//! the rest (which split into several smaller rings: still one successor and one predecessor
//! per rank, which is all the scan needs). The n-1 shifts together measure each of the
//! n(n-1) directed links exactly once, and any two of them give every rank two different
//! send partners and two different receive partners, which is what lets
//! [`crate::ring::diagnosis::localize`] tell a slow node's egress or ingress from a single slow pair.

#[cfg(test)]
use std::time::Duration;

use crate::ring::model::Rank;

/// One ring order of the scan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Order {
    /// Position in the plan; it becomes [`crate::ring::model::LinkSample::order`].
    pub index: u32,
    /// The shift: rank i sends to (i + shift) mod n.
    pub shift: u32,
    /// `next[i]`: the rank that rank i sends to.
    pub next: Vec<Rank>,
    /// `prev[i]`: the rank that rank i receives from.
    pub prev: Vec<Rank>,
}

impl Order {
    /// Whether the order is one ring through all ranks (gcd(shift, n) == 1).
    #[cfg(test)]
    pub fn is_single_ring(&self) -> bool {
        gcd(self.shift as usize, self.next.len()) == 1
    }

    /// The directed links this order measures, `(from, to)`, by sender (the simulated
    /// scans' and the tests' view).
    #[cfg(any(test, feature = "testkit"))]
    pub fn links(&self) -> impl Iterator<Item = (Rank, Rank)> + '_ {
        self.next.iter().enumerate().map(|(i, &to)| (i as Rank, to))
    }

    /// Human name: `natural`, `reversed` or `shift+k`.
    pub fn name(&self) -> String {
        let n = self.next.len() as u32;
        if self.shift == 1 {
            "natural".into()
        } else if self.shift + 1 == n {
            "reversed".into()
        } else {
            format!("shift+{}", self.shift)
        }
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The shifts in the order the scan runs them: 1, n-1, then the coprime ones alternating from
/// both ends (2, n-2, 3, n-3, ...), then the non-coprime ones in the same pattern.
fn shifts(n: usize) -> Vec<usize> {
    let mut out = Vec::new();
    if n < 2 {
        return out;
    }
    let push = |k: usize, out: &mut Vec<usize>| {
        if k >= 1 && k < n && !out.contains(&k) {
            out.push(k);
        }
    };
    push(1, &mut out);
    push(n - 1, &mut out);
    for coprime in [true, false] {
        for k in 2..=n / 2 {
            for s in [k, n - k] {
                if (gcd(s, n) == 1) == coprime {
                    push(s, &mut out);
                }
            }
        }
    }
    out
}

/// The scan plan for `n` ranks: at most `max_orders` orders (at least one when n >= 2), at
/// most n-1 (then every directed link is measured once). n = 0 or 1: no links, empty plan;
/// n = 2: one order holding both directed links.
pub(crate) fn plan(n: usize, max_orders: usize) -> Vec<Order> {
    shifts(n)
        .into_iter()
        .take(max_orders.max(1))
        .enumerate()
        .filter_map(|(index, k)| order(n, k as u32, index as u32))
        .collect()
}

/// The order "shift by `shift`" for `n` ranks, numbered `index` (e.g. a re-check of a
/// suspect after the plan: see [`crate::ring::diagnosis::driver`]). None when the shift
/// is 0 mod n (a rank would send to itself) or n < 2.
pub(crate) fn order(n: usize, shift: u32, index: u32) -> Option<Order> {
    let k = shift as usize % n.max(1);
    if n < 2 || k == 0 {
        return None;
    }
    Some(Order {
        index,
        shift: k as u32,
        next: (0..n).map(|i| ((i + k) % n) as Rank).collect(),
        prev: (0..n).map(|i| ((i + n - k) % n) as Rank).collect(),
    })
}

/// How many orders fit in `budget` when one order takes `per_order` (its transfer plus its
/// barrier): at least 1 and, because two orders are the minimum that separates a node from a
/// link, 2 whenever n >= 3 even if the budget is smaller. Capped at n-1.
#[cfg(test)]
pub(crate) fn orders_within(n: usize, budget: Duration, per_order: Duration) -> usize {
    if n < 2 {
        return 0;
    }
    let fit = if per_order.is_zero() {
        usize::MAX
    } else {
        (budget.as_secs_f64() / per_order.as_secs_f64()).floor() as usize
    };
    let floor = if n >= 3 { 2 } else { 1 };
    fit.max(floor).min(n - 1)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn tiny_worlds() {
        assert!(plan(0, 4).is_empty());
        assert!(plan(1, 4).is_empty());
        let two = plan(2, 4);
        assert_eq!(
            two,
            vec![Order {
                index: 0,
                shift: 1,
                next: vec![1, 0],
                prev: vec![1, 0]
            }]
        );
        assert_eq!(two[0].links().collect::<Vec<_>>(), vec![(0, 1), (1, 0)]);
        let three = plan(3, 9);
        assert_eq!(three.len(), 2);
        assert_eq!(three[0].next, vec![1, 2, 0]);
        assert_eq!(three[1].next, vec![2, 0, 1]);
        assert_eq!(three[1].name(), "reversed");
    }

    #[test]
    fn shift_order_prefers_natural_reversed_then_single_rings() {
        assert_eq!(shifts(8), vec![1, 7, 3, 5, 2, 6, 4]);
        assert_eq!(shifts(5), vec![1, 4, 2, 3]);
        assert_eq!(shifts(6), vec![1, 5, 2, 4, 3]);
        assert_eq!(shifts(4), vec![1, 3, 2]);
    }

    #[test]
    fn full_plan_measures_every_directed_link_once() {
        for n in 2..=17 {
            let p = plan(n, usize::MAX);
            assert_eq!(p.len(), n - 1, "n={n}");
            let mut seen = BTreeSet::new();
            for o in &p {
                for i in 0..n {
                    let to = o.next[i] as usize;
                    assert_ne!(to, i, "a rank never sends to itself");
                    assert_eq!(o.prev[to] as usize, i, "prev is next's inverse");
                    assert!(seen.insert((i, to)), "link {i}->{to} twice, n={n}");
                }
            }
            assert_eq!(seen.len(), n * (n - 1));
        }
    }

    #[test]
    fn two_orders_give_every_rank_two_partners_each_way() {
        for n in 3..=16 {
            let p = plan(n, 2);
            for i in 0..n {
                assert_ne!(p[0].next[i], p[1].next[i]);
                assert_ne!(p[0].prev[i], p[1].prev[i]);
            }
            assert!(p[0].is_single_ring() && p[1].is_single_ring());
        }
    }

    #[test]
    fn single_orders() {
        assert_eq!(
            order(5, 2, 9),
            Some(Order {
                index: 9,
                shift: 2,
                next: vec![2, 3, 4, 0, 1],
                prev: vec![3, 4, 0, 1, 2]
            })
        );
        assert_eq!(order(5, 7, 0).map(|o| o.shift), Some(2));
        assert_eq!(order(5, 5, 0), None);
        assert_eq!(order(1, 1, 0), None);
        assert_eq!(order(0, 1, 0), None);
    }

    #[test]
    fn budget() {
        let s = Duration::from_millis;
        assert_eq!(orders_within(8, s(1000), s(200)), 5);
        assert_eq!(orders_within(8, s(10_000), s(200)), 7);
        assert_eq!(orders_within(8, s(100), s(200)), 2);
        assert_eq!(orders_within(2, s(100), s(200)), 1);
        assert_eq!(orders_within(1, s(100), s(200)), 0);
        assert_eq!(orders_within(4, s(100), Duration::ZERO), 3);
    }
}
