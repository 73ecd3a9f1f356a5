//! Long finding and evidence text wraps at the terminal's width (`COLUMNS` here) with a
//! hanging indent, in every renderer that prints findings; commands in `fix:` and `next:`
//! are never broken; a pipe without `COLUMNS` keeps whole lines.

use std::process::Command;

fn run(args: &[&str], columns: Option<&str>) -> String {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fabprobe"));
    c.args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("COLUMNS");
    if let Some(w) = columns {
        c.env("COLUMNS", w);
    }
    let o = c.output().unwrap();
    assert!(
        matches!(o.status.code(), Some(0 | 1)),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// The words of a line, backticked spans kept whole (as the wrapper sees them).
fn words(l: &str) -> usize {
    let mut n = 0;
    let (mut in_word, mut quoted) = (false, false);
    for c in l.chars() {
        if c == '`' {
            quoted = !quoted;
        }
        if c.is_whitespace() && !quoted {
            in_word = false;
        } else if !in_word {
            in_word = true;
            n += 1;
        }
    }
    n
}

/// The backticked commands of a text.
fn commands(t: &str) -> Vec<String> {
    t.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

const RUNS: &[&[&str]] = &[
    &[
        "--root",
        "fixtures/h100-sxm-8gpu-bad",
        "check",
        "--policy",
        "dgx-h100",
    ],
    &[
        "--root",
        "fixtures/roce-qos-mismatch",
        "check",
        "--policy",
        "roce-dcqcn",
    ],
];

/// At 80 and 60 columns every line of prose fits (a line over the width holds one word:
/// a command or a path that must paste whole), and every command the unwrapped report gives
/// is on one line in the wrapped one.
#[test]
fn findings_wrap_at_80_and_60_and_commands_stay_whole() {
    let mut wrapped_some = 0;
    for args in RUNS {
        let whole = run(args, None);
        for width in [80usize, 60] {
            let narrow = run(args, Some(&width.to_string()));
            for l in narrow.lines() {
                // nvidia-smi's matrix stays byte-identical off a terminal: not prose.
                if l.contains('\t')
                    || l.starts_with("  SYS  =")
                    || l.starts_with("  NODE =")
                    || l.starts_with("  PHB  =")
                    || l.starts_with("  PXB  =")
                    || l.starts_with("  PIX  =")
                {
                    continue;
                }
                // check's verdict line stays whole, for the scripts that read it, and so does
                // a remedy that is one bare command (the line as the unwrapped report has it).
                let bare_fix =
                    l.trim_start().starts_with("fix: ") && !l.contains('`') && whole.lines().any(|w| w == l);
                if l.starts_with("fabprobe check: ") || bare_fix {
                    continue;
                }
                // Over the width only for one unbreakable word, alone or after its label.
                let label_and_word = words(l) == 2 && l.split_whitespace().next().unwrap().ends_with(':');
                // A command piece too long for the line: one shell word and its ` \`.
                let continued = l.trim_end().ends_with(" \\") && words(l.trim_end().trim_end_matches(" \\")) == 1;
                if continued {
                    continue;
                }
                assert!(
                    l.chars().count() <= width || words(l) == 1 || label_and_word,
                    "{args:?} at {width}: {} columns: {l:?}\n{narrow}",
                    l.chars().count()
                );
            }
            for cmd in commands(&whole) {
                assert!(
                    narrow.lines().any(|l| l.contains(&format!("`{cmd}`"))),
                    "{args:?} at {width}: `{cmd}` broken:\n{narrow}"
                );
            }
            if narrow.lines().count() > whole.lines().count() {
                wrapped_some += 1;
            }
        }
        // Without a width (a pipe): nothing wrapped, lines as long as they are.
        assert!(
            whole.lines().any(|l| l.chars().count() > 80),
            "{args:?}:\n{whole}"
        );
    }
    assert!(wrapped_some >= RUNS.len(), "{wrapped_some}");
}

/// The whole `check` report at 80 and 60 columns, as an on-call reader sees it.
#[test]
fn check_report_at_80_and_60_columns() {
    for width in ["80", "60"] {
        let out = run(
            &[
                "--root",
                "fixtures/h100-sxm-8gpu-bad",
                "check",
                "--policy",
                "dgx-h100",
            ],
            Some(width),
        );
        insta::assert_snapshot!(format!("check_h100_sxm_8gpu_bad_dgx_h100_columns_{width}"), out);
    }
}
