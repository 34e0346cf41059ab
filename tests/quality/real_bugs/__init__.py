"""Real budget bugs that engines shipped, each written as the user policy or loop variant an
engineer would have written (``test_real_bugs.py`` runs ``tokenbudget check`` on each)."""
