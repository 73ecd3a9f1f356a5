//! `nccl-log` reads an input in chunks on several threads and merges the chunks' states:
//! the report must be the one a single pass over the lines gives, wherever the input is
//! cut (by the chunk size, or by how the reader hands out bytes), with every kind of state
//! that crosses a cut (NCCL version, hosts and their ids, ranks and communicators, first
//! errors and error trails, de-duplication and the caps on what is kept).

use std::io::Read;

use fabprobe::nccl_log::generate::{Scenario, job};
use fabprobe::nccl_log::{Analyzer, ReadOptions, Report};
use proptest::prelude::*;

/// Hands out the input in the pieces given (cycled), as a pipe or a slow disk may.
struct Pieces<'a> {
    data: &'a [u8],
    sizes: Vec<usize>,
    i: usize,
}

impl Read for Pieces<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let want = self.sizes[self.i % self.sizes.len()].max(1);
        self.i += 1;
        let n = want.min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

/// The reference: one thread, the whole input as one chunk.
fn one_pass(data: &[u8]) -> Report {
    let mut a = Analyzer::new();
    let opts = ReadOptions {
        threads: 1,
        chunk_bytes: 64 << 20,
    };
    a.read_with("in.log", data, &opts).unwrap();
    a.finish()
}

fn chunked(data: &[u8], threads: usize, chunk_bytes: usize, pieces: Vec<usize>) -> Report {
    let mut a = Analyzer::new();
    let opts = ReadOptions { threads, chunk_bytes };
    let r = Pieces {
        data,
        sizes: pieces,
        i: 0,
    };
    a.read_with("in.log", r, &opts).unwrap();
    a.finish()
}

fn corpus() -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir("tests/data/nccl-logs")
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
        .collect();
    v.sort();
    assert!(v.len() >= 30, "corpus not found");
    v
}

#[test]
fn every_corpus_log_cut_at_every_offset_gives_the_one_pass_report() {
    for (name, data) in corpus() {
        let want = one_pass(&data);
        for k in 1..data.len() {
            // Chunks cut at the first line end past every multiple of k, the bytes handed out
            // k at a time then all at once: every line is split between two reads somewhere.
            let got = chunked(&data, 2, k, vec![k, data.len()]);
            assert_eq!(got, want, "{name} cut at {k}");
        }
    }
}

/// Inputs whose bytes are awkward at a cut: CRLF, a last line without a newline, invalid
/// UTF-8, lines over the limit, records glued on one line, colour codes, blank lines.
fn awkward() -> Vec<(&'static str, Vec<u8>)> {
    let mut long = b"h1:1:2 [0] NCCL INFO ".to_vec();
    long.extend(std::iter::repeat_n(b'x', 70_000));
    long.extend_from_slice(b" NCCL WARN hidden past the cut\nh1:1:2 [0] NCCL WARN Cuda failure 'x'\n");
    let mut huge_last = b"h2:3:4 [1] NCCL INFO NET/IB : No device found.\n".to_vec();
    huge_last.extend(std::iter::repeat_n(b'y', 300_000));
    vec![
        (
            "crlf",
            b"NCCL version 2.18.5+cuda12.0\r\nh1:10:11 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 - Init START\r\nh2:20:21 [1] NCCL INFO comm 0x1 rank 1 nranks 2 cudaDev 1 - Init START\r\nh1:10:11 [0] transport/net_ib.cc:1697 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1> with status=12 opcode=0 len=0 vendor err 129\r\n".to_vec(),
        ),
        (
            "no final newline",
            b"h1:10:11 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\nh1:10:11 [0] misc/socket.cc:50 NCCL WARN socketPollConnect: Connect to 10.0.0.2<5> returned 111(Connection refused)".to_vec(),
        ),
        (
            "invalid utf-8",
            b"h1:10:11 [0] NCCL INFO \xff\xfe comm 0x1 rank 0 nranks 2\n\xc3\x28 h1:10:11 [0] NCCL WARN \xe2\x82 Call to ibv_reg_mr failed\n\x00\x01binary\n".to_vec(),
        ),
        ("long line", long),
        ("huge last line", huge_last),
        (
            "glued and coloured",
            b"\x1b[31ma:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPCb:3:4 [1] NCCL WARN Call to ibv_open_device failed\x1b[0m\n\n   \n[rank3]:[E1130 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE) ran for 1 milliseconds\n".to_vec(),
        ),
        ("empty", Vec::new()),
        ("newlines only", b"\n\n\r\n\n".to_vec()),
    ]
}

