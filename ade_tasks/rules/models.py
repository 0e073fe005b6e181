"""Every model of the rule document, in one import for the callers that have not moved to the
concept's own module yet: `base` (patterns, bounds, the strict base model), `triggers`,
`agent`, `steps`, `guardrails`, `outputs` and `rule`. New code imports from those."""

from ade_tasks.rules.agent import *  # noqa: F403
from ade_tasks.rules.base import *  # noqa: F403
from ade_tasks.rules.guardrails import *  # noqa: F403
from ade_tasks.rules.outputs import *  # noqa: F403
from ade_tasks.rules.rule import *  # noqa: F403
from ade_tasks.rules.steps import *  # noqa: F403
from ade_tasks.rules.triggers import *  # noqa: F403
