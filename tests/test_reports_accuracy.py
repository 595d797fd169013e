"""Accuracy-versus-epsilon reports: loading, validation, Markdown and plots from records only."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dpkd_audit.reports import (
    PAPER_REFERENCES,
    REQUIRED_KEYS,
    TABLE_COLUMNS,
    Metric,
    PaperReference,
    accuracy_figure,
    load_records,
    markdown_table,
    plot_accuracy,
    references_for,
    results_overview,
    seconds_note,
    sweep_readme,
    validate_record,
)

DEVICE = "cpu (2 threads)"


def _record(epsilon, accuracy, *, seed=0, mode="central", method="rknn", dataset="mnist",
            **extra):
    record = {"method": method, "dataset": dataset, "mode": mode, "epsilon": epsilon,
              "test_accuracy": accuracy, "label_accuracy": accuracy - 0.01,
              "epsilon_published": epsilon, "epsilon_record_level": epsilon, "delta": 0.0,
              "clusters": 40, "k": 1, "representation": "hog-pca", "seed": seed,
              "device": DEVICE, "preset": "small", "seconds": {"representation": 3.1,
                                                               "total": 10.0 + seed},
              "command": "dpkd run rknn ..."}
    record.update(extra)
    return record


def _sweep():
    """Central: 3 epsilons x 2 seeds; local-collision: 2 epsilons x 1 seed."""
    records = [_record(eps, acc + 0.002 * seed, seed=seed)
               for eps, acc in [(0.04, 0.95), (0.1, 0.97), (1.0, 0.98)] for seed in (0, 1)]
    records += [_record(eps, acc, mode="local-collision", clusters=10)
                for eps, acc in [(0.4, 0.90), (1.0, 0.93)]]
    return records


def _write_jsonl(path, records, *, extra_lines=()):
    lines = [json.dumps(r) for r in records] + list(extra_lines)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _legend(fig):
    return [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


# --- loading and validation ------------------------------------------------------------------

def test_load_records_reads_jsonl_and_json_in_order(tmp_path):
    records = _sweep()
    jsonl = _write_jsonl(tmp_path / "results.jsonl", records[:3], extra_lines=["", "  "])
    single = tmp_path / "run.json"
    single.write_text(json.dumps(records[3], indent=2), encoding="utf-8")
    loaded = load_records([jsonl, single])
    assert loaded == records[:4]
    assert load_records(str(jsonl)) == records[:3]


def test_malformed_json_line_names_file_and_line(tmp_path):
    path = _write_jsonl(tmp_path / "results.jsonl", _sweep()[:2], extra_lines=['{"method": '])
    with pytest.raises(ValueError, match=r"results\.jsonl:3: malformed JSON"):
        load_records(path)


def test_malformed_json_file_names_file_and_line(tmp_path):
    path = tmp_path / "run.json"
    path.write_text('{\n  "method": "rknn",\n  oops\n}', encoding="utf-8")
    with pytest.raises(ValueError, match=r"run\.json:3: malformed JSON"):
        load_records(path)


def test_missing_required_key_names_file_line_and_key(tmp_path):
    bad = _record(0.1, 0.9)
    del bad["epsilon"], bad["mode"]
    path = _write_jsonl(tmp_path / "results.jsonl", [_record(0.1, 0.9), bad])
    with pytest.raises(ValueError, match=r"results\.jsonl:2: .*'mode', 'epsilon'"):
        load_records(path)


@pytest.mark.parametrize(("key", "value", "message"), [
    ("test_accuracy", 98.1, "test_accuracy must be a real number in \\[0, 1\\]; got 98.1"),
    ("epsilon", 0, "epsilon must be a real number > 0"),
    ("epsilon", "inf", "epsilon must be"),
    ("label_accuracy", -0.5, "label_accuracy must be"),
    ("epsilon_record_level", "lots", "epsilon_record_level must be"),
    ("delta", 1.5, "delta must be"),
    ("clusters", 0, "clusters must be an integer >= 1"),
    ("method", "", "method must be a non-empty string"),
    ("seconds", {"total": -1}, "seconds\\['total'\\] must be"),
])
def test_out_of_range_values_are_refused_with_the_key(tmp_path, key, value, message):
    record = _record(0.1, 0.9)
    record[key] = value
    path = _write_jsonl(tmp_path / "r.jsonl", [record])
    with pytest.raises(ValueError, match=r"r\.jsonl:1: " + message):
        load_records(path)


def test_line_that_is_not_an_object_is_refused(tmp_path):
    path = _write_jsonl(tmp_path / "r.jsonl", [], extra_lines=["[1, 2]"])
    with pytest.raises(ValueError, match=r"r\.jsonl:1: a record must be a JSON object"):
        load_records(path)


def test_load_records_file_errors(tmp_path):
    with pytest.raises(ValueError, match=r"suffix '\.txt'"):
        load_records(tmp_path / "results.txt")
    with pytest.raises(FileNotFoundError, match=r"nothing\.jsonl"):
        load_records(tmp_path / "nothing.jsonl")
    with pytest.raises(ValueError, match="at least one"):
        load_records([])
    (tmp_path / "empty.jsonl").write_text("\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no records"):
        load_records(tmp_path / "empty.jsonl")


def test_validate_record_accepts_minimal_records_and_infinite_record_level():
    minimal = {key: value for key, value in _record(0.1, 0.9).items() if key in REQUIRED_KEYS}
    assert validate_record(minimal) is minimal
    for value in (None, "inf", "Infinity", math.inf):
        validate_record(_record(0.1, 0.9, epsilon_record_level=value))
    with pytest.raises(ValueError, match=r"^results: record is missing"):
        validate_record({"method": "rknn"}, where="results")


# --- Markdown --------------------------------------------------------------------------------

def _rows(table):
    lines = table.splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(header, [c.strip() for c in line.strip("|").split("|")], strict=True))
            for line in lines[2:]]


def test_markdown_table_aggregates_seeds_and_rounds():
    table = markdown_table(_sweep())
    lines = table.splitlines()
    assert lines[0] == "| " + " | ".join(TABLE_COLUMNS) + " |"
    rows = _rows(table)
    assert len(rows) == 5  # 3 central epsilons (2 seeds each) + 2 local-collision
    first = rows[0]
    assert (first["mode"], first["target eps"], first["s"], first["k"]) == ("central", "0.04",
                                                                            "40", "1")
    assert first["runs"] == "2 (seeds 0, 1)"
    assert first["test acc (%)"] == "95.10 (95.00–95.20)"
    assert first["label acc (%)"] == "94.10 (94.00–94.20)"
    assert first["seconds"] == "10.5"  # mean of the totals 10 and 11
    assert first["device"] == DEVICE and first["setup"] == "hog-pca / small"
    assert first["delta"] == "0"
    single = rows[3]
    assert single["mode"] == "local-collision" and single["runs"] == "1 (seed 0)"
    assert single["test acc (%)"] == "90.00"


def test_markdown_table_reference_column():
    rows = _rows(markdown_table(_sweep()))
    by_key = {(r["mode"], r["target eps"]): r["paper test acc (%)"] for r in rows}
    assert by_key[("central", "0.1")] == "99.10 (s=40)"
    assert by_key[("central", "0.04")] == "98.60 (s=40)"
    assert by_key[("central", "1")] == "-"
    assert by_key[("local-collision", "0.4")] == "98.50 (s=10)"
    custom = PaperReference(method="rknn", dataset="mnist", mode="central", epsilon=1.0,
                            test_accuracy=0.5, source="made up for the test")
    rows = _rows(markdown_table(_sweep(), references=[custom]))
    assert [r["paper test acc (%)"] for r in rows] == ["-", "-", "50.00", "-", "-"]


def test_markdown_table_infinite_and_missing_epsilons():
    records = [_record(0.1, 0.9, epsilon_record_level=None, seed=0),
               _record(0.2, 0.9, epsilon_record_level="inf"),
               _record(0.3, 0.9, epsilon_record_level=math.inf),
               _record(0.4, 0.9, epsilon_published=None, delta=1e-5)]
    del records[3]["epsilon_record_level"]
    rows = _rows(markdown_table(records))
    assert [r["record-level eps"] for r in rows] == ["∞ (not DP)"] * 3 + ["-"]
    assert rows[3]["published eps"] == "-" and rows[3]["delta"] == "1e-05"
    # A record-level epsilon that differs over seeds lists both values.
    mixed = [_record(0.1, 0.9, seed=0), _record(0.1, 0.9, seed=1, epsilon_record_level=None)]
    assert _rows(markdown_table(mixed))[0]["record-level eps"] == "0.1, ∞ (not DP)"
    # Values written by json (Infinity) survive a round trip.
    assert json.loads(json.dumps(records[2]))["epsilon_record_level"] == math.inf


def test_markdown_table_is_deterministic_and_separates_setups():
    records = [*_sweep(), _record(0.1, 0.99, clusters=100)]
    shuffled = list(records)
    random.Random(3).shuffle(shuffled)
    assert markdown_table(shuffled) == markdown_table(records)
    rows = [r for r in _rows(markdown_table(records))
            if r["mode"] == "central" and r["target eps"] == "0.1"]
    assert [(r["s"], r["test acc (%)"]) for r in rows] == [("40", "97.10 (97.00–97.20)"),
                                                           ("100", "99.00")]


def test_markdown_table_refuses_bad_input():
    with pytest.raises(ValueError, match="records must not be empty"):
        markdown_table([])
    with pytest.raises(ValueError, match=r"records\[1\]: .*missing required key"):
        markdown_table([_record(0.1, 0.9), {"method": "rknn"}])
    with pytest.raises(ValueError, match="references"):
        markdown_table(_sweep(), references=["not a reference"])


def test_sweep_readme_has_title_command_device_plot_and_table():
    command = "dpkd sweep rknn --dataset mnist --epsilons 0.04 0.1 1 --seeds 0 1"
    page = sweep_readme(_sweep(), command=command, title="Reverse k-NN on MNIST",
                        plot_name="accuracy.png")
    assert page.startswith("# Reverse k-NN on MNIST\n")
    assert f"```bash\n{command}\n```" in page
    assert f"Device: `{DEVICE}`." in page
    assert "![Accuracy versus epsilon](accuracy.png)" in page
    assert markdown_table(_sweep()) in page
    assert "## Paper references" in page and "Table 1" in page
    assert "dpdfd" not in page  # only the references of the records' methods are listed
    assert "![" not in sweep_readme(_sweep(), command="x", title="t", plot_name=None)
    mixed = [*_sweep(), _record(0.1, 0.9, device="cuda (NVIDIA H100)")]
    assert "Devices: `cpu (2 threads)`, `cuda (NVIDIA H100)`." in sweep_readme(
        mixed, command="x", title="t")


def test_sweep_readme_refuses_bad_arguments():
    with pytest.raises(ValueError, match="plot_name must be a relative path"):
        sweep_readme(_sweep(), command="x", title="t", plot_name="/tmp/a.png")
    with pytest.raises(ValueError, match="command must be a non-empty string"):
        sweep_readme(_sweep(), command=" ", title="t")


# --- plots -----------------------------------------------------------------------------------

def test_figure_has_one_series_per_group_and_paper_stars():
    fig = accuracy_figure(_sweep())
    ax = fig.axes[0]
    # The paper's s is named where it differs from ours (40): 10 at eps 0.01.
    assert _legend(fig) == ["rknn mnist central", "rknn mnist local-collision",
                            "paper: rknn mnist central (s=10 at eps 0.01, s=40 at eps 0.04, "
                            "0.1; ours s=40)",
                            "paper: rknn mnist local-collision"]
    assert ax.get_xscale() == "log"
    stars = [line for line in ax.lines if line.get_marker() == "*"]
    assert len(stars) == 2
    assert all(line.get_markerfacecolor() == "none" for line in stars)
    central_paper = next(line for line in stars if "central" in line.get_label())
    np.testing.assert_allclose(central_paper.get_xdata(), [0.01, 0.04, 0.1])
    np.testing.assert_allclose(central_paper.get_ydata(), [98.5, 98.6, 99.1])
    # Central runs: mean over the two seeds in %, sorted by epsilon, with min-max error bars;
    # both series have eps=1, so each is offset along x by one factor, within 5%.
    central = next(c for c in ax.containers if c.get_label() == "rknn mnist central")
    xs = np.asarray(central.lines[0].get_xdata(), float)
    factor = xs / [0.04, 0.1, 1.0]
    np.testing.assert_allclose(factor, factor[0])
    assert 0.95 < factor[0] < 1.0
    np.testing.assert_allclose(np.asarray(central.lines[0].get_ydata(), float),
                               [95.1, 97.1, 98.1])
    assert central.has_yerr
    assert any(DEVICE in t.get_text() for t in fig.texts)


def _series_lines(fig):
    """Legend label -> the Line2D that carries the series' markers (plain or error bars)."""
    ax = fig.axes[0]
    lines = {c.get_label(): c.lines[0] for c in ax.containers}
    lines.update({line.get_label(): line for line in ax.lines
                  if not line.get_label().startswith("_")})
    return lines


