//! CRC-32C (Castagnoli), the checksum of v2 record batches and producer snapshots.
//!
//! One place computes it for every crate, through `crc-fast`, which picks the widest carry-less
//! multiply the CPU has at run time (VPCLMULQDQ/AVX-512, PCLMULQDQ, ARM PMULL) and falls back to
//! tables: it folds several lanes at once where the SSE4.2 `crc32` instruction loop of the
//! `crc32c` crate does one (the figure is in docs/benchmarks.md); the two agree on every input
//! (tests below).

use crc_fast::{CrcAlgorithm, Digest};

/// CRC-32C of `bytes`.
#[inline(always)]
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc_fast::crc32_iscsi(bytes)
}

/// The CRC-32C of `a ++ bytes`, given `crc = crc32c(a)`.
pub fn crc32c_append(crc: u32, bytes: &[u8]) -> u32 {
    // `Digest` holds the register before the final xor-out; CRC-32C's xor-out is all ones.
    let mut digest = Digest::new_with_init_state(CrcAlgorithm::Crc32Iscsi, u64::from(!crc));
    digest.update(bytes);
    // The value is 32 bits wide; the cast only drops the zero upper half.
    digest.finalize() as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn check_value_of_the_crc_catalogue() {
        // reveng's CRC-32/ISCSI check value, and RFC 3720's 32 bytes of zeros.
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(&[0u8; 32]), 0x8a91_36aa);
        assert_eq!(crc32c(&[]), 0);
        assert_eq!(crc32c_append(0, b"123456789"), 0xe306_9283);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]
        #[test]
        fn agrees_with_the_crc32c_crate(
            bytes in proptest::collection::vec(any::<u8>(), 0..9_000),
            cut in any::<proptest::sample::Index>(),
        ) {
            prop_assert_eq!(crc32c(&bytes), crc32c::crc32c(&bytes));
            let at = cut.index(bytes.len() + 1);
            let (a, b) = bytes.split_at(at);
            prop_assert_eq!(crc32c_append(crc32c(a), b), crc32c::crc32c(&bytes));
            prop_assert_eq!(
                crc32c_append(crc32c::crc32c(a), b),
                crc32c::crc32c_append(crc32c::crc32c(a), b)
            );
        }
    }
}
