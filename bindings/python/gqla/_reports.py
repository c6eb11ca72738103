# SPDX-License-Identifier: Apache-2.0
"""Readable dicts from the extension's raw report dicts (enum codes -> names)."""

from . import _enums, _gqla


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
    # Names as the library spells them (gqla_isa_name), one per set bit it
    # knows; a clear bit asks for the name of 0, which is None.
    names = (_gqla.isa_name(raw["isa_flags"] & (1 << b)) for b in range(64))
    info["isa"] = [name for name in names if name is not None]
    return info


def probe_fields(info):
    """A probe dict (possibly hand-written, e.g. another machine's numbers)
    back into raw gqla_probe_info fields."""
    raw = {k: v for k, v in info.items() if k != "isa"}
    if isinstance(raw.get("device"), str):
        raw["device"], raw["device_index"] = _enums.device_code(raw["device"], "probe.device")
        raw["device_index"] = info.get("device_index", raw["device_index"])
    return raw

