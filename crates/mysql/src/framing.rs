//! Packet framing: the 4-byte header (3-byte little-endian payload length,
//! 1-byte sequence id) in front of every MySQL packet, and the splitting of a
//! logical packet of 0xffffff bytes or more into frames.
//!
//! Not here: what a payload means, compression (`CLIENT_COMPRESS` is never
//! offered), TLS, or deciding which sequence id a command starts at; the
//! server expects 0 at each command and checks the id
//! [`PacketReader::next_packet`] returns where it cares.
//!
//! Rules (MySQL's `my_net_write`/`my_net_read`): a frame of exactly 0xffffff
//! payload bytes means "more follows", so a logical payload whose length is a
//! multiple of 0xffffff (0xffffff itself included) ends with an empty frame;
//! each frame carries the next sequence id, wrapping at 255; a reply
//! continues the sequence after the request's *last* frame
//! ([`PacketReader::reply_seq`]), which PyMySQL checks.
//!
//! Invariants: the reader never allocates for a packet before checking its
//! announced size against `max_payload`, and never panics on any bytes.
//! mysql_common's `PacketCodec` is not used here: it keeps client-side
//! sequence state and works on `BytesMut`, where the server wants plain
//! `Vec<u8>` buffers it owns.

use crate::ProtocolError;

/// The largest payload one frame carries; a frame this full means the
/// logical packet continues in the next frame.
pub const MAX_FRAME_PAYLOAD: usize = 0xff_ffff;

const HEADER_BYTES: usize = 4;

/// Accumulates bytes read from a connection and cuts them into logical
/// packets.
///
/// The caller appends socket reads with [`PacketReader::buffer`] (or
/// [`PacketReader::feed`]) and calls [`PacketReader::next_packet`] until it
/// returns `Ok(None)`; several pipelined packets can sit in the buffer.
#[derive(Debug)]
pub struct PacketReader {
    buf: Vec<u8>,
    /// Bytes at the front of `buf` that belong to packets already returned;
    /// dropped lazily so that pipelined packets do not each shift the buffer.
    consumed: usize,
    max_payload: usize,
    /// Sequence id of the last frame of the packet last returned.
    last_seq: u8,
}

impl PacketReader {
    /// A reader refusing logical packets whose payload exceeds `max_payload`
    /// bytes (MySQL's `max_allowed_packet`, 64 MiB by default in 8.0).
    pub fn new(max_payload: usize) -> Self {
        Self {
            buf: Vec::new(),
            consumed: 0,
            max_payload,
            last_seq: 0xff,
        }
    }

    /// The buffer to append newly read bytes to. Bytes of packets already
    /// returned are dropped first, so the buffer holds only unread input.
    pub fn buffer(&mut self) -> &mut Vec<u8> {
        self.compact();
        &mut self.buf
    }

    /// Appends `bytes` to the unread input.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.compact();
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes received but not yet returned as packets.
    pub fn pending_bytes(&self) -> usize {
        self.buf.len() - self.consumed
    }

    /// The next whole logical packet: the sequence id of its first frame and
    /// its payload, joined across continuation frames. `Ok(None)` means more
    /// bytes are needed. An error (too large, continuation frames out of
    /// order) is found as soon as the frame headers show it, before the
    /// payload arrives; the connection cannot continue after it.
    ///
    /// A reply to this packet starts at [`PacketReader::reply_seq`], not at
    /// the returned id + 1: the two differ for payloads of 16 MiB or more.
    pub fn next_packet(&mut self) -> Result<Option<(u8, Vec<u8>)>, ProtocolError> {
        let input = &self.buf[self.consumed..];
        let mut offset = 0;
        let mut total = 0usize;
        let mut first_seq = None;
        let mut expected_seq = 0u8;
        let mut frames = 0usize;
        // First pass: find the frame that ends the packet, checking sizes and
        // sequence ids from the headers alone.
        let end = loop {
            let Some(header) = input.get(offset..offset + HEADER_BYTES) else {
                return Ok(None);
            };
            let len = frame_len(header);
            let seq = header[3];
            match first_seq {
                None => first_seq = Some(seq),
                Some(_) if seq != expected_seq => {
                    return Err(ProtocolError::PacketsOutOfOrder {
                        expected: expected_seq,
                        got: seq,
                    })
                }
                Some(_) => {}
            }
            expected_seq = seq.wrapping_add(1);
            total = total.saturating_add(len);
            if total > self.max_payload {
                return Err(ProtocolError::TooLarge {
                    bytes: total,
                    max_bytes: self.max_payload,
                });
            }
            frames += 1;
            let body_end = offset + HEADER_BYTES + len;
            if input.len() < body_end {
                return Ok(None);
            }
            offset = body_end;
            if len < MAX_FRAME_PAYLOAD {
                break offset;
            }
        };
        let Some(seq) = first_seq else {
            return Ok(None);
        };
        // Second pass: join the frames' payloads.
        let payload = if frames == 1 {
            input[HEADER_BYTES..end].to_vec()
        } else {
            let mut payload = Vec::with_capacity(total);
            let mut at = 0;
            while at < end {
                let len = frame_len(&input[at..at + HEADER_BYTES]);
                payload.extend_from_slice(&input[at + HEADER_BYTES..at + HEADER_BYTES + len]);
                at += HEADER_BYTES + len;
            }
            payload
        };
        self.last_seq = expected_seq.wrapping_sub(1);
        self.consumed += end;
        if self.consumed == self.buf.len() {
            self.buf.clear();
            self.consumed = 0;
        }
        Ok(Some((seq, payload)))
    }

