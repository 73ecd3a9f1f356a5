//! A fix or next step laid out so it pastes: its prose, its commands and the lines it says to
//! add to a file, told apart once here so every renderer (table, HTML) shows the same parts.
//! A remedy is prose with backticked commands, or one bare command (`echo 1 > ...; ...`).

/// One piece of a remedy, in its order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    /// Words to read; wrap anywhere between words.
    Prose(String),
    /// A shell command that stands on its own line(s) and pastes as it is.
    Command(String),
    /// A short command named in passing (`(fabprobe links)`): kept in the sentence, whole.
    Inline(String),
    /// A line to put in a file the prose just named (`add to /etc/security/limits.conf:`).
    FileLine(String),
}

/// The parts of `text`. Backticked spans are commands, inline when in parentheses and a file
/// line after prose that ends with a path and a colon; a remedy that is one bare command
/// (every `;`-separated part starts with a tool) is that command, split into its commands.
pub fn parts(text: &str) -> Vec<Part> {
    if bare_command(text) {
        return commands(text).into_iter().map(Part::Command).collect();
    }
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('`') {
        let Some(len) = rest[open + 1..].find('`') else {
            break;
        };
        let (before, code) = (&rest[..open], &rest[open + 1..open + 1 + len]);
        let after = &rest[open + 2 + len..];
        // A one-word command (`dmesg`, `update-grub`) reads in its sentence, whole.
        let inline = (before.ends_with('(') && after.starts_with(')')) || !code.contains(' ');
        let file = file_label(before);
        push_prose(&mut out, before);
        out.push(if inline {
            Part::Inline(code.to_string())
        } else if file {
            Part::FileLine(code.to_string())
        } else {
            Part::Command(code.to_string())
        });
        rest = after;
    }
    push_prose(&mut out, rest);
    out
}

fn push_prose(out: &mut Vec<Part>, s: &str) {
    // A comma or colon left alone between two commands reads as nothing.
    // Trimmed at the end only: a leading space says the words after an inline command
    // are not glued to it (`dmesg` then ` for`, but `links` then `),`).
    let t = s.trim();
    if !t.is_empty() && t != "," && t != ":" {
        out.push(Part::Prose(s.trim_end().to_string()));
    }
}

/// Whether prose ends by naming a file to add a line to: `... /etc/security/limits.conf:`.
fn file_label(before: &str) -> bool {
    before
        .trim_end()
        .strip_suffix(':')
        .and_then(|b| b.split_whitespace().last())
        .is_some_and(|w| w.starts_with('/'))
}

/// Whether a remedy is one bare command rather than prose with backticked commands: every
/// command of it (a loop is one) starts with a tool or is a whole `for`/`while`/`until`
/// loop, and no `, ` (a list in prose: "fabprobe gdr (ACS, IOMMU); fabprobe topo" reads).
pub(crate) fn bare_command(text: &str) -> bool {
    let tool = |c: &str| {
        let w: Vec<&str> = shell_words(c);
        match w.first().copied().unwrap_or("") {
            "for" | "while" | "until" => w.contains(&"do") && w.last().is_some_and(|x| *x == "done"),
            first => super::text::COMMAND_WORDS.contains(&first),
        }
    };
    !text.contains('`')
        && !text.contains('\n')
        && !text.contains(", ")
        && commands(text).iter().all(|c| c.trim().is_empty() || tool(c))
}

/// The commands of a bare remedy: split at `;` between commands, never inside quotes or a
/// `for`/`while`/`if` body (a loop is one command).
pub(crate) fn commands(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur: Vec<&str> = Vec::new();
    let mut depth = 0i32;
    for w in shell_words(text) {
        let bare = w.trim_end_matches(';');
        match bare {
            "for" | "while" | "until" | "if" | "case" if cur.is_empty() || depth > 0 => depth += 1,
            "done" | "fi" | "esac" => depth -= 1,
            _ => {}
        }
        cur.push(w);
        if w.ends_with(';') && depth <= 0 {
            let joined = cur.join(" ");
            out.push(joined.trim_end_matches(';').to_string());
            cur.clear();
            depth = 0;
        }
    }
    if !cur.is_empty() {
        out.push(cur.join(" "));
    }
    out
}

