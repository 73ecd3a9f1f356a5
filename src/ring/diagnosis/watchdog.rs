//! The coordinator's hang judgment: from what each rank last reported over its control
//! connection, name the cause of a stuck run (a cut data link, a dead rank, a stopped rank),
//! not every rank that waits downstream of it. Pure: times are passed in, in milliseconds on
//! the coordinator's monotonic clock.
//!
//! API:
//! * [`judge`]`(&WatchState, now_ms) -> Vec<Verdict>`: `rank_lost`, `rank_unreachable`,
//!   `rank_stalled`, `hang_link`; empty while nothing is wrong or the picture is not settled yet (call it
//!   again on every report and timer tick; end the run on the first non-empty answer).
//! * [`coordinator_lost_or_own_stall`]: the other ranks' side, when their control connection to the
//!   coordinator closes or falls silent.
//!
//! Method. A rank is *lost* when its control connection closed or was reset (dead process);
//! *unreachable* when its host stopped acknowledging it (TCP_INFO: unacknowledged data,
//! retransmitted) and it is silent past the silence deadline (node powered off, link cut). A rank is *stalled* when its connection is open and its kernel
//! answers but the process sends nothing past the silence deadline (SIGSTOP, a stuck process),
//! or when its heartbeats arrive but its progress counter has not moved for the timeout plus
//! the grace while in a data phase. Then the wait-for graph: every wait report is an edge from
//! the waiting receiver to the predecessor it waits on. In a ring with one cut link every rank
//! ends up waiting, so the graph is a cycle; the culprit edge is the one whose sender shows it
//! has sent: it is blocked sending to that receiver, it has moved past the receiver's step, or
//! it has sent more bytes of the step than the receiver got. Waits on a lost or stalled rank are
//! explained by that rank. When no edge is conclusive, after `grace_ms` from the first wait
//! report (so that the upstream ranks' reports have arrived) the longest waiter's edge is named,
//! marked inconclusive; when only blocked senders report, the longest-blocked one's link.
//!
//! For the ring: feed every heartbeat and wait report as it arrives (`last`, `progress`), set
//! `control` from the socket (EOF/RST: `Closed`; TCP_INFO unacked data: `Unacked`), and call
//! `judge` on each arrival and on a timer tick of a few hundred ms. Times to verdict, by
//! construction (test `time_to_verdict`): a killed rank at the next tick after its socket
//! closes; a stopped rank `silence_ms` after its last heartbeat; a cut link when the
//! receiver's wait report arrives (`--timeout` after its last progress) if the sender's
//! heartbeat already shows it ahead, else at most `grace_ms` later.
//!
//! Positions compare as (round, phase, step) on the same channel only: a report shows its
//! longest-waiting channel, and a rank with several sends every channel's position, so a
//! sender is placed on its receiver's channel. `round` counts the channel's completed
//! blocks, so a rank that wrapped into the next block or iteration is not taken for one
//! behind a sender still in the previous one, nor the reverse. Byte counts compare only at
//! the same round, phase, step and channel.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

#[cfg(test)]
use crate::ring::model::Position;
use crate::ring::model::{CpuWait, Phase, Rank, RankInfo, Verdict, VerdictKind, WaitReport};

/// The coordinator's view of one control connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Control {
    /// Open, and the peer's kernel acknowledges what we send (or we cannot tell).
    Open,
    /// Open, but data we sent has gone unacknowledged since `since_ms` (TCP_INFO): the peer's
    /// host or the management path is gone, even though no RST arrived.
    Unacked { since_ms: u64 },
    /// Closed by the peer (EOF) or reset (ECONNRESET, EPIPE, ETIMEDOUT) at `at_ms`.
    Closed { at_ms: u64, reset: bool },
}

/// What the coordinator knows about one rank.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RankWatch {
    pub rank: Rank,
    pub control: Control,
    /// The latest status message (heartbeat or wait report) and its arrival time.
    pub last: Option<(u64, WaitReport)>,
    /// Progress counters from the heartbeats, `(arrival_ms, progress)`, oldest first. The
    /// caller may trim it, but must keep the heartbeats of the last `timeout_ms + grace_ms`.
    pub progress: Vec<(u64, u64)>,
}

/// Everything [`judge`] looks at.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct WatchState<'r> {
    /// The ranks' infos, borrowed from the coordinator's report: copying 16,384 of them
    /// for every judgment took most of a judge call.
    pub ranks: Cow<'r, [RankInfo]>,
    pub watch: Vec<RankWatch>,
    /// The data-link wait deadline (`--timeout`).
    pub timeout_ms: u64,
    /// A control connection silent this long is judged (several heartbeat intervals).
    pub silence_ms: u64,
    /// How long after the first wait report an inconclusive picture is judged anyway.
    pub grace_ms: u64,
    /// When the watch began (the rank table was sent): the silence of a rank never heard
    /// from counts from here.
    pub since_ms: u64,
}

/// How long a rank may stay in local work (allocation, registration, the result check,
/// between sizes) without progress before it is named: far longer than a data wait, since
/// that work grows with the buffer size and not with the fabric. Ten timeouts, at least 60 s.
pub(crate) fn local_work_allowance_ms(timeout_ms: u64) -> u64 {
    timeout_ms.saturating_mul(10).max(60_000)
}

fn is_data_phase(p: Phase) -> bool {
    matches!(p, Phase::Scan | Phase::ReduceScatter | Phase::AllGather)
}

/// How long a rank may stay opening its data links (`connect`) without progress: the open
/// has its own deadline (`--timeout`) and the rank then reports the link it could not open,
/// so the watchdog names it only past twice that and the grace (a cut link during a scan
/// order's setup is that link's failure, never a stalled rank).
fn link_setup_allowance_ms(timeout_ms: u64, grace_ms: u64) -> u64 {
    timeout_ms.saturating_mul(2).saturating_add(grace_ms)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    Lost,
    Stalled,
}

/// Why we believe the sender sent what the receiver waits for.
enum Sent {
    Blocked,
    Ahead(Phase, u32),
    Bytes(u64, u64),
}

/// One judgment of the watch state at `now`, with its lookups built once.
struct Judgment<'a> {
    s: &'a WatchState<'a>,
    now: u64,
    /// Rank -> index into `s.ranks` and `s.watch`, and who waits on whom: lookups in
    /// O(log n), so one judgment is O(n log n) at 4,096 ranks, not O(n^2).
    info_at: BTreeMap<Rank, usize>,
    watch_at: BTreeMap<Rank, usize>,
    waiters: BTreeMap<Rank, Vec<Rank>>,
}

