//! The scheduler's word: SIGTERM (Slurm tearing a step down, `scancel`) or SIGINT (Ctrl-C).
//! The CLI catches the signal and notes it here; each rank stops its data plane and tells
//! rank 0 where it was, and rank 0's coordinator ends the run at once so that its report of
//! what is known is printed whole, long before Slurm's `KillWait` (30 s) sends SIGKILL.
//! No deps: every room of the ring may read it.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, OnceLock};

/// A caught signal's number, once one came (0: none).
#[derive(Debug, Default)]
pub struct Interrupt {
    signal: AtomicI32,
}

impl Interrupt {
    /// Note signal `signo` (the first one is kept).
    pub fn note(&self, signo: i32) {
        let _ = self
            .signal
            .compare_exchange(0, signo, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// The caught signal's name (`SIGTERM`), if one came.
    pub fn caught(&self) -> Option<String> {
        match self.signal.load(Ordering::Relaxed) {
            0 => None,
            n => Some(signal_name(n)),
        }
    }
}

/// `15` -> `SIGTERM`. Pure.
pub(crate) fn signal_name(signo: i32) -> String {
    match signo {
        1 => "SIGHUP".into(),
        2 => "SIGINT".into(),
        15 => "SIGTERM".into(),
        n => format!("signal {n}"),
    }
}

/// This process's interrupt (the CLI notes signals here; lib tests never do).
pub(crate) fn process() -> Arc<Interrupt> {
    static P: OnceLock<Arc<Interrupt>> = OnceLock::new();
    P.get_or_init(Arc::default).clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_signal_is_kept_and_named() {
        let i = Interrupt::default();
        assert_eq!(i.caught(), None);
        i.note(15);
        i.note(2);
        assert_eq!(i.caught().as_deref(), Some("SIGTERM"));
        assert_eq!(signal_name(2), "SIGINT");
        assert_eq!(signal_name(10), "signal 10");
    }
}
