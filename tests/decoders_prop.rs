//! Property tests of every decoder outside `src/ring` that takes outside bytes: snapshot
//! archives (random, corrupt, truncated, hostile and oversized `.tar.gz`), NCCL topology
//! XML, the sysfs and NCCL parse functions, and the probes over a fixture whose files were
//! overwritten with junk. Each must return (an answer or an error), never panic, and stay
//! within a memory bound, measured by a counting allocator (allocation-counter) on the test's own thread.

use std::io::Write;
use std::path::{Path, PathBuf};

use fabprobe::host::Host;
use fabprobe::host::tarball::{self, Limits};
use fabprobe::nccl::settings::NcclSettings;
use fabprobe::nccl::topo_xml;
use fabprobe::probe::{gids, links, topo};
use proptest::prelude::*;

// ---- memory accounting ---------------------------------------------------------------

/// The most heap this thread held at once while `f` ran, above what it held before
/// (allocation-counter's global allocator counts per thread: other tests never pollute it).
fn peak_heap<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let mut r = None;
    let info = allocation_counter::measure(|| r = Some(f()));
    let r = r.expect("measure runs the closure once");
    (r, usize::try_from(info.bytes_max).unwrap_or(usize::MAX))
}

/// The counter is live in this binary, so a bound below cannot pass on a zero reading.
#[test]
fn peak_heap_sees_this_threads_allocations() {
    let (v, heap) = peak_heap(|| std::hint::black_box(vec![7u8; 1 << 16]));
    assert_eq!(v.len(), 1 << 16);
    assert!(heap >= 1 << 16, "heap {heap}");
    let ((), freed) = peak_heap(|| drop(std::hint::black_box(vec![7u8; 1 << 12])));
    assert!((1 << 12..1 << 16).contains(&freed), "heap {freed}");
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Text made mostly of the characters sysfs values and NCCL variables are made of.
fn sysfs_text(max: usize) -> impl Strategy<Value = String> {
    const POOL: &[char] = &[
        '0', '1', '2', '4', '7', '8', '9', 'a', 'f', 'F', 'x', 'X', ':', '.', ',', '-', '/', ' ', '\n', '\t',
        'G', 'T', 's', 'b', 'e', 'c', '(', ')', 'P', 'C', 'I', 'N', 'D', 'R', '^', '=', '%', '+', 'n', 'o',
        'd', 'p', 'i',
    ];
    prop_oneof![
        4 => proptest::collection::vec(proptest::sample::select(POOL), 0..max),
        1 => proptest::collection::vec(any::<char>(), 0..max),
    ]
    .prop_map(|v| v.into_iter().collect())
}

// ---- snapshot archives ---------------------------------------------------------------

const NAME_PARTS: &[&str] = &[
    "sys",
    "class",
    "net",
    "devices",
    "pci0000:00",
    "0000:00:01.0",
    "fabprobe",
    "env.json",
    "nvml.json",
    "..",
    ".",
    "",
    "a",
    "b",
    "x\u{1b}[2J",
    "l",
];
const LINK_TARGETS: &[&str] = &[
    "..",
    ".",
    "../..",
    "../../devices/pci0000:00",
    "/etc",
    "/",
    "a",
    "../a/../..",
    "l/x",
    "",
    "../l",
    "sys",
    "../../../../../../../../tmp",
];
const KINDS: &[u8] = b"0555222113467SLLxgK7Z\0";

#[derive(Debug, Clone)]
struct Ent {
    name: String,
    kind: u8,
    data: Vec<u8>,
    /// A size for the header other than the data's (a bomb's claim, or a lie).
    claimed: Option<u64>,
    link: String,
}

fn ent() -> impl Strategy<Value = Ent> {
    (
        proptest::collection::vec(proptest::sample::select(NAME_PARTS), 1..5),
        any::<bool>(),
        proptest::sample::select(KINDS),
        proptest::collection::vec(any::<u8>(), 0..300),
        prop_oneof![
            6 => Just(None),
            1 => Just(Some(1u64 << 40)),
            1 => (0u64..2000).prop_map(Some),
            1 => Just(Some(u64::MAX / 2)),
        ],
        proptest::sample::select(LINK_TARGETS),
    )
        .prop_map(|(parts, abs, kind, data, claimed, link)| Ent {
            name: format!("{}{}", if abs { "/" } else { "" }, parts.join("/")),
            kind,
            data,
            claimed,
            link: link.to_string(),
        })
}

/// A tar stream as any tool (or attacker) might write it: header fields set byte by byte.
fn tar_bytes(entries: &[Ent]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in entries {
        let mut h = tar::Header::new_gnu();
        let n = e.name.as_bytes();
        let n = &n[..n.len().min(100)];
        h.as_old_mut().name[..n.len()].copy_from_slice(n);
        let l = e.link.as_bytes();
        let l = &l[..l.len().min(100)];
        h.as_old_mut().linkname[..l.len()].copy_from_slice(l);
        h.set_entry_type(tar::EntryType::new(e.kind));
        h.set_size(e.claimed.unwrap_or(e.data.len() as u64));
        h.set_mode(0o644);
        h.set_cksum();
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(&e.data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.extend_from_slice(&[0; 1024]);
    out
}

fn gzip(b: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(b).unwrap();
    gz.finish().unwrap()
}

/// Archive bytes: a hostile tree, then perhaps cut short or with bytes flipped, or noise.
fn archive() -> impl Strategy<Value = Vec<u8>> {
    let tree = (
        proptest::collection::vec(ent(), 0..12),
        proptest::option::of(any::<prop::sample::Index>()),
        proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        any::<bool>(),
    )
        .prop_map(|(ents, cut, flips, flip_gz)| {
            let mut t = tar_bytes(&ents);
            if !flip_gz {
                for (i, b) in &flips {
                    let k = i.index(t.len());
                    t[k] = *b;
                }
            }
            if let Some(c) = cut {
                t.truncate(c.index(t.len() + 1));
            }
            let mut g = gzip(&t);
            if flip_gz {
                for (i, b) in &flips {
                    let k = i.index(g.len());
                    g[k] = *b;
                }
            }
            g
        });
    let noise = proptest::collection::vec(any::<u8>(), 0..2048);
    prop_oneof![6 => tree, 1 => noise.clone(), 1 => noise.prop_map(|n| gzip(&n))]
}

/// Every symbolic link under `dir` that resolves on the real filesystem lands inside it.
fn links_stay_inside(dir: &Path) -> Result<(), String> {
    let root = std::fs::canonicalize(dir).unwrap();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.file_type().is_symlink() {
                if let Ok(real) = std::fs::canonicalize(&p)
                    && !real.starts_with(&root)
                {
                    return Err(format!("{} -> {}", p.display(), real.display()));
                }
            } else if m.is_dir() {
                todo.push(p);
            }
        }
    }
    Ok(())
}

/// What the extraction may hold at once, whatever the archive: gzip's window, one read
/// buffer, one extension header (64 KiB) and the names of the links made.
const ARCHIVE_HEAP_BOUND: usize = 1 << 20;

proptest! {
    #![proptest_config(config(256))]

    /// Random, corrupt, truncated and hostile archives: an error or a tree, never a panic;
    /// no link out of the tree; bounded heap; errors free of control characters.
    #[test]
    fn archives_never_panic_escape_or_balloon(gz in archive()) {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("d");
        std::fs::create_dir(&dest).unwrap();
        let (res, heap) = peak_heap(|| {
            tarball::unpack(
                || Ok::<_, std::io::Error>(flate2::read::GzDecoder::new(&gz[..])),
                &dest,
                &tarball::LIMITS,
            )
        });
        prop_assert!(heap < ARCHIVE_HEAP_BOUND, "heap {heap}");
        match res {
            Ok(u) => {
                prop_assert!(u.entries <= tarball::LIMITS.max_entries);
                if let Err(e) = links_stay_inside(&dest) {
                    prop_assert!(false, "link escapes: {e}");
                }
            }
            Err(e) => {
                let s = e.to_string();
                prop_assert!(!s.is_empty() && !s.chars().any(char::is_control), "{s:?}");
            }
        }
        // The same bytes as --root: a host that probes cleanly, or an error naming the file.
        let file = dir.path().join("node.tar.gz");
        std::fs::write(&file, &gz).unwrap();
        match Host::snapshot(&file) {
            Ok(h) => {
                let _ = topo::probe(&h);
                let _ = gids::probe(&h, &NcclSettings::build(&h, None).gid_env());
                let _ = links::probe(&h);
            }
            Err(e) => {
                let s = e.to_string();
                prop_assert!(s.contains("node.tar.gz"), "{s}");
                prop_assert!(!s.chars().any(char::is_control), "{s:?}");
            }
        }
    }

    /// Under any caps, what is unpacked stays within them (the bomb property, with caps
    /// small enough for random archives to hit).
    #[test]
    fn archive_caps_hold(
        ents in proptest::collection::vec(ent(), 0..16),
        max_entries in 0u64..20,
        max_total_bytes in 0u64..3000,
        max_file_bytes in 0u64..400,
    ) {
        let lim = Limits { max_entries, max_total_bytes, max_file_bytes, max_ext_bytes: 256 };
        let dir = tempfile::tempdir().unwrap();
        let t = tar_bytes(&ents);
        if let Ok(u) = tarball::unpack(|| Ok::<_, std::io::Error>(&t[..]), dir.path(), &lim) {
            prop_assert!(u.entries <= max_entries && u.bytes <= max_total_bytes, "{u:?}");
            let mut on_disk = 0u64;
            let mut todo = vec![dir.path().to_path_buf()];
            while let Some(d) = todo.pop() {
                for e in std::fs::read_dir(&d).unwrap().flatten() {
                    let m = std::fs::symlink_metadata(e.path()).unwrap();
                    if m.is_dir() {
                        todo.push(e.path());
                    } else if m.is_file() {
                        prop_assert!(m.len() <= max_file_bytes);
                        on_disk += m.len();
                    }
                }
            }
            prop_assert!(on_disk <= max_total_bytes);
        }
    }
}

// ---- NCCL topology XML ---------------------------------------------------------------

const TAGS: &[&str] = &["system", "cpu", "pci", "gpu", "nvlink", "nic", "net", "c2c", "x"];
const KEYS: &[&str] = &[
    "version",
    "numaid",
    "busid",
    "class",
    "vendor",
    "dev",
    "sm",
    "target",
    "count",
    "tclass",
    "name",
    "speed",
    "port",
    "guid",
    "link_width",
    "link_speed",
    "affinity",
];
const VALUES: &[&str] = &[
    "1",
    "0",
    "-1",
    "2",
    "0000:01:00.0",
    "0000:0F:00.0",
    "0000:f5:00.0",
    "0x060400",
    "0x030200",
    "0x068000",
    "0x068001",
    "0x020000",
    "mlx5_0",
    "18",
    "4294967296",
    "-5",
    "a&amp;b",
    "&lt;",
    "32.0 GT/s PCIe",
    "",
    "fffffff:ffff:ff",
    "0x",
];

#[derive(Debug, Clone)]
enum Tok {
    Open(&'static str, Vec<(&'static str, &'static str)>),
    Empty(&'static str, Vec<(&'static str, &'static str)>),
    Close,
    Comment,
    Junk(String),
}

fn tok() -> impl Strategy<Value = Tok> {
    let attrs = proptest::collection::vec(
        (proptest::sample::select(KEYS), proptest::sample::select(VALUES)),
        0..5,
    );
    prop_oneof![
        5 => (proptest::sample::select(TAGS), attrs.clone()).prop_map(|(t, a)| Tok::Open(t, a)),
        4 => (proptest::sample::select(TAGS), attrs).prop_map(|(t, a)| Tok::Empty(t, a)),
        4 => Just(Tok::Close),
        1 => Just(Tok::Comment),
        1 => sysfs_text(8).prop_map(Tok::Junk),
    ]
}

/// Render tokens; closing tags match what is open (a stray one closes nothing: the parser
/// sees an unmatched name).
fn xml_of(toks: &[Tok]) -> String {
    let mut s = String::new();
    let mut open: Vec<&str> = Vec::new();
    let attrs = |a: &[(&str, &str)]| -> String { a.iter().map(|(k, v)| format!(" {k}=\"{v}\"")).collect() };
    for t in toks {
        match t {
            Tok::Open(n, a) => {
                s.push_str(&format!("<{n}{}>\n", attrs(a)));
                open.push(n);
            }
            Tok::Empty(n, a) => s.push_str(&format!("<{n}{}/>\n", attrs(a))),
            Tok::Close => s.push_str(&format!("</{}>\n", open.pop().unwrap_or("stray"))),
            Tok::Comment => s.push_str("<!-- c -->\n"),
            Tok::Junk(j) => s.push_str(j),
        }
    }
    s
}

fn xml_input() -> impl Strategy<Value = String> {
    let structured = (
        proptest::collection::vec(tok(), 0..40),
        any::<bool>(),
        proptest::collection::vec(tok(), 0..300),
    )
        .prop_map(|(body, deep, nest)| {
            let mut toks = vec![Tok::Open("system", vec![("version", "1")])];
            toks.extend(body);
            if deep {
                // Deep nesting, up to past the limit.
                toks.extend(nest.into_iter().map(|t| match t {
                    Tok::Open(n, a) | Tok::Empty(n, a) => Tok::Open(n, a),
                    other => other,
                }));
            }
            xml_of(&toks)
        });
    let bytes = proptest::collection::vec(any::<u8>(), 0..2048)
        .prop_map(|b| String::from_utf8_lossy(&b).into_owned());
    prop_oneof![6 => structured, 1 => bytes]
}

proptest! {
    #![proptest_config(config(256))]

    /// Any text: a tree or an error naming the file and a line within it; bounded heap;
    /// a parsed tree writes back to the same tree and builds a report without panicking.
    #[test]
    fn nccl_xml_never_panics_and_round_trips(text in xml_input()) {
        let path = Path::new("in.xml");
        let (res, heap) = peak_heap(|| topo_xml::parse(&text, path));
        prop_assert!(heap <= (64 << 10) + 64 * text.len(), "heap {heap} for {} bytes", text.len());
        match res {
            Ok(sys) => {
                let back = topo_xml::parse(&topo_xml::write(&sys), path);
                match back {
                    Ok(b) => prop_assert_eq!(b, sys.clone()),
                    Err(e) => prop_assert!(false, "what we wrote does not parse: {e}"),
                }
                let r = topo::from_nccl_system(&sys, "in.xml");
                let _ = topo::judge(&r);
                let _ = topo::to_nccl_system(&r);
            }
            Err(topo_xml::TopoXmlError::Bad { path: p, line, msg }) => {
                prop_assert_eq!(p, PathBuf::from("in.xml"));
                prop_assert!(line >= 1 && line <= text.lines().count().max(1) + 1, "line {line}: {msg}");
                prop_assert!(!msg.chars().any(char::is_control), "{msg:?}");
            }
            Err(e) => prop_assert!(false, "unexpected {e}"),
        }
    }
}

// ---- sysfs and NCCL parse functions ----------------------------------------------------

proptest! {
    #![proptest_config(config(256))]

    /// Every pure parser over any text: an answer or None, never a panic, and output no
    /// bigger than a small multiple of the input.
    #[test]
    fn sysfs_and_nccl_parsers_never_panic(s in sysfs_text(64)) {
        use fabprobe::nccl::{gid, ifname, topo as ncclt};
        use fabprobe::sysfs::{infiniband as ib, net, node, pci};
        let ((), heap) = peak_heap(|| {
            let _ = ib::parse_num_name(&s);
            let _ = ib::parse_rate(&s);
            let _ = ib::parse_hex_u32(&s);
            let _ = ib::parse_guid(&s);
            if let Some(g) = ib::parse_gid(&s) {
                let _ = (g.full(), g.ipv4_mapped(), g.flid(), gid::valid_gid(&g), gid::gid_family(&g));
            }
            let _ = ib::GidType::parse(&s);
            let _ = ib::parse_counter(&s);
            let _ = net::parse_speed_mbps(&s);
            let _ = node::parse_node_dir(&s);
            if let Some(l) = node::cpumap_to_cpulist(&s) {
                assert!(l.len() <= 16 * s.len() + 16, "{l}");
            }
            let _ = node::parse_cpuinfo(&s);
            let _ = pci::parse_link_speed(&s);
            let _ = pci::parse_link_width(&s);
            let _ = pci::parse_hex_id(&s);
            let _ = pci::parse_numa_node(&s);
            let _ = pci::parse_chain(&s);
            let _ = (pci::is_bdf(&s), pci::is_root_bus(&s));
            let _ = gid::nccl_param(Some(&s), 7);
            let _ = gid::parse_addr_range(Some(&s), gid::Family::Inet);
            let _ = gid::parse_addr_range(Some(&s), gid::Family::Inet6);
            if let Some(spec) = ifname::IfSpec::parse(&s) {
                let _ = spec.matches("eth0");
                let _ = spec.matches(&s);
            }
            let _ = ncclt::slot_of(&s);
            let _ = topo::parse_rate_mbps(&s);
            let _ = topo::nccl_guid(&s);
        });
        prop_assert!(heap <= (16 << 10) + 64 * s.len(), "heap {heap}");
    }
}

// ---- probes over junk sysfs --------------------------------------------------------------

fn regular_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let m = std::fs::symlink_metadata(e.path()).unwrap();
        if m.is_dir() {
            regular_files(&e.path(), out);
        } else if m.is_file() {
            out.push(e.path());
        }
    }
}

/// Each fixture with some of its files overwritten by junk: every probe still answers.
/// (16 cases a fixture: each reads thousands of files.)
#[test]
fn probes_survive_junk_in_any_sysfs_file() {
    for fixture in ["h100-sxm-8gpu", "roce-bond-host", "container-sparse-gids"] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join(fixture);
        let st = std::process::Command::new("cp")
            .args(["-a", &format!("fixtures/{fixture}"), root.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(st.success());
        let mut files = Vec::new();
        regular_files(&root.join("sys"), &mut files);
        if root.join("proc").is_dir() {
            regular_files(&root.join("proc"), &mut files);
        }
        files.sort();
        let strategy = proptest::collection::vec((any::<prop::sample::Index>(), sysfs_text(48)), 1..6);
        let mut runner = proptest::test_runner::TestRunner::new(config(16));
        runner
            .run(&strategy, |junk| {
                // Put the fixture back even when a probe panics (the runner shrinks on).
                struct Restore(Vec<(PathBuf, Vec<u8>)>);
                impl Drop for Restore {
                    fn drop(&mut self) {
                        for (f, b) in self.0.iter().rev() {
                            let _ = std::fs::write(f, b);
                        }
                    }
                }
                let mut saved = Restore(Vec::new());
                for (i, text) in &junk {
                    let f = files[i.index(files.len())].clone();
                    let b = std::fs::read(&f).unwrap();
                    saved.0.push((f.clone(), b));
                    std::fs::write(&f, text).unwrap();
                }
                let h = Host::snapshot(&root).unwrap();
                let r = topo::probe(&h);
                let _ = topo::judge(&r);
                let _ = topo_xml::write(&topo::to_nccl_system(&r));
                let _ = gids::probe(&h, &NcclSettings::build(&h, None).gid_env());
                let _ = links::probe(&h);
                drop(saved);
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{fixture}: {e}"));
    }
}
