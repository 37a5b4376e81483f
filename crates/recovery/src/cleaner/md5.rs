//! MD5 (RFC 1321), the digest Kafka's `SkimpyOffsetMap` stores for each key
//! (`log.cleaner.hash.algorithm`, MD5 by default). Kept here so that keys collide exactly where
//! Kafka's would: two keys with one digest are one key of the map.
#![allow(
    clippy::indexing_slicing,
    reason = "fixed-size digests and slots indexed below their length, checked where computed"
)]

const S: [u32; 64] = [
    7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9,
    14, 20, 5, 9, 14, 20, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 6, 10, 15,
    21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
];

fn k(i: usize) -> u32 {
    // floor(abs(sin(i + 1)) * 2^32), as RFC 1321 defines the table.
    const K: [u32; 64] = [
        0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613,
        0xfd469501, 0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193,
        0xa679438e, 0x49b40821, 0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d,
        0x02441453, 0xd8a1e681, 0xe7d3fbc8, 0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed,
        0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a, 0xfffa3942, 0x8771f681, 0x6d9d6122,
        0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70, 0x289b7ec6, 0xeaa127fa,
        0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665, 0xf4292244,
        0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
        0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb,
        0xeb86d391,
    ];
    K[i % 64]
}

#[expect(
    clippy::little_endian_bytes,
    reason = "MD5 reads its words little-endian"
)]
fn block(state: &mut [u32; 4], chunk: &[u8; 64]) {
    let mut m = [0u32; 16];
    for (i, w) in m.iter_mut().enumerate() {
        let b = [
            chunk[i * 4],
            chunk[i * 4 + 1],
            chunk[i * 4 + 2],
            chunk[i * 4 + 3],
        ];
        *w = u32::from_le_bytes(b);
    }
    let [mut a, mut b, mut c, mut d] = *state;
    // The four rounds of 16 steps, each with its own function and message order (a loop per
    // round, which the compiler unrolls, rather than one loop choosing per step).
    macro_rules! round {
        ($range:expr, $f:expr, $g:expr) => {
            for i in $range {
                let f: u32 = $f(b, c, d);
                let g: usize = $g(i);
                let f = f.wrapping_add(a).wrapping_add(k(i)).wrapping_add(m[g]);
                a = d;
                d = c;
                c = b;
                b = b.wrapping_add(f.rotate_left(S[i]));
            }
        };
    }
    round!(
        0..16,
        |b: u32, c: u32, d: u32| (b & c) | (!b & d),
        |i: usize| i
    );
    round!(
        16..32,
        |b: u32, c: u32, d: u32| (d & b) | (!d & c),
        |i: usize| (5 * i + 1) % 16
    );
    round!(32..48, |b: u32, c: u32, d: u32| b ^ c ^ d, |i: usize| (3
        * i
        + 5)
        % 16);
    round!(48..64, |b: u32, c: u32, d: u32| c ^ (b | !d), |i: usize| (7
        * i)
        % 16);
    state[0] = state[0].wrapping_add(a);
    state[1] = state[1].wrapping_add(b);
    state[2] = state[2].wrapping_add(c);
    state[3] = state[3].wrapping_add(d);
}

/// The MD5 digest of `data`.
#[expect(
    clippy::little_endian_bytes,
    reason = "MD5 writes its length and state little-endian"
)]
pub fn md5(data: &[u8]) -> [u8; 16] {
    let mut state: [u32; 4] = [0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476];
    let mut chunks = data.chunks_exact(64);
    for c in chunks.by_ref() {
        let mut buf = [0u8; 64];
        buf.copy_from_slice(c);
        block(&mut state, &buf);
    }
    let rest = chunks.remainder();
    let mut tail = [0u8; 128];
    tail[..rest.len()].copy_from_slice(rest);
    tail[rest.len()] = 0x80;
    let tail_len = if rest.len() < 56 { 64 } else { 128 };
    let bits = (data.len() as u64).wrapping_mul(8);
    tail[tail_len - 8..tail_len].copy_from_slice(&bits.to_le_bytes());
    for c in tail[..tail_len].chunks_exact(64) {
        let mut buf = [0u8; 64];
        buf.copy_from_slice(c);
        block(&mut state, &buf);
    }
    let mut out = [0u8; 16];
    for (i, w) in state.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// Keys whose digests [`md5_each`] computes side by side (four 32-bit lanes: one SSE2 register).
const LANES: usize = 4;

/// The longest key MD5 pads into one block (the rest of a block is the padding and the length).
const ONE_BLOCK: usize = 55;

/// [`block`] of `LANES` messages at once, each word of the state one per message: the same
/// steps, written out one by one so that each has its constants and the compiler keeps the
/// lanes in vector registers.
#[allow(
    clippy::needless_range_loop,
    reason = "each lane indexes several arrays at once"
)]
fn block_lanes(state: &mut [[u32; LANES]; 4], m: &[[u32; LANES]; 16]) {
    let [mut a, mut b, mut c, mut d] = *state;
    macro_rules! step {
        ($f:expr, $i:expr, $g:expr) => {{
            let mut next = [0u32; LANES];
            for l in 0..LANES {
                let f: u32 = $f(b[l], c[l], d[l]);
                let f = f
                    .wrapping_add(a[l])
                    .wrapping_add(k($i))
                    .wrapping_add(m[$g][l]);
                next[l] = b[l].wrapping_add(f.rotate_left(S[$i]));
            }
            a = d;
            d = c;
            c = b;
            b = next;
        }};
    }
    macro_rules! round {
        ($f:expr, $g:expr, $($i:expr),*) => {
            $( step!($f, $i, $g($i)); )*
        };
    }
    round!(
        |b: u32, c: u32, d: u32| (b & c) | (!b & d),
        |i: usize| i,
        0,
        1,
        2,
        3,
        4,
        5,
        6,
        7,
        8,
        9,
        10,
        11,
        12,
        13,
        14,
        15
    );
    round!(
        |b: u32, c: u32, d: u32| (d & b) | (!d & c),
        |i: usize| (5 * i + 1) % 16,
        16,
        17,
        18,
        19,
        20,
        21,
        22,
        23,
        24,
        25,
        26,
        27,
        28,
        29,
        30,
        31
    );
    round!(
        |b: u32, c: u32, d: u32| b ^ c ^ d,
        |i: usize| (3 * i + 5) % 16,
        32,
        33,
        34,
        35,
        36,
        37,
        38,
        39,
        40,
        41,
        42,
        43,
        44,
        45,
        46,
        47
    );
    round!(
        |b: u32, c: u32, d: u32| c ^ (b | !d),
        |i: usize| (7 * i) % 16,
        48,
        49,
        50,
        51,
        52,
        53,
        54,
        55,
        56,
        57,
        58,
        59,
        60,
        61,
        62,
        63
    );
    for l in 0..LANES {
        state[0][l] = state[0][l].wrapping_add(a[l]);
        state[1][l] = state[1][l].wrapping_add(b[l]);
        state[2][l] = state[2][l].wrapping_add(c[l]);
        state[3][l] = state[3][l].wrapping_add(d[l]);
    }
}

