//! `--config FILE`: the settings of `mission server` and `mission lz` from a TOML file, one key
//! per flag, named as the flag with `_` for `-` (`listen`, `data_dir`, `database_url`, …).
//!
//! - Precedence: a flag, then its environment variable, then the file, then the default. The
//!   file is applied by adding the flags it sets to the arguments clap parses, for the keys that
//!   no flag or variable sets; clap then checks them as it checks any flag.
//! - A secret (a flag whose environment value is hidden) may come from a file instead, the way
//!   systemd credentials and container secrets deliver it: the key `database_url_file`, or the
//!   variable `MISSION_DATABASE_URL_FILE` (with the variable's precedence).
//! - An unknown key, a value of the wrong type or one the flag refuses is an error naming the
//!   file's line: nothing is ignored.
//! - [`effective`] prints the configuration a command runs with (`--print-config`), secrets
//!   redacted, and [`example`] a file documenting every key (`mission server default-config`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command};

/// The commands that read a config file, and the variable naming it for each.
const DAEMONS: [(&str, &str); 2] = [("server", "MISSION_SERVER_CONFIG"), ("lz", "MISSION_LZ_CONFIG")];
/// Arguments that are not settings (`json` is the client's).
const NOT_SETTINGS: [&str; 5] = ["config", "print_config", "help", "version", "json"];

/// The arguments to parse, with what a config file (or a secret's file) added.
#[derive(Debug, Default)]
pub struct Applied {
    pub argv: Vec<OsString>,
    /// Where the arguments added came from (`file`, or `environment` for a secret's file), by id.
    pub sources: BTreeMap<String, &'static str>,
}

/// Adds to `argv` what the config file of a `server` or `lz` command line sets (and secrets'
/// files name), where no flag or variable sets it. Other command lines, and ones clap cannot
/// read, come back as they are (clap then says what is wrong). `cli` is built
/// ([`Command::build`]), so that subcommands hold the global arguments (`lz`'s `server`).
pub fn apply(cli: &Command, argv: Vec<OsString>) -> Result<Applied, String> {
    let Ok(probe) = cli.clone().ignore_errors(true).try_get_matches_from(&argv) else {
        return Ok(Applied { argv, ..Default::default() });
    };
    let Some(Leaf { name, daemon, command: leaf_cmd, matches }) = leaf(cli, &probe) else {
        return Ok(Applied { argv, ..Default::default() });
    };
    let mut applied = Applied { argv, ..Default::default() };
    let set_by_user =
        |id: &str| matches!(matches.value_source(id), Some(ValueSource::CommandLine | ValueSource::EnvVariable));

    // Secrets whose variable names a file: the variable's precedence.
    for arg in leaf_cmd.get_arguments().filter(|a| is_secret(a)) {
        let id = arg.get_id().as_str();
        let Some(var) = arg.get_env().map(|v| format!("{}_FILE", v.to_string_lossy())) else { continue };
        let Some(path) = std::env::var_os(&var) else { continue };
        if set_by_user(id) {
            continue;
        }
        let secret = read_secret(Path::new(&path)).map_err(|e| format!("{var}: {e}"))?;
        applied.argv.push(flag(arg, &secret));
        applied.sources.insert(id.to_owned(), "environment");
    }

    let Some(path) = matches.try_get_one::<PathBuf>("config").ok().flatten().cloned() else {
        return Ok(applied);
    };
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let table: BTreeMap<toml::Spanned<String>, toml::Spanned<toml::Value>> =
        toml::from_str(&text).map_err(|e| format!("{}: {}", path.display(), e.to_string().trim_end()))?;
    for (key, value) in table {
        let line = text[..key.span().start.min(text.len())].matches('\n').count() + 1;
        let here = format!("{}:{line}: {}", path.display(), key.get_ref());
        let (name_of_flag, from_file) = match key.get_ref().strip_suffix("_file") {
            Some(base) if find(name, daemon, base).is_some_and(is_secret) => (base, true),
            _ => (key.get_ref().as_str(), false),
        };
        let Some(arg) = find(name, daemon, name_of_flag) else {
            let hint = key.get_ref().replace('_', "-");
            return Err(format!(
                "{here}: unknown key (mission {name} has no --{hint} flag; `mission {name} --help` lists them)"
            ));
        };
        let id = arg.get_id().as_str();
        // A key another subcommand (`server add-user`) has no use for.
        if leaf_cmd.get_arguments().all(|a| a.get_id() != id) || set_by_user(id) || applied.sources.contains_key(id) {
            continue;
        }
        let values = if from_file {
            let toml::Value::String(file) = value.get_ref() else {
                return Err(format!("{here}: expected the path of a file holding the secret"));
            };
            vec![read_secret(Path::new(file)).map_err(|e| format!("{here}: {e}"))?]
        } else {
            values_of(arg, value.get_ref()).map_err(|e| format!("{here}: {e}"))?
        };
        for one in &values {
            check(arg, one).map_err(|e| format!("{here}: {e}"))?;
            applied.argv.push(flag(arg, one));
        }
        applied.sources.insert(id.to_owned(), "file");
    }
    Ok(applied)
}

