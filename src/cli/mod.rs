//! The command line: clap definitions, dispatch, output and exit codes.
//! Exit status: 0 pass (warnings allowed), 1 a probe or check found a fault, 2 fabprobe
//! itself could not run. A closed stdout (`| head`) is not an error.

/// `eprintln!` that never panics: a closed stderr (`2>&1 | head`) is not an error either,
/// and `eprintln!` would panic (exit 101) on the write that fails.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

mod baseline;
mod check;
mod delivery;
pub mod docs;
mod gdr;
mod gids;
mod links;
mod nccl_env;
mod nccl_log;
mod out;
mod progress;
mod qos;
mod report;
mod ring;
mod snapshot;
mod sweep;
mod topo;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};

pub use out::emit;

#[derive(Debug, Parser)]
#[command(
    name = "fabprobe",
    version,
    about = "Probe a GPU node's fabric and find the slow or dead link",
    long_about = "fabprobe reads what the kernel, the NICs and the GPU driver expose about one \
node's fabric (PCIe/NVLink topology, RDMA ports, GIDs) and reports it the way nvidia-smi, \
show_gids and ibstat do, with findings a person can act on.\n\n\
Exit status: 0 pass, 1 fail, 2 could not run, 3 unknown: nothing judged (EXIT STATUS below).",
    propagate_version = true,
    after_long_help = root_help()
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

const JSON_ENVELOPE: &str = "\
JSON OUTPUT
  Every command's --format json prints one envelope:
    {
      \"schema\": \"fabprobe.<command>\",   e.g. fabprobe.topo
      \"schema_version\": 1,               bumped only when a field is removed or changes meaning
      \"tool_version\": \"0.1.0\",
      \"host\": {\"hostname\", \"kernel\", \"captured_at\" (RFC 3339 UTC), \"source\" (\"live\" or the snapshot path)},
      \"data\": { ... the command's report, documented in fabprobe-<command>(1) ... },
      \"findings\": [{\"id\", \"severity\" (pass|warn|fail|unknown), \"subject\", \"message\", \"evidence\": {...}, \"fix\", \"missing\"}]
    }
  Field names carry their units (_bytes, _gbps, _gbs, _us, _ms). Absent facts are null, never 0.
  Severity unknown: the rule could not be evaluated (a fact unread: permissions, a snapshot
  without it). The verdict is that of what was evaluated; the text verdict line names what
  was not (PASS, then \"1 not evaluated: links.port_state_unknown mlx5_0/1\"), and check
  lists it in data.not_evaluated. Unknown is never a pass or a fail. A rule with nothing to
  judge names the fact that is missing: \"missing\" (gpu_and_rdma, rdma_device, gpu,
  roce_netdev, infiniband_port, qos_reading), present only then.
";

/// `--device DEV` of a command that lists RDMA devices: keep the items of that device; a name
/// the host has none of is bad usage naming the devices it has (not an empty, passing report).
pub(crate) fn only_device<T>(
    items: &mut Vec<T>,
    dev: &str,
    name: impl Fn(&T) -> &str,
    devices_found: bool,
) -> Result<(), UsageError> {
    let mut known: Vec<String> = items.iter().map(|i| name(i).to_string()).collect();
    known.dedup();
    items.retain(|i| name(i) == dev);
    if devices_found && items.is_empty() {
        return Err(UsageError(format!(
            "--device {dev}: no RDMA device of that name here (devices: {})",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        )));
    }
    Ok(())
}

/// The findings a `--device` view shows, judged first on the whole host (a port's rate
/// against its peers needs the peers: judged on the kept device alone it would pass): those
/// naming a kept name, and those naming none of the dropped ones (a GPU's, the host's).
pub(crate) fn findings_kept(
    findings: Vec<crate::finding::Finding>,
    kept: &[&str],
    dropped: &[&str],
) -> Vec<crate::finding::Finding> {
    let about = |f: &crate::finding::Finding, names: &[&str]| names.iter().any(|n| names_word(&f.subject, n));
    findings
        .into_iter()
        .filter(|f| about(f, kept) || !about(f, dropped))
        .collect()
}

