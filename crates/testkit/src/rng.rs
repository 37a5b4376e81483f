//! [`XorShift`]: the one deterministic generator of the testkit (workloads, the weak crash
//! model's samples, benchmark data).

/// A xorshift64 generator: what it drives is a pure function of the seed.
#[derive(Debug, Clone)]
pub struct XorShift(u64);

impl XorShift {
    /// A generator; seed 0 is replaced by a fixed non-zero value.
    pub fn new(seed: u64) -> Self {
        Self(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        })
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    /// Uniform in `0..n` (`0` if `n == 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
}
