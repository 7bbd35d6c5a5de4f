//! envoy-dissector's compiled parts (`parser/extension.py` is their one Python side): the envelope scan of a text
//! block (`scan.rs`), the record classes and distinct values of a column (`classes.rs`), header values out of
//! header dumps (`headers.rs`), as-of lookups and joins of small frames (`asof.rs`, `join.rs`,
//! `keys.rs`), one worker's event-loop slices and record gaps (`slices.rs`), over Arrow columns shared with
//! polars without a copy (`arrow.rs`). This file holds only the Python bindings.
//!
//! Every `unsafe` block says why it is sound in a `// SAFETY:` comment; clippy (in `.ci/check`) holds it to that.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod alloc;
mod arrow;
mod asof;
mod join;
mod keys;
mod classes;
mod headers;
mod redact;
mod scan;
mod slices;

#[global_allocator]
static ALLOCATOR: alloc::LargeByMmap = alloc::LargeByMmap;

use std::panic::AssertUnwindSafe;
use std::ptr::NonNull;
use std::sync::Arc;

use arrow_array::builder::LargeStringBuilder;
use arrow_array::types::{Int64Type, Int8Type, UInt32Type, UInt8Type};
use arrow_array::{ArrayRef, BooleanArray, UInt32Array};
use arrow_buffer::alloc::Allocation;
use arrow_buffer::Buffer;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCapsule, PyDict};
use regex::Regex;

use arrow::{
    column, export, import_stream, int64_lists, integers, int64_parts, looked_up, nulls, optional_int64, trues, value_error, values,
};

/// A dict of Arrow columns (`(schema, array)` capsule pairs, as `__arrow_c_array__` returns them) by name.
fn columns<'py>(py: Python<'py>, named: Vec<(&str, ArrayRef)>) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (name, array) in named {
        dict.set_item(name, export(py, &array)?)?;
    }
    Ok(dict)
}

fn compile(pattern: &str) -> PyResult<Regex> {
    Regex::new(pattern).map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
}

/// `pattern` for the engine under `Regex` (`regex_automata::meta`, what `Regex::new` builds): the same matches.
fn compile_meta(pattern: &str) -> PyResult<regex_automata::meta::Regex> {
    regex_automata::meta::Regex::new(pattern).map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
}

/// The envelope of `parts` (`(bytes, stop)`: the bytes before `stop` of each; whole lines, in order; the first
/// line is number `first_line_no`): a dict of Arrow columns (`(schema, array)` capsule pairs) — per record
/// `line_no`, `n_lines`, `message` (continuation lines folded in, the suffix cut off), `prefix` (the first line up
/// to the message) and, with a suffix pattern, `suffix`; per line that belongs to no record `bad_line_no` and
/// `bad_raw` — or None when the block must take the polars path.
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
    let patterns = scan::Patterns {
        start: compile_meta(start)?,
        prefix_can_be_empty,
        suffix: suffix.map(compile_meta).transpose()?,
        continuation: compile(continuation)?,
        message_continues: compile(message_continues)?,
        max_line,
    };
    let slices: Vec<&[u8]> = parts
        .iter()
        .map(|(part, stop)| {
            let bytes = part.as_bytes();
            &bytes[..(*stop).min(bytes.len())]
        })
        .collect();
    let found = py.allow_threads(|| scan::scan(&slices, first_line_no, &patterns));
    let Some(found) = found else { return Ok(None) };
    // the columns of views (prefix, suffix, stray lines) read the parts' bytes where Python holds them
    let blocks: Vec<Buffer> = parts.iter().zip(&slices).map(|((part, _), slice)| shared(part, slice)).collect();
    let mut named = vec![
        ("line_no", column::<Int64Type>(found.line_no)),
        ("n_lines", column::<Int64Type>(found.n_lines)),
        ("message", found.message.finish()),
        ("prefix", found.prefix.finish(&blocks)),
    ];
    if let Some(suffix) = found.suffix {
        named.push(("suffix", suffix.finish(&blocks)));
    }
    named.push(("bad_line_no", column::<Int64Type>(found.bad_line_no)));
    named.push(("bad_raw", found.bad_raw.finish(&blocks)));
    columns(py, named).map(Some)
}

