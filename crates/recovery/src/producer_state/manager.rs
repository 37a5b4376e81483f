//! The producer state manager (Kafka `ProducerStateManager`): its settings, the entries, and
//! appends applied as checked updates.

use std::collections::BTreeMap;

use super::append_info::{ProducerAppendInfo, ProducerStateWarning};
use super::entry::{
    is_producer_expired, AbortedTxnRecord, BatchMetadata, CompletedTxn, ExpiredProducer,
    ProducerStateEntry, TxnMetadata,
};
use super::table::ProducerTable;
use super::BarrierOutcome;
use super::{AppendOrigin, DEFAULT_PRODUCER_ID_EXPIRATION_MS};
use crate::error::ProducerStateError;
use crate::summary::{BatchSummary, NO_PRODUCER_ID};

/// Settings of the manager (Kafka `ProducerStateManagerConfig`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerStateManagerConfig {
    /// `producer.id.expiration.ms`.
    pub producer_id_expiration_ms: i64,
}

impl Default for ProducerStateManagerConfig {
    fn default() -> Self {
        Self {
            producer_id_expiration_ms: DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        }
    }
}

/// A batch that [`ProducerStateManager::apply_batches`] found to be a duplicate (client origin):
/// nothing was applied for it; the log returns `original`'s offsets and writes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DuplicateBatch {
    /// Index of the batch in the input.
    pub index: usize,
    /// Producer id.
    pub producer_id: i64,
    /// The cached batch it duplicates.
    pub original: BatchMetadata,
}

/// What [`ProducerStateManager::apply_batches`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppliedBatches {
    /// Every completed transaction (markers and barrier aborts), in log order.
    pub completed_txns: Vec<CompletedTxn>,
    /// The aborted ones, with the LSO to write into the transaction index, in log order. Barrier
    /// aborts share the barrier's offset as `last_offset`.
    pub aborted_txns: Vec<AbortedTxnRecord>,
    /// Batches recognised as duplicates (client origin only) and skipped.
    pub duplicates: Vec<DuplicateBatch>,
    /// Warnings (replication origin only).
    pub warnings: Vec<ProducerStateWarning>,
    /// The barriers met, in log order.
    pub barriers: Vec<BarrierOutcome>,
}

impl AppliedBatches {
    /// Records an applied barrier: its aborts as completed and aborted transactions, then the
    /// barrier itself.
    pub(super) fn push_barrier(&mut self, outcome: BarrierOutcome) {
        self.completed_txns
            .extend(outcome.aborted_txns.iter().map(|a| CompletedTxn {
                producer_id: a.producer_id,
                first_offset: a.first_offset,
                last_offset: a.last_offset,
                is_aborted: true,
            }));
        self.aborted_txns.extend_from_slice(&outcome.aborted_txns);
        self.barriers.push(outcome);
    }

    /// Empties every list, keeping their allocations (for a caller that reuses one value).
    pub fn clear(&mut self) {
        self.completed_txns.clear();
        self.aborted_txns.clear();
        self.duplicates.clear();
        self.warnings.clear();
        self.barriers.clear();
    }
}

/// Kafka's per-partition producer state: producers, open and unreplicated transactions, and the
/// offsets of the map end and of the last snapshot.
#[derive(Debug, Clone)]
pub struct ProducerStateManager {
    pub(crate) config: ProducerStateManagerConfig,
    /// By producer id, hashed: each batch looks its producer up, and a search of ordered keys
    /// mispredicts its way to an id that interleaved producers make random. Everything that
    /// shows the producers orders them by id ([`Self::active_producers`]).
    pub(crate) producers: ProducerTable,
    pub(crate) ongoing_txns: BTreeMap<i64, TxnMetadata>,
    pub(crate) unreplicated_txns: BTreeMap<i64, TxnMetadata>,
    pub(crate) last_map_offset: i64,
    pub(crate) last_snap_offset: i64,
}

impl Default for ProducerStateManager {
    fn default() -> Self {
        Self::new(ProducerStateManagerConfig::default())
    }
}

/// The producer-state half of an append, checked but not applied: what
/// [`ProducerStateManager::analyze_and_validate`] returns and
/// [`ProducerStateManager::apply_update`] commits. Holds one [`ProducerAppendInfo`] (a copy of
/// one entry) per producer of the batches, never a copy of the manager.
#[derive(Debug)]
pub struct ProducerStateUpdate<'a> {
    groups: Vec<(Group, Option<&'a BatchSummary>)>,
    out: AppliedBatches,
}

