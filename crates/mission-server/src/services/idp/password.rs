//! Password hashing for built-in accounts: PBKDF2-HMAC-SHA256, self-describing strings
//! `pbkdf2-sha256$ITERATIONS$SALT$HASH` so the cost can rise without breaking old hashes.

use std::num::NonZeroU32;

use base64::Engine;
use base64::engine::general_purpose::STANDARD_NO_PAD;
use ring::pbkdf2;
use ring::rand::{SecureRandom, SystemRandom};

/// OWASP's 2023 recommendation for PBKDF2-HMAC-SHA256.
const ITERATIONS: u32 = 600_000;

/// Hashes a new password.
pub fn hash(password: &str) -> String {
    let mut salt = [0u8; 16];
    SystemRandom::new().fill(&mut salt).expect("the system RNG works");
    let mut out = [0u8; 32];
    let iterations = NonZeroU32::new(ITERATIONS).expect("non-zero");
    pbkdf2::derive(pbkdf2::PBKDF2_HMAC_SHA256, iterations, &salt, password.as_bytes(), &mut out);
    format!("pbkdf2-sha256${ITERATIONS}${}${}", STANDARD_NO_PAD.encode(salt), STANDARD_NO_PAD.encode(out))
}

/// Checks a password against a stored hash in constant time; a malformed hash never matches.
pub fn verify(password: &str, stored: &str) -> bool {
    let mut parts = stored.split('$');
    let (Some("pbkdf2-sha256"), Some(iterations), Some(salt), Some(expected), None) =
        (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let (Some(iterations), Ok(salt), Ok(expected)) = (
        iterations.parse().ok().and_then(NonZeroU32::new),
        STANDARD_NO_PAD.decode(salt),
        STANDARD_NO_PAD.decode(expected),
    ) else {
        return false;
    };
    pbkdf2::verify(pbkdf2::PBKDF2_HMAC_SHA256, iterations, &salt, password.as_bytes(), &expected).is_ok()
}

/// Spends the time of one verification, so an unknown username takes as long as a wrong password.
pub fn burn_verification_time(password: &str) {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    verify(password, DUMMY.get_or_init(|| hash("not a password")));
}

/// A random password for generated accounts: 20 characters from an unambiguous alphabet.
pub fn generate() -> String {
    const ALPHABET: &[u8] = b"abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
    let mut bytes = [0u8; 20];
    SystemRandom::new().fill(&mut bytes).expect("the system RNG works");
    bytes.iter().map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_verify_and_differ() {
        let a = hash("correct horse");
        assert!(verify("correct horse", &a));
        assert!(!verify("wrong horse", &a));
        assert_ne!(a, hash("correct horse"));
        assert!(!verify("x", "garbage"));
    }
}
