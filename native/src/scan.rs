//! The envelope of a text log in one pass over its bytes, and the helpers that cut a block at a record start.
//!
//! `scan` does what `parser/envelope.py`'s `split_text` does with several polars passes up to the typed
//! fields: split lines, find each record's prefix with the format's start regex, fold continuation lines
//! into their record's message, cut the format's suffix, and set aside the lines that belong to no record.
//! The regexes are the ones the polars path uses, run by the same engine (the `regex` crate), so the two
//! paths agree line for line; a Python test compares them on every fixture. A block the scan does not handle
//! exactly as the line splitter does (a carriage return, invalid UTF-8, a line over the length limit, a
//! prefix found elsewhere than at the line's start) gets `None`: the caller takes the polars path.

use regex::Regex;
use regex_automata::meta;
use regex_automata::Input;

use crate::arrow::{TextBuilder, ViewBuilder};

/// Lines as the polars path splits them: on `\n`, a final `\n` ending the last line.
fn lines(text: &str) -> std::str::Split<'_, char> {
    text.strip_suffix('\n').unwrap_or(text).split('\n')
}

/// The columns found. `prefix`, `suffix` and `bad_raw` are views into the scanned parts (`ViewBuilder::finish`
/// with the parts as its blocks, in order): those bytes are not copied. A message is copied (its column outlives
/// the block in the analysis, and a block is twice its messages' size).
pub struct Scan {
    pub line_no: Vec<i64>,
    pub n_lines: Vec<i64>,
    pub message: TextBuilder,
    pub prefix: ViewBuilder,
    pub suffix: Option<ViewBuilder>,
    pub bad_line_no: Vec<i64>,
    pub bad_raw: ViewBuilder,
}

/// Where the open record's message is in the parts: it is the bytes of part `part` from `start` to `end` while
/// `whole` (its lines follow one another there: the newlines that join them are the parts' own).
struct Open {
    part: usize,
    start: usize,
    end: usize,
    whole: bool,
}

pub struct Patterns {
    /// (the start and suffix regexes are searched once a line and once a record: by the engine under `regex`'s
    /// `Regex`, the same matches, with the scan's own caches instead of a cache pool's per search)
    pub start: meta::Regex,
    pub prefix_can_be_empty: bool,
    pub suffix: Option<meta::Regex>,
    pub continuation: Regex,
    pub message_continues: Regex,
    /// the line length limit in bytes (0: none)
    pub max_line: usize,
}

impl Scan {
    /// Cut the suffix off the open record's message and close it. False: a suffix to copy would not fit.
    fn close(&mut self, suffix: &mut Option<(&meta::Regex, meta::Cache)>, open: &Open) -> bool {
        if let (Some((re, cache)), Some(out)) = (suffix, self.suffix.as_mut()) {
            let message = self.message.open();
            let at = re.search_with(cache, &Input::new(message)).map_or(message.len(), |m| m.start());
            if open.whole {
                out.push_in(open.part, open.start + at, &message[at..]);
            } else if !out.push_copy(&message[at..]) {
                return false;
            }
            self.message.cut_open(at);
        }
        self.message.end();
        true
    }
}