impl ProducerStateUpdate<'_> {
    /// Batches found to be duplicates of a cached batch of their producer (client origin):
    /// nothing is applied for them.
    pub fn duplicates(&self) -> &[DuplicateBatch] {
        &self.out.duplicates
    }

    /// How many producers the update touches (one [`ProducerAppendInfo`] each, per run between
    /// barriers).
    pub fn producer_count(&self) -> usize {
        self.groups.iter().map(|(g, _)| g.infos.len()).sum()
    }
}

/// The updates of one run of batches between barriers, analysed but not applied.
#[derive(Debug, Default)]
pub(super) struct Group {
    infos: Vec<ProducerAppendInfo>,
    /// Where each producer's info is in `infos`, once there are more than
    /// [`Group::SCAN_LIMIT`] of them (empty until then: no allocation for the usual append of
    /// one producer's batches).
    by_pid: BTreeMap<i64, usize>,
    completed: Vec<CompletedTxn>,
    last_offset: Option<i64>,
}

impl Group {
    /// Up to this many producers in a run, a producer's info is found by a scan of `infos`;
    /// past it, through `by_pid` (O(log n) per batch however many producers an append holds).
    const SCAN_LIMIT: usize = 8;

    /// The index in `infos` of `producer_id`'s info, if the run has one.
    fn slot(&self, producer_id: i64) -> Option<usize> {
        if self.infos.len() <= Self::SCAN_LIMIT {
            self.infos.iter().position(|i| i.producer_id == producer_id)
        } else {
            self.by_pid.get(&producer_id).copied()
        }
    }

    /// Adds the info of a producer the run has none of yet; returns its index.
    fn push(&mut self, info: ProducerAppendInfo) -> usize {
        let producer_id = info.producer_id;
        self.infos.push(info);
        let i = self.infos.len() - 1;
        if self.infos.len() == Self::SCAN_LIMIT + 1 {
            self.by_pid = self
                .infos
                .iter()
                .enumerate()
                .map(|(i, info)| (info.producer_id, i))
                .collect();
        } else if self.infos.len() > Self::SCAN_LIMIT {
            self.by_pid.insert(producer_id, i);
        }
        i
    }
}

impl ProducerStateManager {
    /// An empty manager with map end offset 0.
    pub fn new(config: ProducerStateManagerConfig) -> Self {
        Self {
            config,
            producers: ProducerTable::default(),
            ongoing_txns: BTreeMap::new(),
            unreplicated_txns: BTreeMap::new(),
            last_map_offset: 0,
            last_snap_offset: 0,
        }
    }

    /// Settings.
    pub fn config(&self) -> &ProducerStateManagerConfig {
        &self.config
    }
    /// The entry of `producer_id`.
    pub fn last_entry(&self, producer_id: i64) -> Option<&ProducerStateEntry> {
        self.producers.get(producer_id)
    }
    /// All producers, by id (an ordered view made for the call: [`Self::producer_count`] and
    /// [`Self::last_entry`] do not need one).
    pub fn active_producers(&self) -> BTreeMap<i64, &ProducerStateEntry> {
        self.producers.iter().map(|e| (e.producer_id, e)).collect()
    }
    /// How many producers there are.
    pub fn producer_count(&self) -> usize {
        self.producers.len()
    }
    /// Open transactions by first offset.
    pub fn ongoing_txns(&self) -> &BTreeMap<i64, TxnMetadata> {
        &self.ongoing_txns
    }
    /// Completed transactions whose marker is not yet below the high watermark.
    pub fn unreplicated_txns(&self) -> &BTreeMap<i64, TxnMetadata> {
        &self.unreplicated_txns
    }
    /// No producers and no open transactions.
    pub fn is_empty(&self) -> bool {
        self.producers.is_empty() && self.ongoing_txns.is_empty()
    }
    /// Exclusive end offset of what the state covers (Kafka `mapEndOffset`).
    pub fn map_end_offset(&self) -> i64 {
        self.last_map_offset
    }
    /// Offset of the last snapshot taken or loaded.
    pub fn last_snapshot_offset(&self) -> i64 {
        self.last_snap_offset
    }
    /// Kafka `updateMapEndOffset`.
    pub fn update_map_end_offset(&mut self, offset: i64) {
        self.last_map_offset = offset;
    }

    /// Starts loading the entry of `producer_id` into the CPU's cache without waiting for it
    /// (a hint, see `ProducerTable::prefetch`): the append calls it as it starts, so that the
    /// producer check that follows the batch's validation finds the entry cached.
    pub(crate) fn prefetch(&self, producer_id: i64) {
        self.producers.prefetch(producer_id);
    }

