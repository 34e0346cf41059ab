"""``--engine-path`` through symbolic links: accepted where the package lies in the folder as
written or as resolved; refused naming where the links lead."""
from __future__ import annotations

from pathlib import Path

import pytest

from tokenbudget.harness.vllm.engine import EngineUnavailable, check_imported_from


def test_a_folder_reached_through_a_link_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "real" / "vllm").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    check_imported_from(tmp_path / "link" / "vllm", tmp_path / "link")
    check_imported_from(tmp_path / "real" / "vllm", tmp_path / "link")


def test_a_vllm_that_is_itself_a_link_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "elsewhere" / "vllm").mkdir(parents=True)
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "vllm").symlink_to(tmp_path / "elsewhere" / "vllm")
    check_imported_from(tmp_path / "folder" / "vllm", tmp_path / "folder")


def test_the_refusal_names_where_the_links_lead(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "other" / "vllm").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(EngineUnavailable) as refused:
        check_imported_from(tmp_path / "other" / "vllm", tmp_path / "link")
    message = str(refused.value)
    assert f"not from --engine-path {tmp_path / 'link'} (links to {tmp_path / 'real'})" in message
    assert f"imported from {tmp_path / 'other' / 'vllm'}," in message  # no link: shown once
