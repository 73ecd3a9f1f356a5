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
}

const SWEEP_HELP: &str = "\
Collect the reports the way you already run things; no daemon, no server:
  srun -N2000 --ntasks-per-node=1 fabprobe check --policy dgx-h100 --format json > all.jsonl
  pdsh -w gpu[001-128] fabprobe check --format json | fabprobe sweep --expect 'gpu[001-128]'
  clush -w @gpu fabprobe check --format json | fabprobe sweep
  fabprobe sweep reports/            (one <node>.json per node)

INPUT
  A file holding one pretty-printed report, or JSON lines (one report per line; check prints
  its JSON on one line). Lines may carry a launcher prefix `node: ` (pdsh, clush, srun -l).
  A report that is empty, truncated, not JSON, from another schema_version or not a
  fabprobe.check report is listed as such (with the node from its file name or prefix); the
  sweep goes on. A second report for one node is listed as a duplicate.

WHAT IT SAYS
  FAILED, BY CAUSE       nodes whose verdict is fail, grouped by failing finding id
  DIFFERENT FROM PEERS   for every fingerprint key (fabprobe-check(1)): nodes whose value
                         differs from the value more than half of the nodes share, with that
                         majority value and its node count; a missing key counts as null
  NO MAJORITY            keys where no value reaches more than half (no outliers named)
  BAD NODES              failed nodes and outliers, with every reason; --drain prints one
                         scontrol line each (Reason=\"fabprobe: ...\", at most 200 characters)

JSON DATA (schema fabprobe.sweep)
  nodes                  {reports, passed, warned, failed, outliers, unreadable, missing}
  failures[]             {id, node_count, nodes[], example}
  outliers[]             {node, key, value, majority_value, majority_nodes, nodes_compared}
  no_majority[]          {key, values: [[value, nodes], ...]}
  unreadable[]           {node, source, problem (missing|truncated|not_json|other_version|
                          not_a_check_report|duplicate), detail}
  bad_nodes[]            {node, reasons[]}

PROMETHEUS (--format prom)
  fabprobe_sweep_nodes{state}, fabprobe_sweep_bad_node{node} 1,
  fabprobe_sweep_outlier{node,key,value,majority} 1

EXIT STATUS
  0 every node passed and agrees with its peers, 1 a bad node or a missing/unreadable
  report, 2 could not run (an input that cannot be opened)";

/// `node1: {...}` (pdsh, clush, srun -l) -> ("node1", "{...}"). In a file (`json_only`) a
/// prefix counts only before a report, so `srun: error: ...` keeps the file's node name; on
/// stdin `node7: bash: fabprobe: command not found` still names node7.
fn split_prefix(line: &str, json_only: bool) -> (Option<&str>, &str) {
    if line.starts_with('{') {
        return (None, line);
    }
    match line.split_once(": ") {
        Some((p, rest))
            if !p.is_empty()
                && (!json_only || rest.trim_start().starts_with('{'))
                && p.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || b"._-".contains(&c)) =>
        {
            (Some(p), rest)
        }
        _ => (None, line),
    }
}

fn add_lines(sw: &mut Sweeper, source: &str, reader: impl BufRead) -> anyhow::Result<()> {
    for (i, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("reading {source}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let (prefix, rest) = split_prefix(&line, false);
        let src = format!("{source}:{}", i + 1);
        sw.add(&src, prefix, rest);
    }
    Ok(())
}

fn add_file(sw: &mut Sweeper, path: &Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let shown = path.display().to_string();
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
    // A pretty-printed report starts with a line holding `{` alone; anything else is lines.
    if text.lines().next().map(str::trim) == Some("{") || text.trim().is_empty() {
        sw.add(&shown, stem.as_deref(), &text);
        return Ok(());
    }
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.len() == 1 {
        let (prefix, rest) = split_prefix(lines[0], true);
        sw.add(&shown, prefix.or(stem.as_deref()), rest);
        return Ok(());
    }
    add_lines(sw, &shown, std::io::BufReader::new(text.as_bytes()))
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
    let mut sw = Sweeper::new();
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
                add_file(&mut sw, &p)?;
            }
        } else {
            add_file(&mut sw, input)?;
        }
    }
    if !expected.is_empty() {
        sw.expect(&expected);
    }
    let report = sw.finish();
    let text = if a.drain {
        report.drain_lines()
    } else {
        match fmt {
            Format::Json => {
                let me = crate::host::HostMeta::live();
                let info = HostInfo {
                    hostname: me.hostname,
                    kernel: me.kernel,
                    captured_at: me.captured_at,
                    source: "sweep".into(),
                };
                let findings = report.findings();
                Envelope::new("sweep", info, &report, &findings).to_json()
            }
            Format::Prom => crate::render::check::sweep_prom(&report),
            _ => crate::render::check::sweep_table(&report),
        }
    };
    emit(&text)?;
    Ok(if report.has_fault() {
        Outcome::Fault
    } else {
        Outcome::Pass
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launcher_prefixes() {
        assert_eq!(
            split_prefix("gpu017: {\"a\":1}", true),
            (Some("gpu017"), "{\"a\":1}")
        );
        assert_eq!(split_prefix("12: {}", false), (Some("12"), "{}"));
        assert_eq!(split_prefix("{\"x\": 1}", false), (None, "{\"x\": 1}"));
        assert_eq!(
            split_prefix("Segmentation fault: core", false),
            (None, "Segmentation fault: core")
        );
        assert_eq!(split_prefix("srun: error: x", true), (None, "srun: error: x"));
        assert_eq!(
            split_prefix("node7: bash: fabprobe: not found", false),
            (Some("node7"), "bash: fabprobe: not found")
        );
    }
}
