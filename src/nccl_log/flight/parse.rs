//! Reading one flight-recorder dump: recognised by its bytes (a pickle's PROTO opcode, or a
//! JSON object with the recorder's keys), decoded by serde-pickle or serde_json into the
//! few fields the verdicts use. Fields that changed type between PyTorch versions are read
//! in each form (`pg_status` numbers or strings, `ranks` a string or a list, `seq_id`
//! before `collective_seq_id`, `time_discovered_*` None or 0).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, SeqAccess, Visitor};

/// Why a dump could not be read: the file and, where the decoder knows it, the field.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error("{file}: not a flight-recorder dump ({why})")]
    NotADump { file: String, why: String },
    #[error("{file}: field {field}: {why}")]
    Field {
        file: String,
        field: String,
        why: String,
    },
    #[error("{file}: dump version {version} is not one PyTorch has written (2.x expected)")]
    Version { file: String, version: String },
    #[error("{file}: no rank in the file name (PyTorch names a dump <prefix><rank>)")]
    NoRank { file: String },
}

/// What the bytes look like, before decoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Pickle,
    Json,
}

/// The recorder's top-level keys; a JSON object is a dump when it has `version` and one
/// of these.
const DUMP_KEYS: [&str; 3] = ["\"entries\"", "\"pg_config\"", "\"pg_status\""];

/// Whether these bytes (the start of a file is enough) are a flight-recorder dump.
/// A pickle starts with the PROTO opcode (0x80) and a protocol 2-5, then a dict; NCCL
/// logs are text and never start with 0x80.
pub fn sniff(head: &[u8]) -> Option<Kind> {
    match head {
        [0x80, p, b'}', ..] if (2..=5).contains(p) => return Some(Kind::Pickle),
        // Protocol 4-5 frame the dict: PROTO, FRAME (0x95) and 8 length bytes.
        [0x80, p, 0x95, _, _, _, _, _, _, _, _, b'}', ..] if (4..=5).contains(p) => {
            return Some(Kind::Pickle);
        }
        _ => {}
    }
    let text = head.trim_ascii_start();
    if !text.starts_with(b"{") {
        return None;
    }
    let s = String::from_utf8_lossy(&text[..text.len().min(1 << 16)]);
    (s.contains("\"version\"") && DUMP_KEYS.iter().any(|k| s.contains(k))).then_some(Kind::Json)
}

/// A dump as decoded: only what the verdicts read; everything else is skipped.
#[derive(Debug, Default, Deserialize)]
pub struct RawDump {
    #[serde(default, deserialize_with = "text")]
    pub version: Option<String>,
    /// Folded as they are decoded: the few distinct calls and per entry its sequence number.
    #[serde(default)]
    pub entries: super::fold::Entries,
    #[serde(default)]
    pub pg_config: BTreeMap<String, RawGroup>,
    #[serde(default)]
    pub pg_status: BTreeMap<String, RawStatus>,
    #[serde(default, deserialize_with = "text")]
    pub comm_lib_version: Option<String>,
    /// NCCL's own state per communicator (NCCL backend only): its presence is noted.
    #[serde(default)]
    pub nccl_comm_state: Option<IgnoredAny>,
}

/// One entry as decoded, its text borrowed from the dump's bytes where the decoder can
/// (JSON without escapes): entries are folded one at a time ([`super::fold`]), never kept.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawEntry<'a> {
    #[serde(default, deserialize_with = "int")]
    pub record_id: Option<i64>,
    #[serde(default, deserialize_with = "int")]
    pub pg_id: Option<i64>,
    /// `(name, desc)`: a tuple in a pickle, a list in JSON.
    #[serde(default, borrow)]
    pub process_group: Pg<'a>,
    #[serde(default, deserialize_with = "int")]
    pub collective_seq_id: Option<i64>,
    /// Before collective and P2P sequence numbers were split (dump versions 1.x-2.0).
    #[serde(default, deserialize_with = "int")]
    pub seq_id: Option<i64>,
    #[serde(default, deserialize_with = "int")]
    pub p2p_seq_id: Option<i64>,
    #[serde(default)]
    pub is_p2p: Option<bool>,
    #[serde(default, borrow)]
    pub profiling_name: Str<'a>,
    #[serde(default)]
    pub input_sizes: Sizes,
    #[serde(default, borrow)]
    pub input_dtypes: Option<Vec<Str<'a>>>,
    #[serde(default)]
    pub output_sizes: Sizes,
    #[serde(default, borrow)]
    pub output_dtypes: Option<Vec<Str<'a>>>,
    #[serde(default, borrow)]
    pub state: Str<'a>,
}

