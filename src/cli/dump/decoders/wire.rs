//! The runtime of the generated decoders: a bounds-checked reader of Kafka's message encoding
//! (Kafka: `org.apache.kafka.common.protocol.Readable` and the generated `read` methods' checks)
//! and the JSON tree Kafka's generated `*JsonConverter.write` builds, rendered the way Jackson's
//! `JsonNode.toString()` renders it.
//!
//! ```text
//! int8/16/32/64, uint16/32, float64   big-endian, fixed width
//! uuid                                16 bytes, shown as URL-safe base64 without padding
//! string, bytes (classic)             int16 / int32 length, -1 = null, then the bytes
//! string, bytes (flexible, compact)   unsigned varint length+1, 0 = null, then the bytes
//! array (classic / compact)           int32 count / unsigned varint count+1, then the elements
//! nullable struct                     int8 marker (-1 = null), then the struct
//! tagged fields (flexible)            uvarint count, then per field: uvarint tag, uvarint size, bytes
//! ```

use std::fmt::Write as _;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

use crate::cli::dump::java_utf8::java_utf8_lossy;

/// Kafka's `Uuid.ZERO_UUID.toString()`.
pub const ZERO_UUID: &str = "AAAAAAAAAAAAAAAAAAAAAA";

/// Why a record did not decode, and the byte position (in the file) where reading stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// Byte position in the dumped file.
    pub position: u64,
    /// What went wrong, in Kafka's words where Kafka has words for it.
    pub reason: String,
    /// The input ended early: Java's `BufferUnderflowException`, whose message is `null`.
    pub underflow: bool,
}

impl DecodeError {
    /// An error at `position`.
    pub fn new(position: u64, reason: impl Into<String>) -> Self {
        DecodeError {
            position,
            reason: reason.into(),
            underflow: false,
        }
    }

    /// `e.getMessage()` of the exception Kafka's reader throws for this error.
    pub fn java_message(&self) -> &str {
        if self.underflow {
            "null"
        } else {
            &self.reason
        }
    }
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at byte position {}", self.reason, self.position)
    }
}

/// A decoded value: the JSON tree Kafka's `*JsonConverter.write` returns, in field order.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    /// `NullNode`.
    Null,
    /// `BooleanNode`.
    Bool(bool),
    /// `ShortNode` / `IntNode` / `LongNode`.
    Int(i64),
    /// `DoubleNode`.
    Float(f64),
    /// `TextNode` (strings and uuids).
    Str(String),
    /// `BinaryNode`: shown as standard base64.
    Bytes(Vec<u8>),
    /// `ArrayNode`.
    Array(Vec<Json>),
    /// `ObjectNode`, fields in insertion order.
    Object(Vec<(&'static str, Json)>),
}

impl Json {
    /// The field `name` of an object.
    pub fn get(&self, name: &str) -> Option<&Json> {
        match self {
            Json::Object(o) => o.iter().find(|(k, _)| *k == name).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Jackson's compact `JsonNode.toString()`.
    pub fn to_jackson(&self) -> String {
        let mut s = String::new();
        self.write_jackson(&mut s);
        s
    }

    fn write_jackson(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Int(n) => {
                let _ = write!(out, "{n}");
            }
            Json::Float(x) => out.push_str(&java_double(*x)),
            Json::Str(s) => quote(s, out),
            Json::Bytes(b) => quote(&STANDARD.encode(b), out),
            Json::Array(a) => {
                out.push('[');
                for (i, e) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    e.write_jackson(out);
                }
                out.push(']');
            }
            Json::Object(o) => {
                out.push('{');
                for (i, (k, v)) in o.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    quote(k, out);
                    out.push(':');
                    v.write_jackson(out);
                }
                out.push('}');
            }
        }
    }
}

impl Serialize for Json {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Json::Null => s.serialize_none(),
            Json::Bool(b) => s.serialize_bool(*b),
            Json::Int(n) => s.serialize_i64(*n),
            Json::Float(x) => s.serialize_f64(*x),
            Json::Str(t) => s.serialize_str(t),
            Json::Bytes(b) => s.serialize_str(&STANDARD.encode(b)),
            Json::Array(a) => {
                let mut seq = s.serialize_seq(Some(a.len()))?;
                for e in a {
                    seq.serialize_element(e)?;
                }
                seq.end()
            }
            Json::Object(o) => {
                let mut m = s.serialize_map(Some(o.len()))?;
                for (k, v) in o {
                    m.serialize_entry(k, v)?;
                }
                m.end()
            }
        }
    }
}

