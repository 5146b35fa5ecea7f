"""The in-process back-end: invocation records, session queues and live streams in memory.

What the embedded mode runs on; never imports the Redis back-end.
"""
