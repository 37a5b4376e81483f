package seglog.kafka;

import java.io.BufferedReader;
import java.io.File;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.zip.CRC32;

import org.apache.kafka.common.message.FetchResponseData;
import org.apache.kafka.common.record.internal.FileRecords;
import org.apache.kafka.common.record.internal.MemoryRecords;
import org.apache.kafka.common.record.internal.Records;
import org.apache.kafka.server.storage.log.FetchIsolation;
import org.apache.kafka.server.util.KafkaScheduler;
import org.apache.kafka.storage.internals.log.FetchDataInfo;
import org.apache.kafka.storage.internals.log.UnifiedLog;
import org.apache.kafka.storage.log.metrics.BrokerTopicStats;

/**
 * Kafka's own read path as an oracle: `read DIR HW REQUESTS`, one request a line in the file REQUESTS,
 * `OFFSET MAX_BYTES ISOLATION MIN_ONE` (ISOLATION: `log_end`, `high_watermark`, `txn_committed`;
 * MIN_ONE: 0 or 1). The partition is loaded as a broker loads it, its high watermark set to HW
 * (-1: the log end offset), and each request answered by `UnifiedLog.read`: one JSON line with the
 * length and CRC-32 of the bytes returned, the fetch offset metadata, `firstEntryIncomplete`, and
 * the aborted transactions (null when not asked for), or the exception's class.
 */
final class ReadHarness {
    private static final PrintStream OUT = System.out;

    private ReadHarness() {}

    static void read(String[] a) throws Exception {
        File dir = new File(a[0]);
        long hw = Long.parseLong(a[1]);
        KafkaScheduler scheduler = Harness.scheduler();
        UnifiedLog log = Harness.open(dir, false, scheduler, new BrokerTopicStats(), null);
        log.updateHighWatermark(hw < 0 ? log.logEndOffset() : hw);
        OUT.println("{\"log_start_offset\":" + log.logStartOffset() + ",\"log_end_offset\":" + log.logEndOffset()
                + ",\"high_watermark\":" + log.highWatermark() + ",\"last_stable_offset\":" + log.lastStableOffset() + "}");
        BufferedReader in = java.nio.file.Files.newBufferedReader(new File(a[2]).toPath(), StandardCharsets.UTF_8);
        String line;
        while ((line = in.readLine()) != null) {
            String[] p = line.trim().split(" ");
            if (p.length == 2 && p[0].equals("ts")) {
                // ListOffsets: UnifiedLog.fetchOffsetByTimestamp.
                java.util.Optional<org.apache.kafka.common.record.internal.FileRecords.TimestampAndOffset> r =
                        log.fetchOffsetByTimestamp(Long.parseLong(p[1]), java.util.Optional.empty()).timestampAndOffsetOpt();
                OUT.println(r.map(t -> "{\"timestamp\":" + t.timestamp + ",\"offset\":" + t.offset + ",\"epoch\":"
                        + (t.leaderEpoch.isPresent() ? t.leaderEpoch.get().toString() : "null") + "}").orElse("{\"none\":true}"));
                continue;
            }
            if (p.length == 2 && p[0].equals("epoch")) {
                // OffsetsForLeaderEpoch: UnifiedLog.endOffsetForEpoch.
                java.util.Optional<org.apache.kafka.server.common.OffsetAndEpoch> r = log.endOffsetForEpoch(Integer.parseInt(p[1]));
                OUT.println(r.map(o -> "{\"epoch\":" + o.epoch() + ",\"offset\":" + o.offset() + "}").orElse("{\"none\":true}"));
                continue;
            }
            if (p.length < 4) continue;
            long offset = Long.parseLong(p[0]);
            int maxBytes = Integer.parseInt(p[1]);
            FetchIsolation iso = switch (p[2]) {
                case "log_end" -> FetchIsolation.LOG_END;
                case "high_watermark" -> FetchIsolation.HIGH_WATERMARK;
                default -> FetchIsolation.TXN_COMMITTED;
            };
            boolean minOne = p[3].equals("1");
            try {
                FetchDataInfo info = log.read(offset, maxBytes, iso, minOne);
                byte[] bytes = bytes(info.records);
                CRC32 crc = new CRC32();
                crc.update(bytes);
                StringBuilder sb = new StringBuilder("{\"len\":").append(bytes.length)
                        .append(",\"crc\":").append(crc.getValue())
                        .append(",\"offset\":").append(info.fetchOffsetMetadata.messageOffset)
                        .append(",\"incomplete\":").append(info.firstEntryIncomplete)
                        .append(",\"aborted\":");
                if (info.abortedTransactions.isPresent()) {
                    List<String> ab = new ArrayList<>();
                    for (FetchResponseData.AbortedTransaction t : info.abortedTransactions.get()) {
                        ab.add("[" + t.producerId() + "," + t.firstOffset() + "]");
                    }
                    sb.append("[").append(String.join(",", ab)).append("]");
                } else {
                    sb.append("null");
                }
                OUT.println(sb.append("}"));
            } catch (Exception e) {
                OUT.println("{\"error\":" + Harness.q(e.getClass().getSimpleName()) + "}");
            }
        }
        OUT.flush();
        log.close();
        scheduler.shutdown();
    }

