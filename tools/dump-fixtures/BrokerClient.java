// The client side of tools/dump-fixtures/broker.sh: against a local Kafka broker, creates topics and
// a config change, runs a transactional producer (one committed and one aborted transaction),
// consumer groups of both protocols committing offsets, a share group, and deletes a topic, so the
// broker writes every internal topic. Not part of any Rust build.
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.*;
public class BrokerClient {
    public static void main(String[] a) throws Exception {
        String bs = "127.0.0.1:39092";
        Properties ap = new Properties(); ap.put("bootstrap.servers", bs);
        try (Admin admin = Admin.create(ap)) {
            admin.createTopics(List.of(new NewTopic("orders", 3, (short) 1))).all().get();
            admin.incrementalAlterConfigs(Map.of(new ConfigResource(ConfigResource.Type.TOPIC, "orders"),
                List.of(new AlterConfigOp(new ConfigEntry("retention.ms", "86400000"), AlterConfigOp.OpType.SET)))).all().get();
            admin.createTopics(List.of(new NewTopic("payments", 1, (short) 1))).all().get();
        }
        Properties pp = new Properties(); pp.put("bootstrap.servers", bs);
        pp.put("transactional.id", "txn-orders");
        pp.put("key.serializer", StringSerializer.class.getName()); pp.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> p = new KafkaProducer<>(pp)) {
            p.initTransactions();
            p.beginTransaction();
            for (int i = 0; i < 10; i++) p.send(new ProducerRecord<>("orders", i % 3, "k" + i, "v" + i));
            p.commitTransaction();
            p.beginTransaction();
            p.send(new ProducerRecord<>("payments", "x", "aborted"));
            p.abortTransaction();
        }
        for (String proto : List.of("classic", "consumer")) {
            Properties cp = new Properties(); cp.put("bootstrap.servers", bs);
            cp.put("group.id", "group-" + proto); cp.put("group.protocol", proto);
            cp.put("auto.offset.reset", "earliest"); cp.put("enable.auto.commit", "false");
            cp.put("isolation.level", "read_committed");
            cp.put("key.deserializer", StringDeserializer.class.getName()); cp.put("value.deserializer", StringDeserializer.class.getName());
            try (KafkaConsumer<String, String> c = new KafkaConsumer<>(cp)) {
                c.subscribe(List.of("orders", "payments"));
                int n = 0; long end = System.currentTimeMillis() + 20000;
                while (n < 10 && System.currentTimeMillis() < end) n += c.poll(Duration.ofMillis(500)).count();
                c.commitSync();
                System.out.println(proto + " consumed " + n);
            }
        }
        Properties sp = new Properties(); sp.put("bootstrap.servers", bs);
        sp.put("group.id", "share-group");
        sp.put("key.deserializer", StringDeserializer.class.getName()); sp.put("value.deserializer", StringDeserializer.class.getName());
        try (KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(sp)) {
            c.subscribe(List.of("orders"));
            long end = System.currentTimeMillis() + 5000;
            while (System.currentTimeMillis() < end) { c.poll(Duration.ofMillis(500)); c.commitSync(); }
        }
        Thread.sleep(4000);
        try (Admin admin = Admin.create(ap)) {
            admin.deleteTopics(List.of("payments")).all().get();
        }
        Thread.sleep(4000);
    }
}
