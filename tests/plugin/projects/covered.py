# A module only the job's processes run (for coverage of the ranks): line 5 never runs.
def only_in_the_job(x):
    if x > 0:
        return "positive"
    return "not positive"
