"""Dispatching an open call's job again, from the log alone (recovering after a crash).

An orchestrator that dies between committing a call and publishing its job leaves a call
the log says is open and no worker will ever answer. Whoever recovers the invocation
rebuilds the job from the call event (the tool's call, or a ParallelAgent's branch
dispatch) and submits it with the same call id. Transports submit a call's job once (see
:meth:`~orchestrator.distributed.transport.Transport.submit`), so a job that did go out is
not sent twice.

A call of a tool with a confirmation rule goes out again only with its approved
confirmation (the ledger's), which its job carries to the tool: without one, only the
confirmation gate may decide on it (see :mod:`orchestrator.flows.step_resume`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from orchestrator import failpoints
from orchestrator.agents.llm_agent import LlmAgent
from orchestrator.agents.remote_branches import branch_jobs
from orchestrator.distributed.ledger import CallEntry
from orchestrator.distributed.transport import tool_queue
from orchestrator.flows.contents import RUN_BRANCH
from orchestrator.flows.remote_calls import tool_job
from orchestrator.runner_routing import original_user_content
from orchestrator.sessions.session import Session

if TYPE_CHECKING:
    from orchestrator.runners import Runner
    from orchestrator.tools.tool_confirmation import ToolConfirmation

logger = logging.getLogger(__name__)


async def redispatch(
    runner: Runner, session: Session, invocation_id: str, entry: CallEntry,
    confirmation: ToolConfirmation | None = None,
) -> bool:
    """Submit ``entry``'s job again if it is a call the orchestrator sends to workers.

    ``confirmation``: the approved answer to the call's confirmation request, if any; the
    job carries it (``tool_context.tool_confirmation`` on the worker). Returns False for
    calls that have no job: a confirmation request, a long-running call waiting for an
    outside answer, a tool the agent no longer has or that is not routed to workers, a call
    that may need a confirmation and has none.
    """
    transport = runner.transport
    if transport is None:
        return False
    agent = runner.agent.find_agent(entry.event.author)
    if agent is None:
        return False
    user_content = original_user_content(session, invocation_id)
    if entry.name == RUN_BRANCH:
        sub_name = (entry.call.args or {}).get("agent")
        sub = next((s for s in agent.sub_agents if s.name == sub_name), None)
        queue = (transport.route_agent(sub) if sub is not None else None) or transport.route_agent(agent)
        if sub is None or not queue:
            return False
        [job] = branch_jobs(session, invocation_id, agent, [(sub, entry.call, queue)], user_content)
        await transport.submit_agent(job)
    else:
        if not isinstance(agent, LlmAgent):
            return False
        tool = {t.name: t for t in await agent.canonical_tools(None)}.get(entry.name)
        queue = tool_queue(transport, tool) if tool is not None else None
        if tool is None or not queue:
            return False
        if confirmation is None and not tool.never_requires_confirmation():
            return False  # the gate decides on it, when the agent's step is recovered
        await transport.submit(tool_job(
            session, invocation_id, agent.name, entry.event.branch, entry.call, queue, user_content,
            confirmation, tool,
        ))
    failpoints.hit("recovery.redispatched")  # the job is out again; the run not recovered yet
    logger.info("Call %s of invocation %s dispatched again (recovery)", entry.id, invocation_id)
    return True