/// The records of `parts` (whole lines, in order; the first line is number `first_line_no`), or None when the
/// block must take the polars path.
pub fn scan(parts: &[&[u8]], first_line_no: i64, p: &Patterns) -> Option<Scan> {
    let size: usize = parts.iter().map(|part| part.len()).sum();
    if size > u32::MAX as usize {
        return None; // (views address a part's bytes, and their own buffer's, by 32-bit offsets)
    }
    let mut out = Scan {
        line_no: Vec::new(),
        n_lines: Vec::new(),
        message: TextBuilder::with_capacity(size),
        prefix: ViewBuilder::new(parts.len()),
        suffix: p.suffix.as_ref().map(|_| ViewBuilder::new(parts.len())),
        bad_line_no: Vec::new(),
        bad_raw: ViewBuilder::new(parts.len()),
    };
    let mut start_cache = p.start.create_cache();
    let mut suffix = p.suffix.as_ref().map(|re| (re, re.create_cache()));
    let mut line_no = first_line_no;
    let mut opener = false; // the last record's first line ends with ':'
    let mut open: Option<Open> = None; // the record whose message is open
    for (index, part) in parts.iter().enumerate() {
        if part.is_empty() {
            continue;
        }
        if memchr::memchr(b'\r', part).is_some() {
            return None;
        }
        let text = std::str::from_utf8(part).ok()?;
        for line in lines(text) {
            if p.max_line > 0 && line.len() > p.max_line {
                return None;
            }
            let at = line.as_ptr() as usize - text.as_ptr() as usize; // the line's offset in the part
            let start = match p.start.search_with(&mut start_cache, &Input::new(line)) {
                Some(m) if m.start() != 0 => return None,
                Some(m) if m.end() > 0 || p.prefix_can_be_empty => Some(m.end()),
                _ => None,
            };
            if let Some(end) = start {
                if let Some(record) = open.take() {
                    if !out.close(&mut suffix, &record) {
                        return None;
                    }
                }
                open = Some(Open { part: index, start: at + end, end: at + line.len(), whole: true });
                out.message.append(&line[end..]);
                out.prefix.push_in(index, at, &line[..end]);
                out.line_no.push(line_no);
                out.n_lines.push(1);
                opener = line.ends_with(':');
            } else if let Some(record) = open.as_mut().filter(|_| {
                opener || p.continuation.is_match(line) || p.message_continues.is_match(line)
            }) {
                record.whole = record.whole && record.part == index && record.end + 1 == at;
                record.end = at + line.len();
                out.message.append("\n");
                out.message.append(line);
                *out.n_lines.last_mut().expect("a record is open") += 1;
            } else {
                out.bad_line_no.push(line_no);
                out.bad_raw.push_in(index, at, line);
            }
            line_no += 1;
        }
    }
    if let Some(record) = open {
        if !out.close(&mut suffix, &record) {
            return None;
        }
    }
    Some(out)
}

