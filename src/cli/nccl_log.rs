//! `fabprobe nccl-log FILE... | DIR | -`: summary and root-cause verdicts from NCCL logs.

use std::io::Read;
use std::path::PathBuf;

use clap::Args;

use super::{Format, GlobalArgs, Hinted, Outcome, UsageError, emit};
use crate::nccl_log::{Analyzer, flight};
use crate::render::{Envelope, HostInfo};

#[derive(Debug, Args)]
#[command(after_long_help = help())]
pub(crate) struct NcclLogArgs {
    /// Log files, a directory of them (read in name order, not recursively), or `-` for
    /// stdin. Files may be one per rank or one combined job log, and PyTorch
    /// flight-recorder dumps (told apart by their content).
    #[arg(required = true, value_name = "FILE|DIR|-")]
    pub inputs: Vec<PathBuf>,
    /// Also draw the report as a self-contained HTML page in OUT.html (replaced atomically),
    /// the page `fabprobe report` draws from this run's --format json.
    #[arg(long, value_name = "OUT.html")]
    pub html: Option<PathBuf>,
}

/// The help before the cause list (generated from the registry, `nccl_log::causes`).
const NCCL_LOG_HELP: &str = "\
Reads NCCL_DEBUG=WARN, INFO or TRACE output as people have it: one file per rank, one
combined job log, or stdin; lines pasted without NCCL's header or with it anonymised
(`host-01:XXXXXX [5]`, `<hostname>:<pid>`), markdown debris, ANSI colour and CRLF (the
verdict then says host and rank are unknown); behind launcher prefixes (mpirun --tag-output/--timestamp-output
`[1,N]<stdout>:`, srun -l `N: `, PyTorch `[rankN]:`, torchrun `[defaultN]:`, pdsh `host: `,
container timestamps, Ray's `(Worker pid=N)`); interleaved ranks; headers with or without
pid:tid; NCCL 1.x (`WARN file.cu:NNN`), 2.0-2.2 (the level without `NCCL`: `host:pid:tid
[dev] file:line WARN`, `... [dev] INFO`), 2.4-2.8 (`include/socket.h`, `.cu` files, `NET :
Using interface`) to 2.29 formats; PyTorch ProcessGroupNCCL watchdog lines. Each input is
cut into chunks of whole lines that every core reads in parallel, merged in input order to
the answer one pass gives, in bounded memory (lines longer than 64 KiB are cut). A line no
rule understands is counted, never fatal.
--root does not apply.

FLIGHT RECORDER
  PyTorch's flight-recorder dumps (TORCH_FR_BUFFER_SIZE; one per rank, written on a watchdog
  timeout or on demand: pickle, or JSON from _dump_fr_trace_json) are read among the inputs,
  a job's directory holding logs and dumps included: a dump is recognised by its content (a
  pickle's protocol 2-5 header, or a JSON object with the recorder's keys), never by its
  name; its rank is the number its name ends with, as PyTorch's writer names it
  (nccl_trace_rank_N). Dump versions 1.x and 2.x (2.2 in torch 2.4 to 2.10 and later), NCCL
  and Gloo. A dump that cannot be decoded is named with the field (not judged, never taken
  for a dead rank); the rest is read. Per process group (name and members, from pg_config,
  else the world for the default group, else the ranks whose dumps hold it), each verdict
  blames exactly the ranks the records show, with the sequence number, each rank's call and
  the ranks waiting (knock-ons, not causes):
    fr_collective_mismatch   at one sequence number the ranks called different collectives
                             (op, sizes or dtype): the ranks outside the largest agreeing
                             set; a rank that left no dump after it is a knock-on
    fr_p2p_mismatch          a pending send/recv whose peer is not pending the matching op
                             and is not busy elsewhere
    fr_rank_not_entered      members behind the sequence number the others wait in, with
                             where they were last seen
    fr_rank_no_dump          members with no dump while the others wait (died or killed);
                             what the NCCL log says of them is joined
    fr_all_entered_none_completed  every member entered, none completed, on a backend that
                             tracks completion (NCCL; Gloo does not): the fabric or NCCL; next
                             is `fabprobe ring` across exactly their hosts
    fr_buffer_wrapped        (unknown) a rank's buffer wrapped before the wait: not judged
  The dumps' verdicts come first; the log's collective timeouts become their knock-ons; the
  log's rank -> host map names every rank's host.

