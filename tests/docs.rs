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