impl<'a> Judgment<'a> {
    fn new(s: &'a WatchState<'a>, now: u64) -> Judgment<'a> {
        let mut waiters: BTreeMap<Rank, Vec<Rank>> = BTreeMap::new();
        for w in &s.watch {
            if let Some(p) = w.last.as_ref().and_then(|(_, rep)| rep.waiting_on)
                && p != w.rank
            {
                waiters.entry(p).or_default().push(w.rank);
            }
        }
        Judgment {
            s,
            now,
            info_at: s.ranks.iter().enumerate().map(|(i, r)| (r.rank, i)).collect(),
            watch_at: s.watch.iter().enumerate().map(|(i, w)| (w.rank, i)).collect(),
            waiters,
        }
    }

    fn info(&self, r: Rank) -> Option<&'a RankInfo> {
        self.info_at.get(&r).map(|&i| &self.s.ranks[i])
    }

    fn host(&self, r: Rank) -> Option<String> {
        self.info(r).map(|i| i.host.clone())
    }

    fn host_or(&self, r: Rank) -> String {
        self.host(r)
            .unwrap_or_else(|| format!("rank {}'s host", self.shown(r)))
    }

    /// The rank a person is told (the node's, on a rail's ring of some of the nodes).
    fn shown(&self, r: Rank) -> Rank {
        self.info(r).map_or(r, RankInfo::shown)
    }

    /// `rank 5 (node-f)`.
    fn label(&self, r: Rank) -> String {
        match self.info(r) {
            Some(i) => format!("rank {} ({})", i.shown(), i.host),
            None => format!("rank {r}"),
        }
    }

    fn report(&self, r: Rank) -> Option<&'a WaitReport> {
        self.watch(r).and_then(|w| w.last.as_ref()).map(|(_, rep)| rep)
    }

    fn watch(&self, r: Rank) -> Option<&'a RankWatch> {
        self.watch_at.get(&r).map(|&i| &self.s.watch[i])
    }

    fn last_heard(&self, w: &RankWatch) -> u64 {
        w.last.as_ref().map(|(at, _)| *at).unwrap_or(self.s.since_ms)
    }

    /// How long the progress counter has stood still, when heartbeats show it.
    fn unchanged_for(&self, w: &RankWatch) -> Option<u64> {
        let (_, cur) = *w.progress.last()?;
        let start = w
            .progress
            .iter()
            .rev()
            .take_while(|(_, p)| *p == cur)
            .last()
            .map(|(at, _)| *at)?;
        Some(self.now.saturating_sub(start))
    }

    fn fault(&self, w: &RankWatch) -> Option<(Fault, Verdict)> {
        let r = w.rank;
        let silent = self.now.saturating_sub(self.last_heard(w));
        // Most ranks are healthy: the cheap test first (the words of a verdict built for every
        // rank, then dropped, were most of a judgment of 16,384 ranks).
        let suspect = matches!(w.control, Control::Closed { .. })
            || silent > self.s.silence_ms
            || self.starved(r).is_some()
            || self.stood_still(r, w).is_some();
        if !suspect {
            return None;
        }
        let mut ev: BTreeMap<String, Value> = BTreeMap::new();
        let pid = self.info(r).and_then(|i| i.pid);
        let host = self.host_or(r);
        let seen = match self.report(r) {
            Some(rep) => {
                ev.insert("phase".into(), json!(rep.phase.name()));
                ev.insert("step".into(), json!(rep.step));
                format!("; last seen at step {} of {}", rep.step, rep.phase.name())
            }
            None => "; never heard from since the rank table was sent".into(),
        };
        let (kind, fault, what, next) = match w.control {
            Control::Closed { at_ms, reset } => self.closed_fault(at_ms, reset, &mut ev, pid, &host),
            Control::Unacked { since_ms } if silent > self.s.silence_ms => {
                self.unreachable_fault(r, (since_ms, silent), &mut ev, &host)
            }
            Control::Open | Control::Unacked { .. } if silent > self.s.silence_ms => {
                self.silent_fault(silent, &mut ev, pid, &host)
            }
            Control::Open | Control::Unacked { .. } if self.starved(r).is_some() => {
                self.starved_fault(r, &mut ev, &host)?
            }
            Control::Open | Control::Unacked { .. } => self.no_progress(r, w, &mut ev, pid, &host)?,
        };
        if let Some(p) = pid {
            ev.insert("pid".into(), json!(p));
        }
        let word = match kind {
            VerdictKind::RankUnreachable => "RANK UNREACHABLE",
            _ if fault == Fault::Lost => "RANK LOST",
            _ => "RANK STALLED",
        };
        let message = format!("{word} {}: {what}{seen}{}", self.label(r), self.waiting_on(r));
        Some((
            fault,
            Verdict {
                rail: None,
                kind,
                from_rank: Some(r),
                to_rank: None,
                from_host: self.host(r),
                to_host: None,
                evidence: ev,
                message,
                next: Some(next),
            },
        ))
    }

    /// `; ranks 2, 3 wait on it`: who waits on rank `r` (nothing when nobody does).
    fn waiting_on(&self, r: Rank) -> String {
        let waiters: Vec<String> = self
            .waiters
            .get(&r)
            .map(|v| v.iter().map(|&o| self.shown(o).to_string()).collect())
            .unwrap_or_default();
        match waiters.len() {
            0 => String::new(),
            1 => format!("; rank {} waits on it", waiters[0]),
            _ => format!("; ranks {} wait on it", waiters.join(", ")),
        }
    }

    /// The rank's control connection closed at `at_ms` (a reset, or an orderly close).
    fn closed_fault(
        &self,
        at_ms: u64,
        reset: bool,
        ev: &mut BTreeMap<String, Value>,
        pid: Option<u32>,
        host: &str,
    ) -> (VerdictKind, Fault, String, String) {
        ev.insert("closed_ms_ago".into(), json!(self.now.saturating_sub(at_ms)));
        ev.insert("reset".into(), json!(reset));
        let how = if reset { "was reset" } else { "closed" };
        let next = match pid {
            Some(p) => format!(
                "on {host}: is fabprobe (pid {p}) still running? `dmesg | tail` (OOM killer, hardware errors), \
                 the launcher's log; if {host} is down, its console or BMC"
            ),
            None => format!(
                "on {host}: is fabprobe still running? `dmesg | tail` (OOM killer, hardware errors), the \
                 launcher's log; if {host} is down, its console or BMC"
            ),
        };
        (
            VerdictKind::RankLost,
            Fault::Lost,
            format!("its control connection {how} (the process exited or was killed)"),
            next,
        )
    }

    /// Rank `r`'s host has not acknowledged its control connection since `since_ms`, and
    /// the rank has been `silent` past the deadline.
    fn unreachable_fault(
        &self,
        r: Rank,
        (since_ms, silent): (u64, u64),
        ev: &mut BTreeMap<String, Value>,
        host: &str,
    ) -> (VerdictKind, Fault, String, String) {
        let for_ms = self.now.saturating_sub(since_ms);
        ev.insert("unacked_ms".into(), json!(for_ms));
        ev.insert("silent_ms".into(), json!(silent));
        // Not a stopped process: its kernel would still acknowledge. The host or
        // the path to it is gone; `kill -CONT` would not help.
        let ping = self
            .info(r)
            .map(|i| {
                i.address
                    .rsplit_once(':')
                    .map(|(a, _)| a)
                    .unwrap_or(&i.address)
                    .to_string()
            })
            .unwrap_or_else(|| host.to_string());
        (
            VerdictKind::RankUnreachable,
            Fault::Lost,
            format!(
                "its host has not acknowledged the control connection for {} and it has sent nothing for \
                 {} (host powered off or crashed, or its network link cut; not a stopped process)",
                secs(for_ms),
                secs(silent)
            ),
            format!(
                "is {host} up? its power and console through its BMC (ipmitool chassis status against \
                 the BMC's address; the console for a kernel panic); `ping {host}` and `ping {ping}` from the coordinator's host; \
                 its link and switch port (`ip -s link` on {host}, the switch's port state)"
            ),
        )
    }

    /// The rank's control connection is open but it has been `silent` past the deadline.
    fn silent_fault(
        &self,
        silent: u64,
        ev: &mut BTreeMap<String, Value>,
        pid: Option<u32>,
        host: &str,
    ) -> (VerdictKind, Fault, String, String) {
        ev.insert("silent_ms".into(), json!(silent));
        let next = match pid {
            Some(p) => format!(
                "on {host}: `ps -o pid,stat,wchan:20,cmd -p {p}` (stat T = stopped: `kill -CONT {p}`), \
                 `cat /proc/{p}/stack`, `uptime` (a load far above the cores starves it)"
            ),
            None => {
                format!("on {host}: `ps -C fabprobe -o pid,stat,wchan:20,cmd` (stat T = stopped)")
            }
        };
        (
            VerdictKind::RankStalled,
            Fault::Stalled,
            format!(
                "its control connection is open but it has sent nothing for {} (process stopped, e.g. \
                 SIGSTOP, stuck, or given no CPU on a saturated host)",
                secs(silent)
            ),
            next,
        )
    }

    /// Rank `r`'s latest heartbeat says it waited for a CPU at least half the time
    /// ([`CpuWait::starved`]) while a wait past the deadline involves it (it waits, or a
    /// peer waits on it): its host is starved, and that wait is not a link's fault.
    fn starved(&self, r: Rank) -> Option<CpuWait> {
        let rep = self.report(r)?;
        let cpu = rep.cpu.filter(CpuWait::starved)?;
        (rep.waiting_on.is_some() || self.waiters.contains_key(&r)).then_some(cpu)
    }

    fn starved_fault(
        &self,
        r: Rank,
        ev: &mut BTreeMap<String, Value>,
        host: &str,
    ) -> Option<(VerdictKind, Fault, String, String)> {
        let cpu = self.starved(r)?;
        ev.insert("cpu_wait_ms".into(), json!(cpu.wait_ms));
        ev.insert("cpu_window_ms".into(), json!(cpu.window_ms));
        let what = format!(
            "starved of CPU: a thread of its process waited {} of the last {} runnable but off a CPU, so a \
             wait on it past the deadline is its host's load, not a hung link",
            secs(cpu.wait_ms),
            secs(cpu.window_ms)
        );
        let next = format!(
            "on {host}: what holds the CPUs (`top`, `ps -eo pid,stat,pcpu,comm --sort=-pcpu | head`, \
             `cat /proc/pressure/cpu`); rerun when it is idle"
        );
        Some((VerdictKind::RankStalled, Fault::Stalled, what, next))
    }

    /// Rank `r`, not waiting on a peer, whose progress counter stood still past its phase's
    /// allowance: its report, for how long, and the allowance. A rank blocked on a peer
    /// (`waiting_on`: a receive, a send, a link it could not open) or on the coordinator's
    /// word after its own failure is never stalled for it: the wait is judged on whom it
    /// waits, or not at all.
    fn stood_still(&self, r: Rank, w: &RankWatch) -> Option<(&'a WaitReport, u64, u64)> {
        let rep = self.report(r)?;
        let still = self.unchanged_for(w)?;
        if rep.waiting_on.is_some() || rep.awaiting_coordinator {
            return None;
        }
        let allowed = if rep.phase.is_local_work() {
            local_work_allowance_ms(self.s.timeout_ms)
        } else if rep.phase == Phase::Connect {
            link_setup_allowance_ms(self.s.timeout_ms, self.s.grace_ms)
        } else if is_data_phase(rep.phase) {
            self.s.timeout_ms + self.s.grace_ms
        } else {
            return None;
        };
        (still >= allowed).then_some((rep, still, allowed))
    }

    /// Alive (heartbeats arrive) but the progress counter stands still: in a data phase past
    /// the timeout and its grace, or in local work past its own allowance, with its own words.
    fn no_progress(
        &self,
        r: Rank,
        w: &RankWatch,
        ev: &mut BTreeMap<String, Value>,
        pid: Option<u32>,
        host: &str,
    ) -> Option<(VerdictKind, Fault, String, String)> {
        let (rep, still, allowed) = self.stood_still(r, w)?;
        let local = rep.phase.is_local_work();
        let setup = rep.phase == Phase::Connect;
        ev.insert("no_progress_ms".into(), json!(still));
        ev.insert("progress".into(), json!(rep.progress));
        ev.insert("phase".into(), json!(rep.phase.name()));
        let next = match pid {
            Some(p) => {
                format!("on {host}: `cat /proc/{p}/stack`, `top -H -p {p}` (a spinning or blocked thread)")
            }
            None => format!("on {host}: `top -H` for the fabprobe process (a spinning or blocked thread)"),
        };
        let what = if local {
            format!(
                "alive (heartbeats arrive) but its local work ({}: buffers, result check or the step between \
                 sizes, no data wait) has not finished in {} (allowed {}; memory pressure or swapping?)",
                rep.phase.name(),
                secs(still),
                secs(allowed)
            )
        } else if setup {
            format!(
                "alive (heartbeats arrive) but opening its data links has not finished in {} (allowed {}; \
                 the open's own deadline passed without a report of the link it could not open)",
                secs(still),
                secs(allowed)
            )
        } else {
            format!(
                "alive (heartbeats arrive) but no progress for {} and not waiting on any peer",
                secs(still)
            )
        };
        Some((VerdictKind::RankStalled, Fault::Stalled, what, next))
    }

    /// Receiver `r` waits for data from `p`: does `p` show it sent it?
    fn sent(&self, r: &WaitReport, p: &WaitReport) -> Option<Sent> {
        if p.waiting_on == Some(r.rank) && !p.waiting_to_receive {
            return Some(Sent::Blocked);
        }
        // Positions compare only on the same channel: channels run independently (one can
        // be a step ahead of another on the same rank). Each report shows one channel, and
        // a rank with several also sends where it stands on the others.
        if let Some(at) = p.position_on(r.channel)
            && at.key() > r.position().key()
        {
            return Some(Sent::Ahead(at.phase, at.step));
        }
        // Byte counts are per step and per channel: comparable only at the same place.
        if (p.round, p.phase, p.step, p.channel) == (r.round, r.phase, r.step, r.channel)
            && p.bytes_sent > r.bytes_received
        {
            return Some(Sent::Bytes(p.bytes_sent, r.bytes_received));
        }
        None
    }

    fn hang(&self, r: &WaitReport, at: u64, p: Rank, sent: Option<(Sent, &WaitReport)>) -> Verdict {
        let waited = r.since_progress_ms + self.now.saturating_sub(at);
        let mut ev: BTreeMap<String, Value> = BTreeMap::new();
        ev.insert("phase".into(), json!(r.phase.name()));
        ev.insert("step".into(), json!(r.step));
        ev.insert("channel".into(), json!(r.channel));
        ev.insert("waited_ms".into(), json!(waited));
        ev.insert("bytes_received".into(), json!(r.bytes_received));
        ev.insert("conclusive".into(), json!(sent.is_some()));
        let (fh, th) = (self.host_or(p), self.host_or(r.rank));
        let why = self.what_was_sent(p, sent.as_ref(), &mut ev);
        let message = format!(
            "HANG {} waits for data from {} since step {} of {}; {why}: suspect the link {fh} -> {th}",
            self.label(r.rank),
            self.label(p),
            r.step,
            r.phase.name()
        );
        Verdict {
            rail: None,
            kind: VerdictKind::HangLink,
            from_rank: Some(p),
            to_rank: Some(r.rank),
            from_host: self.host(p),
            to_host: self.host(r.rank),
            evidence: ev,
            message,
            next: Some(self.hang_next(p, r.rank, (&fh, &th))),
        }
    }

    /// What sender `p` says of the data its receiver waits for, in words (and in `ev`).
    fn what_was_sent(
        &self,
        p: Rank,
        sent: Option<&(Sent, &WaitReport)>,
        ev: &mut BTreeMap<String, Value>,
    ) -> String {
        let pn = self.shown(p);
        let Some((how, prep)) = sent else {
            ev.insert("sender_state".into(), json!("waiting"));
            return "no rank reports having sent data that did not arrive, and this is the longest wait"
                .into();
        };
        ev.insert("sender_phase".into(), json!(prep.phase.name()));
        ev.insert("sender_step".into(), json!(prep.step));
        ev.insert("sender_bytes_sent".into(), json!(prep.bytes_sent));
        let (state, text) = match how {
            Sent::Blocked => (
                "blocked_sending",
                format!("rank {pn} sent it and is blocked sending more"),
            ),
            Sent::Ahead(ph, st) => {
                // Where the sender stands on the receiver's channel (its report may show another).
                ev.insert("sender_phase".into(), json!(ph.name()));
                ev.insert("sender_step".into(), json!(st));
                (
                    "ahead",
                    format!("rank {pn} sent it and moved on to step {st} of {}", ph.name()),
                )
            }
            Sent::Bytes(s, got) => (
                "bytes_in_flight",
                format!("rank {pn} sent {s} bytes of this step, {got} arrived"),
            ),
        };
        ev.insert("sender_state".into(), json!(state));
        text
    }

    /// What to check on the link from `p` (on `fh`) to `to` (on `th`): a command to paste.
    fn hang_next(&self, p: Rank, to: Rank, (fh, th): (&str, &str)) -> String {
        let ping = self.info(to).map(|i| {
            i.address
                .rsplit_once(':')
                .map(|(a, _)| a)
                .unwrap_or(&i.address)
                .to_string()
        });
        let dev = |x: Rank| {
            self.info(x)
                .and_then(|i| i.device.clone())
                .map(|d| format!(" ({d})"))
                .unwrap_or_default()
        };
        format!(
            "on {fh} and {th}: `fabprobe links` (port state, error counters); check the data path {fh}{} -> {th}{}: \
             firewall rules on the data interface, the switch port{}",
            dev(p),
            dev(to),
            ping.map(|a| {
                // A command to paste: the net device, never an RDMA label.
                let via = self
                    .info(p)
                    .and_then(|i| i.netdev())
                    .map(|d| format!("-I {d} "))
                    .unwrap_or_default();
                format!(", `ping {via}{a}` from {fh}")
            })
            .unwrap_or_default()
        )
    }

    /// Only a blocked sender speaks: its receiver is alive but does not report waiting for it.
    fn blocked(&self, s: &WaitReport, at: u64, to: Rank) -> Verdict {
        let waited = s.since_progress_ms + self.now.saturating_sub(at);
        let mut ev: BTreeMap<String, Value> = BTreeMap::new();
        ev.insert("phase".into(), json!(s.phase.name()));
        ev.insert("step".into(), json!(s.step));
        ev.insert("channel".into(), json!(s.channel));
        ev.insert("waited_ms".into(), json!(waited));
        ev.insert("sender_bytes_sent".into(), json!(s.bytes_sent));
        ev.insert("sender_state".into(), json!("blocked_sending"));
        ev.insert("conclusive".into(), json!(false));
        let (fh, th) = (self.host_or(s.rank), self.host_or(to));
        let tn = self.shown(to);
        let message = format!(
            "HANG {} is blocked sending to {} since step {} of {}; rank {tn} does not report waiting for \
             it: suspect the link {fh} -> {th} or rank {tn}'s receive path",
            self.label(s.rank),
            self.label(to),
            s.step,
            s.phase.name()
        );
        Verdict {
            rail: None,
            kind: VerdictKind::HangLink,
            from_rank: Some(s.rank),
            to_rank: Some(to),
            from_host: self.host(s.rank),
            to_host: self.host(to),
            evidence: ev,
            message,
            next: Some(format!(
                "on {th}: `ss -tni` (a full receive queue from {fh}) and fabprobe links; on {fh} and {th}: \
                 the data path between them"
            )),
        }
    }
}

