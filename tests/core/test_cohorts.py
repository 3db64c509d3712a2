"""Cohorts: the plan of loans, the two writes of a loan, and the guarantee over histories.

Expected values are written from docs/cohorts.md (Kueue's meaning), not from the plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from karmadaquota import cohorts
from karmadaquota.api import KarmadaQuota, KarmadaQuotaSpec, Loan, WaitingWorkload
from karmadaquota.controller.loans import CohortBook
from karmadaquota.evaluate import QuotaView, evaluate
from karmadaquota.quantity import Quantity
from karmadaquota.validation import validate_spec
from tests.conftest import charge_of

N = 1_000_000_000  # nanos of one unit


def m(key: str, hard: int, used: int = 0, **kw: Any) -> cohorts.Member:
    return cohorts.Member(key=key, hard={"pods": hard * N}, used={"pods": used * N}, **kw)


def pods(loans: cohorts.Loans) -> dict[tuple[str, str], int]:
    return {k: v.get("pods", 0) // N for k, v in loans.items() if v.get("pods")}


# ---------------------------------------------------------------------------------------------
# the plan


def test_a_waiting_workload_borrows_what_another_quota_leaves_unused() -> None:
    planned = cohorts.plan([m("a/a", 4, 4, wanted={"pods": 3 * N}), m("b/b", 10, 2)])
    assert pods(planned) == {("b/b", "a/a"): 3}


def test_nothing_is_lent_without_a_workload_asking_for_it() -> None:
    assert cohorts.plan([m("a/a", 4, 4), m("b/b", 10, 2)]) == {}


def test_a_lender_lends_at_most_its_lending_limit() -> None:
    lender = m("b/b", 10, 0, lending_limit={"pods": 2 * N})
    planned = cohorts.plan([m("a/a", 4, 4, wanted={"pods": 5 * N}), lender])
    assert pods(planned) == {("b/b", "a/a"): 2}


def test_a_borrower_borrows_at_most_its_borrowing_limit() -> None:
    borrower = m("a/a", 4, 4, wanted={"pods": 5 * N}, borrowing_limit={"pods": 1 * N})
    assert pods(cohorts.plan([borrower, m("b/b", 10)])) == {("b/b", "a/a"): 1}


def test_a_loan_in_use_is_kept_and_the_rest_comes_back_when_the_lender_needs_it() -> None:
    # a uses 6 of hard 4 (2 borrowed from b, 3 lent in all); b now has a workload of its own
    borrower = m("a/a", 4, 6, borrowed={"b/b": {"pods": 3 * N}})
    lender = m("b/b", 10, 5, wanted={"pods": 4 * N}, lent={"a/a": {"pods": 3 * N}})
    assert pods(cohorts.plan([borrower, lender])) == {("b/b", "a/a"): 2}


def test_a_lender_with_its_own_workload_waiting_lends_nothing_new() -> None:
    borrower = m("a/a", 4, 4, wanted={"pods": 2 * N})
    lender = m("b/b", 10, 5, wanted={"pods": 6 * N})
    assert cohorts.plan([borrower, lender]) == {}


def test_what_is_scarce_goes_first_to_the_smallest_dominant_share() -> None:
    # c lends 2; a uses 4 of 4 (share 1.0), b 8 of 16 (share 0.5): b asks later, is served first
    a = m("a/a", 4, 4, wanted={"pods": 2 * N})
    b = m("b/b", 16, 8, wanted={"pods": 10 * N})
    assert pods(cohorts.plan([a, b, m("c/c", 2)])) == {("c/c", "b/b"): 2}


def test_a_quota_whose_usage_is_not_known_lends_nothing() -> None:
    lender = cohorts.Member(key="b/b", hard={"pods": 10 * N}, used={}, known=False)
    assert cohorts.plan([m("a/a", 4, 4, wanted={"pods": 1 * N}), lender]) == {}


def test_a_borrower_records_no_more_than_its_lender_lends_it() -> None:
    planned = {("b/b", "a/a"): {"pods": 3 * N}}
    assert cohorts.borrowed("a/a", planned, {"b/b": {}}) == {}
    assert cohorts.borrowed("a/a", planned, {"b/b": {"pods": 2 * N}}) == {"b/b": {"pods": 2 * N}}
    assert cohorts.borrowed("a/a", planned, {"b/b": {"pods": 5 * N}}) == {"b/b": {"pods": 3 * N}}


def test_a_lender_records_no_less_than_its_borrower_borrows() -> None:
    assert cohorts.lent("b/b", {}, {"a/a": {"pods": 2 * N}}) == {"a/a": {"pods": 2 * N}}
    planned = {("b/b", "a/a"): {"pods": 3 * N}}
    assert cohorts.lent("b/b", planned, {"a/a": {"pods": 1 * N}}) == {"a/a": {"pods": 3 * N}}


def test_lending_more_or_borrowing_less_must_compare_and_swap_on_the_whole_status() -> None:
    loan = [{"quota": "a/a", "resources": {"pods": "2"}}]
    more = [{"quota": "a/a", "resources": {"pods": "3"}}]
    assert cohorts.narrows({"lent": loan}, {"lent": more})
    assert not cohorts.narrows({"lent": more}, {"lent": loan})
    assert cohorts.narrows({"borrowed": more}, {"borrowed": loan})
    assert cohorts.narrows({"borrowed": loan}, {})
    assert not cohorts.narrows({"borrowed": loan}, {"borrowed": more})


def test_admission_checks_the_hard_with_the_quotas_loans() -> None:
    q = quota_of("a", hard=4, used=4)
    assert not evaluate([QuotaView.of(q)], charge_of(1)).allowed
    q.status.borrowed = [Loan(quota="b/b", resources={"pods": "1"})]
    assert evaluate([QuotaView.of(q)], charge_of(1)).allowed
    q.status.lent = [Loan(quota="c/c", resources={"pods": "2"})]
    refused = evaluate([QuotaView.of(q)], charge_of(1))
    assert not refused.allowed
    assert refused.message.startswith(
        "exceeded quota: a, requested: pods=1, used: pods=4, limited: pods=3 (with its loans "
        "in cohort research; cohort research has no room to lend it yet"
    )


def test_a_lowered_borrowing_limit_holds_at_admission_at_once() -> None:
    q = quota_of("a", hard=4, used=4, borrowing=1)
    q.status.borrowed = [Loan(quota="b/b", resources={"pods": "3"})]
    assert _may_use(q) == 5  # 4 + min(3 borrowed, limit 1), before any loan is given back


# ---------------------------------------------------------------------------------------------
# validation, in Kubernetes' words


def test_limits_need_a_cohort_name_names_of_hard_and_lend_at_most_hard() -> None:
    spec = KarmadaQuotaSpec.model_validate(
        {
            "hard": {"pods": "4"},
            "cohort": "Research",
            "borrowingLimit": {"pods": "-1", "requests.cpu": "1"},
            "lendingLimit": {"pods": "5"},
        }
    )
    errors = validate_spec(spec)
    assert any(
        e.startswith('spec.cohort: Invalid value: "Research": a lowercase RFC 1123') for e in errors
    )
    assert (
        'spec.borrowingLimit[pods]: Invalid value: "-1": must be greater than or equal to 0'
        in errors
    )
    assert (
        'spec.borrowingLimit[requests.cpu]: Invalid value: "requests.cpu": must be a name of '
        "spec.hard" in errors
    )
    assert (
        'spec.lendingLimit[pods]: Invalid value: "5": must be less than or equal to '
        "spec.hard[pods] (4)" in errors
    )
    alone = KarmadaQuotaSpec.model_validate({"hard": {"pods": "4"}, "lendingLimit": {"pods": "1"}})
    assert validate_spec(alone) == [
        "spec.lendingLimit: Forbidden: must be empty when spec.cohort is empty"
    ]


# ---------------------------------------------------------------------------------------------
# histories: what admission lets the quotas use never passes Σ hard


def quota_of(
    name: str,
    hard: int,
    used: int = 0,
    cohort: str = "research",
    lending: int | None = None,
    borrowing: int | None = None,
) -> KarmadaQuota:
    spec: dict[str, Any] = {"hard": {"pods": str(hard)}, "cohort": cohort}
    if lending is not None:
        spec["lendingLimit"] = {"pods": str(lending)}
    if borrowing is not None:
        spec["borrowingLimit"] = {"pods": str(borrowing)}
    return KarmadaQuota.model_validate(
        {
            "metadata": {"name": name, "namespace": name, "resourceVersion": "1"},
            "spec": spec,
            "status": {"used": {"pods": str(used)}},
        }
    )


@dataclass
class _Record:
    quota: KarmadaQuota

    @property
    def namespace(self) -> str:
        return self.quota.metadata.namespace

    @property
    def name(self) -> str:
        return self.quota.metadata.name


@dataclass
class _Store:
    """The quota store as `CohortBook` reads it: the statuses as last written."""

    quotas: dict[str, KarmadaQuota] = field(default_factory=dict)

    def get(self, namespace: str, name: str) -> _Record | None:
        q = self.quotas.get(name)
        return None if q is None else _Record(q)


def _used(q: KarmadaQuota) -> int:
    return int(q.status.used["pods"])


def _hard(q: KarmadaQuota) -> int:
    return int(q.spec.hard["pods"])


def _may_use(q: KarmadaQuota) -> int:
    return QuotaView.of(q).hard["pods"].nanos // N


def _loan(entries: list[Loan], other: str) -> int:
    return cohorts.loans_of(entries).get(other, {}).get("pods", 0) // N


NAMES = ["a", "b", "c"]
step = st.one_of(
    st.tuples(st.just("admit"), st.sampled_from(NAMES), st.integers(1, 4)),
    st.tuples(st.just("release"), st.sampled_from(NAMES), st.integers(1, 4)),
    st.tuples(st.just("wait"), st.sampled_from(NAMES), st.integers(0, 5)),
    # the controller writes a quota's loans; an admission into it may land between its read
    # and its write (`race`)
    st.tuples(st.just("write"), st.sampled_from(NAMES), st.booleans()),
    st.tuples(st.just("leave"), st.sampled_from(NAMES), st.just(0)),
    st.tuples(st.just("join"), st.sampled_from(NAMES), st.just(0)),
    # a platform team changes a limit (None: removes it)
    st.tuples(st.just("lending"), st.sampled_from(NAMES), st.one_of(st.none(), st.integers(0, 6))),
    st.tuples(
        st.just("borrowing"), st.sampled_from(NAMES), st.one_of(st.none(), st.integers(0, 4))
    ),
)


@settings(max_examples=300, deadline=None)
@given(
    hards=st.lists(st.integers(0, 6), min_size=3, max_size=3),
    lending=st.lists(st.one_of(st.none(), st.integers(0, 6)), min_size=3, max_size=3),
    borrowing=st.lists(st.one_of(st.none(), st.integers(0, 4)), min_size=3, max_size=3),
    steps=st.lists(step, max_size=40),
)
def test_a_cohort_never_lets_its_quotas_use_more_than_their_hards(
    hards: list[int],
    lending: list[int | None],
    borrowing: list[int | None],
    steps: list[tuple[str, str, Any]],
) -> None:
    store = _Store()
    book = CohortBook(store)  # type: ignore[arg-type]
    for name, hard, lend, borrow in zip(NAMES, hards, lending, borrowing, strict=True):
        q = quota_of(
            name, hard, lending=min(lend, hard) if lend is not None else None, borrowing=borrow
        )
        store.quotas[name] = q
        book.put(_Record(q))  # type: ignore[arg-type]

    def admit(name: str, n: int) -> bool:
        q = store.quotas[name]
        if _used(q) + n <= _may_use(q):
            q.status.used = {"pods": str(_used(q) + n)}
            return True
        return False

    limits_changed = False
    for op, name, arg in steps:
        q = store.quotas[name]
        if op == "admit":
            before = _used(q)
            if admit(name, arg):
                # an admission takes a quota past hard + borrowingLimit only if it was already
                limit = q.spec.borrowingLimit
                if limit is not None and before + arg > _hard(q):
                    assert before + arg <= _hard(q) + int(limit["pods"])
                # and a lender is never refused within hard − lendingLimit: checked below
        elif op == "release":
            q.status.used = {"pods": str(max(0, _used(q) - arg))}
        elif op == "wait":
            q.status.waiting = (
                []
                if arg == 0
                else [
                    WaitingWorkload.model_validate(
                        {
                            "template": {
                                "apiVersion": "v1",
                                "kind": "Pod",
                                "name": "w",
                                "uid": "u",
                            },
                            "binding": "w",
                            "requested": {"pods": str(arg)},
                            "firstRefused": "2026-01-01T00:00:00Z",
                        }
                    )
                ]
            )
        elif op in ("leave", "join"):
            q.spec = q.spec.model_copy(update={"cohort": "" if op == "leave" else "research"})
            book.put(_Record(q))  # type: ignore[arg-type]
        elif op in ("lending", "borrowing"):
            if op == "lending" and arg is not None:
                arg = min(arg, _hard(q))
            limit = None if arg is None else {"pods": str(arg)}
            q.spec = q.spec.model_copy(update={f"{op}Limit": limit})
            limits_changed = True
        else:  # write: computed from the statuses as written, one quota of the cohort at a time
            read = q.model_copy(deep=True)
            got = book.loans(read)
            if arg:  # an admission lands between the read and the write
                admit(name, 1)
            if got is None:
                continue
            hard = {"pods": Quantity.parse(str(_hard(q)))}
            desired = read.status.model_copy(
                update={
                    "borrowed": cohorts.loan_entries(got[0], hard),
                    "lent": cohorts.loan_entries(got[1], hard),
                }
            )
            wire_read = read.status.model_dump(mode="json")
            wire_desired = desired.model_dump(mode="json")
            changed_since = _used(q) != _used(read)
            if cohorts.narrows(wire_read, wire_desired) and changed_since:
                continue  # compare-and-swap on resourceVersion: lost, computed again later
            q.status.borrowed, q.status.lent = desired.borrowed, desired.lent
        _check(store, limits_changed)


def _check(store: _Store, limits_changed: bool) -> None:
    qs = list(store.quotas.values())
    # the guarantee: what the quotas use never passes what they hold together
    assert sum(_used(q) for q in qs) <= sum(_hard(q) for q in qs)
    assert sum(_may_use(q) for q in qs) <= sum(_hard(q) for q in qs)
    for q in qs:
        # what is in use stays covered: a loan in use is never taken back
        assert _used(q) <= _may_use(q)
        key = cohorts.key(q)
        for other in qs:
            # a borrower never holds more than its lender lends it
            assert _loan(other.status.borrowed, key) <= _loan(q.status.lent, cohorts.key(other))
        # a lender keeps hard − lendingLimit (a lowered limit: once its loans in use end)
        limit = q.spec.lendingLimit
        if limit is not None and not limits_changed:
            lent = sum(v.get("pods", 0) for v in cohorts.loans_of(q.status.lent).values()) // N
            assert lent <= int(limit["pods"])


def test_a_borrowers_guards_use_a_loan_once_the_lenders_guards_gave_it_up() -> None:
    store = _Store()
    book = CohortBook(store)  # type: ignore[arg-type]
    lender = quota_of("b", 6)
    lender.status.lent = [
        Loan(quota="a/a", resources={"pods": "2"}),
        Loan(quota="c/c", resources={"pods": "2"}),
    ]
    store.quotas["b"] = lender
    held: dict[str, int] | None = {"pods": 6 * N}  # the lender's guards, Σ over its members
    book.guards_held = lambda ns, name: held
    loan = {"b/b": {"pods": 2 * N}}
    assert book._usable("a/a", loan) == {"b/b": {"pods": 0}}  # not given up yet
    held = {"pods": 3 * N}  # 3 given up: a (first by name) uses 2, c the 1 left
    assert book._usable("a/a", loan) == {"b/b": {"pods": 2 * N}}
    assert book._usable("c/c", loan) == {"b/b": {"pods": 1 * N}}
    held = None  # a member's guard not known
    assert book._usable("a/a", loan) == {}
    lender.spec = lender.spec.model_copy(update={"memberEnforcement": "None"})
    assert book._usable("a/a", loan) == loan  # no guards there: admission alone holds it


# ---------------------------------------------------------------------------------------------
# forced reclaim (reclaimWithinCohort: Any)


def cand(
    borrower: str, name: str, pods: int, priority: int = 0, written: int = 1
) -> cohorts.Candidate:
    ns = borrower.split("/")[0]
    return cohorts.Candidate(borrower, ns, name, {"pods": pods * N}, priority, written)


def test_a_reclaim_queues_the_lowest_priority_then_the_newest_until_covered() -> None:
    # b lent 4 to a (all in use); b's own workload of 3 waits: 3 to take back
    lender = m("b/b", 4, 0, wanted={"pods": 3 * N})
    lent = {"a/a": {"pods": 4 * N}}
    picks = cohorts.reclaim(
        lender,
        lent,
        {},
        [
            cand("a/a", "high", 2, priority=100),
            cand("a/a", "low-old", 1, written=5),
            cand("a/a", "low-new", 1, written=9),
            cand("c/c", "not-a-borrower", 5),
        ],
    )
    assert [c.name for c in picks] == ["low-new", "low-old", "high"]


def test_a_reclaim_counts_what_is_coming_back_and_takes_no_more_than_was_lent() -> None:
    lender = m("b/b", 4, 0, wanted={"pods": 4 * N})
    lent = {"a/a": {"pods": 2 * N}}
    many = [cand("a/a", f"x{i}", 1, written=i) for i in range(5)]
    # it may use 4 − 2: 2 short, of which 1 is on its way back already
    assert [c.name for c in cohorts.reclaim(lender, lent, {"pods": 1 * N}, many)] == ["x4"]
    assert [c.name for c in cohorts.reclaim(lender, lent, {}, many)] == ["x4", "x3"]
    # 6 wanted: 4 short, but no more than the 2 lent is taken back
    greedy = m("b/b", 4, 0, wanted={"pods": 6 * N})
    assert [c.name for c in cohorts.reclaim(greedy, lent, {}, many)] == ["x4", "x3"]
    # nothing waits: nothing reclaimed
    idle = m("b/b", 4, 0)
    assert cohorts.reclaim(idle, lent, {}, many) == []


def test_what_a_borrower_stops_using_goes_back_first_to_a_lender_that_waits() -> None:
    # a uses 5 of 2, borrowing 2 from b and 2 from c; it drops to 4: one loan unit goes back,
    # to c (its workload waits), not b (first by name)
    a = m("a/a", 2, 4, borrowed={"b/b": {"pods": 2 * N}, "c/c": {"pods": 2 * N}})
    b = m("b/b", 4, 2, lent={"a/a": {"pods": 2 * N}})
    c = m("c/c", 4, 2, wanted={"pods": 2 * N}, lent={"a/a": {"pods": 2 * N}})
    assert pods(cohorts.plan([a, b, c])) == {("b/b", "a/a"): 2}
