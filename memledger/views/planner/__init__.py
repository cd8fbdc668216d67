"""The Planner page: its settings and the views of a Plan (scatter, top table, share links)."""
