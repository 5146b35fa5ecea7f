"""FunctionTool: wraps a Python function; its signature becomes the JSON schema."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import types as types_module
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pydantic
from google.genai import types

from orchestrator.tools.base_tool import BaseTool
from orchestrator.tools.sync_threads import call_in_tool_thread

if TYPE_CHECKING:
    from orchestrator.agents.context import ToolContext

logger = logging.getLogger(__name__)

_CONTEXT_PARAM = "tool_context"
_EXCLUDED_PARAMS = {"input_stream"}

def is_sync_function(func: Callable[..., Any]) -> bool:
    """True unless ``func`` (or, for a callable object, its ``__call__``) is a coroutine function."""
    return not (inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(
        getattr(func, "__call__", None)  # noqa: B004  (async callable objects)
    ))


_DEFAULT_CALL_DOC = inspect.getdoc(type.__call__)
_DEFAULT_PARTIAL_DOC = inspect.getdoc(functools.partial)


def callable_doc(func: Callable[..., Any]) -> str:
    """The docstring describing ``func`` to the model ("" if none), as google-adk reads it.

    A partial without a docstring of its own is described by the function it wraps; a
    callable object without one (nor its class) by its ``__call__`` method, sync or async.
    """
    doc = inspect.getdoc(func) or ""
    if isinstance(func, functools.partial) and doc == _DEFAULT_PARTIAL_DOC:
        return callable_doc(func.func)
    if dataclasses.is_dataclass(func) and not isinstance(func, type) and doc.startswith(
        type(func).__name__ + "("
    ):
        doc = ""  # the signature @dataclass writes as a docstring, not a description
    if not doc and not inspect.isroutine(func) and not isinstance(func, type):
        call = getattr(func, "__call__", None)  # noqa: B004  (the object's own method)
        doc = (inspect.getdoc(call) or "") if call is not None else ""
    return "" if doc == _DEFAULT_CALL_DOC else doc


def callable_name(func: Callable[..., Any]) -> str:
    """The name a tool backed by ``func`` is declared and called by, as google-adk names it.

    A partial without a ``__name__`` of its own is named after the callable it wraps (two
    partials of different functions must not share a name); a callable object after its
    class.
    """
    if isinstance(func, functools.partial) and not hasattr(func, "__name__"):
        return callable_name(func.func)
    return getattr(func, "__name__", None) or type(func).__name__


def _type_hints(func: Callable[..., Any], *, extras: bool) -> dict[str, Any]:
    """The resolved annotations of ``func``'s parameters ({} if they cannot be resolved).

    A partial's are its function's, a callable object's its ``__call__``'s.
    """
    target: Any = func
    while isinstance(target, functools.partial):
        target = target.func
    if not (inspect.isroutine(target) or isinstance(target, type)):
        target = type(target).__call__  # a callable object: its method
    try:
        return typing.get_type_hints(target, include_extras=extras)
    except Exception:  # unresolvable forward refs: fall back to raw annotations
        return {}


def _union_members(annotation: Any) -> tuple[Any, ...]:
    """``X | None`` and ``Optional[X]`` -> (X, NoneType); anything else -> (annotation,)."""
    if typing.get_origin(annotation) in (typing.Union, types_module.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _is_context_param(param: inspect.Parameter, hints: dict[str, Any]) -> bool:
    # Here, not on load: orchestrator.agents imports the LlmAgent, whose tools import this module.
    from orchestrator.agents.context import Context

    annotation = hints.get(param.name, param.annotation)
    return Context in _union_members(annotation) or param.name == _CONTEXT_PARAM


def _pydantic_model_in(annotation: Any) -> type[pydantic.BaseModel] | None:
    for member in _union_members(annotation):
        if isinstance(member, type) and issubclass(member, pydantic.BaseModel):
            return member
    return None


def _pydantic_list_item_in(annotation: Any) -> type[pydantic.BaseModel] | None:
    """``M`` for ``list[M]`` (or ``list[M] | None``) where ``M`` is a pydantic model."""
    for member in _union_members(annotation):
        if typing.get_origin(member) is list and (args := typing.get_args(member)):
            item = _pydantic_model_in(args[0])
            if item is not None and len(_union_members(args[0])) == 1:
                return item
    return None


def _as_model(model: type[pydantic.BaseModel], value: Any, name: str) -> Any:
    """``value`` validated as ``model`` if it is a dict; left as it is when it does not fit.

    As in google-adk, an argument that does not validate reaches the function unchanged
    (with a warning), so the function can answer the model about it.
    """
    if not isinstance(value, dict):
        return value
    try:
        return model.model_validate(value)
    except pydantic.ValidationError as error:
        logger.warning("Argument %r does not fit %s; passed on as is: %s", name,
                       model.__name__, error)
        return value


def _converted(name: str, value: Any, annotation: Any) -> Any:
    """``value`` of the parameter ``name`` as :meth:`FunctionTool._prepare_args` converts it."""
    members = [m for m in _union_members(annotation) if m is not type(None)]
    if len(members) > 1:
        if all(isinstance(m, type) and issubclass(m, pydantic.BaseModel) for m in members) \
                and isinstance(value, dict):
            try:
                return pydantic.TypeAdapter(typing.Union[tuple(members)]).validate_python(value)
            except pydantic.ValidationError as error:
                logger.warning("Argument %r fits none of %s; passed on as is: %s", name,
                               [m.__name__ for m in members], error)
        return value
    target = members[0] if members else None
    if target is int and type(value) is float and value.is_integer():
        return int(value)  # a number that went through a JSON double
    if typing.get_origin(target) is list and typing.get_args(target)[:1] == (int,) \
            and isinstance(value, list):
        return [int(v) if type(v) is float and v.is_integer() else v for v in value]
    if (model := _pydantic_model_in(target)) is not None:
        return _as_model(model, value, name)
    if (item := _pydantic_list_item_in(target)) is not None and isinstance(value, list):
        return [_as_model(item, v, name) for v in value]
    return value


CONFIRMATION_REQUIRED_ERROR = "This tool call requires confirmation, please approve or reject."
CONFIRMATION_REJECTED_ERROR = "This tool call is rejected."


def confirmation_hint(tool_name: str) -> str:
    """The hint of a confirmation asked for because a tool requires one."""
    return (
        f"Please approve or reject the tool call {tool_name}() by responding with a "
        "FunctionResponse with an expected ToolConfirmation payload."
    )


class FunctionTool(BaseTool):
    """A tool backed by a sync or async Python function."""

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        require_confirmation: bool | Callable[..., Any] = False,
    ) -> None:
        super().__init__(name=callable_name(func), description=callable_doc(func))
        self.func = func
        """The wrapped function."""
        self._require_confirmation = require_confirmation
        self._signature = inspect.signature(func)
        # Read from the function a partial wraps, or a callable object's __call__ (their
        # own annotations are not resolvable). Two readings: plain types to find the
        # context parameter and convert arguments, and with Annotated kept for the
        # declaration (a Field(description=..., ge=...) in it reaches what the model reads).
        self._hints = _type_hints(func, extras=False)
        self._declared_hints = _type_hints(func, extras=True)
        self._context_param = next(
            (p.name for p in self._signature.parameters.values()
             if _is_context_param(p, self._hints)),
            None,
        )
        self._declaration: types.FunctionDeclaration | None = None

    def _model_params(self) -> list[inspect.Parameter]:
        return [
            p for p in self._signature.parameters.values()
            if p.name != self._context_param
            and p.name not in _EXCLUDED_PARAMS
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]

    def _get_declaration(self) -> types.FunctionDeclaration | None:
        """Declare the function: name, whole docstring, and a JSON schema of its parameters.

        A copy each time: a callback that edits the request's declarations edits that
        request's only (as in google-adk).
        """
        if self._declaration is None:
            self._declaration = types.FunctionDeclaration(
                name=self.name,
                description=self.description or None,  # none at all, as google-adk sends it
                parameters_json_schema=_parameters_schema(self.name, self._params_model()),
            )
        return self._declaration.model_copy(deep=True)

    @functools.cached_property
    def _params_model_cached(self) -> type[pydantic.BaseModel]:
        fields: dict[str, Any] = {}
        for p in self._model_params():
            annotation = self._declared_hints.get(p.name, p.annotation)
            if annotation is inspect.Parameter.empty:
                annotation = Any
            default = ... if p.default is inspect.Parameter.empty else p.default
            fields[p.name] = (annotation, default)
        return pydantic.create_model(f"{self.name}Params", **fields)

    def _params_model(self) -> type[pydantic.BaseModel]:
        return self._params_model_cached

    def _missing_mandatory(self, args: dict[str, Any]) -> list[str]:
        return [
            p.name for p in self._model_params()
            if p.default is inspect.Parameter.empty and p.name not in args
        ]

    def _call_kwargs(self, args: dict[str, Any], tool_context: ToolContext) -> dict[str, Any]:
        """The function's keyword arguments: ``args`` prepared, the context where declared."""
        kwargs = self._prepare_args(args)
        if self._context_param:
            kwargs[self._context_param] = tool_context
        return kwargs

    def _prepare_args(self, args: dict[str, Any]) -> dict[str, Any]:
        """The arguments the function is called with, converted as google-adk 2.13 does.

        Only the function's own parameters (an argument the model made up does not reach a
        ``**kwargs``); a dict where a pydantic model (or one of a union of models) is
        annotated becomes that model; a whole float where an ``int`` (or ``list[int]``) is
        annotated becomes an int. What does not fit reaches the function unchanged.
        """
        prepared = {}
        for key, value in args.items():
            if key not in self._signature.parameters or key == self._context_param:
                continue
            prepared[key] = _converted(key, value, self._hints.get(key))
        return prepared

    async def check_require_confirmation(
        self, args: dict[str, Any], tool_context: ToolContext
    ) -> bool:
        """Evaluate ``require_confirmation`` (a bool, or a predicate of the arguments).

        A predicate is called as google-adk calls it: with the arguments the function would
        get, ``tool_context`` included when the function declares it. One that takes only
        the model's arguments, or their dict as one argument, is accepted too.
        """
        rule = self._require_confirmation
        if callable(rule):
            kwargs = self._call_kwargs(args, tool_context)
            if _accepts(rule, kwargs):
                result = rule(**kwargs)
            else:
                result = rule(**args) if _accepts(rule, args) else rule(args)
            if inspect.isawaitable(result):
                result = await result
            return bool(result)
        return bool(rule)

    def never_requires_confirmation(self) -> bool:
        """True if ``require_confirmation`` is off (not a rule to run, nor true)."""
        rule = self._require_confirmation
        return (type(self).check_require_confirmation is FunctionTool.check_require_confirmation
                and not callable(rule) and not rule)

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        """Call the function; a missing mandatory argument returns an error the model can read."""
        missing = self._missing_mandatory(args)
        if missing:
            return {
                "error": (
                    f"Invoking `{self.name}()` failed as the following mandatory input "
                    f"parameters are not present:\n{chr(10).join(missing)}\n"
                    "You could retry calling this tool, but it is IMPORTANT for you to "
                    "provide all the mandatory parameters."
                )
            }
        if await self.check_require_confirmation(args, tool_context):
            # Enforced here too, as google-adk does, for callers of run_async other than the
            # agent's flow (which gates the call before it gets here).
            confirmation = tool_context.tool_confirmation
            if confirmation is None:
                tool_context.request_confirmation(hint=confirmation_hint(self.name))
                tool_context.actions.skip_summarization = True
                return {"error": CONFIRMATION_REQUIRED_ERROR}
            if not confirmation.confirmed:
                return {"error": CONFIRMATION_REJECTED_ERROR}
        kwargs = self._call_kwargs(args, tool_context)
        # A run's own pool, if it has one (a test may hand in any object as the context).
        run_config = getattr(tool_context, "run_config", None)
        pool = getattr(run_config, "tool_thread_pool_config", None)
        return await self._call(kwargs, pool.max_workers if pool is not None else None)

    @property
    def is_sync(self) -> bool:
        """True if the wrapped function is synchronous (it runs in a tool thread)."""
        return is_sync_function(self.func)

    async def _call(self, kwargs: dict[str, Any], threads: int | None = None) -> Any:
        if not self.is_sync:
            return await self.func(**kwargs)
        # A tool thread, so the shared event loop is never blocked.
        result = await call_in_tool_thread(self.func, kwargs, max_workers=threads)
        if inspect.isawaitable(result):
            result = await result
        return result


def _accepts(fn: Callable[..., Any], args: dict[str, Any]) -> bool:
    try:
        inspect.signature(fn).bind(**args)
    except TypeError:
        return False
    return True


def _parameters_schema(name: str, model: type[pydantic.BaseModel]) -> dict[str, Any] | None:
    schema = model.model_json_schema()
    if not schema.get("properties"):
        return None
    return schema
