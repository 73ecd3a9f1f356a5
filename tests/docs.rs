//! `man/` (pages and completions) must equal what the clap definition generates now.
//! Regenerate with: cargo run -- gen-docs man

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