/// The verdicts for the run as the coordinator sees it at `now_ms`.
pub(crate) fn judge(state: &WatchState<'_>, now_ms: u64) -> Vec<Verdict> {
    let j = Judgment::new(state, now_ms);
    let mut faulty: BTreeMap<Rank, Fault> = BTreeMap::new();
    let mut lost = Vec::new();
    let mut stalled = Vec::new();
    for w in &state.watch {
        if let Some((f, v)) = j.fault(w) {
            faulty.insert(w.rank, f);
            if f == Fault::Lost {
                lost.push(v)
            } else {
                stalled.push(v)
            }
        }
    }

    let mut hangs = Vec::new();
    let mut named: BTreeSet<(Rank, Rank)> = BTreeSet::new();
    let mut inconclusive: Vec<(u64, &WaitReport, u64, Rank)> = Vec::new();
    let mut first_wait: Option<u64> = None;
    let mut blocked: Vec<(u64, &WaitReport, u64, Rank)> = Vec::new();
    for w in &state.watch {
        let Some((at, r)) = &w.last else { continue };
        if faulty.contains_key(&w.rank) {
            continue;
        }
        let Some(p) = r.waiting_on.filter(|&p| p != w.rank) else {
            continue;
        };
        first_wait = Some(first_wait.map_or(*at, |f| f.min(*at)));
        if faulty.contains_key(&p) {
            // A wait on a lost or stalled rank is explained by that rank.
            continue;
        }
        if !r.waiting_to_receive {
            // A blocked sender is judged from its receiver's side, unless nothing else speaks.
            blocked.push((r.since_progress_ms + now_ms.saturating_sub(*at), r, *at, p));
            continue;
        }
        match j.report(p).and_then(|prep| Some((j.sent(r, prep)?, prep))) {
            Some(sent) => {
                if named.insert((p, w.rank)) {
                    hangs.push(j.hang(r, *at, p, Some(sent)));
                }
            }
            None => inconclusive.push((r.since_progress_ms + now_ms.saturating_sub(*at), r, *at, p)),
        }
    }
    let mut out = lost;
    out.append(&mut stalled);
    hangs.sort_by_key(|v| (v.to_rank, v.from_rank));
    out.append(&mut hangs);
    if out.is_empty() && first_wait.is_some_and(|f| now_ms >= f.saturating_add(state.grace_ms)) {
        // Longest wait first; ties to the lowest rank, for a deterministic answer.
        fn longest<'a>(v: &mut [(u64, &'a WaitReport, u64, Rank)]) -> Option<(&'a WaitReport, u64, Rank)> {
            v.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.rank.cmp(&b.1.rank)));
            v.first().map(|&(_, r, at, p)| (r, at, p))
        }
        if let Some((r, at, p)) = longest(&mut inconclusive) {
            out.push(j.hang(r, at, p, None));
        } else if let Some((s, at, to)) = longest(&mut blocked) {
            out.push(j.blocked(s, at, to));
        }
    }
    out
}

