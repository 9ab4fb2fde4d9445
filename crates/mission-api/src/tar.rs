//! The parts of a tar archive's headers that both ends read of an image archive: the server, which
//! tells an upload's kind as it streams in, and the agent, which takes an archive's image names
//! out before it loads it; and the archives tests write.

/// The size of a tar block: each header is one, each entry's data fills whole ones.
pub const BLOCK: usize = 512;

/// What one header says of its entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Its path, from the name and ustar prefix fields (`prefix/name`).
    pub path: String,
    /// Its size in bytes (what its data holds; whole blocks follow it).
    pub size: u64,
    /// Its type flag (`b'0'` or 0 for a regular file, `b'x'` a pax header, `b'L'` a GNU long
    /// name…).
    pub kind: u8,
}

impl Header {
    /// Reads a header block (not the end-of-archive block, which is all zeros); why it is no
    /// header otherwise.
    pub fn parse(block: &[u8; BLOCK]) -> Result<Self, String> {
        let checksum = octal(&block[148..156]).ok_or("a header's checksum is not a number")?;
        let sum: u64 =
            block.iter().enumerate().map(|(i, &b)| if (148..156).contains(&i) { 32 } else { u64::from(b) }).sum();
        if sum != checksum {
            return Err("a header's checksum does not match".into());
        }
        let size = entry_size(&block[124..136]).ok_or("an entry's size is not a number")?;
        let (prefix, name) = (field(&block[345..500]), field(&block[..100]));
        let path = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
        Ok(Header { path, size, kind: block[156] })
    }

    /// Bytes from the start of its data to the next header: its size in whole blocks; `None`
    /// for a size no archive can have.
    pub fn padded_size(&self) -> Option<u64> {
        self.size.div_ceil(BLOCK as u64).checked_mul(BLOCK as u64)
    }

    /// Whether the entry is a regular file.
    pub fn is_file(&self) -> bool {
        matches!(self.kind, b'0' | 0 | b'7')
    }

    /// A ustar header block of a regular file (`kind` `b'0'`) or another entry, as `tar` writes it.
    pub fn block(path: &str, kind: u8, size: u64) -> [u8; BLOCK] {
        let mut block = [0u8; BLOCK];
        block[..path.len()].copy_from_slice(path.as_bytes());
        block[100..108].copy_from_slice(b"0000644\0");
        block[124..136].copy_from_slice(format!("{size:011o}\0").as_bytes());
        block[156] = kind;
        block[257..263].copy_from_slice(b"ustar\0");
        seal(&mut block);
        block
    }
}

/// Writes a header block's checksum (after any change to it).
pub fn seal(block: &mut [u8; BLOCK]) {
    block[148..156].copy_from_slice(b"        ");
    let sum: u64 = block.iter().map(|&b| u64::from(b)).sum();
    block[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
}

/// A tar archive of `entries` (path, type flag, data), ended as `tar` ends one.
pub fn archive(entries: &[(&str, u8, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (path, kind, data) in entries {
        out.extend_from_slice(&Header::block(path, *kind, data.len() as u64));
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(BLOCK) * BLOCK, 0);
    }
    out.extend_from_slice(&[0; 2 * BLOCK]);
    out
}

/// The records (`LEN key=value\n`) of a pax extended header's data.
pub fn pax_records(data: &[u8]) -> Vec<(&str, &str)> {
    let text = std::str::from_utf8(data).unwrap_or_default();
    let mut records = Vec::new();
    let mut rest = text;
    while let Some((length, _)) = rest.split_once(' ') {
        let Some(record) = length.parse::<usize>().ok().and_then(|n| rest.get(..n)) else { break };
        rest = &rest[record.len()..];
        let body = record.split_once(' ').map_or("", |(_, body)| body).trim_end_matches('\n');
        if let Some((key, value)) = body.split_once('=') {
            records.push((key, value));
        }
    }
    records
}

/// An entry's path as the readers of image archives take it: `.` and empty parts dropped, `..`
/// taking the part before it away, leading slashes gone (containers/image cleans a docker
/// archive's paths so, and an OCI archive is unpacked under one folder).
pub fn clean_path(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    parts.join("/")
}

/// A NUL-terminated text field.
pub fn field(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// An octal number field (spaces and NULs around it allowed).
fn octal(bytes: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(bytes).ok()?.trim_matches(|c: char| c == ' ' || c == '\0');
    if text.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(text, 8).ok()
}

/// An entry's size: octal, or GNU's base-256 for sizes of 8 GiB and more.
fn entry_size(bytes: &[u8]) -> Option<u64> {
    if bytes[0] & 0x80 != 0 {
        let mut size: u64 = u64::from(bytes[0] & 0x7f);
        for &b in &bytes[1..] {
            size = size.checked_mul(256)?.checked_add(u64::from(b))?;
        }
        return Some(size);
    }
    octal(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_read_back_what_was_written_and_refuse_what_is_broken() {
        let mut block = Header::block("a/b.json", b'0', 1300);
        let header = Header::parse(&block).unwrap();
        assert_eq!(header, Header { path: "a/b.json".into(), size: 1300, kind: b'0' });
        assert_eq!(header.padded_size(), Some(1536));
        // 2^64 - 1 in base-256: a size that fits, but not once rounded up to whole blocks.
        block[124..128].copy_from_slice(&[0x80, 0, 0, 0]);
        block[128..136].copy_from_slice(&[0xff; 8]);
        seal(&mut block);
        assert_eq!(Header::parse(&block).unwrap().padded_size(), None);
        block[0] = b'z';
        assert!(Header::parse(&block).unwrap_err().contains("checksum does not match"));
        assert_eq!(clean_path("./a//b/../manifest.json"), "a/manifest.json");
        assert_eq!(clean_path("/../index.json"), "index.json");
        assert_eq!(pax_records(b"22 path=manifest.json\n10 size=9\n"), [("path", "manifest.json"), ("size", "9")]);
    }
}
