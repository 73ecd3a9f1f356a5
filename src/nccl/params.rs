//! The `NCCL_*` variables NCCL reads, and how it parses their values.
//!
//! The list is `nccl-env-vars.tsv` beside this file (278 names extracted from NVIDIA/nccl
//! master @ 5067397c, each with its default, how it is read and where; its header says how).
//! Parsing rules (NCCL's `param.cc`): `NCCL_PARAM` values go through `strtoll(s, 0)` and
//! fall back to the default when no digits parse; the level variables take path-type names
//! or the old numbers (`paths.cc` `ncclGetLevel`, `levelsOldToNew`).

use std::sync::OnceLock;

const TSV: &str = include_str!("nccl-env-vars.tsv");

/// One known variable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Known {
    pub name: &'static str,
    /// NCCL's default as written in the source (`-2`, `NCCL_CONFIG_UNDEF_INT`, empty).
    pub default: &'static str,
    /// `NCCL_PARAM`, `DEFINE_NCCL_PARAM`, `getenv`, `string-literal` (comma-joined).
    pub kind: &'static str,
    pub location: &'static str,
}

impl Known {
    /// Read through `NCCL_PARAM` (an integer parsed with strtoll).
    pub(crate) fn is_int_param(&self) -> bool {
        self.kind.split(',').any(|k| k == "NCCL_PARAM")
    }
}

/// Every known variable, in the list's (alphabetical) order.
pub(crate) fn known() -> &'static [Known] {
    static K: OnceLock<Vec<Known>> = OnceLock::new();
    K.get_or_init(|| {
        TSV.lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .filter_map(|l| {
                let mut f = l.split('\t');
                let name = f.next()?;
                Some(Known {
                    name,
                    default: f.next().unwrap_or(""),
                    kind: f.next().unwrap_or(""),
                    location: f.next().unwrap_or(""),
                })
            })
            .collect()
    })
}

pub(crate) fn lookup(name: &str) -> Option<&'static Known> {
    known().iter().find(|k| k.name == name)
}

/// Launcher and tool variables that share the prefix but are not NCCL's own (nccl-tests,
/// this tool's captured snapshot keys); never called unknown.
const NOT_NCCL: &[&str] = &["NCCL_TESTS_SPLIT", "NCCL_TESTS_SPLIT_MASK", "NCCL_TESTS_DEVICE"];

pub(crate) fn is_foreign(name: &str) -> bool {
    NOT_NCCL.contains(&name)
}

/// Levenshtein distance over bytes (names are ASCII).
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// The known name nearest to `name`, when it is close enough to be a typo (at most a
/// third of the name's length after the `NCCL_` prefix, and at most 4 edits); ties keep
/// the alphabetically first.
pub(crate) fn nearest(name: &str) -> Option<&'static str> {
    let budget = (name.len().saturating_sub(5) / 3).clamp(1, 4);
    known()
        .iter()
        .map(|k| (edit_distance(name, k.name), k.name))
        .filter(|(d, _)| *d <= budget)
        .min()
        .map(|(_, n)| n)
}

/// What `ncclLoadParam` makes of a value: the number, and whether characters were left
/// over (NCCL ignores them silently), nothing parsed (strtoll returns 0 and NCCL uses 0:
/// it falls back to the default only on ERANGE), or out of range (the default).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum IntParse {
    Clean(i64),
    Trailing(i64),
    NoDigits,
    OutOfRange,
}

pub(crate) fn parse_int(s: &str) -> IntParse {
    let Some(v) = crate::nccl::gid::strtoll(s) else {
        return IntParse::OutOfRange;
    };
    let t = s.trim_start();
    let body = t.strip_prefix(['-', '+']).unwrap_or(t);
    if !body.starts_with(|c: char| c.is_ascii_digit()) {
        return IntParse::NoDigits;
    }
    let hex = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X"));
    let (radix, digits) = match hex {
        Some(h) if h.starts_with(|c: char| c.is_ascii_hexdigit()) => (16, h),
        _ if body.starts_with('0') => (8, body),
        _ => (10, body),
    };
    let n = digits.chars().take_while(|c| c.is_digit(radix)).count();
    if n == digits.len() {
        IntParse::Clean(v)
    } else {
        IntParse::Trailing(v)
    }
}

/// NCCL's path types in its order (`graph.h`, 2.2x): a level variable disables a feature
/// for paths worse than the level.
pub(crate) const LEVELS: &[&str] = &[
    "LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS",
];

