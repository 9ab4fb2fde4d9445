//! Verifying bearer tokens and knowing who is calling.
//!
//! [`Authenticator`] checks an access token's signature, `iss`, `aud` and `exp` against the built-in
//! provider's key or an external provider's JWKS, maps its `sub` to a user (provisioning external
//! users on first sight, with the project memberships their group claim names where the server
//! says so) and caches the result until the token expires, so a request with a known token costs
//! a hash-map lookup. Handlers take a [`Principal`] argument to require sign-in.

use std::collections::HashMap;
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;
use chrono::Utc;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use uuid::Uuid;

use crate::AppState;
use crate::domain::Principal;
use crate::http::error::ApiError;
use mission_store::{Store, UserRecord};

/// Cache bound; at this size expired entries are dropped, and if that is not enough, all.
const CACHE_CAPACITY: usize = 10_000;
/// Tolerated clock skew on `exp`.
const LEEWAY_SECS: u64 = 30;

/// Where token signing keys come from.
enum KeySource {
    /// The built-in provider's one key.
    Builtin { kid: String, key: DecodingKey },
    /// An external provider's JWKS, fetched and cached.
    External(ExternalKeys),
}

/// Verifies access tokens and resolves them to users.
pub struct Authenticator {
    keys: KeySource,
    issuer: String,
    audience: String,
    store: Store,
    /// Memberships that follow a group claim (an external provider's tokens only).
    project_groups: Option<crate::config::ProjectGroups>,
    cache: Mutex<HashMap<String, (Principal, Instant)>>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator").field("issuer", &self.issuer).field("audience", &self.audience).finish()
    }
}

#[derive(Deserialize)]
struct Claims {
    sub: String,
    iss: String,
    exp: u64,
    /// The rest, where a group claim may be ([`crate::config::ProjectGroups`]).
    #[serde(flatten)]
    other: serde_json::Map<String, serde_json::Value>,
}

impl Authenticator {
    /// Verifies tokens signed by the built-in provider's key.
    pub fn builtin(kid: String, key: DecodingKey, issuer: String, audience: String, store: Store) -> Self {
        Self::new(KeySource::Builtin { kid, key }, issuer, audience, store)
    }

    /// Verifies tokens of the external provider at `auth_url`; with `project_groups`, the
    /// projects a token's group claim names are its user's (set as the token is first seen).
    pub fn external(
        auth_url: &url::Url,
        min_refetch: Duration,
        audience: String,
        store: Store,
        project_groups: Option<crate::config::ProjectGroups>,
    ) -> Self {
        let issuer = auth_url.as_str().to_owned();
        let mut auth =
            Self::new(KeySource::External(ExternalKeys::new(auth_url.clone(), min_refetch)), issuer, audience, store);
        auth.project_groups = project_groups;
        auth
    }

