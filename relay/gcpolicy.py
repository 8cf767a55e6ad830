"""The cyclic garbage collector's pace in the relay server (``runrelay``).

CPython runs a young collection every 700 new container objects, and a collection of the older generations after
every ten of those. The server makes several container objects for every entry it reads (the driver's rows, the
entries, the records it keeps), so at CPython's pace a young collection ran every hundred-odd entries and the older
generations, where the kept records and everything else long-lived sit, were walked again every few thousand. At the
pace below, the same work is a fraction of the cost: FETCH with one client went from 129-135 k to 160-164 k events/s
and the server's CPU per event from 6.0 to 5.0 µs (bench/serve.py's FETCH, both paces alternated in the same hour).

Cycles are still collected, a little later; a young collection walks at most what was made since the last one.
Freezing what start-up made (``gc.freeze``) was measured too and added nothing here. The worker (``runbinlog``)
keeps CPython's pace: this one made no difference to bench/ingest.py.
"""

from __future__ import annotations

import gc

#: New container objects between two young collections (CPython's default: 700).
YOUNG_THRESHOLD = 20_000
#: Young collections between two of the middle generation, and those between two full ones (CPython's: 10, 10).
OLDER_THRESHOLDS = (20, 20)


def space_out_collections() -> None:
    """Sets the collector's pace for a long-running server; call it once, at start."""
    gc.set_threshold(YOUNG_THRESHOLD, *OLDER_THRESHOLDS)
