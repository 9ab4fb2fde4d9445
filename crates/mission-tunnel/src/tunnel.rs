//! The tunnel's two ends and the pieces they share (see the crate's docs).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper::HeaderMap;
use hyper::body::Frame;
use hyper::header::{self, HeaderName};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// The `Upgrade` protocol name of the tunnel.
pub const PROTOCOL: &str = "mission-tunnel";

/// Where agents open tunnels, on each replica.
pub const PATH: &str = "/api/v1/lz/tunnel";

/// The authority of every request for a session's app: `http://session/{path seen by the app}`.
pub const SESSION_AUTHORITY: &str = "session";

/// The authority of a job shell's WebSocket: `http://shell/`. The agent takes a request for a
/// shell by its authority alone, which the server writes (a client's request reaches a session's
/// app under [`SESSION_AUTHORITY`] whatever it carries), never by a header.
pub const SHELL_AUTHORITY: &str = "shell";

/// The prefix of every header of the tunnel's own. No client's header with it crosses the
/// server's proxy, nor an app's back ([`strip_tunnel_headers`]).
pub const HEADER_PREFIX: &str = "mission-";

/// The header that names a request's session (its job id).
pub const SESSION_HEADER: &str = "mission-session";

/// The header of a job shell's WebSocket (whose job [`SESSION_HEADER`] names): its query
/// (`mission_api::shell::ShellQuery`, URL-encoded as a query string is). It is read only from a
/// request for [`SHELL_AUTHORITY`].
pub const SHELL_HEADER: &str = "mission-shell";

/// The header of a request that asks the app for an upgrade: the client's `Upgrade` value.
pub const UPGRADE_HEADER: &str = "mission-upgrade";

/// The header of an answer whose app agreed to the upgrade (it answered `101`).
pub const UPGRADED_HEADER: &str = "mission-upgraded";

/// The header of the agent's own 404 for a session it does not run (the app's 404s have none).
pub const NO_SESSION_HEADER: &str = "mission-no-session";

/// Bytes of one read from an upgraded connection.
const READ_BYTES: usize = 16 * 1024;

/// Chunks that may wait in a [`channel_body`] for the other end to take them.
const CHUNKS_IN_FLIGHT: usize = 8;

/// HTTP/2 flow-control windows of a stream and of the whole tunnel, and the largest frame: what
/// one end may have in flight unread. Large enough for a download at memory speed; still a
/// bound (a slow reader holds a stream's window at most).
const STREAM_WINDOW: u32 = 4 << 20;
const TUNNEL_WINDOW: u32 = 16 << 20;
const MAX_FRAME: u32 = 256 << 10;

/// How often each end pings the other on an idle tunnel, and how long it waits for the answer
/// before taking the tunnel for dead.
const KEEP_ALIVE: (Duration, Duration) = (Duration::from_secs(20), Duration::from_secs(20));

/// An error of either end.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body of every request and answer through the tunnel.
pub type Body = UnsyncBoxBody<Bytes, BoxError>;

/// An agent's handling of one request from the tunnel, called in-process.
pub type LocalService = std::sync::Arc<
    dyn Fn(hyper::Request<Body>) -> std::pin::Pin<Box<dyn Future<Output = hyper::Response<Body>> + Send>> + Send + Sync,
>;

/// A tunnel within one process: the server's embedded landing zone serves the requests for its
/// sessions by a call ([`LocalService`]), with no connection, HTTP/2 framing or task between
/// the two ends. The server keeps one for the embedded landing zone; its agent, once up, puts
/// its service in it.
#[derive(Clone, Default)]
pub struct LocalTunnel(std::sync::Arc<std::sync::OnceLock<LocalService>>);

impl std::fmt::Debug for LocalTunnel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalTunnel").field("served", &self.0.get().is_some()).finish()
    }
}

impl LocalTunnel {
    /// The agent serves the tunnel's requests with `service` from now on.
    pub fn serve(&self, service: LocalService) {
        let _ = self.0.set(service);
    }

    /// The agent's service, once it serves.
    pub fn service(&self) -> Option<LocalService> {
        self.0.get().cloned()
    }
}

/// An empty body.
pub fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

/// A body of `bytes`.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).map_err(|never| match never {}).boxed_unsync()
}

/// Any body of bytes as a tunnel [`Body`].
pub fn boxed<B>(body: B) -> Body
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed_unsync()
}

/// A body fed through the returned sender, which holds at most a few chunks the other end has
/// not taken yet: a sender waits for a slow reader instead of buffering without end. The body
/// ends when the sender is dropped.
pub fn channel_body() -> (mpsc::Sender<Bytes>, Body) {
    let (sender, receiver) = mpsc::channel::<Bytes>(CHUNKS_IN_FLIGHT);
    let frames = futures_util::stream::unfold(receiver, |mut receiver| async move {
        let chunk = receiver.recv().await?;
        Some((Ok::<_, BoxError>(Frame::data(chunk)), receiver))
    });
    (sender, BodyExt::boxed_unsync(StreamBody::new(frames)))
}

/// Removes the headers that belong to one connection (RFC 9110, section 7.6.1) and so must not
/// cross a proxy, and which HTTP/2 refuses: `Connection` and those it names, `Keep-Alive`,
/// `Proxy-Connection`, `TE`, `Trailer`, `Transfer-Encoding`, `Upgrade`, and `Host` (HTTP/2
/// names the host in the request's URI).
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        header::HOST,
    ] {
        headers.remove(name);
    }
}