    /**
     * `bench-read DIR HW REQUESTS WARMUP TIMED`: Kafka's read path timed inside the JVM, for
     * `benches/kafka_reads.rs`. REQUESTS holds one `OFFSET MAX_BYTES ISOLATION` a line (the same
     * random sequence seglog is timed on); the partition is loaded as a broker loads it and its
     * high watermark set to HW (-1: the log end offset). Every request is answered by
     * `UnifiedLog.read` with `minOneMessage` true. WARMUP untimed passes over the requests, then
     * TIMED passes alternating two ways of taking the answer, each pass timed and printed as one
     * JSON line: `copy` reads the returned bytes into a reused direct buffer (seglog's fetch returns
     * them copied into a buffer of its own), `slice` stops at the `FileRecords` slice `read`
     * returns (what a broker hands to `sendfile`: no byte of the log is read).
     */
    static void benchRead(String[] a) throws Exception {
        File dir = new File(a[0]);
        long hw = Long.parseLong(a[1]);
        int warmup = Integer.parseInt(a[3]);
        int timed = Integer.parseInt(a[4]);
        KafkaScheduler scheduler = Harness.scheduler();
        UnifiedLog log = Harness.open(dir, false, scheduler, new BrokerTopicStats(), null);
        log.updateHighWatermark(hw < 0 ? log.logEndOffset() : hw);
        List<String> lines = java.nio.file.Files.readAllLines(new File(a[2]).toPath(), StandardCharsets.UTF_8);
        int n = lines.size();
        long[] offsets = new long[n];
        int[] maxBytes = new int[n];
        FetchIsolation[] isolations = new FetchIsolation[n];
        int largest = 0;
        for (int i = 0; i < n; i++) {
            String[] p = lines.get(i).trim().split(" ");
            offsets[i] = Long.parseLong(p[0]);
            maxBytes[i] = Integer.parseInt(p[1]);
            largest = Math.max(largest, maxBytes[i]);
            isolations[i] = switch (p[2]) {
                case "log_end" -> FetchIsolation.LOG_END;
                case "high_watermark" -> FetchIsolation.HIGH_WATERMARK;
                default -> FetchIsolation.TXN_COMMITTED;
            };
        }
        // A direct buffer: `FileChannel.read` fills it in one copy out of the page cache (into a
        // heap buffer the JDK copies twice, through a temporary direct one). minOneMessage may
        // return one batch above MAX_BYTES: room for the largest batch too.
        ByteBuffer buf = ByteBuffer.allocateDirect(largest + (4 << 20));
        for (int pass = 0; pass < warmup + timed; pass++) {
            boolean copy = pass < warmup || (pass - warmup) % 2 == 0;
            long bytes = 0;
            long t0 = System.nanoTime();
            for (int i = 0; i < n; i++) {
                FetchDataInfo info = log.read(offsets[i], maxBytes[i], isolations[i], true);
                int size = info.records.sizeInBytes();
                if (copy && size > 0) {
                    buf.clear();
                    buf.limit(size);
                    if (info.records instanceof FileRecords f) {
                        f.readInto(buf, 0);
                    } else if (info.records instanceof MemoryRecords m) {
                        buf.put(m.buffer().duplicate());
                    }
                }
                bytes += size;
            }
            long nanos = System.nanoTime() - t0;
            if (pass >= warmup) {
                OUT.println("{\"mode\":\"" + (copy ? "copy" : "slice") + "\",\"seconds\":" + (nanos / 1e9)
                        + ",\"fetches\":" + n + ",\"bytes\":" + bytes + "}");
            }
        }
        OUT.flush();
        log.close();
        scheduler.shutdown();
    }

