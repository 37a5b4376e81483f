package seglog.kafka;

import java.io.File;
import java.io.IOException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.HashMap;
import java.util.Map;
import java.util.Optional;
import java.util.Random;
import java.util.function.Supplier;

import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.record.internal.CompressionType;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.record.internal.ControlRecordType;
import org.apache.kafka.common.record.internal.EndTransactionMarker;
import org.apache.kafka.common.record.internal.MemoryRecords;
import org.apache.kafka.common.record.internal.MemoryRecordsBuilder;
import org.apache.kafka.common.record.internal.RecordBatch;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.server.util.KafkaScheduler;
import org.apache.kafka.storage.internals.checkpoint.OffsetCheckpointFile;
import org.apache.kafka.storage.internals.log.AppendOrigin;
import org.apache.kafka.storage.internals.log.Cleaner;
import org.apache.kafka.storage.internals.log.LogCleanerManager;
import org.apache.kafka.storage.internals.log.LogConfig;
import org.apache.kafka.storage.internals.log.LogDirFailureChannel;
import org.apache.kafka.storage.internals.log.LogToClean;
import org.apache.kafka.storage.internals.log.ProducerStateManagerConfig;
import org.apache.kafka.storage.internals.log.SkimpyOffsetMap;
import org.apache.kafka.storage.internals.log.UnifiedLog;
import org.apache.kafka.storage.internals.utils.Throttler;
import org.apache.kafka.storage.log.metrics.BrokerTopicStats;

/**
 * Kafka's log cleaner as an oracle (issue 31), with a fixed clock.
 *
 * <pre>
 * compact-write (DIR SEED BATCHES SEGMENT_BYTES CODEC)...
 *                                                each a keyed partition for a compacted topic, its batches compressed
 *                                                with CODEC (none, gzip, snappy, lz4, zstd), through
 *                                                UnifiedLog.appendAsLeader (keys, tombstones, idempotent producers,
 *                                                committed and aborted transactions); closed cleanly, with the
 *                                                parent's recovery-point, replication-offset and clean-shutdown files
 * compact-clean (NOW DEDUPE_BYTES DELETE_RETENTION_MS SEGMENT_BYTES PASSES DIR)...
 *                                                PASSES passes of Kafka's Cleaner.doClean on DIR: the range from
 *                                                LogCleanerManager.cleanableOffsets (first pass from the log start,
 *                                                then from the previous pass's end), pass i at NOW + i * (retention + 1)
 * compact-bench NOW DEDUPE_BYTES SEGMENT_BYTES   the benchmark peer of benches/cleaner.rs: one JVM, one Cleaner (one
 *                                                thread, its offset map reused as a broker's cleaner thread reuses
 *                                                it); for each line "DIR LOG_END_OFFSET" on stdin, marks DIR's log
 *                                                directory cleanly shut down at that offset, opens the log (not
 *                                                timed), then times one pass: cleanableOffsets, doClean (offset map,
 *                                                rewrite, indexes, flush, swap), the cleaner-offset-checkpoint
 *                                                write (as LogCleanerManager.doneCleaning writes it) and the
 *                                                scheduler's deletion of the replaced segments; closes the log
 * </pre>
 *
 * Prints one JSON line per pass: dir, pass, first dirty, first uncleanable and end offsets
 * (compact-bench: dir, seconds with and without the deletion, first dirty, first uncleanable and end offsets, map keys).
 */
final class CleanerHarness {
    /** The clock of every write: records are stamped T0 + n. */
    static final long T0 = 1_700_000_000_000L;
    private static final LogDirFailureChannel FAILURES = new LogDirFailureChannel(10);

    private CleanerHarness() {}

    /** A clock that stands still unless set. */
    static final class FixedTime implements Time {
        volatile long now;

        FixedTime(long now) {
            this.now = now;
        }

        @Override
        public long milliseconds() {
            return now;
        }

        @Override
        public long nanoseconds() {
            return now * 1_000_000L;
        }

        @Override
        public void sleep(long ms) {
            now += ms;
        }

        @Override
        public void waitObject(Object obj, Supplier<Boolean> condition, long deadlineMs) {
            if (!condition.get()) throw new IllegalStateException("FixedTime cannot wait");
        }
    }

