// The Kafka Streams contender of `python -m benchmarks run`: an exactly_once_v2 pass-through.
//
//   java -cp classes:libs/* PassThrough BOOTSTRAP SRC DST RECORDS APPLICATION_ID WORK_ROUNDS \
//       STATE_DIR INTERVAL_MS TXN_RECORDS TXN_BYTES MIN_TXN_MS WARM_SRC WARM_DST WARM_RECORDS \
//       [KEY=VALUE ...]
//
// Copies SRC to DST (keys and values as bytes, verbatim), one stream thread, WORK_ROUNDS
// chained SHA-256 rounds over each value (the Python contenders' work; 0: none).
//
// Warm: the JVM first copies WARM_RECORDS of WARM_SRC to WARM_DST with a Kafka Streams
// instance of its own (APPLICATION_ID-warm), to its last commit, and closes it; only then
// is the timed instance started. Run cold, as until 2026-11-27, the JIT's warm-up was most
// of what set Kafka Streams apart at 200,000 records.
//
// The transaction budget (benchmarks/_budget.py): Kafka Streams' commit.interval.ms runs
// on a cadence of its own, from the last commit, and has no record cap, no byte cap and no
// early commit once caught up. So every commit is requested by the processor
// (ProcessorContext.commit(), which under exactly_once_v2 commits the thread's one
// transaction), by the rules the other contenders follow: at TXN_RECORDS records or
// TXN_BYTES key+value bytes (0: none), or, checked by a wall-clock punctuator every
// TICK_MS, once the transaction is INTERVAL_MS old, or MIN_TXN_MS old with the consumer
// caught up (its records-lag 0 on every input partition). commit.interval.ms is set to 9 s
// (it must stay below the 10 s transaction timeout), so Streams' own cadence adds at most
// one commit in 9 s.
//
// Throughput settings (benchmarks/README.md gives the reasons): the producer's batches as
// large as eosflow's (256 KiB; Kafka's default is 16 KiB), polls of up to 10,000 records
// and as many buffered per partition (Streams' default 1,000 each). KEY=VALUE pairs are
// further Streams settings, for trying others.
//
// Once RECORDS records went through, the group's committed offsets are read every 5 ms
// (Bench.awaitCommitted): that is the end of the clock, which starts at the first record.
// Prints one JSON line like the Python contenders. Exits 1 if Kafka Streams failed.

import java.security.MessageDigest;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.PunctuationType;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;

public final class PassThrough {
  static final long TICK_MS = 5;
  // Streams' own commit cadence: it must stay below its transaction timeout (10 s under
  // exactly_once_v2), and at 9 s it adds at most one commit in 9 s to the processor's.
  static final long OWN_CADENCE_MS = 9_000;

  /** The rules and the open transaction of one Kafka Streams instance: its one stream thread
   * runs every task's processor, and a commit requested by one commits them all. */
  static final class Txn {
    final long maxRecords, maxBytes, intervalNanos, minTxnNanos;
    final String topic;
    final AtomicLong seen = new AtomicLong();
    volatile long firstNanos;
    volatile KafkaStreams streams;
    long records, bytes, openedNanos;
    final long[] commits = new long[3]; // by the cap, the interval, caught up
    List<Metric> lags = List.of();

    Txn(String topic, long maxRecords, long maxBytes, long intervalMs, long minTxnMs) {
      this.topic = topic;
      this.maxRecords = maxRecords;
      this.maxBytes = maxBytes;
      this.intervalNanos = intervalMs * 1_000_000;
      this.minTxnNanos = minTxnMs * 1_000_000;
    }

    void took(int nbytes, ProcessorContext<byte[], byte[]> ctx) {
      if (records++ == 0) {
        openedNanos = System.nanoTime();
      }
      bytes += nbytes;
      if (records >= maxRecords || (maxBytes > 0 && bytes >= maxBytes)) {
        commit(ctx, 0);
      }
    }

    void tick(ProcessorContext<byte[], byte[]> ctx) {
      if (records == 0) {
        return;
      }
      long age = System.nanoTime() - openedNanos;
      if (age >= intervalNanos) {
        commit(ctx, 1);
      } else if (age >= minTxnNanos && caughtUp()) {
        commit(ctx, 2);
      }
    }

    void commit(ProcessorContext<byte[], byte[]> ctx, int why) {
      commits[why]++;
      ctx.commit();
      records = 0;
      bytes = 0;
    }

    /** The consumer's records-lag is 0 on every input partition (looked up once). */
    boolean caughtUp() {
      if (lags.isEmpty() && streams != null) {
        List<Metric> found = new ArrayList<>();
        for (Map.Entry<MetricName, ? extends Metric> e : streams.metrics().entrySet()) {
          MetricName n = e.getKey();
          if (n.name().equals("records-lag")
              && n.group().equals("consumer-fetch-manager-metrics")
              && topic.replace('.', '_').equals(n.tags().get("topic"))) {
            found.add(e.getValue());
          }
        }
        lags = found;
      }
      if (lags.isEmpty()) {
        return false;
      }
      for (Metric m : lags) {
        Object v = m.metricValue();
        if (!(v instanceof Double) || (Double) v > 0) {
          return false;
        }
      }
      return true;
    }
  }

