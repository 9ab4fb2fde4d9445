//! Tells what kind of image archive an upload is, as its bytes stream in: a tar archive (each
//! header's checksum checked) that holds an OCI image layout (`oci-layout` and `index.json`) or
//! a docker archive (`manifest.json`). Nothing is kept but the names of the archive's top-level
//! files and its index or manifest, read for the names it gives its images: an archive that
//! names one in the landing zones' own namespace (`mission-image…`, where agents name what they
//! loaded) is refused. The landing zone's container engine reads the image itself, and loads it
//! with no name of the archive's (the agent takes them out first).
//!
//! A refusal is known as soon as the bytes that show it arrive ([`ArchiveSniffer::refusal`]):
//! the upload stops there instead of being read and stored whole.

use mission_api::ImageFormat;
use mission_api::images::{AGENTS_REPOSITORY, MAX_ARCHIVE_INDEX_BYTES, NAME_ANNOTATIONS};
use mission_api::tar::{self, BLOCK, Header};

/// An archive's file that names its images.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Naming {
    /// An OCI layout's `index.json`: names in `manifests[].annotations`.
    OciIndex,
    /// A docker archive's `manifest.json`: names in `[].RepoTags`.
    DockerManifest,
}

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
    /// The index or manifest being read: which, its bytes so far, and how many are still to come.
    naming: Option<(Naming, Vec<u8>, u64)>,
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
                self.read_naming(&bytes[..n]);
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

    fn read_header(&mut self, block: &[u8]) {
        let block: &[u8; BLOCK] = block.try_into().expect("a whole block");
        if block.iter().all(|&b| b == 0) {
            self.ended = true;
            return;
        }
        let header = match Header::parse(block) {
            Ok(header) => header,
            Err(why) => {
                self.broken = Some(format!("it is not a tar archive ({why})"));
                return;
            }
        };
        let Some(padded) = header.padded_size() else {
            self.broken = Some(format!("it is not a tar archive (an entry claims {} bytes)", header.size));
            return;
        };
        self.skip = padded;
        let size = header.size;
        let name = tar::clean_path(&header.path);
        let name = name.as_str();
        // Only regular files at the top level tell the format. (An archive may hide a name
        // behind a pax header; the agent, which reads those too, takes every name out before
        // it loads an image.)
        if header.is_file() {
            let naming = match name {
                "oci-layout" => {
                    self.oci_layout = true;
                    None
                }
                "index.json" => {
                    self.oci_index = true;
                    Some(Naming::OciIndex)
                }
                "manifest.json" => {
                    self.docker_manifest = true;
                    Some(Naming::DockerManifest)
                }
                _ => None,
            };
            if let Some(naming) = naming {
                if size > MAX_ARCHIVE_INDEX_BYTES {
                    self.broken = Some(format!("its {name} is larger than {MAX_ARCHIVE_INDEX_BYTES} bytes"));
                    return;
                }
                self.naming = Some((naming, Vec::with_capacity(size as usize), size));
                self.read_naming(&[]);
            }
        }
    }

    /// Takes `data`, the next bytes of the current entry (padding included), where it is the
    /// index or manifest; once it is whole, checks the names it gives.
    fn read_naming(&mut self, data: &[u8]) {
        let Some((naming, read, left)) = &mut self.naming else { return };
        let n = (*left).min(data.len() as u64) as usize;
        read.extend_from_slice(&data[..n]);
        *left -= n as u64;
        if *left > 0 {
            return;
        }
        let (naming, read) = (*naming, std::mem::take(read));
        self.naming = None;
        if let Err(why) = check_names(naming, &read) {
            self.broken = Some(why);
        }
    }

    /// Why the stream is refused, as soon as that is known (before it ends).
    pub fn refusal(&self) -> Option<&str> {
        self.broken.as_deref()
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

/// Refuses an index or manifest that is no JSON of its kind, or that names an image in the
/// agents' namespace.
fn check_names(naming: Naming, json: &[u8]) -> Result<(), String> {
    let (file, names): (&str, Vec<String>) = match naming {
        Naming::OciIndex => {
            #[derive(serde::Deserialize)]
            struct Index {
                #[serde(default)]
                manifests: Vec<Descriptor>,
            }
            #[derive(serde::Deserialize)]
            struct Descriptor {
                #[serde(default)]
                annotations: std::collections::BTreeMap<String, String>,
            }
            let index: Index =
                serde_json::from_slice(json).map_err(|e| format!("its index.json is not an OCI image index: {e}"))?;
            let names = index
                .manifests
                .into_iter()
                .flat_map(|mut d| NAME_ANNOTATIONS.into_iter().filter_map(move |key| d.annotations.remove(key)))
                .collect();
            ("index.json", names)
        }
        Naming::DockerManifest => {
            #[derive(serde::Deserialize)]
            struct Entry {
                #[serde(rename = "RepoTags", default)]
                repo_tags: Option<Vec<String>>,
            }
            let entries: Vec<Entry> = serde_json::from_slice(json)
                .map_err(|e| format!("its manifest.json is not a docker archive's manifest: {e}"))?;
            ("manifest.json", entries.into_iter().flat_map(|e| e.repo_tags.unwrap_or_default()).collect())
        }
    };
    match names.iter().find(|name| in_agents_namespace(name)) {
        Some(name) => Err(format!(
            "its {file} names an image {name:?}, in the namespace landing zones name the images they load in \
             ({}…): save the image under another name (or none)",
            agents_namespace()
        )),
        None => Ok(()),
    }
}

/// The last part of [`AGENTS_REPOSITORY`] (`mission-image`): a name whose repository's last part
/// starts with it, from whichever registry, is the agents'.
fn agents_namespace() -> &'static str {
    AGENTS_REPOSITORY.rsplit('/').next().unwrap_or(AGENTS_REPOSITORY)
}

