//! The built-in identity provider's HTTP side, at the server root: `/oauth/device/code`,
//! `/oauth/token`, `/oauth/revoke`, `/.well-known/openid-configuration`,
//! `/.well-known/jwks.json` and the `/activate` page. Its keys, codes and passwords are
//! [`crate::services::idp`]'s.

mod page;
pub mod routes;
