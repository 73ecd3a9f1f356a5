//! `fabprobe sweep`: merge many nodes' `check --format json` reports (files, directories,
//! JSON lines on stdin, with or without pdsh/clush/srun -l prefixes).

use std::io::BufRead;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;

use super::{Format, GlobalArgs, Outcome, UsageError};
use crate::check::hostlist;
use crate::check::sweep::{Hint, Sweeper};
use crate::render::{Envelope, HostInfo};

#[derive(Debug, Args)]
#[command(after_long_help = SWEEP_HELP)]
pub(crate) struct SweepArgs {
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
    /// The policy whose `[sweep] tolerance` table says how far numeric fingerprint values
    /// may differ between nodes of one kind (a built-in name or a TOML file; without it the
    /// defaults: memory_gib within 1% of its kind's median, every other value exact).
    #[arg(long, value_name = "NAME|FILE")]
    pub policy: Option<String>,
    /// Write the result to FILE atomically (a temporary file in FILE's directory, renamed
    /// over it) and exit 0 once it is written: the verdict is in the file. For textfile
    /// collectors: `fabprobe --format prom sweep reports/ --output /var/lib/node_exporter/fleet.prom`
    /// (0 reports read is still an error, exit 2, and writes nothing).
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

const SWEEP_HELP: &str = "\
Collect the reports the way you already run things; no daemon, no server:
  srun -N2000 --ntasks-per-node=1 fabprobe check --policy dgx-h100 --format json > all.jsonl
  pdsh -w gpu[001-128] fabprobe check --format json | fabprobe sweep --expect 'gpu[001-128]'
  clush -w @gpu fabprobe check --format json | fabprobe sweep
  fabprobe sweep reports/            (one <node>.json per node; subdirectories are
                                     skipped and named in NOTES)

INPUT
  A file holding one pretty-printed report, or JSON lines (one report per line; check prints
  its JSON on one line). Lines may carry a launcher prefix `node: ` (pdsh, clush); `srun -l`
  task numbers (` 3: `) name no node, the report's hostname does. Input is bytes: a report
  or line that is empty, not UTF-8, truncated, not JSON, from another schema_version or not a
  fabprobe.check report is listed as such (with the node from its file name or prefix) and
  the sweep goes on.
  A line of any length is read: one over 1 MiB is parsed as it streams by, not held.
  Names: a launcher's label (pdsh/clush prefix) names the host the command ran on, so it
  wins over the report's hostname (containers often say localhost; a note counts labels
  unlike hostnames). A file's name is a convention: the report's hostname wins over it.
  `localhost` names no host. A hostname and a label are one host when they are equal or
  one is the short name of the other (gpu001 / gpu001.cluster.local); the label's spelling
  is kept, and --expect's spelling wins over both, so --expect 'gpu[001-128]' matches FQDN
  reports. An unusable report keeps the node its label, file name or readable hostname
  gives. Two reports for one host: the worse verdict counts, both sources are listed
  (duplicate), and the failing findings of every failing one reach the drain reason.
  Ring reports: rank 0's `fabprobe ring --format json` (schema fabprobe.ring), in the same
  files, directories and lines, and beside check reports:
    fabprobe sweep ring-runs/            fabprobe sweep checks.jsonl ring-job42.json
  Their data.drain[] and data.ticket[] are merged over every ring report: one drain entry
  per node (every kind and reason), one ticket per link (kind, both ends, rail), naming the
  reports that gave it.