    /// Kafka `prepareUpdate`: an append info starting from the current entry (or an empty one).
    pub fn prepare_update(&self, producer_id: i64, origin: AppendOrigin) -> ProducerAppendInfo {
        let current = self
            .producers
            .get(producer_id)
            .cloned()
            .unwrap_or_else(|| ProducerStateEntry::empty(producer_id));
        ProducerAppendInfo::new(producer_id, current, origin)
    }

    /// Kafka `update(appendInfo)`: merge the entry and record the transactions it started.
    pub fn update(&mut self, info: ProducerAppendInfo) -> Result<(), ProducerStateError> {
        if info.producer_id == NO_PRODUCER_ID {
            return Err(ProducerStateError::NoProducerId);
        }
        self.commit_append_info(info);
        Ok(())
    }

    /// The commit of [`Self::update`] once the producer id is known to be one: the one entry
    /// merged (or inserted), the transactions it started recorded. O(1) in the number of
    /// producers.
    fn commit_append_info(&mut self, info: ProducerAppendInfo) {
        match self.producers.get_mut(info.producer_id) {
            Some(current) => info.merge_into(current),
            None => self.producers.insert(info.updated_entry),
        }
        for txn in info.started_transactions {
            self.ongoing_txns.insert(txn.first_offset, txn);
        }
    }

    /// Kafka `lastStableOffset(completedTxn)`: first offset of the earliest open transaction of
    /// another producer, else `completed.last_offset + 1`. Call before [`Self::complete_txn`].
    pub fn last_stable_offset(&self, completed: &CompletedTxn) -> i64 {
        self.ongoing_txns
            .values()
            .find(|t| t.producer_id != completed.producer_id)
            .map_or(completed.last_offset.saturating_add(1), |t| t.first_offset)
    }

    /// Kafka `completeTxn`: move the transaction from ongoing to unreplicated.
    pub fn complete_txn(&mut self, completed: &CompletedTxn) -> Result<(), ProducerStateError> {
        let mut txn = self.ongoing_txns.remove(&completed.first_offset).ok_or(
            ProducerStateError::TxnNotStarted {
                producer_id: completed.producer_id,
                first_offset: completed.first_offset,
                last_offset: completed.last_offset,
            },
        )?;
        txn.last_offset = Some(completed.last_offset);
        self.unreplicated_txns.insert(completed.first_offset, txn);
        Ok(())
    }

    /// [`Self::complete_txn`] for a completion the analysis of an update already checked
    /// (it names an open transaction): cannot fail.
    fn complete_checked_txn(&mut self, completed: &CompletedTxn) {
        let txn = self
            .ongoing_txns
            .remove(&completed.first_offset)
            .unwrap_or(TxnMetadata {
                producer_id: completed.producer_id,
                first_offset: completed.first_offset,
                last_offset: None,
            });
        self.unreplicated_txns.insert(
            completed.first_offset,
            TxnMetadata {
                last_offset: Some(completed.last_offset),
                ..txn
            },
        );
    }

    /// Kafka `firstUnstableOffset`: the earliest first offset of an ongoing or unreplicated
    /// transaction.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        let ongoing = self.ongoing_txns.keys().next().copied();
        let unreplicated = self.unreplicated_txns.keys().next().copied();
        match (ongoing, unreplicated) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Kafka `firstUndecidedOffset`: the earliest first offset of an ongoing transaction.
    pub fn first_undecided_offset(&self) -> Option<i64> {
        self.ongoing_txns.keys().next().copied()
    }

    /// The partition's last stable offset as UnifiedLog derives it:
    /// `min(max(first_unstable_offset, log_start_offset), high_watermark)`, or the high watermark
    /// when nothing is unstable.
    pub fn last_stable_offset_for(&self, high_watermark: i64, log_start_offset: i64) -> i64 {
        self.first_unstable_offset().map_or(high_watermark, |o| {
            o.max(log_start_offset).min(high_watermark)
        })
    }

    /// Kafka `onHighWatermarkUpdated`: forget unreplicated transactions whose marker is below
    /// the high watermark.
    pub fn on_high_watermark_updated(&mut self, high_watermark: i64) {
        let replicated = |t: &TxnMetadata| t.last_offset.is_some_and(|l| l < high_watermark);
        // A recovery can leave tens of thousands of them, usually all below the new high
        // watermark or all above it: looking first is much cheaper than `retain`, which
        // visits (and removes) them one by one.
        if !self.unreplicated_txns.values().any(replicated) {
            return;
        }
        if self.unreplicated_txns.values().all(replicated) {
            self.unreplicated_txns.clear();
        } else {
            self.unreplicated_txns.retain(|_, t| !replicated(t));
        }
    }

