//! `gids` output: the table, `show_gids`-compatible text, Prometheus exposition.

use crate::finding::Finding;
use crate::probe::gids::{GidPort, GidsReport};
use crate::render::text;

/// Left-aligned columns separated by two spaces; trailing spaces trimmed; within the
/// terminal's width ([`crate::render::text::width`]) when one is set.
pub fn columns(rows: &[Vec<String>]) -> String {
    columns_fit(rows, crate::render::text::width())
}

/// [`columns`] within `width` characters: a table wider than that wraps its widest cells
/// (comfy-table's dynamic arrangement); without a width, or when it fits, the plain layout.
pub fn columns_fit(rows: &[Vec<String>], width: Option<usize>) -> String {
    let plain = columns_plain(rows);
    match width {
        Some(w) if plain.lines().any(|l| l.chars().count() > w) => wrapped(rows, w),
        _ => plain,
    }
}

fn wrapped(rows: &[Vec<String>], width: usize) -> String {
    use comfy_table::{ContentArrangement, Table, presets::NOTHING};
    let mut t = Table::new();
    t.load_style(NOTHING)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_width(width.min(u16::MAX as usize) as u16);
    for r in rows {
        t.add_row(r.clone());
    }
    let n = t.column_count();
    for (i, c) in t.column_iter_mut().enumerate() {
        c.set_padding((0, if i + 1 < n { 2 } else { 0 }));
    }
    let mut out: String = t.lines().map(|l| l.trim_end().to_string() + "\n").collect();
    if out.is_empty() {
        out = columns_plain(rows);
    }
    out
}

fn columns_plain(rows: &[Vec<String>]) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut w = vec![0usize; n];
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            line.push_str(c);
            if i + 1 < r.len() {
                line.push_str(&" ".repeat(w[i] - c.chars().count() + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

pub fn table(r: &GidsReport, findings: &[Finding]) -> String {
    if let Some(m) = &r.rdma.message {
        return format!("{m}\n");
    }
    let mut rows = vec![
        [
            "DEVICE",
            "PORT",
            "INDEX",
            "GID",
            "IPv4",
            "VER",
            "NETDEV",
            "LINK",
            "PICKED BY",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>(),
    ];
    for p in &r.ports {
        for e in &p.entries {
            let mut pick = Vec::new();
            if e.nccl_pick {
                pick.push("nccl");
            }
            if e.perftest_pick {
                pick.push("perftest");
            }
            rows.push(vec![
                p.device.clone(),
                p.port.to_string(),
                e.index.to_string(),
                e.gid.full(),
                e.ipv4.clone().unwrap_or_default(),
                e.roce_version.clone().unwrap_or_else(|| "?".into()),
                e.netdev.clone().unwrap_or_else(|| "-".into()),
                p.link_layer.clone().unwrap_or_else(|| "?".into()),
                pick.join(","),
            ]);
        }
    }
    let mut out = columns(&rows);
    out.push('\n');
    for p in &r.ports {
        out.push_str(&choice_line(p));
    }
    text::verdict_first("gids", findings, out)
}

fn choice_line(p: &GidPort) -> String {
    let idx = |i: Option<u32>| i.map(|i| i.to_string()).unwrap_or_else(|| "none".into());
    format!(
        "{}/{} ({}, {}): NCCL index {}: {}; perftest index {}: {}\n",
        p.device,
        p.port,
        p.link_layer.as_deref().unwrap_or("?"),
        p.state.as_deref().unwrap_or("?"),
        idx(p.nccl.index),
        p.nccl.reason,
        idx(p.perftest.index),
        p.perftest.reason
    )
}

/// The `show_gids` script's output, byte for byte: its header, tab layout, `ls` lexical
/// order of devices, ports and indices, IPv4 detection by a leading `0000` group, the
/// `grep -o "[Vv].*"` version, empty fields for failed reads, and the footer.
pub fn show_gids(r: &GidsReport) -> String {
    let mut out = String::new();
    out.push_str("DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4  \t\tVER\tDEV\n");
    out.push_str("---\t----\t-----\t---\t\t\t\t\t------------  \t---\t---\n");
    let mut ports: Vec<&GidPort> = r.ports.iter().collect();
    ports.sort_by(|a, b| {
        (a.device.as_bytes(), a.port.to_string()).cmp(&(b.device.as_bytes(), b.port.to_string()))
    });
    let mut n = 0;
    for p in ports {
        let mut entries: Vec<_> = p.entries.iter().collect();
        entries.sort_by_key(|e| e.index.to_string());
        for e in entries {
            let gid = e.gid.full();
            let ver = e
                .gid_type
                .as_deref()
                .and_then(|t| t.find(['v', 'V']).map(|i| t[i..].to_string()))
                .unwrap_or_default();
            let ndev = e.netdev.clone().unwrap_or_default();
            if gid.starts_with("0000:") {
                let b = e.gid.0;
                let ip = format!("{}.{}.{}.{}", b[12], b[13], b[14], b[15]);
                out.push_str(&format!(
                    "{}\t{}\t{}\t{gid}\t{ip}  \t{ver}\t{ndev}\n",
                    p.device, p.port, e.index
                ));
            } else {
                out.push_str(&format!(
                    "{}\t{}\t{}\t{gid}\t\t\t{ver}\t{ndev}\n",
                    p.device, p.port, e.index
                ));
            }
            n += 1;
        }
    }
    out.push_str(&format!("n_gids_found={n}\n"));
    out
}

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Prometheus text: one info series per GID and the index NCCL would pick per port.
pub fn prom(r: &GidsReport) -> String {
    let mut out = String::new();
    out.push_str("# HELP fabprobe_infiniband_gid_info A populated GID table entry.\n");
    out.push_str("# TYPE fabprobe_infiniband_gid_info gauge\n");
    for p in &r.ports {
        for e in &p.entries {
            out.push_str(&format!(
                "fabprobe_infiniband_gid_info{{device=\"{}\",port=\"{}\",index=\"{}\",gid=\"{}\",ipv4=\"{}\",version=\"{}\",netdev=\"{}\"}} 1\n",
                esc(&p.device),
                p.port,
                e.index,
                e.gid.full(),
                e.ipv4.as_deref().unwrap_or(""),
                e.roce_version.as_deref().unwrap_or(""),
                esc(e.netdev.as_deref().unwrap_or(""))
            ));
        }
    }
    out.push_str(
        "# HELP fabprobe_infiniband_nccl_gid_index The GID index NCCL would use on the port (-1: none).\n",
    );
    out.push_str("# TYPE fabprobe_infiniband_nccl_gid_index gauge\n");
    for p in &r.ports {
        out.push_str(&format!(
            "fabprobe_infiniband_nccl_gid_index{{device=\"{}\",port=\"{}\"}} {}\n",
            esc(&p.device),
            p.port,
            p.nccl.index.map(i64::from).unwrap_or(-1)
        ));
    }
    out
}
