//! Issue 45: a stopped rank, thawed after the others gave up on it and exited, says on its
//! own stderr that it stalled (RANK STALLED ..., this rank), never COORDINATOR LOST: the
//! coordinator was alive and gave up on it. Real `fabprobe ring` processes in the network
//! lab (tests/lab/mod.rs); needs root, else fails under `FABPROBE_LAB=required` (CI) and
//! otherwise prints SKIPPED.

mod lab;

use std::time::Duration;

use lab::{Lab, LabOpts, text};
use nix::sys::signal::Signal;

/// --timeout: the silence deadline is max(3, min(--timeout, 10)) s.
const TIMEOUT: u64 = 3;

#[test]
fn a_thawed_stopped_rank_names_its_own_stall() {
    let Some(lab) = Lab::new(
        "thawed_stall",
        LabOpts {
            nodes: 3,
            rate: Some("1gbit".into()),
        },
    ) else {
        return;
    };
    let t = TIMEOUT.to_string();
    let ids = lab.spawn_ring(0..3, 3, "thaw", &lab::long_sweep(&t, false));
    lab.wait_data_flowing(0..3, Duration::from_secs(20));
    lab.signal(ids[1], Signal::SIGSTOP);
    let limit = Duration::from_secs(TIMEOUT + 10);
    let (o0, _) = lab.wait(ids[0], limit);
    let (o2, _) = lab.wait(ids[2], limit);
    let j: serde_json::Value =
        serde_json::from_slice(&o0.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o0.stdout)));
    assert_eq!(
        j["data"]["verdicts"][0]["kind"],
        "rank_stalled",
        "{}",
        text(&o0.stdout)
    );
    assert_eq!(o2.status.code(), Some(1), "{}", text(&o2.stderr));
    // Thawed only now, after the others are gone: about the silence deadline and the
    // watchdog's grace after the stop, as a rank frozen by a debugger and let go.
    lab.signal(ids[1], Signal::SIGCONT);
    let (o1, _) = lab.wait(ids[1], limit);
    let e1 = text(&o1.stderr);
    assert_eq!(o1.status.code(), Some(1), "{e1}");
    assert!(
        e1.contains("RANK STALLED rank 1 (node-b), this rank: its process did not run for at least "),
        "{e1}"
    );
    assert!(!e1.contains("COORDINATOR LOST"), "{e1}");
}