/// A daemon's command line: `server` or `lz`, and what runs (its own or `server add-user`).
struct Leaf<'a> {
    name: &'a str,
    /// The daemon's command, whose arguments are the file's keys.
    daemon: &'a Command,
    /// The command that runs, and its matches.
    command: &'a Command,
    matches: &'a ArgMatches,
}

/// The daemon command line `matches` holds, if any.
fn leaf<'a>(cli: &'a Command, matches: &'a ArgMatches) -> Option<Leaf<'a>> {
    let (name, sub) = matches.subcommand()?;
    DAEMONS.iter().find(|(daemon, _)| *daemon == name)?;
    let daemon = cli.find_subcommand(name)?;
    Some(match sub.subcommand() {
        Some((action, matches)) => Leaf { name, daemon, command: daemon.find_subcommand(action)?, matches },
        None => Leaf { name, daemon, command: daemon, matches: sub },
    })
}

/// The setting of `mission {name}` (`cmd`) that `key` names (its flag's long name with `_` for `-`).
fn find<'a>(name: &str, cmd: &'a Command, key: &str) -> Option<&'a Arg> {
    if key.contains('-') {
        return None;
    }
    cmd.get_arguments().find(|a| key_of(name, a).as_deref() == Some(key))
}

/// The key of a setting of `mission {name}`; `None` for an argument that is none (the client's
/// `--server` is not the server's).
fn key_of(name: &str, arg: &Arg) -> Option<String> {
    let id = arg.get_id().as_str();
    let client_only = name == "server" && id == "server";
    if NOT_SETTINGS.contains(&id) || client_only {
        return None;
    }
    Some(arg.get_long()?.replace('-', "_"))
}

/// A flag whose value is a secret: its environment value is hidden from `--help`.
fn is_secret(arg: &Arg) -> bool {
    arg.is_hide_env_values_set()
}

fn is_switch(arg: &Arg) -> bool {
    matches!(arg.get_action(), ArgAction::SetTrue)
}

/// The file's value as the flag's values.
fn values_of(arg: &Arg, value: &toml::Value) -> Result<Vec<String>, String> {
    let scalar = |value: &toml::Value| match value {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(n) => Ok(n.to_string()),
        toml::Value::Float(x) => Ok(x.to_string()),
        other => Err(format!("expected a string or a number, not {}", other.type_str())),
    };
    match (value, arg.get_action()) {
        (toml::Value::Boolean(on), ArgAction::SetTrue) => Ok(if *on { vec![String::new()] } else { Vec::new() }),
        (other, ArgAction::SetTrue) => Err(format!("expected true or false, not {}", other.type_str())),
        (toml::Value::Array(items), ArgAction::Append) => items.iter().map(scalar).collect(),
        (toml::Value::Array(_), _) => Err("expected one value, not an array".into()),
        (other, _) => Ok(vec![scalar(other)?]),
    }
}

