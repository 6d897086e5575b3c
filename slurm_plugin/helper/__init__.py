"""The controller helper: a daemon next to slurmctld that answers the submit shim.

Two processes (`daemon`): the submit side (`server`, `protocol`, `submit_service`) answers
the shim from memory and the cluster view (`view_file`, `cluster_view`); the watcher
(`watcher`) polls Slurm (`slurm_poll`), publishes that view and runs the `monitor`, a loop
over `watches/`. Settings: `settings` ([packer], [paths]) and `monitor_settings` ([monitor]).
"""
