//! The connection replication runs on: the TCP socket itself, or, when TLS carries
//! it, one end of a socket pair whose other end is relayed to the TLS stream. The
//! replication threads read and write blocking sockets from two threads at once (the
//! records one way, the acknowledgements the other), which a TLS session cannot
//! share; the relay keeps TLS on one task and gives them a plain socket.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};

use super::ReplicationError;

pub enum Socket {
    Tcp(TcpStream),
    /// TLS, relayed: `local` is the TCP connection's own address.
    Relayed {
        pair: UnixStream,
        local: SocketAddr,
    },
}

impl Socket {
    pub fn try_clone(&self) -> std::io::Result<Socket> {
        Ok(match self {
            Socket::Tcp(s) => Socket::Tcp(s.try_clone()?),
            Socket::Relayed { pair, local } => Socket::Relayed {
                pair: pair.try_clone()?,
                local: *local,
            },
        })
    }

    pub fn shutdown(&self) {
        let _ = match self {
            Socket::Tcp(s) => s.shutdown(Shutdown::Both),
            Socket::Relayed { pair, .. } => pair.shutdown(Shutdown::Both),
        };
    }

    pub fn set_read_timeout(&self, limit: Option<Duration>) -> std::io::Result<()> {
        match self {
            Socket::Tcp(s) => s.set_read_timeout(limit),
            Socket::Relayed { pair, .. } => pair.set_read_timeout(limit),
        }
    }

    pub fn set_write_timeout(&self, limit: Option<Duration>) -> std::io::Result<()> {
        match self {
            Socket::Tcp(s) => s.set_write_timeout(limit),
            Socket::Relayed { pair, .. } => pair.set_write_timeout(limit),
        }
    }

    /// The local address of the TCP connection underneath.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        match self {
            Socket::Tcp(s) => s.local_addr(),
            Socket::Relayed { local, .. } => Ok(*local),
        }
    }

    /// The replication end of a relay, and the end the relay joins to `tls`. Run
    /// [`relay`] on the second once the first is handed over.
    pub fn pair(local: SocketAddr) -> std::io::Result<(Socket, UnixStream)> {
        let (near, far) = UnixStream::pair()?;
        far.set_nonblocking(true)?;
        Ok((Socket::Relayed { pair: near, local }, far))
    }

    /// Connects to `address`: over TLS with `tls` (the peer's certificate checked
    /// for the address's host name), else plain TCP.
    pub fn connect(
        address: &str,
        tls: Option<&crate::tls::Settings>,
        limit: Duration,
    ) -> Result<Socket, ReplicationError> {
        let io = |source: std::io::Error| ReplicationError::Connect {
            address: address.to_string(),
            source,
        };
        let tls_error = |why: String| ReplicationError::Tls {
            address: address.to_string(),
            why,
        };
        let addr = address
            .to_socket_addrs()
            .map_err(io)?
            .next()
            .ok_or_else(|| io(std::io::Error::other("no address")))?;
        let stream = TcpStream::connect_timeout(&addr, limit).map_err(io)?;
        stream.set_nodelay(true).map_err(io)?;
        let Some(settings) = tls else {
            return Ok(Socket::Tcp(stream));
        };
        let config = settings.client_config().map_err(tls_error)?;
        let name = crate::tls::server_name(address).map_err(tls_error)?;
        let local = stream.local_addr().map_err(io)?;
        stream.set_nonblocking(true).map_err(io)?;
        let (socket, far) = Socket::pair(local).map_err(io)?;
        let (told, told_rx) = std::sync::mpsc::channel::<Result<(), String>>();
        let spawned = std::thread::Builder::new()
            .name("kura-tls-relay".to_string())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = told.send(Err(e.to_string()));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let handshake = async {
                        let stream = tokio::net::TcpStream::from_std(stream)?;
                        tokio_rustls::TlsConnector::from(Arc::clone(&config))
                            .connect(name, stream)
                            .await
                    };
                    match tokio::time::timeout(limit * 5, handshake).await {
                        Ok(Ok(tls)) => {
                            let _ = told.send(Ok(()));
                            relay(tls, far).await;
                        }
                        Ok(Err(e)) => {
                            let _ = told.send(Err(e.to_string()));
                        }
                        Err(_) => {
                            let _ = told.send(Err("no handshake".to_string()));
                        }
                    }
                });
            });
        spawned.map_err(io)?;
        match told_rx.recv() {
            Ok(Ok(())) => Ok(socket),
            Ok(Err(why)) => Err(tls_error(why)),
            Err(_) => Err(tls_error("the relay stopped".to_string())),
        }
    }
}

/// Copies both ways between a TLS stream and its relay's socket until either ends.
pub async fn relay<S: AsyncRead + AsyncWrite + Unpin>(mut tls: S, far: UnixStream) {
    match tokio::net::UnixStream::from_std(far) {
        Ok(mut far) => {
            let _ = tokio::io::copy_bidirectional(&mut tls, &mut far).await;
        }
        Err(e) => tracing::warn!("relaying TLS for replication: {e}"),
    }
}

impl Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.read(buf),
            Socket::Relayed { pair, .. } => pair.read(buf),
        }
    }
}

impl Write for Socket {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.write(buf),
            Socket::Relayed { pair, .. } => pair.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
