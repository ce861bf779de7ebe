//! The kernel's console stream: plain text lines with defmt frames multiplexed in.
//!
//! Contract (`kernel/CONTRACTS.md`): the UART carries plain text (banners, panics, fault reports,
//! the self-test summary) and defmt frames, each sent as the byte `0x1E` followed by an rzCOBS
//! encoded frame that ends with `0x00`. rzCOBS never emits `0x00` inside a frame, so the end of a
//! frame is unambiguous; `0x1E` may occur inside a frame and means nothing there. defmt's
//! encoder writes one extra `0x00` before its very first frame (a resync byte), so the first
//! frame arrives as `0x1E 0x00 <frame> 0x00`; a `0x00` right after `0x1E` is skipped.
//!
//! [`Demux`] splits the raw byte stream into [`Item`]s without knowing anything about defmt;
//! [`Console`] turns those into printable lines, decoding frames with `defmt-decoder` and the
//! `.defmt` table of the kernel ELF. The plain text is passed through unchanged.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use defmt_decoder::{DecodeError, Locations, StreamDecoder, Table};

/// Marks the start of a defmt frame in the console stream.
pub const FRAME_START: u8 = 0x1E;
/// Ends an rzCOBS frame.
pub const FRAME_END: u8 = 0x00;

/// A piece of the console stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// A line of plain text, without its line ending (`\n` or `\r\n`).
    Text(Vec<u8>),
    /// One rzCOBS frame without the leading `0x1E` and without the closing `0x00`.
    Frame(Vec<u8>),
}

/// Splits a console byte stream into text lines and defmt frames, fed in arbitrary chunks.
#[derive(Debug, Default)]
pub struct Demux {
    line: Vec<u8>,
    frame: Option<Vec<u8>>,
}

impl Demux {
    pub fn new() -> Self {
        Self::default()
    }

    /// Consumes `bytes`, appending every completed item to `out`.
    ///
    /// A frame that starts in the middle of a text line is emitted as soon as it is complete;
    /// the text before and after it is kept together as one line, because the kernel's text
    /// writer and its defmt logger are separate paths that may interleave at byte granularity.
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<Item>) {
        for &b in bytes {
            match &mut self.frame {
                Some(frame) => {
                    if b == FRAME_END && frame.is_empty() {
                        // defmt's rzCOBS encoder sends one 0x00 before its first frame to
                        // resynchronise decoders; an empty frame cannot exist, so skip it.
                    } else if b == FRAME_END {
                        out.push(Item::Frame(std::mem::take(frame)));
                        self.frame = None;
                    } else {
                        frame.push(b);
                    }
                }
                None => match b {
                    FRAME_START => self.frame = Some(Vec::new()),
                    b'\n' => {
                        if self.line.last() == Some(&b'\r') {
                            self.line.pop();
                        }
                        out.push(Item::Text(std::mem::take(&mut self.line)));
                    }
                    _ => self.line.push(b),
                },
            }
        }
    }

    /// The text of the unfinished line, unless a frame is being received.
    pub fn partial_text(&self) -> Option<&[u8]> {
        match self.frame {
            Some(_) => None,
            None => Some(&self.line),
        }
    }

    /// Ends the stream: a partial text line is emitted; a partial frame is returned as an
    /// error item (as text), because it can never be decoded.
    pub fn finish(&mut self, out: &mut Vec<Item>) {
        if let Some(frame) = self.frame.take() {
            let mut text = format!("<truncated defmt frame, {} bytes>", frame.len()).into_bytes();
            if !self.line.is_empty() {
                let mut line = std::mem::take(&mut self.line);
                line.push(b' ');
                line.append(&mut text);
                text = line;
            }
            out.push(Item::Text(text));
        } else if !self.line.is_empty() {
            out.push(Item::Text(std::mem::take(&mut self.line)));
        }
    }
}

/// The defmt side of the console: the table from the ELF and, if available, source locations.
pub struct Defmt {
    table: Table,
    locations: Option<Locations>,
    /// Append `(file:line)` to decoded messages (off by default: the kernel logs through one
    /// wrapper, so most locations are the wrapper's).
    pub show_locations: bool,
}

impl Defmt {
    /// Reads the `.defmt` table from a kernel ELF. `Ok(None)` when the ELF has no defmt data
    /// (then frames cannot be decoded and are shown as hex).
    pub fn from_elf(elf: &[u8]) -> Result<Option<Self>> {
        let Some(table) =
            Table::parse(elf).context("reading the .defmt table of the kernel ELF")?
        else {
            return Ok(None);
        };
        // Locations need DWARF line info; without it we still decode messages.
        let locations = table.get_locations(elf).ok().filter(|l| !l.is_empty());
        Ok(Some(Self {
            table,
            locations,
            show_locations: false,
        }))
    }

