//! The cleaner's errors.

use std::fmt;
use std::path::PathBuf;

use record_format::FormatError;
use segment_store::SegmentError;

/// Errors of a cleaning pass.
#[derive(Debug)]
pub enum CleanerError {
    /// A file could not be read or written.
    Segment(SegmentError),
    /// A batch could not be read.
    Format {
        /// The segment.
        path: PathBuf,
        /// The problem, with its position.
        source: FormatError,
    },
    /// The log holds what the cleaner does not clean (a legacy batch, a batch larger than
    /// `max.message.bytes`, a broken frame).
    Unsupported {
        /// The segment.
        path: PathBuf,
        /// Position in it.
        position: u64,
        /// What was found.
        reason: String,
    },
}

impl fmt::Display for CleanerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CleanerError::Segment(e) => write!(f, "{e}"),
            CleanerError::Format { path, source } => write!(f, "{}: {source}", path.display()),
            CleanerError::Unsupported {
                path,
                position,
                reason,
            } => write!(
                f,
                "{} at position {position}: cannot clean: {reason}",
                path.display()
            ),
        }
    }
}

impl std::error::Error for CleanerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CleanerError::Segment(e) => Some(e),
            CleanerError::Format { source, .. } => Some(source),
            CleanerError::Unsupported { .. } => None,
        }
    }
}

impl From<SegmentError> for CleanerError {
    fn from(e: SegmentError) -> Self {
        CleanerError::Segment(e)
    }
}

pub(super) type Result<T> = std::result::Result<T, CleanerError>;
