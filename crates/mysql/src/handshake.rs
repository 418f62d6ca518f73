//! The connection phase: the server's greeting (Protocol::HandshakeV10), the
//! client's HandshakeResponse41, and `mysql_native_password`, the one
//! authentication method offered.
//!
//! Not here: user lookup, password storage, deciding when to switch plugins,
//! or the TLS session itself. `CLIENT_SSL` is offered when the server has TLS
//! ([`greeting`]'s `tls`): a client that wants it sends a bare SSLRequest
//! ([`is_ssl_request`]), the server starts TLS on the socket, and the client's
//! full response (sequence id 2) arrives over it. A client asking for TLS
//! where none was offered gets [`ProtocolError::TlsRequested`].
//!
//! The exchange the server drives:
//! 1. send [`greeting`] (sequence id 0) with a fresh nonce from
//!    [`nonce_from_random`];
//! 2. read the response (sequence id 1), [`parse_login`]. If
//!    [`Login::uses_native_password`] is false (MySQL 8's `mysql` CLI and
//!    libmysqlclient-based drivers answer with `caching_sha2_password`), send
//!    [`auth_switch`] with the same nonce and read the client's next packet,
//!    whose whole payload is the new 20-byte scramble (empty for an empty
//!    password);
//! 3. check the scramble with [`native_password_matches`] and answer OK or
//!    `ErrorCode::ACCESS_DENIED`, continuing the sequence ids.
//!
//! Capabilities: the server offers [`server_capabilities`]; a client's
//! response is read, and [`Login::capabilities`] reported, with the client's
//! flags masked by the server's, as MySQL does, so later replies follow what
//! both sides agreed (`CLIENT_DEPRECATE_EOF` above all).

use std::borrow::Cow;

use mysql_common::constants::{CapabilityFlags, StatusFlags};
use mysql_common::io::ParseBuf;
use mysql_common::packets::{AuthSwitchRequest, HandshakePacket, HandshakeResponse};
use mysql_common::proto::{MyDeserialize, MySerialize};
use sha1::{Digest, Sha1};

use crate::ProtocolError;

/// The version the greeting announces. Clients read the leading `X.Y.Z`
/// (mysql-connector-python with `^(\d{1,2})\.(\d{1,2})\.(\d{1,3})(.*)`,
/// PyMySQL by splitting on `.`), so Kura presents itself as the MySQL 8.0
/// release whose protocol it follows.
pub const SERVER_VERSION: &str = concat!("8.0.36-kura-", env!("CARGO_PKG_VERSION"));

/// The authentication plugin Kura speaks.
pub const NATIVE_PASSWORD_PLUGIN: &str = "mysql_native_password";

/// `utf8mb4_general_ci`: the greeting's default collation, understood by
/// MySQL and MariaDB clients alike (MySQL 8's own default, 255, is unknown to
/// MariaDB's).
pub const DEFAULT_COLLATION: u8 = 45;

/// The length of a `mysql_native_password` nonce and scramble.
pub const NONCE_BYTES: usize = 20;

/// What the server offers, `CLIENT_LOCAL_FILES` among it: the server asks for a
/// client's file only to answer that client's own `LOAD DATA LOCAL INFILE`, and
/// the client decides whether to send it (the `mariadb` client's `--local-infile`,
/// PyMySQL's `local_infile`); and `CLIENT_MULTI_STATEMENTS`: a client that asks for
/// it may send `a; b` in one COM_QUERY. Deliberately absent: `CLIENT_SSL` (added by
/// [`greeting`] when the server has TLS),
/// `CLIENT_COMPRESS`, `CLIENT_QUERY_ATTRIBUTES` (clients would prefix
/// queries and executes with attributes), `CLIENT_SESSION_TRACK`,
/// `CLIENT_OPTIONAL_RESULTSET_METADATA` and
/// `CLIENT_IGNORE_SPACE` (an SQL-mode promise the engine does not make).
pub fn server_capabilities() -> CapabilityFlags {
    CapabilityFlags::CLIENT_LONG_PASSWORD
        | CapabilityFlags::CLIENT_FOUND_ROWS
        | CapabilityFlags::CLIENT_LONG_FLAG
        | CapabilityFlags::CLIENT_CONNECT_WITH_DB
        | CapabilityFlags::CLIENT_PROTOCOL_41
        | CapabilityFlags::CLIENT_TRANSACTIONS
        | CapabilityFlags::CLIENT_SECURE_CONNECTION
        | CapabilityFlags::CLIENT_MULTI_RESULTS
        | CapabilityFlags::CLIENT_PS_MULTI_RESULTS
        | CapabilityFlags::CLIENT_PLUGIN_AUTH
        | CapabilityFlags::CLIENT_CONNECT_ATTRS
        | CapabilityFlags::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
        | CapabilityFlags::CLIENT_DEPRECATE_EOF
        | CapabilityFlags::CLIENT_LOCAL_FILES
        | CapabilityFlags::CLIENT_MULTI_STATEMENTS
}

