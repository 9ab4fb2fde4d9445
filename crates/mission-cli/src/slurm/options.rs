//! Command lines read as Slurm's commands read them (`getopt_long`): `--name=value`,
//! `--name value`, a unique prefix of a long name (`--job` for `--job-name`), `-Xvalue`,
//! `-X value`, short flags run together (`-vH`), and `--` ending the options. `sbatch` stops at
//! its first operand (the script), whose arguments follow.

/// Whether an option takes a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takes {
    /// None: a flag.
    Nothing,
    /// One, always.
    Value,
    /// One only when joined to it (`--exclusive=user`), as `getopt_long` has it.
    Optional,
}

/// One option a command knows: its long name, its short letter, what it takes, and whether
/// this service honours it (the others are accepted with a warning, as a site's Slurm accepts an
/// option of a feature it has switched off).
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    pub long: &'static str,
    pub short: Option<char>,
    pub takes: Takes,
    pub honoured: bool,
}

/// Shorthands for option tables.
pub const fn flag(long: &'static str, short: Option<char>) -> Spec {
    Spec { long, short, takes: Takes::Nothing, honoured: true }
}
pub const fn value(long: &'static str, short: Option<char>) -> Spec {
    Spec { long, short, takes: Takes::Value, honoured: true }
}
pub const fn ignored(long: &'static str, short: Option<char>, takes: Takes) -> Spec {
    Spec { long, short, takes, honoured: false }
}

/// An option as it was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Given {
    /// Its long name (the table's), or as written where it is unknown.
    pub long: String,
    /// Its value, where it took one.
    pub value: Option<String>,
    /// It is in the table and honoured.
    pub honoured: bool,
    /// It is in the table (honoured or not).
    pub known: bool,
}

/// What a command line holds: the options in order, then the operands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    pub options: Vec<Given>,
    pub operands: Vec<String>,
}

impl Parsed {
    /// The first option not in the table, as getopt_long reports it (`invalid option -- '1'`,
    /// `unrecognized option '--foo'`): what Slurm's query commands refuse.
    pub fn unknown(&self) -> Option<String> {
        self.options.iter().find(|o| !o.known).map(|o| match o.long.strip_prefix('-') {
            Some(letter) => format!("invalid option -- '{letter}'"),
            None => format!("unrecognized option '--{}'", o.long),
        })
    }

    /// The last value given for `long` (the last one wins, as in Slurm).
    pub fn last(&self, long: &str) -> Option<&str> {
        self.options.iter().rev().find(|o| o.long == long).and_then(|o| o.value.as_deref())
    }

    /// Whether the flag `long` was given.
    pub fn has(&self, long: &str) -> bool {
        self.options.iter().any(|o| o.long == long)
    }

    /// Every value given for `long`, in order.
    pub fn all(&self, long: &str) -> impl Iterator<Item = &str> {
        self.options.iter().filter(move |o| o.long == long).filter_map(|o| o.value.as_deref())
    }
}

/// Why a command line cannot be read: Slurm's own words for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OptionError {
    /// `--name` needs a value and has none.
    MissingValue(String),
    /// A prefix that names more than one option.
    Ambiguous(String),
}

impl std::fmt::Display for OptionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::MissingValue(name) => write!(f, "option '{name}' requires an argument"),
            Self::Ambiguous(name) => write!(f, "option '{name}' is ambiguous"),
        }
    }
}

