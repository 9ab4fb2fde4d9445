//! The built-in mission-type catalogue and the checking of mission settings against it.
//!
//! A mission type is data: a settings schema, a command template and resource defaults. The ids
//! are fixed so that scripts and missions keep working across servers and versions.

use std::collections::BTreeMap;

use mission_api::paths::MissionPath;
use mission_api::{MissionType, MissionTypeSummary, ResourceDefaults};
use uuid::{Uuid, uuid};

use crate::domain::{DomainError, DomainResult};

/// Most settings a mission may carry.
pub const MAX_SETTINGS: usize = 64;
/// Longest setting value, in bytes.
pub const MAX_SETTING_VALUE_BYTES: usize = 4096;

/// What values a setting takes.
#[derive(Debug, Clone, Copy)]
enum SettingKind {
    /// A file path relative to the mission root.
    Path,
    /// Any text (single line).
    Text,
    /// A whole number in a range.
    Integer { min: i64, max: i64 },
    /// One of a fixed list.
    Choice(&'static [&'static str]),
    /// A command line, split like a POSIX shell would (quotes and backslashes), not run by one.
    CommandLine,
}

/// One setting of a mission type.
#[derive(Debug, Clone, Copy)]
struct SettingDef {
    name: &'static str,
    kind: SettingKind,
    default: Option<&'static str>,
    description: &'static str,
}

impl SettingDef {
    /// The settings-info string: expected type or options, whether required, what it is for.
    fn info(&self) -> String {
        let kind = match self.kind {
            SettingKind::Path => "path".to_owned(),
            SettingKind::Text => "string".to_owned(),
            SettingKind::Integer { min, max } => format!("integer {min}..{max}"),
            SettingKind::Choice(options) => format!("one of: {}", options.join(", ")),
            SettingKind::CommandLine => "command line".to_owned(),
        };
        match self.default {
            None => format!("{kind} (required): {}", self.description),
            Some(d) => format!("{kind} (default {d}): {}", self.description),
        }
    }

    fn check(&self, value: &str) -> Result<(), String> {
        if value.len() > MAX_SETTING_VALUE_BYTES {
            return Err(format!("longer than {MAX_SETTING_VALUE_BYTES} bytes"));
        }
        if value.chars().any(char::is_control) {
            return Err("must not contain control characters".into());
        }
        match self.kind {
            SettingKind::Path => MissionPath::parse(value).map(drop).map_err(|e| e.to_string()),
            SettingKind::Text if value.trim().is_empty() => Err("must not be empty".into()),
            SettingKind::Text => Ok(()),
            SettingKind::Integer { min, max } => match value.parse::<i64>() {
                Ok(n) if (min..=max).contains(&n) => Ok(()),
                _ => Err(format!("expected an integer from {min} to {max}, got {value:?}")),
            },
            SettingKind::Choice(options) if options.contains(&value) => Ok(()),
            SettingKind::Choice(options) => Err(format!("expected one of {}, got {value:?}", options.join(", "))),
            SettingKind::CommandLine => match split_command_line(value) {
                Ok(argv) if !argv.is_empty() => Ok(()),
                Ok(_) => Err("the command line is empty".into()),
                Err(e) => Err(e),
            },
        }
    }
}

/// How a form asks for a setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldInput {
    /// A line of text.
    Text,
    /// A whole number from `min` to `max`.
    Number {
        /// The least value.
        min: i64,
        /// The greatest value.
        max: i64,
    },
    /// One of these.
    Choice(&'static [&'static str]),
}

/// One setting of a mission type, as a form field.
#[derive(Debug, Clone)]
pub struct SettingField {
    /// The setting's name.
    pub name: &'static str,
    /// What it is for.
    pub label: &'static str,
    /// Its value when a mission leaves it out; `None`: a job needs it set.
    pub default: Option<&'static str>,
    /// The input that asks for it.
    pub input: FieldInput,
}

