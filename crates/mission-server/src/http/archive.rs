//! Zip archives written as they are sent: each entry stored as it is (no compression), its
//! CRC-32 computed on the way and written after its data (a data descriptor), so an archive of
//! any number of files is served with memory for one chunk. Every size is known before the first
//! byte, so the archive's own size is too ([`ZipPlan::archive_size`]).
//!
//! An archive is classic zip while it can be, and uses ZIP64 (APPNOTE 6.3, section 4.5) exactly
//! where a field would overflow: an entry of 4 GiB or more carries its sizes in a ZIP64 extra
//! field and an 8-byte data descriptor, an entry that starts 4 GiB or more into the archive
//! carries its offset there, and an archive of 65,535 entries or more, or whose central directory
//! lies past 4 GiB, ends with the ZIP64 end records. The choice is made from the plan alone,
//! so the size announced up front is the size sent.
//!
//! Entries are named by [`MissionPath`]s, at most 1,024 bytes, so every name fits its header and
//! any list of files makes an archive.

use bytes::{BufMut, Bytes, BytesMut};
use chrono::{DateTime, Datelike, Timelike, Utc};
use mission_api::paths::MissionPath;

/// CRC-32 with a 16-way table: several GB/s, so checksumming keeps up with any disk.
const CRC32: crc::Crc<u32, crc::Table<16>> = crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_ISO_HDLC);
const LOCAL_HEADER: u64 = 30;
const DATA_DESCRIPTOR: u64 = 16;
const CENTRAL_HEADER: u64 = 46;
const END_OF_CENTRAL_DIRECTORY: u64 = 22;
/// The ZIP64 extra field of a large entry's local header: tag, length, both sizes.
const ZIP64_LOCAL_EXTRA: u64 = 4 + 16;
const ZIP64_DATA_DESCRIPTOR: u64 = 24;
const ZIP64_END_RECORD: u64 = 56;
const ZIP64_END_LOCATOR: u64 = 20;
const ZIP64_EXTRA_TAG: u16 = 0x0001;
/// A 4-byte field's "see the ZIP64 record" value; it and anything larger go to ZIP64.
const FIELD_MAX: u64 = 0xFFFF_FFFF;
/// A 2-byte entry count's "see the ZIP64 record" value.
const COUNT_MAX: u64 = 0xFFFF;
/// General purpose flags: sizes and CRC in a data descriptor (bit 3), UTF-8 names (bit 11).
const FLAGS: u16 = (1 << 3) | (1 << 11);
/// "Made by" and "needed": version 2.0, the first with data descriptors ...
const VERSION: u16 = 20;
/// ... and 4.5, the first with ZIP64, for entries that use it.
const VERSION_ZIP64: u16 = 45;

/// One file of an archive.
#[derive(Debug, Clone)]
pub struct ZipEntry {
    /// Its path in the archive.
    pub path: MissionPath,
    /// Its size in bytes.
    pub size: u64,
    /// When it was last changed.
    pub modified: DateTime<Utc>,
}

/// An entry's data was not as long as announced: the archive cannot be finished.
#[derive(Debug, thiserror::Error)]
#[error("{path} was {actual} bytes, not the {expected} announced")]
pub struct WrongSize {
    /// The entry.
    pub path: MissionPath,
    /// Its announced size.
    pub expected: u64,
    /// What came.
    pub actual: u64,
}

/// An entry and where it lies in the archive.
#[derive(Debug, Clone)]
struct Placed {
    entry: ZipEntry,
    /// Where its local header starts.
    offset: u64,
}

impl Placed {
    /// Whether its sizes need ZIP64 (in the local header, data descriptor and central header).
    fn large(&self) -> bool {
        self.entry.size >= FIELD_MAX
    }

    /// Whether its local header's offset needs ZIP64 (in the central header).
    fn far(&self) -> bool {
        self.offset >= FIELD_MAX
    }

    fn version(&self) -> u16 {
        if self.large() || self.far() { VERSION_ZIP64 } else { VERSION }
    }

