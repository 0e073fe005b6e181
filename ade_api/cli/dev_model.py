"""`ade-tasks dev-model`: a scripted stand-in for the Anthropic Messages API, for trying an
`agent-session` step with no provider account (docs/recipes/try-an-agent-step.md)."""

from __future__ import annotations

from pathlib import Path

import click

from ade_api.cli.root import fail, main

DEFAULT_PORT = 8765


@main.command("dev-model")
@click.option("--port", type=int, default=DEFAULT_PORT, show_default=True, help="port on 127.0.0.1")
@click.option(
    "--script",
    type=click.Path(path_type=Path, dir_okay=False),
    help="YAML file of the turns to answer with (`turns:` each `text:` and/or `tool:` + `input:`); "
    "default: one harmless look around the worktree, then a summary",
)
def dev_model(port: int, script: Path | None) -> None:
    """Serve a SCRIPTED STAND-IN, NOT A MODEL, as the Anthropic Messages API on 127.0.0.1.

    Point the `anthropic` provider at it: ADE_PROVIDERS__ANTHROPIC__BASE_URL=
    http://127.0.0.1:PORT and any ADE_PROVIDERS__ANTHROPIC__API_KEY (masked in all
    output like every key, so not a common word such as `dev`). Each agent session gets the
    script's turns in order, whatever it is asked; nothing leaves the machine.
    """
    from ade_api.dev_model import ScriptAnswer, ScriptedAnthropic, ScriptError, load_script

    try:
        turns = load_script(script) if script is not None else None
    except ScriptError as exc:
        fail(str(exc))
    try:
        server = ScriptedAnthropic(port=port, answer=ScriptAnswer(turns))
    except OSError as exc:
        fail(f"cannot listen on 127.0.0.1:{port} ({exc.strerror}); choose another with --port")
    what = f"the script {script}" if script is not None else "the default script"
    click.echo(
        f"dev model (a scripted stand-in, not a model) on {server.url}, answering with {what}\n"
        f"  export ADE_PROVIDERS__ANTHROPIC__BASE_URL={server.url}\n"
        "  export ADE_PROVIDERS__ANTHROPIC__API_KEY=not-a-real-key  # any; masked in output",
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