  static final class Copy implements Processor<byte[], byte[], byte[], byte[]> {
    private final Txn txn;
    private final int rounds;
    private final MessageDigest sha;
    private ProcessorContext<byte[], byte[]> ctx;

    Copy(Txn txn, int rounds) {
      this.txn = txn;
      this.rounds = rounds;
      try {
        this.sha = MessageDigest.getInstance("SHA-256");
      } catch (java.security.NoSuchAlgorithmException e) {
        throw new IllegalStateException(e);
      }
    }

    @Override
    public void init(ProcessorContext<byte[], byte[]> ctx) {
      this.ctx = ctx;
      ctx.schedule(Duration.ofMillis(TICK_MS), PunctuationType.WALL_CLOCK_TIME, t -> txn.tick(ctx));
    }

    @Override
    public void process(Record<byte[], byte[]> r) {
      if (txn.seen.getAndIncrement() == 0) {
        txn.firstNanos = System.nanoTime();
      }
      byte[] v = r.value() == null ? new byte[0] : r.value();
      for (int i = 0; i < rounds; i++) {
        v = sha.digest(v);
      }
      ctx.forward(r);
      int nbytes = (r.key() == null ? 0 : r.key().length) + (r.value() == null ? 0 : r.value().length);
      txn.took(nbytes, ctx);
    }
  }

  static Properties settings(String boot, String appId, String stateDir, String[] extra) {
    Properties props = new Properties();
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, boot);
    props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
    props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, OWN_CADENCE_MS); // the commits: ours
    props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
    props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
    props.put(StreamsConfig.BUFFERED_RECORDS_PER_PARTITION_CONFIG, 10_000);
    props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
    props.put(StreamsConfig.consumerPrefix(ConsumerConfig.MAX_POLL_RECORDS_CONFIG), 10_000);
    props.put(StreamsConfig.producerPrefix(ProducerConfig.BATCH_SIZE_CONFIG), 256 * 1024);
    for (String kv : extra) {
      String[] p = kv.split("=", 2);
      props.put(p[0], p[1]);
    }
    return props;
  }

  /** Copies records of src to dst; returns {first record, offsets committed} in nanos. */
  static long[] copy(Properties props, Txn txn, String src, String dst, long records, int rounds)
      throws Exception {
    StreamsBuilder builder = new StreamsBuilder();
    builder.stream(src, Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
        .process(() -> new Copy(txn, rounds))
        .to(dst, Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));
    KafkaStreams streams = new KafkaStreams(builder.build(), props);
    txn.streams = streams;
    streams.setUncaughtExceptionHandler(e -> {
      e.printStackTrace();
      return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
    });
    String appId = props.getProperty(StreamsConfig.APPLICATION_ID_CONFIG);
    Runnable alive = () -> failIfDown(streams);
    try (Admin admin = Bench.admin(props.getProperty(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG))) {
      streams.start();
      while (txn.seen.get() < records) {
        alive.run();
        Thread.sleep(5);
      }
      long done = Bench.awaitCommitted(admin, appId, src, records, alive);
      return new long[] {txn.firstNanos, done};
    } finally {
      streams.close(Duration.ofSeconds(30));
    }
  }

  public static void main(String[] args) throws Exception {
    String boot = args[0], src = args[1], dst = args[2];
    long records = Long.parseLong(args[3]);
    String appId = args[4];
    int rounds = Integer.parseInt(args[5]);
    String stateDir = args[6];
    long intervalMs = Long.parseLong(args[7]);
    long maxRecords = Long.parseLong(args[8]);
    long maxBytes = Long.parseLong(args[9]);
    long minTxnMs = Long.parseLong(args[10]);
    String warmSrc = args[11], warmDst = args[12];
    long warmRecords = Long.parseLong(args[13]);
    String[] extra = java.util.Arrays.copyOfRange(args, 14, args.length);

    if (warmRecords > 0) {
      Txn warm = new Txn(warmSrc, maxRecords, maxBytes, intervalMs, minTxnMs);
      copy(settings(boot, appId + "-warm", stateDir, extra), warm, warmSrc, warmDst, warmRecords,
          rounds);
    }
    Txn txn = new Txn(src, maxRecords, maxBytes, intervalMs, minTxnMs);
    long[] t = copy(settings(boot, appId, stateDir, extra), txn, src, dst, records, rounds);
    String line = Bench.result("kafka-streams", records, t[0], t[1]);
    System.out.println(line.substring(0, line.length() - 1) + String.format(
        ", \"commits\": %d, \"commits_at_cap\": %d, \"commits_at_interval\": %d, "
            + "\"commits_caught_up\": %d}",
        txn.commits[0] + txn.commits[1] + txn.commits[2], txn.commits[0], txn.commits[1],
        txn.commits[2]));
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
