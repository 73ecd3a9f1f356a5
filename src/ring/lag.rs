//! The coordinator's own lag: how much later than the poll timeout it asked for its event
//! loop came round again, and what its thread did meanwhile (`schedstat`: on a CPU, waiting
//! for one, or neither: the process was stopped). Every rank gives up on a coordinator that
//! is silent for the silence deadline, so a close, a silence or a stuck wait first seen right
//! after such a lag is the coordinator's own stall, not the ranks' fault: the serve loop
//! gives every rank a fresh deadline from the moment it runs again, and a failure seen within
//! it is judged as this stall ([`verdict`]), naming no other rank.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::ring::model::{RankInfo, Verdict, VerdictKind};
use crate::ring::schedstat::{self, CpuTimes};
use crate::text::secs;

/// The thread's CPU times are read at most this often (a file read; the loop may come round
/// thousands of times a second): a stall's figures cover up to this much before it too.
const CPU_EVERY: Duration = Duration::from_millis(100);

/// A lag that may have cost a rank its deadline: a rank that is talking is pinged only every
/// quarter of the silence deadline, so one pinged just before the stall gives up after three
/// quarters of it; half leaves room for a loop that was already late. Pure.
pub(crate) fn threshold(silence: Duration) -> Duration {
    silence / 2
}

/// One loop turn that came back late by [`threshold`] or more.
#[derive(Clone, Debug, PartialEq)]
pub struct Stall {
    /// When the loop ran again.
    pub resumed: Instant,
    /// How much longer than `asked` the turn took.
    pub lag: Duration,
    /// The poll timeout the turn asked for.
    pub asked: Duration,
    /// The span the CPU figures cover: the last reading before the stall to the resume.
    pub window: Duration,
    /// The loop thread's time on a CPU and runnable-but-waiting over `window`; None where the
    /// kernel keeps no schedstat (or a reading went backwards).
    pub cpu: Option<CpuTimes>,
}

/// What the process was doing while the loop did not come round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// Neither on a CPU nor waiting for one: stopped (SIGSTOP, a debugger, a frozen cgroup)
    /// or its host paused.
    Stopped,
    /// Runnable, waiting for a CPU: the host is overloaded.
    Starved,
    /// On a CPU: the loop's own work took that long.
    Busy,
    /// No schedstat, or no part dominates.
    Unknown,
}

impl Stall {
    fn ms(d: Duration) -> u64 {
        d.as_millis() as u64
    }

    /// `window` less the time on a CPU and waiting for one: the time it was not runnable.
    pub(crate) fn not_runnable(&self) -> Option<Duration> {
        let c = self.cpu?;
        Some(
            self.window
                .saturating_sub(Duration::from_nanos(c.on_cpu_ns))
                .saturating_sub(Duration::from_nanos(c.waiting_ns)),
        )
    }

    /// The part of the window that dominates (at least half of it).
    pub fn cause(&self) -> Cause {
        let (Some(c), Some(stopped)) = (self.cpu, self.not_runnable()) else {
            return Cause::Unknown;
        };
        let half = self.window / 2;
        if stopped >= half {
            Cause::Stopped
        } else if Duration::from_nanos(c.waiting_ns) >= half {
            Cause::Starved
        } else if Duration::from_nanos(c.on_cpu_ns) >= half {
            Cause::Busy
        } else {
            Cause::Unknown
        }
    }

    /// The figures, in milliseconds, as verdict evidence.
    pub fn evidence(&self) -> BTreeMap<String, serde_json::Value> {
        let mut ev = BTreeMap::new();
        ev.insert("lag_ms".into(), json!(Self::ms(self.lag)));
        ev.insert("asked_ms".into(), json!(Self::ms(self.asked)));
        ev.insert("window_ms".into(), json!(Self::ms(self.window)));
        if let (Some(c), Some(n)) = (self.cpu, self.not_runnable()) {
            ev.insert("on_cpu_ms".into(), json!(c.on_cpu_ns / 1_000_000));
            ev.insert("cpu_wait_ms".into(), json!(c.waiting_ns / 1_000_000));
            ev.insert("not_runnable_ms".into(), json!(Self::ms(n)));
        }
        ev
    }
}

/// Reads the loop thread's CPU times (tests inject their own).
pub(crate) type CpuReader = fn() -> Option<CpuTimes>;

/// The loop's clock: a turn runs from one poll's return to the next one's; call
/// [`LagClock::turn`] as each poll returns (before what it read is handled) and
/// [`LagClock::asked`] with each poll's timeout.
pub(crate) struct LagClock {
    threshold: Duration,
    /// The current turn's start and the wait it asked for.
    turn: Option<(Instant, Duration)>,
    /// The last CPU reading.
    mark: Option<(Instant, CpuTimes)>,
    read: CpuReader,
    /// The largest lag seen (every turn, stall or not).
    pub max: Duration,
}

