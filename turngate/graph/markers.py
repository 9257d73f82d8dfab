"""Role markers and chat-template tokens: what makes untrusted text a ``role_forgery`` finding."""

from __future__ import annotations

import re

# A role name opening a line (after quoting/markdown noise), e.g. "assistant:" or "> Human:".
_LINE_HEAD = re.compile(r"(?i)[ \t>#*]*(assistant|system|developer|human|model|user)[ \t]*:")
_TEMPLATE_MARKERS = re.compile(
    "|".join(
        re.escape(marker)
        for marker in (
            "<|im_start|>",
            "<|im_end|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
            "<|begin_of_text|>",
            "<|endoftext|>",
            "<|system|>",
            "<|user|>",
            "<|assistant|>",
            "<|end|>",
            "<|channel|>",
            "<|message|>",
            "<|start|>",
            "[INST]",
            "[/INST]",
            "<<SYS>>",
            "<start_of_turn>",
            "<end_of_turn>",
        )
    )
)


def forged_role_marker(text: str, *, from_tool: bool) -> str | None:
    """The first role marker or chat-template token in ``text``, if any.

    Cheap on ordinary prose: each line's head is matched only when the text has a colon,
    and the template tokens only when it has a ``<`` or ``[``.
    """
    if ":" in text:
        for line in text.splitlines():
            match = _LINE_HEAD.match(line, 0, 48)
            if match and (from_tool or match.group(1).lower() != "user"):
                return match.group(0).strip()
    if "<" in text or "[" in text:
        found = _TEMPLATE_MARKERS.search(text)
        if found:
            return found.group(0)
    return None