/// The words of a shell command: split at whitespace outside quotes and `$(...)`, so a
/// break between two of them never changes what the shell reads.
pub fn shell_words(cmd: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quote, mut paren) = (None::<usize>, None::<char>, 0i32);
    let mut prev = ' ';
    for (i, c) in cmd.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q && prev != '\\' => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') if prev != '\\' => quote = Some(c),
            (None, '(') if prev == '$' => paren += 1,
            (None, ')') if paren > 0 => paren -= 1,
            _ => {}
        }
        if c.is_whitespace() && quote.is_none() && paren == 0 {
            if let Some(s) = start.take() {
                out.push(&cmd[s..i]);
            }
        } else if start.is_none() {
            start = Some(i);
        }
        prev = c;
    }
    if let Some(s) = start {
        out.push(&cmd[s..]);
    }
    out
}

/// A command within `width` columns from column `indent`: whole when it fits, else broken
/// only between shell words with ` \` and continued 2 columns deeper. A word wider than a
/// line stands alone on its line, past the width, never split.
pub fn command_lines(cmd: &str, indent: usize, width: Option<usize>) -> Vec<String> {
    let pad = " ".repeat(indent);
    let fits = |w: usize| width.is_none_or(|max| w <= max);
    if fits(indent + cmd.chars().count()) {
        return vec![format!("{pad}{cmd}")];
    }
    let deeper = " ".repeat(indent + 2);
    let mut lines = Vec::new();
    let mut line = pad.clone();
    let mut empty = true;
    for w in shell_words(cmd) {
        // Room for ` \` at the end of every line but the last.
        if !empty && !fits(line.chars().count() + 1 + w.chars().count() + 2) {
            lines.push(format!("{line} \\"));
            line = deeper.clone();
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(w);
        empty = false;
    }
    lines.push(line);
    lines
}

/// `lead` then the remedy `text` laid out within `width`: prose wrapped under `indent`,
/// each command and file line on its own lines 2 columns deeper (a remedy that starts with
/// a command keeps it beside `lead`), inline commands whole inside the sentence.
pub(crate) fn lay_out(lead: &str, text: &str, indent: usize, width: Option<usize>) -> String {
    let mut out = String::new();
    // The text of the line being built (after `lead` or the indent), words of prose.
    let mut prose: Vec<String> = Vec::new();
    let mut first = true;
    let flush = |out: &mut String, prose: &mut Vec<String>, first: &mut bool| {
        if prose.is_empty() {
            return;
        }
        let head = if *first {
            lead.to_string()
        } else {
            " ".repeat(indent)
        };
        out.push_str(&wrap_words(&head, prose, indent, width));
        prose.clear();
        *first = false;
    };
    let parts = parts(text);
    // A remedy of commands only: each under the first, a list to paste line by line.
    let bare = parts.iter().all(|p| matches!(p, Part::Command(_)));
    // After an inline command the next word (its `)`) is glued to it.
    let mut glue = false;
    for part in parts {
        match part {
            Part::Prose(p) => {
                let stick = glue && !p.starts_with(char::is_whitespace);
                // A comma or semicolon that followed a command would start a line alone.
                let p = if prose.is_empty() {
                    p.trim_start_matches([',', ';', ' '])
                } else {
                    &p
                };
                for (n, w) in p.split_whitespace().enumerate() {
                    match prose.last_mut() {
                        Some(last) if n == 0 && stick => last.push_str(w),
                        _ => prose.push(w.to_string()),
                    }
                }
                glue = false;
            }
            Part::Inline(c) => {
                // Glued to the bracket before it, so the sentence keeps its shape.
                match prose.last_mut() {
                    Some(last) if last.ends_with('(') => last.push_str(&c),
                    _ => prose.push(c),
                }
                glue = true;
            }
            Part::Command(c) | Part::FileLine(c) => {
                let at_lead = first && prose.is_empty();
                flush(&mut out, &mut prose, &mut first);
                let col = match (at_lead, bare) {
                    (true, _) => lead.chars().count(),
                    (false, true) => indent,
                    (false, false) => indent + 2,
                };
                let mut lines = command_lines(&c, col, width);
                if at_lead {
                    lines[0] = format!("{lead}{}", lines[0].trim_start());
                }
                for l in lines {
                    out.push_str(&l);
                    out.push('\n');
                }
                first = false;
            }
        }
    }
    flush(&mut out, &mut prose, &mut first);
    out
}

/// Words after `head`, wrapped at `width` under `indent`; an inline command (one word here,
/// spaces and all) is never broken.
fn wrap_words(head: &str, words: &[String], indent: usize, width: Option<usize>) -> String {
    let pad = " ".repeat(indent);
    let (mut out, mut line) = (String::new(), head.to_string());
    super::text::fill(&mut out, &mut line, &pad, words.iter().map(String::as_str), width);
    out.push_str(line.trim_end());
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_tell_commands_inline_references_and_file_lines_apart() {
        let t = "find it: `ethtool -S x | grep -e pause`, PCIe errors (`fabprobe links`); add to /etc/security/limits.conf: `* - memlock unlimited`";
        assert_eq!(
            parts(t),
            vec![
                Part::Prose("find it:".into()),
                Part::Command("ethtool -S x | grep -e pause".into()),
                Part::Prose(", PCIe errors (".into()),
                Part::Inline("fabprobe links".into()),
                Part::Prose("); add to /etc/security/limits.conf:".into()),
                Part::FileLine("* - memlock unlimited".into()),
            ]
        );
        assert_eq!(
            parts("echo 1 > /a/3; echo 1 > /b/3"),
            vec![
                Part::Command("echo 1 > /a/3".into()),
                Part::Command("echo 1 > /b/3".into())
            ]
        );
        // A loop is one command.
        let l = "for p in 3 4; do echo 1 > /a/$p; echo 1 > /b/$p; done";
        assert_eq!(parts(l), vec![Part::Command(l.into())]);
    }

    #[test]
    fn shell_words_keep_quotes_and_substitutions() {
        assert_eq!(
            shell_words("for d in $(lspci -Dd ::0604 | cut -d' ' -f1); do x \"a b\"; done"),
            vec![
                "for",
                "d",
                "in",
                "$(lspci -Dd ::0604 | cut -d' ' -f1);",
                "do",
                "x",
                "\"a b\";",
                "done"
            ]
        );
    }

    #[test]
    fn a_long_command_breaks_between_words_with_a_continuation() {
        let cmd = "dcb pfc set dev ens1f0np0 prio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off";
        let lines = command_lines(cmd, 14, Some(60));
        assert!(lines.len() > 1, "{lines:?}");
        for l in &lines[..lines.len() - 1] {
            assert!(l.ends_with(" \\") && l.chars().count() <= 60, "{l:?}");
        }
        let joined: Vec<&str> = lines
            .iter()
            .flat_map(|l| l.split_whitespace())
            .filter(|w| *w != "\\")
            .collect();
        assert_eq!(joined, cmd.split_whitespace().collect::<Vec<_>>());
        assert_eq!(command_lines(cmd, 14, None), vec![format!("{:14}{cmd}", "")]);
    }

    #[test]
    fn lay_out_puts_each_command_on_its_own_line() {
        let t = "find what stops the receiver draining: `ethtool -S ens1f0np0 | grep -e pause -e discard -e out_of_buffer`, PCIe errors (`fabprobe links`), a hung process or host";
        let out = lay_out("       fix: ", t, 12, Some(80));
        assert_eq!(
            out,
            "       fix: find what stops the receiver draining:\n              ethtool -S ens1f0np0 | grep -e pause -e discard -e out_of_buffer\n            PCIe errors (fabprobe links), a hung process or host\n"
        );
        assert!(!out.contains('`'));
        let bare = "echo 1 > /sys/class/net/ens1f0np0/ecn/roce_rp/enable/3; echo 1 > /sys/class/net/ens1f0np0/ecn/roce_np/enable/3";
        assert_eq!(
            lay_out("  fix: ", bare, 7, Some(80)),
            "  fix: echo 1 > /sys/class/net/ens1f0np0/ecn/roce_rp/enable/3\n       echo 1 > /sys/class/net/ens1f0np0/ecn/roce_np/enable/3\n"
        );
    }
}