/// A string as the decoder hands it: borrowed where it can be, else owned; None or null
/// is `Str(None)`.
#[derive(Debug, Default)]
pub(crate) struct Str<'a>(pub Option<Cow<'a, str>>);

impl Str<'_> {
    pub fn get(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<Str<'a>>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Str<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Str(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Str(Some(Cow::Owned(v.to_owned()))))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Str(Some(Cow::Owned(v))))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Str(None))
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Str(None))
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                d.deserialize_any(self)
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// An entry's `process_group`: its name and description (the first two items).
#[derive(Debug, Default)]
pub(crate) struct Pg<'a> {
    pub name: Str<'a>,
    pub desc: Str<'a>,
}

impl<'de: 'a, 'a> Deserialize<'de> for Pg<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<Pg<'a>>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Pg<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a sequence")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Self::Value, A::Error> {
                let name = s.next_element::<Str<'a>>()?.unwrap_or_default();
                let desc = s.next_element::<Str<'a>>()?.unwrap_or_default();
                while s.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Pg { name, desc })
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Pg::default())
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Pg::default())
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                d.deserialize_any(self)
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// A list of tensor shapes (`[[4, 8], [2]]`) flattened into one allocation: per tensor its
/// number of dimensions, then the dimensions. None, null and `[]` are all empty.
#[derive(Debug, Default, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Sizes(pub Vec<i64>);

impl Sizes {
    /// Back to one list per tensor.
    pub(crate) fn nested(&self) -> Vec<Vec<i64>> {
        let mut out = Vec::new();
        let mut rest = self.0.as_slice();
        while let Some((&n, tail)) = rest.split_first() {
            let n = (n.max(0) as usize).min(tail.len());
            out.push(tail[..n].to_vec());
            rest = &tail[n..];
        }
        out
    }
}

impl<'de> Deserialize<'de> for Sizes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Sizes;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a sequence")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while s.next_element_seed(Dims(&mut out))?.is_some() {}
                Ok(Sizes(out))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Sizes::default())
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Sizes::default())
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                d.deserialize_any(V)
            }
        }
        d.deserialize_any(V)
    }
}

/// One tensor's dimensions, appended to the flat list after their count.
struct Dims<'v>(&'v mut Vec<i64>);

impl<'de> DeserializeSeed<'de> for Dims<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Dims<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a sequence")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<(), A::Error> {
        let at = self.0.len();
        self.0.push(0);
        while let Some(x) = s.next_element::<i64>()? {
            self.0.push(x);
        }
        self.0[at] = (self.0.len() - at - 1) as i64;
        Ok(())
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct RawGroup {
    #[serde(default, deserialize_with = "text")]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub desc: Option<String>,
    /// `"[0, 1, 2, 3]"` as PyTorch writes it, or a list.
    #[serde(default, deserialize_with = "rank_list")]
    pub ranks: Option<Vec<u32>>,
}

/// The watchdog's view per group id: numbers in a pickle, strings in JSON.
#[derive(Debug, Default, Deserialize)]
pub struct RawStatus {
    #[serde(default, deserialize_with = "int")]
    pub last_enqueued_collective: Option<i64>,
    #[serde(default, deserialize_with = "int")]
    pub last_started_collective: Option<i64>,
    #[serde(default, deserialize_with = "int")]
    pub last_completed_collective: Option<i64>,
}