/// Whether `subject` names `name` whole: `mlx5_1` is in `mlx5_1/1`, `GPU0-mlx5_1` and
/// `eth1 (mlx5_1 port 1)`, not in `mlx5_10/1`.
fn names_word(subject: &str, name: &str) -> bool {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    !name.is_empty()
        && subject.match_indices(name).any(|(at, _)| {
            !word(subject[..at].chars().next_back()) && !word(subject[at + name.len()..].chars().next())
        })
}

/// `--device DEV` on a report judged whole: its `items` of DEV (as [`only_device`]) and the
/// findings that view shows (as [`findings_kept`]).
pub(crate) fn device_view<T>(
    items: &mut Vec<T>,
    dev: &str,
    name: impl Fn(&T) -> &str,
    devices_found: bool,
    findings: Vec<crate::finding::Finding>,
) -> Result<Vec<crate::finding::Finding>, UsageError> {
    let all: Vec<String> = items.iter().map(|i| name(i).to_string()).collect();
    only_device(items, dev, &name, devices_found)?;
    let dropped: Vec<&str> = all.iter().map(String::as_str).filter(|n| *n != dev).collect();
    Ok(findings_kept(findings, &[dev], &dropped))
}

fn root_help() -> String {
    JSON_ENVELOPE.to_string()
}

/// The one exit-status table: every man page's EXIT STATUS, every command's `--help` and the
/// README are this, with what each status means for the command.
pub fn exit_statuses(key: &str) -> [(&'static str, String); 4] {
    let fault = match key {
        "check" => "fail: a policy rule failed",
        "sweep" => "fail: a node failed, is an outlier, or an expected node sent no report",
        "ring" => "fail: a verdict (a slow or dead link, a hung or lost rank), wrong results or a rank missing; the reason is printed, and the partial results",
        "nccl-log" => "fail: the log shows a failure",
        "snapshot" | "completions" | "report" | "gen-docs" => "not used",
        _ => "fail: a probe or check found a fault (a finding of severity fail)",
    };
    let unknown = match key {
        "nccl-log" => "unknown: nothing judged (no NCCL line in the input), neither a pass nor a fault",
        "check" => {
            "unknown: no GPU and no RDMA device showed up (a driver not loaded?) and nothing failed, never a pass"
        }
        "fabprobe" => {
            "unknown: nothing to judge (no GPU, RDMA device or RoCE netdev for the command; nccl-log given no NCCL line), neither a pass nor a fault"
        }
        k if command_info(k).is_some_and(|c| c.input == Input::Host) => {
            "unknown: nothing to judge (no GPU, RDMA device or RoCE netdev showed up for the command), never a pass"
        }
        _ => {
            "unknown: nothing judged (not returned by this command: what it could not evaluate is said beside its verdict)"
        }
    };
    let pass = match key {
        "check" => "pass (warnings and not-evaluated rules allowed); with --output, the file is written",
        "ring" => "pass: exact results, every rank finished, no verdict (what was not measured is said beside it)",
        _ => "pass (warnings and not-evaluated rules allowed)",
    };
    [
        ("0", pass.to_string()),
        ("1", fault.to_string()),
        ("2", "could not run: bad usage, unreadable input (a missing file, an empty directory, a bad policy or snapshot), a name (--ifname, --device, --require) that is not known here".to_string()),
        ("3", unknown.to_string()),
    ]
}

/// [`exit_statuses`] as a help section: `EXIT STATUS` then `  0  pass ...` lines.
pub(crate) fn exit_status_text(key: &str) -> String {
    let mut s = String::from("EXIT STATUS\n");
    for (code, what) in exit_statuses(key) {
        s.push_str(&crate::render::text::wrap_to(
            &format!("  {code}  "),
            &what,
            5,
            Some(crate::render::text::HELP_WIDTH),
        ));
    }
    s.push_str("  A closed stdout or stderr (fabprobe topo 2>&1 | head) is not an error.\n");
    s
}

#[derive(Debug, Clone, Args)]
// Listed apart in every command's --help, so `ring --help` shows ring's own options first.
#[command(next_help_heading = "Global options")]
pub(crate) struct GlobalArgs {
    /// Read a captured snapshot (directory or .tar.gz) instead of the live host.
    #[arg(long, global = true, value_name = "SNAPSHOT")]
    pub root: Option<PathBuf>,
    /// Output format: table and json (every command), nccl-xml (topo), prom (check, gids,
    /// links, qos, nccl-env, sweep); a command refuses the others by name.
    #[arg(long, global = true, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Log progress to stderr (repeat for more).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Judge NCCL's settings in the environment of a running process (a training rank):
    /// /proc/PID/environ, readable as root or as the process's user. Default: this shell's.
    #[arg(long, global = true, value_name = "PID", conflicts_with = "env_file")]
    pub env_from: Option<u32>,
    /// Judge NCCL's settings in a job's environment: a file of KEY=VALUE lines (a job
    /// script's exports, `srun --export` lists), instead of this shell's.
    #[arg(long, global = true, value_name = "FILE")]
    pub env_file: Option<PathBuf>,
    /// Apply this NCCL version's rules (X.Y or X.Y.Z) instead of the libnccl.so.2.X.Y found
    /// on the job's library path.
    #[arg(long, global = true, value_name = "X.Y", value_parser = parse_nccl_version)]
    pub nccl_version: Option<String>,
}

fn parse_nccl_version(s: &str) -> Result<String, String> {
    crate::nccl::version::parse_version(s)
        .map(|_| s.trim().to_string())
        .ok_or_else(|| format!("{s:?} is not an NCCL version: give X.Y or X.Y.Z, e.g. 2.21.5"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Human-readable table (the default).
    Table,
    /// The versioned JSON envelope documented in fabprobe(1).
    Json,
    /// NCCL topology XML (topo only), usable as NCCL_TOPO_FILE.
    NcclXml,
    /// Prometheus text exposition (check, gids, links, qos, nccl-env, sweep), for node_exporter's
    /// textfile collector.
    Prom,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Table => "table",
            Format::Json => "json",
            Format::NcclXml => "nccl-xml",
            Format::Prom => "prom",
        }
    }
}

/// What a command reads: the tests that must run every command of a kind (every host probe
/// on every fixture, every command on a closed pipe) take their lists from [`COMMANDS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// One host's sysfs, live or a snapshot (`--root`): the probes and `check`.
    Host,
    /// Saved reports or NCCL logs, files or stdin.
    Files,
    /// Other ranks over the network.
    Network,
    /// Nothing to judge: docs, completions, a capture.
    Tooling,
}

