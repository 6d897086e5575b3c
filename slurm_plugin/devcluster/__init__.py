"""A real Slurm cluster on one machine: munged, slurmctld, N `slurmd -N`, the helper, the node
agents, the SPANK plugin and the web view.

`manager` brings it up and down; `spec` and `files` write its configs, `node_side` the
SPANK build and agents, `processes` keeps the registry of what it started, `health` says how
each is, `install` adds missing Debian packages, `commands` points Slurm's commands at it,
`roots` runs other Slurm releases from Debian roots. Multi-host (`--multi-host`): `topology`
derives addresses and names, `hosts` makes each node's host (namespaces, bridge, veths) and
`holder` is the process that holds a node's namespaces and makes its private view of the files.
"""
