"""The Strategies page: storage policies per tensor class, what each costs, the advisor's
answers."""
