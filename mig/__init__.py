"""MIG partition manager: catalogues, the partition state machine, layout policies, the backend protocol
(the backends themselves are in `gpus/`).

Public API (pure code unless noted)::

    mig.catalog.load_catalog(model) -> Catalog          # static table, by model/alias/NVML name
    mig.catalog.list_models() -> list[str]
    Catalog.profile(name) / .restrict(names) / .smallest_fitting(memory_mib)
    mig.fsm.get_space(catalog, profiles=None) -> PartitionSpace   # precomputed, cached
    PartitionSpace.empty() / .full_configurations() / .n_states
    mig.fsm.PartitionState.parse(space, "3g.40gb@4,1g.10gb@0")
    PartitionState.alloc(profile, start) / .free(profile, start)  # -> new state
    PartitionState.placements / .reachable_full_configs / .successors(profile)
    mig.policies.choose(state, profile, policy="fsm"|"first-fit"|"random"|"demand",
                        demand=None, rng=None) -> Choice
    mig.policies.choose_placement(...) -> int | None    # the start only
    mig.planner.plan_merge_split(state, profile, busy=()) -> MergeSplitPlan
    mig.layout.by_size(jobs, catalog, profiles=None) / in_order(...) -> LayoutResult
    mig.simulate.parse_events(text) / run_events(space, events, policy) -> SimulationResult
    mig.apply.plan_apply(backend, gpu_index, placements, held=(), owners=None) -> list[ApplyStep]
    mig.apply.apply_layout(backend, gpu_index, placements, dry_run=False, held=(), owners=None) -> ApplyResult
    mig.desired.GpuLayout / NodeDesired                  # a node's desired layouts (the agent records them)
    mig.desired.compare(desired, actual) -> list[GpuDiff]; verdict(diffs) -> 0 | 1 | 2
    mig.backend.GpuBackend                               # the backend Protocol
    gpus.sim.backend.SimGpuBackend(state_dir=None, node="node0", gpus=None)
    gpus.nvml.backend.NvmlBackend()                       # NVML (gpus/nvml/*.py: the only modules using pynvml)
    mig.errors.MigError and subclasses                   # shared by both backends

Also: ``mig.demand`` (the value of a state under a node's size mix, for ``policy="demand"``),
``mig.node_layout`` (one GPU's next step toward the queue's layout), ``mig.bench`` (the
policies compared), ``gpus.sim.store`` / ``gpus.sim.memory`` / ``gpus.sim.counters`` (the simulated
GPU's state, memory and NVML/DCGM counters).
"""