    /// Its local header, data and data descriptor.
    fn local_size(&self) -> u64 {
        let name = self.entry.path.as_str().len() as u64;
        if self.large() {
            LOCAL_HEADER + ZIP64_LOCAL_EXTRA + name + self.entry.size + ZIP64_DATA_DESCRIPTOR
        } else {
            LOCAL_HEADER + name + self.entry.size + DATA_DESCRIPTOR
        }
    }

    /// The values its central header's ZIP64 extra field holds: the sizes and offset that do not
    /// fit their own fields, in that order.
    fn zip64_values(&self) -> impl Iterator<Item = u64> {
        let size = self.large().then_some(self.entry.size);
        size.into_iter().chain(size).chain(self.far().then_some(self.offset))
    }

    /// The length of its central header's ZIP64 extra field.
    fn central_extra_len(&self) -> u64 {
        match self.zip64_values().count() as u64 {
            0 => 0,
            n => 4 + 8 * n,
        }
    }

    fn central_size(&self) -> u64 {
        CENTRAL_HEADER + self.entry.path.as_str().len() as u64 + self.central_extra_len()
    }
}

/// The entries of an archive and where each lies.
#[derive(Debug, Clone)]
pub struct ZipPlan {
    entries: Vec<Placed>,
    /// Where the central directory starts, after the last entry.
    central_offset: u64,
    /// The central directory's size.
    central_size: u64,
}

impl ZipPlan {
    /// Plans an archive of `entries`, in that order.
    pub fn new(entries: Vec<ZipEntry>) -> Self {
        let mut placed = Vec::with_capacity(entries.len());
        let (mut offset, mut central_size) = (0, 0);
        for entry in entries {
            let entry = Placed { entry, offset };
            offset += entry.local_size();
            central_size += entry.central_size();
            placed.push(entry);
        }
        Self { entries: placed, central_offset: offset, central_size }
    }

    /// Whether the archive ends with the ZIP64 end records.
    fn zip64_end(&self) -> bool {
        self.entries.len() as u64 >= COUNT_MAX || self.central_offset >= FIELD_MAX || self.central_size >= FIELD_MAX
    }

    /// The archive's size in bytes.
    pub fn archive_size(&self) -> u64 {
        let zip64_end = if self.zip64_end() { ZIP64_END_RECORD + ZIP64_END_LOCATOR } else { 0 };
        self.central_offset + self.central_size + zip64_end + END_OF_CENTRAL_DIRECTORY
    }

    /// A writer for the archive.
    pub fn writer(self) -> ZipWriter {
        ZipWriter { plan: self, next: 0, central: BytesMut::new(), current: None }
    }
}

/// The entry being written: its running CRC and length.
struct Open {
    crc: crc::Digest<'static, u32, crc::Table<16>>,
    written: u64,
}

/// Writes a [`ZipPlan`]: for each entry [`ZipWriter::start_entry`], its data through
/// [`ZipWriter::data`] (which answers it unchanged, counted), [`ZipWriter::end_entry`]; then
/// [`ZipWriter::finish`].
pub struct ZipWriter {
    plan: ZipPlan,
    next: usize,
    central: BytesMut,
    current: Option<Open>,
}

/// MS-DOS time and date of `at` (2-second resolution; 1980 at the earliest).
fn dos_time(at: DateTime<Utc>) -> (u16, u16) {
    if at.year() < 1980 {
        return (0, (1 << 5) | 1);
    }
    let time = (at.hour() << 11) | (at.minute() << 5) | (at.second() / 2);
    let date = ((at.year().min(2107) as u32 - 1980) << 9) | (at.month() << 5) | at.day();
    (time as u16, date as u16)
}

/// `value` in a 4-byte field: itself, or the "see the ZIP64 record" value.
fn field32(value: u64) -> u32 {
    value.min(FIELD_MAX) as u32
}

