"""The recipe an image is built from: the vendor's `ascend_vllm/` from the package, or a folder of our own with
the package's two inner zips put beside its Dockerfile (read on the control machine)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from deployctl.errors import UsageError
from deployctl.image.inputs import BuildInputs
from deployctl.image.package import Package


def build_inputs(package: Package, recipe_dir: Optional[str]) -> BuildInputs:
    """A recipe folder gets the two inner zips beside its Dockerfile; the vendor recipe is used as it is."""
    if not recipe_dir:
        return BuildInputs(package, dict(package.recipe))
    root = Path(recipe_dir)
    if not (root / "Dockerfile").is_file():
        raise UsageError(f"image.build.recipe: {recipe_dir} has no Dockerfile")
    files = {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
    files[package.llm_name] = package.llm_zip
    files[package.opp_name] = package.opp_zip
    return BuildInputs(package, files)
