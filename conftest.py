# Makes the repo root importable for `pytest` (the project is run from its folder, not installed).
pytest_plugins = ["tests.time_budget"]
