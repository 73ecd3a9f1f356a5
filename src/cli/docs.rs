//! `fabprobe gen-docs DIR`: man pages (`fabprobe.1`, `fabprobe-<cmd>.1`) and shell
//! completions (`completions/`), all generated from the one clap definition, and
//! `fabprobe completions SHELL`, which prints one shell's completions to stdout.
//! `tests/docs.rs` fails when the committed `man/` differs from a fresh generation, when a
//! page makes groff warn, or when an EXAMPLES line does not parse with the clap definition.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, ValueEnum};
use clap_complete::Shell;
use roff::{Roff, bold, italic, roman};

use super::Outcome;

#[derive(Debug, Args)]
pub(crate) struct GenDocsArgs {
    /// Directory to write into (created if missing); the repository keeps it in `man/`.
    #[arg(default_value = "man")]
    pub dir: PathBuf,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum ShellArg {
    Bash,
    Zsh,
    Fish,
}

#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to print completions for, e.g. `fabprobe completions bash >
    /// /etc/bash_completion.d/fabprobe`.
    #[arg(value_enum)]
    pub shell: ShellArg,
}

pub(crate) fn run(a: GenDocsArgs) -> anyhow::Result<Outcome> {
    generate(&a.dir)?;
    Ok(Outcome::Pass)
}

pub(crate) fn completions(a: CompletionsArgs) -> anyhow::Result<Outcome> {
    let shell = match a.shell {
        ShellArg::Bash => Shell::Bash,
        ShellArg::Zsh => Shell::Zsh,
        ShellArg::Fish => Shell::Fish,
    };
    super::emit(&completion_script(shell)?)?;
    Ok(Outcome::Pass)
}

/// Write every page and completion file into `dir`.
pub(crate) fn generate(dir: &Path) -> anyhow::Result<()> {
    let comp_dir = dir.join("completions");
    std::fs::create_dir_all(&comp_dir).with_context(|| format!("cannot create {}", comp_dir.display()))?;
    let mut cmd = super::command();
    cmd.build();
    write_page(dir, "fabprobe.1", cmd.clone(), "fabprobe")?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
        let name = format!("fabprobe-{}", sub.get_name());
        let page = sub.clone().name(name.clone()).display_name(name.clone()).bin_name(name.clone());
        write_page(dir, &format!("{name}.1"), page, sub.get_name())?;
    }
    for (shell, file) in [(Shell::Bash, "fabprobe.bash"), (Shell::Zsh, "_fabprobe"), (Shell::Fish, "fabprobe.fish")] {
        let path = comp_dir.join(file);
        std::fs::write(&path, completion_script(shell)?).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// clap_complete's script for `shell`, with values it cannot know from the clap definition:
/// `--policy` offers the built-in policy names as well as files, `--show-policy` the names,
/// and `--device` the RDMA devices in /sys/class/infiniband when completing.
pub(crate) fn completion_script(shell: Shell) -> anyhow::Result<String> {
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut super::command(), "fabprobe", &mut buf);
    let script = String::from_utf8(buf).context("clap_complete wrote non-UTF-8")?;
    let names = crate::check::policy::BUILTIN.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(" ");
    let case = |flag: &str, reply: &str| {
        let from = format!("                {flag})\n                    COMPREPLY=($(compgen -f \"${{cur}}\"))\n");
        (from, format!("                {flag})\n                    COMPREPLY=({reply})\n"))
    };
    let subs: Vec<(String, String)> = match shell {
        Shell::Bash => vec![
            case("--policy", &format!("$(compgen -W \"{names}\" -- \"${{cur}}\") $(compgen -f -- \"${{cur}}\")")),
            case("--show-policy", &format!("$(compgen -W \"{names}\" -- \"${{cur}}\")")),
            case("--device", "$(compgen -W \"$(ls /sys/class/infiniband 2>/dev/null)\" -- \"${cur}\")"),
        ],
        Shell::Zsh => vec![
            (
                ":NAME|FILE:_default'".into(),
                format!(":NAME|FILE:_alternative \"policies:built-in policy:({names})\" \"files:policy file:_files\"'"),
            ),
            ("]:NAME:_default'".into(), format!("]:NAME:({names})'")),
            (":DEV:_default'".into(), format!(":DEV:{ZSH_DEVICES}'")),
            (":DEV[:PORT]:_default'".into(), format!(":DEV[:PORT]:{ZSH_DEVICES}'")),
        ],
        Shell::Fish => vec![
            (" -l policy -d ".into(), format!(" -l policy -F -a \"{names}\" -d ")),
            (" -l show-policy -d ".into(), format!(" -l show-policy -f -a \"{names}\" -d ")),
            (" -l device -d ".into(), " -l device -f -a \"(ls /sys/class/infiniband 2>/dev/null)\" -d ".into()),
        ],
        _ => Vec::new(),
    };
    let mut script = script;
    for (from, to) in subs {
        // clap_complete's layout changed: fail generation rather than ship a script that
        // silently lost these completions.
        anyhow::ensure!(script.contains(&from), "{shell} completions: `{}` not found", from.trim());
        script = script.replace(&from, &to);
    }
    Ok(script)
}

