//! The second half of `kura backup verify`: reading the backup's log record by record
//! (`kura_engine::record`), each record's own CRC-32C checked, and checking that the
//! segments follow one another without a gap and that the log ends at the manifest's
//! point. The manifest's checksums say the files are the ones the backup wrote; this
//! says those files are a log a node can open, ending where the backup said.
//!
//! What it is not for: applying the records (opening the store does that).

use std::path::Path;

use kura_engine::record::{self, Decoded, Header, SEGMENT_HEADER_BYTES};

use super::manifest::Manifest;

/// Walks the segments the manifest lists in `dir`; returns every problem found, each
/// naming its file.
pub fn check(dir: &Path, manifest: &Manifest) -> Vec<String> {
    let mut segments: Vec<(u64, &str)> = manifest
        .files
        .iter()
        .filter_map(|e| {
            let hex = e.name.strip_suffix(".log")?;
            Some((u64::from_str_radix(hex, 16).ok()?, e.name.as_str()))
        })
        .collect();
    segments.sort_unstable();
    let mut problems = Vec::new();
    let mut end: Option<u64> = None;
    for (i, &(sequence, name)) in segments.iter().enumerate() {
        let path = dir.join(name);
        let last = i + 1 == segments.len();
        match walk(&path, sequence, last) {
            Ok((start_lsn, records_bytes)) => {
                if let Some(previous_end) = end.filter(|&e| e != start_lsn) {
                    problems.push(format!(
                        "{}: starts at LSN {start_lsn}, the segment before it ends at {previous_end}",
                        path.display()
                    ));
                }
                end = Some(start_lsn + records_bytes);
            }
            Err(e) => {
                problems.push(format!("{}: {e}", path.display()));
                return problems;
            }
        }
    }
    match end {
        Some(end) if end != manifest.point_lsn => problems.push(format!(
            "{}: the log ends at LSN {end}, the manifest's point is {}",
            dir.display(),
            manifest.point_lsn
        )),
        None if manifest.point_lsn != 0 => problems.push(format!(
            "{}: no segment, the manifest's point is {}",
            dir.display(),
            manifest.point_lsn
        )),
        _ => {}
    }
    problems
}

/// Reads one segment: its header must name `sequence` and its start, and its records
/// must all be whole with their CRCs right, up to the file's end (or, in the `last`
/// segment, up to the zeros of the space reserved past them). Returns where it starts
/// and how many bytes of records it holds.
fn walk(path: &Path, sequence: u64, last: bool) -> Result<(u64, u64), String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    let start_lsn = match record::parse_segment_header(&bytes) {
        Header::Valid {
            sequence: s,
            start_lsn: Some(start_lsn),
        } if s == sequence => start_lsn,
        Header::Valid { sequence: s, .. } if s != sequence => {
            return Err(format!("the header says segment {s}"));
        }
        Header::Valid { .. } => return Err("the header records no start LSN".to_string()),
        Header::Truncated => return Err("shorter than a segment header".to_string()),
        Header::Invalid(why) => return Err(format!("segment header: {why}")),
    };
    let mut pos = SEGMENT_HEADER_BYTES;
    while pos < bytes.len() {
        match record::decode(&bytes[pos..]) {
            Decoded::Record(_, len) => pos += len,
            _ if last && bytes[pos..].iter().all(|&b| b == 0) => break,
            Decoded::Truncated => {
                return Err(format!("the record at offset {pos} is cut short"));
            }
            Decoded::Corrupt => {
                return Err(format!(
                    "the record at offset {pos} is damaged (its CRC-32C or its frame)"
                ));
            }
        }
    }
    Ok((start_lsn, (pos - SEGMENT_HEADER_BYTES) as u64))
}
