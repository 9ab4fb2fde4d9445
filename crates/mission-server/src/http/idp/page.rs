//! The `/activate` sign-in page: plain HTML and inline CSS, no scripts, no CDN.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// What the page shows under its heading.
pub enum Outcome<'a> {
    /// The empty form.
    Form,
    /// The form again, with an error message.
    Error(&'a str),
    /// The device was approved.
    Approved,
    /// The request was denied.
    Denied,
}

/// The page, filled in.
pub struct ActivatePage<'a> {
    /// Code to pre-fill.
    pub user_code: &'a str,
    /// Username to pre-fill after an error.
    pub username: &'a str,
    /// What to show.
    pub outcome: Outcome<'a>,
}

impl ActivatePage<'_> {
    /// The form with an error message, as a 400 response.
    pub fn error(user_code: &str, username: &str, message: &str) -> Response {
        Self::error_with(StatusCode::BAD_REQUEST, user_code, username, message)
    }

    /// The form with an error message, as a response of `status`.
    pub fn error_with(status: StatusCode, user_code: &str, username: &str, message: &str) -> Response {
        let mut response = ActivatePage { user_code, username, outcome: Outcome::Error(message) }.into_response();
        *response.status_mut() = status;
        response
    }

    fn render(&self) -> String {
        let body = match self.outcome {
            Outcome::Approved => "<div class=\"done ok\"><h2>Device approved</h2>\
                <p>You are signed in. You can close this tab and return to your terminal.</p></div>"
                .to_owned(),
            Outcome::Denied => "<div class=\"done no\"><h2>Request denied</h2>\
                <p>The device was not signed in. You can close this tab.</p></div>"
                .to_owned(),
            Outcome::Form | Outcome::Error(_) => {
                let error = match self.outcome {
                    Outcome::Error(message) => format!("<p class=\"error\" role=\"alert\">{}</p>", escape(message)),
                    _ => String::new(),
                };
                format!(
                    r#"<p class="lead">Check that the code below matches the one shown on your device, then sign in to approve or deny it.</p>
{error}<form method="post" action="/activate">
  <label for="user_code">Device code</label>
  <input id="user_code" name="user_code" value="{code}" autocomplete="off" autocapitalize="characters" spellcheck="false" required class="code">
  <label for="username">Username</label>
  <input id="username" name="username" value="{username}" autocomplete="username" required>
  <label for="password">Password</label>
  <input id="password" name="password" type="password" autocomplete="current-password" required>
  <div class="actions">
    <button type="submit" name="action" value="approve" class="primary">Approve</button>
    <button type="submit" name="action" value="deny">Deny</button>
  </div>
</form>"#,
                    code = escape(self.user_code),
                    username = escape(self.username),
                )
            }
        };
        format!(
            r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sign in a device · Mission Compute</title>
<style>
  :root {{ color-scheme: light dark; --accent: #2f6fdf; }}
  body {{ margin: 0; min-height: 100vh; display: grid; place-items: center; font: 16px/1.5 system-ui, sans-serif;
         background: linear-gradient(160deg, #0f1b33, #1f3b73); }}
  main {{ width: min(26rem, 92vw); background: Canvas; color: CanvasText; border-radius: 14px; padding: 2rem 2.2rem;
         box-shadow: 0 20px 50px rgb(0 0 0 / .35); }}
  .brand {{ font-weight: 700; letter-spacing: .02em; color: var(--accent); margin: 0 0 .2rem; }}
  h1 {{ font-size: 1.45rem; margin: 0 0 .6rem; }}
  .lead {{ margin: 0 0 1.2rem; opacity: .8; }}
  label {{ display: block; font-size: .85rem; font-weight: 600; margin: .9rem 0 .3rem; }}
  input {{ width: 100%; box-sizing: border-box; padding: .6rem .7rem; border: 1px solid #9aa5b8; border-radius: 8px; font: inherit; }}
  input.code {{ font: 600 1.3rem/1.2 ui-monospace, monospace; letter-spacing: .15em; text-align: center; }}
  .actions {{ display: flex; gap: .7rem; margin-top: 1.4rem; }}
  button {{ flex: 1; padding: .65rem; border-radius: 8px; border: 1px solid #9aa5b8; background: transparent; color: inherit; font: inherit; cursor: pointer; }}
  button.primary {{ background: var(--accent); border-color: var(--accent); color: white; font-weight: 600; }}
  .error {{ background: #fde8e8; color: #8a1c1c; border-radius: 8px; padding: .6rem .8rem; }}
  .done h2 {{ margin: .4rem 0; }} .done.ok h2 {{ color: #1a7f37; }} .done.no h2 {{ color: #8a1c1c; }}
</style></head>
<body><main>
<p class="brand">Mission Compute</p>
<h1>Sign in a device</h1>
{body}
</main></body></html>"#
        )
    }
}

impl IntoResponse for ActivatePage<'_> {
    fn into_response(self) -> Response {
        let mut response = self.render().into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(
                "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
            ),
        );
        response
    }
}

/// Escapes text for HTML element content and attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
