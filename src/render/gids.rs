//! `gids` output: the table, `show_gids`-compatible text, Prometheus exposition.

use crate::finding::Finding;
use crate::probe::gids::{GidPort, GidsReport};
use crate::render::text;

/// Left-aligned columns separated by two spaces; trailing spaces trimmed; within the
/// terminal's width ([`crate::render::text::width`]) when one is set.
pub(crate) fn columns(rows: &[Vec<String>]) -> String {
    columns_fit(rows, crate::render::text::width())
}

/// [`columns`] within `width` characters: a table wider than that wraps its widest cells
/// (comfy-table's dynamic arrangement); without a width, or when it fits, the plain layout.
pub(crate) fn columns_fit(rows: &[Vec<String>], width: Option<usize>) -> String {
    let plain = columns_plain(rows);
    match width {
        Some(w) if plain.lines().any(|l| l.chars().count() > w) => wrapped(rows, w),
        _ => plain,
    }
}

/// [`columns`] for a table whose cells must stay whole (names, counters): too wide for the
/// terminal, it prints in blocks of columns, each led by the first column, every cell
/// unbroken; when even the first column and one more do not fit, as [`columns`] wraps.
pub(crate) fn column_blocks(rows: &[Vec<String>]) -> String {
    column_blocks_fit(rows, crate::render::text::width())
}

pub(crate) fn column_blocks_fit(rows: &[Vec<String>], width: Option<usize>) -> String {
    column_blocks_led(rows, width, 1)
}