impl ZipWriter {
    /// The local header of the next entry, and that entry; `None` when every entry is written.
    pub fn start_entry(&mut self) -> Option<(Bytes, ZipEntry)> {
        let placed = self.plan.entries.get(self.next)?;
        self.next += 1;
        let entry = &placed.entry;
        let (time, date) = dos_time(entry.modified);
        let mut header =
            BytesMut::with_capacity((LOCAL_HEADER + ZIP64_LOCAL_EXTRA) as usize + entry.path.as_str().len());
        header.put_u32_le(0x0403_4b50);
        header.put_u16_le(if placed.large() { VERSION_ZIP64 } else { VERSION });
        header.put_u16_le(FLAGS);
        header.put_u16_le(0); // stored
        header.put_u16_le(time);
        header.put_u16_le(date);
        header.put_u32_le(0); // CRC: in the data descriptor
        // Sizes: in the data descriptor, which a ZIP64 extra field here makes 8-byte ones.
        let sizes = if placed.large() { FIELD_MAX as u32 } else { 0 };
        header.put_u32_le(sizes);
        header.put_u32_le(sizes);
        header.put_u16_le(entry.path.as_str().len() as u16);
        header.put_u16_le(if placed.large() { ZIP64_LOCAL_EXTRA as u16 } else { 0 });
        header.put_slice(entry.path.as_str().as_bytes());
        if placed.large() {
            header.put_u16_le(ZIP64_EXTRA_TAG);
            header.put_u16_le(16);
            header.put_u64_le(0);
            header.put_u64_le(0);
        }
        self.current = Some(Open { crc: CRC32.digest(), written: 0 });
        Some((header.freeze(), entry.clone()))
    }

    /// Counts a piece of the current entry's data.
    pub fn data(&mut self, chunk: &[u8]) {
        let open = self.current.as_mut().expect("an entry was started");
        open.crc.update(chunk);
        open.written += chunk.len() as u64;
    }

    /// The current entry's data descriptor; an error when its data was not its announced size.
    pub fn end_entry(&mut self) -> Result<Bytes, WrongSize> {
        let open = self.current.take().expect("an entry was started");
        let placed = &self.plan.entries[self.next - 1];
        let entry = &placed.entry;
        if open.written != entry.size {
            return Err(WrongSize { path: entry.path.clone(), expected: entry.size, actual: open.written });
        }
        let crc = open.crc.finalize();
        let mut descriptor = BytesMut::with_capacity(ZIP64_DATA_DESCRIPTOR as usize);
        descriptor.put_u32_le(0x0807_4b50);
        descriptor.put_u32_le(crc);
        if placed.large() {
            descriptor.put_u64_le(entry.size);
            descriptor.put_u64_le(entry.size);
        } else {
            descriptor.put_u32_le(entry.size as u32);
            descriptor.put_u32_le(entry.size as u32);
        }
        let (time, date) = dos_time(entry.modified);
        let central = &mut self.central;
        central.put_u32_le(0x0201_4b50);
        central.put_u16_le(placed.version() | (3 << 8)); // made by Unix, so permissions below count
        central.put_u16_le(placed.version());
        central.put_u16_le(FLAGS);
        central.put_u16_le(0);
        central.put_u16_le(time);
        central.put_u16_le(date);
        central.put_u32_le(crc);
        central.put_u32_le(field32(entry.size));
        central.put_u32_le(field32(entry.size));
        central.put_u16_le(entry.path.as_str().len() as u16);
        central.put_u16_le(placed.central_extra_len() as u16);
        central.put_u16_le(0); // comment
        central.put_u16_le(0); // disk
        central.put_u16_le(0); // internal attributes
        central.put_u32_le(0o100644 << 16); // a regular file, rw-r--r--
        central.put_u32_le(field32(placed.offset));
        central.put_slice(entry.path.as_str().as_bytes());
        if placed.central_extra_len() > 0 {
            central.put_u16_le(ZIP64_EXTRA_TAG);
            central.put_u16_le(placed.central_extra_len() as u16 - 4);
            placed.zip64_values().for_each(|v| central.put_u64_le(v));
        }
        Ok(descriptor.freeze())
    }

