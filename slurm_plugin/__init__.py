"""Everything that speaks Slurm: the submit shim, the adapter, the daemons, the CLI, the dev cluster."""
