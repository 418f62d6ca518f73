//! The bytes of authentication: the users file, the text protocol's login as
//! memcached's `-Y` reads it, and SASL PLAIN's message.
//!
//! - The users file is memcached's auth file: a `user:password` line per user, the
//!   user ending at the first `:`. Kura also takes a password field that is an
//!   argon2 hash in PHC form (`$argon2id$v=19$m=…`), skips empty lines and lines
//!   beginning `#`, and refuses a user listed twice or with an empty password (who
//!   could log in without one); memcached reads at most eight
//!   users of 256 bytes a line, Kura any number.
//! - A text connection that has not logged in gets one thing read from it, as in
//!   memcached 1.6.18's `try_read_command_asciiauth`: a line of at least five
//!   space-separated tokens, the first `set` and the fifth a length, followed by that
//!   many bytes and `\r\n`, which hold `user password`. Anything else is answered
//!   `CLIENT_ERROR unauthenticated` and dropped.
//! - SASL PLAIN (RFC 4616): `authzid NUL authcid NUL password`; an authorization
//!   identity, when given, must be the user itself.
//!
//! Nothing here checks a password: that is the server's (argon2 verification is slow
//! on purpose and runs off the event loops).

use crate::number::strtoul_u32;
use crate::request::Tokens;

/// A line of the users file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserLine<'a> {
    pub user: &'a [u8],
    pub secret: Secret<'a>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Secret<'a> {
    /// The password itself, as memcached's auth file holds it.
    Plain(&'a [u8]),
    /// An argon2 hash in PHC string form.
    Argon2(&'a str),
}

/// Why a users file was refused: the 1-based line and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsersError {
    pub line: usize,
    pub why: &'static str,
}

/// The users in a users file.
pub fn parse_users(text: &[u8]) -> Result<Vec<UserLine<'_>>, UsersError> {
    let mut users: Vec<UserLine<'_>> = Vec::new();
    for (index, line) in text.split(|&b| b == b'\n').enumerate() {
        let fail = |why| UsersError {
            line: index + 1,
            why,
        };
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() || line.starts_with(b"#") {
            continue;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return Err(fail("a line is user:password"));
        };
        let (user, password) = (&line[..colon], &line[colon + 1..]);
        if user.is_empty() {
            return Err(fail("the user name is empty"));
        }
        if user.iter().any(|&b| b == b' ' || b == 0) {
            return Err(fail(
                "a user name cannot hold a space or NUL (logins could not name it)",
            ));
        }
        if users.iter().any(|u| u.user == user) {
            return Err(fail("this user is listed twice"));
        }
        if password.is_empty() {
            return Err(fail(
                "the password is empty (anyone could log in as this user without one)",
            ));
        }
        let secret = match std::str::from_utf8(password) {
            Ok(hash) if hash.starts_with("$argon2") => Secret::Argon2(hash),
            _ => Secret::Plain(password),
        };
        users.push(UserLine { user, secret });
    }
    Ok(users)
}

/// memcached's reply to anything but a login on a connection that has not logged in.
pub const UNAUTHENTICATED: &[u8] = b"CLIENT_ERROR unauthenticated\r\n";
pub const LOGGED_IN: &[u8] = b"STORED\r\n";
pub const LOGIN_FAILED: &[u8] = b"CLIENT_ERROR authentication failure\r\n";
const BAD_TERMINATION: &[u8] = b"CLIENT_ERROR bad command line termination\r\n";
const BAD_TOKEN_FORMAT: &[u8] = b"CLIENT_ERROR bad authentication token format\r\n";

/// memcached closes a connection that sends this much without a newline.
const LINE_MAX_BYTES: usize = 2048;

/// The outcome of [`parse_text_login`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TextLogin<'a> {
    Incomplete,
    /// No newline in the first 2048 bytes: memcached closes the connection.
    Close,
    /// Not a login: write `reply`, drop `consumed` bytes, stay logged out.
    Refused {
        reply: &'static [u8],
        consumed: usize,
    },
    /// A login to check; `consumed` bytes hold it.
    Login {
        user: &'a [u8],
        password: &'a [u8],
        consumed: usize,
    },
}

