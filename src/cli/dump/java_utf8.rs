//! Bytes to text as Kafka's `DumpLogSegments` does it: `StringDecoder` is
//! `new String(bytes, UTF_8)`, whose JDK decoder replaces malformed input with U+FFFD by rules of
//! its own. On valid UTF-8 it agrees with [`String::from_utf8_lossy`]; on encoded surrogates the
//! number of U+FFFD differs (`ED A0 80` is one U+FFFD in Java, three in Rust; a cut `ED A0` one,
//! not two). This is a port of the JDK 17 `String.decodeUTF8_UTF16` replacement path (also used
//! for header keys: Kafka's `Utils.utf8` is the same decoder), checked against the JVM by
//! `tests/kafka_interop.rs` (`java_utf8_decoding_matches_the_jdk`).
//!
//! There is one implementation, [`JavaUtf8Decoder`], fed any number of chunks (a streamed value
//! of any size); [`java_utf8_lossy`] feeds it the whole input as one chunk, so the two give the
//! same text by construction wherever the chunks are cut.

use std::borrow::Cow;

const REPL: char = '\u{FFFD}';

fn not_cont(b: u8) -> bool {
    b & 0xc0 != 0x80
}

fn malformed3(b1: u8, b2: u8, b3: u8) -> bool {
    (b1 == 0xe0 && b2 & 0xe0 == 0x80) || not_cont(b2) || not_cont(b3)
}

fn malformed3_2(b1: u8, b2: u8) -> bool {
    (b1 == 0xe0 && b2 & 0xe0 == 0x80) || not_cont(b2)
}

fn malformed4_2(b1: u8, b2: u8) -> bool {
    (b1 == 0xf0 && !(0x90..=0xbf).contains(&b2))
        || (b1 == 0xf4 && b2 & 0xf0 != 0x80)
        || not_cont(b2)
}

/// Bytes skipped after a malformed 3-byte sequence starting with `b1, b2`.
fn skip3(b1: u8, b2: u8) -> usize {
    if (b1 == 0xe0 && b2 & 0xe0 == 0x80) || not_cont(b2) {
        1
    } else {
        2
    }
}

/// Bytes skipped after a malformed 4-byte sequence starting with `b1, b2, b3`.
fn skip4(b1: u8, b2: u8, b3: u8) -> usize {
    if b1 > 0xf4
        || (b1 == 0xf0 && !(0x90..=0xbf).contains(&b2))
        || (b1 == 0xf4 && b2 & 0xf0 != 0x80)
        || not_cont(b2)
    {
        1
    } else if not_cont(b3) {
        2
    } else {
        3
    }
}

/// What the JDK's decoder does at a position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Appends the `char`, consuming this many bytes.
    Emit(char, usize),
    /// The rule needs bytes that have not been fed yet.
    NeedMore,
}

/// One step of JDK 17's `String.decodeUTF8_UTF16` (the replacing path) at the start of `s`;
/// `end`: no bytes follow `s`. The JDK looks at most four bytes ahead (the lead byte and three
/// more) and at whether the input ends before them, so with fewer than the sequence needs and
/// more input to come the step waits ([`Step::NeedMore`]).
fn step(s: &[u8], end: bool) -> Step {
    let at = |i: usize| s.get(i).copied();
    let Some(b1) = at(0) else {
        return Step::NeedMore;
    };
    // With `end`, a sequence cut short by the end of input takes what is left (the JDK's
    // `break` out of its loop).
    let rest = s.len();
    if b1 < 0x80 {
        Step::Emit(char::from(b1), 1)
    } else if b1 & 0xe0 == 0xc0 && b1 & 0x1e != 0 {
        match at(1) {
            Some(b2) if not_cont(b2) => Step::Emit(REPL, 1),
            Some(b2) => {
                let c = (u32::from(b1 & 0x1f) << 6) | u32::from(b2 & 0x3f);
                Step::Emit(char::from_u32(c).unwrap_or(REPL), 2)
            }
            None if end => Step::Emit(REPL, rest),
            None => Step::NeedMore,
        }
    } else if b1 & 0xf0 == 0xe0 {
        match (at(1), at(2)) {
            (Some(b2), Some(b3)) if malformed3(b1, b2, b3) => Step::Emit(REPL, skip3(b1, b2)),
            (Some(b2), Some(b3)) => {
                let c = (u32::from(b1 & 0x0f) << 12)
                    | (u32::from(b2 & 0x3f) << 6)
                    | u32::from(b3 & 0x3f);
                // Surrogates are not characters: one U+FFFD for the three bytes.
                Step::Emit(char::from_u32(c).unwrap_or(REPL), 3)
            }
            _ if !end => Step::NeedMore,
            (Some(b2), None) if malformed3_2(b1, b2) => Step::Emit(REPL, 1),
            _ => Step::Emit(REPL, rest),
        }
    } else if b1 & 0xf8 == 0xf0 {
        match (at(1), at(2), at(3)) {
            (Some(b2), Some(b3), Some(b4)) => {
                let uc = (u32::from(b1 & 0x07) << 18)
                    | (u32::from(b2 & 0x3f) << 12)
                    | (u32::from(b3 & 0x3f) << 6)
                    | u32::from(b4 & 0x3f);
                if not_cont(b2)
                    || not_cont(b3)
                    || not_cont(b4)
                    || !(0x10000..=0x10ffff).contains(&uc)
                {
                    Step::Emit(REPL, skip4(b1, b2, b3))
                } else {
                    Step::Emit(char::from_u32(uc).unwrap_or(REPL), 4)
                }
            }
            _ if !end => Step::NeedMore,
            (b2, b3, _) => {
                if b1 > 0xf4 || b2.is_some_and(|b2| malformed4_2(b1, b2)) {
                    Step::Emit(REPL, 1)
                } else if b3.is_some_and(not_cont) {
                    Step::Emit(REPL, 2)
                } else {
                    Step::Emit(REPL, rest)
                }
            }
        }
    } else {
        Step::Emit(REPL, 1)
    }
}

