//! seglog: Kafka's on-disk log format as an embeddable storage engine.

pub mod cli;
mod config;
mod error;
mod log;
mod log_dir;

pub use config::{Config, HighWatermark};
pub use error::{Error, Result};
pub use log::Log;
pub use log_dir::LogDir;

pub use record_format;
pub use recovery;
pub use segment_store;

pub use recovery::{
    AppendOrigin, ConsumedRecord, ExpiredProducer, FetchResult, IsolationLevel, LogAppendInfo,
    PartitionLog, RecoveryReport,
};
pub use segment_store::{Clock, SystemClock, TopicPartition};
