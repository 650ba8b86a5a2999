"""Topic ACLs kept in step (`mirror.acl_sync`, pure), and their drift: MirrorMaker 2's rules made explicit, and a
link that removes only what it made. `tests/mirror/test_sync.py` runs them on a secured pair."""

from __future__ import annotations

import re

from kernel.config import GroupSelection, TopicSelection
from mirror.acl_sync import TopicAcl, mirrored_acls, plan_acls
from mirror.deletions import plan_deletions
from mirror.drift import Difference, acl_drift

EVERYONE = TopicSelection()
COPIES = {"orders": "dc1.orders", "payments": "dc1.payments"}


def _acl(topic: str, principal: str, operation: str, permission: str = "ALLOW", host: str = "*") -> TopicAcl:
    return TopicAcl(topic, principal, host, operation, permission)


def test_the_source_s_acls_on_mirrored_topics_are_copied_without_write_and_with_all_narrowed_to_read() -> None:
    source = [
        _acl("orders", "User:app", "READ"),
        _acl("orders", "User:app", "WRITE"),  # nobody writes into a mirror
        _acl("orders", "User:admin", "ALL"),  # narrowed
        _acl("orders", "User:intruder", "READ", "DENY"),  # a DENY is copied as it is
        _acl("orders", "User:intruder", "WRITE", "DENY", host="10.0.0.9"),
        _acl("payments", "User:app", "DESCRIBE"),
        _acl("refunds", "User:app", "READ"),  # not mirrored
    ]
    assert mirrored_acls(source, COPIES, EVERYONE) == {
        _acl("dc1.orders", "User:app", "READ"),
        _acl("dc1.orders", "User:admin", "READ"),
        _acl("dc1.orders", "User:intruder", "READ", "DENY"),
        _acl("dc1.orders", "User:intruder", "WRITE", "DENY", host="10.0.0.9"),
        _acl("dc1.payments", "User:app", "DESCRIBE"),
    }
    only_apps = TopicSelection(include=(re.compile("User:app.*"),))
    assert mirrored_acls(source, COPIES, only_apps) == {
        _acl("dc1.orders", "User:app", "READ"),
        _acl("dc1.payments", "User:app", "DESCRIBE"),
    }


def test_group_acls_are_copied_for_the_groups_selected_and_write_only_after_a_promotion() -> None:
    group = TopicAcl("billing", "User:app", "*", "READ", "ALLOW", "GROUP")
    other = TopicAcl("batch", "User:app", "*", "ALL", "ALLOW", "GROUP")
    # A group ACL named like a mirrored topic is the group's, not the topic's.
    namesake = TopicAcl("orders", "User:app", "*", "DELETE", "ALLOW", "GROUP")
    source = [group, other, namesake, _acl("orders", "User:app", "WRITE"), _acl("orders", "User:admin", "ALL")]
    assert mirrored_acls(source, COPIES, EVERYONE) == {_acl("dc1.orders", "User:admin", "READ")}  # no group: none
    billing = GroupSelection(include=(re.compile("billing|batch"),))
    assert mirrored_acls(source, COPIES, EVERYONE, groups=billing) == {
        _acl("dc1.orders", "User:admin", "READ"),
        group,
        TopicAcl("batch", "User:app", "*", "READ", "ALLOW", "GROUP"),  # ALL narrowed, as on a topic
    }
    # sync.acl_write (the target promoted): WRITE and ALL copied as they are.
    assert mirrored_acls(source, COPIES, EVERYONE, groups=billing, write=True) == {
        _acl("dc1.orders", "User:app", "WRITE"),
        _acl("dc1.orders", "User:admin", "ALL"),
        group,
        other,
    }
    assert group.describe() == "ALLOW READ for User:app on group 'billing'"
    missing = acl_drift(frozenset({group}), frozenset(), frozenset(), source_of={}, synced=True, when="now")
    assert missing == (
        Difference("group billing", "billing", "acl ALLOW READ for User:app", "ALLOW", None, True, "created now"),
    )