#[test]
fn awkward_bytes_cut_anywhere_give_the_one_pass_report() {
    for (name, data) in awkward() {
        let want = one_pass(&data);
        let step = (data.len() / 400).max(1);
        for k in (1..data.len().max(2)).step_by(step) {
            for threads in [2, 3] {
                let got = chunked(&data, threads, k, vec![k, 1, 3 * k + 1]);
                assert_eq!(got, want, "{name} cut at {k}, {threads} threads");
            }
        }
    }
}

#[test]
fn the_long_line_is_cut_and_counted_the_same_way() {
    let (_, data) = awkward().into_iter().find(|x| x.0 == "long line").unwrap();
    let r = one_pass(&data);
    assert_eq!(r.summary.truncated_lines, 1);
    assert_eq!(r.summary.lines, 2);
    assert_eq!(r.summary.bytes, data.len() as u64);
    // The WARN past the limit is not read; the next line's is.
    assert_eq!(r.verdicts[0].cause, "cuda_error");
    assert_eq!(r.verdicts[0].line_no, 2);
}

/// One process printing communicator lines of different sizes (a sub-communicator after
/// the world one, lines without a size): the widest communicator's rank, wherever cut.
#[test]
fn a_process_rank_is_the_widest_communicators_wherever_the_cut() {
    let lines = [
        "h:1:2 [0] NCCL INFO comm 0xa rank 5 - Init START",
        "h:1:2 [0] NCCL INFO comm 0xa rank 6 - Init START",
        "h:1:2 [0] NCCL INFO comm 0xb rank 3 nranks 8 cudaDev 0 - Init START",
        "h:1:2 [0] NCCL INFO comm 0xc rank 1 nranks 4 cudaDev 0 - Init START",
        "h:1:2 [0] NCCL INFO comm 0xd rank 9 nranks 16 cudaDev 0 - Init START",
        "h:1:2 [0] NCCL INFO comm 0xe rank 2 nranks 16 cudaDev 0 - Init START",
        "h:1:2 [0] NCCL INFO comm 0xf rank 7 - Init START",
        "h:1:2 [0] misc/socket.cc:50 NCCL WARN Call to ibv_reg_mr failed",
    ];
    for n in 1..=lines.len() {
        let data = lines[..n].join("\n").into_bytes();
        let want = one_pass(&data);
        for k in 1..data.len() {
            assert_eq!(chunked(&data, 2, k, vec![k]), want, "{n} lines cut at {k}");
        }
    }
    let all = one_pass(lines.join("\n").as_bytes());
    assert_eq!(all.verdicts[0].rank, Some(9));
}

/// More distinct failures and connections than are kept: the chunks' capped states merge to
/// the same kept lists and the same count of what was not kept.
#[test]
fn caps_on_kept_sightings_and_connections_merge_exactly() {
    let mut log = String::new();
    // 30,000 connections, every one printed twice (later ones repeat earlier ones).
    for pass in 0..2 {
        for i in 0..30_000u32 {
            let (a, b) = if pass == 0 {
                (i, i + 1)
            } else {
                (29_999 - i, 30_000 - i)
            };
            log.push_str(&format!(
                "h{}:{}:1 [0] NCCL INFO Channel 00/0 : {a}[0] -> {b}[1] via P2P/IPC\n",
                a % 64,
                a
            ));
        }
    }
    // 60,000 timeouts on distinct sequence numbers, and their repeats.
    for i in 0..60_000u32 {
        log.push_str(&format!(
            "[rank{}]:[E1130 ProcessGroupNCCL.cpp:632] [Rank {}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={}, OpType=ALLREDUCE) ran for 1 milliseconds\n",
            i % 512,
            i % 512,
            i / 3
        ));
    }
    let data = log.into_bytes();
    let want = one_pass(&data);
    assert_eq!(want.summary.connections.len(), 20_000);
    assert_eq!(want.summary.connections_dropped, 20_000);
    for (threads, chunk) in [(2, 64 << 10), (3, 1 << 20), (2, 7919)] {
        assert_eq!(
            chunked(&data, threads, chunk, vec![100_000]),
            want,
            "{threads} x {chunk}"
        );
    }
}

