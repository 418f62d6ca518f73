//! The transcript format: a readable script of wire exchanges, parsed into steps.
//! `tests/transcripts/README.md` is the user's guide; this is the parser.
//!
//! ```text
//! # a comment
//! > set a 0 0 1        send "set a 0 0 1\r\n" (the text after "> " verbatim)
//! > 1                  same step: sent in the same write
//!                      a blank line ends the step
//! >raw get a\r\n       send escaped bytes exactly, no CRLF added
//! @sleep 2.1           sleep (both servers at once)
//! @new-connection      drop the connection; the next step opens a new one
//! @connection NAME     switch to connection NAME (opened on first use; the first is `main`)
//! @await-miss KEY      poll `mg KEY` until it misses: wait for the server's clock
//! @expect-close        next step: no `mn` sync, read until the server closes
//! @expect-lines N      next step: no `mn` sync, read until N lines have arrived
//! @no-sync             next step: send only; its reply is read with the next step's
//! @shape version       next step: compare only the shape of the reply (also `stats`)
//! @tolerate-time       next step: times in seconds (t, l, la=, exp=) may differ a little
//! @binary              (first line) the transcript speaks memcached's binary protocol
//! @users ann:pw ...    (before any step) both servers check these users
//! >bin get key=a       send a binary request (see `crate::binary` for the fields)
//! ```
//!
//! Every step's bytes are sent in one write followed by `mn\r\n`, and the reply is
//! read until it ends with `MN\r\n`, so a step is complete without any timeout. In a
//! binary transcript a `VERSION` with a marker opaque takes the place of `mn`.

use std::time::Duration;

use crate::escape::unescape;

#[derive(Debug, Clone, PartialEq)]
pub struct Transcript {
    pub name: String,
    pub steps: Vec<Step>,
    /// Speaks memcached's binary protocol: steps end with a marker `VERSION`, and
    /// replies are rendered a packet a line.
    pub binary: bool,
    /// `@users user:password ...`: both servers start with these users, and every
    /// connection must log in.
    pub users: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// 1-based line of the step's first line in the transcript file.
    pub line: usize,
    pub action: Action,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Exchange(Exchange),
    Sleep(Duration),
    NewConnection,
    /// Later steps use the connection of this name (opened on first use); the
    /// first connection is called `main`.
    UseConnection(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exchange {
    pub bytes: Vec<u8>,
    pub sync: Sync,
    pub check: Check,
}

/// How the runner knows a step's reply is complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sync {
    /// Append `mn\r\n`, read until the reply ends with `MN\r\n`.
    Mn,
    /// Append a binary `VERSION` with a marker opaque, read until its answer.
    Marker,
    /// `@expect-lines N`: append nothing, read until N lines have arrived (a text
    /// connection that has not logged in answers `mn` with an error, not `MN`).
    Lines(usize),
    /// The step ends the connection: read until the server closes it.
    Close,
    /// Send only; whatever comes back is read with the next step.
    NoRead,
    /// `@await-miss KEY`: send `mg KEY` every 50 ms until the reply is `EN`
    /// (the server's clock has passed the key's expiry or flush), at most 10 s.
    UntilMiss,
}

/// How two replies to a step are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    Exact,
    /// Equal except that times in seconds (meta `t`, `l`, `la=`, `exp=`) may differ
    /// by a few seconds (see `runner::TIME_SLACK_SECS`).
    TolerateTime,
    /// Only the shape matters: the content differs between servers on purpose.
    Shape(Shape),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `VERSION <something>\r\n`
    Version,
    /// `STAT <name> <value>\r\n` at least once, then `END\r\n`.
    Stats,
    /// Binary `STAT` packets with names, then the empty one that ends them.
    BinaryStats,
    /// One binary `VERSION` answer carrying a version.
    BinaryVersion,
}

impl Transcript {
    /// Parses transcript text; errors name the line.
    pub fn parse(name: &str, text: &str) -> Result<Transcript, String> {
        let mut parser = Parser::default();
        for (index, line) in text.lines().enumerate() {
            parser
                .line(index + 1, line)
                .map_err(|e| format!("{name}:{}: {e}", index + 1))?;
        }
        parser
            .end_step()
            .map_err(|e| format!("{name}: at end: {e}"))?;
        Ok(Transcript {
            name: name.to_string(),
            steps: parser.steps,
            binary: parser.binary,
            users: parser.users,
        })
    }

