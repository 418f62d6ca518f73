//! What travels between a primary and a replica: the replica's `replicate` command
//! ([`Replicate`]), then, once it has been accepted, length-prefixed frames, in both
//! directions, on the same TCP connection. `docs/format.md` describes them; this is the
//! one place that writes and reads them. No I/O; never panics on input (fuzzed:
//! `replication_frames`).
//!
//! A frame is a kind byte, the payload's length (u32, little-endian) and the payload;
//! numbers in payloads are little-endian.

/// The most a frame's payload may hold: a run of records is cut at about 256 KiB, but
/// one batch (a SQL statement's rows) is never split, so the bound is generous.
pub const FRAME_MAX_BYTES: usize = 256 << 20;

const HEADER_BYTES: usize = 5;

/// What a stream is for: a replica, which counts toward a primary's
/// `--min-sync-replicas` and `Y<n>`, or `kura backup`'s copy, or a move's target
/// shard copying the keys that move to it (issue 42), which do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    Replica,
    Backup,
    Move,
}

impl Purpose {
    /// What `replicate` carries after its position for this purpose: nothing for a
    /// replica (as before backups existed), ` backup` for a backup.
    pub fn marker(self) -> &'static str {
        match self {
            Purpose::Replica => "",
            Purpose::Backup => " backup",
            Purpose::Move => " move",
        }
    }
}

/// `replicate <history> <epoch> <tag> <lsn> <floor> [backup]`: the log's history, the
/// epoch its end is in (number and tag), that end, how far back the log can be cut
/// (its rewind floor), and what the stream is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replicate {
    pub history_id: u128,
    pub epoch: u64,
    pub tag: u64,
    pub lsn: u64,
    pub floor: u64,
    pub purpose: Purpose,
}

impl Replicate {
    /// Reads the arguments after `replicate` (the id and the tag in hex, 32 and 16
    /// digits); None if they are not exactly these.
    pub fn parse(mut arguments: crate::Tokens<'_>) -> Option<Replicate> {
        let mut next = || std::str::from_utf8(arguments.next()?).ok();
        let id = next()?;
        let epoch = next()?.parse().ok()?;
        let tag = next()?;
        let lsn = next()?.parse().ok()?;
        let floor = next()?.parse().ok()?;
        let purpose = match next() {
            None => Purpose::Replica,
            Some("backup") => Purpose::Backup,
            Some("move") => Purpose::Move,
            Some(_) => return None,
        };
        if next().is_some() || id.len() != 32 || tag.len() != 16 {
            return None;
        }
        Some(Replicate {
            history_id: u128::from_str_radix(id, 16).ok()?,
            epoch,
            tag: u64::from_str_radix(tag, 16).ok()?,
            lsn,
            floor,
            purpose,
        })
    }

    /// The arguments as [`Replicate::parse`] reads them.
    pub fn arguments(&self) -> String {
        format!(
            "{:032x} {} {:016x} {} {}{}",
            self.history_id,
            self.epoch,
            self.tag,
            self.lsn,
            self.floor,
            self.purpose.marker()
        )
    }

    /// The whole command line.
    pub fn line(&self) -> String {
        format!("replicate {}\r\n", self.arguments())
    }
}

/// Where the primary's stream starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// From the replica's own position: the replica keeps its log and goes on.
    Partial { lsn: u64 },
    /// A full copy: the replica empties its log and copies the primary's from segment
    /// `segment`, which starts at `start_lsn`; it holds a consistent copy once it has
    /// reached `consistent_lsn` (the primary's log end when the copy began).
    Full {
        segment: u64,
        start_lsn: u64,
        consistent_lsn: u64,
    },
}

