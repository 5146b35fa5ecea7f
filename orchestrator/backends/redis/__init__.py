"""The Redis back-end: every key, Lua script, store, queue, stream and service kept in Redis."""
