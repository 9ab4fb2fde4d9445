//! [`MissionPath`]: a file path inside a mission, the one place the path-traversal rule lives.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Longest mission path accepted, in bytes.
pub const MAX_PATH_BYTES: usize = 1024;
/// Longest object key accepted, in bytes, as S3 limits them: a file's key (its storage's
/// prefix, its mission's folder there, its path) may be no longer, whatever the storage.
pub const MAX_OBJECT_KEY_BYTES: usize = 1024;
/// Longest single path segment accepted, in bytes: a file name may have 255, and an upload in
/// progress adds `#` and a number to it.
pub const MAX_SEGMENT_BYTES: usize = 240;

/// A normalised path relative to a mission's root, such as `data/input.csv`.
///
/// It can only be built by [`MissionPath::parse`], which refuses anything that could leave the
/// mission: absolute paths, `..`, empty segments, NUL and other control characters, backslashes,
/// and overlong paths. A `.` segment is dropped; the result uses `/` between segments.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct MissionPath(String);

/// Why a string is not a [`MissionPath`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PathError {
    /// Nothing but `.` segments or an empty string.
    #[error("path is empty")]
    Empty,
    /// Starts with `/`.
    #[error("path must be relative to the mission root, not start with '/'")]
    Absolute,
    /// Has a `..` segment.
    #[error("path must not contain '..'")]
    ParentSegment,
    /// Has `//` or ends with `/`.
    #[error("path has an empty segment ('//' or a trailing '/')")]
    EmptySegment,
    /// Has a backslash (a Windows separator that could hide `..\`).
    #[error("path must not contain a backslash; use '/' between folders")]
    Backslash,
    /// Has NUL or another control character.
    #[error("path must not contain control characters")]
    ControlCharacter,
    /// A segment ends in `#` and digits, the form of in-progress upload files.
    #[error("path segments must not end in '#' followed by digits (reserved for uploads in progress)")]
    ReservedName,
    /// Longer than [`MAX_PATH_BYTES`] or with a segment over [`MAX_SEGMENT_BYTES`].
    #[error("path is too long (at most {MAX_PATH_BYTES} bytes, {MAX_SEGMENT_BYTES} per segment)")]
    TooLong,
    /// Within [`MAX_PATH_BYTES`], but its object key, under its storage's folder, is longer than
    /// [`MAX_OBJECT_KEY_BYTES`].
    #[error(
        "path is too long for its storage: under the storage's folder ({folder_bytes} bytes) its object key would \
         be {key_bytes} bytes, and object keys are at most {MAX_OBJECT_KEY_BYTES}"
    )]
    KeyTooLong {
        /// The bytes of the folder the path is under (a cargo bay's prefix and a mission's folder).
        folder_bytes: usize,
        /// The bytes of the whole key.
        key_bytes: usize,
    },
}

impl MissionPath {
    /// Parses and normalises `raw`.
    ///
    /// ```
    /// use mission_api::paths::{MissionPath, PathError};
    /// assert_eq!(MissionPath::parse("./data/in.csv").unwrap().as_str(), "data/in.csv");
    /// assert_eq!(MissionPath::parse("../etc/passwd"), Err(PathError::ParentSegment));
    /// ```
    pub fn parse(raw: &str) -> Result<Self, PathError> {
        if raw.len() > MAX_PATH_BYTES {
            return Err(PathError::TooLong);
        }
        if raw.chars().any(char::is_control) {
            return Err(PathError::ControlCharacter);
        }
        if raw.contains('\\') {
            return Err(PathError::Backslash);
        }
        if raw.starts_with('/') {
            return Err(PathError::Absolute);
        }
        let mut segments = Vec::new();
        for segment in raw.split('/') {
            match segment {
                "" => return Err(if raw.is_empty() { PathError::Empty } else { PathError::EmptySegment }),
                "." => {}
                ".." => return Err(PathError::ParentSegment),
                s if s.len() > MAX_SEGMENT_BYTES => return Err(PathError::TooLong),
                s if is_staging_name(s) => return Err(PathError::ReservedName),
                s => segments.push(s),
            }
        }
        if segments.is_empty() {
            return Err(PathError::Empty);
        }
        Ok(Self(segments.join("/")))
    }

    /// The normalised path.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The segments, root first.
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }

    /// The base name: the last segment.
    pub fn file_name(&self) -> &str {
        self.0.rsplit_once('/').map_or(&self.0, |(_, name)| name)
    }

    /// The folder: everything before the last segment, `""` at the top level.
    pub fn folder(&self) -> &str {
        self.0.rsplit_once('/').map_or("", |(folder, _)| folder)
    }

    /// The path for a URL: each segment percent-encoded, joined by `/`.
    ///
    /// ```
    /// use mission_api::paths::MissionPath;
    /// assert_eq!(MissionPath::parse("a b/c%d.txt").unwrap().to_url_path(), "a%20b/c%25d.txt");
    /// ```
    pub fn to_url_path(&self) -> String {
        self.segments().map(encode_segment).collect::<Vec<_>>().join("/")
    }
}

/// Percent-encodes one URL path segment: every byte but RFC 3986's unreserved characters.
pub fn encode_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Whether a file name has the form `NAME#DIGITS` that a local object store gives a file while
/// it is being written; no mission file may have it, so recovery can remove such files.
pub fn is_staging_name(name: &str) -> bool {
    name.rsplit_once('#').is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

impl fmt::Display for MissionPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for MissionPath {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        MissionPath::parse(&raw).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_and_normalises() {
        assert_eq!(MissionPath::parse("a.txt").unwrap().as_str(), "a.txt");
        assert_eq!(MissionPath::parse("./a/./b c/ü.txt").unwrap().as_str(), "a/b c/ü.txt");
        assert_eq!(MissionPath::parse("..a/b..").unwrap().as_str(), "..a/b..");
        let p = MissionPath::parse("data/raw/x#1.csv").unwrap();
        assert_eq!((p.folder(), p.file_name()), ("data/raw", "x#1.csv"));
        let top = MissionPath::parse("a.txt").unwrap();
        assert_eq!((top.folder(), top.file_name()), ("", "a.txt"));
    }

    #[test]
    fn refuses_escapes() {
        assert_eq!(MissionPath::parse(""), Err(PathError::Empty));
        assert_eq!(MissionPath::parse("./."), Err(PathError::Empty));
        assert_eq!(MissionPath::parse("/etc/passwd"), Err(PathError::Absolute));
        assert_eq!(MissionPath::parse("a/../../b"), Err(PathError::ParentSegment));
        assert_eq!(MissionPath::parse("a//b"), Err(PathError::EmptySegment));
        assert_eq!(MissionPath::parse("a/"), Err(PathError::EmptySegment));
        assert_eq!(MissionPath::parse("..\\x"), Err(PathError::Backslash));
        assert_eq!(MissionPath::parse("a\0b"), Err(PathError::ControlCharacter));
        assert_eq!(MissionPath::parse(&"a".repeat(MAX_SEGMENT_BYTES + 1)), Err(PathError::TooLong));
        assert!(MissionPath::parse(&"a".repeat(MAX_SEGMENT_BYTES)).is_ok());
        assert_eq!(MissionPath::parse("dir/file#12"), Err(PathError::ReservedName));
        assert_eq!(MissionPath::parse(&"a/".repeat(600)), Err(PathError::TooLong));
    }
}
