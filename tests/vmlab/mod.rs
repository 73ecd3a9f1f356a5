//! The VM lab: a real kernel RDMA stack on a machine whose own kernel has none. N small
//! QEMU VMs (TCG) boot Debian's stock kernel (fetched and cached by `prepare.sh`), each runs
//! the host's own userspace (its root over read-only 9p) with one Soft-RoCE device `rxe0` on
//! its virtio NIC `eth0` (198.18.5.10+i/24); with `VmOpts::nics = 2` also `rxe1` on a second
//! NIC `eth1` (198.19.5.10+i/24, a second bridge: rail 1). The NICs are taps on their bridge
//! inside a network namespace made for the test, so nothing leaves it. Commands run inside a VM through a
//! small agent that polls a writable 9p share (`/run/job` in the VM) and writes each
//! command's stdout, stderr and exit status back.
//!
//! Every wait is bounded; `Drop` (also on panic) kills the QEMU processes and deletes the
//! namespace with its bridge and taps; leftovers of killed runs are removed by their name
//! prefix `fpv<pid>`. Without root, QEMU or the kernel package the lab prints a loud SKIPPED
//! line and `VmLab::new` returns None; with `FABPROBE_LAB=required` it fails the test instead.
//! One VM lab at a time on the machine (a file lock), since TCG VMs need every core they get.

#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

pub const BIN: &str = env!("CARGO_BIN_EXE_fabprobe");
static COUNTER: AtomicU32 = AtomicU32::new(0);
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Skip loudly, or fail where the lab is required (`FABPROBE_LAB=required`, as in CI): the
/// contract of `tests/common::lab_unavailable`, shared with the network-namespace lab.
fn skip(test: &str, why: &str) -> Option<VmLab> {
    crate::common::lab_unavailable(&format!("{test} (VM lab)"), why);
    None
}

fn sh(args: &[&str]) -> Output {
    Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {args:?}: {e}"))
}

