"""Can this host make a sandbox? Checked once per process, with what to do when it cannot."""

from __future__ import annotations

import functools
import shutil
import subprocess

from ade_tasks.errors import AdeError

SETTING = "ADE_SANDBOX"
BWRAP = "bwrap"
_PROBE_TIMEOUT = 10.0

HOST_NEEDS = (
    "the host must have bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) and allow "
    "unprivileged user namespaces (sysctl user.max_user_namespaces > 0, and on Ubuntu "
    "kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for bwrap); in a "
    "container or Kubernetes pod, run without a seccomp profile that blocks unshare/clone "
    "(seccompProfile: Unconfined) or grant the pod what docs/agents.md#security-model lists"
)


class SandboxUnavailable(AdeError):
    """No sandbox can be made here, and the settings require one."""


@functools.cache
def sandbox_problem() -> str | None:
    """Why no sandbox can be made on this host (None: one can). Probed once per process by
    starting `bwrap` with every namespace the engine's sandboxes use."""
    binary = shutil.which(BWRAP)
    if binary is None:
        return f"bubblewrap (`{BWRAP}`) is not on PATH"
    probe = [
        binary, "--unshare-all", "--unshare-user", "--die-with-parent", "--cap-drop", "ALL",
        "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "true",
    ]  # fmt: skip
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=_PROBE_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`{BWRAP}` could not be run: {exc}"
    if done.returncode != 0:
        return f"`{BWRAP}` cannot create namespaces here: {done.stderr.strip() or done.returncode}"
    return None


def require_sandbox(what: str) -> str:
    """The bwrap binary to run `what` in, or SandboxUnavailable saying what the host needs."""
    problem = sandbox_problem()
    if problem is not None:
        raise SandboxUnavailable(
            f"{what} runs only in a sandbox, and none can be made here: {problem}; {HOST_NEEDS}. "
            f"An admin may run agents and command steps without one by setting {SETTING}=off "
            "(every agent's capability report and every step's result then says so)"
        )
    return _bwrap_binary()


@functools.cache
def _bwrap_binary() -> str:
    return shutil.which(BWRAP) or BWRAP