/// Turns 20 random bytes into a nonce the way MySQL's `generate_user_salt`
/// does: 7-bit, never NUL or `$`. Some clients treat the nonce's second part
/// as a C string, so a NUL inside it would cut it short.
pub fn nonce_from_random(random: [u8; NONCE_BYTES]) -> [u8; NONCE_BYTES] {
    random.map(|b| match b & 0x7f {
        b @ (0 | b'$') => b + 1,
        b => b,
    })
}

/// The greeting (Protocol::HandshakeV10) payload: protocol 10,
/// [`SERVER_VERSION`], `connection_id`, the nonce (8 bytes, then 12 and a
/// NUL), [`server_capabilities`], [`DEFAULT_COLLATION`], autocommit status,
/// and the plugin name `mysql_native_password`; with `tls`, `CLIENT_SSL` too.
///
/// `nonce` must come from [`nonce_from_random`] (no NUL bytes).
pub fn greeting(connection_id: u32, nonce: &[u8; NONCE_BYTES], tls: bool) -> Vec<u8> {
    let capabilities = if tls {
        server_capabilities() | CapabilityFlags::CLIENT_SSL
    } else {
        server_capabilities()
    };
    assert!(!nonce.contains(&0), "nonce has a NUL byte");
    let mut first = [0u8; 8];
    first.copy_from_slice(&nonce[..8]);
    let mut second = nonce[8..].to_vec();
    second.push(0);
    let packet = HandshakePacket::new(
        10,
        Cow::Borrowed(SERVER_VERSION.as_bytes()),
        connection_id,
        first,
        Some(second),
        capabilities,
        DEFAULT_COLLATION,
        StatusFlags::SERVER_STATUS_AUTOCOMMIT,
        Some(Cow::Borrowed(NATIVE_PASSWORD_PLUGIN.as_bytes())),
    );
    let mut out = Vec::new();
    packet.serialize(&mut out);
    out
}

/// A client's HandshakeResponse41, as the server needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Login {
    pub user: String,
    /// The scramble for the plugin the client named; for
    /// `mysql_native_password`, 20 bytes or empty for an empty password.
    pub auth_response: Vec<u8>,
    /// The schema to start in; `None` when absent or empty
    /// (mysql-connector-python always sets `CLIENT_CONNECT_WITH_DB` and sends
    /// an empty name when none was given).
    pub database: Option<String>,
    /// The client's flags masked by [`server_capabilities`]. The server must
    /// honour `CLIENT_DEPRECATE_EOF` (see `end_of_rows`) and
    /// `CLIENT_FOUND_ROWS` (UPDATE reports rows matched, not rows changed).
    pub capabilities: CapabilityFlags,
    /// The plugin the client answered with; `None` when it named none
    /// (no `CLIENT_PLUGIN_AUTH`, or an empty name), which MySQL reads as
    /// `mysql_native_password`.
    pub plugin: Option<String>,
    /// The client's connection collation (45 = utf8mb4_general_ci,
    /// 255 = utf8mb4_0900_ai_ci, 33 = utf8mb3_general_ci, 63 = binary, …).
    pub collation: u8,
    /// Connection attributes (`_client_name`, `_client_version`,
    /// `program_name`, …), sorted by name; empty without
    /// `CLIENT_CONNECT_ATTRS`. For logs and `performance_schema`-like views.
    pub attributes: Vec<(String, String)>,
}

impl Login {
    /// Whether `auth_response` is a `mysql_native_password` scramble of the
    /// greeting's nonce; if not, the server sends [`auth_switch`].
    pub fn uses_native_password(&self) -> bool {
        match &self.plugin {
            None => true,
            Some(plugin) => plugin == NATIVE_PASSWORD_PLUGIN,
        }
    }
}

