//! `parser/redact.py`'s `_candidates` in one pass over a message column: the rows a redaction rule may change.
//!
//! A row is looked at when it may hold a header dump (a newline, where the caller says a message can hold one) or
//! a marked value (`marks`: a codec header line, a URL's `?;#%`, a dump pair's `' ,`); it is a candidate when it
//! holds one of `words` (ASCII case folded, as polars' `str.contains_any(ascii_case_insensitive=True)` finds them:
//! the same aho-corasick build), matches `token` (a long token with a letter beyond hex), or holds a character
//! beyond ASCII. The regexes are built by the engine under the `regex` crate (`regex_automata::meta`, what
//! `Regex::new` builds, as polars' `str.contains` compiles them: the same matches), searched with one cache each for
//! the whole column (`Regex::is_match` takes one from a pool at every search).

use aho_corasick::AhoCorasick;
use regex_automata::meta::{Cache, Regex};
use regex_automata::Input;

pub struct Candidates {
    marks: Regex,
    words: AhoCorasick,
    token: Regex,
}

impl Candidates {
    pub fn new(marks: &str, words: &[String], token: &str) -> Result<Self, String> {
        Ok(Candidates {
            marks: Regex::new(marks).map_err(|e| e.to_string())?,
            words: AhoCorasick::builder().ascii_case_insensitive(true).build(words).map_err(|e| e.to_string())?,
            token: Regex::new(token).map_err(|e| e.to_string())?,
        })
    }

    /// The candidate rows of `messages` in order (a null message is none); `multiline`: per row whether its
    /// message can hold a dump's newline (None: every row can).
    pub fn rows(&self, messages: &[Option<&[u8]>], multiline: Option<&[bool]>) -> Vec<u32> {
        let (mut marks, mut token) = (self.marks.create_cache(), self.token.create_cache());
        let found = |re: &Regex, cache: &mut Cache, text: &[u8]| {
            re.search_with(cache, &Input::new(text).earliest(true)).is_some()
        };
        let mut out = Vec::new();
        for (i, message) in messages.iter().enumerate() {
            let Some(text) = message else { continue };
            let dump = multiline.is_none_or(|m| m[i]) && memchr::memchr(b'\n', text).is_some();
            if !(dump || found(&self.marks, &mut marks, text)) {
                continue;
            }
            if self.words.is_match(text) || found(&self.token, &mut token, text) || !text.is_ascii() {
                out.push(i as u32);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidates() -> Candidates {
        let words: Vec<String> = ["cookie", "token", "?key="].iter().map(|w| w.to_string()).collect();
        Candidates::new(r"completed header: key=|[?;#%]|' ?,", &words, r"['=](?:[A-Za-z0-9]{8,}[g-z])").unwrap()
    }

    #[test]
    fn a_row_needs_a_mark_or_a_dump_and_then_a_word_a_token_or_non_ascii() {
        let messages: Vec<Option<&[u8]>> = vec![
            Some(b"completed header: key=Cookie value=a"),  // marked, a word (case folded)
            Some(b"no mark at all: cookie"),                 // a word, but nothing marks it
            Some(b"GET /a?key=1"),                           // marked, a word with its separator
            Some(b"GET /a?other=1"),                         // marked, nothing to redact
            None,
            Some(b"headers:\n'x', 'TOKEN'"),                 // a dump: newline, then a word
            Some(b"completed header: key=x value=abcdefgh1z"), // marked, a long token
            Some("completed header: key=x value=\u{212a}".as_bytes()), // marked, beyond ASCII
        ];
        assert_eq!(candidates().rows(&messages, None), vec![0, 2, 5, 6, 7]);
    }

    #[test]
    fn a_newline_counts_only_where_the_caller_says_a_message_can_hold_a_dump() {
        let messages: Vec<Option<&[u8]>> = vec![Some(b"one\ncookie"), Some(b"two\ncookie")];
        assert_eq!(candidates().rows(&messages, Some(&[false, true])), vec![1]);
    }
}
