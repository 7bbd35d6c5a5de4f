//! Columns across the Arrow C data interface, by arrow-rs (`arrow-array`'s `ffi` feature): exported as the
//! `(schema, array)` capsule pair `__arrow_c_array__` returns, so polars builds its series from the buffers
//! without a copy and releases them when it is done; imported from the `arrow_array_stream` capsule of
//! `Series.__arrow_c_stream__()`.

use std::ffi::CString;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::ffi_stream::{ArrayStreamReader, FFI_ArrowArrayStream};
use arrow_array::types::{Int64Type, UInt16Type, UInt32Type, UInt64Type, UInt8Type};
use arrow_array::builder::make_view;
use arrow_array::{Array, ArrayRef, LargeListArray, LargeStringArray, PrimitiveArray, StringViewArray};
use arrow_data::MAX_INLINE_VIEW_LEN;
use arrow_buffer::{BooleanBuffer, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_data::ffi::FFI_ArrowArray;
use arrow_schema::ffi::FFI_ArrowSchema;
use arrow_schema::{ArrowError, DataType, Field};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

pub fn value_error(error: impl std::fmt::Display) -> PyErr {
    pyo3::exceptions::PyValueError::new_err(error.to_string())
}

/// A text column being built: text is appended to the open value, which `end` closes.
///
/// Its offsets are always on character boundaries of its text, by construction: text comes only as whole `&str`s,
/// each offset is the text's length when it was taken, and nothing before the last offset changes afterwards (a cut
/// shortens the open value only, and `String::truncate` refuses a cut inside a character). `finish` relies on it.
pub struct TextBuilder {
    offsets: Vec<i64>,
    data: String,
}

impl TextBuilder {
    pub fn with_capacity(bytes: usize) -> Self {
        TextBuilder { offsets: vec![0], data: String::with_capacity(bytes) }
    }
    /// Add `text` to the open value.
    pub fn append(&mut self, text: &str) {
        self.data.push_str(text);
    }
    /// The open value so far.
    pub fn open(&self) -> &str {
        &self.data[self.open_from()..]
    }
    /// Keep the open value's first `at` bytes (panics unless `at` is a character boundary of it).
    pub fn cut_open(&mut self, at: usize) {
        self.data.truncate(self.open_from() + at);
    }
    /// Close the open value.
    pub fn end(&mut self) {
        self.offsets.push(self.data.len() as i64);
    }
    fn open_from(&self) -> usize {
        *self.offsets.last().expect("offsets start with 0") as usize
    }
    /// The column: one value per `end`.
    pub fn finish(self) -> ArrayRef {
        let offsets = OffsetBuffer::new(ScalarBuffer::from(self.offsets)); // (checks: non-negative, never decreasing)
        // SAFETY: what `LargeStringArray::try_new` would check (one more pass over the bytes, 3 to 5 % of the
        // envelope scan) holds: the offsets start at 0, never decrease and end at most at the text's length (each
        // was the length of the text, which only grows past the last offset), the text is valid UTF-8 (a `String`)
        // and every offset is on a character boundary (the type's invariant above); there is no null buffer.
        let column = unsafe { LargeStringArray::new_unchecked(offsets, Buffer::from_vec(self.data.into_bytes()), None) };
        Arc::new(column)
    }
}

/// A text column of views (Arrow `Utf8View`, polars' own string layout) into text blocks the column shares
/// (`finish`'s `blocks`: whole valid UTF-8 texts, no copy), plus a buffer of its own for values found nowhere
/// in them (`push_copy`).
///
/// Every view is valid for `finish`, by construction: a value pushed by `push_in` is a `&str` (valid UTF-8, its
/// ends on character boundaries) taken from block `block` at byte `offset` (the caller's contract: the same
/// bytes as `blocks[block][offset..offset + value.len()]`, with `blocks[block]` at most `u32::MAX` bytes long);
/// a value pushed by `push_copy` is a `&str` appended whole to the own buffer, which holds nothing else and is
/// refused past `u32::MAX` bytes; values of 12 bytes or less are inlined in their view (`make_view`).
pub struct ViewBuilder {
    views: Vec<u128>,
    own: Vec<u8>,
    /// the own buffer's index: after the blocks
    own_index: u32,
}

impl ViewBuilder {
    pub fn new(blocks: usize) -> Self {
        ViewBuilder { views: Vec::new(), own: Vec::new(), own_index: blocks as u32 }
    }
    /// `value`, which is `blocks[block][offset..offset + value.len()]` of `finish`'s blocks.
    pub fn push_in(&mut self, block: usize, offset: usize, value: &str) {
        self.views.push(make_view(value.as_bytes(), block as u32, offset as u32));
    }
    /// `value`, copied into the column's own buffer. False (nothing pushed): the buffer would pass `u32::MAX`
    /// bytes.
    pub fn push_copy(&mut self, value: &str) -> bool {
        let offset = self.own.len();
        if offset + value.len() > u32::MAX as usize {
            return false;
        }
        let view = make_view(value.as_bytes(), self.own_index, offset as u32);
        if value.len() > MAX_INLINE_VIEW_LEN as usize {
            self.own.extend_from_slice(value.as_bytes());
        }
        self.views.push(view);
        true
    }
    /// The column over `blocks` (the texts `push_in` read, in order; at most `u32::MAX` bytes each).
    pub fn finish(self, blocks: &[Buffer]) -> ArrayRef {
        assert_eq!(blocks.len(), self.own_index as usize, "the blocks the builder was made for");
        let mut buffers: Vec<Buffer> = blocks.to_vec();
        buffers.push(Buffer::from_vec(self.own));
        // SAFETY: what `StringViewArray::try_new` would check (one more pass over every value) holds by the
        // type's invariant above: each view over 12 bytes points into an existing buffer (`own_index` is the
        // last one), inside it, at bytes that are valid UTF-8 starting with the view's prefix (they are the
        // value `make_view` was given); shorter values are inline; there is no null buffer.
        let column = unsafe { StringViewArray::new_unchecked(ScalarBuffer::from(self.views), buffers.into(), None) };
        Arc::new(column)
    }
}

/// A numeric column without nulls.
pub fn column<T: arrow_array::ArrowPrimitiveType>(values: Vec<T::Native>) -> ArrayRef {
    Arc::new(PrimitiveArray::<T>::new(ScalarBuffer::from(values), None))
}

/// A nullable 64-bit column being built.
pub struct NullableBuilder {
    values: Vec<u64>,
    valid: Vec<u8>,
}

impl NullableBuilder {
    pub fn with_capacity(n: usize) -> Self {
        NullableBuilder { values: Vec::with_capacity(n), valid: Vec::with_capacity(n / 8 + 1) }
    }
    pub fn push(&mut self, value: Option<u64>) {
        let i = self.values.len();
        if i.is_multiple_of(8) {
            self.valid.push(0);
        }
        if value.is_some() {
            *self.valid.last_mut().expect("a byte per 8 rows") |= 1 << (i % 8);
        }
        self.values.push(value.unwrap_or(0));
    }
    /// The column: `u64`, or (`unsigned` false) `i64` (the values were pushed no larger than `i64::MAX`).
    pub fn finish(self, unsigned: bool) -> ArrayRef {
        let n = self.values.len();
        let valid = NullBuffer::new(BooleanBuffer::new(Buffer::from_vec(self.valid), 0, n));
        let values = ScalarBuffer::<u64>::from(self.values);
        if unsigned {
            Arc::new(PrimitiveArray::<UInt64Type>::new(values, Some(valid)))
        } else {
            let values = ScalarBuffer::<i64>::new(values.into_inner(), 0, n);
            Arc::new(PrimitiveArray::<Int64Type>::new(values, Some(valid)))
        }
    }
}

/// `(schema capsule, array capsule)`, what `__arrow_c_array__` returns. The consumer moves the struct out of
/// each capsule (leaving one whose release is null); a capsule never consumed releases its struct when Python
/// drops it (arrow-rs' `Drop` of the FFI structs).
pub fn export<'py>(py: Python<'py>, column: &ArrayRef) -> PyResult<(Bound<'py, PyCapsule>, Bound<'py, PyCapsule>)> {
    let field = Field::new("", column.data_type().clone(), true);
    let schema = FFI_ArrowSchema::try_from(&field).map_err(value_error)?;
    let array = FFI_ArrowArray::new(&column.to_data());
    let schema = PyCapsule::new(py, schema, Some(CString::new("arrow_schema")?))?;
    let array = PyCapsule::new(py, array, Some(CString::new("arrow_array")?))?;
    Ok((schema, array))
}

