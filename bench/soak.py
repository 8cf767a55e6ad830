"""Soak under faults: the command line of devtools/soak.py, which says what runs and what is checked. For example,
``.venv/bin/python bench/soak.py --minutes 10`` (PostgreSQL on 127.0.0.1:5432, a fresh database) or
``.venv/bin/python bench/soak.py --minutes 2 --store sqlite --clients 8``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from devtools.soak import main  # after the path set-up

if __name__ == "__main__":
    sys.exit(main())
