//! The fuzz harnesses' reader of their input, shared by the harness files (`#[path]`-included by
//! each).

/// A panic-free reader over the fuzz input, front to back: exhausted input reads as zeros.
#[derive(Debug)]
pub struct Input<'a>(pub &'a [u8]);

impl<'a> Input<'a> {
    pub fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The next `n` bytes (fewer at the end of the input).
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let (a, b) = self.0.split_at(n.min(self.0.len()));
        self.0 = b;
        a
    }
}
