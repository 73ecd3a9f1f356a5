//! The one NCCL settings model: every `NCCL_*` value NCCL will see, with its origin and what
//! it shadows, and the NCCL version whose rules apply. Built once (by the CLI) from the job's
//! environment as the host holds it (the shell's, `--env-from PID`, `--env-file`, or a
//! snapshot's), then `NCCL_CONF_FILE` or `~/.nccl.conf`, then `/etc/nccl.conf`, read through
//! the host exactly as NCCL's `setEnvFile` reads them ([`conf`]). Probes take their NCCL
//! values from here; none reads `NCCL_*` itself.

use std::collections::BTreeMap;

use serde::Serialize;

use super::conf::{self, ConfLine, Origin, Setting};
use super::gid::{GidEnv, nccl_param};
use super::version::NcclVersion;
use crate::host::Host;

/// One configuration file NCCL would open.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ConfFile {
    pub path: String,
    /// Why NCCL reads it: `NCCL_CONF_FILE`, `~/.nccl.conf` or `/etc/nccl.conf`.
    pub role: String,
    /// `read`, `absent`, or the read error.
    pub state: String,
    pub values: usize,
}

/// A configuration line NCCL reads differently from what its author most likely meant:
/// blanks around the name or `=`, a trailing comment or blank, a carriage return.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConfLint {
    pub file: String,
    pub line: usize,
    /// The name and value exactly as NCCL sets them.
    pub nccl_name: String,
    pub nccl_value: String,
    /// What the line most likely meant.
    pub meant_name: String,
    pub meant_value: String,
    pub why: Vec<String>,
}

/// A value taken from the model, with where it came from (for reports and evidence).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Sourced<T> {
    pub value: T,
    /// `NCCL_IB_TC=106 (/etc/nccl.conf:3)`, `NCCL_IB_TC=106 (environment)`.
    pub from: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct NcclSettings {
    /// Where the job's environment came from: `shell`, `--env-from PID 1234`,
    /// `--env-file job.env`, or what a snapshot recorded.
    pub env_source: String,
    /// The configuration files in the order NCCL reads them.
    pub conf_files: Vec<ConfFile>,
    /// Every value in effect (the environment's `NCCL_*` and every name a file sets).
    #[serde(skip)]
    pub values: BTreeMap<String, Setting>,
    pub conf_lints: Vec<ConfLint>,
    pub version: NcclVersion,
}

/// Why a configuration line is probably not what its author meant (empty: it is fine).
fn misread(l: &ConfLine) -> Option<(String, String, Vec<String>)> {
    let mut why = Vec::new();
    let name = l.key.trim().to_string();
    if name != l.key {
        why.push(format!(
            "the name has blanks around it, so NCCL sets {:?} and {name} stays unset",
            l.key
        ));
    }
    let mut value = l.value.as_str();
    if let Some(i) = value.find(" #").or_else(|| value.find("\t#")) {
        why.push(format!(
            "NCCL has no trailing comments: the value is {:?}, comment included",
            l.value
        ));
        value = &value[..i];
    }
    let body = match value.strip_suffix('\r') {
        Some(b) => {
            why.push("the line ends in \\r (a DOS line end): NCCL keeps it in the value".into());
            b
        }
        None => value,
    };
    let meant = body.trim().to_string();
    if meant != body {
        why.push(format!("blanks around the value are kept: {:?}", l.value));
    }
    (!why.is_empty()).then_some((name, meant, why))
}