    /// Wraps an already-built table (tests build one by hand).
    pub fn from_table(table: Table) -> Self {
        Self {
            table,
            locations: None,
            show_locations: false,
        }
    }
}

/// Turns console items into printable lines.
pub struct Console<'t> {
    defmt: Option<&'t Defmt>,
    decoder: Option<Box<dyn StreamDecoder + Send + Sync + 't>>,
}

impl<'t> Console<'t> {
    pub fn new(defmt: Option<&'t Defmt>) -> Self {
        Self {
            defmt,
            decoder: defmt.map(|d| d.table.new_stream_decoder()),
        }
    }

    /// Renders one item as one line of text (no line ending).
    pub fn render(&mut self, item: &Item) -> String {
        match item {
            Item::Text(line) => String::from_utf8_lossy(line).into_owned(),
            Item::Frame(bytes) => self.render_frame(bytes),
        }
    }

    fn render_frame(&mut self, bytes: &[u8]) -> String {
        let (Some(defmt), Some(decoder)) = (self.defmt, self.decoder.as_mut()) else {
            return format!("<defmt frame, no table in the ELF: {}>", hex(bytes));
        };
        let mut framed = Vec::with_capacity(bytes.len() + 1);
        framed.extend_from_slice(bytes);
        framed.push(FRAME_END);
        decoder.received(&framed);
        match decoder.decode() {
            Ok(frame) => {
                let mut line = frame.display(false).to_string();
                if let Some(loc) = defmt
                    .locations
                    .as_ref()
                    .filter(|_| defmt.show_locations)
                    .and_then(|l: &BTreeMap<u64, _>| l.get(&frame.index()))
                {
                    line.push_str(&format!(
                        "  ({}:{})",
                        short_path(&loc.file.display().to_string()),
                        loc.line
                    ));
                }
                line
            }
            Err(DecodeError::UnexpectedEof) => {
                format!("<incomplete defmt frame: {}>", hex(bytes))
            }
            Err(DecodeError::Malformed) => format!("<malformed defmt frame: {}>", hex(bytes)),
        }
    }
}

/// Paths inside the workspace are shown relative to it.
fn short_path(path: &str) -> String {
    let root = crate::cmd::workspace_root();
    match std::path::Path::new(path).strip_prefix(&root) {
        Ok(rel) => rel.display().to_string(),
        Err(_) => path.to_string(),
    }
}

/// Whether a rendered line is one of [`Console`]'s reports of a frame it could not decode.
pub fn is_undecodable(line: &str) -> bool {
    UNDECODABLE.iter().any(|p| line.contains(p))
}

