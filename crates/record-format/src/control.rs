//! Control records (Kafka `ControlRecordType`, `EndTransactionMarker`) and KIP-1279's
//! `MirrorPidResetRecord` (control type 7).
//!
//! ```text
//! control key (4 bytes)        int16 version (0) | int16 type
//! EndTxnMarker value (6 bytes) int16 version (0) | int32 coordinatorEpoch
//! MirrorPidResetRecord value   int16 Version | compact string SourceClusterId | tagged fields
//! ```

use crate::batch::RecordBatch;
use crate::compression::DecodeLimits;
use crate::cursor::{write_unsigned_varint, Cursor};
use crate::error::{FormatError, FormatErrorKind, Result};
use crate::record::Record;
use crate::wire::{
    CONTROL_KEY_SIZE, CONTROL_KEY_VERSION, END_TXN_MARKER_SIZE, END_TXN_MARKER_VERSION,
    MIRROR_PID_RESET_VERSION,
};

/// Control record type (the `type` field of a control record key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControlRecordType {
    /// 0: transaction abort marker.
    Abort,
    /// 1: transaction commit marker.
    Commit,
    /// 2: KRaft leader change.
    LeaderChange,
    /// 3: KRaft snapshot header.
    SnapshotHeader,
    /// 4: KRaft snapshot footer.
    SnapshotFooter,
    /// 5: KRaft version (KIP-853).
    KRaftVersion,
    /// 6: KRaft voters (KIP-853).
    KRaftVoters,
    /// 7: KIP-1279 producer-state barrier.
    MirrorPidReset,
    /// Any other id (kept as stored).
    Unknown(i16),
}

impl ControlRecordType {
    /// The type for a stored id.
    pub fn from_id(id: i16) -> Self {
        match id {
            0 => ControlRecordType::Abort,
            1 => ControlRecordType::Commit,
            2 => ControlRecordType::LeaderChange,
            3 => ControlRecordType::SnapshotHeader,
            4 => ControlRecordType::SnapshotFooter,
            5 => ControlRecordType::KRaftVersion,
            6 => ControlRecordType::KRaftVoters,
            7 => ControlRecordType::MirrorPidReset,
            other => ControlRecordType::Unknown(other),
        }
    }

    /// The id written in the key (`Unknown` keeps its stored id).
    pub fn id(self) -> i16 {
        match self {
            ControlRecordType::Abort => 0,
            ControlRecordType::Commit => 1,
            ControlRecordType::LeaderChange => 2,
            ControlRecordType::SnapshotHeader => 3,
            ControlRecordType::SnapshotFooter => 4,
            ControlRecordType::KRaftVersion => 5,
            ControlRecordType::KRaftVoters => 6,
            ControlRecordType::MirrorPidReset => 7,
            ControlRecordType::Unknown(id) => id,
        }
    }

    /// Kafka's enum name (`ABORT`, …, `MIRROR_PID_RESET`, `UNKNOWN`).
    pub fn name(self) -> &'static str {
        match self {
            ControlRecordType::Abort => "ABORT",
            ControlRecordType::Commit => "COMMIT",
            ControlRecordType::LeaderChange => "LEADER_CHANGE",
            ControlRecordType::SnapshotHeader => "SNAPSHOT_HEADER",
            ControlRecordType::SnapshotFooter => "SNAPSHOT_FOOTER",
            ControlRecordType::KRaftVersion => "KRAFT_VERSION",
            ControlRecordType::KRaftVoters => "KRAFT_VOTERS",
            ControlRecordType::MirrorPidReset => "MIRROR_PID_RESET",
            ControlRecordType::Unknown(_) => "UNKNOWN",
        }
    }

    /// ABORT or COMMIT.
    pub fn is_end_txn(self) -> bool {
        matches!(self, ControlRecordType::Abort | ControlRecordType::Commit)
    }
}

/// A control record key: `int16 version`, `int16 type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ControlRecordKey {
    /// Key version (0 when written).
    pub version: i16,
    /// Record type.
    pub record_type: ControlRecordType,
}

