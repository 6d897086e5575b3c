"""A database as an older schema left it: what each later version added, taken off again, so a
test can open it with today's `Store` and see the migration.

(Imported as `tests.unit.store.old_schemas`; not a test module.)
"""
from __future__ import annotations

# what each schema version added (store.db's migrations), undone
ADDED_IN = {
    3: ("drop table pair_speeds",),
    4: ("drop table run_curves",),
    5: ("drop index idx_runs_fp_bound_ended", "alter table runs drop column lower_bound",
        "alter table runs drop column end_state"),
    6: ("drop table slice_journal",),
    7: ("drop table head_lifts",),
    8: ("alter table runs drop column need_bytes", "alter table runs drop column untouched"),
    9: ("drop table workload_keys", "drop table level_guesses"),
}


def as_schema(store, version: int) -> None:
    """Turn ``store``'s database back to what schema ``version`` wrote (its rows kept)."""
    for added in sorted(ADDED_IN, reverse=True):
        if added > version:
            for undo in ADDED_IN[added]:
                store.db.execute(undo)
    store.db.execute(f"pragma user_version = {version}")
