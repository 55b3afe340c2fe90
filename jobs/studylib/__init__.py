"""The parts of jobs/study.py: spec (the study file), launch (local and Slurm runs),
records (run records of points), report (CSV, Markdown, plots)."""
