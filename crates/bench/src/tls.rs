//! `<backend>-tls`: memcached or Kura with TLS on (`-Z`), and the client side of it.
//!
//! The certificates are made once per run with the `openssl` command line (a CA and
//! a P-256 server certificate for 127.0.0.1, the curve and signature a deployment
//! would pick), and the same ones are given to memcached and Kura. The client
//! verifies the server's certificate as a real client would, and offers TLS 1.2 and
//! 1.3 (both servers choose 1.3) with rustls's default cipher suites.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex, Weak};

use anyhow::{bail, Context, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

/// The run's certificates and the client configuration that trusts them.
pub struct BenchTls {
    dir: tempfile::TempDir,
    client: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for BenchTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BenchTls")
            .field("dir", &self.dir.path())
            .finish()
    }
}

/// The certificates in use, shared by every TLS backend of the run.
static SHARED: Mutex<Weak<BenchTls>> = Mutex::new(Weak::new());

fn openssl(dir: &Path, args: &[&str]) -> Result<()> {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .context("running openssl (Debian's openssl package) to make certificates")?;
    if !output.status.success() {
        bail!(
            "openssl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

impl BenchTls {
    /// The run's certificates, made on first use under `root`.
    pub fn shared(root: &Path) -> Result<Arc<BenchTls>> {
        let mut shared = SHARED
            .lock()
            .map_err(|_| anyhow::anyhow!("TLS setup poisoned"))?;
        if let Some(tls) = shared.upgrade() {
            return Ok(tls);
        }
        let tls = Arc::new(BenchTls::generate(root)?);
        *shared = Arc::downgrade(&tls);
        Ok(tls)
    }

    fn generate(root: &Path) -> Result<BenchTls> {
        let dir = tempfile::Builder::new()
            .prefix("kura-bench-tls-")
            .tempdir_in(root)
            .with_context(|| format!("a directory for certificates under {}", root.display()))?;
        let path = dir.path();
        let curve = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ];
        let mut ca = vec!["req", "-x509"];
        ca.extend(curve);
        ca.extend([
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "7",
            "-subj",
            "/CN=kura-bench CA",
        ]);
        openssl(path, &ca)?;
        let mut csr = vec!["req"];
        csr.extend(curve);
        csr.extend([
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=kura-bench server",
        ]);
        openssl(path, &csr)?;
        std::fs::write(
            path.join("server.ext"),
            "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n",
        )?;
        openssl(
            path,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "server.pem",
                "-days",
                "7",
                "-extfile",
                "server.ext",
            ],
        )?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(path.join("ca.pem"))? {
            roots.add(cert?)?;
        }
        let client = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
        Ok(BenchTls {
            dir,
            client: Arc::new(client),
        })
    }

    /// memcached's and Kura's flags for TLS with these certificates.
    pub fn server_args(&self) -> Vec<String> {
        let path = self.dir.path();
        vec![
            "-Z".to_string(),
            "-o".to_string(),
            format!(
                "ssl_chain_cert={},ssl_key={}",
                path.join("server.pem").display(),
                path.join("server.key").display()
            ),
        ]
    }

    /// A client session for a server on 127.0.0.1.
    pub fn session(&self) -> Result<rustls::ClientConnection> {
        let name = ServerName::try_from("127.0.0.1")?;
        Ok(rustls::ClientConnection::new(
            Arc::clone(&self.client),
            name,
        )?)
    }

    /// Completes a handshake on a blocking socket.
    pub fn handshake(&self, socket: &mut TcpStream) -> Result<rustls::ClientConnection> {
        let mut session = self.session()?;
        while session.is_handshaking() {
            session
                .complete_io(socket)
                .context("TLS handshake with the server")?;
        }
        Ok(session)
    }
}

/// Writes what `session` holds to the nonblocking `socket` until it would block.
pub fn send(
    session: &mut rustls::ClientConnection,
    socket: &mut impl Write,
) -> std::io::Result<()> {
    while session.wants_write() {
        match session.write_tls(socket) {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads what the nonblocking `socket` has, decrypts it and appends the plaintext to
/// `into`. Returns false when the server closed the connection.
pub fn receive(
    session: &mut rustls::ClientConnection,
    socket: &mut impl Read,
    into: &mut Vec<u8>,
    chunk: &mut [u8],
) -> std::io::Result<bool> {
    let mut open = true;
    loop {
        match session.read_tls(socket) {
            Ok(0) => {
                open = false;
                break;
            }
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        session
            .process_new_packets()
            .map_err(|e| std::io::Error::new(ErrorKind::InvalidData, e))?;
    }
    loop {
        match session.reader().read(chunk) {
            Ok(0) => return Ok(false),
            Ok(n) => into.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(open),
            Err(e) => return Err(e),
        }
    }
}