/// zsh: the names in /sys/class/infiniband (no colon in it: _arguments splits on them).
const ZSH_DEVICES: &str = "{local -a d=(/sys/class/infiniband/*(N)); compadd -- ${d##*/}}";

/// One page: clap_mangen's sections, with a SYNOPSIS that shows each option's value
/// (`--root SNAPSHOT`, not `--root`) and this command's EXAMPLES and EXIT STATUS.
fn write_page(dir: &Path, file: &str, cmd: clap::Command, key: &str) -> anyhow::Result<()> {
    let cmd = cmd.clone().override_usage(synopsis(&cmd));
    let man = clap_mangen::Man::new(cmd.clone()).source(format!("fabprobe {}", env!("CARGO_PKG_VERSION")));
    let mut buf = Vec::new();
    man.render_title(&mut buf)?;
    man.render_name_section(&mut buf)?;
    man.render_synopsis_section(&mut buf)?;
    man.render_description_section(&mut buf)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut buf)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(&mut buf)?;
    }
    buf.write_all(examples_section(key).as_bytes())?;
    buf.write_all(exit_status_section(key).as_bytes())?;
    if let Some(extra) = cmd.get_after_long_help().or(cmd.get_after_help()) {
        buf.write_all(extra_section(&without_exit_status(&extra.to_string())).as_bytes())?;
    }
    man.render_version_section(&mut buf)?;
    let path = dir.join(file);
    std::fs::write(&path, buf).with_context(|| format!("cannot write {}", path.display()))
}

/// The help text without its EXIT STATUS block: the page has that section of its own, from
/// the same table.
fn without_exit_status(text: &str) -> String {
    let Some(at) = text.find("EXIT STATUS\n") else {
        return text.to_string();
    };
    // The block is its indented lines; what follows (a blank line, a heading) stays.
    let rest: Vec<&str> = text[at + "EXIT STATUS\n".len()..]
        .lines()
        .skip_while(|l| l.starts_with(' '))
        .skip_while(|l| l.is_empty())
        .collect();
    format!("{}{}", &text[..at], rest.join("\n"))
}

