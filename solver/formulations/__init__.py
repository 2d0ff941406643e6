"""Inner optimisation problems of the search (one formulation per module)."""