    static LogConfig config(int segmentBytes, long deleteRetentionMs) {
        Map<String, Object> props = new HashMap<>();
        props.put("cleanup.policy", "compact");
        props.put("file.delete.delay.ms", 0L);
        props.put("internal.segment.bytes", segmentBytes);
        props.put("delete.retention.ms", deleteRetentionMs);
        return new LogConfig(props);
    }

    static UnifiedLog open(File dir, LogConfig config, Time time, KafkaScheduler scheduler, boolean clean) throws IOException {
        TopicPartition tp = UnifiedLog.parseTopicPartitionName(dir);
        File parent = dir.getAbsoluteFile().getParentFile();
        long recoveryPoint = Harness.checkpoint(parent, "recovery-point-offset-checkpoint", tp);
        ProducerStateManagerConfig psm = new ProducerStateManagerConfig(86400000 * 7, false);
        return UnifiedLog.create(dir, config, 0L, recoveryPoint, scheduler, new BrokerTopicStats(), time,
                300000, psm, 600000, FAILURES, clean, Optional.empty());
    }

    static void write(String[] a) throws Exception {
        for (int i = 0; i + 4 < a.length; i += 5) {
            Compression codec = Compression.of(CompressionType.forName(a[i + 4])).build();
            writeOne(new File(a[i]), Long.parseLong(a[i + 1]), Integer.parseInt(a[i + 2]), Integer.parseInt(a[i + 3]), codec);
        }
    }

    static void writeOne(File dir, long seed, int batches, int segmentBytes, Compression codec) throws Exception {
        Random rnd = new Random(seed);
        FixedTime time = new FixedTime(T0 + 10_000_000L);
        KafkaScheduler scheduler = new KafkaScheduler(1, true, "compact-write-");
        scheduler.startup();
        Files.createDirectories(dir.toPath());
        UnifiedLog log = open(dir, config(segmentBytes, 86_400_000L), time, scheduler, false);
        int keys = 3 + rnd.nextInt(rnd.nextBoolean() ? 20 : 400);
        int tombstoneOneIn = 3 + rnd.nextInt(12);
        int nProducers = 4;
        long[] pid = new long[nProducers];
        short[] epoch = new short[nProducers];
        int[] seq = new int[nProducers];
        boolean[] inTxn = new boolean[nProducers];
        for (int p = 0; p < nProducers; p++) pid[p] = 2000 + p * 11 + rnd.nextInt(5);
        long ts = T0;
        for (int b = 0; b < batches; b++) {
            ts += 1 + rnd.nextInt(3);
            int n = 1 + rnd.nextInt(6);
            int kind = rnd.nextInt(10);
            int p = 2 + rnd.nextInt(2);
            if (kind < 3) {
                log.appendAsLeader(records(rnd, RecordBatch.NO_PRODUCER_ID, (short) -1, -1, false, n, ts, keys,
                        tombstoneOneIn, codec), 0, AppendOrigin.CLIENT);
            } else if (kind < 6) {
                int q = rnd.nextInt(2);
                log.appendAsLeader(records(rnd, pid[q], epoch[q], seq[q], false, n, ts, keys, tombstoneOneIn, codec), 0,
                        AppendOrigin.CLIENT);
                seq[q] += n;
            } else {
                log.appendAsLeader(records(rnd, pid[p], epoch[p], seq[p], true, n, ts, keys, tombstoneOneIn, codec), 0,
                        AppendOrigin.CLIENT);
                seq[p] += n;
                inTxn[p] = true;
                if (rnd.nextInt(3) == 0) {
                    Harness.endTxn(log, pid[p], epoch[p], rnd.nextInt(3) != 0, ts, 0);
                    inTxn[p] = false;
                }
            }
        }
        if (seed % 3 != 0) {
            for (int p = 0; p < nProducers; p++) if (inTxn[p]) Harness.endTxn(log, pid[p], epoch[p], rnd.nextBoolean(), ts, 0);
        }
        log.updateHighWatermark(log.logEndOffset());
        log.flush(false);
        long leo = log.logEndOffset();
        TopicPartition tp = log.topicPartition();
        log.close();
        scheduler.shutdown();
        File parent = dir.getAbsoluteFile().getParentFile();
        new OffsetCheckpointFile(new File(parent, "recovery-point-offset-checkpoint"), FAILURES).write(Map.of(tp, leo));
        new OffsetCheckpointFile(new File(parent, "replication-offset-checkpoint"), FAILURES).write(Map.of(tp, leo));
        Files.createFile(new File(parent, ".kafka_cleanshutdown").toPath());
        System.out.println("{\"dir\":" + Harness.q(dir.getPath()) + ",\"log_end_offset\":" + leo + "}");
    }

