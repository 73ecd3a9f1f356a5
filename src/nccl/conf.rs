//! NCCL's configuration files (NVIDIA/nccl `src/misc/param.cc`, `setEnvFile`, read at
//! 2.20.5 and at master @ 081eafaf): `NCCL_CONF_FILE` replaces `~/.nccl.conf`, then
//! `/etc/nccl.conf` is read. Each line is taken as `getline` returns it: a line whose first
//! byte is `#` is skipped, one trailing `\n` is cut, the rest is split at the first `=` (no
//! `=`: skipped, so blank lines are), and nothing is trimmed, so `NCCL_IB_HCA = mlx5_0` sets
//! a variable named `NCCL_IB_HCA ` and `X=eth0 # note` the value `eth0 # note`. Names and
//! values are cut at 1023 bytes. Each pair is applied with `setenv(key, value, 0)`: a
//! variable already set (the job's environment, an earlier line or file) wins, and `setenv`
//! refuses an empty name.

use std::collections::BTreeMap;

use serde::Serialize;

/// Where a value came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "path", rename_all = "snake_case")]
pub enum Origin {
    /// The job's environment (the shell's, `--env-from PID` or `--env-file`; the settings
    /// model says which).
    Environment,
    /// A configuration file, by the path NCCL opened.
    File(String),
}

/// `envVar[1024]`/`envValue[1024]` in `setEnvFile`: longer names and values are cut.
const MAX_CONF_BYTES: usize = 1023;

/// One line NCCL applies: its number, the name and the value exactly as NCCL keeps them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ConfLine {
    pub line: usize,
    pub key: String,
    pub value: String,
}

fn cut(s: &str) -> String {
    let mut end = s.len().min(MAX_CONF_BYTES);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// Every `KEY=VALUE` line of a file as `setEnvFile` reads it (see the module comment).
/// Lines NCCL skips (a leading `#`, no `=`, an empty name `setenv` refuses) are not returned.
pub(crate) fn parse_conf(text: &str) -> Vec<ConfLine> {
    let mut out = Vec::new();
    for (i, raw) in text.split_inclusive('\n').enumerate() {
        if raw.starts_with('#') {
            continue;
        }
        let line = raw.strip_suffix('\n').unwrap_or(raw);
        // getline stops nowhere else, but NCCL's scan for '=' stops at a NUL byte.
        let line = line.split('\0').next().unwrap_or("");
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        if k.is_empty() {
            continue;
        }
        out.push(ConfLine {
            line: i + 1,
            key: cut(k),
            value: cut(v),
        });
    }
    out
}

/// A value in effect, and the values it shadowed (from lower-precedence sources).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Setting {
    pub name: String,
    pub value: String,
    pub origin: Origin,
    /// `file:line` for a value from a file.
    pub line: Option<usize>,
    /// Values this one hides, highest precedence first.
    pub shadowed: Vec<Shadowed>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Shadowed {
    pub value: String,
    pub origin: Origin,
    pub line: Option<usize>,
}

/// Merge in NCCL's order: the environment first, then each file in the order read; the
/// first source to set a name wins (setenv without overwrite).
pub(crate) fn merge(env: &BTreeMap<String, String>, files: &[(String, String)]) -> BTreeMap<String, Setting> {
    let mut out: BTreeMap<String, Setting> = BTreeMap::new();
    for (k, v) in env {
        out.insert(
            k.clone(),
            Setting {
                name: k.clone(),
                value: v.clone(),
                origin: Origin::Environment,
                line: None,
                shadowed: Vec::new(),
            },
        );
    }
    for (path, text) in files {
        for ConfLine {
            line,
            key: k,
            value: v,
        } in parse_conf(text)
        {
            let origin = Origin::File(path.clone());
            match out.get_mut(&k) {
                Some(s) => s.shadowed.push(Shadowed {
                    value: v,
                    origin,
                    line: Some(line),
                }),
                None => {
                    out.insert(
                        k.clone(),
                        Setting {
                            name: k,
                            value: v,
                            origin,
                            line: Some(line),
                            shadowed: Vec::new(),
                        },
                    );
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(line: usize, k: &str, v: &str) -> ConfLine {
        ConfLine {
            line,
            key: k.into(),
            value: v.into(),
        }
    }

    #[test]
    fn conf_lines_as_set_env_file_reads_them() {
        let t = "# site defaults\nNCCL_DEBUG=WARN\n\nNCCL_IB_HCA = mlx5_0\nnot a pair\n=novalue\nNCCL_SOCKET_IFNAME=eth0 # note\n  # indented comment=x\nNCCL_IB_TC=106\r\nNCCL_A==b\nNCCL_LAST=1";
        assert_eq!(
            parse_conf(t),
            vec![
                l(2, "NCCL_DEBUG", "WARN"),
                l(4, "NCCL_IB_HCA ", " mlx5_0"),
                l(7, "NCCL_SOCKET_IFNAME", "eth0 # note"),
                l(8, "  # indented comment", "x"),
                l(9, "NCCL_IB_TC", "106\r"),
                l(10, "NCCL_A", "=b"),
                l(11, "NCCL_LAST", "1"),
            ]
        );
    }

    #[test]
    fn long_names_and_values_are_cut_like_nccl() {
        let t = format!("NCCL_X={}\n", "v".repeat(2000));
        assert_eq!(parse_conf(&t)[0].value.len(), 1023);
    }

    #[test]
    fn the_first_line_of_a_file_wins_over_a_later_one() {
        let m = merge(
            &BTreeMap::new(),
            &[(
                "/etc/nccl.conf".to_string(),
                "NCCL_IB_TC=106\nNCCL_IB_TC=0\n".to_string(),
            )],
        );
        assert_eq!(m["NCCL_IB_TC"].value, "106");
        assert_eq!(m["NCCL_IB_TC"].shadowed[0].value, "0");
    }

    #[test]
    fn environment_wins_then_first_file() {
        let env = BTreeMap::from([("NCCL_DEBUG".to_string(), "INFO".to_string())]);
        let files = vec![
            (
                "/home/u/.nccl.conf".to_string(),
                "NCCL_DEBUG=WARN\nNCCL_IB_HCA=mlx5_1\n".to_string(),
            ),
            (
                "/etc/nccl.conf".to_string(),
                "NCCL_IB_HCA=mlx5\nNCCL_IB_TIMEOUT=22\n".to_string(),
            ),
        ];
        let m = merge(&env, &files);
        assert_eq!(m["NCCL_DEBUG"].value, "INFO");
        assert_eq!(m["NCCL_DEBUG"].origin, Origin::Environment);
        assert_eq!(m["NCCL_DEBUG"].shadowed[0].value, "WARN");
        assert_eq!(m["NCCL_IB_HCA"].value, "mlx5_1");
        assert_eq!(m["NCCL_IB_HCA"].origin, Origin::File("/home/u/.nccl.conf".into()));
        assert_eq!(
            m["NCCL_IB_HCA"].shadowed[0].origin,
            Origin::File("/etc/nccl.conf".into())
        );
        assert_eq!(m["NCCL_IB_TIMEOUT"].line, Some(2));
    }
}
