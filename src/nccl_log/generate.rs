//! Generated NCCL logs, for what the public ones lack: hundreds of ranks interleaved in one
//! file behind `srun -l` labels, and gigabyte sizes for the benchmark. Every line follows a
//! format seen in a public log (see tests/data/nccl-logs/SOURCES.md); the job is made up.

use std::io::Write;

/// What goes wrong in the generated job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    Healthy,
    /// Host `host`'s HCA `mlx5_<hca>` gets status 12 towards `peer_host`; every rank then
    /// flushes (status 5) and PyTorch times out on the same sequence number.
    RetryExceeded {
        host: usize,
        peer_host: usize,
        hca: usize,
    },
    /// Ranks `stuck..stuck+n` never reach sequence number 4242; every other rank times out.
    Hang {
        stuck: usize,
        n: usize,
    },
}

/// A small deterministic generator (xorshift), so generated logs are reproducible.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn host(h: usize) -> String {
    format!("gpu-{h:03}")
}
fn ip(h: usize) -> String {
    format!("10.{}.{}.{}", 10 + h / 65536, (h / 256) % 256, h % 256)
}

/// Write a job of `hosts` x `gpus` ranks; `filler_lines` extra steady-state INFO lines are
/// interleaved before the failure (the benchmark's bulk). Lines of different ranks are
/// shuffled within each phase, as a combined log of many writers is.
/// The job's ranks: `gpus` per host, `world` in all, and each rank's NCCL header.
struct Ranks {
    gpus: usize,
    world: usize,
}

impl Ranks {
    /// `srun -l`'s label, then NCCL's `host:pid:tid [dev]` for rank `r`.
    fn hdr(&self, r: usize, tid_off: u32) -> String {
        let pid = 10_000 + r as u32;
        format!(
            "{}: {}:{}:{} [{}]",
            r,
            host(r / self.gpus),
            pid,
            pid + tid_off,
            r % self.gpus
        )
    }
}

