"""What only eosflow's own tests and benchmarks run, kept apart from the test kit users
import (``eosflow.testing``): the fault matrix and its runner (``_matrix``,
``_matrix_run``), the secured genuine broker's settings and its throwaway PKI
(``_genuine_security``, ``_pki``, ``_identities``; ``GenuineKafka(secured=True)`` imports
them when asked), and Spark clusters started from pyspark's jars (``_spark_clusters``).
Nothing here is a public name; none of it is imported by ``eosflow.testing`` itself."""
