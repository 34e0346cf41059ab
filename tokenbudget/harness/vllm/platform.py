"""The platform vLLM checks the harness's config against. The harness builds only the
``Scheduler`` and its ``VllmConfig``; no model, kernel or Triton ever runs. From 0.34, vLLM's
CPU platform refuses any config on an x86 CPU without Triton (SPEC.md §13.1), so there the
harness takes the platform vLLM itself takes when it detects no device, ``UnspecifiedPlatform``,
whose config check is a no-op. vLLM's files are never changed."""
from __future__ import annotations

import platform as host

from ...model.vllm.versions import release_key

TRITON_REFUSAL_FROM = (0, 34)  # vllm/platforms/cpu.py:240-243 (vLLM 0.34.0): x86 without Triton raises RuntimeError
X86_MACHINES = ("x86_64", "amd64", "i386", "i686")  # vllm/platforms/interface.py:1182 (vLLM 0.34.0)


def cpu_platform_refuses(release: str, platform_qualname: str, has_triton: bool) -> bool:
    """Whether vLLM ``release``'s platform ``platform_qualname`` refuses every config here."""
    is_cpu = platform_qualname.rsplit(".", 1)[-1] in ("CpuPlatform", "ZenCpuPlatform")
    x86 = host.machine().lower() in X86_MACHINES
    return is_cpu and x86 and not has_triton and release_key(release)[:2] >= TRITON_REFUSAL_FROM


def choose_scheduler_platform() -> str | None:
    """Before vLLM's config modules bind the platform: if the platform vLLM would resolve
    refuses every config here, make vLLM's ``UnspecifiedPlatform`` the current platform (the
    platform of vllm/platforms/__init__.py:290 (vLLM 0.34.0), set where vLLM's lazy
    resolution keeps it, :315-318). Returns the name of the platform chosen, or None when
    vLLM's own choice stands, the platform is resolved already or this vLLM has no such module
    (the scheduler's import then says what is missing)."""
    import vllm

    try:
        import vllm.platforms as platforms
    except ImportError:
        return None
    if getattr(platforms, "_current_platform", True) is not None:
        return None
    qualname = platforms.resolve_current_platform_cls_qualname()
    from vllm.triton_utils import HAS_TRITON  # resolves the platform: vLLM's own choice, replaced below

    if not cpu_platform_refuses(str(vllm.__version__), qualname, bool(HAS_TRITON)):
        return None
    from vllm.platforms.interface import UnspecifiedPlatform

    platforms._current_platform = UnspecifiedPlatform()
    return "UnspecifiedPlatform"
