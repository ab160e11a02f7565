// The Kafka Streams contender of `python -m benchmarks run`: an exactly_once_v2 pass-through.
//
//   java -cp classes:libs/* PassThrough BOOTSTRAP SRC DST RECORDS COMMIT_INTERVAL_MS \
//       APPLICATION_ID WORK_ROUNDS STATE_DIR
//
// Copies SRC to DST (keys and values as bytes, verbatim) with processing.guarantee
// exactly_once_v2 and commit.interval.ms COMMIT_INTERVAL_MS, one stream thread. WORK_ROUNDS
// chained SHA-256 rounds over each value, the digest discarded (the same work as the Python
// contenders; 0: none). Once RECORDS records went through, it watches the group's
// (APPLICATION_ID's) committed offsets of SRC, as an Admin client sees them (transactional
// offsets show only once their transaction committed), until they add up to RECORDS: that
// is the last commit. Then it closes Kafka Streams and prints one JSON line like the Python
// contenders: seconds from the first record processed to the last commit, and the JVM's
// own peak RSS (VmHWM). Exits 1 if Kafka Streams failed.

import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
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

public final class PassThrough {
  private static final AtomicLong seen = new AtomicLong();
  private static volatile long firstNanos;

  private static void work(byte[] value, int rounds, MessageDigest sha) {
    byte[] v = value == null ? new byte[0] : value;
    for (int i = 0; i < rounds; i++) {
      v = sha.digest(v);
    }
  }

  private static double peakRssMb() throws Exception {
    for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
      if (line.startsWith("VmHWM:")) {
        return Long.parseLong(line.replaceAll("[^0-9]", "")) / 1024.0; // kB
      }
    }
    return -1;
  }

  private static long committed(Admin admin, String group, String topic) throws Exception {
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
    String boot = args[0], src = args[1], dst = args[2];
    long records = Long.parseLong(args[3]);
    long commitMs = Long.parseLong(args[4]);
    String appId = args[5];
    int rounds = Integer.parseInt(args[6]);
    String stateDir = args[7];

    Properties props = new Properties();
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, boot);
    props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
    props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, commitMs);
    props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
    props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
    props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");

    MessageDigest sha = MessageDigest.getInstance("SHA-256"); // the one stream thread's
    StreamsBuilder builder = new StreamsBuilder();
    builder.stream(src, Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
        .peek((k, v) -> {
          if (seen.getAndIncrement() == 0) {
            firstNanos = System.nanoTime();
          }
          work(v, rounds, sha);
        })
        .to(dst, Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));

    KafkaStreams streams = new KafkaStreams(builder.build(), props);
    streams.setUncaughtExceptionHandler(e -> {
      e.printStackTrace();
      return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
    });
    Properties adminProps = new Properties();
    adminProps.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, boot);
    long doneNanos;
    try (Admin admin = Admin.create(adminProps)) {
      streams.start();
      while (seen.get() < records) {
        failIfDown(streams);
        Thread.sleep(5);
      }
      while (committed(admin, appId, src) < records) {
        failIfDown(streams);
        Thread.sleep(5);
      }
      doneNanos = System.nanoTime();
    } finally {
      streams.close(Duration.ofSeconds(30));
    }
    System.out.printf(
        "{\"contender\": \"kafka-streams\", \"records\": %d, \"seconds\": %.6f, "
            + "\"rss_peak_mb\": %.1f}%n",
        records, (doneNanos - firstNanos) / 1e9, peakRssMb());
    System.out.flush();
  }

  private static void failIfDown(KafkaStreams streams) {
    KafkaStreams.State state = streams.state();
    if (state == KafkaStreams.State.ERROR || state == KafkaStreams.State.NOT_RUNNING
        || state == KafkaStreams.State.PENDING_ERROR) {
      System.err.println("Kafka Streams stopped: " + state);
      System.exit(1);
    }
  }
}
