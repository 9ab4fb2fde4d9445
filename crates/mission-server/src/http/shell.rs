//! The job shell through the server: `GET /api/v1/jobs/{id}/shell`, a WebSocket to a shell (or
//! a command) inside a running job's sandbox ([`mission_api::shell`]).
//!
//! Its owner alone opens one (a bearer token, or the console's cookie from a page of this
//! origin); everyone else gets a 404, as for a job they may not see. Each opening is recorded
//! before anything runs: a `shell.opened` event and an audit entry (`job.shell`, with the
//! command), written together. The WebSocket then travels the job's landing zone's session
//! tunnel ([`crate::http::sessions`]), and its agent starts the process and speaks the WebSocket
//! itself; the server only splices bytes, bounded as every upgraded connection through it is.
//!
//! A job on several landing zones (a gang) has a shell on each node (`node`, by rank). Its own
//! processes reach the other nodes the same way, through their agents: `mission lz-exec` asks
//! its landing zone's agent, which opens `GET /api/v1/lz/jobs/{id}/shell` here with its own
//! token ([`open_from_node`]), for a job it holds a part of.

use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use mission_api::shell::ShellQuery;

use crate::AppState;
use crate::domain::audit::Change;
use crate::http::error::ApiError;
use crate::http::routes::extract::parse_id;
use crate::http::routes::lz::Agent;
use crate::http::sessions::{caller_principal, requested_upgrade};

/// Opens a shell in a running job of the caller's, as a WebSocket (`Upgrade: websocket`):
/// binary messages whose first byte names their channel (0 stdin, 1 stdout, 2 stderr, 3 the
/// exit, as JSON `{"exit_code": N}`, last; 4 a terminal size, as JSON `{"cols": C, "rows":
/// R}`). The shell runs as the job's user, in its work dir, environment, cgroups and
/// namespaces. Each opening is audited (`job.shell`) and sends a `shell.opened` event.
#[utoipa::path(get, path = "/api/v1/jobs/{id}/shell", tag = "jobs",
    params(("id" = uuid::Uuid, Path, description = "job id"), ShellQuery,
        ("Connection" = String, Header, pattern = "^[Uu]pgrade$", description = "`Upgrade`"),
        ("Upgrade" = String, Header, pattern = "^websocket$", description = "`websocket`"),
        ("Sec-WebSocket-Key" = String, Header, pattern = "^[A-Za-z0-9+/]{21}[AQgw]==$",
            description = "the WebSocket handshake's key: 16 random bytes in base64 (RFC 6455)")),
    responses((status = 101, description = "the WebSocket to the shell"),
        (status = 400, body = mission_api::Problem, description = "not a WebSocket handshake, or a bad query"),
        (status = 403, body = mission_api::Problem, description = "a console cookie sent from a page of another origin"),
        (status = 404, body = mission_api::Problem),
        (status = 409, body = mission_api::Problem, description = "the job does not run, or the shell could not start in it"),
        (status = 503, body = mission_api::Problem, description = "the job's landing zone cannot be reached now")))]
pub async fn open_shell(State(app): State<AppState>, Path(id): Path<String>, request: Request) -> Response {
    match open(&app, &id, request).await {
        Ok(response) => response,
        Err(refusal) => refusal.into_response(),
    }
}

async fn open(app: &AppState, id: &str, request: Request) -> Result<Response, ApiError> {
    let job_id = parse_id("job_id", id)?;
    let headers = request.headers();
    let (who, by_cookie) = caller_principal(app, headers).await?.ok_or_else(|| {
        ApiError::unauthorized("sign in: a shell is opened with a bearer token or the console's session")
    })?;
    if by_cookie && !same_origin(headers, &app.public_url) {
        return Err(ApiError::forbidden("a shell opens with the console's cookie only from the console's own pages"));
    }
    let (key, query) = handshake(&request)?;
    let Some(job) = app.store.job_row(job_id).await?.filter(|job| job.user_id == who.user_id) else {
        return Err(ApiError::not_found("job", job_id));
    };
    let change = Change::new("job.shell", "job", job_id).in_project(job.project_id);
    let asked = serde_json::json!({ "command": query.command, "tty": query.tty(), "node": query.node });
    crate::domain::audit::note(who, change.with(asked));
    into_job(app, &job, query, key, request, "a shell opened").await
}

/// Opens a shell in a node of a running job whose part the calling agent's landing zone holds,
/// for that job's own processes (`mission lz-exec`): a WebSocket, as [`open_shell`]'s.
pub async fn open_from_node(
    State(app): State<AppState>,
    Agent(lz): Agent,
    Path(id): Path<String>,
    request: Request,
) -> Response {
    let opened = async {
        let job_id = parse_id("job_id", &id)?;
        let (key, query) = handshake(&request)?;
        let holds_part = |job: &mission_api::Job| crate::http::routes::lz::node_of(job, &lz).is_some();
        let Some(job) = app.store.job_row(job_id).await?.filter(holds_part) else {
            return Err(ApiError::not_found("job on this landing zone", job_id));
        };
        into_job(&app, &job, query, key, request, "a node of the job opened").await
    };
    opened.await.unwrap_or_else(IntoResponse::into_response)
}

