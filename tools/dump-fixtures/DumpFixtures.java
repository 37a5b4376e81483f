// Writes the internal-topic fixture files under testdata/kafka-internal/ with Kafka's own classes
// (record serdes, generated messages, MemoryRecords), so that the expected text can be produced by
// Kafka's own DumpLogSegments. Run by tools/dump-fixtures/regen.sh; not part of any Rust build.
import java.io.FileOutputStream;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.*;

import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor;
import org.apache.kafka.clients.consumer.internals.ConsumerProtocol;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.message.KRaftVersionRecord;
import org.apache.kafka.common.message.SnapshotFooterRecord;
import org.apache.kafka.common.message.VotersRecord;
import org.apache.kafka.common.message.SnapshotHeaderRecord;
import org.apache.kafka.common.metadata.*;
import org.apache.kafka.common.protocol.ApiMessage;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.ObjectSerializationCache;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.record.internal.MemoryRecords;
import org.apache.kafka.common.record.internal.MemoryRecordsBuilder;
import org.apache.kafka.coordinator.common.runtime.CoordinatorRecord;
import org.apache.kafka.coordinator.common.runtime.CoordinatorRecordSerde;
import org.apache.kafka.coordinator.group.GroupCoordinatorRecordSerde;
import org.apache.kafka.coordinator.group.generated.*;
import org.apache.kafka.coordinator.share.ShareCoordinatorRecordSerde;
import org.apache.kafka.coordinator.share.generated.*;
import org.apache.kafka.coordinator.transaction.TransactionCoordinatorRecordSerde;
import org.apache.kafka.coordinator.transaction.generated.*;
import org.apache.kafka.metadata.MetadataRecordSerde;
import org.apache.kafka.server.common.ApiMessageAndVersion;
import org.apache.kafka.server.log.remote.metadata.storage.RemoteLogSegmentMetadataSnapshot;
import org.apache.kafka.server.log.remote.metadata.storage.serialization.RemoteLogMetadataSerde;
import org.apache.kafka.server.log.remote.storage.*;

public class DumpFixtures {
    static final long TS = 1700000000000L;
    static final Uuid TOPIC_ID = new Uuid(0x0123456789abcdefL, 0x0fedcba987654321L);

    /** Key/value pairs (null = null) appended as one batch per record at consecutive offsets. */
    static void writeLog(Path file, List<byte[][]> kvs) throws Exception {
        try (FileOutputStream out = new FileOutputStream(file.toFile())) {
            long offset = 0;
            for (byte[][] kv : kvs) {
                ByteBuffer buf = ByteBuffer.allocate(1024 + (kv[1] == null ? 0 : kv[1].length) + (kv[0] == null ? 0 : kv[0].length));
                MemoryRecordsBuilder b = MemoryRecords.builder(buf, Compression.NONE, TimestampType.CREATE_TIME, offset);
                b.appendWithOffset(offset, TS + offset, kv[0], kv[1]);
                MemoryRecords r = b.build();
                ByteBuffer bb = r.buffer();
                byte[] bytes = new byte[bb.remaining()];
                bb.get(bytes);
                out.write(bytes);
                offset++;
            }
        }
    }

    static byte[][] kv(byte[] k, byte[] v) { return new byte[][] {k, v}; }

    static byte[][] coord(CoordinatorRecordSerde serde, ApiMessage key, ApiMessage value, int version) {
        CoordinatorRecord r = value == null ? CoordinatorRecord.tombstone(key)
            : CoordinatorRecord.record(key, new ApiMessageAndVersion(value, (short) version));
        return kv(serde.serializeKey(r), serde.serializeValue(r));
    }

    static byte[] raw(int... bytes) {
        byte[] b = new byte[bytes.length];
        for (int i = 0; i < bytes.length; i++) b[i] = (byte) bytes[i];
        return b;
    }

    static byte[] bb(ByteBuffer b) {
        byte[] out = new byte[b.remaining()];
        b.duplicate().get(out);
        return out;
    }

