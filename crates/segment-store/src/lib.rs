//! Kafka's segment files: the `.log`, memory-mapped offset and time indexes, the transaction
//! index, the multi-segment log and the text checkpoint files. Knows files and offsets, nothing
//! of producers.