/// The SSLRequest's size: capabilities, max packet, collation, 23 filler.
const SSL_REQUEST_BYTES: usize = 32;

/// Whether the client's first packet is a bare SSLRequest: it asks for TLS
/// before it says anything more.
pub fn is_ssl_request(payload: &[u8]) -> bool {
    match payload.get(..4) {
        Some(&[a, b, c, d]) if payload.len() == SSL_REQUEST_BYTES => {
            CapabilityFlags::from_bits_truncate(u32::from_le_bytes([a, b, c, d]))
                .contains(CapabilityFlags::CLIENT_SSL)
        }
        _ => false,
    }
}

/// Parses the client's HandshakeResponse41 (the payload of sequence id 1, or
/// 2 after an SSLRequest; `over_tls` says which).
///
/// Outside TLS, a client that set `CLIENT_SSL` (whether a bare 32-byte
/// SSLRequest or a full response) gets [`ProtocolError::TlsRequested`]; one
/// without `CLIENT_PROTOCOL_41`, [`ProtocolError::OldClient`]. The user and
/// database must be UTF-8.
pub fn parse_login(payload: &[u8], over_tls: bool) -> Result<Login, ProtocolError> {
    let Some(&[a, b, c, d]) = payload.get(..4) else {
        return Err(ProtocolError::Truncated {
            what: "handshake response",
        });
    };
    let client = CapabilityFlags::from_bits_truncate(u32::from_le_bytes([a, b, c, d]));
    if client.contains(CapabilityFlags::CLIENT_SSL) && !over_tls {
        return Err(ProtocolError::TlsRequested);
    }
    if !client.contains(CapabilityFlags::CLIENT_PROTOCOL_41) {
        return Err(ProtocolError::OldClient);
    }
    if payload.len() <= SSL_REQUEST_BYTES {
        return Err(ProtocolError::Truncated {
            what: "handshake response",
        });
    }
    // Every flag that shapes the response's layout (CONNECT_WITH_DB,
    // SECURE_CONNECTION, PLUGIN_AUTH, PLUGIN_AUTH_LENENC_CLIENT_DATA,
    // CONNECT_ATTRS) is offered, so reading with the client's own flags is
    // reading with the agreed ones.
    let response = HandshakeResponse::deserialize((), &mut ParseBuf(payload)).map_err(|_| {
        ProtocolError::Malformed {
            what: "handshake response",
        }
    })?;
    let user = String::from_utf8(response.user().to_vec())
        .map_err(|_| ProtocolError::Malformed { what: "user name" })?;
    let database = match response.db_name() {
        None | Some(b"") => None,
        Some(name) => {
            Some(
                String::from_utf8(name.to_vec()).map_err(|_| ProtocolError::Malformed {
                    what: "database name",
                })?,
            )
        }
    };
    let plugin = response
        .auth_plugin()
        .map(|plugin| String::from_utf8_lossy(plugin.as_bytes()).into_owned())
        .filter(|name| !name.is_empty());
    let mut attributes: Vec<(String, String)> = response
        .connect_attributes()
        .map(|attributes| attributes.into_iter().collect())
        .unwrap_or_default();
    attributes.sort();
    Ok(Login {
        user,
        auth_response: response.scramble_buf().to_vec(),
        database,
        capabilities: response.capabilities() & server_capabilities(),
        plugin,
        collation: response.collation(),
        attributes,
    })
}

/// `SHA1(SHA1(password))`: what MySQL keeps in `mysql.user` for
/// `mysql_native_password` (printed there as `*` and 40 hex digits), and what
/// the users config stores.
pub fn native_password_hash(password: &[u8]) -> [u8; NONCE_BYTES] {
    sha1(&sha1(password))
}

