//! Shared by the benches (the bench quick-mode contract): quick or full, assertion groups,
//! and the libtest summary line `.ci/run` sums with every test binary's.
//!
//! `cargo test` runs a `test = true` bench without `--bench`: quick mode (small sizes, the
//! same assertions). `cargo bench` passes `--bench`: full mode, unless `--quick` is given too.
//! Each assertion group is one "passed" or "failed"; the summary is the last line printed
//! and the exit status is 1 when a group failed.

#![allow(dead_code)]

use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Small sizes for `cargo test`, or the sizes the figures are quoted for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    Quick,
    Full,
}

impl Mode {
    /// From this process's arguments: `--bench` without `--quick` is full mode.
    pub fn from_args() -> Mode {
        let args: Vec<String> = std::env::args().skip(1).collect();
        if args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--quick") {
            Mode::Full
        } else {
            Mode::Quick
        }
    }

    /// `quick` in quick mode, `full` in full mode.
    pub fn pick<T>(self, quick: T, full: T) -> T {
        match self {
            Mode::Quick => quick,
            Mode::Full => full,
        }
    }
}

/// The assertion groups of one bench run, counted as libtest counts tests.
pub struct Groups {
    pub mode: Mode,
    passed: usize,
    failed: Vec<String>,
}

impl Groups {
    /// Reads the mode from the arguments and says which one runs. Answers as a test binary
    /// with no test to run would (and exits) when `cargo test` passes `--list`, `--ignored`
    /// or name filters that do not match `bench`.
    pub fn start(bench: &str) -> Groups {
        not_selected(bench);
        let mode = Mode::from_args();
        let how = match mode {
            Mode::Quick => "quick mode (small sizes, the same assertions; `cargo bench` runs the full sizes)",
            Mode::Full => "full mode",
        };
        println!("# bench {bench}: {how}");
        Groups {
            mode,
            passed: 0,
            failed: Vec::new(),
        }
    }

    /// One assertion group: a panic in `f` fails this group only (its message is printed on
    /// stderr by the panic hook) and the other groups still run.
    pub fn check(&mut self, name: &str, f: impl FnOnce()) {
        let ok = catch_unwind(AssertUnwindSafe(f)).is_ok();
        println!("test {name} ... {}", if ok { "ok" } else { "FAILED" });
        if ok {
            self.passed += 1;
        } else {
            self.failed.push(name.to_string());
        }
    }

    /// A speed target, `met` or not at the full sizes: asserted, as one group, only in full
    /// mode on an idle machine (1-minute load under 0.5 per core); otherwise printed with the
    /// reason it is not asserted. Quick mode's sizes do not measure it.
    pub fn speed_target(&mut self, target: &str, met: bool) {
        if self.mode == Mode::Quick {
            println!("target ({target}): not measured [quick mode sizes]");
            return;
        }
        let word = if met { "met" } else { "MISSED" };
        let (load, cores) = (load_1min(), cores());
        let idle = load.is_some_and(|l| l < 0.5 * cores as f64);
        let load = load.map_or("?".to_string(), |l| format!("{l:.2}"));
        if self.mode == Mode::Full && idle {
            println!("target ({target}): {word} [load {load} on {cores} cores: asserted]");
            self.check(&format!("target: {target}"), || {
                assert!(met, "speed target missed: {target}")
            });
        } else {
            println!("target ({target}): {word} [not asserted: load {load} on {cores} cores is not idle]");
        }
    }

    /// Prints the summary line last and exits: 0 when every group passed, 1 otherwise.
    pub fn finish(self) -> ! {
        let failed = self.failed.len();
        if failed > 0 {
            println!("\nfailures:\n    {}", self.failed.join("\n    "));
        }
        let _ = std::io::stderr().flush();
        println!(
            "\ntest result: {}. {} passed; {failed} failed; 0 ignored; 0 measured; 0 filtered out",
            if failed > 0 { "FAILED" } else { "ok" },
            self.passed
        );
        let _ = std::io::stdout().flush();
        std::process::exit(i32::from(failed > 0));
    }
}

/// Exits, as libtest does for a binary with nothing selected, where the arguments ask for a
/// list, only ignored tests, or names `bench` does not contain: `cargo test some_test` and
/// `cargo test -- --ignored` do not wait for the benches. A number is a bench's own size
/// argument, never a filter.
fn not_selected(bench: &str) {
    const WITH_VALUE: [&str; 7] = [
        "--test-threads",
        "--skip",
        "--format",
        "--color",
        "--logfile",
        "-Z",
        "--shuffle-seed",
    ];
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        println!("{bench}: bench");
        std::process::exit(0);
    }
    let filters: Vec<&String> = args
        .iter()
        .enumerate()
        .filter(|(i, a)| !a.starts_with('-') && (*i == 0 || !WITH_VALUE.contains(&args[i - 1].as_str())))
        .filter(|(_, a)| a.parse::<f64>().is_err())
        .map(|(_, a)| a)
        .collect();
    let ignored_only = args.iter().any(|a| a == "--ignored");
    if ignored_only || (!filters.is_empty() && !filters.iter().any(|f| bench.contains(f.as_str()))) {
        println!("test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 1 filtered out");
        std::process::exit(0);
    }
}

/// The 1-minute load average, from /proc/loadavg.
pub fn load_1min() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
