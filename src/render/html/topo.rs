//! A `fabprobe.topo` report as a page section: the tree `lstopo` would draw (NUMA node,
//! host bridge, the PCIe switches NCCL sees, GPUs and NICs with their ports and rails), the
//! NVLink count of every GPU pair, and the findings (the topo report's own and those of a
//! `check` of the same host) marked on the devices they name.

use std::collections::BTreeMap;

use maud::{Markup, html};
use serde::Deserialize;

use super::{Envelope, Finding, HtmlError, findings_table, severity_word};

#[derive(Deserialize)]
struct Topo {
    #[serde(default)]
    gpus: Vec<Gpu>,
    #[serde(default)]
    nics: Vec<Nic>,
    #[serde(default)]
    numa_nodes: Vec<Numa>,
    #[serde(default)]
    labels: Vec<String>,
    #[serde(default)]
    matrix: Vec<Vec<String>>,
    #[serde(default)]
    notes: Vec<String>,
}

#[derive(Deserialize)]
struct Numa {
    id: i64,
    cpulist: Option<String>,
}

#[derive(Deserialize)]
struct Gpu {
    label: String,
    pci_bus_id: String,
    name: Option<String>,
    #[serde(default)]
    nvlinks: Vec<NvLink>,
    pci: Option<Pci>,
}

#[derive(Deserialize)]
struct NvLink {
    count: u32,
}

#[derive(Deserialize)]
struct Nic {
    label: String,
    ibdev: String,
    #[serde(default)]
    ports: Vec<Port>,
    pci: Option<Pci>,
}

#[derive(Deserialize)]
struct Port {
    port: u32,
    link_layer: Option<String>,
    rate: Option<String>,
}

#[derive(Deserialize)]
struct Pci {
    pci_bus_id: String,
    root_bus: Option<String>,
    #[serde(default)]
    nccl_switches: Vec<String>,
    numa_node: Option<i64>,
    link: Option<Link>,
}

#[derive(Deserialize)]
struct Link {
    current_speed: Option<Speed>,
    current_width: Option<u32>,
    max_speed: Option<Speed>,
    max_width: Option<u32>,
}

#[derive(Deserialize)]
struct Speed {
    generation: Option<u32>,
    gts: Option<f64>,
}

/// A device in the tree.
enum Dev<'a> {
    Gpu(&'a Gpu),
    Nic(&'a Nic),
}

impl<'a> Dev<'a> {
    fn pci(&self) -> Option<&'a Pci> {
        match self {
            Dev::Gpu(g) => g.pci.as_ref(),
            Dev::Nic(n) => n.pci.as_ref(),
        }
    }
    /// Names a finding's subject may use for it.
    fn names(&self) -> Vec<&'a str> {
        match self {
            Dev::Gpu(g) => vec![&g.label, &g.pci_bus_id],
            Dev::Nic(n) => {
                let mut v = vec![n.label.as_str(), n.ibdev.as_str()];
                v.extend(n.pci.as_ref().map(|p| p.pci_bus_id.as_str()));
                v
            }
        }
    }
}

/// One box of the tree: a host bridge or a switch, its switches and its devices.
#[derive(Default)]
struct Node<'a> {
    kids: BTreeMap<String, Node<'a>>,
    devs: Vec<Dev<'a>>,
}