/// One frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame<'a> {
    /// Primary → replica, first: the primary's history (its id and every epoch's
    /// number, start LSN and tag) and where the stream starts.
    Hello {
        history_id: u128,
        epochs: Vec<(u64, u64, u64)>,
        start: Start,
    },
    /// Primary → replica: records of segment `segment` from LSN `start_lsn`, whole
    /// records and whole batches as the primary's log holds them.
    Records {
        segment: u64,
        start_lsn: u64,
        bytes: &'a [u8],
    },
    /// Primary → replica: the primary removed its segments before `oldest`; the
    /// replica removes its own once it has applied up to `after_lsn`.
    Trim { oldest: u64, after_lsn: u64 },
    /// Primary → replica, at least once a second: how far the primary's log goes.
    Progress { appended_lsn: u64, synced_lsn: u64 },
    /// Replica → primary: everything up to `synced_lsn` is on the replica's disk.
    Ack { synced_lsn: u64 },
    /// Either way, last: why the sender ends the stream.
    Bye { reason: &'a str },
    /// Primary → replica, last: the primary handed its role to `to` (`host:port`) in
    /// a planned failover, once `to` held all of its log; the replica follows `to`.
    Moved { to: &'a str },
    /// A move's hand-off (issue 42), on a `move` stream, either way: `step` is one of
    /// [`HandOffStep`]'s, `lsn` the log position it names, `shard` the target's name.
    HandOff {
        step: HandOffStep,
        lsn: u64,
        shard: &'a str,
    },
}

/// The steps of a move's hand-off between the source's primary (S) and the target's
/// (T).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandOffStep {
    /// T → S: T is close behind; S may hold changes to the moving keys.
    Ask = 1,
    /// S → T: S holds them; its log holds every change to them up to `lsn`. T
    /// acknowledges that position once it holds it durably.
    Held = 2,
    /// S → T: the move flipped in etcd: T owns the keys.
    Flipped = 3,
    /// T → S: T serves the keys as their owner.
    Owning = 4,
    /// S → T: S let go of the changes it held without a flip; T asks again later.
    Released = 5,
}

impl HandOffStep {
    fn of(byte: u8) -> Option<HandOffStep> {
        Some(match byte {
            1 => HandOffStep::Ask,
            2 => HandOffStep::Held,
            3 => HandOffStep::Flipped,
            4 => HandOffStep::Owning,
            5 => HandOffStep::Released,
            _ => return None,
        })
    }
}

/// Bytes that are not a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError(pub String);

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "replication stream: {}", self.0)
    }
}

impl std::error::Error for WireError {}

fn put_u64(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(&n.to_le_bytes());
}

/// Appends `frame` to `out`.
pub fn encode(frame: &Frame<'_>, out: &mut Vec<u8>) {
    let at = out.len();
    out.extend_from_slice(&[0; HEADER_BYTES]);
    let kind = match frame {
        Frame::Hello {
            history_id,
            epochs,
            start,
        } => {
            out.extend_from_slice(&history_id.to_le_bytes());
            out.extend_from_slice(&u32::try_from(epochs.len()).unwrap_or(0).to_le_bytes());
            for &(number, start_lsn, tag) in epochs {
                put_u64(out, number);
                put_u64(out, start_lsn);
                put_u64(out, tag);
            }
            match *start {
                Start::Partial { lsn } => {
                    out.push(b'p');
                    put_u64(out, lsn);
                }
                Start::Full {
                    segment,
                    start_lsn,
                    consistent_lsn,
                } => {
                    out.push(b'f');
                    put_u64(out, segment);
                    put_u64(out, start_lsn);
                    put_u64(out, consistent_lsn);
                }
            }
            b'H'
        }
        Frame::Records {
            segment,
            start_lsn,
            bytes,
        } => {
            put_u64(out, *segment);
            put_u64(out, *start_lsn);
            out.extend_from_slice(bytes);
            b'R'
        }
        Frame::Trim { oldest, after_lsn } => {
            put_u64(out, *oldest);
            put_u64(out, *after_lsn);
            b'T'
        }
        Frame::Progress {
            appended_lsn,
            synced_lsn,
        } => {
            put_u64(out, *appended_lsn);
            put_u64(out, *synced_lsn);
            b'P'
        }
        Frame::Ack { synced_lsn } => {
            put_u64(out, *synced_lsn);
            b'A'
        }
        Frame::Bye { reason } => {
            out.extend_from_slice(reason.as_bytes());
            b'B'
        }
        Frame::Moved { to } => {
            out.extend_from_slice(to.as_bytes());
            b'M'
        }
        Frame::HandOff { step, lsn, shard } => {
            out.push(*step as u8);
            put_u64(out, *lsn);
            out.extend_from_slice(shard.as_bytes());
            b'O'
        }
    };
    let len = u32::try_from(out.len() - at - HEADER_BYTES).unwrap_or(u32::MAX);
    out[at] = kind;
    out[at + 1..at + HEADER_BYTES].copy_from_slice(&len.to_le_bytes());
}

