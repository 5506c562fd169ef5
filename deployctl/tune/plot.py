"""The tune plot (pure): a self-contained SVG of goodput against cards, one point per measured candidate (filled
when it met the SLOs), the Pareto front (no other candidate serves more goodput on as few cards) and the winner
ringed. SVG by hand: matplotlib is an optional extra and a plot needs no more than this."""

from __future__ import annotations

from html import escape
from typing import Optional

WIDTH, HEIGHT, PAD = 640, 400, 60


def pareto(records: list[dict]) -> list[dict]:
    """The measured candidates meeting the SLOs that no other beats on goodput with as few cards, by cards."""
    good = [r for r in records if r["status"] == "measured" and r["meets_slo"]]
    front = [r for r in good if not any(o is not r and o["cards"] <= r["cards"] and o["goodput_rps"] > r["goodput_rps"]
                                        for o in good)]
    return sorted(front, key=lambda r: (r["cards"], r["goodput_rps"]))


def tune_svg(records: list[dict], title: str, winner: Optional[str]) -> str:
    measured = [r for r in records if r["status"] == "measured"]
    max_cards = max([r["cards"] for r in measured] + [1])
    max_goodput = max([r["goodput_rps"] for r in measured] + [1e-9])

    def x(cards) -> float:
        return PAD + (WIDTH - 2 * PAD) * cards / max_cards

    def y(goodput) -> float:
        return HEIGHT - PAD - (HEIGHT - 2 * PAD) * goodput / (max_goodput * 1.1)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" '
             f'font-size="11">', f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
             f'<text x="{WIDTH / 2}" y="20" text-anchor="middle" font-size="13">{escape(title)}</text>',
             f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" stroke="black"/>',
             f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{HEIGHT - PAD}" stroke="black"/>',
             f'<text x="{WIDTH / 2}" y="{HEIGHT - 15}" text-anchor="middle">cards</text>',
             f'<text x="15" y="{HEIGHT / 2}" text-anchor="middle" transform="rotate(-90 15 {HEIGHT / 2})">'
             'goodput (req/s within the SLOs)</text>']
    for cards in range(0, max_cards + 1, max(1, max_cards // 8)):
        parts.append(f'<text x="{x(cards):.1f}" y="{HEIGHT - PAD + 15}" text-anchor="middle">{cards}</text>')
    for i in range(5):
        value = max_goodput * 1.1 * i / 4
        parts.append(f'<text x="{PAD - 5}" y="{y(value) + 4:.1f}" text-anchor="end">{value:.3g}</text>')
    front = pareto(records)
    if len(front) > 1:
        points = " ".join(f"{x(r['cards']):.1f},{y(r['goodput_rps']):.1f}" for r in front)
        parts.append(f'<polyline points="{points}" fill="none" stroke="#2a7" stroke-dasharray="4 3"/>')
    for r in measured:
        cx, cy = x(r["cards"]), y(r["goodput_rps"])
        fill = "#2a7" if r["meets_slo"] else "white"
        parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="5" fill="{fill}" stroke="#155"><title>'
                     f'{escape(r["label"])}: {r["goodput_rps"]:.2f} req/s on {r["cards"]} card(s)</title></circle>')
        if r["label"] == winner:
            parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="9" fill="none" stroke="#c33" stroke-width="2"/>')
        parts.append(f'<text x="{cx + 8:.1f}" y="{cy - 8:.1f}">{escape(r["label"])}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