    fn new(keys: KeySource, issuer: String, audience: String, store: Store) -> Self {
        Self {
            keys,
            issuer: issuer.trim_end_matches('/').to_owned(),
            audience,
            store,
            project_groups: None,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The caller behind `token`, or a 401 saying why not.
    pub async fn authenticate(&self, token: &str) -> Result<Principal, ApiError> {
        if let Some((principal, expires)) = self.cache.lock().expect("cache lock").get(token).copied()
            && Instant::now() < expires
        {
            return Ok(principal);
        }
        let claims = self.verify(token).await?;
        let principal = self.resolve(&claims).await?;
        let lifetime = claims.exp.saturating_sub(Utc::now().timestamp().max(0) as u64);
        let expires = Instant::now() + Duration::from_secs(lifetime);
        let mut cache = self.cache.lock().expect("cache lock");
        if cache.len() >= CACHE_CAPACITY {
            let now = Instant::now();
            cache.retain(|_, (_, e)| *e > now);
            if cache.len() >= CACHE_CAPACITY {
                cache.clear();
            }
        }
        cache.insert(token.to_owned(), (principal, expires));
        Ok(principal)
    }

    async fn verify(&self, token: &str) -> Result<Claims, ApiError> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| ApiError::unauthorized(format!("the access token is not a JWT: {e}")))?;
        check_header(token, header.typ.as_deref())?;
        if !matches!(
            header.alg,
            Algorithm::RS256
                | Algorithm::RS384
                | Algorithm::RS512
                | Algorithm::PS256
                | Algorithm::PS384
                | Algorithm::PS512
                | Algorithm::ES256
                | Algorithm::ES384
                | Algorithm::EdDSA
        ) {
            return Err(ApiError::unauthorized(format!("token algorithm {:?} is not accepted", header.alg)));
        }
        let key = match &self.keys {
            KeySource::Builtin { kid, key } => {
                if header.kid.as_deref().is_some_and(|k| k != kid) {
                    return Err(ApiError::unauthorized("the token was signed with an unknown key"));
                }
                key.clone()
            }
            KeySource::External(keys) => keys.key_for(header.kid.as_deref()).await?,
        };
        let mut validation = Validation::new(header.alg);
        validation.set_audience(&[&self.audience]);
        validation.set_required_spec_claims(&["exp", "sub", "iss", "aud"]);
        validation.leeway = LEEWAY_SECS;
        validation.validate_nbf = true;
        let data = jsonwebtoken::decode::<Claims>(token, &key, &validation).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind;
            ApiError::unauthorized(match e.kind() {
                ErrorKind::ExpiredSignature => "the access token expired".to_owned(),
                ErrorKind::ImmatureSignature => "the access token is not valid yet (nbf)".to_owned(),
                ErrorKind::InvalidAudience => format!("the access token is not for audience {:?}", self.audience),
                ErrorKind::InvalidSignature => "the access token's signature is not valid".to_owned(),
                other => format!("the access token is not valid: {other:?}"),
            })
        })?;
        // Providers differ on the trailing slash of `iss` (Auth0 has one); compare without it.
        if data.claims.iss.trim_end_matches('/') != self.issuer {
            return Err(ApiError::unauthorized(format!(
                "the access token was issued by {:?}, not {:?}",
                data.claims.iss, self.issuer
            )));
        }
        Ok(data.claims)
    }

    /// The user of a verified token; an external provider's user is provisioned on first sight,
    /// and their claimed project memberships set.
    async fn resolve(&self, claims: &Claims) -> Result<Principal, ApiError> {
        let sub = claims.sub.as_str();
        let user = match &self.keys {
            KeySource::Builtin { .. } => {
                let id = Uuid::parse_str(sub).map_err(|_| ApiError::unauthorized("the token's subject is unknown"))?;
                self.store.user_by_id(id).await?
            }
            KeySource::External(_) => {
                let user = self.provision_external(sub).await?;
                if let Some(groups) = &self.project_groups {
                    let claimed = groups.memberships(&claims.other);
                    self.store.sync_claimed_memberships(user.user_id, &claimed, mission_store::now()).await?;
                }
                Some(user)
            }
        };
        let user = user.ok_or_else(|| ApiError::unauthorized("the token's user no longer exists"))?;
        Ok(Principal { user_id: user.user_id, admin: user.admin })
    }

    /// The local user for an external `sub`, created on first sight.
    async fn provision_external(&self, sub: &str) -> Result<UserRecord, ApiError> {
        if let Some(user) = self.store.user_by_external_sub(sub).await? {
            return Ok(user);
        }
        let user = UserRecord {
            user_id: Uuid::new_v4(),
            username: sub.to_owned(),
            password_hash: None,
            external_sub: Some(sub.to_owned()),
            admin: false,
            created_at: mission_store::now(),
        };
        match self.store.insert_user(&user).await {
            Ok(()) => Ok(user),
            // A concurrent first request created it, or a built-in account has that name.
            Err(_) => self
                .store
                .user_by_external_sub(sub)
                .await?
                .ok_or_else(|| ApiError::conflict(format!("cannot provision a user for subject {sub:?}"))),
        }
    }
}

/// An external provider's signing keys, found via OIDC discovery and cached by `kid`.
struct ExternalKeys {
    auth_url: url::Url,
    http: reqwest::Client,
    keys: RwLock<HashMap<String, DecodingKey>>,
    /// Keys without a `kid`, used when a token names none.
    anonymous: RwLock<Vec<DecodingKey>>,
    last_fetch: tokio::sync::Mutex<Option<Instant>>,
    min_refetch: Duration,
}

impl ExternalKeys {
    fn new(auth_url: url::Url, min_refetch: Duration) -> Self {
        let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().expect("the HTTP client builds");
        Self {
            auth_url,
            http,
            keys: RwLock::new(HashMap::new()),
            anonymous: RwLock::new(Vec::new()),
            last_fetch: tokio::sync::Mutex::new(None),
            min_refetch,
        }
    }

    async fn key_for(&self, kid: Option<&str>) -> Result<DecodingKey, ApiError> {
        if let Some(key) = self.cached(kid) {
            return Ok(key);
        }
        {
            let mut last = self.last_fetch.lock().await;
            // Another request may have refreshed while this one waited for the lock.
            if let Some(key) = self.cached(kid) {
                return Ok(key);
            }
            if last.is_none_or(|t| t.elapsed() >= self.min_refetch) {
                self.fetch().await?;
                *last = Some(Instant::now());
            }
        }
        self.cached(kid)
            .ok_or_else(|| ApiError::unauthorized("the token was signed with a key the provider does not publish"))
    }

