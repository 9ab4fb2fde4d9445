//! OAuth 2.0 device-flow messages (RFC 8628, RFC 6749) and the server's auth configuration.

use serde::{Deserialize, Serialize};

/// `GET /api/v1/auth-config`: where and how clients sign in to this server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuthConfig {
    /// Base URL of the identity provider; `/oauth/device/code` and `/oauth/token` hang off it.
    pub auth_url: String,
    /// The API audience access tokens must carry.
    pub audience: String,
    /// The client id clients should present.
    pub client_id: String,
}

/// Response of `POST {auth_url}/oauth/device/code` (RFC 8628 §3.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceAuthorization {
    /// Secret code the client polls the token endpoint with.
    pub device_code: String,
    /// Short code the user confirms in the browser.
    pub user_code: String,
    /// Page where the user enters the code.
    pub verification_uri: String,
    /// The same page with the code filled in.
    #[serde(default)]
    pub verification_uri_complete: Option<String>,
    /// Seconds until the device code expires.
    #[serde(default)]
    pub expires_in: Option<u64>,
    /// Minimum seconds between polls (RFC default 5).
    #[serde(default = "default_interval")]
    pub interval: u64,
}

fn default_interval() -> u64 {
    5
}

/// Successful response of `POST {auth_url}/oauth/token`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenResponse {
    /// The bearer token for the mission API.
    pub access_token: String,
    /// Long-lived token to get new access tokens; absent on a refresh that does not rotate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// Lifetime of the access token in seconds.
    pub expires_in: u64,
    /// Always `Bearer`.
    #[serde(default = "bearer")]
    pub token_type: String,
    /// Granted scope, space separated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

fn bearer() -> String {
    "Bearer".into()
}

/// Error body of the OAuth endpoints (RFC 6749 §5.2, RFC 8628 §3.5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OAuthError {
    /// Error code: `authorization_pending`, `slow_down`, `access_denied`, `expired_token`,
    /// `invalid_grant`, `invalid_request`, `invalid_client`, `unsupported_grant_type`.
    pub error: String,
    /// Human-readable explanation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_description: Option<String>,
}
