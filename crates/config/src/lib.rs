//! kura-config: the config file (`kura --config kura.toml`), read as the flags it
//! stands for.
//!
//! Every flag has a key: its long name (`memory-limit`, `sql-port`; `_` may stand for
//! `-`), or for a flag with only a short form, its name in `kura --help`
//! (`verbose` for `-v`). A file is a flat TOML table of such keys; [`to_args`] turns it
//! into command-line arguments that go before the real command line's, so a flag given
//! on the command line overrides the file (clap keeps the last occurrence). Unknown
//! keys, sections and values of the wrong kind are errors that name the line.
//!
//! Not here: which flags exist (the server's clap definition says, through
//! [`Flag`]s), reading the file, or what a value means.

use std::fmt;

/// A flag a file may set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flag {
    /// The key: the long name, or the id of a short-only flag.
    pub key: String,
    /// What the command line spells: `--memory-limit`, or `-v`.
    pub spelling: String,
    pub kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Takes a value: a string, an integer or a float in the file.
    Value,
    /// On or off: `true` or `false`.
    Switch,
    /// Given n times (`-v -v`): a non-negative integer.
    Count,
}

/// Why a file was refused: where, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileError {
    /// 1-based; 0 when the TOML parser gave no position.
    pub line: usize,
    pub message: String,
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.message)
        } else {
            write!(f, "line {}: {}", self.line, self.message)
        }
    }
}

impl std::error::Error for FileError {}

/// A setting the file makes: its key, the line, and the arguments it becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    pub key: String,
    pub line: usize,
    pub args: Vec<String>,
}

/// The settings of a config file, in the order of its lines.
pub fn to_args(text: &str, flags: &[Flag]) -> Result<Vec<Setting>, FileError> {
    let line_of = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
    let table = toml::de::DeTable::parse(text).map_err(|e| FileError {
        line: e.span().map_or(0, |span| line_of(span.start)),
        message: e.message().trim().to_string(),
    })?;
    let mut settings: Vec<Setting> = Vec::new();
    for (key, value) in table.get_ref() {
        let line = line_of(key.span().start);
        let fail = |message: String| FileError { line, message };
        let name = key.get_ref().replace('_', "-");
        let Some(flag) = flags.iter().find(|f| f.key == name) else {
            return Err(fail(format!("unknown key `{}`", key.get_ref())));
        };
        if settings.iter().any(|s| s.key == flag.key) {
            return Err(fail(format!("`{}` is set twice", flag.key)));
        }
        let value = value.get_ref();
        let args = match (flag.kind, value) {
            (Kind::Switch, toml::de::DeValue::Boolean(on)) => {
                if *on {
                    vec![flag.spelling.clone()]
                } else {
                    Vec::new()
                }
            }
            (Kind::Switch, _) => return Err(fail(format!("`{}` is true or false", flag.key))),
            (Kind::Count, toml::de::DeValue::Integer(n)) => {
                let n = integer(n)
                    .filter(|n| (0..=16).contains(n))
                    .ok_or_else(|| fail(format!("`{}` is a count from 0 to 16", flag.key)))?;
                vec![flag.spelling.clone(); n as usize]
            }
            (Kind::Count, _) => return Err(fail(format!("`{}` is a count", flag.key))),
            (Kind::Value, toml::de::DeValue::String(s)) => {
                vec![format!("{}={s}", flag.spelling)]
            }
            (Kind::Value, toml::de::DeValue::Integer(n)) => {
                let n = integer(n)
                    .ok_or_else(|| fail(format!("`{}`: not a 64-bit integer", flag.key)))?;
                vec![format!("{}={n}", flag.spelling)]
            }
            (Kind::Value, toml::de::DeValue::Float(f)) => {
                vec![format!("{}={}", flag.spelling, f.as_str())]
            }
            (Kind::Value, _) => {
                return Err(fail(format!("`{}` takes a string or a number", flag.key)))
            }
        };
        settings.push(Setting {
            key: flag.key.clone(),
            line,
            args,
        });
    }
    settings.sort_by_key(|s| s.line);
    Ok(settings)
}

/// A TOML integer's value, in any of TOML's radixes.
fn integer(n: &toml::de::DeInteger<'_>) -> Option<i64> {
    i64::from_str_radix(n.as_str(), n.radix()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags() -> Vec<Flag> {
        let flag = |key: &str, spelling: &str, kind| Flag {
            key: key.to_string(),
            spelling: spelling.to_string(),
            kind,
        };
        vec![
            flag("port", "--port", Kind::Value),
            flag("memory-limit", "--memory-limit", Kind::Value),
            flag("data-dir", "--data-dir", Kind::Value),
            flag("enable-sasl", "--enable-sasl", Kind::Switch),
            flag("verbose", "-v", Kind::Count),
        ]
    }

    fn args(text: &str) -> Result<Vec<String>, FileError> {
        Ok(to_args(text, &flags())?
            .into_iter()
            .flat_map(|s| s.args)
            .collect())
    }

    #[test]
    fn keys_become_the_flags_they_name() {
        let text = "# kura\nport = 11311\nmemory_limit = 0x40\ndata-dir = \"/var/lib/kura\"\nenable-sasl = true\nverbose = 2\n";
        assert_eq!(
            args(text).unwrap(),
            [
                "--port=11311",
                "--memory-limit=64",
                "--data-dir=/var/lib/kura",
                "--enable-sasl",
                "-v",
                "-v"
            ]
        );
        assert_eq!(args("enable-sasl = false\n").unwrap(), Vec::<String>::new());
    }

    #[test]
    fn mistakes_name_their_line() {
        let error = |text: &str| args(text).unwrap_err();
        assert_eq!(error("port = 1\n\nprot = 2\n").line, 3);
        assert!(error("port = 1\n\nprot = 2\n").message.contains("prot"));
        assert_eq!(error("port = 1\nport = 2\n").line, 2);
        assert_eq!(error("\n\nenable-sasl = 1\n").line, 3);
        assert_eq!(error("verbose = -1\n").line, 1);
        assert_eq!(error("port = [1]\n").line, 1);
        assert_eq!(error("[server]\nport = 1\n").line, 1);
        assert_eq!(error("port = \n").line, 1);
    }
}
