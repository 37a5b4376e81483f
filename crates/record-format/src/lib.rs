//! Kafka's v2 record batch format, byte for byte: batches, records, the four codecs, control
//! records (including KIP-1279's `MIRROR_PID_RESET`) and the write path. No I/O, no `unsafe`, and
//! no panic on any input: every parser returns a [`FormatError`] naming what was wrong and where.
#![forbid(unsafe_code)]
#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::panic)]
#![cfg_attr(
    test,
    allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)
)]
#![warn(missing_docs)]

pub mod batch;
pub mod batches;
pub mod builder;
pub mod compression;
pub mod control;
pub mod cursor;
pub mod error;
pub mod record;
pub mod wire;

pub use compression::{CompressionType, DecodeLimits};
pub use error::{FormatError, FormatErrorKind};
