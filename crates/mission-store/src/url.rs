//! The `--database-url`, kept so that its password shows nowhere: not in `Debug` or `Display`
//! output, logs or error messages. Only the backends that connect read it whole.

use std::fmt;
use std::str::FromStr;

/// A database URL: `sqlite://PATH` or `postgres://USER:PASSWORD@HOST:PORT/DATABASE`.
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseUrl(String);

/// The engines a [`DatabaseUrl`] can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Engine {
    Sqlite,
    Postgres,
}

impl DatabaseUrl {
    /// The SQLite database at `path`.
    pub fn sqlite(path: &std::path::Path) -> Self {
        Self(format!("sqlite://{}", path.display()))
    }

    /// The URL with its password: for connecting, never for showing.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the URL names a PostgreSQL database (which several replicas may share).
    pub fn is_postgres(&self) -> bool {
        self.engine() == Engine::Postgres
    }

    pub(crate) fn engine(&self) -> Engine {
        if self.0.starts_with("sqlite:") { Engine::Sqlite } else { Engine::Postgres }
    }

    /// The URL with any password replaced by `***`.
    pub fn redacted(&self) -> String {
        match url::Url::parse(&self.0) {
            Ok(mut url) if url.password().is_some() => {
                url.set_password(Some("***")).expect("a URL with a password can have another");
                url.to_string()
            }
            Ok(_) => self.0.clone(),
            // Not a URL we can take apart: show only its scheme.
            Err(_) => format!("{}…", self.0.split(':').next().unwrap_or_default()),
        }
    }
}

impl FromStr for DatabaseUrl {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, String> {
        let url = Self(raw.to_owned());
        let scheme = raw.split(':').next().unwrap_or_default();
        match scheme {
            "sqlite" => Ok(url),
            "postgres" | "postgresql" => match url::Url::parse(raw) {
                Ok(parsed) if parsed.host().is_some() => Ok(url),
                _ => Err(format!("{} is not a postgres://USER:PASSWORD@HOST:PORT/DATABASE URL", url.redacted())),
            },
            _ => Err(format!(
                "{} names no database this server can use: give sqlite://PATH or postgres://USER:PASSWORD@HOST:PORT/DATABASE",
                url.redacted()
            )),
        }
    }
}

impl fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DatabaseUrl({:?})", self.redacted())
    }
}

#[cfg(test)]
mod tests {
    use super::DatabaseUrl;

    #[test]
    fn a_password_shows_nowhere() {
        let url: DatabaseUrl = "postgres://mission:s3cret-pw@127.0.0.1:5432/mission".parse().unwrap();
        for shown in [url.to_string(), format!("{url:?}"), url.redacted()] {
            assert!(!shown.contains("s3cret-pw"), "{shown}");
            assert!(shown.contains("mission:***@127.0.0.1:5432/mission"), "{shown}");
        }
        let refused = "postgres://mission:s3cret-pw@/nohost".parse::<DatabaseUrl>().unwrap_err();
        assert!(!refused.contains("s3cret-pw"), "{refused}");
        let refused = "mysql://root:s3cret-pw@db/x".parse::<DatabaseUrl>().unwrap_err();
        assert!(!refused.contains("s3cret-pw") && refused.contains("mysql"), "{refused}");
    }

    #[test]
    fn sqlite_urls_pass_unchanged() {
        let url: DatabaseUrl = "sqlite:///var/lib/mission/mission.db".parse().unwrap();
        assert_eq!(url.to_string(), "sqlite:///var/lib/mission/mission.db");
        assert_eq!(url.expose(), "sqlite:///var/lib/mission/mission.db");
    }
}
