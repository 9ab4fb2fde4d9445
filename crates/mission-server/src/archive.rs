//! Zip archives written as they are sent: each entry stored as it is (no compression), its
//! CRC-32 computed on the way and written after its data (a data descriptor), so an archive of
//! any number of files is served with memory for one chunk. Every size is known before the first
//! byte, so the archive's own size is too ([`ZipPlan::archive_size`]).
//!
//! Classic zip only: an archive that would need ZIP64 (an entry or the whole archive of 4 GiB or
//! more, more than 65,535 entries) is refused by [`ZipPlan::new`].

use bytes::{BufMut, Bytes, BytesMut};
use chrono::{DateTime, Datelike, Timelike, Utc};

const CRC32: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);
const LOCAL_HEADER: u64 = 30;
const DATA_DESCRIPTOR: u64 = 16;
const CENTRAL_HEADER: u64 = 46;
const END_OF_CENTRAL_DIRECTORY: u64 = 22;
/// General purpose flags: sizes and CRC in a data descriptor (bit 3), UTF-8 names (bit 11).
const FLAGS: u16 = (1 << 3) | (1 << 11);
/// "Made by" and "needed": version 2.0, the first with data descriptors.
const VERSION: u16 = 20;

/// One file of an archive.
#[derive(Debug, Clone)]
pub struct ZipEntry {
    /// Its path in the archive (`/`-separated).
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// When it was last changed.
    pub modified: DateTime<Utc>,
}

/// Why an archive cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum ZipError {
    /// It would need ZIP64.
    #[error("{0}; download the files one by one instead")]
    TooLarge(String),
    /// An entry's data was not as long as announced.
    #[error("{name} was {actual} bytes, not the {expected} announced")]
    WrongSize {
        /// The entry.
        name: String,
        /// Its announced size.
        expected: u64,
        /// What came.
        actual: u64,
    },
}

/// The entries of an archive, checked to fit classic zip.
#[derive(Debug, Clone)]
pub struct ZipPlan {
    entries: Vec<ZipEntry>,
}

impl ZipPlan {
    /// Plans an archive of `entries`, in that order.
    pub fn new(entries: Vec<ZipEntry>) -> Result<Self, ZipError> {
        if entries.len() > usize::from(u16::MAX) {
            return Err(ZipError::TooLarge(format!("{} files are more than a zip archive holds", entries.len())));
        }
        let plan = Self { entries };
        if plan.archive_size() >= u64::from(u32::MAX) {
            return Err(ZipError::TooLarge("the files make an archive of 4 GiB or more".into()));
        }
        Ok(plan)
    }

    /// The entries.
    pub fn entries(&self) -> &[ZipEntry] {
        &self.entries
    }

    /// The archive's size in bytes.
    pub fn archive_size(&self) -> u64 {
        let per_entry: u64 = self
            .entries
            .iter()
            .map(|e| LOCAL_HEADER + DATA_DESCRIPTOR + CENTRAL_HEADER + 2 * e.name.len() as u64 + e.size)
            .sum();
        per_entry + END_OF_CENTRAL_DIRECTORY
    }

    /// A writer for the archive.
    pub fn writer(self) -> ZipWriter {
        ZipWriter { plan: self, next: 0, offset: 0, central: BytesMut::new(), current: None }
    }
}

/// The entry being written: where it started, its running CRC and length.
struct Open {
    local_offset: u64,
    crc: crc::Digest<'static, u32>,
    written: u64,
}

/// Writes a [`ZipPlan`]: for each entry [`ZipWriter::start_entry`], its data through
/// [`ZipWriter::data`] (which answers it unchanged, counted), [`ZipWriter::end_entry`]; then
/// [`ZipWriter::finish`].
pub struct ZipWriter {
    plan: ZipPlan,
    next: usize,
    offset: u64,
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

impl ZipWriter {
    /// The local header of the next entry, and that entry; `None` when every entry is written.
    pub fn start_entry(&mut self) -> Option<(Bytes, ZipEntry)> {
        let entry = self.plan.entries.get(self.next)?.clone();
        self.next += 1;
        let (time, date) = dos_time(entry.modified);
        let mut header = BytesMut::with_capacity(LOCAL_HEADER as usize + entry.name.len());
        header.put_u32_le(0x0403_4b50);
        header.put_u16_le(VERSION);
        header.put_u16_le(FLAGS);
        header.put_u16_le(0); // stored
        header.put_u16_le(time);
        header.put_u16_le(date);
        header.put_u32_le(0); // CRC, sizes: in the data descriptor
        header.put_u32_le(0);
        header.put_u32_le(0);
        header.put_u16_le(entry.name.len() as u16);
        header.put_u16_le(0);
        header.put_slice(entry.name.as_bytes());
        self.current = Some(Open { local_offset: self.offset, crc: CRC32.digest(), written: 0 });
        self.offset += header.len() as u64;
        Some((header.freeze(), entry))
    }