    static void offsets(Path dir) throws Exception {
        GroupCoordinatorRecordSerde s = new GroupCoordinatorRecordSerde();
        List<byte[][]> l = new ArrayList<>();
        OffsetCommitKey k = new OffsetCommitKey().setGroup("group-a").setTopic("orders").setPartition(3);
        OffsetCommitValue v = new OffsetCommitValue().setOffset(42).setLeaderEpoch(5).setMetadata("meta")
            .setCommitTimestamp(TS).setExpireTimestamp(TS + 1000).setTopicId(TOPIC_ID);
        for (int ver = 0; ver <= 4; ver++) l.add(coord(s, k, v, ver));
        l.add(coord(s, k, new OffsetCommitValue().setOffset(7).setCommitTimestamp(TS), 4));
        l.add(coord(s, new LegacyOffsetCommitKey().setGroup("old").setTopic("t").setPartition(0),
            new LegacyOffsetCommitValue().setOffset(1).setMetadata("").setCommitTimestamp(TS), 0));
        ByteBuffer sub = ConsumerProtocol.serializeSubscription(new ConsumerPartitionAssignor.Subscription(
            List.of("orders", "payments"), null, List.of(new TopicPartition("orders", 0)), 1, Optional.of("rack-1")));
        ByteBuffer asg = ConsumerProtocol.serializeAssignment(new ConsumerPartitionAssignor.Assignment(
            List.of(new TopicPartition("orders", 0), new TopicPartition("orders", 1)), null));
        GroupMetadataValue.MemberMetadata m = new GroupMetadataValue.MemberMetadata().setMemberId("m-1")
            .setGroupInstanceId("inst-1").setClientId("client-1").setClientHost("/127.0.0.1")
            .setRebalanceTimeout(30000).setSessionTimeout(45000).setSubscription(bb(sub)).setAssignment(bb(asg));
        GroupMetadataValue gm = new GroupMetadataValue().setProtocolType("consumer").setGeneration(3)
            .setProtocol("range").setLeader("m-1").setCurrentStateTimestamp(TS).setMembers(List.of(m));
        for (int ver = 0; ver <= 4; ver++) l.add(coord(s, new GroupMetadataKey().setGroup("group-a"), gm, ver));
        GroupMetadataValue.MemberMetadata future = m.duplicate().setMemberId("m-2")
            .setSubscription(raw(0, 9, 0, 0, 0, 0)).setAssignment(raw(0, 3, 0, 0, 0, 0, 0, 0, 0, 0));
        l.add(coord(s, new GroupMetadataKey().setGroup("group-b"), gm.duplicate().setMembers(List.of(future)), 4));
        GroupMetadataValue other = new GroupMetadataValue().setProtocolType("connect").setGeneration(1)
            .setProtocol(null).setLeader(null).setMembers(List.of(new GroupMetadataValue.MemberMetadata()
                .setMemberId("w").setClientId("c").setClientHost("h").setSubscription(raw(1, 2)).setAssignment(raw())));
        l.add(coord(s, new GroupMetadataKey().setGroup("connect-cluster"), other, 3));
        l.add(coord(s, new ConsumerGroupMetadataKey().setGroupId("cg"),
            new ConsumerGroupMetadataValue().setEpoch(4).setMetadataHash(123456789L), 0));
        l.add(coord(s, new ConsumerGroupMemberMetadataKey().setGroupId("cg").setMemberId("mem"),
            new ConsumerGroupMemberMetadataValue().setInstanceId(null).setRackId("r").setClientId("cid")
                .setClientHost("/10.0.0.1").setSubscribedTopicNames(List.of("a", "b")).setRebalanceTimeoutMs(1000)
                .setServerAssignor("uniform"), 0));
        // ClassicMemberMetadata is a tagged nullable struct: null (sent as a null marker, shown as
        // null), and a member that joined with the classic protocol.
        l.add(coord(s, new ConsumerGroupMemberMetadataKey().setGroupId("cg").setMemberId("mem-null"),
            new ConsumerGroupMemberMetadataValue().setClientId("cid").setClientHost("/10.0.0.2")
                .setSubscribedTopicNames(List.of("a")).setClassicMemberMetadata(null), 0));
        l.add(coord(s, new ConsumerGroupMemberMetadataKey().setGroupId("cg").setMemberId("mem-classic"),
            new ConsumerGroupMemberMetadataValue().setClientId("cid").setClientHost("/10.0.0.3")
                .setSubscribedTopicNames(List.of("a")).setClassicMemberMetadata(
                    new ConsumerGroupMemberMetadataValue.ClassicMemberMetadata().setSessionTimeoutMs(45000)
                        .setSupportedProtocols(List.of(new ConsumerGroupMemberMetadataValue.ClassicProtocol()
                            .setName("range").setMetadata(raw(0, 1, 2))))), 0));
        l.add(coord(s, new ConsumerGroupCurrentMemberAssignmentKey().setGroupId("cg").setMemberId("mem"),
            new ConsumerGroupCurrentMemberAssignmentValue().setMemberEpoch(4).setPreviousMemberEpoch(3)
                .setState((byte) 0).setAssignedPartitions(List.of(
                    new ConsumerGroupCurrentMemberAssignmentValue.TopicPartitions().setTopicId(TOPIC_ID)
                        .setPartitions(List.of(0, 1, 2)))), 0));
        l.add(coord(s, new ShareGroupMetadataKey().setGroupId("sg"),
            new ShareGroupMetadataValue().setEpoch(2).setMetadataHash(99L), 0));
        l.add(coord(s, new StreamsGroupMetadataKey().setGroupId("app"),
            new StreamsGroupMetadataValue().setEpoch(1).setMetadataHash(5L).setValidatedTopologyEpoch(1), 0));
        l.add(coord(s, new ConsumerGroupMemberMetadataKey().setGroupId("cg").setMemberId("gone"), null, 0));
        l.add(coord(s, k, null, 0));
        l.add(kv(raw(0, 99, 0, 1, 'x'), raw(0, 0)));          // unknown record type 99
        l.add(kv(s.serializeKey(CoordinatorRecord.tombstone(k)), raw(0, 9, 1, 2))); // unknown value version
        l.add(kv(s.serializeKey(CoordinatorRecord.tombstone(k)), raw(0, 3, 0, 0, 0))); // truncated value
        writeLog(dir.resolve("00000000000000000000.log"), l);
    }

