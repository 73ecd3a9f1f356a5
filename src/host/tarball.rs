//! Unpacking a `.tar.gz` snapshot that may have been made by anyone.
//!
//! A snapshot archive holds directories, regular files and relative symbolic links, and
//! little of each (a capture is a few thousand entries and a few MiB). Everything else is
//! refused with the entry's name: device files, FIFOs, hard links, GNU sparse files (a
//! few bytes that claim to be terabytes), absolute paths and `..`, symbolic links that
//! leave the snapshot, entries placed under a symbolic link, and archives that unpack to
//! more entries or bytes than any capture writes (a gzip bomb). Extension headers (long
//! names, pax) are read here with their own small cap, since the tar crate would otherwise
//! buffer them whole. The archive is read twice: first every check with nothing written,
//! then the writing, so a refusal costs only decompression (no disk, no memory beyond a
//! few buffers), and nothing is read past the point of refusal.

use std::ffi::OsStr;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use super::MAX_READ_BYTES;

/// How much one archive may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Tar headers, extension headers included.
    pub max_entries: u64,
    /// Entry data (files and extension headers) together.
    pub max_total_bytes: u64,
    /// One file: no bigger than a file fabprobe would read.
    pub max_file_bytes: u64,
    /// One extension header (a long name or a pax record set).
    pub max_ext_bytes: u64,
}

/// Large enough for a capture of a big node many times over; see the closing note of the
/// harden-io branch for the figures this was chosen from.
pub const LIMITS: Limits = Limits {
    max_entries: 200_000,
    max_total_bytes: 256 << 20,
    max_file_bytes: MAX_READ_BYTES,
    max_ext_bytes: 64 << 10,
};

/// Why an archive was refused, and which entry (when one is to blame).
#[derive(Debug, PartialEq, Eq)]
pub struct Refused {
    pub entry: Option<String>,
    pub msg: String,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.entry {
            Some(e) => write!(f, "entry \"{e}\": {}", self.msg),
            None => f.write_str(&self.msg),
        }
    }
}

/// What was unpacked.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Unpacked {
    pub entries: u64,
    pub bytes: u64,
}

fn archive_err(msg: impl Into<String>) -> Refused {
    Refused {
        entry: None,
        msg: msg.into(),
    }
}

/// An entry name as it may be printed: lossy UTF-8, control characters escaped, so a
/// hostile name cannot drive the terminal.
fn shown(bytes: &[u8]) -> String {
    crate::text::printable(&String::from_utf8_lossy(bytes), 200)
}

/// The tar reader's messages may quote header bytes: printed escaped.
fn unreadable(e: io::Error) -> Refused {
    archive_err(format!(
        "not a readable .tar.gz snapshot: {}",
        crate::text::printable(&e.to_string(), 300)
    ))
}

/// A relative path inside the snapshot: no root, no `..`; `.` components dropped.
fn clean_path(bytes: &[u8]) -> Result<PathBuf, String> {
    if bytes.contains(&0) {
        return Err("the name holds a NUL byte".into());
    }
    let mut out = PathBuf::new();
    for c in Path::new(OsStr::from_bytes(bytes)).components() {
        match c {
            Component::Normal(s) => out.push(s),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => {
                return Err("an absolute path; snapshot entries are relative to the snapshot".into());
            }
            Component::ParentDir => {
                return Err("a path with `..`; snapshot entries stay inside the snapshot".into());
            }
        }
    }
    Ok(out)
}

