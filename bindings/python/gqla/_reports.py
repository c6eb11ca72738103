# SPDX-License-Identifier: Apache-2.0
"""Readable dicts from the extension's raw report dicts (enum codes -> names)."""

from . import _enums


def cost_report(raw, kind):
    report = dict(raw)
    report["chosen"] = _enums.name_of(_enums.PATH, raw["chosen"])
    report["call_chosen"] = _enums.name_of(_enums.PATH, raw["call_chosen"])
    if kind == "gqa":
        # A GQA-kind config has only one path (the library reports zeros).
        report["absorb"] = None
        report["transient"] = None
    return report


def stats_report(raw):
    stats = dict(raw)
    stats["device"] = _enums.name_of(_enums.DEVICE, raw["device"])
    stats["path"] = _enums.name_of(_enums.PATH, raw["path"])
    return stats


def probe_report(raw):
    info = dict(raw)
    info["device"] = _enums.name_of(_enums.DEVICE, raw["device"])
    info["isa"] = [name for name, bit in _enums.ISA_FLAGS.items() if raw["isa_flags"] & bit]
    return info


def probe_fields(info):
    """A probe dict (possibly hand-written, e.g. another machine's numbers)
    back into raw gqla_probe_info fields."""
    raw = {k: v for k, v in info.items() if k != "isa"}
    if isinstance(raw.get("device"), str):
        raw["device"], raw["device_index"] = _enums.device_code(raw["device"], "probe.device")
        raw["device_index"] = info.get("device_index", raw["device_index"])
    return raw