    static void transactions(Path dir) throws Exception {
        TransactionCoordinatorRecordSerde s = new TransactionCoordinatorRecordSerde();
        List<byte[][]> l = new ArrayList<>();
        TransactionLogKey k = new TransactionLogKey().setTransactionalId("txn-1");
        TransactionLogValue v = new TransactionLogValue().setProducerId(1000).setPreviousProducerId(999)
            .setNextProducerId(-1).setProducerEpoch((short) 3).setNextProducerEpoch((short) -1)
            .setTransactionTimeoutMs(60000).setTransactionStatus((byte) 1)
            .setTransactionPartitions(List.of(new TransactionLogValue.PartitionsSchema().setTopic("orders")
                .setPartitionIds(List.of(0, 2))))
            .setTransactionLastUpdateTimestampMs(TS).setTransactionStartTimestampMs(TS - 5)
            .setClientTransactionVersion((short) 2);
        l.add(coord(s, k, v.duplicate().setPreviousProducerId(-1).setClientTransactionVersion((short) 0), 0));
        l.add(coord(s, k, v, 1));
        l.add(coord(s, k, new TransactionLogValue().setProducerId(1000).setProducerEpoch((short) 4)
            .setTransactionTimeoutMs(60000).setTransactionStatus((byte) 0).setTransactionPartitions(null)
            .setTransactionLastUpdateTimestampMs(TS).setTransactionStartTimestampMs(-1), 1));
        l.add(coord(s, k, null, 0));
        writeLog(dir.resolve("00000000000000000000.log"), l);
    }

