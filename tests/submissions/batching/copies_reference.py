def schedule(waiting, now):
    return engine.reference_schedule(waiting, now)
