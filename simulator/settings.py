"""Which settings a replay decides under: the shipped ones (etc/gpupack.toml, or a site's file),
or the replay's legacy preset that the golden answers of caba947 were recorded under.

``shipped`` (the default of ``gpupack simulate``): the [packer] and [monitor] tables a site
runs, read by the helper's own loaders; ``replay-legacy``: the replay's settings before issue 34
(``legacy_packer``: unknown jobs packed at the default size, no utilisation limit, one share per
memory slice of the GPU model, no share ladder; every later job of a profile has an exact history).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from mig.catalog import Catalog
from mig.errors import MigError
from mig.share_ladder import LadderError, model_ladder
from packer.config import GIB, PackerConfig

log = logging.getLogger(__name__)

SHIPPED, LEGACY = "shipped", "replay-legacy"
SETTINGS = (SHIPPED, LEGACY)


@dataclass(frozen=True)
class LegacyReplay:
    """The replay-legacy preset's switches (the engine's block after ``self.pk =``)."""

    pair_predict: bool
    load_aware: bool


def legacy_packer(catalog: Catalog, colocate_predicting: LegacyReplay | None) -> PackerConfig:
    """The replay's own packer settings before issue 34: one share per memory slice of the
    model, any count (no ladder); colocate with the pair prediction packs busy jobs (the
    measured pairs judge them, not a utilisation cut-off) and, load-aware, unknown jobs at
    the default size."""
    pk = PackerConfig(mode="enforce", gpu_memory_gib=(int(catalog.memory_mib) << 20) / GIB,
                      shares_per_gpu=catalog.memory_slices, gpu_model="")
    if colocate_predicting is not None and colocate_predicting.pair_predict:
        pk = pk.with_overrides(max_util_pct=100.0)
        if colocate_predicting.load_aware:
            pk = pk.with_overrides(pack_unknown=True)
    return pk


def for_model(pk: PackerConfig, catalog: Catalog, model: str) -> PackerConfig:
    """The shipped [packer] table on the replay's GPU model: its memory, and its share ladder
    where the model has one for ``shares_per_gpu`` (else no model: any share count, as MPS).
    A site's own file is taken as it is; the shipped file describes one H100 site."""
    memory = (int(catalog.memory_mib) << 20) / GIB
    if not pk.gpu_model:
        return pk.with_overrides(mode="enforce", gpu_memory_gib=memory)
    try:
        model_ladder(model, pk.shares_per_gpu)
    except (LadderError, MigError) as exc:
        log.warning("%s has no share ladder of %d shares (%s): shares of any count", model, pk.shares_per_gpu, exc)
        return pk.with_overrides(mode="enforce", gpu_memory_gib=memory, gpu_model="")
    return pk.with_overrides(mode="enforce", gpu_memory_gib=memory, gpu_model=model)
