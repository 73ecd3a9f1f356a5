//! `nccl-log` on PyTorch flight-recorder dumps (issue 43): whole reports (table and JSON)
//! of every scenario in tests/data/flight-recorder (real Gloo dumps from torch 2.15.0, and
//! NCCL-format dumps built from PyTorch's format definition with their NCCL logs), the
//! culprit each must name, pickle and JSON agreeing, logs and dumps of one job naming the
//! same culprit alone and together, and bad dumps named without costing the rest.

use std::path::Path;
use std::process::Command;

const DATA: &str = "tests/data/flight-recorder";

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_fabprobe"))
        .args(args)
        .env_remove("COLUMNS")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn json(args: &[&str]) -> (i32, serde_json::Value) {
    let mut a = vec!["--format", "json", "nccl-log"];
    a.extend(args);
    let (code, out) = run(&a);
    (
        code,
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}")),
    )
}

/// (scenario dir, the cause that must come first, the ranks it blames, exit status).
const GLOO: &[(&str, Option<&str>, &[u32], i32)] = &[
    ("healthy", None, &[], 0),
    ("skip", Some("fr_rank_not_entered"), &[2], 1),
    ("dies", Some("fr_rank_no_dump"), &[3], 1),
    ("mismatch_op", Some("fr_collective_mismatch"), &[1], 1),
    ("mismatch_size", Some("fr_collective_mismatch"), &[1], 1),
    ("mismatch_dtype", Some("fr_collective_mismatch"), &[3], 1),
    ("subgroup", Some("fr_rank_not_entered"), &[3], 1),
    // Gloo 2.15 records no send/recv: the dumps hold only the all_reduces, all complete.
    ("p2p", None, &[], 0),
    ("wrapped", Some("fr_buffer_wrapped"), &[], 3),
];

fn blamed(v: &serde_json::Value) -> Vec<u32> {
    v["flight_recorder"]["verdicts"][0]["ranks"]
        .as_array()
        .map(|a| a.iter().map(|r| r.as_u64().unwrap() as u32).collect())
        .unwrap_or_default()
}

#[test]
fn gloo_scenarios_name_their_culprit_in_pickle_and_json() {
    for (s, cause, ranks, code) in GLOO {
        let mut reports = Vec::new();
        for kind in ["pickle", "json"] {
            let dir = format!("{DATA}/{s}/{kind}");
            let (c, v) = json(&[&dir]);
            assert_eq!(c, *code, "{s} {kind}");
            let d = &v["data"];
            let first = d["flight_recorder"]["verdicts"][0]["cause"].as_str();
            assert_eq!(first, *cause, "{s} {kind}");
            assert_eq!(blamed(d), *ranks, "{s} {kind}");
            // Root cause first in the joined list too.
            if let Some(cause) = cause {
                assert_eq!(d["verdicts"][0]["cause"], *cause, "{s} {kind}");
            }
            // The same verdicts from either format (the files cited differ).
            let mut fr = d["flight_recorder"]["verdicts"].clone();
            for v in fr.as_array_mut().unwrap() {
                v["file"] = serde_json::Value::Null;
            }
            reports.push(fr);
        }
        assert_eq!(reports[0], reports[1], "{s}: pickle and JSON disagree");
    }
}

#[test]
fn gloo_whole_reports() {
    for (s, ..) in GLOO {
        for kind in ["pickle", "json"] {
            let dir = format!("{DATA}/{s}/{kind}");
            let (_, table) = run(&["nccl-log", &dir]);
            insta::assert_snapshot!(format!("fr_gloo_{s}_{kind}_table"), table);
            let (_, v) = json(&[&dir]);
            insta::assert_json_snapshot!(format!("fr_gloo_{s}_{kind}_json"), v["data"]);
        }
    }
}