/// Whether a symbolic link at `at` (relative to the snapshot) pointing to `target` stays
/// inside the snapshot, judged on the names alone. That is exact because entries are never
/// placed under a link (so every directory in `at` is real) and `..` may only lead the
/// target, the form the kernel (`../../devices/...`) and capture write: a `..` after a name
/// would climb out of wherever that name, perhaps itself a link, leads.
fn link_stays_inside(at: &Path, target: &Path) -> bool {
    let mut depth = at.components().count().saturating_sub(1);
    let mut named = false;
    for c in target.components() {
        match c {
            Component::Normal(_) => named = true,
            Component::CurDir => {}
            Component::ParentDir if !named => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return false,
            },
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

/// Read one extension header's data whole (it is capped first).
fn read_ext<R: Read>(entry: &mut tar::Entry<'_, R>, size: u64) -> Result<Vec<u8>, Refused> {
    let mut buf = Vec::with_capacity(size as usize);
    entry.take(size).read_to_end(&mut buf).map_err(unreadable)?;
    if buf.len() as u64 != size {
        return Err(archive_err("the archive is truncated inside an extension header"));
    }
    Ok(buf)
}

/// Unpack a tar stream into `dest` (an empty directory this process made), within `lim`.
/// `open` gives the stream from its start; it is read twice: once to check every entry
/// and cap with nothing written (a bomb costs only the reading), then to write.
pub fn unpack<R: Read>(
    open: impl Fn() -> io::Result<R>,
    dest: &Path,
    lim: &Limits,
) -> Result<Unpacked, Refused> {
    walk(open().map_err(unreadable)?, None, lim)?;
    walk(open().map_err(unreadable)?, Some(dest), lim)
}

/// Names longer than this are refused (Linux's PATH_MAX).
const MAX_NAME_BYTES: usize = 4096;

/// One pass over the archive: every check, and the writing when `dest` is given.
fn walk<R: Read>(reader: R, dest: Option<&Path>, lim: &Limits) -> Result<Unpacked, Refused> {
    let mut ar = tar::Archive::new(reader);
    // Raw: extension headers come to us, so their size is checked before they are read.
    let entries = ar.entries().map_err(unreadable)?.raw(true);
    let mut w = Walk {
        dest,
        lim,
        done: Unpacked::default(),
        pending: Pending::default(),
    };
    for entry in entries {
        let mut entry = entry.map_err(unreadable)?;
        w.done.entries += 1;
        if w.done.entries > lim.max_entries {
            return Err(archive_err(format!(
                "more than {} entries; a snapshot holds a few thousand (refused as a possible archive bomb)",
                lim.max_entries
            )));
        }
        let h = entry.header();
        let kind = h.entry_type();
        let size = h.entry_size().map_err(unreadable)?;
        let header_name = h.path_bytes().into_owned();
        let header_link = h.link_name_bytes().map(|l| l.into_owned());
        if kind.is_gnu_longname()
            || kind.is_gnu_longlink()
            || kind.is_pax_local_extensions()
            || kind.is_pax_global_extensions()
        {
            w.extension(&mut entry, kind, size, &header_name)?;
            continue;
        }
        let (name, link) = w.pending.names_of(header_name, header_link, size)?;
        w.place(&mut entry, kind, size, &name, link)?;
    }
    let p = &w.pending;
    if p.long_name.is_some() || p.long_link.is_some() || p.pax.is_some() {
        return Err(archive_err(
            "the archive ends after an extension header, without its entry",
        ));
    }
    Ok(w.done)
}

/// One pass's state: where it writes (nowhere on the checking pass), what it has counted,
/// and the extension headers waiting for their entry.
struct Walk<'a> {
    dest: Option<&'a Path>,
    lim: &'a Limits,
    done: Unpacked,
    pending: Pending,
}

/// Extension headers read, waiting for the entry they describe.
#[derive(Default)]
struct Pending {
    long_name: Option<Vec<u8>>,
    long_link: Option<Vec<u8>>,
    pax: Option<Vec<u8>>,
}

/// A refusal of the entry printed as `who`.
fn refused(who: &str, msg: String) -> Refused {
    Refused {
        entry: Some(who.to_string()),
        msg,
    }
}

fn io_refused(who: &str, op: &str, e: io::Error) -> Refused {
    refused(who, format!("cannot {op}: {e}"))
}

fn create_parent(on_disk: &Path, who: &str) -> Result<(), Refused> {
    if let Some(parent) = on_disk.parent() {
        std::fs::create_dir_all(parent).map_err(|e| io_refused(who, "create its directory", e))?;
    }
    Ok(())
}

fn is_link(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink())
}