/// Write the phase's lines, the ranks' interleaved (Fisher-Yates), and empty it.
fn flush(phase: &mut Vec<String>, rng: &mut Rng, out: &mut dyn Write) -> std::io::Result<()> {
    for i in (1..phase.len()).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        phase.swap(i, j);
    }
    for l in phase.drain(..) {
        out.write_all(l.as_bytes())?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// Each rank's setup: bootstrap, plugin, HCAs, network, communicator.
fn setup(k: &Ranks, phase: &mut Vec<String>) {
    let (gpus, world) = (k.gpus, k.world);
    for r in 0..world {
        let h = r / gpus;
        phase.push(format!(
            "{} NCCL INFO Bootstrap : Using eth0:{}<0>",
            k.hdr(r, 0),
            ip(h)
        ));
        phase.push(format!(
            "{} NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation",
            k.hdr(r, 0)
        ));
        let hcas: Vec<String> = (0..gpus).map(|i| format!("[{i}]mlx5_{i}:1/RoCE")).collect();
        phase.push(format!(
            "{} NCCL INFO NET/IB : Using {} [RO]; OOB eth0:{}<0>",
            k.hdr(r, 7),
            hcas.join(" "),
            ip(h)
        ));
        phase.push(format!("{} NCCL INFO Using network IB", k.hdr(r, 7)));
        phase.push(format!(
            "{} NCCL INFO comm 0x55d9607ee240 rank {r} nranks {world} cudaDev {} nvmlDev {} busId {:x}000 commId 0x2f24707b1170cb7f - Init START",
            k.hdr(r, 7),
            r % gpus,
            r % gpus,
            0x1b + (r % gpus) * 0x20
        ));
    }
}

/// The ring, trees, each rank's connections and the channel line.
fn rings(k: &Ranks, phase: &mut Vec<String>) {
    let (gpus, world) = (k.gpus, k.world);
    for r in 0..world {
        let next = (r + 1) % world;
        if r == 0 {
            phase.push(format!(
                "{} NCCL INFO Channel 00/02 :    {}",
                k.hdr(r, 7),
                (0..world.min(64))
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join("   ")
            ));
        }
        phase.push(format!(
            "{} NCCL INFO Trees [0] -1/-1/-1->{r}->{} [1] -1/-1/-1->{r}->{}",
            k.hdr(r, 7),
            next,
            next
        ));
        for ch in 0..2 {
            let line = if next / gpus != r / gpus {
                format!(
                    "{} NCCL INFO Channel {ch:02}/0 : {r}[{}] -> {next}[{}] [send] via NET/IB/{}/GDRDMA",
                    k.hdr(r, 7),
                    r % gpus,
                    next % gpus,
                    r % gpus
                )
            } else {
                format!(
                    "{} NCCL INFO Channel {ch:02}/0 : {r}[{}] -> {next}[{}] via P2P/IPC/read",
                    k.hdr(r, 7),
                    r % gpus,
                    next % gpus
                )
            };
            phase.push(line);
        }
        phase.push(format!("{} NCCL INFO comm 0x55d9607ee240 rank {r} nranks {world} cudaDev {} nvmlDev {} busId {:x}000 commId 0x2f24707b1170cb7f - Init COMPLETE", k.hdr(r, 7), r % gpus, r % gpus, 0x1b + (r % gpus) * 0x20));
    }
    phase.push(format!(
        "{} NCCL INFO 2 coll channels, 2 nvls channels, 2 p2p channels, 2 p2p channels per peer",
        k.hdr(0, 7)
    ));
}

/// The scenario's failure lines, flushed as the phases of a real failure are.
fn failure(
    k: &Ranks,
    scenario: Scenario,
    phase: &mut Vec<String>,
    rng: &mut Rng,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let (gpus, world) = (k.gpus, k.world);
    match scenario {
        Scenario::Healthy => {}
        Scenario::RetryExceeded {
            host: bad,
            peer_host,
            hca,
        } => {
            let r = bad * gpus + hca;
            let peer = peer_host * gpus + hca;
            phase.push(format!(
                "{} transport/net_ib.cc:1697 NCCL WARN NET/IB : Got completion from peer {}<41237> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:{} remoteGids::ffff:{} hca mlx5_{hca}",
                k.hdr(r, 9),
                ip(peer_host),
                ip(bad),
                ip(peer_host)
            ));
            phase.push(format!("{} NCCL INFO transport/net.cc:1302 -> 6", k.hdr(r, 9)));
            for o in 0..world {
                if o != r {
                    phase.push(format!(
                        "{} transport/net_ib.cc:1697 NCCL WARN NET/IB : Got completion from peer {}<41237> with status=5 opcode=0 len=0 vendor err 249 (Recv) localGid ::ffff:{} remoteGids::ffff:{} hca mlx5_{}",
                        k.hdr(o, 9),
                        ip(bad),
                        ip(o / gpus),
                        ip(bad),
                        o % gpus
                    ));
                }
            }
            let _ = peer;
            flush(phase, rng, out)?;
            for o in 0..world {
                phase.push(format!(
                    "[rank{o}]:[E1130 10:00:00.000000000 ProcessGroupNCCL.cpp:632] [Rank {o}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4242, OpType=ALLREDUCE, NumelIn=262144, NumelOut=262144, Timeout(ms)=600000) ran for 600031 milliseconds before timing out."
                ));
            }
        }
        Scenario::Hang { stuck, n } => {
            for o in 0..world {
                if o >= stuck && o < stuck + n {
                    continue;
                }
                phase.push(format!(
                    "[rank{o}]:[E1130 10:00:00.000000000 ProcessGroupNCCL.cpp:632] [Rank {o}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4242, OpType=ALLREDUCE, NumelIn=262144, NumelOut=262144, Timeout(ms)=600000) ran for 600031 milliseconds before timing out."
                ));
            }
        }
    }
    Ok(())
}

pub fn job(
    out: &mut impl Write,
    hosts: usize,
    gpus: usize,
    scenario: Scenario,
    filler_lines: u64,
    seed: u64,
) -> std::io::Result<()> {
    let k = Ranks {
        gpus,
        world: hosts * gpus,
    };
    let world = k.world;
    let mut rng = Rng(seed | 1);
    let mut phase: Vec<String> = Vec::new();
    writeln!(out, "0: NCCL version 2.21.5+cuda12.4")?;
    setup(&k, &mut phase);
    flush(&mut phase, &mut rng, out)?;
    rings(&k, &mut phase);
    flush(&mut phase, &mut rng, out)?;
    // Steady state: what NCCL_DEBUG=INFO keeps printing (traces of collectives with
    // NCCL_DEBUG_SUBSYS=COLL), written directly to keep the generator fast.
    for i in 0..filler_lines {
        let r = (rng.next() % world as u64) as usize;
        writeln!(
            out,
            "{} NCCL INFO AllReduce: opCount {:x} sendbuff 0x7f1a2c000000 recvbuff 0x7f1a2c000000 count 262144 datatype 7 op 0 root 0 comm 0x55d9607ee240 [nranks={world}] stream 0x55d960a1b2c0",
            k.hdr(r, 7),
            i / world as u64
        )?;
    }
    failure(&k, scenario, &mut phase, &mut rng, out)?;
    flush(&mut phase, &mut rng, out)?;
    Ok(())
}

/// A log dense with failure lines, as a cluster's collected logs are after a bad night:
/// `jobs` jobs of 16 hosts x 8 ranks writing into one stream, nearly every line a WARN
/// (completion errors, flushes, refused and closed sockets), an error trail, or a PyTorch
/// watchdog timeout or progress line, about `bytes` in all. The first failure is job 0's
/// rank 11 (host `job000-n01`, `mlx5_3`) with status 12 towards `job000-n05`.
pub fn dense(out: &mut impl Write, jobs: usize, bytes: u64, seed: u64) -> std::io::Result<()> {
    let mut rng = Rng(seed | 1);
    let node = |j: usize, h: usize| format!("job{j:03}-n{h:02}");
    let addr = |j: usize, h: usize| format!("10.{}.{}.{}", 100 + j / 256, j % 256, h + 1);
    writeln!(out, "NCCL version 2.21.5+cuda12.4")?;
    writeln!(
        out,
        "11: {}:4011:4090 [3] transport/net_ib.cc:1697 NCCL WARN NET/IB : Got completion from peer {}<41237> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:{} remoteGids::ffff:{} hca mlx5_3",
        node(0, 1),
        addr(0, 5),
        addr(0, 1),
        addr(0, 5)
    )?;
    let mut written = 0u64;
    let mut line = String::with_capacity(512);
    while written < bytes {
        let x = rng.next();
        let (j, r) = ((x % jobs as u64) as usize, ((x >> 16) % 128) as usize);
        let (h, d) = (r / 8, r % 8);
        let peer = (h + 1 + (x >> 24) as usize % 15) % 16;
        let hdr = format!("{r}: {}:{}:{} [{d}]", node(j, h), 4000 + r, 4080 + r);
        let seq = 1000 + (x >> 32) % 4000;
        line.clear();
        use std::fmt::Write as _;
        let _ = match (x >> 40) % 8 {
            0..=2 => write!(
                line,
                "{hdr} transport/net_ib.cc:1697 NCCL WARN NET/IB : Got completion from peer {}<41237> with status=5 opcode=0 len=0 vendor err 249 (Recv) localGid ::ffff:{} remoteGids::ffff:{} hca mlx5_{d}",
                addr(j, peer),
                addr(j, h),
                addr(j, peer)
            ),
            3 => write!(line, "{hdr} NCCL INFO transport/net.cc:1302 -> 6"),
            4 => write!(
                line,
                "[rank{r}]:[E1130 10:00:00.000000000 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=262144, NumelOut=262144, Timeout(ms)=600000) ran for 600031 milliseconds before timing out."
            ),
            5 => write!(
                line,
                "[rank{r}]:[E1130 10:00:00.000000000 ProcessGroupNCCL.cpp:1664] [PG ID 0 PG GUID 0(default_pg) Rank {r}] Timeout at NCCL work: {seq}, last enqueued NCCL work: {seq}, last completed NCCL work: {}.",
                seq - 1
            ),
            6 => write!(
                line,
                "{hdr} misc/socket.cc:484 NCCL WARN socketPollConnect: Connect to {}<50917> returned 111(Connection refused) errno 111(Connection refused)",
                addr(j, peer)
            ),
            _ => write!(
                line,
                "{hdr} misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer {}<50917>",
                node(j, peer)
            ),
        };
        line.push('\n');
        out.write_all(line.as_bytes())?;
        written += line.len() as u64;
    }
    Ok(())
}