/// Keeps a `bytes` object alive for the Arrow buffers that read its bytes; dropped on any thread (pyo3 defers
/// the reference count's decrement to the next holder of the GIL when the dropping thread has none).
struct HeldBytes(#[allow(dead_code)] AssertUnwindSafe<Py<PyBytes>>);

/// `slice` (bytes of `bytes`, from its start) as an Arrow buffer that shares them: no copy.
fn shared(bytes: &Bound<'_, PyBytes>, slice: &[u8]) -> Buffer {
    let Some(at) = NonNull::new(slice.as_ptr() as *mut u8) else { return Buffer::from_vec(Vec::<u8>::new()) };
    let owner: Arc<dyn Allocation> = Arc::new(HeldBytes(AssertUnwindSafe(bytes.clone().unbind())));
    // SAFETY: `slice` is `slice.len()` bytes of the `bytes` object's own buffer, valid while the object lives and
    // never changed (Python's `bytes` are immutable); the buffer holds `owner`, a strong reference to the
    // object, for as long as any array uses it, so the bytes outlive every reader.
    unsafe { Buffer::from_custom_allocation(at, slice.len(), owner) }
}

/// Byte offset of the last line of `data` that starts a record (`scan::last_start`); None when no line does.
#[pyfunction]
#[pyo3(signature = (data, start, header_line, max_line))]
fn last_start(py: Python<'_>, data: &[u8], start: &str, header_line: &str, max_line: usize) -> PyResult<Option<usize>> {
    let start = compile(start)?;
    let header_line = compile(header_line)?;
    Ok(py.allow_threads(|| scan::last_start(data, &start, &header_line, max_line)))
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
        let (loggers, lines) = (values(&loggers).map_err(value_error)?, values(&lines).map_err(value_error)?);
        if loggers.len() != lines.len() {
            return Err(pyo3::exceptions::PyValueError::new_err("the two columns differ in length"));
        }
        Ok(classes::classes(&loggers, &lines))
    })?;
    columns(py, vec![
        ("conn", found.conn.finish(false)),
        ("stream", found.stream.finish(true)),
        ("class", column::<UInt32Type>(found.class)),
        ("first", column::<UInt32Type>(found.first)),
        ("prefix_len", column::<Int64Type>(found.prefix_len)),
        ("form", column::<UInt8Type>(found.form)),
    ])
}

/// `parser/extension.py`'s `distinct` of a text or bytes column's Arrow stream: `(first, index)`, Arrow u32
/// columns (per group its first row; per row its group). Values are grouped by their bytes from `from_byte` on,
/// or by their first `head_chars` characters.
#[pyfunction]
#[pyo3(signature = (stream, from_byte=0, head_chars=None))]
fn distinct<'py>(
    py: Python<'py>,
    stream: &Bound<'py, PyCapsule>,
    from_byte: usize,
    head_chars: Option<usize>,
) -> PyResult<Bound<'py, PyDict>> {
    let arrays = import_stream(stream)?;
    let part = match (from_byte, head_chars) {
        (0, None) => classes::Part::Whole,
        (at, None) => classes::Part::FromByte(at),
        (0, Some(n)) => classes::Part::HeadChars(n),
        _ => return Err(pyo3::exceptions::PyValueError::new_err("from_byte or head_chars, not both")),
    };
    let (first, index) = py.allow_threads(|| Ok::<_, PyErr>(classes::distinct(&values(&arrays).map_err(value_error)?, part)))?;
    columns(py, vec![("first", column::<UInt32Type>(first)), ("index", column::<UInt32Type>(index))])
}

/// `parser/headers.py`'s header values (`headers.rs`) of a message column's Arrow stream: a dict of Arrow text
/// columns, one per name of `names`, per message the value of its first dump line of that name (null: none).
#[pyfunction]
fn header_values<'py>(
    py: Python<'py>,
    stream: &Bound<'py, PyCapsule>,
    names: Vec<String>,
) -> PyResult<Bound<'py, PyDict>> {
    let arrays = import_stream(stream)?;
    let found = py.allow_threads(|| {
        let messages = values(&arrays).map_err(value_error)?;
        let wanted: Vec<&[u8]> = names.iter().map(|n| n.as_bytes()).collect();
        let mut out = Vec::with_capacity(names.len());
        for column in headers::values(&messages, &wanted) {
            let bytes = column.iter().map(|v| v.map_or(0, <[u8]>::len)).sum();
            let mut builder = LargeStringBuilder::with_capacity(column.len(), bytes);
            for value in column {
                match value {
                    // (a value is cut from a text at quotes, so it is text; a column of bytes may hold other bytes)
                    Some(v) => builder.append_value(std::str::from_utf8(v).map_err(value_error)?),
                    None => builder.append_null(),
                }
            }
            out.push(Arc::new(builder.finish()) as ArrayRef);
        }
        Ok::<_, PyErr>(out)
    })?;
    columns(py, names.iter().map(String::as_str).zip(found).collect())
}

