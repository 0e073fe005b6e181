"""AI agent sessions: what the engine lets an agent see and do, decided without the model."""