/// [`column_blocks_fit`] with the first `lead` columns leading every block (what names a
/// row when one column does not: a port and a GID index).
pub(crate) fn column_blocks_led(rows: &[Vec<String>], width: Option<usize>, lead: usize) -> String {
    let plain = columns_plain(rows);
    let Some(width) = width.filter(|&w| plain.lines().any(|l| l.chars().count() > w)) else {
        return plain;
    };
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let w: Vec<usize> = (0..n)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut blocks: Vec<Vec<usize>> = Vec::new();
    let lead = lead.clamp(1, n.max(1));
    let mut i = lead;
    while i < n {
        let mut cols: Vec<usize> = (0..lead).collect();
        let mut used = w[..lead].iter().sum::<usize>() + 2 * (lead - 1);
        while i < n && used + 2 + w[i] <= width {
            used += 2 + w[i];
            cols.push(i);
            i += 1;
        }
        if cols.len() == lead {
            return wrapped(rows, width);
        }
        blocks.push(cols);
    }
    let parts: Vec<String> = blocks
        .iter()
        .map(|cols| {
            let sub: Vec<Vec<String>> = rows
                .iter()
                .map(|r| {
                    cols.iter()
                        .map(|&c| r.get(c).cloned().unwrap_or_default())
                        .collect()
                })
                .collect();
            columns_plain(&sub)
        })
        .collect();
    parts.join("\n")
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

/// The verdict, the GID tables and NCCL's and perftest's picks, moved names marked.
pub(crate) fn table(r: &GidsReport, findings: &[Finding]) -> String {
    text::moved_view(&r.rdma.names_moved, || table_body(r, findings))
}

fn table_body(r: &GidsReport, findings: &[Finding]) -> String {
    if let Some(m) = &r.rdma.message {
        // The verdict first, as on every table: NOT EVALUATED when nothing showed up; what
        // else was said (RDMA NICs whose module is not loaded) is listed under it.
        if findings.iter().any(|f| !f.id.ends_with(".nothing_to_judge")) {
            return text::verdict_first("gids", findings, format!("{m}\n"));
        }
        return format!("{}{m}\n", crate::render::text::verdict_line("gids", findings));
    }
    let mut out = table_rows(r, text::width());
    out.push('\n');
    for p in &r.ports {
        out.push_str(&choice_line(p));
    }
    text::verdict_first("gids", findings, out)
}

/// The GID table within `width`: every column while it fits; on a narrower terminal the
/// compact form, one GID a line: device/port in one column, an IPv4-mapped GID written
/// `::ffff:a.b.c.d` (the same 16 bytes; the IPv4 column then says nothing new), and the
/// port's link layer and picks left to the lines under the table, which state them.
fn table_rows(r: &GidsReport, width: Option<usize>) -> String {
    let full = columns_plain(&full_rows(r));
    match width {
        // Narrower still, in blocks led by port and index: a GID never breaks.
        Some(w) if full.lines().any(|l| l.chars().count() > w) => {
            column_blocks_led(&compact_rows(r), Some(w), 2)
        }
        _ => full,
    }
}

fn header(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

fn full_rows(r: &GidsReport) -> Vec<Vec<String>> {
    let mut rows = vec![header(&[
        "DEVICE",
        "PORT",
        "INDEX",
        "GID",
        "IPv4",
        "VER",
        "NETDEV",
        "LINK",
        "PICKED BY",
    ])];
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
    rows
}

fn compact_rows(r: &GidsReport) -> Vec<Vec<String>> {
    let mut rows = vec![header(&["DEV/PORT", "IDX", "GID", "VER", "NETDEV"])];
    for p in &r.ports {
        for e in &p.entries {
            rows.push(vec![
                format!("{}/{}", p.device, p.port),
                e.index.to_string(),
                compact_gid(&e.gid),
                e.roce_version.clone().unwrap_or_else(|| "?".into()),
                e.netdev.clone().unwrap_or_else(|| "-".into()),
            ]);
        }
    }
    rows
}

/// An IPv4-mapped GID as `::ffff:10.20.1.17` (RFC 4291's notation of the same bytes); any
/// other GID in the kernel's full form, as `show_gids` and `ibv_devinfo -v` print it.
fn compact_gid(g: &crate::sysfs::infiniband::Gid) -> String {
    let b = g.0;
    if b[..10] == [0; 10] && b[10..12] == [0xff, 0xff] {
        format!("::ffff:{}.{}.{}.{}", b[12], b[13], b[14], b[15])
    } else {
        g.full()
    }
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
pub(crate) fn show_gids(r: &GidsReport) -> String {
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

/// Prometheus text: one info series per GID and the index NCCL would pick per port.
pub(crate) fn prom(r: &GidsReport) -> String {
    let mut out = String::new();
    out.push_str("# HELP fabprobe_infiniband_gid_info A populated GID table entry.\n");
    out.push_str("# TYPE fabprobe_infiniband_gid_info gauge\n");
    for p in &r.ports {
        for e in &p.entries {
            out.push_str(&format!(
                "fabprobe_infiniband_gid_info{{device=\"{}\",port=\"{}\",index=\"{}\",gid=\"{}\",ipv4=\"{}\",version=\"{}\",netdev=\"{}\"}} 1\n",
                super::prom_label(&p.device),
                p.port,
                e.index,
                e.gid.full(),
                e.ipv4.as_deref().unwrap_or(""),
                e.roce_version.as_deref().unwrap_or(""),
                super::prom_label(e.netdev.as_deref().unwrap_or(""))
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
            super::prom_label(&p.device),
            p.port,
            p.nccl.index.map(i64::from).unwrap_or(-1)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    /// Too wide for the width, a table prints in blocks of whole columns, each led by the
    /// first; it fits, or has no width, and it is the plain table.
    #[test]
    fn column_blocks_keep_every_cell_whole() {
        let rows: Vec<Vec<String>> = [
            ["  PRIO", "PFC(DCB)", "TSA", "RX_PAUSE_US", "RX_MARKED"],
            ["  6", "off", "vendor", "0", "5120"],
        ]
        .iter()
        .map(|r| r.iter().map(|c| c.to_string()).collect())
        .collect();
        let plain = column_blocks_fit(&rows, None);
        assert_eq!(
            plain,
            "  PRIO  PFC(DCB)  TSA     RX_PAUSE_US  RX_MARKED\n  6     off       vendor  0            5120\n"
        );
        assert_eq!(column_blocks_fit(&rows, Some(80)), plain);
        assert_eq!(
            column_blocks_fit(&rows, Some(30)),
            "  PRIO  PFC(DCB)  TSA\n  6     off       vendor\n\n  PRIO  RX_PAUSE_US  RX_MARKED\n  6     0            5120\n"
        );
        // Not even the first column and one more: wrapped as columns does.
        assert_eq!(column_blocks_fit(&rows, Some(10)), columns_fit(&rows, Some(10)));
        // Two columns lead every block when one does not name a row (port, GID index).
        assert_eq!(
            column_blocks_led(&rows, Some(34), 2),
            "  PRIO  PFC(DCB)  TSA\n  6     off       vendor\n\n  PRIO  PFC(DCB)  RX_PAUSE_US\n  6     off       0\n\n  PRIO  PFC(DCB)  RX_MARKED\n  6     off       5120\n"
        );
    }

    use super::*;

    fn report() -> GidsReport {
        let host =
            crate::host::Host::snapshot(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/h100-sxm-8gpu"))
                .unwrap();
        crate::probe::gids::probe(&host, &Default::default())
    }

    /// At 80 columns each GID stays on one line, whole; as wide as it likes, every column.
    #[test]
    fn readable_at_80_columns() {
        let r = report();
        let full = table_rows(&r, None);
        assert!(full.lines().any(|l| l.len() > 80), "{full}");
        assert!(full.starts_with("DEVICE  PORT  INDEX  GID"), "{full}");
        assert_eq!(table_rows(&r, Some(200)), full);
        let narrow = table_rows(&r, Some(80));
        assert_eq!(
            narrow.lines().count(),
            full.lines().count(),
            "a GID wrapped:\n{narrow}"
        );
        for l in narrow.lines() {
            assert!(l.chars().count() <= 80, "{l}");
        }
        assert!(narrow.starts_with("DEV/PORT"), "{narrow}");
        for gid in ["fe80:0000:0000:0000:946d:ae03:00a1:b207", "::ffff:10.20.1.17"] {
            assert!(
                narrow.lines().any(|l| l.split_whitespace().any(|w| w == gid)),
                "{gid}:\n{narrow}"
            );
        }
        // Nothing the compact form leaves out is lost: the lines under it name the picks.
        assert!(table(&r, &[]).contains("NCCL index"));
    }

    #[test]
    fn ipv4_mapped_gid_in_its_short_form_only() {
        let g = |s: &str| crate::sysfs::infiniband::parse_gid(s).unwrap();
        assert_eq!(
            compact_gid(&g("0000:0000:0000:0000:0000:ffff:0a14:0111")),
            "::ffff:10.20.1.17"
        );
        assert_eq!(
            compact_gid(&g("fe80:0000:0000:0000:946d:ae03:00a1:b207")),
            "fe80:0000:0000:0000:946d:ae03:00a1:b207"
        );
        // An IPv4-compatible (not mapped) GID is not an IPv4 address: full form.
        assert_eq!(
            compact_gid(&g("0000:0000:0000:0000:0000:0000:0a14:0111")),
            "0000:0000:0000:0000:0000:0000:0a14:0111"
        );
    }
}
