"""Model weights: list the source on the control machine, fetch on every host with pre-signed URLs."""

from deployctl.weights.sync import HostReport, manifest_digests, sync_for_up, sync_weights

__all__ = ["HostReport", "manifest_digests", "sync_for_up", "sync_weights"]
