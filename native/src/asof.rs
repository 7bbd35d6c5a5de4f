//! `analysis/engine/asof.py`'s as-of lookup ("the nearest row of the same keys before or after this time") as
//! positions into the lookup's rows, in one pass: polars' `join_asof` costs a fixed ~0.3 ms a call, and the
//! analysis' window steps make about fifteen calls of a few thousand rows each.
//!
//! The polars path is the reference; a test compares the two. Its rules, as `join_asof` keeps them: the lookup's
//! rows are in time order (rows of one time in the lookup's own order); `backward` takes the last row of the same
//! keys at or before the time, `forward` the first at or after it; a match further than `tolerance` is none; a row
//! whose time or a key is null matches nothing.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use crate::keys::{packed, Fx, Key, MAX_KEYS};

/// The lookup's rows of one key, in time order, and where its last search cut them.
#[derive(Default)]
struct Group {
    rows: Vec<u32>,
    /// the time last searched for
    searched: Option<i64>,
    /// how many of `rows` are before it
    cut: usize,
}

/// How many of `rows`' first rows `before` holds for (it holds for a first run of them, then for none): searched
/// in steps that double from the start, so a cut near the start costs a few steps, not the whole range's.
fn gallop(rows: &[u32], before: impl Fn(&u32) -> bool) -> usize {
    let mut step = 1;
    while step <= rows.len() && before(&rows[step - 1]) {
        step *= 2;
    }
    let low = step / 2;
    low + rows[low..step.min(rows.len() + 1) - 1].partition_point(before)
}

/// Per row of the left side, the position of its match among the lookup's rows (None: no match).
///
/// `left_time` and `left_keys[k]` are the left rows' time and keys (None: null); `right_time` and `right_keys[k]`
/// the lookup's, none null, its times never decreasing. A key is compared for equality only, so any integer type
/// can be carried in an `i64` (both sides of a key the same type), and text as codes (`keys::text_codes`).
pub fn positions(
    left_time: &[Option<i64>],
    left_keys: &[Vec<Option<i64>>],
    right_time: &[i64],
    right_keys: &[Vec<Option<i64>>],
    forward: bool,
    tolerance: Option<i64>,
) -> Result<Vec<Option<u32>>, String> {
    let rows = right_time.len();
    if right_keys.len() != left_keys.len() || left_keys.len() > MAX_KEYS {
        return Err(format!("{} and {} keys: the two sides' keys differ or are more than {MAX_KEYS}",
                           left_keys.len(), right_keys.len()));
    }
    if right_keys.iter().any(|k| k.len() != rows) || left_keys.iter().any(|k| k.len() != left_time.len()) {
        return Err("the columns of a side differ in length".into());
    }
    if right_time.windows(2).any(|w| w[0] > w[1]) {
        return Err("the lookup's times are not in order".into());
    }
    let rows = u32::try_from(rows).map_err(|_| format!("{rows} lookup rows are more than a u32 position holds"))?;
    // the lookup's rows of each key, in the lookup's order (so in time order)
    let mut numbers: HashMap<Key, usize, BuildHasherDefault<Fx>> = HashMap::default();
    let mut groups: Vec<Group> = Vec::new();
    let mut last: Option<(Key, usize)> = None;
    for r in 0..rows {
        let key = Key(packed(right_keys, r as usize).ok_or("a null key in the lookup")?);
        let number = match last {
            Some((seen, number)) if seen == key => number,  // (the rows of one key often follow each other)
            _ => *numbers.entry(key).or_insert_with(|| {
                groups.push(Group::default());
                groups.len() - 1
            }),
        };
        last = Some((key, number));
        groups[number].rows.push(r);
    }
    let at = |r: u32| right_time[r as usize];
    let near = |r: u32, time: i64| tolerance.is_none_or(|tol| u64::try_from(tol).is_ok_and(|tol| at(r).abs_diff(time) <= tol));
    let mut found = Vec::with_capacity(left_time.len());
    let mut last: Option<(Key, usize)> = None;
    for (row, time) in left_time.iter().enumerate() {
        let (Some(time), Some(key)) = (*time, packed(left_keys, row).map(Key)) else {
            found.push(None);
            continue;
        };
        let number = match last {
            Some((seen, number)) if seen == key => Some(number),  // (the rows of one key often follow each other)
            _ => numbers.get(&key).copied(),
        };
        let Some(number) = number else {
            found.push(None);
            continue;
        };
        last = Some((key, number));
        let group = &mut groups[number];
        // the rows before the time (backward: at it too), from where the group's last search ended when the time
        // has not gone back (left rows in time order: a few steps each), else from the group's first row
        let before = |r: &u32| if forward { at(*r) < time } else { at(*r) <= time };
        let from = if group.searched.is_some_and(|t| t <= time) { group.cut } else { 0 };
        group.cut = from + gallop(&group.rows[from..], before);
        group.searched = Some(time);
        let rows = &group.rows;
        let matched = if forward { rows.get(group.cut).copied() } else { group.cut.checked_sub(1).map(|i| rows[i]) };
        found.push(matched.filter(|&r| near(r, time)));
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backward_takes_the_last_of_a_time_and_forward_the_first() {
        let left_time = [Some(3), Some(5), Some(7), Some(10), None, Some(5)];
        let left_keys = vec![vec![Some(2), Some(1), Some(1), Some(1), Some(1), None]];
        let right_time = [3, 5, 5, 5, 9];
        let right_keys = vec![vec![Some(2), Some(1), Some(1), Some(1), Some(1)]];
        let back = positions(&left_time, &left_keys, &right_time, &right_keys, false, None).unwrap();
        assert_eq!(back, vec![Some(0), Some(3), Some(3), Some(4), None, None]);
        let ahead = positions(&left_time, &left_keys, &right_time, &right_keys, true, None).unwrap();
        assert_eq!(ahead, vec![Some(0), Some(1), Some(4), None, None, None]);
        let near = positions(&left_time, &left_keys, &right_time, &right_keys, false, Some(1)).unwrap();
        assert_eq!(near, vec![Some(0), Some(3), None, Some(4), None, None]);
    }

    #[test]
    fn without_keys_every_row_is_one_group() {
        let found = positions(&[Some(4), Some(0)], &[], &[1, 4, 4], &[], true, None).unwrap();
        assert_eq!(found, vec![Some(1), Some(0)]);
    }

    #[test]
    fn a_lookup_out_of_order_is_refused() {
        assert!(positions(&[Some(1)], &[], &[2, 1], &[], false, None).is_err());
    }
}