/// The arrays of an `arrow_array_stream` capsule (`Series.__arrow_c_stream__()`): the stream is moved out of the
/// capsule (whose destructor then finds it released) and read to its end.
pub fn import_stream(capsule: &Bound<'_, PyCapsule>) -> PyResult<Vec<ArrayRef>> {
    let name = capsule.name()?.map(|n| n.to_string_lossy().into_owned());
    if name.as_deref() != Some("arrow_array_stream") {
        return Err(value_error("not an arrow_array_stream capsule"));
    }
    let stream = capsule.pointer() as *mut FFI_ArrowArrayStream;
    if stream.is_null() {
        return Err(value_error("an empty arrow_array_stream capsule"));
    }
    // SAFETY: the capsule is named "arrow_array_stream", so by the Arrow PyCapsule interface its pointer is a
    // valid, aligned, initialised ArrowArrayStream that the holder of the capsule may move out (checked non-null
    // above); `from_raw` moves it and leaves the capsule's struct released, as the interface requires.
    let reader = unsafe { ArrayStreamReader::from_raw(stream) }.map_err(value_error)?;
    reader.collect::<Result<Vec<_>, ArrowError>>().map_err(value_error)
}

/// Every row's bytes of a text or bytes column's arrays (None: null), in order; Err: not such a column.
/// (Free of Python, as the other pure functions, so that `cargo test` runs it without an interpreter.)
pub fn values(arrays: &[ArrayRef]) -> Result<Vec<Option<&[u8]>>, String> {
    let mut out = Vec::with_capacity(arrays.iter().map(|a| a.len()).sum());
    for array in arrays {
        match array.data_type() {
            DataType::Utf8View => out.extend(array.as_string_view().iter().map(|v| v.map(str::as_bytes))),
            DataType::BinaryView => out.extend(array.as_binary_view().iter()),
            DataType::Utf8 => out.extend(array.as_string::<i32>().iter().map(|v| v.map(str::as_bytes))),
            DataType::LargeUtf8 => out.extend(array.as_string::<i64>().iter().map(|v| v.map(str::as_bytes))),
            DataType::Binary => out.extend(array.as_binary::<i32>().iter()),
            DataType::LargeBinary => out.extend(array.as_binary::<i64>().iter()),
            other => return Err(format!("not a text or bytes column (Arrow type {other})")),
        }
    }
    Ok(out)
}