/// NCCL-format jobs: (job, cause, ranks) with dumps and log together.
const NCCL: &[(&str, Option<&str>, &[u32])] = &[
    ("fabric", Some("fr_all_entered_none_completed"), &[0, 1, 2, 3]),
    ("healthy", None, &[]),
    ("skip", Some("fr_rank_not_entered"), &[1]),
    ("dead", Some("fr_rank_no_dump"), &[3]),
    ("p2p", Some("fr_p2p_mismatch"), &[2]),
    ("p2p_batch", Some("fr_p2p_mismatch"), &[2]),
    ("coalesced", None, &[]),
    ("coalesced_mismatch", Some("fr_collective_mismatch"), &[2]),
];

#[test]
fn nccl_jobs_whole_reports_with_their_logs() {
    for (job, cause, ranks) in NCCL {
        for kind in ["pickle", "json"] {
            let dir = format!("{DATA}/nccl/{job}/{kind}");
            let log = format!("{DATA}/nccl/{job}/nccl.log");
            let (_, v) = json(&[&dir, &log]);
            let d = &v["data"];
            assert_eq!(
                d["flight_recorder"]["verdicts"][0]["cause"].as_str(),
                *cause,
                "{job} {kind}"
            );
            assert_eq!(blamed(d), *ranks, "{job} {kind}");
            let (_, table) = run(&["nccl-log", &dir, &log]);
            insta::assert_snapshot!(format!("fr_nccl_{job}_{kind}_table"), table);
            insta::assert_json_snapshot!(format!("fr_nccl_{job}_{kind}_json"), d);
        }
    }
}

#[test]
fn logs_and_dumps_of_one_job_name_the_same_culprit() {
    // skip: the log's timeouts leave rank 1 as the suspect; the dumps say rank 1 never
    // entered; together one verdict blames rank 1 on its host, the timeouts under it.
    let log = format!("{DATA}/nccl/skip/nccl.log");
    let dumps = format!("{DATA}/nccl/skip/pickle");
    let (_, alone) = json(&[&log]);
    assert_eq!(alone["data"]["verdicts"][0]["cause"], "collective_timeout");
    assert_eq!(alone["data"]["verdicts"][0]["suspects"], serde_json::json!([1]));
    let (_, fr) = json(&[&dumps]);
    assert_eq!(blamed(&fr["data"]), vec![1]);
    // Either order of inputs, logs first or dumps first.
    for args in [[&log, &dumps], [&dumps, &log]] {
        let (code, both) = json(&[args[0].as_str(), args[1].as_str()]);
        assert_eq!(code, 1);
        let v = &both["data"]["verdicts"];
        assert_eq!(v[0]["cause"], "fr_rank_not_entered");
        assert_eq!(v[0]["rank"], 1);
        assert_eq!(v[0]["host"], "node-a");
        assert_eq!(
            v.as_array().unwrap().len(),
            1,
            "the timeouts are knock-ons: {v:#}"
        );
        assert!(
            v[0]["explains"].to_string().contains("collective_timeout"),
            "{v:#}"
        );
    }
    // dead: the log says rank 3 ran out of GPU memory; the dumps, that it left none.
    let (_, both) = json(&[
        &format!("{DATA}/nccl/dead/json"),
        &format!("{DATA}/nccl/dead/nccl.log"),
    ]);
    let v = &both["data"]["flight_recorder"]["verdicts"][0];
    assert_eq!(v["cause"], "fr_rank_no_dump");
    assert_eq!(v["hosts"]["3"], "node-b");
    assert!(
        v["log_says"].to_string().contains("cuda_oom on node-b rank 3"),
        "{v:#}"
    );
    // fabric: the next step is a ring across exactly the job's two hosts.
    let (_, both) = json(&[
        &format!("{DATA}/nccl/fabric/pickle"),
        &format!("{DATA}/nccl/fabric/nccl.log"),
    ]);
    let next = both["data"]["verdicts"][0]["next"].as_str().unwrap().to_string();
    assert!(
        next.contains("-np 2 -H node-a,node-b ") && next.contains("fabprobe ring"),
        "{next}"
    );
}

