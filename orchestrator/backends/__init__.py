"""Back-ends of the distributed seam: where sessions, records, queues and streams are kept.

``memory``: inside one process (the embedded mode). ``redis``: in Redis, shared by any
number of processes; the only package of the ADK core that imports redis-py. Both implement
the interfaces of :mod:`orchestrator.distributed` (stores, session queue, live streams,
wake-ups) and of the session and artifact services.
"""
