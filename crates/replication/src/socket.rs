//! The connections from this node to another: plain TCP, or TLS (`--tls-replication`)
//! with the other node's certificate checked for the address's host name.
//!
//! Two kinds, by who uses them:
//! - [`Socket`], blocking, read and written by one thread at a time: a fence, a
//!   failover's questions, a request a replica forwards, `kura backup`'s questions.
//!   TLS is rustls's blocking stream over the TCP socket.
//! - [`Stream`], async: a replica's stream from its primary, which reads the records
//!   and writes its acknowledgements at once, on one task (`replica.rs`).
//!
//! What it is not for: the primary's side of a stream, which runs on the connection
//! the replica opened (`primary.rs`, on the worker that accepted it).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::{ClientConfig, ClientConnection, StreamOwned};

use super::ReplicationError;

/// How many times longer than opening the connection its TLS handshake may take.
const HANDSHAKE_FACTOR: u32 = 5;

pub enum Socket {
    Tcp(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Socket {
    fn tcp(&self) -> &TcpStream {
        match self {
            Socket::Tcp(s) => s,
            Socket::Tls(s) => s.get_ref(),
        }
    }

    pub fn set_read_timeout(&self, limit: Option<Duration>) -> std::io::Result<()> {
        self.tcp().set_read_timeout(limit)
    }

    pub fn set_write_timeout(&self, limit: Option<Duration>) -> std::io::Result<()> {
        self.tcp().set_write_timeout(limit)
    }

    /// The local address of the TCP connection underneath.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp().local_addr()
    }

    /// Connects to `address`: over TLS with `tls` (the peer's certificate checked
    /// for the address's host name, the handshake made before this returns), else
    /// plain TCP.
    pub fn connect(
        address: &str,
        tls: Option<&dyn crate::ClientTls>,
        limit: Duration,
    ) -> Result<Socket, ReplicationError> {
        let io = |source| connect_error(address, source);
        let addr = resolve(address).map_err(io)?;
        let mut stream = TcpStream::connect_timeout(&addr, limit).map_err(io)?;
        stream.set_nodelay(true).map_err(io)?;
        let Some(settings) = tls else {
            return Ok(Socket::Tcp(stream));
        };
        let tls_error = |why| tls_error(address, why);
        let (config, name) = tls_setup(address, settings)?;
        let mut session =
            ClientConnection::new(config, name).map_err(|e| tls_error(e.to_string()))?;
        let handshake = Some(limit * HANDSHAKE_FACTOR);
        stream.set_read_timeout(handshake).map_err(io)?;
        stream.set_write_timeout(handshake).map_err(io)?;
        while session.is_handshaking() {
            session
                .complete_io(&mut stream)
                .map_err(|e| tls_error(e.to_string()))?;
        }
        stream.set_read_timeout(None).map_err(io)?;
        stream.set_write_timeout(None).map_err(io)?;
        Ok(Socket::Tls(Box::new(StreamOwned::new(session, stream))))
    }
}

impl Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.read(buf),
            Socket::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Socket {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.write(buf),
            Socket::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Socket::Tcp(s) => s.flush(),
            Socket::Tls(s) => s.flush(),
        }
    }
}

/// The host part of `HOST:PORT` as the name a server certificate must carry.
pub fn server_name(address: &str) -> Result<ServerName<'static>, String> {
    let host = match address.rsplit_once(':') {
        Some((host, _)) => host.trim_start_matches('[').trim_end_matches(']'),
        None => address,
    };
    ServerName::try_from(host.to_string()).map_err(|e| format!("{host}: {e}"))
}

/// The first address `address` (`host:port`) resolves to.
fn resolve(address: &str) -> std::io::Result<SocketAddr> {
    address
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::other("no address"))
}

/// An async connection: TCP or TLS, read and written from one task.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

pub type Stream = Box<dyn Io>;

/// [`Socket::connect`] for a [`Stream`].
pub async fn connect_stream(
    address: &str,
    tls: Option<&dyn crate::ClientTls>,
    limit: Duration,
) -> Result<Stream, ReplicationError> {
    let io = |source| connect_error(address, source);
    let timed_out = || io(std::io::Error::from(std::io::ErrorKind::TimedOut));
    let addr = resolve(address).map_err(io)?;
    let stream = tokio::time::timeout(limit, tokio::net::TcpStream::connect(addr))
        .await
        .map_err(|_| timed_out())?
        .map_err(io)?;
    stream.set_nodelay(true).map_err(io)?;
    let Some(settings) = tls else {
        return Ok(Box::new(stream));
    };
    let (config, name) = tls_setup(address, settings)?;
    let handshake = tokio_rustls::TlsConnector::from(config).connect(name, stream);
    match tokio::time::timeout(limit * HANDSHAKE_FACTOR, handshake).await {
        Ok(Ok(tls)) => Ok(Box::new(tls)),
        Ok(Err(e)) => Err(tls_error(address, e.to_string())),
        Err(_) => Err(tls_error(address, "no handshake".to_string())),
    }
}

fn connect_error(address: &str, source: std::io::Error) -> ReplicationError {
    ReplicationError::Connect {
        address: address.to_string(),
        source,
    }
}

fn tls_error(address: &str, why: String) -> ReplicationError {
    ReplicationError::Tls {
        address: address.to_string(),
        why,
    }
}

/// TLS toward `address`: the client configuration, and the name the other node's
/// certificate must carry.
fn tls_setup(
    address: &str,
    settings: &dyn crate::ClientTls,
) -> Result<(Arc<ClientConfig>, ServerName<'static>), ReplicationError> {
    let config = settings
        .client_config()
        .map_err(|why| tls_error(address, why))?;
    let name = server_name(address).map_err(|why| tls_error(address, why))?;
    Ok((config, name))
}

/// Sends `login` (a `--replication-login`), if any, and waits for its `STORED`.
pub async fn log_in_stream(
    stream: &mut Stream,
    login: Option<&[u8]>,
) -> Result<(), ReplicationError> {
    let Some(login) = login else {
        return Ok(());
    };
    stream.write_all(login).await?;
    let mut reply = Vec::new();
    // Byte by byte: what follows the reply is the stream's, not the login's.
    while !reply.ends_with(b"\r\n") && reply.len() < 4096 {
        let byte = match stream.read_u8().await {
            Ok(byte) => byte,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(ReplicationError::Closed)
            }
            Err(e) => return Err(e.into()),
        };
        reply.push(byte);
    }
    super::login_reply(&reply)
}

#[cfg(test)]
mod tests {
    use super::server_name;

    #[test]
    fn server_names_come_from_the_host() {
        assert_eq!(
            server_name("127.0.0.1:11211").map(|n| n.to_str().into_owned()),
            Ok("127.0.0.1".to_string())
        );
        assert_eq!(
            server_name("[::1]:11211").map(|n| n.to_str().into_owned()),
            Ok("::1".to_string())
        );
        assert_eq!(
            server_name("cache.example:11211").map(|n| n.to_str().into_owned()),
            Ok("cache.example".to_string())
        );
    }
}
