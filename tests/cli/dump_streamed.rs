//! `seglog dump --print-data-log` on a batch of 8 MiB or more, which is streamed from the file
//! with keys and values copied in chunks (`src/cli/dump/stream.rs`). Such a value used to be
//! decoded with Rust's `from_utf8_lossy` rules, so malformed UTF-8 in it printed differently from
//! Kafka's `DumpLogSegments` (the JDK's `new String(bytes, UTF_8)`: an encoded surrogate
//! `ED A0 80` is one U+FFFD there, three in Rust) and from the same record in a smaller batch.
//! Invariant: a streamed key or value prints the JDK's text, wherever the copy chunks cut its
//! malformed sequences, and the same as when its batch is read whole; so do header keys.

use record_format::{CompressionType, Header, RecordBatchBuilder};
use seglog::cli::dump::stream::{CHUNK, STREAM_BATCH_BYTES};
use seglog::cli::Status;

use super::common::{dump, tempdir, write};

const R: &str = "\u{FFFD}";

/// Byte strings and their text as OpenJDK 17's `new String(bytes, UTF_8)` decodes them (run on
/// the JVM; `R` is U+FFFD). Each ends in `|`, which no step of the decoder takes into a sequence
/// before it, so a concatenation decodes to the concatenation of the texts.
fn pieces() -> Vec<(&'static [u8], String)> {
    vec![
        // An encoded surrogate: one U+FFFD (Rust: three).
        (b"\xed\xa0\x80|", format!("{R}|")),
        // A truncated surrogate before ASCII: one U+FFFD (Rust: two).
        (b"\xed\xa0A|", format!("{R}A|")),
        // A surrogate pair encoded as two 3-byte sequences (CESU-8): two (Rust: six).
        (b"\xed\xa0\x80\xed\xb0\x80|", format!("{R}{R}|")),
        // Truncated 4-byte and 3-byte sequences before ASCII.
        (b"\xf0\x9f\x98A|", format!("{R}A|")),
        (b"\xe2\x82A|", format!("{R}A|")),
        // Above U+10FFFF, overlong forms, bytes that never start a sequence.
        (b"\xf4\x90\x80\x80A|", format!("{R}{R}{R}{R}A|")),
        (b"\xc0\x80|", format!("{R}{R}|")),
        (b"\xe0\x80\x80A|", format!("{R}{R}{R}A|")),
        (b"\xf0\x80\x80\x80A|", format!("{R}{R}{R}{R}A|")),
        (b"\xf5\x80\xbf\xffA|", format!("{R}{R}{R}{R}A|")),
        // Well-formed sequences cut by a chunk boundary.
        ("€|".as_bytes(), "€|".into()),
        ("😀|".as_bytes(), "😀|".into()),
    ]
}

/// A value of more than 8 MiB whose copy chunks (of `CHUNK` bytes from its first byte) each
/// end inside one of [`pieces`], at every position within every piece, and which ends in a
/// truncated 4-byte sequence; with the text the JDK gives for it.
fn value_across_chunks() -> (Vec<u8>, String) {
    let filler = "value text é € 😀 ";
    let mut bytes = Vec::new();
    let mut text = String::new();
    let mut boundary = 0;
    for (piece, piece_text) in pieces() {
        for cut in 1..piece.len() {
            boundary += CHUNK;
            // Filler up to `cut` bytes before the boundary: whole units, then ASCII.
            while bytes.len() + filler.len() + cut <= boundary {
                bytes.extend_from_slice(filler.as_bytes());
                text.push_str(filler);
            }
            while bytes.len() + cut < boundary {
                bytes.push(b'x');
                text.push('x');
            }
            bytes.extend_from_slice(piece);
            text.push_str(&piece_text);
        }
    }
    while (bytes.len() as u64) < STREAM_BATCH_BYTES {
        bytes.extend_from_slice(filler.as_bytes());
        text.push_str(filler);
    }
    bytes.extend_from_slice(b"tail\xf0\x9f\x98");
    text.push_str(&format!("tail{R}"));
    (bytes, text)
}

/// The record line of `offset`, without its offset.
fn record_line(stdout: &str, offset: i64) -> &str {
    let prefix = format!("| offset: {offset} ");
    let line = stdout
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no record line for offset {offset}"));
    &line[prefix.len()..]
}

#[test]
fn dump_streamed_value_with_malformed_utf8_across_chunks_prints_as_the_jdk_decodes_it() {
    let (value, value_text) = value_across_chunks();
    let key = b"key \xed\xa0\x80";
    let key_text = format!("key {R}");
    // Header keys are `Utils.utf8`, the same JDK decoder.
    let headers = [Header {
        key: b"h\xed\xa0\x80",
        value: Some(b"x"),
    }];
    let header_keys = format!("h{R}");
    // The decoder's rules on the whole value agree with the JVM's text of the pieces.
    assert_eq!(
        seglog::cli::dump::java_utf8::java_utf8_lossy(&value),
        value_text
    );
    // Rust's rules differ on this value (the test can tell the two apart).
    assert_ne!(String::from_utf8_lossy(&value), value_text);

    // The record in a batch that is streamed, then in a compressed batch that is read whole.
    let ts = 1_700_000_000_000;
    let mut big = RecordBatchBuilder::new(0);
    big.append(ts, Some(key), Some(&value), &headers)
        .expect("append");
    let big = big.build();
    assert!(
        big.len() as u64 >= STREAM_BATCH_BYTES,
        "{} bytes",
        big.len()
    );
    let mut small = RecordBatchBuilder::new(1).compression(CompressionType::Gzip);
    small
        .append(ts, Some(key), Some(&value), &headers)
        .expect("append");
    let small = small.build();
    assert!(
        (small.len() as u64) < STREAM_BATCH_BYTES / 4,
        "{} bytes",
        small.len()
    );
    let dir = tempdir();
    let path = write(
        dir.path(),
        "00000000000000000000.log",
        &[big, small].concat(),
    );

    for flags in [
        &["--print-data-log"][..],
        &["--deep-iteration", "--print-data-log"][..],
    ] {
        let mut argv: Vec<&std::ffi::OsStr> = flags.iter().map(|f| f.as_ref()).collect();
        argv.push(path.as_os_str());
        let out = dump(&argv);
        assert_eq!(out.status, Status::Success, "{flags:?}: {}", out.stderr);
        let streamed = record_line(&out.stdout, 0);
        let whole = record_line(&out.stdout, 1);
        let expected = format!(
            "CreateTime: {ts} keySize: {} valueSize: {} sequence: -1 headerKeys: [{header_keys}] key: {key_text} payload: {value_text}",
            key.len(),
            value.len()
        );
        if streamed != expected {
            let at = streamed
                .bytes()
                .zip(expected.bytes())
                .position(|(a, b)| a != b)
                .unwrap_or(streamed.len().min(expected.len()));
            let around = |s: &str| {
                let b = s.as_bytes();
                let (from, to) = (at.saturating_sub(40).min(b.len()), (at + 40).min(b.len()));
                String::from_utf8_lossy(&b[from..to]).into_owned()
            };
            panic!(
                "{flags:?}: the streamed record differs from the JDK's text at byte {at}: {:?} vs {:?}",
                around(streamed),
                around(&expected),
            );
        }
        assert!(
            whole == streamed,
            "{flags:?}: the whole batch prints otherwise"
        );
    }
}
