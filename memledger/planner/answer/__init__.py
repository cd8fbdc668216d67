"""What a search returns: plan() (search), the Plan (result), the page's table (groups), one
layout's step by term (breakdown), the published trainings (reference)."""
