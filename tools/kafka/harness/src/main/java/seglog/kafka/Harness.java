package seglog.kafka;

import java.io.File;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.zip.CRC32;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.record.internal.ControlRecordType;
import org.apache.kafka.common.record.internal.EndTransactionMarker;
import org.apache.kafka.common.record.internal.MemoryRecords;
import org.apache.kafka.common.record.internal.MemoryRecordsBuilder;
import org.apache.kafka.common.record.internal.RecordBatch;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.server.util.KafkaScheduler;
import org.apache.kafka.storage.internals.checkpoint.LeaderEpochCheckpointFile;
import org.apache.kafka.storage.internals.checkpoint.OffsetCheckpointFile;
import org.apache.kafka.storage.internals.log.AbortedTxn;
import org.apache.kafka.storage.internals.log.AppendOrigin;
import org.apache.kafka.storage.internals.log.EpochEntry;
import org.apache.kafka.storage.internals.log.LogConfig;
import org.apache.kafka.storage.internals.log.LogDirFailureChannel;
import org.apache.kafka.storage.internals.log.LogSegment;
import org.apache.kafka.storage.internals.log.ProducerStateEntry;
import org.apache.kafka.storage.internals.log.ProducerStateManager;
import org.apache.kafka.storage.internals.log.ProducerStateManagerConfig;
import org.apache.kafka.storage.internals.log.TransactionIndex;
import org.apache.kafka.storage.internals.log.UnifiedLog;
import org.apache.kafka.storage.log.metrics.BrokerTopicStats;

/**
 * seglog's window onto Apache Kafka: every subcommand calls Kafka's own classes in-process.
 *
 * <pre>
 * recover [--full] [--threads N] DIR...   UnifiedLog.create (LogLoader) as LogManager.loadLog does, close, print inspect
 * inspect DIR...                          what Kafka's readers see in a partition dir (no recovery)
 * dump ARGS...                            org.apache.kafka.tools.DumpLogSegments.main
 * write DIR SEED BATCHES SEGMENT_BYTES    a varied partition through UnifiedLog.appendAsLeader
 * bench-write DIR BATCHES RECORDS VALUE_BYTES SEGMENT_BYTES [WARMUP [PRODUCERS]]   appendAsLeader throughput
 * bench-append FILE SEGMENT_BYTES          appendAsLeader of FILE's batches, CPU and wall time, one pass per stdin line (a DIR)
 * bench-recover ITERATIONS THREADS DIR... Kafka recovery of every partition, from scratch, timed
 * create-topic BOOTSTRAP TOPIC PARTITIONS [k=v...]
 * produce-mix BOOTSTRAP TOPIC             the scenario of tests/kafka_interop.rs; prints what was acked
 * produce-loop BOOTSTRAP TOPIC PARTITIONS produces until killed, printing acked offsets
 * produce-compacted BOOTSTRAP TOPIC ROUNDS  keyed records, tombstones, idempotent and transactional (some aborted)
 * consume BOOTSTRAP TOPIC PARTITIONS ISOLATION   every record up to the end offsets, as JSON lines
 * utf8                                  hex lines on stdin: DumpLogSegments' StringDecoder text, as UTF-8 hex
 * compact-write, compact-clean           Kafka's log cleaner as an oracle: see CleanerHarness
 * compact-bench NOW DEDUPE_BYTES SEGMENT_BYTES   Kafka's log cleaner timed, one pass per stdin line: see CleanerHarness
 * read DIR HW REQUESTS                   UnifiedLog.read per request line, as an oracle: see ReadHarness
 * bench-read DIR HW REQUESTS WARMUP TIMED UnifiedLog.read timed over the request lines: see ReadHarness
 * bench-read-writer DIR READERS ROUNDS SECONDS FLUSH_EVERY [copy|slice] [RATE]   UnifiedLog.read beside appendAsLeader: see ReadHarness
 * </pre>
 *
 * JSON is printed on stdout, one object per line; diagnostics go to stderr.
 */
public final class Harness {
    private static final PrintStream OUT = System.out;

    private Harness() {}

    public static void main(String[] args) throws Exception {
        if (args.length == 0) {
            System.err.println("usage: Harness recover|inspect|dump|write|bench-write|bench-recover|create-topic|produce-mix|produce-loop|consume ...");
            System.exit(2);
        }
        String[] rest = Arrays.copyOfRange(args, 1, args.length);
        switch (args[0]) {
            case "recover" -> recover(rest);
            case "inspect" -> {
                for (String d : rest) OUT.println(inspect(new File(d)));
            }
            case "dump" -> org.apache.kafka.tools.DumpLogSegments.main(rest);
            case "write" -> write(rest);
            case "bench-write" -> benchWrite(rest);
            case "bench-append" -> benchAppend(rest);
            case "bench-recover" -> benchRecover(rest);
            case "create-topic" -> createTopic(rest);
            case "produce-mix" -> produceMix(rest);
            case "produce-loop" -> produceLoop(rest);
            case "consume" -> consume(rest);
            case "utf8" -> utf8();
            case "compact-write" -> CleanerHarness.write(rest);
            case "produce-compacted" -> produceCompacted(rest);
            case "compact-clean" -> CleanerHarness.clean(rest);
            case "compact-bench" -> CleanerHarness.bench(rest);
            case "read" -> ReadHarness.read(rest);
            case "bench-read" -> ReadHarness.benchRead(rest);
            case "bench-read-writer" -> ReadHarness.benchReadWriter(rest);
            default -> {
                System.err.println("unknown subcommand " + args[0]);
                System.exit(2);
            }
        }
        OUT.flush();
        System.exit(0);
    }