SUMMARY
  NCCL versions per host, hosts, ranks and local ranks, ring and tree channels, NCCL's
  channel line, per connection (from rank, to rank) the transport as NCCL printed it and
  counts per class (NET/IB/GDRDMA, NET/IB, NET/Socket, P2P/IPC, P2P/CUMEM, SHM, ...),
  bootstrap and socket interfaces, HCAs, GDR on/off per HCA, network and plugin.

VERDICTS
  The first failure of each process, collapsed to root causes: status 5 flushes, closed
  connections and collective timeouts are knock-ons of a hard failure (counted in the first
  verdict's knock_ons); timeouts on one sequence number are one event whose suspects are the
  communicator's ranks missing from it; one cause on one host, device and peer is one
  verdict listing its ranks. A cause is read wherever the log says it: NCCL's WARN and
  INFO lines, the pre-2.4 forms, PyTorch's (and vLLM's, DeepSpeed's) `Last error:` text and
  NCCL's words on a bare line; a `Last error:` text and the WARN it quotes are one verdict.
  A return code alone (`unhandled system error`, `ncclInternalError`) or a WARN no rule
  knows is generic: a named cause anywhere in the log outranks it. Causes, in the order the
  WARN rules test them (id, severity (class): what it is):
";

/// The help after the generated cause list.
const NCCL_LOG_HELP_TAIL: &str = "\
  An earlier event that explains later completion errors (an IB async or port event, a GID
  table change, a peer's own failure) is the verdict; those errors are listed under it
  (explains) and counted as knock-ons. A loopback or virtual interface NCCL gave out explains
  the socket connect failures: every one across hosts, on one host those whose address
  names it (fe80::1%ip6tnl0).
  socket_connect_failed carries the errno (111 refused, 110 timed out, 113 no route);
  failures carry NCCL's return code as nccl_result (`ncclSystemError (2)`, from the line
  or the process's error trail). PyTorch's global rank is the launcher's [rankN] label, not
  the group rank in [PG ID ... Rank N]; a rank seen past a sequence number is no suspect.
  With no NCCL line in the input (an empty file, a log written without NCCL_DEBUG) the
  verdict is no_nccl_output, severity unknown (no finding in the JSON envelope, exit 3):
  rerun the job with NCCL_DEBUG=INFO. A directory with no file in it is a mistake in the
  command (exit 2), as it is for sweep.
  Each next: step fills in the hosts, peer and files the log names, so it pastes: commands
  are in backticks (on node-a and node-b: `fabprobe links`); what the log does not name is
  said in words (on that host).

OUTPUT
  The headline first (fabprobe nccl-log: FAIL|WARN|PASS|UNKNOWN ...; worst: ...), then the
  verdicts, fail before warn, then the summary and the hosts table (at most 4 interfaces or
  HCAs per cell, then \"and N more\"; JSON has them all), then lines not understood.
  --html OUT.html also draws the job's report as the self-contained page `fabprobe report`
  draws from this --format json (the root cause first, then the flight recorder's
  verdicts; its header names nccl-log as the source), replaced atomically; stdout and the
  exit status are as without it.

JSON DATA (fabprobe.nccl-log)
  {\"summary\": {\"inputs\", \"bytes\", \"lines\", \"nccl_lines\", \"unrecognised_lines\",
     \"unrecognised_samples\", \"truncated_lines\", \"nccl_versions\": {version: [host]},
     \"hosts\": [{\"host\", \"ranks\", \"local_ranks\", \"bootstrap\", \"socket_interfaces\",
     \"hcas\", \"gdr\": {hca: bool}}], \"world_size\", \"ranks_seen\", \"ring_channels\",
     \"ring_sample\", \"tree_channels\", \"channels\", \"networks\", \"plugins\",
     \"transports\": {class: count}, \"connections\": [{\"from_rank\", \"to_rank\", \"via\"}],
     \"connections_dropped\"},
   \"verdicts\": [{\"cause\", \"severity\", \"host\", \"rank\", \"ranks\", \"device\",
     \"peer\": {\"addr\", \"host\", \"rank\"}, \"local_gid\", \"remote_gid\", \"status\",
     \"vendor_err\", \"file\", \"line_no\", \"line\", \"meaning\", \"next\", \"seq\", \"op\",
     \"suspects\", \"knock_ons\", \"explains\", \"nccl_result\", \"errno\"}]}
  seq, op, suspects, explains, nccl_result and errno are left out when absent.
  With flight-recorder dumps among the inputs, also
  \"flight_recorder\": {\"dumps\": [{\"rank\", \"file\", \"format\", \"version\",
     \"entries\", \"wrapped\", \"tracks_completion\", \"last\": call}],
   \"groups\": [{\"name\", \"desc\", \"ranks\", \"members_from\"}],
   \"verdicts\": [{\"cause\", \"severity\", \"ranks\", \"group\", \"group_desc\",
     \"members\", \"seq\", \"op\", \"calls\": [{\"ranks\", \"count\", \"call\",
     \"state\"}], \"waiting\", \"knock_ons\", \"log_says\", \"hosts\": {rank: host},
     \"meaning\", \"next\", \"file\"}], \"notes\"}
  where a call is {\"group\", \"seq\", \"p2p\", \"op\", \"input_sizes\",
  \"input_dtypes\", \"output_sizes\", \"output_dtypes\", \"state\", \"coalesced\"};
  coalesced (a coalescing block's calls in record order, its end last; PyTorch records
  them under one sequence number) is left out for a single call.
  The envelope's findings repeat each verdict as nccl_log.<cause>.";

/// The long help: its prose, each cause of the registry as `id (severity, class): what it
/// is` in the registry's order, the rest (the exit-status table follows, as on every page).
fn help() -> String {
    format!(
        "{NCCL_LOG_HELP}{}{NCCL_LOG_HELP_TAIL}\n",
        crate::nccl_log::causes::help_list()
    )
}

fn cannot(what: &str, p: &std::path::Path, e: std::io::Error) -> anyhow::Error {
    Hinted {
        msg: format!("cannot {what} {}: {e}", p.display()),
        hint: "nccl-log takes log files, a directory of them, or - for stdin".into(),
    }
    .into()
}

pub(crate) fn run(g: &GlobalArgs, a: NcclLogArgs) -> anyhow::Result<Outcome> {
    let fmt = g.format;
    if g.root.is_some() {
        return Err(UsageError("--root does not apply to nccl-log: it reads log files".into()).into());
    }
    if let Some(out) = &a.html {
        // Refused now, not after every log and dump was read.
        super::report::check_writable(out)?;
    }
    let mut an = Analyzer::new();
    // Flight-recorder dumps among the inputs, told apart by their first bytes (issue 43).
    let mut job = flight::Job::new();
    let dumps = read_inputs(g, &a.inputs, &mut an)?;
    flight::read_all(&mut job, dumps.len(), flight::digest::threads(), |i| {
        Ok::<_, anyhow::Error>(match &dumps[i] {
            (Dump::Stdin(bytes), kind) => flight::digest::digest("-", *kind, bytes),
            (Dump::File(f), kind) => {
                let bytes = std::fs::read(f).map_err(|e| cannot("read", f, e))?;
                flight::digest::digest(&f.display().to_string(), *kind, &bytes)
            }
        })
    })?;
    let mut report = an.finish();
    let fr = (!job.is_empty()).then(|| flight::join(&mut report, &job));
    let findings = crate::finding::ToFindings::findings(&report);
    if let Some(out) = &a.html {
        let data = flight::JobReport {
            log: &report,
            flight_recorder: fr.as_ref(),
        };
        super::report::write_envelope(out, "nccl-log", &envelope(&report, &data, &findings))?;
    }
    emit(&render(fmt, &report, fr.as_ref(), &findings))?;
    // Nothing to judge is its own answer (exit 3), so `nccl-log logs/ && echo clean` does
    // not say clean about a log without NCCL_DEBUG.
    if crate::render::nccl_log::unknown(&report) {
        return Ok(Outcome::Unknown);
    }
    Ok(Outcome::from_findings(&findings))
}

/// Feed every log among `inputs` (files, directories, `-`) to the analyzer; the dumps
/// among them come back, decoded after the logs on several threads (merged in this order).
fn read_inputs(
    g: &GlobalArgs,
    inputs: &[PathBuf],
    an: &mut Analyzer,
) -> anyhow::Result<Vec<(Dump, flight::Kind)>> {
    let mut dumps = Vec::new();
    for p in inputs {
        if p.as_os_str() == "-" {
            let mut dumped = None;
            read_input(an, &mut dumped, "-", std::io::stdin().lock()).map_err(|e| cannot("read", p, e))?;
            dumps.extend(dumped.map(|(k, b)| (Dump::Stdin(b), k)));
            continue;
        }
        let meta = std::fs::metadata(p).map_err(|e| cannot("open", p, e))?;
        let files = if meta.is_dir() {
            files_in(p)?
        } else {
            vec![p.clone()]
        };
        for f in files {
            g.log(1, format!("reading {}", f.display()));
            let fh = std::fs::File::open(&f).map_err(|e| cannot("open", &f, e))?;
            let kind = read_log(an, &f.display().to_string(), fh).map_err(|e| cannot("read", &f, e))?;
            dumps.extend(kind.map(|k| (Dump::File(f), k)));
        }
    }
    Ok(dumps)
}

/// The files of directory `p`, sorted; none is an error.
fn files_in(p: &std::path::Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(p)
        .map_err(|e| cannot("list", p, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|f| f.is_file())
        .collect();
    files.sort();
    // No file at all is a mistake in the command, not a log with nothing to judge:
    // exit 2 as sweep does for the same directory (3 is for input read and empty).
    if files.is_empty() {
        return Err(cannot(
            "read logs from",
            p,
            std::io::Error::other("the directory holds no files"),
        ));
    }
    Ok(files)
}

/// The job's report in `fmt`: the logs' verdicts, then the flight recorder's.
fn render(
    fmt: Format,
    report: &crate::nccl_log::Report,
    fr: Option<&flight::judge::FlightReport>,
    findings: &[crate::finding::Finding],
) -> String {
    match fmt {
        Format::Json => {
            let data = flight::JobReport {
                log: report,
                flight_recorder: fr,
            };
            envelope(report, &data, findings).to_json()
        }
        _ => {
            let mut t = crate::render::nccl_log::table(report);
            if let Some(fr) = fr {
                t.push_str(&crate::render::nccl_log_flight::section(fr));
            }
            t
        }
    }
}

/// The JSON envelope of the job's report (`--format json`, and what `--html` draws).
fn envelope<'a>(
    report: &crate::nccl_log::Report,
    data: &'a flight::JobReport<'a>,
    findings: &'a [crate::finding::Finding],
) -> Envelope<'a, flight::JobReport<'a>> {
    let host = HostInfo {
        hostname: None,
        kernel: None,
        captured_at: None,
        source: report.summary.inputs.join(","),
    };
    Envelope::new("nccl-log", host, data, findings)
}

/// A flight-recorder dump among the inputs, read whole when its turn comes (stdin's at once).
enum Dump {
    File(PathBuf),
    Stdin(Vec<u8>),
}

/// Standard input: a flight-recorder dump (by its first bytes) is left in `dumped` with its
/// bytes, anything else goes to the log reader.
fn read_input<R: std::io::Read>(
    an: &mut Analyzer,
    dumped: &mut Option<(flight::Kind, Vec<u8>)>,
    name: &str,
    mut r: R,
) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(4096);
    (&mut r).take(4096).read_to_end(&mut head)?;
    match flight::sniff(&head) {
        Some(kind) => {
            r.read_to_end(&mut head)?;
            *dumped = Some((kind, head));
            Ok(())
        }
        None => an.read(name, std::io::Cursor::new(head).chain(r)),
    }
}

/// A file: a log is read now; a flight-recorder dump (by its first bytes) is only
/// recognised, its kind returned for [`flight::read_all`] to decode later. A dump that
/// cannot be decoded is named and skipped there (the error is kept in the job), never
/// fatal to the rest.
fn read_log<R: std::io::Read>(
    an: &mut Analyzer,
    name: &str,
    mut r: R,
) -> std::io::Result<Option<flight::Kind>> {
    let mut head = Vec::with_capacity(4096);
    (&mut r).take(4096).read_to_end(&mut head)?;
    match flight::sniff(&head) {
        Some(kind) => Ok(Some(kind)),
        None => an.read(name, std::io::Cursor::new(head).chain(r)).map(|()| None),
    }
}
