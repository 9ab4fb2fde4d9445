//! Tells what kind of image archive an upload is, as its bytes stream in: a tar archive (each
//! header's checksum checked) that holds an OCI image layout (`oci-layout` and `index.json`) or
//! a docker archive (`manifest.json`). Nothing is kept but the names of the archive's top-level
//! files; the landing zone's container engine reads the image itself.

use mission_api::ImageFormat;

/// The size of a tar block.
const BLOCK: usize = 512;

/// Reads a tar stream a chunk at a time; see the module docs.
#[derive(Debug, Default)]
pub struct ArchiveSniffer {
    /// The header being gathered.
    header: Vec<u8>,
    /// Bytes of the current entry (its data and padding) still to skip.
    skip: u64,
    /// Bytes seen.
    seen: u64,
    /// The top-level names that tell the format.
    oci_layout: bool,
    oci_index: bool,
    docker_manifest: bool,
    /// The end-of-archive block was read.
    ended: bool,
    /// Why the stream is not a tar archive, once that is known.
    broken: Option<String>,
}

impl ArchiveSniffer {
    /// Takes the next bytes of the stream.
    pub fn feed(&mut self, mut bytes: &[u8]) {
        if self.seen == 0 && bytes.starts_with(&[0x1f, 0x8b]) {
            self.broken = Some("it is gzip-compressed: upload the tar archive itself (gunzip it first)".into());
        }
        self.seen += bytes.len() as u64;
        while !bytes.is_empty() && !self.ended && self.broken.is_none() {
            if self.skip > 0 {
                let n = (self.skip.min(bytes.len() as u64)) as usize;
                self.skip -= n as u64;
                bytes = &bytes[n..];
                continue;
            }
            let n = (BLOCK - self.header.len()).min(bytes.len());
            self.header.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if self.header.len() == BLOCK {
                let header = std::mem::take(&mut self.header);
                self.read_header(&header);
            }
        }
    }

    fn read_header(&mut self, header: &[u8]) {
        if header.iter().all(|&b| b == 0) {
            self.ended = true;
            return;
        }
        let Some(checksum) = octal(&header[148..156]) else {
            self.broken = Some("it is not a tar archive (a header's checksum is not a number)".into());
            return;
        };
        let sum: u64 =
            header.iter().enumerate().map(|(i, &b)| if (148..156).contains(&i) { 32 } else { u64::from(b) }).sum();
        if sum != checksum {
            self.broken = Some("it is not a tar archive (a header's checksum does not match)".into());
            return;
        }
        let Some(size) = entry_size(&header[124..136]) else {
            self.broken = Some("it is not a tar archive (an entry's size is not a number)".into());
            return;
        };
        self.skip = size.div_ceil(BLOCK as u64) * BLOCK as u64;
        let name = field(&header[..100]);
        let name = name.strip_prefix("./").unwrap_or(&name);
        // Only regular files at the top level tell the format (ustar's prefix field is for long
        // names, which these are not).
        if matches!(header[156], b'0' | 0) && field(&header[345..500]).is_empty() {
            match name {
                "oci-layout" => self.oci_layout = true,
                "index.json" => self.oci_index = true,
                "manifest.json" => self.docker_manifest = true,
                _ => {}
            }
        }
    }

    /// What the whole stream was: the image format, or why it is not an image archive.
    pub fn format(&self) -> Result<ImageFormat, String> {
        let not = |why: &str| Err(format!("the body is not an image archive: {why}"));
        if let Some(why) = &self.broken {
            return not(why);
        }
        if self.seen == 0 {
            return not("it is empty");
        }
        if !self.header.is_empty() || self.skip > 0 {
            return not("the tar archive ends in the middle of an entry");
        }
        if self.oci_layout && self.oci_index {
            Ok(ImageFormat::Oci)
        } else if self.docker_manifest {
            Ok(ImageFormat::Docker)
        } else {
            not("it holds neither an OCI image layout (oci-layout, index.json) nor a docker archive's manifest.json; \
                 make one with `podman save --format oci-archive` or `docker save`")
        }
    }
}

/// A NUL- or space-terminated text field of a header.
fn field(bytes: &[u8]) -> String {
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

    /// A tar archive of `files` (name, content), as `tar` writes it.
    fn tar(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, content) in files {
            let mut header = [0u8; BLOCK];
            header[..name.len()].copy_from_slice(name.as_bytes());
            header[100..108].copy_from_slice(b"0000644\0");
            header[124..136].copy_from_slice(format!("{:011o}\0", content.len()).as_bytes());
            header[156] = b'0';
            header[257..263].copy_from_slice(b"ustar\0");
            header[148..156].copy_from_slice(b"        ");
            let sum: u64 = header.iter().map(|&b| u64::from(b)).sum();
            header[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
            out.extend_from_slice(&header);
            out.extend_from_slice(content);
            out.resize(out.len().div_ceil(BLOCK) * BLOCK, 0);
        }
        out.extend_from_slice(&[0; 2 * BLOCK]);
        out
    }

    /// Feeds `bytes` in chunks of `chunk` bytes.
    fn sniff(bytes: &[u8], chunk: usize) -> Result<ImageFormat, String> {
        let mut sniffer = ArchiveSniffer::default();
        for piece in bytes.chunks(chunk) {
            sniffer.feed(piece);
        }
        sniffer.format()
    }

    #[test]
    fn oci_and_docker_archives_are_told_apart_in_chunks_of_any_size() {
        let layer = vec![7u8; 1300];
        let oci = tar(&[("oci-layout", b"{}"), ("blobs/sha256/ab", &layer), ("index.json", b"{}")]);
        let docker = tar(&[("./abc/layer.tar", &layer), ("./manifest.json", b"[]")]);
        for chunk in [1, 7, 512, 100_000] {
            assert_eq!(sniff(&oci, chunk), Ok(ImageFormat::Oci), "chunk {chunk}");
            assert_eq!(sniff(&docker, chunk), Ok(ImageFormat::Docker), "chunk {chunk}");
        }
    }

    #[test]
    fn what_is_not_an_image_archive_is_refused_saying_why() {
        let why = |bytes: &[u8]| sniff(bytes, 4096).unwrap_err();
        assert!(why(b"").contains("empty"));
        assert!(why(&[0x1f, 0x8b, 8, 0, 0, 0]).contains("gzip"));
        assert!(why(&[b'x'; 2048]).contains("not a tar archive"), "{}", why(&[b'x'; 2048]));
        let plain = tar(&[("notes.txt", b"hello")]);
        assert!(why(&plain).contains("neither an OCI image layout"));
        let mut cut = tar(&[("oci-layout", b"{}"), ("index.json", &[1u8; 2000])]);
        cut.truncate(BLOCK * 3);
        assert!(why(&cut).contains("ends in the middle"), "{}", why(&cut));
        // A header whose checksum is off by one.
        let mut bad = tar(&[("manifest.json", b"[]")]);
        bad[0] = b'n';
        assert!(why(&bad).contains("checksum does not match"));
    }
}
