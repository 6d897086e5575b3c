"""The controller helper: a daemon next to slurmctld that answers the submit shim."""
