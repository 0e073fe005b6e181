"""Integrations: how the workers talk to what is outside the cluster: GitHub's REST API
(`github`), Slack-compatible notification webhooks (`notify`), git itself (`git_lanes`, worktree
lanes), and, through `http`, the model providers' HTTP APIs (`ade_workers.agents.providers`).

`http.py` is the one HTTP client they share (retries, Retry-After, deadlines, scrubbing, status
mapping) and the one error pair they raise. This room imports only `ade_tasks` and httpx, so
any part of the workers may import it and it imports none of them back.
"""
