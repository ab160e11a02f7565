// The Kafka Streams contender of `python -m benchmarks regroup`: records keyed by one key,
// counted per another (the first bytes of the value, up to '|'), exactly_once_v2.
//
//   java -cp classes:libs/* RegroupCount BOOTSTRAP SRC DST RECORDS APPLICATION_ID STATE_DIR \
//       INTERVAL_MS WARM_SRC WARM_DST WARM_RECORDS [KEY=VALUE ...]
//
// The topology, as Kafka Streams' documentation writes a count by another key:
//
//   stream(SRC).groupBy((k, v) -> newKey(v), Grouped.as("by-product"))
//       .count(Materialized.as("counts"))
//       .toStream().mapValues(n -> n as text).to(DST)
//
// groupBy changes the key, so Streams writes every record to its repartition topic
// (APPLICATION_ID-by-product-repartition) and a second sub-topology reads it back and counts:
// the same two steps as eosflow's two stages. Under exactly_once_v2 the repartitioned
// records, the count's changelog, the outputs and every consumed offset (of SRC and of the
// repartition topic) commit in one transaction per thread; Streams purges the repartition
// topic's records below the committed offsets after commits (repartition.purge.interval.ms).
//
// The record cache is left at Streams' default (statestore.cache.max.bytes, 10 MiB):
// between two commits it folds a key's updates into one changelog record and one output,
// which is what a count wants -- and fewer outputs than eosflow's and quixstreams' counts,
// which emit every update. The check accepts either: per new key, counts rising to the key's
// number of records.
//
// The settings are PassThrough's (one stream thread, the producer's batches 256 KiB, polls
// of up to 10,000 records and as many buffered per partition, auto.offset.reset earliest),
// the internal topics' replication.factor 1 (WindowCount says why it is spelled out), and
// commit.interval.ms INTERVAL_MS (the benchmark's commit interval, 100 ms by default: Kafka
// Streams' own default under exactly-once). KEY=VALUE pairs override these.
//
// Warm: the JVM first counts WARM_RECORDS of WARM_SRC into WARM_DST with an instance of its
// own (APPLICATION_ID-warm), to its last commit, and closes it; only then is the timed
// instance started. The clock starts at the first record of SRC (a peek ahead of groupBy)
// and ends when the group's committed offsets of the repartition topic add up to RECORDS:
// the last record counted and committed (Bench.awaitCommitted). Prints one JSON line like
// the Python contenders. Exits 1 if Kafka Streams failed.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Arrays;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.KeyValueStore;

public final class RegroupCount {
  private RegroupCount() {}

  static final String REGROUP = "by-product";

  /** The new key: the value's bytes before the first '|' (all of it without one). */
  static byte[] newKey(byte[] value) {
    for (int i = 0; i < value.length; i++) {
      if (value[i] == '|') {
        return Arrays.copyOf(value, i);
      }
    }
    return value;
  }

  /** Counts src's records by new key into dst; returns {first record, offsets committed}. */
  static long[] count(Properties props, String src, String dst, long records) throws Exception {
    AtomicLong seen = new AtomicLong();
    AtomicLong firstNanos = new AtomicLong();
    StreamsBuilder builder = new StreamsBuilder();
    builder.stream(src, Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
        .peek((k, v) -> {
          if (seen.getAndIncrement() == 0) {
            firstNanos.set(System.nanoTime());
          }
        })
        .groupBy((k, v) -> newKey(v), Grouped.with(REGROUP, Serdes.ByteArray(), Serdes.ByteArray()))
        .count(Materialized.<byte[], Long, KeyValueStore<Bytes, byte[]>>as("counts"))
        .toStream()
        .mapValues(n -> String.valueOf(n).getBytes(StandardCharsets.UTF_8))
        .to(dst, Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));
    KafkaStreams streams = new KafkaStreams(builder.build(), props);
    streams.setUncaughtExceptionHandler(e -> {
      e.printStackTrace();
      return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
    });
    Runnable alive = () -> {
      KafkaStreams.State state = streams.state();
      if (!state.isRunningOrRebalancing()) {
        throw new IllegalStateException("Kafka Streams stopped: " + state);
      }
    };
    String appId = props.getProperty(StreamsConfig.APPLICATION_ID_CONFIG);
    String repartition = appId + "-" + REGROUP + "-repartition";
    try (Admin admin = Bench.admin(props.getProperty(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG))) {
      streams.start();
      while (seen.get() < records) {
        alive.run();
        Thread.sleep(5);
      }
      long done = Bench.awaitCommitted(admin, appId, repartition, records, alive);
      return new long[] {firstNanos.get(), done};
    } finally {
      streams.close(Duration.ofSeconds(30));
    }
  }

  public static void main(String[] args) {
    try {
      run(args);
    } catch (Exception e) { // Kafka Streams stopped, or the offsets never reached the end
      e.printStackTrace();
      System.exit(1);
    }
  }

  static void run(String[] args) throws Exception {
    String boot = args[0], src = args[1], dst = args[2];
    long records = Long.parseLong(args[3]);
    String appId = args[4], stateDir = args[5];
    String interval = StreamsConfig.COMMIT_INTERVAL_MS_CONFIG + "=" + Long.parseLong(args[6]);
    String warmSrc = args[7], warmDst = args[8];
    long warmRecords = Long.parseLong(args[9]);
    String[] extra = new String[args.length - 8];
    extra[0] = interval;
    extra[1] = StreamsConfig.REPLICATION_FACTOR_CONFIG + "=1";
    System.arraycopy(args, 10, extra, 2, args.length - 10);

    if (warmRecords > 0) {
      Properties warm = PassThrough.settings(boot, appId + "-warm", stateDir, extra);
      count(warm, warmSrc, warmDst, warmRecords);
    }
    Properties props = PassThrough.settings(boot, appId, stateDir, extra);
    long[] t = count(props, src, dst, records);
    System.out.println(Bench.result("kafka-streams-regroup", records, t[0], t[1]));
    System.out.flush();
  }
}
