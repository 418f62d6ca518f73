//! The SQL workload's requests and the checks of their replies: a broken server must
//! not look fast.

use super::*;

/// An error reply's text; any other error (I/O, framing) ends the phase.
pub(super) fn server_error(error: anyhow::Error) -> Result<String> {
    match error.downcast_ref::<ServerError>() {
        Some(refused) => Ok(refused.to_string()),
        None => Err(error),
    }
}

/// Whether a reply was the one asked for.
pub(super) enum Verdict {
    Right,
    Wrong(String),
}

/// Sends one request of `phase` and checks its reply.
pub(super) fn request(
    phase: Phase,
    link: &mut Link,
    shape: Shape,
    rng: &mut crate::keys::Rng,
) -> Result<Verdict> {
    let id = rng.below(shape.rows);
    match (phase, link) {
        (Phase::Pk, Link::Sql(conn)) => {
            let rows = conn.rows(&format!("SELECT * FROM players WHERE id={id}"))?;
            Ok(one_row(&rows, id, shape))
        }
        (Phase::Email, Link::Sql(conn)) => {
            let rows = conn.rows(&format!(
                "SELECT * FROM players WHERE email={}",
                quote(email(id).as_bytes())
            ))?;
            Ok(one_row(&rows, id, shape))
        }
        (Phase::Range, Link::Sql(conn)) => {
            let level = rng.below(shape.levels);
            let rows = conn.rows(&format!(
                "SELECT * FROM players WHERE level BETWEEN {level} AND {} \
                 ORDER BY level LIMIT 10",
                level + 1
            ))?;
            Ok(range_rows(&rows, level, shape))
        }
        (Phase::PkRange, Link::Sql(conn)) => {
            let first = rng.below(shape.rows.saturating_sub(9).max(1));
            let rows = conn.rows(&format!(
                "SELECT * FROM players WHERE id BETWEEN {first} AND {} ORDER BY id",
                first + 9
            ))?;
            let want: Vec<u64> = (first..(first + 10).min(shape.rows)).collect();
            Ok(rows_in_order(&rows, &want, shape))
        }
        (Phase::OrderLimit, Link::Sql(conn)) => {
            let rows = conn.rows(&format!(
                "SELECT * FROM players WHERE id <= {id} ORDER BY id DESC LIMIT 10"
            ))?;
            let want: Vec<u64> = (id.saturating_sub(9)..=id).rev().collect();
            Ok(rows_in_order(&rows, &want, shape))
        }
        (Phase::Update, Link::Sql(conn)) => {
            let outcome = conn.query(&format!("UPDATE players SET score=score+1 WHERE id={id}"))?;
            Ok(match outcome {
                Outcome::Ok { affected_rows: 1 } => Verdict::Right,
                other => Verdict::Wrong(format!("UPDATE of id {id} answered {other:?}")),
            })
        }
        (Phase::Get, Link::Memcached(client)) => {
            let key = format!("@@players.{id}");
            Ok(match client.get_value(key.as_bytes())? {
                Some(value) => got_row(&value, id, shape),
                None => Verdict::Wrong(format!("get {key} missed")),
            })
        }
        (phase, _) => bail!("phase {phase:?} on the wrong kind of connection"),
    }
}

/// A cell as text.
pub(super) fn cell(row: &Row, column: usize) -> Option<&str> {
    row.get(column)?
        .as_deref()
        .and_then(|c| std::str::from_utf8(c).ok())
}

/// Why `row` is not row `id` whole, if it is not.
pub(super) fn check_row(row: &Row, id: u64, shape: Shape) -> Option<String> {
    let (id_text, level) = (id.to_string(), shape.level(id).to_string());
    let (email, name) = (email(id), name(id));
    let fields = [
        (0, id_text.as_str(), "id"),
        (1, email.as_str(), "email"),
        (2, level.as_str(), "level"),
        (3, name.as_str(), "name"),
    ];
    if row.len() != 6 {
        return Some(format!("row {id}: {} columns, not 6", row.len()));
    }
    for (column, want, what) in fields {
        if cell(row, column) != Some(want) {
            return Some(format!(
                "row {id}: {what} {:?}, not {want:?}",
                cell(row, column)
            ));
        }
    }
    if cell(row, 4).and_then(|s| s.parse::<u64>().ok()).is_none() {
        return Some(format!("row {id}: score {:?}", cell(row, 4)));
    }
    let padding = row[5].as_ref().map(Vec::len);
    if padding != Some(shape.padding(id)) {
        return Some(format!(
            "row {id}: padding of {padding:?} bytes, not {}",
            shape.padding(id)
        ));
    }
    None
}

/// A point select's reply: exactly row `id`.
pub(super) fn one_row(rows: &[Row], id: u64, shape: Shape) -> Verdict {
    match rows {
        [row] => match check_row(row, id, shape) {
            None => Verdict::Right,
            Some(why) => Verdict::Wrong(why),
        },
        _ => Verdict::Wrong(format!("{} rows for id {id}, not 1", rows.len())),
    }
}

/// A range's reply: ten whole rows, all of level `level` (it holds at least 20, and
/// `ORDER BY level` puts them before those of `level + 1`).
pub(super) fn range_rows(rows: &[Row], level: u64, shape: Shape) -> Verdict {
    if rows.len() != 10 {
        return Verdict::Wrong(format!("{} rows for level {level}, not 10", rows.len()));
    }
    for row in rows {
        let Some(id) = cell(row, 0).and_then(|s| s.parse::<u64>().ok()) else {
            return Verdict::Wrong(format!("a row with id {:?}", cell(row, 0)));
        };
        if shape.level(id) != level {
            return Verdict::Wrong(format!(
                "row {id} of level {} in the range of level {level}",
                shape.level(id)
            ));
        }
        if let Some(why) = check_row(row, id, shape) {
            return Verdict::Wrong(why);
        }
    }
    Verdict::Right
}

/// A reply of the rows `want`, whole and in that order.
pub(super) fn rows_in_order(rows: &[Row], want: &[u64], shape: Shape) -> Verdict {
    if rows.len() != want.len() {
        return Verdict::Wrong(format!("{} rows, not {}", rows.len(), want.len()));
    }
    for (row, &id) in rows.iter().zip(want) {
        if let Some(why) = check_row(row, id, shape) {
            return Verdict::Wrong(why);
        }
    }
    Verdict::Right
}

/// A memcached `get @@players.<id>`'s value: the row's columns but the id,
/// `email|level|name|score|padding`.
pub(super) fn got_row(value: &[u8], id: u64, shape: Shape) -> Verdict {
    let prefix = format!("{}|{}|{}|", email(id), shape.level(id), name(id));
    let Some(rest) = value.strip_prefix(prefix.as_bytes()) else {
        return Verdict::Wrong(format!(
            "get @@players.{id}: {:?}",
            String::from_utf8_lossy(&value[..value.len().min(80)])
        ));
    };
    let score_and_padding = rest.iter().position(|&b| b == b'|');
    match score_and_padding {
        Some(bar) if rest.len() - bar - 1 == shape.padding(id) => Verdict::Right,
        _ => Verdict::Wrong(format!("get @@players.{id}: score or padding wrong")),
    }
}
