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

use crate::arrow::TextBuilder;

/// Lines as the polars path splits them: on `\n`, a final `\n` ending the last line.
fn lines(text: &str) -> std::str::Split<'_, char> {
    text.strip_suffix('\n').unwrap_or(text).split('\n')
}

pub struct Scan {
    pub line_no: Vec<i64>,
    pub n_lines: Vec<i64>,
    pub message: TextBuilder,
    pub prefix: TextBuilder,
    pub suffix: Option<TextBuilder>,
    pub bad_line_no: Vec<i64>,
    pub bad_raw: TextBuilder,
}

pub struct Patterns {
    pub start: Regex,
    pub prefix_can_be_empty: bool,
    pub suffix: Option<Regex>,
    pub continuation: Regex,
    pub message_continues: Regex,
    /// the line length limit in bytes (0: none)
    pub max_line: usize,
}

impl Scan {
    /// Cut the suffix off the open record's message and close it.
    fn close(&mut self, suffix: &Option<Regex>) {
        if let (Some(re), Some(out)) = (suffix, self.suffix.as_mut()) {
            let message = self.message.open();
            let at = re.find(message).map_or(message.len(), |m| m.start());
            out.push(&message[at..]);
            self.message.cut_open(at);
        }
        self.message.end();
    }
}

/// The records of `parts` (whole lines, in order; the first line is number `first_line_no`), or None when the
/// block must take the polars path.
pub fn scan(parts: &[&[u8]], first_line_no: i64, p: &Patterns) -> Option<Scan> {
    let size: usize = parts.iter().map(|part| part.len()).sum();
    let mut out = Scan {
        line_no: Vec::new(),
        n_lines: Vec::new(),
        message: TextBuilder::with_capacity(size),
        prefix: TextBuilder::with_capacity(0),
        suffix: p.suffix.as_ref().map(|_| TextBuilder::with_capacity(0)),
        bad_line_no: Vec::new(),
        bad_raw: TextBuilder::with_capacity(0),
    };
    let mut line_no = first_line_no;
    let mut opener = false; // the last record's first line ends with ':'
    let mut open = false; // a record's message is open
    for part in parts {
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
            let start = match p.start.find(line) {
                Some(m) if m.start() != 0 => return None,
                Some(m) if m.end() > 0 || p.prefix_can_be_empty => Some(m.end()),
                _ => None,
            };
            if let Some(end) = start {
                if open {
                    out.close(&p.suffix);
                }
                open = true;
                out.message.append(&line[end..]);
                out.prefix.push(&line[..end]);
                out.line_no.push(line_no);
                out.n_lines.push(1);
                opener = line.ends_with(':');
            } else if open
                && (opener || p.continuation.is_match(line) || p.message_continues.is_match(line))
            {
                out.message.append("\n");
                out.message.append(line);
                *out.n_lines.last_mut().expect("a record is open") += 1;
            } else {
                out.bad_line_no.push(line_no);
                out.bad_raw.push(line);
            }
            line_no += 1;
        }
    }
    if open {
        out.close(&p.suffix);
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
            start: Regex::new(r"^\[(?P<ts>\d+)\]\[(?P<level>\w+)\] ").unwrap(),
            prefix_can_be_empty: false,
            suffix: suffix.map(|s| Regex::new(s).unwrap()),
            continuation: Regex::new(r"^(?:'[^']*', '.*'|\s*|\t?thread=\d+)$").unwrap(),
            message_continues: Regex::new(r"^(?:[ \t]+[^\s]|[}\])][,;]?[ \t]*$)").unwrap(),
            max_line,
        }
    }

    fn texts(builder: TextBuilder) -> Vec<String> {
        use arrow_array::cast::AsArray;
        let column = builder.finish();
        column.as_string::<i64>().iter().map(|v| v.expect("no nulls").to_string()).collect()
    }

    #[test]
    fn folds_continuations_and_sets_aside_stray_lines() {
        let block = b"stray\n[1][debug] first:\nany text after an opener\n[2][info] second\n  indented\nnot a record\n";
        let found = scan(&[block], 10, &patterns(None, 0)).unwrap();
        assert_eq!(found.line_no, vec![11, 13]);
        assert_eq!(found.n_lines, vec![2, 2]);
        assert_eq!(texts(found.message), vec!["first:\nany text after an opener", "second\n  indented"]);
        assert_eq!(texts(found.prefix), vec!["[1][debug] ", "[2][info] "]);
        assert_eq!(found.bad_line_no, vec![10, 15]);
        assert_eq!(texts(found.bad_raw), vec!["stray", "not a record"]);
        assert!(found.suffix.is_none());
    }

    #[test]
    fn numbers_lines_across_parts_and_a_last_line_without_newline() {
        let found = scan(&[b"[1][a] x\n", b"", b"[2][b] y"], 1, &patterns(None, 0)).unwrap();
        assert_eq!(found.line_no, vec![1, 2]);
        assert_eq!(texts(found.message), vec!["x", "y"]);
    }

    #[test]
    fn cuts_the_suffix_off_the_folded_message() {
        let found = scan(&["[1][a] text\tthread=7\n[2][b] more ü\n\tthread=8\n".as_bytes()], 1, &patterns(Some(r"\tthread=\d+$"), 0))
            .unwrap();
        assert_eq!(texts(found.message), vec!["text", "more ü\n"]);
        assert_eq!(texts(found.suffix.unwrap()), vec!["\tthread=7", "\tthread=8"]);
    }

    #[test]
    fn leaves_to_the_polars_path_what_it_does_not_split_alike() {
        let p = patterns(None, 0);
        assert!(scan(&[b"[1][a] x\r\n"], 1, &p).is_none(), "carriage return");
        assert!(scan(&[b"[1][a] \xff\n"], 1, &p).is_none(), "invalid UTF-8");
        assert!(scan(&[b"[1][a] a long line\n"], 1, &patterns(None, 8)).is_none(), "over the length limit");
        let unanchored = Patterns { start: Regex::new(r"\[(\d+)\]\[\w+\] ").unwrap(), ..patterns(None, 0) };
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
