//! Any node serves any SQL client: in cluster mode a node that is not its shard's
//! primary passes each SQL connection on to the primary's SQL port whole, as a TCP
//! proxy would (HAProxy in front of MySQL), unless it answers reads itself
//! (`--replica-reads local`), when it serves the connection as any replica does.
//!
//! The connection is passed on from its first byte: the client logs in to the
//! primary (its users, its TLS), and every statement, transaction and prepared
//! statement is the primary's. A session cannot move between servers, so when the
//! primary this node follows changes (a failover, a switchover, this node elected)
//! the connections passed on to the old one are closed: the client sees the
//! connection lost (2013) and connects again, as to any MySQL server that fails over.
//! A transaction open then is the old primary's to keep or roll back; its COMMIT's
//! reply, if lost, is as any lost reply: the change may or may not have been made.
//!
//! Where the primary's SQL port is: the address each node registered with its
//! membership in etcd (`kura_cluster::Member::sql_of`), kept by the cluster task.
//! A connection with nowhere to go gets MySQL's error packet in place of the
//! greeting (1105, the reason, retryable), as a full server answers 1040.
//!
//! What it is not for: the memcached port's forwarding (`forward.rs`), which goes a
//! request at a time over pooled connections.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use kura_mysql as my;

use crate::config::ReplicaReads;
use crate::server::Shared;

/// How long a connection to the primary's SQL port may take to open.
const CONNECT_WITHIN: Duration = Duration::from_secs(2);
/// How often a passed-on connection checks that its primary is still the shard's.
const CHECK_EVERY: Duration = Duration::from_millis(200);
/// How long a write to either side may block before the connection is given up.
const WRITE_WITHIN: Duration = Duration::from_secs(60);

/// Where an SQL connection accepted by this node is served.
#[derive(Debug, PartialEq, Eq)]
enum SqlRoute {
    /// Here: outside cluster mode, on the primary, or with `--replica-reads local`.
    Here,
    /// At the primary `primary` (its advertised address), on its SQL port `sql`.
    Primary { primary: String, sql: String },
    /// Nowhere now, for this reason.
    Refused(String),
}

/// Where an SQL connection accepted now goes.
fn sql_route(shared: &Shared) -> SqlRoute {
    if !super::enabled(&shared.config)
        || !shared.store.is_read_only()
        || shared.config.replica_reads == ReplicaReads::Local
    {
        return SqlRoute::Here;
    }
    let Some(primary) = shared.replication.primary() else {
        return SqlRoute::Refused(super::NO_PRIMARY.to_string());
    };
    match shared.replication.shard.primary_sql(&primary) {
        Some(Some(sql)) => SqlRoute::Primary { primary, sql },
        Some(None) => SqlRoute::Refused(format!(
            "the shard's primary {primary} has no SQL port (--sql-port off)"
        )),
        None => SqlRoute::Refused(format!(
            "the SQL port of the shard's primary {primary} is not known yet, try again"
        )),
    }
}

/// Serves `stream` elsewhere if it goes elsewhere, and returns it if it is served
/// here.
pub fn pass_on(shared: &Shared, stream: TcpStream) -> Option<TcpStream> {
    match sql_route(shared) {
        SqlRoute::Here => Some(stream),
        SqlRoute::Refused(why) => {
            let _ = refuse(stream, &why);
            None
        }
        SqlRoute::Primary { primary, sql } => {
            match connect(&sql) {
                Ok(upstream) => {
                    shared.replication.shard.count_sql_passed_on();
                    let _ = relay(shared, &primary, stream, upstream);
                }
                Err(e) => {
                    let _ = refuse(
                        stream,
                        &format!(
                            "forwarding to the primary {primary} (SQL port {sql}) failed: {e}; try again"
                        ),
                    );
                }
            }
            None
        }
    }
}

/// MySQL's error packet in place of the greeting: 1105 with `why`.
fn refuse(mut stream: TcpStream, why: &str) -> io::Result<()> {
    let mut out = Vec::new();
    let mut seq = 0;
    my::write_packet(&mut out, &mut seq, &my::err(1105, b"HY000", why));
    stream.write_all(&out)
}

fn connect(sql: &str) -> io::Result<TcpStream> {
    let mut last = io::Error::other(format!("{sql} resolves to no address"));
    for addr in sql.to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, CONNECT_WITHIN) {
            Ok(stream) => return Ok(stream),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Whether connections passed on to `primary` may go on: this node still follows it.
fn still_routed(shared: &Shared, primary: &str) -> bool {
    !shared.stopping.load(std::sync::atomic::Ordering::Acquire)
        && shared.store.is_read_only()
        && shared.replication.primary().as_deref() == Some(primary)
}

/// Copies bytes both ways until either side closes, or `primary` is no longer the one
/// this node follows; then closes both.
fn relay(
    shared: &Shared,
    primary: &str,
    mut client: TcpStream,
    mut upstream: TcpStream,
) -> io::Result<()> {
    for stream in [&client, &upstream] {
        stream.set_nodelay(true)?;
        stream.set_write_timeout(Some(WRITE_WITHIN))?;
    }
    let mut buf = vec![0u8; 64 << 10];
    let mut checked = Instant::now();
    let result = loop {
        if checked.elapsed() >= CHECK_EVERY {
            if !still_routed(shared, primary) {
                break Ok(());
            }
            checked = Instant::now();
        }
        let fds = match readable(&client, &upstream, CHECK_EVERY) {
            Ok(fds) => fds,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => break Err(e),
        };
        let mut ended = false;
        for (i, ready) in fds.into_iter().enumerate() {
            if !ready {
                continue;
            }
            let (from, to) = if i == 0 {
                (&mut client, &mut upstream)
            } else {
                (&mut upstream, &mut client)
            };
            match from.read(&mut buf) {
                Ok(0) => ended = true,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        ended = true;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => ended = true,
            }
            if ended {
                break;
            }
        }
        if ended {
            break Ok(());
        }
    };
    let _ = client.shutdown(std::net::Shutdown::Both);
    let _ = upstream.shutdown(std::net::Shutdown::Both);
    result
}

/// Waits up to `wait` for either stream to have something to read (or to be closed);
/// which have.
#[allow(unsafe_code)]
fn readable(a: &TcpStream, b: &TcpStream, wait: Duration) -> io::Result<[bool; 2]> {
    let mut fds = [a, b].map(|s| libc::pollfd {
        fd: s.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    });
    let wait = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: `fds` is an array of two initialised pollfds, of the length passed, that
    // outlives the call; the descriptors are the streams' own, open while borrowed.
    let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, wait) };
    if ready < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fds.map(|fd| fd.revents != 0))
}
