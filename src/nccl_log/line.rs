//! One log line, taken apart: the launcher's prefix, NCCL's header and the message.
//!
//! NCCL's header (`src/debug.cc`): `host:pid:tid [cudaDev] ` then, for WARN (and INFO with
//! NCCL_DEBUG_SUBSYS=ALL traces), `file.cc:line `, then `NCCL INFO|WARN|TRACE ` and the
//! message. Some deployments print `host [dev]` without pid and tid, and NCCL >= 2.2x may
//! lead with its own `[YYYY-MM-DD HH:MM:SS] ` timestamp. The bare `NCCL version X` banner
//! and PyTorch's ProcessGroupNCCL lines have no header at all.
//!
//! Launcher prefixes (found anywhere before the header, and parsed only for a rank label):
//! `mpirun --tag-output`/`--timestamp-output` `[1,N]<stdout>:` (after a ctime stamp),
//! `srun -l` `N: `, PyTorch/torchrun `[rankN]:` and `[defaultN]:`, pdsh `host: `,
//! container runtimes' RFC 3339 stamps, and any other leading `[...]` tags.

/// Which of NCCL's levels printed the line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Level {
    Info,
    Warn,
    Trace,
}

/// A line with an NCCL header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Nccl<'a> {
    pub host: &'a str,
    pub pid: Option<u32>,
    pub dev: Option<i32>,
    /// `misc/ibvwrap.cc:262`, when printed.
    pub src: Option<&'a str>,
    pub level: Level,
    pub msg: &'a str,
}

/// A rank label a launcher put in front of the line.
pub(crate) fn prefix_rank(prefix: &str) -> Option<u32> {
    let p = prefix.trim();
    if p.is_empty() {
        return None;
    }
    // Bracketed labels need a ']' (a byte search): skip the pattern searches without one.
    if !p.as_bytes().contains(&b']') {
        let d = p.strip_suffix(':')?;
        let d = d.rsplit(' ').next().unwrap_or(d);
        return (!d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
            .then(|| d.parse().ok())
            .flatten();
    }
    // mpirun: "[1,3]<stdout>:" (jobid, rank).
    let find = super::events::find;
    if let Some(i) = find(p, "]<std") {
        let open = p[..i].rfind('[')?;
        let inner = &p[open + 1..i];
        return inner.split(',').nth(1)?.trim().parse().ok();
    }
    // PyTorch: "[rank3]:" (also after other tags).
    if let Some(i) = find(p, "[rank") {
        let rest = &p[i + 5..];
        let n = super::events::digits(rest);
        if rest[n.len()..].starts_with(']') {
            return n.parse().ok();
        }
    }
    // torchrun --tee: "[default3]:"
    if let Some(i) = find(p, "[default") {
        let rest = &p[i + 8..];
        let n = super::events::digits(rest);
        if rest[n.len()..].starts_with(']') {
            return n.parse().ok();
        }
    }
    // srun -l: "3: " (a label of digits only, the whole prefix or its last field).
    let last = p.rsplit(' ').next().unwrap_or(p);
    if let Some(d) = last.strip_suffix(':')
        && !d.is_empty()
        && d.bytes().all(|b| b.is_ascii_digit())
    {
        return d.parse().ok();
    }
    None
}

const MARKERS: [(&str, Level); 3] = [
    ("NCCL INFO ", Level::Info),
    ("NCCL WARN ", Level::Warn),
    ("NCCL TRACE ", Level::Trace),
];

/// Where the next `NCCL ` starts in `b` at or after `from`: memchr for its `N` (rare in
/// headers and in most messages), then the four bytes after it in place. Every line is
/// searched to its end (a second marker makes it two records), and per line this costs
/// less than a substring searcher's call.
fn next_nccl(b: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while let Some(j) = memchr::memchr(b'N', b.get(i..)?) {
        let at = i + j;
        if b[at + 1..].starts_with(b"CCL ") {
            return Some(at);
        }
        i = at + 1;
    }
    None
}

/// The level of the marker at `at` (where `NCCL ` starts), if it is one: the byte after
/// `NCCL ` picks the one marker it can be, compared in place (a memcmp call per candidate
/// cost more than the compare on every line).
fn marker_at(s: &str, at: usize) -> Option<Level> {
    let rest = s.as_bytes().get(at + 5..)?;
    let (word, level): (&[u8], _) = match rest.first()? {
        b'I' => (b"INFO ", Level::Info),
        b'W' => (b"WARN ", Level::Warn),
        b'T' => (b"TRACE ", Level::Trace),
        _ => return None,
    };
    let same = rest.len() >= word.len() && rest.iter().zip(word).all(|(a, b)| a == b);
    same.then_some(level)
}

/// Where each NCCL marker starts in `s`, in order.
pub(crate) fn marker_positions(s: &str) -> Vec<(usize, Level)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = next_nccl(s.as_bytes(), from) {
        out.extend(marker_at(s, at).map(|l| (at, l)));
        from = at + 5;
    }
    out
}

