"""The greedy-determinism check on a real llama.cpp server (SmolLM2-135M, 4 slots), rungs 1, 2, 4.

Whether llama.cpp returns the same greedy text for a prompt at every batch size is the server's
business, not the harness's: this test checks that the check ran (every request hashed and
compared where a reference exists) and reports what it found on stdout (`pytest -s`), whatever
it is. docs/measurements.md records the result.
"""

from __future__ import annotations

import pytest
from fixtures.real_runs import sweep_ladder

from llmload.analysis.identity.determinism import divergence, divergence_notes
from llmload.analysis.run.postprocess import load_run
from llmload.analysis.run.sweep_rows import group_rungs

pytestmark = pytest.mark.real

LADDER = (
    "rungs: [1, 2, 4]\nrequests_per_user: 2\nmax_tokens: 32\nprompt_tokens: 32\ncheck_determinism: true\n"
)


def test_determinism_check_runs_on_llama_cpp(llama_server, tmp_path):
    run = sweep_ladder(llama_server.url, tmp_path / "run", LADDER)
    result = load_run(run.prefix)
    rungs = group_rungs(result.iter_records(), "determinism")  # the check's probes, one a user
    records = [r for rung in rungs for r in rung.records]
    assert len(records) == 1 + 2 + 4 and all(r.ok and r.text_hash for r in records)
    assert all(r.chunks == r.output_tokens == 32 for r in records)  # one token per chunk: exact index
    divs = divergence(rungs)
    assert [d.conc for d in divs] == [1, 2, 4]
    assert [d.compared for d in divs] == [0, 1, 2]  # c1 probes prompt 0, c2 0-1, c4 0-3: 2-3 new
    print("\nllama.cpp greedy determinism (rungs 1, 2, 4):")
    for d in divs:
        print(
            f"  c{d.conc}: {d.differing} of {d.compared} differ from {' / '.join(d.references) or '-'}"
            f"; median first differing token {d.first_diff_median}"
        )
    for note in divergence_notes(divs):
        print(f"  {note}")