/// Checks one value as clap would check the flag's (a switch has none).
fn check(arg: &Arg, value: &str) -> Result<(), String> {
    if is_switch(arg) {
        return Ok(());
    }
    let long = arg.get_long().unwrap_or_default();
    let mut alone = Arg::new("value").long("value").value_parser(arg.get_value_parser().clone());
    if let Some(delimiter) = arg.get_value_delimiter() {
        alone = alone.value_delimiter(delimiter).action(ArgAction::Append);
    }
    let probe = Command::new("mission").no_binary_name(true).arg(alone);
    probe.try_get_matches_from([format!("--value={value}")]).map(drop).map_err(|e| {
        let text = e.to_string();
        let first = text.lines().next().unwrap_or_default();
        first.strip_prefix("error: ").unwrap_or(first).replace("'--value <value>'", &format!("'--{long}'"))
    })
}

/// The argument adding `value` for `arg`.
fn flag(arg: &Arg, value: &str) -> OsString {
    let long = arg.get_long().unwrap_or_default();
    if is_switch(arg) { format!("--{long}").into() } else { format!("--{long}={value}").into() }
}

/// A secret from its file: the file's text without its final line break.
fn read_secret(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(text.strip_suffix('\n').map(|t| t.strip_suffix('\r').unwrap_or(t)).unwrap_or(&text).to_owned())
}

/// Whether `matches` (a whole command line) asks a daemon to print its configuration; if so,
/// answers it as TOML, each key saying where its value came from. `cli` is built, as for
/// [`apply`].
pub fn print_config_requested(cli: &Command, matches: &ArgMatches, applied: &Applied) -> Option<String> {
    let leaf = leaf(cli, matches)?;
    if !leaf.matches.try_get_one::<bool>("print_config").ok().flatten().copied().unwrap_or(false) {
        return None;
    }
    Some(effective(leaf.name, leaf.command, leaf.matches, &applied.sources))
}

