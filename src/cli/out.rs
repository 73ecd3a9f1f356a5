//! stdout for results only; a reader that went away (`fabprobe topo | head`) is not an error.
//! On a terminal, FAIL and WARN at the start of a line are coloured; never with `NO_COLOR`
//! set (no-color.org), `TERM=dumb`, or when stdout is a pipe or a file (JSON, prom and
//! scripts see the same bytes as the snapshot tests).

use std::io::{IsTerminal, Write};

use std::fmt::Write as _;

use super::Outcome;
use crate::finding::{Finding, Severity};

/// Write a rendered result to stdout.
pub fn emit(text: &str) -> anyhow::Result<()> {
    let mut o = std::io::stdout().lock();
    if o.is_terminal() && colour_wanted_here() {
        o.write_all(colourize(text).as_bytes())?;
    } else {
        o.write_all(text.as_bytes())?;
    }
    o.flush()?;
    Ok(())
}

/// Write `text` to `path` so a reader sees the old file or the whole new one, never a part:
/// a temporary file in the same directory (same filesystem), flushed, then renamed over it.
/// Its name starts with a dot, which node_exporter's textfile collector ignores (it reads
/// `*.prom` only).
pub(crate) fn write_atomic(path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    write_atomic_as("--output", path, text)
}

/// [`write_atomic`] for the option `flag` (named in its errors).
pub(crate) fn write_atomic_as(flag: &str, path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    use anyhow::Context;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    let name = path
        .file_name()
        .with_context(|| format!("{flag} {}: not a file name", path.display()))?;
    let tmp = dir.join(format!(".{}.tmp.{}", name.to_string_lossy(), std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        anyhow::Error::new(e).context(format!("writing {flag} {}", path.display()))
    })
}

/// Whether this process's environment allows colour (`NO_COLOR`, `TERM=dumb`).
pub(super) fn colour_wanted_here() -> bool {
    colour_wanted(std::env::var_os("NO_COLOR"), std::env::var_os("TERM"))
}

fn colour_wanted(no_color: Option<std::ffi::OsString>, term: Option<std::ffi::OsString>) -> bool {
    no_color.is_none_or(|v| v.is_empty()) && term.is_none_or(|t| t != "dumb")
}

/// FAIL (bold red) and WARN (yellow) where a line's first word is one, and the verdict word
/// after `fabprobe <command>: `. Nothing else changes, so a table keeps its layout.
pub(super) fn colourize(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 64);
    for line in text.split_inclusive('\n') {
        let indent = line.len() - line.trim_start().len();
        let (head, rest) = line.split_at(indent);
        let (pre, word_and_rest) = match rest.strip_prefix("fabprobe ").and_then(|r| r.find(": ")) {
            Some(i) => rest.split_at("fabprobe ".len() + i + 2),
            None => ("", rest),
        };
        let word = ["FAIL", "WARN"].into_iter().find(|w| {
            word_and_rest.starts_with(w)
                && word_and_rest[w.len()..].chars().next().is_none_or(|c| c.is_whitespace() || c == ':')
        });
        match word {
            Some(w) => {
                let code = if w == "FAIL" { "\x1b[1;31m" } else { "\x1b[33m" };
                out.push_str(head);
                out.push_str(pre);
                out.push_str(code);
                out.push_str(w);
                out.push_str("\x1b[0m");
                out.push_str(&word_and_rest[w.len()..]);
            }
            None => out.push_str(line),
        }
    }
    out
}

pub(super) fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// The result to stdout with `outcome`, or with `--output FILE` written atomically and
/// Pass: the file was written, and a textfile job's `&& mv` must not break exactly when a
/// fault is found (the verdict is in what was written).
pub(crate) fn deliver(text: &str, output: Option<&std::path::Path>, outcome: Outcome) -> anyhow::Result<Outcome> {
    match output {
        Some(path) => {
            write_atomic(path, text)?;
            Ok(Outcome::Pass)
        }
        None => {
            emit(text)?;
            Ok(outcome)
        }
    }
}

