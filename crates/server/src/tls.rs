//! TLS: rustls with the ring provider, TLS 1.2 and 1.3, set up with memcached's
//! settings (`-Z`, `-o ssl_chain_cert=…,ssl_key=…,ssl_ca_cert=…,ssl_verify_mode=…,
//! ssl_min_version=…`). One [`Tls`] serves the memcached port (where replicas connect
//! too) and the SQL port; with `--tls-replication` it also makes the client side this
//! node uses toward its primary.
//!
//! The files are read at start and again on SIGHUP or `refresh_certs`. A handshake
//! takes the configuration current when it begins, so a reload never touches a
//! connection already up; a reload that fails keeps the configuration in use.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Mutex, RwLock};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig, SupportedProtocolVersion};

/// memcached's `ssl_verify_mode`: whether a client must show a certificate signed by
/// a CA of `ssl_ca_cert`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// 0: no certificate asked for.
    None,
    /// 1: asked for; a client without one is let in, one with a bad one is not.
    Request,
    /// 2: required.
    Require,
    /// 3: required once per connection (rustls never renegotiates, so as 2).
    Once,
}

impl Verify {
    pub fn parse(text: &str) -> Result<Verify, String> {
        match text {
            "0" => Ok(Verify::None),
            "1" => Ok(Verify::Request),
            "2" => Ok(Verify::Require),
            "3" => Ok(Verify::Once),
            _ => Err(format!(
                "ssl_verify_mode is 0 (none), 1 (request), 2 (require) or 3 (once), not {text:?}"
            )),
        }
    }

    fn number(self) -> u8 {
        match self {
            Verify::None => 0,
            Verify::Request => 1,
            Verify::Require => 2,
            Verify::Once => 3,
        }
    }

    /// Whether every client must show a certificate.
    pub fn requires_certificate(self) -> bool {
        self == Verify::Require || self == Verify::Once
    }
}

/// memcached's `ssl_min_version`, of the versions rustls speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MinVersion {
    Tls12,
    Tls13,
}

impl MinVersion {
    /// memcached's numbers (2, 3) or its names (`tlsv1.2`, `tlsv1.3`). TLS 1.0 and 1.1
    /// (0 and 1) are refused: rustls does not speak them, and they are broken.
    pub fn parse(text: &str) -> Result<MinVersion, String> {
        match text {
            "2" | "tlsv1.2" => Ok(MinVersion::Tls12),
            "3" | "tlsv1.3" => Ok(MinVersion::Tls13),
            "0" | "1" | "tlsv1.0" | "tlsv1.1" => Err(format!(
                "ssl_min_version {text}: Kura speaks TLS 1.2 and 1.3 only (2 or 3)"
            )),
            _ => Err(format!(
                "ssl_min_version is 2 (tlsv1.2) or 3 (tlsv1.3), not {text:?}"
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            MinVersion::Tls12 => "tlsv1.2",
            MinVersion::Tls13 => "tlsv1.3",
        }
    }

    fn versions(self) -> &'static [&'static SupportedProtocolVersion] {
        static BOTH: [&SupportedProtocolVersion; 2] =
            [&rustls::version::TLS13, &rustls::version::TLS12];
        static ONLY_13: [&SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
        match self {
            MinVersion::Tls12 => &BOTH,
            MinVersion::Tls13 => &ONLY_13,
        }
    }
}

/// Where the certificates are and what is asked of clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The server's certificate chain, PEM, leaf first.
    pub chain_cert: Option<PathBuf>,
    /// Its private key, PEM; when absent, the key is read from the chain file.
    pub key: Option<PathBuf>,
    /// The CAs a client's certificate (and, for `--tls-replication`, the primary's)
    /// must be signed by, PEM.
    pub ca_cert: Option<PathBuf>,
    pub verify: Verify,
    pub min_version: MinVersion,
}

/// TLS as the server uses it: the current server configuration and its counters.
pub struct Tls {
    pub settings: Settings,
    server: RwLock<Arc<ServerConfig>>,
    refreshed: Mutex<Instant>,
    /// Handshakes that failed (memcached's `ssl_handshake_errors`).
    pub handshake_errors: AtomicU64,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let chain = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("reading certificates from {}: {e}", path.display()))?;
    if chain.is_empty() {
        return Err(format!("{} holds no PEM certificate", path.display()));
    }
    Ok(chain)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|e| format!("reading a private key from {}: {e}", path.display()))
}

fn read_roots(path: &Path) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for cert in read_chain(path)? {
        roots
            .add(cert)
            .map_err(|e| format!("{}: not a CA certificate: {e}", path.display()))?;
    }
    Ok(roots)
}

