//! The manual, made from clap's definitions of the commands, so that `--help`, the man pages
//! and the guide's CLI reference cannot disagree: `mission man-pages DIR` writes a page for
//! `mission` and for each of its commands (the release archive ships them), and the hidden
//! `mission cli-reference` prints the guide's reference page (`docs/src/reference/cli.md`, which
//! a test keeps equal to it).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Command;

/// The width help is wrapped at, whatever the terminal: the reference reads the same everywhere.
const WIDTH: usize = 100;

/// Every command a user may type, `mission` first and then each command's own below it, with
/// its full name (`mission jobs list`); hidden commands and `help` are left out.
pub fn commands(root: Command) -> Vec<(String, Command)> {
    let mut root = root.disable_help_subcommand(true);
    root.build();
    let mut all = Vec::new();
    collect(&root, "mission".to_owned(), &mut all);
    all
}

fn collect(command: &Command, name: String, all: &mut Vec<(String, Command)>) {
    all.push((name.clone(), command.clone()));
    for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        collect(sub, format!("{name} {}", sub.get_name()), all);
    }
}

/// Writes a man page (section 1) for each of [`commands`] into `dir`, named as `man` finds them
/// (`mission-jobs-list.1` for `man mission-jobs-list`); answers the files written.
pub fn write_man_pages(root: Command, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    commands(root)
        .into_iter()
        .map(|(_, command)| {
            clap_mangen::Man::new(command)
                .manual("Mission Compute Service")
                .source(format!("mission {}", env!("CARGO_PKG_VERSION")))
                .generate_to(dir)
        })
        .collect()
}

/// The guide's CLI reference in Markdown: each of [`commands`] with its whole `--help`.
pub fn cli_reference(root: Command) -> String {
    let mut page = String::from(
        "# The command-line reference\n\n\
         Every command's `--help`, as `mission` prints it (this page is generated from the same \
         definitions, as are the man pages the release archive ships: `man mission-jobs-list`; \
         `mission man-pages DIR` writes them).\n",
    );
    for (name, command) in commands(root) {
        let help = command.term_width(WIDTH).max_term_width(WIDTH).render_long_help().to_string();
        let help: Vec<&str> = help.lines().map(str::trim_end).collect();
        let _ = write!(page, "\n## {name}\n\n```text\n{}\n```\n", help.join("\n").trim_end());
    }
    page
}
