//! An image archive's own names, taken out before Podman loads it.
//!
//! Podman gives a loaded image the names its archive carries (a docker archive's
//! `manifest.json` `RepoTags`, an OCI archive's `index.json` name annotations), taking each from
//! whatever image held it: an archive naming `localhost/mission-image-{agent}:{digest}` would
//! take another user's image's name, and one naming a host image's would strip it. The agent
//! loads an image by its own name alone, so it rewrites those files in the downloaded archive,
//! in place, without the names: JSON allows the blanks that keep each file its size, so no other
//! byte of the archive moves.
//!
//! A Slurm gateway takes the names out of the archive it stages for its nodes the same way.
//!
//! Both readers are covered: containers/image reads a docker archive's first `manifest.json`
//! (by cleaned path, a symbolic link followed), an OCI archive is unpacked, its last `index.json`
//! written wins. Every entry whose cleaned path is either file is rewritten, and an archive where
//! one is anything but a regular file is refused.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use mission_api::images::{MAX_ARCHIVE_INDEX_BYTES, NAME_ANNOTATIONS};
use mission_api::tar::{self, BLOCK, Header};

/// Why an image archive cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ArchiveError {
    /// It cannot be read or written.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// It ends in the middle of an entry.
    #[error("the archive ends in the middle of an entry")]
    Cut,
    /// A tar header is not one.
    #[error("{0}")]
    Header(String),
    /// A pax header's size is not a number.
    #[error("a pax size is not a number")]
    PaxSize,
    /// An entry the names are read from is larger than they may be.
    #[error("{what} is larger than {MAX_ARCHIVE_INDEX_BYTES} bytes")]
    TooLarge {
        /// Which entry.
        what: String,
    },
    /// Its `manifest.json` or `index.json` is not a regular file.
    #[error("its {0} is not a regular file")]
    NotAFile(String),
    /// Its `manifest.json` or `index.json` cannot be read or rewritten.
    #[error("its {name}: {why}")]
    Naming {
        /// Which file.
        name: String,
        /// Why.
        why: NamingError,
    },
    /// The blocking task that read it failed.
    #[error("{0}")]
    Task(#[from] tokio::task::JoinError),
}

/// Why the names of a `manifest.json` or `index.json` cannot be taken out.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NamingError {
    /// It is not JSON.
    #[error("not JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A manifest that is not a list of images.
    #[error("not a list of images")]
    NotAList,
    /// Without its names it is no shorter (it cannot be written back in place).
    #[error("cannot be written back within its size")]
    TooLong,
}

/// [`strip`] on a blocking thread, for the agent's tasks.
pub(crate) async fn strip_before_loading(path: PathBuf) -> Result<usize, ArchiveError> {
    tokio::task::spawn_blocking(move || strip(&path)).await?
}

/// Rewrites the archive at `path` without the names it gives its images; answers how many it
/// gave.
fn strip(path: &Path) -> Result<usize, ArchiveError> {
    let mut file = File::options().read(true).write(true).open(path)?;
    let length = file.metadata()?.len();
    let cut = || ArchiveError::Cut;
    let (mut offset, mut removed) = (0, 0);
    // What a pax or GNU header says of the next entry: its path, its size.
    let (mut long_path, mut long_size): (Option<String>, Option<u64>) = (None, None);
    loop {
        let mut block = [0u8; BLOCK];
        read_at(&mut file, offset, &mut block).map_err(|_| cut())?;
        if block.iter().all(|&b| b == 0) {
            return Ok(removed);
        }
        let mut header = Header::parse(&block).map_err(ArchiveError::Header)?;
        header.size = long_size.take().unwrap_or(header.size);
        let data = offset + BLOCK as u64;
        let next = header.padded_size().and_then(|n| n.checked_add(data)).filter(|&next| next <= length);
        let next = next.ok_or_else(cut)?;
        match header.kind {
            b'L' => long_path = Some(tar::field(&read_bounded(&mut file, data, header.size, "a long name")?)),
            b'x' => {
                let extended = read_bounded(&mut file, data, header.size, "an extended header")?;
                for (key, value) in tar::pax_records(&extended) {
                    match key {
                        "path" => long_path = Some(value.to_owned()),
                        "size" => long_size = Some(value.parse().map_err(|_| ArchiveError::PaxSize)?),
                        _ => {}
                    }
                }
            }
            _ => {
                let name = tar::clean_path(&long_path.take().unwrap_or(header.path.clone()));
                if name == "manifest.json" || name == "index.json" {
                    if !header.is_file() {
                        return Err(ArchiveError::NotAFile(name));
                    }
                    let json = read_bounded(&mut file, data, header.size, &name)?;
                    let (unnamed, count) =
                        unnamed(&name, &json).map_err(|why| ArchiveError::Naming { name: name.clone(), why })?;
                    file.seek(SeekFrom::Start(data)).and_then(|_| file.write_all(&unnamed))?;
                    removed += count;
                }
            }
        }
        offset = next;
    }
}