pub(super) fn section(e: &Envelope, check_findings: &[&Finding]) -> Result<Markup, HtmlError> {
    let t: Topo = e.view("data", e.data)?;
    // A check of the same host repeats the topo report's own findings: each once.
    let mut findings: Vec<&Finding> = Vec::new();
    for f in e.findings.iter().chain(check_findings.iter().copied()) {
        if !findings.iter().any(|g| g.id == f.id && g.subject == f.subject) {
            findings.push(f);
        }
    }
    let rails = rails(&t.nics);
    let mut numa: BTreeMap<Option<i64>, Node> = BTreeMap::new();
    let devs = t.gpus.iter().map(Dev::Gpu).chain(t.nics.iter().map(Dev::Nic));
    for d in devs {
        let pci = d.pci();
        let mut at = numa.entry(pci.and_then(|p| p.numa_node).filter(|n| *n >= 0)).or_default();
        let root = pci.and_then(|p| p.root_bus.clone()).unwrap_or_else(|| "host bridge ?".into());
        at = at.kids.entry(root).or_default();
        for sw in pci.map(|p| p.nccl_switches.as_slice()).unwrap_or_default() {
            at = at.kids.entry(sw.clone()).or_default();
        }
        at.devs.push(d);
    }
    let placed: Vec<&str> = t.gpus.iter().flat_map(|g| Dev::Gpu(g).names()).chain(t.nics.iter().flat_map(|n| Dev::Nic(n).names())).collect();
    let elsewhere: Vec<&Finding> = findings.iter().copied().filter(|f| !placed.iter().any(|n| names(&f.subject, n))).collect();
    let ctx = Ctx { findings: &findings, rails: &rails };
    Ok(html! {
        section.topo {
            h2 { "Topology" @if let Some(h) = e.hostname { ": " (h) } }
            p.legend {
                span style="--c:var(--data1)" { "GPU" } span style="--c:var(--data2)" { "RDMA NIC" }
                span style="--c:var(--fail)" { "device with a failing finding" } span style="--c:var(--warn)" { "with a warning" }
            }
            div.tree {
                @for (id, node) in &numa {
                    div.box.numa {
                        div.title {
                            @match id { Some(n) => { "NUMA node " (n) } None => { "NUMA node unknown" } }
                            @if let Some(c) = id.and_then(|n| t.numa_nodes.iter().find(|x| x.id == n)).and_then(|x| x.cpulist.as_deref()) {
                                " (CPUs " (c) ")"
                            }
                        }
                        div.kids { @for (name, kid) in &node.kids { (tree(&ctx, name, kid, 0)) } }
                    }
                }
            }
            (nvlink_table(&t))
            @for n in &t.notes { p.muted { "note: " (n) } }
            @if !elsewhere.is_empty() {
                h3 { "Findings not on a drawn device" }
                (findings_table(&elsewhere))
            }
        }
    })
}

struct Ctx<'a> {
    findings: &'a [&'a Finding],
    rails: &'a BTreeMap<(String, u32), usize>,
}

/// Rail k is the k-th RDMA port in device order (mlx5_10 after mlx5_9), as `ring --rails
/// all` numbers them when neither --device nor NCCL_IB_HCA picks the ports.
fn rails(nics: &[Nic]) -> BTreeMap<(String, u32), usize> {
    let mut ports: Vec<(&str, u32)> = nics.iter().flat_map(|n| n.ports.iter().map(|p| (n.ibdev.as_str(), p.port))).collect();
    let key = |s: &str| {
        let digits = s.len() - s.bytes().rev().take_while(u8::is_ascii_digit).count();
        (s[..digits].to_string(), s[digits..].parse::<u64>().unwrap_or(0))
    };
    ports.sort_by(|a, b| key(a.0).cmp(&key(b.0)).then(a.1.cmp(&b.1)));
    ports.into_iter().enumerate().map(|(i, (d, p))| ((d.to_string(), p), i)).collect()
}

/// Whether a finding's subject names `name` as a word (`mlx5_1` is not in `mlx5_10/1`).
fn names(subject: &str, name: &str) -> bool {
    subject
        .split(|c: char| c.is_whitespace() || "(),;/".contains(c))
        .any(|w| w == name)
}

fn tree(ctx: &Ctx, name: &str, node: &Node, depth: usize) -> Markup {
    let kind = if depth == 0 { "host bridge " } else { "PCIe switch " };
    html! {
        div.box {
            div.title { (kind) (name) }
            div.kids {
                @for d in &node.devs { (device(ctx, d)) }
                @for (n, k) in &node.kids { (tree(ctx, n, k, depth + 1)) }
            }
        }
    }
}

/// `PCIe Gen5 x16 (max Gen5 x16)`; a field not read is `unknown` (never `?`); a GPU below
/// its maximum speed says that an idle GPU's link trains down (Gen1 at idle is not a fault).
fn link_text(l: &Link, gpu: bool) -> String {
    let generation = |s: &Option<Speed>| match s {
        Some(Speed { generation: Some(g), .. }) => format!("Gen{g}"),
        Some(Speed { gts: Some(t), .. }) => format!("{t} GT/s"),
        _ => "speed unknown".into(),
    };
    let w = |x: Option<u32>| x.map(|w| format!("x{w}")).unwrap_or_else(|| "width unknown".into());
    let gen_of = |s: &Option<Speed>| s.as_ref().and_then(|s| s.generation);
    let idle = gpu
        && matches!((gen_of(&l.current_speed), gen_of(&l.max_speed)), (Some(c), Some(m)) if c < m);
    format!(
        "PCIe {} {} (max {} {}){}",
        generation(&l.current_speed),
        w(l.current_width),
        generation(&l.max_speed),
        w(l.max_width),
        if idle { "; an idle GPU's link trains down to save power" } else { "" }
    )
}

