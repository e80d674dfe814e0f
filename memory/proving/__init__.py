"""The memory benchmark's proving code: question sets, their evaluation and the development
sets' generator. Only `manage.py memory_eval` and the tests import it; no product module does."""
