//! `fabprobe sweep` over generated fleets of real `check` reports (from the fixtures), as a
//! user runs it: hundreds of nodes with healthy or failing majorities, mixed fabprobe
//! versions, duplicates, stray bytes and FQDN hostnames, each with the exact drain list.

use std::io::Write;
use std::process::{Command, Stdio};

fn run_bytes(args: &[&str], stdin: Option<&[u8]>) -> (String, String, i32) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fabprobe"));
    c.args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    if let Some(s) = stdin {
        let mut w = child.stdin.take().unwrap();
        let s = s.to_vec();
        // Write from a thread: a large stdin must not block against a full stdout pipe.
        std::thread::spawn(move || {
            let _ = w.write_all(&s);
        });
    }
    let o = child.wait_with_output().unwrap();
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        o.status.code().unwrap_or(-1),
    )
}

fn check_json(fixture: &str) -> serde_json::Value {
    let root = format!("fixtures/{fixture}");
    let (out, err, code) = run_bytes(
        &[
            "--root", &root, "--format", "json", "check", "--policy", "dgx-h100",
        ],
        None,
    );
    assert!(code == 0 || code == 1, "{fixture}: {err}");
    serde_json::from_str(&out).unwrap()
}

struct Fixtures {
    good: serde_json::Value,
    bad: serde_json::Value,
    nogdr: serde_json::Value,
}

fn fixtures() -> Fixtures {
    let f = Fixtures {
        good: check_json("h100-sxm-8gpu"),
        bad: check_json("h100-sxm-8gpu-bad"),
        nogdr: check_json("h100-gdr-broken"),
    };
    // The generated fleets rest on these verdicts.
    assert_ne!(f.good["data"]["verdict"], "fail");
    assert_eq!(f.bad["data"]["verdict"], "fail");
    assert_eq!(f.nogdr["data"]["verdict"], "fail");
    f
}

fn named(v: &serde_json::Value, host: &str) -> serde_json::Value {
    let mut v = v.clone();
    v["host"]["hostname"] = host.into();
    v
}

fn drain_nodes(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| l.strip_prefix("scontrol update NodeName="))
        .map(|l| l.split(' ').next().unwrap().to_string())
        .collect()
}

