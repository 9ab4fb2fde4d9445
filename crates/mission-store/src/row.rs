//! Reading a result row by column name, the same way on every backend.
//!
//! Both schemas keep ids as UUID text, times as microseconds since the epoch in 64-bit integers
//! and flags as booleans (`INTEGER` 0/1 on SQLite), so each record is decoded by one function
//! over [`Columns`] whichever database the row came from.

use chrono::{DateTime, Utc};
use sqlx::Row;
use uuid::Uuid;

use super::{StoreError, from_micros};

/// Typed access to a row's columns by name.
pub(crate) trait Columns {
    /// A text column.
    fn text(&self, column: &str) -> Result<String, StoreError>;
    /// A text column that may be NULL.
    fn opt_text(&self, column: &str) -> Result<Option<String>, StoreError>;
    /// An integer column.
    fn int(&self, column: &str) -> Result<i64, StoreError>;
    /// An integer column that may be NULL.
    fn opt_int(&self, column: &str) -> Result<Option<i64>, StoreError>;
    /// A floating-point column that may be NULL.
    fn opt_real(&self, column: &str) -> Result<Option<f64>, StoreError>;
    /// A boolean column.
    fn flag(&self, column: &str) -> Result<bool, StoreError>;
    /// A binary column that may be NULL.
    fn opt_bytes(&self, column: &str) -> Result<Option<Vec<u8>>, StoreError>;

    /// A UUID kept as text.
    fn uuid(&self, column: &str) -> Result<Uuid, StoreError> {
        parse_uuid(&self.text(column)?)
    }

    /// A UUID kept as text, or NULL.
    fn opt_uuid(&self, column: &str) -> Result<Option<Uuid>, StoreError> {
        self.opt_text(column)?.as_deref().map(parse_uuid).transpose()
    }

    /// A time kept as microseconds.
    fn time(&self, column: &str) -> Result<DateTime<Utc>, StoreError> {
        from_micros(self.int(column)?)
    }

    /// A time kept as microseconds, or NULL.
    fn opt_time(&self, column: &str) -> Result<Option<DateTime<Utc>>, StoreError> {
        self.opt_int(column)?.map(from_micros).transpose()
    }

    /// A count or size, never negative.
    fn count(&self, column: &str) -> Result<u64, StoreError> {
        let n = self.int(column)?;
        u64::try_from(n).map_err(|_| StoreError::Corrupt(format!("{column} = {n}")))
    }

    /// A JSON document kept as text.
    fn json<T: serde::de::DeserializeOwned>(&self, column: &str) -> Result<T, StoreError> {
        serde_json::from_str(&self.text(column)?).map_err(|e| StoreError::Corrupt(format!("{column}: {e}")))
    }

    /// A JSON document kept as text, or NULL.
    fn opt_json<T: serde::de::DeserializeOwned>(&self, column: &str) -> Result<Option<T>, StoreError> {
        let text = self.opt_text(column)?;
        text.map(|t| serde_json::from_str(&t).map_err(|e| StoreError::Corrupt(format!("{column}: {e}")))).transpose()
    }
}

macro_rules! impl_columns {
    ($row:ty) => {
        impl Columns for $row {
            fn text(&self, column: &str) -> Result<String, StoreError> {
                Ok(self.try_get(column)?)
            }
            fn opt_text(&self, column: &str) -> Result<Option<String>, StoreError> {
                Ok(self.try_get(column)?)
            }
            fn int(&self, column: &str) -> Result<i64, StoreError> {
                Ok(self.try_get(column)?)
            }
            fn opt_int(&self, column: &str) -> Result<Option<i64>, StoreError> {
                Ok(self.try_get(column)?)
            }
            fn opt_real(&self, column: &str) -> Result<Option<f64>, StoreError> {
                Ok(self.try_get(column)?)
            }
            fn flag(&self, column: &str) -> Result<bool, StoreError> {
                Ok(self.try_get(column)?)
            }
            fn opt_bytes(&self, column: &str) -> Result<Option<Vec<u8>>, StoreError> {
                Ok(self.try_get(column)?)
            }
        }
    };
}

impl_columns!(sqlx::sqlite::SqliteRow);
impl_columns!(sqlx::postgres::PgRow);

/// A UUID from its text form.
pub(crate) fn parse_uuid(s: &str) -> Result<Uuid, StoreError> {
    Uuid::parse_str(s).map_err(|_| StoreError::Corrupt(format!("uuid {s:?}")))
}
