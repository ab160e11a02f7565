// What the Java contenders of `python -m benchmarks run` share with the Python ones: the
// clock's end (benchmarks/_clock.py: the group's committed offsets of the input, read by
// an Admin client every 5 ms once the contender has processed its last record, adding up
// to the record count), the peak RSS, and the one JSON line the harness reads.

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;

final class Bench {
  static final long POLL_MS = 5;
  static final long TIMEOUT_MS = 120_000;

  private Bench() {}

  static Admin admin(String boot) {
    Properties props = new Properties();
    props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, boot);
    return Admin.create(props);
  }

  /** The sum of the group's committed offsets of the topic's partitions. */
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

  /** System.nanoTime() when the group's committed offsets of topic first add up to records;
   * `alive` is asked between polls and ends the wait with an exception when it fails. */
  static long awaitCommitted(Admin admin, String group, String topic, long records, Runnable alive)
      throws Exception {
    long deadline = System.nanoTime() + TIMEOUT_MS * 1_000_000;
    while (System.nanoTime() < deadline) {
      if (committed(admin, group, topic) >= records) {
        return System.nanoTime();
      }
      alive.run();
      Thread.sleep(POLL_MS);
    }
    throw new IllegalStateException(group + "'s offsets did not reach " + records);
  }

  static double peakRssMb() throws Exception {
    for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
      if (line.startsWith("VmHWM:")) {
        return Long.parseLong(line.replaceAll("[^0-9]", "")) / 1024.0; // kB
      }
    }
    return -1;
  }

  static String result(String contender, long records, long firstNanos, long doneNanos)
      throws Exception {
    return String.format(
        "{\"contender\": \"%s\", \"records\": %d, \"seconds\": %.6f, \"rss_peak_mb\": %.1f}",
        contender, records, (doneNanos - firstNanos) / 1e9, peakRssMb());
  }
}