const UNDECODABLE: &[&str] = &[
    "<defmt frame, no table",
    "<incomplete defmt frame",
    "<malformed defmt frame",
    "<truncated defmt frame",
];

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demux_all(chunks: &[&[u8]]) -> Vec<Item> {
        let mut d = Demux::new();
        let mut out = Vec::new();
        for c in chunks {
            d.push(c, &mut out);
        }
        d.finish(&mut out);
        out
    }

    fn text(s: &str) -> Item {
        Item::Text(s.as_bytes().to_vec())
    }

    #[test]
    fn text_lines_pass_through_with_crlf_stripped() {
        let items = demux_all(&[b"hello\r\nworld\npartial"]);
        assert_eq!(items, vec![text("hello"), text("world"), text("partial")]);
    }

    #[test]
    fn frames_are_split_out_and_may_contain_the_start_byte() {
        // The first frame carries defmt's leading resync 0x00.
        let stream = [
            b"boot\n".as_slice(),
            &[0x1E, 0x00, 0x01, 0x1E, 0x7f, 0x00],
            b"3 passed, 0 failed\n",
        ]
        .concat();
        let items = demux_all(&[&stream]);
        assert_eq!(
            items,
            vec![
                text("boot"),
                Item::Frame(vec![0x01, 0x1E, 0x7f]),
                text("3 passed, 0 failed")
            ]
        );
    }

    #[test]
    fn chunk_boundaries_do_not_matter() {
        let stream = [
            b"ab".as_slice(),
            &[0x1E, 0x05, 0x06, 0x00],
            b"cd\n",
            &[0x1E, 0x0a, 0x00],
            &[0x1E, 0x0b, 0x00],
            b"e\r\n",
        ]
        .concat();
        let whole = demux_all(&[&stream]);
        let bytewise: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(demux_all(&bytewise), whole);
        // Text interrupted by a frame is kept together; the frame comes out when complete.
        assert_eq!(
            whole,
            vec![
                Item::Frame(vec![5, 6]),
                text("abcd"),
                Item::Frame(vec![0x0a]),
                Item::Frame(vec![0x0b]),
                text("e"),
            ]
        );
    }

    #[test]
    fn partial_text_is_the_unfinished_line_outside_frames() {
        let mut d = Demux::new();
        let mut out = Vec::new();
        d.push(b"done\n=> ", &mut out);
        assert_eq!(d.partial_text(), Some(b"=> ".as_slice()));
        d.push(&[0x1E, 0x05], &mut out);
        assert_eq!(d.partial_text(), None);
        d.push(&[0x00, b'x'], &mut out);
        assert_eq!(d.partial_text(), Some(b"=> x".as_slice()));
    }

    #[test]
    fn truncated_frame_is_reported_not_dropped() {
        let items = demux_all(&[b"x\n\x1e\x01\x02"]);
        assert_eq!(
            items,
            vec![text("x"), text("<truncated defmt frame, 2 bytes>")]
        );
        assert!(is_undecodable("<truncated defmt frame, 2 bytes>"));
    }

    /// rzCOBS encoder for the group form only, written from the format description: the data
    /// is cut into groups of 7 bytes; each group is written as its non-zero bytes followed by a
    /// mask byte whose bit k says "byte k of the group is zero (omitted)". Positions past the
    /// end of a short final group count as zero bytes, which decode as trailing zeros that
    /// defmt ignores. A mask of 0 would be a frame end, so every group must hold a zero (the
    /// run forms 0x80..=0xff are not needed for the test data).
    fn rzcobs_encode(data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for group in data.chunks(7) {
            let mut mask = 0u8;
            for k in 0..7 {
                match group.get(k) {
                    Some(&b) if b != 0 => out.push(b),
                    _ => mask |= 1 << k,
                }
            }
            assert!(mask != 0, "test data group without a zero byte: {group:?}");
            out.push(mask);
        }
        out
    }

    fn table_with(entries: &[(u16, &str, &str)]) -> Table {
        // Table has no public constructor; it is serde-serialisable, so build it from JSON
        // with the same shape the decoder's own (de)serialisation uses.
        let entries: serde_json::Map<String, serde_json::Value> = entries
            .iter()
            .map(|(idx, tag, s)| {
                (
                    idx.to_string(),
                    serde_json::json!({
                        "string": { "tag": tag, "string": s },
                        "raw_symbol": format!("{{\"package\":\"t\",\"tag\":\"{tag}\",\"data\":\"{s}\",\"disambiguator\":\"1\",\"crate_name\":\"t\"}}"),
                    }),
                )
            })
            .collect();
        let json = serde_json::json!({
            "timestamp": { "string": { "tag": "Timestamp", "string": "{=u64:us}" }, "raw_symbol": "ts" },
            "entries": entries,
            "bitflags": {},
            "encoding": "Rzcobs",
        });
        serde_json::from_value(json).expect("table JSON matches defmt-decoder's serde shape")
    }

    #[test]
    fn frames_decode_to_readable_lines_with_timestamp_and_level() {
        let table = table_with(&[
            (1, "Info", "cpu{=u8} online"),
            (2, "Warn", "tick late by {=u32}us"),
        ]);
        let defmt = Defmt::from_table(table);
        let mut console = Console::new(Some(&defmt));

        // Frame: index (u16 LE), timestamp in µs (u64 LE), then the arguments.
        let mut payload = vec![1, 0];
        payload.extend_from_slice(&1_500_000u64.to_le_bytes());
        payload.push(3);
        let line = console.render(&Item::Frame(rzcobs_encode(&payload)));
        assert_eq!(line, "1.500000 INFO cpu3 online");

        let mut payload = vec![2, 0];
        payload.extend_from_slice(&42u64.to_le_bytes());
        payload.extend_from_slice(&250u32.to_le_bytes());
        let line = console.render(&Item::Frame(rzcobs_encode(&payload)));
        assert_eq!(line, "0.000042 WARN tick late by 250us");

        // Plain text is untouched; garbage frames are reported, not fatal.
        assert_eq!(
            console.render(&text("1 passed, 0 failed")),
            "1 passed, 0 failed"
        );
        let bad = console.render(&Item::Frame(vec![0x01]));
        assert!(bad.starts_with("<malformed defmt frame"), "{bad}");
        assert!(is_undecodable(&bad));
        assert!(!is_undecodable("0.000042 WARN tick late by 250us"));
        let mut no_table = Console::new(None);
        assert!(is_undecodable(&no_table.render(&Item::Frame(vec![1, 2]))));
    }
}
