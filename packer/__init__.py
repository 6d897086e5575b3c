"""Pure packing decisions: estimates from history, exclusive versus packed, co-runner choice."""
