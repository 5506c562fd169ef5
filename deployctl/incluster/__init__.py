"""Programs that run inside exported pods (standard library only), shipped as a ConfigMap's text and run by the
server image's own python: the vendor's image has no deployctl."""