impl LagClock {
    pub fn new(threshold: Duration) -> LagClock {
        LagClock::with_reader(threshold, schedstat::this_thread)
    }

    pub(crate) fn with_reader(threshold: Duration, read: CpuReader) -> LagClock {
        LagClock {
            threshold,
            turn: None,
            mark: None,
            read,
            max: Duration::ZERO,
        }
    }

    /// A poll returned at `now` (a new turn starts): the turn's stall, if it ended
    /// `threshold` or more later than the wait it asked for.
    pub(crate) fn turn(&mut self, now: Instant) -> Option<Stall> {
        let prev = self.turn.replace((now, Duration::ZERO));
        let lag = prev.map_or(Duration::ZERO, |(at, asked)| {
            now.saturating_duration_since(at).saturating_sub(asked)
        });
        self.max = self.max.max(lag);
        let stalled = lag >= self.threshold;
        let due = self
            .mark
            .is_none_or(|(at, _)| now.saturating_duration_since(at) >= CPU_EVERY);
        if !(stalled || due) {
            return None;
        }
        let cpu = (self.read)();
        let before = std::mem::replace(&mut self.mark, cpu.map(|c| (now, c)));
        if !stalled {
            return None;
        }
        let (asked, window, cpu) = match (prev, before, cpu) {
            (Some((_, asked)), Some((at, b)), Some(c)) => (asked, now.saturating_duration_since(at), c.since(b)),
            (Some((at, asked)), ..) => (asked, now.saturating_duration_since(at), None),
            (None, ..) => return None,
        };
        Some(Stall {
            resumed: now,
            lag,
            asked,
            window,
            cpu,
        })
    }

    /// This turn asks the poll to wait up to `wait`.
    pub fn asked(&mut self, wait: Duration) {
        if let Some((_, asked)) = self.turn.as_mut() {
            *asked += wait;
        }
    }
}

