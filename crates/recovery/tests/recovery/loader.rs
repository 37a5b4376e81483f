//! Loading partitions and log directories (filled in below).
