//! What the settings must satisfy before the server opens anything, and what it reads
//! from the files they name: [`prepare`], the one validation that both the server's
//! start and `kura config check` run, so that check refuses exactly what start would.
//!
//! It reads and checks the users files (`-Y`, `--admin-auth-file`, `--sql-users`),
//! the replication login, the TLS settings and certificates, and the metrics token,
//! and it refuses a port that would let anyone in: `-l` off the loopback without
//! logins or required client certificates, the SQL port off the loopback with a
//! passwordless user, metrics off the loopback without a token (`--insecure` lifts
//! the first and the last). What it is not for: binding ports and opening the data
//! directory, which only a start does (a check must not take the ports of a server
//! that runs).

use crate::config::Config;
use crate::{auth, metrics, sql, tls};

/// Everything the server's start reads from files, checked.
pub struct Prepared {
    /// `-Y` and `--admin-auth-file`; none when neither is given.
    pub users: Option<auth::Logins>,
    /// The SQL port's users, when the SQL port is on.
    pub sql_users: Option<sql::Users>,
    /// The text login of `--replication-login`.
    pub replication_login: Option<Vec<u8>>,
    /// The TLS settings, for the port (`-Z`) or for replication.
    pub tls_settings: Option<tls::Settings>,
    /// TLS on the memcached port (`-Z`).
    pub tls: Option<tls::Tls>,
    pub metrics_token: Option<metrics::Token>,
}

/// Checks `config` and reads the files it names; the first problem is the error.
pub fn prepare(config: &Config) -> anyhow::Result<Prepared> {
    let sql_users = match config.sql_port.0 {
        Some(_) => {
            let users = match &config.sql_users {
                Some(path) => sql::Users::from_file(path)?,
                None => sql::Users::root_only(),
            };
            if users.has_passwordless() && !sql::is_loopback(&config.listen) {
                anyhow::bail!(
                    "the SQL port would let a user in without a password on {}: give \
                     passwords with --sql-users FILE, listen on loopback, or --sql-port off",
                    config.listen
                );
            }
            Some(users)
        }
        None => None,
    };
    let replication_login = match &config.replication_login {
        Some(path) => Some(auth::login_from_file(path)?),
        None => None,
    };
    let users = auth::Logins::open(
        config.auth_file.as_deref(),
        config.admin_auth_file.as_deref(),
    )?;
    if users.is_none() && config.enable_sasl {
        anyhow::bail!("-S: Kura's SASL checks the users of an auth file; give one with -Y FILE");
    }
    let tls_settings = config.tls_settings()?;
    let tls = match (&tls_settings, config.enable_ssl) {
        (Some(settings), true) => {
            Some(tls::Tls::start(settings.clone()).map_err(|e| anyhow::anyhow!("-Z: {e}"))?)
        }
        _ => None,
    };
    if config.tls_replication {
        // Checked now, not at the first connection to a primary.
        tls_settings
            .as_ref()
            .map(tls::Settings::client_config)
            .transpose()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    // Who may use the port: the users of -Y and --admin-auth-file, or the holders of
    // a client certificate that TLS requires. TLS alone encrypts, but lets anyone in.
    let guarded = users.is_some()
        || tls
            .as_ref()
            .is_some_and(|t| t.settings.verify.requires_certificate());
    if !guarded && !config.insecure && !sql::is_loopback(&config.listen) {
        anyhow::bail!(
            "listening on {} with no users file would let anyone who reaches the port read \
             and change everything: give -Y FILE (or -Z with client certificates required, \
             ssl_verify_mode=2), listen on loopback, or pass --insecure to mean it",
            config.listen
        );
    }
    crate::cluster::check(config)?;
    let metrics_token = config
        .metrics_token_file
        .as_deref()
        .map(metrics::Token::from_file)
        .transpose()?;
    if config.metrics_port.is_some()
        && metrics_token.is_none()
        && !config.insecure
        && !sql::is_loopback(&config.metrics_listen)
    {
        anyhow::bail!(
            "serving metrics on {} without a token would show them to anyone who reaches \
             the port: give --metrics-token-file FILE, listen on loopback, or pass \
             --insecure to mean it",
            config.metrics_listen
        );
    }
    Ok(Prepared {
        users,
        sql_users,
        replication_login,
        tls_settings,
        tls,
        metrics_token,
    })
}
