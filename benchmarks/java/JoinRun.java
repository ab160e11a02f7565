// The Kafka Streams contender of `python -m benchmarks join`: a stream-table join, each order
// with its customer's row as of the order's time, exactly_once_v2.
//
//   java -cp classes:libs/* JoinRun BOOTSTRAP ORDERS CUSTOMERS DST RECORDS APPLICATION_ID \
//       STATE_DIR INTERVAL_MS WARM_ORDERS WARM_CUSTOMERS WARM_DST WARM_RECORDS [KEY=VALUE ...]
//
// The topology, as Kafka Streams' documentation writes a KStream-KTable join:
//
//   table(CUSTOMERS, Materialized.as("customers"))
//   stream(ORDERS).join(table, (order, row) -> order + "|" + row).to(DST)
//
// keys and values as bytes; the output's value the order's bytes, '|', the row's bytes, as
// eosflow's contender writes it. topology.optimization=all, as an expert sets it for a
// table read from a topic: the table's store is restored from its source topic, not from a
// changelog topic of its own (eosflow's tables have none either). The table and the stream
// are co-partitioned (same partition count, keys partitioned alike), so there is no
// repartition topic; a task reads partition p of both in timestamp order
// (max.task.idle.ms at its default, 0: it waits for a partition with fetched lag, as
// eosflow's sync does). A peek at the stream counts the orders and takes the first one's
// time.
//
// The settings are PassThrough's (one stream thread, the producer's batches 256 KiB, polls
// of up to 10,000 records and as many buffered per partition, auto.offset.reset earliest),
// the internal topics' replication.factor 1, and commit.interval.ms INTERVAL_MS (the
// benchmark's commit interval: Kafka Streams' own default under exactly-once is 100 ms).
// The record cache stays at its default (it changes nothing here: a KStream-KTable join
// forwards each order as it comes). KEY=VALUE pairs are further Streams settings, and
// override these.
//
// CUSTOMERS given as "-" (and WARM_CUSTOMERS with it): the same program without the table,
// the orders passed through into DST as they are -- Kafka Streams' own reference for its
// join, as eosflow's pass-through is eosflow's (reported as kafka-streams-copy).
//
// Warm: the JVM first joins WARM_RECORDS orders of WARM_ORDERS with WARM_CUSTOMERS into
// WARM_DST with an instance of its own (APPLICATION_ID-warm), to its last commit, and closes
// it; only then is the timed instance started.
//
// Once RECORDS orders went through, the group's committed offsets of ORDERS are read every
// 5 ms (Bench.awaitCommitted): the end of the clock, which starts at the first order.
// Prints one JSON line like the Python contenders. Exits 1 if Kafka Streams failed.

import java.time.Duration;
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
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.KeyValueStore;

public final class JoinRun {
  private JoinRun() {}

  /** CUSTOMERS given as this: no table, the orders passed through as they are. */
  static final String COPY = "-";

  static byte[] joined(byte[] order, byte[] row) {
    byte[] out = new byte[order.length + 1 + row.length];
    System.arraycopy(order, 0, out, 0, order.length);
    out[order.length] = '|';
    System.arraycopy(row, 0, out, order.length + 1, row.length);
    return out;
  }

  /** Joins orders with customers into dst (or copies them: customers COPY); returns {first
   * order, offsets committed}. */
  static long[] join(Properties props, String orders, String customers, String dst, long records)
      throws Exception {
    AtomicLong seen = new AtomicLong();
    AtomicLong firstNanos = new AtomicLong();
    StreamsBuilder builder = new StreamsBuilder();
    KStream<byte[], byte[]> stream = builder
        .stream(orders, Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
        .peek((k, v) -> {
          if (seen.getAndIncrement() == 0) {
            firstNanos.set(System.nanoTime());
          }
        });
    if (!customers.equals(COPY)) {
      KTable<byte[], byte[]> table = builder.table(
          customers,
          Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()),
          Materialized.<byte[], byte[], KeyValueStore<Bytes, byte[]>>as("customers"));
      stream = stream.join(table, JoinRun::joined);
    }
    stream.to(dst, Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));
    KafkaStreams streams = new KafkaStreams(builder.build(props), props);
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
      long done = Bench.awaitCommitted(admin, appId, orders, records, alive);
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
    String boot = args[0], orders = args[1], customers = args[2], dst = args[3];
    long records = Long.parseLong(args[4]);
    String appId = args[5], stateDir = args[6];
    String interval = StreamsConfig.COMMIT_INTERVAL_MS_CONFIG + "=" + Long.parseLong(args[7]);
    String warmOrders = args[8], warmCustomers = args[9], warmDst = args[10];
    long warmRecords = Long.parseLong(args[11]);
    // ahead of KEY=VALUE pairs, which may override them (WindowCount says why the
    // replication factor is spelled out)
    String[] extra = new String[args.length - 12 + 3];
    extra[0] = interval;
    extra[1] = StreamsConfig.REPLICATION_FACTOR_CONFIG + "=1";
    extra[2] = StreamsConfig.TOPOLOGY_OPTIMIZATION_CONFIG + "=" + StreamsConfig.OPTIMIZE;
    System.arraycopy(args, 12, extra, 3, args.length - 12);

    if (warmRecords > 0) {
      Properties warm = PassThrough.settings(boot, appId + "-warm", stateDir, extra);
      join(warm, warmOrders, warmCustomers, warmDst, warmRecords);
    }
    Properties props = PassThrough.settings(boot, appId, stateDir, extra);
    long[] t = join(props, orders, customers, dst, records);
    String name = customers.equals(COPY) ? "kafka-streams-copy" : "kafka-streams-join";
    System.out.println(Bench.result(name, records, t[0], t[1]));
    System.out.flush();
  }
}
