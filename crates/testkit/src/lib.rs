//! Dev-only helpers for Kura's tests: spawn a real `kura` on port 0 with a temporary
//! data directory, spawn the real memcached as the reference, a small blocking
//! client, and wire transcripts run against both and compared byte for byte.
//!
//! Not for production code paths: it panics freely in tests' favour and spawns
//! processes. std only (plus tempfile, libc, and rustls, which the server builds
//! anyway, for the TLS tests' client).
//!
//! kura-bench, a harness too, starts Kura with what this crate knows of its startup:
//! [`wait_listening`] (the `kura listening on` announcement) and [`drain`]/[`Log`]
//! (its output), which return errors rather than panic, and [`Durability`]. Whatever
//! kura-bench uses stays panic-free.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod auth;
pub mod binary;
mod client;
mod escape;
pub mod etcd;
mod kura;
pub mod mariadb;
mod memcached;
mod netns;
mod output;
mod peer;
pub mod python;
pub mod runner;
pub mod tls;
pub mod transcript;

pub use client::{Client, Reply, ReplyEnd, REPLY_TIMEOUT};
pub use escape::{escape, unescape};
pub use kura::{
    assert_not_tmpfs, crash_seed, kill_under_load, kura_bin, wait_listening, Durability,
    KuraOptions, KuraServer, Listening,
};
pub use memcached::{Login, MemcachedServer, MEMCACHED_BIN};
pub use netns::NetNamespace;
pub use output::{drain, Log};
pub use peer::free_port;
pub use transcript::Transcript;