/// Parse `host:pid:tid [dev] [file:line ]NCCL LEVEL msg` where the marker is at `at`.
/// Returns the header and the byte offset where the host token starts.
pub(crate) fn parse_at(s: &str, at: usize, level: Level) -> Option<(Nccl<'_>, usize)> {
    let msg = s[at..]
        .split_once(' ')
        .map(|x| x.1)?
        .split_once(' ')
        .map(|x| x.1)
        .unwrap_or("");
    parse_header(s, at, level, msg)
}

/// NCCL 2.0-2.2 printed the level without `NCCL` (src/include/debug.h, the WARN, INFO and
/// TRACE macros: `"%s:%d:%d [%d] %s:%d WARN "` with `__FILE__`, `"%s:%d:%d [%d] INFO "`,
/// `"%s:%d:%d [%d] %s:%d TRACE "` with `__func__`); NCCL 1.x printed `"WARN %s:%d "` and no
/// header. A bare `WARN` is too common a word to trust alone: it counts only after such a
/// header (`[dev]`, and `file:line` for WARN) or, 1.x, first on the line before a
/// `file.cu:line`.
pub(crate) fn legacy(s: &str) -> Option<(&str, Nccl<'_>)> {
    // TRACE (debug builds only, `__func__:line` before it) is left out.
    for (word, level) in [(" WARN ", Level::Warn), (" INFO ", Level::Info)] {
        let Some(i) = super::events::find(s, word) else {
            continue;
        };
        let at = i + 1;
        let msg = &s[at + word.len() - 1..];
        let Some((n, start)) = parse_header(s, at, level, msg) else {
            continue;
        };
        if level == Level::Warn && n.src.is_none() {
            continue;
        }
        return Some((&s[..start], n));
    }
    // 2.0-2.3 pasted without its header: `include/socket.h:344 WARN Socket creation failed`
    // (a source location first, then the bare level).
    let t = s.trim_start();
    let (src, msg) = match t.strip_prefix("WARN ") {
        Some(rest) => rest.split_once(' ')?,
        None => {
            let (src, rest) = t.split_once(' ')?;
            (src, rest.strip_prefix("WARN ")?)
        }
    };
    let (file, line) = src.rsplit_once(':')?;
    let is_src = file.contains('.')
        && !file.contains(['[', ']', '<', '>'])
        && !line.is_empty()
        && line.bytes().all(|b| b.is_ascii_digit());
    is_src.then_some((
        "",
        Nccl {
            host: "",
            pid: None,
            dev: None,
            src: Some(src),
            level: Level::Warn,
            msg: msg.trim_end(),
        },
    ))
}

/// `register_mr_buffers:544`: plugins built with their own WARN macro (aws-ofi-nccl) put
/// the function name where NCCL puts the file.
fn func_line(w: &str) -> bool {
    w.split_once(':').is_some_and(|(f, l)| {
        !f.is_empty()
            && f.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !l.is_empty()
            && l.bytes().all(|b| b.is_ascii_digit())
    })
}

