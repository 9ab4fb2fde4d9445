//! Labels: `key=value` pairs a user puts on jobs to find them again (`label=key=value` filters).
//!
//! One rule for every label, checked by the server and usable by clients before they send:
//! a key is 1 to [`MAX_LABEL_KEY_BYTES`] ASCII letters, digits, `.`, `_`, `-` and `/`, starting
//! with a letter or digit; a value is at most [`MAX_LABEL_VALUE_BYTES`] bytes without control
//! characters; a job has at most [`MAX_LABELS`].

use std::collections::BTreeMap;

/// Labels of a job, by key.
pub type Labels = BTreeMap<String, String>;

/// Most labels on one job.
pub const MAX_LABELS: usize = 32;
/// Longest label key, in bytes.
pub const MAX_LABEL_KEY_BYTES: usize = 63;
/// Longest label value, in bytes.
pub const MAX_LABEL_VALUE_BYTES: usize = 256;

/// Why labels were refused: the offending key (for the problem's `field`, `labels.{key}`) and
/// what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{problem}")]
pub struct LabelError {
    /// The key at fault; empty when the labels as a whole are (too many).
    pub key: String,
    /// What is wrong.
    pub problem: String,
}

/// [`check_label_key`]'s rule as a regular expression, without anchors.
pub const LABEL_KEY_PATTERN: &str = "[A-Za-z0-9][A-Za-z0-9._/-]{0,62}";

/// Checks a key: the characters and length every label key must have.
pub fn check_label_key(key: &str) -> Result<(), LabelError> {
    let refuse = |problem: String| Err(LabelError { key: key.to_owned(), problem });
    if key.is_empty() || key.len() > MAX_LABEL_KEY_BYTES {
        return refuse(format!("a label key has 1 to {MAX_LABEL_KEY_BYTES} characters, not {}", key.len()));
    }
    if !key.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return refuse(format!("label key {key:?} must start with a letter or digit"));
    }
    if let Some(bad) = key.chars().find(|c| !(c.is_ascii_alphanumeric() || "._-/".contains(*c))) {
        return refuse(format!("label key {key:?} has {bad:?}; keys are letters, digits, '.', '_', '-' and '/'"));
    }
    Ok(())
}

/// Checks a set of labels: how many, and each key and value.
pub fn check_labels(labels: &Labels) -> Result<(), LabelError> {
    if labels.len() > MAX_LABELS {
        return Err(LabelError {
            key: String::new(),
            problem: format!("at most {MAX_LABELS} labels, not {}", labels.len()),
        });
    }
    for (key, value) in labels {
        check_label_key(key)?;
        let refuse = |problem: String| Err(LabelError { key: key.clone(), problem });
        if value.len() > MAX_LABEL_VALUE_BYTES {
            return refuse(format!("the value of label {key:?} is over {MAX_LABEL_VALUE_BYTES} bytes"));
        }
        if value.chars().any(char::is_control) {
            return refuse(format!("the value of label {key:?} has a control character"));
        }
    }
    Ok(())
}

/// Parses one `key=value` (as `label=key=value` filters and `--label` options write a label):
/// the key is everything before the first `=`, checked; the value may be empty.
pub fn parse_label(pair: &str) -> Result<(String, String), LabelError> {
    let Some((key, value)) = pair.split_once('=') else {
        return Err(LabelError { key: pair.to_owned(), problem: format!("expected key=value, got {pair:?}") });
    };
    let labels = Labels::from([(key.to_owned(), value.to_owned())]);
    check_labels(&labels)?;
    Ok((key.to_owned(), value.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_values_and_pairs_follow_one_rule() {
        assert_eq!(parse_label("sweep=lr-0.1").unwrap(), ("sweep".into(), "lr-0.1".into()));
        assert_eq!(parse_label("team/owner=").unwrap(), ("team/owner".into(), String::new()));
        assert_eq!(parse_label("a=b=c").unwrap(), ("a".into(), "b=c".into()), "the first = splits");
        assert!(parse_label("novalue").unwrap_err().problem.contains("key=value"));
        assert!(parse_label("=x").is_err());
        assert!(parse_label("-x=1").unwrap_err().problem.contains("start with"));
        assert!(parse_label("a b=1").unwrap_err().problem.contains("' '"));
        assert!(parse_label(&format!("{}=1", "k".repeat(64))).is_err());
        assert!(parse_label(&format!("k={}", "v".repeat(257))).is_err());
        assert!(parse_label("k=line\nbreak").unwrap_err().problem.contains("control"));
        let many: Labels = (0..33).map(|i| (format!("k{i}"), String::new())).collect();
        assert_eq!(check_labels(&many).unwrap_err().key, "");
    }
}
