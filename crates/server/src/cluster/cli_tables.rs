//! `kura cluster move-table`: moves a table to another shard while it is used, and
//! returns once the move is done (`super::moves`: the source describes the table, the
//! target copies it, the hand-off flips it, the source drops its copy).

use std::time::{Duration, Instant};

use kura_cluster::{MoveState, Observer};

/// `kura cluster move-table --etcd URLS --cluster NAME --table T --to SHARD`.
#[derive(Debug, clap::Parser)]
#[command(
    name = "kura cluster move-table",
    about = "Moves a table to another shard of a Kura cluster while it is used, losing no write"
)]
pub(super) struct MoveTableFlags {
    #[command(flatten)]
    pub(super) at: super::cli::Where,
    /// The table: its name in the default database, or DATABASE.TABLE.
    #[arg(long = "table", value_name = "NAME")]
    table: String,
    /// The shard to move it to.
    #[arg(long = "to", value_name = "SHARD", required_unless_present = "abort")]
    to: Option<String>,
    /// Abandons the table's move in progress, if it has not flipped: the table stays
    /// where it is, and nothing is lost.
    #[arg(long = "abort", conflicts_with = "to")]
    abort: bool,
}

pub(super) fn move_table(flags: &MoveTableFlags) -> anyhow::Result<String> {
    let runtime = super::cli::runtime()?;
    let table = &flags.table;
    runtime.block_on(async {
        let mut observer = Observer::connect(&flags.at.etcd, &flags.at.cluster).await?;
        if flags.abort {
            let Some(m) = observer.table_move(table).await? else {
                anyhow::bail!("table {table} is not moving");
            };
            if m.state != MoveState::Copying || !observer.abort_table_move(table, m.id).await? {
                anyhow::bail!(
                    "the move of table {table} has flipped: it cannot be abandoned; let it finish, then move the table back"
                );
            }
            return Ok(format!(
                "abandoned the move of table {table}: it stays on shard {}\n",
                m.from
            ));
        }
        let to = flags.to.clone().unwrap_or_default();
        let m = match observer.table_move(table).await? {
            // A move begun by a `kura cluster move-table` that stopped: followed.
            Some(m) if m.to == to => m,
            Some(m) => anyhow::bail!(
                "table {table} is moving to shard {}: wait for it, or abandon it with --abort",
                m.to
            ),
            None => {
                let placed = observer.tables().await?;
                let Some((_, from)) = placed.iter().find(|(t, _)| t == table) else {
                    anyhow::bail!("no shard holds a table {table} (kura cluster status)");
                };
                if *from == to {
                    return Ok(format!("table {table} is on shard {to} already\n"));
                }
                if observer.primary(&to).await?.is_none() {
                    anyhow::bail!("shard {to} has no primary (kura cluster status)");
                }
                if !observer.begin_table_move(table, from, &to).await? {
                    anyhow::bail!("table {table} moved meanwhile; look again");
                }
                eprintln!("moving table {table}: {from} → {to}");
                observer
                    .table_move(table)
                    .await?
                    .ok_or_else(|| anyhow::anyhow!("the move went as it was made"))?
            }
        };
        follow(&mut observer, m).await
    })
}

/// Follows a table's move until its source has dropped its copy, then ends it.
async fn follow(observer: &mut Observer, mut m: kura_cluster::TableMove) -> anyhow::Result<String> {
    let started = Instant::now();
    let table = m.table.clone();
    let mut shown = String::new();
    loop {
        if m.state == MoveState::Purged && observer.end_table_move(&table, m.id).await? {
            return Ok(format!(
                "moved table {table} to shard {} in {:.1} s\n",
                m.to,
                started.elapsed().as_secs_f64()
            ));
        }
        let line = progress_line(observer, &m).await?;
        if line != shown {
            eprintln!("{line}");
            shown = line;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        m = match observer.table_move(&table).await? {
            Some(now) if now.id == m.id => now,
            _ => {
                let placed = observer.tables().await?;
                return match placed.iter().find(|(t, _)| *t == table) {
                    Some((_, s)) if *s == m.to => Ok(format!("moved table {table} to shard {s}\n")),
                    _ => anyhow::bail!("the move of table {table} was abandoned"),
                };
            }
        };
    }
}

/// A table move's state in a line, with how much of the source's log its target has
/// applied.
pub(super) async fn progress_line(
    observer: &mut Observer,
    m: &kura_cluster::TableMove,
) -> anyhow::Result<String> {
    let state = match m.state {
        MoveState::Copying if m.described.is_none() => "being described".to_string(),
        MoveState::Copying => match observer.table_move_progress(&m.table).await? {
            Some(p) if p.source_lsn > 0 => format!(
                "copying {:>3}%",
                p.applied_lsn.min(p.source_lsn) * 100 / p.source_lsn
            ),
            _ => "copying".to_string(),
        },
        MoveState::Flipped => "flipped, purging".to_string(),
        MoveState::Purged => "done".to_string(),
    };
    Ok(format!("table {}: {} → {}: {state}", m.table, m.from, m.to))
}