/// The bytes before the marker at `at` that a header is read from, and the optional
/// `file.cc:123` just before the marker, which the header's host, pid, device and launcher
/// prefix do not depend on: the header is a function of the first part alone (the header
/// cache's key, so a process's lines from different source lines share one entry).
pub(crate) fn split_src(s: &str, at: usize) -> (&str, Option<&str>) {
    let head = s[..at].trim_end();
    match head
        .bytes()
        .rposition(|b| b == b' ')
        .map(|i| (&head[..i], &head[i + 1..]))
    {
        Some((h, last))
            if !last.starts_with('[')
                && last.as_bytes().contains(&b':')
                && (last.as_bytes().contains(&b'.') || func_line(last))
                && !last.ends_with(']') =>
        {
            (h.trim_end(), Some(last))
        }
        _ => (head, None),
    }
}

/// The header before the level marker at `at`; `msg` is what follows the marker.
fn parse_header<'a>(s: &'a str, at: usize, level: Level, msg: &'a str) -> Option<(Nccl<'a>, usize)> {
    // Byte loops throughout (every delimiter is ASCII): this runs on every line, on a few
    // dozen bytes, where std's pattern searchers or memchr's dispatch cost more than the
    // search.
    let rpos = |h: &str, f: fn(u8) -> bool| h.bytes().rposition(f);
    let (head, src) = split_src(s, at);
    // "[dev]"
    let head = head.strip_suffix(']')?;
    let open = rpos(head, |b| b == b'[')?;
    // `[dev]` is a number; anything else (`[misc/socket.cc:586]`, `[host:pid=1]`) is some
    // other logger's header, read as no header at all.
    let dev = Some(head[open + 1..].trim().parse::<i32>().ok()?);
    let head = head[..open].trim_end();
    // "host:pid:tid" (or "host" alone), the last whitespace-separated token.
    let start = rpos(head, |b| b == b' ' || b == b'\t').map_or(0, |i| i + 1);
    let tok = &head[start..];
    // A launcher prefix glued on with ':' (`[1,0]<stdout>:host:1:2`, `[rank0]:host:...`).
    let glue = tok
        .as_bytes()
        .windows(2)
        .rposition(|w| w[1] == b':' && (w[0] == b']' || w[0] == b'>'));
    let (tok, start) = match glue {
        Some(i) => (&tok[i + 2..], start + i + 2),
        None => (tok, start),
    };
    if tok.is_empty() || tok.starts_with('[') {
        return None;
    }
    let (host, pid) = host_pid(tok);
    // Placeholders (`<hostname>`, `XXXX`, markdown-emphasised `*server name*`) name no host.
    // So does a token of punctuation alone (`::16674:17023`, a host name cut away).
    let host = if host.starts_with('<')
        || host.contains('*')
        || host.bytes().all(|b| b == b'X' || b == b'x')
        || !host.bytes().any(|b| b.is_ascii_alphanumeric())
    {
        ""
    } else {
        host
    };
    // A pdsh prefix "host: host:pid:tid" leaves the host intact; srun's "0: " likewise.
    Some((
        Nccl {
            host,
            pid,
            dev,
            src,
            level,
            msg,
        },
        start,
    ))
}

/// `host:pid:tid` -> (host, pid): the last two `:` fields must be digits (the pid may not
/// parse); a token without `:` is a host alone; an anonymised pid or tid
/// (`host-01:XXXXXX`) leaves the host and no process.
fn host_pid(tok: &str) -> (&str, Option<u32>) {
    let b = tok.as_bytes();
    let all_digits = |x: &str| x.bytes().all(|c| c.is_ascii_digit());
    if let Some(c2) = b.iter().rposition(|&c| c == b':') {
        if let Some(c1) = b[..c2].iter().rposition(|&c| c == b':') {
            let (host, pid, tid) = (&tok[..c1], &tok[c1 + 1..c2], &tok[c2 + 1..]);
            if all_digits(tid) && all_digits(pid) && !host.is_empty() {
                return (host, pid.parse().ok());
            }
        }
        let first = b.iter().position(|&c| c == b':').unwrap_or(b.len());
        return (&tok[..first], None);
    }
    (tok, None)
}

