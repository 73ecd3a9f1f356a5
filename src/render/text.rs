//! Plain-text helpers shared by table renderers: the verdict line and findings lines.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::finding::{Finding, Severity};

/// The width tables must fit, 0 for none; the CLI sets it once from `COLUMNS` or the
/// terminal (renderers read no environment).
static WIDTH: AtomicUsize = AtomicUsize::new(0);

/// Fit tables to `width` columns from now on (None: as wide as their content).
pub(crate) fn set_width(width: Option<usize>) {
    WIDTH.store(width.unwrap_or(0), Ordering::Relaxed);
}

pub(crate) fn width() -> Option<usize> {
    Some(WIDTH.load(Ordering::Relaxed)).filter(|w| *w > 0)
}

/// A rate as every renderer prints it: GB/s, and MB/s below 0.1 GB/s (`2.5 GB/s`,
/// `37 MB/s`). The ring's verdicts word their rates with the same function, so a rate reads
/// the same in a verdict, a table and `links`.
pub(crate) fn rate(gbs: f64) -> String {
    crate::ring::diagnosis::localize::fmt_gbs(gbs)
}

/// A rate in a table column: three decimals of GB/s, or of MB/s below 0.1 GB/s.
pub(crate) fn rate_cell(gbs: f64) -> String {
    crate::ring::diagnosis::localize::fmt_rate_cell(gbs)
}

/// Findings as lines under a table: `FAIL subject: message` plus evidence and fix, wrapped
/// to the terminal with a hanging indent under the finding.
pub(crate) fn findings(findings: &[Finding]) -> String {
    findings_to(findings, width())
}

/// [`findings`] within `width` columns.
pub(crate) fn findings_to(findings: &[Finding], width: Option<usize>) -> String {
    let mut out = String::new();
    let shown: Vec<_> = findings.iter().filter(|f| f.severity != Severity::Pass).collect();
    if shown.is_empty() {
        return out;
    }
    out.push_str("\nFindings:\n");
    for f in shown {
        // The subject wraps with the message: a long list of pairs or devices is words too.
        let head = format!("  {:<4} ", f.severity.as_str().to_uppercase());
        let said = format!("{}: {}", f.subject, f.message);
        out.push_str(&wrap_to(&head, &said, 7, width));
        out.push_str(&evidence_to("       evidence: ", &f.evidence, width));
        if let Some(fix) = &f.fix {
            out.push_str(&wrap_remedy_to("       fix: ", fix, 12, width));
        }
    }
    out
}
/// A finding's evidence as `key: value` lines a person reads, the first beside `lead`, the
/// rest under it; JSON values flattened (`memlock_soft: 8388608 bytes`, a list one item
/// after another with `; `), never printed as JSON. Empty evidence: nothing.
pub(crate) fn evidence_to(
    lead: &str,
    evidence: &std::collections::BTreeMap<String, serde_json::Value>,
    width: Option<usize>,
) -> String {
    let col = lead.chars().count();
    let mut out = String::new();
    for (n, (k, v)) in evidence_pairs(evidence).into_iter().enumerate() {
        let head = if n == 0 {
            format!("{lead}{k}: ")
        } else {
            format!("{:col$}{k}: ", "")
        };
        out.push_str(&wrap_to(&head, &v, col + 2, width));
    }
    out
}

/// The evidence as (key, value) text pairs: nested objects give dotted keys, `{"bytes": n}`
/// reads `n bytes`, a list its items joined by `; ` (an item may hold commas itself).
pub(crate) fn evidence_pairs(
    evidence: &std::collections::BTreeMap<String, serde_json::Value>,
) -> Vec<(String, String)> {
    fn flat(key: String, v: &serde_json::Value, out: &mut Vec<(String, String)>) {
        use serde_json::Value;
        match v {
            Value::Object(m) if m.len() == 1 && m.contains_key("bytes") => {
                out.push((key, format!("{} bytes", scalar(&m["bytes"]))))
            }
            Value::Object(m) if !m.is_empty() => {
                for (k, x) in m {
                    flat(format!("{key}.{k}"), x, out);
                }
            }
            Value::Object(_) => out.push((key, "none".into())),
            Value::Array(a) if a.is_empty() => out.push((key, "none".into())),
            Value::Array(a) => {
                let items: Vec<String> = a.iter().map(scalar).collect();
                out.push((key, items.join("; ")));
            }
            other => out.push((key, scalar(other))),
        }
    }
    fn scalar(v: &serde_json::Value) -> String {
        use serde_json::Value;
        match v {
            Value::String(s) => s.clone(),
            Value::Null => "unknown".into(),
            Value::Array(a) => a.iter().map(scalar).collect::<Vec<_>>().join(" "),
            Value::Object(m) => m
                .iter()
                .map(|(k, x)| format!("{k} {}", scalar(x)))
                .collect::<Vec<_>>()
                .join(", "),
            other => other.to_string(),
        }
    }
    let mut out = Vec::new();
    for (k, v) in evidence {
        flat(k.clone(), v, &mut out);
    }
    out
}

