"""`make bench`: measure every topic on the GPU, write the results file and plots.

    python -m kernels.bench                      # every topic
    python -m kernels.bench --topics vector_add  # one topic; the others are kept

A topic is one module of this package that defines `TOPIC` (its name in the
results file). Everything the site, the bench and the tests know about it
is declared there, and found here by scanning the package: nothing else
names it.

    TOPIC                     name of the topic in the results file
    measure(quick)            -> list of records (kernels.results.record)
    plot(data, out_dir)       -> the plots it draws from the results file
    summary(data)             -> lines `make bench` prints after measuring
    LABELS                    {record key: (Chinese, English) column label}
                              for the keys it adds to a record
    WORDS                     {record key: {word: (Chinese, English)}}: the
                              words of a text column, translated in tables
    claims(data)              asserts what its pages say about its records
                              (tests/test_results.py runs it)
    sanitize()                launches its CUDA C kernels once at odd sizes and
                              checks them (`make sanitize` runs it under
                              compute-sanitizer; tests.gpu_driver)
    ROOFLINE = (marker, color) and roofline_points(data) -> [(label,
                              FLOP per byte, GFLOP/s)]: its points on the
                              roofline (kernels/bench/roofline.py)
    roof(data)                {"gbps": ...} or {"gflops": ...}: the roofline's
                              ceilings, from the topic that measures them
    LISTINGS                  {file name: function returning its text}: the
                              SASS or ptxas listings its pages embed
                              (docs/assets/sass/; python -m kernels.bench.listings)
    ORDER                     where it sorts (the chapters' order)
    rel_err_bound(record)     the largest rel_err a correct record of it can
                              have, where 1e-3 is wrong for it (a format's
                              own rounding); tests/test_results.py

Only TOPIC, measure, plot and summary are required.
"""

from __future__ import annotations

import importlib
import pkgutil

NOT_TOPICS = {"plotting", "roofline", "listings"}


def _discover() -> dict:
    found = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_") or info.name in NOT_TOPICS:
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "TOPIC"):
            found.append(module)
    found.sort(key=lambda m: (getattr(m, "ORDER", 1000), m.TOPIC))
    return {m.TOPIC: m for m in found}


TOPICS = _discover()


def labels(topic: str) -> dict[str, tuple[str, str]]:
    """The column labels a topic declares for its own record keys."""
    return dict(getattr(TOPICS.get(topic), "LABELS", {}))


def words(topic: str) -> dict[str, dict[str, tuple[str, str]]]:
    """The words of a topic's text columns, translated (its WORDS)."""
    return dict(getattr(TOPICS.get(topic), "WORDS", {}))