/// The digests of `LANES` keys of at most [`ONE_BLOCK`] bytes each, computed side by side.
#[expect(
    clippy::little_endian_bytes,
    reason = "MD5 reads its words and writes its length and state little-endian"
)]
fn md5_one_block_lanes(keys: &[&[u8]; LANES]) -> [[u8; 16]; LANES] {
    let mut m = [[0u32; LANES]; 16];
    for (l, key) in keys.iter().enumerate() {
        let mut block = [0u8; 64];
        block[..key.len()].copy_from_slice(key);
        block[key.len()] = 0x80;
        block[56..].copy_from_slice(&(key.len() as u64 * 8).to_le_bytes());
        for (i, w) in block.chunks_exact(4).enumerate() {
            m[i][l] = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        }
    }
    let mut state = [
        [0x67452301; LANES],
        [0xefcdab89; LANES],
        [0x98badcfe; LANES],
        [0x10325476; LANES],
    ];
    block_lanes(&mut state, &m);
    let mut out = [[0u8; 16]; LANES];
    for (l, digest) in out.iter_mut().enumerate() {
        for (i, word) in state.iter().enumerate() {
            digest[i * 4..i * 4 + 4].copy_from_slice(&word[l].to_le_bytes());
        }
    }
    out
}

/// The MD5 digest of each key, in order, appended to `out`: keys of one block, `LANES` at a
/// time, side by side; the others one by one ([`md5`]).
pub fn md5_each<'a>(keys: impl IntoIterator<Item = &'a [u8]>, out: &mut Vec<[u8; 16]>) {
    let mut lanes: [&[u8]; LANES] = [&[]; LANES];
    let mut n = 0;
    for key in keys {
        if key.len() > ONE_BLOCK {
            out.extend(lanes[..n].iter().map(|k| md5(k)));
            n = 0;
            out.push(md5(key));
            continue;
        }
        lanes[n] = key;
        n += 1;
        if n == LANES {
            out.extend_from_slice(&md5_one_block_lanes(&lanes));
            n = 0;
        }
    }
    out.extend(lanes[..n].iter().map(|k| md5(k)));
}

#[cfg(test)]
mod tests {
    use super::{md5, md5_each};

    fn hex(d: [u8; 16]) -> String {
        d.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn rfc1321_test_suite() {
        // The test suite of RFC 1321, appendix A.5.
        assert_eq!(hex(md5(b"")), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(hex(md5(b"abc")), "900150983cd24fb0d6963f7d28e17f72");
        assert_eq!(
            hex(md5(b"abcdefghijklmnopqrstuvwxyz")),
            "c3fcd3d76192e4007dfb496cca67e13b"
        );
        assert_eq!(
            hex(md5(
                b"12345678901234567890123456789012345678901234567890123456789012345678901234567890"
            )),
            "57edf4a22be3c955ac49da2e2107b67a"
        );
    }

    /// Keys of every length around one and two blocks, in runs of every length around the
    /// lanes: each digest is [`md5`]'s, in order.
    #[test]
    fn digests_side_by_side_are_md5s() {
        let mut rng = testkit::XorShift::new(3);
        for run in 0..40usize {
            let keys: Vec<Vec<u8>> = (0..run)
                .map(|_| {
                    let len = (rng.next_u64() % 130) as usize;
                    (0..len).map(|_| rng.next_u64() as u8).collect()
                })
                .collect();
            let mut out = Vec::new();
            md5_each(keys.iter().map(Vec::as_slice), &mut out);
            let one_by_one: Vec<[u8; 16]> = keys.iter().map(|k| md5(k)).collect();
            assert_eq!(out, one_by_one, "a run of {run}");
        }
        let mut out = Vec::new();
        md5_each((0..=64usize).map(|n| &[b'x'; 64][..n]), &mut out);
        let one_by_one: Vec<[u8; 16]> = (0..=64usize).map(|n| md5(&[b'x'; 64][..n])).collect();
        assert_eq!(out, one_by_one, "every length up to a block");
    }
}
