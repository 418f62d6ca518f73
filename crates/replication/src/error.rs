//! What ends a replication connection, or keeps one from starting: typed, so that a
//! caller can tell a primary that handed over (and names whom to follow) from a cut
//! link or a refusal, and `stats replication`'s `primary_last_error` says which.

use std::io;

use kura_protocol::replication::WireError;

#[derive(Debug, thiserror::Error)]
pub enum ReplicationError {
    /// The node at `address` could not be reached.
    #[error("{address}: {source}")]
    Connect { address: String, source: io::Error },
    /// TLS toward `address` could not be set up.
    #[error("TLS with {address}: {why}")]
    Tls { address: String, why: String },
    /// The connection failed while in use.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The peer closed the connection.
    #[error("the peer closed the connection")]
    Closed,
    /// The peer refused a login.
    #[error("logging in: {0}")]
    LoginRefused(String),
    /// The peer answered with a text reply instead of a stream (a refusal, or a
    /// server that is not Kura).
    #[error("{0}")]
    Refused(String),
    /// Bytes that are not a frame, or a frame out of place.
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("the primary sent {0} out of place")]
    Unexpected(&'static str),
    /// The primary ended the stream (its goodbye).
    #[error("the primary ended: {0}")]
    Ended(String),
    /// The primary handed its role to this node (`host:port`) in a `failover to`.
    #[error("the primary handed over to {0}")]
    HandedOver(String),
    /// The primary's stream does not start where this log ends.
    #[error("the primary goes on from LSN {from}, this log ends at {end}")]
    Gap { from: u64, end: u64 },
    /// This node's store or tables failed to take what came.
    #[error(transparent)]
    Engine(#[from] kura_engine::Error),
    #[error(transparent)]
    Tables(#[from] kura_tables::Error),
    /// A planned failover or a promotion that did not happen, and why.
    #[error("{0}")]
    Failover(String),
    /// etcd, in cluster mode.
    #[error(transparent)]
    Cluster(#[from] kura_cluster::ClusterError),
}
