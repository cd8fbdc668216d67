"""The strategies page. storage policies per tensor class, what each costs, and the advisor's answers."""