def test_one_colour_per_mode_for_its_series_and_its_paper_markers():
    records = [*_sweep(), _record(0.1, 0.99, clusters=100)]  # a second central setup
    fig = accuracy_figure(records, show_label_accuracy=True)
    lines = _series_lines(fig)
    central = [lab for lab in lines if "central" in lab]
    local = [lab for lab in lines if "local-collision" in lab]
    assert len(central) == 5 and len(local) == 3  # 2 setups x (test, label) + paper; 1 + 1 + 1
    for group in (central, local):
        assert len({lines[lab].get_color() for lab in group}) == 1
        assert len({lines[lab].get_markeredgecolor() for lab in group}) == 1
    assert lines[central[0]].get_color() != lines[local[0]].get_color()
    # The two central setups: same colour, told apart by marker and line style.
    first, second = "rknn mnist central [s=40]", "rknn mnist central [s=100]"
    assert lines[first].get_marker() != lines[second].get_marker()
    assert lines[first].get_linestyle() != lines[second].get_linestyle()


def test_paper_markers_only_for_modes_in_the_records():
    central_only = [r for r in _sweep() if r["mode"] == "central"]
    labels = _legend(accuracy_figure(central_only))
    assert [lab for lab in labels if lab.startswith("paper")] == [
        "paper: rknn mnist central (s=10 at eps 0.01, s=40 at eps 0.04, 0.1; ours s=40)"]
    shuffle_only = [_record(0.1, 0.97, mode="shuffle")]
    assert not [lab for lab in _legend(accuracy_figure(shuffle_only)) if "paper" in lab]
    page = sweep_readme(shuffle_only, command="x", title="t")
    assert "## Paper references" not in page
    assert "local-collision" not in sweep_readme(central_only, command="x", title="t")
    # References given explicitly are all drawn.
    explicit = references_for("rknn", "mnist", mode="local-collision")
    assert _legend(accuracy_figure(central_only, references=explicit)) == [
        "rknn mnist central", "paper: rknn mnist local-collision (s=10)"]