#[test]
fn a_generated_job_log_reads_the_same_on_any_thread_count() {
    for sc in [
        Scenario::RetryExceeded {
            host: 5,
            peer_host: 2,
            hca: 3,
        },
        Scenario::Hang { stuck: 20, n: 2 },
    ] {
        let mut data = Vec::new();
        job(&mut data, 8, 8, sc, 40_000, 11).unwrap();
        let want = one_pass(&data);
        assert!(!want.verdicts.is_empty());
        for (threads, chunk) in [(2, 1 << 20), (4, 100_003), (8, 4096)] {
            let got = chunked(&data, threads, chunk, vec![256 << 10, 17, 65_536]);
            assert_eq!(got, want, "{sc:?} {threads} x {chunk}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Lines drawn from every corpus log, shuffled together with CRLF and missing final
    /// newlines, read in random pieces and chunk sizes.
    #[test]
    fn corpus_lines_in_any_order_and_cut_give_the_one_pass_report(
        picks in proptest::collection::vec(any::<prop::sample::Index>(), 1..120),
        crlf in any::<bool>(),
        final_newline in any::<bool>(),
        threads in 2usize..5,
        chunk in 1usize..2000,
        pieces in proptest::collection::vec(1usize..700, 1..6),
    ) {
        static LINES: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
        let pool = LINES.get_or_init(|| {
            corpus()
                .into_iter()
                .flat_map(|(_, d)| d.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect::<Vec<_>>())
                .collect()
        });
        let mut data = Vec::new();
        for (i, p) in picks.iter().enumerate() {
            let l: &Vec<u8> = p.get(pool);
            data.extend_from_slice(l);
            if i + 1 < picks.len() || final_newline {
                data.extend_from_slice(if crlf { b"\r\n" } else { b"\n" });
            }
        }
        let want = one_pass(&data);
        prop_assert_eq!(chunked(&data, threads, chunk, pieces), want);
    }
}

/// `MAX_LINE_BYTES`: where a line is cut.
const LINE_LIMIT: usize = 64 * 1024;

/// Pieces of lines for the UTF-8 reference test: headers and messages, valid multi-byte
/// characters, invalid bytes, a character cut short, CR.
const UTF8_PIECES: &[&[u8]] = &[
    b"h1:10:11 [0] NCCL WARN ",
    b"h2:20:21 [1] NCCL INFO ",
    b"Call to ibv_reg_mr failed ",
    b"comm 0x1 rank 0 nranks 2 cudaDev 0",
    b"[rank3]:[E1130 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE)",
    "é".as_bytes(),
    "€".as_bytes(),
    "😀".as_bytes(),
    b"\xff",
    b"\xe2\x82",
    b"\xc3",
    b"\r",
    b" ",
    b"x",
];

/// The reference for the chunk-wide UTF-8 check: each line cut at the limit, its CR/LF
/// trimmed and decoded on its own (lossily when not UTF-8), fed one by one; the summary's
/// input-level counts are set as a read sets them.
fn line_by_line(data: &[u8]) -> Report {
    let mut a = Analyzer::new();
    let mut lines: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    if lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    let mut truncated = 0;
    for (i, mut l) in lines.into_iter().enumerate() {
        if l.len() > LINE_LIMIT {
            truncated += 1;
            l = &l[..LINE_LIMIT];
        }
        while let [rest @ .., b'\r' | b'\n'] = l {
            l = rest;
        }
        a.feed("in.log", i as u64 + 1, &String::from_utf8_lossy(l));
    }
    let mut r = a.finish();
    r.summary.inputs = vec!["in.log".into()];
    r.summary.bytes = data.len() as u64;
    r.summary.truncated_lines = truncated;
    r
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// A chunk checked for UTF-8 once, its lines sliced from it, gives the report of lines
    /// decoded one by one: with invalid bytes anywhere, and with a line over the limit whose
    /// cut falls before, inside or after a multi-byte character.
    #[test]
    fn a_chunk_checked_for_utf8_once_reads_as_lines_decoded_one_by_one(
        lines in proptest::collection::vec(proptest::collection::vec(0usize..UTF8_PIECES.len(), 0..8), 1..30),
        long in proptest::option::of((0usize..5, 0usize..3, 0usize..30)),
    ) {
        let mut data = Vec::new();
        for (i, l) in lines.iter().enumerate() {
            for &p in l {
                data.extend_from_slice(UTF8_PIECES[p]);
            }
            if let Some((off, ch, at)) = long
                && at == i
            {
                // A WARN whose text runs past the limit, a character `off` bytes before it.
                let c = ["é", "€", "😀"][ch].as_bytes();
                data.extend_from_slice(b"h3:30:31 [2] NCCL WARN Cuda failure ");
                let fill = LINE_LIMIT.saturating_sub(data.len() - data.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1) + off);
                data.extend(std::iter::repeat_n(b'x', fill));
                data.extend_from_slice(c);
                data.extend_from_slice(b" tail");
            }
            data.push(b'\n');
        }
        let want = line_by_line(&data);
        prop_assert!(one_pass(&data) == want, "one pass");
        prop_assert!(chunked(&data, 2, 4096, vec![1000, 7]) == want, "chunks on two threads");
    }
}
