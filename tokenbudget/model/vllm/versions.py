"""The vLLM version table: what differs between the modelled vLLM versions' budget paths."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class VllmVersion:
    """The budget-path facts of one vLLM version that differ between versions."""

    version: str
    table: str  # the method table, a key of ``methods.TABLES``
    validation_reserves_lookahead: bool  # config check B > L (True) or B > d (False)
    draft_pass_caps_seqs: bool  # DFlash/DSpark admit at most B // L sequences into RUNNING
    self_preemption_ends_pass: bool  # priority: a request that preempts itself ends the running pass
    caches_blocks_at_output: bool  # with speculation, a decode's output publishes its completed blocks
    stop_cuts_computed: bool  # a stop that cuts output tokens takes them off the computed count too
    release: str  # the release the row was read from

    def __post_init__(self) -> None:
        assert self.table.startswith("vllm-"), self.table


VLLM_VERSIONS: Mapping[str, VllmVersion] = {
    # version:  method table  B > L  B // L cap  self-preemption ends pass  cache at output  stop cuts computed  release
    "0.32": VllmVersion("0.32", "vllm-0.32", False, False, True, False, False, "0.32.0"),
    "0.33": VllmVersion("0.33", "vllm-0.33", True, True, False, True, True, "0.33.0"),
}
MODELLED: tuple[str, ...] = tuple(VLLM_VERSIONS)
NEWEST = MODELLED[-1]
DRAFT_PASS_METHODS = ("dflash", "dspark")  # the methods that draft in a pass of their own (0.33)


def rules_for(version: str | None, table: str) -> VllmVersion:
    """The row of ``version``; without one (a policy with no version table) the row whose
    method table is ``table``, else the newest."""
    if version is not None:
        return VLLM_VERSIONS[version]
    return next((row for row in VLLM_VERSIONS.values() if row.table == table), VLLM_VERSIONS[NEWEST])


def _key(version: str) -> tuple[int, ...]:
    """'0.33.0rc1.dev5+g1234' -> (0, 33, 0): the leading numeric release parts."""
    parts = []
    for piece in version.split("+")[0].split("."):
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
        if digits != piece:
            break
    return tuple(parts)


def modelled_version(version: str) -> str | None:
    """The modelled 'MAJOR.MINOR' a release string belongs to ('0.33.0' -> '0.33'), or None."""
    key = _key(version)[:2]
    return next((v for v in MODELLED if _key(v) == key), None)


def nearest_version(version: str) -> str:
    """The modelled version closest to ``version``: its own, else the newest modelled one at
    or below it, else the oldest (a release string with no number is taken as the newest)."""
    own = modelled_version(version)
    if own is not None:
        return own
    key = _key(version)[:2]
    if not key:
        return NEWEST
    below = [v for v in MODELLED if _key(v) <= key]
    return below[-1] if below else MODELLED[0]
