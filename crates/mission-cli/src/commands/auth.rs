//! `mission login`, `logout`, `whoami`, `token`: signing in with the device flow.

use anyhow::Context;
use clap::Args;
use mission_client::{Client, LoginOptions, Prompt};

use crate::output::Output;
use crate::session;

/// Sign in to a server with the OAuth device flow and remember it.
///
/// Opens the sign-in page in your browser (or prints its address and a code to enter), waits
/// for you to approve, then stores a refresh token in ~/.mission (mode 0600; MISSION_TOKEN_FILE
/// overrides) and the server URL in the CLI config.
#[derive(Debug, Args)]
pub struct LoginCommand {
    /// Don't try to open a browser; print the address and code instead.
    #[arg(long)]
    no_browser: bool,
    /// OAuth client id (default: the one the server advertises).
    #[arg(long, env = "MISSION_CLIENT_ID")]
    client_id: Option<String>,
    /// API audience (default: the one the server advertises).
    #[arg(long, env = "MISSION_AUDIENCE")]
    audience: Option<String>,
}

impl LoginCommand {
    /// Runs the device flow against `server`.
    pub async fn run(self, server: Option<&str>, out: Output) -> anyhow::Result<()> {
        let url = session::server_url(server)?;
        let options = LoginOptions {
            client_id: self.client_id,
            audience: self.audience,
            token_file: Some(session::token_file()),
            prompt: if self.no_browser { Prompt::Print } else { Prompt::Browser },
        };
        let auth = Client::device_auth(&url, &options).await.with_context(|| format!("asking {url} how to sign in"))?;
        let tokens = auth.device_flow().await?;
        let client = Client::with_tokens(&url, tokens, auth)?;
        let me = client.whoami().await?;
        session::remember_server(&url)?;
        out.done(&me, &format!("Signed in to {url} as {}.", me.username));
        Ok(())
    }
}

/// Sign out: revoke the stored refresh token and delete the token file.
pub async fn logout(server: Option<&str>, out: Output) -> anyhow::Result<()> {
    let path = session::token_file();
    if !path.exists() {
        out.done(&serde_json::json!({"signed_out": false}), "Not signed in.");
        return Ok(());
    }
    match session::connect(server).await {
        Ok(client) => client.logout().await?,
        // The token is already useless (revoked, expired, server gone): forget it anyway.
        Err(_) => mission_client::auth::token_file::remove(&path)?,
    }
    out.done(&serde_json::json!({"signed_out": true}), "Signed out.");
    Ok(())
}

/// Show the signed-in user.
/// `mission token`: a renewed access token, alone on a line (or with its expiry, as JSON).
pub async fn token(server: Option<&str>, out: Output) -> anyhow::Result<()> {
    let client = session::connect(server).await?;
    let tokens = client.renewed_tokens().await?.context("no renewable sign-in: run `mission login` first")?;
    if out.json {
        let expires_at = tokens.expires_at.to_rfc3339();
        println!("{}", serde_json::json!({"access_token": tokens.access_token, "expires_at": expires_at}));
    } else {
        println!("{}", tokens.access_token);
    }
    Ok(())
}

pub async fn whoami(server: Option<&str>, out: Output) -> anyhow::Result<()> {
    let client = session::connect(server).await?;
    let me = client.whoami().await?;
    out.record(
        &me,
        vec![
            ("user", me.username.clone()),
            ("id", me.user_id.to_string()),
            ("admin", me.admin.to_string()),
            ("server", client.base_url().to_owned()),
        ],
    );
    Ok(())
}
