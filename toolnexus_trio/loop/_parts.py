"""A run's content parts: the prompt's, held to the cap, and those its tools return.

The prompt's parts go into the transcript in their wire form (the base64 strings shared
with the parts, not copied). A tool's parts stay beside the transcript in a
:class:`PartLedger` (by call id): every later request of the run sends them, the saved
transcript keeps only the tool's text, and a part is held once however many turns follow.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from .._content import (
    ContentPart,
    ContentPartError,
    check_size,
    from_dict,
    get_max_part_bytes,
    oversize_message,
    placeholder,
    summarize,
    text,
)
from ._results import InProcessOptions, Prompt

if TYPE_CHECKING:
    from ..models import ClientOptions  # the HTTP client's options: models sit above

logger = logging.getLogger("toolnexus_trio")


def prompt_content(prompt: Prompt, cap: int | None) -> tuple[str | list[Any], list[Any]]:
    """``(content, summaries)``: a str prompt as it is; a list as its parts' wire forms,
    each held to *cap* (else the process-wide cap) now, before any request."""
    if isinstance(prompt, str):
        return prompt, []
    given: object = prompt  # a caller may pass what the annotation does not allow
    if isinstance(given, bytes | bytearray) or not isinstance(given, Sequence):
        raise TypeError(f"prompt must be a str or a list of parts, not {type(given).__name__}")
    if not prompt:
        raise ValueError("prompt is an empty list of parts")
    content: list[Any] = []
    summaries: list[Any] = []
    for item in prompt:
        if isinstance(item, str):
            item = text(item)
        elif isinstance(item, Mapping):
            item = from_dict(item)
        elif not isinstance(item, ContentPart):
            raise TypeError(f"a prompt part must be a ContentPart, not {type(item).__name__}")
        if item.type != "text":
            check_size(item.size, cap)
            summaries.append(summarize(item))
        content.append(item.to_dict())
    return content, summaries


@attrs.define
class PartLedger:
    """The content parts of one run: what tools returned (by call id), the summaries
    the ``llm`` metric carries, and a refusal to raise before the next model call."""

    by_call: dict[str, tuple[ContentPart, ...]] = attrs.field(factory=dict)
    summaries: list[dict[str, Any]] = attrs.field(factory=list)
    error: ContentPartError | None = None
    logged: bool = False

    def take(
        self,
        call_id: str,
        parts: tuple[ContentPart, ...],
        options: InProcessOptions | ClientOptions,
    ) -> None:
        """Keep a tool's parts; one over the client's ``max_part_bytes`` becomes its
        placeholder text (logged once per run) or, with ``on_unsupported_part="error"``,
        the run's error (raised by the loop, not here, where the turn is still being
        recorded)."""
        strict = getattr(options, "on_unsupported_part", "text") == "error"
        cap = get_max_part_bytes() if options.max_part_bytes is None else options.max_part_bytes
        kept: list[ContentPart] = []
        for p in parts:
            if cap is not None and p.type != "text" and p.size > cap:
                message = oversize_message(p.size, cap)
                if strict and self.error is None:
                    self.error = ContentPartError(message)
                if not self.logged:
                    self.logged = True
                    logger.warning("toolnexus_trio: a tool's %s; sent as text", message)
                p = ContentPart(type="text", text=placeholder(p))
            elif p.type != "text":
                self.summaries.append(summarize(p))
            kept.append(p)
        self.by_call[call_id] = tuple(kept)
