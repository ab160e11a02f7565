// Kafka's own exactly-once copier as a contender of `python -m benchmarks run`:
// org.apache.kafka.tools.TransactionalMessageCopier (kafka-tools), run as it ships.
//
//   java -cp classes:libs/* CopierRun BOOTSTRAP SRC DST RECORDS GROUP TXN_RECORDS \
//       WARM_SRC WARM_DST WARM_RECORDS
//
// It is what Kafka's own exactly-once system tests run: a consumer in GROUP (--group-mode,
// classic protocol, read_committed, max.poll.records = --transaction-size) and a
// transactional producer; each poll's records are one transaction, committed with
// sendOffsetsToTransaction and the consumer's group metadata (--use-group-metadata). Its
// settings are its own and cannot be changed from outside: notably 512-byte producer
// batches, "to ensure that we have multiple inflight requests per transaction". It prints
// a JSON status line per poll; they are read here, never shown.
//
// Warm, like Kafka Streams: the copier first copies WARM_RECORDS of WARM_SRC to WARM_DST
// in this JVM (GROUP-warm), then the timed copy runs. Kafka 4.4's copier ends through
// Kafka's own Exit, whose exit procedure is replaced here (as Kafka's tests do), so that
// its main returns instead of ending the JVM.
//
// The clock: from the timed copier's assignment (its RebalanceComplete line: after its
// positions and end offsets are known, before its first fetch) to the group's committed
// offsets adding up to RECORDS, read every 5 ms (Bench.awaitCommitted) once a status line
// shows that the last transaction may be under way. It has no hook at its first record, so
// its clock includes one fetch more than the others' (a round trip on loopback).

import java.io.ByteArrayOutputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.util.concurrent.CountDownLatch;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.kafka.clients.admin.Admin;

public final class CopierRun {
  private static final Pattern REMAINING = Pattern.compile("\"remaining\":(\\d+)");
  private static volatile int exitStatus = -1;

  /** The copier's stdout, line by line: the start of the clock and the near end. */
  static final class Status extends OutputStream {
    private final ByteArrayOutputStream line = new ByteArrayOutputStream();
    private final long txnRecords;
    volatile long assignedNanos;
    final CountDownLatch nearEnd = new CountDownLatch(1);

    Status(long txnRecords) {
      this.txnRecords = txnRecords;
    }

    @Override
    public synchronized void write(int b) {
      if (b != '\n') {
        line.write(b);
        return;
      }
      String s = line.toString();
      line.reset();
      if (assignedNanos == 0 && s.contains("RebalanceComplete")) {
        assignedNanos = System.nanoTime();
      }
      Matcher m = REMAINING.matcher(s);
      if (assignedNanos != 0 && s.contains("ProcessLoop") && m.find()
          && Long.parseLong(m.group(1)) <= txnRecords) {
        nearEnd.countDown();
      }
    }
  }

  /** Kafka's Exit (org.apache.kafka.common.utils.internals in 4.x) records the status. */
  private static void trapExit() throws Exception {
    Class<?> exit = Class.forName("org.apache.kafka.common.utils.internals.Exit");
    Class<?> procedure = Class.forName(exit.getName() + "$Procedure");
    Object trap = Proxy.newProxyInstance(
        procedure.getClassLoader(), new Class<?>[] {procedure}, (proxy, method, a) -> {
          if (method.getName().equals("execute")) {
            exitStatus = (Integer) a[0];
          }
          return null;
        });
    Method set = exit.getMethod("setExitProcedure", procedure);
    set.invoke(null, trap);
  }

  private static void copier(String boot, String src, String dst, String group, long txnRecords)
      throws Exception {
    exitStatus = -1;
    org.apache.kafka.tools.TransactionalMessageCopier.main(new String[] {
      "--broker-list", boot, "--input-topic", src, "--input-partition", "0",
      "--output-topic", dst, "--consumer-group", group, "--transactional-id", group,
      "--transaction-size", Long.toString(txnRecords), "--group-mode", "--use-group-metadata",
    });
    if (exitStatus != 0) {
      throw new IllegalStateException("TransactionalMessageCopier exited " + exitStatus);
    }
  }

  public static void main(String[] args) throws Exception {
    String boot = args[0], src = args[1], dst = args[2];
    long records = Long.parseLong(args[3]);
    String group = args[4];
    long txnRecords = Long.parseLong(args[5]);
    String warmSrc = args[6], warmDst = args[7];
    long warmRecords = Long.parseLong(args[8]);

    PrintStream out = System.out;
    trapExit();
    if (warmRecords > 0) {
      System.setOut(new PrintStream(new Status(txnRecords), true));
      copier(boot, warmSrc, warmDst, group + "-warm", txnRecords);
    }
    Status status = new Status(txnRecords);
    System.setOut(new PrintStream(status, true));
    long[] done = {0};
    Exception[] failed = {null};
    try (Admin admin = Bench.admin(boot)) {
      Thread watcher = new Thread(() -> {
        try {
          status.nearEnd.await();
          done[0] = Bench.awaitCommitted(admin, group, src, records, () -> {});
        } catch (Exception e) {
          failed[0] = e;
        }
      }, "watcher");
      watcher.start();
      copier(boot, src, dst, group, txnRecords);
      status.nearEnd.countDown(); // the copier is done: its offsets are committed or never
      watcher.join();
    }
    if (failed[0] != null) {
      throw failed[0];
    }
    out.println(Bench.result("kafka-copier", records, status.assignedNanos, done[0]));
    out.flush();
    System.exit(0);
  }
}
