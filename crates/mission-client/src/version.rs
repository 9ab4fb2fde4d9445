//! How the SDK names itself to the server, and what it learns of the server's version.
//!
//! Requests carry `User-Agent: [PRODUCT/VERSION ]mission-client/VERSION`: a program built on the
//! SDK names itself first with [`identify_as`] (`mission` does as `mission-cli`, the Python
//! package as `mission-python`), so the server can refuse a client too old for it with a 400
//! naming the version to upgrade to. Answers carry the server's version
//! (`Mission-Server-Version`); [`server_version_seen`] says the newest one seen, so a program can
//! tell its user that the server is newer than it knows.

use std::sync::{Mutex, OnceLock};

use mission_api::versions::{SERVER_VERSION_HEADER, parse};

/// The SDK's own version.
pub const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");

static PRODUCT: OnceLock<String> = OnceLock::new();
static SERVER_VERSION: Mutex<Option<String>> = Mutex::new(None);

/// Names the program in front of the SDK in every request's `User-Agent` (`product/version`);
/// call it once, before the first client is made (later calls change nothing).
pub fn identify_as(product: &str, version: &str) {
    let _ = PRODUCT.set(format!("{product}/{version}"));
}

/// The `User-Agent` requests carry.
pub(crate) fn user_agent() -> String {
    match PRODUCT.get() {
        Some(product) => format!("{product} mission-client/{SDK_VERSION}"),
        None => format!("mission-client/{SDK_VERSION}"),
    }
}

/// Notes the server version an answer names.
pub(crate) fn note_server_version(headers: &reqwest::header::HeaderMap) {
    let Some(version) = headers.get(SERVER_VERSION_HEADER).and_then(|v| v.to_str().ok()) else { return };
    let mut seen = SERVER_VERSION.lock().expect("not poisoned");
    if seen.as_deref().is_none_or(|old| parse(old) < parse(version)) {
        *seen = Some(version.to_owned());
    }
}

/// The newest server version any answer in this process named (`None` before the first answer,
/// or from a server too old to say).
pub fn server_version_seen() -> Option<String> {
    SERVER_VERSION.lock().expect("not poisoned").clone()
}