#[test]
fn a_job_directory_holding_logs_and_dumps_is_read_by_content() {
    // One directory, names that say nothing: the dumps are told apart by their bytes.
    let tmp = tempfile::tempdir().unwrap();
    for r in 0..4 {
        std::fs::copy(
            format!("{DATA}/nccl/skip/pickle/nccl_trace_rank_{r}"),
            tmp.path().join(format!("out_{r}")),
        )
        .unwrap();
    }
    std::fs::copy(format!("{DATA}/nccl/skip/nccl.log"), tmp.path().join("stdout_99")).unwrap();
    let (code, v) = json(&[tmp.path().to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_eq!(v["data"]["verdicts"][0]["cause"], "fr_rank_not_entered");
    assert_eq!(v["data"]["verdicts"][0]["rank"], 1);
    assert_eq!(
        v["data"]["summary"]["inputs"].as_array().unwrap().len(),
        1,
        "the log alone is a log input"
    );
}

#[test]
fn a_bad_dump_is_named_and_costs_nothing_else() {
    let tmp = tempfile::tempdir().unwrap();
    for r in [0, 2, 3] {
        std::fs::copy(
            format!("{DATA}/skip/pickle/nccl_trace_rank_{r}"),
            tmp.path().join(format!("nccl_trace_rank_{r}")),
        )
        .unwrap();
    }
    // Rank 1's pickle cut short; rank 2's (the culprit's) JSON with a bad field.
    let p = std::fs::read(format!("{DATA}/skip/pickle/nccl_trace_rank_1")).unwrap();
    std::fs::write(tmp.path().join("nccl_trace_rank_1"), &p[..p.len() / 2]).unwrap();
    let (code, v) = json(&[tmp.path().to_str().unwrap()]);
    assert_eq!(code, 1);
    let d = &v["data"];
    assert_eq!(
        d["flight_recorder"]["verdicts"][0]["cause"],
        "fr_rank_not_entered"
    );
    assert_eq!(
        blamed(d),
        vec![2],
        "rank 1's unreadable dump is not taken for a dead rank"
    );
    let notes = d["flight_recorder"]["notes"].to_string();
    assert!(
        notes.contains("nccl_trace_rank_1") && notes.contains("not judged"),
        "{notes}"
    );

    let j = tmp.path().join("bad_5.json");
    std::fs::write(
        &j,
        br#"{"version":"2.10","entries":[{"collective_seq_id":[1],"process_group":["0","default_pg"]}]}"#,
    )
    .unwrap();
    let (_, v) = json(&[j.to_str().unwrap()]);
    let notes = v["data"]["flight_recorder"]["notes"].to_string();
    assert!(
        notes.contains("bad_5.json") && notes.contains("entries[0].collective_seq_id"),
        "{notes}"
    );
}

#[test]
fn inputs_in_any_order_give_one_report() {
    // The digest keeps per (group, seq) the calls in arrival order: the verdict must not
    // depend on it. 20 orders of the mismatch_dtype dumps (rank 2 missing) and NCCL p2p's.
    use fabprobe::nccl_log::flight::{Job, judge::judge, sniff};
    for dir in [
        format!("{DATA}/mismatch_dtype/pickle"),
        format!("{DATA}/nccl/p2p/json"),
    ] {
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        let mut reference = None;
        let mut seed = 0x9e37_79b9_u64;
        for _ in 0..20 {
            for i in (1..files.len()).rev() {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                files.swap(i, (seed >> 33) as usize % (i + 1));
            }
            let mut job = Job::new();
            for f in &files {
                let b = std::fs::read(f).unwrap();
                job.add(&f.display().to_string(), sniff(&b).unwrap(), &b).unwrap();
            }
            let r = judge(&job, &Default::default());
            let got: Vec<_> = r
                .verdicts
                .iter()
                .map(|v| {
                    (
                        v.cause,
                        v.ranks.clone(),
                        v.seq,
                        v.calls.clone(),
                        v.waiting.clone(),
                    )
                })
                .collect();
            match &reference {
                None => reference = Some(got),
                Some(want) => assert_eq!(&got, want, "{dir}"),
            }
        }
    }
    assert!(Path::new(DATA).join("TORCH_VERSION").exists());
}

/// `nccl-log INPUTS --html OUT.html` writes the page `report` draws from `nccl-log --format
/// json INPUTS`, byte for byte but the header's source, for every job here (each Gloo scenario and NCCL job, pickle
/// and JSON, with its log where it has one) and every saved NCCL log; stdout and the exit
/// status are what they are without --html, and nothing but the page is left in its folder
/// (it is written to a temporary file there and renamed).
#[test]
fn nccl_log_html_is_the_page_report_draws() {
    let mut jobs: Vec<Vec<String>> = Vec::new();
    for kind in ["pickle", "json"] {
        for (s, ..) in GLOO {
            jobs.push(vec![format!("{DATA}/{s}/{kind}")]);
        }
        for (job, ..) in NCCL {
            let log = format!("{DATA}/nccl/{job}/nccl.log");
            jobs.push(vec![format!("{DATA}/nccl/{job}/{kind}"), log]);
        }
    }
    let mut logs: Vec<String> = std::fs::read_dir("tests/data/nccl-logs")
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .map(|p| p.to_str().unwrap().to_string())
        .collect();
    logs.sort();
    assert!(logs.len() >= 30, "{} logs", logs.len());
    jobs.extend(logs.into_iter().map(|l| vec![l]));
    for inputs in &jobs {
        let ins: Vec<&str> = inputs.iter().map(String::as_str).collect();
        let dir = tempfile::tempdir().unwrap();
        let (saved, page) = (dir.path().join("job.json"), dir.path().join("job.html"));
        let mut a = vec!["--format", "json", "nccl-log"];
        a.extend(&ins);
        let (code, plain) = run(&a);
        std::fs::write(&saved, &plain).unwrap();
        a.extend(["--html", page.to_str().unwrap()]);
        assert_eq!(
            run(&a),
            (code, plain),
            "{inputs:?}: --html changed stdout or the exit status"
        );
        let drawn = dir.path().join("report.html");
        let (rc, _) = run(&[
            "report",
            saved.to_str().unwrap(),
            "--html",
            drawn.to_str().unwrap(),
        ]);
        assert_eq!(rc, 0, "{inputs:?}");
        // The one difference: the header's provenance names the command, not a saved file
        // (as ring's and sweep's pages do).
        let got = std::fs::read_to_string(&page).unwrap();
        let from = |f: &str| format!("From <code>{f}</code>");
        let want = std::fs::read_to_string(&drawn).unwrap();
        assert_eq!(
            want.matches(&from(saved.to_str().unwrap())).count(),
            1,
            "{inputs:?}"
        );
        let want = want.replace(&from(saved.to_str().unwrap()), &from("nccl-log"));
        assert!(got == want, "{inputs:?}: nccl-log --html and report differ");
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["job.html", "job.json", "report.html"], "{inputs:?}");
    }
    // A folder that does not exist is refused before anything is read (exit 2).
    let (code, out) = run(&[
        "nccl-log",
        &format!("{DATA}/skip/json"),
        "--html",
        "/nonexistent/x.html",
    ]);
    assert_eq!((code, out.as_str()), (2, ""));
}

/// One collective entry of a built dump: (group, seq, op, sizes, state), its record id its
/// place in the list plus the dump's first id.
type Rec = (&'static str, u64, &'static str, &'static [i64], &'static str);

fn built_dump(first_id: u64, recs: &[Rec]) -> String {
    let entries: Vec<serde_json::Value> = recs
        .iter()
        .enumerate()
        .map(|(i, (g, seq, op, sizes, state))| {
            let sizes: Vec<Vec<i64>> = sizes.iter().map(|&n| vec![n]).collect();
            let dtypes = vec!["Float"; sizes.len()];
            serde_json::json!({
                "record_id": first_id + i as u64, "process_group": [g, if *g == "0" { "default_pg" } else { "sub" }],
                "collective_seq_id": seq, "p2p_seq_id": 0, "is_p2p": false, "profiling_name": op,
                "input_sizes": sizes, "input_dtypes": dtypes, "output_sizes": sizes,
                "output_dtypes": dtypes, "state": state,
            })
        })
        .collect();
    serde_json::json!({"version": "2.10", "entries": entries,
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
                      "1": {"name": "1", "desc": "sub", "ranks": "[0, 1, 2, 3]"}}})
    .to_string()
}

