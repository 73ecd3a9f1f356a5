//! Benchmark (not a test): `fabprobe check` on the largest fixtures (target: well under
//! 50 ms), and `fabprobe sweep` over 2,000 node reports generated from the fixtures with known
//! injected faults, which it must find exactly (target: under 1 s, memory bounded).
//! Run: cargo bench --bench check

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use fabprobe::check::policy;
use fabprobe::check::run::{self, Sampling};
use fabprobe::check::sweep::Sweeper;
use fabprobe::host::Host;
use fabprobe::nccl::settings::NcclSettings;
use fabprobe::render::{Envelope, HostInfo};

fn stats(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    (ms(v[v.len() / 2]), ms(v[v.len() * 9 / 10]))
}

/// CPU time of this process and of its waited-for children (user + system).
fn cpu_now() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    let get = |who| {
        let Ok(ru) = getrusage(who) else {
            return Duration::ZERO;
        };
        let tv = |t: nix::sys::time::TimeVal| Duration::new(t.tv_sec() as u64, t.tv_usec() as u32 * 1000);
        tv(ru.user_time()) + tv(ru.system_time())
    };
    get(UsageWho::RUSAGE_SELF) + get(UsageWho::RUSAGE_CHILDREN)
}

/// Wall time and CPU time: on this shared 2-core machine (load ~10) wall time mostly measures
/// waiting for a core; CPU time is what the work costs, and what wall time is when idle.
fn bench(name: &str, n: usize, mut f: impl FnMut()) {
    f(); // warm the page cache
    let mut times = Vec::with_capacity(n);
    let mut cpu = Vec::with_capacity(n);
    for _ in 0..n {
        let (t, c) = (Instant::now(), cpu_now());
        f();
        times.push(t.elapsed());
        cpu.push(cpu_now().saturating_sub(c));
    }
    let (med, p90) = stats(times);
    let (cmed, cp90) = stats(cpu);
    println!(
        "{name:<52} wall median {med:7.2} ms p90 {p90:7.2} | cpu median {cmed:7.2} ms p90 {cp90:7.2} ({n} runs)"
    );
}

fn report(dir: &Path, pol: &policy::Policy) -> serde_json::Value {
    let host = Host::snapshot(dir).unwrap();
    let (r, f) = run::run(
        &host,
        &NcclSettings::build(&host, None),
        pol,
        &Sampling::default(),
    );
    serde_json::from_str(&Envelope::new("check", HostInfo::of(&host), &r, &f).to_json_line()).unwrap()
}

/// Reports for `n` nodes; returns the outliers (node, key) the sweep must name.
fn fleet(dir: &Path, n: usize, good: &serde_json::Value, bad: &serde_json::Value) -> Vec<(String, String)> {
    let mut want = Vec::new();
    for i in 0..n {
        let name = format!("node{i:04}");
        let mut v = if i == 17 { bad.clone() } else { good.clone() };
        v["host"]["hostname"] = name.clone().into();
        if i == 5 || i == 1234 {
            v["data"]["fingerprint"]["kernel"] = "5.15.0-97-generic".into();
            want.push((name.clone(), "kernel".to_string()));
        }
        if i == 40 {
            v["data"]["fingerprint"]["gpu_driver"] = "535.183.01".into();
            want.push((name.clone(), "gpu_driver".to_string()));
        }
        if i == 17 {
            for k in [
                "hca_pcie",
                "ib_rates",
                "memlock_soft",
                "nvlink_min",
                "topo_signature",
            ] {
                want.push((name.clone(), k.to_string()));
            }
        }
        let mut text = serde_json::to_string(&v).unwrap();
        if i == 23 {
            text.truncate(text.len() / 3);
        }
        if i == 31 {
            text = "srun: error: task 31: Exited with exit code 127".into();
        }
        if i == 44 {
            continue;
        }
        std::fs::write(dir.join(format!("{name}.json")), text + "\n").unwrap();
    }
    want.sort();
    want
}