/// A record whose header did not parse (pasted without it, anonymised, markdown debris):
/// the message still counts, the host and pid are unknown. `file.cc:NNN` just before the
/// marker is kept when it is there.
fn headerless(s: &str, at: usize, level: Level) -> Option<(Nccl<'_>, usize)> {
    let rest = &s[at..];
    let msg = rest
        .split_once(' ')
        .map(|x| x.1)?
        .split_once(' ')
        .map(|x| x.1)
        .unwrap_or("");
    let head = s[..at].trim_end();
    let start = head.rfind([' ', '\t']).map(|i| i + 1).unwrap_or(0);
    let last = head[start..].trim_matches(|c: char| matches!(c, '_' | '*' | '`' | '>'));
    let src = (last.contains(':') && last.contains('.') && !last.ends_with(']'))
        .then(|| last.trim_end_matches(':'))
        .filter(|x| !x.is_empty());
    // A `[dev]` alone before the marker (`<hostname>:<pid> [5] NCCL ...`).
    let dev = head
        .strip_suffix(']')
        .and_then(|h| h.rfind('[').map(|o| &h[o + 1..]))
        .and_then(|d| d.trim().parse::<i32>().ok());
    let begin = if src.is_some() { start } else { at };
    Some((
        Nccl {
            host: "",
            pid: None,
            dev,
            src,
            level,
            msg,
        },
        begin,
    ))
}

/// A line's records: the common case (one marker, a header that parses) without vectors.
pub(crate) enum Records<'a> {
    One(&'a str, Nccl<'a>),
    Other(Vec<(&'a str, Nccl<'a>)>),
}

/// A line's NCCL markers: none, the one (where `NCCL ` starts, and its level), or several.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Marks {
    None,
    One(usize, Level),
    Many,
}

pub(crate) fn marks(s: &str) -> Marks {
    let mut one = None;
    let mut from = 0;
    while let Some(at) = next_nccl(s.as_bytes(), from) {
        if let Some(l) = marker_at(s, at) {
            if one.is_some() {
                return Marks::Many;
            }
            one = Some((at, l));
        }
        from = at + 5;
    }
    one.map_or(Marks::None, |(at, l)| Marks::One(at, l))
}

/// [`records`], with the line of one record (nearly every line of a log) answered without
/// allocating: the same answer, as the tests of [`records`] check through it.
#[cfg(test)]
pub(crate) fn scan(s: &str) -> Records<'_> {
    scan_marks(s, marks(s))
}

/// [`scan`] given the line's [`marks`]. A [`Records::One`] answer depends on the bytes
/// before the marker only for its prefix and header (see [`parse_header`]), and its message
/// is [`message_at`].
pub(crate) fn scan_marks(s: &str, marks: Marks) -> Records<'_> {
    let (at, l) = match marks {
        Marks::None => return Records::Other(records_at(s, Vec::new())),
        Marks::Many => return Records::Other(records_at(s, marker_positions(s))),
        Marks::One(at, l) => (at, l),
    };
    match parse_at(s, at, l) {
        Some((mut n, start)) => {
            n.msg = trim_debris(n.msg);
            Records::One(&s[..start], n)
        }
        None => Records::Other(records_at(s, vec![(at, l)])),
    }
}

/// The message of the record whose marker (`NCCL LEVEL `, see [`marks`]) starts at `at`, as
/// [`scan_marks`] gives it: what follows the marker.
pub(crate) fn message_at(s: &str, at: usize, level: Level) -> &str {
    let len = MARKERS.iter().find(|m| m.1 == level).map_or(0, |m| m.0.len());
    trim_debris(s.get(at + len..).unwrap_or(""))
}

/// Markdown debris around a pasted line (`_..._`, `**...**`, backticks).
fn trim_debris(msg: &str) -> &str {
    msg.trim_end_matches(|c: char| matches!(c, '_' | '*' | '`') || c.is_whitespace())
}

/// Split a physical line into the NCCL records in it (interleaved writers can glue two
/// together); each with its launcher prefix. A line with no NCCL marker yields nothing.
#[cfg(test)]
pub(crate) fn records(s: &str) -> Vec<(&str, Nccl<'_>)> {
    match scan(s) {
        Records::One(p, n) => vec![(p, n)],
        Records::Other(v) => v,
    }
}

