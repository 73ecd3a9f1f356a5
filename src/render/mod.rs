//! Rendering, the last step: the JSON envelope shared by every command, and text helpers.
//! Renderers return strings; only the CLI layer writes them out.

pub mod check;
pub mod gdr;
pub mod gids;
pub mod html;
pub mod links;
pub mod nccl_env;
pub mod nccl_log;
pub mod nccl_log_flight;
pub mod qos;
pub mod remedy;
pub mod ring;
pub mod text;
pub mod topo;

use serde::Serialize;

use crate::finding::Finding;
use crate::host::{Host, Source};

/// A Prometheus label value in the text exposition format: backslash, double quote and
/// newline escaped, as the format's spec requires.
pub(crate) fn prom_label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Prometheus metric families in the text exposition format: each family's `# HELP` and
/// `# TYPE` once, above its samples, families sorted by name. The first help given for a
/// name is kept.
#[derive(Default)]
pub(crate) struct PromFamilies(std::collections::BTreeMap<String, (String, &'static str, Vec<String>)>);

impl PromFamilies {
    /// One sample line (`name{labels} value`) of the family `name`.
    pub fn add(&mut self, name: &str, help: &str, kind: &'static str, line: String) {
        self.0
            .entry(name.to_string())
            .or_insert_with(|| (help.to_string(), kind, Vec::new()))
            .2
            .push(line);
    }

    pub fn text(self) -> String {
        let mut out = String::new();
        for (name, (help, kind, lines)) in self.0 {
            out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
            for l in lines {
                out.push_str(&l);
                out.push('\n');
            }
        }
        out
    }
}

/// The envelope's version lives below the judgement layer (`sweep` reads it too).
pub use crate::finding::SCHEMA_VERSION;

#[derive(Debug, Serialize)]
pub struct HostInfo {
    pub hostname: Option<String>,
    pub kernel: Option<String>,
    pub captured_at: Option<String>,
    /// `live`, or the snapshot path given to `--root`.
    pub source: String,
}

impl HostInfo {
    pub fn of(host: &Host) -> HostInfo {
        let m = host.meta();
        HostInfo {
            hostname: m.hostname.clone(),
            kernel: m.kernel.clone(),
            captured_at: m.captured_at.clone(),
            source: match host.source() {
                Source::Live => "live".to_string(),
                Source::Snapshot(p) => p.display().to_string(),
            },
        }
    }
}

/// The one JSON envelope: `{schema, schema_version, tool_version, host, data, findings}`.
#[derive(Debug, Serialize)]
pub struct Envelope<'a, T: Serialize> {
    pub schema: String,
    pub schema_version: u32,
    pub tool_version: &'static str,
    pub host: HostInfo,
    pub data: &'a T,
    pub findings: &'a [Finding],
}

impl<'a, T: Serialize> Envelope<'a, T> {
    /// `command` is the subcommand name; the schema becomes `fabprobe.<command>`.
    pub fn new(command: &str, host: HostInfo, data: &'a T, findings: &'a [Finding]) -> Self {
        Envelope {
            schema: format!("fabprobe.{command}"),
            schema_version: SCHEMA_VERSION,
            tool_version: env!("CARGO_PKG_VERSION"),
            host,
            data,
            findings,
        }
    }

    /// The envelope on one line (check's reports are JSON lines for `sweep`).
    pub fn to_json_line(&self) -> String {
        let mut s = serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
        s.push('\n');
        s
    }

    pub fn to_json(&self) -> String {
        // Serializing plain data structs cannot fail (no maps with non-string keys).
        let mut s = serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
        s.push('\n');
        s
    }
}

/// `fabprobe_<cmd>_name_moved{device,pci_bus_id,was_to_be} 1` for each device name ib_core
/// moved past a NIC that did not register; nothing when none did. The other series keep the
/// name as their `device` label (labels stay what the kernel calls the device, so a
/// dashboard's series do not split); this series says that name is now another NIC.
pub(crate) fn moved_prom(cmd: &str, labels: &str, moved: &[crate::probe::topo::MovedName]) -> String {
    if moved.is_empty() {
        return String::new();
    }
    let mut s = format!(
        "# HELP fabprobe_{cmd}_name_moved RDMA device names ib_core moved past a NIC that did not register: the series labelled device=NAME are the NIC at pci_bus_id, not the one the name was to mean.\n# TYPE fabprobe_{cmd}_name_moved gauge\n"
    );
    for m in moved {
        s.push_str(&format!(
            "fabprobe_{cmd}_name_moved{{{labels}device=\"{}\",pci_bus_id=\"{}\",was_to_be=\"{}\"}} 1\n",
            prom_label(&m.name),
            prom_label(&m.pci_bus_id),
            prom_label(&m.was_to_be)
        ));
    }
    s
}

/// `fabprobe_<cmd>_devices{kind}`: how many devices of each kind a command saw, so an alert
/// can tell "nothing wrong" from "nothing there" (a driver that did not load reads 0, never
/// a pass). `labels` goes before `kind` (`policy="p",`); an unknown count (the listing
/// could not be read) is left out rather than written as 0.
pub(crate) fn devices_prom(cmd: &str, labels: &str, counts: &[(&str, Option<usize>)]) -> String {
    let mut s = format!(
        "# HELP fabprobe_{cmd}_devices Devices fabprobe {cmd} saw, by kind (0: none showed up).\n# TYPE fabprobe_{cmd}_devices gauge\n"
    );
    for (kind, n) in counts {
        if let Some(n) = n {
            s.push_str(&format!(
                "fabprobe_{cmd}_devices{{{labels}kind=\"{kind}\"}} {n}\n"
            ));
        }
    }
    s
}
