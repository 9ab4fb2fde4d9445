//! `sacctmgr show user|assoc`: the accounts (projects) a user may charge, as tools that look up
//! a default account read them. Nothing is changed through it: projects are managed with
//! `mission projects`.

use super::{Failure, Site, report};

pub async fn run(args: &[String]) -> u8 {
    report("sacctmgr", show(args).await)
}

async fn show(args: &[String]) -> Result<(), Failure> {
    let mut noheader = false;
    let mut parsable = None;
    let mut with_assocs = false;
    let mut words = Vec::new();
    for arg in args {
        match arg.as_str() {
            "-n" | "--noheader" => noheader = true,
            "-P" | "--parsable2" => parsable = Some(false),
            "-p" | "--parsable" => parsable = Some(true),
            "-s" | "--associations" => with_assocs = true,
            "-i" | "--immediate" | "-Q" | "--quiet" => {}
            "-V" | "--version" => {
                super::print_version();
                return Ok(());
            }
            other => words.push(other),
        }
    }
    let (entity, rest) = match words.as_slice() {
        ["show" | "list", entity, rest @ ..] => (entity.to_ascii_lowercase(), rest.to_vec()),
        _ => {
            return Err(Failure::new(
                1,
                "this service answers `sacctmgr show user [NAME]` and `sacctmgr show assoc`; projects are managed \
                 with `mission projects`",
            ));
        }
    };
    let mut format: Vec<(String, usize)> = Vec::new();
    let mut users: Vec<String> = Vec::new();
    for word in rest {
        if let Some(list) = word.strip_prefix("format=").or_else(|| word.strip_prefix("Format=")) {
            for field in list.split(',') {
                let (name, width) = field.split_once('%').unwrap_or((field, ""));
                format.push((name.to_ascii_lowercase(), width.parse().unwrap_or(10)));
            }
        } else if let Some(list) = word.strip_prefix("user=").or_else(|| word.strip_prefix("users=")) {
            users.extend(list.split(',').map(str::to_owned));
        } else if !word.contains('=') && word != "where" && word != "withassoc" {
            users.push(word.to_owned());
        } else if word == "withassoc" {
            with_assocs = true;
        }
    }
    let site = Site::open().await?;
    let asks_for_others = users.iter().any(|u| *u != site.username);
    let accounts = if asks_for_others { Vec::new() } else { site.own_accounts() };
    let default = accounts.first().copied().unwrap_or_default();
    let rows: Vec<Vec<(String, String)>> = match entity.as_str() {
        "user" | "users" if !with_assocs => {
            if format.is_empty() {
                format = vec![("user".into(), 10), ("defaultaccount".into(), 10), ("admin".into(), 9)];
            }
            if asks_for_others { Vec::new() } else { vec![row(&site.username, default, default)] }
        }
        "user" | "users" | "assoc" | "association" | "associations" => {
            if format.is_empty() {
                format = vec![("cluster".into(), 10), ("account".into(), 10), ("user".into(), 10)];
            }
            accounts.iter().map(|account| row(&site.username, account, default)).collect()
        }
        "account" | "accounts" => {
            if format.is_empty() {
                format = vec![("account".into(), 10), ("descr".into(), 20), ("org".into(), 20)];
            }
            accounts.iter().map(|account| row(&site.username, account, default)).collect()
        }
        other => return Err(Failure::new(1, format!("Unknown option: {other}"))),
    };
    let mut out = String::new();
    let mut line = |values: Vec<String>| {
        match parsable {
            Some(trailing) => {
                out.push_str(&values.join("|"));
                if trailing {
                    out.push('|');
                }
            }
            None => {
                let cells: Vec<String> = values
                    .iter()
                    .zip(&format)
                    .map(|(v, (_, w))| format!("{:>w$}", v.chars().take(*w).collect::<String>()))
                    .collect();
                out.push_str(&cells.join(" "));
            }
        }
        out.push('\n');
    };
    if !noheader {
        line(format.iter().map(|(name, _)| title(name)).collect());
        if parsable.is_none() {
            line(format.iter().map(|(_, w)| "-".repeat(*w)).collect());
        }
    }
    for row in rows {
        line(
            format
                .iter()
                .map(|(name, _)| row.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()).unwrap_or_default())
                .collect(),
        );
    }
    print!("{out}");
    Ok(())
}

/// A user's association with an account, by field name.
fn row(user: &str, account: &str, default: &str) -> Vec<(String, String)> {
    [
        ("user", user),
        ("account", account),
        ("defaultaccount", default),
        ("cluster", "mission"),
        ("admin", "None"),
        ("descr", account),
        ("org", account),
        ("partition", ""),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// A field's column title, as sacctmgr writes it.
fn title(name: &str) -> String {
    match name {
        "user" => "User",
        "account" => "Account",
        "defaultaccount" => "Def Acct",
        "cluster" => "Cluster",
        "admin" => "Admin",
        "descr" => "Descr",
        "org" => "Org",
        "partition" => "Partition",
        other => other,
    }
    .to_owned()
}
