//! The record classes of `parser/classify.py`'s `classify_distinct`, in one pass over the records.
//!
//! A record's class is (logger, the form of its id prefix, the rest of its first line). The id prefix is the
//! grammar's `prefix` rule, as `classify.ID_PREFIX` spells it: `[C12] `, `[C12][S34] `, and
//! `[Tags: "ConnectionId":"12"(,"StreamId":"34")?] ` with or without backslashes before the quotes; it ends at
//! the line's first `] `. `classify._class_rows` is the polars reference; a test compares the two.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::arrow::NullableBuilder;

/// The form of a record's id prefix: 0 none; then plain, tags, escaped tags (1, 3, 5) and the same with a
/// stream id (2, 4, 6). `classify.py` maps each to its text with the ids replaced by sentinels.
pub type Form = u8;

pub struct Prefix<'a> {
    pub form: Form,
    pub len: usize,
    pub conn: &'a [u8],
    pub stream: Option<&'a [u8]>,
}

fn digits(text: &[u8], at: usize) -> usize {
    text[at..].iter().take_while(|b| b.is_ascii_digit()).count()
}

/// `text` starts with `lead`, then digits, then `tail`: the digits and the offset after `tail`.
fn field<'a>(text: &'a [u8], at: usize, lead: &[u8], tail: &[u8]) -> Option<(&'a [u8], usize)> {
    let rest = text.get(at..)?;
    if !rest.starts_with(lead) {
        return None;
    }
    let from = at + lead.len();
    let n = digits(text, from);
    if n == 0 || !text[from + n..].starts_with(tail) {
        return None;
    }
    Some((&text[from..from + n], from + n + tail.len()))
}

/// The id prefix of a first line (None: the line has none, as the grammar's rule has it).
pub fn id_prefix(line: &[u8]) -> Option<Prefix<'_>> {
    if line.first() != Some(&b'[') {
        return None;
    }
    // the candidate ends at the first "] ": the prefix must be all of it
    let end = memchr::memchr_iter(b']', line).find(|&at| line.get(at + 1) == Some(&b' '))? + 2;
    let cand = &line[..end];
    if let Some((conn, at)) = field(cand, 0, b"[C", b"]") {
        if at + 1 == end && cand[at] == b' ' {
            return Some(Prefix { form: 1, len: end, conn, stream: None });
        }
        if let Some((stream, at)) = field(cand, at, b"[S", b"]") {
            if at + 1 == end && cand[at] == b' ' {
                return Some(Prefix { form: 2, len: end, conn, stream: Some(stream) });
            }
        }
        return None;
    }
    /// (the first form, the quote, the text before the connection id, the text before the stream id)
    type Tags = (Form, &'static [u8], &'static [u8], &'static [u8]);
    const TAGS: [Tags; 2] = [
        (3, b"\"", b"[Tags: \"ConnectionId\":\"", b",\"StreamId\":\""),
        (5, b"\\\"", b"[Tags: \\\"ConnectionId\\\":\\\"", b",\\\"StreamId\\\":\\\""),
    ];
    for (form, quote, conn_lead, stream_lead) in TAGS {
        let Some((conn, at)) = field(cand, 0, conn_lead, quote) else { continue };
        if &cand[at..] == b"] " {
            return Some(Prefix { form, len: end, conn, stream: None });
        }
        if let Some((stream, at)) = field(cand, at, stream_lead, quote) {
            if &cand[at..] == b"] " {
                return Some(Prefix { form: form + 1, len: end, conn, stream: Some(stream) });
            }
        }
        return None;
    }
    None
}