WHAT IT SAYS
  FAILED, BY CAUSE       nodes whose verdict is fail, grouped by failing finding id
  DIFFERENT FROM PEERS   for every hardware/configuration fingerprint key (fabprobe-check(1);
                         not tool_version or policy, not keys only some tool versions
                         report): nodes that did not fail whose value differs from the value
                         more than half of the reports of their hardware kind share (every
                         report counts, failed ones too), with that majority value and its
                         node count; a missing key counts as null. A failed node is listed
                         once, under FAILED. A value held by more nodes that did not fail
                         than the majority's is never an outlier (a note says so).
                         Hardware kind: the GPU models, the HCA models and the IB and RoCE
                         port counts, read from the fingerprints; nodes of one kind are never
                         compared with another's, and a kind's only node is named in NOTES.
                         Numbers: memory_gib agrees within 1% of its kind's median, every
                         other value must be equal; --policy's [sweep] tolerance changes that
  NO MAJORITY            keys where no value reaches more than half of a kind (no outliers
                         named)
  NOTES                  mixed tool versions, keys not compared, labels unlike hostnames,
                         reports made under different policies, hardware kinds, majorities
                         held by failed nodes, directory entries skipped
  RING: DRAIN            from ring reports: nodes whose own port or NIC is at fault (a slow
                         egress or ingress, a port down or downtrained), each with its kinds,
                         reasons and the switch port at its end where LLDP named it
  RING: TICKET           from ring reports: links and paths to ticket (slow_link, slow_path,
                         link_error, hang_link) with both ends, the switch ports and the
                         reports that named them; never drained
  DRAIN                  failed nodes and ring reports' nodes to drain (reason `ring KIND`),
                         with every reason; outliers that passed are never
                         drained unless --drain-outliers. --drain prints one scontrol line each
                         (Reason=\"fabprobe: ...\", at most 200 characters, safe to paste in sh)
                         and # lines for outliers not drained, unusable reports and ring
                         tickets (`# ticket slow_link node-b -> node-d [switch ports]`)

JSON DATA (schema fabprobe.sweep)
  nodes                  {reports, passed, warned, failed, outliers, unreadable, missing, drain}
  hosts[]                {node, verdict (pass|warn|fail|unknown), worst: {id, severity,
                          subject, message} (the report's first finding of its highest
                          severity; null on pass or unknown), problem (why unknown, else
                          null), drain}: every node, sorted by name
  failures[]             {id, node_count, nodes[], example}
  outliers[]             {node, key, value, majority_value (a tolerance key's: the median),
                          tolerance (\"±1%\", or null when exact), majority_nodes,
                          nodes_compared (reports of its kind), kind}: nodes that did not fail
  no_majority[]          {key, kind, values: [[value, nodes], ...]}
  unreadable[]           {node, source, problem (missing|truncated|not_json|not_utf8|
                          cannot_read|other_version|not_a_check_report|duplicate), detail}
  bad_nodes[]            {node, reasons[]}: the drain list
  notes[]                strings
  ring                   (only when ring reports were read) {reports, runs[] {source, host
                          (rank 0's), world, verdicts, drain, ticket, error (why the run
                          ended early, else null)}, drain[] {node, kinds[], reasons[],
                          switch_ports[], sources[]}, ticket[] {kind, from {host, rank}, to
                          {host, rank}, rail, message, switch_ports[], sources[]}}: ring
                          drain nodes are on bad_nodes too (reason `ring KIND`); each ticket is
                          a sweep.ticket finding
  node_states[]          {node, state (pass|warn|fail|missing|unreadable)}: every node named,
                         once, in --expect order then as read (what --html's fleet map draws)

PROMETHEUS (--format prom)
  fabprobe_sweep_nodes{state}, fabprobe_sweep_bad_node{node} 1 (the drain list),
  fabprobe_sweep_outlier{node,key,value,majority} 1,
  fabprobe_sweep_ticket{kind,from,to,rail} 1 (with ring reports: each link to ticket)
";

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

/// Whether the bytes so far hold one whole JSON object, one cut short, or something else.
#[derive(Debug, PartialEq, Eq)]
enum Shape {
    Whole,
    CutShort,
    Other,
}

/// A byte scan (strings and escapes aware) instead of a parse, resumable: each labelled
/// piece is scanned once, so joining a task's pieces is linear in its bytes.
#[derive(Clone, Copy, Default)]
struct Scan {
    depth: i64,
    in_str: bool,
    esc: bool,
    started: bool,
    closed: bool,
}

impl Scan {
    /// Scan `b` on from where the scan stopped.
    fn feed(&mut self, b: &[u8]) -> Shape {
        for &c in b {
            if self.closed {
                if !c.is_ascii_whitespace() {
                    return Shape::Other;
                }
                continue;
            }
            if !self.started {
                match c {
                    b'{' => self.started = true,
                    c if c.is_ascii_whitespace() => continue,
                    _ => return Shape::Other,
                }
            }
            if self.in_str {
                match c {
                    _ if self.esc => self.esc = false,
                    b'\\' => self.esc = true,
                    b'"' => self.in_str = false,
                    _ => {}
                }
                continue;
            }
            match c {
                b'"' => self.in_str = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth -= 1;
                    self.closed = self.depth == 0;
                }
                _ => {}
            }
        }
        match (self.started, self.closed) {
            (_, true) => Shape::Whole,
            (true, false) => Shape::CutShort,
            (false, _) => Shape::Other,
        }
    }
}

/// Labelled pieces of one task's line, joined: `srun -l` cuts a task's output line into
/// 1024-byte pieces and labels each (measured with slurm-wlm 22.05.8), so a report arrives
/// as `3: {...` then `3: ...}` lines, possibly interleaved with other tasks' pieces.
#[derive(Default)]
struct Pieces {
    /// label -> the report being joined.
    open: std::collections::HashMap<String, Open>,
    seq: u64,
}

struct Open {
    /// Source of its first piece, and when it started (to flush in order).
    source: String,
    seq: u64,
    bytes: Vec<u8>,
    scan: Scan,
}

/// A report to sweep: (source, label, bytes).
type Done = (String, String, Vec<u8>);

impl Pieces {
    /// Add a labelled piece; `done` gets each report that is complete (or cannot be).
    fn add(&mut self, source: String, label: &str, rest: &[u8], done: &mut impl FnMut(Done)) {
        if let Some(o) = self.open.get_mut(label) {
            let mut scan = o.scan;
            match scan.feed(rest) {
                Shape::CutShort => {
                    o.scan = scan;
                    o.bytes.extend_from_slice(rest);
                    return;
                }
                Shape::Whole => {
                    let mut o = self.open.remove(label).expect("looked up above");
                    o.bytes.extend_from_slice(rest);
                    return done((o.source, label.to_string(), o.bytes));
                }
                // Not a continuation (a new report after one that was cut for good): the
                // earlier piece goes on as it is, and this one starts over.
                Shape::Other => self.close(label, done),
            }
        }
        let mut scan = Scan::default();
        if scan.feed(rest) == Shape::CutShort {
            self.seq += 1;
            let o = Open {
                source,
                seq: self.seq,
                bytes: rest.to_vec(),
                scan,
            };
            self.open.insert(label.to_string(), o);
        } else {
            done((source, label.to_string(), rest.to_vec()));
        }
    }

    /// The label's open report goes on as it is.
    fn close(&mut self, label: &str, done: &mut impl FnMut(Done)) {
        if let Some(o) = self.open.remove(label) {
            done((o.source, label.to_string(), o.bytes));
        }
    }

    /// Reports whose end never came, in the order they started.
    fn finish(self, done: &mut impl FnMut(Done)) {
        let mut left: Vec<(String, Open)> = self.open.into_iter().collect();
        left.sort_by_key(|(_, o)| o.seq);
        for (label, o) in left {
            done((o.source, label, o.bytes));
        }
    }
}

/// Lines longer than this are not held: their report is parsed as it streams by.
const LINE_HEAD: usize = 1 << 20;

/// Reads a line into `buf`, at most `max` bytes of it. Returns None at the end of input,
/// else whether the whole line was read (the newline is consumed, not kept).
fn read_head(r: &mut impl BufRead, buf: &mut Vec<u8>, max: usize) -> std::io::Result<Option<bool>> {
    let mut any = false;
    loop {
        let avail = r.fill_buf()?;
        if avail.is_empty() {
            return Ok(any.then_some(true));
        }
        any = true;
        let room = (max - buf.len()).min(avail.len());
        if let Some(p) = avail[..room].iter().position(|&c| c == b'\n') {
            buf.extend_from_slice(&avail[..p]);
            r.consume(p + 1);
            return Ok(Some(true));
        }
        buf.extend_from_slice(&avail[..room]);
        r.consume(room);
        if buf.len() == max {
            return Ok(Some(false));
        }
    }
}

/// The rest of the current line as a reader: ends at the newline (consumed) or the input's end.
struct LineRest<'a, R> {
    r: &'a mut R,
    done: bool,
}

impl<R: BufRead> std::io::Read for LineRest<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        let avail = self.r.fill_buf()?;
        let n = avail.len().min(buf.len());
        let (take, eol) = match avail[..n].iter().position(|&c| c == b'\n') {
            Some(p) => (p, true),
            None => (n, n == 0),
        };
        buf[..take].copy_from_slice(&avail[..take]);
        self.r.consume(take + usize::from(eol && n > 0));
        self.done = eol;
        Ok(take)
    }
}