/// A non-coordinator rank's verdict on its control connection to the coordinator: closed, or
/// silent past `silence_ms` since `last_heard_ms`; None while it is healthy. Unless this
/// rank was the one not running: `own_late_ms` is how long its process did not run just
/// before (the reader's read came back that much past its timeout, or the process's clock
/// thread woke that much late: stopped, frozen, starved). Then the
/// close or silence it found is the coordinator giving up on this rank, and the verdict is
/// this rank's own stall (issue 45: a stalled rank's stderr said COORDINATOR LOST).
pub(crate) fn coordinator_lost_or_own_stall(
    me: &RankInfo,
    coordinator: &str,
    control: Control,
    last_heard_ms: u64,
    now_ms: u64,
    silence_ms: u64,
    own_late_ms: Option<u64>,
) -> Option<Verdict> {
    let silent = now_ms.saturating_sub(last_heard_ms);
    let mut ev: BTreeMap<String, Value> = BTreeMap::new();
    ev.insert("coordinator".into(), json!(coordinator));
    ev.insert("silent_ms".into(), json!(silent));
    let what = match control {
        Control::Closed { reset, .. } => {
            ev.insert("reset".into(), json!(reset));
            format!(
                "the control connection to the coordinator {coordinator} {}",
                if reset { "was reset" } else { "closed" }
            )
        }
        Control::Unacked { .. } | Control::Open if silent > silence_ms => {
            format!(
                "the coordinator {coordinator} has sent nothing for {}",
                secs(silent)
            )
        }
        _ => return None,
    };
    if let Some(late) = own_late_ms {
        return Some(own_stall(me, coordinator, &what, late, ev));
    }
    Some(Verdict {
        rail: None,
        kind: VerdictKind::CoordinatorLost,
        from_rank: Some(0),
        to_rank: Some(me.rank),
        from_host: None,
        to_host: Some(me.host.clone()),
        evidence: ev,
        message: format!(
            "COORDINATOR LOST rank {} ({}): {what}; exiting",
            me.shown(),
            me.host
        ),
        next: Some(format!(
            "look at rank 0's output on the coordinator's host ({coordinator}): it exited, was killed or its host is \
             unreachable; then rerun"
        )),
    })
}

/// This rank's own stall, as it can know it: its reader came back `late_ms` past its
/// timeout, then found `what` (the coordinator's close or silence).
fn own_stall(
    me: &RankInfo,
    coordinator: &str,
    what: &str,
    late_ms: u64,
    mut ev: BTreeMap<String, Value>,
) -> Verdict {
    ev.insert("own_late_ms".into(), json!(late_ms));
    Verdict {
        rail: None,
        kind: VerdictKind::RankStalled,
        from_rank: Some(me.rank),
        to_rank: None,
        from_host: Some(me.host.clone()),
        to_host: None,
        evidence: ev,
        message: format!(
            "RANK STALLED rank {} ({}), this rank: its process did not run for at least {} (its clock thread \
             woke that much late, or its read of the control connection came back that much past its timeout: \
             stopped, frozen or starved), and then {what}: the coordinator gave up on this rank, it was not lost; \
             exiting",
            me.shown(),
            me.host,
            secs(late_ms)
        ),
        next: Some(format!(
            "find what stopped or starved this process on {} (a debugger, SIGSTOP, a frozen cgroup, \
             /proc/pressure/cpu, dmesg); rank 0's output on the coordinator's host ({coordinator}) has the run's verdict",
            me.host
        )),
    }
}