/// `name [-b|--minbytes SIZE] [--scan] [-v|--verbose]... FILE...`: every visible argument
/// with the value it takes, in clap's order.
pub(crate) fn synopsis(cmd: &clap::Command) -> String {
    let name = cmd.get_bin_name().unwrap_or_else(|| cmd.get_name()).to_string();
    let mut parts = vec![name];
    for a in cmd.get_arguments().filter(|a| !a.is_hide_set() && !a.is_positional()) {
        let flag = match (a.get_short(), a.get_long()) {
            (Some(s), Some(l)) => format!("-{s}|--{l}"),
            (Some(s), None) => format!("-{s}"),
            (None, Some(l)) => format!("--{l}"),
            (None, None) => continue,
        };
        let takes_value = a.get_action().takes_values();
        let value = match a.get_value_names() {
            Some(v) if takes_value => format!(" {}", v.join(" ")),
            None if takes_value => format!(" {}", a.get_id().as_str().to_uppercase()),
            _ => String::new(),
        };
        let repeat = if matches!(a.get_action(), clap::ArgAction::Count) { "..." } else { "" };
        let (l, r) = if a.is_required_set() { ("", "") } else { ("[", "]") };
        parts.push(format!("{l}{flag}{value}{r}{repeat}"));
    }
    for a in cmd.get_positionals().filter(|a| !a.is_hide_set()) {
        let v = a.get_value_names().map(|v| v.join(" ")).unwrap_or_else(|| a.get_id().as_str().to_uppercase());
        let many = if a.get_num_args().is_some_and(|n| n.max_values() > 1) { "..." } else { "" };
        let (l, r) = if a.is_required_set() { ("", "") } else { ("[", "]") };
        parts.push(format!("{l}{v}{r}{many}"));
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        parts.push("COMMAND".into());
    }
    parts.join(" ")
}