/// JSON lines as bytes: a line that is not UTF-8 is listed, the rest goes on. A line too
/// long to hold is streamed into the sweeper.
fn add_lines(sw: &mut Sweeper, source: &str, mut reader: impl BufRead) -> anyhow::Result<()> {
    let mut line = Vec::new();
    let mut no = 0;
    let mut pieces = Pieces::default();
    let done = |sw: &mut Sweeper, (src, label, bytes): Done| sw.add_bytes(&src, Some(&label), &bytes);
    loop {
        line.clear();
        no += 1;
        let read =
            read_head(&mut reader, &mut line, LINE_HEAD).with_context(|| format!("reading {source}"))?;
        let Some(whole) = read else { break };
        if !whole {
            add_long_line(sw, &format!("{source}:{no}"), &line, &mut reader, &mut pieces)?;
            continue;
        }
        let l = line.strip_suffix(b"\r").unwrap_or(&line);
        if l.trim_ascii().is_empty() {
            continue;
        }
        match split_prefix(l, false) {
            (Some(label), rest) => pieces.add(format!("{source}:{no}"), label, rest, &mut |d| done(sw, d)),
            (None, rest) => sw.add_bytes(&format!("{source}:{no}"), None, rest),
        }
    }
    // Pieces whose end never came: listed as truncated by the sweeper.
    pieces.finish(&mut |d| done(sw, d));
    Ok(())
}

