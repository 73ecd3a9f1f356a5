//! `fabprobe sweep`: merge many nodes' `check --format json` reports (files, directories,
//! JSON lines on stdin, with or without pdsh/clush/srun -l prefixes).

use std::io::BufRead;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;

use super::{Format, GlobalArgs, Outcome, UsageError, emit};
use crate::check::hostlist;
use crate::check::sweep::Sweeper;
use crate::render::{Envelope, HostInfo};

#[derive(Debug, Args)]
#[command(after_long_help = SWEEP_HELP)]
pub struct SweepArgs {
    /// Report files (one JSON report, or JSON lines) and directories of them; `-` or none
    /// reads JSON lines from stdin.
    #[arg(value_name = "FILE|DIR|-")]
    pub inputs: Vec<PathBuf>,
    /// The nodes that should have reported (a Slurm hostlist, e.g. gpu[001-128]); those
    /// without a report are listed as missing.
    #[arg(long, value_name = "HOSTLIST")]
    pub expect: Option<String>,
    /// Print Slurm `scontrol update NodeName=... State=DRAIN Reason=...` lines for the bad
    /// nodes instead of the table (fabprobe never runs them).
    #[arg(long)]
    pub drain: bool,
    /// Also drain nodes that passed but differ from the majority of their peers (without
    /// it they are listed, and exit 1, but never drained).
    #[arg(long)]
    pub drain_outliers: bool,
    /// Also write the sweep as a self-contained HTML page: fleet map, node x cause grid,
    /// drain list (fabprobe-report(1)).
    #[arg(long, value_name = "OUT.html")]
    pub html: Option<PathBuf>,
}

const SWEEP_HELP: &str = "\
Collect the reports the way you already run things; no daemon, no server:
  srun -N2000 --ntasks-per-node=1 fabprobe check --policy dgx-h100 --format json > all.jsonl
  pdsh -w gpu[001-128] fabprobe check --format json | fabprobe sweep --expect 'gpu[001-128]'
  clush -w @gpu fabprobe check --format json | fabprobe sweep
  fabprobe sweep reports/            (one <node>.json per node)

INPUT
  A file holding one pretty-printed report, or JSON lines (one report per line; check prints
  its JSON on one line). Lines may carry a launcher prefix `node: ` (pdsh, clush); `srun -l`
  task numbers (` 3: `) name no node, the report's hostname does. Input is bytes: a report
  or line that is empty, not UTF-8, truncated, not JSON, from another schema_version or not a
  fabprobe.check report is listed as such (with the node from its file name or prefix) and
  the sweep goes on.
  Names: a report's hostname and its label (prefix, file name) are one host when they are
  equal or one is the short name of the other (gpu001 / gpu001.cluster.local); the label's
  spelling is kept, and --expect's spelling wins over both, so --expect 'gpu[001-128]'
  matches FQDN reports. Two reports for one host: the worse verdict counts, both sources are
  listed (duplicate).