const AR: &str = "nccl:all_reduce";
const END: &str = "nccl:coalesced";
/// seq 1 all_reduce; seq 2 a block of three all_reduce and its end; seq 3 all_reduce.
const STEP: &[Rec] = &[
    ("0", 1, AR, &[1024], "completed"),
    ("0", 2, AR, &[1024], "scheduled"),
    ("0", 2, AR, &[2048], "scheduled"),
    ("0", 2, AR, &[512], "scheduled"),
    ("0", 2, END, &[], "completed"),
    ("0", 3, AR, &[1024], "completed"),
];

/// Coalescing blocks (several entries of one group under one sequence number, PyTorch >=
/// 2.7) in every shape a dump can hold them: alike on every rank is no verdict whatever
/// else the buffer did (a block cut by the ring's wrap, another group's entries inside
/// it); a rank whose block differs (an op's size, the ops' order, a single op where the
/// others coalesced) is blamed alone.
#[test]
fn coalescing_blocks_are_one_call_on_each_rank() {
    let step = STEP.to_vec();
    // Rank 1's ring wrapped inside seq 2's block: its first two ops fell off.
    let cut: Vec<Rec> = STEP[3..].to_vec();
    let mut interleaved = STEP.to_vec();
    interleaved.insert(3, ("1", 7, AR, &[64], "completed"));
    let mut bigger = STEP.to_vec();
    bigger[2].3 = &[4096];
    let mut reordered = STEP.to_vec();
    reordered.swap(2, 3);
    let single: Vec<Rec> = vec![STEP[0], ("0", 2, AR, &[1024], "completed"), STEP[5]];
    type Case = (
        &'static str,
        Vec<(u64, Vec<Rec>)>,
        Option<&'static str>,
        Vec<u32>,
        Option<&'static str>,
    );
    let alike = |r1: (u64, Vec<Rec>)| -> Vec<(u64, Vec<Rec>)> {
        vec![(0, step.clone()), r1, (0, step.clone()), (0, step.clone())]
    };
    let cases: Vec<Case> = vec![
        ("alike", alike((0, step.clone())), None, vec![], None),
        ("wrapped inside a block", alike((3, cut)), None, vec![], None),
        (
            "another group inside a block",
            alike((0, interleaved)),
            None,
            vec![],
            None,
        ),
        (
            "an op's size",
            alike((0, bigger)),
            Some("fr_collective_mismatch"),
            vec![1],
            Some("sizes differ"),
        ),
        (
            "the ops' order",
            alike((0, reordered)),
            Some("fr_collective_mismatch"),
            vec![1],
            Some("sizes differ"),
        ),
        (
            "a single op",
            alike((0, single)),
            Some("fr_collective_mismatch"),
            vec![1],
            Some("a coalesced block on some ranks, a single op on others"),
        ),
    ];
    for (what, ranks, cause, blame, why) in cases {
        let tmp = tempfile::tempdir().unwrap();
        for (r, (first, recs)) in ranks.iter().enumerate() {
            let f = tmp.path().join(format!("nccl_trace_rank_{r}.json"));
            std::fs::write(f, built_dump(*first, recs)).unwrap();
        }
        let (_, v) = json(&[tmp.path().to_str().unwrap()]);
        let fr = &v["data"]["flight_recorder"];
        let verdicts = fr["verdicts"].as_array().cloned().unwrap_or_default();
        assert_eq!(
            verdicts.first().and_then(|v| v["cause"].as_str()),
            cause,
            "{what}: {fr}"
        );
        assert_eq!(blamed(&v["data"]), blame, "{what}: {fr}");
        if let Some(why) = why {
            assert!(
                verdicts[0]["meaning"].as_str().unwrap_or("").contains(why),
                "{what}: {fr}"
            );
        }
    }
}

