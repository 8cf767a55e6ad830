"""The PySpark usage pipeline over archived binlog files and the change log's files.

``sources`` and ``tally`` run inside Spark tasks and import neither Django nor Spark; ``job`` builds the Spark job,
``load`` writes its summary into the store, ``progress`` prints a line per stage.
"""
