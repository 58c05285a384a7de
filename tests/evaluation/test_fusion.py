"""`semiret fuse` and :func:`fuse_runs`: saved runs fused by reciprocal ranks or normalised scores, as the hybrid
retriever fuses its rankings."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data.trec import read_trec_run, write_trec_run
from semiret.errors import SemiretError
from semiret.evaluation.fusion import fuse_runs

A = {"q1": {"a": 3.0, "b": 2.0, "c": 1.0}, "q2": {"x": 5.0}}
B = {"q1": {"c": 0.9, "a": 0.5, "d": 0.1}, "q3": {"y": 1.0}}


def test_reciprocal_rank_fusion_by_hand():
    fused = fuse_runs([A, B], rrf_k=1)
    assert fused["q1"] == pytest.approx({"a": 1 / 2 + 1 / 3, "c": 1 / 4 + 1 / 2, "b": 1 / 3, "d": 1 / 4})
    assert list(fused["q1"]) == ["a", "c", "b", "d"]
    assert fused["q2"] == {"x": 1 / 2} and fused["q3"] == {"y": 1 / 2}  # a query of one run only


def test_score_fusion_weights_depth_and_k():
    fused = fuse_runs([A, B], method="score", weights=[1.0, 3.0])
    # A: a 1, b 0.5, c 0; B: c 1, a 0.5, d 0 (min-max over each ranking)
    assert fused["q1"] == pytest.approx({"c": 3.0, "a": 1 + 1.5, "b": 0.5, "d": 0.0})
    assert list(fuse_runs([A, B], method="score", weights=[1.0, 3.0], k=2)["q1"]) == ["c", "a"]
    shallow = fuse_runs([A, B], depth=1, rrf_k=0)["q1"]
    assert shallow == {"a": 1.0, "c": 1.0}
    assert list(shallow) == ["c", "a"]  # equal sums: trec_eval's order, the larger id first
    assert fuse_runs([A, B], weights=[1, 0])["q1"].keys() == {"a", "b", "c"}  # a run weighted 0 adds nothing


def test_z_score_and_distribution_based_fusions_by_hand():
    """OpenSearch's z_score normalisation and Qdrant's distribution-based score fusion (dbsf), by hand, both with the
    sample standard deviation: A's q1 scores 3, 2, 1 (mean 2, std 1); B's 0.9, 0.5, 0.1 (mean 0.5, std 0.4). A z-score
    at or below 0 counts 0.001 (so a document retrieved never counts less than one not retrieved)."""
    z = fuse_runs([A, B], method="zscore", weights=[1.0, 2.0])
    assert z["q1"] == pytest.approx({"a": 1.0 + 2 * 0.001, "b": 0.001, "c": 0.001 + 2 * 1.0, "d": 2 * 0.001})
    assert z["q2"] == {"x": 1.0}  # one score: 1
    dbsf = fuse_runs([A, B], method="dbsf")
    assert dbsf["q1"] == pytest.approx({"a": 0.5 + 1 / 6 + 0.5, "b": 0.5, "c": 0.5 - 1 / 6 + 0.5 + 1 / 6,
                                        "d": 0.5 - 1 / 6})
    assert dbsf["q2"] == {"x": 0.5}
    assert list(dbsf["q1"]) == ["a", "c", "b", "d"]
    # the helper's case: x, found by both runs below their means, ranks above y, found by one
    first = {"q1": {"a": 10.0, "x": 2.0, "y": 1.0}}
    second = {"q1": {"b": 10.0, "c": 9.0, "x": 2.0}}
    assert list(fuse_runs([first, second], method="zscore")["q1"]).index("x") < list(
        fuse_runs([first, second], method="zscore")["q1"]).index("y")


def test_ties_within_a_run_are_read_in_trec_eval_order():
    tied = {"q": {"a": 1.0, "b": 1.0}}
    assert list(fuse_runs([tied, {"q": {}}], rrf_k=0)["q"]) == ["b", "a"]  # b ranks first among equal scores


@pytest.mark.parametrize("kwargs, message", [
    ({"runs": [A]}, "two rankings or more"),
    ({"method": "comb"}, "one of rrf, score, zscore, dbsf"),
    ({"weights": [1.0]}, "1 weights for 2 rankings"),
    ({"weights": [1.0, -1.0]}, "not all 0"),
    ({"weights": [0, 0]}, "not all 0"),
    ({"weights": [1.0, float("nan")]}, "finite"),
    ({"rrf_k": -1}, "rrf_k"),
    ({"depth": 0}, "at least 1"),
    ({"k": 0}, "at least 1"),
])
def test_bad_fusions_are_refused(kwargs, message):
    with pytest.raises(SemiretError, match=message):
        fuse_runs(**{"runs": [A, B], **kwargs})


def test_fuse_command_writes_a_run_compare_reads(tmp_path):
    write_trec_run(A, tmp_path / "a.trec")
    write_trec_run(B, tmp_path / "b.trec")
    out = tmp_path / "fused.trec"
    done = CliRunner().invoke(app, ["fuse", str(tmp_path / "a.trec"), str(tmp_path / "b.trec"), "-o", str(out),
                                    "--method", "score", "--weight", "1", "--weight", "3", "-k", "3"])
    assert done.exit_code == 0, done.output
    assert read_trec_run(out) == {"q1": {"c": 3.0, "a": 2.5, "b": 0.5}, "q2": {"x": 1.0}, "q3": {"y": 3.0}}
    assert out.read_text().split("\n")[0].split() == ["q1", "Q0", "c", "1", "3.0", "fused"]
    refused = CliRunner().invoke(app, ["fuse", str(tmp_path / "a.trec"), "-o", str(out)])
    assert refused.exit_code == 2 and "two rankings or more" in refused.output


def test_runs_sharing_no_query_are_fused_with_a_warning(tmp_path, caplog):
    write_trec_run({"q1": {"a": 1.0}}, tmp_path / "a.trec")
    write_trec_run({"topic-1": {"a": 1.0}}, tmp_path / "b.trec")  # another numbering of the same queries, say
    done = CliRunner().invoke(app, ["fuse", str(tmp_path / "a.trec"), str(tmp_path / "b.trec"), "-o",
                                    str(tmp_path / "fused.trec")])
    assert done.exit_code == 0 and "the runs share no query id" in caplog.text and "'topic-1'" in caplog.text


def test_deep_reciprocal_ranks_are_written_apart(tmp_path):
    """1/1060 and 1/1061 differ by less than 1e-6: written with 6 decimals they would tie, and read back in
    document-id order."""
    deep = {"q": {f"d{i:04d}": 1000.0 - i for i in range(1000)}}
    reverse = {"q": {f"d{i:04d}": float(i) for i in range(1000)}}
    for run, name in ((deep, "a.trec"), (reverse, "b.trec")):
        write_trec_run(run, tmp_path / name)
    out = tmp_path / "fused.trec"
    done = CliRunner().invoke(app, ["fuse", str(tmp_path / "a.trec"), str(tmp_path / "b.trec"), "-o", str(out),
                                    "--weight", "1", "--weight", "0.999"])
    assert done.exit_code == 0, done.output
    fused = fuse_runs([read_trec_run(tmp_path / "a.trec"), read_trec_run(tmp_path / "b.trec")], weights=[1, 0.999])
    written = read_trec_run(out)["q"]
    assert sorted(written, key=lambda d: (written[d], d), reverse=True) == list(fused["q"])
