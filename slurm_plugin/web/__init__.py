"""The read-only web view: nodes x GPUs with their slices and jobs, the queue, the events.

`model` (with `slices`) and `jobview` assemble what a page shows from plain data (pure); `svg` and `pages`
render it; `source` reads Slurm, the node agents and the SQLite store (the adapter);
`server` answers HTTP on localhost (or what `[web]` allows).
"""
