//! `key=value` labels as the `jobs` and `missions` commands take and show them.

use mission_client::Labels;

/// A `key=value` label as `--label` takes it, checked as the server checks it.
pub fn parse_label_arg(pair: &str) -> Result<(String, String), String> {
    mission_client::labels::parse_label(pair).map_err(|e| e.problem)
}

/// Labels as `key=value`, comma-separated.
pub fn labels_text(labels: &Labels) -> String {
    labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ")
}

/// Applies the changes of a `label` command to `labels`: `key=value` sets a label, `key-`
/// removes one; the others stay.
pub fn apply_label_changes(labels: &mut Labels, changes: Vec<String>) -> anyhow::Result<()> {
    for change in changes {
        match change.strip_suffix('-').filter(|key| !key.contains('=')) {
            Some(key) => {
                labels.remove(key);
            }
            None => {
                let (key, value) = parse_label_arg(&change).map_err(anyhow::Error::msg)?;
                labels.insert(key, value);
            }
        }
    }
    Ok(())
}
