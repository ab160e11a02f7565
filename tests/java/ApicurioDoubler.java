// The Kafka Streams app of tests/genuine/test_schemas_kstreams.py: exactly_once_v2, reading
// Avro orders with Apicurio Registry's Avro serde and writing them doubled with the same serde.
//
//   java -cp classes:libs/* ApicurioDoubler BOOTSTRAP SRC DST APPLICATION_ID STATE_DIR RECORDS \
//       [apicurio.registry.KEY=VALUE ...]
//
// SRC's values are Avro records (GenericRecord: no generated classes) with the fields id
// (long), customer (string) and qty (a number); each becomes a Doubled record (id long,
// customer string, qty int: twice the order's) on DST, under the same key (a string). The
// KEY=VALUE pairs are the serde's settings, given by the test: where the registry is and
// how the schema's id is written and read (in the payload, 4 bytes, which id).
//
// Exits 0 once the group's committed offsets of SRC add up to RECORDS, printing
// "doubled RECORDS"; 1 if Kafka Streams failed, or RECORDS were not committed in 90 s.

import io.apicurio.registry.serde.avro.AvroSerde;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import org.apache.avro.Schema;
import org.apache.avro.SchemaBuilder;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;

public final class ApicurioDoubler {
  static final long TIMEOUT_MS = 90_000;

  static final Schema DOUBLED = SchemaBuilder.record("Doubled").fields()
      .requiredLong("id")
      .requiredString("customer")
      .requiredInt("qty")
      .endRecord();

  private ApicurioDoubler() {}

  static GenericRecord doubled(GenericRecord order) {
    GenericRecord out = new GenericData.Record(DOUBLED);
    out.put("id", ((Number) order.get("id")).longValue());
    out.put("customer", order.get("customer").toString()); // a Utf8 as read
    out.put("qty", Math.toIntExact(2 * ((Number) order.get("qty")).longValue()));
    return out;
  }

  static long committed(Admin admin, String group, String topic) throws Exception {
    Map<TopicPartition, OffsetAndMetadata> offsets =
        admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
    long sum = 0;
    for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
      if (e.getKey().topic().equals(topic) && e.getValue() != null) {
        sum += e.getValue().offset();
      }
    }
    return sum;
  }

  public static void main(String[] args) throws Exception {
    String boot = args[0], src = args[1], dst = args[2], appId = args[3], stateDir = args[4];
    long records = Long.parseLong(args[5]);
    Map<String, Object> serdeConfig = new HashMap<>();
    for (int i = 6; i < args.length; i++) {
      String[] kv = args[i].split("=", 2);
      serdeConfig.put(kv[0], kv[1]);
    }
    AvroSerde<GenericRecord> avro = new AvroSerde<>();
    avro.configure(serdeConfig, false);

    Properties props = new Properties();
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, boot);
    props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
    props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
    props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
    props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
    props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");

    StreamsBuilder builder = new StreamsBuilder();
    builder.stream(src, Consumed.with(Serdes.String(), avro))
        .mapValues(ApicurioDoubler::doubled)
        .to(dst, Produced.with(Serdes.String(), avro));
    KafkaStreams streams = new KafkaStreams(builder.build(), props);
    streams.setUncaughtExceptionHandler(e -> {
      e.printStackTrace();
      return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
    });
    Properties adminProps = new Properties();
    adminProps.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, boot);
    int code = 1;
    try (Admin admin = Admin.create(adminProps)) {
      streams.start();
      long deadline = System.nanoTime() + TIMEOUT_MS * 1_000_000;
      while (System.nanoTime() < deadline) {
        KafkaStreams.State state = streams.state();
        if (state == KafkaStreams.State.ERROR || state == KafkaStreams.State.PENDING_ERROR
            || state == KafkaStreams.State.NOT_RUNNING) {
          System.err.println("Kafka Streams stopped: " + state);
          break;
        }
        if (committed(admin, appId, src) >= records) {
          System.out.println("doubled " + records);
          code = 0;
          break;
        }
        Thread.sleep(50);
      }
      if (code != 0 && System.nanoTime() >= deadline) {
        System.err.println(records + " records not committed in " + TIMEOUT_MS + " ms");
      }
    } finally {
      streams.close(Duration.ofSeconds(10));
    }
    System.out.flush();
    System.exit(code);
  }
}
