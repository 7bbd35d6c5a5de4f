//! Header values out of header dumps: `parser/headers.py`'s `(?m)^'NAME', '([^\n]*)'$` for several names in one pass
//! over each message's lines instead of one regex pass per name.
//!
//! A dump line is `'NAME', 'VALUE'`: the name runs from the opening quote to the first `', '` (the names asked for
//! hold no quote, so a line of one of them has its first quote after the opening one right there), and the value
//! to the line's closing quote. The first such line of each name in a message gives its value; none: null.

/// Per name (in the order of `names`), per message: the value of the first dump line of that name.
pub fn values<'a>(messages: &[Option<&'a [u8]>], names: &[&[u8]]) -> Vec<Vec<Option<&'a [u8]>>> {
    let mut out = vec![Vec::with_capacity(messages.len()); names.len()];
    let mut found: Vec<Option<&[u8]>> = vec![None; names.len()];
    for message in messages {
        found.iter_mut().for_each(|f| *f = None);
        if let Some(message) = message {
            for line in message.split(|&b| b == b'\n') {
                if let Some((name, value)) = dump_line(line) {
                    if let Some(k) = names.iter().position(|n| *n == name) {
                        found[k] = found[k].or(Some(value));
                    }
                }
            }
        }
        for (column, value) in out.iter_mut().zip(&found) {
            column.push(*value);
        }
    }
    out
}

/// `(name, value)` of `'name', 'value'` whose name holds no quote; None for any other line.
fn dump_line(line: &[u8]) -> Option<(&[u8], &[u8])> {
    let rest = line.strip_prefix(b"'")?;
    let quote = memchr::memchr(b'\'', rest)?;
    let (name, after) = rest.split_at(quote);
    let value = after.strip_prefix(b"', '")?.strip_suffix(b"'")?;
    Some((name, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_line_of_each_name_gives_its_value() {
        let dump = b"headers:\n':path', '/a'\n'host', 'x'\n':path', '/b'\n'x', 'it''s'\n':method', ''".as_slice();
        let messages = [Some(dump), None, Some(b"':path', '/c'".as_slice())];
        let found = values(&messages, &[b":path", b":method", b"x", b"none"]);
        assert_eq!(found[0], vec![Some(b"/a".as_slice()), None, Some(b"/c".as_slice())]);
        assert_eq!(found[1], vec![Some(b"".as_slice()), None, None]);
        assert_eq!(found[2], vec![Some(b"it''s".as_slice()), None, None]);
        assert_eq!(found[3], vec![None, None, None]);
    }

    #[test]
    fn lines_not_shaped_as_a_dump_line_give_nothing() {
        for line in [&b"':path', '"[..], b"':path','/a'", b" ':path', '/a'", b"':path', '/a", b"':path', '/a'\r"] {
            assert_eq!(dump_line(line), None, "{}", String::from_utf8_lossy(line));
        }
        assert_eq!(dump_line(b"':path', ''"), Some((&b":path"[..], &b""[..])));
        assert_eq!(dump_line(b"'a', 'b', 'c'"), Some((&b"a"[..], &b"b', 'c"[..])));
    }
}