def test_paper_s_is_not_named_where_it_equals_ours():
    records = [_record(eps, 0.9, mode="local-collision", clusters=10) for eps in (0.4, 1.0)]
    assert _legend(accuracy_figure(records))[-1] == "paper: rknn mnist local-collision"
    records = [_record(eps, 0.9, mode="local-collision", clusters=20) for eps in (0.4, 1.0)]
    assert _legend(accuracy_figure(records))[-1] == (
        "paper: rknn mnist local-collision (s=10; ours s=20)")


def test_coinciding_series_stay_distinguishable():
    # Identical accuracies at identical epsilons (as local-rr and local-collision at eps=4).
    records = [_record(eps, 0.83, mode=mode, clusters=10) for mode in ("local-rr",
                                                                      "local-collision")
               for eps in (1.0, 4.0)]
    fig = accuracy_figure(records, references=[])
    lines = _series_lines(fig)
    a, b = lines["rknn mnist local-collision"], lines["rknn mnist local-rr"]
    assert a.get_marker() != b.get_marker() and a.get_color() != b.get_color()
    xa, xb = np.asarray(a.get_xdata(), float), np.asarray(b.get_xdata(), float)
    assert np.all(xa != xb)  # offset along x ...
    np.testing.assert_allclose(xa, [1.0, 4.0], rtol=0.05)  # ... by a few percent at most
    np.testing.assert_allclose(xb, [1.0, 4.0], rtol=0.05)
    assert np.all(xa < xb) or np.all(xb < xa)
    assert any("offset along x" in t.get_text() for t in fig.texts)
    assert not any("stars" in t.get_text() for t in fig.texts)  # no paper marker drawn
    # A lone series is drawn at its exact epsilons, with no such note.
    fig = accuracy_figure(records[:2], references=[])
    np.testing.assert_allclose(np.asarray(fig.axes[0].lines[0].get_xdata(), float), [1.0, 4.0])
    assert not any("offset" in t.get_text() for t in fig.texts)