def test_a_round_creates_what_is_missing_and_removes_only_what_the_link_made() -> None:
    app, admin, by_hand = (
        _acl("dc1.orders", "User:app", "READ"),
        _acl("dc1.orders", "User:admin", "READ"),
        _acl("dc1.orders", "User:ops", "DESCRIBE"),
    )
    first = plan_acls(frozenset({app, admin}), frozenset({by_hand}), frozenset())
    assert (first.create, first.delete, first.owned) == ((admin, app), (), frozenset({app, admin}))
    # The source loses app's ACL, and somebody makes admin's by hand too: app's is removed, by_hand never is.
    later = plan_acls(frozenset({admin, by_hand}), frozenset({app, admin, by_hand}), first.owned)
    assert (later.create, later.delete, later.owned) == ((), (app,), frozenset({admin}))
    # An ACL the link made that somebody removed by hand is made again while the source has it.
    again = plan_acls(frozenset({admin}), frozenset(), later.owned)
    assert (again.create, again.delete, again.owned) == ((admin,), (), frozenset({admin}))
    # ... and forgotten once the source no longer has it either: nothing to remove.
    gone = plan_acls(frozenset(), frozenset(), later.owned)
    assert (gone.create, gone.delete, gone.owned) == ((), (), frozenset())


def test_acl_drift_lists_the_missing_and_the_made_that_the_source_dropped_and_leaves_hand_made_ones() -> None:
    app, admin, by_hand = (
        _acl("dc1.orders", "User:app", "READ"),
        _acl("dc1.orders", "User:admin", "READ", host="10.0.0.1"),
        _acl("dc1.orders", "User:ops", "DESCRIBE"),
    )
    source_of = {"dc1.orders": "orders"}
    found = acl_drift(
        frozenset({app}), frozenset({admin, by_hand}), frozenset({admin}), source_of=source_of, synced=True, refresh_s=5
    )
    when = "at the link's next topic refresh (every 5 s)"
    assert found == (
        Difference("dc1.orders", "orders", "acl ALLOW READ for User:app", "ALLOW", None, True, f"created {when}"),
        Difference("dc1.orders", "orders", "acl ALLOW READ for User:admin from 10.0.0.1", None, "ALLOW", True,
                   f"made by the link, gone from the source: removed {when}"),
    )  # fmt: skip
    assert found[0].line() == f"acl ALLOW READ for User:app: created {when}"
    off = acl_drift(frozenset({app}), frozenset(), frozenset(), source_of=source_of, synced=False)
    assert [(d.synced, d.note) for d in off] == [(False, "sync.acls is off for this link")]


def test_a_copy_is_deleted_only_if_the_link_made_it_and_only_after_the_grace_from_the_first_sighting() -> None:
    first = plan_deletions(["a", "b"], created={"a"}, gone_since={}, now_ms=1_000, grace_ms=3_000)
    assert (first.delete, dict(first.waiting), first.not_ours) == ((), {"a": 4_000}, ("b",))
    assert dict(first.gone_since) == {"a": 1_000, "b": 1_000}
    early = plan_deletions(["a"], created={"a"}, gone_since=first.gone_since, now_ms=3_999, grace_ms=3_000)
    assert early.delete == ()
    due = plan_deletions(["a"], created={"a"}, gone_since=first.gone_since, now_ms=4_000, grace_ms=3_000)
    assert due.delete == ("a",)
    # The source topic came back within the grace: forgotten, and a later deletion starts the grace again.
    back = plan_deletions([], created={"a"}, gone_since=first.gone_since, now_ms=2_000, grace_ms=3_000)
    assert dict(back.gone_since) == {}
    again = plan_deletions(["a"], created={"a"}, gone_since=back.gone_since, now_ms=5_000, grace_ms=3_000)
    assert (again.delete, dict(again.waiting)) == ((), {"a": 8_000})
