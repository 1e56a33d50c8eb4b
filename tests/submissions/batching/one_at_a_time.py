# Valid and within the bound at light load, but pays the fixed cost for every request.
def schedule(waiting, now):
    return [0]