    /// Kafka `findDuplicateBatch` against the current entry of the batch's producer.
    pub fn check_duplicate(&self, batch: &BatchSummary) -> Option<BatchMetadata> {
        if !batch.has_producer_id() {
            return None;
        }
        self.producers
            .get(batch.producer_id)?
            .find_duplicate_batch(batch)
    }

    /// Kafka `removeExpiredProducers`: drop producers with no open transaction whose last
    /// timestamp is at least `producer.id.expiration.ms` old. Returns the removed ids.
    pub fn remove_expired_producers(&mut self, now_ms: i64) -> Vec<i64> {
        self.remove_expired_producer_entries(now_ms)
            .into_iter()
            .map(|e| e.producer_id)
            .collect()
    }

    /// [`Self::remove_expired_producers`], saying for each removed producer when and why, by
    /// producer id. O(producers): a periodic task's work, never an append's.
    pub fn remove_expired_producer_entries(&mut self, now_ms: i64) -> Vec<ExpiredProducer> {
        let expiration = self.config.producer_id_expiration_ms;
        let mut removed = Vec::new();
        self.producers.retain(|e| {
            let expired = is_producer_expired(e, now_ms, expiration);
            if expired {
                removed.push(ExpiredProducer::of(e, now_ms, expiration));
            }
            !expired
        });
        removed.sort_unstable_by_key(|e| e.producer_id);
        removed
    }

    /// Kafka `truncateFullyAndStartAt` (in-memory part): forget everything, map end = `offset`,
    /// last snapshot offset = 0. Deleting the snapshot files is the caller's job
    /// (`delete_snapshots_above_with` with −1 deletes them all).
    pub fn truncate_fully_and_start_at(&mut self, offset: i64) {
        self.producers.clear();
        self.ongoing_txns.clear();
        self.unreplicated_txns.clear();
        self.last_snap_offset = 0;
        self.last_map_offset = offset;
    }

    /// Kafka `loadProducerEntry`: insert an entry and, if it has an open transaction, record it.
    pub fn load_producer_entry(&mut self, entry: ProducerStateEntry) {
        if let Some(first_offset) = entry.current_txn_first_offset {
            self.ongoing_txns.insert(
                first_offset,
                TxnMetadata {
                    producer_id: entry.producer_id,
                    first_offset,
                    last_offset: None,
                },
            );
        }
        self.producers.insert(entry);
    }