/// The effective configuration of `cmd` as TOML.
fn effective(name: &str, cmd: &Command, matches: &ArgMatches, added: &BTreeMap<String, &'static str>) -> String {
    let mut out = format!("# The configuration `mission {name}` runs with (flag > environment > file > default).\n");
    for arg in cmd.get_arguments() {
        let Some(key) = key_of(name, arg) else { continue };
        let id = arg.get_id().as_str();
        let raw: Vec<String> = matches
            .get_raw(id)
            .map(|values| values.map(|v| v.to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        let source = match (added.get(id), matches.value_source(id)) {
            (Some(source), _) => source,
            (None, Some(ValueSource::CommandLine)) => "flag",
            (None, Some(ValueSource::EnvVariable)) => "environment",
            (None, _) => "default",
        };
        let value = if raw.is_empty() {
            out.push_str(&format!("# {key} is not set\n"));
            continue;
        } else if is_secret(arg) {
            "\"[redacted]\"".to_owned()
        } else if is_switch(arg) {
            raw[0].clone()
        } else if matches!(arg.get_action(), ArgAction::Append) {
            format!("[{}]", raw.iter().map(|v| toml_value(v)).collect::<Vec<_>>().join(", "))
        } else {
            toml_value(&raw[0])
        };
        out.push_str(&format!("{key} = {value}  # {source}\n"));
    }
    out
}

/// A value as TOML: a number as it is, anything else a string.
fn toml_value(raw: &str) -> String {
    if raw.parse::<i64>().is_ok() {
        return raw.to_owned();
    }
    // A JSON string is a TOML basic string.
    serde_json::to_string(raw).expect("a string serializes")
}

/// The example config file of `mission`'s subcommand `name` (see [`example`]).
pub fn example_of(name: &str) -> String {
    let mut mission = <crate::Cli as clap::CommandFactory>::command();
    mission.build();
    example(name, mission.find_subcommand(name).expect("a subcommand of mission"))
}

/// An example config file for `mission {name}`, documenting every key, its variable and its
/// default; every key is commented out.
pub fn example(name: &str, cmd: &Command) -> String {
    let var = DAEMONS.iter().find(|(daemon, _)| *daemon == name).map_or("", |(_, var)| var);
    let mut out = format!(
        "# Configuration of `mission {name}`: `mission {name} --config FILE` (or {var}=FILE).\n\
         # Each key is the flag of the same name (`data_dir` is --data-dir). A flag, or the\n\
         # environment variable named beside the key, overrides the file. Remove a `#` to set a key.\n\
         # A secret may come from a file instead: `KEY_file = \"/run/credentials/…\"`.\n"
    );
    for arg in cmd.get_arguments() {
        let Some(key) = key_of(name, arg) else { continue };
        out.push('\n');
        let mut help = arg.get_long_help().or(arg.get_help()).map(|h| h.to_string()).unwrap_or_default();
        if !help.ends_with(['.', ')', ':']) {
            help.push('.');
        }
        for line in wrap(&help.replace('\n', " "), 94) {
            out.push_str(&format!("# {line}\n"));
        }
        if let Some(env) = arg.get_env() {
            out.push_str(&format!(
                "# Environment: {}{}\n",
                env.to_string_lossy(),
                if is_secret(arg) { " (or …_FILE)" } else { "" }
            ));
        }
        let defaults: Vec<String> = arg.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect();
        let value = match defaults.as_slice() {
            _ if is_switch(arg) => "false".to_owned(),
            [] if matches!(arg.get_action(), ArgAction::Append) => "[]".to_owned(),
            [] => {
                out.push_str(&format!("#{key} =\n"));
                continue;
            }
            [one] => toml_value(one),
            many => format!("[{}]", many.iter().map(|v| toml_value(v)).collect::<Vec<_>>().join(", ")),
        };
        out.push_str(&format!("#{key} = {value}\n"));
    }
    out
}

/// `text` in lines of at most `width` characters (a longer word stays whole).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in text.split_whitespace() {
        let line = lines.last_mut().expect("one line");
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(word.to_owned());
        } else {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    /// A daemon-shaped command line, as `mission` has.
    #[derive(Debug, Parser)]
    struct Cli {
        #[arg(long, global = true, env = "CONFIG_TEST_SERVER")]
        server: Option<String>,
        #[command(subcommand)]
        command: Daemon,
    }

    #[derive(Debug, clap::Subcommand)]
    enum Daemon {
        Server {
            #[arg(long, env = "CONFIG_TEST_LISTEN", default_value = "127.0.0.1:8080")]
            listen: String,
            #[arg(long, env = "CONFIG_TEST_PORT_LIMIT", default_value_t = 4)]
            limit: u32,
            #[arg(long, env = "CONFIG_TEST_DB", hide_env_values = true)]
            database_url: Option<String>,
            #[arg(long = "s3-endpoint", value_delimiter = ',')]
            s3_endpoints: Vec<String>,
            #[arg(long)]
            no_local_lz: bool,
            #[arg(long)]
            config: Option<PathBuf>,
            #[arg(long)]
            print_config: bool,
        },
    }

    /// The test command line, built as `mission`'s is.
    fn cli() -> Command {
        let mut cli = Cli::command();
        cli.build();
        cli
    }

    fn applied(file: &str, args: &[&str]) -> Result<(ArgMatches, Applied), String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("server.toml");
        std::fs::write(&path, file).unwrap();
        let mut argv: Vec<OsString> = vec!["mission".into(), "server".into(), "--config".into(), path.into()];
        argv.extend(args.iter().map(OsString::from));
        let applied = apply(&cli(), argv)?;
        let matches = Cli::command().try_get_matches_from(&applied.argv).map_err(|e| e.to_string())?;
        Ok((matches, applied))
    }

    fn server(matches: &ArgMatches) -> &ArgMatches {
        matches.subcommand_matches("server").unwrap()
    }

    #[test]
    fn the_file_sets_what_no_flag_sets_and_a_flag_wins() {
        let file = "listen = \"0.0.0.0:9000\"\nlimit = 8\ns3_endpoint = [\"a\", \"b\"]\nno_local_lz = true\n";
        let (matches, applied) = applied(file, &["--limit", "2"]).unwrap();
        let server = server(&matches);
        assert_eq!(server.get_one::<String>("listen").unwrap(), "0.0.0.0:9000");
        assert_eq!(*server.get_one::<u32>("limit").unwrap(), 2, "the flag wins");
        let endpoints: Vec<&String> = server.get_many("s3_endpoints").unwrap().collect();
        assert_eq!(endpoints, ["a", "b"]);
        assert!(server.get_flag("no_local_lz"));
        let printed = effective("server", cli().find_subcommand("server").unwrap(), server, &applied.sources);
        assert!(printed.contains("listen = \"0.0.0.0:9000\"  # file\n"), "{printed}");
        assert!(printed.contains("limit = 2  # flag\n"), "{printed}");
        assert!(printed.contains("# database_url is not set\n"), "{printed}");
    }

    #[test]
    fn unknown_keys_and_wrong_types_name_the_line() {
        let error = applied("listen = \"x\"\n\nlisten_port = 3\n", &[]).unwrap_err();
        assert!(error.ends_with("server.toml:3: listen_port: unknown key (mission server has no --listen-port flag; `mission server --help` lists them)"), "{error}");
        let error = applied("limit = \"many\"\n", &[]).unwrap_err();
        assert!(error.contains("server.toml:1: limit: invalid value 'many' for '--limit"), "{error}");
        let error = applied("no_local_lz = 1\n", &[]).unwrap_err();
        assert!(error.ends_with("server.toml:1: no_local_lz: expected true or false, not integer"), "{error}");
        let error = applied("listen = [\"a\"]\n", &[]).unwrap_err();
        assert!(error.ends_with("listen: expected one value, not an array"), "{error}");
        let error = applied("config = \"other.toml\"\n", &[]).unwrap_err();
        assert!(error.contains("config: unknown key"), "{error}");
        let error = applied("listen = \n", &[]).unwrap_err();
        assert!(error.contains("server.toml: TOML parse error at line 1"), "{error}");
    }

    #[test]
    fn a_secret_comes_from_its_file_and_is_never_printed() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("database_url");
        std::fs::write(&secret, "postgres://u:hunter2@db/mission\n").unwrap();
        let file = format!("database_url_file = {:?}\n", secret.display().to_string());
        let (matches, applied) = applied(&file, &["--print-config"]).unwrap();
        assert_eq!(server(&matches).get_one::<String>("database_url").unwrap(), "postgres://u:hunter2@db/mission");
        let printed = print_config_requested(&cli(), &matches, &applied).unwrap();
        assert!(printed.contains("database_url = \"[redacted]\"  # file") && !printed.contains("hunter2"), "{printed}");
        let error = self::applied("listen_file = \"/x\"\n", &[]).unwrap_err();
        assert!(error.contains("listen_file: unknown key"), "only secrets come from files: {error}");
    }

    #[test]
    fn the_example_documents_every_key_and_reads_back() {
        let server = cli().find_subcommand("server").unwrap().clone();
        let example = example("server", &server);
        for key in [
            "#listen = \"127.0.0.1:8080\"",
            "#limit = 4",
            "#database_url =",
            "#s3_endpoint = []",
            "#no_local_lz = false",
        ] {
            assert!(example.contains(key), "{key}: {example}");
        }
        assert!(example.contains("# Environment: CONFIG_TEST_DB (or …_FILE)"), "{example}");
        // Uncommented, every key with a value is a valid file.
        let uncommented: String = example
            .lines()
            .filter_map(|l| l.strip_prefix('#').filter(|l| !l.ends_with('=')))
            .filter(|l| !l.starts_with(' '))
            .map(|l| format!("{l}\n"))
            .collect();
        applied(&uncommented, &[]).unwrap();
    }
}