/// A mission type of the catalogue.
#[derive(Debug)]
pub struct MissionTypeDef {
    id: Uuid,
    name: &'static str,
    version: &'static str,
    description: &'static str,
    settings: &'static [SettingDef],
    command: &'static [&'static str],
    resources: ResourceDefaults,
}

const DEFAULT_RESOURCES: ResourceDefaults =
    ResourceDefaults { cpu_count: 1, memory_amount: 1024, gpu_count: 0, time_limit: None };

const FILENAME: SettingDef = SettingDef {
    name: "filename",
    kind: SettingKind::Path,
    default: None,
    description: "entry script, relative to the mission root",
};

/// The id of the `shell` mission type, which runs a script from the mission's files.
pub const SHELL: Uuid = uuid!("99e803ea-1829-42ba-be3d-294fb6a5e640");

/// The id of the `command` mission type, which runs a command line from its settings.
pub const COMMAND: Uuid = uuid!("ac11c23f-e8dc-4620-b3f5-efe47ca1f12d");

static CATALOGUE: &[MissionTypeDef] = &[
    MissionTypeDef {
        id: SHELL,
        name: "shell",
        version: "1",
        description: "Runs a shell script from the mission's files.",
        settings: &[
            FILENAME,
            SettingDef {
                name: "shell",
                kind: SettingKind::Choice(&["bash", "sh"]),
                default: Some("bash"),
                description: "shell that runs the script",
            },
        ],
        command: &["{shell}", "{filename}", "{args}"],
        resources: DEFAULT_RESOURCES,
    },
    MissionTypeDef {
        id: uuid!("c407e534-62e7-472b-8830-3d2ebe1bffbd"),
        name: "python",
        version: "3",
        description: "Runs a Python script from the mission's files.",
        settings: &[
            FILENAME,
            SettingDef {
                name: "interpreter",
                kind: SettingKind::Text,
                default: Some("python3"),
                description: "Python interpreter to run the script with",
            },
        ],
        command: &["{interpreter}", "{filename}", "{args}"],
        resources: DEFAULT_RESOURCES,
    },
    MissionTypeDef {
        id: uuid!("aa45f230-5503-4cde-a793-5119a8a20aa4"),
        name: "r",
        version: "4",
        description: "Runs an R script from the mission's files with Rscript.",
        settings: &[FILENAME],
        command: &["Rscript", "{filename}", "{args}"],
        resources: DEFAULT_RESOURCES,
    },
    MissionTypeDef {
        id: uuid!("8493f568-36a4-4569-8f01-f99ddfe95bef"),
        name: "julia",
        version: "1",
        description: "Runs a Julia script from the mission's files.",
        settings: &[
            FILENAME,
            SettingDef {
                name: "threads",
                kind: SettingKind::Integer { min: 1, max: 1024 },
                default: Some("1"),
                description: "Julia threads",
            },
        ],
        command: &["julia", "--threads={threads}", "{filename}", "{args}"],
        resources: DEFAULT_RESOURCES,
    },
    MissionTypeDef {
        id: COMMAND,
        name: "command",
        version: "1",
        description: "Runs a command line given in the settings, in the mission's folder.",
        settings: &[SettingDef {
            name: "command",
            kind: SettingKind::CommandLine,
            default: None,
            description: "program and arguments, quoted as in a POSIX shell (not run by one)",
        }],
        command: &["{command}", "{args}"],
        resources: DEFAULT_RESOURCES,
    },
];

/// Every built-in mission type.
pub fn all() -> &'static [MissionTypeDef] {
    CATALOGUE
}

/// The mission type with this id.
pub fn find(id: Uuid) -> Option<&'static MissionTypeDef> {
    CATALOGUE.iter().find(|t| t.id == id)
}

impl MissionTypeDef {
    /// The type's id.
    pub fn id(&self) -> Uuid {
        self.id
    }

    /// The listing entry.
    pub fn summary(&self) -> MissionTypeSummary {
        MissionTypeSummary {
            id: self.id,
            name: self.name.into(),
            version: self.version.into(),
            description: self.description.into(),
        }
    }