/// Appends the UTF-8 encoding of `c` (copies of a fixed length: a value of random bytes is
/// mostly U+FFFD).
fn push(out: &mut Vec<u8>, c: char) {
    let mut b = [0; 4];
    match c.encode_utf8(&mut b).len() {
        1 => out.push(b[0]),
        2 => out.extend_from_slice(&[b[0], b[1]]),
        3 => out.extend_from_slice(&[b[0], b[1], b[2]]),
        _ => out.extend_from_slice(&b),
    }
}

/// Appends the text of `s` to `out` (UTF-8) and returns the bytes at its end that wait for more
/// input (at most three: an incomplete sequence; none if `end`).
fn decode<'s>(mut s: &'s [u8], end: bool, out: &mut Vec<u8>) -> &'s [u8] {
    loop {
        // Well-formed UTF-8 decodes to the same text under both rules: copy it whole.
        let valid = match std::str::from_utf8(s) {
            Ok(all) => all.len(),
            Err(e) => e.valid_up_to(),
        };
        let (text, rest) = s.split_at(valid);
        if !text.is_empty() {
            out.extend_from_slice(text);
        }
        s = rest;
        if s.is_empty() {
            return s;
        }
        match step(s, end) {
            Step::Emit(c, n) => {
                push(out, c);
                s = s.get(n..).unwrap_or_default();
            }
            Step::NeedMore => return s,
        }
    }
}

/// The JDK's UTF-8 decoder (as [`java_utf8_lossy`]) fed a chunk at a time: the text of the
/// chunks fed, then [`finish`](Self::finish), is `java_utf8_lossy` of their concatenation,
/// wherever the chunks are cut. Between chunks it keeps the bytes of one incomplete sequence
/// (at most three).
#[derive(Debug, Default, Clone)]
pub struct JavaUtf8Decoder {
    carry: [u8; 3],
    carry_len: usize,
}

impl JavaUtf8Decoder {
    /// Appends to `out` the text (UTF-8) of `chunk` following the bytes fed before; an
    /// incomplete sequence at its end waits for the next chunk. What is appended is always
    /// whole characters.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        let mut chunk = chunk;
        if self.carry_len > 0 {
            // The carried bytes and up to four of the chunk decide every step that starts in
            // the carry (a step reads at most four bytes). A step can still wait only if the
            // chunk is shorter than four bytes, so all of it is in `joined`.
            let carried = self.carry_len;
            let take = chunk.len().min(4);
            let mut joined = [0u8; 7];
            let n = carried + take;
            for (dst, src) in joined.iter_mut().zip(
                self.carry
                    .iter()
                    .take(carried)
                    .chain(chunk.iter().take(take)),
            ) {
                *dst = *src;
            }
            let joined = joined.get(..n).unwrap_or_default();
            let mut p = 0;
            while p < carried {
                let s = joined.get(p..).unwrap_or_default();
                match step(s, false) {
                    Step::Emit(c, k) => {
                        push(out, c);
                        p += k;
                    }
                    Step::NeedMore => {
                        self.keep(s);
                        return;
                    }
                }
            }
            chunk = chunk.get(p - carried..).unwrap_or_default();
            self.carry_len = 0;
        }
        let rest = decode(chunk, false, out);
        self.keep(rest);
    }

    /// Appends to `out` the text of what is still carried: the input has ended.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        let carry = self.carry;
        let rest = decode(carry.get(..self.carry_len).unwrap_or_default(), true, out);
        debug_assert!(rest.is_empty(), "at the end every byte is decided");
        self.carry_len = 0;
    }

    fn keep(&mut self, rest: &[u8]) {
        debug_assert!(rest.len() <= self.carry.len(), "an incomplete sequence");
        self.carry_len = rest.len().min(self.carry.len());
        for (dst, src) in self.carry.iter_mut().zip(rest) {
            *dst = *src;
        }
    }
}

