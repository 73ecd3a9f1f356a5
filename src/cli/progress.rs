//! The one-line progress display on stderr while `fabprobe ring` runs: which stage, size and
//! iteration, the elapsed time, and in the sweep the rate and an estimate of what is left.
//! Only on a terminal and only for the table format; stdout is never touched.
//!
//! Drawn by `indicatif`: it decides whether stderr is a terminal (nothing at all when it is
//! not), redraws and clears the line, and estimates rate and ETA. What is ours is the text
//! and the measure of work: bytes reduced (a size's iteration counts its bytes, both halves
//! and the warm-up included), since a size's time grows with its bytes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::ring::model::LiveStatus;
use crate::ring::run::Options;

/// What one progress line needs; pure data, so the text is table-tested.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Snapshot {
    pub stage: u8,
    pub scan_order: u32,
    pub size_index: u32,
    pub size_bytes: u64,
    pub half: u8,
    pub iteration: u32,
}

impl Snapshot {
    fn of(l: &LiveStatus) -> Snapshot {
        Snapshot {
            stage: l.stage(),
            scan_order: l.scan_order.load(Ordering::Relaxed),
            size_index: l.size_index.load(Ordering::Relaxed),
            size_bytes: l.size_bytes.load(Ordering::Relaxed),
            half: l.half.load(Ordering::Relaxed),
            iteration: l.iteration.load(Ordering::Relaxed),
        }
    }
}

fn human_bytes(b: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")];
    for (u, s) in UNITS {
        if b >= u && b.is_multiple_of(u) {
            return format!("{}{s}", b / u);
        }
    }
    format!("{b}")
}

/// Bytes reduced so far in the sweep, and in the whole sweep (saturating: a size list from
/// the command line cannot overflow it).
pub(crate) fn sweep_work(s: &Snapshot, o: &Options) -> (u64, u64) {
    let per = 2 * u64::from((o.warmup + o.iters).max(1));
    let total = o
        .sizes
        .iter()
        .fold(0u64, |t, &b| t.saturating_add(b.saturating_mul(per)));
    let before = o
        .sizes
        .iter()
        .take(s.size_index as usize)
        .fold(0u64, |t, &b| t.saturating_add(b.saturating_mul(per)));
    let iters = u64::from(s.half) * u64::from(o.warmup + o.iters) + u64::from(s.iteration);
    let done = before.saturating_add(iters.saturating_mul(s.size_bytes));
    (done.min(total), total)
}

/// The stage's words, without the elapsed time, rate and ETA that `indicatif` adds.
pub(crate) fn message(s: &Snapshot, o: &Options) -> String {
    match s.stage {
        LiveStatus::SETUP => "ring: setting up links".to_string(),
        LiveStatus::SCAN => format!("ring: link scan order {}", s.scan_order + 1),
        LiveStatus::SWEEP => format!(
            "ring: size {} ({}/{}) {} iteration {}/{}",
            human_bytes(s.size_bytes),
            s.size_index + 1,
            o.sizes.len(),
            if s.half == 0 { "out of place" } else { "in place" },
            s.iteration + 1,
            o.warmup + o.iters,
        ),
        _ => String::new(),
    }
}

/// How the line is laid out; the ETA and rate only once 1% of the sweep is done (before
/// that the estimate is noise).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Layout {
    Plain,
    Scan,
    Estimated,
}

fn layout(s: &Snapshot, o: &Options) -> Layout {
    let (done, total) = sweep_work(s, o);
    match s.stage {
        LiveStatus::SCAN => Layout::Scan,
        LiveStatus::SWEEP if total > 0 && done.saturating_mul(100) > total => Layout::Estimated,
        _ => Layout::Plain,
    }
}

fn style(l: Layout, o: &Options) -> ProgressStyle {
    let template = match l {
        Layout::Plain => "{msg}, {elapsed} elapsed".to_string(),
        Layout::Scan => format!(
            "{{msg}}, {{elapsed}} elapsed (scan budget {:.0}s)",
            o.scan.as_ref().map(|x| x.budget_s).unwrap_or(0.0)
        ),
        Layout::Estimated => {
            "{msg}, {elapsed} elapsed, ETA {eta}, {binary_bytes_per_sec} reduced".to_string()
        }
    };
    // The templates are ours and fixed (table-tested); a bad one would only lose the line.
    ProgressStyle::with_template(&template).unwrap_or_else(|_| ProgressStyle::default_spinner())
}

