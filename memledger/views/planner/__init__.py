"""The planner page. the page's settings and the views of a Plan (scatter, top table, share links)."""