/// 400 nodes as pdsh prints them (`gpuNNN: {...}`, every 7th hostname an FQDN), with
/// failing nodes, passing outliers, a newer fabprobe on a tenth of them, duplicates, stray
/// bytes, a truncated report and a silent node.
#[test]
fn a_healthy_majority_fleet_drains_exactly_the_failed_nodes() {
    let f = fixtures();
    let mut input = Vec::new();
    for i in 0..400 {
        let label = format!("gpu{i:03}");
        let host = if i % 7 == 0 {
            format!("{label}.cluster.local")
        } else {
            label.clone()
        };
        let mut v = match i {
            _ if i % 50 == 17 => named(&f.bad, &host),
            123 => named(&f.nogdr, &host),
            _ => named(&f.good, &host),
        };
        if i == 5 || i == 205 {
            v["data"]["fingerprint"]["kernel"] = "5.15.0-97-generic".into();
        }
        if i % 10 == 3 {
            // A newer fabprobe: another tool_version and a key the others lack.
            v["tool_version"] = "9.9.9".into();
            v["data"]["fingerprint"]["tool_version"] = "9.9.9".into();
            v["data"]["fingerprint"]["nccl_version"] = "2.21.5".into();
        }
        let mut line = serde_json::to_vec(&v).unwrap();
        match i {
            31 => line.splice(10..10, [0xff, 0xfe]).for_each(drop),
            32 => line.truncate(line.len() / 2),
            44 => continue,
            _ => {}
        }
        input.extend_from_slice(format!("{label}: ").as_bytes());
        input.extend_from_slice(&line);
        input.push(b'\n');
        if i == 77 || i == 78 {
            // A second collection: gpu077 failed there, gpu078 passed again.
            let again = if i == 77 {
                named(&f.bad, &host)
            } else {
                named(&f.good, &host)
            };
            input.extend_from_slice(format!("{host}: ").as_bytes());
            input.extend_from_slice(&serde_json::to_vec(&again).unwrap());
            input.push(b'\n');
        }
    }
    let args = ["sweep", "--expect", "gpu[000-399]", "--drain"];
    let (out, err, code) = run_bytes(&args, Some(&input));
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        drain_nodes(&out),
        [
            "gpu017", "gpu067", "gpu077", "gpu117", "gpu123", "gpu167", "gpu217", "gpu267", "gpu317",
            "gpu367"
        ],
        "{out}"
    );
    // FQDN reports take the expected (and labelled) short name: no node is named twice.
    assert!(!out.contains("cluster.local State"), "{out}");
    for n in ["gpu005", "gpu205"] {
        assert!(
            out.contains(&format!(
                "# {n}: passed but differs from its peers, not drained (--drain-outliers drains it): kernel \"5.15.0-97-generic\""
            )),
            "{out}"
        );
    }
    let (json, _, code) = run_bytes(
        &["--format", "json", "sweep", "--expect", "gpu[000-399]"],
        Some(&input),
    );
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let r = &v["data"];
    let unread: Vec<(&str, &str)> = r["unreadable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| (u["node"].as_str().unwrap(), u["problem"].as_str().unwrap()))
        .collect();
    assert_eq!(
        unread,
        [
            ("gpu044", "missing"),
            ("gpu032", "truncated"),
            ("gpu031", "not_utf8"),
            ("gpu077", "duplicate"),
            ("gpu078", "duplicate")
        ]
    );
    assert_eq!(r["unreadable"][3]["source"], "stdin:77, stdin:78");
    // Every node by name with its verdict and worst cause (the bad report's first fail).
    let hosts = r["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 400);
    let by = |n: &str| hosts.iter().find(|h| h["node"] == n).unwrap().clone();
    let bad_first = f.bad["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["severity"] == "fail")
        .unwrap();
    let g17 = by("gpu017");
    assert_eq!((&g17["verdict"], &g17["drain"]), (&"fail".into(), &true.into()));
    assert_eq!(g17["worst"]["id"], bad_first["id"]);
    assert_eq!(g17["worst"]["subject"], bad_first["subject"]);
    assert_eq!(by("gpu044")["verdict"], "unknown");
    assert_eq!(by("gpu044")["problem"], "missing");
    assert_eq!(by("gpu032")["problem"], "truncated");
    assert_eq!(by("gpu000")["verdict"], f.good["data"]["verdict"]);
    assert_eq!(r["nodes"]["reports"], 397);
    assert_eq!(r["nodes"]["failed"], 10);
    // Neither tool_version nor the newer version's extra key makes anyone an outlier.
    let keys: Vec<&str> = r["outliers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["kernel", "kernel"]);
    assert_eq!(
        r["notes"],
        serde_json::json!([
            format!(
                "reports from 2 tool versions: {} (357), 9.9.9 (40)",
                f.good["tool_version"].as_str().unwrap()
            ),
            "not compared (only some tool versions emit them): nccl_version"
        ])
    );
}

/// Most of the fleet fails (a bad rollout): the healthy minority is the baseline, not an
/// outlier, and only the failed nodes are drained.
#[test]
fn a_failing_majority_never_drains_the_healthy_nodes() {
    let f = fixtures();
    let dir = tempfile::tempdir().unwrap();
    let mut want = Vec::new();
    for i in 0..300 {
        let name = format!("node{i:03}");
        let v = if i % 3 == 0 {
            named(&f.good, &name)
        } else {
            want.push(name.clone());
            named(&f.bad, &name)
        };
        std::fs::write(
            dir.path().join(format!("{name}.json")),
            serde_json::to_vec_pretty(&v).unwrap(),
        )
        .unwrap();
    }
    let d = dir.path().to_str().unwrap();
    let (out, err, code) = run_bytes(&["sweep", d, "--drain"], None);
    assert_eq!(code, 1, "{err}");
    assert_eq!(drain_nodes(&out), want);
    assert!(!out.contains("# node000: passed"), "{out}");
    let (out, _, _) = run_bytes(&["sweep", d, "--drain", "--drain-outliers"], None);
    assert_eq!(drain_nodes(&out), want, "no healthy node is an outlier");
}

#[test]
fn stray_bytes_in_a_directory_are_listed_and_the_rest_goes_on() {
    let f = fixtures();
    let dir = tempfile::tempdir().unwrap();
    for i in 0..20 {
        let name = format!("n{i:02}");
        let v = if i == 4 {
            named(&f.bad, &name)
        } else {
            named(&f.good, &name)
        };
        std::fs::write(
            dir.path().join(format!("{name}.json")),
            serde_json::to_vec(&v).unwrap(),
        )
        .unwrap();
    }
    std::fs::write(dir.path().join("n20.json"), b"\x7fELF\x02\x01\x01\0\0\0\xff\xfe").unwrap();
    let (out, err, code) = run_bytes(&["sweep", dir.path().to_str().unwrap(), "--drain"], None);
    assert_eq!(code, 1, "{err}");
    assert_eq!(drain_nodes(&out), ["n04"]);
    assert!(out.contains("# n20: not_utf8 report ("), "{out}");
}

#[test]
fn no_readable_report_exits_2() {
    let (out, err, code) = run_bytes(
        &["sweep", "--expect", "gpu[1-3]"],
        Some(b"gpu1: bash: fabprobe: command not found\n\xff\n"),
    );
    assert_eq!(code, 2, "{out}");
    assert!(err.contains("0 reports: the collection failed?"), "{err}");
    assert!(out.contains("gpu1"), "what was read is still shown: {out}");
    let (_, err, code) = run_bytes(&["sweep"], Some(b""));
    assert_eq!(code, 2);
    assert!(err.contains("0 reports: the collection failed?"), "{err}");
}

/// `srun -l` cuts each task's output line into labelled 1024-byte pieces (measured with
/// slurm-wlm 22.05.8; tests/lab_slurm.rs runs the real one), interleaved between tasks: the
/// sweep joins each task's pieces back into its report, also when a piece ends in the
/// middle of a UTF-8 character or right after a `}`. A report whose end never came stays
/// truncated (`srun -l` labels name tasks, not nodes, so its node is missing), and a task's
/// text line is listed as not JSON.
#[test]
fn srun_label_pieces_are_joined_into_reports() {
    let f = fixtures();
    let mut reports: Vec<Vec<u8>> = (0..6)
        .map(|i| {
            let mut v = if i == 2 {
                named(&f.bad, &format!("node{i}"))
            } else {
                named(&f.good, &format!("node{i}"))
            };
            // Long runs of 3-byte characters: a 1024-byte boundary inside one lands
            // mid-character two times in three, whatever the report's length.
            v["data"]["policy"]["description"] = format!("GPU node {} (ü)", "✓".repeat(700)).into();
            serde_json::to_vec(&v).unwrap()
        })
        .collect();
    // A piece that ends right after a `}` (inside the report, not at its end).
    let close = reports[3].iter().position(|&c| c == b'}').unwrap();
    let pad = 1023 - close % 1024;
    reports[3].splice(1..1, std::iter::repeat_n(b' ', pad));
    assert_eq!(reports[3][1023], b'}');
    let pieces: Vec<Vec<Vec<u8>>> = reports
        .iter()
        .map(|r| r.chunks(1024).map(|c| c.to_vec()).collect())
        .collect();
    assert!(pieces.iter().all(|p| p.len() > 2), "reports span several pieces");
    let split_char = pieces.iter().flatten().any(|p| std::str::from_utf8(p).is_err());
    assert!(split_char, "a piece boundary falls inside a UTF-8 character");
    let mut input = Vec::new();
    let most = pieces.iter().map(Vec::len).max().unwrap();
    for k in 0..most {
        for (task, p) in pieces.iter().enumerate() {
            // Task 5's output is cut off after its first piece (a killed task).
            if task == 5 && k > 0 {
                continue;
            }
            if let Some(piece) = p.get(k) {
                input.extend_from_slice(format!("{task:2}: ").as_bytes());
                input.extend_from_slice(piece);
                input.push(b'\n');
            }
        }
    }
    // A task's own text line (not a report) before the pieces.
    let mut with_text = b" 4: warning: cannot read /proc/1/environ\n".to_vec();
    with_text.extend_from_slice(&input);
    let input = with_text;
    let (out, err, code) = run_bytes(&["sweep", "--expect", "node[0-5]", "--drain"], Some(&input));
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(drain_nodes(&out), ["node2"], "{out}");
    let unreadable: Vec<&str> = out.lines().filter(|l| l.starts_with("# ")).collect();
    assert_eq!(unreadable.len(), 3, "{out}");
    assert!(
        unreadable.contains(&"# node5: missing report (--expect): no report"),
        "{out}"
    );
    assert!(
        unreadable
            .iter()
            .any(|l| l.starts_with("# stdin:") && l.contains("truncated")),
        "{out}"
    );
    assert!(
        unreadable.iter().any(|l| l.starts_with("# stdin:1: not_json")),
        "{out}"
    );
}

/// Containers that all report `localhost`, collected with pdsh: the launcher's label names
/// the node, so they stay apart and the failing one is drained.
#[test]
fn pdsh_labels_keep_nodes_that_report_localhost_apart() {
    let f = fixtures();
    let mut input = Vec::new();
    for (i, v) in [&f.good, &f.bad, &f.good].into_iter().enumerate() {
        input.extend_from_slice(format!("gpu{i}: ").as_bytes());
        input.extend_from_slice(&serde_json::to_vec(&named(v, "localhost")).unwrap());
        input.push(b'\n');
    }
    let (out, err, code) = run_bytes(&["sweep", "--expect", "gpu[0-2]", "--drain"], Some(&input));
    assert_eq!(code, 1, "{err}");
    assert_eq!(drain_nodes(&out), ["gpu1"], "{out}");
    assert!(!out.contains("duplicate"), "{out}");
    assert!(!out.contains("missing"), "{out}");
}

/// A directory's subdirectories are not read (an archive of older runs would count nodes
/// twice) and the sweep says which it skipped.
#[test]
fn a_directory_names_the_subdirectories_it_skips() {
    let f = fixtures();
    let dir = tempfile::tempdir().unwrap();
    for i in 0..3 {
        let name = format!("n{i}");
        std::fs::write(
            dir.path().join(format!("{name}.json")),
            serde_json::to_vec(&named(&f.good, &name)).unwrap(),
        )
        .unwrap();
    }
    std::fs::create_dir(dir.path().join("old")).unwrap();
    std::fs::write(
        dir.path().join("old/n1.json"),
        serde_json::to_vec(&named(&f.bad, "n1")).unwrap(),
    )
    .unwrap();
    let d = dir.path().to_str().unwrap();
    let (json, err, _) = run_bytes(&["--format", "json", "sweep", d], None);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {err}"));
    assert_eq!(v["data"]["nodes"]["failed"], 0, "old/ is not read");
    let want = format!(
        "{d}: skipped 1 entries that are not files (old/): sweep reads the files directly in a directory; name a subdirectory to read it"
    );
    assert!(
        v["data"]["notes"]
            .as_array()
            .unwrap()
            .contains(&want.clone().into()),
        "{json}"
    );
    let (out, _, _) = run_bytes(&["sweep", d], None);
    assert!(
        out.contains("skipped 1 entries that are not files (old/)"),
        "{out}"
    );
}

/// A report on a line longer than the sweep holds (here 3 MiB of padding) is parsed as it
/// streams by: its verdict counts, and stray bytes deep inside another are still found.
#[test]
fn a_line_longer_than_the_line_buffer_is_streamed() {
    let f = fixtures();
    let pad = "x".repeat(3 << 20);
    let mut input = Vec::new();
    let mut bad = named(&f.bad, "gpu1");
    bad["data"]["policy"]["description"] = pad.clone().into();
    let mut good = named(&f.good, "gpu2");
    good["data"]["policy"]["description"] = pad.into();
    let mut good = serde_json::to_vec(&good).unwrap();
    let at = good.len() - 1000;
    good[at] = 0xff;
    input.extend_from_slice(b"gpu0: ");
    input.extend_from_slice(&serde_json::to_vec(&named(&f.good, "gpu0")).unwrap());
    input.extend_from_slice(b"\ngpu1: ");
    input.extend_from_slice(&serde_json::to_vec(&bad).unwrap());
    input.extend_from_slice(b"\ngpu2: ");
    input.extend_from_slice(&good);
    input.extend_from_slice(b"\ngpu3: ");
    input.extend_from_slice(&serde_json::to_vec(&named(&f.good, "gpu3")).unwrap());
    input.push(b'\n');
    let (out, err, code) = run_bytes(&["sweep", "--expect", "gpu[0-3]", "--drain"], Some(&input));
    assert_eq!(code, 1, "{err}");
    assert_eq!(drain_nodes(&out), ["gpu1"], "{out}");
    let comments: Vec<&str> = out.lines().filter(|l| l.starts_with('#')).collect();
    assert_eq!(comments.len(), 1, "{out}");
    assert!(
        comments[0].starts_with("# gpu2: not_utf8 report (stdin:3): not UTF-8 (invalid byte at offset "),
        "{out}"
    );
}

/// Prometheus labels carry a fingerprint string as it is, not its JSON quotes.
#[test]
fn sweep_prom_labels_carry_no_json_quotes() {
    let f = fixtures();
    let mut input = Vec::new();
    for i in 0..3 {
        let mut v = named(&f.good, &format!("n{i}"));
        if i == 2 {
            v["data"]["fingerprint"]["kernel"] = "5.15.0-97-generic".into();
        }
        input.extend_from_slice(&serde_json::to_vec(&v).unwrap());
        input.push(b'\n');
    }
    let (out, err, code) = run_bytes(&["--format", "prom", "sweep"], Some(&input));
    assert_eq!(code, 1, "{err}");
    let kernel = f.good["data"]["fingerprint"]["kernel"].as_str().unwrap();
    let want = format!(
        "fabprobe_sweep_outlier{{node=\"n2\",key=\"kernel\",value=\"5.15.0-97-generic\",majority=\"{kernel}\"}} 1\n"
    );
    assert!(out.contains(&want), "{out}");
}

/// Ring reports from real lab runs (`scripts/bench-localize-lab.sh fixtures`: rank 0's JSON
/// of a healthy scan, node-c's egress at 30%, node-b -> node-d at 30% with LLDP on the
/// switch ports), given as a directory, as files and as JSON lines on stdin: the sweep says
/// the node to drain and the link to ticket apart, with both ends and the switch ports.
#[test]
fn ring_reports_give_the_drain_list_and_the_ticket_list_apart() {
    let dir = "tests/data/ring-reports";
    let (out, err, code) = run_bytes(&["--format", "json", "sweep", dir], None);
    assert_eq!(code, 1, "{err}\n{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let r = &v["data"]["ring"];
    assert_eq!(r["reports"], 3, "{r}");
    let drain: Vec<&str> = r["drain"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["node"].as_str().unwrap())
        .collect();
    assert_eq!(drain, ["node-c"]);
    assert_eq!(r["drain"][0]["kinds"], serde_json::json!(["slow_egress"]));
    assert!(
        r["drain"][0]["reasons"][0]
            .as_str()
            .unwrap()
            .starts_with("SLOW EGRESS rank 2 (node-c, eth1)"),
        "{r}"
    );
    let t = r["ticket"].as_array().unwrap();
    assert_eq!(t.len(), 1, "{r}");
    assert_eq!(t[0]["kind"], "slow_link");
    assert_eq!(
        (t[0]["from"]["host"].as_str(), t[0]["to"]["host"].as_str()),
        (Some("node-b"), Some("node-d"))
    );
    assert_eq!(
        t[0]["switch_ports"],
        serde_json::json!([
            "node-b eth1 <-> leaf-07 Ethernet1/2",
            "node-d eth1 <-> leaf-07 Ethernet1/4"
        ])
    );
    assert!(
        t[0]["sources"][0]
            .as_str()
            .unwrap()
            .ends_with("slow-pair-b-d-lldp.json"),
        "{t:?}"
    );
    // The node is on the drain list (a link never is), and the ticket is a finding of its own.
    let bad: Vec<&str> = v["data"]["bad_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["node"].as_str().unwrap())
        .collect();
    assert_eq!(bad, ["node-c"]);
    assert!(
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["id"] == "sweep.ticket"),
        "{v}"
    );

    // The table: both lists under their own headings.
    let (table, _, code) = run_bytes(&["sweep", dir], None);
    assert_eq!(code, 1);
    let drain_at = table.find("RING: DRAIN").expect(&table);
    let ticket_at = table.find("RING: TICKET").expect(&table);
    assert!(drain_at < ticket_at, "{table}");
    assert!(
        table[ticket_at..].contains("slow_link node-b -> node-d: SLOW LINK rank 1"),
        "{table}"
    );
    assert!(
        table[ticket_at..].contains("switch ports: node-b eth1 <-> leaf-07 Ethernet1/2"),
        "{table}"
    );
    assert!(!table[drain_at..ticket_at].contains("node-b"), "{table}");

    // --drain: the node's scontrol line, the link as a comment.
    let (lines, _, _) = run_bytes(&["sweep", "--drain", dir], None);
    assert_eq!(drain_nodes(&lines), ["node-c"], "{lines}");
    assert!(lines.contains("Reason=\"fabprobe: ring slow_egress\""), "{lines}");
    assert!(
        lines.contains("# ticket slow_link node-b -> node-d [node-b eth1 <-> leaf-07 Ethernet1/2; "),
        "{lines}"
    );

    // JSON lines on stdin (each report on one line), with a launcher prefix: the same lists.
    let mut lines = Vec::new();
    for f in ["healthy", "slow-egress-node-c", "slow-pair-b-d-lldp"] {
        let j: serde_json::Value =
            serde_json::from_slice(&std::fs::read(format!("{dir}/{f}.json")).unwrap()).unwrap();
        lines.extend(format!("node-a: {j}\n").into_bytes());
    }
    let (out, err, code) = run_bytes(&["--format", "json", "sweep"], Some(&lines));
    assert_eq!(code, 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["data"]["ring"]["drain"][0]["node"], "node-c");
    assert_eq!(v["data"]["ring"]["ticket"][0]["to"]["host"], "node-d");

    let (prom, _, _) = run_bytes(&["--format", "prom", "sweep", dir], None);
    assert!(
        prom.contains("fabprobe_sweep_bad_node{node=\"node-c\"} 1"),
        "{prom}"
    );
    assert!(
        prom.contains("fabprobe_sweep_ticket{kind=\"slow_link\",from=\"node-b\",to=\"node-d\",rail=\"\"} 1"),
        "{prom}"
    );

    // The page: the drain list and the ticket, with the switch ports.
    let page = tempfile::tempdir().unwrap();
    let html = page.path().join("fleet.html");
    let (_, err, code) = run_bytes(&["sweep", dir, "--html", html.to_str().unwrap()], None);
    assert_eq!(code, 1, "{err}");
    let html = std::fs::read_to_string(html).unwrap();
    assert!(
        html.contains("Drain list (1)") && html.contains("ring slow_egress"),
        "{html}"
    );
    assert!(html.contains("Tickets (1)"), "{html}");
    assert!(
        html.contains("slow_link node-b -&gt; node-d: SLOW LINK rank 1"),
        "{html}"
    );
    assert!(
        html.contains("(switch ports: node-b eth1 &lt;-&gt; leaf-07 Ethernet1/2; "),
        "{html}"
    );

    // A healthy run alone: nothing to act on, exit 0.
    let (out, err, code) = run_bytes(&["sweep", &format!("{dir}/healthy.json")], None);
    assert_eq!(code, 0, "{err}\n{out}");
    assert!(
        out.contains("RING REPORTS: 1 run; 0 nodes to drain, 0 links or paths to ticket"),
        "{out}"
    );
}

/// A ring report beside the nodes' check reports: a node both fail is one drain entry with
/// both reasons.
#[test]
fn ring_and_check_reports_drain_a_node_once() {
    let f = fixtures();
    let ring = std::fs::read_to_string("tests/data/ring-reports/slow-egress-node-c.json").unwrap();
    let ring: serde_json::Value = serde_json::from_str(&ring).unwrap();
    let input = format!(
        "{}\n{}\n{}\n",
        named(&f.good, "node-a"),
        named(&f.bad, "node-c"),
        ring
    );
    let (out, err, code) = run_bytes(&["--format", "json", "sweep"], Some(input.as_bytes()));
    assert_eq!(code, 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let bad = v["data"]["bad_nodes"].as_array().unwrap();
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert_eq!(bad[0]["node"], "node-c");
    let reasons: Vec<&str> = bad[0]["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    assert!(
        reasons.contains(&"ring slow_egress") && reasons.len() > 1,
        "{reasons:?}"
    );
    assert_eq!(v["data"]["nodes"]["reports"], 2);
    assert_eq!(v["data"]["ring"]["reports"], 1);
}

/// splitmix64: a seeded sequence for the generated fleets (no dependency, same on every run).
struct Seq(u64);

impl Seq {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49eb_133a_b8e1);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Every fixture's `check` report under the default policy (the `-later` ones are second
/// samples, not nodes), as (fixture, report).
fn every_fixture_report() -> Vec<(String, serde_json::Value)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures")).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        // Second samples of a node (-later, -rebooted) are not nodes; gen/ and CAUSES.toml
        // are not snapshots.
        if !path.join("sys").is_dir() || name.ends_with("-later") || name.ends_with("-rebooted") {
            continue;
        }
        let (out_, err, code) = run_bytes(
            &["--root", &format!("fixtures/{name}"), "--format", "json", "check"],
            None,
        );
        assert!(matches!(code, 0 | 1 | 3), "{name}: {err}");
        // 3: nothing to judge (cpu-only): sweep lists it apart (nothing_judged), not a node
        // of any hardware kind.
        if code == 3 {
            continue;
        }
        out.push((name, serde_json::from_str(&out_).unwrap()));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn fp_kind(v: &serde_json::Value) -> String {
    let f = &v["data"]["fingerprint"];
    fabprobe::check::sweep::kind_of(
        &f["gpu_models"],
        &f["hca_firmware"],
        &f["ib_ports"],
        &f["roce_ports"],
    )
}

/// One generated fleet: the reports, and the (node, key) outliers it must give (the two
/// real differences injected into healthy nodes), the nodes whose report failed, and the
/// healthy nodes that only carry jitter.
struct Fleet {
    reports: Vec<(String, serde_json::Value)>,
    want_outliers: Vec<(String, String)>,
    failed: Vec<String>,
    healthy: Vec<String>,
}

/// A fleet built from the fixtures: a majority of H100 nodes (`h100-sxm-8gpu`), a few nodes
/// of each other hardware kind that passes (one fixture per kind), a few copies of each
/// failing fixture, and on every node the MemTotal jitter identical nodes have (firmware
/// and kernel reservations: up to 0.3%, so the rounded memory_gib moves by a few GiB).
/// Injected into healthy H100 nodes: another kernel, and 64 GiB missing (a DIMM).
fn fleet(seed: u64, all: &[(String, serde_json::Value)]) -> Fleet {
    let mut r = Seq(seed);
    let major = &all.iter().find(|(n, _)| n == "h100-sxm-8gpu").unwrap().1;
    let major_kind = fp_kind(major);
    let mut kinds_seen = vec![major_kind.clone()];
    let mut pool: Vec<(&serde_json::Value, usize, bool)> = vec![(major, 40 + r.below(60) as usize, false)];
    for (_, v) in all {
        let failed = v["data"]["verdict"] == "fail";
        let k = fp_kind(v);
        if failed {
            pool.push((v, r.below(4) as usize, true));
        } else if !kinds_seen.contains(&k) {
            // Passing fixtures of another kind; one of a kind already present would be a
            // configuration difference within that kind (a true outlier), not jitter.
            kinds_seen.push(k);
            pool.push((v, r.below(4) as usize, false));
        }
    }
    let mut nodes: Vec<(serde_json::Value, bool, bool)> = Vec::new();
    for (v, n, failed) in pool {
        for _ in 0..n {
            nodes.push(((*v).clone(), failed, std::ptr::eq(v, major)));
        }
    }
    // Shuffle (Fisher-Yates), then name.
    for i in (1..nodes.len()).rev() {
        nodes.swap(i, r.below(i as u64 + 1) as usize);
    }
    let mut f = Fleet {
        reports: Vec::new(),
        want_outliers: Vec::new(),
        failed: Vec::new(),
        healthy: Vec::new(),
    };
    let majors: Vec<usize> = (0..nodes.len()).filter(|&i| nodes[i].2).collect();
    let kernel_at = majors[r.below(majors.len() as u64) as usize];
    let dimm_at = loop {
        let i = majors[r.below(majors.len() as u64) as usize];
        if i != kernel_at {
            break i;
        }
    };
    for (i, (mut v, failed, _)) in nodes.into_iter().enumerate() {
        let name = format!("gpu{i:04}");
        v["host"]["hostname"] = name.clone().into();
        let fp = &mut v["data"]["fingerprint"];
        if let Some(m) = fp["memory_gib"].as_f64() {
            let jitter = (r.below(601) as f64 - 300.0) / 1e5;
            let mut m = (m * (1.0 + jitter)).round();
            if i == dimm_at {
                m -= 64.0;
            }
            fp["memory_gib"] = (m as u64).into();
        }
        if i == kernel_at {
            fp["kernel"] = "5.15.0-97-generic".into();
            f.want_outliers.push((name.clone(), "kernel".into()));
        } else if i == dimm_at {
            f.want_outliers.push((name.clone(), "memory_gib".into()));
        } else if failed {
            f.failed.push(name.clone());
            if r.below(2) == 0 {
                // A failed node that also differs: listed once, under its failure.
                fp["kernel"] = "6.8.0-31-generic".into();
            }
        } else {
            f.healthy.push(name.clone());
        }
        f.reports.push((name, v));
    }
    f.want_outliers.sort();
    f.failed.sort();
    f
}

/// Fleet noise, swept over 20 seeds: nodes of several hardware kinds, healthy nodes with the
/// numeric jitter identical nodes have, failed nodes (some of them also differing): no
/// healthy node is an outlier, no failed node is listed twice, and the two real
/// differences injected into healthy nodes are found. `FABPROBE_FLEET_DUMP=DIR` writes each
/// fleet as JSON lines (to measure another build's sweep on the same fleets).
#[test]
fn fleet_noise_calls_no_healthy_node_an_outlier() {
    let all = every_fixture_report();
    assert!(all.iter().filter(|(_, v)| v["data"]["verdict"] == "fail").count() >= 3);
    let dump = std::env::var_os("FABPROBE_FLEET_DUMP");
    let mut kinds_max = 0;
    for seed in 0..20 {
        let f = fleet(seed, &all);
        let mut sw = fabprobe::check::sweep::Sweeper::new();
        for (n, v) in &f.reports {
            sw.add(&format!("{n}.json"), Some(n), &v.to_string());
        }
        let r = sw.finish();
        let got: Vec<(String, String)> = r
            .outliers
            .iter()
            .map(|o| (o.node.clone(), o.key.clone()))
            .collect();
        assert_eq!(got, f.want_outliers, "seed {seed}: {:#?}", r.outliers);
        let drained: Vec<&str> = r.bad_nodes.iter().map(|b| b.node.as_str()).collect();
        assert_eq!(drained, f.failed, "seed {seed}");
        assert_eq!(r.nodes.reports, f.reports.len());
        assert!(f.healthy.len() > 40, "seed {seed}");
        kinds_max = kinds_max.max(
            r.notes
                .iter()
                .find_map(|n| n.split(" hardware kinds").next()?.parse::<usize>().ok())
                .unwrap_or(1),
        );
        if let Some(d) = &dump {
            let lines: String = f.reports.iter().map(|(_, v)| format!("{v}\n")).collect();
            std::fs::write(
                std::path::Path::new(d).join(format!("seed{seed:02}.jsonl")),
                lines,
            )
            .unwrap();
            let meta =
                serde_json::json!({"healthy": f.healthy, "failed": f.failed, "injected": f.want_outliers});
            std::fs::write(
                std::path::Path::new(d).join(format!("seed{seed:02}.json")),
                meta.to_string(),
            )
            .unwrap();
        }
    }
    assert!(kinds_max >= 4, "the fleets mix hardware kinds ({kinds_max})");
}

/// `sweep --policy FILE` reads `[sweep] tolerance`: a fleet whose memory differs by 3%
/// agrees under "5%", and a bad table is exit 2 naming the key.
#[test]
fn sweep_policy_sets_the_tolerances() {
    let f = fixtures();
    let mut input = Vec::new();
    for i in 0..6 {
        let mut v = named(&f.good, &format!("n{i}"));
        if i == 4 {
            v["data"]["fingerprint"]["memory_gib"] = 1956.into();
        }
        input.extend_from_slice(format!("{v}\n").as_bytes());
    }
    let (out, err, code) = run_bytes(&["--format", "json", "sweep"], Some(&input));
    assert_eq!(code, 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["data"]["outliers"][0]["node"], "n4");
    assert_eq!(v["data"]["outliers"][0]["tolerance"], "±1%");
    let dir = tempfile::tempdir().unwrap();
    let pol = dir.path().join("fleet.toml");
    std::fs::write(&pol, "[sweep]\ntolerance = { memory_gib = \"5%\" }\n").unwrap();
    let (out, err, code) = run_bytes(&["sweep", "--policy", pol.to_str().unwrap()], Some(&input));
    assert_eq!(code, 0, "{err}\n{out}");
    std::fs::write(&pol, "[sweep]\ntolerance = { memory_gb = 2 }\n").unwrap();
    let (_, err, code) = run_bytes(&["sweep", "--policy", pol.to_str().unwrap()], Some(&input));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("sweep.tolerance.memory_gb") && err.contains("memory_gib"),
        "{err}"
    );
}
