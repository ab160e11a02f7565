"""``python -m benchmarks COMMAND [options]``: the benchmark entry point. Commands:

- ``run``: eosflow vs aiokafka and librdkafka loops, quixstreams and Kafka Streams, on the
  test cluster or ``--broker genuine`` (``compare.py``);
- ``cluster``: the test cluster under an aiokafka exactly-once loop (``cluster_throughput.py``);
- ``spark``: the Spark path against plain Python (``spark_overhead.py``);
- ``spark-payoff``: a heavy transform end to end, Spark local and standalone against plain
  Python (``spark_payoff.py``);
- ``outage``: log lines per minute of a broker outage (``outage_noise.py``);
- ``stress``: exactly once across rebalances with work done ahead (``stress_rebalance.py``);
- ``fault-sweep``: the full fault matrix, one outcome line per case (``fault_sweep.py``);
- ``state``: the stateful count against the pass-through and quixstreams, memory over a
  million keys and the restore of a million changelog records (``state_bench.py``);
- ``state-engines``: SQLite, RocksDB and LMDB as the local copy (``state_engines.py``);
- ``metrics``: the pass-through with every operations feature off, then on
  (``metrics_overhead.py``);
- ``txn-end``: latency, commit rate and throughput per ``min_transaction_s`` (``txn_end.py``);
- ``rolling``: a rolling restart under each group protocol, the work it redoes
  (``rolling_restart.py``);
- ``offset-visibility``: how long a transaction's offsets stay invisible to a plain
  offset fetch after EndTxn, the window ``post_commit_delay_s`` covers
  (``offset_visibility.py``);
- ``timers``: a million event-time timers set and fired, and the restore of a million
  pending (``timers_bench.py``);
- ``join``: a stream-table join against the pass-through and Kafka Streams' KStream-KTable
  join, and the restore of a million-row table (``join_bench.py``);
- ``sink``: exactly once into PostgreSQL against the plain at-least-once loops on asyncpg
  and psycopg, and the pass-through (``sink_bench.py``);
- ``join-latency``: a stream-table join's latency per ``Table.max_idle_s`` and table
  update rate (``join_latency.py``);
- ``kip939``: what genuine Kafka answers at each step of a KIP-939 two-phase commit
  (prepare, client death, KeepPreparedTxn, completion), with and without the broker
  setting (``kip939_probe.py``);
- ``typed``: typed records -- pydantic models as JSON and Avro through a schema registry --
  against the bytes pass-through, quixstreams' JSON pipeline and a confluent-kafka Avro
  loop, every output checked, and each codec's cost per record (``typed_bench.py``);
- ``regroup``: counting by another key through a repartition topic -- an eosflow pipeline
  against Kafka Streams' ``groupBy().count()``, quixstreams' ``group_by`` and eosflow's
  single-stage count (``regroup_bench.py``);
- ``console-cost``: what an open console page costs an app, each part timed alone on the
  CPU and summed per second (``console_cost.py``).

Options after the command go to that benchmark (``--help`` lists them).
"""

import runpy
import sys

COMMANDS = {
    "run": "benchmarks.compare",
    "cluster": "benchmarks.cluster_throughput",
    "spark": "benchmarks.spark_overhead",
    "spark-payoff": "benchmarks.spark_payoff",
    "outage": "benchmarks.outage_noise",
    "stress": "benchmarks.stress_rebalance",
    "fault-sweep": "benchmarks.fault_sweep",
    "state": "benchmarks.state_bench",
    "state-engines": "benchmarks.state_engines",
    "metrics": "benchmarks.metrics_overhead",
    "txn-end": "benchmarks.txn_end",
    "rolling": "benchmarks.rolling_restart",
    "offset-visibility": "benchmarks.offset_visibility",
    "timers": "benchmarks.timers_bench",
    "join": "benchmarks.join_bench",
    "sink": "benchmarks.sink_bench",
    "kip939": "benchmarks.kip939_probe",
    "join-latency": "benchmarks.join_latency",
    "typed": "benchmarks.typed_bench",
    "regroup": "benchmarks.regroup_bench",
    "console-cost": "benchmarks.console_cost",
}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(f"usage: python -m benchmarks {{{'|'.join(COMMANDS)}}} [options]")
    module = COMMANDS[sys.argv[1]]
    sys.argv = [module, *sys.argv[2:]]
    runpy.run_module(module, run_name="__main__")
