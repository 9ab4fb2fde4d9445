//! Built-in accounts: creating users (`mission server add-user`) and the first admin.

use std::path::PathBuf;

use chrono::Utc;
use uuid::Uuid;

use crate::services::idp::password;
use mission_store::fsutil::write_private_file;
use mission_store::{Store, StoreError, UserRecord};

/// Username of the account created on first start.
pub const BOOTSTRAP_ADMIN: &str = "admin";
/// File in the data dir holding the first admin's generated password.
pub const BOOTSTRAP_PASSWORD_FILE: &str = "initial-admin-password";

/// Why an account could not be created.
#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    /// The username breaks the naming rule.
    #[error("invalid username {0:?}: use 1 to 64 letters, digits, '.', '_', '-' or '@'")]
    InvalidUsername(String),
    /// The password is too short.
    #[error("the password must have at least 8 characters")]
    WeakPassword,
    /// The store refused.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The password file could not be written.
    #[error("could not write {0}: {1}")]
    Io(PathBuf, std::io::Error),
}

/// A built-in account just created.
#[derive(Debug)]
pub struct NewAccount {
    /// The account.
    pub user: UserRecord,
    /// The password, when it was generated (and must be shown to someone).
    pub generated_password: Option<String>,
}

fn valid_username(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'))
}

/// Creates a built-in account; without a password one is generated and returned. Made `by` a
/// user (an admin, in the console), it goes in the audit trail.
pub async fn add_user(
    store: &Store,
    username: &str,
    password: Option<&str>,
    admin: bool,
    by: Option<crate::domain::Principal>,
) -> Result<NewAccount, AccountError> {
    if !valid_username(username) {
        return Err(AccountError::InvalidUsername(username.to_owned()));
    }
    let generated = password.is_none().then(password::generate);
    let password = password.or(generated.as_deref()).expect("one of them is set");
    if password.chars().count() < 8 {
        return Err(AccountError::WeakPassword);
    }
    let user = UserRecord {
        user_id: Uuid::new_v4(),
        username: username.to_owned(),
        password_hash: Some(password::hash(password)),
        external_sub: None,
        admin,
        created_at: Utc::now(),
    };
    if let Some(by) = by {
        let change = crate::domain::audit::Change::new("user.create", "user", user.user_id).named(username);
        crate::domain::audit::note(by, change.with(serde_json::json!({ "username": username, "admin": admin })));
    }
    store.insert_user(&user).await?;
    Ok(NewAccount { user, generated_password: generated })
}

/// The first admin account, created when the server starts on an empty store.
#[derive(Debug, Clone)]
pub struct BootstrapAdmin {
    /// Its username.
    pub username: String,
    /// Where its generated password was saved (mode 0600).
    pub password_file: PathBuf,
}

/// Creates `admin` with a generated password saved to the data dir when there are no users yet.
pub async fn bootstrap_admin(
    store: &Store,
    data_dir: &std::path::Path,
) -> Result<Option<BootstrapAdmin>, AccountError> {
    if store.count_users().await? > 0 {
        return Ok(None);
    }
    let account = match add_user(store, BOOTSTRAP_ADMIN, None, true, None).await {
        Ok(account) => account,
        // Another replica starting at the same moment made it.
        Err(AccountError::Store(StoreError::Conflict(_))) => return Ok(None),
        Err(e) => return Err(e),
    };
    let password = account.generated_password.expect("generated");
    let password_file = data_dir.join(BOOTSTRAP_PASSWORD_FILE);
    write_private_file(&password_file, format!("{password}\n").as_bytes())
        .map_err(|e| AccountError::Io(password_file.clone(), e))?;
    Ok(Some(BootstrapAdmin { username: BOOTSTRAP_ADMIN.to_owned(), password_file }))
}
