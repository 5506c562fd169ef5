"""`deployctl diagnose`: from every host of the spec at once, what an engineer attaches to an issue, in one
redacted tar.gz with a summary and hints; `bundle_after_failure` is what a failed `up` calls."""

from __future__ import annotations

from pathlib import Path

from deployctl.errors import ExitStatus


def run(args, ui) -> int:
    from deployctl.diagnose.collect import write_bundle
    from deployctl.hosts import connect_options
    from deployctl.spec.load import load_spec
    from deployctl.transport.connect import close_all, open_transports
    from deployctl.ui.diagnose import render_diagnose

    spec = load_spec(args.spec, unresolved_env="allow")  # nothing is sent; known secret values are redacted
    options = connect_options(args, ui)
    from deployctl.hosts import know_secrets

    know_secrets(spec)  # the hosts' words in errors and hints, as in the bundle
    transports, errors = open_transports(spec.hosts, accept_new_host_keys=options.accept_new_host_keys,
                                         connect_timeout=options.timeout, on_wait=options.on_wait)
    try:
        if errors and not transports:  # nothing to collect from: the first host's error, the others beside it
            first = next(iter(errors.values()))
            if len(errors) > 1:
                first.message += " (also: " + "; ".join(e.message for e in list(errors.values())[1:]) + ")"
            raise first
        for error in errors.values():
            ui.info(f"not collected: {error.message}")
        result = write_bundle(spec, transports, lines=args.lines, out=Path(args.out) if args.out else None,
                              unreachable_hosts={name: e.message for name, e in errors.items()})
    finally:
        close_all(transports)
    render_diagnose(ui, result)
    return ExitStatus.OK


def bundle_after_failure(spec, transports, error, ui) -> None:
    """A failed `up`: write the bundle (the error it ended with at the top), say where and the top hints, and
    attach both to the error for its JSON document. Whatever goes wrong here is said, never raised: the real
    error must reach the user."""
    from deployctl.diagnose.signatures import top_hints
    from deployctl.ui.diagnose import render_bundle_after_failure, render_bundle_failed

    try:
        from deployctl.diagnose.collect import write_bundle

        result = write_bundle(spec, transports, context={"up-error.txt": _error_text(error)})
    except KeyboardInterrupt:  # Ctrl-C while collecting stops the bundle, not the report of the real error
        render_bundle_failed(ui, "interrupted")
        return
    except Exception as exc:  # noqa: BLE001 — the deploy's own error matters more than the bundle's
        render_bundle_failed(ui, getattr(exc, "message", None) or str(exc) or type(exc).__name__)
        return
    render_bundle_after_failure(ui, result)
    try:
        error.diagnose = {"bundle": str(result.path), "hints": [h.to_json() for h in top_hints(list(result.hints))]}
    except AttributeError:
        pass


def _error_text(error) -> str:
    lines = error.lines() if hasattr(error, "lines") else [str(error)]
    hint = getattr(error, "hint", None)
    return "\n".join(lines + ([f"hint: {hint}"] if hint else [])) + "\n"