impl Settings {
    /// The chain and key this node shows: as a server, and as a replica's client
    /// certificate.
    fn identity(
        &self,
    ) -> Result<Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>, String> {
        let Some(chain_path) = &self.chain_cert else {
            return Ok(None);
        };
        let chain = read_chain(chain_path)?;
        let key = read_key(self.key.as_deref().unwrap_or(chain_path))?;
        Ok(Some((chain, key)))
    }

    /// A server configuration from the files as they are now.
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, String> {
        let (chain, key) = self
            .identity()?
            .ok_or("TLS needs ssl_chain_cert (the server's certificate chain)")?;
        let builder = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(self.min_version.versions())
            .map_err(|e| e.to_string())?;
        let builder = match (self.verify, &self.ca_cert) {
            (Verify::None, _) => builder.with_no_client_auth(),
            (_, None) => {
                return Err(format!(
                    "ssl_verify_mode {} needs ssl_ca_cert: the CAs client certificates are checked against",
                    self.verify.number()
                ))
            }
            (verify, Some(ca)) => {
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(read_roots(ca)?), provider());
                let verifier = if verify.requires_certificate() {
                    verifier
                } else {
                    verifier.allow_unauthenticated()
                };
                builder.with_client_cert_verifier(verifier.build().map_err(|e| e.to_string())?)
            }
        };
        let config = builder
            .with_single_cert(chain, key)
            .map_err(|e| format!("the certificate and key do not go together: {e}"))?;
        Ok(Arc::new(config))
    }

    /// The client side toward a primary: its certificate must be signed by a CA of
    /// `ssl_ca_cert`, and this node shows its own chain when it has one.
    pub fn client_config(&self) -> Result<Arc<ClientConfig>, String> {
        let ca = self
            .ca_cert
            .as_ref()
            .ok_or("--tls-replication needs ssl_ca_cert: the CAs the primary's certificate is checked against")?;
        let builder = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(self.min_version.versions())
            .map_err(|e| e.to_string())?
            .with_root_certificates(read_roots(ca)?);
        let config = match self.identity()? {
            Some((chain, key)) => builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("the certificate and key do not go together: {e}"))?,
            None => builder.with_no_client_auth(),
        };
        Ok(Arc::new(config))
    }

    /// `stats settings` lines, as memcached names them.
    pub fn write_settings(&self, enabled: bool, out: &mut Vec<u8>) {
        let path = |p: &Option<PathBuf>| {
            p.as_ref()
                .map_or("NULL".to_string(), |p| p.display().to_string())
        };
        let mut stat = |name: &str, value: String| {
            out.extend_from_slice(format!("STAT {name} {value}\r\n").as_bytes());
        };
        stat(
            "ssl_enabled",
            if enabled { "yes" } else { "no" }.to_string(),
        );
        stat("ssl_chain_cert", path(&self.chain_cert));
        stat("ssl_key", path(&self.key));
        stat("ssl_verify_mode", self.verify.number().to_string());
        stat("ssl_ca_cert", path(&self.ca_cert));
        stat("ssl_min_version", self.min_version.name().to_string());
    }
}

impl kura_replication::ClientTls for Settings {
    fn client_config(&self) -> Result<Arc<ClientConfig>, String> {
        Settings::client_config(self)
    }
}

impl Tls {
    pub fn start(settings: Settings) -> Result<Tls, String> {
        let server = settings.server_config()?;
        Ok(Tls {
            settings,
            server: RwLock::new(server),
            refreshed: Mutex::new(Instant::now()),
            handshake_errors: AtomicU64::new(0),
        })
    }

    /// The configuration a new handshake uses.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        Arc::clone(&self.server.read())
    }

    /// Reads the files again; on success new handshakes use them.
    pub fn reload(&self) -> Result<(), String> {
        let config = self.settings.server_config()?;
        *self.server.write() = config;
        *self.refreshed.lock() = Instant::now();
        Ok(())
    }

    /// `stats` lines while TLS is on, as memcached names them.
    pub fn write_stats(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(
            format!(
                "STAT ssl_handshake_errors {}\r\nSTAT time_since_server_cert_refresh {}\r\n",
                self.handshake_errors.load(Ordering::Relaxed),
                self.refreshed.lock().elapsed().as_secs()
            )
            .as_bytes(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memcached_numbers_and_names_parse() {
        assert_eq!(Verify::parse("2"), Ok(Verify::Require));
        assert_eq!(Verify::parse("4").map_err(|_| ()), Err(()));
        assert_eq!(MinVersion::parse("tlsv1.3"), Ok(MinVersion::Tls13));
        assert_eq!(MinVersion::parse("2"), Ok(MinVersion::Tls12));
        assert_eq!(MinVersion::parse("1").map_err(|_| ()), Err(()));
    }
}
