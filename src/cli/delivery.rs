//! How `ring`'s report leaves the process whole, whatever ends the run. One writer: the
//! report is rendered to one buffer and written with one write loop (partial writes and
//! EINTR handled) under [`GATE`], or to `--output FILE` atomically. Every exit path that is
//! not main's return (the signal thread's) waits for that writer first. And before the
//! process ends, a report on a pipe is left time to be read: srun stops reading its tasks'
//! output the moment every task has exited when one of them was killed by a signal
//! (slurm's `slurm_step_launch_wait_finish` aborts its I/O thread), so a rank 0 that wrote
//! its 3.7 KB report and exited at once lost the part slurmstepd had not yet forwarded
//! (9 runs in 10 cut near 3,030 bytes, measured in the Slurm lab).

use std::io::{IsTerminal, Write};
use std::os::fd::AsFd;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Held while the report is written and drained; exits wait for it.
static GATE: Mutex<()> = Mutex::new(());

/// How long the report may sit unread in a pipe before the process ends anyway: a reader
/// that stalls this long (a stopped `| less`) is not waited for.
pub(crate) const DRAIN_LIMIT: Duration = Duration::from_secs(3);

/// After the pipe is empty, its reader may still be passing the bytes on (slurmstepd to
/// srun over TCP, racing the task's exit message on another connection).
pub(crate) const RELAY_GRACE: Duration = Duration::from_millis(300);

/// How long an exit path outside main waits for a report being written.
const EXIT_WAIT: Duration = Duration::from_secs(5);

/// The report to `output` atomically (a temp file in its directory, fsync, rename), else to
/// stdout in one write loop, then left to drain (see the module header).
pub(crate) fn deliver(text: &str, output: Option<&std::path::Path>) -> anyhow::Result<()> {
    let _held = GATE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(path) = output {
        return super::out::write_atomic(path, text);
    }
    let out = std::io::stdout();
    // The lock keeps any other printer's bytes out of the middle of the report.
    let mut locked = out.lock();
    locked.flush()?;
    let text = if locked.is_terminal() && super::out::colour_wanted_here() {
        super::out::colourize(text)
    } else {
        text.to_string()
    };
    write_whole(locked.as_fd(), text.as_bytes())?;
    // Only srun drops what its tasks wrote; any other reader (a shell pipe, a test harness
    // that reads after the exit) keeps the bytes, and rank 0 ends at once.
    if relayed_by_srun() {
        drain(locked.as_fd(), DRAIN_LIMIT);
    }
    Ok(())
}

/// A task of an srun step: slurmstepd reads our stdout and srun may stop forwarding it.
fn relayed_by_srun() -> bool {
    std::env::var_os("SLURM_STEP_ID").is_some()
}

/// `buf` whole to `fd`: a write that took part of it is followed by one for the rest; one
/// interrupted by a signal is made again.
pub(crate) fn write_whole(fd: impl AsFd, mut buf: &[u8]) -> std::io::Result<()> {
    while !buf.is_empty() {
        match rustix::io::write(&fd, buf) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// When `fd` is a pipe: wait (at most `limit`) until its reader has taken every byte, then
/// [`RELAY_GRACE`]. A file or a terminal has nothing to wait for. Whether it drained.
pub(crate) fn drain(fd: impl AsFd, limit: Duration) -> bool {
    let is_pipe = rustix::fs::fstat(&fd)
        .map(|s| rustix::fs::FileType::from_raw_mode(s.st_mode) == rustix::fs::FileType::Fifo)
        .unwrap_or(false);
    if !is_pipe {
        return true;
    }
    let t0 = Instant::now();
    loop {
        match rustix::io::ioctl_fionread(&fd) {
            Ok(0) => break,
            Ok(_) if t0.elapsed() < limit => std::thread::sleep(Duration::from_millis(10)),
            // Still unread at the limit, or a pipe that cannot say: do not wait longer.
            _ => return false,
        }
    }
    std::thread::sleep(RELAY_GRACE);
    true
}

/// End the process with `code` once no report is being written (at most [`EXIT_WAIT`]):
/// the signal thread's exits, so a second SIGTERM never cuts the report in the middle.
pub(crate) fn exit_when_delivered(code: i32) -> ! {
    let t0 = Instant::now();
    while t0.elapsed() < EXIT_WAIT {
        if GATE.try_lock().is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    std::process::exit(code)
}

/// How long a rank may take after SIGTERM/SIGINT before it exits on its own (2): well
/// within Slurm's default `KillWait` (30 s), long enough for rank 0 to print its report.
const INTERRUPT_BACKSTOP: std::time::Duration = std::time::Duration::from_secs(15);

/// SIGTERM (the scheduler) and SIGINT (Ctrl-C) are noted for the ring, not fatal: every
/// rank stops its data plane and rank 0 prints what is known. Blocked here, before any
/// thread starts (threads inherit the mask), and taken by one thread with sigwait; a second
/// signal, or [`INTERRUPT_BACKSTOP`] after the first, ends the process, once a report being
/// written is out ([`exit_when_delivered`]).
pub(crate) fn catch_interrupts(g: &super::GlobalArgs) {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    for s in [Signal::SIGTERM, Signal::SIGINT] {
        set.add(s);
    }
    if let Err(e) = set.thread_block() {
        g.log(1, format!("SIGTERM/SIGINT stay fatal: cannot block them: {e}"));
        return;
    }
    std::thread::spawn(move || {
        let Ok(first) = set.wait() else { return };
        crate::ring::interrupt::process().note(first as i32);
        say!("fabprobe: ring: {first}: stopping; rank 0 reports what is known");
        std::thread::spawn(move || {
            std::thread::sleep(INTERRUPT_BACKSTOP);
            say!(
                "fabprobe: ring: still running {} s after {first}; exiting",
                INTERRUPT_BACKSTOP.as_secs()
            );
            exit_when_delivered(2);
        });
        if let Ok(again) = set.wait() {
            say!("fabprobe: ring: {again} again; exiting (after the report, if one is being written)");
            exit_when_delivered(128 + again as i32);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn a_report_bigger_than_the_pipe_arrives_whole_and_drained() {
        let (mut r, w) = std::io::pipe().unwrap();
        // Four times a default pipe's 64 KiB: the writes are partial and are continued.
        let text: Vec<u8> = (0..256 * 1024).map(|i| b"0123456789abcdef\n"[i % 17]).collect();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            std::thread::sleep(Duration::from_millis(50));
            r.read_to_end(&mut got).unwrap();
            got
        });
        write_whole(&w, &text).unwrap();
        let t0 = Instant::now();
        assert!(drain(&w, Duration::from_secs(5)), "the reader took it all");
        assert!(t0.elapsed() >= RELAY_GRACE);
        drop(w);
        assert_eq!(reader.join().unwrap(), text);
    }

    #[test]
    fn an_unread_pipe_is_waited_for_no_longer_than_the_limit() {
        let (_r, w) = std::io::pipe().unwrap();
        write_whole(&w, b"nobody reads this\n").unwrap();
        let t0 = Instant::now();
        assert!(!drain(&w, Duration::from_millis(200)));
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(200) && took < Duration::from_secs(2),
            "{took:?}"
        );
    }

    #[test]
    fn a_file_is_not_waited_for() {
        let f = tempfile::tempfile().unwrap();
        write_whole(&f, b"x").unwrap();
        let t0 = Instant::now();
        assert!(drain(&f, Duration::from_secs(5)));
        assert!(t0.elapsed() < RELAY_GRACE);
    }
}
