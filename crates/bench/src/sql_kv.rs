//! Key-value access to a SQL backend, for the store/fetch and multi-get workloads:
//! one InnoDB table `(k VARBINARY(250) PRIMARY KEY, v MEDIUMBLOB)` per workload.
//!
//! A store is `REPLACE INTO` (memcached's `set`: insert or overwrite), autocommitted,
//! so with InnoDB's defaults it is flushed to disk before the reply, as seed 002's
//! InnoDB plugin stores were. A fetch is `SELECT v ... WHERE k=`; a multi-get is
//! `SELECT k, v ... WHERE k IN (...)`, the SQL side of seed 003.

use std::net::SocketAddr;

use anyhow::{bail, Result};

use crate::backend::{Backend, Protocol};
use crate::client::Client;
use crate::keys::{key_name, value_bytes};
use crate::load;
use crate::mysql::{quote, Connection};
use crate::progress::Progress;
use crate::proto::{Expect, Reply, Wire};

const DATABASE: &str = "kura_bench_kv";

/// One connection using one table.
pub struct SqlKv {
    conn: Connection,
    table: String,
}

impl SqlKv {
    /// Connects to a table that [`create`] made.
    pub fn connect(addr: SocketAddr, table: &str) -> Result<SqlKv> {
        let mut conn = Connection::connect(addr, "root")?;
        conn.query(&format!("USE {DATABASE}"))?;
        Ok(SqlKv {
            conn,
            table: table.to_string(),
        })
    }

    /// Creates (or empties) the table.
    pub fn create(addr: SocketAddr, table: &str) -> Result<()> {
        let mut conn = Connection::connect(addr, "root")?;
        conn.query(&format!("CREATE DATABASE IF NOT EXISTS {DATABASE}"))?;
        conn.query(&format!("USE {DATABASE}"))?;
        conn.query(&format!("DROP TABLE IF EXISTS {table}"))?;
        conn.query(&format!(
            "CREATE TABLE {table} (k VARBINARY(250) PRIMARY KEY, v MEDIUMBLOB NOT NULL) ENGINE=InnoDB"
        ))?;
        Ok(())
    }

    /// Inserts or overwrites one key.
    pub fn store(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.conn.query(&format!(
            "REPLACE INTO {} (k, v) VALUES ({}, {})",
            self.table,
            quote(key),
            quote(value)
        ))?;
        Ok(())
    }

    /// Whether the key has a value.
    pub fn fetch(&mut self, key: &[u8]) -> Result<bool> {
        let rows = self.conn.rows(&format!(
            "SELECT v FROM {} WHERE k={}",
            self.table,
            quote(key)
        ))?;
        Ok(rows.len() == 1)
    }

    /// How many of the keys have values, in one `IN (...)` query.
    pub fn multi_fetch(&mut self, keys: &[Vec<u8>]) -> Result<usize> {
        let list: Vec<String> = keys.iter().map(|k| quote(k)).collect();
        let rows = self.conn.rows(&format!(
            "SELECT k, v FROM {} WHERE k IN ({})",
            self.table,
            list.join(",")
        ))?;
        Ok(rows.len())
    }
}

/// Creates the table and inserts keys `0..keys` under `prefix`, in batches,
/// counting keys inserted on `progress`.
pub fn preload(
    addr: SocketAddr,
    table: &str,
    prefix: &str,
    keys: u64,
    value_len: usize,
    progress: &Progress,
) -> Result<()> {
    SqlKv::create(addr, table)?;
    load::in_shares(0..keys, 4, |w, range| {
        let mut kv = SqlKv::connect(addr, table)?;
        let value = quote(&value_bytes(value_len, w));
        let mut key = Vec::new();
        let ids: Vec<u64> = range.collect();
        for batch in ids.chunks(500) {
            let rows: Vec<String> = batch
                .iter()
                .map(|&id| {
                    key_name(&mut key, prefix, id);
                    format!("({}, {value})", quote(&key))
                })
                .collect();
            kv.conn.query(&format!(
                "INSERT INTO {table} (k, v) VALUES {}",
                rows.join(",")
            ))?;
            progress.add(batch.len() as u64);
        }
        Ok(())
    })
}

/// A key-value connection to any backend the single-client workloads support.
pub enum KvClient {
    /// memcached or Redis.
    Kv(Client),
    Sql(SqlKv),
}

impl KvClient {
    /// Connects to `backend`; SQL backends use `table`.
    pub fn connect(backend: &Backend, table: &str) -> Result<KvClient> {
        match backend.protocol {
            Protocol::Memcached | Protocol::MemcachedTables => Ok(KvClient::Kv(Client::connect(
                backend.addr,
                Wire::Memcached,
            )?)),
            Protocol::MemcachedBinary => Ok(KvClient::Kv(Client::connect(
                backend.addr,
                Wire::MemcachedBinary,
            )?)),
            Protocol::Redis => Ok(KvClient::Kv(Client::connect(backend.addr, Wire::Redis)?)),
            Protocol::Mysql => Ok(KvClient::Sql(SqlKv::connect(backend.addr, table)?)),
            Protocol::MysqlCacheAside { .. } => {
                bail!("{} is supported by the game workload only", backend.name)
            }
            Protocol::MemcachedTls => {
                bail!(
                    "{}: TLS is measured by the throughput workload only",
                    backend.name
                )
            }
        }
    }

    /// `set` or `REPLACE INTO`; whether it was stored.
    pub fn store(&mut self, key: &[u8], value: &[u8]) -> Result<bool> {
        match self {
            KvClient::Kv(c) => {
                c.push_set(key, value);
                Ok(c.call(Expect::Status)? == Reply::Ok)
            }
            KvClient::Sql(kv) => kv.store(key, value).map(|()| true),
        }
    }

    /// `get` or `SELECT`; whether the key had a value.
    pub fn fetch(&mut self, key: &[u8]) -> Result<bool> {
        match self {
            KvClient::Kv(c) => {
                c.push_get(key);
                Ok(c.call(Expect::Values)? == Reply::Values { hits: 1 })
            }
            KvClient::Sql(kv) => kv.fetch(key),
        }
    }

    /// One `get k1 ... kn` or `SELECT ... IN (...)`; how many keys had values.
    pub fn multi_fetch(&mut self, keys: &[Vec<u8>]) -> Result<usize> {
        match self {
            KvClient::Kv(c) => {
                c.push_multi_get(keys);
                match c.call(Expect::Values)? {
                    Reply::Values { hits } => Ok(hits as usize),
                    _ => Ok(0),
                }
            }
            KvClient::Sql(kv) => kv.multi_fetch(keys),
        }
    }
}
