//! How long a rank's threads waited for a CPU during a scan order, from the kernel's
//! `schedstat` (`/proc/self/task/*/schedstat`, `/proc/thread-self/schedstat`: ns on a CPU,
//! ns runnable on a run queue, timeslices). A sample taken while a rank mostly waited for a
//! CPU measured its host, not its link; verdicts carry it as evidence.

use std::collections::BTreeMap;

/// Nanoseconds on a CPU and runnable-but-waiting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTimes {
    pub on_cpu_ns: u64,
    pub waiting_ns: u64,
}

impl CpuTimes {
    /// `self - before`; None when a reading went backwards (a thread exited in between).
    pub fn since(self, before: CpuTimes) -> Option<CpuTimes> {
        Some(CpuTimes {
            on_cpu_ns: self.on_cpu_ns.checked_sub(before.on_cpu_ns)?,
            waiting_ns: self.waiting_ns.checked_sub(before.waiting_ns)?,
        })
    }
}

/// Of `wall`, the share the most-waiting of `parts` (each a thread) spent runnable but off
/// a CPU, at most 1; None without a wall time or a part. A thread
/// that waits for the network sleeps and adds nothing: only CPU starvation counts.
pub(crate) fn wait_share(wall: std::time::Duration, parts: &[CpuTimes]) -> Option<f64> {
    let wall_ns = wall.as_nanos() as f64;
    let most = parts.iter().map(|p| p.waiting_ns).max()?;
    (wall_ns > 0.0).then(|| (most as f64 / wall_ns).min(1.0))
}

/// One `schedstat` file: `on_cpu_ns waiting_ns timeslices`. None: another shape.
pub(crate) fn parse(s: &str) -> Option<CpuTimes> {
    let mut it = s.split_ascii_whitespace();
    let on_cpu_ns = it.next()?.parse().ok()?;
    let waiting_ns = it.next()?.parse().ok()?;
    it.next()?.parse::<u64>().ok()?;
    Some(CpuTimes {
        on_cpu_ns,
        waiting_ns,
    })
}

/// The calling thread now; None where the kernel keeps no schedstat (no CONFIG_SCHED_INFO).
pub(crate) fn this_thread() -> Option<CpuTimes> {
    parse(&std::fs::read_to_string("/proc/thread-self/schedstat").ok()?)
}

/// Each thread of this process now, by thread id; empty where nothing could be read.
pub(crate) fn threads() -> BTreeMap<u64, CpuTimes> {
    let mut out = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        // A thread that exits meanwhile is skipped.
        if let Some(c) = std::fs::read_to_string(e.path().join("schedstat"))
            .ok()
            .and_then(|s| parse(&s))
        {
            out.insert(tid, c);
        }
    }
    out
}

/// Each thread's time between two [`threads`] readings (threads alive at both).
pub(crate) fn threads_since(
    before: &BTreeMap<u64, CpuTimes>,
    after: &BTreeMap<u64, CpuTimes>,
) -> Vec<CpuTimes> {
    after
        .iter()
        .filter_map(|(tid, a)| a.since(*before.get(tid)?))
        .collect()
}

/// A rank's CPU wait between successive readings (its heartbeats): the most-waiting
/// thread's run-queue time over the wall time since the previous reading.
pub(crate) struct Meter {
    at: std::time::Instant,
    before: BTreeMap<u64, CpuTimes>,
}

impl Default for Meter {
    fn default() -> Meter {
        Meter {
            at: std::time::Instant::now(),
            before: threads(),
        }
    }
}

impl Meter {
    /// Since the previous reading (or the meter's start); None where nothing could be read.
    pub fn read(&mut self) -> Option<crate::ring::model::CpuWait> {
        let now = threads();
        let window = self.at.elapsed();
        self.at = std::time::Instant::now();
        let parts = threads_since(&self.before, &now);
        self.before = now;
        cpu_wait(window, &parts)
    }
}

