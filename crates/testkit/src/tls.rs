//! TLS for tests: certificates made with the `openssl` command line, and a blocking
//! rustls client to talk through them.
//!
//! [`Certificates::generate`] writes, in a temporary directory: a CA (`ca.pem`), a
//! server certificate it signed for `127.0.0.1` and `localhost` (`server.pem`,
//! `server.key`), a second one for the same names (`renewed.pem`, `renewed.key`, to
//! replace the first in reload tests), a client certificate (`client.pem`,
//! `client.key`), and a CA that signed none of them (`other-ca.pem`).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

pub type TlsStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// A directory of test certificates.
pub struct Certificates {
    dir: tempfile::TempDir,
}

fn openssl(dir: &Path, args: &[&str]) -> io::Result<()> {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot run openssl: {e}")))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "openssl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        )))
    }
}

/// A P-256 key and a self-signed CA certificate named `name`.
fn make_ca(dir: &Path, name: &str) -> io::Result<()> {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
            "-days",
            "30",
            "-subj",
            &format!("/CN=kura test {name}"),
        ],
    )
}

/// A key and a certificate `name` signed by CA `ca`, with the extensions `ext`.
fn make_leaf(dir: &Path, name: &str, ca: &str, ext: &str) -> io::Result<()> {
    std::fs::write(dir.join(format!("{name}.ext")), ext)?;
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            &format!("/CN=kura test {name}"),
        ],
    )?;
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-out",
            &format!("{name}.pem"),
            "-days",
            "30",
            "-extfile",
            &format!("{name}.ext"),
        ],
    )
}

const SERVER_EXT: &str = "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n";
const CLIENT_EXT: &str =
    "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n";

impl Certificates {
    pub fn generate() -> io::Result<Certificates> {
        let dir = tempfile::Builder::new().prefix("kura-tls-").tempdir()?;
        let path = dir.path();
        make_ca(path, "ca")?;
        make_ca(path, "other-ca")?;
        make_leaf(path, "server", "ca", SERVER_EXT)?;
        make_leaf(path, "renewed", "ca", SERVER_EXT)?;
        make_leaf(path, "client", "ca", CLIENT_EXT)?;
        Ok(Certificates { dir })
    }

    /// A file of the directory (`ca.pem`, `server.key`, …).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `-o ssl_chain_cert=…,ssl_key=…` and `extra` (more `key=value` settings), for
    /// memcached and Kura alike, after `-Z`.
    pub fn server_args(&self, extra: &[&str]) -> Vec<String> {
        let mut settings = vec![
            format!("ssl_chain_cert={}", self.path("server.pem").display()),
            format!("ssl_key={}", self.path("server.key").display()),
        ];
        settings.extend(extra.iter().map(|s| s.to_string()));
        vec!["-Z".to_string(), "-o".to_string(), settings.join(",")]
    }

    /// The DER of a PEM certificate file's first certificate.
    pub fn der(&self, name: &str) -> io::Result<Vec<u8>> {
        let cert = CertificateDer::from_pem_file(self.path(name))
            .map_err(|e| io::Error::other(format!("{name}: {e}")))?;
        Ok(cert.as_ref().to_vec())
    }
}

/// Which TLS versions a client offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Versions {
    Any,
    Only12,
    Only13,
}

/// Connects to `addr` with TLS, trusting `ca` for `127.0.0.1`, showing `client`
/// (certificate and key files) when given, and completes the handshake.
pub fn connect(
    addr: SocketAddr,
    ca: &Path,
    client: Option<(&Path, &Path)>,
    versions: Versions,
) -> io::Result<TlsStream> {
    let other = |e: &dyn std::fmt::Display| io::Error::other(e.to_string());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| other(&e))? {
        roots
            .add(cert.map_err(|e| other(&e))?)
            .map_err(|e| other(&e))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let protocols: &[&rustls::SupportedProtocolVersion] = match versions {
        Versions::Any => rustls::ALL_VERSIONS,
        Versions::Only12 => &[&rustls::version::TLS12],
        Versions::Only13 => &[&rustls::version::TLS13],
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(protocols)
        .map_err(|e| other(&e))?
        .with_root_certificates(roots);
    let config = match client {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .map_err(|e| other(&e))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| other(&e))?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| other(&e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| other(&e))?
        }
        None => builder.with_no_client_auth(),
    };
    let name = ServerName::try_from(addr.ip().to_string()).map_err(|e| other(&e))?;
    let session = rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| other(&e))?;
    let socket = TcpStream::connect(addr)?;
    socket.set_read_timeout(Some(crate::REPLY_TIMEOUT))?;
    let mut stream = rustls::StreamOwned::new(session, socket);
    while stream.conn.is_handshaking() {
        stream.conn.complete_io(&mut stream.sock)?;
    }
    Ok(stream)
}

/// Sends `request` and reads until the reply ends with `end` (or the stream does, or
/// the reply timeout passes).
pub fn request(stream: &mut TlsStream, request: &[u8], end: &[u8]) -> io::Result<Vec<u8>> {
    stream.write_all(request)?;
    stream.flush()?;
    let deadline = Instant::now() + crate::REPLY_TIMEOUT;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    while !reply.ends_with(end) {
        if Instant::now() > deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "no {:?} in {:?}",
                    String::from_utf8_lossy(end),
                    String::from_utf8_lossy(&reply)
                ),
            ));
        }
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => reply.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) => return Err(e),
        }
    }
    Ok(reply)
}
