package seglog.kafka;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.util.Iterator;

import org.apache.kafka.common.record.internal.MemoryRecords;
import org.apache.kafka.common.record.internal.MutableRecordBatch;
import org.apache.kafka.common.record.internal.Record;
import org.apache.kafka.common.record.internal.RecordBatch;
import org.apache.kafka.common.utils.BufferSupplier;
import org.apache.kafka.common.utils.CloseableIterator;

/**
 * Kafka's verdict on many inputs, for seglog's differential fuzzing (tests/kafka_interop.rs).
 *
 * <pre>
 * java -Xmx64m -cp ... seglog.kafka.BatchVerdicts &lt; frames
 * </pre>
 *
 * stdin: frames, each a big-endian u32 length and that many bytes (one input: a batch with its
 * 12-byte log overhead, possibly mutated). stdout: one line per input, in order,
 * {@code STAGE CLASS COUNT HASH}:
 * <ul>
 * <li>{@code none - 0 0}: MemoryRecords.batches() yields no batch (fewer bytes than the batch says);</li>
 * <li>{@code frame CLASS 0 0}: the batch iterator itself threw;</li>
 * <li>{@code valid CLASS 0 0}: {@code ensureValid()} threw (size, CRC);</li>
 * <li>{@code records CLASS N H}: iterating the records ({@code streamingIterator}) threw after N records (offsets hashed into H);</li>
 * <li>{@code ok - N H}: N records decoded, H the hash of their offsets ({@code h = h * 31 + offset});</li>
 * <li>{@code legacy CLASS 0 0} / {@code legacy - 0 0}: a magic 0/1 entry, ensureValid's outcome only.</li>
 * </ul>
 * CLASS is the simple name of the Throwable's class (OutOfMemoryError included: the heap is capped).
 */
public final class BatchVerdicts {
    private BatchVerdicts() {}

    public static void main(String[] args) throws Exception {
        DataInputStream in = new DataInputStream(new BufferedInputStream(System.in, 1 << 16));
        PrintStream out = new PrintStream(new BufferedOutputStream(System.out, 1 << 16), false, "UTF-8");
        while (true) {
            int n;
            try {
                n = in.readInt();
            } catch (EOFException e) {
                break;
            }
            byte[] bytes = new byte[n];
            in.readFully(bytes);
            out.println(verdict(bytes));
        }
        out.flush();
    }

    static String name(Throwable t) {
        return t.getClass().getSimpleName();
    }

    static String verdict(byte[] bytes) {
        MutableRecordBatch batch;
        try {
            Iterator<MutableRecordBatch> it = MemoryRecords.readableRecords(ByteBuffer.wrap(bytes)).batches().iterator();
            if (!it.hasNext()) return "none - 0 0";
            batch = it.next();
        } catch (Throwable t) {
            return "frame " + name(t) + " 0 0";
        }
        boolean legacy = batch.magic() < RecordBatch.MAGIC_VALUE_V2;
        try {
            batch.ensureValid();
        } catch (Throwable t) {
            return (legacy ? "legacy " : "valid ") + name(t) + " 0 0";
        }
        if (legacy) return "legacy - 0 0";
        long count = 0;
        long hash = 0;
        // The streaming iterator yields a compressed batch's records one at a time (iterator()
        // decodes them all first), so the records before an error are counted on both sides.
        try (CloseableIterator<Record> records = batch.streamingIterator(BufferSupplier.NO_CACHING)) {
            while (records.hasNext()) {
                Record r = records.next();
                count++;
                hash = hash * 31 + r.offset();
            }
        } catch (Throwable t) {
            batch = null;
            return "records " + name(t) + " " + count + " " + hash;
        }
        return "ok - " + count + " " + hash;
    }
}