def test_figure_options_label_accuracy_references_and_metric():
    fig = accuracy_figure(_sweep(), references=[], show_label_accuracy=True, title="custom")
    assert _legend(fig) == ["rknn mnist central", "rknn mnist central (label acc)",
                            "rknn mnist local-collision",
                            "rknn mnist local-collision (label acc)"]
    assert fig.axes[0].get_title() == "custom"
    dashed = [c for c in fig.axes[0].containers if c.get_label().endswith("(label acc)")]
    assert dashed and dashed[0].lines[0].get_linestyle() == "--"
    fig = accuracy_figure(_sweep(), metric="label_accuracy")
    # Only the central references publish a label accuracy.
    assert _legend(fig)[-1].startswith("paper: rknn mnist central (")
    assert not any("local-collision" in lab and "paper" in lab for lab in _legend(fig))
    assert "label accuracy (%)" == fig.axes[0].get_ylabel()
    varied = [*_sweep(), _record(0.1, 0.99, clusters=100)]
    assert "rknn mnist central [s=100]" in _legend(accuracy_figure(varied, references=[]))
    with pytest.raises(ValueError, match="metric must be one of"):
        accuracy_figure(_sweep(), metric="accuracy")
    assert Metric.parse("label-accuracy") is Metric.LABEL_ACCURACY


def test_figure_refuses_when_nothing_can_be_drawn():
    records = [_record(0.1, 0.9, cluster_purity=None)]
    with pytest.raises(ValueError, match="no record and no reference"):
        accuracy_figure(records, metric=Metric.CLUSTER_PURITY)
    with pytest.raises(ValueError, match="records must not be empty"):
        accuracy_figure([])