/// `fabprobe gids: WARN  0 fail, 2 warn; worst: mlx5_0:1: ...`: what the reader needs first.
/// The verdict is what was evaluated; what was not is said after it, never scored
/// (`PASS  no fail or warn findings; 1 not evaluated: links.port_state_unknown mlx5_0/1`).
pub(crate) fn verdict_line(command: &str, findings: &[Finding]) -> String {
    let count = |s: Severity| findings.iter().filter(|f| f.severity == s).count();
    let (fail, warn) = (count(Severity::Fail), count(Severity::Warn));
    let worst = crate::finding::worst(findings);
    // One entry per rule: the subjects one rule could not judge follow from one fact.
    let mut by_id: Vec<(&str, Vec<&str>)> = Vec::new();
    for f in crate::finding::not_evaluated(findings) {
        match by_id.iter_mut().find(|(id, _)| *id == f.id) {
            Some((_, subjects)) => subjects.push(&f.subject),
            None => by_id.push((&f.id, vec![&f.subject])),
        }
    }
    let n: usize = by_id.iter().map(|(_, s)| s.len()).sum();
    let unread: Vec<String> = by_id
        .iter()
        .map(|(id, subjects)| format!("{id} {}", subjects.join(", ")))
        .collect();
    let unread = match n {
        0 => String::new(),
        n => format!("; {n} not evaluated: {}", unread.join("; ")),
    };
    if worst == Severity::Pass
        && let Some(n) = crate::finding::nothing_judged(findings)
    {
        return wrap(&format!("fabprobe {command}: NOT EVALUATED  "), &n.message, 2);
    }
    // The first finding of the worst severity, in the probe's own order.
    match findings
        .iter()
        .find(|f| f.severity == worst && worst != Severity::Pass)
    {
        Some(f) => wrap(
            &format!(
                "fabprobe {command}: {}  {fail} fail, {warn} warn; worst: ",
                worst.as_str().to_uppercase(),
            ),
            &format!("{}: {}{unread}", f.subject, f.message),
            2,
        ),
        None if unread.is_empty() => format!("fabprobe {command}: PASS  no fail or warn findings\n"),
        None => wrap(
            &format!("fabprobe {command}: PASS  no fail or warn findings"),
            &unread,
            2,
        ),
    }
}

