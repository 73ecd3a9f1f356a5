//! The one-line progress display on stderr while `fabprobe ring` runs: which stage, size and
//! iteration, the elapsed time and an estimate of what is left. Only on a terminal and only
//! for the table format; stdout is never touched.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::ring::model::LiveStatus;
use crate::ring::run::Options;

/// What one progress line needs; pure data, so the text is table-tested.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub stage: u8,
    pub scan_order: u32,
    pub size_index: u32,
    pub size_bytes: u64,
    pub half: u8,
    pub iteration: u32,
    pub elapsed: Duration,
    /// Time spent in the sweep so far (the ETA is scaled from it).
    pub sweep_elapsed: Option<Duration>,
}

fn human_bytes(b: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")];
    for (u, s) in UNITS {
        if b >= u && b % u == 0 {
            return format!("{}{s}", b / u);
        }
    }
    format!("{b}")
}

fn secs(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// Work done in the sweep as a fraction: bytes x iterations, since a size's time grows with
/// its bytes (both halves, warm-up included).
fn sweep_fraction(s: &Snapshot, o: &Options) -> f64 {
    let per = 2.0 * f64::from((o.warmup + o.iters).max(1));
    let total: f64 = o.sizes.iter().map(|&b| b as f64 * per).sum();
    if total <= 0.0 {
        return 0.0;
    }
    let before: f64 = o
        .sizes
        .iter()
        .take(s.size_index as usize)
        .map(|&b| b as f64 * per)
        .sum();
    let within =
        (f64::from(s.half) * f64::from(o.warmup + o.iters) + f64::from(s.iteration)) * s.size_bytes as f64;
    ((before + within) / total).clamp(0.0, 1.0)
}

/// The line, without the carriage return.
pub fn line(s: &Snapshot, o: &Options) -> String {
    match s.stage {
        LiveStatus::SETUP => format!("ring: setting up links, {} elapsed", secs(s.elapsed)),
        LiveStatus::SCAN => format!(
            "ring: link scan order {}, {} elapsed (budget {:.0}s after the first order)",
            s.scan_order + 1,
            secs(s.elapsed),
            o.scan.as_ref().map(|x| x.budget_s).unwrap_or(0.0)
        ),
        LiveStatus::SWEEP => {
            let f = sweep_fraction(s, o);
            let eta = match s.sweep_elapsed {
                Some(t) if f > 0.01 => format!(", ETA {}", secs(t.mul_f64((1.0 - f) / f))),
                _ => String::new(),
            };
            format!(
                "ring: size {} ({}/{}) {} iteration {}/{}, {} elapsed{eta}",
                human_bytes(s.size_bytes),
                s.size_index + 1,
                o.sizes.len(),
                if s.half == 0 { "out of place" } else { "in place" },
                s.iteration + 1,
                o.warmup + o.iters,
                secs(s.elapsed),
            )
        }
        _ => String::new(),
    }
}

/// The running display; stops and clears its line when dropped.
pub struct Display {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Display {
    /// A status to hand to the run, and the display watching it, when stderr is a terminal
    /// and `enabled` (table format); otherwise nothing at all.
    pub fn start(enabled: bool, opts: &Options) -> (Option<Arc<LiveStatus>>, Option<Display>) {
        if !enabled || !std::io::stderr().is_terminal() {
            return (None, None);
        }
        let live = Arc::new(LiveStatus::default());
        let stop = Arc::new(AtomicBool::new(false));
        let (l, st, o) = (live.clone(), stop.clone(), opts.clone());
        let handle = std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut sweep_t0 = None;
            let mut shown = false;
            while !st.load(Ordering::Relaxed) {
                let stage = l.stage();
                if stage == LiveStatus::SWEEP && sweep_t0.is_none() {
                    sweep_t0 = Some(Instant::now());
                }
                let snap = Snapshot {
                    stage,
                    scan_order: l.scan_order.load(Ordering::Relaxed),
                    size_index: l.size_index.load(Ordering::Relaxed),
                    size_bytes: l.size_bytes.load(Ordering::Relaxed),
                    half: l.half.load(Ordering::Relaxed),
                    iteration: l.iteration.load(Ordering::Relaxed),
                    elapsed: t0.elapsed(),
                    sweep_elapsed: sweep_t0.map(|t: Instant| t.elapsed()),
                };
                // Quiet for the first second: short runs print nothing extra.
                if t0.elapsed() > Duration::from_secs(1) {
                    let mut e = std::io::stderr().lock();
                    let _ = write!(e, "\r\x1b[K{}", line(&snap, &o));
                    let _ = e.flush();
                    shown = true;
                }
                std::thread::sleep(Duration::from_millis(250));
            }
            if shown {
                let _ = write!(std::io::stderr(), "\r\x1b[K");
            }
        });
        (
            Some(live),
            Some(Display {
                stop,
                handle: Some(handle),
            }),
        )
    }
}

impl Drop for Display {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> Options {
        Options {
            sizes: vec![1 << 20, 2 << 20, 4 << 20],
            iters: 5,
            warmup: 1,
            check: 1,
            channels: 1,
            timeout_secs: 10,
            join_timeout_secs: 10,
            slots: 4,
            slot_bytes: 1 << 20,
            scan: None,
            sweep: true,
        }
    }

    fn snap(stage: u8) -> Snapshot {
        Snapshot {
            stage,
            scan_order: 2,
            size_index: 1,
            size_bytes: 2 << 20,
            half: 1,
            iteration: 2,
            elapsed: Duration::from_millis(3500),
            sweep_elapsed: Some(Duration::from_secs(2)),
        }
    }

    #[test]
    fn lines_name_stage_size_iteration_and_eta() {
        let o = opts();
        assert_eq!(
            line(&snap(LiveStatus::SETUP), &o),
            "ring: setting up links, 3.5s elapsed"
        );
        assert_eq!(
            line(&snap(LiveStatus::SCAN), &o),
            "ring: link scan order 3, 3.5s elapsed (budget 0s after the first order)"
        );
        // Done: size 0 (1M x 12) + size 1 half 0 (2M x 6) + 2 iterations of half 1 (2M x 2)
        // = 12 + 12 + 4 = 28 of 12 + 24 + 48 = 84 units: a third, so 2 s more per 1 s done.
        assert_eq!(
            line(&snap(LiveStatus::SWEEP), &o),
            "ring: size 2M (2/3) in place iteration 3/6, 3.5s elapsed, ETA 4.0s"
        );
        assert_eq!(line(&snap(LiveStatus::DONE), &o), "");
    }

    #[test]
    fn fraction_is_bounded_on_odd_input() {
        let mut s = snap(LiveStatus::SWEEP);
        s.size_index = 99;
        assert_eq!(sweep_fraction(&s, &opts()), 1.0);
        let empty = Options {
            sizes: vec![],
            ..opts()
        };
        assert_eq!(sweep_fraction(&s, &empty), 0.0);
    }
}
