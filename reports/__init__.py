"""What reads finished runs: the comparison of training workdirs (compare.py with runs.py and
compare_against.py: tables, curves), the attention explorer page (explorer.py and its
explorer.js), head ablation sweeps (head_ablation.py), and eval.py's evaluation of a workdir
that writes them (run_eval.py).

It sits above `training/`, which never imports it; pictures a task draws of its own examples stay
in `tasks/`. Import the modules themselves: `from reports import compare`.
"""