/// Reads the first login attempt in `buf`, as memcached's `-Y` does.
pub fn parse_text_login(buf: &[u8]) -> TextLogin<'_> {
    if buf.len() < 2 {
        return TextLogin::Incomplete;
    }
    let Some(newline) = buf.iter().position(|&b| b == b'\n') else {
        return if buf.len() > LINE_MAX_BYTES {
            TextLogin::Close
        } else {
            TextLogin::Incomplete
        };
    };
    // memcached reads the line as a C string: it ends at a NUL.
    let line = &buf[..newline];
    let line = line.split(|&b| b == 0).next().unwrap_or(line);
    let mut tokens = Tokens::new(line);
    let words: Vec<&[u8]> = tokens.by_ref().take(5).collect();
    let length = match words.as_slice() {
        [b"set", _, _, _, length] => strtoul_u32(length),
        _ => None,
    };
    let Some(length) = length else {
        return TextLogin::Refused {
            reply: UNAUTHENTICATED,
            consumed: newline + 1,
        };
    };
    let start = newline + 1;
    let end = start.saturating_add(length as usize).saturating_add(2);
    let Some(data) = buf.get(start..end) else {
        return TextLogin::Incomplete;
    };
    let Some(payload) = data.strip_suffix(b"\r\n") else {
        return TextLogin::Refused {
            reply: BAD_TERMINATION,
            consumed: end,
        };
    };
    let payload = payload.split(|&b| b == 0).next().unwrap_or(payload);
    let mut words = Tokens::new(payload);
    match (words.next(), words.next()) {
        (Some(user), Some(password)) => TextLogin::Login {
            user,
            password,
            consumed: end,
        },
        _ => TextLogin::Refused {
            reply: BAD_TOKEN_FORMAT,
            consumed: end,
        },
    }
}

/// The user and password of a SASL PLAIN message, or None if it is malformed or asks
/// to act as another user.
pub fn parse_plain(message: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut parts = message.split(|&b| b == 0);
    let (authzid, user, password) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || user.is_empty() {
        return None;
    }
    if !authzid.is_empty() && authzid != user {
        return None;
    }
    Some((user, password))
}

/// The mechanisms Kura offers, as `SASL_LIST_MECHS` answers.
pub const SASL_MECHANISMS: &[u8] = b"PLAIN";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_files_as_memcached_writes_them_and_with_hashes() {
        let text = b"# who may log in\nann:secret\r\n\nbob:$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA\ncy:a:b\n";
        let users = parse_users(text).unwrap();
        assert_eq!(users.len(), 3);
        assert_eq!(users[0].secret, Secret::Plain(b"secret"));
        let Secret::Argon2(hash) = users[1].secret else {
            panic!("not read as a hash: {:?}", users[1].secret);
        };
        assert!(hash.starts_with("$argon2id$v=19$"), "{hash}");
        assert_eq!(
            (users[2].user, &users[2].secret),
            (&b"cy"[..], &Secret::Plain(b"a:b"))
        );
        assert_eq!(parse_users(b"ok:1\nnocolon\n").unwrap_err().line, 2);
        assert_eq!(parse_users(b":pw\n").unwrap_err().line, 1);
        assert_eq!(parse_users(b"a:1\na:2\n").unwrap_err().line, 2);
        assert_eq!(parse_users(b"a b:1\n").unwrap_err().line, 1);
        assert_eq!(parse_users(b"a:1\n\nalice:\r\n").unwrap_err().line, 3);
    }

    #[test]
    fn text_logins_as_memcached_reads_them() {
        assert_eq!(
            parse_text_login(b"set any 0 0 10\r\nann secret\r\nget a\r\n"),
            TextLogin::Login {
                user: b"ann",
                password: b"secret",
                consumed: 28
            }
        );
        assert_eq!(
            parse_text_login(b"set any 0 0 10\r\nann"),
            TextLogin::Incomplete
        );
        assert_eq!(
            parse_text_login(b"get a\r\n"),
            TextLogin::Refused {
                reply: UNAUTHENTICATED,
                consumed: 7
            }
        );
        assert_eq!(
            parse_text_login(b"set a 0 0 x\r\n"),
            TextLogin::Refused {
                reply: UNAUTHENTICATED,
                consumed: 13
            }
        );
        assert_eq!(
            parse_text_login(b"set a 0 0 3\r\nannXY"),
            TextLogin::Refused {
                reply: BAD_TERMINATION,
                consumed: 18
            }
        );
        assert_eq!(
            parse_text_login(b"set a 0 0 3\r\nann\r\n"),
            TextLogin::Refused {
                reply: BAD_TOKEN_FORMAT,
                consumed: 18
            }
        );
        assert_eq!(parse_text_login(&[b'x'; 2049]), TextLogin::Close);
    }

    #[test]
    fn plain_messages() {
        assert_eq!(parse_plain(b"\0ann\0pw"), Some((&b"ann"[..], &b"pw"[..])));
        assert_eq!(
            parse_plain(b"ann\0ann\0pw"),
            Some((&b"ann"[..], &b"pw"[..]))
        );
        assert_eq!(parse_plain(b"bob\0ann\0pw"), None);
        assert_eq!(parse_plain(b"\0ann"), None);
        assert_eq!(parse_plain(b"\0\0pw"), None);
        assert_eq!(parse_plain(b"\0ann\0pw\0x"), None);
    }
}
