//! Programs the host answers through (`lldpcli`, `ethtool`), each run with a deadline: a
//! tool that hangs on a firmware call or a dead daemon never holds fabprobe.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Run `program args` with `deadline`: its stdout (at most 256 KiB), or why there is none
/// (not installed, failed, did not answer in time: then it is killed).
pub(crate) fn run_bounded(program: &str, args: &[&str], deadline: Duration) -> Result<String, String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!("{program} is not installed"),
            _ => format!("cannot run {program}: {e}"),
        })?;
    let mut out = child.stdout.take();
    // Read on a thread: a child that fills the pipe would otherwise never exit.
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(o) = out.as_mut() {
            let _ = o.take(256 << 10).read_to_end(&mut buf);
        }
        buf
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if start.elapsed() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{program} did not answer within {} s",
                    deadline.as_secs_f64()
                ));
            }
            Err(e) => return Err(format!("waiting for {program}: {e}")),
        }
    };
    let buf = reader.join().unwrap_or_default();
    if !status.success() {
        return Err(format!("{program} failed ({status})"));
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}