    /// Setting name to expected type or options (`GET /mission-types/{id}/settings`).
    pub fn settings_info(&self) -> BTreeMap<String, String> {
        self.settings.iter().map(|s| (s.name.to_owned(), s.info())).collect()
    }

    /// The settings as form fields, in the type's order: what the console's mission form and
    /// the galileo wizard spec are drawn from.
    pub fn form_fields(&self) -> Vec<SettingField> {
        self.settings
            .iter()
            .map(|s| SettingField {
                name: s.name,
                label: s.description,
                default: s.default,
                input: match s.kind {
                    SettingKind::Integer { min, max } => FieldInput::Number { min, max },
                    SettingKind::Choice(options) => FieldInput::Choice(options),
                    SettingKind::Path | SettingKind::Text | SettingKind::CommandLine => FieldInput::Text,
                },
            })
            .collect()
    }

    /// The settings as a `galileo-sdk` "wizard spec": one page whose fields each have a `key`
    /// and a `type` (`text`, `number`, or `single-select` with `options`), which that client
    /// turns into its settings info.
    pub fn wizard_spec(&self) -> serde_json::Value {
        let fields: Vec<serde_json::Value> = self
            .form_fields()
            .into_iter()
            .map(|f| {
                let mut field = serde_json::json!({"key": f.name, "label": f.label, "default": f.default});
                match f.input {
                    FieldInput::Number { min, max } => {
                        field["type"] = "number".into();
                        field["min"] = min.into();
                        field["max"] = max.into();
                    }
                    FieldInput::Choice(options) => {
                        field["type"] = "single-select".into();
                        field["options"] =
                            options.iter().map(|o| serde_json::json!({"value": o, "label": o})).collect();
                    }
                    FieldInput::Text => field["type"] = "text".into(),
                }
                field
            })
            .collect();
        serde_json::json!([{"title": self.name, "fields": fields}])
    }

    /// The full description.
    pub fn detail(&self) -> MissionType {
        MissionType {
            id: self.id,
            name: self.name.into(),
            version: self.version.into(),
            description: self.description.into(),
            settings: self.settings_info(),
            command: self.command.iter().map(|s| (*s).to_owned()).collect(),
            resources: self.resources,
        }
    }

    /// Checks that every setting is known to this type and has a valid value. Required settings
    /// may still be missing: a mission is filled in over time and they are enforced when a job
    /// starts.
    pub fn check_settings(&self, settings: &BTreeMap<String, String>) -> DomainResult<()> {
        if settings.len() > MAX_SETTINGS {
            return Err(DomainError::invalid("settings", format!("at most {MAX_SETTINGS} settings")));
        }
        for (name, value) in settings {
            let Some(def) = self.settings.iter().find(|d| d.name == name) else {
                let known: Vec<_> = self.settings.iter().map(|d| d.name).collect();
                return Err(DomainError::invalid_setting(
                    name,
                    format!("not a setting of mission type {:?}; its settings are: {}", self.name, known.join(", ")),
                ));
            };
            def.check(value).map_err(|e| DomainError::invalid_setting(name, e))?;
        }
        Ok(())
    }
}

impl MissionTypeDef {
    /// The resources a job gets for what its request leaves out.
    pub fn resources(&self) -> ResourceDefaults {
        self.resources
    }