fn must(args: &[&str]) {
    let o = sh(args);
    assert!(
        o.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Single quotes for sh.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

pub struct VmOpts {
    pub vms: usize,
    /// `tc tbf` rate on every VM's eth0 egress (`100mbit`), or unshaped.
    pub rate: Option<String>,
    pub mem_mib: u32,
    /// NICs per VM, 1 or 2: NIC k is `eth<k>` with `rxe<k>` on it, on bridge `br<k>` (one
    /// rail each).
    pub nics: usize,
    /// vCPUs per VM. With one, a guest that drives two rails spends most of its time waiting
    /// for that CPU (rxe's software ICRC and both rails' threads), which the ring scan reads
    /// as a CPU-bound host and does not judge.
    pub smp: u32,
}

impl VmOpts {
    pub fn new(vms: usize) -> VmOpts {
        VmOpts {
            vms,
            rate: None,
            mem_mib: 640,
            nics: 1,
            smp: 1,
        }
    }
}

pub struct Vm {
    pub name: String,
    pub ip: String,
    /// The address of `eth<k>` for each NIC k (`ips[0] == ip`).
    pub ips: Vec<String>,
    pub job: PathBuf,
}

/// What a command in a VM produced.
#[derive(Debug)]
pub struct VmOutput {
    pub stdout: String,
    pub stderr: String,
    pub rc: i32,
}

impl VmOutput {
    pub fn ok(&self) -> bool {
        self.rc == 0
    }
}

/// A command started in a VM: which VM, and its id in the job share.
#[derive(Clone, Debug)]
pub struct Job {
    pub vm: usize,
    pub id: String,
}

pub struct VmLab {
    pub prefix: String,
    pub ns: String,
    pub dir: PathBuf,
    pub vms: Vec<Vm>,
    qemus: Vec<Child>,
    seq: AtomicU32,
    _lock: Flock<fs::File>,
    _guard: std::sync::MutexGuard<'static, ()>,
}

/// The kernel and initramfs, built (or found cached) by prepare.sh.
fn prepare() -> Result<PathBuf, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vmlab/prepare.sh");
    let o = Command::new("timeout")
        .arg("600")
        .arg(&script)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if !o.status.success() {
        return Err(format!("{} failed: {}", script.display(), text(&o.stderr).trim()));
    }
    Ok(PathBuf::from(text(&o.stdout).trim()))
}

fn kill_ns_pids(ns: &str) {
    let pids = text(&sh(&["ip", "netns", "pids", ns]).stdout);
    for p in pids.split_whitespace() {
        if let Ok(pid) = p.parse::<i32>() {
            // A pid that lives in our own lab namespace.
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// Delete namespaces (and the QEMUs in them) of VM labs whose test process is gone.
fn clean_leftovers() {
    let ns = text(&sh(&["ip", "netns", "list"]).stdout);
    for line in ns.lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix("fpv") else {
            continue;
        };
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        if let Ok(pid) = digits.parse::<u32>()
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            kill_ns_pids(name);
            let _ = sh(&["ip", "netns", "del", name]);
            let _ = fs::remove_dir_all(format!("/tmp/{name}"));
        }
    }
}

/// The machine-wide VM lab lock, waited for at most `limit`.
fn lock_machine(limit: Duration) -> Result<Flock<fs::File>, String> {
    let mut f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open("/tmp/fabprobe-vmlab.lock")
        .map_err(|e| format!("cannot open /tmp/fabprobe-vmlab.lock: {e}"))?;
    let t0 = Instant::now();
    loop {
        // Non-blocking, so the wait keeps its deadline.
        f = match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
            Ok(held) => return Ok(held),
            Err((f, _)) => f,
        };
        if t0.elapsed() > limit {
            return Err(format!(
                "another VM lab held /tmp/fabprobe-vmlab.lock for {limit:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

const AGENT: &str = r#"export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
cd /run/job || exit 1
mkdir -p cmd out
rdma link add rxe0 type rxe netdev eth0 > rxe.log 2>&1
echo $? > rxe.rc
__NIC1__
__SHAPE__
# IFF_RUNNING comes with the kernel's deferred link watch (up to a second after `ip link
# set up`); a ring started before it finds no running data interface.
for n in __NICS__; do
  i=0; while [ "$(cat /sys/class/net/$n/operstate)" != up ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
done
echo ok > ready
while :; do
  for f in cmd/*.sh; do
    [ -e "$f" ] || continue
    id=${f#cmd/}; id=${id%.sh}
    mv "$f" "out/$id.sh"
    (sh "out/$id.sh" > "out/$id.out" 2> "out/$id.err" < /dev/null; echo $? > "out/$id.rc.tmp"; mv "out/$id.rc.tmp" "out/$id.rc") &
  done
  sleep 0.05
done
"#;

impl VmLab {
    /// Boot the VMs and wait until each has rxe0 up, or None (after a loud SKIPPED line)
    /// where the lab cannot run here.
    pub fn new(test: &str, opts: VmOpts) -> Option<VmLab> {
        if !nix::unistd::geteuid().is_root() {
            return skip(test, "needs root (network namespaces, taps, a bridge)");
        }
        if Command::new("qemu-system-x86_64")
            .arg("--version")
            .output()
            .is_err()
        {
            return skip(
                test,
                "qemu-system-x86_64 is not installed (hint: apt-get install qemu-system-x86 busybox-static cpio kmod)",
            );
        }
        if Command::new("ip").arg("-V").output().is_err() {
            return skip(test, "iproute2 (`ip`) is not installed");
        }
        let images = match prepare() {
            Ok(p) => p,
            Err(e) => return skip(test, &format!("no VM kernel: {e}")),
        };
        let shares = match workspace_shares() {
            Ok(s) => s,
            Err(e) => return skip(test, &e),
        };
        let guard = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let lock = match lock_machine(Duration::from_secs(900)) {
            Ok(f) => f,
            Err(e) => panic!("VM lab test {test}: {e}"),
        };
        clean_leftovers();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let prefix = format!("fpv{}{}", std::process::id(), (b'a' + (n % 26) as u8) as char);
        if !sh(&["ip", "netns", "add", &prefix]).status.success() {
            return skip(test, "cannot create network namespaces here (no CAP_SYS_ADMIN?)");
        }
        let dir = PathBuf::from(format!("/tmp/{prefix}"));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create the VM lab directory");
        let mut lab = VmLab {
            prefix: prefix.clone(),
            ns: prefix.clone(),
            dir: dir.clone(),
            vms: Vec::new(),
            qemus: Vec::new(),
            seq: AtomicU32::new(0),
            _lock: lock,
            _guard: guard,
        };
        lab.netns(&["ip", "link", "set", "lo", "up"]);
        lab.netns(&["ip", "link", "add", "br0", "type", "bridge"]);
        lab.netns(&["ip", "link", "set", "br0", "up"]);
        if opts.nics > 1 {
            lab.netns(&["ip", "link", "add", "br1", "type", "bridge"]);
            lab.netns(&["ip", "link", "set", "br1", "up"]);
        }
        let shape = match &opts.rate {
            Some(rate) => {
                format!("tc qdisc add dev eth0 root tbf rate {rate} burst 64kb latency 50ms > shape.log 2>&1")
            }
            None => String::new(),
        };
        for i in 0..opts.vms {
            let name = format!("node-{}", (b'a' + i as u8) as char);
            let ip = format!("198.18.5.{}", 10 + i);
            let mut ips = vec![ip.clone()];
            let job = dir.join(format!("vm{i}"));
            fs::create_dir_all(job.join("cmd")).unwrap();
            fs::create_dir_all(job.join("out")).unwrap();
            // The second NIC (rail 1): its own subnet and rxe device, set up by the agent
            // (the initramfs brings up eth0 only).
            let nic1 = if opts.nics > 1 {
                let ip1 = format!("198.19.5.{}", 10 + i);
                ips.push(ip1.clone());
                format!(
                    "{{ ip link set eth1 up && ip addr add {ip1}/24 dev eth1 && rdma link add rxe1 type rxe netdev eth1; }} > rxe1.log 2>&1\necho $? > rxe1.rc"
                )
            } else {
                String::new()
            };
            let nics = if opts.nics > 1 { "eth0 eth1" } else { "eth0" };
            let agent = AGENT
                .replace("__SHAPE__", &shape)
                .replace("__NIC1__", &nic1)
                .replace("__NICS__", nics);
            fs::write(job.join("agent.sh"), agent).unwrap();
            let tap = format!("tap{i}");
            lab.netns(&["ip", "tuntap", "add", &tap, "mode", "tap"]);
            lab.netns(&["ip", "link", "set", &tap, "master", "br0", "up"]);
            let tap1 = format!("tapr{i}");
            let mut nic1_args: Vec<String> = Vec::new();
            if opts.nics > 1 {
                lab.netns(&["ip", "tuntap", "add", &tap1, "mode", "tap"]);
                lab.netns(&["ip", "link", "set", &tap1, "master", "br1", "up"]);
                nic1_args = vec![
                    "-netdev".into(),
                    format!("tap,id=n1,ifname={tap1},script=no,downscript=no"),
                    "-device".into(),
                    format!("virtio-net-pci,netdev=n1,mac=52:54:00:12:36:{:02x}", 10 + i),
                ];
            }
            let console = job.join("console.log");
            let child = Command::new("ip")
                .args(["netns", "exec", &prefix, "qemu-system-x86_64"])
                .args(["-accel", "tcg,thread=multi", "-cpu", "max"])
                .args(["-smp", &opts.smp.to_string()])
                .args(["-m", &opts.mem_mib.to_string()])
                .args(["-display", "none", "-monitor", "none", "-no-reboot"])
                .arg("-serial")
                .arg(format!("file:{}", console.display()))
                .arg("-kernel")
                .arg(images.join("vmlinuz"))
                .arg("-initrd")
                .arg(images.join("initrd.img"))
                .arg("-append")
                .arg(format!(
                    "console=ttyS0 quiet panic=-1 fpvm.ip={ip}/24 fpvm.name={name}{}",
                    shares
                        .iter()
                        .enumerate()
                        .map(|(k, d)| format!(" fpvm.work{k}={}", d.display()))
                        .collect::<String>()
                ))
                .args([
                    "-virtfs",
                    "local,path=/,mount_tag=host0,security_model=none,readonly=on,multidevs=remap",
                ])
                .arg("-virtfs")
                .arg(format!(
                    "local,path={},mount_tag=job,security_model=none",
                    job.display()
                ))
                // The checkout and its build, at their own paths: the VM's /tmp, /root and
                // /run are its own tmpfs, and a checkout may live under any of them.
                .args(shares.iter().enumerate().flat_map(|(k, d)| {
                    [
                        "-virtfs".to_string(),
                        format!(
                            "local,path={},mount_tag=work{k},security_model=none,readonly=on,multidevs=remap",
                            d.display()
                        ),
                    ]
                }))
                .args([
                    "-netdev",
                    &format!("tap,id=n0,ifname={tap},script=no,downscript=no"),
                ])
                .args([
                    "-device",
                    &format!("virtio-net-pci,netdev=n0,mac=52:54:00:12:35:{:02x}", 10 + i),
                ])
                .args(&nic1_args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(fs::File::create(job.join("qemu.err")).unwrap())
                .spawn()
                .expect("spawn qemu-system-x86_64");
            lab.qemus.push(child);
            lab.vms.push(Vm { name, ip, ips, job });
        }
        // Boot takes ~3 s each on an idle machine; give a loaded one far more.
        // (Two VMs missed 30 + 20 s each at a load average of 20 on two cores; one made it.)
        let deadline = Instant::now() + Duration::from_secs(60 + 45 * opts.vms as u64);
        for i in 0..lab.vms.len() {
            loop {
                if lab.vms[i].job.join("ready").exists() {
                    break;
                }
                let gone = lab.qemus[i].try_wait().ok().flatten().is_some();
                if gone || Instant::now() > deadline {
                    panic!(
                        "VM {} did not come up ({}):\n{}",
                        lab.vms[i].name,
                        if gone {
                            "QEMU exited"
                        } else {
                            "boot deadline passed"
                        },
                        lab.console(i)
                    );
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let rc = fs::read_to_string(lab.vms[i].job.join("rxe.rc")).unwrap_or_default();
            assert_eq!(
                rc.trim(),
                "0",
                "`rdma link add rxe0` failed in {}: {}\n{}",
                lab.vms[i].name,
                fs::read_to_string(lab.vms[i].job.join("rxe.log")).unwrap_or_default(),
                lab.console(i)
            );
            if opts.nics > 1 {
                let rc = fs::read_to_string(lab.vms[i].job.join("rxe1.rc")).unwrap_or_default();
                assert_eq!(
                    rc.trim(),
                    "0",
                    "eth1 or `rdma link add rxe1` failed in {}: {}\n{}",
                    lab.vms[i].name,
                    fs::read_to_string(lab.vms[i].job.join("rxe1.log")).unwrap_or_default(),
                    lab.console(i)
                );
            }
        }
        Some(lab)
    }

    fn netns(&self, args: &[&str]) {
        let mut a = vec!["ip", "netns", "exec", self.ns.as_str()];
        a.extend_from_slice(args);
        must(&a);
    }

    /// The tail of a VM's serial console and QEMU's stderr, for failure messages.
    pub fn console(&self, vm: usize) -> String {
        let j = &self.vms[vm].job;
        let c = fs::read_to_string(j.join("console.log")).unwrap_or_default();
        let q = fs::read_to_string(j.join("qemu.err")).unwrap_or_default();
        let tail: Vec<&str> = c.lines().rev().take(30).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        format!(
            "--- console of {}:\n{}\n--- qemu stderr:\n{q}",
            self.vms[vm].name,
            tail.join("\n")
        )
    }

    /// Start `script` (sh) in a VM; returns at once.
    pub fn spawn(&self, vm: usize, script: &str) -> Job {
        let id = format!("c{}", self.seq.fetch_add(1, Ordering::Relaxed));
        let j = &self.vms[vm].job;
        let body = format!("echo $$ > /run/job/out/{id}.pid\n{script}\n");
        let tmp = j.join(format!("cmd/{id}.tmp"));
        fs::write(&tmp, body).unwrap();
        fs::rename(&tmp, j.join(format!("cmd/{id}.sh"))).unwrap();
        Job { vm, id }
    }

    /// Start `fabprobe <args>` in a VM (exec'd, so killing the job kills fabprobe).
    pub fn spawn_fabprobe(&self, vm: usize, args: &[&str]) -> Job {
        let a: Vec<String> = args.iter().map(|s| quote(s)).collect();
        self.spawn(vm, &format!("exec {} {}", quote(BIN), a.join(" ")))
    }

    /// Whether a job has finished.
    pub fn done(&self, job: &Job) -> bool {
        self.vms[job.vm].job.join(format!("out/{}.rc", job.id)).exists()
    }

    /// Wait for a job; panics (with its output so far) at the limit.
    pub fn wait(&self, job: &Job, limit: Duration) -> VmOutput {
        let t0 = Instant::now();
        let j = &self.vms[job.vm].job;
        let rc = j.join(format!("out/{}.rc", job.id));
        while !rc.exists() {
            if t0.elapsed() > limit {
                self.kill(job);
                panic!(
                    "command {} in {} did not finish within {limit:?}\nstdout:\n{}\nstderr:\n{}\n{}",
                    job.id,
                    self.vms[job.vm].name,
                    fs::read_to_string(j.join(format!("out/{}.out", job.id))).unwrap_or_default(),
                    fs::read_to_string(j.join(format!("out/{}.err", job.id))).unwrap_or_default(),
                    self.console(job.vm)
                );
            }
            if self.qemus_gone(job.vm) {
                panic!("{} died:\n{}", self.vms[job.vm].name, self.console(job.vm));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        VmOutput {
            stdout: fs::read_to_string(j.join(format!("out/{}.out", job.id))).unwrap_or_default(),
            stderr: fs::read_to_string(j.join(format!("out/{}.err", job.id))).unwrap_or_default(),
            rc: fs::read_to_string(&rc)
                .unwrap_or_default()
                .trim()
                .parse()
                .unwrap_or(-1),
        }
    }

    fn qemus_gone(&self, vm: usize) -> bool {
        // try_wait needs &mut; a QEMU that exited leaves its console with "Power down" or a
        // panic, and no agent: check the process directly.
        let pid = self.qemus[vm].id();
        !Path::new(&format!("/proc/{pid}")).exists()
            || fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| s.contains(") Z "))
                .unwrap_or(true)
    }

    /// Run `script` in a VM to completion (bounded by `limit`).
    pub fn exec(&self, vm: usize, script: &str, limit: Duration) -> VmOutput {
        let j = self.spawn(vm, script);
        self.wait(&j, limit)
    }

    /// Run `script`, and fail the test unless it exits 0.
    pub fn must(&self, vm: usize, script: &str) -> String {
        let o = self.exec(vm, script, Duration::from_secs(60));
        assert!(
            o.ok(),
            "`{script}` in {} exited {}: {}{}",
            self.vms[vm].name,
            o.rc,
            o.stdout,
            o.stderr
        );
        o.stdout
    }

    /// SIGKILL a running job (the process the script exec'd).
    pub fn kill(&self, job: &Job) {
        let pidfile = format!("/run/job/out/{}.pid", job.id);
        let _ = self.exec(
            job.vm,
            &format!("[ -f {pidfile} ] && kill -9 $(cat {pidfile})"),
            Duration::from_secs(30),
        );
    }

    /// Shape everything a VM sends to `rate` (`tbf` on its eth0; replaces earlier shaping).
    pub fn shape_egress(&self, vm: usize, rate: &str) {
        self.must(
            vm,
            &format!("tc qdisc replace dev eth0 root tbf rate {rate} burst 64kb latency 50ms"),
        );
    }

    /// Shape what a VM sends on `eth<nic>` (rail `nic`) to `rate` (tbf; replaces earlier
    /// shaping of that NIC), and read it back: fails the test unless `tc` shows the tbf.
    pub fn shape_egress_on(&self, vm: usize, nic: usize, rate: &str) {
        self.must(
            vm,
            &format!("tc qdisc replace dev eth{nic} root tbf rate {rate} burst 64kb latency 50ms"),
        );
        let q = self.qdisc(vm, nic);
        assert!(
            q.kind == "tbf",
            "{}: eth{nic} has no root tbf after shaping it: {}",
            self.vms[vm].name,
            q.text
        );
    }

    /// The root qdisc of a VM's `eth<nic>` and its counters (`tc -s qdisc show`).
    pub fn qdisc(&self, vm: usize, nic: usize) -> Qdisc {
        let out = self.must(vm, &format!("tc -s qdisc show dev eth{nic}"));
        Qdisc::parse(&out).unwrap_or_else(|| {
            panic!(
                "{}: no root qdisc counters in `tc -s qdisc show dev eth{nic}`:\n{out}",
                self.vms[vm].name
            )
        })
    }

    /// Take a VM's `eth<nic>` down (its rxe port goes DOWN with it).
    pub fn nic_down(&self, vm: usize, nic: usize) {
        self.must(vm, &format!("ip link set eth{nic} down"));
    }

    /// Bring a VM's `eth<nic>` back up and wait (at most 20 s) until it runs and `rxe<nic>`
    /// port 1 is ACTIVE again with its IPv4 GID (index 1).
    pub fn nic_up(&self, vm: usize, nic: usize) {
        let port = format!("/sys/class/infiniband/rxe{nic}/ports/1");
        self.must(
            vm,
            &format!(
                "ip link set eth{nic} up; i=0; \
                 until [ \"$(cat /sys/class/net/eth{nic}/operstate)\" = up ] && grep -q ACTIVE {port}/state \
                   && grep -q ffff {port}/gids/1 2>/dev/null; do \
                   [ $i -ge 200 ] && {{ cat /sys/class/net/eth{nic}/operstate {port}/state {port}/gids/1; exit 1; }}; \
                   sleep 0.1; i=$((i+1)); done"
            ),
        );
    }

    /// Drop every RoCE packet (UDP 4791) `from` sends to `to`, as a broken path would: at
    /// `to`'s ingress, so the sender sees nothing but silence. (Dropping at the sender's own
    /// qdisc instead makes 6.1 rxe retry the send in a tight loop: a soft lockup.) TCP, the
    /// control plane, and other peers are untouched.
    pub fn drop_roce(&self, from: usize, to: usize) {
        self.drop_roce_on(from, to, 0);
    }

    /// [`drop_roce`] on NIC `nic` only (`eth<nic>`, rail `nic`): the other NIC's RoCE flows.
    pub fn drop_roce_on(&self, from: usize, to: usize, nic: usize) {
        let src = &self.vms[from].ips[nic];
        self.must(
            to,
            &format!(
                "tc qdisc add dev eth{nic} ingress 2>/dev/null; \
                 tc filter add dev eth{nic} parent ffff: protocol ip prio 1 u32 \
                 match ip src {src}/32 match ip protocol 17 0xff match ip dport 4791 0xffff action drop"
            ),
        );
    }

    /// Undo [`drop_roce`] on `to`: every ingress filter of the VM's eth0 goes.
    pub fn undrop(&self, to: usize) {
        self.undrop_on(to, 0);
    }

    /// Undo [`drop_roce_on`] on `to`'s `eth<nic>`.
    pub fn undrop_on(&self, to: usize, nic: usize) {
        self.must(
            to,
            &format!("tc qdisc del dev eth{nic} ingress 2>/dev/null; true"),
        );
    }

    /// Start `fabprobe <args>` in a VM with `env` (`NAME=value` words) set.
    pub fn spawn_fabprobe_env(&self, vm: usize, env: &[&str], args: &[&str]) -> Job {
        let a: Vec<String> = args.iter().map(|s| quote(s)).collect();
        let e: Vec<String> = env.iter().map(|s| quote(s)).collect();
        self.spawn(
            vm,
            &format!("exec env {} {} {}", e.join(" "), quote(BIN), a.join(" ")),
        )
    }

    /// A file the VM wrote into its job share (`/run/job/<rel>` inside).
    pub fn job_file(&self, vm: usize, rel: &str) -> PathBuf {
        self.vms[vm].job.join(rel)
    }
}

impl Drop for VmLab {
    fn drop(&mut self) {
        for q in self.qemus.iter_mut() {
            let _ = q.kill();
            let _ = q.wait();
        }
        kill_ns_pids(&self.ns);
        let _ = sh(&["ip", "netns", "del", &self.ns]);
        if std::env::var_os("FABPROBE_VMLAB_KEEP").is_none() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// The directories a VM must see at their host paths: the checkout, and the build directory
/// of this test binary when it lies elsewhere (`CARGO_TARGET_DIR`). Their paths travel on the
/// kernel command line and in QEMU's option syntax, so spaces and commas cannot be passed.
fn workspace_shares() -> Result<Vec<PathBuf>, String> {
    let canon =
        |p: &std::path::Path| fs::canonicalize(p).map_err(|e| format!("cannot resolve {}: {e}", p.display()));
    let manifest = canon(std::path::Path::new(env!("CARGO_MANIFEST_DIR")))?;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this test binary: {e}"))?;
    // target/<profile>/deps/<test binary>
    let target = exe
        .ancestors()
        .nth(3)
        .map(canon)
        .transpose()?
        .ok_or("this test binary is not under a cargo target directory")?;
    let mut shares = vec![manifest];
    if !target.starts_with(&shares[0]) {
        shares.push(target);
    }
    for d in &shares {
        let s = d.to_string_lossy();
        if s.contains([' ', ',', '\t', '\n']) || d.to_str().is_none() {
            return Err(format!(
                "the VM lab shares {s:?} with its VMs by path, and a path with spaces or commas cannot be passed (hint: clone into a plain path)"
            ));
        }
    }
    Ok(shares)
}

/// A root qdisc as `tc -s qdisc show` prints it: its kind, its rate where it has one, and the
/// counters that show whether it shaped anything.
#[derive(Debug, Clone)]
pub struct Qdisc {
    pub kind: String,
    /// The `rate` word as tc prints it (`2Mbit`), for tbf.
    pub rate: Option<String>,
    pub sent_bytes: u64,
    pub sent_pkts: u64,
    pub dropped: u64,
    pub overlimits: u64,
    pub text: String,
}

impl Qdisc {
    /// The root qdisc of `tc -s qdisc show dev X` (its first `qdisc ... root` line and the
    /// `Sent` line after it), or None.
    pub fn parse(out: &str) -> Option<Qdisc> {
        let mut lines = out
            .lines()
            .skip_while(|l| !(l.starts_with("qdisc ") && l.contains(" root ")));
        let head = lines.next()?;
        let words: Vec<&str> = head.split_whitespace().collect();
        let kind = words.get(1)?.to_string();
        let rate = words
            .iter()
            .position(|w| *w == "rate")
            .and_then(|i| words.get(i + 1))
            .map(|w| w.to_string());
        let sent = lines.find(|l| l.trim_start().starts_with("Sent "))?;
        // " Sent 123 bytes 4 pkt (dropped 0, overlimits 5 requeues 0) "
        let w: Vec<&str> = sent
            .split(|c: char| c.is_whitespace() || c == ',' || c == '(' || c == ')')
            .filter(|w| !w.is_empty())
            .collect();
        let after = |key: &str| -> Option<u64> {
            let i = w.iter().position(|x| *x == key)?;
            w.get(i + 1)?.parse().ok()
        };
        Some(Qdisc {
            kind,
            rate,
            sent_bytes: after("Sent")?,
            sent_pkts: w
                .iter()
                .position(|x| *x == "bytes")
                .and_then(|i| w.get(i + 1)?.parse().ok())?,
            dropped: after("dropped")?,
            overlimits: after("overlimits")?,
            text: out.to_string(),
        })
    }

    /// What moved between `self` (before) and `later`: bytes, packets, drops, overlimits.
    pub fn delta(&self, later: &Qdisc) -> (u64, u64, u64, u64) {
        (
            later.sent_bytes.saturating_sub(self.sent_bytes),
            later.sent_pkts.saturating_sub(self.sent_pkts),
            later.dropped.saturating_sub(self.dropped),
            later.overlimits.saturating_sub(self.overlimits),
        )
    }
}

/// `fabprobe ring` arguments for rank `r` of `world` in the VM lab (coordinator on VM 0).
pub fn ring_args(lab: &VmLab, r: usize, world: usize, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = [
        "ring",
        "--rank",
        &r.to_string(),
        "--world",
        &world.to_string(),
        "--coordinator",
        &format!("{}:29517", lab.vms[0].ip),
        "--ifname",
        "=eth0",
        "--token",
        "vmlab",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}
