//! The tunnel that carries interactive sessions' traffic between the server's proxy and a
//! landing zone's agent, and the pieces both ends share.
//!
//! The agent opens it, out, as it opens every connection: `GET {replica}{PATH}` with its token
//! and `Upgrade: mission-tunnel`. After the server's `101`, the connection carries HTTP/2 with the
//! roles turned round: the server is the client ([`client`]) and sends each request for one of
//! the landing zone's sessions as an HTTP/2 request, which the agent ([`serve`]) forwards to
//! the session's loopback port. HTTP/2 multiplexes the sessions' requests over the one
//! connection, and its flow control bounds what either end buffers for a slow reader.
//!
//! A request names its session (a job id) in [`SESSION_HEADER`] and carries the path and query
//! the app sees, under the authority [`SESSION_AUTHORITY`]; a job shell's goes to
//! [`SHELL_AUTHORITY`]. Headers of the tunnel's own ([`HEADER_PREFIX`]) are the server's and the
//! agent's alone: neither end lets a client's or an app's through ([`strip_tunnel_headers`]). An upgrade (a WebSocket) cannot travel as one in HTTP/2, so it goes as a request
//! whose [`UPGRADE_HEADER`] holds the client's `Upgrade` value: the agent asks the app for the
//! upgrade, and where the app agrees, answers `200` with [`UPGRADED_HEADER`] and the app's `101`
//! headers. From then on the request's body carries the client's bytes to the app and the
//! answer's body the app's bytes back ([`splice`] at both ends).
//!
//! Without its default feature `tunnel`, the crate is only the WebSocket framing
//! ([`websocket`]) that clients of the job shell need.

#[cfg(feature = "tunnel")]
mod tunnel;
pub mod websocket;

#[cfg(feature = "tunnel")]
pub use tunnel::*;
