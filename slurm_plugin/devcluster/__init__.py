"""A real Slurm cluster on one machine: munged, slurmctld, N `slurmd -N`, the helper."""