/// A line of which `head` is the start: its report is parsed as the rest streams by.
fn add_long_line(
    sw: &mut Sweeper,
    src: &str,
    head: &[u8],
    reader: &mut impl BufRead,
    pieces: &mut Pieces,
) -> anyhow::Result<()> {
    let (label, rest) = split_prefix(head, false);
    if let Some(l) = label {
        pieces.close(l, &mut |(s, l, b)| sw.add_bytes(&s, Some(&l), &b));
    }
    let mut tail = LineRest {
        r: reader,
        done: false,
    };
    sw.add_reader(src, Hint::launcher(label), std::io::Read::chain(rest, &mut tail));
    // What the parse left of the line (it stops at an error).
    std::io::copy(&mut tail, &mut std::io::sink()).with_context(|| format!("reading {src}"))?;
    Ok(())
}

/// Files larger than this are streamed, not read whole.
const FILE_WHOLE: u64 = 16 << 20;

fn add_file(sw: &mut Sweeper, path: &Path, in_dir: bool) -> anyhow::Result<()> {
    let shown = path.display().to_string();
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
    let file = std::fs::File::open(path).and_then(|f| Ok((f.metadata()?.len(), f)));
    let (len, file) = match file {
        Ok(f) => f,
        // One unreadable file among many reports is listed; a file named on the command
        // line that cannot be read is a usage error (exit 2).
        Err(e) if in_dir => {
            sw.add_unreadable_file(&shown, stem.as_deref(), &format!("cannot read: {e}"));
            return Ok(());
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {shown}")),
    };
    if len > FILE_WHOLE {
        return add_large_file(sw, &shown, stem.as_deref(), file);
    }
    let mut bytes = Vec::new();
    if let Err(e) = std::io::Read::read_to_end(&mut &file, &mut bytes) {
        if in_dir {
            sw.add_unreadable_file(&shown, stem.as_deref(), &format!("cannot read: {e}"));
            return Ok(());
        }
        return Err(e).with_context(|| format!("cannot read {shown}"));
    }
    let file_hint = stem.as_deref().map_or(Hint::None, Hint::File);
    let first = bytes.split(|&c| c == b'\n').next().unwrap_or(&[]);
    // A pretty-printed report starts with a line holding `{` alone; anything else is lines.
    if first.trim_ascii() == b"{" || bytes.trim_ascii().is_empty() {
        sw.add_bytes_hinted(&shown, file_hint, &bytes);
        return Ok(());
    }
    let lines: Vec<&[u8]> = bytes
        .split(|&c| c == b'\n')
        .filter(|l| !l.trim_ascii().is_empty())
        .collect();
    if lines.len() == 1 {
        let hint = match split_prefix(lines[0], true) {
            (Some(p), _) => Hint::Launcher(p),
            (None, _) => file_hint,
        };
        let (_, rest) = split_prefix(lines[0], true);
        sw.add_bytes_hinted(&shown, hint, rest);
        return Ok(());
    }
    add_lines(sw, &shown, std::io::BufReader::new(&bytes[..]))
}

/// A file too large to hold: one pretty-printed report streamed whole, else lines.
fn add_large_file(
    sw: &mut Sweeper,
    shown: &str,
    stem: Option<&str>,
    file: std::fs::File,
) -> anyhow::Result<()> {
    let mut r = std::io::BufReader::with_capacity(64 << 10, file);
    let buf = r.fill_buf().with_context(|| format!("reading {shown}"))?;
    let first = buf.split(|&c| c == b'\n').next().unwrap_or(&[]);
    if first.len() < buf.len() && first.trim_ascii() == b"{" {
        sw.add_reader(shown, stem.map_or(Hint::None, Hint::File), r);
        return Ok(());
    }
    add_lines(sw, shown, r)
}

/// A directory's reports: the files directly in it. Subdirectories and other entries are
/// skipped (an `old/` or `archive/` of earlier runs would count nodes twice) and named in a
/// note; dot files (an editor's or a writer's temporary) are skipped silently.
fn add_dir(g: &GlobalArgs, sw: &mut Sweeper, dir: &Path) -> anyhow::Result<()> {
    let mut files = Vec::new();
    let mut skipped = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let p = e
            .with_context(|| format!("cannot list {}", dir.display()))?
            .path();
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.starts_with('.') {
            continue;
        }
        if p.is_file() {
            files.push(p);
        } else {
            skipped.push(if p.is_dir() { format!("{name}/") } else { name });
        }
    }
    files.sort();
    skipped.sort();
    g.log(1, format!("{}: {} files", dir.display(), files.len()));
    if !skipped.is_empty() {
        let shown: Vec<&str> = skipped.iter().take(5).map(String::as_str).collect();
        let more = skipped.len().saturating_sub(5);
        sw.note(format!(
            "{}: skipped {} entries that are not files ({}{}): sweep reads the files directly in a directory; name a subdirectory to read it",
            dir.display(),
            skipped.len(),
            shown.join(", "),
            if more > 0 { format!(", +{more} more") } else { String::new() }
        ));
    }
    for p in files {
        add_file(sw, &p, true)?;
    }
    Ok(())
}

