"""bench/: suites (suites/), one timing harness (harness.py), one runner (``python -m bench``), and
studies (studies/, investigations that answer one question each). See bench/README.md."""