/// `(what it does, the command line)` for each page. Every line must parse with the clap
/// definition (tests/docs.rs); a line after `|` is another program's.
pub fn examples(key: &str) -> &'static [(&'static str, &'static str)] {
    match key {
        "fabprobe" => &[
            ("Pre-flight a node against the DGX H100 policy (exit 1 when a check fails)", "fabprobe check --policy dgx-h100"),
            ("The GPU/NIC matrix, as nvidia-smi topo -m prints it", "fabprobe topo"),
            ("A two-node ring over RDMA under Slurm", "srun -N2 --ntasks-per-node=1 fabprobe ring --transport rdma -b 8M -e 1G"),
            ("Triage a hung job from every rank's NCCL_DEBUG=INFO log", "fabprobe nccl-log logs/"),
        ],
        "check" => &[
            ("Judge this node against the default policy", "fabprobe check"),
            ("Judge a captured node against the DGX H100 policy, as JSON for sweep", "fabprobe check --root node17.tar.gz --policy dgx-h100 --format json"),
            ("Counter rates over 10 seconds as well as the static checks", "fabprobe check --interval 10"),
            ("Print a shipped policy, to copy and edit", "fabprobe check --show-policy dgx-h100"),
        ],
        "gdr" => &[
            ("GPUDirect RDMA readiness of every GPU x NIC pair", "fabprobe gdr"),
            ("The same from a snapshot, as JSON", "fabprobe gdr --root node17.tar.gz --format json"),
        ],
        "gids" => &[
            ("Every populated GID and the index NCCL and perftest would pick", "fabprobe gids"),
            ("show_gids' own layout, for one device", "fabprobe gids --show-gids --device mlx5_0"),
        ],
        "links" => &[
            ("Port state, rate and error counters, like ibstat", "fabprobe links"),
            ("Counter deltas over 5 seconds", "fabprobe links --interval 5"),
            ("What changed since a snapshot taken earlier", "fabprobe links --baseline before.tar.gz"),
        ],
        "qos" => &[
            ("PFC, ECN and trust on every RoCE netdev", "fabprobe qos"),
            ("Pause and CNP rates on one netdev over 10 seconds", "fabprobe qos --ifname eth2 --interval 10"),
            ("Also listen for the switch's LLDP DCBX advertisement", "fabprobe qos --lldp --lldp-wait 31"),
        ],
        "nccl-env" => &[
            ("What NCCL would choose here, and a lint of every NCCL_* setting", "fabprobe nccl-env"),
            ("The same for a captured host, as JSON", "fabprobe nccl-env --root node17.tar.gz --format json"),
        ],
        "nccl-log" => &[
            ("Verdicts from every rank's log in a directory", "fabprobe nccl-log logs/"),
            ("From a pipe", "kubectl logs job/train | fabprobe nccl-log -"),
        ],
        "ring" => &[
            ("Four nodes under Slurm, one rank per node, 8 MiB to 1 GiB", "srun -N4 --ntasks-per-node=1 fabprobe ring -b 8M -e 1G -f 2"),
            ("Over TCP on a named interface", "srun -N4 --ntasks-per-node=1 fabprobe ring --transport tcp --ifname eth1"),
            ("A self-test: four ranks in this process over loopback", "fabprobe ring --local 4"),
            ("The link scan alone, also drawn as an HTML page (rank 0 writes it)", "srun -N8 --ntasks-per-node=1 fabprobe ring --scan --html ring.html"),
            ("Without a launcher: rank 1 of 2, rank 0 on node-a", "fabprobe ring --rank 1 --world 2 --coordinator node-a:29517"),
        ],
        "snapshot" => &[
            ("Capture what the probes read on this node", "fabprobe snapshot -o node17.tar.gz"),
            ("Then analyse it anywhere", "fabprobe check --root node17.tar.gz"),
        ],
        "sweep" => &[
            ("Every node's check under Slurm, merged, with drain lines for failed nodes", "srun -N128 -l fabprobe check --format json | fabprobe sweep --expect 'gpu[001-128]' --drain"),
            ("From reports collected as files", "fabprobe sweep reports/"),
            ("Also as a page: fleet map, node x cause grid, drain list", "fabprobe sweep reports/ --expect 'gpu[001-128]' --html fleet.html"),
        ],
        "report" => &[
            ("A saved ring run as a page: verdicts, scan heatmap, busbw against size", "fabprobe report ring.json --html ring.html"),
            ("A node's topology tree with its check findings marked", "fabprobe report topo.json check.json --html node17.html"),
            ("A saved sweep, its fleet map grouped by rack", "fabprobe report sweep.json --group-by '^(r[0-9]+)n' --html fleet.html"),
        ],
        "topo" => &[
            ("The matrix nvidia-smi topo -m prints, from sysfs and NVML", "fabprobe topo"),
            ("NCCL's view: path types between GPUs and NICs", "fabprobe topo --nccl"),
            ("Write NCCL topology XML for NCCL_TOPO_FILE", "fabprobe topo --format nccl-xml"),
        ],
        "completions" => &[
            ("Install bash completions", "fabprobe completions bash > /etc/bash_completion.d/fabprobe"),
            ("zsh, into a directory on $fpath", "fabprobe completions zsh > ~/.zfunc/_fabprobe"),
        ],
        _ => &[],
    }
}

fn examples_section(key: &str) -> String {
    let mut r = Roff::new();
    r.control("SH", ["EXAMPLES"]);
    for (what, line) in examples(key) {
        r.control("TP", []);
        r.text([roman(*what)]);
        // Unfilled, so man never joins two examples into one line; a command wider than
        // the body is broken between shell words with ` \`, so it still pastes.
        r.control("nf", []);
        for piece in crate::render::remedy::command_lines(line, 0, Some(EXAMPLE_WIDTH)) {
            r.text([bold(piece)]);
        }
        r.control("fi", []);
    }
    r.to_roff()
}

/// Columns an example line may take: man at MANWIDTH=80 indents a `.TP` body by 14.
const EXAMPLE_WIDTH: usize = 66;

fn exit_status_section(key: &str) -> String {
    let mut r = Roff::new();
    r.control("SH", ["EXIT STATUS"]);
    for (code, what) in super::exit_statuses(key) {
        r.control("TP", []);
        r.text([bold(code)]);
        r.text([roman(what)]);
    }
    r.control("PP", []);
    r.text([
        roman("A closed stdout or stderr ("),
        italic("fabprobe topo 2>&1 | head"),
        roman(") is not an error."),
    ]);
    r.to_roff()
}