/// The verdict on rank 0's own stall (`me`: the coordinator's rank, rank 0), the ranks'
/// silence deadline being `silence`: what it was doing, and that what the other ranks did
/// after it is not judged. Names no other rank.
pub(crate) fn verdict(s: &Stall, me: Option<&RankInfo>, silence: Duration) -> Verdict {
    let host = me.map_or_else(|| "the coordinator's host".to_string(), |i| i.host.clone());
    let label = me.map_or_else(|| "rank 0".to_string(), |i| format!("rank {} ({})", i.shown(), i.host));
    let c = s.cpu.unwrap_or_default();
    let (wait, on) = (Duration::from_nanos(c.waiting_ns), Duration::from_nanos(c.on_cpu_ns));
    let stopped = s.not_runnable().unwrap_or_default();
    let what = match s.cause() {
        Cause::Stopped => format!(
            "its process did not run for {}: it was not runnable (stopped by SIGSTOP or a debugger, a frozen \
             cgroup, or its host paused)",
            secs(stopped + wait)
        ),
        Cause::Starved => format!(
            "its process did not run for {}: it waited {} for a CPU ({} is overloaded)",
            secs(stopped + wait),
            secs(wait),
            host
        ),
        Cause::Busy => format!("its event loop was busy on a CPU for {}", secs(on)),
        Cause::Unknown if s.cpu.is_some() => format!(
            "its process did not run for {} (of the {} its loop was away: {} on a CPU, {} waiting for one, {} \
             not runnable)",
            secs(stopped + wait),
            secs(s.window),
            secs(on),
            secs(wait),
            secs(stopped)
        ),
        Cause::Unknown => format!(
            "its process did not run for {} (this kernel keeps no schedstat: stopped and starved cannot be told \
             apart)",
            secs(s.lag)
        ),
    };
    let mut evidence = s.evidence();
    evidence.insert("silence_ms".into(), json!(silence.as_millis() as u64));
    let pid = me.and_then(|i| i.pid);
    let ps = pid.map_or_else(
        || "`ps -C fabprobe -o pid,stat,wchan:20,cmd`".to_string(),
        |p| format!("`ps -o pid,stat,wchan:20,cmd -p {p}`"),
    );
    Verdict {
        rail: None,
        kind: VerdictKind::CoordinatorStalled,
        from_rank: me.map(|i| i.rank).or(Some(0)),
        to_rank: None,
        from_host: me.map(|i| i.host.clone()),
        to_host: None,
        evidence,
        message: format!(
            "COORDINATOR STALLED {label}: {what}; its event loop came back {} late (the other ranks give up \
             on a coordinator silent for {}), so what they reported after it (closed connections, silences, \
             waits) is this stall's consequence and names no rank",
            secs(s.lag),
            secs(silence)
        ),
        next: Some(format!(
            "see {host}: what stopped or starved rank 0 there ({ps}, `dmesg | tail`, `top` for CPU hogs, a \
             debugger, a cgroup freezer, the VM's host); then rerun"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    const MS: fn(u64) -> Duration = Duration::from_millis;

    /// A clock reading injected CPU times: on a CPU `ON` ns, waiting `WAIT` ns.
    static ON: AtomicU64 = AtomicU64::new(0);
    static WAIT: AtomicU64 = AtomicU64::new(0);
    fn fake() -> Option<CpuTimes> {
        Some(CpuTimes {
            on_cpu_ns: ON.load(Ordering::Relaxed),
            waiting_ns: WAIT.load(Ordering::Relaxed),
        })
    }
    fn none() -> Option<CpuTimes> {
        None
    }

    #[test]
    fn a_turn_late_past_the_threshold_is_a_stall_with_its_cpu_figures() {
        let t0 = Instant::now();
        let mut c = LagClock::with_reader(MS(1500), fake);
        assert_eq!(c.turn(t0), None);
        c.asked(MS(100));
        // Back 60 ms late: no stall.
        assert_eq!(c.turn(t0 + MS(160)), None);
        c.asked(MS(100));
        // Back 4 s after asking for 100 ms, having waited 0.5 s for a CPU and run 0.1 s.
        ON.store(100_000_000, Ordering::Relaxed);
        WAIT.store(500_000_000, Ordering::Relaxed);
        let s = c.turn(t0 + MS(4260)).expect("a stall");
        assert_eq!(s.lag, MS(4000));
        assert_eq!(s.asked, MS(100));
        assert_eq!(s.window, MS(4100)); // from the last reading, at the turn 160 ms in
        assert_eq!(s.not_runnable(), Some(MS(3500)));
        assert_eq!(s.cause(), Cause::Stopped);
        assert_eq!(c.max, MS(4000));
        let ev = s.evidence();
        assert_eq!(ev["cpu_wait_ms"], 500);
        assert_eq!(ev["not_runnable_ms"], 3500);
    }

    #[test]
    fn causes_and_a_kernel_without_schedstat() {
        let st = |on: u64, wait: u64| Stall {
            resumed: Instant::now(),
            lag: MS(3900),
            asked: MS(100),
            window: MS(4000),
            cpu: Some(CpuTimes {
                on_cpu_ns: on * 1_000_000,
                waiting_ns: wait * 1_000_000,
            }),
        };
        assert_eq!(st(10, 3000).cause(), Cause::Starved);
        assert_eq!(st(3000, 10).cause(), Cause::Busy);
        assert_eq!(st(10, 10).cause(), Cause::Stopped);
        assert_eq!(st(1500, 1500).cause(), Cause::Unknown);
        let mut c = LagClock::with_reader(MS(1000), none);
        let t0 = Instant::now();
        c.turn(t0);
        c.asked(MS(50));
        let s = c.turn(t0 + MS(2050)).unwrap();
        assert_eq!((s.cpu, s.cause(), s.lag), (None, Cause::Unknown, MS(2000)));
        let v = verdict(&s, None, MS(3000));
        assert!(v.message.contains("keeps no schedstat"), "{}", v.message);
    }

    #[test]
    fn the_verdict_names_rank_0_and_its_host_only() {
        let me = RankInfo {
            neighbor: None,
            port_max: None,
            rails: Vec::new(),
            node: None,
            capabilities: Vec::new(),
            rank: 0,
            host: "node-a".into(),
            address: "198.19.0.10:1".into(),
            device: None,
            transport: "tcp".into(),
            pid: Some(42),
        };
        let s = Stall {
            resumed: Instant::now(),
            lag: MS(3900),
            asked: MS(100),
            window: MS(4000),
            cpu: Some(CpuTimes {
                on_cpu_ns: 1_000_000,
                waiting_ns: 2_000_000,
            }),
        };
        let v = verdict(&s, Some(&me), MS(3000));
        assert_eq!(v.kind, VerdictKind::CoordinatorStalled);
        assert_eq!((v.from_rank, v.to_rank), (Some(0), None));
        assert!(
            v.message
                .starts_with("COORDINATOR STALLED rank 0 (node-a): its process did not run for 4.0 s: it was not runnable"),
            "{}",
            v.message
        );
        assert!(
            v.message
                .contains("came back 3.9 s late (the other ranks give up on a coordinator silent for 3.0 s)"),
            "{}",
            v.message
        );
        assert!(v.next.as_deref().unwrap().contains("-p 42"));
        assert_eq!(v.evidence["silence_ms"], 3000);
    }
}
