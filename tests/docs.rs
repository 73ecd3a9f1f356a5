//! `man/` (pages and completions) must equal what the clap definition generates now.
//! Regenerate with: cargo run -- gen-docs man

mod common;

use std::path::Path;
use std::process::Command;

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((
                    p.strip_prefix(dir).unwrap().display().to_string(),
                    std::fs::read(&p).unwrap(),
                ));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn man_pages_and_completions_are_current() {
    let tmp = tempfile::tempdir().unwrap();
    let st = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .arg("gen-docs")
        .arg(tmp.path())
        .status()
        .unwrap();
    assert!(st.success());
    let fresh = files(tmp.path());
    let committed = files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("man"));
    let names = |v: &[(String, Vec<u8>)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(
        names(&committed),
        names(&fresh),
        "man/ has other files than generated; run: cargo run -- gen-docs man"
    );
    for ((n, a), (_, b)) in committed.iter().zip(&fresh) {
        assert!(a == b, "man/{n} is stale; run: cargo run -- gen-docs man");
    }
}

/// The README's test command is the one `.ci/run` runs.
#[test]
fn readme_and_ci_run_the_same_test_command() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    let cmds: Vec<&str> = ci
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("cargo test"))
        .collect();
    assert_eq!(cmds.len(), 1, "{cmds:?}");
    // `cargo test ... | tee "$log"`: the command is what precedes the pipe.
    let cmd = cmds[0]
        .split(" 2>&1")
        .next()
        .unwrap()
        .split(" |")
        .next()
        .unwrap()
        .trim();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(
        readme.contains(&format!("The test command itself is `{cmd}`")),
        "README does not give .ci/run's command `{cmd}`"
    );
    assert!(ci.contains("export FABPROBE_LAB=required"));
}

fn pages() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("man");
    let mut v: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "1"))
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&p).unwrap()))
        .collect();
    v.sort();
    v
}