    /// The central directory and its end records.
    pub fn finish(self) -> Bytes {
        let plan = &self.plan;
        let mut tail = self.central;
        debug_assert_eq!(tail.len() as u64, plan.central_size, "the central directory is as planned");
        let entries = plan.entries.len() as u64;
        if plan.zip64_end() {
            let record_offset = plan.central_offset + plan.central_size;
            tail.put_u32_le(0x0606_4b50);
            tail.put_u64_le(ZIP64_END_RECORD - 12); // the record's size after this field
            tail.put_u16_le(VERSION_ZIP64 | (3 << 8));
            tail.put_u16_le(VERSION_ZIP64);
            tail.put_u32_le(0); // this disk
            tail.put_u32_le(0); // the central directory's disk
            tail.put_u64_le(entries);
            tail.put_u64_le(entries);
            tail.put_u64_le(plan.central_size);
            tail.put_u64_le(plan.central_offset);
            tail.put_u32_le(0x0706_4b50);
            tail.put_u32_le(0); // the ZIP64 end record's disk
            tail.put_u64_le(record_offset);
            tail.put_u32_le(1); // disks
        }
        tail.put_u32_le(0x0605_4b50);
        tail.put_u16_le(0);
        tail.put_u16_le(0);
        tail.put_u16_le(entries.min(COUNT_MAX) as u16);
        tail.put_u16_le(entries.min(COUNT_MAX) as u16);
        tail.put_u32_le(field32(plan.central_size));
        tail.put_u32_le(field32(plan.central_offset));
        tail.put_u16_le(0);
        tail.freeze()
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Seek, SeekFrom, Write};
    use std::process::Command;

    use super::*;

    /// An entry's data in a test: these bytes, or this many zero bytes (left as a hole in the
    /// archive file, so a 4 GiB entry takes no disk).
    enum Data<'a> {
        Bytes(&'a [u8]),
        Zeros(u64),
    }

