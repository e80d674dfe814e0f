"""The cluster's proving code: what the tests, `manage.py testnodes` and the chaos cases stand up
to exercise the cluster for real. No product module imports it."""
