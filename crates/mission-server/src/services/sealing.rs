//! Sealing secrets the server must read back (cargo-bay credentials, webhook secrets, the answers
//! kept for idempotency keys, which may carry a landing zone's token) before they
//! go into the database: AES-256-GCM under a key kept beside the other keys (`cargo-bay-key`,
//! mode 0600, created on first start; the name is older than its second use), each sealed box
//! bound to the id of what it belongs to, so the database alone (a backup, a dump) reveals no
//! secret and a box cannot be moved to another row.

use std::path::Path;

use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use uuid::Uuid;

use mission_store::fsutil::read_or_create_secret;

/// File in the key dir holding the key.
const KEY_FILE: &str = "cargo-bay-key";

/// The key that seals secrets.
pub struct SealingKey(LessSafeKey);

impl std::fmt::Debug for SealingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealingKey")
    }
}

impl SealingKey {
    /// Loads the key from `key_dir`, creating it on first start.
    pub fn load(key_dir: &Path) -> std::io::Result<Self> {
        let path = key_dir.join(KEY_FILE);
        let bytes = read_or_create_secret(&path, || {
            let mut bytes = vec![0u8; 32];
            SystemRandom::new().fill(&mut bytes).map_err(|_| std::io::Error::other("no randomness"))?;
            Ok(bytes)
        })?;
        let key = UnboundKey::new(&AES_256_GCM, &bytes)
            .map_err(|_| std::io::Error::other(format!("{} does not hold a 256-bit key", path.display())))?;
        Ok(Self(LessSafeKey::new(key)))
    }

    /// Seals `plain` for the row `owner`: nonce followed by ciphertext and tag.
    pub fn seal(&self, owner: Uuid, plain: &[u8]) -> Vec<u8> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new().fill(&mut nonce).expect("the system has randomness");
        let mut sealed = plain.to_vec();
        self.0
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(owner.as_bytes()), &mut sealed)
            .expect("secrets are far below AES-GCM's size limit");
        [nonce.as_slice(), &sealed].concat()
    }

    /// What [`SealingKey::seal`] sealed for `owner`; `None` when `sealed` is not such a box (another
    /// key, another row, damaged).
    pub fn unseal(&self, owner: Uuid, sealed: &[u8]) -> Option<Vec<u8>> {
        if sealed.len() < NONCE_LEN {
            return None;
        }
        let (nonce, ciphertext) = sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut buffer = ciphertext.to_vec();
        let plain = self.0.open_in_place(nonce, Aad::from(owner.as_bytes()), &mut buffer).ok()?;
        Some(plain.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_secret_opens_only_for_its_owner() {
        let dir = tempfile::tempdir().unwrap();
        let key = SealingKey::load(dir.path()).unwrap();
        let (owner, other) = (Uuid::new_v4(), Uuid::new_v4());
        let sealed = key.seal(owner, b"hush");
        assert!(!sealed.windows(4).any(|w| w == b"hush"));
        assert_eq!(key.unseal(owner, &sealed).as_deref(), Some(&b"hush"[..]));
        assert_eq!(key.unseal(other, &sealed), None);
        assert_eq!(key.unseal(owner, &sealed[..5]), None);
        // The same key comes back on the next start.
        assert_eq!(SealingKey::load(dir.path()).unwrap().unseal(owner, &sealed).as_deref(), Some(&b"hush"[..]));
    }
}
