"""The kubelet's `$(VAR)` expansion in a container's command, args and env values (pure).

Kubernetes replaces `$(VAR)` there with a variable defined before it and reads `$$` as `$`
(k8s.io/kubernetes third_party/forked/golang/expansion/expand.go), where `docker run`, which `up` uses, passes
every word as written. So each value from the spec is escaped, and only what deployctl writes on purpose in that
syntax (`$(POD_IP)`, a worker's `sh -c` script) is `Expanded` and written as it is."""

from __future__ import annotations


class Expanded(str):
    """Text already in the kubelet's syntax: deployctl's own `$(VAR)` references, or text escaped already."""


def kubelet_text(text: str) -> str:
    """What to write so that the container gets `text`: every `$` doubled (then no `$(` or `$$` is read as
    syntax, wherever the text ends up joined), an Expanded text as it is."""
    return str(text) if isinstance(text, Expanded) else text.replace("$", "$$")


def references(text: str, name: str) -> bool:
    """True when deployctl's own text refers to the variable `name` (it must then be defined before it)."""
    return isinstance(text, Expanded) and f"$({name})" in text
