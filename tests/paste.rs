//! Fix lines that paste: every fix of every fixture, for `check` under every shipped policy
//! and for every probe, rendered at 80 columns as a person sees it. Each command in a fix
//! parses with `bash -n`, is printed whole (wrapped only between shell words, each piece but
//! the last ending ` \`), and no fix line shows a backtick; a line to add to a file is said
//! to be one (`add to /etc/...:`), not shown as a command.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use fabprobe::render::remedy::{Part, parts, shell_words};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const BIN: &str = env!("CARGO_BIN_EXE_fabprobe");

fn names(dir: &str, ext: Option<&str>) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(Path::new(ROOT).join(dir))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| match ext {
            Some(x) => e.path().extension().is_some_and(|e| e == x),
            None => e.path().join("sys").is_dir() || e.path().join("fabprobe").is_dir(),
        })
        .map(|e| e.path().display().to_string())
        .collect();
    v.sort();
    v
}

fn fabprobe(args: &[&str], columns: Option<usize>) -> String {
    let mut c = Command::new(BIN);
    c.args(args).current_dir(ROOT).env("NO_COLOR", "1");
    match columns {
        Some(w) => c.env("COLUMNS", w.to_string()),
        None => c.env_remove("COLUMNS"),
    };
    let o = c.output().unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Each (what ran, its findings' fixes, its table at 80 columns).
fn runs() -> Vec<(String, Vec<String>, String)> {
    let mut out = Vec::new();
    let policies = names("checks", Some("toml"));
    for fx in names("fixtures", None) {
        let mut cmds: Vec<Vec<String>> = policies
            .iter()
            .map(|p| vec!["check".to_string(), "--policy".to_string(), p.clone()])
            .collect();
        cmds.extend(common::probes().iter().map(|p| vec![p.to_string()]));
        for cmd in cmds {
            let mut args = vec!["--root", fx.as_str()];
            args.extend(cmd.iter().map(String::as_str));
            let json = fabprobe(&[&args[..], &["--format", "json"]].concat(), None);
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&json) else {
                continue;
            };
            let fixes: Vec<String> = v["findings"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f["fix"].as_str().map(str::to_string))
                .collect();
            let table = fabprobe(&args, Some(80));
            out.push((args.join(" "), fixes, table));
        }
    }
    out
}

/// `bash -n` on each command, all at once (one bash per command would take minutes): each
/// in a function of its own so one unclosed quote cannot hide behind the next.
fn bash_parses(cmds: &BTreeSet<String>) {
    for c in cmds {
        let o = Command::new("bash").args(["-n", "-c", c]).output().unwrap();
        assert!(
            o.status.success(),
            "`{c}` does not parse: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// The text with each ` \` line continuation joined back into one line, as bash reads it.
fn joined(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(l) = lines.next() {
        match l.strip_suffix(" \\") {
            Some(head) if lines.peek().is_some() => {
                out.push_str(head);
                out.push(' ');
                let next = lines.next().unwrap().trim_start();
                // A continuation may itself continue.
                let mut cur = next.to_string();
                while let Some(h) = cur.strip_suffix(" \\").map(str::to_string) {
                    out.push_str(&h);
                    out.push(' ');
                    cur = lines
                        .next()
                        .map(|n| n.trim_start().to_string())
                        .unwrap_or_default();
                }
                out.push_str(&cur);
                out.push('\n');
            }
            _ => {
                out.push_str(l);
                out.push('\n');
            }
        }
    }
    out
}

#[test]
fn every_fix_pastes_at_80_columns() {
    let runs = runs();
    assert!(runs.len() > 100, "only {} runs", runs.len());
    let mut commands = BTreeSet::new();
    let (mut fixes_seen, mut file_lines) = (0, 0);
    for (what, fixes, table) in &runs {
        let whole = joined(table);
        for fix in fixes {
            fixes_seen += 1;
            for p in parts(fix) {
                match p {
                    Part::Command(c) => {
                        // Printed whole, on a line of its own (joined back from its pieces).
                        assert!(
                            whole.lines().any(|l| l.trim_start() == c
                                || l.trim_start().strip_prefix("fix: ") == Some(c.as_str())),
                            "{what}: `{c}` is not on a line of its own:\n{table}"
                        );
                        commands.insert(c);
                    }
                    Part::FileLine(c) => {
                        file_lines += 1;
                        assert!(whole.lines().any(|l| l.trim_start() == c), "{what}: {c}");
                    }
                    Part::Inline(c) => assert!(whole.contains(&c), "{what}: {c}"),
                    Part::Prose(_) => {}
                }
            }
        }
        // Fix lines: no backtick, and no line past 80 columns but one holding one word.
        let mut in_fix = false;
        for l in table.lines() {
            let t = l.trim_start();
            if t.starts_with("fix: ") || t.starts_with("next: ") {
                in_fix = true;
            } else if !l.starts_with("     ") {
                in_fix = false;
            }
            if in_fix {
                assert!(!l.contains('`'), "{what}: a backtick in {l:?}");
                let body = t.strip_prefix("fix: ").unwrap_or(t).trim_end_matches(" \\");
                assert!(
                    l.chars().count() <= 80 || shell_words(body).len() == 1,
                    "{what}: {} columns: {l:?}",
                    l.chars().count()
                );
            }
        }
    }
    assert!(fixes_seen > 200, "only {fixes_seen} fixes");
    assert!(commands.len() > 20, "only {} distinct commands", commands.len());
    assert!(file_lines > 0, "no fix adds a line to a file");
    bash_parses(&commands);
}

/// The layout never splits a shell word: the pieces of a command wrapped at every width
/// from 30 to 100 are its words, in order, and each piece but the last ends with ` \`.
#[test]
fn commands_wrap_only_between_words() {
    let cmds = [
        "for b in $(lspci -Dd ::0604 | cut -d' ' -f1); do setpci -s $b ECAP_ACS+0x6.w=0:c; done",
        "dcb pfc set dev ens1f0np0 prio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off",
        "echo 1 > /sys/class/net/ens1f0np0/ecn/roce_rp/enable/3",
        "ethtool -S ens1f0np0 | grep -e pause -e discard -e out_of_buffer",
        "srun -N128 -l fabprobe check --format json | fabprobe sweep --expect 'gpu[001-128]' --drain",
    ];
    for c in cmds {
        for width in 30..=100 {
            let lines = fabprobe::render::remedy::command_lines(c, 6, Some(width));
            let n = lines.len();
            let mut words = Vec::new();
            for (i, l) in lines.iter().enumerate() {
                let body = if i + 1 < n {
                    l.strip_suffix(" \\").unwrap_or_else(|| panic!("{width}: {l:?}"))
                } else {
                    l
                };
                let ws = shell_words(body);
                assert!(l.chars().count() <= width || ws.len() == 1, "{width}: {l:?}");
                words.extend(ws);
            }
            assert_eq!(words, shell_words(c), "{width}: {lines:?}");
            let o = Command::new("bash")
                .args(["-n", "-c", &lines.join("\n")])
                .output()
                .unwrap();
            assert!(o.status.success(), "{width}: {lines:?}");
        }
    }
}
