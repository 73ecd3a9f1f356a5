//! Benchmark (not a test): `fabprobe topo` and `snapshot` re-capture on the largest
//! fixtures. Target: topo well under 20 ms. Run: cargo bench --bench topo
//!
//! Each figure is the median and 90th percentile of N runs of the whole step: opening the
//! snapshot (side JSON files included), probing, judging and rendering (topo); or a
//! recording host, every probe, and writing the captured tree (snapshot).

use std::path::Path;
use std::time::{Duration, Instant};

use fabprobe::host::Host;
use fabprobe::probe::topo;
use fabprobe::render;

fn stats(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    (ms(v[v.len() / 2]), ms(v[v.len() * 9 / 10]))
}

fn bench(name: &str, n: usize, mut f: impl FnMut()) {
    f(); // warm the page cache
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f();
        times.push(t.elapsed());
    }
    let (med, p90) = stats(times);
    println!("{name:<48} median {med:8.2} ms   p90 {p90:8.2} ms   ({n} runs)");
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    for fx in ["h100-penny", "h100-sxm-8gpu"] {
        let dir = root.join(fx);
        bench(&format!("open snapshot only {fx}"), 200, || {
            std::hint::black_box(Host::snapshot(&dir).unwrap());
        });
        let host = Host::snapshot(&dir).unwrap();
        bench(&format!("probe only (host open) {fx}"), 200, || {
            std::hint::black_box(topo::probe(&host));
        });
        bench(&format!("topo table        {fx}"), 200, || {
            let host = Host::snapshot(&dir).unwrap();
            let r = topo::probe(&host);
            let f = topo::judge(&r);
            std::hint::black_box(render::topo::table(&r, &f, false));
        });
        bench(&format!("topo json         {fx}"), 200, || {
            let host = Host::snapshot(&dir).unwrap();
            let r = topo::probe(&host);
            let f = topo::judge(&r);
            let env = render::Envelope::new("topo", render::HostInfo::of(&host), &r, &f);
            std::hint::black_box(env.to_json());
        });
        bench(&format!("topo nccl-xml     {fx}"), 200, || {
            let host = Host::snapshot(&dir).unwrap();
            let r = topo::probe(&host);
            std::hint::black_box(render::topo::nccl_xml(&r));
        });
        bench(&format!("snapshot re-capture (dir) {fx}"), 20, || {
            let host = Host::snapshot(&dir).unwrap().with_recording();
            let out = tempfile::tempdir().unwrap();
            fabprobe::snapshot::capture(&host, &dir, &out.path().join("snap")).unwrap();
        });
        bench(&format!("snapshot re-capture (tar.gz) {fx}"), 10, || {
            let host = Host::snapshot(&dir).unwrap().with_recording();
            let out = tempfile::tempdir().unwrap();
            fabprobe::snapshot::capture(&host, &dir, &out.path().join("snap.tar.gz")).unwrap();
        });
    }
}
