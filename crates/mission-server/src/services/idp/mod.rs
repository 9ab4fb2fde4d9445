//! The built-in identity provider: OAuth 2.0 device authorization (RFC 8628) for built-in accounts.
//!
//! It signs ES256 access tokens with a P-256 key kept in the data dir (created on first start,
//! mode 0600) and publishes the public half as a JWKS, so the API verifies its own tokens exactly
//! as it would an external provider's. Refresh tokens and device codes are random 256-bit strings
//! stored only as SHA-256 hashes. Passwords are PBKDF2-HMAC-SHA256 hashes.
//!
//! The HTTP side (`crate::http::idp`) lives at the server root: `/oauth/device/code`, `/oauth/token`,
//! `/oauth/revoke`, `/.well-known/openid-configuration`, `/.well-known/jwks.json`, `/activate`.

pub mod password;
pub mod throttle;

use std::path::Path;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header};
use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde::Serialize;
use uuid::Uuid;

use mission_store::fsutil::read_or_create_secret;

/// File in the data dir holding the PKCS#8 signing key.
const KEY_FILE: &str = "idp-signing-key.p8";

/// The provider's signing key and the settings tokens are minted with.
pub struct BuiltinIdp {
    kid: String,
    encoding: EncodingKey,
    decoding: DecodingKey,
    public_jwk: serde_json::Value,
    issuer: String,
    audience: String,
    access_token_ttl: Duration,
    /// The brakes on guessing at sign-in.
    pub brakes: throttle::Brakes,
}

impl std::fmt::Debug for BuiltinIdp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuiltinIdp").field("kid", &self.kid).field("issuer", &self.issuer).finish_non_exhaustive()
    }
}

#[derive(Serialize)]
struct AccessClaims<'a> {
    iss: &'a str,
    aud: &'a str,
    sub: String,
    iat: i64,
    exp: i64,
    scope: &'a str,
    client_id: &'a str,
}

impl BuiltinIdp {
    /// Loads the signing key from `key_dir`, creating it on first start; the sign-in brakes are
    /// kept in `shared` where replicas share a database.
    pub fn load_or_create(
        key_dir: &Path,
        issuer: String,
        audience: String,
        access_token_ttl: Duration,
        limits: crate::config::SignInLimits,
        shared: Option<mission_store::ClusterDb>,
    ) -> std::io::Result<Self> {
        let path = key_dir.join(KEY_FILE);
        let pkcs8 = read_or_create_secret(&path, || {
            let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new())
                .map_err(|_| std::io::Error::other("could not generate a signing key"))?;
            Ok(doc.as_ref().to_vec())
        })?;
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &pkcs8, &SystemRandom::new())
            .map_err(|e| std::io::Error::other(format!("{} is not a P-256 PKCS#8 key: {e}", path.display())))?;
        // Uncompressed SEC1 point: 0x04 || x (32 bytes) || y (32 bytes).
        let point = pair.public_key().as_ref();
        let x = URL_SAFE_NO_PAD.encode(&point[1..33]);
        let y = URL_SAFE_NO_PAD.encode(&point[33..65]);
        let kid = URL_SAFE_NO_PAD.encode(&ring::digest::digest(&ring::digest::SHA256, point).as_ref()[..12]);
        let decoding =
            DecodingKey::from_ec_components(&x, &y).map_err(|e| std::io::Error::other(format!("public key: {e}")))?;
        let public_jwk = serde_json::json!({
            "kty": "EC", "crv": "P-256", "x": x, "y": y, "kid": kid, "use": "sig", "alg": "ES256",
        });
        Ok(Self {
            kid,
            encoding: EncodingKey::from_ec_der(&pkcs8),
            decoding,
            public_jwk,
            issuer,
            audience,
            access_token_ttl,
            brakes: throttle::Brakes::new(limits, shared),
        })
    }

    /// Signs an access token for `user_id`; returns it with its lifetime in seconds.
    pub fn issue_access_token(&self, user_id: Uuid, scope: &str, client_id: &str, now: DateTime<Utc>) -> (String, u64) {
        let ttl = self.access_token_ttl.as_secs();
        let claims = AccessClaims {
            iss: &self.issuer,
            aud: &self.audience,
            sub: user_id.to_string(),
            iat: now.timestamp(),
            exp: now.timestamp() + ttl as i64,
            scope,
            client_id,
        };
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.kid.clone());
        header.typ = Some("at+jwt".into());
        let token = jsonwebtoken::encode(&header, &claims, &self.encoding).expect("ES256 signing cannot fail");
        (token, ttl)
    }

    /// The key id of the signing key.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public key to verify tokens with.
    pub fn decoding_key(&self) -> &DecodingKey {
        &self.decoding
    }

    /// `iss` of the tokens.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The JWKS document.
    pub fn jwks(&self) -> serde_json::Value {
        serde_json::json!({ "keys": [self.public_jwk] })
    }
}

/// A fresh random secret: 32 bytes, base64url.
pub fn random_secret() -> String {
    let mut bytes = [0u8; 32];
    SystemRandom::new().fill(&mut bytes).expect("the system RNG works");
    URL_SAFE_NO_PAD.encode(bytes)
}

/// SHA-256 of a secret, hex, as secrets are stored.
pub fn hash_secret(secret: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, secret.as_bytes());
    crate::services::blobs::hex(digest.as_ref())
}

/// Letters of user codes: no vowels (no words), no look-alikes (RFC 8628 §6.1).
const USER_CODE_ALPHABET: &[u8] = b"BCDFGHJKLMNPQRSTVWXZ";

/// A fresh user code, `XXXX-XXXX`.
pub fn new_user_code() -> String {
    let mut bytes = [0u8; 8];
    SystemRandom::new().fill(&mut bytes).expect("the system RNG works");
    let letters: String =
        bytes.iter().map(|b| USER_CODE_ALPHABET[*b as usize % USER_CODE_ALPHABET.len()] as char).collect();
    format!("{}-{}", &letters[..4], &letters[4..])
}

/// Puts what a user typed into the stored form: upper case, no spaces, one dash in the middle.
pub fn normalise_user_code(typed: &str) -> String {
    let letters: String = typed.chars().filter(|c| c.is_ascii_alphanumeric()).map(|c| c.to_ascii_uppercase()).collect();
    if letters.len() == 8 { format!("{}-{}", &letters[..4], &letters[4..]) } else { letters }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_codes_round_trip_through_typing() {
        let code = new_user_code();
        assert_eq!(code.len(), 9);
        assert_eq!(normalise_user_code(&code.to_lowercase().replace('-', " ")), code);
    }

    #[test]
    fn key_is_created_once_and_reloaded() {
        let dir = tempfile::tempdir().unwrap();
        let ttl = Duration::from_secs(60);
        let a = BuiltinIdp::load_or_create(dir.path(), "http://x".into(), "aud".into(), ttl, Default::default(), None)
            .unwrap();
        let b = BuiltinIdp::load_or_create(dir.path(), "http://x".into(), "aud".into(), ttl, Default::default(), None)
            .unwrap();
        assert_eq!(a.kid(), b.kid());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(KEY_FILE)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
