//! Columns handed to polars through the Arrow C data interface (`__arrow_c_array__`): polars builds its
//! series from the buffers without a copy through Python objects, and releases them when it is done.

use std::ffi::{c_char, c_void, CString};
use std::ptr;

use pyo3::prelude::*;
use pyo3::types::PyCapsule;

#[repr(C)]
pub struct ArrowSchema {
    format: *const c_char,
    name: *const c_char,
    metadata: *const c_char,
    flags: i64,
    n_children: i64,
    children: *mut *mut ArrowSchema,
    dictionary: *mut ArrowSchema,
    release: Option<unsafe extern "C" fn(*mut ArrowSchema)>,
    private_data: *mut c_void,
}

#[repr(C)]
pub struct ArrowArray {
    length: i64,
    null_count: i64,
    offset: i64,
    n_buffers: i64,
    n_children: i64,
    buffers: *mut *const c_void,
    children: *mut *mut ArrowArray,
    dictionary: *mut ArrowArray,
    release: Option<unsafe extern "C" fn(*mut ArrowArray)>,
    private_data: *mut c_void,
}

/// A capsule's content must be `Send`; the raw pointers inside are owned by the struct itself.
#[repr(transparent)]
struct Owned<T>(T);
unsafe impl<T> Send for Owned<T> {}

struct SchemaPrivate {
    format: CString,
    name: CString,
}

unsafe extern "C" fn release_schema(schema: *mut ArrowSchema) {
    if schema.is_null() {
        return;
    }
    let schema = &mut *schema;
    if !schema.private_data.is_null() {
        drop(Box::from_raw(schema.private_data as *mut SchemaPrivate));
        schema.private_data = ptr::null_mut();
    }
    schema.release = None;
}

/// The buffers of one column.
pub enum Buffers {
    /// Arrow `large_utf8`: offsets (length + 1) into the UTF-8 bytes
    Utf8 { offsets: Vec<i64>, data: Vec<u8> },
    /// Arrow `int64`
    I64(Vec<i64>),
}

struct ArrayPrivate {
    _buffers: Buffers,
    pointers: Vec<*const c_void>,
}

unsafe extern "C" fn release_array(array: *mut ArrowArray) {
    if array.is_null() {
        return;
    }
    let array = &mut *array;
    if !array.private_data.is_null() {
        drop(Box::from_raw(array.private_data as *mut ArrayPrivate));
        array.private_data = ptr::null_mut();
    }
    array.release = None;
}

const ARROW_FLAG_NULLABLE: i64 = 2;

/// `(schema capsule, array capsule)`, what `__arrow_c_array__` returns.
pub fn export<'py>(py: Python<'py>, buffers: Buffers) -> PyResult<(Bound<'py, PyCapsule>, Bound<'py, PyCapsule>)> {
    let (format, length, pointers) = match &buffers {
        Buffers::Utf8 { offsets, data } => (
            "U",
            offsets.len() as i64 - 1,
            vec![ptr::null(), offsets.as_ptr() as *const c_void, data.as_ptr() as *const c_void],
        ),
        Buffers::I64(values) => ("l", values.len() as i64, vec![ptr::null(), values.as_ptr() as *const c_void]),
    };
    let names = Box::new(SchemaPrivate { format: CString::new(format)?, name: CString::new("")? });
    let schema = ArrowSchema {
        format: names.format.as_ptr(),
        name: names.name.as_ptr(),
        metadata: ptr::null(),
        flags: ARROW_FLAG_NULLABLE,
        n_children: 0,
        children: ptr::null_mut(),
        dictionary: ptr::null_mut(),
        release: Some(release_schema),
        private_data: Box::into_raw(names) as *mut c_void,
    };
    let mut private = Box::new(ArrayPrivate { _buffers: buffers, pointers });
    let array = ArrowArray {
        length,
        null_count: 0,
        offset: 0,
        n_buffers: private.pointers.len() as i64,
        n_children: 0,
        buffers: private.pointers.as_mut_ptr(),
        children: ptr::null_mut(),
        dictionary: ptr::null_mut(),
        release: Some(release_array),
        private_data: Box::into_raw(private) as *mut c_void,
    };
    // The consumer moves the struct out of the capsule (leaving one whose release is null); a capsule that
    // was never consumed releases its struct when Python drops it.
    let schema = PyCapsule::new_with_destructor(
        py,
        Owned(schema),
        Some(CString::new("arrow_schema")?),
        |mut s: Owned<ArrowSchema>, _| {
            if let Some(release) = s.0.release {
                unsafe { release(&mut s.0) }
            }
        },
    )?;
    let array = PyCapsule::new_with_destructor(
        py,
        Owned(array),
        Some(CString::new("arrow_array")?),
        |mut a: Owned<ArrowArray>, _| {
            if let Some(release) = a.0.release {
                unsafe { release(&mut a.0) }
            }
        },
    )?;
    Ok((schema, array))
}
