//! The guide's references are generated, not written twice, and stay true: the CLI reference is
//! the commands' own `--help`, the configuration pages are what `default-config` prints, the
//! API's page is `openapi/v1.json`; every command has a man page and a mention in the guide's
//! own words. `MISSION_UPDATE_DOCS=1` rewrites the generated pages after a deliberate change.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::BIN;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `mission ARGS`'s stdout, in an empty environment (help shows the environment's values).
fn mission(args: &[&str]) -> String {
    let out = std::process::Command::new(BIN).args(args).env_clear().output().unwrap();
    assert!(out.status.success(), "mission {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Checks that the committed `docs/src/reference/NAME` is `generated`, or rewrites it with
/// `MISSION_UPDATE_DOCS=1`.
fn keep(name: &str, generated: &str) {
    let path = repository().join("docs/src/reference").join(name);
    if std::env::var_os("MISSION_UPDATE_DOCS").is_some() {
        std::fs::write(&path, generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/src/reference/{name} is not what the code says now; rewrite it with \
         MISSION_UPDATE_DOCS=1 cargo nextest run -p mission-cli --test cli manual:: and commit it"
    );
}

#[test]
fn the_guides_references_are_generated_from_the_code() {
    keep("cli.md", &mission(&["cli-reference"]));
    keep("server.toml", &mission(&["server", "default-config"]));
    keep("lz.toml", &mission(&["lz", "default-config"]));
    let document: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(repository().join("openapi/v1.json")).unwrap()).unwrap();
    keep("api-operations.md", &api_operations(&document));
}

/// The API's operations by tag, from its OpenAPI document.
fn api_operations(document: &serde_json::Value) -> String {
    let mut by_tag: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (path, operations) in document["paths"].as_object().unwrap() {
        for (method, operation) in operations.as_object().unwrap() {
            let Some(summary) = operation["summary"].as_str() else { continue };
            let tag = operation["tags"][0].as_str().unwrap_or("other").to_owned();
            let summary = summary.split_whitespace().collect::<Vec<_>>().join(" ").replace('|', "\\|");
            let row = format!("| `{}` | `{path}` | {summary} |", method.to_uppercase());
            by_tag.entry(tag).or_default().push(row);
        }
    }
    let mut page = String::from(
        "# The HTTP API's operations\n\n\
         Every operation of `/api/v1`, from the OpenAPI document the server serves at \
         `/api/v1/openapi.json` (`openapi/v1.json` in the repository, which has the request and \
         answer schemas). Sign-in, the API's lifecycle and the rules all operations share are in \
         [The HTTP API and its lifecycle](http-api.md).\n",
    );
    for (tag, rows) in by_tag {
        page.push_str(&format!("\n## {tag}\n\n| method | path | what it does |\n|---|---|---|\n"));
        for row in rows {
            page.push_str(&row);
            page.push('\n');
        }
    }
    page
}

/// The hand-written guide: the README and every chapter but the generated reference.
fn guide_text() -> String {
    let mut text = std::fs::read_to_string(repository().join("README.md")).unwrap();
    let mut dirs = vec![repository().join("docs/src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") && !path.ends_with("reference/cli.md") {
                text.push_str(&std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    text
}

#[test]
fn every_command_has_a_man_page_and_a_place_in_the_guide() {
    let reference = mission(&["cli-reference"]);
    let commands: Vec<&str> = reference.lines().filter_map(|line| line.strip_prefix("## ")).collect();
    assert!(commands.len() > 50, "{commands:?}");
    let dir = tempfile::tempdir().unwrap();
    let wrote = mission(&["man-pages", dir.path().to_str().unwrap()]);
    assert!(wrote.starts_with(&format!("Wrote {} man pages", commands.len())), "{wrote}");
    for command in &commands {
        let page = dir.path().join(format!("{}.1", command.replace(' ', "-")));
        let text = std::fs::read_to_string(&page).unwrap_or_else(|_| panic!("no man page for {command}"));
        let name = command.replace(['-', ' '], "\\-");
        assert!(text.contains(".TH ") && text.contains(&format!("{name} \\-")), "{command}'s page names it: {text}");
    }
    let guide = guide_text();
    let unmentioned: Vec<&&str> =
        commands.iter().filter(|command| command.split(' ').count() == 2 && !names(&guide, command)).collect();
    assert!(unmentioned.is_empty(), "commands the guide never names (only its generated reference): {unmentioned:?}");
}

/// Whether `text` names `command` as a whole (`mission run`, not only `mission runner`).
fn names(text: &str, command: &str) -> bool {
    text.match_indices(command)
        .any(|(at, _)| text[at + command.len()..].chars().next().is_none_or(|c| !c.is_ascii_alphanumeric() && c != '-'))
}
