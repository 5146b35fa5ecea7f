"""The Redis back-end: every key, Lua script, store, queue, stream and service kept in Redis.

- :mod:`.keys`: every key name; :mod:`.codec`: the JSON stored; :mod:`.connection`: clients;
- :mod:`.lua` and :mod:`.lua_functions`: how scripts are written and called;
- :mod:`.session_service`, :mod:`.session_scripts`, :mod:`.session_writer`: sessions;
- :mod:`.artifact_service`: artifacts;
- :mod:`.invocation_store`, :mod:`.invocation_lists`, :mod:`.session_queue`, :mod:`.jobs`,
  :mod:`.progress`, :mod:`.streams`, :mod:`.wakeups`, :mod:`.stats`: the distributed
  stores behind the interfaces of :mod:`orchestrator.distributed`.

Importing any of them registers Redis's connection and timeout errors as infrastructure
errors (never an agent's or a tool's outcome).
"""

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from orchestrator.errors import register_infrastructure_errors

# A dropped or timed-out Redis connection (BusyLoadingError, Redis loading its data after a
# restart, is a ConnectionError too) is never an agent's or a tool's outcome.
register_infrastructure_errors(RedisConnectionError, RedisTimeoutError)