/// `new String(bytes, StandardCharsets.UTF_8)` of a JDK 17: [`JavaUtf8Decoder`] fed `src` as
/// one chunk.
pub fn java_utf8_lossy(src: &[u8]) -> Cow<'_, str> {
    if let Ok(s) = std::str::from_utf8(src) {
        return Cow::Borrowed(s);
    }
    let mut out = Vec::with_capacity(src.len() + 8);
    let mut d = JavaUtf8Decoder::default();
    d.feed(src, &mut out);
    d.finish(&mut out);
    // The decoder appends only well-formed UTF-8 and U+FFFD.
    Cow::Owned(
        String::from_utf8(out)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
    )
}

#[cfg(test)]
mod tests {
    use super::{java_utf8_lossy, JavaUtf8Decoder};
    use proptest::prelude::*;

    #[test]
    fn valid_utf8_is_borrowed_unchanged() {
        let s = "plain ascii, é, 日本, 𝄞";
        assert!(matches!(java_utf8_lossy(s.as_bytes()), std::borrow::Cow::Borrowed(x) if x == s));
    }

    // Expected values below are what OpenJDK 17's `new String(b, UTF_8)` returns (checked
    // against the JVM by tests/kafka_interop.rs on random input as well).
    #[test]
    fn an_encoded_surrogate_is_one_replacement() {
        assert_eq!(
            java_utf8_lossy(&[b'a', 0xed, 0xa0, 0x80, b'b']),
            "a\u{FFFD}b"
        );
        assert_eq!(
            String::from_utf8_lossy(&[b'a', 0xed, 0xa0, 0x80, b'b']),
            "a\u{FFFD}\u{FFFD}\u{FFFD}b"
        );
    }

    #[test]
    fn a_truncated_four_byte_sequence_at_the_end_is_one_replacement() {
        assert_eq!(java_utf8_lossy(&[b'x', 0xf0, 0x90, 0x80]), "x\u{FFFD}");
        assert_eq!(java_utf8_lossy(&[b'x', 0xf0, 0x90, 0x41]), "x\u{FFFD}A");
    }

    /// Malformed input as OpenJDK 17.0.15 decodes it (`new String(b, UTF_8)` run on the JVM;
    /// `?` stands for U+FFFD).
    #[test]
    fn malformed_sequences_decode_as_on_the_jvm() {
        let jvm: &[(&[u8], &str)] = &[
            (b"a\xed\xa0Ab", "a?Ab"),
            (b"a\xed\xa0", "a?"),
            (b"\xc0\x80ab", "??ab"),
            (b"\xc1\xbfA", "??A"),
            (b"\xe0\x80\x80A", "???A"),
            (b"\xe0\x9f\xbfA", "???A"),
            (b"\xf0\x80\x80\x80A", "????A"),
            (b"\xf4\x8f", "?"),
            (b"\xf4\x90\x80\x80A", "????A"),
            (b"\xf5ABC", "?ABC"),
            (b"\x80\xbfA", "??A"),
            (b"\xe2\x82A", "?A"),
            (b"A\xe2\x82", "A?"),
            (b"A\xf0\x9f", "A?"),
            (b"A\xed\xa0\x80\xed\xb0\x80A", "A??A"),
            (b"A\xf0\xc0", "A??"),
            (b"A\xe0\xa0", "A?"),
            (b"A\xf1\x80\x80A", "A?A"),
            (b"A\xf4\x90", "A??"),
            (b"A\xe0\x80", "A??"),
        ];
        for (bytes, text) in jvm {
            assert_eq!(
                java_utf8_lossy(bytes),
                text.replace('?', "\u{FFFD}"),
                "{bytes:02x?}"
            );
        }
    }