/// Removes every header of the tunnel's own ([`HEADER_PREFIX`]): from a client's request before
/// the server adds its own, and from an app's answer before the agent adds its own, so that no
/// header a client or an app sends changes what either end does.
pub fn strip_tunnel_headers(headers: &mut HeaderMap) {
    let own: Vec<HeaderName> =
        headers.keys().filter(|name| name.as_str().starts_with(HEADER_PREFIX)).cloned().collect();
    for name in own {
        headers.remove(name);
    }
}

/// Whether a request through the tunnel is for a job shell: its authority is [`SHELL_AUTHORITY`].
pub fn is_shell<B>(request: &hyper::Request<B>) -> bool {
    request.uri().authority().is_some_and(|authority| authority.as_str() == SHELL_AUTHORITY)
}

/// Copies an upgraded connection's bytes both ways until both directions end: what arrives in
/// `from_peer` (the tunnel stream's incoming body) is written to `io`, and what `io` reads goes
/// to `to_peer` (the other direction's [`channel_body`]). Each direction waits for its reader,
/// so neither buffers more than a chunk or two.
pub async fn splice<IO, B>(io: IO, mut from_peer: B, to_peer: mpsc::Sender<Bytes>)
where
    IO: AsyncRead + AsyncWrite + Unpin,
    B: hyper::body::Body<Data = Bytes> + Unpin,
{
    let (mut reader, mut writer) = tokio::io::split(io);
    let inbound = async {
        while let Some(Ok(frame)) = from_peer.frame().await {
            if let Ok(data) = frame.into_data()
                && writer.write_all(&data).await.is_err()
            {
                break;
            }
        }
        let _ = writer.shutdown().await;
    };
    let outbound = async {
        let mut buffer = vec![0; READ_BYTES];
        loop {
            match reader.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to_peer.send(Bytes::copy_from_slice(&buffer[..n])).await.is_err() {
                        break;
                    }
                }
            }
        }
        drop(to_peer);
    };
    tokio::join!(inbound, outbound);
}

/// The server's end: an HTTP/2 client over the agent's upgraded connection. The returned
/// future drives the connection and ends with it.
pub async fn client<IO>(
    io: IO,
) -> hyper::Result<(hyper::client::conn::http2::SendRequest<Body>, impl Future<Output = hyper::Result<()>>)>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = hyper::client::conn::http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(TUNNEL_WINDOW)
        .max_frame_size(MAX_FRAME)
        .keep_alive_interval(KEEP_ALIVE.0)
        .keep_alive_timeout(KEEP_ALIVE.1)
        .keep_alive_while_idle(true);
    builder.handshake(TokioIo::new(io)).await
}

/// The agent's end: serves the server's requests with `service` over the upgraded connection,
/// until it ends.
pub async fn serve<IO, S>(io: IO, service: S) -> hyper::Result<()>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::Service<hyper::Request<hyper::body::Incoming>, Response = hyper::Response<Body>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(TUNNEL_WINDOW)
        .max_frame_size(MAX_FRAME)
        .keep_alive_interval(KEEP_ALIVE.0)
        .keep_alive_timeout(KEEP_ALIVE.1);
    builder.serve_connection(TokioIo::new(io), service).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_stay_behind_and_end_to_end_ones_go() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("connection", "keep-alive, x-private"),
            ("x-private", "1"),
            ("keep-alive", "timeout=5"),
            ("upgrade", "websocket"),
            ("host", "example"),
            ("transfer-encoding", "chunked"),
            ("accept", "text/html"),
            ("sec-websocket-key", "abc"),
        ] {
            headers.insert(HeaderName::from_static(name), value.parse().unwrap());
        }
        strip_hop_by_hop(&mut headers);
        let mut left: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        left.sort();
        assert_eq!(left, ["accept", "sec-websocket-key"]);
    }

    #[test]
    fn no_header_of_the_tunnels_own_crosses_and_only_the_shell_authority_makes_a_shell() {
        let mut headers = HeaderMap::new();
        for name in ["mission-shell", "Mission-Session", "mission-upgraded", "mission-no-session", "missionary"] {
            headers.append(HeaderName::from_bytes(name.as_bytes()).unwrap(), "1".parse().unwrap());
        }
        strip_tunnel_headers(&mut headers);
        assert_eq!(headers.keys().map(HeaderName::as_str).collect::<Vec<_>>(), ["missionary"]);

        let request = |uri: &str| hyper::Request::builder().uri(uri).body(()).unwrap();
        assert!(is_shell(&request("http://shell/")));
        assert!(!is_shell(&request("http://session/shell")));
        assert!(!is_shell(&request("http://session//shell/")));
        assert!(!is_shell(&request("/")));
    }

    #[tokio::test]
    async fn splice_copies_both_ways_and_ends_when_both_do() {
        let (near, mut far) = tokio::io::duplex(64);
        let (to_near, body) = channel_body();
        let (from_near, mut back) = channel_body();
        let spliced = tokio::spawn(splice(near, body, from_near));
        to_near.send(Bytes::from_static(b"hello")).await.unwrap();
        drop(to_near);
        let mut got = Vec::new();
        far.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"hello");
        far.write_all(b"back").await.unwrap();
        far.shutdown().await.unwrap();
        drop(far);
        let mut answer = Vec::new();
        while let Some(frame) = back.frame().await {
            answer.extend_from_slice(&frame.unwrap().into_data().unwrap());
        }
        assert_eq!(answer, b"back");
        spliced.await.unwrap();
    }
}
