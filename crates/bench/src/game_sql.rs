//! The game workload on a SQL backend (MariaDB), as seed 000 ran it on MySQL.
//!
//! Two InnoDB tables: `players` (id primary key; name, email, score, level,
//! last_seen, padding) and `player_emails` (email primary key → id). The
//! transaction is the same three steps as on memcached-protocol backends, each one
//! autocommitted statement: `SELECT` the player by id, `UPDATE` its score, level and
//! last-seen, `SELECT` the id by the row's email. With InnoDB's defaults every
//! `UPDATE` is a commit flushed to disk, the same promise as Kura's fsync mode.
//!
//! With `mariadb+memcached` (seed 000 part 1's setup) the client reads the player
//! and the email's id from memcached first, fills memcached from MariaDB on a miss,
//! and after the `UPDATE` writes the new row to memcached too (write-through, as
//! the seed's client did). Both caches start full: the in-memory case.
//!
//! Each connection runs on its own thread with a blocking client: simpler than
//! multiplexing the MySQL protocol, and at the request rates MariaDB reaches here
//! the client's context switches are a small part of the cost (the client CPU
//! column shows how small).

use std::net::SocketAddr;
use std::ops::Range;
use std::time::Instant;

use anyhow::{Context, Result};

use crate::client::Client;
use crate::driver::{self, Measured, Tally};
use crate::game::{decode_row, email, encode_row, player_key, unix_now, GameResult, Plan};
use crate::keys::Rng;
use crate::load;
use crate::mysql::{quote, Connection};
use crate::progress::Progress;
use crate::proto::{Expect, Wire};
use crate::stats;
use crate::window::sleep_until;

/// The transaction's steps: get the player, update it, get the id by email.
const STEPS: usize = 3;

const DATABASE: &str = "kura_bench";

fn connect(addr: SocketAddr) -> Result<Connection> {
    let mut conn = Connection::connect(addr, "root")?;
    conn.query(&format!("USE {DATABASE}"))?;
    Ok(conn)
}

/// The padding that makes a row `row_size` bytes in the memcached encoding, so both
/// kinds of backend store the same bytes per player.
fn padding(id: u64, row_size: usize) -> usize {
    let bare = encode_row(id, 0, 0, 0, 0).len();
    row_size.saturating_sub(bare)
}

/// Creates the schema afresh: `players` and `player_emails`, both empty.
pub fn create_schema(addr: SocketAddr) -> Result<()> {
    let mut admin = Connection::connect(addr, "root")?;
    admin.query(&format!("DROP DATABASE IF EXISTS {DATABASE}"))?;
    admin.query(&format!("CREATE DATABASE {DATABASE}"))?;
    admin.query(&format!("USE {DATABASE}"))?;
    admin.query(
        "CREATE TABLE players (id INT UNSIGNED PRIMARY KEY, name VARCHAR(64) NOT NULL, \
         email VARCHAR(128) NOT NULL, score BIGINT UNSIGNED NOT NULL, \
         level INT UNSIGNED NOT NULL, last_seen BIGINT UNSIGNED NOT NULL, \
         padding VARCHAR(4096) NOT NULL) ENGINE=InnoDB",
    )?;
    admin.query(
        "CREATE TABLE player_emails (email VARCHAR(128) PRIMARY KEY, \
         id INT UNSIGNED NOT NULL) ENGINE=InnoDB",
    )?;
    Ok(())
}

/// Inserts players `ids` and their emails in batches of 500 over 4 connections,
/// counting players on `progress`.
pub fn insert_players(
    addr: SocketAddr,
    ids: Range<u64>,
    row_size: usize,
    progress: &Progress,
) -> Result<()> {
    load::in_shares(ids, 4, |_, range| {
        let mut conn = connect(addr)?;
        let ids: Vec<u64> = range.collect();
        for batch in ids.chunks(500) {
            let now = unix_now();
            let rows: Vec<String> = batch
                .iter()
                .map(|&id| {
                    format!(
                        "({id},'player{id}',{},{},1,{now},REPEAT('.',{}))",
                        quote(email(id).as_bytes()),
                        id % 1000,
                        padding(id, row_size)
                    )
                })
                .collect();
            conn.query(&format!("INSERT INTO players VALUES {}", rows.join(",")))?;
            let emails: Vec<String> = batch
                .iter()
                .map(|&id| format!("({},{id})", quote(email(id).as_bytes())))
                .collect();
            conn.query(&format!(
                "INSERT INTO player_emails VALUES {}",
                emails.join(",")
            ))?;
            progress.add(batch.len() as u64);
        }
        Ok(())
    })
}

/// Runs the transaction on `connections` connections, one thread each.
pub fn measure(
    addr: SocketAddr,
    cache: Option<SocketAddr>,
    connections: usize,
    plan: &Plan,
    start: Instant,
    seed: u64,
    server_pids: &[u32],
) -> Result<GameResult> {
    let mut workers = Vec::new();
    for i in 0..connections {
        let conn = connect(addr)?;
        let cache = cache
            .map(|c| Client::connect(c, Wire::Memcached))
            .transpose()?;
        let seed = seed.wrapping_add(i as u64 * 104_729);
        workers.push(move || drive(plan, conn, cache, seed, start));
    }
    let (parts, window, cpu) = driver::measure(&plan.window, server_pids, workers)?;
    let mut tally = Tally::new(STEPS)?;
    for part in &parts {
        tally.add(part)?;
    }
    GameResult::of(Measured { tally, window, cpu })
}

