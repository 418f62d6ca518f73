//! Which shard holds each table (issue 42): a table lives whole on one shard, so a row
//! and its index entries stay one atomic write there.
//!
//! Keys, under `/kura/<cluster>/`:
//! - `tables/<name>`: the shard that holds the table `<name>` (its catalog name:
//!   `t` in the default database, `d.t` in database `d`).
//!
//! A table is placed by the primary that creates it, before it creates it, in one
//! transaction made only while the name is unplaced (or placed on the same shard), and
//! unplaced by the primary that drops it, only while it names that shard. A primary
//! places its tables that have no record (made before the cluster was, or while etcd
//! was away) as it finds them.

use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp, TxnOpResponse};

use crate::{ClusterError, Observer};

fn tables_prefix(cluster: &str) -> String {
    format!("/kura/{cluster}/tables/")
}

fn table_key(cluster: &str, table: &str) -> String {
    format!("/kura/{cluster}/tables/{table}")
}

impl Observer {
    /// Every placed table and the shard holding it, by name.
    pub async fn tables(&mut self) -> Result<Vec<(String, String)>, ClusterError> {
        let prefix = tables_prefix(&self.cluster);
        let got = self
            .client
            .get(prefix.clone(), Some(GetOptions::new().with_prefix()))
            .await?;
        let mut out = Vec::with_capacity(got.kvs().len());
        for kv in got.kvs() {
            let key = kv.key_str().map_err(ClusterError::Etcd)?;
            let shard = kv.value_str().map_err(ClusterError::Etcd)?;
            if let Some(table) = key.strip_prefix(&prefix) {
                out.push((table.to_string(), shard.to_string()));
            }
        }
        Ok(out)
    }

    /// Places `table` on `shard` unless it is placed already. Returns the shard that
    /// holds it after: `shard`, or the one that did before.
    pub async fn place_table(&mut self, table: &str, shard: &str) -> Result<String, ClusterError> {
        valid(table)?;
        let key = table_key(&self.cluster, table);
        let txn = Txn::new()
            .when([Compare::version(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), shard, None)])
            .or_else([TxnOp::get(key, None)]);
        let done = self.client.txn(txn).await?;
        if done.succeeded() {
            return Ok(shard.to_string());
        }
        for op in done.op_responses() {
            if let TxnOpResponse::Get(got) = op {
                if let Some(kv) = got.kvs().first() {
                    return Ok(kv.value_str().map_err(ClusterError::Etcd)?.to_string());
                }
            }
        }
        // Unplaced between the compare and the read: place it again.
        Box::pin(self.place_table(table, shard)).await
    }

    /// Unplaces `table` if `shard` holds it; whether it did.
    pub async fn unplace_table(&mut self, table: &str, shard: &str) -> Result<bool, ClusterError> {
        let key = table_key(&self.cluster, table);
        let txn = Txn::new()
            .when([Compare::value(key.clone(), CompareOp::Equal, shard)])
            .and_then([TxnOp::delete(key, None)]);
        Ok(self.client.txn(txn).await?.succeeded())
    }
}

/// A table name etcd's key can hold as it is.
fn valid(table: &str) -> Result<(), ClusterError> {
    if table.is_empty() || table.contains('/') {
        return Err(ClusterError::Invalid(format!(
            "a table name to place must be non-empty without '/': {table:?}"
        )));
    }
    Ok(())
}
