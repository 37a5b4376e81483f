//! Bytes to text as Kafka's `DumpLogSegments` does it: `StringDecoder` is
//! `new String(bytes, UTF_8)`, whose JDK decoder replaces malformed input with U+FFFD by rules of
//! its own. On valid UTF-8 it agrees with [`String::from_utf8_lossy`]; on malformed input the
//! number of U+FFFD differs (an encoded surrogate `ED A0 80` is one U+FFFD in Java, three in
//! Rust; a truncated 4-byte sequence at the end is one U+FFFD for all its bytes). This is a port of
//! the JDK 17 `String.decodeUTF8_UTF16` replacement path, checked against the JVM by
//! `tests/kafka_interop.rs` (`java_utf8_decoding_matches_the_jdk`).

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

/// `new String(bytes, StandardCharsets.UTF_8)` of a JDK 17.
pub fn java_utf8_lossy(src: &[u8]) -> Cow<'_, str> {
    if let Ok(s) = std::str::from_utf8(src) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(src.len() + 8);
    let sl = src.len();
    let mut sp = 0usize;
    let at = |i: usize| src.get(i).copied().unwrap_or(0);
    while sp < sl {
        let b1 = at(sp);
        sp += 1;
        if b1 < 0x80 {
            out.push(char::from(b1));
        } else if b1 & 0xe0 == 0xc0 && b1 & 0x1e != 0 {
            if sp < sl {
                let b2 = at(sp);
                if not_cont(b2) {
                    out.push(REPL);
                } else {
                    sp += 1;
                    let c = (u32::from(b1 & 0x1f) << 6) | u32::from(b2 & 0x3f);
                    out.push(char::from_u32(c).unwrap_or(REPL));
                }
                continue;
            }
            out.push(REPL);
            break;
        } else if b1 & 0xf0 == 0xe0 {
            if sp + 1 < sl {
                let (b2, b3) = (at(sp), at(sp + 1));
                if malformed3(b1, b2, b3) {
                    out.push(REPL);
                    sp = sp - 1 + skip3(b1, b2);
                } else {
                    sp += 2;
                    let c = (u32::from(b1 & 0x0f) << 12)
                        | (u32::from(b2 & 0x3f) << 6)
                        | u32::from(b3 & 0x3f);
                    // Surrogates are not characters: one U+FFFD for the three bytes.
                    out.push(char::from_u32(c).unwrap_or(REPL));
                }
                continue;
            }
            if sp < sl && malformed3_2(b1, at(sp)) {
                out.push(REPL);
                continue;
            }
            out.push(REPL);
            break;
        } else if b1 & 0xf8 == 0xf0 {
            if sp + 2 < sl {
                let (b2, b3, b4) = (at(sp), at(sp + 1), at(sp + 2));
                let uc = (u32::from(b1 & 0x07) << 18)
                    | (u32::from(b2 & 0x3f) << 12)
                    | (u32::from(b3 & 0x3f) << 6)
                    | u32::from(b4 & 0x3f);
                if not_cont(b2)
                    || not_cont(b3)
                    || not_cont(b4)
                    || !(0x10000..=0x10ffff).contains(&uc)
                {
                    out.push(REPL);
                    sp = sp - 1 + skip4(b1, b2, b3);
                } else {
                    sp += 3;
                    out.push(char::from_u32(uc).unwrap_or(REPL));
                }
                continue;
            }
            if b1 > 0xf4 || (sp < sl && malformed4_2(b1, at(sp))) {
                out.push(REPL);
                continue;
            }
            sp += 1;
            out.push(REPL);
            if sp < sl && not_cont(at(sp)) {
                continue;
            }
            break;
        } else {
            out.push(REPL);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::java_utf8_lossy;

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
}
