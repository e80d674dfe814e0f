"""The evaluation harness (`manage.py mission_eval`): a suite of missions, each a small repository
or a document set with an oracle, run through the real launch path and kernel, judged by the
oracle alone, and reported as completion rate, tokens and cost per completed task, and wall time.

`suite` loads a suite (a directory of tasks) and builds each task's scripts for the offline
model; `oracle` judges a finished mission (tests in the sandbox, or the final answer against the
expected one); `runner` runs the tasks and writes the table.
"""
