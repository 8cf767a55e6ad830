"""``python -m binlog``: see binlog.cli."""

import sys

from binlog.cli import main

sys.exit(main())
