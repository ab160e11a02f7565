// The Kafka Streams contender of `python -m benchmarks state`'s windows: a count per key in
// tumbling windows of event time, each window's final emitted once, when it closes,
// exactly_once_v2.
//
//   java -cp classes:libs/* WindowCount BOOTSTRAP SRC DST RECORDS APPLICATION_ID STATE_DIR \
//       SIZE_MS GRACE_MS INTERVAL_MS WARM_SRC WARM_DST WARM_RECORDS [KEY=VALUE ...]
//
// The topology, as Kafka Streams' documentation writes a windowed count with final results:
//
//   stream(SRC).groupByKey().windowedBy(TimeWindows.ofSizeAndGrace(SIZE_MS, GRACE_MS))
//       .count(Materialized.as("counts"))
//       .suppress(Suppressed.untilWindowCloses(BufferConfig.unbounded()).withName("finals"))
//       .toStream()
//       .map((window, n) -> (window.key(), {"start": ms, "end": ms, "value": n})).to(DST)
//
// keys and values as bytes, the output's value JSON and its key the input's key bytes; the
// store and the buffer named, so that their changelog topics are named for them
// (APPLICATION_ID-counts-changelog, APPLICATION_ID-finals-store-changelog), not by the
// topology's numbering. The event time is the record's Kafka timestamp (Streams' default
// extractor); a window closes once its partition's stream time reaches its end plus the
// grace, as eosflow's. A peek at the source counts the records and takes the first one's
// time (a peek keeps the key: no repartition topic).
//
// What it writes besides the finals, and so pays for in every transaction: the count's
// RocksDB window store and its changelog, and the suppression buffer (in memory) and its
// changelog. The record cache is left at Streams' default (statestore.cache.max.bytes,
// 10 MiB): between two commits it folds a key-window's updates into one changelog record
// and one update of the suppression buffer, which is what a windowed count wants; turned
// off, every input record would be a changelog record of each. The buffer is unbounded
// (a window per key is open at a time: 10,000 keys fit in the heap many times over).
//
// The settings are PassThrough's (PassThrough.settings: one stream thread, the producer's
// batches 256 KiB, polls of up to 10,000 records and as many buffered per partition,
// auto.offset.reset earliest) and the internal topics' replication.factor 1 (the single
// broker's default: run() says why it is spelled out), but for the commits:
// commit.interval.ms is INTERVAL_MS (the state benchmark's commit interval, 100 ms by
// default: Kafka Streams' own default under exactly-once). PassThrough's commits requested
// by its processor (at the caps, or once caught up) need a processor of ours in the
// topology; a windowed count in the DSL has none, and adding one only to commit is not
// what a Streams user writes (a process() before groupByKey would even add a repartition
// topic). KEY=VALUE pairs are further Streams settings, for trying others, and override
// these.
//
// Warm: the JVM first counts WARM_RECORDS of WARM_SRC (event times of their own, spanning
// several windows, so windows close and finals are written) into WARM_DST with an
// instance of its own (APPLICATION_ID-warm), to its last commit, and closes it; only then
// is the timed instance started, as PassThrough.
//
// Once RECORDS records went through, the group's committed offsets are read every 5 ms
// (Bench.awaitCommitted): that is the end of the clock, which starts at the first record.
// The transaction that commits the last offsets also holds the cache's flush and the finals
// it closes. Prints one JSON line like the Python contenders. Exits 1 if Kafka Streams
// failed.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.Window;
import org.apache.kafka.streams.state.WindowStore;

public final class WindowCount {
  private WindowCount() {}

  static byte[] finalOf(Window w, long n) {
    String json = "{\"start\": " + w.start() + ", \"end\": " + w.end() + ", \"value\": " + n + "}";
    return json.getBytes(StandardCharsets.UTF_8);
  }

  /** Counts src's records into dst by window; returns {first record, offsets committed}. */
  static long[] count(Properties props, String src, String dst, long records, TimeWindows windows)
      throws Exception {
    AtomicLong seen = new AtomicLong();
    AtomicLong firstNanos = new AtomicLong();
    StreamsBuilder builder = new StreamsBuilder();
    builder.stream(src, Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
        .peek((k, v) -> {
          if (seen.getAndIncrement() == 0) {
            firstNanos.set(System.nanoTime());
          }
        })
        .groupByKey(Grouped.with(Serdes.ByteArray(), Serdes.ByteArray()))
        .windowedBy(windows)
        .count(Materialized.<byte[], Long, WindowStore<Bytes, byte[]>>as("counts"))
        .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded())
            .withName("finals"))
        .toStream()
        .map((w, n) -> KeyValue.pair(w.key(), finalOf(w.window(), n)))
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
    try (Admin admin = Bench.admin(props.getProperty(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG))) {
      streams.start();
      while (seen.get() < records) {
        alive.run();
        Thread.sleep(5);
      }
      long done = Bench.awaitCommitted(admin, appId, src, records, alive);
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
    TimeWindows windows = TimeWindows.ofSizeAndGrace(
        Duration.ofMillis(Long.parseLong(args[6])), Duration.ofMillis(Long.parseLong(args[7])));
    String interval = StreamsConfig.COMMIT_INTERVAL_MS_CONFIG + "=" + Long.parseLong(args[8]);
    String warmSrc = args[9], warmDst = args[10];
    long warmRecords = Long.parseLong(args[11]);
    // ahead of KEY=VALUE pairs, which may override them: the commit interval, and the
    // internal topics' replication factor, 1 (what Streams' default, -1 for the broker's
    // default, gives on this one broker; but -1 needs CreateTopics v4, and the eosflow
    // test cluster answers up to v3)
    String[] extra = new String[args.length - 10];
    extra[0] = interval;
    extra[1] = StreamsConfig.REPLICATION_FACTOR_CONFIG + "=1";
    System.arraycopy(args, 12, extra, 2, args.length - 12);

    if (warmRecords > 0) {
      Properties warm = PassThrough.settings(boot, appId + "-warm", stateDir, extra);
      count(warm, warmSrc, warmDst, warmRecords, windows);
    }
    Properties props = PassThrough.settings(boot, appId, stateDir, extra);
    long[] t = count(props, src, dst, records, windows);
    System.out.println(Bench.result("kafka-streams-window", records, t[0], t[1]));
    System.out.flush();
  }
}