/// Decode a dump's bytes; an error names the file and the field path. The bytes are decoded
/// untracked (tracking every field's path costs more than the decoding); only a dump that
/// fails is decoded again with tracking, to name the field.
pub(crate) fn decode(file: &str, kind: Kind, bytes: &[u8]) -> Result<RawDump, DumpError> {
    let field = |path: String, why: String| DumpError::Field {
        file: file.to_string(),
        field: if path.is_empty() || path == "." {
            "(top level)".into()
        } else {
            path
        },
        why,
    };
    let opts = || serde_pickle::DeOptions::new().replace_unresolved_globals();
    let fast = match kind {
        Kind::Json => RawDump::deserialize(&mut serde_json::Deserializer::from_slice(bytes)).ok(),
        Kind::Pickle => RawDump::deserialize(&mut serde_pickle::Deserializer::new(bytes, opts())).ok(),
    };
    let dump: RawDump = match fast {
        Some(d) => d,
        None => match kind {
            Kind::Json => {
                let mut de = serde_json::Deserializer::from_slice(bytes);
                serde_path_to_error::deserialize(&mut de)
                    .map_err(|e| field(e.path().to_string(), e.inner().to_string()))?
            }
            Kind::Pickle => {
                let mut de = serde_pickle::Deserializer::new(bytes, opts());
                serde_path_to_error::deserialize(&mut de)
                    .map_err(|e| field(e.path().to_string(), e.inner().to_string()))?
            }
        },
    };
    match dump.version.as_deref() {
        None => Err(field("version".into(), "missing".into())),
        Some(v) if !known_version(v) => Err(DumpError::Version {
            file: file.to_string(),
            version: v.to_string(),
        }),
        Some(_) => Ok(dump),
    }
}

/// PyTorch's dump versions are `MAJOR.MINOR`; a major bump means an existing field changed
/// meaning, so only the majors read here (1: `seq_id`; 2: 2.0 to 2.10 and later minors,
/// which only add fields) are accepted.
fn known_version(v: &str) -> bool {
    let mut it = v.split('.');
    let major = it.next().and_then(|m| m.parse::<u32>().ok());
    let minor = it.next().and_then(|m| m.parse::<u32>().ok());
    matches!(major, Some(1 | 2)) && minor.is_some() && it.next().is_none()
}

/// The rank a dump belongs to: PyTorch's writer names the file `<prefix><rank>` (the dump
/// itself does not say); a `.json` or `.pkl` suffix someone added is allowed.
pub(crate) fn rank_from_name(file: &str) -> Result<u32, DumpError> {
    let base = file.rsplit('/').next().unwrap_or(file);
    let stem = [".json", ".pkl", ".pickle"]
        .iter()
        .find_map(|s| base.strip_suffix(s))
        .unwrap_or(base);
    let digits = stem.len() - stem.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    stem[stem.len() - digits..]
        .parse()
        .map_err(|_| DumpError::NoRank {
            file: file.to_string(),
        })
}

/// An integer written as a number, a string of one (JSON `pg_status`), None or null.
fn int<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<i64>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an integer, a string of one, or None")
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            i64::try_from(v)
                .map(Some)
                .map_err(|_| E::custom(format!("{v} is out of range")))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            if v.fract() == 0.0 && v.abs() < 9.0e15 {
                Ok(Some(v as i64))
            } else {
                Err(E::custom(format!("{v} is not an integer")))
            }
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            v.trim()
                .parse()
                .map(Some)
                .map_err(|_| E::custom(format!("{v:?} is not an integer")))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(V)
        }
    }
    d.deserialize_any(V)
}

/// A string, or None/null.
fn text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Option::<String>::deserialize(d)
}

/// A group's members: PyTorch writes the vector as text (`"[0, 1, 2]"`); a list is read too.
fn rank_list<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u32>>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<Vec<u32>>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a list of ranks, as text \"[0, 1]\" or a list")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            parse_ranks(v).map(Some).map_err(E::custom)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(r) = s.next_element::<u32>()? {
                out.push(r);
            }
            Ok(Some(out))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }
    d.deserialize_any(V)
}

