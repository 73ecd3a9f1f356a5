//! The exit-status and error contracts every command shares (fabprobe(1) EXIT STATUS).

mod common;

use std::io::Read;
use std::process::{Command, Stdio};

fn fabprobe(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn version_and_help_exit_0() {
    let (code, out, _) = fabprobe(&["--version"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("fabprobe "), "{out}");
    let (code, out, _) = fabprobe(&["--help"]);
    assert_eq!(code, 0);
    for cmd in ["topo", "gids", "links", "ring", "snapshot"] {
        assert!(out.contains(cmd), "--help lacks {cmd}");
    }
    assert!(!out.contains("gen-docs"), "hidden command shown");
}

#[test]
fn unreadable_snapshot_exits_2_naming_the_path() {
    for cmd in ["topo", "gids", "links"] {
        let (code, out, err) = fabprobe(&["--root", "/nonexistent/snap.tar.gz", cmd]);
        assert_eq!(code, 2, "{cmd}: {err}");
        assert!(out.is_empty(), "{cmd} printed results: {out}");
        assert!(err.contains("/nonexistent/snap.tar.gz"), "{cmd}: {err}");
        assert!(err.starts_with("fabprobe: error: "), "{cmd}: {err}");
        assert_eq!(
            err.lines().filter(|l| l.contains("error")).count(),
            1,
            "printed more than once: {err}"
        );
    }
    // Not a tarball: the error says so and names the file.
    let dir = tempfile::tempdir().unwrap();
    let bogus = dir.path().join("x.tar.gz");
    std::fs::write(&bogus, b"not gzip").unwrap();
    let (code, _, err) = fabprobe(&["--root", bogus.to_str().unwrap(), "topo"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("x.tar.gz") && err.contains("tar.gz snapshot"),
        "{err}"
    );
}

#[test]
fn bad_usage_exits_2() {
    assert_eq!(fabprobe(&["topo", "--no-such-flag"]).0, 2);
    assert_eq!(fabprobe(&["no-such-command"]).0, 2);
    let (code, _, err) = fabprobe(&["--format", "prom", "topo"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--format prom"), "{err}");
}

/// `fabprobe topo | head -1`: the reader goes away; that is not an error.
#[test]
fn closed_stdout_is_not_an_error() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .args(["--root", "fixtures/h100-penny", "--format", "json", "links"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 1];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap(); // then dropped: pipe closed
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "stderr: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// The ring's job token is a secret: a capture never writes it into `env.json`.
#[test]
fn snapshot_never_saves_the_job_token() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("snap");
    let run = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .args(["snapshot", "-o", out.to_str().unwrap()])
        .env("FABPROBE_TOKEN", "tok-3c1f9a")
        .env("NCCL_DEBUG", "INFO")
        .output()
        .unwrap();
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let env = std::fs::read_to_string(out.join("fabprobe/env.json")).unwrap();
    assert!(env.contains("NCCL_DEBUG"), "{env}");
    assert!(
        !env.contains("FABPROBE_TOKEN") && !env.contains("tok-3c1f9a"),
        "{env}"
    );
}

/// A gzip bomb given as --root is refused before it is unpacked: exit 2, the archive and
/// the entry named once.
#[test]
fn a_snapshot_bomb_is_refused_naming_archive_and_entry() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let bomb = dir.path().join("bomb.tar.gz");
    // One entry claiming 1 TiB of zeros; only the first MiB is there (the stream ends early).
    let mut h = tar::Header::new_gnu();
    h.set_path("sys/zeros").unwrap();
    h.set_size(1 << 40);
    h.set_mode(0o644);
    h.set_cksum();
    let mut gz =
        flate2::write::GzEncoder::new(std::fs::File::create(&bomb).unwrap(), flate2::Compression::fast());
    gz.write_all(h.as_bytes()).unwrap();
    gz.write_all(&vec![0u8; 1 << 20]).unwrap();
    gz.finish().unwrap();
    let (code, out, err) = fabprobe(&["--root", bomb.to_str().unwrap(), "topo"]);
    assert_eq!(code, 2, "{err}");
    assert!(out.is_empty());
    assert!(
        err.contains("bomb.tar.gz") && err.contains("entry \"sys/zeros\""),
        "{err}"
    );
    assert!(err.contains("more than any file fabprobe reads"), "{err}");
}

/// On a terminal (a pty from util-linux `script`) FAIL is coloured; with NO_COLOR or a pipe,
/// the bytes are the plain ones.
#[test]
fn colour_on_a_terminal_only() {
    let bin = env!("CARGO_BIN_EXE_fabprobe");
    let fx = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/h100-sxm-8gpu-bad");
    let piped = std::process::Command::new(bin).args(["--root", fx, "check"]).output().unwrap();
    assert!(!piped.stdout.contains(&0x1b), "escape codes in piped output");
    if !common::lab_ready("colour_on_a_terminal_only", &[common::Need::Program("script", "bsdutils")]) {
        return;
    }
    let tty = |no_color: bool| {
        let mut c = std::process::Command::new("script");
        c.args(["-qec", &format!("{bin} --root {fx} check"), "/dev/null"]).env("TERM", "xterm");
        if no_color {
            c.env("NO_COLOR", "1");
        } else {
            c.env_remove("NO_COLOR");
        }
        String::from_utf8_lossy(&c.output().unwrap().stdout).into_owned()
    };
    assert!(tty(false).contains("\x1b[1;31mFAIL\x1b[0m"), "{}", tty(false));
    assert!(!tty(true).contains('\x1b'), "NO_COLOR=1 still coloured");
}

/// `COLUMNS=80`: every table line fits 80 columns and no GID is lost or cut (the compact
/// form: one GID a line); without it (a pipe) the same table keeps its full width, for
/// scripts.
#[test]
fn tables_fit_columns_and_pipes_keep_full_width() {
    let run = |cols: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_fabprobe"));
        c.args(["--root", "fixtures/h100-sxm-8gpu", "gids"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env_remove("COLUMNS");
        if let Some(w) = cols {
            c.env("COLUMNS", w);
        }
        let o = c.output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    // The table: from its header to the first blank line.
    let table = |out: &str| -> Vec<String> {
        out.lines()
            .skip_while(|l| !l.starts_with("DEV"))
            .take_while(|l| !l.is_empty())
            .map(str::to_string)
            .collect()
    };
    let full = table(&run(None));
    assert!(full.iter().any(|l| l.len() > 80), "{full:#?}");
    assert!(full[0].starts_with("DEVICE  PORT"), "{full:#?}");
    let narrow = table(&run(Some("80")));
    assert_eq!(narrow.len(), full.len(), "a GID wrapped: {narrow:#?}");
    for l in &narrow {
        assert!(l.chars().count() <= 80, "{} columns: {l}", l.chars().count());
    }
    // Every GID is still there, whole, on its row (an IPv4-mapped one as ::ffff:a.b.c.d).
    for gid in ["fe80:0000:0000:0000:946d:ae03:00a1:b207", "::ffff:10.20.1.17"] {
        assert!(
            narrow.iter().any(|l| l.split_whitespace().any(|w| w == gid)),
            "{gid} lost: {narrow:#?}"
        );
    }
}

/// The exit-status table says, for each command, what every status it returns means: each
/// probe command on every fixture returns a status its own table documents (a 3 from a
/// command whose table says it never returns 3 is the table drifting from the code).
#[test]
fn every_status_a_command_returns_is_in_its_table() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let mut fixtures: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("sys").is_dir())
        .map(|e| e.path())
        .collect();
    fixtures.sort();
    assert!(fixtures.len() >= 20, "{} fixtures", fixtures.len());
    let mut seen = std::collections::BTreeSet::new();
    for f in &fixtures {
        for cmd in common::host_commands() {
            let (code, _, err) = fabprobe(&["--root", f.to_str().unwrap(), cmd]);
            assert!((0..=3).contains(&code), "{cmd} on {}: exit {code}: {err}", f.display());
            let table = fabprobe::cli::exit_statuses(cmd);
            let what = &table[code as usize].1;
            assert!(
                !what.contains("not returned") && !what.contains("not used"),
                "{cmd} on {} exits {code}, which its table says it never does: {what}",
                f.display()
            );
            seen.insert((cmd, code));
        }
    }
    // The sweep saw the statuses that matter: a pass, a fail and a nothing-to-judge.
    for code in [0, 1, 3] {
        assert!(seen.iter().any(|(_, c)| *c == code), "no command exited {code}: {seen:?}");
    }
}

/// Whether `subject` names `name` whole (`mlx5_1` in `mlx5_1/1` and `GPU0-mlx5_1`, not in
/// `mlx5_10/1`).
fn names_word(subject: &str, name: &str) -> bool {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    subject
        .match_indices(name)
        .any(|(at, _)| !word(subject[..at].chars().next_back()) && !word(subject[at + name.len()..].chars().next()))
}

/// The RDMA devices a command's JSON report lists, as `--device` names them.
fn devices_listed(cmd: &str, data: &serde_json::Value) -> Vec<String> {
    let (list, key) = match cmd {
        "gids" => ("ports", "device"),
        "links" => ("devices", "name"),
        "gdr" => ("nics", "name"),
        "topo" => ("nics", "ibdev"),
        _ => ("interfaces", "rdma_device"),
    };
    let mut v: Vec<String> =
        data[list].as_array().unwrap().iter().filter_map(|x| x[key].as_str().map(str::to_string)).collect();
    v.sort();
    v.dedup();
    v
}

/// `--device DEV` on every command that lists RDMA devices, every fixture, every device it
/// has: the report keeps only DEV (topo: every GPU and DEV's row and column; gdr: the pairs
/// with DEV), every finding of the whole host about DEV stays (judged on the whole host: a
/// rate below its peers' is not lost by leaving the peers out) and none about another
/// device is shown; a name the host lacks is exit 2 naming it and the devices there are.
#[test]
fn device_keeps_only_that_device_on_every_command() {
    let fixtures: Vec<String> = std::fs::read_dir("fixtures")
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("sys").is_dir())
        .map(|p| p.to_str().unwrap().to_string())
        .collect();
    let mut views = 0;
    for cmd in ["gids", "links", "gdr", "topo", "qos"] {
        for f in &fixtures {
            let (code, out, err) = fabprobe(&["--root", f, "--format", "json", cmd]);
            assert!(matches!(code, 0 | 1 | 3), "{cmd} {f}: {err}");
            let whole: serde_json::Value = serde_json::from_str(&out).unwrap();
            let devs = devices_listed(cmd, &whole["data"]);
            for d in &devs {
                let (code, out, err) = fabprobe(&["--root", f, "--format", "json", cmd, "--device", d]);
                assert!(matches!(code, 0 | 1 | 3), "{cmd} {f} --device {d}: {err}");
                let view: serde_json::Value = serde_json::from_str(&out).unwrap();
                assert_eq!(
                    devices_listed(cmd, &view["data"]),
                    std::slice::from_ref(d),
                    "{cmd} {f} --device {d}"
                );
                assert_device_findings(cmd, &whole, &view, d, &devs);
                views += 1;
            }
            // No device of that name is never a pass: exit 2 naming the devices there are (a
            // host with none: 2, or 3 where the RDMA class itself could not be read).
            let (code, _, err) = fabprobe(&["--root", f, cmd, "--device", "mlx5_99"]);
            assert!(code == 2 || devs.is_empty() && code == 3, "{cmd} {f} --device mlx5_99: exit {code} {err}");
            if code == 2 {
                assert!(err.contains("mlx5_99"), "{cmd} {f}: {err}");
                assert!(devs.iter().all(|d| err.contains(d.as_str())), "{cmd} {f}: {err} does not list {devs:?}");
            }
        }
    }
    assert!(views > 60, "{views} device views");
}

/// What `--device d` keeps of the whole host's findings, and the shape of topo's and gdr's cut.
fn assert_device_findings(cmd: &str, whole: &serde_json::Value, view: &serde_json::Value, d: &str, devs: &[String]) {
    let key = |f: &serde_json::Value| format!("{} {}", f["id"].as_str().unwrap(), f["subject"].as_str().unwrap());
    let seen: Vec<String> = view["findings"].as_array().unwrap().iter().map(key).collect();
    let others: Vec<&String> = devs.iter().filter(|o| *o != d).collect();
    let nic = |data: &serde_json::Value, name: &str| {
        let nics = data["nics"].as_array().unwrap();
        let n = nics.iter().find(|n| n["name"] == name || n["ibdev"] == name).unwrap();
        n["label"].as_str().unwrap().to_string()
    };
    match cmd {
        // Pairs are judged one by one: the view's findings name only DEV's pairs, and a
        // finding of the whole host on one of them is in the view under its id.
        "gdr" => {
            let label = nic(&whole["data"], d);
            for p in view["data"]["pairs"].as_array().unwrap() {
                assert_eq!(p["nic"], label.as_str(), "gdr --device {d}: pair {p}");
            }
            for f in whole["findings"].as_array().unwrap() {
                let s = f["subject"].as_str().unwrap();
                if names_word(s, &label) || names_word(s, d) {
                    let id = f["id"].as_str().unwrap();
                    assert!(seen.iter().any(|s| s.starts_with(&format!("{id} "))), "gdr --device {d} lost {}", key(f));
                }
            }
        }
        _ => {
            for f in whole["findings"].as_array().unwrap() {
                let s = f["subject"].as_str().unwrap();
                let about_d = names_word(s, d);
                let about_other = others.iter().any(|o| names_word(s, o));
                assert_eq!(seen.contains(&key(f)), about_d || !about_other, "{cmd} --device {d}: {}", key(f));
            }
            assert!(seen.len() <= whole["findings"].as_array().unwrap().len());
        }
    }
    if cmd == "topo" {
        let (gpus, labels) = (view["data"]["gpus"].as_array().unwrap().len(), view["data"]["labels"].as_array().unwrap());
        assert_eq!(gpus, whole["data"]["gpus"].as_array().unwrap().len(), "topo --device keeps every GPU");
        assert_eq!(labels.len(), gpus + 1, "topo --device {d}: labels {labels:?}");
        assert_eq!(labels[gpus].as_str().unwrap(), nic(&whole["data"], d), "topo --device keeps the NIC's label");
        let m = view["data"]["matrix"].as_array().unwrap();
        assert!(m.len() == gpus + 1 && m.iter().all(|r| r.as_array().unwrap().len() == gpus + 1), "topo matrix {m:?}");
    }
}

/// The case that made `--device` judge the whole host first: the bad H100's mlx5_6 runs
/// below its peers; shown alone it is still a FAIL (it was a silent pass, exit 0).
#[test]
fn links_device_keeps_a_rate_below_peers() {
    let (code, out, err) = fabprobe(&["--root", "fixtures/h100-sxm-8gpu-bad", "links", "--device", "mlx5_6"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("FAIL mlx5_6/1: port runs at 200 Gb/s") && out.contains("same HCA model reaches"), "{out}{err}");
    let (code, out, err) = fabprobe(&["--root", "fixtures/h100-sxm-8gpu-bad", "links", "--device", "mlx5_5"]);
    assert_eq!(code, 0, "{out}{err}");
}

/// The CLI's catalogue of its commands (`fabprobe::cli::COMMANDS`) is its clap definition:
/// a new subcommand without an entry fails here, and with one every test that runs "every
/// command" (closed pipes, JSON DATA, exit codes, spellings, 80 columns) runs it. The
/// `--format` help names the commands that render each format, as the catalogue says.
#[test]
fn the_command_catalogue_is_every_subcommand_and_format_help_agrees() {
    use clap::ValueEnum;
    use fabprobe::cli::{COMMANDS, Format};
    let mut clap: Vec<String> = fabprobe::cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .filter(|n| n != "help")
        .collect();
    let mut table: Vec<String> = COMMANDS.iter().map(|c| c.name.to_string()).collect();
    clap.sort();
    table.sort();
    assert_eq!(clap, table, "clap's subcommands against fabprobe::cli::COMMANDS");
    for f in [Format::Prom, Format::NcclXml] {
        let help = f.to_possible_value().unwrap().get_help().unwrap().to_string();
        for c in COMMANDS {
            let listed = help.contains(&format!("{},", c.name))
                || help.contains(&format!("{})", c.name))
                || help.contains(&format!("({} ", c.name));
            assert_eq!(listed, c.formats.contains(&f), "{} in --format {}'s help: {help}", c.name, f.name());
        }
    }
}

/// Arguments under which `command` runs to the end here, cheaply, with no `--format`: one
/// entry per catalogue command, so a new command fails [`every_command_refuses_every_format_it_does_not_render`]
/// until it is given one.
fn runnable(command: &str, tmp: &std::path::Path, tag: &str) -> Vec<String> {
    let root = "fixtures/h100-sxm-8gpu";
    let out = |name: &str| tmp.join(format!("{name}-{tag}")).display().to_string();
    let v: Vec<String> = match command {
        "check" | "gdr" | "gids" | "links" | "qos" | "nccl-env" | "topo" => {
            vec!["--root".into(), root.into(), command.into()]
        }
        "nccl-log" => vec![
            command.into(),
            "tests/data/nccl-logs/basicsr-737-pg-watchdog.log".into(),
        ],
        "ring" => ["ring", "--local", "2", "-b", "4K", "-e", "4K", "-n", "1"]
            .map(String::from)
            .to_vec(),
        "report" => ["report", "tests/data/ring-reports/healthy.json", "--html", "-"]
            .map(String::from)
            .to_vec(),
        "snapshot" => vec![
            command.into(),
            "-o".into(),
            out("snap.tar.gz"),
            "--lldp-wait".into(),
            "0".into(),
        ],
        "sweep" => {
            let (code, json, err) = fabprobe(&["--root", root, "--format", "json", "check"]);
            assert!(code == 0 || code == 1, "check for sweep's input: {err}");
            let p = out("fleet.json");
            std::fs::write(&p, json).unwrap();
            vec![command.into(), p]
        }
        "completions" => vec![command.into(), "bash".into()],
        "gen-docs" => vec![command.into(), out("man")],
        other => panic!(
            "no runnable invocation for `{other}`: a new command in fabprobe::cli::COMMANDS needs one here"
        ),
    };
    v
}

/// Every command takes every `--format` its catalogue entry lists and refuses every other
/// one, naming the command, the flag and the formats it takes: none ignores the flag in
/// silence (`snapshot`, `completions` and `gen-docs` did), none refuses one it renders.
#[test]
fn every_command_refuses_every_format_it_does_not_render() {
    use clap::ValueEnum;
    use fabprobe::cli::{COMMANDS, Format};
    let tmp = tempfile::tempdir().unwrap();
    for c in COMMANDS {
        let listed = common::formats(c.name);
        assert!(!listed.is_empty(), "{}: no format", c.name);
        for f in Format::value_variants().iter().map(|f| f.name()) {
            let mut args = runnable(c.name, tmp.path(), f);
            args.extend(["--format".to_string(), f.to_string()]);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let (code, out, err) = fabprobe(&args);
            let refusal = format!(
                "`fabprobe {}` does not support --format {f}; use one of: {}",
                c.name,
                listed.join(", ")
            );
            if listed.contains(&f) {
                assert!([0, 1, 3].contains(&code), "{args:?} exited {code}: {err}");
                assert!(
                    !out.is_empty() || c.name == "snapshot" || c.name == "gen-docs",
                    "{args:?} wrote nothing"
                );
            } else {
                assert_eq!(
                    code, 2,
                    "{args:?} took a format its catalogue entry does not list: {out}{err}"
                );
                assert!(err.contains(&refusal), "{args:?}: {err}");
                assert!(out.is_empty(), "{args:?} wrote before refusing: {out}");
            }
        }
    }
}
