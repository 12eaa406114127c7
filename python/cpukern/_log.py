"""Which variant each op selected, and why, on logging.getLogger("cpukern") at INFO: once
per op and selection (the first prepare of each op, and again only when another variant or
reason comes up). CPUKERN_VERBOSE=1 sends these records to stderr without any logging setup."""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Callable, Optional

logger = logging.getLogger("cpukern")

_seen: set[tuple[str, str, str]] = set()
_lock = threading.Lock()


def _env_forced(op: str, names: list[str]) -> Optional[str]:
    """The CPUKERN_VARIANT entry that forces a variant of `op` (the C++ registry's rule: "op=name"
    for this op, else a bare name this op has), or None."""
    env = os.environ.get("CPUKERN_VARIANT", "")
    bare = None
    for entry in env.split(",") if env else ():
        name, eq, value = entry.partition("=")
        if eq and name == op:
            return entry
        if not eq and entry in names and bare is None:
            bare = entry
    return bare


def _reason(op: str, chosen: str, forced: Optional[str], variants: list[dict]) -> str:
    if forced:
        alias = "" if forced == chosen else f" (an alias of '{chosen}')"
        return f"forced by variant='{forced}'{alias}"
    names = [v["name"] for v in variants]
    env = _env_forced(op, names)
    if env is not None:
        return f"forced by CPUKERN_VARIANT (entry '{env}')"
    from cpukern import _ext

    feats = ", ".join(_ext.cpu_info()["features"]) or "none"
    mine = next((v for v in variants if v["name"] == chosen), None)
    skipped = [f"{v['name']} (missing {v['why']})" for v in variants
               if mine is not None and v["priority"] > mine["priority"] and not v["supported"]
               and v["priority"] >= 0]
    why = f"the highest-priority variant this CPU supports (CPU features: {feats})"
    if skipped:
        why += "; skipped: " + "; ".join(skipped)
    hidden = os.environ.get("CPUKERN_DISABLE_FEATURES")
    if hidden:
        why += f"; CPUKERN_DISABLE_FEATURES={hidden} hides features"
    return why


def selection(op: str, chosen: str, forced: Optional[str],
              variants: Callable[[], list[dict]]) -> None:
    """Logs, once, that `op` runs variant `chosen` (forced: the variant= argument, or None)."""
    if not logger.isEnabledFor(logging.INFO):
        return  # not marked as seen: enabling logging later still reports it
    key = (op, chosen, forced or "")
    with _lock:
        if key in _seen:
            return
        _seen.add(key)
    vs = variants()
    ukernel = next((v["ukernel"] for v in vs if v["name"] == chosen), "?")
    logger.info("%s: variant '%s' (%s): %s", op, chosen, ukernel, _reason(op, chosen, forced, vs))


def configure_from_env() -> None:
    """CPUKERN_VERBOSE=1 (any value but "", "0"): INFO records of "cpukern" go to stderr."""
    if os.environ.get("CPUKERN_VERBOSE", "") in ("", "0"):
        return
    logger.setLevel(logging.INFO)
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        logger.addHandler(handler)
