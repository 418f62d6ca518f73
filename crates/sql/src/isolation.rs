//! Transaction isolation: which of a transaction's reads its COMMIT checks.
//!
//! Kura takes no locks and keeps no snapshots. A transaction reads the latest
//! committed rows (and its own changes), and its COMMIT refuses (1213) if something it
//! depended on changed since it read it. The level says what it depended on:
//!
//! - `READ COMMITTED` (the default; `READ UNCOMMITTED` is served as it, as PostgreSQL
//!   does, since Kura never shows another session's uncommitted rows): what InnoDB
//!   locks. The rows and ranges a writing statement (UPDATE, DELETE, INSERT ...
//!   SELECT) or a locking read (`FOR UPDATE`, `FOR SHARE`) read, and every row the
//!   transaction writes, as of the first time it read it, even by a plain SELECT
//!   (so a read-modify-write never loses an update, as in MariaDB with
//!   `innodb_snapshot_isolation`). A plain SELECT's other rows are not checked, as
//!   InnoDB's consistent reads take no locks.
//! - `REPEATABLE READ` and `SERIALIZABLE`: every read, plain SELECTs too (as InnoDB's
//!   SERIALIZABLE makes every SELECT a locking read). Without a snapshot this is
//!   stronger than MySQL's REPEATABLE READ for a transaction that writes; one that
//!   writes nothing commits without a check at every level.

use crate::error::SqlError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    ReadUncommitted,
    #[default]
    ReadCommitted,
    RepeatableRead,
    Serializable,
}

impl Isolation {
    /// The level a value of `transaction_isolation` names: MySQL's spellings
    /// (`READ-COMMITTED`, any case) or its number (0 to 3).
    pub fn parse(text: &str) -> Option<Isolation> {
        let text = text.trim().trim_matches(|c| c == '\'' || c == '"');
        let upper = text.to_ascii_uppercase().replace([' ', '_'], "-");
        Some(match upper.as_str() {
            "READ-UNCOMMITTED" | "0" => Isolation::ReadUncommitted,
            "READ-COMMITTED" | "1" => Isolation::ReadCommitted,
            "REPEATABLE-READ" | "2" => Isolation::RepeatableRead,
            "SERIALIZABLE" | "3" => Isolation::Serializable,
            _ => return None,
        })
    }

    /// The level sqlparser read from `SET TRANSACTION ISOLATION LEVEL ...`.
    pub fn of(level: &sqlparser::ast::TransactionIsolationLevel) -> Result<Isolation, SqlError> {
        use sqlparser::ast::TransactionIsolationLevel as L;
        Ok(match level {
            L::ReadUncommitted => Isolation::ReadUncommitted,
            L::ReadCommitted => Isolation::ReadCommitted,
            L::RepeatableRead => Isolation::RepeatableRead,
            L::Serializable => Isolation::Serializable,
            other => return Err(SqlError::syntax(format!("isolation level {other}"))),
        })
    }

    /// Its name as `@@transaction_isolation` shows it.
    pub fn name(self) -> &'static str {
        match self {
            Isolation::ReadUncommitted => "READ-UNCOMMITTED",
            Isolation::ReadCommitted => "READ-COMMITTED",
            Isolation::RepeatableRead => "REPEATABLE-READ",
            Isolation::Serializable => "SERIALIZABLE",
        }
    }

    /// Whether COMMIT checks what plain SELECTs read.
    pub fn checks_plain_reads(self) -> bool {
        matches!(self, Isolation::RepeatableRead | Isolation::Serializable)
    }
}

/// What a running statement notes of the rows it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Nothing: a read-only statement outside a transaction.
    Nothing,
    /// Each row's CAS as first read, for the check of a write to it later in the
    /// transaction: a plain SELECT under READ COMMITTED.
    Cas,
    /// The CAS and the read set (rows, absent keys, ranges, scanned tables), all
    /// checked at COMMIT.
    All,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mysql_spellings() {
        assert_eq!(
            Isolation::parse("read-committed"),
            Some(Isolation::ReadCommitted)
        );
        assert_eq!(
            Isolation::parse("'SERIALIZABLE'"),
            Some(Isolation::Serializable)
        );
        assert_eq!(
            Isolation::parse("REPEATABLE READ"),
            Some(Isolation::RepeatableRead)
        );
        assert_eq!(Isolation::parse("0"), Some(Isolation::ReadUncommitted));
        assert_eq!(Isolation::parse("snapshot"), None);
        for level in [
            Isolation::ReadUncommitted,
            Isolation::ReadCommitted,
            Isolation::RepeatableRead,
            Isolation::Serializable,
        ] {
            assert_eq!(Isolation::parse(level.name()), Some(level));
        }
    }
}
