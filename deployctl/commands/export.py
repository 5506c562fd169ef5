"""`deployctl export SPEC --to k8s|lws|kthena`: the deployment as Kubernetes manifests (no network).

The renderer (deployctl/export/) is pure; this edge loads the spec, locates what cannot be expressed at
file:line, and writes the stream to stdout or one file per object under --out."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from deployctl.errors import ExportError, Problem, UsageError


def run(args, ui) -> int:
    from deployctl.export.flags import check_flags
    from deployctl.export.options import ExportOptions
    from deployctl.export.render import export
    from deployctl.spec.load import load_spec
    from deployctl.ui.export import render_export

    options = ExportOptions(target=args.to, namespace=args.namespace, weights_pvc=args.weights_pvc,
                            weights_hostpath=args.weights_hostpath, secret=args.secret, nic=args.nic,
                            image=args.image, npu_resource=args.npu_resource,
                            npu_stack=args.npu_stack, node_type=args.node_type)
    check_flags(options)  # before the spec is read: a bad flag is bad whatever the spec says
    # ${VAR} values are never needed: a secret becomes a secretKeyRef, so an unset one is no error here
    spec = load_spec(args.spec, unresolved_env="allow")
    if getattr(args, "check", False):
        from deployctl.export.check import check, passed
        from deployctl.ui.export import render_check

        rules = check(spec, options)
        render_check(ui, options, rules)
        return 0 if passed(rules) else 1
    try:
        manifests = export(spec, options)
    except ExportError as error:
        raise ExportError(located(args.spec, error.problems), args.to) from None
    written = write_files(manifests, Path(args.out)) if args.out else None
    render_export(ui, args.to, manifests, written)
    return 0


def write_files(manifests, directory: Path) -> Path:
    """One file per object (`<kind>-<name>.yaml`); other files in the directory are left alone."""
    from deployctl.export.render import to_yaml

    try:
        directory.mkdir(parents=True, exist_ok=True)
        for manifest in manifests:
            (directory / manifest.file).write_text(to_yaml(manifest), encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot write to {directory}: {error.strerror or error}") from None
    return directory


def located(spec_path, problems: list[Problem]) -> list[Problem]:
    """The problems at the line and column of their spec path (the spec was loaded a moment ago)."""
    from deployctl.spec.locate import SyntaxProblem, compose_document

    try:
        document = compose_document(Path(spec_path).read_text(encoding="utf-8"), {}, str(spec_path))
    except (OSError, UnicodeDecodeError, SyntaxProblem):
        return problems
    return [replace(p, file=str(spec_path), line=line, column=column)
            for p in problems for line, column in [document.locate(p.path)]]