/// `parser/redact.py`'s redaction candidates (`redact.rs`): built once per set of rules, asked per message column.
#[pyclass(frozen)]
struct RedactionCandidates(redact::Candidates);

#[pymethods]
impl RedactionCandidates {
    #[new]
    fn new(marks: &str, words: Vec<String>, token: &str) -> PyResult<Self> {
        redact::Candidates::new(marks, &words, token).map(RedactionCandidates).map_err(value_error)
    }

    /// The candidate rows (an Arrow u32 column, `(schema, array)` capsules) of a message column's Arrow stream;
    /// `multiline`: a boolean column's stream, per row whether its message can hold a dump (None: every row).
    #[pyo3(signature = (stream, multiline=None))]
    fn rows<'py>(
        &self,
        py: Python<'py>,
        stream: &Bound<'py, PyCapsule>,
        multiline: Option<&Bound<'py, PyCapsule>>,
    ) -> PyResult<(Bound<'py, PyCapsule>, Bound<'py, PyCapsule>)> {
        let arrays = import_stream(stream)?;
        let multiline = multiline.map(import_stream).transpose()?;
        let rows = py.allow_threads(|| {
            let messages = values(&arrays).map_err(value_error)?;
            let can_hold = multiline.as_deref().map(trues).transpose().map_err(value_error)?;
            if can_hold.as_ref().is_some_and(|m| m.len() != messages.len()) {
                return Err(pyo3::exceptions::PyValueError::new_err("the columns differ in length"));
            }
            Ok(self.0.rows(&messages, can_hold.as_deref()))
        })?;
        export(py, &column::<UInt32Type>(rows))
    }
}

/// `analysis/stages/loop.py`'s `_thread_slices` of one worker's lines in time order (`slices.rs`), from the Arrow
/// streams of their `ts_us` (i64), `kind` (an Enum's physical codes) and `conn_id` (only whether it is null):
/// per slice `first_row`, `last_row` (u32), `opens` and `timer` (nullable booleans). `kind_bits` gives each kind
/// code its rules (`slices::SOCKET_EVENT`, `TIMER_RESUME`, `WAKE`; codes past its end: none).
#[pyfunction]
#[pyo3(signature = (ts, kinds, conn_ids, kind_bits, idle_gap, unattributed_idle))]
fn loop_slices<'py>(
    py: Python<'py>,
    ts: &Bound<'py, PyCapsule>,
    kinds: &Bound<'py, PyCapsule>,
    conn_ids: &Bound<'py, PyCapsule>,
    kind_bits: Vec<u8>,
    idle_gap: i64,
    unattributed_idle: i64,
) -> PyResult<Bound<'py, PyDict>> {
    let (ts, kinds, conn_ids) = (import_stream(ts)?, import_stream(kinds)?, import_stream(conn_ids)?);
    let found = py.allow_threads(|| {
        let (ts, bits) = (int64_parts(&ts).map_err(value_error)?, looked_up(&kinds, &kind_bits).map_err(value_error)?);
        let no_conn = nulls(&conn_ids);
        let rows = ts.iter().map(|part| part.len()).sum::<usize>();
        if bits.len() != rows || no_conn.len() != rows {
            return Err(pyo3::exceptions::PyValueError::new_err("the columns differ in length"));
        }
        let lines = ts.iter().flat_map(|part| part.iter().copied()).zip(bits).zip(no_conn).map(|((t, b), n)| (t, b, n));
        Ok(slices::slices(lines, &slices::Rules { idle_gap, unattributed_idle }))
    })?;
    columns(py, vec![
        ("first_row", column::<UInt32Type>(found.first_row)),
        ("last_row", column::<UInt32Type>(found.last_row)),
        ("opens", Arc::new(BooleanArray::from(found.opens)) as ArrayRef),
        ("timer", Arc::new(BooleanArray::from(found.timer)) as ArrayRef),
    ])
}

