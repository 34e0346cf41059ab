"""Each slip of tests/vllm/vllm_slips.py and tests/vllm/encoder_slips.py cites, per release, the line it plants: that line of the
unpacked release holds the slip's text, as its ``occurrence``-th such line, so ``plant`` changes the
line the citation names."""
from __future__ import annotations

from pathlib import Path

import pytest
from encoder_slips import ENCODER_SLIPS
from vllm_slips import SLIPS, Slip

pytestmark = pytest.mark.vllm


def planted_line_number(engine: Path, slip: Slip, release: tuple[int, ...]) -> int:
    """The 1-based number of the line ``plant`` would change in ``engine`` for ``release``."""
    file, old, _ = slip.line_in(release)
    lines = (engine / file).read_text().split("\n")
    hits = [i + 1 for i, line in enumerate(lines) if line.strip() == old]
    assert len(hits) >= slip.occurrence, f"{slip.name}: {file} has {len(hits)} lines {old!r}"
    return hits[slip.occurrence - 1]


@pytest.mark.parametrize(("release", "folder"), [("0.33.0", "vllm033_path"), ("0.34.0", "vllm034_path")])
def test_every_slip_plants_the_line_it_cites(release: str, folder: str, request: pytest.FixtureRequest) -> None:
    engine = request.getfixturevalue(folder)
    numbers = tuple(int(n) for n in release.split("."))
    slips = SLIPS + ENCODER_SLIPS
    cited = {slip.name: dict(slip.at).get(release) for slip in slips}
    planted = {slip.name: planted_line_number(engine, slip, numbers) for slip in slips}
    assert planted == cited