/// `man -l` renders every page without a groff warning (`-ww` turns on every warning class).
#[test]
fn man_pages_render_without_groff_warnings() {
    if !common::lab_ready("man_pages_render_without_groff_warnings", &[common::Need::Program("groff", "groff")]) {
        return;
    }
    for (name, _) in pages() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("man").join(&name);
        let out = Command::new("groff").args(["-ww", "-z", "-man", "-t"]).arg(&path).output().unwrap();
        assert!(out.status.success(), "{name}: groff failed");
        assert!(out.stderr.is_empty(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// What a reader at an 80-column terminal gets from `man`: every page renders without a
/// warning from `man --warnings` (groff's "cannot adjust line" among them), no rendered
/// line is wider than 80 columns, and the EXTRA section's tables are preformatted (`.nf`),
/// so man keeps their columns instead of refilling them into one paragraph.
#[test]
fn man_pages_fit_80_columns_without_man_warnings() {
    if !Command::new("man")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        common::lab_unavailable(
            "man_pages_fit_80_columns_without_man_warnings",
            "man (man-db) is not installed",
        );
        return;
    }
    let mut preformatted = 0;
    for (name, text) in pages() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("man").join(&name);
        let out = Command::new("man")
            .args(["--warnings", "-l"])
            .arg(&path)
            .env("MANWIDTH", "80")
            .env_remove("MAN_KEEP_FORMATTING")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{name}: man failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.stderr.is_empty(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let page = String::from_utf8_lossy(&out.stdout);
        assert!(
            page.lines().count() > 20,
            "{name}: man rendered {} lines",
            page.lines().count()
        );
        let wide: Vec<&str> = page.lines().filter(|l| l.chars().count() > 80).collect();
        assert!(
            wide.is_empty(),
            "{name}: {} lines over 80 columns:\n{}",
            wide.len(),
            wide.join("\n")
        );
        if let Some(extra) = text.split(".SH EXTRA\n").nth(1) {
            let extra = extra.split("\n.SH ").next().unwrap();
            let indented = extra.lines().any(|l| l.starts_with(' '));
            assert!(
                !indented || extra.contains("\n.nf\n"),
                "{name}: indented EXTRA lines outside .nf"
            );
            preformatted += usize::from(extra.contains("\n.nf\n"));
        }
    }
    assert!(
        preformatted >= 10,
        "only {preformatted} pages have preformatted EXTRA blocks"
    );
}

/// Every page has one EXAMPLES, one EXIT STATUS and one SYNOPSIS that names option values
/// (two EXIT STATUS sections on one page can disagree).
#[test]
fn man_pages_have_examples_exit_status_and_real_synopsis() {
    let pages = pages();
    assert!(pages.len() >= 12, "{}", pages.len());
    for (name, text) in &pages {
        for section in [".SH EXAMPLES", ".SH \"EXIT STATUS\"", ".SH SYNOPSIS"] {
            let n = text.lines().filter(|l| *l == section).count();
            assert_eq!(n, 1, "{name} has {n} `{section}` sections, not one");
        }
        let examples = example_lines(text);
        assert!(!examples.is_empty(), "{name}: EXAMPLES is empty");
    }
    let page = |n: &str| &pages.iter().find(|(p, _)| p == n).unwrap().1;
    let ring = page("fabprobe-ring.1");
    assert!(ring.contains(r"[\-b|\-\-minbytes SIZE]"), "synopsis without values");
    // --root is a probe's option; the ring (live only) does not offer it.
    assert!(page("fabprobe-links.1").contains(r"[\-\-root SNAPSHOT]"), "synopsis without values");
    assert!(!ring.contains(r"\-\-root SNAPSHOT"), "ring offers --root");
}

/// The bold command lines of a page's EXAMPLES, with roff's escapes undone.
fn example_lines(page: &str) -> Vec<String> {
    let Some(start) = page.find(".SH EXAMPLES") else { return vec![] };
    let body = &page[start + 12..];
    let body = &body[..body.find("\n.SH").unwrap_or(body.len())];
    body.lines()
        .filter_map(|l| l.strip_prefix(r"\fB"))
        .map(|l| l.trim_end_matches(r"\fR").replace(r"\-", "-").replace(r"\(aq", "'").replace(r"\\", "\\"))
        .collect()
}

/// The commands of a page's EXAMPLES as `man` shows them at 80 columns: the lines under
/// each description (indented deeper), a piece ending ` \` joined with the next. Two
/// examples never share a line, so each is one command here.
fn rendered_examples(name: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("man").join(name);
    let out = Command::new("man")
        .arg("-l")
        .arg(&path)
        .env("MANWIDTH", "80")
        .env_remove("MAN_KEEP_FORMATTING")
        .output()
        .unwrap();
    let page = String::from_utf8_lossy(&out.stdout).into_owned();
    let body: Vec<&str> = page
        .lines()
        .skip_while(|l| *l != "EXAMPLES")
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with(' '))
        .collect();
    let mut cmds = Vec::new();
    let mut cur = String::new();
    for l in body {
        // Descriptions sit at column 7, commands at 14 (and their continuations deeper).
        if !l.starts_with(&" ".repeat(14)) {
            continue;
        }
        let piece = l.trim();
        match piece.strip_suffix(" \\") {
            Some(head) => {
                cur.push_str(head);
                cur.push(' ');
            }
            None => {
                cur.push_str(piece);
                cmds.push(std::mem::take(&mut cur));
            }
        }
    }
    assert!(cur.is_empty(), "{name}: an example ends in a continuation");
    cmds
}

/// Every EXAMPLES command runs as `man` prints it: the roff's own lines and the rendered
/// page's give the same commands (none merged, none cut), and the fabprobe part parses with
/// the clap definition (the launcher before it and a pipe around it are other programs).
#[test]
fn every_example_parses_with_the_clap_definition() {
    let man = Command::new("man").arg("--version").output().is_ok_and(|o| o.status.success());
    let mut seen = 0;
    for (name, text) in pages() {
        let lines = if man {
            let rendered = rendered_examples(&name);
            let wanted: Vec<&str> = fabprobe::cli::docs::examples(
                name.trim_end_matches(".1").strip_prefix("fabprobe-").unwrap_or("fabprobe"),
            )
            .iter()
            .map(|(_, l)| *l)
            .collect();
            assert_eq!(rendered, wanted, "{name}: man shows other EXAMPLES lines");
            rendered
        } else {
            common::lab_unavailable("every_example_parses_with_the_clap_definition", "man (man-db) is not installed");
            example_lines(&text)
        };
        for line in lines {
            for part in line.split(" | ").map(|p| p.split(" > ").next().unwrap()) {
                let Some(at) = part.find("fabprobe ") else { continue };
                let words: Vec<String> = split_words(&part[at..]);
                fabprobe::cli::command()
                    .try_get_matches_from(&words)
                    .unwrap_or_else(|e| panic!("{name}: `{part}` does not parse: {e}"));
                seen += 1;
            }
        }
    }
    assert!(seen >= 30, "only {seen} example command lines");
}

/// Shell words with single quotes (all the examples use).
fn split_words(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut quoted) = (Vec::new(), String::new(), false);
    for c in s.chars() {
        match c {
            '\'' => quoted = !quoted,
            ' ' if !quoted => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The bash completion of `--policy` offers the shipped policy names and files, and that of
/// `--device` the RDMA devices in /sys/class/infiniband: here a private mount namespace
/// whose /sys/class holds a made-up infiniband directory (mlx5_0, mlx5_bond_0).
#[test]
fn bash_completes_policy_names_files_and_rdma_devices() {
    let test = "bash_completes_policy_names_files_and_rdma_devices";
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("man/completions/fabprobe.bash");
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("dgx-mine.toml"), "").unwrap();
    std::fs::create_dir_all(tmp.path().join("class/infiniband/mlx5_0")).unwrap();
    std::fs::create_dir_all(tmp.path().join("class/infiniband/mlx5_bond_0")).unwrap();
    let complete = |words: &str, cur: &str, prev: &str| {
        format!(
            "COMP_WORDS=({words} '{cur}'); COMP_CWORD=${{#COMP_WORDS[@]}}; COMP_CWORD=$((COMP_CWORD-1)); \
             _fabprobe fabprobe '{cur}' {prev}; echo \"${{COMPREPLY[*]}}\""
        )
    };
    let body = format!(
        "set -e; mount --bind {cls} /sys/class; source {script}; cd {dir}; {a}; {b}; {c}",
        cls = tmp.path().join("class").display(),
        script = script.display(),
        dir = tmp.path().display(),
        a = complete("fabprobe check --policy", "dgx", "--policy"),
        b = complete("fabprobe check --show-policy", "", "--show-policy"),
        c = complete("fabprobe gids --device", "mlx5_b", "--device"),
    );
    let out = match Command::new("unshare").args(["-m", "bash", "-c", &body]).output() {
        Ok(o) if o.status.success() => o,
        Ok(o) => {
            common::lab_unavailable(test, &format!("unshare -m failed: {}", String::from_utf8_lossy(&o.stderr)));
            return;
        }
        Err(e) => {
            common::lab_unavailable(test, &format!("no unshare: {e}"));
            return;
        }
    };
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect();
    assert_eq!(lines, ["dgx-h100 dgx-mine.toml", "default dgx-h100 hdr-a100 roce-dcqcn", "mlx5_bond_0"]);
}

/// `fabprobe completions SHELL` prints what `man/completions/` holds.
#[test]
fn completions_subcommand_prints_the_packaged_files() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("man/completions");
    for (shell, file) in [("bash", "fabprobe.bash"), ("zsh", "_fabprobe"), ("fish", "fabprobe.fish")] {
        let out = Command::new(env!("CARGO_BIN_EXE_fabprobe")).args(["completions", shell]).output().unwrap();
        assert!(out.status.success(), "{shell}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.stdout, std::fs::read(dir.join(file)).unwrap(), "{shell}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_fabprobe")).args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}
