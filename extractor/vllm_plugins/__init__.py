"""extractor's changes to vLLM's internals, entered only through vLLM's plugin door.

vLLM runs every ``vllm.general_plugins`` entry point in each process that runs an engine (its
front end, where ``EngineArgs`` loads them, its engine core and its workers). extractor's
(``pyproject.toml``): ``extractor_hooks`` (:func:`register`, the hooks below) and
``extractor_lifeline`` (``extractor.engines.lifeline``: every process dies with its owner, no patch).
Nothing else in extractor imports this package: the engine marks its requests and sets the
environment, and the hooks read those in vLLM's processes (also under a ``vllm serve`` that has
extractor installed).

The hooks, each kept because it measured paying (``versions`` names what each replaces and the
vLLM releases it was checked on; on another release it is left alone):

- ``masks``: a step's token masks filled by llguidance's thread pool (``EXTRACTOR_MASK_THREADS``).
- ``checks``: vLLM's second compile of each grammar skipped for constraints extractor checked.

Levers that measured losing left the product; their results pages stay: the grammar's forced
tokens as speculative drafts (``bench/results/drafts.md``, 0.75-0.94x), masks filled ahead and
pinned staging (``bench/results/mask_levers.md``, 0.55-0.57x and 0.79-0.84x).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from extractor.vllm_plugins import checks, masks, versions

log = logging.getLogger("vllm.extractor")

INSTALL: dict[versions.Hook, Callable[[], tuple[bool, str]]] = {
    versions.MASKS: masks.install,
    versions.CHECKS: checks.install,
}


def register() -> list[str]:
    """The hook vLLM calls (entry point ``vllm.general_plugins: extractor_hooks``); idempotent.

    Installs each hook checked on the running vLLM that its settings ask for, and logs one line naming
    what was patched and what was left alone, and why. Returns the names of the hooks patched.
    """
    version = versions.installed()
    patched: list[str] = []
    said: list[str] = []
    left: list[str] = []
    for hook in versions.HOOKS:
        if not versions.checked(hook, version):
            left.append(f"{hook.name} (checked on vLLM {', '.join(hook.checked)} only)")
            continue
        done, detail = INSTALL[hook]()
        if done:
            patched.append(hook.name)
            said.append(f"{hook.name} ({hook.replaces}: {detail})")
        else:
            left.append(f"{hook.name} ({detail})")
    log.info(
        "extractor's hooks on vLLM %s: patched %s; left alone %s",
        version,
        "; ".join(said) or "nothing",
        "; ".join(left) or "nothing",
    )
    return patched
