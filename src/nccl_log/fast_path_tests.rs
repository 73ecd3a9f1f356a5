//! The fast paths give the full reading's answer: a WARN repeat dropped on its rule's cause
//! alone, and the keyword tests that a Bloom filter of byte pairs answers first.

use proptest::prelude::*;

use super::events::{self, Event};
use super::line::{self, Level};
use super::{Analyzer, ReadOptions, Report};

/// Pieces of the fields the WARN readings take out, and fragments that cut and glue the
/// registry's keywords ([`super::causes::keywords`], every text of every WARN rule).
const FIELDS: &[&str] = &[
    "from peer 10.0.0.2<41237> ",
    "with error 12, ",
    "with status=5 ",
    "status=12 ",
    "status=transport retry counter exceeded(12) ",
    "vendor err 129 ",
    "localGid ::ffff:10.0.0.1 ",
    "remoteGids::ffff:10.0.0.2 ",
    " hca mlx5_3",
    " : port error",
    " : GID table change",
    "rank 3 ",
    " 10.1.2.3<50917>",
    " 111(Connection refused)",
    "retcode 3",
    "res=6",
    "NET/IB : ",
    "NET/OFI ",
    "Got",
    "timeout",
    "exceeded",
    " ",
    ", ",
    ":",
    "Conne",
    "fail",
    "ibv",
];

/// The registry's keywords, then the field pieces.
fn pieces() -> Vec<&'static str> {
    let mut p = super::causes::keywords();
    p.extend(FIELDS);
    p
}

fn message(picks: &[(usize, u8)]) -> String {
    let pieces = pieces();
    let mut m = String::new();
    for &(i, junk) in picks {
        m.push_str(pieces[i % pieces.len()]);
        // Stray bytes between the pieces, so that keywords are also cut and glued.
        if junk % 3 == 0 {
            m.push(char::from(b'a' + junk % 26));
        }
    }
    m
}

fn read(log: &str, full_path: bool, threads: usize) -> Report {
    let mut a = Analyzer::new();
    a.full_path = full_path;
    let opts = ReadOptions {
        threads,
        chunk_bytes: 512,
    };
    a.read_with("random.log", log.as_bytes(), &opts).unwrap();
    a.finish()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Lines of random WARNs (and INFOs) from a few processes, repeats included: dropping
    /// repeats on the rule's cause gives the report that reading every line in full gives.
    #[test]
    fn dropping_warn_repeats_early_gives_the_full_report(
        lines in proptest::collection::vec(
            (0usize..6, 0usize..3, any::<bool>(), proptest::collection::vec((0usize..200, any::<u8>()), 0..5)),
            1..80,
        ),
    ) {
        let mut log = String::new();
        for (proc_, label, warn, picks) in &lines {
            let level = if *warn { "WARN" } else { "INFO" };
            // Processes with and without a pid, behind launcher labels or not.
            let hdr = match proc_ {
                0 => format!("node{label}:100:101 [0] misc/socket.cc:49"),
                1 => format!("{label}: node1:200:201 [1]"),
                2 => format!("[rank{label}]:node2 [2]"),
                3 => "<hostname>:<pid> [3]".to_string(),
                4 => String::new(),
                _ => format!("[1,{label}]<stdout>:node5:500:501 [5]"),
            };
            log.push_str(&format!("{hdr} NCCL {level} {}\n", message(picks)));
        }
        let full = read(&log, true, 1);
        prop_assert!(read(&log, false, 1) == full, "one thread:\n{log}");
        prop_assert!(read(&log, false, 3) == full, "three threads:\n{log}");
    }

    /// The cause a rule gives without reading the fields is the event's cause.
    #[test]
    fn a_rules_cheap_cause_is_its_events_cause(picks in proptest::collection::vec((0usize..200, any::<u8>()), 0..6)) {
        // classify reads the message trimmed, as the analyser's WARN path does.
        let m = message(&picks);
        let m = m.trim();
        let rule = events::warn_rule(m);
        let ev = rule.event(m);
        if let Some(cause) = rule.cause(m) {
            match &ev {
                Event::Failure(f) => {
                    prop_assert_eq!(f.cause, cause, "{}", m);
                    prop_assert_eq!((f.rank, f.seq), (None, None), "{}", m);
                }
                other => prop_assert!(false, "{m}: {other:?}"),
            }
        }
        prop_assert_eq!(events::classify(Level::Warn, m), Some(ev));
    }

    /// The Bloom filter never hides a keyword: the rule is the one plain searches give.
    #[test]
    fn the_filtered_keyword_tests_match_plain_searches(picks in proptest::collection::vec((0usize..200, any::<u8>()), 0..6)) {
        let m = message(&picks);
        prop_assert_eq!(events::warn_rule(&m), events::warn_rule_plain(&m), "{}", m);
    }
}

/// Pieces of markers, keywords and their near misses, for the searches' own tests.
const BITS: &[&str] = &[
    "N",
    "NCCL",
    "NCCL ",
    "CCL ",
    "INFO ",
    "WARN ",
    "TRACE ",
    "INFO",
    "WAR",
    "C",
    "L",
    " ",
    "x",
    "é",
    "Got completion",
    "Got",
    "Go",
    "ProcessGroupNCCL",
    "\u{1b}[0m",
];

