"""The cyclic garbage collector's settings for the relay server (``runrelay``).

CPython runs a young collection every 700 new container objects and, after enough of those, a full one that walks
every object the process holds: Django's, the modules', the caches of rendered records. The server makes a tuple or
more for every entry it reads, so with the defaults the collector ran all the time and walked the same long-lived
objects again and again: under 50 FETCH clients it held the GIL for about a third of the time (bench/serve.py), and
turning it off altogether gave about 1.2x the events per second. (The worker, ``runbinlog``, keeps the defaults:
these settings made no difference to bench/ingest.py.)

So once a process has started (Django set up, its modules imported), everything alive then is frozen (moved to a
generation no collection walks: it lives as long as the process anyway) and a young collection runs every
:data:`YOUNG_THRESHOLD` allocations instead of 700. Cycles are still collected, a little later; what a collection
walks stays bounded by the threshold, not by the size of the process.
"""

from __future__ import annotations

import gc

#: New container objects between two young collections (CPython's default: 700).
YOUNG_THRESHOLD = 20_000
#: Young collections between two of the middle generation, and those between two full ones (CPython's: 10, 10).
OLDER_THRESHOLDS = (20, 20)


def settle_after_start() -> None:
    """Freezes what start-up made and spaces the collections out; call it once the process is ready to work."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *OLDER_THRESHOLDS)