fn device(ctx: &Ctx, d: &Dev) -> Markup {
    let mine: Vec<&Finding> = ctx
        .findings
        .iter()
        .copied()
        .filter(|f| d.names().iter().any(|n| names(&f.subject, n)))
        .collect();
    // One badge per finding id on a device, however many reports repeat it.
    let mut mine = mine;
    let mut seen = std::collections::BTreeSet::new();
    mine.retain(|f| seen.insert((f.id.as_str(), f.severity.as_str())));
    let worst = ["fail", "warn"].into_iter().find(|s| mine.iter().any(|f| f.severity == *s));
    let (kind, label) = match d {
        Dev::Gpu(g) => ("gpu", g.label.as_str()),
        Dev::Nic(n) => ("nic", n.label.as_str()),
    };
    html! {
        div class={"dev " (kind) @if let Some(w) = worst { " " (w) }} data-label=(label) data-findings=[(!mine.is_empty()).then(|| mine.iter().map(|f| f.id.as_str()).collect::<Vec<_>>().join(" "))] {
            @match d {
                Dev::Gpu(g) => {
                    b { (g.label) } " " (g.name.as_deref().unwrap_or(""))
                    br; code { (g.pci_bus_id) }
                    @if !g.nvlinks.is_empty() { br; "NVLink " (g.nvlinks.iter().map(|l| l.count).sum::<u32>()) " links" }
                }
                Dev::Nic(n) => {
                    b { (n.label) } " " code { (n.ibdev) }
                    @if let Some(p) = &n.pci { br; code { (p.pci_bus_id) } }
                    @for p in &n.ports {
                        br; "port " (p.port)
                        @if let Some(r) = ctx.rails.get(&(n.ibdev.clone(), p.port)) { " rail " (r) }
                        ": " (p.link_layer.as_deref().unwrap_or("?")) " " (p.rate.as_deref().unwrap_or("rate ?"))
                    }
                }
            }
            @if let Some(l) = d.pci().and_then(|p| p.link.as_ref()) { br; span.muted { (link_text(l, matches!(d, Dev::Gpu(_)))) } }
            @for f in &mine {
                @let (class, word) = severity_word(&f.severity);
                div.finding title=(f.message) { span class={"badge " (class)} { (word) } " " (f.id) }
            }
        }
    }
}

/// NV# between GPU pairs from the topo matrix; pairs below the most common count are the
/// ones that lost links.
fn nvlink_table(t: &Topo) -> Markup {
    let gpus: Vec<(usize, &str)> = t.labels.iter().enumerate().filter(|(_, l)| l.starts_with("GPU")).map(|(i, l)| (i, l.as_str())).collect();
    let nv = |a: usize, b: usize| -> Option<u32> { t.matrix.get(a)?.get(b)?.strip_prefix("NV")?.parse().ok() };
    let mut counts: BTreeMap<u32, usize> = BTreeMap::new();
    for &(a, _) in &gpus {
        for &(b, _) in &gpus {
            if let Some(c) = nv(a, b).filter(|_| a != b) {
                *counts.entry(c).or_default() += 1;
            }
        }
    }
    let Some(usual) = counts.iter().max_by_key(|(c, n)| (**n, **c)).map(|(c, _)| *c) else {
        return html! {};
    };
    html! {
        h3 { "NVLinks per GPU pair (NV#: links between the two)" }
        table.nvlink {
            thead { tr { th {} @for (_, l) in &gpus { th { (l) } } } }
            tbody {
                @for &(a, la) in &gpus {
                    tr { th { (la) }
                        @for &(b, _) in &gpus {
                            @match (a == b, nv(a, b)) {
                                (true, _) => td.num { "X" },
                                (false, Some(c)) if c < usual => td.num.warn title={"fewer than the usual NV" (usual)} { b { "NV" (c) } },
                                (false, Some(c)) => td.num { "NV" (c) },
                                (false, None) => td.num { (t.matrix.get(a).and_then(|r| r.get(b)).map(String::as_str).unwrap_or("?")) },
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_name_devices_as_words() {
        assert!(names("NIC3 (mlx5_3) 0000:58:00.0", "mlx5_3"));
        assert!(names("mlx5_6/1", "mlx5_6"));
        assert!(!names("mlx5_10/1", "mlx5_1"));
        assert!(names("NIC3 (mlx5_3) 0000:58:00.0", "0000:58:00.0"));
    }
}