/// One subcommand: its name, what it reads and the formats it renders.
#[derive(Clone, Copy, Debug)]
pub struct CommandInfo {
    pub name: &'static str,
    pub input: Input,
    pub formats: &'static [Format],
}

const TJP: &[Format] = &[Format::Table, Format::Json, Format::Prom];
const TJ: &[Format] = &[Format::Table, Format::Json];

/// Every subcommand, in `--help`'s order; a test holds it equal to the clap definition, so a
/// new command is entered here, and with that every test that runs "every command" runs it.
pub const COMMANDS: &[CommandInfo] = &[
    CommandInfo { name: "check", input: Input::Host, formats: TJP },
    CommandInfo { name: "gdr", input: Input::Host, formats: TJ },
    CommandInfo { name: "gids", input: Input::Host, formats: TJP },
    CommandInfo { name: "links", input: Input::Host, formats: TJP },
    CommandInfo { name: "qos", input: Input::Host, formats: TJP },
    CommandInfo { name: "nccl-env", input: Input::Host, formats: TJP },
    CommandInfo { name: "nccl-log", input: Input::Files, formats: TJ },
    CommandInfo { name: "ring", input: Input::Network, formats: TJ },
    CommandInfo { name: "report", input: Input::Files, formats: &[Format::Table] },
    CommandInfo { name: "snapshot", input: Input::Tooling, formats: &[Format::Table] },
    CommandInfo { name: "sweep", input: Input::Files, formats: TJP },
    CommandInfo { name: "topo", input: Input::Host, formats: &[Format::Table, Format::Json, Format::NcclXml] },
    CommandInfo { name: "completions", input: Input::Tooling, formats: &[Format::Table] },
    CommandInfo { name: "gen-docs", input: Input::Tooling, formats: &[Format::Table] },
];

/// The entry of `name` in [`COMMANDS`].
pub fn command_info(name: &str) -> Option<&'static CommandInfo> {
    COMMANDS.iter().find(|c| c.name == name)
}