/// A shell's WebSocket key and query, checked.
fn handshake(request: &Request) -> Result<(HeaderValue, ShellQuery), ApiError> {
    let headers = request.headers();
    let websocket =
        requested_upgrade(headers).is_some_and(|protocol| protocol.as_bytes().eq_ignore_ascii_case(b"websocket"));
    let key = headers.get("sec-websocket-key").cloned();
    let key = key.filter(|_| websocket).ok_or_else(|| {
        ApiError::invalid("a shell is a WebSocket: send Connection: upgrade, Upgrade: websocket and Sec-WebSocket-Key")
    })?;
    let query: ShellQuery = serde_urlencoded::from_str(request.uri().query().unwrap_or(""))
        .map_err(|e| ApiError::invalid(format!("malformed query string: {e}")))?;
    query.check().map_err(ApiError::invalid)?;
    Ok((key, query))
}

/// Records the opening of a shell in `job` (`who` says who opened it, in the event) and sends
/// its WebSocket through the tunnel of the landing zone of the node it asks for.
async fn into_job(
    app: &AppState,
    job: &mission_api::Job,
    query: ShellQuery,
    key: HeaderValue,
    request: Request,
    who: &str,
) -> Result<Response, ApiError> {
    let job_id = job.job_id;
    let node = query.node.unwrap_or(0);
    if let Some(problem) = job.node_problem(node) {
        return Err(ApiError::invalid_field("node", problem));
    }
    let what = query.command.as_deref().map_or_else(|| "an interactive shell".to_owned(), |c| format!("`{c}`"));
    let on = if job.nodes() > 1 { format!(" on node {node}") } else { String::new() };
    let data = serde_json::json!({
        "command": query.command,
        "tty": query.tty(),
        "node": query.node,
        "detail": format!("{who} {what} in job {job_id}{on}"),
    });
    let opened = app.store.open_shell(job_id, job.user_id, node, &data, mission_store::now()).await?;
    let Some(lz_id) = opened else {
        return Err(ApiError::conflict(format!(
            "job {job_id} is not running (it is {}): a shell opens in a running job",
            job.status
        )));
    };

    let mut forwarded = HeaderMap::new();
    forwarded.insert(mission_tunnel::SESSION_HEADER, HeaderValue::from_str(&job_id.to_string()).expect("an id"));
    let query = serde_urlencoded::to_string(&query).map_err(ApiError::internal)?;
    forwarded.insert(mission_tunnel::SHELL_HEADER, HeaderValue::from_str(&query).map_err(ApiError::internal)?);
    forwarded.insert("sec-websocket-key", key);
    let shell_uri = format!("http://{}/", mission_tunnel::SHELL_AUTHORITY);
    let answer = crate::http::sessions::through_tunnel(app, lz_id, request, shell_uri, forwarded, "websocket").await?;
    if answer.status() == StatusCode::SWITCHING_PROTOCOLS || answer.status().is_success() {
        return Ok(answer);
    }
    // The agent's refusal: its text says why.
    let status = answer.status();
    let text = axum::body::to_bytes(answer.into_body(), 64 * 1024).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&text).trim().to_owned();
    Err(match status {
        StatusCode::CONFLICT => ApiError::conflict(text),
        StatusCode::BAD_REQUEST => ApiError::invalid(text),
        _ => ApiError::bad_gateway(format!("the landing zone could not open the shell: {text}")),
    })
}

/// Whether a request's `Origin`, where it has one, is the origin it was sent to (its `Host`,
/// or the service's public URL, which a proxy in front may answer at): a page of another site
/// may not use the console's cookie to open a shell (a browser sends the cookie with any
/// page's WebSocket).
fn same_origin(headers: &HeaderMap, public_url: &str) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else { return true };
    if origin.eq_ignore_ascii_case(public_url.trim_end_matches('/')) {
        return true;
    }
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let origin_host = origin.split_once("://").map_or("", |(_, rest)| rest);
    !host.is_empty() && origin_host.eq_ignore_ascii_case(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_page_of_the_same_origin_may_use_the_cookie() {
        let headers = |origin: Option<&str>| {
            let mut headers = HeaderMap::new();
            headers.insert(header::HOST, HeaderValue::from_static("mission.example:8080"));
            if let Some(origin) = origin {
                headers.insert(header::ORIGIN, HeaderValue::from_str(origin).unwrap());
            }
            headers
        };
        let public = "https://compute.example/";
        assert!(same_origin(&headers(None), public), "a program sends no Origin");
        assert!(same_origin(&headers(Some("http://mission.example:8080")), public));
        assert!(same_origin(&headers(Some("https://MISSION.example:8080")), public));
        assert!(same_origin(&headers(Some("https://compute.example")), public), "behind a proxy");
        assert!(!same_origin(&headers(Some("http://evil.example")), public));
        assert!(!same_origin(&headers(Some("http://mission.example:8080.evil.example")), public));
        assert!(!same_origin(&headers(Some("null")), public));
    }
}