    // ---------------------------------------------------------------- storage

    private static final LogDirFailureChannel FAILURES = new LogDirFailureChannel(10);

    static LogConfig logConfig(Integer segmentBytes) {
        Map<String, Object> props = new HashMap<>();
        props.put("file.delete.delay.ms", 0L);
        props.put("max.message.bytes", 4 * 1024 * 1024);
        if (segmentBytes != null) props.put("internal.segment.bytes", segmentBytes);
        return new LogConfig(props);
    }

    /** Opens a partition dir as LogManager.loadLog would (parent's marker and checkpoints), unless full. */
    static UnifiedLog open(File dir, boolean full, KafkaScheduler scheduler, BrokerTopicStats stats, Integer segmentBytes)
            throws IOException {
        TopicPartition tp = UnifiedLog.parseTopicPartitionName(dir);
        File parent = dir.getAbsoluteFile().getParentFile();
        boolean clean = !full && new File(parent, ".kafka_cleanshutdown").exists();
        long recoveryPoint = full ? 0L : checkpoint(parent, "recovery-point-offset-checkpoint", tp);
        long logStart = checkpoint(parent, "log-start-offset-checkpoint", tp);
        ProducerStateManagerConfig psm = new ProducerStateManagerConfig(86400000 * 7, false);
        return UnifiedLog.create(dir, logConfig(segmentBytes), logStart, recoveryPoint, scheduler, stats, Time.SYSTEM,
                300000, psm, 600000, FAILURES, clean, Optional.empty());
    }

    static long checkpoint(File parent, String name, TopicPartition tp) throws IOException {
        File f = new File(parent, name);
        if (!f.exists()) return 0L;
        Map<TopicPartition, Long> m = new OffsetCheckpointFile(f, FAILURES).read();
        return m.getOrDefault(tp, 0L);
    }

    static KafkaScheduler scheduler() {
        KafkaScheduler s = new KafkaScheduler(1, true, "harness-");
        s.startup();
        return s;
    }

