"""Every error turngate raises, each with a stable rule code and an HTTP status hint.

The proxy renders any of these in the caller's own API envelope (see each adapter's
``render_error``), so an official SDK raises its normal exception.

    TurngateError                      rule, status, message
    ├── LocalError                     the client sent something turngate refuses
    │   ├── BadRequestBody             non-JSON, invalid UTF-8, too deep, too large, wrong type
    │   ├── SequenceRejected           the validator refused the message sequence (400)
    │   ├── SequenceWaiting            a tool call has no result yet: nothing is sent (400)
    │   ├── BatchRejected              requests of a batch the checks refuse: nothing is sent (400)
    │   ├── UnsupportedInTarget        the target API cannot carry a block (400)
    │   ├── UnknownKind                a block kind this adapter does not know (400)
    │   ├── ContextLengthExceeded      rendered request + max output exceed the model's window (400)
    │   └── StateConflict              a conflict with recorded state (409)
    │       └── ConversationPaused     a stored graph holds a kind the pinned adapter does not know
    ├── RemoteError                    the upstream provider misbehaved
    │   ├── UpstreamUnavailable        connection refused, reset, timed out (502/504)
    │   └── UpstreamProtocolError      a stream or body that breaks the provider's own rules (502)
    ├── StoreUnavailable               the state store cannot be reached: fail closed (503)
    └── IllegalTransition              a dispatch state change the machine forbids (500)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from turngate.graph.validator import Violation


class TurngateError(Exception):
    """Base of every turngate error: a rule code, an HTTP status hint and a message."""

    rule: str = "turngate_error"
    status: int = 500

    def __init__(self, message: str, *, rule: str | None = None, status: int | None = None):
        super().__init__(message)
        self.message = message
        if rule is not None:
            self.rule = rule
        if status is not None:
            self.status = status

    def __str__(self) -> str:
        return self.message


class LocalError(TurngateError):
    """The request broke a rule; the client must change it."""

    status = 400


class BadRequestBody(LocalError):
    rule = "invalid_body"


class SequenceRejected(LocalError):
    """The validator refused the sequence. Carries every violation."""

    rule = "sequence_rejected"

    def __init__(self, violations: Sequence[Violation], *, status: int = 400):
        self.violations = tuple(violations)
        first = self.violations[0]
        more = len(self.violations) - 1
        suffix = (
            f" (+{more} more: {', '.join(v.rule for v in self.violations[1:])})" if more else ""
        )
        super().__init__(f"turngate: {first.message}{suffix}", rule=first.rule, status=status)


class SequenceWaiting(SequenceRejected):
    """Some tool calls have no result yet; the sequence is not ready to send."""


@dataclass(frozen=True)
class BatchRefusal:
    """One request of a batch and what refuses it."""

    # Where it is in the batch, e.g. ``requests[3]``.
    location: str
    # The name the client gave it (Anthropic's ``custom_id``, Gemini's ``metadata.key``).
    name: str | None
    error: TurngateError

    def describe(self) -> str:
        named = self.location if self.name is None else f"{self.location} ({self.name[:64]!r})"
        return f"{named}: [{self.error.rule}] {self.error.message.removeprefix('turngate: ')}"


class BatchRejected(LocalError):
    """Requests of a batch turngate refuses; the batch is not sent.

    The rule is the first refused request's, so an SDK's message and the
    ``Turngate-Rejection`` header name it; the message names the first ``SHOWN`` refused
    requests with their rules, and each API's envelope lists them all.
    """

    SHOWN = 5

    def __init__(self, refused: Sequence[BatchRefusal], total: int):
        self.refused = tuple(refused)
        parts = [refusal.describe() for refusal in self.refused]
        more = len(parts) - self.SHOWN
        listed = "; ".join(parts[: self.SHOWN]) + (f"; and {more} more" if more > 0 else "")
        rule = self.refused[0].error.rule
        super().__init__(
            f"turngate [{rule}]: {len(parts)} of the batch's {total} requests would be refused, "
            f"so the batch was not sent: {listed}",
            rule=rule,
        )

    def listing(self, code: str) -> list[dict[str, str | None]]:
        """Every refused request as an envelope lists it, its rule under the key ``code``."""
        return [
            {
                "location": refusal.location,
                "custom_id": refusal.name,
                code: refusal.error.rule,
                "message": refusal.error.message,
            }
            for refusal in self.refused
        ]


class UnsupportedInTarget(LocalError):
    rule = "unsupported_in_target"


class UnknownKind(LocalError):
    rule = "unknown_kind"


class ContextLengthExceeded(LocalError):
    """The final rendered request plus its output budget do not fit the model's window."""

    rule = "context_length_exceeded"

    def __init__(
        self,
        message: str,
        *,
        input_tokens: int,
        output_tokens: int,
        limit: int,
        estimated: bool,
        param: str | None = None,
    ):
        super().__init__(message)
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.limit = limit
        self.estimated = estimated
        # The request field the API's own error names (OpenAI's ``param``), if any.
        self.param = param


class StateConflict(LocalError):
    status = 409
    rule = "state_conflict"


class ConversationPaused(StateConflict):
    """The pinned adapter met a block kind it does not know: pause, never join it into text."""

    rule = "conversation_paused"


class RemoteError(TurngateError):
    """The upstream provider did something turngate will not pass on."""

    status = 502


class UpstreamUnavailable(RemoteError):
    rule = "upstream_unavailable"


class UpstreamProtocolError(RemoteError):
    rule = "upstream_protocol_error"


class StoreUnavailable(TurngateError):
    rule = "state_store_unavailable"
    status = 503


class IllegalTransition(TurngateError):
    rule = "illegal_transition"
    status = 500
