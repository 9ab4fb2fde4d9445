//! The console's stylesheet and script, compiled into the binary and served under names that
//! carry a hash of their content (`/assets/console.1a2b3c4d5e.css`), so browsers may keep them
//! for a year and still fetch a new version the moment it ships. Written by hand, but for the
//! terminal's xterm.js (`assets/vendor/xterm`, see its README); nothing is fetched from anywhere
//! else.

use std::sync::LazyLock;

use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// One file served from the binary.
pub struct Asset {
    content: &'static str,
    content_type: &'static str,
    address: LazyLock<String>,
}

impl Asset {
    /// Where pages link the file.
    pub fn address(&'static self) -> &'static str {
        &self.address
    }
}

/// `/assets/{stem}.{hash of content}.{extension}`.
fn address(stem: &str, extension: &str, content: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, content.as_bytes());
    let hash: String = digest.as_ref()[..5].iter().map(|b| format!("{b:02x}")).collect();
    format!("/assets/{stem}.{hash}.{extension}")
}

const CSS_TEXT: &str = include_str!("../../../assets/console.css");
const JS_TEXT: &str = include_str!("../../../assets/console.js");
const XTERM_JS_TEXT: &str = include_str!("../../../assets/vendor/xterm/xterm.js");
const XTERM_CSS_TEXT: &str = include_str!("../../../assets/vendor/xterm/xterm.css");

/// The stylesheet: light and dark, narrow and wide screens.
pub static CSS: Asset = Asset {
    content: CSS_TEXT,
    content_type: "text/css; charset=utf-8",
    address: LazyLock::new(|| address("console", "css", CSS_TEXT)),
};

/// The script: uploads with progress, live job lists and logs, confirmations.
pub static JS: Asset = Asset {
    content: JS_TEXT,
    content_type: "text/javascript; charset=utf-8",
    address: LazyLock::new(|| address("console", "js", JS_TEXT)),
};

/// xterm.js and its fit add-on, for the terminal page alone.
pub static XTERM_JS: Asset = Asset {
    content: XTERM_JS_TEXT,
    content_type: "text/javascript; charset=utf-8",
    address: LazyLock::new(|| address("xterm", "js", XTERM_JS_TEXT)),
};

/// xterm.js's stylesheet.
pub static XTERM_CSS: Asset = Asset {
    content: XTERM_CSS_TEXT,
    content_type: "text/css; charset=utf-8",
    address: LazyLock::new(|| address("xterm", "css", XTERM_CSS_TEXT)),
};

/// `GET /assets/{name}`: an asset under its current address, cacheable for a year.
pub async fn serve(Path(name): Path<String>) -> Response {
    let wanted = format!("/assets/{name}");
    match [&CSS, &JS, &XTERM_JS, &XTERM_CSS].into_iter().find(|asset| asset.address() == wanted) {
        Some(asset) => (
            [
                (header::CONTENT_TYPE, HeaderValue::from_static(asset.content_type)),
                (header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=31536000, immutable")),
            ],
            asset.content,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no such asset (the console may have been upgraded: reload the page)")
            .into_response(),
    }
}