pub(crate) fn run(g: &GlobalArgs, a: SweepArgs) -> anyhow::Result<Outcome> {
    let fmt = g.format;
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
    let mut sw = sweeper(&a)?;
    read_inputs(g, &mut sw, &a.inputs)?;
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
    let empty = report.reports_read() == 0;
    if a.output.is_none() || !empty {
        let outcome = if report.has_fault() {
            Outcome::Fault
        } else {
            Outcome::Pass
        };
        let outcome = super::out::deliver(&text, a.output.as_deref(), outcome)?;
        if !empty {
            return Ok(outcome);
        }
    }
    // Printed above what was (not) read; an empty sweep must not look like a clean fleet.
    Err(UsageError(format!(
        "0 reports: the collection failed? ({} unreadable, {} missing)",
        report.nodes.unreadable, report.nodes.missing
    ))
    .into())
}

/// The sweeper as the flags set it: outliers drained or not, and the policy's tolerances.
fn sweeper(a: &SweepArgs) -> anyhow::Result<Sweeper> {
    let mut sw = Sweeper::new();
    sw.drain_outliers(a.drain_outliers);
    if let Some(p) = &a.policy {
        let pol = crate::check::policy::load(p).map_err(|e| match e {
            crate::check::policy::LoadError::Invalid(pe) => anyhow::Error::new(super::Hinted {
                msg: format!("policy {pe}"),
                hint: "every key is listed in `man fabprobe-check` (POLICY FILES)".into(),
            }),
            other => anyhow::Error::new(UsageError(format!("--policy: {other}"))),
        })?;
        sw.tolerances(&pol.sweep_tolerance);
    }
    Ok(sw)
}

/// Every input into the sweeper: stdin when none (or only `-`) is named, then each file
/// and directory.
fn read_inputs(g: &GlobalArgs, sw: &mut Sweeper, inputs: &[PathBuf]) -> anyhow::Result<()> {
    let stdin_only = inputs.is_empty() || inputs.iter().all(|p| p.as_os_str() == "-");
    if stdin_only {
        add_lines(sw, "stdin", std::io::stdin().lock())?;
    }
    for input in inputs.iter().filter(|p| p.as_os_str() != "-") {
        let meta = std::fs::metadata(input).with_context(|| format!("cannot open {}", input.display()))?;
        if meta.is_dir() {
            add_dir(g, sw, input)?;
        } else {
            add_file(sw, input, false)?;
        }
    }
    Ok(())
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