impl Walk<'_> {
    /// A long name, long link or pax header: capped, read whole and kept for the next
    /// entry (a global pax header is read and dropped: it describes the archive).
    fn extension<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        kind: tar::EntryType,
        size: u64,
        header_name: &[u8],
    ) -> Result<(), Refused> {
        let lim = self.lim;
        if size > lim.max_ext_bytes {
            return Err(Refused {
                entry: Some(shown(self.pending.long_name.as_deref().unwrap_or(header_name))),
                msg: format!(
                    "an extension header (long name or pax) of {size} bytes, more than {}",
                    lim.max_ext_bytes
                ),
            });
        }
        self.done.bytes += size;
        if self.done.bytes > lim.max_total_bytes {
            return Err(too_big(lim));
        }
        let data = read_ext(entry, size)?;
        let slot = if kind.is_gnu_longname() {
            &mut self.pending.long_name
        } else if kind.is_gnu_longlink() {
            &mut self.pending.long_link
        } else if kind.is_pax_local_extensions() {
            &mut self.pending.pax
        } else {
            // Global pax records describe the archive, not a file: nothing we use.
            return Ok(());
        };
        if slot.is_some() {
            return Err(archive_err(
                "two extension headers of one kind for the same entry",
            ));
        }
        *slot = Some(data);
        Ok(())
    }

    /// One entry checked and, on the writing pass, written: a directory, a regular file or
    /// a symbolic link that stays inside; anything else is refused.
    fn place<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        kind: tar::EntryType,
        size: u64,
        name: &[u8],
        link: Option<Vec<u8>>,
    ) -> Result<(), Refused> {
        let who = shown(name);
        if name.len() > MAX_NAME_BYTES {
            return Err(refused(
                &who,
                format!(
                    "a name of {} bytes, longer than any path ({MAX_NAME_BYTES})",
                    name.len()
                ),
            ));
        }
        let rel = clean_path(name).map_err(|m| refused(&who, m))?;
        // Nothing is written through a link this archive made (checked on disk, so no list
        // of links grows with the archive).
        if let Some(dest) = self.dest {
            let under = rel
                .ancestors()
                .skip(1)
                .filter(|a| !a.as_os_str().is_empty())
                .find(|a| is_link(&dest.join(a)));
            if let Some(l) = under {
                return Err(refused(
                    &who,
                    format!(
                        "lies under the symbolic link \"{}\"; snapshot entries are never placed under a link",
                        shown(l.as_os_str().as_bytes())
                    ),
                ));
            }
        }
        let on_disk = self.dest.map(|d| d.join(&rel));
        if kind.is_dir() {
            if let Some(on_disk) = &on_disk {
                if is_link(on_disk) {
                    return Err(refused(
                        &who,
                        "a directory where a symbolic link already is".into(),
                    ));
                }
                std::fs::create_dir_all(on_disk).map_err(|e| io_refused(&who, "create the directory", e))?;
            }
            Ok(())
        } else if kind.is_file() || kind.is_contiguous() {
            self.file(entry, size, &rel, on_disk.as_deref(), &who)
        } else if kind.is_symlink() {
            symlink(&rel, link, on_disk.as_deref(), &who)
        } else {
            Err(refused(
                &who,
                format!(
                    "{}; a snapshot holds only directories, regular files and symbolic links",
                    other_kind(kind)
                ),
            ))
        }
    }

    /// A regular file: within the caps, then copied (or, checking, read and dropped).
    fn file<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        size: u64,
        rel: &Path,
        on_disk: Option<&Path>,
        who: &str,
    ) -> Result<(), Refused> {
        let lim = self.lim;
        if size > lim.max_file_bytes {
            return Err(refused(
                who,
                format!(
                    "a file of {size} bytes, more than any file fabprobe reads ({} bytes)",
                    lim.max_file_bytes
                ),
            ));
        }
        self.done.bytes += size;
        if self.done.bytes > lim.max_total_bytes {
            return Err(too_big(lim));
        }
        if rel.as_os_str().is_empty() {
            return Err(refused(who, "a file with an empty name".into()));
        }
        let copied = match on_disk {
            None => io::copy(&mut entry.take(size), &mut io::sink()).map_err(unreadable)?,
            Some(on_disk) => {
                create_parent(on_disk, who)?;
                // create_new: never through an existing link, never over an earlier entry.
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(on_disk)
                    .map_err(|e| io_refused(who, "create the file", e))?;
                io::copy(&mut entry.take(size), &mut f).map_err(unreadable)?
            }
        };
        if copied != size {
            return Err(refused(
                who,
                format!("the archive ends inside this file ({copied} of {size} bytes)"),
            ));
        }
        Ok(())
    }
}