/// The values of a 64-bit integer column's arrays, array by array (no copy); Err: another type, or a row is null.
pub fn int64_parts(arrays: &[ArrayRef]) -> Result<Vec<&[i64]>, String> {
    arrays
        .iter()
        .map(|array| match array.data_type() {
            _ if array.null_count() > 0 => Err("a null in a column that has none".to_string()),
            DataType::Int64 => Ok(&array.as_primitive::<Int64Type>().values()[..]),
            other => Err(format!("not a 64-bit integer column (Arrow type {other})")),
        })
        .collect()
}

/// Per row of an unsigned code column's arrays (8, 16 or 32 bits: an Enum's physical codes), in order, its entry
/// of `table` (0 past its end); Err: another type, or a row is null.
pub fn looked_up(arrays: &[ArrayRef], table: &[u8]) -> Result<Vec<u8>, String> {
    let entry = |code: usize| table.get(code).copied().unwrap_or(0);
    let mut out = Vec::with_capacity(arrays.iter().map(|a| a.len()).sum());
    for array in arrays {
        if array.null_count() > 0 {
            return Err("a null in a column that has none".into());
        }
        match array.data_type() {
            DataType::UInt8 => out.extend(array.as_primitive::<UInt8Type>().values().iter().map(|&v| entry(v as usize))),
            DataType::UInt16 => out.extend(array.as_primitive::<UInt16Type>().values().iter().map(|&v| entry(v as usize))),
            DataType::UInt32 => out.extend(array.as_primitive::<UInt32Type>().values().iter().map(|&v| entry(v as usize))),
            other => return Err(format!("not an unsigned code column (Arrow type {other})")),
        }
    }
    Ok(out)
}

/// Per row of a column's arrays, in order: whether it is null.
pub fn nulls(arrays: &[ArrayRef]) -> Vec<bool> {
    let mut out = Vec::with_capacity(arrays.iter().map(|a| a.len()).sum());
    for array in arrays {
        match array.logical_nulls() {
            Some(valid) => out.extend(valid.iter().map(|v| !v)),
            None => out.extend(std::iter::repeat_n(false, array.len())),
        }
    }
    out
}

/// Per row of a 64-bit integer column's arrays, in order: its value (None: null).
pub fn optional_int64(arrays: &[ArrayRef]) -> Result<Vec<Option<i64>>, String> {
    let mut out = Vec::with_capacity(arrays.iter().map(|a| a.len()).sum());
    for array in arrays {
        if array.data_type() != &DataType::Int64 {
            return Err(format!("not a 64-bit integer column (Arrow type {})", array.data_type()));
        }
        out.extend(array.as_primitive::<Int64Type>().iter());
    }
    Ok(out)
}