/// Byte offset of the last line of `data` that starts a record as the polars path decides it (the line,
/// decoded as it decodes it, matches `start` and not `header_line`; a line over `max_line` bytes is a
/// marker, not a start); None when no line does.
pub fn last_start(data: &[u8], start: &Regex, header_line: &Regex, max_line: usize) -> Option<usize> {
    let mut end = data.len();
    if data.ends_with(b"\n") {
        end -= 1;
    }
    loop {
        let begin = memchr::memrchr(b'\n', &data[..end]).map_or(0, |at| at + 1);
        let mut line = &data[begin..end];
        if line.ends_with(b"\r") {
            line = &line[..line.len() - 1];
        }
        if max_line == 0 || line.len() <= max_line {
            let text = String::from_utf8_lossy(line);
            if start.is_match(&text) && !header_line.is_match(&text) {
                return Some(begin);
            }
        }
        if begin == 0 {
            return None;
        }
        end = begin - 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patterns(suffix: Option<&str>, max_line: usize) -> Patterns {
        Patterns {
            start: meta::Regex::new(r"^\[(?P<ts>\d+)\]\[(?P<level>\w+)\] ").unwrap(),
            prefix_can_be_empty: false,
            suffix: suffix.map(|s| meta::Regex::new(s).unwrap()),
            continuation: Regex::new(r"^(?:'[^']*', '.*'|\s*|\t?thread=\d+)$").unwrap(),
            message_continues: Regex::new(r"^(?:[ \t]+[^\s]|[}\])][,;]?[ \t]*$)").unwrap(),
            max_line,
        }
    }

    fn texts(builder: TextBuilder) -> Vec<String> {
        read(builder.finish())
    }

    fn read(column: arrow_array::ArrayRef) -> Vec<String> {
        use arrow_array::cast::AsArray;
        match column.data_type() {
            arrow_schema::DataType::Utf8View => {
                column.as_string_view().iter().map(|v| v.expect("no nulls").to_string()).collect()
            }
            _ => column.as_string::<i64>().iter().map(|v| v.expect("no nulls").to_string()).collect(),
        }
    }

    /// A view column over `parts` (each as a buffer of its own, as the bindings make them), checked as
    /// `StringViewArray::try_new` checks it.
    fn views(builder: ViewBuilder, parts: &[&[u8]]) -> Vec<String> {
        use arrow_array::cast::AsArray;
        let blocks: Vec<arrow_buffer::Buffer> = parts.iter().map(|p| arrow_buffer::Buffer::from_vec(p.to_vec())).collect();
        let column = builder.finish(&blocks);
        let checked = arrow_array::StringViewArray::try_new(
            column.as_string_view().views().clone(),
            column.as_string_view().data_buffers().to_vec(),
            None,
        );
        assert!(checked.is_ok(), "{checked:?}");
        read(column)
    }

    #[test]
    fn folds_continuations_and_sets_aside_stray_lines() {
        let block: &[u8] = b"stray\n[1][debug] first:\nany text after an opener\n[2][info] second\n  indented\nnot a record\n";
        let found = scan(&[block], 10, &patterns(None, 0)).unwrap();
        assert_eq!(found.line_no, vec![11, 13]);
        assert_eq!(found.n_lines, vec![2, 2]);
        assert_eq!(texts(found.message), vec!["first:\nany text after an opener", "second\n  indented"]);
        assert_eq!(views(found.prefix, &[block]), vec!["[1][debug] ", "[2][info] "]);
        assert_eq!(found.bad_line_no, vec![10, 15]);
        assert_eq!(views(found.bad_raw, &[block]), vec!["stray", "not a record"]);
        assert!(found.suffix.is_none());
    }

    #[test]
    fn numbers_lines_across_parts_and_a_last_line_without_newline() {
        let parts: [&[u8]; 3] = [b"[1][a] x\n", b"", b"[2][b] y"];
        let found = scan(&parts, 1, &patterns(None, 0)).unwrap();
        assert_eq!(found.line_no, vec![1, 2]);
        assert_eq!(texts(found.message), vec!["x", "y"]);
        assert_eq!(views(found.prefix, &parts), vec!["[1][a] ", "[2][b] "]);
    }

    #[test]
    fn cuts_the_suffix_off_the_folded_message() {
        let block = "[1][a] text\tthread=7\n[2][b] more ü\n\tthread=8\n".as_bytes();
        let found = scan(&[block], 1, &patterns(Some(r"\tthread=\d+$"), 0)).unwrap();
        assert_eq!(texts(found.message), vec!["text", "more ü\n"]);
        assert_eq!(views(found.suffix.unwrap(), &[block]), vec!["\tthread=7", "\tthread=8"]);
    }

    #[test]
    fn copies_a_suffix_whose_record_is_not_one_run_of_bytes() {
        // a record continued in the next part, and one with a stray line inside: their folded messages are
        // not bytes of a part, so their suffixes (over 12 bytes: not inlined) are copied
        let parts: [&[u8]; 2] = [
            b"[1][a] first\n",
            b"\tthread=123456789\n[2][b] second\nstray\n\tthread=987654321\n[3][c] third\tthread=555555555\n",
        ];
        let found = scan(&parts, 1, &patterns(Some(r"\tthread=\d+$"), 0)).unwrap();
        assert_eq!(texts(found.message), vec!["first\n", "second\n", "third"]);
        assert_eq!(found.n_lines, vec![2, 2, 1]);
        assert_eq!(
            views(found.suffix.unwrap(), &parts),
            vec!["\tthread=123456789", "\tthread=987654321", "\tthread=555555555"]
        );
        assert_eq!(views(found.bad_raw, &parts), vec!["stray"]);
        assert_eq!(views(found.prefix, &parts), vec!["[1][a] ", "[2][b] ", "[3][c] "]);
    }

    #[test]
    fn leaves_to_the_polars_path_what_it_does_not_split_alike() {
        let p = patterns(None, 0);
        assert!(scan(&[b"[1][a] x\r\n"], 1, &p).is_none(), "carriage return");
        assert!(scan(&[b"[1][a] \xff\n"], 1, &p).is_none(), "invalid UTF-8");
        assert!(scan(&[b"[1][a] a long line\n"], 1, &patterns(None, 8)).is_none(), "over the length limit");
        let unanchored = Patterns { start: meta::Regex::new(r"\[(\d+)\]\[\w+\] ").unwrap(), ..patterns(None, 0) };
        assert!(scan(&[b"x [1][a] y\n"], 1, &unanchored).is_none(), "a prefix past the line's start");
    }

    #[test]
    fn last_start_is_the_last_record_start_not_a_header_line() {
        let start = Regex::new(r"^\[\d+\]").unwrap();
        let header = Regex::new(r"^\[\d+\] header").unwrap();
        let data = b"[1] a\n  more\n[2] b\r\n[3] header\ncont\n";
        assert_eq!(last_start(data, &start, &header, 0), Some(13));
        assert_eq!(last_start(b"[1] a\n", &start, &header, 0), Some(0));
        assert_eq!(last_start(b"x\ny\n", &start, &header, 0), None);
        assert_eq!(last_start(b"[1] a\n[2] a long line\n", &start, &header, 8), Some(0));
    }
}