    static void recover(String[] args) throws Exception {
        boolean full = false;
        int threads = 1;
        List<File> dirs = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--full" -> full = true;
                case "--threads" -> threads = Integer.parseInt(args[++i]);
                default -> dirs.add(new File(args[i]));
            }
        }
        KafkaScheduler scheduler = scheduler();
        BrokerTopicStats stats = new BrokerTopicStats();
        final boolean f = full;
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        List<Future<String>> results = new ArrayList<>();
        for (File dir : dirs) {
            results.add(pool.submit(() -> {
                try {
                    long t0 = System.nanoTime();
                    UnifiedLog log = open(dir, f, scheduler, stats, null);
                    long leo = log.logEndOffset();
                    long lso = log.logStartOffset();
                    // In memory: Kafka truncates the leader-epoch cache at once but flushes its
                    // checkpoint file asynchronously (truncateFromEndAsyncFlush).
                    List<String> epochs = new ArrayList<>();
                    for (EpochEntry e : log.leaderEpochCache().epochEntries()) {
                        epochs.add("{\"epoch\":" + e.epoch() + ",\"start_offset\":" + e.startOffset() + "}");
                    }
                    log.close();
                    double ms = (System.nanoTime() - t0) / 1e6;
                    String ins = inspect(dir);
                    return "{\"loaded\":{\"log_end_offset\":" + leo + ",\"log_start_offset\":" + lso
                            + ",\"leader_epochs\":[" + String.join(",", epochs) + "]"
                            + ",\"ms\":" + String.format("%.3f", ms) + "}," + ins.substring(1);
                } catch (Throwable e) {
                    return "{\"dir\":" + q(dir.getPath()) + ",\"error\":" + q(e.toString()) + "}";
                }
            }));
        }
        for (Future<String> r : results) OUT.println(r.get());
        pool.shutdown();
        scheduler.shutdown();
    }

    /** What Kafka's own readers find in a partition directory, without recovering it. */
    static String inspect(File dir) throws IOException {
        StringBuilder sb = new StringBuilder();
        sb.append("{\"dir\":").append(q(dir.getPath()));
        File[] files = dir.listFiles();
        if (files == null) files = new File[0];
        Arrays.sort(files);
        List<String> segs = new ArrayList<>();
        List<String> aborted = new ArrayList<>();
        List<File> snapshots = new ArrayList<>();
        for (File f : files) {
            String n = f.getName();
            if (n.endsWith(".log")) {
                segs.add("{\"base\":" + UnifiedLog.offsetFromFile(f) + ",\"bytes\":" + f.length() + "}");
            } else if (n.endsWith(".txnindex")) {
                TransactionIndex idx = new TransactionIndex(UnifiedLog.offsetFromFile(f), f);
                for (AbortedTxn t : idx.allAbortedTxns()) {
                    aborted.add("{\"producer_id\":" + t.producerId() + ",\"first_offset\":" + t.firstOffset()
                            + ",\"last_offset\":" + t.lastOffset() + ",\"last_stable_offset\":" + t.lastStableOffset() + "}");
                }
                idx.close();
            } else if (n.endsWith(".snapshot")) {
                snapshots.add(f);
            }
        }
        sb.append(",\"segments\":[").append(String.join(",", segs)).append("]");
        sb.append(",\"aborted_txns\":[").append(String.join(",", aborted)).append("]");
        // As ProducerStateManager loads: the latest snapshot Kafka can read (corrupt ones are listed).
        snapshots.sort((x, y) -> Long.compare(UnifiedLog.offsetFromFile(y), UnifiedLog.offsetFromFile(x)));
        List<String> prods = new ArrayList<>();
        List<String> corrupt = new ArrayList<>();
        List<ProducerStateEntry> read = null;
        long lastSnapshotOffset = -1;
        for (File f : snapshots) {
            try {
                read = ProducerStateManager.readSnapshot(f);
                lastSnapshotOffset = UnifiedLog.offsetFromFile(f);
                break;
            } catch (org.apache.kafka.storage.internals.log.CorruptSnapshotException e) {
                corrupt.add(Long.toString(UnifiedLog.offsetFromFile(f)));
            }
        }
        if (read != null) {
            List<ProducerStateEntry> entries = new ArrayList<>(read);
            entries.sort((a, b) -> Long.compare(a.producerId(), b.producerId()));
            for (ProducerStateEntry e : entries) {
                // The snapshot keeps one BatchMetadata per producer (the last batch).
                List<String> bms = new ArrayList<>();
                for (org.apache.kafka.storage.internals.log.BatchMetadata m : e.batchMetadata()) {
                    bms.add("{\"last_sequence\":" + m.lastSeq() + ",\"last_offset\":" + m.lastOffset()
                            + ",\"offset_delta\":" + m.offsetDelta() + ",\"timestamp\":" + m.timestamp() + "}");
                }
                prods.add("{\"producer_id\":" + e.producerId() + ",\"producer_epoch\":" + e.producerEpoch()
                        + ",\"last_timestamp\":" + e.lastTimestamp() + ",\"coordinator_epoch\":" + e.coordinatorEpoch()
                        + ",\"current_txn_first_offset\":" + (e.currentTxnFirstOffset().isPresent() ? e.currentTxnFirstOffset().getAsLong() : -1)
                        + ",\"batches\":[" + String.join(",", bms) + "]}");
            }
        }
        sb.append(",\"snapshot_offset\":").append(lastSnapshotOffset);
        sb.append(",\"corrupt_snapshots\":[").append(String.join(",", corrupt)).append("]");
        sb.append(",\"producers\":[").append(String.join(",", prods)).append("]");
        List<String> epochs = new ArrayList<>();
        File lec = new File(dir, "leader-epoch-checkpoint");
        if (lec.exists()) {
            for (EpochEntry e : new LeaderEpochCheckpointFile(lec, FAILURES).read()) {
                epochs.add("{\"epoch\":" + e.epoch() + ",\"start_offset\":" + e.startOffset() + "}");
            }
        }
        sb.append(",\"leader_epochs\":[").append(String.join(",", epochs)).append("]}");
        return sb.toString();
    }

    static String q(String s) {
        StringBuilder sb = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') sb.append('\\').append(c);
            else if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
            else sb.append(c);
        }
        return sb.append('"').toString();
    }

    /**
     * A varied partition written through UnifiedLog.appendAsLeader: plain and compressed batches, idempotent
     * producers, transactions committed and aborted (markers appended as the coordinator does), leader epoch
     * changes, headers and null keys. Deterministic for a seed, except timestamps (now-based, so Kafka does not
     * expire the producers when loading).
     */
    static void write(String[] a) throws Exception {
        File dir = new File(a[0]);
        long seed = Long.parseLong(a[1]);
        int batches = Integer.parseInt(a[2]);
        int segmentBytes = Integer.parseInt(a[3]);
        Random rnd = new Random(seed);
        KafkaScheduler scheduler = scheduler();
        BrokerTopicStats stats = new BrokerTopicStats();
        Files.createDirectories(dir.toPath());
        UnifiedLog log = open(dir, true, scheduler, stats, segmentBytes);
        Compression[] codecs = {Compression.NONE, Compression.gzip().build(), Compression.snappy().build(),
            Compression.lz4().build(), Compression.zstd().build()};
        int nProducers = 4;
        long[] pid = new long[nProducers];
        short[] epoch = new short[nProducers];
        int[] seq = new int[nProducers];
        boolean[] inTxn = new boolean[nProducers];
        for (int p = 0; p < nProducers; p++) pid[p] = 1000 + p * 7 + rnd.nextInt(5);
        int leaderEpoch = 0;
        long ts = System.currentTimeMillis() - batches;
        for (int b = 0; b < batches; b++) {
            ts++;
            if (rnd.nextInt(40) == 0) leaderEpoch += 1 + rnd.nextInt(2);
            Compression c = codecs[rnd.nextInt(codecs.length)];
            int n = 1 + rnd.nextInt(8);
            int kind = rnd.nextInt(10);
            int p = rnd.nextInt(nProducers);
            if (kind < 3) {
                log.appendAsLeader(records(rnd, c, RecordBatch.NO_PRODUCER_ID, (short) -1, -1, false, n, ts, 0L),
                        leaderEpoch, AppendOrigin.CLIENT);
            } else if (kind < 6 || p < 2) {
                if (inTxn[p]) {
                    endTxn(log, pid[p], epoch[p], rnd.nextBoolean(), ts, leaderEpoch);
                    inTxn[p] = false;
                }
                if (p < 2 && rnd.nextInt(25) == 0) {
                    epoch[p]++;
                    seq[p] = 0;
                }
                log.appendAsLeader(records(rnd, c, pid[p], epoch[p], seq[p], false, n, ts, 0L),
                        leaderEpoch, AppendOrigin.CLIENT);
                seq[p] += n;
            } else {
                if (!inTxn[p] && rnd.nextInt(6) == 0) {
                    epoch[p]++;
                    seq[p] = 0;
                }
                log.appendAsLeader(records(rnd, c, pid[p], epoch[p], seq[p], true, n, ts, 0L),
                        leaderEpoch, AppendOrigin.CLIENT);
                seq[p] += n;
                inTxn[p] = true;
                if (rnd.nextInt(3) == 0) {
                    endTxn(log, pid[p], epoch[p], rnd.nextInt(3) != 0, ts, leaderEpoch);
                    inTxn[p] = false;
                }
            }
        }
        // Leave the last open transactions open (recovery must carry them), except with an even seed.
        if (seed % 2 == 0) {
            for (int p = 0; p < nProducers; p++) if (inTxn[p]) endTxn(log, pid[p], epoch[p], false, ts, leaderEpoch);
        }
        log.updateHighWatermark(log.logEndOffset());
        log.flush(false);
        long leo = log.logEndOffset();
        log.close();
        scheduler.shutdown();
        OUT.println("{\"dir\":" + q(dir.getPath()) + ",\"log_end_offset\":" + leo + "}");
    }

    static void endTxn(UnifiedLog log, long pid, short epoch, boolean commit, long ts, int leaderEpoch) throws IOException {
        EndTransactionMarker m = new EndTransactionMarker(commit ? ControlRecordType.COMMIT : ControlRecordType.ABORT, 3);
        log.appendAsLeader(MemoryRecords.withEndTransactionMarker(0L, ts, leaderEpoch, pid, epoch, m),
                leaderEpoch, AppendOrigin.COORDINATOR, org.apache.kafka.server.common.RequestLocal.noCaching(),
                org.apache.kafka.storage.internals.log.VerificationGuard.SENTINEL, (short) 1);
    }

    static MemoryRecords records(Random rnd, Compression c, long pid, short epoch, int seq, boolean txn, int n, long ts,
                                 long baseOffset) {
        java.nio.ByteBuffer buf = java.nio.ByteBuffer.allocate(64 * 1024);
        MemoryRecordsBuilder b = MemoryRecords.builder(buf, RecordBatch.CURRENT_MAGIC_VALUE, c, TimestampType.CREATE_TIME,
                baseOffset, ts, pid, epoch, seq, txn, RecordBatch.NO_PARTITION_LEADER_EPOCH);
        for (int i = 0; i < n; i++) {
            byte[] key = rnd.nextInt(4) == 0 ? null : ("k" + rnd.nextInt(1000)).getBytes(StandardCharsets.UTF_8);
            byte[] value = new byte[rnd.nextInt(300)];
            for (int j = 0; j < value.length; j++) value[j] = (byte) ('a' + rnd.nextInt(rnd.nextBoolean() ? 3 : 26));
            Header[] headers = rnd.nextInt(5) == 0
                    ? new Header[] {new RecordHeader("h" + rnd.nextInt(3), "v".getBytes(StandardCharsets.UTF_8))}
                    : new Header[0];
            b.appendWithOffset(baseOffset + i, ts, key, value, headers);
        }
        return b.build();
    }

    /**
     * Kafka's append path: UnifiedLog.appendAsLeader of BATCHES batches of RECORDS records (null key, VALUE_BYTES
     * random bytes, uncompressed, no producer id) into a new partition DIR, after WARMUP batches appended to a
     * scratch partition (JIT). Batches are built before the clock starts and cycled from a pool of 1024; only the
     * appends are timed (validation, offset assignment, segment and index writes, producer state), not the final
     * flush.
     */
    static void benchWrite(String[] a) throws Exception {
        File dir = new File(a[0]);
        int batches = Integer.parseInt(a[1]);
        int recordsPer = Integer.parseInt(a[2]);
        int valueBytes = Integer.parseInt(a[3]);
        int segmentBytes = Integer.parseInt(a[4]);
        int warmup = a.length > 5 ? Integer.parseInt(a[5]) : 0;
        // With PRODUCERS > 0, batch i comes from idempotent producer i % PRODUCERS (Kafka's
        // default producer since 3.0): producer ids 1000.., epoch 0, sequences as a producer
        // numbers them, checked by the log's producer state on every append.
        int producers = a.length > 6 ? Integer.parseInt(a[6]) : 0;
        Random rnd = new Random(7);
        long ts = System.currentTimeMillis();
        List<MemoryRecords> pool = batchPool(rnd, 1024, recordsPer, valueBytes, ts);
        KafkaScheduler scheduler = scheduler();
        BrokerTopicStats stats = new BrokerTopicStats();
        if (warmup > 0) {
            File scratch = new File(dir.getParentFile(), "warmup-" + dir.getName());
            Files.createDirectories(scratch.toPath());
            UnifiedLog w = open(scratch, true, scheduler, stats, segmentBytes);
            for (int i = 0; i < warmup; i++) w.appendAsLeader(reset(pool.get(i % pool.size())), 0, AppendOrigin.CLIENT);
            w.close();
            try (var paths = Files.walk(scratch.toPath())) {
                paths.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
            }
        }
        Files.createDirectories(dir.toPath());
        UnifiedLog log = open(dir, true, scheduler, stats, segmentBytes);
        // The idempotent producers' values and batch buffer, made before the clock starts.
        int[] sequences = new int[Math.max(producers, 1)];
        List<byte[]> values = new ArrayList<>(1024);
        for (int i = 0; producers > 0 && i < 1024; i++) {
            byte[] value = new byte[valueBytes];
            rnd.nextBytes(value);
            values.add(value);
        }
        java.nio.ByteBuffer scratchBuf = java.nio.ByteBuffer.allocate(recordsPer * (valueBytes + 64) + 128);
        long bytes = 0;
        long t0 = System.nanoTime();
        for (int i = 0; i < batches; i++) {
            MemoryRecords m;
            if (producers > 0) {
                int p = i % producers;
                scratchBuf.clear();
                MemoryRecordsBuilder b = MemoryRecords.builder(scratchBuf, RecordBatch.CURRENT_MAGIC_VALUE,
                        Compression.NONE, TimestampType.CREATE_TIME, 0L, ts, 1000L + p, (short) 0, sequences[p],
                        false, RecordBatch.NO_PARTITION_LEADER_EPOCH);
                for (int r = 0; r < recordsPer; r++) b.append(ts + i, null, values.get((i + r) % values.size()));
                sequences[p] += recordsPer;
                m = b.build();
            } else {
                // appendAsLeader assigns offsets in place; a pooled batch goes back to base offset 0.
                m = reset(pool.get(i % pool.size()));
            }
            bytes += m.sizeInBytes();
            log.appendAsLeader(m, 0, AppendOrigin.CLIENT);
        }
        double secs = (System.nanoTime() - t0) / 1e9;
        log.flush(false);
        log.close();
        scheduler.shutdown();
        OUT.println("{\"bytes\":" + bytes + ",\"batches\":" + batches + ",\"seconds\":" + String.format("%.4f", secs) + "}");
    }

    /**
     * UnifiedLog.appendAsLeader (leader epoch 0, client origin) of every batch of FILE (concatenated v2 batches,
     * read once; each batch in a heap buffer of its own, as a produce request's records), once per stdin line: the
     * line names a new partition DIR, opened as an empty log (segment.bytes SEGMENT_BYTES), appended to, closed.
     * Prints "ready" once FILE is read, then per pass the appends' thread CPU time (ThreadMXBean, this thread
     * only), process CPU time (every JVM thread: JIT, GC, the scheduler) and wall time, in nanoseconds; the close
     * is not timed. appendAsLeader assigns offsets in place; each pass first sets every base offset back to 0 (not
     * timed), so every pass appends the same bytes. JIT warm-up is the caller's: it discards its first passes.
     */
    static void benchAppend(String[] a) throws Exception {
        byte[] all = Files.readAllBytes(Path.of(a[0]));
        int segmentBytes = Integer.parseInt(a[1]);
        List<MemoryRecords> batches = new ArrayList<>();
        java.nio.ByteBuffer whole = java.nio.ByteBuffer.wrap(all);
        // A v2 batch: baseOffset (8 bytes), then its length (4), counted from after the length field.
        for (int pos = 0; pos + 12 <= all.length; ) {
            int size = 12 + whole.getInt(pos + 8);
            batches.add(MemoryRecords.readableRecords(java.nio.ByteBuffer.wrap(Arrays.copyOfRange(all, pos, pos + size))));
            pos += size;
        }
        long bytes = all.length;
        all = null;
        java.lang.management.ThreadMXBean threads = java.lang.management.ManagementFactory.getThreadMXBean();
        com.sun.management.OperatingSystemMXBean os = (com.sun.management.OperatingSystemMXBean)
                java.lang.management.ManagementFactory.getOperatingSystemMXBean();
        KafkaScheduler scheduler = scheduler();
        BrokerTopicStats stats = new BrokerTopicStats();
        OUT.println("{\"ready\":true,\"batches\":" + batches.size() + ",\"bytes\":" + bytes + "}");
        OUT.flush();
        java.io.BufferedReader in = new java.io.BufferedReader(new java.io.InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null && !line.isBlank(); ) {
            File dir = new File(line.trim());
            Files.createDirectories(dir.toPath());
            UnifiedLog log = open(dir, true, scheduler, stats, segmentBytes);
            // The previous pass assigned offsets in place; a leader append takes base offset 0.
            for (MemoryRecords m : batches) reset(m);
            long cpu0 = threads.getCurrentThreadCpuTime();
            long proc0 = os.getProcessCpuTime();
            long t0 = System.nanoTime();
            for (MemoryRecords m : batches) log.appendAsLeader(m, 0, AppendOrigin.CLIENT);
            long wall = System.nanoTime() - t0;
            long proc = os.getProcessCpuTime() - proc0;
            long cpu = threads.getCurrentThreadCpuTime() - cpu0;
            long leo = log.logEndOffset();
            log.close();
            OUT.println("{\"dir\":" + q(dir.getPath()) + ",\"batches\":" + batches.size() + ",\"log_end_offset\":" + leo
                    + ",\"thread_cpu_ns\":" + cpu + ",\"process_cpu_ns\":" + proc + ",\"wall_ns\":" + wall + "}");
            OUT.flush();
        }
        scheduler.shutdown();
    }

    /**
     * COUNT uncompressed batches of RECORDS records each (null key, VALUE_BYTES random bytes, no producer id),
     * batch i timestamped TS + i.
     */
    static List<MemoryRecords> batchPool(Random rnd, int count, int records, int valueBytes, long ts) {
        List<MemoryRecords> pool = new ArrayList<>(count);
        for (int i = 0; i < count; i++) {
            java.nio.ByteBuffer buf = java.nio.ByteBuffer.allocate(records * (valueBytes + 64) + 128);
            MemoryRecordsBuilder b = MemoryRecords.builder(buf, Compression.NONE, TimestampType.CREATE_TIME, 0L);
            for (int r = 0; r < records; r++) {
                byte[] value = new byte[valueBytes];
                rnd.nextBytes(value);
                b.append(ts + i, null, value);
            }
            pool.add(b.build());
        }
        return pool;
    }

    static MemoryRecords reset(MemoryRecords m) {
        for (org.apache.kafka.common.record.internal.MutableRecordBatch b : m.batches()) {
            b.setLastOffset(b.lastOffset() - b.baseOffset());
        }
        return m;
    }

    /** Recovers every DIR from its first segment (as after an unclean shutdown with no recovery point), ITERATIONS times. */
    static void benchRecover(String[] a) throws Exception {
        int iterations = Integer.parseInt(a[0]);
        int threads = Integer.parseInt(a[1]);
        List<File> dirs = new ArrayList<>();
        for (int i = 2; i < a.length; i++) {
            File d = new File(a[i]);
            File[] subs = d.listFiles(File::isDirectory);
            // A log directory: its partition directories.
            if (subs != null && subs.length > 0 && new File(d, "meta.properties").exists() == false
                    && !Arrays.stream(d.listFiles()).anyMatch(f -> f.getName().endsWith(".log"))) {
                Arrays.sort(subs);
                dirs.addAll(Arrays.asList(subs));
            } else {
                dirs.add(d);
            }
        }
        KafkaScheduler scheduler = scheduler();
        BrokerTopicStats stats = new BrokerTopicStats();
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        for (int it = 0; it < iterations; it++) {
            // Kafka rebuilds producer state from snapshots; remove them so every run does the same work
            // (seglog's --full run is timed on the same files).
            for (File d : dirs) {
                File[] snaps = d.listFiles((x, n) -> n.endsWith(".snapshot"));
                if (snaps != null) for (File s : snaps) Files.delete(s.toPath());
            }
            long t0 = System.nanoTime();
            List<Future<Long>> fs = new ArrayList<>();
            for (File d : dirs) {
                fs.add(pool.submit(() -> {
                    UnifiedLog log = open(d, true, scheduler, stats, null);
                    long leo = log.logEndOffset();
                    log.close();
                    return leo;
                }));
            }
            long total = 0;
            for (Future<Long> f : fs) total += f.get();
            double secs = (System.nanoTime() - t0) / 1e9;
            OUT.println("{\"iteration\":" + it + ",\"partitions\":" + dirs.size() + ",\"log_end_offsets\":" + total
                    + ",\"seconds\":" + String.format("%.4f", secs) + "}");
            OUT.flush();
        }
        pool.shutdown();
        scheduler.shutdown();
    }

    /** For each hex line on stdin: what DumpLogSegments' StringDecoder makes of the bytes, as UTF-8 hex. */
    static void utf8() throws IOException {
        java.io.BufferedReader in = new java.io.BufferedReader(new java.io.InputStreamReader(System.in, StandardCharsets.US_ASCII));
        org.apache.kafka.tools.api.StringDecoder d = new org.apache.kafka.tools.api.StringDecoder();
        for (String line; (line = in.readLine()) != null; ) {
            byte[] b = new byte[line.length() / 2];
            for (int i = 0; i < b.length; i++) b[i] = (byte) Integer.parseInt(line.substring(2 * i, 2 * i + 2), 16);
            OUT.println(hex(d.fromBytes(b).getBytes(StandardCharsets.UTF_8)));
        }
    }

    // ---------------------------------------------------------------- clients

    static Properties clientProps(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        p.put("request.timeout.ms", "20000");
        p.put("delivery.timeout.ms", "60000");
        p.put("max.block.ms", "30000");
        p.put("default.api.timeout.ms", "30000");
        return p;
    }

    static void createTopic(String[] a) throws Exception {
        Properties p = clientProps(a[0]);
        Map<String, String> configs = new HashMap<>();
        for (int i = 3; i < a.length; i++) {
            String[] kv = a[i].split("=", 2);
            configs.put(kv[0], kv[1]);
        }
        try (Admin admin = Admin.create(p)) {
            admin.createTopics(List.of(new NewTopic(a[1], Integer.parseInt(a[2]), (short) 1).configs(configs)))
                    .all().get(60, java.util.concurrent.TimeUnit.SECONDS);
        }
        OUT.println("{\"created\":" + q(a[1]) + "}");
    }

    static String recordJson(int partition, long offset, byte[] key, byte[] value, Iterable<Header> headers, boolean aborted) {
        StringBuilder h = new StringBuilder("[");
        for (Header x : headers) {
            if (h.length() > 1) h.append(',');
            h.append("[").append(q(x.key())).append(',').append(x.value() == null ? "null" : q(hex(x.value()))).append("]");
        }
        h.append(']');
        return "{\"partition\":" + partition + ",\"offset\":" + offset + ",\"key\":" + (key == null ? "null" : q(hex(key)))
                + ",\"value_len\":" + (value == null ? -1 : value.length) + ",\"value_crc\":" + crc(value)
                + ",\"headers\":" + h + (aborted ? ",\"aborted\":true" : "") + "}";
    }

    static long crc(byte[] v) {
        if (v == null) return -1;
        CRC32 c = new CRC32();
        c.update(v);
        return c.getValue();
    }

    static String hex(byte[] b) {
        StringBuilder sb = new StringBuilder();
        for (byte x : b) sb.append(String.format("%02x", x));
        return sb.toString();
    }

    static byte[] value(Random rnd, int len) {
        byte[] v = new byte[len];
        rnd.nextBytes(v);
        return v;
    }

    /**
     * Partitions of TOPIC (8 of them): 0 plain (acks=1, no idempotence; null keys, headers), 1 gzip, 2 snappy,
     * 3 lz4, 4 zstd, 5 idempotent, 6 transactional (commits and aborts), 7 a 1 MiB value among small ones.
     * Each record that was acked is printed (aborted ones marked "aborted"), in partition and offset order.
     */
    static void produceMix(String[] a) throws Exception {
        String bootstrap = a[0];
        String topic = a[1];
        Random rnd = new Random(13);
        List<String> out = Collections.synchronizedList(new ArrayList<>());
        String[] codecs = {"none", "gzip", "snappy", "lz4", "zstd"};
        for (int part = 0; part < 5; part++) {
            Properties p = clientProps(bootstrap);
            p.put("enable.idempotence", "false");
            p.put("acks", "1");
            p.put("compression.type", codecs[part]);
            p.put("linger.ms", "5");
            p.put("batch.size", "65536");
            p.put("max.request.size", "4194304");
            try (KafkaProducer<byte[], byte[]> prod = new KafkaProducer<>(p)) {
                List<Future<RecordMetadata>> fs = new ArrayList<>();
                List<ProducerRecord<byte[], byte[]>> recs = new ArrayList<>();
                for (int i = 0; i < 500; i++) {
                    byte[] key = i % 5 == 0 ? null : ("key-" + i).getBytes(StandardCharsets.UTF_8);
                    List<Header> hs = new ArrayList<>();
                    if (i % 3 == 0) hs.add(new RecordHeader("h" + (i % 4), ("hv" + i).getBytes(StandardCharsets.UTF_8)));
                    if (i % 7 == 0) hs.add(new RecordHeader("null-header", null));
                    ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(topic, part, null, key, value(rnd, 3000 + rnd.nextInt(2000)), hs);
                    recs.add(r);
                    fs.add(prod.send(r));
                }
                prod.flush();
                for (int i = 0; i < fs.size(); i++) {
                    RecordMetadata m = fs.get(i).get();
                    ProducerRecord<byte[], byte[]> r = recs.get(i);
                    out.add(recordJson(part, m.offset(), r.key(), r.value(), r.headers(), false));
                }
            }
        }
        // 5: idempotent; 7: one 1 MiB value between small ones.
        Properties p = clientProps(bootstrap);
        p.put("enable.idempotence", "true");
        p.put("acks", "all");
        p.put("max.request.size", "4194304");
        p.put("linger.ms", "5");
        try (KafkaProducer<byte[], byte[]> prod = new KafkaProducer<>(p)) {
            for (int part : new int[] {5, 7}) {
                List<Future<RecordMetadata>> fs = new ArrayList<>();
                List<ProducerRecord<byte[], byte[]>> recs = new ArrayList<>();
                int n = part == 5 ? 600 : 7;
                for (int i = 0; i < n; i++) {
                    int len = part == 7 && i == 3 ? 1024 * 1024 : 2500;
                    ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(topic, part, ("k" + i).getBytes(StandardCharsets.UTF_8), value(rnd, len));
                    recs.add(r);
                    fs.add(prod.send(r));
                }
                prod.flush();
                for (int i = 0; i < fs.size(); i++) {
                    RecordMetadata m = fs.get(i).get();
                    ProducerRecord<byte[], byte[]> r = recs.get(i);
                    out.add(recordJson(part, m.offset(), r.key(), r.value(), r.headers(), false));
                }
            }
        }
        // 6: transactions, alternately committed and aborted.
        Properties t = clientProps(bootstrap);
        t.put("transactional.id", "seglog-interop-txn");
        t.put("transaction.timeout.ms", "60000");
        try (KafkaProducer<byte[], byte[]> prod = new KafkaProducer<>(t)) {
            prod.initTransactions();
            for (int txn = 0; txn < 12; txn++) {
                prod.beginTransaction();
                List<Future<RecordMetadata>> fs = new ArrayList<>();
                List<ProducerRecord<byte[], byte[]>> recs = new ArrayList<>();
                for (int i = 0; i < 40; i++) {
                    ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(topic, 6, ("t" + txn + "-" + i).getBytes(StandardCharsets.UTF_8), value(rnd, 3000));
                    recs.add(r);
                    fs.add(prod.send(r));
                }
                prod.flush();
                boolean abort = txn % 3 == 1;
                if (abort) prod.abortTransaction();
                else prod.commitTransaction();
                for (int i = 0; i < fs.size(); i++) {
                    RecordMetadata m = fs.get(i).get();
                    ProducerRecord<byte[], byte[]> r = recs.get(i);
                    out.add(recordJson(6, m.offset(), r.key(), r.value(), r.headers(), abort));
                }
            }
        }
        for (String s : out) OUT.println(s);
    }

    /**
     * Keyed records for partition 0 of a compacted TOPIC (issue 31): rounds of an idempotent lz4 producer (60 keys,
     * one value in 8 a tombstone) and of a transactional producer (every third transaction aborted), random 1-2 KiB
     * values. Each acked record is printed (aborted ones marked "aborted").
     */
    static void produceCompacted(String[] a) throws Exception {
        String bootstrap = a[0];
        String topic = a[1];
        int rounds = Integer.parseInt(a[2]);
        Random rnd = new Random(31);
        List<String> out = new ArrayList<>();
        Properties p = clientProps(bootstrap);
        p.put("enable.idempotence", "true");
        p.put("acks", "all");
        p.put("compression.type", "lz4");
        p.put("linger.ms", "5");
        Properties t = clientProps(bootstrap);
        t.put("transactional.id", "seglog-interop-compacted");
        t.put("transaction.timeout.ms", "60000");
        try (KafkaProducer<byte[], byte[]> idem = new KafkaProducer<>(p); KafkaProducer<byte[], byte[]> txn = new KafkaProducer<>(t)) {
            txn.initTransactions();
            for (int round = 0; round < rounds; round++) {
                for (int pass = 0; pass < 2; pass++) {
                    boolean transactional = pass == 1;
                    KafkaProducer<byte[], byte[]> prod = transactional ? txn : idem;
                    boolean abort = transactional && round % 3 == 1;
                    if (transactional) prod.beginTransaction();
                    List<Future<RecordMetadata>> fs = new ArrayList<>();
                    List<ProducerRecord<byte[], byte[]>> recs = new ArrayList<>();
                    for (int i = 0; i < (transactional ? 30 : 60); i++) {
                        byte[] key = ("key-" + rnd.nextInt(60)).getBytes(StandardCharsets.UTF_8);
                        byte[] v = rnd.nextInt(8) == 0 ? null : value(rnd, 1024 + rnd.nextInt(1024));
                        ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(topic, 0, key, v);
                        recs.add(r);
                        fs.add(prod.send(r));
                    }
                    prod.flush();
                    if (abort) prod.abortTransaction();
                    else if (transactional) prod.commitTransaction();
                    for (int i = 0; i < fs.size(); i++) {
                        RecordMetadata m = fs.get(i).get();
                        ProducerRecord<byte[], byte[]> r = recs.get(i);
                        out.add(recordJson(0, m.offset(), r.key(), r.value(), r.headers(), abort));
                    }
                }
            }
        }
        for (String s : out) OUT.println(s);
    }

    /** Produces to every partition until killed; prints each acked offset (partition, offset) as it comes. */
    static void produceLoop(String[] a) throws Exception {
        String bootstrap = a[0];
        String topic = a[1];
        int partitions = Integer.parseInt(a[2]);
        Properties p = clientProps(bootstrap);
        p.put("enable.idempotence", "true");
        p.put("acks", "all");
        p.put("linger.ms", "2");
        p.put("compression.type", "lz4");
        p.put("delivery.timeout.ms", "5000");
        p.put("request.timeout.ms", "3000");
        p.put("max.block.ms", "3000");
        p.put("retries", "1");
        Random rnd = new Random(5);
        try (KafkaProducer<byte[], byte[]> prod = new KafkaProducer<>(p)) {
            for (long i = 0; ; i++) {
                int part = (int) (i % partitions);
                prod.send(new ProducerRecord<>(topic, part, ("k" + i).getBytes(StandardCharsets.UTF_8), value(rnd, 200 + rnd.nextInt(800))),
                        (m, e) -> {
                            if (e == null) {
                                synchronized (OUT) {
                                    OUT.println("{\"partition\":" + m.partition() + ",\"offset\":" + m.offset() + "}");
                                    OUT.flush();
                                }
                            }
                        });
            }
        }
    }

    static void consume(String[] a) throws Exception {
        String bootstrap = a[0];
        String topic = a[1];
        int partitions = Integer.parseInt(a[2]);
        String isolation = a[3];
        Properties p = clientProps(bootstrap);
        p.put("isolation.level", isolation);
        p.put("enable.auto.commit", "false");
        // A group, so the offsets committed at the end go to __consumer_offsets (dumped by the tests).
        p.put("group.id", "seglog-interop-" + topic + "-" + isolation);
        p.put("max.partition.fetch.bytes", "4194304");
        p.put("fetch.max.bytes", "8388608");
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int i = 0; i < partitions; i++) tps.add(new TopicPartition(topic, i));
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps, Duration.ofSeconds(30));
            Map<Integer, List<String>> byPart = new HashMap<>();
            long deadline = System.currentTimeMillis() + 60000;
            while (true) {
                boolean done = true;
                for (TopicPartition tp : tps) if (c.position(tp, Duration.ofSeconds(30)) < end.get(tp)) done = false;
                if (done) break;
                if (System.currentTimeMillis() > deadline) {
                    System.err.println("consume: timed out before the end offsets " + end);
                    System.exit(1);
                }
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(500))) {
                    byPart.computeIfAbsent(r.partition(), k -> new ArrayList<>())
                            .add(recordJson(r.partition(), r.offset(), r.key(), r.value(), r.headers(), false));
                }
            }
            c.commitSync(Duration.ofSeconds(30));
            for (int i = 0; i < partitions; i++) for (String s : byPart.getOrDefault(i, List.of())) OUT.println(s);
            for (TopicPartition tp : tps) System.err.println("end " + tp + " " + end.get(tp));
        }
    }
}