/// `json` (the `naming` file) without the names it gives, padded with blanks to its size; and
/// how many names it gave.
fn unnamed(naming: &str, json: &[u8]) -> Result<(Vec<u8>, usize), NamingError> {
    let mut value: serde_json::Value = serde_json::from_slice(json)?;
    let mut count = 0;
    if naming == "manifest.json" {
        for entry in value.as_array_mut().ok_or(NamingError::NotAList)? {
            let tags = entry.as_object_mut().ok_or(NamingError::NotAList)?.remove("RepoTags");
            count += tags.as_ref().and_then(|tags| tags.as_array()).map_or(0, Vec::len);
        }
    } else if let Some(manifests) = value.get_mut("manifests").and_then(|m| m.as_array_mut()) {
        for annotations in manifests.iter_mut().filter_map(|d| d.get_mut("annotations")?.as_object_mut()) {
            count += NAME_ANNOTATIONS.iter().filter(|key| annotations.remove(**key).is_some()).count();
        }
    }
    let mut out = serde_json::to_vec(&value)?;
    if out.len() > json.len() {
        return Err(NamingError::TooLong);
    }
    out.resize(json.len(), b' ');
    Ok((out, count))
}

/// The `size` bytes at `offset`, at most [`MAX_ARCHIVE_INDEX_BYTES`] of them.
fn read_bounded(file: &mut File, offset: u64, size: u64, what: &str) -> Result<Vec<u8>, ArchiveError> {
    if size > MAX_ARCHIVE_INDEX_BYTES {
        return Err(ArchiveError::TooLarge { what: what.to_owned() });
    }
    let mut bytes = vec![0; size as usize];
    read_at(file, offset, &mut bytes)?;
    Ok(bytes)
}

fn read_at(file: &mut File, offset: u64, into: &mut [u8]) -> std::io::Result<()> {
    file.seek(SeekFrom::Start(offset)).and_then(|_| file.read_exact(into))
}

#[cfg(test)]
mod tests {
    use mission_api::tar::archive as tar;

    use super::*;

    /// What [`strip`] answers of `archive` (its error in words), and the archive after.
    fn stripped(archive: &[u8]) -> (Result<usize, String>, Vec<u8>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.tar");
        std::fs::write(&path, archive).unwrap();
        let result = strip(&path).map_err(|e| e.to_string());
        (result, std::fs::read(&path).unwrap())
    }

    #[test]
    fn every_name_goes_and_every_other_byte_stays() {
        let layer = vec![9u8; 3000];
        let manifest =
            br#"[{"Config":"c.json","RepoTags":["localhost/mission-image-x:ab","debian:12"],"Layers":["l.tar"]}]"#;
        let docker = tar(&[("l.tar", b'0', &layer), ("./manifest.json", b'0', manifest)]);
        let (result, after) = stripped(&docker);
        assert_eq!(result, Ok(2));
        assert_eq!(after.len(), docker.len());
        let text = String::from_utf8_lossy(&after);
        assert!(!text.contains("RepoTags") && !text.contains("mission-image"), "{text}");
        assert!(text.contains(r#"{"Config":"c.json","Layers":["l.tar"]}]   "#), "{text}");
        assert_eq!(&after[..512 + 3000], &docker[..512 + 3000], "the layer is untouched");

        let index = br#"{"schemaVersion":2,"manifests":[{"digest":"sha256:ab","annotations":
            {"org.opencontainers.image.ref.name":"victim","io.containerd.image.name":"v","other":"kept"}}]}"#;
        // Two index.json (the last one written wins on unpacking), one by a dotted path.
        let oci =
            tar(&[("oci-layout", b'0', b"{}"), ("index.json", b'0', index), ("blobs/../index.json", b'0', index)]);
        let (result, after) = stripped(&oci);
        assert_eq!(result, Ok(4));
        let text = String::from_utf8_lossy(&after);
        assert!(!text.contains("victim") && !text.contains("image.name") && text.contains("kept"), "{text}");
    }

    #[test]
    fn names_hidden_in_extended_headers_or_links_are_found_or_refused() {
        // A pax header gives the entry its real path.
        let manifest = br#"[{"RepoTags":["localhost/mission-image-x:ab"]}]"#;
        let pax = b"22 path=manifest.json\n";
        let hidden = tar(&[("PaxHeaders/x", b'x', pax), ("innocent.json", b'0', manifest)]);
        let (result, after) = stripped(&hidden);
        assert_eq!(result, Ok(1));
        assert!(!String::from_utf8_lossy(&after).contains("mission-image"));
        let link = tar(&[("manifest.json", b'2', b""), ("other.json", b'0', manifest)]);
        assert!(stripped(&link).0.unwrap_err().contains("not a regular file"));
        let cut = &tar(&[("manifest.json", b'0', manifest)])[..600];
        assert!(stripped(cut).0.unwrap_err().contains("ends in the middle"));
    }
}
