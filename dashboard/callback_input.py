"""Dash callback requests from an untrusted browser: malformed ones are answered 4xx, never 500.

Three layers:

1. :func:`body_error` checks the shape of a ``POST _dash-update-component`` body (a JSON object
   naming a known callback, with lists of ``{id, property}`` items) before Dash reads it.
2. :func:`checked` wraps each callback: every argument must have the runtime type its annotation
   allows (``str | None``, ``dict[str, Any] | None``, ``list[...]``, ``int | None`` ...), else
   :class:`BadCallbackInput`.
3. :func:`install`'s error handler: an exception raised while Dash unpacks a request (before the
   callback runs) or fits the callback's result to the request's outputs (after) is the request's
   fault (400, one log line); :class:`BadCallbackInput` is 400; an exception inside a callback is a
   bug: 500 with a one-line JSON body (the traceback goes to the server log only).

>>> body_error({"output": "a.children", "outputs": {"id": "a", "property": "children"},
...             "inputs": [{"id": "b", "property": "value", "value": 1}], "changedPropIds": []}, {"a.children"})
>>> body_error({"output": 3}, {"a.children"})
'"output" must be a string'
"""
from __future__ import annotations

import functools
import logging
import types
import typing
from collections.abc import Callable, Collection
from typing import Any, TypeVar

from flask import Flask, Response, g, jsonify, request
from werkzeug.exceptions import HTTPException

LOG = logging.getLogger("envoy_dissector.dashboard")
DISPATCH_SUFFIX = "_dash-update-component"
#: callback requests are small JSON (a page of grid state, a few ids); uploads use their own route
MAX_CALLBACK_BYTES = 4 * 1024 * 1024
F = TypeVar("F", bound=Callable[..., Any])


class BadCallbackInput(Exception):
    """A callback argument of a type its annotation does not allow."""


def _items_error(value: object, key: str) -> str | None:
    if value is None:
        return None
    items = value if isinstance(value, list) else [value]
    for item in items:
        for one in (item if isinstance(item, list) else [item]):  # pattern-matching inputs nest a list
            if not isinstance(one, dict) or not isinstance(one.get("property"), str) \
                    or not isinstance(one.get("id"), (str, dict)):
                return f'"{key}" must hold {{"id", "property"}} objects'
    return None


def body_error(body: object, known_outputs: Collection[str]) -> str | None:
    """Why ``body`` is not a callback request of this app (``None`` when it is well formed)."""
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    output = body.get("output")
    if not isinstance(output, str):
        return '"output" must be a string'
    if output not in known_outputs:
        return "no such callback"
    for key in ("outputs", "inputs", "state"):
        if (err := _items_error(body.get(key), key)) is not None:
            return err
    if "outputs" not in body or not isinstance(body.get("inputs"), list):
        return '"outputs" and "inputs" are required'
    outputs = body["outputs"]
    multi = output.startswith("..")
    if multi and not (isinstance(outputs, list) and len(outputs) == output.count("...") + 1):
        return '"outputs" must list every output of the callback'
    if not multi and not isinstance(outputs, dict):
        return '"outputs" must be one {"id", "property"} object'
    changed = body.get("changedPropIds", [])
    if not isinstance(changed, list) or not all(isinstance(c, str) for c in changed):
        return '"changedPropIds" must be a list of strings'
    return None


def conforms(value: object, annotation: Any) -> bool:
    """Whether a JSON value fits an annotation: unions, ``Any``, ``list[T]`` and ``dict[str, T]`` (each
    element checked), ``str``/``int``/``float``/``bool``/``None``.

    >>> conforms([{"label": "a", "value": "b"}], list[dict[str, str]] | None), conforms([1], list[dict[str, str]])
    (True, False)
    """
    if annotation is Any:
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(conforms(value, a) for a in typing.get_args(annotation))
    if annotation is None or annotation is type(None):
        return value is None
    if origin is list:
        (inner,) = typing.get_args(annotation) or (Any,)
        return isinstance(value, list) and all(conforms(v, inner) for v in value)
    if origin is dict:
        _, inner = typing.get_args(annotation) or (str, Any)
        return isinstance(value, dict) and all(isinstance(k, str) and conforms(v, inner) for k, v in value.items())
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, annotation) if isinstance(annotation, type) else True


def checked(func: F) -> F:
    """Check each argument against the callback's annotations before it runs (:func:`conforms`)."""
    hints = typing.get_type_hints(func)
    names = list(func.__code__.co_varnames[: func.__code__.co_argcount])

    @functools.wraps(func)
    def wrapper(*args: Any) -> Any:
        g.dissector_callback_running = True
        for name, value in zip(names, args):
            if not conforms(value, hints.get(name, Any)):
                raise BadCallbackInput(f"{name}: a {type(value).__name__} that does not fit {hints.get(name)}")
        out = func(*args)
        g.dissector_callback_running = False  # what fails after this is Dash fitting ``out`` to the request
        return out

    return typing.cast(F, wrapper)


def _bad(text: str) -> tuple[Response, int]:
    return jsonify(error=f"malformed callback request: {text}"), 400


def install(server: Flask, known_outputs: Callable[[], Collection[str]]) -> None:
    """Validate callback requests on ``server`` and answer their failures as described in the module doc."""
    server.config["MAX_CONTENT_LENGTH"] = MAX_CALLBACK_BYTES

    def is_dispatch() -> bool:
        return request.path.endswith(DISPATCH_SUFFIX)

    @server.before_request
    def check_callback_body() -> Any:
        if not is_dispatch() or request.method != "POST":
            return None
        body = request.get_json(silent=True)
        err = body_error(body, known_outputs()) if body is not None else "the body is not JSON"
        return _bad(err) if err else None

    @server.errorhandler(Exception)
    def callback_failure(exc: Exception) -> Any:
        if isinstance(exc, HTTPException):
            return exc
        if not is_dispatch():
            LOG.exception("request to %s failed", request.path)
            return jsonify(error="internal error (see the server log)"), 500
        if isinstance(exc, BadCallbackInput) or not g.get("dissector_callback_running"):
            LOG.warning("refused a malformed callback request (%s: %s)", type(exc).__name__, exc)
            return _bad(type(exc).__name__)
        LOG.exception("callback failed")
        return jsonify(error="the callback failed (see the server log)"), 500


__all__ = ["MAX_CALLBACK_BYTES", "BadCallbackInput", "body_error", "checked", "install"]
