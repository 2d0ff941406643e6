"""Orchestration between the HTTP layer and the planner (catalog, cost models, solver)."""
