"""What proves the missions app and is not part of it: the workspace chaos cases (`chaos` and its
`chaos_*` cases), the scripted supervisor scenario (`scenarios`) and the engine benchmark
(`bench`). Only management commands, settings' dotted strings and tests reach in here; no
product module imports it.
"""