/// [`records`] given the line's markers.
fn records_at(s: &str, marks: Vec<(usize, Level)>) -> Vec<(&str, Nccl<'_>)> {
    let mut out = Vec::with_capacity(marks.len());
    if marks.is_empty() {
        // Only a line that names a level at all can be a 2.0-2.2 or 1.x record.
        let find = super::events::find;
        if find(s, "WARN ").is_some() || find(s, " INFO ").is_some() {
            out.extend(legacy(s));
        }
        return out;
    }
    let mut prev_end = 0;
    let mut parsed: Vec<(usize, Nccl<'_>)> = Vec::with_capacity(marks.len());
    for (at, l) in &marks {
        // Only the first marker may go without a header: a later one inside a message (an
        // echoed "NCCL WARN") stays text.
        // A WARN is never lost inside another record's text, though.
        let first_warn = *l == Level::Warn && !parsed.iter().any(|p| p.1.level == Level::Warn);
        let rec = match parse_at(s, *at, *l) {
            Some(r) => Some(r),
            None if parsed.is_empty() || first_warn => headerless(s, *at, *l),
            None => None,
        };
        if let Some((n, start)) = rec {
            parsed.push((start, n));
        }
    }
    for i in 0..parsed.len() {
        let start = parsed[i].0;
        let next = parsed.get(i + 1).map(|p| p.0).unwrap_or(s.len());
        let mut n = parsed[i].1.clone();
        // The message stops where the next glued record begins.
        let msg_start = n.msg.as_ptr() as usize - s.as_ptr() as usize;
        if next > msg_start && next < s.len() {
            n.msg = &s[msg_start..next];
        }
        n.msg = trim_debris(n.msg);
        let prefix = if start >= prev_end {
            &s[prev_end..start]
        } else {
            ""
        };
        out.push((prefix, n));
        prev_end = next;
    }
    out
}

/// The line without ANSI colour sequences (`ESC [ ... letter`), only when it has any.
pub(crate) fn strip_ansi(s: &str) -> Option<String> {
    memchr::memchr(0x1b, s.as_bytes())?;
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        if it.peek() == Some(&'[') {
            it.next();
            // Parameters and intermediates, then one final byte in '@'..='~'.
            for d in it.by_ref() {
                if ('@'..='~').contains(&d) {
                    break;
                }
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers() {
        let l = "node2:14159:14168 [0] NCCL INFO NET/IB : Using [0]mlx5_4:1/RoCE [RO]; OOB enp24s0np0:10.10.10.1<0>";
        let r = records(l);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].1.host, "node2");
        assert_eq!(r[0].1.pid, Some(14159));
        assert_eq!(r[0].1.dev, Some(0));
        assert_eq!(r[0].1.level, Level::Info);
        assert!(r[0].1.msg.starts_with("NET/IB : Using"));

        let w = "hostname-test:984:1357 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer 1.2.3.4<5> with status=12";
        let r = records(w);
        assert_eq!(r[0].1.src, Some("ib_plugin.c:1615"));
        assert_eq!(r[0].1.level, Level::Warn);

        let m = "[1,3]<stdout>:5873af64cf59:10161:10551 [3] NCCL INFO NET/IB : No device found.";
        let r = records(m);
        assert_eq!(r[0].1.host, "5873af64cf59");
        assert_eq!(prefix_rank(r[0].0), Some(3));

        let k = "2025-11-24T03:20:21.001125857Z [2025-11-24 11:20:21] gpu-server320 [5] misc/socket.cc:46 NCCL WARN socketProgressOpt: x";
        let r = records(k);
        assert_eq!(r[0].1.host, "gpu-server320");
        assert_eq!(r[0].1.pid, None);
        assert_eq!(r[0].1.dev, Some(5));
    }

    #[test]
    fn prefixes() {
        assert_eq!(prefix_rank("[1,12]<stderr>:"), Some(12));
        assert_eq!(prefix_rank("Mon Jun 10 12:34:56 2019[1,7]<stdout>:"), Some(7));
        assert_eq!(prefix_rank("3: "), Some(3));
        assert_eq!(
            prefix_rank("[rank5]:[E321 02:07:08.4 ProcessGroupNCCL.cpp:607] "),
            Some(5)
        );
        assert_eq!(prefix_rank("[default2]:"), Some(2));
        assert_eq!(prefix_rank("worker-1: "), None);
    }

    #[test]
    fn glued_records() {
        let l = "a:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPCb:3:4 [1] NCCL INFO Connected all rings";
        let r = records(l);
        assert_eq!(r.len(), 2);
        // Without a separator the glue point is ambiguous: both records are kept, the
        // first one's message is cut where the second's header begins.
        assert_eq!(r[1].1.msg, "Connected all rings");
        assert_eq!(r[1].1.pid, Some(3));
        let spaced = "a:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC b:3:4 [1] NCCL INFO Connected all rings";
        let r = records(spaced);
        assert_eq!(r[0].1.msg, "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC");
        assert_eq!(r[1].1.host, "b");
    }

    #[test]
    fn lines_without_a_usable_header() {
        // (line, host, pid, dev, src, msg)
        for (l, host, pid, dev, src, msg) in [
            (
                "misc/ibvwrap.cc:212 NCCL WARN Call to ibv_open_device failed",
                "",
                None,
                None,
                Some("misc/ibvwrap.cc:212"),
                "Call to ibv_open_device failed",
            ),
            (
                "NCCL INFO NET/IB : No device found.",
                "",
                None,
                None,
                None,
                "NET/IB : No device found.",
            ),
            (
                "host-01:XXXXXX [5] NCCL WARN x",
                "host-01",
                None,
                Some(5),
                None,
                "x",
            ),
            ("<hostname>:<pid> [2] NCCL INFO y", "", None, Some(2), None, "y"),
            (
                "_ibvwrap.cc: NCCL WARN Call to ibv_reg_mr failed_",
                "",
                None,
                None,
                Some("ibvwrap.cc"),
                "Call to ibv_reg_mr failed",
            ),
            ("> n1:7:8 [1] NCCL INFO z", "n1", Some(7), Some(1), None, "z"),
        ] {
            let r = records(l);
            assert_eq!(r.len(), 1, "{l}");
            let n = &r[0].1;
            assert_eq!(
                (n.host, n.pid, n.dev, n.src, n.msg),
                (host, pid, dev, src, msg),
                "{l}"
            );
        }
        // A second marker inside a message stays text, unless it is the line's first WARN.
        assert_eq!(records("NCCL INFO a NCCL INFO b").len(), 1);
        assert_eq!(records("NCCL INFO a NCCL WARN b")[1].1.level, Level::Warn);
    }

    #[test]
    fn levels_without_nccl_before_2_3() {
        // (line, host, pid, dev, src, level, msg): 2.0-2.2 headers, then 1.x.
        for (l, host, pid, dev, src, level, msg) in [
            (
                "node1:2961:3004 [0] include/socket.h:185 WARN Call to connect failed : Connection refused",
                "node1",
                Some(2961),
                Some(0),
                Some("include/socket.h:185"),
                Level::Warn,
                "Call to connect failed : Connection refused",
            ),
            (
                "*server name* [0] include/socket.h:185 WARN Call to connect failed : Connection refused",
                "",
                None,
                Some(0),
                Some("include/socket.h:185"),
                Level::Warn,
                "Call to connect failed : Connection refused",
            ),
            (
                "node1:2961:2961 [1] INFO Using internal Network Socket",
                "node1",
                Some(2961),
                Some(1),
                None,
                Level::Info,
                "Using internal Network Socket",
            ),
            (
                "WARN src/core.cu:530 Cuda failure 'out of memory'",
                "",
                None,
                None,
                Some("src/core.cu:530"),
                Level::Warn,
                "Cuda failure 'out of memory'",
            ),
        ] {
            let r = records(l);
            assert_eq!(r.len(), 1, "{l}");
            let n = &r[0].1;
            assert_eq!(
                (n.host, n.pid, n.dev, n.src, n.level, n.msg),
                (host, pid, dev, src, level, msg),
                "{l}"
            );
        }
        // The word alone is not a record: no header, no source location.
        for l in [
            "WARN: disk almost full",
            "[W socket.cpp:601] WARN connect failed",
            "2024-01-01 WARN something",
            "node1 [0] WARN no source location",
            "Epoch 3 INFO loss 0.2",
        ] {
            assert!(records(l).is_empty(), "{l}");
        }
    }

    #[test]
    fn one_record_fast_path_answers_as_the_general_one() {
        for l in [
            "node2:14159:14168 [0] NCCL INFO NET/IB : Using [0]mlx5_4:1/RoCE [RO]; OOB x:1.2.3.4<0>",
            "hostname-test:984:1357 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion",
            "[1,3]<stdout>:5873af64cf59:10161:10551 [3] NCCL INFO NET/IB : No device found.",
            "12: gpu-037:10296:10303 [3] NCCL INFO AllReduce: opCount 1a sendbuff 0x7f _x_ ",
            "a:b:1:2 [0] NCCL INFO x",
            "host-01:XXXXXX [5] NCCL WARN x",
            "host::5 [5] NCCL WARN x",
            "h:1:2 [-1] NCCL INFO x`**",
            "h:1:2\t[0]  NCCL INFO x",
            "[rank0]:h:1:2 [0] NCCL INFO x",
            "x [misc/socket.cc:586] NCCL WARN y",
            "NCCL INFO NET/IB : No device found.",
            "h:1:2 [0] NCCL INFO a NCCL version 2.18",
        ] {
            assert_eq!(records(l), records_at(l, marker_positions(l)), "{l}");
        }
        // The usual line takes the fast path.
        let l = "12: gpu-037:10296:10303 [3] NCCL INFO AllReduce: opCount 1a";
        assert!(matches!(scan(l), Records::One("12: ", _)));
        // The message the header cache takes without parsing is the parsed one.
        for l in [
            l,
            "h:1:2 [-1] NCCL INFO x`** ",
            "h:1:2 [0] NCCL WARN ",
            "h:1:2 [0] NCCL INFO  y",
            "h:1:2 [0] NCCL TRACE z",
        ] {
            let Marks::One(at, level) = marks(l) else {
                panic!("{l}")
            };
            let Records::One(_, n) = scan(l) else {
                panic!("{l}")
            };
            assert_eq!(message_at(l, at, level), n.msg, "{l}");
        }
    }

    /// The in-place marker search and level test answer as plain substring searches do.
    #[test]
    fn marker_search_matches_a_plain_search() {
        let plain = |s: &str| -> Vec<(usize, Level)> {
            let mut out = Vec::new();
            let mut from = 0;
            while let Some(i) = s[from..].find("NCCL ") {
                let at = from + i;
                out.extend(
                    MARKERS
                        .iter()
                        .find(|(m, _)| s[at..].starts_with(m))
                        .map(|&(_, l)| (at, l)),
                );
                from = at + 5;
            }
            out
        };
        for s in [
            "",
            "N",
            "NCCL",
            "NCCL ",
            "NCCL I",
            "NCCL INFO",
            "NCCL INFO ",
            "NCCL WARN x",
            "NCCL TRACE y",
            "NCCL TRACEx NCCL WARN z",
            "NNCCL INFO a NCCL NCCL WARN b",
            "ProcessGroupNCCL.cpp NCCL error NCCL INFOx NCCL INFO c",
            "h:1:2 [0] NCCL INFO NET/IB : Using NCCL WARN Ñ NCCL TRACE ",
            "NCCL WARNNCCL INFO NCCL INFO",
        ] {
            assert_eq!(marker_positions(s), plain(s), "{s:?}");
            let m = match plain(s).as_slice() {
                [] => Marks::None,
                [(at, l)] => Marks::One(*at, *l),
                _ => Marks::Many,
            };
            assert_eq!(marks(s), m, "{s:?}");
        }
    }

    #[test]
    fn ansi_colour_is_stripped() {
        assert_eq!(strip_ansi("plain"), None);
        assert_eq!(
            strip_ansi("\u{1b}[1;31mh:1:2 [0] NCCL WARN x\u{1b}[0m").as_deref(),
            Some("h:1:2 [0] NCCL WARN x")
        );
    }
}