/// The words of `text`: whitespace splits, except inside backticks, so a backticked command
/// (with any punctuation touching it) is one word that is never broken. A backtick with no
/// closing one (a quoted log line's) quotes nothing.
pub fn words(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quoted) = (None, false);
    for (i, c) in text.char_indices() {
        if c == '`' {
            quoted = !quoted && text[i + 1..].contains('`');
        }
        if c.is_whitespace() && !quoted {
            if let Some(s) = start.take() {
                out.push(&text[s..i]);
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        out.push(&text[s..]);
    }
    out
}

/// `lead` then `text`, wrapped at word boundaries within `width` with later lines indented
/// `indent` spaces (at most half the width, so the text keeps room); one line per `\n` of
/// `text`; no width keeps each line whole (pipes, files). A word wider than what is left
/// starts the next line whole: a backticked command or a path pastes as printed even when
/// it runs past the width.
pub(crate) fn wrap_to(lead: &str, text: &str, indent: usize, width: Option<usize>) -> String {
    // A line that fits is left as it is (its double spaces too).
    let whole = format!("{lead}{text}\n");
    let Some(width) = width.filter(|w| whole.lines().any(|l| l.chars().count() > *w)) else {
        return whole;
    };
    let pad = " ".repeat(indent.min(width / 2));
    let mut out = String::new();
    let mut line = lead.to_string();
    for (n, para) in text.split('\n').enumerate() {
        if n > 0 {
            out.push_str(line.trim_end());
            out.push('\n');
            line = pad.clone();
        }
        fill(&mut out, &mut line, &pad, words(para), Some(width));
    }
    out.push_str(line.trim_end());
    out.push('\n');
    out
}

/// `words` appended to `line` (the first without a space); whenever the next word would pass
/// `width`, the line goes to `out` and the next begins with `pad`. A word is never broken.
pub(crate) fn fill<'a>(
    out: &mut String,
    line: &mut String,
    pad: &str,
    words: impl IntoIterator<Item = &'a str>,
    width: Option<usize>,
) {
    let mut empty = true;
    for w in words {
        let too_wide = width.is_some_and(|max| line.chars().count() + 1 + w.chars().count() > max);
        if !empty && too_wide {
            out.push_str(line.trim_end());
            out.push('\n');
            *line = pad.to_string();
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(w);
        empty = false;
    }
}

/// [`wrap_to`] at the width tables fit ([`width`]).
pub(crate) fn wrap(lead: &str, text: &str, indent: usize) -> String {
    wrap_to(lead, text, indent, width())
}

/// The FINDINGS list of a man page and `--help`, from a probe's rule table: `  id  severity
/// about`, the id column as wide as the table's longest id (at most 26, so the text keeps
/// room in an 80-column man page), the text wrapped under its column within [`HELP_WIDTH`]
/// by [`wrap_to`]. A rule with several ids lists each on its own line, the last beside its
/// text; an id too long for the column stands on its own line.
pub(crate) fn findings_section(docs: &[crate::finding::RuleDoc]) -> String {
    const WIDTH: usize = HELP_WIDTH;
    // Wide enough for `warn|fail`; a table with a longer severity widens it for every row.
    // Two spaces after the widest (`warn|fail  `): a cell boundary, as between the others.
    let sev = docs
        .iter()
        .map(|d| d.severity_text().len() + 2)
        .max()
        .unwrap_or(0)
        .max(11);
    let longest = docs
        .iter()
        .flat_map(|d| d.ids.iter())
        .map(|i| i.len())
        .max()
        .unwrap_or(0);
    let id_col = (longest + 1).min(26);
    let mut out = String::from("FINDINGS\n");
    for d in docs {
        let (last, rest) = d.ids.split_last().unwrap_or((&"", &[]));
        for id in rest {
            out.push_str(&format!("  {id}\n"));
        }
        let lead = if last.len() < id_col {
            format!("  {last:<id_col$}{:<sev$}", d.severity_text())
        } else {
            out.push_str(&format!("  {last}\n"));
            format!("{:pad$}{:<sev$}", "", d.severity_text(), pad = 2 + id_col)
        };
        out.push_str(&wrap_to(&lead, d.about, 2 + id_col + sev, Some(WIDTH)));
    }
    out
}

/// The tools a remedy that is one bare command starts with (`echo 1 > /sys/...; ...`).
pub const COMMAND_WORDS: &[&str] = &[
    "cat",
    "dcb",
    "echo",
    "ethtool",
    "export",
    "fabprobe",
    "fuser",
    "ibportstate",
    "ibstat",
    "ip",
    "kill",
    "lspci",
    "mlnx_qos",
    "mlxlink",
    "modprobe",
    "perfquery",
    "rdma",
    "scontrol",
    "setpci",
    "sudo",
    "sysctl",
    "tc",
    "unset",
];

/// Every line of a rendered report within the width ([`width`]), by [`fit_prose_to`].
pub(crate) fn fit_prose(text: &str) -> String {
    fit_prose_to(text, width())
}

/// Lines of `text` wider than `width` wrapped at word boundaries, continuation lines two
/// columns under the line's own indent (a `# ` comment continues as `#   `, so a drain script
/// stays a script). Left as they are: lines that fit; no width (a pipe keeps its bytes);
/// tab-separated lines (nvidia-smi's layout); table rows (three cells or more between runs
/// of two spaces: their tables fit by columns); `fix:`/`next:` remedies (laid out by
/// [`wrap_remedy`]: what is still wide there is a command); `scontrol` drain lines.
pub(crate) fn fit_prose_to(text: &str, width: Option<usize>) -> String {
    let Some(width) = width else {
        return text.to_string();
    };
    let mut out = String::with_capacity(text.len() + text.len() / 16);
    for line in text.split_inclusive('\n') {
        let l = line.strip_suffix('\n').unwrap_or(line);
        let body = l.trim_start();
        let keep = l.chars().count() <= width
            || l.contains('\t')
            || body
                .trim_end()
                .split("  ")
                .filter(|c| !c.trim().is_empty())
                .count()
                > 2
            || body.starts_with("fix: ")
            || body.starts_with("next: ")
            || body.starts_with("scontrol ");
        if keep {
            out.push_str(line);
            continue;
        }
        let lead = &l[..l.len() - body.len()];
        match body.strip_prefix("# ") {
            Some(rest) => {
                let wrapped = wrap_to(&format!("{lead}# "), rest, lead.len() + 4, Some(width));
                for (n, w) in wrapped.lines().enumerate() {
                    match (n, w.get(lead.len()..lead.len() + 1)) {
                        (0, _) | (_, None) => out.push_str(w),
                        _ => {
                            out.push_str(lead);
                            out.push('#');
                            out.push_str(&w[lead.len() + 1..]);
                        }
                    }
                    out.push('\n');
                }
            }
            None => out.push_str(&wrap_to(lead, body, lead.len() + 2, Some(width))),
        }
        if !line.ends_with('\n') {
            out.pop();
        }
    }
    out
}

/// A `fix:` or `next:` line: prose wraps like [`wrap`], its backticked commands never break
/// (a command that does not fit what is left of a line starts the next one, whole), and a
/// remedy that is one bare command stays on its line, unwrapped.
pub(crate) fn wrap_remedy_to(lead: &str, text: &str, indent: usize, width: Option<usize>) -> String {
    crate::render::remedy::lay_out(lead, text, indent, width)
}

/// [`wrap_remedy_to`] at the width tables fit.
pub(crate) fn wrap_remedy(lead: &str, text: &str, indent: usize) -> String {
    wrap_remedy_to(lead, text, indent, width())
}

/// The verdict line, then the findings ranked fail before warn, then the detail tables.
pub(crate) fn verdict_first(command: &str, findings: &[Finding], body: String) -> String {
    let mut ranked: Vec<Finding> = findings.to_vec();
    // Stable: within one severity the probe's order (device, then port) stays.
    ranked.sort_by_key(|f| std::cmp::Reverse(f.severity));
    let mut out = verdict_line(command, findings);
    let listed = self::findings(&ranked);
    out.push_str(listed.strip_prefix("\nFindings:\n").unwrap_or(&listed));
    out.push('\n');
    // The detail lines (device headers, per-port choices, module and kernel facts) fit too.
    out.push_str(&fit_prose(&body));
    out
}

/// The width of the long help and the man pages' EXTRA sections: 80 columns less a margin,
/// so neither clap (which re-wraps wider lines mid-phrase) nor man (`.nf` blocks are not
/// filled) breaks a line.
pub(crate) const HELP_WIDTH: usize = 78;

/// A help heading: `FINDINGS`, `JSON DATA (fabprobe.links)`, `EXIT STATUS`.
/// A line that merely starts with a name in capitals (`NCCL_IB_HCA (default ...), and`) is not.
pub(crate) fn is_heading(line: &str) -> bool {
    let head = line.split('(').next().unwrap_or("");
    head.chars().filter(|c| c.is_alphabetic()).count() >= 3
        && !head.chars().any(|c| c.is_lowercase())
        && !line.starts_with(' ')
        && (!line.contains('(') || line.trim_end().ends_with(')'))
}

/// Long help within `width` columns, whatever width it was written at. Prose is refilled:
/// unindented lines, one paragraph per run; lines at indent 1-2 ([`is_prose`]: words, no
/// cells), one paragraph while the next line goes on (lowercase, or the line before ends
/// mid-sentence). A table row and the lines under its last cell are one cell, refilled under
/// that column when too wide. Anything else too wide (a JSON shape, a command) continues two
/// columns in. Headings, blank lines and what fits are kept. Idempotent; it never drops or
/// adds a printing character.
pub(crate) fn fit_help(text: &str, width: usize) -> String {
    let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
    let indent_of = |l: &str| l.len() - l.trim_start().len();
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        let indent = indent_of(l);
        let start = i;
        i += 1;
        if l.is_empty() || is_heading(l) {
            out.push_str(l);
            out.push('\n');
            continue;
        }
        if is_command(&l[indent..]) {
            out.push_str(&crate::render::remedy::command_lines(&l[indent..], indent, Some(width)).join("\n"));
            out.push('\n');
            continue;
        }
        let hanging = lines
            .get(i)
            .is_some_and(|n| !n.trim().is_empty() && indent_of(n) > indent);
        if indent == 0 || (indent <= 2 && is_prose(&l[indent..]) && !hanging) {
            i = paragraph_end(&lines, start, indent);
            let para: Vec<&str> = lines[start..i].iter().map(|l| l.trim_start()).collect();
            let pad = &l[..indent];
            let mut line = pad.to_string();
            fill(&mut out, &mut line, pad, help_words(&para.join(" "), width - indent), Some(width));
            out.push_str(line.trim_end());
            out.push('\n');
            continue;
        }
        // A row: the lines under its last cell (or, with no cells, under the deeper indent
        // of the line after it) go on in it.
        let next_indent = lines.get(i).map(|n| indent_of(n)).filter(|n| *n > indent);
        if let Some(c) = last_cell(l).or(next_indent) {
            while i < lines.len()
                && indent_of(lines[i]) == c
                && !lines[i].trim().contains("  ")
                && !is_command(lines[i].trim_start())
            {
                i += 1;
            }
        }
        if lines[start..i].iter().all(|l| l.chars().count() <= width) {
            for l in &lines[start..i] {
                out.push_str(l);
                out.push('\n');
            }
        } else {
            let more: Vec<&str> = lines[start + 1..i].iter().map(|l| l.trim()).collect();
            let joined = if more.is_empty() {
                l.to_string()
            } else {
                format!("{l} {}", more.join(" "))
            };
            out.push_str(&fit_row(&joined, width));
        }
    }
    out
}

