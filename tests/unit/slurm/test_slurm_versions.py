"""What each Slurm release speaks and does, as the adapter knows it."""
from __future__ import annotations

import pytest

from slurm_plugin.slurm.model import SlurmVersion
from slurm_plugin.slurm.parse import detect_dialect


@pytest.mark.parametrize(
    "release, parser",
    [((22, 5, 8), "v0.0.38"), ((23, 2, 7), "v0.0.39"), ((23, 11, 10), "v0.0.40"), ((24, 5, 8), "v0.0.41"),
     ((24, 11, 5), "v0.0.42"), ((25, 5, 1), "v0.0.43"), ((25, 11, 0), "v0.0.44"), ((26, 5, 5), "v0.0.45")],
)
def test_each_release_series_speaks_its_data_parser(release, parser):
    assert SlurmVersion(*release).data_parser == parser


def test_a_document_without_data_parser_gets_its_release_default():
    doc = {"meta": {"slurm": {"version": {"major": "24", "minor": "11", "micro": "5"}}}}
    assert detect_dialect(doc).parser == "v0.0.42"
    doc = {"meta": {"plugin": {"data_parser": "data_parser/v0.0.45"}, "slurm": {"release": "26.05.5"}}}
    assert detect_dialect(doc).parser == "v0.0.45"


@pytest.mark.parametrize(
    "release, filters, double_books",
    [((22, 5, 8), False, True), ((23, 2, 7), False, True), ((23, 11, 4), True, True),
     ((23, 11, 5), True, False), ((24, 11, 5), True, False), ((26, 5, 5), True, False)],
)
def test_what_differs_between_releases(release, filters, double_books):
    version = SlurmVersion(*release)
    assert version.filters_json is filters
    assert version.double_books_shared_gpus is double_books
