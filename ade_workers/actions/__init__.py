"""Action executors: one module per action type behind one protocol (`base`), and the registry
of them (`registry`). This package imports nothing itself, so any module may import `base`."""