    static MemoryRecords records(Random rnd, long pid, short epoch, int seq, boolean txn, int n, long ts, int keys,
                                 int tombstoneOneIn, Compression codec) {
        java.nio.ByteBuffer buf = java.nio.ByteBuffer.allocate(64 * 1024);
        MemoryRecordsBuilder b = MemoryRecords.builder(buf, RecordBatch.CURRENT_MAGIC_VALUE, codec,
                TimestampType.CREATE_TIME, 0L, ts, pid, epoch, seq, txn, RecordBatch.NO_PARTITION_LEADER_EPOCH);
        for (int i = 0; i < n; i++) {
            byte[] key = ("k" + rnd.nextInt(keys)).getBytes(StandardCharsets.UTF_8);
            byte[] value = null;
            if (rnd.nextInt(tombstoneOneIn) != 0) {
                value = new byte[rnd.nextInt(200)];
                for (int j = 0; j < value.length; j++) value[j] = (byte) ('a' + rnd.nextInt(26));
            }
            b.appendWithOffset(i, ts + (rnd.nextInt(4) == 0 ? -rnd.nextInt(3) : 0), key, value);
        }
        return b.build();
    }

    static Object accessor(Object record, String name) throws Exception {
        Method m = record.getClass().getDeclaredMethod(name);
        m.setAccessible(true);
        return m.invoke(record);
    }

    static void clean(String[] a) throws Exception {
        Method cleanable = LogCleanerManager.class.getDeclaredMethod("cleanableOffsets", UnifiedLog.class,
                Optional.class, long.class);
        cleanable.setAccessible(true);
        for (int i = 0; i + 5 < a.length; i += 6) {
            long now = Long.parseLong(a[i]);
            long dedupe = Long.parseLong(a[i + 1]);
            long retention = Long.parseLong(a[i + 2]);
            int segmentBytes = Integer.parseInt(a[i + 3]);
            int passes = Integer.parseInt(a[i + 4]);
            File dir = new File(a[i + 5]);
            FixedTime time = new FixedTime(now);
            KafkaScheduler scheduler = new KafkaScheduler(1, true, "compact-clean-");
            scheduler.startup();
            LogConfig config = config(segmentBytes, retention);
            UnifiedLog log = open(dir, config, time, scheduler, true);
            TopicPartition tp = log.topicPartition();
            File parent = dir.getAbsoluteFile().getParentFile();
            log.updateHighWatermark(Harness.checkpoint(parent, "replication-offset-checkpoint", tp));
            SkimpyOffsetMap map = new SkimpyOffsetMap((int) Math.min(dedupe, Integer.MAX_VALUE));
            Throttler throttler = new Throttler(Double.MAX_VALUE, Long.MAX_VALUE, "cleaner-io", "bytes", time);
            // Kafka: ioBufferSize = log.cleaner.io.buffer.size / threads / 2 (512 KiB / 1 / 2).
            Cleaner cleaner = new Cleaner(0, map, 256 * 1024, config.maxMessageSize(), 0.9, throttler, time, t -> { });
            Optional<Long> last = Optional.empty();
            for (int pass = 0; pass < passes; pass++) {
                long at = now + pass * (retention + 1);
                time.now = at;
                Object offsets = cleanable.invoke(null, log, last, at);
                long dirty = (Long) accessor(offsets, "firstDirtyOffset");
                long uncleanable = (Long) accessor(offsets, "firstUncleanableDirtyOffset");
                long end = dirty;
                LogToClean ltc = new LogToClean(log, dirty, uncleanable, false);
                // LogCleanerManager only picks a log with cleanable bytes: a dirty section that
                // reaches past the first dirty offset's segment.
                if (dirty < ltc.firstUncleanableOffset()) {
                    end = cleaner.doClean(ltc, at).getKey();
                    last = Optional.of(end);
                }
                uncleanable = ltc.firstUncleanableOffset();
                System.out.println("{\"dir\":" + Harness.q(dir.getPath()) + ",\"pass\":" + pass + ",\"first_dirty\":" + dirty
                        + ",\"first_uncleanable\":" + uncleanable + ",\"end\":" + end + ",\"map_keys\":" + map.size()
                        + ",\"map_slots\":" + map.slots() + "}");
            }
            log.close();
            scheduler.shutdown();
            for (File f : Optional.ofNullable(dir.listFiles()).orElse(new File[0])) {
                if (f.getName().endsWith(".deleted")) Files.deleteIfExists(f.toPath());
            }
        }
    }