impl ControlRecordKey {
    /// A version-0 key of `record_type`.
    pub fn new(record_type: ControlRecordType) -> Self {
        ControlRecordKey {
            version: CONTROL_KEY_VERSION,
            record_type,
        }
    }

    /// Kafka's `ControlRecordType.parseTypeId`: fewer than 4 bytes or a negative version is
    /// `BadControlKey` at `position` (the key's position); a version > 0 is read as v0 (bytes
    /// after the first 4 are ignored). Returns `(version, type)`.
    pub fn parse(key: &[u8], position: u64) -> Result<(i16, ControlRecordType)> {
        if key.len() < CONTROL_KEY_SIZE {
            return Err(FormatError::new(FormatErrorKind::BadControlKey, position));
        }
        let mut c = Cursor::new(key, position);
        let version = c.i16()?;
        if version < 0 {
            return Err(FormatError::new(FormatErrorKind::BadControlKey, position));
        }
        let id = c.i16()?;
        Ok((version, ControlRecordType::from_id(id)))
    }

    /// The 4 key bytes.
    pub fn to_bytes(&self) -> [u8; CONTROL_KEY_SIZE] {
        let v = self.version.to_be_bytes();
        let t = self.record_type.id().to_be_bytes();
        [v[0], v[1], t[0], t[1]]
    }
}

fn bad_value(control_type: i16, reason: &'static str, position: u64) -> FormatError {
    FormatError::new(
        FormatErrorKind::BadControlValue {
            control_type,
            reason,
        },
        position,
    )
}

/// The value of an ABORT/COMMIT control record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EndTransactionMarker {
    /// Value version (0 when written).
    pub version: i16,
    /// Epoch of the transaction coordinator that wrote the marker.
    pub coordinator_epoch: i32,
}

impl EndTransactionMarker {
    /// A version-0 marker.
    pub fn new(coordinator_epoch: i32) -> Self {
        EndTransactionMarker {
            version: END_TXN_MARKER_VERSION,
            coordinator_epoch,
        }
    }

    /// Kafka's `EndTransactionMarker.deserializeValue`: `record_type` must be ABORT or COMMIT;
    /// fewer than 6 bytes or a negative version is `BadControlValue` at `position` (the value's
    /// position); a version > 0 is read as v0 and extra bytes are ignored.
    pub fn parse(record_type: ControlRecordType, value: &[u8], position: u64) -> Result<Self> {
        let t = record_type.id();
        if !record_type.is_end_txn() {
            return Err(bad_value(t, "not an ABORT or COMMIT record", position));
        }
        if value.len() < END_TXN_MARKER_SIZE {
            return Err(bad_value(
                t,
                "end transaction marker shorter than 6 bytes",
                position,
            ));
        }
        let mut c = Cursor::new(value, position);
        let version = c.i16()?;
        if version < 0 {
            return Err(bad_value(
                t,
                "negative end transaction marker version",
                position,
            ));
        }
        let coordinator_epoch = c.i32()?;
        Ok(EndTransactionMarker {
            version,
            coordinator_epoch,
        })
    }

    /// The 6 value bytes.
    pub fn to_bytes(&self) -> [u8; END_TXN_MARKER_SIZE] {
        let v = self.version.to_be_bytes();
        let e = self.coordinator_epoch.to_be_bytes();
        [v[0], v[1], e[0], e[1], e[2], e[3]]
    }
}

/// Longest string a flexible-version Kafka message accepts (`0x7fff` bytes).
pub const MAX_COMPACT_STRING_LENGTH: usize = 0x7fff;

/// KIP-1279 `MirrorPidResetRecord` (flexible version 0): the value of a control record of type 7.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MirrorPidResetRecord {
    /// The explicit `Version` field (0).
    pub version: i16,
    /// The source cluster id.
    pub source_cluster_id: String,
    /// Tagged fields this version does not know, as `(tag, bytes)` in stored order.
    pub unknown_tagged_fields: Vec<(u32, Vec<u8>)>,
}