/// `"[0, 1, 2]"` (PyTorch's `ranks_str`) to ranks.
pub(crate) fn parse_ranks(s: &str) -> Result<Vec<u32>, String> {
    let inner = s
        .trim()
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .ok_or_else(|| format!("{s:?} is not a list of ranks"))?;
    inner
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.parse::<u32>()
                .map_err(|_| format!("{t:?} in {s:?} is not a rank"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniffs_by_content() {
        let cases: &[(&[u8], Option<Kind>)] = &[
            (b"\x80\x02}q\x00", Some(Kind::Pickle)),
            (
                b"\x80\x05\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94",
                Some(Kind::Pickle),
            ),
            (b"\x80\x01}", None),
            (b"{\"version\":\"2.10\",\"entries\":[]}", Some(Kind::Json)),
            (b"  {\"pg_config\":{},\"version\":\"2.4\"}", Some(Kind::Json)),
            (b"{\"version\":\"1\"}", None),
            (b"host:1:1 [0] NCCL INFO Bootstrap", None),
            (b"", None),
        ];
        for (bytes, want) in cases {
            assert_eq!(sniff(bytes), *want, "{bytes:?}");
        }
    }

    #[test]
    fn ranks_and_versions() {
        assert_eq!(parse_ranks("[0, 1, 2, 3]").unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(parse_ranks("[]").unwrap(), Vec::<u32>::new());
        assert!(parse_ranks("0, 1").is_err());
        assert!(parse_ranks("[0, x]").is_err());
        for (v, ok) in [
            ("2.10", true),
            ("2.2", true),
            ("1.5", true),
            ("3.0", false),
            ("2", false),
            ("", false),
        ] {
            assert_eq!(known_version(v), ok, "{v}");
        }
        for (f, r) in [
            ("dir/nccl_trace_rank_12", Some(12)),
            ("nccl_trace_rank_3.json", Some(3)),
            ("/tmp/fr_trace/trace_7.pkl", Some(7)),
            ("dump", None),
        ] {
            assert_eq!(rank_from_name(f).ok(), r, "{f}");
        }
    }

    #[test]
    fn bad_field_is_named() {
        let j = br#"{"version":"2.10","entries":[{"collective_seq_id":"x"}]}"#;
        let e = decode("r0", Kind::Json, j).unwrap_err().to_string();
        assert!(
            e.contains("r0") && e.contains("entries[0].collective_seq_id"),
            "{e}"
        );
        let e = decode("r1", Kind::Json, br#"{"version":"9.1","entries":[]}"#).unwrap_err();
        assert!(e.to_string().contains("9.1"), "{e}");
        let e = decode("r2", Kind::Json, br#"{"entries":[]}"#).unwrap_err();
        assert!(e.to_string().contains("field version"), "{e}");
    }

    #[test]
    fn status_numbers_or_strings() {
        let j = br#"{"version":"2.10","pg_status":{"0":{"last_enqueued_collective":"4","last_completed_collective":3}}}"#;
        let d = decode("r0", Kind::Json, j).unwrap();
        let s = &d.pg_status["0"];
        assert_eq!(
            (s.last_enqueued_collective, s.last_completed_collective),
            (Some(4), Some(3))
        );
    }

    #[test]
    fn sizes_flatten_and_come_back() {
        for j in ["[]", "[[]]", "[[4]]", "[[4, 8], [], [2, 3, 5]]", "null"] {
            let s: Sizes = serde_json::from_str(j).unwrap();
            let want: Option<Vec<Vec<i64>>> = serde_json::from_str(j).unwrap();
            assert_eq!(s.nested(), want.unwrap_or_default(), "{j}");
        }
        assert!(serde_json::from_str::<Sizes>("[[1, \"x\"]]").is_err());
    }

    /// Text borrowed (plain) or owned (escaped) is the same call: one distinct call, every
    /// entry's sequence number kept, the newest and oldest by record id.
    #[test]
    fn entries_fold_borrowed_and_escaped_text_alike() {
        let e = |rid: u32, op: &str| {
            format!(
                r#"{{"record_id":{rid},"process_group":["0","default_pg"],"collective_seq_id":{},"profiling_name":"{op}","input_sizes":[[4]],"input_dtypes":["Float"],"state":"completed"}}"#,
                rid + 1
            )
        };
        let j = format!(
            r#"{{"version":"2.10","entries":[{},{},{}]}}"#,
            e(5, "nccl:all_reduce"),
            e(6, r"nccl:all\u005freduce"),
            e(7, "nccl:all_reduce")
        );
        let d = decode("r0", Kind::Json, j.as_bytes()).unwrap();
        let f = &d.entries;
        assert_eq!((f.count, f.calls().len()), (3, 1));
        assert_eq!(f.seqs, vec![(6, 0), (7, 0), (8, 0)]);
        assert_eq!((f.last.unwrap().record_id, f.oldest.unwrap().record_id), (7, 5));
        assert_eq!(f.calls()[0].op, "nccl:all_reduce");
        assert!(f.tracks_completion);
    }
}
