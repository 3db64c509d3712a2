"""A KarmadaQuota's usage as numbers a script reads and bars a person reads (pure).

`summarize` turns the object from the API server into per-resource used / reserved / free
against hard, with what each member cluster has placed and observed; `bars` draws it within a
terminal width (ASCII, so it survives any pager): `#` used, `+` reserved by admitted bindings
the controller has not yet counted, `.` free, `!` at the end when usage is over hard.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from karmadaquota.pending import reserved
from karmadaquota.quantity import Quantity, QuantityError

WIDTH = 100
_NAME_MAX = 28
_BAR_MIN, _BAR_MAX = 10, 40


def _q(value: Any) -> Quantity | None:
    try:
        return Quantity.parse(str(value))
    except QuantityError:
        return None


def _text(q: Quantity | None) -> str | None:
    return None if q is None else str(q)


def _percent(part: Quantity | None, whole: Quantity | None) -> float | None:
    if part is None or whole is None:
        return None
    if whole.is_zero:
        return 0.0 if part.is_zero else None
    return round(100 * part.nanos / whole.nanos, 1)


def summarize(quota: Mapping[str, Any]) -> dict[str, Any]:
    """Per resource: hard, used, reserved, free, percent ((used + reserved) / hard: what
    admission checks against) and each member's used/observed.

    Unknown values (a quota the controller has not computed yet) are None, never zero.
    """
    meta = quota.get("metadata") or {}
    hard: Mapping[str, Any] = (quota.get("spec") or {}).get("hard") or {}
    status = quota.get("status") or {}
    used_raw: Mapping[str, Any] = status.get("used") or {}
    held = reserved(status)
    clusters = sorted(
        (c for c in status.get("aggregatedStatus") or [] if c.get("clusterName")),
        key=lambda c: str(c["clusterName"]),
    )
    resources = []
    for name in sorted(hard):
        h = _q(hard[name])
        u = _q(used_raw[name]) if name in used_raw else None
        r = held.get(name, Quantity.zero())
        free = None
        if h is not None and u is not None:
            left = h - u - r
            free = left if left.sign > 0 else Quantity.zero()
        members = []
        for c in clusters:
            observed = c.get("observed")
            c_used = (c.get("used") or {}).get(name)
            c_obs = None if observed is None else observed.get(name)
            member = {
                "name": str(c["clusterName"]),
                "used": _text(_q(c_used)) if c_used is not None else None,
                "observed": _text(_q(c_obs)) if c_obs is not None else None,
            }
            guard = c.get("guard")
            if guard is not None:  # memberEnforcement ResourceQuota: the member's guard hard
                g = guard.get(name)
                member["guard"] = _text(_q(g)) if g is not None else None
            members.append(member)
        resources.append(
            {
                "name": name,
                "hard": _text(h),
                "used": _text(u),
                "reserved": str(r),
                "free": _text(free),
                "percent": _percent(None if u is None else u + r, h),
                "clusters": members,
            }
        )
    return {
        "name": meta.get("name", ""),
        "namespace": meta.get("namespace", ""),
        "resources": resources,
    }


def _bar(used: float, reserved: float, width: int) -> str:
    """`[###++....]`: used and reserved as fractions of hard; `!` closes an over-full bar."""
    cells = width - 2
    n_used = min(cells, round(max(used, 0.0) * cells))
    n_res = min(cells - n_used, round(max(reserved, 0.0) * cells))
    body = "#" * n_used + "+" * n_res + "." * (cells - n_used - n_res)
    over = used + reserved > 1.0
    return "[" + body + ("!" if over else "]")


def _fraction(part: str | None, whole: Quantity | None) -> float:
    q = _q(part) if part is not None else None
    if q is None or whole is None:
        return 0.0
    if whole.is_zero:
        return 0.0 if q.is_zero else 2.0
    return q.nanos / whole.nanos


def _short(name: str, width: int) -> str:
    return name if len(name) <= width else name[: width - 1] + "~"


def bars(summary: Mapping[str, Any], width: int = WIDTH) -> list[str]:
    """One bar per resource (used + reserved of hard), one per member cluster under it."""
    resources = summary.get("resources") or []
    if not resources:
        return []
    names = [r["name"] for r in resources]
    names += [f"  {c['name']}" for r in resources for c in r["clusters"]]
    name_w = min(_NAME_MAX, max(len(n) for n in names))
    figures = []
    for r in resources:
        used = r["used"] if r["used"] is not None else "?"
        pct = f"{r['percent']:g}%" if r["percent"] is not None else "?%"
        plus = "" if r["reserved"] == "0" else f"+{r['reserved']}"
        figures.append(f"{used}{plus}/{r['hard']} {pct}")
        figures += [f"{c['used'] or '-'} (observed {c['observed'] or '-'})" for c in r["clusters"]]
    text_w = min(30, max(len(f) for f in figures))
    bar_w = max(_BAR_MIN, min(_BAR_MAX, width - 2 - name_w - 2 - 2 - text_w))
    lines = ["Usage (# used, + reserved, . free, ! over hard; per member: placed there):"]
    i = 0
    for r in resources:
        hard = _q(r["hard"]) if r["hard"] is not None else None
        rows = [(r["name"], _fraction(r["used"], hard), _fraction(r["reserved"], hard))]
        rows += [(f"  {c['name']}", _fraction(c["used"], hard), 0.0) for c in r["clusters"]]
        for label, u, res in rows:
            line = f"  {_short(label, name_w).ljust(name_w)}  {_bar(u, res, bar_w)}  {figures[i]}"
            lines.append(line[:width].rstrip())
            i += 1
    return lines