const MPR: i16 = 7;

impl MirrorPidResetRecord {
    /// A version-0 record without tagged fields.
    pub fn new(source_cluster_id: impl Into<String>) -> Self {
        MirrorPidResetRecord {
            version: MIRROR_PID_RESET_VERSION,
            source_cluster_id: source_cluster_id.into(),
            unknown_tagged_fields: Vec::new(),
        }
    }

    /// Parses the value as Kafka's generated reader does at version 0 (whatever the `Version`
    /// field says): int16 Version, compact string SourceClusterId (null, length > 0x7fff or
    /// invalid UTF-8 rejected — Kafka would replace invalid UTF-8, we refuse it), then the tagged
    /// field section, whose fields are kept in `unknown_tagged_fields`. As in Kafka, bytes after
    /// the tagged fields are ignored. Errors are `BadControlValue { control_type: 7, .. }` at the
    /// absolute position of the offending field (`position` = the value's first byte).
    pub fn parse(value: &[u8], position: u64) -> Result<Self> {
        let mut c = Cursor::new(value, position);
        let at = c.position();
        let version = c
            .i16()
            .map_err(|_| bad_value(MPR, "truncated Version", at))?;
        let at = c.position();
        let n = c
            .unsigned_varint()
            .map_err(|_| bad_value(MPR, "bad SourceClusterId length", at))?;
        if n == 0 {
            return Err(bad_value(
                MPR,
                "non-nullable SourceClusterId was serialized as null",
                at,
            ));
        }
        let len = (n - 1) as usize;
        if len > MAX_COMPACT_STRING_LENGTH {
            return Err(bad_value(MPR, "SourceClusterId longer than 0x7fff", at));
        }
        let bytes = c
            .bytes(len)
            .map_err(|_| bad_value(MPR, "truncated SourceClusterId", at))?;
        let source_cluster_id = std::str::from_utf8(bytes)
            .map_err(|_| bad_value(MPR, "SourceClusterId is not UTF-8", at))?
            .to_owned();
        let at = c.position();
        let count = c
            .unsigned_varint()
            .map_err(|_| bad_value(MPR, "bad tagged field count", at))?;
        let mut unknown_tagged_fields = Vec::new();
        for _ in 0..count {
            let at = c.position();
            let tag = c
                .unsigned_varint()
                .map_err(|_| bad_value(MPR, "bad tagged field tag", at))?;
            let size = c
                .unsigned_varint()
                .map_err(|_| bad_value(MPR, "bad tagged field size", at))?;
            if size > i32::MAX as u32 {
                return Err(bad_value(MPR, "negative tagged field size", at));
            }
            let data = c
                .bytes(size as usize)
                .map_err(|_| bad_value(MPR, "truncated tagged field", at))?;
            unknown_tagged_fields.push((tag, data.to_vec()));
        }
        Ok(MirrorPidResetRecord {
            version,
            source_cluster_id,
            unknown_tagged_fields,
        })
    }

    /// The value bytes, as Kafka's generated writer produces them (tagged fields written in the
    /// stored order, which should be ascending by tag). A SourceClusterId longer than 0x7fff bytes
    /// would be written but Kafka (and [`parse`](Self::parse)) reject it.
    pub fn to_bytes(&self) -> Vec<u8> {
        let id = self.source_cluster_id.as_bytes();
        let mut out = Vec::with_capacity(4 + id.len());
        out.extend_from_slice(&self.version.to_be_bytes());
        write_unsigned_varint(&mut out, (id.len() as u32).wrapping_add(1));
        out.extend_from_slice(id);
        write_unsigned_varint(&mut out, self.unknown_tagged_fields.len() as u32);
        for (tag, data) in &self.unknown_tagged_fields {
            write_unsigned_varint(&mut out, *tag);
            write_unsigned_varint(&mut out, data.len() as u32);
            out.extend_from_slice(data);
        }
        out
    }
}

