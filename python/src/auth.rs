//! Sign-in (spec §5) for Python: [`NativeAuth`] is the SDK's device-flow client of one
//! server's identity provider, with the prompt chosen by the Python side.

use std::path::PathBuf;
use std::sync::Arc;

use mission_client::saved;
use mission_client::{Client, DeviceAuth, DeviceAuthorization, LoginOptions, Prompt, Tokens};
use pyo3::prelude::*;

use crate::{Invalid, block_on, to_py};

/// Tokens as the Python side reads them (the expiry as RFC 3339).
pub(crate) fn tokens_json(tokens: &Tokens) -> String {
    serde_json::json!({
        "access_token": tokens.access_token,
        "refresh_token": tokens.refresh_token,
        "expires_at": tokens.expires_at.to_rfc3339(),
    })
    .to_string()
}

/// `"browser"`, `"print"`, or a Python callable that gets the code to show as a JSON object
/// (`verification_uri`, `verification_uri_complete`, `user_code`, `expires_in`).
fn prompt_of(prompt: &Bound<'_, PyAny>) -> PyResult<Prompt> {
    if let Ok(name) = prompt.extract::<String>() {
        return match name.as_str() {
            "browser" => Ok(Prompt::Browser),
            "print" => Ok(Prompt::Print),
            other => {
                Err(Invalid::new_err(format!("prompt: expected \"browser\", \"print\" or a function, got {other:?}")))
            }
        };
    }
    if !prompt.is_callable() {
        return Err(Invalid::new_err("prompt: expected \"browser\", \"print\" or a function"));
    }
    let show = prompt.clone().unbind();
    Ok(Prompt::Callback(Arc::new(move |authorization: &DeviceAuthorization| {
        let shown = serde_json::json!({
            "verification_uri": authorization.verification_uri,
            "verification_uri_complete": authorization.verification_uri_complete,
            "user_code": authorization.user_code,
            "expires_in": authorization.expires_in,
        })
        .to_string();
        Python::attach(|py| {
            if let Err(error) = show.call1(py, (shown,)) {
                error.write_unraisable(py, None);
            }
        });
    })))
}

/// The device-flow client of the identity provider a server names.
#[pyclass(module = "mission._native", frozen)]
pub struct NativeAuth {
    pub(crate) auth: DeviceAuth,
    pub(crate) server_url: String,
}

#[pymethods]
impl NativeAuth {
    /// Asks `server_url` (else the server `mission login` remembered) where to sign in.
    /// `token_file`: `None` is the saved session's file, `""` stores nothing.
    #[new]
    #[pyo3(signature = (server_url, client_id, audience, token_file, prompt))]
    fn new(
        py: Python<'_>,
        server_url: Option<&str>,
        client_id: Option<String>,
        audience: Option<String>,
        token_file: Option<PathBuf>,
        prompt: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let server_url = saved::server_url(server_url).map_err(to_py)?;
        let options = LoginOptions {
            client_id,
            audience,
            token_file: Some(token_file.unwrap_or_else(saved::token_file)),
            prompt: prompt_of(prompt)?,
        };
        let auth = block_on(py, Client::device_auth(&server_url, &options))?;
        Ok(Self { auth, server_url })
    }

    #[getter]
    fn server_url(&self) -> &str {
        &self.server_url
    }

    #[getter]
    fn auth_url(&self) -> &str {
        self.auth.auth_url()
    }

    #[getter]
    fn token_file(&self) -> Option<PathBuf> {
        self.auth.token_file_path().map(PathBuf::from)
    }

    /// Refresh with the token file's refresh token when there is one, else the device flow.
    fn initialize(&self, py: Python<'_>) -> PyResult<String> {
        block_on(py, self.auth.initialize()).map(|t| tokens_json(&t))
    }

    /// The device flow, whatever the token file holds.
    fn device_flow(&self, py: Python<'_>) -> PyResult<String> {
        block_on(py, self.auth.device_flow()).map(|t| tokens_json(&t))
    }

    /// A new access token for `refresh_token`, stored in the token file (if any).
    fn refresh(&self, py: Python<'_>, refresh_token: &str) -> PyResult<String> {
        let tokens = block_on(py, self.auth.refresh(refresh_token))?;
        self.auth.store(&tokens).map_err(to_py)?;
        Ok(tokens_json(&tokens))
    }

    /// Revokes `refresh_token` and removes the token file.
    fn revoke(&self, py: Python<'_>, refresh_token: &str) -> PyResult<()> {
        block_on(py, self.auth.revoke(refresh_token))
    }

    /// Remembers this server for clients made without one (as `mission login` does).
    fn remember_server(&self) -> PyResult<()> {
        saved::remember_server(&self.server_url).map_err(to_py)
    }
}