/// Where the paragraph that starts at `lines[start]` (at `indent`) ends: unindented prose runs
/// to a blank line, a heading or a command; indented prose while the next line goes on
/// (lowercase, or the line before ends mid-sentence).
fn paragraph_end(lines: &[&str], start: usize, indent: usize) -> usize {
    let indent_of = |l: &str| l.len() - l.trim_start().len();
    let mut i = start + 1;
    while i < lines.len()
        && indent_of(lines[i]) == indent
        && !lines[i].is_empty()
        && !is_heading(lines[i])
        && !is_command(lines[i].trim_start())
    {
        let (prev, next) = (lines[i - 1].trim_end(), lines[i].trim_start());
        let goes_on = next.starts_with(|c: char| c.is_lowercase() || "(`-".contains(c))
            || !prev.ends_with(['.', ':', '?', '!']);
        if indent > 0 && !(is_prose(next) && goes_on) {
            break;
        }
        i += 1;
    }
    i
}

/// Prose, not a table row, a data shape or a name on its own: words, no run of two spaces
/// between cells, not opening with JSON's punctuation.
fn is_prose(body: &str) -> bool {
    let body = body.trim_end();
    body.contains(' ') && !body.contains("  ") && !body.starts_with(['"', '{', '[', '}', ']', '|'])
}

/// A shell command on a line of its own (an example), never joined with the lines around
/// it: it starts with a tool, a launcher, `fabprobe <command>|-flag`, or `VAR=value`.
fn is_command(body: &str) -> bool {
    const LAUNCHERS: &[&str] = &[
        "srun",
        "sbatch",
        "salloc",
        "mpirun",
        "torchrun",
        "pdsh",
        "clush",
        "ssh",
        "python3",
        "man",
        "env",
        "nvidia-smi",
        "show_gids",
        "ib_write_bw",
        "ibv_devinfo",
        "journalctl",
        "systemctl",
        "cp",
        "ls",
    ];
    const COMMANDS: &[&str] = &[
        "topo",
        "gids",
        "links",
        "gdr",
        "qos",
        "nccl-env",
        "nccl-log",
        "ring",
        "report",
        "snapshot",
        "sweep",
        "check",
        "completions",
        "gen-docs",
    ];
    if body.trim_end().contains("  ") {
        return false; // an example beside what it does: a table row
    }
    let mut w = body.split_whitespace();
    let (first, second) = (w.next().unwrap_or(""), w.next().unwrap_or(""));
    match first {
        "fabprobe" => second.starts_with('-') || COMMANDS.contains(&second),
        "for" | "while" => body.contains("; do"),
        _ => {
            (COMMAND_WORDS.contains(&first) && first != "fabprobe")
                || LAUNCHERS.contains(&first)
                || first.split_once('=').is_some_and(|(k, _)| {
                    !k.is_empty()
                        && k.chars()
                            .all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit())
                })
        }
    }
}

/// Where a table row's last cell starts (after its last run of two spaces), if it has cells.
fn last_cell(l: &str) -> Option<usize> {
    let indent = l.len() - l.trim_start().len();
    let body = &l[indent..];
    body.rfind("  ")
        .map(|g| indent + g + (body[g..].len() - body[g..].trim_start().len()))
}

/// One help line within `width`: see [`fit_help`].
fn fit_row(l: &str, width: usize) -> String {
    if l.chars().count() <= width {
        return format!("{l}\n");
    }
    let indent = l.len() - l.trim_start().len();
    // Under the last cell when that leaves the text room (20 columns), else two columns in.
    // The cells before the last keep their spacing either way.
    let (lead, rest, hang) = match last_cell(l) {
        Some(c) if c + 20 <= width && l.is_char_boundary(c) => (&l[..c], &l[c..], c),
        Some(c) if c + 8 <= width && l.is_char_boundary(c) => (&l[..c], &l[c..], (indent + 2).min(width / 2)),
        _ => (&l[..indent], &l[indent..], (indent + 2).min(width / 2)),
    };
    let mut out = String::new();
    let mut line = lead.to_string();
    let pad = " ".repeat(hang);
    fill(
        &mut out,
        &mut line,
        &pad,
        help_words(rest, width.saturating_sub(hang)),
        Some(width),
    );
    out.push_str(line.trim_end());
    out.push('\n');
    out
}