    static void shareState(Path dir) throws Exception {
        ShareCoordinatorRecordSerde s = new ShareCoordinatorRecordSerde();
        List<byte[][]> l = new ArrayList<>();
        l.add(coord(s, new ShareSnapshotKey().setGroupId("sg").setTopicId(TOPIC_ID).setPartition(0),
            new ShareSnapshotValue().setSnapshotEpoch(1).setStateEpoch(2).setLeaderEpoch(3).setStartOffset(10)
                .setCreateTimestamp(TS).setWriteTimestamp(TS + 1).setStateBatches(List.of(
                    new ShareSnapshotValue.StateBatch().setFirstOffset(10).setLastOffset(12)
                        .setDeliveryState((byte) 2).setDeliveryCount((short) 1))), 0));
        l.add(coord(s, new ShareUpdateKey().setGroupId("sg").setTopicId(TOPIC_ID).setPartition(0),
            new ShareUpdateValue().setSnapshotEpoch(1).setLeaderEpoch(3).setStartOffset(13).setStateBatches(List.of()), 0));
        writeLog(dir.resolve("00000000000000000000.log"), l);
    }

    static byte[] meta(ApiMessage m, int version) {
        MetadataRecordSerde serde = MetadataRecordSerde.INSTANCE;
        ApiMessageAndVersion amv = new ApiMessageAndVersion(m, (short) version);
        ObjectSerializationCache cache = new ObjectSerializationCache();
        int size = serde.recordSize(amv, cache);
        ByteBuffer buf = ByteBuffer.allocate(size);
        serde.write(amv, cache, new ByteBufferAccessor(buf));
        return buf.array();
    }

    static List<byte[][]> metadataRecords() {
        List<byte[][]> l = new ArrayList<>();
        l.add(kv(null, meta(new FeatureLevelRecord().setName("metadata.version").setFeatureLevel((short) 27), 0)));
        RegisterBrokerRecord.BrokerEndpointCollection eps = new RegisterBrokerRecord.BrokerEndpointCollection();
        eps.add(new RegisterBrokerRecord.BrokerEndpoint().setName("PLAINTEXT").setHost("localhost").setPort(9092).setSecurityProtocol((short) 0));
        RegisterBrokerRecord.BrokerFeatureCollection fs = new RegisterBrokerRecord.BrokerFeatureCollection();
        fs.add(new RegisterBrokerRecord.BrokerFeature().setName("metadata.version").setMinSupportedVersion((short) 7).setMaxSupportedVersion((short) 27));
        for (int ver = 0; ver <= 4; ver++) {
            l.add(kv(null, meta(new RegisterBrokerRecord().setBrokerId(1).setIsMigratingZkBroker(false)
                .setIncarnationId(TOPIC_ID).setBrokerEpoch(5).setEndPoints(eps.duplicate()).setFeatures(fs.duplicate())
                .setRack(null).setFenced(true).setInControlledShutdown(false)
                .setLogDirs(ver >= 3 ? List.of(TOPIC_ID) : List.of()), ver)));
        }
        l.add(kv(null, meta(new TopicRecord().setName("orders").setTopicId(TOPIC_ID), 0)));
        for (int ver = 0; ver <= 2; ver++) {
            l.add(kv(null, meta(new PartitionRecord().setPartitionId(0).setTopicId(TOPIC_ID).setReplicas(List.of(1, 2, 3))
                .setIsr(List.of(1, 2)).setRemovingReplicas(List.of()).setAddingReplicas(List.of()).setLeader(1)
                .setLeaderEpoch(0).setPartitionEpoch(0).setDirectories(ver >= 1 ? List.of(TOPIC_ID, TOPIC_ID, TOPIC_ID) : List.of())
                .setEligibleLeaderReplicas(ver >= 2 ? List.of(3) : null).setLastKnownElr(ver >= 2 ? List.of() : null), ver)));
        }
        l.add(kv(null, meta(new ConfigRecord().setResourceType((byte) 2).setResourceName("orders")
            .setName("retention.ms").setValue("86400000"), 0)));
        l.add(kv(null, meta(new ConfigRecord().setResourceType((byte) 2).setResourceName("orders")
            .setName("cleanup.policy").setValue(null), 0)));
        l.add(kv(null, meta(new PartitionChangeRecord().setPartitionId(0).setTopicId(TOPIC_ID).setIsr(List.of(1))
            .setLeader(2), 0)));
        l.add(kv(null, meta(new PartitionChangeRecord().setPartitionId(0).setTopicId(TOPIC_ID)
            .setEligibleLeaderReplicas(List.of(2)).setLeaderRecoveryState((byte) 1), 2)));
        l.add(kv(null, meta(new ProducerIdsRecord().setBrokerId(1).setBrokerEpoch(5).setNextProducerId(2000), 0)));
        l.add(kv(null, meta(new ClientQuotaRecord().setEntity(List.of(new ClientQuotaRecord.EntityData()
            .setEntityType("user").setEntityName("alice"))).setKey("producer_byte_rate").setValue(1048576.5).setRemove(false), 0)));
        l.add(kv(null, meta(new ClientQuotaRecord().setEntity(List.of(new ClientQuotaRecord.EntityData()
            .setEntityType("client-id").setEntityName(null))).setKey("request_percentage").setValue(1.0E-4).setRemove(false), 0)));
        l.add(kv(null, meta(new UserScramCredentialRecord().setName("alice").setMechanism((byte) 1)
            .setSalt(raw(1, 2, 3)).setStoredKey(raw(4, 5)).setServerKey(raw(6)).setIterations(4096), 0)));
        l.add(kv(null, meta(new AccessControlEntryRecord().setId(TOPIC_ID).setResourceType((byte) 2)
            .setResourceName("orders").setPatternType((byte) 3).setPrincipal("User:alice").setHost("*")
            .setOperation((byte) 3).setPermissionType((byte) 3), 0)));
        l.add(kv(null, meta(new BrokerRegistrationChangeRecord().setBrokerId(1).setBrokerEpoch(5).setFenced((byte) -1)
            .setInControlledShutdown((byte) 1), 2)));
        l.add(kv(null, meta(new UnfenceBrokerRecord().setId(1).setEpoch(5), 0)));
        l.add(kv(null, meta(new NoOpRecord(), 0)));
        l.add(kv(null, meta(new RemoveTopicRecord().setTopicId(TOPIC_ID), 0)));
        l.add(kv(null, meta(new BeginTransactionRecord().setName("migration"), 0)));
        l.add(kv(null, meta(new EndTransactionRecord(), 0)));
        l.add(kv(null, raw(1, 2, 9, 0x07, 'n', 'e', 'w', 't', 'o', 'p', 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 0))); // TopicRecord v9
        l.add(kv(null, raw(1, 99, 0)));               // unknown metadata type
        l.add(kv(null, raw(0, 2, 0)));                // frame version 0
        l.add(kv(null, raw(1, 2, 0, 7)));             // TopicRecord cut short
        return l;
    }

