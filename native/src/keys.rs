//! Rows' keys for the compiled lookups and joins (`asof.rs`, `join.rs`): up to `MAX_KEYS` key columns per row,
//! integers carried as `i64` and text as codes, packed into one array and hashed a word at a time.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// A row's keys (`packed`), hashed a word at a time.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Key(pub [i64; MAX_KEYS]);

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        for word in self.0 {
            state.write_u64(word as u64);
        }
    }
}

/// A multiply-rotate hash of 8-byte words (as rustc's `FxHasher`): a lookup's keys are connection ids and codes,
/// not chosen by an adversary, and SipHash cost more than the rest of a call.
#[derive(Default)]
pub struct Fx(u64);

impl Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        for word in bytes.chunks(8) {
            let mut buffer = [0u8; 8];
            buffer[..word.len()].copy_from_slice(word);
            self.write_u64(u64::from_le_bytes(buffer));
        }
    }
    fn write_u64(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// The most keys a lookup matches on (`positions` refuses more).
pub const MAX_KEYS: usize = 4;

/// A row's keys, packed (the unused places 0); None: one of them is null.
pub type Packed = Option<[i64; MAX_KEYS]>;

pub fn packed(keys: &[Vec<Option<i64>>], row: usize) -> Packed {
    let mut out = [0; MAX_KEYS];
    for (place, key) in out.iter_mut().zip(keys) {
        *place = key[row]?;
    }
    Some(out)
}

/// A text key's two sides as codes: one per distinct text over both (None: null), so that equal texts, and only
/// they, have equal codes.
pub fn text_codes<'a>(left: &[Option<&'a [u8]>], right: &[Option<&'a [u8]>]) -> (Vec<Option<i64>>, Vec<Option<i64>>) {
    let mut codes: HashMap<&'a [u8], i64> = HashMap::new();
    // (most frames hold one origin: a text equal to the one before takes its code without a hash)
    let mut last: Option<(&'a [u8], i64)> = None;
    let mut code_of = |text: &Option<&'a [u8]>| {
        text.map(|t| match last {
            Some((seen, code)) if seen == t => code,
            _ => {
                let next = codes.len() as i64;
                let code = *codes.entry(t).or_insert(next);
                last = Some((t, code));
                code
            }
        })
    };
    let left = left.iter().map(&mut code_of).collect();
    let right = right.iter().map(&mut code_of).collect();
    (left, right)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_texts_and_only_they_share_a_code() {
        let (left, right) = text_codes(&[Some(b"a"), None, Some(b"b")], &[Some(b"b"), Some(b"c"), Some(b"a")]);
        assert_eq!(left, vec![Some(0), None, Some(1)]);
        assert_eq!(right, vec![Some(1), Some(2), Some(0)]);
    }

    #[test]
    fn a_row_with_a_null_key_packs_to_none() {
        let keys = vec![vec![Some(1), None], vec![Some(2), Some(3)]];
        assert_eq!(packed(&keys, 0), Some([1, 2, 0, 0]));
        assert_eq!(packed(&keys, 1), None);
    }
}
