//! Where the CLI keeps its state between runs: the server URL (config file) and the tokens
//! (the SDK's token file), and how a command gets a signed-in [`Client`].

use std::path::PathBuf;

use anyhow::{Context, bail};
use mission_client::{Client, LoginOptions};
use serde::{Deserialize, Serialize};

/// The config file's content.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct CliConfig {
    /// Server URL remembered by `mission login`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
}

/// `$MISSION_CONFIG`, else `$XDG_CONFIG_HOME/mission/config.json`, else
/// `~/.config/mission/config.json`.
pub fn config_path() -> PathBuf {
    if let Some(p) = std::env::var_os("MISSION_CONFIG") {
        return PathBuf::from(p);
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default().join(".config"));
    base.join("mission").join("config.json")
}

/// `$MISSION_TOKEN_FILE`, else the SDK's default `~/.mission`.
pub fn token_file() -> PathBuf {
    std::env::var_os("MISSION_TOKEN_FILE").map(PathBuf::from).unwrap_or_else(mission_client::auth::default_token_file)
}

/// Reads the config file; a missing file is the empty config.
pub fn load_config() -> anyhow::Result<CliConfig> {
    let path = config_path();
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).with_context(|| format!("reading {}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(CliConfig::default()),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Writes the config file.
pub fn save_config(config: &CliConfig) -> anyhow::Result<()> {
    let path = config_path();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(&path, serde_json::to_vec_pretty(config)?).with_context(|| format!("writing {}", path.display()))
}

/// The server to talk to: `--server`/`MISSION_SERVER`, else the one remembered at login.
pub fn server_url(flag: Option<&str>) -> anyhow::Result<String> {
    if let Some(url) = flag {
        return Ok(url.to_owned());
    }
    match load_config()?.server {
        Some(url) => Ok(url),
        None => {
            bail!("no server given: pass --server URL (or set MISSION_SERVER), or run `mission login --server URL`")
        }
    }
}

/// A client signed in with the stored refresh token.
pub async fn connect(server: Option<&str>) -> anyhow::Result<Client> {
    let url = server_url(server)?;
    let tokens = token_file();
    if !tokens.exists() {
        bail!("not signed in: run `mission login --server {url}`");
    }
    let options = LoginOptions { token_file: Some(tokens), ..Default::default() };
    Client::login(&url, options).await.map_err(|e| match e {
        mission_client::Error::SignIn(e) => anyhow::anyhow!("{e}; run `mission login` to sign in again"),
        other => other.into(),
    })
}