/// `analysis/gap_counts.py`'s `back_to_back` of one worker's lines in time order (`slices::record_gaps`), from the
/// Arrow streams of their `ts_us` (i64) and `kind` (an Enum's physical codes; `kind_bits` as for `loop_slices`):
/// `gap` (i64) and `idle` (i8, `classes[..]` by `warm_us` and `cooling_us`), per socket event from row `carried`
/// on that a ready line follows.
#[pyfunction]
#[pyo3(signature = (ts, kinds, kind_bits, carried, warm_us, cooling_us, classes))]
#[allow(clippy::too_many_arguments)]
fn record_gaps<'py>(
    py: Python<'py>,
    ts: &Bound<'py, PyCapsule>,
    kinds: &Bound<'py, PyCapsule>,
    kind_bits: Vec<u8>,
    carried: usize,
    warm_us: i64,
    cooling_us: i64,
    classes: [i8; 3],
) -> PyResult<Bound<'py, PyDict>> {
    let (ts, kinds) = (import_stream(ts)?, import_stream(kinds)?);
    let (gaps, idle) = py.allow_threads(|| {
        let (ts, bits) = (int64_parts(&ts).map_err(value_error)?, looked_up(&kinds, &kind_bits).map_err(value_error)?);
        if bits.len() != ts.iter().map(|part| part.len()).sum::<usize>() {
            return Err(pyo3::exceptions::PyValueError::new_err("the columns differ in length"));
        }
        let lines = ts.iter().flat_map(|part| part.iter().copied()).zip(bits);
        Ok(slices::record_gaps(lines, carried, &slices::IdleClasses { warm_us, cooling_us, classes }))
    })?;
    columns(py, vec![("gap", column::<Int64Type>(gaps)), ("idle", column::<Int8Type>(idle))])
}

/// `analysis/stages/loop.py`'s `_served_during` (`slices::served`): per queueing window, from the Arrow streams of
/// its slice range (`first`, `last`), its downstream and upstream connection and the worker's slices' connection
/// (`conns`; all i64, nullable), the other connections served in the range: an Arrow `List(Int64)` column.
#[pyfunction]
fn served_connections<'py>(
    py: Python<'py>,
    first: &Bound<'py, PyCapsule>,
    last: &Bound<'py, PyCapsule>,
    down: &Bound<'py, PyCapsule>,
    up: &Bound<'py, PyCapsule>,
    conns: &Bound<'py, PyCapsule>,
) -> PyResult<(Bound<'py, PyCapsule>, Bound<'py, PyCapsule>)> {
    let streams = [first, last, down, up, conns].map(import_stream);
    let [first, last, down, up, conns] = streams;
    let (first, last, down, up, conns) = (first?, last?, down?, up?, conns?);
    let lists = py.allow_threads(|| {
        let column = |arrays: &[ArrayRef]| optional_int64(arrays).map_err(value_error);
        let (first, last, down, up) = (column(&first)?, column(&last)?, column(&down)?, column(&up)?);
        if [&last, &down, &up].iter().any(|c| c.len() != first.len()) {
            return Err(pyo3::exceptions::PyValueError::new_err("the columns differ in length"));
        }
        let (offsets, values) = slices::served(&first, &last, &down, &up, &column(&conns)?).map_err(value_error)?;
        Ok(int64_lists(offsets, values))
    })?;
    export(py, &lists)
}

/// Both sides' key columns (Arrow arrays per column, in pairs) as `keys::packed` reads them: integers as `i64`, text
/// as codes shared by the two sides (`keys::text_codes`).
#[allow(clippy::type_complexity)]
fn key_pairs(left: &[Vec<ArrayRef>], right: &[Vec<ArrayRef>]) -> PyResult<(Vec<Vec<Option<i64>>>, Vec<Vec<Option<i64>>>)> {
    let (mut lefts, mut rights) = (Vec::with_capacity(left.len()), Vec::with_capacity(right.len()));
    for (mine, theirs) in left.iter().zip(right) {
        let (mine, theirs) = match (values(mine), values(theirs)) {
            (Ok(mine), Ok(theirs)) => keys::text_codes(&mine, &theirs),
            _ => (integers(mine).map_err(value_error)?, integers(theirs).map_err(value_error)?),
        };
        lefts.push(mine);
        rights.push(theirs);
    }
    Ok((lefts, rights))
}

