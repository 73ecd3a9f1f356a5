//! NCCL topology XML (`NCCL_TOPO_FILE`, `NCCL_TOPO_DUMP_FILE`; NCCL `src/graph/xml.cc`):
//! the typed tree, read from a file (what NCCL's loader accepts) and written back.
//!
//! Grammar: `system(version="1") > cpu > (pci | nic)`, `pci > (pci | gpu | nic | pcilink)`,
//! `gpu > (nvlink | c2c)`, `nic > net`. Unknown elements are skipped, as NCCL does.

use std::path::{Path, PathBuf};

use quick_xml::events::{BytesStart, Event};

/// `NCCL_TOPO_XML_VERSION`.
pub(crate) const VERSION: &str = "1";

#[derive(Clone, Debug, Default, PartialEq)]
pub struct NcclSystem {
    pub cpus: Vec<NcclCpu>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct NcclCpu {
    /// `numaid`; -1 when unknown.
    pub numaid: i32,
    /// `affinity`: cpumap hex words.
    pub affinity: Option<String>,
    pub arch: Option<String>,
    pub vendor: Option<String>,
    pub familyid: Option<u32>,
    pub modelid: Option<u32>,
    pub pcis: Vec<NcclPci>,
    /// `<nic>` directly under the CPU (a NIC NCCL could not place in the PCI tree).
    pub nets: Vec<NcclNet>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct NcclPci {
    /// Lower-case `DDDD:BB:DD.F`.
    pub busid: String,
    /// Verbatim (`0x060400`); NCCL matches it by prefix.
    pub class: Option<String>,
    pub vendor: Option<String>,
    pub device: Option<String>,
    pub subsystem_vendor: Option<String>,
    pub subsystem_device: Option<String>,
    /// Verbatim sysfs string, e.g. `32.0 GT/s PCIe`.
    pub link_speed: Option<String>,
    pub link_width: Option<u32>,
    pub children: Vec<NcclPci>,
    pub gpu: Option<NcclGpu>,
    pub nets: Vec<NcclNet>,
}

impl NcclPci {
    fn hex(v: &Option<String>) -> Option<u32> {
        v.as_deref().and_then(crate::sysfs::pci::parse_hex_id)
    }
    pub(crate) fn class_num(&self) -> Option<u32> {
        Self::hex(&self.class)
    }
    /// A GPU: a `<gpu>` child, or a display/3D class (`0x03...`), as NCCL decides.
    pub(crate) fn is_gpu(&self) -> bool {
        self.gpu.is_some() || self.class.as_deref().is_some_and(|c| c.starts_with("0x03"))
    }
    /// A NIC: `<net>` children, or a network/InfiniBand class (`0x02...`).
    pub(crate) fn is_nic(&self) -> bool {
        !self.nets.is_empty() || self.class.as_deref().is_some_and(|c| c.starts_with("0x02"))
    }
    /// [`crate::nccl::topo::bcm_ident`] of this node, when all four ids are present.
    pub fn ident(&self) -> Option<u64> {
        Some(super::topo::bcm_ident(
            Self::hex(&self.vendor)?,
            Self::hex(&self.device)?,
            Self::hex(&self.subsystem_vendor)?,
            Self::hex(&self.subsystem_device)?,
        ))
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct NcclGpu {
    /// NVML index.
    pub dev: Option<u32>,
    /// Compute capability × 10 (`90` for H100).
    pub sm: Option<u32>,
    pub nvlinks: Vec<NcclNvlink>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct NcclNvlink {
    /// The far end's bus id (lower case).
    pub target: String,
    pub count: u32,
    /// `0x068000` NVSwitch, `0x03...` GPU, `0x068001` CPU.
    pub tclass: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct NcclNet {
    pub name: String,
    pub dev: Option<u32>,
    /// Mb/s.
    pub speed: Option<u64>,
    pub port: Option<u32>,
    /// `0x...` as NCCL prints it.
    pub guid: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum TopoXmlError {
    #[error("cannot read NCCL topology file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: line {line}: {msg}")]
    Bad { path: PathBuf, line: usize, msg: String },
}

/// One parsed element, before the grammar is applied.
#[derive(Debug)]
struct Elem {
    name: String,
    attrs: Vec<(String, String)>,
    children: Vec<Elem>,
    line: usize,
}

struct Ctx<'a> {
    path: &'a Path,
}

impl Ctx<'_> {
    fn err(&self, line: usize, msg: impl Into<String>) -> TopoXmlError {
        TopoXmlError::Bad {
            path: self.path.to_path_buf(),
            line,
            // Messages quote the file's names and values: printed escaped.
            msg: crate::text::printable(&msg.into(), 400),
        }
    }
    fn attr<'e>(&self, e: &'e Elem, key: &str) -> Option<&'e str> {
        e.attrs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
    fn required<'e>(&self, e: &'e Elem, key: &str) -> Result<&'e str, TopoXmlError> {
        self.attr(e, key)
            .ok_or_else(|| self.err(e.line, format!("<{}> has no attribute {key}", e.name)))
    }
    fn int<T: std::str::FromStr>(&self, e: &Elem, key: &str) -> Result<Option<T>, TopoXmlError> {
        match self.attr(e, key) {
            None => Ok(None),
            Some(v) => v.trim().parse().map(Some).map_err(|_| {
                self.err(
                    e.line,
                    format!("attribute {key}=\"{v}\" of <{}> is not an integer", e.name),
                )
            }),
        }
    }
    fn opt(&self, e: &Elem, key: &str) -> Option<String> {
        self.attr(e, key).map(str::to_string)
    }
    fn busid(&self, e: &Elem, key: &str) -> Result<String, TopoXmlError> {
        let v = self.required(e, key)?.to_ascii_lowercase();
        if !crate::sysfs::pci::is_bdf(&v) {
            return Err(self.err(
                e.line,
                format!(
                    "attribute {key}=\"{v}\" of <{}> is not a PCI bus id (DDDD:BB:DD.F)",
                    e.name
                ),
            ));
        }
        Ok(v)
    }
}

/// How deep elements may nest. NCCL's deepest real files are `system > cpu > pci` (a few
/// switch levels) `> gpu > nvlink`: about ten. The limit keeps every recursive walk of the
/// tree (here, in `probe::topo`, and when it is dropped) far from the stack's end.
pub(crate) const MAX_DEPTH: usize = 64;

/// Line numbers of byte offsets, from the line starts found once (not a rescan per event).
struct Lines(Vec<usize>);

impl Lines {
    fn new(text: &str) -> Lines {
        Lines(
            text.bytes()
                .enumerate()
                .filter(|(_, b)| *b == b'\n')
                .map(|(i, _)| i)
                .collect(),
        )
    }
    /// 1-based line of byte `pos`: one more than the newlines before it.
    fn of(&self, pos: usize) -> usize {
        self.0.partition_point(|&nl| nl < pos) + 1
    }
}

fn parse_tree(text: &str, path: &Path) -> Result<Elem, TopoXmlError> {
    let cx = Ctx { path };
    let lines = Lines::new(text);
    let too_deep = |name: &[u8], line: usize| {
        cx.err(
            line,
            format!(
                "<{}> is nested deeper than {MAX_DEPTH} elements; NCCL topology files are about ten deep",
                String::from_utf8_lossy(name)
            ),
        )
    };
    let mut reader = quick_xml::Reader::from_str(text);
    let mut stack: Vec<Elem> = Vec::new();
    let mut root: Option<Elem> = None;
    let start = |e: &BytesStart, line: usize| -> Result<Elem, TopoXmlError> {
        let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
        let mut attrs = Vec::new();
        for a in e.attributes() {
            let a = a.map_err(|err| cx.err(line, format!("bad attribute in <{name}>: {err}")))?;
            let k = String::from_utf8_lossy(a.key.as_ref()).into_owned();
            let v = a
                .unescape_value()
                .map_err(|err| cx.err(line, format!("bad value of attribute {k} in <{name}>: {err}")))?
                .into_owned();
            attrs.push((k, v));
        }
        Ok(Elem {
            name,
            attrs,
            children: Vec::new(),
            line,
        })
    };
    loop {
        let pos = reader.buffer_position() as usize;
        let ev = reader.read_event().map_err(|e| {
            cx.err(
                lines.of(reader.error_position() as usize),
                format!("not well-formed XML: {e}"),
            )
        })?;
        let line = lines.of(pos);
        match ev {
            Event::Start(e) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(too_deep(e.name().as_ref(), line));
                }
                stack.push(start(&e, line)?)
            }
            Event::Empty(e) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(too_deep(e.name().as_ref(), line));
                }
                let el = start(&e, line)?;
                match stack.last_mut() {
                    Some(parent) => parent.children.push(el),
                    None if root.is_none() => root = Some(el),
                    None => return Err(cx.err(line, "more than one top-level element")),
                }
            }
            Event::End(_) => {
                let Some(el) = stack.pop() else {
                    return Err(cx.err(line, "unexpected closing tag"));
                };
                match stack.last_mut() {
                    Some(parent) => parent.children.push(el),
                    None if root.is_none() => root = Some(el),
                    None => return Err(cx.err(line, "more than one top-level element")),
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if let Some(open) = stack.last() {
        return Err(cx.err(open.line, format!("<{}> is never closed", open.name)));
    }
    root.ok_or_else(|| cx.err(1, "no <system> element"))
}

/// Parse an NCCL topology file's text. `path` names the file in errors.
pub fn parse(text: &str, path: &Path) -> Result<NcclSystem, TopoXmlError> {
    let cx = Ctx { path };
    let root = parse_tree(text, path)?;
    if root.name != "system" {
        return Err(cx.err(
            root.line,
            format!("top element is <{}>, expected <system>", root.name),
        ));
    }
    let version = cx.required(&root, "version")?;
    if version.trim() != VERSION {
        return Err(cx.err(
            root.line,
            format!("attribute version=\"{version}\" of <system>: NCCL reads only version {VERSION}"),
        ));
    }
    let mut sys = NcclSystem::default();
    for c in root.children.iter().filter(|c| c.name == "cpu") {
        let numaid = cx
            .int::<i32>(c, "numaid")?
            .ok_or_else(|| cx.err(c.line, "<cpu> has no attribute numaid"))?;
        let mut cpu = NcclCpu {
            numaid,
            affinity: cx.opt(c, "affinity"),
            arch: cx.opt(c, "arch"),
            vendor: cx.opt(c, "vendor"),
            familyid: cx.int(c, "familyid")?,
            modelid: cx.int(c, "modelid")?,
            ..Default::default()
        };
        for k in &c.children {
            match k.name.as_str() {
                "pci" => cpu.pcis.push(parse_pci(&cx, k)?),
                "nic" => cpu.nets.extend(parse_nic(&cx, k)?),
                _ => {}
            }
        }
        sys.cpus.push(cpu);
    }
    Ok(sys)
}

fn parse_pci(cx: &Ctx, e: &Elem) -> Result<NcclPci, TopoXmlError> {
    let mut p = NcclPci {
        busid: cx.busid(e, "busid")?,
        class: cx.opt(e, "class"),
        vendor: cx.opt(e, "vendor"),
        device: cx.opt(e, "device"),
        subsystem_vendor: cx.opt(e, "subsystem_vendor"),
        subsystem_device: cx.opt(e, "subsystem_device"),
        link_speed: cx.opt(e, "link_speed"),
        link_width: cx.int(e, "link_width")?,
        ..Default::default()
    };
    for k in &e.children {
        match k.name.as_str() {
            "pci" => p.children.push(parse_pci(cx, k)?),
            "nic" => p.nets.extend(parse_nic(cx, k)?),
            "gpu" => {
                let mut g = NcclGpu {
                    dev: cx.int(k, "dev")?,
                    sm: cx.int(k, "sm")?,
                    nvlinks: Vec::new(),
                };
                for l in k.children.iter().filter(|l| l.name == "nvlink") {
                    g.nvlinks.push(NcclNvlink {
                        target: cx.busid(l, "target")?,
                        count: cx
                            .int(l, "count")?
                            .ok_or_else(|| cx.err(l.line, "<nvlink> has no attribute count"))?,
                        tclass: cx.opt(l, "tclass"),
                    });
                }
                p.gpu = Some(g);
            }
            _ => {}
        }
    }
    Ok(p)
}

fn parse_nic(cx: &Ctx, e: &Elem) -> Result<Vec<NcclNet>, TopoXmlError> {
    let mut out = Vec::new();
    for n in e.children.iter().filter(|n| n.name == "net") {
        out.push(NcclNet {
            name: cx.required(n, "name")?.to_string(),
            dev: cx.int(n, "dev")?,
            speed: cx.int(n, "speed")?,
            port: cx.int(n, "port")?,
            guid: cx.opt(n, "guid"),
        });
    }
    Ok(out)
}

/// Read and parse an NCCL topology file.
pub fn read_file(path: &Path) -> Result<NcclSystem, TopoXmlError> {
    let read_err = |source| TopoXmlError::Read {
        path: path.to_path_buf(),
        source,
    };
    // NCCL's own files are tens of KiB; a bigger one is refused, not read into memory.
    let bytes = crate::host::read_capped(path, crate::host::MAX_READ_BYTES).map_err(read_err)?;
    let text = String::from_utf8(bytes)
        .map_err(|e| read_err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
    parse(&text, path)
}

fn esc(s: &str) -> String {
    quick_xml::escape::escape(s).into_owned()
}

fn attr(out: &mut String, k: &str, v: Option<&str>) {
    if let Some(v) = v {
        out.push_str(&format!(" {k}=\"{}\"", esc(v)));
    }
}

/// Write the tree in NCCL's dump layout (two-space indent, attributes in NCCL's order).
pub fn write(sys: &NcclSystem) -> String {
    let mut o = format!("<system version=\"{VERSION}\">\n");
    for c in &sys.cpus {
        o.push_str("  <cpu");
        attr(&mut o, "numaid", Some(&c.numaid.to_string()));
        attr(&mut o, "affinity", c.affinity.as_deref());
        attr(&mut o, "arch", c.arch.as_deref());
        attr(&mut o, "vendor", c.vendor.as_deref());
        attr(&mut o, "familyid", c.familyid.map(|v| v.to_string()).as_deref());
        attr(&mut o, "modelid", c.modelid.map(|v| v.to_string()).as_deref());
        o.push_str(">\n");
        for p in &c.pcis {
            write_pci(&mut o, p, 2);
        }
        if !c.nets.is_empty() {
            write_nets(&mut o, &c.nets, 2);
        }
        o.push_str("  </cpu>\n");
    }
    o.push_str("</system>\n");
    o
}

fn write_nets(o: &mut String, nets: &[NcclNet], depth: usize) {
    let ind = "  ".repeat(depth);
    o.push_str(&format!("{ind}<nic>\n"));
    for n in nets {
        o.push_str(&format!("{ind}  <net"));
        attr(o, "name", Some(&n.name));
        attr(o, "dev", n.dev.map(|v| v.to_string()).as_deref());
        attr(o, "speed", n.speed.map(|v| v.to_string()).as_deref());
        attr(o, "port", n.port.map(|v| v.to_string()).as_deref());
        attr(o, "guid", n.guid.as_deref());
        o.push_str("/>\n");
    }
    o.push_str(&format!("{ind}</nic>\n"));
}

fn write_pci(o: &mut String, p: &NcclPci, depth: usize) {
    let ind = "  ".repeat(depth);
    o.push_str(&format!("{ind}<pci"));
    attr(o, "busid", Some(&p.busid));
    attr(o, "class", p.class.as_deref());
    attr(o, "vendor", p.vendor.as_deref());
    attr(o, "device", p.device.as_deref());
    attr(o, "subsystem_vendor", p.subsystem_vendor.as_deref());
    attr(o, "subsystem_device", p.subsystem_device.as_deref());
    attr(o, "link_speed", p.link_speed.as_deref());
    attr(o, "link_width", p.link_width.map(|v| v.to_string()).as_deref());
    if p.children.is_empty() && p.gpu.is_none() && p.nets.is_empty() {
        o.push_str("/>\n");
        return;
    }
    o.push_str(">\n");
    for c in &p.children {
        write_pci(o, c, depth + 1);
    }
    if let Some(g) = &p.gpu {
        o.push_str(&format!("{ind}  <gpu"));
        attr(o, "dev", g.dev.map(|v| v.to_string()).as_deref());
        attr(o, "sm", g.sm.map(|v| v.to_string()).as_deref());
        if g.nvlinks.is_empty() {
            o.push_str("/>\n");
        } else {
            o.push_str(">\n");
            for l in &g.nvlinks {
                o.push_str(&format!("{ind}    <nvlink"));
                attr(o, "target", Some(&l.target));
                attr(o, "count", Some(&l.count.to_string()));
                attr(o, "tclass", l.tclass.as_deref());
                o.push_str("/>\n");
            }
            o.push_str(&format!("{ind}  </gpu>\n"));
        }
    }
    if !p.nets.is_empty() {
        write_nets(o, &p.nets, depth + 1);
    }
    o.push_str(&format!("{ind}</pci>\n"));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<NcclSystem, TopoXmlError> {
        parse(text, Path::new("t.xml"))
    }

    #[test]
    fn reads_a_small_file_and_writes_it_back() {
        let text = r#"<system version="1">
  <!-- a comment -->
  <cpu numaid="0" affinity="0000ffff" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">
    <pci busid="0000:08:00.0" class="0x060400" vendor="0x1000" device="0xc030" subsystem_vendor="0x1000" subsystem_device="0x0072" link_speed="5.0 GT/s PCIe" link_width="16">
      <pci busid="0000:0F:00.0" class='0x030200' link_speed="32.0 GT/s PCIe" link_width="16">
        <gpu dev="0" sm="90" rank="0" gdr="1">
          <nvlink target="0000:1c:00.0" count="5" tclass="0x068000"/>
        </gpu>
      </pci>
      <pci busid="0000:0c:00.0" class="0x020000">
        <nic>
          <net name="mlx5_0" dev="0" speed="180000" port="1" latency="0.000000" guid="0x9a70500003ae6d94" maxconn="131072" gdr="1"/>
        </nic>
      </pci>
      <unknown_thing/>
    </pci>
  </cpu>
</system>
"#;
        let s = p(text).unwrap();
        assert_eq!(s.cpus.len(), 1);
        let sw = &s.cpus[0].pcis[0];
        assert_eq!(sw.children[0].busid, "0000:0f:00.0");
        assert!(sw.children[0].is_gpu());
        assert_eq!(sw.children[0].gpu.as_ref().unwrap().nvlinks[0].count, 5);
        assert_eq!(sw.children[1].nets[0].name, "mlx5_0");
        assert_eq!(sw.children[1].nets[0].speed, Some(180000));
        assert_eq!(sw.ident(), Some(0x1000_c030_1000_0072));
        let back = p(&write(&s)).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn errors_name_file_line_element_and_attribute() {
        let cases = [
            (
                "<system version=\"1\"><cpu></cpu></system>",
                "line 1: <cpu> has no attribute numaid",
            ),
            ("<system version=\"2\"></system>", "version=\"2\""),
            ("<topology/>", "top element is <topology>"),
            (
                "<system version=\"1\">\n<cpu numaid=\"x\"/></system>",
                "line 2: attribute numaid=\"x\" of <cpu> is not an integer",
            ),
            (
                "<system version=\"1\"><cpu numaid=\"0\">\n\n<pci busid=\"gpu0\"/></cpu></system>",
                "line 3: attribute busid=\"gpu0\" of <pci> is not a PCI bus id",
            ),
            (
                "<system version=\"1\"><cpu numaid=\"0\"><pci busid=\"0000:01:00.0\"><nic><net dev=\"0\"/></nic></pci></cpu></system>",
                "<net> has no attribute name",
            ),
            ("<system version=\"1\"><cpu numaid=\"0\">", "never closed"),
            (
                "<system version=\"1\"><cpu numaid=\"0\"></pci></system>",
                "not well-formed",
            ),
            ("", "no <system> element"),
        ];
        for (text, want) in cases {
            let e = p(text).unwrap_err().to_string();
            assert!(e.starts_with("t.xml: line "), "{e}");
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn nesting_is_bounded_and_the_error_names_line_and_element() {
        // 65 levels: one past the limit, refused at the element that crosses it.
        let mut t = String::from("<system version=\"1\">\n<cpu numaid=\"0\">\n");
        for _ in 0..63 {
            t.push_str("<pci busid=\"0000:01:00.0\">\n");
        }
        let e = p(&t).unwrap_err().to_string();
        assert_eq!(
            e,
            "t.xml: line 65: <pci> is nested deeper than 64 elements; NCCL topology files are about ten deep"
        );
        // Far deeper (what would exhaust the stack of a recursive walk) is the same error.
        let deep = "<pci busid=\"0000:01:00.0\">".repeat(200_000);
        let e = p(&format!("<system version=\"1\"><cpu numaid=\"0\">{deep}")).unwrap_err();
        assert!(e.to_string().contains("nested deeper than 64"), "{e}");
        // 64 levels are fine.
        let mut ok = String::from("<system version=\"1\"><cpu numaid=\"0\">");
        ok.push_str(&"<pci busid=\"0000:01:00.0\">".repeat(62));
        ok.push_str(&"</pci>".repeat(62));
        ok.push_str("</cpu></system>");
        let s = p(&ok).unwrap();
        assert_eq!(s.cpus[0].pcis.len(), 1);
    }

    #[test]
    fn line_numbers_of_a_large_file() {
        // 200,000 lines: a rescan from the start for every event would read ~10^11 bytes.
        let mut t =
            String::from("<system version=\"1\">\n<cpu numaid=\"0\">\n<pci busid=\"0000:01:00.0\">\n");
        for _ in 0..200_000 {
            t.push_str("<unknown_thing a=\"b\"/>\n");
        }
        t.push_str("<nic><net dev=\"0\"/></nic>\n</pci></cpu></system>\n");
        let e = p(&t).unwrap_err().to_string();
        assert_eq!(e, "t.xml: line 200004: <net> has no attribute name");
        let lines = Lines::new("a\nbc\n\nd");
        let got: Vec<usize> = (0..9).map(|i| lines.of(i)).collect();
        assert_eq!(got, vec![1, 1, 2, 2, 2, 3, 4, 4, 4]);
    }
}
