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
    /// Arrow `uint32`
    U32(Vec<u32>),
    /// Arrow `uint8`
    U8(Vec<u8>),
    /// Arrow `int64` / `uint64` (`unsigned`) with nulls: `valid` is the validity bitmap, `nulls` its zeros
    Nullable64 { values: Vec<u64>, valid: Vec<u8>, nulls: i64, unsigned: bool },
}

/// A nullable 64-bit column being built (`Buffers::Nullable64`).
pub struct NullableBuilder {
    values: Vec<u64>,
    valid: Vec<u8>,
    nulls: i64,
}

impl NullableBuilder {
    pub fn with_capacity(n: usize) -> Self {
        NullableBuilder { values: Vec::with_capacity(n), valid: Vec::with_capacity(n / 8 + 1), nulls: 0 }
    }
    pub fn push(&mut self, value: Option<u64>) {
        let i = self.values.len();
        if i % 8 == 0 {
            self.valid.push(0);
        }
        match value {
            Some(v) => {
                self.values.push(v);
                *self.valid.last_mut().expect("a byte per 8 rows") |= 1 << (i % 8);
            }
            None => {
                self.values.push(0);
                self.nulls += 1;
            }
        }
    }
    pub fn finish(self, unsigned: bool) -> Buffers {
        Buffers::Nullable64 { values: self.values, valid: self.valid, nulls: self.nulls, unsigned }
    }
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
        Buffers::U32(values) => ("I", values.len() as i64, vec![ptr::null(), values.as_ptr() as *const c_void]),
        Buffers::U8(values) => ("C", values.len() as i64, vec![ptr::null(), values.as_ptr() as *const c_void]),
        Buffers::Nullable64 { values, valid, unsigned, .. } => (
            if *unsigned { "L" } else { "l" },
            values.len() as i64,
            vec![valid.as_ptr() as *const c_void, values.as_ptr() as *const c_void],
        ),
    };
    let null_count = match &buffers {
        Buffers::Nullable64 { nulls, .. } => *nulls,
        _ => 0,
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
        null_count,
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

#[repr(C)]
pub struct ArrowArrayStream {
    get_schema: Option<unsafe extern "C" fn(*mut ArrowArrayStream, *mut ArrowSchema) -> std::ffi::c_int>,
    get_next: Option<unsafe extern "C" fn(*mut ArrowArrayStream, *mut ArrowArray) -> std::ffi::c_int>,
    get_last_error: Option<unsafe extern "C" fn(*mut ArrowArrayStream) -> *const c_char>,
    release: Option<unsafe extern "C" fn(*mut ArrowArrayStream)>,
    private_data: *mut c_void,
}

/// The arrays of a text or bytes column taken from an `arrow_array_stream` capsule (`Series.__arrow_c_stream__`),
/// held until dropped: `values` borrows their buffers.
pub struct Imported {
    arrays: Vec<ArrowArray>,
    format: String,
}

unsafe impl Send for Imported {}
// (read only: the arrays are not changed until they are released on drop)
unsafe impl Sync for Imported {}

impl Drop for Imported {
    fn drop(&mut self) {
        for array in &mut self.arrays {
            if let Some(release) = array.release {
                unsafe { release(array) }
            }
        }
    }
}

fn empty_array() -> ArrowArray {
    ArrowArray {
        length: 0,
        null_count: 0,
        offset: 0,
        n_buffers: 0,
        n_children: 0,
        buffers: ptr::null_mut(),
        children: ptr::null_mut(),
        dictionary: ptr::null_mut(),
        release: None,
        private_data: ptr::null_mut(),
    }
}

/// Take the stream out of the capsule (the capsule is left released) and read all its arrays.
pub fn import_stream(capsule: &Bound<'_, PyCapsule>) -> PyResult<Imported> {
    let err = |text: &str| pyo3::exceptions::PyValueError::new_err(text.to_string());
    let name = capsule.name()?.map(|n| n.to_string_lossy().into_owned());
    if name.as_deref() != Some("arrow_array_stream") {
        return Err(err("not an arrow_array_stream capsule"));
    }
    let source = capsule.pointer() as *mut ArrowArrayStream;
    // move the stream out: the capsule's destructor then finds it released
    let mut stream = unsafe { ptr::read(source) };
    unsafe { (*source).release = None };
    let result = (|| {
        let mut schema = ArrowSchema {
            format: ptr::null(),
            name: ptr::null(),
            metadata: ptr::null(),
            flags: 0,
            n_children: 0,
            children: ptr::null_mut(),
            dictionary: ptr::null_mut(),
            release: None,
            private_data: ptr::null_mut(),
        };
        let get_schema = stream.get_schema.ok_or_else(|| err("stream without get_schema"))?;
        if unsafe { get_schema(&mut stream, &mut schema) } != 0 {
            return Err(err("the stream's schema could not be read"));
        }
        let format = unsafe { std::ffi::CStr::from_ptr(schema.format) }.to_string_lossy().into_owned();
        if let Some(release) = schema.release {
            unsafe { release(&mut schema) }
        }
        if !matches!(format.as_str(), "vu" | "vz" | "u" | "U" | "z" | "Z") {
            return Err(err(&format!("not a text or bytes column (Arrow format {format})")));
        }
        let mut imported = Imported { arrays: Vec::new(), format };
        let get_next = stream.get_next.ok_or_else(|| err("stream without get_next"))?;
        loop {
            let mut array = empty_array();
            if unsafe { get_next(&mut stream, &mut array) } != 0 {
                return Err(err("the stream's next array could not be read"));
            }
            if array.release.is_none() {
                break;
            }
            imported.arrays.push(array);
        }
        Ok(imported)
    })();
    if let Some(release) = stream.release {
        unsafe { release(&mut stream) }
    }
    result
}

impl Imported {
    /// Every row's bytes (None: null), in order.
    pub fn values(&self) -> Vec<Option<&[u8]>> {
        let mut out = Vec::new();
        for array in &self.arrays {
            let n = array.length as usize;
            let offset = array.offset as usize;
            let buffers = unsafe { std::slice::from_raw_parts(array.buffers, array.n_buffers as usize) };
            let validity = buffers[0] as *const u8;
            let valid = |i: usize| -> bool {
                validity.is_null() || array.null_count == 0 || unsafe { *validity.add(i / 8) } & (1 << (i % 8)) != 0
            };
            out.reserve(n);
            let layout = match self.format.as_str() {
                "vu" | "vz" => 0,
                "u" | "z" => 1,
                _ => 2,
            };
            for row in 0..n {
                let i = offset + row;
                if !valid(i) {
                    out.push(None);
                    continue;
                }
                let value: &[u8] = unsafe {
                    match layout {
                        0 => {
                            let view = (buffers[1] as *const u8).add(i * 16);
                            let len = ptr::read_unaligned(view as *const i32) as usize;
                            if len <= 12 {
                                std::slice::from_raw_parts(view.add(4), len)
                            } else {
                                let index = ptr::read_unaligned(view.add(8) as *const i32) as usize;
                                let at = ptr::read_unaligned(view.add(12) as *const i32) as usize;
                                std::slice::from_raw_parts((buffers[2 + index] as *const u8).add(at), len)
                            }
                        }
                        1 => {
                            let offsets = buffers[1] as *const i32;
                            let (a, b) = (*offsets.add(i) as usize, *offsets.add(i + 1) as usize);
                            std::slice::from_raw_parts((buffers[2] as *const u8).add(a), b - a)
                        }
                        _ => {
                            let offsets = buffers[1] as *const i64;
                            let (a, b) = (*offsets.add(i) as usize, *offsets.add(i + 1) as usize);
                            std::slice::from_raw_parts((buffers[2] as *const u8).add(a), b - a)
                        }
                    }
                };
                out.push(Some(value));
            }
        }
        out
    }
}