/// `analysis/engine/frames.py`'s `joined` of small frames (`join::positions`): from the Arrow streams of both sides'
/// key columns (integer or text, a key's two sides of one type: the caller's check) and the join (`inner`, `left`,
/// `semi`, `anti`), a dict of `UInt32` columns: `left`, each output row's left row (absent: every left row once, in
/// order), and for `inner` and `left` `right`, its right row (null: none).
#[pyfunction]
fn join_positions<'py>(
    py: Python<'py>,
    left_keys: Vec<Bound<'py, PyCapsule>>,
    right_keys: Vec<Bound<'py, PyCapsule>>,
    how: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let how = join::How::named(how).map_err(value_error)?;
    let left_keys = left_keys.iter().map(import_stream).collect::<PyResult<Vec<_>>>()?;
    let right_keys = right_keys.iter().map(import_stream).collect::<PyResult<Vec<_>>>()?;
    let joined = py.allow_threads(|| {
        let (left_keys, right_keys) = key_pairs(&left_keys, &right_keys)?;
        join::positions(&left_keys, &right_keys, how).map_err(value_error)
    })?;
    let mut named = vec![];
    if let Some(left) = joined.left {
        named.push(("left", column::<UInt32Type>(left)));
    }
    if matches!(how, join::How::Inner | join::How::Left) {
        named.push(("right", Arc::new(UInt32Array::from(joined.right)) as ArrayRef));
    }
    columns(py, named)
}

/// `analysis/engine/asof.py`'s lookup (`asof::positions`): per left row, from the Arrow streams of its time and
/// keys, the position of its match among the lookup's rows (their time, never decreasing, and keys; none null):
/// an Arrow `UInt32` column, null where there is none. Times are integer columns of any width, keys integer or text
/// columns (a key's two sides of one type: the caller's check).
#[pyfunction]
#[pyo3(signature = (left_time, left_keys, right_time, right_keys, forward, tolerance=None))]
fn asof_positions<'py>(
    py: Python<'py>,
    left_time: &Bound<'py, PyCapsule>,
    left_keys: Vec<Bound<'py, PyCapsule>>,
    right_time: &Bound<'py, PyCapsule>,
    right_keys: Vec<Bound<'py, PyCapsule>>,
    forward: bool,
    tolerance: Option<i64>,
) -> PyResult<(Bound<'py, PyCapsule>, Bound<'py, PyCapsule>)> {
    let (left_time, right_time) = (import_stream(left_time)?, import_stream(right_time)?);
    let left_keys = left_keys.iter().map(import_stream).collect::<PyResult<Vec<_>>>()?;
    let right_keys = right_keys.iter().map(import_stream).collect::<PyResult<Vec<_>>>()?;
    let found = py.allow_threads(|| {
        let whole = |arrays: &[ArrayRef]| -> Result<Vec<i64>, String> {
            integers(arrays)?.into_iter().collect::<Option<Vec<i64>>>().ok_or_else(|| "a null in the lookup".to_string())
        };
        let (left_keys, right_keys) = key_pairs(&left_keys, &right_keys)?;
        let (left_time, right_time) = (integers(&left_time).map_err(value_error)?, whole(&right_time).map_err(value_error)?);
        asof::positions(&left_time, &left_keys, &right_time, &right_keys, forward, tolerance).map_err(value_error)
    })?;
    export(py, &(Arc::new(UInt32Array::from(found)) as ArrayRef))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(header_values, m)?)?;
    m.add_function(wrap_pyfunction!(asof_positions, m)?)?;
    m.add_function(wrap_pyfunction!(join_positions, m)?)?;
    m.add_function(wrap_pyfunction!(distinct, m)?)?;
    m.add_function(wrap_pyfunction!(record_classes, m)?)?;
    m.add_function(wrap_pyfunction!(count_newlines, m)?)?;
    m.add_function(wrap_pyfunction!(scan_text, m)?)?;
    m.add_function(wrap_pyfunction!(last_start, m)?)?;
    m.add_function(wrap_pyfunction!(loop_slices, m)?)?;
    m.add_function(wrap_pyfunction!(record_gaps, m)?)?;
    m.add_class::<RedactionCandidates>()?;
    m.add_function(wrap_pyfunction!(served_connections, m)?)?;
    Ok(())
}
