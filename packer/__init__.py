"""Pure packing decisions: estimates from history, exclusive versus packed, co-runner choice,
contention, grow by preemption, regrouping, the run-time actions' modes and outcomes.

`rules.SuiteRules` holds the settings and makes every decision the helper and the simulator
share. The SQLite store
(history, pairs, pair speeds, events, action ledger) is `store.db.Store`, outside this package.
"""
