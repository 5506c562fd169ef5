"""Docker's image reference grammar (pure): what `docker run`, `docker pull` and a kubelet accept as an image.

The grammar is github.com/distribution/reference's (reference.go, regexp.go: ReferenceRegexp), which Docker and
containerd parse every reference with; a value outside it fails there as "invalid reference format", on a host,
after deployctl has started. Checked here instead, before anything runs."""

from __future__ import annotations

import re
from typing import Optional

from deployctl.spec.show import control_character

# regexp.go, piece by piece (Go's \w is ASCII: re.ASCII below).
_ALPHANUMERIC = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = _ALPHANUMERIC + r"(?:" + _SEPARATOR + _ALPHANUMERIC + r")*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN_NAME = _DOMAIN_COMPONENT + r"(?:\." + _DOMAIN_COMPONENT + r")*"
_IPV6 = r"\[(?:[a-fA-F0-9:]+)\]"
_DOMAIN_AND_PORT = r"(?:" + _DOMAIN_NAME + "|" + _IPV6 + r")(?::[0-9]+)?"
_NAME = r"(?:" + _DOMAIN_AND_PORT + "/)?" + _PATH_COMPONENT + r"(?:/" + _PATH_COMPONENT + r")*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
REFERENCE = re.compile(r"(" + _NAME + r")(?::" + _TAG + r")?(?:@" + _DIGEST + r")?", re.ASCII)
NAME_TOTAL_MAX = 255  # NameTotalLengthMax: the name without its tag and digest
GRAMMAR = "[REGISTRY[:PORT]/]REPOSITORY[:TAG][@DIGEST] (Docker's image reference grammar)"


def image_reference_problem(value: str) -> Optional[str]:
    """Why `value` is no image reference Docker would parse (without quoting it), or None when it is one."""
    char = control_character(value)
    if char is not None:
        return f"contains {char}; an image reference is {GRAMMAR}"
    if any(c.isspace() for c in value):
        return f"contains whitespace; an image reference is {GRAMMAR}"
    found = REFERENCE.fullmatch(value)
    if found is None:
        if REFERENCE.fullmatch(_lower_repository(value)):
            return "the repository name must be lower-case (Docker's image reference grammar)"
        return f"is not an image reference: {GRAMMAR}"
    if len(found.group(1)) > NAME_TOTAL_MAX:
        return f"names a repository longer than {NAME_TOTAL_MAX} characters (Docker's image reference grammar)"
    return None


def _lower_repository(value: str) -> str:
    """The reference with its repository path lower-cased (a registry may hold upper case; a tag too)."""
    first, slash, rest = value.partition("/")
    registry = slash and ("." in first or ":" in first or first == "localhost" or first != first.lower())
    head, tail = (first + "/", rest) if registry else ("", value)
    path, colon, tag = tail.partition(":")
    return head + path.lower() + colon + tag
