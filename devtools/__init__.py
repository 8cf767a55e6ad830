"""Development tools, outside the Django app's import path: the end-to-end demo (``scripts/demo``), the private
MariaDB sandbox that the demo, the tests and the benchmarks start, and the soak engine."""
