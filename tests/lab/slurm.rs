//! A real Slurm on one machine (Debian's slurm-wlm 22.05.8 and munge): a private `munged` (own
//! key and socket in a temp dir), `slurmctld` in its own network and UTS namespace (hostname
//! `ctl`), and one `slurmd` per node namespace (NodeName `nodeN`, hostname `hostN`: they
//! differ, as with NodeHostname or `slurmd -N`), all on one bridge in
//! 198.18.7.0/24. slurm.conf, state, spool and logs live in the temp dir (`SLURM_CONF`);
//! names resolve through `/etc/netns/<ns>/hosts` (what `ip netns exec` bind-mounts), so
//! `/etc/hosts` and `/etc/slurm` are never touched. Each node's `fabprobe` reads its own copy
//! of a fixture (`roots/<NodeName>`, hostname changed) through a wrapper. Everything (processes,
//! namespaces, bridge, `/etc/netns` entries, files) is removed by `Drop`, also on panic, and
//! leftovers of killed runs (prefix `fpl<pid>s`) by the next lab.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::{BIN, lab_unavailable, must, sh, text};

pub const NODES: usize = 4;
const NET: &str = "198.18.7";

pub struct SlurmLab {
    pub prefix: String,
    pub dir: tempfile::TempDir,
    pub conf: PathBuf,
    namespaces: Vec<String>,
    daemons: Vec<Child>,
    _guard: std::sync::MutexGuard<'static, ()>,
}

/// The cgroup v1 mounts slurmd 22.05 needs inside `ip netns exec`, whose fresh sysfs hides
/// the host's (the trap in slurm-lab.md); they live in that mount namespace only.
const CGROUPS: &str = "mount -t tmpfs cgroup_root /sys/fs/cgroup && \
    for c in cpu cpuacct cpuset memory devices freezer pids; do \
    mkdir /sys/fs/cgroup/$c && mount -t cgroup -o $c cgroup /sys/fs/cgroup/$c || exit 1; done && \
    mkdir /sys/fs/cgroup/systemd && mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd";

/// `fpl<pid>s-...`, this lab's names, whose process is gone.
fn dead_slurm_lab(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("fpl") else {
        return false;
    };
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let ours = !digits.is_empty() && rest[digits.len()..].starts_with("s-");
    ours && !Path::new(&format!("/proc/{digits}")).exists()
}

