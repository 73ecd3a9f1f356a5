//! Who am I in the job: rank, world size, coordinator address and job token, from flags or
//! from the launcher's environment (FABPROBE_*, Slurm, Open MPI, PMI, torchrun). Pure: the
//! environment is passed in as a map so every source is table-tested.

use std::collections::BTreeMap;

use serde::Serialize;
use thiserror::Error;

use crate::ring::model::Rank;

/// Default coordinator port when the launcher names a host but no port.
pub(crate) const DEFAULT_PORT: u16 = 29517;

/// Where rank and world size came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Flags,
    Fabprobe,
    Slurm,
    OpenMpi,
    Pmi,
    Torchrun,
    Local,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Flags => "flags",
            Source::Fabprobe => "FABPROBE_* environment",
            Source::Slurm => "Slurm (SLURM_PROCID/SLURM_NTASKS)",
            Source::OpenMpi => "Open MPI (OMPI_COMM_WORLD_RANK/SIZE)",
            Source::Pmi => "PMI (PMI_RANK/PMI_SIZE)",
            Source::Torchrun => "torchrun (RANK/WORLD_SIZE/MASTER_ADDR)",
            Source::Local => "--local",
        }
    }
}

/// What the flags said (each optional; flags win over the environment).
#[derive(Clone, Debug, Default)]
pub struct Flags {
    pub rank: Option<Rank>,
    pub world: Option<u32>,
    pub coordinator: Option<String>,
    pub token: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Identity {
    pub rank: Rank,
    pub world: u32,
    /// `host:port` of the coordinator (rank 0).
    pub coordinator: String,
    pub token: String,
    pub source: Source,
    /// Where the coordinator address came from, for the error a person sees.
    pub coordinator_source: String,
    /// Where the token came from (`--token`, `SLURM_JOB_ID`, ... or `default`).
    pub token_source: String,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum LauncherError {
    #[error(
        "no rank and world size: pass --rank R --world N --coordinator HOST:PORT, or run under \
         srun, mpirun, torchrun, or set FABPROBE_RANK/FABPROBE_WORLD/FABPROBE_COORDINATOR"
    )]
    NoRank,
    #[error("{var}={value:?} is not a number")]
    BadNumber { var: String, value: String },
    #[error("rank {rank} is out of range for world size {world}")]
    OutOfRange { rank: Rank, world: u32 },
    #[error("world size must be at least 2 for a ring (got {0})")]
    WorldTooSmall(u32),
    #[error(
        "no coordinator address ({source_name} gives rank and size but not where rank 0 is): pass \
         --coordinator HOST:PORT (rank 0's host) or set FABPROBE_COORDINATOR"
    )]
    NoCoordinator { source_name: String },
    #[error("coordinator {0:?} is not HOST:PORT")]
    BadCoordinator(String),
}

type Env = BTreeMap<String, String>;

fn num(env: &Env, var: &str) -> Result<Option<u32>, LauncherError> {
    match env.get(var) {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse::<u32>()
            .map(Some)
            .map_err(|_| LauncherError::BadNumber {
                var: var.to_string(),
                value: v.clone(),
            }),
    }
}

/// The first host of a Slurm hostlist: `node[01-04,07],gpu5` -> `node01`.
pub(crate) fn slurm_first_host(list: &str) -> Option<String> {
    let list = list.trim();
    let mut depth = 0;
    let mut end = list.len();
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let first = &list[..end];
    match first.find('[') {
        None if first.is_empty() => None,
        None => Some(first.to_string()),
        Some(open) => {
            let prefix = &first[..open];
            let inner = first[open + 1..].trim_end_matches(']');
            let range = inner.split(',').next()?;
            let lo = range.split('-').next()?;
            if lo.is_empty() {
                return None;
            }
            // Anything after the bracket (`n[1-2]-ib`) is kept as a suffix.
            let suffix = first.rfind(']').map(|p| &first[p + 1..]).unwrap_or("");
            Some(format!("{prefix}{lo}{suffix}"))
        }
    }
}

/// Split `host:port`, `[v6]:port`; a bare host gets `default_port`.
pub(crate) fn host_port(s: &str, default_port: u16) -> Result<(String, u16), LauncherError> {
    let bad = || LauncherError::BadCoordinator(s.to_string());
    if s.is_empty() {
        return Err(bad());
    }
    if let Some(rest) = s.strip_prefix('[') {
        let close = rest.find(']').ok_or_else(bad)?;
        let host = &rest[..close];
        let after = &rest[close + 1..];
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().map_err(|_| bad())?,
            None if after.is_empty() => default_port,
            None => return Err(bad()),
        };
        return Ok((host.to_string(), port));
    }
    match s.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => {
            if h.is_empty() {
                return Err(bad());
            }
            Ok((h.to_string(), p.parse().map_err(|_| bad())?))
        }
        Some(_) => Ok((s.to_string(), default_port)), // a bare IPv6 address
        None => Ok((s.to_string(), default_port)),
    }
}

