"""The Redis back-end: every key, Lua script, store, queue, stream and service kept in Redis.

- :mod:`.keys`: every key name; :mod:`.codec`: the JSON stored; :mod:`.connection`: the
  clients;
- :mod:`.lua`: how a script declares and receives its operands; :mod:`.lua_functions`: the
  Lua functions several scripts include;
- sessions: :mod:`.session_service`, its scripts (:mod:`.session_scripts`), its reads
  (:mod:`.session_reads`) and the leased writer (:mod:`.session_writer`); artifacts:
  :mod:`.artifact_service`;
- behind the interfaces of :mod:`orchestrator.distributed`: :mod:`.invocation_store` (and
  :mod:`.invocation_scripts`, :mod:`.invocation_lists`), :mod:`.session_queue` (and
  :mod:`.session_queue_scripts`), :mod:`.streams`, :mod:`.wakeups`; the job journal
  (:mod:`.jobs`, :mod:`.progress`) and the metrics' snapshot (:mod:`.stats`).

Nothing outside this package (and the process entry points in ``workers/``) imports
redis-py. Importing any of these modules registers Redis's connection and timeout errors
as infrastructure errors (never an agent's or a tool's outcome).
"""

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from orchestrator.errors import register_infrastructure_errors

# A dropped or timed-out Redis connection (BusyLoadingError, Redis loading its data after a
# restart, is a ConnectionError too) is never an agent's or a tool's outcome.
register_infrastructure_errors(RedisConnectionError, RedisTimeoutError)
