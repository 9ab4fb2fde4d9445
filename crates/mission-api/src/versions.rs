//! Versions on the wire: Mission's clients name theirs in `User-Agent`
//! (`mission-cli/0.1.0 mission-client/0.1.0`), the server its own in every answer's
//! [`SERVER_VERSION_HEADER`].

/// The header every answer of the server names its version in.
pub const SERVER_VERSION_HEADER: &str = "mission-server-version";

/// `MAJOR.MINOR.PATCH` as numbers (a pre-release or build suffix ignored); `None` for anything
/// else.
///
/// ```
/// assert_eq!(mission_api::versions::parse("1.20.3-rc.1"), Some((1, 20, 3)));
/// assert_eq!(mission_api::versions::parse("1.2"), None);
/// ```
pub fn parse(version: &str) -> Option<(u64, u64, u64)> {
    let core = version.split(['-', '+']).next()?;
    let mut parts = core.split('.').map(|p| p.parse::<u64>().ok());
    let version = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(version)
}
