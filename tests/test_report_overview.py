"""dpkd report: built from small synthetic records; every number traced back to its record."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from dpkd_audit import accountants
from dpkd_audit.cli.main import main
from dpkd_audit.events import (
    LaplaceNoisyMaxDpEvent,
    SelectiveRandomizedResponseDpEvent,
    event_to_json,
)
from dpkd_audit.reports.budgets import METHOD_RELATIONS, charges_of, plan_budget
from dpkd_audit.reports.collect import RecordKind, collect
from dpkd_audit.reports.overview_render import accuracy_panels, build_report
from dpkd_audit.reports.references import PAPER_REFERENCES

ROOT = Path(__file__).resolve().parent.parent


def _event(event) -> dict:
    return json.loads(event_to_json(event))


def _provenance(i: int) -> dict:
    return {"package": "dpkd-audit", "package_version": "0.1.0",
            "git_commit": f"{i:040x}", "git_dirty": False,
            "created_utc": f"2026-11-2{i % 10}T10:00:00Z"}


def _rknn(eps: float, seed: int, acc: float) -> dict:
    return {"method": "rknn", "dataset": "mnist", "mode": "central", "epsilon": eps,
            "epsilon_published": eps, "epsilon_record_level": eps, "delta": 0.0,
            "test_accuracy": acc, "seed": seed, "device": "cpu (2 threads, 2 cores)",
            "config": {"clusters": 10, "seed": seed, "epsilon": eps},
            "command": f"dpkd sweep rknn --epsilons {eps}", "seconds": {"a": 1.5, "total": 12.25},
            "provenance": _provenance(seed + 1),
            "charges": [{"seq": 1, "label": "counts", "event": _event(
                SelectiveRandomizedResponseDpEvent(epsilon=eps, num_classes=10))}]}


def _dpdfd(eps: float, acc: float) -> dict:
    return {"method": "dpdfd", "dataset": "mnist", "mode": "published", "epsilon": eps,
            "epsilon_published": eps, "epsilon_record_level": None, "delta": 1e-5,
            "test_accuracy": acc, "labels": 3000, "seed": 0, "config": {"epsilon": eps},
            "seconds": 33.0, "provenance": _provenance(7),
            "charges": [
                {"seq": 1, "label": "teacher without noise",
                 "event": {"__event__": "dp_accounting.dp_event:NonPrivateDpEvent",
                           "fields": {}}},
                *({"seq": 2 + s, "count": 1000, "label": f"stage {s + 1}/3: 1000 labels",
                   "event": _event(SelectiveRandomizedResponseDpEvent(epsilon=eps,
                                                                      num_classes=10))}
                  for s in range(3))]}


def _dgd(queries: int, acc: float) -> dict:
    return {"method": "dgd", "dataset": "fashion-mnist", "mode": "published",
            "epsilon": 0.05 * queries, "epsilon_published": 0.05 * queries,
            "epsilon_record_level": "inf", "delta": 1e-5, "test_accuracy": acc,
            "queries": queries, "seed": 0, "config": {"queries": queries},
            "provenance": _provenance(9),
            "charges": [{"seq": 1, "count": queries, "label": "LNMax queries", "event": _event(
                LaplaceNoisyMaxDpEvent(noise_scale=40.0, num_classes=10))}]}


def _write_records(base: Path) -> None:
    (base / "rknn").mkdir(parents=True)
    with open(base / "rknn" / "results.jsonl", "w") as f:
        for rec in (_rknn(0.1, 0, 0.9812), _rknn(0.1, 1, 0.9744), _rknn(1.0, 0, 0.9901)):
            f.write(json.dumps(rec) + "\n")
    (base / "dpdfd" / "run").mkdir(parents=True)
    (base / "dpdfd" / "run" / "result.json").write_text(json.dumps(_dpdfd(1.0, 0.6231)))
    (base / "dgd").mkdir()
    with open(base / "dgd" / "results.jsonl", "w") as f:
        f.write(json.dumps(_dgd(27, 0.1011)) + "\n\n" + json.dumps(_dgd(1300, 0.2032)) + "\n")
    (base / "audit").mkdir()
    (base / "audit" / "results.json").write_text(json.dumps([
        {"mechanism": "Laplace", "configuration": "epsilon=1", "epsilon_claimed": 1.0,
         "epsilon_lower": 0.9512, "verdict": "consistent", "samples_per_side": 100000,
         "seconds": 0.5, "provenance": _provenance(3)},
        {"mechanism": "BrokenLaplace", "configuration": "epsilon=1", "epsilon_claimed": 1.0,
         "epsilon_lower": 3.25, "verdict": "violation", "control": True,
         "samples_per_side": 100000, "provenance": _provenance(4)}]))
    (base / "audits" / "x").mkdir(parents=True)
    (base / "audits" / "x" / "audit.json").write_text(json.dumps({
        "kind": "pipeline-audit", "pipeline": "dgd", "dataset": "mnist", "mode": "published",
        "estimator": "one-run", "stage": "released student", "epsilon_claimed": 11.9,
        "epsilon_lower": 0.0, "verdict": "inconclusive", "canaries": 1000, "confidence": 0.95,
        "command": "dpkd audit-run dgd", "seconds": {"run": 745.0},
        "provenance": _provenance(5)}))
    (base / "audits" / "y").mkdir(parents=True)
    (base / "audits" / "y" / "audit.json").write_text(json.dumps({
        "kind": "pipeline-audit", "pipeline": "dpdfd", "dataset": "mnist", "mode": "sound",
        "estimator": "one-run", "stage": "DP-SGD teacher", "epsilon_claimed": 8.6167,
        "epsilon_lower": 0.8491, "epsilon_lower_fdp": 1.2372, "epsilon_lower_gaussian": 1.6571,
        "verdict": "inconclusive", "canaries": 1000, "confidence": 0.95,
        "command": "dpkd audit-run dpdfd", "seconds": {"train": 130.0},
        "provenance": _provenance(6)}))


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.cells: list[dict] = []
        self.headers: list[list[str]] = []
        self.rows: list[list[dict]] = []
        self._cell: dict | None = None
        self._stack: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag not in ("img", "meta"):
            self._stack.append(tag)
        if tag == "img":
            self.images.append(attrs["src"])
        elif tag == "thead":
            self.headers.append([])
        elif tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = {"tag": tag, "attrs": attrs, "text": "",
                          "table": len(self.headers) - 1}

    def handle_endtag(self, tag):
        assert self._stack and self._stack[-1] == tag, (tag, self._stack[-5:])
        self._stack.pop()
        if tag in ("td", "th") and self._cell is not None:
            if tag == "th":
                self.headers[-1].append(self._cell["text"])
            else:
                column = self.headers[self._cell["table"]][len(self.rows[-1])]
                self._cell["column"] = column
                self.rows[-1].append(self._cell)
                self.cells.append(self._cell)
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell["text"] += data


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    page.close()
    assert page._stack == [], page._stack
    return page


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    base = tmp_path_factory.mktemp("records")
    _write_records(base)
    out = base / "site"
    files = build_report([base], out, base=base, title="t", intro="i")
    return base, out, files


def _record_at(base: Path, ref: str) -> dict:
    source, line = ref.rsplit(":", 1)
    path, n = base / source, int(line)
    if path.suffix == ".jsonl":
        return json.loads(path.read_text().splitlines()[n - 1])
    data = json.loads(path.read_text())
    return data[n - 1] if isinstance(data, list) else data


def _first_number(text: str) -> float:
    return _shown(text)[0]


def _shown(text: str) -> tuple[float, float]:
    """The first number of a cell and half a unit of its last shown digit."""
    if text.startswith("∞"):
        return math.inf, 0.0
    match = re.search(r"-?([\d,]*)\.?(\d*)(?:e([+-]?\d+))?", text)
    assert match and match.group(0), text
    decimals = len(match.group(2)) if "." in match.group(0) else 0
    exponent = int(match.group(3) or 0)
    return float(match.group(0).replace(",", "")), 0.51 * 10.0 ** (exponent - decimals)


#: Budgets composed by _independent_budget, by accountant, relation, delta and the charges'
#: events and counts (many committed records share them; their labels differ).
_BUDGETS: dict[tuple, float] = {}


def _independent_budget(record: dict, short: str) -> float:
    """The record's epsilon under one accountant, composed here from its charges,
    independently of plan_budget."""
    name = {"pure": "PureAccountant", "advanced": "AdvancedCompositionAccountant",
            "optimal": "OptimalCompositionAccountant", "RDP": "RDPAccountant",
            "PLD": "PLDAccountant"}[short]
    relation = METHOD_RELATIONS[record["method"]]
    delta = float(record.get("delta") or 0.0)
    charges = [(event, count) for event, count, _ in charges_of(record)
               if type(event).__name__ != "NonPrivateDpEvent"]
    key = (name, relation, delta, tuple((event_to_json(e), c) for e, c in charges))
    if key not in _BUDGETS:
        acc = getattr(accountants, name)(neighboring_relation=relation)
        for event, count in charges:
            acc.compose(event, count=count)
        _BUDGETS[key] = float(acc.get_epsilon(delta))
    return _BUDGETS[key]


def _independent_value(records: list[dict], key: str, aggregate: str) -> float | None:
    if aggregate == "count":
        return float(len(records))
    values = []
    for r in records:
        if key == "test_accuracy":
            values.append(100 * r["test_accuracy"])
        elif key == "epsilon_record_level":
            v = r.get("epsilon_record_level")
            values.append(math.inf if v is None or v == "inf" else float(v))
        elif key == "epsilon_published":
            values.append(float(r.get("epsilon_published", r["epsilon"])))
        elif key == "labels":
            values.append(float(r.get("labels", r.get("queries"))))
        elif key == "seconds":
            s = r["seconds"]
            values.append(float(s["total"] if "total" in s else sum(s.values()))
                          if isinstance(s, dict) else float(s))
        elif key.startswith("budget:"):
            values.append(_independent_budget(r, key.split(":", 1)[1]))
        else:
            values.append(float(r[key]))
    if aggregate == "mean":
        return sum(values) / len(values)
    assert all(math.isclose(v, values[0], rel_tol=1e-12) for v in values), (key, values)
    return values[0]


#: Columns whose text may hold digits without being a number of the records (labels).
_LABEL_COLUMNS = {"method", "mode", "setup", "plan (ledger charges)", "record", "run", "command",
                  "device", "configuration", "mechanism", "attack", "what is audited",
                  "pipeline", "dataset", "verdict"}


def test_every_number_traces_to_its_record(built):
    base, out, _ = built
    assert _check_traceable(base, _parse(out / "index.html")) > 60


def _check_traceable(base: Path, page: _Page) -> int:
    """Check every table cell of ``page`` against the records it names; return how many."""
    checked = 0
    for cell in page.cells:
        key = cell["attrs"].get("data-key")
        text = cell["text"]
        if key is None:
            assert cell["column"] in _LABEL_COLUMNS or not re.search(r"\d", text), \
                (cell["column"], text)
            continue
        refs = cell["attrs"]["data-src"].split(" ") if key != "paper" else []
        if key == "paper":
            source, eps = cell["attrs"]["data-src"].removeprefix("paper: ").split(" @ epsilon ")
            ref = [r for r in PAPER_REFERENCES if r.source == source
                   and math.isclose(r.epsilon, float(eps), rel_tol=1e-3)]
            assert ref and math.isclose(_first_number(text), 100 * ref[0].test_accuracy,
                                        abs_tol=0.05)
            checked += 1
            continue
        records = [_record_at(base, r) for r in refs]
        if key == "provenance.git_commit":
            assert all(r["provenance"]["git_commit"].startswith(text.split()[0]) for r in records)
        elif key == "provenance.created_utc":
            assert all(r["provenance"]["created_utc"] == text for r in records)
        else:
            expected = _independent_value(records, key, cell["attrs"].get("data-aggregate",
                                                                           "same"))
            shown, half_unit = _shown(text)
            if math.isinf(expected):
                assert math.isinf(shown), (key, text)
            else:  # equal to the shown precision
                assert abs(shown - expected) <= half_unit * (1 + 1e-9), \
                    (key, text, expected, refs)
        checked += 1
    return checked


def test_budget_figures_match_closed_forms(built):
    _base, out, _ = built
    dgd = _dgd(1300, 0.2)
    budget = plan_budget(dgd)
    # LNMax with Laplace scale b on unit-sensitivity counts is 2/b-DP per query (DGD Sec. III-C)
    assert budget.epsilons["pure"] == pytest.approx(1300 * 2 / 40.0)
    assert budget.non_private == 0
    dpdfd = plan_budget(_dpdfd(1.0, 0.6))
    assert dpdfd.non_private == 1 and dpdfd.record_level_infinite
    assert dpdfd.epsilons["pure"] == pytest.approx(3000 * 1.0)  # basic composition of SRR
    assert "3 stages" in dpdfd.plan and "NOT DP" in dpdfd.plan
    text = (out / "report.md").read_text()
    assert "| mnist | published | 3,000 |" in text


def test_page_is_self_contained_and_markdown_matches(built):
    _base, out, files = built
    page = _parse(out / "index.html")
    html = (out / "index.html").read_text()
    assert not re.search(r"(src|href)=\"(https?:)?//", html)
    assert sorted(page.images) == sorted(p.name for p in files.figures)
    for src in page.images:
        assert (out / src).is_file() and (out / src).stat().st_size > 1000
    md = (out / "report.md").read_text()
    md_rows = [line for line in md.splitlines() if line.startswith("| ")
               and not line.startswith("| method |")]
    html_rows = [row for row in page.rows if row]
    body_rows = [line for line in md_rows if not any(
        line == "| " + " | ".join(h) + " |" for h in page.headers)]
    assert len(body_rows) == len(html_rows)
    for line, row in zip(body_rows, html_rows, strict=True):
        assert line == "| " + " | ".join(c["text"].replace("|", "\\|") for c in row) + " |"
    for image in page.images:
        assert f"]({image})" in md


def test_infinite_record_level_runs_are_drawn_not_dropped(built):
    base, _, _ = built
    from dpkd_audit.reports.overview import series_of

    series = series_of(collect([base], base=base))
    fig = accuracy_panels(series, "fashion-mnist")
    right = fig.axes[1]
    labels = [t.get_text() for t in right.get_xticklabels()]
    assert labels[-1].startswith("inf")
    inf_x = right.get_xticks()[-1]
    xs = [x for line in right.get_lines() for x in line.get_xdata()]
    assert sum(1 for x in xs if math.isclose(x, inf_x)) >= 2  # both DGD runs
    fig.clf()


def test_pipeline_audits_show_the_one_run_analyses_side_by_side(built):
    _base, out, _ = built
    md = (out / "report.md").read_text()
    assert ("| lower bound | f-DP bound | Gaussian estimate | verdict | size |" in md)
    assert "| 0.8491 | 1.237 | 1.657 | inconclusive | 1,000 canaries |" in md
    assert "| 0 | - | - | inconclusive | 1,000 canaries |" in md
    assert "an estimate under that model, not a bound" in md


def test_seeds_are_one_point_with_their_spread(built):
    _base, out, _ = built
    md = (out / "report.md").read_text()
    # 98.12 and 97.44 -> mean 97.78, range shown; 2 runs
    assert "| 97.78 (97.44-98.12) | 2 |" in md


def test_collect_sorts_kinds_and_refuses_bad_input(tmp_path, built):
    base, _, _ = built
    records = collect([base], base=base, skip=base / "site")
    kinds = [r.kind for r in records]
    assert kinds.count(RecordKind.RESULT) == 6
    assert kinds.count(RecordKind.MECHANISM_AUDIT) == 2
    assert kinds.count(RecordKind.PIPELINE_AUDIT) == 2
    assert {r.ref for r in records if r.source == "dgd/results.jsonl"} == {
        "dgd/results.jsonl:1", "dgd/results.jsonl:3"}
    with pytest.raises(ValueError, match="does not exist"):
        collect([tmp_path / "missing"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no record found"):
        collect([tmp_path / "empty"])
    bad = tmp_path / "bad" / "results.jsonl"
    bad.parent.mkdir()
    bad.write_text(json.dumps({"method": "rknn", "dataset": "mnist"}) + "\n")
    with pytest.raises(ValueError, match=r"results.jsonl:1: not a result record \(missing mode"):
        collect([bad])
    bad.write_text("{not json\n")
    with pytest.raises(ValueError, match=r"results\.jsonl:1: malformed JSON"):
        collect([bad])
    bad.write_text(json.dumps({**_rknn(0.1, 0, 1.5)}) + "\n")
    with pytest.raises(ValueError, match="test_accuracy"):
        collect([bad])


def test_cli_errors_write_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["report", str(tmp_path / "nope"), "--out", str(out)]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "result.json").write_text(json.dumps({"a": 1}))
    assert main(["report", str(tmp_path / "r"), "--out", str(out)]) == 2
    assert "result.json:1: not a result record" in capsys.readouterr().err
    assert not out.exists()
    assert main(["report", str(tmp_path / "r")]) == 2
    assert "--out is required" in capsys.readouterr().err


def test_method_relations_are_the_pipelines_ledgers():
    pytest.importorskip("torch")
    from dpkd_audit.pipelines.dgd import DgdConfig
    from dpkd_audit.pipelines.dgd.pipeline import ledger_for as dgd_ledger
    from dpkd_audit.pipelines.dpdfd import DpdfdConfig
    from dpkd_audit.pipelines.dpdfd.pipeline import ledger_for as dpdfd_ledger
    from dpkd_audit.pipelines.rknn.config import RknnConfig
    from dpkd_audit.pipelines.rknn.release import ledger_for as rknn_ledger

    assert rknn_ledger(RknnConfig(epsilon=1.0)).identity.neighboring_relation == \
        METHOD_RELATIONS["rknn"].name
    sound = DgdConfig.small(dataset="digits", mode="sound", epsilon=10.0)
    assert dgd_ledger(sound).identity.neighboring_relation == METHOD_RELATIONS["dgd"].name
    dpdfd = DpdfdConfig.small(dataset="digits", mode="sound", epsilon=10.0)
    assert dpdfd_ledger(dpdfd).identity.neighboring_relation == METHOD_RELATIONS["dpdfd"].name


def test_committed_front_page_is_rebuilt_from_the_committed_records(tmp_path):
    """reports/overview/report.md is what `dpkd report` makes of the committed records now."""
    out = tmp_path / "overview"
    assert main(["report", "--out", str(out), "--quiet"]) == 0
    fresh = (out / "report.md").read_text()
    committed = (ROOT / "reports" / "overview" / "report.md").read_text()

    def without_command(text: str) -> str:
        return re.sub(r"Command: `dpkd report[^`]*`", "Command: `dpkd report`", text)

    assert without_command(fresh) == without_command(committed), \
        "reports/overview is stale: run `dpkd report` and commit reports/overview/"
    page = _parse(out / "index.html")
    assert len(page.images) >= 4
    assert _check_traceable(ROOT, page) > 500


@pytest.mark.skipif(shutil.which("chromium") is None and shutil.which("chromium-browser") is None,
                    reason="Chromium is not installed (apt-get install chromium)")
@pytest.mark.parametrize("width", [800, 1400])
def test_page_renders_in_headless_chromium(built, width):
    """Every figure loads and fits the window (no horizontal overflow) at 800 and 1400 px."""
    _, out, files = built
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    done = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000",
         f"--window-size={width},1000", "--dump-dom", (out / "index.html").resolve().as_uri()],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    body = re.search(r"<body([^>]*)>", done.stdout)
    assert body, done.stdout[:500]
    attrs = dict(re.findall(r'data-([\w-]+)="([^"]*)"', body.group(1)))
    assert "errors" not in attrs, attrs
    assert attrs.get("figures") == str(len(files.figures))
    assert attrs.get("figures-loaded") == str(len(files.figures))
    assert attrs.get("figures-overflowing") == "0", attrs
    # figures are drawn for ~1,000 px: at 800 px they shrink, but not below ~70%
    assert float(attrs["smallest-figure-scale"]) >= (0.7 if width == 800 else 0.99), attrs


def test_rebuild_removes_figures_it_no_longer_draws(tmp_path):
    base = tmp_path / "records"
    _write_records(base)
    out = tmp_path / "site"
    out.mkdir()
    (out / "accuracy-digits.png").write_bytes(b"old")
    (out / "keep.txt").write_text("not ours")
    files = build_report([base], out, base=base)
    assert not (out / "accuracy-digits.png").exists()
    assert (out / "keep.txt").exists()
    assert {p.name for p in out.glob("*.png")} == {p.name for p in files.figures}


# ------------------------------------------------------------------ records are input (issue 33)
def _write(folder: Path, records: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records),
                                          encoding="utf-8")
    return folder


def test_a_dataset_name_from_a_record_never_becomes_a_path(tmp_path):
    record = _rknn(1.0, 0, 0.9)
    record["dataset"] = "x/../../ESCAPED"
    base = _write(tmp_path / "a" / "b" / "in", [record])
    out = tmp_path / "a" / "b" / "out"
    build_report([base], out, base=base)
    pngs = list(tmp_path.rglob("*.png"))
    assert pngs and {p.parent for p in pngs} == {out}


@pytest.mark.parametrize("text, message", [
    ("[" * 100_000 + "]" * 100_000, "nested deeper than 64"),
    ('{"a": NaN}', "NaN is not a value"),
    ('{"label": "\\ud800"}', "not valid Unicode"),
])
def test_hostile_json_is_refused_with_file_and_line(tmp_path, text, message):
    from dpkd_audit.reports.records import load_records

    folder = tmp_path / "in"
    folder.mkdir()
    path = folder / "results.jsonl"
    path.write_text(json.dumps(_rknn(1.0, 0, 0.9)) + "\n" + text + "\n", encoding="utf-8")
    for load in (lambda: collect([folder]), lambda: load_records(path)):
        with pytest.raises(ValueError, match=rf"results\.jsonl:2: .*{message}"):
            load()
    assert main(["report", str(folder), "--out", str(tmp_path / "o"), "--quiet"]) == 2


@pytest.mark.parametrize("bad", [float("-inf"), -0.5, "1.0", None])
def test_an_audit_bound_that_is_not_a_number_is_refused(tmp_path, bad):
    record = {"mechanism": "Laplace", "epsilon_claimed": 1.0, "epsilon_lower": bad,
              "verdict": "consistent"}
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps([record]), encoding="utf-8")
    with pytest.raises(ValueError, match=r"results\.json:1: epsilon_lower must be a finite"):
        collect([folder])


def test_markup_in_records_comes_out_inert(tmp_path):
    hostile = '<img src=x onerror=alert(1)> "q\' </script><script>alert(2)</script>'
    record = _rknn(1.0, 0, 0.9)
    record["command"] = hostile
    record["device"] = hostile
    base = _write(tmp_path / "in", [record])
    out = tmp_path / "out"
    build_report([base], out, base=base, title=hostile, intro=hostile)
    page = (out / "index.html").read_text(encoding="utf-8")
    markdown = (out / "report.md").read_text(encoding="utf-8")
    for text in (page, markdown):
        assert "<img src=x" not in text and "<script>alert" not in text
        assert "&lt;img src=x onerror=alert(1)&gt;" in text