    static void clusterMetadata(Path dir) throws Exception {
        writeLog(dir.resolve("00000000000000000000.log"), metadataRecords());
        // A snapshot: header control batch, the records, footer control batch.
        try (FileOutputStream out = new FileOutputStream(dir.resolve("00000000000000000030-0000000002.checkpoint").toFile())) {
            ByteBuffer h = MemoryRecords.withSnapshotHeaderRecord(0, TS, 2, ByteBuffer.allocate(256),
                new SnapshotHeaderRecord().setVersion((short) 0).setLastContainedLogTimestamp(TS)).buffer();
            out.write(bb(h));
            out.write(bb(MemoryRecords.withKRaftVersionRecord(1, TS, 2, ByteBuffer.allocate(256),
                new KRaftVersionRecord().setVersion((short) 0).setKRaftVersion((short) 1)).buffer()));
            VotersRecord.Voter voter = new VotersRecord.Voter().setVoterId(1).setVoterDirectoryId(TOPIC_ID)
                .setEndpoints(new VotersRecord.EndpointCollection(List.of(new VotersRecord.Endpoint()
                    .setName("CONTROLLER").setHost("localhost").setPort(9093)).iterator()))
                .setKRaftVersionFeature(new VotersRecord.KRaftVersionFeature()
                    .setMinSupportedVersion((short) 0).setMaxSupportedVersion((short) 1));
            out.write(bb(MemoryRecords.withVotersRecord(2, TS, 2, ByteBuffer.allocate(1024),
                new VotersRecord().setVersion((short) 0).setVoters(List.of(voter))).buffer()));
            ByteBuffer buf = ByteBuffer.allocate(64 * 1024);
            MemoryRecordsBuilder b = MemoryRecords.builder(buf, Compression.NONE, TimestampType.CREATE_TIME, 3);
            long o = 3;
            for (byte[][] kv : metadataRecords().subList(0, 8)) b.appendWithOffset(o++, TS, kv[0], kv[1]);
            out.write(bb(b.build().buffer()));
            ByteBuffer f = MemoryRecords.withSnapshotFooterRecord(o, TS, 2, ByteBuffer.allocate(256),
                new SnapshotFooterRecord().setVersion((short) 0)).buffer();
            out.write(bb(f));
        }
    }

