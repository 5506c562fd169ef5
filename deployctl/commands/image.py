"""`deployctl image build`."""

from deployctl.errors import ExitStatus


def build(args, ui) -> int:
    from deployctl import deploy
    from deployctl.image.stage import image_build, load_inputs, render
    from deployctl.spec.load import load_spec

    spec = load_spec(args.spec)
    inputs = load_inputs(spec)  # the package is checked before any host is touched
    hosts = spec.used_hosts or spec.hosts
    with deploy.connected(spec, options=deploy.connect_options(args, ui), hosts=hosts) as transports:
        document = image_build(spec, transports, ui, dry_run=args.dry_run, inputs=inputs)
    render(ui, document, dry_run=args.dry_run)
    return ExitStatus.OK