fn sweep_dir(dir: &Path) -> fabprobe::check::sweep::SweepReport {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    let mut sw = Sweeper::new();
    for p in entries {
        let text = std::fs::read_to_string(&p).unwrap();
        let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
        sw.add(&p.display().to_string(), Some(&stem), &text);
    }
    sw.finish()
}

/// Peak RSS of the children waited for so far, in MiB.
fn children_maxrss_mib() -> f64 {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_CHILDREN)
        .map(|ru| ru.max_rss() as f64 / 1024.0)
        .unwrap_or(0.0)
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let dgx = policy::load("dgx-h100").unwrap();
    for fx in [
        "h100-penny",
        "h100-sxm-8gpu",
        "h100-sxm-8gpu-bad",
        "h100-gdr-broken",
    ] {
        let dir = root.join(fx);
        bench(&format!("check --policy dgx-h100, json   {fx}"), 100, || {
            let host = Host::snapshot(&dir).unwrap();
            let (r, f) = run::run(
                &host,
                &NcclSettings::build(&host, None),
                &dgx,
                &Sampling::default(),
            );
            std::hint::black_box(Envelope::new("check", HostInfo::of(&host), &r, &f).to_json_line());
        });
        bench(&format!("check --policy dgx-h100, table  {fx}"), 100, || {
            let host = Host::snapshot(&dir).unwrap();
            let (r, f) = run::run(
                &host,
                &NcclSettings::build(&host, None),
                &dgx,
                &Sampling::default(),
            );
            std::hint::black_box(fabprobe::render::check::check_table(&r, None, &f));
        });
    }
    let bin = env!("CARGO_BIN_EXE_fabprobe");
    bench("process: fabprobe --root h100-penny check (json)", 30, || {
        let o = Command::new(bin)
            .args([
                "--root",
                root.join("h100-penny").to_str().unwrap(),
                "--format",
                "json",
                "check",
                "--policy",
                "dgx-h100",
            ])
            .output()
            .unwrap();
        // penny fails dgx-h100 on gdr.ready (no nvidia_peermem in its snapshot).
        assert_eq!(o.status.code(), Some(1));
    });

    let good = report(&root.join("h100-sxm-8gpu"), &dgx);
    let bad = report(&root.join("h100-sxm-8gpu-bad"), &dgx);
    let per = serde_json::to_string(&good).unwrap().len();
    for n in [500usize, 2000] {
        let tmp = tempfile::tempdir().unwrap();
        let want = fleet(tmp.path(), n, &good, &bad);
        let r = sweep_dir(tmp.path());
        let mut got: Vec<(String, String)> = r
            .outliers
            .iter()
            .map(|o| (o.node.clone(), o.key.clone()))
            .collect();
        got.sort();
        assert_eq!(got, want, "the sweep must find exactly the injected outliers");
        let bad_nodes: Vec<&str> = r.bad_nodes.iter().map(|b| b.node.as_str()).collect();
        assert_eq!(r.nodes.failed, 1);
        assert!(bad_nodes.contains(&"node0017"));
        let unread: Vec<(&str, &str)> = r
            .unreadable
            .iter()
            .map(|u| (u.node.as_deref().unwrap_or("?"), u.problem.as_str()))
            .collect();
        assert_eq!(unread, [("node0023", "truncated"), ("node0031", "not_json")]);
        bench(
            &format!("sweep in-process, {n} reports ({} KiB each)", per / 1024),
            10,
            || {
                std::hint::black_box(sweep_dir(tmp.path()));
            },
        );
        let d = tmp.path().to_str().unwrap().to_string();
        let expect = format!("node[0000-{:04}]", n - 1);
        bench(
            &format!("process: fabprobe sweep DIR --expect ({n} reports)"),
            10,
            || {
                let o = Command::new(bin)
                    .args(["--format", "json", "sweep", &d, "--expect", &expect])
                    .output()
                    .unwrap();
                assert_eq!(o.status.code(), Some(1));
                let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
                assert_eq!(v["data"]["nodes"]["missing"], 1);
            },
        );
        println!(
            "{:<52} peak RSS of the sweep processes so far: {:.1} MiB",
            "",
            children_maxrss_mib()
        );
    }
}