/// Whether `response` proves the password whose [`native_password_hash`] is
/// `stored`, for `nonce`. The client sends
/// `SHA1(pw) XOR SHA1(nonce ‖ SHA1(SHA1(pw)))`; the server XORs that with
/// `SHA1(nonce ‖ stored)` to recover `SHA1(pw)` and hashes it once more.
/// An empty password is stored as `None` and matches only an empty response.
pub fn native_password_matches(
    nonce: &[u8; NONCE_BYTES],
    stored: Option<&[u8; NONCE_BYTES]>,
    response: &[u8],
) -> bool {
    let Some(stored) = stored else {
        return response.is_empty();
    };
    let Ok(response) = <&[u8; NONCE_BYTES]>::try_from(response) else {
        return false;
    };
    let mut hasher = Sha1::new();
    hasher.update(nonce);
    hasher.update(stored);
    let mask: [u8; NONCE_BYTES] = hasher.finalize().into();
    let mut stage1 = [0u8; NONCE_BYTES];
    for (out, (r, m)) in stage1.iter_mut().zip(response.iter().zip(mask)) {
        *out = r ^ m;
    }
    // Compare without an early exit.
    sha1(&stage1)
        .iter()
        .zip(stored)
        .fold(0u8, |diff, (a, b)| diff | (a ^ b))
        == 0
}

fn sha1(bytes: &[u8]) -> [u8; NONCE_BYTES] {
    Sha1::digest(bytes).into()
}

