//! One module per noun of the CLI; each is a clap type plus its `run`.

pub mod audit;
pub mod auth;
pub mod cargo_bays;
pub mod files;
pub mod images;
pub mod jobs;
pub mod labels;
pub mod lz;
pub mod missions;
pub mod projects;
pub mod retries;
pub mod server;
pub mod shell;
pub mod sizes;
pub mod stations;
pub mod types;
pub mod webhooks;

/// The first line of standard input, for a `flag` such as `--password-stdin` that reads `what`
/// from it (a secret kept off the command line); an error when there is none.
pub fn stdin_line(flag: &str, what: &str) -> anyhow::Result<String> {
    use std::io::Read;
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input).map_err(|e| anyhow::anyhow!("{flag}: reading {what}: {e}"))?;
    let line = input.lines().next().unwrap_or("").to_owned();
    if line.is_empty() {
        anyhow::bail!("{flag}: standard input held no {what}");
    }
    Ok(line)
}
