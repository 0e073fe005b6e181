"""The monitoring files of deploy/ (issue 37, finding 11): Prometheus alert rules that promtool
(Debian's `prometheus` package, installed by `make test`) checks and unit-tests, every alert
exercised by a unit test, and a Grafana dashboard valid against the JSON schema in
tests/fixtures/grafana. That every metric they use is one the API exports is checked against a
real scrape in tests/integration/test_metrics.py (`used_metrics`)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
ALERTS = ROOT / "deploy" / "prometheus" / "ade-alerts.yml"
ALERT_TESTS = ROOT / "deploy" / "prometheus" / "ade-alerts.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "ade-dashboard.json"
DASHBOARD_SCHEMA = ROOT / "tests" / "fixtures" / "grafana" / "dashboard.schema.json"
#: Series Prometheus makes itself for every scrape target, not read from /metrics.
PROMETHEUS_OWN = {"up"}
#: An ADE metric name in PromQL; a histogram's or counter's series carry a suffix of its family.
METRIC = re.compile(r"\b(ade_[a-z0-9_]+|up)\b(?!\s*\()")


def promtool() -> str:
    """The promtool binary: skip locally without it, fail under CI (`make test` installs it)."""
    found = shutil.which("promtool")
    if found is None:
        message = "promtool is not installed (Debian: apt-get install prometheus; make test does)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def alert_rules() -> list[dict[str, Any]]:
    return [
        rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]
    ]


def dashboard() -> dict[str, Any]:
    document = json.loads(DASHBOARD.read_text())
    assert isinstance(document, dict)
    return document


def used_metrics() -> dict[str, set[str]]:
    """Each metric name the alerts and the dashboard use, with where it is used."""
    used: dict[str, set[str]] = {}
    expressions = [(f"alert {r['alert']}", r["expr"]) for r in alert_rules()]
    expressions += [
        (f"panel {panel['title']!r}", target["expr"])
        for panel in dashboard()["panels"]
        for target in panel["targets"]
    ]
    for where, expression in expressions:
        # Label matchers and values ({rule="x"}) are not metric names.
        bare = re.sub(r'\{[^}]*\}|"[^"]*"', "", str(expression))
        for name in METRIC.findall(bare):
            if name not in PROMETHEUS_OWN:
                used.setdefault(name, set()).add(where)
    return used


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=ALERTS.parent)


def test_promtool_accepts_the_alert_rules() -> None:
    checked = run(promtool(), "check", "rules", ALERTS.name)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in checked.stdout


def test_the_alerts_pass_their_unit_tests() -> None:
    tested = run(promtool(), "test", "rules", ALERT_TESTS.name)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_has_a_unit_test_that_fires_it() -> None:
    tests = yaml.safe_load(ALERT_TESTS.read_text())
    assert tests["rule_files"] == [ALERTS.name]
    fired = {
        case["alertname"]
        for group in tests["tests"]
        for case in group["alert_rule_test"]
        if case.get("exp_alerts")
    }
    untested = [rule["alert"] for rule in alert_rules() if rule["alert"] not in fired]
    assert not untested, f"{ALERT_TESTS.name}: no test fires {untested}; add one"


def test_every_alert_says_what_to_do() -> None:
    for rule in alert_rules():
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]


def test_a_broken_rule_file_is_refused(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text("groups:\n  - name: x\n    rules:\n      - alert: X\n        expr: rate(\n")
    checked = run(promtool(), "check", "rules", str(broken))
    assert checked.returncode != 0


def schema_errors(document: Any) -> list[str]:
    validator = jsonschema_rs.validator_for(json.loads(DASHBOARD_SCHEMA.read_text()))
    return [
        f"{DASHBOARD.name} at /{'/'.join(map(str, error.instance_path))}: {error.message}"
        for error in validator.iter_errors(document)
    ]


def test_the_dashboard_is_valid_against_the_schema() -> None:
    assert schema_errors(dashboard()) == []


def test_the_schema_refuses_a_broken_dashboard() -> None:
    broken = dashboard()
    broken["panels"][0]["gridPos"]["w"] = 30
    broken["panels"][1]["targets"][0].pop("expr")
    broken["schemaVersion"] = "39"
    errors = schema_errors(broken)
    assert len(errors) == 3, errors
    assert any("/panels/0/gridPos/w" in error for error in errors), errors


def test_the_dashboard_panels_fit_and_use_its_datasource_variable() -> None:
    board = dashboard()
    variables = {v["name"] for v in board["templating"]["list"] if v["type"] == "datasource"}
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    cells: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, f"panel {panel['title']!r} is wider than the grid"
        area = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"])
                for y in range(grid["y"], grid["y"] + grid["h"])}  # fmt: skip
        assert not area & cells, f"panel {panel['title']!r} overlaps another"
        cells |= area
        for source in [panel["datasource"], *(t["datasource"] for t in panel["targets"])]:
            assert source["uid"].strip("${}") in variables, (panel["title"], source)


def test_the_alerts_and_the_dashboard_use_ade_metrics() -> None:
    used = used_metrics()
    assert {"ade_database_up", "ade_queue_depth", "ade_runs"} <= used.keys()
    assert "ade_run_duration_seconds_bucket" in used  # a histogram's series, by its suffix
