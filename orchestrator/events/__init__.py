from orchestrator.events.event import Event
from orchestrator.events.event_actions import EventActions, EventCompaction

__all__ = ["Event", "EventActions", "EventCompaction"]
