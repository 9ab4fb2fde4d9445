//! The HTTP edge, the top floor: everything that knows about requests and responses.
//!
//! `routes` is the API (one module per resource, and the galileo façade), [`console`] the web
//! console, [`sessions`] the proxy to jobs' web apps and [`shell`] their terminals, [`idp`] the
//! built-in provider's endpoints. Around them: who is calling ([`auth`]), each request's id and
//! audit scope ([`audit`]), idempotency keys, client versions and deprecations, metrics, and the
//! connections themselves ([`serve`]). Failures leave as problem+json ([`error`]), the one place
//! a [`DomainError`](crate::domain::DomainError) becomes a status code.
//!
//! The floors below: [`crate::domain`] (what the service does), [`crate::services`] (what it
//! holds and runs), [`crate::config`]. Nothing below names anything here.

pub mod archive;
pub mod audit;
pub mod auth;
pub mod client_versions;
pub mod console;
pub mod deprecation;
pub mod error;
pub mod idempotency;
pub mod idp;
pub(crate) mod metrics;
pub(crate) mod routes;
pub mod serve;
pub mod sessions;
pub mod shell;
