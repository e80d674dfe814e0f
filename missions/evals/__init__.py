"""The evaluation harness (`manage.py mission_eval`): a suite of missions, each a small repository
or a document set with an oracle, run through the real launch path and kernel, judged by the
oracle alone, and reported as completion rate, tokens and cost per completed task, and wall time.

`suite` loads a suite (a directory of tasks) and builds each task's scripts for the offline
model (`plays`: those of the figures and citations kinds); `oracle` judges a finished mission
(tests in the sandbox, or the final answer: the expected one, figures within a tolerance,
passages found again in their sources); `site` serves a task's pages on 127.0.0.1; `runner` runs
the tasks and writes the table. Shipped suites: `default`, and one per domain profile
(`research`, `programming`, `analysis`, `automation`).
"""
