//! `fabprobe report`: saved `--format json` reports of ring, sweep, check, topo and nccl-log drawn as
//! one self-contained HTML page; also what `ring --html`, `sweep --html` and `nccl-log --html`
//! write.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use serde::Serialize;

use super::{GlobalArgs, Outcome, UsageError, emit};
use crate::render::Envelope;
use crate::render::html::{self, Input, Options};

#[derive(Debug, Args)]
#[command(after_long_help = REPORT_HELP)]
pub(crate) struct ReportArgs {
    /// Saved reports (`fabprobe ring|sweep|check|topo|nccl-log --format json > FILE.json`); a file
    /// may hold several (JSON lines).
    #[arg(value_name = "FILE.json", required = true)]
    pub inputs: Vec<PathBuf>,
    /// Where to write the page (`-` for stdout).
    #[arg(long, value_name = "OUT.html")]
    pub html: PathBuf,
    /// The page's title (default: the reports' kinds and host).
    #[arg(long, value_name = "TEXT")]
    pub title: Option<String>,
    /// Group a sweep's fleet map by a hostname pattern (a regular expression; its first
    /// capture group, else the whole match, names the group), e.g. '^(r\d+)n' for racks.
    /// Default: rows of 40 nodes in the sweep's order (--expect's).
    #[arg(long, value_name = "REGEX")]
    pub group_by: Option<String>,
}

const REPORT_HELP: &str = "\
  fabprobe ring --scan --format json > ring.json; fabprobe report ring.json --html ring.html
  fabprobe topo --format json > topo.json; fabprobe check --format json > check.json
  fabprobe report topo.json check.json --html node.html
  fabprobe sweep --expect 'gpu[001-128]' --format json all.jsonl > sweep.json
  fabprobe report sweep.json --group-by '^(r\\d+)n' --html fleet.html
  fabprobe nccl-log --format json logs/ > job.json; fabprobe report job.json --html job.html
  fabprobe nccl-log logs/ --html job.html     (the same page, in one step)

WHAT IT DRAWS
  ring   the verdicts first, in the text report's words; the link scan's sender x receiver
         matrix coloured by each link's rate as a fraction of the scan's median link, each
         verdict's cells outlined and tagged (v1, v2...; dashed: not judged, an unconfirmed
         suspect; the re-check's cleared suspects listed); busbw against size with the
         line rate (the slowest port) and the scan's median link; each rail's own with
         --rails; the hops table.
  sweep  the verdict line; a fleet map (every node one square, in --expect order or
         grouped by --group-by, coloured pass, warn/outlier, fail, missing, unreadable);
         the node x cause grid of the nodes with a cause; the drain list; the tickets
         when the sweep has them; the missing and unreadable reports.
  topo   NUMA nodes, host bridges, the PCIe switches NCCL sees, GPUs and NICs with their
         ports, rates and rails (rail k: the k-th RDMA port in device order, as
         `ring --rails all` numbers them without --device or NCCL_IB_HCA); NVLinks per
         GPU pair; findings marked on the devices they name, also those of a check report
         of the same host given alongside.
  check  the verdict line and the ranked findings with their fixes.
  nccl-log  the verdict line as the text prints it; the root cause first (the verdict the
         line names), each verdict's host, rank, device, peer, GIDs, status and the log
         line it rests on, what it means and the next steps (commands as blocks, no
         backticks); then the flight recorder's verdicts; the ranks and hosts table.

THE PAGE
  One file: no script, no font or image fetched (its Content-Security-Policy forbids any
  fetch), so it opens offline and pastes into a ticket. Dark when the browser asks for
  it (prefers-color-scheme), light when printed. Every value from the reports is escaped.
  Exit 0 when the page was written, whatever the reports found; 2 when it could not be (an
  unreadable file, not a fabprobe report, another schema_version, a kind it does not draw).";

pub(crate) fn run(g: &GlobalArgs, a: ReportArgs) -> anyhow::Result<Outcome> {
    if g.root.is_some() {
        return Err(UsageError("`fabprobe report` reads saved reports, not a host; --root does not apply".into()).into());
    }
    let group = a
        .group_by
        .as_deref()
        .map(regex::Regex::new)
        .transpose()
        .map_err(|e| UsageError(format!("--group-by: not a regular expression: {e}")))?;
    let mut inputs = Vec::new();
    for p in &a.inputs {
        inputs.extend(read(p)?);
    }
    let opts = Options { title: a.title, group };
    write(&a.html, &inputs, &opts)?;
    g.log(1, format!("wrote {} ({} reports)", a.html.display(), inputs.len()));
    Ok(Outcome::Pass)
}

/// A file's reports: one JSON value, or several one after another (JSON lines).
fn read(p: &Path) -> anyhow::Result<Vec<Input>> {
    let bytes = std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))?;
    let name = p.display().to_string();
    let values = serde_json::Deserializer::from_slice(&bytes)
        .into_iter::<serde_json::Value>()
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| UsageError(format!("{name}: not JSON ({e}); give a report saved with --format json")))?;
    if values.is_empty() {
        return Err(UsageError(format!("{name}: empty; give a report saved with --format json")).into());
    }
    let many = values.len() > 1;
    Ok(values
        .into_iter()
        .enumerate()
        .map(|(i, envelope)| Input {
            name: if many { format!("{name}:{}", i + 1) } else { name.clone() },
            envelope,
        })
        .collect())
}

fn write(out: &Path, inputs: &[Input], opts: &Options) -> anyhow::Result<()> {
    let page = html::page(inputs, opts).map_err(|e| UsageError(e.to_string()))?;
    if out.as_os_str() == "-" {
        return emit(&page);
    }
    // Atomically, as --output is: a reader (a browser, a ticket upload) never gets half a page.
    super::out::write_atomic_as("--html", out, &page)
}

/// `ring --html`, `sweep --html`: the report this run printed (or would have printed as
/// JSON), drawn as the page `fabprobe report` draws from that JSON.
pub(crate) fn write_envelope<T: Serialize>(out: &Path, name: &str, env: &Envelope<T>) -> anyhow::Result<()> {
    let envelope = serde_json::to_value(env).context("the report as JSON")?;
    write(out, &[Input { name: name.to_string(), envelope }], &Options::default())
}

/// Refuse an `--html` path whose folder does not exist before a long run, not after it.
pub(crate) fn check_writable(out: &Path) -> anyhow::Result<()> {
    if out.as_os_str() == "-" {
        return Err(UsageError("--html -: the report goes to stdout already; give a file name".into()).into());
    }
    let dir = out.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Err(UsageError(format!("--html {}: {} is not a directory", out.display(), dir.display())).into());
    }
    Ok(())
}