/// A dump of one all_reduce (completed) then one P2P batch under P2P sequence number 1:
/// `ops` its send/recv (`scheduled`, as ops inside a batch stay), then its end
/// `nccl:coalesced` in `end_state`.
fn batch_dump(ops: &[String], end_state: &str) -> String {
    let p2p = |i: usize, op: &str, state: &str| {
        let sizes: Vec<Vec<i64>> = if op == END { vec![] } else { vec![vec![1024]] };
        serde_json::json!({
            "record_id": i, "process_group": ["0", "default_pg"], "collective_seq_id": 1,
            "p2p_seq_id": 1, "is_p2p": true, "profiling_name": op, "input_sizes": sizes,
            "output_sizes": sizes, "input_dtypes": [], "output_dtypes": [], "state": state,
        })
    };
    let mut entries = vec![serde_json::json!({
        "record_id": 0, "process_group": ["0", "default_pg"], "collective_seq_id": 1,
        "p2p_seq_id": 0, "is_p2p": false, "profiling_name": AR, "input_sizes": [[4]],
        "output_sizes": [[4]], "input_dtypes": ["Float"], "output_dtypes": ["Float"],
        "state": "completed",
    })];
    for (i, op) in ops.iter().enumerate() {
        entries.push(p2p(i + 1, op, "scheduled"));
    }
    entries.push(p2p(ops.len() + 1, END, end_state));
    serde_json::json!({"version": "2.10", "entries": entries,
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}}})
    .to_string()
}

