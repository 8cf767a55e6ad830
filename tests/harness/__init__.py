"""Real services for the tests: a private MariaDB with the binlog on, and PostgreSQL."""