    pub fn exchanges(&self) -> impl Iterator<Item = (usize, &Exchange)> {
        self.steps.iter().filter_map(|step| match &step.action {
            Action::Exchange(exchange) => Some((step.line, exchange)),
            _ => None,
        })
    }
}

#[derive(Default)]
struct Parser {
    steps: Vec<Step>,
    bytes: Vec<u8>,
    first_line: usize,
    sync: Option<Sync>,
    check: Option<Check>,
    modifier_line: usize,
    binary: bool,
    users: Vec<(String, String)>,
}

impl Parser {
    fn line(&mut self, number: usize, line: &str) -> Result<(), String> {
        if line.starts_with('#') {
            return Ok(());
        }
        if line.trim().is_empty() {
            return self.end_step();
        }
        if line == "@binary" {
            if !self.steps.is_empty() || !self.bytes.is_empty() || self.modifier_line != 0 {
                return Err("@binary goes before every step".to_string());
            }
            self.binary = true;
            return Ok(());
        }
        if let Some(rest) = line.strip_prefix("@users ") {
            if !self.steps.is_empty() || !self.bytes.is_empty() || self.modifier_line != 0 {
                return Err("@users goes before every step".to_string());
            }
            for entry in rest.split_whitespace() {
                let (user, password) = entry
                    .split_once(':')
                    .ok_or_else(|| format!("{entry:?} is not user:password"))?;
                self.users.push((user.to_string(), password.to_string()));
            }
            return Ok(());
        }
        if let Some(rest) = line.strip_prefix(">bin ") {
            if !self.binary {
                return Err("`>bin` lines need `@binary` at the top".to_string());
            }
            let bytes = crate::binary::compose(rest)?;
            return self.send(number, &bytes);
        }
        if let Some(rest) = line.strip_prefix(">raw ") {
            let bytes = unescape(rest)?;
            return self.send(number, &bytes);
        }
        if line == ">" {
            return self.send(number, b"\r\n");
        }
        if let Some(rest) = line.strip_prefix("> ") {
            let mut bytes = rest.as_bytes().to_vec();
            bytes.extend_from_slice(b"\r\n");
            return self.send(number, &bytes);
        }
        if line.starts_with('>') {
            return Err("a send line is `> text`, `>raw escaped` or `>bin request`".to_string());
        }
        let mut words = line.split_whitespace();
        let directive = words.next().unwrap_or_default();
        let argument: Vec<&str> = words.collect();
        match (directive, argument.as_slice()) {
            ("@sleep", [secs]) => {
                self.end_step()?;
                let secs: f64 = secs.parse().map_err(|_| format!("bad seconds {secs:?}"))?;
                if !(0.0..=10.0).contains(&secs) {
                    return Err("sleep between 0 and 10 seconds".to_string());
                }
                self.steps.push(Step {
                    line: number,
                    action: Action::Sleep(Duration::from_secs_f64(secs)),
                });
                Ok(())
            }
            ("@new-connection", []) => {
                self.end_step()?;
                self.steps.push(Step {
                    line: number,
                    action: Action::NewConnection,
                });
                Ok(())
            }
            ("@connection", [name]) => {
                self.end_step()?;
                self.steps.push(Step {
                    line: number,
                    action: Action::UseConnection((*name).to_string()),
                });
                Ok(())
            }
            ("@await-miss", [key]) => {
                self.end_step()?;
                if self.modifier_line != 0 {
                    return Err("@await-miss takes no modifiers".to_string());
                }
                self.steps.push(Step {
                    line: number,
                    action: Action::Exchange(Exchange {
                        bytes: format!("mg {key}\r\n").into_bytes(),
                        sync: Sync::UntilMiss,
                        check: Check::Exact,
                    }),
                });
                Ok(())
            }
            ("@expect-close", []) => self.modify(number, Some(Sync::Close), None),
            ("@expect-lines", [n]) => {
                let n: usize = n.parse().map_err(|_| format!("bad line count {n:?}"))?;
                self.modify(number, Some(Sync::Lines(n)), None)
            }
            ("@no-sync", []) => self.modify(number, Some(Sync::NoRead), None),
            ("@tolerate-time", []) => self.modify(number, None, Some(Check::TolerateTime)),
            ("@shape", ["version"]) => {
                self.modify(number, None, Some(Check::Shape(Shape::Version)))
            }
            ("@shape", ["stats"]) => self.modify(number, None, Some(Check::Shape(Shape::Stats))),
            ("@shape", ["binary-stats"]) => {
                self.modify(number, None, Some(Check::Shape(Shape::BinaryStats)))
            }
            ("@shape", ["binary-version"]) => {
                self.modify(number, None, Some(Check::Shape(Shape::BinaryVersion)))
            }
            _ => Err(format!("unknown directive {line:?}")),
        }
    }