/// `levelsOldToNew`: the numeric levels of NCCL < 2.5 (0 LOC, 1 PIX, 2 PXB, 3 PHB, 4+ SYS).
const OLD_LEVELS: &[&str] = &["LOC", "PIX", "PXB", "PHB", "SYS", "SYS"];

/// A level variable's value as NCCL reads it: a path type name (exact, upper case), or a
/// leading digit read as an old level (clamped). `None`: NCCL ignores it (uses its default).
pub(crate) fn parse_level(s: &str) -> Option<&'static str> {
    if let Some(l) = LEVELS.iter().find(|l| **l == s) {
        return Some(l);
    }
    if s.as_bytes().first().is_some_and(u8::is_ascii_digit) {
        let v = crate::nccl::gid::nccl_param(Some(s), 0).clamp(0, OLD_LEVELS.len() as i64 - 1);
        return Some(OLD_LEVELS[v as usize]);
    }
    None
}

/// `NCCL_NET_GDR_LEVEL` as `paths.cc` applies it, for every command alike: the level's name
/// and why it holds (`set` is the variable's value and where it came from). The default is
/// PXB, or P2C when `NCCL_NET_GDR_C2C` is 1 (its default); for PCIe paths both allow the
/// same (P2C only differs on a Grace C2C link).
pub(crate) fn net_gdr_level(set: Option<(&str, &str)>, c2c: Option<&str>) -> (&'static str, String) {
    let c2c_on = crate::nccl::gid::nccl_param(c2c, 1) == 1;
    let (default, why) = if c2c_on {
        ("P2C", "default, NCCL_NET_GDR_C2C=1")
    } else {
        ("PXB", "default, NCCL_NET_GDR_C2C=0")
    };
    match set {
        Some((raw, from)) => match parse_level(raw) {
            Some(l) => (l, format!("set to {raw} in {from}")),
            None => (
                default,
                format!("{why}: {raw:?} in {from} is not a level NCCL reads"),
            ),
        },
        None => (default, why.to_string()),
    }
}

/// Position of a path type in NCCL's order (for `path <= level` comparisons).
pub(crate) fn level_rank(l: &str) -> Option<usize> {
    LEVELS.iter().position(|x| *x == l)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_is_the_reference_one() {
        assert_eq!(known().len(), 278);
        let t = lookup("NCCL_IB_TIMEOUT").unwrap();
        assert_eq!(t.default, "20");
        assert!(t.is_int_param());
        assert!(lookup("NCCL_SOCKET_IFNAME").is_some());
        assert!(lookup("NCCL_IB_HCA_TYPO").is_none());
    }

    #[test]
    fn nearest_names() {
        for (typo, want) in [
            ("NCCL_SOCKET_IFNAMES", Some("NCCL_SOCKET_IFNAME")),
            ("NCCL_IB_GID_INDX", Some("NCCL_IB_GID_INDEX")),
            ("NCCL_IB_TIMOUT", Some("NCCL_IB_TIMEOUT")),
            ("NCCL_NET_GDR_LVL", Some("NCCL_NET_GDR_LEVEL")),
            ("NCCL_COMPLETELY_MADE_UP_THING", None),
        ] {
            assert_eq!(nearest(typo), want, "{typo}");
        }
    }

    #[test]
    fn ints_as_strtoll() {
        assert_eq!(parse_int("22"), IntParse::Clean(22));
        assert_eq!(parse_int("0x10"), IntParse::Clean(16));
        assert_eq!(parse_int("010"), IntParse::Clean(8));
        assert_eq!(parse_int("0"), IntParse::Clean(0));
        assert_eq!(parse_int("-1"), IntParse::Clean(-1));
        assert_eq!(parse_int("22s"), IntParse::Trailing(22));
        assert_eq!(parse_int("true"), IntParse::NoDigits);
        assert_eq!(parse_int(""), IntParse::NoDigits);
    }

    #[test]
    fn levels() {
        assert_eq!(parse_level("PHB"), Some("PHB"));
        assert_eq!(parse_level("phb"), None);
        assert_eq!(parse_level("0"), Some("LOC"));
        assert_eq!(parse_level("2"), Some("PXB"));
        assert_eq!(parse_level("9"), Some("SYS"));
        assert_eq!(parse_level("NODE"), None);
        assert!(level_rank("PIX") < level_rank("PXB"));
        assert!(level_rank("PXB") < level_rank("P2C"));
        assert!(level_rank("P2C") < level_rank("PHB"));
    }
}