/// The words of help text ([`words`]: a backticked command is one word), each piece within
/// `room` columns: a longer word is split at its spaces, then after `|` or `,`.
fn help_words(text: &str, room: usize) -> Vec<&str> {
    let room = room.max(8);
    let mut out = Vec::new();
    for w in words(text) {
        if w.chars().count() <= room {
            out.push(w);
            continue;
        }
        for part in w.split_whitespace() {
            let mut rest = part;
            while rest.chars().count() > room {
                let cut = rest
                    .char_indices()
                    .take_while(|(i, _)| *i < room)
                    .filter(|(_, c)| *c == '|' || *c == ',')
                    .map(|(i, _)| i + 1)
                    .last();
                let Some(cut) = cut else { break };
                out.push(&rest[..cut]);
                rest = &rest[cut..];
            }
            out.push(rest);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How long help is fitted, case by case (width 40 to keep the cases short).
    #[test]
    fn fit_help_cases() {
        let cases: [(&str, &str); 9] = [
            // Unindented prose: one paragraph per run, refilled.
            (
                "One two three four five six seven eight\nnine ten.\n",
                "One two three four five six seven eight\nnine ten.\n",
            ),
            (
                "Alpha beta\ngamma delta epsilon zeta eta theta iota\n",
                "Alpha beta gamma delta epsilon zeta eta\ntheta iota\n",
            ),
            // A capitalised name opening a sentence is no heading; a heading is kept.
            (
                "FINDINGS\nNCCL_NET_GDR_LEVEL (default PXB), and\nmore.\n",
                "FINDINGS\nNCCL_NET_GDR_LEVEL (default PXB), and\nmore.\n",
            ),
            // A row and the line under its last cell: one cell, refilled under its column.
            (
                "  a.b   warn  one two three four five\n              six seven\n",
                "  a.b   warn  one two three four five\n              six seven\n",
            ),
            (
                "  a.b   warn  one two three four five six seven\n              eight\n",
                "  a.b   warn  one two three four five\n              six seven eight\n",
            ),
            // Commands are never joined; a long one breaks between words with ` \\`.
            (
                "  fabprobe topo --root a\n  fabprobe topo --format json --root bbbbbbb\n",
                "  fabprobe topo --root a\n  fabprobe topo --format json --root \\\n    bbbbbbb\n",
            ),
            // An example beside what it does is a row: the text goes on under its column.
            (
                "  fabprobe topo     this host, laid out as nvidia-smi\n",
                concat!(
                    "  fabprobe topo     this host, laid out\n",
                    "                    as nvidia-smi\n"
                ),
            ),
            (
                "  fabprobe topo          this host, laid out\n",
                "  fabprobe topo          this host, laid\n    out\n",
            ),
            // Indented prose: one paragraph while the next line goes on.
            (
                "  Rank and world come from x, else\n  Slurm or PMI. Then a new line.\n  Names: here.\n",
                "  Rank and world come from x, else Slurm\n  or PMI. Then a new line.\n  Names: here.\n",
            ),
        ];
        for (text, want) in cases {
            let got = fit_help(text, 40);
            assert_eq!(got, want, "{text:?}");
            assert_eq!(fit_help(&got, 40), got, "not idempotent: {text:?}");
        }
    }

    #[test]
    fn findings_section_wraps_under_the_text_column() {
        let docs = [
            crate::finding::RuleDoc {
                ids: &["a.short"],
                severity: &[Severity::Warn],
                about: "one two three",
            },
            crate::finding::RuleDoc {
                ids: &["a.first_of_two", "a.second_of_two"],
                severity: &[Severity::Warn, Severity::Fail],
                about: "word word word word word word word word word word word word word word word word word word word word",
            },
        ];
        let s = findings_section(&docs);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "FINDINGS");
        // The id column is the longest id plus one; the severity column 11 (two spaces after
        // `warn|fail`, a cell boundary for the help's fitting).
        assert_eq!(
            lines[1],
            format!("  {:<16}{:<11}one two three", "a.short", "warn")
        );
        assert_eq!(lines[2], "  a.first_of_two");
        assert!(
            lines[3].starts_with(&format!("  {:<16}warn|fail  word", "a.second_of_two")),
            "{s}"
        );
        assert!(lines.iter().all(|l| l.len() <= HELP_WIDTH), "{s}");
        assert!(lines[4].starts_with(&format!("{:29}word", "")), "{s}");
    }

    #[test]
    fn verdict_line_names_the_worst_and_counts() {
        let w = Finding::new("a.w", Severity::Warn, "mlx5_0:1", "a warning");
        let f = Finding::new("a.f", Severity::Fail, "mlx5_1:1", "a failure");
        let p = Finding::new("a.p", Severity::Pass, "x", "fine");
        assert_eq!(
            verdict_line("gids", &[]),
            "fabprobe gids: PASS  no fail or warn findings\n"
        );
        assert_eq!(
            verdict_line("gids", std::slice::from_ref(&p)),
            "fabprobe gids: PASS  no fail or warn findings\n"
        );
        assert_eq!(
            verdict_line("links", &[w.clone(), f.clone()]),
            "fabprobe links: FAIL  1 fail, 1 warn; worst: mlx5_1:1: a failure\n"
        );
        let out = verdict_first("links", &[w, p, f], "BODY\n".into());
        let fail_at = out.find("  FAIL mlx5_1:1").unwrap();
        let warn_at = out.find("  WARN mlx5_0:1").unwrap();
        assert!(fail_at < warn_at && out.ends_with("\nBODY\n"), "{out}");
    }

    #[test]
    fn verdict_line_says_what_was_not_evaluated_and_does_not_score_it() {
        let u = Finding::new(
            "a.state_unknown",
            Severity::Unknown,
            "mlx5_0/1",
            "state unreadable",
        );
        let w = Finding::new("a.w", Severity::Warn, "mlx5_1/1", "a warning");
        assert_eq!(
            verdict_line("links", std::slice::from_ref(&u)),
            "fabprobe links: PASS  no fail or warn findings; 1 not evaluated: a.state_unknown mlx5_0/1\n"
        );
        assert_eq!(
            verdict_line("links", &[u.clone(), w]),
            "fabprobe links: WARN  0 fail, 1 warn; worst: mlx5_1/1: a warning; 1 not evaluated: \
             a.state_unknown mlx5_0/1\n"
        );
        assert_eq!(crate::finding::worst(&[u]), Severity::Pass);
    }

    /// Every line within the width except one holding a single unbreakable word; no word
    /// lost or split; later lines under the hanging indent.
    fn fits(out: &str, text: &str, lead: &str, indent: usize, width: usize) {
        for (n, l) in out.lines().enumerate() {
            let one_word = words(l.trim_start()).len() == 1;
            assert!(l.chars().count() <= width || one_word, "{width}: {l:?} in\n{out}");
            if n > 0 {
                assert!(l.starts_with(&" ".repeat(indent)), "{l:?}");
            }
        }
        let body: Vec<&str> = words(out.strip_prefix(lead).unwrap());
        assert_eq!(body, words(text), "{out}");
    }

    const PROSE: &str = "retransmissions on a credit-based link come from the path, not from the host: \
        check the cable and transceiver and the switch port's error counters on both ends";
    const FIX: &str = "find what stops the receiver draining: \
        `ethtool -S ens1f0np0 | grep -e pause -e discard -e out_of_buffer`, PCIe errors \
        (`fabprobe links`), a hung process or host";

    #[test]
    fn wrap_at_80_and_60_with_a_hanging_indent() {
        for width in [80, 60] {
            let out = wrap_to("  FAIL mlx5_0:1: ", PROSE, 7, Some(width));
            assert!(out.lines().count() >= 2, "{out}");
            fits(&out, PROSE, "  FAIL mlx5_0:1: ", 7, width);
        }
        // Words are not split: the first line ends where the next word would not fit.
        let out = wrap_to("> ", "aaaa bbbb cccc", 2, Some(11));
        assert_eq!(out, "> aaaa bbbb\n  cccc\n");
        // No width (a pipe, a file): the line whole, as before.
        assert_eq!(wrap_to("  x: ", PROSE, 7, None), format!("  x: {PROSE}\n"));
        // An indent wider than half the width gives way so the text keeps room.
        let out = wrap_to(&" ".repeat(45), PROSE, 45, Some(60));
        assert!(
            out.lines()
                .skip(1)
                .all(|l| l.starts_with(&" ".repeat(30)) && !l.starts_with(&" ".repeat(31))),
            "{out}"
        );
    }

    #[test]
    fn a_command_in_a_remedy_pastes_whole() {
        let cmd = "ethtool -S ens1f0np0 | grep -e pause -e discard -e out_of_buffer";
        for width in [80, 60] {
            let out = wrap_remedy_to("       fix: ", FIX, 12, Some(width));
            // The command on a line of its own (continued with ` \` where it is wider than the
            // width, never broken inside a word), whole, without its backticks.
            let joined = out.replace(" \\\n", " ");
            let whole = |l: &str| l.split_whitespace().collect::<Vec<_>>().join(" ") == cmd;
            assert!(joined.lines().any(whole), "{width}:\n{out}");
            assert!(!out.contains('`'), "{out}");
            assert!(out.lines().all(|l| l.chars().count() <= width), "{width}:\n{out}");
        }
        // A remedy that is bare commands: one a line, each whole.
        let bare = "echo 1 > /sys/class/net/ens1f0np0/ecn/roce_rp/enable/3; echo 1 > /sys/class/net/ens1f0np0/ecn/roce_np/enable/3";
        assert_eq!(
            wrap_remedy_to("  fix: ", bare, 7, Some(70)),
            "  fix: echo 1 > /sys/class/net/ens1f0np0/ecn/roce_rp/enable/3\n       echo 1 > /sys/class/net/ens1f0np0/ecn/roce_np/enable/3\n"
        );
        // Prose that starts like no tool wraps.
        assert!(wrap_remedy_to("  fix: ", PROSE, 7, Some(60)).lines().count() > 1);
    }

    #[test]
    fn findings_wrap_to_the_width() {
        let f = Finding::new("a.f", Severity::Fail, "mlx5_1:1", PROSE)
            .evidence(
                "path",
                "/sys/class/infiniband/mlx5_1/ports/1/counters/symbol_error",
            )
            .evidence("delta", "+25")
            .fix(FIX);
        let whole = findings_to(std::slice::from_ref(&f), None);
        let narrow = findings_to(std::slice::from_ref(&f), Some(60));
        assert!(whole.lines().any(|l| l.len() > 60), "{whole}");
        assert!(narrow.lines().count() > whole.lines().count(), "{narrow}");
        for l in narrow.lines() {
            let body = l.trim_start().trim_end_matches(" \\");
            assert!(
                l.chars().count() <= 60 || words(body).len() <= 2,
                "{l:?}\n{narrow}"
            );
        }
        assert!(
            narrow.contains("\n              ethtool -S ens1f0np0 | grep"),
            "{narrow}"
        );
        // Evidence as `key: value` lines, never JSON.
        assert!(narrow.contains("       evidence: delta: +25\n"), "{narrow}");
        assert!(narrow.contains("\n                 path: /sys/"), "{narrow}");
    }

    #[test]
    fn fit_prose_wraps_prose_and_leaves_tables_commands_and_pipes() {
        let prose = "  Receive buffers (bytes): 130944,130944,0,0,0,0,0,0; total 262016; prio2buffer 0,0,0,0,1,0,0,0\n";
        assert_eq!(fit_prose_to(prose, None), prose, "a pipe keeps its bytes");
        assert_eq!(
            fit_prose_to(prose, Some(80)),
            "  Receive buffers (bytes): 130944,130944,0,0,0,0,0,0; total 262016; prio2buffer\n    0,0,0,0,1,0,0,0\n"
        );
        let keep = [
            "GPU0\t X \tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\tPXB\tNODE\tNODE\tNODE\tSYS\tSYS\n",
            "  1     4: ACTIVE  5: LinkUp   400 Gb/sec (4X NDR)  InfiniBand  0x21  0x1  ibp12s0\n",
            "       fix: echo 1 > /sys/class/net/ens1f0np0/ecn/roce_rp/enable/3 /sys/class/net/x\n",
            "scontrol update NodeName=gpu-1 State=DRAIN Reason=\"fabprobe: links.port_not_active mlx5_1/1\"\n",
        ];
        for l in keep {
            assert_eq!(fit_prose_to(l, Some(60)), l);
        }
        // One gap of two spaces is prose (`x16)  DOWNTRAINED`), not a table.
        let one_gap = "  PCIe 0000:58:00.0: 32.0 GT/s PCIe x8 (max 32.0 GT/s PCIe x16)  DOWNTRAINED, driver mlx5_core\n";
        assert!(fit_prose_to(one_gap, Some(80)).lines().all(|l| l.len() <= 80));
        // A comment continues as a comment, so a drain script stays one.
        let c = "# node-a: passed but differs from its peers, not drained (--drain-outliers drains it): x\n";
        let out = fit_prose_to(c, Some(60));
        assert!(
            out.lines().count() > 1 && out.lines().all(|l| l.starts_with('#') && l.len() <= 60),
            "{out}"
        );
        assert!(out.lines().skip(1).all(|l| l.starts_with("#   ")), "{out}");
        // No trailing newline in, none out.
        assert_eq!(fit_prose_to("a b c d e f", Some(40)), "a b c d e f");
    }

    #[test]
    fn a_long_subject_wraps_with_its_message() {
        let pairs = "GPU0-mlx5_0 GPU1-mlx5_1 GPU2-mlx5_2 GPU3-mlx5_3 GPU4-mlx5_4 GPU5-mlx5_5 GPU6-mlx5_6 GPU7-mlx5_7";
        let f = Finding::new("gdr.x", Severity::Warn, pairs, "the path is SYS");
        let out = findings_to(std::slice::from_ref(&f), Some(80));
        assert!(out.lines().all(|l| l.chars().count() <= 80), "{out}");
        assert!(
            out.contains("  WARN GPU0-mlx5_0") && out.contains("GPU7-mlx5_7: the path"),
            "{out}"
        );
        // Unwrapped, the same line as before.
        assert_eq!(
            findings_to(std::slice::from_ref(&f), None),
            format!("\nFindings:\n  WARN {pairs}: the path is SYS\n")
        );
    }

    #[test]
    fn prose_next_steps_wrap_and_commands_do_not() {
        use crate::render::remedy::bare_command;
        assert!(bare_command(
            "for p in 3 4; do echo 1 > /a/$p; done; echo 1 > /b/3"
        ));
        assert!(!bare_command(
            "for each priority P: echo 1 (on) or 0 (off) > /a/P"
        ));
        assert!(bare_command("echo 1 > /sys/a/3; echo 1 > /sys/b/3"));
        assert!(bare_command("ethtool -A ens1f0np0 rx off tx off"));
        assert!(!bare_command(
            "fabprobe links on both hosts; the vendor syndrome in the NIC vendor's documentation"
        ));
        assert!(!bare_command(
            "fabprobe gdr (ACS, IOMMU, peermem/DMA-BUF per GPU-NIC pair); fabprobe topo"
        ));
        assert!(!bare_command(
            "fabprobe nccl-env (the interface NCCL picks); set NCCL_SOCKET_IFNAME"
        ));
        // A backtick that never closes quotes nothing: the log line still wraps.
        assert_eq!(words("a `b c"), vec!["a", "`b", "c"]);
        assert_eq!(words("a `b c` d"), vec!["a", "`b c`", "d"]);
    }

    #[test]
    fn one_rate_formatter() {
        for (gbs, want) in [
            (24.6, "25 GB/s"),
            (2.53, "2.5 GB/s"),
            (0.12, "0.12 GB/s"),
            (0.1, "0.10 GB/s"),
            (0.05, "50 MB/s"),
            (0.013, "13 MB/s"),
            (0.00025, "0.25 MB/s"),
        ] {
            assert_eq!(rate(gbs), want, "{gbs}");
        }
        assert_eq!(rate_cell(0.037), "37.000 MB/s");
        assert_eq!(rate_cell(1.5), "1.500 GB/s");
    }
}

#[cfg(test)]
mod evidence_tests {
    use super::*;

    #[test]
    fn evidence_reads_as_key_value_lines_not_json() {
        let f = Finding::new("a", Severity::Warn, "x", "m")
            .evidence("memlock_soft", serde_json::json!({"bytes": 8388608}))
            .evidence("also", serde_json::json!(["topo.a (GPU5): b, c", "d"]))
            .evidence("n", 3);
        let pairs = evidence_pairs(&f.evidence);
        assert_eq!(
            pairs,
            vec![
                ("also".to_string(), "topo.a (GPU5): b, c; d".to_string()),
                ("memlock_soft".to_string(), "8388608 bytes".to_string()),
                ("n".to_string(), "3".to_string()),
            ]
        );
        let out = evidence_to("  evidence: ", &f.evidence, None);
        assert!(
            !out.contains('{') && !out.contains('[') && !out.contains('='),
            "{out}"
        );
    }
}

/// The mark beside a device name ib_core moved past a NIC that did not register.
pub(crate) const MOVED_MARK: char = '~';

/// `text` with every whole-word mention of a moved device name marked (`mlx5_7~`,
/// `GPU7-mlx5_7~`, `mlx5_7~/1`), and the names' legend after its first line (the verdict):
/// how every command says that a name no longer means the NIC a setting written for the
/// whole node means. The names come from `topo::moved_names`, in the command's report.
pub(crate) fn with_moved(text: &str, moved: &[crate::probe::topo::MovedName]) -> String {
    if moved.is_empty() {
        return text.to_string();
    }
    let marked = mark_moved(text, moved);
    let (first, rest) = match marked.split_once('\n') {
        Some((f, r)) => (format!("{f}\n"), r.to_string()),
        None => (marked.clone(), String::new()),
    };
    format!("{first}{}{rest}", moved_legend(moved))
}

/// The marks a wrapped line can gain (two names and one twice): [`moved_view`] renders that
/// much narrower so the marked lines still fit.
const MARKS_PER_LINE: usize = 3;

/// `body` rendered for the width less [`MARKS_PER_LINE`] where a name moved, then
/// [`with_moved`]: the moved names marked and their legend after the verdict.
pub(crate) fn moved_view(moved: &[crate::probe::topo::MovedName], body: impl FnOnce() -> String) -> String {
    if moved.is_empty() {
        return body();
    }
    let w = width();
    set_width(w.map(|w| w.saturating_sub(MARKS_PER_LINE)));
    let b = body();
    set_width(w);
    with_moved(&b, moved)
}

/// Every whole-word mention of a moved name in `text` marked [`MOVED_MARK`]. A mention
/// followed by a table's padding gives the mark one of its spaces, so columns stay.
pub(crate) fn mark_moved(text: &str, moved: &[crate::probe::topo::MovedName]) -> String {
    text.split_inclusive('\n')
        .map(|line| {
            // `was to be mlx5_8` and `mlx5_7>mlx5_8` name the name a device was to have, not
            // the device called that now.
            let hypothetical = |end: usize, name: &str| {
                let before = &line[..end - name.len()];
                before.ends_with("was to be ") || before.ends_with('>')
            };
            let mut ends: Vec<usize> = moved
                .iter()
                .flat_map(|m| {
                    crate::probe::topo::name_ends(line, &m.name)
                        .into_iter()
                        .filter(|e| !hypothetical(*e, &m.name))
                })
                .collect();
            ends.sort_unstable();
            ends.dedup();
            let mut out = String::with_capacity(line.len() + ends.len());
            let mut at = 0;
            for e in ends {
                out.push_str(&line[at..e]);
                out.push(MOVED_MARK);
                at = if line[e..].starts_with("  ") { e + 1 } else { e };
            }
            out.push_str(&line[at..]);
            out
        })
        .collect()
}

/// One line per moved name: the NIC it names now, the one before it that did not register,
/// and the name it was to have.
pub(crate) fn moved_legend(moved: &[crate::probe::topo::MovedName]) -> String {
    moved_legend_to(moved, width())
}

/// [`moved_legend`] wrapped to `width` columns.
pub(crate) fn moved_legend_to(moved: &[crate::probe::topo::MovedName], width: Option<usize>) -> String {
    moved
        .iter()
        .map(|m| {
            let line = format!(
                "name moved: {name}{MOVED_MARK} is the NIC at {bdf}; ib_core gave it the name of one that did not register ({past}), it was to be {was}: a setting that names {name}{MOVED_MARK} selects this NIC\n",
                name = m.name,
                bdf = m.pci_bus_id,
                past = m.past.join(", "),
                was = m.was_to_be,
            );
            wrap_to("", line.trim_end(), 2, width)
        })
        .collect()
}

#[cfg(test)]
mod moved_mark_tests {
    use super::*;
    use crate::probe::topo::MovedName;

    fn moved(names: &[(&str, &str)]) -> Vec<MovedName> {
        names
            .iter()
            .map(|(n, w)| MovedName {
                name: n.to_string(),
                pci_bus_id: "0000:e9:00.0".into(),
                was_to_be: w.to_string(),
                past: vec!["0000:d5:00.0".into()],
            })
            .collect()
    }

    /// The mark goes after the whole name only: never after a longer name that starts with
    /// the moved one (mlx5_10 for mlx5_1), nor inside a word, nor on the name a device was to
    /// have; however the name is spelled beside it (`/port`, `:port`, a pair, a list).
    #[test]
    fn a_moved_name_is_marked_where_it_is_the_whole_name() {
        let one = moved(&[("mlx5_1", "mlx5_2")]);
        let both = moved(&[("mlx5_1", "mlx5_2"), ("mlx5_10", "mlx5_11")]);
        let table: &[(&[MovedName], &str, &str)] = &[
            (&one, "mlx5_10/1 ACTIVE", "mlx5_10/1 ACTIVE"),
            (&one, "mlx5_1/1 ACTIVE", "mlx5_1~/1 ACTIVE"),
            (&one, "mlx5_1:1", "mlx5_1~:1"),
            (&one, "GPU1-mlx5_1 GPU0-mlx5_10", "GPU1-mlx5_1~ GPU0-mlx5_10"),
            (&one, "NCCL_IB_HCA==mlx5_1,mlx5_10,mlx5_11", "NCCL_IB_HCA==mlx5_1~,mlx5_10,mlx5_11"),
            (&one, "mlx5_11 mlx5_100 mlx5_1_0 xmlx5_1", "mlx5_11 mlx5_100 mlx5_1_0 xmlx5_1"),
            (&one, "uses mlx5_1.", "uses mlx5_1~."),
            // A table's padding gives the mark one space: the next column stays put.
            (&one, "mlx5_1   1  ACTIVE", "mlx5_1~  1  ACTIVE"),
            (&one, "mlx5_10  1  ACTIVE", "mlx5_10  1  ACTIVE"),
            // The name it was to have names no device now.
            (&one, "it was to be mlx5_1, mlx5_0>mlx5_1", "it was to be mlx5_1, mlx5_0>mlx5_1"),
            (&both, "mlx5_1 mlx5_10 mlx5_100", "mlx5_1~ mlx5_10~ mlx5_100"),
            (&both, "mlx5_10/1 then mlx5_1/1", "mlx5_10~/1 then mlx5_1~/1"),
        ];
        for (m, text, want) in table {
            assert_eq!(mark_moved(text, m), *want, "{text}");
        }
    }
}
