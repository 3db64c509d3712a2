"""`kubectl karmadaquota describe`: rendering (pure) and the kubectl round trip (faked)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from karmadaquota import kubectl_plugin
from karmadaquota.kubectl_plugin import render
from karmadaquota.times import parse_time
from tests.conftest import NOW


def kq(**status: Any) -> dict[str, Any]:
    """A quota that opted out of member guards (the guarded columns have tests of their own)."""
    return {
        "metadata": {"name": "team", "namespace": "team-a"},
        "spec": {
            "memberEnforcement": "None",
            "hard": {"requests.cpu": "100", "pods": "500", "count/deployments.apps": "10"},
            "scopeSelector": {
                "matchExpressions": [
                    {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}
                ]
            },
        },
        "status": status,
    }


FULL = kq(
    used={"requests.cpu": "12", "pods": "30", "count/deployments.apps": "2"},
    aggregatedStatus=[
        {
            "clusterName": "member2",
            "used": {"requests.cpu": "4", "pods": "10", "count/deployments.apps": "1"},
            "observed": {"requests.cpu": "5", "pods": "11"},
        },
        {
            "clusterName": "member1",
            "used": {"requests.cpu": "8", "pods": "20", "count/deployments.apps": "2"},
            "observed": {"requests.cpu": "8", "pods": "20"},
        },
    ],
    reservations=[
        {
            "reservedBy": {"name": "web-deployment", "uid": "u1"},
            "reserved": {"requests.cpu": "2", "pods": "4"},
            "expirationTime": (NOW + timedelta(seconds=42)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        {
            "reservedBy": {"name": "old", "uid": "u2"},
            "reserved": {"pods": "1"},
            "expirationTime": (NOW - timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
    ],
    conditions=[
        {"type": "Ready", "status": "True", "reason": "Calculated", "message": "ok"},
        {
            "type": "MemberObserved",
            "status": "False",
            "reason": "MemberUnreachable",
            "message": "member2: refused",
        },
    ],
)


def test_render_like_kubectl_describe_quota() -> None:
    out = render(FULL, NOW)
    lines = out.splitlines()
    assert lines[0] == "Name:         team"
    assert lines[1] == "Namespace:    team-a"
    assert lines[2] == "Scopes:       PriorityClass In [high]"
    assert lines[3] == "Members:      None (admission only: the members do not hold the budget)"
    lines = lines[:3] + lines[4:]
    assert lines[3].split() == [
        "Resource",
        "Used",
        "Hard",
        "member1",
        "used/observed",
        "member2",
        "used/observed",
    ]
    dashes = "-" * len("member1 used/observed")
    assert lines[4].split() == ["--------", "----", "----", dashes, dashes]
    table = {line.split()[0]: line.split()[1:] for line in lines[5:8]}
    assert table == {
        "count/deployments.apps": ["2", "10", "2/-", "1/-"],
        "pods": ["30", "500", "20/20", "10/11"],
        "requests.cpu": ["12", "100", "8/8", "4/5"],
    }
    # columns line up
    assert lines[3].index("Used") == lines[5].index("2 ")
    assert "Reservations:" in lines
    res = out.split("Reservations:\n")[1]
    assert "web-deployment   pods=4,requests.cpu=2" in res
    assert "(in 42s)" in res and "(expired)" in res
    assert "MemberUnreachable   member2: refused" in out


def test_describe_names_the_cohort_its_limits_and_every_loan() -> None:
    q = kq(
        used={"pods": "6"},
        borrowed=[{"quota": "team-b/team", "resources": {"pods": "2"}}],
        lent=[{"quota": "team-c/team", "resources": {"requests.cpu": "500m"}}],
    )
    q["spec"] |= {"cohort": "research", "borrowingLimit": {"pods": "4"}}
    lines = render(q, NOW).splitlines()
    at = lines.index("Cohort:       research (borrowingLimit: pods=4; lendingLimit: none)")
    assert lines[at + 1 : at + 3] == [
        "  borrowed from team-b/team: pods=2",
        "  lent to team-c/team: requests.cpu=500m",
    ]
    assert not any(line.startswith("Cohort:") for line in render(kq(), NOW).splitlines())


def test_render_a_fresh_quota_without_status() -> None:
    out = render(kq(), NOW)
    assert "requests.cpu             -      100" in out
    assert "Reservations: <none>" in out
    assert "Conditions:" not in out


def test_main_fetches_with_kubectl_and_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "kubectl"
    log = tmp_path / "args"
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\ncat <<'EOF'\n{json.dumps(FULL)}\nEOF\n")
    fake.chmod(0o755)
    monkeypatch.setenv("KUBECTL", str(fake))
    code = kubectl_plugin.main(["describe", "team", "-n", "team-a", "--kubeconfig", "/k"])
    assert code == 0
    assert "requests.cpu" in capsys.readouterr().out
    quota_call, bindings_call, applied_call = log.read_text().splitlines()
    # the cluster quotas applying to the namespace: its AppliedClusterKarmadaQuotas
    assert applied_call.split() == [
        "--kubeconfig=/k",
        "get",
        "appliedclusterkarmadaquotas.quota.karmada.io",
        "-o",
        "json",
        "-n",
        "team-a",
    ]
    # the queue: the namespace's bindings, with the same kubeconfig
    assert bindings_call.split() == [
        "--kubeconfig=/k",
        "get",
        "resourcebindings.work.karmada.io",
        "-o",
        "json",
        "-n",
        "team-a",
    ]
    assert quota_call.split() == [
        "--kubeconfig=/k",
        "get",
        "karmadaquotas.quota.karmada.io",
        "team",
        "-o",
        "json",
        "-n",
        "team-a",
    ]


def test_main_reports_kubectl_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "kubectl"
    fake.write_text("#!/bin/sh\necho 'Error from server (NotFound): \"x\" not found' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("KUBECTL", str(fake))
    assert kubectl_plugin.main(["describe", "x", "-n", "y"]) == 1
    assert "NotFound" in capsys.readouterr().err


def test_console_script_is_declared() -> None:
    text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert 'kubectl-karmadaquota = "karmadaquota.kubectl_plugin:main"' in text


def test_waiting_workloads_listed_oldest_first_with_request_and_age() -> None:
    def entry(name: str, minutes: int, pods: str) -> dict[str, Any]:
        since = (NOW - timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return {
            "template": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": name},
            "binding": f"{name}-deployment",
            "requested": {"pods": pods, "requests.cpu": "200m"},
            "firstRefused": since,
            "refusals": 3,
        }

    out = render(kq(waiting=[entry("late", 2, "1"), entry("early", 90, "2")]), NOW)
    lines = out.splitlines()
    start = lines.index("Waiting (refused by this quota; woken in this order when they fit):")
    assert lines[start + 1].split() == ["Workload", "Requested", "Waiting", "since", "Refusals"]
    assert lines[start + 3].split() == [
        "Deployment/early",
        "pods=2,requests.cpu=200m",
        "2026-01-01T10:30:00Z",
        "(90m",
        "ago)",
        "3",
    ]
    assert lines[start + 4].split()[0] == "Deployment/late"
    assert "(2m ago)" in lines[start + 4]
    assert "Waiting:      <none>" in render(kq(), NOW)


def _queued(name: str, pods: int, created: str, klass: str = "", quota: str = "team") -> Any:
    from karmadaquota import queued
    from tests.conftest import binding_doc

    doc = binding_doc(pods, {"cpu": "1"}, name=name, priority_class=klass, created=created)
    doc["metadata"]["annotations"] = {queued.ANNOTATION: quota}
    doc["spec"]["suspension"] = {"scheduling": True}
    return doc


def test_describe_lists_the_queue_with_position_priority_and_wait() -> None:
    from datetime import timedelta

    from tests.conftest import binding_doc

    quota = kq()
    quota["spec"]["onExceed"] = "Queue"
    bindings = [
        _queued("old", 2, "2026-01-01T00:00:00Z"),
        _queued("vip", 1, "2026-01-01T00:10:00Z", klass="high"),
        _queued("elsewhere", 1, "2026-01-01T00:00:00Z", quota="other"),
        binding_doc(1, {"cpu": "1"}, name="running"),
    ]
    now = parse_time("2026-01-01T00:20:00Z")
    assert now is not None
    queue = kubectl_plugin.queue_of(quota, bindings, {"high": 1000}, now)
    assert [(e["position"], e["workload"], e["priority"]) for e in queue] == [
        (1, "Deployment/vip", 1000),
        (2, "Deployment/old", 0),
    ]
    assert queue[1]["waitSeconds"] == int(timedelta(minutes=20).total_seconds())
    out = render(quota, now, queue)
    assert "Queued (onExceed: Queue, queueingStrategy: BestEffortFIFO;" in out
    assert "1          Deployment/vip   1000 (high)" in out
    assert "20m" in out.split("Deployment/old")[1]
    assert "Queued:       <none>" in render(quota, now, [])
    assert "Queued" not in render(quota, now)  # bindings not readable: not shown


def test_member_enforcement_shows_placed_observed_and_guard_per_member() -> None:
    quota = kq(
        used={"requests.cpu": "13", "pods": "31", "count/deployments.apps": "2"},
        aggregatedStatus=[
            {
                "clusterName": "member1",
                "used": {"requests.cpu": "8", "pods": "20"},
                "observed": {"requests.cpu": "8", "pods": "20"},
                "guard": {"requests.cpu": "50", "pods": "250"},
            },
            {
                "clusterName": "member2",
                "used": {"requests.cpu": "4", "pods": "10"},
                "observed": {"requests.cpu": "5", "pods": "11"},
            },
        ],
    )
    quota["spec"]["memberEnforcement"] = "ResourceQuota"
    quota["spec"]["clusterHard"] = {"member2": {"pods": "100"}}
    out = render(quota, NOW)
    assert "Members:      ResourceQuota" in out
    assert "clusterHard member2: pods=100" in out
    assert "member1 placed/observed/guard" in out
    row = next(line for line in out.splitlines() if line.startswith("pods "))
    assert "20/20/250" in row and "10/11/-" in row
    data = kubectl_plugin.describe_data(quota, NOW)
    pods = next(r for r in data["resources"] if r["name"] == "pods")
    assert pods["clusters"][0] == {
        "name": "member1",
        "used": "20",
        "observed": "20",
        "guard": "250",
    }
    assert "guard" not in pods["clusters"][1]


def test_without_member_enforcement_the_columns_are_used_and_observed() -> None:
    out = render(FULL, NOW)
    assert "used/observed" in out and "guard" not in out


def _fake_kubectl(tmp_path: Path, listed: dict[str, Any]) -> Path:
    """A kubectl that logs its arguments and answers every `get` with `listed`."""
    fake = tmp_path / "kubectl"
    log = tmp_path / "args"
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\ncat <<'EOF'\n{json.dumps(listed)}\nEOF\n")
    fake.chmod(0o755)
    return log


def _named(namespace: str, name: str) -> dict[str, Any]:
    q = json.loads(json.dumps(FULL))
    q["metadata"] = {"name": name, "namespace": namespace}
    return dict(q)


@pytest.mark.parametrize(
    ("flags", "where"),
    [(["-n", "team-a"], ["-n", "team-a"]), (["-A"], ["-A"]), ([], [])],
    ids=["namespace", "all-namespaces", "current-namespace"],
)
def test_describe_without_a_name_describes_every_quota_in_scope(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    flags: list[str],
    where: list[str],
) -> None:
    """As `kubectl describe quota` without NAME: every one, sorted by namespace and name,
    separated by a blank line; `-A` lists them across namespaces."""
    items = [_named("team-b", "b"), _named("team-a", "z"), _named("team-a", "a")]
    log = _fake_kubectl(tmp_path, {"items": items})
    monkeypatch.setenv("KUBECTL", str(log.parent / "kubectl"))
    assert kubectl_plugin.main(["describe", *flags]) == 0
    out = capsys.readouterr().out
    names = [line.split()[1] for line in out.splitlines() if line.startswith("Name:")]
    assert names == ["a", "z", "b"]
    spaces = [line.split()[1] for line in out.splitlines() if line.startswith("Namespace:")]
    assert spaces == ["team-a", "team-a", "team-b"]
    assert "\n\nName:" in out
    first = log.read_text().splitlines()[0].split()
    assert first == ["get", "karmadaquotas.quota.karmada.io", "-o", "json", *where]


def test_describe_all_as_json_is_a_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _fake_kubectl(tmp_path, {"items": [_named("team-a", "b"), _named("team-a", "a")]})
    monkeypatch.setenv("KUBECTL", str(log.parent / "kubectl"))
    assert kubectl_plugin.main(["describe", "-n", "team-a", "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["name"] for d in data] == ["a", "b"]


def test_describe_all_of_an_empty_namespace_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _fake_kubectl(tmp_path, {"items": []})
    monkeypatch.setenv("KUBECTL", str(log.parent / "kubectl"))
    assert kubectl_plugin.main(["describe", "-n", "empty"]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip() == "No resources found in empty namespace."


def test_describe_a_name_across_all_namespaces_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert kubectl_plugin.main(["describe", "team", "-A"]) == 1
    assert "cannot be retrieved by name across all namespaces" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        kubectl_plugin.main(["describe", "-A", "-n", "x"])


def test_describe_lists_the_cluster_quotas_applying_to_the_namespace() -> None:
    applied = [
        {
            "metadata": {"name": "team-a", "namespace": "team-a"},
            "status": {"summary": "pods: 5/10", "namespaceSummary": "pods: 2"},
        }
    ]
    out = render(kq(), NOW, applied=applied)
    lines = out.splitlines()
    at = lines.index("Cluster quotas:")
    assert lines[at + 3].split() == ["team-a", "pods:", "5/10", "pods:", "2"]
    assert "Cluster quotas: <none>" in render(kq(), NOW, applied=[])
    assert "Cluster quotas" not in render(kq(), NOW)  # not readable: not shown
    assert kubectl_plugin.cluster_quotas([]) == ["Cluster quotas: <none>"]