/// Columns a preformatted line may take: man at MANWIDTH=80 indents the body by 7.
const PRE_WIDTH: usize = 73;

/// The command's after-help text as roff: an upper-case line is a subsection heading, a
/// paragraph at column 0 is prose that man fills, and indented lines (tables, JSON shapes,
/// command lines) are set preformatted, so man keeps their columns; a line wider than
/// [`PRE_WIDTH`] is broken at a space and continued under its own description column.
fn extra_section(text: &str) -> String {
    let mut out = String::from(".SH EXTRA\n.ad l\n");
    let (mut nf, mut gap, mut block) = (false, false, Vec::new());
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            gap = true;
            continue;
        }
        let indented = line.starts_with(' ');
        if gap || !indented {
            flush(&mut out, &mut block);
        }
        if nf && !indented {
            out.push_str(".fi\n");
            nf = false;
        }
        if !indented && is_heading(line) {
            out.push_str(&format!(".SS {}\n", quote_arg(&escape(line))));
        } else if indented {
            if gap && nf {
                out.push('\n');
            } else if gap {
                out.push_str(".PP\n");
            }
            if !nf {
                out.push_str(".nf\n");
                nf = true;
            }
            block.push(line.to_string());
        } else {
            if gap {
                out.push_str(".PP\n");
            }
            out.push_str(&escape_line(line));
            out.push('\n');
        }
        gap = false;
    }
    flush(&mut out, &mut block);
    if nf {
        out.push_str(".fi\n");
    }
    out.push_str(".ad b\n");
    out
}

/// `PROMETHEUS (--format prom)`, `NARROW TERMINALS`: no lower-case letter before any `(`.
use crate::render::text::is_heading;

/// roff's escapes for text: backslash, minus, and the apostrophe as groff's \(aq.
fn escape(s: &str) -> String {
    s.replace('\\', r"\e").replace('-', r"\-").replace('\'', r"\(aq")
}

/// A text line that starts with `.` or `'` would be read as a request: `\&` guards it.
fn escape_line(s: &str) -> String {
    let e = escape(s);
    if e.starts_with('.') { format!(r"\&{e}") } else { e }
}

fn quote_arg(s: &str) -> String {
    format!("\"{}\"", s.replace('"', r"\(dq"))
}

/// Write a preformatted block's rows, laid out for [`PRE_WIDTH`], and empty it.
fn flush(out: &mut String, block: &mut Vec<String>) {
    for line in layout(block, PRE_WIDTH) {
        out.push_str(&escape_line(&line));
        out.push('\n');
    }
    block.clear();
}

/// The column after a line's last run of two or more spaces past its indent: where a table
/// row's description starts (`host.memlock_limited   warn  RLIMIT_MEMLOCK is...`).
fn description_column(line: &str) -> Option<usize> {
    let indent = line.len() - line.trim_start().len();
    let at = line[indent..].rfind("  ")? + indent;
    Some(at + line[at..].len() - line[at..].trim_start().len())
}

/// Where line `i`'s description starts, if it is a table row: after its last run of two
/// spaces, else where the next line's deeper indent meets a word of it
/// (`verdicts[] {kind: ...` over `             rank_lost|...`); none when too little room.
fn row_column(lines: &[String], i: usize, width: usize) -> Option<usize> {
    let line = &lines[i];
    let own = line.len() - line.trim_start().len();
    let under = lines
        .get(i + 1)
        .map(|l| l.len() - l.trim_start().len())
        .filter(|&n| n > own)
        .filter(|&n| {
            line.is_char_boundary(n) && line[..n].ends_with(' ') && line[n..].starts_with(|c: char| c != ' ')
        });
    description_column(line)
        .or(under)
        .filter(|c| c + 16 <= width && line.is_char_boundary(*c))
}