impl GlobalArgs {
    /// Refuse a format the command does not render ([`COMMANDS`]), naming the ones it does.
    pub(crate) fn require_format(&self, command: &str) -> anyhow::Result<Format> {
        let allowed = command_info(command).map_or(&[Format::Table][..], |c| c.formats);
        if allowed.contains(&self.format) {
            return Ok(self.format);
        }
        let names: Vec<_> = allowed.iter().map(|f| f.name()).collect();
        Err(UsageError(format!(
            "`fabprobe {command}` does not support --format {}; use one of: {}",
            self.format.name(),
            names.join(", ")
        ))
        .into())
    }

    /// Log a progress line to stderr when `-v` was given.
    pub fn log(&self, level: u8, msg: impl AsRef<str>) {
        if self.verbose >= level {
            say!("fabprobe: {}", msg.as_ref());
        }
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Every local probe and the host facts judged against a policy (checks/*.toml): one
    /// ranked list of findings with evidence and fixes; exit 0 pass, 1 fail, 2 could not run,
    /// 3 nothing to judge.
    Check(check::CheckArgs),
    /// GPUDirect RDMA readiness per GPU x RDMA NIC pair: path type vs NCCL_NET_GDR_LEVEL,
    /// peer memory, DMA-BUF, ACS on the bridges between them, IOMMU, BAR1.
    Gdr(gdr::GdrArgs),
    /// Every GID of every RDMA port (index, GID, IPv4, RoCE v1/v2, netdev) and the index NCCL
    /// and perftest would pick; --show-gids prints show_gids' own format.
    Gids(gids::GidsArgs),
    /// RDMA port health like ibstat + ibstatus + perfquery: state, rate, PCIe link, counters
    /// with their widths, deltas over --interval or against --baseline.
    Links(links::LinksArgs),
    /// Lossless RoCE per RoCE netdev: PFC/ETS/trust/DCBX (DCB netlink), pause and storm
    /// counters (ethtool), ECN/DCQCN, CNPs, the RoCE priority; rates over --interval.
    Qos(qos::QosArgs),
    /// What NCCL would choose on this host (sockets, HCAs, GID index, GDR, plugin) with the
    /// rule that chose it, where each NCCL_* value came from, and a lint of them.
    NcclEnv(nccl_env::NcclEnvArgs),
    /// Read NCCL_DEBUG logs (files, a directory or stdin): summary and root-cause verdicts.
    NcclLog(nccl_log::NcclLogArgs),
    /// Ring AllReduce across nodes over RDMA (ibverbs) or TCP: nccl-tests' table, per-link
    /// bandwidth, and verdicts naming the slow link or the hung rank.
    Ring(ring::RingArgs),
    /// Saved --format json reports of ring, sweep, check and topo as one self-contained
    /// HTML page: the scan matrix, busbw against size, the fleet grid, the topology tree.
    Report(report::ReportArgs),
    /// Capture what the probes read into one directory or .tar.gz, to analyse elsewhere.
    Snapshot(snapshot::SnapshotArgs),
    /// Merge many nodes' `check --format json` reports: failed nodes by cause, nodes unlike
    /// their peers, missing reports, Slurm drain lines.
    Sweep(sweep::SweepArgs),
    /// The GPU/NIC topology matrix (nvidia-smi topo -m from sysfs and NVML; --nccl for NCCL's
    /// view; NCCL topology XML out and in).
    Topo(topo::TopoArgs),
    /// Print shell completions for bash, zsh or fish.
    Completions(docs::CompletionsArgs),
    /// Write man pages and shell completions (for packaging; used by the tests).
    #[command(hide = true)]
    GenDocs(docs::GenDocsArgs),
}

/// What a command concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Nothing failed (warnings allowed): exit 0.
    Pass,
    /// A probe or check found a fault: exit 1.
    Fault,
    /// Nothing to judge (`nccl-log` on input with no NCCL line): exit 3, neither a pass
    /// nor a fault.
    Unknown,
}

impl Outcome {
    /// A fail is a fault; else a probe that saw nothing to judge is unknown (exit 3),
    /// never a pass.
    pub(crate) fn from_findings(findings: &[crate::finding::Finding]) -> Outcome {
        if crate::finding::worst(findings) == crate::finding::Severity::Fail {
            Outcome::Fault
        } else if crate::finding::nothing_judged(findings).is_some() {
            Outcome::Unknown
        } else {
            Outcome::Pass
        }
    }
}

/// Bad usage found after parsing (exit 2, no backtrace-like chain).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct UsageError(pub String);

/// An error with the thing a person can do about it, printed as `hint: ...`.
#[derive(Debug, thiserror::Error)]
#[error("{msg}")]
pub(crate) struct Hinted {
    pub msg: String,
    pub hint: String,
}

/// The command line as parsed and documented: every long help fitted to
/// [`HELP_WIDTH`](crate::render::text::HELP_WIDTH) columns, whatever width it was written at.
pub fn command() -> clap::Command {
    fit_helps(Cli::command())
}

/// Every command's long help, with the one exit-status table ([`exit_status_text`]) at its
/// end, fitted.
fn fit_helps(mut cmd: clap::Command) -> clap::Command {
    use crate::render::text::{HELP_WIDTH, fit_help};
    let key = cmd.get_name().to_string();
    let own = cmd
        .get_after_long_help()
        .map(|h| h.to_string())
        .unwrap_or_default();
    let sep = if own.is_empty() || own.ends_with("\n\n") {
        ""
    } else if own.ends_with('\n') {
        "\n"
    } else {
        "\n\n"
    };
    let help = format!("{own}{sep}{}", exit_status_text(&key));
    cmd = cmd.after_long_help(fit_help(&help, HELP_WIDTH));
    let names: Vec<String> = cmd.get_subcommands().map(|s| s.get_name().to_string()).collect();
    for n in names {
        cmd = cmd.mut_subcommand(n, fit_helps);
    }
    cmd
}

pub fn main() -> ExitCode {
    use clap::FromArgMatches;
    // The subcommand's name as clap spelt it, the key of its entry in [`COMMANDS`].
    let parsed = command().try_get_matches().and_then(|m| {
        let name = m.subcommand_name().unwrap_or_default().to_string();
        Cli::from_arg_matches(&m).map(|c| (c, name))
    });
    let (cli, name) = match parsed {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match dispatch(cli, &name) {
        Ok(Outcome::Pass) => ExitCode::SUCCESS,
        Ok(Outcome::Fault) => ExitCode::from(1),
        Ok(Outcome::Unknown) => ExitCode::from(3),
        Err(e) if out::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            say!("fabprobe: error: {}", lower_first(&error_text(&e)));
            if let Some(h) = e.chain().find_map(|c| c.downcast_ref::<Hinted>()) {
                say!("hint: {}", h.hint);
            }
            ExitCode::from(2)
        }
    }
}

/// The error and its causes joined by `: `, each said once: an error whose own text already
/// ends with its cause's (`cannot read policy x: No such file...` over the io::Error) does not
/// repeat it.
pub(crate) fn error_text(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let c = cause.to_string();
        if out.is_empty() {
            out = c;
        } else if !out.ends_with(&c) {
            out.push_str(": ");
            out.push_str(&c);
        }
    }
    out
}

/// Run the subcommand `name`, after refusing a `--format` its entry in [`COMMANDS`] does not
/// list: every command, including those that write no report (`snapshot`, `completions`,
/// `gen-docs`), so none ignores the flag in silence.
fn dispatch(cli: Cli, name: &str) -> anyhow::Result<Outcome> {
    let g = &cli.global;
    g.require_format(name)?;
    crate::render::text::set_width(table_width(std::env::var("COLUMNS").ok().as_deref(), tty_width));
    match cli.command {
        Command::Check(a) => check::run(g, a),
        Command::Sweep(a) => sweep::run(g, a),
        Command::Ring(a) => ring::run(g, a),
        Command::Report(a) => report::run(g, a),
        Command::Snapshot(a) => snapshot::run(g, a),
        Command::Gids(a) => gids::run(g, a),
        Command::Links(a) => links::run(g, a),
        Command::Gdr(a) => gdr::run(g, a),
        Command::Qos(a) => qos::run(g, a),
        Command::NcclEnv(a) => nccl_env::run(g, a),
        Command::NcclLog(a) => nccl_log::run(g, a),
        Command::Topo(a) => topo::run(g, a),
        Command::Completions(a) => docs::completions(a),
        Command::GenDocs(a) => docs::run(a),
    }
}

/// The width tables fit: `COLUMNS` when it is a number, else stdout's terminal; None (as
/// wide as the content) for a pipe or a file, so scripts see whole lines.
pub(crate) fn table_width(columns: Option<&str>, tty: fn() -> Option<usize>) -> Option<usize> {
    match columns
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|w| *w > 0)
    {
        Some(w) => Some(w.max(40)),
        None => tty(),
    }
}

/// Stdout's terminal width (comfy-table asks the terminal); None when stdout is not one.
fn tty_width() -> Option<usize> {
    comfy_table::Table::new()
        .width()
        .map(usize::from)
        .filter(|w| *w > 0)
}

/// Refuse a name the user gave (`--ifname eth9`, `--device mlx5_9`) that the host's `dir`
/// does not list, naming it and the nearest listed one: a typo must not turn a probe off
/// without a word. A directory that cannot be read is left to the probe to say.
fn check_names(
    host: &crate::host::Host,
    flag: &str,
    names: &[String],
    dir: &str,
    what: &str,
) -> Result<(), UsageError> {
    let Ok(listed) = host.list_dir(dir) else {
        return Ok(());
    };
    let listed = listed.unwrap_or_default();
    // The first name the host lacks is the error.
    if let Some(n) = names.iter().find(|n| !listed.contains(n)) {
        let near = crate::check::policy::nearest(n, listed.iter().map(String::as_str));
        let have = if listed.is_empty() {
            "nothing".to_string()
        } else {
            listed.join(", ")
        };
        return Err(UsageError(format!(
            "{flag} {n}: no {what} named {n} on this host ({dir} lists {have}){}",
            near.map(|x| format!("; did you mean `{x}`?")).unwrap_or_default()
        )));
    }
    Ok(())
}

/// Messages are printed lowercase-first, as the house style says.
fn lower_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) if f.is_uppercase() && !c.clone().next().is_some_and(|n| n.is_uppercase()) => {
            f.to_lowercase().collect::<String>() + c.as_str()
        }
        _ => s.to_string(),
    }
}

/// Open the host named by `--root`, or the live one, with a readable error.
pub(crate) fn open_host(g: &GlobalArgs) -> anyhow::Result<crate::host::Host> {
    let host = crate::host::Host::open(g.root.as_deref()).map_err(|e| Hinted {
        msg: e.to_string(),
        hint: "--root takes a directory that mirrors / (at least its sys/) or a .tar.gz written by \
               `fabprobe snapshot -o FILE.tar.gz`"
            .into(),
    })?;
    g.log(
        1,
        format!(
            "reading {}",
            match host.source() {
                crate::host::Source::Live => "the live host".to_string(),
                crate::host::Source::Snapshot(p) => format!("snapshot {}", p.display()),
            }
        ),
    );
    with_job_env(g, host)
}

/// `--env-from PID` / `--env-file FILE`: the job's environment replaces the shell's (or a
/// snapshot's) on the host, so the settings model and a capture both see it.
fn with_job_env(g: &GlobalArgs, host: crate::host::Host) -> anyhow::Result<crate::host::Host> {
    use crate::nccl::settings::{parse_env_file, parse_environ};
    if let Some(pid) = g.env_from {
        if !host.is_live() {
            return Err(UsageError(
                "--env-from reads a running process's /proc/PID/environ on this host; with --root use --env-file".into(),
            )
            .into());
        }
        let path = format!("/proc/{pid}/environ");
        let bytes = crate::host::read_capped(std::path::Path::new(&path), crate::host::MAX_READ_BYTES)
            .map_err(|e| Hinted {
                msg: format!("--env-from {pid}: cannot read {path}: {e}"),
                hint: "give the PID of a running training process; reading another user's environment needs root".into(),
            })?;
        g.log(1, format!("NCCL settings from the environment of process {pid}"));
        let host = host.with_job_env(parse_environ(&bytes), format!("--env-from PID {pid}"));
        // NCCL in that process reads its own user's ~/.nccl.conf, not fabprobe's.
        let status = format!("/proc/{pid}/status");
        let uid = std::fs::read_to_string(&status)
            .ok()
            .as_deref()
            .and_then(crate::nccl::settings::parse_status_uid);
        return Ok(match uid {
            Some(uid) => host.with_job_uid(uid),
            None => host,
        });
    }
    if let Some(f) = &g.env_file {
        let text = std::fs::read_to_string(f)
            .map_err(|e| anyhow::anyhow!("--env-file {}: cannot read it: {e}", f.display()))?;
        let env = parse_env_file(&text).map_err(|e| Hinted {
            msg: format!("--env-file {}: {e}", f.display()),
            hint:
                "the file holds KEY=VALUE lines (`export` and quotes allowed), e.g. from `env` inside the job"
                    .into(),
        })?;
        return Ok(host.with_job_env(env, format!("--env-file {}", f.display())));
    }
    Ok(host)
}

/// The one NCCL settings model for this run: the host's job environment, NCCL's
/// configuration files, and the version whose rules apply.
pub(crate) fn nccl_settings(g: &GlobalArgs, host: &crate::host::Host) -> crate::nccl::settings::NcclSettings {
    let version = g
        .nccl_version
        .as_deref()
        .and_then(crate::nccl::version::NcclVersion::given);
    let s = crate::nccl::settings::NcclSettings::build(host, version);
    g.log(
        1,
        format!("NCCL settings: {}; {}", s.env_source, s.version.describe()),
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_names_a_device_whole() {
        for (subject, name, yes) in [
            ("mlx5_1/1", "mlx5_1", true),
            ("mlx5_10/1", "mlx5_1", false),
            ("GPU0-mlx5_1", "mlx5_1", true),
            ("GPU0-mlx5_10 GPU1-mlx5_1", "mlx5_1", true),
            ("eth1 (mlx5_1/1)", "eth1", true),
            ("eth10 (mlx5_1/1)", "eth1", false),
            ("mlx5_bond_0", "mlx5_bond_0", true),
            ("rxe-a/1", "rxe-a", true),
            ("GPU5", "mlx5_1", false),
            ("host", "", false),
        ] {
            assert_eq!(names_word(subject, name), yes, "{subject:?} names {name:?}");
        }
    }

    #[test]
    fn table_width_from_columns_else_the_terminal() {
        fn tty() -> Option<usize> {
            Some(132)
        }
        fn pipe() -> Option<usize> {
            None
        }
        assert_eq!(table_width(Some("80"), pipe), Some(80));
        assert_eq!(table_width(Some(" 100\n"), tty), Some(100));
        assert_eq!(table_width(Some("12"), pipe), Some(40));
        assert_eq!(table_width(Some("wide"), tty), Some(132));
        assert_eq!(table_width(Some("0"), pipe), None);
        assert_eq!(table_width(None, pipe), None);
    }

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    /// Every long help as shipped: within the width, nothing lost (the printing characters
    /// are the text's, plus the ` \` of a broken command), and fitting it again changes
    /// nothing.
    #[test]
    fn every_long_help_fits_and_keeps_its_text() {
        use crate::render::text::{HELP_WIDTH, fit_help};
        let raw = Cli::command();
        let fitted = command();
        let mut pairs = vec![(raw.clone(), fitted.clone())];
        for r in raw.get_subcommands() {
            let f = fitted.find_subcommand(r.get_name()).unwrap().clone();
            pairs.push((r.clone(), f));
        }
        let printing = |t: &str| {
            t.replace(" \\\n", "")
                .chars()
                .filter(|c| !c.is_whitespace())
                .collect::<String>()
        };
        let exit_tables = |t: &str| t.matches("EXIT STATUS\n").count();
        let mut seen = 0;
        for (r, f) in pairs {
            let r = r.get_after_long_help().map(|h| h.to_string()).unwrap_or_default();
            let f = f.get_after_long_help().map(|h| h.to_string()).unwrap_or_default();
            seen += 1;
            for l in f.lines() {
                assert!(
                    l.chars().count() <= HELP_WIDTH,
                    "{} columns: {l}",
                    l.chars().count()
                );
            }
            assert!(printing(&f).contains(&printing(&r)), "text lost from: {r}");
            assert_eq!(fit_help(&f, HELP_WIDTH), f);
            assert_eq!(
                (exit_tables(&r), exit_tables(&f)),
                (0, 1),
                "one exit-status table, the shared one: {f}"
            );
        }
        assert!(seen >= 13, "{seen} long helps");
    }

    #[test]
    fn lowercases_only_sentence_starts() {
        assert_eq!(lower_first("Cannot read x"), "cannot read x");
        assert_eq!(lower_first("NCCL_IB_HCA is bad"), "NCCL_IB_HCA is bad");
    }
}
