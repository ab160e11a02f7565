"""What only eosflow's own tests and benchmarks run, kept out of the package users install
(the wheel holds ``eosflow/`` alone): the fault matrix and its runner (``_matrix``,
``_matrix_run``), the secured genuine broker and its throwaway PKI (``_genuine_security``:
``SecuredKafka``, which plugs into ``GenuineKafka``'s ``prepare`` seam; ``_pki``,
``_identities``), and Spark clusters started from pyspark's jars (``_spark_clusters``).

It sits beside ``eosflow/`` in the checkout: the tests put the checkout on their path
(``tests/conftest.py``), ``python -m benchmarks`` runs from it, and an ``eosflow run``
child of the matrix's processor is handed it on its PYTHONPATH (``_matrix.run_env``).
Nothing under ``eosflow/`` imports it (``tests/unit/test_house.py``)."""