/// Jackson's string quoting: `"` and `\` escaped, control characters as `\n`-style short
/// escapes where JSON has one and `\u00XX` otherwise; everything else as is.
fn quote(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Java's `Double.toString`: plain notation with at least one fractional digit for
/// 10^-3 <= |x| < 10^7, computerized scientific notation (`1.0E7`) otherwise.
pub fn java_double(x: f64) -> String {
    if x.is_nan() {
        return "NaN".to_owned();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0" } else { "0.0" }.to_owned();
    }
    let a = x.abs();
    if (1e-3..1e7).contains(&a) {
        let s = format!("{x}");
        if s.contains('.') {
            s
        } else {
            s + ".0"
        }
    } else {
        let s = format!("{x:e}");
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        let m = if m.contains('.') {
            m.to_owned()
        } else {
            format!("{m}.0")
        };
        format!("{m}E{e}")
    }
}

/// Kafka's `Uuid.toString()`: URL-safe base64 of the 16 bytes, no padding.
pub fn uuid_string(b: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(b)
}

/// A bounds-checked big-endian reader over one record key or value. `base` is the byte position
/// of `buf[0]` in the file, so every error names a file position.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    base: u64,
}

impl<'a> Reader<'a> {
    /// A reader over `buf`, which starts at byte `base` of the file.
    pub fn new(buf: &'a [u8], base: u64) -> Self {
        Reader { buf, pos: 0, base }
    }

    /// File position of the next byte.
    pub fn position(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// An error at the current position.
    pub fn error(&self, reason: impl Into<String>) -> DecodeError {
        DecodeError::new(self.position(), reason)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| DecodeError {
                underflow: true,
                ..self.error(format!(
                    "needed {n} bytes, only {} remain",
                    self.remaining()
                ))
            })?;
        let s = self.buf.get(self.pos..end).unwrap_or_default();
        self.pos = end;
        Ok(s)
    }

