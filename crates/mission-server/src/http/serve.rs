//! Serving connections with limits that hold under abuse.
//!
//! `axum::serve` keeps a connection as long as its client likes: half-sent headers, half-sent
//! bodies and idle keep-alives stayed open for good, and a thousand idle sockets used up the
//! process's file descriptors, so every request timed out. Here each HTTP/1.1 connection gets:
//! - a **header timeout**: from the moment the connection is ready for a request (accepted, or
//!   done with the last response) to the end of the request's headers. It is the keep-alive idle
//!   timeout as well, since an idle connection is one waiting for headers (hyper's
//!   `header_read_timeout`, which runs exactly then);
//! - a **body idle timeout**: a request body that sends nothing for that long fails, and its
//!   connection closes with the response ([`body_idle_timeout`], a middleware);
//! - a **bound on concurrent connections**: past it, a connection is answered at once with a 503
//!   that says why and closed, so the server keeps descriptors for the connections it serves.
//!
//! Shutting down stops accepting, lets in-flight requests finish, and closes idle connections.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, HttpBody};
use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use futures_util::StreamExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tower::ServiceExt;

use crate::http::error::ApiError;

pub use crate::config::ConnectionLimits;

/// Serves `router` on `listener` within `limits` until `shutdown` completes, then waits for
/// the connections to finish their requests.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let (stop, stopping) = watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of descriptors or a connection reset before it was taken: wait a moment
                // rather than spin.
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tokio::spawn(refuse(tcp));
            continue;
        };
        let (router, mut stopping) = (router.clone(), stopping.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let service = hyper::service::service_fn(move |mut request: Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(ConnectInfo(peer));
                router.clone().oneshot(request.map(Body::new))
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
            // Upgrades: agents' session tunnels, and WebSockets through the sessions' proxy.
            let connection = builder.serve_connection(TokioIo::new(tcp), service).with_upgrades();
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => return,
                _ = stopping.wait_for(|stop| *stop) => connection.as_mut().graceful_shutdown(),
            }
            let _ = connection.await;
        });
    }
    drop(listener);
    stop.send_replace(true);
    // Every connection gives its slot back when it ends.
    let _all = slots.acquire_many(limits.max_connections as u32).await;
    Ok(())
}

/// Answers a connection past the bound with a 503 and closes it.
async fn refuse(mut tcp: tokio::net::TcpStream) {
    let body = serde_json::to_string(&ApiError::too_many_connections().problem()).expect("a problem serialises");
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: {}\r\nconnection: close\r\nretry-after: 1\r\n\
         content-length: {}\r\n\r\n{body}",
        mission_api::PROBLEM_CONTENT_TYPE,
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        tcp.write_all(response.as_bytes()).await?;
        tcp.shutdown().await
    })
    .await;
}

/// Fails a request body that sends nothing for `idle` (a middleware, with `idle` as its state).
pub async fn body_idle_timeout(State(idle): State<Duration>, request: Request, next: Next) -> Response {
    if HttpBody::is_end_stream(request.body()) {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let timed = futures_util::stream::unfold(Some(body.into_data_stream()), move |frames| async move {
        let mut frames = frames?;
        match tokio::time::timeout(idle, frames.next()).await {
            Ok(Some(frame)) => Some((frame, Some(frames))),
            Ok(None) => None,
            Err(_) => {
                let stalled = format!("the request body sent nothing for {} s", idle.as_secs());
                Some((Err(axum::Error::new(std::io::Error::new(std::io::ErrorKind::TimedOut, stalled))), None))
            }
        }
    });
    next.run(Request::from_parts(parts, Body::from_stream(timed))).await
}