WHAT IT SAYS
  FAILED, BY CAUSE       nodes whose verdict is fail, grouped by failing finding id
  DIFFERENT FROM PEERS   for every hardware/configuration fingerprint key (fabprobe-check(1);
                         not tool_version or policy, not keys only some tool versions
                         report): nodes whose value differs from the value more than half of
                         the reports that did not fail share, with that majority value and
                         its node count; a missing key counts as null
  NO MAJORITY            keys where no value reaches more than half (no outliers named)
  NOTES                  mixed tool versions, keys not compared, labels unlike hostnames
  DRAIN                  failed nodes, with every reason; outliers that passed are never
                         drained unless --drain-outliers. --drain prints one scontrol line each
                         (Reason=\"fabprobe: ...\", at most 200 characters, safe to paste in sh)
                         and # lines for outliers not drained and unusable reports

JSON DATA (schema fabprobe.sweep)
  nodes                  {reports, passed, warned, failed, outliers, unreadable, missing, drain}
  failures[]             {id, node_count, nodes[], example}
  outliers[]             {node, key, value, majority_value, majority_nodes, nodes_compared,
                          node_failed}
  no_majority[]          {key, values: [[value, nodes], ...]}
  unreadable[]           {node, source, problem (missing|truncated|not_json|not_utf8|
                          cannot_read|other_version|not_a_check_report|duplicate), detail}
  bad_nodes[]            {node, reasons[]}: the drain list
  notes[]                strings
  node_states[]          {node, state (pass|warn|fail|missing|unreadable)}: every node named,
                         once, in --expect order then as read (what --html's fleet map draws)

PROMETHEUS (--format prom)
  fabprobe_sweep_nodes{state}, fabprobe_sweep_bad_node{node} 1 (the drain list),
  fabprobe_sweep_outlier{node,key,value,majority} 1

EXIT STATUS
  0 every node passed and agrees with its peers, 1 a node to drain, an outlier or a
  missing/unreadable report, 2 could not run (an input that cannot be opened, or no
  readable report at all: \"0 reports: the collection failed?\")";

/// `node1: {...}` (pdsh, clush, srun -l) -> ("node1", "{...}"). In a file (`json_only`) a
/// prefix counts only before a report, so `srun: error: ...` keeps the file's node name; on
/// stdin `node7: bash: fabprobe: command not found` still names node7. `srun -l` pads its
/// task numbers (` 3: `).
fn split_prefix(line: &[u8], json_only: bool) -> (Option<&str>, &[u8]) {
    if line.starts_with(b"{") {
        return (None, line);
    }
    let Some(at) = line.windows(2).position(|w| w == b": ") else {
        return (None, line);
    };
    let (p, rest) = (&line[..at], &line[at + 2..]);
    let p = p.trim_ascii_start();
    let plain = !p.is_empty() && p.iter().all(|c| c.is_ascii_alphanumeric() || b"._-".contains(c));
    if plain && (!json_only || rest.trim_ascii_start().starts_with(b"{")) {
        // Checked ASCII above.
        (std::str::from_utf8(p).ok(), rest)
    } else {
        (None, line)
    }
}

/// Whether `b` holds one whole JSON value, a value cut short, or something else. A byte
/// scan (strings and escapes aware) instead of a parse: it runs on every labelled line.
#[derive(Debug, PartialEq, Eq)]
enum Shape {
    Whole,
    CutShort,
    Other,
}

fn json_shape(b: &[u8]) -> Shape {
    let b = b.trim_ascii();
    if !b.starts_with(b"{") {
        return Shape::Other;
    }
    let (mut depth, mut in_str, mut esc) = (0i64, false, false);
    for (i, &c) in b.iter().enumerate() {
        if in_str {
            match c {
                _ if esc => esc = false,
                b'\\' => esc = true,
                b'"' => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            b'"' => in_str = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    return if i + 1 == b.len() {
                        Shape::Whole
                    } else {
                        Shape::Other
                    };
                }
            }
            _ => {}
        }
    }
    Shape::CutShort
}

/// Labelled pieces of one task's line, joined: `srun -l` cuts a task's output line into
/// 1024-byte pieces and labels each (measured with slurm-wlm 22.05.8), so a report arrives
/// as `3: {...` then `3: ...}` lines, possibly interleaved with other tasks' pieces.
#[derive(Default)]
struct Pieces {
    /// label -> (source of its first piece, the bytes so far), in order of first piece.
    open: Vec<(String, String, Vec<u8>)>,
}

impl Pieces {
    /// Add a labelled piece; returns a report to sweep when one is complete (or cannot be).
    fn add(&mut self, source: String, label: &str, rest: &[u8]) -> Option<(String, String, Vec<u8>)> {
        if let Some(i) = self.open.iter().position(|(l, _, _)| l == label) {
            let mut joined = self.open[i].2.clone();
            joined.extend_from_slice(rest);
            return match json_shape(&joined) {
                Shape::CutShort => {
                    self.open[i].2 = joined;
                    None
                }
                Shape::Whole => {
                    let (l, s, _) = self.open.remove(i);
                    Some((s, l, joined))
                }
                // Not a continuation (a new report after one that was cut for good): the
                // earlier piece goes on as it is, and this one starts over.
                Shape::Other => {
                    let earlier = self.open.remove(i);
                    self.start(source, label, rest);
                    Some((earlier.1, earlier.0, earlier.2))
                }
            };
        }
        if json_shape(rest) == Shape::CutShort {
            self.start(source, label, rest);
            return None;
        }
        Some((source, label.to_string(), rest.to_vec()))
    }

    fn start(&mut self, source: String, label: &str, rest: &[u8]) {
        self.open.push((label.to_string(), source, rest.to_vec()));
    }
}

/// JSON lines as bytes: a line that is not UTF-8 is listed, the rest goes on.
fn add_lines(sw: &mut Sweeper, source: &str, mut reader: impl BufRead) -> anyhow::Result<()> {
    let mut line = Vec::new();
    let mut no = 0;
    let mut pieces = Pieces::default();
    loop {
        line.clear();
        no += 1;
        if reader
            .read_until(b'\n', &mut line)
            .with_context(|| format!("reading {source}"))?
            == 0
        {
            break;
        }
        let l = line.strip_suffix(b"\n").unwrap_or(&line);
        let l = l.strip_suffix(b"\r").unwrap_or(l);
        if l.trim_ascii().is_empty() {
            continue;
        }
        match split_prefix(l, false) {
            (Some(label), rest) => {
                if let Some((src, label, bytes)) = pieces.add(format!("{source}:{no}"), label, rest) {
                    sw.add_bytes(&src, Some(&label), &bytes);
                }
            }
            (None, rest) => sw.add_bytes(&format!("{source}:{no}"), None, rest),
        }
    }
    // Pieces whose end never came: listed as truncated by the sweeper.
    for (label, src, bytes) in pieces.open {
        sw.add_bytes(&src, Some(&label), &bytes);
    }
    Ok(())
}

fn add_file(sw: &mut Sweeper, path: &Path, in_dir: bool) -> anyhow::Result<()> {
    let shown = path.display().to_string();
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        // One unreadable file among many reports is listed; a file named on the command
        // line that cannot be read is a usage error (exit 2).
        Err(e) if in_dir => {
            sw.add_unreadable_file(&shown, stem.as_deref(), &format!("cannot read: {e}"));
            return Ok(());
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {shown}")),
    };
    let first = bytes.split(|&c| c == b'\n').next().unwrap_or(&[]);
    // A pretty-printed report starts with a line holding `{` alone; anything else is lines.
    if first.trim_ascii() == b"{" || bytes.trim_ascii().is_empty() {
        sw.add_bytes(&shown, stem.as_deref(), &bytes);
        return Ok(());
    }
    let lines: Vec<&[u8]> = bytes
        .split(|&c| c == b'\n')
        .filter(|l| !l.trim_ascii().is_empty())
        .collect();
    if lines.len() == 1 {
        let (prefix, rest) = split_prefix(lines[0], true);
        sw.add_bytes(&shown, prefix.or(stem.as_deref()), rest);
        return Ok(());
    }
    add_lines(sw, &shown, std::io::BufReader::new(&bytes[..]))
}

pub fn run(g: &GlobalArgs, a: SweepArgs) -> anyhow::Result<Outcome> {
    let fmt = g.require_format("sweep", &[Format::Table, Format::Json, Format::Prom])?;
    if g.root.is_some() {
        return Err(
            UsageError("`fabprobe sweep` reads reports, not a host; --root does not apply".into()).into(),
        );
    }
    if a.drain && fmt != Format::Table {
        return Err(
            UsageError("--drain prints scontrol lines; it cannot be combined with --format".into()).into(),
        );
    }
    let expected = match &a.expect {
        Some(e) => hostlist::expand(e).map_err(|e| UsageError(format!("--expect: {e}")))?,
        None => Vec::new(),
    };
    if let Some(out) = &a.html {
        super::report::check_writable(out)?;
    }
    let mut sw = Sweeper::new();
    sw.drain_outliers(a.drain_outliers);
    let stdin_only = a.inputs.is_empty() || a.inputs.iter().all(|p| p.as_os_str() == "-");
    if stdin_only {
        add_lines(&mut sw, "stdin", std::io::stdin().lock())?;
    }
    for input in a.inputs.iter().filter(|p| p.as_os_str() != "-") {
        let meta = std::fs::metadata(input).with_context(|| format!("cannot open {}", input.display()))?;
        if meta.is_dir() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(input)
                .with_context(|| format!("cannot list {}", input.display()))?
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| {
                    p.is_file()
                        && !p
                            .file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                })
                .collect();
            entries.sort();
            g.log(1, format!("{}: {} files", input.display(), entries.len()));
            for p in entries {
                add_file(&mut sw, &p, true)?;
            }
        } else {
            add_file(&mut sw, input, false)?;
        }
    }
    if !expected.is_empty() {
        sw.expect(&expected);
    }
    let report = sw.finish();
    if let Some(out) = &a.html {
        let findings = report.findings();
        let env = Envelope::new("sweep", sweep_host(), &report, &findings);
        super::report::write_envelope(out, "sweep", &env)?;
    }
    let text = if a.drain {
        // Comments wrap as comments on a narrow terminal; the scontrol lines paste whole.
        crate::render::text::fit_prose(&report.drain_lines())
    } else {
        match fmt {
            Format::Json => {
                let findings = report.findings();
                Envelope::new("sweep", sweep_host(), &report, &findings).to_json()
            }
            Format::Prom => crate::render::check::sweep_prom(&report),
            _ => crate::render::check::sweep_table(&report),
        }
    };
    emit(&text)?;
    if report.nodes.reports == 0 {
        // Printed above what was (not) read; an empty sweep must not look like a clean fleet.
        return Err(UsageError(format!(
            "0 reports: the collection failed? ({} unreadable, {} missing)",
            report.nodes.unreadable, report.nodes.missing
        ))
        .into());
    }
    Ok(if report.has_fault() {
        Outcome::Fault
    } else {
        Outcome::Pass
    })
}