    fn fixed<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    /// Kafka's `readByte() != 0`.
    pub fn bool(&mut self) -> Result<bool, DecodeError> {
        Ok(self.i8()? != 0)
    }
    /// `int8`.
    pub fn i8(&mut self) -> Result<i8, DecodeError> {
        Ok(i8::from_be_bytes(self.fixed()?))
    }
    /// `int16`.
    pub fn i16(&mut self) -> Result<i16, DecodeError> {
        Ok(i16::from_be_bytes(self.fixed()?))
    }
    /// `uint16`.
    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.fixed()?))
    }
    /// `int32`.
    pub fn i32(&mut self) -> Result<i32, DecodeError> {
        Ok(i32::from_be_bytes(self.fixed()?))
    }
    /// `uint32`.
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.fixed()?))
    }
    /// `int64`.
    pub fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(i64::from_be_bytes(self.fixed()?))
    }
    /// `float64`.
    pub fn f64(&mut self) -> Result<f64, DecodeError> {
        Ok(f64::from_be_bytes(self.fixed()?))
    }
    /// `uuid`, as Kafka prints it.
    pub fn uuid(&mut self) -> Result<String, DecodeError> {
        Ok(uuid_string(self.take(16)?))
    }

    /// An unsigned varint (at most 5 bytes).
    pub fn uvarint(&mut self) -> Result<u32, DecodeError> {
        let start = self.pos;
        let mut v: u32 = 0;
        for i in 0..5 {
            let b = self.i8()? as u8;
            v |= u32::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        self.pos = start;
        Err(self.error("Varint is too long, the most significant bit in the 5th byte is set"))
    }

    /// The length of a string, bytes or array field: `None` for null.
    fn length(&mut self, flex: bool, wide: bool) -> Result<Option<usize>, DecodeError> {
        let n: i64 = if flex {
            i64::from(self.uvarint()?) - 1
        } else if wide {
            i64::from(self.i32()?)
        } else {
            i64::from(self.i16()?)
        };
        Ok(usize::try_from(n).ok())
    }

    /// A `string` field (`name` is the schema field name, for Kafka's error text).
    pub fn string(&mut self, flex: bool, nullable: bool, name: &str) -> Result<Json, DecodeError> {
        let at = self.position();
        match self.length(flex, false)? {
            None if nullable => Ok(Json::Null),
            None => Err(DecodeError::new(
                at,
                format!("non-nullable field {name} was serialized as null"),
            )),
            Some(n) if n > 0x7fff => Err(DecodeError::new(
                at,
                format!("string field {name} had invalid length {n}"),
            )),
            // Kafka's generated readers decode with `new String(bytes, UTF_8)`: the JDK's
            // replacement rules, not Rust's.
            Some(n) => Ok(Json::Str(java_utf8_lossy(self.take(n)?).into_owned())),
        }
    }

    /// A `bytes` (or `records`) field.
    pub fn bytes(&mut self, flex: bool, nullable: bool, name: &str) -> Result<Json, DecodeError> {
        let at = self.position();
        match self.length(flex, true)? {
            None if nullable => Ok(Json::Null),
            None => Err(DecodeError::new(
                at,
                format!("non-nullable field {name} was serialized as null"),
            )),
            Some(n) => Ok(Json::Bytes(self.take(n)?.to_vec())),
        }
    }

    /// An array field whose elements `elem` reads.
    pub fn array(
        &mut self,
        flex: bool,
        nullable: bool,
        name: &str,
        mut elem: impl FnMut(&mut Reader<'a>) -> Result<Json, DecodeError>,
    ) -> Result<Json, DecodeError> {
        let at = self.position();
        match self.length(flex, true)? {
            None if nullable => Ok(Json::Null),
            None => Err(DecodeError::new(at, format!("non-nullable field {name} was serialized as null"))),
            Some(n) if n > self.remaining() => Err(DecodeError::new(at, format!(
                    "Tried to allocate a collection of size {n}, but there are only {} bytes remaining.",
                    self.remaining()
                ))),
            Some(n) => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(elem(self)?);
                }
                Ok(Json::Array(v))
            }
        }
    }

    /// A struct field; a nullable struct carries a presence marker: an int8 (negative = null),
    /// or in flexible versions an unsigned varint (0 = null).
    pub fn nullable_struct(
        &mut self,
        flex: bool,
        nullable: bool,
        read: impl FnOnce(&mut Reader<'a>) -> Result<Json, DecodeError>,
    ) -> Result<Json, DecodeError> {
        if nullable {
            let null = if flex {
                self.uvarint()? == 0
            } else {
                self.i8()? < 0
            };
            if null {
                return Ok(Json::Null);
            }
        }
        read(self)
    }

    /// The tagged-field section: `known(tag, field_reader)` reads a known tag from a reader
    /// bounded by the field's size and returns `true`, or returns `false` to skip it.
    pub fn tagged_fields(
        &mut self,
        mut known: impl FnMut(u32, &mut Reader<'a>) -> Result<bool, DecodeError>,
    ) -> Result<(), DecodeError> {
        let n = self.uvarint()?;
        for _ in 0..n {
            let tag = self.uvarint()?;
            let size = self.uvarint()? as usize;
            let base = self.position();
            let body = self.take(size)?;
            let mut sub = Reader::new(body, base);
            known(tag, &mut sub)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_decode_with_the_jdk_replacement_rules() {
        // A non-flexible string (INT16 length) holding an encoded surrogate: OpenJDK 17's
        // `new String(b, UTF_8)` gives one U+FFFD for `ED A0 80` (Rust's rules give three).
        let buf = [0, 5, b'a', 0xed, 0xa0, 0x80, b'b'];
        let mut r = Reader::new(&buf, 0);
        match r.string(false, false, "name").expect("string") {
            Json::Str(s) => assert_eq!(s, "a\u{FFFD}b"),
            other => panic!("not a string: {other:?}"),
        }
    }

    #[test]
    fn java_double_matches_double_to_string() {
        // Values and expected strings from Java's Double.toString documentation.
        assert_eq!(java_double(100.0), "100.0");
        assert_eq!(java_double(0.001), "0.001");
        assert_eq!(java_double(1.0e7), "1.0E7");
        assert_eq!(java_double(1.5e-4), "1.5E-4");
        assert_eq!(java_double(-2.5), "-2.5");
    }

    #[test]
    fn jackson_escapes() {
        let j = Json::Object(vec![("a", Json::Str("x\"\\\n\u{1}é".to_owned()))]);
        assert_eq!(j.to_jackson(), r#"{"a":"x\"\\\n\u0001é"}"#);
    }

    #[test]
    fn short_input_is_an_error_with_position() {
        let mut r = Reader::new(&[0, 1], 100);
        let e = r.i32().err();
        assert_eq!(e.map(|e| e.position), Some(100));
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01], 7);
        assert!(r.uvarint().is_err());
    }

    #[test]
    fn huge_array_count_is_refused_before_allocating() {
        let mut r = Reader::new(&[0x7f, 0xff, 0xff, 0xff], 0);
        let e = r.array(false, false, "x", |r| Ok(Json::Int(i64::from(r.i8()?))));
        assert!(e.is_err_and(|e| e.reason.starts_with("Tried to allocate")));
    }
}