/// batch_isend_irecv rings (every rank sends to the next and receives from the previous
/// in one batch): a completed or a matched batch is no verdict; a batch with an op whose
/// peer has no op toward it is fr_p2p_mismatch, blaming the rank whose op breaks the ring's
/// pattern (a receive from the wrong peer, a send to the wrong peer), never its neighbour;
/// a rank that never issued its batch is blamed, not the two neighbours that wait on it.
#[test]
fn batched_p2p_ops_are_matched_to_their_peers() {
    type Case = (
        &'static str,
        &'static str,
        Option<(usize, usize, usize)>,
        Option<&'static str>,
        Vec<u32>,
    );
    let cases: Vec<Case> = vec![
        ("completed ring", "completed", None, None, vec![]),
        ("matched ring, hung", "started", None, None, vec![]),
        // (rank, 0 = its send / 1 = its recv, the wrong peer)
        (
            "rank 2 receives from 0",
            "started",
            Some((2, 1, 0)),
            Some("fr_p2p_mismatch"),
            vec![2],
        ),
        (
            "rank 1 sends to 3",
            "started",
            Some((1, 0, 3)),
            Some("fr_p2p_mismatch"),
            vec![1],
        ),
        (
            "rank 3 receives from 1",
            "started",
            Some((3, 1, 1)),
            Some("fr_p2p_mismatch"),
            vec![3],
        ),
    ];
    for (what, end_state, wrong, cause, blame) in cases {
        let tmp = tempfile::tempdir().unwrap();
        for r in 0..4usize {
            let (mut to, mut from) = ((r + 1) % 4, (r + 3) % 4);
            match wrong {
                Some((w, 0, p)) if w == r => to = p,
                Some((w, 1, p)) if w == r => from = p,
                _ => {}
            }
            let ops = [format!("nccl:send {r}->{to}"), format!("nccl:recv {r}<-{from}")];
            let f = tmp.path().join(format!("nccl_trace_rank_{r}.json"));
            let mut dump = batch_dump(&ops, end_state);
            if wrong.is_some_and(|(w, k, _)| w == r && k == 2) {
                // Only its all_reduce: the batch was never issued.
                let mut d: serde_json::Value = serde_json::from_str(&dump).unwrap();
                d["entries"].as_array_mut().unwrap().truncate(1);
                dump = d.to_string();
            }
            std::fs::write(f, dump).unwrap();
        }
        let (_, v) = json(&[tmp.path().to_str().unwrap()]);
        let fr = &v["data"]["flight_recorder"];
        let first = fr["verdicts"]
            .as_array()
            .and_then(|a| a.first())
            .and_then(|v| v["cause"].as_str());
        assert_eq!(first, cause, "{what}: {fr}");
        assert_eq!(blamed(&v["data"]), blame, "{what}: {fr}");
    }
}