    fn cached(&self, kid: Option<&str>) -> Option<DecodingKey> {
        match kid {
            Some(kid) => self.keys.read().expect("keys lock").get(kid).cloned(),
            None => {
                let anonymous = self.anonymous.read().expect("keys lock");
                let named = self.keys.read().expect("keys lock");
                match (anonymous.len(), named.len()) {
                    (1, 0) => anonymous.first().cloned(),
                    (0, 1) => named.values().next().cloned(),
                    _ => None,
                }
            }
        }
    }

    /// Fetches the JWKS: `jwks_uri` from the discovery document, else `/.well-known/jwks.json`.
    async fn fetch(&self) -> Result<(), ApiError> {
        let base = self.auth_url.as_str().trim_end_matches('/');
        let discovered =
            discovery_document(&self.http, base).await.and_then(|doc| doc.get("jwks_uri")?.as_str().map(str::to_owned));
        let jwks_uri = discovered.unwrap_or_else(|| format!("{base}/.well-known/jwks.json"));
        let jwks: serde_json::Value =
            async { self.http.get(&jwks_uri).send().await?.error_for_status()?.json().await }.await.map_err(|e| {
                ApiError::unavailable(format!("could not fetch the identity provider's keys from {jwks_uri}: {e}"))
            })?;
        let mut named = HashMap::new();
        let mut anonymous = Vec::new();
        // Parse key by key: one key of a kind we do not know must not hide the others.
        for value in jwks.get("keys").and_then(|k| k.as_array()).into_iter().flatten() {
            // Only public signature keys: a symmetric (`oct`) key in a JWKS must never verify.
            if value.get("use").and_then(|u| u.as_str()).is_some_and(|u| u != "sig")
                || value.get("kty").and_then(|k| k.as_str()) == Some("oct")
            {
                continue;
            }
            let Ok(jwk) = serde_json::from_value::<Jwk>(value.clone()) else { continue };
            let Ok(key) = DecodingKey::from_jwk(&jwk) else { continue };
            match jwk.common.key_id {
                Some(kid) => {
                    named.insert(kid, key);
                }
                None => anonymous.push(key),
            }
        }
        tracing::info!(keys = named.len() + anonymous.len(), %jwks_uri, "fetched identity provider keys");
        *self.keys.write().expect("keys lock") = named;
        *self.anonymous.write().expect("keys lock") = anonymous;
        Ok(())
    }
}

/// The OIDC discovery document of the provider at `base` (`/.well-known/openid-configuration`),
/// if it publishes one.
pub(crate) async fn discovery_document(http: &reqwest::Client, base: &str) -> Option<serde_json::Value> {
    let response = http.get(format!("{base}/.well-known/openid-configuration")).send().await.ok()?;
    response.error_for_status().ok()?.json().await.ok()
}

/// The token of an `Authorization: Bearer <token>` header (a user's JWT, or a landing zone's
/// agent token), as a 401 when the header is missing or malformed.
pub fn bearer_token(parts: &Parts) -> Result<&str, ApiError> {
    let value = parts
        .headers
        .get(header::AUTHORIZATION)
        .ok_or_else(|| ApiError::unauthorized("sign in: this endpoint needs an Authorization: Bearer token"))?;
    value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| ApiError::unauthorized("the Authorization header must be 'Bearer <token>'"))
}

impl FromRequestParts<AppState> for Principal {
    type Rejection = ApiError;

    /// A bearer token, or else the web console's session cookie (see
    /// [`crate::http::console::session::api_principal`]).
    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, Self::Rejection> {
        if !parts.headers.contains_key(header::AUTHORIZATION)
            && let Some(principal) = crate::http::console::session::api_principal(parts, app).await?
        {
            return Ok(principal);
        }
        app.auth.authenticate(bearer_token(parts)?).await
    }
}

/// Checks what the JWT library does not: a `typ`, where present, names an access token (`JWT`,
/// `at+jwt`, RFC 9068), and no `crit` header names extensions that must be understood (we
/// understand none; RFC 7515 §4.1.11).
fn check_header(token: &str, typ: Option<&str>) -> Result<(), ApiError> {
    if let Some(typ) = typ {
        let typ = typ.to_ascii_lowercase();
        if !matches!(typ.trim_start_matches("application/"), "jwt" | "at+jwt") {
            return Err(ApiError::unauthorized(format!("the token's typ {typ:?} is not an access token's")));
        }
    }
    use base64::Engine as _;
    let encoded = token.split('.').next().unwrap_or_default();
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(encoded).unwrap_or_default();
    let fields: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&raw).unwrap_or_default();
    if fields.contains_key("crit") {
        return Err(ApiError::unauthorized(
            "the token names critical header extensions (crit) this server does not support",
        ));
    }
    Ok(())
}
