//! `nccl-env` output: what NCCL would choose, each with its rule, then where every value
//! came from, then the findings.

use crate::finding::Finding;
use crate::nccl::conf::{Origin, Setting};
use crate::probe::nccl_env::{Gdr, GdrPair, Ib, NcclEnvReport, Sockets};
use crate::render::gids::{column_blocks_fit, columns, columns_fit};
use crate::render::text;

fn row(cells: &[&str]) -> Vec<String> {
    cells.iter().map(|s| s.to_string()).collect()
}

/// The IB/RoCE port table within `width`: whole when it fits; else (a terminal narrower
/// than the GID rule's prose) each used port's GID rule on lines under the table, and the
/// rest in blocks of whole columns, each led by PORT, so that no GID breaks.
fn ports_fit(rows: &[Vec<String>], ports: &[crate::probe::nccl_env::IbPort], width: Option<usize>) -> String {
    let whole = columns_fit(rows, None);
    let Some(w) = width.filter(|w| whole.lines().any(|l| l.chars().count() > *w)) else {
        return whole;
    };
    let short: Vec<Vec<String>> = rows.iter().map(|r| r[..r.len() - 1].to_vec()).collect();
    let mut out = column_blocks_fit(&short, Some(w));
    for p in ports.iter().filter(|p| p.used) {
        let lead = format!("  {}/{} GID rule: ", p.device, p.port);
        out.push_str(&text::wrap_to(&lead, &p.gid_rule, 4, Some(w)));
    }
    out
}

/// The verdict and what NCCL would do with these settings, moved names marked.
pub(crate) fn table(r: &NcclEnvReport, findings: &[Finding]) -> String {
    text::moved_view(&r.names_moved, || table_body(r, findings))
}

fn table_body(r: &NcclEnvReport, findings: &[Finding]) -> String {
    let mut out = String::new();
    out.push_str("Sockets (bootstrap, NET/Socket, IB out-of-band):\n");
    out.push_str(&sockets_section(&r.sockets));
    out.push_str(&ib_section(&r.ib));
    out.push_str(&gdr_section(&r.gdr));
    out.push_str("\nNet plugin: ");
    out.push_str(&r.net_plugin.rule);
    match &r.net_plugin.found {
        Some(p) => out.push_str(&format!("; found {p}\n")),
        None if r.net_plugin.tries.is_empty() => out.push('\n'),
        None => out.push_str("; not on the library path: internal IB/Socket\n"),
    }
    out.push_str(&format!(
        "Topology file: {} ({}{})\n",
        r.topo_file.path,
        if r.topo_file.from_env {
            "NCCL_TOPO_FILE"
        } else {
            "default"
        },
        if r.topo_file.exists {
            ", present"
        } else {
            ", absent"
        }
    ));
    out.push_str(&format!(
        "\nJob environment: {}\nRules applied: {}\n",
        r.env_source,
        r.nccl_version.describe()
    ));
    out.push_str("\nConfiguration files (read in this order; the environment wins):\n");
    for c in &r.conf_files {
        out.push_str(&format!("  {:<16} {} ({}", c.role, c.path, c.state));
        if c.state == "read" {
            out.push_str(&format!(", {} values", c.values));
        }
        out.push_str(")\n");
    }
    out.push_str("\nNCCL_* in effect:\n");
    out.push_str(&settings_section(&r.settings));
    text::verdict_first("nccl-env", findings, out)
}

/// The socket interfaces NCCL would use, the bootstrap's first.
fn sockets_section(so: &Sockets) -> String {
    if let Some(u) = &so.unknown {
        return format!("  unknown: {u}\n");
    }
    if so.interfaces.is_empty() && so.bootstrap.is_none() {
        return "  none: no running interface matches\n".into();
    }
    let mut rows = vec![row(&["  USE", "INTERFACE", "ADDRESS", "RULE"])];
    // The bootstrap is the first socket interface unless NCCL_COMM_ID moved it.
    let shared = so.bootstrap.as_ref() == so.interfaces.first();
    match &so.bootstrap {
        Some(b) if !shared => rows.push(row(&["  bootstrap", &b.name, &b.addr, &b.rule])),
        None => rows.push(row(&[
            "  bootstrap",
            "none",
            "-",
            "NCCL_COMM_ID is on no local subnet",
        ])),
        _ => {}
    }
    for (i, s) in so.interfaces.iter().enumerate() {
        let use_ = if i == 0 && shared {
            "  bootstrap"
        } else {
            "  socket"
        };
        rows.push(row(&[use_, &s.name, &s.addr, &s.rule]));
    }
    columns(&rows)
}