/// What a killed run of this lab left outside the namespaces (which `clean_leftovers`
/// removes): its munged (by the pid file in its temp dir), `/etc/netns` entries, the dir.
fn clean_slurm_leftovers() {
    for (parent, is_tmp) in [(PathBuf::from("/etc/netns"), false), (std::env::temp_dir(), true)] {
        let Ok(rd) = std::fs::read_dir(&parent) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !dead_slurm_lab(&name) {
                continue;
            }
            if is_tmp {
                let pidfile = e.path().join("run/munged.pid");
                if let Some(pid) = std::fs::read_to_string(pidfile)
                    .ok()
                    .and_then(|p| p.trim().parse::<i32>().ok())
                {
                    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                    if comm.trim() == "munged" {
                        // The munged this lab started, found by its pid file.
                        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                    }
                }
            }
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

fn need(test: &str, programs: &[&str]) -> bool {
    for p in programs {
        let found = std::env::var("PATH")
            .unwrap_or_default()
            .split(':')
            .chain(["/usr/sbin", "/sbin"])
            .any(|d| Path::new(d).join(p).exists());
        if !found {
            lab_unavailable(
                test,
                &format!("`{p}` is not installed (apt-get install slurm-wlm munge)"),
            );
            return false;
        }
    }
    true
}

/// `cp -al` (hard links: the fixtures are large and only two small files change), or a
/// plain copy where the temp dir is on another file system.
fn copy_tree(from: &Path, to: &Path) {
    let linked = sh(&["cp", "-al", &from.to_string_lossy(), &to.to_string_lossy()]);
    if !linked.status.success() {
        let _ = std::fs::remove_dir_all(to);
        must(&["cp", "-a", &from.to_string_lossy(), &to.to_string_lossy()]);
    }
}

/// Replace a file of a copied tree: unlink first, so a hard-linked fixture never changes.
pub fn replace_file(path: &Path, contents: &str) {
    let _ = std::fs::remove_file(path);
    std::fs::write(path, contents).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// Edit one JSON file of a node's copied fixture.
pub fn edit_json(path: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let raw = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let mut v: serde_json::Value = serde_json::from_str(&raw).unwrap();
    f(&mut v);
    replace_file(path, &serde_json::to_string_pretty(&v).unwrap());
}

fn write_exec(path: &Path, body: &str) {
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

impl SlurmLab {
    /// Build the cluster with every node's fixture copied from `fixture`, or None (after a
    /// loud SKIPPED line) where it cannot run.
    pub fn new(test: &str, fixture: &str) -> Option<SlurmLab> {
        if !nix::unistd::geteuid().is_root() {
            lab_unavailable(test, "needs root (network namespaces, slurmd, munged)");
            return None;
        }
        if !need(
            test,
            &[
                "ip",
                "munged",
                "mungekey",
                "slurmctld",
                "slurmd",
                "srun",
                "scontrol",
                "sinfo",
            ],
        ) {
            return None;
        }
        let guard = super::ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        super::clean_leftovers();
        clean_slurm_leftovers();
        let prefix = format!("fpl{}s", std::process::id());
        let dir = tempfile::Builder::new()
            .prefix(&format!("{prefix}-"))
            .tempdir()
            .unwrap();
        let conf = dir.path().join("slurm.conf");
        let mut lab = SlurmLab {
            prefix,
            dir,
            conf,
            namespaces: Vec::new(),
            daemons: Vec::new(),
            _guard: guard,
        };
        lab.files(fixture);
        lab.network();
        lab.start_munge();
        lab.start_slurm();
        Some(lab)
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// The directories (munged wants its socket's directory world-searchable, its key
    /// private), the per-node fixture copies, slurm.conf and the wrappers.
    fn files(&self, fixture: &str) {
        let d = self.dir.path();
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        for sub in ["run", "munge", "state", "spool", "log", "bin", "roots", "hc"] {
            std::fs::create_dir(d.join(sub)).unwrap();
        }
        std::fs::set_permissions(
            d.join("munge"),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures")
            .join(fixture);
        for i in 0..NODES {
            let root = d.join("roots").join(format!("node{i}"));
            copy_tree(&src, &root);
            edit_json(&root.join("fabprobe/host.json"), |v| {
                v["hostname"] = format!("node{i}").into()
            });
        }
        let d = d.display();
        let nodes: String = (0..NODES)
            .map(|i| {
                format!(
                    "NodeName=node{i} NodeAddr={NET}.{} CPUs=2 RealMemory=1000\n",
                    10 + i
                )
            })
            .collect();
        std::fs::write(
            &self.conf,
            format!(
                "ClusterName=fabprobelab\nSlurmctldHost=ctl({NET}.2)\nSlurmUser=root\nSlurmdUser=root\n\
                 AuthType=auth/munge\nAuthInfo=socket={d}/run/munge.sock\nCredType=cred/munge\n\
                 MpiDefault=none\nMailProg=/bin/true\nProctrackType=proctrack/linuxproc\n\
                 TaskPlugin=task/none\nSelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n\
                 ReturnToService=2\nJobAcctGatherType=jobacct_gather/none\n\
                 StateSaveLocation={d}/state\nSlurmctldPidFile={d}/run/slurmctld.pid\n\
                 SlurmctldLogFile={d}/log/slurmctld.log\nSlurmdSpoolDir={d}/spool/%n\n\
                 SlurmdPidFile={d}/run/slurmd-%n.pid\nSlurmdLogFile={d}/log/slurmd-%n.log\n\
                 HealthCheckProgram={d}/bin/healthcheck\nHealthCheckInterval=5\nHealthCheckNodeState=ANY\n\
                 {nodes}PartitionName=lab Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES\n"
            ),
        )
        .unwrap();
        // What an admin puts around the drop-in: slurmd runs it with almost no environment.
        // Until the test arms it (`hc/armed`), it only counts its runs; `hc/policy`, where
        // written, replaces the policy name (a typo in the admin's configuration).
        let dropin = Path::new(env!("CARGO_MANIFEST_DIR")).join("checks/slurm/fabprobe-healthcheck");
        write_exec(
            &self.path("bin/healthcheck"),
            &format!(
                "#!/bin/sh\nexport SLURM_CONF={conf} PATH=/usr/sbin:/usr/bin:/sbin:/bin\n\
                 export FABPROBE={BIN} FABPROBE_POLICY=$(cat {d}/hc/policy 2>/dev/null || echo dgx-h100) FABPROBE_ARGS=\"--root {d}/roots/$SLURMD_NODENAME\"\n\
                 [ -e {d}/hc/armed ] && {dropin}\n\
                 echo ran >> {d}/hc/$SLURMD_NODENAME.runs\n",
                conf = self.conf.display(),
                dropin = dropin.display()
            ),
        );
        write_exec(
            &self.path("bin/fabprobe"),
            &format!("#!/bin/sh\nexec {BIN} --root {d}/roots/$SLURMD_NODENAME \"$@\"\n"),
        );
    }

    fn ns_name(&self, who: &str) -> String {
        format!("{}-{who}", self.prefix)
    }

    fn network(&mut self) {
        let br = format!("{}br", self.prefix);
        must(&["ip", "link", "add", &br, "type", "bridge"]);
        must(&["ip", "link", "set", &br, "up"]);
        let hosts: String = std::iter::once(format!("127.0.0.1 localhost\n{NET}.2 ctl\n"))
            .chain((0..NODES).map(|i| format!("{NET}.{} node{i} host{i}\n", 10 + i)))
            .collect();
        let who: Vec<(String, String)> = std::iter::once(("c".to_string(), format!("{NET}.2")))
            .chain((0..NODES).map(|i| (i.to_string(), format!("{NET}.{}", 10 + i))))
            .collect();
        for (w, addr) in who {
            let ns = self.ns_name(&w);
            must(&["ip", "netns", "add", &ns]);
            self.namespaces.push(ns.clone());
            let etc = Path::new("/etc/netns").join(&ns);
            std::fs::create_dir_all(&etc).unwrap();
            std::fs::write(etc.join("hosts"), &hosts).unwrap();
            let outer = format!("{}v{w}", self.prefix);
            must(&[
                "ip", "link", "add", &outer, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ]);
            must(&["ip", "link", "set", &outer, "master", &br, "up"]);
            for args in [
                vec!["ip", "link", "set", "lo", "up"],
                vec!["ip", "addr", "add", &format!("{addr}/24"), "dev", "eth0"],
                vec!["ip", "link", "set", "eth0", "up"],
            ] {
                let mut a = vec!["ip", "netns", "exec", &ns];
                a.extend(args);
                must(&a);
            }
        }
    }

    fn spawn_daemon(&mut self, mut c: Command, log: &str) {
        let out = std::fs::File::create(self.path(&format!("log/{log}"))).unwrap();
        let child = c
            .current_dir(self.dir.path())
            .env("SLURM_CONF", &self.conf)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("start {log}: {e}"));
        self.daemons.push(child);
    }

    fn start_munge(&mut self) {
        let key = self.path("munge/munge.key");
        must(&["mungekey", "-c", "-k", &key.to_string_lossy()]);
        let mut c = Command::new("munged");
        c.arg("-F")
            .arg(format!("--socket={}", self.path("run/munge.sock").display()))
            .arg(format!("--key-file={}", key.display()))
            .arg(format!("--log-file={}", self.path("munge/munged.log").display()))
            .arg(format!("--pid-file={}", self.path("run/munged.pid").display()))
            .arg(format!(
                "--seed-file={}",
                self.path("munge/munged.seed").display()
            ));
        self.spawn_daemon(c, "munged.out");
        self.wait_for("munged's socket", Duration::from_secs(10), |l| {
            l.path("run/munge.sock").exists().then_some(())
        });
    }

    /// `ip netns exec NS unshare --uts sh -c 'hostname H; SETUP; exec PROGRAM ARGS'`.
    fn in_node(&self, who: &str, host: &str, setup: &str, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args([
            "netns",
            "exec",
            &self.ns_name(who),
            "unshare",
            "--uts",
            "sh",
            "-c",
        ])
        .arg(format!("hostname {host} && {setup} && exec {program}"));
        c
    }

    fn start_slurm(&mut self) {
        let ctl = self.in_node("c", "ctl", "true", "slurmctld -D -i");
        self.spawn_daemon(ctl, "slurmctld.out");
        for i in 0..NODES {
            let d = self.in_node(
                &i.to_string(),
                &format!("host{i}"),
                CGROUPS,
                &format!("slurmd -D -N node{i}"),
            );
            self.spawn_daemon(d, &format!("slurmd-node{i}.out"));
        }
        self.wait_for("every node idle", Duration::from_secs(30), |l| {
            let states = l.node_states();
            (states.len() == NODES && states.iter().all(|(_, s)| s == "idle")).then_some(())
        });
    }

    /// Run a Slurm client (srun, scontrol, sinfo, or `sh -c`) where a user would: on the
    /// controller's host, with this cluster's slurm.conf.
    pub fn client(&self, args: &[&str]) -> Output {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns_name("c")])
            .args(args)
            .current_dir(self.dir.path())
            .env("SLURM_CONF", &self.conf)
            .stdin(Stdio::null());
        c.output().unwrap_or_else(|e| panic!("run {args:?}: {e}"))
    }

    /// [`SlurmLab::client`], started and left running (stdout and stderr piped).
    pub fn client_spawn(&self, args: &[&str]) -> Child {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns_name("c")])
            .args(args)
            .current_dir(self.dir.path())
            .env("SLURM_CONF", &self.conf)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c.spawn().unwrap_or_else(|e| panic!("run {args:?}: {e}"))
    }

    /// The pid of task `procid` of a step of this cluster running `exe` (srun passes the
    /// environment on: its SLURM_CONF is this cluster's), if it runs now.
    pub fn task_pid(&self, exe: &str, procid: u32) -> Option<i32> {
        let conf = format!("SLURM_CONF={}", self.conf.display());
        let task = format!("SLURM_PROCID={procid}");
        std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let path = std::fs::read_link(e.path().join("exe")).ok()?;
            if path.to_str()? != exe {
                return None;
            }
            let env = std::fs::read(e.path().join("environ")).ok()?;
            let vars: Vec<&[u8]> = env.split(|&b| b == 0).collect();
            (vars.contains(&conf.as_bytes()) && vars.contains(&task.as_bytes())).then_some(pid)
        })
    }

    /// `sinfo -N`: each node and its state (`idle`, `drained`, ...).
    pub fn node_states(&self) -> Vec<(String, String)> {
        let o = self.client(&["sinfo", "-h", "-N", "-o", "%N %T"]);
        text(&o.stdout)
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(n, s)| (n.to_string(), s.trim().to_string()))
            .collect()
    }

    /// `scontrol show node NODE`.
    pub fn show_node(&self, node: &str) -> String {
        text(&self.client(&["scontrol", "show", "node", node]).stdout)
    }

    /// Poll every 200 ms until `f` gives an answer; at `limit` fail with the daemons' logs.
    pub fn wait_for<T>(&self, what: &str, limit: Duration, mut f: impl FnMut(&Self) -> Option<T>) -> T {
        let t0 = Instant::now();
        loop {
            if let Some(v) = f(self) {
                return v;
            }
            if t0.elapsed() > limit {
                panic!("no {what} within {limit:?}\n{}", self.logs());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The tail of every log, for a failure message.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        if let Ok(rd) = std::fs::read_dir(self.path("log")) {
            let mut files: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
            files.sort();
            for f in files {
                let t = std::fs::read_to_string(&f).unwrap_or_default();
                let tail: Vec<&str> = t.lines().rev().take(8).collect();
                out.push_str(&format!("== {}\n", f.display()));
                for l in tail.iter().rev() {
                    out.push_str(l);
                    out.push('\n');
                }
            }
        }
        out
    }

    /// How many times the health check program has run on `node`.
    pub fn health_check_runs(&self, node: &str) -> usize {
        std::fs::read_to_string(self.path(&format!("hc/{node}.runs")))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }
}

impl Drop for SlurmLab {
    fn drop(&mut self) {
        for ns in &self.namespaces {
            // slurmd, slurmctld and whatever a job left (slurmstepd, tasks).
            super::kill_ns_pids(ns);
        }
        for c in &mut self.daemons {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in &self.namespaces {
            let _ = sh(&["ip", "netns", "del", ns]);
            let _ = std::fs::remove_dir_all(Path::new("/etc/netns").join(ns));
        }
        let _ = sh(&["ip", "link", "del", &format!("{}br", self.prefix)]);
        // The temp dir (fixture copies, conf, logs) goes with `dir`.
    }
}
