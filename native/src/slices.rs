//! The event loop's slices of one worker (`analysis/stages/loop.py`'s `_thread_slices`), in one pass over its
//! lines in time order: where each slice starts and ends, whether its first line opened it, and whether a timer
//! did; and its record gaps (`analysis/gap_counts.py`'s `back_to_back`): each socket event's gap to the write or
//! read ready after it.
//!
//! The polars path is the reference; a test compares the two. Its tests are polars' three-valued logic: a
//! comparison with a missing value (the first line's gap) is unknown, `|` is true if either side is, `&` false if
//! either side is, and a running count skips unknown rows (which are then a slice of their own). `Option<bool>`
//! spells it here.

/// A line kind's part in the rules (a bit each).
pub const SOCKET_EVENT: u8 = 1;
/// resumes a timer callback (fault delay, retry back-off): opens a slice after an idle gap
pub const TIMER_RESUME: u8 = 2;
/// work of its own (an accept, shutdown): opens a slice after an idle gap
pub const WAKE: u8 = 4;
/// `write ready` / `read ready`: a socket event's record gap ends at it
pub const READY: u8 = 8;

pub struct Rules {
    /// a gap longer than this is idle
    pub idle_gap: i64,
    /// a line of no connection after a silence this long or longer opens a slice
    pub unattributed_idle: i64,
}

/// Per slice, in order: its first and last row, whether its first line opened it (unknown for a first line that
/// is not a socket event) and whether a timer did.
#[derive(Debug, Default, PartialEq)]
pub struct Slices {
    pub first_row: Vec<u32>,
    pub last_row: Vec<u32>,
    pub opens: Vec<Option<bool>>,
    pub timer: Vec<Option<bool>>,
}

fn and(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(false), _) | (_, Some(false)) => Some(false),
        (Some(true), Some(true)) => Some(true),
        _ => None,
    }
}

fn or(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(true), _) | (_, Some(true)) => Some(true),
        (Some(false), Some(false)) => Some(false),
        _ => None,
    }
}

/// The slices of `lines` (per line: its time in µs, its kind's bits, whether its connection id is missing), in
/// one pass that keeps only the slices: a buffer per line would be fresh pages, which cost more than the pass.
pub fn slices(lines: impl Iterator<Item = (i64, u8, bool)>, rules: &Rules) -> Slices {
    let mut out = Slices::default();
    let (mut events_seen, mut opened_so_far) = (0i64, 0i64);
    // the line before: its time and its slice number (the `cum_sum` of `opens`; None where `opens` is unknown)
    let mut before: Option<(i64, Option<i64>)> = None;
    let mut rows = 0u32;
    for (row, (ts, bits, no_conn)) in lines.enumerate() {
        let is_event = bits & SOCKET_EVENT != 0;
        events_seen += is_event as i64;
        let gap = before.map(|(t, _)| ts.wrapping_sub(t));
        let idle = gap.map(|g| g > rules.idle_gap);
        let timer = and(Some(bits & TIMER_RESUME != 0), idle);
        let woke = or(and(Some(bits & WAKE != 0), idle), and(Some(no_conn), gap.map(|g| g >= rules.unattributed_idle)));
        let opens = or(or(or(Some(is_event), and(idle, Some(events_seen == 0))), timer), woke);
        let slice = opens.map(|o| {
            opened_so_far += o as i64;
            opened_so_far
        });
        // a line starts a run (and the line before ends one) where the two differ or either is unknown
        let starts = match before {
            None => true,
            Some((_, previous)) => slice.is_none() || previous.is_none() || slice != previous,
        };
        if starts {
            if row > 0 {
                out.last_row.push(row as u32 - 1);
            }
            out.first_row.push(row as u32);
            out.opens.push(opens);
            out.timer.push(and(timer, Some(!is_event)));
        }
        before = Some((ts, slice));
        rows = row as u32 + 1;
    }
    if rows > 0 {
        out.last_row.push(rows - 1);
    }
    out
}