/// Whether an image name (`[registry/]path[:tag]`, any case) is in [`agents_namespace`].
fn in_agents_namespace(name: &str) -> bool {
    let repository = name.split(['@']).next().unwrap_or(name);
    let last = repository.rsplit('/').next().unwrap_or(repository);
    last.to_ascii_lowercase().starts_with(agents_namespace())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tar archive of regular `files` (name, content).
    fn tar(files: &[(&str, &[u8])]) -> Vec<u8> {
        let entries: Vec<(&str, u8, &[u8])> = files.iter().map(|(name, data)| (*name, b'0', *data)).collect();
        tar::archive(&entries)
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
    fn an_archive_naming_an_image_in_the_agents_namespace_is_refused_as_soon_as_its_names_arrive() {
        let layer = vec![7u8; 4000];
        let victim = br#"[{"Config":"c.json","RepoTags":["localhost/mission-image-lz1:0123abcd"],"Layers":[]}]"#;
        let docker = tar(&[("manifest.json", victim), ("layer.tar", &layer)]);
        let mut sniffer = ArchiveSniffer::default();
        sniffer.feed(&docker[..2 * BLOCK]);
        let why = sniffer.refusal().expect("refused before the layer arrives").to_owned();
        assert!(why.contains("mission-image-lz1"), "{why}");
        let index = br#"{"schemaVersion":2,"manifests":[{"annotations":
            {"org.opencontainers.image.ref.name":"Mission-Image-x:1"}}]}"#;
        let oci = tar(&[("oci-layout", b"{}"), ("index.json", index)]);
        assert!(sniff(&oci, 7).unwrap_err().contains("Mission-Image-x"));
        // Other names, or none, are fine (the agent loads the image without them).
        let named = tar(&[("manifest.json", br#"[{"RepoTags":["docker.io/library/debian:12","mission:1"]}]"#)]);
        assert_eq!(sniff(&named, 3), Ok(ImageFormat::Docker));
        let unnamed = tar(&[("oci-layout", b"{}"), ("index.json", br#"{"manifests":[{}]}"#)]);
        assert_eq!(sniff(&unnamed, 100), Ok(ImageFormat::Oci));
        assert!(sniff(&tar(&[("manifest.json", b"{not json")]), 64).unwrap_err().contains("not a docker archive"));
    }

    #[test]
    fn an_entry_of_any_claimed_size_is_refused_without_overflow() {
        let mut huge = tar(&[("layer.tar", b"")]);
        // 2^64 - 1 in base-256: a size that fits, but not once rounded up to whole blocks.
        let block: &mut [u8; BLOCK] = (&mut huge[..BLOCK]).try_into().unwrap();
        block[124..128].copy_from_slice(&[0x80, 0, 0, 0]);
        block[128..136].copy_from_slice(&[0xff; 8]);
        tar::seal(block);
        let why = sniff(&huge, 512).unwrap_err();
        assert!(why.contains("claims 18446744073709551615 bytes"), "{why}");
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