    fn at() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-24T10:20:30Z").unwrap().with_timezone(&Utc)
    }

    /// Writes the archive of `files` to a file in `dir`, checking it is the planned size.
    fn write_archive(dir: &std::path::Path, files: &[(String, Data)]) -> std::path::PathBuf {
        let entries = files.iter().map(|(name, data)| {
            let size = match data {
                Data::Bytes(bytes) => bytes.len() as u64,
                Data::Zeros(n) => *n,
            };
            ZipEntry { path: MissionPath::parse(name).unwrap(), size, modified: at() }
        });
        let plan = ZipPlan::new(entries.collect());
        let size = plan.archive_size();
        let mut writer = plan.writer();
        let path = dir.join("t.zip");
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        let zeros = vec![0u8; 1 << 20];
        for (_, data) in files {
            let (header, _) = writer.start_entry().unwrap();
            out.write_all(&header).unwrap();
            match data {
                Data::Bytes(bytes) => {
                    writer.data(bytes);
                    out.write_all(bytes).unwrap();
                }
                Data::Zeros(n) => {
                    let mut left = *n;
                    while left > 0 {
                        let chunk = left.min(zeros.len() as u64);
                        writer.data(&zeros[..chunk as usize]);
                        left -= chunk;
                    }
                    out.seek(SeekFrom::Current(*n as i64)).unwrap();
                }
            }
            out.write_all(&writer.end_entry().unwrap()).unwrap();
        }
        assert!(writer.start_entry().is_none());
        out.write_all(&writer.finish()).unwrap();
        let written = out.stream_position().unwrap();
        assert_eq!(written, size, "the size was known in advance");
        drop(out);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), size);
        path
    }

    /// What Python's zipfile reads from the archive at `path`, after checking every entry's CRC
    /// and size against the central directory: each entry's name, size and time, sorted, with
    /// the content of the entries named in `show`.
    fn read_with_python(path: &std::path::Path, show: &[&str]) -> String {
        let check = "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); assert z.testzip() is None; \
                     infos = z.infolist(); print(len(infos), sorted((i.filename, i.file_size, i.date_time) for i in infos)[:3]); \
                     [print(z.read(name)) for name in sys.argv[2:]]";
        let out = Command::new("python3").args(["-c", check]).arg(path).args(show).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    /// Info-ZIP's `unzip -t`, a second reader, stricter about headers and data descriptors:
    /// its summary line.
    fn test_with_unzip(path: &std::path::Path) -> String {
        let out = Command::new("unzip").arg("-tq").arg(path).output().expect("unzip (scripts/install-test-deps.sh)");
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "unzip -t: {text}");
        text.trim().to_owned()
    }

    #[test]
    fn an_archive_reads_back_with_pythons_zipfile_and_unzip() {
        let dir = tempfile::tempdir().unwrap();
        let files = [
            ("a.txt".to_owned(), Data::Bytes(b"hello\n")),
            ("sub/b.bin".to_owned(), Data::Bytes(&[0u8, 1, 2, 255])),
            ("empty".to_owned(), Data::Bytes(b"")),
        ];
        let path = write_archive(dir.path(), &files);
        assert_eq!(
            read_with_python(&path, &["a.txt"]),
            "3 [('a.txt', 6, (2026, 11, 24, 10, 20, 30)), ('empty', 0, (2026, 11, 24, 10, 20, 30)), \
             ('sub/b.bin', 4, (2026, 11, 24, 10, 20, 30))]\nb'hello\\n'\n"
        );
        assert!(test_with_unzip(&path).starts_with("No errors detected"));
        let bytes = std::fs::read(&path).unwrap();
        assert!(!bytes.windows(4).any(|w| w == [0x50, 0x4b, 0x06, 0x06]), "a small archive is classic zip");
    }

    #[test]
    fn more_than_65535_entries_end_with_zip64_records() {
        let dir = tempfile::tempdir().unwrap();
        let files: Vec<_> = (0..70_000).map(|i| (format!("f/{i:05}"), Data::Bytes(b"x"))).collect();
        let path = write_archive(dir.path(), &files);
        let python = read_with_python(&path, &["f/69999"]);
        assert!(python.starts_with("70000 [('f/00000', 1, "), "{python}");
        assert!(python.ends_with("b'x'\n"), "{python}");
        assert!(test_with_unzip(&path).starts_with("No errors detected"));
    }

    /// An entry of 4 GiB and one byte, so its sizes, the next entry's offset and the central
    /// directory's offset all need ZIP64. The zeros are a hole in the file, but both readers
    /// read and checksum all of them.
    #[test]
    fn an_entry_past_4_gib_uses_zip64_sizes_and_offsets() {
        // tmpfs reads a hole as the shared zero page; a disk file system fills a page per 4 KiB.
        let dir = tempfile::tempdir_in("/dev/shm").or_else(|_| tempfile::tempdir()).unwrap();
        let big = (4 << 30) + 1;
        let files = [
            ("a.txt".to_owned(), Data::Bytes(b"first")),
            ("big.bin".to_owned(), Data::Zeros(big)),
            ("after.txt".to_owned(), Data::Bytes(b"after")),
        ];
        let path = write_archive(dir.path(), &files);
        assert_eq!(
            read_with_python(&path, &["after.txt", "a.txt"]),
            format!(
                "3 [('a.txt', 5, (2026, 11, 24, 10, 20, 30)), ('after.txt', 5, (2026, 11, 24, 10, 20, 30)), \
                 ('big.bin', {big}, (2026, 11, 24, 10, 20, 30))]\nb'after'\nb'first'\n"
            )
        );
        assert!(test_with_unzip(&path).starts_with("No errors detected"));
    }

    #[test]
    fn a_short_entry_is_refused() {
        let x = ZipEntry { path: MissionPath::parse("x").unwrap(), size: 3, modified: at() };
        let mut writer = ZipPlan::new(vec![x]).writer();
        writer.start_entry().unwrap();
        writer.data(b"ab");
        assert!(matches!(writer.end_entry(), Err(WrongSize { expected: 3, actual: 2, .. })));
    }
}
