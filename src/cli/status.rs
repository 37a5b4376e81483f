//! The exit status every subcommand returns.

use std::process::ExitCode;

/// Outcome of a subcommand, ordered by severity (`max` combines outcomes of several files).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Status {
    /// Everything was read and is consistent (exit 0).
    Success,
    /// Something was damaged or inconsistent; everything valid was still printed (exit 1).
    Damaged,
    /// The user asked for something impossible: bad flags, a missing, unreadable or unsuitable
    /// file (exit 2). One line on stderr says what.
    Usage,
}

impl Status {
    /// The process exit code: 0, 1 or 2.
    pub fn code(self) -> u8 {
        match self {
            Status::Success => 0,
            Status::Damaged => 1,
            Status::Usage => 2,
        }
    }
}

impl From<Status> for ExitCode {
    fn from(s: Status) -> ExitCode {
        ExitCode::from(s.code())
    }
}
