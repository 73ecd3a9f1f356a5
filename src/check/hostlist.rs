//! Slurm hostlist expressions (`gpu[001-004,7],login1`), as `scontrol show hostnames` expands
//! them, for `sweep --expect`.

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("hostlist {expr:?}: {msg}")]
pub struct HostlistError {
    pub expr: String,
    pub msg: String,
}

/// Expand a hostlist. Ranges keep the width of their first bound (`01-10` → `01`...`10`).
pub fn expand(expr: &str) -> Result<Vec<String>, HostlistError> {
    let err = |msg: &str| HostlistError {
        expr: expr.to_string(),
        msg: msg.to_string(),
    };
    let mut out = Vec::new();
    for item in split_top(expr).map_err(|m| err(&m))? {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let mut names = vec![String::new()];
        let mut rest = item;
        while let Some(open) = rest.find('[') {
            let close = rest[open..].find(']').ok_or_else(|| err("unclosed ["))? + open;
            let prefix = &rest[..open];
            let body = &rest[open + 1..close];
            let mut alts = Vec::new();
            for part in body.split(',') {
                match part.split_once('-') {
                    Some((a, b)) => {
                        let (x, y): (u64, u64) = (
                            a.parse().map_err(|_| err(&format!("bad range {part:?}")))?,
                            b.parse().map_err(|_| err(&format!("bad range {part:?}")))?,
                        );
                        if y < x || y - x > 100_000 {
                            return Err(err(&format!("bad range {part:?}")));
                        }
                        for i in x..=y {
                            alts.push(format!("{i:0w$}", w = a.len()));
                        }
                    }
                    None if !part.is_empty() && part.bytes().all(|c| c.is_ascii_digit()) => {
                        alts.push(part.to_string())
                    }
                    None => return Err(err(&format!("bad range {part:?}"))),
                }
            }
            names = names
                .iter()
                .flat_map(|n| alts.iter().map(move |a| format!("{n}{prefix}{a}")))
                .collect();
            rest = &rest[close + 1..];
        }
        out.extend(names.into_iter().map(|n| n + rest));
    }
    Ok(out)
}

/// Split on commas outside brackets.
fn split_top(s: &str) -> Result<Vec<&str>, String> {
    let (mut depth, mut start, mut out) = (0i32, 0, Vec::new());
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => {
                depth -= 1;
                if depth < 0 {
                    return Err("unmatched ]".into());
                }
            }
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unclosed [".into());
    }
    out.push(&s[start..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_like_scontrol() {
        assert_eq!(
            expand("gpu[01-03],login1").unwrap(),
            ["gpu01", "gpu02", "gpu03", "login1"]
        );
        assert_eq!(expand("n[8-10,15]").unwrap(), ["n8", "n9", "n10", "n15"]);
        assert_eq!(expand("r[1-2]n[1-2]").unwrap(), ["r1n1", "r1n2", "r2n1", "r2n2"]);
        assert_eq!(expand("a").unwrap(), ["a"]);
        assert!(expand("n[1-").is_err());
        assert!(expand("n[5-1]").is_err());
        assert!(expand("n[x]").is_err());
    }
}