/// Reads `args` against `table`. With `stop_at_operand`, the first operand and everything after
/// it are operands (`sbatch script.sh --its-own-flag`). An option not in the table is kept,
/// unhonoured, with the value joined to it (`--foo=bar`) if any: its caller warns of it.
pub fn parse(args: &[String], table: &'static [Spec], stop_at_operand: bool) -> Result<Parsed, OptionError> {
    let mut parsed = Parsed::default();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "--" {
            parsed.operands.extend(args[i..].iter().cloned());
            break;
        }
        if let Some(body) = arg.strip_prefix("--") {
            let (name, joined) = match body.split_once('=') {
                Some((name, value)) => (name, Some(value.to_owned())),
                None => (body, None),
            };
            let spec = match find_long(table, name) {
                Found::One(spec) => spec,
                Found::Many => return Err(OptionError::Ambiguous(format!("--{name}"))),
                Found::None => {
                    parsed.options.push(Given { long: name.to_owned(), value: joined, honoured: false, known: false });
                    continue;
                }
            };
            let value = match (spec.takes, joined) {
                (Takes::Nothing, _) => None,
                (Takes::Optional, joined) => joined,
                (Takes::Value, Some(value)) => Some(value),
                (Takes::Value, None) => match args.get(i) {
                    Some(next) => {
                        i += 1;
                        Some(next.clone())
                    }
                    None => return Err(OptionError::MissingValue(format!("--{}", spec.long))),
                },
            };
            parsed.options.push(Given { long: spec.long.to_owned(), value, honoured: spec.honoured, known: true });
            continue;
        }
        if let Some(letters) = arg.strip_prefix('-').filter(|l| !l.is_empty()) {
            for (at, letter) in letters.char_indices() {
                let Some(spec) = table.iter().find(|s| s.short == Some(letter)) else {
                    parsed.options.push(Given {
                        long: format!("-{letter}"),
                        value: None,
                        honoured: false,
                        known: false,
                    });
                    continue;
                };
                let rest = &letters[at + letter.len_utf8()..];
                let value = match spec.takes {
                    Takes::Nothing => None,
                    Takes::Optional => (!rest.is_empty()).then(|| rest.to_owned()),
                    Takes::Value if !rest.is_empty() => Some(rest.to_owned()),
                    Takes::Value => match args.get(i) {
                        Some(next) => {
                            i += 1;
                            Some(next.clone())
                        }
                        None => return Err(OptionError::MissingValue(format!("-{letter}"))),
                    },
                };
                parsed.options.push(Given { long: spec.long.to_owned(), value, honoured: spec.honoured, known: true });
                if spec.takes != Takes::Nothing {
                    break;
                }
            }
            continue;
        }
        if stop_at_operand {
            parsed.operands.extend(args[i - 1..].iter().cloned());
            break;
        }
        parsed.operands.push(arg.clone());
    }
    Ok(parsed)
}

enum Found {
    One(&'static Spec),
    Many,
    None,
}

/// The option `name` names: exactly, or as the one option it is a prefix of.
fn find_long(table: &'static [Spec], name: &str) -> Found {
    if let Some(spec) = table.iter().find(|s| s.long == name) {
        return Found::One(spec);
    }
    let mut matching = table.iter().filter(|s| !name.is_empty() && s.long.starts_with(name));
    match (matching.next(), matching.next()) {
        (Some(spec), None) => Found::One(spec),
        (Some(_), Some(_)) => Found::Many,
        _ => Found::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &[Spec] = &[
        value("job-name", Some('J')),
        value("time", Some('t')),
        value("time-min", None),
        flag("hold", Some('H')),
        flag("parsable", None),
        ignored("exclusive", None, Takes::Optional),
        ignored("mail-type", None, Takes::Value),
    ];

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn options_are_read_as_getopt_long_reads_them() {
        let parsed =
            parse(&args("-Jfit --time 10 -H --parsable=x --job=b --exclusive --mail-type ALL x.sh -J y"), TABLE, true)
                .unwrap();
        let longs: Vec<_> = parsed.options.iter().map(|o| (o.long.as_str(), o.value.as_deref())).collect();
        assert_eq!(
            longs,
            [
                ("job-name", Some("fit")),
                ("time", Some("10")),
                ("hold", None),
                ("parsable", None),
                ("job-name", Some("b")),
                ("exclusive", None),
                ("mail-type", Some("ALL")),
            ]
        );
        assert_eq!(parsed.operands, ["x.sh", "-J", "y"]);
        assert_eq!(parsed.last("job-name"), Some("b"));
        assert!(!parsed.options[5].honoured);
    }

    #[test]
    fn unknown_ambiguous_and_missing_values() {
        let parsed = parse(&args("--bogus=1 -q --wrap"), TABLE, true).unwrap();
        assert_eq!(
            parsed.options[0],
            Given { long: "bogus".into(), value: Some("1".into()), honoured: false, known: false }
        );
        assert_eq!(parsed.options[1].long, "-q");
        assert_eq!(parse(&args("--ti 5"), TABLE, true), Err(OptionError::Ambiguous("--ti".into())));
        assert_eq!(parse(&args("--time"), TABLE, true), Err(OptionError::MissingValue("--time".into())));
        assert_eq!(parse(&args("-HJ"), TABLE, true), Err(OptionError::MissingValue("-J".into())));
        let flags = parse(&args("-HJfit a b"), TABLE, false).unwrap();
        assert_eq!(flags.last("job-name"), Some("fit"));
        assert_eq!(flags.operands, ["a", "b"]);
    }
}
