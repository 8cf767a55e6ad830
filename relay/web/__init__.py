"""The web side: the dashboard's pages, the JSON API, ``/metrics``, their parameter forms and chart geometry, and
the read-side queries they share (overview, clients, table usage, schema). Nothing here writes to the queues."""
