"""export(spec, options) -> the objects, then deterministic YAML (pure): same spec, same flags, same bytes."""

from __future__ import annotations

from dataclasses import dataclass, replace

import yaml

from deployctl.errors import ExportError
from deployctl.export.flags import check_flags
from deployctl.export.options import ExportOptions
from deployctl.export.refusals import problems
from deployctl.export.stacks import place
from deployctl.export.targets import BUILDERS
from deployctl.servers import flavour_of
from deployctl.spec.model import Spec


@dataclass(frozen=True)
class Manifest:
    kind: str
    name: str
    body: dict

    @property
    def file(self) -> str:
        """Its file with `--out DIR`: kind and name, unique among one export's objects."""
        return f"{self.kind.lower()}-{self.name}.yaml"

    def to_json(self, written: bool) -> dict:
        return {"kind": self.kind, "name": self.name, "file": self.file if written else None}


def export(spec: Spec, options: ExportOptions) -> tuple[Manifest, ...]:
    """The objects in a fixed order (config, workloads, Services); ExportError naming the spec path of everything
    the target cannot express (unlocated: the command adds file:line); FlagError for a flag Kubernetes refuses."""
    check_flags(options)
    spec = flavour_of(spec).export_spec(spec, options.stack)
    found = problems(spec, options)
    if found:
        source = str(spec.source) if spec.source else "spec"
        raise ExportError([replace(p, file=source) for p in found], options.target)
    bodies = BUILDERS[options.target](spec, options)
    if spec.platform == "ascend":
        place(bodies, options.stack, options.device_resource, spec.requirements.cards, options.node_type)
    return tuple(Manifest(body["kind"], body["metadata"]["name"], body) for body in bodies)


def to_yaml(manifest: Manifest) -> str:
    """Block style, keys in the order the renderer wrote them, never folded (a folded argv word is hard to read)."""
    return yaml.dump(manifest.body, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                     width=1 << 30, allow_unicode=True)


class Block(str):
    """A multi-line text written as a YAML literal block (`|`), as a person would read it: a program in a
    ConfigMap."""


class _Dumper(yaml.SafeDumper):
    """No `&id001` anchors where the renderer reuses one dict (the probes' httpGet): each object reads alone."""

    def ignore_aliases(self, data) -> bool:
        return True


_Dumper.add_representer(Block, lambda dumper, text: dumper.represent_scalar("tag:yaml.org,2002:str", str(text),
                                                                            style="|"))


def stream(manifests: tuple[Manifest, ...]) -> str:
    """One YAML stream, a document per object."""
    return "".join(f"---\n{to_yaml(m)}" for m in manifests)
