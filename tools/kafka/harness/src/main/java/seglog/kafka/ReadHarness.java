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