impl NcclSettings {
    /// Read the model from the host's job environment and configuration files.
    pub fn build(host: &Host, version: Option<NcclVersion>) -> NcclSettings {
        let env = host.env();
        let mut conf_paths: Vec<(String, String)> = Vec::new();
        // initEnv reads NCCL_CONF_FILE from the process environment only, before any file.
        match env.get("NCCL_CONF_FILE") {
            Some(p) if !p.is_empty() => conf_paths.push((p.clone(), "NCCL_CONF_FILE".into())),
            _ => {
                if let Some(home) = host.nccl_home() {
                    conf_paths.push((
                        format!("{}/.nccl.conf", home.trim_end_matches('/')),
                        "~/.nccl.conf".into(),
                    ));
                }
            }
        }
        conf_paths.push(("/etc/nccl.conf".into(), "/etc/nccl.conf".into()));
        let mut conf_files = Vec::new();
        let mut texts = Vec::new();
        let mut conf_lints = Vec::new();
        for (path, role) in conf_paths {
            let (state, values) = match host.read_opt(&path) {
                Ok(Some(t)) => {
                    let lines = conf::parse_conf(&t);
                    for l in &lines {
                        if let Some((meant_name, meant_value, why)) = misread(l) {
                            conf_lints.push(ConfLint {
                                file: path.clone(),
                                line: l.line,
                                nccl_name: l.key.clone(),
                                nccl_value: l.value.clone(),
                                meant_name,
                                meant_value,
                                why,
                            });
                        }
                    }
                    let n = lines.len();
                    texts.push((path.clone(), t));
                    ("read".to_string(), n)
                }
                Ok(None) => ("absent".to_string(), 0),
                Err(e) => (e.to_string(), 0),
            };
            conf_files.push(ConfFile {
                path,
                role,
                state,
                values,
            });
        }
        let nccl_env: BTreeMap<String, String> = env
            .iter()
            .filter(|(k, _)| k.starts_with("NCCL_"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let values = conf::merge(&nccl_env, &texts);
        let version = version
            .unwrap_or_else(|| NcclVersion::detect(host, env.get("LD_LIBRARY_PATH").map(String::as_str)));
        NcclSettings {
            env_source: host.env_source().to_string(),
            conf_files,
            values,
            conf_lints,
            version,
        }
    }

    /// A model from literal environment pairs and no files (tests, and callers that have
    /// no host).
    pub fn from_env(pairs: &[(&str, &str)], version: NcclVersion) -> NcclSettings {
        let env: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        NcclSettings {
            env_source: "given".into(),
            values: conf::merge(&env, &[]),
            version,
            ..NcclSettings::default()
        }
    }

    pub fn get(&self, name: &str) -> Option<&Setting> {
        self.values.get(name)
    }

    pub fn value(&self, name: &str) -> Option<&str> {
        self.get(name).map(|s| s.value.as_str())
    }

    /// Every value, names in order.
    pub fn all(&self) -> impl Iterator<Item = &Setting> {
        self.values.values()
    }

    /// `NAME=value (origin)`, for reports and evidence.
    pub fn describe(&self, name: &str) -> Option<String> {
        self.get(name)
            .map(|s| format!("{}={} ({})", s.name, s.value, origin_text(s)))
    }

    /// The variables that steer NCCL's GID choice, and the version rule for the default.
    pub fn gid_env(&self) -> GidEnv {
        let mut g = GidEnv::from_lookup(|k| self.value(k).map(str::to_string));
        g.auto_default = self.version.gid_index_auto();
        g.nccl_version = self.version.version.clone();
        g
    }

    /// `NCCL_IB_TC` as NCCL reads it (`NCCL_PARAM`: strtoll, no digits means unset; only
    /// the low 8 bits reach the GRH's traffic class). `None` when no source sets it.
    pub fn ib_tc(&self) -> Option<Sourced<u32>> {
        let s = self.get("NCCL_IB_TC")?;
        let v = nccl_param(Some(&s.value), -1);
        if v < 0 {
            return None;
        }
        Some(Sourced {
            value: (v & 0xff) as u32,
            from: format!("NCCL_IB_TC={} ({})", s.value, origin_text(s)),
        })
    }

    /// Which RDMA ports the settings let NCCL use: none under `NCCL_IB_DISABLE=1`, those
    /// `NCCL_IB_HCA` selects where it is set and not empty, every one otherwise.
    pub(crate) fn ib_use(&self) -> IbUse {
        IbUse {
            disabled: nccl_param(self.value("NCCL_IB_DISABLE"), 0) == 1,
            hca: self
                .value("NCCL_IB_HCA")
                .filter(|v| !v.is_empty())
                .map(super::hca::HcaSpec::parse),
        }
    }

    /// `NCCL_NET_GDR_LEVEL` as set (the gdr probe parses the level).
    pub(crate) fn gdr_level(&self) -> Option<Sourced<String>> {
        let s = self.get("NCCL_NET_GDR_LEVEL")?;
        Some(Sourced {
            value: s.value.clone(),
            from: origin_text(s),
        })
    }
}

/// `environment`, or `file:line`.
/// What `NCCL_IB_DISABLE` and `NCCL_IB_HCA` leave NCCL to use ([`NcclSettings::ib_use`]).
#[derive(Clone, Debug)]
pub(crate) struct IbUse {
    pub disabled: bool,
    pub hca: Option<super::hca::HcaSpec>,
}

impl IbUse {
    /// Whether NCCL's settings select this port (its state aside).
    pub fn selects(&self, dev: &str, port: u32) -> bool {
        !self.disabled && self.hca.as_ref().is_none_or(|s| s.selects(dev, port))
    }

    /// Whether NCCL opens this port, and why in words: net_ib's init keeps ports that are
    /// ACTIVE, of link layer InfiniBand or Ethernet, and selected by `NCCL_IB_HCA`. The one
    /// decision `nccl-env`, `gdr` and `check` read (an unreadable state is not ACTIVE).
    pub(crate) fn port_use(
        &self,
        dev: &str,
        port: u32,
        state: Option<&str>,
        link_layer: Option<&str>,
    ) -> (bool, String) {
        if self.disabled {
            return (false, "NCCL_IB_DISABLE=1".to_string());
        }
        if state != Some("ACTIVE") {
            return (false, format!("port state {}", state.unwrap_or("unknown")));
        }
        if !matches!(link_layer, Some("InfiniBand" | "Ethernet")) {
            return (false, format!("link layer {}", link_layer.unwrap_or("unknown")));
        }
        let Some(s) = &self.hca else {
            return (true, "default: every active port".to_string());
        };
        let used = s.selects(dev, port);
        let why = match (used, s.matching_entry(dev, port)) {
            (true, Some(e)) if !s.exact && e.name != dev => {
                format!("NCCL_IB_HCA prefix {} matches", e.name)
            }
            (true, _) if s.exclude => "not excluded by NCCL_IB_HCA".to_string(),
            (true, _) => "listed in NCCL_IB_HCA".to_string(),
            (false, _) if s.exclude => "excluded by NCCL_IB_HCA".to_string(),
            (false, _) => "not in NCCL_IB_HCA".to_string(),
        };
        (used, why)
    }
}

pub(crate) fn origin_text(s: &Setting) -> String {
    match &s.origin {
        Origin::Environment => "environment".into(),
        Origin::File(p) => match s.line {
            Some(l) => format!("{p}:{l}"),
            None => p.clone(),
        },
    }
}

/// `/proc/PID/environ`: `KEY=VALUE` entries separated by NUL bytes (bytes that are not
/// UTF-8 are replaced; entries without `=` are skipped, as getenv never finds them).
pub(crate) fn parse_environ(bytes: &[u8]) -> BTreeMap<String, String> {
    bytes
        .split(|b| *b == 0)
        .filter_map(|e| {
            let e = String::from_utf8_lossy(e);
            let (k, v) = e.split_once('=')?;
            (!k.is_empty()).then(|| (k.to_string(), v.to_string()))
        })
        .collect()
}

/// The real uid of `/proc/PID/status` (`Uid:\treal\teffective\tsaved\tfs`): NCCL's
/// `getuid()` in that process, whose home holds its `~/.nccl.conf`.
pub(crate) fn parse_status_uid(text: &str) -> Option<u32> {
    text.lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|u| u.parse().ok())
}

/// An `--env-file`: `KEY=VALUE` lines as a job script or `srun --export` writes them
/// (`export ` allowed, one level of matching quotes removed, `#` lines and blank lines
/// skipped). A line of another shape is an error naming its number.
pub(crate) fn parse_env_file(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    // `env` prints an exported shell function (Lmod's `module`) as `BASH_FUNC_name%%=() {`
    // and its body on the lines after it, up to a line `}`: no NCCL variable, skipped whole.
    let mut in_function = false;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if in_function {
            in_function = raw != "}";
            continue;
        }
        if line.starts_with("BASH_FUNC_") && line.split_once('=').is_some_and(|(_, v)| v.starts_with("()")) {
            in_function = !line.ends_with('}');
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line).trim_start();
        let Some((k, v)) = line.split_once('=') else {
            return Err(format!("line {}: not KEY=VALUE: {:?}", i + 1, raw));
        };
        let name_ok = !k.is_empty()
            && !k.starts_with(|c: char| c.is_ascii_digit())
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !name_ok {
            return Err(format!("line {}: {:?} is not a variable name", i + 1, k));
        }
        let v = ['"', '\'']
            .iter()
            .find_map(|q| v.strip_prefix(*q).and_then(|x| x.strip_suffix(*q)))
            .unwrap_or(v);
        out.insert(k.to_string(), v.to_string());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_output_with_exported_functions_reads() {
        let text = "NCCL_IB_HCA=mlx5_0\nBASH_FUNC_module%%=() {  local _mlshdbg='';\n eval \"$(/usr/bin/tclsh 'x' bash \"$@\")\"\n}\nBASH_FUNC_ml%%=() {  module ml \"$@\"\n}\nNCCL_DEBUG=INFO\nBASH_FUNC_one%%=() { :; }\nPATH=/bin\n";
        let m = parse_env_file(text).unwrap();
        let keys: Vec<&str> = m.keys().map(String::as_str).collect();
        assert_eq!(keys, ["NCCL_DEBUG", "NCCL_IB_HCA", "PATH"]);
    }

    fn lint(key: &str, value: &str) -> Option<(String, String, Vec<String>)> {
        misread(&ConfLine {
            line: 1,
            key: key.into(),
            value: value.into(),
        })
    }

    #[test]
    fn conf_lines_that_mean_something_else() {
        let (n, v, why) = lint("NCCL_IB_HCA ", " mlx5_0").unwrap();
        assert_eq!((n.as_str(), v.as_str()), ("NCCL_IB_HCA", "mlx5_0"));
        assert_eq!(why.len(), 2, "{why:?}");
        let (n, v, why) = lint("NCCL_SOCKET_IFNAME", "eth0 # note").unwrap();
        assert_eq!((n.as_str(), v.as_str()), ("NCCL_SOCKET_IFNAME", "eth0"));
        assert!(why[0].contains("trailing comments"), "{why:?}");
        let (_, v, why) = lint("NCCL_IB_TC", "106\r").unwrap();
        assert_eq!(v, "106");
        assert!(why[0].contains("\\r"), "{why:?}");
        assert_eq!(lint("NCCL_IB_TC", "106"), None);
        assert_eq!(lint("NCCL_IB_HCA", "=mlx5_0"), None);
    }

    #[test]
    fn status_uid() {
        for (text, want) in [
            (
                "Name:\tpython3\nUid:\t1000\t0\t0\t0\nGid:\t100\t100\t100\t100\n",
                Some(1000),
            ),
            ("Uid:\t0\t0\t0\t0\n", Some(0)),
            ("Name:\tx\n", None),
            ("Uid:\tx\t0\n", None),
            ("", None),
        ] {
            assert_eq!(parse_status_uid(text), want, "{text:?}");
        }
    }

    #[test]
    fn job_environments() {
        let e = parse_environ(b"NCCL_IB_TC=106\0HOME=/root\0junk\0NCCL_X=a=b\0\xff=1\0");
        assert_eq!(e["NCCL_IB_TC"], "106");
        assert_eq!(e["NCCL_X"], "a=b");
        assert!(!e.contains_key("junk"));
        let f = parse_env_file(
            "# job\nexport NCCL_IB_HCA=\"=mlx5_0\"\n\nNCCL_IB_TC='106'\nNCCL_SOCKET_IFNAME=eth0\n",
        )
        .unwrap();
        assert_eq!(f["NCCL_IB_HCA"], "=mlx5_0");
        assert_eq!(f["NCCL_IB_TC"], "106");
        assert_eq!(f["NCCL_SOCKET_IFNAME"], "eth0");
        let err = parse_env_file("NCCL_A=1\nsrun -N2 x\n").unwrap_err();
        assert!(err.starts_with("line 2:"), "{err}");
        assert!(
            parse_env_file("NCCL IB=1\n")
                .unwrap_err()
                .contains("not a variable name")
        );
    }

    #[test]
    fn ib_tc_as_nccl_param_reads_it() {
        let v = NcclVersion::unknown("test");
        let tc = |s: &str| NcclSettings::from_env(&[("NCCL_IB_TC", s)], v.clone()).ib_tc();
        assert_eq!(tc("106").map(|t| t.value), Some(106));
        assert_eq!(tc("0x6a").map(|t| t.value), Some(106));
        assert_eq!(tc("106 # lossless").map(|t| t.value), Some(106));
        assert_eq!(tc("high").map(|t| t.value), Some(0), "no digits: NCCL reads 0");
        assert_eq!(tc("").map(|t| t.value), None);
        assert_eq!(NcclSettings::from_env(&[], v).ib_tc(), None);
    }
}