/// A probe's verdict as metrics, so a file written with `--output` (exit 0) still says it:
/// `fabprobe_CMD_verdict` 0 pass, 1 warn, 2 fail (of what was evaluated);
/// `fabprobe_CMD_findings{severity}` for warn, fail and unknown (not evaluated);
/// `fabprobe_CMD_finding{id,subject,severity} N`: how many of each.
pub(crate) fn findings_prom(cmd: &str, findings: &[Finding]) -> String {
    let count = |sev: Severity| findings.iter().filter(|f| f.severity == sev).count();
    let (fail, warn) = (count(Severity::Fail), count(Severity::Warn));
    let unknown = count(Severity::Unknown);
    let verdict = match (fail, crate::finding::nothing_judged(findings)) {
        (0, Some(_)) => 3,
        (0, None) => usize::from(warn > 0),
        _ => 2,
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# HELP fabprobe_{cmd}_verdict fabprobe {cmd}'s verdict: 0 pass, 1 warn, 2 fail, 3 not evaluated (nothing to judge)."
    );
    let _ = writeln!(s, "# TYPE fabprobe_{cmd}_verdict gauge\nfabprobe_{cmd}_verdict {verdict}");
    let _ = writeln!(s, "# HELP fabprobe_{cmd}_findings Warn, fail and unknown (not evaluated) findings by severity.");
    let _ = writeln!(s, "# TYPE fabprobe_{cmd}_findings gauge");
    let _ = writeln!(s, "fabprobe_{cmd}_findings{{severity=\"fail\"}} {fail}\nfabprobe_{cmd}_findings{{severity=\"warn\"}} {warn}");
    let _ = writeln!(s, "fabprobe_{cmd}_findings{{severity=\"unknown\"}} {unknown}");
    // One series per (id, subject, severity), its value how many findings share it: two
    // counters of one port rising are two findings, but one series name twice in a file
    // makes node_exporter refuse it ("collected before with the same name and label values").
    let mut series: Vec<(String, usize)> = Vec::new();
    for f in findings.iter().filter(|f| f.severity != Severity::Pass) {
        let (id, subject, sev) = (crate::render::prom_label(&f.id), crate::render::prom_label(&f.subject), f.severity.as_str());
        let labels = format!("id=\"{id}\",subject=\"{subject}\",severity=\"{sev}\"");
        match series.iter_mut().find(|(l, _)| *l == labels) {
            Some((_, n)) => *n += 1,
            None => series.push((labels, 1)),
        }
    }
    if !series.is_empty() {
        let _ = writeln!(s, "# HELP fabprobe_{cmd}_finding Warn, fail and unknown findings of one id, subject and severity.");
        let _ = writeln!(s, "# TYPE fabprobe_{cmd}_finding gauge");
    }
    for (labels, n) in series {
        let _ = writeln!(s, "fabprobe_{cmd}_finding{{{labels}}} {n}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_only_leading_verdict_words() {
        let cases = [
            ("FAIL  policy.x  host\n", "\x1b[1;31mFAIL\x1b[0m  policy.x  host\n"),
            ("  WARN gids: x\n", "  \x1b[33mWARN\x1b[0m gids: x\n"),
            ("fabprobe check: FAIL  policy p\n", "fabprobe check: \x1b[1;31mFAIL\x1b[0m  policy p\n"),
            ("FAILED to read\n", "FAILED to read\n"),
            ("  \"severity\": \"fail\",\n", "  \"severity\": \"fail\",\n"),
            ("GPU0\t X \tNV18\n", "GPU0\t X \tNV18\n"),
            ("no newline WARN", "no newline WARN"),
            ("WARN", "\x1b[33mWARN\x1b[0m"),
        ];
        for (i, o) in cases {
            assert_eq!(colourize(i), o, "{i:?}");
        }
    }

    #[test]
    fn no_color_and_dumb_terminals_get_none() {
        use std::ffi::OsString;
        let s = |v: &str| Some(OsString::from(v));
        assert!(colour_wanted(None, s("xterm-256color")));
        assert!(colour_wanted(s(""), None), "an empty NO_COLOR does not count");
        assert!(!colour_wanted(s("1"), s("xterm")));
        assert!(!colour_wanted(None, s("dumb")));
    }
}
