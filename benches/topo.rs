//! Benchmark: `fabprobe topo` and `snapshot` re-capture on the largest fixtures. Target: topo
//! well under 20 ms. Run: cargo bench --bench topo. `cargo test` runs its quick mode (a few
//! runs of each step, the same correctness checks; benches/common/mod.rs): every run renders
//! the same output, the output is the one tests/topo.rs approved (tests/snapshots), and a
//! re-captured snapshot replays to the same topo report.
//!
//! Each figure is the median and 90th percentile of N runs of the whole step: opening the
//! snapshot (side JSON files included), probing, judging and rendering (topo); or a
//! recording host, every probe, and writing the captured tree (snapshot).

use std::path::Path;
use std::time::{Duration, Instant};

use fabprobe::host::Host;
use fabprobe::probe::topo;
use fabprobe::render;

mod common;
use common::Groups;

fn stats(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    (ms(v[v.len() / 2]), ms(v[v.len() * 9 / 10]))
}

/// Times `n` runs of `f`, after one warm-up run when `n` > 1; returns every run's output
/// (the warm-up's first) and the median in ms.
fn bench<T>(name: &str, n: usize, mut f: impl FnMut() -> T) -> (Vec<T>, f64) {
    // Warm the page cache (one run alone is timed cold: quick mode's slow steps).
    let mut outs = if n > 1 { vec![f()] } else { Vec::new() };
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        outs.push(std::hint::black_box(f()));
        times.push(t.elapsed());
    }
    let (med, p90) = stats(times);
    println!("{name:<48} median {med:8.2} ms   p90 {p90:8.2} ms   ({n} runs)");
    (outs, med)
}

/// The body of an insta snapshot file that tests/topo.rs keeps.
fn approved(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(format!("topo__{name}.snap"));
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    // The header is the first "---" ... "---" block.
    let body = text
        .splitn(3, "---\n")
        .nth(2)
        .unwrap_or_else(|| panic!("{}: no insta header", p.display()));
    body.trim_end().to_string()
}

/// Every output equals the first one.
fn same<T: PartialEq>(what: &str, outs: &[T]) {
    assert!(
        outs.windows(2).all(|w| w[0] == w[1]),
        "{what}: a run gave a different output"
    );
}

fn topo_json(dir: &Path) -> serde_json::Value {
    let host = Host::snapshot(dir).unwrap();
    let r = topo::probe(&host);
    let f = topo::judge(&r);
    let env = render::Envelope::new("topo", render::HostInfo::of(&host), &r, &f);
    serde_json::from_str(&env.to_json()).unwrap()
}

fn main() {
    let mut g = Groups::start("topo");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let mut slowest = 0.0f64;
    for fx in ["h100-penny", "h100-sxm-8gpu"] {
        slowest = slowest.max(fixture(&mut g, &root.join(fx), fx));
        // A re-capture takes seconds here: quick mode does one, of the last fixture.
        if g.mode == common::Mode::Full || fx == "h100-sxm-8gpu" {
            recapture(&mut g, &root.join(fx), fx);
        }
    }
    g.speed_target(
        "topo table on the largest fixtures, median under 20 ms",
        slowest < 20.0,
    );
    g.finish();
}

/// Times each step on fixture `fx` and checks what it produced. Returns the topo table's
/// median in ms (the quoted figure).
fn fixture(g: &mut Groups, dir: &Path, fx: &str) -> f64 {
    let n = g.mode.pick(5, 200);
    bench(&format!("open snapshot only {fx}"), n, || {
        Host::snapshot(dir).unwrap();
    });
    let host = Host::snapshot(dir).unwrap();
    let (probed, _) = bench(&format!("probe only (host open) {fx}"), n, || topo::probe(&host));
    let (tables, med) = bench(&format!("topo table        {fx}"), n, || {
        let host = Host::snapshot(dir).unwrap();
        let r = topo::probe(&host);
        let f = topo::judge(&r);
        render::topo::table(&r, &f, false)
    });
    let (jsons, _) = bench(&format!("topo json         {fx}"), n, || {
        let host = Host::snapshot(dir).unwrap();
        let r = topo::probe(&host);
        let f = topo::judge(&r);
        render::Envelope::new("topo", render::HostInfo::of(&host), &r, &f).to_json()
    });
    let (xmls, _) = bench(&format!("topo nccl-xml     {fx}"), n, || {
        let host = Host::snapshot(dir).unwrap();
        render::topo::nccl_xml(&topo::probe(&host))
    });
    g.check(
        &format!("topo {fx}: every run gives the same report, table, json and xml"),
        || {
            same("probe", &probed);
            same("table", &tables);
            same("json", &jsons);
            same("nccl-xml", &xmls);
        },
    );
    g.check(&format!("topo {fx}: the output tests/topo.rs approved"), || {
        assert_eq!(
            tables[0].trim_end(),
            approved(&format!("table_{fx}")),
            "{fx}: table"
        );
        assert_eq!(
            xmls[0].trim_end(),
            approved(&format!("nccl_xml_{fx}")),
            "{fx}: nccl-xml"
        );
        let v: serde_json::Value = serde_json::from_str(&jsons[0]).unwrap();
        let want: serde_json::Value = serde_json::from_str(&approved(&format!("report_{fx}"))).unwrap();
        assert_eq!(v["data"], want["data"], "{fx}: json data");
        assert_eq!(v["findings"], want["findings"], "{fx}: json findings");
    });
    med
}

/// Snapshot re-capture into a directory and a tar.gz: each replays to the fixture's topo JSON.
fn recapture(g: &mut Groups, dir: &Path, fx: &str) {
    let want = topo_json(dir);
    for (form, name, full_runs) in [("dir", "snap", 20), ("tar.gz", "snap.tar.gz", 10)] {
        let (replayed, _) = bench(
            &format!("snapshot re-capture ({form}) {fx}"),
            g.mode.pick(1, full_runs),
            || {
                let host = Host::snapshot(dir).unwrap().with_recording();
                let out = tempfile::tempdir().unwrap();
                let snap = out.path().join(name);
                fabprobe::snapshot::capture(&host, dir, &snap).unwrap();
                topo_json(&snap)
            },
        );
        g.check(
            &format!("snapshot re-capture ({form}) {fx} replays to the same topo report"),
            || {
                for got in &replayed {
                    assert_eq!(got["data"], want["data"], "{fx} {form}: data");
                    assert_eq!(got["findings"], want["findings"], "{fx} {form}: findings");
                }
            },
        );
    }
}
