"""Custom webhooks as the cluster's settings declare them (`ADE_HOOKS__<name>`): a hook's
configuration and filters (`config`) and how a delivery's signature, token and timestamp are
checked (`signatures`). Imports only the basics of `ade_tasks`, so the settings can hold hooks and
both the intake (`ade_tasks.ingress`) and the webhook trigger (`ade_tasks.triggers.webhook`) use
them."""
