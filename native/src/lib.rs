//! The envelope of a text log in one pass over its bytes (`parser/native.py` is the Python side).
//!
//! `scan_text` does what `parser/envelope.py`'s `split_text` does with several polars passes up to the typed
//! fields: split lines, find each record's prefix with the format's start regex, fold continuation lines
//! into their record's message, cut the format's suffix, and set aside the lines that belong to no record.
//! The regexes are the ones the polars path uses, run by the same engine (the `regex` crate), so the two
//! paths agree line for line; a test compares them on every fixture. A block the scan does not handle
//! exactly as the line splitter does (a carriage return, invalid UTF-8, a line over the length limit, a
//! prefix found elsewhere than at the line's start) gets `None`: the caller takes the polars path.

mod alloc;
mod arrow;
mod classes;

#[global_allocator]
static ALLOCATOR: alloc::LargeByMmap = alloc::LargeByMmap;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCapsule, PyDict};
use regex::Regex;

use arrow::{export, import_stream, Buffers};

/// A dict of Arrow columns (`(schema, array)` capsule pairs, as `__arrow_c_array__` returns them) by name.
fn columns<'py>(py: Python<'py>, named: Vec<(&str, Buffers)>) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (name, buffers) in named {
        let pair: (Bound<'py, PyCapsule>, Bound<'py, PyCapsule>) = export(py, buffers)?;
        dict.set_item(name, pair)?;
    }
    Ok(dict)
}

fn compile(pattern: &str) -> PyResult<Regex> {
    Regex::new(pattern).map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
}

/// Lines as the polars path splits them: on `\n`, a final `\n` ending the last line.
fn lines(text: &str) -> std::str::Split<'_, char> {
    text.strip_suffix('\n').unwrap_or(text).split('\n')
}

struct Strings {
    offsets: Vec<i64>,
    data: Vec<u8>,
}

impl Strings {
    fn new() -> Self {
        Strings { offsets: vec![0], data: Vec::new() }
    }
    fn push(&mut self, text: &str) {
        self.data.extend_from_slice(text.as_bytes());
        self.end();
    }
    fn end(&mut self) {
        self.offsets.push(self.data.len() as i64);
    }
    fn buffers(self) -> Buffers {
        Buffers::Utf8 { offsets: self.offsets, data: self.data }
    }
}

struct Scan {
    line_no: Vec<i64>,
    n_lines: Vec<i64>,
    message: Strings,
    prefix: Strings,
    suffix: Option<Strings>,
    bad_line_no: Vec<i64>,
    bad_raw: Strings,
}

struct Patterns {
    start: Regex,
    prefix_can_be_empty: bool,
    suffix: Option<Regex>,
    continuation: Regex,
    message_continues: Regex,
    max_line: usize,
}

impl Scan {
    /// Cut the suffix off the record whose message is open (its bytes from `from`) and close it.
    fn close(&mut self, from: usize, suffix: &Option<Regex>) {
        if let (Some(re), Some(out)) = (suffix, self.suffix.as_mut()) {
            // (the message is made of whole UTF-8 lines joined by '\n')
            let message = unsafe { std::str::from_utf8_unchecked(&self.message.data[from..]) };
            let at = re.find(message).map_or(message.len(), |m| m.start());
            out.push(&message[at..]);
            self.message.data.truncate(from + at);
        }
        self.message.end();
    }
}

fn scan(parts: &[&[u8]], first_line_no: i64, p: &Patterns) -> Option<Scan> {
    let size: usize = parts.iter().map(|part| part.len()).sum();
    let mut out = Scan {
        line_no: Vec::new(),
        n_lines: Vec::new(),
        message: Strings { offsets: vec![0], data: Vec::with_capacity(size) },
        prefix: Strings::new(),
        suffix: p.suffix.as_ref().map(|_| Strings::new()),
        bad_line_no: Vec::new(),
        bad_raw: Strings::new(),
    };
    let mut line_no = first_line_no;
    let mut opener = false; // the last record's first line ends with ':'
    let mut open_from: Option<usize> = None; // where the open record's message starts
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
                if let Some(from) = open_from {
                    out.close(from, &p.suffix);
                }
                open_from = Some(out.message.data.len());
                out.message.data.extend_from_slice(line[end..].as_bytes());
                out.prefix.push(&line[..end]);
                out.line_no.push(line_no);
                out.n_lines.push(1);
                opener = line.ends_with(':');
            } else if open_from.is_some()
                && (opener || p.continuation.is_match(line) || p.message_continues.is_match(line))
            {
                out.message.data.push(b'\n');
                out.message.data.extend_from_slice(line.as_bytes());
                *out.n_lines.last_mut().expect("a record is open") += 1;
            } else {
                out.bad_line_no.push(line_no);
                out.bad_raw.push(line);
            }
            line_no += 1;
        }
    }
    if let Some(from) = open_from {
        out.close(from, &p.suffix);
    }
    Some(out)
}