impl Pending {
    /// The entry's name and link target, with the extension headers that came before it
    /// (trailing NULs dropped); a pax header that names a sparse file or another size is
    /// refused.
    fn names_of(
        &mut self,
        header_name: Vec<u8>,
        header_link: Option<Vec<u8>>,
        size: u64,
    ) -> Result<(Vec<u8>, Option<Vec<u8>>), Refused> {
        let mut name = self.long_name.take().unwrap_or(header_name);
        while name.last() == Some(&0) {
            name.pop();
        }
        let mut link = self.long_link.take().or(header_link);
        if let Some(l) = link.as_mut() {
            while l.last() == Some(&0) {
                l.pop();
            }
        }
        let Some(records) = self.pax.take() else {
            return Ok((name, link));
        };
        for r in tar::PaxExtensions::new(&records) {
            let r = r.map_err(|e| refused(&shown(&name), format!("unreadable pax header: {e}")))?;
            let key = r.key_bytes();
            if key.starts_with(b"GNU.sparse.") {
                return Err(refused(
                    &shown(&name),
                    "a GNU sparse file; a snapshot holds no sparse files".into(),
                ));
            }
            match key {
                b"path" => name = r.value_bytes().to_vec(),
                b"linkpath" => link = Some(r.value_bytes().to_vec()),
                // The header's size frames the stream here; a pax size that differs
                // would make this reader and others see different archives.
                b"size" if r.value().ok().and_then(|v| v.parse::<u64>().ok()) != Some(size) => {
                    return Err(refused(
                        &shown(&name),
                        format!(
                            "the pax size {:?} differs from the header's {size} bytes",
                            shown(r.value_bytes())
                        ),
                    ));
                }
                _ => {}
            }
        }
        Ok((name, link))
    }
}

/// A symbolic link: a usable target that stays inside the snapshot, then made.
fn symlink(rel: &Path, link: Option<Vec<u8>>, on_disk: Option<&Path>, who: &str) -> Result<(), Refused> {
    let target = link.unwrap_or_default();
    if target.is_empty() || target.contains(&0) {
        return Err(refused(who, "a symbolic link without a usable target".into()));
    }
    let t = Path::new(OsStr::from_bytes(&target));
    if !link_stays_inside(rel, t) {
        return Err(refused(
            who,
            format!(
                "a symbolic link to \"{}\", which leaves the snapshot (links in a snapshot are relative and stay inside it)",
                shown(&target)
            ),
        ));
    }
    if rel.as_os_str().is_empty() {
        return Err(refused(who, "a symbolic link with an empty name".into()));
    }
    if let Some(on_disk) = on_disk {
        create_parent(on_disk, who)?;
        std::os::unix::fs::symlink(t, on_disk).map_err(|e| io_refused(who, "create the link", e))?;
    }
    Ok(())
}

/// What an entry of a type a snapshot never holds is, in words.
fn other_kind(kind: tar::EntryType) -> &'static str {
    if kind.is_hard_link() {
        "a hard link"
    } else if kind.is_character_special() || kind.is_block_special() {
        "a device file"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_gnu_sparse() {
        "a GNU sparse file"
    } else {
        "an entry of an unknown type"
    }
}