def test_plot_accuracy_writes_a_png(tmp_path):
    path = plot_accuracy(_sweep(), tmp_path / "sub" / "accuracy.png", show_label_accuracy=True)
    data = path.read_bytes()
    assert path == tmp_path / "sub" / "accuracy.png"
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    with pytest.raises(ValueError, match=r"path must end in \.png"):
        plot_accuracy(_sweep(), tmp_path / "accuracy.pdf")


def test_tied_seeds_are_plotted(tmp_path):
    """Three seeds at accuracy 0.1: their float mean lands above their max (issue 65, item 9)."""
    from dpkd_audit.reports.accuracy import mean_and_spread

    assert 100.0 * sum([0.1] * 3) / 3 > 100.0 * 0.1  # the rounding that broke the plot
    assert mean_and_spread([0.1, 0.1, 0.1]) == (10.0, 0.0, 0.0)
    records = [_record(1.0, 0.1, seed=seed) for seed in range(3)]
    path = plot_accuracy(records, tmp_path / "tied.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --- references ------------------------------------------------------------------------------

def test_every_reference_is_sane_and_cited():
    assert len(PAPER_REFERENCES) >= 12
    for ref in PAPER_REFERENCES:
        assert ref.source.strip() and any(w in ref.source for w in ("Table", "Figure"))
        assert ref.method in {"rknn", "dpdfd", "dgd"}
        assert ref.dataset in {"mnist", "fashion-mnist"}
        assert 0.5 < ref.test_accuracy <= 1.0 and 0 < ref.epsilon <= 10
        assert ref.label_accuracy is None or 0.5 < ref.label_accuracy <= ref.test_accuracy
        assert ref.delta is None or 0 <= ref.delta < 1e-3
    keys = [(r.method, r.dataset, r.mode, r.epsilon, r.clusters) for r in PAPER_REFERENCES]
    assert len(set(keys)) == len(keys)


def test_references_for_filters_and_sorts():
    rknn = references_for("rknn", "MNIST")
    assert [(r.mode, r.epsilon) for r in rknn] == [("central", 0.01), ("central", 0.04),
                                                   ("central", 0.1), ("local-collision", 0.4)]
    assert [r.epsilon for r in references_for("dgd", "fashion-mnist")] == [1.0, 10.0]
    assert len(references_for("dpdfd", "mnist", mode="published")) == 2
    assert references_for("rknn", "cifar10") == ()


def test_paper_reference_validates():
    with pytest.raises(ValueError, match="test_accuracy must be a real number in \\(0, 1\\]"):
        PaperReference(method="x", dataset="y", mode="z", epsilon=1.0, test_accuracy=99.1,
                       source="s")
    with pytest.raises(ValueError, match="source must be a non-empty string"):
        PaperReference(method="x", dataset="y", mode="z", epsilon=1.0, test_accuracy=0.9,
                       source="")
    with pytest.raises(ValueError, match="epsilon"):
        PaperReference(method="x", dataset="y", mode="z", epsilon=-1.0, test_accuracy=0.9,
                       source="s")


def test_reports_import_neither_torch_nor_pipelines():
    code = ("import sys; import dpkd_audit.reports; "
            "print('torch' in sys.modules, any(m.startswith('dpkd_audit.pipelines') "
            "for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False False"


# --- seconds and the results overview --------------------------------------------------------

FULL_STAGES = {"data": 0.5, "representation": 6.0, "queries": 0.2, "reverse k-NN": 0.01,
               "release": 0.01, "labels": 0.0, "student": 17.0}


def _timed(epsilon, *, stages=FULL_STAGES, shared=None, **extra):
    seconds = dict(stages)
    seconds["total"] = sum(stages.values())
    record = _record(epsilon, 0.9, seconds=seconds, **extra)
    if shared is not None:
        record["shared_stages"] = shared
    return record


def test_rows_timing_fewer_stages_are_marked_and_explained():
    old = {k: v for k, v in FULL_STAGES.items() if k in ("release", "labels", "student")}
    records = [_timed(0.1, shared=["data", "representation"]), _timed(1.0, stages=old)]
    rows = _rows(markdown_table(records))
    assert rows[0]["seconds"] == "23.7"
    assert rows[1]["seconds"] == "17.0 †"
    note = seconds_note(records)
    assert "(data, representation, queries, reverse k-NN, release, labels, student)" in note
    assert "shares (data, representation)" in note
    assert note.count("†") == 1 and "they lack data, representation, queries, reverse k-NN" in note
    # All rows alike: no mark, no footnote; numbers as seconds are never marked.
    same = [_timed(0.1), _timed(1.0)]
    assert "†" not in markdown_table(same) and "†" not in seconds_note(same)
    plain = [_record(0.1, 0.9, seconds=3.0), _timed(1.0)]
    assert "†" not in markdown_table(plain)
    page = sweep_readme(records, command="x", title="t")
    assert note in page and "17.0 †" in page


def _write_folder(root, name, records):
    folder = root / name
    folder.mkdir(parents=True)
    _write_jsonl(folder / "results.jsonl", records)
    return folder


def test_results_overview_renders_table_notes_and_sources(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    prov = {"package": "dpkd-audit", "package_version": "9.9", "git_commit": "0123456789abcdef",
            "git_dirty": False, "created_utc": "2026-11-24T10:00:00Z"}
    new = [_timed(eps, shared=["data"], provenance=prov, cluster_purity=0.95)
           for eps in (0.1, 1.0)]
    old = [_timed(0.04, stages={"student": 5.0}, cluster_purity=0.95)]
    b = _write_folder(Path("reports"), "b-new", new)
    a = _write_folder(Path("reports"), "a-old", old)
    text = results_overview([b, a / "results.jsonl"])
    assert text == results_overview([str(a), str(b)])  # order and spelling do not matter
    assert text.startswith(markdown_table(old + new) + "\n\n")
    assert seconds_note(old + new) in text and text.endswith(".\n")
    assert "rknn mnist (hog-pca / small, s=40, k=1): 95.00%" in text
    sources = text.splitlines()[-1]
    assert sources.index("a-old") < sources.index("b-new")
    assert "[`a-old`](reports/a-old/) (1 run; no provenance recorded)" in sources
    assert ("[`b-new`](reports/b-new/) (2 runs; dpkd-audit 9.9, commit 0123456789, "
            "2026-11-24)") in sources
    dirty = dict(prov, git_dirty=True, git_commit=None)
    mixed = _write_folder(Path("reports"), "c", [_timed(0.1, provenance=dirty), _timed(1.0)])
    assert ("dpkd-audit 9.9, no git commit, 2026-11-24; 1 run without provenance"
            in results_overview([mixed]))
    with pytest.raises(ValueError, match="paths must be a non-empty sequence"):
        results_overview([])
    with pytest.raises(FileNotFoundError, match=r"no results\.jsonl or result\.json"):
        results_overview([tmp_path])


def test_results_overview_shows_teacher_beside_student(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    records = [_record(10.0, 0.95, method="dpdfd", mode="published", teacher_accuracy=0.9918,
                       epsilon_record_level=None),
               _record(1.0, 0.7565, method="dpdfd", mode="sound", teacher_accuracy=0.9531)]
    folder = _write_folder(Path("reports"), "dpdfd", records)
    text = results_overview([folder])
    assert ("dpdfd mnist published eps=10, seed 0: teacher 99.18% / student 95.00%; "
            "dpdfd mnist sound eps=1, seed 0: teacher 95.31% / student 75.65%.") in text
    assert "Teacher and student" not in results_overview(
        [_write_folder(Path("reports"), "rknn", [_record(1.0, 0.9)])])
    with pytest.raises(ValueError, match="teacher_accuracy"):
        validate_record(_record(1.0, 0.9, teacher_accuracy=1.5))


def test_results_name_the_classes_a_student_misses(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lost = {"teacher_labels": [10, 10], "released": [19, 1], "last_released_stage": [300, 1],
            "teacher_recall": [0.99, 0.986], "student_recall": [1.0, 0.0],
            "lost": {"1": "it left the release at stage 1 of 300: a class in no candidate set "
                          "is never released again"}}
    records = [_record(1.0, 0.7187, method="dpdfd", mode="published", teacher_accuracy=0.92,
                       epsilon_record_level=None, classes=lost),
               _record(1.0, 0.8194, method="dpdfd", mode="published", teacher_accuracy=0.92,
                       epsilon_record_level=None, seed=1, classes={**lost, "lost": {}})]
    text = results_overview([_write_folder(Path("reports"), "dpdfd", records)])
    assert ("Classes a student misses (test recall under a quarter of the teacher's; `classes` "
            "in each record): dpdfd mnist published eps=1, seed 0: class 1 (student 0.0%, "
            "teacher 98.6%; it left the release at stage 1 of 300: a class in no candidate set "
            "is never released again).") in text
    assert "seed 1: class" not in text
    # a cause that does not name the stage gets the stored last release stage, when early
    rare = {**lost, "lost": {"1": "the generator rarely makes it"}}
    text = results_overview([_write_folder(Path("rare"), "dpdfd", [
        _record(1.0, 0.7187, method="dpdfd", mode="published", teacher_accuracy=0.92,
                epsilon_record_level=None, classes=rare, stages=300)])])
    assert ("class 1 (student 0.0%, teacher 98.6%; the generator rarely makes it; last "
            "released at stage 1 of 300: a class in no candidate set is never released "
            "again).") in text
    late = {**rare, "last_released_stage": [300, 151]}
    text = results_overview([_write_folder(Path("late"), "dpdfd", [
        _record(1.0, 0.7187, method="dpdfd", mode="published", teacher_accuracy=0.92,
                epsilon_record_level=None, classes=late, stages=300)])])
    assert "class 1 (student 0.0%, teacher 98.6%; the generator rarely makes it)." in text
    assert "Classes a student misses" not in results_overview(
        [_write_folder(Path("reports"), "rknn", [_record(1.0, 0.9)])])


def test_sound_runs_are_compared_with_the_papers_record_level_baselines(tmp_path, monkeypatch):
    from dpkd_audit.reports import accuracy_figure
    from dpkd_audit.reports.references import RECORD_LEVEL_BASELINES, best_baseline

    monkeypatch.chdir(tmp_path)
    records = [_record(1.0, 0.93, method="dpdfd", mode="sound", epsilon_record_level=1.0,
                       delta=1e-5),
               _record(3.0, 0.96, method="dpdfd", mode="sound", epsilon_record_level=3.0,
                       delta=1e-5),
               _record(10.0, 0.95, method="dpdfd", mode="published",
                       epsilon_record_level=None)]
    text = results_overview([_write_folder(Path("reports"), "dpdfd", records)])
    # eps 3 has no baseline at 3: the best one at a smaller epsilon (DataLens at 1) is shown
    assert ("dpdfd mnist sound eps=1: 93.00% vs DataLens 71.23% (eps=1, delta=1e-05); "
            "dpdfd mnist sound eps=3: 96.00% vs DataLens 71.23% (eps=1, delta=1e-05).") in text
    assert "published eps=10: 95.00% vs" not in text     # infinite record-level: no comparison
    assert best_baseline("dpdfd", "mnist", 10.0).name == "DP-Sinkhorn"
    assert best_baseline("dpdfd", "mnist", 0.5) is None
    assert best_baseline("rknn", "mnist", 1.0) is None
    assert all(b.delta == 1e-5 for b in RECORD_LEVEL_BASELINES)
    fig = accuracy_figure(records)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    diamonds = [label for label in labels if label.startswith("best record-level method")]
    assert diamonds == ["best record-level method in the dpdfd paper's table, mnist "
                        "(DataLens, DP-Sinkhorn)"]
    assert not [label for label in accuracy_figure(records[2:]).axes[0].get_legend().get_texts()
                if label.get_text().startswith("best record-level")]


def test_teacher_accuracy_can_be_the_dashed_curve():
    from dpkd_audit.reports import accuracy_figure

    records = [_record(eps, 0.9 + eps / 100, method="dpdfd", mode="sound",
                       teacher_accuracy=0.95 + eps / 1000) for eps in (1.0, 10.0)]
    fig = accuracy_figure(records, dashed_metric="teacher_accuracy")
    ax = fig.axes[0]
    assert "dashed teacher accuracy" in ax.get_ylabel()
    lines = {line.get_label(): line for line in ax.get_lines()}
    teacher = lines["dpdfd mnist sound (teacher)"]
    assert list(teacher.get_ydata()) == pytest.approx([95.1, 96.0])
    assert teacher.get_linestyle() == "--"
    with pytest.raises(ValueError, match="not both"):
        accuracy_figure(records, dashed_metric="teacher_accuracy", show_label_accuracy=True)
    with pytest.raises(ValueError, match="metric must be one of"):
        accuracy_figure(records, dashed_metric="nope")


def test_a_stage_of_one_mode_does_not_mark_the_other_modes_seconds():
    records = [_record(1.0, 0.9, method="dpdfd", mode="published",
                       seconds={"teacher": 1.0, "total": 1.0}),
               _record(1.0, 0.9, method="dpdfd", mode="sound",
                       seconds={"teacher": 1.0, "statistics": 2.0, "total": 3.0}),
               _record(3.0, 0.9, method="dpdfd", mode="sound",
                       seconds={"teacher": 1.0, "total": 1.0})]
    table = markdown_table(records)
    assert table.count("†") == 1    # only the sound run without statistics
    assert "| 1.0 † |" in table
    assert "they lack statistics" in seconds_note(records)


def test_a_rebuilt_sweep_page_names_the_command_that_made_the_records():
    records = [_record(1.0, 0.9, command="dpkd sweep rknn --epsilons 1 --out x")]
    page = sweep_readme(records, command="dpkd sweep rknn --epsilons 1 --out x --resume",
                        title="T")
    assert "The records were made by:\n\n```bash\ndpkd sweep rknn --epsilons 1 --out x\n```" \
        in page
    same = sweep_readme(records, command="dpkd sweep rknn --epsilons 1 --out x", title="T")
    assert "The records were made by" not in same


def test_runs_with_different_label_counts_are_never_averaged():
    records = [_record(1.0, 0.58, method="dpdfd", mode="published", labels=40000, clusters=None,
                       k=None, representation=None),
               _record(1.0, 0.95, method="dpdfd", mode="published", labels=200000,
                       clusters=None, k=None, representation=None)]
    table = markdown_table(records)
    assert "| small / Q=40000 |" in table and "| small / Q=200000 |" in table
    assert "58.00" in table and "95.00" in table and "seeds 0, 0" not in table
    with pytest.raises(ValueError, match="labels"):
        validate_record(_record(1.0, 0.9, labels=0))


def test_query_counts_are_read_where_labels_are_absent():
    records = [_record(1.314, 0.10, method="dgd", mode="published", queries=27, clusters=None,
                       k=None, representation=None),
               _record(11.9, 0.12, method="dgd", mode="published", queries=1300,
                       clusters=None, k=None, representation=None)]
    table = markdown_table(records)
    assert "| small / Q=27 |" in table and "| small / Q=1300 |" in table
    # DGD's paper figures are matched by query count (its eps comes from PATE's analysis)
    rows = {line.split("|")[4].strip(): line for line in table.splitlines()
            if line.startswith("| dgd")}
    assert "| 10.00 | 73.60 |" in rows["small / Q=27"]
    assert "| 12.00 | 97.40 |" in rows["small / Q=1300"]
    with pytest.raises(ValueError, match="queries"):
        validate_record(_record(1.0, 0.9, queries=0))


def test_query_counts_one_per_budget_make_one_annotated_line():
    records = [_record(eps, acc, method="dgd", mode="sound", queries=q, clusters=None, k=None,
                       representation=None)
               for eps, acc, q in ((1.0, 0.94, 15), (3.0, 0.95, 105), (10.0, 0.92, 890))]
    ax = accuracy_figure(records).axes[0]
    ours = [line for line in ax.lines if line.get_label().startswith("dgd mnist sound")]
    assert len(ours) == 1 and list(ours[0].get_xdata()) == [1.0, 3.0, 10.0]
    assert "Q=" not in ours[0].get_label()
    assert sorted(t.get_text() for t in ax.texts if t.get_text().startswith("Q=")) == [
        "Q=105", "Q=15", "Q=890"]
    # two label counts at one epsilon stay two lines (an ablation), named by Q in the legend
    ablation = [_record(1.0, 0.58, method="dpdfd", mode="published", labels=40000,
                        clusters=None, k=None, representation=None),
                _record(1.0, 0.95, method="dpdfd", mode="published", labels=200000,
                        clusters=None, k=None, representation=None)]
    ax = accuracy_figure(ablation).axes[0]
    labels = sorted(line.get_label() for line in ax.lines
                    if line.get_label().startswith("dpdfd"))
    assert labels == ["dpdfd mnist published [Q=200000]", "dpdfd mnist published [Q=40000]"]


def test_dpimagebench_is_drawn_beside_the_sound_variants_only():
    from dpkd_audit.reports import accuracy_figure
    from dpkd_audit.reports.references import DPIMAGEBENCH_BASELINES, best_benchmark

    sound = [_record(1.0, 0.93, method="dpdfd", mode="sound", epsilon_record_level=1.0,
                     delta=1e-5)]
    labels = [t.get_text() for t in accuracy_figure(sound).axes[0].get_legend().get_texts()]
    assert [label for label in labels if label.startswith("DPImageBench")] == [
        "DPImageBench, best without public data, mnist (DP-FETA; delta 1.67e-6, best of 3 "
        "classifiers)"]
    assert [(b.epsilon, b.test_accuracy) for b in best_benchmark("fashion-mnist")] == [
        (1.0, 0.817), (10.0, 0.873)]
    # the benchmark's delta is 1/(N ln N) for its 55,000 training images, each row sourced
    assert all(abs(b.delta - 1.66575e-6) < 1e-10 and "DPImageBench" in b.source
               for b in DPIMAGEBENCH_BASELINES)
    rknn = [_record(1.0, 0.93, method="rknn", mode="central", epsilon_record_level=1.0,
                    delta=1e-5)]
    legend = accuracy_figure(rknn).axes[0].get_legend()
    assert legend is None or not any(t.get_text().startswith("DPImageBench")
                                     for t in legend.get_texts())
