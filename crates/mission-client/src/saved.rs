//! The session `mission login` leaves behind, for any program to pick up: the server's URL in a
//! config file and the refresh token in the token file ([`crate::auth::token_file`]).
//!
//! The CLI writes both at sign-in; [`Client::from_saved_session`] reads them, so a user who signed
//! in once in a terminal can use the SDK (Rust or Python) without signing in again.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{Client, Error, LoginOptions};

/// The config file's content.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedConfig {
    /// Server URL remembered by `mission login`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// The newer server version the user was last told of (told once each).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warned_server_version: Option<String>,
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
    std::env::var_os("MISSION_TOKEN_FILE").map(PathBuf::from).unwrap_or_else(crate::auth::default_token_file)
}

fn config_error(path: &Path, source: std::io::Error) -> Error {
    Error::Io { path: path.to_owned(), source }
}

/// Reads the config file; a missing file is the empty config.
pub fn load_config() -> Result<SavedConfig, Error> {
    let path = config_path();
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| config_error(&path, std::io::Error::new(std::io::ErrorKind::InvalidData, e))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(SavedConfig::default()),
        Err(e) => Err(config_error(&path, e)),
    }
}

/// Remembers `url` as the server to use (`mission login` does), keeping the rest of the file.
pub fn remember_server(url: &str) -> Result<(), Error> {
    let mut config = load_config()?;
    config.server = Some(url.to_owned());
    save_config(&config)
}

/// Writes the config file (creating its folder).
pub fn save_config(config: &SavedConfig) -> Result<(), Error> {
    let path = config_path();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| config_error(dir, e))?;
    }
    let bytes = serde_json::to_vec_pretty(config).expect("the config serialises");
    std::fs::write(&path, bytes).map_err(|e| config_error(&path, e))
}

/// The server to talk to: `given`, else the one remembered at sign-in.
pub fn server_url(given: Option<&str>) -> Result<String, Error> {
    match given {
        Some(url) => Ok(url.to_owned()),
        None => load_config()?.server.ok_or_else(|| {
            Error::NotSignedIn(
                "no server given and none remembered: name the server, or sign in with `mission login --server URL`"
                    .into(),
            )
        }),
    }
}

impl Client {
    /// A client of `server` (else the server remembered by `mission login`), signed in with the
    /// refresh token in the token file [`token_file`], which it keeps current.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), mission_client::Error> {
    /// let client = mission_client::Client::from_saved_session(None).await?;
    /// println!("signed in as {}", client.whoami().await?.username);
    /// # Ok(()) }
    /// ```
    pub async fn from_saved_session(server: Option<&str>) -> Result<Client, Error> {
        let url = server_url(server)?;
        let tokens = token_file();
        if !tokens.exists() {
            return Err(Error::NotSignedIn(format!(
                "no saved session in {}: run `mission login --server {url}`",
                tokens.display()
            )));
        }
        Client::login(&url, LoginOptions { token_file: Some(tokens), ..Default::default() }).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_round_trips_without_absent_fields() {
        let empty = serde_json::to_string(&SavedConfig::default()).unwrap();
        assert_eq!(empty, "{}");
        let config = SavedConfig { server: Some("http://127.0.0.1:1".into()), ..Default::default() };
        let back: SavedConfig = serde_json::from_str(&serde_json::to_string(&config).unwrap()).unwrap();
        assert_eq!(back, config);
    }
}