    /// The program and arguments a job of this type runs for a mission with `settings` and
    /// `args`: the command template with `{setting}` replaced by the setting (or its default) and
    /// `{args}` by the arguments, one word each. A command-line setting standing alone becomes
    /// its words. A required setting the mission lacks is a 400 naming it.
    pub fn command_line(&self, settings: &BTreeMap<String, String>, args: &[String]) -> DomainResult<Vec<String>> {
        let value = |def: &SettingDef| -> DomainResult<String> {
            match settings.get(def.name).map(String::as_str).or(def.default) {
                Some(v) => Ok(v.to_owned()),
                None => Err(DomainError::invalid_setting(
                    def.name,
                    format!("required by mission type {:?} to run a job; set it on the mission", self.name),
                )),
            }
        };
        let mut argv = Vec::new();
        for part in self.command {
            if *part == "{args}" {
                argv.extend(args.iter().cloned());
                continue;
            }
            let alone =
                self.settings.iter().find(|d| part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) == Some(d.name));
            if let Some(def) = alone.filter(|d| matches!(d.kind, SettingKind::CommandLine)) {
                argv.extend(split_command_line(&value(def)?).map_err(|e| DomainError::invalid_setting(def.name, e))?);
                continue;
            }
            let mut word = (*part).to_owned();
            for def in self.settings {
                let placeholder = format!("{{{}}}", def.name);
                if word.contains(&placeholder) {
                    word = word.replace(&placeholder, &value(def)?);
                }
            }
            argv.push(word);
        }
        Ok(argv)
    }
}

/// Splits a command line into words the way a POSIX shell would, without expanding anything:
/// single quotes keep everything literal, double quotes allow `\"` and `\\`, a backslash outside
/// quotes escapes the next character.
pub fn split_command_line(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err("unclosed single quote".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err("unclosed double quote".into()),
                        },
                        Some(c) => word.push(c),
                        None => return Err("unclosed double quote".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(c) => word.push(c),
                    None => return Err("trailing backslash".into()),
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_names_stable() {
        let names: Vec<_> = all().iter().map(|t| t.name).collect();
        assert_eq!(names, ["shell", "python", "r", "julia", "command"]);
        let mut ids: Vec<_> = all().iter().map(|t| t.id).collect();
        ids.dedup();
        assert_eq!(ids.len(), 5);
    }

    #[test]
    fn settings_are_checked() {
        let python = all().iter().find(|t| t.name == "python").unwrap();
        let ok = BTreeMap::from([("filename".to_owned(), "src/main.py".to_owned())]);
        assert!(python.check_settings(&ok).is_ok());
        let unknown = BTreeMap::from([("colour".to_owned(), "red".to_owned())]);
        assert!(python.check_settings(&unknown).unwrap_err().to_string().contains("colour"));
        let escape = BTreeMap::from([("filename".to_owned(), "../x.py".to_owned())]);
        assert!(python.check_settings(&escape).unwrap_err().to_string().contains(".."));
        let julia = all().iter().find(|t| t.name == "julia").unwrap();
        let bad = BTreeMap::from([("threads".to_owned(), "many".to_owned())]);
        assert!(julia.check_settings(&bad).unwrap_err().to_string().contains("integer"));
    }

    #[test]
    fn command_lines_split_like_a_shell() {
        assert_eq!(
            split_command_line(r#"python3 -c 'print("hi")' "a b" c\ d"#).unwrap(),
            ["python3", "-c", "print(\"hi\")", "a b", "c d"]
        );
        assert_eq!(split_command_line("''").unwrap(), [""]);
        assert!(split_command_line("'open").is_err());
    }

    #[test]
    fn command_lines_are_rendered_from_settings_and_args() {
        let find = |name: &str| all().iter().find(|t| t.name == name).unwrap();
        let settings = BTreeMap::from([("filename".to_owned(), "run.py".to_owned())]);
        let args = ["--n".to_owned(), "a b".to_owned()];
        assert_eq!(find("python").command_line(&settings, &args).unwrap(), ["python3", "run.py", "--n", "a b"]);
        let julia =
            BTreeMap::from([("filename".to_owned(), "m.jl".to_owned()), ("threads".to_owned(), "4".to_owned())]);
        assert_eq!(find("julia").command_line(&julia, &[]).unwrap(), ["julia", "--threads=4", "m.jl"]);
        let command = BTreeMap::from([("command".to_owned(), "sh -c 'echo hi'".to_owned())]);
        assert_eq!(find("command").command_line(&command, &args[..1]).unwrap(), ["sh", "-c", "echo hi", "--n"]);
        let missing = find("shell").command_line(&BTreeMap::new(), &[]).unwrap_err();
        assert!(missing.to_string().contains("filename"), "{missing:?}");
    }
}