    static void bench(String[] a) throws Exception {
        Method cleanable = LogCleanerManager.class.getDeclaredMethod("cleanableOffsets", UnifiedLog.class,
                Optional.class, long.class);
        cleanable.setAccessible(true);
        long now = Long.parseLong(a[0]);
        long dedupe = Long.parseLong(a[1]);
        int segmentBytes = Integer.parseInt(a[2]);
        FixedTime time = new FixedTime(now);
        LogConfig config = config(segmentBytes, 86_400_000L);
        SkimpyOffsetMap map = new SkimpyOffsetMap((int) Math.min(dedupe, Integer.MAX_VALUE));
        Throttler throttler = new Throttler(Double.MAX_VALUE, Long.MAX_VALUE, "cleaner-io", "bytes", time);
        // Kafka: ioBufferSize = log.cleaner.io.buffer.size / threads / 2 (512 KiB / 1 / 2).
        Cleaner cleaner = new Cleaner(0, map, 256 * 1024, config.maxMessageSize(), 0.9, throttler, time, t -> { });
        java.io.BufferedReader in = new java.io.BufferedReader(
                new java.io.InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null && !line.isBlank(); ) {
            int sp = line.lastIndexOf(' ');
            File dir = new File(line.substring(0, sp));
            long leo = Long.parseLong(line.substring(sp + 1).trim());
            TopicPartition tp = UnifiedLog.parseTopicPartitionName(dir);
            File parent = dir.getAbsoluteFile().getParentFile();
            new OffsetCheckpointFile(new File(parent, "recovery-point-offset-checkpoint"), FAILURES).write(Map.of(tp, leo));
            new OffsetCheckpointFile(new File(parent, "replication-offset-checkpoint"), FAILURES).write(Map.of(tp, leo));
            Files.createFile(new File(parent, ".kafka_cleanshutdown").toPath());
            KafkaScheduler scheduler = new KafkaScheduler(1, true, "compact-bench-");
            scheduler.startup();
            UnifiedLog log = open(dir, config, time, scheduler, true);
            log.updateHighWatermark(leo);
            OffsetCheckpointFile cleanerCheckpoint = new OffsetCheckpointFile(new File(parent, "cleaner-offset-checkpoint"),
                    FAILURES);
            long t0 = System.nanoTime();
            Object offsets = cleanable.invoke(null, log, Optional.empty(), now);
            long dirty = (Long) accessor(offsets, "firstDirtyOffset");
            long uncleanable = (Long) accessor(offsets, "firstUncleanableDirtyOffset");
            LogToClean ltc = new LogToClean(log, dirty, uncleanable, false);
            long end = cleaner.doClean(ltc, now).getKey();
            cleanerCheckpoint.write(Map.of(tp, end));
            long cleanNanos = System.nanoTime() - t0;
            // The replaced segments are deleted by the scheduler (file.delete.delay.ms = 0); seglog's
            // pass removes them itself, so the time includes their deletion.
            while (Optional.ofNullable(dir.list((d, n) -> n.endsWith(".deleted"))).map(l -> l.length).orElse(0) > 0) {
                java.util.concurrent.locks.LockSupport.parkNanos(50_000L);
            }
            long nanos = System.nanoTime() - t0;
            log.close();
            scheduler.shutdown();
            for (File f : Optional.ofNullable(dir.listFiles()).orElse(new File[0])) {
                if (f.getName().endsWith(".deleted")) Files.deleteIfExists(f.toPath());
            }
            System.out.println("{\"dir\":" + Harness.q(dir.getPath()) + ",\"seconds\":" + nanos / 1e9 + ",\"clean_seconds\":" + cleanNanos / 1e9 + ",\"first_dirty\":"
                    + dirty + ",\"first_uncleanable\":" + ltc.firstUncleanableOffset() + ",\"end\":" + end
                    + ",\"map_keys\":" + map.size() + "}");
            System.out.flush();
        }
    }
}