/// The envelope of `parts` (`(bytes, stop)`: the bytes before `stop` of each; whole lines, in order; the first line is number `first_line_no`): a dict of
/// Arrow columns (`(schema, array)` capsule pairs) — per record `line_no`, `n_lines`, `message` (continuation
/// lines folded in, the suffix cut off), `prefix` (the first line up to the message) and, with a suffix
/// pattern, `suffix`; per line that belongs to no record `bad_line_no` and `bad_raw` — or None when the
/// block must take the polars path.
#[pyfunction]
#[pyo3(signature = (parts, first_line_no, start, prefix_can_be_empty, suffix, continuation, message_continues, max_line))]
#[allow(clippy::too_many_arguments)]
fn scan_text<'py>(
    py: Python<'py>,
    parts: Vec<(Bound<'py, PyBytes>, usize)>,
    first_line_no: i64,
    start: &str,
    prefix_can_be_empty: bool,
    suffix: Option<&str>,
    continuation: &str,
    message_continues: &str,
    max_line: usize,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let patterns = Patterns {
        start: compile(start)?,
        prefix_can_be_empty,
        suffix: suffix.map(compile).transpose()?,
        continuation: compile(continuation)?,
        message_continues: compile(message_continues)?,
        max_line,
    };
    let slices: Vec<&[u8]> = parts.iter().map(|(part, stop)| &part.as_bytes()[..(*stop).min(part.as_bytes().len())]).collect();
    let found = py.allow_threads(|| scan(&slices, first_line_no, &patterns));
    let Some(found) = found else { return Ok(None) };
    let mut named = vec![
        ("line_no", Buffers::I64(found.line_no)),
        ("n_lines", Buffers::I64(found.n_lines)),
        ("message", found.message.buffers()),
        ("prefix", found.prefix.buffers()),
    ];
    if let Some(suffix) = found.suffix {
        named.push(("suffix", suffix.buffers()));
    }
    named.push(("bad_line_no", Buffers::I64(found.bad_line_no)));
    named.push(("bad_raw", found.bad_raw.buffers()));
    columns(py, named).map(Some)
}

/// Byte offset of the last line of `data` that starts a record as the polars path decides it (the line,
/// decoded as it decodes it, matches `start` and not `header_line`; a line over `max_line` bytes is a
/// marker, not a start); None when no line does.
#[pyfunction]
#[pyo3(signature = (data, start, header_line, max_line))]
fn last_start(py: Python<'_>, data: &[u8], start: &str, header_line: &str, max_line: usize) -> PyResult<Option<usize>> {
    let start = compile(start)?;
    let header_line = compile(header_line)?;
    Ok(py.allow_threads(|| {
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
    }))
}

/// Newlines in the bytes of `data` before `stop`.
#[pyfunction]
fn count_newlines(py: Python<'_>, data: &[u8], stop: usize) -> usize {
    let data = &data[..stop.min(data.len())];
    py.allow_threads(|| memchr::memchr_iter(b'\n', data).count())
}

/// The record classes of `classify.classify_distinct` (see `classes.rs`) from two columns' Arrow streams
/// (`Series.__arrow_c_stream__()`: the records' `logger` and `first_line`): a dict of Arrow columns — per
/// record `class` (u32), `conn` (i64) and `stream` (u64, null without an id); per class `first` (its first
/// record), `prefix_len` and `form`.
#[pyfunction]
fn record_classes<'py>(
    py: Python<'py>,
    loggers: &Bound<'py, PyCapsule>,
    lines: &Bound<'py, PyCapsule>,
) -> PyResult<Bound<'py, PyDict>> {
    let loggers = import_stream(loggers)?;
    let lines = import_stream(lines)?;
    let found = py.allow_threads(|| {
        let (loggers, lines) = (loggers.values(), lines.values());
        if loggers.len() != lines.len() {
            return None;
        }
        Some(classes::classes(&loggers, &lines))
    });
    let Some(found) = found else {
        return Err(pyo3::exceptions::PyValueError::new_err("the two columns differ in length"));
    };
    columns(py, vec![
        ("conn", found.conn.finish(false)),
        ("stream", found.stream.finish(true)),
        ("class", Buffers::U32(found.class)),
        ("first", Buffers::U32(found.first)),
        ("prefix_len", Buffers::I64(found.prefix_len)),
        ("form", Buffers::U8(found.form)),
    ])
}

/// `parser/distinct.py`'s `distinct` of a text or bytes column's Arrow stream: `(first, index)`, Arrow u32
/// columns (per group its first row; per row its group). Values are grouped by their bytes from `from_byte` on,
/// or by their first `head_chars` characters.
#[pyfunction]
#[pyo3(signature = (values, from_byte=0, head_chars=None))]
fn distinct<'py>(
    py: Python<'py>,
    values: &Bound<'py, PyCapsule>,
    from_byte: usize,
    head_chars: Option<usize>,
) -> PyResult<Bound<'py, PyDict>> {
    let values = import_stream(values)?;
    let part = match (from_byte, head_chars) {
        (0, None) => classes::Part::Whole,
        (at, None) => classes::Part::FromByte(at),
        (0, Some(n)) => classes::Part::HeadChars(n),
        _ => return Err(pyo3::exceptions::PyValueError::new_err("from_byte or head_chars, not both")),
    };
    let (first, index) = py.allow_threads(|| classes::distinct(&values.values(), part));
    columns(py, vec![("first", Buffers::U32(first)), ("index", Buffers::U32(index))])
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(distinct, m)?)?;
    m.add_function(wrap_pyfunction!(record_classes, m)?)?;
    m.add_function(wrap_pyfunction!(count_newlines, m)?)?;
    m.add_function(wrap_pyfunction!(scan_text, m)?)?;
    m.add_function(wrap_pyfunction!(last_start, m)?)?;
    Ok(())
}
