//! Showing the device code to the user (spec §5 step 2): a browser tab on the verification page,
//! a local "Device Confirmation" page with the code, or printed instructions.

use std::process::{Command, Stdio};
use std::time::Duration;

use mission_api::DeviceAuthorization;

/// Opens `target` (a URL or a file path) in the user's browser: `$BROWSER` if set, else the
/// platform's opener. True when the opener accepted it.
pub async fn open(target: &str) -> bool {
    let target = target.to_owned();
    let attempt = tokio::task::spawn_blocking(move || {
        let mut candidates: Vec<String> = Vec::new();
        if let Ok(browser) = std::env::var("BROWSER") {
            candidates.extend(browser.split(':').filter(|b| !b.is_empty()).map(str::to_owned));
        }
        candidates.push(if cfg!(target_os = "macos") { "open".into() } else { "xdg-open".into() });
        candidates.into_iter().any(|program| {
            Command::new(program)
                .arg(&target)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
    });
    // An opener that blocks has most likely shown the page.
    tokio::time::timeout(Duration::from_secs(10), attempt).await.map_or(true, |r| r.unwrap_or(false))
}

/// Writes the local "Device Confirmation" page showing the user code and returns its path.
pub fn write_confirmation_page(authorization: &DeviceAuthorization) -> std::io::Result<std::path::PathBuf> {
    let code: String = authorization.user_code.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Device Confirmation</title>\
         <style>body{{font:18px system-ui,sans-serif;display:grid;place-items:center;min-height:90vh}}\
         code{{font-size:2.4rem;letter-spacing:.2em;padding:.4rem 1rem;border:2px solid #2f6fdf;border-radius:10px}}</style>\
         </head><body><main><h1>Device Confirmation</h1><p>Confirm that the other tab shows this code, then approve it there:</p>\
         <p><code>{code}</code></p><p>You can close this tab afterwards.</p></main></body></html>"
    );
    let path = std::env::temp_dir().join(format!("mission-device-confirmation-{}.html", std::process::id()));
    std::fs::write(&path, html)?;
    Ok(path)
}

/// The printed fallback.
pub fn print_instructions(authorization: &DeviceAuthorization) {
    eprintln!(
        "To sign in, open {} in a browser and enter the code {}",
        authorization.verification_uri, authorization.user_code
    );
}
