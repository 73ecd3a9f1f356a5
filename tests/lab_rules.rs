//! The rules that keep a green CI run honest about the labs, checked end to end:
//! * a lab that cannot run fails its test under `FABPROBE_LAB=required` and only prints a
//!   loud SKIPPED line without it (this binary runs its own `Lab::new` as an unprivileged
//!   user, as a child process, both ways);
//! * `.ci/run` sets `FABPROBE_LAB=required`;
//! * no test skips on its own terms: every early `return` of a test follows a call of
//!   `tests/common`'s `lab_ready`/`lab_unavailable` (directly or through a lab's constructor
//!   that calls them), no test prints its own "skipped" line, and no test reads
//!   `FABPROBE_LAB` to decide for itself;
//! * no lab test waits with a fixed sleep where it can poll (polling intervals are short;
//!   a sleep of half a second or more is a guess at readiness).

mod lab;

use std::path::Path;
use std::process::Command;

const CHILD: &str = "FABPROBE_LAB_RULES_CHILD";

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Run only as the child of `a_missing_lab_fails_under_required_and_is_loud_without` (hence
/// ignored): asks for the network lab, as a user who cannot have it.
#[test]
#[ignore = "run by a_missing_lab_fails_under_required_and_is_loud_without as its child"]
fn child_asks_for_the_lab() {
    assert!(std::env::var_os(CHILD).is_some(), "run by its parent test only");
    assert!(!is_root(), "the child must run unprivileged");
    let got = lab::Lab::new("lab_rules_child", lab::LabOpts { nodes: 2, rate: None });
    assert!(got.is_none(), "an unprivileged user got a lab");
    println!("CHILD RETURNED");
}

#[test]
fn a_missing_lab_fails_under_required_and_is_loud_without() {
    if !is_root() {
        lab::lab_unavailable(
            "a_missing_lab_fails_under_required",
            "needs root to run itself as an unprivileged user",
        );
        return;
    }
    let me = std::env::current_exe().unwrap();
    let run = |lab_env: Option<&str>| {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&me)
            .args([
                "--exact",
                "child_asks_for_the_lab",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .env_remove(lab::LAB_ENV);
        if let Some(v) = lab_env {
            c.env(lab::LAB_ENV, v);
        }
        let o = c.output().expect("run setpriv (util-linux)");
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
        )
    };
    let (ok, out) = run(Some("required"));
    assert!(!ok, "under FABPROBE_LAB=required a missing lab passed:\n{out}");
    assert!(
        out.contains("lab test lab_rules_child cannot run: needs root")
            && out.contains("FABPROBE_LAB=required, so this is a failure"),
        "{out}"
    );
    assert!(!out.contains("CHILD RETURNED"), "{out}");
    for unset in [None, Some(""), Some("yes")] {
        let (ok, out) = run(unset);
        assert!(ok, "FABPROBE_LAB={unset:?}: a missing lab failed:\n{out}");
        assert!(
            out.contains("SKIPPED lab test lab_rules_child: needs root") && out.contains("CHILD RETURNED"),
            "FABPROBE_LAB={unset:?}:\n{out}"
        );
    }
}

#[test]
fn ci_requires_the_labs() {
    let ci = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/run")).unwrap();
    assert!(
        ci.lines().any(|l| l.trim() == "export FABPROBE_LAB=required"),
        ".ci/run must export FABPROBE_LAB=required:\n{ci}"
    );
}

/// Every `.rs` file under tests/, with its path relative to the crate.
fn test_sources() -> Vec<(String, String)> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<(String, String)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, root, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(root).unwrap().display().to_string();
                out.push((rel, std::fs::read_to_string(&p).unwrap()));
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut v = Vec::new();
    walk(&root.join("tests"), root, &mut v);
    v.sort();
    assert!(
        v.iter().any(|(p, _)| p == "tests/lab/mod.rs"),
        "{:?}",
        v.iter().map(|x| &x.0).collect::<Vec<_>>()
    );
    v
}

