"""Worked examples of extending the framework (README, "Extending"); tests/workflow/test_extending.py runs them."""
