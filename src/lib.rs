//! seglog: Kafka's on-disk log format as a storage engine you can embed. A partition written by
//! seglog is a partition Kafka can read (segments, indexes, producer snapshots, checkpoints,
//! byte for byte), and the other way round; recovery after a crash quarantines what it cuts
//! instead of deleting it; and KIP-1279's `MIRROR_PID_RESET` barrier is implemented.
//!
//! The two types to start from:
//!
//! * [`Log`]: one partition (Kafka's `UnifiedLog`), in a directory of its own or handed out by
//!   a [`LogDir`]. Open or create it with a [`Config`], append as a leader (client or
//!   coordinator), a follower or a mirror, read by offset and isolation level, flush, roll,
//!   apply retention, truncate, snapshot producer state, close. The readable range is explicit
//!   ([`Log::readable_range`]); who moves the high watermark is a [`Config`] choice
//!   ([`HighWatermark`]). A `Log` is a cheap handle, `Clone + Send + Sync`: one thread writes
//!   while any number read, and reads never wait for the writer (`docs/design.md`,
//!   "Concurrency").
//! * [`LogDir`]: a Kafka log directory of many partitions (the part of Kafka's `LogManager`
//!   that owns one): partitions created and deleted at run time, each a [`Log`]
//!   ([`LogDir::partition`]), the recovery-point, log-start-offset and high-watermark
//!   checkpoints, recovery of many partitions in parallel.
//!
//! Both recover only after an unclean shutdown, through one engine that first plans what
//! recovery would do (read only: [`recovery::LogLoader::plan`], what `seglog verify` prints)
//! and then applies the plan; a [`RecoveryReport`] says what was kept, cut and quarantined and
//! which producers expired at load.
//!
//! ```
//! use seglog::record_format::RecordBatchBuilder;
//! use seglog::{Config, IsolationLevel, Log};
//!
//! let tmp = tempfile::tempdir()?;
//! let config = Config::default();
//! let log = Log::open(tmp.path().join("events-0"), config.clone())?;
//! // Timestamps from the clock the log runs on (producer expiry, retention and rolls use it):
//! // a batch stamped in the past would make its producer expire at the next open.
//! let now = config.env.clock.now_ms();
//! let mut batch = RecordBatchBuilder::new(0).producer(1, 0, 0); // idempotent producer 1
//! batch.append(now, Some(b"key"), Some(b"value"), &[])?;
//! log.append(&batch.build())?;
//! log.flush()?; // durable, and (by default) visible to readers
//! let records = log.consume(0, 1 << 20, IsolationLevel::ReadCommitted)?;
//! assert_eq!(records[0].value.as_deref(), Some(&b"value"[..]));
//! log.close()?; // clean shutdown: the next open recovers nothing
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Underneath, three crates, re-exported here:
//!
//! * [`record_format`]: the record batch format (Kafka `o.a.k.common.record`): parse, validate
//!   and build batches, control records, the four codecs. No I/O.
//! * [`segment_store`]: segment files and indexes (Kafka `o.a.k.storage.internals.log`:
//!   `LogSegment`, `LocalLog`, the indexes, checkpoint files) and the `Storage` seam.
//! * [`recovery`]: producer state, snapshots, the leader-epoch cache, the loader's plan/apply
//!   recovery engine, the KIP-1279 barrier and mirror states, and the partition log
//!   ([`PartitionLog`], Kafka `UnifiedLog`'s producer side).
//!
//! With the default feature `cli`, [`cli`](mod@cli) holds the `seglog` command line tool
//! (`dump`, `verify`, `recover`, `producers`, `demo`, `crash-test`), a client of these crates
//! like any other; `default-features = false` leaves it out. The crash-test machinery is the
//! separate `testkit` crate.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "cli")]
pub mod cli;
mod error;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod log;
mod log_dir;
mod scheduler;

pub use error::{Error, Result};
pub use log::Log;
pub use log_dir::LogDir;
pub use recovery::{
    default_recovery_threads, AppendOrigin, CleanReport, CleanerConfig, CloseSync, Config,
    ConsumedRecord, ExpiredProducer, FetchIsolation, FetchResult, FetchSlices, HighWatermark,
    IsolationLevel, LogAppendInfo, LogReader, PartitionLog, ReadState, RecordIter, RecoveryReport,
    StopPolicy, DEFAULT_PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS,
};
pub use segment_store::{
    Clock, FileSlice, LogConfig, SystemClock, TimestampAndOffset, TopicPartition,
};
/// The crates under the facade, for what it does not wrap (building batches with
/// [`record_format::RecordBatchBuilder`], a read-only [`recovery::RecoveryPlan`], a standalone
/// [`segment_store::LocalLog`]), at the versions the facade was built with.
pub use {record_format, recovery, segment_store};