fn glue(picks: &[usize]) -> String {
    picks.iter().map(|&i| BITS[i % BITS.len()]).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// The line's NCCL markers, found by memchr and compared in place, are the ones a plain
    /// substring search finds.
    #[test]
    fn marker_search_matches_plain_search(picks in proptest::collection::vec(0usize..64, 0..24)) {
        let s = glue(&picks);
        let mut plain = Vec::new();
        let mut from = 0;
        while let Some(i) = s[from..].find("NCCL ") {
            let at = from + i;
            let level = [("NCCL INFO ", Level::Info), ("NCCL WARN ", Level::Warn), ("NCCL TRACE ", Level::Trace)]
                .iter()
                .find(|(m, _)| s[at..].starts_with(m))
                .map(|&(_, l)| l);
            plain.extend(level.map(|l| (at, l)));
            from = at + 5;
        }
        prop_assert_eq!(line::marker_positions(&s), plain.clone(), "{:?}", s);
        let marks = match plain.as_slice() {
            [] => line::Marks::None,
            [(at, l)] => line::Marks::One(*at, *l),
            _ => line::Marks::Many,
        };
        prop_assert_eq!(line::marks(&s), marks, "{:?}", s);
    }

    /// The keyword search with its in-place compare is `str::find`.
    #[test]
    fn keyword_search_matches_str_find(
        hay in proptest::collection::vec(0usize..64, 0..24),
        needle in proptest::collection::vec(0usize..64, 0..4),
    ) {
        let (h, n) = (glue(&hay), glue(&needle));
        prop_assert_eq!(events::find(&h, &n), h.find(n.as_str()), "{:?} in {:?}", n, h);
    }

    /// A chunk read with its colour codes looked for once per chunk gives the report of
    /// lines fed one by one (each looked at for colour codes).
    #[test]
    fn chunk_wide_colour_check_gives_the_line_by_line_report(
        lines in proptest::collection::vec(proptest::collection::vec(0usize..64, 0..12), 1..40),
    ) {
        let mut log = String::new();
        for (i, l) in lines.iter().enumerate() {
            log.push_str(&format!("h{}:1:2 [0] {}\n", i % 3, glue(l)));
        }
        let mut one_by_one = Analyzer::new();
        one_by_one.inputs.push("random.log".into());
        for (i, l) in log.lines().enumerate() {
            one_by_one.feed("random.log", i as u64 + 1, l);
        }
        one_by_one.bytes = log.len() as u64;
        prop_assert!(read(&log, false, 1) == one_by_one.finish(), "{}", log);
    }
}

#[test]
fn rules_cover_the_corpus_warns() {
    // Every WARN of the corpus, read both ways, gives one report.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/nccl-logs");
    let mut rules = std::collections::BTreeSet::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "log") {
            continue;
        }
        let text = String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned();
        // Each log twice over: the second copy is all repeats.
        let twice = format!("{text}\n{text}");
        assert!(read(&twice, false, 1) == read(&twice, true, 1), "{}", p.display());
        for l in text.lines() {
            if let Some(i) = l.find("NCCL WARN ") {
                rules.insert(format!("{:?}", events::warn_rule(l[i + 10..].trim())));
            }
        }
    }
    assert!(
        rules.len() >= 8,
        "the corpus should exercise most rules: {rules:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Headers around the length the header cache keeps (64 bytes), with NUL bytes and
    /// launcher prefixes, repeated: the cached reading is the one that parses every line.
    #[test]
    fn headers_around_the_cached_length_read_as_parsed(
        lines in proptest::collection::vec((0usize..6, 50usize..72, 0usize..3, any::<bool>()), 1..60),
    ) {
        let mut log = String::new();
        for (p, len, level, nul) in &lines {
            let tail = format!(":{}:{} [{}] ", 100 + p, 200 + p, p % 4);
            let mut host = format!("h{p}");
            if *nul {
                host.push('\0');
            }
            while host.len() + tail.len() < *len {
                host.push('x');
            }
            let prefix = if p % 2 == 0 { format!("{p}: ") } else { String::new() };
            let (lv, msg) = [("INFO", "comm 0x1 rank 3 nranks 8 cudaDev 3"), ("WARN", "Call to ibv_reg_mr failed"), ("INFO", "AllReduce: opCount 1")][*level];
            log.push_str(&format!("{prefix}{host}{tail}NCCL {lv} {msg}\n"));
        }
        let full = read(&log, true, 1);
        prop_assert!(read(&log, false, 1) == full, "one thread:\n{log}");
        prop_assert!(read(&log, false, 3) == full, "three threads:\n{log}");
    }
}

/// What may stand between a header's `[dev]` and the marker: source locations (NCCL's
/// `file.cc:line`, a plugin's `function:line`) that the header cache's key leaves out, and
/// tokens that only look like one, which it keeps.
const SOURCES: &[&str] = &[
    "",
    " transport/net_ib.cc:1697",
    " misc/socket.cc:49",
    " register_mr_buffers:544",
    "  init.cc:12 ",
    " [misc/socket.cc:586]",
    " x.cc:12]",
    " func:line",
    " plain",
    " a.b",
    " :",
    " [2] net.cc:3",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// One process's lines from several source locations share one cached header; the
    /// reading is the one that parses every line.
    #[test]
    fn headers_from_different_source_lines_read_as_parsed(
        lines in proptest::collection::vec((0usize..4, 0usize..SOURCES.len(), 0usize..3, any::<bool>()), 1..60),
    ) {
        let mut log = String::new();
        for (p, src, level, label) in &lines {
            let prefix = if *label { format!("{p}: ") } else { String::new() };
            let (lv, msg) = [("INFO", "comm 0x1 rank 3 nranks 8 cudaDev 3"), ("WARN", "Call to ibv_reg_mr failed"), ("INFO", "transport/net.cc:1302 -> 6")][*level];
            log.push_str(&format!("{prefix}host{p}:{}:{} [{}]{} NCCL {lv} {msg}\n", 100 + p, 200 + p, p % 2, SOURCES[*src]));
        }
        let full = read(&log, true, 1);
        prop_assert!(read(&log, false, 1) == full, "one thread:\n{log}");
        prop_assert!(read(&log, false, 3) == full, "three threads:\n{log}");
    }
}