/// The most-waiting thread's wait within `window`. The kernel adds a wait to a thread's
/// run-queue time when the thread gets a CPU again, all at once: a wait that began before
/// the window can land in it (starved runs said "waited 4.5 s of the last 0.5 s"), so the
/// wait is at most the window. None without a thread.
pub(crate) fn cpu_wait(
    window: std::time::Duration,
    parts: &[CpuTimes],
) -> Option<crate::ring::model::CpuWait> {
    let window_ms = window.as_millis() as u64;
    let most = parts.iter().map(|p| p.waiting_ns).max()?;
    Some(crate::ring::model::CpuWait {
        wait_ms: (most / 1_000_000).min(window_ms),
        window_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_is_never_longer_than_its_window() {
        let w = |ms: u64| CpuTimes {
            on_cpu_ns: 0,
            waiting_ns: ms * 1_000_000,
        };
        let d = std::time::Duration::from_millis;
        let cw = |wait_ms, window_ms| crate::ring::model::CpuWait { wait_ms, window_ms };
        for (window, parts, want) in [
            (500, vec![w(300), w(10)], Some(cw(300, 500))),
            // A wait that began before the window, charged when the thread ran again.
            (500, vec![w(4500)], Some(cw(500, 500))),
            (700, vec![w(10), w(6500)], Some(cw(700, 700))),
            (500, vec![], None),
        ] {
            assert_eq!(cpu_wait(d(window), &parts), want, "{window} {parts:?}");
        }
    }

    #[test]
    fn parse_table() {
        let t = |c, w| {
            Some(CpuTimes {
                on_cpu_ns: c,
                waiting_ns: w,
            })
        };
        for (s, want) in [
            ("416916913 266226747 97\n", t(416916913, 266226747)),
            ("0 2837692 1", t(0, 2837692)),
            ("1 2", None),
            ("x 2 3", None),
            ("", None),
            ("-1 2 3", None),
        ] {
            assert_eq!(parse(s), want, "{s:?}");
        }
    }

    #[test]
    fn differences_and_backwards_readings() {
        let a = CpuTimes {
            on_cpu_ns: 100,
            waiting_ns: 50,
        };
        let b = CpuTimes {
            on_cpu_ns: 400,
            waiting_ns: 150,
        };
        let d = b.since(a).unwrap();
        assert_eq!(
            d,
            CpuTimes {
                on_cpu_ns: 300,
                waiting_ns: 100
            }
        );
        assert_eq!(a.since(b), None);
    }

    #[test]
    fn wait_share_of_the_wall_time() {
        let ms = std::time::Duration::from_millis;
        let t = |w| CpuTimes {
            on_cpu_ns: 1,
            waiting_ns: w,
        };
        assert_eq!(wait_share(ms(100), &[t(10_000_000), t(25_000_000)]), Some(0.25));
        // Threads summed over a group can wait longer than the wall time: at most all of it.
        assert_eq!(wait_share(ms(10), &[t(25_000_000)]), Some(1.0));
        assert_eq!(wait_share(ms(0), &[t(1)]), None);
        assert_eq!(wait_share(ms(10), &[]), None);
    }

    /// This machine's kernel keeps schedstat (Debian's does): a busy thread's own time moves.
    #[test]
    fn a_busy_thread_reads_its_own_time() {
        let (Some(a), p) = (this_thread(), threads()) else {
            return; // a kernel without CONFIG_SCHED_INFO: nothing to read, nothing claimed
        };
        let t0 = std::time::Instant::now();
        let mut x = 0u64;
        while t0.elapsed() < std::time::Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let d = this_thread().unwrap().since(a).unwrap();
        assert!(d.on_cpu_ns > 0, "{d:?}");
        let mut m = Meter::default();
        let w = m.read().expect("this process's threads");
        assert!(w.wait_ms <= w.window_ms + 1, "{w:?}");
        assert!(threads_since(&p, &threads()).iter().any(|d| d.on_cpu_ns > 0));
    }
}
