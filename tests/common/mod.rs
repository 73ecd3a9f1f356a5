//! Shared by the test binaries: what a test does when the lab it needs is not here.
//!
//! A lab test that cannot run must never count as passed in CI. `.ci/run` sets
//! `FABPROBE_LAB=required`: then a missing lab (no root, no namespaces, no iproute2, no VM
//! image...) fails the test with the reason. Without it (a developer's laptop) the test
//! prints a loud SKIPPED line and returns. Every lab (the network-namespace lab in
//! `tests/lab/`, the RDMA VM lab) calls [`lab_unavailable`] on the same terms.

#![allow(dead_code)]

use std::io::Write;

/// The environment variable `.ci/run` sets to `required`.
pub const LAB_ENV: &str = "FABPROBE_LAB";

/// Whether a missing lab must fail the test (`FABPROBE_LAB=required`).
pub fn lab_required() -> bool {
    std::env::var(LAB_ENV).is_ok_and(|v| v == "required")
}

/// Print past cargo's output capture: a skipped lab test must be seen.
pub fn loud(msg: &str) {
    let mut e = std::io::stderr();
    let _ = writeln!(e, "\n********\n{msg}\n********");
}

/// The lab `test` needs cannot run here, for `reason`. With `FABPROBE_LAB=required` this
/// panics (the test fails and says why); otherwise it prints a loud SKIPPED line and the
/// caller returns without testing anything.
pub fn lab_unavailable(test: &str, reason: &str) {
    if lab_required() {
        panic!("lab test {test} cannot run: {reason} ({LAB_ENV}=required, so this is a failure)");
    }
    loud(&format!(
        "SKIPPED lab test {test}: {reason} (set {LAB_ENV}=required to make this a failure)"
    ));
}