    /// Applies `batches` strictly in log order with `origin`'s checks, as UnifiedLog's append
    /// does (all producer updates of a run, then completed transactions with their LSOs, then the
    /// map end offset), except that a `MIRROR_PID_RESET` barrier closes the run: the batches
    /// before it are applied first, then the barrier (see `crate::barrier`), then the batches
    /// after it start from empty producer state.
    ///
    /// All-or-nothing: every batch is checked before anything is applied; on error the manager
    /// is unchanged. For [`AppendOrigin::Client`], a batch that duplicates a cached batch of its
    /// producer (as the state stands just before it) is skipped and reported.
    pub fn apply_batches<'a>(
        &mut self,
        batches: impl IntoIterator<Item = &'a BatchSummary>,
        origin: AppendOrigin,
    ) -> Result<AppliedBatches, ProducerStateError> {
        let update = self.analyze_and_validate(batches, origin)?;
        Ok(self.apply_update(update))
    }

    /// The first half of [`Self::apply_batches`] (Kafka `UnifiedLog.analyzeAndValidateProducerState`):
    /// every check of every batch, made against a copy of the one entry each producer of the
    /// batches has ([`ProducerAppendInfo`]), without changing the manager. Costs O(batches),
    /// whatever the number of live producers. A log calls this before it writes, then
    /// [`Self::apply_update`] once the bytes are in: the refused append writes nothing and the
    /// written one cannot fail to apply. Duplicates (client origin) are in
    /// [`ProducerStateUpdate::duplicates`].
    pub fn analyze_and_validate<'a>(
        &self,
        batches: impl IntoIterator<Item = &'a BatchSummary>,
        origin: AppendOrigin,
    ) -> Result<ProducerStateUpdate<'a>, ProducerStateError> {
        let mut out = AppliedBatches::default();
        let groups = self.analyse_batches(batches, origin, &mut out)?;
        Ok(ProducerStateUpdate { groups, out })
    }

    /// The second half of [`Self::apply_batches`] (Kafka `ProducerStateManager.update` of each
    /// append info, then `completeTxn` and `updateMapEndOffset`): commits an update
    /// [`Self::analyze_and_validate`] made against this manager, unchanged since. Cannot fail;
    /// costs O(batches) except at a `MIRROR_PID_RESET` barrier, which forgets every producer.
    pub fn apply_update(&mut self, update: ProducerStateUpdate<'_>) -> AppliedBatches {
        let ProducerStateUpdate { groups, mut out } = update;
        self.apply_groups(groups, &mut out);
        out
    }

    /// The analysis of [`Self::apply_batches`], without changing `self`: the batches grouped into
    /// runs between barriers, each with its producers' updates and completed transactions
    /// (duplicates skipped and reported in `out`), every check already made.
    fn analyse_batches<'a>(
        &self,
        batches: impl IntoIterator<Item = &'a BatchSummary>,
        origin: AppendOrigin,
        out: &mut AppliedBatches,
    ) -> Result<Vec<(Group, Option<&'a BatchSummary>)>, ProducerStateError> {
        let mut groups: Vec<(Group, Option<&'a BatchSummary>)> = Vec::new();
        let mut group = Group::default();
        let mut after_barrier = false;
        for (index, batch) in batches.into_iter().enumerate() {
            batch.offset_delta()?;
            if batch.is_mirror_pid_reset() {
                let done = std::mem::take(&mut group);
                groups.push((done, Some(batch)));
                after_barrier = true;
                continue;
            }
            if batch.has_producer_id() {
                let pid = batch.producer_id;
                let base = if after_barrier {
                    None
                } else {
                    self.producers.get(pid)
                };
                let slot = group.slot(pid);
                if origin == AppendOrigin::Client {
                    let pending = slot.and_then(|i| group.infos.get(i));
                    let dup = match pending {
                        None => base.and_then(|e| e.find_duplicate_batch(batch)),
                        Some(info) => {
                            let mut e = base
                                .cloned()
                                .unwrap_or_else(|| ProducerStateEntry::empty(pid));
                            info.merge_into(&mut e);
                            e.find_duplicate_batch(batch)
                        }
                    };
                    if let Some(original) = dup {
                        out.duplicates.push(DuplicateBatch {
                            index,
                            producer_id: pid,
                            original,
                        });
                        continue;
                    }
                }
                let i = match slot {
                    Some(i) => i,
                    None => {
                        let current = base
                            .cloned()
                            .unwrap_or_else(|| ProducerStateEntry::empty(pid));
                        group.push(ProducerAppendInfo::new(pid, current, origin))
                    }
                };
                if let Some(info) = group.infos.get_mut(i) {
                    if let Some(txn) = info.append(batch)? {
                        group.completed.push(txn);
                    }
                }
            }
            group.last_offset = Some(batch.last_offset);
        }
        groups.push((group, None));
        // A completion must name an open transaction; check now so that applying cannot fail.
        // Only the run before the first barrier sees the manager's open transactions: a barrier
        // aborts them all.
        for (i, (group, _)) in groups.iter().enumerate() {
            for txn in &group.completed {
                let started_here = group
                    .infos
                    .iter()
                    .flat_map(|i| i.started_transactions.iter())
                    .any(|t| t.first_offset == txn.first_offset);
                let open_before = i == 0 && self.ongoing_txns.contains_key(&txn.first_offset);
                if !started_here && !open_before {
                    return Err(ProducerStateError::TxnNotStarted {
                        producer_id: txn.producer_id,
                        first_offset: txn.first_offset,
                        last_offset: txn.last_offset,
                    });
                }
            }
        }
        Ok(groups)
    }

    /// The application of [`Self::apply_batches`]: the analysed groups, strictly in log order.
    fn apply_groups(
        &mut self,
        groups: Vec<(Group, Option<&BatchSummary>)>,
        out: &mut AppliedBatches,
    ) {
        for (group, barrier) in groups {
            for info in group.infos {
                out.warnings.extend_from_slice(&info.warnings);
                // The analysis made an info only for a batch with a producer id.
                self.commit_append_info(info);
            }
            for txn in group.completed {
                let lso = self.last_stable_offset(&txn);
                self.complete_checked_txn(&txn);
                if txn.is_aborted {
                    out.aborted_txns.push(AbortedTxnRecord {
                        producer_id: txn.producer_id,
                        first_offset: txn.first_offset,
                        last_offset: txn.last_offset,
                        last_stable_offset: lso,
                    });
                }
                out.completed_txns.push(txn);
            }
            if let Some(last) = group.last_offset {
                self.update_map_end_offset(last.saturating_add(1));
            }
            if let Some(b) = barrier {
                out.push_barrier(self.apply_barrier(b));
            }
        }
    }
}
