"""The tune's card budget per host (pure): `requirements.cards` where the spec writes it (what validate and up's
checks hold every host to), else what the host's own gathered facts count, so a 4-card host is never offered an
8-card layout."""

from __future__ import annotations

from typing import Mapping, Optional

from deployctl.facts.model import HostFacts
from deployctl.spec.rules import DEFAULT_CARDS
from deployctl.spec.schema import written_cards


def counted_cards(platform: str, facts: Optional[HostFacts]) -> Optional[int]:
    """The cards a host's facts count: its GPUs (nvidia-smi) on platform gpu, else its NPUs as the doctor's
    npu_count check counts them (`npu-smi info -l`, else the `npu-smi info` table); None where they do not say."""
    if facts is None or not facts.reachable:
        return None
    if platform == "gpu":
        return len(facts.gpus) if facts.gpus is not None else None
    if facts.npu is not None and not facts.npu.ok:
        return None  # the driver did not answer (dcmi): no count, not zero cards
    return facts.npus_counted()


def card_budget(data: dict, hosts: list[str], facts: Mapping[str, HostFacts]) -> tuple[dict[str, int], str]:
    """({host: cards}, where the counts came from): the spec's requirements.cards for every host when written;
    else each host's counted cards, and the rules' default where its facts say nothing."""
    written = written_cards(data)
    if written is not None:
        return {h: written for h in hosts}, "requirements.cards"
    platform = data.get("platform", "ascend")
    counted = {h: counted_cards(platform, facts.get(h)) for h in hosts}
    budget = {h: DEFAULT_CARDS if n is None else n for h, n in counted.items()}
    unknown = sorted(h for h, n in counted.items() if n is None)
    said = ", ".join(f"{h} {budget[h]}" for h in hosts)
    note = f"; no count from {', '.join(unknown)}: the rules' default {DEFAULT_CARDS}" if unknown else ""
    return budget, f"the hosts' {'GPUs' if platform == 'gpu' else 'NPUs'} ({said}){note}"
