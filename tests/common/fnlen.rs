#![allow(dead_code)]

//! Function lengths read from the source (for tests/layering.rs): a body is counted by its
//! braces in code, not by braces in strings, chars or comments, and the tests are skipped.

/// `text` with comments, strings and char literals blanked (newlines kept), so that braces
/// count only as code.
pub fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let blank =
        |out: &mut Vec<u8>, s: &[u8]| out.extend(s.iter().map(|&c| if c == b'\n' { c } else { b' ' }));
    while i < b.len() {
        let rest = &b[i..];
        let prev_ident = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        let end = if rest.starts_with(b"//") {
            i + rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len())
        } else if rest.starts_with(b"/*") {
            i + 2
                + rest[2..]
                    .windows(2)
                    .position(|w| w == b"*/")
                    .map_or(rest.len() - 2, |p| p + 2)
        } else if !prev_ident
            && (rest.starts_with(b"r\"") || rest.starts_with(b"r#") || rest.starts_with(b"br"))
        {
            let start = if rest[0] == b'b' { 2 } else { 1 };
            let hashes = rest[start..].iter().take_while(|&&c| c == b'#').count();
            if rest.get(start + hashes) != Some(&b'"') {
                i + 1
            } else {
                let close: Vec<u8> = std::iter::once(b'"')
                    .chain(std::iter::repeat_n(b'#', hashes))
                    .collect();
                let body = start + hashes + 1;
                i + body
                    + rest[body..]
                        .windows(close.len())
                        .position(|w| w == close)
                        .map_or(rest.len() - body, |p| p + close.len())
            }
        } else if rest[0] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            i + (j + 1).min(rest.len())
        } else if rest[0] == b'\'' {
            // A char literal ('x', '\n', '\'', 'é'), not a lifetime ('a).
            let len = match rest.get(1) {
                Some(b'\\') => rest.iter().skip(3).position(|&c| c == b'\'').map(|p| p + 4),
                Some(&c) if c >= 0x80 => rest
                    .iter()
                    .skip(1)
                    .take(5)
                    .position(|&c| c == b'\'')
                    .map(|p| p + 2),
                Some(_) if rest.get(2) == Some(&b'\'') => Some(3),
                _ => None,
            };
            len.map_or(i + 1, |n| i + n)
        } else {
            i + 1
        };
        if end == i + 1 {
            out.push(b[i]);
        } else {
            blank(&mut out, &b[i..end]);
        }
        i = end;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Each `fn` with a body in `text` before its `#[cfg(test)]` module: (name, first line,
/// lines), brace-matched on the code alone.
pub fn fn_lengths(text: &str) -> Vec<(String, usize, usize)> {
    let code = code_only(text);
    // The inline test module (`mod tests {`), not a test-only file declared `mod x;` above.
    let tests_at = code
        .match_indices("#[cfg(test)]\nmod ")
        .map(|(i, _)| i)
        .find(|&i| code[i..].lines().nth(1).is_some_and(|l| l.trim_end().ends_with('{')))
        .unwrap_or(code.len());
    let b = code.as_bytes();
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(p) = code[from..tests_at].find("fn ") {
        let at = from + p;
        from = at + 3;
        if at > 0 && (b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_') {
            continue;
        }
        let name: String = code[at + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // The body's brace: the first `{` outside the signature's brackets; a `;` first is a
        // declaration without a body.
        let (mut depth, mut k) = (0i32, at + 3);
        while k < b.len() {
            match b[k] {
                b'(' | b'[' | b'<' => depth += 1,
                b')' | b']' => depth -= 1,
                b'>' if b[k - 1] != b'-' => depth -= 1,
                b';' if depth <= 0 => break,
                b'{' if depth <= 0 => break,
                _ => {}
            }
            k += 1;
        }
        if k >= b.len() || b[k] != b'{' {
            continue;
        }
        let mut braces = 0;
        let mut end = k;
        for (j, &c) in b.iter().enumerate().skip(k) {
            braces += (c == b'{') as i32 - (c == b'}') as i32;
            if braces == 0 {
                end = j;
                break;
            }
        }
        let first = line_of(at);
        out.push((name, first, line_of(end) - first + 1));
    }
    out
}

/// The byte range of each inline test module in `code` (already [`code_only`]): from its
/// `#[cfg(test)]` to the brace that closes `mod x { ... }`. A `#[cfg(test)]` item that is
/// not a module (a test-only constructor mid-file) is no range, nor a test file declared
/// `mod x;`: the code after them is code.
pub fn test_modules(code: &str) -> Vec<std::ops::Range<usize>> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    for (at, attr) in code.match_indices("#[cfg(test)]") {
        let item = code[at + attr.len()..].trim_start();
        let item = ["pub(crate) ", "pub "]
            .iter()
            .find_map(|v| item.strip_prefix(v))
            .unwrap_or(item);
        if !item.starts_with("mod ") {
            continue;
        }
        let from = code.len() - item.len();
        let Some(open) = code[from..].find(['{', ';']).map(|p| from + p) else {
            continue;
        };
        if b[open] == b';' {
            continue;
        }
        let mut depth = 0i32;
        for (j, &c) in b.iter().enumerate().skip(open) {
            depth += (c == b'{') as i32 - (c == b'}') as i32;
            if depth == 0 {
                out.push(at..j + 1);
                break;
            }
        }
    }
    out
}

/// `text` without its inline test modules ([`test_modules`]).
pub fn outside_test_modules(text: &str) -> String {
    let mut out = String::new();
    let mut from = 0;
    for r in test_modules(&code_only(text)) {
        out.push_str(&text[from..r.start]);
        from = r.end;
    }
    out.push_str(&text[from..]);
    out
}