/// Preformatted lines fitted to `width` columns. A table row and the lines under its
/// description column (or one to the right: JSON's `{` alignment) are one row, whose
/// description is refilled under that column; any other line is broken at spaces.
pub(crate) fn layout(lines: &[String], width: usize) -> Vec<String> {
    let indent = |l: &str| l.len() - l.trim_start().len();
    let (mut out, mut i) = (Vec::new(), 0);
    while i < lines.len() {
        let line = &lines[i];
        let column = row_column(lines, i, width);
        i += 1;
        let Some(column) = column else {
            // Prose lines at one indent are one paragraph, refilled when one is too wide.
            let mut run = vec![line.as_str()];
            while is_prose(line)
                && i < lines.len()
                && indent(&lines[i]) == indent(line)
                && is_prose(&lines[i])
                && row_column(lines, i, width).is_none()
            {
                run.push(&lines[i]);
                i += 1;
            }
            if is_prose(line) && run.iter().any(|l| l.chars().count() > width) {
                let words = run.iter().flat_map(|l| l.split_whitespace());
                out.extend(fill(&line[..indent(line)], words, indent(line), width));
            } else {
                run.iter().for_each(|l| out.extend(break_preformatted(l, width)));
            }
            continue;
        };
        let mut words: Vec<&str> = line[column..].split_whitespace().collect();
        let mut joined = false;
        while i < lines.len() && (indent(&lines[i]) == column || indent(&lines[i]) == column + 1) {
            words.extend(lines[i].split_whitespace());
            joined = true;
            i += 1;
        }
        if !joined && line.chars().count() <= width {
            out.push(line.clone());
            continue;
        }
        out.extend(fill(&line[..column], words, column, width));
    }
    out
}

/// `words` after `head`, filled to `width` columns, each further line starting at `column`.
fn fill<'a>(
    head: &str,
    words: impl IntoIterator<Item = &'a str>,
    column: usize,
    width: usize,
) -> Vec<String> {
    let (mut out, mut cur) = (Vec::new(), head.to_string());
    for word in words {
        // A word wider than the room (`a|b|c` alternatives) breaks after a `|`, unspaced.
        for (n, part) in split_after_bars(word, width.saturating_sub(column))
            .into_iter()
            .enumerate()
        {
            let has_words = cur.chars().count() > column;
            let sep = usize::from(n == 0);
            if has_words && cur.chars().count() + sep + part.chars().count() > width {
                out.push(std::mem::take(&mut cur));
                cur = " ".repeat(column);
            } else if has_words && n == 0 {
                cur.push(' ');
            }
            cur.push_str(part);
        }
    }
    out.push(cur);
    out
}

/// A line of running text (not a command, JSON or a list of names): it may be refilled.
fn is_prose(line: &str) -> bool {
    let t = line.trim_start();
    !is_command(line)
        && t.starts_with(|c: char| c.is_alphanumeric() || c == '(')
        && !t.starts_with("fabprobe_")
}

/// A shell line broken across lines ends each piece but the last with ` \`, so it still
/// pastes as one command.
fn is_command(line: &str) -> bool {
    let first = line.split_whitespace().next().unwrap_or("");
    ["fabprobe", "srun", "sudo", "mpirun", "sbatch", "kubectl", "pdsh", "clush", "ssh", "for", "torchrun"]
        .contains(&first)
        || line.contains(" | ")
}

