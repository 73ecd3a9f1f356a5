//! Words every layer prints with: text from outside made safe to print, and the few number
//! formats that were written once per module before. The bottom room: it names no other.

/// Text from outside (a peer's message, an archive's entry name, a parser's message quoting
/// the input) made safe to print: control characters and terminal escapes (C0, DEL, C1)
/// become `\xNN`/`\u{NNNN}`, bidirectional overrides and zero-width marks too, and at most
/// `max_chars` characters are kept (then `...`). Idempotent on its own output.
pub(crate) fn printable(s: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max_chars + 8));
    for (n, c) in s.chars().enumerate() {
        if n >= max_chars {
            out.push_str("...");
            break;
        }
        match c {
            c if (c as u32) < 0x20 || c == '\u{7f}' => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if ('\u{80}'..='\u{9f}').contains(&c) => out.push_str(&format!("\\u{{{:04x}}}", c as u32)),
            // Bidirectional overrides and zero-width marks can disguise a line on a terminal.
            '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}' => {
                out.push_str(&format!("\\u{{{:04x}}}", c as u32))
            }
            c => out.push(c),
        }
    }
    out
}

/// A duration as a verdict says it: one decimal and the unit (`31.0 s`).
pub(crate) fn secs(d: std::time::Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// Three decimals, for figures a report carries (`0.30449` -> `0.304`).
pub(crate) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Median of the finite values; for an even count the mean of the two middle values.
/// None when there is none.
pub(crate) fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

/// Ranks as runs, sorted: `[7, 0, 1, 2, 3]` -> `0-3,7`; `-` for none.
pub(crate) fn rank_runs(v: &[u32]) -> String {
    let mut v = v.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if j > i { format!("{}-{}", v[i], v[j]) } else { v[i].to_string() });
        i = j + 1;
    }
    if out.is_empty() { "-".into() } else { out.join(",") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_escapes_controls_bidi_and_truncates() {
        assert_eq!(printable("a\x1b[31mb", 100), "a\\x1b[31mb");
        assert_eq!(printable("x\u{85}y\u{202e}z", 100), "x\\u{0085}y\\u{202e}z");
        assert_eq!(printable("abcdef", 3), "abc...");
        let once = printable("a\nb\u{7f}", 100);
        assert_eq!(printable(&once, 100), once, "idempotent");
    }

    #[test]
    fn median_skips_non_finite_and_averages_the_middle_pair() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[f64::NAN]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, f64::INFINITY, 3.0]), Some(2.5));
    }

    #[test]
    fn rank_runs_sort_and_join_runs() {
        assert_eq!(rank_runs(&[7, 0, 1, 2, 3, 3]), "0-3,7");
        assert_eq!(rank_runs(&[5]), "5");
        assert_eq!(rank_runs(&[]), "-");
    }

    #[test]
    fn secs_has_one_decimal_and_the_unit() {
        use std::time::Duration;
        for (d, want) in [
            (Duration::ZERO, "0.0 s"),
            (Duration::from_secs(31), "31.0 s"),
            (Duration::from_millis(1_050), "1.1 s"),
            (Duration::from_millis(59_949), "59.9 s"),
        ] {
            assert_eq!(secs(d), want, "{d:?}");
        }
    }

    #[test]
    fn round3_rounds_half_away() {
        assert_eq!(round3(0.30449), 0.304);
        assert_eq!(round3(-0.0005), -0.001);
    }
}