    fn modify(
        &mut self,
        number: usize,
        sync: Option<Sync>,
        check: Option<Check>,
    ) -> Result<(), String> {
        if !self.bytes.is_empty() {
            return Err(
                "modifiers go before the step's send lines (end the step with a blank line)"
                    .to_string(),
            );
        }
        if sync.is_some() {
            if self.sync.is_some() {
                return Err("two sync modifiers on one step".to_string());
            }
            self.sync = sync;
        }
        if check.is_some() {
            if self.check.is_some() {
                return Err("two check modifiers on one step".to_string());
            }
            self.check = check;
        }
        if self.modifier_line == 0 {
            self.modifier_line = number;
        }
        Ok(())
    }

    fn send(&mut self, number: usize, bytes: &[u8]) -> Result<(), String> {
        if self.bytes.is_empty() {
            self.first_line = number;
        }
        self.bytes.extend_from_slice(bytes);
        Ok(())
    }

    fn end_step(&mut self) -> Result<(), String> {
        if self.bytes.is_empty() {
            if self.modifier_line != 0 {
                return Err(format!(
                    "modifier on line {} has no step after it",
                    self.modifier_line
                ));
            }
            return Ok(());
        }
        let exchange = Exchange {
            bytes: std::mem::take(&mut self.bytes),
            sync: self
                .sync
                .take()
                .unwrap_or(if self.binary { Sync::Marker } else { Sync::Mn }),
            check: self.check.take().unwrap_or(Check::Exact),
        };
        if exchange.sync == Sync::NoRead && exchange.check != Check::Exact {
            return Err(
                "a @no-sync step reads nothing, so it cannot have a check modifier".to_string(),
            );
        }
        self.steps.push(Step {
            line: self.first_line,
            action: Action::Exchange(exchange),
        });
        self.modifier_line = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_steps_and_modifiers() {
        let text = "# c\n> set a 0 0 1\n> 1\n\n>raw get a\\r\\n\n@sleep 0.5\n@expect-close\n> quit\n@new-connection\n@shape version\n> version\n>\n";
        let t = Transcript::parse("t", text).unwrap();
        let exchanges: Vec<_> = t.exchanges().collect();
        assert_eq!(exchanges.len(), 4);
        assert_eq!(exchanges[0].0, 2);
        assert_eq!(exchanges[0].1.bytes, b"set a 0 0 1\r\n1\r\n");
        assert_eq!(exchanges[1].1.bytes, b"get a\r\n");
        assert_eq!(exchanges[2].1.sync, Sync::Close);
        assert_eq!(exchanges[2].1.bytes, b"quit\r\n");
        assert_eq!(exchanges[3].1.check, Check::Shape(Shape::Version));
        assert_eq!(exchanges[3].1.bytes, b"version\r\n\r\n");
        assert_eq!(t.steps.len(), 6);
        assert_eq!(t.steps[2].action, Action::Sleep(Duration::from_millis(500)));
        assert_eq!(t.steps[4].action, Action::NewConnection);
        let t = Transcript::parse("t", "@connection other\n> get a\n@connection main\n").unwrap();
        assert_eq!(
            t.steps[0].action,
            Action::UseConnection("other".to_string())
        );
        assert_eq!(t.steps[2].action, Action::UseConnection("main".to_string()));
        let t = Transcript::parse("t", "> set a 0 1 1\n> 1\n@await-miss a\n> get a\n").unwrap();
        let exchanges: Vec<_> = t.exchanges().collect();
        assert_eq!(exchanges.len(), 3);
        assert_eq!(exchanges[1].1.bytes, b"mg a\r\n");
        assert_eq!(exchanges[1].1.sync, Sync::UntilMiss);
    }

    #[test]
    fn rejects_mistakes() {
        for bad in [
            "@expect-close\n",
            "> a\n@no-sync\n",
            ">x\n",
            "@sleep x\n",
            "@frob\n",
            ">raw \\q\n",
            "@no-sync\n@tolerate-time\n> a\n",
        ] {
            assert!(
                Transcript::parse("t", bad).is_err(),
                "{bad:?} should not parse"
            );
        }
    }
}
