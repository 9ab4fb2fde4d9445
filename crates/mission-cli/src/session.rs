//! How a command gets a signed-in [`Client`]: from the session `mission login` saved (the
//! SDK's [`mission_client::saved`]), with advice on what to run when there is none.

use mission_client::Client;

pub use mission_client::saved::{load_config, remember_server, save_config, server_url, token_file};

/// A client signed in with the stored refresh token.
pub async fn connect(server: Option<&str>) -> anyhow::Result<Client> {
    Client::from_saved_session(server).await.map_err(|e| match e {
        mission_client::Error::SignIn(e) => anyhow::anyhow!("{e}; run `mission login` to sign in again"),
        other => other.into(),
    })
}
