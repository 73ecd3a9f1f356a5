//! Every way a ring run ends, rank 0's report arrives whole (issue 45): three ranks as
//! separate processes on loopback, rank 0's stdout a pipe (as under srun or `| jq`), and
//! each run ended another way: a healthy end, a peer SIGKILLed (rank lost), a peer stopped
//! (a hang at --timeout), SIGTERM and SIGINT to rank 0 and to another rank, two SIGTERMs
//! to rank 0, a rank that never joins (the coordinator's join deadline). Each ending runs
//! three times, to stdout and with `--output`; rank 0's JSON parses every time and names
//! what happened. No root.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const BIN: &str = env!("CARGO_BIN_EXE_fabprobe");

/// How a run is ended.
#[derive(Clone, Copy, Debug)]
enum End {
    Healthy,
    /// This signal to this rank once the run is under way.
    Signal(u32, Signal),
    /// SIGTERM twice to rank 0, 50 ms apart.
    TwoTerms,
    /// Rank 2 is never started.
    NeverJoins,
}

fn rank(r: u32, coord: &str, end: End, output: Option<&std::path::Path>) -> Child {
    let long = !matches!(end, End::Healthy | End::NeverJoins);
    let iters = if long { "100000" } else { "2" };
    let mut c = Command::new(BIN);
    c.args([
        "ring",
        "--rank",
        &r.to_string(),
        "--world",
        "3",
        "--coordinator",
        coord,
    ])
    .args([
        "--ifname",
        "=lo",
        "--transport",
        "tcp",
        "-b",
        "256K",
        "-e",
        "256K",
        "-n",
        iters,
    ])
    .args([
        "--no-scan",
        "--timeout",
        "3",
        "--join-timeout",
        "3",
        "--format",
        "json",
    ]);
    if let Some(p) = output.filter(|_| r == 0) {
        c.arg("--output").arg(p);
    }
    c.env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// One run ended by `end`: rank 0's report (stdout, or the `--output` file) as JSON; None
/// where there is none at all (a second signal before the report: never a part of one).
fn run(end: End, to_file: bool) -> (Option<serde_json::Value>, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ring.json");
    let coord = format!("127.0.0.1:{}", common::server_port());
    let output = to_file.then_some(out.as_path());
    let mut ranks: Vec<Option<Child>> = (0..3u32)
        .map(|r| (!(matches!(end, End::NeverJoins) && r == 2)).then(|| rank(r, &coord, end, output)))
        .collect();
    let pid = |c: &Child| Pid::from_raw(c.id() as i32);
    // The run is under way: the ring has moved bytes for a while.
    std::thread::sleep(Duration::from_millis(1500));
    match end {
        End::Signal(r, sig) => {
            kill(pid(ranks[r as usize].as_ref().unwrap()), sig).unwrap();
        }
        End::TwoTerms => {
            let c = ranks[0].as_ref().unwrap();
            kill(pid(c), Signal::SIGTERM).unwrap();
            std::thread::sleep(Duration::from_millis(50));
            kill(pid(c), Signal::SIGTERM).unwrap();
        }
        End::Healthy | End::NeverJoins => {}
    }
    let t0 = Instant::now();
    let r0 = ranks[0].take().unwrap().wait_with_output().unwrap();
    for c in ranks.iter_mut().flatten() {
        // A stopped rank is let go; none outlives the test.
        let _ = kill(pid(c), Signal::SIGKILL);
        let _ = kill(pid(c), Signal::SIGCONT);
        let _ = c.wait();
    }
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "{end:?}: rank 0 took {:?}",
        t0.elapsed()
    );
    let stderr = String::from_utf8_lossy(&r0.stderr).into_owned();
    let raw = if to_file {
        assert!(r0.stdout.is_empty(), "{end:?}: --output and stdout too");
        std::fs::read(&out).unwrap_or_default()
    } else {
        r0.stdout
    };
    if raw.is_empty() && matches!(end, End::TwoTerms) {
        return (None, stderr);
    }
    let v = serde_json::from_slice(&raw).unwrap_or_else(|e| {
        panic!(
            "{end:?} (--output {to_file}): rank 0's JSON ({e}, {} bytes)\n{stderr}",
            raw.len()
        )
    });
    // No temp file is left beside the report.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.len() <= 1, "{end:?}: {left:?}");
    (Some(v), stderr)
}

/// What rank 0's report must say for `end`.
fn says_what_happened(end: End, d: &serde_json::Value) -> Result<(), String> {
    let error = d["error"].as_str().unwrap_or_default();
    let kinds: Vec<&str> = d["verdicts"]
        .as_array()
        .map(|v| v.iter().filter_map(|x| x["kind"].as_str()).collect())
        .unwrap_or_default();
    let blames = |r: u64| {
        d["verdicts"].as_array().is_some_and(|v| {
            v.iter()
                .all(|x| x["from_rank"].as_u64() == Some(r) || x["to_rank"].as_u64() == Some(r))
        })
    };
    let ok = match end {
        End::Healthy => {
            kinds.is_empty() && error.is_empty() && d["results"].as_array().is_some_and(|r| !r.is_empty())
        }
        End::Signal(r, Signal::SIGKILL) => kinds.contains(&"rank_lost") && blames(r as u64),
        End::Signal(r, Signal::SIGSTOP) => !kinds.is_empty() && blames(r as u64),
        End::Signal(r, sig) => {
            kinds.is_empty() && error.contains(&format!("interrupted by {sig} on rank {r} "))
        }
        End::TwoTerms => kinds.is_empty() && error.contains("interrupted by SIGTERM on rank 0 "),
        End::NeverJoins => error.contains("rank 2"),
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{end:?}: kinds {kinds:?}, error {error:?}"))
    }
}

#[test]
fn rank0s_report_is_whole_however_the_run_ends() {
    let ends = [
        End::Healthy,
        End::Signal(1, Signal::SIGKILL),
        End::Signal(2, Signal::SIGSTOP),
        End::Signal(0, Signal::SIGTERM),
        End::Signal(1, Signal::SIGTERM),
        End::Signal(0, Signal::SIGINT),
        End::Signal(2, Signal::SIGINT),
        End::TwoTerms,
        End::NeverJoins,
    ];
    let mut failed = Vec::new();
    for end in ends {
        for i in 0..3 {
            let to_file = i == 1;
            let (v, stderr) = run(end, to_file);
            let Some(v) = v else {
                eprintln!(
                    "{end:?}: the second SIGTERM came before the report: no report, never a part of one\n{stderr}"
                );
                continue;
            };
            if let Err(e) = says_what_happened(end, &v["data"]) {
                failed.push(format!("{e} (--output {to_file})\n{stderr}"));
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}
