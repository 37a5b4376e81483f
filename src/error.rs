//! [`Error`], the one error type of the facade.

use std::fmt;
use std::path::PathBuf;

use recovery::{MirrorError, PartitionLogError};
use segment_store::{InvalidTopicPartition, SegmentError, TopicPartition};

/// Why a [`Log`](crate::Log) or [`LogDir`](crate::LogDir) operation failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The partition log refused the operation or its storage failed (an invalid batch, an
    /// out-of-order sequence, an offset out of range, an I/O error, ...).
    Log(PartitionLogError),
    /// The log cleaner could not compact the partition (a file it could not read or write, a
    /// batch it does not clean).
    Cleaner(recovery::CleanerError),
    /// A KIP-1279 mirror transition was refused (wrong state, invalid source cluster id) or
    /// its log operation failed.
    Mirror(MirrorError<PartitionLogError>),
    /// A directory given to [`Log::open`](crate::Log::open) is not named like a Kafka partition
    /// directory, `<topic>-<partition>`.
    NotAPartitionDir {
        /// The directory.
        dir: PathBuf,
    },
    /// [`Log::open`](crate::Log::open) found other partitions in the log directory around the
    /// partition: a `Log` owns its log directory (checkpoints and clean-shutdown marker), so
    /// a directory with several partitions is opened with [`LogDir`](crate::LogDir).
    SharedLogDir {
        /// The log directory.
        dir: PathBuf,
        /// The other partitions found in it.
        others: Vec<TopicPartition>,
    },
    /// [`LogDir::create_partition`](crate::LogDir::create_partition) of a partition that exists.
    PartitionExists(TopicPartition),
    /// The log directory has no such partition.
    UnknownPartition(TopicPartition),
    /// The partition was refused when the log directory was opened and is offline (see
    /// [`LogDir::offline_partitions`](crate::LogDir::offline_partitions)): it is neither read
    /// nor written, nor created again.
    PartitionOffline {
        /// The partition.
        partition: TopicPartition,
        /// Why it was refused.
        reason: String,
    },
    /// A topic-partition Kafka could not have created (see
    /// [`TopicPartition::try_new`](segment_store::TopicPartition::try_new)): an empty, `.`,
    /// `..`, over-long topic or one with a character other than `[a-zA-Z0-9._-]`, or a negative
    /// partition. Refused before any folder is created.
    InvalidPartition {
        /// The topic-partition as given.
        partition: TopicPartition,
        /// What is wrong with it.
        reason: InvalidTopicPartition,
    },
    /// The partition's log was closed (by [`Log::close`](crate::Log::close) of another clone,
    /// [`LogDir::close`](crate::LogDir::close) or a deletion): this handle can no longer write.
    /// Open the log again.
    Closed(TopicPartition),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Log(e) => e.fmt(f),
            Error::Cleaner(e) => e.fmt(f),
            Error::Mirror(e) => e.fmt(f),
            Error::NotAPartitionDir { dir } => write!(
                f,
                "{}: not a partition directory (the name must be <topic>-<partition>)",
                dir.display()
            ),
            Error::SharedLogDir { dir, others } => {
                write!(
                    f,
                    "{}: the log directory holds other partitions (",
                    dir.display()
                )?;
                for (i, tp) in others.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{tp}")?;
                }
                f.write_str("); open it as a LogDir")
            }
            Error::PartitionExists(tp) => write!(f, "partition {tp} exists"),
            Error::UnknownPartition(tp) => write!(f, "no partition {tp}"),
            Error::PartitionOffline { partition, reason } => {
                write!(f, "partition {partition} is offline: {reason}")
            }
            Error::Closed(tp) => write!(f, "the log of partition {tp} is closed"),
            Error::InvalidPartition { partition, reason } => write!(
                f,
                "topic {:?} partition {} is not a valid Kafka topic-partition: {reason}",
                partition.topic, partition.partition
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Log(e) => Some(e),
            Error::Cleaner(e) => Some(e),
            Error::Mirror(e) => Some(e),
            _ => None,
        }
    }
}

impl From<PartitionLogError> for Error {
    fn from(e: PartitionLogError) -> Self {
        Error::Log(e)
    }
}

impl From<MirrorError<PartitionLogError>> for Error {
    fn from(e: MirrorError<PartitionLogError>) -> Self {
        Error::Mirror(e)
    }
}

impl From<recovery::CleanerError> for Error {
    fn from(e: recovery::CleanerError) -> Self {
        Error::Cleaner(e)
    }
}

impl From<SegmentError> for Error {
    fn from(e: SegmentError) -> Self {
        Error::Log(e.into())
    }
}

/// The facade's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