/// Decimal digits as a number of at most `max` (None: larger).
pub fn number(digits: &[u8], max: u64) -> Option<u64> {
    let mut value: u64 = 0;
    for d in digits {
        value = value.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    (value <= max).then_some(value)
}

/// FxHash (rustc's): the keys are short texts, hashed once each; SipHash's resistance to chosen keys is not
/// needed for grouping a log's lines.
#[derive(Default)]
struct Fx(u64);

impl Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.add(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
        }
        for &b in chunks.remainder() {
            self.add(u64::from(b));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

impl Fx {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

pub struct Classes {
    /// per record: its class (classes numbered in order of first appearance)
    pub class: Vec<u32>,
    /// per record: the ids of its prefix (null: no prefix, or a number too large for the column's type)
    pub conn: NullableBuilder,
    pub stream: NullableBuilder,
    /// per class: its first record, the length of its id prefix and the prefix's form
    pub first: Vec<u32>,
    pub prefix_len: Vec<i64>,
    pub form: Vec<Form>,
}

pub fn classes(loggers: &[Option<&[u8]>], lines: &[Option<&[u8]>]) -> Classes {
    let n = lines.len();
    let mut out = Classes {
        class: Vec::with_capacity(n),
        conn: NullableBuilder::with_capacity(n),
        stream: NullableBuilder::with_capacity(n),
        first: Vec::new(),
        prefix_len: Vec::new(),
        form: Vec::new(),
    };
    type Key<'a> = (Option<&'a [u8]>, Form, &'a [u8]);
    let mut seen: HashMap<Key, u32, BuildHasherDefault<Fx>> = HashMap::default();
    for (row, (&logger, &line)) in loggers.iter().zip(lines).enumerate() {
        let line = line.unwrap_or(b"");
        let prefix = id_prefix(line);
        let (form, len) = prefix.as_ref().map_or((0, 0), |p| (p.form, p.len));
        out.conn.push(prefix.as_ref().and_then(|p| number(p.conn, i64::MAX as u64)));
        out.stream.push(prefix.as_ref().and_then(|p| p.stream).and_then(|s| number(s, u64::MAX)));
        let next = out.first.len() as u32;
        let class = *seen.entry((logger, form, &line[len..])).or_insert(next);
        if class == next {
            out.first.push(row as u32);
            out.prefix_len.push(len as i64);
            out.form.push(form);
        }
        out.class.push(class);
    }
    out
}

/// What of each value `distinct` groups by: all of it, its bytes from an offset on, or its first characters.
#[derive(Clone, Copy)]
pub enum Part {
    Whole,
    FromByte(usize),
    HeadChars(usize),
}

impl Part {
    fn of(self, value: &[u8]) -> &[u8] {
        match self {
            Part::Whole => value,
            Part::FromByte(at) => &value[at.min(value.len())..],
            Part::HeadChars(n) => {
                // (UTF-8: a character starts at every byte that is not a continuation byte 0b10xxxxxx)
                let end = value.iter().enumerate().filter(|(_, &b)| b & 0xC0 != 0x80).nth(n).map_or(value.len(), |(i, _)| i);
                &value[..end]
            }
        }
    }
}

/// Rows grouped by value (`part` of it), as `parser/distinct.py`'s `distinct` numbers them: the non-null values
/// in order of first appearance, then nulls (one group, the last). Returns (per group its first row, per row its
/// group).
pub fn distinct(values: &[Option<&[u8]>], part: Part) -> (Vec<u32>, Vec<u32>) {
    let mut seen: HashMap<&[u8], u32, BuildHasherDefault<Fx>> = HashMap::default();
    let mut first = Vec::new();
    let mut index = Vec::with_capacity(values.len());
    let mut first_null = None;
    // (values come in runs: a second's lines, a thread's: the previous row's group is tried first)
    let mut last: Option<(&[u8], u32)> = None;
    for (row, value) in values.iter().enumerate() {
        match *value {
            Some(v) => {
                let v = part.of(v);
                let group = match last {
                    Some((text, group)) if text == v => group,
                    _ => {
                        let next = first.len() as u32;
                        let group = *seen.entry(v).or_insert(next);
                        if group == next {
                            first.push(row as u32);
                        }
                        last = Some((v, group));
                        group
                    }
                };
                index.push(group);
            }
            None => {
                first_null.get_or_insert(row as u32);
                index.push(u32::MAX);
            }
        }
    }
    if let Some(row) = first_null {
        let group = first.len() as u32;
        first.push(row);
        for i in index.iter_mut().filter(|i| **i == u32::MAX) {
            *i = group;
        }
    }
    (first, index)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_prefix_reads_every_spelling_of_the_grammar_rule() {
        let plain = id_prefix(b"[C12] read").unwrap();
        assert_eq!((plain.form, plain.len, plain.conn, plain.stream), (1, 6, &b"12"[..], None));
        let stream = id_prefix(b"[C1][S34] done").unwrap();
        assert_eq!((stream.form, stream.len, stream.stream), (2, 10, Some(&b"34"[..])));
        let tags = id_prefix(br#"[Tags: "ConnectionId":"7","StreamId":"8"] x"#).unwrap();
        assert_eq!((tags.form, tags.conn, tags.stream), (4, &b"7"[..], Some(&b"8"[..])));
        let escaped = id_prefix(br#"[Tags: \"ConnectionId\":\"7\"] x"#).unwrap();
        assert_eq!((escaped.form, escaped.len), (5, 31));
    }

    #[test]
    fn id_prefix_is_all_of_the_text_up_to_the_first_bracket_space() {
        for line in [&b"no prefix"[..], b"[C] x", b"[C1]x", b"[C1] ", b"[C1][X2] y", b"[C1]] y", b"[Tags: \"ConnectionId\":\"\"] x"] {
            if line == b"[C1] " {
                assert!(id_prefix(line).is_some());
                continue;
            }
            assert!(id_prefix(line).is_none(), "{}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn number_refuses_what_does_not_fit() {
        assert_eq!(number(b"0", 10), Some(0));
        assert_eq!(number(b"9223372036854775807", i64::MAX as u64), Some(i64::MAX as u64));
        assert_eq!(number(b"9223372036854775808", i64::MAX as u64), None);
        assert_eq!(number(b"99999999999999999999", u64::MAX), None);
    }

    #[test]
    fn classes_set_the_ids_aside() {
        let loggers = [Some(&b"http"[..]), Some(b"http"), Some(b"conn"), None];
        let lines = [Some(&b"[C1][S2] done"[..]), Some(b"[C3][S4] done"), Some(b"[C1][S2] done"), None];
        let found = classes(&loggers, &lines);
        assert_eq!(found.class, vec![0, 0, 1, 2]);
        assert_eq!(found.first, vec![0, 2, 3]);
        assert_eq!(found.prefix_len, vec![9, 9, 0]);
        assert_eq!(found.form, vec![2, 2, 0]);
    }

    #[test]
    fn distinct_numbers_values_in_order_of_first_appearance_nulls_last() {
        let values = [None, Some(&b"b"[..]), Some(b"a"), Some(b"b"), None, Some(b"a")];
        assert_eq!(distinct(&values, Part::Whole), (vec![1, 2, 0], vec![2, 0, 1, 0, 2, 1]));
        let texts = [Some(&b"xa"[..]), Some(b"ya"), Some(b"zb")];
        assert_eq!(distinct(&texts, Part::FromByte(1)), (vec![0, 2], vec![0, 0, 1]));
        assert_eq!(distinct(&texts, Part::FromByte(5)), (vec![0], vec![0, 0, 0]));
    }

    #[test]
    fn head_chars_counts_characters_not_bytes() {
        let texts = [Some("éa".as_bytes()), Some("éb".as_bytes()), Some("e".as_bytes())];
        assert_eq!(Part::HeadChars(1).of(texts[0].unwrap()), "é".as_bytes());
        assert_eq!(distinct(&texts, Part::HeadChars(1)), (vec![0, 2], vec![0, 0, 1]));
        assert_eq!(Part::HeadChars(0).of(b"abc"), b"");
    }
}