/// The AuthSwitchRequest (0xfe, plugin name, nonce and NUL) asking the client
/// to answer `mysql_native_password` for `nonce`, as MySQL sends it.
pub fn auth_switch(nonce: &[u8; NONCE_BYTES]) -> Vec<u8> {
    let mut data = nonce.to_vec();
    data.push(0);
    let mut out = Vec::new();
    AuthSwitchRequest::new(NATIVE_PASSWORD_PLUGIN.as_bytes(), data).serialize(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use mysql_common::auth::plugins::mysql_native_password::scramble_native;
    use mysql_common::constants::CapabilityFlags as Caps;
    use mysql_common::packets::{AuthPlugin, SslRequest};

    use super::*;

    const NONCE: [u8; 20] = *b"abcdefgh0123456789AB";

    #[test]
    fn greeting_parses_as_mysql_common_client_sees_it() {
        let payload = greeting(77, &NONCE, false);
        let packet = HandshakePacket::deserialize((), &mut ParseBuf(&payload)).unwrap();
        assert_eq!(packet.protocol_version(), 10);
        assert_eq!(packet.server_version_ref(), SERVER_VERSION.as_bytes());
        assert_eq!(packet.server_version_parsed(), Some((8, 0, 36)));
        assert_eq!(packet.connection_id(), 77);
        assert_eq!(packet.nonce(), NONCE.to_vec());
        assert_eq!(packet.capabilities(), server_capabilities());
        assert_eq!(packet.default_collation(), 45);
        assert_eq!(packet.status_flags(), StatusFlags::SERVER_STATUS_AUTOCOMMIT);
        assert_eq!(packet.auth_plugin(), Some(AuthPlugin::MysqlNativePassword));
    }

    #[test]
    fn greeting_bytes() {
        let payload = greeting(1, &NONCE, false);
        let version_end = 1 + SERVER_VERSION.len();
        assert_eq!(payload[0], 10);
        assert_eq!(&payload[1..version_end], SERVER_VERSION.as_bytes());
        let rest = &payload[version_end..];
        assert_eq!(rest[0], 0, "version NUL");
        assert_eq!(&rest[1..5], &[1, 0, 0, 0], "connection id");
        assert_eq!(&rest[5..13], b"abcdefgh");
        assert_eq!(rest[13], 0, "filler");
        let caps = server_capabilities().bits().to_le_bytes();
        assert_eq!(&rest[14..16], &caps[..2], "capabilities, lower half");
        assert_eq!(rest[16], 45, "collation");
        assert_eq!(&rest[17..19], &[2, 0], "status: autocommit");
        assert_eq!(&rest[19..21], &caps[2..], "capabilities, upper half");
        // auth-plugin-data length: 8 + 12 + NUL, as MySQL sends it.
        assert_eq!(rest[21], 21);
        assert_eq!(&rest[22..32], &[0; 10], "reserved");
        let tail = &rest[32..];
        assert_eq!(tail, b"0123456789AB\x00mysql_native_password\x00");
    }

    #[test]
    #[should_panic(expected = "nonce has a NUL byte")]
    fn greeting_refuses_a_nul_in_the_nonce() {
        let mut nonce = NONCE;
        nonce[10] = 0;
        greeting(1, &nonce, false);
    }

    #[test]
    fn nonce_is_seven_bit_without_nul_or_dollar() {
        let mut random = [0u8; 20];
        for (i, b) in random.iter_mut().enumerate() {
            *b = [0, b'$', 0x80, 0xa4, 0xff, b'a'][i % 6];
        }
        let nonce = nonce_from_random(random);
        assert!(nonce.iter().all(|b| *b != 0 && *b != b'$' && *b < 0x80));
        assert_eq!(&nonce[..6], &[1, b'%', 1, b'%', 0x7f, b'a']);
    }

    /// A HandshakeResponse41 as mysql_common's client writes it.
    fn client_response(
        capabilities: Caps,
        user: &str,
        scramble: &[u8],
        database: Option<&str>,
        plugin: Option<AuthPlugin<'_>>,
        attributes: Option<HashMap<String, String>>,
    ) -> Vec<u8> {
        let response = HandshakeResponse::new(
            Some(scramble),
            (8, 0, 36),
            Some(user.as_bytes()),
            database.map(str::as_bytes),
            plugin,
            capabilities,
            attributes,
            16 << 20,
        );
        let mut out = Vec::new();
        response.serialize(&mut out);
        out
    }

    fn client_caps() -> Caps {
        server_capabilities() | Caps::CLIENT_MULTI_STATEMENTS | Caps::CLIENT_QUERY_ATTRIBUTES
    }

    #[test]
    fn login_round_trips_mysql_common_response() {
        let scramble = scramble_native(&NONCE, b"secret").unwrap();
        let attributes = HashMap::from([
            ("_client_name".to_string(), "test".to_string()),
            ("_os".to_string(), "Linux".to_string()),
        ]);
        let payload = client_response(
            client_caps(),
            "alice",
            &scramble,
            Some("shop"),
            Some(AuthPlugin::MysqlNativePassword),
            Some(attributes),
        );
        let login = parse_login(&payload, false).unwrap();
        assert_eq!(
            login,
            Login {
                user: "alice".to_string(),
                auth_response: scramble.to_vec(),
                database: Some("shop".to_string()),
                capabilities: server_capabilities(),
                plugin: Some("mysql_native_password".to_string()),
                collation: 45,
                attributes: vec![
                    ("_client_name".to_string(), "test".to_string()),
                    ("_os".to_string(), "Linux".to_string()),
                ],
            }
        );
        assert!(login.uses_native_password());
        let stored = native_password_hash(b"secret");
        assert!(native_password_matches(
            &NONCE,
            Some(&stored),
            &login.auth_response
        ));
    }

    #[test]
    fn login_without_optional_parts() {
        // No database, no plugin, no attributes, one-byte scramble length
        // (no PLUGIN_AUTH_LENENC_CLIENT_DATA).
        let caps = Caps::CLIENT_PROTOCOL_41
            | Caps::CLIENT_SECURE_CONNECTION
            | Caps::CLIENT_LONG_PASSWORD
            | Caps::CLIENT_TRANSACTIONS;
        let payload = client_response(caps, "bob", b"", None, None, None);
        let login = parse_login(&payload, false).unwrap();
        assert_eq!(login.user, "bob");
        assert_eq!(login.auth_response, b"");
        assert_eq!(login.database, None);
        assert_eq!(login.plugin, None);
        assert!(login.uses_native_password());
        assert_eq!(login.capabilities, caps);
        assert!(login.attributes.is_empty());
    }

    #[test]
    fn login_with_another_plugin_needs_a_switch() {
        let payload = client_response(
            client_caps(),
            "root",
            &[7; 32],
            Some(""),
            Some(AuthPlugin::CachingSha2Password),
            None,
        );
        let login = parse_login(&payload, false).unwrap();
        assert_eq!(login.plugin.as_deref(), Some("caching_sha2_password"));
        assert_eq!(login.database, None, "an empty name is no database");
        assert!(!login.uses_native_password());
    }

    #[test]
    fn ssl_request_is_refused_distinctly() {
        let mut payload = Vec::new();
        SslRequest::new(client_caps() | Caps::CLIENT_SSL, 16 << 20, 45).serialize(&mut payload);
        assert_eq!(payload.len(), 32);
        assert!(is_ssl_request(&payload));
        assert_eq!(
            parse_login(&payload, false),
            Err(ProtocolError::TlsRequested)
        );
    }

    #[test]
    fn a_full_response_over_tls_keeps_its_ssl_flag() {
        let payload = client_response(
            client_caps() | Caps::CLIENT_SSL,
            "app",
            &[7; 20],
            None,
            None,
            None,
        );
        assert!(!is_ssl_request(&payload));
        let login = parse_login(&payload, true).unwrap();
        assert_eq!(login.user, "app");
        assert_eq!(
            parse_login(&payload, false),
            Err(ProtocolError::TlsRequested)
        );
    }

    #[test]
    fn the_greeting_offers_tls_only_when_asked() {
        let caps = |tls| {
            let payload = greeting(1, &NONCE, tls);
            HandshakePacket::deserialize((), &mut ParseBuf(&payload))
                .unwrap()
                .capabilities()
        };
        assert!(!caps(false).contains(Caps::CLIENT_SSL));
        assert!(caps(true).contains(Caps::CLIENT_SSL));
    }

    #[test]
    fn pre_4_1_clients_are_refused() {
        let payload = client_response(
            Caps::CLIENT_LONG_PASSWORD | Caps::CLIENT_SECURE_CONNECTION,
            "old",
            b"",
            None,
            None,
            None,
        );
        assert_eq!(parse_login(&payload, false), Err(ProtocolError::OldClient));
    }

    #[test]
    fn non_utf8_user_is_refused() {
        let mut payload = client_response(client_caps(), "bob", b"", None, None, None);
        payload[32] = 0xff;
        assert_eq!(
            parse_login(&payload, false),
            Err(ProtocolError::Malformed { what: "user name" })
        );
    }

    #[test]
    fn truncated_login_is_an_error_at_every_cut() {
        let scramble = scramble_native(&NONCE, b"pw").unwrap();
        let payload = client_response(
            client_caps(),
            "carol",
            &scramble,
            Some("db"),
            Some(AuthPlugin::MysqlNativePassword),
            Some(HashMap::from([("k".to_string(), "v".to_string())])),
        );
        assert!(parse_login(&payload, false).is_ok());
        // CLIENT_CONNECT_ATTRS is set, so even a cut inside the plugin name
        // (read up to its NUL or the end) leaves the attributes missing.
        for cut in 0..payload.len() {
            assert!(parse_login(&payload[..cut], false).is_err(), "cut at {cut}");
        }
    }

    /// PyMySQL 1.2.4, with a database: nonce and handshake response for user root, password "pw".
    const PYMYSQL: (&str, &str) = (
        "7d04197c1a794971700b0e7e33187a19521e0e58",
        "0da23a00ffffff002d0000000000000000000000000000000000000000000000\
        726f6f740014a0971c5af87a63904e843584a6927148acc8039f73686f70006d\
        7973716c5f6e61746976655f70617373776f726400360c5f636c69656e745f6e\
        616d650770796d7973716c0f5f636c69656e745f76657273696f6e05312e322e\
        34045f706964053237383938",
    );

    /// mysql-connector-python 26.10.0 (pure Python), no database: nonce and handshake response for user root, password "pw".
    const CONNECTOR_PYTHON: (&str, &str) = (
        "7c4a357e7d534752584b22072e4a02414525087f",
        "0da23b0000000040ff0000000000000000000000000000000000000000000000\
        726f6f740014a639281fab8eb6393a7bacac877a35efcebef06a006d7973716c\
        5f6e61746976655f70617373776f7264008e045f706964053237383938095f70\
        6c6174666f726d067838365f36340c5f736f757263655f686f737402766d0c5f\
        636c69656e745f6e616d65166d7973716c2d636f6e6e6563746f722d70797468\
        6f6e0f5f636c69656e745f6c6963656e73650747504c2d322e300f5f636c6965\
        6e745f76657273696f6e0732362e31302e30035f6f730944656269616e2d3132",
    );

    /// the MariaDB 10.11 `mariadb` CLI (libmariadb 3.3.20), with a database: nonce and handshake response for user root, password "pw".
    const MARIADB_CLI: (&str, &str) = (
        "6a78323728784c2142082d7d304f687d346d176a",
        "8da2bf0000001000210000000000000000000000000000000000000000000000\
        726f6f740014d3d7e2952f8a7206c268b5c2876ad01c8a52a2a973686f70006d\
        7973716c5f6e61746976655f70617373776f7264007f035f6f73054c696e7578\
        0c5f636c69656e745f6e616d650a6c69626d617269616462045f706964053237\
        3932340f5f636c69656e745f76657273696f6e06332e332e3230095f706c6174\
        666f726d067838365f36340c70726f6772616d5f6e616d65056d7973716c0c5f\
        7365727665725f686f7374093132372e302e302e31",
    );

    fn unhex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Checks a captured login: fields, and that "pw" verifies.
    fn check_transcript(
        (nonce, payload): (&str, &str),
        database: Option<&str>,
        collation: u8,
        client_name: &str,
        raw_caps: u32,
    ) {
        let nonce: [u8; 20] = unhex(nonce).try_into().unwrap();
        let payload = unhex(payload);
        assert_eq!(
            u32::from_le_bytes(payload[..4].try_into().unwrap()),
            raw_caps
        );
        let login = parse_login(&payload, false).unwrap();
        assert_eq!(login.user, "root");
        assert_eq!(login.database.as_deref(), database);
        assert_eq!(login.collation, collation);
        assert_eq!(login.plugin.as_deref(), Some("mysql_native_password"));
        assert!(!login
            .capabilities
            .contains(CapabilityFlags::CLIENT_DEPRECATE_EOF));
        assert!(login
            .attributes
            .contains(&("_client_name".to_string(), client_name.to_string())));
        let stored = native_password_hash(b"pw");
        assert!(native_password_matches(
            &nonce,
            Some(&stored),
            &login.auth_response
        ));
        assert!(!native_password_matches(
            &nonce,
            Some(&native_password_hash(b"pw2")),
            &login.auth_response
        ));
    }

    #[test]
    fn real_client_logins() {
        // LONG_PASSWORD, LONG_FLAG, CONNECT_WITH_DB, PROTOCOL_41, TRANSACTIONS,
        // SECURE_CONNECTION, MULTI_RESULTS, PLUGIN_AUTH, CONNECT_ATTRS,
        // PLUGIN_AUTH_LENENC_CLIENT_DATA; no DEPRECATE_EOF, no FOUND_ROWS.
        check_transcript(PYMYSQL, Some("shop"), 45, "pymysql", 0x003a_a20d);
        // The same and MULTI_STATEMENTS; CONNECT_WITH_DB set with an empty
        // name; collation utf8mb4_0900_ai_ci.
        check_transcript(
            CONNECTOR_PYTHON,
            None,
            255,
            "mysql-connector-python",
            0x003b_a20d,
        );
        // And LOCAL_FILES (kept: Kura answers LOAD DATA LOCAL), PS_MULTI_RESULTS
        // and SESSION_TRACK (masked off);
        // collation utf8mb3_general_ci.
        check_transcript(MARIADB_CLI, Some("shop"), 33, "libmariadb", 0x00bf_a28d);
    }

    #[test]
    fn native_password_checks() {
        let stored = native_password_hash(b"secret");
        // The well-known hash of "secret" (MySQL's PASSWORD('secret')).
        let hex: String = stored.iter().map(|b| format!("{b:02X}")).collect();
        assert_eq!(hex, "14E65567ABDB5135D0CFD9A70B3032C179A49EE7");
        for nonce in [NONCE, nonce_from_random([0xab; 20])] {
            let good = scramble_native(&nonce, b"secret").unwrap();
            assert!(native_password_matches(&nonce, Some(&stored), &good));
            let wrong = scramble_native(&nonce, b"Secret").unwrap();
            assert!(!native_password_matches(&nonce, Some(&stored), &wrong));
            assert!(!native_password_matches(&nonce, Some(&stored), b""));
            assert!(!native_password_matches(&nonce, Some(&stored), &good[..19]));
            // Empty password: only an empty response.
            assert!(native_password_matches(&nonce, None, b""));
            assert!(!native_password_matches(&nonce, None, &good));
        }
        // A scramble for one nonce does not pass for another.
        let good = scramble_native(&NONCE, b"secret").unwrap();
        assert!(!native_password_matches(
            b"ABCDEFGH0123456789ab",
            Some(&stored),
            &good
        ));
    }

    #[test]
    fn auth_switch_parses_as_mysql_common_client_sees_it() {
        let payload = auth_switch(&NONCE);
        assert_eq!(payload[0], 0xfe);
        let request = AuthSwitchRequest::deserialize((), &mut ParseBuf(&payload)).unwrap();
        assert_eq!(request.auth_plugin(), AuthPlugin::MysqlNativePassword);
        assert_eq!(request.plugin_data(), &NONCE[..]);
        assert_eq!(
            payload,
            [&b"\xfemysql_native_password\x00"[..], &NONCE, b"\x00"].concat()
        );
    }
}