fn join(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The coordinator under torchrun's variables: `MASTER_ADDR` and its port, and where it
/// came from in words.
fn torchrun_coordinator(env: &Env, a: &str, port: u16) -> (String, String) {
    // Under torchrun its own agent store listens on MASTER_PORT; take the next port.
    let base = num(env, "MASTER_PORT")
        .ok()
        .flatten()
        .and_then(|p| u16::try_from(p).ok());
    let under_torchrun = env.contains_key("TORCHELASTIC_RUN_ID");
    let p = match base {
        Some(p) if under_torchrun => p.saturating_add(1),
        Some(p) => p,
        None => port,
    };
    let why = if under_torchrun {
        "MASTER_ADDR:MASTER_PORT+1"
    } else {
        "MASTER_ADDR:MASTER_PORT"
    };
    (join(a, p), why.to_string())
}

/// Resolve rank, world, coordinator and token. Flags win; then the first launcher whose
/// variables are present, in the order FABPROBE_*, Slurm, Open MPI, PMI, torchrun.
pub fn resolve(flags: &Flags, env: &Env) -> Result<Identity, LauncherError> {
    let port = num(env, "FABPROBE_PORT")?
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or(DEFAULT_PORT);
    let fab_coord = env
        .get("FABPROBE_COORDINATOR")
        .map(|c| (c.clone(), "FABPROBE_COORDINATOR".to_string()));

    let (rank, world, source, launcher_coord) = if let (Some(r), Some(w)) = (flags.rank, flags.world) {
        (r, w, Source::Flags, None)
    } else if let (Some(r), Some(w)) = (num(env, "FABPROBE_RANK")?, num(env, "FABPROBE_WORLD")?) {
        (r, w, Source::Fabprobe, None)
    } else if let (Some(r), Some(w)) = (num(env, "SLURM_PROCID")?, num(env, "SLURM_NTASKS")?) {
        // With srun's default block distribution rank 0 runs on the first node of the job.
        let list = env
            .get("SLURM_STEP_NODELIST")
            .or_else(|| env.get("SLURM_JOB_NODELIST"))
            .or_else(|| env.get("SLURM_NODELIST"));
        let coord = list
            .and_then(|l| slurm_first_host(l))
            .map(|h| (join(&h, port), "the first host of SLURM_JOB_NODELIST".to_string()));
        (r, w, Source::Slurm, coord)
    } else if let (Some(r), Some(w)) = (
        num(env, "OMPI_COMM_WORLD_RANK")?,
        num(env, "OMPI_COMM_WORLD_SIZE")?,
    ) {
        (r, w, Source::OpenMpi, None)
    } else if let (Some(r), Some(w)) = (num(env, "PMI_RANK")?, num(env, "PMI_SIZE")?) {
        (r, w, Source::Pmi, None)
    } else if let (Some(r), Some(w)) = (num(env, "RANK")?, num(env, "WORLD_SIZE")?) {
        let coord = env.get("MASTER_ADDR").map(|a| torchrun_coordinator(env, a, port));
        (r, w, Source::Torchrun, coord)
    } else {
        return Err(LauncherError::NoRank);
    };
    if world < 2 {
        return Err(LauncherError::WorldTooSmall(world));
    }
    if rank >= world {
        return Err(LauncherError::OutOfRange { rank, world });
    }
    let (coordinator, coordinator_source) = match (&flags.coordinator, fab_coord, launcher_coord) {
        (Some(c), _, _) => (c.clone(), "--coordinator".to_string()),
        (None, Some(c), _) => c,
        (None, None, Some(c)) => c,
        (None, None, None) => {
            return Err(LauncherError::NoCoordinator {
                source_name: source.name().to_string(),
            });
        }
    };
    let (h, p) = host_port(&coordinator, port)?;
    let coordinator = join(&h, p);
    let (token, token_source) = token(flags, env);
    Ok(Identity {
        rank,
        world,
        coordinator,
        token,
        source,
        coordinator_source,
        token_source,
    })
}

/// The job token: `--token`, `FABPROBE_TOKEN`, else the launcher's job id, else `default`.
fn token(flags: &Flags, env: &Env) -> (String, String) {
    if let Some(t) = &flags.token {
        return (t.clone(), "--token".into());
    }
    for var in [
        "FABPROBE_TOKEN",
        "SLURM_JOB_ID",
        "OMPI_MCA_ess_base_jobid",
        "PMIX_NAMESPACE",
        "PMI_JOBID",
        "TORCHELASTIC_RUN_ID",
    ] {
        if let Some(v) = env.get(var).filter(|v| !v.is_empty()) {
            // A Slurm job can run several steps at once; the step id keeps them apart.
            let v = match (var, env.get("SLURM_STEP_ID")) {
                ("SLURM_JOB_ID", Some(s)) => format!("{v}.{s}"),
                _ => v.clone(),
            };
            return (format!("{}:{v}", var.to_lowercase()), var.into());
        }
    }
    (
        "fabprobe-default".into(),
        "default (no --token and no launcher job id)".into(),
    )
}

/// The process environment as the map `resolve` takes.
pub(crate) fn process_env() -> Env {
    std::env::vars().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Env {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    #[allow(clippy::type_complexity)]
    fn sources_in_order() {
        let cases: Vec<(Flags, Env, Result<(u32, u32, Source, &str, &str), LauncherError>)> = vec![
            (
                Flags {
                    rank: Some(1),
                    world: Some(4),
                    coordinator: Some("10.0.0.1:5000".into()),
                    token: Some("t".into()),
                },
                env(&[("SLURM_PROCID", "3"), ("SLURM_NTASKS", "8")]),
                Ok((1, 4, Source::Flags, "10.0.0.1:5000", "t")),
            ),
            (
                Flags::default(),
                env(&[
                    ("FABPROBE_RANK", "2"),
                    ("FABPROBE_WORLD", "3"),
                    ("FABPROBE_COORDINATOR", "a"),
                ]),
                Ok((2, 3, Source::Fabprobe, "a:29517", "fabprobe-default")),
            ),
            (
                Flags::default(),
                env(&[
                    ("SLURM_PROCID", "5"),
                    ("SLURM_NTASKS", "16"),
                    ("SLURM_JOB_NODELIST", "gpu[003-010,12],x"),
                    ("SLURM_JOB_ID", "77"),
                    ("SLURM_STEP_ID", "0"),
                ]),
                Ok((5, 16, Source::Slurm, "gpu003:29517", "slurm_job_id:77.0")),
            ),
            (
                Flags::default(),
                env(&[
                    ("OMPI_COMM_WORLD_RANK", "0"),
                    ("OMPI_COMM_WORLD_SIZE", "2"),
                    ("FABPROBE_COORDINATOR", "h1:1234"),
                    ("OMPI_MCA_ess_base_jobid", "123"),
                ]),
                Ok((0, 2, Source::OpenMpi, "h1:1234", "ompi_mca_ess_base_jobid:123")),
            ),
            (
                Flags {
                    coordinator: Some("[fe80::1]:9".into()),
                    ..Flags::default()
                },
                env(&[("PMI_RANK", "1"), ("PMI_SIZE", "2")]),
                Ok((1, 2, Source::Pmi, "[fe80::1]:9", "fabprobe-default")),
            ),
            (
                Flags::default(),
                env(&[
                    ("RANK", "3"),
                    ("WORLD_SIZE", "4"),
                    ("MASTER_ADDR", "m"),
                    ("MASTER_PORT", "29500"),
                ]),
                Ok((3, 4, Source::Torchrun, "m:29500", "fabprobe-default")),
            ),
            (
                Flags::default(),
                env(&[
                    ("RANK", "3"),
                    ("WORLD_SIZE", "4"),
                    ("MASTER_ADDR", "m"),
                    ("MASTER_PORT", "29500"),
                    ("TORCHELASTIC_RUN_ID", "r1"),
                ]),
                Ok((3, 4, Source::Torchrun, "m:29501", "torchelastic_run_id:r1")),
            ),
            (Flags::default(), env(&[]), Err(LauncherError::NoRank)),
            (
                Flags::default(),
                env(&[("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "2")]),
                Err(LauncherError::NoCoordinator {
                    source_name: Source::OpenMpi.name().into(),
                }),
            ),
            (
                Flags::default(),
                env(&[("PMI_RANK", "x"), ("PMI_SIZE", "2")]),
                Err(LauncherError::BadNumber {
                    var: "PMI_RANK".into(),
                    value: "x".into(),
                }),
            ),
            (
                Flags {
                    rank: Some(4),
                    world: Some(4),
                    coordinator: Some("h:1".into()),
                    token: None,
                },
                env(&[]),
                Err(LauncherError::OutOfRange { rank: 4, world: 4 }),
            ),
            (
                Flags {
                    rank: Some(0),
                    world: Some(1),
                    coordinator: Some("h:1".into()),
                    token: None,
                },
                env(&[]),
                Err(LauncherError::WorldTooSmall(1)),
            ),
            (
                Flags {
                    rank: Some(0),
                    world: Some(2),
                    coordinator: Some("h:x".into()),
                    token: None,
                },
                env(&[]),
                Err(LauncherError::BadCoordinator("h:x".into())),
            ),
        ];
        for (i, (flags, env, want)) in cases.into_iter().enumerate() {
            let got = resolve(&flags, &env).map(|id| {
                (
                    id.rank,
                    id.world,
                    id.source,
                    id.coordinator.clone(),
                    id.token.clone(),
                )
            });
            let want = want.map(|(r, w, s, c, t)| (r, w, s, c.to_string(), t.to_string()));
            assert_eq!(got, want, "case {i}");
        }
    }

    #[test]
    fn slurm_hostlists() {
        for (list, want) in [
            ("node01", Some("node01")),
            ("node[01-04,07],gpu5", Some("node01")),
            ("a,b", Some("a")),
            ("rack1-n[7,9]", Some("rack1-n7")),
            ("n[3-4]-ib", Some("n3-ib")),
            ("", None),
        ] {
            assert_eq!(slurm_first_host(list).as_deref(), want, "{list}");
        }
    }
}