/// The running display; stops and clears its line when dropped.
pub(crate) struct Display {
    bar: ProgressBar,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Display {
    /// A status to hand to the run, and the display watching it, when stderr is a terminal
    /// (as `indicatif` sees it) and `enabled` (table format); otherwise nothing at all.
    pub fn start(enabled: bool, opts: &Options) -> (Option<Arc<LiveStatus>>, Option<Display>) {
        if !enabled || ProgressDrawTarget::stderr().is_hidden() {
            return (None, None);
        }
        let live = Arc::new(LiveStatus::default());
        let stop = Arc::new(AtomicBool::new(false));
        // Hidden for the first second: short runs print nothing extra.
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
        let (l, st, o, b) = (live.clone(), stop.clone(), opts.clone(), bar.clone());
        let handle = std::thread::spawn(move || watch(&l, &st, &o, &b));
        let display = Display {
            bar,
            stop,
            handle: Some(handle),
        };
        (Some(live), Some(display))
    }

    /// The bar, to print rows through ([`ProgressBar::suspend`] clears and redraws it).
    pub fn bar(&self) -> ProgressBar {
        self.bar.clone()
    }
}

/// Follow the run's status every 250 ms until `stop`.
fn watch(l: &LiveStatus, stop: &AtomicBool, o: &Options, bar: &ProgressBar) {
    let t0 = Instant::now();
    let (mut styled, mut visible, mut swept) = (None, false, false);
    while !stop.load(Ordering::Relaxed) {
        let snap = Snapshot::of(l);
        if snap.stage == LiveStatus::SWEEP && !swept {
            // The rate and ETA are of the sweep alone, not of setup and scan.
            swept = true;
            bar.reset_eta();
        }
        let (done, total) = sweep_work(&snap, o);
        let lay = layout(&snap, o);
        if styled != Some(lay) {
            bar.set_style(style(lay, o));
            styled = Some(lay);
        }
        bar.set_length(total);
        bar.set_position(if swept { done } else { 0 });
        if !visible && t0.elapsed() > Duration::from_secs(1) {
            bar.set_draw_target(ProgressDrawTarget::stderr_with_hz(4));
            visible = true;
        }
        bar.set_message(message(&snap, o));
        std::thread::sleep(Duration::from_millis(250));
    }
}

impl Drop for Display {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

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
        }
    }

    #[test]
    fn messages_name_stage_size_and_iteration() {
        let o = opts();
        assert_eq!(message(&snap(LiveStatus::SETUP), &o), "ring: setting up links");
        assert_eq!(message(&snap(LiveStatus::SCAN), &o), "ring: link scan order 3");
        assert_eq!(
            message(&snap(LiveStatus::SWEEP), &o),
            "ring: size 2M (2/3) in place iteration 3/6"
        );
        assert_eq!(message(&snap(LiveStatus::DONE), &o), "");
    }

    #[test]
    fn work_is_bytes_reduced_so_far() {
        // Done: size 0 (1M x 12) + size 1 half 0 (2M x 6) + 2 iterations of half 1 (2M x 2)
        // = 12 + 12 + 4 = 28 of 12 + 24 + 48 = 84 MiB: a third.
        assert_eq!(
            sweep_work(&snap(LiveStatus::SWEEP), &opts()),
            (28 << 20, 84 << 20)
        );
        assert_eq!(layout(&snap(LiveStatus::SWEEP), &opts()), Layout::Estimated);
        let mut first = snap(LiveStatus::SWEEP);
        (first.size_index, first.half, first.iteration) = (0, 0, 0);
        assert_eq!(layout(&first, &opts()), Layout::Plain, "no ETA before 1% is done");
    }

    #[test]
    fn work_is_bounded_on_odd_input() {
        let mut s = snap(LiveStatus::SWEEP);
        s.size_index = 99;
        assert_eq!(sweep_work(&s, &opts()), (84 << 20, 84 << 20));
        let empty = Options {
            sizes: vec![],
            ..opts()
        };
        assert_eq!(sweep_work(&s, &empty), (0, 0));
        assert_eq!(layout(&s, &empty), Layout::Plain);
        let huge = Options {
            sizes: vec![u64::MAX, u64::MAX],
            ..opts()
        };
        s.size_bytes = u64::MAX;
        assert_eq!(sweep_work(&s, &huge), (u64::MAX, u64::MAX));
    }

    /// A terminal that records what indicatif draws.
    #[derive(Debug, Clone, Default)]
    struct Screen(Arc<Mutex<String>>);

    impl indicatif::TermLike for Screen {
        fn width(&self) -> u16 {
            200
        }
        fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> std::io::Result<()> {
            self.write_str(&format!("{s}\n"))
        }
        fn write_str(&self, s: &str) -> std::io::Result<()> {
            self.0.lock().unwrap().push_str(s);
            Ok(())
        }
        fn clear_line(&self) -> std::io::Result<()> {
            self.0.lock().unwrap().push_str("<clear>");
            Ok(())
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Every layout is a valid template that shows our words with indicatif's figures.
    #[test]
    fn each_layout_draws_its_line() {
        let o = opts();
        let s = snap(LiveStatus::SWEEP);
        for (lay, tail) in [
            (Layout::Plain, "elapsed"),
            (Layout::Scan, "elapsed (scan budget 0s)"),
            (Layout::Estimated, "B/s reduced"),
        ] {
            let screen = Screen::default();
            let bar = ProgressBar::with_draw_target(
                Some(84 << 20),
                ProgressDrawTarget::term_like(Box::new(screen.clone())),
            );
            bar.set_style(style(lay, &o));
            bar.set_position(28 << 20);
            bar.set_message(message(&s, &o));
            bar.tick();
            let text = screen.0.lock().unwrap().clone();
            assert!(
                text.contains("ring: size 2M (2/3) in place iteration 3/6, 0s elapsed"),
                "{lay:?}: {text}"
            );
            assert!(text.trim_end().ends_with(tail), "{lay:?}: {text}");
            if lay == Layout::Estimated {
                assert!(text.contains(", ETA "), "{text}");
            }
            bar.finish_and_clear();
            assert!(screen.0.lock().unwrap().ends_with("<clear>"), "cleared on drop");
        }
    }

    #[test]
    fn nothing_when_disabled() {
        let (live, display) = Display::start(false, &opts());
        assert!(live.is_none() && display.is_none());
    }
}