    /// Counts a piece of the current entry's data.
    pub fn data(&mut self, chunk: &[u8]) {
        let open = self.current.as_mut().expect("an entry was started");
        open.crc.update(chunk);
        open.written += chunk.len() as u64;
        self.offset += chunk.len() as u64;
    }

    /// The current entry's data descriptor; an error when its data was not its announced size.
    pub fn end_entry(&mut self) -> Result<Bytes, ZipError> {
        let open = self.current.take().expect("an entry was started");
        let entry = &self.plan.entries[self.next - 1];
        if open.written != entry.size {
            return Err(ZipError::WrongSize { name: entry.name.clone(), expected: entry.size, actual: open.written });
        }
        let crc = open.crc.finalize();
        let size = entry.size as u32;
        let mut descriptor = BytesMut::with_capacity(DATA_DESCRIPTOR as usize);
        descriptor.put_u32_le(0x0807_4b50);
        descriptor.put_u32_le(crc);
        descriptor.put_u32_le(size);
        descriptor.put_u32_le(size);
        self.offset += DATA_DESCRIPTOR;
        let (time, date) = dos_time(entry.modified);
        let central = &mut self.central;
        central.put_u32_le(0x0201_4b50);
        central.put_u16_le(VERSION | (3 << 8)); // made by Unix, so permissions below count
        central.put_u16_le(VERSION);
        central.put_u16_le(FLAGS);
        central.put_u16_le(0);
        central.put_u16_le(time);
        central.put_u16_le(date);
        central.put_u32_le(crc);
        central.put_u32_le(size);
        central.put_u32_le(size);
        central.put_u16_le(entry.name.len() as u16);
        central.put_u16_le(0); // extra
        central.put_u16_le(0); // comment
        central.put_u16_le(0); // disk
        central.put_u16_le(0); // internal attributes
        central.put_u32_le(0o100644 << 16); // a regular file, rw-r--r--
        central.put_u32_le(open.local_offset as u32);
        central.put_slice(entry.name.as_bytes());
        Ok(descriptor.freeze())
    }

    /// The central directory and its end record.
    pub fn finish(self) -> Bytes {
        let entries = self.plan.entries.len() as u16;
        let mut tail = self.central;
        let central_size = tail.len() as u32;
        tail.put_u32_le(0x0605_4b50);
        tail.put_u16_le(0);
        tail.put_u16_le(0);
        tail.put_u16_le(entries);
        tail.put_u16_le(entries);
        tail.put_u32_le(central_size);
        tail.put_u32_le(self.offset as u32);
        tail.put_u16_le(0);
        tail.freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive(files: &[(&str, &[u8])]) -> Vec<u8> {
        let at = DateTime::parse_from_rfc3339("2026-11-24T10:20:30Z").unwrap().with_timezone(&Utc);
        let entries =
            files.iter().map(|(name, data)| ZipEntry { name: (*name).into(), size: data.len() as u64, modified: at });
        let plan = ZipPlan::new(entries.collect()).unwrap();
        let size = plan.archive_size();
        let mut writer = plan.writer();
        let mut out = Vec::new();
        for (_, data) in files {
            let (header, _) = writer.start_entry().unwrap();
            out.extend_from_slice(&header);
            writer.data(data);
            out.extend_from_slice(data);
            out.extend_from_slice(&writer.end_entry().unwrap());
        }
        assert!(writer.start_entry().is_none());
        out.extend_from_slice(&writer.finish());
        assert_eq!(out.len() as u64, size, "the size was known in advance");
        out
    }

    #[test]
    fn an_archive_reads_back_with_pythons_zipfile() {
        let bytes = archive(&[("a.txt", b"hello\n"), ("sub/b.bin", &[0u8, 1, 2, 255]), ("empty", b"")]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.zip");
        std::fs::write(&path, &bytes).unwrap();
        // Python's zipfile checks every CRC and size against the central directory.
        let check = "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); assert z.testzip() is None; \
                     print(sorted((i.filename, i.file_size, i.date_time) for i in z.infolist())); \
                     print(z.read('a.txt'))";
        let out = std::process::Command::new("python3").args(["-c", check]).arg(&path).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            "[('a.txt', 6, (2026, 11, 24, 10, 20, 30)), ('empty', 0, (2026, 11, 24, 10, 20, 30)), \
             ('sub/b.bin', 4, (2026, 11, 24, 10, 20, 30))]\nb'hello\\n'\n"
        );
    }

    #[test]
    fn a_short_entry_and_a_zip64_archive_are_refused() {
        let at = Utc::now();
        let plan = ZipPlan::new(vec![ZipEntry { name: "x".into(), size: 3, modified: at }]).unwrap();
        let mut writer = plan.writer();
        writer.start_entry().unwrap();
        writer.data(b"ab");
        assert!(matches!(writer.end_entry(), Err(ZipError::WrongSize { expected: 3, actual: 2, .. })));
        let huge = ZipEntry { name: "big".into(), size: 5 << 30, modified: at };
        assert!(matches!(ZipPlan::new(vec![huge]), Err(ZipError::TooLarge(_))));
    }
}
