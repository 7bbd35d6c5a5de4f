//! `analysis/engine/frames.py`'s `joined` of two small frames as row positions, in one pass: a polars join costs a
//! fixed ~0.2-0.3 ms however few its rows, and a window step joins frames of a few dozen to a few thousand rows
//! about twenty times.
//!
//! The polars join is the reference; a test compares the two. Its rules, as polars keeps them with
//! `maintain_order="left"`: a row whose key is null matches nothing; `inner` pairs each left row, in order, with each
//! right row of its keys, in the right side's order; `left` does too and keeps a left row that matches none once,
//! without a right row; `semi` keeps the left rows that match, `anti` those that do not.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use crate::keys::{packed, Fx, Key, MAX_KEYS};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum How {
    Inner,
    Left,
    Semi,
    Anti,
}

impl How {
    pub fn named(name: &str) -> Result<How, String> {
        match name {
            "inner" => Ok(How::Inner),
            "left" => Ok(How::Left),
            "semi" => Ok(How::Semi),
            "anti" => Ok(How::Anti),
            other => Err(format!("not a join the compiled pass makes: {other}")),
        }
    }
}

/// The joined rows: per output row its left row (None: every left row once, in order) and, for `inner` and `left`,
/// its right row (None: none matched).
#[derive(Debug, PartialEq)]
pub struct Joined {
    pub left: Option<Vec<u32>>,
    pub right: Vec<Option<u32>>,
}

/// The rows of `left_keys` joined to those of `right_keys` (both sides' keys as `keys::packed` reads them).
pub fn positions(left_keys: &[Vec<Option<i64>>], right_keys: &[Vec<Option<i64>>], how: How) -> Result<Joined, String> {
    if left_keys.is_empty() || left_keys.len() != right_keys.len() || left_keys.len() > MAX_KEYS {
        return Err(format!(
            "{} and {} keys: a join needs the same keys on both sides, 1 to {MAX_KEYS}",
            left_keys.len(),
            right_keys.len()
        ));
    }
    let (left_rows, right_rows) = (left_keys[0].len(), right_keys[0].len());
    if left_keys.iter().any(|k| k.len() != left_rows) || right_keys.iter().any(|k| k.len() != right_rows) {
        return Err("the columns of a side differ in length".into());
    }
    if u32::try_from(left_rows.max(right_rows)).is_err() {
        return Err("more rows than a u32 position holds".into());
    }
    let mut rows_of: HashMap<Key, Vec<u32>, BuildHasherDefault<Fx>> = HashMap::default();
    for r in 0..right_rows {
        if let Some(key) = packed(right_keys, r) {
            rows_of.entry(Key(key)).or_default().push(r as u32);
        }
    }
    let matches = |l: usize| packed(left_keys, l).and_then(|key| rows_of.get(&Key(key))).map_or(&[][..], Vec::as_slice);
    let mut left = Vec::with_capacity(left_rows);
    let mut right = Vec::new();
    let mut in_order = true; // (every left row once, in order: the left side needs no gather)
    for l in 0..left_rows {
        let found = matches(l);
        match how {
            How::Semi | How::Anti => {
                if found.is_empty() == (how == How::Anti) {
                    left.push(l as u32);
                }
            }
            How::Inner | How::Left => {
                if found.is_empty() && how == How::Left {
                    left.push(l as u32);
                    right.push(None);
                }
                for &r in found {
                    left.push(l as u32);
                    right.push(Some(r));
                }
            }
        }
        in_order &= left.len() == l + 1;
    }
    let whole = in_order && left.len() == left_rows;
    Ok(Joined { left: if whole { None } else { Some(left) }, right })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(values: &[Option<i64>]) -> Vec<Vec<Option<i64>>> {
        vec![values.to_vec()]
    }

    #[test]
    fn each_join_keeps_the_left_order_and_the_right_order_within_a_key() {
        let (left, right) = (keys(&[Some(1), Some(2), None, Some(3)]), keys(&[Some(3), Some(1), Some(1), None]));
        let inner = positions(&left, &right, How::Inner).unwrap();
        assert_eq!(inner, Joined { left: Some(vec![0, 0, 3]), right: vec![Some(1), Some(2), Some(0)] });
        let outer = positions(&left, &right, How::Left).unwrap();
        assert_eq!(outer, Joined { left: Some(vec![0, 0, 1, 2, 3]), right: vec![Some(1), Some(2), None, None, Some(0)] });
        assert_eq!(positions(&left, &right, How::Semi).unwrap().left, Some(vec![0, 3]));
        assert_eq!(positions(&left, &right, How::Anti).unwrap().left, Some(vec![1, 2]));
    }

    #[test]
    fn a_left_join_of_unique_matches_needs_no_left_gather() {
        let joined = positions(&keys(&[Some(1), Some(5)]), &keys(&[Some(5), Some(1)]), How::Left).unwrap();
        assert_eq!(joined, Joined { left: None, right: vec![Some(1), Some(0)] });
    }

    #[test]
    fn a_join_without_keys_is_refused() {
        assert!(positions(&[], &[], How::Inner).is_err());
    }
}