/// The envelope's host of a sweep: where it ran.
fn sweep_host() -> HostInfo {
    let me = crate::host::HostMeta::live();
    HostInfo {
        hostname: me.hostname,
        kernel: me.kernel,
        captured_at: me.captured_at,
        source: "sweep".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sp(line: &str, json_only: bool) -> (Option<&str>, &str) {
        let (p, rest) = split_prefix(line.as_bytes(), json_only);
        (p, std::str::from_utf8(rest).unwrap())
    }

    #[test]
    fn launcher_prefixes() {
        assert_eq!(sp("gpu017: {\"a\":1}", true), (Some("gpu017"), "{\"a\":1}"));
        assert_eq!(sp("12: {}", false), (Some("12"), "{}"));
        assert_eq!(sp(" 3: {}", false), (Some("3"), "{}"));
        assert_eq!(sp("{\"x\": 1}", false), (None, "{\"x\": 1}"));
        assert_eq!(
            sp("Segmentation fault: core", false),
            (None, "Segmentation fault: core")
        );
        assert_eq!(sp("srun: error: x", true), (None, "srun: error: x"));
        assert_eq!(
            sp("node7: bash: fabprobe: not found", false),
            (Some("node7"), "bash: fabprobe: not found")
        );
        assert_eq!(
            split_prefix(b"gpu9.example.org: \xff{", false),
            (Some("gpu9.example.org"), &b"\xff{"[..])
        );
    }
}