fn too_big(lim: &Limits) -> Refused {
    archive_err(format!(
        "it unpacks to more than {} bytes; a snapshot is a few MiB (refused as a possible archive bomb)",
        lim.max_total_bytes
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ustar header block for `name`, with a valid checksum.
    fn header(name: &str, kind: u8, size: u64, link: &str) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        // set_path refuses `..` and absolute names; write the bytes as a hostile tool would.
        let n = name.as_bytes();
        h.as_old_mut().name[..n.len()].copy_from_slice(n);
        h.set_entry_type(tar::EntryType::new(kind));
        h.set_size(size);
        h.set_mode(0o644);
        let l = link.as_bytes();
        h.as_old_mut().linkname[..l.len()].copy_from_slice(l);
        h.set_cksum();
        h
    }

    fn tar_of(entries: &[(&str, u8, &[u8], &str)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, kind, data, link) in entries {
            out.extend_from_slice(header(name, *kind, data.len() as u64, link).as_bytes());
            out.extend_from_slice(data);
            out.resize(out.len().div_ceil(512) * 512, 0);
        }
        out.extend_from_slice(&[0; 1024]);
        out
    }

    fn run(bytes: &[u8], lim: &Limits) -> (tempfile::TempDir, Result<Unpacked, Refused>) {
        let d = tempfile::tempdir().unwrap();
        let r = unpack(|| Ok::<_, io::Error>(bytes), d.path(), lim);
        (d, r)
    }

    #[test]
    fn a_plain_tree_unpacks() {
        let t = tar_of(&[
            ("./", b'5', b"", ""),
            ("sys/devices/x/", b'5', b"", ""),
            ("sys/devices/x/numa_node", b'0', b"1\n", ""),
            ("sys/class/y", b'2', b"", "../devices/x"),
        ]);
        let (d, r) = run(&t, &LIMITS);
        assert_eq!(r.unwrap(), Unpacked { entries: 4, bytes: 2 });
        assert_eq!(
            std::fs::read_to_string(d.path().join("sys/class/y/numa_node")).unwrap(),
            "1\n"
        );
    }

    #[test]
    fn hostile_entries_are_refused_by_name() {
        // (path, tar type byte, data, link target) of each entry.
        type Entry<'a> = (&'a str, u8, &'a [u8], &'a str);
        let cases: &[(&[Entry], &str, &str)] = &[
            (&[("dev/sda", b'4', b"", "")], "dev/sda", "a device file"),
            (&[("dev/tty", b'3', b"", "")], "dev/tty", "a device file"),
            (&[("p", b'6', b"", "")], "p", "a FIFO"),
            (
                &[("a", b'0', b"x", ""), ("b", b'1', b"", "a")],
                "b",
                "a hard link",
            ),
            (&[("sparse", b'S', b"", "")], "sparse", "a GNU sparse file"),
            (&[("../escape", b'0', b"x", "")], "../escape", "`..`"),
            (&[("/etc/x", b'0', b"x", "")], "/etc/x", "absolute path"),
            (&[("sys/l", b'2', b"", "/etc")], "sys/l", "leaves the snapshot"),
            (
                &[("sys/l", b'2', b"", "../../etc")],
                "sys/l",
                "leaves the snapshot",
            ),
            (
                &[("sys/d/l", b'2', b"", "../y/../../etc")],
                "sys/d/l",
                "leaves the snapshot",
            ),
            (
                &[("l", b'2', b"", "."), ("l/x", b'0', b"x", "")],
                "l/x",
                "under the symbolic link \"l\"",
            ),
            (
                &[("a", b'0', b"x", ""), ("a", b'0', b"y", "")],
                "a",
                "cannot create the file",
            ),
        ];
        for (entries, who, want) in cases {
            let (_d, r) = run(&tar_of(entries), &LIMITS);
            let e = r.unwrap_err();
            assert_eq!(e.entry.as_deref(), Some(*who), "{e}");
            assert!(e.msg.contains(want), "{who}: {e}");
        }
    }

    #[test]
    fn nothing_is_written_before_the_whole_archive_passed() {
        // A bad entry after good ones: the good ones are not on disk either.
        let t = tar_of(&[("sys/a", b'0', b"x", ""), ("dev/sda", b'4', b"", "")]);
        let (d, r) = run(&t, &LIMITS);
        assert!(r.is_err());
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
        let long = "a/".repeat(2100);
        let t = tar_of(&[("././@LongLink", b'L', long.as_bytes(), ""), ("x", b'0', b"", "")]);
        let e = run(&t, &LIMITS).1.unwrap_err();
        assert!(
            e.msg
                .contains("a name of 4200 bytes, longer than any path (4096)"),
            "{e}"
        );
    }

    #[test]
    fn a_file_larger_than_any_read_is_refused_before_its_data() {
        // The header claims 1 TiB; only its first block follows.
        let mut t = header("sys/huge", b'0', 1 << 40, "").as_bytes().to_vec();
        t.extend_from_slice(&[0; 512]);
        let (d, r) = run(&t, &LIMITS);
        let e = r.unwrap_err();
        assert_eq!(e.entry.as_deref(), Some("sys/huge"));
        assert!(e.msg.contains("1099511627776 bytes, more than any file"), "{e}");
        assert!(!d.path().join("sys/huge").exists());
    }

    #[test]
    fn entry_and_byte_caps_hold() {
        let lim = Limits {
            max_entries: 3,
            max_total_bytes: 10,
            max_file_bytes: 8,
            max_ext_bytes: 16,
        };
        let many = tar_of(&[
            ("a", b'5', b"", ""),
            ("b", b'5', b"", ""),
            ("c", b'5', b"", ""),
            ("d", b'5', b"", ""),
        ]);
        let e = run(&many, &lim).1.unwrap_err();
        assert!(e.entry.is_none() && e.msg.contains("more than 3 entries"), "{e}");
        let heavy = tar_of(&[("a", b'0', b"12345678", ""), ("b", b'0', b"12345678", "")]);
        let e = run(&heavy, &lim).1.unwrap_err();
        assert!(e.msg.contains("more than 10 bytes"), "{e}");
        let long = tar_of(&[("././@LongLink", b'L', &[b'n'; 17], ""), ("a", b'0', b"", "")]);
        let e = run(&long, &lim).1.unwrap_err();
        assert!(
            e.msg.contains("extension header (long name or pax) of 17 bytes"),
            "{e}"
        );
    }

    #[test]
    fn long_names_and_pax_paths_apply_to_the_next_entry() {
        let long = format!("sys/{}/attr", "d".repeat(150));
        let pax_rec = |k: &str, v: &str| {
            // A pax record's length counts its own digits.
            let body = format!(" {k}={v}\n");
            let mut n = body.len();
            while n.to_string().len() + body.len() != n {
                n = n.to_string().len() + body.len();
            }
            format!("{n}{body}")
        };
        let p = pax_rec("path", "sys/from_pax");
        let t = tar_of(&[
            ("././@LongLink", b'L', format!("{long}\0").as_bytes(), ""),
            ("truncated", b'0', b"v\n", ""),
            ("PaxHeaders/x", b'x', p.as_bytes(), ""),
            ("short", b'0', b"w\n", ""),
        ]);
        let (d, r) = run(&t, &LIMITS);
        r.unwrap();
        assert_eq!(std::fs::read_to_string(d.path().join(&long)).unwrap(), "v\n");
        assert_eq!(
            std::fs::read_to_string(d.path().join("sys/from_pax")).unwrap(),
            "w\n"
        );
        let sparse = pax_rec("GNU.sparse.size", "1099511627776");
        let t = tar_of(&[
            ("PaxHeaders/x", b'x', sparse.as_bytes(), ""),
            ("s", b'0', b"", ""),
        ]);
        let e = run(&t, &LIMITS).1.unwrap_err();
        assert!(e.msg.contains("GNU sparse"), "{e}");
    }

    #[test]
    fn names_are_printed_without_control_characters() {
        let t = tar_of(&[("a\x1b[2J", b'4', b"", "")]);
        let e = run(&t, &LIMITS).1.unwrap_err();
        assert_eq!(e.entry.as_deref(), Some("a\\x1b[2J"));
    }

    #[test]
    fn link_escape_is_judged_from_the_links_own_directory() {
        let p = Path::new;
        assert!(link_stays_inside(
            p("sys/class/net/eth0"),
            p("../../../devices/pci0000:00")
        ));
        assert!(!link_stays_inside(
            p("sys/class/net/eth0"),
            p("../../../../devices")
        ));
        assert!(!link_stays_inside(p("a"), p("..")));
        assert!(link_stays_inside(p("a"), p(".")));
        assert!(!link_stays_inside(p("sys/a"), p("../../sys/b")));
        assert!(!link_stays_inside(p("sys/a"), p("/sys/b")));
        // `sys/y -> ..` is inside, but `..` after it would climb out of the snapshot.
        assert!(link_stays_inside(p("sys/y"), p("..")));
        assert!(!link_stays_inside(p("sys/d/a"), p("../y/../z")));
        assert!(link_stays_inside(p("sys/d/a"), p("./../y/./z")));
    }
}