fn text(cell: &Option<Vec<u8>>) -> Result<&str> {
    std::str::from_utf8(cell.as_deref().context("unexpected NULL")?).context("non-UTF-8 cell")
}

/// A player as the transaction sees it.
struct Player {
    email: String,
    score: u64,
    level: u64,
}

/// Step 1: the player by id, from the cache when there is one (filling it on a
/// miss), else from the database.
fn get_player(
    conn: &mut Connection,
    cache: Option<&mut Client>,
    id: u64,
    row_size: usize,
) -> Result<Option<Player>> {
    let key = player_key(id);
    if let Some(cache) = cache {
        if let Some(row) = cache.get_value(&key)? {
            return Ok(decode_row(&row)
                .filter(|r| r.0 == id)
                .map(|(_, email, score, level)| Player {
                    email: String::from_utf8_lossy(email).into_owned(),
                    score,
                    level,
                }));
        }
        let found = select_player(conn, id)?;
        if let Some(p) = &found {
            let row = encode_row(id, p.score, p.level, unix_now(), row_size);
            cache.push_set(&key, &row);
            cache.call(Expect::Status)?;
        }
        return Ok(found);
    }
    select_player(conn, id)
}

fn select_player(conn: &mut Connection, id: u64) -> Result<Option<Player>> {
    let rows = conn.rows(&format!(
        "SELECT id,name,email,score,level,last_seen,padding FROM players WHERE id={id}"
    ))?;
    let Some(row) = rows.first() else {
        return Ok(None);
    };
    Ok(Some(Player {
        email: text(&row[2])?.to_string(),
        score: text(&row[3])?.parse().context("score")?,
        level: text(&row[4])?.parse().context("level")?,
    }))
}

/// Step 3: the id for an email, from the cache when there is one (filling it on a
/// miss), else from the database.
fn id_by_email(
    conn: &mut Connection,
    cache: Option<&mut Client>,
    email: &str,
) -> Result<Option<String>> {
    let key = format!("email:{email}");
    if let Some(cache) = cache {
        if let Some(id) = cache.get_value(key.as_bytes())? {
            return Ok(Some(String::from_utf8_lossy(&id).into_owned()));
        }
        let found = select_id_by_email(conn, email)?;
        if let Some(id) = &found {
            cache.push_set(key.as_bytes(), id.as_bytes());
            cache.call(Expect::Status)?;
        }
        return Ok(found);
    }
    select_id_by_email(conn, email)
}

fn select_id_by_email(conn: &mut Connection, email: &str) -> Result<Option<String>> {
    let found = conn.rows(&format!(
        "SELECT id FROM player_emails WHERE email={}",
        quote(email.as_bytes())
    ))?;
    found
        .first()
        .map(|row| text(&row[0]).map(str::to_string))
        .transpose()
}

fn drive(
    plan: &Plan,
    mut conn: Connection,
    mut cache: Option<Client>,
    seed: u64,
    start: Instant,
) -> Result<Tally> {
    let mut rng = Rng::new(seed);
    let mut r = Tally::new(STEPS)?;
    sleep_until(start);
    while !plan.window.is_over(Instant::now()) {
        let id = plan.chooser.next(&mut rng);
        let began = Instant::now();
        let player = get_player(&mut conn, cache.as_mut(), id, plan.row_size)?;
        let t1 = Instant::now();
        let Some(player) = player else {
            r.failures += u64::from(in_window(plan, t1));
            continue;
        };
        let score = player.score + 1 + rng.below(100);
        let level = player.level.max(score / 1000);
        let now = unix_now();
        conn.query(&format!(
            "UPDATE players SET score={score},level={level},last_seen={now} WHERE id={id}"
        ))?;
        if let Some(cache) = cache.as_mut() {
            // Write-through, as seed 000's client did: the new row replaces the cached one.
            let row = encode_row(id, score, level, now, plan.row_size);
            cache.push_set(&player_key(id), &row);
            cache.call(Expect::Status)?;
        }
        let t2 = Instant::now();
        let found = id_by_email(&mut conn, cache.as_mut(), &player.email)?;
        let t3 = Instant::now();
        if !in_window(plan, t3) {
            continue;
        }
        if in_window(plan, began) {
            stats::record(&mut r.steps[0], t1 - began);
        }
        stats::record(&mut r.steps[1], t2 - t1);
        stats::record(&mut r.steps[2], t3 - t2);
        if found == Some(id.to_string()) {
            plan.window.count();
            r.transactions += 1;
            stats::record(&mut r.transaction, t3 - began);
        } else {
            r.failures += 1;
        }
    }
    Ok(r)
}

fn in_window(plan: &Plan, t: Instant) -> bool {
    plan.window.contains(t)
}
