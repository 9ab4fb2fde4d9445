//! Which landing zone an agent's token belongs to.
//!
//! Every request an agent makes (reports, log chunks, files) is authenticated by its token; the
//! answer is cached so that this costs a hash and a map lookup instead of a database query. Only
//! tokens found in the store are cached, so the cache holds at most one entry per landing zone.
//! Removing or re-registering a landing zone calls [`AgentTokens::forget`]; a lookup that read the
//! store before such a change does not cache what it read (the generation tells).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::services::idp::hash_secret;
use mission_store::{LzIdentity, Store, StoreError};

/// The cache of agent tokens.
#[derive(Debug)]
pub struct AgentTokens {
    store: Store,
    cache: Mutex<Cache>,
}

#[derive(Debug, Default)]
struct Cache {
    generation: u64,
    by_hash: HashMap<String, LzIdentity>,
}

impl AgentTokens {
    /// An empty cache over `store`.
    pub fn new(store: Store) -> Self {
        Self { store, cache: Mutex::new(Cache::default()) }
    }

    /// The landing zone whose token `token` is, if any.
    pub async fn identify(&self, token: &str) -> Result<Option<LzIdentity>, StoreError> {
        let hash = hash_secret(token);
        let generation = {
            let cache = self.cache.lock().expect("not poisoned");
            if let Some(lz) = cache.by_hash.get(&hash) {
                return Ok(Some(lz.clone()));
            }
            cache.generation
        };
        let found = self.store.lz_by_token_hash(&hash).await?;
        if let Some(lz) = &found {
            let mut cache = self.cache.lock().expect("not poisoned");
            if cache.generation == generation {
                cache.by_hash.insert(hash, lz.clone());
            }
        }
        Ok(found)
    }

    /// Drops every cached token; called after landing zones are removed or get new tokens.
    pub fn forget(&self) {
        let mut cache = self.cache.lock().expect("not poisoned");
        cache.generation += 1;
        cache.by_hash.clear();
    }
}