/// Reads a payload's fields in order.
struct Fields<'a> {
    rest: &'a [u8],
}

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.rest.len() < n {
            return Err(WireError("a frame is shorter than its fields".to_string()));
        }
        let (taken, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(taken)
    }

    fn u64(&mut self) -> Result<u64, WireError> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }

    fn end(self) -> Result<(), WireError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(WireError("a frame is longer than its fields".to_string()))
        }
    }
}

/// The first frame in `buf` and its length, or None until `buf` holds all of it.
pub fn decode(buf: &[u8]) -> Result<Option<(Frame<'_>, usize)>, WireError> {
    let Some(header) = buf.get(..HEADER_BYTES) else {
        return Ok(None);
    };
    let mut len = [0u8; 4];
    len.copy_from_slice(&header[1..]);
    let len = u32::from_le_bytes(len) as usize;
    if len > FRAME_MAX_BYTES {
        return Err(WireError(format!("a frame of {len} bytes")));
    }
    let Some(payload) = buf.get(HEADER_BYTES..HEADER_BYTES + len) else {
        return Ok(None);
    };
    let mut f = Fields { rest: payload };
    let frame = match header[0] {
        b'H' => {
            let mut id = [0u8; 16];
            id.copy_from_slice(f.take(16)?);
            let mut count = [0u8; 4];
            count.copy_from_slice(f.take(4)?);
            let count = u32::from_le_bytes(count) as usize;
            if count > f.rest.len() / 24 {
                return Err(WireError("a hello with more epochs than bytes".to_string()));
            }
            let mut epochs = Vec::with_capacity(count);
            for _ in 0..count {
                epochs.push((f.u64()?, f.u64()?, f.u64()?));
            }
            let start = match f.take(1)?[0] {
                b'p' => Start::Partial { lsn: f.u64()? },
                b'f' => Start::Full {
                    segment: f.u64()?,
                    start_lsn: f.u64()?,
                    consistent_lsn: f.u64()?,
                },
                other => return Err(WireError(format!("a hello starting with {other:#x}"))),
            };
            f.end()?;
            Frame::Hello {
                history_id: u128::from_le_bytes(id),
                epochs,
                start,
            }
        }
        b'R' => {
            let segment = f.u64()?;
            let start_lsn = f.u64()?;
            Frame::Records {
                segment,
                start_lsn,
                bytes: f.rest,
            }
        }
        b'T' => {
            let frame = Frame::Trim {
                oldest: f.u64()?,
                after_lsn: f.u64()?,
            };
            f.end()?;
            frame
        }
        b'P' => {
            let frame = Frame::Progress {
                appended_lsn: f.u64()?,
                synced_lsn: f.u64()?,
            };
            f.end()?;
            frame
        }
        b'A' => {
            let frame = Frame::Ack {
                synced_lsn: f.u64()?,
            };
            f.end()?;
            frame
        }
        b'B' => Frame::Bye {
            reason: std::str::from_utf8(payload)
                .map_err(|_| WireError("a goodbye that is not UTF-8".to_string()))?,
        },
        b'M' => Frame::Moved {
            to: std::str::from_utf8(payload)
                .map_err(|_| WireError("a new primary's address that is not UTF-8".to_string()))?,
        },
        b'O' => {
            let step = f.take(1)?[0];
            let step = HandOffStep::of(step)
                .ok_or_else(|| WireError(format!("a hand-off step {step:#x}")))?;
            let lsn = f.u64()?;
            Frame::HandOff {
                step,
                lsn,
                shard: std::str::from_utf8(f.rest)
                    .map_err(|_| WireError("a shard name that is not UTF-8".to_string()))?,
            }
        }
        other => return Err(WireError(format!("a frame of kind {other:#x}"))),
    };
    Ok(Some((frame, HEADER_BYTES + len)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_replicate(arguments: &str, expected: Option<Replicate>) {
        let parsed = Replicate::parse(crate::Tokens::new(arguments.as_bytes()));
        assert_eq!(parsed, expected, "{arguments:?}");
        if let Some(replicate) = parsed {
            assert_eq!(replicate.arguments(), arguments);
        }
    }

    #[test]
    fn replicate_arguments() {
        let id = "000102030405060708090a0b0c0d0e0f";
        let replicate = |purpose| {
            Some(Replicate {
                history_id: 0x0001_0203_0405_0607_0809_0a0b_0c0d_0e0f,
                epoch: 2,
                tag: 0xab,
                lsn: 300,
                floor: 100,
                purpose,
            })
        };
        let tag = "00000000000000ab";
        check_replicate(
            &format!("{id} 2 {tag} 300 100"),
            replicate(Purpose::Replica),
        );
        check_replicate(
            &format!("{id} 2 {tag} 300 100 backup"),
            replicate(Purpose::Backup),
        );
        check_replicate(
            &format!("{id} 2 {tag} 300 100 move"),
            replicate(Purpose::Move),
        );
        check_replicate(&format!("{id} 2 {tag} 300 100 replica"), None);
        check_replicate(&format!("{id} 2 {tag} 300 100 backup x"), None);
        check_replicate(&format!("{id} 2 {tag} 300"), None);
        check_replicate(&format!("{id} 2 ab 300 100"), None);
        check_replicate("", None);
        assert_eq!(
            replicate(Purpose::Backup).map(|r| r.line()),
            Some(format!("replicate {id} 2 {tag} 300 100 backup\r\n"))
        );
    }

    #[test]
    fn every_frame_reads_back_as_written_and_not_before_it_is_whole() {
        let frames = [
            Frame::Hello {
                history_id: 0x0123_4567_89ab_cdef_0011_2233_4455_6677,
                epochs: vec![(1, 0, 0x1234), (2, 4096, u64::MAX)],
                start: Start::Full {
                    segment: 3,
                    start_lsn: 77,
                    consistent_lsn: 9000,
                },
            },
            Frame::Hello {
                history_id: 1,
                epochs: vec![(1, 0, 9)],
                start: Start::Partial { lsn: 12 },
            },
            Frame::Records {
                segment: 4,
                start_lsn: 100,
                bytes: b"record bytes",
            },
            Frame::HandOff {
                step: HandOffStep::Held,
                lsn: 4242,
                shard: "c",
            },
            Frame::Trim {
                oldest: 2,
                after_lsn: 99,
            },
            Frame::Progress {
                appended_lsn: 5,
                synced_lsn: 4,
            },
            Frame::Ack { synced_lsn: 42 },
            Frame::Bye { reason: "because" },
            Frame::Moved {
                to: "127.0.0.1:11212",
            },
        ];
        for frame in &frames {
            let mut out = Vec::new();
            encode(frame, &mut out);
            for cut in 0..out.len() {
                assert_eq!(decode(&out[..cut]), Ok(None), "{frame:?} cut at {cut}");
            }
            out.extend_from_slice(b"next");
            assert_eq!(decode(&out), Ok(Some((frame.clone(), out.len() - 4))));
        }
    }

    #[test]
    fn what_is_not_a_frame_is_refused() {
        assert!(decode(b"Z\0\0\0\0").is_err());
        assert!(
            decode(b"A\x04\0\0\0abcd").is_err(),
            "too short for its field"
        );
        assert!(decode(b"A\x09\0\0\0abcdefghi").is_err(), "too long");
        assert!(decode(&[b'R', 0xff, 0xff, 0xff, 0xff]).is_err(), "too big");
        assert!(decode(b"H\x14\0\0\0aaaaaaaaaaaaaaaa\xff\xff\xff\xff").is_err());
    }
}