/// `31.0 s` for 31000 (the same text as `ms as f64 / 1000.0` gives, checked for every ms
/// up to 50 000 000).
fn secs(ms: u64) -> String {
    crate::text::secs(std::time::Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::diagnosis::localize::sim;

    const T: u64 = 30_000;
    const NOW: u64 = 100_000;

    fn ranks(n: usize) -> Vec<RankInfo> {
        sim::ranks(n)
            .into_iter()
            .map(|mut r| {
                r.pid = Some(1000 + r.rank);
                r
            })
            .collect()
    }

    /// Status of `rank` at `phase`/`step`: a heartbeat when `on` is None.
    fn st(rank: Rank, phase: Phase, step: u32, on: Option<(Rank, bool)>, recv: u64, sent: u64) -> WaitReport {
        WaitReport {
            step,
            waiting_on: on.map(|(p, _)| p),
            waiting_to_receive: on.is_some_and(|(_, r)| r),
            bytes_received: recv,
            bytes_sent: sent,
            since_progress_ms: if on.is_some() { T } else { 0 },
            progress: 100 + step as u64,
            ..WaitReport::new(rank, phase)
        }
    }

    fn watch(rank: Rank, control: Control, at: u64, s: WaitReport) -> RankWatch {
        let p = s.progress;
        RankWatch {
            rank,
            control,
            last: Some((at, s)),
            progress: vec![(at.saturating_sub(1000), p - 1), (at, p)],
        }
    }

    fn state(n: usize, watch: Vec<RankWatch>) -> WatchState<'static> {
        WatchState {
            ranks: ranks(n).into(),
            watch,
            timeout_ms: T,
            silence_ms: 5_000,
            grace_ms: 1_000,
            since_ms: 0,
        }
    }

    /// Six ranks in a ring; `f(rank)` gives each one's control state and status.
    fn ring6(f: impl Fn(Rank) -> (Control, u64, WaitReport)) -> WatchState<'static> {
        state(
            6,
            (0..6)
                .map(|r| {
                    let (c, at, s) = f(r);
                    watch(r, c, at, s)
                })
                .collect(),
        )
    }

    /// Every verdict a test looks at also has a next step that pastes.
    fn kinds(v: &[Verdict]) -> Vec<(VerdictKind, Option<Rank>, Option<Rank>)> {
        v.iter().for_each(|v| {
            crate::ring::diagnosis::pastes::assert_next_pastes(v);
        });
        v.iter().map(|v| (v.kind, v.from_rank, v.to_rank)).collect()
    }

    use Phase::{AllGather, ReduceScatter};
    const RECV: bool = true;
    const SEND: bool = false;
    const OPEN: Control = Control::Open;

    /// The link 4 -> 5 cut at step 2 of reduce-scatter: 5 waits on 4; downstream ranks wait
    /// on their predecessors one step further each (each is ahead of the one it waits on, so
    /// none of those waits is conclusive); rank 4 as `sender` says.
    fn cut(sender: WaitReport) -> WatchState<'static> {
        ring6(|r| {
            let s = match r {
                5 => st(5, ReduceScatter, 2, Some((4, RECV)), 0, 1 << 20),
                4 => sender.clone(),
                0 => st(0, ReduceScatter, 3, Some((5, RECV)), 0, 1 << 20),
                1 => st(1, ReduceScatter, 4, Some((0, RECV)), 0, 1 << 20),
                2 => st(2, AllGather, 0, Some((1, RECV)), 0, 1 << 20),
                _ => st(3, AllGather, 1, Some((2, RECV)), 0, 1 << 20),
            };
            (OPEN, NOW - 200, s)
        })
    }

    #[test]
    fn healthy_run_gives_nothing() {
        let s = ring6(|r| (OPEN, NOW - 300, st(r, AllGather, 3, None, 0, 0)));
        assert_eq!(judge(&s, NOW), vec![]);
        // Also right after the start, nobody heard from yet but within the silence deadline.
        let s = state(
            2,
            (0..2)
                .map(|r| RankWatch {
                    rank: r,
                    control: OPEN,
                    last: None,
                    progress: vec![],
                })
                .collect(),
        );
        assert_eq!(judge(&s, 4_000), vec![]);
    }

    #[test]
    fn cut_link_sender_blocked_whole_verdict() {
        let s = cut(st(4, ReduceScatter, 3, Some((5, SEND)), 1 << 20, 3 << 20));
        let v = judge(&s, NOW);
        let ev: BTreeMap<String, Value> = [
            ("phase", json!("reduce-scatter")),
            ("step", json!(2)),
            ("channel", json!(0)),
            ("waited_ms", json!(30_200)),
            ("bytes_received", json!(0)),
            ("conclusive", json!(true)),
            ("sender_phase", json!("reduce-scatter")),
            ("sender_step", json!(3)),
            ("sender_bytes_sent", json!(3 << 20)),
            ("sender_state", json!("blocked_sending")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(
            v,
            vec![Verdict {
                from_host: Some("node-e".into()),
                to_host: Some("node-f".into()),
                evidence: ev,
                message: "HANG rank 5 (node-f) waits for data from rank 4 (node-e) since step 2 of reduce-scatter; \
                          rank 4 sent it and is blocked sending more: suspect the link node-e -> node-f"
                    .into(),
                next: Some(
                    "on node-e and node-f: `fabprobe links` (port state, error counters); check the data path \
                     node-e (eth1) -> node-f (eth1): firewall rules on the data interface, the switch port, \
                     `ping -I eth1 198.18.1.6` from node-e"
                        .into()
                ),
                ..Verdict::bare(VerdictKind::HangLink, Some(4), Some(5))
            }]
        );
    }

    #[test]
    fn cut_link_other_sender_evidence() {
        // Rank 4 moved on: it waits on rank 3 at a later step.
        let v = judge(&cut(st(4, AllGather, 2, Some((3, RECV)), 0, 1 << 20)), NOW);
        assert_eq!(kinds(&v), vec![(VerdictKind::HangLink, Some(4), Some(5))]);
        assert_eq!(v[0].evidence["sender_state"], json!("ahead"));
        assert!(
            v[0].message
                .contains("rank 4 sent it and moved on to step 2 of all-gather: suspect"),
            "{}",
            v[0].message
        );
        // Everyone at the same step, waiting upstream; only rank 4 sent more than arrived.
        let s = ring6(|r| {
            let sent = if r == 4 { 2 << 20 } else { 0 };
            (
                OPEN,
                NOW - 200,
                st(r, ReduceScatter, 2, Some(((r + 5) % 6, RECV)), 0, sent),
            )
        });
        let v = judge(&s, NOW);
        assert_eq!(kinds(&v), vec![(VerdictKind::HangLink, Some(4), Some(5))]);
        assert!(
            v[0].message
                .contains("rank 4 sent 2097152 bytes of this step, 0 arrived"),
            "{}",
            v[0].message
        );
        // Rank 4 has not reported its wait yet, but its heartbeat is already past step 2.
        let v = judge(&cut(st(4, ReduceScatter, 3, None, 0, 0)), NOW);
        assert_eq!(kinds(&v), vec![(VerdictKind::HangLink, Some(4), Some(5))]);
    }

    /// Issue 30: rank 5 waits on rank 4 past the deadline and rank 4's heartbeat says its
    /// process waited 0.9 s of the last 1.0 s for a CPU: rank 4 is starved, named for that,
    /// and no link is. Not starved, the same picture names a link after the grace; starved
    /// with nobody waiting on it, nothing is named.
    #[test]
    fn a_starved_sender_is_not_a_hung_link() {
        let mut sender = st(4, ReduceScatter, 2, None, 0, 0);
        sender.cpu = Some(CpuWait {
            wait_ms: 900,
            window_ms: 1000,
        });
        let v = judge(&cut(sender.clone()), NOW);
        assert_eq!(kinds(&v), vec![(VerdictKind::RankStalled, Some(4), None)]);
        assert!(
            v[0].message.starts_with(
                "RANK STALLED rank 4 (node-e): starved of CPU: a thread of its process waited 0.9 s of the last 1.0 s"
            ),
            "{}",
            v[0].message
        );
        assert_eq!(v[0].evidence["cpu_wait_ms"], json!(900));
        sender.cpu = Some(CpuWait {
            wait_ms: 100,
            window_ms: 1000,
        });
        let v = judge(&cut(sender.clone()), NOW + 2_000);
        assert_eq!(kinds(&v).len(), 1);
        assert_eq!(v[0].kind, VerdictKind::HangLink, "{}", v[0].message);
        sender.cpu = Some(CpuWait {
            wait_ms: 900,
            window_ms: 1000,
        });
        let healthy = ring6(|r| {
            (
                OPEN,
                NOW - 300,
                if r == 4 {
                    sender.clone()
                } else {
                    st(r, AllGather, 3, None, 0, 0)
                },
            )
        });
        assert_eq!(judge(&healthy, NOW), vec![]);
    }

    #[test]
    fn early_partial_picture_waits_for_the_grace() {
        // Only rank 0's report is in; rank 5 (which it waits on) is behind: not rank 5's fault
        // yet, and the grace since the first report has not passed.
        let s = ring6(|r| match r {
            0 => (
                OPEN,
                NOW - 200,
                st(0, ReduceScatter, 3, Some((5, RECV)), 0, 1 << 20),
            ),
            _ => (OPEN, NOW - 200, st(r, ReduceScatter, 2, None, 0, 0)),
        });
        assert_eq!(judge(&s, NOW), vec![]);
    }

    #[test]
    fn inconclusive_cycle_names_the_longest_wait_after_the_grace() {
        let s = ring6(|r| {
            let mut rep = st(r, ReduceScatter, 2, Some(((r + 5) % 6, RECV)), 0, 0);
            rep.since_progress_ms = if r == 3 { T + 700 } else { T };
            (OPEN, NOW - 500, rep)
        });
        assert_eq!(judge(&s, NOW), vec![]);
        let v = judge(&s, NOW + 500);
        assert_eq!(kinds(&v), vec![(VerdictKind::HangLink, Some(2), Some(3))]);
        assert_eq!(v[0].evidence["conclusive"], json!(false));
        assert!(v[0].message.ends_with(
            "no rank reports having sent data that did not arrive, and this is the longest wait: suspect the \
             link node-c -> node-d"
        ), "{}", v[0].message);
    }

    /// Two ranks, two channels, the link 0 -> 1 dead (its ACKs too, as RoCE dropped one way):
    /// rank 0 got rank 1's data and moved on, rank 1 got nothing. Each heartbeat shows its
    /// longest-waiting channel, and here they differ (a CI run: 0 on channel 0, 1 on 1).
    fn two_channels(rank0_positions: Vec<Position>) -> WatchState<'static> {
        let mut r0 = st(0, AllGather, 1, Some((1, RECV)), 0, 0);
        r0.since_progress_ms = T + 900;
        r0.positions = rank0_positions;
        let mut r1 = st(1, ReduceScatter, 0, Some((0, RECV)), 0, 0);
        r1.channel = 1;
        r1.positions = vec![pos(ReduceScatter, 0), pos(ReduceScatter, 0)];
        state(
            2,
            vec![watch(0, OPEN, NOW - 500, r0), watch(1, OPEN, NOW - 500, r1)],
        )
    }

    fn pos(phase: Phase, step: u32) -> Position {
        Position {
            round: 0,
            phase,
            step,
        }
    }

    #[test]
    fn a_sender_is_judged_on_its_receivers_channel() {
        let s = two_channels(vec![pos(AllGather, 1), pos(AllGather, 0)]);
        let v = judge(&s, NOW);
        assert_eq!(kinds(&v), vec![(VerdictKind::HangLink, Some(0), Some(1))]);
        assert_eq!(v[0].evidence["conclusive"], json!(true));
        assert_eq!(v[0].evidence["channel"], json!(1));
        assert_eq!(v[0].evidence["sender_phase"], json!("all-gather"));
        assert_eq!(v[0].evidence["sender_step"], json!(0));
        assert!(
            v[0].message.ends_with(
                "rank 0 sent it and moved on to step 0 of all-gather: suspect the link node-a -> node-b"
            ),
            "{}",
            v[0].message
        );
    }

    #[test]
    fn a_sender_behind_on_the_receivers_channel_proves_nothing() {
        // Rank 0 ahead on its own channel but not on rank 1's: no proof either way, so the
        // longest wait is named after the grace, marked inconclusive.
        let s = two_channels(vec![pos(AllGather, 1), pos(ReduceScatter, 0)]);
        assert_eq!(judge(&s, NOW), vec![]);
        let v = judge(&s, NOW + 1_000);
        assert_eq!(kinds(&v), vec![(VerdictKind::HangLink, Some(1), Some(0))]);
        assert_eq!(v[0].evidence["conclusive"], json!(false));
        // A sender that sent no other channel's position (an older rank) is no proof either.
        let v = judge(&two_channels(Vec::new()), NOW + 1_000);
        assert_eq!(v[0].evidence["conclusive"], json!(false));
    }

    #[test]
    fn killed_rank_is_the_cause_not_its_waiters() {
        let s = ring6(|r| match r {
            2 => (
                Control::Closed {
                    at_ms: NOW - 3_000,
                    reset: true,
                },
                NOW - 3_100,
                st(2, ReduceScatter, 1, None, 0, 0),
            ),
            r => (
                OPEN,
                NOW - 200,
                st(r, ReduceScatter, 2, Some(((r + 5) % 6, RECV)), 0, 0),
            ),
        });
        let v = judge(&s, NOW);
        assert_eq!(kinds(&v), vec![(VerdictKind::RankLost, Some(2), None)]);
        assert_eq!(
            v[0].message,
            "RANK LOST rank 2 (node-c): its control connection was reset (the process exited or was killed); \
             last seen at step 1 of reduce-scatter; rank 3 waits on it"
        );
        assert_eq!(v[0].evidence["closed_ms_ago"], json!(3_000));
        assert_eq!(v[0].evidence["pid"], json!(1002));
        assert!(
            v[0].next
                .as_deref()
                .unwrap()
                .starts_with("on node-c: is fabprobe (pid 1002) still running?")
        );
    }

    #[test]
    fn node_gone_is_unreachable_once_silent() {
        let mk = |heard: u64| {
            ring6(|r| match r {
                4 => (
                    Control::Unacked {
                        since_ms: NOW - 8_000,
                    },
                    heard,
                    st(4, AllGather, 0, None, 0, 0),
                ),
                r => (OPEN, NOW - 200, st(r, AllGather, 0, None, 0, 0)),
            })
        };
        assert_eq!(judge(&mk(NOW - 2_000), NOW), vec![]);
        let v = judge(&mk(NOW - 9_000), NOW);
        assert_eq!(kinds(&v), vec![(VerdictKind::RankUnreachable, Some(4), None)]);
        assert_eq!(
            v[0].message,
            "RANK UNREACHABLE rank 4 (node-e): its host has not acknowledged the control connection for 8.0 s and \
             it has sent nothing for 9.0 s (host powered off or crashed, or its network link cut; not a stopped \
             process); last seen at step 0 of all-gather"
        );
        let next = v[0].next.clone().unwrap();
        assert!(next.contains("BMC") && next.contains("`ping node-e`"), "{next}");
        assert!(!next.contains("kill -CONT"), "{next}");
        assert_eq!(v[0].evidence["unacked_ms"], json!(8_000));
    }

    #[test]
    fn stopped_rank_is_stalled_not_lost() {
        let s = ring6(|r| match r {
            1 => (OPEN, NOW - 6_000, st(1, AllGather, 2, None, 0, 0)),
            2 => (OPEN, NOW - 100, st(2, AllGather, 2, Some((1, RECV)), 0, 0)),
            r => (OPEN, NOW - 100, st(r, AllGather, 3, None, 0, 0)),
        });
        let v = judge(&s, NOW);
        assert_eq!(kinds(&v), vec![(VerdictKind::RankStalled, Some(1), None)]);
        assert_eq!(
            v[0].message,
            "RANK STALLED rank 1 (node-b): its control connection is open but it has sent nothing for 6.0 s \
             (process stopped, e.g. SIGSTOP, stuck, or given no CPU on a saturated host); last seen at step 2 of all-gather; rank 2 waits on it"
        );
        assert!(v[0].next.as_deref().unwrap().contains("kill -CONT 1001"));
    }

    #[test]
    fn never_heard_from_is_stalled_after_the_silence_deadline() {
        let s = state(
            2,
            vec![
                watch(0, OPEN, 5_900, st(0, Phase::Connect, 0, None, 0, 0)),
                RankWatch {
                    rank: 1,
                    control: OPEN,
                    last: None,
                    progress: vec![],
                },
            ],
        );
        let v = judge(&s, 6_000);
        assert_eq!(kinds(&v), vec![(VerdictKind::RankStalled, Some(1), None)]);
        assert!(
            v[0].message
                .contains("never heard from since the rank table was sent")
        );
    }

    #[test]
    fn heartbeats_without_progress() {
        let mk = |still: u64, phase: Phase| {
            let mut s = ring6(|r| (OPEN, NOW - 100, st(r, phase, 1, None, 0, 0)));
            let w = &mut s.watch[3];
            // Heartbeats every second; the counter last moved `still` ms ago.
            w.progress = (0..70).map(|i| (NOW - 70_000 + i * 1000, 7)).collect();
            w.progress.retain(|&(at, _)| at + still > NOW);
            w.progress.insert(0, (NOW - still - 1_000, 6));
            s
        };
        assert_eq!(judge(&mk(20_000, AllGather), NOW), vec![]);
        let v = judge(&mk(T + 2_000, AllGather), NOW);
        assert_eq!(kinds(&v), vec![(VerdictKind::RankStalled, Some(3), None)]);
        assert!(
            v[0].message
                .contains("alive (heartbeats arrive) but no progress for 31.0 s"),
            "{}",
            v[0].message
        );
        // Waiting for results is not a stall.
        assert_eq!(judge(&mk(T + 2_000, Phase::Results), NOW), vec![]);
        // Opening data links (a scan order's) past the timeout and its grace is the open's
        // own failure to report, not a stall; past twice the timeout and the grace it is one.
        assert_eq!(judge(&mk(T + 2_000, Phase::Connect), NOW), vec![]);
        let v = judge(&mk(2 * T + 2_000, Phase::Connect), NOW);
        assert_eq!(kinds(&v), vec![(VerdictKind::RankStalled, Some(3), None)]);
        assert!(
            v[0].message
                .contains("but opening its data links has not finished in 61.0 s (allowed 61.0 s;"),
            "{}",
            v[0].message
        );
    }

    #[test]
    fn local_work_is_not_a_data_stall_and_has_its_own_allowance() {
        let allow = local_work_allowance_ms(T);
        assert_eq!(allow, 300_000);
        let now = 1_000_000;
        let mk = |still: u64, phase: Phase| {
            let mut s = ring6(|r| (OPEN, now - 100, st(r, phase, 0, None, 0, 0)));
            // Heartbeats every second for the last `still` ms, the counter unchanged.
            s.watch[3].progress = (0..=still / 1000).map(|i| (now - still + i * 1000, 7)).collect();
            s
        };
        for phase in [Phase::Prepare, Phase::Check, Phase::Between] {
            // Past the data rule's timeout and grace: still not a stall.
            assert_eq!(judge(&mk(T + 5_000, phase), now), vec![], "{phase:?}");
            assert_eq!(judge(&mk(allow - 1_000, phase), now), vec![], "{phase:?}");
            let v = judge(&mk(allow + 1_000, phase), now);
            assert_eq!(
                kinds(&v),
                vec![(VerdictKind::RankStalled, Some(3), None)],
                "{phase:?}"
            );
            assert!(
                v[0].message
                    .contains(&format!("its local work ({}", phase.name())),
                "{}",
                v[0].message
            );
            assert!(v[0].message.contains("allowed 300.0 s"), "{}", v[0].message);
        }
    }

    #[test]
    fn a_sender_between_blocks_has_not_sent_the_next_block() {
        // Rank 5 waits at step 1 of reduce-scatter of block 4 on rank 4, which finished block
        // 3 and is checking its result (round 4, nothing of block 4 sent): not "sent it and
        // moved on", so no conclusive verdict before the grace.
        let s = ring6(|r| {
            let mut s = match r {
                5 => st(5, ReduceScatter, 1, Some((4, RECV)), 0, 1 << 20),
                4 => st(4, Phase::Check, 0, None, 0, 0),
                r => st(r, ReduceScatter, 1, None, 0, 0),
            };
            s.round = 4;
            (OPEN, NOW - 200, s)
        });
        assert_eq!(judge(&s, NOW), vec![]);
        // One block earlier the same report shows it did send: conclusive.
        let mut s = s;
        s.watch[5].last.as_mut().unwrap().1.round = 3;
        let v = judge(&s, NOW);
        assert_eq!(kinds(&v), vec![(VerdictKind::HangLink, Some(4), Some(5))]);
        assert_eq!(v[0].evidence["sender_state"], json!("ahead"));
    }

    #[test]
    fn a_hang_over_rdma_pings_through_the_netdev() {
        let mut s = cut(st(4, ReduceScatter, 3, Some((5, SEND)), 1 << 20, 3 << 20));
        for r in s.ranks.to_mut() {
            r.device = Some(format!("rxe0:1 gid 1 (eth{})", r.rank));
        }
        let v = judge(&s, NOW);
        let next = v[0].next.as_deref().unwrap();
        assert!(next.contains("`ping -I eth4 "), "{next}");
        assert!(!next.contains("-I rxe0"), "{next}");
    }

    #[test]
    fn only_a_blocked_sender_speaks() {
        // Rank 1 blocked sending to rank 2, which heartbeats (not waiting, progress moving).
        let s = ring6(|r| match r {
            1 => (
                OPEN,
                NOW - 300,
                st(1, Phase::Scan, 0, Some((2, SEND)), 0, 8 << 20),
            ),
            r => (OPEN, NOW - 300, st(r, Phase::Scan, 0, None, 0, 0)),
        });
        assert_eq!(judge(&s, NOW), vec![]);
        let v = judge(&s, NOW + 1_000);
        assert_eq!(kinds(&v), vec![(VerdictKind::HangLink, Some(1), Some(2))]);
        assert_eq!(
            v[0].message,
            "HANG rank 1 (node-b) is blocked sending to rank 2 (node-c) since step 0 of scan; rank 2 does not \
             report waiting for it: suspect the link node-b -> node-c or rank 2's receive path"
        );
        assert_eq!(v[0].evidence["conclusive"], json!(false));
    }

    #[test]
    fn odd_reports_do_not_panic() {
        let s = state(
            2,
            vec![
                watch(0, OPEN, NOW, st(0, ReduceScatter, 0, Some((0, RECV)), 0, 0)),
                watch(1, OPEN, NOW, st(1, ReduceScatter, 0, Some((9, RECV)), 0, 0)),
            ],
        );
        assert_eq!(judge(&s, NOW), vec![]);
        let v = judge(&s, NOW + 1_000);
        assert_eq!(kinds(&v), vec![(VerdictKind::HangLink, Some(9), Some(1))]);
        assert!(v[0].message.contains("from rank 9 since"));
    }

    /// The first tick (100 ms apart) at which `judge` answers, for a run whose state at
    /// time t is `at(t)`: the time to verdict by construction.
    fn first_verdict(at: impl Fn(u64) -> WatchState<'static>, until: u64) -> Option<(u64, Vec<Verdict>)> {
        (0..=until / 100).map(|i| i * 100).find_map(|t| {
            let v = judge(&at(t), t);
            (!v.is_empty()).then_some((t, v))
        })
    }

    #[test]
    fn time_to_verdict() {
        let hb = |t: u64| t / 1000 * 1000; // heartbeats every second
        // Rank 2 SIGSTOPped at 10 s: silence deadline 5 s.
        let stopped = |t: u64| {
            ring6(|r| {
                let heard = if r == 2 { hb(t.min(10_000)) } else { hb(t) };
                (OPEN, heard, st(r, AllGather, 1, None, 0, 0))
            })
        };
        let (t, v) = first_verdict(stopped, 60_000).unwrap();
        assert_eq!(
            (t, kinds(&v)),
            (15_100, vec![(VerdictKind::RankStalled, Some(2), None)])
        );
        // Rank 2 killed at 10 s: the close is seen at once.
        let killed = |t: u64| {
            ring6(|r| {
                let c = if r == 2 && t >= 10_050 {
                    Control::Closed {
                        at_ms: 10_050,
                        reset: false,
                    }
                } else {
                    OPEN
                };
                (c, hb(t), st(r, AllGather, 1, None, 0, 0))
            })
        };
        let (t, v) = first_verdict(killed, 60_000).unwrap();
        assert_eq!(
            (t, kinds(&v)),
            (10_100, vec![(VerdictKind::RankLost, Some(2), None)])
        );
        // Link 4 -> 5 cut at 10 s: rank 5's wait report comes at 10 s + timeout, rank 4's
        // heartbeats already show it ahead.
        let cut_at = |t: u64| {
            ring6(|r| match r {
                5 if t >= 10_000 + T => (OPEN, 10_000 + T, st(5, ReduceScatter, 2, Some((4, RECV)), 0, 0)),
                5 => (OPEN, hb(t), st(5, ReduceScatter, 2, None, 0, 0)),
                4 if t >= 10_000 => (OPEN, hb(t), st(4, ReduceScatter, 3, None, 0, 0)),
                r => (OPEN, hb(t), st(r, ReduceScatter, 2, None, 0, 0)),
            })
        };
        let (t, v) = first_verdict(cut_at, 100_000).unwrap();
        assert_eq!(
            (t, kinds(&v)),
            (40_000, vec![(VerdictKind::HangLink, Some(4), Some(5))])
        );
    }

    #[test]
    fn coordinator() {
        let me = &ranks(4)[3];
        let a = "198.18.0.1:29500";
        assert_eq!(coordinator_lost_or_own_stall(me, a, OPEN, 9_000, 10_000, 5_000, None), None);
        let v = coordinator_lost_or_own_stall(
            me,
            a,
            Control::Closed {
                at_ms: 9_500,
                reset: false,
            },
            9_000,
            10_000,
            5_000,
            None,
        )
        .unwrap();
        assert_eq!(v.kind, VerdictKind::CoordinatorLost);
        assert_eq!(
            v.message,
            "COORDINATOR LOST rank 3 (node-d): the control connection to the coordinator 198.18.0.1:29500 closed; exiting"
        );
        let v = coordinator_lost_or_own_stall(me, a, OPEN, 1_000, 10_000, 5_000, None).unwrap();
        assert_eq!(
            v.message,
            "COORDINATOR LOST rank 3 (node-d): the coordinator 198.18.0.1:29500 has sent nothing for 9.0 s; exiting"
        );
        assert_eq!(v.evidence["silent_ms"], json!(9_000));
    }

    /// The same close and silence seen by a rank whose own read came back 4.2 s late: its
    /// own stall, never COORDINATOR LOST; a healthy connection is still no verdict.
    #[test]
    fn a_rank_that_did_not_run_names_its_own_stall() {
        let me = &ranks(4)[3];
        let a = "198.18.0.1:29500";
        let closed = Control::Closed {
            at_ms: 9_500,
            reset: false,
        };
        assert_eq!(
            coordinator_lost_or_own_stall(me, a, OPEN, 9_000, 10_000, 5_000, Some(4_200)),
            None
        );
        for (control, last) in [(closed, 9_000), (OPEN, 1_000)] {
            let v = coordinator_lost_or_own_stall(me, a, control, last, 10_000, 5_000, Some(4_200)).unwrap();
            assert_eq!(
                (v.kind, v.from_rank, v.to_rank),
                (VerdictKind::RankStalled, Some(3), None)
            );
            assert!(!v.message.contains("COORDINATOR LOST"), "{}", v.message);
            assert!(
                v.message.starts_with(
                    "RANK STALLED rank 3 (node-d), this rank: its process did not run for at least 4.2 s"
                ),
                "{}",
                v.message
            );
            assert_eq!(v.evidence["own_late_ms"], json!(4_200));
        }
    }

    /// Issue 45: a rank blocked on a peer is never the stalled one, whatever the blocking
    /// operation. Four ranks; rank 0's progress counter has stood still past the timeout and
    /// the grace while it is blocked in each kind of operation (a table: receive and send of
    /// a scan order, accept and connect of a link's open, receive and send of the sweep, and
    /// the wait for the coordinator's word after its own failure), and rank 1, the peer it is
    /// blocked on, is starved of CPU, silent, or alive and not waiting. The verdict names
    /// rank 1 (starved, stalled) or the link between them by the usual rules, or nothing
    /// where it cannot tell (the coordinator's word); never rank 0 alone, never rank 2 or 3.
    /// The control: the same frozen counter waiting on nothing is rank 0's stall.
    #[test]
    fn a_rank_blocked_on_a_peer_is_never_the_stalled_one() {
        #[derive(Clone, Copy, Debug, PartialEq)]
        enum Peer {
            Starved,
            Silent,
            Alive,
        }
        let blocked = |phase: Phase, on: Option<(Rank, bool)>, awaiting: bool| WaitReport {
            since_progress_ms: T + 5_000,
            awaiting_coordinator: awaiting,
            ..st(0, phase, 0, on, 0, 0)
        };
        let (stalled, starved, hang) = (
            VerdictKind::RankStalled,
            VerdictKind::RankStalled,
            VerdictKind::HangLink,
        );
        // (operation, rank 0's report, the verdict when rank 1 is alive)
        type Named = Vec<(VerdictKind, Option<Rank>, Option<Rank>)>;
        let ops: Vec<(&str, WaitReport, Named)> = vec![
            (
                "scan receive",
                blocked(Phase::Scan, Some((1, RECV)), false),
                vec![(hang, Some(1), Some(0))],
            ),
            (
                "scan send",
                blocked(Phase::Scan, Some((1, SEND)), false),
                vec![(hang, Some(0), Some(1))],
            ),
            (
                "accept",
                blocked(Phase::Connect, Some((1, RECV)), false),
                vec![(hang, Some(1), Some(0))],
            ),
            (
                "connect",
                blocked(Phase::Connect, Some((1, SEND)), false),
                vec![(hang, Some(0), Some(1))],
            ),
            (
                "sweep receive",
                blocked(ReduceScatter, Some((1, RECV)), false),
                vec![(hang, Some(1), Some(0))],
            ),
            (
                "sweep send",
                blocked(AllGather, Some((1, SEND)), false),
                vec![(hang, Some(0), Some(1))],
            ),
            ("coordinator's word", blocked(Phase::Scan, None, true), vec![]),
        ];
        for (op, rep0, alive) in ops {
            for peer in [Peer::Starved, Peer::Silent, Peer::Alive] {
                let mut one = st(1, rep0.phase, 0, None, 0, 0);
                if peer == Peer::Starved {
                    one.cpu = Some(CpuWait {
                        wait_ms: 950,
                        window_ms: 1000,
                    });
                }
                let at1 = if peer == Peer::Silent {
                    NOW - 6_000
                } else {
                    NOW - 200
                };
                let mut watch0 = watch(0, OPEN, NOW - 2_000, rep0.clone());
                watch0.progress = vec![(NOW - T - 5_000, rep0.progress), (NOW - 2_000, rep0.progress)];
                let s = state(
                    4,
                    vec![
                        watch0,
                        watch(1, OPEN, at1, one),
                        watch(2, OPEN, NOW - 200, st(2, rep0.phase, 0, None, 0, 0)),
                        watch(3, OPEN, NOW - 200, st(3, rep0.phase, 0, None, 0, 0)),
                    ],
                );
                let v = judge(&s, NOW);
                let want = match (peer, rep0.waiting_on) {
                    // Nobody waits on a starved rank 1: its load explains no wait.
                    (Peer::Starved, None) => vec![],
                    (Peer::Starved, Some(_)) => vec![(starved, Some(1), None)],
                    (Peer::Silent, _) => vec![(stalled, Some(1), None)],
                    (Peer::Alive, _) => alive.clone(),
                };
                assert_eq!(kinds(&v), want, "{op}, rank 1 {peer:?}: {v:#?}");
                if peer == Peer::Starved && rep0.waiting_on.is_some() {
                    assert!(
                        v[0].message.contains("starved of CPU")
                            && v[0].message.contains("rank 0 waits on it"),
                        "{op}: {}",
                        v[0].message
                    );
                }
            }
        }
        // The control: frozen, waiting on nothing, not failed: rank 0 is stalled.
        let mut watch0 = watch(0, OPEN, NOW - 2_000, blocked(Phase::Scan, None, false));
        watch0.progress = vec![(NOW - T - 5_000, 100), (NOW - 2_000, 100)];
        let alive = |r| watch(r, OPEN, NOW - 200, st(r, Phase::Scan, 0, None, 0, 0));
        let v = judge(&state(4, vec![watch0, alive(1), alive(2), alive(3)]), NOW);
        assert_eq!(kinds(&v), vec![(stalled, Some(0), None)]);
    }
}
