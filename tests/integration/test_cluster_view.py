"""Issue 37, finding 7: `ade-tasks providers` in a second shell said "not ready" of a provider
the running cluster uses. Now the CLI shows the cluster's own view (asked of the real API
process) beside its own, for providers and settings, and never a secret."""

from __future__ import annotations

import json

from tests.integration.conftest import Cluster
from tests.integration.test_cli_cluster import cli

KEY = "sk-cluster-only-4242"


def test_the_cli_shows_the_clusters_providers_and_settings_beside_its_own(
    cluster: Cluster,
) -> None:
    # Given an API whose settings carry an OpenAI key that this shell does not have
    api = cluster.api(env={"ADE_PROVIDERS__OPENAI__API_KEY": KEY})
    url = str(api.base_url)
    # When this shell asks for the providers
    shown = cli(cluster, "providers", "--url", url)
    # Then it shows its own view and the cluster's, labelled, and says which one runs use
    assert shown.returncode == 0, shown.stderr
    mine, _, theirs = shown.stdout.partition("the cluster (as its API at")
    assert mine.startswith("this shell") and "openai       not ready" in mine
    assert "openai       ready" in theirs
    assert "ADE_PROVIDERS__OPENAI__API_KEY" in theirs
    assert "note: openai is ready in the cluster but not in this shell" in shown.stdout
    as_json = json.loads(cli(cluster, "providers", "--url", url, "--json").stdout)
    ready = {p["name"]: p["ready"] for p in as_json["cluster"]}
    assert ready["openai"] and not {p["name"]: p["ready"] for p in as_json["local"]}["openai"]
    # When it asks for the settings
    settings = cli(cluster, "settings", "--url", url)
    # Then the key is marked as differing, shown as set, never as its value
    assert settings.returncode == 0, settings.stderr
    line = next(x for x in settings.stdout.splitlines() if "PROVIDERS__OPENAI__API_KEY" in x)
    assert line.split() == ["ADE_PROVIDERS__OPENAI__API_KEY", "*", "(default)", "(set)"]
    assert KEY not in shown.stdout + settings.stdout + json.dumps(as_json)


def test_without_a_reachable_api_the_cli_shows_its_own_view_and_says_why(
    cluster: Cluster,
) -> None:
    shown = cli(cluster, "providers", "--url", "http://127.0.0.1:9")
    assert shown.returncode == 0, shown.stderr
    assert "this shell" in shown.stdout
    assert "the cluster: no API answered at http://127.0.0.1:9" in shown.stdout