    /// `bytes` fed in the chunks that `cuts` (ascending positions) make, then finished.
    fn chunked(bytes: &[u8], cuts: &[usize]) -> String {
        let mut d = JavaUtf8Decoder::default();
        let mut out = Vec::new();
        let mut from = 0;
        for &cut in cuts.iter().chain([bytes.len()].iter()) {
            let to = cut.clamp(from, bytes.len());
            d.feed(&bytes[from..to], &mut out);
            from = to;
        }
        d.finish(&mut out);
        String::from_utf8(out).expect("the decoder writes UTF-8")
    }

    /// Byte strings made of pieces that are mostly malformed: lone continuation bytes,
    /// truncated sequences, encoded surrogates, overlong forms, sequences above U+10FFFF,
    /// bytes that never start a sequence; and well-formed characters and random bytes.
    fn malformed_utf8() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            any::<u8>().prop_map(|b| vec![b]),
            (0x80u8..=0xbf).prop_map(|b| vec![b]),
            prop::sample::select(vec!["A", "é", "€", "日", "😀", "\u{10ffff}"])
                .prop_map(|s| s.as_bytes().to_vec()),
            // Truncated 2-, 3- and 4-byte sequences.
            (0xc2u8..=0xdf).prop_map(|b| vec![b]),
            (0xe1u8..=0xef, 0x80u8..=0xbf).prop_map(|(a, b)| vec![a, b]),
            (0xf1u8..=0xf3, 0x80u8..=0xbf, 0x80u8..=0xbf).prop_map(|(a, b, c)| vec![a, b, c]),
            // Surrogates (whole and cut), overlong forms, above U+10FFFF.
            (0xa0u8..=0xbf, 0x80u8..=0xbf).prop_map(|(b, c)| vec![0xed, b, c]),
            (0xa0u8..=0xbf).prop_map(|b| vec![0xed, b]),
            (0xc0u8..=0xc1, 0x80u8..=0xbf).prop_map(|(a, b)| vec![a, b]),
            (0x80u8..=0x9f, 0x80u8..=0xbf).prop_map(|(b, c)| vec![0xe0, b, c]),
            (0x80u8..=0x8f, 0x80u8..=0xbf, 0x80u8..=0xbf).prop_map(|(b, c, d)| vec![0xf0, b, c, d]),
            (0x90u8..=0xbf, 0x80u8..=0xbf, 0x80u8..=0xbf).prop_map(|(b, c, d)| vec![0xf4, b, c, d]),
            (0xf5u8..=0xff, 0x80u8..=0xbf).prop_map(|(a, b)| vec![a, b]),
        ];
        prop::collection::vec(piece, 0..24).prop_map(|p| p.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Every cut into two chunks, and every cut into one-byte chunks.
        #[test]
        fn chunks_cut_anywhere_decode_as_the_whole(bytes in malformed_utf8()) {
            let whole = java_utf8_lossy(&bytes);
            for cut in 0..=bytes.len() {
                prop_assert_eq!(chunked(&bytes, &[cut]), whole.as_ref(), "cut at {}", cut);
            }
            let every: Vec<usize> = (1..bytes.len()).collect();
            prop_assert_eq!(chunked(&bytes, &every), whole.as_ref());
        }

        /// Random cuts, empty chunks included.
        #[test]
        fn chunks_cut_at_random_decode_as_the_whole(
            bytes in malformed_utf8(),
            mut cuts in prop::collection::vec(0usize..100, 0..12),
        ) {
            cuts.sort_unstable();
            let whole = java_utf8_lossy(&bytes);
            prop_assert_eq!(chunked(&bytes, &cuts), whole.as_ref());
        }
    }

    #[test]
    fn at_most_one_incomplete_sequence_is_carried() {
        let mut d = JavaUtf8Decoder::default();
        let mut out = Vec::new();
        d.feed(b"a\xf0\x9f\x98", &mut out);
        assert_eq!((out.as_slice(), d.carry_len), ("a".as_bytes(), 3));
        d.feed(b"\x80b\xe2", &mut out);
        assert_eq!((out.as_slice(), d.carry_len), ("a😀b".as_bytes(), 1));
        d.finish(&mut out);
        assert_eq!(
            (out.as_slice(), d.carry_len),
            ("a😀b\u{FFFD}".as_bytes(), 0)
        );
    }
}