/// Per row of an integer column's arrays (any width, signed or not), in order: its value (None: null), an unsigned
/// 64-bit one as the `i64` of the same bits (equal values stay equal; past `i64::MAX` the order does not hold).
pub fn integers(arrays: &[ArrayRef]) -> Result<Vec<Option<i64>>, String> {
    use arrow_array::types::{Int16Type, Int32Type, Int8Type, UInt16Type};
    let mut out = Vec::with_capacity(arrays.iter().map(|a| a.len()).sum());
    for array in arrays {
        match array.data_type() {
            DataType::Int64 => out.extend(array.as_primitive::<Int64Type>().iter()),
            DataType::Int32 => out.extend(array.as_primitive::<Int32Type>().iter().map(|v| v.map(i64::from))),
            DataType::Int16 => out.extend(array.as_primitive::<Int16Type>().iter().map(|v| v.map(i64::from))),
            DataType::Int8 => out.extend(array.as_primitive::<Int8Type>().iter().map(|v| v.map(i64::from))),
            DataType::UInt64 => out.extend(array.as_primitive::<UInt64Type>().iter().map(|v| v.map(|v| v as i64))),
            DataType::UInt32 => out.extend(array.as_primitive::<UInt32Type>().iter().map(|v| v.map(i64::from))),
            DataType::UInt16 => out.extend(array.as_primitive::<UInt16Type>().iter().map(|v| v.map(i64::from))),
            DataType::UInt8 => out.extend(array.as_primitive::<UInt8Type>().iter().map(|v| v.map(i64::from))),
            other => return Err(format!("not an integer column (Arrow type {other})")),
        }
    }
    Ok(out)
}

/// A list column of 64-bit integers (polars' `List(Int64)`) from its offsets and values.
pub fn int64_lists(offsets: Vec<i64>, values: Vec<i64>) -> ArrayRef {
    let field = Arc::new(Field::new_list_field(DataType::Int64, true));
    Arc::new(LargeListArray::new(field, OffsetBuffer::new(ScalarBuffer::from(offsets)), column::<Int64Type>(values), None))
}

/// Per row of a boolean column's arrays, in order: whether it is true (a null is not).
pub fn trues(arrays: &[ArrayRef]) -> Result<Vec<bool>, String> {
    let mut out = Vec::with_capacity(arrays.iter().map(|a| a.len()).sum());
    for array in arrays {
        if array.data_type() != &DataType::Boolean {
            return Err(format!("not a boolean column (Arrow type {})", array.data_type()));
        }
        let values = array.as_boolean();
        out.extend((0..values.len()).map(|i| values.is_valid(i) && values.value(i)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{BinaryArray, StringViewArray, UInt32Array};

    #[test]
    fn values_reads_every_text_layout_with_nulls_and_slices() {
        let view: ArrayRef = Arc::new(StringViewArray::from(vec![Some("short"), None, Some("a value over twelve bytes")]));
        let large: ArrayRef = Arc::new(LargeStringArray::from(vec![Some("x"), Some("ü")]));
        let binary: ArrayRef = Arc::new(BinaryArray::from(vec![Some(&b"\xff"[..]), None, Some(&b"b"[..])]));
        let sliced = binary.slice(1, 2);
        let arrays = [view, large, sliced];
        let expected: Vec<Option<&[u8]>> = vec![
            Some(b"short"),
            None,
            Some(b"a value over twelve bytes"),
            Some(b"x"),
            Some("ü".as_bytes()),
            None,
            Some(b"b"),
        ];
        assert_eq!(values(&arrays).unwrap(), expected);
    }

    #[test]
    fn values_refuses_other_types() {
        let numbers: ArrayRef = Arc::new(UInt32Array::from(vec![1, 2]));
        assert!(values(&[numbers]).is_err());
    }

    #[test]
    fn nullable_builder_marks_nulls_and_keeps_the_sign() {
        let mut builder = NullableBuilder::with_capacity(10);
        let pushed: Vec<Option<u64>> = (0..10).map(|i| (i % 3 != 0).then_some(i)).collect();
        for &value in &pushed {
            builder.push(value);
        }
        let column = builder.finish(false);
        let signed = column.as_primitive::<Int64Type>();
        assert_eq!(signed.null_count(), 4);
        let read: Vec<Option<u64>> = signed.iter().map(|v| v.map(|v| v as u64)).collect();
        assert_eq!(read, pushed);

        let mut builder = NullableBuilder::with_capacity(1);
        builder.push(Some(u64::MAX));
        builder.push(None);
        let column = builder.finish(true);
        assert_eq!(column.as_primitive::<UInt64Type>().iter().collect::<Vec<_>>(), vec![Some(u64::MAX), None]);
    }

    #[test]
    fn text_builder_reads_back_with_its_cuts() {
        let mut texts = TextBuilder::with_capacity(0);
        texts.append("ab");
        texts.end();
        texts.end();
        texts.append("cdé");
        texts.append("xyz");
        assert_eq!(texts.open(), "cdéxyz");
        texts.cut_open(4);
        texts.end();
        let column = texts.finish();
        let read: Vec<Option<&str>> = column.as_string::<i64>().iter().collect();
        assert_eq!(read, vec![Some("ab"), Some(""), Some("cdé")]);
    }

    #[test]
    #[should_panic]
    fn text_builder_refuses_a_cut_inside_a_character() {
        let mut texts = TextBuilder::with_capacity(0);
        texts.append("é");
        texts.cut_open(1);
    }
}