/// A decoded control record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlRecord<'a> {
    /// ABORT or COMMIT with its marker.
    EndTxn(ControlRecordType, EndTransactionMarker),
    /// The KIP-1279 barrier.
    MirrorPidReset(MirrorPidResetRecord),
    /// Any other type, with its raw value.
    Other(ControlRecordType, Option<&'a [u8]>),
}

impl<'a> ControlRecord<'a> {
    /// Decodes a record of a control batch: its key (null key ⇒ `BadControlKey`) and, for
    /// ABORT/COMMIT/MIRROR_PID_RESET, its value (null ⇒ `BadControlValue`).
    pub fn parse(record: &Record<'a>) -> Result<Self> {
        let key = record.key().ok_or_else(|| {
            FormatError::new(FormatErrorKind::BadControlKey, record.key_position())
        })?;
        let (_, t) = ControlRecordKey::parse(key, record.key_position())?;
        let vpos = record.value_position();
        match t {
            ControlRecordType::Abort | ControlRecordType::Commit => {
                let v = record
                    .value()
                    .ok_or_else(|| bad_value(t.id(), "null value", record.value_position()))?;
                Ok(ControlRecord::EndTxn(
                    t,
                    EndTransactionMarker::parse(t, v, vpos)?,
                ))
            }
            ControlRecordType::MirrorPidReset => {
                let v = record
                    .value()
                    .ok_or_else(|| bad_value(t.id(), "null value", record.value_position()))?;
                Ok(ControlRecord::MirrorPidReset(MirrorPidResetRecord::parse(
                    v, vpos,
                )?))
            }
            other => Ok(ControlRecord::Other(other, record.value())),
        }
    }

    /// The record's control type.
    pub fn record_type(&self) -> ControlRecordType {
        match self {
            ControlRecord::EndTxn(t, _) | ControlRecord::Other(t, _) => *t,
            ControlRecord::MirrorPidReset(_) => ControlRecordType::MirrorPidReset,
        }
    }
}

/// The fork's `ControlRecordType.isMirrorPidResetBatch`: a control batch whose first record's key
/// type is 7. Non-control or empty batches are `false`; a malformed first record or key is an
/// error.
pub fn is_mirror_pid_reset_batch(batch: &RecordBatch<'_>) -> Result<bool> {
    if !batch.is_control() || batch.records_count() == 0 {
        return Ok(false);
    }
    let records = batch.records(&DecodeLimits::default())?;
    let mut iter = records.iter();
    match iter.next() {
        None => Ok(false),
        Some(r) => {
            let r = r?;
            let key = r.key().ok_or_else(|| {
                FormatError::new(FormatErrorKind::BadControlKey, r.key_position())
            })?;
            let (_, t) = ControlRecordKey::parse(key, r.key_position())?;
            Ok(t == ControlRecordType::MirrorPidReset)
        }
    }
}

/// The first record of `batch` when it is an ABORT or COMMIT marker whose key and value decode,
/// in an uncompressed control batch; `None` otherwise (a data batch, an empty or compressed
/// control batch, another control type, or a record that does not decode: [`RecordBatch::records`]
/// then gives the record, or the error and its position).
pub fn end_txn_marker(
    batch: &RecordBatch<'_>,
) -> Option<(ControlRecordType, EndTransactionMarker)> {
    if !batch.is_control() || batch.records_count() <= 0 {
        return None;
    }
    if batch.compression().ok()? != crate::compression::CompressionType::None {
        return None;
    }
    let records = batch.records(&DecodeLimits::default()).ok()?;
    let record = records.iter().next()?.ok()?;
    let key = record.key().unwrap_or(&[]);
    let (_, record_type) = ControlRecordKey::parse(key, record.key_position()).ok()?;
    if !record_type.is_end_txn() {
        return None;
    }
    let value = record.value().unwrap_or(&[]);
    let marker = EndTransactionMarker::parse(record_type, value, record.value_position()).ok()?;
    Some((record_type, marker))
}
