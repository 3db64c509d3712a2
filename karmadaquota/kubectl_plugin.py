"""`kubectl karmadaquota describe [NAME] [-n NS | -A]` — a KarmadaQuota as `kubectl describe
quota` shows a ResourceQuota (without NAME every quota of the namespace, or of all of them with
`-A`, as kubectl describes all), plus one `used/observed` column per member cluster
(`placed/observed/guard` with memberEnforcement ResourceQuota: the hard of that member's guard
ResourceQuota), usage bars per resource and member (`karmadaquota.usage_view`), the pending
reservations, the workloads waiting for room, the workloads queued by the quota (`onExceed:
Queue`: position, priority, wait) and the conditions; `--output json|yaml` gives the same for
scripts (a list without NAME).
`kubectl karmadaquota import-frq [-n NS | -A]` prints a KarmadaQuota for each
FederatedResourceQuota (`karmadaquota.frq`).

Rendering is the pure `render(quota, now)`; objects are fetched with the user's own kubectl
(`kubectl get karmadaquota NAME -n NS -o json`, honouring --kubeconfig and --context), so the
plugin needs nothing but what kubectl already has. `$KUBECTL` picks the kubectl binary.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import yaml
from pydantic import ValidationError

from karmadaquota import api, frq, queued, queueing, usage_view
from karmadaquota.charge import full_charge
from karmadaquota.pending import wire_reservations
from karmadaquota.quantity import QuantityError
from karmadaquota.scopes import describe as describe_scopes
from karmadaquota.times import format_time, parse_time

_NONE = "-"


def _table(rows: Sequence[Sequence[str]], indent: str = "") -> list[str]:
    """Left-aligned columns separated by at least 3 spaces (kubectl's tabwriter look)."""
    if not rows:
        return []
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for r in rows:
        cells = [c.ljust(w) for c, w in zip(r, widths, strict=True)]
        out.append((indent + "   ".join(cells)).rstrip())
    return out


def _relative(when: datetime | None, now: datetime) -> str:
    if when is None:
        return "unreadable"
    seconds = int((when - now).total_seconds())
    if seconds <= 0:
        return "expired"
    if seconds < 120:
        return f"in {seconds}s"
    if seconds < 7200:
        return f"in {seconds // 60}m"
    return f"in {seconds // 3600}h"


def _reservations(status: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The pending charges (`status.pending`, or an old layout's `status.reservations`)."""
    return [r for r in wire_reservations(status) if isinstance(r, Mapping)]


def queue_of(
    quota: Mapping[str, Any],
    bindings: Sequence[Mapping[str, Any]],
    class_values: Mapping[str, int],
    now: datetime,
) -> list[dict[str, Any]]:
    """The bindings this quota queued, in the order the controller admits them (the same
    `queueing.order`): position, workload, priority, what it asks for, how long it waited."""
    name = str((quota.get("metadata") or {}).get("name", ""))
    entries = []
    for raw in bindings:
        try:
            b = api.ResourceBinding.model_validate(raw)
            if queued.queued_by(b) != name:
                continue
            entries.append(queueing.QueueEntry.of(b, name, full_charge(b)))
        except (ValidationError, QuantityError):
            continue
    out = []
    for i, e in enumerate(queueing.order(entries, class_values), start=1):
        t = e.template
        out.append(
            {
                "position": i,
                "workload": f"{t.kind}/{t.name}",
                "binding": e.name,
                "priority": queueing.priority(e, class_values),
                "priorityClassName": e.priority_class,
                "requested": queueing.resources_of(e),
                "queuedAt": format_time(e.created) if e.created else "",
                "waitSeconds": int((now - e.created).total_seconds()) if e.created else None,
            }
        )
    return out


def _queue(entries: Sequence[Mapping[str, Any]], spec: Mapping[str, Any]) -> list[str]:
    mode = (
        f"onExceed: {spec.get('onExceed', api.ON_EXCEED_REFUSE)}, "
        f"queueingStrategy: {spec.get('queueingStrategy', api.STRATEGY_BEST_EFFORT)}"
    )
    if not entries:
        return [f"Queued:       <none> ({mode})"]
    rows = [
        ["Position", "Workload", "Priority", "Requested", "Waiting"],
        ["--------", "--------", "--------", "---------", "-------"],
    ]
    for e in entries:
        wait = e["waitSeconds"]
        klass = f" ({e['priorityClassName']})" if e["priorityClassName"] else ""
        rows.append(
            [
                str(e["position"]),
                str(e["workload"]),
                f"{e['priority']}{klass}",
                str(e["requested"]) or _NONE,
                "unknown" if wait is None else _seconds(wait),
            ]
        )
    return [f"Queued ({mode}; admitted in this order as room appears):", *_table(rows, "  ")]


def _seconds(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size:
            return f"{seconds // size}{unit}"
    return f"{max(0, seconds)}s"


def cluster_quotas(applied: Sequence[Mapping[str, Any]]) -> list[str]:
    """The ClusterKarmadaQuotas applying to a namespace, from its AppliedClusterKarmadaQuotas
    (what a tenant may read, docs/cluster-quotas.md): their totals and this namespace's use."""
    if not applied:
        return ["Cluster quotas: <none>"]
    rows = [["Name", "Used/Hard (all its namespaces)", "This namespace"], ["----", "----", "----"]]
    for a in sorted(applied, key=lambda a: str((a.get("metadata") or {}).get("name", ""))):
        status = a.get("status") or {}
        rows.append(
            [
                str((a.get("metadata") or {}).get("name", "")),
                str(status.get("summary", "")) or _NONE,
                str(status.get("namespaceSummary", "")) or _NONE,
            ]
        )
    return ["Cluster quotas:", *_table(rows, "  ")]


def render(
    quota: Mapping[str, Any],
    now: datetime,
    queue: Sequence[Mapping[str, Any]] | None = None,
    applied: Sequence[Mapping[str, Any]] | None = None,
) -> str:
    """The describe output for one KarmadaQuota object (as JSON from the API server), with
    its queue (`queue_of`) when the bindings could be read, and the cluster quotas applying
    to its namespace when their views could be read."""
    meta = quota.get("metadata") or {}
    spec = quota.get("spec") or {}
    status = quota.get("status") or {}
    hard: Mapping[str, Any] = spec.get("hard") or {}
    used: Mapping[str, Any] = status.get("used") or {}
    clusters = sorted(
        (c for c in status.get("aggregatedStatus") or [] if c.get("clusterName")),
        key=lambda c: str(c["clusterName"]),
    )
    lines = [f"Name:         {meta.get('name', '')}", f"Namespace:    {meta.get('namespace', '')}"]
    parsed = api.KarmadaQuotaSpec.model_validate(spec)
    scopes = describe_scopes(parsed)
    if scopes:
        lines.append(f"Scopes:       {'; '.join(scopes)}")
    guarded = parsed.guarded
    if not guarded:
        lines.append("Members:      None (admission only: the members do not hold the budget)")
    else:
        lines.append("Members:      ResourceQuota (observed usage counts; a guard in every member)")
        for cluster, caps in sorted((spec.get("clusterHard") or {}).items()):
            text = ",".join(f"{k}={caps[k]}" for k in sorted(caps))
            lines.append(f"  clusterHard {cluster}: {text}")
    if parsed.cohort:
        lines.extend(_cohort(parsed, status))
    column = "placed/observed/guard" if guarded else "used/observed"
    header = ["Resource", "Used", "Hard", *(f"{c['clusterName']} {column}" for c in clusters)]
    rows: list[list[str]] = [header, ["-" * len(h) for h in header]]
    for name in sorted(hard):
        row = [name, str(used.get(name, _NONE)), str(hard[name])]
        for c in clusters:
            c_used = (c.get("used") or {}).get(name, _NONE)
            observed = c.get("observed")
            c_obs = _NONE if observed is None else observed.get(name, _NONE)
            cell = f"{c_used}/{c_obs}"
            if guarded:
                g = c.get("guard")
                cell += f"/{_NONE if g is None else g.get(name, _NONE)}"
            row.append(cell)
        rows.append(row)
    lines.extend(_table(rows))
    lines.extend(usage_view.bars(usage_view.summarize(quota)))
    reservations = _reservations(status)
    if reservations:
        lines.append("Reservations:")
        r_rows = [["Binding", "Reserved", "Expires"], ["-------", "--------", "-------"]]
        for r in sorted(reservations, key=lambda r: str(r.get("expirationTime", ""))):
            by = r.get("reservedBy") or {}
            reserved = r.get("reserved") or {}
            expires = str(r.get("expirationTime", ""))
            r_rows.append(
                [
                    str(by.get("name") or by.get("uid", "")),
                    ",".join(f"{k}={reserved[k]}" for k in sorted(reserved)) or _NONE,
                    f"{expires} ({_relative(parse_time(expires), now)})",
                ]
            )
        lines.extend(_table(r_rows, "  "))
    else:
        lines.append("Reservations: <none>")
    lines.extend(_waiting(status.get("waiting") or [], now))
    if queue is not None:
        lines.extend(_queue(queue, quota.get("spec") or {}))
    conditions = status.get("conditions") or []
    if conditions:
        lines.append("Conditions:")
        c_rows = [["Type", "Status", "Reason", "Message"], ["----", "------", "------", "-------"]]
        for c in conditions:
            c_rows.append(
                [
                    str(c.get("type", "")),
                    str(c.get("status", "")),
                    str(c.get("reason", "")),
                    str(c.get("message", "")),
                ]
            )
        lines.extend(_table(c_rows, "  "))
    if applied is not None:
        lines.extend(cluster_quotas(applied))
    return "\n".join(lines) + "\n"


def _cohort(spec: api.KarmadaQuotaSpec, status: Mapping[str, Any]) -> list[str]:
    """The cohort, its limits and every loan (docs/cohorts.md)."""

    def listed(rl: Mapping[str, Any] | None) -> str:
        return ",".join(f"{k}={rl[k]}" for k in sorted(rl)) if rl else "none"

    lines = [
        f"Cohort:       {spec.cohort} (borrowingLimit: {listed(spec.borrowingLimit)}; "
        f"lendingLimit: {listed(spec.lendingLimit)})"
    ]
    for direction, word in (("borrowed", "from"), ("lent", "to")):
        for e in status.get(direction) or []:
            lines.append(f"  {direction} {word} {e.get('quota', '')}: {listed(e.get('resources'))}")
    return lines


def describe_data(
    quota: Mapping[str, Any], now: datetime, queue: Sequence[Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    """What describe shows, for `--output json|yaml`: usage per resource and member, scopes,
    reservations (with whether each has expired) and conditions as the API server has them."""
    status = quota.get("status") or {}
    reservations = []
    for r in _reservations(status):
        expires = parse_time(str(r.get("expirationTime", "")))
        by = r.get("reservedBy") or {}
        reservations.append(
            {
                "binding": str(by.get("name") or by.get("uid", "")),
                "uid": by.get("uid", ""),
                "reserved": r.get("reserved") or {},
                "expirationTime": r.get("expirationTime", ""),
                "expired": expires is None or expires <= now,
            }
        )
    return {
        **usage_view.summarize(quota),
        "scopes": describe_scopes(api.KarmadaQuotaSpec.model_validate(quota.get("spec") or {})),
        "reservations": reservations,
        "waiting": status.get("waiting") or [],
        "queued": list(queue or []),
        "conditions": status.get("conditions") or [],
    }


def _output(
    quota: Mapping[str, Any],
    now: datetime,
    fmt: str,
    queue: Sequence[Mapping[str, Any]] | None = None,
    applied: Sequence[Mapping[str, Any]] | None = None,
) -> str:
    if fmt == "json":
        data = describe_data(quota, now, queue)
        if applied is not None:
            data["clusterQuotas"] = [a.get("status") or {} for a in applied]
        return json.dumps(data, indent=2) + "\n"
    if fmt == "yaml":
        data = describe_data(quota, now, queue)
        if applied is not None:
            data["clusterQuotas"] = [a.get("status") or {} for a in applied]
        return yaml.safe_dump(data, sort_keys=False)
    return render(quota, now, queue, applied)


def _quota_key(quota: Mapping[str, Any]) -> tuple[str, str]:
    meta = quota.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def output_all(
    quotas: Sequence[Mapping[str, Any]],
    now: datetime,
    fmt: str,
    queues: Mapping[tuple[str, str], Sequence[Mapping[str, Any]] | None],
) -> str:
    """Several quotas by namespace and name: text descriptions separated by a blank line as
    `kubectl describe` separates them; json and yaml a list of what one quota gives."""
    ordered = sorted(quotas, key=_quota_key)
    if fmt == "json":
        data = [describe_data(q, now, queues.get(_quota_key(q))) for q in ordered]
        return json.dumps(data, indent=2) + "\n"
    if fmt == "yaml":
        data = [describe_data(q, now, queues.get(_quota_key(q))) for q in ordered]
        return yaml.safe_dump(data, sort_keys=False)
    return "\n\n".join(render(q, now, queues.get(_quota_key(q))).rstrip("\n") for q in ordered) + (
        "\n" if ordered else ""
    )


def _age(when: datetime | None, now: datetime) -> str:
    """How long ago, as kubectl prints ages (45s, 12m, 3h, 2d)."""
    if when is None:
        return "unreadable"
    seconds = max(0, int((now - when).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _waiting(entries: Sequence[Mapping[str, Any]], now: datetime) -> list[str]:
    """Workloads this quota refused, oldest first: they are woken in this order."""
    if not entries:
        return ["Waiting:      <none>"]
    rows = [
        ["Workload", "Requested", "Waiting since", "Refusals"],
        ["--------", "---------", "-------------", "--------"],
    ]
    for w in sorted(entries, key=lambda w: str(w.get("firstRefused", ""))):
        ref = w.get("template") or {}
        requested = w.get("requested") or {}
        since = str(w.get("firstRefused", ""))
        rows.append(
            [
                f"{ref.get('kind', '')}/{ref.get('name', '')}",
                ",".join(f"{k}={requested[k]}" for k in sorted(requested)) or _NONE,
                f"{since[:19]}Z ({_age(parse_time(since), now)} ago)",
                str(w.get("refusals", 1)),
            ]
        )
    title = "Waiting (refused by this quota; woken in this order when they fit):"
    return [title, *_table(rows, "  ")]


def _kubectl() -> str:
    return os.environ.get("KUBECTL") or shutil.which("kubectl") or "kubectl"


def kubectl_get(
    what: Sequence[str], where: Sequence[str], kubeconfig: str | None, context: str | None
) -> Any:
    """`kubectl [--kubeconfig] [--context] get WHAT -o json WHERE`, decoded; kubectl's error
    raised."""
    cmd = [_kubectl()]
    if kubeconfig:
        cmd.append(f"--kubeconfig={kubeconfig}")
    if context:
        cmd.append(f"--context={context}")
    cmd += ["get", *what, "-o", "json", *where]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip() or f"{' '.join(cmd)} exited {proc.returncode}")
    return json.loads(proc.stdout)


def fetch(name: str, namespace: str | None, kubeconfig: str | None, context: str | None) -> Any:
    where = ["-n", namespace] if namespace else []
    return kubectl_get([f"{api.PLURAL}.{api.GROUP}", name], where, kubeconfig, context)


def fetch_all(
    namespace: str | None, all_namespaces: bool, kubeconfig: str | None, context: str | None
) -> list[dict[str, Any]]:
    """Every quota of the namespace (kubectl's current one when none given), or of all."""
    where = ["-A"] if all_namespaces else ["-n", namespace] if namespace else []
    listed = kubectl_get([f"{api.PLURAL}.{api.GROUP}"], where, kubeconfig, context)
    return list(listed.get("items") or [])


def fetch_queue(
    quota: Mapping[str, Any], kubeconfig: str | None, context: str | None, now: datetime
) -> list[dict[str, Any]] | None:
    """The quota's queue from the namespace's bindings; None (not shown) when the user may not
    list bindings. PriorityClass values are read where allowed (else 0, the class named)."""
    ns = str((quota.get("metadata") or {}).get("namespace", ""))
    try:
        listed = kubectl_get(
            [f"{api.BINDING_PLURAL}.{api.BINDING_GROUP}"], ["-n", ns], kubeconfig, context
        )
    except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired):
        return None
    bindings = listed.get("items") or []
    classes: dict[str, int] = {}
    if any(
        queued.ANNOTATION in ((b.get("metadata") or {}).get("annotations") or {}) for b in bindings
    ):
        try:
            pcs = kubectl_get(["priorityclasses.scheduling.k8s.io"], [], kubeconfig, context)
            for pc in pcs.get("items") or []:
                value = pc.get("value", 0)
                classes[str(pc["metadata"]["name"])] = value if isinstance(value, int) else 0
        except (RuntimeError, OSError, ValueError, KeyError, subprocess.TimeoutExpired):
            pass
    return queue_of(quota, bindings, classes, now)


def fetch_applied(
    namespace: str, kubeconfig: str | None, context: str | None
) -> list[dict[str, Any]] | None:
    """The namespace's AppliedClusterKarmadaQuotas; None (not shown) when they cannot be read
    (the CRD not installed, or no right to)."""
    where = ["-n", namespace] if namespace else []
    try:
        listed = kubectl_get([f"{api.APPLIED_PLURAL}.{api.GROUP}"], where, kubeconfig, context)
    except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired):
        return None
    items = listed.get("items") if isinstance(listed, Mapping) else None
    return [i for i in items or [] if isinstance(i, dict)]


def import_frq(
    namespace: str | None, all_namespaces: bool, kubeconfig: str | None, context: str | None
) -> str:
    """Every FederatedResourceQuota in scope, converted (kubectl's namespace when none given)."""
    where = ["-A"] if all_namespaces else ["-n", namespace] if namespace else []
    listed = kubectl_get([frq.FRQ_RESOURCE], where, kubeconfig, context)
    items = sorted(
        listed.get("items") or [],
        key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]),
    )
    if not items:
        return "# no FederatedResourceQuota found\n"
    return frq.render(frq.convert(item) for item in items)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="kubectl karmadaquota", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser(
        "describe",
        help="usage, per-cluster breakdown and reservations (no NAME: every quota in scope, "
        "and the cluster quotas applying to the namespace)",
    )
    d.add_argument("name", nargs="?", help="default: every quota of the namespace")
    where = d.add_mutually_exclusive_group()
    where.add_argument("-n", "--namespace")
    where.add_argument(
        "-A", "--all-namespaces", action="store_true", help="every quota of every namespace"
    )
    d.add_argument("--kubeconfig")
    d.add_argument("--context")
    d.add_argument("-o", "--output", choices=["text", "json", "yaml"], default="text")
    i = sub.add_parser(
        "import-frq",
        help="print a KarmadaQuota for each FederatedResourceQuota, for `kubectl apply -f -`",
    )
    scope = i.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace")
    scope.add_argument("-A", "--all-namespaces", action="store_true")
    i.add_argument("--kubeconfig")
    i.add_argument("--context")
    args = p.parse_args(argv)
    if args.command == "import-frq":
        try:
            out = import_frq(args.namespace, args.all_namespaces, args.kubeconfig, args.context)
        except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        sys.stdout.write(out)
        return 0
    if args.name and args.all_namespaces:
        # kubectl's own words for `kubectl describe quota NAME -A`
        print(
            "error: a resource cannot be retrieved by name across all namespaces", file=sys.stderr
        )
        return 1
    if not args.name:
        code = _describe_all(args)
        if code != 0 or args.all_namespaces or args.output != "text":
            return code
        # and the cluster quotas applying to the namespace, where there are any to read
        applied = fetch_applied(args.namespace or "", args.kubeconfig, args.context)
        if applied:
            sys.stdout.write("\n" + "\n".join(cluster_quotas(applied)) + "\n")
        return 0
    try:
        quota = fetch(args.name, args.namespace, args.kubeconfig, args.context)
    except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    now = datetime.now(UTC)
    queue = fetch_queue(quota, args.kubeconfig, args.context, now)
    ns = str((quota.get("metadata") or {}).get("namespace", ""))
    applied = fetch_applied(ns, args.kubeconfig, args.context)
    sys.stdout.write(_output(quota, now, args.output, queue, applied))
    return 0


def _describe_all(args: argparse.Namespace) -> int:
    try:
        quotas = fetch_all(args.namespace, args.all_namespaces, args.kubeconfig, args.context)
    except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if not quotas:
        where = "" if args.all_namespaces else f" in {args.namespace or 'the current'} namespace"
        print(f"No resources found{where}.", file=sys.stderr)  # as kubectl says it
        if args.output == "text":
            return 0
    now = datetime.now(UTC)
    queues = {_quota_key(q): fetch_queue(q, args.kubeconfig, args.context, now) for q in quotas}
    sys.stdout.write(output_all(quotas, now, args.output, queues))
    return 0


if __name__ == "__main__":
    sys.exit(main())