    /**
     * `bench-read-writer DIR READERS ROUNDS SECONDS FLUSH_EVERY [copy|slice] [RATE]`: Kafka's read path beside Kafka's own
     * writer, for `benches/kafka_reads.rs`. The partition is loaded as a broker loads it, its high
     * watermark at the log end. One untimed warm-up round with the writer, then 2 * ROUNDS rounds of
     * SECONDS each, alternating with and without the writer, each printed as one JSON line. In a round
     * READERS threads each fetch in a loop: `UnifiedLog.read` at an offset drawn uniformly from
     * [log start, high watermark), 1 MiB at most, `HIGH_WATERMARK`, `minOneMessage`, the bytes read
     * into the thread's reused direct buffer (the `copy` of `bench-read`; with `slice`, the `FileRecords`
     * slice kept and no byte read, what a broker hands to `sendfile`). The writer appends batches of
     * 10 records of 100 random bytes with `appendAsLeader` (leader epoch 0, client origin), and every
     * FLUSH_EVERY appends flushes and moves the high watermark to the flushed log end (seglog's default
     * high-watermark policy). With RATE above 0 the writer keeps to RATE appends per second (it waits
     * after a flush until its appends are due), as fast as it can otherwise.
     */
    static void benchReadWriter(String[] a) throws Exception {
        File dir = new File(a[0]);
        int readers = Integer.parseInt(a[1]);
        int rounds = Integer.parseInt(a[2]);
        double seconds = Double.parseDouble(a[3]);
        int flushEvery = Integer.parseInt(a[4]);
        boolean copy = a.length < 6 || !a[5].equals("slice");
        double rate = a.length < 7 ? 0 : Double.parseDouble(a[6]);
        KafkaScheduler scheduler = Harness.scheduler();
        UnifiedLog log = Harness.open(dir, false, scheduler, new BrokerTopicStats(), null);
        log.updateHighWatermark(log.logEndOffset());
        List<MemoryRecords> pool = Harness.batchPool(new java.util.Random(7), 256, 10, 100, System.currentTimeMillis());
        for (int round = -1; round < 2 * rounds; round++) {
            boolean writing = round < 0 || round % 2 == 0;
            java.util.concurrent.atomic.AtomicBoolean stop = new java.util.concurrent.atomic.AtomicBoolean();
            java.util.concurrent.atomic.AtomicLong appends = new java.util.concurrent.atomic.AtomicLong();
            java.util.concurrent.atomic.AtomicReference<Throwable> failed = new java.util.concurrent.atomic.AtomicReference<>();
            Thread writer = new Thread(() -> {
                try {
                    long started = System.nanoTime();
                    long n = 0;
                    while (!stop.get()) {
                        log.appendAsLeader(Harness.reset(pool.get((int) (n % pool.size()))), 0,
                                org.apache.kafka.storage.internals.log.AppendOrigin.CLIENT);
                        n++;
                        if (n % flushEvery == 0) {
                            log.flush(false);
                            log.updateHighWatermark(log.logEndOffset());
                            if (rate > 0) {
                                long wait = started + (long) (n / rate * 1e9) - System.nanoTime();
                                if (wait > 0) java.util.concurrent.locks.LockSupport.parkNanos(wait);
                            }
                        }
                    }
                    appends.set(n);
                } catch (Throwable t) {
                    failed.set(t);
                }
            });
            long[] fetches = new long[readers];
            long[] bytes = new long[readers];
            Thread[] threads = new Thread[readers];
            long deadline = System.nanoTime() + (long) (seconds * 1e9);
            for (int r = 0; r < readers; r++) {
                final int me = r;
                threads[r] = new Thread(() -> {
                    try {
                        ByteBuffer buf = ByteBuffer.allocateDirect(4 << 20);
                        java.util.concurrent.ThreadLocalRandom random = java.util.concurrent.ThreadLocalRandom.current();
                        while (System.nanoTime() < deadline) {
                            long start = log.logStartOffset();
                            long hw = log.highWatermark();
                            long offset = start + random.nextLong(Math.max(1, hw - start));
                            FetchDataInfo info = log.read(offset, 1 << 20, FetchIsolation.HIGH_WATERMARK, true);
                            int size = info.records.sizeInBytes();
                            if (copy && size > 0 && info.records instanceof FileRecords f) {
                                buf.clear();
                                buf.limit(Math.min(size, buf.capacity()));
                                f.readInto(buf, 0);
                            }
                            fetches[me]++;
                            bytes[me] += size;
                        }
                    } catch (Throwable t) {
                        failed.set(t);
                    }
                });
            }
            if (writing) writer.start();
            long t0 = System.nanoTime();
            for (Thread t : threads) t.start();
            for (Thread t : threads) t.join();
            double secs = (System.nanoTime() - t0) / 1e9;
            stop.set(true);
            if (writing) writer.join();
            if (failed.get() != null) throw new RuntimeException(failed.get());
            if (round < 0) continue;
            long f = 0, b = 0;
            for (int r = 0; r < readers; r++) {
                f += fetches[r];
                b += bytes[r];
            }
            OUT.println("{\"writer\":" + writing + ",\"readers\":" + readers + ",\"fetches\":" + f + ",\"bytes\":" + b
                    + ",\"seconds\":" + secs + ",\"appends\":" + appends.get() + "}");
        }
        OUT.flush();
        log.close();
        scheduler.shutdown();
    }

    private static byte[] bytes(Records records) throws java.io.IOException {
        int n = records.sizeInBytes();
        ByteBuffer buf = ByteBuffer.allocate(n);
        if (records instanceof FileRecords f) {
            f.readInto(buf, 0);
        } else if (records instanceof MemoryRecords m) {
            buf.put(m.buffer().duplicate());
        }
        return buf.array();
    }
}
