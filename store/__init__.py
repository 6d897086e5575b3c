"""The store: the SQLite tables (`db`: history, pairs, pair speeds, events; `curves`;
`ledger`: the action ledger) and atomic JSON files (`jsonfile`)."""
