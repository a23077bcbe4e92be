"""What reads finished runs: the comparison of training workdirs (compare.py with runs.py and
compare_against.py: tables, curves), the attention explorer page (explorer.py and its
explorer.js), prompt.py's and generate.py's commands on a workdir (prompt_commands.py,
prompt_continuation.py), and eval.py's evaluation of a workdir that writes them (run_eval.py).
What reads and edits a model's insides (head effects, attribution, the layers x heads map) is
`interpret/`, which these modules call.

It sits above `training/`, which never imports it; pictures a task draws of its own examples stay
in `tasks/`. Import the modules themselves: `from reports import compare`.
"""
