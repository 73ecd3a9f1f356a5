//! Test helper: a verdict's `next:` step is prose with its commands in backticks, and each
//! command runs as printed: it parses as shell (`bash -n`) and has no placeholder where the
//! verdict knows the value (as `tests/remedies.rs` holds the probes' fixes to).

use crate::ring::model::Verdict;

/// The backticked commands of a next step.
pub(crate) fn commands(next: &str) -> Vec<&str> {
    next.split('`').skip(1).step_by(2).collect()
}

/// Panics naming the verdict when its next step has a command that does not paste. Returns
/// the commands it checked, so a caller can insist there were some.
pub(crate) fn assert_next_pastes(v: &Verdict) -> Vec<String> {
    let Some(next) = &v.next else { return Vec::new() };
    assert_eq!(
        next.matches('`').count() % 2,
        0,
        "an unclosed backtick in: {next}"
    );
    // Prose may not hold a placeholder either: `<data interface>` reads as a value to fill.
    assert!(
        !(next.contains('<') && next.contains('>')),
        "a placeholder in the next step of {}: {next}",
        v.message
    );
    let mut out = Vec::new();
    for cmd in commands(next) {
        let o = std::process::Command::new("bash")
            .args(["-n", "-c", cmd])
            .output()
            .expect("bash runs");
        assert!(
            o.status.success(),
            "`{cmd}` does not parse: {}\nin: {next}",
            String::from_utf8_lossy(&o.stderr)
        );
        for w in cmd.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            let placeholder = ["PID", "DEV", "BDF", "N", "IFNAME", "PORT", "HOST", "IP", "ADDR"].contains(&w);
            assert!(!placeholder, "`{cmd}` has the placeholder {w}\nin: {next}");
        }
        out.push(cmd.to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::model::VerdictKind;

    fn v(next: &str) -> Verdict {
        Verdict {
            message: "m".into(),
            next: Some(next.into()),
            ..Verdict::bare(VerdictKind::SlowLink, None, None)
        }
    }

    #[test]
    fn the_check_can_fail() {
        assert_eq!(
            assert_next_pastes(&v("on a: `ethtool -S eth1` (drops), `ss -tni`")),
            ["ethtool -S eth1", "ss -tni"]
        );
        for bad in [
            "on a: `ethtool <data interface>`",
            "on a: `kill -CONT PID`",
            "on a: `ping -I eth1 (x`",
            "on a: `ethtool eth1",
        ] {
            let r = std::panic::catch_unwind(|| assert_next_pastes(&v(bad)));
            assert!(r.is_err(), "passed: {bad}");
        }
    }
}