/// The idle classes of a line logged some µs after the one before it: warm up to `warm_us`, cooling up to
/// `cooling_us`, else (or without a line before) cold; `classes` are their codes (warm, cooling, cold).
pub struct IdleClasses {
    pub warm_us: i64,
    pub cooling_us: i64,
    pub classes: [i8; 3],
}

impl IdleClasses {
    fn of(&self, idle: Option<i64>) -> i8 {
        match idle {
            Some(idle) if idle <= self.warm_us => self.classes[0],
            Some(idle) if idle <= self.cooling_us => self.classes[1],
            _ => self.classes[2],
        }
    }
}

/// Per socket event (from row `carried` on) followed by a ready line, in order: the gap to it (µs) and the
/// idle class of the socket event (by the gap from the line before it). `lines`: per line its time and its
/// kind's bits.
pub fn record_gaps(lines: impl Iterator<Item = (i64, u8)>, carried: usize, idle: &IdleClasses) -> (Vec<i64>, Vec<i8>) {
    let (mut gaps, mut classes) = (Vec::new(), Vec::new());
    // the line before the current one (its time) and the current one (its row, time and bits)
    let mut before: Option<i64> = None;
    let mut current: Option<(usize, i64, u8)> = None;
    for (row, (ts, bits)) in lines.enumerate() {
        if let Some((at, t, b)) = current {
            if b & SOCKET_EVENT != 0 && at >= carried && bits & READY != 0 {
                gaps.push(ts.wrapping_sub(t));
                classes.push(idle.of(before.map(|previous| t.wrapping_sub(previous))));
            }
            before = Some(t);
        }
        current = Some((row, ts, bits));
    }
    (gaps, classes)
}

/// Connections a window's list is scanned for before a set takes over (`served`).
const LINEAR_LIST: usize = 32;