    /// The sequence id a reply to the packet last returned by
    /// [`PacketReader::next_packet`] starts at: one past that packet's last
    /// frame (0 before any packet).
    pub fn reply_seq(&self) -> u8 {
        self.last_seq.wrapping_add(1)
    }

    fn compact(&mut self) {
        if self.consumed > 0 {
            self.buf.drain(..self.consumed);
            self.consumed = 0;
        }
    }
}

/// The payload length in a frame header.
fn frame_len(header: &[u8]) -> usize {
    usize::from(header[0]) | usize::from(header[1]) << 8 | usize::from(header[2]) << 16
}

/// Appends one logical packet to `out`: frames of at most 0xffffff payload
/// bytes, an empty last frame when the payload length is a multiple of
/// 0xffffff, each frame with sequence id `*seq`, which advances (wrapping)
/// once per frame.
pub fn write_packet(out: &mut Vec<u8>, seq: &mut u8, payload: &[u8]) {
    let mut rest = payload;
    loop {
        let len = rest.len().min(MAX_FRAME_PAYLOAD);
        let len_bytes = (len as u32).to_le_bytes();
        out.extend_from_slice(&[len_bytes[0], len_bytes[1], len_bytes[2], *seq]);
        out.extend_from_slice(&rest[..len]);
        *seq = seq.wrapping_add(1);
        rest = &rest[len..];
        if len < MAX_FRAME_PAYLOAD {
            return;
        }
    }
}

