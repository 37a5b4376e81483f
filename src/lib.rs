//! seglog: Kafka's on-disk log format as an embeddable storage engine.

pub mod cli;