    static void remoteLogMetadata(Path dir) throws Exception {
        RemoteLogMetadataSerde s = new RemoteLogMetadataSerde();
        TopicIdPartition tp = new TopicIdPartition(TOPIC_ID, new TopicPartition("orders", 1));
        RemoteLogSegmentId id = new RemoteLogSegmentId(tp, new Uuid(42L, 43L));
        Map<Integer, Long> epochs = new HashMap<>();
        epochs.put(0, 0L);
        epochs.put(3, 120L);
        List<byte[][]> l = new ArrayList<>();
        l.add(kv(null, s.serialize(new RemoteLogSegmentMetadata(id, 0, 199, TS, 1, TS + 1, 4096, epochs))));
        l.add(kv(null, s.serialize(new RemoteLogSegmentMetadataUpdate(id, TS + 2,
            Optional.of(new RemoteLogSegmentMetadata.CustomMetadata(raw(1, 2, 3))),
            RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1))));
        l.add(kv(null, s.serialize(new RemotePartitionDeleteMetadata(tp, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, TS + 3, 2))));
        l.add(kv(null, raw(1, 7, 0)));
        writeLog(dir.resolve("00000000000000000000.log"), l);
    }

    /**
     * A segment with two 3-record batches whose max timestamp is on a middle record, and the time
     * index Kafka 2.x wrote for it: entries name the offset of the max-timestamp record, not the
     * batch's last offset. The offset index is empty (one batch per index interval).
     */
    static void legacyTimeIndex(Path dir) throws Exception {
        long[][] ts = {{TS + 5, TS + 9, TS + 7}, {TS + 10, TS + 20, TS + 15}};
        try (FileOutputStream out = new FileOutputStream(dir.resolve("00000000000000000000.log").toFile())) {
            long offset = 0;
            for (long[] batch : ts) {
                MemoryRecordsBuilder b = MemoryRecords.builder(ByteBuffer.allocate(1024), Compression.NONE,
                    TimestampType.CREATE_TIME, offset);
                for (long t : batch) {
                    b.appendWithOffset(offset, t, ("k" + offset).getBytes(), ("v" + offset).getBytes());
                    offset++;
                }
                out.write(bb(b.build().buffer()));
            }
        }
        ByteBuffer idx = ByteBuffer.allocate(24);
        idx.putLong(TS + 9).putInt(1).putLong(TS + 20).putInt(4);
        try (FileOutputStream out = new FileOutputStream(dir.resolve("00000000000000000000.timeindex").toFile())) {
            out.write(idx.array());
        }
        new FileOutputStream(dir.resolve("00000000000000000000.index").toFile()).close();
    }

    public static void main(String[] args) throws Exception {
        Path root = Path.of(args[0]);
        Path[] dirs = {root.resolve("__consumer_offsets-0"), root.resolve("__transaction_state-0"),
            root.resolve("__share_group_state-0"), root.resolve("__cluster_metadata-0"), root.resolve("__remote_log_metadata-0")};
        for (Path d : dirs) java.nio.file.Files.createDirectories(d);
        offsets(dirs[0]);
        transactions(dirs[1]);
        shareState(dirs[2]);
        clusterMetadata(dirs[3]);
        remoteLogMetadata(dirs[4]);
        Path legacy = root.resolve("kafka2-timeindex");
        java.nio.file.Files.createDirectories(legacy);
        legacyTimeIndex(legacy);
    }
}