/// Per queueing window (`analysis/stages/loop.py`'s `_served_during`), the other connections its worker served in
/// its range of slices `first..=last` (rows of `conns`, the worker's slices in time order), each once, in the order
/// first served: `(offsets, values)` of a list column. A window without a range (null or empty) or without a
/// downstream connection serves none (the polars path compares with a null there: unknown, not kept); a slice of
/// the window's own downstream or upstream connection (null: none) is not another's, nor one of no connection.
pub fn served(
    first: &[Option<i64>],
    last: &[Option<i64>],
    down: &[Option<i64>],
    up: &[Option<i64>],
    conns: &[Option<i64>],
) -> Result<(Vec<i64>, Vec<i64>), String> {
    let mut offsets = Vec::with_capacity(first.len() + 1);
    offsets.push(0);
    let mut values: Vec<i64> = Vec::new();
    // (a window's list is short, a few connections: a scan of it is cheaper than hashing; a long one gets a set)
    let mut seen = std::collections::HashSet::new();
    for (((lo, hi), d), u) in first.iter().zip(last).zip(down).zip(up) {
        if let (Some(lo), Some(hi), Some(d)) = (*lo, *hi, *d) {
            if lo < 0 || (hi >= lo && hi as usize >= conns.len()) {
                return Err(format!("a slice range {lo}..={hi} past the {} slices", conns.len()));
            }
            let (u, start) = (u.unwrap_or(-1), values.len());
            if !seen.is_empty() {
                seen.clear();
            }
            for c in (lo..=hi).filter_map(|k| conns[k as usize]) {
                if c == d || c == u {
                    continue;
                }
                let listed = &values[start..];
                let new = if listed.len() < LINEAR_LIST {
                    !listed.contains(&c)
                } else {
                    if seen.is_empty() {
                        seen.extend(listed.iter().copied());
                    }
                    seen.insert(c)
                };
                if new {
                    values.push(c);
                }
            }
        }
        offsets.push(values.len() as i64);
    }
    Ok((offsets, values))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn served_lists_other_connections_once_in_order() {
        let conns = [Some(1), Some(2), None, Some(3), Some(2), Some(4), Some(5)];
        let (first, last) = ([Some(0), Some(3), None, Some(4), Some(2), Some(0)], [Some(6), Some(5), Some(6), Some(3), Some(2), Some(6)]);
        let down = [Some(1), Some(9), Some(1), Some(1), Some(1), None];
        let up = [Some(4), None, None, None, None, None];
        let (offsets, values) = served(&first, &last, &down, &up, &conns).unwrap();
        assert_eq!(offsets, vec![0, 3, 6, 6, 6, 6, 6]);
        assert_eq!(values, vec![2, 3, 5, 3, 2, 4]);
        assert!(served(&[Some(0)], &[Some(7)], &[Some(1)], &[None], &conns).is_err());
    }

    /// kinds: 0 other, 1 socket event, 2 timer resume, 3 wake
    fn cut(ts: &[i64], kinds: &[usize], no_conn: &[bool]) -> Slices {
        let bits = [0, SOCKET_EVENT, TIMER_RESUME, WAKE];
        let lines = ts.iter().zip(kinds).zip(no_conn).map(|((&t, &k), &n)| (t, bits[k], n));
        slices(lines, &Rules { idle_gap: 100, unattributed_idle: 10_000 })
    }

    #[test]
    fn the_first_line_is_its_own_slice_unless_a_socket_event_opens_it() {
        let found = cut(&[0, 10, 20], &[0, 0, 0], &[false; 3]);
        assert_eq!(found.first_row, vec![0, 1]);
        assert_eq!(found.last_row, vec![0, 2]);
        assert_eq!(found.opens, vec![None, Some(false)]);
        let found = cut(&[0, 10, 20], &[1, 0, 0], &[false; 3]);
        assert_eq!((found.first_row, found.last_row, found.opens), (vec![0], vec![2], vec![Some(true)]));
    }

    #[test]
    fn idle_gaps_cut_before_the_first_socket_event_only() {
        // 0 | 500 (idle gap, before any event) | event at 600 | 1000 (idle gap after an event: no cut)
        let found = cut(&[0, 500, 600, 1000], &[0, 0, 1, 0], &[false; 4]);
        assert_eq!(found.first_row, vec![0, 1, 2]);
        assert_eq!(found.last_row, vec![0, 1, 3]);
    }

    #[test]
    fn timers_wakes_and_silent_unattributed_lines_open_slices() {
        let found = cut(&[0, 1, 300, 301, 700, 20_000], &[1, 0, 2, 0, 3, 0], &[false, false, false, false, false, true]);
        assert_eq!(found.first_row, vec![0, 2, 4, 5]);
        assert_eq!(found.last_row, vec![1, 3, 4, 5]);
        assert_eq!(found.timer, vec![Some(false), Some(true), Some(false), Some(false)]);
        assert_eq!(cut(&[], &[], &[]), Slices::default());
    }

    #[test]
    fn a_socket_events_gap_runs_to_the_ready_line_right_after_it() {
        let idle = IdleClasses { warm_us: 50, cooling_us: 1_000, classes: [0, 1, 2] };
        // kinds: 0 other, 1 socket event, 8 ready
        let lines = [(0, 1), (10, 8), (20, 0), (100, 1), (105, 0), (2_000, 1), (2_003, 8), (5_000, 1)];
        let (gaps, classes) = record_gaps(lines.iter().copied(), 0, &idle);
        assert_eq!((gaps, classes), (vec![10, 3], vec![2, 2]));
        let lines = [(0, 0), (30, 1), (31, 8), (600, 1), (602, 8)];
        assert_eq!(record_gaps(lines.iter().copied(), 0, &idle), (vec![1, 2], vec![0, 1]));
        assert_eq!(record_gaps(lines.iter().copied(), 2, &idle), (vec![2], vec![1]));
        assert_eq!(record_gaps(std::iter::empty(), 0, &idle), (vec![], vec![]));
    }
}