/// `line` cut at spaces into pieces of at most `width` columns, each continuation two
/// columns in from its indent (a command line's pieces end in ` \`).
pub(crate) fn break_preformatted(line: &str, width: usize) -> Vec<String> {
    if line.chars().count() <= width {
        return vec![line.to_string()];
    }
    let indent = line.len() - line.trim_start().len();
    if is_command(line) {
        // Between shell words only (never inside a quoted pattern), each piece ending ` \`.
        return crate::render::remedy::command_lines(line.trim_start(), indent, Some(width));
    }
    let column = indent + 2;
    let command = false;
    let room = if command { width - 2 } else { width };
    let (mut pieces, mut rest) = (Vec::new(), line.to_string());
    while rest.chars().count() > room {
        let lead = rest.len() - rest.trim_start().len();
        // The last space within the width that leaves text on this piece; else the first
        // space after a word too long for it.
        let spaces: Vec<(usize, usize)> = rest
            .char_indices()
            .enumerate()
            .filter(|(_, (b, ch))| *ch == ' ' && *b > lead)
            .map(|(n, (b, _))| (n, b))
            .collect();
        let cut = spaces
            .iter()
            .rev()
            .find(|(n, _)| *n <= room)
            .or(spaces.iter().find(|(n, _)| *n > room));
        let bar = rest
            .char_indices()
            .take(room)
            .filter(|(b, c)| *c == '|' && *b > lead)
            .last()
            .map(|(b, _)| b + 1);
        let Some(at) = cut.map(|c| c.1).filter(|&at| at <= room || bar.is_none()).or(bar) else {
            break;
        };
        let (head, tail) = rest.split_at(at);
        if head.trim().is_empty() || tail.trim().is_empty() {
            break;
        }
        let end = if command { " \\" } else { "" };
        pieces.push(format!("{}{end}", head.trim_end()));
        rest = format!("{}{}", " ".repeat(column), tail.trim_start());
    }
    pieces.push(rest);
    pieces
}

/// `word` in pieces of at most `room` columns, each cut after a `|` (the whole word when it
/// fits or has no `|` to cut at).
fn split_after_bars(word: &str, room: usize) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut rest = word;
    while rest.chars().count() > room {
        let cut = rest
            .char_indices()
            .take(room)
            .filter(|(_, c)| *c == '|')
            .last()
            .map(|(b, _)| b + 1);
        let Some(at) = cut.filter(|&at| at < rest.len()) else {
            break;
        };
        parts.push(&rest[..at]);
        rest = &rest[at..];
    }
    parts.push(rest);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(s: &[&str]) -> Vec<String> {
        s.iter().map(|l| l.to_string()).collect()
    }

    #[test]
    fn a_wide_table_row_is_refilled_under_its_description_column() {
        let row = lines(&[
            "  host.memlock_limited   warn  RLIMIT_MEMLOCK is not unlimited, so the verbs memory registration of",
            "                               a large buffer fails",
            "  host.other             warn  short",
        ]);
        let out = layout(&row, 60);
        assert_eq!(
            out,
            [
                "  host.memlock_limited   warn  RLIMIT_MEMLOCK is not",
                "                               unlimited, so the verbs",
                "                               memory registration of a",
                "                               large buffer fails",
                "  host.other             warn  short",
            ]
        );
    }

    #[test]
    fn a_wide_command_line_continues_with_a_backslash() {
        let out = layout(
            &lines(&["  fabprobe --format prom check --policy dgx-h100 --output /var/lib/x.prom"]),
            40,
        );
        assert_eq!(
            out,
            [
                "  fabprobe --format prom check \\",
                "    --policy dgx-h100 --output \\",
                "    /var/lib/x.prom"
            ]
        );
    }

    #[test]
    fn alternatives_wider_than_the_room_break_after_a_bar() {
        let out = layout(
            &lines(&["  kind   one_thing|another_thing|a_third_thing|the_last_one"]),
            30,
        );
        assert!(out.iter().all(|l| l.chars().count() <= 30), "{out:?}");
        assert_eq!(
            out.concat().replace(' ', ""),
            "kindone_thing|another_thing|a_third_thing|the_last_one"
        );
    }

    #[test]
    fn headings_prose_and_tables_become_ss_filled_text_and_nf() {
        let roff = extra_section("Prose that man may fill.\n\nFINDINGS\n  a.b   warn  text\n");
        assert!(
            roff.contains(".SS \"FINDINGS\"\n.nf\n  a.b   warn  text\n.fi\n"),
            "{roff}"
        );
        assert!(roff.contains("\nProse that man may fill.\n"), "{roff}");
    }
}
