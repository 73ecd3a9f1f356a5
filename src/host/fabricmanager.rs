//! The Fabric Manager's own version, which no file states: live, the output of
//! `nv-fabricmanager --version` (`Fabric Manager version is : 550.54.15`) of the running
//! daemon's executable, else `/usr/bin/nv-fabricmanager` (where the `nvidia-fabricmanager`
//! packages install it, deb and rpm alike); in a snapshot,
//! `fabprobe/fabricmanager.json`. Asked only on hosts with NVSwitches.
//!
//! Why the binary and not the package database: the binary is what the service starts
//! (`ExecStart`), on every distribution, and its answer is one short line; the dpkg/rpm
//! databases differ per distribution and would put every package name in a snapshot.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::netif::Reply;

/// Where the `nvidia-fabricmanager` packages install the daemon.
pub(crate) const FM_BINARY: &str = "/usr/bin/nv-fabricmanager";

/// `--version` prints and exits at once; a binary that hangs is not waited for longer.
const VERSION_TIMEOUT: Duration = Duration::from_secs(5);

/// `fabprobe/fabricmanager.json`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FmAnswers {
    /// The binary asked.
    pub binary: String,
    /// Its `--version` output (stdout, then stderr), or why there is none.
    pub version_output: Option<Reply<String>>,
}

/// Run `binary --version` with a deadline; its output, or why there is none.
pub(crate) fn live_version(binary: &str) -> FmAnswers {
    let version_output = if !Path::new(binary).exists() {
        Reply::Error(format!("{binary} is not installed"))
    } else {
        run_with_deadline(binary, VERSION_TIMEOUT)
    };
    FmAnswers {
        binary: binary.to_string(),
        version_output: Some(version_output),
    }
}

fn run_with_deadline(binary: &str, limit: Duration) -> Reply<String> {
    let mut child = match Command::new(binary)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return Reply::Error(format!("cannot run {binary}: {e}")),
    };
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Reply::Error(format!(
                    "{binary} --version did not exit within {}s",
                    limit.as_secs()
                ));
            }
            Err(e) => return Reply::Error(format!("waiting for {binary}: {e}")),
        }
    }
    let mut out = String::new();
    // A version line is short; a pipe that says more is cut, never read without end.
    for pipe in [
        child.stdout.take().map(|p| Box::new(p) as Box<dyn Read>),
        child.stderr.take().map(|p| Box::new(p) as Box<dyn Read>),
    ]
    .into_iter()
    .flatten()
    {
        let mut buf = Vec::new();
        let _ = pipe.take(4096).read_to_end(&mut buf);
        out.push_str(&String::from_utf8_lossy(&buf));
    }
    Reply::Ok(out)
}

/// `Fabric Manager version is : 550.54.15` -> `550.54.15`. Pure.
pub(crate) fn parse_version_output(s: &str) -> Option<String> {
    let line = s.lines().find(|l| l.contains("Fabric Manager version is"))?;
    let v = line
        .split_once("version is")?
        .1
        .trim_start_matches([' ', ':', '\t'])
        .trim();
    let v = v.split_whitespace().next()?;
    v.starts_with(|c: char| c.is_ascii_digit()).then(|| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_lines() {
        for (s, want) in [
            ("Fabric Manager version is : 450.102.04\n", Some("450.102.04")),
            (
                "\n\n\tFabric Manager version is : 535.161.08\n\n",
                Some("535.161.08"),
            ),
            ("Fabric Manager version is: 580.159.03", Some("580.159.03")),
            ("nv-fabricmanager: unrecognized option '--version'\n", None),
            ("Fabric Manager version is : \n", None),
            ("", None),
        ] {
            assert_eq!(parse_version_output(s).as_deref(), want, "{s:?}");
        }
    }

    #[test]
    fn a_missing_binary_is_said_not_run() {
        let a = live_version("/nonexistent/nv-fabricmanager");
        assert_eq!(
            a.version_output,
            Some(Reply::Error(
                "/nonexistent/nv-fabricmanager is not installed".into()
            ))
        );
    }

    #[test]
    fn a_binary_that_answers_is_read() {
        // `/bin/echo --version` prints its argument (GNU echo prints it too, or its version).
        let a = live_version("/bin/echo");
        assert!(
            matches!(a.version_output, Some(Reply::Ok(ref s)) if !s.is_empty()),
            "{a:?}"
        );
    }
}
