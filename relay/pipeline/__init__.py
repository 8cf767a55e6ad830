"""The PySpark usage pipeline over archived binlog files and the change log's files.

``sources``, ``tally``, ``coverage`` and ``progress``'s ChunkBeacon run inside Spark tasks and import neither Django
nor Spark. On the driver: ``session`` starts Spark (master, bind address, a quiet JVM), ``preflight`` checks the
master, the output and the inputs before any work, ``inputs`` lists the files (``identity`` finds copies among
them), ``job`` runs the tasks (``coverage`` tells the change log tasks which lines the binlogs counted),
``aggregate`` adds up their partial sums into the outputs, ``outputs`` writes through Hadoop's file systems,
``report`` says what became of every file and byte, ``load`` writes the summary into the store, ``progress`` prints
a line per stage and chunk.
"""
