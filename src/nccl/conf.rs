//! NCCL's configuration files (`src/misc/param.cc`, rdma-facts.md §3(d)): `NCCL_CONF_FILE`
//! replaces `~/.nccl.conf`, then `/etc/nccl.conf` is read; lines are `KEY=VALUE`, `#` starts
//! a comment, and each value is applied with `setenv(key, value, 0)`, so a variable already
//! set (the real environment, or an earlier file) wins.

use std::collections::BTreeMap;

use serde::Serialize;

/// Where a value came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "path", rename_all = "snake_case")]
pub enum Origin {
    Environment,
    /// A configuration file, by the path NCCL opened.
    File(String),
}

/// One `KEY=VALUE` line of a file: the line number and the pair. Lines NCCL skips
/// (comments, blank, no `=`) are not returned.
pub fn parse_conf(text: &str) -> Vec<(usize, String, String)> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        // param.cc cuts the line at the first '#', then needs "key=value" with a non-empty key.
        let line = raw.split('#').next().unwrap_or("");
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let k = k.trim();
        if k.is_empty() || k.contains(char::is_whitespace) {
            continue;
        }
        out.push((i + 1, k.to_string(), v.trim().to_string()));
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
pub fn merge(env: &BTreeMap<String, String>, files: &[(String, String)]) -> BTreeMap<String, Setting> {
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
        for (line, k, v) in parse_conf(text) {
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

    #[test]
    fn conf_lines() {
        let t = "# site defaults\nNCCL_DEBUG=WARN\n\nNCCL_IB_HCA = mlx5_0 # trailing comment\nnot a pair\n=novalue\nNCCL_SOCKET_IFNAME=eth0\n";
        assert_eq!(
            parse_conf(t),
            vec![
                (2, "NCCL_DEBUG".into(), "WARN".into()),
                (4, "NCCL_IB_HCA".into(), "mlx5_0".into()),
                (7, "NCCL_SOCKET_IFNAME".into(), "eth0".into()),
            ]
        );
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