/// The IB/RoCE ports, whether NCCL uses each, and the GID index it would pick.
fn ib_section(ib: &Ib) -> String {
    let mut out = String::from("\nIB/RoCE ports (NCCL_IB_HCA");
    out.push_str(&match &ib.hca {
        Some(h) => format!("={h}"),
        None => " unset".into(),
    });
    out.push_str(if ib.disabled {
        ", NCCL_IB_DISABLE=1):\n"
    } else {
        "):\n"
    });
    if let Some(m) = &ib.message {
        out.push_str(&format!("  {m}\n"));
        return out;
    }
    let mut rows = vec![row(&[
        "  PORT", "LINK", "STATE", "USED", "RULE", "GID", "GID RULE",
    ])];
    for p in &ib.ports {
        let gid = match (p.gid_index, &p.gid) {
            (Some(i), Some(g)) => format!("{i} {g}"),
            (Some(i), None) => format!("{i} (empty)"),
            _ => "-".into(),
        };
        rows.push(vec![
            format!("  {}/{}", p.device, p.port),
            p.link_layer.clone().unwrap_or_else(|| "?".into()),
            p.state.clone().unwrap_or_else(|| "?".into()),
            if p.used { "yes" } else { "no" }.into(),
            p.rule.clone(),
            if p.used { gid } else { "-".into() },
            if p.used { p.gid_rule.clone() } else { String::new() },
        ]);
    }
    out.push_str(&ports_fit(&rows, &ib.ports, text::width()));
    out
}

/// GPUDirect RDMA per GPU: the nearest used HCAs (the ones NCCL pairs it with), and how
/// many more are farther; JSON has every pair.
fn gdr_section(gdr: &Gdr) -> String {
    let mut out = format!(
        "\nGPUDirect RDMA (level {}: {}; PATH is NCCL's path type, as `fabprobe topo --nccl`):\n",
        gdr.level, gdr.level_rule
    );
    if gdr.pairs.is_empty() {
        out.push_str("  no GPU with a used HCA\n");
    } else {
        let mut rows = vec![row(&[
            "  GPU",
            "BUS ID",
            "NEAREST HCA",
            "PATH",
            "GDR",
            "FARTHER HCAS",
        ])];
        let mut gpus: Vec<&str> = gdr.pairs.iter().map(|p| p.gpu.as_str()).collect();
        gpus.dedup();
        for g in gpus {
            let pairs: Vec<&GdrPair> = gdr.pairs.iter().filter(|p| p.gpu == g).collect();
            rows.push(gdr_gpu_row(g, &pairs));
        }
        out.push_str(&columns(&rows));
    }
    out.push_str(&format!("  kernel support: {}\n", gdr.kernel_support));
    out
}

/// One GPU's row from its pairs: the nearest HCAs by NCCL's path rank, the rest counted
/// by path.
fn gdr_gpu_row(g: &str, pairs: &[&GdrPair]) -> Vec<String> {
    let rank = |p: &str| crate::nccl::params::level_rank(p).unwrap_or(usize::MAX);
    let best = pairs.iter().map(|p| rank(&p.path)).min().unwrap_or(usize::MAX);
    let near: Vec<_> = pairs.iter().filter(|p| rank(&p.path) == best).collect();
    let far: Vec<String> = {
        let mut m: std::collections::BTreeMap<&str, (usize, &str)> = Default::default();
        for p in pairs.iter().filter(|p| rank(&p.path) != best) {
            let e = m.entry(p.path.as_str()).or_insert((0, p.verdict.as_str()));
            e.0 += 1;
        }
        m.iter()
            .map(|(path, (n, verdict))| format!("{n} {path} (GDR {verdict})"))
            .collect()
    };
    vec![
        format!("  {g}"),
        near[0].gpu_pci_bus_id.clone(),
        near.iter().map(|p| p.nic.as_str()).collect::<Vec<_>>().join(","),
        near[0].path.clone(),
        near[0].verdict.clone(),
        if far.is_empty() {
            "-".into()
        } else {
            far.join(", ")
        },
    ]
}

/// Every NCCL_* in effect, where it came from and the values it shadows.
fn settings_section(settings: &[Setting]) -> String {
    if settings.is_empty() {
        return "  none (NCCL's defaults)\n".into();
    }
    let mut rows = vec![row(&["  NAME", "VALUE", "FROM", "SHADOWS"])];
    for s in settings {
        let from = match &s.origin {
            Origin::Environment => "environment".to_string(),
            Origin::File(p) => format!("{p}:{}", s.line.unwrap_or(0)),
        };
        let sh: Vec<String> = s
            .shadowed
            .iter()
            .map(|x| match &x.origin {
                Origin::Environment => format!("{} (environment)", x.value),
                Origin::File(p) => format!("{} ({p}:{})", x.value, x.line.unwrap_or(0)),
            })
            .collect();
        rows.push(vec![
            format!("  {}", s.name),
            s.value.clone(),
            from,
            sh.join(", "),
        ]);
    }
    columns(&rows)
}