/// Lines of code (not comments) of a source.
fn code_lines(src: &str) -> impl Iterator<Item = (usize, &str)> {
    src.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
        .map(|(i, l)| (i + 1, l))
}

#[test]
fn every_skip_goes_through_lab_unavailable() {
    let sources = test_sources();
    let doors = doors(&sources);
    let mut bad = Vec::new();
    for (path, src) in &sources {
        if path == "tests/common/mod.rs" {
            continue;
        }
        for (n, l) in code_lines(src) {
            let prints = ["loud(", "eprintln!", "println!", "eprint!", "print!", "writeln!"]
                .iter()
                .any(|m| l.contains(m));
            // This file names skips in its own checks.
            if l.to_lowercase().contains("skip") && prints && path != "tests/lab_rules.rs" {
                bad.push(format!("{path}:{n}: prints its own skip: {}", l.trim()));
            }
            // FABPROBE_LAB itself, not the run count FABPROBE_LAB_RUNS (how often, not whether).
            let reads_env =
                l.contains("env::var") && (l.contains("\"FABPROBE_LAB\"") || l.contains("LAB_ENV"));
            if path != "tests/lab_rules.rs" && (reads_env || l.contains("lab_required(")) {
                bad.push(format!(
                    "{path}:{n}: decides about FABPROBE_LAB itself: {}",
                    l.trim()
                ));
            }
        }
        for n in early_returns_bypassing(src, &doors) {
            bad.push(format!(
                "{path}:{n}: a test returns early without lab_ready/lab_unavailable"
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "skips that bypass tests/common::lab_ready/lab_unavailable (they would pass under FABPROBE_LAB=required):\n{}",
        bad.join("\n")
    );
}

/// `src` with comments, the insides of string and char literals and any non-ASCII character
/// blanked (newlines kept, so byte offsets and lines stay): braces and words in text are not
/// code.
fn strip(src: &str) -> Vec<u8> {
    let c: Vec<char> = src
        .chars()
        .map(|ch| if ch.is_ascii() { ch } else { ' ' })
        .collect();
    let mut out = Vec::with_capacity(c.len());
    let mut i = 0;
    while i < c.len() {
        let at = |k: usize| c.get(i + k).copied().unwrap_or('\0');
        let start = i;
        if at(0) == '/' && at(1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if at(0) == '/' && at(1) == '*' {
            i += 2;
            while i < c.len() && !(c[i - 1] == '*' && c[i] == '/') {
                i += 1;
            }
            i += 1;
        } else if let Some(end) = string_end(&c, i) {
            i = end;
        } else if at(0) == '\'' && (at(1) == '\\' || at(2) == '\'') {
            // A char literal ('x', '\n', '\'', '\u{1b}'); a lifetime has no closing tick.
            let mut j = i + 2 + usize::from(at(1) == '\\');
            while j < c.len() && c[j] != '\'' {
                j += 1;
            }
            i = j + 1;
        } else {
            out.push(c[i] as u8);
            i += 1;
            continue;
        }
        out.extend(
            c[start..i.min(c.len())]
                .iter()
                .map(|&ch| if ch == '\n' { b'\n' } else { b' ' }),
        );
    }
    out
}

/// The end of the string literal (`"..."`, `b"..."`, `r#"..."#`) starting at `i`, if one does.
fn string_end(c: &[char], i: usize) -> Option<usize> {
    let raw = c[i] == 'r' || (c[i] == 'b' && c.get(i + 1) == Some(&'r'));
    let mut j = i + usize::from(c[i] == 'b') + usize::from(raw);
    let mut hashes = 0;
    while raw && c.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    if c.get(j) != Some(&'"') || (i > 0 && j > i && (c[i - 1].is_alphanumeric() || c[i - 1] == '_')) {
        return None;
    }
    j += 1;
    loop {
        match c.get(j) {
            None => return Some(c.len()),
            Some('\\') if !raw => j += 2,
            Some('"') if (0..hashes).all(|h| c.get(j + 1 + h) == Some(&'#')) => return Some(j + 1 + hashes),
            _ => j += 1,
        }
    }
}

fn ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The position of the `}` that closes the `{` at `open`.
fn close_of(code: &[u8], open: usize) -> usize {
    let mut depth = 0;
    for (k, &ch) in code.iter().enumerate().skip(open) {
        match ch {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// The `{` that opens the innermost block around `at`.
fn open_of(code: &[u8], at: usize) -> Option<usize> {
    let mut depth = 0;
    for k in (0..at).rev() {
        match code[k] {
            b'}' => depth += 1,
            b'{' if depth == 0 => return Some(k),
            b'{' => depth -= 1,
            _ => {}
        }
    }
    None
}

/// The statement head before the block that opens at `open`: `if cond`, `let Some(x) =
/// f(..) else`, `impl Type`; a `} else` head takes in the block before it.
fn head_of(code: &[u8], open: usize) -> String {
    let mut depth = 0i32;
    let mut k = open;
    while k > 0 {
        match code[k - 1] {
            b')' | b']' => depth += 1,
            b'(' | b'[' | b'{' if depth == 0 => break,
            b'(' | b'[' | b'{' => depth -= 1,
            b';' if depth == 0 => break,
            b'}' if depth == 0 => {
                if !String::from_utf8_lossy(&code[k..open])
                    .trim_start()
                    .starts_with("else")
                {
                    break;
                }
                depth += 1;
            }
            b'}' => depth += 1,
            _ => {}
        }
        k -= 1;
    }
    String::from_utf8_lossy(&code[k..open]).into_owned()
}

/// Whether `text` calls one of `doors` (`name(` or `Type::name(`, after a non-identifier).
fn calls_a_door(text: &str, doors: &[String]) -> bool {
    doors.iter().any(|d| {
        let call = format!("{d}(");
        text.match_indices(&call)
            .any(|(i, _)| i == 0 || !ident(text.as_bytes()[i - 1]))
    })
}

/// A function of a test source: its name as called (`Type::name` inside `impl Type`), its
/// body's span in the stripped code, and whether it is a `#[test]`.
struct Func {
    name: String,
    body: std::ops::Range<usize>,
    is_test: bool,
}

fn functions(code: &[u8]) -> Vec<Func> {
    let text = String::from_utf8_lossy(code);
    let mut v = Vec::new();
    for (i, _) in text.match_indices("fn ") {
        let name: String = text[i + 3..].chars().take_while(|&c| ident(c as u8)).collect();
        if (i > 0 && ident(code[i - 1])) || name.is_empty() {
            continue;
        }
        let Some(open) = (i..code.len()).find(|&k| code[k] == b'{' || code[k] == b';') else {
            continue;
        };
        if code[open] == b';' {
            continue;
        }
        // The attributes since the item before.
        let attrs = text[..i].rsplit(['}', ';', '{']).next().unwrap_or("");
        let owner = open_of(code, i).and_then(|o| {
            let h = head_of(code, o);
            let ty = h
                .trim()
                .strip_prefix("impl")?
                .rsplit(" for ")
                .next()?
                .trim()
                .to_string();
            Some(ty.split('<').next().unwrap_or("").trim().to_string())
        });
        v.push(Func {
            name: owner.map_or(name.clone(), |t| format!("{t}::{name}")),
            body: open..close_of(code, open),
            is_test: attrs.contains("#[test]"),
        });
    }
    v
}

/// The functions a test may return after: `tests/common`'s two, and every non-test function
/// of the test sources that calls one of them (or such a function), by name.
fn doors(sources: &[(String, String)]) -> Vec<String> {
    let mut fns = Vec::new();
    for (_, src) in sources {
        let code = strip(src);
        for f in functions(&code).into_iter().filter(|f| !f.is_test) {
            fns.push((f.name, String::from_utf8_lossy(&code[f.body]).into_owned()));
        }
    }
    let mut doors = vec!["lab_ready".to_string(), "lab_unavailable".to_string()];
    loop {
        let new: Vec<String> = fns
            .iter()
            .filter(|(n, body)| !doors.contains(n) && calls_a_door(body, &doors))
            .map(|f| f.0.clone())
            .collect();
        if new.is_empty() {
            return doors;
        }
        doors.extend(new);
    }
}

/// The lines of the bare `return`s in `#[test]` functions of `src` that neither follow a
/// door's call in their block nor sit in a block whose head calls one.
fn early_returns_bypassing(src: &str, doors: &[String]) -> Vec<usize> {
    let code = strip(src);
    let text = String::from_utf8_lossy(&code);
    let tests: Vec<_> = functions(&code)
        .into_iter()
        .filter(|f| f.is_test)
        .map(|f| f.body)
        .collect();
    let mut bad = Vec::new();
    for (i, _) in text.match_indices("return") {
        let after = text[i + 6..].trim_start();
        let bare = after.starts_with(';') || after.starts_with('}');
        if (i > 0 && ident(code[i - 1])) || !bare || !tests.iter().any(|t| t.contains(&i)) {
            continue;
        }
        let Some(open) = open_of(&code, i) else { continue };
        let block = String::from_utf8_lossy(&code[open..i]);
        if !calls_a_door(&head_of(&code, open), doors) && !calls_a_door(&block, doors) {
            bad.push(text[..i].matches('\n').count() + 1);
        }
    }
    bad
}

#[test]
fn early_return_detection() {
    let src = r#"
        fn have(p: &str) -> bool { p == "x" }
        fn python() -> bool {
            if have("python3") { return true; }
            common::lab_unavailable("t", "no python3");
            false
        }
        impl Lab {
            fn new(t: &str) -> Option<Lab> {
                if !lab_ready(t, &[Need::Root("x")]) { return None; }
                Some(Lab)
            }
        }
        #[test]
        fn ad_hoc() {
            if !have("bash") {
                eprintln!("skipped: no { bash");
                return;
            }
        }
        #[test]
        #[ignore = "a { in an attribute"]
        fn through_the_helpers() {
            if !common::lab_ready("t", &[common::Need::Program("ip", "iproute2")]) {
                return;
            }
            if !python() { return; }
            let Some(lab) = Lab::new(
                "t",
            ) else {
                return;
            };
            if lab.is_none() {
                lab::lab_unavailable("t", "why");
                return;
            }
        }
        #[test]
        fn ad_hoc_else() {
            let Some(x) = Vec::new().pop() else { return };
        }
        fn not_a_test() {
            if true { return; }
        }
    "#;
    let doors = doors(&[("tests/x.rs".to_string(), src.to_string())]);
    assert_eq!(doors, ["lab_ready", "lab_unavailable", "python", "Lab::new"]);
    assert_eq!(early_returns_bypassing(src, &doors), [18, 40]);
    let stripped = strip(r##"a "b{" 'c' '\'' r#"{"# b"}" /* { */ é // {"##);
    assert_eq!(
        String::from_utf8(stripped).unwrap(),
        format!(
            "a {:4} {:3} {:4} {:6} {:4} {:7} {:1} {:4}",
            "", "", "", "", "", "", "", ""
        )
    );
}

/// The milliseconds of a `sleep(Duration::from_millis(N))` or `from_secs(N)` on this line.
fn sleep_ms(line: &str) -> Option<u64> {
    let i = line.find("sleep(Duration::from_")?;
    let rest = &line[i + "sleep(Duration::from_".len()..];
    let (unit, rest) = rest.split_once('(')?;
    let n: f64 = rest.split(')').next()?.trim().replace('_', "").parse().ok()?;
    Some(match unit {
        "millis" => n as u64,
        "secs" => (n * 1000.0) as u64,
        "secs_f64" => (n * 1000.0) as u64,
        _ => return None,
    })
}

#[test]
fn sleep_detection() {
    assert_eq!(
        sleep_ms("std::thread::sleep(Duration::from_millis(1500));"),
        Some(1500)
    );
    assert_eq!(sleep_ms("thread::sleep(Duration::from_secs(2))"), Some(2000));
    assert_eq!(sleep_ms("thread::sleep(Duration::from_millis(50));"), Some(50));
    assert_eq!(sleep_ms("let x = 1;"), None);
}

#[test]
fn lab_tests_poll_instead_of_sleeping() {
    let mut bad = Vec::new();
    for (path, src) in test_sources() {
        // This file only names sleeps, in its own checks.
        if !path.starts_with("tests/lab") || path == "tests/lab_rules.rs" {
            continue;
        }
        for (n, l) in code_lines(&src) {
            if sleep_ms(l).is_some_and(|ms| ms >= 500) {
                bad.push(format!("{path}:{n}: {}", l.trim()));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "fixed sleeps in lab tests (poll for what the test waits for: tests/lab/mod.rs has \
         wait_listening, wait_data_flowing, wait_read_from, wait_connected_to):\n{}",
        bad.join("\n")
    );
}

/// The lines where a test takes a port the kernel chose (`bind` to port 0) and lets the
/// listener go before the port is used: the listener is a temporary of the statement that
/// reads `.port()`, or the block returns the port and drops it. Another process of the run
/// can take that port first (CI: rank 0's "Address already in use"). Such tests take
/// `tests/common`'s `server_port()`, or keep the listener.
fn ports_let_go(src: &str) -> Vec<usize> {
    let code: String = src
        .lines()
        .map(|l| if l.trim_start().starts_with("//") { "" } else { l })
        .collect::<Vec<_>>()
        .join("\n");
    let kernel_chosen = |s: &str| s.contains("bind(") && (s.contains(":0\"") || s.contains(", 0))"));
    let mut bad = Vec::new();
    for (at, _) in code.match_indices(".port()") {
        let before = &code[..at];
        let stmt = &before[before.rfind([';', '{', '}']).map_or(0, |i| i + 1)..];
        let tail = code[at + ".port()".len()..].trim_start().starts_with('}');
        let body = &before[before.rfind("fn ").unwrap_or(0)..];
        if kernel_chosen(stmt) || (tail && kernel_chosen(body)) {
            bad.push(before.matches('\n').count() + 1);
        }
    }
    bad
}

#[test]
fn port_let_go_detection() {
    let temp = "fn t() {\n    let port = TcpListener::bind(\"127.0.0.1:0\")\n        .unwrap()\n        .local_addr()\n        .unwrap()\n        .port();\n}";
    assert_eq!(ports_let_go(temp), vec![6]);
    let v4 = "let p = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap().local_addr().unwrap().port();";
    assert_eq!(ports_let_go(v4), vec![1]);
    let tail = "fn free_port() -> u16 {\n    let l = TcpListener::bind(\"127.0.0.1:0\").unwrap();\n    l.local_addr().unwrap().port()\n}";
    assert_eq!(ports_let_go(tail), vec![3]);
    // The listener kept: the port stays taken until the test's own server uses it.
    let kept = "fn listen() {\n    let l = TcpListener::bind(\"127.0.0.1:0\").unwrap();\n    let port = l.local_addr().unwrap().port();\n    serve(l);\n}";
    assert!(ports_let_go(kept).is_empty());
}

#[test]
fn no_test_lets_a_kernel_chosen_port_go_before_another_process_binds_it() {
    let mut bad = Vec::new();
    for (path, src) in test_sources() {
        if path == "tests/lab_rules.rs" {
            continue;
        }
        bad.extend(ports_let_go(&src).into_iter().map(|n| format!("{path}:{n}")));
    }
    assert!(
        bad.is_empty(),
        "ports the kernel chose, let go before another process binds them (use \
         common::server_port(), below the ephemeral range):\n{}",
        bad.join("\n")
    );
}