/// As [`write_packet`], for a payload that `fill` appends to `out` in place (no
/// payload of its own to copy). If `fill` fails, `out` and `*seq` are as before.
pub fn write_packet_with<E>(
    out: &mut Vec<u8>,
    seq: &mut u8,
    fill: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
) -> Result<(), E> {
    let header = out.len();
    out.extend_from_slice(&[0; 4]);
    if let Err(e) = fill(out) {
        out.truncate(header);
        return Err(e);
    }
    let len = out.len() - header - 4;
    if len >= MAX_FRAME_PAYLOAD {
        // Split into frames: rare enough to copy.
        let payload = out.split_off(header + 4);
        out.truncate(header);
        write_packet(out, seq, &payload);
        return Ok(());
    }
    let len_bytes = (len as u32).to_le_bytes();
    out[header..header + 4].copy_from_slice(&[len_bytes[0], len_bytes[1], len_bytes[2], *seq]);
    *seq = seq.wrapping_add(1);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packet_filled_in_place_is_framed_as_one_copied() {
        for len in [
            0usize,
            5,
            MAX_FRAME_PAYLOAD - 1,
            MAX_FRAME_PAYLOAD,
            MAX_FRAME_PAYLOAD + 3,
        ] {
            let payload = vec![7u8; len];
            let (mut copied, mut seq_a) = (b"x".to_vec(), 3u8);
            write_packet(&mut copied, &mut seq_a, &payload);
            let (mut filled, mut seq_b) = (b"x".to_vec(), 3u8);
            let done: Result<(), ()> = write_packet_with(&mut filled, &mut seq_b, |out| {
                out.extend_from_slice(&payload);
                Ok(())
            });
            assert_eq!(done, Ok(()));
            assert_eq!((filled == copied, seq_b), (true, seq_a), "payload of {len}");
        }
        let (mut out, mut seq) = (b"x".to_vec(), 3u8);
        let failed = write_packet_with(&mut out, &mut seq, |out| {
            out.extend_from_slice(b"partial");
            Err("no")
        });
        assert_eq!((failed, out, seq), (Err("no"), b"x".to_vec(), 3));
    }

    fn frame(seq: u8, payload: &[u8]) -> Vec<u8> {
        let len = (payload.len() as u32).to_le_bytes();
        let mut out = vec![len[0], len[1], len[2], seq];
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn write_small_packets() {
        let mut out = Vec::new();
        let mut seq = 0;
        write_packet(&mut out, &mut seq, b"\x03SELECT 1");
        write_packet(&mut out, &mut seq, b"");
        assert_eq!(out, b"\x09\x00\x00\x00\x03SELECT 1\x00\x00\x00\x01");
        assert_eq!(seq, 2);
    }

    #[test]
    fn sequence_id_wraps() {
        let mut out = Vec::new();
        let mut seq = 255;
        write_packet(&mut out, &mut seq, b"x");
        assert_eq!(out, b"\x01\x00\x00\xffx");
        assert_eq!(seq, 0);
    }

    /// Frame lengths and sequence ids of `bytes`, walking the headers.
    fn frames_of(bytes: &[u8]) -> Vec<(usize, u8)> {
        let mut frames = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let len = usize::from(bytes[at])
                | usize::from(bytes[at + 1]) << 8
                | usize::from(bytes[at + 2]) << 16;
            frames.push((len, bytes[at + 3]));
            at += 4 + len;
        }
        assert_eq!(at, bytes.len());
        frames
    }

    fn big_payload(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8).collect()
    }

    #[test]
    fn payload_of_exactly_one_full_frame_needs_an_empty_trailer() {
        let payload = big_payload(MAX_FRAME_PAYLOAD);
        let mut out = Vec::new();
        let mut seq = 7;
        write_packet(&mut out, &mut seq, &payload);
        assert_eq!(frames_of(&out), vec![(MAX_FRAME_PAYLOAD, 7), (0, 8)]);
        assert_eq!(seq, 9);
        let mut reader = PacketReader::new(64 << 20);
        reader.feed(&out);
        let (first_seq, joined) = reader.next_packet().unwrap().unwrap();
        assert_eq!(first_seq, 7);
        assert_eq!(reader.reply_seq(), 9, "after the empty trailer (8)");
        assert!(joined == payload, "joined payload differs");
        assert_eq!(reader.next_packet().unwrap(), None);
        assert_eq!(reader.pending_bytes(), 0);
    }

    #[test]
    fn payload_over_one_frame_splits_and_joins() {
        for len in [MAX_FRAME_PAYLOAD + 1, 2 * MAX_FRAME_PAYLOAD + 10] {
            let payload = big_payload(len);
            let mut out = Vec::new();
            let mut seq = 0;
            write_packet(&mut out, &mut seq, &payload);
            let frames = frames_of(&out);
            assert_eq!(frames.len(), len / MAX_FRAME_PAYLOAD + 1);
            assert_eq!(frames.last().unwrap().0, len % MAX_FRAME_PAYLOAD);
            let mut reader = PacketReader::new(64 << 20);
            reader.feed(&out);
            let (first_seq, joined) = reader.next_packet().unwrap().unwrap();
            assert_eq!(first_seq, 0);
            assert_eq!(usize::from(reader.reply_seq()), frames.len());
            assert!(joined == payload, "joined payload differs for {len}");
        }
    }

    #[test]
    fn two_full_frames_need_an_empty_trailer() {
        let payload = big_payload(2 * MAX_FRAME_PAYLOAD);
        let mut out = Vec::new();
        let mut seq = 0;
        write_packet(&mut out, &mut seq, &payload);
        assert_eq!(
            frames_of(&out),
            vec![(MAX_FRAME_PAYLOAD, 0), (MAX_FRAME_PAYLOAD, 1), (0, 2)]
        );
    }

    #[test]
    fn partial_input_needs_more() {
        let mut bytes = frame(0, b"\x03SELECT 1");
        bytes.extend(frame(0, b"\x0e"));
        // Every split point: the first part alone yields what it completes,
        // the rest completes the remainder, and nothing is lost or repeated.
        for split in 0..=bytes.len() {
            let mut reader = PacketReader::new(1024);
            reader.feed(&bytes[..split]);
            let mut packets = Vec::new();
            while let Some(packet) = reader.next_packet().unwrap() {
                packets.push(packet);
            }
            reader.buffer().extend_from_slice(&bytes[split..]);
            while let Some(packet) = reader.next_packet().unwrap() {
                packets.push(packet);
            }
            assert_eq!(
                packets,
                vec![(0, b"\x03SELECT 1".to_vec()), (0, b"\x0e".to_vec())],
                "split at {split}"
            );
            assert_eq!(reader.pending_bytes(), 0);
        }
    }

    #[test]
    fn continuation_frames_split_at_every_header_byte() {
        // A packet of one full frame plus a short one, fed a byte at a time
        // around the second header.
        let payload = big_payload(MAX_FRAME_PAYLOAD + 3);
        let mut out = Vec::new();
        let mut seq = 0;
        write_packet(&mut out, &mut seq, &payload);
        let second_header = 4 + MAX_FRAME_PAYLOAD;
        let mut reader = PacketReader::new(64 << 20);
        reader.feed(&out[..second_header]);
        for at in second_header..out.len() {
            assert_eq!(reader.next_packet().unwrap(), None, "at {at}");
            reader.feed(&out[at..at + 1]);
        }
        let (_, joined) = reader.next_packet().unwrap().unwrap();
        assert!(joined == payload);
    }

    #[test]
    fn too_large_is_found_from_the_header() {
        let mut reader = PacketReader::new(10);
        reader.feed(&[11, 0, 0, 0]);
        assert_eq!(
            reader.next_packet(),
            Err(ProtocolError::TooLarge {
                bytes: 11,
                max_bytes: 10
            })
        );
        // Exactly the limit is fine.
        let mut reader = PacketReader::new(10);
        reader.feed(&frame(0, &[1; 10]));
        assert_eq!(reader.next_packet().unwrap(), Some((0, vec![1; 10])));
    }

    #[test]
    fn too_large_across_frames() {
        let mut reader = PacketReader::new(MAX_FRAME_PAYLOAD + 5);
        reader.feed(&[0xff, 0xff, 0xff, 0]);
        assert_eq!(reader.next_packet().unwrap(), None);
        reader.feed(&big_payload(MAX_FRAME_PAYLOAD));
        reader.feed(&[6, 0, 0, 1]);
        assert_eq!(
            reader.next_packet(),
            Err(ProtocolError::TooLarge {
                bytes: MAX_FRAME_PAYLOAD + 6,
                max_bytes: MAX_FRAME_PAYLOAD + 5
            })
        );
    }

    #[test]
    fn continuation_out_of_order() {
        let mut reader = PacketReader::new(64 << 20);
        reader.feed(&[0xff, 0xff, 0xff, 3]);
        reader.feed(&big_payload(MAX_FRAME_PAYLOAD));
        reader.feed(&[0, 0, 0, 5]);
        assert_eq!(
            reader.next_packet(),
            Err(ProtocolError::PacketsOutOfOrder {
                expected: 4,
                got: 5
            })
        );
    }

    #[test]
    fn first_frame_may_carry_any_sequence_id() {
        let mut reader = PacketReader::new(64);
        assert_eq!(reader.reply_seq(), 0);
        reader.feed(&frame(3, b"\x00"));
        assert_eq!(reader.next_packet().unwrap(), Some((3, vec![0])));
        assert_eq!(reader.reply_seq(), 4);
        reader.feed(&frame(255, b"\x00"));
        assert_eq!(reader.next_packet().unwrap(), Some((255, vec![0])));
        assert_eq!(reader.reply_seq(), 0);
    }

    #[test]
    fn buffer_drops_returned_packets() {
        let mut reader = PacketReader::new(64);
        reader.feed(&frame(0, b"ab"));
        reader.feed(&frame(0, b"c")[..2]);
        assert_eq!(reader.next_packet().unwrap(), Some((0, b"ab".to_vec())));
        assert_eq!(reader.pending_bytes(), 2);
        assert_eq!(reader.buffer().len(), 2);
        reader.buffer().extend_from_slice(&frame(0, b"c")[2..]);
        assert_eq!(reader.next_packet().unwrap(), Some((0, b"c".to_vec())));
        assert_eq!(reader.buffer().len(), 0);
    }
}
